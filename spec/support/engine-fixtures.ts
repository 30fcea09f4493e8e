/**
 * Shared helpers for the engine suites (`spec/engine-*.test.ts`): a harness that opens a real
 * LevelDB log in a temporary directory and an engine against a scripted OpenAI-compatible server
 * on 127.0.0.1, run inputs and counting tools, and the checks every engine test ends with: the
 * log verifies, every invocation's facts fold through the machine, and each live invocation's
 * state equals the state folded from its facts in the log.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import * as assert from 'uvu/assert'
import {
  Engine,
  type EngineOptions,
  EventLog,
  type Fact,
  type FactType,
  type HandoffIntent,
  type HandoffPause,
  type InvocationOutcome,
  ModelExecutor,
  type ModelExecutorOptions,
  type RunBoundary,
  type RunInput,
  type RunningInvocation,
  type StartOptions,
  type StoredEvent,
  type ToolContext,
  type ToolDefinition,
  foldFacts,
  recoverInvocations,
  stateOf,
} from '../../index.js'
import { logInternals } from '../../store/event-log.js'
import { type Script, type ScriptedModelServer, type ScriptedModelServerOptions, scriptedModelServer } from '../../testing/scripted-model-server.js'
import { rejectsWithCode } from './codes.js'
import { withTempDir, withTimeout } from './temp.js'

/** The cwd every engine test runs in (never touched on disk). */
export const CWD = '/workspace/project'

/** Everything larger than any engine test log. */
const ALL = { events: 1_000_000, bytes: 1 << 30 }

/** A tool that records every execution; `behaviour` decides what an execution does (default: echo the input). */
export interface CountingTool extends ToolDefinition {
  /** Every execution, in order. */
  readonly calls: { input: unknown; operationId: string; signal: AbortSignal }[]
}

/** A tool named `name` that counts its executions; by default it answers with its input. */
export function countingTool(name = 'echo', behaviour?: (input: unknown, context: ToolContext) => Promise<unknown>): CountingTool {
  const calls: CountingTool['calls'] = []
  return {
    name,
    description: `the ${name} tool`,
    inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
    calls,
    async execute(input, context) {
      calls.push({ input, operationId: context.operationId, signal: context.signal })
      return behaviour ? behaviour(input, context) : input
    },
  }
}

/** A chat message as a test reads it from a recorded request body. */
export type SentMessage = { role: string; content: string | null; tool_call_id?: string; tool_calls?: { id: string }[] }

/** The messages of a recorded request `body`. */
export const messagesOf = (body: unknown): SentMessage[] => (body as { messages: SentMessage[] }).messages

/** A run input whose ids derive from `name`: session `session-<name>` unless `session` is given. */
export function runInput(baseUrl: string, name: string, options: { session?: string; tools?: ToolDefinition[]; content?: string } = {}): RunInput {
  return {
    invocation: {
      sessionId: options.session ?? `session-${name}`,
      turnId: `turn-${name}`,
      runId: `run-${name}`,
      invocationId: `invocation-${name}`,
    },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted' },
    configuration: { cwd: CWD },
    maxSteps: 4,
    tools: options.tools ?? [countingTool()],
    work: { kind: 'message', content: options.content ?? `question ${name}` },
  }
}

/** A handoff intent whose successor ids derive from `name`. */
export function intentOf(name: string, rootRunId: string): HandoffIntent {
  return {
    handoffId: `handoff-${name}`,
    hostEpoch: 'epoch-1',
    rootRunId,
    successorRunId: `run-${name}`,
    successorInvocationId: `invocation-${name}`,
    claimId: `claim-${name}`,
  }
}

/** The log position that refusals must leave untouched. */
export interface LogMark {
  highWater: number
  digest: string
}

/** Every stored event of the log, in seq order. */
export async function storedEvents(log: EventLog): Promise<StoredEvent[]> {
  return (await log.prefix(ALL.events, ALL.bytes)).events
}

/** The facts of one invocation, in seq order. */
export async function factsOf(log: EventLog, invocationId: string): Promise<Fact[]> {
  return (await storedEvents(log)).filter((stored) => stored.event.invocation.invocationId === invocationId).map((stored) => stored.event.fact)
}

/** The fact types of one invocation, in seq order. */
export async function typesOf(log: EventLog, invocationId: string): Promise<FactType[]> {
  return (await factsOf(log, invocationId)).map((fact) => fact.type)
}

/** The facts of one invocation of one type. */
export function only<T extends FactType>(facts: Fact[], type: T): Extract<Fact, { type: T }>[] {
  return facts.filter((fact): fact is Extract<Fact, { type: T }> => fact.type === type)
}

/** The last fact of an invocation (its `invocation.ended` once it has ended). */
export async function lastFactOf(log: EventLog, invocationId: string): Promise<Fact | undefined> {
  return (await factsOf(log, invocationId)).at(-1)
}

