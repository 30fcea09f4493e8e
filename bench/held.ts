/**
 * Benchmark 5, `heapPerHeldKiB`: 10,000 invocations (1,000 in quick mode) held at once. Each is
 * started and a hold reserved on it right away (its model client would answer immediately, but
 * the hold is taken at the first safe point, before any request). Heap after `global.gc()` with
 * every hold entered, minus the heap before the first start, divided by the count. Must run with
 * `--expose-gc`.
 *
 * Child entry: `node --expose-gc --import tsx bench/held.ts [--quick]`.
 */
import { join } from 'node:path'
import { Engine } from '../actors/engine.js'
import type { HeldInvocation } from '../actors/handoff.js'
import { ModelExecutor } from '../actors/model-executor.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { emit, parseArgs, progress, withTempDir } from './support.js'
import { STEPS, invocationEvents, invocationFacts, invocationFor, runInput, scriptedClient } from './workload.js'

function collect(): NodeJS.MemoryUsage {
  const gc = (globalThis as { gc?: () => void }).gc
  if (!gc) throw new Error('run with --expose-gc')
  for (let i = 0; i < 4; i += 1) gc()
  return process.memoryUsage()
}

export async function heldBenchmark(quick: boolean) {
  const count = quick ? 1_000 : 10_000
  return withTempDir(async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    try {
      // One client for all: the figure is factstate's memory, not the (caller-supplied) client's.
      const client = scriptedClient()
      const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => client }) })
      // Warm-up (code paths, caches) so that only per-invocation memory is counted.
      const warm = await engine.start(runInput('warm', 0))
      const warmHold = await warm.handoff().reserve(intentFor('warm', 0)).ready()
      await warmHold.release()
      await warm.wait()
      // Past the appends after which the log builds its id filter (2 MiB off the heap, whatever the
      // count): built before the first reading, it is not spread over the held invocations.
      for (let n = 0; n < 13; n += 1) await log.appendAll(invocationEvents(invocationFor('filler', n), invocationFacts(STEPS)))
      if (!(await logInternals(log).idFilterReady())) throw new Error('the id filter was not built')
      const before = collect()
      const held: HeldInvocation[] = []
      const WINDOW = 500
      for (let first = 0; first < count; first += WINDOW) {
        const ready = await Promise.all(
          Array.from({ length: Math.min(WINDOW, count - first) }, async (_, k) => {
            const running = await engine.start(runInput('held', first + k))
            return running.handoff().reserve(intentFor('held', first + k)).ready()
          }),
        )
        held.push(...ready)
      }
      const after = collect()
      const figures = {
        invocations: held.length,
        heapPerHeldKiB: (after.heapUsed - before.heapUsed) / held.length / 1024,
        externalPerHeldKiB: (after.external - before.external) / held.length / 1024,
        rssPerHeldKiB: (after.rss - before.rss) / held.length / 1024,
      }
      progress(`held: ${figures.heapPerHeldKiB.toFixed(2)} KiB heap per held invocation (${held.length} held)`)
      return figures
    } finally {
      await log.close()
    }
  })
}

function intentFor(prefix: string, index: number) {
  return {
    handoffId: `${prefix}-h${index}`,
    hostEpoch: 'bench',
    rootRunId: `${prefix}-r${index}`,
    successorRunId: `${prefix}-next-r${index}`,
    successorInvocationId: `${prefix}-next-i${index}`,
    claimId: `${prefix}-c${index}`,
  }
}

const args = parseArgs(process.argv.slice(2))
emit(await heldBenchmark(args.quick))
