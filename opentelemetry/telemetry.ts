/**
 * Spans and metrics read from a log's facts by a follower (`log.events({ follow: true })`): what the
 * log records is what is traced, at the times the facts record, whichever process ran the work.
 */
import { type Attributes, type Context, type Counter, createNoopMeter, diag, type Histogram, type HrTime, type Meter, ROOT_CONTEXT, type Span, SpanKind, type SpanOptions, type SpanStatus, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api'
import { FactstateError, isFactstateError } from '../errors.js'
import type { ExecutionSettings, FactOf, Invocation, StoredEvent } from '../facts/types.js'
import { kindOf, readOptions } from '../options.js'
import type { EventLog } from '../store/event-log.js'

/** What {@link telemetryFromLog} takes besides its tracer and meter. */
interface TelemetryOptionsBase {
  /** The first seq to read, from 1 (default: the log's next fact, `log.head().highWater + 1`). */
  from?: number | undefined
  /**
   * `gen_ai.provider.name` of the runs' `invoke_agent` and `chat` spans and of their model
   * measurements: the facts do not record the provider (a run's `baseUrl` is not recorded), so it is
   * yours to say. A name, 1–64 characters from `[A-Za-z0-9._-]` (the conventions' well-known values:
   * `openai`, `anthropic`, `gcp.gemini`, `aws.bedrock`, `azure.ai.openai`, `deepseek`, `groq`,
   * `mistral_ai`, `x_ai`, …), or a function of the run that answers one (or `undefined`: none), called
   * once per run. Absent: no `gen_ai.provider.name`.
   */
  providerName?: string | ((run: TelemetryRun) => string | undefined) | undefined
  /**
   * Attributes of your own put on every span and every metric data point of this follower: what
   * tells its log apart from the others feeding the same tracer and meter (`{ 'tenant.id': 'acme' }`).
   * Each value a string, a finite number or a boolean, or an array of one of those kinds; keys not
   * empty, and none of the library's own (`gen_ai.*`, `factstate.*`, `error.type`,
   * `http.response.status_code`). Copied when the follower starts. Absent: none.
   */
  attributes?: Readonly<Record<string, string | number | boolean | readonly string[] | readonly number[] | readonly boolean[]>> | undefined
}

/** What {@link telemetryFromLog} takes: a tracer, a meter, or both. */
export type LogTelemetryOptions = TelemetryOptionsBase &
  (
    | {
        /** Where the spans go: a tracer of your OpenTelemetry SDK (`trace.getTracer('factstate')`). */
        tracer: Tracer
        /** Where the metrics go: a meter of your OpenTelemetry SDK (`metrics.getMeter('factstate')`). */
        meter?: Meter | undefined
      }
    | {
        /** Where the spans go: a tracer of your OpenTelemetry SDK (`trace.getTracer('factstate')`). */
        tracer?: Tracer | undefined
        /** Where the metrics go: a meter of your OpenTelemetry SDK (`metrics.getMeter('factstate')`). */
        meter: Meter
      }
  )

/** The run a `providerName` function is asked about. */
export interface TelemetryRun {
  /** The run's ids. */
  invocation: Invocation
  /** The model it asks for (its execution settings' `model`; a run opened before `from`: its first model attempt's). */
  model: string
}

/** A running follower of {@link telemetryFromLog}. */
export interface LogTelemetry {
  /**
   * Settles when the follower ends: resolves once the log closed (after every fact written before the
   * close) or `stop()` was called; rejects with the reader's error: the log's failure (`LOG_IO`) once
   * every durable fact was read, or `LOG_CLOSED` when the log closed while the follower was reading it
   * back (more than 16,384 facts behind). Marked handled: a service that never awaits it is not ended
   * by an unhandled rejection (watch `log.failure()` for its health).
   */
  readonly done: Promise<void>
  /** Ends the follower at once (spans still open end as described at `telemetryFromLog`); resolves when it has ended, whatever `done` settled with. */
  stop(): Promise<void>
  /** The seq of the last fact the follower has read (its `from` less 1 before it read any). */
  highWater(): number
}

const OPTIONS = ['tracer', 'meter', 'from', 'providerName', 'attributes'] as const
const invalidOptions = (message: string, field: string) => new FactstateError('OPENTELEMETRY_INVALID_OPTIONS', `telemetryFromLog: ${message}`, { details: { field } })

/** A `gen_ai.provider.name`: a name, never a URL (no `:`, `/` or `@`: neither a credential nor a path can be in one). */
const PROVIDER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/
/** The GenAI conventions' well-known `gen_ai.provider.name` of API hosts that serve that provider alone: the hint for a `providerName` given as a URL. */
const PROVIDER_OF_HOST: ReadonlyMap<string, string> = new Map([
  ['api.openai.com', 'openai'],
  ['api.anthropic.com', 'anthropic'],
  ['generativelanguage.googleapis.com', 'gcp.gemini'],
  ['api.deepseek.com', 'deepseek'],
  ['api.groq.com', 'groq'],
  ['api.mistral.ai', 'mistral_ai'],
  ['api.x.ai', 'x_ai'],
  ['api.perplexity.ai', 'perplexity'],
])

/** Why `value` is no `gen_ai.provider.name`, never quoting it (a URL may carry a key); `undefined` when it is one. */
function notAProviderName(value: unknown): string | undefined {
  if (typeof value === 'string' && PROVIDER_NAME.test(value)) return undefined
  if (typeof value === 'string' && /^https?:\/\//i.test(value)) {
    let host: string | undefined
    try {
      host = new URL(value).hostname.toLowerCase()
    } catch {
      host = undefined
    }
    const known = host === undefined ? undefined : PROVIDER_OF_HOST.get(host)
    return `a name, not a URL (a URL's path or credentials never go in an attribute)${known === undefined ? '' : `: the conventions' name for ${host} is '${known}'`}`
  }
  return `a name, 1–64 characters from [A-Za-z0-9._-] starting with a letter or digit ('openai', 'anthropic', 'gcp.gemini'), not ${kindOf(value)}`
}

/** Keys the follower sets itself: an `attributes` key among them is refused rather than overridden or overriding. */
const OWN_PREFIXES = ['gen_ai.', 'factstate.'] as const
const OWN_KEYS: ReadonlySet<string> = new Set(['error.type', 'http.response.status_code'])

/** A key as told in a refusal: quoted, at most 64 characters of it. */
const shownKey = (key: string) => JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)

