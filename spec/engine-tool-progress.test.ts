/**
 * What a running tool reports (`context.progress(value)`), passed on live to `start(input, {
 * onToolProgress })` and kept per running call for `running.liveToolProgress()`: with the call's
 * ids, made JSON and copied, redacted of the run's secrets as the recorded result is, bounded
 * (`TOOL_PROGRESS_INVALID`, whether or not anyone listens), dropped once the call's signal has
 * aborted or the call has settled, and never a fact.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { type JsonValue, type RunningInvocation, type ToolDefinition, type ToolProgressUpdate, isFactstateError } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { assertDetailsFit } from './support/error-details.js'
import { engineTest, factsOf, filesHolding, only, storedEvents } from './support/engine-fixtures.js'

/** A promise and its resolver. */
function gate<T = void>(): { promise: Promise<T>; open: (value: T) => void } {
  let open: (value: T) => void = () => undefined
  const promise = new Promise<T>((resolve) => {
    open = resolve
  })
  return { promise, open }
}

const MARKER = 'stage-build-7f3a'

test(
  "what running tools report reaches onToolProgress at once, with each call's ids, attempt, index and the seq of its tool.dispatched, made JSON and copied; liveToolProgress() holds each running call's latest, in dispatch order, until it settles; none of it is a fact or on disk, and a report after the call settled is dropped",
  engineTest(
    [answer.toolCalls([{ id: 'call-a', name: 'deploy', arguments: {} }, { id: 'call-b', name: 'crawl', arguments: {} }]), answer.text('done')],
    {},
    async (h) => {
      const received: ToolProgressUpdate[] = []
      const bothReported = gate()
      const release = gate()
      const late = gate()
      const deploy: ToolDefinition = {
        name: 'deploy',
        execute: async (_input, context) => {
          const value: Record<string, unknown> = { stage: MARKER, at: new Date(0), build: 12n, skipped: undefined }
          context.progress(value)
          // Changed after it was reported: what was passed on is a copy.
          value.stage = 'changed afterwards'
          await release.promise
          context.progress({ stage: 'done' })
          // A timer the tool leaves behind reports after the call has settled.
          setImmediate(() => {
            context.progress({ stage: 'too late' })
            late.open()
          })
          return { deployed: true }
        },
      }
      const crawl: ToolDefinition = {
        name: 'crawl',
        execute: async (_input, context) => {
          context.progress()
          await release.promise
          context.progress('50%')
          return { pages: 2 }
        },
      }
      const running: RunningInvocation = await h.start({ ...h.input('progress', { tools: [deploy, crawl] }), toolConcurrency: 2 }, {
        onToolProgress: (update) => {
          received.push(structuredClone(update))
          // The receiver's copy is its own: changing it changes nothing kept.
          if (update.value !== null && typeof update.value === 'object') (update.value as Record<string, JsonValue>).stage = 'mangled by the receiver'
          if (received.length === 2) bothReported.open()
        },
      })
      assert.equal(running.liveToolProgress(), [], 'no call running yet')
      await bothReported.promise
      const live = running.liveToolProgress()
      release.open()
      assert.equal(await running.wait(), { status: 'completed' })
      await late.promise
      const stored = await storedEvents(h.log)
      const dispatched = new Map(
        stored.filter(({ event }) => event.fact.type === 'tool.dispatched').map(({ seq, event }) => [(event.fact as { callId: string }).callId, seq]),
      )
      const ids = (callId: 'call-a' | 'call-b', index: number) => ({
        invocationId: 'invocation-progress',
        stepId: 'step-1',
        operationId: `invocation-progress/step-1/${callId === 'call-a' ? 0 : 1}`,
        callId,
        name: callId === 'call-a' ? 'deploy' : 'crawl',
        attempt: 1,
        dispatchedSeq: dispatched.get(callId) as number,
        index,
      })
      assert.ok((dispatched.get('call-a') ?? 0) > 0 && (dispatched.get('call-b') ?? 0) > 0, 'both calls were dispatched')
      const first = { ...ids('call-a', 0), value: { stage: MARKER, at: '1970-01-01T00:00:00.000Z', build: '12' } }
      const second = { ...ids('call-b', 0), value: null }
      assert.equal(live, [first, second], "while both ran: each call's latest, in the order they were dispatched")
      assert.equal(
        received.filter((update) => update.callId === 'call-a'),
        [first, { ...ids('call-a', 1), value: { stage: 'done' } }],
        'deploy: its updates in order, the first as it was when reported, nothing after it settled',
      )
      assert.equal(received.filter((update) => update.callId === 'call-b'), [second, { ...ids('call-b', 1), value: '50%' }])
      assert.equal(running.liveToolProgress(), [], 'a settled call has no entry: its tool.settled is what counts')
      assert.not.ok(JSON.stringify(stored).includes(MARKER), 'no fact holds a progress value')
      assert.equal(await filesHolding(h.logPath, [MARKER, '50%']), [], 'nor does any file of the log')
      assert.equal(
        only(await factsOf(h.log, 'invocation-progress'), 'tool.settled').map((fact) => fact.outcome),
        [
          { status: 'succeeded', output: { deployed: true } },
          { status: 'succeeded', output: { pages: 2 } },
        ],
      )
    },
  ),
)

