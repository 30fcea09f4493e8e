/**
 * `RunningInvocation.cancel(reason?)`: a handle stops its run as aborting the run's signal does, with
 * the same facts, mid-stream, mid-tool and while an approver thinks; a handle got back through
 * `engine.running(id)` stops it too; the caller's own signal keeps working beside it, the first of the
 * two deciding the source; again, or after the end, it does nothing.
 */
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { FactstateError, type HandoffGate, type Invocation } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { countingTool, engineTest, factsOf, intentOf, lastFactOf, markOf, only, typesOf } from './support/engine-fixtures.js'

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

test(
  "a stop pressed while start() is admitting the run: engine.running(id) gives a handle from when start() returns, and its cancel ends the run cancelled as it opens, with the facts of a cancel right after start() resolved",
  engineTest([answer.text('never asked')], {}, async (h) => {
    // With every live receiver: what the handle's live views say before the run opens is its own, not a run without them.
    const starting = h.start(h.input('admitting'), { onModelText: () => undefined, onToolCallText: () => undefined, onToolProgress: () => undefined })
    // The web app's stop button, in the same turn as the start request: nothing is admitted yet.
    const found = h.engine.running('invocation-admitting')
    assert.ok(found, 'a handle while the run is being admitted')
    assert.is(found.state(), 'opening')
    assert.is(found.liveText(), undefined)
    assert.is(found.liveToolCalls(), undefined)
    assert.is(found.liveToolProgress(), undefined)
    assert.equal(found.invocation, h.input('admitting').invocation)
    found.cancel('user-stop')
    found.cancel('a second stop')
    const running = await starting
    assert.equal(await running.wait(), { status: 'cancelled', source: 'user-stop' })
    assert.equal(await found.wait(), { status: 'cancelled', source: 'user-stop' }, 'the handle given during the admission is the run\'s')
    assert.is(found.state(), 'ended')

    // The same stop once start() has resolved: the same facts.
    const after = await h.start(h.input('admitted'))
    after.cancel('user-stop')
    assert.equal(await after.wait(), { status: 'cancelled', source: 'user-stop' })
    const admitting = await factsOf(h.log, 'invocation-admitting')
    assert.equal(await typesOf(h.log, 'invocation-admitting'), ['invocation.opened', 'invocation.ended'])
    assert.equal(admitting.at(-1), ended('user-stop'))
    const { content: _a, ...openedA } = (admitting[0] as { input: { content: string } }).input
    const { content: _b, ...openedB } = ((await factsOf(h.log, 'invocation-admitted'))[0] as { input: { content: string } }).input
    assert.equal(openedA, openedB)
    assert.equal((await factsOf(h.log, 'invocation-admitted')).slice(1), admitting.slice(1), 'the same facts after invocation.opened')
    assert.is(h.server.requests.length, 0, 'no model request')
    assert.is(h.engine.running('invocation-admitting'), undefined, 'ended')
    assert.equal(await h.log.pendingSessions(), [], 'nothing left open')
  }),
)

/** An engine whose `eventId` calls `hook` as a run's first fact is made: inside the admission, after every read of the log, before the append. */
function admissionHook(): { eventId: (invocation: Invocation, ordinal: number) => string; set: (hook: ((invocation: Invocation) => void) | undefined) => void } {
  let current: ((invocation: Invocation) => void) | undefined
  return {
    eventId: (invocation, ordinal) => {
      if (ordinal === 1) current?.(invocation)
      return `${invocation.invocationId}/${ordinal}`
    },
    set: (hook) => {
      current = hook
    },
  }
}

const inAdmission = admissionHook()

