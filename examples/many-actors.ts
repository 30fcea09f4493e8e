/**
 * Many actors in one engine: 100 sessions run concurrently, each an invocation that calls a tool
 * once and answers. Their facts are group-committed into one LevelDB log.
 *
 *   npx tsx examples/many-actors.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type ToolDefinition } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const SESSIONS = 100
const dir = await mkdtemp(join(tmpdir(), 'factstate-many-'))
// A stand-in model: the first request of each session asks for the tool, the second answers.
const server = await scriptedModelServer((request) => {
  const messages = (request.body as { messages: { role: string; content: string }[] }).messages
  const city = messages.find((m) => m.role === 'user')?.content ?? ''
  return messages.some((m) => m.role === 'tool')
    ? answer.text(`It is sunny in ${city}.`)
    : answer.toolCalls([{ name: 'weather', arguments: { city } }])
})
const log = await EventLog.open(join(dir, 'log'))
let executions = 0
const weather: ToolDefinition = {
  name: 'weather',
  description: 'Current weather for a city',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  async execute() {
    executions += 1
    return { sky: 'sunny' }
  },
}

try {
  const engine = new Engine({ log })
  const started = performance.now()
  const outcomes = await Promise.all(
    Array.from({ length: SESSIONS }, (_, i) =>
      engine.run({
        invocation: { sessionId: `session-${i}`, turnId: 'turn-1', runId: 'run-1', invocationId: `invocation-${i}` },
        provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'stand-in' },
        configuration: { cwd: process.cwd() },
        tools: [weather],
        work: { kind: 'message', content: `city-${i}` },
      }),
    ),
  )
  await engine.drain()
  const seconds = (performance.now() - started) / 1000
  const completed = outcomes.filter((outcome) => outcome.status === 'completed').length
  const { events, digest } = await log.verify()
  console.log(`${completed} of ${SESSIONS} sessions completed in ${seconds.toFixed(2)} s`)
  console.log(`${executions} tool executions, ${server.requests.length} model requests, ${events} durable facts`)
  console.log(`verify: ok, digest ${digest}`)
  process.exitCode = completed === SESSIONS && executions === SESSIONS && events === SESSIONS * 8 ? 0 : 1
} finally {
  await log.close()
  await server.close()
  await rm(dir, { recursive: true, force: true })
}
