/**
 * Human approval with a hold. The agent prepares a refund (a safe tool), and before its next
 * step — where it would issue the refund — a reviewer's hold parks the run at a safe point.
 * In session A the reviewer approves on the spot (release: the run goes on). In session B the
 * reviewer is away: the hold is committed (sealed), and later a successor resumes the turn with
 * exactly the sealed settings; nothing that already ran runs again.
 *
 *   npx tsx examples/human-approval.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type RunInput, type ToolDefinition, successorOf } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const dir = await mkdtemp(join(tmpdir(), 'factstate-approval-'))
const log = await EventLog.open(join(dir, 'log'))
const ran: string[] = []
const tools: ToolDefinition[] = [
  {
    name: 'prepare_refund',
    description: 'Computes the refund for an order (no side effect)',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } } },
    async execute(input) {
      ran.push(`prepare ${(input as { order: string }).order}`)
      return { amount: 42.5 }
    },
  },
  {
    name: 'issue_refund',
    description: 'Sends the money back (the risky side effect)',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } } },
    async execute(input) {
      ran.push(`issue ${(input as { order: string }).order}`)
      return { issued: true }
    },
  },
]

/** One scripted model per session: prepare, then issue, then report. The first answer is held so the hold can be reserved mid-request. */
async function model(order: string) {
  return scriptedModelServer([
    answer.toolCalls([{ name: 'prepare_refund', arguments: { order } }], { hold: true }),
    answer.toolCalls([{ name: 'issue_refund', arguments: { order } }]),
    answer.text(`Refunded order ${order}.`),
  ])
}

const input = (baseUrl: string, session: string, order: string): RunInput => ({
  invocation: { sessionId: session, turnId: 'turn-1', runId: `${session}-run-1`, invocationId: `${session}-inv-1` },
  provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
  configuration: { cwd: process.cwd() },
  tools,
  work: { kind: 'message', content: `Refund order ${order}` },
})

const intent = (session: string) => ({
  handoffId: `review-${session}`,
  hostEpoch: 'example',
  rootRunId: `${session}-run-1`,
  successorRunId: `${session}-run-2`,
  successorInvocationId: `${session}-inv-2`,
  claimId: `claim-${session}`,
})

let ok = true
const check = (condition: boolean, what: string) => {
  console.log(`${condition ? '✔' : '✘'} ${what}`)
  ok &&= condition
}

try {
  const engine = new Engine({ log })

  // Session A: approved on the spot.
  const a = await model('A-1')
  const runA = await engine.start(input(a.baseUrl, 'a', 'A-1'))
  await a.seen(0)
  const reviewA = runA.handoff().reserve(intent('a'))
  a.release(0)
  const heldA = await reviewA.ready()
  check(ran.join() === 'prepare A-1', 'A: held at the safe point after prepare_refund, before the refund is issued')
  await heldA.release()
  check((await runA.wait()).status === 'completed', 'A: approved (released), the run issued the refund and completed')
  await a.close()

  // Session B: sealed for a reviewer, resumed later by a successor.
  const b = await model('B-7')
  const runB = await engine.start(input(b.baseUrl, 'b', 'B-7'))
  await b.seen(0)
  const reviewB = runB.handoff().reserve(intent('b'))
  b.release(0)
  const pause = await (await reviewB.ready()).commit()
  check((await runB.wait()).status === 'handoff_paused', 'B: sealed for the reviewer (handoff_paused)')
  check(b.requests.length === 1, 'B: no model request after the seal')

  // ...later, after the reviewer approved: a successor with exactly the sealed settings.
  const source = (await log.runSource('b', 'b-run-1'))!.boundary
  const successor = input(b.baseUrl, 'b', 'B-7')
  successor.invocation = successorOf(pause.intent, source.invocation)
  successor.work = { kind: 'handoff', source, pause }
  check((await engine.run(successor)).status === 'completed', 'B: the successor resumed the turn and completed')
  await b.close()

  check(ran.join() === 'prepare A-1,issue A-1,prepare B-7,issue B-7', 'every tool ran exactly once')
  console.log(`verify: ${(await log.verify()).events} facts ok`)
} finally {
  await log.close()
  await rm(dir, { recursive: true, force: true })
}
process.exitCode = ok ? 0 : 1
