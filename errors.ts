import type { Invocation, UncertainOperation } from './facts/types.js'
import type { BackupPoint } from './store/backup-point.js'

/**
 * Every refusal factstate makes carries a stable `code`. Codes never change meaning; messages
 * are free text for people and may change. Test and branch on `code`, never on `message`.
 *
 * @example
 * ```ts
 * try { await engine.start(input) }
 * catch (error) {
 *   if (error instanceof FactstateError && error.code === 'RUN_BUSY') retryLater()
 * }
 * ```
 */
export type FactstateErrorCode =
  // the log
  | 'LOG_WRITER_BUSY'
  | 'LOG_INVALID_EVENT'
  | 'LOG_CONFLICT'
  | 'LOG_SEALED'
  | 'LOG_REJECTED_FACT'
  | 'LOG_CORRUPT'
  | 'LOG_CLOSED'
  | 'LOG_PREFIX_TOO_LARGE'
  | 'LOG_INVALID_ARGUMENT'
  | 'LOG_IO'
  | 'LOG_FORMAT_UNSUPPORTED'
  | 'LOG_READ_ONLY'
  // admission
  | 'RUN_INVALID_INPUT'
  | 'RUN_BUSY'
  | 'RUN_RECONCILIATION_REQUIRED'
  | 'RUN_SOURCE_MISMATCH'
  | 'RUN_SOURCE_STALE'
  // handoff
  | 'HANDOFF_MISMATCH'
  | 'HANDOFF_CLAIMED'
  | 'HANDOFF_BUSY'
  | 'HANDOFF_NOT_HELD'
  | 'HANDOFF_CANCELLED'
  | 'HANDOFF_UNAVAILABLE'
  // the machine
  | 'MACHINE_REJECTED'
  // a tool's own calls into its context, and a model client's into its request
  | 'TOOL_SECRET_INVALID'
  | 'TOOL_PROGRESS_INVALID'
  | 'MODEL_SECRET_INVALID'
  // options of the engine, its model executor and the inspector
  | 'ENGINE_INVALID_OPTIONS'
  | 'INSPECTOR_INVALID_OPTIONS'
  // an engine that `close()` has closed
  | 'ENGINE_CLOSED'
  // the testing kit (`factstate/testing`)
  | 'TESTING_INVALID_OPTIONS'
  // the tools of an MCP server (`factstate/mcp`)
  | 'MCP_INVALID_OPTIONS'
  | 'MCP_INVALID_TOOLS'
  // the Anthropic model client (`factstate/anthropic`)
  | 'ANTHROPIC_INVALID_OPTIONS'
  // spans and metrics from a log (`factstate/opentelemetry`)
  | 'OPENTELEMETRY_INVALID_OPTIONS'

/** Why a `LOG_IO` happened (its `details.reason`): see {@link FactstateErrorDetails}. */
export type LogIoReason = 'no_space' | 'permission' | 'read_only' | 'too_many_files' | 'directory_gone' | 'changing' | 'other'

/**
 * What `details` holds, code by code (`undefined` where a refusal has nothing structured to add).
 * Narrow an error with {@link isFactstateError} to read them typed:
 *
 * ```ts
 * if (isFactstateError(error, 'RUN_BUSY')) console.log(error.details.reason, error.details.runId)
 * ```
 */
