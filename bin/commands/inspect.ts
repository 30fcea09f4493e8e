import { serveInspector } from '../../inspector/server.js'
import { EventLog } from '../../store/event-log.js'
import { type CommandIo, EXIT, closeLog, isLogDirectory, openLogToRead, parseCommand, reportReadError, usage } from '../io.js'

/** The text `factstate inspect --help` prints. */
export const inspectHelp = `usage: factstate inspect <log-directory> [--port N]

Serves the statechart visualizer for a log, on 127.0.0.1 only, and prints its URL. Read-only:
nothing is appended, not even recovery. Stops on Ctrl-C (SIGINT) or SIGTERM.

A log that another process has open (LevelDB allows one per directory) is shown as a snapshot:
a copy taken when inspect starts, holding every fact durable by then, which does not update. To
watch such a log live, serve the inspector from inside that process (serveInspector from
'factstate/inspector').

options:
  -p, --port N   listen on port N (default: a free port)
  -h, --help     show this help`

function untilStopped(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop)
      process.off('SIGTERM', stop)
      signal?.removeEventListener('abort', stop)
      resolve()
    }
    process.on('SIGINT', stop)
    process.on('SIGTERM', stop)
    if (signal?.aborted) stop()
    else signal?.addEventListener('abort', stop)
  })
}

/**
 * `factstate inspect <dir> [--port N]`: serves the inspector on a log until SIGINT or SIGTERM
 * (or `options.signal` aborts), then closes the server and the log and returns 0.
 *
 * @example
 * ```sh
 * npx factstate inspect .factstate/app --port 4319
 * # factstate inspector: http://127.0.0.1:4319/
 * ```
 */
/** From this many facts on, `inspect` says it is indexing (it serves once the whole log is indexed). */
const LARGE_LOG = 100_000

export async function inspectCommand(args: string[], io: CommandIo, options: { signal?: AbortSignal } = {}): Promise<number> {
  const parsed = parseCommand(io, inspectHelp, {
    args,
    allowPositionals: true,
    options: { port: { type: 'string', short: 'p' }, help: { type: 'boolean', short: 'h', default: false } },
  })
  if (typeof parsed === 'number') return parsed
  if (parsed.positionals.length !== 1) return usage(io, 'expected exactly one log directory', inspectHelp)
  const directory = parsed.positionals[0] as string
  let port = 0
  if (parsed.values.port !== undefined) {
    port = /^\d{1,5}$/.test(parsed.values.port) ? Number(parsed.values.port) : Number.NaN
    if (!(port >= 0 && port <= 65_535)) return usage(io, `--port must be a number from 0 to 65535, not ${parsed.values.port}`, inspectHelp)
  }
  if (!(await isLogDirectory(directory))) return usage(io, `no factstate log at ${directory}`, inspectHelp)
  let log: EventLog | undefined
  try {
    log = await openLogToRead(directory, io)
    if (log === undefined) return usage(io, `no factstate log at ${directory} (it holds another program's LevelDB database)`, inspectHelp)
    // Indexing takes ~20 s per million facts here: say so before the wait, not after it.
    if (log.head().highWater >= LARGE_LOG) io.stderr(`indexing ${log.head().highWater} facts before serving…`)
    const inspector = await serveInspector({ log, port })
    try {
      const { highWater } = log.head()
      io.stdout(`factstate inspector: ${inspector.url}`)
      io.stdout(`read-only ${log.snapshotOf === undefined ? 'view' : 'snapshot'} of ${directory} (${highWater} facts); press Ctrl-C to stop`)
      await untilStopped(options.signal)
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