/** What is wrong with one value of `attributes`, or `undefined` when it is an attribute value (a primitive, or an array of one kind of primitive). */
function notAnAttributeValue(value: unknown): string | undefined {
  const primitive = (item: unknown) => typeof item === 'string' || typeof item === 'boolean' || (typeof item === 'number' && Number.isFinite(item))
  if (primitive(value)) return undefined
  if (typeof value === 'number') return 'a number that is not finite'
  if (!Array.isArray(value)) return kindOf(value)
  const bad = value.findIndex((item) => !primitive(item))
  if (bad !== -1) return `an array whose item ${bad} is ${typeof value[bad] === 'number' ? 'a number that is not finite' : kindOf(value[bad])}`
  if (new Set(value.map((item) => typeof item)).size > 1) return 'an array of mixed kinds'
  return undefined
}

/** The `attributes` option, checked and copied (arrays too: the caller's later changes are not seen); `{}` when absent. */
function constantAttributes(given: unknown): Attributes {
  if (given === undefined) return {}
  if (typeof given !== 'object' || given === null || Array.isArray(given)) throw invalidOptions(`attributes must be an object of attribute values ({ 'tenant.id': 'acme' }), not ${kindOf(given)}`, 'attributes')
  const copied: Attributes = {}
  try {
    for (const [key, value] of Object.entries(given)) {
      if (key === '') throw invalidOptions('attributes has an empty key', 'attributes')
      if (OWN_KEYS.has(key) || OWN_PREFIXES.some((prefix) => key.startsWith(prefix))) {
        throw invalidOptions(`attributes key ${shownKey(key)} is one the follower sets itself (gen_ai.*, factstate.*, error.type, http.response.status_code): choose a key of your own ('tenant.id')`, 'attributes')
      }
      const wrong = notAnAttributeValue(value)
      if (wrong !== undefined) throw invalidOptions(`attributes key ${shownKey(key)} must be a string, a finite number, a boolean or an array of one of those kinds, not ${wrong}`, 'attributes')
      copied[key] = Array.isArray(value) ? [...value] : (value as string | number | boolean)
    }
  } catch (error) {
    if (error instanceof FactstateError) throw error
    // A getter that throws, a proxy that refuses to list or give its members: not attributes.
    throw invalidOptions(`attributes could not be read: ${error instanceof Error ? error.message : String(error)}`, 'attributes')
  }
  return copied
}

/** The buckets the GenAI semantic conventions advise for `gen_ai.client.operation.duration`, in seconds. */
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
/** The buckets the GenAI semantic conventions advise for `gen_ai.client.token.usage`. */
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]

