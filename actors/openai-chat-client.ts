/**
 * A {@link ModelClient} for any OpenAI-compatible chat-completions endpoint, built on the official
 * `openai` SDK. It sends the engine's exact request bytes, reads plain JSON or SSE answers, and
 * classifies every kind of provider trouble into a {@link ModelResponse} instead of throwing.
 */
import { randomUUID } from 'node:crypto'
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai'
import { _iterSSEMessages } from 'openai/core/streaming'
import { z } from 'zod'
import { FactstateError } from '../errors.js'
import { isObject } from '../store/encoding.js'
import { extraContentOf, providerRefusalOf, reasoningDetailsOf, requestIdOf, responseIdOf } from '../facts/schema.js'
import type { ModelOutput, ModelUsage, ProviderRefusal, ToolCall } from '../facts/types.js'
import type { ModelClient, ModelRequest, ModelResponse, ProviderConfig } from './model-client.js'
import { type Secrets, redactFailure, secretsOf } from './redaction.js'
import { timerMs } from './timer-limit.js'

/** Given to the SDK, which insists on a key, when the provider has none; never sent (see the constructor). */
const PLACEHOLDER_API_KEY = 'not-set'
/** How much provider text a message may quote. */
const QUOTE_LIMIT = 300

// Token counts are read, never trusted: any value passes here and `usageOf` keeps only what a fact can hold.
const UsageSchema = z.unknown().optional()
// The answer's id likewise: `responseIdOf` keeps it only when a fact can hold it.
const ResponseIdSchema = z.unknown().optional()

/**
 * A call's arguments as JSON text: as sent, or, from servers that send them already parsed (an
 * object), written back as JSON; none at all is `""` (which runs as `{}`).
 */
const ArgumentsSchema = z
  .union([z.string(), z.record(z.string(), z.unknown())])
  .nullish()
  .transform((value) => (value === null || value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value)))

/**
 * OpenRouter's (and some proxies') name for `reasoning_content`: taken when it is text, dropped
 * otherwise (their `reasoning_details` arrays are read apart, see `ProviderStateSchema`).
 */
const ReasoningSchema = z
  .unknown()
  .optional()
  .transform((value) => (typeof value === 'string' ? value : undefined))

/**
 * Opaque state a provider wants back (OpenRouter's `reasoning_details`, Gemini's `extra_content` of a
 * call): read as anything, kept only as `reasoningDetailsOf` and `extraContentOf` keep it (plain JSON
 * within bounds); what does not fit is dropped, never the answer.
 */
const ProviderStateSchema = z.unknown().optional()

/** A call's id; some local servers send a number, or none (see `callIdOf`). */
const CallIdSchema = z
  .union([z.string(), z.number()])
  .nullish()
  .transform((value) => (value === null || value === undefined ? '' : String(value)))

/**
 * The id a call is recorded and answered by: the provider's, or, from a server that sent none
 * (some local servers), one made here. The tool message answers the call by it, and a server that
 * gave no id cannot ask for a particular one.
 */
const callIdOf = (id: string): string => (id === '' ? `call_${randomUUID().replaceAll('-', '').slice(0, 24)}` : id)

const CompletionSchema = z.object({
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullish(),
          refusal: z.string().nullish(),
          reasoning_content: z.string().nullish(),
          reasoning: ReasoningSchema,
          reasoning_details: ProviderStateSchema,
          tool_calls: z
            .array(
              z.object({
                id: CallIdSchema,
                type: z.string().nullish(),
                function: z.object({ name: z.string().min(1), arguments: ArgumentsSchema }),
                extra_content: ProviderStateSchema,
              }),
            )
            .nullish(),
        }),
        finish_reason: z.string().nullish(),
        index: z.number().nullish(),
      }),
    )
    .min(1),
  usage: UsageSchema,
  id: ResponseIdSchema,
})

