/**
 * What every CLI command shares: its output channels, exit codes, and how a FactstateError is
 * shown (its code and a one-line remedy).
 */
import { rmSync } from 'node:fs'
import { mkdtemp, realpath, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { type ParseArgsConfig, parseArgs } from 'node:util'
import { ID_PATTERN } from '../facts/schema.js'
import { escapeControls } from '../store/fact-summary.js'
import { FactstateError, type FactstateErrorCode } from '../errors.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { logHeldOpen } from '../store/writer-presence.js'
import { logIo, shownBytes } from '../store/io-reason.js'
import { meantName } from '../options.js'

/** Where a command writes. Tests pass collectors; the CLI passes the process streams. */
export interface CommandIo {
  stdout: (line: string) => void
  stderr: (line: string) => void
  /**
   * Whether the reader of stdout went away (`factstate log … | head -1`; or of stderr, where that
   * is the same pipe: `2>&1 | head -1`): a command that prints many lines stops there, closes what
   * it opened and exits 0. Absent in tests.
   */
  stdoutClosed?: () => boolean
}

/** Exit codes of the `factstate` CLI (documented in the README). */
export const EXIT = {
  ok: 0,
  /** The check failed: `verify` found corruption, or a demo step did not behave. */
  failed: 1,
  usage: 2,
  /** Another process holds the log. */
  busy: 3,
  /** Any other refusal; the code is printed. */
  refused: 4,
} as const

const remedies: Partial<Record<FactstateErrorCode, string>> = {
  LOG_WRITER_BUSY: 'another process has this log open, and this command writes to it; stop that process first (log, verify and inspect read a snapshot instead)',
  LOG_CORRUPT: 'the stored log is damaged (its facts, or the index record the error names); restore the directory from a backup — factstate wrote nothing, though LevelDB may have rewritten its own files when it opened them (not when the error names CURRENT: that is found before LevelDB opens anything; copy a damaged directory before opening it, to keep it as evidence)',
  LOG_IO: 'LevelDB could not read or write the directory; check permissions and free disk space (if LevelDB names a missing or damaged file of its own, the directory is damaged: restore it from a backup)',
  LOG_INVALID_ARGUMENT: 'check the command line: the log directory and filters',
  RUN_BUSY: 'wait for the session\u2019s active run (or its paused turn\u2019s successor) to finish',
  RUN_RECONCILIATION_REQUIRED: 'check the unknown tool outcomes, then start the message with allowPriorUnknown: true (in a log put back from a backup, check what its sessions did since, then allowRestored: true)',
  LOG_FORMAT_UNSUPPORTED: 'a newer factstate wrote this log; run this command with that version or a newer one',
  LOG_CLOSED: 'the log was closed while the command ran; run it again',
  LOG_PREFIX_TOO_LARGE: 'the log is larger than the limit given; raise it, or read the log with `factstate log`',
  INSPECTOR_INVALID_OPTIONS: 'choose another --port (or leave it out for a free one)',
}

/**
 * The remedy of a `LOG_IO` of the log itself, by its `details.reason`: what to look at differs (the
 * disk, the owner, the mount, the descriptor limit), and a full disk's says how much to free.
 */
function logIoRemedy(details: { reason?: unknown; path?: unknown; spaceNeeded?: unknown } | undefined): string | undefined {
  const at = typeof details?.path === 'string' ? ` (${details.path})` : ''
  switch (details?.reason) {
    case 'no_space': {
      const needed = typeof details.spaceNeeded === 'number' ? `at least ${shownBytes(details.spaceNeeded)}, the size of its write-ahead log (the directory's *.log files)` : 'at least the size of its write-ahead log (the *.log files in the log directory)'
      return `the disk is full${at}: free space on the log's file system, ${needed}, since the next open writes that log out as a table, then run the command again (nothing acknowledged is lost, and an open that fails for want of space changes nothing)`
    }
    case 'permission':
      return `this process may not read or write there${at}: run the command as the user that owns the log directory, or give that user its files back (chown -R); a log's files must all be writable by the one user that opens it`
    case 'read_only':
      return `the file system is mounted read-only${at}: remount it read-write, or copy the log to a writable disk and open it there; log, verify, pending and inspect still read it (through a snapshot made elsewhere)`
    case 'too_many_files':
      return 'the process reached its limit of open files: raise it (ulimit -n, LimitNOFILE in a systemd unit), or keep fewer logs open at once (each holds about five files)'
    case 'directory_gone':
      return `the log's directory, or a file in it, is no longer there${at}: it was removed or moved while the log was in use; find it (a moved directory holds every fact written before), put it back, and open it again`
    case 'changing':
      return 'the log kept changing while it was copied: run the command again'
    default:
      return undefined
  }
}

/** Remedies where the command read a snapshot of a log another process has open (or failed to take one). */
const snapshotRemedies: Partial<Record<FactstateErrorCode, string>> = {
  LOG_IO: 'no snapshot of the log could be taken: it is made in a directory beside the log (or, where none can be made there, in the temporary directory, TMPDIR; or where FACTSTATE_SNAPSHOT_DIR says), which must be writable, with room for a copy of the log (its table files are linked on the log\u2019s file system, copied on another); if the log kept changing while it was copied, run the command again',
  LOG_CORRUPT: 'the log, as read through a snapshot of it, is damaged (its own files were not touched): restore the directory from a backup; if another process has it open, confirm first with `factstate verify` once that process has closed it',
}

/**
 * Prints `error` as `CODE: message` plus a remedy line; returns the exit code for it. `snapshot`:
 * the command read a snapshot of the log (or was taking one), which some remedies differ for; `own`:
 * the command's own remedies, before those (`backup`'s destination is not "the log directory and filters").
 */
export function reportError(error: unknown, io: CommandIo, snapshot = false, own: Partial<Record<FactstateErrorCode, string>> = {}): number {
  if (error instanceof FactstateError) {
    // `error: CODE: message`, as every other error line begins (`error:`), for a script that looks for it.
    // A message may quote fact text (a refused fact's): escaped for the terminal.
    io.stderr(`error: ${escapeControls(error.message)}`)
    const byReason = error.code === 'LOG_IO' && !snapshot ? logIoRemedy(error.details) : undefined
    const remedy = own[error.code] ?? (snapshot ? snapshotRemedies[error.code] : undefined) ?? byReason ?? remedies[error.code]
    if (remedy) io.stderr(`remedy: ${remedy}`)
    return error.code === 'LOG_WRITER_BUSY' ? EXIT.busy : error.code === 'LOG_CORRUPT' ? EXIT.failed : EXIT.refused
  }
  io.stderr(`error: ${escapeControls((error as Error)?.message ?? String(error))}`)
  return EXIT.refused
}

/**
 * A usage error: prints it with the command's synopsis (its help up to the first blank line) and
 * where the rest is, so that the error is not lost above a page of help; returns the usage exit code.
 */
export function usage(io: CommandIo, message: string, help: string): number {
  io.stderr(`error: ${escapeControls(message)}`)
  return synopsis(io, help)
}

/** What a usage error prints after its `error:` line (and remedy, if any): the synopsis and where the options are; the usage exit code. */
export function synopsis(io: CommandIo, help: string): number {
  const synopsis = help.split(/\n\s*\n/, 1)[0] ?? help
  io.stderr(synopsis)
  const command = /^usage: factstate (\S+)/.exec(help)?.[1]
  if (synopsis !== help && command !== undefined) io.stderr(`run 'factstate ${command} --help' for the options`)
  return EXIT.usage
}

/** What `parseArgs` refused, in the CLI's words (its own message for an unknown option runs on about `--`). */
function parseProblem(error: unknown, options: readonly string[]): string {
  const { code, message } = error as { code?: unknown; message?: unknown }
  const text = typeof message === 'string' ? message : String(error)
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const option = /^Unknown option '([^']*)'/.exec(text)?.[1]
    // A misspelt long option (`--sesion`) is told the one it resembles, as the library's options are.
    const meant = option?.startsWith('--') ? meantName(option.slice(2), options) : undefined
    if (option !== undefined) return `unknown option ${option}${meant === undefined ? '' : `: did you mean --${meant}?`}`
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    // Node's words span three lines and suggest `--last=-XYZ`, which the option then refuses anyway.
    const ambiguous = /^Option '([^' ]+)[^']*' argument is ambiguous/.exec(text)?.[1]
    if (ambiguous !== undefined) return `${ambiguous} needs a value, and one that begins with '-' is taken for an option`
    const missing = /^Option '([^' ]+)[^']*' argument missing/.exec(text)?.[1]
    if (missing !== undefined) return `${missing} needs a value`
  }
  return text.split('\n', 1)[0] ?? text
}

