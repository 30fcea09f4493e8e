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
 *   npx tsx examples/supervisor-waits-for-child.ts
 */
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import {
  Engine,
  EventLog,
  type Invocation,
  type RunInput,
  type ToolDefinition,
  answerOf,
  childRunFor,
  childRunOf,
  intentFor,
  isFactstateError,
  recoverInvocations,
  successorOf,
} from 'factstate'
import { type RecordedRequest, answer, scriptedModelServer } from 'factstate/testing'

const [role, dir, stop] = process.argv.slice(2)
const configuration = { cwd: '/srv/newsroom' }
const editorRun: Invocation = { sessionId: 'editor-desk', turnId: 'turn-1', runId: 'run-1', invocationId: 'editor-1' }

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
    return answer.toolCalls([{ name: 'delegate', arguments: { specialist: 'writer', task: 'Write the v2 release note' } }])
  }
  const said = String(last?.content)
  if (!messages.some((message) => message.role === 'tool')) return answer.toolCalls([{ name: 'submit_for_review', arguments: { title: 'v2 release note' } }])
  if (last?.role === 'user' && said.includes('approved') && !said.includes('do not publish')) return answer.toolCalls([{ name: 'publish', arguments: { title: 'v2 release note' } }])
  if (said.includes('published')) return answer.text('Published "v2 release note" after carol@acme approved it.')
  return answer.text('The draft waits for its reviewer.')
}

/** What one process works with: its engine, its log, and the settings of both agents. */
interface Desk {
  dir: string
  log: EventLog
  engine: Engine
  editor: Omit<RunInput, 'invocation' | 'work'>
  writer: Omit<RunInput, 'invocation' | 'work'>
}

/** `onSealError`: a seal that failed (the run then goes on: the gate in `publish` still holds). */
const onSealError = (error: unknown) => console.error(`the hold was not sealed: ${String(error)}`)

/**
 * Holds `invocation`'s run at its next safe point (once the calling tool has settled: not awaited
 * here) and seals it there. One hold covers every call of an answer (a second is HANDOFF_BUSY).
 */
function sealAtNextSafePoint(engine: Engine, invocation: Invocation, handoffId: string): void {
  const run = engine.running(invocation.invocationId)
  try {
    void run?.handoff().reserve(intentFor(invocation, handoffId)).ready().then((held) => held.commit()).catch(onSealError)
  } catch (error) {
    if (!isFactstateError(error, 'HANDOFF_BUSY')) throw error
  }
}

async function openDesk(dir: string, baseUrl: string): Promise<Desk> {
  const log = await EventLog.open(join(dir, 'log'))
  const engine = new Engine({ log })
  const reviews = join(dir, 'reviews.txt')
  const published = join(dir, 'published.txt')
  const writerTools: ToolDefinition[] = [
    {
      name: 'submit_for_review',
      description: 'Sends a draft to a reviewer (no side effect but the review request)',
      inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
      async execute(args, context) {
        const { title } = args as { title: string }
        if (existsSync(join(dir, `approved ${title}`))) return { review: 'approved' }
        appendFileSync(reviews, `${context.invocation.sessionId} ${title}\n`) // what the reviewer is shown, and whose run waits
        sealAtNextSafePoint(engine, context.invocation, 'review')
        return { review: 'sent to a reviewer: publish it once approved' }
      },
    },
    {
      name: 'publish',
      description: 'Publishes an approved draft (the side effect)',
      inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
      async execute(args, context) {
        const { title } = args as { title: string }
        // The gate: an approval is taken as it is checked (a rename), so one approval publishes once.
        try {
          renameSync(join(dir, `approved ${title}`), join(dir, `used ${title}`))
        } catch {
          throw new Error(`"${title}" needs a reviewer's approval: submit it for review`)
        }
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
        sealAtNextSafePoint(engine, context.invocation, 'child-review')
        // What the sealed transcript keeps as this call's result; the successor is told the child's answer after it.
        return { status: 'handoff_paused', child: child.invocation.sessionId, note: 'the specialist waits for a reviewer' }
      }
      return { status: outcome.status, answer: answerOf(await log.invocationEvents(child.invocation.invocationId)) ?? null }
    },
  }
  const editor = { provider: { kind: 'openai-chat' as const, baseUrl, model: 'editor' }, configuration, tools: [delegate] }
  return { dir, log, engine, editor, writer }
}

/**
 * The children a supervisor's run waits for: those of its delegate calls that returned
 * `handoff_paused`, or never settled (a crash), each with its call's operation id.
 */
async function childrenWaitedFor(log: EventLog, invocationId: string): Promise<{ operationId: string; child: Invocation }[]> {
  const calls = new Map<string, Invocation>()
  for (const { event } of await log.invocationEvents(invocationId)) {
    const { fact } = event
    if (fact.type === 'tool.dispatched' && fact.name === 'delegate') calls.set(fact.operationId, childRunOf(fact.operationId, (fact.input as { specialist: string }).specialist))
    const paused = fact.type === 'tool.settled' && fact.outcome.status === 'succeeded' && (fact.outcome.output as { status?: unknown } | null)?.status === 'handoff_paused'
    if (fact.type === 'tool.settled' && !paused) calls.delete(fact.operationId)
  }
  return [...calls].map(([operationId, child]) => ({ operationId, child }))
}