const ChunkSchema = z.object({
  choices: z
    .array(
      z.object({
        index: z.number().int().nullish(),
        delta: z
          .object({
            content: z.string().nullish(),
            refusal: z.string().nullish(),
            reasoning_content: z.string().nullish(),
            reasoning: ReasoningSchema,
            reasoning_details: ProviderStateSchema,
            tool_calls: z
              .array(
                z.object({
                  // Gemini's OpenAI endpoint and some local servers leave it out (see #readStream).
                  index: z.number().int().nonnegative().nullish(),
                  id: CallIdSchema,
                  type: z.string().nullish(),
                  function: z.object({ name: z.string().nullish(), arguments: ArgumentsSchema }).nullish(),
                  extra_content: ProviderStateSchema,
                }),
              )
              .nullish(),
          })
          .nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .nullish(),
  usage: UsageSchema,
  id: ResponseIdSchema,
})

/**
 * Whether streamed arguments are a whole JSON object or array already (more appended to them could
 * not be). Parsed only when they end as one could: a server that repeats the name in every part
 * would otherwise have its growing arguments parsed again at each part.
 */
function isWholeJson(text: string): boolean {
  const end = text.trimEnd().at(-1)
  if (end !== '}' && end !== ']') return false
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/**
 * The name a streamed call is recorded with, from the name parts read so far (`name` the last one,
 * `joined` all of them, `split` whether two of them differed), and what its `onToolCall` pieces
 * carry. Parts that differ are a name streamed in pieces, as arguments are (`web_`, `search`): the
 * parts joined, unless only the last part names a tool of the run (a server sending the name so far
 * in each part). Parts that are all the same are a server repeating the name: that name, unless only
 * the parts joined name a tool of the run.
 */
function streamedName(call: { name: string; joined: string; split: boolean }, catalog: ReadonlySet<string | undefined>): string {
  if (call.split) return catalog.has(call.joined) || !catalog.has(call.name) ? call.joined : call.name
  return catalog.has(call.joined) && !catalog.has(call.name) ? call.joined : call.name
}

/**
 * Why the client stopped an attempt itself: the caller's signal, `timeoutMs`, or `idleTimeoutMs`
 * before the answer started (`silent`) or between two of its parts (`stalled`).
 */
type StopReason = 'timeout' | 'cancel' | 'silent' | 'stalled'

/** A provider answer that could not be understood. */
class MalformedAnswer extends Error {}

/** The transport failed while the answer's body was being read. */
class BodyReadFailure extends Error {}

/** An error the provider reported inside an answer it had started as a success (HTTP 200): in a stream, or as the JSON body. */
class ReportedError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    /** The reported error's code, type and param, when it had them (no status: the answer's was 200). */
    readonly provider?: ProviderRefusal,
  ) {
    super(message)
  }
}

/**
 * An answer that ended with `finish_reason: "error"` (OpenRouter's word for a generation that failed
 * upstream, its text cut wherever it was): a failure a retry may cure, not an answer to record.
 */
const failedGeneration = () => new ReportedError('the provider ended its answer with finish_reason "error" (the generation failed upstream)', true)

/**
 * Error types and codes providers report for trouble that a retry may cure (overload, rate limits,
 * server errors). `api_error` is OpenAI's and Anthropic's type for a failure on their side, and what
 * Ollama reports when its model runner fails mid-answer.
 */
export const RETRYABLE_REPORTED_ERROR = /overload|rate.?limit|server.?error|\bapi_error\b|unavailable|timeout|capacity|busy/i

/** Where a 200 answer reported an error, as its message says. */
type ReportedWhere = 'in its stream' | 'in its answer'
/** How the message of an error reported in a 200 answer begins: the provider's own words (quoted, redacted) follow. */
const reportedHead = (where: ReportedWhere) => `the provider reported an error ${where}: `

/**
 * An error reported in a 200 answer: a stream event or a JSON body with an `error` member (OpenAI,
 * OpenRouter), or an `event: error` (others). Retryable as `retryableReported` reads it.
 */
function reportedError(secrets: Secrets, event: string | null, item: unknown, where: ReportedWhere = 'in its stream'): ReportedError | undefined {
  const body = typeof item === 'object' && item !== null ? (item as { error?: unknown; message?: unknown }) : undefined
  const error = body?.error ?? (event === 'error' ? (body ?? item) : undefined)
  if (!error) return undefined
  const details = typeof error === 'object' ? (error as { message?: unknown; code?: unknown; type?: unknown; status?: unknown }) : { message: error }
  const message = typeof details.message === 'string' ? details.message : typeof body?.message === 'string' ? body.message : JSON.stringify(error)
  return new ReportedError(`${reportedHead(where)}${quote(message, secrets)}`, retryableReported(details), refusalOf(undefined, details, secrets))
}

/**
 * Whether a retry may cure an error reported in a 200 answer: its code or status is an HTTP status a
 * retry may cure (408, 429, 5xx), its type or code says overload, rate limit or server error
 * (`RETRYABLE_REPORTED_ERROR`), or it names no kind at all (no code, type or status: `{ message }`
 * alone, an `error` that is a string, a proxy's words). The answer had begun as a success, so the
 * request was taken, and an error after that which does not say it was the request's is the
 * provider's (or a proxy's) trouble. One naming another kind (`invalid_request_error`, a 400) is not.
 */
function retryableReported(details: { code?: unknown; type?: unknown; status?: unknown }): boolean {
  const statuses = [details.code, details.status].filter((value) => typeof value === 'number' || (typeof value === 'string' && /^\s*\d+\s*$/.test(value))).map(Number)
  const kinds = [details.type, details.code].filter((value): value is string => typeof value === 'string' && value.trim() !== '' && !/^\s*\d+\s*$/.test(value))
  if (statuses.some((status) => status === 408 || status === 429 || (status >= 500 && status < 600))) return true
  if (kinds.some((kind) => RETRYABLE_REPORTED_ERROR.test(kind))) return true
  return statuses.length === 0 && kinds.length === 0
}

/**
 * An `event: error` whose data is not JSON (a proxy's `upstream connect error …`, or no data):
 * retryable, as an error that names no kind is (see `retryableReported`), its data quoted.
 */
function unreadableError(secrets: Secrets, data: string): ReportedError {
  const words = quote(data, secrets)
  return new ReportedError(`the provider reported an error in its stream that could not be read: ${words === '' ? '(no data)' : words}`, true)
}

/**
 * What a fact keeps of a provider's refusal: the HTTP status of its error answer (none for an error
 * inside a 200 answer), and of `error` (OpenAI's `error` member, or the body itself where the code
 * and type sit at its top level) the `code`, `type` and `param`, as `providerRefusalOf` takes them,
 * redacted of the provider's secrets.
 */
function refusalOf(status: number | undefined, error: unknown, secrets: Secrets): ProviderRefusal | undefined {
  const { code, type, param } = typeof error === 'object' && error !== null ? (error as Record<string, unknown>) : {}
  return providerRefusalOf({ status, code, type, param }, (text) => redactFailure(text, secrets))
}

/**
 * The member of an error answer's body that holds its code, type and param: OpenAI's `error` object,
 * else the body itself (servers that answer `{ code, type, message }`, vLLM's `{ object: "error", … }`).
 * None for a body that is not a JSON object.
 */
function errorDetailsOf(errorBody: string | undefined, sdkError: unknown): unknown {
  // The body could not be read: the SDK's `error`, which is the body's `error` member.
  if (errorBody === undefined) return sdkError
  let parsed: unknown
  try {
    parsed = JSON.parse(errorBody)
  } catch {
    return undefined
  }
  if (!isObject(parsed)) return undefined
  return isObject(parsed.error) ? parsed.error : parsed
}

function interrupted(
  status: 'retryable_failure' | 'failed' | 'timed_out' | 'cancelled',
  message: string,
  extra: { malformed?: boolean; retryAfterMs?: number; provider?: ProviderRefusal | undefined } = {},
): ModelResponse {
  const { provider, ...rest } = extra
  return { kind: 'interrupted', status, message, ...rest, ...(provider === undefined ? {} : { provider }) }
}

function zodProblem(error: z.ZodError): string {
  const issue = error.issues[0]
  if (!issue) return 'unexpected shape'
  const path = issue.path.length > 0 ? issue.path.map(String).join('.') : '(root)'
  return `${path}: ${issue.message}`
}

/** A token count a fact can hold: a non-negative safe integer. */
const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0

/** `object[name]`, when `object` is an object. */
const memberOf = (object: unknown, name: string): unknown => (typeof object === 'object' && object !== null ? (object as Record<string, unknown>)[name] : undefined)

/**
 * The usage the provider reported; a count that is not a non-negative integer (12.5, -1, "7") is
 * dropped, not the answer. Cached prompt tokens are OpenAI's `prompt_tokens_details.cached_tokens`,
 * or, where that is not a count, DeepSeek's `prompt_cache_hit_tokens`; reasoning tokens are
 * `completion_tokens_details.reasoning_tokens`.
 */
function usageOf(usage: unknown): ModelUsage | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined
  const { prompt_tokens: input, completion_tokens: output, prompt_tokens_details, completion_tokens_details, prompt_cache_hit_tokens } = usage as Record<string, unknown>
  const out: ModelUsage = {}
  if (isCount(input)) out.inputTokens = input
  if (isCount(output)) out.outputTokens = output
  const cached = [memberOf(prompt_tokens_details, 'cached_tokens'), prompt_cache_hit_tokens].find(isCount)
  if (cached !== undefined) out.cachedInputTokens = cached
  const reasoning = memberOf(completion_tokens_details, 'reasoning_tokens')
  if (isCount(reasoning)) out.reasoningTokens = reasoning
  return Object.keys(out).length > 0 ? out : undefined
}

function outputOf(
  text: string | undefined,
  toolCalls: ToolCall[],
  finishReason: string,
  usage: ModelUsage | undefined,
  reasoning: string | undefined,
  id: unknown,
  details: unknown,
): ModelOutput {
  const responseId = responseIdOf(id)
  const reasoningDetails = reasoningDetailsOf(details)
  return {
    ...(text !== undefined && text.length > 0 ? { text } : {}),
    toolCalls,
    finishReason,
    ...(usage ? { usage } : {}),
    ...(reasoning !== undefined && reasoning.length > 0 ? { reasoning } : {}),
    ...(responseId === undefined ? {} : { responseId }),
    ...(reasoningDetails === undefined ? {} : { reasoningDetails }),
  }
}

/** A call as recorded, with its `extra_content` when a fact can hold it (see `extraContentOf`). */
function callOf(callId: string, name: string, args: string, extra: unknown): ToolCall {
  const extraContent = extraContentOf(extra)
  return { callId, name, arguments: args, ...(extraContent === undefined ? {} : { extraContent }) }
}

/** A copy of `value`, its objects copied at every depth (as `mergeInto` takes them). */
function mergedCopy(value: Record<string, unknown>): Record<string, unknown> {
  const copy: Record<string, unknown> = {}
  mergeInto(copy, value)
  return copy
}

/** `part` merged into `into`: objects member by member (at any depth), anything else replaced. `__proto__` is never taken. */
function mergeInto(into: Record<string, unknown>, part: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(part)) {
    if (key === '__proto__') continue
    const held = into[key]
    if (isObject(held) && isObject(value)) mergeInto(held, value)
    else into[key] = isObject(value) ? mergedCopy(value) : value
  }
}

