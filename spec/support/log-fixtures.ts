/**
 * Builders and helpers for the fact-log suites: valid invocations and facts, an error catcher
 * that returns the refusal for inspection, byte-level helpers for the corruption tests, child
 * processes (`spec/support/child-*.ts`) with line-based stdout, and `boundedTest`, a bounded
 * test body whose failures uvu can always report.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readdir, readFile, unlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { ClassicLevel } from 'classic-level'
import * as assert from 'uvu/assert'
import { FactstateError } from '../../errors.js'
import { assertDetailsFit } from './error-details.js'
import type { Fact, Invocation, InvocationOutcome, ModelUsage, RuntimeEvent, ToolCall } from '../../facts/types.js'
import { EventLog } from '../../store/event-log.js'
import { ChildLines } from '../../testing/child-lines.js'
import { bounded } from './temp.js'
import { childArguments } from './compiled-children.js'

export const ZERO_DIGEST = `sha256:${'0'.repeat(64)}`
export const CATALOG_DIGEST = `sha256:${'a'.repeat(64)}`

/** An invocation whose ids are all derived from `name` (session defaults to `session-<name>`). */
export function invocationOf(name: string, session = `session-${name}`): Invocation {
  return { sessionId: session, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `inv-${name}` }
}

export const facts = {
  opened(content = 'hello'): Fact {
    return {
      type: 'invocation.opened',
      input: { kind: 'message', content },
      configuration: { cwd: '/work' },
      execution: { model: 'test-model', providerOptions: {}, cwd: '/work', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] } },
    }
  },
  requested(stepId: string): Fact {
    return { type: 'model.requested', stepId, model: 'test-model', requestDigest: ZERO_DIGEST }
  },
  completed(stepId: string, toolCalls: ToolCall[] = [], text?: string, usage?: ModelUsage): Fact {
    return {
      type: 'model.completed',
      stepId,
      output: { toolCalls, finishReason: toolCalls.length ? 'tool_calls' : 'stop', ...(text === undefined ? {} : { text }), ...(usage === undefined ? {} : { usage }) },
    }
  },
  interrupted(stepId: string, status: 'cancelled' | 'timed_out' | 'failed' | 'retryable_failure' = 'failed'): Fact {
    return { type: 'model.interrupted', stepId, status }
  },
  dispatched(operationId: string, input: unknown = { value: 42 }): Fact {
    return { type: 'tool.dispatched', operationId, callId: `call-${operationId}`, name: 'echo', input }
  },
  settled(operationId: string, output: unknown = 'ok'): Fact {
    return { type: 'tool.settled', operationId, outcome: { status: 'succeeded', output } }
  },
  rejected(operationId: string): Fact {
    return { type: 'tool.rejected', operationId, callId: `call-${operationId}`, name: 'missing', input: {}, reason: 'unknown_tool' }
  },
  /** A call that settled failed. */
  failed(operationId: string, message = 'the tool threw'): Fact {
    return { type: 'tool.settled', operationId, outcome: { status: 'failed', message } }
  },
  /** A call the approver denied. */
  denied(operationId: string, name: string, by: string, reason: string): Fact {
    return { type: 'tool.rejected', operationId, callId: `call-${operationId}`, name, input: {}, reason: 'denied', approval: { by, reason } }
  },
  holdEntered(handoffId: string): Fact {
    return { type: 'hold.entered', handoffId }
  },
  holdReleased(handoffId: string): Fact {
    return { type: 'hold.released', handoffId }
  },
  ended(outcome: InvocationOutcome = { status: 'completed' }): Fact {
    return { type: 'invocation.ended', outcome }
  },
}

