/**
 * `toolConcurrency`: the tool calls of one answer running side by side. Each dispatch is still
 * durable before its tool starts, the dispatches of calls started together share one write, the
 * limit holds, the next request answers the calls in the order the model made them whatever order
 * they settled in, a cancel stops the calls not yet started, and a crash while several run leaves
 * each of them unknown, never run again.
 */
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact, type UncertainOperation, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'
import { startChild } from './support/log-fixtures.js'
import { logInternals } from '../store/event-log.js'
import { FactstateError } from '../errors.js'

const test = suite('engine: tool concurrency')

/** A promise and its resolver. */
function latch<T = undefined>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((done) => (resolve = done))
  return { promise, resolve }
}

/** Resolves after `n` turns of the event loop: lets whatever is already settled be recorded first. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i += 1) await new Promise((resolve) => setImmediate(resolve))
}

const seqOf = async (h: { log: { events(): AsyncIterable<{ seq: number; event: { fact: Fact } }> } }, matches: (fact: Fact) => boolean) => {
  const seqs: number[] = []
  for await (const { seq, event } of h.log.events()) if (matches(event.fact)) seqs.push(seq)
  return seqs
}

test(
  'calls of one answer run at once: dispatched together in call order, each durable before its tool starts, answered to the model in call order',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-a', name: 'echo', arguments: { value: 1 } },
        { id: 'call-b', name: 'echo', arguments: { value: 2 } },
        { id: 'call-c', name: 'echo', arguments: { value: 3 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const invocationId = 'invocation-side-by-side'
      const allStarted = latch()
      const returned = new Map<number, ReturnType<typeof latch>>([1, 2, 3].map((value) => [value, latch()]))
      const dispatchedBeforeStart: boolean[] = []
      let started = 0
      const echo = countingTool('echo', async (input, context) => {
        const facts = await factsOf(h.log, invocationId)
        dispatchedBeforeStart.push(only(facts, 'tool.dispatched').some((fact) => fact.operationId === context.operationId))
        started += 1
        if (started === 3) allStarted.resolve(undefined)
        // Run one after the other, these would wait here for ever (the test's bound fails them).
        await allStarted.promise
        // They finish in the reverse of the call order: 3, then 2 once 3's result is in, then 1.
        const value = (input as { value: number }).value
        if (value < 3) {
          await returned.get(value + 1)?.promise
          await turns(3)
        }
        returned.get(value)?.resolve(undefined)
        return { echoed: value }
      })
      const outcome = await h.run({ ...h.input('side-by-side', { tools: [echo] }), toolConcurrency: 3 })
      assert.equal(outcome, { status: 'completed' })
      assert.is(echo.calls.length, 3, 'each call executed once')
      assert.equal(dispatchedBeforeStart, [true, true, true], 'every tool found its dispatch in the log when it started')
      const facts = await factsOf(h.log, invocationId)
      assert.equal(
        facts.map((fact) => (fact.type === 'tool.dispatched' ? `dispatched ${fact.callId}` : fact.type === 'tool.settled' ? `settled ${JSON.stringify(fact.outcome)}` : fact.type)),
        [
          'invocation.opened',
          'model.requested',
          'model.completed',
          'dispatched call-a',
          'dispatched call-b',
          'dispatched call-c',
          'settled {"status":"succeeded","output":{"echoed":3}}',
          'settled {"status":"succeeded","output":{"echoed":2}}',
          'settled {"status":"succeeded","output":{"echoed":1}}',
          'model.requested',
          'model.completed',
          'invocation.ended',
        ],
      )
      const dispatchSeqs = await seqOf(h, (fact) => fact.type === 'tool.dispatched')
      assert.equal(dispatchSeqs, [4, 5, 6])
      const second = messagesOf(h.server.requests[1]?.body).filter((message) => message.role === 'tool')
      assert.equal(
        second.map((message) => [message.tool_call_id, message.content]),
        [
          ['call-a', '{"echoed":1}'],
          ['call-b', '{"echoed":2}'],
          ['call-c', '{"echoed":3}'],
        ],
        'the tool messages follow the calls, not the order they settled in',
      )
    },
  ),
)

test(
  'no more calls run at once than toolConcurrency allows, and every call of the answer runs',
  engineTest(
    [
      answer.toolCalls([1, 2, 3, 4, 5].map((value) => ({ id: `call-${value}`, name: 'echo', arguments: { value } }))),
      answer.text('done'),
    ],
    {},
    async (h) => {
      let running = 0
      let most = 0
      const echo = countingTool('echo', async (input) => {
        running += 1
        most = Math.max(most, running)
        await turns(5)
        running -= 1
        return input
      })
      assert.equal(await h.run({ ...h.input('limited', { tools: [echo] }), toolConcurrency: 2 }), { status: 'completed' })
      assert.is(most, 2, 'two at a time, never more')
      assert.equal(
        echo.calls.map((call) => call.input),
        [1, 2, 3, 4, 5].map((value) => ({ value })),
        'started in the order the model made the calls',
      )
      const facts = await factsOf(h.log, 'invocation-limited')
      assert.is(only(facts, 'tool.settled').length, 5)
      assert.ok(only(facts, 'tool.settled').every((fact) => fact.outcome.status === 'succeeded'))
    },
  ),
)

test(
  'a cancel while calls run side by side: the running tools get the signal and settle, the calls not started are rejected cancelled',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-1', name: 'slow', arguments: { value: 1 } },
        { id: 'call-2', name: 'slow', arguments: { value: 2 } },
        { id: 'call-3', name: 'slow', arguments: { value: 3 } },
      ]),
    ],
    {},
    async (h) => {
      const bothStarted = latch()
      let started = 0
      const slow = countingTool('slow', (input, { signal }) => {
        started += 1
        if (started === 2) bothStarted.resolve(undefined)
        return new Promise((resolve) => signal.addEventListener('abort', () => resolve({ stopped: input }), { once: true }))
      })
      const controller = new AbortController()
      const run = await h.start({ ...h.input('cancel-side', { tools: [slow] }), toolConcurrency: 2 }, { signal: controller.signal })
      await bothStarted.promise
      assert.is(run.state(), 'settlingTool')
      controller.abort('stop now')
      assert.equal(await run.wait(), { status: 'cancelled', source: 'stop now' })
      assert.is(slow.calls.length, 2, 'the third call never ran')
      assert.ok(slow.calls.every((call) => call.signal.aborted))
      const facts = await factsOf(h.log, 'invocation-cancel-side')
      assert.equal(
        only(facts, 'tool.settled').map((fact) => fact.outcome.status),
        ['succeeded', 'succeeded'],
      )
      assert.equal(
        only(facts, 'tool.rejected').map((fact) => [fact.callId, fact.reason]),
        [['call-3', 'cancelled']],
      )
      assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'stop now' } })
    },
  ),
)

test(
  'a toolConcurrency that is not a whole number from 1 to 64 is RUN_INVALID_INPUT naming it, and nothing is written',
  engineTest([], {}, async (h) => {
    for (const [index, toolConcurrency] of [0, 65, 1.5, -1, Number.NaN].entries()) {
      const error = await refusedWithoutWriting(
        h.log,
        () => h.engine.start({ ...h.input(`bad-${index}`), toolConcurrency }),
        'RUN_INVALID_INPUT',
        `toolConcurrency ${toolConcurrency}`,
      )
      assert.equal(error.details?.fields, ['toolConcurrency'])
    }
    assert.is(h.server.requests.length, 0)
  }),
)

test(
  'a call id used twice in one answer, its first use rejected while an earlier call still runs: the executed call is answered with its result',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-a', name: 'slow', arguments: {} },
        { id: 'call-x', name: 'missing', arguments: {} },
        { id: 'call-x', name: 'echo', arguments: { value: 2 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const slow = countingTool('slow', async () => {
        await turns(5)
        return 'slow done'
      })
      const echo = countingTool('echo')
      assert.equal(await h.run({ ...h.input('dup', { tools: [slow, echo] }), toolConcurrency: 3 }), { status: 'completed' })
      assert.is(echo.calls.length, 1)
      assert.equal(
        messagesOf(h.server.requests[1]?.body)
          .filter((message) => message.role === 'tool')
          .map((message) => `${message.tool_call_id}: ${message.content}`),
        ['call-a: slow done', 'call-x: error: there is no tool named "missing"; it was not run', 'call-x: {"value":2}'],
      )
    },
  ),
)

/** An engine `eventId` that gives `invocationId`'s `ordinal`-th fact an id the log already holds (`<invocationId>/1`), `times` times. */
function collidingAt(invocationId: string, ordinal: number, times = Number.POSITIVE_INFINITY) {
  let left = times
  return (invocation: { invocationId: string }, at: number) => {
    if (invocation.invocationId === invocationId && at === ordinal && left > 0) {
      left -= 1
      return `${invocationId}/1`
    }
    return `${invocation.invocationId}/${at}`
  }
}

