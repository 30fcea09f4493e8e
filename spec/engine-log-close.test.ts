/**
 * Closing the log under running invocations, without draining: as the README says, it is the
 * same as the process dying, seen from inside. Every run stops where it waits (a hold, a model
 * request in flight, a running tool) and its `wait()` rejects `LOG_CLOSED`; nothing more is
 * written; the next open's recovery ends each one. And `snapshot()` hands out a copy.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, recoverInvocations } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { answer, type RecordedRequest } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, intentOf, typesOf } from './support/engine-fixtures.js'

const question = (request: RecordedRequest) => JSON.stringify(request.body.messages)

test(
  'closing the log under a held run, a model request in flight and a running tool: each wait() rejects LOG_CLOSED, nothing more is written, recovery ends them',
  engineTest(
    (request) => {
      if (question(request).includes('question inflight')) return answer.text('too late', { hold: true })
      if (question(request).includes('question tool')) return answer.toolCalls([{ id: 'call-1', name: 'slow', arguments: {} }])
      return answer.text('done')
    },
    {},
    async (h) => {
      // A model request the server never answers (until the end of the test).
      const inflight = await h.engine.start(h.input('inflight'))
      await h.server.seen(0)
      // A reservation waiting for that request's safe point: refused as the log closes, saying so.
      const waiting = inflight.handoff().reserve(intentOf('inflight-next', 'run-inflight'))
      // A tool that runs until its signal aborts, and tells why.
      let toolStarted!: () => void
      const started = new Promise<void>((resolve) => (toolStarted = resolve))
      const seenReasons: unknown[] = []
      const slow = countingTool('slow', (_input, context) => {
        toolStarted()
        return new Promise((resolve) => {
          context.signal.addEventListener('abort', () => {
            seenReasons.push((context.signal.reason as { code?: unknown } | undefined)?.code)
            resolve({ stopped: true })
          })
        })
      })
      const tooling = await h.engine.start(h.input('tool', { tools: [slow] }))
      await started
      // A run held at its first safe point, waiting for a decision that never comes.
      const holding = await h.engine.start(h.input('held'))
      const hold = await holding.handoff().reserve(intentOf('held-next', 'run-held')).ready()
      assert.is(holding.state(), 'held')

      const before = h.log.head()
      await h.log.close()
      const outcomes = await Promise.allSettled([holding.wait(), inflight.wait(), tooling.wait()])
      assert.equal(
        outcomes.map((outcome) => (outcome.status === 'rejected' ? (outcome.reason as { code?: string }).code : outcome.status)),
        ['LOG_CLOSED', 'LOG_CLOSED', 'LOG_CLOSED'],
        'every wait() rejects LOG_CLOSED',
      )
      assert.equal(seenReasons, ['LOG_CLOSED'], "the tool's signal aborted with the log's LOG_CLOSED")
      const decided = await hold.commit().then(
        () => 'committed',
        (error: { code?: string }) => error.code,
      )
      assert.is(decided, 'HANDOFF_NOT_HELD', 'the hold ended with the run')
      const refused = await waiting.ready().then(
        () => undefined,
        (error: { code?: string; message?: string }) => error,
      )
      assert.is(refused?.code, 'HANDOFF_UNAVAILABLE')
      assert.match(refused?.message ?? '', /stopped: .*the log was closed/, refused?.message)
      await h.engine.drain()
      h.server.release(0)

      h.log = await EventLog.open(h.logPath)
      assert.equal(h.log.head(), before, 'nothing was written after close()')
      const last = async (name: string) => (await factsOf(h.log, `invocation-${name}`)).at(-1)?.type
      assert.equal([await last('held'), await last('inflight'), await last('tool')], ['hold.entered', 'model.requested', 'tool.dispatched'])
      assert.is(await recoverInvocations(h.log), 3, 'recovery ends the three')
      const ended = async (name: string) => {
        const fact = (await factsOf(h.log, `invocation-${name}`)).at(-1)
        return fact?.type === 'invocation.ended' && fact.outcome.status === 'failed' ? fact.outcome.class : fact?.type
      }
      assert.equal([await ended('held'), await ended('inflight'), await ended('tool')], ['host_interrupted', 'host_interrupted', 'outcome_unknown'])
      assert.is(slow.calls.length, 1, 'the tool ran once')
    },
  ),
)

test(
  'closing the log while a tool.dispatched is being written: the fact is durable, yet the tool never starts (as in a process that died), and hold.entered likewise leaves ready() rejecting LOG_CLOSED',
  engineTest(
    (request) =>
      question(request).includes('question tool') ? answer.toolCalls([{ id: 'call-1', name: 'effect', arguments: {} }]) : answer.text('done'),
    {},
    async (h) => {
      const internals = logInternals(h.log)
      const append = internals.appendAll
      let closing: Promise<void> | undefined
      // The host shuts down while the dispatch (then the hold) is in the group being written.
      internals.appendAll = (events, precondition) => {
        const appended = append(events, precondition)
        const type = events[0]?.fact.type
        if (type === 'tool.dispatched' || type === 'hold.entered') closing ??= h.log.close()
        return appended
      }
      const effect = countingTool('effect')
      const tooling = await h.engine.start(h.input('tool', { tools: [effect] }))
      assert.is(await tooling.wait().then(() => 'ended', (error: { code?: string }) => error.code), 'LOG_CLOSED')
      await closing
      assert.is(effect.calls.length, 0, 'the tool did not start after close()')

      h.log = await EventLog.open(h.logPath)
      assert.equal(await typesOf(h.log, 'invocation-tool'), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched'])
      const second = logInternals(h.log)
      const appendAgain = second.appendAll
      closing = undefined
      second.appendAll = (events, precondition) => {
        const appended = appendAgain(events, precondition)
        if (events[0]?.fact.type === 'hold.entered') closing ??= h.log.close()
        return appended
      }
      const engine = new Engine({ log: h.log })
      const holding = await engine.start(h.input('held'))
      const ready = holding.handoff().reserve(intentOf('held-next', 'run-held')).ready()
      assert.is(await ready.then(() => 'held', (error: { code?: string }) => error.code), 'LOG_CLOSED', 'ready() rejects LOG_CLOSED')
      assert.is(await holding.wait().then(() => 'ended', (error: { code?: string }) => error.code), 'LOG_CLOSED')
      await closing
      h.log = await EventLog.open(h.logPath)
      assert.equal(await typesOf(h.log, 'invocation-held'), ['invocation.opened', 'hold.entered'])
      assert.is(await recoverInvocations(h.log), 2)
    },
  ),
)

test(
  "snapshot() is a copy: changing it does not change the run's step count",
  engineTest([answer.text('done')], {}, async (h) => {
    const running = await h.start(h.input('copied'))
    const hold = await running.handoff().reserve(intentOf('copied-next', 'run-copied')).ready()
    const snapshot = running.snapshot()
    assert.is(snapshot.context.stepsUsed, 0)
    assert.ok(snapshot.matches('held'), "the copy keeps the snapshot's methods")
    snapshot.context.stepsUsed = 1_000
    assert.is(running.snapshot().context.stepsUsed, 0, 'a later snapshot is unchanged')
    await hold.release()
    assert.equal(await running.wait(), { status: 'completed' }, 'the run still had its steps')
    assert.is(h.server.requests.length, 1)
  }),
)

test(
  'drain() waits for a run still being admitted: aborting its signal, then drain() and close(), ends it cancelled{shutdown}, nothing left open',
  engineTest([answer.text('never asked')], {}, async (h) => {
    const controller = new AbortController()
    // Not awaited: the run is still being admitted when the shutdown begins.
    const starting = h.engine.start(h.input('late'), { signal: controller.signal })
    controller.abort('shutdown')
    await h.engine.drain()
    assert.equal(await typesOf(h.log, 'invocation-late'), ['invocation.opened', 'invocation.ended'], 'ended before drain() resolved')
    const running = await starting
    assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })
    assert.is(h.server.requests.length, 0)
  }),
)

test.run()