/** Makes events for one invocation with ids `<invocationId>/<n>`, n counting from 1. */
export class EventMaker {
  #n = 0
  constructor(readonly invocation: Invocation) {}
  next(fact: Fact): RuntimeEvent {
    this.#n += 1
    return { id: `${this.invocation.invocationId}/${this.#n}`, recordedAt: 1_700_000_000_000 + this.#n, invocation: this.invocation, fact }
  }
  /** The events of `list`, in order. */
  many(list: Fact[]): RuntimeEvent[] {
    return list.map((fact) => this.next(fact))
  }
}

/**
 * A complete, well-formed invocation: opened, one step with a tool call, a final answer, completed;
 * `usage` gives the token counts each of its two answers reported (none by default).
 */
export function completeInvocation(name: string, session?: string, usage: [ModelUsage?, ModelUsage?] = []): RuntimeEvent[] {
  const make = new EventMaker(invocationOf(name, session))
  return make.many([
    facts.opened(),
    facts.requested('s1'),
    facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{"value":42}' }], undefined, usage[0]),
    facts.dispatched('op1'),
    facts.settled('op1'),
    facts.requested('s2'),
    facts.completed('s2', [], 'done', usage[1]),
    facts.ended(),
  ])
}

/**
 * A closed log at `path` whose last batch is lost: `kept` is appended (a batch, when not empty), then
 * `lost`, and a byte of `lost` is changed in LevelDB's write-ahead log, so LevelDB drops that batch
 * as it opens the log, and the open finds fewer facts than the head anchor counts: the log is
 * refused (`LOG_CORRUPT`), and so is a snapshot of it. `crashed`: the head anchor is removed too, as
 * a crash within a second of the last commit leaves it; the log is still refused (and marked
 * damaged), and a snapshot reads `kept`, damaged (`damage()`: its `verify()` refuses it).
 */
export async function logLosingItsLastBatch(path: string, kept: RuntimeEvent[], lost: RuntimeEvent[], options: { crashed?: boolean } = {}): Promise<void> {
  // Opened again for `lost`: LevelDB writes what its write-ahead log holds to a table as it opens a
  // log, so `kept` is not in the write-ahead log `lost` is (LevelDB drops a damaged block whole).
  if (kept.length > 0) await withLog(path, (log) => log.appendAll(kept))
  await withLog(path, (log) => log.appendAll(lost))
  const wal = (await readdir(path)).find((name) => name.endsWith('.log'))
  if (wal === undefined) throw new Error(`no write-ahead log in ${path}`)
  const bytes = await readFile(join(path, wal))
  // The id of the lost batch's first event: in no other batch.
  const at = bytes.indexOf(String(lost[0]?.id))
  if (at < 0) throw new Error(`the lost batch is not in the write-ahead log ${wal}`)
  bytes[at] = (bytes[at] as number) ^ 0x01
  await writeFile(join(path, wal), bytes)
  if (options.crashed) await unlink(join(path, 'FACTSTATE-HEAD'))
}

/** Runs `body` with the log in `path` open, closing it whatever happens. */
export async function withLog<T>(path: string, body: (log: EventLog) => Promise<T>): Promise<T> {
  const log = await EventLog.open(path)
  try {
    return await body(log)
  } finally {
    await log.close()
  }
}

/** Runs `edit` on the LevelDB directory of a closed log, past the log (to damage or rewrite its records), closing it whatever happens. */
export async function withDb<T>(path: string, edit: (db: ClassicLevel<string, Uint8Array>) => Promise<T>): Promise<T> {
  const db = new ClassicLevel<string, Uint8Array>(path, { keyEncoding: 'utf8', valueEncoding: 'view' })
  await db.open()
  try {
    return await edit(db)
  } finally {
    await db.close()
  }
}

/** Awaits `promise` and returns its FactstateError, whose details must fit its code; fails if it resolves or rejects otherwise. */
export async function refusal(promise: Promise<unknown> | (() => unknown)): Promise<FactstateError> {
  try {
    await (typeof promise === 'function' ? promise() : promise)
  } catch (error) {
    if (error instanceof FactstateError) {
      assertDetailsFit(error, 'a refusal')
      return error
    }
    throw new Error(`expected a FactstateError, got ${String(error)}`, { cause: error })
  }
  throw new Error('expected a refusal, but the call succeeded')
}

/** Every regular file of `dir` whose bytes contain `needle`, with the offsets found. */
export async function filesContaining(dir: string, needle: string): Promise<{ file: string; offsets: number[] }[]> {
  const target = Buffer.from(needle, 'utf8')
  const found: { file: string; offsets: number[] }[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isFile()) continue
    const file = join(dir, entry.name)
    const bytes = await readFile(file)
    const offsets: number[] = []
    for (let at = bytes.indexOf(target); at !== -1; at = bytes.indexOf(target, at + 1)) offsets.push(at)
    if (offsets.length) found.push({ file, offsets })
  }
  return found
}

