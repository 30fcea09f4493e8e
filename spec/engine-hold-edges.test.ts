/**
 * Handoff holds at their edges (DESIGN §6), from a review: a reservation cancelled while its
 * `hold.entered` is being written, an abort in the same tick as a commit, and holds whose
 * successor could never be admitted (claim already used or named by another pending seal, successor
 * run id taken, successor invocation id taken or named by another pending seal).
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { HandoffIntent, RunningInvocation } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import {
  type EngineHarness,
  countingTool,
  engineTest,
  factsOf,
  intentOf,
  lastFactOf,
  refusedWithoutWriting,
  sealAtFirstSafePoint,
  successorInput,
  typesOf,
} from './support/engine-fixtures.js'

/** Where the reservation is cancelled: while the actor's append of `hold.entered` is queued, or once it is durable but before the actor resumes. */
const windows: { name: string; cancelAt: (h: EngineHarness, running: RunningInvocation, cancel: () => void) => void }[] = [
  {
    name: 'while the append is queued',
    // The actor's loop starts in an immediate queued by start(); this one runs right after it, with the append in flight.
    cancelAt: (_h, _running, cancel) => setImmediate(cancel),
  },
  {
    name: 'once hold.entered is durable',
    // Log listeners run as the group commit resolves its callers, before the actor's await resumes.
    cancelAt: (h, running, cancel) => {
      const stop = logInternals(h.log).subscribe((events) => {
        const entered = events.some((e) => e.event.fact.type === 'hold.entered' && e.event.invocation.invocationId === running.invocation.invocationId)
        if (!entered) return
        stop()
        cancel()
      })
    },
  },
]

test(
  'a reservation cancelled while hold.entered is written is rolled back: ready() is HANDOFF_CANCELLED, the run goes on and honours the next reservation',
  engineTest([answer.text('done'), answer.text('done')], { ms: 5_000 }, async (h) => {
    for (const [index, window] of windows.entries()) {
      const name = `cancel-${index}`
      const running = await h.start(h.input(name))
      const gate = running.handoff()
      const first = gate.reserve(intentOf(`first-${index}`, `run-${name}`))
      let second: ReturnType<typeof gate.reserve> | undefined
      window.cancelAt(h, running, () => {
        first.cancel()
        // The gate is free again at once; the actor must still see this reservation.
        second = gate.reserve(intentOf(`second-${index}`, `run-${name}`))
      })
      await rejectsWithCode(() => first.ready(), 'HANDOFF_CANCELLED', `${window.name}: ready() after cancel()`)
      assert.ok(second, `${window.name}: the cancel ran`)
      const held = await second.ready()
      assert.is(running.state(), 'held', `${window.name}: held by the second reservation`)
      await held.release()
      assert.equal(await running.wait(), { status: 'completed' }, `${window.name}: the run goes on`)
      assert.equal(
        await typesOf(h.log, `invocation-${name}`),
        [
          'invocation.opened',
          'hold.entered',
          'hold.released',
          'hold.entered',
          'hold.released',
          'model.requested',
          'model.completed',
          'invocation.ended',
        ],
        `${window.name}: the cancelled hold is rolled back, the next one entered`,
      )
      const facts = await factsOf(h.log, `invocation-${name}`)
      const holds = facts.flatMap((f) => (f.type === 'hold.entered' || f.type === 'hold.released' ? [f.handoffId] : []))
      assert.equal(holds, [`handoff-first-${index}`, `handoff-first-${index}`, `handoff-second-${index}`, `handoff-second-${index}`])
    }
    await h.engine.drain()
  }),
)

test(
  'an abort and a commit in the same tick: the run ends cancelled and commit() rejects HANDOFF_NOT_HELD',
  engineTest([], { ms: 5_000 }, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('abort-commit'), { signal: controller.signal })
    const held = await running.handoff().reserve(intentOf('abort-commit-successor', 'run-abort-commit')).ready()
    controller.abort('operator')
    const committing = held.commit()
    assert.equal(await running.wait(), { status: 'cancelled', source: 'operator' })
    await rejectsWithCode(() => committing, 'HANDOFF_NOT_HELD', 'the commit taken as the run was cancelled')
    await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'a release afterwards')
    assert.equal(await typesOf(h.log, 'invocation-abort-commit'), ['invocation.opened', 'hold.entered', 'invocation.ended'])
    assert.equal(await lastFactOf(h.log, 'invocation-abort-commit'), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'operator' } })
  }),
)

