/**
 * One admitted invocation as an actor. The machine decides (every fact is checked against it
 * before it is appended); the actor acts: it sends model requests, dispatches tools, parks at
 * safe points for handoff holds, and appends each fact, durable before the next act.
 */
import { isNativeError } from 'node:util/types'
import { FactstateError } from '../errors.js'
import type { ApprovalRecord, ExecutionSettings, Fact, HandoffIntent, HandoffPause, Invocation, InvocationOutcome, ModelOutput, RuntimeEvent, ToolCall } from '../facts/types.js'
import { extraContentOf, providerRefusalOf, reasoningDetailsOf, requestIdOf, responseIdOf } from '../facts/schema.js'
import { type InvocationSnapshot, applyFact, stateOf } from '../machines/invocation.js'
import { contentDigest } from '../store/digest.js'
import { canonical, cutText, messageOf, storageProblemAt, wellFormed } from '../store/encoding.js'
import { type LogInternals, type Precondition, successorBlockedError } from '../store/event-log.js'
import { onAbort } from './abort-listeners.js'
import { OUTCOME_UNKNOWN_NAME, isOutcomeUnknown } from './outcome-unknown.js'
import { Gate, type GateOwner, type HoldDecision, type Reservation } from './handoff.js'
import type { ChatRequestBody, ModelClient, ToolCallPiece } from './model-client.js'
import type { ModelExecutor } from './model-executor.js'
import { type ApprovalRequest, type Approver, type NeedsApproval, decide, needsApprovalFor } from './approval.js'
import { type LiveModelText, type LiveModelToolCalls, LiveText, LiveToolCalls, type ModelTextPiece, type ModelToolCallPiece } from './model-text.js'
import { REDACTED, type Secrets, holdsSecretBytes, passedOn, redact, redactAnswer, redactData, redactDeep, redactFailure, withClientSecret, withToolSecret } from './redaction.js'
import { functionTools, type ToolContext, type ToolDefinition } from './tool-catalog.js'
import { argumentsOf, unusableMessage } from './tool-arguments.js'
import { failureText, failureWithin } from './tool-failure.js'
import { inputChecks } from './tool-input.js'
import { type ToolProgressBoard, type ToolProgressUpdate, bigIntAsText, progressText } from './tool-progress.js'
import { retryBackoff, retryPolicyOf, retryWanted } from './tool-retry.js'
import { TranscriptBuilder } from './transcript.js'
import { MAX_TIMER_MS } from './timer-limit.js'

/** Everything an actor needs, prepared and admitted by the engine. */
export interface ActorSetup {
  log: LogInternals
  invocation: Invocation
  /** The lineage before this invocation (empty for a message run). */
  lineage: RuntimeEvent[]
  /** The `invocation.opened` event, already durable. */
  opened: RuntimeEvent
  snapshot: InvocationSnapshot
  execution: ExecutionSettings
  budget: number
  tools: readonly ToolDefinition[]
  /** How many tool calls of one answer may run at once (1: one after the other). */
  toolConcurrency: number
  client: ModelClient
  executor: ModelExecutor
  /** The provider's secrets: removed from everything a fact takes from outside (see actors/redaction.ts). */
  secrets: Secrets
  signal: AbortSignal | undefined
  /**
   * A cancel a handle asked for while the run was being admitted, before its signal aborted (see
   * `Engine.running`): the run is cancelled with it as it starts, as by `cancel(reason)` at once.
   */
  cancel?: string | undefined
  /** The gate the run's handles gave out while it was being admitted (a hold reserved then is taken at its first safe point). */
  gate?: Gate | undefined
  now: () => number
  eventId: (invocation: Invocation, ordinal: number) => string
  /** The most a tool's recorded outcome may hold, in UTF-8 bytes (see `EngineOptions.maxToolResultBytes`). */
  maxToolResultBytes: number
  /** The time limit of the calls of tools without a `timeoutMs` of their own (see `EngineOptions.toolTimeoutMs`). */
  toolTimeoutMs: number | undefined
  onFact?: (event: RuntimeEvent, snapshot: InvocationSnapshot) => void
  /** Receives the text of model answers live (see `StartOptions.onModelText`). */
  onModelText?: ((piece: ModelTextPiece) => void) | undefined
  /** Receives the reasoning text of model answers live (see `StartOptions.onModelReasoning`). */
  onModelReasoning?: ((piece: ModelTextPiece) => void) | undefined
  /** Receives the tool calls of model answers live (see `StartOptions.onToolCallText`). */
  onToolCallText?: ((piece: ModelToolCallPiece) => void) | undefined
  /** Decides on calls of tools that need approval (see `StartOptions.onApproval`). */
  onApproval?: Approver | undefined
  /** Passes on the progress tools report (see `StartOptions.onToolProgress`): only for a run started with it. */
  toolProgress?: ToolProgressBoard | undefined
}

/** The event id of an invocation's `ordinal`-th fact unless the engine is given its own `eventId`. */
export const defaultEventId = (invocation: Invocation, ordinal: number): string => `${invocation.invocationId}/${ordinal}`

/**
 * The ids of the facts written after one the log refused (`#fallback`): of a form of their own, so
 * that neither the default ids nor an application's ids of the same form shifted by one (the refused
 * ordinal's next id being an earlier fact's) take the rest of the run down with the same refusal.
 */
const fallbackEventId = (invocation: Invocation, ordinal: number): string => `${invocation.invocationId}/${ordinal}/after-refusal`

const unavailable = (why: string) => new FactstateError('HANDOFF_UNAVAILABLE', why)

/** The log's refusal of a hold whose successor could never be admitted (see `#successorFree`). */
const successorTaken = (error: unknown): error is FactstateError =>
  error instanceof FactstateError && (error.code === 'HANDOFF_CLAIMED' || error.code === 'HANDOFF_MISMATCH')

class Ended {
  constructor(readonly outcome: InvocationOutcome) {}
}

/** How long a tool whose `timeoutMs` has passed (its signal aborted then) may still take to settle. */
export const TOOL_TIMEOUT_GRACE_MS = 1_000

/**
 * A call of a tool with effects left dispatched and never settled, its outcome unknown, as a crash
 * leaves it: its tool did not settle within its `timeoutMs` and the grace after it, or threw once
 * its signal had aborted. The run ends `failed{outcome_unknown}`.
 */
class ToolUncertain extends Error {}

/**
 * Runs one call of a tool with `timeoutMs`: `signal` aborts with the run's (`gate`) and once the
 * tool has run `timeoutMs` (a `TimeoutError` naming the limit); `settled` is the tool's result, or
 * `abandoned` when it has not settled `TOOL_TIMEOUT_GRACE_MS` after that, however it goes on.
 */
export function timedCall<T>(gate: AbortSignal, timeoutMs: number, whose: string, run: (signal: AbortSignal) => Promise<T>): Promise<T | typeof ABANDONED> {
  const controller = new AbortController()
  const stopForwarding = onAbort(gate, () => controller.abort(gate.reason))
  let running: Promise<T>
  try {
    running = run(controller.signal)
  } catch (error) {
    stopForwarding()
    return Promise.reject(error)
  }
  // A tool given up on may still fail later, with nobody left to hear it.
  running.catch(() => undefined)
  return new Promise<T | typeof ABANDONED>((resolve, reject) => {
    // The grace is counted from the abort, not as `timeoutMs + grace` in one timer: Node caps a timer
    // at MAX_TIMER_MS, and a `timeoutMs` within a second of it would leave the tool no grace at all.
    let giveUp: ReturnType<typeof setTimeout> | undefined
    const abort = setTimeout(() => {
      controller.abort(new DOMException(`the tool did not finish within ${timeoutMs.toLocaleString('en-US')} ms (${whose})`, 'TimeoutError'))
      giveUp = setTimeout(() => done(() => resolve(ABANDONED)), TOOL_TIMEOUT_GRACE_MS)
    }, Math.min(timeoutMs, MAX_TIMER_MS))
    function done(settle: () => void) {
      clearTimeout(abort)
      clearTimeout(giveUp)
      stopForwarding()
      settle()
    }
    running.then(
      (value) => done(() => resolve(value)),
      (error: unknown) => done(() => reject(error)),
    )
  })
}
export const ABANDONED: unique symbol = Symbol('abandoned')

/** A signal's reason that says its time ran out: what `AbortSignal.timeout()` aborts with (a `TimeoutError`). */
function isTimeout(reason: unknown): boolean {
  try {
    return typeof reason === 'object' && reason !== null && (reason as { name?: unknown }).name === 'TimeoutError'
  } catch {
    // A reason whose name cannot be read (a throwing getter, a revoked proxy) is a plain abort.
    return false
  }
}

/**
 * The longest cancel reason recorded as `invocation.ended{cancelled}`'s `source`, as an approver's
 * `by` and `reason` are cut: the fact holds it, and every reader of the run reads it.
 */
const CANCEL_REASON_TEXT = 2_000
/** What a held run's wait for its holder's decision is rejected with by `cancel()`: read as the caller's abort. */
const CANCEL_WAKE = Symbol('cancelled by a handle')

/** How much of a tool's failure message, and of its signal's reason, an `outcome_unknown` message quotes. */
const SHOWN_IN_OUTCOME = 1_000
const SHOWN_LIMIT = "the {limit} an outcome's message quotes of it"

/**
 * How a call of a tool with effects that threw once its signal aborted is told (`tool` its name, and
 * its operation in a run): see `runToolCall`. A tool that threw the signal's reason itself (as `fetch`
 * does), or a failure in the same words, has them said once; `attempts`, when the call made more than
 * one (its `retry`), are told beside them, not in the failure's words.
 */
export function thrownAfterAbort(tool: string, message: string, reason: string, attempts = 1): string {
  const same = message === reason
  const when = attempts === 1 ? 'after its signal aborted' : `after ${attemptsShown(attempts)}, the last after its signal aborted`
  return `tool ${tool} failed ${when} (${reason})${same ? '' : `: ${messageWithin(message, SHOWN_IN_OUTCOME, SHOWN_LIMIT)}`}; its effect may or may not have happened`
}

/**
 * How a call left uncertain is told (the run's `outcome_unknown` message, `callTool`'s `unknown`):
 * `tool` is its name (and operation id). One whose tool threw an {@link OutcomeUnknownError} is told
 * in the tool's words; one that threw once its signal had aborted, as {@link thrownAfterAbort} says.
 */
export function uncertainMessage(tool: string, result: { message: string; uncertain: string; attempts?: number | undefined; declared?: boolean | undefined }): string {
  if (result.declared !== true) return thrownAfterAbort(tool, result.message, result.uncertain, result.attempts)
  const attempts = result.attempts ?? 1
  const when = attempts === 1 ? 'reported its outcome unknown' : `failed after ${attemptsShown(attempts)}, the last reporting its outcome unknown`
  return `tool ${tool} ${when}: ${messageWithin(result.message, SHOWN_IN_OUTCOME, SHOWN_LIMIT)}; its effect may or may not have happened`
}

