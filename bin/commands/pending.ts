import { isFactstateError } from '../../errors.js'
import type { InvocationOutcome, ParentCall } from '../../facts/types.js'
import { type EventLog, type RunSummary, logInternals } from '../../store/event-log.js'
import { dispatchedInputs, dispatchedKey } from '../../store/dispatched-inputs.js'
import { clipJson, escapeControls } from '../../store/fact-summary.js'
import { logHeldOpen } from '../../store/writer-presence.js'
import { ALLOW_DAMAGED, type CommandIo, onLogDirectory } from '../io.js'

export const pendingHelp = `usage: factstate pending <log-directory> [--session ID] [--unanswered] [--restored] [--allow-damaged] [--json]

Lists the sessions with something pending, one line for each thing: a run still open (running in
an application, or left by a crash until 'factstate recover': said so when no process has the log open,
with the calls of tools with effects it had dispatched and not settled, each with its input), a turn sealed by a handoff whose
successor has not finished (with when it was sealed; start it, or give the turn up), tool outcomes to acknowledge (each
call with the input it was dispatched with, cut at 120 characters; check their effects; the next
message passes allowPriorUnknown), and in a log put back from a backup each
session that has not run since the backup was taken (what it did after that is not in the log: check
its tools' effects since then; its next run passes allowRestored; past 20 such sessions with nothing
else pending, a line per backup point says how many, and --restored lists each). Each line of a
child run's session says which call started it: settle it through that supervisor's recovery (a
child's paused turn: once its successor has finished, its answer goes to that supervisor; a child's
unanswered turn whose supervisor has run since the run that started it, a turn given up say: nothing
waits for it).
Sessions with nothing pending are left
out; "nothing pending" is printed when none is (and, without --unanswered, --session or --json, on
stderr how many turns ended unanswered, whenever any did, below other lines too: see --unanswered). Reads a snapshot of the log, as log and verify do.
--session ID lists that session alone, read from its own records (not every session's): its lines,
or "nothing pending" when it has nothing pending (or the log never saw it).
--unanswered also lists each session whose last run ended cancelled or failed (a shutdown's
cancelled shutdown, a crash's host_interrupted once recovered): its turn got no answer, and a
continuation from that run's end without a message finishes it. When that run already called tools
with effects that settled, the line names them ("its run's tools with effects already settled: save_note succeeded"): finish
the turn rather than ask for the message again, which would call them again; a turn cancelled
otherwise than by a shutdown (its reason not 'shutdown') may be a user's stop, which is left to the
user's next message, and its line says both. A child's turn whose supervisor has run since is
neither finished nor counted in the hint: nothing waits for it.
--json prints the sessions as one JSON array (log.pendingSessions()); each open run also has
logHeldOpen (true, false, or null: cannot be told) and, unless a process holds the log, unsettled:
its calls of tools with effects dispatched and not settled, with their inputs.
A damaged log (one whose snapshot lost facts) is listed as far as it can be read, after a warning,
and exits 1, as verify does for it, unless --allow-damaged accepts that (exit 0).
Exit codes: 0 listed, 2 usage, 1 the log is damaged, 1/4 the log refused.`

/**
 * The call that started the session's latest child run (the last run whose `invocation.opened` has a
 * `parent`): its first run's in a child's own session, the latest task's in a specialist's session
 * that each task continues with the call that gave it.
 */
async function parentOf(log: EventLog, sessionId: string): Promise<ParentCall | undefined> {
  return (await tolerantRuns(log, sessionId)).findLast((run) => run.parent !== undefined)?.parent
}

/**
 * The session's runs, or none when a run's first fact cannot be read (`LOG_CORRUPT`, which `verify`
 * names): as `pendingSessions` does, a damaged fact costs its line what it would tell, not the command.
 */
async function tolerantRuns(log: EventLog, sessionId: string): ReturnType<EventLog['runs']> {
  try {
    return await log.runs(sessionId)
  } catch (error) {
    if (isFactstateError(error, 'LOG_CORRUPT')) return []
    throw error
  }
}

/** A call of a tool with effects an open run dispatched and never settled, with the input it was dispatched with where that can be read. */
interface UnsettledCall {
  name: string
  operationId: string
  input?: unknown
}

/**
 * The calls of tools with effects (not `readOnly`) an open run dispatched and never settled, each
 * with the input it was dispatched with. Empty when there are none, or the run's record cannot be
 * read (`verify` names it); a call whose dispatch cannot be read has no `input`.
 */
