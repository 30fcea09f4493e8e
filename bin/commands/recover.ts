import { parseArgs } from 'node:util'
import { EventLog } from '../../store/event-log.js'
import { recoverInvocations } from '../../store/recovery.js'
import { type CommandIo, EXIT, reportError, usage } from '../io.js'

export const recoverHelp = `usage: factstate recover <log-directory>

Closes every invocation a crash left open (a model request in flight or a host gone:
failed/host_interrupted; a tool dispatched and never settled: failed/outcome_unknown, and the
session then needs reconciliation). Invents no settlement. Running it twice closes nothing the
second time. Exit 0 on success, 3 if the log is open in another process.`

/**
 * `factstate recover <dir>`.
 *
 * @example
 * ```sh
 * npx factstate recover .factstate/demo/log   # "closed 1 invocation(s)"
 * ```
 */
export async function recoverCommand(args: string[], io: CommandIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ args, allowPositionals: true, options: { help: { type: 'boolean', short: 'h', default: false } } })
  } catch (error) {
    return usage(io, (error as Error).message, recoverHelp)
  }
  if (parsed.values.help) {
    io.stdout(recoverHelp)
    return EXIT.ok
  }
  if (parsed.positionals.length !== 1) return usage(io, 'expected exactly one log directory', recoverHelp)
  let log: EventLog | undefined
  try {
    log = await EventLog.open(parsed.positionals[0] as string)
    const closed = await recoverInvocations(log)
    const { highWater, digest } = log.head()
    io.stdout(`closed ${closed} invocation(s); log high-water ${highWater}, digest ${digest}`)
    return EXIT.ok
  } catch (error) {
    return reportError(error, io)
  } finally {
    await log?.close()
  }
}
