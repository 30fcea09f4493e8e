/**
 * The floor of any `append(event) => Promise<seq>` group commit on this machine, and the cost curve
 * from it up to `EventLog` (run by `bench/profile.ts floor`; not part of `npm run bench`).
 *
 * `FloorLog` is the thinnest group-committing appender there could be: the same interface shape as
 * `EventLog.append` (each appender awaits its append before the next) and the same scheduling as
 * `EventLog#flush` (a group staged while the previous one syncs, a backlog over 128 given in halves
 * to an idle disk, groups of at most 2,048), but every fact's records are precomputed: the very keys
 * and bytes `EventLog` wrote for it, captured from its chained batches in an untimed pass of the same
 * appends, as `bench/group-commit.ts` captures them for its raw replay. Per fact it makes a pending
 * entry and its promise, puts the records into the group's chained batch and resolves.
 *
 * Its levels add `EventLog`'s own pieces one at a time, each on top of the ones before:
 * 0. `floor`: the above.
 * 1. `+validate`: `validateEvent` (the compiled copier) and `checkFactRules` in `append`.
 * 2. `+encode`: the event record's bytes packed by the shaped writer (`encodeValidatedEvent`) as it is staged.
 * 3. `+chain`: the seq assigned, the chain step and the id record (`chainedIdRecord`).
 * 4. `+keys`: the three keys (and the open marker) built from the seq and ids (store/keys.ts).
 * 5. `+staging`: a staging of the group on top of the one syncing (maps of invocations, sessions,
 *    runs and ids, the staged event objects, `applyToInvocation`, `applyToSession`, the run check,
 *    the id filter), the group's records (invocations, runs, sessions, head) encoded at write time
 *    and the staging absorbed into the committed maps after the sync. What is left of `EventLog`
 *    after this is its checks (closed, failed, read-only, sources, conflicts by id, handoff rules),
 *    its bookkeeping (ordinals, settle waiters, listeners, followers, the anchor) and its try/catch.
 */
import { ClassicLevel } from 'classic-level'
import type { InvocationRecord, RunRecord, SessionRecord } from '../store/projection.js'
import { applyToInvocation, applyToSession, emptySession, storedInvocationRecord } from '../store/projection.js'
import type { RuntimeEvent } from '../facts/types.js'
import { CHAIN_BYTES, EMPTY_CHAIN } from '../store/digest.js'
import { chainedIdRecord, checkFactRules, encodeRecord, encodeValidatedEvent, validateEvent } from '../store/encoding.js'
import { IdFilter } from '../store/id-filter.js'
import { keys, seqPart } from '../store/keys.js'

import type { Op } from './support.js'

export type { Op }

/** One fact as the appenders hand it to a `FloorLog`: the event and the records `EventLog` wrote for it. */
export interface FloorItem {
  event: RuntimeEvent
  eventKey: string
  value: Uint8Array
  idKey: string
  idRecord: Uint8Array
  invocationKey: string
  /** The open marker's put (opened) or delete (ended). */
  marker: Op | undefined
  /** The group's records the fact caused (its invocation's, session's and run's), written with its group. */
  records: Op[]
}

export const LEVELS = ['floor', '+validate', '+encode', '+chain', '+keys', '+staging'] as const
export type Level = (typeof LEVELS)[number]
/**
 * How a `FloorLog` groups: `EventLog`'s scheduling, or `whole`: a backlog is never split, so an idle
 * disk gets every fact staged since the last sync (one group per sync, staging never overlapping it:
 * the other design a group commit with a promise per fact can have).
 */
export type Grouping = 'eventlog' | 'whole'

const MAX_GROUP = 2_048
const SPLIT_ABOVE = 128
const EMPTY = new Uint8Array(0)

type Db = ClassicLevel<string, Uint8Array>
type Writes = ReturnType<Db['batch']>

class Entry {
  resolve!: (seq: number) => void
  reject!: (error: unknown) => void
  result = 0
  constructor(
    readonly item: FloorItem,
    /** The validated copy (levels 1 and up), else the item's own event. */
    readonly event: RuntimeEvent,
  ) {}
}

class Staged {
  constructor(
    readonly seq: number,
    readonly bytes: Uint8Array,
    readonly event: RuntimeEvent,
    readonly idRecord: Uint8Array,
  ) {}
}

