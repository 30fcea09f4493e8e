/**
 * Benchmark 2, `stepRatioVsLangGraph`: the cost of complete agent steps (model request, one tool
 * call, settle, durable facts) through factstate's `Engine` and through the same loop in LangGraph
 * JS with `SqliteSaver` (`synchronous=FULL`), both with an in-process scripted model client.
 * Invocations of `STEPS` tool steps and a final answer, 1 at a time and 64 concurrently. Runs
 * alternate between the sides; each run gets a fresh store. Bytes are what the process handed to
 * the OS from opening the store to closing it (LevelDB compactions and SQLite's WAL checkpoint
 * included), per step.
 *
 * Child entry: `node --import tsx bench/steps.ts [--quick]`.
 */
import { join } from 'node:path'
import { Engine } from '../actors/engine.js'
import { ModelExecutor } from '../actors/model-executor.js'
import { EventLog } from '../store/event-log.js'
import { openLangGraphAgent } from './langgraph-loop.js'
import { emit, measureWrites, median, now, parseArgs, progress, withTempDir } from './support.js'
import { STEPS, runInput, scriptedClient } from './workload.js'

export interface StepSide {
  /** Wall time per step: one invocation's time / steps (c1), or the whole run's time / all steps (c64). */
  stepMs: number
  bytesPerStep: number
}

export interface StepFigures {
  concurrency: number
  steps: number
  invocations: number
  factstate: StepSide
  langgraph: StepSide
  /** LangGraph step time / factstate step time (median of paired runs). */
  ratio: number
}

let serial = 0

/** Runs `count` invocations with `concurrency` at a time on a fresh log; per-invocation times. */
async function factstateRun(count: number, concurrency: number, steps: number): Promise<{ ms: number[]; total: number; bytes: number }> {
  return withTempDir(async (dir) => {
    const run = serial++
    const { bytes, value } = await measureWrites(dir, async () => {
      const log = await EventLog.open(join(dir, 'log'))
      try {
        const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => scriptedClient(steps) }) })
        return await timeInBatches(count, concurrency, async (index) => {
          const outcome = await engine.run(runInput(`fs${run}`, index, steps + 1))
          if (outcome.status !== 'completed') throw new Error(`factstate invocation ended ${outcome.status}`)
        })
      } finally {
        await log.close()
        // A run this small never fills LevelDB's memtable: its facts are only in the write-ahead
        // log, and would be written again as a table at the next open. That open is counted here,
        // as SQLite's checkpoint of its own write-ahead log is on the LangGraph side.
        await (await EventLog.open(join(dir, 'log'))).close()
      }
    })
    return { ...value, bytes }
  })
}

async function langgraphRun(count: number, concurrency: number, steps: number): Promise<{ ms: number[]; total: number; bytes: number }> {
  return withTempDir(async (dir) => {
    const run = serial++
    const { bytes, value } = await measureWrites(dir, async () => {
      const agent = await openLangGraphAgent(join(dir, 'checkpoints.sqlite'), steps)
      try {
        return await timeInBatches(count, concurrency, async (index) => {
          const messages = await agent.invoke(`lg${run}-${index}`)
          if (messages !== 2 * steps + 2) throw new Error(`LangGraph invocation ended with ${messages} messages`)
        })
      } finally {
        agent.close()
      }
    })
    return { ...value, bytes }
  })
}

/** Runs `count` invocations `concurrency` at a time, the same way on both sides; times each one and the whole. */
async function timeInBatches(count: number, concurrency: number, one: (index: number) => Promise<void>): Promise<{ ms: number[]; total: number }> {
  const times: number[] = []
  const start = now()
  for (let first = 0; first < count; first += concurrency) {
    await Promise.all(
      Array.from({ length: Math.min(concurrency, count - first) }, async (_, offset) => {
        const began = now()
        await one(first + offset)
        times.push(now() - began)
      }),
    )
  }
  return { ms: times, total: now() - start }
}

/** What SqliteSaver leaves `synchronous` at (reported with the figures). */
async function saverDefaults(): Promise<{ synchronous: number; journalMode: string }> {
  return withTempDir(async (dir) => {
    const agent = await openLangGraphAgent(join(dir, 'probe.sqlite'), 1)
    try {
      return { synchronous: agent.defaultSynchronous, journalMode: agent.journalMode }
    } finally {
      agent.close()
    }
  })
}

async function measure(concurrency: number, perRun: number, runs: number, steps: number): Promise<StepFigures> {
  const fs: { step: number; bytes: number }[] = []
  const lg: { step: number; bytes: number }[] = []
  const ratios: number[] = []
  for (let run = 0; run < runs; run += 1) {
    const a = await factstateRun(perRun, concurrency, steps)
    const b = await langgraphRun(perRun, concurrency, steps)
    const stepOf = (r: { ms: number[]; total: number }) => (concurrency === 1 ? median(r.ms) / steps : r.total / (perRun * steps))
    fs.push({ step: stepOf(a), bytes: a.bytes / (perRun * steps) })
    lg.push({ step: stepOf(b), bytes: b.bytes / (perRun * steps) })
    ratios.push(stepOf(b) / stepOf(a))
  }
  const side = (list: { step: number; bytes: number }[]): StepSide => ({
    stepMs: median(list.map((x) => x.step)),
    bytesPerStep: median(list.map((x) => x.bytes)),
  })
  const figures = { concurrency, steps, invocations: perRun, factstate: side(fs), langgraph: side(lg), ratio: median(ratios) }
  progress(
    `steps ×${concurrency}: factstate ${figures.factstate.stepMs.toFixed(3)} ms/step, LangGraph ${figures.langgraph.stepMs.toFixed(3)} ms/step, ratio ${figures.ratio.toFixed(2)}`,
  )
  return figures
}

export async function stepsBenchmark(quick: boolean) {
  const steps = STEPS
  const defaults = await saverDefaults()
  // Warm both sides up (JIT, module initialisation) before anything is timed.
  await factstateRun(2, 1, steps)
  await langgraphRun(2, 1, steps)
  const c1 = await measure(1, quick ? 2 : 5, quick ? 2 : 5, steps)
  // Quick mode keeps 64 at once but shortens their loop: LangGraph would need ~20 s otherwise.
  const c64 = await measure(64, 64, quick ? 1 : 3, quick ? 5 : steps)
  return { saverDefaults: defaults, c1, c64 }
}

const args = parseArgs(process.argv.slice(2))
emit(await stepsBenchmark(args.quick))
