import { mkdir, readdir } from 'node:fs/promises'
import { FACT_TYPES, type Fact, type FactType, type StoredEvent } from '../../facts/types.js'
import { ID_PATTERN } from '../../facts/schema.js'
import { EventLog, LOG_DIRECTORY_ENTRY, type RunSummary, logInternals } from '../../store/event-log.js'
import { SettledToolNames, escapeControls, summarizeFact, usageTotalsText } from '../../store/fact-summary.js'
import { type UsageTotals, usageOf } from '../../actors/transcript.js'
import { FactstateError, messageWithoutCode } from '../../errors.js'
import { SESSION_PREFIX, type SessionListing } from '../../store/session-listing.js'
import { changeMark } from '../../store/snapshot.js'
import { ALLOW_DAMAGED, type CommandIo, EXIT, closeLog, endBySignal, exitAfterReading, isLogDirectory, openLogToRead, parseCommand, reportReadError, snapshotDirectoryOf, untilStopped, usage } from '../io.js'

export const logHelp = `usage: factstate log <log-directory> [--session ID] [--run ID] [--invocation ID] [--type TYPE] [--from SEQ] [--to SEQ] [--last N] [--allow-damaged] [--json]
       factstate log <log-directory> [filters] [--last N] --follow [--refresh S] [--json]
       factstate log <log-directory> --session ID --runs [--allow-damaged] [--json]
       factstate log <log-directory> --sessions [--recent] [--prefix P] [--allow-damaged] [--json]

Prints the facts of a log in seq order, one line each (or one JSON object per line with --json:
the fact's seq, the event, and digest, the log's digest through that fact, which verify prints once
the log ends there: a program that exports the lines keeps the last seq and digest it wrote, and a
log that later has another digest at that seq is not the log it read). A tool.settled line names
its call's tool, as its tool.dispatched line does (the fact has only the operation id; the name is
read through the invocation's index when the dispatch was not read). A --from past the log's end
(more than its high-water + 1, a seq it never reached) is refused, exit 4, following or not.
Filters combine. TYPE is a fact type such as tool.dispatched; a trailing * matches a family (tool.*),
as a family's name alone does (tool: invocation, model, tool, hold).
--run matches that run id in every session (run ids are a session's own): give --session too.
--session and --invocation read through the log's indexes (for a session the log never saw, the
summary on stderr says so); --run, --type, --from and --to alone read the whole log. --from and --to bound the seqs read (inclusive); --last N prints only the last
N facts that match the filters (up to --to if given): --session S --run R --last 5 is that run's
last five facts, however many facts other runs wrote after them.
--runs prints the session's runs instead, one line each in the order they opened: run, turn,
invocation (one id, said once, when the three are one: a child run's), how it began (from which run; a child run: the call that started it, "child of
OPERATION (session S)"), how it ended (or open), its first and last seq, and the
tokens its answers reported, summed ("at least", with how many answers reported none, when not
all did, or when requests were interrupted; --json: usage, with answers, unreported,
interrupted and the sums).
--sessions prints the log's sessions instead, in id order (only those whose id begins with P,
with --prefix), one line each: the session, then its last run as --runs prints a run, without
tokens (a child run's session, whose id is its run's one id, said once) (--json: { sessionId, latestRun }, as log.sessions() gives them).
--recent lists them most recently active first instead: by the seq their last run opened at (a new
message, a continuation or a handoff successor moves its session to the top), as
log.sessions({ order: 'recent' }) gives them.
The log is read as a snapshot (a copy taken now, beside the log, removed at the end), so the
application can open it meanwhile; when another process has it open, the snapshot holds every fact
durable by then (said on stderr), and facts appended after it are not printed.
--follow (-f) then keeps printing the facts that land, as tail -f does, until Ctrl-C (it ends by it): it
looks at the log's files every S seconds (--refresh, 0.1 to 3600, default 1) and reads a new
snapshot when they changed. A log not there yet is waited for (as tail -F does). It takes no --to.
A damaged log (one whose snapshot lost facts) is printed as far as it can be read, after a warning,
and exits 1, as verify does for it, unless --allow-damaged accepts that (exit 0); a follow ends as
it always does (Ctrl-C, exit 0, after the warning), and so takes no --allow-damaged.
Exit codes: 0 printed, 2 usage, 1 the log is damaged, 1/4 the log refused, 4 a --from past its end.`

