/**
 * Replaying a recorded run against the scripted model server: the answers a run's model gave, read
 * back from its facts as a script (`scriptOf`), the facts of an invocation and of the runs it
 * continued (`recordedRun`), and the first way a replay's facts differ from the recorded ones
 * (`compareRuns`), leaving out what differs between two runs of the same input by design (ids,
 * times, the provider's ids for its answers).
 */
import { catalogChangeText } from '../actors/engine.js'
import { providerWordsOf } from '../actors/openai-chat-client.js'
import { isUnusableArguments } from '../actors/tool-arguments.js'
import { catalogChanges } from '../actors/tool-catalog.js'
import { FactstateError } from '../errors.js'
import type { ExecutionSettings, Fact, FactType, ProviderRefusal, RuntimeEvent, StoredEvent, ToolCatalogSummary } from '../facts/types.js'
import { shown } from '../options.js'
import { EventLog } from '../store/event-log.js'
import { HOST_STOPPED } from '../store/recovery.js'
import { factShape } from './paths.js'
import { answer, type ScriptedAnswer, type ScriptedUsage } from './scripted-model-server.js'

const invalid = (call: string, message: string, field: string) => new FactstateError('TESTING_INVALID_OPTIONS', `${call}: ${message}`, { details: { field } })

/** The events of `events` (stored or not), checked to be events with a fact and an invocation: `TESTING_INVALID_OPTIONS` naming `field` otherwise. */
function eventsOf(events: unknown, call: string, field: string): { event: RuntimeEvent; seq?: number }[] {
  if (!Array.isArray(events)) throw invalid(call, `${field} must be a list of events, as log.invocationEvents or recordedRun gives them, not ${shown(events)}`, field)
  const checked: { event: RuntimeEvent; seq?: number }[] = []
  // By index, not map: map skips the holes of a sparse list.
  for (let index = 0; index < events.length; index += 1) {
    const item: unknown = events[index]
    const stored = item !== null && typeof item === 'object' && 'event' in item
    const event = (stored ? (item as StoredEvent).event : item) as Partial<RuntimeEvent> | null
    const fact = event !== null && typeof event === 'object' ? event.fact : undefined
    const invocationId = event !== null && typeof event === 'object' ? event.invocation?.invocationId : undefined
    if (fact === null || typeof fact !== 'object' || typeof fact.type !== 'string' || typeof invocationId !== 'string') {
      throw invalid(call, `${field}[${index}] is not an event with a fact and an invocation`, field)
    }
    const seq = stored ? (item as StoredEvent).seq : undefined
    checked.push({ event: event as RuntimeEvent, ...(typeof seq === 'number' ? { seq } : {}) })
  }
  return checked
}

/**
 * The facts a replay of invocation `invocationId` is checked against, in seq order: those of the runs
 * it continued or succeeded (its lineage, as `log.lineageEvents` reads it, each boundary's digest
 * checked) and its own. A replay re-runs each of those runs, in order, against
 * `scriptedModelServer(scriptOf(facts))`. An invocation the log never saw, or a `log` that is not an
 * open `EventLog`, is `TESTING_INVALID_OPTIONS` (`details.field`: `invocationId`, `log`); an id that
 * is no id is the log's `LOG_INVALID_ARGUMENT`.
 */
export async function recordedRun(log: EventLog, invocationId: string): Promise<StoredEvent[]> {
  if (!(log instanceof EventLog)) throw invalid('recordedRun', `log must be an open EventLog (EventLog.open or openSnapshot), not ${shown(log)}`, 'log')
  const own = await log.invocationEvents(invocationId)
  const opened = own[0]?.event
  if (opened === undefined) throw invalid('recordedRun', `the log has no invocation ${shown(invocationId)}`, 'invocationId')
  if (opened.fact.type !== 'invocation.opened' || opened.fact.input.kind === 'message') return own
  const { sessionId, runId } = opened.invocation
  const source = await log.runSource(sessionId, runId)
  if (source === undefined) throw new FactstateError('LOG_CORRUPT', `recordedRun: invocation ${invocationId} has facts but its run ${sessionId}/${runId} is not indexed`)
  return log.lineageEvents(source.boundary)
}