/** How a call the engine stopped waiting for is told: past `timeoutMs` (`whose`, when given) and the grace after its signal aborted. */
export const notWaitedFor = (timeoutMs: number, whose?: string): string =>
  `did not finish within ${timeoutMs.toLocaleString('en-US')} ms${whose === undefined ? '' : ` (${whose})`}, nor within ${TOOL_TIMEOUT_GRACE_MS.toLocaleString('en-US')} ms of its signal aborting`

/** How a call of a `readOnly` tool the engine stopped waiting for is recorded and told: see {@link notWaitedFor}. */
export const notWaitedForReadOnly = (timeoutMs: number, whose: string): string =>
  `the tool ${notWaitedFor(timeoutMs, whose)}, and was not waited for: what it returns later is not recorded`

/** Members of every object and items of every array in `value`, to tell whether a copy merged two keys. */
function memberCount(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0
  const members = Array.isArray(value) ? value : Object.values(value)
  let count = members.length
  for (const member of members) count += memberCount(member)
  return count
}

/**
 * A call's result as its settlement records it. `uncertain`: the tool threw once its signal had
 * aborted (the abort's reason, redacted), or threw an {@link OutcomeUnknownError} (`declared`, its
 * message), on attempt `attempts` when that was not the first: see {@link runToolCall} and
 * {@link uncertainMessage}.
 */
export type ToolResult = { ok: true; value: unknown } | { ok: false; message: string; uncertain?: string; attempts?: number; declared?: boolean }

/** One attempt's result, and what it threw when it threw before it settled (the only failure a retry may follow). */
type AttemptResult = { result: ToolResult | typeof ABANDONED; thrown?: { error: unknown } }

/** What {@link runToolCall} gives each attempt's context, besides the signal and the attempt. */
export interface ToolCallContext {
  operationId: string
  invocation: Invocation
  addSecret: (secret: unknown) => void
  progress?: ((text: string, attempt: number) => void) | undefined
  /** Taken as each attempt's `execute` starts; what it returns is called once that attempt's promise settles (see `LogInternals.lease`). */
  lease?: (() => () => void) | undefined
}

/**
 * Runs one dispatched call of `tool` as the engine does, after its dispatch is durable: a copy of
 * `input`, a context with the call's ids, the tool's `timeoutMs` (else `toolTimeoutMs`) applied
 * to each attempt with `timedCall`; resolves with what its settlement records (`toolResult`, or the
 * failure's message passed through `redactMessage` and cut at `maxToolResultBytes`), or `ABANDONED`
 * for a tool with effects not waited for (a `readOnly` one then fails: {@link notWaitedForReadOnly}).
 *
 * A tool with effects (not `readOnly`) that throws once its signal has aborted (its `timeoutMs`,
 * a cancel, the application's shutdown signal) is `uncertain`: the abort may have cut short a request its
 * server had already received and acted on (a `fetch` given the signal rejects with the abort,
 * whatever the server did), so a failure recorded then would be a claim nobody can make, and the
 * model, told the call failed, would make it again under another operation id. What a tool returns
 * after the abort is known, and recorded as usual.
 *
 * With the tool's `retry`, an attempt that threw is followed by another, under the same operation id,
 * after a backoff that `gate` ends at once; only once the attempt has settled, never after a result
 * that could not be recorded (the tool ran), an uncertain or abandoned attempt, nor once `gate` has
 * aborted. A failure after more than one attempt says how many were made (an uncertain one in
 * `attempts`), the failure first and any note after it, cut once at `maxToolResultBytes`.
 *
 * `call.addSecret` is the context's `addSecret` (it throws `TOOL_SECRET_INVALID` to the tool): from
 * then on, `redactMessage` (called as each text is redacted, never read ahead) and whatever redacts
 * the result must remove the value too, on every later attempt as well.
 *
 * `call.progress`, when there is one, gets each value the context's `progress` was given, as its
 * checked JSON text ({@link progressText}), and the attempt: never once the attempt's signal has
 * aborted or the attempt has settled. Without it the value is still checked, and dropped.
 */
export async function runToolCall(
  tool: ToolDefinition,
  input: unknown,
  gate: AbortSignal,
  call: ToolCallContext,
  limits: { toolTimeoutMs?: number | undefined; maxToolResultBytes: number },
  redactMessage: (text: string) => string = (text) => text,
): Promise<ToolResult | typeof ABANDONED> {
  const policy = retryPolicyOf(tool.retry)
  for (let attempt = 1; ; attempt += 1) {
    const { result, thrown } = await runAttempt(tool, input, gate, { ...call, attempt }, limits, redactMessage)
    if (result === ABANDONED || result.ok) return result
    // The failure as the attempt made it (redacted, not yet cut at maxToolResultBytes), told with the count and
    // any note after it, the whole redacted, then cut once: the cut's note states the size of what was cut, and
    // the failure comes first, so a long note cannot push it past the cut.
    const failed = (note = ''): ToolResult => ({
      ok: false,
      message: messageWithin(attempt === 1 && note === '' ? result.message : redactMessage(`after ${attemptsShown(attempt)}: ${result.message}${note}`), limits.maxToolResultBytes),
    })
    if (result.uncertain !== undefined) {
      // Its effect may have happened, and the run ends outcome_unknown; the count is told beside the failure (see thrownAfterAbort).
      const message = result.message === result.uncertain ? result.message : messageWithin(result.message, limits.maxToolResultBytes)
      return { ...result, message, ...(attempt === 1 ? {} : { attempts: attempt }) }
    }
    if (thrown === undefined || attempt > policy.retries || gate.aborted) return failed()
    const decided = retryWanted(policy, thrown.error, attempt)
    if (decided.threw !== undefined) {
      // Told, redacted and cut as an abort's reason is: a bug in retryOn is not a decision to stop.
      const why = messageWithin(redactMessage(failureText(decided.threw.error, redactMessage)), SHOWN_IN_OUTCOME, SHOWN_LIMIT)
      // After a retry was made, what it stopped is the next one.
      return failed(` (no ${attempt === 1 ? '' : 'further '}retry was made: its retryOn threw: ${why})`)
    }
    if (!decided.wanted) return failed()
    const stopped = await backedOff(gate, retryBackoff(policy, attempt))
    if (stopped !== undefined) {
      const reason = messageWithin(redactMessage(messageOf(stopped.reason)), SHOWN_IN_OUTCOME, SHOWN_LIMIT)
      return failed(` (no further attempt was started: its signal aborted during the backoff: ${reason})`)
    }
  }
}

const attemptsShown = (attempts: number): string => `${attempts.toLocaleString('en-US')} attempt${attempts === 1 ? '' : 's'}`

/** Waits `ms` milliseconds, or less if `gate` aborts: then resolves with its reason (wrapped, for a reason that is `undefined`). */
function backedOff(gate: AbortSignal, ms: number): Promise<{ reason: unknown } | undefined> {
  if (gate.aborted) return Promise.resolve({ reason: gate.reason })
  return new Promise((resolve) => {
    const timer = setTimeout(() => done(undefined), ms)
    const stopListening = onAbort(gate, () => done({ reason: gate.reason }))
    function done(stopped: { reason: unknown } | undefined) {
      clearTimeout(timer)
      stopListening()
      resolve(stopped)
    }
  })
}

/** One attempt of {@link runToolCall}: the tool's `execute` under its `timeoutMs`. */
async function runAttempt(
  tool: ToolDefinition,
  input: unknown,
  gate: AbortSignal,
  call: ToolCallContext & { attempt: number },
  limits: { toolTimeoutMs?: number | undefined; maxToolResultBytes: number },
  redactMessage: (text: string) => string,
): Promise<AttemptResult> {
  const timeoutMs = tool.timeoutMs ?? limits.toolTimeoutMs
  let given: AbortSignal | undefined
  // Until the attempt has settled: a timer or a stream the tool left behind reports nothing after it.
  let settled = false
  // The attempt's lease on the log (see `LogInternals.lease`).
  let letGo: (() => void) | undefined
  try {
    const run = (signal: AbortSignal) => {
      given = signal
      const { attempt, progress } = call
      const context: ToolContext = {
        signal,
        operationId: call.operationId,
        attempt,
        timeoutMs,
        invocation: { ...call.invocation },
        addSecret: (secret: string) => call.addSecret(secret),
        progress: (value?: unknown) => {
          // A cancelled call, or one past its time, is winding down: what it reports then is dropped, not refused.
          if (settled || signal.aborted) return
          const text = progressText(value, redactMessage)
          progress?.(text, attempt)
        },
      }
      // Held until the tool's own promise settles, or until the engine gives up on it (past its time
      // limit): from then its run records the call as uncertain, so no later open can tell it otherwise.
      const release = call.lease?.()
      letGo = release
      let running: Promise<ToolResult>
      try {
        running = toolResult(tool.execute(structuredClone(input), context), { limit: limits.maxToolResultBytes, readOnly: tool.readOnly === true })
      } catch (error) {
        release?.()
        throw error
      }
      if (release !== undefined) running.then(release, release)
      return running
    }
    if (timeoutMs === undefined) return { result: await run(gate) }
    const whose = tool.timeoutMs === undefined ? "the engine's toolTimeoutMs" : 'its timeoutMs'
    const result = await timedCall(gate, timeoutMs, whose, run)
    if (result === ABANDONED) letGo?.()
    // A read-only tool has no effect to be uncertain about: not waited for, it failed, as a throw would.
    if (result === ABANDONED && tool.readOnly === true) return { result: { ok: false, message: notWaitedForReadOnly(timeoutMs, whose) } }
    return { result }
  } catch (error) {
    // Each part redacted before it is cut, and the whole redacted before its cut: a secret across a cut would otherwise be kept in part.
    // Cut at maxToolResultBytes by runToolCall, once it is told with what goes with it.
    const message = failureWithin(redactMessage(failureText(error, redactMessage)))
    // The tool says it cannot tell whether its effect happened: uncertain, as a crash leaves a call, never
    // a failure the model would make again. A read-only tool has no effect to be unsure of: its failure.
    if (tool.readOnly !== true && isOutcomeUnknown(error)) {
      const said = message.startsWith(`${OUTCOME_UNKNOWN_NAME}: `) ? message.slice(OUTCOME_UNKNOWN_NAME.length + 2) : message
      return { result: { ok: false, message: said, uncertain: said, declared: true } }
    }
    // Read as the rejection arrives: the signal the tool was given had aborted by then.
    if (given?.aborted === true && tool.readOnly !== true) {
      const reason = messageWithin(redactMessage(messageOf(given.reason)), SHOWN_IN_OUTCOME, SHOWN_LIMIT)
      // The reason itself thrown is told as the reason, in its words (see thrownAfterAbort), not under its name as well.
      return { result: { ok: false, message: error === given.reason ? reason : message, uncertain: reason } }
    }
    return { result: { ok: false, message }, thrown: { error } }
  } finally {
    settled = true
  }
}

