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
import { validateEvent } from '../store/encoding.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { keys, seqPart } from '../store/keys.js'
import { packPlain } from '../store/msgpack-plain.js'
import { recoverInvocations } from '../store/recovery.js'
import { packValidatedEvent } from '../store/shaped-writer.js'
import { OPEN_INVOCATIONS, buildGrowthLog, leaveOpen, settleLog } from './growth-logs.js'
import { chainedBatchPrototype, median, now, withTempDir } from './support.js'
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

if (workload === 'append') await append(Number(first ?? 256), Number(second ?? 51_200), third === 'os' ? 'os' : 'sync', fourth === 'warm')
else if (workload === 'engine') await engine(Number(first ?? 64), Number(second ?? 3))
else if (workload === 'encode') encode(Number(first ?? 40))
else if (workload === 'validate') validate(Number(first ?? 40))
else if (workload === 'fsync') await fsync(Number(first ?? 60))
else if (workload === 'puts') await puts(Number(first ?? 30))
else if (workload === 'recover') await recover(Number(first ?? 1_000_000), Number(second ?? 8))
else throw new Error('usage: bench/profile.ts append|engine|encode|validate|fsync|puts|recover [...]')
