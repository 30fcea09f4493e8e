/**
 * Benchmark 1, `groupCommitRatio`: durable facts/s through `EventLog.append` with 1, 16, 64 and
 * 256 concurrent appenders (each appends the facts of whole agent invocations, one at a time,
 * awaiting each), against raw classic-level chained batches written with `sync: true`:
 *
 * - `raw` (the figure's baseline): the very key/value records the log wrote for those facts
 *   (events and their index records, captured from its batches), replayed in batches of one
 *   fact per appender, i.e. an ideal group commit with no validation, encoding, hashing or
 *   bookkeeping: the physical limit of writing what factstate must write.
 * - `rawFactsOnly`: only the encoded fact records (`e!<seq>` → stored bytes), same batches: the
 *   limit of a log without indexes. `factstate / rawFactsOnly` shows the price of the indexes.
 * - `rawHalfBatches` (2 appenders and more): the same records as `raw`, in batches of half the
 *   appenders. A log that stages one group while the other syncs (what `EventLog` does under a big
 *   backlog) writes at best half the appenders per sync: this is the ceiling of that design, even
 *   if staging cost nothing. One group per sync has no such ceiling but pays the staging between syncs.
 *
 * Each side gets a fresh directory per run; runs alternate between the sides. The records are
 * captured by an untimed pass of the same appends (capturing costs time the timed pass must not pay).
 *
 * Child entry: `node --import tsx bench/group-commit.ts [--quick]`.
 */
import { ClassicLevel } from 'classic-level'
import { availableParallelism } from 'node:os'
import { performance } from 'node:perf_hooks'
import type { RuntimeEvent } from '../facts/types.js'
import { EventLog } from '../store/event-log.js'
import { canonical, encodeEvent } from '../store/encoding.js'
import { keys } from '../store/keys.js'
import { type Op, chainedBatchPrototype, emit, measureWrites, median, now, parseArgs, progress, sameRecordBatches, withTempDir } from './support.js'
import { appendLanes, appenderLanes } from './workload.js'

export interface GroupCommitFigures {
  concurrency: number
  facts: number
  factstateFactsPerSecond: number
  rawFactsPerSecond: number
  rawFactsOnlyPerSecond: number
  /** factstate / raw (same records), median of paired runs. */
  ratio: number
  /** factstate / rawFactsOnly, median of paired runs. */
  ratioVsFactsOnly: number
  factstateBytesPerFact: number
  rawFactsOnlyBytesPerFact: number
  /** LevelDB puts and deletes per fact in factstate's batches. */
  recordsPerFact: number
  /**
   * Where the time goes, per fact, medians of the timed runs: the main thread's busy time (event-loop
   * utilization: building batches, and for factstate validating, encoding, hashing, the integrity
   * rules and the appends' promises) and the process CPU time of all threads (LevelDB's writer and
   * compaction, V8's GC and compiler threads included), factstate vs the raw replay of the same records.
   */
  mainThreadMicrosPerFact: { factstate: number; raw: number }
  cpuMicrosPerFact: { factstate: number; raw: number }
  /** Facts per synced batch: the raw replay writes one fact per appender per batch, the half-batch replay half that. */
  factsPerSync: { factstate: number; raw: number; rawHalfBatches?: number }
  /** The raw replay in batches of half the appenders (2 appenders and more; see the header). */
  rawHalfBatchesFactsPerSecond?: number
  /** rawHalfBatches / raw, median of paired runs: what alternating two groups can reach at most. */
  halfBatchesCeiling?: number
  /**
   * What the CPU alone allows: the facts/s factstate would reach with every core
   * (`availableParallelism()`) busy with its work at the CPU time per fact it was measured to take
   * (all threads), over the raw replay's facts/s; median of paired runs. No scheduling of the same
   * work, however well it overlaps the disk, can pass it: only less CPU per fact can.
   */
  cpuCeiling: number
}


/**
 * Records every operation of every chained batch written while `capture` is set (the log's own
 * batches), and counts the batches written (both sides: each is one sync).
 */
let capture: Op[] | undefined
let batchesWritten = 0
{
  const proto = chainedBatchPrototype()
  const put = proto._put
  const del = proto._del
  const write = proto._write
  proto._put = function (key, value) {
    capture?.push({ type: 'put', key, value })
    return put.call(this, key, value)
  }
  proto._del = function (key) {
    capture?.push({ type: 'del', key })
    return del.call(this, key)
  }
  proto._write = function (options) {
    batchesWritten += 1
    return write.call(this, options)
  }
}

interface RunResult {
  facts: number
  ms: number
  bytes: number
  /** Main-thread busy and all-thread CPU time of the timed part, µs. */
  mainUs: number
  cpuUs: number
  syncs: number
}

/** Times `body`: wall, main-thread busy (event-loop utilization), process CPU and batches written. */
async function timed(body: () => Promise<void>): Promise<Omit<RunResult, 'facts' | 'bytes'>> {
  const loop = performance.eventLoopUtilization()
  const cpu = process.cpuUsage()
  const batches = batchesWritten
  const start = now()
  await body()
  const ms = now() - start
  const used = process.cpuUsage(cpu)
  return { ms, syncs: batchesWritten - batches, mainUs: performance.eventLoopUtilization(loop).active * 1000, cpuUs: used.user + used.system }
}

/** The operations the log writes for `lanes`, from an untimed pass. */
async function capturedOps(lanes: RuntimeEvent[][]): Promise<Op[]> {
  return withTempDir(async (dir) => {
    const ops: Op[] = []
    const log = await EventLog.open(dir)
    try {
      capture = ops
      await appendLanes(log, lanes)
    } finally {
      capture = undefined
      await log.close()
    }
    return ops
  })
}

