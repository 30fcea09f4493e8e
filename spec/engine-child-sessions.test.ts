/**
 * A specialist with a session of its own: a `delegate` tool that runs the writer as a continuation of
 * one long-lived session (`writer-of-desk`), recording `parent: childRunFor(context, 'writer').parent`
 * but ids of its own. `childRunOf` cannot find such a child; `log.childRuns(operationId)` finds the
 * runs a call started whatever their session, and the README's recovery built on it never repeats the
 * writer's effect after a real process is killed with SIGKILL inside the writer's tool.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type ChildRunSummary, answerOf, childRunOf, recoverInvocations, usageOf } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { decodeRecord, encodeRecord } from '../store/encoding.js'
import { pendingCommand } from '../bin/commands/pending.js'
import { collector } from './support/cli-io.js'
import { rejectsWithCode } from './support/codes.js'
import { CWD, countingTool, engineTest, factsOf } from './support/engine-fixtures.js'
import { EventMaker, boundedTest, facts, invocationOf, refusal, killChildAt, withDb, withLog } from './support/log-fixtures.js'
import type { Fact, ParentCall, RunBoundary } from '../facts/types.js'
import { familyFacts } from './support/family-facts.js'

let drafts = ''
let savedOperation = ''

async function crashInTheWritersSecondSave(logPath: string): Promise<void> {
  drafts = join(logPath, '..', 'drafts.txt')
  savedOperation = await killChildAt('child-specialist-session.ts', [logPath, drafts], 'saved ')
}

const savedDrafts = () => readFileSync(drafts, 'utf8').split('\n').filter(Boolean)

test(
  "killed in the writer's tool, a specialist with its own session is found by log.childRuns, settled first, and its supervisor told: each draft is saved once",
  engineTest([answer.text('Saved the changelog.'), answer.text('The writer saved the changelog.')], { ms: 40_000, before: crashInTheWritersSecondSave }, async (h) => {
    const { log } = h
    assert.is(savedDrafts().length, 2, 'the first task saved once, the second was saving when the process was killed')
    assert.is(savedDrafts()[1], savedOperation)
    // 1. Recover: the supervisor's second run and the writer's second run were open.
    assert.is(await recoverInvocations(log), 2)
    // 2. The supervisor's uncertain delegate call.
    const [op] = (await log.pendingSessions({ sessionId: 'desk' }))[0]?.unknown ?? []
    assert.ok(op)
    assert.is(op.operationId, 'i2/step-1/0')
    // The ids childRunOf makes name no run: the writer ran under ids of its own.
    assert.equal(await log.runs(childRunOf(op.operationId, 'writer').sessionId), [], 'childRunOf finds nothing')
    const runs = await log.childRuns(op.operationId)
    assert.equal(
      runs.map((run) => [run.sessionId, run.kind, run.terminal, run.outcome?.status === 'failed' ? run.outcome.class : undefined, run.parent?.operationId]),
      [['writer-of-desk', 'continuation', 'failed', 'outcome_unknown', op.operationId]],
      'the call started one run, in the writer’s session',
    )
    // factstate pending names the call that left the writer's outcome, the second task's, not the first's.
    const listed = collector()
    assert.is(await pendingCommand([h.logPath], listed.io), 0)
    assert.equal(
      listed.out.filter((line) => line.startsWith('writer-of-desk:')),
      [`writer-of-desk: 1 tool outcome(s) to acknowledge: save_draft ${savedOperation} {"title":"Changelog"}; a child run of i2/step-1/0 (session desk): settle it through its supervisor's recovery`],
    )
    const earlier = await log.childRuns('i1/step-1/0')
    assert.equal(earlier.map((run) => [run.sessionId, run.kind, run.terminal]), [['writer-of-desk', 'message', 'completed']], "the first turn's call started the writer's first run, and only it")
    assert.equal(await log.childRuns('i2/step-1/1'), [], 'a call that started nothing')
    // 3. The child did not finish: its own uncertain save is checked by operation id, then it is continued with its parent.
    const last = runs.at(-1)
    assert.ok(last?.parent)
    const [save] = (await log.pendingSessions({ sessionId: last.sessionId }))[0]?.unknown ?? []
    assert.ok(save)
    assert.is(save.operationId, savedOperation)
    const childSource = (await log.runSource(last.sessionId, last.runId))?.boundary
    assert.ok(childSource)
    const saveDraft = countingTool('save_draft')
    const base = { provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted' }, configuration: { cwd: CWD }, maxSteps: 2 }
    const again = { sessionId: last.sessionId, turnId: last.turnId, runId: 'r-after-crash', invocationId: 'i-after-crash' }
    const content = `save_draft (operation ${save.operationId}): ${savedDrafts().includes(save.operationId) ? 'the draft was saved; do not save it again' : 'not saved'}`
    const childOutcome = await h.run({ ...base, invocation: again, parent: last.parent, tools: [saveDraft], work: { kind: 'continuation', source: childSource, allowPriorUnknown: true, content } })
    assert.is(childOutcome.status, 'completed')
    const answered = answerOf(await log.invocationEvents(again.invocationId))
    assert.is(answered, 'Saved the changelog.')
    // 4. The supervisor, told what its call did: it does not delegate again.
    const supervisorSource = (await log.runSource('desk', 'run-2'))?.boundary
    assert.ok(supervisorSource)
    const delegate = countingTool('delegate')
    const told = `delegate (operation ${op.operationId}) ran: the writer answered: ${answered}; do not delegate it again`
    assert.is((await h.run({ ...base, invocation: { sessionId: 'desk', turnId: 'turn-2', runId: 'run-3', invocationId: 'i3' }, tools: [delegate], work: { kind: 'continuation', source: supervisorSource, allowPriorUnknown: true, content: told } })).status, 'completed')
    assert.is(delegate.calls.length, 0)
    assert.is(saveDraft.calls.length, 0)
    assert.is(savedDrafts().length, 2, 'each task saved its draft once')
    assert.equal(await log.pendingSessions(), [], 'nothing pending')
    // The continuation, opened by this log since the first lookup, is the call's too.
    assert.equal((await log.childRuns(op.operationId)).map((run) => [run.runId, run.terminal]), [[last.runId, 'failed'], ['r-after-crash', 'completed']])
    // The family: three supervisor runs and three writer runs, each counted once.
    const family = await familyFacts(log, 'desk')
    const ids = new Set(family.map(({ event }) => event.invocation.invocationId))
    assert.is(ids.size, 6)
    assert.is(family.length, new Set(family.map(({ seq }) => seq)).size, 'no fact counted twice')
    assert.is(usageOf(family).answers, (await Promise.all([...ids].map(async (id) => (await factsOf(log, id)).filter((f) => f.type === 'model.completed').length))).reduce((a, b) => a + b, 0))
    // A log opened again finds the same runs by reading its records.
    await log.close()
    h.log = await EventLog.open(h.logPath)
    assert.equal((await h.log.childRuns(op.operationId)).map((run) => run.runId), [last.runId, 'r-after-crash'])
    assert.equal((await h.log.childRuns('i1/step-1/0')).map((run) => run.kind), ['message'])
    await rejectsWithCode(() => h.log.childRuns('' as string), 'LOG_INVALID_ARGUMENT', 'an empty operation id')
    await rejectsWithCode(() => h.log.childRuns(7 as never), 'LOG_INVALID_ARGUMENT', 'an operation id that is not a string')
  }),
)

/** A message or a continuation of `source` that records `parent` (none when undefined). */
function opened(content: string, parent?: ParentCall, source?: RunBoundary): Fact {
  const fact = facts.opened(content)
  if (fact.type !== 'invocation.opened' || fact.input.kind === 'handoff') throw new Error('not a message')
  const input = source === undefined ? fact.input : { kind: 'continuation' as const, source, content }
  return { ...fact, input: { ...input, ...(parent === undefined ? {} : { parent }) } }
}

