/**
 * Human approval with a hold. The agent prepares a refund (a tool with no side effect); the tool,
 * seeing the amount, reserves a hold on its own run, which parks the run at the next safe point
 * (once the call has settled, before the model is asked for its next step, where it would issue the
 * refund). A reviewer looks at the prepared refund. In session A the reviewer approves on the spot
 * (release: the run goes on). In session B the reviewer is away: the hold is committed (sealed), the
 * turn waits in the log, and later (here in the same process; `examples/cross-process-handoff.ts`
 * shows another process) a successor resumes it with exactly the sealed settings; nothing that
 * already ran runs again. In session C the model asks for the refund in the same answer as its
 * preparation: every call of an answer runs before the next safe point, so issue_refund refuses
 * while its run waits for the review, and the model asks again once it is approved.
 *
 *   npx tsx examples/human-approval.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  Engine,
  EventLog,
  type HandoffIntent,
  type HandoffReservation,
  type Invocation,
  type RunInput,
  type RunningInvocation,
  type ToolDefinition,
  successorOf,
} from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const dir = await mkdtemp(join(tmpdir(), 'factstate-approval-'))
const log = await EventLog.open(join(dir, 'log'))
const ran: string[] = []

/** The runs this process drives, by invocation id: what a tool reserves a hold on. */
const running = new Map<string, RunningInvocation>()
/** Refunds waiting for a reviewer, each with the hold reserved on its run, in the order they came. */
interface Review {
  order: string
  amount: number
  reservation: HandoffReservation
}
const reviews: Review[] = []
/** The runs with a review reserved and not yet taken: a refund they ask for meanwhile is refused. */
const awaitingReview = new Set<string>()
let reviewCame: (() => void) | undefined
const nextReview = async (): Promise<Review> => {
  while (reviews.length === 0) await new Promise<void>((resolve) => (reviewCame = resolve))
  return reviews.shift() as Review
}

/**
 * The successor a review hands the turn to, should the hold be sealed. From the invocation id, unique
 * in the whole log as the claim must be (a run id is unique only in its session: two sessions' claims
 * made from it would collide, and the second hold be refused, HANDOFF_CLAIMED).
 */
const intentFor = (run: Invocation): HandoffIntent => ({
  handoffId: `review-${run.invocationId}`,
  hostEpoch: 'example',
  rootRunId: run.runId,
  successorRunId: `${run.runId}-approved`,
  successorInvocationId: `${run.invocationId}-approved`,
  claimId: `claim-${run.invocationId}`,
})

const tools: ToolDefinition[] = [
  {
    name: 'prepare_refund',
    description: 'Computes the refund for an order (no side effect)',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
    async execute(input, context) {
      const { order } = input as { order: string }
      ran.push(`prepare ${order}`)
      const amount = 42.5
      // Over the limit: a person reviews it before the refund can be issued. The hold is taken at the
      // run's next safe point, once this call has settled (a tool must not wait for it).
      const run = running.get(context.invocation.invocationId)
      if (amount > 20 && run) {
        const { invocationId } = context.invocation
        const reservation = run.handoff().reserve(intentFor(context.invocation))
        // Until the hold is taken, the other calls of this answer may still run: issue_refund refuses
        // (and goes on refusing if the hold is refused: a refund no one reviewed is not issued).
        awaitingReview.add(invocationId)
        void reservation.ready().then(
          () => awaitingReview.delete(invocationId),
          () => undefined,
        )
        reviews.push({ order, amount, reservation })
        reviewCame?.()
      }
      return { amount }
    },
  },
  {
    name: 'issue_refund',
    description: 'Sends the money back (the risky side effect)',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
    async execute(input, context) {
      // Asked for in the same answer as the preparation: the review comes once this answer's calls
      // have settled, so the refund must wait for it (the model is told, and asks again after it).
      if (awaitingReview.has(context.invocation.invocationId)) throw new Error('the refund waits for a review: ask again once it is approved')
      ran.push(`issue ${(input as { order: string }).order} (${context.operationId})`)
      return { issued: true }
    },
  },
]

