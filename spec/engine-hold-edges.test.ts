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

test.run()