/** The families of fact types, the part of each type before its dot (invocation, model, tool, hold), in FACT_TYPES order. */
const FACT_FAMILIES = [...new Set(FACT_TYPES.map((type) => type.slice(0, type.indexOf('.'))))]

/**
 * `factstate log <dir>`: prints facts, filtered by session, run, invocation and type.
 *
 * @example
 * ```sh
 * npx factstate log .factstate/demo/log --type 'tool.*' --json
 * npx factstate log .factstate/demo/log --last 20
 * npx factstate log .factstate/app --last 5 --follow
 * ```
 */
export async function logCommand(args: string[], io: CommandIo, options: { signal?: AbortSignal } = {}): Promise<number> {
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
      sessions: { type: 'boolean', default: false },
      recent: { type: 'boolean', default: false },
      prefix: { type: 'string' },
      follow: { type: 'boolean', short: 'f', default: false },
      [ALLOW_DAMAGED]: { type: 'boolean', default: false },
      refresh: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  })
  if (typeof parsed === 'number') return parsed
  const { values, positionals } = parsed
  if (positionals.length !== 1) return usage(io, 'expected exactly one log directory', logHelp)
  // A family's name alone (tool) is its family (tool.*): no fact type is named so.
  const type = values.type !== undefined && FACT_FAMILIES.includes(values.type) ? `${values.type}.*` : values.type
  if (type !== undefined) {
    const family = type.endsWith('*') ? type.slice(0, -1) : undefined
    const known = family !== undefined ? FACT_TYPES.some((t) => t.startsWith(family)) : FACT_TYPES.includes(type as FactType)
    if (!known) return usage(io, `unknown fact type ${type}; known: ${FACT_TYPES.join(', ')}, or a family: ${FACT_FAMILIES.join(', ')} (tool is tool.*)`, logHelp)
  }
  const bounds: { from?: number; to?: number; last?: number } = {}
  for (const name of ['from', 'to', 'last'] as const) {
    const text = values[name]
    if (text === undefined) continue
    const value = /^[0-9]{1,15}$/.test(text) ? Number(text) : 0
    if (value < 1) return usage(io, `--${name} takes a whole number from 1 to 999,999,999,999,999, not ${text}`, logHelp)
    bounds[name] = value
  }
  if (bounds.last !== undefined && bounds.from !== undefined) return usage(io, '--last and --from do not combine', logHelp)
  if (values.sessions) {
    if (values.runs) return usage(io, '--sessions lists sessions and --runs the runs of one: give one of them', logHelp)
    const other = (['session', 'run', 'invocation', 'type', 'from', 'to', 'last'] as const).find((name) => values[name] !== undefined) ?? (values.follow ? 'follow' : undefined)
    if (other !== undefined) return usage(io, `--sessions does not combine with --${other}`, logHelp)
    if (values.prefix !== undefined && !SESSION_PREFIX.test(values.prefix)) {
      return usage(io, `--prefix takes the start of an id (0–128 characters from [A-Za-z0-9._:-]), not ${values.prefix.slice(0, 60)}`, logHelp)
    }
  } else if (values.prefix !== undefined) return usage(io, '--prefix is for --sessions', logHelp)
  else if (values.recent) return usage(io, '--recent is for --sessions (factstate log <log-directory> --sessions --recent)', logHelp)
  if (values.runs) {
    if (values.session === undefined) return usage(io, '--runs lists the runs of one session: give --session', logHelp)
    const other = (['run', 'invocation', 'type', 'from', 'to', 'last'] as const).find((name) => values[name] !== undefined)
    if (other !== undefined) return usage(io, `--runs does not combine with --${other}`, logHelp)
  }
  if (values.follow) {
    if (values.runs) return usage(io, '--follow prints facts as they land: it does not combine with --runs', logHelp)
    if (bounds.to !== undefined) return usage(io, '--follow prints facts as they land: it takes no --to', logHelp)
    // It would do nothing: a follow ends at Ctrl-C with 0, the log damaged or not.
    if (values[ALLOW_DAMAGED]) return usage(io, `--follow ends at Ctrl-C with exit 0, a damaged log or not (after its warning): it takes no --${ALLOW_DAMAGED}`, logHelp)
  }
  let refreshMs = FOLLOW_REFRESH_MS
  if (values.refresh !== undefined) {
    if (!values.follow) return usage(io, '--refresh is for --follow', logHelp)
    const seconds = /^\d+(?:\.\d+)?$/.test(values.refresh) ? Number(values.refresh) : Number.NaN
    refreshMs = Math.round(seconds * 1000)
    if (!(refreshMs >= 100 && refreshMs <= 3_600_000)) return usage(io, `--refresh must be a number of seconds from 0.1 to 3600, not ${values.refresh}`, logHelp)
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
  if (!(await isLogDirectory(directory))) {
    if (!values.follow) return usage(io, `no factstate log at ${directory}`, logHelp)
    // A file, or a directory of other things (`EventLog.open` refuses to make a log there): no log can
    // ever appear, so waiting would be for ever (`log -f .factstate` for `.factstate/app`, say).
    const never = await neverALog(directory)
    if (never !== undefined) return usage(io, never, logHelp)
    // As tail -F: a follower started before the application (a log shipper beside it) waits for the log.
    const appeared = await logAppears(directory, refreshMs, io, options.signal)
    if (appeared !== true) return appeared
  }
  let log: EventLog | undefined
  try {
    log = await openLogToRead(directory, io, { snapshot: values.follow })
    if (log === undefined) return usage(io, `no factstate log at ${directory} (it holds another program's LevelDB database)`, logHelp)
    if (values.sessions) {
      let listed = 0
      const prefix = values.prefix ?? ''
      const reading = log
      // A page at a time: a log of many sessions is printed in bounded memory. Most recent first, each
      // page is of the sessions whose last run opened before the last one printed.
      const pageAfter = (last: SessionListing | undefined) =>
        values.recent
          ? reading.sessions({ order: 'recent', prefix, limit: 1_000, ...(last === undefined ? {} : { before: last.latestRun.openedSeq }) })
          : reading.sessions({ prefix, limit: 1_000, ...(last === undefined ? {} : { after: last.sessionId }) })
      for (let page = await pageAfter(undefined); page.length > 0; page = await pageAfter(page.at(-1))) {
        for (const session of page) {
          if (io.stdoutClosed?.()) return EXIT.ok
          // A child run's session is its run's one id (`childRunFor`), which formatRun says: said once.
          const { latestRun } = session
          io.stdout(values.json ? escapeControls(JSON.stringify(session)) : escapeControls(oneId(session.sessionId, latestRun.runId, latestRun.turnId, latestRun.invocationId) ? formatRun(latestRun) : `${session.sessionId}  ${formatRun(latestRun)}`))
        }
        listed += page.length
      }
      if (!values.json) io.stderr(`${listed.toLocaleString('en-US')} session(s)${prefix === '' ? '' : ` beginning with ${prefix}`}${values.recent ? ', most recently active first' : ''}; log high-water ${log.head().highWater}`)
      return exitAfterReading(log, io, values[ALLOW_DAMAGED])
    }
    if (values.runs) {
      const runs = await log.runs(values.session as string)
      for (const run of runs) {
        if (io.stdoutClosed?.()) return EXIT.ok
        // The run's own facts, through its invocation's index: what its answers reported.
        const events = await log.invocationEvents(run.invocationId)
        const usage = usageOf(events)
        io.stdout(values.json ? escapeControls(JSON.stringify({ ...run, usage })) : formatRun(run, usage))
      }
      if (!values.json) io.stderr(escapeControls(`${runs.length} run(s) in session ${values.session}; log high-water ${log.head().highWater}`))
      return exitAfterReading(log, io, values[ALLOW_DAMAGED])
    }
    let shown = 0
    const { highWater } = log.head()
    // Past the next fact: a seq this log never reached (a checkpoint kept from another log, or from
    // before this one was put back from a backup). Refused as events() refuses it: clamped, a follow
    // would wait in silence, then print another history's facts from there, skipping the seqs between.
    if (bounds.from !== undefined && bounds.from > highWater + 1) {
      io.stderr(
        escapeControls(
          `error: --from ${bounds.from} is past the end of the log at ${directory}, whose high-water is ${highWater} (its next fact is ${highWater + 1}): ` +
            `a seq this log never reached, such as one kept from another log or from before this one was put back from a backup or replaced. ` +
            `Give --from ${highWater + 1} or less; to resume an export, first check that the log has the digest kept for the last seq exported ` +
            `(factstate log ${directory} --from SEQ --to SEQ --json), and export again from 1 if not`,
        ),
      )
      return EXIT.refused
    }
    const to = Math.min(bounds.to ?? highWater, highWater)
    const filtered = values.session !== undefined || values.run !== undefined || values.invocation !== undefined || type !== undefined
    // --last N counts back from the end shown (the log's, or --to's): without filters, the last N
    // facts; with them, the last N that match, found by reading up to the end and keeping the last N.
    let from = bounds.last !== undefined && !filtered ? Math.max(1, to - bounds.last + 1) : (bounds.from ?? 1)
    // One invocation's facts are read through its index, and one session's through its runs' (the
    // run index, then each run's invocation's), not by reading the whole log.
    let source: AsyncIterable<StoredEvent> | StoredEvent[] =
      values.invocation !== undefined
        ? (await logInternals(log).invocationEvents(values.invocation, to)).filter((stored) => stored.seq >= from)
        : // A --from at the next fact reads nothing (following, it waits for it); one past it was refused above.
          log.events({ from: Math.min(from, to + 1), to, ...(values.session === undefined ? {} : { sessionId: values.session }) })
    if (bounds.last !== undefined && filtered) {
      const kept: StoredEvent[] = []
      for await (const stored of source) {
        if (io.stdoutClosed?.()) return EXIT.ok
        if (!matches(stored)) continue
        kept.push(stored)
        if (kept.length > 2 * bounds.last) kept.splice(0, kept.length - bounds.last)
      }
      source = kept.slice(-bounds.last)
      // A follow goes on after `to`, whatever was kept.
      from = source[0]?.seq ?? to + 1
    }
    let digestsMissing = false
    // The tools of the tool.settled lines (--json has each fact whole, and no line to name it on).
    const toolNames = values.json ? undefined : settledToolNames()
    const print = async (stored: StoredEvent, reader: EventLog) => {
      const { fact } = stored.event
      // Facts that land before --from (a log still short of it) are not shown while following either.
      if (stored.seq < from || !matches(stored)) {
        toolNames?.pass(fact)
        return
      }
      shown += 1
      if (toolNames !== undefined) return io.stdout(formatEvent(stored, await toolNames.of(fact, reader)))
      let digest: string | null
      try {
        digest = logInternals(reader).digestOf(stored.seq, stored.event.id)
      } catch (error) {
        // A damaged id record costs its line the digest, not the facts after it: log is how a
        // damaged log is looked at, and verify says what is wrong.
        if (!(error instanceof FactstateError && error.code === 'LOG_CORRUPT')) throw error
        digest = null
        if (!digestsMissing) io.stderr(escapeControls(`note: ${messageWithoutCode(error)}: its line has digest null (and so has each line whose record is damaged); run verify`))
        digestsMissing = true
      }
      io.stdout(escapeControls(JSON.stringify({ seq: stored.seq, ...stored.event, digest })))
    }
    for await (const stored of source) {
      if (io.stdoutClosed?.()) return EXIT.ok
      await print(stored, log)
    }
    if (values.follow) return await follow(directory, log, to, refreshMs, io, print, options.signal)
    if (!values.json) {
      // Nothing of a session the log never saw: said, since a mistyped id otherwise reads as a quiet session.
      const unknownSession = shown === 0 && values.session !== undefined && (await log.runs(values.session)).length === 0
      io.stderr(escapeControls(`${shown} fact(s) shown${unknownSession ? ` (the log has no session ${values.session})` : ''}; log high-water ${log.head().highWater}, digest ${log.head().digest}`))
    }
    return exitAfterReading(log, io, values[ALLOW_DAMAGED])
  } catch (error) {
    return reportReadError(error, io, log)
  } finally {
    await closeLog(log)
  }
}

