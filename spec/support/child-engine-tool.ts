/**
 * Child process for the reconciliation tests: opens the log in `argv[2]`, starts a scripted model
 * server that asks for one call to `deploy` (with `argv[3]` = `side-by-side`: three calls, run with
 * `toolConcurrency: 3`; `read-only`: one call to `search`, a read-only tool; `mixed`: a `search`
 * and a `deploy` side by side; `approval`: `deploy` needs approval, and the approver never answers),
 * and runs an engine whose tools never return. Prints `executing <operationId>` once each call's
 * tool has started (its dispatch is durable by then), or `asking <operationId>` once the approver
 * is asked, or `backing off <operationId>` once the first attempt of `retry` has thrown; the parent
 * kills it with SIGKILL.
 */
import { Engine, EventLog, ModelExecutor, type StartOptions, type ToolDefinition } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

const dir = process.argv[2]
const mode = process.argv[3] ?? 'one'
if (!dir || !['one', 'side-by-side', 'read-only', 'mixed', 'approval', 'retry'].includes(mode)) {
  throw new Error('usage: child-engine-tool.ts <dir> [side-by-side | read-only | mixed | approval | retry]')
}
const targets = mode === 'side-by-side' ? ['production', 'staging', 'preview'] : mode === 'read-only' ? [] : ['production']
const deployCalls = targets.map((target, index) => ({ id: index === 0 ? 'call-deploy' : `call-deploy-${target}`, name: 'deploy', arguments: { target } }))
const calls = [...(mode === 'read-only' || mode === 'mixed' ? [{ id: 'call-search', name: 'search', arguments: { query: 'open incidents' } }] : []), ...deployCalls]

// Holds the process until the parent's SIGKILL. Nothing else keeps the event loop alive once the
// tool (or approver) waits on a promise nothing settles: the scripted model server and its idle
// connections are unref'd. Without it the process ended on its own (exit 0, signal null) 20-90 ms
// after its `executing/asking` line, a race with the kill the parent asserts (as faults-secrets-child had).
// Bounded: a child whose parent died without killing it ends by itself after ten minutes.
setTimeout(() => process.exit(1), 600_000)

const log = await EventLog.open(dir)
const server = await scriptedModelServer([answer.toolCalls(calls)])
const never = (_input: unknown, { operationId }: { operationId: string }) => {
  process.stdout.write(`executing ${operationId}\n`)
  return new Promise<never>(() => undefined)
}
const deploy: ToolDefinition = {
  name: 'deploy',
  description: 'deploys the project',
  inputSchema: { type: 'object', properties: { target: { type: 'string' } } },
  ...(mode === 'approval' ? { needsApproval: true } : {}),
  ...(mode === 'retry' ? { retry: { retries: 3, backoffMs: 60_000, maxBackoffMs: 60_000 } } : {}),
  execute:
    mode === 'retry'
      ? (_input, { operationId, attempt }) => {
          if (attempt > 1) return never(_input, { operationId })
          // Printed a while after the failure (a settlement would have been written by then, were the
          // call not retried): the line reaches the parent while the minute's backoff runs.
          setTimeout(() => process.stdout.write(`backing off ${operationId}\n`), 200)
          throw new Error('connection reset')
        }
      : never,
}
const search: ToolDefinition = {
  name: 'search',
  description: 'searches the incident tracker',
  inputSchema: { type: 'object', properties: { query: { type: 'string' } } },
  readOnly: true,
  execute: never,
}
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
const options: StartOptions =
  mode === 'approval'
    ? {
        onApproval({ operationId }) {
          process.stdout.write(`asking ${operationId}\n`)
          return new Promise(() => undefined)
        },
      }
    : {}
await engine.start(
  {
    invocation: { sessionId: 'session-crash', turnId: 'turn-crash', runId: 'run-crash', invocationId: 'invocation-crash' },
    provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted' },
    configuration: { cwd: '/workspace/project' },
    tools: mode === 'read-only' || mode === 'mixed' ? [deploy, search] : [deploy],
    ...(calls.length > 1 ? { toolConcurrency: calls.length } : {}),
    work: { kind: 'message', content: 'deploy it' },
  },
  options,
)
process.stdout.write('started\n')
