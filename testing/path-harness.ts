/**
 * Drives one process's share of a path against a real engine: a real log, a scripted model
 * server on 127.0.0.1 whose every answer waits for the path, tools that wait for the path before
 * they return or throw, and the invariants checked at every step where the engine stands still.
 * `runPath` uses it in the test process; `runPathChild` uses it in the child that is killed for a
 * crash step.
 */
import { isDeepStrictEqual } from 'node:util'
import type { ApprovalDecision, Approver } from '../actors/approval.js'
import type { Engine, EngineOptions, RunningInvocation, StartOptions } from '../actors/engine.js'
import { ABANDONED, notWaitedFor, timedCall } from '../actors/invocation-actor.js'
import { type HeldInvocation, type HandoffReservation, successorOf } from '../actors/handoff.js'
import type { ChatMessage } from '../actors/model-client.js'
import { ModelExecutor } from '../actors/model-executor.js'
import { OpenAIChatClient } from '../actors/openai-chat-client.js'
import type { RunInput, RunWork } from '../actors/run-input.js'
import type { ToolContext, ToolDefinition } from '../actors/tool-catalog.js'
import type { Fact, HandoffIntent, HandoffPause, Invocation, InvocationOutcome, StoredEvent } from '../facts/types.js'
import { type InvocationSnapshot, type InvocationState, foldFacts, stateOf } from '../machines/invocation.js'
import type { EventLog, LogPrefix } from '../store/event-log.js'
import { ExecutionLedger } from './ledger.js'
import { type PathCheck, PathCheckError, type PathChecks } from './path-check.js'
import { type AnswerKind, MODEL_RETRIES, PATH_APPROVER, PATH_DENIAL, type RefusalCode } from './path-model.js'
import { type InvocationPath, type PathStep, factShape } from './paths.js'
import { type RecordedRequest, type ScriptedAnswer, type ScriptedModelServer, answer, scriptedModelServer } from './scripted-model-server.js'

/** The session every path runs in. */
export const PATH_SESSION = 'session'

/**
 * The tools the kit adds to the catalog of a path whose model calls them (`answer(needsApproval)`,
 * `answer(readOnly)`, `answer(invalidInput)`): each returns its input, the first needs approval,
 * the second is read-only, the third has an input schema (a number `value`) that the path's call breaks.
 */
export const PATH_APPROVAL_TOOL = 'path-needs-approval'
export const PATH_READ_ONLY_TOOL = 'path-read-only'
export const PATH_CHECKED_TOOL = 'path-checked'

/** The schema of {@link PATH_CHECKED_TOOL}: the path's call sends a string `value`, which it refuses. */
const CHECKED_SCHEMA = { type: 'object', properties: { value: { type: 'number' } }, required: ['value'] }

const LONG_MS = 60_000
const SHORT_TIMEOUT_MS = 300
const PREFIX_EVENTS = 1_000_000
const PREFIX_BYTES = 256 * 1024 * 1024

/** Everything one process needs to drive its share of a path. */
export interface HarnessSettings {
  path: InvocationPath
  /** The runs' working directory (absolute). */
  cwd: string
  ledgerFile: string
  log: EventLog
  /** The catalog as the caller gave it; the harness wraps each tool to count and steer it. */
  tools: readonly ToolDefinition[]
  createEngine: (options: EngineOptions) => Engine
  /** The call a `known` answer asks for. */
  toolCall: { name: string; arguments: unknown }
  unknownTool: string
  model: string
  stepTimeoutMs: number
  checks: PathChecks
  /** After a crash: the log's high-water when the process died. This process may only execute later dispatches. */
  crashedAt?: number
}

interface LiveRun {
  running: RunningInvocation
  controller: AbortController
  outcomeChecked: boolean
}

interface HoldHandle {
  run: number
  reservation: HandoffReservation
  settled: Promise<{ held: HeldInvocation } | { error: unknown }>
  state: 'pending' | 'held' | 'cancelled' | 'done'
  held?: HeldInvocation
  preview?: HandoffPause
}

const codeOf = (error: unknown) => (error as { code?: unknown } | undefined)?.code

/**
 * A tool named `echo` that returns its input: the default catalog of `runPath`.
 *
 * @example
 * ```ts
 * await runPath(path, { tools: [echoTool()], toolCall: { name: 'echo', arguments: { value: 42 } } })
 * ```
 */
export function echoTool(): ToolDefinition {
  return {
    name: 'echo',
    description: 'Returns its input unchanged',
    inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
    async execute(input) {
      return input
    },
  }
}

/** One process's driver of a path: open it for a range of steps, `run()`, `finish()`, and always `close()`. */
export class PathHarness {
  readonly #s: HarnessSettings
  readonly #from: number
  readonly #to: number
  readonly #ledger: ExecutionLedger
  readonly #server: ScriptedModelServer
  readonly #engine: Engine
  readonly #tools: readonly ToolDefinition[]
  readonly #arrivals: RecordedRequest[] = []
  readonly #unanswered: ((answer: ScriptedAnswer) => void)[] = []
  readonly #timeouts: boolean[]
  readonly #runs = new Map<number, LiveRun>()
  readonly #waiters = new Set<() => void>()
  readonly #replayed = new Set<number>()
  readonly #outcomes = new Map<number, InvocationOutcome>()
  #sent = 0
  #toolsStarted = 0
  /** Calls that reached the `execute` of a tool of the caller's catalog (not the kit's own tools). */
  #toolRuns = 0
  /** The calls whose `execute` (the caller's, or a kit tool's) has been called and has not returned yet: operation id to tool name. */
  readonly #executing = new Map<string, string>()
  #tool: { operationId: string; decide: (outcome: 'succeeds' | 'throws') => void; fail: (error: Error) => void } | undefined
  /** The call waiting for the path's decision, and how many calls the approver was asked about. */
  #approval: { operationId: string; decide: (decision: ApprovalDecision) => void } | undefined
  #approvalsAsked = 0
  #clock = Date.UTC(2024, 0, 1)
  #clockFaults = 0
  #hold: HoldHandle | undefined
  /** What `commit()` returned, by run. */
  readonly #sealed = new Map<number, HandoffPause>()
  /** The root run of each run's turn, for the intents of its holds. */
  readonly #roots = new Map<number, string>()
  #step = -1

