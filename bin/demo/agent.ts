/**
 * The demo's small agent, shared by its processes: a ledger with a visible side effect, the run
 * input, the model (the built-in scripted server, or a real endpoint from OPENAI_BASE_URL), and
 * a printer that shows each fact as the machine transition it is.
 */
import { open, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Engine } from '../../actors/engine.js'
import type { RunInput } from '../../actors/run-input.js'
import type { ToolDefinition } from '../../actors/tool-catalog.js'
import type { HandoffIntent, Invocation, StoredEvent } from '../../facts/types.js'
import { type InvocationSnapshot, applyFact, foldFacts, initialInvocationSnapshot, stateOf } from '../../machines/invocation.js'
import { type EventLog, logInternals } from '../../store/event-log.js'
import { SettledToolNames, summarizeFact } from '../../store/fact-summary.js'
import { type ScriptedAnswer, type ScriptedModelServer, scriptedModelServer } from '../../testing/scripted-model-server.js'

export const SESSION = 'demo'
export const CRASH_SESSION = 'demo-crash'
export const CWD = '/srv/shop'

/** Paths of the demo's directory. */
export const paths = (dir: string) => ({ log: join(dir, 'log'), ledger: join(dir, 'ledger.jsonl') })

/** One line of the ledger: a tool really ran. */
export interface LedgerEntry {
  tool: string
  operationId: string
  input: unknown
}

/** Appends to the ledger and fsyncs it before returning: the visible side effect. */
async function record(ledger: string, entry: LedgerEntry): Promise<void> {
  const handle = await open(ledger, 'a')
  try {
    await handle.appendFile(`${JSON.stringify(entry)}\n`)
    await handle.sync()
  } finally {
    await handle.close()
  }
}

/** Every execution the ledger saw. */
export async function readLedger(ledger: string): Promise<LedgerEntry[]> {
  try {
    const text = await readFile(ledger, 'utf8')
    return text
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as LedgerEntry)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw error
  }
}

/** The demo's tools. `refund` can be told to hang after its effect, so the demo can crash mid-tool. */
export function tools(ledger: string, options: { refundHangs?: () => void } = {}): ToolDefinition[] {
  return [
    {
      name: 'append_ledger',
      description: 'Appends one entry to the shop ledger (a real side effect).',
      inputSchema: { type: 'object', properties: { entry: { type: 'string' } }, required: ['entry'] },
      async execute(input, { operationId }) {
        await record(ledger, { tool: 'append_ledger', operationId, input })
        return { recorded: true }
      },
    },
    {
      name: 'refund',
      description: 'Refunds an order through the payment provider.',
      inputSchema: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'] },
      async execute(input, { operationId, signal }) {
        await record(ledger, { tool: 'refund', operationId, input })
        if (options.refundHangs) {
          // The payment provider is slow to confirm: the process dies while the tool runs.
          options.refundHangs()
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        }
        return { refunded: true }
      },
    },
  ]
}

/** The model: the built-in scripted server by default, a real endpoint when OPENAI_BASE_URL is set. */
export interface DemoModel {
  provider: RunInput['provider']
  server: ScriptedModelServer | undefined
  /** Against a real endpoint, counts the model requests `log` records from now on (call it before any run starts): what `seen` waits for. */
  watch(log: EventLog): () => void
  /**
   * Waits until request `n` (from 0) of this process is in flight: the scripted server has it (and
   * keeps its answer back until `release(n)`); against a real endpoint, its `model.requested` is
   * durable (the answer is on its way), or a run of this process has ended, which the caller then sees.
   */
  seen(n: number): Promise<void>
  release(n: number): void
  close(): Promise<void>
}

/** `OPENAI_BASE_URL` as the demo prints it: a user name and password in it are masked. */
export function shownBaseUrl(baseUrl: string): string {
  try {
    const url = new URL(baseUrl)
    if (url.username === '' && url.password === '') return baseUrl
    if (url.username !== '') url.username = '***'
    if (url.password !== '') url.password = '***'
    return url.toString()
  } catch {
    return '(OPENAI_BASE_URL is not a URL)'
  }
}

