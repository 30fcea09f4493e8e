import { open as openFile, readFile, rename } from 'node:fs/promises'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { FactstateError } from '../errors.js'
import { id as idSchema } from '../facts/schema.js'
import type { RunBoundary, RuntimeEvent, StoredEvent } from '../facts/types.js'
import { EMPTY_CHAIN, chainStep, logDigest, runChainStart, runDigest } from './digest.js'
import { decodeEvent, decodeRecord, encodeEvent, encodeRecord, validateEvent } from './encoding.js'
import { keys, seqOfEventKey } from './keys.js'
import {
  type InvocationProjection,
  type InvocationRecord,
  type RunRecord,
  type SessionRecord,
  applyToInvocation,
  applyToSession,
  emptySession,
  projectInvocation,
} from './projection.js'
import { claimDirectory } from './writer-lock.js'

/** How an acknowledged append is made durable: `sync` (default) fsyncs each group commit; `os` leaves it to the OS. */
export type Durability = 'sync' | 'os'

/** Options of {@link EventLog.open}. */
export interface EventLogOptions {
  durability?: Durability
}

/** Where a run stands, as {@link EventLog.runSource} reports it. */
export interface RunSource {
  boundary: RunBoundary
}

/** Every event of the log up to `highWater`, with the digest at that point. */
export interface LogPrefix {
  highWater: number
  digest: string
  events: StoredEvent[]
  projectInvocation(invocationId: string): InvocationProjection
}

/** A read-only view of the log's state inside a group commit, for checks that must be atomic with an append. */
export interface AppendView {
  invocation(invocationId: string): Promise<InvocationRecord | undefined>
  session(sessionId: string): Promise<SessionRecord>
  run(sessionId: string, runId: string): Promise<RunRecord | undefined>
  claim(claimId: string): Promise<string | undefined>
}

/** A check run inside the group commit, before its events are staged (it sees the log as it stands); throwing refuses them. */
export type Precondition = (view: AppendView) => Promise<void> | void

/** The engine-facing surface of a log: not part of the public API. */
export interface LogInternals {
  appendAll(events: RuntimeEvent[], precondition?: Precondition): Promise<number[]>
  invocationRecord(invocationId: string): Promise<InvocationRecord | undefined>
  sessionRecord(sessionId: string): Promise<SessionRecord>
  invocationEvents(invocationId: string, upTo?: number): Promise<StoredEvent[]>
  lineage(boundary: RunBoundary): Promise<StoredEvent[]>
  openInvocations(): InvocationRecord[]
  /** Invocations driven by a live actor of this process; recovery leaves them alone. */
  live: Set<string>
  subscribe(listener: (events: StoredEvent[]) => void): () => void
  location: string
}

const internalsOf = new WeakMap<EventLog, LogInternals>()

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

interface PendingEntry {
  events: RuntimeEvent[]
  precondition: Precondition | undefined
  resolve: (seqs: number[]) => void
  reject: (error: unknown) => void
}

/** Facts newer than this many seqs are checked for continuity on every open. */
const TAIL_KEYS_CHECKED = 65_536
/** The last facts whose chain is recomputed on every open. */
const TAIL_CHAIN_CHECKED = 1_024
const MAX_GROUP = 2_048
/**
 * The head as the last clean close left it, beside LevelDB's files. LevelDB drops a damaged or
 * cut tail of its write-ahead log on open without an error; an open that finds fewer events than
 * a clean close recorded knows acknowledged facts were lost.
 */
const ANCHOR_FILE = 'FACTSTATE-HEAD'
const ANCHOR_PATTERN = /^factstate-head v1 (\d+) ([0-9a-f]{64})\n$/
const CACHE_LIMIT = 50_000

type Db = ClassicLevel<string, Uint8Array>

