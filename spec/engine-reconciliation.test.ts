/**
 * RUN_RECONCILIATION_REQUIRED (DESIGN §5, §7), produced for real: a child process runs an engine
 * whose tool never returns and is killed with SIGKILL while the tool executes. On reopen,
 * recovery closes the invocation `outcome_unknown`; the session then refuses new work until a
 * run acknowledges the unknown outcome, and the model is told — the tool is never replayed.
 */
import { test } from 'uvu'
import type { Fact } from '../facts/types.js'
import { summarizeFact } from '../store/fact-summary.js'
import * as assert from 'uvu/assert'
import { EventLog, type UncertainOperation, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, lastFactOf, messagesOf, only, recoveringAfterSessionRead, refusedWithoutWriting } from './support/engine-fixtures.js'
import { EventMaker, facts, invocationOf, killChildAt } from './support/log-fixtures.js'
import { rejectsWithCode } from './support/codes.js'

let operationId = ''

async function crashWhileToolRuns(logPath: string): Promise<void> {
  operationId = await killChildAt('child-engine-tool.ts', [logPath], 'executing ')
  // Recovery happens on the reopened log, before any engine runs on it.
  const log = await EventLog.open(logPath)
  try {
    const before = await log.prefix(100, 1 << 20)
    assert.equal(before.projectInvocation('invocation-crash'), { terminal: null, uncertainOperations: [operationId], unfinishedModelSteps: [] })
    assert.is(await recoverInvocations(log), 1)
    assert.is(await recoverInvocations(log), 0, 'a second recovery writes nothing')
  } finally {
    await log.close()
  }
}

test(
  'a tool dispatched when the host died: outcome_unknown, reconciliation required, acknowledged runs are told and nothing is replayed',
  engineTest([answer.text('I will check the deployment'), answer.text('checked'), answer.text('fine')], { ms: 30_000, before: crashWhileToolRuns }, async (h) => {
    const facts = await factsOf(h.log, 'invocation-crash')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'],
      'no settlement is invented',
    )
    const ended = facts.at(-1)
    assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'outcome_unknown')
    assert.is(only(facts, 'tool.dispatched')[0]?.operationId, operationId)

    const deploy = countingTool('deploy')
    const input = (name: string) => h.input(name, { session: 'session-crash', tools: [deploy] })
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(input('next')), 'RUN_RECONCILIATION_REQUIRED', 'a new message')
    const unknown = refused.details?.unknown as UncertainOperation[]
    assert.equal(
      unknown.map((op) => [op.invocationId, op.operationId, op.callId, op.name, op.input]),
      [['invocation-crash', operationId, 'call-deploy', 'deploy', { target: 'production' }]],
      'each with the input it was dispatched with',
    )
    const crashed = (await h.log.runSource('session-crash', 'run-crash'))?.boundary
    assert.ok(crashed)
    const continuation = input('continued')
    continuation.work = { kind: 'continuation', source: crashed }
    await refusedWithoutWriting(h.log, () => h.engine.start(continuation), 'RUN_RECONCILIATION_REQUIRED', 'a continuation')
    const declined = input('next')
    declined.work = { kind: 'message', content: 'question next', allowPriorUnknown: false }
    await refusedWithoutWriting(h.log, () => h.engine.start(declined), 'RUN_RECONCILIATION_REQUIRED', 'allowPriorUnknown: false')

    const acknowledged = input('next')
    acknowledged.work = { kind: 'message', content: 'question next', allowPriorUnknown: true }
    const next = await h.start(acknowledged)
    assert.equal(await next.wait(), { status: 'completed' })
    const opened = only(await factsOf(h.log, 'invocation-next'), 'invocation.opened')[0]
    assert.equal(opened?.input.kind !== 'handoff' && opened?.input.priorUnknown, [
      { invocationId: 'invocation-crash', operationId, callId: 'call-deploy', name: 'deploy', input: { target: 'production' } },
    ])
    const told = messagesOf(h.server.requests[0]?.body)
    assert.equal(
      told.map((m) => m.role),
      ['system', 'user'],
    )
    assert.ok(
      told[0]?.content?.includes(`deploy with {"target":"production"} (operation ${operationId})`),
      `the model is told which call may or may not have happened, with its arguments: ${told[0]?.content}`,
    )

    // Acknowledged once, the session is free again: a continuation of the crashed run replays it from facts.
    const resumed = await h.start(continuation)
    assert.equal(await resumed.wait(), { status: 'completed' })
    const replayed = messagesOf(h.server.requests[1]?.body)
    assert.equal(
      replayed.map((m) => m.role),
      ['user', 'assistant', 'tool'],
    )
    assert.is(replayed[2]?.tool_call_id, 'call-deploy', 'the unknown call is answered from facts, not executed')
    assert.equal(await lastFactOf(h.log, 'invocation-continued'), { type: 'invocation.ended', outcome: { status: 'completed' } })
    const plain = await h.start(input('plain'))
    assert.equal(await plain.wait(), { status: 'completed' })
    assert.is(deploy.calls.length, 0, 'the tool is never replayed')
    assert.is(h.server.requests.length, 3)
  }),
)

