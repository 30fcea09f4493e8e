/**
 * A log for the inspector suites, written by the acceptance scenario's flow (DESIGN §9) on a real
 * engine and a real scripted model server: run `first` calls `echo` and a `render` tool whose
 * output is an XSS payload, takes a hold that is released (rollback), calls a tool not in its
 * catalog, takes a hold that is committed (seal), and its successor completes.
 */
import { join } from 'node:path'
import { Engine, EventLog, type HandoffIntent, ModelExecutor, type RunInput, type ToolDefinition, successorOf } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

/** Rendered as text it is harmless; parsed as HTML it would run `alert(1)`. */
export const XSS_PAYLOAD = '<img src=x onerror=alert(1)>'

export const SCENARIO = {
  session: 'session',
  first: { runId: 'run-first', invocationId: 'invocation-first' },
  successor: { runId: 'run-committed', invocationId: 'invocation-committed' },
  released: 'released',
  committed: 'committed',
} as const

function intent(id: string): HandoffIntent {
  return {
    handoffId: id,
    hostEpoch: 'host',
    rootRunId: SCENARIO.first.runId,
    successorRunId: `run-${id}`,
    successorInvocationId: `invocation-${id}`,
    claimId: `claim-${id}`,
  }
}

function tools(): ToolDefinition[] {
  return [
    {
      name: 'echo',
      description: 'Echoes its input',
      inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
      async execute(input) {
        return input
      },
    },
    {
      name: 'render',
      description: 'Returns markup',
      inputSchema: { type: 'object', properties: {} },
      async execute() {
        return XSS_PAYLOAD
      },
    },
  ]
}

/** A run input for the scenario's session, against `baseUrl`. */
export function scenarioInput(baseUrl: string, name: string, session: string = SCENARIO.session): RunInput {
  return {
    invocation: { sessionId: session, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey: 'do-not-persist-this-secret' },
    configuration: { cwd: '/workspace/project', workspaceIdentity: 'inspector-fixture' },
    maxSteps: 3,
    mainOutputLimit: 120,
    tools: tools(),
    work: { kind: 'message', content: `question ${name}` },
  }
}

/**
 * Writes the scenario into a new log at `<directory>/log` and closes it; returns the log's path.
 */
export async function writeScenarioLog(directory: string): Promise<string> {
  const path = join(directory, 'log')
  const server = await scriptedModelServer([
    answer.toolCalls(
      [
        { name: 'echo', arguments: { value: 42 } },
        { name: 'render', arguments: {} },
      ],
      { hold: true },
    ),
    answer.toolCalls([{ name: 'unavailable', arguments: {} }], { hold: true }),
    answer.text(`done ${XSS_PAYLOAD}`),
  ])
  const log = await EventLog.open(path)
  try {
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
    const running = await engine.start(scenarioInput(server.baseUrl, 'first'))
    await server.seen(0)
    const gate = running.handoff()
    const rollback = gate.reserve(intent(SCENARIO.released))
    server.release(0)
    await (await rollback.ready()).release()
    await server.seen(1)
    const seal = gate.reserve(intent(SCENARIO.committed))
    server.release(1)
    const pause = await (await seal.ready()).commit()
    await running.wait()
    await engine.drain()
    const source = (await log.runSource(SCENARIO.session, SCENARIO.first.runId))?.boundary
    if (!source) throw new Error('the sealed run has no boundary')
    const successor = scenarioInput(server.baseUrl, SCENARIO.committed)
    successor.invocation = successorOf(pause.intent, source.invocation)
    successor.configuration = scenarioInput(server.baseUrl, 'first').configuration
    successor.work = { kind: 'handoff', source, pause }
    const outcome = await engine.run(successor)
    if (outcome.status !== 'completed') throw new Error(`the successor ended ${outcome.status}`)
    await engine.drain()
  } finally {
    await log.close()
    await server.close()
  }
  return path
}
