import { isDeepStrictEqual } from 'node:util'
import { FactstateError, type FactstateErrorCode, messageWithoutCode } from '../errors.js'
import { kindOf, meantName, readOptions, shown } from '../options.js'
import { foreignStartOptionHint } from './foreign-names.js'
import type { ExecutionSettings, Invocation, InvocationInput, InvocationOutcome, RuntimeEvent, ToolCatalogSummary, UncertainOperation } from '../facts/types.js'
import { ID_PATTERN, eventIdSchema } from '../facts/schema.js'
import { type InvocationSnapshot, type InvocationState, applyFact, initialInvocationSnapshot, stateOf } from '../machines/invocation.js'
import { canonical, isAbortSignal, messageOf, storageProblemAt } from '../store/encoding.js'
import { type AppendView, type EventLog, type LogInternals, logInternals, sourceRemedy } from '../store/event-log.js'
import type { BackupPoint } from '../store/backup-point.js'
import { dispatchedInputs, dispatchedKey } from '../store/dispatched-inputs.js'
import { onAbort } from './abort-listeners.js'
import { Gate, type HandoffGate, successorOf } from './handoff.js'
import { InvocationActor, defaultEventId } from './invocation-actor.js'
import type { ModelClient } from './model-client.js'
import type { Approver } from './approval.js'
import type { LiveModelText, LiveModelToolCalls, ModelTextPiece, ModelToolCallPiece } from './model-text.js'
import { ModelExecutor } from './model-executor.js'
import { DECLARED_SECRET, MAX_SECRET_LENGTH, MAX_SECRETS_TOTAL, type Secrets, clientSecretsOf, dataSecretsOf, dataSecretsWith, holdsSecretBytes, redact, redactDeep, secretsOf, withDeclaredClientSecret, withPassedOn } from './redaction.js'
import { DEFAULT_MAX_STEPS, RUN_INPUT_KEYS, type RunInput, toolCallLimits, validateRunInput } from './run-input.js'
import { type CatalogChanges, type ToolDefinition, catalogChanges, catalogOf, legacyCatalogDigest, shownText } from './tool-catalog.js'
import { type InputCheck, inputCheckOf, inputChecks } from './tool-input.js'
import { ToolProgressBoard, type ToolProgressUpdate } from './tool-progress.js'

const noop = (): void => undefined

/**
 * Where a session feed (actors/session-feed.ts) is handed what a session's runs pass on live, as their
 * receivers get it: each a copy of its own, after the run's own receiver was handed its.
 */
export interface LiveTap {
  text(piece: ModelTextPiece): void
  call(piece: ModelToolCallPiece): void
  progress(update: ToolProgressUpdate): void
}

/** What a run of the session has passed on so far, when a tap starts listening (see {@link EngineInternals.watch}). */
export interface LiveSoFar {
  text: LiveModelText | undefined
  calls: LiveModelToolCalls | undefined
  progress: ToolProgressUpdate[]
  /**
   * For the attempt in flight, of a run that passes on both its text and its calls: how many text
   * pieces were passed on before each call piece (by the call piece's index). With it, the id of the
   * last piece a page got tells which pieces of the other kind it has too.
   */
  order: { requestSeq: number; textBefore: number[] } | undefined
}

/**
 * The order in which a run's text and call pieces of the attempt in flight were passed on (see
 * `LiveSoFar.order`): one number per call piece, kept only for a run started with both receivers.
 */
class PieceOrder {
  requestSeq = 0
  text = 0
  textBefore: number[] = []
  #at(requestSeq: number): void {
    if (requestSeq === this.requestSeq) return
    this.requestSeq = requestSeq
    this.text = 0
    this.textBefore = []
  }
  passedText(piece: ModelTextPiece): void {
    this.#at(piece.requestSeq)
    this.text = piece.index + 1
  }
  passedCall(piece: ModelToolCallPiece): void {
    this.#at(piece.requestSeq)
    this.textBefore[piece.index] = this.text
  }
}

/** What the engine gives a session feed: not public. */
export interface EngineInternals {
  /**
   * Hands `tap` what the session's runs pass on from now on, and returns, taken in the same turn,
   * what its runs running now have passed on so far: with the two, nothing is missed or repeated.
   */
  watch(sessionId: string, tap: LiveTap): { soFar: LiveSoFar[]; stop(): void }
}

const engineInternalsOf = new WeakMap<Engine, EngineInternals>()

/** The internals of an Engine, or a TypeError for what is not one. */
export function engineInternals(engine: Engine): EngineInternals {
  const found = engineInternalsOf.get(engine)
  if (found === undefined) throw new TypeError('not an Engine')
  return found
}

/** A sealed or given execution setting as a refusal's message shows it: JSON, cut past 120 characters. */
function shownSetting(value: unknown): string {
  const text = JSON.stringify(value ?? null) ?? 'null'
  return text.length > 120 ? `${text.slice(0, 119)}…` : text
}

/** Options of {@link Engine}. */
export interface EngineOptions {
  /**
   * The log every run is recorded in, from `EventLog.open` and open (a snapshot is refused:
   * `ENGINE_INVALID_OPTIONS`). The engine does not close it.
   */
  log: EventLog
  /** Sends the model requests: timeouts, retries and the provider client (default `new ModelExecutor()`). */
  model?: ModelExecutor | undefined
  /** The clock for `recordedAt` (default `Date.now`): inject it for deterministic tests. */
  now?: (() => number) | undefined
  /** Event ids (default `<invocationId>/<ordinal>`, stable across replays); each must be unique in the log. */
  eventId?: ((invocation: Invocation, ordinal: number) => string) | undefined
  /**
   * The most a tool's recorded outcome may hold, in UTF-8 bytes of JSON text (default 4,194,304:
   * 4 MiB, about a million tokens). A larger result is not recorded: the tool has run, and the model
   * is told so and how large the result was (a session whose transcript held it would send it with
   * every later request, which providers refuse). A longer failure message is cut at the limit, with a
   * note. A whole number from 1 to 268,435,456.
   */
  maxToolResultBytes?: number | undefined
  /**
   * The most a run's input may put in its `invocation.opened` fact, in UTF-8 bytes (default
   * 4,194,304: 4 MiB, as `maxToolResultBytes`): its message (`work.content`, a continuation's or a
   * handoff successor's too), `instructions`, the model's name and `requestFingerprint` as text,
   * `providerOptions` and `configuration` as JSON text, together. A larger input is refused before
   * anything is written (`RUN_INVALID_INPUT`, `details`: `field` and `fields` the largest of those
   * parts, `bytes` the input's size so counted, `limit` this): every reader of the run (a
   * continuation's replay, `factstate log`, `verify`) reads that fact whole. Child runs
   * (`childRunFor`) are started with `start()` and held to it too. A whole number from 1 to 268,435,456.
   */
  maxInputBytes?: number | undefined
  /**
   * The time limit of every tool call whose tool sets no `timeoutMs` of its own, in whole
   * milliseconds from 1 to 2,147,483,647 (default: none). See `ToolDefinition.timeoutMs`.
   */
  toolTimeoutMs?: number | undefined
  /**
   * Secrets of the application's own (its tools' API keys and tokens, a database password): kept
   * out of every fact and of what the model is told, as the provider's key is. A tool that throws
   * `new Error(\`401: invalid api key ${key}\`)` is recorded with `[redacted]` in its place. From
   * what tools return and throw, the model's answers and approvers' text each is removed whole (as
   * it is, trimmed or JSON-escaped); from the provider's and a model client's failure messages also
   * encoded (base64, hex, URL) and by its pieces of 8 characters or more. A run whose recorded
   * settings (message, instructions, ids, provider options) hold one whole is refused
   * (`RUN_INVALID_INPUT`), as for the provider's key, and so is one whose tools would show it to the
   * model in a `description` or `inputSchema` (`details.fields`: `tools.<index>.description`, the
   * message naming the tool, never the secret). Strings of 8 to 16,384 characters, at most 64 and 65,536
   * characters together; in memory only.
   */
  secrets?: readonly string[] | undefined
}

/** The most {@link EngineOptions.secrets} an engine takes. */
const MAX_ENGINE_SECRETS = 64

/** {@link EngineOptions.maxToolResultBytes} unless given. */
export const DEFAULT_MAX_TOOL_RESULT_BYTES = 4 * 1024 * 1024
const MAX_TOOL_RESULT_LIMIT = 256 * 1024 * 1024
/** {@link EngineOptions.maxInputBytes} unless given: as a tool's result. */
export const DEFAULT_MAX_INPUT_BYTES = DEFAULT_MAX_TOOL_RESULT_BYTES

/**
 * What `maxToolResultBytes`, `maxInputBytes` or `toolTimeoutMs` must be, when `value` is not that (for the refusal's
 * `<field> must be …`), else `undefined`: the engine's options, and `callTool`'s, which stand for them.
 */
export function toolLimitProblem(field: 'maxToolResultBytes' | 'maxInputBytes' | 'toolTimeoutMs', value: unknown): string | undefined {
  const bytes = field !== 'toolTimeoutMs'
  const most = bytes ? MAX_TOOL_RESULT_LIMIT : 2_147_483_647
  if (value === undefined || (Number.isSafeInteger(value) && (value as number) >= 1 && (value as number) <= most)) return undefined
  return `a whole number of ${bytes ? 'bytes' : 'milliseconds'} from 1 to ${most.toLocaleString('en-US')}, not ${shown(value)}`
}

/**
 * The parts of a run input that its `invocation.opened` records, by field, with their size in UTF-8
 * bytes (texts as they are, objects as JSON text): what `maxInputBytes` bounds. Read from a run input
 * `validateRunInput` has passed (so each is of its type); a text's length is counted without a copy.
 */
function recordedInputSizes(run: RunInput): [field: string, bytes: number][] {
  const text = (value: unknown) => (typeof value === 'string' ? Buffer.byteLength(value, 'utf8') : 0)
  const json = (value: unknown) => (value === undefined ? 0 : Buffer.byteLength(JSON.stringify(value) ?? '', 'utf8'))
  const work = run.work as { content?: unknown }
  return [
    ['work.content', text(work.content)],
    ['instructions', text(run.instructions)],
    ['providerOptions', json(run.providerOptions)],
    ['configuration', json(run.configuration)],
    ['provider.model', text(run.provider.model)],
    ['requestFingerprint', text(run.requestFingerprint)],
  ]
}

/** `RUN_INVALID_INPUT` for a run input whose recorded parts are over `limit` bytes together (see `EngineOptions.maxInputBytes`), else `undefined`. */
export function inputSizeProblem(run: RunInput, limit: number): FactstateError | undefined {
  const sizes = recordedInputSizes(run)
  const bytes = sizes.reduce((sum, [, size]) => sum + size, 0)
  if (bytes <= limit) return undefined
  const parts = sizes.filter(([, size]) => size > 0).sort(([, a], [, b]) => b - a)
  const [field] = parts[0] as [string, number]
  const named = parts
    .slice(0, 3)
    .map(([name, size]) => `${name} ${size.toLocaleString('en-US')}`)
    .join(', ')
  return new FactstateError(
    'RUN_INVALID_INPUT',
    `${field}: the run's input is ${bytes.toLocaleString('en-US')} bytes as its invocation.opened would record it (${named}), over the engine's limit of ${limit.toLocaleString('en-US')} bytes (maxInputBytes): pass a large document by reference (a path or a URL a tool reads), or raise maxInputBytes`,
    { details: { fields: [field], field, bytes, limit } },
  )
}

/** Options of {@link Engine.start} and {@link Engine.run}. */
export interface StartOptions {
  /**
   * Aborting cancels the run, as a handle's `cancel(reason)` does: a model request in flight is aborted
   * (`model.interrupted{cancelled}`), a running tool gets the signal and is waited for, and the run ends
   * `cancelled`, its `source` the abort reason when that is a non-empty string (recorded well-formed,
   * redacted and cut to 2,000 characters), `'timeout'` for a `TimeoutError` (what
   * `AbortSignal.timeout(ms)` aborts with), else `'signal'`. Already aborted, the run ends
   * before any model request; a handoff successor admitted so gives its paused turn up and is not
   * held to the seal's execution settings (it records the seal's).
   */
  signal?: AbortSignal | undefined
  /**
   * Receives the text of the run's model answers live, piece by piece as the provider streams it
   * (a plain JSON answer comes as one piece), before the answer is recorded: for showing an answer
   * as it is written. Pieces are not facts; `model.completed` is. They carry the step and the
   * attempt: a retry starts its text over. What a receiver throws (or an async one rejects with) is
   * ignored. It is called while the answer is read: keep it quick, since the request's timeout
   * counts the time it takes.
   */
  onModelText?: ((piece: ModelTextPiece) => void) | undefined
  /**
   * Receives the reasoning (thinking) text of the run's model answers live, piece by piece as the
   * provider streams it, before the answer is recorded: for showing a model's thinking as it goes.
   * Pieces are `ModelTextPiece`s as `onModelText`'s, their `index` and `offset` counted among the
   * attempt's reasoning pieces; those of an attempt that completes add up to the `reasoning` its
   * `model.completed` records (reasoning the provider did not stream comes whole then). Redacted of
   * the provider's credentials as the answer's text is. As for `onModelText`: not facts, a retry
   * starts over, what a receiver throws is ignored, keep it quick.
   */
  onModelReasoning?: ((piece: ModelTextPiece) => void) | undefined
  /**
   * Receives the tool calls of the run's model answers live, as the provider streams them, before
   * the answer is recorded: for showing a call being written (the arguments of a tool that writes a
   * file, say). Each call begins with a piece whose `arguments` is `''`, once its id and name are
   * known and its arguments have begun (so a name streamed in parts is whole; each piece carries the
   * name as known then); its next pieces add up to its arguments as `model.completed` records them.
   * A call the provider did not stream comes whole when the answer is recorded. As for
   * `onModelText`: not facts, a retry starts over, what a receiver throws is ignored, keep it quick.
   */
  onToolCallText?: ((piece: ModelToolCallPiece) => void) | undefined
  /**
   * Receives what the run's tools report while they run (`context.progress(value)`): a deploy's
   * stage, a crawl's count, each update as the tool makes it, with the call's ids (`operationId`,
   * `callId`, `name`, `stepId`), its `attempt`, the seq of its `tool.dispatched` (`dispatchedSeq`),
   * the update's `index` among the call's (from 0, no gap) and the `value`, made JSON, copied and
   * redacted of the run's secrets as the call's recorded result is. Live only: updates are never facts
   * (a crash, another process, a page that reconnects gets none but the latest of each call running
   * now, `running.liveToolProgress()`); the call's `tool.settled` is what counts. Called synchronously
   * from the tool's `progress` (keep it quick: the tool waits); what it throws, or an async one rejects
   * with, is ignored, and fails neither the tool nor the run. Without it, a run keeps nothing for progress.
   */
  onToolProgress?: ((update: ToolProgressUpdate) => void) | undefined
  /**
   * Decides on each call of a tool that `needsApproval`, before it is dispatched (required when a
   * tool of the run may need approval). It may take as long as it needs: the call waits, the run is
   * at no safe point meanwhile (so it must not wait for a hold of its own run). A cancel aborts
   * `request.signal` and rejects the call; the log's close, or a crash, leaves it never dispatched.
   * What it throws denies the call.
   */
  onApproval?: Approver | undefined
}