test(
  "a cancel issued deep in a continuation's admission (its source read from the log, its first fact being made): the continuation ends cancelled as it opens; inFlight() lists it meanwhile; the caller's signal aborted after the cancel does not change the source",
  engineTest([answer.text('first'), answer.text('second')], { engine: { eventId: inAdmission.eventId } }, async (h) => {
    const first = await h.run(h.input('first', { session: 'chat' }))
    assert.equal(first, { status: 'completed' })
    const source = (await h.log.runSource('chat', 'run-first'))?.boundary
    assert.ok(source)
    const seen: unknown[] = []
    const signal = new AbortController()
    inAdmission.set((invocation) => {
      if (invocation.invocationId !== 'invocation-next') return
      const handle = h.engine.running(invocation.invocationId)
      seen.push(handle?.state(), h.engine.inFlight())
      handle?.cancel('user-stop')
      signal.abort('shutdown')
    })
    try {
      const next = await h.start({ ...h.input('next', { session: 'chat' }), work: { kind: 'continuation', source, content: 'go on', onlyIfLatest: true } }, { signal: signal.signal })
      assert.equal(await next.wait(), { status: 'cancelled', source: 'user-stop' })
    } finally {
      inAdmission.set(undefined)
    }
    assert.equal(seen, ['opening', ['invocation-next']])
    assert.equal(await typesOf(h.log, 'invocation-next'), ['invocation.opened', 'invocation.ended'])
    assert.equal(await lastFactOf(h.log, 'invocation-next'), ended('user-stop'))
    assert.is(h.server.requests.length, 1, 'the continuation asked the model nothing')
    assert.equal(h.engine.inFlight(), [])
  }),
)

test(
  "a cancel during an admission that is refused: nothing is written, the handle's wait() rejects with the refusal, a hold reserved through it is refused, and the running run is untouched; the signal aborted before a handle's cancel gives the source",
  engineTest([answer.text('late', { hold: true })], {}, async (h) => {
    const active = await h.start(h.input('active', { session: 'shared' }))
    await h.server.seen(0)
    const mark = await markOf(h.log)
    const starting = h.engine.start(h.input('refused', { session: 'shared' }))
    const found = h.engine.running('invocation-refused')
    assert.ok(found)
    assert.equal(h.engine.inFlight(), ['invocation-active', 'invocation-refused'], 'the run being admitted after the running one')
    const hold = found.handoff().reserve(intentOf('refused-next', 'run-refused')).ready()
    const waited = found.wait()
    found.cancel('user-stop')
    await rejectsWithCode(() => starting, 'RUN_BUSY', 'the start')
    await rejectsWithCode(() => waited, 'RUN_BUSY', "the admitting handle's wait()")
    await rejectsWithCode(() => hold, 'HANDOFF_UNAVAILABLE', 'a hold reserved while it was being admitted')
    assert.equal(await markOf(h.log), mark, 'nothing written')
    assert.is(h.engine.running('invocation-refused'), undefined)
    assert.equal(h.engine.inFlight(), ['invocation-active'])
    assert.is(active.state(), 'awaitingModel', 'the running run is not cancelled')

    // A signal aborted before the handle's cancel, both during the admission: the signal came first.
    const stop = new AbortController()
    const second = h.start(h.input('signal-first'), { signal: stop.signal })
    stop.abort('shutdown')
    h.engine.running('invocation-signal-first')?.cancel('user-stop')
    assert.equal(await (await second).wait(), { status: 'cancelled', source: 'shutdown' })

    h.server.release(0)
    assert.equal(await active.wait(), { status: 'completed' })
  }),
)

test(
  'a hold reserved through a handle given while the run is admitted is taken at its first safe point, as one reserved right after start() resolved',
  engineTest([answer.text('done')], {}, async (h) => {
    const starting = h.start(h.input('reserved'))
    const found = h.engine.running('invocation-reserved')
    assert.ok(found)
    const hold = await found.handoff().reserve(intentOf('reserved-next', 'run-reserved')).ready()
    const running = await starting
    assert.is(running.state(), 'held')
    assert.is(found.state(), 'held')
    await hold.release()
    assert.equal(await running.wait(), { status: 'completed' })
    assert.equal(await typesOf(h.log, 'invocation-reserved'), ['invocation.opened', 'hold.entered', 'hold.released', 'model.requested', 'model.completed', 'invocation.ended'])
  }),
)

