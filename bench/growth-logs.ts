/**
 * The logs of the growth benchmark (bench/growth.ts), shared with `bench/profile.ts recover`:
 * ten target runs buried under unrelated whole invocations, compacted to a steady state, and the
 * open invocations each recovery round closes.
 */
import { ClassicLevel } from 'classic-level'
import type { RuntimeEvent } from '../facts/types.js'
import { EventLog } from '../store/event-log.js'
import { STEPS, invocationEvents, invocationFacts, invocationFor } from './workload.js'

export const TARGETS = 10
export const OPEN_INVOCATIONS = 10
const LANES = 64

/**
 * A log with the target runs first, then about `unrelated` facts of other sessions: whole
 * invocations (so that none is left open), `LANES` sessions appending side by side. Returns the
 * number of unrelated facts written.
 */
export async function buildGrowthLog(path: string, unrelated: number): Promise<number> {
  const log = await EventLog.open(path, { durability: 'os' })
  try {
    const complete = invocationFacts(STEPS)
    for (let j = 0; j <= TARGETS; j += 1) {
      await log.appendAll(invocationEvents(invocationFor('target', j), complete))
    }
    const invocations = Math.max(1, Math.round(unrelated / complete.length))
    let next = 0
    await Promise.all(
      Array.from({ length: LANES }, async (_, lane) => {
        for (let index = next++; index < invocations; index = next++) {
          await log.appendAll(invocationEvents(invocationFor('bulk', index, `bulk-s${lane}`), complete))
        }
      }),
    )
    return invocations * complete.length
  } finally {
    await log.close()
  }
}

/**
 * Lets LevelDB finish the compactions the bulk build queued, as they would be on a log that has
 * been running for a while: otherwise the first writes to the big log stall behind them.
 */
export async function settleLog(path: string): Promise<void> {
  const db = new ClassicLevel(path)
  await db.open()
  try {
    await db.compactRange('\u0000', '\uffff')
  } finally {
    await db.close()
  }
}

/** Appends `OPEN_INVOCATIONS` invocations that stop while their model request is in flight (what a killed host leaves). */
export async function leaveOpen(log: EventLog, tag: string): Promise<void> {
  const open = invocationFacts(0, true)
  const events: RuntimeEvent[][] = Array.from({ length: OPEN_INVOCATIONS }, (_, k) => invocationEvents(invocationFor(tag, k), open))
  await Promise.all(events.map((list) => log.appendAll(list)))
}
