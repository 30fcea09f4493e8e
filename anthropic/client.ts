/**
 * A `ModelClient` for Anthropic's Messages API: `anthropicClient(sdk, options?)`. No runtime
 * dependency: `sdk` is typed by the part of `@anthropic-ai/sdk`'s client it uses (`messages.create`,
 * `apiKey`, `authToken`), so an `Anthropic` instance is one, as is anything shaped so.
 *
 * The engine builds each request in OpenAI's chat shape (`ChatRequestBody`); this translates it to a
 * Messages request, sends it once (`maxRetries: 0`: the engine retries, recording each attempt),
 * reads the answer (a `Message`, or its SSE events with `stream: true`), and classifies what went
 * wrong by the error's fields (`status`, `headers`, `error.type`), never by its class.
 */
import { FactstateError } from '../errors.js'
import { kindOf, readOptions } from '../options.js'
import type { ChatMessage, ChatRequestBody, ModelClient, ModelRequest, ModelResponse } from '../actors/model-client.js'
import { RETRYABLE_REPORTED_ERROR, retryAfterMsOf } from '../actors/openai-chat-client.js'
import { timerMs } from '../actors/timer-limit.js'
import { isObject as isRecord } from '../store/encoding.js'
import type { JsonObject, ModelOutput, ModelUsage, ProviderRefusal, ToolCall } from '../facts/types.js'

/** A block of a Messages request's turn, as this client sends them. */
export type AnthropicContentBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content?: string }

/** A turn of a Messages request. */
export interface AnthropicMessageParam {
  role: 'user' | 'assistant'
  content: AnthropicContentBlock[]
}

/** A tool of a Messages request. */
export interface AnthropicTool {
  name: string
  description?: string
  input_schema: { type: 'object'; [key: string]: unknown }
}

/**
 * The Messages request this client sends: the members it sets, and the run's `providerOptions`
 * beside them (`temperature`, `top_k`, `stop_sequences`, `metadata`, `tool_choice`, …).
 */
export interface AnthropicCreateParams {
  model: string
  max_tokens: number
  messages: AnthropicMessageParam[]
  system?: string
  tools?: AnthropicTool[]
  stream?: boolean
  [key: string]: unknown
}

/** The request options of the SDK that this client passes on every call. */
export interface AnthropicRequestOptions {
  signal?: AbortSignal | undefined
  /** The SDK's own limit, in milliseconds: the attempt's `timeoutMs`. */
  timeout?: number | undefined
  /** Always 0: the engine retries, each attempt a fact. */
  maxRetries?: number | undefined
}

/** What the SDK's `APIPromise.withResponse()` resolves to: the parsed answer (a `Message`, or an async iterable of stream events) and the HTTP response. */
export interface AnthropicResponseWithId {
  data: unknown
  response: { headers: Headers }
  request_id?: string | null | undefined
}

/**
 * The part of `@anthropic-ai/sdk`'s `Anthropic` client that {@link anthropicClient} uses: an
 * `Anthropic` instance is one. `apiKey` and `authToken` are read (when strings of 8 characters or
 * more) as the client's `secrets` when the engine makes it for a run, and again on each attempt (with
 * `request.addSecret`): a run whose input holds one is refused before anything is written, and an
 * answer quoting one is redacted before it is recorded.
 */
export interface AnthropicSdk {
  readonly apiKey?: string | null | undefined
  readonly authToken?: string | null | undefined
  /** Where the SDK sends its requests (`/v1/messages` under it): checked against the run's `provider.baseUrl` when the `provider` option is given. */
  readonly baseURL?: string | undefined
  messages: {
    create(params: AnthropicCreateParams, options?: AnthropicRequestOptions): AnthropicApiPromise
  }
}

/**
 * What `messages.create` returns (the SDK's `APIPromise`): `withResponse()` for the answer, and
 * `asResponse()`, when it has one, for the response's headers as soon as they arrive, so that an
 * answer whose body then fails (not JSON, cut, stalled) is recorded with its `request-id`.
 */
export interface AnthropicApiPromise {
  withResponse(): Promise<AnthropicResponseWithId>
  asResponse?(): Promise<{ headers: Headers }>
}

