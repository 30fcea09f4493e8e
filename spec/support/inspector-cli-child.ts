/**
 * Child process: runs `factstate inspect` (the command module, as the CLI dispatcher calls it)
 * with `argv[2..]`, printing to the process streams, and exits with its code, or by the signal
 * that stopped it, as the CLI's entry point does.
 */
import { inspectCommand } from '../../bin/commands/inspect.js'
import { signalToEndBy } from '../../bin/io.js'

const code = await inspectCommand(process.argv.slice(2), {
  stdout: (line) => process.stdout.write(`${line}\n`),
  stderr: (line) => process.stderr.write(`${line}\n`),
})
process.exitCode = code
// As the CLI's entry point does: a command stopped by a signal ends by it.
const signal = signalToEndBy()
if (signal !== undefined) {
  process.removeAllListeners(signal)
  process.kill(process.pid, signal)
}