/** The scripted usage of an answer that recorded both counts; `null` (none reported) otherwise. */
function scriptedUsage(fact: Extract<Fact, { type: 'model.completed' }>): ScriptedUsage | null {
  const usage = fact.output.usage
  if (usage?.inputTokens === undefined || usage.outputTokens === undefined) return null
  return {
    prompt_tokens: usage.inputTokens,
    completion_tokens: usage.outputTokens,
    ...(usage.cachedInputTokens === undefined ? {} : { prompt_tokens_details: { cached_tokens: usage.cachedInputTokens } }),
    ...(usage.reasoningTokens === undefined ? {} : { completion_tokens_details: { reasoning_tokens: usage.reasoningTokens } }),
  }
}

/** The error object of a refusal as OpenAI sends it, from what the fact kept of it. */
function errorBody(fact: Extract<Fact, { type: 'model.interrupted' }>): { error: Record<string, string | number> } {
  const { code, type, param, status } = fact.provider ?? {}
  return {
    error: {
      // The provider's own words: the replay's client composes its message from them as the recording's did.
      message: fact.message === undefined ? `replayed ${fact.status}` : (providerWordsOf(fact.message, status) ?? anthropicWordsOf(fact.message, status, type) ?? fact.message),
      ...(type === undefined ? {} : { type }),
      ...(code === undefined ? {} : { code }),
      ...(param === undefined ? {} : { param }),
      // A reported error that failed at once though it named no kind (no type or code the fact kept): the
      // built-in client retries one that names none, so it named a request's status, which it does not record.
      ...(status === undefined && fact.status === 'failed' && type === undefined && code === undefined ? { status: 400 } : {}),
    },
  }
}

/**
 * The provider's own words in the message `factstate/anthropic` composed for an error event inside a
 * stream (`the provider reported an error in the stream: <type>: <words>`), or `undefined`.
 */
function anthropicWordsOf(message: string, status: number | undefined, type: string | undefined): string | undefined {
  if (status !== undefined || type === undefined) return undefined
  const head = `the provider reported an error in the stream: ${type}: `
  return message.startsWith(head) ? message.slice(head.length) : undefined
}

/** What of a failure's `provider` a replay must record alike: all but the request id, and nothing when that was all it held. */
function comparedProvider(provider: ProviderRefusal | undefined): Omit<ProviderRefusal, 'requestId'> | undefined {
  if (provider === undefined) return undefined
  const { requestId: _, ...rest } = provider
  return Object.keys(rest).length === 0 ? undefined : rest
}

/**
 * Whether `fact` records an error the provider reported inside an answer begun as HTTP 200 (no status):
 * a type, code or param kept, or, for one not retried, its `provider` or the built-in client's words
 * for such an error (`the provider reported an error in its answer: …`) without them.
 */
function reportedInAnswer(fact: Extract<Fact, { type: 'model.interrupted' }>): boolean {
  if (comparedProvider(fact.provider) !== undefined) return true
  return fact.status === 'failed' && (fact.provider !== undefined || (fact.message !== undefined && providerWordsOf(fact.message, undefined) !== undefined))
}

/** The answer that makes a replay record what `fact` recorded of an attempt that got no answer. */
function failureAnswer(fact: Extract<Fact, { type: 'model.interrupted' }>, endedClass: string | undefined): ScriptedAnswer {
  switch (fact.status) {
    case 'timed_out':
    case 'cancelled':
      // No answer: the replay's executor times it out (give it the recorded run's timeoutMs), or the test cancels the run.
      return answer.hang()
    case 'retryable_failure':
    case 'failed': {
      const status = fact.provider?.status
      if (status !== undefined) return answer.status(status, { body: errorBody(fact) })
      // What recovery writes of a model request the host stopped during: a crash, which a script cannot answer.
      if (fact.status === 'failed' && fact.message === HOST_STOPPED) return answer.hang()
      // Before the provider's fields: a body that could not be read keeps the request id of its headers.
      if (fact.status === 'failed' && endedClass === 'model_malformed') return answer.malformed()
      // An error the provider reported in an answer it had begun as a success (HTTP 200): its type, code
      // or param, or (one not retried) its words alone. A request id alone is no report: the connection
      // failed after the headers came.
      if (reportedInAnswer(fact)) return answer.malformed({ body: JSON.stringify(errorBody(fact)) })
      // A connection that failed (reset, refused): retried, and `failed` once the retries are spent.
      return answer.reset()
    }
    default: {
      const never: never = fact.status
      throw new TypeError(`unknown interrupt status ${String(never)}`)
    }
  }
}