export interface FactstateErrorDetails {
  /**
   * `holder`: whether a handle of this process has the log open (`this-process`) or another process
   * does (`another-process`); `closing`: that handle of this process is closing it (await its `close()`);
   * `pid`: the other process's id, where it can be told (Linux lists the log's lock in /proc/locks);
   * `toolsRunning`: the handle of this process is closed, but that many tool calls its engines
   * started still run, and the directory stays locked until they settle.
   */
  LOG_WRITER_BUSY: { holder: 'this-process' | 'another-process'; closing: boolean; pid?: number; toolsRunning?: number }
  /** `fields`: the paths of the bad fields (`(root)` for the event as a whole); empty when the event could not be read at all. */
  LOG_INVALID_EVENT: { fields: string[] }
  /** `seq`: the seq that holds the id (or will); `eventId`: the id used twice in one call, with no seq. */
  LOG_CONFLICT: { seq: number } | { eventId: string }
  LOG_SEALED: { invocationId: string; eventId: string }
  /** `type` and `invocationId` where the machine refused the fact; `eventId` always. */
  LOG_REJECTED_FACT: { eventId: string; invocationId?: string; type?: string }
  /** `seq`: the first bad seq where one is known; `index` and `key`: an index record; `file`: a table file cut short or missing, or the write-ahead log LevelDB dropped bytes of. */
  LOG_CORRUPT: { seq?: number; index?: string; key?: string; file?: string } | undefined
  /** `seq`: the last seq a follower read, when it was reading from the log as it closed. */
  LOG_CLOSED: { seq: number } | undefined
  LOG_PREFIX_TOO_LARGE: undefined
  /**
   * `notALog`: `EventLog.open` found another program's LevelDB database. `destination`: why
   * `EventLog.backup` refused its destination (it exists, has no parent directory, or is inside the log).
   * `field`: the option refused (of `EventLog.open`, `openSnapshot`, `pendingSessions`, `events()`,
   * `recoverInvocations`; as given, for one the call does not take: `waitms`; `options` for options
   * that are not an object), or the id argument of a read (`runs`, `runSource`, `invocationEvents`,
   * `pendingSessions`) that is not an id; `follow` for `events({ follow: true })` on a snapshot.
   * `highWater`: with `field: 'from'`, the log's high-water when `events()` was given a `from` past its
   * end (more than `highWater + 1`, with no `to` below it); with `field: 'seq'`, the high-water that
   * `digestAt` was given a seq past (or a seq that is no whole number from 0).
   * `snapshotOf`: beside that `highWater`, when the log read is a snapshot: the path of the log it
   * copies, which may have reached the seq since (a snapshot of it taken now tells).
   * `reason: 'no_log'`, with `path` (the location as given): there is no log there (no directory, an
   * empty one, a file, or a directory of other files), from `openSnapshot`, `backup` and
   * `open(location, { create: false })`: a reader started before the application that makes the log
   * waits and tries again on this, and on nothing else.
   */
  LOG_INVALID_ARGUMENT:
    | {
        notALog?: true
        destination?: 'exists' | 'no_parent' | 'inside_log'
        field?: string
        highWater?: number
        snapshotOf?: string
        reason?: 'no_log'
        path?: string
      }
    | undefined
  /**
   * `reason`: why the file system refused (`no_space`: the disk or a quota is full; `permission`: the
   * process may not read or write there; `read_only`: a read-only file system; `too_many_files`: the
   * process's (or system's) limit of open files, `ulimit -n`; `directory_gone`: the log's directory, or
   * a file or directory it needs, is no longer there (removed, moved or replaced while the log was
   * open); `changing`: a snapshot or backup could not get a consistent copy of a log that kept
   * changing (try again); `other`: anything else, a failing disk included). `path`: the file or
   * directory the failure names, where it names one. `spaceNeeded` (with `no_space`, in bytes): the
   * size of the log's write-ahead log, which its next open writes out as a table, so about the free
   * space that open needs. Every `LOG_IO` factstate gives has details; one made by an application may not.
   */
  LOG_IO: { reason: LogIoReason; path?: string; spaceNeeded?: number } | undefined
  LOG_FORMAT_UNSUPPORTED: { format: number; supported: number }
  LOG_READ_ONLY: undefined
  /**
   * `fields`: the paths of the bad fields (empty when the input could not be read at all); `field`, from
   * `childRunFor` and `childRunOf`, the argument refused (`context`, `operationId`, `name`), and for an
   * input over the engine's `maxInputBytes` the largest part of it (`work.content`, say).
   */
  RUN_INVALID_INPUT: {
    fields: string[]
    field?: string
    /** An input over the engine's `maxInputBytes`: its size in UTF-8 bytes as counted there, and that limit. Absent for every other refusal. */
    bytes?: number
    limit?: number
    /**
     * `exists`: the ids are already in the log (the same run started twice, as a request retried
     * after its reply was lost does, or ids another run took); `existing` holds the ids the log has
     * (`turnId` when the log's invocation is known). Absent for every other refusal.
     */
    reason?: 'exists'
    existing?: { sessionId: string; runId: string; invocationId: string; turnId?: string }
  }
  RUN_BUSY: {
    sessionId: string
    /** `active`: a run of the session is running; `paused`: a turn is paused by a handoff; `source_running`: the continuation's source has not ended. */
    reason: 'active' | 'paused' | 'source_running'
    runId: string
    invocationId: string
    /** The paused turn (`paused`). */
    turnId?: string
  }
  /**
   * `unknown`: the operations whose outcome is unknown (each with the input it was dispatched with, where
   * recorded); `restored`: in a log put back from a backup, the backup's point, when the session has not
   * run since (what it did after that point is not in the log).
   */
  RUN_RECONCILIATION_REQUIRED: { unknown: UncertainOperation[]; restored?: BackupPoint }
  /**
   * The run the boundary names (`sessionId`, `runId`: for a run it continued, that run) and which of
   * the boundary's members the log does not hold (`field`): `invocation` (no run of the log has that
   * run, invocation and turn; from a direct append, also a source in another session), `highWater`
   * (not a fact of the run, or not the end of it) or `digest` (the stored facts do not reproduce it).
   * `lastSeq`: the seq of the run's last fact in the log, and `ended`: whether it has ended, where the
   * run is known (never the digest the log would accept). `eventId`: the event a direct append refused.
   * The way out: read the boundary again, `log.runSource(sessionId, runId)`.
   */
  RUN_SOURCE_MISMATCH: { sessionId: string; runId: string; field: 'invocation' | 'highWater' | 'digest'; lastSeq?: number; ended?: boolean; eventId?: string }
  /**
   * A continuation with `onlyIfLatest` whose source is not the session's last run opened:
   * `sourceRunId` the run it named, `latestRunId` and `latestInvocationId` the run to continue instead.
   */
  RUN_SOURCE_STALE: { sessionId: string; sourceRunId: string; latestRunId: string; latestInvocationId: string }
  /**
   * `field`: what differs (`pause`, `invocation`, `source`, an execution setting, `intent`,
   * `successorRunId`, `successorInvocationId`, …); `fields`: every bad field of an invalid intent
   * or invocation, or every execution setting that differs (the first is `field`); `expected`: the
   * successor's invocation; `sealed`, `given`: both values of an execution setting; `tools`: when
   * the tool catalog differs from a seal that records each tool's digest, the tools added, removed
   * and changed (description or input schema), by name (a seal made by 0.1.0 records none,
   * and the refusal has no `tools`); `eventId`: the event the log refused.
   */
  HANDOFF_MISMATCH: {
    field: string
    fields?: string[]
    expected?: Invocation
    sealed?: unknown
    given?: unknown
    tools?: { added: string[]; removed: string[]; changed: string[] }
    eventId?: string
  }
  /** `claimId`, and who used it (`claimedBy`) or sealed it (`sealedBy`); `field: 'claimId'` from `ready()`/`commit()`. */
  HANDOFF_CLAIMED: { claimId: string; claimedBy?: string; sealedBy?: string; field?: string; eventId?: string }
  HANDOFF_BUSY: undefined
  HANDOFF_NOT_HELD: undefined
  HANDOFF_CANCELLED: undefined
  HANDOFF_UNAVAILABLE: undefined
  /**
   * `state`: the machine's state (`null` for what is not a snapshot); `type`: the fact's type
   * (`null` for what is not a fact); `index`: the fact's place in what `foldFacts` was given (`null`
   * for what is not a list).
   */
  MACHINE_REJECTED: { state?: string | null; type?: string | null; index?: number | null }
  /**
   * `reason`: why `ToolContext.addSecret` refused its value: `not_a_string`, `too_short` (under 8
   * characters once trimmed), `too_long` (over 16,384 characters) or `too_many` (the run has 64 such
   * secrets already, or 65,536 characters of them with this one).
   */
  TOOL_SECRET_INVALID: { reason: 'not_a_string' | 'too_short' | 'too_long' | 'too_many' }
  /**
   * `reason`: why `ToolContext.progress` refused its value: `not_json` (JSON cannot encode it: a
   * function, a symbol, a cycle, a `toJSON` that throws), `too_large` (its JSON text is over 65,536
   * UTF-8 bytes) or `too_deep` (nested deeper than 64 levels, as no fact may be).
   */
  TOOL_PROGRESS_INVALID: { reason: 'not_json' | 'too_large' | 'too_deep' }
  /**
   * `reason`: why `ModelRequest.addSecret` refused its value, with the bounds `TOOL_SECRET_INVALID`
   * has: `not_a_string`, `too_short` (under 8 characters once trimmed), `too_long` (over 16,384
   * characters) or `too_many` (the run's model client has added 64 secrets already, or 65,536
   * characters of them with this one).
   */
  MODEL_SECRET_INVALID: { reason: 'not_a_string' | 'too_short' | 'too_long' | 'too_many' }
  /** `field`: the option. */
  ENGINE_INVALID_OPTIONS: { field: string }
  /**
   * `call`: what was refused (`start`, which `run` calls, or `check`); `invocationId`: the run's, when
   * the input names one that is an id.
   */
  ENGINE_CLOSED: { call: 'start' | 'check'; invocationId?: string }
  /** `field`: the option; `value`: the value given (for `host`, `port`, `maxEvents`, `maxBytes`, and a port in use). */
  INSPECTOR_INVALID_OPTIONS: { field: string; value?: unknown }
  /** `field`: the option. */
  TESTING_INVALID_OPTIONS: { field: string }
  /** `field`: the option of `toolsFromMcp` (`client` for a client without `listTools` and `callTool`; `rename.<MCP name>` for one rename). */
  MCP_INVALID_OPTIONS: { field: string }
  /**
   * Why the tools an MCP server lists cannot be made factstate tools as the options ask: `collision`
   * (two map to one name, `name`; or the server lists one name twice), `name` (an empty name),
   * `description` (a description a fact cannot hold: a lone surrogate), `schema` (an input schema a run would refuse), `not_listed` (`include` or `rename` names a tool
   * the server does not list) or `listing` (what `listTools` answered is not a listing). `tools`: the
   * MCP names concerned (empty when the listing names none); `name`: the factstate name they map to.
   */
  MCP_INVALID_TOOLS: { reason: 'collision' | 'name' | 'description' | 'schema' | 'not_listed' | 'listing'; tools: string[]; name?: string }
  /** `field`: the option of `anthropicClient` (`sdk` for a client without `messages.create`; `secrets.<index>` for one secret; `provider.baseUrl` for a run's that is not the SDK's `baseURL`). */
  ANTHROPIC_INVALID_OPTIONS: { field: string }
  /** `field`: the option of `telemetryFromLog` (`log` for a log that is not an `EventLog`, or is a snapshot; `tracer` when neither a tracer nor a meter is given). */
  OPENTELEMETRY_INVALID_OPTIONS: { field: string }
}

