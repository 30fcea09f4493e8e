/**
 * The benchmark smoke run: `bench/run.ts --quick` runs every benchmark (reduced sizes) in a child
 * process and must write every figure as a finite positive number. No timing is asserted: the
 * figures depend on the machine; this proves the benchmarks run and report what they promise.
 */
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { withTempDir, withTimeout } from './support/temp.js'

const RUN = fileURLToPath(new URL('../bench/run.ts', import.meta.url))

/** Every figure `bench/results/latest.json` must hold, as a path into the JSON. */
const FIGURES = [
  ...['c1', 'c16', 'c64', 'c256'].flatMap((c) => [
    `groupCommitRatio.${c}`,
    `groupCommitFactsPerSecond.${c}.factstate`,
    `groupCommitFactsPerSecond.${c}.raw`,
    `groupCommitCpuCeiling.${c}`,
  ]),
  'stepRatioVsLangGraph.c1',
  'stepRatioVsLangGraph.c64',
  ...['c1', 'c64'].flatMap((c) => [`stepMs.${c}.factstate`, `stepMs.${c}.langgraph`, `bytesPerStep.${c}.factstate`, `bytesPerStep.${c}.langgraph`]),
  'runSourceGrowth',
  'recoverGrowth',
  'recoverMsPer1k',
  'heapPerHeldKiB',
  'reopenMs',
  'snapshotMs',
  // Where the time goes at each concurrency, both sides (details.groupCommit is in c1, c16, c64, c256 order).
  ...[0, 1, 2, 3].flatMap((index) =>
    ['mainThreadMicrosPerFact', 'cpuMicrosPerFact', 'factsPerSync'].flatMap((figure) => [
      `details.groupCommit.${index}.${figure}.factstate`,
      `details.groupCommit.${index}.${figure}.raw`,
    ]),
  ),
]

function at(value: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((node, key) => (node !== null && typeof node === 'object' ? (node as Record<string, unknown>)[key] : undefined), value)
}

/** Runs the quick benchmark into `out`; resolves with its exit code. Kills the whole process group if the test gives up. */
function runQuick(out: string): { exit: Promise<number | null>; kill: () => void } {
  const child = spawn(process.execPath, ['--import', 'tsx', RUN, '--quick', '--out', out], { stdio: ['ignore', 'ignore', 'inherit'], detached: true })
  const exit = new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => resolve(code))
  })
  return {
    exit,
    kill: () => {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) process.kill(-child.pid, 'SIGKILL')
    },
  }
}

test('npm run bench -- --quick writes every figure as a finite positive number', () =>
  withTempDir(async (dir) => {
    const out = join(dir, 'latest.json')
    const run = runQuick(out)
    try {
      assert.is(await withTimeout(run.exit, 300_000, 'the quick benchmark'), 0, 'the quick benchmark exits 0')
    } finally {
      run.kill()
    }
    const results = JSON.parse(await readFile(out, 'utf8')) as Record<string, unknown>
    assert.is(results.quick, true)
    for (const path of FIGURES) {
      const value = at(results, path)
      assert.type(value, 'number', `${path} is a number`)
      assert.ok(Number.isFinite(value) && (value as number) > 0, `${path} is finite and positive (${String(value)})`)
    }
    // Memory, not speed: the heap per held invocation (after gc()) is ~8 KiB at the quick run's 1,000 held, ~7 at the
    // full run's 10,000. A per-invocation structure added by mistake shows here (a zod schema per gate doubled it).
    assert.ok((results.heapPerHeldKiB as number) <= 10, `heap per held invocation ${String(results.heapPerHeldKiB)} KiB`)
    // The raw replay writes one fact per appender per synced batch; a group never holds more facts than appenders.
    for (const [index, appenders] of [1, 16, 64, 256].entries()) {
      assert.is(at(results, `details.groupCommit.${index}.concurrency`), appenders)
      assert.is(at(results, `details.groupCommit.${index}.factsPerSync.raw`), appenders, `raw facts per sync at ${appenders}`)
      assert.ok((at(results, `details.groupCommit.${index}.factsPerSync.factstate`) as number) <= appenders, `factstate facts per sync at ${appenders}`)
      // No run uses more CPU than its cores give it: the CPU bound is at or above every paired ratio, so at or above their median.
      const cpuCeiling = at(results, `groupCommitCpuCeiling.c${appenders}`) as number
      const ratio = at(results, `groupCommitRatio.c${appenders}`) as number
      assert.ok(cpuCeiling >= ratio * 0.999, `CPU ceiling ${cpuCeiling} at or above the ratio ${ratio} at ${appenders}`)
      assert.is(cpuCeiling, at(results, `details.groupCommit.${index}.cpuCeiling`))
      // The ceiling of alternating two groups: the same records in batches of half the appenders.
      const halves = at(results, `details.groupCommit.${index}.factsPerSync.rawHalfBatches`)
      const ceiling = at(results, `groupCommitHalfBatchesCeiling.c${appenders}`)
      if (appenders === 1) {
        assert.is(halves, undefined, 'no half batches of one appender')
        assert.is(ceiling, undefined)
      } else {
        assert.is(halves, appenders / 2, `raw half batches hold ${appenders / 2} facts`)
        assert.ok(typeof ceiling === 'number' && ceiling > 0 && Number.isFinite(ceiling), `half-batch ceiling at ${appenders} (${String(ceiling)})`)
        assert.is(ceiling, at(results, `details.groupCommit.${index}.halfBatchesCeiling`))
      }
    }
  }))

test.run()
