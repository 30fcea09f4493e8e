/**
 * Human approval with a hold. The agent prepares a refund (a tool with no side effect) and issues it
 * (the risky one). What gates the refund is the application's own record of what reviewers approved:
 * `issue_refund` refuses any order not approved, whatever the model asks and in whatever order. The
 * hold makes the run wait for the reviewer rather than go on without: `prepare_refund`, seeing an
 * order not yet approved, reserves a hold on its own run, taken at the run's next safe point (once
 * every call of the answer has settled). In session A the reviewer approves on the spot (release:
 * the run goes on). In session B the reviewer is away: the hold is committed (sealed), the turn waits
 * in the log, and later (here in the same process; `examples/cross-process-handoff.ts` shows another
 * process) the approval starts a successor with exactly the sealed settings, told the reviewer's
 * decision (its model would otherwise see only "sent to a reviewer"); nothing that already ran runs again. In session C the model asks for the refund before preparing it, in one answer:
 * refused, since no one approved it yet, and issued once after the review. An approval is for the
 * session whose turn asked for it: in session G, another conversation's model names session A's
 * order while A's approval stands, and takes nothing. In session D a deploy changes the instructions
 * while the turn waits: the approval is checked against the log first (`engine.check`), refused
 * `HANDOFF_MISMATCH` and not recorded, so nothing can take it; run with the sealed instructions (the
 * earlier build's, kept), the successor is admitted and issues the refund once.
 *
 *   npx tsx examples/human-approval.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  Engine,
  EventLog,
  type HandoffReservation,
  type RunInput,
  type RunningInvocation,
  type ToolDefinition,
  intentFor,
  isFactstateError,
  successorOf,
} from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const dir = await mkdtemp(join(tmpdir(), 'factstate-approval-'))
const log = await EventLog.open(join(dir, 'log'))
/** The engine whose runs the tool holds (`engine.running` gives a run's handle by its invocation id). */
const engine = new Engine({ log })
const ran: string[] = []
/** The calls of issue_refund the gate refused, as `session: order`. */
const refused: string[] = []

/**
 * What reviewers approved and is not issued yet (a table of your application's in practice): the
 * refund's only gate. Keyed by session and order: an approval is for the conversation whose turn
 * asked for it, and another session's model naming the same order takes nothing.
 */
const approvals = {
  approved: new Map<string, string>(),
  key: (session: string, order: string) => JSON.stringify([session, order]),
  /** Who approved `order` in `session`, while it is approved and not yet issued. */
  approver(session: string, order: string): string | undefined {
    return this.approved.get(this.key(session, order))
  },
  /** Records an approval; false when one stands already (a second click: it starts nothing more). */
  approve(session: string, order: string, by: string): boolean {
    if (this.approved.has(this.key(session, order))) return false
    this.approved.set(this.key(session, order), by)
    return true
  },
  /** Takes the approval as it checks it (`UPDATE … WHERE NOT used` in a table): one approval, one refund. */
  take(session: string, order: string): boolean {
    return this.approved.delete(this.key(session, order))
  },
  /** Puts an approval no run will consume back: approved → not approved, unless it was taken. */
  undo(session: string, order: string): void {
    this.approved.delete(this.key(session, order))
  },
}
/** Reviews asked for, each with the hold reserved on its run, in the order they came. */
interface Review {
  order: string
  amount: number
  reservation: HandoffReservation
}
const reviews: Review[] = []
let reviewCame: (() => void) | undefined
const nextReview = async (): Promise<Review> => {
  while (reviews.length === 0) await new Promise<void>((resolve) => (reviewCame = resolve))
  return reviews.shift() as Review
}

