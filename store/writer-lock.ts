/**
 * One writer per directory. LevelDB's LOCK file keeps other processes out, but a second open in
 * the same process releases the first handle's lock (POSIX locks belong to the process), so the
 * log keeps its own registry of the directories this process holds.
 */
import { mkdir, realpath, stat } from 'node:fs/promises'
import { dirname } from 'node:path'
import { FactstateError, type FactstateErrorOf, isFactstateError, messageWithoutCode } from '../errors.js'
import { logIo } from './io-reason.js'

/** The directories this process holds, each with whether its log is closing (so a refusal can say to await that close). */
const held = new Map<string, { closing: boolean }>()

/** Opens waiting for a directory of this process to be released (`EventLog.open`'s `waitMs`): told at once. */
const releaseListeners = new Set<() => void>()

/**
 * Calls `listener` when this process next releases a directory (any of them: the caller tries its
 * open again). Returns the function that stops listening.
 */
function onRelease(listener: () => void): () => void {
  releaseListeners.add(listener)
  return () => releaseListeners.delete(listener)
}

/**
 * Whether a log of this process holds the directory whose real path is `path`. Nothing in this
 * process may open such a directory with LevelDB, not even to test its lock: LevelDB refuses the
 * second lock and closes the file it opened for it, and closing any descriptor of the LOCK file
 * drops every POSIX lock this process has on it, the first log's included.
 */
export function heldInThisProcess(path: string): boolean {
  return held.has(path)
}

/** A directory held by one log of this process. */
export interface DirectoryClaim {
  /** The directory's real path. */
  path: string
  /** Its log has begun to close: a second open is still refused until `release`, but told to await the close. */
  closing(): void
  /** Frees the directory for another open in this process. */
  release(notify?: boolean): void
}

/** Claims `location` for this process; throws `LOG_WRITER_BUSY` if it is already held here. */
export async function claimDirectory(location: string): Promise<DirectoryClaim> {
  let path: string
  try {
    await makeDirectory(location)
    path = await realpath(location)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    // A file where the directory (or one of its parents) should be is the caller's mistake.
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `the log location ${location} is not a directory (a file is in the way)`, { cause: error })
    }
    throw logIo(`the log directory ${location} cannot be created: ${(error as Error).message}`, error, { path: location })
  }
  const holder = held.get(path)
  if (holder?.closing) {
    throw new FactstateError('LOG_WRITER_BUSY', `the log at ${location} is being closed in this process: await its close() before opening it again`, {
      details: { holder: 'this-process', closing: true },
    })
  }
  if (holder) {
    throw new FactstateError('LOG_WRITER_BUSY', `the log at ${location} is already open in this process: use that handle, or close it first`, {
      details: { holder: 'this-process', closing: false },
    })
  }
  const state = { closing: false }
  held.set(path, state)
  let released = false
  return {
    path,
    closing: () => {
      state.closing = true
    },
    release: (notify = true) => {
      if (released) return
      released = true
      if (held.get(path) !== state) return
      held.delete(path)
      if (notify) for (const listener of [...releaseListeners]) listener()
    },
  }
}

/**
 * `mkdir -p`, one level at a time. Node's own `mkdir(path, { recursive: true })` never returns where
 * the file system refuses a name under a directory that exists (`/proc/x`: each try says the name
 * is missing, so it makes the parent again, which exists, and tries once more, forever); here the
 * second refusal, once the parent stands, is the answer.
 */
export async function makeDirectory(path: string): Promise<void> {
  try {
    await mkdir(path)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'EEXIST') {
      // A directory (or a link to one), made before or meanwhile: done. A file in the way: the caller says what that means.
      if (await isDirectory(path)) return
      throw error
    }
    const parent = dirname(path)
    if (code !== 'ENOENT' || parent === path) throw error
    await makeDirectory(parent)
    try {
      await mkdir(path)
    } catch (again) {
      if ((again as NodeJS.ErrnoException).code === 'EEXIST' && (await isDirectory(path))) return
      throw again
    }
  }
}

const isDirectory = (path: string): Promise<boolean> => stat(path).then((found) => found.isDirectory(), () => false)

/** The pauses between the tries of an open that waits for the writer (`waitMs`): from 25 ms, doubled, at most 1 s. */
const WAIT_FIRST_MS = 25
const WAIT_LONGEST_MS = 1_000

/**
 * `open()` until it is not `LOG_WRITER_BUSY`, for up to `waitMs` (`EventLog.open`'s `waitMs`):
 * tried again after a pause that grows from 25 ms to 1 s, never past the deadline, and at once when
 * this process releases a directory (a log of its own that was closing). Still busy at the deadline,
 * or once `signal` aborted, the last refusal is thrown, its code and details as they were, its
 * message saying how the wait ended. Any other failure ends the wait. `heldElsewhere` tells whether
 * another process still holds the log (see `logHeldOpen`): while it does, no try is made.
 */
export async function whileWriterBusy<T>(
  open: () => Promise<T>,
  waitMs: number,
  signal: AbortSignal | undefined,
  heldElsewhere?: () => Promise<boolean | undefined>,
): Promise<T> {
  const deadline = performance.now() + waitMs
  let pause = WAIT_FIRST_MS
  let refused: FactstateErrorOf<'LOG_WRITER_BUSY'> | undefined
  for (;;) {
    // While another process's lock on the log is still listed (`heldElsewhere`), a try is skipped:
    // LevelDB renames the holder's info log (LOG to LOG.old) before it asks for the lock, so every
    // refused try costs the holder its log of what LevelDB did. The last try, at the deadline or
    // once the signal aborted, is made whatever the list says (it cannot always be told: see
    // writer-presence.ts).
    const skip =
      refused?.details?.holder === 'another-process' &&
      heldElsewhere !== undefined &&
      signal?.aborted !== true &&
      deadline - performance.now() > 0 &&
      (await heldElsewhere()) === true
    if (!skip) {
      try {
        return await open()
      } catch (error) {
        if (waitMs === 0 || !isFactstateError(error, 'LOG_WRITER_BUSY')) throw error
        refused = error
      }
    }
    const last = refused as FactstateErrorOf<'LOG_WRITER_BUSY'>
    const left = deadline - performance.now()
    const aborted = signal?.aborted === true
    if (!skip && (left <= 0 || aborted)) {
      const ended = aborted ? 'its signal aborted the wait' : `still so after waiting ${waitMs.toLocaleString('en-US')} ms (waitMs)`
      throw new FactstateError('LOG_WRITER_BUSY', `${messageWithoutCode(last)} (${ended})`, { cause: last.cause, details: last.details })
    }
    // After a skipped try whose wait has ended, the last try is made at once.
    if (left > 0 && !aborted) await pauseFor(Math.min(pause, left), signal)
    pause = Math.min(pause * 2, WAIT_LONGEST_MS)
  }
}

/** Resolves after `ms`, or sooner: when `signal` aborts, or when this process releases a directory. */
function pauseFor(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      stopListening()
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    const stopListening = onRelease(done)
    signal?.addEventListener('abort', done, { once: true })
  })
}