/** Whether `T` is a union of more than one type. */
type IsUnion<T, All = T> = T extends unknown ? ([All] extends [T] ? false : true) : never

/**
 * The options of a {@link FactstateError} with code `C`: `details` are required where the code
 * always has them, and must be its code's. One code at a time: with a code that could be either
 * of two, the details could be the wrong one's, so such a construction does not type-check.
 */
export type FactstateErrorOptions<C extends FactstateErrorCode> = true extends IsUnion<C>
  ? [options: { cause?: unknown; details: never }]
  : undefined extends FactstateErrorDetails[C]
  ? [options?: { cause?: unknown; details?: FactstateErrorDetails[C] }]
  : [options: { cause?: unknown; details: FactstateErrorDetails[C] }]

/**
 * A {@link FactstateError} with code `C`, its `details` typed (what {@link isFactstateError} narrows to).
 * Of a union of codes, the union of those errors, each with its own details, so that `switch
 * (error.code)` types them in each case; `FactstateErrorOf<FactstateErrorCode>` is every refusal.
 *
 * @example
 * ```ts
 * function remedy(error: FactstateErrorOf<'RUN_BUSY' | 'RUN_INVALID_INPUT'>): string {
 *   switch (error.code) {
 *     case 'RUN_BUSY': return `wait for run ${error.details.runId}`
 *     case 'RUN_INVALID_INPUT': return `fix ${error.details.fields.join(', ')}`
 *   }
 * }
 * ```
 */
