/**
 * What `EventLog.verify()` checks beyond the facts and their id records: every other index record
 * rebuilt from the facts, in one pass in seq order, and compared with what is stored. The facts are
 * the truth (their digest chain is checked first); an index record that disagrees with them is
 * damage, `LOG_CORRUPT` with `details.index` naming the key space and `details.key` the record.
 *
 * - `v!` (an invocation's facts): one record per fact, no other. Compared as a multiset through
 *   sums of hashes of the keys, so the pass needs no memory per fact.
 * - `o!` (open invocations): exactly the invocations opened and not ended.
 * - `n!` (invocation records): an ended invocation's record equals its facts replayed; an open
 *   one's equals its facts replayed up to the record's `lastSeq` (records are written when an
 *   invocation opens and ends; earlier versions wrote one after every fact), one per invocation.
 * - `r!` (runs): one per opened invocation, naming it and the boundary it continued from, and (in a
 *   record written since 0.7.0) the operation id of the call that started it, or null.
 * - `c!` (claims): one per successor, naming it.
 * - `s!` (sessions): each equals its facts replayed, one per session.
 * - `a!` (sessions by their latest run): one per session, at the seq of its latest run's
 *   `invocation.opened` (its record's `latestOpenedSeq`), naming it; no other.
 * - `p!` / `q!` (a seal's claim and successor): each names a seal of that claim or successor, and
 *   every seal still pending has both (logs older than these records got them for the seals
 *   pending when they were first opened by a version that writes them, so an older, used seal has
 *   none; such a log may hold two seals of one claim, and the record names one of them).
 * - `i!` (event ids): each fact's record is checked with the fact (by `verify` itself); here, that
 *   there are no more of them than facts.
 *
 * - `h!format`, `h!reservations`, `h!recent` (the format markers): where present, each holds what some version
 *   wrote (a format up to this one's; 1). A log holding a fact that carries the provider's opaque state
 *   (`carriesProviderState`) must be marked at least `PROVIDER_STATE_FORMAT`, as the batch that wrote
 *   the first one marked it: a lower or missing marker would let 0.9.x open the log and take that fact
 *   for damage (reported with `details.seq` the first such fact). `h!backup` (a backup's point) is
 *   checked by `verify` itself: its digest is the log's at its high-water.
 * - every other key: none lies outside the key spaces above (and `h!head`, `e!`).
 *
 * Members that records written by earlier versions lack (`pendingCalls` and `answered` of an
 * invocation record, compared only while it is open; `lastSeq` and `chain` that old run records
 * carry, never compared; `parentOperationId` of a run record, compared only where present) do not count
as damage.
 */
import { isDeepStrictEqual } from 'node:util'
import { FactstateError, messageWithoutCode } from '../errors.js'
import type { RuntimeEvent } from '../facts/types.js'
import { PROVIDER_STATE_FORMAT, carriesProviderState, decodeRecord, isObject, recordShapes } from './encoding.js'
import { keys, seqOfRecentKey } from './keys.js'
import {
  type InvocationRecord,
  type RunRecord,
  type SessionRecord,
  type StoredInvocationRecord,
  applyToInvocation,
  applyToSession,
  emptySession,
  parentOperationIdOf,
  storedInvocationRecord,
} from './projection.js'

/** What the audit reads, all of it from one snapshot of the log; ranges are read in batches of keys or entries. */
export interface AuditReader {
  getMany(keys: string[]): Promise<(Uint8Array | undefined)[]>
  /** Without `lt`, up to the last key. */
  keys(range: { gte: string; lt?: string }): AsyncIterable<string[]>
  entries(range: { gte: string; lt: string }): AsyncIterable<[string, Uint8Array][]>
}

/** The key spaces, as `details.index` names them. */
export type AuditedIndex = 'id' | 'byInvocation' | 'open' | 'invocation' | 'run' | 'claim' | 'session' | 'recent' | 'reservation' | 'marker' | 'unknown'