/** Changes made by one group commit (or one entry of it), not yet durable. */
class Staging {
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  readonly claims = new Map<string, string>()
  readonly ids = new Map<string, { seq: number; bytes: Uint8Array }>()
  readonly events: { seq: number; bytes: Uint8Array; event: RuntimeEvent; chain: Uint8Array }[] = []
  head: Head

  constructor(
    readonly parent: Staging | undefined,
    readonly base: CommittedState,
  ) {
    this.head = parent ? { ...parent.head } : { ...base.head }
  }

  async invocation(id: string): Promise<InvocationRecord | undefined> {
    return this.invocations.get(id) ?? (this.parent ? this.parent.invocation(id) : this.base.invocation(id))
  }
  async session(id: string): Promise<SessionRecord> {
    return this.sessions.get(id) ?? (this.parent ? this.parent.session(id) : this.base.session(id))
  }
  async run(sessionId: string, runId: string): Promise<RunRecord | undefined> {
    const key = keys.run(sessionId, runId)
    return this.runs.get(key) ?? (this.parent ? this.parent.run(sessionId, runId) : this.base.run(sessionId, runId))
  }
  async claim(id: string): Promise<string | undefined> {
    return this.claims.get(id) ?? (this.parent ? this.parent.claim(id) : this.base.claim(id))
  }
  stagedId(id: string): { seq: number; bytes: Uint8Array } | undefined {
    return this.ids.get(id) ?? this.parent?.stagedId(id)
  }

  mergeInto(target: Staging): void {
    for (const [k, v] of this.invocations) target.invocations.set(k, v)
    for (const [k, v] of this.sessions) target.sessions.set(k, v)
    for (const [k, v] of this.runs) target.runs.set(k, v)
    for (const [k, v] of this.claims) target.claims.set(k, v)
    for (const [k, v] of this.ids) target.ids.set(k, v)
    target.events.push(...this.events)
    target.head = this.head
  }
}

/** What is durable, cached in memory over the LevelDB indexes. */
class CommittedState {
  head: Head = { highWater: 0, chain: EMPTY_CHAIN }
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  readonly claims = new Map<string, string>()

  constructor(private readonly db: Db) {}

  async invocation(id: string): Promise<InvocationRecord | undefined> {
    const cached = this.invocations.get(id)
    if (cached) return cached
    const stored = await this.db.get(keys.invocation(id))
    if (stored === undefined) return undefined
    const record = decodeRecord<InvocationRecord>(stored, `invocation ${id}`)
    this.invocations.set(id, record)
    return record
  }
  async session(id: string): Promise<SessionRecord> {
    const cached = this.sessions.get(id)
    if (cached) return cached
    const stored = await this.db.get(keys.session(id))
    const record = stored === undefined ? emptySession() : decodeRecord<SessionRecord>(stored, `session ${id}`)
    this.sessions.set(id, record)
    return record
  }
  async run(sessionId: string, runId: string): Promise<RunRecord | undefined> {
    const key = keys.run(sessionId, runId)
    const cached = this.runs.get(key)
    if (cached) return cached
    const stored = await this.db.get(key)
    if (stored === undefined) return undefined
    const record = decodeRecord<RunRecord>(stored, `run ${sessionId}/${runId}`)
    record.chain = new Uint8Array(record.chain)
    this.runs.set(key, record)
    return record
  }
  async claim(id: string): Promise<string | undefined> {
    const cached = this.claims.get(id)
    if (cached) return cached
    const stored = await this.db.get(keys.claim(id))
    if (stored === undefined) return undefined
    const value = decodeRecord<string>(stored, `claim ${id}`)
    this.claims.set(id, value)
    return value
  }

  absorb(staging: Staging): void {
    for (const [k, v] of staging.invocations) this.invocations.set(k, v)
    for (const [k, v] of staging.sessions) this.sessions.set(k, v)
    for (const [k, v] of staging.runs) this.runs.set(k, v)
    for (const [k, v] of staging.claims) this.claims.set(k, v)
    this.head = staging.head
    this.trim()
  }

