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
  await mkdir(location, { recursive: true })
  const path = await realpath(location)
  if (held.has(path)) {
    throw new FactstateError('LOG_WRITER_BUSY', `the log at ${location} is already open in this process`)
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