/** What the tool a result belongs to is: the bound on its JSON, and whether it has effects (not `readOnly`). */
interface ResultOf {
  limit: number
  readOnly: boolean
}

/**
 * A result that could not be recorded, and why. Told a call "failed", a model retries it: for a tool
 * with effects that would do them twice (a second charge), so it is told they happened; a `readOnly`
 * tool can be asked again, for less when its result was too large (`tooLarge`).
 */
const unrecorded = (why: string, { readOnly }: ResultOf, tooLarge = false): ToolResult => ({
  ok: false,
  message: `the tool ran, but its result could not be recorded: ${why}${
    readOnly ? (tooLarge ? '; ask for less of it' : '') : "; the call's effect has happened, so do not call the tool again to redo it"
  }`,
})

const bytesShown = (bytes: number): string => `${bytes.toLocaleString('en-US')} byte${bytes === 1 ? '' : 's'}`

/** `call` without its `extraContent`. */
function withoutExtraContent({ extraContent: _, ...call }: ToolCall): ToolCall {
  return call
}

/**
 * `output` with its provider state (`reasoningDetails`, each call's `extraContent`) as a fact can hold
 * it once redacted: redaction can make it longer than its bounds, and it is then left out, not the answer.
 */
function boundedState(output: ModelOutput): ModelOutput {
  let result = output
  if (output.reasoningDetails !== undefined) {
    const { reasoningDetails, ...rest } = output
    const kept = reasoningDetailsOf(reasoningDetails)
    result = kept === undefined ? rest : { ...rest, reasoningDetails: kept }
  }
  if (!output.toolCalls.some((call) => call.extraContent !== undefined)) return result
  return {
    ...result,
    toolCalls: result.toolCalls.map((call) => {
      if (call.extraContent === undefined) return call
      const kept = extraContentOf(call.extraContent)
      return kept === undefined ? withoutExtraContent(call) : { ...call, extraContent: kept }
    }),
  }
}

/**
 * `fact`, or, when its bytes as the log writes them still spell one of `secrets` (see `holdsSecretBytes`:
 * msgpack's own bytes between members complete what no member holds alone), `fact` with as few of
 * `steps` (each replaces one member by `[redacted]`) as leave it spelling none: applied one after
 * another until it spells none, then each left out again where it spells none without it. Packs the
 * fact once when it spells none (the rest only when it does), and not at all for a run without secrets.
 */
function guardedBy<F extends Fact>(fact: F, secrets: Secrets, stepsOf: () => readonly ((given: F) => F)[]): F {
  if (!holdsSecretBytes(fact, secrets)) return fact
  // Made only now: nearly every fact spells no secret, and a step or model answer would build them for nothing.
  const steps = stepsOf()
  const applied: number[] = []
  let guarded = fact
  for (const [index, step] of steps.entries()) {
    guarded = step(guarded)
    applied.push(index)
    if (!holdsSecretBytes(guarded, secrets)) break
  }
  // Every member replaced and it still does: what is left is the engine's own (ids, types), recorded as it is.
  if (holdsSecretBytes(guarded, secrets)) return guarded
  let needed = applied
  for (const index of applied) {
    const without = needed.filter((other) => other !== index)
    if (!holdsSecretBytes(without.reduce((given, other) => (steps[other] as (given: F) => F)(given), fact), secrets)) needed = without
  }
  return needed.reduce((given, other) => (steps[other] as (given: F) => F)(given), fact)
}

/**
 * What a tool's `execute` returned, settled and made plain JSON ({@link jsonOutput}) of at most
 * `limit` UTF-8 bytes; a rejection is the tool's failure and throws. Returned without a promise, a
 * value whose `then` cannot even be read (a getter that throws, a revoked proxy) is a result that
 * could not be recorded, not a failure of the tool, which has run: awaiting it would read `then` and
 * pass the getter's error off as the tool's.
 */
async function toolResult(returned: unknown, of: ResultOf): Promise<ToolResult> {
  if (returned === null || (typeof returned !== 'object' && typeof returned !== 'function')) return jsonOutput(returned, of)
  let native: boolean
  try {
    // `instanceof` reads the value too (its prototype): a revoked proxy throws there.
    native = returned instanceof Promise
  } catch (error) {
    return unrecorded(`it cannot be read (${messageOf(error)})`, of)
  }
  if (native) return jsonOutput(await returned, of)
  let then: unknown
  try {
    then = (returned as { then?: unknown }).then
  } catch (error) {
    return unrecorded(`its then member cannot be read (${messageOf(error)})`, of)
  }
  if (typeof then === 'function') return jsonOutput(await (returned as PromiseLike<unknown>), of)
  // What execute itself is, when it is a generator function (`async *execute`, the AI SDK's streaming
  // tools; `*execute`): its body has not run at all.
  return jsonOutput(returned, of, isGenerator(returned))
}

/** Whether `value` is a generator object (of a `function*` or an `async function*`). */
function isGenerator(value: unknown): boolean {
  try {
    const tag = Object.prototype.toString.call(value)
    return tag === '[object Generator]' || tag === '[object AsyncGenerator]'
  } catch {
    return false
  }
}

/**
 * Makes a tool's output plain JSON (what a fact can hold) as JSON makes it (a Date becomes its text,
 * an undefined member is dropped), a BigInt as its decimal text, and a lone surrogate (a string cut
 * mid-character) as U+FFFD, as model text is recorded; or explains why it cannot be: it is not JSON,
 * no fact can hold it, or its JSON text is over `limit` UTF-8 bytes. The tool has run either way:
 * the explanation tells the model so, for it not to call the tool again.
 */
function jsonOutput(output: unknown, of: ResultOf, unrun = false): ToolResult {
  const { limit } = of
  // JSON writes an iterator or an async iterable as `{}`: recorded so, an `async function*` execute (the
  // AI SDK's streaming tools) would settle `succeeded` with `{}` and its body never run. That one has done
  // nothing, and fails; any other (a stream, a generator a promise gave) came of an execute that ran,
  // whose effects are told to have happened, as for every result that cannot be recorded.
  const iterable = unreadIterable(output)
  if (iterable !== undefined && unrun) {
    return { ok: false, message: `the tool returned ${iterable}, which was not read (JSON would record it as {}): iterate it in execute and return what it gives (its parts can go to context.progress)` }
  }
  let text: string
  try {
    text = JSON.stringify(output ?? null, outputReplacer) ?? 'null'
  } catch (error) {
    if (error instanceof UnreadValue) return unrecorded(error.message, of)
    return unrecorded(`it is not JSON (${messageOf(error)})`, of)
  }
  // Counted only when it could be over: a character takes 1 to 3 bytes.
  const bytes = text.length * 3 > limit ? Buffer.byteLength(text) : 0
  if (bytes > limit) {
    return unrecorded(`it is ${bytesShown(bytes)} of JSON, over the engine's limit of ${bytesShown(limit)} (maxToolResultBytes)`, of, true)
  }
  let value: unknown = JSON.parse(text)
  // Stored as the event's fact.outcome.output: three levels down.
  let problem = storageProblemAt(value, 3)
  // A lone surrogate is the one problem a copy can mend; the copy is made only for an output that has a problem.
  if (problem !== undefined) {
    try {
      const fixed = wellFormed(value)
      // Two keys that differ only in a lone surrogate would become one: then the output is not recorded.
      if (memberCount(fixed) === memberCount(value)) {
        value = fixed
        problem = storageProblemAt(value, 3)
      }
    } catch {
      // Nested too deep to copy: the problem stands.
    }
  }
  return problem ? unrecorded(`a fact cannot hold it exactly: ${problem}`, of) : { ok: true, value }
}

/** Thrown by {@link outputReplacer}: a value JSON would write as `{}` though it holds more, or as a number for each byte (its message says what to return instead). */
class UnreadValue extends Error {}

/**
 * The replacer a tool's output is made JSON with: a BigInt as its text; an `Error` as its `name` and
 * `message` with its own members ({@link errorAsJson}). A Map, a Set, a `Response`, an iterator or
 * an async iterable, binary data, a WeakMap, a WeakSet, a WeakRef, a Promise or an object that JSON
 * would write as `{}` though it is no plain object ({@link unreadObject}), none with a `toJSON` of
 * its own, anywhere in the output, throws {@link UnreadValue}: JSON would write each as `{}` (binary
 * data as a number for each byte), and the call settle `succeeded` with what it held lost.
 */
function outputReplacer(this: unknown, key: string, value: unknown): unknown {
  if (value === null || typeof value !== 'object') return bigIntAsText(key, value)
  if (Array.isArray(value)) return value
  if (value instanceof Map) throw new UnreadValue(`${placeOf(key)} a Map, which JSON would record as {}: return Object.fromEntries(map) or [...map] instead`)
  if (value instanceof Set) throw new UnreadValue(`${placeOf(key)} a Set, which JSON would record as {}: return [...set] instead`)
  if (typeof Response === 'function' && value instanceof Response) {
    throw new UnreadValue(`${placeOf(key)} a Response, its body not read (JSON would record it as {}): return await response.json() (or .text()) instead`)
  }
  const iterable = unreadIterable(value)
  if (iterable !== undefined) {
    throw new UnreadValue(`${placeOf(key)} ${iterable}, not read (JSON would record it as {}): iterate it in execute and return what it gives (its parts can go to context.progress)`)
  }
  const unread = unreadObject(this, key, value)
  if (unread !== undefined) throw new UnreadValue(`${placeOf(key)} ${unread}`)
  return isErrorObject(value) ? errorAsJson(value) : value
}

/** Whether `value` is an `Error`: of this realm, or made by another's (`node:vm`, a test runner's context), which `instanceof` does not see. */
const isErrorObject = (value: object): value is Error => value instanceof Error || isNativeError(value)

/** Where in a tool's output the value at `key` is, as a refusal names it. */
const placeOf = (key: string): string => (key === '' ? 'it is' : `its member ${JSON.stringify(key.length > 60 ? `${key.slice(0, 60)}…` : key)} is`)

/**
 * What `output` is when it is an iterator (a generator, or any object with a `next` method and
 * nothing else JSON writes) or an async iterable (an async generator, a stream) that JSON would write
 * as `{}` without reading it; `undefined` for anything else, an array or a value with its own `toJSON`
 * included. A member that cannot be read is left to `JSON.stringify`.
 */
