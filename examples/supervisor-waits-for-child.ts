/**
 * A child run that waits days for a person, and its supervisor waiting with it. A supervisor (the
 * editor) delegates a release note to a writer agent, a child run of its `delegate` call. The writer
 * sends its draft to a reviewer and seals its run (a hold on its own run, as in
 * `examples/human-approval.ts`); its `delegate` call sees the child end `handoff_paused` and seals the
 * supervisor too, at the supervisor's next safe point, instead of letting its model go on with a
 * "child paused" result. Process 1 exits with both turns sealed. Days later, the reviewer approves in
 * process 2: the writer's successor publishes the note and answers, then (killed here with SIGKILL
 * before it gets further) the supervisor's successor would be told the writer's answer. Process 3 runs
 * the same resume again: the writer is done, so only the supervisor's successor runs, told what its
 * `delegate` call came to. The note is published once, and nothing is left pending.
 *
 * Then twice more, each in a log of its own, a shutdown (SIGTERM) cuts both runs short before the
 * writer's seal: once after the writer recorded its review request (its hold is refused, so it
 * withdraws the request: no turn waits for it), once before (its tool sends nothing). The next
 * process, at start-up, continues the writer told what was withdrawn; it submits again and is sealed,
 * and the review carries the writer, then the editor, told the writer's answer, on.
 *
 * The approval is for the session whose turn asked (the writer's): the review checks the writer's
 * successor against the log (`engine.check`), then records the approval, then starts it (and puts the
 * approval back if the start is refused all the same). Last, in a log of its own: a review under a
 * build that changed the writer's instructions is refused by the check, nothing recorded; under the
 * sealed settings, the review is killed once the approval is recorded, before the successor starts;
 * another desk's writer (a second child, in a session of its own) then asks to publish the same
 * title and is refused, the approval not taken; the same resume, run again, publishes it once, for
 * the writer that asked.
 *
 *   npx tsx examples/supervisor-waits-for-child.ts
 */
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { appendFileSync, existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import {
  Engine,
  EventLog,
  type ChildRunSummary,
  type HandoffReservation,
  type Invocation,
  type RunInput,
  type RunSettings,
  type RunningInvocation,
  type ToolDefinition,
  answerOf,
  childRunFor,
  intentFor,
  isFactstateError,
  recoverInvocations,
  successorOf,
} from 'factstate'
import { type RecordedRequest, answer, scriptedModelServer } from 'factstate/testing'

const [role, dir, stop] = process.argv.slice(2)
const configuration = { cwd: '/srv/newsroom' }
const editorRun: Invocation = { sessionId: 'editor-desk', turnId: 'turn-1', runId: 'run-1', invocationId: 'editor-1' }
/** Another supervisor's session, whose writer (a second child) asks to publish a note of the same title. */
const otherDesk: Invocation = { sessionId: 'other-desk', turnId: 'turn-1', runId: 'run-1', invocationId: 'other-1' }

/**
 * The model, one server for both agents (told apart by the model they ask): the editor delegates, and
 * answers once told what the writer did; the writer sends its draft for review, publishes it once
 * told it was approved, then answers.
 */
function model(request: RecordedRequest) {
  const messages = request.body.messages
  const last = messages.at(-1)
  if (request.body.model === 'editor') {
    if (last?.role === 'user' && String(last.content).includes('delegate')) return answer.text('The v2 release note is written, reviewed and published.')
    if (last?.role === 'tool' && String(last.content).includes('"status":"completed"')) return answer.text(`The writer answered: ${String(last.content)}`)
    const publishOnly = String(messages.find((message) => message.role === 'user')?.content).startsWith('Publish')
    return answer.toolCalls([{ name: 'delegate', arguments: { specialist: 'writer', task: publishOnly ? 'Publish the v2 release note' : 'Write the v2 release note' } }])
  }
  const said = String(last?.content)
  // A writer told to publish (another desk's): it asks for the publication at once.
  if (!messages.some((message) => message.role === 'tool') && said.startsWith('Publish')) return answer.toolCalls([{ name: 'publish', arguments: { title: 'v2 release note' } }])
  if (!messages.some((message) => message.role === 'tool') || said.includes('submit it again')) return answer.toolCalls([{ name: 'submit_for_review', arguments: { title: 'v2 release note' } }])
  if (last?.role === 'user' && said.includes('approved') && !said.includes('do not publish')) return answer.toolCalls([{ name: 'publish', arguments: { title: 'v2 release note' } }])
  if (said.includes('published')) return answer.text('Published "v2 release note" after carol@acme approved it.')
  return answer.text('The draft waits for its reviewer.')
}

/** What one process works with: its engine, its log, the approvals, and the settings of both agents. */
interface Desk {
  dir: string
  log: EventLog
  engine: Engine
  approvals: Approvals
  editor: RunSettings
  writer: RunSettings
}

/** `onSealError`: a seal that failed (the run then goes on: the gate in `publish` still holds). */
const onSealError = (error: unknown) => console.error(`the hold was not sealed: ${String(error)}`)

/**
 * Reserves a hold on `invocation`'s run, taken at its next safe point (once the calling tool has
 * settled: not awaited here), and returns what seals it there: call it once whatever the turn will
 * wait for is recorded, with what withdraws that record if the hold or the seal is refused (a
 * shutdown's cancel before the safe point: no turn waits then). Undefined when the run is stopping
 * already (HANDOFF_UNAVAILABLE): no turn will wait, so record nothing. One hold covers every call of
 * an answer: a second call's (HANDOFF_BUSY) is sealed with the first, whose refusal withdraws the run's records.
 */
function sealAtNextSafePoint(engine: Engine, invocation: Invocation, handoffId: string): ((onRefused?: () => unknown) => void) | undefined {
  let reservation: HandoffReservation | undefined
  try {
    reservation = engine.running(invocation.invocationId)?.handoff().reserve(intentFor(invocation, handoffId))
  } catch (error) {
    if (isFactstateError(error, 'HANDOFF_UNAVAILABLE')) return undefined
    if (!isFactstateError(error, 'HANDOFF_BUSY')) throw error
  }
  return (onRefused) => {
    void reservation
      ?.ready()
      .then((held) => held.commit())
      .catch(async (error) => {
        onSealError(error)
        await onRefused?.()
      })
      .catch(onSealError) // the withdrawal failed too
  }
}

/** A review request, tied to the run that asked: it is good only while that run's turn waits for it. */
interface ReviewRequest {
  run: string
  session: string
  title: string
  withdrawn?: true
}

const requestsIn = (dir: string): ReviewRequest[] => {
  const file = join(dir, 'reviews.jsonl')
  return existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as ReviewRequest) : []
}