/**
 * Parses a command line (`config` includes the command's `--help`): the parsed values, or the exit
 * code when that is all there is to do (a usage error, printed with the help; `--help`, printed).
 */
export function parseCommand<T extends ParseArgsConfig>(io: CommandIo, help: string, config: T): ReturnType<typeof parseArgs<T>> | number {
  let parsed: ReturnType<typeof parseArgs<T>>
  try {
    parsed = parseArgs(config)
  } catch (error) {
    return usage(io, parseProblem(error, Object.keys(config.options ?? {})), help)
  }
  if ((parsed.values as { help?: boolean }).help) {
    io.stdout(help)
    return EXIT.ok
  }
  return parsed
}

/** Whether `path` holds a LevelDB directory (a CURRENT file): opening anything else would create a log there. */
export async function isLogDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory() && (await stat(join(path, 'CURRENT'))).isFile()
  } catch {
    return false
  }
}

/** Opens the log in `directory`; undefined when it holds another program's LevelDB database (a usage error, not a refusal). */
export async function openLog(directory: string): Promise<EventLog | undefined> {
  try {
    return await EventLog.open(directory)
  } catch (error) {
    if (error instanceof FactstateError && error.code === 'LOG_INVALID_ARGUMENT' && (error.details as { notALog?: boolean } | undefined)?.notALog) return undefined
    throw error
  }
}

