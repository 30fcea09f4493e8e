/**
 * What the log knows about each invocation, session and run, kept as index records and
 * maintained fact by fact. The reducers here are also the log's integrity rules: a fact that
 * contradicts them is refused before anything is written.
 */
import { FactstateError } from '../errors.js'
import type {
  HandoffIntent,
  Invocation,
  InvocationInput,
  InvocationOutcome,
  RuntimeEvent,
  StoredEvent,
  TerminalStatus,
  UncertainOperation,
} from '../facts/types.js'
import { terminalStatusOf } from '../facts/types.js'

/** The per-invocation index record. */
/** An unsettled operation as an invocation record keeps it: `readOnly` when its tool was declared read-only. */
export type UncertainRecordOperation = UncertainOperation & { readOnly?: true }

export interface InvocationRecord {
  invocation: Invocation
  inputKind: InvocationInput['kind']
  openedSeq: number
  lastSeq: number
  facts: number
  terminal: TerminalStatus | null
  outcome?: InvocationOutcome
  /** Model steps requested and neither completed nor interrupted. */
  openSteps: string[]
  /** Tool operations dispatched and never settled; they stay listed after the end. */
  uncertain: UncertainRecordOperation[]
  /** Every operation id used by a dispatch or a rejection (stored as an array, see `storedInvocationRecord`). */
  operations: OperationIds
  held: string | null
  /**
   * Tool calls of the last model answer neither dispatched nor rejected yet, and whether a model
   * answer without tool calls was recorded (the invocation may complete, and asks nothing more).
   * Absent from records written before they existed: none pending, not answered.
   */
  pendingCalls?: string[]
  answered?: boolean
}

/**
 * The operation ids an invocation has used, in order: a set that is never changed once a record
 * holds it, and adds an id in O(1). The ids of every version share one map from id to position,
 * and a version sees the first `size` of them. Only a version that sees them all may add to the
 * map (its successor then sees one more, and it still sees its own `size`); any other copies the
 * part it sees first (after a refused or discarded staging, whose ids stay behind). A fresh array
 * per dispatch made an invocation's operations cost O(n²): 25,600 of them took 19 s to append.
 */
export class OperationIds {
  static readonly NONE = new OperationIds(undefined, 0)

  private constructor(
    private readonly positions: Map<string, number> | undefined,
    readonly size: number,
  ) {}

  /** The ids of a stored record (an id twice, which no version wrote, is counted once). */
  static of(ids: readonly string[]): OperationIds {
    const positions = new Map<string, number>()
    for (const id of ids) if (!positions.has(id)) positions.set(id, positions.size)
    return positions.size === 0 ? OperationIds.NONE : new OperationIds(positions, positions.size)
  }

  has(id: string): boolean {
    const at = this.positions?.get(id)
    return at !== undefined && at < this.size
  }

  /** These ids and `id` (which must not be one of them). */
  with(id: string): OperationIds {
    let positions = this.positions
    if (positions === undefined || positions.size !== this.size) {
      const copy = new Map<string, number>()
      // Positions follow the map's insertion order: the ids this version sees come first.
      if (positions !== undefined) for (const [known, at] of positions) if (at < this.size) copy.set(known, at)
      else break
      positions = copy
    }
    positions.set(id, this.size)
    return new OperationIds(positions, this.size + 1)
  }

  toArray(): string[] {
    const ids: string[] = []
    if (this.positions === undefined) return ids
    for (const [id, at] of this.positions) if (at < this.size) ids.push(id)
    else break
    return ids
  }
}

/** An invocation record as its index stores it: the operation ids as an array. */
export type StoredInvocationRecord = Omit<InvocationRecord, 'operations'> & { operations: string[] }

/** The stored form of `record`, its members in the record's order. */
export function storedInvocationRecord(record: InvocationRecord): StoredInvocationRecord {
  return { ...record, operations: record.operations.toArray() }
}

/** A stored record (of the shape `recordShapes.invocation` checks) as the log keeps it in memory. */
export function invocationRecordOf(stored: StoredInvocationRecord): InvocationRecord {
  return { ...stored, operations: OperationIds.of(stored.operations) }
}

