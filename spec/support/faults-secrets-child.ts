/**
 * A process killed with SIGKILL for the secrets suite: it runs one invocation with canary
 * secrets against the scripted server, whose tool never returns. It prints `tool running` once
 * the tool started (its dispatch is durable), then waits to be killed.
 *
 * Usage: `node --import tsx spec/support/faults-secrets-child.ts <log-dir> <baseUrl>`; the
 * canaries come in the environment (FAULTS_API_KEY, FAULTS_HEADERS as JSON), never in argv.
 */
import { Engine, EventLog, ModelExecutor } from '../../index.js'

const [dir, baseUrl] = process.argv.slice(2) as [string, string]
const apiKey = process.env.FAULTS_API_KEY as string
const headers = JSON.parse(process.env.FAULTS_HEADERS as string) as Record<string, string>

// Nothing else keeps the event loop alive once the tool is waiting (the client's keep-alive
// socket closes when the server drops it), so the process could end on its own before the
// parent's SIGKILL (CI at 1d97012, Node 24: the exit signal was null). This interval holds it.
// Bounded: a child whose parent died without killing it ends by itself after ten minutes.
setTimeout(() => process.exit(1), 600_000)

const log = await EventLog.open(dir)
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
await engine.start({
  invocation: { sessionId: 'session-killed', turnId: 'turn-killed', runId: 'run-killed', invocationId: 'invocation-killed' },
  provider: { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey, headers },
  configuration: { cwd: '/workspace/faults' },
  maxSteps: 4,
  tools: [
    {
      name: 'echo',
      async execute() {
        process.stdout.write('tool running\n')
        return new Promise(() => undefined)
      },
    },
  ],
  work: { kind: 'message', content: 'question killed' },
})
