import { statSync } from 'node:fs'
import { type FileHandle, lstat, mkdtemp, open as openFile, readFile, readdir, realpath, rename, rm, rmdir, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { isDeepStrictEqual } from 'node:util'
import { basename, dirname, join, resolve, sep } from 'node:path'
import { type ChainedBatch, ClassicLevel } from 'classic-level'
import { FactstateError, type FactstateErrorOf, isFactstateError, messageWithoutCode } from '../errors.js'
import { readOptions, shown } from '../options.js'
import { type SessionListing, type SessionsOptions, readSessionsOptions } from './session-listing.js'
import { id as idSchema, idMappingFor, runBoundarySchema } from '../facts/schema.js'
import type { HandoffIntent, HandoffPause, InvocationInput, InvocationOutcome, ParentCall, RunBoundary, RuntimeEvent, StoredEvent, TerminalStatus, UncertainOperation } from '../facts/types.js'
import { EMPTY_CHAIN, CHAIN_BYTES, chainStep, logDigest, runChainStart, runDigest } from './digest.js'
import { PROVIDER_STATE_FORMAT, carriesProviderState, chainedIdRecord, decodeEvent, decodeRecord, encodeRecord, encodeValidatedEvent, checkFactRules, indexRecord, isAbortSignal, messageOf, peekInvocationId, validateEvent } from './encoding.js'
import { IdFilter, parseIdFilter, serializeIdFilter } from './id-filter.js'
import { IndexAudit } from './index-audit.js'
import { keys, seqOfEventKey, seqOfRecentKey, seqPart } from './keys.js'
import {
  type InvocationProjection,
  type InvocationRecord,
  type RunRecord,
  type SessionRecord,
  type StoredInvocationRecord,
  applyToInvocation,
  applyToSession,
  emptySession,
  invocationRecordOf,
  parentOperationIdOf,
  projectInvocation,
  storedInvocationRecord,
} from './projection.js'
import { SNAPSHOT_PREFIX, changeMark, copySnapshot, forgetCopy, keepCopy, sweepSoon } from './snapshot.js'
import { logIo } from './io-reason.js'
import { type BackupPoint, damagedPoint, decodeBackupPoints, encodeBackupPoints } from './backup-point.js'
import { type SettledEffect, dispatchedInputs, dispatchedKey, settledEffects } from './dispatched-inputs.js'

export type { SettledEffect } from './dispatched-inputs.js'
import { type DirectoryClaim, busyInThisProcess, claimDirectory, whileWriterBusy } from './writer-lock.js'
import { logHeldOpen, logHolder } from './writer-presence.js'

/** How an acknowledged append is made durable: `sync` (default) fsyncs each group commit; `os` leaves it to the OS. */
export type Durability = 'sync' | 'os'

/** Options of {@link EventLog.open}. */
export interface EventLogOptions {
  /** How acknowledged appends are made durable (default `sync`: each group commit is fsynced). */
  durability?: Durability | undefined
  /**
   * Whether a log may be made where there is none (default `true`). With `false`, a location that
   * holds no log is `LOG_INVALID_ARGUMENT` and nothing is created there: a mistyped path (or a
   * tenant id turned into one) is refused instead of becoming a new, empty log.
   */
  create?: boolean | undefined
  /**
   * How long, in milliseconds, the open keeps trying while the log is `LOG_WRITER_BUSY` (default 0:
   * refused at once). A deploy that starts the new version before the old one has closed the log
   * waits for that close: tried again after pauses growing from 25 ms to 1 s (and at once when a
   * log of this process is closed); still busy after `waitMs`, the open fails `LOG_WRITER_BUSY`, its
   * details as without a wait. Any other refusal is not waited out.
   */
  waitMs?: number | undefined
  /** Ends the wait of `waitMs` early: once it aborts, the open fails with the last `LOG_WRITER_BUSY`. */
  signal?: AbortSignal | undefined
}

/** Options of {@link EventLog.openSnapshot}. */
export interface SnapshotOptions {
  /**
   * The directory the copy is made in (in a new directory of its own), default the system's
   * temporary directory. Table files are linked where the copy is on the log's file system and
   * copied elsewhere: for a large log, and a temporary directory in memory (tmpfs), pass one on the
   * log's file system.
   */
  directory?: string | undefined
}

/** Where a run stands, as {@link EventLog.runSource} reports it. */
export interface RunSource {
  /** Where the run stands: the source a continuation (or, for a sealed run, its successor) passes as `work.source`. */
  boundary: RunBoundary
  /**
   * The pause the run was sealed with, when it ended `handoff_paused`: what its successor passes as
   * `work.pause` (with `boundary` as `work.source`). Absent for a run that did not end so.
   */
  pause?: HandoffPause
}

/** One run of a session, as {@link EventLog.runs} lists it. */
export interface RunSummary {
  /** The run's id. */
  runId: string
  /** The turn it belongs to (a successor shares its sealed run's turn). */
  turnId: string
  /** The run's one invocation. */
  invocationId: string
  /** How the run began: a new message, a continuation of an ended run, a handoff's successor. */
  kind: InvocationInput['kind']
  /** The run it continues or succeeds (absent for a new message). */
  sourceRunId?: string
  /** The seq of its first fact, `invocation.opened`. */
  openedSeq: number
  /** The seq of its last fact so far. */
  lastSeq: number
  /** How it ended, or null while it is open (running, or left open by a crash until recovery). */
  terminal: TerminalStatus | null
  /** How it ended, as its `invocation.ended` records it; absent while it is open. */
  outcome?: InvocationOutcome
  /**
   * The tool call that started the run as a child run: its `invocation.opened`'s `input.parent`
   * (`{ invocation, operationId }`, the run input's `parent`, as `childRunFor` gives it). Only on a run
   * whose opened fact records one (a message or a continuation started with `parent`): a handoff
   * successor has none of its own (its turn keeps its first run's), nor has a continuation started
   * without one. Whether a session is a child's: its first run's, `(await log.runs(sessionId))[0]?.parent`.
   */
  parent?: ParentCall
}

/**
 * A run a tool call started, as {@link EventLog.childRuns} lists it: a {@link RunSummary} with its
 * session, since a child may run in any session (one of `childRunFor`'s ids, or a specialist's own
 * long-lived session continued for each task).
 */
export interface ChildRunSummary extends RunSummary {
  /** The child's session. */
  sessionId: string
}

/**
 * A session with something pending, as {@link EventLog.pendingSessions} reports it: what admission
 * knows of it (its index record, as durable now).
 */
export interface PendingSession {
  sessionId: string
  /** Runs opened and not ended: running in an engine, or left open by a crash until `recoverInvocations`. */
  active: { turnId: string; runId: string; invocationId: string }[]
  /**
   * Turns sealed by a handoff whose successor has not finished: start each successor (its pause is
   * `runSource(sessionId, runId).pause`), or give the turn up. Until then a new message is `RUN_BUSY`.
   * `sealedAt`: when the turn was sealed, the `recordedAt` of its run's `invocation.ended{handoff_paused}`
   * (milliseconds since the epoch), to expire reviews that waited too long; absent only when that fact
   * cannot be read (`verify` names it).
   */
  paused: { turnId: string; runId: string; invocationId: string; intent: HandoffIntent; sealedAt?: number }[]
  /**
   * Tool calls whose outcome is unknown and not yet acknowledged (read-only tools' are not listed),
   * each with the `input` it was dispatched with (read from its invocation's facts): check their
   * effects, then start the next message with `allowPriorUnknown: true`.
   */
  unknown: UncertainOperation[]
  /**
   * In a log that is a backup (`restoredFrom()`), for a session that has not run since the backup's
   * point: what it did after that point is not in the log. In a backup of a log itself put back from a
   * backup, the earlier backup's point when the session has not run since that one. Check its tools' effects since `takenAt`,
   * then start its next run with `allowRestored: true` (until then an `Engine` refuses it).
   */
  restored?: BackupPoint
  /**
   * With `pendingSessions({ unanswered: true })`: the session's last run, when it ended `cancelled` or
   * `failed` (a shutdown's `cancelled{shutdown}`, a crash's `host_interrupted` once recovered, a
   * provider that kept failing, `max_steps`): its turn got no answer. A continuation from its boundary
   * (`runSource(sessionId, runId).boundary`) without `content` finishes it; a cancel the user asked for
   * is listed too (tell them apart by `outcome`). Its `effects`: the turn's calls of tools with effects
   * that settled (a handoff successor's turn's before the seal too), which a resent message would make
   * again under new operation ids.
   */
  unanswered?: UnansweredRun
}

/** A session's last run that ended `cancelled` or `failed`, as `pendingSessions({ unanswered: true })` lists it. */
export interface UnansweredRun extends RunSummary {
  /**
   * The turn's calls of tools not declared `readOnly` that were dispatched and settled (`succeeded`,
   * or `failed`: a tool that threw may have done part of its effect), in dispatch order, read from
   * the facts of the run and, for a handoff successor, of the runs it succeeds in the same turn: when there are any, finish the turn with a continuation from its boundary without
   * `content` (the model gets their recorded results) rather than ask the user to send the message
   * again. Calls left uncertain are in `unknown`. Absent only when the run's facts cannot be read
   * (`verify` names it).
   */
  effects?: SettledEffect[]
}

/** Options of {@link EventLog.pendingSessions}. */
export interface PendingOptions {
  /** Also list the sessions whose last run ended `cancelled` or `failed`, with that run (`unanswered`). Default false. */
  unanswered?: boolean | undefined
  /** Only this session: what it has pending, read from its own records (the list is empty when it has nothing). */
  sessionId?: string | undefined
}

/** Every event of the log up to `highWater`, with the digest at that point. */
export interface LogPrefix {
  /** The seq of the last event (0 for an empty log). */
  highWater: number
  /** The log's rolling digest at `highWater`, as `sha256:<hex>`. */
  digest: string
  /** Every event, in seq order from 1. */
  events: StoredEvent[]
  /** An invocation as these events leave it (its terminal status, what is left uncertain or unfinished). */
  projectInvocation(invocationId: string): InvocationProjection
}

/** A read-only view of the log's state inside a group commit, for checks that must be atomic with an append. */
export interface AppendView {
  invocation(invocationId: string): Promise<InvocationRecord | undefined>
  session(sessionId: string): Promise<SessionRecord>
  run(sessionId: string, runId: string): Promise<RunRecord | undefined>
  claim(claimId: string): Promise<string | undefined>
  /** The invocation whose pending seal reserved `invocationId` for its successor, if one did. */
  successorReservation(invocationId: string): Promise<string | undefined>
  /** Why invocation `sealer` of `sessionId` could not seal for `intent`'s successor (see `Staging.successorBlocked`). */
  successorBlocked(intent: HandoffIntent, sealer: string, sessionId: string): Promise<SuccessorBlocked | undefined>
  /**
   * The last run opened in `sessionId` as the log stands in this group commit (staged opens
   * included, durable or not), or `undefined` for a session without runs: the last of
   * `log.runs(sessionId)` once everything staged is durable. See `LatestRun`.
   */
  latestRun(sessionId: string): Promise<LatestRun | undefined>
}

/**
 * The last run opened in a session (its run and invocation), for `onlyIfLatest` continuations.
 *
 * Not an index record (the index format and `verify()` know nothing of it): the log keeps it in
 * memory. Each staging records the sessions whose runs it opens (set only once the opening fact is
 * accepted: a refused one leaves it untouched), and the committed state takes them over when the
 * group is durable, in a map bounded by `CACHE_LIMIT` whose trims count `latestEvictions`. A lookup
 * goes staging by staging down to the committed map, so opens staged in the same or the in-flight
 * group are seen; a session the map does not know (a log just opened, an entry trimmed) is read from
 * the run index, as `log.runs` reads it. Such a read is exact inside a precondition: preconditions
 * run one at a time, nothing else is staged meanwhile, and every staged open of the session would
 * have been found above it, so the durable runs it reads cannot change under it. A read made outside
 * a group commit (`LogInternals.latestRun`, to spare the commit that read) is kept only if no open
 * of the session was absorbed and no trim happened while it read: an open absorbed meanwhile sets
 * the entry itself, and a later one overwrites it.
 */
export interface LatestRun {
  runId: string
  invocationId: string
}

/** A successor that could never be admitted: the code to refuse its seal with, why, and the intent's field at fault. */
export type SuccessorBlocked =
  | { code: 'HANDOFF_CLAIMED'; message: string; details: { field: 'claimId'; claimId: string; claimedBy?: string; sealedBy?: string } }
  | { code: 'HANDOFF_MISMATCH'; message: string; details: { field: 'successorRunId' | 'successorInvocationId' } }

/** The refusal of a seal (or a hold) whose successor could never be admitted; `eventId` when the log refuses an append. */
export function successorBlockedError(blocked: SuccessorBlocked, eventId?: string): FactstateError {
  const event = eventId === undefined ? {} : { eventId }
  // One construction per code: each is checked against its own code's details.
  return blocked.code === 'HANDOFF_CLAIMED'
    ? new FactstateError(blocked.code, blocked.message, { details: { ...blocked.details, ...event } })
    : new FactstateError(blocked.code, blocked.message, { details: { ...blocked.details, ...event } })
}

/** A check run inside the group commit, before its events are staged (it sees the log as it stands); throwing refuses them. */
export type Precondition = (view: AppendView) => Promise<void> | void

/** The engine-facing surface of a log: not part of the public API. */
export interface LogInternals {
  /** On a snapshot of a damaged log (marked so, or its copy's write-ahead log lost facts), the `LOG_CORRUPT` its `verify()` refuses with. */
  damage(): FactstateError | undefined
  appendAll(events: RuntimeEvent[], precondition?: Precondition): Promise<number[]>
  /**
   * `appendAll` without the write: the events are validated, their sources verified, `precondition`
   * run and the events staged (every integrity rule applied) in the next group commit, as the log
   * stands there, then dropped. Resolves with the seqs they would have got, or rejects exactly as
   * `appendAll` would have; nothing is written and the log's state is left as it was.
   */
  checkAppend(events: RuntimeEvent[], precondition?: Precondition): Promise<number[]>
  invocationRecord(invocationId: string): Promise<InvocationRecord | undefined>
  sessionRecord(sessionId: string): Promise<SessionRecord>
  invocationEvents(invocationId: string, upTo?: number): Promise<StoredEvent[]>
  /**
   * Every event from seq 1 up to `upTo` (at most the high-water), in order, `chunk` events at a time
   * with their stored bytes counted: a reader that keeps only what it derives needs memory for one
   * chunk, not the log. A missing or misplaced event is `LOG_CORRUPT` naming its seq.
   */
  scanEvents(upTo: number, chunk: number): AsyncIterable<{ events: StoredEvent[]; bytes: number }>
  lineage(boundary: RunBoundary): Promise<StoredEvent[]>
  /**
   * In a log that is a backup (see `EventLog.restoredFrom`): the backup's point, when the session
   * has runs and none opened after that point, so what it did after the backup is not in the log.
   */
  restoredSince(sessionId: string): Promise<BackupPoint | undefined>
  /**
   * The last run opened in `sessionId` as far as it is durable, read from the run index when the
   * log does not hold it in memory (and then remembered): see `LatestRun`. The admission reads it
   * before its group commit so that the check there (`AppendView.latestRun`) need not.
   */
  latestRun(sessionId: string): Promise<LatestRun | undefined>
  /** How many sessions' latest runs the log holds in memory, and how many times that map was trimmed. */
  latestRunCache(): { sessions: number; evictions: number }
  /** Trims the latest-run map at `limit` entries instead of `CACHE_LIMIT`: lets tests evict. */
  setLatestRunLimit(limit: number): void
  openInvocations(): InvocationRecord[]
  /**
   * How many sessions' last run ended `cancelled` or `failed` (what `pendingSessions({ unanswered: true })`
   * adds) but for child runs whose supervisor has run since the run that started them (the call the
   * run records, else the latest its session records, as `factstate pending` names it), from one pass
   * over the run index and the opened facts of those runs and of the runs back to that call; `undefined` when
   * the index holds more than `limit` runs (the pass is then not made to the end).
   */
  unansweredCount(limit: number): Promise<number | undefined>
  /** The sweep of abandoned snapshot copies the writer's open started in the background: what it removed. */
  swept(): Promise<string[]>
  /** Invocations driven by a live actor of this process; recovery leaves them alone. */
  live: Set<string>
  /**
   * Called with `LOG_CLOSED` as the log starts to close (after it refuses new appends): live actors
   * register here to stop waiting (on a hold, a model request, a back-off) for what can no longer be recorded.
   */
  onClose: Set<{ stop(error: FactstateError): void }>
  subscribe(listener: (events: StoredEvent[]) => void): () => void
  /**
   * Taken by the engine for each tool call it starts, and released (the function it returns) once
   * the tool's own promise settles, not when the engine stops waiting for it: while any is held,
   * a `close()` leaves LevelDB open and the directory claimed (see `close`).
   */
  lease(): () => void
  /** Waits for the id filter's current build; true when appends now consult it. */
  idFilterReady(): Promise<boolean>
  /** How many records each of the index caches holds (each is trimmed past `CACHE_LIMIT`). */
  cacheSizes(): { invocations: number; sessions: number; runs: number; claims: number; reserved: number }
  /** The lineages remembered for continuations: how many, their events and their stored bytes together. */
  lineageCache(): { lineages: number; events: number; bytes: number }
  /** How many times the id filter was built (it is built again, bigger, when it fills up). */
  idFilterBuilds(): number
  /** How many followers (`events({ follow: true })`) the log is handing new events to. */
  followerCount(): number
  /** Sizes later id filters for at least `ids` ids instead of ~1M: lets tests fill one up. */
  setIdFilterMinimum(ids: number): void
  /** Stores the id filter on close from a log of `events` events instead of 65,536: lets tests store one. */
  setIdFilterStoredFrom(events: number): void
  /** Builds the id filter now unless one is built or in use (it is otherwise built after 1,024 appends); true once it is in use. */
  buildIdFilter(): Promise<boolean>
  location: string
  /** Throws `LOG_CLOSED` once the log is closing or closed, or the error that failed it. */
  assertOpen(): void
  /** `digestAt(seq)` for a fact already read (`eventId` is its id): one synchronous read of its id record. */
  digestOf(seq: number, eventId: string): string
}

const internalsOf = new WeakMap<EventLog, LogInternals>()

/**
 * How long `close()` waits for the tool calls its engines started to settle (their signals aborted
 * as it began) before it resolves with the directory still locked for those that have not: the
 * engine's own grace after a tool's signal aborts.
 */
const CLOSE_TOOL_GRACE_MS = 1_000

/** What a reader of `events()` holds open: its LevelDB iterator, once it has started, and a follower's place among the log's. */
interface ReaderResources {
  iterator?: { close(): Promise<void> }
  unfollow?: () => void
}

/**
 * Readers of `events()` let go part-way without `return()` (`await reader.next()`, then dropped):
 * LevelDB keeps their iterators (and each its read-ahead, up to `EVENTS_CHUNK` KiB) until the log
 * closes, and the log keeps handing a follower new events. Once such a reader is collected, its
 * iterator is closed and it follows no more.
 */
const droppedReaders = new FinalizationRegistry<ReaderResources>((reader) => {
  reader.iterator?.close().catch(() => undefined)
  reader.unfollow?.()
})

// The registry holds each reader's resources strongly until its generator is collected, so nothing
// in them may lead back to the generator: a closure made in `events()` beside one that names the
// generator would share its scope, and every follower ever made would be kept (1–2 KiB each, found
// by a trial whose chat server opened one per connection). These are made out here for that.

/** Removes `follower` from the log's followers. */
function unfollowing(followers: Set<Follower>, follower: Follower): () => void {
  return () => void followers.delete(follower)
}

/**
 * Makes `return()` and `throw()` of a follower's generator tell the follower first: an async generator
 * queues them behind a `next()` it has not settled, and one waiting for the next event would keep
 * the reader (and a consumer that left, say an SSE client gone) until an event came.
 */
function stoppingFirst(generator: AsyncGenerator<StoredEvent, void, undefined>, follower: Follower, unfollow: () => void): void {
  const { return: finish, throw: raise } = generator
  generator.return = (value) => {
    follower.stop()
    unfollow()
    return finish.call(generator, value)
  }
  generator.throw = (error) => {
    follower.stop()
    unfollow()
    return raise.call(generator, error)
  }
}

/**
 * Events a follower (`events({ follow: true })`) keeps in memory for its consumer, and their stored
 * bytes together: past either, it lets them go and reads them back from the log when the consumer
 * gets to them (a few large tool outputs weigh more than thousands of small facts).
 */
const FOLLOW_BUFFER = 16_384
const FOLLOW_BUFFER_BYTES = 16 * 1024 * 1024

/** `LOG_CLOSED` for a follower the close stopped before it caught up: `details.seq` is the last seq it read. */
const caughtUpTo = (seq: number, cause?: unknown) =>
  new FactstateError('LOG_CLOSED', `the log was closed before this reader caught up (it had read up to seq ${seq})`, { cause, details: { seq } })

/**
 * What a follower keeps of a durable event: its seq and stored bytes (it decodes them afresh), not
 * the log's copy; for an event of another session than the one it follows, only its seq (`wanted`
 * false): it is counted, never decoded.
 */
class FollowedEvent {
  constructor(
    readonly seq: number,
    readonly bytes: Uint8Array,
    readonly wanted: boolean,
  ) {}
}

/** What the log hands one follower: the events of each group commit, as stored, and a wake-up. */
class Follower {
  /** Durable events not yet read by the consumer, in seq order, from `buffer[start]` on. */
  #buffer: FollowedEvent[] = []
  #start = 0
  /** The stored bytes of the events not yet read. */
  #bytes = 0
  /** Events were let go (or never taken): the next ones are read from the log. */
  lagging = true
  /** The log closed: nothing more will come. */
  closed = false
  /** The consumer left (`return()`, `throw()`, `break`): the reader ends at once, also while it waits. */
  stopped = false
  #wake: (() => void) | undefined

  /** `sessionId`: the one session whose events it yields (`events({ sessionId })`), else every event. */
  constructor(readonly sessionId?: string) {}

  take(events: readonly StagedEvent[]): void {
    if (!this.lagging) {
      const { sessionId } = this
      let bytes = this.#bytes
      for (const event of events) if (sessionId === undefined || event.event.invocation.sessionId === sessionId) bytes += event.bytes.length
      const held = this.#buffer.length - this.#start
      // One group however big is taken by a reader that has read everything: it is at most one group
      // past the bound, and a reader that keeps up must not be sent back to the log (after a close
      // it could no longer read what was written before it).
      if (held > 0 && (held + events.length > FOLLOW_BUFFER || bytes > FOLLOW_BUFFER_BYTES)) this.letGo()
      else {
        for (const event of events) {
          const wanted = sessionId === undefined || event.event.invocation.sessionId === sessionId
          this.#buffer.push(new FollowedEvent(event.seq, wanted ? event.bytes : EMPTY, wanted))
        }
        this.#bytes = bytes
      }
    }
    this.wake()
  }
  /**
   * The next buffered event, if any. What was read goes: a reader that keeps up with one event
   * always unread holds no more than it may keep.
   */
  shift(): FollowedEvent | undefined {
    const followed = this.#buffer[this.#start]
    if (followed === undefined) return undefined
    this.#start += 1
    this.#bytes -= followed.bytes.length
    if (this.#start === this.#buffer.length) this.#empty()
    else if (this.#start >= 1024 && this.#start * 2 >= this.#buffer.length) {
      this.#buffer = this.#buffer.slice(this.#start)
      this.#start = 0
    }
    return followed
  }
  letGo(): void {
    this.#empty()
    this.lagging = true
  }
  #empty(): void {
    this.#buffer = []
    this.#start = 0
    this.#bytes = 0
  }
  close(): void {
    this.closed = true
    this.wake()
  }
  stop(): void {
    this.stopped = true
    this.wake()
  }
  wake(): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }
  /** Resolves at the next group commit or at the close. */
  next(): Promise<void> {
    return new Promise((resolve) => (this.#wake = resolve))
  }
}

/** Runs of a lineage whose facts are read at once (each read is a trip to LevelDB's thread pool). */
const LINEAGE_READS = 8
/**
 * Lineages remembered for the next continuation of their boundary, their events together, and
 * those events' stored bytes together (see `#rememberLineage`): about 0.8 KiB of heap an event of a
 * short turn (~27 MiB at most), and about the stored size for events of long text (a tool's output of
 * a web page), whose bytes bound them first; more for results of many small JSON values.
 */
const LINEAGES_KEPT = 1_024
const LINEAGE_EVENTS_KEPT = 32_768
const LINEAGE_BYTES_KEPT = 32 * 1024 * 1024
/** How many verified source boundaries a log remembers (a few hundred KiB at most). */
const VERIFIED_SOURCES_KEPT = 4096
const boundaryKey = ({ invocation, highWater, digest }: RunBoundary): string =>
  `${invocation.sessionId}\u0000${invocation.turnId}\u0000${invocation.runId}\u0000${invocation.invocationId}\u0000${highWater}\u0000${digest}`

/**
 * The integrity rules of a run opened from a source (a continuation or a handoff successor), as the
 * engine's admission checks them, so that a direct append cannot open one the engine would refuse:
 * the source is an ended run of the same session, named whole (turn and invocation), at its end; a
 * successor's source is sealed with this very pause and claim, and the successor is the one the seal
 * names (`successorOf`). The boundary's digest is checked before staging (in `#enqueue`).
 */
function checkSource(local: Staging, event: RuntimeEvent, input: Extract<InvocationInput, { kind: 'continuation' | 'handoff' }>): void {
  const handoff = input.kind === 'handoff'
  const { invocation } = event
  const source = input.source.invocation
  // A continuation's refusal names the boundary's member at fault (`invocation` or `highWater`) and the way out.
  // `remedyIn`: the session whose runs the way out lists (a source of another session: the continuation's own).
  const refuse = (message: string, field: string, mismatch: { field: 'invocation' | 'highWater'; lastSeq?: number; ended?: boolean } = { field: 'invocation' }, remedyIn = source.sessionId) =>
    handoff
      ? new FactstateError('HANDOFF_MISMATCH', message, { details: { eventId: event.id, field } })
      : new FactstateError('RUN_SOURCE_MISMATCH', `${message}; ${sourceRemedy(remedyIn, source.runId, mismatch.field)}`, {
          details: { sessionId: source.sessionId, runId: source.runId, ...mismatch, eventId: event.id },
        })
  if (source.sessionId !== invocation.sessionId) {
    throw refuse(`the source run ${source.runId} belongs to session ${source.sessionId}, not ${invocation.sessionId}`, 'source', { field: 'invocation' }, invocation.sessionId)
  }
  const run = local.runNow(source.sessionId, source.runId)
  const record = run === undefined ? undefined : local.invocationNow(run.invocationId)
  if (run === undefined || record === undefined || run.invocationId !== source.invocationId || record.invocation.turnId !== source.turnId) {
    throw refuse(`run ${source.sessionId}/${source.runId} with invocation ${source.invocationId} in turn ${source.turnId} is not in the log`, 'source')
  }
  if (record.terminal === null || record.lastSeq !== input.source.highWater) {
    throw refuse(`the boundary at ${input.source.highWater} is not the end of run ${source.runId}${record.terminal === null ? ', which has not ended' : `, which ended at ${record.lastSeq}`}`, 'source', {
      field: 'highWater',
      lastSeq: record.lastSeq,
      ended: record.terminal !== null,
    })
  }
  if (!handoff) return
  if (record.outcome?.status !== 'handoff_paused') throw refuse(`invocation ${source.invocationId} was not sealed by a handoff`, 'source')
  if (!isDeepStrictEqual(record.outcome.pause, input.pause)) throw refuse('the pause differs from the one sealed in the log', 'pause')
  const { intent } = input.pause
  if (invocation.turnId !== source.turnId || invocation.runId !== intent.successorRunId || invocation.invocationId !== intent.successorInvocationId) {
    throw refuse(`the successor must be run ${intent.successorRunId}, invocation ${intent.successorInvocationId}, in turn ${source.turnId}: the seal names it`, 'invocation')
  }
}

/**
 * What to do about a continuation's source that does not match the log (`RUN_SOURCE_MISMATCH`): read
 * the run's boundary again, or, for a boundary that names no run of the log, the session's runs.
 */
export function sourceRemedy(sessionId: string, runId: string, field: 'invocation' | 'highWater' | 'digest'): string {
  return field === 'invocation'
    ? `list the session's runs with log.runs(${JSON.stringify(sessionId)}) and take the boundary of one from log.runSource`
    : `read the run's boundary again with log.runSource(${JSON.stringify(sessionId)}, ${JSON.stringify(runId)}) (once the run has ended)`
}

/** The engine-facing surface of `log`. */
export function logInternals(log: EventLog): LogInternals {
  const found = internalsOf.get(log)
  if (!found) throw new TypeError('not an EventLog')
  return found
}

interface Head {
  highWater: number
  chain: Uint8Array
}

const noop = (): void => undefined

/*
 * The objects made for every append (its pending entry, its staged event) are class instances, not
 * object literals: V8 decides per literal site whether to allocate straight in the old generation
 * ("allocation-site pretenuring"), and a burst of appends can tip a site that way. A staged event
 * born old keeps its young copy, bytes and id record alive through every scavenge (~2.5 MB promoted
 * per scavenge in `bench/profile.ts append 256 102400 sync warm`, up to a third of the throughput).
 * Instances of a class have no such site. (Invocation records and the validated copies can still
 * be tipped: see docs/performance.md.)
 */
class PendingEntry {
  resolve: (result: number & number[]) => void = noop
  reject: (error: unknown) => void = noop
  /** The seqs once staged. */
  result: number | number[] = 0
  constructor(
    readonly events: RuntimeEvent[],
    readonly precondition: Precondition | undefined,
    /** `append` resolves with one seq, `appendAll` with all of them. */
    readonly single: boolean,
    /** Its place among the log's appends (1, 2, …): see `EventLog#settled`. */
    readonly ordinal: number,
    /** Checked only (`checkAppend`): staged on a scratch staging, then dropped; resolved once staged. */
    readonly dryRun = false,
  ) {}
}

/** The value of the index entries whose key says it all. */
const EMPTY = new Uint8Array(0)

/** A group being staged, then written as one batch. */
interface Batch {
  staging: Staging
  accepted: PendingEntry[]
  events: number
  /**
   * The LevelDB batch, filled with each accepted entry's event records as it is staged (while the
   * previous group syncs), so that only the index records are left to add once the disk is free.
   */
  writes: ChainedBatch<Db, string, Uint8Array> | undefined
  /** The staged events already in `writes`. */
  put: number
  /** The ordinal of the last entry staged into it or refused while it was staged. */
  last: number
}

/** Facts newer than this many seqs are checked for continuity on every open. */
const TAIL_KEYS_CHECKED = 65_536
/** The last facts whose chain is recomputed on every open. */
const TAIL_CHAIN_CHECKED = 1_024
const MAX_GROUP = 2_048
/** The largest seq a key holds in order (`seqPart`'s 13 hex digits). */
const MAX_KEYED_SEQ = 2 ** 52 - 1
/** Sessions a batch of the recency index's build on open holds (see `#indexRecency`). */
const RECENCY_BUILD_CHUNK = 10_000
/** Events `events()` reads from the store per trip to the thread pool. */
const EVENTS_CHUNK = 256
/** The same for `prefix`, which checks its byte budget once per chunk. */
const PREFIX_CHUNK = 1_024
/**
 * With more events than this waiting for an idle disk, it is given half of them as soon as they
 * are staged and the other half is staged while that half syncs. Two groups then alternate, one
 * syncing while the other is staged; with fewer, one sync for all of them costs less (measured
 * here: 64 appenders ~30k facts/s in one group vs ~20k split; 128 about even; 256 ~55k split vs ~43k).
 */
const SPLIT_ABOVE = 128
/** Open invocations brought up to date side by side on open, through their own index. */
const LOAD_CONCURRENCY = 16
/** Open invocations are brought up to date by reading at most this much of the tail (whose continuity open has just checked). */
const CATCH_UP_SCANNED = TAIL_KEYS_CHECKED
/**
 * The head as the last clean close left it, beside LevelDB's files. LevelDB drops a damaged or
 * cut tail of its write-ahead log on open without an error; an open that finds fewer events than
 * a clean close recorded knows acknowledged facts were lost.
 */
const ANCHOR_FILE = 'FACTSTATE-HEAD'
/** The first key of a database that is factstate's: one of its key spaces (store/keys.ts). */
const FACTSTATE_KEY = /^[hseivnrcpqoa]!/
/**
 * Under `sync` durability the anchor is also refreshed while the log is written, at most this long
 * after a group commit: after a crash (no clean close) an open then still knows a recent head, and
 * a write-ahead log that lost synced facts (LevelDB drops a damaged block and the rest of the file
 * without an error) is refused instead of opening short.
 */
const ANCHOR_REFRESH_MS = 1_000
const ANCHOR_PATTERN = /^factstate-head v1 (\d+) ([0-9a-f]{64})\n$/
/**
 * What LevelDB writes to its info log (`LOG`, begun anew by each open) for a write-ahead log record it
 * skipped on recovery, and for a write-ahead log it could not read at all (then deleted): a line of
 * its own each, after the time and the thread (`2026/12/06-11:45:41.912589 7f01b0a8a6c0 …`).
 */
const WAL_DROPPED = /^\S+ [0-9a-f]+ (?:\(ignoring error\) )?.*\/(\d+)\.log: dropping (\d+) bytes; (.*)$/m
const WAL_IGNORED = /^\S+ [0-9a-f]+ Ignoring error (.*)$/m

/**
 * Why the open that just ran LevelDB's recovery lost part of the write-ahead log, from what LevelDB's
 * info log says of it, or `undefined`. LevelDB skips a record whose checksum does not match, and the
 * rest of its 32 KiB block, without an error, and a write-ahead log it cannot read (a permission) it
 * skips and deletes (a record cut short at the very end, by a crash during its write, it ignores without
 * a word: that one was never acknowledged). The facts it skipped were synced and may have been
 * acknowledged, a tool's dispatch among them; the head anchor covers only what was committed a second
 * before a crash, so without this the log would open short and whole-looking, and a session would go
 * on as if a dispatched tool had never been called. An info log that cannot be read is a loss too:
 * nothing then says the open lost nothing.
 */
async function walLoss(location: string): Promise<{ why: string; file: string } | undefined> {
  let info: string
  try {
    info = await readFile(join(location, 'LOG'), 'utf8')
  } catch (error) {
    return { why: `LevelDB's info log of the open cannot be read (${(error as Error).message}), so nothing says its recovery kept every fact of the write-ahead log`, file: 'LOG' }
  }
  const dropped = WAL_DROPPED.exec(info)
  if (dropped !== null) {
    const file = `${(dropped[1] as string).padStart(6, '0')}.log`
    return { why: `LevelDB dropped ${dropped[2]} bytes of the write-ahead log ${file} as it opened the log (${(dropped[3] as string).trim()}): facts synced there, acknowledged ones among them, are lost`, file }
  }
  const ignored = WAL_IGNORED.exec(info)
  if (ignored !== null) {
    return { why: `LevelDB skipped a write-ahead log it could not read as it opened the log (${(ignored[1] as string).trim()}), and deleted it: facts synced there, acknowledged ones among them, are lost`, file: /(\d+\.log)/.exec(ignored[1] as string)?.[1] ?? 'LOG' }
  }
  return undefined
}

/**
 * Beside a log whose open found its write-ahead log damaged (see `walLoss`): what was lost. LevelDB has
 * by then written what it kept to a table and deleted that write-ahead log, so the next open would find
 * nothing amiss: every later open of the log in place is refused while this file is there; a snapshot
 * still reads the log.
 */
const DAMAGED_FILE = 'FACTSTATE-DAMAGED'

/** Writes the marker (synced, and the directory too) right after the open that found the loss. */
async function markDamaged(location: string, why: string): Promise<void> {
  const marker = await openFile(join(location, DAMAGED_FILE), 'w')
  try {
    await marker.writeFile(`${why}\n`)
    await marker.sync()
  } finally {
    await marker.close()
  }
  await syncDirectory(location, false)
}

const damagedLog = (why: string, file: string) =>
  new FactstateError('LOG_CORRUPT', `${why}; restore the directory from a backup (keep the damaged one as evidence), or delete ${DAMAGED_FILE} to go on without them (and ${ANCHOR_FILE} too if the next open says the log held more events when its head was last recorded)`, {
    details: { file },
  })

/** Refuses a log marked damaged by an earlier open (`DAMAGED_FILE`); a marker that cannot be read refuses it too. */
async function refuseMarkedDamaged(location: string): Promise<void> {
  let why: string
  try {
    why = (await readFile(join(location, DAMAGED_FILE), 'utf8')).trim()
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') return
    // No file descriptor left: whether there is a marker at all is not known, let alone damage.
    if (code === 'EMFILE' || code === 'ENFILE') throw logIo(`the log at ${location} cannot be opened: ${(error as Error).message}`, error, { path: location })
    throw damagedLog(`${DAMAGED_FILE}, left by an open that found the write-ahead log damaged, cannot be read (${(error as Error).message})`, DAMAGED_FILE)
  }
  // Empty: the open that found the damage died while writing what it was.
  if (why === '') why = 'an earlier open found the write-ahead log damaged (what it lost was not written down: that open was cut short)'
  throw damagedLog(why, /write-ahead log (\S+\.log)/.exec(why)?.[1] ?? DAMAGED_FILE)
}
/** How many records each index cache holds before it is trimmed to half (open invocations and busy sessions stay). */
export const CACHE_LIMIT = 50_000
/** Items read at once by a pass over a key space (`verify`). */
const SCAN_BATCH = 1_000
/**
 * The shape of the index records, stored with the first batch a version writes: 2 since run
 * records are written once (without `lastSeq` and `chain`); 3 since the facts a version writes may
 * carry members the releases before it cannot read (every run's `execution.tools.digests`, the
 * provider's request id, a successor's content): a release that reads up to 2 then refuses the log
 * as newer (`LOG_FORMAT_UNSUPPORTED`) instead of taking its first such fact for damage; 4 for the
 * same reason, since a child run's `invocation.opened` may carry its `parent` (0.3.0); 5 since the
 * sessions are indexed by their latest run (`keys.recent`, and a session record's `latestOpenedSeq`,
 * 0.9.0), which the releases before it would not keep up to date: a log this version opened is marked
 * 5 at once (see `#indexRecency`), so that they refuse it; 6 since a `model.completed` may carry the
 * provider's opaque state (`output.reasoningDetails`, a call's `extraContent`, 0.10.0), which the
 * releases before it refuse as damage: a log is marked 6 only by the batch that writes the first such
 * fact (see `carriesFormat6`), so a log that never holds one stays 5 and readable by 0.9.x (`verify()` finds one
 * that holds one and is marked lower damaged: 0.9.x would open it). The other
 * index records are those of 2. A log marked with a higher number was written by a newer factstate and
 * is refused rather than misread; an unmarked or lower-marked one is older, and is marked by its next
 * write (by its open, when it lacks the recency index).
 */
const INDEX_FORMAT = 6
/** The format every batch marks a log with at least (see `INDEX_FORMAT`): what 0.9.x reads. */
const BASE_FORMAT = 5

/**
 * Whether one of `events` is a `model.completed` carrying a member of format 6 (`reasoningDetails`,
 * a call's `extraContent`): one comparison for every other fact.
 */
function carriesFormat6(events: readonly StagedEvent[]): boolean {
  for (const { event } of events) if (carriesProviderState(event.fact)) return true
  return false
}
/** The id filter is sized for twice the log's events, at least this many (2 MiB)… */
const ID_FILTER_MIN = 1 << 20
/** …and at most this many (32 MiB); a log with more events reads the id index for every append. */
const ID_FILTER_MAX = 1 << 24
/**
 * The id filter is built once this many events were appended since open: reading the index into
 * it pays off for a busy writer, not for a few appends (a recovery, a handoff), which it would slow.
 */
const ID_FILTER_AFTER = 1_024
/**
 * The id filter as the last clean close left it, beside LevelDB's files. An open whose log still
 * holds, byte for byte, the events it covers (checked by the digest chain at its high-water) takes
 * it up at once, adding the ids of at most `ID_FILTER_CAUGHT_UP` events written since (a writer that
 * crashed after its last clean close), instead of reading the whole id index again (about 2 s for a
 * million events) once `ID_FILTER_AFTER` events are appended. Anything else about it (damaged,
 * another log's, further behind) and it is ignored: the filter is then built as if it were absent.
 */
const ID_FILTER_FILE = 'FACTSTATE-IDS'
const ID_FILTER_CAUGHT_UP = 16_384
/** A log of fewer events builds its filter in a moment (~0.1 s): a stored one (2 MiB at least) would cost more than it saves. */
const ID_FILTER_STORED_FROM = 65_536

type Db = ClassicLevel<string, Uint8Array>

/** Changes made by one group commit (or one entry of it), not yet durable. */
/** One staged event: its stored bytes and its id index record (which ends with its chain). A class: see `PendingEntry`. */
class StagedEvent {
  constructor(
    readonly seq: number,
    readonly bytes: Uint8Array,
    readonly event: RuntimeEvent,
    readonly idRecord: Uint8Array,
  ) {}
}

class Staging {
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  readonly claims = new Map<string, string>()
  /** What pending seals reserve, by index key (`keys.sealedClaim`, `keys.sealedSuccessor`): the paused invocation. */
  readonly reserved = new Map<string, string>()
  /** The events staged here by id: the same objects as `events`. */
  readonly ids = new Map<string, StagedEvent>()
  readonly events: StagedEvent[] = []
  /** Invocations opened or ended here: only their index records are written (see `#catchUp`). */
  readonly persisted = new Set<string>()
  /** The last run opened here in each session (see `LatestRun`): never written to the index. */
  readonly latestRuns = new Map<string, LatestRun>()
  /** The recency index's changes (`keys.recent`): the session id of an entry put, null for one deleted. */
  readonly recent = new Map<string, string | null>()
  /** The format this staging's batch needs the log marked with (set as the batch is written, see `#write`). */
  format = BASE_FORMAT
  head: Head

  constructor(
    /** What this builds on, not yet durable itself; cleared once it is. */
    public parent: Staging | undefined,
    readonly base: CommittedState,
    /** A scratch staging of one multi-event entry: its own ids are that one call's. */
    readonly scratch = false,
  ) {
    this.head = parent ? { ...parent.head } : { ...base.head }
  }

  invocationNow(id: string): InvocationRecord | undefined {
    return this.invocations.get(id) ?? (this.parent ? this.parent.invocationNow(id) : this.base.invocationNow(id))
  }
  sessionNow(id: string): SessionRecord {
    return this.sessions.get(id) ?? (this.parent ? this.parent.sessionNow(id) : this.base.sessionNow(id))
  }
  runNow(sessionId: string, runId: string): RunRecord | undefined {
    const key = keys.run(sessionId, runId)
    return this.runs.get(key) ?? (this.parent ? this.parent.runNow(sessionId, runId) : this.base.runNow(sessionId, runId))
  }
  claimNow(id: string): string | undefined {
    return this.claims.get(id) ?? (this.parent ? this.parent.claimNow(id) : this.base.claimNow(id))
  }
  reservedNow(key: string): string | undefined {
    return this.reserved.get(key) ?? (this.parent ? this.parent.reservedNow(key) : this.base.reservedNow(key))
  }
  /** The last run opened in `sessionId` as staged here or below, `null` for none, `undefined` where the committed map does not know. */
  latestRunNow(sessionId: string): LatestRun | null | undefined {
    return this.latestRuns.get(sessionId) ?? (this.parent ? this.parent.latestRunNow(sessionId) : this.base.latestRuns.get(sessionId))
  }
  async latestRun(sessionId: string): Promise<LatestRun | undefined> {
    const known = this.latestRunNow(sessionId)
    if (known !== undefined) return known ?? undefined
    // Exact here (see `LatestRun`): no open of the session is staged, and none can be while this reads.
    return this.base.latestRun(sessionId)
  }
  async invocation(id: string): Promise<InvocationRecord | undefined> {
    return this.invocationNow(id)
  }
  async session(id: string): Promise<SessionRecord> {
    return this.sessionNow(id)
  }
  async run(sessionId: string, runId: string): Promise<RunRecord | undefined> {
    return this.runNow(sessionId, runId)
  }
  async claim(id: string): Promise<string | undefined> {
    return this.claimNow(id)
  }
  async successorReservation(invocationId: string): Promise<string | undefined> {
    return this.reservedNow(keys.sealedSuccessor(invocationId))
  }
  async successorBlocked(intent: HandoffIntent, sealer: string, sessionId: string): Promise<SuccessorBlocked | undefined> {
    return this.successorBlockedNow(intent, sealer, sessionId)
  }
  /**
   * Why a seal of `intent` by invocation `sealer` of `sessionId` could never admit its successor: the
   * claim already used or named by another seal, the successor's run taken, or its invocation id
   * taken or named by another seal. Such a seal would leave the session waiting forever.
   */
  successorBlockedNow(intent: HandoffIntent, sealer: string, sessionId: string): SuccessorBlocked | undefined {
    const { claimId, successorRunId, successorInvocationId } = intent
    const user = this.claimNow(claimId)
    if (user !== undefined) return { code: 'HANDOFF_CLAIMED', message: `claim ${claimId} was already used by ${user}`, details: { field: 'claimId', claimId, claimedBy: user } }
    const claimedBy = this.reservedNow(keys.sealedClaim(claimId))
    if (claimedBy !== undefined && claimedBy !== sealer) {
      return {
        code: 'HANDOFF_CLAIMED',
        message: `claim ${claimId} is named by the seal of ${claimedBy}, whose successor is still to come`,
        details: { field: 'claimId', claimId, sealedBy: claimedBy },
      }
    }
    if (this.runNow(sessionId, successorRunId) !== undefined) {
      return { code: 'HANDOFF_MISMATCH', message: `run ${successorRunId} already exists: it cannot be the successor`, details: { field: 'successorRunId' } }
    }
    const namedBy = this.reservedNow(keys.sealedSuccessor(successorInvocationId))
    if (namedBy !== undefined && namedBy !== sealer) {
      return {
        code: 'HANDOFF_MISMATCH',
        message: `invocation ${successorInvocationId} is the successor named by the seal of ${namedBy}`,
        details: { field: 'successorInvocationId' },
      }
    }
    if (this.invocationNow(successorInvocationId) !== undefined) {
      return { code: 'HANDOFF_MISMATCH', message: `invocation ${successorInvocationId} already exists: it cannot be the successor`, details: { field: 'successorInvocationId' } }
    }
    return undefined
  }
  stagedId(id: string): StagedEvent | undefined {
    return this.ids.get(id) ?? this.parent?.stagedId(id)
  }

  mergeInto(target: Staging): void {
    for (const [k, v] of this.invocations) target.invocations.set(k, v)
    for (const [k, v] of this.sessions) target.sessions.set(k, v)
    for (const [k, v] of this.runs) target.runs.set(k, v)
    for (const [k, v] of this.claims) target.claims.set(k, v)
    for (const [k, v] of this.reserved) target.reserved.set(k, v)
    for (const [k, v] of this.ids) target.ids.set(k, v)
    for (const id of this.persisted) target.persisted.add(id)
    for (const [k, v] of this.latestRuns) target.latestRuns.set(k, v)
    for (const [k, v] of this.recent) target.recent.set(k, v)
    for (const event of this.events) target.events.push(event)
    target.head = this.head
  }
}

/**
 * What is durable, cached in memory over the LevelDB indexes. Lookups are synchronous (an index
 * record is one LevelDB read, mostly from its memtable or block cache: cheaper than a trip to the
 * thread pool). Open invocations always stay cached: their stored records are only refreshed
 * when they end (a run's record is written once, when it opens: any can be read again).
 */
class CommittedState {
  head: Head = { highWater: 0, chain: EMPTY_CHAIN }
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  readonly claims = new Map<string, string>()
  readonly reserved = new Map<string, string>()
  /** The last run opened in each session, as far as known (`null`: the session has none); see `LatestRun`. */
  readonly latestRuns = new Map<string, LatestRun | null>()
  /** How many times `latestRuns` was trimmed: a read from the index made across a trim is not kept. */
  latestEvictions = 0
  latestLimit = CACHE_LIMIT

  constructor(private readonly db: Db) {}

  /**
   * The last run opened in `sessionId` as far as it is durable: from memory, else read from the run
   * index and remembered unless an open of the session was absorbed, or the map trimmed, meanwhile.
   */
  async latestRun(sessionId: string): Promise<LatestRun | undefined> {
    const known = this.latestRuns.get(sessionId)
    if (known !== undefined) return known ?? undefined
    const epoch = this.latestEvictions
    const read = await this.readLatestRun(sessionId)
    this.rememberLatestRun(sessionId, read, epoch)
    return read ?? undefined
  }

  /** The last run opened in `sessionId` as the run index holds it (durable runs only), `null` for none. */
  private async readLatestRun(sessionId: string): Promise<LatestRun | null> {
    const prefix = keys.run(sessionId, '')
    let latest: { runId: string; invocationId: string; openedSeq: number } | null = null
    for await (const key of this.db.keys(keys.runsOf(sessionId))) {
      const runId = key.slice(prefix.length)
      const run = this.runNow(sessionId, runId)
      const record = run === undefined ? undefined : this.invocationNow(run.invocationId)
      if (run === undefined || record === undefined) throw new FactstateError('LOG_CORRUPT', `run ${sessionId}/${runId} has no invocation record`, { details: { key } })
      if (latest === null || record.openedSeq > latest.openedSeq) latest = { runId, invocationId: run.invocationId, openedSeq: record.openedSeq }
    }
    return latest === null ? null : { runId: latest.runId, invocationId: latest.invocationId }
  }

  /** Keeps a read of the run index unless the session's entry was set, or the map trimmed, since `epoch` was taken before it. */
  private rememberLatestRun(sessionId: string, latest: LatestRun | null, epoch: number): void {
    if (this.latestEvictions !== epoch || this.latestRuns.has(sessionId)) return
    this.latestRuns.set(sessionId, latest)
    this.trimLatest()
  }

  private trimLatest(): void {
    if (this.latestRuns.size <= this.latestLimit) return
    // The least lately set first (an entry set again moves to the end).
    for (const k of this.latestRuns.keys()) {
      this.latestRuns.delete(k)
      if (this.latestRuns.size <= this.latestLimit / 2) break
    }
    this.latestEvictions += 1
  }

  invocationNow(id: string): InvocationRecord | undefined {
    const cached = this.invocations.get(id)
    if (cached) return cached
    const stored = this.db.getSync(keys.invocation(id))
    if (stored === undefined) return undefined
    const record = invocationRecordOf(indexRecord<StoredInvocationRecord>(stored, `invocation ${id}`, 'invocation'))
    this.invocations.set(id, record)
    // A log only read (a snapshot, an inspector) is trimmed here: it absorbs nothing.
    if (this.invocations.size > this.trimAt.invocations) this.trimFilled('invocations')
    return record
  }
  sessionNow(id: string): SessionRecord {
    const cached = this.sessions.get(id)
    if (cached) return cached
    const stored = this.db.getSync(keys.session(id))
    const record = stored === undefined ? emptySession() : indexRecord<SessionRecord>(stored, `session ${id}`, 'session')
    this.sessions.set(id, record)
    if (this.sessions.size > this.trimAt.sessions) this.trimFilled('sessions')
    return record
  }
  runNow(sessionId: string, runId: string): RunRecord | undefined {
    const key = keys.run(sessionId, runId)
    const cached = this.runs.get(key)
    if (cached) return cached
    const stored = this.db.getSync(key)
    if (stored === undefined) return undefined
    const record = indexRecord<RunRecord>(stored, `run ${sessionId}/${runId}`, 'run')
    this.runs.set(key, record)
    if (this.runs.size > this.trimAt.runs) this.trimFilled('runs')
    return record
  }
  claimNow(id: string): string | undefined {
    const cached = this.claims.get(id)
    if (cached) return cached
    const stored = this.db.getSync(keys.claim(id))
    if (stored === undefined) return undefined
    const value = indexRecord<string>(stored, `claim ${id}`, 'name')
    this.claims.set(id, value)
    if (this.claims.size > this.trimAt.claims) this.trimFilled('claims')
    return value
  }
  reservedNow(key: string): string | undefined {
    const cached = this.reserved.get(key)
    if (cached) return cached
    const stored = this.db.getSync(key)
    if (stored === undefined) return undefined
    const value = indexRecord<string>(stored, `reservation ${key}`, 'name')
    this.reserved.set(key, value)
    if (this.reserved.size > this.trimAt.reserved) this.trimFilled('reserved')
    return value
  }

  absorb(staging: Staging): void {
    // forEach, not for…of: no [key, value] pair allocated for every invocation of every group.
    staging.invocations.forEach((v, k) => this.invocations.set(k, v))
    staging.sessions.forEach((v, k) => this.sessions.set(k, v))
    staging.runs.forEach((v, k) => this.runs.set(k, v))
    staging.claims.forEach((v, k) => this.claims.set(k, v))
    staging.reserved.forEach((v, k) => this.reserved.set(k, v))
    staging.latestRuns.forEach((v, k) => {
      this.latestRuns.delete(k)
      this.latestRuns.set(k, v)
    })
    this.trimLatest()
    this.head = staging.head
    this.trim()
  }

  /**
   * Keeps memory bounded: open invocations and busy sessions stay, the rest is re-read on demand.
   * Called after each absorbed group, and by a lookup that filled a cache.
   */
  /**
   * The size past which a lookup trims: `CACHE_LIMIT`, or twice what the last such trim left where
   * it could not shrink a cache that far (open invocations and busy sessions stay). So a cache of
   * records that cannot go is scanned again only once it has doubled, not at every miss.
   */
  private readonly trimAt = { invocations: CACHE_LIMIT, sessions: CACHE_LIMIT, runs: CACHE_LIMIT, claims: CACHE_LIMIT, reserved: CACHE_LIMIT }
  private trimFilled(cache: keyof CommittedState['trimAt']): void {
    this.trim()
    this.trimAt[cache] = Math.max(CACHE_LIMIT, 2 * this[cache].size)
  }

  private trim(): void {
    if (this.invocations.size > CACHE_LIMIT) {
      for (const [k, v] of this.invocations) {
        if (v.terminal !== null) this.invocations.delete(k)
        if (this.invocations.size <= CACHE_LIMIT / 2) break
      }
    }
    if (this.sessions.size > CACHE_LIMIT) {
      for (const [k, v] of this.sessions) {
        if (v.active.length === 0) this.sessions.delete(k)
        if (this.sessions.size <= CACHE_LIMIT / 2) break
      }
    }
    if (this.runs.size > CACHE_LIMIT) {
      // A run record never changes after its run opens: any of them can be read again.
      for (const k of this.runs.keys()) {
        this.runs.delete(k)
        if (this.runs.size <= CACHE_LIMIT / 2) break
      }
    }
    for (const claims of [this.claims, this.reserved]) {
      if (claims.size <= CACHE_LIMIT) continue
      for (const k of claims.keys()) {
        claims.delete(k)
        if (claims.size <= CACHE_LIMIT / 2) break
      }
    }
  }
}

/**
 * Syncs every file of `directory` (not its subdirectories) and the directory itself, so that a copy
 * written there (a backup) is on the disk, not only in the page cache. `LOG_IO` when it cannot be.
 */
async function syncDirectory(directory: string, files = true): Promise<void> {
  try {
    for (const entry of files ? await readdir(directory, { withFileTypes: true }) : []) {
      if (!entry.isFile()) continue
      const handle = await openFile(join(directory, entry.name), 'r')
      try {
        await handle.sync()
      } finally {
        await handle.close()
      }
    }
    const handle = await openFile(directory, 'r')
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
  } catch (error) {
    throw logIo(`the copy in ${directory} cannot be synced to the disk: ${(error as Error).message}`, error, { path: directory })
  }
}

/** The next batch, read ahead: a failure is handled where it is awaited, never unhandled while the caller works. */
function prefetch<T>(iterator: { nextv(size: number): Promise<T[]> }): Promise<T[]> {
  const read = iterator.nextv(SCAN_BATCH)
  read.catch(() => undefined)
  return read
}

/**
 * A LevelDB iterator read in batches (`nextv`): a whole pass costs one promise per batch, not one
 * per item, and the next batch is read while the caller works on this one.
 */
async function* batchesOf<T>(iterator: { nextv(size: number): Promise<T[]>; close(): Promise<void> }): AsyncGenerator<T[], void, undefined> {
  let next: Promise<T[]> | undefined
  try {
    next = prefetch(iterator)
    for (;;) {
      const batch = await next
      next = undefined
      if (batch.length === 0) return
      next = prefetch(iterator)
      yield batch
    }
  } finally {
    // A caller that stops early leaves a read in flight: its outcome no longer matters.
    await next?.catch(() => undefined)
    await iterator.close()
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0
}

/** The head record as stored: a non-negative seq and a chain of 32 bytes, or `LOG_CORRUPT`. */
function headRecord(found: unknown): Head {
  const { highWater, chain } = (typeof found === 'object' && found !== null ? found : {}) as { highWater?: unknown; chain?: unknown }
  if (typeof highWater !== 'number' || !Number.isSafeInteger(highWater) || highWater < 0 || !(chain instanceof Uint8Array) || chain.length !== CHAIN_BYTES) {
    throw new FactstateError('LOG_CORRUPT', 'the head record is unreadable')
  }
  return { highWater, chain: new Uint8Array(chain) }
}

function checkLocation(location: unknown): void {
  if (typeof location !== 'string' || location.trim().length === 0 || location.includes('\0')) {
    throw new FactstateError('LOG_INVALID_ARGUMENT', 'the log location must be a non-empty path (not only spaces)')
  }
}

/**
 * The names LevelDB and factstate give the files of a log directory (a crash may leave any of them
 * before `CURRENT`), and `lost+found`, which a fresh ext4 volume holds at its mount point (a volume
 * mounted for the log alone).
 */
export const LOG_DIRECTORY_ENTRY = /^(?:LOCK|LOG|LOG\.old|CURRENT|MANIFEST-\d+|\d+\.(?:log|ldb|sst|dbtmp)|FACTSTATE-(?:HEAD|IDS)(?:\.tmp)?|lost|lost\+found)$/

/**
 * Refuses to make a log in a directory that holds other things (a log's directory is LevelDB's
 * alone: `EventLog.open('.')` in a project would scatter its files among the project's). A new or
 * empty directory, or one with a log's own files only (a crash while the log was first made), is fine.
 */
async function checkOwnDirectory(location: string): Promise<void> {
  let entries: string[]
  try {
    entries = await readdir(location)
  } catch {
    // Missing (it is made), a file in the way or unreadable: the claim says which.
    return
  }
  if (entries.includes('CURRENT')) return checkCurrent(location, entries)
  const foreign = entries.filter((name) => !LOG_DIRECTORY_ENTRY.test(name))
  if (foreign.length === 0) return
  const shown = foreign.slice(0, 3).join(', ') + (foreign.length > 3 ? `, and ${foreign.length - 3} more` : '')
  throw new FactstateError('LOG_INVALID_ARGUMENT', `${location} holds no log but other files (${shown}): a log needs a directory of its own, new or empty`)
}

/** What a directory may hold for an open to count as making a new log there: LevelDB's lock and info log, from an open that failed before it made one. */
const FRESH_ENTRY = /^(?:LOCK|LOG|LOG\.old|lost\+found)$/

/**
 * Removes what an open that was making a new log in `claim`'s directory left when it failed (a full
 * disk, no file descriptor left): LevelDB may have written `CURRENT` and a manifest by then, which a
 * later `open(dir, { create: false })`, a snapshot or a backup would take for an empty log. `CURRENT`
 * goes first (without it nothing opens the rest as a log), then LevelDB's other files, then the
 * directory when the claim made it. Only once no process holds the directory's LOCK, as /proc/locks
 * lists it (a process that opened the log meanwhile keeps its files); where that cannot be told (no
 * /proc/locks) the files stay. Never fails: what cannot be removed stays.
 */
async function unmake(claim: DirectoryClaim): Promise<void> {
  if ((await logHolder(claim.path).catch(() => undefined)) !== false) {
    // No LOCK: LevelDB failed before it (it makes CURRENT only after): at most the directory to remove.
    if (claim.made && !(await stat(join(claim.path, 'LOCK')).then(() => true, () => false))) await rmdir(claim.path).catch(() => undefined)
    return
  }
  try {
    const entries = await readdir(claim.path)
    // Facts in a table or a write-ahead log are not this open's making: another process made the log
    // in the moment between this open's look at the directory and now. Left as they are.
    if (entries.some((name) => /\.(?:ldb|sst)$/.test(name))) return
    for (const name of entries.filter((name) => /^\d+\.log$/.test(name))) {
      if ((await stat(join(claim.path, name))).size > 0) return
    }
    const made = entries.filter((name) => LOG_DIRECTORY_ENTRY.test(name) && !/^(?:lost|lost\+found)$/.test(name))
    for (const name of ['CURRENT', ...made.filter((name) => name !== 'CURRENT')]) {
      if (name === 'CURRENT' && !made.includes(name)) continue
      await rm(join(claim.path, name), { force: true })
    }
    if (claim.made) await rmdir(claim.path)
  } catch {
    // Left as it is: without CURRENT it opens as no log; with it, as an empty one.
  }
}

/**
 * Refuses to copy (`purpose`: "take a snapshot of", "back up") anything at `location` but a log:
 * `LOG_INVALID_ARGUMENT` where there is none (nothing is created there), `LOG_IO` where it cannot be
 * read, and what `checkCurrent` says of a `CURRENT` that names no manifest (which would otherwise
 * look like a log that kept changing while it was copied).
 */
async function checkCopySource(location: string, purpose: string): Promise<void> {
  try {
    await stat(join(location, 'CURRENT'))
  } catch (error) {
    throw noLogAt(location, purpose, error)
  }
  await checkCurrent(location, await readdir(location).catch(() => []))
}

/**
 * What a failed look at the log in `location` (to `purpose`) is: `LOG_INVALID_ARGUMENT` with
 * `details: { reason: 'no_log', path }` where nothing is there, else `LOG_IO`.
 */
function noLogAt(location: string, purpose: string, error: unknown): FactstateError {
  const code = (error as NodeJS.ErrnoException).code
  // `no_log`: a program started before the application that makes the log (an exporter) tells it from a bad argument, and waits.
  if (code === 'ENOENT' || code === 'ENOTDIR') return new FactstateError('LOG_INVALID_ARGUMENT', `there is no log at ${location} to ${purpose}`, { cause: error, details: { reason: 'no_log', path: location } })
  return logIo(`the log at ${location} cannot be read: ${(error as Error).message}`, error, { path: location })
}

/**
 * `CURRENT` names the manifest LevelDB opens. One that names no manifest of the directory (cut
 * short, overwritten, its manifest deleted) is a damaged log: said so before LevelDB opens it, which
 * would report a missing file as an I/O error and leave its lock and info log behind.
 */
async function checkCurrent(location: string, entries: string[]): Promise<void> {
  const read = () => readFile(join(location, 'CURRENT'), 'latin1').catch(() => undefined)
  // Unreadable (a permission, a directory in its place): LevelDB's open reports it.
  let text = await read()
  if (text === undefined) return
  let named = CURRENT_TEXT.exec(text)?.[1]
  // Looked for twice at most: another process's open may start a new manifest, name it and delete
  // the old one between the read and the look for the manifest it names.
  for (let attempt = 0; named !== undefined && attempt < 2; attempt += 1) {
    if (entries.includes(named) || (await stat(join(location, named)).then(() => true, () => false))) return
    const again = await read()
    if (again === undefined) return
    if (again === text) break
    text = again
    named = CURRENT_TEXT.exec(text)?.[1]
  }
  const shown = JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text)
  throw new FactstateError(
    'LOG_CORRUPT',
    named === undefined
      ? `the log's CURRENT file is damaged: it holds ${shown}, not the name of a LevelDB manifest`
      : `the log's CURRENT file names ${named}, which is not in ${location}: the manifest is missing`,
    { details: { file: 'CURRENT' } },
  )
}

/** What LevelDB writes in `CURRENT`: the name of its manifest and a newline. */
const CURRENT_TEXT = /^(MANIFEST-\d+)\n$/

/**
 * A backup's destination that cannot be made (`mkdtemp` beside it, or a look at it, refused) or written (`what`: its disk full, say):
 * `LOG_IO` naming the destination and its parent, the place to fix, not LevelDB.
 */
function destinationRefused(destination: string, error: unknown, what: 'made' | 'written' = 'made'): FactstateError {
  const parent = dirname(resolve(destination))
  return logIo(`the backup's destination ${destination} cannot be ${what} in ${parent}: ${causeMessages(error)}`, error, { path: parent })
}

/** A `LOG_IO` of the copy a snapshot or backup was writing in `copy` (its `details.path` there), not of the log it read. */
function inCopy(error: unknown, copy: string): error is FactstateErrorOf<'LOG_IO'> {
  const at = isFactstateError(error, 'LOG_IO') ? error.details?.path : undefined
  return at !== undefined && (at === copy || at.startsWith(`${copy}${sep}`))
}

/**
 * Another process's `LOG_WRITER_BUSY` with that process's pid, where /proc/locks lists it (Linux):
 * in its message and `details.pid`, to find the process that holds the log. Any other error as it is.
 */
async function withHolder(error: FactstateError, location: string): Promise<FactstateError> {
  if (!isFactstateError(error, 'LOG_WRITER_BUSY') || error.details.holder !== 'another-process') return error
  const holder = await logHolder(location).catch(() => undefined)
  if (holder === undefined || holder === false || holder.pid === undefined) return error
  const message = messageWithoutCode(error).replace('another process holds this log', `another process (pid ${holder.pid}) holds this log`)
  return new FactstateError('LOG_WRITER_BUSY', message, { cause: error.cause, details: { ...error.details, pid: holder.pid } })
}

/** `location`: the log's directory, where a full disk's `LOG_IO` reads how much its next open needs. */
function levelError(error: unknown, location?: string): FactstateError {
  const code = (error as { code?: string }).code
  const causeCode = ((error as { cause?: { code?: string } }).cause ?? {}).code
  // The cause is LevelDB's own error (its open wraps it in LEVEL_DATABASE_NOT_OPEN): `cause.code` says what it found.
  const inner = code === 'LEVEL_LOCKED' || code === 'LEVEL_CORRUPTION' ? error : (error as { cause?: unknown }).cause
  if (code === 'LEVEL_LOCKED' || causeCode === 'LEVEL_LOCKED') {
    return new FactstateError('LOG_WRITER_BUSY', 'another process holds this log: a log has one writer at a time; a process that should wait its turn (a worker) opens it with EventLog.open(dir, { waitMs }), which waits up to waitMs for the log to be free; read it from inside that process (its events(), the inspector in live mode), through a snapshot (EventLog.openSnapshot), or once it has closed the log', {
      cause: inner,
      details: { holder: 'another-process', closing: false },
    })
  }
  if (code === 'LEVEL_CORRUPTION' || causeCode === 'LEVEL_CORRUPTION') {
    // `Corruption: 1 missing files; e.g.: …/000005.ldb`: a table file the manifest lists is gone.
    const missing = /missing files; e\.g\.: (?:.*[\\/])?(\d+\.(?:ldb|sst|log))\s*$/.exec((inner as Error).message)?.[1]
    return new FactstateError('LOG_CORRUPT', `LevelDB reports corruption: ${(inner as Error).message}`, { cause: inner, ...(missing === undefined ? {} : { details: { file: missing } }) })
  }
  const short = shortTable(error)
  if (short !== undefined) {
    return new FactstateError('LOG_CORRUPT', `table file ${short} is shorter than LevelDB's manifest records: it was cut short (LevelDB: ${causeMessages(error)})`, {
      cause: error,
      details: { file: short },
    })
  }
  return logIo(`LevelDB failed: ${causeMessages(error)}`, error, location === undefined ? {} : { location })
}

/**
 * LevelDB's own table file (`000005.ldb`) that a read found cut short, from its error, if that is
 * what it says. LevelDB maps table files into memory and reads a block at the offset its manifest
 * records; a read past the end of a shorter file fails with `EINVAL` ("IO error: …/000005.ldb:
 * Invalid argument"). A disk's read error is `EIO`, a permission `EACCES`: those stay `LOG_IO`.
 */
function shortTable(error: unknown): string | undefined {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 4; cause = cause.cause, depth += 1) {
    const found = /^IO error: (?:.*[\\/])?(\d+\.(?:ldb|sst)): Invalid argument$/.exec(cause.message)
    if (found) return found[1]
  }
  return undefined
}

/**
 * Writes `parts` to `path`.tmp and renames it over `path` (synced first when `sync`). The temporary
 * name is removed and created afresh ('wx'): whatever was left there (a symlink, say) is never
 * followed out of the directory.
 */
async function writeAside(path: string, parts: Uint8Array[], sync: boolean): Promise<void> {
  const aside = `${path}.tmp`
  await rm(aside, { force: true })
  const file = await openFile(aside, 'wx')
  try {
    await file.writev(parts)
    if (sync) await file.sync()
  } finally {
    await file.close()
  }
  await rename(aside, path)
}

/** The seq of a key read from the event space; `LOG_CORRUPT` naming the key when it is not an event key. */
function eventSeq(key: string): number {
  const seq = seqOfEventKey(key)
  if (Number.isNaN(seq)) {
    throw new FactstateError('LOG_CORRUPT', `key ${JSON.stringify(key)} lies in the event space but is no event's key`, { details: { index: 'unknown', key } })
  }
  return seq
}

/** The messages of an error and its causes, each once ("Database failed to open: IO error: …/MANIFEST-000004: No such file or directory"). */
function causeMessages(error: unknown): string {
  const messages: string[] = []
  let current: unknown = error
  for (let depth = 0; depth < 4 && current !== undefined && current !== null; depth += 1) {
    const message = (current as { message?: unknown }).message
    const text = typeof message === 'string' ? message : String(current)
    if (!messages.some((known) => known.includes(text))) messages.push(text)
    current = (current as { cause?: unknown }).cause
  }
  return messages.join(': ')
}

/**
 * The durable, ordered, tamper-evident fact log: an embedded LevelDB directory with one writer.
 *
 * Appends are validated, encoded once, and group-committed: concurrent appends share one
 * chained batch written with `sync: true`, and each caller resolves only when its facts are
 * durable. A rolling sha256 chain over the exact stored bytes gives the log digest.
 *
 * @example
 * ```ts
 * const log = await EventLog.open('./.factstate/app')
 * const seq = await log.append(event)
 * const { events, digest } = await log.verify()
 * await log.close()
 * ```
 */
export class EventLog {
  readonly #db: Db
  readonly #durability: Durability
  readonly #state: CommittedState
  readonly #claim: DirectoryClaim
  readonly #location: string
  /** Set for a snapshot (`openSnapshot`): the directory it copies. Such a log refuses appends, and its close removes its copy. */
  readonly #snapshotOf: string | undefined
  /**
   * The points this log was copied at, oldest first, when it is a copy made by `EventLog.backup` (read
   * on open): the last is its own backup's, the others those of the backups it descends from.
   */
  #backupPoints: BackupPoint[] = []
  /** Sessions of a backup that have run since its last point (so need no acknowledgement), as found. */
  readonly #ranSinceBackup = new Set<string>()
  /** The parent call (null: none) each run's `invocation.opened` records, by invocation id, as `runs` read it: an opened fact never changes. */
  readonly #parents = new Map<string, ParentCall | null>()
  /**
   * The runs whose `invocation.opened` records a `parent`, by the parent's operation id: built by one
   * pass over the run records the first time `childRuns` is called, then kept up by this log's own
   * appends (see `#childIndex`).
   */
  #children: Map<string, ChildEntry[]> | undefined
  #childrenBuild: Promise<Map<string, ChildEntry[]>> | undefined
  /** The child runs committed while `#childrenBuild` reads the log, added to what it found when it is done. */
  #childrenSince: ChildEntry[] | undefined
  readonly #listeners = new Set<(events: StoredEvent[]) => void>()
  readonly #followers = new Set<Follower>()
  #pending: PendingEntry[] = []
  /** The events in `#pending`. */
  #pendingEvents = 0
  /** A batch is being written. */
  #writing = false
  #flushing: Promise<void> | undefined
  /**
   * Every event id of the log (and of appends staged since), once `#idsReady`: appends skip the
   * id index read for an id it has never seen. Built in the background once enough appends came
   * (`ID_FILTER_AFTER`), so a log opened to be read, or for a few appends, never pays for it.
   */
  #ids: IdFilter | undefined
  /** The pending refresh of the head anchor (see `ANCHOR_REFRESH_MS`), and the anchor writes in order. */
  #anchorTimer: ReturnType<typeof setTimeout> | undefined
  #anchoring: Promise<void> = Promise.resolve()
  #idsReady = false
  #idsBuild: Promise<void> | undefined
  /** Events appended since open, until the id filter's build starts. */
  #appended = 0
  #idsBuilds = 0
  /** The format the log is marked with (0: none); a batch marks it `BASE_FORMAT`, or 6 (see `carriesFormat6`), when it is lower. */
  #format = 0
  /** The format the log was marked with as it was opened (0: none), before the open marked it: what a snapshot's log is marked with. */
  #formatFound = 0
  /** The log carries `keys.reservationsIndexed` (else the next batch writes it). */
  #reservationsMarked = false
  /** The log carries `keys.recencyIndexed` (else the next batch writes it: a log with facts gets it on open). */
  #recencyMarked = false
  #idsMinimum = ID_FILTER_MIN
  /**
   * The directory opened (device and inode): the files written beside LevelDB's go only into it,
   * never into one that replaced it. Held open until the close is done, so that its inode cannot be
   * given to a directory made at its name meanwhile (ext4 reuses a freed one at once).
   */
  #directory: { dev: number; ino: number; handle: FileHandle | undefined } | undefined
  /** The high-water the anchor on disk records, when it records this very head: an unchanged head is not written again. */
  #anchoredAt: number | undefined
  /** The writer's sweep of abandoned snapshot copies, started by its open (`sweepSoon`): what it removed. */
  #swept: Promise<string[]> = Promise.resolve([])
  /** The close's `LOG_IO` for a head it could not record: told to the first `close()` alone. */
  #headUnrecorded: FactstateError | undefined
  #idsStoredFrom = ID_FILTER_STORED_FROM
  /** The high-water the stored filter covers, once this log has read or written it: an unchanged head is not stored again. */
  #idsStored: number | undefined
  /** The last append waiting for its sources to be verified (see `#enqueue`); later appends queue behind it. */
  #ordered: Promise<void> | undefined
  /** Boundaries verified against the stored facts (`boundaryKey`), the oldest dropped past `VERIFIED_SOURCES_KEPT`. */
  readonly #verifiedSources = new Set<string>()
  /** Lineages read lately, by boundary (see `#rememberLineage`), and how many events they hold together. */
  readonly #lineages = new Map<string, { events: StoredEvent[]; bytes: number }>()
  #lineageEvents = 0
  #lineageBytes = 0
  /** Run chains computed by `runSource`, by run key. */
  readonly #runChains = new Map<string, { seq: number; chain: Uint8Array }>()
  /**
   * Set on a snapshot of a damaged log (see `openSnapshot`): the `LOG_CORRUPT` its `verify()` refuses
   * with, and what `logInternals(log).damage` tells a reader that shows it anyway.
   */
  #damage: FactstateError | undefined
  /** The group being staged while another is written. */
  #next: Batch | undefined
  /** The staging of the batch being written. */
  #inFlight: Staging | undefined
  #wake: (() => void) | undefined
  /** The ordinal of the last append queued, and the highest one through which every append is durable or refused. */
  #queued = 0
  #settledThrough = 0
  /** Who waits for an ordinal to settle (see `#settled`). */
  #settleWaiters: { through: number; resolve: () => void }[] = []
  #closed = false
  #closing: Promise<void> | undefined
  /** Tool calls started through this log's engines whose promises have not settled (see `LogInternals.lease`). */
  #tools = 0
  /** Set by a close that found tools running: called once the last of them has settled. */
  #toolsSettled: (() => void) | undefined
  /** Closed with tools still running past the grace: LevelDB stays open until they settle. */
  #lingering = false
  /** LevelDB's close has begun: a lease taken now holds nothing. */
  #storeClosing = false
  #failed: FactstateError | undefined

  private constructor(db: Db, durability: Durability, claim: DirectoryClaim, snapshotOf?: string) {
    this.#db = db
    this.#durability = durability
    this.#claim = claim
    this.#location = claim.path
    this.#snapshotOf = snapshotOf
    this.#state = new CommittedState(db)
    const self = this
    internalsOf.set(this, {
      appendAll: (events, precondition) => this.#enqueue(events, precondition, false) as Promise<number[]>,
      checkAppend: (events, precondition) => this.#enqueue(events, precondition, false, false, true) as Promise<number[]>,
      digestOf: (seq, eventId) => {
        this.#assertOpen()
        let stored: Uint8Array | undefined
        try {
          stored = this.#db.getSync(keys.eventId(eventId))
        } catch (error) {
          throw this.#readFailure(error)
        }
        const chain = this.#idRecordChain(eventId, seq, stored)
        if (chain instanceof FactstateError) throw chain
        return logDigest(seq, chain)
      },
      invocationRecord: async (id) => {
        this.#assertOpen()
        return this.#state.invocationNow(id)
      },
      sessionRecord: async (id) => {
        this.#assertOpen()
        return this.#state.sessionNow(id)
      },
      invocationEvents: (id, upTo) => this.#invocationEvents(id, upTo),
      damage: () => this.#damage,
      scanEvents: (upTo, chunk) => this.#scanEvents(upTo, chunk),
      lineage: (boundary) => this.#lineage(boundary),
      restoredSince: (sessionId) => this.#restoredSince(sessionId),
      latestRun: (sessionId) => {
        this.#assertOpen()
        return this.#reading(() => this.#state.latestRun(sessionId))
      },
      latestRunCache: () => ({ sessions: this.#state.latestRuns.size, evictions: this.#state.latestEvictions }),
      setLatestRunLimit: (limit) => {
        this.#state.latestLimit = limit
      },
      swept: () => this.#swept,
      openInvocations: () => {
        // A closed log knows nothing more: recovering through its handle must say so, not find nothing to close.
        this.#assertOpen()
        return [...this.#state.invocations.values()].filter((r) => r.terminal === null)
      },
      unansweredCount: (limit) => this.#unansweredCount(limit),
      live: new Set(),
      onClose: new Set(),
      lease: () => this.#lease(),
      subscribe(listener) {
        self.#listeners.add(listener)
        return () => self.#listeners.delete(listener)
      },
      idFilterReady: async () => {
        await this.#idsBuild
        return this.#idsReady
      },
      idFilterBuilds: () => this.#idsBuilds,
      followerCount: () => this.#followers.size,
      lineageCache: () => ({ lineages: this.#lineages.size, events: this.#lineageEvents, bytes: this.#lineageBytes }),
      cacheSizes: () => {
        const { invocations, sessions, runs, claims, reserved } = this.#state
        return { invocations: invocations.size, sessions: sessions.size, runs: runs.size, claims: claims.size, reserved: reserved.size }
      },
      buildIdFilter: async () => {
        this.#assertOpen()
        await (this.#idsBuild ??= this.#buildIds())
        return this.#idsReady
      },
      setIdFilterMinimum: (ids) => {
        this.#idsMinimum = ids
      },
      setIdFilterStoredFrom: (events) => {
        this.#idsStoredFrom = events
      },
      location: claim.path,
      assertOpen: () => this.#assertOpen(),
    })
  }

  /**
   * Opens (creating if needed) the log in `location`. Fails with `LOG_WRITER_BUSY` when another
   * handle, in this process or another, holds it (with `waitMs`, once it still does after that
   * long); with `LOG_CORRUPT` when the stored tail is not continuous. Once open, it starts removing,
   * in the background, the copies of snapshots whose processes were killed before their close (in the
   * system's temporary directory and the CLI's directories there and beside the log; only those no
   * process holds; on Linux; at most every ten minutes per directory).
   *
   * @example
   * ```ts
   * // A deploy whose new version starts before the old one has closed the log: wait for that close.
   * const log = await EventLog.open('.factstate/app', { waitMs: 30_000 })
   * ```
   */
  static async open(location: string, options: EventLogOptions = {}): Promise<EventLog> {
    checkLocation(location)
    const {
      durability = 'sync',
      create = true,
      waitMs = 0,
      signal,
    } = readOptions(options, ['durability', 'create', 'waitMs', 'signal'], { call: 'EventLog.open', code: 'LOG_INVALID_ARGUMENT', details: fieldDetails })
    if (durability !== 'sync' && durability !== 'os') {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `durability must be 'sync' or 'os', not ${shown(durability)}`, { details: { field: 'durability' } })
    }
    if (typeof create !== 'boolean') throw new FactstateError('LOG_INVALID_ARGUMENT', `create must be true or false, not ${shown(create)}`, { details: { field: 'create' } })
    if (typeof waitMs !== 'number' || !Number.isFinite(waitMs) || waitMs < 0) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `waitMs must be a number of milliseconds, 0 or more, not ${shown(waitMs)}`, { details: { field: 'waitMs' } })
    }
    if (signal !== undefined && !isAbortSignal(signal)) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `signal must be an AbortSignal (AbortController.signal), not ${shown(signal)}`, { details: { field: 'signal' } })
    }
    // Checked before the directory is claimed, which makes it.
    if (!create) await checkCopySource(location, 'open (create: false)')
    await checkOwnDirectory(location)
    const log = await whileWriterBusy(() => EventLog.#openAt(location, durability, undefined, true), waitMs, signal, () => logHeldOpen(location))
    // Copies a killed process left behind would otherwise stay until someone deletes them by hand.
    // Not waited for: the open does not depend on what the temporary directory holds.
    log.#swept = sweepSoon(log.#location)
    return log
  }

  /**
   * Opens a read-only copy of the log in `location` as it stands now, also while another process
   * has it open (where `open` is `LOG_WRITER_BUSY`), or this one. The copy is consistent: it holds
   * every fact that was durable when it was taken (and perhaps a few more), each group commit whole
   * or not at all, and passes the same checks on open as the log itself. It lives in a new directory
   * under the system's temporary directory, or `options.directory` (table files are linked, not
   * copied, where they can be) until `close()` removes it. It does not follow the log: facts appended later are not in it, so
   * take another snapshot to see them. Appending to it is `LOG_READ_ONLY`.
   * `LOG_INVALID_ARGUMENT` when `location` holds no log (nothing is created there), or
   * `options.directory` is not a path; `LOG_IO` when no copy can be made there.
   *
   * @example
   * ```ts
   * // In a second process, while the application keeps its log open:
   * const snapshot = await EventLog.openSnapshot('./.factstate/app')
   * try {
   *   console.log(snapshot.head().highWater, (await snapshot.verify()).digest)
   * } finally {
   *   await snapshot.close()   // removes the copy
   * }
   * ```
   */
  static async openSnapshot(location: string, options: SnapshotOptions = {}): Promise<EventLog> {
    checkLocation(location)
    const { directory = tmpdir() } = readOptions(options, ['directory'], { call: 'EventLog.openSnapshot', code: 'LOG_INVALID_ARGUMENT', details: fieldDetails })
    if (typeof directory !== 'string' || directory.trim().length === 0 || directory.includes('\0')) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'the directory of a snapshot must be a non-empty path (not only spaces)', { details: { field: 'directory' } })
    }
    await checkCopySource(location, 'take a snapshot of')
    let copy: string
    try {
      copy = await mkdtemp(join(directory, SNAPSHOT_PREFIX))
      // Removed as the process exits, if it exits before the snapshot's close (see `keepCopy`).
      keepCopy(copy)
    } catch (error) {
      throw logIo(`no directory for a snapshot can be made in ${directory}: ${(error as Error).message}`, error, { path: directory })
    }
    // Read before the copy: a marker written after it would be of damage the copy does not have.
    // Its refusal is always a LOG_CORRUPT (a marker that cannot be read included).
    const marked = await refuseMarkedDamaged(location).then(
      () => undefined,
      (error: unknown) => error as FactstateError,
    )
    // No file descriptor to read the marker with: no snapshot, rather than one said to be damaged.
    if (isFactstateError(marked, 'LOG_IO')) {
      await rm(copy, { recursive: true, force: true }).catch(() => undefined)
      forgetCopy(copy)
      throw marked
    }
    let snapshot: EventLog
    try {
      await copySnapshot(location, copy)
      // Never synced: the copy is removed at close, and a crash leaves only a temporary directory.
      snapshot = await EventLog.#openAt(copy, 'os', resolve(location))
    } catch (error) {
      await rm(copy, { recursive: true, force: true }).catch(() => undefined)
      forgetCopy(copy)
      // The copy could not be written (its disk full, say): named as the place it was made in, as one
      // that cannot be made there is (the copy is gone), not as the log, which was only read.
      if (inCopy(error, copy)) throw logIo(`no snapshot can be written in ${directory}: ${causeMessages(error.cause ?? error)}`, error.cause ?? error, { path: directory })
      throw error
    }
    // A snapshot still reads a damaged log, for whoever looks into it, but its verify() does not
    // call it whole: the log is marked damaged, or LevelDB dropped part of the copy's write-ahead log
    // as it opened it (a copy's write-ahead log is a prefix of the log's, and LevelDB says nothing of
    // a record cut short at its end: what it reports dropped is damaged in the log itself).
    try {
      const lost = marked === undefined ? await walLoss(copy) : undefined
      // What LevelDB or the marker says of the loss first; else the head anchor's count of it.
      snapshot.#damage = marked ?? (lost === undefined ? snapshot.#damage : damagedLog(lost.why.replace('as it opened the log', "as it opened the snapshot's copy"), lost.file))
    } catch (error) {
      await snapshot.close().catch(() => undefined)
      throw error
    }
    return snapshot
  }

  /**
   * A cheap look at whether the log in `location` may have changed, for a program that follows a log
   * another process writes by taking snapshots: an opaque text, the same as long as the log's files
   * are (the names, sizes and times of its write-ahead logs, its manifest and `CURRENT`, which every
   * append, flush and compaction changes), read with a directory listing and a few `stat`s, without
   * opening LevelDB, locking or writing anything. A mark unchanged since the one taken before the
   * last snapshot means that snapshot holds every fact there is; a changed one means there may be
   * new facts (a compaction, or an open and close, changes it too). Take the mark before the
   * snapshot, so that facts appended while it is taken are seen at the next look. A location with
   * no log there is `LOG_INVALID_ARGUMENT` with `details: { reason: 'no_log', path }`; one that
   * cannot be read `LOG_IO`.
   *
   * @example
   * ```ts
   * const mark = await EventLog.changeMark('./.factstate/app')
   * if (mark !== lastMark) { lastMark = mark; await readNewFacts() }   // a snapshot, only then
   * ```
   */
  static async changeMark(location: string): Promise<string> {
    checkLocation(location)
    try {
      await stat(join(location, 'CURRENT'))
      return await changeMark(location)
    } catch (error) {
      throw noLogAt(location, 'look at', error)
    }
  }

  /**
   * Copies the log in `location` into `destination` as it stands now, also while another process
   * has it open: the same consistent copy a snapshot takes (every fact durable when it was taken,
   * each group commit whole or not at all), which is then opened, verified in full (every fact, the
   * digest chain, every index record; see `verify`), closed cleanly and synced to the disk. The copy
   * is a log like any other: `open` it where it is, or, to restore, stop the application and put it in
   * the log's place (see the README's "Backups" for what a restore means for tool effects). Resolves
   * with the copy's `{ events, digest, takenAt }`.
   *
   * `destination` must not exist (its parent must): `LOG_INVALID_ARGUMENT` otherwise, and when
   * `location` holds no log; `LOG_IO` when the copy cannot be written; `LOG_CORRUPT` when the copy
   * fails its checks (the log itself is damaged). On any failure nothing is left at `destination`:
   * the copy is made in a hidden directory beside it (`.NAME.factstate-backup-*`) and renamed to
   * `destination` once verified and synced, so a process killed part-way leaves only that directory
   * (safe to delete), never a `destination` that opens as a log with facts missing.
   * Table files are linked where `destination` is on the log's file system (a copy that survives the
   * log's deletion, not its disk's failure) and copied elsewhere.
   *
   * @example
   * ```ts
   * // Nightly, while the application keeps its log open:
   * const { events, digest } = await EventLog.backup('./.factstate/app', `/backups/app-${Date.now()}`)
   * ```
   */
  static async backup(location: string, destination: string): Promise<{ events: number; digest: string; takenAt: number }> {
    checkLocation(location)
    checkLocation(destination)
    await checkCopySource(location, 'back up')
    await refuseMarkedDamaged(location)
    // A backup inside the log's own directory would go with it (a deleted or replaced log), and be
    // among the files of the log's next snapshots and backups.
    const within = await Promise.all([realpath(location), realpath(dirname(resolve(destination)))]).then(
      ([log, parent]) => parent === log || parent.startsWith(`${log}${sep}`),
      () => false,
    )
    if (within) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `the backup's destination ${destination} is inside the log's own directory ${location}: give a path outside it`, {
        details: { destination: 'inside_log' },
      })
    }
    const notNew = (cause?: unknown) =>
      new FactstateError('LOG_INVALID_ARGUMENT', `the backup's destination ${destination} already exists: give a new path (nothing there is replaced)`, {
        details: { destination: 'exists' },
        ...(cause === undefined ? {} : { cause }),
      })
    try {
      await lstat(destination)
      throw notNew()
    } catch (error) {
      if (isFactstateError(error)) throw error
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENOTDIR') throw new FactstateError('LOG_INVALID_ARGUMENT', `the backup's destination ${destination} has no parent directory: make it first`, { cause: error, details: { destination: 'no_parent' } })
      if (code !== 'ENOENT') throw destinationRefused(destination, error)
    }
    // Made beside the destination and renamed to it only once complete, verified and synced: a
    // process killed part-way (Ctrl-C, a cron job's timeout, a power cut) leaves no directory at
    // `destination` that opens as a log with facts missing, only a hidden `.NAME.factstate-backup-*`.
    let work: string
    try {
      work = await mkdtemp(join(dirname(resolve(destination)), `.${basename(resolve(destination))}.factstate-backup-`))
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENOENT' || code === 'ENOTDIR') throw new FactstateError('LOG_INVALID_ARGUMENT', `the backup's destination ${destination} has no parent directory: make it first`, { cause: error, details: { destination: 'no_parent' } })
      throw destinationRefused(destination, error)
    }
    try {
      await copySnapshot(location, work)
      // Opened as a log of its own: its close records its head (the anchor) and its id filter.
      const copy = await EventLog.#openAt(work, 'sync')
      let result: { events: number; digest: string; takenAt: number }
      try {
        // A copy of a write-ahead log that is only ever appended to is a prefix of it: LevelDB says
        // nothing of a record the copy cut short at its end, so what it reports dropped was damaged in
        // the log itself (a log whose last open found it so is refused above).
        const lost = await walLoss(work)
        if (lost !== undefined) throw damagedLog(lost.why.replace('as it opened the log', 'as it opened the backup\'s copy'), lost.file)
        // The copy says what it is (a log opened from it has gone back to this point: see `restoredFrom`),
        // before its check, which checks this record too.
        // A backup of a log put back from one keeps that one's points too: a session that has not run
        // since the first has not since the second either, and what it did is unknown from the first on.
        const { highWater, digest } = copy.head()
        const takenAt = Date.now()
        const points = [...copy.#backupPoints, { highWater, digest, takenAt }]
        await copy.#db.put(keys.backup, encodeBackupPoints(points), { sync: true })
        result = { ...(await copy.verify()), takenAt }
      } finally {
        await copy.close()
      }
      await syncDirectory(work)
      try {
        // Replaces nothing but an empty directory (made meanwhile): anything else at `destination` refuses it.
        await rename(work, destination)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR') throw notNew(error)
        throw logIo(`the backup cannot be moved to ${destination}: ${(error as Error).message}`, error, { path: destination })
      }
      await syncDirectory(dirname(resolve(destination)), false)
      return result
    } catch (error) {
      await rm(work, { recursive: true, force: true }).catch(() => undefined)
      // The copy's own directory could not be written (its disk full, say): the destination's fault,
      // named as the destination's parent, as one that cannot be made is, not as the log's.
      if (inCopy(error, work)) throw destinationRefused(destination, error.cause ?? error, 'written')
      throw error
    }
  }

  /**
   * `inPlace`: the application's own log, opened where it lives (not a copy a snapshot or a backup
   * made of a live log, whose write-ahead log may end in a record caught half-written by the copy).
   */
  static async #openAt(location: string, durability: Durability, snapshotOf?: string, inPlace = false): Promise<EventLog> {
    const claim = await claimDirectory(location)
    if (inPlace) {
      try {
        await refuseMarkedDamaged(claim.path)
      } catch (error) {
        // A directory the claim made for nothing (no descriptor left to read the marker with) goes again.
        if (claim.made) await rmdir(claim.path).catch(() => undefined)
        claim.release(false)
        throw error
      }
    }
    // A log this open makes: one it fails to make is removed again (see `unmake`). Only where the
    // directory holds nothing of a log yet (at most the lock and info log of an open that failed
    // before it made one): a log that lost its CURRENT is damaged, and its files are evidence.
    const fresh = inPlace && (await readdir(claim.path).then((names) => names.every((name) => FRESH_ENTRY.test(name)), () => false))
    const db: Db = new ClassicLevel<string, Uint8Array>(claim.path, { keyEncoding: 'utf8', valueEncoding: 'view' })
    try {
      await db.open()
    } catch (error) {
      const refused = levelError(error, claim.path)
      if (fresh && !isFactstateError(refused, 'LOG_WRITER_BUSY')) await unmake(claim)
      claim.release(false)
      // LevelDB's own table of the locks this process holds: another thread opened the log between
      // the claim's look at /proc/locks and this open (or there is no /proc/locks). Its refusal
      // closed the LOCK file it opened, which dropped that thread's lock: see the README's LOG_WRITER_BUSY.
      if (isFactstateError(refused, 'LOG_WRITER_BUSY') && /already held by process/.test(causeMessages(error))) throw busyInThisProcess(location, refused.cause)
      throw await withHolder(refused, claim.path)
    }
    const log = new EventLog(db, durability, claim, snapshotOf)
    // Read at once, and the marker written before anything else: LevelDB has already deleted the
    // damaged write-ahead log, and an open that died from here on would leave no trace of the loss.
    let lost: { why: string; file: string } | undefined
    try {
      lost = inPlace ? await walLoss(claim.path) : undefined
      if (lost !== undefined) await markDamaged(claim.path, lost.why)
      // The checks of the tail name a fact missing from the middle of the log: that refusal first.
      await log.#load()
      if (lost !== undefined) throw damagedLog(lost.why, lost.file)
    } catch (error) {
      await db.close().catch(() => undefined)
      await log.#directory?.handle?.close().catch(() => undefined)
      if (fresh) await unmake(claim)
      claim.release(false)
      throw error instanceof FactstateError ? error : levelError(error, claim.path)
    }
    return log
  }

  /**
   * Fills a fresh id filter from the id index. The filter is in place before the index is read, so
   * every id staged from now on is added too, and so is every id staged before and not yet durable
   * (it may become durable after the index is read): none is missed. Until it is complete, appends
   * read the index.
   */
  async #buildIds(): Promise<void> {
    const capacity = Math.max(this.#idsMinimum, 2 * this.#state.head.highWater)
    this.#idsBuilds += 1
    this.#idsReady = false
    if (capacity > ID_FILTER_MAX) {
      this.#ids = undefined
      return
    }
    const filter = new IdFilter(capacity)
    this.#ids = filter
    for (const staging of [this.#inFlight, this.#next?.staging]) {
      if (staging !== undefined) for (const id of staging.ids.keys()) filter.add(id)
    }
    try {
      for await (const key of this.#db.keys({ gte: keys.eventIdLow, lt: keys.eventIdHigh })) {
        if (this.#closed || this.#ids !== filter) return
        filter.add(key.slice(2))
      }
      if (this.#ids === filter) this.#idsReady = true
    } catch {
      // Without the filter every append reads the index, as it would anyway; a failing log fails there.
      if (this.#ids === filter) this.#ids = undefined
    }
  }

  /**
   * Takes up the id filter the last clean close stored (see `ID_FILTER_FILE`) when it covers a
   * prefix of this very log, with the ids of the events after that prefix added. Never fails the
   * open: a filter that cannot be used is left out, and the log reads its index as it would anyway.
   */
  async #loadIds(head: Head): Promise<void> {
    let bytes: Uint8Array
    try {
      const path = join(this.#location, ID_FILTER_FILE)
      // Never more than the largest filter the log makes (ID_FILTER_MAX ids: 32 MiB of bits) and its header.
      if ((await stat(path)).size > 33 * 1024 * 1024) return
      bytes = await readFile(path)
    } catch {
      return
    }
    const stored = parseIdFilter(bytes)
    if (stored === undefined || stored.highWater > head.highWater || head.highWater - stored.highWater > ID_FILTER_CAUGHT_UP) return
    try {
      const { filter, highWater } = stored
      let chain = head.chain
      if (highWater === 0) chain = EMPTY_CHAIN
      else if (highWater < head.highWater) {
        const event = await this.#db.get(keys.event(highWater))
        if (event === undefined) return
        chain = await this.#storedChain(decodeEvent(event, highWater).id, highWater)
      }
      if (!equalBytes(chain, stored.chain)) return
      let seq = highWater + 1
      for await (const event of this.#db.values({ gt: keys.event(highWater), lte: keys.event(head.highWater) })) {
        filter.add(decodeEvent(event, seq).id)
        seq += 1
      }
      if (seq !== head.highWater + 1) return
      this.#idsStored = highWater
      this.#ids = filter
      this.#idsReady = true
      // Built: the filter is made again only when it fills up.
      this.#idsBuild = Promise.resolve()
    } catch {
      // An event that cannot be read here is found by the reads that need it, or by `verify`.
    }
  }

  /**
   * Stores the id filter for the next open (see `ID_FILTER_FILE`), once the log is closed: it holds
   * the ids of every event up to the head (and perhaps some more, as a filter may). Written aside and
   * renamed into place, and not synced: after a power loss the next open finds the previous file, or
   * this one cut or unwritten, which its checksum refuses. A write that fails leaves the previous
   * one, which the next open checks like any other.
   */
  async #saveIds(): Promise<void> {
    const filter = this.#ids
    const { highWater, chain } = this.#state.head
    if (!this.#idsReady || filter === undefined || this.#failed || highWater < this.#idsStoredFrom || highWater === this.#idsStored) return
    const path = join(this.#location, ID_FILTER_FILE)
    if (!(await this.#stillOurDirectory())) return
    try {
      await writeAside(path, serializeIdFilter(filter, highWater, chain), false)
    } catch {
      // The next open reads the id index instead, as it does without a stored filter.
    }
  }

  /** Reads the head, checks the continuity of the tail, and caches the open invocations. */
  async #load(): Promise<void> {
    const format = await this.#db.get(keys.format)
    if (format !== undefined) {
      const found = decodeRecord<unknown>(format, 'format')
      if (typeof found !== 'number' || !Number.isSafeInteger(found)) throw new FactstateError('LOG_CORRUPT', 'the index format record is unreadable')
      if (found > INDEX_FORMAT) {
        throw new FactstateError('LOG_FORMAT_UNSUPPORTED', `the log was written by a newer factstate (index format ${found}; this one reads up to ${INDEX_FORMAT})`, {
          details: { format: found, supported: INDEX_FORMAT },
        })
      }
      this.#format = found
      this.#formatFound = found
    }
    const stored = await this.#db.get(keys.head)
    if (stored === undefined && format === undefined) await this.#refuseForeign()
    const head: Head = stored === undefined ? { highWater: 0, chain: EMPTY_CHAIN } : headRecord(decodeRecord<unknown>(stored, 'head'))
    let expected = head.highWater
    let checked = 0
    for await (const key of this.#db.keys({ gte: keys.eventLow, lt: keys.eventHigh, reverse: true, limit: TAIL_KEYS_CHECKED })) {
      const seq = eventSeq(key)
      if (seq !== expected) {
        throw new FactstateError(
          'LOG_CORRUPT',
          seq > expected ? `event ${seq} lies beyond the recorded high-water ${head.highWater}` : `event ${expected} is missing`,
          { details: { seq: Math.max(seq, expected) } },
        )
      }
      expected -= 1
      checked += 1
    }
    if (checked < TAIL_KEYS_CHECKED && expected !== 0) {
      throw new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
    }
    if (head.highWater > 0) {
      const from = Math.max(1, head.highWater - TAIL_CHAIN_CHECKED + 1)
      let chain: Uint8Array = EMPTY_CHAIN
      if (from > 1) {
        const before = await this.#db.get(keys.event(from - 1))
        const event = decodeEvent(before ?? new Uint8Array(0), from - 1)
        chain = await this.#storedChain(event.id, from - 1)
      }
      const before = chain
      let seq = from
      for await (const bytes of this.#db.values({ gte: keys.event(from), lte: keys.event(head.highWater) })) {
        decodeEvent(bytes, seq)
        chain = chainStep(chain, seq, bytes)
        seq += 1
      }
      if (!equalBytes(chain, head.chain)) {
        const first = await this.#firstUnchained(from, head.highWater, before)
        throw new FactstateError(
          'LOG_CORRUPT',
          first === undefined ? `the digest chain of the last ${head.highWater - from + 1} events does not match the head` : `event ${first} does not match its digest chain`,
          { details: { seq: first ?? head.highWater } },
        )
      }
    }
    let handle: FileHandle | undefined
    try {
      handle = await openFile(this.#location, 'r')
    } catch {
      // A system that cannot open a directory: its device and inode alone are compared.
    }
    const directory = handle ? await handle.stat() : await stat(this.#location)
    this.#directory = { dev: directory.dev, ino: directory.ino, handle }
    await this.#checkAnchor(head)
    const point = await this.#db.get(keys.backup)
    if (point !== undefined) this.#backupPoints = decodeBackupPoints(point, head.highWater)
    this.#state.head = head
    await this.#loadIds(head)
    this.#recencyMarked = (await this.#db.get(keys.recencyIndexed)) !== undefined
    if (!this.#recencyMarked && head.highWater > 0) await this.#indexRecency()
    const open: string[] = []
    for await (const key of this.#db.keys({ gte: keys.openLow, lt: keys.openHigh })) open.push(key.slice(2))
    await this.#catchUp(open)
    this.#reservationsMarked = (await this.#db.get(keys.reservationsIndexed)) !== undefined
    if (!this.#reservationsMarked && head.highWater > 0) await this.#indexReservations()
  }

  /**
   * A log without a head has no facts, and so no records at all (every record is written in a batch
   * with the head). A LevelDB directory holding keys but neither a head nor an event is another
   * program's database: it is refused rather than opened as an empty log and written into.
   */
  async #refuseForeign(): Promise<void> {
    let first: string | undefined
    for await (const key of this.#db.keys({ limit: 1 })) first = key
    if (first === undefined) return
    for await (const _ of this.#db.keys({ gte: keys.eventLow, lt: keys.eventHigh, limit: 1 })) return
    // A factstate log that lost its facts and head (a damaged table) still has the anchor of its last
    // close (checked next, against the head) or factstate's keys: damaged, not another program's.
    try {
      await stat(join(this.#location, ANCHOR_FILE))
      return
    } catch {
      // No anchor.
    }
    if (FACTSTATE_KEY.test(first)) {
      throw new FactstateError('LOG_CORRUPT', `the log holds index records (${JSON.stringify(first.slice(0, 40))}, …) but neither its head nor any fact: its facts were lost`, {
        details: { seq: 1 },
      })
    }
    const shown = JSON.stringify(first.length > 40 ? `${first.slice(0, 40)}…` : first)
    throw new FactstateError('LOG_INVALID_ARGUMENT', `${this.#location} holds a LevelDB database that is not a factstate log (it has no head and no facts; its first key is ${shown})`, {
      details: { notALog: true },
    })
  }

  /**
   * A log written before seals reserved their claims and successors: each pending seal (a paused turn
   * of a session record) gets those records now, once, so a new seal or run cannot take what an old
   * seal's successor needs.
   */
  async #indexReservations(): Promise<void> {
    const batch = this.#db.batch()
    const seen = new Set<string>()
    for await (const [key, value] of this.#db.iterator({ gte: keys.sessionLow, lt: keys.sessionHigh })) {
      const session = indexRecord<SessionRecord>(value, `session ${key.slice(2)}`, 'session')
      for (const { intent, invocationId } of session.paused) {
        for (const key of [keys.sealedClaim(intent.claimId), keys.sealedSuccessor(intent.successorInvocationId)]) {
          if (seen.has(key)) continue
          seen.add(key)
          batch.put(key, encodeRecord(invocationId))
        }
      }
    }
    batch.put(keys.reservationsIndexed, encodeRecord(1))
    await batch.write({ sync: this.#durability === 'sync' })
    this.#reservationsMarked = true
  }

  /**
   * A log written before sessions were indexed by their latest run (index format 4 and earlier, up to
   * 0.8.0): each session gets its `keys.recent` entry and its record's `latestOpenedSeq`, from one pass
   * over the invocation records (each knows its session and the seq it opened at), written in batches
   * of `RECENCY_BUILD_CHUNK` sessions (a log of a million sessions would otherwise hold one batch of
   * ~0.6 GB), then the marker and the index format in a last synced batch, so that the releases
   * before this one, which would not keep the index, refuse the log from then on. Until that last
   * batch the log has no marker: an open after a crash midway (or a release before this one, which
   * reads format 4) finds none, and the next open of this one builds the index again from scratch,
   * the entries written meanwhile deleted first. A snapshot builds it in its own copy. A record that
   * cannot be read is passed over: `verify()` names it (and the entry it then lacks).
   */
  async #indexRecency(): Promise<void> {
    const latest = new Map<string, number>()
    for await (const value of this.#db.values({ gte: keys.invocation(''), lt: 'n"' })) {
      let record: StoredInvocationRecord
      try {
        record = indexRecord<StoredInvocationRecord>(value, 'invocation', 'invocation')
      } catch {
        continue
      }
      const { sessionId } = record.invocation
      if (typeof record.openedSeq === 'number' && record.openedSeq > (latest.get(sessionId) ?? 0)) latest.set(sessionId, record.openedSeq)
    }
    let batch = this.#db.batch()
    let pending = 0
    const flushed = async (added: number) => {
      pending += added
      if (pending < RECENCY_BUILD_CHUNK) return
      await batch.write()
      batch = this.#db.batch()
      pending = 0
    }
    // None in a log of an earlier version; what an interrupted build left is deleted, each before any entry
    // is put with its key (LevelDB applies a batch's operations, and batches, in order).
    for await (const key of this.#db.keys({ gte: keys.recentLow, lt: keys.recentHigh })) {
      batch.del(key)
      await flushed(1)
    }
    for await (const [key, value] of this.#db.iterator({ gte: keys.sessionLow, lt: keys.sessionHigh })) {
      const sessionId = key.slice(keys.sessionLow.length)
      const seq = latest.get(sessionId)
      if (seq === undefined) continue
      let session: SessionRecord
      try {
        session = indexRecord<SessionRecord>(value, `session ${sessionId}`, 'session')
      } catch {
        continue
      }
      batch.put(key, encodeRecord({ ...session, latestOpenedSeq: seq }))
      batch.put(keys.recent(seq), encodeRecord(sessionId))
      await flushed(1)
    }
    // Synced: LevelDB's write-ahead log is one file, so the batches before it are on disk with it.
    batch.put(keys.recencyIndexed, encodeRecord(1))
    const format = Math.max(this.#format, BASE_FORMAT)
    batch.put(keys.format, encodeRecord(format))
    await batch.write({ sync: this.#durability === 'sync' })
    this.#recencyMarked = true
    this.#format = format
    // Records read before the batch lack the seq: read them again.
    this.#state.sessions.clear()
  }

  /**
   * Caches the open invocations' records, brought up to date. They are stored when an invocation
   * opens and when it ends, not with every fact, so the facts after each stored record are applied
   * again, exactly as their appends applied them. Those facts are found by reading the tail of the
   * log once when it is short (at most `CATCH_UP_SCANNED` events, a bound that does not grow with
   * the log), and through each invocation's own index otherwise.
   */
  async #catchUp(openIds: string[]): Promise<void> {
    const head = this.#state.head.highWater
    const scanFrom = Math.max(1, head - CATCH_UP_SCANNED + 1)
    const behind = new Map<string, InvocationRecord>()
    const far: string[] = []
    for (const invocationId of openIds) {
      const record = this.#state.invocationNow(invocationId)
      if (record === undefined) throw new FactstateError('LOG_CORRUPT', `open invocation ${invocationId} has no record`)
      const run = this.#state.runNow(record.invocation.sessionId, record.invocation.runId)
      if (run === undefined || run.invocationId !== invocationId) {
        throw new FactstateError('LOG_CORRUPT', `open invocation ${invocationId} has no run record`)
      }
      // Its session's record is read when it ends (by the engine or by recovery): read it now, with the rest.
      this.#state.sessionNow(record.invocation.sessionId)
      if (record.lastSeq >= head) continue
      if (record.lastSeq >= scanFrom) behind.set(invocationId, record)
      else far.push(invocationId)
    }
    if (behind.size > 0 && !(await this.#catchUpByScan(behind))) far.push(...behind.keys())
    let next = 0
    const worker = async () => {
      while (next < far.length) await this.#catchUpByIndex(far[next++] as string)
    }
    await Promise.all(Array.from({ length: Math.min(LOAD_CONCURRENCY, far.length) }, worker))
  }

  /** One pass over the log's tail; false (nothing cached) when an event there cannot even be read, so the index decides. */
  async #catchUpByScan(behind: Map<string, InvocationRecord>): Promise<boolean> {
    const head = this.#state.head.highWater
    let seq = head
    for (const record of behind.values()) seq = Math.min(seq, record.lastSeq + 1)
    for await (const bytes of this.#db.values({ gte: keys.event(seq), lte: keys.event(head) })) {
      const invocationId = peekInvocationId(bytes)
      if (invocationId === undefined) return false
      const record = behind.get(invocationId)
      if (record !== undefined && seq > record.lastSeq) behind.set(invocationId, this.#replay(record, decodeEvent(bytes, seq), seq))
      seq += 1
    }
    if (seq !== head + 1) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
    for (const [invocationId, record] of behind) this.#state.invocations.set(invocationId, record)
    return true
  }

  /** Brings one open invocation up to date from the facts its own index lists after its stored record. */
  async #catchUpByIndex(invocationId: string): Promise<void> {
    let record = this.#state.invocationNow(invocationId) as InvocationRecord
    const prefixLength = keys.byInvocationLow(invocationId).length
    const seqs: number[] = []
    for await (const key of this.#db.keys({ gt: keys.byInvocation(invocationId, record.lastSeq), lt: keys.byInvocationHigh(invocationId) })) {
      seqs.push(Number.parseInt(key.slice(prefixLength), 16))
    }
    if (seqs.length === 0) return
    const values = await this.#db.getMany(seqs.map((seq) => keys.event(seq)))
    seqs.forEach((seq, index) => {
      const bytes = values[index]
      if (bytes === undefined || seq > this.#state.head.highWater) {
        throw new FactstateError('LOG_CORRUPT', `event ${seq} of open invocation ${invocationId} is missing`, { details: { seq } })
      }
      record = this.#replay(record, decodeEvent(bytes, seq), seq)
    })
    this.#state.invocations.set(invocationId, record)
  }

  #replay(record: InvocationRecord, event: RuntimeEvent, seq: number): InvocationRecord {
    try {
      // Stored facts are checked by the rules every version enforced: a log an earlier one accepted still opens.
      return applyToInvocation(record, event, seq, false)
    } catch (cause) {
      throw new FactstateError('LOG_CORRUPT', `event ${seq} contradicts the record of open invocation ${record.invocation.invocationId}`, {
        cause,
        details: { seq },
      })
    }
  }

  /** The log must still hold, byte for byte, the head its last clean close recorded (an older anchor is a lower bound). */
  async #checkAnchor(head: Head): Promise<void> {
    let text: string
    try {
      text = await readFile(join(this.#location, ANCHOR_FILE), 'utf8')
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return
      throw logIo(`the head anchor cannot be read: ${(error as Error).message}`, error, { path: join(this.#location, ANCHOR_FILE) })
    }
    const match = ANCHOR_PATTERN.exec(text)
    if (!match) throw new FactstateError('LOG_CORRUPT', 'the head anchor of the last clean close is unreadable')
    const anchored = Number(match[1])
    if (anchored > head.highWater) {
      const lost = new FactstateError(
        'LOG_CORRUPT',
        `the log held ${anchored} events when its head was last recorded, now ${head.highWater}; restore the directory from a backup (keep the damaged one as evidence), or delete ${ANCHOR_FILE} (and ${DAMAGED_FILE}, if there) to go on without them`,
        {
          details: { seq: head.highWater + 1 },
        },
      )
      // A snapshot reads what is left, as it does of a copy whose write-ahead log lost facts: its
      // verify() refuses it (see `openSnapshot`). An open in place never goes on short of them.
      if (this.#snapshotOf === undefined) throw lost
      this.#damage = lost
      return
    }
    if (anchored === 0) return
    if (anchored === head.highWater && Buffer.from(head.chain).toString('hex') === match[2]) this.#anchoredAt = anchored
    let chain = head.chain
    if (anchored < head.highWater) {
      const stored = await this.#db.get(keys.event(anchored))
      if (stored === undefined) throw new FactstateError('LOG_CORRUPT', `event ${anchored} is missing`, { details: { seq: anchored } })
      chain = await this.#storedChain(decodeEvent(stored, anchored).id, anchored)
    }
    if (Buffer.from(chain).toString('hex') !== match[2]) {
      throw new FactstateError('LOG_CORRUPT', `the digest chain at event ${anchored} differs from the one recorded with the head`, {
        details: { seq: anchored },
      })
    }
  }

  /**
   * Refreshes the anchor `ANCHOR_REFRESH_MS` after a group commit, once for any number of commits
   * meanwhile, with the head durable then. Only under `sync` durability: under `os` the facts a head
   * counts may not be on the disk yet, and an anchor must never count more than is.
   */
  #scheduleAnchor(): void {
    if (this.#durability !== 'sync' || this.#anchorTimer !== undefined || this.#closed) return
    this.#anchorTimer = setTimeout(() => {
      this.#anchorTimer = undefined
      if (this.#closed || this.#failed) return
      // A refresh that fails is not reported: the next one, or the close, writes the anchor again.
      this.#anchoring = this.#anchoring.then(async () => void (await this.#writeAnchor()))
    }, ANCHOR_REFRESH_MS)
    // A log left open does not keep the process alive for its anchor.
    this.#anchorTimer.unref()
  }

  /**
   * Writes the head anchor: the head as it is now, which counts only durable facts (it is absorbed
   * after its group's write). Answers the error of a write that failed (a close reports it).
   */
  async #writeAnchor(): Promise<unknown> {
    const path = join(this.#location, ANCHOR_FILE)
    const { highWater, chain } = this.#state.head
    // An anchor of no events checks nothing: an empty log gets none.
    if (highWater === 0 || highWater === this.#anchoredAt || !(await this.#stillOurDirectory())) return undefined
    try {
      await writeAside(path, [Buffer.from(`factstate-head v1 ${highWater} ${Buffer.from(chain).toString('hex')}\n`)], true)
      this.#anchoredAt = highWater
      return undefined
    } catch (error) {
      // Without a fresh anchor a later open checks less, never wrongly: an older anchor is a lower bound.
      return error
    }
  }

  /**
   * `LOG_IO` when the log's location no longer names the directory it opened (removed, moved, or
   * replaced by another); undefined while it does, or when that cannot be told (a location that
   * cannot be looked at for another reason). One `stat` of the location: a few µs a group commit.
   */
  #directoryMoved(): FactstateError | undefined {
    const opened = this.#directory
    if (opened === undefined) return undefined
    let now: { dev: number; ino: number } | undefined
    try {
      now = statSync(this.#location, { throwIfNoEntry: false })
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code !== 'ENOTDIR') return undefined
    }
    if (now !== undefined && now.dev === opened.dev && now.ino === opened.ino) return undefined
    const what = now === undefined ? 'was removed (or moved away)' : 'is now another directory'
    return logIo(`the log's directory ${this.#location} ${what} while the log was open: what was written since is in no directory of that name, so it was not acknowledged; the log refuses everything but close() from here on`, undefined, {
      reason: 'directory_gone',
      path: this.#location,
    })
  }

  /**
   * Whether the log's location is still the directory it opened. Another process may have removed
   * it once this one stopped using LevelDB's files (LevelDB's lock is on a file, not on the name) and
   * put another log there: that log must not get this one's anchor or id filter.
   */
  async #stillOurDirectory(): Promise<boolean> {
    try {
      const now = await stat(this.#location)
      return this.#directory !== undefined && now.dev === this.#directory.dev && now.ino === this.#directory.ino
    } catch {
      return false
    }
  }

  /**
   * Once the tail's chain disagrees with the head (on open, so read again only then): the first fact
   * from `from` to `to` whose recomputed chain step differs from the one its id record holds, or
   * whose id record is missing or damaged under the id its bytes now hold, i.e. the fact that was
   * changed (the mismatch proves something changed; an id record alone would not break the chain).
   * Undefined when every step agrees (then it is the head that is damaged).
   */
  async #firstUnchained(from: number, to: number, before: Uint8Array): Promise<number | undefined> {
    let chain = before
    let seq = from
    for await (const bytes of this.#db.values({ gte: keys.event(from), lte: keys.event(to) })) {
      chain = chainStep(chain, seq, bytes)
      let id: string
      try {
        id = decodeEvent(bytes, seq).id
      } catch {
        return seq
      }
      if (this.#idRecordProblem(id, seq, chain, await this.#db.get(keys.eventId(id))) !== undefined) return seq
      seq += 1
    }
    return undefined
  }

  /**
   * What is wrong with the id record `stored` of the fact `id` at `seq`, whose chain is `chain`:
   * missing, unreadable or naming another seq (the index record is named: `details.index` 'id'), or
   * holding another chain (the fact's bytes, or the record's chain, changed: the seq is named).
   */
  #idRecordProblem(id: string, seq: number, chain: Uint8Array, stored: Uint8Array | undefined): FactstateError | undefined {
    const indexed = this.#idRecordChain(id, seq, stored)
    if (indexed instanceof FactstateError) return indexed
    // Either the fact's bytes or the record's chain changed: both are named (a caller that finds the
    // chain going on past it, the fact intact, throws this as the record's damage).
    if (!equalBytes(indexed, chain)) {
      const key = keys.eventId(id)
      return new FactstateError('LOG_CORRUPT', `event ${seq} does not match its digest chain as its id record ${shown(key)} holds it (the fact or that record was changed)`, { details: { seq, key } })
    }
    return undefined
  }

  /**
   * The chain the id record `stored` of the fact `id` at `seq` holds, or what is wrong with the record
   * (missing, unreadable or naming another seq; `details.index` 'id' names it).
   */
  #idRecordChain(id: string, seq: number, stored: Uint8Array | undefined): Uint8Array | FactstateError {
    const key = keys.eventId(id)
    const named = (what: string) => new FactstateError('LOG_CORRUPT', `the id record of event ${seq} (${key}) ${what}`, { details: { index: 'id', key, seq } })
    if (stored === undefined) return named('is missing')
    let indexed: [number, Uint8Array]
    try {
      indexed = indexRecord<[number, Uint8Array]>(stored, `id ${id}`, 'id')
    } catch {
      return named('is unreadable')
    }
    if (indexed[0] !== seq) return named(`names event ${String(indexed[0])}`)
    return new Uint8Array(indexed[1])
  }

  /** The chain stored with the fact `eventId` at `seq`, from its id record; LOG_CORRUPT naming the record when it is wrong. */
  async #storedChain(eventId: string, seq: number): Promise<Uint8Array> {
    const chain = this.#idRecordChain(eventId, seq, await this.#db.get(keys.eventId(eventId)))
    if (chain instanceof FactstateError) throw chain
    return chain
  }

  #assertOpen(): void {
    if (this.#closed) throw new FactstateError('LOG_CLOSED', 'the log is closed')
    if (this.#failed) throw this.#failed
  }

  /**
   * Appends one event and resolves with its seq once it is durable. Idempotent by `event.id`:
   * the same id with the same bytes resolves with the original seq and writes nothing; with other
   * bytes it is `LOG_CONFLICT`.
   */
  append(event: RuntimeEvent): Promise<number> {
    return this.#enqueue([event], undefined, true, true) as Promise<number>
  }

  /** Appends events atomically: all of them become durable together, or none is written. */
  appendAll(events: RuntimeEvent[]): Promise<number[]> {
    let copy: RuntimeEvent[]
    try {
      this.#assertOpen()
      if (!Array.isArray(events)) throw new FactstateError('LOG_INVALID_ARGUMENT', 'appendAll takes a non-empty array of events')
      // Read once, here: a proxy whose traps throw is this call's refusal, and later changes to the array do not reach the append.
      try {
        // Item by item, not Array.from: a sparse array of a hundred million holes costs the caller
        // nothing to make, and is refused at its first hole instead of copied.
        copy = []
        for (let index = 0, length = events.length; index < length; index += 1) {
          const event = events[index]
          if (event === undefined) {
            throw new FactstateError('LOG_INVALID_EVENT', `the event cannot be read: appendAll's event ${index} is ${index in events ? 'undefined' : 'a hole in the array'}`, { details: { fields: [] } })
          }
          copy.push(event)
        }
      } catch (error) {
        if (error instanceof FactstateError) throw error
        throw new FactstateError('LOG_INVALID_ARGUMENT', `appendAll could not read its array of events: ${messageOf(error)}`, { cause: error })
      }
      if (copy.length === 0) throw new FactstateError('LOG_INVALID_ARGUMENT', 'appendAll takes a non-empty array of events')
    } catch (error) {
      return Promise.reject(error)
    }
    return this.#enqueue(copy, undefined, false, true) as Promise<number[]>
  }

  /** `owned`: `events` is an array made for this call, so the validated copies may replace its items. */
  #enqueue(events: RuntimeEvent[], precondition: Precondition | undefined, single: boolean, owned = false, dryRun = false): Promise<number | number[]> {
    let validated: RuntimeEvent[]
    // Each source to verify with the id of the event that names it (a refusal names that event).
    let sources: { boundary: RunBoundary; eventId: string }[] | undefined
    try {
      this.#assertOpen()
      if (this.#snapshotOf !== undefined) {
        throw new FactstateError('LOG_READ_ONLY', `this is a read-only snapshot of the log at ${this.#snapshotOf}: append to the log itself, in the process that has it open`)
      }
      validated = owned ? events : new Array<RuntimeEvent>(events.length)
      for (let index = 0; index < events.length; index += 1) {
        const event = validateEvent(events[index])
        checkFactRules(event)
        validated[index] = event
        // A source in another session is not looked for: the integrity rules refuse it as staged
        // (`checkSource`), pointing at the continuation's own session, whose runs hold the way out.
        const input = event.fact.type === 'invocation.opened' ? event.fact.input : undefined
        if (input !== undefined && input.kind !== 'message' && input.source.invocation.sessionId === event.invocation.sessionId && !this.#verifiedSources.has(boundaryKey(input.source))) {
          ;(sources ??= []).push({ boundary: input.source, eventId: event.id })
        }
      }
    } catch (error) {
      return Promise.reject(error)
    }
    // A run opened from a source names its boundary by digest: one the log has not verified yet is
    // verified first (the engine's admission has, through `lineage`), so a direct append cannot
    // record a source whose digest the stored facts do not reproduce.
    if (sources === undefined && this.#ordered === undefined) return this.#enqueueValidated(validated, precondition, single, dryRun)
    // Appends are staged in the order they were made: while one waits for its sources to be
    // verified, later ones wait behind it (a pipelined `append(opened)`, `append(requested)` stays in order).
    const checked = sources
    const before = this.#ordered ?? Promise.resolve()
    const staged = before
      .then(() => (checked === undefined ? undefined : this.#verifySources(checked)))
      .then(
        () => {
          // Made before any close, it is written: a close waits for these (see `#shutdown`).
          if (this.#failed) throw this.#failed
          // Wrapped: `staged` settles once the append is queued, not once it is durable.
          return { appended: this.#enqueueValidated(validated, precondition, single, dryRun) }
        },
        (error: unknown) => {
          throw error instanceof FactstateError && error.code === 'RUN_SOURCE_MISMATCH' && validated.some((event) => event.fact.type === 'invocation.opened' && event.fact.input.kind === 'handoff')
            ? new FactstateError('HANDOFF_MISMATCH', `the handoff source does not match the log: ${messageWithoutCode(error)}`, { cause: error, details: { field: 'source' } })
            : error
        },
      )
    // The tail waits until this append is queued (or refused), whatever its outcome.
    const tail: Promise<void> = staged.then(noop, noop)
    this.#ordered = tail
    void tail.then(() => {
      if (this.#ordered === tail) this.#ordered = undefined
    })
    return staged.then(({ appended }) => appended)
  }

  /**
   * Verifies a queued append's sources against the durable facts. A source whose facts were appended
   * before it and are not durable yet (a pipelined `append(ended)`, `append(opened)`) is verified
   * again once every earlier append is durable or refused, as if the calls had been awaited in turn.
   */
  async #verifySources(sources: { boundary: RunBoundary; eventId: string }[]): Promise<void> {
    const ahead = this.#queued
    // Read before the check: the check reads a snapshot taken as it starts, so appends that settle
    // while it reads are not in it, and it must then be made again.
    const settled = this.#settledThrough
    // A refusal names the appended event whose source it is, as the integrity rules' refusals do.
    const verify = () =>
      Promise.all(
        sources.map(({ boundary, eventId }) =>
          this.#lineage(boundary, true).catch((error: unknown) => {
            if (!isFactstateError(error, 'RUN_SOURCE_MISMATCH') || error.details === undefined) throw error
            throw new FactstateError('RUN_SOURCE_MISMATCH', messageWithoutCode(error), { cause: error.cause, details: { ...error.details, eventId } })
          }),
        ),
      )
    try {
      await verify()
    } catch (error) {
      if (!(error instanceof FactstateError && error.code === 'RUN_SOURCE_MISMATCH') || ahead <= settled) throw error
      await this.#settled(ahead)
      await verify()
    }
  }

  #enqueueValidated(validated: RuntimeEvent[], precondition: Precondition | undefined, single: boolean, dryRun = false): Promise<number | number[]> {
    // Started here, never while an entry is half staged: a new filter gets the ids of the stagings
    // in flight, and a scratch staging's would be missed. A dry run appends nothing.
    if (this.#idsBuild === undefined ? (this.#appended += dryRun ? 0 : validated.length) >= ID_FILTER_AFTER : this.#idsReady && this.#ids?.full) {
      this.#idsBuild = this.#buildIds()
    }
    const entry = new PendingEntry(validated, precondition, single, ++this.#queued, dryRun)
    const promise = new Promise<number | number[]>((resolve, reject) => {
      entry.resolve = resolve
      entry.reject = reject
    })
    this.#pending.push(entry)
    this.#pendingEvents += validated.length
    this.#wakeUp()
    this.#flushing ??= this.#flush()
    return promise
  }

  /** Every append up to `through` (an ordinal) is durable or refused: wakes those waiting for it. */
  #settle(through: number): void {
    if (through <= this.#settledThrough) return
    this.#settledThrough = through
    if (this.#settleWaiters.length === 0) return
    const waiting = this.#settleWaiters
    this.#settleWaiters = []
    for (const waiter of waiting) {
      if (waiter.through <= through) waiter.resolve()
      else this.#settleWaiters.push(waiter)
    }
  }

  /** Resolves once every append up to `through` (an ordinal) is durable or refused. */
  #settled(through: number): Promise<void> {
    if (through <= this.#settledThrough) return Promise.resolve()
    return new Promise((resolve) => this.#settleWaiters.push({ through, resolve }))
  }

  #wakeUp(): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }

  /**
   * Stages appends as they arrive and writes them in groups, one synced batch at a time. While a
   * batch is being written, the next group is staged on top of it (validation, encoding, hashing
   * and the integrity rules overlap the disk's sync) and is written as soon as the disk is free.
   */
  async #flush(): Promise<void> {
    try {
      // Let every append issued in this turn join the first group.
      await new Promise<void>((resolve) => setImmediate(resolve))
      for (;;) {
        const limit = this.#writing ? MAX_GROUP : this.#pendingEvents > SPLIT_ABOVE ? Math.ceil(this.#pendingEvents / 2) : MAX_GROUP
        while (this.#pending.length > 0 && (this.#next?.events ?? 0) < limit) {
          const entry = this.#pending.shift() as PendingEntry
          this.#pendingEvents -= entry.events.length
          const staged = this.#stageEntry(entry)
          if (staged) await staged
        }
        if (!this.#writing && this.#next !== undefined) {
          const batch = this.#next
          this.#next = undefined
          void this.#commit(batch)
          continue
        }
        if (!this.#writing && this.#pending.length === 0) return
        await new Promise<void>((resolve) => {
          this.#wake = resolve
        })
      }
    } finally {
      this.#flushing = undefined
    }
  }

  /** Stages one entry on top of everything staged before it; a refusal rejects that entry alone. */
  #stageEntry(entry: PendingEntry): Promise<void> | undefined {
    if (this.#failed) {
      entry.reject(this.#failed)
      // A failed log writes nothing more: whatever came before this entry is refused or was durable.
      this.#settle(entry.ordinal)
      return undefined
    }
    const batch = (this.#next ??= { staging: new Staging(this.#inFlight, this.#state), accepted: [], events: 0, writes: undefined, put: 0, last: 0 })
    batch.last = entry.ordinal
    const { precondition } = entry
    if (precondition === undefined && entry.events.length === 1 && !entry.dryRun) {
      // One event stages completely or throws before it changes anything: no scratch staging needed.
      try {
        const seq = this.#stageEvent(batch.staging, entry.events[0] as RuntimeEvent)
        entry.result = entry.single ? seq : [seq]
        batch.accepted.push(entry)
        batch.events += 1
      } catch (error) {
        entry.reject(this.#readFailure(error))
        return undefined
      }
      this.#putStaged(batch)
      return undefined
    }
    const local = new Staging(batch.staging, this.#state, true)
    const stage = () => {
      const seqs = entry.events.map((event) => this.#stageEvent(local, event))
      // A dry run (`checkAppend`) stops here: every rule applied, the scratch staging dropped. Its
      // ordinal still settles with the group's (`batch.last`), after every append staged before it.
      if (entry.dryRun) {
        entry.resolve((entry.single ? seqs[0] : seqs) as number & number[])
        return
      }
      local.mergeInto(batch.staging)
      entry.result = entry.single ? (seqs[0] as number) : seqs
      batch.accepted.push(entry)
      batch.events += entry.events.length
      this.#putStaged(batch)
    }
    if (precondition === undefined) {
      try {
        stage()
      } catch (error) {
        entry.reject(this.#readFailure(error))
      }
      return undefined
    }
    return (async () => {
      try {
        await precondition(local)
        stage()
      } catch (error) {
        entry.reject(this.#readFailure(error))
      }
    })()
  }

  /** Writes one staged batch, makes it the committed state and resolves its callers. Never rejects. */
  async #commit(batch: Batch): Promise<void> {
    const { staging, accepted } = batch
    try {
      // Whatever it was staged on is durable and absorbed by now.
      staging.parent = undefined
      // Normally a no-op: every accepted entry's records were put as it was staged.
      this.#putStaged(batch)
      if (this.#failed) {
        void batch.writes?.close()
        for (const entry of accepted) entry.reject(this.#failed)
        return
      }
      if (staging.events.length > 0) {
        this.#inFlight = staging
        this.#writing = true
        try {
          await this.#write(batch)
          // LevelDB writes on through the files it has open when the directory is removed (or moved)
          // under it: the group is on the disk, but in no directory the log's location names, and the
          // next open there finds none of it. Not acknowledged, then: the log fails.
          const moved = this.#directoryMoved()
          if (moved !== undefined) throw moved
        } catch (error) {
          this.#failed = error instanceof FactstateError ? error : levelError(error, this.#location)
          for (const entry of accepted) entry.reject(this.#failed)
          // Nothing more becomes durable: followers waiting for the next event end with the failure.
          for (const follower of this.#followers) follower.wake()
          return
        } finally {
          this.#inFlight = undefined
          this.#writing = false
          // The loop resumes before the callers below: the group staged meanwhile goes to the disk first.
          this.#wakeUp()
        }
        this.#state.absorb(staging)
        this.#format = Math.max(this.#format, staging.format)
        if (this.#children !== undefined || this.#childrenSince !== undefined) this.#noteChildren(staging.events)
        this.#reservationsMarked = true
        this.#recencyMarked = true
        this.#scheduleAnchor()
      }
      for (const entry of accepted) entry.resolve(entry.result as number & number[])
      if (staging.events.length > 0) for (const follower of this.#followers) follower.take(staging.events)
      if (staging.events.length > 0 && this.#listeners.size > 0) {
        const stored = staging.events.map(({ seq, event }) => ({ seq, event }))
        for (const listener of this.#listeners) {
          try {
            listener(stored)
          } catch {
            // A listener's failure is its own: it must never fail an append that is already durable.
          }
        }
      }
    } finally {
      // Every append before the last one staged here is durable or refused by now.
      this.#settle(batch.last)
    }
  }

  /** Applies one event to `local`; returns its seq (the original one for an idempotent repeat). */
  #stageEvent(local: Staging, event: RuntimeEvent): number {
    // `event` is what `validateEvent` returned (see `#enqueue`).
    const bytes = encodeValidatedEvent(event)
    const staged = local.stagedId(event.id)
    if (staged) {
      if (equalBytes(staged.bytes, bytes)) return staged.seq
      // Within one call there is no seq to name: the call is refused whole, and nothing of it is written.
      if (local.scratch && local.ids.get(event.id) === staged) {
        throw new FactstateError('LOG_CONFLICT', `event id ${event.id} appears twice in one call, with different content`, { details: { eventId: event.id } })
      }
      throw new FactstateError('LOG_CONFLICT', `event id ${event.id} is already used by different content`, { details: { seq: staged.seq } })
    }
    // Added now, even if the event is then refused: the filter may only over-report an id.
    const fresh = this.#ids?.add(event.id) === true
    const indexed = this.#idsReady && fresh ? undefined : this.#db.getSync(keys.eventId(event.id))
    if (indexed !== undefined) {
      const [seq] = indexRecord<[number, Uint8Array]>(indexed, `id ${event.id}`, 'id')
      const stored = this.#db.getSync(keys.event(seq))
      if (stored !== undefined && equalBytes(stored, bytes)) return seq
      throw new FactstateError('LOG_CONFLICT', `event id ${event.id} is already used by different content`, { details: { seq } })
    }
    const { invocation } = event
    const before = local.invocationNow(invocation.invocationId)
    const record = applyToInvocation(before, event, local.head.highWater + 1)
    // The invocation record ties every later fact to the run it opened in (applyToInvocation
    // refuses another run), so only an opening fact needs the run's own record.
    let run: RunRecord | undefined
    let claim: string | undefined
    if (event.fact.type === 'invocation.opened') {
      const taken = local.runNow(invocation.sessionId, invocation.runId)
      if (taken !== undefined) {
        throw new FactstateError('LOG_REJECTED_FACT', `run ${invocation.sessionId}/${invocation.runId} already has invocation ${taken.invocationId}`, {
          details: { eventId: event.id },
        })
      }
      const { input } = event.fact
      if (input.kind === 'handoff') {
        claim = input.pause.intent.claimId
        const user = local.claimNow(claim)
        if (user !== undefined) {
          throw new FactstateError('HANDOFF_CLAIMED', `claim ${claim} was used by ${user}`, { details: { eventId: event.id, claimId: claim, claimedBy: user } })
        }
        const sealer = local.reservedNow(keys.sealedClaim(claim))
        if (sealer !== undefined && sealer !== input.source.invocation.invocationId) {
          throw new FactstateError('HANDOFF_CLAIMED', `claim ${claim} belongs to the seal of ${sealer}`, { details: { eventId: event.id, claimId: claim, sealedBy: sealer } })
        }
      }
      if (input.kind !== 'message') checkSource(local, event, input)
      // An invocation id a pending seal names for its successor is that successor's alone.
      const reservedBy = local.reservedNow(keys.sealedSuccessor(invocation.invocationId))
      if (reservedBy !== undefined && !(input.kind === 'handoff' && input.source.invocation.invocationId === reservedBy)) {
        const message = `invocation id ${invocation.invocationId} is reserved for the successor of ${reservedBy}`
        throw input.kind === 'handoff'
          ? new FactstateError('HANDOFF_MISMATCH', message, { details: { eventId: event.id, field: 'invocation' } })
          : new FactstateError('LOG_REJECTED_FACT', message, { details: { eventId: event.id, invocationId: invocation.invocationId } })
      }
      const source = input.kind === 'message' ? undefined : input.source
      run = {
        invocationId: invocation.invocationId,
        ...(source ? { source: { runId: source.invocation.runId, highWater: source.highWater, digest: source.digest } } : {}),
        parentOperationId: parentOperationIdOf(input),
      }
    }
    // A seal reserves its claim and its successor's invocation id (below), and is refused when its
    // successor could never be admitted.
    let sealed: HandoffIntent | undefined
    if (event.fact.type === 'invocation.ended' && event.fact.outcome.status === 'handoff_paused') {
      sealed = event.fact.outcome.pause.intent
      const blocked = local.successorBlockedNow(sealed, invocation.invocationId, invocation.sessionId)
      if (blocked) throw successorBlockedError(blocked, event.id)
    }
    const boundary = event.fact.type === 'invocation.opened' || event.fact.type === 'invocation.ended'
    const sessionBefore = boundary ? local.sessionNow(invocation.sessionId) : undefined
    const session = sessionBefore === undefined ? undefined : applyToSession(sessionBefore, record, event)
    // Every check and read is done: from here on nothing throws, so a refused event leaves `local` untouched.
    const seq = local.head.highWater + 1
    const idRecord = chainedIdRecord(local.head.chain, seq, bytes)
    // A plain view of the record's last 32 bytes (`subarray` of a Buffer costs several times more).
    const chain = new Uint8Array(idRecord.buffer, idRecord.byteOffset + idRecord.length - CHAIN_BYTES, CHAIN_BYTES)
    // The head object is this staging's own copy (see the constructor).
    local.head.highWater = seq
    local.head.chain = chain
    local.invocations.set(invocation.invocationId, record)
    if (run !== undefined) {
      local.runs.set(keys.run(invocation.sessionId, invocation.runId), run)
      local.latestRuns.set(invocation.sessionId, { runId: invocation.runId, invocationId: invocation.invocationId })
      // The session moves to the front of the recency index: its entry at its previous run's seq goes.
      const previous = sessionBefore?.latestOpenedSeq
      if (previous !== undefined) local.recent.set(keys.recent(previous), null)
      local.recent.set(keys.recent(seq), invocation.sessionId)
    }
    if (claim !== undefined) local.claims.set(claim, invocation.invocationId)
    if (sealed !== undefined) {
      local.reserved.set(keys.sealedClaim(sealed.claimId), invocation.invocationId)
      local.reserved.set(keys.sealedSuccessor(sealed.successorInvocationId), invocation.invocationId)
    }
    if (session !== undefined) {
      local.sessions.set(invocation.sessionId, session)
      local.persisted.add(invocation.invocationId)
    }
    const entry = new StagedEvent(seq, bytes, event, idRecord)
    local.ids.set(event.id, entry)
    local.events.push(entry)
    return seq
  }

  /**
   * One atomic batch: each event with its id and invocation index entries, the records of the
   * invocations that opened or ended (and of the runs that opened), sessions, claims and the head. The record of an
   * invocation that stays open is not rewritten with every fact (it is rebuilt on open, see
   * `#catchUp`), which keeps a fact to three small index entries.
   */
  async #write(group: Batch): Promise<void> {
    const { staging } = group
    const batch = group.writes as ChainedBatch<Db, string, Uint8Array>
    for (const id of staging.persisted) batch.put(keys.invocation(id), encodeRecord(storedInvocationRecord(staging.invocations.get(id) as InvocationRecord)))
    for (const [key, run] of staging.runs) batch.put(key, encodeRecord(run))
    for (const [id, record] of staging.sessions) batch.put(keys.session(id), encodeRecord(record))
    for (const [id, user] of staging.claims) batch.put(keys.claim(id), encodeRecord(user))
    for (const [key, sealer] of staging.reserved) batch.put(key, encodeRecord(sealer))
    for (const [key, sessionId] of staging.recent) {
      if (sessionId === null) batch.del(key)
      else batch.put(key, encodeRecord(sessionId))
    }
    batch.put(keys.head, encodeRecord(staging.head))
    // Marked up in the batch of the first fact that needs it, not before: a log without one stays readable by 0.9.x.
    staging.format = this.#format >= PROVIDER_STATE_FORMAT || !carriesFormat6(staging.events) ? BASE_FORMAT : PROVIDER_STATE_FORMAT
    if (this.#format < staging.format) batch.put(keys.format, encodeRecord(staging.format))
    if (!this.#reservationsMarked) batch.put(keys.reservationsIndexed, encodeRecord(1))
    if (!this.#recencyMarked) batch.put(keys.recencyIndexed, encodeRecord(1))
    await batch.write({ sync: this.#durability === 'sync' })
  }

  /**
   * Adds the records of the group's events staged since the last call to its LevelDB batch, in seq
   * order. Never throws: LevelDB refusing a put fails the log, as a failed write does, and every
   * caller of the group (and after it) is then rejected with that error.
   */
  #putStaged(group: Batch): void {
    const { events } = group.staging
    if (group.put === events.length || this.#failed) return
    try {
      const batch = (group.writes ??= this.#db.batch())
      for (let index = group.put; index < events.length; index += 1) {
        const { seq, bytes, event, idRecord } = events[index] as StagedEvent
        const part = seqPart(seq)
        batch.put(keys.eventAt(part), bytes)
        batch.put(keys.eventId(event.id), idRecord)
        batch.put(keys.byInvocationAt(event.invocation.invocationId, part), EMPTY)
        if (event.fact.type === 'invocation.opened') batch.put(keys.open(event.invocation.invocationId), EMPTY)
        if (event.fact.type === 'invocation.ended') batch.del(keys.open(event.invocation.invocationId))
      }
      group.put = events.length
    } catch (error) {
      this.#failed = levelError(error, this.#location)
      for (const follower of this.#followers) follower.wake()
    }
  }

  /**
   * What a reader (or an append whose staging read the index) reports for an error of LevelDB's:
   * `LOG_CLOSED` once the log is closing (its iterators are closed under it), `LOG_IO` otherwise;
   * any other error (the log's own findings, a precondition's, a consumer's) is left as it is.
   */
  #readFailure(error: unknown): unknown {
    let code: unknown
    try {
      code = (error as { code?: unknown } | null)?.code
    } catch {
      // A thrown value whose `code` cannot even be read (a getter that throws, a revoked proxy) is passed on as it is.
      return error
    }
    if (error instanceof FactstateError || typeof code !== 'string' || !code.startsWith('LEVEL_')) return error
    if (this.#closed) return new FactstateError('LOG_CLOSED', 'the log was closed while it was being read', { cause: error })
    return levelError(error, this.#location)
  }

  /** Runs a read, its LevelDB errors reported as `#readFailure` words them. */
  async #reading<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read()
    } catch (error) {
      throw this.#readFailure(error)
    }
  }

  /** The stored bytes of an invocation's facts with seqs after `after`, up to `upTo`, in order (at most `limit` of them). */
  #invocationStored(invocationId: string, after: number, upTo: number, limit = Number.POSITIVE_INFINITY): Promise<{ seq: number; bytes: Uint8Array }[]> {
    return this.#reading(() => this.#readInvocationStored(invocationId, after, upTo, limit))
  }

  async #readInvocationStored(invocationId: string, after: number, upTo: number, limit: number): Promise<{ seq: number; bytes: Uint8Array }[]> {
    const seqs: number[] = []
    const prefixLength = keys.byInvocationLow(invocationId).length
    const range = { gt: keys.byInvocation(invocationId, after), lt: keys.byInvocationHigh(invocationId), ...(Number.isFinite(limit) ? { limit } : {}) }
    for await (const key of this.#db.keys(range)) {
      const seq = Number.parseInt(key.slice(prefixLength), 16)
      if (seq > upTo) break
      seqs.push(seq)
    }
    if (seqs.length === 0) return []
    const values = await this.#db.getMany(seqs.map((seq) => keys.event(seq)))
    return seqs.map((seq, index) => {
      const bytes = values[index]
      if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
      return { seq, bytes }
    })
  }

  async #invocationEvents(invocationId: string, upTo = Number.MAX_SAFE_INTEGER): Promise<StoredEvent[]> {
    this.#assertOpen()
    return (await this.#invocationStored(invocationId, 0, upTo)).map(({ seq, bytes }) => ({ seq, event: decodeEvent(bytes, seq) }))
  }

  /**
   * A run's lineage chain up to `upTo` (the seq of one of its facts), computed from its stored
   * facts (not kept fact by fact, which would cost every append a second hash) and remembered, so
   * the next call only adds the facts since. `undefined` when no fact of the run has that seq.
   */
  async #runChain(sessionId: string, runId: string, run: RunRecord, upTo: number): Promise<Uint8Array | undefined> {
    const key = keys.run(sessionId, runId)
    const known = this.#runChains.get(key)
    let seq = 0
    let chain = runChainStart(sessionId, runId, run.source?.digest)
    if (known !== undefined && known.seq <= upTo) ({ seq, chain } = known)
    if (seq < upTo) {
      const stored = await this.#invocationStored(run.invocationId, seq, upTo)
      for (const item of stored) chain = chainStep(chain, item.seq, item.bytes)
      if (stored.at(-1)?.seq !== upTo) return undefined
    }
    if (this.#runChains.size >= CACHE_LIMIT) this.#runChains.clear()
    this.#runChains.set(key, { seq: upTo, chain })
    return chain
  }

  /** Remembers a boundary whose digest the stored facts reproduce (a run's facts never change once written). */
  #verified(boundary: RunBoundary): void {
    if (this.#verifiedSources.size >= VERIFIED_SOURCES_KEPT) {
      const oldest = this.#verifiedSources.values().next()
      if (!oldest.done) this.#verifiedSources.delete(oldest.value)
    }
    this.#verifiedSources.add(boundaryKey(boundary))
  }

  /**
   * The events of a run's lineage up to its boundary: the sources it continued from (each up to
   * its own boundary) and then the run itself. Each boundary's digest is recomputed from the
   * stored bytes; any difference is `RUN_SOURCE_MISMATCH`. The chain of boundaries comes from the
   * run records first, then every run's facts are read a few at a time: a session continued turn
   * after turn has one run per turn, and reading them one after another cost a trip to LevelDB
   * each, in sequence.
   */
  async #lineage(boundary: RunBoundary, queued = false): Promise<StoredEvent[]> {
    // An append made before a close has its sources checked while the close waits for it.
    if (!queued) this.#assertOpen()
    else if (this.#failed) throw this.#failed
    const links: { boundary: RunBoundary; run: RunRecord }[] = []
    const seen = new Set<string>()
    // The lineage of a boundary read lately, where the walk meets one: only the runs after it are read.
    let known: { events: StoredEvent[]; bytes: number } = { events: [], bytes: 0 }
    let knownKey: string | undefined
    for (let current: RunBoundary | undefined = boundary; current !== undefined; ) {
      const key = boundaryKey(current)
      const remembered = this.#lineages.get(key)
      if (remembered !== undefined) {
        known = remembered
        knownKey = key
        break
      }
      const { sessionId, runId, invocationId } = current.invocation
      const run = this.#state.runNow(sessionId, runId)
      // The whole invocation, turn included: a boundary moved to another turn names no run of the log.
      if (run === undefined || run.invocationId !== invocationId || this.#state.invocationNow(invocationId)?.invocation.turnId !== current.invocation.turnId) {
        throw new FactstateError('RUN_SOURCE_MISMATCH', `run ${sessionId}/${runId} with invocation ${invocationId} in turn ${current.invocation.turnId} is not in the log; ${sourceRemedy(sessionId, runId, 'invocation')}`, {
          details: { sessionId, runId, field: 'invocation' },
        })
      }
      if (seen.has(runId)) throw new FactstateError('LOG_CORRUPT', `the sources of run ${sessionId}/${boundary.invocation.runId} go round through ${runId}`)
      seen.add(runId)
      links.push({ boundary: current, run })
      current = undefined
      if (run.source) {
        const sourceRun = this.#state.runNow(sessionId, run.source.runId)
        if (!sourceRun) throw new FactstateError('LOG_CORRUPT', `source run ${run.source.runId} of ${runId} is missing`)
        const sourceRecord = this.#state.invocationNow(sourceRun.invocationId)
        if (!sourceRecord) throw new FactstateError('LOG_CORRUPT', `source invocation ${sourceRun.invocationId} is missing`)
        current = { invocation: sourceRecord.invocation, highWater: run.source.highWater, digest: run.source.digest }
      }
    }
    const own: { events: StoredEvent[]; bytes: number }[] = new Array(links.length)
    const failures: unknown[] = new Array(links.length)
    let next = 0
    const reader = async () => {
      for (let index = next++; index < links.length; index = next++) {
        const { boundary: at, run } = links[index] as (typeof links)[number]
        try {
          own[index] = await this.#verifiedRun(at, run)
        } catch (error) {
          failures[index] = error
        }
      }
    }
    // Several reads in flight (LevelDB serves them from its thread pool).
    await Promise.all(Array.from({ length: Math.min(LINEAGE_READS, links.length) }, reader))
    // The failure of the newest run is the one reported, as when they were read one after another.
    const failed = failures.findIndex((error) => error !== undefined)
    if (failed !== -1) throw failures[failed]
    own.reverse()
    const lineage = { events: known.events.concat(...own.map((run) => run.events)), bytes: own.reduce((sum, run) => sum + run.bytes, known.bytes) }
    this.#rememberLineage(boundary, lineage, links.length > 0 ? knownKey : undefined)
    return lineage.events.slice()
  }

  /**
   * Keeps `lineage` (verified, and facts never change) for the next continuation of its boundary: a
   * session continued turn after turn then reads one run per turn, not the whole chain again. At
   * most `LINEAGES_KEPT` lineages of `LINEAGE_EVENTS_KEPT` events and `LINEAGE_BYTES_KEPT` stored
   * bytes together, the oldest dropped first.
   * The lineage it grew from (`grewFrom`) is dropped: the session's next turn continues this one, so
   * a conversation keeps one lineage, not one a turn (which let 32 of one conversation's turns push
   * every other conversation out, and a process serving more than 32 re-read each one whole).
   */
  #rememberLineage(boundary: RunBoundary, lineage: { events: StoredEvent[]; bytes: number }, grewFrom: string | undefined): void {
    const forget = (key: string) => {
      const kept = this.#lineages.get(key)
      if (kept === undefined) return
      this.#lineages.delete(key)
      this.#lineageEvents -= kept.events.length
      this.#lineageBytes -= kept.bytes
    }
    if (grewFrom !== undefined) forget(grewFrom)
    if (lineage.events.length > LINEAGE_EVENTS_KEPT || lineage.bytes > LINEAGE_BYTES_KEPT) return
    const key = boundaryKey(boundary)
    forget(key)
    this.#lineages.set(key, lineage)
    this.#lineageEvents += lineage.events.length
    this.#lineageBytes += lineage.bytes
    for (const oldest of this.#lineages.keys()) {
      if (this.#lineages.size <= LINEAGES_KEPT && this.#lineageEvents <= LINEAGE_EVENTS_KEPT && this.#lineageBytes <= LINEAGE_BYTES_KEPT) break
      forget(oldest)
    }
  }

  /** A run's events up to `boundary`, its digest recomputed from the stored bytes (`RUN_SOURCE_MISMATCH` if it differs). */
  async #verifiedRun(boundary: RunBoundary, run: RunRecord): Promise<{ events: StoredEvent[]; bytes: number }> {
    const { sessionId, runId, invocationId } = boundary.invocation
    const stored = await this.#invocationStored(invocationId, 0, boundary.highWater)
    let chain = runChainStart(sessionId, runId, run.source?.digest)
    for (const { seq, bytes } of stored) chain = chainStep(chain, seq, bytes)
    const last = stored.at(-1)
    if (!last || last.seq !== boundary.highWater || runDigest(sessionId, runId, boundary.highWater, chain) !== boundary.digest) {
      // What the log has of the run is shown (where it ends), never the digest it would accept.
      const record = this.#state.invocationNow(invocationId)
      const ended = record !== undefined && record.terminal !== null
      // A high-water and its digest go together: one that is no fact of the run, or not the end of an ended run, is the one at fault.
      const field = !last || last.seq !== boundary.highWater || (ended && record.lastSeq !== boundary.highWater) ? 'highWater' : 'digest'
      const at =
        field === 'digest'
          ? `its digest is not that of the run's facts through seq ${boundary.highWater}`
          : `its highWater ${boundary.highWater} is ${last?.seq === boundary.highWater ? "not the run's end" : 'no fact of the run'}`
      const where =
        record === undefined ? '' : !ended ? `; the run has not ended, its last fact so far is seq ${record.lastSeq}` : record.lastSeq === boundary.highWater ? ', where the run ended' : `; the run ended at seq ${record.lastSeq}`
      throw new FactstateError('RUN_SOURCE_MISMATCH', `the boundary of run ${sessionId}/${runId} does not match the log (${at}${where}); ${sourceRemedy(sessionId, runId, field)}`, {
        details: { sessionId, runId, field, ...(record === undefined ? {} : { lastSeq: record.lastSeq, ended }) },
      })
    }
    this.#verified(boundary)
    let size = 0
    const events = stored.map(({ seq, bytes }) => {
      size += bytes.length
      return { seq, event: decodeEvent(bytes, seq) }
    })
    return { events, bytes: size }
  }

  async *#scanEvents(upTo: number, chunk: number): AsyncGenerator<{ events: StoredEvent[]; bytes: number }, void, undefined> {
    this.#assertOpen()
    if (!Number.isSafeInteger(upTo) || upTo < 0 || !Number.isSafeInteger(chunk) || chunk < 1) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'scanEvents takes a non-negative seq and a positive chunk size')
    }
    yield* this.#scan(1, Math.min(upTo, this.#state.head.highWater), chunk)
  }

  /**
   * The stored events `from`..`last` (both within the log), decoded, `chunk` at a time with their
   * stored bytes counted. A missing or misplaced event is `LOG_CORRUPT` naming its seq.
   */
  async *#scan(from: number, last: number, chunk: number, reader?: ReaderResources): AsyncGenerator<{ events: StoredEvent[]; bytes: number }, void, undefined> {
    if (last < from) return
    let expected = from
    let events: StoredEvent[] = []
    let bytes = 0
    // The iterator reads one snapshot of the store: appends landing meanwhile are beyond `last` anyway.
    // It fetches a chunk's worth of facts per trip to the thread pool (the default is 16 KiB).
    const range = { gte: keys.event(from), lte: keys.event(last), highWaterMarkBytes: chunk * 1024 }
    const missing = () => new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
    try {
      const iterator = this.#db.iterator(range)
      if (reader) reader.iterator = iterator
      for await (const [key, value] of iterator) {
        const seq = eventSeq(key)
        let event: RuntimeEvent
        try {
          if (seq !== expected) throw missing()
          event = decodeEvent(value, seq)
        } catch (error) {
          // The facts before a damaged one are handed out first: a reader of a damaged log sees all it can.
          if (events.length > 0) yield { events, bytes }
          throw error
        }
        events.push({ seq, event })
        bytes += value.length
        expected += 1
        if (events.length === chunk) {
          yield { events, bytes }
          events = []
          bytes = 0
        }
      }
    } catch (error) {
      throw this.#readFailure(error)
    }
    if (events.length > 0) yield { events, bytes }
    if (expected !== last + 1) throw missing()
  }

  /**
   * Every event up to the current high-water, all or nothing: more than `maxEvents` events or
   * `maxBytes` stored bytes is `LOG_PREFIX_TOO_LARGE`.
   */
  async prefix(maxEvents: number, maxBytes: number): Promise<LogPrefix> {
    this.#assertOpen()
    if (!Number.isSafeInteger(maxEvents) || maxEvents < 0 || !Number.isSafeInteger(maxBytes) || maxBytes < 0) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'prefix takes two non-negative integers')
    }
    const head = this.#state.head
    if (head.highWater > maxEvents) {
      throw new FactstateError('LOG_PREFIX_TOO_LARGE', `the log holds ${head.highWater} events, more than ${maxEvents}`)
    }
    const events: StoredEvent[] = []
    let bytesRead = 0
    for await (const chunk of this.#scan(1, head.highWater, PREFIX_CHUNK)) {
      bytesRead += chunk.bytes
      if (bytesRead > maxBytes) {
        throw new FactstateError('LOG_PREFIX_TOO_LARGE', `the log holds more than ${maxBytes} bytes of events`)
      }
      for (const stored of chunk.events) events.push(stored)
    }
    // The projection reads its own list: a caller may reorder or cut the one it gets (newest first, say).
    const own = events.slice()
    return {
      highWater: head.highWater,
      digest: logDigest(head.highWater, head.chain),
      events,
      projectInvocation: (invocationId: string) => projectInvocation(own, invocationId),
    }
  }

  /** See `LogInternals.unansweredCount`. */
  async #unansweredCount(limit: number): Promise<number | undefined> {
    this.#assertOpen()
    const last = new Map<string, RunSummary>()
    /** Each session's runs, with the call its run record names (undefined: a record from before 0.7.0, which does not say). */
    const bySession = new Map<string, { run: RunSummary; parentOperationId: string | null | undefined }[]>()
    let runs = 0
    try {
      for await (const key of this.#db.keys({ gte: keys.runLow, lt: keys.runHigh })) {
        runs += 1
        if (runs > limit) return undefined
        const [sessionId, runId] = splitRunKey(key)
        const run = this.#runSummary(sessionId, runId, key)
        if (run.openedSeq > (last.get(sessionId)?.openedSeq ?? 0)) last.set(sessionId, run)
        const list = bySession.get(sessionId) ?? []
        list.push({ run, parentOperationId: this.#state.runNow(sessionId, runId)?.parentOperationId })
        bySession.set(sessionId, list)
      }
    } catch (error) {
      throw this.#readFailure(error)
    }
    const ended = [...last].filter(([, run]) => run.outcome?.status === 'cancelled' || run.outcome?.status === 'failed')
    // A child's turn whose supervisor (on this log) has run since the run that started it is waited for
    // by no one (`factstate pending --unanswered` says so): not counted, or its hint would never go.
    // The child is the run's own parent's, else the session's latest run's that records one, as that
    // command names it (a successor records none; a specialist's session records each task's call).
    // Read back from the last run to the first whose record names a call; a record from before 0.7.0
    // does not say, so its opening fact is read, unless it is a successor's.
    const candidates = new Map<string, RunSummary[]>()
    for (const [sessionId] of ended) {
      const kept: RunSummary[] = []
      for (const { run, parentOperationId } of (bySession.get(sessionId) ?? []).sort((a, b) => b.run.openedSeq - a.run.openedSeq)) {
        // A successor records none (its record says null since 0.7.0).
        if (parentOperationId === null || run.kind === 'handoff') continue
        kept.push(run)
        if (typeof parentOperationId === 'string') break
      }
      candidates.set(sessionId, kept)
    }
    await this.#addParents([...candidates.values()].flat())
    let count = 0
    for (const [sessionId, run] of ended) {
      const parent = run.parent ?? candidates.get(sessionId)?.find((candidate) => candidate.parent !== undefined)?.parent
      const supervisor = parent === undefined ? undefined : last.get(parent.invocation.sessionId)
      if (parent !== undefined && supervisor !== undefined && supervisor.runId !== parent.invocation.runId) continue
      count += 1
    }
    return count
  }

  /**
   * The sessions with something pending, in id order: a run open, a turn paused for its successor, or
   * tool outcomes waiting to be acknowledged, or, in a backup (`restoredFrom()`), no run since its
   * point (`restored`), and with `{ unanswered: true }` a last run that ended `cancelled` or `failed`
   * (`unanswered`; sessions with none of these are left out). What a
   * process starting up looks at, after `recoverInvocations`: the successors to start, the sessions to
   * reconcile, the runs another process is still driving. Reads every session's index record (200,000
   * sessions in well under a second); `LOG_CORRUPT` for a record that cannot be read.
   *
   * @example
   * ```ts
   * await recoverInvocations(log)
   * for (const session of await log.pendingSessions()) {
   *   for (const turn of session.paused) console.log(`${session.sessionId}: start the successor of ${turn.runId}`)
   *   if (session.unknown.length > 0) console.log(`${session.sessionId}: check ${session.unknown.map((op) => op.operationId).join(', ')}`)
   * }
   * ```
   */
  async pendingSessions(options: PendingOptions = {}): Promise<PendingSession[]> {
    this.#assertOpen()
    const { unanswered = false, sessionId: only } = readOptions(options, ['unanswered', 'sessionId'], { call: 'pendingSessions', code: 'LOG_INVALID_ARGUMENT', details: fieldDetails })
    if (typeof unanswered !== 'boolean') throw new FactstateError('LOG_INVALID_ARGUMENT', `pendingSessions: unanswered must be a boolean, not ${shown(unanswered)}`, { details: { field: 'unanswered' } })
    if (only !== undefined && !idSchema.safeParse(only).success) throw notAnId('pendingSessions', 'sessionId', only)
    // One session's run and session records alone (ids hold no `!`, so `r!S!` … `r!S"` are its runs), or every session's.
    const runRange = only === undefined ? { gte: keys.runLow, lt: keys.runHigh } : { gte: `${keys.run(only as string, '')}`, lt: `${keys.runLow}${only as string}"` }
    const sessionRange = only === undefined ? { gte: keys.sessionLow, lt: keys.sessionHigh } : { gte: keys.session(only as string), lte: keys.session(only as string) }
    const found: PendingSession[] = []
    const backup = this.#backupPoints.length > 0
    try {
      // In a backup, or asked for unanswered turns: each session's last run (one pass over the run index);
      // in a backup those that have not run since its point wait for an acknowledgement.
      const lastRuns = new Map<string, RunSummary>()
      if (backup || unanswered) await this.#lastRunsIn(runRange, lastRuns)
      for await (const [key, value] of this.#db.iterator(sessionRange)) {
        const sessionId = key.slice(keys.sessionLow.length)
        const { active, paused, unknown } = indexRecord<SessionRecord>(value, `session ${sessionId}`, 'session')
        const last = lastRuns.get(sessionId)
        const restored = backup ? this.#pointSince(last?.openedSeq) : undefined
        const cut = unanswered && (last?.outcome?.status === 'cancelled' || last?.outcome?.status === 'failed') ? last : undefined
        if (active.length === 0 && paused.length === 0 && unknown.length === 0 && restored === undefined && cut === undefined) continue
        // Copies: the caller's to keep or change.
        found.push(structuredClone({ sessionId, active, paused, unknown, ...(restored === undefined ? {} : { restored }), ...(cut === undefined ? {} : { unanswered: cut }) }))
      }
      // Each unanswered run with its parent, as `runs` gives it. A first fact that cannot be read costs
      // its run the parent, not the list (verify names it): a thousand in one read, and when one of them
      // cannot be read, those one by one, so it costs no other its own.
      const cuts = found.flatMap((session) => (session.unanswered === undefined ? [] : [session.unanswered]))
      for (let from = 0; from < cuts.length; from += SCAN_BATCH) {
        const part = cuts.slice(from, from + SCAN_BATCH)
        const corrupt = await this.#addParents(part).then(
          () => false,
          (error: unknown) => {
            if (!isFactstateError(error, 'LOG_CORRUPT')) throw error
            return true
          },
        )
        for (const cut of corrupt ? part : []) {
          await this.#addParents([cut]).catch((error: unknown) => {
            if (!isFactstateError(error, 'LOG_CORRUPT')) throw error
          })
        }
      }
      // Each paused turn with when it was sealed: its invocation's last fact (two point reads a turn, its facts not scanned).
      const sealedAt = await this.#sealTimes(found.flatMap((session) => session.paused.map((turn) => turn.invocationId)))
      for (const session of found) {
        for (const turn of session.paused) {
          const at = sealedAt.get(turn.invocationId)
          if (at !== undefined) turn.sealedAt = at
        }
      }
      // Each unknown outcome with the input its call was dispatched with: what to check, and what to show whoever checks it.
      for (const session of found) {
        if (session.unknown.length === 0) continue
        // A fact that cannot be read costs its session the inputs, not the list (verify names it).
        const inputs = await dispatchedInputs(session.unknown, (id) => this.#invocationEvents(id)).catch((error: unknown) => {
          if (isFactstateError(error, 'LOG_CORRUPT')) return new Map<string, unknown>()
          throw error
        })
        session.unknown = session.unknown.map((op) => {
          const key = dispatchedKey(op.invocationId, op.operationId)
          return inputs.has(key) ? { ...op, input: inputs.get(key) } : op
        })
      }
      // Each unanswered run with the calls with effects its turn already made: what a resent message
      // would make again. A handoff successor's turn began in the runs it succeeds (same turn, followed
      // back through `sourceRunId`): their calls count too, oldest first.
      for (const session of found) {
        const cut = session.unanswered
        if (cut === undefined) continue
        const turn: string[] = [cut.invocationId]
        // The session's runs are read only for a successor (one pass over its own run index).
        const runs = cut.kind === 'handoff' ? new Map((await this.#runList(session.sessionId)).map((run) => [run.runId, run])) : undefined
        for (let run: RunSummary | undefined = cut; run?.kind === 'handoff' && run.sourceRunId !== undefined; ) {
          run = runs?.get(run.sourceRunId)
          if (run === undefined || run.turnId !== cut.turnId || turn.includes(run.invocationId)) break
          turn.unshift(run.invocationId)
        }
        const effects: SettledEffect[] = []
        let readable = true
        for (const invocationId of turn) {
          // An invocation that called no tool (its record has no operation id) has none, and its facts are not read.
          let record: InvocationRecord | undefined
          try {
            record = this.#state.invocationNow(invocationId)
          } catch (error) {
            // A record that cannot be read: its facts are read instead.
            if (!isFactstateError(error, 'LOG_CORRUPT')) throw error
          }
          if (record?.operations.size === 0) continue
          // A fact that cannot be read costs its run the list, not the session (verify names it).
          const events = await this.#invocationEvents(invocationId).catch((error: unknown) => {
            if (isFactstateError(error, 'LOG_CORRUPT')) return undefined
            throw error
          })
          if (events === undefined) {
            readable = false
            break
          }
          effects.push(...settledEffects(events))
        }
        if (readable) cut.effects = effects
      }
    } catch (error) {
      throw this.#readFailure(error)
    }
    return found
  }

  /**
   * When each of these sealed invocations was sealed: the `recordedAt` of the fact at its record's
   * `lastSeq`, its `invocation.ended{handoff_paused}`. One whose record or fact cannot be read, or is
   * not that, is left out (a damaged fact costs its turn the time, not the list; `verify` names it).
   */
  async #sealTimes(invocationIds: string[]): Promise<Map<string, number>> {
    const times = new Map<string, number>()
    if (invocationIds.length === 0) return times
    const records = await this.#db.getMany(invocationIds.map((id) => keys.invocation(id)))
    const seals: { invocationId: string; seq: number }[] = []
    invocationIds.forEach((invocationId, index) => {
      const stored = records[index]
      if (stored === undefined) return
      try {
        const record = indexRecord<StoredInvocationRecord>(stored, `invocation ${invocationId}`, 'invocation')
        if (record.outcome?.status === 'handoff_paused') seals.push({ invocationId, seq: record.lastSeq })
      } catch (error) {
        if (!isFactstateError(error, 'LOG_CORRUPT')) throw error
      }
    })
    const facts = await this.#db.getMany(seals.map(({ seq }) => keys.event(seq)))
    seals.forEach(({ invocationId, seq }, index) => {
      const bytes = facts[index]
      if (bytes === undefined) return
      try {
        const event = decodeEvent(bytes, seq)
        if (event.invocation.invocationId === invocationId && event.fact.type === 'invocation.ended' && event.fact.outcome.status === 'handoff_paused') {
          times.set(invocationId, event.recordedAt)
        }
      } catch (error) {
        if (!isFactstateError(error, 'LOG_CORRUPT')) throw error
      }
    })
    return times
  }

  /**
   * The facts of one invocation, in seq order, read through its index rather than the whole log: what
   * a run wrote, its final answer (`answerOf`), the messages it replays as (`transcriptOf`). An
   * invocation the log never saw has none; an id that is no id is `LOG_INVALID_ARGUMENT`.
   *
   * @example
   * ```ts
   * const outcome = await running.wait()
   * const reply = answerOf(await log.invocationEvents(running.invocation.invocationId))
   * ```
   */
  async invocationEvents(invocationId: string): Promise<StoredEvent[]> {
    this.#assertOpen()
    if (!idSchema.safeParse(invocationId).success) throw notAnId('invocationEvents', 'invocationId', invocationId)
    try {
      return await this.#invocationEvents(invocationId)
    } catch (error) {
      throw this.#readFailure(error)
    }
  }

  /**
   * The runs of a session, in the order they opened: which run a conversation's next message
   * continues (the last one), whether one is still open, how each ended, the tool call that started
   * a child run (`parent`). Reads the session's run index, each run's invocation record and the
   * first fact of each run that is no handoff successor (its `invocation.opened`, for `parent`), never
   * the rest of the session's facts. An unknown session has none.
   *
   * @example
   * ```ts
   * const last = (await log.runs('chat-7')).at(-1)
   * const source = last && (await log.runSource('chat-7', last.runId))?.boundary
   * ```
   */
  async runs(sessionId: string): Promise<RunSummary[]> {
    this.#assertOpen()
    if (!idSchema.safeParse(sessionId).success) throw notAnId('runs', 'sessionId', sessionId)
    const found = await this.#runList(sessionId)
    await this.#addParents(found)
    return found
  }

  /**
   * The last run opened in a session (running, ended, or left open by a crash: `terminal` and
   * `outcome` say which), as `(await log.runs(sessionId)).at(-1)` is, or `undefined` for a session
   * with no run: the run a conversation's next message continues. Reads the session's latest-run
   * index and that one run's records, so it costs the same however long the session is, where
   * `runs` reads every run of it. An id that is no id is `LOG_INVALID_ARGUMENT`.
   *
   * @example
   * ```ts
   * const last = await log.latestRun('chat-7')
   * const source = last && (await log.runSource('chat-7', last.runId))?.boundary
   * ```
   */
  async latestRun(sessionId: string): Promise<RunSummary | undefined> {
    this.#assertOpen()
    if (!idSchema.safeParse(sessionId).success) throw notAnId('latestRun', 'sessionId', sessionId)
    const runId = (await this.#reading(() => this.#state.latestRun(sessionId)))?.runId
    if (runId === undefined) return undefined
    const latest = await this.#reading(async () => this.#runSummary(sessionId, runId, keys.run(sessionId, runId)))
    await this.#addParents([latest])
    return latest
  }

  /**
   * The sessions of the log, a page at a time: at most `limit` (default 100, at most 1,000) whose id
   * begins with `prefix`, each with its last run opened (what `log.runs(sessionId)` ends with).
   *
   * In id order (`order: 'id'`, the default), after the id `after` (the last of the page before):
   * reads the session index, whose records name the seq of each session's latest run's
   * `invocation.opened`, then those facts in one read a page (the runs they name) and the runs'
   * records (never other facts); a session whose record or that fact cannot be read (`verify()` names
   * the damage), or whose record lacks the seq, from its run index, as `log.runs` is. A listing leaves
   * the latest-run map as it was but for those.
   *
   * Most recently active first (`order: 'recent'`), by the seq its latest run opened at
   * (`latestRun.openedSeq`: a new message, a continuation and a handoff successor each open a run and
   * move their session to the front), before the seq `before` (the last `latestRun.openedSeq` of the
   * page before): walks the recency index from its newest entry (one a session, written in the same
   * batch as the run's `invocation.opened`) and reads each listed session's latest run's first fact
   * and records. With a `prefix`, the walk passes over the sessions without it: its cost grows with
   * the sessions it skips (a prefix of few sessions among many reads much of the index).
   * A session that becomes active while you page moves above the pages still to come: they do not
   * list it (one shown already is not listed twice, one not reached yet not at all); a fresh first
   * page does.
   *
   * A log without sessions lists none; bad options are `LOG_INVALID_ARGUMENT` naming the option
   * (`details.field`): `before` in id order and `after` in recent order too.
   *
   * @example
   * ```ts
   * for (let page = await log.sessions({ prefix: 'user-42.' }); page.length > 0; page = await log.sessions({ prefix: 'user-42.', after: page.at(-1)?.sessionId })) {
   *   for (const { sessionId, latestRun } of page) console.log(sessionId, latestRun.terminal ?? 'open')
   * }
   * // The 20 conversations most recently active, then the 20 before them:
   * const recent = await log.sessions({ order: 'recent', limit: 20 })
   * const older = await log.sessions({ order: 'recent', limit: 20, before: recent.at(-1)?.latestRun.openedSeq })
   * ```
   */
  async sessions(options: SessionsOptions = {}): Promise<SessionListing[]> {
    this.#assertOpen()
    const { order, prefix, after, before, limit } = readSessionsOptions(options)
    if (order === 'recent') return this.#recentSessions(prefix, before, limit)
    // Ids hold only [A-Za-z0-9._:-]: '~' sorts after every one of them.
    const from = after !== undefined && after >= prefix ? { gt: keys.session(after) } : { gte: keys.session(prefix) }
    const page: { sessionId: string; record: Uint8Array }[] = []
    await this.#reading(async () => {
      for await (const [key, record] of this.#db.iterator({ ...from, lt: keys.session(`${prefix}~`), limit })) page.push({ sessionId: key.slice(keys.sessionLow.length), record })
    })
    // Each session's latest run: remembered, else from the opening fact its record's `latestOpenedSeq`
    // names (as the recency index's entry does), the page's in one read. Not remembered: a pass over
    // every session would push out the sessions the log is running.
    const runIds = new Map<string, string>()
    const unread: { sessionId: string; seq: number }[] = []
    for (const { sessionId, record } of page) {
      const known = this.#state.latestRuns.get(sessionId)
      if (known) {
        runIds.set(sessionId, known.runId)
        continue
      }
      const seq = known === null ? undefined : latestOpenedSeqOf(record, sessionId)
      if (seq !== undefined) unread.push({ sessionId, seq })
    }
    if (unread.length > 0) {
      const values = await this.#reading(() => this.#db.getMany(unread.map(({ seq }) => keys.event(seq))))
      unread.forEach(({ sessionId, seq }, index) => {
        const runId = openedRunOf(values[index], seq, sessionId)
        if (runId !== undefined) runIds.set(sessionId, runId)
      })
    }
    const listed: SessionListing[] = []
    for (const { sessionId } of page) {
      // A record without the seq (none is, once the recency index is built), one that cannot be read or
      // names no opening of the session's that can be (verify names it), or a session without runs: the
      // run index, read, as a listing read it before the records held the seq. A damaged opening fact
      // then costs the page what it did: nothing for a handoff successor (whose parent is never read),
      // `LOG_CORRUPT` naming its seq for another run (`#addParents` reads it).
      const runId = runIds.get(sessionId) ?? (await this.#reading(() => this.#state.latestRun(sessionId)))?.runId
      if (runId === undefined) throw new FactstateError('LOG_CORRUPT', `session ${sessionId} has a record but no run`, { details: { key: keys.session(sessionId) } })
      listed.push({ sessionId, latestRun: await this.#reading(async () => this.#runSummary(sessionId, runId, keys.run(sessionId, runId))) })
    }
    await this.#addParents(listed.map((session) => session.latestRun))
    return listed
  }

  /**
   * `sessions({ order: 'recent' })`: the recency index walked from `before` (exclusive) back, one
   * iterator (one snapshot of the index, so a session that moves to the front meanwhile is listed
   * once, where it was), then each entry's run from its opening fact (which names the run).
   */
  async #recentSessions(prefix: string, before: number | undefined, limit: number): Promise<SessionListing[]> {
    // A seq past what a key can hold (2^52) bounds nothing.
    const lt = before === undefined || before > MAX_KEYED_SEQ ? keys.recentHigh : keys.recent(before)
    const entries: { seq: number; sessionId: string; key: string }[] = []
    await this.#reading(async () => {
      for await (const [key, value] of this.#db.iterator({ gte: keys.recentLow, lt, reverse: true, ...(prefix === '' ? { limit } : {}) })) {
        const sessionId = indexRecord<string>(value, `recent ${key}`, 'name')
        if (!sessionId.startsWith(prefix)) continue
        const seq = seqOfRecentKey(key)
        if (Number.isNaN(seq)) throw new FactstateError('LOG_CORRUPT', `the recency index holds a key that names no seq: ${JSON.stringify(key)}`, { details: { key } })
        entries.push({ seq, sessionId, key })
        if (entries.length === limit) break
      }
    })
    if (entries.length === 0) return []
    const values = await this.#reading(() => this.#db.getMany(entries.map(({ seq }) => keys.event(seq))))
    const listed: SessionListing[] = []
    await this.#reading(async () => {
      entries.forEach(({ seq, sessionId, key }, index) => {
        const bytes = values[index]
        if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
        const { fact, invocation } = decodeEvent(bytes, seq)
        if (fact.type !== 'invocation.opened' || invocation.sessionId !== sessionId) {
          throw new FactstateError('LOG_CORRUPT', `the recency index entry of session ${sessionId} names event ${seq}, which opens no run of it`, { details: { key } })
        }
        listed.push({ sessionId, latestRun: this.#runSummary(sessionId, invocation.runId, keys.run(sessionId, invocation.runId)) })
      })
    })
    await this.#addParents(listed.map((session) => session.latestRun))
    return listed
  }

  /**
   * Gives each of `found` the parent its `invocation.opened` records, if any. A successor's opened fact
   * has no parent (its turn keeps its first run's): only the others are read, each once (an opened
   * fact never changes), in one read for those not remembered. `LOG_CORRUPT` naming the seq of one
   * that cannot be read.
   */
  async #addParents(found: RunSummary[]): Promise<void> {
    const known = new Map<string, ParentCall | null>()
    for (const run of found) {
      const parent = run.kind === 'handoff' ? undefined : this.#parents.get(run.invocationId)
      if (parent !== undefined) known.set(run.invocationId, parent)
    }
    const unread = found.filter((run) => run.kind !== 'handoff' && !known.has(run.invocationId))
    if (unread.length > 0) {
      const values = await this.#reading(() => this.#db.getMany(unread.map((run) => keys.event(run.openedSeq))))
      unread.forEach((run, index) => {
        const bytes = values[index]
        if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${run.openedSeq} is missing`, { details: { seq: run.openedSeq } })
        const { fact } = decodeEvent(bytes, run.openedSeq)
        known.set(run.invocationId, fact.type === 'invocation.opened' && fact.input.kind !== 'handoff' ? (fact.input.parent ?? null) : null)
      })
      if (this.#parents.size + unread.length > CACHE_LIMIT) this.#parents.clear()
      for (const run of unread) this.#parents.set(run.invocationId, known.get(run.invocationId) ?? null)
    }
    for (const run of found) {
      const parent = known.get(run.invocationId)
      // A copy: the remembered one is the log's, and a caller may change what it gets.
      if (parent) run.parent = { invocation: { ...parent.invocation }, operationId: parent.operationId }
    }
  }

  /**
   * The runs the tool call `operationId` started: those whose `invocation.opened` records it as their
   * `parent` (`{ invocation, operationId }`, as `childRunFor` gives it, or as a tool that runs a
   * specialist in a session of its own records it), in whatever session, and the runs after them in
   * their session that record no call (a handoff successor, which keeps its turn's parent, or a
   * continuation started without one), up to one that records another call, in the order they opened, each with its
   * `sessionId` and as `runs` lists it (`parent` on those that record it). Empty when the call
   * started no run in this log: it never started one, or started it on another log. What a recovery
   * of an uncertain call that runs another agent needs, whatever ids the child was given (see
   * "Agents that call agents" in the README). The first call on an open log reads every run record
   * once (100,000 runs in about as long as `pendingSessions` takes over them), and the opened fact of
   * each run an earlier version recorded, which a writer then completes (see `#completeRunRecords`);
   * later ones read only the children's sessions' run records. `LOG_INVALID_ARGUMENT` for an
   * operation id that is not a non-empty string of at most 512 characters.
   *
   * @example
   * ```ts
   * for (const op of (await log.pendingSessions({ sessionId: 'desk' }))[0]?.unknown ?? []) {
   *   const last = (await log.childRuns(op.operationId)).at(-1) // undefined: the call started no child
   * }
   * ```
   */
  async childRuns(operationId: string): Promise<ChildRunSummary[]> {
    this.#assertOpen()
    if (typeof operationId !== 'string' || operationId.length === 0 || operationId.length > 512) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `childRuns: operationId must be a tool call's operation id (a non-empty string of at most 512 characters), not ${shown(operationId)}`, {
        details: { field: 'operationId' },
      })
    }
    const named = (await this.#childIndex()).get(operationId) ?? []
    if (named.length === 0) return []
    const found: ChildRunSummary[] = []
    const seen = new Set<string>()
    for (const sessionId of new Set(named.map((child) => child.sessionId))) {
      const ownIds = new Set(named.filter((child) => child.sessionId === sessionId).map((child) => child.invocationId))
      const runs = await this.#runList(sessionId)
      await this.#addParents(runs)
      // From a run that records this call to the next that records another: what records none carries on.
      let carried = false
      for (const run of runs) {
        if (ownIds.has(run.invocationId)) carried = true
        else if (run.parent !== undefined) carried = false
        if (!carried || seen.has(run.invocationId)) continue
        seen.add(run.invocationId)
        found.push({ sessionId, ...run })
      }
    }
    return found.sort((a, b) => a.openedSeq - b.openedSeq)
  }

  /**
   * The child runs by their parent's operation id. Built once per open log from the run records, which
   * name the call that started each run (`parentOperationId`) since 0.7.0; for a record an earlier
   * version wrote, from its run's opened fact, read only when the run is no handoff successor and the
   * fact's bytes hold the member name `parent` (the rest cannot record one); a writer then adds the
   * member to those records (see `#completeRunRecords`). The runs this log commits
   * meanwhile are kept aside and added when the pass is done; after it, each commit adds its own.
   */
  async #childIndex(): Promise<Map<string, ChildEntry[]>> {
    if (this.#children !== undefined) return this.#children
    this.#childrenBuild ??= (async () => {
      this.#childrenSince = []
      try {
        const found = new Map<string, ChildEntry[]>()
        const add = (child: ChildEntry) => addChild(found, child)
        const sessionPart = keys.runLow.length
        const named: { key: string; operationId: string; invocationId: string }[] = []
        const older: { key: string; invocationId: string; record: RunRecord }[] = []
        const iterator = this.#db.iterator({ gte: keys.runLow, lt: keys.runHigh })
        try {
          for (;;) {
            const entries = await iterator.nextv(SCAN_BATCH)
            if (entries.length === 0) break
            for (const [key, value] of entries) {
              const run = indexRecord<RunRecord>(value, `run ${key.slice(sessionPart)}`, 'run')
              if (typeof run.parentOperationId === 'string') named.push({ key, operationId: run.parentOperationId, invocationId: run.invocationId })
              else if (run.parentOperationId === undefined) older.push({ key, invocationId: run.invocationId, record: run })
            }
          }
        } catch (error) {
          throw this.#readFailure(error)
        } finally {
          await iterator.close().catch(() => undefined)
        }
        for (const run of named) add({ operationId: run.operationId, sessionId: splitRunKey(run.key)[0], invocationId: run.invocationId })
        // What the older records lack, for a writer to add (below): each run's parent call or null.
        const completed: [string, RunRecord][] = []
        for (let from = 0; from < older.length; from += SCAN_BATCH) {
          const part = older.slice(from, from + SCAN_BATCH)
          const records = await this.#invocationRecords(part.map((run) => run.invocationId))
          const read = records.map((record, index) => ({ record, run: part[index] as (typeof older)[number] })).filter(({ record }) => record.inputKind !== 'handoff')
          const values = await this.#reading(() => this.#db.getMany(read.map(({ record }) => keys.event(record.openedSeq))))
          const parents = new Map<string, string>()
          read.forEach(({ record }, index) => {
            const bytes = values[index]
            if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${record.openedSeq} is missing`, { details: { seq: record.openedSeq } })
            if (!holdsParentName(bytes)) return
            const child = childEntryOf(decodeEvent(bytes, record.openedSeq))
            if (child === undefined) return
            add(child)
            parents.set(child.invocationId, child.operationId)
          })
          for (const run of part) completed.push([run.key, { ...run.record, parentOperationId: parents.get(run.invocationId) ?? null }])
        }
        if (completed.length > 0) await this.#completeRunRecords(completed)
        // Synchronously with taking it over: no commit falls between the two.
        for (const child of this.#childrenSince) add(child)
        this.#children = found
        return found
      } finally {
        this.#childrenSince = undefined
        this.#childrenBuild = undefined
      }
    })()
    return this.#childrenBuild
  }

  /**
   * Gives run records an earlier version wrote their `parentOperationId`, so that the next open's
   * `childRuns` reads no opened fact for them: a member the versions before 0.7.0 ignore (they read
   * and compare only `invocationId` and `source`), so the log stays theirs to read and write. Only by
   * the log's writer; a snapshot reads the facts at each open. A run record is never written again
   * once its run opened, so nothing else writes these keys. Not synced, and a write that fails is
   * left: the next open reads those facts again.
   */
  async #completeRunRecords(completed: [string, RunRecord][]): Promise<void> {
    if (this.#snapshotOf !== undefined || this.#failed || this.#closed) return
    try {
      const batch = this.#db.batch()
      for (const [key, run] of completed) batch.put(key, encodeRecord(run))
      await batch.write()
    } catch {
      // Only a shortcut for the next open.
    }
  }

  /** The stored invocation records of `ids`, in one read (`LOG_CORRUPT` for one that is missing). */
  async #invocationRecords(ids: string[]): Promise<InvocationRecord[]> {
    const values = await this.#reading(() => this.#db.getMany(ids.map((id) => keys.invocation(id))))
    return ids.map((id, index) => {
      const value = values[index]
      if (value === undefined) throw new FactstateError('LOG_CORRUPT', `invocation ${id} has a run record but no invocation record`, { details: { key: keys.invocation(id) } })
      return indexRecord<InvocationRecord>(value, `invocation ${id}`, 'invocation')
    })
  }

  /** Adds the child runs of committed `events` to the child index, or to what its build takes over. */
  #noteChildren(events: readonly StagedEvent[]): void {
    for (const { event } of events) {
      const child = childEntryOf(event)
      if (child === undefined) continue
      if (this.#childrenSince !== undefined) this.#childrenSince.push(child)
      else if (this.#children !== undefined) addChild(this.#children, child)
    }
  }

  /** The runs of `sessionId` as `runs` lists them, without `parent` (read from the index records alone). */
  async #runList(sessionId: string): Promise<RunSummary[]> {
    const prefix = keys.run(sessionId, '')
    const found: RunSummary[] = []
    try {
      for await (const key of this.#db.keys(keys.runsOf(sessionId))) {
        found.push(this.#runSummary(sessionId, key.slice(prefix.length), key))
      }
    } catch (error) {
      throw this.#readFailure(error)
    }
    return found.sort((a, b) => a.openedSeq - b.openedSeq)
  }

  /** The summary of run `runId` of `sessionId`, whose index key is `key` (`LOG_CORRUPT` without its records). */
  #runSummary(sessionId: string, runId: string, key: string): RunSummary {
    const { run, record } = this.#runRecords(sessionId, runId, key)
    return runSummaryOf(runId, run, record)
  }

  /**
   * The last run opened in each session of the run index's `range`, into `last`: the run records
   * read with their keys, a batch at a time, and the invocation records not in memory in one read a
   * batch (an open one always is, and its stored record is only refreshed when it ends); neither
   * remembered, so one pass over every run pushes out nothing the log is running.
   */
  async #lastRunsIn(range: { gte: string; lt: string }, last: Map<string, RunSummary>): Promise<void> {
    const iterator = this.#db.iterator(range)
    try {
      for (;;) {
        const entries = await iterator.nextv(SCAN_BATCH)
        if (entries.length === 0) break
        // The records in memory are taken now, before the read: memory may be trimmed while it is under way.
        const runs = entries.map(([key, value]) => {
          const [sessionId, runId] = splitRunKey(key)
          const run = this.#state.runs.get(key) ?? indexRecord<RunRecord>(value, `run ${sessionId}/${runId}`, 'run')
          return { key, sessionId, runId, run, known: this.#state.invocations.get(run.invocationId) }
        })
        const unread = runs.filter(({ known }) => known === undefined)
        const values = unread.length === 0 ? [] : await this.#db.getMany(unread.map(({ run }) => keys.invocation(run.invocationId)))
        const stored = new Map<string, Uint8Array | undefined>(unread.map(({ run }, index) => [run.invocationId, values[index]]))
        for (const { key, sessionId, runId, run, known } of runs) {
          const bytes = stored.get(run.invocationId)
          const record =
            known ?? (bytes === undefined ? undefined : invocationRecordOf(indexRecord<StoredInvocationRecord>(bytes, `invocation ${run.invocationId}`, 'invocation')))
          if (record === undefined) throw new FactstateError('LOG_CORRUPT', `run ${sessionId}/${runId} has no invocation record`, { details: { key } })
          if (record.openedSeq > (last.get(sessionId)?.openedSeq ?? 0)) last.set(sessionId, runSummaryOf(runId, run, record))
        }
      }
    } catch (error) {
      throw this.#readFailure(error)
    } finally {
      await iterator.close().catch(() => undefined)
    }
  }

  /**
   * The boundary of a run: its invocation, the seq of its last fact and a digest over its
   * lineage only (appends elsewhere never change it). `undefined` for a run the log never saw.
   */
  async runSource(sessionId: string, runId: string): Promise<RunSource | undefined> {
    this.#assertOpen()
    for (const [name, value] of [['sessionId', sessionId], ['runId', runId]] as const) {
      if (!idSchema.safeParse(value).success) throw notAnId('runSource', name, value)
    }
    const run = this.#state.runNow(sessionId, runId)
    if (run === undefined) return undefined
    const record = this.#state.invocationNow(run.invocationId)
    if (record === undefined) throw new FactstateError('LOG_CORRUPT', `run ${sessionId}/${runId} has no invocation record`)
    const highWater = record.lastSeq
    const chain = await this.#runChain(sessionId, runId, run, highWater)
    if (chain === undefined) {
      throw new FactstateError('LOG_CORRUPT', `fact ${highWater} of run ${sessionId}/${runId} is not indexed`, { details: { seq: highWater } })
    }
    // Copies: the record is the log's own (it decides admissions), and a caller may change what it gets.
    const boundary = { invocation: { ...record.invocation }, highWater, digest: runDigest(sessionId, runId, highWater, chain) }
    return record.outcome?.status === 'handoff_paused' ? { boundary, pause: structuredClone(record.outcome.pause) } : { boundary }
  }

  /**
   * The facts a continuation of `boundary` replays, in seq order: those of its run up to the
   * boundary and of the runs that run continued, each boundary's digest recomputed from the stored
   * bytes (`RUN_SOURCE_MISMATCH` when one differs; something that is no boundary is
   * `LOG_INVALID_ARGUMENT`). `transcriptOf` of them is what the model is sent before a continuation's
   * message: what to summarize when a conversation outgrows the model's context. Copies.
   */
  async lineageEvents(boundary: RunBoundary): Promise<StoredEvent[]> {
    this.#assertOpen()
    const parsed = runBoundarySchema.safeParse(boundary)
    if (!parsed.success) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'lineageEvents takes a run boundary, { invocation, highWater, digest }, as log.runSource gives it')
    }
    // The lineage is the log's own (remembered for the next continuation): the caller gets a copy.
    return structuredClone(await this.#lineage(parsed.data as RunBoundary))
  }

  /**
   * The log digest as it stood when `seq` was the high-water: what `head().digest` (and `verify()`)
   * gave then. `digestAt(head().highWater)` is `head().digest`, `digestAt(0)` an empty log's. Read from
   * the fact's id record (which `verify()` checks), so it costs two reads whatever `seq` (the fact, for
   * its id, then that record; none for the high-water). A consumer
   * keeps it beside the seq it has read through: the same seq with another digest later, or a log that
   * no longer reaches that seq, means the log is not the one it read (put back from a backup,
   * replaced). `seq` must be a whole number from 0 to the high-water, else `LOG_INVALID_ARGUMENT`.
   */
  async digestAt(seq: number): Promise<string> {
    this.#assertOpen()
    const { highWater, chain } = this.#state.head
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0 || seq > highWater) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `digestAt takes a seq from 0 to the high-water (${highWater}), not ${shown(seq)}`, { details: { field: 'seq', highWater } })
    }
    if (seq === highWater) return logDigest(highWater, chain)
    if (seq === 0) return logDigest(0, EMPTY_CHAIN)
    return this.#reading(async () => {
      const bytes = await this.#db.get(keys.event(seq))
      if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
      return logDigest(seq, await this.#storedChain(decodeEvent(bytes, seq).id, seq))
    })
  }

  /**
   * Re-reads every event: seq continuity, decoding, the digest chain, the id index; then every other
   * index record, rebuilt from the facts and compared. `LOG_CORRUPT` names the first bad seq, or
   * for a damaged index record its key space and key (`details.index`, `details.key`). Everything is
   * read from one snapshot, so appends made meanwhile are neither read nor mistaken for damage.
   * Resolves with the number of events read and the log's digest after them.
   */
  async verify(): Promise<{ events: number; digest: string }> {
    this.#assertOpen()
    // A snapshot of a damaged log reads what is left; verify says it is not whole.
    if (this.#damage !== undefined) throw this.#damage
    // Not after the pending appends: every group is one atomic batch with its head, so a snapshot
    // taken now is whole, and waiting for the appends to stop could wait as long as they go on.
    return this.#reading(() => this.#verify())
  }

  async #verify(): Promise<{ events: number; digest: string }> {
    const snapshot = this.#db.snapshot()
    try {
      const storedHead = await this.#db.get(keys.head, { snapshot })
      const head: Head = storedHead === undefined ? { highWater: 0, chain: EMPTY_CHAIN } : headRecord(decodeRecord<unknown>(storedHead, 'head'))
      // A backup's point must be a point of this log: its digest is the log's digest at its high-water.
      const storedPoint = await this.#db.get(keys.backup, { snapshot })
      let points: BackupPoint[] = []
      let pointProblem: unknown
      try {
        points = storedPoint === undefined ? [] : decodeBackupPoints(storedPoint, head.highWater)
      } catch (error) {
        pointProblem = error
      }
      // The log's digest at each point's high-water, as the pass reaches it.
      const pointDigests = new Map<number, string>(points.some((point) => point.highWater === 0) ? [[0, logDigest(0, EMPTY_CHAIN)]] : [])
      const pointSeqs = new Set(points.map((point) => point.highWater))
      const db = this.#db
      let audit: IndexAudit | undefined = await IndexAudit.start({
        getMany: (keys) => db.getMany(keys, { snapshot }),
        keys: (range) => batchesOf(db.keys({ ...range, snapshot })),
        entries: (range) => batchesOf(db.iterator({ ...range, snapshot })),
      }, INDEX_FORMAT)
      // Damage to the facts is reported first (it names a seq): an index finding waits for the pass to end.
      let finding: unknown
      const found = (error: unknown) => {
        finding = error
        audit = undefined
      }
      const observe = (seq: number, event: RuntimeEvent): Promise<void> | undefined => {
        try {
          return audit?.observe(seq, event)?.catch(found)
        } catch (error) {
          found(error)
          return undefined
        }
      }
      let chain: Uint8Array = EMPTY_CHAIN
      let expected = 1
      const window: { seq: number; id: string; chain: Uint8Array }[] = []
      // A fact with no id record under the id its bytes hold: either the record was lost, or the fact's
      // id was changed. The next fact tells which: its record still agrees with the recomputed chain
      // only if the fact's bytes are the ones the chain was made of.
      let unindexed: { seq: number; problem: FactstateError } | undefined
      const decide = (chainContinues: boolean): never => {
        const { seq, problem } = unindexed as { seq: number; problem: FactstateError }
        throw chainContinues ? problem : new FactstateError('LOG_CORRUPT', `event ${seq} does not match its digest chain`, { details: { seq } })
      }
      const checkWindow = async () => {
        if (window.length === 0) return
        const stored = await this.#db.getMany(
          window.map((item) => keys.eventId(item.id)),
          { snapshot },
        )
        window.forEach((item, index) => {
          const problem = this.#idRecordProblem(item.id, item.seq, item.chain, stored[index])
          if (unindexed !== undefined) decide(problem === undefined)
          if (problem === undefined) return
          if (stored[index] !== undefined) throw problem
          unindexed = { seq: item.seq, problem }
        })
        window.length = 0
      }
      for await (const entries of batchesOf(this.#db.iterator({ gte: keys.eventLow, lt: keys.eventHigh, snapshot }))) {
        for (const [key, bytes] of entries) {
          const seq = eventSeq(key)
          if (seq !== expected) {
            throw new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
          }
          if (seq > head.highWater) {
            throw new FactstateError('LOG_CORRUPT', `event ${seq} lies beyond the recorded high-water ${head.highWater}`, { details: { seq } })
          }
          const event = decodeEvent(bytes, seq)
          chain = chainStep(chain, seq, bytes)
          if (pointSeqs.has(seq)) pointDigests.set(seq, logDigest(seq, chain))
          window.push({ seq, id: event.id, chain })
          if (window.length >= 1024) await checkWindow()
          const reading = observe(seq, event)
          if (reading !== undefined) await reading
          expected += 1
        }
      }
      await checkWindow()
      if (unindexed !== undefined) decide(equalBytes(chain, head.chain))
      if (expected - 1 !== head.highWater) {
        throw new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
      }
      if (!equalBytes(chain, head.chain)) {
        throw new FactstateError('LOG_CORRUPT', 'the digest chain does not match the head', { details: { seq: head.highWater } })
      }
      if (finding !== undefined) throw finding
      if (pointProblem !== undefined) throw pointProblem
      for (const point of points) {
        if (pointDigests.get(point.highWater) !== point.digest) throw damagedPoint(`its digest is not the log's digest at its high-water ${point.highWater}`)
      }
      await audit?.finish(head.highWater)
      return { events: head.highWater, digest: logDigest(head.highWater, chain) }
    } finally {
      await snapshot.close()
    }
  }

  /**
   * Streams stored events in seq order, from `from` (default 1) up to `to` (default: the
   * high-water when the call started). Memory stays flat whatever the size of the log. With
   * `follow: true` it goes on past the high-water: each event as it becomes durable, up to `to`
   * (default: until the log closes, or a `break`). A follower more than 16,384 events (or 16 MiB of
   * them) behind reads them back from the log. Leave a reader part-way with `break` or `return()` to
   * free its LevelDB iterator at once. A `from` past the log's end (more than its high-water + 1: a
   * seq this log never reached, such as a client's from another log) is refused, follow or not,
   * `LOG_INVALID_ARGUMENT` with `details: { field: 'from', highWater }`, unless a `to` below it makes
   * the range empty (that reads nothing, as it does within the log); `highWater + 1` is the next
   * fact, where a follower waits for it. A snapshot's end is the log's when it was taken: there, a seq
   * the log reached since is refused too, with `details.snapshotOf` (the log's path) beside
   * `highWater`: a snapshot of it taken later holds every fact that was durable then, so it tells
   * whether the log has the seq.
   *
   * @example
   * ```ts
   * for await (const { seq, event } of log.events({ from: Math.max(1, log.head().highWater - 99) })) console.log(seq, event.fact.type)
   * for await (const { event } of log.events({ from: log.head().highWater + 1, follow: true })) show(event)
   * ```
   */
  events(
    options: {
      /** The first seq to read, a whole number from 1 (default 1). */
      from?: number | undefined
      /** The last seq to read, a whole number from 0 (default: the high-water now; with `follow`, none). */
      to?: number | undefined
      /** Go on past the high-water, yielding each event as it becomes durable (refused on a snapshot). */
      follow?: boolean | undefined
      /** Only this session's events (their seqs are still the log's); a follower decodes no other. */
      sessionId?: string | undefined
    } = {},
  ): AsyncGenerator<StoredEvent, void, undefined> {
    // Checked and bounded at the call, not at the first `next()`: appends made before the reader
    // starts are not read, and bad bounds are refused where they are given.
    this.#assertOpen()
    // Each read once; a misspelt bound (`fromSeq`) is refused, not read as no bound.
    const { from = 1, to = Number.MAX_SAFE_INTEGER, follow, sessionId } = readOptions(options, ['from', 'to', 'follow', 'sessionId'], { call: 'events()', code: 'LOG_INVALID_ARGUMENT', details: fieldDetails })
    // `to` itself, not what is left of it past the high-water: valid or not whatever the log holds (`from` past the log's end is refused below).
    if (!Number.isSafeInteger(from) || (from as number) < 1 || !Number.isSafeInteger(to) || (to as number) < 0) {
      const field = !Number.isSafeInteger(from) || (from as number) < 1 ? 'from' : 'to'
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'events() takes integer bounds: from at least 1, to at least 0', { details: { field } })
    }
    if (follow !== undefined && typeof follow !== 'boolean') {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'events() takes follow as a boolean', { details: { field: 'follow' } })
    }
    // Past the next fact: a seq this log has not reached, most likely another log's (a client's
    // Last-Event-ID from before its directory was reset or put back from a backup). A follower would
    // wait in silence until the log got there, and then yield facts the seq never named.
    // A snapshot's end is the log's when it was taken: a seq past it may be the live log's, read later.
    // A `to` below `from` reads nothing, wherever `from` is (nothing waited for, nothing yielded): not refused.
    const { highWater } = this.#state.head
    if ((from as number) > highWater + 1 && (from as number) <= (to as number)) {
      const which =
        this.#snapshotOf === undefined
          ? `the log, whose high-water is ${highWater}: a seq from another log (one reset or put back from a backup)?`
          : `this snapshot of the log at ${this.#snapshotOf}, whose high-water is ${highWater}: a seq the log reached after the snapshot was taken (take a later one), or one from another log (one reset or put back from a backup)?`
      throw new FactstateError(
        'LOG_INVALID_ARGUMENT',
        `events(): from ${from as number} is past the end of ${which} ${highWater === 0 ? 'Read from 1 (the first fact)' : `Read from 1, or from at most ${highWater + 1} (the next fact)`}`,
        // On a snapshot, `snapshotOf` tells its end from the log's: the log there may hold the seq (a later snapshot tells).
        { details: this.#snapshotOf === undefined ? { field: 'from', highWater } : { field: 'from', highWater, snapshotOf: this.#snapshotOf } },
      )
    }
    if (sessionId !== undefined && !idSchema.safeParse(sessionId).success) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'events() takes sessionId as a session id: 1–128 characters from [A-Za-z0-9._:-]', { details: { field: 'sessionId' } })
    }
    const session = sessionId as string | undefined
    // A follower of a snapshot would wait for facts that never come.
    if (follow === true && this.#snapshotOf !== undefined) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `a snapshot gets no new facts, so it cannot be followed: follow the log itself in the process that has it open, or take another snapshot of ${this.#snapshotOf} later`, {
        details: { field: 'follow' },
      })
    }
    // No closure is made here (see `unfollowing`): the resources must not lead back to the generator.
    const reader: ReaderResources = {}
    let generator: AsyncGenerator<StoredEvent, void, undefined>
    if (follow === true) {
      // Taken now: an event made durable from here on reaches the follower, whenever it starts reading.
      const follower = new Follower(session)
      this.#followers.add(follower)
      reader.unfollow = unfollowing(this.#followers, follower)
      generator = this.#follow(from as number, to as number, follower, reader)
      stoppingFirst(generator, follower, reader.unfollow)
    } else {
      generator = this.#eventsBetween(from as number, Math.min(to as number, highWater), reader, session)
    }
    // Unregistered as the reader ends (the reader is its own token): an ended reader has nothing left to free.
    droppedReaders.register(generator, reader, reader)
    return generator
  }

  async *#eventsBetween(from: number, to: number, reader: ReaderResources, sessionId: string | undefined): AsyncGenerator<StoredEvent, void, undefined> {
    try {
      if (sessionId !== undefined) {
        yield* this.#sessionEventsBetween(from, to, sessionId)
        return
      }
      for await (const { events } of this.#scan(from, to, EVENTS_CHUNK, reader)) yield* events
    } finally {
      droppedReaders.unregister(reader)
    }
  }

  /**
   * One session's events `from`..`to`, in seq order, through its indexes instead of the whole log:
   * its runs (the run index), each with one invocation, whose facts the invocation index lists. A
   * session's runs follow one another, so their spans of seqs seldom overlap: each run is read on its
   * own, `EVENTS_CHUNK` facts at a time, and only runs whose spans overlap (appended side by side) are
   * read together and put in seq order.
   */
  async *#sessionEventsBetween(from: number, to: number, sessionId: string): AsyncGenerator<StoredEvent, void, undefined> {
    const spans = (await this.#runList(sessionId))
      .filter((run) => run.lastSeq >= from && run.openedSeq <= to)
      .sort((a, b) => a.openedSeq - b.openedSeq)
    for (let first = 0; first < spans.length; ) {
      let end = first + 1
      let last = (spans[first] as RunSummary).lastSeq
      while (end < spans.length && (spans[end] as RunSummary).openedSeq <= last) last = Math.max(last, (spans[end++] as RunSummary).lastSeq)
      if (end === first + 1) {
        const { invocationId } = spans[first] as RunSummary
        for (let after = from - 1; after < to; ) {
          const stored = await this.#invocationStored(invocationId, after, to, EVENTS_CHUNK)
          for (const { seq, bytes } of stored) yield { seq, event: decodeEvent(bytes, seq) }
          if (stored.length < EVENTS_CHUNK) break
          after = (stored.at(-1) as { seq: number }).seq
        }
      } else {
        const stored: { seq: number; bytes: Uint8Array }[] = []
        for (const run of spans.slice(first, end)) stored.push(...(await this.#invocationStored(run.invocationId, from - 1, to)))
        stored.sort((a, b) => a.seq - b.seq)
        for (const { seq, bytes } of stored) yield { seq, event: decodeEvent(bytes, seq) }
      }
      first = end
    }
  }

  /**
   * The events `from`..`to` as they become durable: what the log holds is read from it, then each
   * group commit's events are taken from the follower's buffer (decoded afresh from their stored
   * bytes, as a read from the log would be). A follower that fell behind by more than
   * `FOLLOW_BUFFER` events, or `FOLLOW_BUFFER_BYTES` of them, reads them from the log instead.
   */
  async *#follow(from: number, to: number, follower: Follower, reader: ReaderResources): AsyncGenerator<StoredEvent, void, undefined> {
    let next = from
    try {
      while (next <= to) {
        if (follower.stopped) return
        const followed = follower.shift()
        if (followed !== undefined) {
          if (followed.seq < next) continue
          if (followed.seq > next) {
            // Not the next one (the buffer was filled while the log was read up to an older head): read the rest from the log.
            follower.letGo()
            continue
          }
          if (followed.wanted) yield { seq: followed.seq, event: decodeEvent(followed.bytes, followed.seq) }
          next += 1
          continue
        }
        const head = follower.closed ? -1 : this.#state.head.highWater
        if (follower.lagging && next <= head) {
          // From here on every group commit lands in the buffer, and holds only events after `head` (read below).
          follower.lagging = false
          try {
            const last = Math.min(to, head)
            if (follower.sessionId === undefined) {
              for await (const { events } of this.#scan(next, last, EVENTS_CHUNK, reader)) {
                for (const event of events) {
                  yield event
                  next = event.seq + 1
                }
              }
            } else {
              // One session's: through its indexes, as a reader without follow reads it.
              for await (const event of this.#sessionEventsBetween(next, last, follower.sessionId)) {
                yield event
                next = event.seq + 1
              }
              next = Math.max(next, last + 1)
            }
          } catch (error) {
            // The close came while it read from the log: it names its place, as one far behind does.
            if (isFactstateError(error, 'LOG_CLOSED')) throw caughtUpTo(next - 1, error)
            throw error
          }
          continue
        }
        // A failed log (LOG_IO) makes nothing durable any more: a reader that has read every durable
        // event ends with its failure, as every other call does, rather than wait (or, at the close,
        // end as if the log had closed normally).
        if (this.#failed && !(follower.lagging && next <= this.#state.head.highWater)) throw this.#failed
        if (follower.closed) {
          if (follower.lagging && next <= this.#state.head.highWater && next <= to) throw caughtUpTo(next - 1)
          return
        }
        follower.lagging = false
        await follower.next()
      }
    } finally {
      this.#followers.delete(follower)
      droppedReaders.unregister(reader)
    }
  }

  /**
   * For a snapshot (`openSnapshot`), the absolute path of the log it copies; undefined for a log
   * opened with `open`, which is its own.
   */
  get snapshotOf(): string | undefined {
    return this.#snapshotOf
  }

  /**
   * Where this log was copied, when it is a backup made by `EventLog.backup` (or a log put back from
   * one): `{ highWater, digest, takenAt }`, the log's point when the copy was taken. A backup opened as
   * a log has gone back to that point: what its sessions did after it (tool calls included) is not in
   * it, so an `Engine` refuses the next run of each session that has not run since
   * (`RUN_RECONCILIATION_REQUIRED` with `details.restored`) until one is started with
   * `work.allowRestored: true`. `undefined` for a log that was never a backup.
   */
  restoredFrom(): BackupPoint | undefined {
    this.#assertOpen()
    const point = this.#backupPoints[this.#backupPoints.length - 1]
    return point === undefined ? undefined : { ...point }
  }

  /**
   * The index format the log is marked with (see `INDEX_FORMAT`): what tells which versions open it.
   * 6 once it holds a provider's opaque state (`output.reasoningDetails`, a call's `extraContent`:
   * 0.10.0 and later open it, 0.9.x refuses it), 5 otherwise for a log 0.9.0 or later wrote to or
   * opened (0.9.x opens it too), lower for a log no version since 0.9.0 opened; `undefined` for a log
   * nothing was written to yet. For a snapshot (`openSnapshot`), the mark of the log it copies when
   * the copy was taken (a copy of a log older than 0.9.0 is marked 5 as it is opened; the log is not).
   *
   * @example
   * ```ts
   * const snapshot = await EventLog.openSnapshot('./.factstate/app')
   * if ((snapshot.indexFormat() ?? 0) > 5) console.log('0.9.x will refuse this log')
   * await snapshot.close()
   * ```
   */
  indexFormat(): number | undefined {
    this.#assertOpen()
    const format = this.#snapshotOf === undefined ? this.#format : this.#formatFound
    return format === 0 ? undefined : format
  }

  /** A run's index record and its invocation's, for its key `key` in the run index; `LOG_CORRUPT` when either is missing. */
  #runRecords(sessionId: string, runId: string, key: string): { run: RunRecord; record: InvocationRecord } {
    const run = this.#state.runNow(sessionId, runId)
    const record = run === undefined ? undefined : this.#state.invocationNow(run.invocationId)
    if (run === undefined || record === undefined) throw new FactstateError('LOG_CORRUPT', `run ${sessionId}/${runId} has no invocation record`, { details: { key } })
    return { run, record }
  }

  async #restoredSince(sessionId: string): Promise<BackupPoint | undefined> {
    this.#assertOpen()
    if (this.#backupPoints.length === 0 || this.#ranSinceBackup.has(sessionId)) return undefined
    const runs = await this.#runList(sessionId)
    const point = this.#pointSince(runs.length === 0 ? undefined : Math.max(...runs.map((run) => run.openedSeq)))
    // Once a session has run since the last point it always has: every later admission skips the read.
    if (point === undefined && runs.length > 0) {
      if (this.#ranSinceBackup.size >= CACHE_LIMIT) this.#ranSinceBackup.clear()
      this.#ranSinceBackup.add(sessionId)
    }
    return point
  }

  /**
   * For a session whose last run opened at `lastOpened`: the first backup point at or after it (the
   * session has not run since, so what it did from then on may be missing), undefined when it ran after
   * every point. A session the backup does not know of (no run) may have run after it too, but nothing
   * in the log says so.
   */
  #pointSince(lastOpened: number | undefined): BackupPoint | undefined {
    if (lastOpened === undefined) return undefined
    const point = this.#backupPoints.find((candidate) => candidate.highWater >= lastOpened)
    return point === undefined ? undefined : { ...point }
  }

  /** The current high-water (the seq of the last durable event, 0 for an empty log) and the log digest (`sha256:<hex>`), without reading events. */
  head(): { highWater: number; digest: string } {
    this.#assertOpen()
    const { highWater, chain } = this.#state.head
    return { highWater, digest: logDigest(highWater, chain) }
  }

  /**
   * The error this log failed with, `LOG_IO` (a full disk, its directory removed: see the README's
   * LOG_IO; `LOG_CORRUPT` where LevelDB found its own files damaged as it wrote), or `undefined`
   * while it has not failed. A failed log makes nothing durable any more and refuses
   * every call but `close()` with that error; this reads it without a call to catch, for a health
   * check. It stays readable after `close()` (undefined for a log that closed without failing), and
   * never throws.
   */
  failure(): FactstateErrorOf<'LOG_IO' | 'LOG_CORRUPT'> | undefined {
    return this.#failed as FactstateErrorOf<'LOG_IO' | 'LOG_CORRUPT'> | undefined
  }

  /**
   * Waits for pending appends, then closes. Later calls fail with `LOG_CLOSED`. Closing twice is
   * harmless. `LOG_IO` when the log's head could not be recorded for the next open to check it
   * against (the anchor, or under `os` durability the sync before it): the log is closed all the
   * same and every acknowledged fact stays, but the next open checks less (a second call resolves).
   *
   * A tool call an engine started through this log that has not settled (one that ignores its abort
   * signal) keeps the directory locked after `close()` resolves: LevelDB stays open (appends are
   * refused all the same) until the tool's promise settles, so that no open, in this process or
   * another, finds its run cut short while its effect may still happen. An open here meanwhile is
   * `LOG_WRITER_BUSY` with `details.toolsRunning` (with `waitMs`, it waits). A tool that never
   * settles keeps the directory locked until the process ends.
   */
  close(): Promise<void> {
    // Every call shares one shutdown: a second close resolves only once the directory is free (or,
    // with a tool still running past the grace, once the first did: see `#shutdown`), and leaves a
    // failure to record the head to the call it was reported to.
    if (this.#closing !== undefined) {
      return this.#closing.catch((error: unknown) => {
        if (error !== this.#headUnrecorded) throw error
      })
    }
    // Until the directory is free, a second open here is told to await this close.
    this.#claim.closing()
    this.#closing = this.#shutdown()
    // The log refuses appends from here on (#shutdown set #closed): what is told to stop can write nothing more.
    const stopped = new FactstateError('LOG_CLOSED', 'the log was closed')
    const internals = internalsOf.get(this)
    for (const actor of internals?.onClose ?? []) {
      try {
        actor.stop(stopped)
      } catch {
        // A stop that throws must not keep the log from closing.
      }
    }
    internals?.onClose.clear()
    return this.#closing
  }

  /** See `LogInternals.lease`. */
  #lease(): () => void {
    if (this.#storeClosing) return noop
    this.#tools += 1
    let released = false
    return () => {
      if (released) return
      released = true
      this.#tools -= 1
      if (this.#lingering) this.#claim.running(this.#tools)
      if (this.#tools === 0) this.#toolsSettled?.()
    }
  }

  async #shutdown(): Promise<void> {
    this.#closed = true
    // Appends made before the close and waiting behind a source check are written too, as promised.
    while (this.#ordered) await this.#ordered
    while (this.#flushing) await this.#flushing
    await this.#idsBuild
    this.#listeners.clear()
    // Every append is written or refused by now: a follower ends once it has read what is in its buffer.
    for (const follower of this.#followers) follower.close()
    this.#followers.clear()
    clearTimeout(this.#anchorTimer)
    this.#anchorTimer = undefined
    // A refresh under way finishes first: the two would write the same temporary file.
    await this.#anchoring
    // A tool its engines started still runs (it ignored its abort signal): its effect may still
    // happen. The directory stays locked, LevelDB open and the claim held, until it settles, so that no
    // open (here, or in another process) finds its run cut short and records it outcome_unknown while
    // it runs. A tool that heeds its signal (aborted as the close began) settles within the grace
    // and the close then frees the directory as usual; past it the close resolves all the same:
    // appends are refused already, and a tool that never settles must not hang the application's
    // shutdown (the directory is then freed as the process ends).
    if (this.#tools > 0) {
      const settled = new Promise<void>((resolve) => {
        this.#toolsSettled = resolve
      })
      let graceTimer: ReturnType<typeof setTimeout> | undefined
      const inGrace = await Promise.race([settled.then(() => true), new Promise<false>((resolve) => (graceTimer = setTimeout(() => resolve(false), CLOSE_TOOL_GRACE_MS)))])
      clearTimeout(graceTimer)
      if (inGrace) return this.#closeStore()
      this.#lingering = true
      this.#claim.running(this.#tools)
      // What this later close cannot record (the head) is told to nobody: the next open checks less, never wrongly.
      void settled.then(() => this.#closeStore()).catch(() => undefined)
      return
    }
    await this.#closeStore()
  }

  /** LevelDB's close, the head's anchor and the id filter, then the directory freed: the end of `#shutdown`. */
  async #closeStore(): Promise<void> {
    this.#storeClosing = true
    // Why the head was not recorded at this close, when it was not: reported once the log is closed.
    let unrecorded: FactstateError | undefined
    try {
      let synced = false
      // A head the anchor already records (a log opened to be read) needs neither the sync nor the
      // anchor; a snapshot's copy is removed below.
      if (!this.#failed && this.#snapshotOf === undefined && this.#state.head.highWater !== this.#anchoredAt) {
        // The anchor promises the facts it counts are on the disk: under `os` durability they may
        // not be yet, and one synced write makes LevelDB sync its write-ahead log first.
        // Without that sync there is no anchor: an older one (or none) checks less, never wrongly.
        synced =
          this.#durability === 'sync' ||
          this.#state.head.highWater === 0 ||
          (await this.#db.put(keys.head, encodeRecord(this.#state.head), { sync: true }).then(
            () => true,
            (error: unknown) => {
              unrecorded = logIo(
                `the log was closed, but its facts could not be synced to the disk (${causeMessages(error)}), so its head (${this.#state.head.highWater} facts) was not recorded: under 'os' durability, facts appended since the last sync may not survive a power loss, and the next open checks the log against the head recorded before (if any), so it cannot tell that such facts were lost`,
                error,
                { location: this.#location },
              )
              return false
            },
          ))
      }
      // Closing first: LevelDB then finishes writing out a full memtable whose write-ahead log the
      // synced write above did not cover (it syncs only the current one), and syncs that table.
      await this.#db.close()
      const failed = synced ? await this.#writeAnchor() : undefined
      if (failed !== undefined) {
        unrecorded = logIo(
          `the log was closed, but its head (${this.#state.head.highWater} facts) could not be recorded in ${ANCHOR_FILE} (${causeMessages(failed)}): every acknowledged fact is stored, but the next open checks the log against the head recorded before (if any), so it cannot tell that facts after that one were lost from LevelDB's write-ahead log`,
          failed,
          { path: join(this.#location, ANCHOR_FILE) },
        )
      }
      if (this.#snapshotOf === undefined) await this.#saveIds()
    } finally {
      await this.#directory?.handle?.close().catch(() => undefined)
      // The copy is this log's own: nothing else has it open, and nobody is told its path.
      if (this.#snapshotOf !== undefined) {
        await rm(this.#location, { recursive: true, force: true }).catch(() => undefined)
        forgetCopy(this.#location)
      }
      this.#claim.release()
    }
    if (unrecorded !== undefined) {
      this.#headUnrecorded = unrecorded
      throw unrecorded
    }
  }
}

/** `details` of a refused option of a log call: `{ field }`, the option named (as given, when it is not one the call takes). */
const fieldDetails = (field: string): { field: string } => ({ field })

/** A read's id argument that is not an id: `LOG_INVALID_ARGUMENT` saying the rule, with `details.field`. */
function notAnId(call: string, field: 'sessionId' | 'runId' | 'invocationId', value: unknown): FactstateError {
  // A string that is no id (a thread id that is an email address) is told how to make one of it.
  return new FactstateError('LOG_INVALID_ARGUMENT', `${call}: ${field} must be an id, 1–128 characters from [A-Za-z0-9._:-], not ${shown(value)}${idMappingFor(value)}`, { details: { field } })
}

/** A run whose `invocation.opened` records a parent, as the child index keeps it. */
interface ChildEntry {
  operationId: string
  sessionId: string
  invocationId: string
}

/** Adds `child` to the child index `index`, once (a run committed while the index was built may be read by the build too). */
function addChild(index: Map<string, ChildEntry[]>, child: ChildEntry): void {
  const list = index.get(child.operationId)
  if (list === undefined) index.set(child.operationId, [child])
  else if (!list.some((known) => known.invocationId === child.invocationId)) list.push(child)
}

/** The child index entry of `event`, when it is an `invocation.opened` that records a parent. */
function childEntryOf(event: RuntimeEvent): ChildEntry | undefined {
  const { fact, invocation } = event
  const operationId = fact.type === 'invocation.opened' ? parentOperationIdOf(fact.input) : null
  return operationId === null ? undefined : { operationId, sessionId: invocation.sessionId, invocationId: invocation.invocationId }
}

/** The member name `parent` as msgpack writes it (a fixstr of 6): a stored fact without these bytes records no parent. */
const PARENT_NAME = Buffer.from([0xa6, ...Buffer.from('parent', 'latin1')])

const holdsParentName = (bytes: Uint8Array): boolean => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).indexOf(PARENT_NAME) !== -1

/** The `latestOpenedSeq` of a session record as stored, `undefined` for a record without it or one that cannot be read. */
function latestOpenedSeqOf(record: Uint8Array, sessionId: string): number | undefined {
  try {
    return indexRecord<SessionRecord>(record, `session ${sessionId}`, 'session').latestOpenedSeq
  } catch (error) {
    if (isFactstateError(error, 'LOG_CORRUPT')) return undefined
    throw error
  }
}

/** The run of `sessionId` whose `invocation.opened` is `bytes`, stored at `seq`; `undefined` when missing, damaged or no such fact. */
function openedRunOf(bytes: Uint8Array | undefined, seq: number, sessionId: string): string | undefined {
  if (bytes === undefined) return undefined
  try {
    const { fact, invocation } = decodeEvent(bytes, seq)
    return fact.type === 'invocation.opened' && invocation.sessionId === sessionId ? invocation.runId : undefined
  } catch (error) {
    if (isFactstateError(error, 'LOG_CORRUPT')) return undefined
    throw error
  }
}

/** A run as `log.runs` lists it (without `parent`), from its run record and its invocation's record. */
function runSummaryOf(runId: string, run: RunRecord, record: InvocationRecord): RunSummary {
  return {
    runId,
    turnId: record.invocation.turnId,
    invocationId: run.invocationId,
    kind: record.inputKind,
    ...(run.source === undefined ? {} : { sourceRunId: run.source.runId }),
    openedSeq: record.openedSeq,
    lastSeq: record.lastSeq,
    terminal: record.terminal,
    ...(record.outcome === undefined ? {} : { outcome: record.outcome }),
  }
}

/** The session and run ids of a run record's key, `r!<sessionId>!<runId>` (ids hold no `!`). */
function splitRunKey(key: string): [string, string] {
  const rest = key.slice(keys.runLow.length)
  const at = rest.indexOf('!')
  return [rest.slice(0, at), rest.slice(at + 1)]
}
