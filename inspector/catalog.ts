/**
 * What the overview needs, kept in memory and maintained fact by fact: one small entry per
 * invocation (never its facts), grouped by session and turn. Built once from the log and then
 * fed by the log's subscription, so a page refresh costs nothing proportional to the log. Bounded:
 * past its limit of invocations, the least recently active sessions that need nobody are dropped
 * (counted, not kept); the server reads such a session back from the log when it is asked for by
 * id, or when it has a fact again (`takeReturning`, `backfill`).
 */
import type { Invocation, InvocationOutcome, ParentCall, StoredEvent } from '../facts/types.js'
import { terminalStatusOf } from '../facts/types.js'
import { type InvocationSnapshot, applyFact, initialInvocationSnapshot, stateOf } from '../machines/invocation.js'
import { attentionWords, statusWords } from './page/format.js'
import type { CallLink, InvocationStatus, InvocationSummary, RunLink } from './protocol.js'

interface Entry {
  invocation: Invocation
  inputKind: InvocationSummary['inputKind']
  snapshot: InvocationSnapshot | null
  state: string
  machineError: string | null
  outcome: InvocationOutcome | null
  /** The steps begun, told apart by id while the invocation is open (a retried step asks again); their count once it ended. */
  stepIds: Set<string> | number
  facts: number
  firstSeq: number
  lastSeq: number
  openedAt: number
  lastAt: number
  unsettled: readonly string[]
  /** The tools its model's calls named, each once (what the filter matches besides ids and status words). */
  tools: readonly string[]
  /** Tool calls that settled failed or unknown, and calls rejected before dispatch. */
  failedCalls: number
  rejectedCalls: number
  /** Its operations of unknown outcome that a later run acknowledged (`allowPriorUnknown`), by operation id. */
  acknowledged: Map<string, { runId: string; invocationId: string }> | undefined
  source: Omit<RunLink, 'exists'> | null
  /** The tool call that started it, for a child run. */
  parent: ParentCall | null
}

interface SessionEntry {
  sessionId: string
  firstSeq: number
  lastSeq: number
  /** turnId → invocation ids in the order they opened. */
  turns: Map<string, string[]>
  /** Invocations of the session not ended. */
  open: number
  /** Seals of the session whose successor has not opened. */
  awaiting: number
  /** The invocation that opened last. */
  last: Entry | undefined
}

/** The unsettled operations of most invocations: none (replaced, never changed). */
const NONE: readonly string[] = []

/** Why a session needs someone (see `Catalog.sessions`). */
export type Attention = 'open' | 'paused' | 'unanswered'

/** How many of the sessions listed are always the most recently active ones, whatever needs attention. */
const RECENT_KEPT = 100

/** The most invocations the index keeps by default (about 1.1 KB each): see `Catalog`. */
export const DEFAULT_INDEX_LIMIT = 20_000

/** The in-memory index behind `/api/overview`. */
export class Catalog {
  readonly #invocations = new Map<string, Entry>()
  /** Every session, least recently active first: one is moved to the end with each of its facts. */
  readonly #sessions = new Map<string, SessionEntry>()
  readonly #continuations = new Map<string, Omit<RunLink, 'exists'>[]>()
  /**
   * Parent invocation id → the child runs its calls started, read from the children's opened facts as
   * they are indexed (a parent's facts do not name its children: the name is the tool's, so they
   * could not be found again once dropped). A link leaves with its child when its parent is not
   * indexed, and with its parent when its child is not: the map is bounded by the index.
   */
  readonly #children = new Map<string, Omit<CallLink, 'exists'>[]>()
  /** The sessions that may need someone: an invocation open, a seal awaiting its successor, a last run failed or cancelled. */
  readonly #flagged = new Set<SessionEntry>()
  /** The successor invocation id each pending seal names → the session of that seal. */
  readonly #awaitingBy = new Map<string, SessionEntry>()
  #highWater = 0
  /** The most invocations kept; a trim drops sessions until a tenth under it, so that it runs seldom. */
  readonly #limit: number
  /** Sessions dropped from the index and not read back: counted in `sessionCount`, never kept. */
  #dropped = 0
  /** Sessions first indexed since a trim: each may be a dropped one with a new fact, whose earlier runs are to be read back. */
  #returning = new Set<string>()
  /**
   * Sessions first indexed since a trim whose read-back has not answered (`backfill`, `returned`),
   * once `watchReturning` was called: not dropped meanwhile, since whether one was dropped before is
   * not known yet, so dropping it again could count it twice.
   */
  readonly #unresolved = new Set<string>()
  #watching = false
  /**
   * The size past which the next trim runs: a tenth over the limit, or a tenth over what the last
   * trim left when it could not get under the limit (sessions that need someone are kept), so that
   * a trim, a pass over the sessions, is not run on every commit of a log whose sessions mostly need someone.
   */
  #trimAt: number

