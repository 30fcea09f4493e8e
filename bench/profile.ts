/**
 * Workloads to profile, one at a time (not part of `npm run bench`):
 *
 *   node --cpu-prof --import tsx bench/profile.ts append [appenders=256] [facts=51200] [sync|os] [cold|warm]
 *   node --cpu-prof --import tsx bench/profile.ts engine [concurrency=64] [rounds=3]
 *   node --import tsx bench/profile.ts encode [rounds=40]
 *   node --import tsx bench/profile.ts validate [rounds=40]
 *   node --import tsx bench/profile.ts fsync [rounds=60]
 *   node --import tsx bench/profile.ts puts [rounds=30]
 *   node --import tsx bench/profile.ts recover [unrelated=1000000] [rounds=8]
 *   node --import tsx bench/profile.ts floor [appenders=16,64,256] [rounds=5]
 *
 * Each prints its throughput and the process CPU time (all threads) per fact or step; `append` also
 * prints the main thread's busy time per fact (event-loop utilization), the part that caps a group,
 * how long a synced batch takes from its `write()` call to its completion, and how long the disk sat
 * idle between one synced batch and the next (from a batch's completion to the next `write()` call),
 * and on Linux each thread's CPU time per fact (from /proc/self/task: the main thread by name, the
 * others by the order they were started: V8's platform workers first, LevelDB's compaction thread
 * last). `warm` first appends half as many facts to another log, untimed, so the figures are those of
 * compiled code (the default, `cold`, is how the earlier rounds measured).
 * `encode` times msgpackr, store/msgpack-plain.ts and the writer shaped by the fact schema
 * (store/shaped-writer.ts, what the log uses) on the workload's validated facts, alternating the
 * three in one process, and prints the medians.
 * `validate` times the compiled copier on the workload's facts with strict objects parsed by
 * generated code and by the loop (`compileSchema(…, { generate: false })`), alternating the two in
 * one process, and prints the medians.
 * `fsync` appends 1, 16, 64 and 256 KiB to a file in the temporary directory the benchmarks' stores
 * use and times the `fdatasync` after each append: what one synced batch costs this disk, apart
 * from LevelDB.
 * `puts` times a fact's three index and event records put into a LevelDB chained batch (never
 * written), as the log puts them: keys built from the seq and ids (store/keys.ts), the same keys
 * built beforehand, and the built keys handed to classic-level's private `_put` past
 * abstract-level's checks; alternated in one process, medians per fact.
 * `recover` builds the growth benchmark's two logs (bench/growth-logs.ts: 1,000 and `unrelated`
 * facts) and, round after round on each, leaves 10 invocations open, reopens the log and times
 * `recoverInvocations` in parts: its id-index reads (LevelDB's `getSync`; the first alone too, which
 * opens the table files covering the ids), its synced batch (from
 * `write()` to completion) and the rest. Every other round first fdatasyncs a scratch file of the
 * batch's size on the same filesystem, untimed apart: the first sync after an open also commits
 * the filesystem's journal of what LevelDB's open did (its write-ahead log written out as a table,
 * files deleted), and this shows how much of `recoverGrowth` that is.
 * `floor` measures the floor of any group commit with a promise per fact (bench/floor.ts) and the
 * cost curve from it up to `EventLog`. For each number of appenders, round after round, it appends
 * fresh lanes of the workload's facts (6,400 at 16 appenders, 25,600 at 64, 51,200 at 256) through
 * `EventLog` untimed to capture the records it writes, then times each variant in a fresh directory,
 * in an order rotated (and reversed every other round) from round to round, each variant between two
 * runs of `raw` (the captured records replayed in synced batches of one fact per appender, as
 * `bench/group-commit.ts` replays them): `raw/2` (the same in batches of half the appenders: the
 * ceiling of two alternating groups), `floor/1` (the floor putting the whole backlog into each sync),
 * the floor and its levels `floor`, `+validate`, `+encode`, `+chain`, `+keys`, `+staging` (each adds
 * one of `EventLog`'s pieces to the ones before), `+staging/1` (the last level grouping as `floor/1`
 * does) and `EventLog` itself. An untimed round at 64
 * appenders first compiles every variant and checks the captured event records against the packed
 * events. It prints, per variant, the medians over the rounds (and min–max) of facts/s, the ratio to
 * the geometric mean of the two `raw` runs around it (for `raw`, each run's over the one before: the
 * drift of the machine's load), and per fact the main thread's busy time (event-loop utilization,
 * which counts time it waited for a core), its own CPU time and its time runnable but waiting for a
 * core (on Linux, from its schedstat), all threads' CPU time, and facts per sync.
 */