/**
 * The scripted server's script that answers a replay of `events` as their model answered: one answer
 * for each `model.requested`, in order, for every run in `events` (pass `recordedRun`'s facts, or
 * `log.invocationEvents`' of one run). An answer is served as recorded: its text, its tool calls with
 * their ids, raw arguments and provider state (`extraContent`), its finish reason, its reasoning (and
 * `reasoningDetails`) and its usage (none where none was
 * recorded). An attempt that got no answer is scripted to fail alike: an HTTP status with the error's
 * code, type and param as recorded; a connection reset for a connection failure (headers or none); a
 * malformed body for a malformed answer (whatever request id it had); no answer at all (`answer.hang()`) for a timeout, a cancel or a crash, which
 * the replay's own executor timeout, signal or kill must bring about. The provider's ids
 * (`responseId`, `requestId`) are not replayed.
 *
 * The facts are redacted as they were recorded (the provider's key, `secrets`): the script holds
 * nothing the log does not. An empty list (an invocation the log never saw) or what is not a list of
 * events is `TESTING_INVALID_OPTIONS` (`details.field: 'events'`).
 *
 * @example
 * ```ts
 * const model = await scriptedModelServer(scriptOf(await recordedRun(log, 'invocation-7')))
 * ```
 */
export function scriptOf(events: readonly (StoredEvent | RuntimeEvent)[]): ScriptedAnswer[] {
  const checked = eventsOf(events, 'scriptOf', 'events')
  if (checked.length === 0) throw invalid('scriptOf', 'events is empty: there is no run to script (log.invocationEvents gives none for an invocation the log never saw)', 'events')
  const endedClass = new Map<string, string>()
  for (const { event } of checked) {
    if (event.fact.type === 'invocation.ended' && event.fact.outcome.status === 'failed') endedClass.set(event.invocation.invocationId, event.fact.outcome.class)
  }
  const script: ScriptedAnswer[] = []
  // Per invocation, whether its last model.requested is still unanswered: runs of a lineage come one after the other.
  const open = new Set<string>()
  for (const { event } of checked) {
    const { fact } = event
    const id = event.invocation.invocationId
    if (fact.type === 'model.requested') {
      if (open.has(id)) script.push(answer.hang())
      open.add(id)
    } else if (fact.type === 'model.completed') {
      open.delete(id)
      const { text, toolCalls, finishReason, reasoning, reasoningDetails } = fact.output
      const options = { finishReason, usage: scriptedUsage(fact), ...(reasoning === undefined ? {} : { reasoning }), ...(reasoningDetails === undefined ? {} : { reasoningDetails }) }
      script.push(
        toolCalls.length === 0
          ? answer.text(text ?? '', options)
          : answer.toolCalls(
              toolCalls.map((call) => ({ name: call.name, arguments: call.arguments, id: call.callId, ...(call.extraContent === undefined ? {} : { extraContent: call.extraContent }) })),
              { ...options, ...(text === undefined ? {} : { text }) },
            ),
      )
    } else if (fact.type === 'model.interrupted') {
      open.delete(id)
      script.push(failureAnswer(fact, endedClass.get(id)))
    }
  }
  // A request still in flight when the facts were read: not answered in the replay either.
  for (let left = open.size; left > 0; left -= 1) script.push(answer.hang())
  return script
}

