/**
 * Continuation: a run fails when the provider goes down after its first tool step. A new Turn
 * continues from that run's boundary: its transcript is the earlier run's lineage (the user's
 * question, the tool call and its recorded result), the tool is not run again, and a seal of the
 * new Turn would carry `replayBase`.
 *
 *   npx tsx examples/continuation.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, ModelExecutor, type RunInput, type ToolDefinition } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const dir = await mkdtemp(join(tmpdir(), 'factstate-continuation-'))
const log = await EventLog.open(join(dir, 'log'))
let charged = 0
const charge: ToolDefinition = {
  name: 'charge_card',
  description: 'Charges the customer (must never run twice)',
  inputSchema: { type: 'object', properties: { cents: { type: 'number' } } },
  async execute() {
    charged += 1
    return { receipt: 'R-100' }
  },
}
// The provider answers with a tool call, then fails every request (an outage).
const outage = await scriptedModelServer([
  answer.toolCalls([{ name: 'charge_card', arguments: { cents: 1999 } }]),
  answer.status(503),
  answer.status(503),
])
const recovered = await scriptedModelServer([answer.text('Charged 19.99, receipt R-100.')])
const input = (baseUrl: string, n: number, work: RunInput['work']): RunInput => ({
  invocation: { sessionId: 'checkout', turnId: `turn-${n}`, runId: `run-${n}`, invocationId: `invocation-${n}` },
  provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
  configuration: { cwd: process.cwd() },
  tools: [charge],
  work,
})

try {
  const engine = new Engine({ log, model: new ModelExecutor({ retries: 1, backoffMs: 10 }) })
  const first = await engine.run(input(outage.baseUrl, 1, { kind: 'message', content: 'Charge 19.99 for order 7' }))
  console.log(`run-1 ended ${first.status}${first.status === 'failed' ? ` (${first.class})` : ''} after charging ${charged} time(s)`)

  const source = (await log.runSource('checkout', 'run-1'))!.boundary
  const second = await engine.run(input(recovered.baseUrl, 2, { kind: 'continuation', source }))
  const messages = (recovered.requests[0]?.body as { messages: { role: string; content: unknown }[] }).messages
  console.log(`run-2 continued from run-1@${source.highWater}: ${second.status}; its first request replayed ${messages.length} messages`)
  console.log(`charge_card ran ${charged} time(s) in total`)
  process.exitCode = first.status === 'failed' && second.status === 'completed' && charged === 1 && messages.some((m) => m.role === 'tool') ? 0 : 1
} finally {
  await log.close()
  await outage.close()
  await recovered.close()
  await rm(dir, { recursive: true, force: true })
}