const shortly = (fact: Fact) =>
  fact.type === 'tool.dispatched'
    ? `dispatched ${fact.callId}`
    : fact.type === 'tool.settled'
      ? `settled ${fact.operationId.split('/').at(-1)} ${fact.outcome.status === 'failed' ? fact.outcome.message : fact.outcome.status}`
      : fact.type === 'invocation.ended'
        ? `ended ${fact.outcome.status === 'failed' ? fact.outcome.class : fact.outcome.status}`
        : fact.type

/** The error `running` ended with (its `wait()` rejects when a fact could not be recorded), or undefined. */
const failureOf = (running: { wait(): Promise<unknown> }) =>
  running.wait().then(
    () => undefined,
    (reason: { code?: string }) => reason,
  )

// Two calls that return together, so their settlements (ordinals 6 and 7) are written together; the log refuses one of them.
for (const [refused, name, kept, title] of [
  [7, 'kept', 'settled 0 succeeded', 'a settlement the log refuses beside others: the ones written with it are kept, one by one, and the run ends engine_error'],
  [6, 'first', 'settled 1 succeeded', 'the first of two settlements written together refused: the second is still kept'],
] as const) {
  test(
    title,
    engineTest(
      [answer.toolCalls([1, 2].map((value) => ({ id: `call-${value}`, name: 'echo', arguments: { value } })))],
      { engine: { eventId: collidingAt(`invocation-${name}`, refused) } },
      async (h) => {
        let started = 0
        const both = latch()
        const echo = countingTool('echo', async (input) => {
          if (++started === 2) both.resolve(undefined)
          await both.promise
          return input
        })
        const error = await failureOf(await h.start({ ...h.input(name, { tools: [echo] }), toolConcurrency: 2 }))
        assert.is(error?.code, 'LOG_CONFLICT')
        assert.is(echo.calls.length, 2)
        assert.equal((await factsOf(h.log, `invocation-${name}`)).map(shortly).slice(3), ['dispatched call-1', 'dispatched call-2', kept, 'ended engine_error'])
      },
    ),
  )
}