/** Seals run `a` of `session` for successor `b` and runs `b` to completion: claim `claim-b`, run `run-b` and invocation `invocation-b` are used. */
async function useSuccessorB(h: EngineHarness, session: string): Promise<void> {
  const sealed = await sealAtFirstSafePoint(h, h.input('a', { session }), 'b')
  assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
}

test(
  'a reservation whose successor could never be admitted is refused at ready(), nothing written; the run and the session go on',
  engineTest(
    Array.from({ length: 8 }, () => answer.text('done')),
    {},
    async (h) => {
      await useSuccessorB(h, 'shared')
      // Sealed in another session, its successor still to come: its claim `claim-pending` is reserved.
      await sealAtFirstSafePoint(h, h.input('sealer', { session: 'pending' }), 'pending')
      const cases: { name: string; intent: HandoffIntent; code: string }[] = [
        { name: 'used-claim', intent: { ...intentOf('d', 'run-used-claim'), claimId: 'claim-b' }, code: 'HANDOFF_CLAIMED' },
        { name: 'sealed-claim', intent: { ...intentOf('d', 'run-sealed-claim'), claimId: 'claim-pending' }, code: 'HANDOFF_CLAIMED' },
        { name: 'sealed-successor', intent: { ...intentOf('d', 'run-sealed-successor'), successorInvocationId: 'invocation-pending' }, code: 'HANDOFF_MISMATCH' },
        { name: 'taken-run', intent: { ...intentOf('d', 'run-taken-run'), successorRunId: 'run-a' }, code: 'HANDOFF_MISMATCH' },
        { name: 'taken-invocation', intent: { ...intentOf('d', 'run-taken-invocation'), successorInvocationId: 'invocation-b' }, code: 'HANDOFF_MISMATCH' },
      ]
      for (const { name, intent, code } of cases) {
        const running = await h.start(h.input(name, { session: 'shared' }))
        await rejectsWithCode(() => running.handoff().reserve(intent).ready(), code, `${name}: ready()`)
        assert.equal(await running.wait(), { status: 'completed' }, `${name}: the run goes on`)
        const types = await typesOf(h.log, `invocation-${name}`)
        assert.equal(types, ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'], `${name}: no hold fact`)
      }
      assert.equal(await h.run(h.input('after', { session: 'shared' })), { status: 'completed' }, 'the session is not locked')
    },
  ),
)

test(
  'a commit whose successor was taken after the hold was entered is refused atomically; the hold stays held and can be released',
  engineTest(
    Array.from({ length: 8 }, () => answer.text('done')),
    {},
    async (h) => {
      const cases: { name: string; take: () => Promise<void>; code: string }[] = [
        // Another session's successor uses the claim the hold names.
        { name: 'claim', take: () => useSuccessorB(h, 'elsewhere-claim'), code: 'HANDOFF_CLAIMED' },
        // Another session's run is sealed first under the same claim (its successor not yet come).
        {
          name: 'seal',
          take: async () => {
            await sealAtFirstSafePoint(h, h.input('rival', { session: 'elsewhere-seal' }), 'rival-next')
          },
          code: 'HANDOFF_CLAIMED',
        },
        // Another session's run takes the invocation id the hold names for its successor.
        {
          name: 'invocation',
          take: async () => {
            const input = h.input('thief', { session: 'elsewhere-invocation' })
            input.invocation.invocationId = 'invocation-next-invocation'
            assert.equal(await h.run(input), { status: 'completed' })
          },
          code: 'HANDOFF_MISMATCH',
        },
      ]
      for (const { name, take, code } of cases) {
        const invocationId = `invocation-held-${name}`
        const running = await h.start(h.input(`held-${name}`, { session: `held-${name}` }))
        const claims: Record<string, string> = { claim: 'claim-b', seal: 'claim-rival-next' }
        const intent = { ...intentOf(`next-${name}`, `run-held-${name}`), ...(claims[name] ? { claimId: claims[name] } : {}) }
        const held = await running.handoff().reserve(intent).ready()
        await take()
        await refusedWithoutWriting(h.log, () => held.commit(), code, `${name}: commit()`)
        assert.is(running.state(), 'held', `${name}: still held`)
        await refusedWithoutWriting(h.log, () => held.commit(), code, `${name}: a second commit()`)
        await held.release()
        assert.equal(await running.wait(), { status: 'completed' }, `${name}: released, the run goes on`)
        assert.equal(
          await typesOf(h.log, invocationId),
          ['invocation.opened', 'hold.entered', 'hold.released', 'model.requested', 'model.completed', 'invocation.ended'],
          `${name}: no seal`,
        )
        assert.equal(await h.run(h.input(`after-${name}`, { session: `held-${name}` })), { status: 'completed' }, `${name}: the session is not locked`)
      }
    },
  ),
)

test(
  'a hold reserved while a request fails with a retryable error is taken during the back-off, before the retry: no tool of the retried answer runs first',
  engineTest(
    [
      answer.status(429, { retryAfterMs: 1_500, hold: true }),
      answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]),
      answer.text('done'),
      answer.status(429, { retryAfterMs: 1_500 }),
    ],
    { ms: 15_000, model: { maxBackoffMs: 2_000 } },
    async (h) => {
      // Reserved while the request is in flight: taken once its failure is recorded.
      const tool = countingTool()
      const running = await h.start({ ...h.input('retried'), tools: [tool] })
      await h.server.seen(0)
      const reservation = running.handoff().reserve(intentOf('retried-next', 'run-retried'))
      h.server.release(0)
      const held = await reservation.ready()
      assert.is(h.server.requests.length, 1, 'the retry waits for the hold')
      assert.is(tool.calls.length, 0)
      assert.equal(await typesOf(h.log, 'invocation-retried'), ['invocation.opened', 'model.requested', 'model.interrupted', 'hold.entered'])
      // The failed attempt's step is not spent: its retry, here or as the successor's first request, is that step.
      assert.is(held.preview().remainingSteps, 4)
      await held.release()
      assert.equal(await running.wait(), { status: 'completed' })
      assert.is(tool.calls.length, 1)
      const facts = await factsOf(h.log, 'invocation-retried')
      const requested = facts.filter((fact) => fact.type === 'model.requested').map((fact) => fact.stepId)
      assert.equal(requested, ['step-1', 'step-1', 'step-2'], 'the retry after the release is the same step')

      // Reserved during the back-off (its failure already recorded): taken at once, and a commit seals it with no further request.
      const second = await h.start(h.input('backoff'))
      const interrupted = new Promise<void>((resolve) => {
        const stop = logInternals(h.log).subscribe((events) => {
          if (!events.some((e) => e.event.fact.type === 'model.interrupted' && e.event.invocation.invocationId === 'invocation-backoff')) return
          stop()
          resolve()
        })
      })
      await interrupted
      const sealed = await (await second.handoff().reserve(intentOf('backoff-next', 'run-backoff')).ready()).commit()
      assert.is(sealed.remainingSteps, 4, 'the successor sends the failed request again as its first step, out of the same budget')
      const outcome = await second.wait()
      assert.is(outcome.status, 'handoff_paused')
      assert.is(h.server.requests.length, 4, 'no retry after the seal')
      assert.equal(await typesOf(h.log, 'invocation-backoff'), ['invocation.opened', 'model.requested', 'model.interrupted', 'hold.entered', 'invocation.ended'])
    },
  ),
)