/** The string members of a streamed `reasoning_details` entry that its parts carry in pieces. */
const DETAIL_PIECES: ReadonlySet<string> = new Set(['text', 'summary', 'data'])

/** The entry types whose parts without an index continue the entry before them (see `StreamedDetails`). */
const CONTINUED_TYPES: ReadonlySet<string> = new Set(['reasoning.text'])

/**
 * OpenRouter's streamed `reasoning_details`, put together: parts carrying the same `index` are one
 * entry (their `text`, `summary` and `data` pieces joined; other members kept, the last non-empty
 * one of each: a `signature` comes with the last part), unless a part names another `type` than the
 * entry's (it starts the next entry); parts without one are entries of their own, but for a
 * `reasoning.text` part right after one (`CONTINUED_TYPES`), which continues it until it has its
 * signature. What is not an object is dropped.
 */
class StreamedDetails {
  readonly entries: Record<string, unknown>[] = []
  readonly #byIndex = new Map<number, Record<string, unknown>>()
  /** The last entry, when a part without an index made it: the next such part of its text type continues it. */
  #unindexed: Record<string, unknown> | undefined

  add(parts: unknown): void {
    if (!Array.isArray(parts)) return
    for (const part of parts) {
      if (!isObject(part)) continue
      const index = part.index
      const indexed = Number.isSafeInteger(index)
      // Parts without an index (as other readers of OpenRouter's stream take them): a `reasoning.text`
      // part goes on with the text entry the part before it began, until that entry has its signature;
      // each would otherwise be an entry of its own, past 256 of them all dropped. Other types' parts
      // without an index (summaries, encrypted blobs) stay entries of their own.
      const last = this.#unindexed
      const continued =
        !indexed && last !== undefined && this.entries.at(-1) === last && typeof part.type === 'string' && part.type === last.type && CONTINUED_TYPES.has(part.type) && last.signature === undefined
          ? last
          : undefined
      const held = indexed ? this.#byIndex.get(index as number) : continued
      // A part naming another type than the entry of its index is another entry (a `reasoning.encrypted`
      // after a `reasoning.text` at the same index): its pieces are not that entry's, and the index goes on with it.
      const entry = held !== undefined && typeof part.type === 'string' && part.type !== '' && typeof held.type === 'string' && held.type !== part.type ? undefined : held
      if (entry === undefined) {
        const fresh = mergedCopy(part)
        if (indexed) this.#byIndex.set(index as number, fresh)
        this.#unindexed = indexed ? undefined : fresh
        this.entries.push(fresh)
        continue
      }
      for (const [key, value] of Object.entries(part)) {
        if (key === '__proto__' || key === 'index') continue
        const held = entry[key]
        if (DETAIL_PIECES.has(key) && typeof value === 'string' && typeof held === 'string') entry[key] = held + value
        else if (value !== null && value !== '' && value !== undefined) entry[key] = isObject(value) ? mergedCopy(value) : value
        else if (!(key in entry)) entry[key] = value
      }
    }
  }
}

