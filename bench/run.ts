/**
 * `npm run bench` — every benchmark, each in its own child process, one after the other; prints a
 * table and writes the figures as JSON (default `bench/results/latest.json`).
 *
 *   npm run bench                        # the full run (a few minutes)
 *   npm run bench -- --quick             # reduced sizes, under a minute (CI smoke run)
 *   npm run bench -- --out <file>        # write the JSON elsewhere
 *   npm run bench -- --only steps,held   # a subset: group-commit, steps, growth, recover, held
 *
 * Every figure is measured against its baseline in the same run; ratios are medians of paired
 * runs. Each benchmark file's header says exactly what it measures.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { availableParallelism, cpus } from 'node:os'
import { dirname, resolve } from 'node:path'
import type { GroupCommitFigures } from './group-commit.js'
import type { StepFigures } from './steps.js'
import { runChild } from './support.js'

interface GrowthFigures {
  smallFacts: number
  largeFacts: number
  runSourceMs: { small: number; large: number }
  runSourceGrowth: number
  recoverMs: { small: number; large: number }
  recoverGrowth: number
  reopenMs: number
  reopenSmallMs: number
  snapshotMs: number
  snapshotSmallMs: number
}
interface RecoverFigures {
  invocations: number
  recoverMs: number
  recoverMsPer1k: number
  reopenMs: number
}
interface HeldFigures {
  invocations: number
  heapPerHeldKiB: number
  externalPerHeldKiB: number
  rssPerHeldKiB: number
}
interface StepsOutput {
  saverDefaults: { synchronous: number; journalMode: string }
  c1: StepFigures
  c64: StepFigures
}

const BENCHMARKS = ['group-commit', 'steps', 'growth', 'recover', 'held'] as const
type BenchmarkName = (typeof BENCHMARKS)[number]

function parse(argv: readonly string[]): { quick: boolean; out: string; only: Set<BenchmarkName> } {
  let out = new URL('./results/latest.json', import.meta.url).pathname
  let only = new Set<BenchmarkName>(BENCHMARKS)
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]
    if (arg === '--out') {
      const value = argv[++i]
      if (!value) throw new Error('--out needs a file')
      out = resolve(value)
    } else if (arg === '--only') {
      const names = (argv[++i] ?? '').split(',').filter(Boolean)
      const unknown = names.filter((name) => !(BENCHMARKS as readonly string[]).includes(name))
      if (names.length === 0 || unknown.length > 0) throw new Error(`--only takes a list of ${BENCHMARKS.join(', ')}`)
      only = new Set(names as BenchmarkName[])
    } else if (arg !== '--quick') {
      throw new Error(`unknown argument ${arg}`)
    }
  }
  return { quick: argv.includes('--quick'), out, only }
}

const byConcurrency = <T>(list: GroupCommitFigures[], pick: (entry: GroupCommitFigures) => T): Record<string, T> =>
  Object.fromEntries(list.map((entry) => [`c${entry.concurrency}`, pick(entry)]))

const fmt = (value: number | undefined, digits = 2): string =>
  value === undefined || !Number.isFinite(value) ? '—' : value >= 1000 ? Math.round(value).toLocaleString('en-US') : value.toFixed(digits)

async function main(): Promise<void> {
  const options = parse(process.argv.slice(2))
  const mode = options.quick ? ['--quick'] : []
  const started = Date.now()
  const want = (name: BenchmarkName) => options.only.has(name)
  process.stderr.write(`factstate benchmarks (${options.quick ? 'quick' : 'full'} run)\n`)

  const groupCommit = want('group-commit') ? await runChild<GroupCommitFigures[]>('./group-commit.ts', mode) : undefined
  const steps = want('steps') ? await runChild<StepsOutput>('./steps.ts', mode) : undefined
  const growth = want('growth') ? await runChild<GrowthFigures>('./growth.ts', mode) : undefined
  const recover = want('recover') ? await runChild<RecoverFigures>('./recover-killed.ts', mode) : undefined
  const held = want('held') ? await runChild<HeldFigures>('./held.ts', mode, { nodeFlags: ['--expose-gc'] }) : undefined

  const results = {
    quick: options.quick,
    date: new Date(started).toISOString(),
    durationSeconds: Math.round((Date.now() - started) / 1000),
    machine: { node: process.version, platform: process.platform, cpus: availableParallelism(), cpuModel: cpus()[0]?.model ?? 'unknown' },
    ...(groupCommit && {
      groupCommitRatio: byConcurrency(groupCommit, (entry) => entry.ratio),
      groupCommitFactsPerSecond: byConcurrency(groupCommit, (entry) => ({
        factstate: entry.factstateFactsPerSecond,
        raw: entry.rawFactsPerSecond,
        rawFactsOnly: entry.rawFactsOnlyPerSecond,
      })),
      groupCommitRatioVsFactsOnly: byConcurrency(groupCommit, (entry) => entry.ratioVsFactsOnly),
      groupCommitHalfBatchesCeiling: byConcurrency(
        groupCommit.filter((entry) => entry.halfBatchesCeiling !== undefined),
        (entry) => entry.halfBatchesCeiling,
      ),
      groupCommitCpuCeiling: byConcurrency(groupCommit, (entry) => entry.cpuCeiling),
    }),
    ...(steps && {
      stepRatioVsLangGraph: { c1: steps.c1.ratio, c64: steps.c64.ratio },
      stepMs: {
        c1: { factstate: steps.c1.factstate.stepMs, langgraph: steps.c1.langgraph.stepMs },
        c64: { factstate: steps.c64.factstate.stepMs, langgraph: steps.c64.langgraph.stepMs },
      },
      bytesPerStep: {
        c1: { factstate: steps.c1.factstate.bytesPerStep, langgraph: steps.c1.langgraph.bytesPerStep },
        c64: { factstate: steps.c64.factstate.bytesPerStep, langgraph: steps.c64.langgraph.bytesPerStep },
      },
      langgraphSaverDefaults: steps.saverDefaults,
    }),
    ...(growth && {
      runSourceGrowth: growth.runSourceGrowth,
      recoverGrowth: growth.recoverGrowth,
      reopenMs: growth.reopenMs,
      snapshotMs: growth.snapshotMs,
    }),
    ...(recover && { recoverMsPer1k: recover.recoverMsPer1k }),
    ...(held && { heapPerHeldKiB: held.heapPerHeldKiB }),
    details: { groupCommit, steps, growth, recover, held },
  }

  await mkdir(dirname(options.out), { recursive: true })
  await writeFile(options.out, `${JSON.stringify(results, null, 2)}\n`)

  const rows: [string, string, string, string][] = [['figure', 'value', 'baseline / detail', 'goal']]
  const check = (ok: boolean) => (ok ? 'met' : 'MISSED')
  for (const entry of groupCommit ?? []) {
    rows.push([
      `groupCommitRatio c${entry.concurrency}`,
      fmt(entry.ratio),
      `${fmt(entry.factstateFactsPerSecond)} vs raw ${fmt(entry.rawFactsPerSecond)} facts/s (facts only ${fmt(entry.rawFactsOnlyPerSecond)}: ${fmt(entry.ratioVsFactsOnly)}); ${fmt(entry.recordsPerFact, 1)} records, ${fmt(entry.factstateBytesPerFact, 0)} B per fact; µs per fact on the main thread ${fmt(entry.mainThreadMicrosPerFact.factstate, 1)} vs raw ${fmt(entry.mainThreadMicrosPerFact.raw, 1)}, all threads ${fmt(entry.cpuMicrosPerFact.factstate, 1)} vs ${fmt(entry.cpuMicrosPerFact.raw, 1)}; facts per sync ${fmt(entry.factsPerSync.factstate, 0)} vs ${fmt(entry.factsPerSync.raw, 0)}${entry.halfBatchesCeiling === undefined ? '' : `; raw in half batches ${fmt(entry.halfBatchesCeiling)} of raw`}; CPU alone allows ${fmt(entry.cpuCeiling)} of raw`,
      entry.concurrency === 256
        ? `>= 0.8 and >= 100,000 facts/s: ${check(entry.ratio >= 0.8 && entry.factstateFactsPerSecond >= 100_000)}`
        : '',
    ])
  }
  if (steps) {
    for (const key of ['c1', 'c64'] as const) {
      const s = steps[key]
      rows.push([
        `stepRatioVsLangGraph ${key}`,
        fmt(s.ratio),
        `${fmt(s.langgraph.stepMs, 3)} / ${fmt(s.factstate.stepMs, 3)} ms per step; ${fmt(s.langgraph.bytesPerStep, 0)} / ${fmt(s.factstate.bytesPerStep, 0)} B per step`,
        `>= ${key === 'c1' ? 1 : 5}: ${check(s.ratio >= (key === 'c1' ? 1 : 5))}`,
      ])
    }
  }
  if (growth) {
    const sizes = `${fmt(growth.smallFacts)} vs ${fmt(growth.largeFacts)} facts`
    rows.push(['runSourceGrowth', fmt(growth.runSourceGrowth), `${fmt(growth.runSourceMs.small, 3)} → ${fmt(growth.runSourceMs.large, 3)} ms (${sizes})`, `<= 1.2: ${check(growth.runSourceGrowth <= 1.2)}`])
    rows.push(['recoverGrowth', fmt(growth.recoverGrowth), `${fmt(growth.recoverMs.small)} → ${fmt(growth.recoverMs.large)} ms, 10 open (${sizes})`, `<= 1.2: ${check(growth.recoverGrowth <= 1.2)}`])
    rows.push(['reopenMs', fmt(growth.reopenMs, 1), `open + tail check, ${fmt(growth.largeFacts)} facts`, ''])
    rows.push(['snapshotMs', fmt(growth.snapshotMs, 1), `openSnapshot of the same log while it is open (${fmt(growth.snapshotSmallMs, 1)} ms at ${fmt(growth.smallFacts)} facts)`, ''])
  }
  if (recover) rows.push(['recoverMsPer1k', fmt(recover.recoverMsPer1k, 1), `${fmt(recover.recoverMs, 0)} ms for ${fmt(recover.invocations)} killed invocations`, ''])
  if (held) rows.push(['heapPerHeldKiB', fmt(held.heapPerHeldKiB), `${fmt(held.invocations)} held at once`, `<= 8: ${check(held.heapPerHeldKiB <= 8)}`])
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  const line = (row: string[]) => row.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd()
  process.stdout.write(`\n${line(rows[0]!)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.slice(1).map(line).join('\n')}\n`)
  if (steps) {
    process.stdout.write(
      `\nLangGraph SqliteSaver default: journal_mode=${steps.saverDefaults.journalMode}, synchronous=${steps.saverDefaults.synchronous} (1 = NORMAL); measured with synchronous=FULL.\n`,
    )
  }
  process.stdout.write(`${options.quick ? 'quick run; ' : ''}figures written to ${options.out} (${results.durationSeconds} s)\n`)
}

await main()
