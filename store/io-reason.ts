/**
 * Why an I/O failure happened, as `LOG_IO`'s `details.reason` says it: from the system's error code
 * where the failure carries one (Node's file calls), else from the system's text LevelDB carries in
 * its message (`IO error: …/000005.ldb: No space left on device`), so that an alert can be routed
 * (disk, permissions, descriptor limit) without parsing the message.
 */
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { FactstateError, type LogIoReason } from '../errors.js'

export type { LogIoReason }

const BY_CODE: Record<string, LogIoReason> = {
  ENOSPC: 'no_space',
  EDQUOT: 'no_space',
  EACCES: 'permission',
  EPERM: 'permission',
  EROFS: 'read_only',
  EMFILE: 'too_many_files',
  ENFILE: 'too_many_files',
  ENOENT: 'directory_gone',
}

/** The system's own words (strerror, glibc and musl) LevelDB ends its `IO error: <file>: <text>` with. */
const BY_TEXT: [RegExp, LogIoReason][] = [
  [/No space left on device|Disk quota exceeded/i, 'no_space'],
  [/Read-only file system/i, 'read_only'],
  [/Permission denied|Operation not permitted/i, 'permission'],
  [/Too many open files/i, 'too_many_files'],
  [/No such file or directory/i, 'directory_gone'],
]

/** LevelDB's `IO error: <context>: <system text>` (`NotFound:` for a missing file); the context is a path, or `lock <path>`. */
const LEVELDB_IO = /^(?:IO error|NotFound): (?:lock )?(.+): ([^:]+)$/

/** The reason and path of an I/O failure, read from `error` and its causes (LevelDB wraps its own error). */
export function ioCause(error: unknown): { reason: LogIoReason; path?: string } {
  for (let cause: unknown = error, depth = 0; typeof cause === 'object' && cause !== null && depth < 5; cause = (cause as { cause?: unknown }).cause, depth += 1) {
    const { code, path, message } = cause as { code?: unknown; path?: unknown; message?: unknown }
    const reason = typeof code === 'string' ? BY_CODE[code] : undefined
    if (reason !== undefined) return typeof path === 'string' ? { reason, path } : { reason }
    if (typeof message !== 'string') continue
    const found = LEVELDB_IO.exec(message)
    const text = found?.[2] ?? message
    const byText = BY_TEXT.find(([pattern]) => pattern.test(text))?.[1]
    if (byText !== undefined) return found?.[1] === undefined ? { reason: byText } : { reason: byText, path: found[1] }
  }
  return { reason: 'other' }
}

/**
 * The size of the write-ahead logs (`NNNNNN.log`) in the log directory `location`, in bytes: what
 * LevelDB writes out as a table when it next opens the log, so about the free space that open needs.
 * Undefined when the directory cannot be read.
 */
export function writeAheadBytes(location: string): number | undefined {
  let names: string[]
  try {
    names = readdirSync(location)
  } catch {
    return undefined
  }
  let bytes = 0
  // One deleted since the directory was read (a compaction ending) counts nothing, not the whole figure.
  for (const name of names) if (/^\d+\.log$/.test(name)) bytes += statSync(join(location, name), { throwIfNoEntry: false })?.size ?? 0
  return bytes
}

/** "3.1 MiB", "228 KiB", "512 bytes": for a person freeing space. */
export function shownBytes(bytes: number): string {
  if (bytes >= 1024 * 1024 * 1024) return `${(bytes / (1024 * 1024 * 1024)).toFixed(1)} GiB`
  if (bytes >= 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`
  if (bytes >= 1024) return `${Math.ceil(bytes / 1024)} KiB`
  return `${bytes} bytes`
}

/**
 * A `LOG_IO` for `error`, its `details.reason` and `details.path` read from it (`path` given wins:
 * the place the caller was making, where the error names none). With the log directory `location`,
 * a full disk's message and `details.spaceNeeded` say how much free space its next open needs.
 */
export function logIo(message: string, error: unknown, options: { path?: string; location?: string; reason?: LogIoReason } = {}): FactstateError {
  const found = error === undefined ? { reason: 'other' as const } : ioCause(error)
  const reason = options.reason ?? found.reason
  const path = options.path ?? found.path
  const details: { reason: LogIoReason; path?: string; spaceNeeded?: number } = { reason, ...(path === undefined ? {} : { path }) }
  let text = message
  if (reason === 'no_space' && options.location !== undefined) {
    const needed = writeAheadBytes(options.location)
    if (needed !== undefined && needed > 0) {
      details.spaceNeeded = needed
      text += ` (the disk is full: the log's next open writes its write-ahead log, ${shownBytes(needed)}, out as a table, so free at least that much before it)`
    }
  }
  return new FactstateError('LOG_IO', text, { ...(error === undefined ? {} : { cause: error }), details })
}
