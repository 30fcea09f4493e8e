import { FACT_TYPES, type FactType, type StoredEvent } from '../../facts/types.js'
import { ID_PATTERN } from '../../facts/schema.js'
import { EventLog, type RunSummary, logInternals } from '../../store/event-log.js'
import { summarizeFact } from '../../store/fact-summary.js'
import { type CommandIo, EXIT, closeLog, isLogDirectory, openLogToRead, parseCommand, reportReadError, usage } from '../io.js'

export const logHelp = `usage: factstate log <log-directory> [--session ID] [--run ID] [--invocation ID] [--type TYPE] [--from SEQ] [--to SEQ] [--last N] [--json]
       factstate log <log-directory> --session ID --runs [--json]

Prints the facts of a log in seq order, one line each (or one JSON object per line with --json).
Filters combine. TYPE is a fact type such as tool.dispatched; a trailing * matches a family (tool.*).
--from and --to bound the seqs read (inclusive); --last N reads only the last N facts of the log (up to
--to if given), and the filters then apply to those.
--runs prints the session's runs instead, one line each in the order they opened: run, turn,
invocation, how it began (from which run), how it ended (or open), and its first and last seq.
A log that another process has open is read as a snapshot: a copy taken now, holding every fact
durable by then (said on stderr); facts appended after it are not printed.
Exit codes: 0 printed, 2 usage, 1/4 the log refused.`

/**
 * `factstate log <dir>`: prints facts, filtered by session, run, invocation and type.
 *
 * @example
 * ```sh
 * npx factstate log .factstate/demo/log --type 'tool.*' --json
 * npx factstate log .factstate/demo/log --last 20
 * ```
 */
export async function logCommand(args: string[], io: CommandIo): Promise<number> {
  const parsed = parseCommand(io, logHelp, {
    args,
    allowPositionals: true,
    options: {
      session: { type: 'string' },
      run: { type: 'string' },
      invocation: { type: 'string' },
      type: { type: 'string' },
      from: { type: 'string' },
      to: { type: 'string' },
      last: { type: 'string' },
      json: { type: 'boolean', default: false },
      runs: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  })
  if (typeof parsed === 'number') return parsed
  const { values, positionals } = parsed
  if (positionals.length !== 1) return usage(io, 'expected exactly one log directory', logHelp)
  const type = values.type
  if (type !== undefined) {
    const family = type.endsWith('*') ? type.slice(0, -1) : undefined
    const known = family !== undefined ? FACT_TYPES.some((t) => t.startsWith(family)) : FACT_TYPES.includes(type as FactType)
    if (!known) return usage(io, `unknown fact type ${type}; known: ${FACT_TYPES.join(', ')}`, logHelp)
  }
  const bounds: { from?: number; to?: number; last?: number } = {}
  for (const name of ['from', 'to', 'last'] as const) {
    const text = values[name]
    if (text === undefined) continue
    const value = /^[0-9]{1,15}$/.test(text) ? Number(text) : 0
    if (value < 1) return usage(io, `--${name} takes a positive integer, not ${text}`, logHelp)
    bounds[name] = value
  }
  if (bounds.last !== undefined && bounds.from !== undefined) return usage(io, '--last and --from do not combine', logHelp)
  if (values.runs) {
    if (values.session === undefined) return usage(io, '--runs lists the runs of one session: give --session', logHelp)
    const other = (['run', 'invocation', 'type', 'from', 'to', 'last'] as const).find((name) => values[name] !== undefined)
    if (other !== undefined) return usage(io, `--runs does not combine with --${other}`, logHelp)
  }
  if (bounds.from !== undefined && bounds.to !== undefined && bounds.from > bounds.to) return usage(io, `--from ${bounds.from} is after --to ${bounds.to}`, logHelp)
  for (const name of ['session', 'run', 'invocation'] as const) {
    const value = values[name]
    if (value !== undefined && !ID_PATTERN.test(value)) return usage(io, `--${name} takes an id (1–128 characters from [A-Za-z0-9._:-]), not ${value}`, logHelp)
  }
  const matches = ({ event }: StoredEvent) =>
    (values.session === undefined || event.invocation.sessionId === values.session) &&
    (values.run === undefined || event.invocation.runId === values.run) &&
    (values.invocation === undefined || event.invocation.invocationId === values.invocation) &&
    (type === undefined || (type.endsWith('*') ? event.fact.type.startsWith(type.slice(0, -1)) : event.fact.type === type))
  const directory = positionals[0] as string
  if (!(await isLogDirectory(directory))) return usage(io, `no factstate log at ${directory}`, logHelp)
  let log: EventLog | undefined
  try {
    log = await openLogToRead(directory, io)
    if (log === undefined) return usage(io, `no factstate log at ${directory} (it holds another program's LevelDB database)`, logHelp)
    if (values.runs) {
      const runs = await log.runs(values.session as string)
      for (const run of runs) {
        if (io.stdoutClosed?.()) return EXIT.ok
        io.stdout(values.json ? JSON.stringify(run) : formatRun(run))
      }
      if (!values.json) io.stderr(`${runs.length} run(s) in session ${values.session}; log high-water ${log.head().highWater}`)
      return EXIT.ok
    }
    let shown = 0
    const { highWater } = log.head()
    const to = Math.min(bounds.to ?? highWater, highWater)
    // --last N counts back from the end shown: the log's, or --to's.
    const from = bounds.last !== undefined ? Math.max(1, to - bounds.last + 1) : (bounds.from ?? 1)
    // One invocation's facts are read through its index, not by reading the whole log.
    const source: AsyncIterable<StoredEvent> | StoredEvent[] =
      values.invocation !== undefined
        ? (await logInternals(log).invocationEvents(values.invocation, to)).filter((stored) => stored.seq >= from)
        : log.events({ from, to })
    for await (const stored of source) {
      if (io.stdoutClosed?.()) return EXIT.ok
      if (!matches(stored)) continue
      shown += 1
      io.stdout(values.json ? JSON.stringify({ seq: stored.seq, ...stored.event }) : formatEvent(stored))
    }
    if (!values.json) io.stderr(`${shown} fact(s) shown; log high-water ${log.head().highWater}, digest ${log.head().digest}`)
    return EXIT.ok
  } catch (error) {
    return reportReadError(error, io, log)
  } finally {
    await closeLog(log)
  }
}

/** One human-readable line for a run of a session. */
export function formatRun(run: RunSummary): string {
  const began = run.sourceRunId === undefined ? run.kind : `${run.kind} of ${run.sourceRunId}`
  const ended = run.terminal === null ? 'open' : run.outcome?.status === 'failed' ? `failed ${run.outcome.class}` : run.terminal
  return `${run.runId}  ${run.turnId}  ${run.invocationId}  ${began}  ${ended}  #${run.openedSeq}–#${run.lastSeq}`
}

/** One human-readable line for a stored event. */
export function formatEvent({ seq, event }: StoredEvent): string {
  // The schema allows any safe integer; past the year 275760 a Date has no ISO form, so the number is shown.
  const date = new Date(event.recordedAt)
  const at = Number.isNaN(date.getTime()) ? `@${event.recordedAt}` : date.toISOString()
  const who = `${event.invocation.sessionId}/${event.invocation.turnId}/${event.invocation.runId}/${event.invocation.invocationId}`
  return `#${String(seq).padStart(6)}  ${at}  ${who}  ${event.fact.type.padEnd(18)} ${summarizeFact(event.fact)}`
}