/**
 * The directories this process made for snapshot copies (each holds one), by the snapshot once it
 * is open; removed when its log closes (`closeLog`), or by a signal that ends the process first.
 */
const copyDirectories = new Set<string>()
const copyDirectoryOf = new WeakMap<EventLog, string>()
/** Errors thrown while a snapshot was taken, for their remedy. */
const snapshotErrors = new WeakSet<object>()

/**
 * Ends the process on SIGINT, SIGTERM and SIGHUP as the signal would (the signal raised again), but
 * first removes the snapshot copies it made: otherwise Ctrl-C during a long `verify`, or while
 * `inspect` indexes, would leave a copy of the log in the temporary directory. A command that waits
 * for the signal itself (`inspect`, once it serves) stops by itself and closes its log: the signal
 * is left to it. Installed by the CLI's entry point, not by commands run in a test's process.
 */
export function removeCopiesOnSignals(): void {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, function onSignal() {
      if (process.listeners(signal).some((listener) => listener !== onSignal)) return
      // A snapshot's own LevelDB may still write a file into one meanwhile: removal is retried.
      removeCopyDirectoriesNow(3)
      // Ended by the signal itself, not by an exit code: a shell running this in a loop or a script
      // stops there too, as it does for any program Ctrl-C ends.
      process.off(signal, onSignal)
      process.kill(process.pid, signal)
    })
  }
}

