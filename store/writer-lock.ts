/**
 * One writer per directory. LevelDB's LOCK file keeps other processes out, but a second open in
 * the same process releases the first handle's lock (POSIX locks belong to the process: LevelDB
 * refuses the second lock and closes the file it opened for it, and closing any descriptor of the
 * LOCK file drops every POSIX lock this process has on it), so nothing in this process may open a
 * directory this process holds with LevelDB, not even to test its lock. Two guards keep it from that:
 *
 * - a registry of the directories this process holds, kept on `globalThis` (see `REGISTRY`), so that
 *   a second copy of factstate loaded in the same thread (two installs, a bundled copy) shares it;
 * - for another thread (a `Worker` has its own globals), the list of POSIX locks Linux keeps in
 *   /proc/locks: a lock this process holds on the directory's LOCK file refuses the open before
 *   LevelDB touches the directory. Where there is no such list (macOS, Windows) a worker's open of a
 *   directory the main thread holds is not guarded.
 */
import { readFile, mkdir, realpath, stat } from 'node:fs/promises'
import { basename, dirname, join, resolve } from 'node:path'
import { FactstateError, type FactstateErrorOf, isFactstateError, messageWithoutCode } from '../errors.js'
import { logIo } from './io-reason.js'

/** A directory a log of this process holds: whether its log is closing, and how many tools its engines started still run. */
interface HeldEntry {
  closing: boolean
  /** Tools dispatched through the closed log's engines that have not settled: the directory stays held until none does. */
  running?: number
}

/**
 * The registry as every copy of factstate in one realm shares it. Versioned and minimal: a later
 * version may add fields (never change or remove these), and a copy that finds a `version` it
 * does not know, or no registry of this shape, still reads `held` and `listeners` when they are there.
 */
interface Registry {
  version: 1
  /** The directories (real paths) held in this realm. */
  held: Map<string, HeldEntry>
  /** Opens waiting for a directory to be released (`EventLog.open`'s `waitMs`): told at once. */
  listeners: Set<() => void>
}

const REGISTRY = Symbol.for('factstate.heldDirectories')

function registry(): Registry {
  const global = globalThis as { [REGISTRY]?: unknown }
  const found = global[REGISTRY] as Partial<Registry> | undefined
  if (found !== undefined && found !== null && found.held instanceof Map && found.listeners instanceof Set) return found as Registry
  const made: Registry = { version: 1, held: new Map(), listeners: new Set() }
  // Something else under the key (not a registry this code can read): this copy keeps its own, and
  // /proc/locks still guards the directories the others hold.
  if (found !== undefined) return made
  // Not enumerable, not writable: a copy of factstate loaded later finds it and cannot replace it by mistake.
  try {
    Object.defineProperty(globalThis, REGISTRY, { value: made, enumerable: false, writable: false, configurable: false })
  } catch {
    // A frozen global object: this copy keeps its own.
  }
  return made
}

const { held, listeners: releaseListeners } = registry()

/**
 * Calls `listener` when this process next releases a directory (any of them: the caller tries its
 * open again). Returns the function that stops listening.
 */
function onRelease(listener: () => void): () => void {
  releaseListeners.add(listener)
  return () => releaseListeners.delete(listener)
}

/**
 * Whether a log of this process holds the directory whose real path is `path`, as this thread's
 * registry tells it (see `heldByLock` for the other threads).
 */
export function heldInThisProcess(path: string): boolean {
  return held.has(path)
}

/**
 * `1: POSIX  ADVISORY  WRITE 2400 fe:00:2154529 0 EOF`: the holder's pid, the locked file's device
 * (major:minor, in hex) and inode. A waiter's line has `->` after the number.
 */
const LOCK_LINE = /^\d+:\s+(?!->)POSIX\s+\S+\s+\S+\s+(\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/

/**
 * Whether this process (any thread of it) holds a POSIX lock on the LOCK file of the directory at
 * `path`, as /proc/locks lists it: true, false, or undefined where that cannot be told (no
 * /proc/locks, no LOCK file). Matched by this pid and the LOCK file's device and inode. Reads
 * only: it opens nothing in the directory.
 */
export async function heldByLock(path: string, locks?: string): Promise<boolean | undefined> {
  let lock: { dev: bigint; ino: bigint }
  try {
    lock = await stat(join(path, 'LOCK'), { bigint: true })
  } catch {
    return undefined
  }
  let text = locks
  if (text === undefined) {
    try {
      text = await readFile('/proc/locks', 'utf8')
    } catch {
      return undefined
    }
  }
  // Linux's dev_t: the major in bits 8-19 and 32 up, the minor in bits 0-7 and 20 up.
  const major = ((lock.dev >> 8n) & 0xfffn) | ((lock.dev >> 32n) & ~0xfffn)
  const minor = (lock.dev & 0xffn) | ((lock.dev >> 12n) & ~0xffn)
  for (const line of text.split('\n')) {
    const found = LOCK_LINE.exec(line)
    if (found === null || Number(found[1]) !== process.pid) continue
    if (BigInt(found[4] as string) === lock.ino && BigInt(`0x${found[2] as string}`) === major && BigInt(`0x${found[3] as string}`) === minor) return true
  }
  return false
}

/** `LOG_WRITER_BUSY` for a log another thread (or copy of factstate) of this process has open. */
export function busyInThisProcess(location: string, cause?: unknown): FactstateErrorOf<'LOG_WRITER_BUSY'> {
  // With a cause, LevelDB itself refused: its refusal closed the LOCK file, which may have released the other handle's lock.
  const lost = cause === undefined ? '' : "; LevelDB's refusal may have released that handle's lock on the directory (two opens at the same moment): close that handle and open the log again"
  return new FactstateError(
    'LOG_WRITER_BUSY',
    `the log at ${location} is already open in this process (by another thread, a Worker, or another copy of factstate loaded in it): open each log once per process and share that handle, or close it first${lost}`,
    { ...(cause === undefined ? {} : { cause }), details: { holder: 'this-process', closing: false } },
  ) as FactstateErrorOf<'LOG_WRITER_BUSY'>
}

/** A directory held by one log of this process. */
export interface DirectoryClaim {
  /** The directory's real path. */
  path: string
  /** The claim made the directory (it was missing). */
  made: boolean
  /** Its log has begun to close: a second open is still refused until `release`, but told to await the close. */
  closing(): void
  /** How many tools the closed log's engines started still run (a refused open says so). */
  running(count: number): void
  /** Frees the directory for another open in this process. */
  release(notify?: boolean): void
}

/**
 * The real path `location` has or would have: that of its nearest existing ancestor with the rest
 * of the path after it. Undefined where even that cannot be read.
 */
async function realPathOf(location: string): Promise<{ path: string; exists: boolean } | undefined> {
  const rest: string[] = []
  let at = resolve(location)
  for (;;) {
    try {
      const found = await realpath(at)
      // A file in the way is not a directory that exists: making it says so.
      return { path: rest.length === 0 ? found : join(found, ...rest.reverse()), exists: rest.length === 0 && (await isDirectory(found)) }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(at) === at) return undefined
      rest.push(basename(at))
      at = dirname(at)
    }
  }
}

