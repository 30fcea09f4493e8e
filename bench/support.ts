/**
 * Shared plumbing of the benchmarks: timing and medians, temporary directories, bytes handed to
 * the OS, and the child-process protocol (each benchmark runs in its own process so that heaps,
 * LevelDB handles and background compactions of one never disturb another).
 */
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { keys } from '../store/keys.js'

/** The median of `values` (the mean of the two middle values for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? (sorted[middle] as number) : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

/** Milliseconds since an arbitrary origin, sub-millisecond resolution. */
export const now = (): number => performance.now()

/** A fresh temporary directory for `body`, removed afterwards whatever happens. */
export async function withTempDir<T>(body: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'factstate-bench-'))
  try {
    return await body(dir)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/**
 * Bytes this process has handed to `write`/`pwrite` so far (`wchar` of `/proc/self/io`, every
 * thread: LevelDB's and SQLite's writers and compactions included). `undefined` where the kernel
 * does not report it.
 */
export async function bytesWritten(): Promise<number | undefined> {
  try {
    const text = await readFile('/proc/self/io', 'utf8')
    const match = /^wchar:\s*(\d+)/m.exec(text)
    return match ? Number(match[1]) : undefined
  } catch {
    return undefined
  }
}

/** The total size of the files under `dir` (fallback for {@link bytesWritten}). */
export async function directoryBytes(dir: string): Promise<number> {
  let total = 0
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    total += entry.isDirectory() ? await directoryBytes(path) : (await stat(path)).size
  }
  return total
}

/** Measures the bytes written while `body` runs: `wchar` when available, else the growth of `dir`. */
export async function measureWrites<T>(dir: string, body: () => Promise<T>): Promise<{ bytes: number; value: T }> {
  const before = await bytesWritten()
  const sizeBefore = before === undefined ? await directoryBytes(dir) : 0
  const value = await body()
  const after = await bytesWritten()
  if (before !== undefined && after !== undefined) return { bytes: after - before, value }
  return { bytes: (await directoryBytes(dir)) - sizeBefore, value }
}

/** The private methods of classic-level's chained batch that the benchmarks wrap to count and time batches. */
export interface ChainedBatchPrototype {
  _put(key: string, value: Uint8Array): void
  _del(key: string): void
  _write(options: unknown): Promise<void>
}

/** classic-level's `ChainedBatch.prototype` (the class the log's `db.batch()` makes). */
export function chainedBatchPrototype(): ChainedBatchPrototype {
  const { ChainedBatch } = createRequire(import.meta.url)('classic-level/chained-batch.js') as { ChainedBatch: { prototype: ChainedBatchPrototype } }
  return ChainedBatch.prototype
}

/** Command-line flags shared by every benchmark. */
export interface BenchArgs {
  quick: boolean
  positional: string[]
}

export function parseArgs(argv: readonly string[]): BenchArgs {
  return { quick: argv.includes('--quick'), positional: argv.filter((arg) => !arg.startsWith('--')) }
}

const RESULT_PREFIX = '@@bench-result '

/** Called by a benchmark child: hands its figures to the parent on stdout. */
export function emit(result: unknown): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`)
}

/** Prints progress on stderr (stdout carries the result). */
export function progress(message: string): void {
  process.stderr.write(`  · ${message}\n`)
}

/**
 * Runs `file` (a benchmark module next to this one) in a child process with tsx and returns the
 * object it {@link emit}s. Its stderr (progress) passes through.
 */
export function runChild<T>(file: string, args: readonly string[], options: { nodeFlags?: readonly string[] } = {}): Promise<T> {
  const path = new URL(file, import.meta.url).pathname
  return new Promise<T>((resolve, reject) => {
    const child = spawn(process.execPath, [...(options.nodeFlags ?? []), '--import', 'tsx', path, ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    let stdout = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk: string) => {
      stdout += chunk
    })
    child.on('error', reject)
    child.on('close', (code, signal) => {
      const line = stdout.split('\n').find((candidate) => candidate.startsWith(RESULT_PREFIX))
      if (code !== 0 || line === undefined) {
        reject(new Error(`${file} exited with ${signal ?? code} and no result`))
        return
      }
      resolve(JSON.parse(line.slice(RESULT_PREFIX.length)) as T)
    })
  })
}

/** A record put into (or deleted from) a LevelDB batch, as the benchmarks capture the log's and replay them raw. */
export type Op = { type: 'put'; key: string; value: Uint8Array } | { type: 'del'; key: string }

/** Captured operations cut into batches of `perBatch` facts (a batch ends before the next fact's event record). */
export function sameRecordBatches(ops: readonly Op[], perBatch: number): Op[][] {
  const batches: Op[][] = []
  let current: Op[] = []
  let facts = 0
  for (const op of ops) {
    if (op.type === 'put' && op.key.startsWith(keys.eventLow)) {
      if (facts === perBatch) {
        batches.push(current)
        current = []
        facts = 0
      }
      facts += 1
    }
    current.push(op)
  }
  if (current.length > 0) batches.push(current)
  return batches
}