test(
  'reserve() keeps the intent it checked: inherited or hidden members, a getter read twice and a proxy cannot make the hold differ; a getter that throws is HANDOFF_MISMATCH',
  engineTest([answer.text('done')], { ms: 10_000 }, async (h) => {
    const shapes: [string, (intent: HandoffIntent) => HandoffIntent][] = [
      ['inherited members', (intent) => Object.create(intent) as HandoffIntent],
      [
        'a hidden member',
        (intent) => {
          const copy = { ...intent }
          Object.defineProperty(copy, 'claimId', { value: intent.claimId, enumerable: false })
          return copy
        },
      ],
      [
        'a getter that changes',
        (intent) => {
          let reads = 0
          const copy = { ...intent }
          Object.defineProperty(copy, 'claimId', { get: () => (reads++ === 0 ? intent.claimId : 'not an id!'), enumerable: true })
          return copy
        },
      ],
      ['a proxy', (intent) => new Proxy({ ...intent }, {})],
    ]
    for (const [index, [what, shape]] of shapes.entries()) {
      const name = `shape-${index}`
      const intent = intentOf(`${name}-next`, `run-${name}`)
      const running = await h.start(h.input(name))
      const held = await running.handoff().reserve(shape(intent)).ready()
      assert.equal(held.preview().intent, intent, what)
      assert.equal((await held.commit()).intent, intent, what)
      const outcome = await running.wait()
      assert.equal(outcome.status === 'handoff_paused' ? outcome.pause.intent : outcome, intent, what)
    }
    const running = await h.start(h.input('throwing'))
    const throwing = { ...intentOf('throwing-next', 'run-throwing') }
    Object.defineProperty(throwing, 'claimId', {
      get: () => {
        throw new Error('not readable')
      },
      enumerable: true,
    })
    let refused: unknown
    try {
      running.handoff().reserve(throwing)
    } catch (error) {
      refused = error
    }
    assert.is((refused as { code?: unknown } | undefined)?.code, 'HANDOFF_MISMATCH')
    assert.match((refused as Error).message, /not readable/)
    assert.equal(await running.wait(), { status: 'completed' })
  }),
)

