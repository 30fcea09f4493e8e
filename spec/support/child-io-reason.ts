/**
 * Child process: makes one I/O failure the test cannot make in its own process (as another user,
 * under a lowered limit of open files) and prints what factstate said of it, as one JSON line:
 * `{ code, reason, path, message }`. `open <dir>`: opens the log there; `backup <log> <dest>`:
 * backs it up; `emfile <dir>`: opens the log once every file descriptor but two is taken; `probe`:
 * loads what the others need and exits 0 (whether a user can run this child at all).
 */
import { closeSync, openSync } from 'node:fs'
import { EventLog } from '../../store/event-log.js'
import { isFactstateError } from '../../errors.js'
import { backupCommand } from '../../bin/commands/backup.js'
import { recoverCommand } from '../../bin/commands/recover.js'

const [mode, first, second] = process.argv.slice(2)
// Every module this child needs has been loaded by now: a user who could run it gets exit 0.
if (mode === 'probe') process.exit(0)
if (!mode || !first) throw new Error('usage: child-io-reason.ts probe|open|backup|emfile <dir> [<dest>]')

async function attempt(): Promise<void> {
  if (mode === 'backup') {
    await EventLog.backup(first as string, second as string)
    return
  }
  const taken: number[] = []
  if (mode === 'emfile') {
    try {
      for (;;) taken.push(openSync('/dev/null', 'r'))
    } catch {
      // The limit: two descriptors are given back, fewer than a log needs.
    }
    for (const fd of taken.splice(0, 2)) closeSync(fd)
  }
  const log = await EventLog.open(first as string)
  await log.close()
}

const lines: string[] = []
const io = { stdout: (line: string) => lines.push(line), stderr: (line: string) => lines.push(line) }
try {
  await attempt()
  process.stdout.write(`${JSON.stringify({ code: 'none' })}\n`)
} catch (error) {
  if (!isFactstateError(error)) throw error
  // The CLI's words for the same failure: its remedy line.
  if (mode === 'backup') await backupCommand([first, second as string], io)
  else if (mode === 'open') await recoverCommand([first], io)
  const remedy = lines.find((line) => line.startsWith('remedy: '))
  const details: Readonly<Record<string, unknown>> | undefined = error.details
  process.stdout.write(`${JSON.stringify({ code: error.code, reason: details?.reason, path: details?.path, message: error.message, remedy })}\n`)
}