const ENGINE_SECRET = 'deploy-key-0123456789'
const ADDED_SECRET = 'vault-lease-ABCDEFGH42'

test(
  "a progress value is redacted of the run's secrets as the recorded result is: the engine's (in values and keys), and one the tool added with context.addSecret, from then on; liveToolProgress() holds it redacted",
  engineTest(
    [answer.toolCalls([{ id: 'call-s', name: 'deploy', arguments: {} }]), answer.text('done')],
    { engine: { secrets: [ENGINE_SECRET] } },
    async (h) => {
      const received: ToolProgressUpdate[] = []
      const reported = gate()
      const release = gate()
      const deploy: ToolDefinition = {
        name: 'deploy',
        execute: async (_input, context) => {
          context.progress({ log: `pushing with ${ENGINE_SECRET}`, [ENGINE_SECRET]: 1, steps: [`auth ${ENGINE_SECRET}`] })
          context.addSecret(ADDED_SECRET)
          context.progress({ lease: ADDED_SECRET })
          reported.open()
          await release.promise
          return { lease: ADDED_SECRET, key: ENGINE_SECRET }
        },
      }
      const running = await h.start(h.input('secret', { tools: [deploy] }), { onToolProgress: (update) => received.push(update) })
      await reported.promise
      const live = running.liveToolProgress()
      release.open()
      assert.equal(await running.wait(), { status: 'completed' })
      assert.equal(
        received.map((update) => update.value),
        [{ log: 'pushing with [redacted]', '[redacted]': 1, steps: ['auth [redacted]'] }, { lease: '[redacted]' }],
      )
      assert.equal(live?.map((update) => update.value), [{ lease: '[redacted]' }])
      const [settled] = only(await factsOf(h.log, 'invocation-secret'), 'tool.settled')
      assert.equal(settled?.outcome, { status: 'succeeded', output: { lease: '[redacted]', key: '[redacted]' } }, 'as the recorded result is')
      assert.equal(await filesHolding(h.logPath, [ENGINE_SECRET, ADDED_SECRET]), [])
    },
  ),
)

/** Values `context.progress` refuses, and the reason each is refused with. */
function refusedValues(): [string, unknown, string][] {
  const cycle: Record<string, unknown> = {}
  cycle.self = cycle
  let deep: unknown = 'bottom'
  for (let level = 0; level < 65; level += 1) deep = [deep]
  return [
    ['a function', () => 1, 'not_json'],
    ['a symbol', Symbol('s'), 'not_json'],
    ['a cycle', cycle, 'not_json'],
    ['a toJSON that throws', { toJSON: () => { throw new Error('no') } }, 'not_json'],
    ['65,537 bytes of JSON', 'x'.repeat(65_535), 'too_large'],
    ['40,000 two-byte characters', 'é'.repeat(40_000), 'too_large'],
    ['65 levels deep', deep, 'too_deep'],
  ]
}

/** Values `context.progress` takes at its bounds. */
function boundaryValues(): unknown[] {
  let deep: unknown = 'bottom'
  for (let level = 0; level < 64; level += 1) deep = [deep]
  // 65,536 bytes of JSON with its quotes; a string of brackets is no nesting.
  return [deep, 'x'.repeat(65_534), '[[[['.repeat(1_000)]
}

test(
  'a value that is not JSON, over 65,536 bytes of JSON or nested past 64 levels is TOOL_PROGRESS_INVALID to the tool, nothing passed on, with or without a receiver: the run records the same either way; one at the bounds is passed on; without onToolProgress, liveToolProgress() is undefined',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-p', name: 'probe', arguments: {} }, { id: 'call-l', name: 'loud', arguments: {} }]),
      answer.text('done'),
      answer.toolCalls([{ id: 'call-p', name: 'probe', arguments: {} }, { id: 'call-l', name: 'loud', arguments: {} }]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const tools = (refusals: unknown[]): ToolDefinition[] => [
        {
          name: 'probe',
          execute: (_input, context) => {
            for (const [what, value] of refusedValues()) {
              try {
                context.progress(value)
                refusals.push([what, 'passed on'])
              } catch (error) {
                assert.ok(isFactstateError(error, 'TOOL_PROGRESS_INVALID'), what)
                assertDetailsFit(error, what)
                refusals.push([what, error.details.reason])
              }
            }
            for (const value of boundaryValues()) context.progress(value)
            return 'probed'
          },
        },
        {
          name: 'loud',
          execute: (_input, context) => {
            context.progress({ rows: 'r'.repeat(70_000) })
            return 'not reached'
          },
        },
      ]
      const heard: ToolProgressUpdate[] = []
      const withReceiver: unknown[] = []
      assert.equal(await h.run(h.input('heard', { tools: tools(withReceiver) }), { onToolProgress: (update) => heard.push(update) }), { status: 'completed' })
      const unheard: unknown[] = []
      const running = await h.start(h.input('unheard', { tools: tools(unheard) }))
      assert.equal(running.liveToolProgress(), undefined, 'a run started without onToolProgress has none')
      assert.equal(await running.wait(), { status: 'completed' })
      const expected = refusedValues().map(([what, , reason]) => [what, reason])
      assert.equal(withReceiver, expected)
      assert.equal(unheard, expected, 'refused alike without a receiver')
      assert.equal(
        heard.map((update) => [update.name, update.index, update.value]),
        boundaryValues().map((value, index) => ['probe', index, value]),
        'only the values at the bounds were passed on, numbered without a gap',
      )
      const settled = async (invocationId: string) => only(await factsOf(h.log, invocationId), 'tool.settled').map((fact) => fact.outcome)
      const recorded = await settled('invocation-heard')
      assert.equal(recorded, await settled('invocation-unheard'), 'the run records the same with or without a receiver')
      assert.equal(recorded[0], { status: 'succeeded', output: 'probed' })
      assert.equal(recorded[1], {
        status: 'failed',
        message: 'FactstateError: TOOL_PROGRESS_INVALID: context.progress takes at most 65,536 bytes of JSON, not 70,011: pass a summary (counts, a stage), not the data; nothing was passed on',
      })
    },
  ),
)

