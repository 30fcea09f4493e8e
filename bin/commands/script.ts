import { escapeControls } from '../../store/fact-summary.js'
import { recordedRun, scriptOf } from '../../testing/replay.js'
import { ALLOW_DAMAGED, type CommandIo, onLogDirectory, usage } from '../io.js'

export const scriptHelp = `usage: factstate script <log-directory> --invocation ID [--allow-damaged]

Prints the script that replays invocation ID against factstate/testing's scripted model server
(scriptOf(await recordedRun(log, ID))): one JSON array, the answers its model gave and those of the
runs it continued or succeeded, in order, with their tool calls' ids and arguments, finish reasons,
reasoning and usage, and each attempt that got no answer as the failure that makes a replay record
it alike. For a bug report or a regression test: scriptedModelServer(JSON.parse(text)).
The facts were redacted when they were recorded (the provider's key and headers, the engine's
secrets), so the script holds nothing the log does not; it does hold what users and tools said.
Reads a snapshot of the log, as log and verify do. An invocation the log never saw is refused
(TESTING_INVALID_OPTIONS, exit 4); --invocation missing, or not an id, is a usage error (exit 2).
It always prints JSON, and takes no --json (a usage error).
A damaged log (one whose snapshot lost facts) is scripted as far as it can be read, after a warning,
and exits 1, as verify does for it (the script may lack answers the log held), unless
--allow-damaged accepts that (exit 0).
Exit codes: 0 printed, 2 usage, 1 the log is damaged, 1/4 the log refused.`

/**
 * `factstate script <dir> --invocation ID`.
 *
 * @example
 * ```sh
 * npx factstate script .factstate/app --invocation inv-7 > incident-7.json
 * ```
 */
export async function scriptCommand(args: string[], io: CommandIo): Promise<number> {
  const asksHelp = args.some((arg) => arg === '--help' || arg === '-h')
  // Its output is JSON already: a --json taken silently would promise `--json`'s convention (nothing on stdout when it fails), which a damaged log breaks.
  if (!asksHelp && args.some((arg) => arg === '--json' || arg.startsWith('--json='))) return usage(io, 'script always prints JSON: it takes no --json', scriptHelp)
  if (!asksHelp && !args.some((arg) => arg === '--invocation' || arg.startsWith('--invocation='))) {
    return usage(io, '--invocation ID is required: the invocation whose run to script', scriptHelp)
  }
  return onLogDirectory(
    args,
    io,
    scriptHelp,
    true,
    async (log, { ids }) => {
      const script = scriptOf(await recordedRun(log, ids.get('invocation') as string))
      // Indented for a reader: a line break in JSON text is one between members (those in strings are escaped),
      // so each line is printed on its own, its fact text's C1 and bidirectional controls escaped as `log --json` does.
      for (const line of JSON.stringify(script, null, 2).split('\n')) io.stdout(escapeControls(line))
    },
    [ALLOW_DAMAGED],
    ['invocation'],
  )
}