export type FactstateErrorOf<C extends FactstateErrorCode> = C extends FactstateErrorCode
  ? Omit<FactstateError, 'code' | 'details'> & { readonly code: C; readonly details: Readonly<FactstateErrorDetails[C]> }
  : never

/**
 * An error with a stable {@link FactstateErrorCode}; the underlying error, if any, is `cause`.
 * `C` is its code as far as known: `new FactstateError('RUN_BUSY', …)` is a `FactstateError<'RUN_BUSY'>`,
 * one caught is a `FactstateError` (any code). `details` are a plain record until the code is
 * known: {@link isFactstateError} types them (as {@link FactstateErrorOf}).
 */
export interface FactstateError<C extends FactstateErrorCode = FactstateErrorCode> extends Error {
  readonly code: C
  /** Extra structured detail (for example the failing `seq` or the offending field paths): see {@link FactstateErrorDetails}. */
  readonly details: Readonly<Record<string, unknown>> | undefined
}

/**
 * Makes a {@link FactstateError} of code `C`; its `details` must be what {@link FactstateErrorDetails}
 * gives for that code. A subclass names its code, which its instances' `code` then is:
 * `class DiskFull extends FactstateError<'LOG_IO'> {}` makes errors whose `code` is `'LOG_IO'`.
 */