/** What a caller of `projectInvocation` sees. */
export interface InvocationProjection {
  /** How the invocation ended, or null while it is open (and for an invocation the events do not hold). */
  terminal: TerminalStatus | null
  /** The operation ids of tool calls dispatched and never settled; they stay listed after the end. */
  uncertainOperations: string[]
  /** The step ids of model requests neither completed nor interrupted. */
  unfinishedModelSteps: string[]
}

/** The per-session index record: what admission needs to know. */
export interface SessionRecord {
  /** Invocations opened and not ended. */
  active: { invocationId: string; turnId: string; runId: string }[]
  /** Turns sealed by a handoff whose successor has not finished. */
  paused: { turnId: string; runId: string; invocationId: string; intent: HandoffIntent }[]
  /** Operations of ended invocations whose outcome is unknown and not yet acknowledged. */
  unknown: UncertainOperation[]
  /**
   * The seq of the `invocation.opened` of the session's latest run: where its entry in the `recent`
   * index is (since index format 5; a log of an earlier version gets it on open).
   */
  latestOpenedSeq?: number
}

/**
 * The per-run index record: its invocation, the boundary it continued from and the call that started
 * it, written once when the run opens. (Records written by earlier versions also hold a `lastSeq` and a `chain`, now ignored:
 * the run's last fact is its invocation's, and its chain is computed from its facts when asked.)
 */
export interface RunRecord {
  invocationId: string
  source?: { runId: string; highWater: number; digest: string }
  /**
   * The operation id of the tool call that started the run as a child run (its `invocation.opened`'s
   * `input.parent.operationId`), null when it records none, so that `childRuns` finds a call's runs
   * from the run records alone. Absent from records written before 0.7.0 (their opened fact says),
   * and ignored by the versions before it, which compare and read only the members above.
   */
  parentOperationId?: string | null
}

/**
 * The operation id of the call a run's opening `input` records as its parent, or null: a handoff
 * successor records none of its own (it keeps its turn's). What a run record's `parentOperationId` holds.
 */
export const parentOperationIdOf = (input: InvocationInput): string | null => (input.kind === 'handoff' ? null : (input.parent?.operationId ?? null))

export const emptySession = (): SessionRecord => ({ active: [], paused: [], unknown: [] })

const sameInvocation = (a: Invocation, b: Invocation) =>
  a.sessionId === b.sessionId && a.turnId === b.turnId && a.runId === b.runId && a.invocationId === b.invocationId

/** No pending calls: one frozen array shared by every record (records are replaced, never changed in place). */
const NO_CALLS: string[] = Object.freeze([]) as unknown as string[]

function refuse(event: RuntimeEvent, reason: string): never {
  throw new FactstateError('LOG_REJECTED_FACT', `${event.fact.type} for ${event.invocation.invocationId} refused: ${reason}`, {
    details: { eventId: event.id, invocationId: event.invocation.invocationId, type: event.fact.type },
  })
}

/**
 * Applies one event to its invocation's record and returns the new record (the old one is not
 * touched). Throws `LOG_SEALED` or `LOG_REJECTED_FACT` for a fact the log must not accept: the
 * rules of the invocation machine (machines/invocation.ts), checked on the record. `strict: false`
 * (replaying stored facts) keeps only the rules every factstate version enforced, so a log an
 * earlier version accepted still opens.
 */