/** Level 5's staging: what `EventLog`'s `Staging` keeps for the workload's facts. */
class Staging {
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  readonly ids = new Map<string, Staged>()
  readonly events: Staged[] = []
  readonly persisted = new Set<string>()
  constructor(
    public parent: Staging | undefined,
    readonly base: Committed,
  ) {}
  invocationNow(id: string): InvocationRecord | undefined {
    return this.invocations.get(id) ?? (this.parent ? this.parent.invocationNow(id) : this.base.invocations.get(id))
  }
  sessionNow(id: string): SessionRecord {
    return this.sessions.get(id) ?? (this.parent ? this.parent.sessionNow(id) : (this.base.sessions.get(id) ?? emptySession()))
  }
  runNow(key: string): RunRecord | undefined {
    return this.runs.get(key) ?? (this.parent ? this.parent.runNow(key) : this.base.runs.get(key))
  }
  stagedId(id: string): Staged | undefined {
    return this.ids.get(id) ?? this.parent?.stagedId(id)
  }
}

class Committed {
  readonly invocations = new Map<string, InvocationRecord>()
  readonly sessions = new Map<string, SessionRecord>()
  readonly runs = new Map<string, RunRecord>()
  absorb(staging: Staging): void {
    for (const [id, record] of staging.invocations) this.invocations.set(id, record)
    for (const [id, record] of staging.sessions) this.sessions.set(id, record)
    for (const [key, record] of staging.runs) this.runs.set(key, record)
  }
}

interface Group {
  entries: Entry[]
  writes: Writes | undefined
  /** Level 5. */
  staging: Staging | undefined
}

/** A group-committing log of precomputed records, with `EventLog`'s pieces added up to `level`. */
export class FloorLog {
  readonly #db: Db
  readonly #level: number
  /** The head record each group ends with (levels 0 to 4: the last one `EventLog` wrote). */
  readonly #head: Uint8Array
  readonly #splitAbove: number
  #pending: Entry[] = []
  #pendingEvents = 0
  #next: Group | undefined
  #writing = false
  #flushing: Promise<void> | undefined
  #wake: (() => void) | undefined
  #highWater = 0
  #chain: Uint8Array = EMPTY_CHAIN
  #committed = new Committed()
  #inFlight: Staging | undefined
  #ids = new IdFilter(1 << 20)
  /** Syncs written. */
  groups = 0

  private constructor(db: Db, level: Level, head: Uint8Array, grouping: Grouping) {
    this.#db = db
    this.#level = LEVELS.indexOf(level)
    this.#head = head
    this.#splitAbove = grouping === 'whole' ? Number.POSITIVE_INFINITY : SPLIT_ABOVE
  }

  static async open(dir: string, level: Level, head: Uint8Array, grouping: Grouping = 'eventlog'): Promise<FloorLog> {
    const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    return new FloorLog(db, level, head, grouping)
  }