/** The first difference between a recorded run's facts and a replay's (see {@link compareRuns}). */
export interface RunDifference {
  /** The position, from 0, of the facts that differ among those compared (each list in seq order, but the tool facts of a step whose calls the recording ran side by side, by call). */
  index: number
  /** The recorded fact's `seq`, when the recorded events are stored ones; absent past their end. */
  recordedSeq?: number | undefined
  /** The replayed fact's `seq`, likewise. */
  replayedSeq?: number | undefined
  /** The recorded fact's type; absent when the recorded facts ended before the replay's. */
  type?: FactType | undefined
  /**
   * What differs: a path into the fact (`fact.type`, `outcome.output.total`, `input.orderId`,
   * `output.toolCalls[0].arguments`), `run` when the fact is of another run of the lineage, or
   * `facts` when one list ended before the other.
   */
  field: string
  /** The recorded value there, the ids of the list's runs written `<run 1>`, `<run 2 session>` and so on (`undefined` when absent). */
  recorded: unknown
  /** The replay's value there, likewise. */
  replayed: unknown
  /** The difference in words, e.g. `fact 6 (tool.settled:succeeded, seq 7): outcome.output.status is "shipped" in the recording, "lost" in the replay`. */
  message: string
}

/** The settings of a run a replay must share with it; not its directory, nor where its source's boundary was. */
function comparedExecution(execution: ExecutionSettings): Record<string, unknown> {
  const { model, providerOptions, mainOutputLimit, tools, instructions } = execution
  return { model, providerOptions, mainOutputLimit, tools, instructions }
}

/** Characters of an id (`ID_PATTERN`): what may not come right before an id named in a string. */
const ID_CHAR = 'A-Za-z0-9._:-'

/** The ids of the runs in a list of events, each with the label it is compared as: a run's ids differ between a recording and its replay by design. */
interface RunLabels {
  /** Matches `<invocationId>/step-` (an operation id) and `<invocationId>.step-` (a child run's ids), longest id first. */
  operations: RegExp | undefined
  /** Each run's invocation id, as `<run k>`, and its session, turn and run ids, as `<run k session>` and so on. */
  labels: Map<string, string>
}

/**
 * The runs of `events` labelled in the order their invocation ids first appear (an invocation's own,
 * then those of the operations its `priorUnknown` names): `<run 1>`, `<run 2>`, …; a later run's ids
 * that are an earlier run's keep the earlier label.
 */
function runLabels(events: { event: RuntimeEvent }[]): RunLabels {
  const labels = new Map<string, string>()
  const invocations: string[] = []
  const add = (id: string, label: string) => {
    if (!labels.has(id)) labels.set(id, label)
  }
  const invocation = (id: string) => {
    if (invocations.includes(id)) return
    invocations.push(id)
    add(id, `<run ${invocations.length}>`)
  }
  for (const { event } of events) {
    const { invocationId, sessionId, turnId, runId } = event.invocation
    invocation(invocationId)
    const label = labels.get(invocationId) as string
    add(runId, label.replace('>', ' run>'))
    add(turnId, label.replace('>', ' turn>'))
    add(sessionId, label.replace('>', ' session>'))
    const { fact } = event
    if (fact.type === 'invocation.opened' && fact.input.kind !== 'handoff') for (const op of fact.input.priorUnknown ?? []) invocation(op.invocationId)
  }
  const escaped = [...invocations].sort((a, b) => b.length - a.length).map((id) => id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
  // After no id character: `xinv-1/step-1/0` names no operation of `inv-1`.
  const operations = escaped.length === 0 ? undefined : new RegExp(`(?<![${ID_CHAR}])(${escaped.join('|')})(?=[/.]step-)`, 'g')
  return { operations, labels }
}

/**
 * `value` with the ids of the runs of its list written as their labels (`runLabels`): in each
 * string, every operation id of theirs (`<invocationId>/step-…`) and every child run id
 * (`<invocationId>.step-…`), and a string that is one of their ids as a whole (a tool returning its
 * `context.invocation.runId`).
 */
function withoutIds(value: unknown, runs: RunLabels): unknown {
  if (typeof value === 'string') {
    const whole = runs.labels.get(value)
    if (whole !== undefined) return whole
    return runs.operations === undefined ? value : value.replace(runs.operations, (id: string) => runs.labels.get(id) as string)
  }
  if (Array.isArray(value)) return value.map((item) => withoutIds(item, runs))
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, withoutIds(item, runs)]))
  return value
}