export function applyToInvocation(record: InvocationRecord | undefined, event: RuntimeEvent, seq: number, strict = true): InvocationRecord {
  const { fact } = event
  if (record === undefined) {
    if (fact.type !== 'invocation.opened') refuse(event, 'the invocation was never opened')
    return {
      invocation: event.invocation,
      inputKind: fact.input.kind,
      openedSeq: seq,
      lastSeq: seq,
      facts: 1,
      terminal: null,
      openSteps: [],
      uncertain: [],
      operations: OperationIds.NONE,
      held: null,
      pendingCalls: NO_CALLS,
      answered: false,
    }
  }
  if (record.terminal !== null) {
    throw new FactstateError('LOG_SEALED', `invocation ${record.invocation.invocationId} has ended (${record.terminal}); no new fact is accepted`, {
      details: { invocationId: record.invocation.invocationId, eventId: event.id },
    })
  }
  if (!sameInvocation(record.invocation, event.invocation)) refuse(event, 'its session, turn or run differ from the opened invocation')
  // Member by member, in the stored order, rather than `{ ...record, lastSeq, facts }`: V8 builds a
  // spread with overridden members on a slow path, ~15 times the cost (0.3 µs on every fact). A record
  // here is never terminal, so it has no outcome to carry.
  const next: InvocationRecord = {
    invocation: record.invocation,
    inputKind: record.inputKind,
    openedSeq: record.openedSeq,
    lastSeq: seq,
    facts: record.facts + 1,
    terminal: record.terminal,
    openSteps: record.openSteps,
    uncertain: record.uncertain,
    operations: record.operations,
    held: record.held,
    pendingCalls: record.pendingCalls ?? NO_CALLS,
    answered: record.answered ?? false,
  }
  const pending = next.pendingCalls as string[]
  // Held, the machine waits for the holder's decision alone.
  if (strict && record.held !== null && fact.type !== 'hold.released' && fact.type !== 'invocation.ended') {
    refuse(event, `the invocation is held (${record.held}); only hold.released or invocation.ended may follow`)
  }
  switch (fact.type) {
    case 'invocation.opened':
      return refuse(event, 'the invocation is already open')
    case 'model.requested':
      if (record.openSteps.length > 0) refuse(event, `step ${record.openSteps[0]} is still in flight`)
      if (strict && (pending.length > 0 || record.uncertain.length > 0)) refuse(event, 'the tool calls of the last answer are not all settled or rejected')
      if (strict && next.answered) refuse(event, 'the model has given its final answer')
      next.openSteps = [fact.stepId]
      return next
    case 'model.completed':
    case 'model.interrupted':
      if (!record.openSteps.includes(fact.stepId)) refuse(event, `step ${fact.stepId} is not in flight`)
      next.openSteps = record.openSteps.filter((step) => step !== fact.stepId)
      if (fact.type === 'model.completed') {
        if (fact.output.toolCalls.length > 0) next.pendingCalls = fact.output.toolCalls.map((call) => call.callId)
        else next.answered = true
      }
      return next
    case 'tool.dispatched':
    case 'tool.rejected': {
      if (record.operations.has(fact.operationId)) refuse(event, `operation ${fact.operationId} was already used`)
      const index = pending.indexOf(fact.callId)
      if (strict && index === -1) refuse(event, `call ${fact.callId} is not a pending call of the last model answer`)
      if (index !== -1) next.pendingCalls = pending.length === 1 ? NO_CALLS : [...pending.slice(0, index), ...pending.slice(index + 1)]
      next.operations = record.operations.with(fact.operationId)
      if (fact.type === 'tool.dispatched') {
        const op: UncertainRecordOperation = { invocationId: record.invocation.invocationId, operationId: fact.operationId, callId: fact.callId, name: fact.name }
        if (fact.readOnly === true) op.readOnly = true
        next.uncertain = [...record.uncertain, op]
      }
      return next
    }
    case 'tool.settled':
      if (!record.uncertain.some((op) => op.operationId === fact.operationId)) {
        refuse(event, `operation ${fact.operationId} is not dispatched and unsettled`)
      }
      next.uncertain = record.uncertain.filter((op) => op.operationId !== fact.operationId)
      return next
    case 'hold.entered':
      if (record.held !== null) refuse(event, `hold ${record.held} is already entered`)
      if (record.openSteps.length > 0 || record.uncertain.length > 0 || (strict && pending.length > 0)) refuse(event, 'a hold is only entered at a safe point')
      // A successor would discard the answer and ask the model again: the run can only complete.
      if (strict && next.answered) refuse(event, 'the model has given its final answer: the invocation can only complete, not be held')
      next.held = fact.handoffId
      return next
    case 'hold.released':
      if (record.held !== fact.handoffId) refuse(event, `hold ${fact.handoffId} is not the one entered`)
      next.held = null
      return next
    case 'invocation.ended': {
      const { outcome } = fact
      if (outcome.status === 'completed' && record.uncertain.length > 0) {
        refuse(event, 'a dispatched tool is unsettled, so the invocation cannot complete')
      }
      if (strict && outcome.status === 'completed' && (!next.answered || record.openSteps.length > 0 || pending.length > 0 || record.held !== null)) {
        refuse(event, 'an invocation completes only at a safe point after a model answer without tool calls')
      }
      if (outcome.status === 'handoff_paused' && record.held !== outcome.pause.intent.handoffId) {
        refuse(event, `a handoff pause needs hold ${outcome.pause.intent.handoffId} entered`)
      }
      next.terminal = terminalStatusOf(outcome)
      next.outcome = outcome
      next.held = null
      return next
    }
    default: {
      const never: never = fact
      return refuse(event, `unknown fact ${JSON.stringify(never)}`)
    }
  }
}