const cancelled: Fact = facts.ended({ status: 'cancelled', source: 'signal' })
const listed = (runs: ChildRunSummary[]) => runs.map((run) => `${run.sessionId}/${run.runId}${run.parent ? ` <- ${run.parent.operationId}` : ''}`)

test(
  "childRuns: a call's runs in a shared session and the continuations of their turns, not another call's; found again in run records an earlier version wrote, which a writer completes; verify checks what they name",
  boundedTest(20_000, async (dir) => {
    const path = join(dir, 'log')
    const supervisor = invocationOf('sup', 'desk')
    const callA = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
    const callB = { invocation: supervisor, operationId: 'inv-sup/step-1/1' }
    const writer = (turn: string, run: string) => new EventMaker({ sessionId: 'writer-of-desk', turnId: turn, runId: run, invocationId: `i-${run}` })
    const expectedA = ['writer-of-desk/r1 <- inv-sup/step-1/0', 'writer-of-desk/r1b', 'own-session/r3 <- inv-sup/step-1/0']
    const expectedB = ['writer-of-desk/r2 <- inv-sup/step-1/1']
    await withLog(path, async (log) => {
      await log.appendAll(writer('t1', 'r1').many([opened('draft it', callA), cancelled]))
      // Carried on in the same turn without a parent (as a review's decision continues a child): call A's.
      const r1 = (await log.runSource('writer-of-desk', 'r1'))?.boundary
      await log.appendAll(writer('t1', 'r1b').many([opened('go on', undefined, r1), cancelled]))
      // The next task, in the same session: call B's alone.
      const r1b = (await log.runSource('writer-of-desk', 'r1b'))?.boundary
      assert.equal(listed(await log.childRuns(callA.operationId)), expectedA.slice(0, 2), 'before the next task')
      await log.appendAll(writer('t2', 'r2').many([opened('the changelog', callB, r1b), cancelled]))
      // A second child of call A in a session of its own.
      await log.appendAll(new EventMaker({ sessionId: 'own-session', turnId: 't3', runId: 'r3', invocationId: 'i-r3' }).many([opened('review it', callA), cancelled]))
      assert.equal(listed(await log.childRuns(callA.operationId)), expectedA, 'kept up by the commits since the first lookup')
      assert.equal(listed(await log.childRuns(callB.operationId)), expectedB)
      assert.equal(await log.childRuns('inv-sup/step-1/2'), [])
    })
    // As an earlier version wrote them: run records without parentOperationId.
    const stripped = await withDb(path, async (db) => {
      let count = 0
      for await (const [key, value] of db.iterator({ gte: 'r!', lt: 'r"' })) {
        const { parentOperationId, ...rest } = decodeRecord<Record<string, unknown>>(value, key)
        assert.ok(parentOperationId !== undefined, `${key} names its parent call (or null)`)
        await db.put(key, encodeRecord(rest))
        count += 1
      }
      return count
    })
    assert.is(stripped, 4)
    await withLog(path, async (log) => {
      assert.equal(listed(await log.childRuns(callA.operationId)), expectedA, 'read from the opened facts')
      assert.equal(listed(await log.childRuns(callB.operationId)), expectedB)
      await log.verify()
    })
    const completed = await withDb(path, async (db) => {
      const found: Record<string, unknown> = {}
      for await (const [key, value] of db.iterator({ gte: 'r!', lt: 'r"' })) found[key] = decodeRecord<{ parentOperationId?: unknown }>(value, key).parentOperationId
      return found
    })
    assert.equal(completed, { 'r!own-session!r3': callA.operationId, 'r!writer-of-desk!r1': callA.operationId, 'r!writer-of-desk!r1b': null, 'r!writer-of-desk!r2': callB.operationId }, 'the writer completed the records')
    await withLog(path, async (log) => {
      assert.equal(listed(await log.childRuns(callA.operationId)), expectedA, 'from the completed records')
      await log.verify()
    })
    // A record naming another call than its opened fact is damage.
    await withDb(path, async (db) => db.put('r!writer-of-desk!r2', encodeRecord({ invocationId: 'i-r2', source: decodeRecord<{ source: unknown }>((await db.get('r!writer-of-desk!r2')) as Uint8Array, 'r2').source, parentOperationId: callA.operationId })))
    await withLog(path, async (log) => {
      const damage = await refusal(log.verify())
      assert.is(damage.code, 'LOG_CORRUPT')
      assert.equal([damage.details?.index, damage.details?.key], ['run', 'r!writer-of-desk!r2'])
    })
  }),
)

test.run()
