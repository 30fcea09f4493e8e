/**
 * A terminal chat: type a message, the agent answers as it writes; Ctrl-C stops the answer being
 * written (Ctrl-C again, or Ctrl-D, quits). Every message after the first is a continuation of the
 * session's last run (`onlyIfLatest`), so the model gets the whole conversation, rebuilt from the
 * log, after a restart too. It has two tools: `lookup_order` reads only, `save_note` has an effect,
 * which it keys by its `operationId`. A chat that was killed (or stopped by SIGTERM) in the middle
 * of a turn finishes that turn when it starts again, rather than asking for the message again:
 * the last run ended `host_interrupted` or `cancelled{shutdown}` is continued without a message; one
 * killed while `save_note` ran (`outcome_unknown`) is continued once the notes file says whether
 * that very call saved its note. The model is the scripted local server: try "where is order A-1?",
 * "note: call Bob", "what are my notes?", "tell me a story".
 *
 *   npx tsx examples/chat-repl.ts [log-dir]     (default ./.factstate/chat-repl)
 *
 * For a test that stops it at a given point for certain, CHAT_REPL_HOLD names a file: while it
 * exists, a story stops after its first words (the connection stays open) and `save_note`, its note
 * saved, does not return; without it, the story takes about two seconds and `save_note` 300 ms.
 */
import { randomUUID } from 'node:crypto'
import { appendFileSync, existsSync, readFileSync } from 'node:fs'
import { type Interface, createInterface } from 'node:readline'
import { Engine, EventLog, type RunInput, type RunSettings, type ToolDefinition, type UncertainOperation, isFactstateError, recoverInvocations } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const dir = process.argv[2] ?? './.factstate/chat-repl'
const sessionId = 'chat'
const notesFile = `${dir.replace(/[\\/]+$/, '')}-notes.jsonl` // the notes "service", beside the log: one line per saved note

const print = (line: string) => process.stdout.write(`${line}\n`)
type Note = { operationId: string; text: string }
const holdFile = process.env.CHAT_REPL_HOLD
const holding = () => holdFile !== undefined && existsSync(holdFile)
const notes = (): Note[] => (existsSync(notesFile) ? readFileSync(notesFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Note) : [])

const orders: Record<string, string> = { 'A-1': 'shipped on Monday', 'B-2': 'waiting for stock' }
const tools: ToolDefinition[] = [
  {
    name: 'lookup_order',
    description: "Tells an order's status",
    inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
    readOnly: true, // no effect: never uncertain, nothing to acknowledge after a crash
    async execute(input) {
      const { order } = input as { order: string }
      print(`  · lookup_order ${order}`)
      return { order, status: orders[order] ?? 'unknown' }
    },
  },
  {
    name: 'save_note',
    description: 'Saves a note for the user',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    async execute(input, { operationId }) {
      // Keyed by the operationId, as a real service's idempotency key: one save per call, however
      // often it is asked, and after a crash the key tells whether this very call took effect.
      const { text } = input as { text: string }
      if (!notes().some((note) => note.operationId === operationId)) appendFileSync(notesFile, `${JSON.stringify({ operationId, text })}\n`)
      print(`  · save_note "${text}"`)
      // The service's answer takes a moment: a kill now leaves the call uncertain.
      do await new Promise((resolve) => setTimeout(resolve, holding() ? 20 : 300))
      while (holding())
      return { saved: true }
    },
  },
]

// A stand-in model that reads the conversation it is sent. With a real provider, drop it and pass
// its baseUrl, model and apiKey below.
type Sent = { role: string; content: string | null }
const model = await scriptedModelServer((request) => {
  const messages = (request.body as { messages: Sent[] }).messages
  const last = messages.at(-1) ?? { role: 'user', content: '' }
  const text = last.content ?? ''
  if (last.role === 'tool') {
    const result = JSON.parse(text) as { status?: string; order?: string }
    return answer.text(result.status === undefined ? 'Saved your note.' : `Order ${result.order} is ${result.status}.`, { pieces: 2 })
  }
  const order = /order ([A-Z]-\d+)/i.exec(text)?.[1]
  if (order) return answer.toolCalls([{ name: 'lookup_order', arguments: { order: order.toUpperCase() } }])
  const note = /^note: (.+)/i.exec(text)?.[1]
  if (note) return answer.toolCalls([{ name: 'save_note', arguments: { text: note } }])
  if (/: the note was saved/.test(text)) return answer.text('Your note is saved.') // told after a crash, as the chat checked it
  if (/: the note was not saved/.test(text)) return answer.text('Your note was not saved: please say it again.')
  if (/my notes/i.test(text)) return answer.text(`Your notes: ${notes().map((n) => n.text).join('; ') || 'none'}.`)
  if (/story/i.test(text) && holding()) return answer.stall({ text: 'Once upon a time' })
  if (/story/i.test(text)) return answer.text('Once upon a time a log kept every fact, and nothing was lost. The end.', { pieces: 40, pieceDelayMs: 50 })
  return answer.text(`You said: "${text}".`)
})

