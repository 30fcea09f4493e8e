import { z } from 'zod'
import { FactstateError } from '../errors.js'
import { readOptions, shown } from '../options.js'
import { describeIssues, extraContentOf, modelOutputSchema, providerRefusalOf, reasoningDetailsOf, requestIdOf, responseIdOf } from '../facts/schema.js'
import { messageOf } from '../store/encoding.js'
import type { ChatRequestBody, ModelClient, ModelRequest, ModelResponse, ProviderConfig, ToolCallPiece } from './model-client.js'
import { OpenAIChatClient } from './openai-chat-client.js'
import { MAX_TIMER_MS } from './timer-limit.js'

/** Options of {@link ModelExecutor}. */
export interface ModelExecutorOptions {
  /**
   * How long one attempt may take, in milliseconds, from the request to the whole answer, streamed or
   * not (default 60,000); past it the step is `timed_out`, which is not retried.
   */
  timeoutMs?: number | undefined
  /**
   * How long the provider may send nothing (default: no limit but `timeoutMs`): before its answer
   * starts, and between any two parts of a streamed answer (keep-alive comments count). Past it the
   * step is `timed_out`. With it, `timeoutMs` can be raised for long streamed answers and a stalled
   * one is still noticed soon. At most `timeoutMs` (`ENGINE_INVALID_OPTIONS` otherwise).
   */
  idleTimeoutMs?: number | undefined
  /** Retries after a retryable failure (429, 5xx, connection trouble); default 3. Each failure is a fact. */
  retries?: number | undefined
  /** First backoff before a retry (default 250 ms), doubled each time, capped by `maxBackoffMs`. */
  backoffMs?: number | undefined
  /** The longest wait before a retry, also for a provider's `retry-after` (default 10 s). */
  maxBackoffMs?: number | undefined
  /** Builds the client for a run's provider; the default speaks OpenAI chat completions. */
  createClient?: ((provider: ProviderConfig) => ModelClient) | undefined
}

/**
 * Sends model requests for the engine: timeouts, retry policy and the provider client. The
 * client (and with it the API key) lives in memory only.
 *
 * @example
 * ```ts
 * const model = new ModelExecutor({ timeoutMs: 300_000, idleTimeoutMs: 30_000, retries: 2 })
 * const engine = new Engine({ log, model })
 * ```
 */
export class ModelExecutor {
  /** How long one attempt may take, in milliseconds, from the request to the whole answer (default 60,000). */
  readonly timeoutMs: number
  /** How long the provider may send nothing, in milliseconds; `undefined` when there is no such limit (the default). */
  readonly idleTimeoutMs: number | undefined
  /** Retries after a retryable failure, a whole number (default 3). */
  readonly retries: number
  /** The first wait before a retry, in milliseconds (default 250), doubled for each further retry. */
  readonly backoffMs: number
  /** The longest wait before a retry, in milliseconds (default 10,000), also for a provider's `Retry-After`. */
  readonly maxBackoffMs: number
  readonly #createClient: (provider: ProviderConfig) => ModelClient

  /**
   * Checks and keeps the options (each read once). An option it does not take, a negative or
   * non-finite number, a zero timeout, a retry count that is not a whole number, `idleTimeoutMs` over
   * `timeoutMs` or `backoffMs` over `maxBackoffMs` is `ENGINE_INVALID_OPTIONS`, with `details.field` naming it.
   */
  constructor(given: ModelExecutorOptions = {}) {
    // Each read once; a misspelt option (`timeout: 5`) is refused, not left at its default; options that
    // are no object are refused there too (`details.field` 'options').
    const options = readOptions(given, ['timeoutMs', 'idleTimeoutMs', 'retries', 'backoffMs', 'maxBackoffMs', 'createClient'], {
      call: 'ModelExecutor',
      code: 'ENGINE_INVALID_OPTIONS',
      details: (field) => ({ field }),
    }) as ModelExecutorOptions
    if (options.createClient !== undefined && typeof options.createClient !== 'function') {
      throw new FactstateError('ENGINE_INVALID_OPTIONS', 'ModelExecutor: createClient must be a function', { details: { field: 'createClient' } })
    }
    this.timeoutMs = positive(options.timeoutMs, 60_000, 'timeoutMs')
    this.idleTimeoutMs = options.idleTimeoutMs === undefined ? undefined : positive(options.idleTimeoutMs, 0, 'idleTimeoutMs')
    // Every attempt would end at timeoutMs first: the limit asked for would never apply.
    if (this.idleTimeoutMs !== undefined && this.idleTimeoutMs > this.timeoutMs) {
      throw new FactstateError(
        'ENGINE_INVALID_OPTIONS',
        `ModelExecutor: idleTimeoutMs (${this.idleTimeoutMs}) is longer than timeoutMs (${this.timeoutMs}${options.timeoutMs === undefined ? ', the default' : ''}), which ends every attempt first: raise timeoutMs, or lower idleTimeoutMs`,
        { details: { field: 'idleTimeoutMs' } },
      )
    }
    this.retries = positive(options.retries, 3, 'retries', true)
    if (!Number.isSafeInteger(this.retries)) {
      throw new FactstateError('ENGINE_INVALID_OPTIONS', `ModelExecutor: retries must be a whole number, not ${this.retries}`, { details: { field: 'retries' } })
    }
    this.backoffMs = positive(options.backoffMs, 250, 'backoffMs', true)
    this.maxBackoffMs = positive(options.maxBackoffMs, 10_000, 'maxBackoffMs', true)
    // Every wait would be cut to maxBackoffMs: the backoff asked for would never apply.
    if (this.backoffMs > this.maxBackoffMs) {
      throw new FactstateError(
        'ENGINE_INVALID_OPTIONS',
        `ModelExecutor: backoffMs (${this.backoffMs}) is longer than maxBackoffMs (${this.maxBackoffMs}${options.maxBackoffMs === undefined ? ', the default' : ''}), which cuts every wait to it: raise maxBackoffMs, or lower backoffMs`,
        { details: { field: 'backoffMs' } },
      )
    }
    this.#createClient = options.createClient ?? ((provider) => new OpenAIChatClient(provider))
  }