/** One scripted model per session: prepare, then issue, then report. */
async function model(order: string) {
  return scriptedModelServer([
    answer.toolCalls([{ name: 'prepare_refund', arguments: { order } }]),
    answer.toolCalls([{ name: 'issue_refund', arguments: { order } }]),
    answer.text(`Refunded order ${order}.`),
  ])
}

const input = (baseUrl: string, session: string, order: string): RunInput => ({
  invocation: { sessionId: session, turnId: 'turn-1', runId: 'run-1', invocationId: `${session}-inv-1` },
  provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
  configuration: { cwd: process.cwd() },
  tools,
  work: { kind: 'message', content: `Refund order ${order}` },
})

let ok = true
const check = (condition: boolean, what: string) => {
  console.log(`${condition ? '✔' : '✘'} ${what}`)
  ok &&= condition
}

const start = async (engine: Engine, run: RunInput) => {
  const started = await engine.start(run)
  running.set(run.invocation.invocationId, started)
  return started
}

try {
  const engine = new Engine({ log })

  // Session A: approved on the spot.
  const a = await model('A-1')
  const runA = await start(engine, input(a.baseUrl, 'a', 'A-1'))
  const heldA = await (await nextReview()).reservation.ready()
  check(ran.join() === 'prepare A-1', 'A: held at the safe point after prepare_refund, before the refund is issued')
  await heldA.release()
  check((await runA.wait()).status === 'completed', 'A: approved (released), the run issued the refund and completed')
  await a.close()

  // Session B: sealed for a reviewer, resumed later by a successor.
  const b = await model('B-7')
  const runB = await start(engine, input(b.baseUrl, 'b', 'B-7'))
  const review = await nextReview()
  const pause = await (await review.reservation.ready()).commit()
  check((await runB.wait()).status === 'handoff_paused', `B: sealed for the reviewer, who sees a refund of ${review.amount} for ${review.order} (handoff_paused)`)
  check(b.requests.length === 1, 'B: no model request after the seal')

  // ...later, after the reviewer approved: a successor with exactly the sealed settings, from the log.
  const sealed = await log.runSource('b', 'run-1')
  if (sealed?.pause === undefined) throw new Error('the run was not sealed')
  const successor = input(b.baseUrl, 'b', 'B-7')
  successor.invocation = successorOf(sealed.pause.intent, sealed.boundary.invocation)
  successor.work = { kind: 'handoff', source: sealed.boundary, pause: sealed.pause }
  check((await (await start(engine, successor)).wait()).status === 'completed', 'B: the successor resumed the turn and completed')
  check(reviews.length === 0, 'B: the successor prepared nothing again, so asked for no second review')
  await b.close()
  const ranBeforeC = [...ran]

  // Session C: the model asks for both calls in one answer. Every call of an answer runs before the
  // next safe point, so the hold comes only after issue_refund's turn: it must refuse meanwhile.
  ran.length = 0
  const c = await scriptedModelServer([
    answer.toolCalls([
      { name: 'prepare_refund', arguments: { order: 'C-3' } },
      { name: 'issue_refund', arguments: { order: 'C-3' } },
    ]),
    answer.toolCalls([{ name: 'issue_refund', arguments: { order: 'C-3' } }]),
    answer.text('Refunded order C-3.'),
  ])
  const runC = await start(engine, input(c.baseUrl, 'c', 'C-3'))
  const heldC = await (await nextReview()).reservation.ready()
  check(ran.join() === 'prepare C-3', 'C: both calls in one answer, and still nothing issued before the review')
  await heldC.release()
  check((await runC.wait()).status === 'completed' && ran.join() === 'prepare C-3,issue C-3 (c-inv-1/step-2/0)', 'C: approved, the refund issued once, in the step after the review')
  await c.close()
  ran.splice(0, ran.length, ...ranBeforeC)

  check(
    ran.join() === 'prepare A-1,issue A-1 (a-inv-1/step-2/0),prepare B-7,issue B-7 (b-inv-1-approved/step-1/0)',
    'every tool ran exactly once, the refund of B by the successor',
  )
  check(pause.execution.tools.names.join() === 'prepare_refund,issue_refund', 'the seal names the catalog its successor must run with')
  console.log(`verify: ${(await log.verify()).events} facts ok`)
} finally {
  await log.close()
  await rm(dir, { recursive: true, force: true })
}
process.exitCode = ok ? 0 : 1

