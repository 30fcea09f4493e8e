/**
 * Child process for the replay of a run a crash cut short while its tool ran: opens the log in
 * `argv[2]`, serves the JSON script in the file `argv[4]` (`factstate script`'s output, say) and
 * starts the run `argv[3]` (`invocation-<name>`, in `session-<name>`) with one tool, `deploy`, that
 * never returns. Prints `executing <operationId>` once the tool has started (its dispatch is durable
 * by then); the parent kills it with SIGKILL and recovers the log, as the recorded run's host was.
 */
import { readFile } from 'node:fs/promises'
import { Engine, EventLog, ModelExecutor } from '../../index.js'
import { type ScriptedAnswer, scriptedModelServer } from '../../testing/scripted-model-server.js'
import { DEPLOY } from './replay-crash-tool.js'

const [dir, name, scriptFile] = process.argv.slice(2)
if (!dir || !name || !scriptFile) throw new Error('usage: child-replay-crash.ts <dir> <name> <script.json>')

// Holds the process until the parent's SIGKILL. Nothing else keeps the event loop alive once the
// tool (or approver) waits on a promise nothing settles: the scripted model server and its idle
// connections are unref'd. Without it the process ended on its own (exit 0, signal null) 66-90 ms
// after its `executing` line, a race with the kill the parent asserts (as faults-secrets-child had).
// Bounded: a child whose parent died without killing it ends by itself after ten minutes.
setTimeout(() => process.exit(1), 600_000)

const log = await EventLog.open(dir)
const server = await scriptedModelServer(JSON.parse(await readFile(scriptFile, 'utf8')) as ScriptedAnswer[])
await new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) }).start({
  invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
  provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted' },
  configuration: { cwd: '/workspace/project' },
  tools: [
    {
      ...DEPLOY,
      execute: (_input, { operationId }) => {
        process.stdout.write(`executing ${operationId}\n`)
        return new Promise<never>(() => undefined)
      },
    },
  ],
  work: { kind: 'message', content: 'deploy it' },
})