/** Withdraws the review requests of the run `invocationId` and returns the titles of all of them, withdrawn now or before. */
function withdrawRequests(dir: string, invocationId: string): string[] {
  const requests = requestsIn(dir)
  const file = join(dir, 'reviews.jsonl')
  writeFileSync(`${file}.next`, requests.map((r) => `${JSON.stringify(r.run === invocationId ? { ...r, withdrawn: true } : r)}\n`).join(''))
  renameSync(`${file}.next`, file)
  return requests.filter((r) => r.run === invocationId).map((r) => r.title)
}

/**
 * What reviewers approved and is not published yet, a file each (a table of your application's in
 * practice): `publish`'s only gate. Keyed by the session whose turn asked for the review (the
 * writer's, a child session) and the title: another session's run that names the same title (a
 * second child, another desk's writer) takes nothing.
 */
interface Approvals {
  /** Whether `title` is approved for `session` and not yet published. */
  has(session: string, title: string): boolean
  /** Records an approval; false when it is recorded already, or was used (the same resume, run again). */
  approve(session: string, title: string, by: string): boolean
  /** Takes the approval as it checks it (a rename): one approval publishes once. */
  take(session: string, title: string): boolean
  /** Puts back an approval no run will consume: approved → not approved, unless it was taken. */
  undo(session: string, title: string): void
}

function approvalsIn(dir: string): Approvals {
  const file = (state: 'approved' | 'used', session: string, title: string) => join(dir, `${state} ${encodeURIComponent(JSON.stringify([session, title]))}`)
  return {
    has: (session, title) => existsSync(file('approved', session, title)),
    approve(session, title, by) {
      if (existsSync(file('used', session, title))) return false
      try {
        writeFileSync(file('approved', session, title), by, { flag: 'wx' })
        return true
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
        throw error
      }
    },
    take(session, title) {
      try {
        renameSync(file('approved', session, title), file('used', session, title))
        return true
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false // not approved, or taken already
        throw error
      }
    },
    undo: (session, title) => rmSync(file('approved', session, title), { force: true }),
  }
}

