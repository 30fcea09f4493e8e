/**
 * Tool calls side by side, and a run's progress as it is recorded. The model asks for three slow
 * lookups in one answer; with `toolConcurrency: 3` they run at once (each dispatch durable before
 * its lookup starts), and a follower of the log prints every fact of the run as it becomes durable.
 *
 *   npx tsx examples/parallel-tools-progress.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Engine, EventLog, type ToolDefinition } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const CITIES = ['Lisbon', 'Oslo', 'Kyoto']
const LOOKUP_MS = 300

const dir = await mkdtemp(join(tmpdir(), 'factstate-parallel-'))
// A stand-in model: the first request asks for all three lookups at once, the second sums them up.
const server = await scriptedModelServer((request) => {
  const messages = (request.body as { messages: { role: string; content: string }[] }).messages
  const results = messages.filter((m) => m.role === 'tool').map((m) => m.content)
  return results.length > 0
    ? answer.text(`Forecasts: ${results.join('; ')}`)
    : answer.toolCalls(CITIES.map((city) => ({ name: 'forecast', arguments: { city } })))
})
const log = await EventLog.open(join(dir, 'log'))
let running = 0
let mostAtOnce = 0
const forecast: ToolDefinition = {
  name: 'forecast',
  description: "Tomorrow's forecast for a city (a slow upstream API)",
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  // A read: no effect to reconcile. A slow upstream must not hold the run: past 10 s the signal aborts
  // (sleep rejects) and the call settles failed (a tool with effects that threw then would be left uncertain).
  readOnly: true,
  timeoutMs: 10_000,
  async execute(input, { signal }) {
    running += 1
    mostAtOnce = Math.max(mostAtOnce, running)
    await sleep(LOOKUP_MS, undefined, { signal })
    running -= 1
    return `${(input as { city: string }).city}: sunny`
  },
}

try {
  const engine = new Engine({ log })
  const invocationId = 'invocation-forecasts'
  // Taken before the run starts: none of its facts is missed.
  const progress = (async () => {
    for await (const { seq, event } of log.events({ from: log.head().highWater + 1, follow: true })) {
      if (event.invocation.invocationId !== invocationId) continue
      const { fact } = event
      const detail = fact.type === 'tool.dispatched' ? ` ${JSON.stringify(fact.input)}` : fact.type === 'tool.settled' ? ` ${JSON.stringify(fact.outcome)}` : ''
      console.log(`  #${seq} ${fact.type}${detail}`)
      if (fact.type === 'invocation.ended') return
    }
  })()
  const started = performance.now()
  const outcome = await engine.run({
    invocation: { sessionId: 'session-forecasts', turnId: 'turn-1', runId: 'run-1', invocationId },
    provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'stand-in' },
    configuration: { cwd: process.cwd() },
    tools: [forecast],
    toolConcurrency: 3,
    work: { kind: 'message', content: 'What is the weather tomorrow in Lisbon, Oslo and Kyoto?' },
  })
  await progress
  const seconds = (performance.now() - started) / 1000
  console.log(`${outcome.status}: ${CITIES.length} lookups of ${LOOKUP_MS} ms each, at most ${mostAtOnce} at once, in ${seconds.toFixed(2)} s`)
  process.exitCode = outcome.status === 'completed' && mostAtOnce === CITIES.length ? 0 : 1
} finally {
  await log.close()
  await server.close()
  await rm(dir, { recursive: true, force: true })
}