  /**
   * A client for one run's provider. What it reports reaches facts through the engine, which removes
   * the provider's secrets from it first: a custom client may quote them.
   */
  clientFor(provider: ProviderConfig): ModelClient {
    return this.#createClient(provider)
  }

  /**
   * Sends one attempt; a client that throws is treated as a failed attempt. The client's `body` is
   * its own: parsed from `bodyText` when first read (the OpenAI client never reads it), so a client
   * that changes it in place cannot reach the run's transcript, tools or options, nor a retry.
   */
  async attempt(client: ModelClient, request: Pick<ModelRequest, 'bodyText' | 'signal' | 'onText' | 'onReasoning' | 'onToolCall' | 'origin' | 'addSecret'>): Promise<ModelResponse> {
    const { bodyText, signal, onText, onReasoning, onToolCall, origin, addSecret } = request
    if (signal.aborted) return CANCELLED
    let body: ChatRequestBody | undefined
    // Pieces of text reach `onText` while the attempt lasts, never after it (a client that ignores
    // its signal may go on reading), and neither a piece that is not text nor a failing `onText`
    // reaches the client's reading.
    let live = onText !== undefined || onReasoning !== undefined || onToolCall !== undefined
    const pieceFor = (receiver: ((text: string) => void) | undefined) => (text: string) => {
      if (!live || typeof text !== 'string' || text.length === 0) return
      try {
        receiver?.(text)
      } catch {
        // The receiver's failure is its own.
      }
    }
    const piece = pieceFor(onText)
    // The same for the pieces of the answer's reasoning.
    const reasoningPiece = pieceFor(onReasoning)
    // The same for the pieces of tool calls, of which only the members of their shape go on.
    const callPiece = (given: ToolCallPiece) => {
      if (!live || typeof given !== 'object' || given === null) return
      const { index, callId, name, arguments: text } = given
      if (!Number.isSafeInteger(index) || index < 0) return
      const known = (value: unknown) => typeof value === 'string' && value.length > 0
      if (!known(callId) && !known(name) && !known(text)) return
      try {
        onToolCall?.({
          index,
          ...(known(callId) ? { callId } : {}),
          ...(known(name) ? { name } : {}),
          ...(known(text) ? { arguments: text } : {}),
        })
      } catch {
        // The receiver's failure is its own.
      }
    }
    // The attempt's own signal: aborted with the run's, and when the backstop below gives up on the
    // client, so a client that honours its signal but not its timeout lets go of the request.
    const attempt = new AbortController()
    const answered = (async (): Promise<ModelResponse> => {
      try {
        const answer = client.complete({
          get body(): ChatRequestBody {
            body ??= JSON.parse(bodyText) as ChatRequestBody
            return body
          },
          bodyText,
          // A copy for each attempt: a client that changes it changes nothing of the run, nor a retry's.
          ...(origin === undefined ? {} : { origin: { ...origin, invocation: { ...origin.invocation } } }),
          signal: attempt.signal,
          timeoutMs: this.timeoutMs,
          ...(this.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: this.idleTimeoutMs }),
          ...(onText === undefined ? {} : { onText: piece }),
          ...(onReasoning === undefined ? {} : { onReasoning: reasoningPiece }),
          ...(onToolCall === undefined ? {} : { onToolCall: callPiece }),
          ...(addSecret === undefined ? {} : { addSecret }),
        })
        // Once the client has answered, its text is what it answered with: later pieces are dropped.
        const response = await Promise.resolve(answer).finally(() => {
          live = false
        })
        const checked = checkedResponse(response)
        // `cancelled` is the run's to say: a client that reports it unasked (its own abort) has failed the step.
        if (checked.kind === 'interrupted' && checked.status === 'cancelled' && !signal.aborted) {
          return { kind: 'interrupted', status: 'failed', message: `the model client reported the request cancelled, but the run was not cancelled: ${checked.message}` }
        }
        return checked
      } catch (error) {
        live = false
        if (signal.aborted) return CANCELLED
        return { kind: 'interrupted', status: 'failed', message: `the model client failed: ${messageOf(error)}` }
      }
    })()
    // A backstop for a client that ignores its signal or its timeout: the run does not wait on it.
    let stop: (response: ModelResponse) => void = () => undefined
    const stopped = new Promise<ModelResponse>((resolve) => (stop = resolve))
    const onAbort = () => {
      attempt.abort(signal.reason)
      stop(CANCELLED)
    }
    signal.addEventListener('abort', onAbort, { once: true })
    // Node runs a longer timer after 1 ms: a timeout meant as "never" must not become "at once".
    const limit = Math.min(this.timeoutMs + TIMEOUT_GRACE_MS, MAX_TIMER_MS)
    const timer = setTimeout(() => {
      // Named by the limit the executor was given, not by the backstop's total (timeoutMs + grace).
      const message = `the model client did not answer within ${this.timeoutMs.toLocaleString('en-US')} ms (timeoutMs), nor in the ${TIMEOUT_GRACE_MS.toLocaleString('en-US')} ms the executor waits past it`
      attempt.abort(new DOMException(message, 'TimeoutError'))
      stop({ kind: 'interrupted', status: 'timed_out', message })
    }, limit)
    try {
      return await Promise.race([answered, stopped])
    } finally {
      live = false
      clearTimeout(timer)
      signal.removeEventListener('abort', onAbort)
    }
  }

  /** The wait before retry number `attempt` (1-based). */
  backoff(attempt: number, retryAfterMs: number | undefined): number {
    const planned = typeof retryAfterMs === 'number' && !Number.isNaN(retryAfterMs) ? retryAfterMs : this.backoffMs * 2 ** (attempt - 1)
    return Math.min(Math.max(0, planned), this.maxBackoffMs)
  }
}