  /** Keeps memory bounded: open invocations and busy sessions stay, the rest is re-read on demand. */
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
    for (const map of [this.runs, this.claims] as Map<string, unknown>[]) {
      if (map.size > CACHE_LIMIT) {
        for (const k of map.keys()) {
          map.delete(k)
          if (map.size <= CACHE_LIMIT / 2) break
        }
      }
    }
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0
}

function levelError(error: unknown): FactstateError {
  const code = (error as { code?: string }).code
  const causeCode = ((error as { cause?: { code?: string } }).cause ?? {}).code
  if (code === 'LEVEL_LOCKED' || causeCode === 'LEVEL_LOCKED') {
    return new FactstateError('LOG_WRITER_BUSY', 'another process holds this log', { cause: error })
  }
  if (code === 'LEVEL_CORRUPTION' || causeCode === 'LEVEL_CORRUPTION') {
    return new FactstateError('LOG_CORRUPT', 'LevelDB reports corruption', { cause: error })
  }
  return new FactstateError('LOG_IO', `LevelDB failed: ${(error as Error).message}`, { cause: error })
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
  readonly #release: () => void
  readonly #location: string
  readonly #listeners = new Set<(events: StoredEvent[]) => void>()
  #pending: PendingEntry[] = []
  #flushing: Promise<void> | undefined
  #closed = false
  #closing: Promise<void> | undefined
  #failed: FactstateError | undefined

  private constructor(db: Db, durability: Durability, release: () => void, location: string) {
    this.#db = db
    this.#durability = durability
    this.#release = release
    this.#location = location
    this.#state = new CommittedState(db)
    const self = this
    internalsOf.set(this, {
      appendAll: (events, precondition) => this.#enqueue(events, precondition),
      invocationRecord: async (id) => {
        this.#assertOpen()
        return this.#state.invocation(id)
      },
      sessionRecord: async (id) => {
        this.#assertOpen()
        return this.#state.session(id)
      },
      invocationEvents: (id, upTo) => this.#invocationEvents(id, upTo),
      lineage: (boundary) => this.#lineage(boundary),
      openInvocations: () => [...this.#state.invocations.values()].filter((r) => r.terminal === null),
      live: new Set(),
      subscribe(listener) {
        self.#listeners.add(listener)
        return () => self.#listeners.delete(listener)
      },
      location,
    })
  }

  /**
   * Opens (creating if needed) the log in `location`. Fails with `LOG_WRITER_BUSY` when another
   * handle, in this process or another, holds it; with `LOG_CORRUPT` when the stored tail is
   * not continuous.
   */
  static async open(location: string, options: EventLogOptions = {}): Promise<EventLog> {
    if (typeof location !== 'string' || location.length === 0 || location.includes('\0')) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'the log location must be a non-empty path')
    }
    const durability = options.durability ?? 'sync'
    if (durability !== 'sync' && durability !== 'os') {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `durability must be 'sync' or 'os', not ${String(durability)}`)
    }
    const claim = await claimDirectory(location)
    const db: Db = new ClassicLevel<string, Uint8Array>(claim.path, { keyEncoding: 'utf8', valueEncoding: 'view' })
    try {
      await db.open()
    } catch (error) {
      claim.release()
      throw levelError(error)
    }
    const log = new EventLog(db, durability, claim.release, claim.path)
    try {
      await log.#load()
    } catch (error) {
      await db.close().catch(() => undefined)
      claim.release()
      throw error instanceof FactstateError ? error : levelError(error)
    }
    return log
  }

  /** Reads the head, checks the continuity of the tail, and caches the open invocations. */
  async #load(): Promise<void> {
    const stored = await this.#db.get(keys.head)
    const head: Head = stored === undefined ? { highWater: 0, chain: EMPTY_CHAIN } : decodeRecord<Head>(stored, 'head')
    head.chain = new Uint8Array(head.chain)
    let expected = head.highWater
    let checked = 0
    for await (const key of this.#db.keys({ gte: keys.eventLow, lt: keys.eventHigh, reverse: true, limit: TAIL_KEYS_CHECKED })) {
      const seq = seqOfEventKey(key)
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
      let seq = from
      for await (const bytes of this.#db.values({ gte: keys.event(from), lte: keys.event(head.highWater) })) {
        decodeEvent(bytes, seq)
        chain = chainStep(chain, seq, bytes)
        seq += 1
      }
      if (!equalBytes(chain, head.chain)) {
        throw new FactstateError('LOG_CORRUPT', `the digest chain of the last ${head.highWater - from + 1} events does not match the head`, {
          details: { seq: head.highWater },
        })
      }
    }
    await this.#checkAnchor(head)
    this.#state.head = head
    for await (const key of this.#db.keys({ gte: keys.openLow, lt: keys.openHigh })) {
      const invocationId = key.slice(2)
      const record = await this.#state.invocation(invocationId)
      if (record === undefined) throw new FactstateError('LOG_CORRUPT', `open invocation ${invocationId} has no record`)
    }
  }

  /** The log must still hold, byte for byte, the head its last clean close recorded (an older anchor is a lower bound). */
  async #checkAnchor(head: Head): Promise<void> {
    let text: string
    try {
      text = await readFile(join(this.#location, ANCHOR_FILE), 'utf8')
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return
      throw new FactstateError('LOG_IO', `the head anchor cannot be read: ${(error as Error).message}`, { cause: error })
    }
    const match = ANCHOR_PATTERN.exec(text)
    if (!match) throw new FactstateError('LOG_CORRUPT', 'the head anchor of the last clean close is unreadable')
    const anchored = Number(match[1])
    if (anchored > head.highWater) {
      throw new FactstateError('LOG_CORRUPT', `the log held ${anchored} events when it was last closed, now ${head.highWater}`, {
        details: { seq: head.highWater + 1 },
      })
    }
    if (anchored === 0) return
    let chain = head.chain
    if (anchored < head.highWater) {
      const stored = await this.#db.get(keys.event(anchored))
      if (stored === undefined) throw new FactstateError('LOG_CORRUPT', `event ${anchored} is missing`, { details: { seq: anchored } })
      chain = await this.#storedChain(decodeEvent(stored, anchored).id, anchored)
    }
    if (Buffer.from(chain).toString('hex') !== match[2]) {
      throw new FactstateError('LOG_CORRUPT', `the digest chain at event ${anchored} differs from the one recorded at the last close`, {
        details: { seq: anchored },
      })
    }
  }

  async #writeAnchor(): Promise<void> {
    const path = join(this.#location, ANCHOR_FILE)
    const { highWater, chain } = this.#state.head
    try {
      const file = await openFile(`${path}.tmp`, 'w')
      try {
        await file.writeFile(`factstate-head v1 ${highWater} ${Buffer.from(chain).toString('hex')}\n`)
        await file.sync()
      } finally {
        await file.close()
      }
      await rename(`${path}.tmp`, path)
    } catch {
      // Without a fresh anchor a later open checks less, never wrongly: an older anchor is a lower bound.
    }
  }

  async #storedChain(eventId: string, seq: number): Promise<Uint8Array> {
    const stored = await this.#db.get(keys.eventId(eventId))
    if (stored === undefined) throw new FactstateError('LOG_CORRUPT', `event ${seq} is not indexed by its id`, { details: { seq } })
    const [indexedSeq, chain] = decodeRecord<[number, Uint8Array]>(stored, `id ${eventId}`)
    if (indexedSeq !== seq) throw new FactstateError('LOG_CORRUPT', `event ${seq} is indexed at ${indexedSeq}`, { details: { seq } })
    return new Uint8Array(chain)
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
  async append(event: RuntimeEvent): Promise<number> {
    const [seq] = await this.appendAll([event])
    return seq as number
  }

  /** Appends events atomically: all of them become durable together, or none is written. */
  async appendAll(events: RuntimeEvent[]): Promise<number[]> {
    if (!Array.isArray(events) || events.length === 0) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'appendAll takes a non-empty array of events')
    }
    return this.#enqueue(events, undefined)
  }

  #enqueue(events: RuntimeEvent[], precondition: Precondition | undefined): Promise<number[]> {
    try {
      this.#assertOpen()
    } catch (error) {
      return Promise.reject(error)
    }
    let validated: RuntimeEvent[]
    try {
      validated = events.map((event) => validateEvent(event))
    } catch (error) {
      return Promise.reject(error)
    }
    return new Promise<number[]>((resolve, reject) => {
      this.#pending.push({ events: validated, precondition, resolve, reject })
      this.#flushing ??= this.#flush()
    })
  }

  async #flush(): Promise<void> {
    // Let every append issued in this tick join the group.
    await new Promise<void>((resolve) => setImmediate(resolve))
    try {
      while (this.#pending.length > 0) {
        const group = this.#pending.splice(0, MAX_GROUP)
        await this.#commitGroup(group)
      }
    } finally {
      this.#flushing = undefined
    }
  }

  async #commitGroup(group: PendingEntry[]): Promise<void> {
    const staging = new Staging(undefined, this.#state)
    const accepted: { entry: PendingEntry; seqs: number[] }[] = []
    const allIds = group.flatMap((entry) => entry.events.map((event) => keys.eventId(event.id)))
    let existing: (Uint8Array | undefined)[]
    try {
      existing = await this.#db.getMany(allIds)
    } catch (error) {
      const failure = levelError(error)
      for (const entry of group) entry.reject(failure)
      return
    }
    const known = new Map<string, Uint8Array>()
    allIds.forEach((key, index) => {
      const value = existing[index]
      if (value !== undefined) known.set(key.slice(2), value)
    })
    for (const entry of group) {
      const local = new Staging(staging, this.#state)
      try {
        if (entry.precondition) await entry.precondition(local)
        const seqs: number[] = []
        for (const event of entry.events) {
          seqs.push(await this.#stageEvent(local, event, known))
        }
        local.mergeInto(staging)
        accepted.push({ entry, seqs })
      } catch (error) {
        entry.reject(error)
      }
    }
    if (staging.events.length > 0) {
      try {
        await this.#write(staging)
      } catch (error) {
        this.#failed = levelError(error)
        for (const { entry } of accepted) entry.reject(this.#failed)
        return
      }
      this.#state.absorb(staging)
    }
    for (const { entry, seqs } of accepted) entry.resolve(seqs)
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
  }

  /** Applies one event to `local`; returns its seq (the original one for an idempotent repeat). */
  async #stageEvent(local: Staging, event: RuntimeEvent, known: Map<string, Uint8Array>): Promise<number> {
    const bytes = encodeEvent(event)
    const staged = local.stagedId(event.id)
    if (staged) {
      if (equalBytes(staged.bytes, bytes)) return staged.seq
      throw new FactstateError('LOG_CONFLICT', `event id ${event.id} is already used by different content`, { details: { seq: staged.seq } })
    }
    const indexed = known.get(event.id)
    if (indexed !== undefined) {
      const [seq] = decodeRecord<[number, Uint8Array]>(indexed, `id ${event.id}`)
      const stored = await this.#db.get(keys.event(seq))
      if (stored !== undefined && equalBytes(stored, bytes)) return seq
      throw new FactstateError('LOG_CONFLICT', `event id ${event.id} is already used by different content`, { details: { seq } })
    }
    const { invocation } = event
    const before = await local.invocation(invocation.invocationId)
    const record = applyToInvocation(before, event, local.head.highWater + 1)
    let run = await local.run(invocation.sessionId, invocation.runId)
    if (event.fact.type === 'invocation.opened') {
      if (run !== undefined) {
        throw new FactstateError('LOG_REJECTED_FACT', `run ${invocation.sessionId}/${invocation.runId} already has invocation ${run.invocationId}`, {
          details: { eventId: event.id },
        })
      }
      const { input } = event.fact
      if (input.kind === 'handoff') {
        const user = await local.claim(input.pause.intent.claimId)
        if (user !== undefined) {
          throw new FactstateError('HANDOFF_CLAIMED', `claim ${input.pause.intent.claimId} was used by ${user}`, { details: { eventId: event.id } })
        }
        local.claims.set(input.pause.intent.claimId, invocation.invocationId)
      }
      const source = input.kind === 'message' ? undefined : input.source
      run = {
        invocationId: invocation.invocationId,
        lastSeq: 0,
        chain: runChainStart(invocation.sessionId, invocation.runId, source?.digest),
        ...(source ? { source: { runId: source.invocation.runId, highWater: source.highWater, digest: source.digest } } : {}),
      }
    } else if (run === undefined || run.invocationId !== invocation.invocationId) {
      throw new FactstateError('LOG_REJECTED_FACT', `run ${invocation.sessionId}/${invocation.runId} does not belong to ${invocation.invocationId}`, {
        details: { eventId: event.id },
      })
    }
    const seq = local.head.highWater + 1
    const chain = chainStep(local.head.chain, seq, bytes)
    local.head = { highWater: seq, chain }
    local.invocations.set(invocation.invocationId, record)
    local.runs.set(keys.run(invocation.sessionId, invocation.runId), { ...run, lastSeq: seq, chain: chainStep(run.chain, seq, bytes) })
    if (event.fact.type === 'invocation.opened' || event.fact.type === 'invocation.ended') {
      local.sessions.set(invocation.sessionId, applyToSession(await local.session(invocation.sessionId), record, event))
    }
    local.ids.set(event.id, { seq, bytes })
    local.events.push({ seq, bytes, event, chain })
    return seq
  }

  async #write(staging: Staging): Promise<void> {
    const batch = this.#db.batch()
    const empty = new Uint8Array(0)
    for (const { seq, bytes, event, chain } of staging.events) {
      batch.put(keys.event(seq), bytes)
      batch.put(keys.eventId(event.id), encodeRecord([seq, chain]))
      batch.put(keys.byInvocation(event.invocation.invocationId, seq), empty)
      if (event.fact.type === 'invocation.opened') batch.put(keys.open(event.invocation.invocationId), empty)
      if (event.fact.type === 'invocation.ended') batch.del(keys.open(event.invocation.invocationId))
    }
    for (const [id, record] of staging.invocations) batch.put(keys.invocation(id), encodeRecord(record))
    for (const [id, record] of staging.sessions) batch.put(keys.session(id), encodeRecord(record))
    for (const [key, record] of staging.runs) batch.put(key, encodeRecord(record))
    for (const [id, user] of staging.claims) batch.put(keys.claim(id), encodeRecord(user))
    batch.put(keys.head, encodeRecord(staging.head))
    await batch.write({ sync: this.#durability === 'sync' })
  }

  async #readEvents(seqs: number[]): Promise<StoredEvent[]> {
    if (seqs.length === 0) return []
    const values = await this.#db.getMany(seqs.map((seq) => keys.event(seq)))
    return seqs.map((seq, index) => {
      const bytes = values[index]
      if (bytes === undefined) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
      return { seq, event: decodeEvent(bytes, seq) }
    })
  }

  async #invocationEvents(invocationId: string, upTo = Number.MAX_SAFE_INTEGER): Promise<StoredEvent[]> {
    this.#assertOpen()
    const seqs: number[] = []
    const prefixLength = keys.byInvocationLow(invocationId).length
    for await (const key of this.#db.keys({ gte: keys.byInvocationLow(invocationId), lt: keys.byInvocationHigh(invocationId) })) {
      const seq = Number.parseInt(key.slice(prefixLength), 16)
      if (seq > upTo) break
      seqs.push(seq)
    }
    return this.#readEvents(seqs)
  }

  /**
   * The events of a run's lineage up to its boundary: the sources it continued from (each up to
   * its own boundary) and then the run itself. The boundary's digest is recomputed from the
   * stored bytes; any difference is `RUN_SOURCE_MISMATCH`.
   */
  async #lineage(boundary: RunBoundary): Promise<StoredEvent[]> {
    this.#assertOpen()
    const { sessionId, runId, invocationId } = boundary.invocation
    const run = await this.#state.run(sessionId, runId)
    if (run === undefined || run.invocationId !== invocationId) {
      throw new FactstateError('RUN_SOURCE_MISMATCH', `run ${sessionId}/${runId} with invocation ${invocationId} is not in the log`)
    }
    const own = await this.#invocationEvents(invocationId, boundary.highWater)
    let chain = runChainStart(sessionId, runId, run.source?.digest)
    for (const { seq, event } of own) chain = chainStep(chain, seq, encodeEvent(event))
    const last = own.at(-1)
    if (!last || last.seq !== boundary.highWater || runDigest(sessionId, runId, boundary.highWater, chain) !== boundary.digest) {
      throw new FactstateError('RUN_SOURCE_MISMATCH', `the boundary of run ${sessionId}/${runId} does not match the log`)
    }
    if (!run.source) return own
    const sourceRun = await this.#state.run(sessionId, run.source.runId)
    if (!sourceRun) throw new FactstateError('LOG_CORRUPT', `source run ${run.source.runId} of ${runId} is missing`)
    const sourceRecord = await this.#state.invocation(sourceRun.invocationId)
    if (!sourceRecord) throw new FactstateError('LOG_CORRUPT', `source invocation ${sourceRun.invocationId} is missing`)
    const earlier = await this.#lineage({ invocation: sourceRecord.invocation, highWater: run.source.highWater, digest: run.source.digest })
    return [...earlier, ...own]
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
    let seq = 1
    if (head.highWater > 0) {
      for await (const bytes of this.#db.values({ gte: keys.event(1), lte: keys.event(head.highWater) })) {
        bytesRead += bytes.length
        if (bytesRead > maxBytes) {
          throw new FactstateError('LOG_PREFIX_TOO_LARGE', `the log holds more than ${maxBytes} bytes of events`)
        }
        events.push({ seq, event: decodeEvent(bytes, seq) })
        seq += 1
      }
    }
    if (events.length !== head.highWater) {
      throw new FactstateError('LOG_CORRUPT', `event ${events.length + 1} is missing`, { details: { seq: events.length + 1 } })
    }
    return {
      highWater: head.highWater,
      digest: logDigest(head.highWater, head.chain),
      events,
      projectInvocation: (invocationId: string) => projectInvocation(events, invocationId),
    }
  }

  /**
   * The boundary of a run: its invocation, the seq of its last fact and a digest over its
   * lineage only (appends elsewhere never change it). `undefined` for a run the log never saw.
   */
  async runSource(sessionId: string, runId: string): Promise<RunSource | undefined> {
    this.#assertOpen()
    for (const [name, value] of [['sessionId', sessionId], ['runId', runId]] as const) {
      if (!idSchema.safeParse(value).success) throw new FactstateError('LOG_INVALID_ARGUMENT', `${name} is not a valid id`)
    }
    const run = await this.#state.run(sessionId, runId)
    if (run === undefined) return undefined
    const record = await this.#state.invocation(run.invocationId)
    if (record === undefined) throw new FactstateError('LOG_CORRUPT', `run ${sessionId}/${runId} has no invocation record`)
    return {
      boundary: { invocation: record.invocation, highWater: run.lastSeq, digest: runDigest(sessionId, runId, run.lastSeq, run.chain) },
    }
  }

  /** Re-reads every event: seq continuity, decoding, the digest chain. `LOG_CORRUPT` names the first bad seq. */
  async verify(): Promise<{ events: number; digest: string }> {
    this.#assertOpen()
    await this.#flushing
    const head = this.#state.head
    let chain: Uint8Array = EMPTY_CHAIN
    let expected = 1
    const window: { seq: number; id: string; chain: Uint8Array }[] = []
    const checkWindow = async () => {
      if (window.length === 0) return
      const stored = await this.#db.getMany(window.map((item) => keys.eventId(item.id)))
      window.forEach((item, index) => {
        const value = stored[index]
        const [seq, indexedChain] = value === undefined ? [undefined, undefined] : decodeRecord<[number, Uint8Array]>(value, `id ${item.id}`)
        if (seq !== item.seq || !indexedChain || !equalBytes(new Uint8Array(indexedChain), item.chain)) {
          throw new FactstateError('LOG_CORRUPT', `event ${item.seq} does not match its digest chain`, { details: { seq: item.seq } })
        }
      })
      window.length = 0
    }
    for await (const [key, bytes] of this.#db.iterator({ gte: keys.eventLow, lt: keys.eventHigh })) {
      const seq = seqOfEventKey(key)
      if (seq !== expected) {
        throw new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
      }
      if (seq > head.highWater) break
      const event = decodeEvent(bytes, seq)
      chain = chainStep(chain, seq, bytes)
      window.push({ seq, id: event.id, chain })
      if (window.length >= 1024) await checkWindow()
      expected += 1
    }
    await checkWindow()
    if (expected - 1 !== head.highWater) {
      throw new FactstateError('LOG_CORRUPT', `event ${expected} is missing`, { details: { seq: expected } })
    }
    if (!equalBytes(chain, head.chain)) {
      throw new FactstateError('LOG_CORRUPT', 'the digest chain does not match the head', { details: { seq: head.highWater } })
    }
    return { events: head.highWater, digest: logDigest(head.highWater, chain) }
  }

  /**
   * Streams stored events in seq order, from `from` (default 1) up to `to` (default: the
   * high-water when the call started). Memory stays flat whatever the size of the log.
   *
   * @example
   * ```ts
   * for await (const { seq, event } of log.events({ from: 100 })) console.log(seq, event.fact.type)
   * ```
   */
  async *events(options: { from?: number; to?: number } = {}): AsyncGenerator<StoredEvent> {
    this.#assertOpen()
    const to = Math.min(options.to ?? Number.MAX_SAFE_INTEGER, this.#state.head.highWater)
    const from = options.from ?? 1
    if (!Number.isSafeInteger(from) || from < 1 || !Number.isSafeInteger(to)) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', 'events() takes positive integer bounds')
    }
    if (to < from) return
    let seq = from
    for await (const bytes of this.#db.values({ gte: keys.event(from), lte: keys.event(to) })) {
      yield { seq, event: decodeEvent(bytes, seq) }
      seq += 1
    }
    if (seq !== to + 1) throw new FactstateError('LOG_CORRUPT', `event ${seq} is missing`, { details: { seq } })
  }

  /** The current high-water and digest, without reading events. */
  head(): { highWater: number; digest: string } {
    this.#assertOpen()
    const { highWater, chain } = this.#state.head
    return { highWater, digest: logDigest(highWater, chain) }
  }

  /** Waits for pending appends, then closes. Later calls fail with `LOG_CLOSED`. Closing twice is harmless. */
  close(): Promise<void> {
    // Every call shares one shutdown: a second close resolves only once the directory is free.
    this.#closing ??= this.#shutdown()
    return this.#closing
  }

  async #shutdown(): Promise<void> {
    this.#closed = true
    while (this.#flushing) await this.#flushing
    this.#listeners.clear()
    try {
      if (!this.#failed) await this.#writeAnchor()
      await this.#db.close()
    } finally {
      this.#release()
    }
  }
}
