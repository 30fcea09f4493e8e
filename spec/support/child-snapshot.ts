/**
 * Child process: takes a snapshot of the log in `argv[2]`, its copy made in `argv[3]`, prints
 * `ready <copy>` and holds it open until killed (a process killed before its snapshot's close); or,
 * with `argv[4]` `exit` or `throw`, ends at once without the close: `process.exit(0)`, or an
 * uncaught exception.
 */
import { EventLog, logInternals } from '../../store/event-log.js'

const [log, directory, ending] = process.argv.slice(2)
if (!log || !directory) throw new Error('usage: child-snapshot.ts <log-dir> <copies-dir> [exit|throw]')

const snapshot = await EventLog.openSnapshot(log, { directory })
process.stdout.write(`ready ${logInternals(snapshot).location}\n`)
if (ending === 'exit') process.exit(0)
if (ending === 'throw') throw new Error('ended without closing its snapshot')
setInterval(() => undefined, 1 << 30)