/** Options of {@link anthropicClient}. */
export interface AnthropicClientOptions {
  /**
   * `max_tokens` for a run without a `mainOutputLimit` (the API requires one): a whole number from 1.
   * Not sealed: set the run's `mainOutputLimit` instead, which is recorded, sealed, and wins.
   * Without either, an attempt fails (`model_failed`) before anything is sent.
   */
  maxTokens?: number | undefined
  /**
   * Secrets the client's requests carry besides what `sdk.apiKey` and `sdk.authToken` hold (a
   * proxy's token in the SDK's `defaultHeaders`, say), each 8–16,384 characters: the client's
   * `secrets` with those (`ModelClient.secrets`: a run whose input holds one, whatever it looks like, is
   * refused before anything is written, and an answer that quotes one is redacted before it is recorded).
   */
  secrets?: readonly string[] | undefined
  /**
   * The run's provider, as `createClient(provider)` gets it:
   * `createClient: (provider) => anthropicClient(anthropic, { provider })`. Its `baseUrl` must be
   * where the SDK client sends its requests, its `baseURL` (or that and `/v1`; trailing slashes
   * aside): the SDK's `baseURL` decides, and a run that names another endpoint is refused
   * (`ANTHROPIC_INVALID_OPTIONS`, `details.field` `provider.baseUrl`; the engine refuses the run
   * with `RUN_INVALID_INPUT` before anything is written) rather than sent elsewhere than it says.
   * An `sdk` without a `baseURL` string cannot be checked: refused too. Without this option nothing is checked.
   */
  provider?: { readonly baseUrl: string } | undefined
}

const OPTIONS = ['maxTokens', 'secrets', 'provider'] as const
const MAX_SECRET = 16_384
const invalidOptions = (message: string, field: string) => new FactstateError('ANTHROPIC_INVALID_OPTIONS', `anthropicClient: ${message}`, { details: { field } })

/**
 * A `ModelClient` that sends each request to Anthropic's Messages API through `sdk`, an
 * `@anthropic-ai/sdk` client (`new Anthropic({ apiKey })`):
 * `new ModelExecutor({ createClient: () => anthropicClient(new Anthropic({ apiKey })) })`.
 *
 * `ANTHROPIC_INVALID_OPTIONS` (`details.field`) for an `sdk` without `messages.create`, or options it
 * cannot use.
 */
export function anthropicClient(sdk: AnthropicSdk, options?: AnthropicClientOptions): ModelClient {
  const given = readOptions(options, OPTIONS, { call: 'anthropicClient', code: 'ANTHROPIC_INVALID_OPTIONS', details: (field) => ({ field }) })
  let create: unknown
  try {
    create = sdk.messages.create
  } catch {
    throw invalidOptions(`sdk must be an @anthropic-ai/sdk client (new Anthropic({ apiKey })) with messages.create, not ${kindOf(sdk)}`, 'sdk')
  }
  if (typeof create !== 'function') throw invalidOptions(`sdk must be an @anthropic-ai/sdk client (new Anthropic({ apiKey })) with messages.create, not ${kindOf(sdk)}`, 'sdk')
  const maxTokens = given.maxTokens
  if (maxTokens !== undefined && (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens < 1)) {
    throw invalidOptions(`maxTokens must be a whole number from 1, not ${kindOf(maxTokens)}`, 'maxTokens')
  }
  const secrets: string[] = []
  if (given.secrets !== undefined) {
    if (!Array.isArray(given.secrets)) throw invalidOptions(`secrets must be a list of strings, not ${kindOf(given.secrets)}`, 'secrets')
    for (const [index, secret] of (given.secrets as unknown[]).entries()) {
      if (typeof secret !== 'string' || secret.trim().length < 8 || secret.length > MAX_SECRET) {
        throw invalidOptions(`secrets[${index}] must be a string of 8 to ${MAX_SECRET.toLocaleString('en-US')} characters (once trimmed), not ${kindOf(secret)}`, `secrets.${index}`)
      }
      secrets.push(secret)
    }
  }
  if (given.provider !== undefined) checkBaseUrl(sdk, given.provider)
  return new AnthropicModelClient(sdk, maxTokens as number | undefined, secrets)
}

/** An http(s) URL as a request's place is told: its origin and path, trailing slashes off (no credentials, query or fragment). */
function placeOf(url: string): string | undefined {
  try {
    const parsed = new URL(url)
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return undefined
    return `${parsed.origin}${parsed.pathname.replace(/\/+$/, '')}`
  } catch {
    return undefined
  }
}

/**
 * Refuses a run whose `provider.baseUrl` is not where `sdk` sends its requests: the SDK's `baseURL`
 * decides, and a request sent elsewhere than the run names would be a silent surprise (a test's
 * local server named in the run, the SDK's default sending to Anthropic with a real key).
 */
function checkBaseUrl(sdk: AnthropicSdk, provider: unknown): void {
  let baseUrl: unknown
  try {
    baseUrl = isRecord(provider) ? provider.baseUrl : undefined
  } catch {
    baseUrl = undefined
  }
  if (typeof baseUrl !== 'string') throw invalidOptions(`provider must be the run's provider ({ baseUrl, … }, as createClient(provider) gets it), not ${kindOf(provider)}`, 'provider')
  let held: unknown
  try {
    held = sdk.baseURL
  } catch {
    held = undefined
  }
  const sdkPlace = typeof held === 'string' ? placeOf(held) : undefined
  if (sdkPlace === undefined) {
    throw invalidOptions("the sdk has no baseURL to check the run's provider.baseUrl against (an @anthropic-ai/sdk client has one): leave the provider option out, or give the sdk a baseURL", 'provider.baseUrl')
  }
  const runPlace = placeOf(baseUrl)
  if (runPlace === sdkPlace || runPlace === `${sdkPlace}/v1`) return
  throw invalidOptions(
    `the run's provider.baseUrl ${runPlace ?? JSON.stringify(baseUrl)} is not where the SDK client sends its requests (its baseURL ${sdkPlace}, which decides): give the run that baseUrl, or the SDK client that baseURL; a run served elsewhere (a child run on an OpenAI-compatible server, say) needs a createClient that picks the client by the run's provider: anthropicClient(sdk, { provider }) for the SDK's baseURL, new OpenAIChatClient(provider) for the rest`,
    'provider.baseUrl',
  )
}