/** Rewrites one byte of `file` at `offset` (XOR with `mask`, default flips a letter's case). */
export async function flipByte(file: string, offset: number, mask = 0x20): Promise<void> {
  const bytes = await readFile(file)
  bytes[offset] = (bytes[offset] as number) ^ mask
  await writeFile(file, bytes)
}

// ---------------------------------------------------------------------------------------------
// Child processes

/** The repository root (children run with it as their working directory). */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

export interface Child {
  readonly process: ChildProcess
  /** Every stdout line so far. */
  readonly lines: string[]
  /** Everything written to stderr so far (for failure messages). */
  stderr(): string
  /** Resolves with the first line (from the start) that satisfies `predicate`. */
  waitForLine(predicate: (line: string) => boolean, ms?: number): Promise<string>
  /** Sends one line on stdin. */
  send(line: string): void
  /** Resolves once the process exited and its stdout is fully read. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** Kills the child (if still running) and waits for it. */
  stop(signal?: NodeJS.Signals): Promise<void>
}

/** Starts `spec/support/<script> ...args` (a child-*.ts compiled, see compiled-children.ts) with piped stdio. */
export function startChild(script: string, args: string[]): Child {
  const child = spawn(process.execPath, [...childArguments(script), ...args], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const lines = new ChildLines()
  let stderr = ''
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => {
    stderr += chunk
  })
  const reader = createInterface({ input: child.stdout })
  reader.on('line', (line) => lines.push(line))
  const stdoutClosed = new Promise<void>((resolve) =>
    reader.on('close', () => {
      lines.end()
      resolve()
    }),
  )
  const exitedOnly = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  )
  const exited = Promise.all([exitedOnly, stdoutClosed]).then(([status]) => status)
  child.stdin.on('error', () => undefined)
  return {
    process: child,
    lines: lines.lines,
    stderr: () => stderr,
    waitForLine(predicate, ms = 40_000) {
      return lines.waitFor(predicate, ms, {
        ended: () => new Error(`child ended without the expected line; stderr: ${stderr}`),
        timedOut: (limit) => new Error(`no expected line within ${limit} ms; stderr: ${stderr}`),
      })
    },
    send(line) {
      child.stdin.write(`${line}\n`)
    },
    exited,
    async stop(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      await exited
    },
  }
}

/**
 * Starts `spec/support/<script>` with `args`, waits for its first stdout line starting with `marker`,
 * kills it there with SIGKILL (asserting it was killed, not finished) and returns the rest of that line.
 */
export async function killChildAt(script: string, args: string[], marker: string): Promise<string> {
  const child = startChild(script, args)
  let rest: string
  try {
    rest = (await child.waitForLine((l) => l.startsWith(marker), 20_000)).slice(marker.length)
  } finally {
    await child.stop('SIGKILL')
  }
  const status = await child.exited
  assert.is(status.signal, 'SIGKILL', `the child was killed, not finished (${child.stderr()})`)
  return rest
}

// ---------------------------------------------------------------------------------------------
// uvu reporting

/**
 * uvu's reporter reads `err.details` as a string and `err.name` as a string. A FactstateError
 * carries object `details`, so a test that fails by throwing one makes the reporter throw, and
 * uvu then drops the rest of the suite and still exits 0. Such errors are re-thrown as plain
 * Errors that keep the code, message, details and stack.
 */
export function reportable(error: unknown): unknown {
  const ownDetails = (error as { details?: unknown } | null | undefined)?.details
  if (error instanceof Error && (ownDetails === undefined || typeof ownDetails === 'string')) return error
  const source = error as { name?: unknown; message?: unknown; stack?: unknown; details?: unknown } | null | undefined
  const details = source?.details === undefined ? '' : ` details=${JSON.stringify(source.details)}`
  const plain = new Error(`${String(source?.name ?? 'thrown')}: ${String(source?.message ?? source)}${details}`, { cause: error })
  if (typeof source?.stack === 'string') plain.stack = `${plain.message}\n${source.stack.split('\n').slice(1).join('\n')}`
  return plain
}

/** A uvu test body bounded by `ms` in a fresh temporary directory, whose failures uvu can report. */
export const boundedTest =
  (ms: number, body: (dir: string) => Promise<void>) =>
  async (): Promise<void> => {
    try {
      await bounded(ms, body)()
    } catch (error) {
      throw reportable(error)
    }
  }