/** The timed pass of the appenders. */
async function factstateRun(lanes: RuntimeEvent[][]): Promise<RunResult> {
  return withTempDir(async (dir) => {
    const { bytes, value } = await measureWrites(dir, async () => {
      const log = await EventLog.open(dir)
      try {
        const time = await timed(() => appendLanes(log, lanes))
        return { facts: lanes.reduce((sum, lane) => sum + lane.length, 0), ...time }
      } finally {
        await log.close()
      }
    })
    return { ...value, bytes }
  })
}

/** Writes `batches` as chained batches with `sync: true`, one after the other. */
async function rawRun(batches: Op[][], facts: number): Promise<RunResult> {
  return withTempDir(async (dir) => {
    const { bytes, value } = await measureWrites(dir, async () => {
      const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
      await db.open()
      try {
        const time = await timed(async () => {
          for (const ops of batches) {
            const batch = db.batch()
            for (const op of ops) {
              if (op.type === 'put') batch.put(op.key, op.value)
              else batch.del(op.key)
            }
            await batch.write({ sync: true })
          }
        })
        return { facts, ...time }
      } finally {
        await db.close()
      }
    })
    return { ...value, bytes }
  })
}


/** Only the event records: round `r` holds the `r`-th fact of every appender. */
function factOnlyBatches(lanes: RuntimeEvent[][]): Op[][] {
  const encoded = lanes.map((lane) => lane.map((event) => encodeEvent(canonical(event))))
  const rounds = Math.max(...encoded.map((lane) => lane.length))
  const batches: Op[][] = []
  let seq = 0
  for (let round = 0; round < rounds; round += 1) {
    const ops: Op[] = []
    for (const lane of encoded) {
      const value = lane[round]
      if (value !== undefined) ops.push({ type: 'put', key: keys.event(++seq), value })
    }
    batches.push(ops)
  }
  return batches
}

export async function groupCommit(quick: boolean): Promise<GroupCommitFigures[]> {
  const plan: [number, number][] = quick
    ? [[1, 100], [16, 1_600], [64, 3_200], [256, 6_400]]
    : [[1, 1_500], [16, 16_000], [64, 48_000], [256, 102_400]]
  const runs = quick ? 3 : 5
  const figures: GroupCommitFigures[] = []
  for (const [concurrency, facts] of plan) {
    const half = Math.floor(concurrency / 2)
    const samples: { fs: RunResult; raw: RunResult; only: RunResult; records: number }[] = []
    /** The half-batch replays (2 appenders and more), each with the raw run it is paired with. */
    const halves: { half: RunResult; raw: RunResult }[] = []
    for (let run = 0; run < runs; run += 1) {
      const lanes = appenderLanes(concurrency, facts, `gc${concurrency}x${run}`)
      const ops = await capturedOps(lanes)
      const fs = await factstateRun(lanes)
      const raw = await rawRun(sameRecordBatches(ops, concurrency), fs.facts)
      const only = await rawRun(factOnlyBatches(lanes), fs.facts)
      if (half >= 1) halves.push({ half: await rawRun(sameRecordBatches(ops, half), fs.facts), raw })
      samples.push({ fs, raw, only, records: ops.length / fs.facts })
    }
    const rate = (r: RunResult) => r.facts / (r.ms / 1000)
    const med = (pick: (s: (typeof samples)[number]) => number) => median(samples.map(pick))
    // Paired runs share the machine's load at the time: the median of their ratios is the figure.
    const entry: GroupCommitFigures = {
      concurrency,
      facts,
      factstateFactsPerSecond: med((s) => rate(s.fs)),
      rawFactsPerSecond: med((s) => rate(s.raw)),
      rawFactsOnlyPerSecond: med((s) => rate(s.only)),
      ratio: med((s) => rate(s.fs) / rate(s.raw)),
      ratioVsFactsOnly: med((s) => rate(s.fs) / rate(s.only)),
      factstateBytesPerFact: med((s) => s.fs.bytes / s.fs.facts),
      rawFactsOnlyBytesPerFact: med((s) => s.only.bytes / s.only.facts),
      recordsPerFact: med((s) => s.records),
      mainThreadMicrosPerFact: { factstate: med((s) => s.fs.mainUs / s.fs.facts), raw: med((s) => s.raw.mainUs / s.raw.facts) },
      cpuMicrosPerFact: { factstate: med((s) => s.fs.cpuUs / s.fs.facts), raw: med((s) => s.raw.cpuUs / s.raw.facts) },
      factsPerSync: {
        factstate: med((s) => s.fs.facts / s.fs.syncs),
        raw: med((s) => s.raw.facts / s.raw.syncs),
        ...(halves.length > 0 && { rawHalfBatches: median(halves.map((h) => h.half.facts / h.half.syncs)) }),
      },
      cpuCeiling: med((s) => (availableParallelism() * 1e6) / (s.fs.cpuUs / s.fs.facts) / rate(s.raw)),
      ...(halves.length > 0 && {
        rawHalfBatchesFactsPerSecond: median(halves.map((h) => rate(h.half))),
        halfBatchesCeiling: median(halves.map((h) => rate(h.half) / rate(h.raw))),
      }),
    }
    progress(
      `group commit ×${concurrency}: factstate ${Math.round(entry.factstateFactsPerSecond)} facts/s, raw same records ${Math.round(entry.rawFactsPerSecond)}` +
        `${entry.rawHalfBatchesFactsPerSecond === undefined ? '' : ` (in half batches ${Math.round(entry.rawHalfBatchesFactsPerSecond)})`}, raw facts only ${Math.round(entry.rawFactsOnlyPerSecond)}`,
    )
    figures.push(entry)
  }
  return figures
}

const args = parseArgs(process.argv.slice(2))
emit(await groupCommit(args.quick))