  private constructor(settings: HarnessSettings, from: number, to: number, server: ScriptedModelServer) {
    this.#s = settings
    this.#from = from
    this.#to = to
    this.#server = server
    this.#ledger = new ExecutionLedger(settings.ledgerFile)
    this.#timeouts = this.#plannedTimeouts()
    const calls = (kind: AnswerKind) => settings.path.steps.some(({ event }) => event.type === 'model.answer' && event.answer === kind)
    this.#tools = [
      ...settings.tools.map((tool) => this.#steered(tool, 'own')),
      ...(calls('needsApproval') ? [this.#steered(kitTool(PATH_APPROVAL_TOOL, 'Returns its input, once approved'), 'kit', { needsApproval: true })] : []),
      ...(calls('readOnly') ? [this.#steered(kitTool(PATH_READ_ONLY_TOOL, 'Looks its input up, changing nothing'), 'kit', { readOnly: true })] : []),
      ...(calls('invalidInput') ? [{ ...this.#steered(kitTool(PATH_CHECKED_TOOL, 'Returns its input, a number value'), 'kit'), inputSchema: CHECKED_SCHEMA }] : []),
    ]
    const model = new ModelExecutor({
      timeoutMs: LONG_MS,
      retries: MODEL_RETRIES,
      backoffMs: 0,
      maxBackoffMs: LONG_MS,
      createClient: (provider) => {
        const client = new OpenAIChatClient(provider)
        return {
          complete: (request) => client.complete({ ...request, timeoutMs: this.#timeouts[this.#sent++] ? SHORT_TIMEOUT_MS : request.timeoutMs }),
        }
      },
    })
    this.#engine = settings.createEngine({ log: settings.log, model, now: () => this.#now() })
  }

  /** Starts the model server and the engine for steps `from` (inclusive) to `to` (exclusive). */
  static async open(settings: HarnessSettings, from: number, to: number): Promise<PathHarness> {
    let arrived: (request: RecordedRequest, reply: (answer: ScriptedAnswer) => void) => void = () => undefined
    const server = await scriptedModelServer((request) => new Promise<ScriptedAnswer>((resolve) => arrived(request, resolve)))
    let harness: PathHarness
    try {
      harness = new PathHarness(settings, from, to, server)
    } catch (error) {
      // A `createEngine` that throws must not leave the server keeping the process alive.
      await server.close()
      throw error
    }
    arrived = (request, reply) => harness.#arrived(request, reply)
    return harness
  }

  /** Requests the model server received in this process. */
  get requests(): number {
    return this.#arrivals.length
  }

  /** Calls in this process that reached the `execute` of a tool of the caller's catalog. */
  get toolRuns(): number {
    return this.#toolRuns
  }

  /** The live state of run `run`, if this process runs it. */
  liveState(run: number): InvocationState | undefined {
    return this.#runs.get(run)?.running.state()
  }

  /** Executes the steps and checks every invariant after each one. */
  async run(): Promise<void> {
    const { steps } = this.#s.path
    for (let index = this.#from; index < this.#to; index += 1) {
      const step = steps[index] as PathStep
      this.#step = index
      await this.#act(step, index)
      if (await this.#settle(step, index)) await this.#check(step, index)
    }
    this.#step = this.#to
  }

  /** After the last step: every run has ended, and no request beyond the planned ones was sent. */
  async finish(): Promise<void> {
    await this.#bounded('the engine to drain', this.#engine.drain())
    const planned = this.#plannedRequests(this.#to - 1)
    if (this.#arrivals.length !== planned) {
      this.#fail('requests', `the model server saw ${this.#arrivals.length} requests, the path plans ${planned}`)
    }
  }

  /**
   * Stops whatever still runs and closes the server. Never throws. Waits for the engine to drain
   * for at most `stepTimeoutMs` (5 s at most): a tool that ignores its aborted signal and never
   * settles keeps the engine from draining, and the path's error, already thrown, must still reach
   * the caller. The timer is not unref'd: with nothing else left alive, an unref'd one let the
   * process exit with the path's promise pending and nothing said.
   */
  async close(): Promise<void> {
    for (const { controller } of this.#runs.values()) controller.abort('path-closed')
    this.#tool?.fail(new Error('the path was closed while the tool ran'))
    for (const reply of this.#unanswered.splice(0)) reply(answer.hang())
    await this.#server.close()
    let timer: NodeJS.Timeout | undefined
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.min(this.#s.stepTimeoutMs, 5_000))
    })
    await Promise.race([this.#engine.drain(), waited]).catch(() => undefined)
    clearTimeout(timer)
  }

  // ---- acting --------------------------------------------------------------------------

  async #act(step: PathStep, index: number): Promise<void> {
    const { event } = step
    switch (event.type) {
      case 'start':
        return this.#startMessage(step.run, event.allowPriorUnknown)
      case 'successor':
        return this.#startSuccessor(step.run)
      case 'request':
        return
      case 'model.answer':
        return this.#reply(this.#scripted(event.answer, index))
      case 'tool.outcome': {
        const tool = this.#tool
        if (!tool) return this.#fail('facts', 'no tool is running to settle')
        this.#tool = undefined
        tool.decide(event.outcome)
        return
      }
      case 'approval': {
        const waiting = this.#approval
        if (!waiting) return this.#fail('facts', 'no call is waiting for its approval')
        this.#approval = undefined
        waiting.decide(event.decision === 'approve' ? { approved: true, by: PATH_APPROVER } : { approved: false, by: PATH_APPROVER, reason: PATH_DENIAL })
        return
      }
      case 'hold.reserve': {
        const { running } = this.#live(step.run)
        let reservation: HandoffReservation
        try {
          reservation = running.handoff().reserve(this.#intent(step.run, `${this.#holdNumber(index)}`))
        } catch (error) {
          return this.#fail('hold', `reserve() was refused (${String(codeOf(error))})`)
        }
        this.#hold = {
          run: step.run,
          reservation,
          state: 'pending',
          settled: reservation.ready().then(
            (held) => ({ held }),
            (error: unknown) => ({ error }),
          ),
        }
        return
      }
      case 'hold.cancel': {
        const hold = this.#pendingHold()
        hold.reservation.cancel()
        const result = await this.#bounded('the cancelled reservation to settle', hold.settled)
        if (!('error' in result) || codeOf(result.error) !== 'HANDOFF_CANCELLED') {
          const got = String(codeOf('error' in result ? result.error : undefined))
          this.#fail('hold', `a cancelled reservation must reject ready() with HANDOFF_CANCELLED, got ${got}`)
        }
        hold.state = 'cancelled'
        return
      }
      case 'hold.release': {
        const hold = this.#heldHold()
        hold.state = 'done'
        await this.#bounded('release()', (hold.held as HeldInvocation).release()).catch((error: unknown) =>
          this.#fail('hold', `release() failed: ${(error as Error).message}`),
        )
        return
      }
      case 'hold.commit': {
        const hold = this.#heldHold()
        hold.state = 'done'
        const pause = await this.#bounded('commit()', (hold.held as HeldInvocation).commit()).catch((error: unknown) =>
          this.#fail('hold', `commit() failed: ${(error as Error).message}`),
        )
        if (!isDeepStrictEqual(pause, hold.preview)) this.#fail('hold', 'commit() resolved with something else than preview()')
        if (step.remainingSteps !== undefined && pause.remainingSteps !== step.remainingSteps) {
          this.#fail('hold', `the seal leaves ${pause.remainingSteps} steps, the path plans ${step.remainingSteps}`)
        }
        this.#sealed.set(step.run, pause)
        return
      }
      case 'cancel':
        this.#live(step.run).controller.abort('path')
        return
      case 'log.refuses':
        // The answer's fact and the model.interrupted the engine writes for it are both refused: the run ends from awaitingModel.
        this.#clockFaults = 2
        return this.#reply(answer.text('done'))
      case 'refusal':
        return this.#refuse(event.code, step, index)
      case 'crash':
        return this.#fail('child', 'a crash step is run by runPath, not inside a process')
      default: {
        const never: never = event
        throw new TypeError(`unknown path event ${JSON.stringify(never)}`)
      }
    }
  }

  #input(invocation: Invocation, work: RunWork, overrides: Partial<RunInput> = {}): RunInput {
    return {
      invocation,
      provider: { kind: 'openai-chat', baseUrl: this.#server.baseUrl, model: this.#s.model },
      configuration: { cwd: this.#s.cwd },
      tools: this.#tools,
      work,
      ...overrides,
    }
  }

  #messageInput(run: number, allowPriorUnknown: boolean, invocation?: Invocation): RunInput {
    return this.#input(
      invocation ?? { sessionId: PATH_SESSION, turnId: `turn-${run}`, runId: `run-${run}`, invocationId: `invocation-${run}` },
      { kind: 'message', content: `question ${run}`, ...(allowPriorUnknown ? { allowPriorUnknown: true } : {}) },
      { maxSteps: this.#s.path.bounds.maxSteps },
    )
  }

  /** Every run is started with the path's approver: a catalog with the approval tool is refused without one. */
  #startOptions(signal?: AbortSignal): StartOptions {
    return { ...(signal === undefined ? {} : { signal }), onApproval: this.#approver }
  }

  /** Asks the path: the call waits until an `approval` step decides, or its run stops waiting. */
  readonly #approver: Approver = (request) =>
    new Promise<ApprovalDecision>((resolve) => {
      const stop = () => {
        if (this.#approval?.operationId === request.operationId) this.#approval = undefined
        resolve({ approved: false, reason: 'the run stopped waiting' })
      }
      if (request.signal.aborted) return stop()
      request.signal.addEventListener('abort', stop, { once: true })
      this.#approval = {
        operationId: request.operationId,
        decide: (decision) => {
          request.signal.removeEventListener('abort', stop)
          resolve(decision)
        },
      }
      this.#approvalsAsked += 1
      this.#notify()
    })

  async #launch(run: number, input: RunInput): Promise<void> {
    this.#roots.set(run, input.work.kind === 'handoff' ? input.work.pause.intent.rootRunId : input.invocation.runId)
    const controller = new AbortController()
    let running: RunningInvocation
    try {
      running = await this.#engine.start(input, this.#startOptions(controller.signal))
    } catch (error) {
      return this.#fail('refusal', `run ${run} was refused (${String(codeOf(error))}): ${(error as Error).message}`)
    }
    this.#runs.set(run, { running, controller, outcomeChecked: false })
  }

  #startMessage(run: number, allowPriorUnknown: boolean): Promise<void> {
    return this.#launch(run, this.#messageInput(run, allowPriorUnknown))
  }

  async #successorInput(run: number): Promise<RunInput> {
    const source = (await this.#s.log.runSource(PATH_SESSION, `run-${run - 1}`))?.boundary
    if (!source) return this.#fail('hold', `the log has no boundary for the sealed run run-${run - 1}`)
    const sealed = await this.#sealedPause(run - 1)
    return this.#input(successorOf(sealed.intent, source.invocation), { kind: 'handoff', source, pause: sealed })
  }

  async #startSuccessor(run: number): Promise<void> {
    return this.#launch(run, await this.#successorInput(run))
  }

  /** The pause sealed in the log for run `run`; equal to what `commit()` returned, when this process committed it. */
  async #sealedPause(run: number): Promise<HandoffPause> {
    const invocationId = `invocation-${run}`
    const prefix = await this.#prefix()
    const ended = prefix.events.find(({ event }) => event.invocation.invocationId === invocationId && event.fact.type === 'invocation.ended')
    const fact = ended?.event.fact
    if (fact?.type !== 'invocation.ended' || fact.outcome.status !== 'handoff_paused') {
      return this.#fail('hold', `${invocationId} is not sealed by a handoff in the log`)
    }
    const committed = this.#sealed.get(run)
    if (committed && !isDeepStrictEqual(committed, fact.outcome.pause)) this.#fail('hold', 'the sealed pause in the log differs from commit()')
    return fact.outcome.pause
  }

  #intent(run: number, label: string): HandoffIntent {
    return {
      handoffId: `hold-${label}`,
      hostEpoch: 'host',
      rootRunId: this.#roots.get(run) ?? `run-${run}`,
      successorRunId: `run-${run + 1}`,
      successorInvocationId: `invocation-${run + 1}`,
      claimId: `claim-${label}`,
    }
  }

  #holdNumber(index: number): number {
    return this.#s.path.steps.slice(0, index + 1).filter((step) => step.event.type === 'hold.reserve').length
  }

  async #refuse(code: RefusalCode, step: PathStep, index: number): Promise<void> {
    const before = await this.#prefix()
    let error: unknown
    try {
      switch (code) {
        case 'RUN_BUSY': {
          const unrelated = { sessionId: PATH_SESSION, turnId: 'turn-unrelated', runId: 'run-unrelated', invocationId: 'invocation-unrelated' }
          await this.#engine.start(this.#messageInput(step.run + 1, false, unrelated), this.#startOptions())
          break
        }
        case 'HANDOFF_BUSY':
          this.#live(step.run).running.handoff().reserve(this.#intent(step.run, `busy-${index}`))
          break
        case 'HANDOFF_MISMATCH': {
          const input = await this.#successorInput(step.run + 1)
          await this.#engine.start({ ...input, provider: { ...input.provider, model: `${this.#s.model}-changed` } }, this.#startOptions())
          break
        }
        case 'RUN_RECONCILIATION_REQUIRED':
          await this.#engine.start(this.#messageInput(step.run + 1, false), this.#startOptions())
          break
        case 'RUN_SOURCE_STALE': {
          // The run before the last one, continued as a double-clicked message would be.
          const source = (await this.#s.log.runSource(PATH_SESSION, `run-${step.run - 1}`))?.boundary
          if (!source) return this.#fail('refusal', `the log has no boundary for run-${step.run - 1}`)
          const invocation = { sessionId: PATH_SESSION, turnId: `turn-${step.run + 1}`, runId: `run-${step.run + 1}`, invocationId: `invocation-${step.run + 1}` }
          await this.#engine.start(this.#input(invocation, { kind: 'continuation', source, content: 'again', onlyIfLatest: true }, { maxSteps: this.#s.path.bounds.maxSteps }), this.#startOptions())
          break
        }
        default: {
          const never: never = code
          throw new TypeError(`unknown refusal ${String(never)}`)
        }
      }
    } catch (caught) {
      error = caught
    }
    if (codeOf(error) !== code) this.#fail('refusal', `expected ${code}, got ${error === undefined ? 'an admission' : String(codeOf(error) ?? error)}`)
    const after = await this.#prefix()
    if (after.digest !== before.digest || after.highWater !== before.highWater) this.#fail('digest', `the refused ${code} changed the log`)
    this.#s.checks.refusals += 1
    this.#s.checks.digests += 1
  }

  #scripted(kind: AnswerKind, index: number): ScriptedAnswer {
    const known = { name: this.#s.toolCall.name, arguments: this.#s.toolCall.arguments }
    const unknown = { name: this.#s.unknownTool, arguments: {} }
    switch (kind) {
      case 'known':
        return answer.toolCalls([known])
      case 'unknown':
        return answer.toolCalls([unknown])
      case 'several':
        return answer.toolCalls([known, unknown, known])
      case 'needsApproval':
        return answer.toolCalls([{ name: PATH_APPROVAL_TOOL, arguments: { value: 1 } }])
      case 'readOnly':
        return answer.toolCalls([{ name: PATH_READ_ONLY_TOOL, arguments: { value: 1 } }])
      case 'invalidInput':
        return answer.toolCalls([{ name: PATH_CHECKED_TOOL, arguments: { value: 'one' } }])
      case 'text':
        return answer.text('done')
      case 'failure': {
        // The retry comes at once when the path lets it; otherwise the run waits (at a safe point) to be cancelled or killed.
        // A hold taken during the back-off (and refusals while it is held) come first: what follows its release decides.
        const { steps } = this.#s.path
        let next = index + 1
        while (steps[next]?.event.type === 'refusal' || (steps[next]?.event.type === 'hold.release' && steps[next]?.state === 'backoff')) next += 1
        return answer.status(500, { retryAfterMs: steps[next]?.event.type === 'request' ? 0 : LONG_MS })
      }
      case 'timeout':
        return answer.hang()
      default: {
        const never: never = kind
        throw new TypeError(`unknown answer ${String(never)}`)
      }
    }
  }

  #reply(scripted: ScriptedAnswer): void {
    const reply = this.#unanswered.shift()
    if (!reply) return this.#fail('requests', 'no model request is in flight to answer')
    reply(scripted)
  }

  #arrived(request: RecordedRequest, reply: (answer: ScriptedAnswer) => void): void {
    this.#arrivals.push(request)
    this.#unanswered.push(reply)
    this.#notify()
  }

  #now(): number {
    if (this.#clockFaults > 0) {
      this.#clockFaults -= 1
      return -1
    }
    this.#clock += 1
    return this.#clock
  }

  /**
   * `tool` as the path steers it. Its own `readOnly`, `needsApproval` and `retry` are left off: the path
   * model's `known` call is of a tool with effects that needs no approval (a crash mid-call needs
   * reconciliation); the kit's own tools get theirs from `flags`. Its `validateInput` is kept (the
   * engine checks the call as it would the tool's). Its `timeoutMs` is applied by the wrapper to the
   * tool's own `execute`, once the path lets the call go on (see {@link PathHarness.#execute}): the
   * time the call waits for the path is the test's, not the tool's.
   */
  #steered(tool: ToolDefinition, whose: 'own' | 'kit', flags: { needsApproval?: true; readOnly?: true } = {}): ToolDefinition {
    const steered: ToolDefinition = {
      ...flags,
      name: tool.name,
      execute: async (input, context) => {
        this.#ledger.record(context.operationId)
        const outcome = await new Promise<'succeeds' | 'throws'>((resolve, reject) => {
          const abort = () => {
            this.#tool = undefined
            reject(new Error('the run was cancelled while the tool ran'))
          }
          if (context.signal.aborted) return abort()
          context.signal.addEventListener('abort', abort, { once: true })
          this.#tool = {
            operationId: context.operationId,
            decide: (decided) => {
              context.signal.removeEventListener('abort', abort)
              resolve(decided)
            },
            fail: reject,
          }
          this.#toolsStarted += 1
          this.#notify()
        })
        if (outcome === 'throws') throw new Error(`${tool.name} failed as the path asked`)
        return this.#execute(tool, whose, input, context)
      },
    }
    if (tool.description !== undefined) steered.description = tool.description
    if (tool.inputSchema !== undefined) steered.inputSchema = tool.inputSchema
    if (tool.validateInput !== undefined) steered.validateInput = tool.validateInput
    return steered
  }