/** The first two characters of every key the log writes, in key order (store/keys.ts). */
const KEY_SPACES = ['a!', 'c!', 'e!', 'h!', 'i!', 'n!', 'o!', 'p!', 'q!', 'r!', 's!', 'v!'] as const
/** The keys of the `h!` space. */
const HEAD_KEYS: ReadonlySet<string> = new Set([keys.head, keys.format, keys.reservationsIndexed, keys.recencyIndexed, keys.backup])

/** Every key of a `x!` key space. */
const space = (prefix: string): { gte: string; lt: string } => ({ gte: prefix, lt: `${prefix.slice(0, -1)}"` })

/** One entry at a time, for the small key spaces. */
async function* entriesOf(reader: AuditReader, range: { gte: string; lt: string }): AsyncGenerator<[string, Uint8Array], void, undefined> {
  for await (const batch of reader.entries(range)) yield* batch
}

/** Stored records compared in windows of this many reads. */
const WINDOW = 1024

interface Check {
  key: string
  index: AuditedIndex
  seq: number
  /** Throws the finding for a stored value (or its absence) that does not match. */
  check(value: Uint8Array | undefined): void
}

function damaged(index: AuditedIndex, key: string, message: string, seq?: number): FactstateError {
  return new FactstateError('LOG_CORRUPT', message, { details: { index, key, ...(seq === undefined ? {} : { seq }) } })
}

/** A stored record decoded, or `LOG_CORRUPT` naming it when its bytes do not decode. */
function decoded(value: Uint8Array, index: AuditedIndex, key: string, seq?: number): unknown {
  try {
    return decodeRecord<unknown>(value, key)
  } catch (cause) {
    throw new FactstateError('LOG_CORRUPT', `index record ${key} cannot be decoded`, { cause, details: { index, key, ...(seq === undefined ? {} : { seq }) } })
  }
}

/** JSON's view of a record: members set to undefined are dropped, as the stored encoding drops them. */
const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value)) as unknown

/**
 * An invocation record compared with the stored one. `pendingCalls` and `answered` only where the
 * stored record has them and the invocation is open: an earlier version's record lacks them, and
 * an invocation that opened under such a version and ended under this one was brought up to date
 * from that record with both at their defaults (after its end neither is read again).
 */
function sameInvocationRecord(stored: unknown, replayed: InvocationRecord): boolean {
  if (!isObject(stored)) return false
  const expected: Partial<StoredInvocationRecord> = storedInvocationRecord(replayed)
  const found: Record<string, unknown> = { ...stored }
  if (!('pendingCalls' in stored) || replayed.terminal !== null) {
    delete expected.pendingCalls
    delete found.pendingCalls
  }
  if (!('answered' in stored) || replayed.terminal !== null) {
    delete expected.answered
    delete found.answered
  }
  return isDeepStrictEqual(plain(found), plain(expected))
}