/** Applies an event (already applied to `record`) to its session's record; returns a new record. */
export function applyToSession(session: SessionRecord, record: InvocationRecord, event: RuntimeEvent): SessionRecord {
  const { fact, invocation } = event
  if (fact.type === 'invocation.opened') {
    // Its members written out, not spread: the spread that added `latestOpenedSeq` made new shapes (hidden
    // classes) for every record, ~5 per open session in a heap snapshot of 1,000 held runs, ~0.34 KiB of heap
    // each (bench/held.ts: 7.41 → 7.75 KiB per held run; 7.40 so).
    const next: SessionRecord = {
      active: [...session.active, { invocationId: invocation.invocationId, turnId: invocation.turnId, runId: invocation.runId }],
      paused: session.paused,
      unknown: session.unknown,
      latestOpenedSeq: record.openedSeq,
    }
    if (fact.input.kind === 'handoff') {
      const source = fact.input.source.invocation.invocationId
      next.paused = session.paused.filter((turn) => turn.invocationId !== source)
    } else if (fact.input.priorUnknown?.length) {
      const acknowledged = new Set(fact.input.priorUnknown.map((op) => op.operationId))
      next.unknown = session.unknown.filter((op) => !acknowledged.has(op.operationId))
    }
    return next
  }
  if (fact.type !== 'invocation.ended') return session
  const active = session.active.filter((a) => a.invocationId !== invocation.invocationId)
  const next: SessionRecord =
    session.latestOpenedSeq === undefined
      ? { active, paused: session.paused, unknown: session.unknown }
      : { active, paused: session.paused, unknown: session.unknown, latestOpenedSeq: session.latestOpenedSeq }
  if (fact.outcome.status === 'handoff_paused') {
    next.paused = [
      ...session.paused,
      { turnId: invocation.turnId, runId: invocation.runId, invocationId: invocation.invocationId, intent: fact.outcome.pause.intent },
    ]
  }
  // A read-only tool's unknown outcome changed nothing: the session needs no reconciliation for it.
  const unknown = record.uncertain.filter((op) => op.readOnly !== true)
  if (unknown.length > 0) next.unknown = [...session.unknown, ...unknown]
  return next
}

/** Projects one invocation from a sequence of stored events (all of the log, or any superset of its events). */
export function projectInvocation(events: Iterable<StoredEvent>, invocationId: string): InvocationProjection {
  let record: InvocationRecord | undefined
  for (const { seq, event } of events) {
    if (event.invocation.invocationId === invocationId) record = applyToInvocation(record, event, seq, false)
  }
  return projectionOf(record)
}

/** The public projection of a record (or of an invocation the log never saw). */
export function projectionOf(record: InvocationRecord | undefined): InvocationProjection {
  return {
    terminal: record?.terminal ?? null,
    uncertainOperations: record?.uncertain.map((op) => op.operationId) ?? [],
    unfinishedModelSteps: record?.openSteps ?? [],
  }
}
