/**
 * A supervisor that delegates to a writer agent (a child run) is killed with SIGKILL while the
 * writer's `save_draft` runs, in a real child process. The README's recipe ("Agents that call
 * agents") then never repeats the writer's effect: recover, find the uncertain delegate call's child
 * run with `childRunOf`, settle the child first (it was left uncertain itself), and tell the
 * supervisor what the child answered instead of letting it delegate again.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type UncertainOperation, answerOf, childRunOf, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { CWD, countingTool, engineTest, factsOf, messagesOf } from './support/engine-fixtures.js'
import { killChildAt } from './support/log-fixtures.js'

let drafts = ''
let savedOperation = ''
const supervisor = { sessionId: 'support', turnId: 'turn-1', runId: 'run-1', invocationId: 'sup-1' }

async function crashWhileTheWriterSaves(logPath: string): Promise<void> {
  drafts = join(logPath, '..', 'drafts.txt')
  savedOperation = await killChildAt('child-delegation.ts', [logPath, drafts], 'saved ')
}

const savedDrafts = () => readFileSync(drafts, 'utf8').split('\n').filter(Boolean)

test(
  "after a crash mid-delegation, the recipe finds the child by childRunOf, settles it, and tells the supervisor: the writer's draft is saved exactly once",
  engineTest([answer.text('Saved the draft "Release note".'), answer.text('The writer saved the release note draft.')], { ms: 40_000, before: crashWhileTheWriterSaves }, async (h) => {
    const { log, engine } = h
    assert.equal(savedDrafts(), [savedOperation], 'the draft was saved once before the crash')
    // 1. Recover: both runs were open; each had a call in flight.
    const closed: string[] = []
    assert.is(await recoverInvocations(log, { onClosed: ({ invocation, outcome }) => void closed.push(`${invocation.invocationId} ${outcome.status === 'failed' ? outcome.class : outcome.status}`) }), 2)
    const delegateCall = (await factsOf(log, 'sup-1')).find((fact) => fact.type === 'tool.dispatched')
    assert.ok(delegateCall?.type === 'tool.dispatched')
    const writer = childRunOf(delegateCall.operationId, 'writer')
    assert.equal(closed.sort(), [`${writer.invocationId} outcome_unknown`, 'sup-1 outcome_unknown'].sort())

    // 2. The supervisor's next run names its uncertain delegate call.
    const saveDraft = countingTool('save_draft')
    const base = { provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted' }, configuration: { cwd: CWD }, maxSteps: 2 }
    const supervisorSource = (await log.runSource('support', 'run-1'))?.boundary
    assert.ok(supervisorSource)
    const next = { ...base, invocation: { ...supervisor, runId: 'run-2', invocationId: 'sup-2' }, tools: [countingTool('delegate')] }
    const refused = await rejectsWithCode(() => engine.start({ ...next, work: { kind: 'continuation', source: supervisorSource } }), 'RUN_RECONCILIATION_REQUIRED', 'the supervisor, unacknowledged')
    const [unknown] = refused.details?.unknown as UncertainOperation[]
    assert.is(unknown?.name, 'delegate')

    // 3. Its child, found from the operation id and the recorded input: it was left uncertain too.
    assert.ok(unknown)
    const child = childRunOf(unknown.operationId, (unknown.input as { specialist: string }).specialist)
    assert.equal(child, writer)
    const runs = await log.runs(child.sessionId)
    assert.equal(runs.map((run) => [run.invocationId, run.terminal, run.outcome?.status === 'failed' && run.outcome.class]), [[child.invocationId, 'failed', 'outcome_unknown']])
    const [opened] = await factsOf(log, child.invocationId)
    assert.ok(opened?.type === 'invocation.opened' && opened.input.kind === 'message')
    assert.equal(opened.input.parent, { invocation: supervisor, operationId: unknown.operationId })

    // 4. Settle the child first: its save_draft is checked by its operation id in the draft store, and
    // the child's continuation is told what the check found, so it does not save again.
    const childSource = (await log.runSource(child.sessionId, child.runId))?.boundary
    assert.ok(childSource)
    const childNext = { ...base, invocation: { ...child, runId: `${child.runId}.after-crash`, invocationId: `${child.invocationId}.after-crash` }, parent: opened.input.parent, tools: [saveDraft] }
    const childRefused = await rejectsWithCode(() => engine.start({ ...childNext, work: { kind: 'continuation', source: childSource } }), 'RUN_RECONCILIATION_REQUIRED', 'the child, unacknowledged')
    const [save] = childRefused.details?.unknown as UncertainOperation[]
    assert.is(save?.operationId, savedOperation)
    const found = savedDrafts().includes(savedOperation)
    assert.ok(found)
    const childOutcome = await (
      await h.start({ ...childNext, work: { kind: 'continuation', source: childSource, allowPriorUnknown: true, content: 'Checked: the draft "Release note" was saved. Do not save it again.' } })
    ).wait()
    assert.is(childOutcome.status, 'completed')
    const childAnswer = answerOf(await log.invocationEvents(childNext.invocation.invocationId))
    assert.is(childAnswer, 'Saved the draft "Release note".')

    // 5. Tell the supervisor what the child answered, instead of letting it delegate again.
    const outcome = await (
      await h.start({ ...next, work: { kind: 'continuation', source: supervisorSource, allowPriorUnknown: true, content: `The writer (child run ${child.sessionId}) answered: ${childAnswer}` } })
    ).wait()
    assert.is(outcome.status, 'completed')
    const lastRequest = messagesOf(h.server.requests.at(-1)?.body)
    assert.ok(lastRequest.some((message) => message.role === 'user' && message.content?.includes(`answered: ${childAnswer}`)), 'the supervisor was told the answer')
    assert.is(saveDraft.calls.length, 0, 'save_draft never ran again')
    assert.equal(savedDrafts(), [savedOperation], "the writer's effect happened exactly once")
    assert.is(h.server.requests.length, 2, 'no model asked to delegate or save again')
  }),
)

test.run()
