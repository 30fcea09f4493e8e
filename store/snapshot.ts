/**
 * A consistent copy of a log's directory taken while another process may be writing it, for
 * `EventLog.openSnapshot`. LevelDB lets one process at a time open a directory, but its files can
 * be read by anyone, and they change in only three ways:
 * - table files (`*.ldb`, `*.sst`) are written once and never changed, then deleted once a
 *   compaction has replaced them: they are linked into the copy (copied where the copy is on
 *   another file system);
 * - the write-ahead log (`*.log`) only grows, one whole batch at a time, each with its checksum:
 *   a copy of it taken mid-write ends in a cut batch, which LevelDB drops when it opens the copy,
 *   so the copy holds a prefix of the log's group commits, never part of one;
 * - the manifest (named by `CURRENT`) records which table files and write-ahead logs make up the
 *   database, and grows by one record at every change of that set (a flush, a compaction).
 * So a copy is consistent when the manifest named by `CURRENT` has the same name and size after
 * the copy as before it: no table file the copy needs was replaced meanwhile. Otherwise the copy is
 * taken again, keeping the table files it took that the manifest still lists. factstate's head
 * anchor is copied before the directory is listed: it counts only facts that were durable when it
 * was written, which the write-ahead logs listed and copied after it hold.
 *
 * Only the table files the manifest lists are linked, never another one (a compaction's output
 * still being written, say): LevelDB opening the copy numbers its new files from the manifest's
 * next file number and creates them with truncation, which through a link would empty the writer's
 * own file. The manifest is read here for that list (`liveTables`).
 */