test(
  'an unknown operation whose input a new run could not record as deep as its acknowledgement sits is acknowledged without it',
  engineTest([answer.text('noted')], {}, async (h) => {
    // 62 objects deep: it fits where a dispatch records it (fact.input), not three levels further down.
    let deep: unknown = 'bottom'
    for (let level = 0; level < 62; level += 1) deep = { level: deep }
    const make = new EventMaker({ sessionId: 'session-deep', turnId: 'turn-deep', runId: 'run-deep', invocationId: 'invocation-deep' })
    const calls = [
      { callId: 'call-deep', name: 'deploy', arguments: '{}' },
      { callId: 'call-flat', name: 'deploy', arguments: '{}' },
    ]
    await h.log.appendAll(
      make.many([
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', calls),
        { type: 'tool.dispatched', operationId: 'op-deep', callId: 'call-deep', name: 'deploy', input: deep },
        { type: 'tool.dispatched', operationId: 'op-flat', callId: 'call-flat', name: 'deploy', input: { target: 'staging' } },
      ]),
    )
    assert.is(await recoverInvocations(h.log), 1)
    const input = h.input('after-deep', { session: 'session-deep' })
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_RECONCILIATION_REQUIRED', 'a new message')
    assert.equal(
      (refused.details?.unknown as UncertainOperation[]).map((op) => [op.operationId, op.input]),
      [
        ['op-deep', undefined],
        ['op-flat', { target: 'staging' }],
      ],
    )
    // The details are the caller's own copy: changing them changes nothing the engine or the log holds.
    const given = refused.details?.unknown as UncertainOperation[]
    ;(given[0] as UncertainOperation).operationId = 'op-changed'
    given.length = 1
    const again = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_RECONCILIATION_REQUIRED', 'the same message again')
    assert.equal(
      (again.details?.unknown as UncertainOperation[]).map((op) => op.operationId),
      ['op-deep', 'op-flat'],
    )
    input.work = { kind: 'message', content: 'go on', allowPriorUnknown: true }
    assert.equal(await h.run(input), { status: 'completed' })
    const opened = only(await factsOf(h.log, 'invocation-after-deep'), 'invocation.opened')[0]
    assert.equal(opened?.input.kind === 'message' && opened.input.priorUnknown?.map((op) => [op.operationId, 'input' in op]), [
      ['op-deep', false],
      ['op-flat', true],
    ])
    const note = messagesOf(h.server.requests[0]?.body)[0]?.content ?? ''
    assert.ok(note.includes('deploy (operation op-deep), deploy with {"target":"staging"} (operation op-flat)'), note)
  }),
)

test(
  'a continuation of the crashed run that acknowledges the unknown outcome, with instructions and a next message: one leading system message (instructions, then the note), the lineage replayed, the message last',
  engineTest([answer.text('checked it')], { ms: 30_000, before: crashWhileToolRuns }, async (h) => {
    const crashed = (await h.log.runSource('session-crash', 'run-crash'))?.boundary
    assert.ok(crashed)
    const input = h.input('told', { session: 'session-crash', tools: [countingTool('deploy')] })
    input.instructions = 'You are careful with deployments.'
    input.work = { kind: 'continuation', source: crashed, content: 'did the deploy happen?', allowPriorUnknown: true }
    assert.equal(await h.run(input), { status: 'completed' })
    const sent = messagesOf(h.server.requests[0]?.body)
    assert.equal(
      sent.map((m) => m.role),
      ['system', 'user', 'assistant', 'tool', 'user'],
    )
    const [system] = sent
    assert.ok(system?.content?.startsWith('You are careful with deployments.\n\n'), `instructions first: ${system?.content}`)
    assert.ok(system?.content?.includes(`deploy with {"target":"production"} (operation ${operationId})`), `then the note: ${system?.content}`)
    assert.is(sent[3]?.tool_call_id, 'call-deploy', 'the unknown call answered from facts')
    assert.equal(sent.at(-1), { role: 'user', content: 'did the deploy happen?' })
    const [opened] = only(await factsOf(h.log, 'invocation-told'), 'invocation.opened')
    assert.equal(opened?.input.kind === 'continuation' && [opened.input.content, opened.input.priorUnknown?.map((op) => op.operationId)], ['did the deploy happen?', [operationId]])
    assert.is(opened?.execution.instructions, 'You are careful with deployments.')
    // The CLI's line (and the inspector's timeline) for it says it acknowledged the unknown outcome.
    assert.match(summarizeFact(opened as Fact), /^continuation from run-crash@\d+, message "did the deploy happen\?" \(acknowledges 1 unknown outcome\(s\)\); instructions /)
  }),
)

test(
  'a run left open is closed outcome_unknown by recovery while a message to its session is being admitted: the refusal names each call with its input',
  engineTest([], {}, async (h) => {
    const left = new EventMaker(invocationOf('left', 'session-left'))
    const list = [facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{"value":7}' }]), facts.dispatched('op1', { value: 7 })]
    for (const event of left.many(list)) await h.log.append(event)
    // The engine sees the run open (and leaves the refusal to the admission's RUN_BUSY); recovery
    // closes it before the admission, which then finds the outcome unknown.
    const recovered = await recoveringAfterSessionRead(h.log, async () => {
      const error = await rejectsWithCode(() => h.engine.start(h.input('next', { session: 'session-left' })), 'RUN_RECONCILIATION_REQUIRED', 'a message')
      assert.equal(
        (error.details?.unknown as UncertainOperation[]).map((op) => [op.operationId, op.name, op.input]),
        [['op1', 'echo', { value: 7 }]],
        'with the input it was dispatched with, as when the engine finds it before the admission',
      )
    })
    assert.ok(recovered)
  }),
)

test.run()
