import { dirname, resolve } from 'node:path'
import { EventLog } from '../../store/event-log.js'
import { isFactstateError } from '../../errors.js'
import { type CommandIo, EXIT, isLogDirectory, parseCommand, reportError, synopsis, usage } from '../io.js'

export const backupHelp = `usage: factstate backup <log-directory> <backup-directory> [--json]

Copies the log into <backup-directory> (a new directory: it must not exist, its parent must) as
it stands now, also while the application has it open: every fact durable by then, each group
commit whole or not at all. The copy is then verified in full, as \`factstate verify\` does, closed
cleanly and synced to the disk. Prints "backed up N events to DIR, digest sha256:…" and exits 0.
The copy is a log like any other: to restore it, stop the application and put it in the log's
place (read the README's "Backups" first: a restored log has forgotten what ran after the copy).
Table files are linked where the copy is on the log's file system, copied elsewhere: for a copy
that survives the disk, give a directory on another one.
--json prints {"events":N,"digest":"sha256:…","takenAt":MS,"destination":DIR} instead (takenAt: when
the copy was taken, in milliseconds since the epoch, as the backup records it: log.restoredFrom()).
Exit codes: 0 backed up, 1 the log is damaged (nothing kept), 2 usage (a backup directory that
exists, has no parent directory or lies inside the log's), 4 refused (nothing kept).`

/** Where the backup's remedies differ from the other commands': its destination, and a log it read through a copy. */
const backupRemedies = {
  LOG_INVALID_ARGUMENT: 'check the command line: the log directory, then a backup directory that does not exist yet, in one that does, outside the log\u2019s own directory',
  LOG_CORRUPT: 'the log is damaged and no backup was kept (its own files were not touched: it was read through a copy); restore the directory from an earlier backup, and keep the damaged one as evidence',
} as const

/** A backup's destination that cannot be made in `parent`: what to fix there, by the reason. */
function destinationRemedy(parent: string, reason: string | undefined): string {
  const why =
    reason === 'permission' ? 'this user may not write there' : reason === 'read_only' ? 'its file system is mounted read-only' : reason === 'no_space' ? 'its disk is full' : 'it cannot be written'
  return `the backup directory cannot be made in ${parent} (${why}): give a backup directory in a place this user can write, or fix that one; the log itself was not touched`
}

/**
 * `factstate backup <dir> <dest>`.
 *
 * @example
 * ```sh
 * npx factstate backup .factstate/app /backups/app-$(date +%F)
 * ```
 */
export async function backupCommand(args: string[], io: CommandIo): Promise<number> {
  const parsed = parseCommand(io, backupHelp, {
    args,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h', default: false }, json: { type: 'boolean', default: false } },
  })
  if (typeof parsed === 'number') return parsed
  if (parsed.positionals.length !== 2) return usage(io, 'expected the log directory and the backup directory', backupHelp)
  const [directory, destination] = parsed.positionals as [string, string]
  // An unset variable in a script ("$BACKUP_DIR"): not the log's location the library would name.
  if (destination.trim() === '') return usage(io, 'the backup directory must be a non-empty path (not only spaces)', backupHelp)
  // A mistyped path must not be taken for a log.
  if (!(await isLogDirectory(directory))) return usage(io, `no factstate log at ${directory}`, backupHelp)
  try {
    const { events, digest, takenAt } = await EventLog.backup(directory, destination)
    io.stdout(parsed.values.json ? JSON.stringify({ events, digest, takenAt, destination }) : `backed up ${events} events to ${destination}, digest ${digest}`)
    return EXIT.ok
  } catch (error) {
    // A destination that cannot be made is the destination's fault, not the log's or LevelDB's.
    const parent = dirname(resolve(destination))
    const atDestination = isFactstateError(error, 'LOG_IO') && error.details?.path === parent
    const code = reportError(error, io, false, atDestination ? { ...backupRemedies, LOG_IO: destinationRemedy(parent, error.details?.reason) } : backupRemedies)
    // A destination that can never take a backup (there already, no parent, inside the log) is the
    // command line's fault: printed as every usage error is, with the synopsis.
    return isFactstateError(error, 'LOG_INVALID_ARGUMENT') && error.details?.destination !== undefined ? synopsis(io, backupHelp) : code
  }
}
