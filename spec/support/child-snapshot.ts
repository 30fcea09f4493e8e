/**
 * Child process: takes a snapshot of the log in `argv[2]`, its copy made in `argv[3]`, prints
 * `ready <copy>` and holds it open until killed (a process killed before its snapshot's close).
 */
import { EventLog, logInternals } from '../../store/event-log.js'

const [log, directory] = process.argv.slice(2)
if (!log || !directory) throw new Error('usage: child-snapshot.ts <log-dir> <copies-dir>')

const snapshot = await EventLog.openSnapshot(log, { directory })
process.stdout.write(`ready ${logInternals(snapshot).location}\n`)
setInterval(() => undefined, 1 << 30)