/** Where an unknown operation's input sits in the event of a run that acknowledges it: `fact.input.priorUnknown[i].input`. */
const UNKNOWN_INPUT_DEPTH = 5

/**
 * `start`'s options, read once, or `RUN_INVALID_INPUT` (`details.fields` names the option) for
 * options that are not an object, an unknown option, a signal that is not an AbortSignal, or a
 * text receiver or approver that is not a function.
 */
function startOptions(options: unknown): StartOptions {
  if (options === undefined) return {}
  const refuse = (field: string, message: string) => new FactstateError('RUN_INVALID_INPUT', message, { details: { fields: [field] } })
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw refuse('options', 'start options must be an object ({ signal?, onModelText?, onModelReasoning?, onToolCallText?, onToolProgress?, onApproval? })')
  }
  for (const key of Object.keys(options)) {
    if (!START_OPTIONS.includes(key)) {
      const meant = meantName(key, START_OPTIONS)
      // A run input's member (maxSteps, instructions) given here, or another library's word (LangGraph's
      // callbacks, recursionLimit): where the setting is here.
      const hint = RUN_INPUT_KEYS.includes(key)
        ? `${key} belongs in the run input (engine.start(input, options)'s first argument), not in its options`
        : meant === undefined
          ? foreignStartOptionHint(key)
          : `did you mean ${meant}?`
      throw refuse(`options.${key}`, `start options have no ${JSON.stringify(key)}${hint === undefined ? '' : `: ${hint}`} (only ${START_OPTIONS.join(', ')})`)
    }
  }
  const { signal, onModelText, onModelReasoning, onToolCallText, onToolProgress, onApproval } = options as {
    signal?: unknown
    onModelText?: unknown
    onModelReasoning?: unknown
    onToolCallText?: unknown
    onToolProgress?: unknown
    onApproval?: unknown
  }
  for (const [name, receiver] of [
    ['onModelText', onModelText],
    ['onModelReasoning', onModelReasoning],
    ['onToolCallText', onToolCallText],
  ] as const) {
    if (receiver !== undefined && typeof receiver !== 'function') throw refuse(`options.${name}`, `options.${name} must be a function ((piece) => void)`)
  }
  if (onToolProgress !== undefined && typeof onToolProgress !== 'function') {
    throw refuse('options.onToolProgress', 'options.onToolProgress must be a function ((update) => void)')
  }
  if (onApproval !== undefined && typeof onApproval !== 'function') {
    throw refuse('options.onApproval', 'options.onApproval must be a function ((request) => decision)')
  }
  const receiver = onModelText as StartOptions['onModelText']
  const reasoningReceiver = onModelReasoning as StartOptions['onModelReasoning']
  const callReceiver = onToolCallText as StartOptions['onToolCallText']
  const progressReceiver = onToolProgress as StartOptions['onToolProgress']
  const approver = onApproval as StartOptions['onApproval']
  return {
    signal: startSignal(signal, refuse),
    ...(receiver === undefined ? {} : { onModelText: receiver }),
    ...(reasoningReceiver === undefined ? {} : { onModelReasoning: reasoningReceiver }),
    ...(callReceiver === undefined ? {} : { onToolCallText: callReceiver }),
    ...(progressReceiver === undefined ? {} : { onToolProgress: progressReceiver }),
    ...(approver === undefined ? {} : { onApproval: approver }),
  }
}

const START_OPTIONS: readonly string[] = ['signal', 'onModelText', 'onModelReasoning', 'onToolCallText', 'onToolProgress', 'onApproval']

/** `options.signal`: undefined or something that can be listened to as an AbortSignal. */
function startSignal(signal: unknown, refuse: (field: string, message: string) => FactstateError): AbortSignal | undefined {
  if (signal === undefined) return undefined
  if (!isAbortSignal(signal)) throw refuse('options.signal', 'options.signal must be an AbortSignal (AbortController.signal)')
  return signal
}

/** Options of {@link Engine.close}. */
export interface EngineCloseOptions {
  /**
   * Cancels every run the engine has in flight with this reason, as a handle's `cancel(reason)` does
   * (each ends `cancelled{source: reason}` unless its own cancel came first, a tool with effects threw
   * on the abort, or a `sealOnCancel` hold seals it), and the child runs admitted after it too. A
   * non-empty string. Without it, the runs go on to their end.
   */
  cancel?: string | undefined
  /** Stops waiting: the promise rejects with the signal's reason. The engine stays closed and its runs go on. */
  signal?: AbortSignal | undefined
}

/** Options of {@link Engine.drain}. */
export interface DrainOptions {
  /** Stops waiting: the promise rejects with the signal's reason. Nothing is cancelled. */
  signal?: AbortSignal | undefined
}

/** `promise`, or the signal's reason once `signal` aborts first (at once when it has already). */
function untilAborted(promise: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (signal === undefined) return promise
  return new Promise<void>((resolve, reject) => {
    const stop = onAbort(signal, () => reject(signal.reason))
    promise.then(
      () => {
        stop()
        resolve()
      },
      (error: unknown) => {
        stop()
        reject(error)
      },
    )
  })
}

/** `close()`'s and `drain()`'s options, read once, or `ENGINE_INVALID_OPTIONS` naming the option. */
function waitOptions(options: unknown, call: 'engine.close' | 'engine.drain'): EngineCloseOptions {
  const known = call === 'engine.close' ? ['cancel', 'signal'] : ['signal']
  const given = readOptions(options, known, { call, code: 'ENGINE_INVALID_OPTIONS', details: (field) => ({ field }) })
  const invalid = (field: string, what: string) => new FactstateError('ENGINE_INVALID_OPTIONS', `${call}: ${field} must be ${what}`, { details: { field } })
  const { cancel, signal } = given as { cancel?: unknown; signal?: unknown }
  // Its kind, not its text, when it is not a string: an error's message may quote a secret.
  if (cancel !== undefined && (typeof cancel !== 'string' || cancel === '')) throw invalid('cancel', `a non-empty string (the runs' cancel reason), not ${typeof cancel === 'string' ? "''" : kindOf(cancel)}`)
  if (signal !== undefined && !isAbortSignal(signal)) throw invalid('signal', 'an AbortSignal (AbortController.signal, AbortSignal.timeout(ms))')
  return { ...(cancel === undefined ? {} : { cancel: cancel as string }), ...(signal === undefined ? {} : { signal: signal as AbortSignal }) }
}

/** An admitted invocation, running as an actor. */
export interface RunningInvocation {
  /** The invocation it runs as (a copy of the input's `invocation`). */
  invocation: Invocation
  /** The gate for handoff holds on this invocation. */
  handoff(): HandoffGate
  /**
   * The text of the model answer being written now, as passed on to `onModelText` so far (its
   * pieces joined, redacted as they were): `{ requestSeq, stepId, attempt, text, pieces }`, for a page
   * that reconnects mid-answer. From when the attempt's `model.requested` is durable until its
   * answer is in or it failed; `undefined` between attempts, after the run, and for a run started
   * without `onModelText`.
   */
  liveText(): LiveModelText | undefined
  /**
   * The tool calls of the model answer being written now, as passed on to `onToolCallText` so far:
   * `{ requestSeq, stepId, attempt, calls, pieces }`, each call begun (in the order they began) with
   * its `callId`, `name` and the `arguments` text passed on so far, and `pieces` the next piece's
   * `index`: for a page that reconnects while a call is being written. Over the same span as
   * `liveText()`; `undefined` for a run started without `onToolCallText`.
   *
   * @example
   * ```ts
   * const so = running.liveToolCalls()
   * for (const call of so?.calls ?? []) ui.showCall(call.callId, call.name, call.arguments)
   * ```
   */
  liveToolCalls(): LiveModelToolCalls | undefined
  /**
   * The latest update of each of the run's tool calls running now that has reported progress
   * (`context.progress`), as passed on to `onToolProgress` (copies, in the order the calls were
   * dispatched): for a page that reconnects while a deploy runs. A call's entry goes once it has
   * settled (its `tool.settled` is what counts then); `[]` while no running call has reported (so
   * after the run too), `undefined` for a run started without `onToolProgress`.
   *
   * @example
   * ```ts
   * for (const update of running.liveToolProgress() ?? []) ui.showProgress(update.callId, update.value)
   * ```
   */
  liveToolProgress(): ToolProgressUpdate[] | undefined
  /**
   * Resolves with the outcome once `invocation.ended` is durable (each call gets its own copy).
   * Rejects with `LOG_CLOSED` when the log closes under the run, and with the log's error when it
   * refuses one of the run's facts (the run then ends `failed{engine_error}`).
   */
  wait(): Promise<InvocationOutcome>
  /** The machine state now (equal to folding the invocation's facts from the log). */
  state(): InvocationState
  /** The full machine snapshot now: a copy (its context is the caller's to change). */
  snapshot(): InvocationSnapshot
  /**
   * Cancels the run as aborting its `signal` would (`StartOptions.signal`): a model request in flight
   * is aborted, a running tool's `context.signal` aborts with the reason and is waited for, an
   * approver's `request.signal` aborts, and the run ends `cancelled`, its `source` the reason when
   * that is a non-empty string (recorded well-formed, redacted and cut to 2,000 characters, as a
   * signal's is), else `'cancel'`.
   * Every handle of the run cancels it, `engine.running(id)`'s too, and so does the caller's own
   * signal alongside: the first of them decides the source. Again, or once the run has ended, it does
   * nothing. It returns nothing: `wait()` gives the outcome (which may not be `cancelled`: a tool with
   * effects that throws on the abort ends the run `failed{outcome_unknown}`). `RUN_INVALID_INPUT` for a
   * reason that is not a string.
   */
  cancel(reason?: string): void
}

const ignore = (): void => undefined


/**
 * The settings a successor must match that differ, in this order, compared one by one so the refusal
 * can name each: a deploy that changed several learns of all of them at once, not one retry at a time.
 */
function executionDifferences(candidate: ExecutionSettings, sealed: ExecutionSettings): (keyof ExecutionSettings)[] {
  const differ: (keyof ExecutionSettings)[] = []
  if (candidate.model !== sealed.model) differ.push('model')
  if (!isDeepStrictEqual(canonical(candidate.providerOptions), canonical(sealed.providerOptions))) differ.push('providerOptions')
  if (candidate.mainOutputLimit !== sealed.mainOutputLimit) differ.push('mainOutputLimit')
  if (candidate.cwd !== sealed.cwd) differ.push('cwd')
  if (!isDeepStrictEqual(catalogAsSealed(candidate.tools, sealed.tools), sealed.tools)) differ.push('tools')
  if (candidate.instructions !== sealed.instructions) differ.push('instructions')
  return differ
}

/**
 * The candidate's catalog as the seal's release recorded one: without per-tool digests when the seal
 * has none (made before they were recorded, and compared as then, by the catalog digest and names).
 * A seal with them has them compared too: a forged catalog digest does not hide a changed tool.
 */
function catalogAsSealed(candidate: ToolCatalogSummary, sealed: ToolCatalogSummary): ToolCatalogSummary {
  return sealed.digests === undefined ? { catalogDigest: candidate.catalogDigest, names: candidate.names } : candidate
}

/** How many tools a refusal's message names of each kind (`details.tools` has them all). */
const SHOWN_TOOLS = 5

/** `tool "a"`, `tools "a", "b"`, or the first few and how many more: a catalog of hundreds changed must not make a message of kilobytes. */
const toolNames = (names: readonly string[]): string => {
  const shown = names.slice(0, SHOWN_TOOLS).map((name) => JSON.stringify(name)).join(', ')
  return `${names.length === 1 ? 'tool' : 'tools'} ${shown}${names.length > SHOWN_TOOLS ? ` and ${names.length - SHOWN_TOOLS} more` : ''}`
}

/** What changed between a seal's catalog and a successor's, tool by tool, for the refusal's message (and `compareRuns`'). */
export function catalogChangeText(changes: CatalogChanges, sealed: ToolCatalogSummary, given: ToolCatalogSummary): string {
  const parts: string[] = []
  if (changes.added.length > 0) parts.push(`${toolNames(changes.added)} added`)
  if (changes.removed.length > 0) parts.push(`${toolNames(changes.removed)} removed`)
  if (changes.changed.length > 0) parts.push(`${toolNames(changes.changed)} changed (description or input schema)`)
  if (parts.length > 0) return parts.join(', ')
  // No tool differs by its own digest: they are shown in another order, or the seal's catalog digest is not its tools'.
  return isDeepStrictEqual(sealed.names, given.names) ? "no tool changed, but the seal's catalog digest is not its tools'" : 'the same tools in another order'
}

