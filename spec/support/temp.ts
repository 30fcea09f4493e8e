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

/** uvu has no per-test timeout: every async test bounds itself with this (a promise, or a function returning one). */
export async function withTimeout<T>(promise: Promise<T> | (() => Promise<T>), ms: number, what = 'test'): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const running = typeof promise === 'function' ? promise() : promise
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([running, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** A test body bounded by `ms`, in a fresh temporary directory. */
export const bounded =
  (ms: number, body: (dir: string) => Promise<void>) =>
  (): Promise<void> =>
    withTimeout(withTempDir(body), ms)
