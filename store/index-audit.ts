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
 * - `r!` (runs): one per opened invocation, naming it and the boundary it continued from.
 * - `c!` (claims): one per successor, naming it.
 * - `s!` (sessions): each equals its facts replayed, one per session.
 * - `p!` / `q!` (a seal's claim and successor): each names the seal that reserved it, and every
 *   seal still pending has both (logs older than these records got them for the seals pending
 *   when they were first opened by a version that writes them, so an older, used seal has none).
 *
 * Members that records written by earlier versions lack (`pendingCalls` and `answered` of an
 * invocation record, `lastSeq` and `chain` that old run records carry) are compared only where
 * the stored record has them.
 */
import { isDeepStrictEqual } from 'node:util'
import { FactstateError } from '../errors.js'
import type { RuntimeEvent } from '../facts/types.js'
import { decodeRecord } from './encoding.js'
import { keys } from './keys.js'
import { type InvocationRecord, type RunRecord, type SessionRecord, applyToInvocation, applyToSession, emptySession } from './projection.js'

/** What the audit reads, all of it from one snapshot of the log; ranges are read in batches of keys or entries. */
export interface AuditReader {
  getMany(keys: string[]): Promise<(Uint8Array | undefined)[]>
  keys(range: { gte: string; lt: string }): AsyncIterable<string[]>
  entries(range: { gte: string; lt: string }): AsyncIterable<[string, Uint8Array][]>
}

/** The key spaces, as `details.index` names them. */
export type AuditedIndex = 'byInvocation' | 'open' | 'invocation' | 'run' | 'claim' | 'session' | 'reservation'

/** Every key of a `x!` key space. */
const space = (prefix: string): { gte: string; lt: string } => ({ gte: prefix, lt: `${prefix.slice(0, -1)}"` })

/** One entry at a time, for the small key spaces. */
async function* entriesOf(reader: AuditReader, range: { gte: string; lt: string }): AsyncGenerator<[string, Uint8Array]> {
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

/** JSON's view of a record: members set to undefined are dropped, as the stored encoding drops them. */
const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value)) as unknown