/** What of `fact` a replay of the same input must record alike. */
function compared(fact: Fact): Record<string, unknown> {
  switch (fact.type) {
    case 'invocation.opened': {
      const { input } = fact
      return {
        type: fact.type,
        input: {
          kind: input.kind,
          content: input.content,
          ...(input.kind === 'handoff'
            ? { remainingSteps: input.pause.remainingSteps }
            : { priorUnknown: input.priorUnknown?.map((op) => ({ name: op.name, callId: op.callId, input: op.input, operationId: op.operationId })) }),
        },
        execution: comparedExecution(fact.execution),
      }
    }
    case 'model.requested':
      // Not the request's digest: the body is the transcript and settings compared here fact by fact, and it names operation ids where a note of unknown outcomes does.
      return { type: fact.type, stepId: fact.stepId, model: fact.model }
    case 'model.completed': {
      const { responseId: _, requestId: __, text, ...output } = fact.output
      // No text and empty text are the same answer.
      return { type: fact.type, stepId: fact.stepId, output: { text: text ?? '', ...output } }
    }
    case 'model.interrupted': {
      // Not its message (the client's words, timings) nor the provider's id for the request (a provider
      // that held nothing else is none: the replay's answer may come without an id, or with no headers).
      return { type: fact.type, stepId: fact.stepId, status: fact.status, provider: comparedProvider(fact.provider) }
    }
    case 'tool.rejected':
      // Not the message of arguments kept as text: it follows from that text, which is compared, and a
      // recording made by 0.6.0 or earlier has none.
      if (isUnusableArguments(fact)) {
        const { message: _, ...rest } = fact
        return rest
      }
      return { ...fact }
    case 'tool.dispatched':
    case 'tool.settled':
      // Its operation id is compared by its run's label, step and index, as every string naming an operation of a run of the list (`withoutIds`).
      return { ...fact }
    case 'hold.entered':
    case 'hold.released':
      // Where a hold came, not the host's name for it.
      return { type: fact.type }
    case 'invocation.ended': {
      const { outcome } = fact
      switch (outcome.status) {
        case 'handoff_paused':
          return { type: fact.type, outcome: { status: outcome.status, remainingSteps: outcome.pause.remainingSteps, execution: comparedExecution(outcome.pause.execution) } }
        case 'failed': {
          // A model failure's message is the provider's or the client's words; any other's is the engine's, and compared.
          const message = outcome.class.startsWith('model_') ? undefined : outcome.message
          return { type: fact.type, outcome: { status: outcome.status, class: outcome.class, message, provider: comparedProvider(outcome.provider) } }
        }
        default:
          return { type: fact.type, outcome }
      }
    }
    default: {
      const never: never = fact
      throw new TypeError(`unknown fact ${JSON.stringify(never)}`)
    }
  }
}

interface Compared {
  fact: Fact
  value: unknown
  run: number
  seq?: number
  /** For a tool fact, its step: the run's index and the step id, the same in a replay. */
  step?: string
}

const TOOL_FACTS = new Set<FactType>(['tool.dispatched', 'tool.settled', 'tool.rejected'])

/** The call index an operation id ends with. */
const callIndex = (fact: Fact) => Number((fact as { operationId: string }).operationId.split('/').at(-1))

/** The facts of `events` as compared, in their order, each tool fact with its step. */
function comparable(events: { event: RuntimeEvent; seq?: number }[]): Compared[] {
  const labels = runLabels(events)
  const runs = new Map<string, number>()
  return events.map(({ event, seq }) => {
    const id = event.invocation.invocationId
    if (!runs.has(id)) runs.set(id, runs.size)
    const run = runs.get(id) as number
    const item: Compared = { fact: event.fact, value: withoutIds(compared(event.fact), labels), run, ...(seq === undefined ? {} : { seq }) }
    if (!TOOL_FACTS.has(event.fact.type)) return item
    const { operationId } = event.fact as { operationId: string }
    const stepId = operationId.slice(operationId.startsWith(`${id}/`) ? id.length + 1 : 0, operationId.lastIndexOf('/'))
    return { ...item, step: `${run}\n${stepId}` }
  })
}

