import { parseArgs } from 'node:util'
import { EventLog } from '../../store/event-log.js'
import { type CommandIo, EXIT, reportError, usage } from '../io.js'

export const verifyHelp = `usage: factstate verify <log-directory>

Re-reads every fact: seq continuity, decoding, and the digest chain over the exact stored bytes.
Prints "ok: N events, digest sha256:…" and exits 0, or prints LOG_CORRUPT with the first bad seq
and exits 1. Exit 3: the log is open in another process.`

/**
 * `factstate verify <dir>`.
 *
 * @example
 * ```sh
 * npx factstate verify .factstate/demo/log
 * ```
 */
export async function verifyCommand(args: string[], io: CommandIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ args, allowPositionals: true, options: { help: { type: 'boolean', short: 'h', default: false } } })
  } catch (error) {
    return usage(io, (error as Error).message, verifyHelp)
  }
  if (parsed.values.help) {
    io.stdout(verifyHelp)
    return EXIT.ok
  }
  if (parsed.positionals.length !== 1) return usage(io, 'expected exactly one log directory', verifyHelp)
  let log: EventLog | undefined
  try {
    log = await EventLog.open(parsed.positionals[0] as string)
    const { events, digest } = await log.verify()
    io.stdout(`ok: ${events} events, digest ${digest}`)
    return EXIT.ok
  } catch (error) {
    return reportError(error, io)
  } finally {
    await log?.close()
  }
}
