import { isFactstateError } from '../errors.js'
import type { Fact, RuntimeEvent } from '../facts/types.js'
import { type EventLog, logInternals } from './event-log.js'
import type { InvocationRecord } from './projection.js'

/** The facts that close an invocation a crash left open (DESIGN §7). No settlement is invented. */
export function closingFacts(record: InvocationRecord): Fact[] {
  const facts: Fact[] = []
  for (const stepId of record.openSteps) {
    facts.push({ type: 'model.interrupted', stepId, status: 'failed', message: 'the host stopped while the model request was in flight' })
  }
  if (record.uncertain.length > 0) {
    const names = record.uncertain.map((op) => `${op.name} (${op.operationId})`).join(', ')
    facts.push({
      type: 'invocation.ended',
      outcome: { status: 'failed', class: 'outcome_unknown', message: `the host stopped while these tools ran: ${names}` },
    })
  } else {
    facts.push({ type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted', message: 'the host stopped' } })
  }
  return facts
}

/** Refuses a closing whose invocation ended after the call that stages it looked. */
const closedMeanwhile = new Error('closed meanwhile')

/**
 * Closes every invocation a crash left open and returns how many it closed. Invocations driven
 * by a live actor of this process are left alone. A second call returns 0 and writes nothing.
 *
 * @example
 * ```ts
 * const log = await EventLog.open(dir)
 * const closed = await recoverInvocations(log) // 0 after a clean shutdown
 * ```
 */
export async function recoverInvocations(log: EventLog, options: { now?: () => number } = {}): Promise<number> {
  const internals = logInternals(log)
  const now = options.now ?? Date.now
  // All at once, not one after the other: the closings share group commits (one sync per group, not per invocation).
  const outcomes = await Promise.allSettled(
    internals
      .openInvocations()
      .filter((record) => !internals.live.has(record.invocation.invocationId))
      .map(async (record) => {
        const events: RuntimeEvent[] = closingFacts(record).map((fact, index) => ({
          id: `${record.invocation.invocationId}/recovered/${record.facts + index + 1}`,
          recordedAt: now(),
          invocation: record.invocation,
          fact,
        }))
        try {
          // Checked inside the group commit: a call running beside this one may have staged the same
          // closing facts already, and their repeat would be acknowledged as if this call wrote them.
          await internals.appendAll(events, async (view) => {
            if ((await view.invocation(record.invocation.invocationId))?.terminal !== null) throw closedMeanwhile
          })
        } catch (error) {
          // Another call (or a live actor) closed it first: nothing left to do for this one.
          if (error === closedMeanwhile || isFactstateError(error, 'LOG_SEALED') || isFactstateError(error, 'LOG_CONFLICT')) return 0
          throw error
        }
        return 1
      }),
  )
  let closed = 0
  for (const outcome of outcomes) {
    if (outcome.status === 'rejected') throw outcome.reason
    closed += outcome.value
  }
  return closed
}