  async close(): Promise<void> {
    while (this.#flushing) await this.#flushing
    await this.#db.close()
  }

  append(item: FloorItem): Promise<number> {
    let event = item.event
    if (this.#level >= 1) {
      try {
        event = validateEvent(event)
        checkFactRules(event)
      } catch (error) {
        return Promise.reject(error)
      }
    }
    const entry = new Entry(item, event)
    const promise = new Promise<number>((resolve, reject) => {
      entry.resolve = resolve
      entry.reject = reject
    })
    this.#pending.push(entry)
    this.#pendingEvents += 1
    this.#wakeUp()
    this.#flushing ??= this.#flush()
    return promise
  }

  #wakeUp(): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }

  /** `EventLog#flush`'s loop. */
  async #flush(): Promise<void> {
    try {
      await new Promise<void>((resolve) => setImmediate(resolve))
      for (;;) {
        const limit = this.#writing ? MAX_GROUP : this.#pendingEvents > this.#splitAbove ? Math.ceil(this.#pendingEvents / 2) : MAX_GROUP
        while (this.#pending.length > 0 && (this.#next?.entries.length ?? 0) < limit) {
          const entry = this.#pending.shift() as Entry
          this.#pendingEvents -= 1
          this.#stage(entry)
        }
        if (!this.#writing && this.#next !== undefined) {
          const group = this.#next
          this.#next = undefined
          void this.#commit(group)
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

  #stage(entry: Entry): void {
    const group = (this.#next ??= { entries: [], writes: undefined, staging: this.#level >= 5 ? new Staging(this.#inFlight, this.#committed) : undefined })
    const writes = (group.writes ??= this.#db.batch())
    const { item } = entry
    if (group.staging !== undefined) {
      entry.result = this.#stageEvent(group.staging, entry.event)
      this.#putStaged(group.staging, writes)
    } else {
      const bytes = this.#level >= 2 ? encodeValidatedEvent(entry.event) : item.value
      let idRecord = item.idRecord
      if (this.#level >= 3) {
        const seq = ++this.#highWater
        idRecord = chainedIdRecord(this.#chain, seq, bytes)
        this.#chain = idRecord.subarray(idRecord.length - CHAIN_BYTES)
        entry.result = seq
      }
      if (this.#level >= 4) {
        const { event } = entry
        const part = seqPart(entry.result)
        writes.put(keys.eventAt(part), bytes)
        writes.put(keys.eventId(event.id), idRecord)
        writes.put(keys.byInvocationAt(event.invocation.invocationId, part), EMPTY)
        if (event.fact.type === 'invocation.opened') writes.put(keys.open(event.invocation.invocationId), EMPTY)
        if (event.fact.type === 'invocation.ended') writes.del(keys.open(event.invocation.invocationId))
      } else {
        writes.put(item.eventKey, bytes)
        writes.put(item.idKey, idRecord)
        writes.put(item.invocationKey, EMPTY)
        const { marker } = item
        if (marker !== undefined) {
          if (marker.type === 'put') writes.put(marker.key, marker.value)
          else writes.del(marker.key)
        }
      }
      for (const op of item.records) {
        if (op.type === 'put') writes.put(op.key, op.value)
        else writes.del(op.key)
      }
    }
    group.entries.push(entry)
  }

  /** `EventLog#stageEvent` for the workload's facts (no handoffs, no seals, ids never repeated). */
  #stageEvent(local: Staging, event: RuntimeEvent): number {
    const bytes = encodeValidatedEvent(event)
    if (local.stagedId(event.id) !== undefined) throw new Error(`event id ${event.id} appended twice`)
    // A "maybe" of the filter reads the id index, as `EventLog` does.
    if (!this.#ids.add(event.id) && this.#db.getSync(keys.eventId(event.id)) !== undefined) throw new Error(`event id ${event.id} is stored already`)
    const { invocation } = event
    const seq = this.#highWater + 1
    const record = applyToInvocation(local.invocationNow(invocation.invocationId), event, seq)
    let run: RunRecord | undefined
    let runKey: string | undefined
    if (event.fact.type === 'invocation.opened') {
      runKey = keys.run(invocation.sessionId, invocation.runId)
      if (local.runNow(runKey) !== undefined) throw new Error(`run ${invocation.runId} taken`)
      run = { invocationId: invocation.invocationId }
    }
    const boundary = event.fact.type === 'invocation.opened' || event.fact.type === 'invocation.ended'
    const session = boundary ? applyToSession(local.sessionNow(invocation.sessionId), record, event) : undefined
    const idRecord = chainedIdRecord(this.#chain, seq, bytes)
    this.#chain = idRecord.subarray(idRecord.length - CHAIN_BYTES)
    this.#highWater = seq
    local.invocations.set(invocation.invocationId, record)
    if (run !== undefined && runKey !== undefined) local.runs.set(runKey, run)
    if (session !== undefined) {
      local.sessions.set(invocation.sessionId, session)
      local.persisted.add(invocation.invocationId)
    }
    const staged = new Staged(seq, bytes, event, idRecord)
    local.ids.set(event.id, staged)
    local.events.push(staged)
    return seq
  }

  /** `EventLog#putStaged` for the one event just staged. */
  #putStaged(local: Staging, writes: Writes): void {
    const { seq, bytes, event, idRecord } = local.events[local.events.length - 1] as Staged
    const part = seqPart(seq)
    writes.put(keys.eventAt(part), bytes)
    writes.put(keys.eventId(event.id), idRecord)
    writes.put(keys.byInvocationAt(event.invocation.invocationId, part), EMPTY)
    if (event.fact.type === 'invocation.opened') writes.put(keys.open(event.invocation.invocationId), EMPTY)
    if (event.fact.type === 'invocation.ended') writes.del(keys.open(event.invocation.invocationId))
  }

  async #commit(group: Group): Promise<void> {
    const writes = group.writes as Writes
    const { staging } = group
    if (staging !== undefined) {
      staging.parent = undefined
      this.#inFlight = staging
      for (const id of staging.persisted) writes.put(keys.invocation(id), encodeRecord(storedInvocationRecord(staging.invocations.get(id) as InvocationRecord)))
      for (const [key, run] of staging.runs) writes.put(key, encodeRecord(run))
      for (const [id, record] of staging.sessions) writes.put(keys.session(id), encodeRecord(record))
      writes.put(keys.head, encodeRecord({ highWater: this.#highWater, chain: this.#chain }))
    } else {
      writes.put(keys.head, this.#head)
    }
    this.#writing = true
    try {
      await writes.write({ sync: true })
      this.groups += 1
    } catch (error) {
      for (const entry of group.entries) entry.reject(error)
      return
    } finally {
      this.#inFlight = undefined
      this.#writing = false
      this.#wakeUp()
    }
    if (staging !== undefined) this.#committed.absorb(staging)
    for (const entry of group.entries) entry.resolve(entry.result)
  }
}

/** The appenders, side by side, each awaiting its appends one by one (as `appendLanes` does for `EventLog`). */
export async function appendFloorLanes(log: FloorLog, lanes: readonly FloorItem[][]): Promise<void> {
  await Promise.all(
    lanes.map(async (lane) => {
      for (const item of lane) await log.append(item)
    }),
  )
}

/**
 * Each event's records out of the operations `EventLog` wrote (`ops`, cut into its batches by
 * `batchEnds`): its own three puts and open marker, and the group records its invocation, session
 * and run got in its batch (attributed to the group's last fact of that invocation, session or run;
 * the head and the one-time format marks are left out, `FloorLog` writes a head per group).
 */
export function floorItems(lanes: readonly RuntimeEvent[][], ops: readonly Op[], batchEnds: readonly number[]): { lanes: FloorItem[][]; head: Uint8Array } {
  const byId = new Map<string, RuntimeEvent>()
  for (const lane of lanes) for (const event of lane) byId.set(event.id, event)
  const items = new Map<string, FloorItem>()
  let head: Uint8Array | undefined
  let from = 0
  for (const end of batchEnds) {
    const batch = ops.slice(from, end)
    from = end
    const byOwner = new Map<string, FloorItem>()
    for (let index = 0; index < batch.length; index += 1) {
      const op = batch[index] as Op
      if (op.type === 'put' && op.key.startsWith('e!')) {
        const id = batch[index + 1] as Op
        const invocation = batch[index + 2] as Op
        if (id.type !== 'put' || !id.key.startsWith('i!') || invocation.type !== 'put' || !invocation.key.startsWith('v!')) throw new Error('unexpected batch layout')
        const event = byId.get(id.key.slice(2))
        if (event === undefined) throw new Error(`no event ${id.key}`)
        const next = batch[index + 3]
        const marker = next !== undefined && next.key.startsWith('o!') ? next : undefined
        const item: FloorItem = { event, eventKey: op.key, value: op.value, idKey: id.key, idRecord: id.value, invocationKey: invocation.key, marker, records: [] }
        items.set(event.id, item)
        byOwner.set(`n!${event.invocation.invocationId}`, item)
        byOwner.set(`s!${event.invocation.sessionId}`, item)
        byOwner.set(`r!${event.invocation.sessionId}!${event.invocation.runId}`, item)
        index += marker === undefined ? 2 : 3
        continue
      }
      if (op.key === keys.head) {
        if (op.type === 'put') head = op.value
        continue
      }
      if (op.key === keys.format || op.key === keys.reservationsIndexed) continue
      const owner = byOwner.get(op.key)
      if (owner === undefined) throw new Error(`no fact of the batch owns ${op.key}`)
      owner.records.push(op)
    }
  }
  if (head === undefined) throw new Error('no head written')
  const floorLanes = lanes.map((lane) =>
    lane.map((event) => {
      const item = items.get(event.id)
      if (item === undefined) throw new Error(`event ${event.id} was not captured`)
      return item
    }),
  )
  return { lanes: floorLanes, head }
}