export interface FactstateErrorConstructor {
  new <C extends FactstateErrorCode>(code: C, message: string, ...options: FactstateErrorOptions<C>): FactstateError<C>
  readonly prototype: FactstateError
}

export const FactstateError: FactstateErrorConstructor = class FactstateError<C extends FactstateErrorCode> extends Error {
  readonly code: C
  readonly details: Readonly<Record<string, unknown>> | undefined

  constructor(code: C, message: string, options?: { cause?: unknown; details?: Record<string, unknown> | undefined }) {
    super(`${code}: ${message}`, options?.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'FactstateError'
    this.code = code
    this.details = options?.details
  }
}

/**
 * True when `error` is a {@link FactstateError}, narrowed to {@link FactstateErrorOf}`<FactstateErrorCode>`:
 * `switch (error.code)` then types `details` in each case.
 */
export function isFactstateError(error: unknown): error is FactstateErrorOf<FactstateErrorCode>
/** True when `error` is a {@link FactstateError} with code `code`; its `details` are then typed. */
export function isFactstateError<C extends FactstateErrorCode>(error: unknown, code: C): error is FactstateErrorOf<C>
/** True when `error` is a {@link FactstateError}, with code `code` when one is given. */
export function isFactstateError(error: unknown, code?: FactstateErrorCode): error is FactstateErrorOf<FactstateErrorCode>
export function isFactstateError(error: unknown, code?: FactstateErrorCode): boolean {
  return error instanceof FactstateError && (code === undefined || error.code === code)
}

/**
 * The message of `error` without the `CODE: ` it begins with, for a refusal that quotes another
 * inside its own message (which begins with its own code).
 */
export function messageWithoutCode(error: FactstateError): string {
  const prefix = `${error.code}: `
  return error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message
}
