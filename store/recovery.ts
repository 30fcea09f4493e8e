import { FactstateError, isFactstateError } from '../errors.js'
import { readOptions } from '../options.js'
import type { Fact, Invocation, RunBoundary, RuntimeEvent, UncertainOperation } from '../facts/types.js'
import { type EventLog, logInternals } from './event-log.js'
import type { InvocationRecord } from './projection.js'
import type { BackupPoint } from './backup-point.js'
import { messageOf } from './encoding.js'

/** An invocation recovery closed (see `recoverInvocations`' `onClosed`). */
export interface RecoveredInvocation {
  /** The invocation closed. */
  invocation: Invocation
  /** How it was ended: `failed` with class `host_interrupted` or `outcome_unknown` (with a message naming the tools). */
  outcome: { status: 'failed'; class: 'host_interrupted' | 'outcome_unknown'; message: string }
  /**
   * The tool operations it left unsettled, each with the `input` it was dispatched with (what to
   * check the effect by) and `readOnly` when its tool was declared so.
   */
  uncertainOperations: (UncertainOperation & { readOnly?: true })[]
  /** Where its run now ends: the source a continuation of it starts from (`work: { kind: 'continuation', source }`). */
  boundary: RunBoundary
  /**
   * In a log put back from a backup (`log.restoredFrom()`), when its session has not run since the
   * backup's point: what the session did after it, this run's continuation in another process
   * included, is not in the log, and nothing uncertain here says it did nothing. Its next run must
   * pass `work.allowRestored: true` once that is checked (an `Engine` refuses it until then).
   */
  restored?: BackupPoint
}

/** Options of {@link recoverInvocations}. */
export interface RecoverOptions {
  /** The clock for the closing facts' `recordedAt` (default `Date.now`). */
  now?: (() => number) | undefined
  /**
   * Called for each invocation closed, once its closing facts are durable, with how it ended and
   * its run's new boundary: what an application needs to continue the runs a crash cut short. What
   * it throws, `recoverInvocations` rejects with once every closing is written.
   */
  onClosed?: ((closed: RecoveredInvocation) => void | Promise<void>) | undefined
}

/** What the `model.interrupted` of a model request a crash cut short says (`closingFacts`). */
export const HOST_STOPPED = 'the host stopped while the model request was in flight'