/** A recordedAt (milliseconds since the epoch) as OpenTelemetry's time, exactly (a number would be guessed at: epoch or `performance.now()`). */
function hrTime(ms: number): HrTime {
  const seconds = Math.floor(ms / 1000)
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)]
}

/** A model attempt or a tool call under way: its span (none when the run's opening was not read) and first fact's time. */
interface Begun {
  span: Span | undefined
  at: number
  attributes: Attributes
}

/** A run the follower is following: its span and what it has under way. */
interface Followed {
  span: Span | undefined
  context: Context
  model: Map<string, Begun>
  tools: Map<string, Begun>
  /** Its `gen_ai.provider.name` once asked (`null`: not asked yet, as for a run opened before `from` until its first model attempt). */
  provider: string | undefined | null
  /** The request attributes of its recorded settings (none for a run opened before `from`). */
  request: Attributes
}

/** The `providerName` option, checked: a name, a function of the run, or none. */
type ProviderNameOption = LogTelemetryOptions['providerName']

/** The sampling settings a run's `providerOptions` may hold (sent at the top level of every request body), by their GenAI attribute: numbers only. */
const REQUEST_NUMBERS: readonly (readonly [string, string])[] = [
  ['temperature', 'gen_ai.request.temperature'],
  ['top_p', 'gen_ai.request.top_p'],
  ['top_k', 'gen_ai.request.top_k'],
  ['frequency_penalty', 'gen_ai.request.frequency_penalty'],
  ['presence_penalty', 'gen_ai.request.presence_penalty'],
]

/**
 * The request attributes a run's recorded settings hold for certain: `mainOutputLimit` (sent as
 * `max_tokens`) and, of its `providerOptions`, the sampling numbers, `seed` and `n` (a choice count
 * other than 1). Nothing else of the options, which may carry any text.
 */
function requestAttributes(execution: ExecutionSettings): Attributes {
  const attributes: Attributes = {}
  if (typeof execution.mainOutputLimit === 'number') attributes['gen_ai.request.max_tokens'] = execution.mainOutputLimit
  const options: unknown = execution.providerOptions
  if (typeof options !== 'object' || options === null) return attributes
  const own = (key: string): unknown => (Object.hasOwn(options, key) ? (options as Record<string, unknown>)[key] : undefined)
  for (const [key, name] of REQUEST_NUMBERS) {
    const value = own(key)
    if (typeof value === 'number' && Number.isFinite(value)) attributes[name] = value
  }
  const seed = own('seed')
  if (typeof seed === 'number' && Number.isSafeInteger(seed)) attributes['gen_ai.request.seed'] = seed
  const choices = own('n')
  if (typeof choices === 'number' && Number.isSafeInteger(choices) && choices !== 1) attributes['gen_ai.request.choice.count'] = choices
  return attributes
}

interface Instruments {
  runsStarted: Counter
  runsEnded: Counter
  duration: Histogram
  tokens: Histogram
}

/** The instruments, each measurement given the `attributes` option's too (the measurement's own after them: they cannot clash, see `constantAttributes`). */
function instrumentsOf(meter: Meter, constant: Attributes): Instruments {
  const made = madeInstruments(meter)
  if (Object.keys(constant).length === 0) return made
  const counter = (inner: Counter): Counter => ({ add: (value, attributes, context) => inner.add(value, { ...constant, ...attributes }, context) })
  const histogram = (inner: Histogram): Histogram => ({ record: (value, attributes, context) => inner.record(value, { ...constant, ...attributes }, context) })
  return { runsStarted: counter(made.runsStarted), runsEnded: counter(made.runsEnded), duration: histogram(made.duration), tokens: histogram(made.tokens) }
}

function madeInstruments(meter: Meter): Instruments {
  return {
    runsStarted: meter.createCounter('factstate.runs.started', { description: 'Runs opened (invocation.opened facts)', unit: '{run}' }),
    runsEnded: meter.createCounter('factstate.runs.ended', { description: 'Runs ended (invocation.ended facts), by outcome', unit: '{run}' }),
    duration: meter.createHistogram('gen_ai.client.operation.duration', {
      description: 'GenAI operation duration: a model attempt (chat) or a tool call (execute_tool), from the facts',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    }),
    tokens: meter.createHistogram('gen_ai.client.token.usage', { description: 'Tokens used by a model answer, as the provider reported them', unit: '{token}', advice: { explicitBucketBoundaries: TOKEN_BUCKETS } }),
  }
}