import { Packr, RESERVE_START_SPACE } from 'msgpackr'
import { closeSync, fdatasyncSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { ClassicLevel } from 'classic-level'
import { Engine } from '../actors/engine.js'
import { ModelExecutor } from '../actors/model-executor.js'
import { compileSchema, parseRuntimeEvent } from '../facts/compiled-schema.js'
import { runtimeEventSchema } from '../facts/schema.js'
import type { RuntimeEvent } from '../facts/types.js'
import { encodeValidatedEvent, validateEvent } from '../store/encoding.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { keys, seqPart } from '../store/keys.js'
import { packPlain } from '../store/msgpack-plain.js'
import { recoverInvocations } from '../store/recovery.js'
import { packValidatedEvent } from '../store/shaped-writer.js'
import { type FloorItem, FloorLog, LEVELS, type Level, type Op, appendFloorLanes, floorItems } from './floor.js'
import { OPEN_INVOCATIONS, buildGrowthLog, leaveOpen, settleLog } from './growth-logs.js'
import { chainedBatchPrototype, median, now, sameRecordBatches, withTempDir } from './support.js'
import { STEPS, appendLanes, appenderLanes, invocationEvents, invocationFacts, invocationFor, runInput, scriptedClient } from './workload.js'

const [workload = 'append', first, second, third, fourth] = process.argv.slice(2)

const mean = (values: readonly number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length

/**
 * LevelDB chained batches, µs: completion → next `write()` (the disk's idle time between syncs) and
 * `write()` → completion (a synced batch, as the main thread sees it).
 */
function timeSyncs(): { gaps: number[]; latencies: number[]; stop: () => void } {
  const proto = chainedBatchPrototype()
  const write = proto._write
  const gaps: number[] = []
  const latencies: number[] = []
  let done: number | undefined
  proto._write = function (options) {
    const start = now()
    if (done !== undefined) gaps.push((start - done) * 1000)
    done = undefined
    return write.call(this, options).then(() => {
      done = now()
      latencies.push((done - start) * 1000)
    })
  }
  return { gaps, latencies, stop: () => (proto._write = write) }
}

/** CPU time (user + system, clock ticks) of each of this process's threads, by thread id; empty off Linux. */
function threadTicks(): Map<number, number> {
  const ticks = new Map<number, number>()
  try {
    for (const id of readdirSync('/proc/self/task')) {
      // The fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/self/task/${id}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
      ticks.set(Number(id), Number(fields[11]) + Number(fields[12]))
    }
  } catch {
    ticks.clear()
  }
  return ticks
}

/** `… main 8.3, then by start order 0.4 0.4 …` µs per fact; threads that used no CPU are left out. */
function perThread(before: Map<number, number>, after: Map<number, number>, facts: number): string {
  if (after.size === 0) return ''
  const perFact = (ticks: number): string => ((ticks * 1_000_000) / 100 / facts).toFixed(1)
  const main = (after.get(process.pid) ?? 0) - (before.get(process.pid) ?? 0)
  const others = [...after]
    .filter(([id]) => id !== process.pid)
    .sort(([a], [b]) => a - b)
    .map(([id, ticks]) => ticks - (before.get(id) ?? 0))
    .filter((ticks) => ticks > 0)
  return `; per thread (µs per fact, ticks of 10 ms): main ${perFact(main)}, the others by start order ${others.map(perFact).join(' ')}`
}

async function append(appenders: number, facts: number, durability: 'sync' | 'os', warm: boolean): Promise<void> {
  const lanes = appenderLanes(appenders, facts, 'p')
  await withTempDir(async (dir) => {
    if (warm) {
      const untimed = await EventLog.open(join(dir, 'warm-up'), { durability })
      try {
        await appendLanes(untimed, appenderLanes(appenders, Math.ceil(facts / 2), 'w'))
      } finally {
        await untimed.close()
      }
    }
    const log = await EventLog.open(join(dir, 'log'), { durability })
    try {
      let groups = 0
      logInternals(log).subscribe(() => (groups += 1))
      const syncs = timeSyncs()
      const cpu = process.cpuUsage()
      const threads = threadTicks()
      const loop = performance.eventLoopUtilization()
      const start = now()
      await appendLanes(log, lanes)
      const ms = now() - start
      const used = process.cpuUsage(cpu)
      const threadsAfter = threadTicks()
      const busy = performance.eventLoopUtilization(loop).active * 1000
      syncs.stop()
      const total = lanes.reduce((sum, lane) => sum + lane.length, 0)
      process.stdout.write(
        `${appenders} appenders: ${Math.round(total / (ms / 1000))} facts/s, ${((used.user + used.system) / total).toFixed(1)} µs CPU per fact (all threads), ${(busy / total).toFixed(1)} µs main thread, ${groups} groups; synced batches take ${median(syncs.latencies).toFixed(0)} µs (median; mean ${mean(syncs.latencies).toFixed(0)}), the disk idles ${median(syncs.gaps).toFixed(0)} µs between them (median)${perThread(threads, threadsAfter, total)}\n`,
      )
    } finally {
      await log.close()
    }
  })
}

async function engine(concurrency: number, rounds: number): Promise<void> {
  await withTempDir(async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const client = scriptedClient()
      const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => client }) })
      for (let round = 0; round < rounds; round += 1) {
        const cpu = process.cpuUsage()
        const start = now()
        await Promise.all(Array.from({ length: concurrency }, (_, i) => engine.run(runInput(`p${round}`, i))))
        const used = process.cpuUsage(cpu)
        const steps = concurrency * STEPS
        process.stdout.write(`round ${round}: ${((now() - start) / steps).toFixed(3)} ms per step, ${((used.user + used.system) / steps).toFixed(0)} µs CPU per step\n`)
      }
    } finally {
      await log.close()
    }
  })
}