/**
 * Removes the snapshot directories this process made, as it exits without its command having
 * closed the log that reads them (an uncaught exception, `process.exit()`): the snapshot's own copy
 * inside is removed then too (`keepCopy`), and so is the directory holding it. Synchronous, as an
 * `exit` listener must be; one that cannot be removed is left to the writer's next open, which
 * sweeps it once it is empty and over a minute old. Installed by the CLI's entry point.
 */
export function removeCopiesOnExit(): void {
  process.on('exit', () => {
    removeCopyDirectoriesNow(0)
    copyDirectories.clear()
  })
}

/**
 * Removes the snapshot directories this process made, synchronously (as a signal's or the exit's
 * listener must), each tried `maxRetries` more times; one that cannot be removed is left behind, for
 * the writer's next open to sweep: the process ends all the same.
 */
function removeCopyDirectoriesNow(maxRetries: number): void {
  for (const path of copyDirectories) {
    try {
      rmSync(path, { recursive: true, force: true, maxRetries })
    } catch {
      // Left for the sweep.
    }
  }
}

/** The signal a command asked the process to end by, once it has returned (`endBySignal`). */
let endingSignal: NodeJS.Signals | undefined

/**
 * Asks the CLI to end the process by `signal` once the command has returned (its exit code is then
 * the signal's, and a shell loop running it stops as for any program the signal ends). For a
 * command that caught the signal to finish first (`demo` waits for the process it runs). Run
 * in-process (tests), nothing is raised: the command's code is all.
 */
export function endBySignal(signal: NodeJS.Signals): void {
  endingSignal = signal
}

/** The signal asked for by `endBySignal`, if any: read by the CLI's entry point. */
export function signalToEndBy(): NodeJS.Signals | undefined {
  return endingSignal
}

/**
 * Where the CLI may make a snapshot's copy of the log at `directory`, in order: a directory of its
 * own beside the log, on its file system, where the snapshot links the log's table files instead of
 * copying them (in a temporary directory on another file system, a tmpfs say, a copy of a big log
 * takes its size in memory); else the system's temporary directory. Only `FACTSTATE_SNAPSHOT_DIR`
 * when that is set.
 */
function copyPlaces(directory: string): (() => Promise<string>)[] {
  // An operator's choice (another disk, say) is taken as it is: a failure there is reported, not worked around.
  const chosen = process.env.FACTSTATE_SNAPSHOT_DIR
  if (chosen !== undefined && chosen !== '') return [() => mkdtemp(join(chosen, 'factstate-cli-'))]
  return [async () => mkdtemp(join(dirname(await realpath(directory)), '.factstate-cli-')), () => mkdtemp(join(tmpdir(), 'factstate-cli-'))]
}

/**
 * Opens the log in `directory` to read it, as a snapshot (`EventLog.openSnapshot`, in a directory
 * of this process's own beside the log, removed with it), so that the application can open its log
 * while the command reads, however long that takes (the log itself, opened, would be locked
 * against it: a \`verify\` run by cron would keep the service from starting). A copy that cannot be
 * made beside the log (a read-only mount, a full disk) is made in the temporary directory. When
 * another process has the log open, `io.stderr` is told that facts appended after the snapshot are
 * not read. Undefined as `openLog`. Close it with `closeLog`. `options.snapshot` says nothing when
 * another process has the log open (a command that follows the log takes more snapshots as it grows).
 */
