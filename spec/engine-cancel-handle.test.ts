/**
 * `RunningInvocation.cancel(reason?)`: a handle stops its run as aborting the run's signal does, with
 * the same facts, mid-stream, mid-tool and while an approver thinks; a handle got back through
 * `engine.running(id)` stops it too; the caller's own signal keeps working beside it, the first of the
 * two deciding the source; again, or after the end, it does nothing.
 */
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { FactstateError } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { countingTool, engineTest, factsOf, intentOf, lastFactOf, only, typesOf } from './support/engine-fixtures.js'

const ended = (source: string) => ({ type: 'invocation.ended', outcome: { status: 'cancelled', source } })

test(
  'cancel in the middle of a streamed answer: model.interrupted{cancelled}, then invocation.ended{cancelled} with the reason, redacted as a signal reason is',
  engineTest([answer.stall({ text: 'The weather in Oslo tomo' })], { stream: true, engine: { secrets: ['tok-ABCDEFGH-12345'] } }, async (h) => {
    let pieces = 0
    let first: (() => void) | undefined
    const shown = new Promise<void>((resolve) => (first = resolve))
    const running = await h.start(h.input('stream'), {
      onModelText: () => {
        pieces += 1
        first?.()
      },
    })
    await shown
    running.cancel('user pressed stop (tok-ABCDEFGH-12345)')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'user pressed stop ([redacted])' })
    const facts = await factsOf(h.log, 'invocation-stream')
    assert.ok(pieces > 0)
    assert.equal(
      only(facts, 'model.interrupted').map((fact) => fact.status),
      ['cancelled'],
    )
    assert.is(only(facts, 'model.completed').length, 0, 'the cut answer is not recorded')
    assert.equal(facts.at(-1), ended('user pressed stop ([redacted])'))
  }),
)

test(
  "cancel while a tool runs: its context.signal aborts with the reason, what it returns is recorded, and the run ends cancelled; the step's other call is rejected cancelled",
  engineTest(
    [
      answer.toolCalls([
        { name: 'slow', arguments: { value: 1 } },
        { name: 'slow', arguments: { value: 2 } },
      ]),
    ],
    {},
    async (h) => {
      let started: (() => void) | undefined
      const running = new Promise<void>((resolve) => (started = resolve))
      const reasons: unknown[] = []
      const tool = countingTool('slow', (_input, { signal }) => {
        started?.()
        return new Promise((resolve) =>
          signal.addEventListener('abort', () => {
            reasons.push(signal.reason)
            resolve({ stopped: true })
          }),
        )
      })
      const handle = await h.start(h.input('tool', { tools: [tool] }))
      await running
      handle.cancel('stop-now')
      assert.equal(await handle.wait(), { status: 'cancelled', source: 'stop-now' })
      assert.equal(reasons, ['stop-now'])
      assert.is(tool.calls.length, 1)
      const facts = await factsOf(h.log, 'invocation-tool')
      assert.equal(
        only(facts, 'tool.settled').map((fact) => fact.outcome),
        [{ status: 'succeeded', output: { stopped: true } }],
      )
      assert.equal(
        only(facts, 'tool.rejected').map((fact) => fact.reason),
        ['cancelled'],
      )
      assert.equal(facts.at(-1), ended('stop-now'))
      // Nothing is uncertain: the session is free for its next message.
      assert.equal(await h.log.pendingSessions(), [])
    },
  ),
)

test(
  'cancel while the approver thinks: its request signal aborts, the call is rejected cancelled and never runs',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { value: 1 } }])], {}, async (h) => {
    const tool = { ...countingTool('refund'), needsApproval: true }
    let asked: ((signal: AbortSignal) => void) | undefined
    const askedSignal = new Promise<AbortSignal>((resolve) => (asked = resolve))
    let approve: (() => void) | undefined
    const running = await h.start(h.input('approval', { tools: [tool] }), {
      onApproval: (request) => {
        asked?.(request.signal)
        return new Promise((resolve) => (approve = () => resolve({ approved: true })))
      },
    })
    const signal = await askedSignal
    running.cancel()
    const outcome = await running.wait()
    approve?.()
    assert.equal(outcome, { status: 'cancelled', source: 'cancel' }, "without a reason, the source is 'cancel'")
    assert.is(signal.aborted, true)
    const facts = await factsOf(h.log, 'invocation-approval')
    assert.equal(
      only(facts, 'tool.rejected').map((fact) => fact.reason),
      ['cancelled'],
    )
    assert.is(only(facts, 'tool.dispatched').length, 0)
    assert.is(tool.calls.length, 0)
    assert.equal(facts.at(-1), ended('cancel'))
  }),
)

test(
  'a handle got back through engine.running(id) cancels the run; the handle start gave sees the same outcome; again, or after the end, cancel does nothing',
  engineTest([answer.text('late', { hold: true })], {}, async (h) => {
    const started = await h.start(h.input('lost'))
    await h.server.seen(0)
    const found = h.engine.running('invocation-lost')
    assert.ok(found)
    found.cancel('from another request')
    found.cancel('a second stop')
    started.cancel('a third, through the first handle')
    assert.equal(await started.wait(), { status: 'cancelled', source: 'from another request' })
    assert.equal(await found.wait(), { status: 'cancelled', source: 'from another request' })
    started.cancel('after the end')
    const facts = await factsOf(h.log, 'invocation-lost')
    assert.equal(
      only(facts, 'model.interrupted').map((fact) => fact.status),
      ['cancelled'],
    )
    assert.equal(only(facts, 'invocation.ended').length, 1)
    assert.equal(facts.at(-1), ended('from another request'))
    assert.is(h.engine.running('invocation-lost'), undefined)
  }),
)