function unreadIterable(output: unknown): string | undefined {
  if (output === null || typeof output !== 'object' || Array.isArray(output)) return undefined
  try {
    const value = output as { toJSON?: unknown; next?: unknown; [Symbol.asyncIterator]?: unknown; [Symbol.iterator]?: unknown }
    if (typeof value.toJSON === 'function') return undefined
    if (typeof value[Symbol.asyncIterator] === 'function') return 'an async iterable (an async function*, a stream)'
    if (typeof value.next === 'function') {
      if (typeof value[Symbol.iterator] === 'function') return 'an iterator (a function*)'
      if (nothingWritten(value)) return 'an iterator (an object with a next method)'
    }
  } catch {
    // A getter or a proxy trap that throws: JSON.stringify meets it too, and says so.
  }
  return undefined
}

/** Whether JSON writes none of `value`'s own members (each a function, a symbol or undefined). */
function nothingWritten(value: object): boolean {
  for (const name in value) {
    if (!Object.hasOwn(value, name)) continue
    const member = (value as Record<string, unknown>)[name]
    if (member !== undefined && typeof member !== 'function' && typeof member !== 'symbol') return false
  }
  return true
}

/** The bytes' types of typed arrays: told to return base64 text; the others' elements are numbers, told to return an array. */
const BYTE_ARRAYS = new Set(['Uint8Array', 'Uint8ClampedArray'])

/**
 * What `value` (a member `key` of `holder`, no array; after its own `toJSON`, if any) is, and what to
 * return instead, when JSON would write it as `{}` (or binary data as a number for each byte) though
 * it holds more: binary data (a `Buffer`, whose `toJSON` is Node's own, a typed array, a `DataView`,
 * an `ArrayBuffer`), a WeakMap, a WeakSet, a WeakRef, a Promise, or an object of a class with no
 * members of its own (its data in getters or private fields: JSON writes only own members).
 * `undefined` for a plain object, an `Error` ({@link errorAsJson}) and an object with members.
 */