export async function openLogToRead(directory: string, io: CommandIo, options: { snapshot?: boolean } = {}): Promise<EventLog | undefined> {
  let snapshot: EventLog | undefined
  let copies: string | undefined
  const places = copyPlaces(directory)
  for (const [index, place] of places.entries()) {
    copies = undefined
    try {
      copies = await place()
      copyDirectories.add(copies)
      snapshot = await EventLog.openSnapshot(directory, { directory: copies })
      break
    } catch (error) {
      if (copies !== undefined) await removeCopies(copies)
      if (error instanceof FactstateError && error.code === 'LOG_INVALID_ARGUMENT' && (error.details as { notALog?: boolean } | undefined)?.notALog) return undefined
      // Where no copy could be made (or written), the next place is tried; a damaged log is damaged in any.
      const cannotCopy = !(error instanceof FactstateError) || error.code === 'LOG_IO'
      if (cannotCopy && index < places.length - 1) continue
      const where = process.env.FACTSTATE_SNAPSHOT_DIR ? `in ${process.env.FACTSTATE_SNAPSHOT_DIR} (FACTSTATE_SNAPSHOT_DIR)` : `beside it or in ${tmpdir()}`
      const failure = error instanceof FactstateError ? error : logIo(`no snapshot of the log can be made ${where}: ${(error as Error).message}`, error)
      snapshotErrors.add(failure)
      throw failure
    }
  }
  if (snapshot === undefined || copies === undefined) throw logIo('no snapshot of the log could be made', undefined)
  copyDirectoryOf.set(snapshot, copies)
  // What is left is shown, as a snapshot reads it, but not as a whole log: verify refuses it.
  const damage = logInternals(snapshot).damage()
  if (damage !== undefined) io.stderr(`warning: the log is damaged, and what follows may lack facts it held: ${damage.message}`)
  if (!options.snapshot) {
    // Where it cannot be told (no /proc/locks: macOS, Windows), the note says what holds either way.
    const held = await logHeldOpen(directory)
    if (held === true) io.stderr(`note: another process has this log open: reading a snapshot of it taken now (${snapshot.head().highWater} facts); facts appended after it are not read`)
    else if (held === undefined) io.stderr(`note: reading a snapshot of the log taken now (${snapshot.head().highWater} facts); facts a process that has it open appends after it are not read`)
  }
  return snapshot
}

async function removeCopies(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true })
  copyDirectories.delete(path)
}

/** The directory of this process's own that a snapshot from `openLogToRead` is in: where more snapshots of that log go (the inspector's refreshes). */
export function snapshotDirectoryOf(log: EventLog): string | undefined {
  return copyDirectoryOf.get(log)
}

/**
 * Resolves when SIGINT or SIGTERM arrives (with that signal) or `signal` aborts (with undefined),
 * whichever is first; `dispose` stops listening. While it listens, the signals are the command's:
 * `removeCopiesOnSignals` leaves them to it, and the command closes what it opened before it
 * returns, then ends by the signal (`endBySignal`), as `tail -f` does, so a shell loop running it stops too.
 */
export function untilStopped(signal: AbortSignal | undefined): { stopped: Promise<NodeJS.Signals | undefined>; dispose: () => void } {
  let stop = (_by?: NodeJS.Signals): void => undefined
  const stopped = new Promise<NodeJS.Signals | undefined>((resolve) => {
    stop = (by) => {
      dispose()
      resolve(by)
    }
  })
  const onInterrupt = () => stop('SIGINT')
  const onTerminate = () => stop('SIGTERM')
  const onAbort = () => stop()
  const dispose = () => {
    process.off('SIGINT', onInterrupt)
    process.off('SIGTERM', onTerminate)
    signal?.removeEventListener('abort', onAbort)
  }
  process.on('SIGINT', onInterrupt)
  process.on('SIGTERM', onTerminate)
  if (signal?.aborted) stop()
  else signal?.addEventListener('abort', onAbort)
  return { stopped, dispose }
}

/** Closes a log `openLogToRead` opened, and removes its snapshot's directory. */
export async function closeLog(log: EventLog | undefined): Promise<void> {
  if (log === undefined) return
  try {
    await log.close()
  } finally {
    const copies = copyDirectoryOf.get(log)
    if (copies !== undefined) await removeCopies(copies)
  }
}

/** The flag of `log`, `pending` and `script` that accepts what they read of a damaged log (exit 0 then). */
export const ALLOW_DAMAGED = 'allow-damaged'