test(
  "after a refused fact the run's end gets an id of its own form: an application's ids of the default form shifted by one cannot refuse it too",
  engineTest(
    [answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 1 } }])],
    // Ordinal n gets `<invocationId>/<n + 1>`; the settlement (ordinal 5) an id the first fact has.
    { engine: { eventId: (invocation: { invocationId: string }, at: number) => `${invocation.invocationId}/${at === 5 ? 2 : at + 1}` } },
    async (h) => {
      const error = await failureOf(await h.start({ ...h.input('shifted', { tools: [countingTool('echo')] }) }))
      assert.is(error?.code, 'LOG_CONFLICT')
      const stored = (await h.log.invocationEvents('invocation-shifted')).map(({ event }) => event)
      assert.equal(stored.map((event) => shortly(event.fact)).slice(3), ['dispatched call-1', 'ended engine_error'])
      assert.is(stored.at(-1)?.id, 'invocation-shifted/5/after-refusal', 'not invocation-shifted/5, the id the dispatch (ordinal 4) has')
      assert.equal((await h.log.pendingSessions()).map((session) => session.active.length), [0], 'the run is not left open')
    },
  ),
)

test(
  'a settlement the log refuses on its own (not written beside others): the settlements after it are still kept',
  engineTest(
    [answer.toolCalls([1, 2, 3].map((value) => ({ id: `call-${value}`, name: 'echo', arguments: { value } })))],
    { engine: { eventId: collidingAt('invocation-alone', 7) } },
    async (h) => {
      // The calls return one after the other, so each settlement is written alone; the first is refused.
      const echo = countingTool('echo', async (input) => {
        await new Promise((resolve) => setTimeout(resolve, ((input as { value: number }).value - 1) * 150))
        return input
      })
      const error = await failureOf(await h.start({ ...h.input('alone', { tools: [echo] }), toolConcurrency: 3 }))
      assert.is(error?.code, 'LOG_CONFLICT')
      assert.is(echo.calls.length, 3)
      assert.equal((await factsOf(h.log, 'invocation-alone')).map(shortly).slice(6), ['settled 1 succeeded', 'settled 2 succeeded', 'ended engine_error'])
    },
    // The run's failure leaves the first call's outcome unknown: its session needs reconciliation, the others' do not.
  ),
)