let log: EventLog
try {
  log = await EventLog.open(dir) // one writer: a second chat on the same log is LOG_WRITER_BUSY
} catch (error) {
  print(isFactstateError(error, 'LOG_WRITER_BUSY') ? `another chat has ${dir} open` : String(error))
  await model.close()
  process.exit(1)
}
const engine = new Engine({ log })
const settings: RunSettings = {
  provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'stand-in', apiKey: process.env.OPENAI_API_KEY },
  providerOptions: { stream: true }, // the answer comes in pieces, shown as they come
  configuration: { cwd: process.cwd() },
  instructions: 'You are a helpful assistant. Use lookup_order for orders and save_note for notes.',
  tools,
}

/** The turn being answered, to stop it: Ctrl-C aborts it with 'user-stop' (SIGTERM closes the engine instead). */
let current: AbortController | undefined
let quitting = false

/** Runs one turn (work), showing the answer as it is written; what it printed last says how it ended. */
async function turn(work: RunInput['work']): Promise<void> {
  const id = randomUUID()
  current = new AbortController()
  let writing = false
  try {
    const running = await engine.start(
      { ...settings, invocation: { sessionId, turnId: `turn-${id}`, runId: `run-${id}`, invocationId: `inv-${id}` }, work },
      {
        signal: current.signal,
        onModelText: ({ text }) => {
          if (!writing) process.stdout.write('assistant: ')
          writing = true
          process.stdout.write(text)
        },
      },
    )
    const outcome = await running.wait()
    if (writing) process.stdout.write('\n')
    if (outcome.status === 'cancelled') print(`(stopped: ${outcome.source}; what was shown of the answer is not kept)`)
    else if (outcome.status !== 'completed') print(`(the turn ended ${outcome.status}${'class' in outcome ? ` ${outcome.class}` : ''})`)
  } catch (error) {
    if (writing) process.stdout.write('\n')
    print(`(refused: ${isFactstateError(error) ? error.code : ''} ${error instanceof Error ? error.message : String(error)})`)
  } finally {
    current = undefined
  }
}

/** Where the session's last run ends, and how it ended (undefined: a new session). */
async function lastRun() {
  const last = await log.latestRun(sessionId)
  const source = last && (await log.runSource(sessionId, last.runId))?.boundary
  return last && source ? { run: last, source } : undefined
}

let lines: Interface | undefined // the terminal, once the chat takes messages
const interrupt = () => {
  if (current) current.abort('user-stop') // stop this answer; the chat goes on
  else {
    quitting = true // at the prompt: quit
    lines?.close()
  }
}
process.on('SIGINT', interrupt) // Ctrl-C sent as a signal (stdin not a terminal)
process.once('SIGTERM', () => {
  quitting = true
  // From here no turn starts (ENGINE_CLOSED), and the one being answered ends cancelled{shutdown}: the next launch finishes it.
  void engine.close({ cancel: 'shutdown' })
  lines?.close()
})

// On launch: close what a crash left open, then finish a turn that was cut short.
await recoverInvocations(log)
const left = await lastRun()
const ended = left?.run.outcome
if (ended && ((ended.status === 'failed' && ended.class === 'host_interrupted') || (ended.status === 'cancelled' && ended.source === 'shutdown'))) {
  print(`(finishing the turn the last run left: ${ended.status} ${ended.status === 'failed' ? ended.class : ended.source})`)
  await turn({ kind: 'continuation', source: left!.source, onlyIfLatest: true })
} else if (ended?.status === 'failed' && ended.class === 'outcome_unknown') {
  // save_note was running: the notes file says, by its operationId, whether that call saved its note.
  const unknown: UncertainOperation[] = (await log.pendingSessions({ sessionId }))[0]?.unknown ?? []
  const found = unknown.map((op) => `${op.name} (operation ${op.operationId}): ${notes().some((n) => n.operationId === op.operationId) ? 'the note was saved; do not save it again' : 'the note was not saved'}`)
  print('(finishing the turn the last run left: failed outcome_unknown, checked)')
  await turn({ kind: 'continuation', source: left!.source, onlyIfLatest: true, allowPriorUnknown: true, ...(found.length > 0 ? { content: found.join('\n') } : {}) })
}

lines = createInterface({ input: process.stdin, terminal: process.stdin.isTTY === true })
lines.on('SIGINT', interrupt) // Ctrl-C on a terminal
if (process.stdin.isTTY) print('Type a message; Ctrl-C stops an answer, Ctrl-D quits.')
if (!quitting) for await (const line of lines) {
  if (quitting) break
  const content = line.trim()
  if (content === '') continue
  const last = await lastRun()
  // A continuation of the last run: the model gets the conversation so far. onlyIfLatest: refused
  // (RUN_SOURCE_STALE) rather than branching past a run another process started meanwhile.
  await turn(last ? { kind: 'continuation', source: last.source, content, onlyIfLatest: true } : { kind: 'message', content })
}

await engine.close() // resolves at once: each turn was awaited (after SIGTERM, the one cut short has ended)
await log.close()
await model.close()
process.exit(0) // after SIGTERM, stdin (still open) would keep the process
