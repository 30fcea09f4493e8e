/**
 * One writer per directory. LevelDB's LOCK file keeps other processes out, but a second open in
 * the same process releases the first handle's lock (POSIX locks belong to the process), so the
 * log keeps its own registry of the directories this process holds.
 */
import { mkdir, realpath, stat } from 'node:fs/promises'
import { dirname } from 'node:path'
import { FactstateError } from '../errors.js'

/** The directories this process holds, each with whether its log is closing (so a refusal can say to await that close). */
const held = new Map<string, { closing: boolean }>()

/** A directory held by one log of this process. */
export interface DirectoryClaim {
  /** The directory's real path. */
  path: string
  /** Its log has begun to close: a second open is still refused until `release`, but told to await the close. */
  closing(): void
  /** Frees the directory for another open in this process. */
  release(): void
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
    throw new FactstateError('LOG_IO', `the log directory ${location} cannot be created: ${(error as Error).message}`, { cause: error })
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
    release: () => {
      if (!released && held.get(path) === state) held.delete(path)
      released = true
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
