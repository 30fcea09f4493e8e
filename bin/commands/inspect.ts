import { randomBytes } from 'node:crypto'
import { TOKEN_PATTERN, serveInspector } from '../../inspector/server.js'
import { EventLog } from '../../store/event-log.js'
import { type CommandIo, EXIT, closeLog, endBySignal, isLogDirectory, openLogToRead, parseCommand, reportReadError, snapshotDirectoryOf, untilStopped, usage } from '../io.js'

/** The text `factstate inspect --help` prints. */
export const inspectHelp = `usage: factstate inspect <log-directory> [--port N] [--refresh S] [--token]

Serves the statechart visualizer for a log, on 127.0.0.1 only, and prints its URL. Read-only:
nothing is appended, not even recovery. Stops on Ctrl-C (SIGINT) or SIGTERM, and ends by that signal.

The log is shown as a snapshot, so that the application can open it (LevelDB allows one process
per directory) or keep it open while you look: a copy holding every fact durable when it was taken,
taken again when the log's files change (looked at every 2 s; --refresh 0 keeps the first copy).
To see facts the moment they land, serve the inspector from inside the application (serveInspector
from 'factstate/inspector').

With --token (or FACTSTATE_INSPECTOR_TOKEN set), every request must carry a token, so that other
users and programs of the machine cannot read the log through the inspector: the printed link holds
it (a random one, or FACTSTATE_INSPECTOR_TOKEN's), and the page keeps it for the tab.

options:
  -p, --port N      listen on port N (default: a free port)
  -r, --refresh S   for a snapshot: look for changes every S seconds (0.1 to 3600; 0: never; default 2)
  -t, --token       require a token (FACTSTATE_INSPECTOR_TOKEN's, else a random one) and print the link with it
  -h, --help        show this help`

/** From this many facts on, `inspect` says it is indexing (it serves once the whole log is indexed). */
const LARGE_LOG = 100_000
/** How often `inspect` looks for changes of a log it shows a snapshot of. */
const DEFAULT_REFRESH_MS = 2_000

/**
 * `factstate inspect <dir> [--port N] [--refresh S]`: serves the inspector on a log until SIGINT
 * or SIGTERM (or `options.signal` aborts), then closes the server and the log and returns 0, asking
 * to end by the signal (`endBySignal`) when one stopped it.
 *
 * @example
 * ```sh
 * npx factstate inspect .factstate/app --port 4319
 * # factstate inspector: http://127.0.0.1:4319/
 * ```
 */
export async function inspectCommand(args: string[], io: CommandIo, options: { signal?: AbortSignal } = {}): Promise<number> {
  const parsed = parseCommand(io, inspectHelp, {
    args,
    allowPositionals: true,
    options: { port: { type: 'string', short: 'p' }, refresh: { type: 'string', short: 'r' }, token: { type: 'boolean', short: 't', default: false }, help: { type: 'boolean', short: 'h', default: false } },
  })
  if (typeof parsed === 'number') return parsed
  if (parsed.positionals.length !== 1) return usage(io, 'expected exactly one log directory', inspectHelp)
  const directory = parsed.positionals[0] as string
  let port = 0
  if (parsed.values.port !== undefined) {
    port = /^\d{1,5}$/.test(parsed.values.port) ? Number(parsed.values.port) : Number.NaN
    if (!(port >= 0 && port <= 65_535)) return usage(io, `--port must be a number from 0 to 65535, not ${parsed.values.port}`, inspectHelp)
  }
  let refreshMs = DEFAULT_REFRESH_MS
  if (parsed.values.refresh !== undefined) {
    const seconds = /^\d+(?:\.\d+)?$/.test(parsed.values.refresh) ? Number(parsed.values.refresh) : Number.NaN
    refreshMs = Math.round(seconds * 1000)
    if (!(refreshMs === 0 || (refreshMs >= 100 && refreshMs <= 3_600_000))) {
      return usage(io, `--refresh must be 0 or a number of seconds from 0.1 to 3600, not ${parsed.values.refresh}`, inspectHelp)
    }
  }
  // From the environment, not an argument: a command line is readable by every user of the machine.
  const fixed = process.env.FACTSTATE_INSPECTOR_TOKEN
  if (fixed !== undefined && fixed !== '' && !TOKEN_PATTERN.test(fixed)) {
    return usage(io, 'FACTSTATE_INSPECTOR_TOKEN must be 16 to 512 characters of letters, digits, -, _, . and ~', inspectHelp)
  }
  const token = fixed !== undefined && fixed !== '' ? fixed : parsed.values.token ? randomBytes(24).toString('base64url') : undefined
  if (!(await isLogDirectory(directory))) return usage(io, `no factstate log at ${directory}`, inspectHelp)
  let log: EventLog | undefined
  try {
    // Always a snapshot: a long-running reader must not lock the application out of its log.
    log = await openLogToRead(directory, io, { snapshot: true })
    if (log === undefined) return usage(io, `no factstate log at ${directory} (it holds another program's LevelDB database)`, inspectHelp)
    // Indexing takes ~20 s per million facts here: say so before the wait, not after it.
    if (log.head().highWater >= LARGE_LOG) io.stderr(`indexing ${log.head().highWater} facts before serving…`)
    const refresh = log.snapshotOf !== undefined && refreshMs > 0 ? { everyMs: refreshMs, directory: snapshotDirectoryOf(log) } : undefined
    const inspector = await serveInspector({ log, port, refresh, token })
    try {
      const { highWater } = log.head()
      io.stdout(`factstate inspector: ${inspector.link}`)
      const kind = log.snapshotOf === undefined ? 'view' : 'snapshot'
      const refreshed = refresh === undefined ? '' : `, taken again when it changes (looked at every ${refreshMs / 1000} s)`
      io.stdout(`read-only ${kind} of ${directory} (${highWater} facts)${refreshed}; press Ctrl-C to stop`)
      const by = await untilStopped(options.signal).stopped
      // Ended by the signal once the server and the log are closed: a shell loop running it stops too.
      if (by !== undefined) endBySignal(by)
    } finally {
      await inspector.close()
    }
    return EXIT.ok
  } catch (error) {
    return reportReadError(error, io, log)
  } finally {
    await closeLog(log)
  }
}