async function unsettledCalls(log: EventLog, invocationId: string): Promise<UnsettledCall[]> {
  const internals = logInternals(log)
  const record = await internals.invocationRecord(invocationId).catch(() => undefined)
  const calls = (record?.uncertain ?? []).filter((op) => op.readOnly !== true)
  if (calls.length === 0) return []
  const inputs = await dispatchedInputs(calls, (id) => internals.invocationEvents(id)).catch(() => new Map<string, unknown>())
  return calls.map((op) => {
    const key = dispatchedKey(op.invocationId, op.operationId)
    return { name: op.name, operationId: op.operationId, ...(inputs.has(key) ? { input: inputs.get(key) } : {}) }
  })
}

/**
 * What an open run's line says of its unsettled calls: `; 1 tool call in flight when it stopped:
 * save_note inv-1/step-1/0 {"text":"hi"}; after recover it is an outcome to acknowledge` when no
 * process has the log open (`stopped`; the last clause only where recover can close the run, the log
 * not `recoverable` when damaged), else (it cannot be told) `; 1 tool call dispatched and not settled: …`.
 */
function inFlight(calls: UnsettledCall[], stopped: boolean, recoverable: boolean): string {
  if (calls.length === 0) return ''
  const listed = calls.map((call) => `${call.name} ${call.operationId}${'input' in call ? ` ${shortJson(call.input)}` : ''}`)
  const count = calls.length === 1 ? '1 tool call' : `${calls.length} tool calls`
  if (!stopped) return `; ${count} dispatched and not settled: ${listed.join(', ')}`
  const then = calls.length === 1 ? 'it is an outcome' : 'each is an outcome'
  return `; ${count} in flight when it stopped: ${listed.join(', ')}${recoverable ? `; after recover ${then} to acknowledge` : ''}`
}

/** How many sessions that only have not run since the backup are listed one by one (without --restored). */
const RESTORED_LISTED = 20

/**
 * The most runs "nothing pending" counts the unanswered turns among (two point reads a run: 100,000
 * runs took 5.4 s on this VM, where the sessions' records alone took 0.4 s): past it, the hint names
 * --unanswered without a count.
 */
const UNANSWERED_COUNTED = 10_000

/**
 * What an unanswered line advises for a turn whose tools with effects already settled. A shutdown's
 * cancel (the reason `shutdown`, as the README's shutdown passes it) or a failure: finish the turn.
 * Any other cancel may be a user's stop (its reason is the application's: `user-stop` in the README,
 * `signal` or `cancel` without one), which the log cannot tell from another cancel: both cases are said.
 */
function finishAdvice(outcome: InvocationOutcome): string {
  const finish = 'finish the turn (a continuation without content) rather than resend its message'
  if (outcome.status !== 'cancelled' || outcome.source === 'shutdown') return `; ${finish}`
  return `; ${cancelNamed(outcome.source)}, not a shutdown's: if the user stopped it, leave it (their next message continues the session, with these calls' results in its transcript); if not, ${finish}`
}

/**
 * A cancel as an unanswered line names it: the engine's defaults in words (`cancel`: a handle's
 * `cancel()` without a reason; `signal`: a start's signal aborted without one), any other reason quoted.
 */
function cancelNamed(source: string): string {
  if (source === 'cancel') return 'a cancel without a reason'
  if (source === 'signal') return 'a cancel by its signal, without a reason'
  return `a cancel (${source})`
}

/** How many of an unanswered run's settled calls with effects its line names (--json has them all). */
const EFFECTS_LISTED = 5

/** A value as JSON, cut at 120 characters (never inside an escape). */
const shortJson = (value: unknown): string => clipJson(JSON.stringify(value) ?? String(value), 120)

/**
 * `factstate pending <dir>`.
 *
 * @example
 * ```sh
 * npx factstate pending .factstate/app   # "session-7: paused turn turn-3 (sealed 2026-12-06T09:12:44.120Z): run run-3 waits for its successor run-4"
 * ```
 */