/** A delay in a header's value, the first of several (`Headers.get` joins repeated headers with ", "). */
const FIRST_NUMBER = /^\s*(\d+(?:\.\d+)?)\s*(?:,|$)/
/** An HTTP date names its month (IMF-fixdate, RFC 850, asctime); `Date.parse` alone takes "2, 5" for a day in 2001. */
const MONTH = /\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)/i

/**
 * Parses `retry-after-ms`, else `retry-after` (seconds or an HTTP date), into milliseconds; of a
 * header sent twice (joined as "2, 5"), the first value. What a `ModelClient` answers a 429 or 503
 * with as `retryAfterMs`; `undefined` when the provider sent neither (or a date already past is
 * 0). Headers that are not a fetch `Headers` (nothing with a `get`) are `RUN_INVALID_INPUT`.
 *
 * @example
 * ```ts
 * if (response.status === 429) return { kind: 'interrupted', status: 'retryable_failure', message: 'rate limited', retryAfterMs: retryAfterMsOf(response.headers) }
 * ```
 */
export function retryAfterMsOf(headers: Headers | undefined, now: number = Date.now()): number | undefined {
  if (headers === undefined || headers === null) return undefined
  if (typeof (headers as { get?: unknown }).get !== 'function') {
    throw new FactstateError('RUN_INVALID_INPUT', "retryAfterMsOf takes a response's Headers (fetch's), not a plain object", { details: { fields: ['headers'] } })
  }
  const ms = FIRST_NUMBER.exec(headers.get('retry-after-ms') ?? '')?.[1]
  if (ms !== undefined) return Math.ceil(Number(ms))
  const after = headers.get('retry-after')
  if (after === null) return undefined
  const seconds = FIRST_NUMBER.exec(after)?.[1]
  if (seconds !== undefined) return Math.ceil(Number(seconds) * 1000)
  if (!MONTH.test(after)) return undefined
  // Of two dates ("<date>, <date>"), the first: an IMF-fixdate has one comma, after its weekday.
  const date = Date.parse(after.split(',').slice(0, 2).join(','))
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

/**
 * What a 404 adds when `baseUrl` has no path (`http://127.0.0.1:8080`, say): requests then go to
 * `/chat/completions`, where most OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, Ollama, LM
 * Studio) answer 404, since they serve the API under `/v1`. Undefined for a baseUrl with a path
 * (`/v1`, `/openai/deployments/x`), where a 404 means something else (an unknown model, say).
 */
function unversionedHint(baseUrl: string): string | undefined {
  let path: string
  try {
    path = new URL(baseUrl).pathname
  } catch {
    return undefined
  }
  if (path !== '/') return undefined
  return unversionedHintFor(baseUrl.replace(/\/+$/, ''))
}

const UNVERSIONED_HEAD = ' (requests go to '
const unversionedHintFor = (base: string) => `${UNVERSIONED_HEAD}${base}/chat/completions: most OpenAI-compatible servers serve them under /v1, so try the baseUrl ${base}/v1)`

/** How the message of an error answer begins: the provider's own words (quoted, redacted) follow. */
const answeredHead = (status: number) => `the provider answered HTTP ${status}: `

/**
 * The provider's own words in the message the client composed for an error answer with `status`
 * (see `#classify`), or for an error reported in a 200 answer (no `status`, see `reportedError`):
 * `message` less its head and, for a 404, the hint about /v1 it added; `undefined`
 * when the client did not compose `message` so (a stall after the status, a redirect, another failure).
 */
export function providerWordsOf(message: string, status: number | undefined): string | undefined {
  if (status === undefined) {
    // An error reported in an answer begun as a success (HTTP 200): see `reportedError`.
    const reported = (['in its stream', 'in its answer'] as const).map(reportedHead).find((head) => message.startsWith(head))
    return reported === undefined ? undefined : message.slice(reported.length)
  }
  const head = answeredHead(status)
  if (!message.startsWith(head)) return undefined
  const words = message.slice(head.length)
  const at = words.lastIndexOf(UNVERSIONED_HEAD)
  if (status !== 404 || at === -1) return words
  const base = words.slice(at + UNVERSIONED_HEAD.length).split('/chat/completions: ')[0] ?? ''
  return words.slice(at) === unversionedHintFor(base) ? words.slice(0, at) : words
}

/**
 * Talks to an OpenAI-compatible `POST {baseUrl}/chat/completions` endpoint.
 *
 * - The body sent is exactly `request.bodyText`, so a retry is byte-identical to the attempt
 *   the engine digested.
 * - The answer may be plain JSON or an SSE stream (`text/event-stream`), whatever the body asked
 *   for; streamed deltas are merged (text concatenated, tool calls merged by `index`).
 * - The SDK never retries (`maxRetries: 0`): retrying is the engine's decision, made from the
 *   returned `retryable_failure` and its `retryAfterMs`.
 * - It never throws for provider trouble: HTTP 408/429/5xx and lost connections are
 *   `retryable_failure`, other 4xx `failed`; an error reported inside an answer begun as HTTP 200
 *   (in its stream or its JSON body) is `retryable_failure` unless it names a request's error (see
 *   `retryableReported`); an answer that cannot be understood is `failed` with
 *   `malformed: true`, the `timeoutMs` deadline (which also covers reading the body) `timed_out`,
 *   and so is `idleTimeoutMs` when set (no headers yet, or no byte of the body, for that long), and
 *   the caller's signal `cancelled`. Returned messages never contain the API key or the
 *   configured header values.
 *
 * @example
 * ```ts
 * const client = new OpenAIChatClient({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:8080/v1', model: 'local', apiKey: process.env.KEY })
 * const body = { model: 'local', messages: [{ role: 'user' as const, content: 'hi' }] }
 * const response = await client.complete({
 *   body,
 *   bodyText: JSON.stringify(body),
 *   signal: new AbortController().signal,
 *   timeoutMs: 60_000,
 * })
 * if (response.kind === 'completed') console.log(response.output.text, response.output.toolCalls)
 * else console.log(response.status, response.message)
 * ```
 */
export class OpenAIChatClient implements ModelClient {
  readonly #client: OpenAI
  readonly #secrets: Secrets
  /** For a 404 from a baseUrl without a path: most servers serve the API under `/v1`. */
  readonly #unversioned: string | undefined

  /** A client for one provider: its `baseUrl`, `apiKey` and `headers` are kept in memory only. */
  constructor(provider: ProviderConfig) {
    // The SDK appends `/chat/completions` to the baseUrl as text: after a query or a fragment it lands in
    // them, so no such baseUrl reaches the endpoint; and a key in one (`?key=…`) is no secret of the
    // provider's, so the 404 hint and every server that quotes the URL it was asked would write it to the log.
    if (/[?#]/.test(provider.baseUrl)) {
      throw new FactstateError('RUN_INVALID_INPUT', 'the baseUrl must not carry a query (?…) or a fragment (#…): /chat/completions is appended to it; pass a key as apiKey or in headers (an endpoint that needs a query parameter, such as the api-version of Azure OpenAI, takes a ModelClient of your own)', {
        details: { fields: ['provider.baseUrl'] },
      })
    }
    this.#unversioned = unversionedHint(provider.baseUrl)
    this.#client = new OpenAI({
      fetch: async (url, init) => {
        // The attempt's own hooks ride on the request options (see `ATTEMPT`); fetch never sees them.
        const { [ATTEMPT]: hooks, ...plain } = (init ?? {}) as RequestInit & { [ATTEMPT]?: AttemptHooks }
        const response = await fetch(url, plain)
        if (hooks === undefined) return response
        hooks.status = response.status
        // Also for an answer the SDK never makes an `APIError` of (a 200 that goes wrong).
        hooks.requestId = response.headers.get('x-request-id') ?? undefined
        hooks.progress()
        // The SDK keeps only an OpenAI-style `error` member of an error answer: servers that answer
        // `{ message }` or `{ detail }` would lose their reason.
        if (!response.ok) {
          hooks.errorBody = response
            .clone()
            .text()
            .catch(() => undefined)
        }
        return watched(response, hooks.progress)
      },
      baseURL: provider.baseUrl,
      apiKey: provider.apiKey ?? PLACEHOLDER_API_KEY,
      // Keep the process environment out of requests to a configured provider.
      organization: null,
      project: null,
      adminAPIKey: null,
      webhookSecret: null,
      // Without a key no Authorization header is sent (the placeholder only satisfies the SDK), unless
      // the configured headers carry one of their own.
      defaultHeaders: {
        ...provider.headers,
        ...(provider.apiKey === undefined && !Object.keys(provider.headers ?? {}).some((name) => name.toLowerCase() === 'authorization') ? { authorization: null } : {}),
      },
      maxRetries: 0,
      logLevel: 'off',
      // A redirect is an answer, not followed: fetch would send the configured headers (all but
      // Authorization) to whatever origin it names. A 3xx is then a failure naming its status.
      fetchOptions: { redirect: 'manual' },
    })
    this.#secrets = secretsOf(provider)
  }

  /** Sends one attempt (`request.bodyText`, as is) and answers how it ended; never throws for provider trouble. */
  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { signal: callerSignal } = request
    if (callerSignal.aborted) return interrupted('cancelled', 'the request was cancelled before it was sent')
    if (!(request.timeoutMs > 0)) return interrupted('timed_out', `the request timed out (timeoutMs ${request.timeoutMs})`)
    const { idleTimeoutMs } = request
    if (idleTimeoutMs !== undefined && !(idleTimeoutMs > 0)) return interrupted('timed_out', `the request timed out (idleTimeoutMs ${idleTimeoutMs})`)

    const controller = new AbortController()
    let stop: StopReason | undefined
    const halt = (reason: StopReason) => {
      if (stop) return
      stop = reason
      controller.abort()
    }
    const onAbort = () => halt('cancel')
    callerSignal.addEventListener('abort', onAbort, { once: true })
    const timeoutMs = timerMs(request.timeoutMs)
    const timer = setTimeout(() => halt('timeout'), timeoutMs)
    // The idle limit runs from the request to the headers, then from each part of the body to the
    // next: an error answer's body too, which the SDK reads before this method sees the response.
    const hooks: AttemptHooks = { progress: () => idle?.refresh() }
    const idle = idleTimeoutMs === undefined ? undefined : setTimeout(() => halt(hooks.status === undefined ? 'silent' : 'stalled'), timerMs(idleTimeoutMs))
    const stopped = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(new BodyReadFailure('aborted')), { once: true })
    })
    stopped.catch(() => undefined)

    try {
      const response = await this.#client
        .post('/chat/completions', {
          // A string body with an explicit content-type is sent verbatim by the SDK.
          body: request.bodyText,
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          signal: controller.signal,
          timeout: timeoutMs,
          maxRetries: 0,
          // Per-request options are spread into what the client's fetch gets: the hooks reach it there.
          fetchOptions: { redirect: 'manual', [ATTEMPT]: hooks } as { redirect: 'manual' },
        })
        .asResponse()
      const contentType = response.headers.get('content-type') ?? ''
      const answered = /^\s*text\/event-stream/i.test(contentType)
        ? await this.#readStream(response, controller, request, () => stop === 'stalled' || stop === 'timeout')
        : await this.#readJson(response, stopped)
      // The exchange's id, as the SDK reads it (`withResponse().request_id`): kept only if a fact can hold it.
      const requestId = requestIdOf(response.headers.get('x-request-id'))
      const output = requestId === undefined ? answered : { ...answered, requestId }
      // The SDK ends an SSE iteration quietly when the request is aborted: check before trusting it. A
      // stream that stalled or ran out of time after naming its finish reason is whole (#readStream
      // returns it only then): the answer is kept, not paid for again.
      if (stop === 'cancel' || stop === 'silent') return this.#stopped(stop, request)
      return { kind: 'completed', output }
    } catch (error) {
      // The id of the exchange that went wrong, when an answer came: the SDK's for an error answer
      // (`APIError.requestID`), else its headers' (an error inside a 200 answer, a malformed one, a cut stream).
      const requestId = (error instanceof APIError ? error.requestID : undefined) ?? hooks.requestId
      return this.#withRequestId(await this.#classify(error, stop, request, hooks), requestId)
    } finally {
      clearTimeout(timer)
      clearTimeout(idle)
      callerSignal.removeEventListener('abort', onAbort)
      if (!controller.signal.aborted) controller.abort()
    }
  }

  async #readJson(response: Response, stopped: Promise<never>): Promise<ModelOutput> {
    let text: string
    try {
      text = await Promise.race([response.text(), stopped])
    } catch (error) {
      throw error instanceof BodyReadFailure ? error : new BodyReadFailure(`the connection failed while reading the answer: ${describe(error)}`)
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      throw new MalformedAnswer(`the provider answered with a body that is not JSON: ${quote(text, this.#secrets)}`)
    }
    // Some servers answer an error with HTTP 200 and an `error` member.
    const reported = reportedError(this.#secrets, null, json, 'in its answer')
    if (reported) throw reported
    const parsed = CompletionSchema.safeParse(json)
    if (!parsed.success) throw new MalformedAnswer(`the provider answered with JSON that is not a chat completion (${zodProblem(parsed.error)})`)
    // The first choice, as a stream's is (index 0): a server asked for several (`n`) need not list them in order.
    const { choices } = parsed.data
    const choice = choices.find((candidate) => (candidate.index ?? 0) === 0) ?? choices[0]
    if (!choice) throw new MalformedAnswer('the provider answered without choices')
    const toolCalls: ToolCall[] = (choice.message.tool_calls ?? []).map((call) => callOf(callIdOf(call.id), call.function.name, call.function.arguments, call.extra_content))
    const finishReason = choice.finish_reason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop')
    if (finishReason === 'error') throw failedGeneration()
    // A refusal (content null, `refusal` set) is the model's answer: recorded as its text, so the log shows it.
    return outputOf(
      choice.message.content ?? choice.message.refusal ?? undefined,
      toolCalls,
      finishReason,
      usageOf(parsed.data.usage),
      choice.message.reasoning_content || choice.message.reasoning,
      parsed.data.id,
      choice.message.reasoning_details,
    )
  }

  /** `whole`: the stop that aborted the read (a stall, the time limit) leaves an answer that named its finish reason whole. */
  async #readStream(response: Response, controller: AbortController, { body, onText, onReasoning, onToolCall }: Pick<ModelRequest, 'body' | 'onText' | 'onReasoning' | 'onToolCall'>, whole: () => boolean): Promise<ModelOutput> {
    let text = ''
    let reasoning = ''
    // OpenRouter's `reasoning`, kept apart: taken only from an answer without `reasoning_content`, never joined to it.
    let reasoningOther = ''
    const details = new StreamedDetails()
    let done = false
    let refusal = ''
    let finishReason: string | undefined
    let usage: ModelUsage | undefined
    // Every chunk repeats the answer's id: the first non-empty string is taken (and kept only if a fact can hold it).
    let responseId: string | undefined
    // Merged as OpenAI's own stream helper does: by `index`; a delta's name replaces the name (some
    // servers repeat it in every delta), unless the names of the call's deltas differ (a name split,
    // as arguments are: `web_`, `search`, even where the last piece names another tool; joined unless
    // only the last names a tool of the run) or only they joined name one (see `streamedName`); its
    // arguments are appended; a new id at an index in use starts another call (some servers put
    // parallel calls all at index 0), and a part naming the id of a call begun before goes to it. A
    // part without an index continues the call the part before went to, unless it names a new id, sits beside another
    // part of its delta, or names another tool, or the same tool once the last call's arguments are
    // whole: it then starts the next one.
    // `again`: begun by a part naming the tool of the call before again once that call's arguments were
    // whole; left without arguments (or an id) to the end, it was that server repeating the name, no call.
    // `extra`: the call's `extra_content` objects merged (see `mergeInto`).
    const calls: { index: number; id: string; name: string; joined: string; split: boolean; again: boolean; arguments: string; extra?: Record<string, unknown> }[] = []
    // The call the part before went to: the one a part without an index continues.
    let current: (typeof calls)[number] | undefined
    // The run's tools: which of a call's names (its parts joined, or its last) is recorded (see `streamedName`).
    const catalog = new Set((body.tools ?? []).map((tool) => tool.function?.name))
    try {
      // The SDK's SSE parser, read here rather than through its `Stream`, which reads on past
      // `[DONE]` until the body ends: an answer is complete at `[DONE]`, whatever the connection does next.
      for await (const sse of _iterSSEMessages(response, controller)) {
        if (sse.data.startsWith('[DONE]')) {
          done = true
          break
        }
        let item: unknown
        try {
          item = JSON.parse(sse.data)
        } catch {
          // An error event the client cannot read is still the provider's error, not an answer cut short.
          if (sse.event === 'error') throw unreadableError(this.#secrets, sse.data)
          throw new MalformedAnswer('the provider streamed an event that is not JSON (the stream was cut mid-event?)')
        }
        const reported = reportedError(this.#secrets, sse.event, item)
        if (reported) throw reported
        const parsed = ChunkSchema.safeParse(item)
        if (!parsed.success) throw new MalformedAnswer(`the provider streamed a chunk that is not a chat completion chunk (${zodProblem(parsed.error)})`)
        const chunk = parsed.data
        usage = usageOf(chunk.usage) ?? usage
        if (responseId === undefined && typeof chunk.id === 'string' && chunk.id !== '') responseId = chunk.id
        for (const choice of chunk.choices ?? []) {
          if ((choice.index ?? 0) !== 0) continue
          const delta = choice.delta
          if (delta?.content) {
            text += delta.content
            onText?.(delta.content)
          }
          if (delta?.refusal) refusal += delta.refusal
          if (delta?.reasoning_content) {
            reasoning += delta.reasoning_content
            onReasoning?.(delta.reasoning_content)
          }
          if (delta?.reasoning) {
            reasoningOther += delta.reasoning
            // Passed on as long as the answer has no `reasoning_content` (which is what is recorded
            // then): a server that sends both names passes its reasoning on once.
            if (reasoning === '') onReasoning?.(delta.reasoning)
          }
          if (delta?.reasoning_details) details.add(delta.reasoning_details)
          for (const [position, part] of (delta?.tool_calls ?? []).entries()) {
            const last = current
            // A part naming the id of a call begun before goes to that call (some servers interleave
            // the parts of parallel calls, without an index or all at index 0).
            const known = part.id === '' ? undefined : calls.find((candidate) => candidate.id === part.id && (part.index == null || candidate.index === part.index))
            // Without an index, a part starts the next call when it names another id, sits beside
            // another part of the same delta, or names a tool (another one, or the same again once the
            // last call's arguments are whole JSON: two calls of one tool); else it continues the last call.
            const next =
              known === undefined &&
              last !== undefined &&
              !(part.id !== '' && part.id === last.id) &&
              ((part.id !== '' && last.id !== '') ||
                position > 0 ||
                (!!part.function?.name && last.name !== '' && (part.function.name !== last.name || isWholeJson(last.arguments))))
            const index = known?.index ?? part.index ?? (last === undefined ? 0 : next ? Math.max(...calls.map((c) => c.index)) + 1 : last.index)
            let call = known ?? calls.findLast((candidate) => candidate.index === index)
            if (!call || (part.id && call.id && part.id !== call.id)) {
              const again = next && part.index == null && position === 0 && !part.id && part.function?.name === last?.name
              call = { index, id: '', name: '', joined: '', split: false, again, arguments: '' }
              calls.push(call)
            }
            if (part.id) call.id = part.id
            if (part.function?.name) {
              // Pieces that differ are a name split; the same name again is a server repeating it.
              if (call.name !== '' && part.function.name !== call.name) call.split = true
              call.name = part.function.name
              call.joined += part.function.name
            }
            if (part.function?.arguments) call.arguments += part.function.arguments
            if (isObject(part.extra_content)) mergeInto((call.extra ??= {}), part.extra_content)
            current = call
            onToolCall?.({
              index,
              ...(part.id ? { callId: part.id } : {}),
              // The name so far, as it would be recorded now (a name in parts, joined): not the part's piece of it.
              ...(part.function?.name ? { name: streamedName(call, catalog) } : {}),
              ...(part.function?.arguments ? { arguments: part.function.arguments } : {}),
            })
          }
          if (choice.finish_reason) finishReason = choice.finish_reason
        }
      }
    } catch (error) {
      if (error instanceof MalformedAnswer || error instanceof ReportedError) throw error
      // The connection failed after the answer named its finish reason: the answer is whole (only a
      // trailing usage chunk may be missing), and retrying would pay for it again.
      if (finishReason === undefined || (controller.signal.aborted && !whole())) {
        throw new BodyReadFailure(`the connection failed while reading the stream: ${describe(error)}`)
      }
    }
    if (controller.signal.aborted && !done && !(whole() && finishReason !== undefined)) throw new BodyReadFailure('aborted')
    // `[DONE]` ends the answer whole; one that named no finish reason gets the one a plain JSON answer gets.
    if (finishReason === undefined && !done) throw new MalformedAnswer('the provider stream ended without a finish_reason or [DONE]')
    if (finishReason === 'error') throw failedGeneration()
    const toolCalls: ToolCall[] = []
    const made = calls.filter((call) => !(call.again && call.arguments === '' && call.id === ''))
    for (const [position, call] of made.sort((a, b) => a.index - b.index).entries()) {
      if (!call.name) throw new MalformedAnswer(`the provider streamed tool call ${position} without a name`)
      toolCalls.push(callOf(callIdOf(call.id), streamedName(call, catalog), call.arguments, call.extra))
    }
    return outputOf(text.length > 0 ? text : refusal, toolCalls, finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop'), usage, reasoning || reasoningOther, responseId, details.entries)
  }

  #stopped(stop: StopReason, { timeoutMs, idleTimeoutMs }: Pick<ModelRequest, 'timeoutMs' | 'idleTimeoutMs'>): ModelResponse {
    switch (stop) {
      case 'cancel':
        return interrupted('cancelled', 'the request was cancelled')
      case 'timeout':
        return interrupted('timed_out', `the request timed out after ${timeoutMs}ms`)
      case 'silent':
        return interrupted('timed_out', `the provider did not start answering within ${idleTimeoutMs}ms (idleTimeoutMs)`)
      case 'stalled':
        return interrupted('timed_out', `the answer stalled: nothing arrived for ${idleTimeoutMs}ms (idleTimeoutMs)`)
    }
  }

  async #classify(error: unknown, stop: StopReason | undefined, request: Pick<ModelRequest, 'timeoutMs' | 'idleTimeoutMs'>, hooks: AttemptHooks): Promise<ModelResponse> {
    const { timeoutMs } = request
    const { status } = hooks
    // An error answer whose body stalled is that error (a 503 is retried as a 503 is), said so.
    if (stop === 'stalled' && status !== undefined && (status < 200 || status >= 300)) {
      const message = `the provider answered HTTP ${status} and then sent nothing for ${request.idleTimeoutMs}ms (idleTimeoutMs)`
      return interrupted(retryableStatus(status) ? 'retryable_failure' : 'failed', message, { provider: refusalOf(status, undefined, this.#secrets) })
    }
    if (stop) return this.#stopped(stop, request)
    // Read by now, or failed with the attempt (its body is the answer's, and the attempt has ended).
    const errorBody = await hooks.errorBody
    if (error instanceof MalformedAnswer) return interrupted('failed', this.#redact(error.message), { malformed: true })
    if (error instanceof ReportedError) return interrupted(error.retryable ? 'retryable_failure' : 'failed', this.#redact(error.message), { provider: error.provider })
    if (error instanceof BodyReadFailure) return interrupted('retryable_failure', this.#redact(error.message))
    if (error instanceof APIConnectionTimeoutError) return interrupted('timed_out', `the request timed out after ${timeoutMs}ms`)
    if (error instanceof APIUserAbortError) return interrupted('cancelled', 'the request was cancelled')
    if (error instanceof APIConnectionError) {
      const why = describe(error.cause ?? error)
      // fetch refuses some ports outright (the Fetch standard's "bad port" list): every retry would be refused too.
      const never = /\bbad port\b/.test(why)
      return interrupted(never ? 'failed' : 'retryable_failure', this.#redact(`could not reach the provider: ${why}${never ? ' (fetch refuses this port: give the provider another one)' : ''}`))
    }
    if (error instanceof APIError) {
      const status = error.status
      const detail = quote(providerMessage(error, errorBody), this.#secrets)
      const provider = refusalOf(status, errorDetailsOf(errorBody, error.error), this.#secrets)
      if (status === undefined) return interrupted('failed', this.#redact(`the provider reported an error: ${detail}`), { provider })
      const retryAfterMs = retryAfterMsOf(error.headers)
      const extra = { provider, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) }
      // A redirect is not followed (see the constructor): its target is what the user needs to know.
      const location = status >= 300 && status < 400 ? error.headers?.get('location') : null
      if (location) {
        const message = `the provider answered HTTP ${status}, moved to ${quote(location, this.#secrets)}, which is not followed: if that is the provider's address now, make it the baseUrl`
        return interrupted('failed', this.#redact(message), { provider })
      }
      const hint = status === 404 && this.#unversioned !== undefined ? this.#unversioned : ''
      // OpenAI answers an account out of credit 429 too, as a rate limit: no wait cures it.
      const exhausted = status === 429 && [error.code, error.type].some((tag) => typeof tag === 'string' && EXHAUSTED_QUOTA.test(tag))
      return interrupted(retryableStatus(status) && !exhausted ? 'retryable_failure' : 'failed', this.#redact(`${answeredHead(status)}${detail}${hint}`), exhausted ? { provider } : extra)
    }
    return interrupted('failed', this.#redact(`the request failed: ${describe(error)}`))
  }

  /**
   * An interrupted answer with the provider's id for its request (`x-request-id`) in its `provider`,
   * redacted as the message is, when the provider sent one a fact can hold: none came with a
   * connection refused or a timeout before the headers.
   */
  #withRequestId(response: ModelResponse, requestId: string | null | undefined): ModelResponse {
    if (response.kind !== 'interrupted') return response
    const id = requestIdOf(requestId, (text) => this.#redact(text))
    return id === undefined ? response : { ...response, provider: { ...response.provider, requestId: id } }
  }

  /** Removes every configured secret from a message (see actors/redaction.ts). */
  #redact(message: string): string {
    return redactFailure(message, this.#secrets)
  }
}

/**
 * The hooks of one attempt, handed to the client's fetch with the request: the status once the
 * headers arrived, every piece of the body after them, the text of an error answer's body.
 */
interface AttemptHooks {
  status?: number
  /** The answer's `x-request-id` header, once its headers arrived. */
  requestId?: string
  progress: () => void
  errorBody?: Promise<string | undefined>
}

/** Where the hooks ride on the request options (a symbol: never a header, never sent). */
const ATTEMPT = Symbol('factstate attempt hooks')

/** The code (and type) OpenAI gives a 429 that is an exhausted quota or balance, not a rate limit. */
const EXHAUSTED_QUOTA = /^insufficient_quota$/i

/** Statuses a retry may fix: a timeout, a rate limit, the server's own failure. */
const retryableStatus = (status: number): boolean => status === 408 || status === 429 || status >= 500

/** The response with a body that calls `progress` for every piece of it that arrives. */
function watched(response: Response, progress: () => void): Response {
  // A body-less status (204, 304, …) is kept as it is: a Response with it and a body cannot be made.
  if (response.body === null || [101, 204, 205, 304].includes(response.status)) return response
  const body = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(piece, controller) {
        progress()
        controller.enqueue(piece)
      },
    }),
  )
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers })
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    const cause = error.cause instanceof Error ? `: ${describe(error.cause)}` : ''
    return `${error.message}${typeof code === 'string' && !error.message.includes(code) ? ` (${code})` : ''}${cause}`
  }
  return String(error)
}

function providerMessage(error: APIError, errorBody: string | undefined): string {
  const body = error.error as { message?: unknown } | undefined
  if (body && typeof body === 'object' && typeof body.message === 'string') return body.message
  // Not OpenAI's `{ error: { message } }`: vLLM's `{ object: "error", message }`, FastAPI's `{ detail }`, plain text.
  if (errorBody !== undefined && errorBody.trim() !== '') {
    let parsed: unknown
    try {
      parsed = JSON.parse(errorBody)
    } catch {
      return errorBody
    }
    const { message, detail, error: inner } = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as { message?: unknown; detail?: unknown; error?: unknown }
    if (typeof message === 'string') return message
    if (typeof inner === 'string') return inner
    if (detail !== undefined) return typeof detail === 'string' ? detail : JSON.stringify(detail)
    return errorBody
  }
  // The SDK prefixes the status ("503 upstream down"); the caller's message already names it.
  return error.status === undefined ? error.message : error.message.replace(new RegExp(`^${error.status}\\s+`), '')
}

/** Provider text as a message quotes it: redacted first (a secret cut by the limit, or split by whitespace, would not be found after), on one line, at most `QUOTE_LIMIT` characters. */
function quote(text: string, secrets: Secrets): string {
  const flat = redactFailure(text, secrets).replace(/\s+/g, ' ').trim()
  return flat.length > QUOTE_LIMIT ? `${flat.slice(0, QUOTE_LIMIT)}…` : flat
}