  constructor(limit = DEFAULT_INDEX_LIMIT) {
    this.#limit = limit
    this.#trimAt = limit + Math.ceil(limit / 10)
  }

  get highWater(): number {
    return this.#highWater
  }

  /** Every session the log holds (those dropped from the index too). */
  get sessionCount(): number {
    return this.#sessions.size + this.#dropped
  }

  /** Sessions were dropped, so an id the index lacks may still be in the log. */
  get trimmed(): boolean {
    return this.#dropped > 0
  }

  /** How many invocations the index holds (at most a tenth over its limit, and those of sessions that need someone). */
  get invocationCount(): number {
    return this.#invocations.size
  }

  has(invocationId: string): boolean {
    return this.#invocations.has(invocationId)
  }

  hasSession(sessionId: string): boolean {
    return this.#sessions.has(sessionId)
  }

  /** Applies stored events in seq order; events at or below the high-water are ignored (already seen). */
  apply(events: readonly StoredEvent[]): void {
    for (const stored of events) {
      if (stored.seq <= this.#highWater) continue
      this.#applyOne(stored)
      this.#highWater = stored.seq
    }
    if (this.#invocations.size > this.#trimAt) this.#trim()
  }

  /**
   * Drops the least recently active sessions that need nobody (no run open, no seal awaiting its
   * successor, a last run that did not fail or get cancelled) until the index holds a tenth under its
   * limit; the `RECENT_KEPT` most recently active sessions always stay.
   */
  #trim(): void {
    const target = this.#limit - Math.ceil(this.#limit / 10)
    let droppable = this.#sessions.size - RECENT_KEPT
    for (const session of this.#sessions.values()) {
      if (this.#invocations.size <= target || droppable <= 0) break
      droppable -= 1
      if (this.#flagged.has(session) || this.#unresolved.has(session.sessionId)) continue
      for (const ids of session.turns.values()) {
        for (const id of ids) {
          const parent = this.#invocations.get(id)?.parent
          this.#invocations.delete(id)
          this.#continuations.delete(id)
          // Its parent, still indexed, keeps listing it (dropped, read from the log when opened).
          if (parent && !this.#invocations.has(parent.invocation.invocationId)) this.#forgetChild(parent.invocation.invocationId, id)
          const children = this.#children.get(id)?.filter((child) => this.#invocations.has(child.invocation.invocationId))
          if (children === undefined || children.length > 0) {
            if (children !== undefined) this.#children.set(id, children)
          } else this.#children.delete(id)
        }
      }
      this.#sessions.delete(session.sessionId)
      this.#returning.delete(session.sessionId)
      this.#dropped += 1
    }
    const kept = Math.max(this.#limit, this.#invocations.size)
    this.#trimAt = kept + Math.ceil(kept / 10)
  }

  #forgetChild(parentId: string, childId: string): void {
    const kept = (this.#children.get(parentId) ?? []).filter((child) => child.invocation.invocationId !== childId)
    if (kept.length > 0) this.#children.set(parentId, kept)
    else this.#children.delete(parentId)
  }

  /** The sessions first indexed since a trim (then forgotten): the server reads back the earlier runs of those that were dropped. */
  takeReturning(): string[] {
    if (this.#returning.size === 0) return []
    const ids = [...this.#returning]
    this.#returning.clear()
    return ids
  }

  /**
   * Adds back the earlier invocations of a dropped session that had a fact again: `events` are the
   * stored events of its invocations the index lacks, in seq order. Their turns come before the
   * session's later ones; the session keeps its place among the most recently active. False when
   * there is nothing to add (a new session, or one dropped again meanwhile).
   */
  backfill(sessionId: string, events: readonly StoredEvent[]): boolean {
    this.returned(sessionId)
    const session = this.#sessions.get(sessionId)
    const missing = events.filter(({ event }) => event.invocation.sessionId === sessionId && !this.#invocations.has(event.invocation.invocationId))
    if (session === undefined || missing.length === 0) return false
    const earlier = new Catalog(Number.POSITIVE_INFINITY)
    earlier.apply(missing)
    const before = earlier.#sessions.get(sessionId) as SessionEntry
    for (const [id, entry] of earlier.#invocations) this.#invocations.set(id, entry)
    for (const [id, links] of earlier.#continuations) this.#continuations.set(id, [...links, ...(this.#continuations.get(id) ?? [])])
    for (const [id, links] of earlier.#children) {
      const known = new Set(links.map((link) => link.invocation.invocationId))
      this.#children.set(id, [...links, ...(this.#children.get(id) ?? []).filter((link) => !known.has(link.invocation.invocationId))])
    }
    const turns = new Map<string, string[]>()
    for (const [turnId, ids] of before.turns) turns.set(turnId, [...ids])
    for (const [turnId, ids] of session.turns) turns.set(turnId, [...(turns.get(turnId) ?? []), ...ids])
    session.turns = turns
    session.firstSeq = Math.min(session.firstSeq, before.firstSeq)
    session.open += before.open
    session.awaiting += before.awaiting
    for (const [successor, sealer] of earlier.#awaitingBy) if (sealer === before) this.#awaitingBy.set(successor, session)
    this.#dropped = Math.max(0, this.#dropped - 1)
    this.#reflag(session)
    return true
  }

  /**
   * From now on, a session first indexed since a trim is kept until its read-back answers. Called
   * once the initial index is built: while it is built nothing is read back, and keeping every such
   * session would leave the index unbounded. (A session dropped, seen again and dropped again while
   * it is built is counted twice.)
   */
  watchReturning(): void {
    this.#watching = true
    for (const sessionId of this.#returning) this.#unresolved.add(sessionId)
  }

  /** The read-back of a session `takeReturning` named is over (or gave up): it may be dropped again. */
  returned(sessionId: string): void {
    this.#unresolved.delete(sessionId)
  }

  /**
   * The index of one session alone, from its stored events in seq order (every invocation of it):
   * what the overview and the timeline show for a session dropped from this index.
   */
  static ofSession(events: readonly StoredEvent[]): Catalog {
    const one = new Catalog(Number.POSITIVE_INFINITY)
    one.apply(events)
    return one
  }

  #applyOne({ seq, event }: StoredEvent): void {
    const { invocation, fact } = event
    let entry = this.#invocations.get(invocation.invocationId)
    if (!entry) {
      const input = fact.type === 'invocation.opened' ? fact.input : null
      const source =
        input && input.kind !== 'message'
          ? { kind: input.kind, runId: input.source.invocation.runId, invocationId: input.source.invocation.invocationId }
          : null
      entry = {
        invocation,
        inputKind: input?.kind ?? 'message',
        snapshot: initialInvocationSnapshot(),
        state: 'opening',
        machineError: null,
        outcome: null,
        stepIds: new Set(),
        facts: 0,
        firstSeq: seq,
        lastSeq: seq,
        openedAt: event.recordedAt,
        lastAt: event.recordedAt,
        unsettled: NONE,
        tools: NONE,
        failedCalls: 0,
        rejectedCalls: 0,
        acknowledged: undefined,
        source,
        parent: input && input.kind !== 'handoff' ? (input.parent ?? null) : null,
      }
      this.#invocations.set(invocation.invocationId, entry)
      if (entry.parent) {
        const list = (this.#children.get(entry.parent.invocation.invocationId) ?? []).filter((link) => link.invocation.invocationId !== invocation.invocationId)
        list.push({ operationId: entry.parent.operationId, invocation })
        this.#children.set(entry.parent.invocation.invocationId, list)
      }
      // A run that opened acknowledging earlier runs' unknown outcomes: each of those runs says by which.
      const prior = input && input.kind !== 'handoff' ? input.priorUnknown : undefined
      for (const op of prior ?? []) {
        const earlier = this.#invocations.get(op.invocationId)
        if (!earlier) continue
        earlier.acknowledged ??= new Map()
        earlier.acknowledged.set(op.operationId, { runId: invocation.runId, invocationId: invocation.invocationId })
      }
      if (source?.kind === 'continuation') {
        const list = this.#continuations.get(source.invocationId) ?? []
        list.push({ kind: 'continuation', runId: invocation.runId, invocationId: invocation.invocationId })
        this.#continuations.set(source.invocationId, list)
      }
      let session = this.#sessions.get(invocation.sessionId)
      if (!session) {
        session = { sessionId: invocation.sessionId, firstSeq: seq, lastSeq: seq, turns: new Map(), open: 0, awaiting: 0, last: undefined }
        this.#sessions.set(invocation.sessionId, session)
        if (this.#dropped > 0) {
          this.#returning.add(invocation.sessionId)
          if (this.#watching) this.#unresolved.add(invocation.sessionId)
        }
      }
      const turn = session.turns.get(invocation.turnId) ?? []
      turn.push(invocation.invocationId)
      session.turns.set(invocation.turnId, turn)
      session.open += 1
      session.last = entry
      // The successor a seal awaits has opened.
      const sealer = this.#awaitingBy.get(invocation.invocationId)
      if (sealer !== undefined) {
        this.#awaitingBy.delete(invocation.invocationId)
        sealer.awaiting -= 1
        this.#reflag(sealer)
      }
    }
    entry.facts += 1
    entry.lastSeq = seq
    entry.lastAt = event.recordedAt
    const session = this.#sessions.get(invocation.sessionId)
    if (session) {
      session.lastSeq = seq
      // Moved to the end: the map holds the sessions least recently active first.
      this.#sessions.delete(session.sessionId)
      this.#sessions.set(session.sessionId, session)
    }
    switch (fact.type) {
      case 'model.completed':
        for (const call of fact.output.toolCalls) if (!entry.tools.includes(call.name)) entry.tools = [...entry.tools, call.name]
        break
      case 'model.requested':
        if (typeof entry.stepIds !== 'number') entry.stepIds.add(fact.stepId)
        break
      case 'tool.dispatched':
        entry.unsettled = [...entry.unsettled, fact.operationId]
        if (!entry.tools.includes(fact.name)) entry.tools = [...entry.tools, fact.name]
        break
      case 'tool.settled':
        entry.unsettled = entry.unsettled.length === 1 && entry.unsettled[0] === fact.operationId ? NONE : entry.unsettled.filter((op) => op !== fact.operationId)
        if (fact.outcome.status !== 'succeeded') entry.failedCalls += 1
        break
      case 'tool.rejected':
        entry.rejectedCalls += 1
        if (!entry.tools.includes(fact.name)) entry.tools = [...entry.tools, fact.name]
        break
      case 'invocation.ended':
        if (entry.outcome === null && session) {
          session.open -= 1
          const successor = fact.outcome.status === 'handoff_paused' ? fact.outcome.pause.intent.successorInvocationId : undefined
          if (successor !== undefined && !this.#invocations.has(successor) && !this.#awaitingBy.has(successor)) {
            session.awaiting += 1
            this.#awaitingBy.set(successor, session)
          }
        }
        entry.outcome = fact.outcome
        // Kept for every invocation of the log: an ended one keeps only what the overview shows.
        if (typeof entry.stepIds !== 'number') entry.stepIds = entry.stepIds.size
        break
      default:
        break
    }
    if (session) this.#reflag(session)
    if (entry.snapshot) {
      try {
        entry.snapshot = applyFact(entry.snapshot, fact)
        entry.state = stateOf(entry.snapshot)
        if (entry.snapshot.status !== 'active') entry.snapshot = null
      } catch (error) {
        entry.snapshot = null
        entry.state = 'rejected'
        entry.machineError = `seq ${seq}: ${(error as Error).message}`
      }
    }
  }

  /**
   * The summary of one invocation; `live` holds the invocations a live actor of this process drives,
   * and `undriven` is what an open invocation outside it is: `interrupted` where no other process
   * can be driving it (the log is this process's, or a snapshot of a log no process has open),
   * `open` where one may be.
   */
  summary(invocationId: string, live: ReadonlySet<string>, undriven: 'interrupted' | 'open' = 'interrupted'): InvocationSummary | undefined {
    const entry = this.#invocations.get(invocationId)
    if (!entry) return undefined
    const status = this.#status(entry, live, undriven)
    const link = (l: Omit<RunLink, 'exists'>): RunLink => ({ ...l, exists: this.#invocations.has(l.invocationId) })
    const sealed = entry.outcome?.status === 'handoff_paused' ? entry.outcome.pause.intent : null
    return {
      invocation: entry.invocation,
      inputKind: entry.inputKind,
      status,
      state: entry.state,
      outcome: entry.outcome,
      steps: entry.snapshot?.context.stepsUsed ?? (typeof entry.stepIds === 'number' ? entry.stepIds : entry.stepIds.size),
      facts: entry.facts,
      firstSeq: entry.firstSeq,
      lastSeq: entry.lastSeq,
      openedAt: entry.openedAt,
      lastAt: entry.lastAt,
      uncertain: [...entry.unsettled],
      tools: [...entry.tools],
      failedCalls: entry.failedCalls,
      rejectedCalls: entry.rejectedCalls,
      acknowledged: [...(entry.acknowledged ?? [])].map(([operationId, by]) => ({ operationId, ...by })),
      source: entry.source ? link(entry.source) : null,
      successor: sealed ? link({ kind: 'handoff', runId: sealed.successorRunId, invocationId: sealed.successorInvocationId }) : null,
      continuedBy: (this.#continuations.get(invocationId) ?? []).map(link),
      parent: entry.parent ? { ...entry.parent, exists: this.#invocations.has(entry.parent.invocation.invocationId) } : null,
      children: (this.#children.get(invocationId) ?? []).map((child) => ({ ...child, exists: true, ...(this.#invocations.has(child.invocation.invocationId) ? {} : { dropped: true as const }) })),
      machineError: entry.machineError,
    }
  }

  #status(entry: Entry, live: ReadonlySet<string>, undriven: 'interrupted' | 'open'): InvocationStatus {
    return entry.outcome ? terminalStatusOf(entry.outcome) : live.has(entry.invocation.invocationId) ? 'running' : undriven
  }

  #reflag(session: SessionEntry): void {
    const status = session.last?.outcome?.status
    if (session.open > 0 || session.awaiting > 0 || status === 'failed' || status === 'cancelled') this.#flagged.add(session)
    else this.#flagged.delete(session)
  }

  /**
   * Why a session needs someone: a run open that no live actor of this process drives (`live`; in a
   * snapshot, a run another process may be driving counts, as `factstate pending` lists it), a seal
   * whose successor has not opened, or a last run that ended `failed` or `cancelled` (what
   * `pending --unanswered` lists); `null` when none of these (a run this process is running needs nobody).
   */
  #attention(session: SessionEntry, live: ReadonlySet<string>): Attention | null {
    if (session.open > 0) {
      for (const ids of session.turns.values()) {
        for (const id of ids) if (this.#invocations.get(id)?.outcome === null && !live.has(id)) return 'open'
      }
    }
    if (session.awaiting > 0) return 'paused'
    const status = session.last?.outcome?.status
    return status === 'failed' || status === 'cancelled' ? 'unanswered' : null
  }

  /**
   * At most `limit` sessions: those that need someone (`#attention`) first, then the others, each
   * part most recently active first; the `RECENT_KEPT` most recently active sessions are always
   * listed, so many sessions needing attention never hide what is running now. With `match`
   * (case-insensitive, ASCII), only sessions whose id, or the id of one of their turns, runs or
   * invocations, or one of their runs' tool names or status words (`statusWords`: `failed`,
   * `handed off`, `max_steps`, …; an open run's as `undriven` says), contains it. `total` counts the
   * sessions that qualify, `attention` those of them that need someone. Costs one pass over the sessions (a regular expression per id with `match`)
   * and a sort of those that need attention: no sort of the whole log.
   */
  sessions(
    limit: number,
    match = '',
    live: ReadonlySet<string> = new Set(),
    undriven: 'interrupted' | 'open' = 'interrupted',
  ): {
    total: number
    attention: number
    sessions: { sessionId: string; firstSeq: number; lastSeq: number; attention: Attention | null; turns: { turnId: string; invocationIds: string[] }[] }[]
  } {
    const wanted = match.trim()
    const pattern = wanted === '' ? undefined : new RegExp(wanted.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&'), 'i')
    const matches = (session: SessionEntry): boolean => {
      if (pattern === undefined || pattern.test(session.sessionId)) return true
      // The session's flag (`unanswered`, `awaiting its successor`, …) matches each of its runs, as on the page.
      if (this.#flagged.has(session) && attentionWords(this.#attention(session, live)).some((word) => pattern.test(word))) return true
      for (const [turnId, ids] of session.turns) {
        if (pattern.test(turnId)) return true
        for (const id of ids) {
          const entry = this.#invocations.get(id)
          if (entry === undefined) continue
          const { invocation } = entry
          if (pattern.test(invocation.runId) || pattern.test(invocation.invocationId) || entry.tools.some((name) => pattern.test(name))) return true
          const successor = entry.outcome?.status === 'handoff_paused' ? entry.outcome.pause.intent.successorInvocationId : undefined
          const words = statusWords({ status: this.#status(entry, live, undriven), outcome: entry.outcome, successor: successor === undefined ? null : { exists: this.#invocations.has(successor) } })
          if (words.some((word) => pattern.test(word))) return true
        }
      }
      return false
    }
    const needing: { session: SessionEntry; why: Attention }[] = []
    for (const session of this.#flagged) {
      if (!matches(session)) continue
      const why = this.#attention(session, live)
      if (why !== null) needing.push({ session, why })
    }
    needing.sort((a, b) => b.session.lastSeq - a.session.lastSeq)
    const flaggedNow = new Set(needing.map(({ session }) => session))
    // The others, most recently active first, as many as may be listed; all of them are counted.
    const recent = [...this.#sessions.values()]
    const others: SessionEntry[] = []
    let total = needing.length
    for (let index = recent.length - 1; index >= 0; index -= 1) {
      const session = recent[index] as SessionEntry
      if (flaggedNow.has(session) || !matches(session)) continue
      total += 1
      if (others.length < limit) others.push(session)
    }
    const shownNeeding = Math.min(needing.length, limit - Math.min(RECENT_KEPT, others.length))
    const view = (session: SessionEntry, why: Attention | null) => ({
      sessionId: session.sessionId,
      firstSeq: session.firstSeq,
      lastSeq: session.lastSeq,
      attention: why,
      turns: [...session.turns].map(([turnId, invocationIds]) => ({ turnId, invocationIds: [...invocationIds] })),
    })
    return {
      total,
      attention: needing.length,
      sessions: [
        ...needing.slice(0, shownNeeding).map(({ session, why }) => view(session, why)),
        ...others.slice(0, limit - shownNeeding).map((session) => view(session, null)),
      ],
    }
  }
}