const CANCELLED: ModelResponse = Object.freeze({ kind: 'interrupted', status: 'cancelled', message: 'the run was cancelled' })

/** How long past `timeoutMs` the executor waits for a client that does not time out by itself. */
const TIMEOUT_GRACE_MS = 1_000
// What is recorded is checked strictly (the output becomes a fact); members only read (a retry's
// wait, which the back-off clamps) or not read at all are let through.
const modelResponseSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('completed'), output: modelOutputSchema }),
  z.object({
    kind: z.literal('interrupted'),
    status: z.enum(['retryable_failure', 'failed', 'timed_out', 'cancelled']),
    message: z.string(),
    malformed: z.boolean().optional(),
  }),
])

/** The counts of `ModelUsage`, in the fact schema's order. */
const USAGE_COUNTS = ['inputTokens', 'outputTokens', 'cachedInputTokens', 'reasoningTokens'] as const

/**
 * A member only ever read by people (token counts, the response and request ids, a refusal's details), or none
 * when reading it throws (a client's getter): an answer already paid for is not lost to it.
 */
function optionalMember(object: object, name: string): unknown {
  try {
    return (object as Record<string, unknown>)[name]
  } catch {
    return undefined
  }
}

/** A token count the fact can hold (a non-negative whole number), or none. */
const tokenCount = (value: unknown): number | undefined => (Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : undefined)

/**
 * A completed answer's output as its fact records it, read member by member, as the built-in client
 * reads a provider's answer: members the output type does not have (a call's `index`, a count under
 * another name than `ModelUsage`'s, a stop sequence) are left out, token counts that are not
 * non-negative whole numbers are dropped, so is a `responseId` or a `requestId` that is not a
 * string of 1–256 characters, and `text: null` is no text; so is provider state a fact cannot hold
 * (`reasoningDetails` and a call's `extraContent` past their bounds or not plain JSON, see
 * `reasoningDetailsOf`). An answer already paid for is not lost to them; what is left is checked strictly.
 */
