/**
 * Child process: runs `factstate inspect` (the command module, as the CLI dispatcher calls it)
 * with `argv[2..]`, printing to the process streams, and exits with its code.
 */
import { inspectCommand } from '../../bin/commands/inspect.js'

const code = await inspectCommand(process.argv.slice(2), {
  stdout: (line) => process.stdout.write(`${line}\n`),
  stderr: (line) => process.stderr.write(`${line}\n`),
})
process.exitCode = code