/**
 * The reviewer's decision for the child run `childSession`, carried through: the child's successor
 * (or whatever finishes it), then its supervisor's. Everything is read from the log, so a process
 * killed anywhere in it runs it again.
 */
async function carryReview(desk: Desk, childSession: string, decision: string): Promise<void> {
  const { log, engine } = desk
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
    const outcome = await engine.run(run)
    console.log(`${childSession}: ${run.work.kind} ${run.invocation.runId} ${outcome.status}: ${answerOf(await log.invocationEvents(run.invocation.invocationId))}`)
    last = (await log.runs(childSession)).at(-1)
  }
  if (last?.terminal !== 'completed') throw new Error(`${childSession}: not finished (${last?.terminal}); run this again`)
  console.log(`child-done ${childSession}`)
  if (stop === 'after-child') await new Promise(() => undefined) // the example's crash: process 2 is killed here

  // 2. The supervisor: the run whose delegate call started the child. Still its session's last run, it
  //    has not been told: once every child it waits for has finished, its successor (sealed) or
  //    continuation (a crash before the seal) is told what each of those delegate calls came to.
  // The call the child's first run was started for (undefined: not a child run).
  const parent = (await log.runs(childSession))[0]?.parent
  if (parent === undefined) return
  const { sessionId, runId, invocationId } = parent.invocation
  const supervisor = (await log.runs(sessionId)).at(-1)
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
    for (const { operationId, child } of await childrenWaitedFor(log, invocationId)) {
      const done = (await log.runs(child.sessionId)).at(-1)
      if (done?.terminal !== 'completed') {
        console.log(`${sessionId}: waits for ${child.sessionId} too (${done?.terminal ?? 'never started'})`)
        return // that child's review carries the supervisor on
      }
      const answered = answerOf(await log.invocationEvents(done.invocationId)) ?? null
      told.push(`delegate (operation ${operationId}), which waited for the ${child.sessionId} run, came to: ${JSON.stringify({ status: 'completed', answer: answered })}`)
    }
    if (source.pause !== undefined) {
      run = { ...desk.editor, invocation: successorOf(source.pause.intent, source.boundary.invocation), work: { kind: 'handoff', source: source.boundary, pause: source.pause, content: told.join('\n') } }
    } else {
      // Not sealed: a crash before the delegate call settled (its outcome unknown) or before the seal.
      const again = { sessionId, turnId: supervisor.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
      run = { ...desk.editor, invocation: again, work: { kind: 'continuation', source: source.boundary, allowPriorUnknown: true, content: told.join('\n') } }
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

if (role === 'work' && dir) {
  // Process 1: the editor's turn, until both runs are sealed.
  const server = await scriptedModelServer(model, { callIdPrefix: 'work' })
  const desk = await openDesk(dir, server.baseUrl)
  const outcome = await desk.engine.run({ ...desk.editor, invocation: editorRun, work: { kind: 'message', content: 'Get the v2 release note written and reviewed' } })
  await desk.engine.drain()
  console.log(`process 1: the editor ended ${outcome.status}; model requests: ${server.requests.length}`)
  await desk.log.close()
  await server.close()
} else if (role === 'review' && dir) {
  // Process 2 and 3, days later: the reviewer approves; the approval is recorded, then carried on.
  const server = await scriptedModelServer(model, { callIdPrefix: `review-${process.pid}` })
  const desk = await openDesk(dir, server.baseUrl)
  await recoverInvocations(desk.log) // at start-up, as always: a crash may have left runs open
  const [childSession, title] = readFileSync(join(dir, 'reviews.txt'), 'utf8').trim().split('\n')[0]?.split(/ (.*)/) ?? []
  if (childSession === undefined || title === undefined) throw new Error('no review was asked for')
  if (!existsSync(join(dir, `used ${title}`))) writeFileSync(join(dir, `approved ${title}`), 'carol@acme')
  await carryReview(desk, childSession, `carol@acme approved "${title}"`)
  await desk.log.close()
  await server.close()
} else {
  const work = await mkdtemp(join(tmpdir(), 'factstate-supervisor-'))
  const self = fileURLToPath(import.meta.url)
  const node = (...args: string[]) => spawn(process.execPath, [...process.execArgv, self, ...args, work], { stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = async (child: ReturnType<typeof node>, until?: (line: string) => boolean) => {
    for await (const line of createInterface({ input: child.stdout })) {
      console.log(`  ${line}`)
      if (until?.(line)) break
    }
  }
  const exited = (child: ReturnType<typeof node>) => new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve)))
  const pending = async () => {
    const log = await EventLog.open(join(work, 'log'))
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
      const calls: string[] = []
      for (const session of [editorRun.sessionId, childRunOf(`${editorRun.invocationId}/step-1/0`, 'writer').sessionId]) {
        for (const run of await log.runs(session)) {
          for (const { event } of await log.invocationEvents(run.invocationId)) if (event.fact.type === 'tool.dispatched') calls.push(event.fact.name)
        }
      }
      check(calls.join() === 'delegate,submit_for_review,publish', `each tool ran once, across three processes: ${calls.join(', ')}`)
      console.log(`verify: ${(await log.verify()).events} facts ok`)
    } finally {
      await log.close()
    }
  } finally {
    await rm(work, { recursive: true, force: true })
  }
  process.exitCode = ok ? 0 : 1
}