async function openDesk(dir: string, baseUrl: string): Promise<Desk> {
  const log = await EventLog.open(join(dir, 'log'))
  const engine = new Engine({ log })
  const approvals = approvalsIn(dir)
  const reviews = join(dir, 'reviews.jsonl')
  const published = join(dir, 'published.txt')
  const writerTools: ToolDefinition[] = [
    {
      name: 'submit_for_review',
      description: 'Sends a draft to a reviewer (no side effect but the review request)',
      inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
      async execute(args, context) {
        const { title } = args as { title: string }
        if (approvals.has(context.invocation.sessionId, title)) return { review: 'approved' }
        if (stop === 'shutdown-before-request') void engine.close({ cancel: 'shutdown' }) // the example's SIGTERM
        // Reserved before the request is recorded: a run already stopping (a shutdown) records none.
        const seal = sealAtNextSafePoint(engine, context.invocation, 'review')
        // Returned, not thrown: a tool with effects that throws once its run's signal aborted leaves its call uncertain.
        if (seal === undefined) return { review: 'not sent: the run is stopping; submit it again to send it for review' }
        // What the reviewer is shown, with the run that asked: good only while that run's turn waits for it.
        appendFileSync(reviews, `${JSON.stringify({ run: context.invocation.invocationId, session: context.invocation.sessionId, title })}\n`)
        if (stop === 'shutdown-after-request') setImmediate(() => void engine.close({ cancel: 'shutdown' })) // the example's SIGTERM
        // Sealed once held; a hold or a seal refused (a shutdown before the safe point): no turn waits, so withdraw.
        seal(() => withdrawRequests(dir, context.invocation.invocationId))
        return { review: 'sent to a reviewer: publish it once approved' }
      },
    },
    {
      name: 'publish',
      description: 'Publishes an approved draft (the side effect)',
      inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
      async execute(args, context) {
        const { title } = args as { title: string }
        // The gate: an approval is taken as it is checked (a rename), so one approval publishes once;
        // by session and title, so another session's run (a second writer) that names the title takes nothing.
        if (!approvals.take(context.invocation.sessionId, title)) throw new Error(`"${title}" needs a reviewer's approval in this session: submit it for review`)
        appendFileSync(published, `${context.operationId} ${title}\n`)
        return { published: true }
      },
    },
  ]
  const writer = { provider: { kind: 'openai-chat' as const, baseUrl, model: 'writer' }, configuration, tools: writerTools }
  // The supervisor's tool: runs the writer as a child run of this call and returns its answer, or,
  // when the writer waits for a person, seals the supervisor at its next safe point too.
  const delegate: ToolDefinition = {
    name: 'delegate',
    description: 'Hands a task to a specialist agent and returns its answer',
    inputSchema: { type: 'object', properties: { specialist: { enum: ['writer'] }, task: { type: 'string' } }, required: ['specialist', 'task'] },
    async execute(args, context) {
      const { specialist, task } = args as { specialist: string; task: string }
      const child = await engine.start({ ...childRunFor(context, specialist), ...writer, work: { kind: 'message', content: task } }, { signal: context.signal })
      const outcome = await child.wait()
      if (outcome.status === 'handoff_paused') {
        sealAtNextSafePoint(engine, context.invocation, 'child-review')?.() // undefined: the supervisor is stopping; the review carries it on
        // What the sealed transcript keeps as this call's result; the successor is told the child's answer after it.
        return { status: 'handoff_paused', child: child.invocation.sessionId, note: 'the specialist waits for a reviewer' }
      }
      return { status: outcome.status, answer: answerOf(await log.invocationEvents(child.invocation.invocationId)) ?? null }
    },
  }
  const editor = { provider: { kind: 'openai-chat' as const, baseUrl, model: 'editor' }, configuration, tools: [delegate] }
  return { dir, log, engine, approvals, editor, writer }
}

/**
 * The children a supervisor's run waits for: those of its delegate calls that returned
 * `handoff_paused`, or never settled (a crash), or returned a child cut short as the run itself was
 * cancelled (`cancelled` or `failed`, and no answer of the model after it: a shutdown), each with its
 * call's operation id and the runs the call started (`log.childRuns`, found by the `parent` they
 * record, whatever their ids: the first records the call; empty when the child never started).
 */