function unreadObject(holder: unknown, key: string, value: object): string | undefined {
  const prototype: unknown = Object.getPrototypeOf(value)
  if (prototype === null || Object.getPrototypeOf(prototype) === null) {
    // A plain object, or what a Buffer's toJSON made of it ({ type, data }): the Buffer is still the holder's
    // member, read without calling a getter (JSON.stringify called it once already).
    if (!Object.hasOwn(value, 'data') || !Object.hasOwn(value, 'type')) return undefined
    const own = Object.getOwnPropertyDescriptor(holder, key)
    if (own !== undefined && 'value' in own && own.value !== value && Buffer.isBuffer(own.value) && (own.value as { toJSON?: unknown }).toJSON === Buffer.prototype.toJSON) {
      return `a Buffer, which JSON would record as {"type":"Buffer","data":[…]}, a number for each byte: return buffer.toString('base64') instead`
    }
    return undefined
  }
  if (ArrayBuffer.isView(value)) {
    if (value instanceof DataView) {
      return "a DataView, which JSON would record as {}: return its bytes as base64 text instead (Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64'))"
    }
    const type = Object.prototype.toString.call(value).slice(8, -1)
    return BYTE_ARRAYS.has(type)
      ? `a ${type}, which JSON would record as an object of its bytes by index: return Buffer.from(bytes).toString('base64') instead`
      : `${withArticle(type)}, which JSON would record as an object of its elements by index: return Array.from(array) instead`
  }
  if (value instanceof ArrayBuffer) return "an ArrayBuffer, which JSON would record as {}: return Buffer.from(arrayBuffer).toString('base64') instead"
  if (typeof SharedArrayBuffer === 'function' && value instanceof SharedArrayBuffer) {
    return "a SharedArrayBuffer, which JSON would record as {}: return Buffer.from(buffer).toString('base64') instead"
  }
  if (value instanceof WeakMap || value instanceof WeakSet) {
    return `a ${value instanceof WeakMap ? 'WeakMap' : 'WeakSet'}, which JSON would record as {} (its entries cannot be listed): return what it holds as a plain object or an array instead`
  }
  if (value instanceof WeakRef) return 'a WeakRef, which JSON would record as {}: return ref.deref() instead'
  if (value instanceof Promise) return 'a Promise, which JSON would record as {}: await it in execute and return what it gives instead'
  if (isErrorObject(value)) return undefined
  for (const name in value) if (Object.hasOwn(value, name)) return undefined
  // A boxed number, string or boolean (`new Number(3)`), of any realm: JSON writes its primitive.
  if (isBoxedPrimitive(value)) return undefined
  const kind = withArticle(classOf(prototype as object))
  const what = typeof (value as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function' ? '[...value] (or a plain object of what it holds)' : 'a plain object of what it holds'
  return `${kind} with no members of its own, which JSON would record as {} (it writes neither getters nor private fields): return ${what} instead`
}

/** Whether `value` holds a number, a string or a boolean (`new Number(3)`), which JSON writes as that primitive. */
function isBoxedPrimitive(value: object): boolean {
  for (const valueOf of [Number.prototype.valueOf, String.prototype.valueOf, Boolean.prototype.valueOf] as ((this: unknown) => unknown)[]) {
    try {
      valueOf.call(value)
      return true
    } catch {
      // Not of this kind.
    }
  }
  return false
}

/** The name of the class whose `prototype` this is (cut at 60 characters), `object` when it has none that can be read. */
function classOf(prototype: object): string {
  try {
    const name: unknown = (prototype as { constructor?: { name?: unknown } }).constructor?.name
    if (typeof name === 'string' && name !== '') return `${name.length > 60 ? `${name.slice(0, 60)}…` : name} object`
  } catch {
    // A getter that throws: the class stays unnamed.
  }
  return 'object of a class'
}

const withArticle = (noun: string): string => `${/^[aeio]/i.test(noun) ? 'an' : 'a'} ${noun}`

/**
 * An `Error` in a tool's output as JSON writes what it holds: its `name` and `message` (JSON
 * would write neither, nor its stack, which names the machine's paths), then its own members (a
 * Node error's `code`) as JSON writes them. Throw an error to fail the call instead.
 */
function errorAsJson(error: Error): Record<string, unknown> {
  return { name: error.name, message: error.message, ...(error as object) }
}

/**
 * A tool's failure message of at most `limit` UTF-8 bytes: a longer one is cut there, with a note
 * that says so and names the limit (`whose`: the engine's `maxToolResultBytes`, or a part of an
 * outcome's message that is kept short).
 */
function messageWithin(message: string, limit: number, whose = "the engine's limit of {limit}, maxToolResultBytes"): string {
  if (message.length * 3 <= limit) return message
  const bytes = Buffer.from(message)
  if (bytes.length <= limit) return message
  // Cut at a character's start: a UTF-8 continuation byte is 10xxxxxx.
  let end = limit
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end -= 1
  return `${bytes.subarray(0, end).toString()}… (cut: the message is ${bytesShown(bytes.length)}, over ${whose.replace('{limit}', bytesShown(limit))})`
}

export class InvocationActor implements GateOwner {
  readonly gate: Gate
  readonly done: Promise<InvocationOutcome>
  #snapshot: InvocationSnapshot
  #ordinal = 1
  /** The run's own facts so far; let go when the run ends (see `#release`). */
  #own: RuntimeEvent[]
  /** Built at the first model request (a run held before it never needs one), then fed fact by fact; let go when the run ends. */
  #transcript: TranscriptBuilder | undefined
  /**
   * The signal a model request, a tool (`context.signal`) and a back-off get: aborted when the
   * caller's signal aborts (with its reason), when a handle's `cancel()` comes first (with its), or
   * when the log closes under the run. Made at its first use: a run held before any request
   * (thousands may be) keeps none.
   */
  #work: AbortController | undefined
  /** Stops forwarding the caller's abort (see abort-listeners.ts). */
  #unforward: (() => void) | undefined
  /** Set when the log closed under the run: nothing more can be recorded, so the run stops with it. */
  #stopped: FactstateError | undefined
  /** Set by `cancel()` (a handle's), when it came before the caller's signal aborted: the reason it gave. */
  #cancel: { reason: string } | undefined
  /** The reservation whose hold the run is in, while it waits for the holder's decision. */
  #holding: Reservation | undefined
  /** Why a cancel sealed no `sealOnCancel` hold (see `#sealOnCancel`): what its `ready()` is refused with says it. */
  #unsealed: string | undefined
  /** Facts get the default id and the system clock from here on (see `#run`'s failure path). */
  #fallback = false
  /**
   * The text and tool calls of the attempt in flight as passed on so far, while the run's caller
   * takes either (see `liveText()`, `liveToolCalls()`). One field for both: a held run has none, and
   * a field more costs each held run its slot.
   */
  #live: { requestSeq: number; stepId: string; attempt: number; text: LiveText | undefined; calls: LiveToolCalls | undefined } | undefined
  private readonly setup: Omit<ActorSetup, 'snapshot' | 'gate' | 'cancel'>

  constructor({ snapshot, gate, cancel, ...setup }: ActorSetup) {
    // The first snapshot is not kept in `setup`: the actor holds only the current one (nor are the gate and cancel, used here once).
    this.setup = setup
    // The actor answers for its run's gate (holdRefusal, holdSecrets): no closure more per run.
    this.gate = gate ?? new Gate(setup.invocation, this)
    this.gate.refuseWith(this)
    this.#snapshot = snapshot
    this.#own = [setup.opened]
    if (cancel !== undefined) this.cancel(cancel, true)
    this.done = new Promise<InvocationOutcome>((resolve, reject) => {
      // Let the caller of `start` take a reservation before the first safe point is checked.
      setImmediate(() => this.#run().then(resolve, reject))
    })
  }

  get #signal(): AbortSignal {
    if (this.#work === undefined) {
      const work = new AbortController()
      this.#work = work
      // A cancelled (or stopped) run takes no hold: one still waiting for a safe point is refused now,
      // and so is every later reservation, not once the run has ended (a tool of this run that waits
      // for one would otherwise never settle).
      work.signal.addEventListener(
        'abort',
        () => {
          const refusal = this.#noMoreHolds()
          this.gate.closed ??= refusal
          const pending = this.gate.pending()
          // One to be sealed on a cancel waits for the safe point the cancel reaches (see `#sealOnCancel`).
          if (pending && (!pending.sealOnCancel || this.#stopped)) pending.abandon(refusal)
        },
        { once: true },
      )
      const caller = this.setup.signal
      if (this.#stopped) work.abort(this.#stopped)
      else if (this.#cancel) work.abort(this.#cancel.reason)
      else if (caller?.aborted) work.abort(caller.reason)
      else if (caller) {
        this.#unforward = onAbort(caller, () => work.abort(caller.reason))
      }
    }
    return this.#work.signal
  }

  /** Why a cancelled or stopped run takes no hold. */
  #noMoreHolds(): FactstateError {
    const { invocationId } = this.setup.invocation
    return unavailable(this.#stopped ? `invocation ${invocationId} stopped: ${this.#stopped.message}` : `invocation ${invocationId} is being cancelled`)
  }

  /** Cancelled by the caller (its signal, or a handle's `cancel()`), or stopped by the log closing. */
  get #aborted(): boolean {
    return this.#stopped !== undefined || this.#cancel !== undefined || this.setup.signal?.aborted === true
  }

  /** For its gate (`GateOwner`): refused from the abort on, also before the run's first request (when the abort is not yet forwarded). */
  holdRefusal(): FactstateError | undefined {
    return this.#aborted ? this.#noMoreHolds() : undefined
  }

  /** For its gate (`GateOwner`): an intent's members may not be the run's secrets, those a tool or the client added included. */
  holdSecrets(): Secrets {
    return this.setup.secrets
  }

  /**
   * Cancels the run as its caller's signal aborting with `reason` would (a handle's `cancel()`): the
   * first of the two decides the source, and once the run is cancelled or stopped it does nothing.
   * The actor's own signal (`#signal`) aborts with it, and a hold waiting for its holder's decision
   * is woken as the caller's abort wakes it. Nothing is made for it before it is called: a run held
   * at once keeps no controller, as without a caller's signal.
   */
  cancel(reason: string, first = false): void {
    // `first`: asked for while the run was being admitted, before its signal aborted (which then came second).
    if (this.#stopped !== undefined || this.#cancel !== undefined || (!first && this.setup.signal?.aborted === true)) return
    this.#cancel = { reason }
    // Made now if no request, tool or back-off made it yet: its abort refuses holds (see `#signal`).
    if (this.#work === undefined) void this.#signal
    else this.#work.abort(reason)
    this.#holding?.decision.reject(CANCEL_WAKE)
  }

  /** Stops the run where it waits (called by the log as it closes): nothing more can be recorded. */
  stop(error: FactstateError): void {
    this.#stopped ??= error
    this.#work?.abort(error)
    // A sealOnCancel reservation the abort left waiting for a safe point (see `#signal`): a stopped
    // run reaches none, and its signal aborts no more, so it is refused here.
    const pending = this.gate.pending()
    if (pending?.sealOnCancel) pending.abandon(this.#noMoreHolds())
    this.#holding?.decision.reject(error)
  }

  /**
   * Ends the run as cancelled (or sealed, for a reservation that asked for it: `#sealOnCancel`), or
   * stops it (throws `LOG_CLOSED`) if it was the log that closed. Called at a safe point.
   */
  async #halt(): Promise<never> {
    if (this.#stopped) throw this.#stopped
    await this.#sealOnCancel()
    return this.#cancelled()
  }

  /**
   * At the safe point a cancel reached: takes the hold of a pending `sealOnCancel` reservation and
   * seals it in one append (`hold.entered`, `invocation.ended{handoff_paused}`), ending the run
   * (throws `Ended`). Returns, nothing written, when no hold can be taken here (the final answer given,
   * the budget spent: kept in `#unsealed`) or the log refuses its successor; the run then ends cancelled.
   */
  async #sealOnCancel(): Promise<void> {
    const reservation = this.gate.pending()
    if (!reservation?.sealOnCancel) return
    const { context } = this.#snapshot
    // Cut short by the cancel or in its back-off, the last request is the successor's first, as in a back-off's hold (see `#pauseFor`).
    const retrying = this.#own.at(-1)?.fact.type === 'model.interrupted'
    const { budget } = this.setup
    this.#unsealed =
      stateOf(this.#snapshot) !== 'safePoint'
        ? 'the cancel reached no safe point'
        : context.answered
          ? 'the run had given its final answer'
          : context.stepsUsed >= budget && !retrying
            ? `${budget === 1 ? 'its one model step is spent' : `all ${budget} model steps are spent`}, none left for a successor`
            : undefined
    if (this.#unsealed !== undefined) return
    const pause = this.#pauseFor(reservation, retrying)
    reservation.seal()
    try {
      await this.#recordAll(
        [
          { type: 'hold.entered', handoffId: reservation.intent.handoffId },
          { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } },
        ],
        this.#successorFree(reservation.intent),
      )
    } catch (error) {
      if (!successorTaken(error)) throw error
      // Nothing was written: `ready()` rejects with the refusal, and the run ends cancelled.
      reservation.refuse(error)
      return
    }
    reservation.sealed(pause)
    throw new Ended({ status: 'handoff_paused', pause })
  }

  /** The secrets its tools added and it holds from its parent run: a child run one of its tools starts holds them too (see `passedOn`). */
  get passedOnSecrets(): string[] {
    return passedOn(this.setup.secrets)
  }

  /** The machine state as the actor has it (equal to folding its facts from the log). */
  get snapshot(): InvocationSnapshot {
    return this.#snapshot
  }

  /** Checks `fact` against the machine, appends it (if `precondition` allows, atomically), and only then moves the machine. */
  async #record(fact: Fact, precondition?: Precondition): Promise<number> {
    return (await this.#recordAll([fact], precondition))[0] as number
  }

  /**
   * `fact`, or, when the data it holds (a tool's output, a call's input) still spells one of the run's
   * secrets in the bytes the log would write (see `holdsSecretBytes`: what redacting the data did not
   * read, msgpack's own bytes beside the data's), the fact with that data as `[redacted]`; likewise
   * the words beside a call's input (an approver's, a rejection's message, an unknown tool's name) and
   * a model's answer, whose members each lost the secrets they hold, but not what msgpack's bytes
   * between them complete (see `guardedBy`).
   */
  #guarded(fact: Fact): Fact {
    const secrets = this.setup.secrets.inData
    switch (fact.type) {
      case 'tool.settled':
        if (!holdsSecretBytes(fact, secrets)) return fact
        return { ...fact, outcome: fact.outcome.status === 'succeeded' ? { status: 'succeeded', output: REDACTED } : { ...fact.outcome, message: REDACTED } }
      case 'tool.dispatched':
      case 'tool.rejected':
        // The input, the approver's words, the rejection's message and an unknown tool's name: what of them spells a secret beside the others.
        return guardedBy(fact, secrets, () => [
          (given) => ({ ...given, input: REDACTED }),
          ...(['by', 'reason'] as const).map((key) => (given: typeof fact) => (given.approval?.[key] === undefined ? given : { ...given, approval: { ...given.approval, [key]: REDACTED } })),
          (given) => (given.type === 'tool.rejected' && given.message !== undefined ? { ...given, message: REDACTED } : given),
          (given) => (given.type === 'tool.rejected' && given.reason === 'unknown_tool' ? { ...given, name: REDACTED } : given),
        ])
      case 'model.completed': {
        // The model's words, each on its own: what an answer's members and msgpack's bytes between them spell.
        type Output = typeof fact.output
        return guardedBy(fact, secrets, () => {
          const output = (change: (output: Output) => Output) => (given: typeof fact) => ({ ...given, output: change(given.output) })
          const call = (index: number, key: 'arguments' | 'name' | 'callId') =>
            output((given) => ({ ...given, toolCalls: given.toolCalls.map((one, at) => (at === index ? { ...one, [key]: key === 'callId' ? `${REDACTED} ${index + 1}` : REDACTED } : one)) }))
          const calls = fact.output.toolCalls.map((_, index) => index)
          return [
            output((given) => (given.text ? { ...given, text: REDACTED } : given)),
            output((given) => (given.reasoning ? { ...given, reasoning: REDACTED } : given)),
            // Opaque state (a signature, encrypted reasoning) cannot be `[redacted]` in part and still be of use: left out whole.
            output(({ reasoningDetails: _, ...given }) => given),
            ...calls.map((index) => output((given) => ({ ...given, toolCalls: given.toolCalls.map((one, at) => (at === index ? withoutExtraContent(one) : one)) }))),
            ...calls.map((index) => call(index, 'arguments')),
            output((given) => ({ ...given, finishReason: REDACTED })),
            output(({ responseId: _, requestId: __, ...given }) => given),
            ...calls.flatMap((index) => [call(index, 'name'), call(index, 'callId')]),
          ]
        })
      }
      case 'invocation.ended': {
        // A cancel reason, an outcome's message: each lost the secrets it holds, not what the bytes before it complete.
        const { outcome } = fact
        if (outcome.status === 'cancelled') return guardedBy(fact, secrets, () => [(given) => ({ ...given, outcome: { status: 'cancelled', source: REDACTED } })])
        if (outcome.status === 'failed' && outcome.message !== undefined) return guardedBy(fact, secrets, () => [(given) => ({ ...given, outcome: { ...outcome, message: REDACTED } })])
        return fact
      }
      default:
        return fact
    }
  }

  /**
   * Appends `facts` in one call (one group commit, all or nothing), each checked against the machine
   * after the ones before it. Not to be called again before it returns: the facts' ordinals and
   * snapshots are taken from the actor's as they stand when it starts.
   */
  async #recordAll(facts: readonly Fact[], precondition?: Precondition): Promise<number[]> {
    const events: RuntimeEvent[] = []
    const snapshots: InvocationSnapshot[] = []
    let snapshot = this.#snapshot
    for (const given of facts) {
      const fact = this.#guarded(given)
      snapshot = applyFact(snapshot, fact)
      const ordinal = this.#ordinal + events.length + 1
      events.push(
        canonical({
          id: this.#fallback ? fallbackEventId(this.setup.invocation, ordinal) : this.setup.eventId(this.setup.invocation, ordinal),
          recordedAt: this.#fallback ? Date.now() : this.setup.now(),
          invocation: this.setup.invocation,
          fact,
        }),
      )
      snapshots.push(snapshot)
    }
    const seqs = await this.setup.log.appendAll(events, precondition)
    events.forEach((event, index) => {
      const next = snapshots[index] as InvocationSnapshot
      this.#ordinal += 1
      this.#snapshot = next
      this.#own.push(event)
      this.#transcript?.push(event)
      this.setup.onFact?.(event, next)
    })
    return seqs
  }

  async #end(outcome: InvocationOutcome): Promise<never> {
    await this.#record({ type: 'invocation.ended', outcome })
    // As recorded (see `#guarded`): what `wait()` gives is what the log holds.
    const recorded = this.#own.at(-1)?.fact
    throw new Ended(recorded?.type === 'invocation.ended' ? recorded.outcome : outcome)
  }

  /**
   * How a run ends once the model gave its final answer: completed, unless the provider filtered
   * that answer away entirely (`finish_reason: "content_filter"`, no text): a run that completed
   * with nothing to show would read as a success.
   */
  #answeredOutcome(): InvocationOutcome {
    const last = this.#own.findLast((event) => event.fact.type === 'model.completed')?.fact
    // A final answer with nothing in it is a success only when the model chose to say nothing: one
    // filtered away, or cut at the output limit before any text (a reasoning model can spend all of
    // `max_tokens` on reasoning it does not show), would read as a run that did its job.
    if (last?.type === 'model.completed' && last.output.toolCalls.length === 0 && (last.output.text ?? '').trim() === '') {
      if (last.output.finishReason === 'content_filter') {
        return { status: 'failed', class: 'model_filtered', message: 'the provider filtered the final answer (finish_reason content_filter) and returned no text' }
      }
      if (last.output.finishReason === 'length') {
        const limit = this.setup.execution.mainOutputLimit
        const raise = limit === undefined ? "the provider's own output limit" : `mainOutputLimit (${limit}, sent as max_tokens)`
        return { status: 'failed', class: 'model_truncated', message: `the final answer reached the output limit (finish_reason length) before any text: raise ${raise}` }
      }
    }
    return { status: 'completed' }
  }

  #cancelled(): Promise<never> {
    const reason = this.#cancel !== undefined ? this.#cancel.reason : this.setup.signal?.reason
    // Recorded well-formed, as model text is: a reason cut in the middle of an emoji is still a cancel.
    // Redacted before it is cut (a cut could leave part of a secret), and cut without splitting a pair.
    const source =
      typeof reason === 'string' && reason.length > 0 ? cutText(redact(wellFormed(reason), this.setup.secrets.inData), CANCEL_REASON_TEXT) : isTimeout(reason) ? 'timeout' : 'signal'
    return this.#end({ status: 'cancelled', source })
  }

  async #run(): Promise<InvocationOutcome> {
    const { log } = this.setup
    log.onClose.add(this)
    try {
      for (;;) {
        // A safe point: nothing in flight, every call of the last step settled or rejected.
        if (this.#aborted) await this.#halt()
        const context = this.#snapshot.context
        if (context.answered) await this.#end(this.#answeredOutcome())
        // A spent budget ends the run before any hold: a successor with no step left could do nothing.
        if (context.stepsUsed >= this.setup.budget) {
          const { budget } = this.setup
          const spent = budget === 1 ? 'its one model step is spent' : `all ${budget} model steps are spent`
          // A successor's budget is what its seal left, whatever maxSteps it was given.
          const whose = this.setup.opened.fact.type === 'invocation.opened' && this.setup.opened.fact.input.kind === 'handoff' ? ' (the steps its seal left, remainingSteps)' : ''
          await this.#end({ status: 'failed', class: 'max_steps', message: `${spent}${whose}` })
        }
        const reservation = this.gate.pending()
        if (reservation) await this.#hold(reservation)
        else await this.#step()
      }
    } catch (error) {
      // An attempt cut short by a failure has no text in flight any more.
      this.#live = undefined
      if (error instanceof Ended) {
        const { outcome } = error
        const unsealed = outcome.status === 'cancelled' && this.#unsealed !== undefined ? ` with no hold sealed on the cancel: ${this.#unsealed}` : ''
        this.gate.close(unavailable(`invocation ${this.setup.invocation.invocationId} has ended (${outcome.status === 'failed' ? `failed: ${outcome.class}` : outcome.status})${unsealed}`))
        return error.outcome
      }
      this.gate.close(unavailable(`invocation ${this.setup.invocation.invocationId} stopped: ${(error as Error).message}`))
      // The log refused a fact or failed: try to close the invocation so nothing dangles.
      const message = (error as Error).message
      const outcome: InvocationOutcome = { status: 'failed', class: 'engine_error', message }
      // A model step left open (its answer could not be recorded) is interrupted first, never left in flight.
      const { stepId } = this.#snapshot.context
      if (stateOf(this.#snapshot) === 'awaitingModel' && stepId !== null) {
        try {
          await this.#record({ type: 'model.interrupted', stepId, status: 'failed', message })
        } catch {
          // Refused too: the end below still closes the invocation (the machine accepts it while a request is in flight).
        }
      }
      try {
        await this.#record({ type: 'invocation.ended', outcome })
      } catch {
        // The engine's own `eventId` or `now` may be what failed (an id used twice, a maker or a
        // clock that throws): the end is tried once more with the default id and the system clock,
        // so the invocation does not stay open (and its session busy) until the next recovery.
        this.#fallback = true
        try {
          await this.#record({ type: 'invocation.ended', outcome })
        } catch {
          // The log is unusable (closed or failed); recovery will close it on the next open.
        }
      }
      throw error
    } finally {
      log.onClose.delete(this)
      this.#unforward?.()
      log.live.delete(this.setup.invocation.invocationId)
      this.#release()
    }
  }

  /**
   * Lets go, once the run has ended (however it ended: paused, sealed and failed too), of what only a
   * running run needs: its facts, the transcript built from them and the lineage before it, which
   * hold every tool output and answer the run sent. A handle kept after the end (a page's map of
   * runs to reconnect to) then keeps the outcome, the last snapshot, the closed gate and the run's
   * secrets (its gate's `reserve` still refuses an intent that spells one), not the transcript.
   */
  #release(): void {
    this.#transcript = undefined
    this.#own = []
    this.setup.lineage = []
  }

  /**
   * The pause a commit would seal now. Its parts are the actor's own copies (never the caller's
   * objects): no copy needed. Held in a retry's back-off, the failed step is not spent: its request
   * is the successor's first step, as it would have been this run's retry; so is a request a cancel
   * cut short, for a hold sealed on that cancel (`#sealOnCancel`).
   */
  #pauseFor(reservation: Reservation, retrying: boolean): HandoffPause {
    return {
      intent: reservation.intent,
      remainingSteps: Math.max(0, this.setup.budget - this.#snapshot.context.stepsUsed + (retrying ? 1 : 0)),
      execution: this.setup.execution,
    }
  }

  /**
   * Refuses, atomically with the append, a hold (and its seal) whose successor could never be
   * admitted, by the log's own rule for seals (`successorBlocked`): sealing it would lock the session.
   */
  #successorFree(intent: HandoffIntent): Precondition {
    const { sessionId, invocationId } = this.setup.invocation
    return async (view) => {
      const blocked = await view.successorBlocked(intent, invocationId, sessionId)
      if (blocked) throw successorBlockedError(blocked)
    }
  }

  /** `retrying`: held in the back-off before a retry (see `#pauseFor`). */
  async #hold(reservation: Reservation, retrying = false): Promise<void> {
    const { handoffId } = reservation.intent
    reservation.begin()
    try {
      await this.#record({ type: 'hold.entered', handoffId }, this.#successorFree(reservation.intent))
    } catch (error) {
      if (!successorTaken(error)) throw error
      // Nothing was written: `ready()` rejects with the refusal and the run goes on.
      reservation.refuse(error)
      return
    }
    if (this.#stopped) {
      // The log closed while `hold.entered` was being written: the hold is durable, but no decision could be recorded.
      reservation.abandon(this.#stopped)
      throw this.#stopped
    }
    if (reservation.state === 'cancelled') {
      // Cancelled while `hold.entered` was being written: roll back, as a release would.
      await this.#record({ type: 'hold.released', handoffId })
      return
    }
    reservation.enter(this.#pauseFor(reservation, retrying))
    for (;;) {
      let decision: HoldDecision | 'aborted'
      this.#holding = reservation
      try {
        if (this.#stopped) throw this.#stopped
        // Without a caller's signal only the log closing or a handle's `cancel()` can end the wait
        // (each rejects the decision): no listener to keep.
        decision =
          this.#cancel !== undefined
            ? 'aborted'
            : this.setup.signal === undefined
              ? await reservation.decision.promise
              : await this.#decisionOrAbort(reservation, this.setup.signal)
      } catch (error) {
        if (error !== CANCEL_WAKE) {
          reservation.abandon(new FactstateError('HANDOFF_NOT_HELD', `hold ${handoffId} ended: the log was closed`))
          throw error
        }
        decision = 'aborted'
      } finally {
        this.#holding = undefined
      }
      if (decision === 'aborted') {
        if (reservation.sealOnCancel) await this.#sealHeld(reservation)
        reservation.abandon(new FactstateError('HANDOFF_NOT_HELD', `hold ${handoffId} ended: the run was cancelled`))
        await this.#cancelled()
        return
      }
      if (await this.#decide(reservation, decision)) return
    }
  }

  /**
   * Seals a held `sealOnCancel` hold whose run was cancelled before its holder decided, as `commit()`
   * would (throws `Ended`); returns, nothing written, when the log refuses its successor (the run then ends cancelled).
   */
  async #sealHeld(reservation: Reservation): Promise<void> {
    const pause = reservation.pause as HandoffPause
    try {
      await this.#record({ type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } }, this.#successorFree(pause.intent))
    } catch (error) {
      if (!successorTaken(error)) throw error
      return
    }
    reservation.sealed(pause)
    throw new Ended({ status: 'handoff_paused', pause })
  }

  #decisionOrAbort(reservation: Reservation, signal: AbortSignal): Promise<HoldDecision | 'aborted'> {
    let stop: () => void = () => undefined
    return Promise.race([
      reservation.decision.promise,
      new Promise<'aborted'>((resolve) => {
        stop = onAbort(signal, () => resolve('aborted'))
      }),
    ]).finally(() => stop())
  }

  /** Carries out the holder's decision; false when the log refused a commit and the run is still held. */
  async #decide(reservation: Reservation, decision: HoldDecision): Promise<boolean> {
    const { handoffId } = reservation.intent
    if (decision.kind === 'release') {
      try {
        await this.#record({ type: 'hold.released', handoffId })
      } catch (error) {
        decision.done.reject(error)
        throw error
      }
      reservation.settle()
      decision.done.resolve()
      return true
    }
    const pause = reservation.pause as HandoffPause
    try {
      await this.#record({ type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } }, this.#successorFree(pause.intent))
    } catch (error) {
      if (successorTaken(error)) {
        // Nothing was written: `commit()` rejects and the holder may still release.
        reservation.reopen(error)
        return false
      }
      decision.done.reject(error)
      throw error
    }
    reservation.settle()
    decision.done.resolve(structuredClone(pause))
    throw new Ended({ status: 'handoff_paused', pause })
  }

  #transcriptBuilder(): TranscriptBuilder {
    if (!this.#transcript) {
      this.#transcript = new TranscriptBuilder()
      for (const event of this.setup.lineage) this.#transcript.push(event)
      for (const event of this.#own) this.#transcript.push(event)
    }
    return this.#transcript
  }

  #requestBody(): ChatRequestBody {
    const { execution } = this.setup
    const tools = functionTools(this.setup.tools)
    // Provider options first: the fields the engine sets (and records) always win. Admission refuses options naming them.
    // The recorded copy, in its recorded order: a successor sends its source's body byte for byte, whatever
    // order its caller gave the same options in.
    return {
      ...execution.providerOptions,
      model: execution.model,
      messages: this.#transcriptBuilder().messages(),
      ...(tools.length > 0 ? { tools } : {}),
      ...(execution.mainOutputLimit === undefined ? {} : { max_tokens: execution.mainOutputLimit }),
    }
  }

  /**
   * Adds a secret of the client's to the run's: what is recorded from now on is redacted of it too.
   * Kept in the run's secrets themselves (`Secrets.from`), not on the actor: a field more costs each
   * held run a property store (~0.15 KiB, `npm run bench -- --only held`).
   */
  #addSecret(secret: unknown, live: LiveText | undefined, calls: LiveToolCalls | undefined, reasoning: LiveText | undefined): void {
    // Bounded as declared secrets are (`MODEL_SECRET_INVALID` to the client): each costs every later record its forms and pieces.
    const secrets = withClientSecret(this.setup.secrets, secret)
    if (secrets === this.setup.secrets) return
    this.setup.secrets = secrets
    // The attempt's live text too, from its next piece on.
    live?.addSecrets(this.setup.secrets.inData)
    calls?.addSecrets(this.setup.secrets.inData)
    reasoning?.addSecrets(this.setup.secrets.inData)
  }

  /** One step: the model request (with retries), then every tool call it returned. */
  async #step(): Promise<void> {
    const { executor, client, execution } = this.setup
    const stepId = `step-${this.#snapshot.context.stepsUsed + 1}`
    const body = this.#requestBody()
    const bodyText = JSON.stringify(body)
    const requestDigest = contentDigest(bodyText)
    for (let attempt = 1; ; attempt += 1) {
      // Durable before the request is sent: every piece of the attempt can name it.
      const requestSeq = await this.#record({ type: 'model.requested', stepId, model: execution.model, requestDigest })
      const live = this.#liveText(this.setup.onModelText, stepId, attempt, requestSeq)
      // Not kept in `#live`: `liveText()` gives the answer's text only.
      const reasoning = this.#liveText(this.setup.onModelReasoning, stepId, attempt, requestSeq)
      const calls = this.#liveCalls(stepId, attempt, requestSeq)
      this.#live = live === undefined && calls === undefined ? undefined : { requestSeq, stepId, attempt, text: live, calls }
      const response = await executor.attempt(client, {
        bodyText,
        origin: { invocation: this.setup.invocation, stepId, attempt, requestDigest },
        signal: this.#signal,
        ...(live === undefined ? {} : { onText: (text: string) => live.push(text) }),
        ...(reasoning === undefined ? {} : { onReasoning: (text: string) => reasoning.push(text) }),
        ...(calls === undefined ? {} : { onToolCall: (piece: ToolCallPiece) => calls.push(piece) }),
        addSecret: (secret: string) => this.#addSecret(secret, live, calls, reasoning),
      })
      if (response.kind === 'completed') {
        // What the tools get and the next request replays is what is recorded: an echoed secret is gone from all three.
        const answered = boundedState(redactAnswer(wellFormed(response.output), this.setup.secrets.inData))
        // The response id is never sent back nor given to a tool: redacted as a failure message is
        // (encoded forms, masked pieces), not only of whole keys as text is; one that no longer fits is dropped.
        const responseId = response.output.responseId === undefined ? undefined : responseIdOf(redactFailure(wellFormed(response.output.responseId), this.setup.secrets))
        // The request id (the answer's `x-request-id`) likewise; one that is not well-formed text is dropped, as a refusal's is.
        const requestId = response.output.requestId === undefined ? undefined : requestIdOf(response.output.requestId, (text) => redactFailure(text, this.setup.secrets))
        const { responseId: _, requestId: __, ...rest } = answered
        const output = { ...rest, ...(responseId === undefined ? {} : { responseId }), ...(requestId === undefined ? {} : { requestId }) }
        reasoning?.finish(output.reasoning ?? '')
        live?.finish(output.text ?? '')
        calls?.finish(output.toolCalls)
        // Its text is the fact's from here on: the fact is appended next.
        this.#live = undefined
        await this.#record({ type: 'model.completed', stepId, output })
        break
      }
      live?.close()
      reasoning?.close()
      calls?.close()
      // A retry starts over; the run may end here.
      this.#live = undefined
      const retry = response.status === 'retryable_failure' && attempt <= executor.retries && !this.#signal.aborted
      const status = response.status === 'retryable_failure' && !retry ? 'failed' : response.status
      // The message is the provider's or the client's own words: as a fact can hold them, without the provider's secrets.
      const message = redactFailure(messageOf(response.message), this.setup.secrets)
      // The provider's code, type, param and request id are its words too; what is left once redacted is checked again.
      const provider = providerRefusalOf(response.provider, (text) => redactFailure(text, this.setup.secrets))
      await this.#record({ type: 'model.interrupted', stepId, status, message, ...(provider === undefined ? {} : { provider }) })
      if (this.#signal.aborted || status === 'cancelled') await this.#halt()
      if (retry) {
        await this.#backOff(executor.backoff(attempt, response.retryAfterMs))
        continue
      }
      const failureClass = status === 'timed_out' ? 'model_timeout' : response.malformed ? 'model_malformed' : 'model_failed'
      // So that `wait()`'s outcome can be branched on (a full context window, say) without reading the facts.
      await this.#end({ status: 'failed', class: failureClass, message, ...(failureClass === 'model_failed' && provider !== undefined ? { provider } : {}) })
    }
    const completed = this.#own.at(-1)?.fact
    if (completed?.type !== 'model.completed') return
    await this.#settleCalls(stepId, completed.output.toolCalls)
  }

  /** Where the tool calls of one attempt go as they arrive, when the run's caller asked for them. */
  #liveCalls(stepId: string, attempt: number, requestSeq: number): LiveToolCalls | undefined {
    const receiver = this.setup.onToolCallText
    if (receiver === undefined) return undefined
    const { invocationId } = this.setup.invocation
    return new LiveToolCalls(this.setup.secrets.inData, ({ callId, name }, text, { index, offset }) =>
      receiver({ invocationId, stepId, attempt, requestSeq, index, offset, callId, name, arguments: text }),
    )
  }

  /**
   * Where the text (`onModelText`) or the reasoning text (`onModelReasoning`) of one attempt goes as it
   * arrives, to `receiver`, when the run's caller gave one.
   */
  #liveText(receiver: ((piece: ModelTextPiece) => void) | undefined, stepId: string, attempt: number, requestSeq: number): LiveText | undefined {
    if (receiver === undefined) return undefined
    const { invocationId } = this.setup.invocation
    return new LiveText(this.setup.secrets.inData, (text, { index, offset }) => receiver({ invocationId, stepId, attempt, requestSeq, index, offset, text }))
  }

  /**
   * The text of the attempt in flight as passed on to `onModelText` so far (see
   * `RunningInvocation.liveText`): from when its `model.requested` is durable until its answer is
   * in (its `model.completed` comes next) or it failed (its `model.interrupted` comes next).
   * `undefined` between attempts, and for a run started without `onModelText`.
   */
  liveText(): LiveModelText | undefined {
    const live = this.#live
    if (live?.text === undefined) return undefined
    const { text, pieces } = live.text.passed
    return { requestSeq: live.requestSeq, stepId: live.stepId, attempt: live.attempt, text, pieces }
  }

  /**
   * The latest progress of each call running now that has reported some (see
   * `RunningInvocation.liveToolProgress`); `undefined` for a run started without `onToolProgress`.
   */
  liveToolProgress(): ToolProgressUpdate[] | undefined {
    return this.setup.toolProgress?.live()
  }

  /**
   * The tool calls of the attempt in flight as passed on to `onToolCallText` so far (see
   * `RunningInvocation.liveToolCalls`), over the same span as `liveText()`; `undefined` for a run
   * started without `onToolCallText`.
   */
  liveToolCalls(): LiveModelToolCalls | undefined {
    const live = this.#live
    if (live?.calls === undefined) return undefined
    const { calls, pieces } = live.calls.passed
    return { requestSeq: live.requestSeq, stepId: live.stepId, attempt: live.attempt, calls, pieces }
  }

  /**
   * Settles the calls of one answer: one after the other in the order the model made them, or up to
   * `toolConcurrency` at once, each dispatch still durable before its tool starts. Calls that start
   * together have their dispatches written in one group commit, in the calls' order, and settlements
   * that arrive while one is being written go in the next. A failure (the log closed, say) starts no
   * further call and aborts the `signal` of the tools still running (with the failure as its reason);
   * they are waited for, and the first failure to happen is thrown.
   */
  async #settleCalls(stepId: string, calls: readonly ToolCall[]): Promise<void> {
    const limit = Math.min(this.setup.toolConcurrency, calls.length)
    if (limit <= 1) {
      try {
        for (const [index, call] of calls.entries()) await this.#settleCall(stepId, index, call, (fact) => this.#record(fact))
      } catch (error) {
        if (error instanceof ToolUncertain) await this.#end({ status: 'failed', class: 'outcome_unknown', message: error.message })
        throw error
      }
      return
    }
    const record = this.#batchedRecorder()
    let next = 0
    let failed = false
    let firstFailure: unknown
    // Aborts with the run's signal, and when a call fails: a call still waiting for its approval then
    // waits no more, and a tool still running is told the run is ending.
    const halt = new AbortController()
    const stopForwarding = onAbort(this.#signal, () => halt.abort(this.#signal.reason))
    const worker = async () => {
      while (!failed && next < calls.length) {
        const index = next++
        try {
          await this.#settleCall(stepId, index, calls[index] as ToolCall, record, () => failed, halt.signal)
        } catch (error) {
          // The first to fail is the cause: a later failure (the log closing under a settlement, say) may be its consequence.
          if (!failed) firstFailure = error
          failed = true
          halt.abort(error)
          throw error
        }
      }
    }
    try {
      const results = await Promise.allSettled(Array.from({ length: limit }, worker))
      if (results.some((result) => result.status === 'rejected')) {
        // A call given up on ends the run once the calls beside it (told to stop) have settled.
        if (firstFailure instanceof ToolUncertain) await this.#end({ status: 'failed', class: 'outcome_unknown', message: firstFailure.message })
        throw firstFailure
      }
    } finally {
      stopForwarding()
    }
  }

  /**
   * A `record` for calls running side by side: the facts asked for while a write is under way wait
   * and go together in the next one (`#recordAll` takes one call at a time). The first write waits
   * a microtask, so the dispatches of the calls started together share it.
   */
  #batchedRecorder(): (fact: Fact) => Promise<number> {
    let queue: { fact: Fact; resolve: (seq: number) => void; reject: (error: unknown) => void }[] = []
    let writing = false
    const drain = async () => {
      writing = true
      await Promise.resolve()
      while (queue.length > 0) {
        const batch = queue
        queue = []
        try {
          const seqs = await this.#recordAll(batch.map((entry) => entry.fact))
          batch.forEach((entry, index) => entry.resolve(seqs[index] as number))
        } catch (error) {
          if (batch.length === 1) {
            // As for a fact refused among others (below): the ones after it get the default ids, or a
            // fact refused for its id would take every later settlement down with it.
            this.#fallback = true
            ;(batch[0] as (typeof batch)[number]).reject(error)
            continue
          }
          // All or nothing: one fact the log refuses (an event id taken, say) would lose the others'
          // settlements, each of them known. Written one at a time, each fails or not on its own.
          for (const entry of batch) {
            try {
              entry.resolve((await this.#recordAll([entry.fact]))[0] as number)
            } catch (single) {
              // The refused fact's ordinal is the next one's too: with the default ids from here on (as the run's
              // end is written, see `#run`), a fact refused for its id does not take the ones after it down.
              this.#fallback = true
              entry.reject(single)
            }
          }
        }
      }
      writing = false
    }
    return (fact) =>
      new Promise<number>((resolve, reject) => {
        queue.push({ fact, resolve, reject })
        if (!writing) void drain()
      })
  }

  /**
   * Waits out a retry's back-off. The run is at a safe point meanwhile (the failed attempt is
   * recorded, nothing is in flight): a hold reserved before or during the back-off is taken at once,
   * and what is left of the back-off follows its release.
   */
  async #backOff(ms: number): Promise<void> {
    const deadline = performance.now() + ms
    for (;;) {
      if (this.#aborted) await this.#halt()
      // Even in the last step's back-off: the retry it would make is the successor's first step.
      const reservation = this.gate.pending()
      if (reservation) {
        await this.#hold(reservation, true)
        continue
      }
      const left = deadline - performance.now()
      if (left <= 0) return
      const signal = this.#signal
      await new Promise<void>((resolve) => {
        // Node runs a longer timer after 1 ms: the loop waits again for what is left.
        const timer = setTimeout(done, Math.min(left, MAX_TIMER_MS))
        const stopListening = this.gate.onReserve(done)
        signal.addEventListener('abort', done, { once: true })
        function done() {
          clearTimeout(timer)
          stopListening()
          signal.removeEventListener('abort', done)
          resolve()
        }
      })
    }
  }

  /**
   * Dispatches and runs one call, or rejects it. `halted` tells a call running beside others that
   * one of them failed (its fact could not be recorded): a dispatch written after that starts no tool.
   */
  async #settleCall(
    stepId: string,
    index: number,
    call: ToolCall,
    record: (fact: Fact) => Promise<number>,
    halted: () => boolean = () => false,
    gate: AbortSignal = this.#signal,
  ): Promise<void> {
    const operationId = `${this.setup.invocation.invocationId}/${stepId}/${index}`
    // Arguments that do not parse, or parse to something a fact cannot hold exactly, are invalid input, kept as text.
    const taken = argumentsOf(call.arguments)
    const parsed = 'input' in taken
    // Redacted as parsed too: its text lost the secrets as text, and byte values written otherwise
    // (`115.0`, `1.15e2`) or beside other numbers (`[1000, 115, …]`) parse to small integers, which a
    // fact stores a byte each (see `redactDeep`). What the tool is given, what is checked and approved:
    // `[redacted]` when its bytes as the log writes them still spell a secret (`redactData`).
    const input = parsed ? redactData(taken.input, this.setup.secrets.inData) : call.arguments
    const tool = this.setup.tools.find((candidate) => candidate.name === call.name)
    if (this.#stopped) throw this.#stopped
    const rejection = this.#aborted ? 'cancelled' : !tool ? 'unknown_tool' : !parsed ? 'invalid_input' : undefined
    if (rejection || !tool) {
      // Why the arguments could not be taken, as a schema refusal says what is wrong: in the log, not only in the next request.
      const message = rejection === 'invalid_input' && !parsed ? unusableMessage(taken, (text) => redact(text, this.setup.secrets)) : undefined
      await record({ type: 'tool.rejected', operationId, callId: call.callId, name: call.name, input, reason: rejection ?? 'unknown_tool', ...(message === undefined ? {} : { message }) })
      return
    }
    // Checked against the tool's schema before anyone is asked to approve it: a call that cannot run is not run.
    const wrong = inputChecks.get(tool)?.(input)
    if (wrong !== undefined) {
      await record({ type: 'tool.rejected', operationId, callId: call.callId, name: call.name, input, reason: 'invalid_input', message: wrong })
      return
    }
    let approval: ApprovalRecord | undefined
    // Most tools need none: no await for them.
    if (tool.needsApproval !== undefined && tool.needsApproval !== false) {
      const decision = await this.#approvalOf(tool.needsApproval, stepId, call, operationId, input, gate)
      // The log closed, the run was cancelled or a call beside it failed while the tool's predicate or
      // the approver was asked: whatever was decided, the call is not run.
      if (this.#stopped) throw this.#stopped
      // As for the calls not begun when one beside them failed: nothing is written.
      if (halted()) return
      if (this.#aborted || decision === undefined) {
        await record({ type: 'tool.rejected', operationId, callId: call.callId, name: call.name, input, reason: 'cancelled' })
        return
      }
      if (!decision.approved) {
        await record({ type: 'tool.rejected', operationId, callId: call.callId, name: call.name, input, reason: 'denied', approval: decision.record ?? {} })
        return
      }
      approval = decision.record
    }
    // At most once: the dispatch is durable before the effect starts.
    const dispatchedSeq = await record({
      type: 'tool.dispatched',
      operationId,
      callId: call.callId,
      name: call.name,
      input,
      ...(tool.readOnly === true ? { readOnly: true as const } : {}),
      ...(approval === undefined ? {} : { approval }),
    })
    // The log closed while the dispatch was being written: a process that died would not start the effect either.
    if (this.#stopped) throw this.#stopped
    // Cancelled while it was being written: the tool is not started, and its settlement says so.
    if (this.#aborted) {
      await record({ type: 'tool.settled', operationId, outcome: { status: 'failed', message: 'not started: the run was cancelled while its dispatch was being recorded' } })
      return
    }
    // A call beside it failed while this dispatch was written: the run ends, so this tool is not started either.
    if (halted()) {
      await record({ type: 'tool.settled', operationId, outcome: { status: 'failed', message: 'not started: the run failed while its dispatch was being recorded' } })
      return
    }
    const timeoutMs = tool.timeoutMs ?? this.setup.toolTimeoutMs
    // `gate`: the run's signal, or beside other calls one that also aborts when one of them fails.
    // A failure message loses declared secrets by their pieces too (`Secrets.inToolFailures`); data only credentials, whole.
    // Its NUL characters go first, as from the provider's (`redactFailure`): a UTF-16 text a tool quotes would hide a secret.
    const failureSecrets = () => this.setup.secrets.inToolFailures ?? this.setup.secrets.inData
    // A secret the tool adds (`context.addSecret`) is the run's from then on: this call's settlement, whichever
    // attempt it records, and whatever the run records after it, are redacted of it too.
    const addSecret = (secret: unknown) => {
      this.setup.secrets = withToolSecret(this.setup.secrets, secret)
    }
    // Only for a run whose caller listens: a run without `onToolProgress` keeps nothing for it.
    const board = this.setup.toolProgress?.open({ invocationId: this.setup.invocation.invocationId, stepId, operationId, callId: call.callId, name: call.name, dispatchedSeq })
    const progress = board === undefined ? undefined : (text: string, attempt: number) => board.report(text, attempt, this.setup.secrets.inData)
    let result: Awaited<ReturnType<typeof runToolCall>>
    try {
      result = await runToolCall(tool, input, gate, { operationId, invocation: this.setup.invocation, addSecret, progress, lease: () => this.setup.log.lease() }, this.setup, (text) => redactFailure(text, failureSecrets()))
    } finally {
      board?.end()
    }
    if (result === ABANDONED) {
      // Left dispatched, never settled, as a crash leaves it: uncertain, for the session to reconcile.
      throw new ToolUncertain(
        `tool ${call.name} (operation ${operationId}) ${notWaitedFor(timeoutMs as number, tool.timeoutMs === undefined ? "the engine's toolTimeoutMs" : 'its timeoutMs')}: it was not waited for, and its effect may or may not have happened`,
      )
    }
    if (!result.ok && result.uncertain !== undefined) {
      // Left dispatched, never settled, as a crash leaves it: see runToolCall.
      throw new ToolUncertain(uncertainMessage(`${call.name} (operation ${operationId})`, { ...result, uncertain: result.uncertain }))
    }
    // A tool that calls the same provider can pass on what it echoed: the provider's secrets are removed here too.
    const outcome: Extract<Fact, { type: 'tool.settled' }>['outcome'] = result.ok
      ? { status: 'succeeded', output: redactDeep(result.value, this.setup.secrets.inData) }
      : { status: 'failed', message: redactFailure(result.message, failureSecrets()) }
    await record({ type: 'tool.settled', operationId, outcome })
  }

  /**
   * Whether a call of a tool with `needsApproval` may go: approved without asking when the tool's
   * predicate says the call needs no approval (no `record` then), else as the approver decides (a
   * denial when the run has none: admission refuses a run whose tools may need approval without
   * one). `undefined` as soon as `gate` aborts (a cancel, the log's close, a call beside it failing),
   * whatever the predicate or the approver would still say.
   */
  async #approvalOf(
    needsApproval: NeedsApproval,
    stepId: string,
    call: ToolCall,
    operationId: string,
    input: unknown,
    gate: AbortSignal,
  ): Promise<{ approved: boolean; record?: ApprovalRecord } | undefined> {
    if (gate.aborted) return undefined
    let stopListening = () => undefined as void
    // One listener for every call asked at once (up to `toolConcurrency`): see `onAbort`.
    const aborted = new Promise<undefined>((resolve) => {
      stopListening = onAbort(gate, () => resolve(undefined))
    })
    try {
      const needed = await Promise.race([needsApprovalFor(needsApproval, input), aborted])
      if (needed === undefined) return undefined
      if (!needed) return { approved: true }
      const approver = this.setup.onApproval
      if (approver === undefined) return { approved: false, record: { reason: 'the run has no approver' } }
      const request: ApprovalRequest = {
        invocationId: this.setup.invocation.invocationId,
        invocation: { ...this.setup.invocation },
        stepId,
        callId: call.callId,
        operationId,
        name: call.name,
        input: structuredClone(input),
        signal: gate,
      }
      return await Promise.race([decide(approver, request, this.setup.secrets.inData), aborted])
    } finally {
      stopListening()
    }
  }

  /** The current state name. */
  state(): string {
    return stateOf(this.#snapshot)
  }
}