function encode(rounds: number): void {
  // The log's own msgpackr settings (store/encoding.ts).
  const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false })
  const facts = Array.from({ length: 200 }, (_, n) => invocationEvents(invocationFor('enc', n), invocationFacts(STEPS)).map((event) => validateEvent(event))).flat()
  const times = { msgpackr: [] as number[], plain: [] as number[], shaped: [] as number[] }
  const time = (pack: (event: RuntimeEvent) => unknown): number => {
    const start = now()
    for (const event of facts) pack(event)
    return ((now() - start) * 1000) / facts.length
  }
  for (let round = 0; round < rounds; round += 1) {
    times.msgpackr.push(time((event) => packr.pack(event, RESERVE_START_SPACE | 1)))
    times.plain.push(time((event) => packPlain(event, 1)))
    times.shaped.push(time((event) => packValidatedEvent(event, 1)))
  }
  process.stdout.write(
    `${facts.length} facts × ${rounds} rounds: msgpackr ${median(times.msgpackr).toFixed(2)} µs, packPlain ${median(times.plain).toFixed(2)} µs, shaped by the schema ${median(times.shaped).toFixed(2)} µs per fact (medians)\n`,
  )
}

function validate(rounds: number): void {
  const facts = Array.from({ length: 200 }, (_, n) => invocationEvents(invocationFor('val', n), invocationFacts(STEPS))).flat()
  const loop = compileSchema(runtimeEventSchema, '(root)', { generate: false })
  const times = { generated: [] as number[], loop: [] as number[] }
  const time = (parse: (event: unknown, depth: number) => unknown): number => {
    const start = now()
    for (const event of facts) {
      if (parse(event, 64) === undefined) throw new Error('a workload fact left the fast path')
    }
    return ((now() - start) * 1000) / facts.length
  }
  for (let round = 0; round < rounds; round += 1) {
    times.generated.push(time(parseRuntimeEvent))
    times.loop.push(time(loop))
  }
  process.stdout.write(
    `${facts.length} facts × ${rounds} rounds: compiled copier ${median(times.loop).toFixed(2)} µs with the loop, ${median(times.generated).toFixed(2)} µs with generated code per fact (medians)\n`,
  )
}