/** `error.type` and status of a run's outcome; the class of a failure, `cancelled` for a cancel. */
function outcomeAttributes(outcome: FactOf<'invocation.ended'>['outcome']): Attributes {
  switch (outcome.status) {
    case 'failed':
      return { 'factstate.outcome.status': 'failed', 'factstate.outcome.class': outcome.class, 'error.type': outcome.class }
    case 'cancelled':
      return { 'factstate.outcome.status': 'cancelled', 'error.type': 'cancelled' }
    default:
      return { 'factstate.outcome.status': outcome.status }
  }
}

/**
 * Follows `log` from `from` (default: its next fact) and turns its facts into OpenTelemetry spans on
 * `tracer` and metrics on `meter` (either or both; your SDK's: this configures none). Nothing of the
 * runs' contents (messages, tool inputs and outputs, answers, failure messages) is put in an attribute.
 *
 * Spans: one per run, `invoke_agent`, from its `invocation.opened` to its `invocation.ended`; under
 * it one per model attempt, `chat <model>` (`model.requested` to `model.completed` or
 * `model.interrupted`) and one per tool call, `execute_tool <name>` (`tool.dispatched` to
 * `tool.settled`; a `tool.rejected` call is a span of no duration, `execute_tool` alone for a tool the
 * catalog does not have, whose name is the model's own words), each started and ended at its
 * facts' `recordedAt`. A child run's span is under the tool call that started it while that call's
 * span is open. What a run leaves unfinished when it ends (a call whose outcome is unknown) ends
 * with it. Holds are events of the run's span. The run's and its attempts' spans carry
 * `gen_ai.provider.name` when `providerName` gives one (the facts do not record the provider), and
 * what the run's recorded settings say of its requests: `gen_ai.request.max_tokens` (its
 * `mainOutputLimit`) and the sampling numbers of its `providerOptions` (`temperature`, `top_p`,
 * `top_k`, `frequency_penalty`, `presence_penalty`, `seed`, `n`). A run whose `invocation.opened` is before `from` has
 * no span (nor its model attempts and tool calls); its facts still feed the metrics. When the
 * follower ends, the spans still open end at the `recordedAt` of the last fact it read, with
 * `factstate.unfinished`. An exception of the tracer or the meter (a span processor's, a sampler's)
 * is reported to OpenTelemetry's `diag.error` and the follower goes on. Given OpenTelemetry's no-op
 * meter (`metrics.getMeter` before a meter provider was registered: it records nothing, ever), it
 * says so once on `diag.warn`.
 *
 * `attributes`, constant attributes of yours (`{ 'tenant.id': 'acme' }`: what tells logs apart when
 * many feed one tracer and meter), are put on every span it starts and every measurement.
 *
 * `OPENTELEMETRY_INVALID_OPTIONS` (`details.field`) for options it cannot use (a `providerName` that
 * is no name: a URL is refused, unquoted; `attributes` whose value is no attribute value or whose
 * key is one of the follower's own) and for a snapshot
 * (`details.field` `log`: it gets no new facts); a `from` past the log's next fact is
 * `LOG_INVALID_ARGUMENT`, as `log.events` refuses it.
 */