/**
 * The refusal of ids already in the log. `details.reason: 'exists'` and `details.existing` (the ids
 * the log holds) let a caller that retried a start (after a timeout, a lost reply) tell this apart
 * from a bad input and find the run it started: `engine.running(invocationId)` while this engine
 * runs it, `log.runs(sessionId)` for how it went.
 */
const usedId = (invocation: Invocation, existing?: Invocation) =>
  existing !== undefined && existing.sessionId === invocation.sessionId && existing.runId === invocation.runId
    ? new FactstateError(
        'RUN_INVALID_INPUT',
        `invocation.invocationId, invocation.runId: invocation ${invocation.invocationId} of run ${invocation.sessionId}/${invocation.runId} already exists (started before: engine.running(invocationId) gives its handle while this engine runs it, log.runs(sessionId) says how it went); a new run needs a new run id and invocation id`,
        { details: { fields: ['invocation.invocationId', 'invocation.runId'], reason: 'exists', ...(existing === undefined ? {} : { existing: { ...existing } }) } },
      )
    : new FactstateError('RUN_INVALID_INPUT', `invocation.invocationId: ${invocation.invocationId} is already used`, {
        details: { fields: ['invocation.invocationId'], reason: 'exists', ...(existing === undefined ? {} : { existing: { ...existing } }) },
      })

const usedRun = (invocation: Invocation, by: string) =>
  new FactstateError('RUN_INVALID_INPUT', `invocation.runId: run ${invocation.sessionId}/${invocation.runId} already exists (invocation ${by}); a run has one invocation`, {
    details: { fields: ['invocation.runId'], reason: 'exists', existing: { sessionId: invocation.sessionId, runId: invocation.runId, invocationId: by } },
  })

/** `details` of a `RUN_BUSY`: why the session refused, and the run in the way. */
interface RunBusyDetails {
  /** `active`: a run of the session is running; `paused`: a turn is paused by a handoff; `source_running`: the continuation's source has not ended. */
  reason: 'active' | 'paused' | 'source_running'
  runId: string
  invocationId: string
  turnId?: string
}

const sameInvocation = (a: Invocation, b: Invocation) =>
  a.sessionId === b.sessionId && a.turnId === b.turnId && a.runId === b.runId && a.invocationId === b.invocationId

/** Header names that hold a credential themselves (not `Idempotency-Key`, though its name has "key"). */
const SECRET_HEADER = /^(proxy-)?authorization$|cookie|(^|[-_])(api[-_]?key|secret|password|passwd|token|access[-_]?key)($|[-_])/i

/**
 * Refuses a run whose recorded settings carry the provider's own credential (the API key, the value
 * of an authorization, api-key, token, secret, password or cookie header) as given, when it looks like
 * a key (see `Secrets.inData`; an encoded form is not looked for here): `provider.apiKey` and `headers` stay in memory,
 * but the message, `instructions`, `providerOptions`, the model, the configuration and the ids are
 * recorded as given, so a key pasted into one of them (`providerOptions: { api_key }` for a provider
 * that takes it in the body) would be written to the log. Nothing is written.
 */
function recordedCredential(run: RunInput, admission: Secrets): void {
  recordedSecret(
    run,
    admission,
    "the provider's credential (its apiKey or a credential header's value) or one of the engine's secrets (for a child run, also one its parent run holds: its tools', its model client's, its provider's key)",
    "pass it as provider.apiKey, provider.headers or the engine's secrets only",
  )
}

/**
 * Refuses a run whose recorded settings carry one of the secrets its model client declares
 * (`ModelClient.secrets`, read when the client is made): the client holds the credential (an SDK
 * client made with its key), so a key pasted into the message would be written to the log as given.
 * `held` is the run's admission secrets with the client's (`admissionSecrets`), which `recordedCredential`
 * found none of but the client's in: what it finds now is the client's. Nothing is written.
 */
function clientCredential(run: RunInput, held: Secrets): void {
  recordedSecret(run, held, "one of the model client's secrets (ModelClient.secrets)", 'keep it out of the run input: the client holds it')
}

/** `recordedCredential`'s check of `run`'s recorded settings for `secrets`, which its message calls `what`. */
function recordedSecret(run: RunInput, secrets: Secrets, what: string, remedy: string): void {
  if (secrets.whole.length === 0) return
  const { work } = run
  const recorded: [string, unknown][] = [
    ['invocation', run.invocation],
    ['provider.model', run.provider.model],
    ['providerOptions', run.providerOptions],
    ['configuration', run.configuration],
    ['instructions', run.instructions],
    ['requestFingerprint', run.requestFingerprint],
    ['parent', run.parent],
    ['work.content', work.content],
    // Each tool's name by its index (the refusal cannot quote it), then all of them as the catalog records them together.
    ...run.tools.map((tool, index): [string, unknown] => [`tools.${index}.name`, tool.name]),
    ['tools', run.tools.map((tool) => tool.name)],
  ]
  for (const [field, value] of recorded) {
    // As the log would write it too: msgpack's own bytes beside the value's can spell what redacting it does not read.
    if (value !== undefined && (redactDeep(value, secrets) !== value || holdsSecretBytes(value, secrets))) {
      throw new FactstateError('RUN_INVALID_INPUT', `${field} holds ${what}: it would be written to the log as given, and the log is kept free of them; ${remedy}`, {
        details: { fields: [field] },
      })
    }
  }
}

/**
 * What a refusal of `input` is redacted of: the engine's secrets and the credentials the input's
 * provider gives (its `apiKey`, the values of headers that carry one by name, of 8 characters or
 * more). Read without throwing, strings only: the input was refused.
 */
function refusalSecrets(input: unknown, declared: Record<string, string>): Secrets {
  let apiKey: unknown
  let headers: [string, string][] = []
  try {
    const provider: unknown = (input as { provider?: unknown } | null | undefined)?.provider
    if (provider !== null && typeof provider === 'object') {
      const given = provider as { apiKey?: unknown; headers?: unknown }
      apiKey = given.apiKey
      const named = given.headers
      if (named !== null && typeof named === 'object' && !Array.isArray(named)) {
        headers = Object.entries(named).filter((entry): entry is [string, string] => typeof entry[1] === 'string' && SECRET_HEADER.test(entry[0]))
      }
    }
  } catch {
    // A getter that throws: what could be read of it is looked for.
  }
  // Each whole (as is, trimmed, JSON-escaped), as a declared secret is looked for in data: a refusal
  // quotes what it refused whole, and a short placeholder key ("anything") by its pieces would cut words out of it.
  const given = [...(typeof apiKey === 'string' ? [apiKey] : []), ...headers.map(([, value]) => value)].filter((secret) => secret.trim().length >= 8)
  if (given.length === 0 && Object.keys(declared).length === 0) return secretsOf({})
  return dataSecretsOf({ headers: { ...Object.fromEntries(given.map((secret, index) => [`${DECLARED_SECRET}given ${index}`, secret])), ...declared } })
}

/** `error` with `secrets` redacted from its message and details (its cause left out then: it may quote them too). */
function withoutSecrets(error: FactstateError, secrets: Secrets): FactstateError {
  if (secrets.whole.length === 0) return error
  const message = messageWithoutCode(error)
  const redacted = redact(message, secrets)
  const details = error.details === undefined ? undefined : redactDeep(error.details, secrets)
  if (redacted === message && details === error.details) return error
  // The same code and details' shape, whichever code it is.
  const Refusal = FactstateError as unknown as new (code: FactstateErrorCode, message: string, options?: { details?: Record<string, unknown> }) => FactstateError
  return new Refusal(error.code, redacted, details === undefined ? undefined : { details: { ...details } })
}

/** The invocation id a run input asks for, read without throwing (the input is validated later). */
function invocationIdOf(input: unknown): string | undefined {
  try {
    const id: unknown = (input as { invocation?: { invocationId?: unknown } } | null | undefined)?.invocation?.invocationId
    return typeof id === 'string' ? id : undefined
  } catch {
    return undefined
  }
}

/** The engine's `secrets` option as headers of a run's secrets (a copy: later changes to the caller's array reach no run). `callTool` takes the same. */
export function engineSecrets(given: unknown, invalid: (field: string, what: string) => FactstateError): Record<string, string> {
  if (given === undefined) return {}
  const what = `an array of at most ${MAX_ENGINE_SECRETS} strings of 8 to ${MAX_SECRET_LENGTH.toLocaleString('en-US')} characters, ${MAX_SECRETS_TOTAL.toLocaleString('en-US')} together`
  if (!Array.isArray(given) || given.length > MAX_ENGINE_SECRETS) throw invalid('secrets', what)
  const headers: Record<string, string> = {}
  let total = 0
  for (let index = 0; index < given.length; index += 1) {
    const secret: unknown = given[index]
    // Not shown: it is a secret. A shorter one would be removed from everyday text (a year, a word) wherever it appears.
    if (typeof secret !== 'string' || secret.trim().length < 8) throw invalid('secrets', `${what}: item ${index} is ${typeof secret === 'string' ? 'shorter' : secret === undefined ? 'undefined' : secret === null ? 'null' : `a ${typeof secret}`}`)
    // Each is looked for, in every form and by its pieces, in what every run records: the cost grows with its length.
    if (secret.length > MAX_SECRET_LENGTH) throw invalid('secrets', `${what}: item ${index} is longer (${secret.length.toLocaleString('en-US')} characters)`)
    headers[`${DECLARED_SECRET}${index}`] = secret
    total += secret.length
  }
  if (total > MAX_SECRETS_TOTAL) throw invalid('secrets', `${what}: they hold ${total.toLocaleString('en-US')} characters together`)
  return headers
}

/**
 * Where `tool` (at `path`, `tools.<index>` in a run's input) shows the model one of the engine's
 * secrets (`engineSecrets`' headers) whole, or the run's provider credential (`provider`: its
 * `apiKey` or a credential header's value, when it looks like a key, as `recordedCredential` finds
 * it): its `description` or its `inputSchema` (a member's name or any text in it), as it is, trimmed
 * or JSON-escaped, as data is redacted. What the model is shown of a tool is the application's own
 * code, sent as it is (not redacted, or the tool would change meaning), and a model may repeat it
 * anywhere. The message names the tool and the field, never the secret. `callTool` applies the same
 * check (it has no provider).
 */
export function toolSecretProblem(
  tool: ToolDefinition,
  path: string,
  declared: Record<string, string>,
  provider?: ProviderCredentials,
  client: Record<string, string> = {},
  /** `admissionSecrets(provider, declared, client)`, when the caller built it already (once for all of a run's tools). */
  built?: Secrets,
): { message: string; fields: string[] } | undefined {
  if (provider === undefined && Object.keys(declared).length === 0 && Object.keys(client).length === 0) return undefined
  // All at once, as the recorded settings were looked through: the same secrets, built once for the
  // run's start. Which of them a definition holds is told apart only for a refusal.
  const secrets = built ?? admissionSecrets(provider, declared, client)
  if (secrets.whole.length === 0) return undefined
  for (const field of ['description', 'inputSchema'] as const) {
    const value = tool[field]
    if (value === undefined || redactDeep(value, secrets) === value) continue
    // Which of them it is, for the message: told apart only for a refusal.
    const engines = Object.keys(declared).length > 0 && redactDeep(value, dataSecretsOf({ headers: declared })) !== value
    const clients = !engines && Object.keys(client).length > 0 && redactDeep(value, admissionSecrets(undefined, {}, client)) !== value
    const what = engines ? "one of the engine's secrets" : clients ? "one of the model client's secrets (ModelClient.secrets)" : "the provider's credential (its apiKey or a credential header's value)"
    return {
      message: `${path}.${field}: the ${field} of tool ${tool.name} holds ${what}, which the model would be sent as it is: keep the secret out of the tool's definition (the tool can read it when it runs)`,
      fields: [`${path}.${field}`],
    }
  }
  return undefined
}

/** A run's secrets: its provider's credentials and header values, and the engine's secrets (`engineSecrets`' headers). */
function runSecrets(provider: RunInput['provider'], declared: Record<string, string>): Secrets {
  return Object.keys(declared).length === 0 ? secretsOf(provider) : secretsOf({ apiKey: provider.apiKey, headers: { ...provider.headers, ...declared } })
}

/**
 * `secrets` with those `client` declares it holds (`ModelClient.secrets`), read once, as
 * `ModelRequest.addSecret` adds them (the same bounds, counted with what it adds later). A client whose
 * `secrets` cannot be read, is not an array, or holds one that is refused refuses the run
 * (`RUN_INVALID_INPUT`, `details.fields` `['provider']`; for a refused secret the cause is the
 * `MODEL_SECRET_INVALID` with its `details.reason`): its run would record what the client holds. The
 * value is never shown.
 */
function withClientSecrets(client: ModelClient, secrets: Secrets): Secrets {
  const refused = (why: string, cause?: unknown) => new FactstateError('RUN_INVALID_INPUT', `provider: the model client's secrets ${why}`, { ...(cause === undefined ? {} : { cause }), details: { fields: ['provider'] } })
  let given: unknown
  let declared: unknown[]
  try {
    given = (client as { secrets?: unknown }).secrets
    if (given === undefined) return secrets
    // A copy, read once (a proxy's items too): what is checked is what is redacted.
    declared = Array.isArray(given) ? Array.from(given as unknown[]) : []
  } catch (error) {
    // Without the run's secrets (the engine's, a child's from its parent), as a model client's failure message loses them.
    throw refused(`could not be read: ${redact(messageOf(error), secrets)}`)
  }
  if (!Array.isArray(given)) throw refused(`must be an array of strings (ModelClient.secrets), not ${kindOf(given)}`)
  for (const [index, secret] of declared.entries()) {
    try {
      secrets = withDeclaredClientSecret(secrets, secret)
    } catch (error) {
      throw refused(`are refused (item ${index}): ${error instanceof FactstateError ? messageWithoutCode(error) : messageOf(error)}`, error)
    }
  }
  return secrets
}

