/**
 * The invocation machine: what an invocation may do next, decided purely from the facts so far.
 * No I/O, no clock, no randomness, no invoked promises. The same definition drives live actors
 * (each fact is checked here before it is appended), rebuilds any invocation's state from its
 * facts, feeds the visualizer, and is walked by `xstate/graph` to generate test paths.
 */
import { type AnyActorScope, assign, createActor, setup, type SnapshotFrom } from 'xstate'
import { FactstateError, messageWithoutCode } from '../errors.js'
import { compileSchema } from '../facts/compiled-schema.js'
import { describeIssues, factSchema } from '../facts/schema.js'
import type { Fact, FactType, InvocationOutcome } from '../facts/types.js'

/** What the machine remembers between facts. */
export interface InvocationContext {
  /** Model steps begun (a retried request of the same step counts once). */
  stepsUsed: number
  /** The step whose request is in flight, or the last one requested. */
  stepId: string | null
  /** The last model answer had no tool calls: the invocation may complete. */
  answered: boolean
  /** Tool calls of the last answer neither dispatched nor rejected yet. */
  pendingCalls: string[]
  /** Operations dispatched and not settled yet. */
  inflight: {
    /** The operation id of the dispatch. */
    operationId: string
    /** The model's id for the call. */
    callId: string
  }[]
  /** Operations dispatched and never settled, kept after the end. */
  uncertain: string[]
  /** The hold entered, while held. */
  holdId: string | null
  /** How the invocation ended, once `invocation.ended` is applied; null before. */
  outcome: InvocationOutcome | null
  /** Facts applied so far. */
  facts: number
}

const initialContext: InvocationContext = {
  stepsUsed: 0,
  stepId: null,
  answered: false,
  pendingCalls: [],
  inflight: [],
  uncertain: [],
  holdId: null,
  outcome: null,
  facts: 0,
}

type E<T extends FactType> = Extract<Fact, { type: T }>

const endsAbnormally = (fact: E<'invocation.ended'>) => fact.outcome.status === 'failed' || fact.outcome.status === 'cancelled'

/**
 * The invocation statechart. Its events are the facts (`Fact`), its states:
 * `opening` → `safePoint` ⇄ `awaitingModel` → `settlingTool` → `safePoint` … ⇄ `held` →
 * `committed` (sealed by a handoff) | `ended`. After the final answer (a model answer without tool
 * calls) the safe point only ends: no further request, and no hold, since a successor would discard
 * the answer and ask again.
 *
 * @example
 * ```ts
 * import { foldFacts } from 'factstate'
 * const snapshot = foldFacts(events.map((e) => e.event.fact))
 * snapshot.value // 'held'
 * ```
 */