type Ending = 'cancelled' | 'timeout' | 'idle'

class AnthropicModelClient implements ModelClient {
  readonly #sdk: AnthropicSdk
  readonly #maxTokens: number | undefined
  readonly #secrets: readonly string[]

  constructor(sdk: AnthropicSdk, maxTokens: number | undefined, secrets: readonly string[]) {
    this.#sdk = sdk
    this.#maxTokens = maxTokens
    this.#secrets = secrets
  }

  /**
   * The SDK's `apiKey` and `authToken` as it holds them now, and the `secrets` option: the SDK holds
   * the key, not the run's provider config. Read by the engine when it makes the client for a run, so
   * the run is covered from its first fact (a key pasted into the message is refused). A key or token
   * that is no string, or shorter than 8 characters (a placeholder), is left out; a getter that throws too.
   */
  get secrets(): readonly string[] {
    const held = [readSecret(this.#sdk, 'apiKey'), readSecret(this.#sdk, 'authToken')].filter(
      (secret): secret is string => secret !== undefined && secret.trim().length >= 8 && secret.length <= MAX_SECRET,
    )
    return [...new Set([...this.#secrets, ...held])]
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    // Again on each attempt (already registered ones cost nothing): an SDK whose key or token was
    // set after the run began (a refreshed token) is covered before this attempt answers (a 401 quoting it, say).
    for (const secret of this.secrets) request.addSecret?.(secret)
    const translated = toMessagesRequest(request.body, this.#maxTokens)
    if (typeof translated === 'string') return { kind: 'interrupted', status: 'failed', message: translated }
    if (request.signal.aborted) return { kind: 'interrupted', status: 'cancelled', message: 'the run was cancelled before the request was sent' }

    // One signal for all that may end the attempt, and why it did: the SDK's stream ends quietly
    // (no throw) when its signal aborts, so the reason must be kept here.
    const controller = new AbortController()
    let ending: Ending | undefined
    const end = (why: Ending) => {
      ending ??= why
      controller.abort()
    }
    const onCancel = () => end('cancelled')
    request.signal.addEventListener('abort', onCancel, { once: true })
    const whole = setTimeout(() => end('timeout'), timerMs(request.timeoutMs))
    let idle: ReturnType<typeof setTimeout> | undefined
    const touch = () => {
      if (request.idleTimeoutMs === undefined) return
      clearTimeout(idle)
      idle = setTimeout(() => end('idle'), timerMs(request.idleTimeoutMs))
    }
    touch()
    let requestId: string | undefined
    // The response's headers, once they arrived: the SDK's answer comes only with the whole body read.
    let headersArrived: Promise<void> | undefined
    try {
      const sent = this.#sdk.messages.create(translated, { signal: controller.signal, timeout: timerMs(request.timeoutMs), maxRetries: 0 })
      // withResponse() first: it starts the parse that asResponse() then leaves alone (the SDK ends a
      // traced call's span early for a response taken before its parse began).
      const whole = sent.withResponse()
      headersArrived = headersOf(sent, (id) => (requestId ??= id))
      const { data, response, request_id } = await whole
      requestId = idOf(request_id) ?? idOf(headerOf(response?.headers, 'request-id')) ?? requestId
      touch()
      const answer = translated.stream === true ? await readStream(data, request, touch, requestId) : fromMessage(data, requestId)
      // A stream that named its stop reason is a whole answer, kept even if the attempt ended after
      // it (a stall before message_stop); one cut short by the attempt's end is that end, not malformed.
      if (answer.kind === 'completed' || (ending === undefined && !request.signal.aborted)) return answer
      return interruption(undefined, ending, request, requestId)
    } catch (error) {
      // A body that failed after its headers (not JSON, cut, stalled): its request-id, as a stream's.
      await settledSoon(headersArrived)
      return interruption(error, ending, request, requestId)
    } finally {
      clearTimeout(whole)
      clearTimeout(idle)
      request.signal.removeEventListener('abort', onCancel)
      // Whatever is still open of the exchange (a stream left on an unreadable event) is closed.
      controller.abort()
    }
  }
}

/**
 * Calls `found` with the `request-id` of `sent`'s response as soon as its headers arrive (through
 * the SDK's `asResponse()`, which returns the response without reading its body); nothing for an
 * SDK-shaped client without it, or a request that got no answer.
 */
function headersOf(sent: AnthropicApiPromise, found: (requestId: string) => void): Promise<void> | undefined {
  let asResponse: unknown
  try {
    asResponse = sent.asResponse
  } catch {
    return undefined
  }
  if (typeof asResponse !== 'function') return undefined
  return Promise.resolve()
    .then(() => (asResponse as () => Promise<{ headers: Headers }>).call(sent))
    .then(
      (response) => {
        const id = idOf(headerOf(response?.headers, 'request-id'))
        if (id !== undefined) found(id)
      },
      () => undefined,
    )
}

/**
 * Waits for `pending` when it is about to settle: the SDK's response promise has settled by the time
 * its parse fails, so what `headersOf` chains on it runs within the same turn. One that would wait
 * longer (an SDK-shaped client whose `asResponse()` never settles) is not waited for.
 */
async function settledSoon(pending: Promise<void> | undefined): Promise<void> {
  if (pending === undefined) return
  let timer: ReturnType<typeof setImmediate> | undefined
  await Promise.race([pending, new Promise<void>((resolve) => (timer = setImmediate(resolve)))])
  if (timer !== undefined) clearImmediate(timer)
}

function readSecret(sdk: AnthropicSdk, member: 'apiKey' | 'authToken'): string | undefined {
  try {
    const value: unknown = sdk[member]
    return typeof value === 'string' ? value : undefined
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------------------------
// The request: OpenAI's chat shape in, a Messages request out.

/** What `tool_use.input` holds for arguments that are not a JSON object: never from a run (the engine replays a call it rejected with `{}`), only in a body of your own. */
export const RAW_ARGUMENTS_KEY = 'raw_arguments'

/**
 * The Messages request for `body`, or why there is none (a message for a `failed` answer). The
 * system prompt apart (the system messages' text, joined by a blank line), tool results as
 * `tool_result` blocks of a user turn, turns of one role merged, the catalog as `{ name,
 * description, input_schema }`, `max_tokens` from the body (the run's `mainOutputLimit`) else
 * `maxTokens`, the run's `providerOptions` at the top level.
 */
export function toMessagesRequest(body: ChatRequestBody, maxTokens: number | undefined): AnthropicCreateParams | string {
  const { model, messages, tools, max_tokens: limit, ...providerOptions } = body
  const max = limit ?? maxTokens
  if (max === undefined) {
    return "Anthropic requires max_tokens: set the run's mainOutputLimit (recorded and sealed), or anthropicClient's maxTokens option"
  }
  const system: string[] = []
  const turns: AnthropicMessageParam[] = []
  const push = (role: 'user' | 'assistant', blocks: AnthropicContentBlock[]) => {
    if (blocks.length === 0) return
    const last = turns.at(-1)
    // Two messages of one role may follow each other (a continuation's message after an unanswered
    // one, the tool results of one step one message each): the API takes one turn per role.
    if (last !== undefined && last.role === role) last.content.push(...blocks)
    else turns.push({ role, content: blocks })
  }
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        if (message.content.trim() !== '') system.push(message.content)
        break
      case 'user':
        push('user', textBlocks(message.content))
        break
      case 'assistant':
        push('assistant', assistantBlocks(message))
        break
      case 'tool':
        // Tool results follow the assistant turn of their calls, so they lead their user turn, as the API requires.
        push('user', [message.content === '' ? { type: 'tool_result', tool_use_id: message.tool_call_id } : { type: 'tool_result', tool_use_id: message.tool_call_id, content: message.content }])
        break
    }
  }
  const params: AnthropicCreateParams = { ...providerOptions, model, max_tokens: max, messages: turns }
  if (system.length > 0) params.system = system.join('\n\n')
  if (tools !== undefined && tools.length > 0) params.tools = tools.map(toTool)
  return params
}

function textBlocks(text: string | null): AnthropicContentBlock[] {
  // The API refuses empty text blocks.
  return text !== null && text.trim() !== '' ? [{ type: 'text', text }] : []
}

/** The `format` OpenRouter gives Anthropic's thinking in `reasoning_details`, and this client gives it in `reasoningDetails`. */
const ANTHROPIC_REASONING_FORMAT = 'anthropic-claude-v1'

/**
 * The thinking blocks an answer's recorded `reasoningDetails` stand for, in their order: a
 * `reasoning.text` entry with a string `text` and `signature` is a `thinking` block, a
 * `reasoning.encrypted` entry with a string `data` a `redacted_thinking` block, when its `format`
 * is Anthropic's or it has none. Other entries (another provider's, a summary, one without its
 * signature) are not Anthropic's to take back: left out.
 */
function thinkingBlocks(details: readonly JsonObject[] | undefined): AnthropicContentBlock[] {
  const blocks: AnthropicContentBlock[] = []
  for (const entry of details ?? []) {
    if (entry.format !== undefined && entry.format !== ANTHROPIC_REASONING_FORMAT) continue
    if (entry.type === 'reasoning.text' && typeof entry.text === 'string' && typeof entry.signature === 'string') {
      blocks.push({ type: 'thinking', thinking: entry.text, signature: entry.signature })
    } else if (entry.type === 'reasoning.encrypted' && typeof entry.data === 'string') {
      blocks.push({ type: 'redacted_thinking', data: entry.data })
    }
  }
  return blocks
}

function assistantBlocks(message: Extract<ChatMessage, { role: 'assistant' }>): AnthropicContentBlock[] {
  // The answer's thinking goes back as the signed blocks it came in, first, unchanged: the API
  // requires them in a tool-use turn (and checks their signatures). `reasoning_content`, the same
  // thinking as text, is not sent: the API takes thinking back only as those blocks.
  const blocks = [...thinkingBlocks(message.reasoning_details), ...textBlocks(message.content)]
  for (const call of message.tool_calls ?? []) blocks.push({ type: 'tool_use', id: call.id, name: call.function.name, input: toolInput(call.function.arguments) })
  return blocks
}

/**
 * A call's arguments as `tool_use.input`, which must be an object. The engine replays a call it
 * rejected (arguments that were no JSON object) with `{}`, its tool result quoting what was sent; a
 * body of your own may hold arguments that are no JSON object: those go as `{ raw_arguments: "<the text>" }`.
 */
function toolInput(raw: string): Record<string, unknown> {
  if (raw.trim() === '') return {}
  try {
    const parsed: unknown = JSON.parse(raw)
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as Record<string, unknown>
  } catch {
    // Not JSON: sent as text.
  }
  return { [RAW_ARGUMENTS_KEY]: raw }
}

function toTool(tool: NonNullable<ChatRequestBody['tools']>[number]): AnthropicTool {
  const { parameters } = tool.function
  // A schema without `type` takes an object here (the engine's default for a tool without one is `{ type: 'object' }`); one of another type is sent as it is, for the API to refuse.
  const input_schema = { type: 'object', ...parameters } as AnthropicTool['input_schema']
  const result: AnthropicTool = { name: tool.function.name, input_schema }
  if (tool.function.description !== undefined) result.description = tool.function.description
  return result
}

// ---------------------------------------------------------------------------------------------
// The answer: a Message (or its stream of events) in, a ModelResponse out.

/** Anthropic's stop reasons in OpenAI's words, which the engine reads (`length`, `content_filter`). */
function finishReasonOf(stop: unknown, calls: number): string {
  switch (stop) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop'
    case 'tool_use':
      return 'tool_calls'
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length'
    case 'refusal':
      return 'content_filter'
    default:
      // pause_turn, and whatever comes next: recorded as the API said it.
      if (typeof stop === 'string' && stop !== '') return stop
      return calls > 0 ? 'tool_calls' : 'stop'
  }
}

const count = (value: unknown): number | undefined => (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined)

/**
 * factstate counts cached tokens within `inputTokens` (as OpenAI's `prompt_tokens`); Anthropic's
 * `input_tokens` are the uncached ones only, beside cache writes and cache reads: their sum.
 */
function usageOf(usage: Record<string, unknown>): ModelUsage | undefined {
  const out: ModelUsage = {}
  const fresh = count(usage.input_tokens)
  const read = count(usage.cache_read_input_tokens)
  const written = count(usage.cache_creation_input_tokens)
  if (fresh !== undefined) out.inputTokens = fresh + (read ?? 0) + (written ?? 0)
  if (read !== undefined) out.cachedInputTokens = read
  const output = count(usage.output_tokens)
  if (output !== undefined) out.outputTokens = output
  return Object.keys(out).length > 0 ? out : undefined
}

function malformed(message: string, requestId: string | undefined): ModelResponse {
  return { kind: 'interrupted', status: 'failed', message, malformed: true, ...(requestId === undefined ? {} : { provider: { requestId } }) }
}

/** A thinking block of an answer as it is recorded in `reasoningDetails`, OpenRouter's shape for it. */
function thinkingEntry(thinking: string, signature: unknown): JsonObject {
  return typeof signature === 'string'
    ? { type: 'reasoning.text', text: thinking, signature, format: ANTHROPIC_REASONING_FORMAT }
    : { type: 'reasoning.text', text: thinking, format: ANTHROPIC_REASONING_FORMAT }
}

function redactedEntry(data: string): JsonObject {
  return { type: 'reasoning.encrypted', data, format: ANTHROPIC_REASONING_FORMAT }
}

function outputOf(parts: { text: string; reasoning: string; details: JsonObject[]; calls: ToolCall[]; stop: unknown; usage: Record<string, unknown>; id: unknown; requestId: string | undefined }): ModelResponse {
  const output: ModelOutput = { toolCalls: parts.calls, finishReason: finishReasonOf(parts.stop, parts.calls.length) }
  if (parts.text !== '') output.text = parts.text
  if (parts.reasoning !== '') output.reasoning = parts.reasoning
  // The thinking blocks themselves, signed, in their order: sent back first in the turn (the API requires them with its tool calls).
  if (parts.details.length > 0) output.reasoningDetails = parts.details
  const usage = usageOf(parts.usage)
  if (usage !== undefined) output.usage = usage
  const id = idOf(parts.id)
  if (id !== undefined) output.responseId = id
  if (parts.requestId !== undefined) output.requestId = parts.requestId
  return { kind: 'completed', output }
}

function fromMessage(message: unknown, requestId: string | undefined): ModelResponse {
  if (!isRecord(message) || message.type !== 'message' || !Array.isArray(message.content)) return malformed('the provider answered something that is not a Message', requestId)
  let text = ''
  let reasoning = ''
  const details: JsonObject[] = []
  const calls: ToolCall[] = []
  for (const block of message.content as unknown[]) {
    if (!isRecord(block)) return malformed('the provider answered a Message with a content block that is not an object', requestId)
    if (block.type === 'text' && typeof block.text === 'string') text += block.text
    else if (block.type === 'thinking' && typeof block.thinking === 'string') {
      reasoning += block.thinking
      details.push(thinkingEntry(block.thinking, block.signature))
    } else if (block.type === 'redacted_thinking' && typeof block.data === 'string') details.push(redactedEntry(block.data))
    else if (block.type === 'tool_use') {
      if (typeof block.id !== 'string' || typeof block.name !== 'string') return malformed('the provider answered a tool_use block without an id or a name', requestId)
      calls.push({ callId: block.id, name: block.name, arguments: JSON.stringify(block.input ?? {}) })
    }
    // Server tools' blocks and blocks of types to come: not part of a factstate answer.
  }
  return outputOf({ text, reasoning, details, calls, stop: message.stop_reason, usage: isRecord(message.usage) ? message.usage : {}, id: message.id, requestId })
}

async function readStream(data: unknown, request: ModelRequest, touch: () => void, requestId: string | undefined): Promise<ModelResponse> {
  if (!isRecord(data) || typeof (data as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] !== 'function') {
    return malformed('the provider answered a request for a stream with something that is not one', requestId)
  }
  let id: unknown
  let text = ''
  let reasoning = ''
  const usage: Record<string, unknown> = {}
  let stop: unknown
  let started = false
  let stopped = false
  // Content block index → the call it is, numbered from 0 among the answer's calls (factstate's index).
  const calls = new Map<number, { index: number; callId: string; name: string; arguments: string }>()
  // Content block index → a thinking block (its text and signature, both in deltas) or a redacted one (whole at its start).
  const thoughts = new Map<number, { thinking: string; signature?: string } | { data: string }>()
  // Content block indexes of the blocks not part of a factstate answer that stream input too (a server tool's `server_tool_use`, an `mcp_tool_use`).
  const others = new Set<number>()
  try {
    for await (const event of data as unknown as AsyncIterable<unknown>) {
      touch()
      if (!isRecord(event)) return malformed('the provider streamed an event that is not an object', requestId)
      switch (event.type) {
        case 'message_start': {
          started = true
          const message = isRecord(event.message) ? event.message : {}
          id = message.id
          if (isRecord(message.usage)) Object.assign(usage, message.usage)
          break
        }
        case 'content_block_start': {
          const block = isRecord(event.content_block) ? event.content_block : {}
          const at = typeof event.index === 'number' ? event.index : -1
          if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') {
            text += block.text
            request.onText?.(block.text)
          } else if (block.type === 'thinking' && typeof block.thinking === 'string') {
            reasoning += block.thinking
            if (block.thinking !== '') request.onReasoning?.(block.thinking)
            thoughts.set(at, typeof block.signature === 'string' && block.signature !== '' ? { thinking: block.thinking, signature: block.signature } : { thinking: block.thinking })
          } else if (block.type === 'redacted_thinking' && typeof block.data === 'string') {
            thoughts.set(at, { data: block.data })
          } else if (block.type === 'tool_use') {
            if (typeof block.id !== 'string' || typeof block.name !== 'string') return malformed('the provider streamed a tool_use block without an id or a name', requestId)
            const call = { index: calls.size, callId: block.id, name: block.name, arguments: '' }
            calls.set(at, call)
            request.onToolCall?.({ index: call.index, callId: call.callId, name: call.name })
          } else {
            others.add(at)
          }
          break
        }
        case 'content_block_delta': {
          const delta = isRecord(event.delta) ? event.delta : {}
          if (delta.type === 'text_delta' && typeof delta.text === 'string') {
            text += delta.text
            request.onText?.(delta.text)
          } else if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') {
            reasoning += delta.thinking
            const thought = thoughts.get(typeof event.index === 'number' ? event.index : -1)
            if (thought === undefined || 'data' in thought) return malformed('the provider streamed thinking for a block that is no thinking block', requestId)
            thought.thinking += delta.thinking
            request.onReasoning?.(delta.thinking)
          } else if (delta.type === 'signature_delta' && typeof delta.signature === 'string') {
            const thought = thoughts.get(typeof event.index === 'number' ? event.index : -1)
            if (thought === undefined || 'data' in thought) return malformed('the provider streamed a signature for a block that is no thinking block', requestId)
            // Sent whole, once, before the block's end; pieces, were there ever more than one, would be joined.
            thought.signature = (thought.signature ?? '') + delta.signature
          } else if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string' && delta.partial_json !== '') {
            const at = typeof event.index === 'number' ? event.index : -1
            const call = calls.get(at)
            if (call === undefined) {
              if (others.has(at)) break
              return malformed('the provider streamed tool input for a block that was not started', requestId)
            }
            call.arguments += delta.partial_json
            request.onToolCall?.({ index: call.index, arguments: delta.partial_json })
          }
          break
        }
        case 'content_block_stop': {
          // A call to a tool that takes no input streams no JSON at all: its input is `{}`.
          const call = calls.get(typeof event.index === 'number' ? event.index : -1)
          if (call !== undefined && call.arguments === '') {
            call.arguments = '{}'
            request.onToolCall?.({ index: call.index, arguments: '{}' })
          }
          break
        }
        case 'message_delta': {
          const delta = isRecord(event.delta) ? event.delta : {}
          if (delta.stop_reason !== undefined && delta.stop_reason !== null) stop = delta.stop_reason
          // Its counts are cumulative: they replace message_start's.
          if (isRecord(event.usage)) for (const [key, value] of Object.entries(event.usage)) if (value !== null && value !== undefined) usage[key] = value
          break
        }
        case 'message_stop':
          stopped = true
          break
        // ping, and event types to come: nothing to read.
      }
    }
  } catch (error) {
    // The connection broke after the stop reason (message_delta comes after every content block): the
    // answer is whole, kept as one that stalled there is. An error the provider reported is not a break.
    if (!started || stop === undefined || reportedByProvider(error)) throw error
  }
  // A stream that ended without saying how the answer ended was cut (README's "malformed"; unless
  // it ended because the attempt did, which the caller tells), but one that named its stop reason
  // before is a whole answer, kept.
  if (!started || (!stopped && stop === undefined)) {
    return malformed('the stream ended before the answer did (no message_stop)', requestId)
  }
  for (const call of calls.values()) if (call.arguments === '') call.arguments = '{}'
  const toolCalls = [...calls.values()].sort((a, b) => a.index - b.index).map(({ callId, name, arguments: args }) => ({ callId, name, arguments: args }))
  const details = [...thoughts.entries()].sort(([a], [b]) => a - b).map(([, thought]) => ('data' in thought ? redactedEntry(thought.data) : thinkingEntry(thought.thinking, thought.signature)))
  return outputOf({ text, reasoning, details, calls: toolCalls, stop, usage, id, requestId })
}

// ---------------------------------------------------------------------------------------------
// Failures: classified by what the error holds, never thrown.

function idOf(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined
}

function headerOf(headers: unknown, name: string): string | undefined {
  try {
    if (typeof headers !== 'object' || headers === null) return undefined
    const get = (headers as { get?: unknown }).get
    if (typeof get !== 'function') return undefined
    const value: unknown = get.call(headers, name)
    return typeof value === 'string' ? value : undefined
  } catch {
    return undefined
  }
}

/**
 * How the attempt went wrong, with the `request-id` of its response when one came (in `provider`),
 * whatever went wrong after the headers: a timeout, a cancel, a body that could not be read, as the
 * built-in client records `x-request-id`.
 */
function interruption(error: unknown, ending: Ending | undefined, request: ModelRequest, requestId: string | undefined): ModelResponse {
  const response = classified(error, ending, request, requestId)
  if (response.kind !== 'interrupted' || requestId === undefined || response.provider?.requestId !== undefined) return response
  return { ...response, provider: { ...response.provider, requestId } }
}

function classified(error: unknown, ending: Ending | undefined, request: ModelRequest, requestId: string | undefined): ModelResponse {
  if (ending === 'cancelled' || (ending === undefined && request.signal.aborted)) return { kind: 'interrupted', status: 'cancelled', message: 'the run was cancelled' }
  if (ending === 'timeout') return { kind: 'interrupted', status: 'timed_out', message: `no whole answer within ${request.timeoutMs}ms (timeoutMs)` }
  if (ending === 'idle') return { kind: 'interrupted', status: 'timed_out', message: `the answer stalled: no content arrived for ${String(request.idleTimeoutMs)}ms (idleTimeoutMs; the SDK does not pass the stream's pings on)` }
  const fields = isRecord(error) || error instanceof Error ? (error as unknown as Record<string, unknown>) : {}
  const name = typeof fields.name === 'string' ? fields.name : ''
  const words = error instanceof Error ? error.message : String(error)
  if (name === 'APIConnectionTimeoutError') return { kind: 'interrupted', status: 'timed_out', message: `no answer within ${request.timeoutMs}ms (timeoutMs)` }
  const status = typeof fields.status === 'number' ? fields.status : undefined
  const body = isRecord(fields.error) ? fields.error : undefined
  const detail = body !== undefined && isRecord(body.error) ? body.error : undefined
  const type = idOf(detail?.type) ?? idOf(fields.type)
  const said = idOf(detail?.message) ?? words
  const provider: ProviderRefusal = {}
  if (status !== undefined) provider.status = status
  if (type !== undefined) provider.type = type
  const code = idOf(fields.errorCode)
  if (code !== undefined) provider.code = code
  const id = idOf(fields.requestID) ?? idOf(headerOf(fields.headers, 'request-id')) ?? requestId
  if (id !== undefined) provider.requestId = id
  const withProvider = Object.keys(provider).length > 0 ? { provider } : {}
  if (status !== undefined) {
    const message = `the provider answered HTTP ${status}: ${said}`
    if (status === 408 || status === 429 || status >= 500) {
      const headers = typeof (fields.headers as { get?: unknown } | undefined)?.get === 'function' ? (fields.headers as Headers) : undefined
      return { kind: 'interrupted', status: 'retryable_failure', message, retryAfterMs: retryAfterMsOf(headers), ...withProvider }
    }
    return { kind: 'interrupted', status: 'failed', message, ...withProvider }
  }
  if (type !== undefined && detail !== undefined) {
    // An `event: error` inside a stream that began as HTTP 200 (it has no HTTP status to tell): retried
    // when its type says overload, rate limit, a server error or a timeout, as the built-in client reads
    // a reported error's (Anthropic's overloaded_error, rate_limit_error, api_error and timeout_error among them).
    const message = `the provider reported an error in the stream: ${type}: ${said}`
    const retryable = RETRYABLE_REPORTED_ERROR.test(type)
    return { kind: 'interrupted', status: retryable ? 'retryable_failure' : 'failed', message, ...withProvider }
  }
  if (name === 'APIError' && status === undefined && 'error' in fields) {
    // An `event: error` whose data is not Anthropic's error (not JSON: a proxy's words, or JSON
    // without `error.type`). The request was taken (the stream began as HTTP 200) and an error
    // reported after that is the provider's trouble, not the request's; that nothing says which
    // makes it no answer to record: retried, within the engine's retries.
    const data = typeof fields.error === 'string' ? fields.error : safeJson(fields.error)
    const message = `the provider reported an error in the stream that could not be read: ${data.length > MAX_QUOTED ? `${data.slice(0, MAX_QUOTED)}…` : data}`
    return { kind: 'interrupted', status: 'retryable_failure', message, ...withProvider }
  }
  if (name === 'APIConnectionError' || name === 'APIUserAbortError' || cutByNetwork(error)) {
    // Refused, reset, or cut mid-answer: the SDK's 1.x line wraps a cut stream as APIConnectionError,
    // its 0.x line passed undici's `TypeError: terminated` on as it was.
    return { kind: 'interrupted', status: 'retryable_failure', message: `the connection to the provider failed: ${causeOf(error)}`, ...withProvider }
  }
  if (error instanceof SyntaxError) return malformed(`the provider's answer could not be read: ${words}`, requestId)
  // The SDK's own refusals (a request it will not send, credentials it cannot resolve): retrying sends the same.
  return { kind: 'interrupted', status: 'failed', message: `the Anthropic SDK failed: ${words}`, ...withProvider }
}

/** How much of an unreadable error event's data its failure message quotes. */
const MAX_QUOTED = 512

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** Whether `error` is an answer of the provider's (an HTTP status, or an `event: error` of the stream: the SDK's `APIError`), not a broken connection. */
function reportedByProvider(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false
  const fields = error as { status?: unknown; error?: unknown; name?: unknown }
  // An `event: error` whose data is not JSON is the SDK's plain APIError, its `error` that text.
  return typeof fields.status === 'number' || isRecord(fields.error) || (fields.name === 'APIError' && 'error' in fields)
}

function cutByNetwork(error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error.cause as { code?: unknown } | undefined)?.code
  return (error.name === 'TypeError' && error.message === 'terminated') || (typeof code === 'string' && /^(ECONNRESET|ECONNREFUSED|EPIPE|UND_ERR_SOCKET)$/.test(code))
}

function causeOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error)
  const cause = error.cause
  return cause instanceof Error && cause.message !== '' ? `${error.message} (${cause.message})` : error.message
}
