/**
 * This checkout's `EventLog` against another checkout's, alternated in one process: the way to
 * compare a change to the append path on a machine whose speed drifts within seconds (separate
 * processes run minutes apart measure the drift more than the change). Not part of `npm run bench`.
 *
 *   node --import tsx bench/append-ab.ts <other checkout> [rounds=24] [facts=25600] [appenders=256]
 *
 * The other checkout needs its own `node_modules` (a link to this one's will do). After an untimed
 * run of each, round after round, each log (in the order `other, this`, reversed every other round)
 * appends fresh workload facts (bench/workload.ts, `appenders` appenders each awaiting its appends
 * one by one) to a new log in a temporary directory with `sync` durability, timed from the first
 * append to the last acknowledgement. Prints per round and as medians the main thread's own CPU
 * time per fact (Linux's schedstat: time on a core, not time waiting for one) and facts/s, and the
 * median over the rounds of this checkout's figure over the other's.
 */
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { EventLog } from '../store/event-log.js'
import { median, now, withTempDir } from './support.js'
import { appenderLanes, appendLanes } from './workload.js'

const [otherCheckout, roundsArg, factsArg, appendersArg] = process.argv.slice(2)
if (otherCheckout === undefined) throw new Error('usage: bench/append-ab.ts <other checkout> [rounds=24] [facts=25600] [appenders=256]')
/** A whole-number argument of at least 1, or the usage error naming it. */
function count(name: string, given: string | undefined, fallback: number): number {
  const value = given === undefined ? fallback : Number(given)
  if (!Number.isInteger(value) || value < 1) throw new Error(`bench/append-ab.ts: ${name} must be a whole number of at least 1, not ${given}`)
  return value
}
const rounds = count('rounds', roundsArg, 24)
const facts = count('facts', factsArg, 25_600)
const appenders = count('appenders', appendersArg, 256)
const other = ((await import(pathToFileURL(join(resolve(otherCheckout), 'store', 'event-log.ts')).href)) as { EventLog: typeof EventLog }).EventLog

/** The main thread's CPU time so far, ns (`/proc/self/task/<pid>/schedstat`); 0 off Linux. */
function mainCpuNs(): number {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0])
  } catch {
    return 0
  }
}

type Side = 'other' | 'this'
const logs: Record<Side, typeof EventLog> = { other, this: EventLog }
const figures: Record<Side, { cpu: number[]; rate: number[] }> = { other: { cpu: [], rate: [] }, this: { cpu: [], rate: [] } }
const ratios: number[] = []

await withTempDir(async (dir) => {
  let runs = 0
  const run = async (side: Side): Promise<{ cpu: number; rate: number }> => {
    const lanes = appenderLanes(appenders, facts, `ab${runs}`)
    const log = await logs[side].open(join(dir, `log-${runs++}`), { durability: 'sync' })
    try {
      const cpu = mainCpuNs()
      const start = now()
      await appendLanes(log, lanes)
      const ms = now() - start
      const total = lanes.reduce((sum, lane) => sum + lane.length, 0)
      return { cpu: (mainCpuNs() - cpu) / 1000 / total, rate: total / (ms / 1000) }
    } finally {
      await log.close()
    }
  }
  await run('other')
  await run('this')
  for (let round = 0; round < rounds; round += 1) {
    const order: Side[] = round % 2 === 0 ? ['other', 'this'] : ['this', 'other']
    const got = {} as Record<Side, { cpu: number; rate: number }>
    for (const side of order) {
      got[side] = await run(side)
      figures[side].cpu.push(got[side].cpu)
      figures[side].rate.push(got[side].rate)
    }
    ratios.push(got.this.cpu / got.other.cpu)
    process.stdout.write(`round ${round}: main thread on a core, µs per fact: other ${got.other.cpu.toFixed(2)}, this ${got.this.cpu.toFixed(2)}\n`)
  }
})

for (const side of ['other', 'this'] as const) {
  const { cpu, rate } = figures[side]
  process.stdout.write(`${side}: main thread on a core ${median(cpu).toFixed(2)} µs per fact (median; ${Math.min(...cpu).toFixed(2)}–${Math.max(...cpu).toFixed(2)}), ${Math.round(median(rate))} facts/s\n`)
}
process.stdout.write(`this over other, per round: median ${median(ratios).toFixed(3)}, this lower in ${ratios.filter((ratio) => ratio < 1).length} of ${rounds}\n`)
