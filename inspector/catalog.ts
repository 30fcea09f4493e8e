/**
 * What the overview needs, kept in memory and maintained fact by fact: one small entry per
 * invocation (never its facts), grouped by session and turn. Built once from the log and then
 * fed by the log's subscription, so a page refresh costs nothing proportional to the log.
 */
import type { Invocation, InvocationOutcome, StoredEvent } from '../facts/types.js'
import { terminalStatusOf } from '../facts/types.js'
import { type InvocationSnapshot, applyFact, initialInvocationSnapshot, stateOf } from '../machines/invocation.js'
import type { InvocationStatus, InvocationSummary, RunLink } from './protocol.js'

interface Entry {
  invocation: Invocation
  inputKind: InvocationSummary['inputKind']
  snapshot: InvocationSnapshot | null
  state: string
  machineError: string | null
  outcome: InvocationOutcome | null
  stepIds: Set<string>
  facts: number
  firstSeq: number
  lastSeq: number
  openedAt: number
  lastAt: number
  unsettled: string[]
  source: Omit<RunLink, 'exists'> | null
}

interface SessionEntry {
  sessionId: string
  firstSeq: number
  lastSeq: number
  /** turnId → invocation ids in the order they opened. */
  turns: Map<string, string[]>
}

/** The in-memory index behind `/api/overview`. */
export class Catalog {
  readonly #invocations = new Map<string, Entry>()
  readonly #sessions = new Map<string, SessionEntry>()
  readonly #continuations = new Map<string, Omit<RunLink, 'exists'>[]>()
  #highWater = 0

  get highWater(): number {
    return this.#highWater
  }

  get sessionCount(): number {
    return this.#sessions.size
  }

  /** Applies stored events in seq order; events at or below the high-water are ignored (already seen). */
  apply(events: readonly StoredEvent[]): void {
    for (const stored of events) {
      if (stored.seq <= this.#highWater) continue
      this.#applyOne(stored)
      this.#highWater = stored.seq
    }
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
        unsettled: [],
        source,
      }
      this.#invocations.set(invocation.invocationId, entry)
      if (source?.kind === 'continuation') {
        const list = this.#continuations.get(source.invocationId) ?? []
        list.push({ kind: 'continuation', runId: invocation.runId, invocationId: invocation.invocationId })
        this.#continuations.set(source.invocationId, list)
      }
      let session = this.#sessions.get(invocation.sessionId)
      if (!session) {
        session = { sessionId: invocation.sessionId, firstSeq: seq, lastSeq: seq, turns: new Map() }
        this.#sessions.set(invocation.sessionId, session)
      }
      const turn = session.turns.get(invocation.turnId) ?? []
      turn.push(invocation.invocationId)
      session.turns.set(invocation.turnId, turn)
    }
    entry.facts += 1
    entry.lastSeq = seq
    entry.lastAt = event.recordedAt
    const session = this.#sessions.get(invocation.sessionId)
    if (session) session.lastSeq = seq
    switch (fact.type) {
      case 'model.requested':
        entry.stepIds.add(fact.stepId)
        break
      case 'tool.dispatched':
        entry.unsettled.push(fact.operationId)
        break
      case 'tool.settled':
        entry.unsettled = entry.unsettled.filter((op) => op !== fact.operationId)
        break
      case 'invocation.ended':
        entry.outcome = fact.outcome
        break
      default:
        break
    }
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
    const status: InvocationStatus = entry.outcome
      ? terminalStatusOf(entry.outcome)
      : live.has(invocationId)
        ? 'running'
        : undriven
    const link = (l: Omit<RunLink, 'exists'>): RunLink => ({ ...l, exists: this.#invocations.has(l.invocationId) })
    const sealed = entry.outcome?.status === 'handoff_paused' ? entry.outcome.pause.intent : null
    return {
      invocation: entry.invocation,
      inputKind: entry.inputKind,
      status,
      state: entry.state,
      outcome: entry.outcome,
      steps: entry.snapshot?.context.stepsUsed ?? entry.stepIds.size,
      facts: entry.facts,
      firstSeq: entry.firstSeq,
      lastSeq: entry.lastSeq,
      openedAt: entry.openedAt,
      lastAt: entry.lastAt,
      uncertain: [...entry.unsettled],
      source: entry.source ? link(entry.source) : null,
      successor: sealed ? link({ kind: 'handoff', runId: sealed.successorRunId, invocationId: sealed.successorInvocationId }) : null,
      continuedBy: (this.#continuations.get(invocationId) ?? []).map(link),
      machineError: entry.machineError,
    }
  }

  /**
   * Why a session needs someone: a run still open, a sealed run whose successor has not started, or
   * a last run that ended `failed` or `cancelled` (what `factstate pending` and `--unanswered` list);
   * `null` when none of these.
   */
  #attention(session: SessionEntry): 'open' | 'paused' | 'unanswered' | null {
    let last: Entry | undefined
    let paused = false
    for (const ids of session.turns.values()) {
      for (const id of ids) {
        const entry = this.#invocations.get(id)
        if (entry === undefined) continue
        if (entry.outcome === null) return 'open'
        if (entry.outcome.status === 'handoff_paused' && !this.#invocations.has(entry.outcome.pause.intent.successorInvocationId)) paused = true
        if (last === undefined || entry.firstSeq > last.firstSeq) last = entry
      }
    }
    if (paused) return 'paused'
    const status = last?.outcome?.status
    return status === 'failed' || status === 'cancelled' ? 'unanswered' : null
  }

  #matches(session: SessionEntry, match: string): boolean {
    if (session.sessionId.toLowerCase().includes(match)) return true
    for (const [turnId, ids] of session.turns) {
      if (turnId.toLowerCase().includes(match)) return true
      for (const id of ids) {
        const invocation = this.#invocations.get(id)?.invocation
        if (invocation && (invocation.runId.toLowerCase().includes(match) || invocation.invocationId.toLowerCase().includes(match))) return true
      }
    }
    return false
  }

  /**
   * At most `limit` sessions: those that need someone (an open run, a sealed run awaiting its
   * successor, a last run that failed or was cancelled) first, then the others, each part most
   * recently active first, so a busy log never pushes a session that needs attention off the list.
   * With `match` (case-insensitive), only sessions whose id, or the id of one of their turns, runs
   * or invocations, contains it. `total` counts the sessions that qualify, `attention` those of them
   * that need someone.
   */
  sessions(
    limit: number,
    match = '',
  ): {
    total: number
    attention: number
    sessions: { sessionId: string; firstSeq: number; lastSeq: number; attention: 'open' | 'paused' | 'unanswered' | null; turns: { turnId: string; invocationIds: string[] }[] }[]
  } {
    const wanted = match.trim().toLowerCase()
    const found: { session: SessionEntry; attention: 'open' | 'paused' | 'unanswered' | null }[] = []
    let attention = 0
    for (const session of this.#sessions.values()) {
      if (wanted !== '' && !this.#matches(session, wanted)) continue
      const why = this.#attention(session)
      if (why !== null) attention += 1
      found.push({ session, attention: why })
    }
    found.sort((a, b) => (a.attention === null) === (b.attention === null) ? b.session.lastSeq - a.session.lastSeq : a.attention === null ? 1 : -1)
    return {
      total: found.length,
      attention,
      sessions: found.slice(0, limit).map(({ session, attention: why }) => ({
        sessionId: session.sessionId,
        firstSeq: session.firstSeq,
        lastSeq: session.lastSeq,
        attention: why,
        turns: [...session.turns].map(([turnId, invocationIds]) => ({ turnId, invocationIds: [...invocationIds] })),
      })),
    }
  }
}