test(
  'a call whose dispatch is written after a call beside it failed is not started, and its settlement says so',
  engineTest(
    [answer.toolCalls([1, 2, 3].map((value) => ({ id: `call-${value}`, name: 'effect', arguments: { value } })))],
    // Ordinal 7 is call-2's settlement; refused once, the ordinal goes to call-3's dispatch.
    { engine: { eventId: collidingAt('invocation-halted', 7, 1) } },
    async (h) => {
      const secondMayReturn = latch()
      const internals = logInternals(h.log)
      const append = internals.appendAll
      internals.appendAll = (events, precondition) => {
        const appended = append(events, precondition)
        // call-1's settlement is being written: call-2 returns meanwhile, so its settlement is written next.
        if (events.some((event) => event.fact.type === 'tool.settled' && event.fact.operationId.endsWith('/0'))) secondMayReturn.resolve(undefined)
        return appended
      }
      const effect = countingTool('effect', async (input) => {
        if ((input as { value: number }).value === 2) await secondMayReturn.promise
        return input
      })
      const error = await failureOf(await h.start({ ...h.input('halted', { tools: [effect] }), toolConcurrency: 2 }))
      assert.is(error?.code, 'LOG_CONFLICT')
      assert.equal(
        effect.calls.map((call) => call.input),
        [{ value: 1 }, { value: 2 }],
        'call-3 never started',
      )
      assert.equal((await factsOf(h.log, 'invocation-halted')).map(shortly).slice(3), [
        'dispatched call-1',
        'dispatched call-2',
        'settled 0 succeeded',
        'dispatched call-3',
        'settled 2 not started: the run failed while its dispatch was being recorded',
        'ended engine_error',
      ])
    },
  ),
)

test(
  'a call beside a running tool fails: the running tool sees its signal abort with that failure as the reason, and what it returns then is still recorded',
  engineTest(
    [answer.toolCalls([1, 2].map((value) => ({ id: `call-${value}`, name: 'effect', arguments: { value } })))],
    // Ordinal 6 is call-2's settlement (call-1 waits for its signal): refused once.
    { engine: { eventId: collidingAt('invocation-told', 6, 1) } },
    async (h) => {
      let reason: unknown
      const effect = countingTool('effect', async (input, { signal }) => {
        if ((input as { value: number }).value === 2) return input
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        reason = signal.reason
        return { stopped: (signal.reason as { code?: string }).code }
      })
      const error = await failureOf(await h.start({ ...h.input('told', { tools: [effect] }), toolConcurrency: 2 }))
      assert.is(error?.code, 'LOG_CONFLICT')
      assert.is(reason, error, 'the running tool is told why the run is ending')
      assert.equal((await factsOf(h.log, 'invocation-told')).map(shortly).slice(3), ['dispatched call-1', 'dispatched call-2', 'settled 0 succeeded', 'ended engine_error'])
      assert.is(effect.calls[0]?.signal.aborted, true)
    },
  ),
)

test(
  'a call beside a running tool fails and the running tool, a tool with effects, throws once told: its outcome is left unknown, for the session to reconcile',
  engineTest(
    [answer.toolCalls([1, 2].map((value) => ({ id: `call-${value}`, name: 'effect', arguments: { value } })))],
    { engine: { eventId: collidingAt('invocation-thrown', 6, 1) } },
    async (h) => {
      const effect = countingTool('effect', async (input, { signal }) => {
        if ((input as { value: number }).value === 2) return input
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        throw new Error(`stopped: ${(signal.reason as { code?: string }).code}`)
      })
      const input = { ...h.input('thrown', { tools: [effect], session: 'session-thrown' }), toolConcurrency: 2 }
      const error = await failureOf(await h.start(input))
      assert.is(error?.code, 'LOG_CONFLICT', 'the run ends by the first failure')
      assert.equal((await factsOf(h.log, 'invocation-thrown')).map(shortly).slice(3), ['dispatched call-1', 'dispatched call-2', 'ended engine_error'], 'no failure is claimed for call-1')
      const prefix = await h.log.prefix(100, 1 << 20)
      // call-2's settlement was the refused fact: it is uncertain too.
      assert.equal(prefix.projectInvocation('invocation-thrown').uncertainOperations, ['invocation-thrown/step-1/0', 'invocation-thrown/step-1/1'])
      const next = h.input('next', { tools: [effect], session: 'session-thrown' })
      await refusedWithoutWriting(h.log, () => h.start(next), 'RUN_RECONCILIATION_REQUIRED', 'a message after the unknown outcome')
    },
  ),
)

