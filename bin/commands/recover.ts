import { escapeControls } from '../../store/fact-summary.js'
import { recoverInvocations } from '../../store/recovery.js'
import { type CommandIo, onLogDirectory } from '../io.js'

export const recoverHelp = `usage: factstate recover <log-directory> [--json]

Closes every invocation a crash left open (a model request in flight or a host gone:
failed/host_interrupted; a tool dispatched and never settled: failed/outcome_unknown, and the
session then needs reconciliation unless every such tool was declared readOnly). Invents no
settlement. Prints a line per invocation closed, with the seq its run now ends at (the boundary
a continuation starts from: see runSource), then that their turns got no answer (each such run
ended failed: pending --unanswered lists them). Running it twice closes nothing the second time. Exit 0 on success, 1 if the log is damaged (LOG_CORRUPT), 2 usage (no log there),
3 if the log is open in another process, 4 any other refusal.
In a log put back from a backup, a run whose session has not run since the backup says so: what the
session did after it is not in the log (check its tools' effects since then; its next run passes
allowRestored).
--json prints one object instead: {"closed":N,"invocations":[{"invocation","outcome","uncertainOperations","boundary","restored"?},…],"highWater":H,"digest":"sha256:…"}.`

/**
 * `factstate recover <dir>`.
 *
 * @example
 * ```sh
 * npx factstate recover .factstate/demo/log   # "closed 1 invocation(s)"
 * ```
 */
export async function recoverCommand(args: string[], io: CommandIo): Promise<number> {
  return onLogDirectory(args, io, recoverHelp, false, async (log, { json }) => {
    const lines: string[] = []
    const invocations: { line: string; closed: unknown }[] = []
    const closed = await recoverInvocations(log, {
      onClosed: ({ invocation, outcome, uncertainOperations, boundary, restored }) => {
        invocations.push({
          line: `${invocation.sessionId}/${invocation.runId} ${invocation.invocationId}`,
          closed: { invocation, outcome, uncertainOperations, boundary, ...(restored === undefined ? {} : { restored }) },
        })
        const since = restored === undefined ? '' : `; restored from the backup taken at ${new Date(restored.takenAt).toISOString()} (seq ${restored.highWater}): its next run passes allowRestored`
        const why = outcome.status === 'failed' ? outcome.class : outcome.status
        const ops = uncertainOperations.map((op) => `${op.name}${op.readOnly ? ' (read-only)' : ''} ${op.operationId}`)
        // Tool names and operation ids are any text a direct append wrote: escaped as a fact's summary is.
        lines.push(escapeControls(`${invocation.sessionId}/${invocation.runId} ${invocation.invocationId}: ${why}${ops.length > 0 ? ` (${ops.join(', ')})` : ''}; run ends at ${boundary.highWater}${since}`))
      },
    })
    const { highWater, digest } = log.head()
    if (json) {
      // Fact text (tool names, ids) in JSON strings: C1 and bidirectional controls escaped, as `log --json` does.
      // In the text's order (recovery closes them side by side, in no fixed order): the same log gives the same output.
      const ordered = invocations.sort((a, b) => (a.line < b.line ? -1 : a.line > b.line ? 1 : 0)).map(({ closed: one }) => one)
      io.stdout(escapeControls(JSON.stringify({ closed, invocations: ordered, highWater, digest })))
      return
    }
    for (const line of lines.sort()) io.stdout(line)
    io.stdout(`closed ${closed} invocation(s); log high-water ${highWater}, digest ${digest}`)
    // Every run recovery closes ended failed, its message unanswered: a plain `pending` lists
    // only the outcomes to acknowledge, so it would read "nothing pending" after a lost model call.
    if (closed > 0) {
      io.stdout(
        `${closed === 1 ? 'its turn' : 'their turns'} got no answer: a continuation from the seq ${closed === 1 ? 'its run ends' : 'each run ends'} at answers it, after acknowledging any outcome listed (factstate pending --unanswered lists them)`,
      )
    }
  })
}
