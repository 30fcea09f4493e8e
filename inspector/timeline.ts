/**
 * One invocation's facts replayed through the invocation machine, fact by fact: the state after
 * each one and the transitions taken. This is the page's time travel; it uses the same machine
 * definition that drives live actors and recovery.
 */
import type { StoredEvent } from '../facts/types.js'
import { usageOf } from '../actors/transcript.js'
import { type InvocationSnapshot, accepts, applyFact, initialInvocationSnapshot, invocationMachine, stateOf } from '../machines/invocation.js'
import type { InvocationSummary, TakenTransition, TimelineEntry, InvocationDetail } from './protocol.js'

/** The transitions the machine takes from `before` on `fact`, and the state it lands in. */
function step(before: InvocationSnapshot, fact: StoredEvent['event']['fact']): { after: InvocationSnapshot; transitions: TakenTransition[] } {
  const from = stateOf(before)
  const [taken] = invocationMachine.getTransitionData(before, fact)
  const target = (taken?.target?.[0] as { key: string } | undefined)?.key ?? from
  const after = applyFact(before, fact)
  const transitions: TakenTransition[] = [{ source: from, target, event: fact.type }]
  const landed = stateOf(after)
  // An eventless (`always`) transition may follow, e.g. settlingTool → safePoint once the last tool settles.
  if (landed !== target) transitions.push({ source: target, target: landed, event: 'always' })
  return { after, transitions }
}

/** The timeline of one invocation from its stored events (in seq order). */
export function timelineOf(summary: InvocationSummary, events: readonly StoredEvent[]): InvocationDetail {
  const initial = initialInvocationSnapshot()
  let snapshot: InvocationSnapshot | null = initial
  const settled = new Set<string>()
  for (const { event } of events) if (event.fact.type === 'tool.settled') settled.add(event.fact.operationId)
  const entries: TimelineEntry[] = events.map(({ seq, event }) => {
    const { fact } = event
    let rejected: string | null = null
    let transitions: TakenTransition[] = []
    if (snapshot && accepts(snapshot, fact)) {
      const result = step(snapshot, fact)
      snapshot = result.after
      transitions = result.transitions
    } else {
      rejected = snapshot
        ? `in state ${stateOf(snapshot)} the machine does not accept ${fact.type}`
        : 'an earlier fact was refused; the machine state is unknown from here'
      snapshot = null
    }
    const context = snapshot?.context
    return {
      seq,
      id: event.id,
      recordedAt: event.recordedAt,
      fact,
      stateAfter: snapshot ? stateOf(snapshot) : 'rejected',
      transitions,
      context: {
        stepsUsed: context?.stepsUsed ?? 0,
        pendingCalls: context ? [...context.pendingCalls] : [],
        inflight: context ? context.inflight.map((op) => op.operationId) : [],
        holdId: context?.holdId ?? null,
      },
      rejected,
      uncertain: fact.type === 'tool.dispatched' && !settled.has(fact.operationId),
    }
  })
  return { summary, initialState: stateOf(initial), entries, usage: usageOf(events) }
}