async function fsync(rounds: number): Promise<void> {
  await withTempDir(async (dir) => {
    const fd = openSync(join(dir, 'file'), 'a')
    try {
      const figures = [1, 16, 64, 256].map((kib) => {
        const block = Buffer.alloc(kib * 1024, 0x61)
        const times: number[] = []
        for (let round = 0; round < rounds; round += 1) {
          writeSync(fd, block)
          const start = now()
          fdatasyncSync(fd)
          times.push((now() - start) * 1000)
        }
        return `${kib} KiB ${median(times).toFixed(0)} µs`
      })
      process.stdout.write(`fdatasync after an append of ${figures.join(', ')} (medians of ${rounds})\n`)
    } finally {
      closeSync(fd)
    }
  })
}

async function puts(rounds: number): Promise<void> {
  const events = appenderLanes(256, 25_600, 'puts').flat()
  const value = new Uint8Array(400)
  const idRecord = new Uint8Array(40)
  const empty = new Uint8Array(0)
  const records = (seq: number, event: RuntimeEvent): [string, string, string] => {
    const part = seqPart(seq)
    return [keys.eventAt(part), keys.eventId(event.id), keys.byInvocationAt(event.invocation.invocationId, part)]
  }
  // Flattened (a concatenation is a rope until something reads it): what a key read back from disk is.
  const built = events.map((event, index) => records(index + 1, event).map((key) => Buffer.from(key, 'latin1').toString('latin1')))
  const GROUP = 128
  await withTempDir(async (dir) => {
    const { ClassicLevel } = await import('classic-level')
    const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    try {
      type Batch = ReturnType<typeof db.batch> & { _put(key: string, value: Uint8Array): void }
      const variants: Record<string, (batch: Batch, from: number) => void> = {
        'keys built as the log builds them': (batch, from) => {
          for (let index = from; index < from + GROUP; index += 1) {
            const [event, id, invocation] = records(index + 1, events[index] as RuntimeEvent)
            batch.put(event, value)
            batch.put(id, idRecord)
            batch.put(invocation, empty)
          }
        },
        'keys built beforehand': (batch, from) => {
          for (let index = from; index < from + GROUP; index += 1) {
            const [event, id, invocation] = built[index] as string[]
            batch.put(event as string, value)
            batch.put(id as string, idRecord)
            batch.put(invocation as string, empty)
          }
        },
        "keys built beforehand, classic-level's private _put": (batch, from) => {
          for (let index = from; index < from + GROUP; index += 1) {
            const [event, id, invocation] = built[index] as string[]
            batch._put(event as string, value)
            batch._put(id as string, idRecord)
            batch._put(invocation as string, empty)
          }
        },
      }
      const times = new Map<string, number[]>()
      for (let round = 0; round < rounds; round += 1) {
        for (const [name, fill] of Object.entries(variants)) {
          const start = now()
          for (let from = 0; from + GROUP <= events.length; from += GROUP) {
            const batch = db.batch() as Batch
            fill(batch, from)
            await batch.close()
          }
          const list = times.get(name) ?? []
          list.push(((now() - start) * 1000) / events.length)
          times.set(name, list)
        }
      }
      const figures = [...times].map(([name, list]) => `${name} ${median(list).toFixed(2)} µs`)
      process.stdout.write(`three puts per fact into chained batches of ${GROUP} facts: ${figures.join(', ')} per fact (medians of ${rounds})\n`)
    } finally {
      await db.close()
    }
  })
}

/** One recovery's parts, ms. */
interface RecoverySample {
  total: number
  idReads: number
  /** The first id read alone: it opens the table files that cover the ids, one per level. */
  firstIdRead?: number
  batch: number
  firstSync?: number
}