/** How long `log --follow` keeps looking for a log that went missing before it stops. */
const GONE_FOR_MS = 5_000

/** Whether `error` says the log's directory is not there (any more). */
function isGone(error: unknown): boolean {
  // A FactstateError (no log to take a snapshot of) has the file system's error as its cause.
  const codes = [(error as NodeJS.ErrnoException)?.code, ((error as Error)?.cause as NodeJS.ErrnoException | undefined)?.code]
  return codes.includes('ENOENT') || codes.includes('ENOTDIR')
}

/** Why no log can ever appear at `directory`, when that is so: a file is there, or a directory holding other things. */
async function neverALog(directory: string): Promise<string | undefined> {
  let entries: string[]
  try {
    entries = await readdir(directory)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? `no factstate log at ${directory}: it is a file, not a log's directory` : undefined
  }
  const foreign = entries.filter((name) => !LOG_DIRECTORY_ENTRY.test(name))
  if (foreign.length === 0) return undefined
  const shown = escapeControls(foreign.slice(0, 3).join(', ')) + (foreign.length > 3 ? `, and ${foreign.length - 3} more` : '')
  return `no factstate log at ${directory}, and none can be made there: it holds other files (${shown})`
}

/**
 * Waits for a log at `directory`, looking every `refreshMs`: true once there is one; 0 when `signal`
 * aborts, or the process's signal's own ending (`endBySignal`) on SIGINT or SIGTERM, first.
 */