/** What `start` made of its input before reading the log (see `Engine#prepare`). */
interface PreparedRun {
  /** The checked copy that runs, its tools the admitted copies. */
  run: RunInput
  admitted: AdmittedTool[]
  /** The run of this engine it holds secrets from (see `Engine#parentRunOf`). */
  parent: TrackedRun | undefined
  /** The start options, each read once. */
  read: StartOptions
  made: MadeRun
}

/** A run's `invocation.opened` as its admission would append it, with what the actor is made with. */
interface OpeningFact {
  event: RuntimeEvent
  /** The facts a continuation or successor replays. */
  lineage: RuntimeEvent[]
  execution: ExecutionSettings
  budget: number
  /** The backup point the session has not run since, unacknowledged (see `Engine#admit`). */
  restored: BackupPoint | undefined
  /** A successor admitted with its signal already aborted: it gives its turn up. */
  givingUp: boolean
}

/** What `start` made of a run before its admission: its model client, with the secrets that holds. */
interface MadeRun {
  client: ModelClient
  /** The run's secrets: its provider's, the engine's (`declared`) and the client's (`ModelClient.secrets`). */
  secrets: Secrets
  /** What the run's recorded settings were looked through for: `admissionSecrets(provider, declared, client's)`, built once. */
  held: Secrets
}

/** A provider's credentials, as a run input gives them. */
interface ProviderCredentials {
  apiKey?: string | undefined
  headers?: Readonly<Record<string, string>> | undefined
}

/**
 * What a run's recorded settings and its tools' definitions are looked through for, whole: the
 * provider's credential (its `apiKey`, the values of headers that carry one by name, when they look
 * like keys), the model client's (`client`: its `ModelClient.secrets`, as `clientSecretsOf` names
 * them, whatever they look like) and the engine's own secrets (`engineSecrets`' headers, with those a
 * child run holds from its parent run), whatever they look like. Data's secrets only (see `dataSecretsOf`).
 */
function admissionSecrets(provider: ProviderCredentials | undefined, engineSecrets: Record<string, string>, client: Record<string, string> = {}): Secrets {
  // Only headers that carry a credential by name: an Idempotency-Key (or a request id) is no secret,
  // and may well be the run's own fingerprint. The client's are declared secrets by their names.
  const headers = { ...Object.fromEntries(Object.entries(provider?.headers ?? {}).filter(([name]) => SECRET_HEADER.test(name))), ...client, ...engineSecrets }
  return dataSecretsOf({ ...(provider?.apiKey === undefined ? {} : { apiKey: provider.apiKey }), headers })
}

/**
 * The dotted path of the first member of `value` that cannot be read (a getter that throws, a revoked
 * proxy), looked for as a refusal is made; `undefined` where none throws again.
 */
function unreadable(value: unknown): string | undefined {
  const path: string[] = []
  const find = (at: unknown, depth: number): boolean => {
    try {
      // A revoked proxy throws at its first read of any kind.
      if ((typeof at !== 'object' && typeof at !== 'function') || at === null || Array.isArray(at) === undefined) return false
    } catch {
      return true
    }
    if (depth >= 64 || typeof at === 'function') return false
    let keys: string[]
    try {
      keys = Object.keys(at)
    } catch {
      return true
    }
    for (const key of keys) {
      let member: unknown
      path.push(key)
      try {
        member = (at as Record<string, unknown>)[key]
      } catch {
        return true
      }
      if (find(member, depth + 1)) return true
      path.pop()
    }
    return false
  }
  return find(value, 0) && path.length > 0 ? path.join('.') : undefined
}

/**
 * The dotted path of the member of `value` that cannot be copied (a proxy, say), found by copying
 * ever smaller parts of it; `undefined` where no part on its own fails, or a part cannot be read.
 */
function uncopiable(value: Record<string, unknown>): string | undefined {
  const path: string[] = []
  try {
    let at: unknown = value
    for (let depth = 0; depth < 64 && typeof at === 'object' && at !== null; depth += 1) {
      const failing = Object.keys(at).find((key) => {
        try {
          structuredClone((at as Record<string, unknown>)[key])
          return false
        } catch {
          return true
        }
      })
      if (failing === undefined) break
      path.push(failing)
      at = (at as Record<string, unknown>)[failing]
    }
  } catch {
    return undefined
  }
  return path.length === 0 ? undefined : path.join('.')
}

/** The run's own copy of a tool's schema; one that is not plain data (a proxy, a class instance's private state) is named. */
function schemaCopy(schema: NonNullable<ToolDefinition['inputSchema']>, index: number): NonNullable<ToolDefinition['inputSchema']> {
  try {
    return structuredClone(schema)
  } catch (error) {
    throw new FactstateError('RUN_INVALID_INPUT', `tools.${index}.inputSchema must be plain JSON data: it could not be copied: ${messageOf(error)}`, {
      cause: error,
      details: { fields: [`tools.${index}.inputSchema`] },
    })
  }
}

/**
 * A tool as admitted: its name, description and input schema as they were at `start()`, so the
 * catalog the model is shown stays the one the run's execution settings (and any seal) digest,
 * whatever the caller changes later; `execute` still calls the caller's tool (as its method).
 */
function admittedTool(tool: ToolDefinition, index: number): AdmittedTool {
  // Runs share a tool's copy while what the model is shown of it stays the same: an application
  // defines its tools once, and a copy per run would cost every held invocation its schemas.
  const shown = shownText(tool)
  const readOnly = tool.readOnly === true
  const validateInput = tool.validateInput !== false
  const { needsApproval } = tool
  // Read once and checked as read: what runs is what was checked.
  const { timeoutMs, retry } = toolCallLimits(tool, `tools.${index}`)
  const known = admittedTools.get(tool)
  if (
    known?.shown === shown &&
    (known.tool.readOnly === true) === readOnly &&
    (known.tool.validateInput !== false) === validateInput &&
    known.tool.needsApproval === needsApproval &&
    known.tool.timeoutMs === timeoutMs &&
    isDeepStrictEqual(known.tool.retry, retry)
  ) {
    return known
  }
  const admitted: AdmittedTool = {
    shown,
    tool: {
      name: tool.name,
      ...(tool.description === undefined ? {} : { description: tool.description }),
      ...(tool.inputSchema === undefined ? {} : { inputSchema: schemaCopy(tool.inputSchema, index) }),
      ...(readOnly ? { readOnly } : {}),
      ...(validateInput ? {} : { validateInput }),
      ...(needsApproval === undefined ? {} : { needsApproval }),
      ...(timeoutMs === undefined ? {} : { timeoutMs }),
      ...(retry === undefined ? {} : { retry }),
      execute: (input, context) => tool.execute(input, context),
    },
  }
  if (admitted.tool.inputSchema !== undefined && validateInput) {
    try {
      inputChecks.set(admitted.tool, inputCheckOf(admitted.tool.inputSchema))
    } catch (error) {
      throw new FactstateError('RUN_INVALID_INPUT', `tools.${index}.inputSchema: the schema of tool ${tool.name} cannot be used to check its input: ${messageOf(error)}`, {
        details: { fields: [`tools.${index}.inputSchema`] },
      })
    }
  }
  admittedTools.set(tool, admitted)
  return admitted
}

/**
 * The check the engine applies to `tool`'s input as the tool is now: made once while what the tool
 * shows the model stays the same (the engine's own cache of admitted tools), `undefined` when it
 * checks none. Throws `RUN_INVALID_INPUT` for a schema it cannot use.
 */
export function admittedInputCheck(tool: ToolDefinition): InputCheck | undefined {
  return inputChecks.get(admittedTool(tool, 0).tool)
}

/**
 * The copy of `tool` a run would call, as `start()` admits it (its `timeoutMs` and `retry` read once
 * and checked, see `toolCallLimits`), and the check of its input (see {@link admittedInputCheck}).
 * Throws `RUN_INVALID_INPUT` naming `tools.0.<member>`, or what a getter of the tool throws.
 */
export function admittedCall(tool: ToolDefinition): { tool: ToolDefinition; check: InputCheck | undefined } {
  const admitted = admittedTool(tool, 0).tool
  return { tool: admitted, check: inputChecks.get(admitted) }
}

/** A tool's admitted copy and the text of what it shows the model (what the catalog digest covers). */
interface AdmittedTool {
  shown: string
  tool: ToolDefinition
}

const admittedTools = new WeakMap<ToolDefinition, AdmittedTool>()

/** A run this engine is running: its actor, and its ids. */
interface TrackedRun {
  actor: InvocationActor
  invocation: Invocation
  /** See `PieceOrder`: for a run started with both `onModelText` and `onToolCallText`. */
  order?: PieceOrder
}

/**
 * A run being admitted (see `Engine.running`): what its handles hold until a start of its id is
 * admitted (`run`) or every one is refused.
 */
interface Opening {
  /** The ids of the first start of it (a copy). */
  invocation: Invocation
  /** How many starts of its ids are being admitted (a start retried at once makes two). */
  starts: number
  /**
   * Their signals, one a start (`undefined` for a start without one), removed as a start is refused:
   * one aborted before a handle's cancel decides the source, and while every one has aborted, the run
   * takes no hold (as its actor then takes none).
   */
  signals: (AbortSignal | undefined)[]
  /** The first cancel a handle asked for, and the signals that had aborted before it. */
  cancel: { reason: string; after: AbortSignal[] } | undefined
  /** The gate its handles give, which its actor takes over. */
  gate: Gate
  run: TrackedRun | undefined
  /** Resolves with the run once admitted; rejects with the last refusal when none of its starts is. */
  settled: Promise<TrackedRun>
  admitted: (run: TrackedRun) => void
  refused: (error: unknown) => void
}

/** The log each engine drives (see `engineLog`). */
const enginesLog = new WeakMap<Engine, EventLog>()

/** The log `engine` drives, for callers that must not pair an engine with another log (the inspector). */
export function engineLog(engine: Engine): EventLog | undefined {
  return enginesLog.get(engine)
}

/**
 * Admits runs and drives each admitted invocation as an actor over the fact log.
 *
 * @example
 * ```ts
 * const log = await EventLog.open('./.factstate/app')
 * const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 30_000 }) })
 * const outcome = await engine.run({
 *   invocation: { sessionId: 's1', turnId: 't1', runId: 'r1', invocationId: 'i1' },
 *   provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:8080/v1', model: 'local' },
 *   configuration: { cwd: process.cwd() },
 *   tools: [],
 *   work: { kind: 'message', content: 'hello' },
 * })
 * ```
 */
export class Engine {
  readonly #log: LogInternals
  readonly #model: ModelExecutor
  readonly #now: () => number
  readonly #eventId: (invocation: Invocation, ordinal: number) => string
  readonly #maxToolResultBytes: number
  readonly #maxInputBytes: number
  readonly #toolTimeoutMs: number | undefined
  /** The engine's `secrets`, as headers a run's secrets are built from (see `DECLARED_SECRET`). */
  readonly #secrets: Record<string, string>
  readonly #running = new Map<string, TrackedRun>()
  /**
   * The parent run (its invocation id) of each child run this engine admitted while that parent ran,
   * kept till the child ends other than paused, or the parent ends: a handoff successor of a child's
   * turn (which may not give a `parent`: its turn's first run recorded it) holds its secrets too.
   */
  readonly #parentOf = new Map<string, string>()
  /** The runs being admitted, by invocation id, from the end of `start()`'s checks of its input to the admission or refusal. */
  readonly #openings = new Map<string, Opening>()
  /** Calls of `start` not yet admitted or refused (each settles then). */
  readonly #admitting = new Set<Promise<void>>()
  /** The same, by the invocation id each asks for (see `start`). */
  readonly #startingIds = new Map<string, Set<Promise<void>>>()
  /** The session feeds listening to each session's live pieces (see `EngineInternals.watch`). */
  readonly #taps = new Map<string, Set<LiveTap>>()
  /**
   * Set by the first `close()`: from then on starts are refused (`ENGINE_CLOSED`) but a child run's
   * (see `#closedRefusal`); `cancel` the first reason a close cancelled with (a child admitted later
   * is cancelled with it), `done` resolves once every run has ended.
   */
  #closing: { cancel: string | undefined; done: Promise<void> } | undefined

