/**
 * Child process for the crash test of a specialist with a session of its own: opens the log in
 * `argv[2]` and runs two turns of a supervisor (session `desk`) whose `delegate` tool runs the writer
 * as a continuation of its long-lived session `writer-of-desk` (a message the first time), recording
 * `parent: childRunFor(context, 'writer').parent` but ids of its own, as a LangGraph-style specialist
 * with one thread is run. The writer's `save_draft` appends its operation id to the file `argv[3]`
 * (synced); the first time it returns, the second it prints `saved <operationId>` and never returns:
 * the parent kills the process with SIGKILL.
 */
import { randomUUID } from 'node:crypto'
import { appendFileSync, closeSync, fsyncSync, openSync } from 'node:fs'
import { Engine, EventLog, ModelExecutor, type RunInput, type ToolDefinition, answerOf, childRunFor } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

const [dir, drafts] = process.argv.slice(2)
if (!dir || !drafts) throw new Error('usage: child-specialist-session.ts <log-dir> <drafts-file>')

// Holds the process until the parent's SIGKILL. Nothing else keeps the event loop alive once the
// tool (or approver) waits on a promise nothing settles: the scripted model server and its idle
// connections are unref'd. Without it the process ended on its own (exit 0, signal null) 8-90 ms
// after its `saved` line, a race with the kill the parent asserts (as faults-secrets-child had).
// Bounded: a child whose parent died without killing it ends by itself after ten minutes.
setTimeout(() => process.exit(1), 600_000)

const log = await EventLog.open(dir)
const server = await scriptedModelServer([
  answer.toolCalls([{ id: 'call-d1', name: 'delegate', arguments: { task: 'draft the release note' } }]),
  answer.toolCalls([{ id: 'call-s1', name: 'save_draft', arguments: { title: 'Release note' } }]),
  answer.text('Saved the release note.'),
  answer.text('The writer saved the release note.'),
  answer.toolCalls([{ id: 'call-d2', name: 'delegate', arguments: { task: 'draft the changelog' } }]),
  answer.toolCalls([{ id: 'call-s2', name: 'save_draft', arguments: { title: 'Changelog' } }]),
])
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
const provider = { kind: 'openai-chat' as const, baseUrl: server.baseUrl, model: 'scripted' }
const configuration = { cwd: '/workspace/project' }
let saves = 0

const saveDraft: ToolDefinition = {
  name: 'save_draft',
  description: 'saves a draft',
  inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
  execute(_input, { operationId }) {
    const fd = openSync(drafts, 'a')
    appendFileSync(fd, `${operationId}\n`)
    fsyncSync(fd)
    closeSync(fd)
    saves += 1
    if (saves === 1) return { saved: true }
    process.stdout.write(`saved ${operationId}\n`)
    return new Promise<never>(() => undefined)
  },
}
const writer = { provider, configuration, tools: [saveDraft] }

const delegate: ToolDefinition = {
  name: 'delegate',
  description: 'hands a task to the writer, which keeps one session',
  inputSchema: { type: 'object', properties: { task: { type: 'string' } }, required: ['task'] },
  async execute(args, context) {
    const { task } = args as { task: string }
    const { parent } = childRunFor(context, 'writer')
    const last = (await log.runs('writer-of-desk')).at(-1)
    const source = last && (await log.runSource('writer-of-desk', last.runId))?.boundary
    const id = randomUUID()
    const invocation = { sessionId: 'writer-of-desk', turnId: `t-${id}`, runId: `r-${id}`, invocationId: `i-${id}` }
    const work: RunInput['work'] = source ? { kind: 'continuation', source, content: task, onlyIfLatest: true } : { kind: 'message', content: task }
    const child = await engine.start({ ...writer, invocation, parent, work }, { signal: context.signal })
    const outcome = await child.wait()
    return { status: outcome.status, answer: answerOf(await log.invocationEvents(child.invocation.invocationId)) ?? null }
  },
}

const supervisor = { provider, configuration, tools: [delegate] }
const first = await engine.run({ ...supervisor, invocation: { sessionId: 'desk', turnId: 'turn-1', runId: 'run-1', invocationId: 'i1' }, work: { kind: 'message', content: 'write the release note' } })
if (first.status !== 'completed') throw new Error(`the first turn ended ${first.status}`)
const source = (await log.runSource('desk', 'run-1'))?.boundary
if (source === undefined) throw new Error('no first run')
await engine.start({ ...supervisor, invocation: { sessionId: 'desk', turnId: 'turn-2', runId: 'run-2', invocationId: 'i2' }, work: { kind: 'continuation', source, content: 'now the changelog' } })
process.stdout.write('started\n')