async function recover(unrelated: number, rounds: number): Promise<void> {
  // LevelDB's synchronous reads (the log's id lookups use `getSync`) and the synced batch, timed while recovering.
  const db = ClassicLevel.prototype as unknown as { getSync(key: unknown, options?: unknown): unknown }
  const getSync = db.getSync
  const batch = chainedBatchPrototype()
  const write = batch._write
  let sample: RecoverySample | undefined
  db.getSync = function (key, options) {
    if (sample === undefined) return getSync.call(this, key, options)
    const start = now()
    try {
      return getSync.call(this, key, options)
    } finally {
      const took = now() - start
      sample.idReads += took
      sample.firstIdRead ??= took
    }
  }
  batch._write = function (options) {
    const current = sample
    const start = now()
    return write.call(this, options).then(() => {
      if (current !== undefined) current.batch += now() - start
    })
  }
  await withTempDir(async (dir) => {
    const paths = { small: join(dir, 'small'), large: join(dir, 'large') }
    await buildGrowthLog(paths.small, 1_000)
    await buildGrowthLog(paths.large, unrelated)
    await settleLog(paths.small)
    await settleLog(paths.large)
    let tag = 0
    const once = async (path: string, syncFirst: boolean): Promise<RecoverySample> => {
      let log = await EventLog.open(path)
      try {
        await leaveOpen(log, `open${tag++}`)
      } finally {
        await log.close()
      }
      log = await EventLog.open(path)
      try {
        let firstSync: number | undefined
        if (syncFirst) {
          // About the size of the recovery's batch (20 facts and their index records).
          const scratch = join(dir, 'first-sync')
          const fd = openSync(scratch, 'w')
          try {
            writeSync(fd, Buffer.alloc(11 * 1024, 1))
            const start = now()
            fdatasyncSync(fd)
            firstSync = now() - start
          } finally {
            closeSync(fd)
            unlinkSync(scratch)
          }
        }
        const current: RecoverySample = { total: 0, idReads: 0, batch: 0, ...(firstSync === undefined ? {} : { firstSync }) }
        sample = current
        const start = now()
        const closed = await recoverInvocations(log)
        current.total = now() - start
        sample = undefined
        if (closed !== OPEN_INVOCATIONS) throw new Error(`recovery closed ${closed}, not ${OPEN_INVOCATIONS}`)
        return current
      } finally {
        sample = undefined
        await log.close()
      }
    }
    // A first round on each settles LevelDB (as bench/growth.ts does).
    await once(paths.small, false)
    await once(paths.large, false)
    const samples = { plain: { small: [] as RecoverySample[], large: [] as RecoverySample[] }, synced: { small: [] as RecoverySample[], large: [] as RecoverySample[] } }
    for (let round = 0; round < rounds; round += 1) {
      for (const variant of round % 2 === 0 ? (['plain', 'synced'] as const) : (['synced', 'plain'] as const)) {
        samples[variant].small.push(await once(paths.small, variant === 'synced'))
        samples[variant].large.push(await once(paths.large, variant === 'synced'))
      }
    }
    const ms = (list: RecoverySample[], pick: (sample: RecoverySample) => number) => median(list.map(pick)).toFixed(2)
    const describe = (list: RecoverySample[]) =>
      `${ms(list, (s) => s.total)} ms (id reads ${ms(list, (s) => s.idReads)} of which the first ${ms(list, (s) => s.firstIdRead ?? 0)}, synced batch ${ms(list, (s) => s.batch)}, the rest ${ms(list, (s) => s.total - s.idReads - s.batch)})` +
      (list[0]?.firstSync === undefined ? '' : `, the first fdatasync before it ${ms(list, (s) => s.firstSync ?? 0)} ms`)
    for (const variant of ['plain', 'synced'] as const) {
      const { small, large } = samples[variant]
      const growth = median(large.map((sample, index) => sample.total / (small[index] as RecoverySample).total))
      process.stdout.write(
        `${variant === 'plain' ? 'recovery right after the open (as bench/growth.ts times it)' : 'recovery after one fdatasync of a scratch file'}: small ${describe(small)}; large ${describe(large)}; growth ${growth.toFixed(2)} (median of ${large.length} paired ratios)\n`,
      )
    }
  })
}

/** One timed pass of a `floor` variant. */
interface FloorSample {
  facts: number
  ms: number
  mainUs: number
  cpuUs: number
  /** The main thread's own CPU time and its time runnable but waiting for a core (Linux's schedstat; 0 elsewhere), µs. */
  mainCpuUs: number
  mainWaitUs: number
  syncs: number
}

/** The main thread's CPU time and run-queue wait so far, ns (`/proc/self/task/<pid>/schedstat`); zeros off Linux. */
function mainSchedstat(): [number, number] {
  try {
    const [cpu, wait] = readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ').map(Number)
    return [cpu ?? 0, wait ?? 0]
  } catch {
    return [0, 0]
  }
}