test(
  "once the run is cancelled the tool's progress does nothing (not even a refusal): the updates before the cancel were passed on, none after, and the tool's result is recorded",
  engineTest([answer.toolCalls([{ id: 'call-c', name: 'deploy', arguments: {} }]), answer.text('not reached')], {}, async (h) => {
    const received: ToolProgressUpdate[] = []
    const first = gate()
    const afterCancel: string[] = []
    const deploy: ToolDefinition = {
      name: 'deploy',
      execute: async (_input, { signal, progress }) => {
        progress({ stage: 'building' })
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        for (const value of [{ stage: 'stopping' }, () => 'not JSON', 'x'.repeat(70_000)]) {
          try {
            progress(value)
            afterCancel.push('ignored')
          } catch (error) {
            afterCancel.push(`threw ${(error as { code?: string }).code}`)
          }
        }
        return { stopped: true }
      },
    }
    const running = await h.start(h.input('cancel', { tools: [deploy] }), {
      onToolProgress: (update) => {
        received.push(update)
        first.open()
      },
    })
    await first.promise
    assert.equal(running.liveToolProgress()?.map((update) => update.value), [{ stage: 'building' }])
    running.cancel('user stop')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'user stop' })
    assert.equal(afterCancel, ['ignored', 'ignored', 'ignored'])
    assert.equal(received.map((update) => [update.index, update.value]), [[0, { stage: 'building' }]])
    assert.equal(running.liveToolProgress(), [])
    const [settled] = only(await factsOf(h.log, 'invocation-cancel'), 'tool.settled')
    assert.equal(settled?.outcome, { status: 'succeeded', output: { stopped: true } })
  }),
)

test(
  'a receiver that throws, or an async one that rejects, fails neither the tool nor the run, and the count goes on; a retried call reports under its next attempt with the count continued',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-t', name: 'crawl', arguments: {} }]),
      answer.text('done'),
      answer.toolCalls([{ id: 'call-r', name: 'flaky', arguments: {} }]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const indexes: number[] = []
      const crawl: ToolDefinition = {
        name: 'crawl',
        execute: (_input, context) => {
          for (let page = 1; page <= 3; page += 1) context.progress({ page })
          return 'crawled'
        },
      }
      const throwing = (update: ToolProgressUpdate) => {
        indexes.push(update.index)
        if (update.index === 0) throw new Error('the page went away')
        return Promise.reject(new Error('the socket closed'))
      }
      assert.equal(await h.run(h.input('throwing', { tools: [crawl] }), { onToolProgress: throwing as (update: ToolProgressUpdate) => void }), { status: 'completed' })
      assert.equal(indexes, [0, 1, 2])
      const [settled] = only(await factsOf(h.log, 'invocation-throwing'), 'tool.settled')
      assert.equal(settled?.outcome, { status: 'succeeded', output: 'crawled' })
      const updates: ToolProgressUpdate[] = []
      const flaky: ToolDefinition = {
        name: 'flaky',
        retry: { retries: 1, backoffMs: 1 },
        execute: (_input, context) => {
          context.progress(`attempt ${context.attempt}`)
          if (context.attempt === 1) throw new Error('the registry timed out')
          return 'pushed'
        },
      }
      assert.equal(await h.run(h.input('retried', { tools: [flaky] }), { onToolProgress: (update) => updates.push(update) }), { status: 'completed' })
      assert.equal(
        updates.map((update) => [update.operationId, update.attempt, update.index, update.value]),
        [
          ['invocation-retried/step-1/0', 1, 0, 'attempt 1'],
          ['invocation-retried/step-1/0', 2, 1, 'attempt 2'],
        ],
      )
    },
  ),
)

test.run()
