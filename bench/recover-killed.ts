/**
 * Benchmark 4, `recoverMsPer1k`: a child process starts 10,000 invocations (1,000 in quick mode)
 * whose model requests are in flight, and is killed with SIGKILL. This process then reopens the
 * log and calls `recoverInvocations`, which must close every one of them. Recovery time is both:
 * the open (which brings the open invocations' records up to date) and the closing appends.
 *
 * Child entry: `node --import tsx bench/recover-killed.ts [--quick]`.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { EventLog } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { emit, median, now, parseArgs, progress, withTempDir } from './support.js'

/** Runs the child until it reports `ready`, then kills it. */
async function leaveOpen(path: string, count: number): Promise<void> {
  const file = new URL('./child-open-invocations.ts', import.meta.url).pathname
  const child = spawn(process.execPath, ['--import', 'tsx', file, path, String(count)], { stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    await new Promise<void>((resolve, reject) => {
      const lines = createInterface({ input: child.stdout })
      lines.on('line', (line) => {
        if (line === 'ready') resolve()
      })
      child.on('exit', (code, signal) => reject(new Error(`the child exited (${signal ?? code}) before it was ready`)))
      child.on('error', reject)
    })
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGKILL')
      await exited
    }
  }
}

export async function recoverKilledBenchmark(quick: boolean) {
  const count = quick ? 1_000 : 10_000
  const runs = quick ? 1 : 3
  const samples: { recoverMs: number; reopenMs: number }[] = []
  for (let run = 0; run < runs; run += 1) {
    await withTempDir(async (dir) => {
      const path = join(dir, 'log')
      await leaveOpen(path, count)
      const opened = now()
      const log = await EventLog.open(path)
      const reopenMs = now() - opened
      try {
        const start = now()
        const closed = await recoverInvocations(log)
        const recoverMs = now() - start
        if (closed !== count) throw new Error(`recovery closed ${closed} invocations, not ${count}`)
        if ((await recoverInvocations(log)) !== 0) throw new Error('a second recovery closed something')
        samples.push({ recoverMs: reopenMs + recoverMs, reopenMs })
      } finally {
        await log.close()
      }
    })
  }
  const recoverMs = median(samples.map((s) => s.recoverMs))
  const reopenMs = median(samples.map((s) => s.reopenMs))
  const figures = { invocations: count, recoverMs, recoverMsPer1k: recoverMs / (count / 1000), reopenMs }
  progress(`recovery of ${count} killed invocations: ${recoverMs.toFixed(0)} ms, of which open ${reopenMs.toFixed(0)} ms (${figures.recoverMsPer1k.toFixed(1)} ms per 1,000)`)
  return figures
}

const args = parseArgs(process.argv.slice(2))
emit(await recoverKilledBenchmark(args.quick))
