/**
 * One writer per directory. LevelDB's LOCK file keeps other processes out, but a second open in
 * the same process releases the first handle's lock (POSIX locks belong to the process), so the
 * log keeps its own registry of the directories this process holds.
 */
import { mkdir, realpath } from 'node:fs/promises'
import { FactstateError } from '../errors.js'

const held = new Set<string>()

/** Claims `location` for this process; throws `LOG_WRITER_BUSY` if it is already held here. */
export async function claimDirectory(location: string): Promise<{ path: string; release: () => void }> {
  let path: string
  try {
    await mkdir(location, { recursive: true })
    path = await realpath(location)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    // A file where the directory (or one of its parents) should be is the caller's mistake.
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `the log location ${location} is not a directory (a file is in the way)`, { cause: error })
    }
    throw new FactstateError('LOG_IO', `the log directory ${location} cannot be created: ${(error as Error).message}`, { cause: error })
  }
  if (held.has(path)) {
    throw new FactstateError('LOG_WRITER_BUSY', `the log at ${location} is already open in this process: use that handle, or close it first`)
  }
  held.add(path)
  let released = false
  return {
    path,
    release: () => {
      if (!released) held.delete(path)
      released = true
    },
  }
}
