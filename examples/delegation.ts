/**
 * Agents that call agents: a supervisor delegates a task to a writer agent through a `delegate` tool
 * that runs the writer as a child run of its call (`childRunFor`). A worker process is killed with
 * SIGKILL while the writer saves its draft. The next process recovers the log, finds the child run of
 * the supervisor's uncertain call by its operation id (`log.childRuns`), settles the child first (it was
 * cut short too: its save is checked by its operation id), then tells the supervisor what the writer
 * answered instead of letting it delegate again. The draft is saved once.
 *
 *   npx tsx examples/delegation.ts
 */
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { appendFileSync, readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { Engine, EventLog, type Invocation, type ParentCall, type RunBoundary, type ToolDefinition, answerOf, childRunFor, recoverInvocations } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const [role, dir] = process.argv.slice(2)
const configuration = { cwd: '/srv/newsroom' }
const supervisorRun: Invocation = { sessionId: 'editor-desk', turnId: 'turn-1', runId: 'run-1', invocationId: 'editor-1' }

/** The writer's tool: the draft store records each save under its idempotency key (the operation id). */
function saveDraft(drafts: string, die: boolean): ToolDefinition {
  return {
    name: 'save_draft',
    description: 'Saves a draft',
    inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
    async execute(args, { operationId }) {
      appendFileSync(drafts, `${operationId} ${(args as { title: string }).title}\n`)
      if (!die) return { saved: true }
      process.stdout.write('saved\n')
      return new Promise(() => undefined) // ... and the worker dies before the answer is recorded
    },
  }
}

if (role === 'worker' && dir) {
  const model = await scriptedModelServer([
    answer.toolCalls([{ name: 'delegate', arguments: { specialist: 'writer', task: 'Draft the v2 release note' } }]),
    answer.toolCalls([{ name: 'save_draft', arguments: { title: 'v2 release note' } }]),
  ])
  const log = await EventLog.open(join(dir, 'log'))
  const engine = new Engine({ log })
  const provider = { kind: 'openai-chat' as const, baseUrl: model.baseUrl, model: 'stand-in' }
  // The supervisor's tool: runs the specialist as a child run of this call, on the same engine and log.
  const delegate: ToolDefinition = {
    name: 'delegate',
    description: 'Hands a task to a specialist agent and returns its answer',
    inputSchema: { type: 'object', properties: { specialist: { enum: ['writer'] }, task: { type: 'string' } }, required: ['specialist', 'task'] },
    async execute(args, context) {
      const { specialist, task } = args as { specialist: string; task: string }
      const child = await engine.start(
        { ...childRunFor(context, specialist), provider, configuration, tools: [saveDraft(join(dir, 'drafts.txt'), true)], work: { kind: 'message', content: task } },
        { signal: context.signal }, // cancelling the supervisor cancels the writer
      )
      const outcome = await child.wait()
      // Returned, never thrown, also once cancelled: the call then settles with what the child did.
      return { status: outcome.status, answer: answerOf(await log.invocationEvents(child.invocation.invocationId)) ?? null }
    },
  }
  await engine.start({ invocation: supervisorRun, provider, configuration, tools: [delegate], work: { kind: 'message', content: 'Get the v2 release note written' } })
} else {
  const work = await mkdtemp(join(tmpdir(), 'factstate-delegation-'))
  try {
    // Process 1 runs until the writer has saved its draft, then is killed with SIGKILL.
    const worker = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), 'worker', work], { stdio: ['ignore', 'pipe', 'inherit'] })
    for await (const line of createInterface({ input: worker.stdout })) if (line === 'saved') break
    worker.kill('SIGKILL')
    await new Promise((resolve) => worker.once('exit', resolve))
    console.log('worker killed while the writer (a child run of the supervisor) saved its draft')

    // Process 2 (here, this one). 1. Recover: the supervisor and the writer both end outcome_unknown.
    // Everything below is read from the log, so a recovery killed part-way is simply run again.
    const log = await EventLog.open(join(work, 'log'))
    await recoverInvocations(log)
    const model = await scriptedModelServer([answer.text('Saved the draft "v2 release note".'), answer.text('The writer saved the v2 release note draft.')])
    const engine = new Engine({ log })
    const provider = { kind: 'openai-chat' as const, baseUrl: model.baseUrl, model: 'stand-in' }
    const drafts = join(work, 'drafts.txt')
    const pending = await log.pendingSessions({ sessionId: supervisorRun.sessionId })
    const told: string[] = []
    for (const op of pending[0]?.unknown ?? []) {
      if (op.name !== 'delegate') continue
      // 2. The runs the uncertain call started, found by the parent their opened facts record (whatever ids
      //    the tool gave them: here childRunFor's).
      const runs = await log.childRuns(op.operationId)
      const last = runs.at(-1)
      console.log(`delegate ${op.operationId}: child ${last?.sessionId ?? '(none)'}, ${last === undefined ? 'never started' : (last.outcome?.status === 'failed' ? last.outcome.class : last.terminal)}`)
      if (last === undefined) {
        told.push(`delegate (operation ${op.operationId}) never started a run: nothing was done`)
        continue
      }
      let answered = last.terminal === 'completed' ? answerOf(await log.invocationEvents(last.invocationId)) : undefined
      if (last.terminal !== 'completed') {
        // 3. The child did not finish: check its own uncertain calls, then continue it (as a child of the same call).
        const unknown = (await log.pendingSessions({ sessionId: last.sessionId }))[0]?.unknown ?? []
        const found = unknown.map((save) => `${save.name} (operation ${save.operationId}): ${readFileSync(drafts, 'utf8').includes(save.operationId) ? 'the draft was saved; do not save it again' : 'not saved'}`)
        // The call its first run was started for (a successor's run records none: its turn keeps its first run's).
        const parent = runs[0]?.parent
        const source = (await log.runSource(last.sessionId, last.runId))?.boundary as RunBoundary
        // New run and invocation ids in the child's session and turn, with its parent: step 2 finds whichever run is last.
        const again = { sessionId: last.sessionId, turnId: last.turnId, runId: `run-${randomUUID()}`, invocationId: `inv-${randomUUID()}` }
        const outcome = await engine.run({
          invocation: again,
          ...(parent === undefined ? {} : { parent: parent satisfies ParentCall }),
          provider,
          configuration,
          tools: [saveDraft(drafts, false)],
          work: { kind: 'continuation', source, ...(unknown.length > 0 ? { allowPriorUnknown: true, content: found.join('\n') } : {}) },
        })
        answered = answerOf(await log.invocationEvents(again.invocationId))
        console.log(`  ${found.join('; ')}; the writer, continued: ${outcome.status}`)
      }
      told.push(`delegate (operation ${op.operationId}) ran: the ${last.sessionId} run answered: ${answered ?? '(no answer)'}. Do not delegate it again.`)
    }
    // 4. Tell the supervisor what its call did, instead of letting it delegate again under a new operation id.
    const supervisorLast = (await log.runs(supervisorRun.sessionId)).at(-1)
    const supervisorSource = supervisorLast === undefined ? undefined : (await log.runSource(supervisorRun.sessionId, supervisorLast.runId))?.boundary
    const outcome = supervisorSource
      ? await engine.run({
          invocation: { ...supervisorRun, runId: 'run-2', invocationId: 'editor-2' },
          provider,
          configuration,
          tools: [],
          work: { kind: 'continuation', source: supervisorSource, allowPriorUnknown: true, content: told.join('\n') },
        })
      : undefined
    const saves = readFileSync(drafts, 'utf8').trim().split('\n').length
    console.log(`supervisor, told: ${outcome?.status}: ${answerOf(await log.invocationEvents('editor-2'))}`)
    console.log(`the draft was saved ${saves} time(s)`)
    await log.close()
    await model.close()
    process.exitCode = outcome?.status === 'completed' && saves === 1 ? 0 : 1
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