import { rmSync } from 'node:fs'
import { copyFile, link, lstat, readdir, readFile, realpath, rm, rmdir, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { FactstateError } from '../errors.js'
import type { EventLog } from './event-log.js'
import { heldInThisProcess } from './writer-lock.js'
import { logHeldOpen } from './writer-presence.js'
import { ioCause, logIo } from './io-reason.js'

/** Files a copy never needs: LevelDB's lock and its own text logs, factstate's id filter (read-only logs never append), files written aside (factstate's, LevelDB's). */
const SKIPPED = /^(?:LOCK|LOG|LOG\.old|FACTSTATE-IDS)$|\.(?:tmp|dbtmp)$/
const TABLE = /^\d+\.(?:ldb|sst)$/
const MANIFEST = /^MANIFEST-\d+$/
/** The head anchor (store/event-log.ts `ANCHOR_FILE`): copied first, before the directory is listed. */
const ANCHOR = 'FACTSTATE-HEAD'
/** Copies taken before giving up on a log whose manifest keeps changing. */
export const SNAPSHOT_ATTEMPTS = 20

/** LevelDB's log format (the manifest is written in it): 32 KiB blocks of records, each with a 7-byte header. */
const BLOCK = 32_768
const HEADER = 7
const FULL = 1
const FIRST = 2
const MIDDLE = 3
const LAST = 4

/** The records of a LevelDB log file, fragments joined. A cut or damaged tail ends the list: the size check above decides about it. */
function logRecords(bytes: Uint8Array): Uint8Array[] {
  const records: Uint8Array[] = []
  let pending: Uint8Array[] | undefined
  let offset = 0
  while (offset + HEADER <= bytes.length) {
    const left = BLOCK - (offset % BLOCK)
    // A block's last few bytes, too few for a header, are padding.
    if (left < HEADER) {
      offset += left
      continue
    }
    const length = bytes[offset + 4]! | (bytes[offset + 5]! << 8)
    const type = bytes[offset + 6]!
    const start = offset + HEADER
    if (type === 0 || start + length > bytes.length || length > left - HEADER) break
    const data = bytes.subarray(start, start + length)
    offset = start + length
    if (type === FULL) records.push(data)
    else if (type === FIRST) pending = [data]
    else if (type === MIDDLE) pending?.push(data)
    else if (type === LAST && pending !== undefined) {
      pending.push(data)
      records.push(Buffer.concat(pending))
      pending = undefined
    } else break
  }
  return records
}

/** Reads a version edit's varints and length-prefixed slices (LevelDB's `version_edit.cc`). */
class EditReader {
  offset = 0
  constructor(readonly bytes: Uint8Array) {}
  get done(): boolean {
    return this.offset >= this.bytes.length
  }
  varint(): number {
    let value = 0
    let scale = 1
    for (let shift = 0; shift < 64; shift += 7) {
      const byte = this.bytes[this.offset]
      if (byte === undefined) throw new RangeError('a varint runs past the record')
      this.offset += 1
      value += (byte & 0x7f) * scale
      if ((byte & 0x80) === 0) return value
      scale *= 128
    }
    throw new RangeError('a varint longer than 64 bits')
  }
  skipSlice(): void {
    const length = this.varint()
    if (this.offset + length > this.bytes.length) throw new RangeError('a slice runs past the record')
    this.offset += length
  }
}

const COMPARATOR = 1
const LOG_NUMBER = 2
const NEXT_FILE = 3
const LAST_SEQUENCE = 4
const COMPACT_POINTER = 5
const DELETED_FILE = 6
const NEW_FILE = 7
const PREV_LOG_NUMBER = 9

/**
 * The numbers of the table files a manifest's version edits leave live (added and not deleted
 * since, level by level: a file moved down a level is deleted at one and added at the next).
 * A tag this reader does not know is `LOG_CORRUPT`: it would not know the live set.
 */
export function liveTables(manifest: Uint8Array): Set<number> {
  const live = new Map<string, number>()
  for (const record of logRecords(manifest)) {
    const edit = new EditReader(record)
    try {
      while (!edit.done) {
        const tag = edit.varint()
        if (tag === COMPARATOR) edit.skipSlice()
        else if (tag === LOG_NUMBER || tag === NEXT_FILE || tag === LAST_SEQUENCE || tag === PREV_LOG_NUMBER) edit.varint()
        else if (tag === COMPACT_POINTER) {
          edit.varint()
          edit.skipSlice()
        } else if (tag === DELETED_FILE) {
          const level = edit.varint()
          live.delete(`${level}:${edit.varint()}`)
        } else if (tag === NEW_FILE) {
          const level = edit.varint()
          const number = edit.varint()
          edit.varint()
          edit.skipSlice()
          edit.skipSlice()
          live.set(`${level}:${number}`, number)
        } else throw new RangeError(`unknown tag ${tag}`)
      }
    } catch (error) {
      throw new FactstateError('LOG_CORRUPT', `the log's manifest cannot be read: ${(error as Error).message}`, { cause: error })
    }
  }
  return new Set(live.values())
}

/** A copy that must be taken again: a file it needed went away, or the manifest changed. */
class Moved extends Error {}

/** The manifest `CURRENT` names, and its size: unchanged across a copy when no flush or compaction ended during it. */
async function manifestMark(source: string): Promise<string> {
  const current = (await readFile(join(source, 'CURRENT'), 'utf8')).trim()
  // LevelDB writes CURRENT aside and renames it: a name that is no manifest is a damaged directory.
  if (!MANIFEST.test(current)) throw new FactstateError('LOG_CORRUPT', `the log's CURRENT file names no manifest (${JSON.stringify(current.slice(0, 40))})`)
  return `${current} ${(await stat(join(source, current))).size}`
}

/** Links a table file into the copy, or copies it where linking is not possible (another file system, a file system without links). */
async function linkOrCopy(from: string, to: string): Promise<void> {
  try {
    await link(from, to)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw error
    await copyFile(from, to)
  }
}

/**
 * A table file the manifest lists is missing. While the manifest is unchanged that is a damaged
 * log (LevelDB deletes a table only after a new manifest record dropped it); otherwise the copy is
 * taken again.
 */
async function missingTable(source: string, before: string, name: string, also = ''): Promise<never> {
  if ((await manifestMark(source)) !== before) throw new Moved()
  throw new FactstateError('LOG_CORRUPT', `the table file ${name} the log's manifest lists is missing${also}`, { details: { file: name } })
}

/** The name the hook is called with once the directory was listed, after the anchor was copied. */
export const LISTED = ''

/** Called after each file a copy took, and once with `LISTED` (tests change the source there, as a busy writer would). */
export type CopiedHook = (name: string, attempt: number) => Promise<void> | void

/**
 * The file `path` is, as far as a retry can tell: device, inode, size, modification time. A table of
 * another log put in the directory's place may have a kept table's name, never all of these.
 */
async function identityOf(path: string): Promise<string | undefined> {
  try {
    const { dev, ino, size, mtimeMs } = await stat(path)
    return `${dev}:${ino}:${size}:${mtimeMs}`
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw error
  }
}

/**
 * One copy of `source` into `target`. `kept` names the table files a previous copy left in `target`
 * (whole: a table never changes), each with the identity of the file it took; those the manifest
 * still lists, and that are still the same file, are not taken again; the others are removed first.
 */
async function copyOnce(source: string, target: string, attempt: number, kept: Map<string, string>, onCopied: CopiedHook | undefined): Promise<void> {
  const before = await manifestMark(source)
  const manifest = before.slice(0, before.indexOf(' '))
  const manifestBytes = await readFile(join(source, manifest))
  let live: Set<number>
  try {
    live = liveTables(manifestBytes)
  } catch (error) {
    // A manifest that changed while it was read is read again; one that did not is damaged.
    if ((await manifestMark(source)) !== before) throw new Moved()
    throw error
  }
  for (const [name, identity] of kept) {
    if (live.has(Number.parseInt(name, 10)) && (await identityOf(join(source, name))) === identity) continue
    await rm(join(target, name), { force: true })
    kept.delete(name)
  }
  // The anchor before the listing: it counts only facts that were durable when it was written, so
  // they are in the write-ahead logs and tables there were then, which the listing finds (a
  // write-ahead log goes away only after a flush changed the manifest). Listed first, it could be
  // refreshed after the listing for facts in a write-ahead log the listing missed.
  let anchored = true
  try {
    await copyFile(join(source, ANCHOR), join(target, ANCHOR))
  } catch (error) {
    // No anchor: an empty log, or one written with 'os' durability.
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    anchored = false
  }
  if (anchored) await onCopied?.(ANCHOR, attempt)
  const names = (await readdir(source, { withFileTypes: true }))
    .filter((entry) => entry.isFile() && !SKIPPED.test(entry.name) && entry.name !== ANCHOR)
    .map((entry) => entry.name)
    // Another manifest is LevelDB's leftover; a table the manifest does not list is obsolete, or
    // being written (see above).
    .filter((name) => (MANIFEST.test(name) ? name === manifest : TABLE.test(name) ? live.has(Number.parseInt(name, 10)) : true))
  await onCopied?.(LISTED, attempt)
  const listed = new Set(names.filter((name) => TABLE.test(name)).map((name) => Number.parseInt(name, 10)))
  for (const number of live) {
    if (listed.has(number)) continue
    // Named as LevelDB names tables it writes; it also reads one under the older name.
    const name = String(number).padStart(6, '0')
    await missingTable(source, before, `${name}.ldb`, ` (nor is it there as ${name}.sst, its older name)`)
  }
  // The write-ahead logs last, so they hold as much as possible.
  const order = (name: string): number => (name.endsWith('.log') ? 1 : 0)
  names.sort((a, b) => order(a) - order(b))
  for (const name of names) {
    if (TABLE.test(name)) {
      if (kept.has(name)) continue
      const identity = await identityOf(join(source, name))
      try {
        if (identity === undefined) throw Object.assign(new Error(`${name} is gone`), { code: 'ENOENT' })
        await linkOrCopy(join(source, name), join(target, name))
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') await missingTable(source, before, name)
        throw error
      }
      // Kept for a retry only as the file it was throughout the copy.
      if ((await identityOf(join(source, name))) === identity) kept.set(name, identity)
      else throw new Moved()
    } else await copyFile(join(source, name), join(target, name))
    await onCopied?.(name, attempt)
  }
  if ((await manifestMark(source)) !== before) throw new Moved()
}

/**
 * Copies the log in `source` into the empty directory `target`, consistently (see above), and
 * returns how many copies it took. A copy taken again keeps the table files it took that are still
 * live, so a long copy of a busy log converges. `LOG_IO` when the directory cannot be read or the
 * copy written, or when its manifest changed during each of `SNAPSHOT_ATTEMPTS` copies;
 * `LOG_CORRUPT` when a table file its manifest lists is missing.
 */
export async function copySnapshot(source: string, target: string, onCopied?: CopiedHook): Promise<number> {
  const kept = new Map<string, string>()
  for (let attempt = 1; attempt <= SNAPSHOT_ATTEMPTS; attempt += 1) {
    try {
      await copyOnce(source, target, attempt, kept, onCopied)
      return attempt
    } catch (error) {
      // A file that went away during the copy (CURRENT or a manifest replaced, an obsolete
      // write-ahead log deleted) means the directory changed: the copy is taken again.
      if (!(error instanceof Moved) && (error as NodeJS.ErrnoException).code !== 'ENOENT') {
        if (error instanceof FactstateError) throw error
        // A full or read-only disk is the copy's (a file call names the file it wrote as `dest`): the
        // place to free or fix is where the copy goes, not the log, which was only read.
        const writing = typeof (error as { dest?: unknown }).dest === 'string' && ['no_space', 'read_only'].includes(ioCause(error).reason)
        throw logIo(`the log at ${source} cannot be copied${writing ? ` to ${target}` : ''}: ${(error as Error).message}`, error, { path: writing ? target : source })
      }
      for (const name of await readdir(target)) if (!kept.has(name)) await rm(join(target, name), { recursive: true, force: true })
      // Give a flush or compaction under way time to end before the next copy.
      await new Promise((resolve) => setTimeout(resolve, Math.min(5 * attempt, 50)))
    }
  }
  throw logIo(`the log at ${source} kept changing while it was copied (${SNAPSHOT_ATTEMPTS} copies): LevelDB flushed or compacted during each; try again`, undefined, { reason: 'changing', path: source })
}

/**
 * What changes in the log's directory whenever its writer appends, flushes or compacts: the names
 * and sizes of its write-ahead logs and manifest, and `CURRENT`. Unchanged, a new snapshot would
 * hold what the last one held: a refresher (the inspector's) takes one only when this changed, and
 * takes it before the copy, so a change during the copy is seen at the next look.
 */
export async function changeMark(source: string): Promise<string> {
  const parts: string[] = []
  for (const name of (await readdir(source)).sort()) {
    if (!name.endsWith('.log') && !MANIFEST.test(name) && name !== 'CURRENT') continue
    try {
      const { size, mtimeMs } = await stat(join(source, name))
      parts.push(`${name}:${size}:${mtimeMs}`)
    } catch {
      parts.push(`${name}:gone`)
    }
  }
  return parts.join(' ')
}

/**
 * The id of the fact at `seq` of `log`, undefined past its end: a refresher checks that a new
 * snapshot still begins with the facts it showed (the same id where the last one shown was), not
 * with another log's put in the directory's place.
 */
export async function idAt(log: EventLog, seq: number): Promise<string | undefined> {
  if (seq > log.head().highWater) return undefined
  for await (const { event } of log.events({ from: seq, to: seq })) return event.id
  return undefined
}

/** What `openSnapshot` names its copy (`mkdtemp`'s prefix). */
export const SNAPSHOT_PREFIX = 'factstate-snapshot-'
/** The copies of this process's snapshots not closed yet (and being made): removed as the process exits. */
const openCopies = new Set<string>()
let exitListener = false

/**
 * Registers the copy a snapshot is made in (`mkdtemp` just made it), to be removed as the process
 * exits without the snapshot's `close()`: `process.exit()`, an uncaught exception, the event loop
 * ending. A process killed by a signal it does not handle (`kill -9`, SIGTERM, Ctrl-C's SIGINT)
 * runs no code as it ends: the writer's next open sweeps those (`sweepSoon`). One listener for
 * every copy; removed synchronously, as an `exit` listener must, each apart: one that cannot be
 * removed (Windows keeps a file open there undeletable) is left to the sweep.
 */
export function keepCopy(copy: string): void {
  // Absolute: the process may change its directory before it exits.
  openCopies.add(resolve(copy))
  if (exitListener) return
  exitListener = true
  process.on('exit', () => {
    for (const held of openCopies) {
      try {
        // The copy is this process's own (see `EventLog.close`): nothing else has it open, and the process reads it no more.
        rmSync(held, { recursive: true, force: true })
      } catch {
        // Left for the writer's next open.
      }
    }
    openCopies.clear()
  })
}

/** The copy is removed (the snapshot closed, or never opened): the exit has nothing to do for it. */
export function forgetCopy(copy: string): void {
  openCopies.delete(resolve(copy))
}

/** What the CLI names the directory it makes a copy in: beside the log (hidden), or in the temporary directory. */
const CLI_PREFIXES = ['.factstate-cli-', 'factstate-cli-']
/**
 * How old a copy's LOCK must be before a sweep may take it: LevelDB creates the LOCK and locks it a
 * moment later, and a copy being opened in that moment must not look abandoned.
 */
export const STALE_AFTER_MS = 60_000

/** The entries of `directory` whose names begin with one of `prefixes`, each a real directory (never a link); none where it cannot be read. */
async function directoriesIn(directory: string, prefixes: readonly string[]): Promise<string[]> {
  let entries
  try {
    entries = await readdir(directory, { withFileTypes: true })
  } catch {
    return []
  }
  return entries.filter((entry) => entry.isDirectory() && prefixes.some((prefix) => entry.name.startsWith(prefix))).map((entry) => join(directory, entry.name))
}

/**
 * Whether the copy in `directory` was opened (it has a LOCK older than `STALE_AFTER_MS`) by a
 * process that no longer holds it. Told by taking LevelDB's lock: it is refused while any process
 * holds it (this one included, in any container sharing the files), and the kernel releases it when
 * its holder dies, however it died. A copy that never got as far as its open (a process killed
 * during the copy) has no LOCK, and is left alone: it may be a copy still being made.
 */
async function abandoned(directory: string, now: number): Promise<boolean> {
  try {
    const lock = await lstat(join(directory, 'LOCK'))
    if (!lock.isFile() || now - lock.mtimeMs < STALE_AFTER_MS) return false
  } catch {
    return false
  }
  // First what /proc/locks lists (it reads, takes no lock): a copy some process of this pid namespace
  // holds (this one included, any thread or copy of this module) is left, and so is every copy where
  // that cannot be told (no /proc/locks): the LevelDB open below must never be tried on a copy this
  // process holds, since its refusal closes the LOCK file, and closing any descriptor of it drops
  // every POSIX lock this process has on it.
  if ((await logHeldOpen(directory)) !== false) return false
  try {
    if (heldInThisProcess(await realpath(directory))) return false
  } catch {
    return false
  }
  // An old LOCK and no CURRENT: no copy can be opened from it (one being made gets its LOCK only from
  // its open, after CURRENT was copied). What a killed open, or a sweep's refused open of a copy
  // another sweep was removing, leaves.
  try {
    await lstat(join(directory, 'CURRENT'))
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT'
  }
  // Then LevelDB's lock itself, which a holder in another pid namespace (another container sharing
  // the files) has too, and which the kernel frees when its holder dies, however it died.
  const db = new ClassicLevel(directory, { createIfMissing: false })
  try {
    await db.open()
  } catch {
    return false
  }
  await db.close().catch(() => undefined)
  return true
}

/** When each directory was last swept (by this process): a sweep reads whole directories, so it is done at most every `SWEEP_EVERY_MS`. */
const lastSwept = new Map<string, number>()
const SWEEP_EVERY_MS = 10 * 60_000

/**
 * Sweeps (see `sweepAbandonedSnapshots`) in the background, when this process has not swept the
 * temporary directory or the log's parent in the last ten minutes: the writer's open starts it and
 * does not wait for it (a temporary directory of 300,000 files took a second to read), and nothing
 * it meets can fail the open.
 */
export function sweepSoon(logPath: string, now = Date.now()): Promise<string[]> {
  const due = (directory: string) => {
    const last = lastSwept.get(directory)
    if (last !== undefined && now - last < SWEEP_EVERY_MS) return false
    lastSwept.set(directory, now)
    return true
  }
  const temporary = due(tmpdir())
  const parent = due(dirname(logPath))
  if (!temporary && !parent) return Promise.resolve([])
  return sweepAbandonedSnapshots(logPath, now, { temporary, parent }).catch(() => [])
}

/** Forgets when directories were swept: for tests. */
export function forgetSweeps(): void {
  lastSwept.clear()
}

/**
 * Removes the snapshot copies that processes killed before their `close()` left behind (`kill -9`,
 * a power loss): `factstate-snapshot-*` directories in the system's temporary directory, and in the
 * CLI's own directories there and beside the log at `logPath` (`.factstate-cli-*`, removed too once
 * empty: emptied by the sweep, or found empty and unchanged for over a minute, see `emptyLongSince`). Only copies no process holds open are removed (see `abandoned`); a copy elsewhere (an
 * `openSnapshot` `directory` of the application's choosing) is not looked for. Never fails: a copy
 * that cannot be removed (another user's, say) is left. Answers the copies it removed.
 */
export async function sweepAbandonedSnapshots(logPath: string, now = Date.now(), where = { temporary: true, parent: true }): Promise<string[]> {
  const removed: string[] = []
  const sweep = async (directory: string): Promise<boolean> => {
    if (!(await abandoned(directory, now))) return false
    try {
      await rm(directory, { recursive: true, force: true })
    } catch {
      return false
    }
    removed.push(directory)
    return true
  }
  const temporary = tmpdir()
  if (where.temporary) for (const copy of await directoriesIn(temporary, [SNAPSHOT_PREFIX])) await sweep(copy)
  const wrappers = [
    ...(where.temporary ? await directoriesIn(temporary, CLI_PREFIXES) : []),
    ...(where.parent ? await directoriesIn(dirname(logPath), CLI_PREFIXES) : []),
  ]
  for (const wrapper of new Set(wrappers)) {
    let swept = false
    for (const copy of await directoriesIn(wrapper, [SNAPSHOT_PREFIX])) swept = (await sweep(copy)) || swept
    // `rmdir`, never a recursive removal: a directory a command made its copy in meanwhile is left.
    if (swept || (await emptyLongSince(wrapper, now))) await rmdir(wrapper).catch(() => undefined)
  }
  return removed
}

/**
 * Whether the CLI's directory `wrapper` is empty and has not changed for `STALE_AFTER_MS`: a
 * command's that ended without removing it (killed between its copy's removal and its own, or
 * before it made its copy there, or by a version that did not remove it as it exited). A live
 * command's is empty only for a moment: it makes its copy there as soon as it made the directory,
 * and removes the directory as soon as its copy is removed; a command that goes on reading (`log
 * --follow`, `inspect`) keeps a copy open there throughout. A directory's modification time changes
 * whenever an entry is made or removed in it, so one empty for over a minute is no live command's
 * (but one stopped, SIGSTOP, in that moment: its copy then fails to be made there, and is made in
 * the temporary directory instead).
 */
async function emptyLongSince(wrapper: string, now: number): Promise<boolean> {
  try {
    const { mtimeMs } = await lstat(wrapper)
    if (now - mtimeMs < STALE_AFTER_MS) return false
    return (await readdir(wrapper)).length === 0
  } catch {
    return false
  }
}