test(
  'a cancel refuses a hold still waiting for a safe point: a tool of the run that waits for one settles, and the run ends cancelled',
  engineTest([answer.toolCalls([{ name: 'ask', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    let running: RunningInvocation | undefined
    let started: () => void = () => undefined
    const toolStarted = new Promise<void>((resolve) => (started = resolve))
    const tool = countingTool('ask', async () => {
      // "Ask a human" from inside the run: the hold waits for this very tool to settle.
      const reservation = (running as RunningInvocation).handoff().reserve(intentOf('ask-next', 'run-ask'))
      started()
      try {
        await reservation.ready()
        return 'held'
      } catch (error) {
        return (error as { code?: string }).code
      }
    })
    const stop = new AbortController()
    running = await h.start({ ...h.input('ask'), tools: [tool] }, { signal: stop.signal })
    await toolStarted
    stop.abort('operator')
    const outcome = await running.wait()
    assert.equal(outcome, { status: 'cancelled', source: 'operator' })
    const settled = (await factsOf(h.log, 'invocation-ask')).find((fact) => fact.type === 'tool.settled')
    assert.equal(settled?.type === 'tool.settled' ? settled.outcome : undefined, { status: 'succeeded', output: 'HANDOFF_UNAVAILABLE' })
  }),
)

test(
  'a hold in the last step\u2019s back-off is taken and seals one step for the successor, which sends the failed request again; after a cancel every reservation is refused at once',
  engineTest([answer.status(429, { retryAfterMs: 50, hold: true }), answer.text('done'), answer.toolCalls([{ name: 'ask', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    const input = { ...h.input('last'), maxSteps: 1 }
    const running = await h.start(input)
    await h.server.seen(0)
    const reservation = running.handoff().reserve(intentOf('last-next', 'run-last'))
    h.server.release(0)
    const held = await reservation.ready()
    assert.is(held.preview().remainingSteps, 1, 'the only step failed and is not spent')
    const pause = await held.commit()
    assert.equal(await running.wait(), { status: 'handoff_paused', pause })
    assert.is(h.server.requests.length, 1, 'no retry after the seal')
    const source = (await h.log.runSource(input.invocation.sessionId, input.invocation.runId))?.boundary
    assert.ok(source)
    const successor = successorInput({ running, pause, source, input })
    assert.equal(await h.run(successor), { status: 'completed' }, 'the successor\u2019s one step is the retried request')
    const requested = (await factsOf(h.log, successor.invocation.invocationId)).filter((fact) => fact.type === 'model.requested')
    assert.is(requested.length, 1)
    assert.ok(((h.server.requests[0]?.body as { messages?: unknown[] }).messages?.length ?? 0) > 0)
    assert.equal((h.server.requests[1]?.body as { messages?: unknown }).messages, (h.server.requests[0]?.body as { messages?: unknown }).messages, 'the same conversation is asked again')

    // A tool of the run that reserves after the cancel is refused at once (it would wait for itself).
    let asked: unknown
    let started: () => void = () => undefined
    const toolStarted = new Promise<void>((resolve) => (started = resolve))
    let cancelled: Promise<void> = Promise.resolve()
    let current: RunningInvocation | undefined
    const tool = countingTool('ask', async (_input, context) => {
      started()
      await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }))
      try {
        ;(current as RunningInvocation).handoff().reserve(intentOf('after-next', 'run-after'))
        asked = 'reserved'
      } catch (error) {
        asked = (error as { code?: string }).code
      }
      await cancelled
      return asked
    })
    const stop = new AbortController()
    current = await h.start({ ...h.input('after'), tools: [tool] }, { signal: stop.signal })
    await toolStarted
    cancelled = Promise.resolve()
    stop.abort('operator')
    assert.equal(await current.wait(), { status: 'cancelled', source: 'operator' })
    assert.is(asked, 'HANDOFF_UNAVAILABLE')
  }),
)

test(
  'a successor sends its source\u2019s failed request byte for byte, even when its caller gives the same provider options, and the same pause, in another order',
  engineTest([answer.status(429, { retryAfterMs: 50, hold: true }), answer.text('done')], { ms: 10_000 }, async (h) => {
    const input = { ...h.input('order'), providerOptions: { temperature: 0, top_p: 1, metadata: { a: 1, b: 2 } } }
    const running = await h.start(input)
    await h.server.seen(0)
    const reservation = running.handoff().reserve(intentOf('order-next', 'run-order'))
    h.server.release(0)
    const pause = await (await reservation.ready()).commit()
    const source = (await h.log.runSource(input.invocation.sessionId, input.invocation.runId))?.boundary
    assert.ok(source)
    const successor = { ...successorInput({ running, pause, source, input }), providerOptions: { metadata: { b: 2, a: 1 }, top_p: 1, temperature: 0 } }
    // The caller's copy of the pause with its options in another order too (a store that sorts JSON keys): the same pause.
    if (successor.work.kind !== 'handoff') throw new Error('a successor')
    successor.work.pause.execution.providerOptions = { top_p: 1, temperature: 0, metadata: { b: 2, a: 1 } }
    assert.equal(await h.run(successor), { status: 'completed' })
    assert.is(h.server.requests.length, 2)
    assert.is(h.server.requests[1]?.bodyText, h.server.requests[0]?.bodyText, 'the same bytes')
    const digests = (await factsOf(h.log, input.invocation.invocationId))
      .concat(await factsOf(h.log, successor.invocation.invocationId))
      .flatMap((fact) => (fact.type === 'model.requested' ? [fact.requestDigest] : []))
    assert.is(digests.length, 2)
    assert.is(digests[1], digests[0], 'so the same request digest')
  }),
)

test(
  'a reservation right after the abort is refused before the first request too; a back-off longer than a timer can hold is waited out, not spun',
  engineTest([answer.status(429, { retryAfterMs: 3_000_000_000 })], { ms: 10_000, model: { maxBackoffMs: Number.MAX_SAFE_INTEGER } }, async (h) => {
    const stop = new AbortController()
    const early = await h.start(h.input('early'), { signal: stop.signal })
    stop.abort('operator')
    let refused: unknown
    try {
      early.handoff().reserve(intentOf('early-next', 'run-early'))
    } catch (error) {
      refused = (error as { code?: string }).code
    }
    assert.is(refused, 'HANDOFF_UNAVAILABLE')
    assert.equal(await early.wait(), { status: 'cancelled', source: 'operator' })

    // 3e9 ms is past what setTimeout honours (Node fires such a timer after 1 ms, with a warning).
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(warning.name)
    process.on('warning', onWarning)
    try {
      const waiting = new AbortController()
      const long = await h.start(h.input('long'), { signal: waiting.signal })
      await new Promise<void>((resolve) => {
        const stopListening = logInternals(h.log).subscribe((events) => {
          if (!events.some((e) => e.event.fact.type === 'model.interrupted' && e.event.invocation.invocationId === 'invocation-long')) return
          stopListening()
          resolve()
        })
      })
      await new Promise((resolve) => setTimeout(resolve, 50))
      waiting.abort('done waiting')
      assert.equal(await long.wait(), { status: 'cancelled', source: 'done waiting' })
      assert.is(h.server.requests.length, 1, 'no retry before the back-off ends')
    } finally {
      process.off('warning', onWarning)
    }
    assert.equal(warnings.filter((name) => name === 'TimeoutOverflowWarning'), [])
  }),
)

test.run()