async function logAppears(directory: string, refreshMs: number, io: CommandIo, signal: AbortSignal | undefined): Promise<true | number> {
  io.stderr(escapeControls(`note: no factstate log at ${directory} yet: waiting for one (Ctrl-C to stop)`))
  const looks = everyLook(refreshMs, io, signal)
  try {
    while (await looks.next()) if (await isLogDirectory(directory)) return true
    return EXIT.ok
  } finally {
    looks.dispose()
  }
}

/**
 * The looks of `log --follow`: `next()` resolves true once `refreshMs` have passed, false once the
 * follow is to stop (`signal` aborted, the reader of stdout gone, or SIGINT or SIGTERM: the CLI then
 * ends by that signal once what is open is closed, as tail -f does, so a shell loop running it stops
 * too); `stopped()` says so between looks. `dispose` stops listening for the signals.
 */
function everyLook(refreshMs: number, io: CommandIo, signal: AbortSignal | undefined): { next: () => Promise<boolean>; stopped: () => boolean; dispose: () => void } {
  const { stopped, dispose } = untilStopped(signal)
  let stop = false
  void stopped.then((by) => {
    stop = true
    if (by !== undefined) endBySignal(by)
  })
  const isStopped = () => stop || io.stdoutClosed?.() === true
  return {
    async next() {
      let timer: ReturnType<typeof setTimeout> | undefined
      await Promise.race([stopped, new Promise((resolve) => (timer = setTimeout(resolve, refreshMs)))])
      clearTimeout(timer)
      return !isStopped()
    },
    stopped: isStopped,
    dispose,
  }
}