export const invocationMachine = setup({
  types: { context: {} as InvocationContext, events: {} as Fact },
  guards: {
    isCurrentStep: ({ context, event }) => 'stepId' in event && event.stepId === context.stepId,
    answeredWithTools: ({ context, event }) =>
      event.type === 'model.completed' && event.stepId === context.stepId && event.output.toolCalls.length > 0,
    answeredWithoutTools: ({ context, event }) =>
      event.type === 'model.completed' && event.stepId === context.stepId && event.output.toolCalls.length === 0,
    mayRequest: ({ context }) => !context.answered,
    /** A hold parks a run that has a next model request to make: after the final answer there is none to hand off. */
    mayHold: ({ context }) => !context.answered,
    isPendingCall: ({ context, event }) =>
      (event.type === 'tool.dispatched' || event.type === 'tool.rejected') && context.pendingCalls.includes(event.callId),
    isInflight: ({ context, event }) =>
      event.type === 'tool.settled' && context.inflight.some((op) => op.operationId === event.operationId),
    allResolved: ({ context }) => context.pendingCalls.length === 0 && context.inflight.length === 0,
    isHeldId: ({ context, event }) => event.type === 'hold.released' && event.handoffId === context.holdId,
    completes: ({ context, event }) => event.type === 'invocation.ended' && event.outcome.status === 'completed' && context.answered,
    pausesHeld: ({ context, event }) =>
      event.type === 'invocation.ended' &&
      event.outcome.status === 'handoff_paused' &&
      event.outcome.pause.intent.handoffId === context.holdId,
    endsAbnormally: ({ event }) => event.type === 'invocation.ended' && endsAbnormally(event),
  },
  actions: {
    count: assign({ facts: ({ context }) => context.facts + 1 }),
    request: assign(({ context, event }) => {
      const { stepId } = event as E<'model.requested'>
      return { stepId, stepsUsed: stepId === context.stepId ? context.stepsUsed : context.stepsUsed + 1 }
    }),
    takeCalls: assign({ pendingCalls: ({ event }) => (event as E<'model.completed'>).output.toolCalls.map((call) => call.callId) }),
    markAnswered: assign({ answered: true }),
    dispatch: assign(({ context, event }) => {
      const { callId, operationId } = event as E<'tool.dispatched'>
      return {
        pendingCalls: without(context.pendingCalls, callId),
        inflight: [...context.inflight, { operationId, callId }],
        uncertain: [...context.uncertain, operationId],
      }
    }),
    reject: assign({ pendingCalls: ({ context, event }) => without(context.pendingCalls, (event as E<'tool.rejected'>).callId) }),
    settle: assign(({ context, event }) => {
      const { operationId } = event as E<'tool.settled'>
      return {
        inflight: context.inflight.filter((op) => op.operationId !== operationId),
        uncertain: context.uncertain.filter((op) => op !== operationId),
      }
    }),
    enterHold: assign({ holdId: ({ event }) => (event as E<'hold.entered'>).handoffId }),
    leaveHold: assign({ holdId: null }),
    end: assign({ outcome: ({ event }) => (event as E<'invocation.ended'>).outcome }),
  },
}).createMachine({
  id: 'invocation',
  initial: 'opening',
  context: initialContext,
  states: {
    opening: {
      on: { 'invocation.opened': { target: 'safePoint', actions: 'count' } },
    },
    safePoint: {
      on: {
        'model.requested': { guard: 'mayRequest', target: 'awaitingModel', actions: ['count', 'request'] },
        'hold.entered': { guard: 'mayHold', target: 'held', actions: ['count', 'enterHold'] },
        'invocation.ended': [
          { guard: 'completes', target: 'ended', actions: ['count', 'end'] },
          { guard: 'endsAbnormally', target: 'ended', actions: ['count', 'end'] },
        ],
      },
    },
    awaitingModel: {
      on: {
        'model.completed': [
          { guard: 'answeredWithTools', target: 'settlingTool', actions: ['count', 'takeCalls'] },
          { guard: 'answeredWithoutTools', target: 'safePoint', actions: ['count', 'markAnswered'] },
        ],
        'model.interrupted': { guard: 'isCurrentStep', target: 'safePoint', actions: 'count' },
        'invocation.ended': { guard: 'endsAbnormally', target: 'ended', actions: ['count', 'end'] },
      },
    },
    settlingTool: {
      always: { guard: 'allResolved', target: 'safePoint' },
      on: {
        'tool.dispatched': { guard: 'isPendingCall', actions: ['count', 'dispatch'] },
        'tool.rejected': { guard: 'isPendingCall', actions: ['count', 'reject'] },
        'tool.settled': { guard: 'isInflight', actions: ['count', 'settle'] },
        'invocation.ended': { guard: 'endsAbnormally', target: 'ended', actions: ['count', 'end'] },
      },
    },
    held: {
      on: {
        'hold.released': { guard: 'isHeldId', target: 'safePoint', actions: ['count', 'leaveHold'] },
        'invocation.ended': [
          { guard: 'pausesHeld', target: 'committed', actions: ['count', 'end'] },
          { guard: 'endsAbnormally', target: 'ended', actions: ['count', 'end', 'leaveHold'] },
        ],
      },
    },
    committed: { type: 'final' },
    ended: { type: 'final' },
  },
})

function without(list: string[], item: string): string[] {
  const index = list.indexOf(item)
  return index === -1 ? list : [...list.slice(0, index), ...list.slice(index + 1)]
}

/** A state of the invocation machine. */
export type InvocationSnapshot = SnapshotFrom<typeof invocationMachine>

/** The names of the machine's states. */
export type InvocationState = 'opening' | 'safePoint' | 'awaitingModel' | 'settlingTool' | 'held' | 'committed' | 'ended'

/**
 * The scope every transition runs in. xstate's `transition()` builds a whole inert actor (and its
 * initial state) per call, most of a transition's cost; this machine has no action that uses its
 * scope (only `assign`, applied during the transition), so one inert scope serves them all and the
 * machine stays pure.
 */
export const pureScope: AnyActorScope = (() => {
  const self = createActor(invocationMachine)
  const ignore = () => undefined
  return { self, id: '', sessionId: '', system: self.system, defer: ignore, logger: ignore, stopChild: ignore, emit: ignore, actionExecutor: ignore }
})()

/** The state before any fact. */
export function initialInvocationSnapshot(): InvocationSnapshot {
  return invocationMachine.getInitialSnapshot(pureScope)
}

/** The fact's `type`, or null for what is not a fact; never throws (a getter or proxy trap may). */
function typeOf(fact: unknown): string | null {
  try {
    const type = typeof fact === 'object' && fact !== null ? (fact as { type?: unknown }).type : undefined
    return typeof type === 'string' ? type : null
  } catch {
    return null
  }
}

/** What a value that is not a fact is, for a message (`String()` of it may throw). */
const kindOf = (value: unknown): string => {
  if (value === null) return 'null'
  try {
    return Array.isArray(value) ? 'an array' : `a value of type ${typeof value}`
  } catch {
    // A revoked proxy throws even for Array.isArray.
    return 'an object that cannot be read'
  }
}

const copyFact = compileSchema(factSchema, 'fact')
/** Deeper than any fact the log stores (an event may nest 64 levels); deeper ones are checked by zod itself. */
const FACT_DEPTH = 256

