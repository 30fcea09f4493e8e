/**
 * Benchmarks 3 and 6: cost that must grow with what is asked for, not with the log.
 *
 * - `runSourceGrowth`: `runSource` of a run on a log with 1,000,000 unrelated facts / the same on
 *   a log with 1,000 (the 10 target runs are written first, so the unrelated facts bury them).
 *   Each call is the first for its run after an open (nothing cached in memory).
 * - `recoverGrowth`: `recoverInvocations` closing 10 open invocations, same two logs.
 * - `reopenMs`: `EventLog.open` (with its tail check) of the 1,000,000-fact log.
 * - `snapshotMs`: `EventLog.openSnapshot` of the 1,000,000-fact log while it is open here (the copy,
 *   its table files linked, and the copy's open with its tail check), as a reader in another
 *   process would take it.
 *
 * Quick mode uses 50,000 unrelated facts instead of 1,000,000.
 *
 * Child entry: `node --import tsx bench/growth.ts [--quick]`.
 */
import { join } from 'node:path'
import { EventLog } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { OPEN_INVOCATIONS, TARGETS, buildGrowthLog, leaveOpen, settleLog } from './growth-logs.js'
import { emit, median, now, parseArgs, progress, withTempDir } from './support.js'
import { invocationFor } from './workload.js'

interface Sample {
  reopenMs: number
  runSourceMs: number[]
  recoverMs: number
}

let round = 0

/** One round on `path`: reopen, cold `runSource` of every target, then recovery of 10 fresh open invocations. */
async function sampleRound(path: string): Promise<Sample> {
  const opened = now()
  let log = await EventLog.open(path)
  const reopenMs = now() - opened
  const runSourceMs: number[] = []
  try {
    // One lookup first so that LevelDB's table files are open: the figure is the lookup, not the file open.
    await log.runSource(invocationFor('target', TARGETS).sessionId, invocationFor('target', TARGETS).runId)
    for (let j = 0; j < TARGETS; j += 1) {
      const { sessionId, runId } = invocationFor('target', j)
      const start = now()
      const source = await log.runSource(sessionId, runId)
      runSourceMs.push(now() - start)
      if (source === undefined) throw new Error(`run ${runId} is missing`)
    }
    await leaveOpen(log, `open${round++}`)
  } finally {
    await log.close()
  }
  log = await EventLog.open(path)
  try {
    const start = now()
    const closed = await recoverInvocations(log)
    const recoverMs = now() - start
    if (closed !== OPEN_INVOCATIONS) throw new Error(`recovery closed ${closed}, not ${OPEN_INVOCATIONS}`)
    return { reopenMs, runSourceMs, recoverMs }
  } finally {
    await log.close()
  }
}

/**
 * A snapshot of the log in `path` taken while this process has it open, in ms (the copy's removal
 * at its close is not timed). Apart from the rounds above: its files, linked and copied, and their
 * removal must not weigh on the recovery those time.
 */
async function snapshotRound(path: string): Promise<number> {
  const log = await EventLog.open(path)
  try {
    const start = now()
    const snapshot = await EventLog.openSnapshot(path)
    const ms = now() - start
    const facts = snapshot.head().highWater
    await snapshot.close()
    if (facts !== log.head().highWater) throw new Error(`the snapshot holds ${facts} facts, the log ${log.head().highWater}`)
    return ms
  } finally {
    await log.close()
  }
}

export async function growthBenchmark(quick: boolean) {
  const small = 1_000
  const large = quick ? 50_000 : 1_000_000
  // Recovery is a few milliseconds dominated by one fsync, whose time varies: enough rounds for a stable median.
  const rounds = quick ? 3 : 11
  return withTempDir(async (dir) => {
    const smallPath = join(dir, 'small')
    const largePath = join(dir, 'large')
    let start = now()
    const smallFacts = await buildGrowthLog(smallPath, small)
    const largeFacts = await buildGrowthLog(largePath, large)
    await settleLog(smallPath)
    await settleLog(largePath)
    progress(`growth: built logs of ${smallFacts} and ${largeFacts} unrelated facts in ${Math.round(now() - start)} ms`)
    start = now()
    const samples = { small: [] as Sample[], large: [] as Sample[] }
    // A first round on each log settles LevelDB (it compacts what the build left in its write-ahead log).
    await sampleRound(smallPath)
    await sampleRound(largePath)
    for (let r = 0; r < rounds; r += 1) {
      samples.small.push(await sampleRound(smallPath))
      samples.large.push(await sampleRound(largePath))
    }
    const snapshots = { small: [] as number[], large: [] as number[] }
    for (let r = 0; r < (quick ? 2 : 5); r += 1) {
      snapshots.small.push(await snapshotRound(smallPath))
      snapshots.large.push(await snapshotRound(largePath))
    }
    const runSource = (list: Sample[]) => median(list.flatMap((s) => s.runSourceMs))
    const recover = (list: Sample[]) => median(list.map((s) => s.recoverMs))
    // Each round samples both logs back to back: the growth figures are medians of those paired ratios.
    const paired = (pick: (sample: Sample) => number) => median(samples.large.map((large, round) => pick(large) / pick(samples.small[round] as Sample)))
    const figures = {
      smallFacts,
      largeFacts,
      runSourceMs: { small: runSource(samples.small), large: runSource(samples.large) },
      runSourceGrowth: paired((sample) => median(sample.runSourceMs)),
      recoverMs: { small: recover(samples.small), large: recover(samples.large) },
      recoverGrowth: paired((sample) => sample.recoverMs),
      reopenMs: median(samples.large.map((s) => s.reopenMs)),
      reopenSmallMs: median(samples.small.map((s) => s.reopenMs)),
      snapshotMs: median(snapshots.large),
      snapshotSmallMs: median(snapshots.small),
    }
    progress(
      `growth: runSource ${figures.runSourceMs.small.toFixed(3)} → ${figures.runSourceMs.large.toFixed(3)} ms, recover ${figures.recoverMs.small.toFixed(2)} → ${figures.recoverMs.large.toFixed(2)} ms, reopen ${figures.reopenMs.toFixed(1)} ms, snapshot ${figures.snapshotMs.toFixed(1)} ms (${Math.round(now() - start)} ms)`,
    )
    return figures
  })
}

const args = parseArgs(process.argv.slice(2))
emit(await growthBenchmark(args.quick))