async function childrenWaitedFor(log: EventLog, invocationId: string): Promise<{ operationId: string; runs: ChildRunSummary[] }[]> {
  const calls = new Set<string>()
  const cutShort = new Set<string>()
  for (const { event } of await log.invocationEvents(invocationId)) {
    const { fact } = event
    if (fact.type === 'tool.dispatched' && fact.name === 'delegate') calls.add(fact.operationId)
    if (fact.type === 'tool.settled' && calls.has(fact.operationId)) {
      const status = fact.outcome.status === 'succeeded' ? (fact.outcome.output as { status?: unknown } | null)?.status : undefined
      if (status === 'cancelled' || status === 'failed') cutShort.add(fact.operationId)
      else if (status !== 'handoff_paused') calls.delete(fact.operationId)
    }
    // The model read those results and went on, or the run did not end cancelled: not cut short by a stop.
    if (fact.type === 'model.completed' || (fact.type === 'invocation.ended' && fact.outcome.status !== 'cancelled')) {
      for (const operationId of cutShort) calls.delete(operationId)
      cutShort.clear()
    }
  }
  const waited: { operationId: string; runs: ChildRunSummary[] }[] = []
  for (const operationId of calls) waited.push({ operationId, runs: await log.childRuns(operationId) })
  return waited
}

/**
 * The approval of `request` by `by`, carried through: the child's successor (or whatever finishes
 * it), checked, the approval recorded, then started, then its supervisor's. Everything is read from
 * the log, so a process killed anywhere in it runs it again.
 */