  constructor(options: EngineOptions) {
    const invalid = (field: string, what: string) => new FactstateError('ENGINE_INVALID_OPTIONS', `Engine: ${field} must be ${what}`, { details: { field } })
    if (typeof options !== 'object' || options === null) throw invalid('options', 'an object')
    // Each read once; a misspelt option (`evntId`) is refused, not left at its default.
    const given = readOptions(options, ['log', 'model', 'now', 'eventId', 'maxToolResultBytes', 'maxInputBytes', 'toolTimeoutMs', 'secrets'], {
      call: 'Engine',
      code: 'ENGINE_INVALID_OPTIONS',
      details: (field) => ({ field }),
      required: ['log'],
    })
    const model = given.model as ModelExecutor | undefined
    if (model !== undefined && (typeof model?.clientFor !== 'function' || typeof model.attempt !== 'function')) throw invalid('model', 'a ModelExecutor')
    if (given.now !== undefined && typeof given.now !== 'function') throw invalid('now', 'a function')
    if (given.eventId !== undefined && typeof given.eventId !== 'function') throw invalid('eventId', 'a function')
    for (const field of ['maxToolResultBytes', 'maxInputBytes', 'toolTimeoutMs'] as const) {
      const problem = toolLimitProblem(field, given[field])
      if (problem !== undefined) throw invalid(field, problem)
    }
    this.#secrets = engineSecrets(given.secrets, invalid)
    const log = given.log as EventLog
    try {
      this.#log = logInternals(log)
    } catch {
      throw invalid('log', 'an EventLog (from EventLog.open)')
    }
    // Every run appends: a snapshot would admit it and then refuse its first fact.
    if (log.snapshotOf !== undefined) throw invalid('log', `a log opened with EventLog.open, not a read-only snapshot (of ${log.snapshotOf})`)
    // Every run would be refused at its first read: say so here, where the mistake is made.
    try {
      this.#log.assertOpen()
    } catch (error) {
      if (error instanceof FactstateError && error.code === 'LOG_CLOSED') throw new FactstateError('LOG_CLOSED', 'Engine: the log is closed (open one with EventLog.open)')
      throw error
    }
    enginesLog.set(this, log)
    this.#model = model ?? new ModelExecutor()
    this.#now = (given.now as EngineOptions['now']) ?? Date.now
    this.#eventId = (given.eventId as EngineOptions['eventId']) ?? defaultEventId
    this.#maxToolResultBytes = (given.maxToolResultBytes as number | undefined) ?? DEFAULT_MAX_TOOL_RESULT_BYTES
    this.#maxInputBytes = (given.maxInputBytes as number | undefined) ?? DEFAULT_MAX_INPUT_BYTES
    this.#toolTimeoutMs = given.toolTimeoutMs as number | undefined
    engineInternalsOf.set(this, { watch: (sessionId, tap) => this.#watch(sessionId, tap) })
  }

  /** See `EngineInternals.watch`: the runs of the session running now are few (one, and its held predecessors). */
  #watch(sessionId: string, tap: LiveTap): { soFar: LiveSoFar[]; stop(): void } {
    let taps = this.#taps.get(sessionId)
    if (taps === undefined) {
      taps = new Set()
      this.#taps.set(sessionId, taps)
    }
    taps.add(tap)
    const soFar: LiveSoFar[] = []
    for (const { actor, invocation, order } of this.#running.values()) {
      if (invocation.sessionId !== sessionId) continue
      const calls = actor.liveToolCalls()
      soFar.push({
        text: actor.liveText(),
        calls,
        progress: actor.liveToolProgress() ?? [],
        order: order === undefined || calls === undefined || order.requestSeq !== calls.requestSeq ? undefined : { requestSeq: order.requestSeq, textBefore: [...order.textBefore] },
      })
    }
    const own = taps
    return {
      soFar,
      stop: () => {
        own.delete(tap)
        if (own.size === 0 && this.#taps.get(sessionId) === own) this.#taps.delete(sessionId)
      },
    }
  }

  /**
   * A run's receiver that also hands each piece to the session's feeds (their copy), or the
   * receiver itself when it is not given: a run without it keeps nothing live of that kind.
   */
  #tapped<T extends object>(sessionId: string, receiver: ((value: T) => void) | undefined, kind: keyof LiveTap, copy: (value: T) => T, passed?: (value: T) => void): ((value: T) => void) | undefined {
    if (receiver === undefined) return undefined
    return (value) => {
      passed?.(value)
      const taps = this.#taps.get(sessionId)
      if (taps !== undefined) for (const tap of taps) (tap[kind] as (value: T) => void)(copy(value))
      return receiver(value)
    }
  }

  /**
   * Admits a run and starts its actor, or refuses without writing anything:
   * `RUN_INVALID_INPUT`, `RUN_BUSY`, `RUN_RECONCILIATION_REQUIRED`, `RUN_SOURCE_MISMATCH`,
   * `RUN_SOURCE_STALE`, `HANDOFF_MISMATCH`, `HANDOFF_CLAIMED`; `ENGINE_CLOSED` once `close()` was called.
   */
  start(input: RunInput, options: StartOptions = {}): Promise<RunningInvocation> {
    // A closed engine refuses before it reads more of the input: nothing is tracked, nothing written.
    const closed = this.#closedRefusal(input, 'start')
    if (closed !== undefined) return Promise.reject(closed)
    // Counted from the call: `drain()` also waits for a run that is still being admitted.
    const id = invocationIdOf(input)
    // A copy: this start's own promise joins the set below, and must not be waited for.
    const pending = id === undefined ? undefined : this.#startingIds.get(id)
    const others = pending === undefined ? undefined : [...pending]
    const starting = this.#start(input, options).catch(async (error: unknown) => {
      // A start of ids another start of this engine is admitting (a request retried at once) is
      // refused once that one has settled: `running(id)` then gives its handle, as the refusal says.
      if (others !== undefined && error instanceof FactstateError && error.code === 'RUN_INVALID_INPUT' && (error.details as { reason?: string } | undefined)?.reason === 'exists') {
        await Promise.allSettled(others)
      }
      throw error
    })
    const settled = starting.then(noop, noop)
    this.#admitting.add(settled)
    if (id !== undefined) {
      const byId = this.#startingIds.get(id) ?? new Set<Promise<void>>()
      byId.add(settled)
      this.#startingIds.set(id, byId)
    }
    void settled.then(() => {
      this.#admitting.delete(settled)
      const byId = id === undefined ? undefined : this.#startingIds.get(id)
      byId?.delete(settled)
      if (id !== undefined && byId?.size === 0) this.#startingIds.delete(id)
    })
    return starting
  }

  async #start(input: RunInput, options: StartOptions): Promise<RunningInvocation> {
    // Synchronous up to `#opening`: `running(id)` gives a handle once `start()` has returned.
    const prepared = this.#prepare(input, options)
    const { run, admitted, parent, read, made } = prepared
    // From here on `running(id)` gives a handle of the run (before any await: once `start()` has returned).
    const opening = this.#opening(run.invocation, read.signal, made.secrets)
    try {
      const started = await this.#admitRun(run, admitted, read, opening, made)
      if (parent !== undefined) this.#childOf(run, parent)
      // A child run admitted after a close that cancelled (or while it was being admitted): cancelled as it opens.
      const cancel = this.#closing?.cancel
      if (cancel !== undefined) started.cancel(cancel)
      return started
    } catch (error) {
      if (opening !== undefined) this.#notOpened(opening, error, read.signal)
      throw error
    }
  }

  /**
   * Whether `start(input, options)` would admit the run now: every check `start()` makes before it
   * writes (the same code, the same refusal), the admission rules run in a group commit as the log
   * stands there, and the opening fact staged under every integrity rule, then dropped. Writes nothing,
   * starts nothing, registers no handle (`running(id)` stays `undefined`); it makes the run's model
   * client (to look for its secrets) and asks `now` and `eventId` for the first fact, as `start()`
   * does, and sends no request. A check that passed says nothing of a later `start()`: another start,
   * a seal or a run ending in between can make it refuse.
   */
  async check(input: RunInput, options: StartOptions = {}): Promise<void> {
    const closed = this.#closedRefusal(input, 'check')
    if (closed !== undefined) throw closed
    const { run, admitted, read, made } = this.#prepare(input, options)
    const opening = await this.#openingFact(run, admitted, read.signal, made)
    await this.#log.checkAppend([opening.event], async (view) => {
      // As start()'s admission: a close made while the input was read refuses here.
      const refused = this.#closedRefusal(run, 'check')
      if (refused !== undefined) throw refused
      await this.#admit(run, opening.event, view, opening.restored)
    })
  }

  /**
   * `ENGINE_CLOSED` once `close()` has been called, for any start but a child run's: one whose
   * `parent` (or, for a handoff successor, its source's parent) is a run this engine is still running,
   * started by that run's tool (a supervisor's `delegate`, see `#toolChild`): it is that run's work, which the close
   * lets end (and cancels with the run, when it cancels). `undefined` when the start may go on.
   */
  #closedRefusal(input: unknown, call: 'start' | 'check'): FactstateError | undefined {
    if (this.#closing === undefined || this.#toolChild(input)) return undefined
    const id = invocationIdOf(input)
    // The id when it is one, and not one of the engine's secrets (as `running` shows what it refuses).
    const named = id !== undefined && ID_PATTERN.test(id) && redact(id, secretsOf({ headers: this.#secrets }).inData) === id ? id : undefined
    return new FactstateError(
      'ENGINE_CLOSED',
      `engine.${call}: the engine is closed (engine.close() was called): it admits no new runs${named === undefined ? '' : `, not ${named}`}; start them on another Engine`,
      { details: { call, ...(named === undefined ? {} : { invocationId: named }) } },
    )
  }

  /**
   * What `start` reads and checks of its input before the log is read (synchronously): the run as it
   * will run (a checked copy, its tools admitted), its parent run, its options and its model client.
   */
  #prepare(input: RunInput, options: StartOptions): PreparedRun {
    // The caller keeps its objects: later changes to them (its invocation ids, the pause it passed,
    // its provider options, its tools' schemas) must not alter a running invocation, nor what
    // admission compares after its first await. Everything but the tools is plain data.
    let validated: RunInput
    let copy: RunInput
    let admitted: ReturnType<typeof admittedTool>[]
    let signal: AbortSignal | undefined
    let onModelText: StartOptions['onModelText']
    let onModelReasoning: StartOptions['onModelReasoning']
    let onToolCallText: StartOptions['onToolCallText']
    let onToolProgress: StartOptions['onToolProgress']
    let onApproval: StartOptions['onApproval']
    try {
      // Read once, before anything is written: a signal that cannot be listened to would strand the run.
      ;({ signal, onModelText, onModelReasoning, onToolCallText, onToolProgress, onApproval } = startOptions(options))
      // Checked as given (its members, plain data all through: a class instance is refused before a copy
      // would make it a plain object), then copied, each member read once more, and the copy checked
      // again: that is what runs, so a getter that gives the check one value and the copy another (a
      // relative cwd, provider options naming the model) is refused too. The tools are the caller's own
      // objects (their `execute`), admitted as copies below.
      // Its size too, before the copy below: a message of hundreds of megabytes is refused before it is copied.
      const oversized = inputSizeProblem(validateRunInput(input), this.#maxInputBytes)
      if (oversized !== undefined) throw oversized
      const given: Record<string, unknown> = {}
      for (const key of RUN_INPUT_KEYS) {
        const value = (input as unknown as Record<string, unknown>)[key]
        if (value !== undefined) given[key] = value
      }
      let plain: Record<string, unknown>
      try {
        plain = structuredClone({ ...given, tools: [] })
      } catch (error) {
        const field = uncopiable({ ...given, tools: [] })
        throw new FactstateError('RUN_INVALID_INPUT', `${field === undefined ? '' : `${field}: `}the run input must be plain data (objects, arrays, strings, numbers): it could not be copied: ${messageOf(error)}`, {
          cause: error,
          details: { fields: field === undefined ? [] : [field] },
        })
      }
      validated = validateRunInput({ ...plain, tools: given.tools })
      // Measured again on the copy, which is what is recorded: a getter may have given the check above another value.
      const copied = inputSizeProblem(validated, this.#maxInputBytes)
      if (copied !== undefined) throw copied
      copy = { ...validated, tools: [] }
      admitted = validated.tools.map((tool, index) => admittedTool(tool, index))
      const gated = admitted.find(({ tool }) => tool.needsApproval !== undefined && tool.needsApproval !== false)
      // A successor given up at admission (its signal already aborted) runs no tool and asks no approver.
      if (gated && onApproval === undefined && !(validated.work.kind === 'handoff' && signal?.aborted === true)) {
        throw new FactstateError('RUN_INVALID_INPUT', `tool ${gated.tool.name} needs approval, and the start options have no onApproval to ask`, {
          details: { fields: ['options.onApproval'] },
        })
      }
    } catch (error) {
      // A getter or a proxy trap of the caller's that throws: the input cannot be read, and nothing is written.
      const unread = error instanceof FactstateError ? undefined : unreadable(input)
      const refusal =
        error instanceof FactstateError
          ? error
          : new FactstateError('RUN_INVALID_INPUT', `${unread === undefined ? '' : `${unread}: `}the run input cannot be read: ${messageOf(error)}`, { cause: error, details: { fields: unread === undefined ? [] : [unread] } })
      // Without the secrets the engine knows of (a child's, those it would hold from its parent run too): a
      // refusal quotes what it refused (an unknown member's name, a header's), and ends up in the application's logs.
      throw withoutSecrets(refusal, refusalSecrets(input, this.#declaredFor(this.#parentRunOf(input))))
    }
    const run: RunInput = { ...copy, tools: admitted.map((entry) => entry.tool) }
    // A child run (its `parent` a run of this engine, still running; or a handoff successor of a child's turn)
    // holds the secrets that run holds too: the tool that starts it may pass one on in its message, and
    // its model may echo one.
    const parent = this.#parentRunOf(run)
    const declared = this.#declaredFor(parent)
    // Built once for this start: the recorded settings, each tool's definition and the opened fact's bytes are looked through with it.
    const admission = admissionSecrets(run.provider, declared)
    recordedCredential(run, admission)
    // What the model is shown of each tool, as admitted (the names were checked just above).
    for (const [index, tool] of run.tools.entries()) {
      const problem = toolSecretProblem(tool, `tools.${index}`, declared, run.provider, {}, admission)
      if (problem !== undefined) throw new FactstateError('RUN_INVALID_INPUT', problem.message, { details: { fields: problem.fields } })
    }
    // A closed log refuses the run at its first read: refused here, before a client is made for it.
    this.#log.assertOpen()
    // Made here, before anything is written and before the log is read, so that the secrets the client
    // holds itself (`ModelClient.secrets`: an SDK client made with its key) are looked for in the input
    // as the provider's credential was just above, and no later refusal quotes one.
    const own = runSecrets(run.provider, declared)
    const client = this.#clientFor(run, own)
    const secrets = withClientSecrets(client, own)
    const clientSecrets = clientSecretsOf(secrets)
    let held = admission
    if (Object.keys(clientSecrets).length > 0) {
      // The provider's and the engine's were refused above: what these find more is the client's.
      held = dataSecretsWith(admission, Object.values(clientSecrets))
      clientCredential(run, held)
      for (const [index, tool] of run.tools.entries()) {
        const problem = toolSecretProblem(tool, `tools.${index}`, {}, undefined, clientSecrets, held)
        if (problem !== undefined) throw new FactstateError('RUN_INVALID_INPUT', problem.message, { details: { fields: problem.fields } })
      }
    }
    run.providerOptions ??= {}
    return { run, admitted, parent, read: { signal, onModelText, onModelReasoning, onToolCallText, onToolProgress, onApproval }, made: { client, secrets, held } }
  }

  /**
   * The run of this engine, still running, a run whose input is `input` holds secrets from: its
   * `parent`'s, or for a handoff successor the parent of its source's turn (see `#parentOf`). Read
   * without throwing: `#start` asks it of an input it refused too.
   */
  #parentRunOf(input: unknown): TrackedRun | undefined {
    try {
      const given = input as { parent?: { invocation?: { invocationId?: unknown } }; work?: { kind?: unknown; source?: { invocation?: { invocationId?: unknown } } } } | null | undefined
      let id = given?.parent?.invocation?.invocationId
      if (id === undefined && given?.work?.kind === 'handoff') {
        const source = given.work.source?.invocation?.invocationId
        id = typeof source === 'string' ? this.#parentOf.get(source) : undefined
      }
      return typeof id === 'string' ? this.#running.get(id) : undefined
    } catch {
      return undefined
    }
  }

  /**
   * Whether `input` is a child run a tool of a run this engine still runs is starting: its `parent`
   * names that run and an operation of it in flight (dispatched, not settled), as `childRunFor` gives
   * a tool; or, for a handoff successor that names no parent, its source is such a child's turn (see
   * `#parentRunOf`). A parent named by anything else (a request handler filing a run under a
   * long-running one) makes no child of it: a closed engine refuses it.
   */
  #toolChild(input: unknown): boolean {
    const parent = this.#parentRunOf(input)
    if (parent === undefined) return false
    try {
      const given = (input as { parent?: { operationId?: unknown } } | null | undefined)?.parent
      if (given === undefined) return true
      const { operationId } = given
      return typeof operationId === 'string' && parent.actor.snapshot.context.inflight.some((operation) => operation.operationId === operationId)
    } catch {
      return false
    }
  }

  /** The engine's secrets, with those a run holds from `parent` (see `withPassedOn`). */
  #declaredFor(parent: TrackedRun | undefined): Record<string, string> {
    return parent === undefined ? this.#secrets : withPassedOn(this.#secrets, parent.actor.passedOnSecrets)
  }

  /** Remembers `run`'s parent run while both run (see `#parentOf`); for a successor, in its source's place. */
  #childOf(run: RunInput, parent: TrackedRun): void {
    const child = run.invocation.invocationId
    const parentId = parent.invocation.invocationId
    const tracked = this.#running.get(child)
    if (tracked === undefined) return
    if (run.work.kind === 'handoff') this.#parentOf.delete(run.work.source.invocation.invocationId)
    this.#parentOf.set(child, parentId)
    const forget = () => {
      if (this.#parentOf.get(child) === parentId) this.#parentOf.delete(child)
    }
    // A child that ended paused waits for its successor (in this engine, while the parent runs); any other end has none.
    // Only a paused one waits for its parent's end: a supervisor's thousand children add nothing to it.
    void tracked.actor.done.then((outcome) => (outcome.status === 'handoff_paused' ? void parent.actor.done.then(forget, forget) : forget()), forget)
  }

  /**
   * The run's model client, made by the executor; one that cannot be made (or is none) refuses the run,
   * with nothing written, its error's message without `secrets` (the run's: its provider's, the
   * engine's, a child's from its parent), as a model client's failure message loses them.
   */
  #clientFor(run: RunInput, secrets: Secrets): ModelClient {
    // Before anything is written: a client that cannot be made refuses the run, it does not strand it.
    let client: ModelClient
    try {
      client = this.#model.clientFor(run.provider)
    } catch (error) {
      throw new FactstateError('RUN_INVALID_INPUT', `provider: the model client could not be created: ${redact(messageOf(error), secrets)}`, {
        details: { fields: ['provider'] },
      })
    }
    // Nor does a `createClient` that returns what is not a client (null, a promise of one): every request would fail.
    let complete: unknown
    try {
      complete = (client as { complete?: unknown } | null | undefined)?.complete
    } catch (error) {
      throw new FactstateError('RUN_INVALID_INPUT', `provider: the model client could not be read: ${redact(messageOf(error), secrets)}`, { details: { fields: ['provider'] } })
    }
    if (typeof complete !== 'function') {
      const made = client === null ? 'null' : client instanceof Promise ? 'a promise (createClient must return the client itself)' : typeof client === 'object' ? 'an object without a complete() method' : typeof client
      throw new FactstateError('RUN_INVALID_INPUT', `provider: the model client could not be created: createClient returned ${made}, not a ModelClient`, {
        details: { fields: ['provider'] },
      })
    }
    return client
  }

  /** The admission of a run whose input has been read and checked, and the start of its actor. */
  async #admitRun(run: RunInput, admitted: AdmittedTool[], options: StartOptions, opening: Opening | undefined, made: MadeRun): Promise<RunningInvocation> {
    const { signal, onModelText, onModelReasoning, onToolCallText, onToolProgress, onApproval } = options
    const { client, secrets } = made
    const { invocation } = run
    const { event, lineage, execution, budget, restored, givingUp } = await this.#openingFact(run, admitted, signal, made)
    const snapshot = applyFact(initialInvocationSnapshot(), event.fact)
    // Marked live inside the admission, so a refused concurrent start of the same id never unmarks the admitted one.
    let marked = false
    try {
      await this.#log.appendAll([event], async (view) => {
        // In the group commit: a start called before close() but not yet written is refused, nothing written.
        const closed = this.#closedRefusal(run, 'start')
        if (closed !== undefined) throw closed
        await this.#admit(run, event, view, restored)
        if (!this.#log.live.has(invocation.invocationId)) {
          this.#log.live.add(invocation.invocationId)
          marked = true
        }
      })
    } catch (error) {
      if (marked) this.#log.live.delete(invocation.invocationId)
      throw error
    }
    // Which call pieces came before which text piece: kept only when both kinds are passed on.
    const order = onModelText !== undefined && onToolCallText !== undefined ? new PieceOrder() : undefined
    const actor = new InvocationActor({
      log: this.#log,
      invocation,
      lineage,
      opened: event,
      snapshot,
      execution,
      budget,
      tools: run.tools,
      toolConcurrency: run.toolConcurrency ?? 1,
      client,
      executor: this.#model,
      secrets,
      // A given-up successor's actor gets a signal that stays aborted, whatever the caller's object says later.
      signal: givingUp ? AbortSignal.abort(signal?.reason) : signal,
      // Also to the session's feeds (`sessionFeed`), for a run whose caller listens.
      onModelText: this.#tapped(invocation.sessionId, onModelText, 'text', (piece) => ({ ...piece }), order === undefined ? undefined : (piece) => order.passedText(piece)),
      onToolCallText: this.#tapped(invocation.sessionId, onToolCallText, 'call', (piece) => ({ ...piece }), order === undefined ? undefined : (piece) => order.passedCall(piece)),
      onApproval,
      // Made only for a run whose caller listens: a run without it (a held one, say) holds nothing more.
      ...(onToolProgress === undefined ? {} : { toolProgress: new ToolProgressBoard(this.#tapped(invocation.sessionId, onToolProgress, 'progress', (update) => ({ ...update, value: structuredClone(update.value) })) as typeof onToolProgress) }),
      ...(onModelReasoning === undefined ? {} : { onModelReasoning }),
      now: this.#now,
      eventId: this.#eventId,
      maxToolResultBytes: this.#maxToolResultBytes,
      toolTimeoutMs: this.#toolTimeoutMs,
      // A cancel asked for through `running(id)` while the run was being admitted, unless its signal had aborted first.
      cancel: opening?.cancel !== undefined && !(signal !== undefined && opening.cancel.after.includes(signal)) ? opening.cancel.reason : undefined,
      gate: opening?.gate,
    })
    return this.#track(actor, invocation, opening, order)
  }

  /**
   * The checks of a run's admission made before its group commit (a successor's seal, the ids
   * already used, unknown outcomes, its source's lineage, the recorded settings' bytes) and the
   * `invocation.opened` they lead to: what `start()` appends and `check()` only stages.
   */
  async #openingFact(run: RunInput, admitted: AdmittedTool[], signal: AbortSignal | undefined, made: MadeRun): Promise<OpeningFact> {
    const { held } = made
    const { invocation, work } = run
    const catalog = catalogOf(run.tools, admitted.map((entry) => entry.shown))
    const settings: ExecutionSettings = canonical({
      model: run.provider.model,
      providerOptions: run.providerOptions ?? {},
      mainOutputLimit: run.mainOutputLimit,
      cwd: run.configuration.cwd,
      tools: catalog,
      instructions: run.instructions,
    })
    let execution = settings
    let configuration = run.configuration
    let budget = run.maxSteps ?? DEFAULT_MAX_STEPS
    let opened: InvocationInput
    // A successor admitted with its signal already aborted gives the paused turn up: it ends before
    // any model request, so it runs under no settings of its own and is not held to the seal's (a
    // deploy that changed a tool's description must not strand the turn). It records the seal's.
    const givingUp = work.kind === 'handoff' && signal?.aborted === true
    const fingerprint = run.requestFingerprint === undefined ? {} : { requestFingerprint: run.requestFingerprint }
    // In a log put back from a backup: whether the session has run since, read here, outside the group
    // commit (a session's runs can be many); the admission refuses with it. It only ever goes from
    // restored to run-since, by a run of the session, which the admission then finds busy or opened.
    // Acknowledged apart from unknown outcomes: a run that recovery closed with nothing uncertain is no
    // evidence of what the session did after the backup.
    const restored = work.allowRestored === true ? undefined : await this.#log.restoredSince(invocation.sessionId)
    if (work.kind === 'handoff') {
      const expected = successorOf(work.pause.intent, work.source.invocation)
      if (!sameInvocation(invocation, expected)) {
        throw new FactstateError('HANDOFF_MISMATCH', 'the successor must run as successorOf(pause.intent, source.invocation)', {
          details: { field: 'invocation', expected },
        })
      }
      let differences = givingUp ? [] : executionDifferences(settings, work.pause.execution)
      // A seal made by an earlier build digested a tool without a schema differently (see legacyCatalogDigest);
      // such a build recorded no per-tool digests.
      const sealedTools = work.pause.execution.tools
      if (differences.includes('tools') && sealedTools.digests === undefined && run.tools.some((tool) => tool.inputSchema === undefined)) {
        const legacy = { ...settings, tools: { ...settings.tools, catalogDigest: legacyCatalogDigest(run.tools) } }
        // Other settings may still differ: name them, not the catalog.
        if (!executionDifferences(legacy, work.pause.execution).includes('tools')) differences = differences.filter((field) => field !== 'tools')
      }
      const [difference, ...others] = differences
      if (difference !== undefined) {
        const field = difference
        const sealed = work.pause.execution[field]
        // The catalog as the seal's release recorded one: a seal without per-tool digests is shown a catalog without them.
        const given = field === 'tools' ? catalogAsSealed(settings.tools, sealedTools) : settings[field]
        // The catalog is sealed by digest: with the same names, what changed is a tool's description or input schema.
        const sameNames = difference === 'tools' && isDeepStrictEqual(settings.tools.names, sealedTools.names)
        // A seal with each tool's digest names the tools added, removed and changed (one without cannot).
        const changes = differences.includes('tools') ? catalogChanges(sealedTools, catalog) : undefined
        const changeText = changes === undefined ? undefined : catalogChangeText(changes, sealedTools, catalog)
        // Both values in the message too, for a log line that keeps only the message: the catalog by its tools' names.
        const values = difference === 'tools' ? ` (sealed ${shownSetting(sealedTools.names)}, given ${shownSetting(settings.tools.names)})` : ` (sealed ${shownSetting(sealed)}, given ${shownSetting(given)})`
        // A seal with per-tool digests names the tools: after the catalogs' names (sealed …, given …), or, with the same
        // names, the changed ones (none changed: a catalog digest that is not its tools', which only a forged seal has).
        const catalogText = 'the successor\'s tool catalog does not match the sealed pause'
        const why = !sameNames
          ? `the successor's execution setting ${difference} does not match the sealed pause${values}${difference === 'tools' && changeText !== undefined ? `: ${changeText}` : ''}`
          : changes === undefined
            ? `${catalogText}: the same tools, but a description or input schema changed (which cannot be told: the seal, made by factstate 0.1.0, records no digest per tool)`
            : changes.changed.length > 0
              ? `${catalogText}: the same tools, but a description or input schema changed (${toolNames(changes.changed)})`
              : `${catalogText}: ${changeText}`
        // Every other setting that differs is named too (details.fields), without its values; the tools by what changed of them.
        const othersText = others.map((field) => (field === 'tools' && changeText !== undefined ? `tools (${changeText})` : field))
        const also = others.length === 0 ? '' : `; ${othersText.join(', ')} ${others.length === 1 ? 'differs' : 'differ'} too`
        // The way out of a deploy that changed the setting: give the paused turn up.
        const remedy = '; run the successor with the sealed settings, or give its turn up by admitting it with an already aborted signal'
        throw new FactstateError('HANDOFF_MISMATCH', `${why}${also}${remedy}`, {
          details: { field: difference, fields: differences, sealed: sealed ?? null, given: given ?? null, ...(changes === undefined ? {} : { tools: changes }) },
        })
      }
      // The pause as sealed in the log, where it is the same (#admit refuses any other): the caller's copy may
      // hold its members in another order (a store that sorts JSON keys), and the successor's request body,
      // built from these settings, must be its source's byte for byte.
      const sealed = (await this.#log.invocationRecord(work.source.invocation.invocationId))?.outcome
      const pause = sealed?.status === 'handoff_paused' && isDeepStrictEqual(canonical(sealed.pause), canonical(work.pause)) ? sealed.pause : work.pause
      execution = canonical(pause.execution)
      if (givingUp) configuration = { ...configuration, cwd: execution.cwd }
      budget = pause.remainingSteps
      // The message (a reviewer's decision) as a continuation's is: recorded, then replayed after the sealed
      // transcript. Not a setting: a given-up successor records it too, for a continuation of its run.
      opened = { kind: 'handoff', source: work.source, pause: canonical(pause), ...(work.content === undefined ? {} : { content: work.content }), ...fingerprint }
    } else {
      // Ids already in the log first: a start retried after its run ended (with an outcome to
      // acknowledge, or in a restored log) is told it exists, not asked to reconcile its own run.
      const existing = await this.#log.invocationRecord(invocation.invocationId)
      if (existing) throw usedId(invocation, existing.invocation)
      const priorUnknown = await this.#priorUnknown(run, restored)
      const acknowledged = priorUnknown.length > 0 ? { priorUnknown } : {}
      // Last, as the fact schema orders it.
      const parent = run.parent === undefined ? {} : { parent: run.parent }
      if (work.kind === 'continuation') {
        // A copy: the caller's boundary object never becomes part of the run's settings (or of a pause).
        execution = canonical({ ...settings, replayBase: work.source })
        opened = { kind: 'continuation', source: work.source, ...(work.content === undefined ? {} : { content: work.content }), ...fingerprint, ...acknowledged, ...parent }
      } else {
        opened = { kind: 'message', content: work.content, ...fingerprint, ...acknowledged, ...parent }
      }
    }
    // A successor's id is checked after its claim (in #admit): a second successor is HANDOFF_CLAIMED.
    let lineage: RuntimeEvent[] = []
    if (work.kind !== 'message') {
      try {
        lineage = (await this.#log.lineage(work.source)).map((stored) => stored.event)
      } catch (error) {
        if (work.kind === 'handoff' && error instanceof FactstateError && error.code === 'RUN_SOURCE_MISMATCH') {
          throw new FactstateError('HANDOFF_MISMATCH', `the handoff source does not match the log: ${messageWithoutCode(error)}`, { cause: error, details: { field: 'source' } })
        }
        throw error
      }
    }
    const event: RuntimeEvent = canonical({
      id: this.#firstEventId(invocation),
      recordedAt: this.#firstTime(),
      invocation,
      fact: { type: 'invocation.opened', input: opened, configuration, execution },
    })
    // Its settings were looked through one by one (`recordedCredential`); as the log writes them together,
    // msgpack's bytes between two of them (a member's name after its header byte) can complete a secret neither holds.
    if (holdsSecretBytes(event.fact, held)) {
      throw new FactstateError(
        'RUN_INVALID_INPUT',
        "the run's recorded settings spell the provider's credential, the model client's or one of the engine's secrets together, in the bytes the log would write them in (msgpack's own bytes between two of them complete it): change the message, instructions or other settings",
        { details: { fields: [] } },
      )
    }
    // The session's latest run is checked in the admission, atomically; read here first, outside the
    // group commit, so that the check there finds it in memory (a log just opened reads the run index).
    if (work.kind === 'continuation' && work.onlyIfLatest === true) await this.#log.latestRun(invocation.sessionId)
    return { event, lineage, execution, budget, restored, givingUp }
  }

  /** Registers a started actor and makes its handle (apart from `start`, so the handle does not keep the input alive). */
  #track(actor: InvocationActor, invocation: Invocation, opening: Opening | undefined, order?: PieceOrder): RunningInvocation {
    const { invocationId } = invocation
    const entry: TrackedRun = order === undefined ? { actor, invocation } : { actor, invocation, order }
    this.#running.set(invocationId, entry)
    // In the same turn as the actor was made: a cancel from a handle given during the admission reached it above, a later one reaches the actor.
    if (opening !== undefined) {
      opening.run = entry
      opening.admitted(entry)
      if (this.#openings.get(invocationId) === opening) this.#openings.delete(invocationId)
    }
    void actor.done.finally(() => this.#running.delete(invocationId)).catch(ignore)
    return this.#handle(entry)
  }

  /**
   * Registers a start of `invocation` being admitted (see `running`), or joins the one of the same
   * ids this engine is admitting already (a start retried at once: one of them at most is admitted).
   * None for the ids of a run this engine is running (the start will be refused as `exists`), nor for
   * a start of the invocation id under other ids (another session's run, say): the handles given
   * show the first start's ids, and a stop of its session must not cancel another session's run.
   */
  #opening(invocation: Invocation, signal: AbortSignal | undefined, secrets: Secrets): Opening | undefined {
    const { invocationId } = invocation
    if (this.#running.has(invocationId)) return undefined
    const known = this.#openings.get(invocationId)
    if (known !== undefined) {
      if (!sameInvocation(known.invocation, invocation)) return undefined
      known.starts += 1
      known.signals.push(signal)
      return known
    }
    let admitted: (run: TrackedRun) => void = noop
    let refused: (error: unknown) => void = noop
    const settled = new Promise<TrackedRun>((resolve, reject) => {
      admitted = resolve
      refused = reject
    })
    // Nobody may ever wait for it: a refused start rejects its own promise.
    settled.catch(ignore)
    const opening: Opening = {
      invocation: structuredClone(invocation),
      starts: 1,
      signals: [signal],
      cancel: undefined,
      run: undefined,
      settled,
      admitted,
      refused,
      // A hold reserved while the run is being admitted is taken at its first safe point, unless it is cancelled first.
      // The run's own ids (its actor's, unless a start of the same invocation id made at once is admitted instead):
      // no copy more for each held run to keep.
      // Refused once it is cancelled, or once the signal of every start of it has aborted (any one admitted is cancelled).
      // An intent's members are looked through for the secrets this start's ids were (its actor's own once admitted).
      gate: new Gate(invocation, {
        holdRefusal: () =>
          opening.cancel !== undefined || opening.signals.every((given) => given?.aborted === true)
            ? new FactstateError('HANDOFF_UNAVAILABLE', `invocation ${invocationId} is being cancelled`)
            : undefined,
        // The run's own: its model client's, and a child's from its parent, with the provider's and the engine's.
        holdSecrets: () => secrets,
      }),
    }
    this.#openings.set(invocationId, opening)
    return opening
  }

  /** A start of `opening` refused (or failed): the last one of its id to settle without a run says so to the handles given meanwhile. */
  #notOpened(opening: Opening, error: unknown, signal: AbortSignal | undefined): void {
    opening.starts -= 1
    const at = opening.signals.indexOf(signal)
    if (at !== -1) opening.signals.splice(at, 1)
    if (opening.run !== undefined || opening.starts > 0) return
    const { invocationId } = opening.invocation
    if (this.#openings.get(invocationId) === opening) this.#openings.delete(invocationId)
    opening.gate.close(new FactstateError('HANDOFF_UNAVAILABLE', `invocation ${invocationId} was not admitted: ${messageOf(error)}`))
    opening.refused(error)
  }

  /**
   * A handle of a running actor (`start` gives one, `running` another), or of a run being admitted
   * (`running` during `start`): that one becomes the run's once admitted, and till then cancels it as
   * it opens, waits for it, and says it is `opening`; if no start of its id is admitted, `wait()`
   * rejects with the refusal and nothing was written.
   */
  #handle(of: TrackedRun | Opening): RunningInvocation {
    const current = (): TrackedRun | undefined => ('actor' in of ? of : of.run)
    const settled = 'actor' in of ? undefined : of.settled
    const handle: RunningInvocation = {
      cancel(reason?: string) {
        if (reason !== undefined && typeof reason !== 'string') {
          // Its kind, not its text: an error's message may quote a secret, and the refusal ends up in the application's logs.
          throw new FactstateError('RUN_INVALID_INPUT', `cancel: reason must be a string, not ${kindOf(reason)} (pass error.message, say; the value is not shown)`, {
            details: { field: 'reason', fields: ['reason'] },
          })
        }
        const why = reason === undefined || reason === '' ? 'cancel' : reason
        const run = current()
        // Not admitted yet: the first reason is kept for the actor, with the signals that had aborted before it (which come first).
        if (run === undefined) {
          const opening = of as Opening
          opening.cancel ??= { reason: why, after: opening.signals.filter((signal): signal is AbortSignal => signal?.aborted === true) }
          return
        }
        // Once aborted (by a cancel or the caller's signal), or ended, the first reason stays: cancelling again does nothing.
        // The actor's own (not an AbortController per run: a held run keeps none, see InvocationActor.cancel).
        run.actor.cancel(why)
      },
      invocation: structuredClone(of.invocation),
      handoff() {
        return current()?.actor.gate ?? (of as Opening).gate
      },
      liveText() {
        return current()?.actor.liveText()
      },
      liveToolCalls() {
        return current()?.actor.liveToolCalls()
      },
      liveToolProgress() {
        return current()?.actor.liveToolProgress()
      },
      wait() {
        // Each caller gets its own copy: one that changes its outcome changes no other's.
        const done = current()?.actor.done ?? (settled as Promise<TrackedRun>).then((run) => run.actor.done)
        return done.then((outcome) => structuredClone(outcome))
      },
      state() {
        const run = current()
        return run === undefined ? 'opening' : stateOf(run.actor.snapshot)
      },
      snapshot() {
        // A copy: the actor's own snapshot decides the run (its step count, its pending calls).
        const now = current()?.actor.snapshot ?? initialInvocationSnapshot()
        return { ...now, context: structuredClone(now.context), tags: new Set(now.tags) }
      },
    }
    return handle
  }

  /** The id of a run's first fact: an `eventId` option that throws refuses the run before anything is written. */
  #firstEventId(invocation: Invocation): string {
    let id: unknown
    try {
      id = this.#eventId(invocation, 1)
    } catch (error) {
      throw new FactstateError('ENGINE_INVALID_OPTIONS', `Engine: eventId threw for the first fact of ${invocation.invocationId}: ${messageOf(error)}`, {
        cause: error,
        details: { field: 'eventId' },
      })
    }
    // Said as the option's fault, not the event's: the caller gave no id.
    if (!eventIdSchema.safeParse(id).success) {
      const shown = typeof id === 'string' ? JSON.stringify(id.length > 40 ? `${id.slice(0, 40)}…` : id) : typeof id
      throw new FactstateError('ENGINE_INVALID_OPTIONS', `Engine: eventId made ${shown} for the first fact of ${invocation.invocationId}, not an event id (1–512 printable ASCII characters without spaces)`, {
        details: { field: 'eventId' },
      })
    }
    return id as string
  }

  /** The clock's time for a run's first fact: a clock that throws or tells no time is the option's fault. */
  #firstTime(): number {
    let time: unknown
    try {
      time = this.#now()
    } catch (error) {
      throw new FactstateError('ENGINE_INVALID_OPTIONS', `Engine: now threw: ${messageOf(error)}`, { cause: error, details: { field: 'now' } })
    }
    if (typeof time !== 'number' || !Number.isSafeInteger(time) || time < 0) {
      throw new FactstateError('ENGINE_INVALID_OPTIONS', `Engine: now must return milliseconds since the epoch (a non-negative integer), not ${shown(time)}`, { details: { field: 'now' } })
    }
    return time
  }

  /**
   * The handle of a run this engine is running or admitting, or `undefined`: never started here,
   * ended, or run by another engine or process (`log.runs` says how that went). Running: admitted
   * and not ended, its actor still drives it. Admitting: from the moment `start()` returns (its input
   * checked) until it resolves or rejects; such a handle's `cancel()` ends the run `cancelled` as soon
   * as it is opened, with the facts a cancel right after `start()` resolved gives (`invocation.opened`,
   * then `invocation.ended{cancelled}`, no model request), `state()` is `'opening'` until then, and if
   * the start is refused (`RUN_BUSY`, …) nothing was written, the cancel did nothing and `wait()`
   * rejects with the refusal. For a stop button pressed as the run starts, and for a caller that lost
   * the handle `start` gave, such as a request retried after its reply was lost, refused with
   * `RUN_INVALID_INPUT{reason: 'exists'}`. Each call gives a handle of its own; they share the run.
   * `RUN_INVALID_INPUT` for what is not an id.
   */
  running(invocationId: string): RunningInvocation | undefined {
    if (typeof invocationId !== 'string' || !ID_PATTERN.test(invocationId)) {
      // Shown (an id taken from a request path, cut), but not a secret of the engine's in it (a token given for an id).
      const given = typeof invocationId === 'string' ? shown(redact(invocationId, secretsOf({ headers: this.#secrets }).inData)) : kindOf(invocationId)
      throw new FactstateError('RUN_INVALID_INPUT', `running: invocationId must be an id (1–128 of A–Z a–z 0–9 . _ : -), not ${given}`, {
        details: { field: 'invocationId', fields: ['invocationId'] },
      })
    }
    const running = this.#running.get(invocationId) ?? this.#openings.get(invocationId)
    return running === undefined ? undefined : this.#handle(running)
  }

  /**
   * The invocation ids `running(id)` gives a handle for now: the runs this engine is running
   * (admitted and not ended, held ones waiting for their holder's decision included), in the order
   * they were admitted, then the runs its `start()` calls are admitting, in the order they were
   * called; as `drain()` and `close()` wait for them. A copy: for a shutdown that gave up waiting for `close()`
   * to say what it left running (a crash's recovery closes those runs).
   */
  inFlight(): string[] {
    // Once: a start of an id under other ids can be admitted while the first start of it is still being refused.
    return [...new Set([...this.#running.keys(), ...this.#openings.keys()])]
  }

  /** Starts a run and waits for its outcome. */
  async run(input: RunInput, options: StartOptions = {}): Promise<InvocationOutcome> {
    return (await this.start(input, options)).wait()
  }

  /**
   * Waits until every invocation this engine runs (including ones started meanwhile, and ones still
   * being admitted) has ended. A held run keeps it waiting until its hold is decided. `signal` stops
   * the wait: the promise rejects with its reason, and nothing is cancelled. Options that are not
   * `{ signal? }` are `ENGINE_INVALID_OPTIONS`.
   */
  drain(options?: DrainOptions): Promise<void> {
    let signal: AbortSignal | undefined
    try {
      ;({ signal } = waitOptions(options, 'engine.drain'))
    } catch (error) {
      return Promise.reject(error)
    }
    return untilAborted(this.#drained(), signal)
  }

  async #drained(): Promise<void> {
    while (this.#running.size > 0 || this.#admitting.size > 0) {
      await Promise.allSettled([...this.#admitting, ...[...this.#running.values()].map(({ actor }) => actor.done)])
    }
  }

  /**
   * Closes the engine to new runs: from this call on, `start()`, `run()` and `check()` are refused
   * `ENGINE_CLOSED` with nothing written, a start called before it but not yet admitted included (one
   * whose `invocation.opened` was already being written is admitted, and waited for). A child run
   * (its `parent` a run this engine still runs, its `parent.operationId` a tool call of that run in
   * flight, as `childRunFor(context)` gives a tool) is still admitted: it is that run's work. Resolves once every run the engine has, admitted or being admitted, has ended,
   * as `drain()` waits (held runs too: a hold waits for its holder's decision). `cancel: reason`
   * cancels each of them as `running.cancel(reason)` does, and the children admitted later; a held
   * run then ends `cancelled` (`release()`/`commit()` reject `HANDOFF_NOT_HELD`), or sealed
   * (`handoff_paused`) when its reservation asked for `sealOnCancel`. `signal` stops the wait (the
   * promise rejects with its reason); the engine stays closed. Again, or at once: the same close
   * (without a signal, the same promise); a later `cancel` cancels the runs still in flight. It
   * does not close the log: close it once this has resolved. Options that are not
   * `{ cancel?, signal? }` are `ENGINE_INVALID_OPTIONS`, and close nothing.
   */
  close(options?: EngineCloseOptions): Promise<void> {
    let read: EngineCloseOptions
    try {
      read = waitOptions(options, 'engine.close')
    } catch (error) {
      return Promise.reject(error)
    }
    this.#closing ??= { cancel: undefined, done: this.#drained() }
    const closing = this.#closing
    if (read.cancel !== undefined) {
      closing.cancel ??= read.cancel
      // Those admitted and those being admitted (their handles cancel them as they open); each keeps its first reason.
      for (const entry of [...this.#running.values(), ...this.#openings.values()]) this.#handle(entry).cancel(read.cancel)
    }
    return untilAborted(closing.done, read.signal)
  }

  /**
   * The unknown outcomes a new message must acknowledge (`allowPriorUnknown`), and in a log put back
   * from a backup a session that has not run since it (`restored`, unless `allowRestored`):
   * `RUN_RECONCILIATION_REQUIRED`.
   */
  async #priorUnknown(run: RunInput, restored: BackupPoint | undefined): Promise<UncertainOperation[]> {
    const session = await this.#log.sessionRecord(run.invocation.sessionId)
    if (session.unknown.length === 0 && restored === undefined) return []
    const acknowledged = (run.work as { allowPriorUnknown?: boolean }).allowPriorUnknown === true
    const unknown = session.unknown.length === 0 ? [] : await this.#withInputs(session.unknown)
    // A session with a run open or a turn paused is refused as busy by the admission instead.
    if (session.active.length === 0 && session.paused.length === 0 && (restored !== undefined || (unknown.length > 0 && !acknowledged))) {
      throw this.#reconciliation(unknown, restored, acknowledged)
    }
    return unknown
  }

  /**
   * `unknown` with the input each operation was dispatched with, read from its invocation's facts:
   * the model is told which call may or may not have happened (two calls to one tool differ only
   * there), and so is the caller. Left out where a run's `priorUnknown` could not hold it (see
   * `UNKNOWN_INPUT_DEPTH`).
   */
  async #withInputs(unknown: UncertainOperation[]): Promise<UncertainOperation[]> {
    const inputs = await dispatchedInputs(unknown, (id) => this.#log.invocationEvents(id))
    return unknown.map((op) => {
      const input = inputs.get(dispatchedKey(op.invocationId, op.operationId))
      return input === undefined || storageProblemAt(input, UNKNOWN_INPUT_DEPTH) !== undefined ? op : { ...op, input }
    })
  }

  /** `acknowledged`: the unknown outcomes were acknowledged (`allowPriorUnknown`), the restore was not. */
  #reconciliation(unknown: UncertainOperation[], restored?: BackupPoint, acknowledged = false): FactstateError {
    const why: string[] = []
    const remedies: string[] = []
    if (restored !== undefined) {
      why.push(
        `the log was put back from a backup taken at ${new Date(restored.takenAt).toISOString()} (at seq ${restored.highWater}), and this session has not run since: what it did after the backup is not in the log (check its tools' effects since then)`,
      )
      remedies.push('work.allowRestored: true')
    }
    if (unknown.length > 0) {
      why.push(
        `an earlier run of this session left ${unknown.length} tool outcome(s) unknown${acknowledged ? ' (acknowledged)' : ': find out whether each took effect (details.unknown names each call, its input and its operationId, the idempotency key its tool was given), and tell the model what you found in the content'}`,
      )
      if (!acknowledged) remedies.push('work.allowPriorUnknown: true')
    }
    return new FactstateError('RUN_RECONCILIATION_REQUIRED', `${why.join('; ')}; pass ${remedies.join(' and ')} to go on`, {
      // A copy: the operations are the log's own cached session record, which a caller must not be able to change.
      details: { unknown: structuredClone(unknown), ...(restored === undefined ? {} : { restored: { ...restored } }) },
    })
  }

  /** The admission rules, checked atomically with the append of `invocation.opened`. */
  /** `restored`: the backup point the session has not run since, unacknowledged, as read before the group commit. */
  async #admit(run: RunInput, event: RuntimeEvent, view: AppendView, restored: BackupPoint | undefined): Promise<void> {
    const { invocation, work } = run
    const session = await view.session(invocation.sessionId)
    const allowed = (work as { allowPriorUnknown?: boolean }).allowPriorUnknown === true
    /** In a log put back from a backup, a session that has not run since it, unacknowledged: `RUN_RECONCILIATION_REQUIRED`. */
    const refuseRestored = async (unknown: UncertainOperation[]): Promise<void> => {
      if (restored !== undefined) throw this.#reconciliation(await this.#withInputs(unknown), restored, allowed)
    }
    const busy = (why: string, details: RunBusyDetails) =>
      new FactstateError('RUN_BUSY', `session ${invocation.sessionId} ${why}`, { details: { sessionId: invocation.sessionId, ...details } })
    // A log has one writer: an open invocation no actor of this process runs was left open by a process that stopped.
    const activeWhy = (active: { runId: string; invocationId: string }) =>
      this.#log.live.has(active.invocationId)
        ? `has an active run (${active.runId}): wait for it to end, or cancel it (engine.running(${JSON.stringify(active.invocationId)})?.cancel(), or its signal)`
        : `has a run left open by a process that stopped (${active.runId}): recoverInvocations(log) closes it`
    // A successor's run is checked by its claim and seal (a second successor is HANDOFF_CLAIMED).
    if (work.kind !== 'handoff') {
      const existing = await view.run(invocation.sessionId, invocation.runId)
      // The same run and invocation again (a start racing its twin): both ids are reused.
      if (existing) {
        // The ids the log holds (its turn may differ from the refused start's).
        if (existing.invocationId === invocation.invocationId) throw usedId(invocation, (await view.invocation(invocation.invocationId))?.invocation ?? invocation)
        throw usedRun(invocation, existing.invocationId)
      }
      const sealer = await view.successorReservation(invocation.invocationId)
      if (sealer !== undefined) {
        throw new FactstateError('RUN_INVALID_INPUT', `invocation.invocationId: ${invocation.invocationId} is reserved for the successor of ${sealer}, sealed and not yet admitted`, {
          details: { fields: ['invocation.invocationId'] },
        })
      }
    }
    if (work.kind === 'handoff') {
      const sourceId = work.source.invocation.invocationId
      const source = await view.invocation(sourceId)
      if (source?.outcome?.status !== 'handoff_paused') {
        throw new FactstateError('HANDOFF_MISMATCH', `invocation ${sourceId} was not sealed by a handoff`, { details: { field: 'source' } })
      }
      if (!isDeepStrictEqual(canonical(source.outcome.pause), canonical(work.pause))) {
        throw new FactstateError('HANDOFF_MISMATCH', 'the pause differs from the one sealed in the log', { details: { field: 'pause' } })
      }
      if (source.lastSeq !== work.source.highWater) {
        throw new FactstateError('HANDOFF_MISMATCH', 'the source boundary is not the sealed one', { details: { field: 'source' } })
      }
      const claimId = work.pause.intent.claimId
      const user = await view.claim(claimId)
      if (user !== undefined || !session.paused.some((turn) => turn.invocationId === sourceId)) {
        // What became of the successor that used it, and how to go on from there: a successor runs once.
        const successor = user === undefined ? undefined : await view.invocation(user)
        let next = ''
        if (successor?.outcome !== undefined) {
          const { outcome } = successor
          const ended = outcome.status === 'failed' ? `failed ${outcome.class}` : outcome.status
          next = `, which ended ${ended}: to go on from it, continue its run ${successor.invocation.runId} (work kind continuation, from log.runSource's boundary for it), which gets maxSteps anew, not the seal's remainingSteps`
        } else if (successor !== undefined) {
          next = ', which is still open: running, or left open by a crash until recoverInvocations closes it'
        }
        throw new FactstateError('HANDOFF_CLAIMED', `claim ${claimId} was already used${user ? ` by ${user}` : ''}${next}`, {
          details: { claimId, ...(user !== undefined && { claimedBy: user }) },
        })
      }
      const active = session.active[0]
      if (active) throw busy(activeWhy(active), { reason: 'active', runId: active.runId, invocationId: active.invocationId })
      // The successor may have run after the backup (its claim used, its tools called), which the log no
      // longer shows. Checked after the claim: one used in the log is HANDOFF_CLAIMED, acknowledged or not.
      await refuseRestored([])
      const existing = await view.invocation(invocation.invocationId)
      if (existing) throw usedId(invocation, existing.invocation)
      return
    }
    const active = session.active[0]
    if (active) throw busy(activeWhy(active), { reason: 'active', runId: active.runId, invocationId: active.invocationId })
    const paused = session.paused[0]
    if (paused) {
      throw busy(`has turn ${paused.turnId} paused by a handoff; its successor has not finished: admit its successor (work kind handoff, with the pause and boundary log.runSource gives for the sealed run), or admit it with an aborted signal to give the turn up`, {
        reason: 'paused',
        runId: paused.runId,
        invocationId: paused.invocationId,
        turnId: paused.turnId,
      })
    }
    if (work.kind === 'continuation') {
      const source = await view.invocation(work.source.invocation.invocationId)
      if (source?.terminal === null || source === undefined) {
        throw busy('is still running the source run: continue it once it has ended', {
          reason: 'source_running',
          runId: work.source.invocation.runId,
          invocationId: work.source.invocation.invocationId,
        })
      }
      // Only now, busy sessions refused: the latest run as the log stands in this group commit, opens
      // staged before this one included (see `LatestRun` in the log). Before the boundary's own check:
      // asking runSource again for a run that is not the latest would not help.
      if (work.onlyIfLatest === true) {
        const latest = await view.latestRun(invocation.sessionId)
        const { runId, invocationId } = work.source.invocation
        if (latest !== undefined && (latest.runId !== runId || latest.invocationId !== invocationId)) {
          throw new FactstateError(
            'RUN_SOURCE_STALE',
            `run ${runId} is not the last run of session ${invocation.sessionId}: run ${latest.runId} opened after it; continue the latest run instead (its boundary from log.runSource), or leave onlyIfLatest out to branch from this one`,
            { details: { sessionId: invocation.sessionId, sourceRunId: runId, latestRunId: latest.runId, latestInvocationId: latest.invocationId } },
          )
        }
      }
      // A boundary taken while the source ran would replay half a step: only its end is a source.
      if (source.lastSeq !== work.source.highWater) {
        const { sessionId, runId } = work.source.invocation
        throw new FactstateError('RUN_SOURCE_MISMATCH', `the boundary at ${work.source.highWater} is not the end of run ${runId}, which ended at ${source.lastSeq}; ${sourceRemedy(sessionId, runId, 'highWater')}`, {
          details: { sessionId, runId, field: 'highWater', lastSeq: source.lastSeq, ended: true },
        })
      }
    }
    // Again here, atomically: #priorUnknown let a busy session through to be refused as busy, and the
    // run that made it busy may have been closed since (by recoverInvocations) without the session running.
    await refuseRestored(session.unknown)
    if (session.unknown.length > 0) {
      const fact = event.fact
      const acknowledged = fact.type === 'invocation.opened' && fact.input.kind !== 'handoff' ? (fact.input.priorUnknown ?? []) : []
      const ids = new Set(acknowledged.map((op) => op.operationId))
      // With their inputs, as #priorUnknown gives them: a run closed since (by recovery) is found only here.
      if (!allowed || session.unknown.some((op) => !ids.has(op.operationId))) throw this.#reconciliation(await this.#withInputs(session.unknown))
    }
    const existing = await view.invocation(invocation.invocationId)
    if (existing) throw usedId(invocation, existing.invocation)
  }
}
