import type { StoredEvent, UncertainOperation } from '../facts/types.js'

/**
 * The input each operation was dispatched with, read from its invocation's `tool.dispatched` fact
 * (the session's index keeps an unknown operation without it), keyed by `dispatchedKey`.
 */
export async function dispatchedInputs(
  unknown: readonly UncertainOperation[],
  invocationEvents: (invocationId: string) => Promise<StoredEvent[]>,
): Promise<Map<string, unknown>> {
  const inputs = new Map<string, unknown>()
  for (const invocationId of new Set(unknown.map((op) => op.invocationId))) {
    for (const { event } of await invocationEvents(invocationId)) {
      if (event.fact.type === 'tool.dispatched') inputs.set(dispatchedKey(invocationId, event.fact.operationId), event.fact.input)
    }
  }
  return inputs
}

/** The key of an operation in `dispatchedInputs`' map. */
export const dispatchedKey = (invocationId: string, operationId: string): string => `${invocationId}\n${operationId}`

/** A tool call with effects that a run dispatched and saw settle, as `PendingSession.unanswered.effects` lists it. */
export interface SettledEffect {
  /** Its operation id (`<invocationId>/<stepId>/<index>`), the one its tool was given. */
  operationId: string
  /** The tool's name. */
  name: string
  /** How it settled: `succeeded`, or `failed` (the tool threw, or its result could not be recorded; it may still have done part of its effect). */
  status: 'succeeded' | 'failed'
}

/**
 * The calls of tools not declared `readOnly` that these facts of one invocation dispatched and
 * settled, in dispatch order: what the run already did, which a resent message would do again.
 */
export function settledEffects(events: readonly StoredEvent[]): SettledEffect[] {
  const dispatched = new Map<string, string>()
  const settled = new Map<string, SettledEffect['status']>()
  for (const { event } of events) {
    const { fact } = event
    if (fact.type === 'tool.dispatched' && fact.readOnly !== true) dispatched.set(fact.operationId, fact.name)
    if (fact.type === 'tool.settled' && (fact.outcome.status === 'succeeded' || fact.outcome.status === 'failed')) settled.set(fact.operationId, fact.outcome.status)
  }
  const effects: SettledEffect[] = []
  for (const [operationId, name] of dispatched) {
    const status = settled.get(operationId)
    if (status !== undefined) effects.push({ operationId, name, status })
  }
  return effects
}