/** Where the log stands. */
export async function markOf(log: EventLog): Promise<LogMark> {
  const prefix = await log.prefix(ALL.events, ALL.bytes)
  return { highWater: prefix.highWater, digest: prefix.digest }
}

/** Asserts `action` is refused with `code` and that the log did not move (high-water and digest). */
export async function refusedWithoutWriting(
  log: EventLog,
  action: () => Promise<unknown>,
  code: string | readonly string[],
  what: string,
): Promise<Error & { code: string; details?: Record<string, unknown> }> {
  const before = await markOf(log)
  const error = await rejectsWithCode(action, code, what)
  assert.equal(await markOf(log), before, `${what}: nothing is written`)
  return error
}

/** Asserts that the state folded from `running`'s facts in the log equals the state the engine reports. */
export async function assertFoldMatches(log: EventLog, running: RunningInvocation, what = running.invocation.invocationId): Promise<void> {
  const folded = foldFacts(await factsOf(log, running.invocation.invocationId))
  const live = running.snapshot()
  assert.is(stateOf(folded), running.state(), `${what}: the state folded from the log is the live one`)
  assert.equal(folded.value, live.value, `${what}: same state value`)
  assert.equal(folded.context, live.context, `${what}: same machine context`)
  assert.is(folded.status, live.status, `${what}: same machine status`)
}

/**
 * The end-of-test checks: `verify()` passes and agrees with the prefix, every invocation in the
 * log folds through the machine, ended ones are final (with `allEnded`, every one has ended), and
 * every live invocation's state equals the folded one.
 */
export async function assertConsistent(log: EventLog, runs: readonly RunningInvocation[], options: { allEnded?: boolean } = {}): Promise<void> {
  const prefix = await log.prefix(ALL.events, ALL.bytes)
  const verified = await log.verify()
  assert.equal(verified, { events: prefix.highWater, digest: prefix.digest }, 'verify() agrees with the prefix')
  const byInvocation = new Map<string, Fact[]>()
  for (const { event } of prefix.events) {
    const list = byInvocation.get(event.invocation.invocationId) ?? []
    list.push(event.fact)
    byInvocation.set(event.invocation.invocationId, list)
  }
  for (const [invocationId, facts] of byInvocation) {
    const folded = foldFacts(facts)
    const ended = facts.at(-1)?.type === 'invocation.ended'
    assert.is(folded.status === 'done', ended, `${invocationId}: final exactly when its last fact is invocation.ended`)
    if (options.allEnded) assert.ok(ended, `${invocationId}: no invocation is left open`)
  }
  for (const running of runs) await assertFoldMatches(log, running)
}

/** Every file under `dir` (recursively) whose bytes contain one of `needles`. */
export async function filesHolding(dir: string, needles: readonly string[]): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) found.push(...(await filesHolding(path, needles)))
    if (!entry.isFile()) continue
    const bytes = await readFile(path)
    for (const needle of needles) if (bytes.indexOf(Buffer.from(needle, 'utf8')) !== -1) found.push(`${path} holds ${needle.slice(0, 6)}…`)
  }
  return found
}

/** A promise that is still pending after `ms` milliseconds. */
export async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const marker = Symbol('pending')
  const result = await Promise.race([
    promise.then(
      () => 'settled',
      () => 'settled',
    ),
    new Promise((resolve) => setTimeout(() => resolve(marker), ms)),
  ])
  return result === marker
}

/** A log, an engine and a scripted model server, alive for one test. */
export interface EngineHarness {
  /** The temporary directory of the test (the log lives in `logPath`). */
  dir: string
  logPath: string
  /** The log (a body that closes it may reopen it here; it is closed at the end either way). */
  log: EventLog
  engine: Engine
  server: ScriptedModelServer
  /** Every invocation started through {@link EngineHarness.start}; checked against the log at the end. */
  runs: RunningInvocation[]
  /** `engine.start`, remembering the invocation for the end-of-test checks. */
  start(input: RunInput, options?: StartOptions): Promise<RunningInvocation>
  /** `engine.run`, remembering the invocation for the end-of-test checks. */
  run(input: RunInput, options?: StartOptions): Promise<InvocationOutcome>
  /** A run input against this harness's server. */
  input(name: string, options?: Parameters<typeof runInput>[2]): RunInput
}

/** Options of {@link engineTest}. */
export interface EngineTestOptions {
  /** The bound of the whole test (default 10 s). */
  ms?: number
  /** Options of the engine's {@link ModelExecutor} (default: 5 s timeout, 1–20 ms backoff). */
  model?: ModelExecutorOptions
  /** Engine options besides the log and the model executor. */
  engine?: Omit<EngineOptions, 'log' | 'model'>
  /** Serve every answer as SSE. */
  stream?: boolean
  /** The server's `x-request-id` headers (see `scriptedModelServer`): none by default. */
  requestIds?: ScriptedModelServerOptions['requestIds']
  /** Runs before the log is opened (for example a child process that writes the log and dies). */
  before?: (logPath: string) => Promise<void>
}

