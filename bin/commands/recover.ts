import { recoverInvocations } from '../../store/recovery.js'
import { type CommandIo, onLogDirectory } from '../io.js'

export const recoverHelp = `usage: factstate recover <log-directory>

Closes every invocation a crash left open (a model request in flight or a host gone:
failed/host_interrupted; a tool dispatched and never settled: failed/outcome_unknown, and the
session then needs reconciliation). Invents no settlement. Running it twice closes nothing the
second time. Exit 0 on success, 1 if the log is damaged (LOG_CORRUPT), 2 usage (no log there),
3 if the log is open in another process, 4 any other refusal.`

/**
 * `factstate recover <dir>`.
 *
 * @example
 * ```sh
 * npx factstate recover .factstate/demo/log   # "closed 1 invocation(s)"
 * ```
 */
export async function recoverCommand(args: string[], io: CommandIo): Promise<number> {
  return onLogDirectory(args, io, recoverHelp, async (log) => {
    const closed = await recoverInvocations(log)
    const { highWater, digest } = log.head()
    io.stdout(`closed ${closed} invocation(s); log high-water ${highWater}, digest ${digest}`)
  })
}
