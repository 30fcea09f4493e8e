import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** Runs `body` with a fresh temporary directory, removed afterwards whatever happens. */
export async function withTempDir<T>(body: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'factstate-'))
  try {
    return await body(dir)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/**
 * Runs `body` with the system's temporary directory (`os.tmpdir()`, which snapshots are copied
 * into) set to `dir`, so a test can see what was left there by it alone.
 */
export async function withTmpdir<T>(dir: string, body: () => Promise<T>): Promise<T> {
  const saved = process.env.TMPDIR
  process.env.TMPDIR = dir
  try {
    return await body()
  } finally {
    if (saved === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = saved
  }
}

let exitArmed = false

/**
 * A test that timed out may still hold a server, a log or a child open, and would keep the process
 * alive after uvu reported (until CI's own timeout). Once one has timed out, the process exits as
 * soon as uvu has set its exit code, which it does only after printing its summary.
 */
export function exitOnceReported(): void {
  if (exitArmed) return
  exitArmed = true
  setInterval(() => {
    if (process.exitCode !== undefined) process.exit()
  }, 100).unref()
}

/** uvu has no per-test timeout: every async test bounds itself with this (a promise, or a function returning one). */
export async function withTimeout<T>(promise: Promise<T> | (() => Promise<T>), ms: number, what = 'test'): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const running = typeof promise === 'function' ? promise() : promise
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      exitOnceReported()
      reject(new Error(`${what} did not finish within ${ms} ms`))
    }, ms)
  })
  try {
    return await Promise.race([running, timeout])
  } catch (error) {
    throw reportable(error)
  } finally {
    clearTimeout(timer)
  }
}

/**
 * uvu's reporter reads `error.details` as a string; a FactstateError's structured `details`
 * would make it abort the suite without reporting the failure. Such errors are re-thrown as
 * plain errors carrying the code, the details as JSON, and the original as `cause`.
 */
export function reportable(error: unknown): unknown {
  const details = (error as { details?: unknown } | null)?.details
  if (!(error instanceof Error) || details === undefined || typeof details === 'string') return error
  const code = (error as { code?: unknown }).code
  const plain = new Error(`${code === undefined ? '' : `[${String(code)}] `}${error.message} ${JSON.stringify(details)}`, { cause: error })
  plain.stack = `${plain.message}\n${error.stack?.split('\n').slice(1).join('\n') ?? ''}`
  return plain
}

/** A test body bounded by `ms`, in a fresh temporary directory. */
export const bounded =
  (ms: number, body: (dir: string) => Promise<void>) =>
  (): Promise<void> =>
    withTimeout(withTempDir(body), ms)