const tools: ToolDefinition[] = [
  {
    name: 'prepare_refund',
    description: 'Computes the refund for an order (no side effect) and sends it for review',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
    async execute(input, context) {
      const { order } = input as { order: string }
      ran.push(`prepare ${order}`)
      const amount = 42.5
      const approver = approvals.approver(context.invocation.sessionId, order)
      if (approver !== undefined) return { amount, review: `approved by ${approver}` }
      // A person reviews it: hold the run at its next safe point (a tool must not wait for the hold:
      // it is taken once this call has settled), so the model is not asked to go on meanwhile.
      const run = engine.running(context.invocation.invocationId)
      if (run !== undefined) {
        try {
          // The successor's ids and the claim from the invocation id (unique in the log, as a claim must be).
          reviews.push({ order, amount, reservation: run.handoff().reserve(intentFor(context.invocation, 'review')) })
          reviewCame?.()
        } catch (error) {
          // One hold covers every call of the answer (a second prepare in it): HANDOFF_BUSY.
          if (!isFactstateError(error, 'HANDOFF_BUSY')) throw error
        }
      }
      return { amount, review: 'sent to a reviewer: the refund can be issued once approved' }
    },
  },
  {
    name: 'issue_refund',
    description: 'Sends the money back (the risky side effect); only for an approved refund',
    inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
    async execute(input, context) {
      const { order } = input as { order: string }
      // The gate: nothing not approved is issued, whether the hold was taken yet, refused, or never asked
      // for. Taken as it is checked: one approval is one refund, however often (or side by side) it is asked for.
      // By session and order: another conversation's model that names this order is refused here.
      if (!approvals.take(context.invocation.sessionId, order)) {
        refused.push(`${context.invocation.sessionId}: ${order}`)
        throw new Error(`the refund of ${order} needs a reviewer's approval in this conversation (each approves one refund): prepare it to send it for review`)
      }
      ran.push(`issue ${order} (${context.operationId})`)
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

/** The instructions of this build (a seal records them: a successor must run with the same). */
const INSTRUCTIONS = 'You refund orders: prepare each refund, and issue it once a reviewer approved it.'

const input = (baseUrl: string, session: string, order: string, instructions = INSTRUCTIONS): RunInput => ({
  invocation: { sessionId: session, turnId: 'turn-1', runId: 'run-1', invocationId: `${session}-inv-1` },
  provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
  configuration: { cwd: process.cwd() },
  instructions,
  tools,
  work: { kind: 'message', content: `Refund order ${order}` },
})

let ok = true
const check = (condition: boolean, what: string) => {
  console.log(`${condition ? '✔' : '✘'} ${what}`)
  ok &&= condition
}

const start = (engine: Engine, run: RunInput): Promise<RunningInvocation> => engine.start(run)

/** What the reviewer decided, as the successor's model is told it. */
const decision = (order: string, ticket: number) => `carol@acme approved the refund of ${order} (ticket ${ticket})`

/**
 * The approval of a sealed turn (by whichever process has the log open): the successor checked, the
 * approval recorded, then the successor started, told the decision: its model gets the sealed
 * transcript, which ends "sent to a reviewer", then this. `instructions`: those this build runs with.
 */
async function approveSealed(engine: Engine, baseUrl: string, session: string, order: string, ticket: number, instructions = INSTRUCTIONS): Promise<RunningInvocation> {
  const sealed = await log.runSource(session, 'run-1')
  if (sealed?.pause === undefined) throw new Error('the run was not sealed')
  const successor = input(baseUrl, session, order, instructions)
  successor.invocation = successorOf(sealed.pause.intent, sealed.boundary.invocation)
  successor.work = { kind: 'handoff', source: sealed.boundary, pause: sealed.pause, content: decision(order, ticket) }
  // Asked before anything is recorded: a successor the log would refuse now (HANDOFF_MISMATCH once a
  // deploy changed a sealed setting, HANDOFF_CLAIMED once the turn was given up) throws here, and no
  // approval is left that no run of the turn would consume.
  await engine.check(successor)
  if (!approvals.approve(session, order, 'carol@acme')) throw new Error(`the refund of ${order} is approved already`)
  try {
    return await start(engine, successor)
  } catch (error) {
    // Refused all the same: the log changed between the check and the start (a race). Put it back.
    approvals.undo(session, order)
    throw error
  }
}

/** The last message of the model request `body`: what the model was told last. */
const lastMessage = (body: unknown) => (body as { messages: { role: string; content: string | null }[] }).messages.at(-1)

try {

  // Session A: approved on the spot.
  const a = await model('A-1')
  const runA = await start(engine, input(a.baseUrl, 'a', 'A-1'))
  const heldA = await (await nextReview()).reservation.ready()
  check(ran.join() === 'prepare A-1', 'A: held at the safe point after prepare_refund, before the refund is issued')
  approvals.approve('a', 'A-1', 'ana')

  // Session G, another conversation, while A's approval stands: its model asks to issue A's order.
  const g = await scriptedModelServer([answer.toolCalls([{ name: 'issue_refund', arguments: { order: 'A-1' } }]), answer.text('I cannot refund that order.')])
  check((await start(engine, input(g.baseUrl, 'g', 'A-1')).then((run) => run.wait())).status === 'completed', 'G: the run completed')
  check(
    refused.join() === 'g: A-1' && !ran.some((line) => line.startsWith('issue')) && approvals.approver('a', 'A-1') === 'ana',
    "G: another session's call for A's order was refused: nothing issued, A's approval not taken",
  )
  await g.close()

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
  // ...later, the reviewer approves: a successor with exactly the sealed settings, from the log.
  check((await (await approveSealed(engine, b.baseUrl, 'b', 'B-7', 77)).wait()).status === 'completed', 'B: approved, the successor resumed the turn and completed')
  const told = lastMessage(b.requests[1]?.body)
  check(told?.role === 'user' && told.content === decision('B-7', 77), `B: the successor's model was told, after the sealed transcript: ${told?.content}`)
  check(reviews.length === 0, 'B: the successor prepared nothing again, so asked for no second review')
  await b.close()

  // Session C: the model asks for the refund before preparing it, in one answer (every call of an
  // answer runs before the next safe point, where the hold is taken): refused, not approved yet.
  const c = await scriptedModelServer([
    answer.toolCalls([
      { name: 'issue_refund', arguments: { order: 'C-3' } },
      { name: 'prepare_refund', arguments: { order: 'C-3' } },
    ]),
    // Approved, the model asks for the refund twice: one approval is one refund.
    answer.toolCalls([
      { name: 'issue_refund', arguments: { order: 'C-3' } },
      { name: 'issue_refund', arguments: { order: 'C-3' } },
    ]),
    answer.text('Refunded order C-3.'),
  ])
  const runC = await start(engine, input(c.baseUrl, 'c', 'C-3'))
  await (await (await nextReview()).reservation.ready()).commit()
  check((await runC.wait()).status === 'handoff_paused' && !ran.some((line) => line.startsWith('issue C-3')), 'C: asked before its preparation, the refund was refused and nothing issued before the review')
  check((await (await approveSealed(engine, c.baseUrl, 'c', 'C-3', 78)).wait()).status === 'completed', 'C: approved, the successor issued it')
  await c.close()

  // Session D: sealed for a reviewer; then a deploy changes the instructions while the turn waits.
  const d = await model('D-4')
  const runD = await start(engine, input(d.baseUrl, 'd', 'D-4'))
  await (await (await nextReview()).reservation.ready()).commit()
  check((await runD.wait()).status === 'handoff_paused', 'D: sealed for the reviewer')
  const deployed = `${INSTRUCTIONS} Be brief.`
  const mismatch = await approveSealed(engine, d.baseUrl, 'd', 'D-4', 79, deployed).then(
    () => undefined,
    (error: unknown) => error,
  )
  check(
    isFactstateError(mismatch, 'HANDOFF_MISMATCH') && mismatch.details.fields?.join() === 'instructions',
    `D: approved after the deploy, the successor is refused by the check: ${isFactstateError(mismatch, 'HANDOFF_MISMATCH') ? `HANDOFF_MISMATCH (${mismatch.details.fields?.join()})` : String(mismatch)}`,
  )
  check(
    approvals.approver('d', 'D-4') === undefined && !ran.some((line) => line.startsWith('issue D-4')) && d.requests.length === 1,
    'D: no approval recorded, nothing issued, no model request',
  )
  const stillPaused = (await log.pendingSessions({ sessionId: 'd' }))[0]?.paused.length === 1
  check(stillPaused, 'D: the turn still waits (pendingSessions lists it)')
  // The way through: run the successor with the instructions its seal names (the earlier build's, kept).
  check((await (await approveSealed(engine, d.baseUrl, 'd', 'D-4', 79, INSTRUCTIONS)).wait()).status === 'completed', 'D: with the sealed instructions, the successor issued it')
  await d.close()

  check(
    ran.join() ===
      'prepare A-1,issue A-1 (a-inv-1/step-2/0),prepare B-7,issue B-7 (b-inv-1.review/step-1/0),prepare C-3,issue C-3 (c-inv-1.review/step-1/0),prepare D-4,issue D-4 (d-inv-1.review/step-1/0)',
    'every tool ran exactly once, each refund after its approval',
  )
  check(refused.join() === 'g: A-1,c: C-3,c: C-3', 'the gate refused only what was not approved for its session: G, and C before its review and its second call')
  check(pause.execution.tools.names.join() === 'prepare_refund,issue_refund', 'the seal names the catalog its successor must run with')
  console.log(`verify: ${(await log.verify()).events} facts ok`)
} finally {
  await log.close()
  await rm(dir, { recursive: true, force: true })
}
process.exitCode = ok ? 0 : 1
