/**
 * Child process: opens the log in `argv[2]` and holds it.
 * Prints `ready` once open (or `error <code>` and exits 3 if the open is refused), then obeys
 * stdin lines: `append <name>` appends `invocation.opened` for `invocationOf(name)` and prints
 * `ack <seq>`; `close` closes the log, prints `closed` and exits 0.
 */
import { createInterface } from 'node:readline'
import { EventLog } from '../../store/event-log.js'
import { EventMaker, facts, invocationOf } from './log-fixtures.js'

const dir = process.argv[2]
if (!dir) throw new Error('usage: child-hold-log.ts <dir>')

let log: EventLog
try {
  log = await EventLog.open(dir)
} catch (error) {
  process.stdout.write(`error ${(error as { code?: string }).code ?? String(error)}\n`)
  process.exit(3)
}
process.stdout.write('ready\n')
const keepAlive = setInterval(() => undefined, 1 << 30)

for await (const line of createInterface({ input: process.stdin })) {
  const [command, argument] = line.trim().split(/\s+/)
  try {
    if (command === 'append' && argument) {
      const seq = await log.append(new EventMaker(invocationOf(argument)).next(facts.opened()))
      process.stdout.write(`ack ${seq}\n`)
    } else if (command === 'close') {
      await log.close()
      process.stdout.write('closed\n')
      clearInterval(keepAlive)
      process.exit(0)
    }
  } catch (error) {
    process.stdout.write(`error ${(error as { code?: string }).code ?? String(error)}\n`)
  }
}