  /**
   * Calls `tool.execute`, counted (a tool of the caller's) and listed as running until it returns.
   * With a `timeoutMs`, as the engine would: its signal aborts with the engine's `TimeoutError` once
   * the limit has passed, and a tool that has not settled a second later is given up on. The engine
   * would then leave the call dispatched and end the run `outcome_unknown`; here the call fails with
   * the engine's words, so the path's check names the tool and its limit.
   */
  async #execute(tool: ToolDefinition, whose: 'own' | 'kit', input: unknown, context: ToolContext): Promise<unknown> {
    if (whose === 'own') this.#toolRuns += 1
    this.#executing.set(context.operationId, tool.name)
    try {
      const { timeoutMs } = tool
      if (timeoutMs === undefined) return await tool.execute(input, context)
      const result = await timedCall(context.signal, timeoutMs, 'its timeoutMs', async (signal) => tool.execute(input, { ...context, signal }))
      if (result === ABANDONED) {
        throw new Error(
          `tool ${tool.name} (operation ${context.operationId}) ${notWaitedFor(timeoutMs, 'its timeoutMs')}: the engine would not wait for it, and would end the run outcome_unknown`,
        )
      }
      return result
    } finally {
      this.#executing.delete(context.operationId)
    }
  }

  // ---- waiting -------------------------------------------------------------------------

  #notify(): void {
    for (const wake of [...this.#waiters]) wake()
  }

  /**
   * Waits until `ready()` holds, woken by requests and tool starts (or polling, when `poll` is
   * set). Gives up early when run `run` ends first: the engine went somewhere the path does not.
   */
  #until(what: string, ready: () => boolean, options: { poll?: boolean; run?: number } = {}): Promise<void> {
    if (ready()) return Promise.resolve()
    const ended = options.run === undefined ? undefined : this.#runs.get(options.run)?.running.wait()
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer)
        clearInterval(ticker)
        this.#waiters.delete(check)
      }
      const check = () => {
        if (!ready()) return
        done()
        resolve()
      }
      const timer = setTimeout(() => {
        done()
        reject(this.#late(`${what} did not happen within ${this.#s.stepTimeoutMs} ms`))
      }, this.#s.stepTimeoutMs)
      const ticker = options.poll ? setInterval(check, 2) : undefined
      this.#waiters.add(check)
      const early = () => {
        if (ready() || !this.#waiters.has(check)) return check()
        done()
        reject(new PathCheckError('outcome', this.#s.path.id, this.#step, `the run ended while the path waited for ${what}`))
      }
      ended?.then(early, early)
    })
  }

  /** Runs `wait`; if it fails, a log that went another way than the path is reported as such (`facts`), not as the symptom. */
  async #expecting<T>(index: number, wait: Promise<T>): Promise<T> {
    try {
      return await wait
    } catch (error) {
      if (error instanceof PathCheckError) await this.#compareFacts(await this.#prefix(), index)
      throw error
    }
  }

  /** A `timeout` failure, naming the tool calls whose `execute` has not returned: what the step most likely waits for. */
  #late(message: string): PathCheckError {
    const running = [...this.#executing].map(([operationId, name]) => `tool ${name} (operation ${operationId})`)
    const still = running.length === 0 ? '' : `; still running: ${running.join(', ')}, whose execute has not returned (it ignores its aborted signal, or never settles)`
    return new PathCheckError('timeout', this.#s.path.id, this.#step, `${message}${still}`)
  }

  #bounded<T>(what: string, promise: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(this.#late(`${what} did not settle within ${this.#s.stepTimeoutMs} ms (stepTimeoutMs)`)),
        this.#s.stepTimeoutMs,
      )
    })
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
  }

  /** Waits until the engine stands still where the step leaves it. False for a state it passes through without stopping. */
  async #settle(step: PathStep, index: number): Promise<boolean> {
    switch (step.state) {
      case 'idle':
        return true
      case 'started': {
        // The actor takes its first step on the next turn of the event loop: nothing here may wait for I/O.
        const live = this.#runs.get(step.run)
        if (live && live.running.state() !== 'safePoint') this.#fail('live-state', `a just admitted run is in ${live.running.state()}`)
        return false
      }
      case 'awaitingModel': {
        const planned = this.#plannedRequests(index)
        await this.#expecting(index, this.#until(`model request ${planned}`, () => this.#arrivals.length >= planned, { run: step.run }))
        await this.#checkReplay(step, index)
        return true
      }
      case 'awaitingApproval': {
        const planned = this.#plannedApprovals(index)
        await this.#expecting(
          index,
          this.#until(`approval request ${planned}`, () => this.#approvalsAsked >= planned && this.#approval !== undefined, { run: step.run }),
        )
        return true
      }
      case 'toolRunning': {
        const planned = this.#plannedDispatches(index)
        await this.#expecting(
          index,
          this.#until(`tool execution ${planned}`, () => this.#toolsStarted >= planned && this.#tool !== undefined, { run: step.run }),
        )
        return true
      }
      case 'backoff': {
        if (this.#s.path.steps[index + 1]?.event.type === 'request') return false
        const live = this.#live(step.run)
        await this.#expecting(index, this.#until('the wait before the retry', () => live.running.state() === 'safePoint', { poll: true, run: step.run }))
        return true
      }
      case 'held': {
        const hold = this.#hold
        if (!hold || hold.run !== step.run) return this.#fail('hold', 'the run is held without a reservation')
        if (hold.state === 'pending') {
          const result = await this.#expecting(index, this.#bounded('ready()', hold.settled))
          if ('error' in result) {
            await this.#compareFacts(await this.#prefix(), index)
            return this.#fail('hold', `ready() rejected: ${String(codeOf(result.error) ?? result.error)}`)
          }
          hold.held = result.held
          hold.preview = result.held.preview()
          hold.state = 'held'
        }
        return true
      }
      case 'committed':
      case 'ended':
        await this.#checkOutcome(step, index)
        return true
      default: {
        const never: never = step.state
        throw new TypeError(`unknown path state ${String(never)}`)
      }
    }
  }

  // ---- checking ------------------------------------------------------------------------

  #fail(check: PathCheck, message: string): never {
    throw new PathCheckError(check, this.#s.path.id, this.#step, message)
  }

  #live(run: number): LiveRun {
    const live = this.#runs.get(run)
    if (!live) return this.#fail('live-state', `run ${run} is not running in this process`)
    return live
  }

  #pendingHold(): HoldHandle {
    if (this.#hold?.state !== 'pending') return this.#fail('hold', 'no reservation is pending')
    return this.#hold
  }

  #heldHold(): HoldHandle {
    if (this.#hold?.state !== 'held' || !this.#hold.held) return this.#fail('hold', 'no hold is held')
    return this.#hold
  }

  #prefix(): Promise<LogPrefix> {
    return this.#s.log.prefix(PREFIX_EVENTS, PREFIX_BYTES)
  }

  /** The planned fact shapes of run `run` after step `index`. */
  #plannedFacts(run: number, index: number): string[] {
    return this.#s.path.steps.slice(0, index + 1).flatMap((step) => (step.run === run ? step.facts : []))
  }

  #plannedCount(index: number, prefix: string): number {
    let count = 0
    for (const step of this.#s.path.steps.slice(this.#from, index + 1)) count += step.facts.filter((fact) => fact.startsWith(prefix)).length
    return count
  }

  #plannedRequests(index: number): number {
    return this.#plannedCount(index, 'model.requested')
  }

  #plannedDispatches(index: number): number {
    return this.#plannedCount(index, 'tool.dispatched')
  }

  /** Each call of the approval tool asks the approver once, as the answer that makes it arrives. */
  #plannedApprovals(index: number): number {
    return this.#s.path.steps.slice(this.#from, index + 1).filter(({ event }) => event.type === 'model.answer' && event.answer === 'needsApproval').length
  }

  /** For each model request this process will send, whether the path lets it time out. */
  #plannedTimeouts(): boolean[] {
    const timeouts: boolean[] = []
    const open: number[] = []
    let ordinal = 0
    for (const step of this.#s.path.steps.slice(this.#from, this.#to)) {
      const { event } = step
      if (event.type === 'model.answer' || event.type === 'log.refuses') {
        const answered = open.shift()
        if (answered !== undefined) timeouts[answered] = event.type === 'model.answer' && event.answer === 'timeout'
      } else if (event.type === 'cancel' || event.type === 'crash') {
        open.length = 0
      }
      for (const fact of step.facts) if (fact.startsWith('model.requested')) open.push(ordinal++)
    }
    return timeouts
  }

  async #checkOutcome(step: PathStep, index: number): Promise<void> {
    const live = this.#runs.get(step.run)
    if (!live || live.outcomeChecked) return
    live.outcomeChecked = true
    const settled = await this.#bounded(
      'wait()',
      live.running.wait().then(
        (outcome) => ({ outcome }),
        (error: unknown) => ({ error }),
      ),
    )
    // A request the run abandoned (cancelled in flight) will never be answered: let it hang until the server closes.
    for (const reply of this.#unanswered.splice(0)) reply(answer.hang())
    const last = this.#plannedFacts(step.run, index).at(-1)
    if (last === 'invocation.ended:failed:engine_error') {
      if (!('error' in settled) || codeOf(settled.error) !== 'LOG_INVALID_EVENT') {
        this.#fail('outcome', 'a run whose fact the log refused must reject wait() with the log error (LOG_INVALID_EVENT)')
      }
    } else if ('error' in settled) {
      this.#fail('outcome', `wait() rejected: ${(settled.error as Error).message}`)
    } else {
      const shape = factShape({ type: 'invocation.ended', outcome: settled.outcome })
      if (shape !== last) this.#fail('outcome', `wait() resolved ${shape}, the path plans ${String(last)}`)
      if (settled.outcome.status === 'handoff_paused' && !isDeepStrictEqual(settled.outcome.pause, this.#sealed.get(step.run))) {
        this.#fail('outcome', 'wait() resolved with another pause than commit()')
      }
      this.#outcomes.set(step.run, settled.outcome)
    }
    const hold = this.#hold
    if (hold?.run === step.run && hold.state === 'pending') {
      const result = await this.#bounded('the abandoned reservation', hold.settled)
      if (!('error' in result) || codeOf(result.error) !== 'HANDOFF_UNAVAILABLE') {
        this.#fail('hold', 'a reservation still pending when its run ended must reject ready() with HANDOFF_UNAVAILABLE')
      }
      hold.state = 'done'
    }
  }

  /** A run's first request carries exactly the transcript its facts give: replay, never re-execution. */
  async #checkReplay(step: PathStep, index: number): Promise<void> {
    if (this.#replayed.has(step.run) || !step.facts.includes('model.requested:step-1')) return
    this.#replayed.add(step.run)
    const request = this.#arrivals[this.#plannedRequests(index) - 1]
    const messages = (request?.body as { messages?: ChatMessage[] } | undefined)?.messages ?? []
    const opened = this.#plannedFacts(step.run, index)[0] ?? ''
    const prefix = await this.#prefix()
    const roles = (role: ChatMessage['role']) => messages.filter((message) => message.role === role).length
    if (opened === 'invocation.opened:handoff') {
      const mine = prefix.events.find(({ event }) => event.invocation.invocationId === `invocation-${step.run}`)?.event
      const turn = mine?.invocation.turnId
      const earlier = prefix.events.filter(
        ({ event }) => event.invocation.turnId === turn && event.invocation.invocationId !== `invocation-${step.run}`,
      )
      const answered = earlier.filter(({ event }) => event.fact.type === 'tool.settled' || event.fact.type === 'tool.rejected').length
      if (roles('user') !== 1 || roles('tool') !== answered) {
        this.#fail('replay', `the successor's first request has ${roles('user')} user and ${roles('tool')} tool messages; its lineage has 1 and ${answered}`)
      }
    } else {
      const acknowledged = opened.endsWith('+priorUnknown')
      if (roles('user') !== 1 || roles('tool') !== 0 || roles('assistant') !== 0 || roles('system') !== (acknowledged ? 1 : 0)) {
        this.#fail('replay', `a new message's first request must carry only its own message${acknowledged ? ' and the note on unknown outcomes' : ''}`)
      }
      if (acknowledged) {
        // A read-only call is never in the note: nothing of it needs reconciling.
        const unknown = prefix.events.filter(({ event }) => event.fact.type === 'tool.dispatched' && event.fact.readOnly !== true && !settledIn(prefix.events, event.fact))
        const note = JSON.stringify(messages.find((message) => message.role === 'system'))
        if (unknown.length === 0 || unknown.some(({ event }) => !note.includes((event.fact as { operationId: string }).operationId))) {
          this.#fail('replay', 'the note on unknown outcomes does not name every operation whose outcome is unknown')
        }
      }
    }
    this.#s.checks.replays += 1
  }

  /** The log holds exactly the planned facts of every run so far, and nothing else; returns each run's folded snapshot. */
  async #compareFacts(prefix: LogPrefix, index: number): Promise<Map<number, InvocationSnapshot>> {
    const byInvocation = new Map<string, Fact[]>()
    for (const { event } of prefix.events) {
      const id = event.invocation.invocationId
      byInvocation.set(id, [...(byInvocation.get(id) ?? []), event.fact])
    }
    const runs = new Set(this.#s.path.steps.slice(0, index + 1).map((s) => s.run).filter((run) => run > 0))
    for (const id of byInvocation.keys()) {
      if (![...runs].some((run) => `invocation-${run}` === id)) this.#fail('facts', `the log has facts of ${id}, which the path never started`)
    }
    const folded = new Map<number, InvocationSnapshot>()
    for (const run of runs) {
      const facts = byInvocation.get(`invocation-${run}`) ?? []
      const shapes = facts.map(factShape)
      const planned = this.#plannedFacts(run, index)
      if (!isDeepStrictEqual(shapes, planned)) {
        this.#fail('facts', `run ${run} has [${shapes.join(', ')}], the path plans [${planned.join(', ')}]${firstDifference(facts, shapes, planned)}`)
      }
      // The shapes say a call was approved or denied; the record must also be the decision the path's approver gave.
      for (const fact of facts) {
        if (fact.type !== 'tool.dispatched' && fact.type !== 'tool.rejected') continue
        const expected = fact.type === 'tool.dispatched' ? { by: PATH_APPROVER } : { by: PATH_APPROVER, reason: PATH_DENIAL }
        const decided = fact.type === 'tool.dispatched' ? fact.approval !== undefined : fact.reason === 'denied'
        if (decided && !isDeepStrictEqual(fact.approval, expected)) {
          this.#fail('facts', `run ${run} records the approver's decision on ${fact.operationId} as ${JSON.stringify(fact.approval)}, the approver gave ${JSON.stringify(expected)}`)
        }
      }
      try {
        folded.set(run, foldFacts(facts))
      } catch (error) {
        return this.#fail('state', `the facts of run ${run} do not fold through the machine: ${(error as Error).message}`)
      }
    }
    return folded
  }

  async #check(step: PathStep, index: number): Promise<void> {
    const { checks } = this.#s
    const prefix = await this.#prefix()
    const current = (await this.#compareFacts(prefix, index)).get(step.run)
    checks.facts += 1
    if (step.machineState !== null) {
      const folded = current ? stateOf(current) : null
      if (folded !== step.machineState) this.#fail('state', `the log folds to ${String(folded)}, the path expects ${step.machineState}`)
      const live = this.#runs.get(step.run)
      if (live && current) {
        const snapshot = live.running.snapshot()
        if (live.running.state() !== folded || !isDeepStrictEqual(snapshot.context, current.context)) {
          this.#fail('live-state', `the live actor is in ${live.running.state()}, the log folds to ${String(folded)} (or their contexts differ)`)
        }
      }
      checks.states += 1
    }
    const verified = await this.#s.log.verify()
    if (verified.events !== prefix.highWater || verified.digest !== prefix.digest) this.#fail('verify', 'verify() disagrees with the log prefix')
    checks.verifies += 1
    this.#checkLedger(prefix)
    const planned = this.#plannedRequests(index)
    if (this.#arrivals.length !== planned) {
      this.#fail('requests', `the model server saw ${this.#arrivals.length} requests here, the path plans ${planned}`)
    }
    const outcome = this.#outcomes.get(step.run)
    const last = prefix.events.filter(({ event }) => event.invocation.invocationId === `invocation-${step.run}`).at(-1)?.event.fact
    if (outcome && (last?.type !== 'invocation.ended' || !isDeepStrictEqual(last.outcome, outcome))) {
      this.#fail('outcome', 'wait() resolved with another outcome than the one in the log')
    }
  }

  #checkLedger(prefix: LogPrefix): void {
    const dispatched = new Map<string, number>()
    for (const { seq, event } of prefix.events) if (event.fact.type === 'tool.dispatched') dispatched.set(event.fact.operationId, seq)
    const seen = new Set<string>()
    for (const entry of this.#ledger.entries()) {
      if (seen.has(entry.operationId)) this.#fail('ledger', `operation ${entry.operationId} ran twice`)
      seen.add(entry.operationId)
      const seq = dispatched.get(entry.operationId)
      if (seq === undefined) this.#fail('ledger', `operation ${entry.operationId} ran without a durable tool.dispatched`)
      const { crashedAt } = this.#s
      if (crashedAt !== undefined && entry.pid === process.pid && seq <= crashedAt) {
        this.#fail('ledger', `operation ${entry.operationId}, dispatched before the crash, ran again after the restart`)
      }
    }
    for (const operationId of dispatched.keys()) {
      if (!seen.has(operationId)) this.#fail('ledger', `operation ${operationId} was dispatched but never ran`)
    }
    this.#s.checks.ledger += 1
  }
}