/** The facts that close an invocation a crash left open (DESIGN §7). No settlement is invented. */
export function closingFacts(record: InvocationRecord): Fact[] {
  const facts: Fact[] = []
  for (const stepId of record.openSteps) {
    facts.push({ type: 'model.interrupted', stepId, status: 'failed', message: HOST_STOPPED })
  }
  if (record.uncertain.length > 0) {
    const names = record.uncertain.map((op) => `${op.name} (${op.operationId})`).join(', ')
    facts.push({
      type: 'invocation.ended',
      outcome: { status: 'failed', class: 'outcome_unknown', message: `the host stopped while these tools ran: ${names}` },
    })
  } else {
    facts.push({ type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted', message: 'the host stopped' } })
  }
  return facts
}

/** Refuses a closing whose invocation ended after the call that stages it looked. */
const closedMeanwhile = new Error('closed meanwhile')

/**
 * Closes every invocation a crash left open and returns how many it closed. Invocations driven
 * by a live actor of this process are left alone. A second call returns 0 and writes nothing.
 *
 * @example
 * ```ts
 * const log = await EventLog.open(dir)
 * const closed = await recoverInvocations(log) // 0 after a clean shutdown
 * // Or, to continue what was cut short:
 * await recoverInvocations(log, { onClosed: ({ invocation, boundary }) => cutShort.push({ invocation, boundary }) })
 * ```
 */
export async function recoverInvocations(log: EventLog, options: RecoverOptions = {}): Promise<number> {
  const { now: given = Date.now, onClosed } = checkOptions(options)
  // The application's clock: what it throws is this call's refusal (nothing of that closing is written), not a bare error.
  const now = (): number => {
    try {
      return given()
    } catch (error) {
      throw new FactstateError('LOG_INVALID_ARGUMENT', `recoverInvocations' now threw: ${messageOf(error)}`, { cause: error })
    }
  }
  let internals: ReturnType<typeof logInternals>
  try {
    internals = logInternals(log)
  } catch {
    throw new FactstateError('LOG_INVALID_ARGUMENT', `recoverInvocations takes an EventLog (from EventLog.open), not ${describeValue(log)}`)
  }
  if (log.snapshotOf !== undefined) {
    throw new FactstateError('LOG_READ_ONLY', `this is a read-only snapshot of the log at ${log.snapshotOf}: recover the log itself, in the process that has it open`)
  }
  const reports: Promise<void>[] = []
  // All at once, not one after the other: the closings share group commits (one sync per group, not per invocation).
  const outcomes = await Promise.allSettled(
    internals
      .openInvocations()
      .filter((record) => !internals.live.has(record.invocation.invocationId))
      .map(async (record) => {
        const events: RuntimeEvent[] = closingFacts(record).map((fact, index) => ({
          id: `${record.invocation.invocationId}/recovered/${record.facts + index + 1}`,
          recordedAt: now(),
          invocation: record.invocation,
          fact,
        }))
        try {
          // Checked inside the group commit: a call running beside this one may have staged the same
          // closing facts already, and their repeat would be acknowledged as if this call wrote them.
          await internals.appendAll(events, async (view) => {
            if ((await view.invocation(record.invocation.invocationId))?.terminal !== null) throw closedMeanwhile
          })
        } catch (error) {
          // Another call (or a live actor) closed it first: nothing left to do for this one.
          if (error === closedMeanwhile || isFactstateError(error, 'LOG_SEALED') || isFactstateError(error, 'LOG_CONFLICT')) return 0
          throw error
        }
        if (onClosed) reports.push(report(log, record, events, onClosed))
        return 1
      }),
  )
  let closed = 0
  for (const outcome of outcomes) {
    if (outcome.status === 'rejected') throw outcome.reason
    closed += outcome.value
  }
  for (const outcome of await Promise.allSettled(reports)) if (outcome.status === 'rejected') throw outcome.reason
  return closed
}

/** The options, each read once: anything but `{ now?, onClosed? }` functions is `LOG_INVALID_ARGUMENT`, before anything is written. */
function checkOptions(options: unknown): RecoverOptions {
  const checked = readOptions(options, ['now', 'onClosed'], { call: 'recoverInvocations', code: 'LOG_INVALID_ARGUMENT', details: (field) => ({ field }) })
  for (const [key, value] of Object.entries(checked)) {
    if (typeof value !== 'function') throw new FactstateError('LOG_INVALID_ARGUMENT', `recoverInvocations' ${key} must be a function`, { details: { field: key } })
  }
  return checked as RecoverOptions
}

/** A short name for what was given where a log was expected. */
function describeValue(value: unknown): string {
  if (value === null) return 'null'
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)} (open the log first)`
  return typeof value === 'object' ? 'an object that is not one' : typeof value
}

/** Tells `onClosed` how `record`'s invocation was closed by `events`, and where its run now ends. */
async function report(log: EventLog, record: InvocationRecord, events: RuntimeEvent[], onClosed: NonNullable<RecoverOptions['onClosed']>): Promise<void> {
  const { invocation } = record
  const ended = events.at(-1)?.fact
  if (ended?.type !== 'invocation.ended') throw new TypeError('a closing ends its invocation')
  const { outcome } = ended
  if (outcome.status !== 'failed' || (outcome.class !== 'host_interrupted' && outcome.class !== 'outcome_unknown') || outcome.message === undefined) {
    throw new TypeError('a closing ends its invocation failed host_interrupted or outcome_unknown')
  }
  const source = await log.runSource(invocation.sessionId, invocation.runId)
  if (source === undefined) throw new TypeError(`run ${invocation.runId} of a closed invocation is not in the log`)
  let uncertainOperations: RecoveredInvocation['uncertainOperations'] = structuredClone(record.uncertain)
  if (uncertainOperations.length > 0) {
    // The invocation's record keeps its operations without their inputs: its dispatches hold them.
    const inputs = new Map<string, unknown>()
    for (const { event } of await logInternals(log).invocationEvents(invocation.invocationId)) {
      if (event.fact.type === 'tool.dispatched') inputs.set(event.fact.operationId, event.fact.input)
    }
    uncertainOperations = uncertainOperations.map((op) => (inputs.has(op.operationId) ? { ...op, input: inputs.get(op.operationId) } : op))
  }
  const restored = await logInternals(log).restoredSince(invocation.sessionId)
  await onClosed({
    invocation: structuredClone(invocation),
    outcome: { status: 'failed', class: outcome.class as 'host_interrupted' | 'outcome_unknown', message: outcome.message },
    uncertainOperations,
    boundary: source.boundary,
    ...(restored === undefined ? {} : { restored: { ...restored } }),
  })
}