/** Facts per run of the `floor` workload at each number of appenders (about a second of `EventLog` each). */
const FLOOR_FACTS: Record<number, number> = { 16: 6_400, 64: 25_600, 256: 51_200 }

async function floor(plan: readonly number[], rounds: number): Promise<void> {
  const proto = chainedBatchPrototype()
  const { _put: put, _del: del, _write: write } = proto
  let batches = 0
  let captured: Op[] | undefined
  let batchEnds: number[] = []
  proto._write = function (options) {
    batches += 1
    if (captured !== undefined) batchEnds.push(captured.length)
    return write.call(this, options)
  }
  const capture = async (lanes: RuntimeEvent[][]) => {
    const ops: Op[] = []
    batchEnds = []
    await withTempDir(async (dir) => {
      const log = await EventLog.open(dir)
      proto._put = function (key, value) {
        ops.push({ type: 'put', key, value })
        return put.call(this, key, value)
      }
      proto._del = function (key) {
        ops.push({ type: 'del', key })
        return del.call(this, key)
      }
      captured = ops
      try {
        await appendLanes(log, lanes)
      } finally {
        captured = undefined
        proto._put = put
        proto._del = del
        await log.close()
      }
    })
    return { ops, batchEnds }
  }
  const timed = async (facts: number, body: () => Promise<void>): Promise<FloorSample> => {
    const loop = performance.eventLoopUtilization()
    const cpu = process.cpuUsage()
    const before = batches
    const [mainCpu, mainWait] = mainSchedstat()
    const start = now()
    await body()
    const ms = now() - start
    const used = process.cpuUsage(cpu)
    const [mainCpuAfter, mainWaitAfter] = mainSchedstat()
    return {
      facts,
      ms,
      mainUs: performance.eventLoopUtilization(loop).active * 1000,
      cpuUs: used.user + used.system,
      mainCpuUs: (mainCpuAfter - mainCpu) / 1000,
      mainWaitUs: (mainWaitAfter - mainWait) / 1000,
      syncs: batches - before,
    }
  }
  type Variant = 'raw' | 'raw/2' | 'floor/1' | Level | '+staging/1' | 'EventLog'
  const variants: Variant[] = ['raw', 'raw/2', 'floor/1', ...LEVELS, '+staging/1', 'EventLog']
  type Prepared = { lanes: RuntimeEvent[][]; items: { lanes: FloorItem[][]; head: Uint8Array }; raw: Op[][]; halves: Op[][]; facts: number }
  const run = (variant: Variant, { lanes, items, raw: whole, halves, facts }: Prepared): Promise<FloorSample> =>
    withTempDir(async (dir) => {
      if (variant === 'raw' || variant === 'raw/2') {
        const raw = variant === 'raw' ? whole : halves
        const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
        await db.open()
        try {
          return await timed(facts, async () => {
            for (const ops of raw) {
              const batch = db.batch()
              for (const op of ops) {
                if (op.type === 'put') batch.put(op.key, op.value)
                else batch.del(op.key)
              }
              await batch.write({ sync: true })
            }
          })
        } finally {
          await db.close()
        }
      }
      if (variant === 'EventLog') {
        const log = await EventLog.open(dir)
        try {
          return await timed(facts, () => appendLanes(log, lanes))
        } finally {
          await log.close()
        }
      }
      const oneGroup = variant.endsWith('/1')
      const log = await FloorLog.open(dir, oneGroup ? (variant.slice(0, -2) as Level) : (variant as Level), items.head, oneGroup ? 'whole' : 'eventlog')
      try {
        return await timed(facts, () => appendFloorLanes(log, items.lanes))
      } finally {
        await log.close()
      }
    })
  const prepare = async (appenders: number, facts: number, tag: string): Promise<Prepared> => {
    const lanes = appenderLanes(appenders, facts, tag)
    const { ops, batchEnds: ends } = await capture(lanes)
    const items = floorItems(lanes, ops, ends)
    const total = lanes.reduce((sum, lane) => sum + lane.length, 0)
    return { lanes, items, raw: sameRecordBatches(ops, appenders), halves: sameRecordBatches(ops, Math.max(1, Math.floor(appenders / 2))), facts: total }
  }
  // Untimed: every variant's code compiled before the first timed run, and the captured records
  // checked: the levels that pack the event must put the bytes the floor puts as captured.
  {
    const warm = await prepare(64, 6_400, 'fw')
    for (const item of warm.items.lanes.flat()) {
      if (Buffer.compare(encodeValidatedEvent(validateEvent(item.event)), item.value) !== 0) throw new Error(`event ${item.event.id}: captured bytes differ from the packed ones`)
    }
    for (const variant of variants) await run(variant, warm)
  }
  for (const appenders of plan) {
    const samples = new Map<Variant, FloorSample[]>(variants.map((variant) => [variant, []]))
    const ratios = new Map<Variant, number[]>(variants.map((variant) => [variant, []]))
    for (let round = 0; round < rounds; round += 1) {
      const prepared = await prepare(appenders, FLOOR_FACTS[appenders] ?? appenders * 200, `f${appenders}x${round}`)
      // Each round in another order (rotated, and reversed every other round), so no variant always
      // runs first or after the same one, with a run of `raw` before and after each: a variant's ratio
      // is to the geometric mean of its two neighbours (other processes' load drifts within seconds),
      // and `raw`'s own is each run's over the one before it, which shows that drift.
      const others = variants.filter((variant) => variant !== 'raw')
      const shift = round % others.length
      let order = [...others.slice(shift), ...others.slice(0, shift)]
      if (round % 2 === 1) order = order.reverse()
      const rate = (sample: FloorSample) => sample.facts / sample.ms
      let previous = await run('raw', prepared)
      samples.get('raw')?.push(previous)
      for (const variant of order) {
        const sample = await run(variant, prepared)
        const next = await run('raw', prepared)
        samples.get(variant)?.push(sample)
        samples.get('raw')?.push(next)
        ratios.get(variant)?.push(rate(sample) / Math.sqrt(rate(previous) * rate(next)))
        ratios.get('raw')?.push(rate(next) / rate(previous))
        previous = next
      }
    }
    const lines = variants.map((variant) => {
      const list = samples.get(variant) as FloorSample[]
      const ratio = ratios.get(variant) as number[]
      const per = (pick: (sample: FloorSample) => number) => median(list.map(pick))
      const spread = (values: number[]) => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`
      return (
        `  ${variant.padEnd(9)} ${Math.round(per((s) => s.facts / (s.ms / 1000)))
          .toString()
          .padStart(7)} facts/s, ratio to raw ${median(ratio).toFixed(2)} (${spread(ratio)}), ` +
        `main thread busy ${per((s) => s.mainUs / s.facts).toFixed(2)} µs (${spread(list.map((s) => s.mainUs / s.facts))}), ` +
        `on a core ${per((s) => s.mainCpuUs / s.facts).toFixed(2)} µs (${spread(list.map((s) => s.mainCpuUs / s.facts))}), ` +
        `waiting for one ${per((s) => s.mainWaitUs / s.facts).toFixed(2)} µs, ` +
        `all threads ${per((s) => s.cpuUs / s.facts).toFixed(2)} µs (${spread(list.map((s) => s.cpuUs / s.facts))}) per fact, ${per((s) => s.facts / s.syncs).toFixed(1)} facts per sync`
      )
    })
    process.stdout.write(`${appenders} appenders, ${rounds} rounds (medians, min–max):\n${lines.join('\n')}\n`)
  }
}

if (workload === 'append') await append(Number(first ?? 256), Number(second ?? 51_200), third === 'os' ? 'os' : 'sync', fourth === 'warm')
else if (workload === 'engine') await engine(Number(first ?? 64), Number(second ?? 3))
else if (workload === 'encode') encode(Number(first ?? 40))
else if (workload === 'validate') validate(Number(first ?? 40))
else if (workload === 'fsync') await fsync(Number(first ?? 60))
else if (workload === 'puts') await puts(Number(first ?? 30))
else if (workload === 'recover') await recover(Number(first ?? 1_000_000), Number(second ?? 8))
else if (workload === 'floor') await floor((first ?? '16,64,256').split(',').map(Number), Number(second ?? 5))
else throw new Error('usage: bench/profile.ts append|engine|encode|validate|fsync|puts|recover|floor [...]')