async function carryReview(desk: Desk, request: ReviewRequest, by: string): Promise<void> {
  const { log, engine, approvals } = desk
  const { session: childSession, title } = request
  const decision = `${by} approved "${title}"`
  // 1. The child: sealed, its successor is told the decision; ended otherwise (a crash in its
  //    successor), it is continued from its end, its uncertain calls checked by operation id.
  let last = (await log.runs(childSession)).at(-1)
  if (last !== undefined && last.terminal !== 'completed') {
    const source = await log.runSource(childSession, last.runId)
    if (source === undefined) throw new Error(`no run ${last.runId} in ${childSession}`)
    let run: RunInput
    if (source.pause !== undefined) {
      run = { ...desk.writer, invocation: successorOf(source.pause.intent, source.boundary.invocation), work: { kind: 'handoff', source: source.boundary, pause: source.pause, content: decision } }
    } else {
      const unknown = (await log.pendingSessions({ sessionId: childSession }))[0]?.unknown ?? []
      const file = join(desk.dir, 'published.txt')
      const published = existsSync(file) ? readFileSync(file, 'utf8') : ''
      const found = unknown.map((op) => `${op.name} (operation ${op.operationId}): ${op.name !== 'publish' ? 'it was sent for review' : published.includes(op.operationId) ? 'it was published; do not publish it again' : 'not published'}`)
      // Its first run, never sealed (a crash before the seal), was not told the decision: tell it now.
      const told = last.kind === 'message' ? [decision, ...found] : found
      const again = { sessionId: childSession, turnId: last.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
      run = { ...desk.writer, invocation: again, work: { kind: 'continuation', source: source.boundary, ...(found.length > 0 ? { allowPriorUnknown: true } : {}), ...(told.length > 0 ? { content: told.join('\n') } : {}) } }
    }
    // Asked before anything is recorded: a run the log would refuse now (HANDOFF_MISMATCH once a deploy
    // changed a sealed setting, HANDOFF_CLAIMED once the turn was given up) throws here, and no approval
    // is left that no run of the child's turn would consume.
    await engine.check(run)
    // For the child's session, whose turn asked: false when recorded already (this resume, run again).
    const recorded = approvals.approve(childSession, title, by)
    if (stop === 'after-approval') {
      console.log(`approval-recorded ${childSession}`)
      await new Promise(() => undefined) // the example's crash: killed here, before the successor starts
    }
    let running: RunningInvocation
    try {
      running = await engine.start(run)
    } catch (error) {
      // Refused all the same: the log changed between the check and the start (a race). Put it back.
      if (recorded) approvals.undo(childSession, title)
      throw error
    }
    const outcome = await running.wait()
    console.log(`${childSession}: ${run.work.kind} ${run.invocation.runId} ${outcome.status}: ${answerOf(await log.invocationEvents(run.invocation.invocationId))}`)
    last = (await log.runs(childSession)).at(-1)
  }
  if (last?.terminal !== 'completed') throw new Error(`${childSession}: not finished (${last?.terminal}); run this again`)
  console.log(`child-done ${childSession}`)
  if (stop === 'after-child') await new Promise(() => undefined) // the example's crash: process 2 is killed here
  await tellSupervisor(desk, childSession)
}

/**
 * The supervisor of the completed child run `childSession`: the run whose delegate call started the
 * child. Still its session's last run, it has not been told: once every child it waits for has
 * finished, its successor (sealed) or continuation (a crash or a shutdown before the seal) is told what
 * each of those delegate calls came to.
 */
async function tellSupervisor(desk: Desk, childSession: string): Promise<void> {
  const { log, engine } = desk
  // The call the child's first run was started for (undefined: not a child run).
  const parent = (await log.runs(childSession))[0]?.parent
  if (parent === undefined) return
  const { sessionId, runId, invocationId } = parent.invocation
  const supervisor = await log.latestRun(sessionId)
  if (supervisor === undefined) return
  if (supervisor.runId === runId && supervisor.terminal === 'completed') {
    console.log(`${sessionId}: answered without the child (its hold was not taken): nothing to tell it`)
    return
  }
  if (supervisor.terminal === 'completed') return
  const source = await log.runSource(sessionId, supervisor.runId)
  if (source === undefined) throw new Error(`no run ${supervisor.runId} in ${sessionId}`)
  let run: RunInput
  if (supervisor.runId === runId) {
    const told: string[] = []
    for (const { operationId, runs } of await childrenWaitedFor(log, invocationId)) {
      const done = runs.at(-1)
      if (done?.terminal !== 'completed') {
        console.log(`${sessionId}: waits for ${done?.sessionId ?? `the child of ${operationId}`} too (${done?.terminal ?? 'never started'})`)
        return // that child's review carries the supervisor on
      }
      const answered = answerOf(await log.invocationEvents(done.invocationId)) ?? null
      told.push(`delegate (operation ${operationId}), which waited for the ${done.sessionId} run, came to: ${JSON.stringify({ status: 'completed', answer: answered })}`)
    }
    // Never an empty content (refused): a run that waits for no child is not told anything.
    const content = told.length === 0 ? {} : { content: told.join('\n') }
    if (source.pause !== undefined) {
      run = { ...desk.editor, invocation: successorOf(source.pause.intent, source.boundary.invocation), work: { kind: 'handoff', source: source.boundary, pause: source.pause, ...content } }
    } else {
      // Not sealed: a crash before the delegate call settled (its outcome unknown) or before the seal,
      // or a shutdown that cut the child short (the call returned `cancelled`).
      const again = { sessionId, turnId: supervisor.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
      run = { ...desk.editor, invocation: again, work: { kind: 'continuation', source: source.boundary, allowPriorUnknown: true, ...content } }
    }
  } else if (source.pause === undefined) {
    // Told already, by a run a crash cut short: continued from its end without a message.
    const again = { sessionId, turnId: supervisor.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
    run = { ...desk.editor, invocation: again, work: { kind: 'continuation', source: source.boundary } }
  } else {
    return // sealed again, for another child: that child's review carries it on
  }
  const outcome = await engine.run(run)
  console.log(`${sessionId}: ${run.work.kind} ${run.invocation.runId} ${outcome.status}: ${answerOf(await log.invocationEvents(run.invocation.invocationId))}`)
}

/**
 * At every start-up, after `recoverInvocations`: the children a shutdown cut short before their seal,
 * as their supervisor's `delegate` call waited (the call returned `cancelled`, the supervisor ended
 * `cancelled` too). Each is continued, its review requests withdrawn first (its refused hold withdrew
 * them already, unless the process exited first) and the model told, so that it submits again and the
 * new run is sealed; the supervisor then waits for that review, which carries both on. A child session
 * is reached through its supervisor, never on its own.
 */
async function continueCutShort(desk: Desk): Promise<void> {
  const { log, engine } = desk
  for (const session of await log.pendingSessions({ unanswered: true })) {
    const stopped = session.unanswered
    if (stopped === undefined || (await log.runs(session.sessionId))[0]?.parent !== undefined) continue
    for (const { runs } of await childrenWaitedFor(log, stopped.invocationId)) {
      const last = runs.at(-1)
      if (last?.terminal !== 'cancelled') continue // paused, completed, or a crash's (carryReview's): the review carries it on
      const source = await log.runSource(last.sessionId, last.runId)
      const parent = runs[0]?.parent // the call's, recorded by the first run it started
      if (source === undefined || parent === undefined) throw new Error(`no run ${last.runId} in ${last.sessionId}`)
      const titles = withdrawRequests(desk.dir, last.invocationId)
      // No request (the shutdown came before it was recorded): the tool's "not sent" result says it all.
      const content = titles.length === 0 ? {} : { content: `The review request for "${titles.join('", "')}" was interrupted before a reviewer answered it and is withdrawn: submit it again to send it for review.` }
      const again = { sessionId: last.sessionId, turnId: last.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
      const outcome = await engine.run({ ...desk.writer, invocation: again, parent, work: { kind: 'continuation', source: source.boundary, ...content } })
      console.log(`${last.sessionId}: continuation ${again.runId} ${outcome.status}${titles.length === 0 ? '' : `, told: ${titles.length} request(s) withdrawn`}`)
      if (outcome.status === 'completed') await tellSupervisor(desk, last.sessionId)
    }
  }
}

if (role === 'work' && dir) {
  // Process 1: the editor's turn, until both runs are sealed (or a shutdown cuts both short).
  const server = await scriptedModelServer(model, { callIdPrefix: 'work' })
  const desk = await openDesk(dir, server.baseUrl)
  // The shutdown of "Cancelling a run" (here also at a point `stop` names): no run starts from then
  // on, and both runs, the editor's and the writer its delegate started, end cancelled{shutdown}.
  process.once('SIGTERM', () => void desk.engine.close({ cancel: 'shutdown' }))
  const outcome = await desk.engine.run({ ...desk.editor, invocation: editorRun, work: { kind: 'message', content: 'Get the v2 release note written and reviewed' } })
  await desk.engine.close() // the writer's run too has ended (sealed, or cut short with the editor's)
  console.log(`process 1: the editor ended ${outcome.status}; model requests: ${server.requests.length}`)
  await desk.log.close()
  await server.close()
} else if (role === 'other' && dir) {
  // Another desk, while editor-desk's approval stands: its writer asks to publish the same title.
  const server = await scriptedModelServer(model, { callIdPrefix: 'other' })
  const desk = await openDesk(dir, server.baseUrl)
  const outcome = await desk.engine.run({ ...desk.editor, invocation: otherDesk, work: { kind: 'message', content: 'Publish the v2 release note' } })
  console.log(`${otherDesk.sessionId}: ${outcome.status}: ${answerOf(await desk.log.invocationEvents(otherDesk.invocationId))}`)
  await desk.log.close()
  await server.close()
} else if (role === 'review' && dir) {
  // Process 2 and 3, days later: the reviewer approves; the approval is recorded, then carried on.
  const server = await scriptedModelServer(model, { callIdPrefix: `review-${process.pid}` })
  const desk = await openDesk(dir, server.baseUrl)
  await recoverInvocations(desk.log) // at start-up, as always: a crash may have left runs open
  await continueCutShort(desk) // and a shutdown, runs cut short
  const request = requestsIn(dir).find((r) => r.withdrawn === undefined)
  if (request === undefined) throw new Error('no review was asked for')
  // The example's deploy: this build changed the writer's instructions, which its seal records.
  if (stop === 'deployed') desk.writer = { ...desk.writer, instructions: 'Write briefly.' }
  try {
    await carryReview(desk, request, 'carol@acme') // the approval is recorded there, once its run is checked
  } catch (error) {
    if (!isFactstateError(error, 'HANDOFF_MISMATCH')) throw error
    // Nothing recorded: tell the reviewer the turn could not resume (run it with the sealed settings).
    console.log(`review refused: HANDOFF_MISMATCH (${error.details.fields?.join()})`)
  }
  await desk.log.close()
  await server.close()
} else {
  const work = await mkdtemp(join(tmpdir(), 'factstate-supervisor-'))
  const self = fileURLToPath(import.meta.url)
  const node = (role: string, dir = work, stop?: string) => spawn(process.execPath, [...process.execArgv, self, role, dir, ...(stop === undefined ? [] : [stop])], { stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = async (child: ReturnType<typeof node>, until?: (line: string) => boolean) => {
    for await (const line of createInterface({ input: child.stdout })) {
      console.log(`  ${line}`)
      if (until?.(line)) break
    }
  }
  const exited = (child: ReturnType<typeof node>) => new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve)))
  const pending = async (dir = work) => {
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const sessions = await log.pendingSessions({ unanswered: true })
      return sessions.map((s) => `${s.sessionId}: ${[...s.paused.map((t) => `paused ${t.runId}`), ...s.unknown.map((op) => `unknown ${op.name}`), ...(s.unanswered ? [`unanswered ${s.unanswered.runId}`] : [])].join(', ')}`)
    } finally {
      await log.close()
    }
  }
  let ok = true
  const check = (condition: boolean, what: string) => {
    console.log(`${condition ? '✔' : '✘'} ${what}`)
    ok &&= condition
  }
  /** The tools each run of the two sessions dispatched, in order. */
  const callsIn = async (log: EventLog) => {
    const calls: string[] = []
    const writers = (await log.childRuns(`${editorRun.invocationId}/step-1/0`)).map((run) => run.sessionId)
    for (const session of [editorRun.sessionId, ...new Set(writers)]) {
      for (const run of await log.runs(session)) {
        for (const { event } of await log.invocationEvents(run.invocationId)) if (event.fact.type === 'tool.dispatched') calls.push(event.fact.name)
      }
    }
    return calls
  }
  try {
    console.log('process 1')
    const first = node('work')
    await lines(first)
    check((await exited(first)) === 0, 'process 1 exited')
    const paused = await pending()
    console.log(`pending: ${paused.join('; ')}`)
    check(paused.length === 2 && paused.every((line) => /: paused [^,]+$/.test(line)), 'both turns are sealed: the writer waits for its reviewer, the editor for the writer')

    console.log('process 2 (the reviewer approves; killed once the writer is done)')
    const second = node('review', work, 'after-child')
    second.stdout.setEncoding('utf8')
    await lines(second, (line) => line.startsWith('child-done'))
    second.kill('SIGKILL')
    await exited(second)
    console.log(`pending: ${(await pending()).join('; ')}`)

    console.log('process 3 (the same resume, again)')
    const third = node('review', work)
    await lines(third)
    check((await exited(third)) === 0, 'process 3 exited')
    const published = readFileSync(join(work, 'published.txt'), 'utf8').trim().split('\n')
    check(published.length === 1, `the note was published ${published.length} time(s)`)
    const left = await pending()
    check(left.length === 0, `nothing pending${left.length === 0 ? '' : `: ${left.join('; ')}`}`)
    const log = await EventLog.open(join(work, 'log'))
    try {
      const runs = await log.runs(editorRun.sessionId)
      check(runs.map((r) => `${r.kind} ${r.terminal}`).join(', ') === 'message paused, handoff completed', `the editor: ${runs.map((r) => `${r.runId} ${r.kind} ${r.terminal}`).join(', ')}`)
      const sealed = await log.invocationEvents(editorRun.invocationId)
      const asked = sealed.filter(({ event }) => event.fact.type === 'model.requested').length
      check(asked === 1, `the editor's model was asked ${asked} time(s) before the seal: never with the "child paused" result`)
      const successor = runs[1]
      const opened = successor === undefined ? undefined : (await log.invocationEvents(successor.invocationId))[0]?.event.fact
      const told = opened?.type === 'invocation.opened' && opened.input.kind === 'handoff' ? opened.input.content : undefined
      check(told?.includes('Published \\"v2 release note\\"') === true, `the editor's successor was told: ${told}`)
      const calls = await callsIn(log)
      check(calls.join() === 'delegate,submit_for_review,publish', `each tool ran once, across three processes: ${calls.join(', ')}`)
      console.log(`verify: ${(await log.verify()).events} facts ok`)
    } finally {
      await log.close()
    }

    // A shutdown (SIGTERM) cuts both runs short before the writer's seal: after the writer's request
    // was recorded (its hold refused, the request withdrawn), or before (the tool sends nothing).
    for (const stop of ['shutdown-after-request', 'shutdown-before-request']) {
      const dir = await mkdtemp(join(tmpdir(), 'factstate-supervisor-'))
      try {
        console.log(`process 1 (${stop})`)
        const cut = node('work', dir, stop)
        await lines(cut)
        check((await exited(cut)) === 0, `${stop}: process 1 exited`)
        const stopped = await pending(dir)
        console.log(`pending: ${stopped.join('; ')}`)
        const open = requestsIn(dir).filter((r) => r.withdrawn === undefined)
        check(open.length === 0, `${stop}: no review request is left open with no turn waiting for it`)
        console.log('process 2 (at start-up, the writer is continued and submits again; the reviewer approves)')
        const resume = node('review', dir)
        await lines(resume)
        check((await exited(resume)) === 0, `${stop}: process 2 exited`)
        const published = readFileSync(join(dir, 'published.txt'), 'utf8').trim().split('\n')
        const left = await pending(dir)
        check(published.length === 1 && left.length === 0, `${stop}: the note was published ${published.length} time(s); nothing pending${left.length === 0 ? '' : `: ${left.join('; ')}`}`)
        const log = await EventLog.open(join(dir, 'log'))
        try {
          const runs = await log.runs(editorRun.sessionId)
          const opened = runs[1] === undefined ? undefined : (await log.invocationEvents(runs[1].invocationId))[0]?.event.fact
          const told = opened?.type === 'invocation.opened' && opened.input.kind === 'continuation' ? opened.input.content : undefined
          check(
            runs.map((r) => `${r.kind} ${r.terminal}`).join(', ') === 'message cancelled, continuation completed' && told?.includes('Published \\"v2 release note\\"') === true,
            `${stop}: the editor, cut short, was continued and told: ${told}`,
          )
          const calls = await callsIn(log)
          check(calls.join() === 'delegate,submit_for_review,submit_for_review,publish', `${stop}: the writer submitted again, the editor never delegated again: ${calls.join(', ')}`)
        } finally {
          await log.close()
        }
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    }

    // Another desk's writer (a second child, in a session of its own) asks to publish the same title
    // while editor-desk's approval stands (process 2 killed after recording it, before the writer's
    // successor started): an approval is for the session whose turn asked for it.
    const dir = await mkdtemp(join(tmpdir(), 'factstate-supervisor-'))
    try {
      console.log('process 1 (another desk)')
      const first = node('work', dir)
      await lines(first)
      check((await exited(first)) === 0, 'another desk: process 1 exited')
      console.log('process 2 (a deploy changed the writer\'s instructions; the reviewer approves)')
      const deployed = node('review', dir, 'deployed')
      await lines(deployed)
      const recorded = readdirSync(dir).filter((name) => name.startsWith('approved ') || name.startsWith('used '))
      check(
        (await exited(deployed)) === 0 && recorded.length === 0 && !existsSync(join(dir, 'published.txt')),
        `another desk: after the deploy, the writer's successor was refused by the check: no approval recorded${recorded.length === 0 ? '' : `: ${recorded.join(', ')}`}, nothing published`,
      )
      console.log('process 3 (the build the seal names: the reviewer approves; killed once the approval is recorded)')
      const second = node('review', dir, 'after-approval')
      await lines(second, (line) => line.startsWith('approval-recorded'))
      second.kill('SIGKILL')
      await exited(second)
      console.log('process 4 (another desk: its writer asks to publish "v2 release note")')
      const other = node('other', dir)
      await lines(other)
      check((await exited(other)) === 0, 'another desk: process 4 exited')
      const file = join(dir, 'published.txt')
      const early = existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n') : []
      check(early.length === 0, `another desk: its writer's call was refused, nothing published${early.length === 0 ? '' : `: ${early.join('; ')}`}`)
      console.log('process 5 (the same resume, again)')
      const resume = node('review', dir)
      await lines(resume)
      check((await exited(resume)) === 0, 'another desk: process 5 exited')
      const published = existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n') : []
      const left = await pending(dir)
      check(
        published.length === 1 && published[0]?.includes('.writer.review/') === true && left.length === 0,
        `another desk: the note was published once, by editor-desk's writer's successor: ${published.join('; ')}; nothing pending${left.length === 0 ? '' : `: ${left.join('; ')}`}`,
      )
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  } finally {
    await rm(work, { recursive: true, force: true })
  }
  process.exitCode = ok ? 0 : 1
}
