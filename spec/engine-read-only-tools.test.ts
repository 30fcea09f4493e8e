/**
 * Read-only tools (`ToolDefinition.readOnly`): a crash while one runs leaves its outcome unknown
 * like any other (no settlement is invented, the run ends `outcome_unknown`), but the session needs
 * no reconciliation for it, and a continuation tells the model it may call it again. The tool is
 * never run again by factstate itself. Produced for real: a child process is SIGKILLed while the tools run.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, recoverInvocations, type ToolDefinition } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'
import { startChild } from './support/log-fixtures.js'

/** Runs the child in `mode` until every tool it calls is executing, kills it, and recovers the log; returns the operation ids. */
function crashWhileToolsRun(mode: 'read-only' | 'mixed', started: string[]) {
  return async (logPath: string): Promise<void> => {
    const child = startChild('child-engine-tool.ts', [logPath, mode])
    try {
      for (let call = 0; call < (mode === 'mixed' ? 2 : 1); call += 1) {
        const line = await child.waitForLine((l) => l.startsWith('executing ') && !started.includes(l.slice('executing '.length)), 20_000)
        started.push(line.slice('executing '.length))
      }
    } finally {
      await child.stop('SIGKILL')
    }
    assert.is((await child.exited).signal, 'SIGKILL', `the child was killed, not finished (${child.stderr()})`)
    const log = await EventLog.open(logPath)
    try {
      assert.is(await recoverInvocations(log), 1)
    } finally {
      await log.close()
    }
  }
}

const searchTool = (): ToolDefinition & { calls: unknown[] } => {
  const tool = countingTool('search')
  tool.readOnly = true
  return tool
}

{
  const started: string[] = []
  test(
    'a read-only call the host died in: outcome_unknown and listed as uncertain, yet the session goes on, and a continuation tells the model it may call it again',
    engineTest([answer.text('no open incidents found yet'), answer.text('searched again')], { ms: 30_000, before: crashWhileToolsRun('read-only', started) }, async (h) => {
      const [operationId] = started
      const crashed = await factsOf(h.log, 'invocation-crash')
      assert.equal(
        crashed.map((fact) => fact.type),
        ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'],
        'no settlement is invented',
      )
      assert.equal(only(crashed, 'tool.dispatched')[0], { type: 'tool.dispatched', operationId, callId: 'call-search', name: 'search', input: { query: 'open incidents' }, readOnly: true })
      const ended = crashed.at(-1)
      assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'outcome_unknown')
      const prefix = await h.log.prefix(100, 1 << 20)
      assert.equal(prefix.projectInvocation('invocation-crash').uncertainOperations, [operationId])

      const search = searchTool()
      const input = (name: string) => h.input(name, { session: 'session-crash', tools: [search] })
      // No reconciliation: a new message is admitted as it is, and acknowledges nothing.
      assert.equal(await h.run(input('next')), { status: 'completed' })
      const opened = only(await factsOf(h.log, 'invocation-next'), 'invocation.opened')[0]
      assert.is(opened?.input.kind === 'message' && opened.input.priorUnknown, undefined)
      assert.equal(
        messagesOf(h.server.requests[0]?.body).map((m) => m.role),
        ['user'],
        'the model is told of no unknown effect',
      )
      // A continuation of the crashed run: the lost call is answered from facts, as a result lost, not an effect unknown.
      const source = (await h.log.runSource('session-crash', 'run-crash'))?.boundary
      assert.ok(source)
      const continuation = input('continued')
      continuation.work = { kind: 'continuation', source }
      assert.equal(await h.run(continuation), { status: 'completed' })
      const replayed = messagesOf(h.server.requests[1]?.body)
      assert.equal(
        replayed.map((m) => m.role),
        ['user', 'assistant', 'tool'],
      )
      assert.is(
        replayed[2]?.content,
        `result lost: read-only operation ${operationId} was dispatched but never settled; it has no side effect, so it can be called again`,
      )
      assert.is(search.calls.length, 0, 'factstate never runs it again by itself')
      assert.equal(await h.log.verify(), { events: (await h.log.head()).highWater, digest: (await h.log.head()).digest }, 'the indexes agree with the facts')
    }),
  )
}

{
  const started: string[] = []
  test(
    'a read-only call and an effectful one unknown together: only the effectful one needs reconciliation, and only it is acknowledged',
    engineTest([answer.text('noted')], { ms: 30_000, before: crashWhileToolsRun('mixed', started) }, async (h) => {
      const dispatched = only(await factsOf(h.log, 'invocation-crash'), 'tool.dispatched')
      assert.equal(
        dispatched.map((fact) => [fact.name, fact.readOnly]),
        [
          ['search', true],
          ['deploy', undefined],
        ],
      )
      const deployOperation = dispatched[1]?.operationId
      assert.equal(
        [...(await h.log.prefix(100, 1 << 20)).projectInvocation('invocation-crash').uncertainOperations].sort(),
        [...started].sort(),
        'both are uncertain',
      )
      const tools = [searchTool(), countingTool('deploy')]
      const input = (name: string) => h.input(name, { session: 'session-crash', tools })
      const refused = await refusedWithoutWriting(h.log, () => h.engine.start(input('next')), 'RUN_RECONCILIATION_REQUIRED', 'a new message')
      assert.equal(
        (refused.details?.unknown as { operationId: string; name: string }[]).map((op) => [op.name, op.operationId]),
        [['deploy', deployOperation]],
      )
      const acknowledged = input('next')
      acknowledged.work = { kind: 'message', content: 'go on', allowPriorUnknown: true }
      assert.equal(await h.run(acknowledged), { status: 'completed' })
      const opened = only(await factsOf(h.log, 'invocation-next'), 'invocation.opened')[0]
      assert.equal(
        opened?.input.kind === 'message' && opened.input.priorUnknown?.map((op) => op.name),
        ['deploy'],
      )
    }),
  )
}

test(
  'readOnly must be a boolean: RUN_INVALID_INPUT naming the field, and nothing is written',
  engineTest([answer.text('unused')], {}, async (h) => {
    const tool = { ...countingTool('search'), readOnly: 'yes' as unknown as boolean }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('bad', { tools: [tool] })), 'RUN_INVALID_INPUT', 'readOnly: "yes"')
    assert.equal(error.details, { fields: ['tools.0.readOnly'] })
  }),
)

test(
  'a read-only tool is recorded as such in each dispatch, and shown to the model as any other (the catalog digest is unchanged)',
  engineTest([answer.toolCalls([{ name: 'search', arguments: { query: 'q' } }]), answer.text('done')], {}, async (h) => {
    const search = searchTool()
    const plain = countingTool('search')
    assert.equal(await h.run(h.input('flagged', { tools: [search] })), { status: 'completed' })
    const [dispatched] = only(await factsOf(h.log, 'invocation-flagged'), 'tool.dispatched')
    assert.is(dispatched?.readOnly, true)
    assert.is(search.calls.length, 1)
    const { catalogOf } = await import('../index.js')
    assert.equal(catalogOf([search]), catalogOf([plain]))
    assert.is(JSON.stringify(h.server.requests[0]?.body).includes('readOnly'), false, 'not sent to the model')
  }),
)

test.run()
