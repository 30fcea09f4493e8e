/**
 * The README's `familyFacts` ("A supervisor's children, and what they all spent"), as it is there
 * (`spec/engine-child-runs.test.ts` holds the README to it): run by the child-run tests.
 */
import type { EventLog, StoredEvent } from '../../index.js'

/** The facts of every run of `sessionId` and, through its delegate calls, of every run they started (and theirs). */
export async function familyFacts(log: EventLog, sessionId: string): Promise<StoredEvent[]> {
  const found: StoredEvent[] = []
  const add = async (invocationId: string): Promise<void> => {
    const own = await log.invocationEvents(invocationId) // this run's facts alone, never its lineage's
    found.push(...own)
    for (const { event } of own) {
      if (event.fact.type !== 'tool.dispatched' || event.fact.name !== 'delegate') continue
      for (const child of await log.childRuns(event.fact.operationId)) await add(child.invocationId)
    }
  }
  for (const run of await log.runs(sessionId)) await add(run.invocationId)
  return found
}