/** The steps of `items` whose calls ran side by side: a call dispatched before one dispatched earlier settled. */
function overlappedSteps(items: readonly Compared[]): Set<string> {
  const overlapped = new Set<string>()
  const unsettled = new Map<string, Set<number>>()
  for (const { fact, step } of items) {
    if (step === undefined) continue
    const open = unsettled.get(step) ?? new Set<number>()
    unsettled.set(step, open)
    if (fact.type === 'tool.dispatched') {
      if (open.size > 0) overlapped.add(step)
      open.add(callIndex(fact))
    } else if (fact.type === 'tool.settled') open.delete(callIndex(fact))
  }
  return overlapped
}

/**
 * `items` in their order, except the tool facts of each step in `relaxed`, which are put in call
 * order (a call's dispatch before its settlement): calls the recording ran side by side settle in any
 * order. A step the recording ran one call at a time keeps its interleaving, which a replay run side
 * by side does not.
 */
function inCallOrder(items: readonly Compared[], relaxed: ReadonlySet<string>): Compared[] {
  const out: Compared[] = []
  let group: Compared[] = []
  let groupOf: string | undefined
  const flush = () => {
    if (groupOf !== undefined && relaxed.has(groupOf)) {
      group.sort((a, b) => callIndex(a.fact) - callIndex(b.fact) || Number(a.fact.type !== 'tool.dispatched') - Number(b.fact.type !== 'tool.dispatched'))
    }
    out.push(...group)
    group = []
  }
  for (const item of items) {
    if (item.step !== groupOf) flush()
    groupOf = item.step
    if (item.step === undefined) out.push(item)
    else group.push(item)
  }
  flush()
  return out
}

/** The first path at which `a` and `b` differ (a member `undefined` is one absent), or `undefined`. */
function firstDifference(a: unknown, b: unknown, path: string): { path: string; a: unknown; b: unknown } | undefined {
  if (Object.is(a, b)) return undefined
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.min(a.length, b.length); i += 1) {
      const found = firstDifference(a[i], b[i], `${path}[${i}]`)
      if (found) return found
    }
    return a.length === b.length ? undefined : { path: `${path}.length`, a: a.length, b: b.length }
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const left = a as Record<string, unknown>
    const right = b as Record<string, unknown>
    for (const key of new Set([...Object.keys(left), ...Object.keys(right)])) {
      const found = firstDifference(left[key], right[key], path === '' ? key : `${path}.${key}`)
      if (found) return found
    }
    return undefined
  }
  return { path, a, b }
}

/**
 * For a difference in the tool catalog of a run's settings (`execution.tools.catalogDigest`, whose
 * digest alone names no tool), which tools the replay added, removed or changed, by each tool's own
 * digest: ` (tool "lookupOrder" changed (description or input schema))`. Nothing where that cannot be
 * known: settings recorded before per-tool digests, or catalogs that differ by no tool and no order.
 */
function catalogNote(field: string, recorded: Fact, replayed: Fact): string {
  if (!field.startsWith('execution.tools.') || recorded.type !== 'invocation.opened' || replayed.type !== 'invocation.opened') return ''
  const before: ToolCatalogSummary = recorded.execution.tools
  const after: ToolCatalogSummary = replayed.execution.tools
  // Events given by hand (a fixture, an edited export) may hold anything there: the difference is told without the note.
  const names = (value: unknown): value is string[] => Array.isArray(value) && value.every((item) => typeof item === 'string')
  if (!names(before.names) || !names(after.names) || !names(after.digests) || (before.digests !== undefined && !names(before.digests))) return ''
  const changes = catalogChanges(before, { ...after, digests: after.digests })
  if (changes === undefined) return ''
  const sameOrder = before.names.length === after.names.length && before.names.every((name, index) => after.names[index] === name)
  if (changes.added.length + changes.removed.length + changes.changed.length === 0 && sameOrder) return ''
  return ` (${catalogChangeText(changes, before, after)})`
}

/** A value as a difference's message shows it: JSON, cut past 200 characters. */
function showValue(value: unknown): string {
  if (value === undefined) return 'absent'
  const text = JSON.stringify(value) ?? String(value)
  return text.length > 200 ? `${text.slice(0, 200)}… (${text.length.toLocaleString('en-US')} characters)` : text
}