function recordedOutput(output: unknown): unknown {
  if (output === null || typeof output !== 'object') return output
  const { text, toolCalls, finishReason, reasoning } = output as Record<string, unknown>
  const usage = optionalMember(output, 'usage')
  const responseId = optionalMember(output, 'responseId')
  const requestId = optionalMember(output, 'requestId')
  const reasoningDetails = reasoningDetailsOf(optionalMember(output, 'reasoningDetails'))
  const calls = Array.isArray(toolCalls)
    ? toolCalls.map((call: unknown) => {
        if (call === null || typeof call !== 'object') return call
        const { callId, name, arguments: args } = call as Record<string, unknown>
        // Sent back, never read: one the fact cannot hold is dropped, not the answer.
        const extraContent = extraContentOf(optionalMember(call, 'extraContent'))
        return { callId, name, arguments: args, ...(extraContent === undefined ? {} : { extraContent }) }
      })
    : toolCalls
  let tokens: Record<string, number> | undefined
  if (usage !== null && typeof usage === 'object') {
    // In the schema's order, each count kept only when the fact can hold it.
    for (const name of USAGE_COUNTS) {
      const count = tokenCount(optionalMember(usage, name))
      if (count !== undefined) tokens = { ...tokens, [name]: count }
    }
  }
  return {
    ...(text === null || text === undefined ? {} : { text }),
    toolCalls: calls,
    finishReason,
    ...(tokens === undefined ? {} : { usage: tokens }),
    // No reasoning, or an empty one, is none; anything else is checked as text.
    ...(reasoning === null || reasoning === undefined || reasoning === '' ? {} : { reasoning }),
    // Only ever read, by people matching the fact with the provider's records: one the fact cannot hold is dropped.
    ...(responseIdOf(responseId) === undefined ? {} : { responseId }),
    ...(requestIdOf(requestId) === undefined ? {} : { requestId }),
    ...(reasoningDetails === undefined ? {} : { reasoningDetails }),
  }
}

/**
 * An interrupted answer with its `provider` as a fact can hold it, member by member (see
 * `providerRefusalOf`): what does not fit is dropped, and without anything left so is `provider`.
 * Only ever read, by applications branching on the refusal: a bad one does not fail the step.
 */
function recordedRefusal(given: Record<string, unknown>): Record<string, unknown> {
  if (!('provider' in given)) return given
  // The rest copied without reading `provider`, whose getter may throw.
  const rest: Record<string, unknown> = {}
  for (const key of Object.keys(given)) if (key !== 'provider') rest[key] = given[key]
  let kept: ReturnType<typeof providerRefusalOf>
  try {
    kept = providerRefusalOf(optionalMember(given, 'provider'))
  } catch {
    kept = undefined
  }
  return kept === undefined ? rest : { ...rest, provider: kept }
}

/** A client's answer as a `ModelResponse`, or a malformed failure naming what is wrong with it (a custom client's bug is the step's failure, not the engine's). */
function checkedResponse(given: unknown): ModelResponse {
  const kind = given !== null && typeof given === 'object' ? (given as { kind?: unknown }).kind : undefined
  const response =
    kind === 'completed'
      ? { kind: 'completed', output: recordedOutput((given as { output?: unknown }).output) }
      : kind === 'interrupted'
        ? recordedRefusal(given as Record<string, unknown>)
        : given
  const checked = modelResponseSchema.safeParse(response)
  if (checked.success) {
    const answer = response as ModelResponse
    // A tool message answers its call by id: a call without one could not be answered (the OpenAI client refuses it too).
    const nameless = answer.kind === 'completed' ? answer.output.toolCalls.findIndex((call) => call.callId === '') : -1
    if (nameless === -1) return answer
    return { kind: 'interrupted', status: 'failed', malformed: true, message: `the model client returned a tool call without an id (output.toolCalls[${nameless}].callId is empty)` }
  }
  return {
    kind: 'interrupted',
    status: 'failed',
    malformed: true,
    message: `the model client returned something that is not a ModelResponse: ${describeIssues(checked.error)}`,
  }
}

function positive(value: number | undefined, fallback: number, name: string, allowZero = false): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    // What was given, a string said so: `timeoutMs: "5000"` read from an environment variable is the usual one.
    const given = typeof value === 'string' ? `a string (${shown(value)}): pass Number(…) of it` : shown(value)
    throw new FactstateError('ENGINE_INVALID_OPTIONS', `ModelExecutor: ${name} must be a ${allowZero ? 'non-negative' : 'positive'} number, not ${given}`, {
      details: { field: name },
    })
  }
  return value
}