/**
 * `fact` checked against the fact schema the log validates appends with, and copied (so the
 * snapshot never shares the caller's objects), or why it is not a fact: the machine's guards and
 * actions read members a fact must have, and a fact lacking them would be taken on a wrong reading.
 */
function checkedFact(fact: unknown): { fact: Fact } | { problem: string } {
  if (typeOf(fact) === null) return { problem: `${kindOf(fact)}, which is not a fact` }
  try {
    const copied = copyFact(fact, FACT_DEPTH)
    if (copied !== undefined) return { fact: copied }
    const parsed = factSchema.safeParse(fact)
    return parsed.success ? { fact: parsed.data as Fact } : { problem: `this ${typeOf(fact)} fact, which is not whole (${describeIssues(parsed.error)})` }
  } catch (error) {
    return { problem: `this ${typeOf(fact)} fact, which cannot be read (${error instanceof Error ? error.message : 'it threw'})` }
  }
}

/** For callers from plain JavaScript: a snapshot must come from this machine (`initialInvocationSnapshot`, `foldFacts`, `applyFact`). */
function assertSnapshot(snapshot: unknown): asserts snapshot is InvocationSnapshot {
  let machine: unknown
  try {
    machine = typeof snapshot === 'object' && snapshot !== null ? (snapshot as { machine?: unknown }).machine : undefined
  } catch {
    // A getter or a proxy trap that throws: not one of this machine's snapshots either.
    machine = undefined
  }
  if (machine !== invocationMachine) {
    throw new FactstateError('MACHINE_REJECTED', 'not a snapshot of the invocation machine: start from initialInvocationSnapshot() or foldFacts()', {
      details: { state: null },
    })
  }
}

/** Whether the machine takes a checked fact in an active snapshot. */
function takes(snapshot: InvocationSnapshot, fact: Fact): boolean {
  if (snapshot.status !== 'active') return false
  try {
    return snapshot.can(fact)
  } catch {
    // A guard that throws on a whole fact is a bug of the machine's; the fact is not taken.
    return false
  }
}

/** True when the machine accepts `fact` in `snapshot` (false for anything that is not a whole fact). */
export function accepts(snapshot: InvocationSnapshot, fact: Fact): boolean {
  assertSnapshot(snapshot)
  const checked = checkedFact(fact)
  return 'fact' in checked && takes(snapshot, checked.fact)
}

/**
 * The next state after `fact`; `MACHINE_REJECTED` (and nothing applied) if the machine does not
 * accept it, or it is not a whole fact (`details.type` is then its type, or null for what is not a
 * fact at all). The snapshot keeps a copy of the fact, never the caller's objects.
 */
export function applyFact(snapshot: InvocationSnapshot, fact: Fact): InvocationSnapshot {
  assertSnapshot(snapshot)
  const type = typeOf(fact)
  const checked = checkedFact(fact)
  if ('problem' in checked) {
    throw new FactstateError('MACHINE_REJECTED', `in state ${String(snapshot.value)} the invocation machine cannot take ${checked.problem}`, {
      details: { state: snapshot.value, type },
    })
  }
  if (!takes(snapshot, checked.fact)) {
    throw new FactstateError('MACHINE_REJECTED', `in state ${String(snapshot.value)} the invocation machine does not accept ${type}`, {
      details: { state: snapshot.value, type },
    })
  }
  try {
    return invocationMachine.transition(snapshot, checked.fact, pureScope)
  } catch (error) {
    // An action that throws on a whole fact is a bug of the machine's: refused, nothing applied.
    throw new FactstateError('MACHINE_REJECTED', `the invocation machine cannot apply ${type}: ${error instanceof Error ? error.message : 'its action threw'}`, {
      cause: error,
      details: { state: snapshot.value, type },
    })
  }
}

/** Rebuilds an invocation's state from its facts, in order. `MACHINE_REJECTED` names the first fact the machine refuses. */
export function foldFacts(facts: Iterable<Fact>, from: InvocationSnapshot = initialInvocationSnapshot()): InvocationSnapshot {
  let iterable: boolean
  try {
    iterable = typeof (facts as { [Symbol.iterator]?: unknown } | null | undefined)?.[Symbol.iterator] === 'function'
  } catch {
    iterable = false
  }
  if (!iterable) throw new FactstateError('MACHINE_REJECTED', `foldFacts needs a list of facts, not ${kindOf(facts)}`, { details: { index: null } })
  assertSnapshot(from)
  let snapshot = from
  let index = 0
  for (const fact of facts) {
    try {
      snapshot = applyFact(snapshot, fact)
    } catch (error) {
      if (error instanceof FactstateError) {
        throw new FactstateError('MACHINE_REJECTED', `fact ${index} (${typeOf(fact) ?? kindOf(fact)}) contradicts the machine: ${messageWithoutCode(error)}`, {
          details: { index, ...error.details },
        })
      }
      throw error
    }
    index += 1
  }
  return snapshot
}

/** The state name of a snapshot (`MACHINE_REJECTED` for what is not a snapshot of this machine). */
export function stateOf(snapshot: InvocationSnapshot): InvocationState {
  assertSnapshot(snapshot)
  return snapshot.value as InvocationState
}