test(
  "the README's stop of a session (engine.inFlight(), then each handle's invocation.sessionId) cancels the session's run while start() is still admitting it, and no other session's",
  engineTest([answer.text('other')], {}, async (h) => {
    const stopSession = (sessionId: string) => {
      for (const id of h.engine.inFlight()) {
        const run = h.engine.running(id)
        if (run?.invocation.sessionId === sessionId) run.cancel('user-stop')
      }
    }
    const other = h.start(h.input('other', { session: 'session-b' }))
    const mine = h.start(h.input('mine', { session: 'session-a' }))
    stopSession('session-a')
    assert.equal(await (await mine).wait(), { status: 'cancelled', source: 'user-stop' })
    assert.equal(await (await other).wait(), { status: 'completed' })
    assert.equal(await typesOf(h.log, 'invocation-mine'), ['invocation.opened', 'invocation.ended'])
  }),
)

test(
  "two starts of one invocation id with other ids (another session's), at once: the README's stop of the first's session does not cancel the second's run, which the admission of the second starts",
  engineTest([answer.text('late', { hold: true }), answer.text('other session')], {}, async (h) => {
    const stopSession = (sessionId: string) => {
      for (const id of h.engine.inFlight()) {
        const run = h.engine.running(id)
        if (run?.invocation.sessionId === sessionId) run.cancel('user-stop')
      }
    }
    // Session 'busy' runs: a start of it is refused RUN_BUSY.
    const active = await h.start(h.input('active', { session: 'busy' }))
    await h.server.seen(0)
    const refused = h.engine.start({ ...h.input('clash', { session: 'busy' }) })
    const other = { ...h.input('clash', { session: 'free' }), invocation: { sessionId: 'free', turnId: 'turn-free', runId: 'run-free', invocationId: 'invocation-clash' } }
    const admitted = h.start(other)
    // Stop session 'busy': its start is the one refused; the run of session 'free' goes on.
    stopSession('busy')
    await rejectsWithCode(() => refused, 'RUN_BUSY', "session busy's start")
    const running = await admitted
    assert.equal(running.invocation.sessionId, 'free')
    assert.equal(await running.wait(), { status: 'completed' }, "session free's run is not cancelled by a stop of session busy")
    assert.equal(await active.wait(), { status: 'cancelled', source: 'user-stop' }, "session busy's running run is stopped")
    assert.equal(await typesOf(h.log, 'invocation-clash'), ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'])
    assert.equal(h.engine.inFlight(), [])
  }),
)

test(
  "a hold reserved through a handle got during the admission after the start's signal aborted is refused, as one reserved right after start() resolved: a sealOnCancel hold does not seal the run, which ends cancelled",
  engineTest([answer.text('never asked')], {}, async (h) => {
    const reserveAfterAbort = (running: { handoff(): HandoffGate }, name: string) => {
      try {
        running.handoff().reserve(intentOf(`${name}-next`, `run-${name}`), { sealOnCancel: true })
        return 'reserved'
      } catch (error) {
        return (error as FactstateError).code
      }
    }
    const stop = new AbortController()
    const starting = h.start(h.input('admitting'), { signal: stop.signal })
    stop.abort('shutdown')
    const found = h.engine.running('invocation-admitting')
    assert.ok(found)
    assert.is(reserveAfterAbort(found, 'admitting'), 'HANDOFF_UNAVAILABLE', 'during the admission')
    assert.equal(await (await starting).wait(), { status: 'cancelled', source: 'shutdown' })
    assert.equal(await typesOf(h.log, 'invocation-admitting'), ['invocation.opened', 'invocation.ended'])

    // The same once start() has resolved.
    const later = new AbortController()
    const admitted = await h.start(h.input('admitted'), { signal: later.signal })
    later.abort('shutdown')
    assert.is(reserveAfterAbort(admitted, 'admitted'), 'HANDOFF_UNAVAILABLE', 'after start() resolved')
    assert.equal(await admitted.wait(), { status: 'cancelled', source: 'shutdown' })
    assert.equal(await typesOf(h.log, 'invocation-admitted'), ['invocation.opened', 'invocation.ended'])
  }),
)

test.run()