export function telemetryFromLog(log: EventLog, options: LogTelemetryOptions): LogTelemetry {
  const given = readOptions(options, OPTIONS, { call: 'telemetryFromLog', code: 'OPENTELEMETRY_INVALID_OPTIONS', details: (field) => ({ field }) })
  if (typeof (log as { events?: unknown } | null | undefined)?.events !== 'function' || typeof (log as { head?: unknown }).head !== 'function') {
    throw invalidOptions(`log must be an EventLog (EventLog.open), not ${kindOf(log)}`, 'log')
  }
  const { tracer, meter, from, providerName, attributes } = given
  // `null` is no tracer or meter given: refused with the rest, not a TypeError.
  if (tracer !== undefined && typeof (tracer as { startSpan?: unknown } | null)?.startSpan !== 'function') {
    throw invalidOptions(`tracer must be an OpenTelemetry Tracer (trace.getTracer(name)), not ${kindOf(tracer)}`, 'tracer')
  }
  if (meter !== undefined && (typeof (meter as { createCounter?: unknown } | null)?.createCounter !== 'function' || typeof (meter as { createHistogram?: unknown }).createHistogram !== 'function')) {
    throw invalidOptions(`meter must be an OpenTelemetry Meter (metrics.getMeter(name)), not ${kindOf(meter)}`, 'meter')
  }
  if (tracer === undefined && meter === undefined) throw invalidOptions('give a tracer, a meter or both: with neither there is nothing to record', 'tracer')
  if (providerName !== undefined && typeof providerName !== 'function') {
    const wrong = notAProviderName(providerName)
    if (wrong !== undefined) throw invalidOptions(`providerName must be ${wrong}, or a function of the run that answers one`, 'providerName')
  }
  const constant = constantAttributes(attributes)
  if (from !== undefined && (typeof from !== 'number' || !Number.isSafeInteger(from) || from < 1)) {
    throw invalidOptions(`from must be a seq, a whole number from 1, not ${kindOf(from)}`, 'from')
  }
  // The API's no-op meter (what `metrics.getMeter` gives before a meter provider is registered) records
  // nothing, ever, and nothing else would say so. Compared by identity: it is one object, so a warning
  // is never given for a meter that records.
  if (meter !== undefined && meter === createNoopMeter()) {
    warn("the meter is OpenTelemetry's no-op meter, which records nothing, ever: it was taken (metrics.getMeter) before a meter provider was registered, or none is; take it once your SDK has started")
  }
  const start = (from as number | undefined) ?? log.head().highWater + 1
  // Made before the reader: a meter that throws here leaves no follower registered on the log.
  const recorder = new Recorder(tracer as Tracer | undefined, meter === undefined ? undefined : instrumentsOf(meter as Meter, constant), providerName as ProviderNameOption, constant)
  // Taken now: every fact made durable from here on is read, whenever the loop below starts.
  const reader = followed(log, start)
  let read = start - 1
  const done = (async () => {
    try {
      for await (const stored of reader) {
        read = stored.seq
        recorder.record(stored)
      }
    } finally {
      recorder.endAll()
    }
  })()
  done.catch(() => undefined)
  return {
    done,
    async stop() {
      await reader.return()
      await done.catch(() => undefined)
    },
    highWater: () => read,
  }
}

/** `log.events({ from, follow: true })`; a snapshot's refusal told as this call's, naming the log (a snapshot gets no new facts). */
function followed(log: EventLog, from: number): AsyncGenerator<StoredEvent, void, undefined> {
  try {
    return log.events({ from, follow: true })
  } catch (error) {
    if (isFactstateError(error, 'LOG_INVALID_ARGUMENT') && error.details?.field === 'follow') {
      throw new FactstateError(
        'OPENTELEMETRY_INVALID_OPTIONS',
        'telemetryFromLog: log is a snapshot (EventLog.openSnapshot), which gets no new facts: follow the log itself, in the process that has it open',
        { details: { field: 'log' }, cause: error },
      )
    }
    throw error
  }
}

/** Where an exception of the caller's tracer or meter (a span processor's, a sampler's) goes: OpenTelemetry's own error channel, as its SDK reports its own. */
function report(what: string, error: unknown): void {
  tell(`the tracer or meter threw ${what}; the follower goes on`, error)
}

/** Tells OpenTelemetry's `diag.warn`; a logger that throws is left alone. */
function warn(message: string): void {
  try {
    diag.warn(`factstate/opentelemetry: ${message}`)
  } catch {
    // A logger that throws: the follower starts all the same.
  }
}

/** Tells OpenTelemetry's `diag.error`; a logger that throws too is left alone. */
function tell(message: string, ...more: unknown[]): void {
  try {
    diag.error(`factstate/opentelemetry: ${message}`, ...more)
  } catch {
    // A logger that throws too: nothing left to tell it with.
  }
}

/** Ends `span` (setting its attributes and status first) at `at`; what the tracer throws is reported, so the spans ended after it still end. */
function finish(span: Span | undefined, at: number, attributes?: Attributes, status?: SpanStatus): void {
  if (span === undefined) return
  try {
    if (attributes !== undefined) span.setAttributes(attributes)
    if (status !== undefined) span.setStatus(status)
  } catch (error) {
    report('as a span was given its outcome', error)
  }
  try {
    span.end(hrTime(at))
  } catch (error) {
    report('as a span ended', error)
  }
}

/** Turns facts into spans and measurements, holding only the runs under way. */
class Recorder {
  readonly #tracer: Tracer | undefined
  readonly #instruments: Instruments | undefined
  readonly #providerName: ProviderNameOption
  /** The `attributes` option: put on every span as it starts. */
  readonly #constant: Attributes
  readonly #runs = new Map<string, Followed>()
  /** Tool calls under way whose spans a child run may be put under, by operation id. */
  readonly #callContexts = new Map<string, Context>()
  #lastAt = 0