test(
  'two calls side by side both fail: the run reports the failure that came first, not the first call\'s',
  engineTest(
    [answer.toolCalls([1, 2].map((value) => ({ id: `call-${value}`, name: 'effect', arguments: { value } })))],
    {},
    async (h) => {
      // The log refuses every settlement (each with an error of its own); the run's end is written.
      const refusals: unknown[] = []
      const internals = logInternals(h.log)
      const append = internals.appendAll
      internals.appendAll = (events, precondition) => {
        if (!events.some((event) => event.fact.type === 'tool.settled')) return append(events, precondition)
        const refused = new FactstateError('LOG_CONFLICT', `settlement ${refusals.length + 1} refused`, { details: { eventId: events[0]?.id ?? '' } })
        refusals.push(refused)
        return Promise.reject(refused)
      }
      // call-1 (the first worker's) returns only once call-2's settlement was refused.
      const effect = countingTool('effect', async (input, { signal }) => {
        if ((input as { value: number }).value === 1) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        return input
      })
      const error = await failureOf(await h.start({ ...h.input('twice', { tools: [effect] }), toolConcurrency: 2 }))
      assert.is(refusals.length, 2, 'both settlements were refused')
      assert.is(error, refusals[0], 'the first refusal in time')
      assert.equal((await factsOf(h.log, 'invocation-twice')).map(shortly).slice(3), ['dispatched call-1', 'dispatched call-2', 'ended engine_error'])
    },
  ),
)

/** The operation ids the child printed as its tools started, in call order. */
let running: string[] = []

async function crashWhileThreeRun(logPath: string): Promise<void> {
  const child = startChild('child-engine-tool.ts', [logPath, 'side-by-side'])
  try {
    running = []
    for (const index of [0, 1, 2]) {
      const line = await child.waitForLine((l) => l.startsWith('executing ') && l.endsWith(`/${index}`), 20_000)
      running.push(line.slice('executing '.length))
    }
  } finally {
    await child.stop('SIGKILL')
  }
  assert.is((await child.exited).signal, 'SIGKILL', `the child was killed, not finished (${child.stderr()})`)
  const log = await EventLog.open(logPath)
  try {
    assert.equal((await log.prefix(100, 1 << 20)).projectInvocation('invocation-crash').uncertainOperations, running)
    assert.is(await recoverInvocations(log), 1)
  } finally {
    await log.close()
  }
}

test(
  'a host killed while three calls run side by side: each is an unknown outcome the session must acknowledge, and none runs again',
  engineTest([answer.text('checked'), answer.text('fine')], { ms: 40_000, before: crashWhileThreeRun }, async (h) => {
    const facts = await factsOf(h.log, 'invocation-crash')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.dispatched', 'tool.dispatched', 'invocation.ended'],
      'no settlement is invented',
    )
    const ended = facts.at(-1)
    assert.ok(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class === 'outcome_unknown')
    const deploy = countingTool('deploy')
    const input = (name: string) => h.input(name, { session: 'session-crash', tools: [deploy] })
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(input('next')), 'RUN_RECONCILIATION_REQUIRED', 'a new message')
    assert.equal(
      (refused.details?.unknown as UncertainOperation[]).map((op) => [op.operationId, op.callId, op.input]),
      [
        [running[0], 'call-deploy', { target: 'production' }],
        [running[1], 'call-deploy-staging', { target: 'staging' }],
        [running[2], 'call-deploy-preview', { target: 'preview' }],
      ],
    )
    const crashed = (await h.log.runSource('session-crash', 'run-crash'))?.boundary
    assert.ok(crashed)
    const acknowledged = input('next')
    acknowledged.work = { kind: 'message', content: 'question next', allowPriorUnknown: true }
    assert.equal(await h.run(acknowledged), { status: 'completed' })
    // The crashed run continued: its three calls are answered from facts, in the order the model made them.
    const continuation = { ...input('continued'), work: { kind: 'continuation' as const, source: crashed } }
    assert.equal(await h.run(continuation), { status: 'completed' })
    const replayed = messagesOf(h.server.requests[1]?.body).filter((message) => message.role === 'tool')
    assert.equal(
      replayed.map((message) => [message.tool_call_id, message.content?.startsWith(`outcome unknown: operation ${running[replayed.indexOf(message)]} `)]),
      [
        ['call-deploy', true],
        ['call-deploy-staging', true],
        ['call-deploy-preview', true],
      ],
    )
    assert.is(deploy.calls.length, 0, 'no tool runs again')
  }),
)

test.run()