export async function demoModel(script: ScriptedAnswer[]): Promise<DemoModel> {
  const baseUrl = process.env.OPENAI_BASE_URL
  if (baseUrl) {
    let requests = 0
    let ended = false
    const waiting: { n: number; resolve: () => void }[] = []
    const wake = () => {
      for (const waiter of waiting.splice(0)) {
        if (ended || requests > waiter.n) waiter.resolve()
        else waiting.push(waiter)
      }
    }
    return {
      provider: { kind: 'openai-chat', baseUrl, model: process.env.OPENAI_MODEL ?? 'gpt-4o-mini', ...(process.env.OPENAI_API_KEY ? { apiKey: process.env.OPENAI_API_KEY } : {}) },
      server: undefined,
      watch: (log) =>
        logInternals(log).subscribe((events: StoredEvent[]) => {
          for (const { event } of events) {
            if (event.fact.type === 'model.requested') requests += 1
            if (event.fact.type === 'invocation.ended') ended = true
          }
          wake()
        }),
      seen: (n) =>
        new Promise<void>((resolve) => {
          waiting.push({ n, resolve })
          wake()
        }),
      release: () => undefined,
      close: async () => undefined,
    }
  }
  const server = await scriptedModelServer(script)
  return {
    // The key is only there to show it never reaches the log.
    provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'demo-model', apiKey: 'sk-demo-never-persisted' },
    server,
    watch: () => () => undefined,
    seen: async (n) => {
      await server.seen(n)
    },
    release: (n) => server.release(n),
    close: () => server.close(),
  }
}

export function runInput(model: DemoModel, ledger: string, invocation: Invocation, work: RunInput['work'], extra: Partial<RunInput> = {}): RunInput {
  return {
    invocation,
    provider: model.provider,
    configuration: { cwd: CWD },
    mainOutputLimit: 400,
    maxSteps: 6,
    tools: tools(ledger),
    work,
    ...extra,
  }
}

export function intent(handoffId: string, rootRunId: string): HandoffIntent {
  return {
    handoffId,
    hostEpoch: `demo-${process.pid}`,
    rootRunId,
    successorRunId: `${rootRunId}-${handoffId}`,
    successorInvocationId: `inv-${rootRunId}-${handoffId}`,
    claimId: `claim-${handoffId}`,
  }
}

/**
 * Prints every fact that lands as the machine transition it causes. Invocations left open by an
 * earlier process are folded from the log first, so recovery's facts show their real transition.
 * Returns a function that stops printing.
 */
export async function printTransitions(log: EventLog, say: (line: string) => void): Promise<() => void> {
  const internals = logInternals(log)
  const states = new Map<string, InvocationSnapshot>()
  for (const record of internals.openInvocations()) {
    const { invocationId } = record.invocation
    const events = await internals.invocationEvents(invocationId)
    states.set(invocationId, foldFacts(events.map((stored) => stored.event.fact)))
  }
  // The tool of each call in flight, for its tool.settled line (the fact has only the operation id).
  const toolNames = new SettledToolNames()
  return internals.subscribe((events: StoredEvent[]) => {
    for (const { seq, event } of events) {
      const { fact } = event
      const toolName = toolNames.note(fact)
      const id = event.invocation.invocationId
      const before = states.get(id) ?? initialInvocationSnapshot()
      const after = applyFact(before, event.fact)
      states.set(id, after)
      const move = `${stateOf(before)} → ${stateOf(after)}`
      say(`  #${String(seq).padStart(3)} ${id.padEnd(22)} ${event.fact.type.padEnd(18)} ${move.padEnd(28)} ${summarizeFact(fact, toolName)}`)
    }
  })
}

/** Writes the structured result of a phase for the orchestrating process. */
export function result(value: Record<string, unknown>): void {
  process.stdout.write(`RESULT ${JSON.stringify(value)}\n`)
}

export type { Engine }