test(
  "the caller's signal works beside cancel: the first of the two decides the source; a reason that is not a string is RUN_INVALID_INPUT and cancels nothing; a shared signal keeps no listener after",
  engineTest([answer.text('late', { hold: true }), answer.text('late too', { hold: true })], {}, async (h) => {
    const shared = new AbortController()
    const bySignal = await h.start(h.input('signal-first'), { signal: shared.signal })
    await h.server.seen(0)
    shared.abort('shutdown')
    bySignal.cancel('too late')
    assert.equal(await bySignal.wait(), { status: 'cancelled', source: 'shutdown' })

    const other = new AbortController()
    const byCancel = await h.start(h.input('cancel-first'), { signal: other.signal })
    await h.server.seen(1)
    assert.is(getEventListeners(other.signal, 'abort').length, 1)
    try {
      byCancel.cancel(42 as never)
      assert.unreachable('a number is not a reason')
    } catch (error) {
      assert.instance(error, FactstateError)
      assert.is((error as FactstateError).code, 'RUN_INVALID_INPUT')
      assert.equal((error as FactstateError).details?.field, 'reason')
    }
    assert.is(byCancel.state() === 'awaitingModel', true, 'a refused cancel cancels nothing')
    byCancel.cancel('user-stop')
    other.abort('shutdown')
    assert.equal(await byCancel.wait(), { status: 'cancelled', source: 'user-stop' })
    assert.equal((await factsOf(h.log, 'invocation-cancel-first')).at(-1), ended('user-stop'))
    assert.is(getEventListeners(other.signal, 'abort').length, 0, 'no listener of the run is left on the caller signal')
  }),
)

test(
  "a long reason is cut to 2,000 characters, after redaction, whether given to cancel(reason) or to the caller's signal.abort(reason)",
  engineTest([answer.text('late', { hold: true }), answer.text('late too', { hold: true })], { engine: { secrets: ['tok-ABCDEFGH-12345'] } }, async (h) => {
    // A secret across the cut: cut first, its first characters would be kept.
    const reason = `${'y'.repeat(1_995)}tok-ABCDEFGH-12345${'y'.repeat(3_000_000)}`
    const expected = `${`${'y'.repeat(1_995)}[redacted]`.slice(0, 2_000)}…`
    const byHandle = await h.start(h.input('long-cancel'))
    await h.server.seen(0)
    byHandle.cancel(reason)
    assert.equal(await byHandle.wait(), { status: 'cancelled', source: expected })
    assert.equal((await factsOf(h.log, 'invocation-long-cancel')).at(-1), ended(expected))

    const controller = new AbortController()
    const bySignal = await h.start(h.input('long-signal'), { signal: controller.signal })
    await h.server.seen(1)
    controller.abort(reason)
    assert.equal(await bySignal.wait(), { status: 'cancelled', source: expected })
    assert.equal((await factsOf(h.log, 'invocation-long-signal')).at(-1), ended(expected))
  }),
)


test(
  'cancel on a held run with no signal of its caller: the hold waiting for its decision is woken, a plain hold ends cancelled, a sealOnCancel one is sealed; a hold taken later is refused',
  engineTest([answer.text('done')], { ms: 10_000 }, async (h) => {
    // Plain: the wait for the holder ends, the run ends cancelled, the hold is no longer held.
    const plain = await h.start(h.input('plain'))
    const held = await plain.handoff().reserve(intentOf('plain-next', 'run-plain')).ready()
    assert.is(plain.state(), 'held')
    plain.cancel('closing the shop')
    assert.equal(await plain.wait(), { status: 'cancelled', source: 'closing the shop' })
    await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'release() of a hold whose run was cancelled')
    await rejectsWithCode(() => plain.handoff().reserve(intentOf('plain-again', 'run-plain')).ready(), 'HANDOFF_UNAVAILABLE', 'a hold after the cancel')
    assert.equal(await typesOf(h.log, 'invocation-plain'), ['invocation.opened', 'hold.entered', 'invocation.ended'])
    assert.equal(await lastFactOf(h.log, 'invocation-plain'), ended('closing the shop'))

    // sealOnCancel: the same cancel seals the hold, as a signal's abort does.
    const sealing = await h.start(h.input('sealing'))
    const kept = await sealing.handoff().reserve(intentOf('sealing-next', 'run-sealing'), { sealOnCancel: true }).ready()
    sealing.cancel('shutdown')
    const pause = kept.preview()
    assert.equal(await sealing.wait(), { status: 'handoff_paused', pause })
    assert.equal(await kept.commit(), pause, 'commit() afterwards resolves with the sealed pause')
    assert.equal(await lastFactOf(h.log, 'invocation-sealing'), { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } })
    assert.equal(h.server.requests.length, 0, 'no model request: both were held before their first')
  }),
)

test.run()