/**
 * The first way the facts of a replay differ from the recorded run's, or `undefined` when they agree:
 * the same runs, the same model answers, the same tool calls with the same names, inputs and
 * outcomes, the same rejections, holds and endings. Left out is what differs between two runs of the
 * same input by design: event ids, times, the runs' ids (each run of a list is labelled `<run k>` in
 * the order its invocation id first appears, and compared by that label: an operation id by its run,
 * step and index, also inside a tool's output, a message or `priorUnknown`, whichever run of the list
 * it names; a child run's ids, `<invocationId>.step-…`, alike; a string that is a run's invocation,
 * run, turn or session id as a whole likewise, so a string of a tool's that merely equals one is taken
 * for it. A child run id that `childRunFor` cut past 128 characters ends in a digest of the whole, and
 * is compared as it is), the run's `cwd`
 * and workspace, a continuation's source boundary, a handoff's ids, the request digests (the request
 * is made of what is compared), the provider's ids for its answers (`responseId`, `requestId`) and the
 * words of a model failure (its status, class and the provider's code, type and param are compared; a
 * `provider` that held only a `requestId` is compared as none, since the replay's answer may come
 * without one, or with no headers at all). The tool facts of a step whose calls the recording ran side by side (one dispatched before an earlier
 * one settled) are compared in call order, as such calls settle in any order: how the replay
 * interleaved them is not compared there. A step the recording ran one call at a time is compared as
 * it was interleaved, so a replay that runs its calls side by side (a higher `toolConcurrency`) is
 * named where a dispatch comes before the settlement recorded. A difference in the tool catalog names
 * the tools added, removed or changed (by each tool's digest), where both runs recorded them. Pass both lists as read (`recordedRun`, `log.invocationEvents`); what is not a list of
 * events is `TESTING_INVALID_OPTIONS` (`details.field`: `recorded`, `replayed`).
 *
 * @example
 * ```ts
 * assert.equal(compareRuns(recorded, await recordedRun(replayLog, 'replay-7'))?.message, undefined)
 * ```
 */
export function compareRuns(recorded: readonly (StoredEvent | RuntimeEvent)[], replayed: readonly (StoredEvent | RuntimeEvent)[]): RunDifference | undefined {
  const recordedItems = comparable(eventsOf(recorded, 'compareRuns', 'recorded'))
  const replayedItems = comparable(eventsOf(replayed, 'compareRuns', 'replayed'))
  // The steps whose calls the recording ran side by side: their settlements may come in another order.
  const relaxed = overlappedSteps(recordedItems)
  const left = inCallOrder(recordedItems, relaxed)
  const right = inCallOrder(replayedItems, relaxed)
  for (let index = 0; index < Math.max(left.length, right.length); index += 1) {
    const a = left[index]
    const b = right[index]
    const where = (item: Compared | undefined) => (item?.seq === undefined ? '' : `, seq ${item.seq}`)
    const head = `fact ${index}${a ? ` (${factShape(a.fact)}${where(a)})` : ''}`
    const seqs = { ...(a?.seq === undefined ? {} : { recordedSeq: a.seq }), ...(b?.seq === undefined ? {} : { replayedSeq: b.seq }) }
    if (a === undefined || b === undefined) {
      const message =
        a === undefined
          ? `${head}: the recording ends here, the replay goes on with ${factShape((b as Compared).fact)}${where(b)}`
          : `${head}: the replay ends here, after ${index} facts`
      return { index, ...seqs, ...(a ? { type: a.fact.type } : {}), field: 'facts', recorded: a?.value, replayed: b?.value, message }
    }
    if (a.run !== b.run) {
      return { index, ...seqs, type: a.fact.type, field: 'run', recorded: a.run, replayed: b.run, message: `${head}: of run ${a.run + 1} of the recording, of run ${b.run + 1} of the replay` }
    }
    const found = firstDifference(a.value, b.value, '')
    if (found) {
      const field = found.path === 'type' ? 'fact.type' : found.path
      return {
        index,
        ...seqs,
        type: a.fact.type,
        field,
        recorded: found.a,
        replayed: found.b,
        message: `${head}: ${field} is ${showValue(found.a)} in the recording, ${showValue(found.b)} in the replay${field === 'fact.type' ? ` (${factShape(b.fact)}${where(b)})` : ''}${catalogNote(field, a.fact, b.fact)}`,
      }
    }
  }
  return undefined
}