/** How often `log --follow` looks at the log's files by default. */
const FOLLOW_REFRESH_MS = 1_000

/**
 * `log --follow` after the facts up to `shownUpTo` were printed from `first`: every `refreshMs`,
 * when the log's files changed, a new snapshot is read from the fact after the last one printed,
 * then closed. Ends with 0 when `signal` aborts or the reader of stdout goes away, and on SIGINT or
 * SIGTERM by that signal (`endBySignal`), once the snapshot is closed.
 */
async function follow(
  directory: string,
  first: EventLog,
  shownUpTo: number,
  refreshMs: number,
  io: CommandIo,
  print: (stored: StoredEvent, reader: EventLog) => Promise<void>,
  signal: AbortSignal | undefined,
): Promise<number> {
  const looks = everyLook(refreshMs, io, signal)
  const copies = snapshotDirectoryOf(first)
  let lastMark: string | undefined
  // The log's digest through the fact last printed: a log put back from a backup, or replaced,
  // that has grown back past it has another one there, whatever ids it holds.
  let lastDigest = shownUpTo === 0 ? undefined : await first.digestAt(shownUpTo)
  /** When the log was first found missing, in this run of misses. */
  let goneSince: number | undefined
  try {
    for (;;) {
      if (!(await looks.next())) return EXIT.ok
      let mark: string
      let next: EventLog
      try {
        mark = await changeMark(directory)
        if (mark === lastMark) {
          goneSince = undefined
          continue
        }
        // Made again if it went (the folder beside the log emptied, as a second `demo` does to its own).
        if (copies !== undefined) await mkdir(copies, { recursive: true }).catch(() => undefined)
        next = await EventLog.openSnapshot(directory, copies === undefined ? {} : { directory: copies })
      } catch (error) {
        // The log kept changing through every copy, say: looked at again next time.
        if (error instanceof FactstateError && error.code === 'LOG_IO') continue
        if (!isGone(error)) throw error
        // Gone: deleted, or in the gap of a replace that is not one rename (`mv log old; cp -r new log`).
        goneSince ??= Date.now()
        if (Date.now() - goneSince < GONE_FOR_MS) continue
        io.stderr(escapeControls(`error: the log at ${directory} is gone (deleted or moved away) and did not come back within ${GONE_FOR_MS / 1000} s; stopped following`))
        return EXIT.refused
      }
      goneSince = undefined
      try {
        const { highWater } = next.head()
        // The same log still, grown: the fact last printed is where it was.
        if (highWater < shownUpTo || (lastDigest !== undefined && (await next.digestAt(shownUpTo)) !== lastDigest)) {
          io.stderr(escapeControls(`error: the log at ${directory} no longer begins with the facts printed (was it replaced?); stopped following`))
          return EXIT.refused
        }
        for await (const stored of next.events({ from: shownUpTo + 1, to: highWater })) {
          if (looks.stopped()) return EXIT.ok
          await print(stored, next)
          shownUpTo = stored.seq
        }
        if (shownUpTo > 0) lastDigest = await next.digestAt(shownUpTo)
        lastMark = mark
      } finally {
        await next.close()
      }
    }
  } finally {
    looks.dispose()
  }
}