/**
 * A uvu test body: a fresh log and server, `body`, then the engine drained and the end-of-test
 * checks ({@link assertConsistent}); the log and the server are closed whatever happens.
 */
export function engineTest(script: Script, options: EngineTestOptions, body: (harness: EngineHarness) => Promise<void>): () => Promise<void> {
  return () =>
    withTimeout(
      withTempDir(async (dir) => {
        const logPath = join(dir, 'events')
        const server = await scriptedModelServer(script, {
          ...(options.stream === undefined ? {} : { stream: options.stream }),
          ...(options.requestIds === undefined ? {} : { requestIds: options.requestIds }),
        })
        let log: EventLog | undefined
        let current: EngineHarness | undefined
        try {
          await options.before?.(logPath)
          log = await EventLog.open(logPath)
          const opened = log
          const engine = new Engine({
            log: opened,
            model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20, ...options.model }),
            ...options.engine,
          })
          const runs: RunningInvocation[] = []
          const harness: EngineHarness = {
            dir,
            logPath,
            log: opened,
            engine,
            server,
            runs,
            async start(input, startOptions) {
              const running = await engine.start(input, startOptions)
              runs.push(running)
              return running
            },
            async run(input, startOptions) {
              return (await harness.start(input, startOptions)).wait()
            },
            input: (name, inputOptions) => runInput(server.baseUrl, name, inputOptions),
          }
          current = harness
          // Bounded inside the try: a body that never finishes still gets its server and log
          // closed below, so a failing test cannot keep the process (and the whole suite) alive.
          await withTimeout(
            async () => {
              await body(harness)
              await engine.drain()
              await assertConsistent(harness.log, runs, { allEnded: true })
            },
            options.ms ?? 10_000,
          )
        } finally {
          await server.close()
          await log?.close()
          // A body may close the log and reopen it as `harness.log`.
          await current?.log.close()
        }
      }),
      (options.ms ?? 10_000) + 10_000,
    )
}

/** A run sealed by a handoff at its first safe point (before any model request). */
export interface SealedRun {
  running: RunningInvocation
  pause: HandoffPause
  /** The paused run's boundary, as `runSource` reports it. */
  source: RunBoundary
  /** The input the paused run was started with. */
  input: RunInput
}

/** Starts `input`, reserves a hold before the first request, commits it, and returns the sealed pause. */
export async function sealAtFirstSafePoint(harness: EngineHarness, input: RunInput, successor: string): Promise<SealedRun> {
  const running = await harness.start(input)
  const reservation = running.handoff().reserve(intentOf(successor, input.invocation.runId))
  const held = await reservation.ready()
  const pause = await held.commit()
  assert.equal(await running.wait(), { status: 'handoff_paused', pause })
  const source = (await harness.log.runSource(input.invocation.sessionId, input.invocation.runId))?.boundary
  assert.ok(source, 'the sealed run has a boundary')
  return { running, pause, source, input }
}

/** The successor input that matches a sealed run exactly. */
export function successorInput(sealed: SealedRun): RunInput {
  const { input, pause, source } = sealed
  return {
    ...structuredClone({ ...input, tools: [] }),
    tools: input.tools,
    invocation: {
      sessionId: source.invocation.sessionId,
      turnId: source.invocation.turnId,
      runId: pause.intent.successorRunId,
      invocationId: pause.intent.successorInvocationId,
    },
    // A successor's budget is the pause's; maxSteps only has to be valid.
    maxSteps: pause.remainingSteps > 0 ? pause.remainingSteps : 1,
    work: { kind: 'handoff', source: structuredClone(source), pause: structuredClone(pause) },
  }
}

/**
 * Runs `body` while the engine's first read of a session's record is followed by `recoverInvocations`
 * (which must close one invocation): the engine sees the run still open and leaves the refusal to the
 * admission, and recovery closes it before the admission. Resolves with whether recovery ran.
 */
export async function recoveringAfterSessionRead(log: EventLog, body: () => Promise<void>): Promise<boolean> {
  const internals = logInternals(log)
  const sessionRecord = internals.sessionRecord
  let recovered = false
  internals.sessionRecord = async (sessionId) => {
    const record = await sessionRecord(sessionId)
    if (!recovered) {
      recovered = true
      assert.is(await recoverInvocations(log), 1)
    }
    return record
  }
  try {
    await body()
  } finally {
    internals.sessionRecord = sessionRecord
  }
  return recovered
}
