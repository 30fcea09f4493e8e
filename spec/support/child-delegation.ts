/**
 * Child process for the delegation crash test: opens the log in `argv[2]`, runs a supervisor whose
 * model delegates one task to the `writer` agent (a child run started by the `delegate` tool with
 * `childRunFor`), and a writer whose model calls `save_draft`. The draft store is the file `argv[3]`:
 * `save_draft` appends its operation id to it (synced), prints `saved <operationId>` and never
 * returns; the parent kills the process with SIGKILL.
 */
import { appendFileSync, closeSync, fsyncSync, openSync } from 'node:fs'
import { Engine, EventLog, ModelExecutor, childRunFor, type ToolDefinition } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

const [dir, drafts] = process.argv.slice(2)
if (!dir || !drafts) throw new Error('usage: child-delegation.ts <log-dir> <drafts-file>')

// Holds the process until the parent's SIGKILL. Nothing else keeps the event loop alive once the
// tool (or approver) waits on a promise nothing settles: the scripted model server and its idle
// connections are unref'd. Without it the process ended on its own (exit 0, signal null) 41-90 ms
// after its `saved` line, a race with the kill the parent asserts (as faults-secrets-child had).
// Bounded: a child whose parent died without killing it ends by itself after ten minutes.
setTimeout(() => process.exit(1), 600_000)

const log = await EventLog.open(dir)
const server = await scriptedModelServer([
  answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: { specialist: 'writer', task: 'draft the release note' } }]),
  answer.toolCalls([{ id: 'call-save', name: 'save_draft', arguments: { title: 'Release note' } }]),
])
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
const provider = { kind: 'openai-chat' as const, baseUrl: server.baseUrl, model: 'scripted' }
const configuration = { cwd: '/workspace/project' }

const saveDraft: ToolDefinition = {
  name: 'save_draft',
  description: 'saves a draft',
  inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
  execute(_input, { operationId }) {
    const fd = openSync(drafts, 'a')
    appendFileSync(fd, `${operationId}\n`)
    fsyncSync(fd)
    closeSync(fd)
    process.stdout.write(`saved ${operationId}\n`)
    return new Promise<never>(() => undefined)
  },
}

const delegate: ToolDefinition = {
  name: 'delegate',
  description: 'hands a task to a specialist agent',
  inputSchema: { type: 'object', properties: { specialist: { type: 'string' }, task: { type: 'string' } }, required: ['specialist', 'task'] },
  async execute(input, context) {
    const { specialist, task } = input as { specialist: string; task: string }
    const child = await engine.start({ ...childRunFor(context, specialist), provider, configuration, tools: [saveDraft], work: { kind: 'message', content: task } }, { signal: context.signal })
    return { status: (await child.wait()).status }
  },
}

await engine.start({
  invocation: { sessionId: 'support', turnId: 'turn-1', runId: 'run-1', invocationId: 'sup-1' },
  provider,
  configuration,
  tools: [delegate],
  work: { kind: 'message', content: 'write the release note' },
})
process.stdout.write('started\n')