/** One human-readable line for a run of a session, with its answers' token totals when given (and, for a child run, its parent call). */
export function formatRun(run: RunSummary, usage?: UsageTotals): string {
  const { parent } = run
  const began = run.sourceRunId === undefined ? run.kind : `${run.kind} of ${run.sourceRunId}`
  const ended = run.terminal === null ? 'open' : run.outcome?.status === 'failed' ? `failed ${run.outcome.class}` : run.terminal
  // The class is any text a direct append wrote: escaped as a fact's summary is.
  const tokens = usage === undefined ? '' : `  ${usageTotalsText(usage)}`
  const child = parent === undefined ? '' : `  child of ${parent.operationId} (session ${parent.invocation.sessionId})`
  // A child run's run, turn and invocation share one id (`childRunFor`): said once.
  const ids = oneId(run.runId, run.turnId, run.invocationId) ? run.runId : `${run.runId}  ${run.turnId}  ${run.invocationId}`
  return escapeControls(`${ids}  ${began}${child}  ${ended}  #${run.openedSeq}–#${run.lastSeq}${tokens}`)
}

/** Whether `ids` are one id: a child run's session, turn, run and invocation (`childRunFor`), printed once. */
const oneId = (...ids: string[]): boolean => ids.every((id) => id === ids[0])

/**
 * The names of the tools of the `tool.settled` lines `log` prints, whose facts have only the
 * operation id: each `tool.dispatched` read is kept until its operation's settle is read (printed or
 * `pass`ed by the filters), so what is kept is what is in flight at the place read. A settle whose
 * dispatch was not read (it came before --from, or before the facts --last kept) has its
 * operation's invocation read once, through its index; a settle whose dispatch is not there even
 * so (a log written by direct appends), or whose invocation cannot be read (a damaged log), is
 * printed without a name.
 */
function settledToolNames(): { pass: (fact: Fact) => void; of: (fact: Fact, reader: EventLog) => Promise<string | undefined> } {
  const names = new SettledToolNames()
  const looked = new Set<string>()
  return {
    pass: (fact) => void names.note(fact),
    async of(fact, reader) {
      if (fact.type !== 'tool.settled') return names.note(fact)
      const { operationId } = fact
      // An operation id is its invocation's id, the step's, and the call's index: `inv-1/step-2/0`.
      const invocationId = operationId.includes('/') ? operationId.slice(0, operationId.indexOf('/')) : ''
      if (!names.knows(operationId) && ID_PATTERN.test(invocationId) && !looked.has(invocationId)) {
        looked.add(invocationId)
        try {
          for (const stored of await logInternals(reader).invocationEvents(invocationId)) {
            const earlier = stored.event.fact
            if (earlier.type === 'tool.dispatched') names.learn(earlier.operationId, earlier.name)
          }
        } catch (error) {
          if (!(error instanceof FactstateError)) throw error
        }
      }
      return names.note(fact)
    },
  }
}

/** One human-readable line for a stored event; `toolName` names a `tool.settled`'s tool (`summarizeFact`). */
export function formatEvent({ seq, event }: StoredEvent, toolName?: string): string {
  // The schema allows any safe integer; past the year 275760 a Date has no ISO form, so the number is shown.
  const date = new Date(event.recordedAt)
  const at = Number.isNaN(date.getTime()) ? `@${event.recordedAt}` : date.toISOString()
  const { sessionId, turnId, runId, invocationId } = event.invocation
  // A child run's four ids are one (`childRunFor`: up to 128 characters each): said once.
  const who = oneId(sessionId, turnId, runId, invocationId) ? sessionId : `${sessionId}/${turnId}/${runId}/${invocationId}`
  return `#${String(seq).padStart(6)}  ${at}  ${who}  ${event.fact.type.padEnd(18)} ${summarizeFact(event.fact, toolName)}`
}
