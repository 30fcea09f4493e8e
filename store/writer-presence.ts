/**
 * Whether a process has a log open, told from outside without opening it. While LevelDB has a
 * directory open it keeps a POSIX lock on the directory's LOCK file, and Linux lists every such
 * lock in /proc/locks by the locked file's device and inode. Reading that list writes nothing and
 * takes no lock, so a reader of a snapshot (the inspector) can tell an open run that a live process
 * may be driving from one a crash left behind.
 */
import { readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'

/**
 * `1: POSIX  ADVISORY  WRITE 2400 fe:00:2154529 0 EOF` (2400 the holder's pid; an open file
 * description lock, `OFDLCK`, lists -1); a waiter's line has `->` after the number.
 */
const LOCK_LINE = /^\d+:\s+(?!->)\S+\s+\S+\s+\S+\s+(-?\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s/

/**
 * True while some process holds the LOCK of the log at `directory` (this one included), false when
 * none does, undefined where that cannot be told (no /proc/locks, as on macOS and Windows, or no LOCK
 * file to look for). The locks are matched by inode alone: on an overlay file system the device a
 * lock is listed under need not be the one `stat` reports, and a match on another file system's
 * inode only errs towards "held".
 */
export async function logHeldOpen(directory: string): Promise<boolean | undefined> {
  const holder = await logHolder(directory)
  return holder === undefined ? undefined : holder !== false
}

/**
 * Who holds the LOCK of the log at `directory`, as {@link logHeldOpen} tells it: `{ pid }` while a
 * process does (`pid` absent when /proc/locks lists it as 0, a process outside this one's pid
 * namespace, or -1, an open file description lock), false when none does, undefined where that cannot be told.
 */
export async function logHolder(directory: string): Promise<{ pid?: number } | false | undefined> {
  let inode: bigint
  try {
    inode = (await stat(join(directory, 'LOCK'), { bigint: true })).ino
  } catch {
    return undefined
  }
  let locks: string
  try {
    locks = await readFile('/proc/locks', 'utf8')
  } catch {
    return undefined
  }
  return lockHolder(locks, inode)
}

/**
 * Who holds a lock on the file with this inode, read from the text of /proc/locks: `{ pid }`, `{}`
 * when the line lists no pid of this namespace (0, or -1 for an open file description lock: held all
 * the same), false when no line holds one.
 */
export function lockHolder(locks: string, inode: bigint): { pid?: number } | false {
  for (const line of locks.split('\n')) {
    const found = LOCK_LINE.exec(line)
    if (found === null || BigInt(found[2] as string) !== inode) continue
    const pid = Number(found[1])
    return pid > 0 ? { pid } : {}
  }
  return false
}