/**
 * The exit code of a command that printed what it read of `log` (from `openLogToRead`): `EXIT.ok`,
 * but for a snapshot of a damaged log, whose warning came first, `EXIT.failed`, as `verify`'s for
 * it, after an `error:` line with its remedy: a script would otherwise take what was printed for the
 * whole log. `allowed`: the user accepted that (`--allow-damaged`).
 */
export function exitAfterReading(log: EventLog, io: CommandIo, allowed: boolean): number {
  const damage = logInternals(log).damage()
  if (damage === undefined || allowed) return EXIT.ok
  const error = new FactstateError('LOG_CORRUPT', `the log is damaged, and what was printed may lack facts it held (the warning above says what was lost; --${ALLOW_DAMAGED} accepts that, with exit 0)`)
  return reportReadError(error, io, log)
}

/** `reportError` for a command that read `log` with `openLogToRead` (or failed to): with the remedies for a snapshot where it was one. */
export function reportReadError(error: unknown, io: CommandIo, log: EventLog | undefined): number {
  return reportError(error, io, log?.snapshotOf !== undefined || (typeof error === 'object' && error !== null && snapshotErrors.has(error)))
}

/**
 * The shape of a command that takes one log directory, `--help` and `--json`: parses, opens the log
 * (`read`: a snapshot of it, see `openLogToRead`), runs `action`, reports a refusal with its
 * code and remedy, and always closes the log.
 */
export async function onLogDirectory(
  args: string[],
  io: CommandIo,
  help: string,
  read: boolean,
  action: (log: EventLog, options: { json: boolean; flags: ReadonlySet<string>; ids: ReadonlyMap<string, string> }) => Promise<void>,
  /** Boolean flags of the command's own besides `--json` (`unanswered` for `--unanswered`): those given reach `action` in `flags`. */
  flags: readonly string[] = [],
  /**
   * Options of the command's own that take an id (`session` for `--session ID`): one without a value,
   * or with a value that is no id, is a usage error before the log is opened; those given reach `action` in `ids`.
   */
  ids: readonly string[] = [],
  /** Called with what refused the command (the open or `action`) before it is reported, with whether `--json` was given. */
  refused?: (error: unknown, json: boolean) => void,
): Promise<number> {
  const parsed = parseCommand(io, help, {
    args,
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h', default: false },
      json: { type: 'boolean', default: false },
      ...Object.fromEntries(flags.map((flag) => [flag, { type: 'boolean' as const, default: false }])),
      ...Object.fromEntries(ids.map((name) => [name, { type: 'string' as const }])),
    },
  })
  if (typeof parsed === 'number') return parsed
  if (parsed.positionals.length !== 1) return usage(io, 'expected exactly one log directory', help)
  const values = parsed.values as Record<string, unknown>
  const given = new Map<string, string>()
  for (const name of ids) {
    const value = values[name]
    if (typeof value !== 'string') continue
    if (!ID_PATTERN.test(value)) return usage(io, `--${name} takes an id (1–128 characters from [A-Za-z0-9._:-]), not ${value}`, help)
    given.set(name, value)
  }
  const directory = parsed.positionals[0] as string
  // A mistyped path must not become a new, empty (and so valid) log.
  if (!(await isLogDirectory(directory))) return usage(io, `no factstate log at ${directory}`, help)
  let log: EventLog | undefined
  try {
    log = read ? await openLogToRead(directory, io) : await openLog(directory)
    if (log === undefined) return usage(io, `no factstate log at ${directory} (it holds another program's LevelDB database)`, help)
    const chosen = new Set(flags.filter((flag) => values[flag] === true))
    await action(log, { json: values.json === true, flags: chosen, ids: given })
    return read ? exitAfterReading(log, io, chosen.has(ALLOW_DAMAGED)) : EXIT.ok
  } catch (error) {
    refused?.(error, values.json === true)
    return read ? reportReadError(error, io, log) : reportError(error, io)
  } finally {
    await closeLog(log)
  }
}