  constructor(tracer: Tracer | undefined, instruments: Instruments | undefined, providerName: ProviderNameOption, constant: Attributes) {
    this.#tracer = tracer
    this.#instruments = instruments
    this.#providerName = providerName
    this.#constant = constant
  }

  /**
   * The run's `gen_ai.provider.name`: the option's name, or what its function answers for the run.
   * A function that throws or answers what is no name (a URL) is reported to `diag` and the run has
   * none: the value is never quoted, nor put in an attribute.
   */
  #providerOf(invocation: Invocation, model: string): string | undefined {
    const option = this.#providerName
    if (typeof option !== 'function') return option
    let answered: unknown
    try {
      answered = option({ invocation: { ...invocation }, model })
    } catch (error) {
      tell(`providerName threw for invocation ${invocation.invocationId}: its spans and measurements have no gen_ai.provider.name`, error)
      return undefined
    }
    if (answered === undefined) return undefined
    const wrong = notAProviderName(answered)
    if (wrong === undefined) return answered as string
    // Not quoted: a URL it answered may carry a key.
    tell(`providerName answered for invocation ${invocation.invocationId} what is not ${wrong}: its spans and measurements have no gen_ai.provider.name`)
    return undefined
  }

  /** `gen_ai.provider.name` of `run` as an attribute (asked once per run), or none. */
  #provider(run: Followed, invocation: Invocation, model: string): Attributes {
    if (run.provider === null) run.provider = this.#providerOf(invocation, model)
    return run.provider === undefined ? {} : { 'gen_ai.provider.name': run.provider }
  }

  /**
   * Records one fact. What the tracer or meter throws (a span processor of the service's, a sampler)
   * is reported to OpenTelemetry's `diag` and the follower goes on: the bookkeeping of each fact is
   * done before the calls that may throw, and each span ends on its own.
   */
  record(stored: StoredEvent): void {
    try {
      this.#record(stored)
    } catch (error) {
      report(`at the fact of seq ${stored.seq} (${stored.event.fact.type})`, error)
    }
  }

  #record({ seq, event }: StoredEvent): void {
    const { fact, recordedAt, invocation } = event
    this.#lastAt = recordedAt
    const key = invocation.invocationId
    if (fact.type === 'invocation.opened') {
      this.#opened(key, fact, event.invocation, seq, recordedAt)
      return
    }
    let run = this.#runs.get(key)
    if (run === undefined) {
      // Opened before `from`: followed without a span, so that its metrics are still taken.
      run = { span: undefined, context: ROOT_CONTEXT, model: new Map(), tools: new Map(), provider: null, request: {} }
      this.#runs.set(key, run)
    }
    const base: Attributes = { 'gen_ai.conversation.id': invocation.sessionId, 'factstate.invocation.id': key }
    switch (fact.type) {
      case 'model.requested': {
        // The measurements' attributes: the conventions' for the client metrics, nothing per request.
        const attributes: Attributes = { 'gen_ai.operation.name': 'chat', ...this.#provider(run, invocation, fact.model), 'gen_ai.request.model': fact.model }
        const span =
          run.span &&
          this.#start(
            `chat ${fact.model}`,
            { kind: SpanKind.CLIENT, startTime: hrTime(recordedAt), attributes: { ...attributes, ...run.request, ...base, 'factstate.step.id': fact.stepId, 'factstate.seq': seq } },
            run.context,
          )
        run.model.set(fact.stepId, { span, at: recordedAt, attributes })
        return
      }
      case 'model.completed': {
        const begun = run.model.get(fact.stepId)
        if (begun === undefined) return
        run.model.delete(fact.stepId)
        const { output } = fact
        const usage = output.usage
        finish(begun.span, recordedAt, {
          'gen_ai.response.finish_reasons': [output.finishReason],
          ...(output.responseId === undefined ? {} : { 'gen_ai.response.id': output.responseId }),
          ...(usage?.inputTokens === undefined ? {} : { 'gen_ai.usage.input_tokens': usage.inputTokens }),
          ...(usage?.outputTokens === undefined ? {} : { 'gen_ai.usage.output_tokens': usage.outputTokens }),
          // Parts of the two above, as the conventions count them.
          ...(usage?.cachedInputTokens === undefined ? {} : { 'gen_ai.usage.cache_read.input_tokens': usage.cachedInputTokens }),
          ...(usage?.reasoningTokens === undefined ? {} : { 'gen_ai.usage.reasoning.output_tokens': usage.reasoningTokens }),
          'factstate.tool_calls': output.toolCalls.length,
        })
        this.#instruments?.duration.record((recordedAt - begun.at) / 1000, begun.attributes)
        if (usage?.inputTokens !== undefined) this.#instruments?.tokens.record(usage.inputTokens, { ...begun.attributes, 'gen_ai.token.type': 'input' })
        if (usage?.outputTokens !== undefined) this.#instruments?.tokens.record(usage.outputTokens, { ...begun.attributes, 'gen_ai.token.type': 'output' })
        return
      }
      case 'model.interrupted': {
        const begun = run.model.get(fact.stepId)
        if (begun === undefined) return
        run.model.delete(fact.stepId)
        const failure: Attributes = { 'error.type': fact.status, ...(fact.provider?.code === undefined ? {} : { 'factstate.provider.code': fact.provider.code }), ...(fact.provider?.status === undefined ? {} : { 'http.response.status_code': fact.provider.status }) }
        finish(begun.span, recordedAt, { ...failure, 'factstate.model.interrupted': fact.status }, { code: SpanStatusCode.ERROR, message: `model attempt ${fact.status}` })
        this.#instruments?.duration.record((recordedAt - begun.at) / 1000, { ...begun.attributes, 'error.type': fact.status })
        return
      }
      case 'tool.dispatched': {
        const attributes: Attributes = { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': fact.name }
        const span =
          run.span &&
          this.#start(
            `execute_tool ${fact.name}`,
            {
              kind: SpanKind.INTERNAL,
              startTime: hrTime(recordedAt),
              attributes: {
                ...attributes,
                ...base,
                'gen_ai.tool.call.id': fact.callId,
                'factstate.operation.id': fact.operationId,
                'factstate.seq': seq,
                ...(fact.readOnly ? { 'factstate.tool.read_only': true } : {}),
                ...(fact.approval === undefined ? {} : { 'factstate.tool.approved': true }),
              },
            },
            run.context,
          )
        run.tools.set(fact.operationId, { span, at: recordedAt, attributes })
        if (span) this.#callContexts.set(fact.operationId, trace.setSpan(run.context, span))
        return
      }
      case 'tool.settled': {
        const begun = run.tools.get(fact.operationId)
        if (begun === undefined) return
        this.#endTool(run, fact.operationId, begun, fact.outcome.status, recordedAt, 'outcome unknown: the call settled with its outcome unknown')
        return
      }
      case 'tool.rejected': {
        // The name of a tool the catalog does not have is the model's own words (any text): kept out, as its answers are.
        const known = fact.reason !== 'unknown_tool'
        const span =
          run.span &&
          this.#start(
            known ? `execute_tool ${fact.name}` : 'execute_tool',
            {
              kind: SpanKind.INTERNAL,
              startTime: hrTime(recordedAt),
              attributes: {
                'gen_ai.operation.name': 'execute_tool',
                ...(known ? { 'gen_ai.tool.name': fact.name } : {}),
                ...base,
                'gen_ai.tool.call.id': fact.callId,
                'factstate.operation.id': fact.operationId,
                'factstate.seq': seq,
                'factstate.tool.outcome': 'rejected',
                'factstate.tool.reject_reason': fact.reason,
                'error.type': fact.reason,
              },
            },
            run.context,
          )
        finish(span, recordedAt, undefined, { code: SpanStatusCode.ERROR, message: `tool call rejected: ${fact.reason}` })
        return
      }
      case 'hold.entered':
      case 'hold.released':
        run.span?.addEvent(`factstate.${fact.type}`, { 'factstate.handoff.id': fact.handoffId, 'factstate.seq': seq }, hrTime(recordedAt))
        return
      case 'invocation.ended':
        this.#ended(key, run, fact, seq, recordedAt)
        return
      default: {
        const never: never = fact
        void never
      }
    }
  }

  /** A span of the tracer's, or none (reported) when the tracer throws: the fact's bookkeeping goes on without it. */
  #start(name: string, options: SpanOptions, context: Context): Span | undefined {
    if (this.#tracer === undefined) return undefined
    try {
      return this.#tracer.startSpan(name, { ...options, attributes: { ...this.#constant, ...options.attributes } }, context)
    } catch (error) {
      report('as a span started', error)
      return undefined
    }
  }

  #opened(key: string, fact: FactOf<'invocation.opened'>, invocation: StoredEvent['event']['invocation'], seq: number, recordedAt: number): void {
    const parentCall = fact.input.kind === 'handoff' ? undefined : fact.input.parent
    const parent = (parentCall && this.#callContexts.get(parentCall.operationId)) ?? ROOT_CONTEXT
    // Bookkeeping first: a providerName that throws is reported, and the run is traced without the name.
    const followed: Followed = { span: undefined, context: ROOT_CONTEXT, model: new Map(), tools: new Map(), provider: null, request: requestAttributes(fact.execution) }
    const provider = this.#provider(followed, invocation, fact.execution.model)
    const span = this.#start(
      'invoke_agent',
      {
        kind: SpanKind.INTERNAL,
        startTime: hrTime(recordedAt),
        attributes: {
          'gen_ai.operation.name': 'invoke_agent',
          ...provider,
          'gen_ai.conversation.id': invocation.sessionId,
          'gen_ai.request.model': fact.execution.model,
          ...followed.request,
          'factstate.invocation.id': key,
          'factstate.turn.id': invocation.turnId,
          'factstate.run.id': invocation.runId,
          'factstate.input.kind': fact.input.kind,
          'factstate.seq': seq,
          ...(fact.input.kind === 'message' ? {} : { 'factstate.source.invocation.id': fact.input.source.invocation.invocationId }),
          ...(parentCall === undefined ? {} : { 'factstate.parent.invocation.id': parentCall.invocation.invocationId, 'factstate.parent.operation.id': parentCall.operationId }),
        },
      },
      parent,
    )
    // A run's id is never reused; a second opening (an application's own append) replaces the first's bookkeeping.
    this.#endRun(this.#runs.get(key), recordedAt)
    followed.span = span
    if (span) followed.context = trace.setSpan(ROOT_CONTEXT, span)
    this.#runs.set(key, followed)
    // Last: a meter that throws leaves the run followed all the same.
    this.#instruments?.runsStarted.add(1, { 'factstate.input.kind': fact.input.kind })
  }

  #ended(key: string, run: Followed, fact: FactOf<'invocation.ended'>, seq: number, recordedAt: number): void {
    const outcome = outcomeAttributes(fact.outcome)
    this.#runs.delete(key)
    // What the run left under way ends with it: a call past its timeoutMs, or whose tool reported its
    // outcome unknown (an OutcomeUnknownError), never settles; the run's end says which way it ended.
    const how = fact.outcome.status === 'failed' ? `failed: ${fact.outcome.class}` : fact.outcome.status
    for (const [operationId, begun] of run.tools) this.#endTool(run, operationId, begun, 'unknown', recordedAt, `outcome unknown: the call never settled, and its run ended ${how}`)
    for (const begun of run.model.values()) finish(begun.span, recordedAt, { 'factstate.unfinished': true })
    const failed = fact.outcome.status === 'failed' || fact.outcome.status === 'cancelled'
    finish(
      run.span,
      recordedAt,
      { ...outcome, 'factstate.ended.seq': seq },
      failed ? { code: SpanStatusCode.ERROR, message: fact.outcome.status === 'failed' ? `failed: ${fact.outcome.class}` : 'cancelled' } : undefined,
    )
    this.#instruments?.runsEnded.add(1, outcome)
  }

  /** Ends a call's span: `unknown` says, as its status message, what the log records of an outcome unknown (a settle that says so, or none before the run ended). */
  #endTool(run: Followed, operationId: string, begun: Begun, status: string, recordedAt: number, unknown: string): void {
    run.tools.delete(operationId)
    this.#callContexts.delete(operationId)
    const failed = status !== 'succeeded'
    finish(
      begun.span,
      recordedAt,
      { 'factstate.tool.outcome': status, ...(failed ? { 'error.type': status === 'failed' ? 'tool_failed' : 'outcome_unknown' } : {}) },
      failed ? { code: SpanStatusCode.ERROR, message: status === 'failed' ? 'the tool failed' : unknown } : undefined,
    )
    // A call that never settled has no duration to measure.
    if (status !== 'unknown') this.#instruments?.duration.record((recordedAt - begun.at) / 1000, { ...begun.attributes, ...(failed ? { 'error.type': 'tool_failed' } : {}) })
  }

  #endRun(run: Followed | undefined, at: number): void {
    if (run === undefined) return
    for (const operationId of run.tools.keys()) this.#callContexts.delete(operationId)
    for (const begun of [...run.model.values(), ...run.tools.values()]) finish(begun.span, at, { 'factstate.unfinished': true })
    finish(run.span, at, { 'factstate.unfinished': true })
  }

  /** The follower ended: what is still open ends at the last fact read, marked unfinished. */
  endAll(): void {
    for (const run of this.#runs.values()) this.#endRun(run, this.#lastAt)
    this.#runs.clear()
    this.#callContexts.clear()
  }
}