/** A kit tool that returns its input (steered like any other: see `PathHarness#steered`). */
function kitTool(name: string, description: string): ToolDefinition {
  return {
    name,
    description,
    inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
    async execute(input) {
      return input
    },
  }
}

function settledIn(events: StoredEvent[], dispatched: Fact): boolean {
  const { operationId } = dispatched as { operationId: string }
  return events.some(({ event }) => event.fact.type === 'tool.settled' && event.fact.operationId === operationId)
}

/**
 * Where the facts first part from the plan, with what the log says there: a tool that failed where
 * the path planned it to succeed (your `execute` threw) is named with its message, so the reason is
 * not left to a diff of the two lists.
 */
function firstDifference(facts: readonly Fact[], shapes: readonly string[], planned: readonly string[]): string {
  let at = 0
  while (at < shapes.length && at < planned.length && shapes[at] === planned[at]) at += 1
  const fact = facts[at]
  if (fact === undefined) return `; the log stops at fact ${at + 1}, where the path plans ${planned[at] ?? 'nothing more'}`
  const found = `; fact ${at + 1} is ${shapes[at]}, where the path plans ${planned[at] ?? 'nothing more'}`
  if (fact.type === 'tool.settled' && fact.outcome.status === 'failed') return `${found} (${fact.operationId} failed: ${fact.outcome.message})`
  if (fact.type === 'tool.rejected' && fact.message !== undefined) return `${found} (${fact.operationId} ${fact.reason}: ${fact.message})`
  return found
}