/** An invocation record compared with the stored one, without the members an earlier version's record lacks. */
function sameInvocationRecord(stored: InvocationRecord, replayed: InvocationRecord): boolean {
  const expected: Partial<InvocationRecord> = { ...replayed }
  if (!('pendingCalls' in stored)) delete expected.pendingCalls
  if (!('answered' in stored)) delete expected.answered
  return isDeepStrictEqual(plain(stored), plain(expected))
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
  readonly #storedOpen: Map<string, InvocationRecord>
  readonly #openIndexed: Set<string>
  readonly #sessions = new Map<string, SessionRecord>()
  /** Every seal's claim and successor invocation id, with the sealing invocation. */
  readonly #sealedClaims = new Map<string, string>()
  readonly #sealedSuccessors = new Map<string, string>()
  readonly #checks: Check[] = []
  readonly #byInvocation = new KeySum()
  #invocations = 0
  #successors = 0

  private constructor(reader: AuditReader, openIndexed: Set<string>, storedOpen: Map<string, InvocationRecord>) {
    this.#reader = reader
    this.#openIndexed = openIndexed
    this.#storedOpen = storedOpen
  }

  /** Reads the open invocations' index and their records (a handful: the invocations left open). */
  static async start(reader: AuditReader): Promise<IndexAudit> {
    const openIndexed = new Set<string>()
    for await (const batch of reader.keys({ gte: keys.openLow, lt: keys.openHigh })) for (const key of batch) openIndexed.add(key.slice(2))
    const ids = [...openIndexed]
    const values = ids.length === 0 ? [] : await reader.getMany(ids.map((id) => keys.invocation(id)))
    const storedOpen = new Map<string, InvocationRecord>()
    ids.forEach((id, index) => {
      const value = values[index]
      if (value === undefined) throw damaged('invocation', keys.invocation(id), `open invocation ${id} has no record`)
      storedOpen.set(id, decodeRecord<InvocationRecord>(value, `invocation ${id}`))
    })
    return new IndexAudit(reader, openIndexed, storedOpen)
  }

  /** Takes the next fact, in seq order. Returns a promise (to await) only when a window of stored records is read. */
  observe(seq: number, event: RuntimeEvent): Promise<void> | undefined {
    const { invocation, fact } = event
    const invocationId = invocation.invocationId
    this.#byInvocation.add(keys.byInvocation(invocationId, seq))
    let record: InvocationRecord
    try {
      record = applyToInvocation(this.#open.get(invocationId), event, seq, false)
    } catch (error) {
      // The facts passed their digest chain, so they are what was written: a log no version could have written.
      throw new FactstateError('LOG_CORRUPT', `event ${seq} breaks the rules of its invocation: ${(error as Error).message}`, { cause: error, details: { seq } })
    }
    const stored = this.#storedOpen.get(invocationId)
    if (stored !== undefined && stored.lastSeq === seq) {
      if (!sameInvocationRecord(stored, record)) throw damaged('invocation', keys.invocation(invocationId), `the record of open invocation ${invocationId} does not match its facts up to ${seq}`, seq)
      this.#storedOpen.delete(invocationId)
    }
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
        const found = value === undefined ? undefined : decodeRecord<RunRecord>(value, `run ${invocation.sessionId}/${invocation.runId}`)
        if (found === undefined || !isDeepStrictEqual(plain({ invocationId: found.invocationId, source: found.source }), plain(run))) {
          throw damaged('run', runKey, `the record of run ${invocation.sessionId}/${invocation.runId} does not match its opening fact (event ${seq})`, seq)
        }
      })
      if (input.kind === 'handoff') {
        this.#successors += 1
        const claimKey = keys.claim(input.pause.intent.claimId)
        this.#expect(claimKey, 'claim', seq, (value) => {
          if (value === undefined || decodeRecord<unknown>(value, `claim ${input.pause.intent.claimId}`) !== invocationId) {
            throw damaged('claim', claimKey, `the record of claim ${input.pause.intent.claimId} does not name ${invocationId}, the successor that used it (event ${seq})`, seq)
          }
        })
      }
    }
    if (fact.type === 'invocation.ended') {
      this.#open.delete(invocationId)
      const invocationKey = keys.invocation(invocationId)
      this.#expect(invocationKey, 'invocation', seq, (value) => {
        if (value === undefined || !sameInvocationRecord(decodeRecord<InvocationRecord>(value, `invocation ${invocationId}`), record)) {
          throw damaged('invocation', invocationKey, `the record of invocation ${invocationId} does not match its facts (it ended at event ${seq})`, seq)
        }
      })
      if (fact.outcome.status === 'handoff_paused') {
        this.#sealedClaims.set(fact.outcome.pause.intent.claimId, invocationId)
        this.#sealedSuccessors.set(fact.outcome.pause.intent.successorInvocationId, invocationId)
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
  async finish(): Promise<void> {
    await this.#checkWindow()
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
      if (!isDeepStrictEqual(plain(decodeRecord<SessionRecord>(value, `session ${id}`)), plain(replayed))) {
        throw damaged('session', key, `the record of session ${id} does not match its facts`)
      }
      stored.add(id)
    }
    for (const id of this.#sessions.keys()) {
      if (!stored.has(id)) throw damaged('session', keys.session(id), `session ${id} has opened invocations but no record`)
    }
    await this.#reservations('p!', this.#sealedClaims, 'claim')
    await this.#reservations('q!', this.#sealedSuccessors, 'successor')
    for (const session of this.#sessions.values()) {
      for (const { intent, invocationId } of session.paused) {
        const wanted = [keys.sealedClaim(intent.claimId), keys.sealedSuccessor(intent.successorInvocationId)]
        const values = await this.#reader.getMany(wanted)
        values.forEach((value, index) => {
          if (value === undefined || decodeRecord<unknown>(value, wanted[index] as string) !== invocationId) {
            throw damaged('reservation', wanted[index] as string, `the pending seal of ${invocationId} has no reservation record ${wanted[index]}`)
          }
        })
      }
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

  /** Each stored reservation names the seal that made it. */
  async #reservations(prefix: string, seals: Map<string, string>, what: string): Promise<void> {
    for await (const [key, value] of entriesOf(this.#reader, space(prefix))) {
      const sealer = seals.get(key.slice(2))
      if (sealer === undefined || decodeRecord<unknown>(value, key) !== sealer) {
        throw damaged('reservation', key, `the reservation record ${key} names no seal of that ${what} in the log`)
      }
    }
  }
}