/** `LOG_WRITER_BUSY` when the directory at real path `path` is held in this realm (this registry): synchronous. */
function refuseIfRegistered(location: string, path: string): void {
  const holder = held.get(path)
  if (holder !== undefined && (holder.running ?? 0) > 0) {
    throw new FactstateError(
      'LOG_WRITER_BUSY',
      `the log at ${location} was closed in this process, but ${holder.running} tool call${holder.running === 1 ? '' : 's'} its engines started ${holder.running === 1 ? 'is' : 'are'} still running (${holder.running === 1 ? 'it ignores' : 'they ignore'} its abort signal): the directory stays locked until ${holder.running === 1 ? 'it settles' : 'they settle'}, so that no open finds the run cut short while its effect may still happen; open with waitMs to wait for that`,
      { details: { holder: 'this-process', closing: true, toolsRunning: holder.running } },
    )
  }
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
}

/** `LOG_WRITER_BUSY` when the directory at real path `path` is held in this process (this realm's registry, or a lock of another thread). */
async function refuseIfHeld(location: string, path: string): Promise<void> {
  refuseIfRegistered(location, path)
  // Another thread's log (a Worker's own copy of this registry is not this one): LevelDB's own try
  // would release its lock.
  if ((await heldByLock(path)) === true) throw busyInThisProcess(location)
}

/**
 * Claims `location` for this process; throws `LOG_WRITER_BUSY` if it is already held here. The
 * directory is made (when missing) only once it is known not to be held.
 */
export async function claimDirectory(location: string): Promise<DirectoryClaim> {
  const wrong = (error: unknown): FactstateError => {
    const code = (error as NodeJS.ErrnoException).code
    // A file where the directory (or one of its parents) should be is the caller's mistake.
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      return new FactstateError('LOG_INVALID_ARGUMENT', `the log location ${location} is not a directory (a file is in the way)`, { cause: error })
    }
    return logIo(`the log directory ${location} cannot be created: ${(error as Error).message}`, error, { path: location })
  }
  const before = await realPathOf(location)
  if (before !== undefined) await refuseIfHeld(location, before.path)
  let path: string
  // Whether this open made the directory: not when it was there already, even where its real path
  // could not be read beforehand (no descriptor left, say).
  let made = false
  try {
    if (before?.exists !== true) made = await makeDirectory(location)
    path = await realpath(location)
  } catch (error) {
    throw wrong(error)
  }
  // Checked again: made meanwhile, or its real path not the one foreseen (a link made meanwhile).
  if (path !== before?.path || before.exists !== true) await refuseIfHeld(location, path)
  // The registry's check and `held.set` in one turn: no other open of this realm comes between them.
  refuseIfRegistered(location, path)
  const state: HeldEntry = { closing: false }
  held.set(path, state)
  let released = false
  const release = (notify = true) => {
    if (released) return
    released = true
    if (held.get(path) !== state) return
    held.delete(path)
    if (notify) for (const listener of [...releaseListeners]) listener()
  }
  return {
    path,
    made,
    closing: () => {
      state.closing = true
    },
    running: (count: number) => {
      if (count > 0) state.running = count
      else delete state.running
    },
    release,
  }
}

/**
 * `mkdir -p`, one level at a time. Node's own `mkdir(path, { recursive: true })` never returns where
 * the file system refuses a name under a directory that exists (`/proc/x`: each try says the name
 * is missing, so it makes the parent again, which exists, and tries once more, forever); here the
 * second refusal, once the parent stands, is the answer. True when it made `path` itself.
 */
export async function makeDirectory(path: string): Promise<boolean> {
  try {
    await mkdir(path)
    return true
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'EEXIST') {
      // A directory (or a link to one), made before or meanwhile: done. A file in the way: the caller says what that means.
      if (await isDirectory(path)) return false
      throw error
    }
    const parent = dirname(path)
    if (code !== 'ENOENT' || parent === path) throw error
    await makeDirectory(parent)
    try {
      await mkdir(path)
      return true
    } catch (again) {
      if ((again as NodeJS.ErrnoException).code === 'EEXIST' && (await isDirectory(path))) return false
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
