/**
 * A log put back from a backup: it knows it is one (`restoredFrom()`, the point `EventLog.backup`
 * left in the copy), and an engine on it refuses the next run of every session that has not run
 * since that point, successors included, until a run acknowledges it (`allowRestored`): what
 * the session did after the backup (here a deploy, and a successor that used its claim) is not in
 * the log, and must not be done again unknowingly.
 */
import { rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, recoverInvocations, type BackupPoint, type RecoveredInvocation, type RunInput } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { type EngineHarness, countingTool, engineTest, factsOf, recoveringAfterSessionRead, refusedWithoutWriting, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'

/** The disk is lost: the log is closed, its directory removed, the backup put in its place and opened (the harness's log from then on). */
async function putBack(h: EngineHarness, backupDir: string): Promise<EventLog> {
  await h.log.close()
  await rm(h.logPath, { recursive: true })
  await rename(backupDir, h.logPath)
  h.log = await EventLog.open(h.logPath)
  return h.log
}

test(
  'after a restore, each session that has not run since the backup needs allowRestored (messages, continuations, successors), which allowPriorUnknown does not give; new sessions and acknowledged ones run',
  engineTest(
    [
      answer.text('a1 done'),
      answer.text('b1 done'),
      answer.toolCalls([{ id: 'call-deploy', name: 'deploy', arguments: { value: 1 } }]),
      answer.text('deployed'),
      answer.text('successor done'),
      answer.text('c done'),
      answer.text('a3 done'),
      answer.text('a4 done'),
      answer.text('successor again'),
    ],
    { ms: 30_000 },
    async (h) => {
      const deploy = countingTool('deploy')
      const input = (name: string, session: string, content?: string): RunInput => ({
        ...h.input(name, { session, tools: [deploy] }),
        ...(content === undefined ? {} : { work: { kind: 'message', content } }),
      })
      assert.equal(await h.run(input('a1', 'A')), { status: 'completed' })
      assert.equal(await h.run(input('b1', 'B')), { status: 'completed' })
      const sealed = await sealAtFirstSafePoint(h, { ...input('p1', 'P'), tools: [deploy] }, 'p-successor')
      assert.is(h.log.restoredFrom(), undefined, 'a log that was never a backup')

      const backupDir = join(h.dir, 'backup')
      const before = Date.now()
      const backup = await EventLog.backup(h.logPath, backupDir)
      const after = Date.now()

      // After the backup: a deploy in session A, and P's successor runs (its claim used).
      assert.equal(await h.engine.run(input('a2', 'A', 'deploy it')), { status: 'completed' })
      assert.is(deploy.calls.length, 1)
      assert.equal(await h.engine.run(successorInput(sealed)), { status: 'completed' })
      await h.engine.drain()

      // The disk is lost: the backup is put in the log's place.
      const log = await putBack(h, backupDir)
      assert.is(await recoverInvocations(log), 0)
      const point = log.restoredFrom() as BackupPoint
      assert.equal({ highWater: point.highWater, digest: point.digest }, { highWater: backup.events, digest: backup.digest })
      assert.ok(point.takenAt >= before && point.takenAt <= after, `taken at ${point.takenAt}, between ${before} and ${after}`)
      assert.equal(log.head(), { highWater: backup.events, digest: backup.digest }, 'the log went back to the backup')
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
      const start = async (run: RunInput, options?: Parameters<Engine['start']>[1]) => {
        const running = await engine.start(run, options)
        h.runs.push(running)
        return running
      }

      const refusal = await refusedWithoutWriting(log, () => engine.start(input('a3', 'A', 'go on')), 'RUN_RECONCILIATION_REQUIRED', 'a message to A')
      assert.equal(refusal.details, { unknown: [], restored: point })
      assert.match(refusal.message, /put back from a backup taken at .* \(at seq \d+\), and this session has not run since/)
      assert.match(refusal.message, /pass work\.allowRestored: true to go on/)
      const a1 = (await log.runSource('A', 'run-a1'))?.boundary
      assert.ok(a1)
      await refusedWithoutWriting(log, () => engine.start({ ...input('a3', 'A'), work: { kind: 'continuation', source: a1 } }), 'RUN_RECONCILIATION_REQUIRED', 'a continuation of A')
      await refusedWithoutWriting(log, () => engine.start({ ...input('a3', 'A'), work: { kind: 'message', content: 'go on', allowRestored: false } }), 'RUN_RECONCILIATION_REQUIRED', 'allowRestored: false')
      // Unknown outcomes are another acknowledgement: it does not cover what the session did after the backup.
      await refusedWithoutWriting(log, () => engine.start({ ...input('a3', 'A'), work: { kind: 'message', content: 'go on', allowPriorUnknown: true } }), 'RUN_RECONCILIATION_REQUIRED', 'allowPriorUnknown: true')
      await refusedWithoutWriting(log, () => engine.start({ ...input('a3', 'A'), work: { kind: 'continuation', source: a1, allowPriorUnknown: true } }), 'RUN_RECONCILIATION_REQUIRED', 'a continuation with allowPriorUnknown')
      // The successor may have run after the backup: the claim looks unused here.
      const successor = await refusedWithoutWriting(log, () => engine.start(successorInput(sealed)), 'RUN_RECONCILIATION_REQUIRED', "P's successor")
      assert.equal(successor.details, { unknown: [], restored: point })
      await refusedWithoutWriting(log, () => engine.start(successorInput(sealed), { signal: AbortSignal.abort() }), 'RUN_RECONCILIATION_REQUIRED', "P's turn given up")

      const pending = await log.pendingSessions()
      assert.equal(
        pending.map((session) => [session.sessionId, session.paused.map((turn) => turn.runId), session.restored]),
        [
          ['A', [], point],
          ['B', [], point],
          ['P', ['run-p1'], point],
        ],
        'every session of the backup is pending its acknowledgement',
      )

      // A session the backup does not know of runs as in any log.
      assert.equal(await (await start(input('c1', 'C'))).wait(), { status: 'completed' })
      // An acknowledged run, then the session runs as before.
      assert.equal(await (await start({ ...input('a3', 'A'), work: { kind: 'message', content: 'go on', allowRestored: true } })).wait(), { status: 'completed' })
      assert.equal(await (await start(input('a4', 'A', 'and again'))).wait(), { status: 'completed' })
      assert.equal(
        (await log.pendingSessions()).map((session) => session.sessionId),
        ['B', 'P'],
        'A and C have run since the backup',
      )
      assert.equal(await (await start({ ...successorInput(sealed), work: { ...(successorInput(sealed).work as object), allowRestored: true } as RunInput['work'] })).wait(), { status: 'completed' })
      assert.is(deploy.calls.length, 1, 'no tool ran again')
      assert.equal(
        (await factsOf(log, 'invocation-a3')).filter((fact) => fact.type === 'invocation.opened').map((fact) => fact.type === 'invocation.opened' && fact.input.kind === 'message' && fact.input.priorUnknown),
        [undefined],
        'nothing to record: no tool outcome of the log is unknown',
      )
      await engine.drain()
      assert.equal(await log.verify(), log.head() && { events: log.head().highWater, digest: log.head().digest })
    },
  ),
)

test(
  'a run open in the backup, closed by recoverInvocations while a message to its session is being admitted: the message is still refused',
  engineTest([answer.hang(), answer.text('a2 done')], { ms: 30_000 }, async (h) => {
    const cancel = new AbortController()
    // Not through h.start: in the restored log recovery closes this run, not its actor.
    const open = await h.engine.start(h.input('a1', { session: 'A' }), { signal: cancel.signal })
    const backupDir = join(h.dir, 'backup')
    await EventLog.backup(h.logPath, backupDir)
    cancel.abort()
    await open.wait()
    await h.engine.drain()
    const log = await putBack(h, backupDir)
    assert.equal((await log.pendingSessions()).map((session) => [session.sessionId, session.active.length, session.restored !== undefined]), [['A', 1, true]])
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
    // The application recovers while its first request comes in: the open run is closed after the
    // engine saw it open (so it left the refusal to the admission's RUN_BUSY) and before the admission.
    try {
      const recovered = await recoveringAfterSessionRead(log, async () => {
        const error = await rejectsWithCode(() => engine.start(h.input('a2', { session: 'A', content: 'go on' })), 'RUN_RECONCILIATION_REQUIRED', 'a message to A')
        assert.equal((error.details as { restored?: unknown }).restored, log.restoredFrom())
      })
      assert.ok(recovered)
    } finally {
      await engine.drain()
    }
    assert.equal((await log.runs('A')).map((run) => run.runId), ['run-a1'], 'nothing was admitted')
  }),
)

test(
  "a run open in the backup that went on after it: recovery reports it restored, and the restart recipe's continuation with allowPriorUnknown is refused",
  engineTest(
    [answer.toolCalls([{ id: 'call-mail', name: 'mail', arguments: { value: 1 } }], { hold: true }), answer.text('mailed'), answer.text('mailed again')],
    { ms: 30_000 },
    async (h) => {
      const mail = countingTool('mail')
      const input = (name: string): RunInput => h.input(name, { session: 'M', tools: [mail] })
      // The run is awaiting its model when the backup is taken; after it, the model asks for the mail and it is sent.
      const open = await h.start(input('m1'))
      await h.server.seen(0)
      const backupDir = join(h.dir, 'backup')
      await EventLog.backup(h.logPath, backupDir)
      h.server.release(0)
      assert.equal(await open.wait(), { status: 'completed' })
      assert.is(mail.calls.length, 1)
      await h.engine.drain()
      h.runs.length = 0
      const log = await putBack(h, backupDir)
      // The restart's recipe: recovery closes the run the backup left open, with nothing uncertain in it.
      const closed: RecoveredInvocation[] = []
      assert.is(await recoverInvocations(log, { onClosed: (run) => void closed.push(run) }), 1)
      assert.equal(
        closed.map((run) => [run.invocation.runId, run.outcome.class, run.uncertainOperations.length, run.restored]),
        [['run-m1', 'host_interrupted', 0, log.restoredFrom()]],
      )
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
      try {
        const boundary = (closed[0] as RecoveredInvocation).boundary
        const continuation = (extra: object): RunInput => ({ ...input('m2'), work: { kind: 'continuation', source: boundary, ...extra } })
        const refusal = await refusedWithoutWriting(log, () => engine.start(continuation({ allowPriorUnknown: true })), 'RUN_RECONCILIATION_REQUIRED', 'the recipe\'s continuation')
        assert.equal(refusal.details, { unknown: [], restored: log.restoredFrom() })
        assert.is(mail.calls.length, 1, 'the mail was not sent again')
        // Once the mail is checked, the restore is acknowledged and the turn goes on.
        const acknowledged = await engine.start(continuation({ allowRestored: true }))
        assert.equal(await acknowledged.wait(), { status: 'completed' })
        h.runs.push(acknowledged)
        assert.is(mail.calls.length, 1, 'the model answered in text this time')
      } finally {
        await engine.drain()
      }
    },
  ),
)

test(
  'a successor whose claim was used before the backup is HANDOFF_CLAIMED on the restored log, acknowledged or not: there is nothing to reconcile',
  engineTest([answer.text('successor done')], { ms: 30_000 }, async (h) => {
    const sealed = await sealAtFirstSafePoint(h, h.input('q1', { session: 'Q' }), 'q-successor')
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
    const backupDir = join(h.dir, 'backup')
    await EventLog.backup(h.logPath, backupDir)
    const log = await putBack(h, backupDir)
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
    try {
      const plain = await refusedWithoutWriting(log, () => engine.start(successorInput(sealed)), 'HANDOFF_CLAIMED', 'a second successor')
      assert.is((plain.details as { claimedBy?: string }).claimedBy, sealed.pause.intent.successorInvocationId)
      const acknowledged = { ...successorInput(sealed), work: { ...(successorInput(sealed).work as object), allowRestored: true } as RunInput['work'] }
      await refusedWithoutWriting(log, () => engine.start(acknowledged), 'HANDOFF_CLAIMED', 'a second successor, acknowledged')
    } finally {
      await engine.drain()
    }
  }),
)

test.run()