export async function pendingCommand(args: string[], io: CommandIo): Promise<number> {
  return onLogDirectory(args, io, pendingHelp, true, async (log, { json, flags, ids }) => {
    const sessions = await log.pendingSessions({ unanswered: flags.has('unanswered'), sessionId: ids.get('session') })
    // Whether the open runs may be running: only while a process has the log open.
    const held = sessions.some((session) => session.active.length > 0) ? await logHeldOpen(log.snapshotOf ?? '') : undefined
    if (json) {
      // An open run as its line tells it: whether a process holds the log (null: it cannot be told), and,
      // unless one does, the calls of tools with effects it dispatched and did not settle.
      const told = []
      for (const session of sessions) {
        const active = []
        for (const run of session.active) active.push({ ...run, logHeldOpen: held ?? null, ...(held === true ? {} : { unsettled: await unsettledCalls(log, run.invocationId) }) })
        told.push({ ...session, active })
      }
      // Fact text (ids, tool names, inputs) in JSON strings: C1 and bidirectional controls escaped, as `log --json` does.
      io.stdout(escapeControls(JSON.stringify(told)))
      return
    }
    // The log cannot tell a crash from a close that did not wait for a tool that ignored its signal
    // (both leave the run open, and a clean close's head anchor is also written while a log runs).
    // On a damaged log recover is refused (LOG_CORRUPT): a backup is what brings the run back.
    const damaged = logInternals(log).damage() !== undefined
    const then = damaged ? 'the log is damaged, which factstate recover refuses: restore the directory from a backup' : 'factstate recover closes it'
    const why = held === false ? `; no process has the log open: a crash, or a close that did not wait for it, left it; ${then}` : ''
    // In a big log put back from a backup, nearly every session has not run since it: past
    // RESTORED_LISTED of them with nothing else pending, one line says how many (--restored lists each).
    const restoredOnly = sessions.filter((session) => session.restored !== undefined && session.active.length === 0 && session.paused.length === 0 && session.unknown.length === 0 && session.unanswered === undefined)
    const collapse = !flags.has('restored') && !ids.has('session') && restoredOnly.length > RESTORED_LISTED
    const collapsed = new Set(collapse ? restoredOnly.map((session) => session.sessionId) : [])
    // Each supervisor's last run, read once however many of its children's turns ask.
    const lastRuns = new Map<string, Promise<RunSummary | undefined>>()
    const lastRunOf = (supervisor: string) => {
      let last = lastRuns.get(supervisor)
      if (last === undefined) lastRuns.set(supervisor, (last = tolerantRuns(log, supervisor).then((runs) => runs.at(-1))))
      return last
    }
    for (const { sessionId, active, paused, unknown, restored, unanswered } of sessions) {
      if (collapsed.has(sessionId)) continue
      if (restored !== undefined) {
        const when = new Date(restored.takenAt).toISOString()
        io.stdout(escapeControls(`${sessionId}: has not run since the backup taken at ${when} (seq ${restored.highWater}): check its tools' effects since then; its next run passes allowRestored`))
      }
      // A child run's session is settled through its supervisor's recovery, not on its own: its lines say whose child it is.
      const parent = active.length > 0 || paused.length > 0 || unknown.length > 0 || unanswered?.outcome !== undefined ? (unanswered?.parent ?? (await parentOf(log, sessionId))) : undefined
      const child = parent === undefined ? '' : `; a child run of ${parent.operationId} (session ${parent.invocation.sessionId}): settle it through its supervisor's recovery`
      // A child sealed for a reviewer: its successor alone leaves the supervisor that waits for it without the answer.
      const pausedChild = parent === undefined ? '' : `; a child run of ${parent.operationId} (session ${parent.invocation.sessionId}): once its successor has finished, tell its supervisor the answer`
      for (const run of active) {
        // Unless a process holding the log may be running them: the calls of tools with effects dispatched and not settled, whose effects may have happened.
        const flying = held === true ? '' : inFlight(await unsettledCalls(log, run.invocationId), held === false, !damaged)
        io.stdout(escapeControls(`${sessionId}: open run ${run.runId} (${run.invocationId}, turn ${run.turnId})${why}${flying}${child}`))
      }
      for (const turn of paused) {
        // When it was sealed: what a review that may expire is measured from.
        const sealed = turn.sealedAt === undefined ? '' : ` (sealed ${new Date(turn.sealedAt).toISOString()})`
        io.stdout(escapeControls(`${sessionId}: paused turn ${turn.turnId}${sealed}: run ${turn.runId} waits for its successor ${turn.intent.successorRunId} (${turn.intent.successorInvocationId}, claim ${turn.intent.claimId})${pausedChild}`))
      }
      if (unknown.length > 0) {
        // With the input each call was dispatched with (cut at 120 characters: --json has it whole), what the check is about.
        const ops = unknown.map((op) => `${op.name} ${op.operationId}${op.input === undefined ? '' : ` ${shortJson(op.input)}`}`)
        io.stdout(escapeControls(`${sessionId}: ${unknown.length} tool outcome(s) to acknowledge: ${ops.join(', ')}${child}`))
      }
      if (unanswered?.outcome !== undefined) {
        const { outcome } = unanswered
        const ended = outcome.status === 'cancelled' ? `cancelled ${outcome.source}` : outcome.status === 'failed' ? `failed ${outcome.class}` : outcome.status
        // What the run already did: a resent message would do it again, under new operation ids.
        const effects = unanswered.effects ?? []
        const listed = effects.slice(0, EFFECTS_LISTED).map((effect) => `${effect.name} ${effect.status}`)
        if (effects.length > EFFECTS_LISTED) listed.push(`${effects.length - EFFECTS_LISTED} more (--json lists them)`)
        // A supervisor (on this log) that has run since the run that started the child no longer waits
        // for it (a child's turn given up, its supervisor told so): nothing to settle through it, nor to finish.
        const since = parent === undefined ? undefined : await lastRunOf(parent.invocation.sessionId)
        const goneOn = parent !== undefined && since !== undefined && since.runId !== parent.invocation.runId
        const left = goneOn ? `; a child run of ${parent.operationId} (session ${parent.invocation.sessionId}), whose supervisor has run since (run ${since.runId}): nothing waits for this turn` : child
        const settled = effects.length === 0 ? '' : `; its run's tools with effects already settled: ${listed.join(', ')}`
        // A child's turn is never finished or left on its own (continued alone it would have no parent
        // and answer no one): its line gives only the child's advice.
        const advice = effects.length === 0 || parent !== undefined ? '' : finishAdvice(outcome)
        io.stdout(escapeControls(`${sessionId}: unanswered turn ${unanswered.turnId}: run ${unanswered.runId} (${unanswered.invocationId}) ended ${ended} at seq ${unanswered.lastSeq}${settled}${advice}${left}`))
      }
    }
    if (collapse) {
      // A line per backup point: a log backed up again after some of its sessions ran keeps the
      // earlier point for those that have not.
      const byPoint = new Map<string, { highWater: number; takenAt: number; sessions: number }>()
      for (const { restored } of restoredOnly) {
        if (restored === undefined) continue
        const key = `${restored.highWater}:${restored.takenAt}`
        const group = byPoint.get(key) ?? { highWater: restored.highWater, takenAt: restored.takenAt, sessions: 0 }
        group.sessions += 1
        byPoint.set(key, group)
      }
      for (const { highWater, takenAt, sessions } of [...byPoint.values()].sort((a, b) => a.highWater - b.highWater)) {
        const when = new Date(takenAt).toISOString()
        const count = sessions === 1 ? '1 session with nothing else pending has' : `${sessions.toLocaleString('en-US')} sessions with nothing else pending have`
        io.stdout(`${count} not run since the backup taken at ${when} (seq ${highWater}): check their tools' effects since then; each one's next run passes allowRestored (--restored lists them)`)
      }
    }
    if (sessions.length === 0) io.stdout('nothing pending')
    // A shutdown's cancelled runs leave nothing pending, but their turns got no answer: said on
    // stderr (stdout stays as a script reads it), below whatever else is pending too (a shutdown that
    // left a run open cut other turns short), when the run index is small enough to count them.
    if (!flags.has('unanswered') && !ids.has('session')) {
      // A hint, not the answer: a run record that cannot be read (a damaged log, which the lines
      // above did not need) costs it the count, never the exit code (what was listed stands).
      const unanswered = await logInternals(log)
        .unansweredCount(UNANSWERED_COUNTED)
        .catch((error: unknown) => {
          if (isFactstateError(error, 'LOG_CORRUPT')) return undefined
          throw error
        })
      // Without a count, the reminder only where there is nothing else to read: it may be about no turn at all.
      if (unanswered === undefined) {
        if (sessions.length === 0) io.stderr('hint: turns that ended cancelled or failed (a shutdown, a crash) are not pending; factstate pending --unanswered lists them')
      } else if (unanswered > 0) io.stderr(`hint: ${unanswered === 1 ? '1 turn' : `${unanswered.toLocaleString('en-US')} turns`} ended unanswered (cancelled or failed): factstate pending --unanswered lists ${unanswered === 1 ? 'it' : 'them'}`)
    }
  }, ['unanswered', 'restored', ALLOW_DAMAGED], ['session'])
}
