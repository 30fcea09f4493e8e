/**
 * Child process for the reconciliation tests: opens the log in `argv[2]`, starts a scripted model
 * server that asks for one call to `deploy` (with `argv[3]` = `side-by-side`: three calls, run with
 * `toolConcurrency: 3`), and runs an engine whose `deploy` never returns. Prints `executing
 * <operationId>` once each call's tool has started (its dispatch is durable by then); the parent
 * kills it with SIGKILL.
 */
import { Engine, EventLog, ModelExecutor, type ToolDefinition } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

const dir = process.argv[2]
if (!dir) throw new Error('usage: child-engine-tool.ts <dir> [side-by-side]')
const sideBySide = process.argv[3] === 'side-by-side'
const targets = sideBySide ? ['production', 'staging', 'preview'] : ['production']

const log = await EventLog.open(dir)
const calls = targets.map((target, index) => ({ id: index === 0 ? 'call-deploy' : `call-deploy-${target}`, name: 'deploy', arguments: { target } }))
const server = await scriptedModelServer([answer.toolCalls(calls)])
const deploy: ToolDefinition = {
  name: 'deploy',
  description: 'deploys the project',
  inputSchema: { type: 'object', properties: { target: { type: 'string' } } },
  execute(_input, { operationId }) {
    process.stdout.write(`executing ${operationId}\n`)
    return new Promise(() => undefined)
  },
}
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
await engine.start({
  invocation: { sessionId: 'session-crash', turnId: 'turn-crash', runId: 'run-crash', invocationId: 'invocation-crash' },
  provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted' },
  configuration: { cwd: '/workspace/project' },
  tools: [deploy],
  ...(sideBySide ? { toolConcurrency: 3 } : {}),
  work: { kind: 'message', content: 'deploy it' },
})
process.stdout.write('started\n')