/** A 32-bit hash of `key`'s UTF-16 units: FNV-1a, seeded, with murmur3's finalizer for an even spread. */
function hash32(key: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0
  for (let i = 0; i < key.length; i += 1) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/**
 * Two sums of differently seeded hashes, modulo 2^32: equal for two lists that hold the same keys in
 * any order; a list that differs is told apart but for a chance of about 2^-64 (damage is not an
 * adversary: the facts themselves are covered by the sha256 chain).
 */
class KeySum {
  count = 0
  #high = 0
  #low = 0

  add(key: string): void {
    this.#high = (this.#high + hash32(key, 0x9e3779b9)) >>> 0
    this.#low = (this.#low + hash32(key, 0x7f4a7c15)) >>> 0
    this.count += 1
  }

  equals(other: KeySum): boolean {
    return this.count === other.count && this.#high === other.#high && this.#low === other.#low
  }
}

export class IndexAudit {
  readonly #reader: AuditReader
  /** Invocations opened and not ended (so far in the pass), replayed. */
  readonly #open = new Map<string, InvocationRecord>()
  /** The stored records of the invocations `o!` lists, until the pass reaches their `lastSeq`. */
  readonly #storedOpen: Map<string, StoredInvocationRecord>
  readonly #openIndexed: Set<string>
  readonly #sessions = new Map<string, SessionRecord>()
  /**
   * Every seal's claim and successor invocation id, with the sealing invocations: more than one in
   * a log older than the rules that keep them apart (the reservation then names one of them).
   */
  readonly #sealedClaims = new Map<string, Set<string>>()
  readonly #sealedSuccessors = new Map<string, Set<string>>()
  /** Damage `start` found, reported with the first fact (after any damage to the facts themselves). */
  #initial: FactstateError | undefined
  readonly #checks: Check[] = []
  readonly #byInvocation = new KeySum()
  #invocations = 0
  #successors = 0
  /** The seq of the first fact that carries the provider's opaque state (`carriesProviderState`), if any. */
  #providerStateAt: number | undefined

  /** The index format this version writes (`INDEX_FORMAT`). */
  readonly #format: number

  private constructor(reader: AuditReader, format: number, openIndexed: Set<string>, storedOpen: Map<string, StoredInvocationRecord>, initial: FactstateError | undefined) {
    this.#reader = reader
    this.#format = format
    this.#openIndexed = openIndexed
    this.#storedOpen = storedOpen
    this.#initial = initial
  }

  /** Reads the open invocations' index and their records (a handful: the invocations left open). */
  static async start(reader: AuditReader, format: number): Promise<IndexAudit> {
    const openIndexed = new Set<string>()
    // `o!` only: a key past it (`o#…`) is reported as one of no key space, not as an open invocation.
    for await (const batch of reader.keys(space(keys.openLow))) for (const key of batch) openIndexed.add(key.slice(2))
    const ids = [...openIndexed]
    const values = ids.length === 0 ? [] : await reader.getMany(ids.map((id) => keys.invocation(id)))
    const storedOpen = new Map<string, StoredInvocationRecord>()
    let initial: FactstateError | undefined
    ids.forEach((id, index) => {
      const value = values[index]
      const key = keys.invocation(id)
      try {
        const record = value === undefined ? undefined : decoded(value, 'invocation', key)
        if (!recordShapes.invocation(record)) throw damaged('invocation', key, `open invocation ${id} has no readable record`)
        storedOpen.set(id, record as unknown as StoredInvocationRecord)
      } catch (error) {
        initial ??= error as FactstateError
      }
    })
    return new IndexAudit(reader, format, openIndexed, storedOpen, initial)
  }

  /** Takes the next fact, in seq order. Returns a promise (to await) only when a window of stored records is read. */
  observe(seq: number, event: RuntimeEvent): Promise<void> | undefined {
    if (this.#initial) throw this.#initial
    const { invocation, fact } = event
    const invocationId = invocation.invocationId
    this.#byInvocation.add(keys.byInvocation(invocationId, seq))
    let record: InvocationRecord
    try {
      record = applyToInvocation(this.#open.get(invocationId), event, seq, false)
    } catch (error) {
      // The facts passed their digest chain, so they are what was written: a log no version could have written.
      throw new FactstateError('LOG_CORRUPT', `event ${seq} breaks the rules of its invocation: ${error instanceof FactstateError ? messageWithoutCode(error) : (error as Error).message}`, { cause: error, details: { seq } })
    }
    const stored = this.#storedOpen.get(invocationId)
    if (stored !== undefined && stored.lastSeq === seq) {
      if (!sameInvocationRecord(stored, record)) throw damaged('invocation', keys.invocation(invocationId), `the record of open invocation ${invocationId} does not match its facts up to ${seq}`, seq)
      this.#storedOpen.delete(invocationId)
    }
    if (fact.type === 'model.completed' && this.#providerStateAt === undefined && carriesProviderState(fact)) this.#providerStateAt = seq
    if (fact.type === 'invocation.opened') {
      this.#invocations += 1
      const { input } = fact
      const source = input.kind === 'message' ? undefined : input.source
      const run: RunRecord = {
        invocationId,
        ...(source ? { source: { runId: source.invocation.runId, highWater: source.highWater, digest: source.digest } } : {}),
      }
      const runKey = keys.run(invocation.sessionId, invocation.runId)
      this.#expect(runKey, 'run', seq, (value) => {
        const found = value === undefined ? undefined : decoded(value, 'run', runKey, seq)
        if (!isObject(found) || !isDeepStrictEqual(plain({ invocationId: found.invocationId, source: found.source }), plain(run))) {
          throw damaged('run', runKey, `the record of run ${invocation.sessionId}/${invocation.runId} does not match its opening fact (event ${seq})`, seq)
        }
        // Absent from a record written before 0.7.0; where present, the call its opening fact records.
        if ('parentOperationId' in found && found.parentOperationId !== parentOperationIdOf(input)) {
          throw damaged('run', runKey, `the record of run ${invocation.sessionId}/${invocation.runId} names another parent call than its opening fact (event ${seq})`, seq)
        }
      })
      if (input.kind === 'handoff') {
        this.#successors += 1
        const claimKey = keys.claim(input.pause.intent.claimId)
        this.#expect(claimKey, 'claim', seq, (value) => {
          if (value === undefined || decoded(value, 'claim', claimKey, seq) !== invocationId) {
            throw damaged('claim', claimKey, `the record of claim ${input.pause.intent.claimId} does not name ${invocationId}, the successor that used it (event ${seq})`, seq)
          }
        })
      }
    }
    if (fact.type === 'invocation.ended') {
      this.#open.delete(invocationId)
      const invocationKey = keys.invocation(invocationId)
      this.#expect(invocationKey, 'invocation', seq, (value) => {
        if (value === undefined || !sameInvocationRecord(decoded(value, 'invocation', invocationKey, seq), record)) {
          throw damaged('invocation', invocationKey, `the record of invocation ${invocationId} does not match its facts (it ended at event ${seq})`, seq)
        }
      })
      if (fact.outcome.status === 'handoff_paused') {
        const { claimId, successorInvocationId } = fact.outcome.pause.intent
        for (const [seals, key] of [[this.#sealedClaims, claimId], [this.#sealedSuccessors, successorInvocationId]] as const) {
          const sealers = seals.get(key) ?? new Set<string>()
          sealers.add(invocationId)
          seals.set(key, sealers)
        }
      }
    } else {
      this.#open.set(invocationId, record)
    }
    if (fact.type === 'invocation.opened' || fact.type === 'invocation.ended') {
      this.#sessions.set(invocation.sessionId, applyToSession(this.#sessions.get(invocation.sessionId) ?? emptySession(), record, event))
    }
    return this.#checks.length >= WINDOW ? this.#checkWindow() : undefined
  }

  /** After the last fact: the rest of the windows, then each key space against what the pass rebuilt. */
  async finish(ids: number): Promise<void> {
    if (this.#initial) throw this.#initial
    await this.#checkWindow()
    // Each fact's id record was checked where the fact is: as many records as facts means none more.
    await this.#count('i!', 'id', ids, 'id records', 'facts')
    const byInvocation = new KeySum()
    for await (const batch of this.#reader.keys(space('v!'))) for (const key of batch) byInvocation.add(key)
    if (!byInvocation.equals(this.#byInvocation)) {
      throw damaged('byInvocation', 'v!', `the index of each invocation's facts does not match the facts (${byInvocation.count} records for ${this.#byInvocation.count} facts)`)
    }
    for (const id of this.#openIndexed) {
      if (!this.#open.has(id)) throw damaged('open', keys.open(id), `invocation ${id} is indexed as open but has no open facts`)
    }
    for (const id of this.#open.keys()) {
      if (!this.#openIndexed.has(id)) throw damaged('open', keys.open(id), `invocation ${id} is open but not indexed as open`)
    }
    for (const id of this.#storedOpen.keys()) {
      throw damaged('invocation', keys.invocation(id), `the record of open invocation ${id} names no fact of it as its last`)
    }
    await this.#count('n!', 'invocation', this.#invocations, 'invocation records', 'opened invocations')
    await this.#count('r!', 'run', this.#invocations, 'run records', 'opened invocations')
    await this.#count('c!', 'claim', this.#successors, 'claim records', 'successors')
    const stored = new Set<string>()
    for await (const [key, value] of entriesOf(this.#reader, space('s!'))) {
      const id = key.slice(2)
      const replayed = this.#sessions.get(id)
      if (replayed === undefined) throw damaged('session', key, `session ${id} has a record but no opened invocation`)
      if (!isDeepStrictEqual(plain(decoded(value, 'session', key)), plain(replayed))) {
        throw damaged('session', key, `the record of session ${id} does not match its facts`)
      }
      stored.add(id)
    }
    for (const id of this.#sessions.keys()) {
      if (!stored.has(id)) throw damaged('session', keys.session(id), `session ${id} has opened invocations but no record`)
    }
    await this.#recent()
    await this.#reservations('p!', this.#sealedClaims, 'claim')
    await this.#reservations('q!', this.#sealedSuccessors, 'successor')
    for (const session of this.#sessions.values()) {
      for (const { intent, invocationId } of session.paused) {
        const wanted: [string, Set<string> | undefined][] = [
          [keys.sealedClaim(intent.claimId), this.#sealedClaims.get(intent.claimId)],
          [keys.sealedSuccessor(intent.successorInvocationId), this.#sealedSuccessors.get(intent.successorInvocationId)],
        ]
        const values = await this.#reader.getMany(wanted.map(([key]) => key))
        values.forEach((value, index) => {
          const [key, sealers] = wanted[index] as [string, Set<string> | undefined]
          const sealer = value === undefined ? undefined : decoded(value, 'reservation', key)
          if (typeof sealer !== 'string' || !sealers?.has(sealer)) {
            throw damaged('reservation', key, `the pending seal of ${invocationId} has no reservation record ${key}`)
          }
        })
      }
    }
    await this.#checkMarkers()
    await this.#strayKeys()
  }

  /**
   * The recency index: each entry at the seq its session's latest run opened at, naming that session;
   * each session has one (the session records, checked before, hold the same seq).
   */
  async #recent(): Promise<void> {
    const indexed = new Set<string>()
    for await (const [key, value] of entriesOf(this.#reader, space(keys.recentLow))) {
      const seq = seqOfRecentKey(key)
      if (Number.isNaN(seq)) throw damaged('recent', key, `the recency index holds a key that names no seq: ${JSON.stringify(key)}`)
      const id = decoded(value, 'recent', key)
      const latest = typeof id === 'string' ? this.#sessions.get(id)?.latestOpenedSeq : undefined
      if (typeof id !== 'string' || latest === undefined) throw damaged('recent', key, `the recency index entry ${key} names no session of the log`)
      if (latest !== seq) {
        throw damaged('recent', key, `the recency index entry ${key} of session ${id} is not at its latest run, which opened at event ${latest}`)
      }
      indexed.add(id)
    }
    for (const [id, session] of this.#sessions) {
      if (indexed.has(id)) continue
      const seq = session.latestOpenedSeq as number
      throw damaged('recent', keys.recent(seq), `session ${id} has no entry in the recency index at its latest run (event ${seq})`, seq)
    }
  }

  /**
   * The format markers hold what some version wrote: `h!format` a format up to this one's, and
   * `h!reservations` and `h!recent` 1. Any may be missing: a log an earlier version wrote gets them
   * with its next batch (its reservations, its recency index and its format when it is opened). But a
   * log holding the provider's opaque state was marked `PROVIDER_STATE_FORMAT` by the batch that wrote
   * it: marked lower, or not at all, 0.9.x would open it and take that fact for damage.
   */
  async #checkMarkers(): Promise<void> {
    const [format, reservations, recency] = await this.#reader.getMany([keys.format, keys.reservationsIndexed, keys.recencyIndexed])
    let marked: number | undefined
    if (format !== undefined) {
      const found = decoded(format, 'marker', keys.format)
      if (typeof found !== 'number' || !Number.isSafeInteger(found) || found < 1 || found > this.#format) {
        throw damaged('marker', keys.format, `the index format marker holds ${typeof found === 'number' ? found : typeof found}, not a format from 1 to ${this.#format}`)
      }
      marked = found
    }
    const stateAt = this.#providerStateAt
    if (stateAt !== undefined && (marked === undefined || marked < PROVIDER_STATE_FORMAT)) {
      throw damaged(
        'marker',
        keys.format,
        `event ${stateAt} carries the provider's opaque state, which needs index format ${PROVIDER_STATE_FORMAT}, but the log is ${marked === undefined ? 'not marked with a format' : `marked ${marked}`}: 0.9.x would open it and take that fact for damage`,
        stateAt,
      )
    }
    if (reservations !== undefined && decoded(reservations, 'marker', keys.reservationsIndexed) !== 1) {
      throw damaged('marker', keys.reservationsIndexed, 'the reservations marker does not hold 1')
    }
    if (recency !== undefined && decoded(recency, 'marker', keys.recencyIndexed) !== 1) {
      throw damaged('marker', keys.recencyIndexed, 'the recency marker does not hold 1')
    }
  }

  /** No key lies outside the log's key spaces, nor in `h!` but for its five keys. */
  async #strayKeys(): Promise<void> {
    const stray = (key: string) => damaged('unknown', key, `key ${JSON.stringify(key)} belongs to no key space of the log`)
    for await (const batch of this.#reader.keys(space('h!'))) {
      for (const key of batch) if (!HEAD_KEYS.has(key)) throw stray(key)
    }
    // The gaps between the key spaces, and before the first and after the last.
    let gte = ''
    for (const prefix of [...KEY_SPACES, undefined]) {
      for await (const batch of this.#reader.keys(prefix === undefined ? { gte } : { gte, lt: prefix })) {
        if (batch.length > 0) throw stray(batch[0] as string)
      }
      if (prefix !== undefined) gte = space(prefix).lt
    }
  }

  #expect(key: string, index: AuditedIndex, seq: number, check: (value: Uint8Array | undefined) => void): void {
    this.#checks.push({ key, index, seq, check })
  }

  async #checkWindow(): Promise<void> {
    if (this.#checks.length === 0) return
    const window = this.#checks.splice(0, this.#checks.length)
    const values = await this.#reader.getMany(window.map((item) => item.key))
    window.forEach((item, index) => item.check(values[index]))
  }

  /** The records of a key space are exactly as many as the facts call for (each was checked where its fact is). */
  async #count(prefix: string, index: AuditedIndex, expected: number, what: string, per: string): Promise<void> {
    let found = 0
    for await (const batch of this.#reader.keys(space(prefix))) found += batch.length
    if (found !== expected) throw damaged(index, prefix, `there are ${found} ${what} for ${expected} ${per}`)
  }

  /** Each stored reservation names a seal of its claim or successor. */
  async #reservations(prefix: string, seals: Map<string, Set<string>>, what: string): Promise<void> {
    for await (const [key, value] of entriesOf(this.#reader, space(prefix))) {
      const sealer = decoded(value, 'reservation', key)
      if (typeof sealer !== 'string' || seals.get(key.slice(2))?.has(sealer) !== true) {
        throw damaged('reservation', key, `the reservation record ${key} names no seal of that ${what} in the log`)
      }
    }
  }
}
