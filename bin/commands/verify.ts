import { FactstateError, type FactstateErrorDetails } from '../../errors.js'
import { escapeControls } from '../../store/fact-summary.js'
import { type CommandIo, onLogDirectory } from '../io.js'

export const verifyHelp = `usage: factstate verify <log-directory> [--json]

Re-reads every fact: seq continuity, decoding, and the digest chain over the exact stored bytes;
then rebuilds every index record from the facts and compares it with the stored one, and checks
the format markers and that no key lies outside the log's key spaces.
Prints "ok: N events, digest sha256:…" and the log's index format, which says which versions open
it ("index format 6: factstate 0.10.0 and later open it; 0.9.x refuses it …": check it before going
back to an older version), and exits 0, or prints LOG_CORRUPT with the first bad seq (or the index
record that disagrees with the facts, or the stray key) and exits 1.
The log is verified as a snapshot (a copy taken now, beside the log, removed at the end), so the
application can open it meanwhile; when another process has it open, the snapshot holds every fact
durable by then (said on stderr).
A log that is a backup (made by "factstate backup", or put back from one) also says where it was
taken: "a backup taken at <time>, at seq N": what its sessions did after that is not in it.
--json prints {"status":"ok","events":N,"digest":"sha256:…","format":F} instead (format null when the log
is not marked yet), with "backup":{"highWater","digest","takenAt"}
for a backup; a refusal is text on stderr as without it, and also one object on stdout, for scripts:
{"status":"corrupt","code":"LOG_CORRUPT","message":…,"seq":N} (seq null when no fact is named; "index",
"key" or "file" when the refusal names one) or {"status":"error","code":…,"message":…} for any other
refusal (the log is busy, unreadable); the exit code says which. A directory that holds no log is
a usage error (exit 2), with nothing on stdout.`

/**
 * What `verify` says of the log's index format (`log.indexFormat()`): which versions open it, for
 * an operator about to go back to an older one (see the README's "Upgrades are one way").
 */
function formatLine(format: number | undefined): string {
  if (format === undefined) return 'index format: not marked yet (nothing was written to the log)'
  if (format >= 6) return `index format ${format}: factstate 0.10.0 and later open it; 0.9.x refuses it (LOG_FORMAT_UNSUPPORTED): it holds a provider's opaque state`
  if (format === 5) return 'index format 5: factstate 0.9.0 and later open it'
  return `index format ${format}: written before 0.9.0; 0.9.0 and later mark it 5 when they open it`
}

/**
 * `factstate verify <dir>`.
 *
 * @example
 * ```sh
 * npx factstate verify .factstate/demo/log
 * ```
 */
export async function verifyCommand(args: string[], io: CommandIo): Promise<number> {
  return onLogDirectory(args, io, verifyHelp, true, async (log, { json }) => {
    const { events, digest } = await log.verify()
    const backup = log.restoredFrom()
    const format = log.indexFormat()
    if (json) io.stdout(JSON.stringify({ status: 'ok', events, digest, format: format ?? null, ...(backup === undefined ? {} : { backup }) }))
    else {
      io.stdout(`ok: ${events} events, digest ${digest}`)
      io.stdout(formatLine(format))
      if (backup !== undefined) io.stdout(`a backup taken at ${new Date(backup.takenAt).toISOString()}, at seq ${backup.highWater} (digest ${backup.digest}): what its sessions did after that is not in it`)
    }
  }, [], [], (error, json) => {
    // A script that asked for JSON gets the refusal as JSON too: the damaged seq without parsing stderr's text.
    if (!json || !(error instanceof FactstateError)) return
    if (error.code === 'LOG_CORRUPT') {
      const { seq, index, key, file } = (error.details ?? {}) as NonNullable<FactstateErrorDetails['LOG_CORRUPT']>
      io.stdout(escapeControls(JSON.stringify({ status: 'corrupt', code: error.code, message: error.message, seq: seq ?? null, ...(index === undefined ? {} : { index }), ...(key === undefined ? {} : { key }), ...(file === undefined ? {} : { file }) })))
    } else {
      io.stdout(escapeControls(JSON.stringify({ status: 'error', code: error.code, message: error.message })))
    }
  })
}
