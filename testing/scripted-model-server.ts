/**
 * A real HTTP server that speaks the OpenAI chat-completions protocol from a script, for tests, and
 * Anthropic's Messages protocol from the same script (POST /v1/messages: see scripted-messages.ts).
 * It listens on 127.0.0.1 (a free port), records every request byte for byte, and answers each
 * one with the next {@link ScriptedAnswer}: text, tool calls, an HTTP error, a broken body, a
 * stream cut mid-event, a reset connection or silence. Answers can be held back until the test
 * releases them, so a test can act while a request is in flight.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { ChatRequestBody } from '../actors/model-client.js'
import { FactstateError, messageWithoutCode } from '../errors.js'
import type { JsonValue } from '../facts/types.js'
import { meantName, namedHint, readOptions, shown } from '../options.js'
import { anthropicErrorBody, serveMessagesAnswer, writeJson, writeScriptedStatus } from './scripted-messages.js'

/** One request as the server received it. */
export interface RecordedRequest {
  /**
   * 0-based position among the requests this server answered from its script (chat completions and
   * Messages alike), counted since the server started: emptying `requests` does not restart it, so a
   * script function that answers by index, and an array script's position, go on where they were.
   */
  index: number
  /** The HTTP method (`POST`). */
  method: string
  /** The request path: `/v1/chat/completions`, or `/v1/messages`. */
  path: string
  /** Which protocol the request spoke, and was answered in: OpenAI's chat completions, or Anthropic's Messages. */
  api: 'chat-completions' | 'messages'
  /**
   * The body parsed as JSON. A body that was not a JSON object is recorded as
   * `{ model: '', messages: [] }`; `bodyText` always has the exact text. A Messages request's body
   * is Anthropic's (`system` apart, `messages` of content blocks, `max_tokens`), typed here as a
   * chat request's: read it as `AnthropicCreateParams` (from `factstate/anthropic`).
   */
  body: RecordedBody
  /** The exact body text received. */
  bodyText: string
  /** The request headers, names lower-cased (as Node reports them). */
  headers: IncomingHttpHeaders
}

/** A chat-completions request body as the server received it. */
export interface RecordedBody extends ChatRequestBody {
  /** Whether the request asked for an SSE stream. */
  stream?: boolean
}

/** Options most answers accept. */
export interface AnswerOptions {
  /** Keep the answer back until {@link ScriptedModelServer.release} is called for this request. */
  hold?: boolean | undefined
  /** Serve this answer as an SSE stream (`true`) or plain JSON (`false`); default: server option, else the request's `stream`. */
  stream?: boolean | undefined
}

/** How a streamed answer is sent: for a UI test that leaves mid-answer, say. */
export interface PacingOptions {
  /** Into how many pieces the text, and each call's arguments, are cut (1–10,000; default 3). */
  pieces?: number | undefined
  /** How long to wait between two SSE chunks, in ms (0–60,000; default 0: all at once). A client that goes away ends the stream. */
  pieceDelayMs?: number | undefined
}

/** Token usage the server reports; defaults to 10 prompt / 5 completion tokens (in a stream only when the request asks: `stream_options.include_usage`). */
export interface ScriptedUsage {
  /** Reported as the answer's prompt tokens (`ModelUsage.inputTokens`). */
  prompt_tokens: number
  /** Reported as the answer's completion tokens (`ModelUsage.outputTokens`). */
  completion_tokens: number
  /** Of the prompt tokens, those served from the provider's cache (`ModelUsage.cachedInputTokens`): sent as given. */
  prompt_tokens_details?: { cached_tokens: number } | undefined
  /** Of the completion tokens, those spent on reasoning (`ModelUsage.reasoningTokens`): sent as given. */
  completion_tokens_details?: { reasoning_tokens: number } | undefined
}

/** One tool call in a scripted answer. `arguments` as an object is JSON-encoded; as a string it is sent raw. */
export interface ScriptedToolCall {
  /** The tool the model calls. */
  name: string
  /** The call's arguments: an object is JSON-encoded, a string sent raw (to send arguments that are not JSON). */
  arguments: unknown
  /** Overrides the deterministic id `call_<requestIndex>_<i>`. */
  id?: string | undefined
  /** Sent as the call's `extra_content` (Gemini's `{ google: { thought_signature } }`: the fact's `extraContent`), in a stream with the call's first part. */
  extraContent?: JsonValue | undefined
}

/** What the server does with one request. Build these with {@link answer}. */
export type ScriptedAnswer =
  | ({ kind: 'text'; text: string; finishReason?: string | undefined; usage?: ScriptedUsage | null | undefined; reasoning?: string | undefined; reasoningDetails?: JsonValue | undefined } & AnswerOptions &
      PacingOptions)
  | ({
      kind: 'toolCalls'
      calls: ScriptedToolCall[]
      text?: string | undefined
      finishReason?: string | undefined
      usage?: ScriptedUsage | null | undefined
      reasoning?: string | undefined
      reasoningDetails?: JsonValue | undefined
    } & AnswerOptions & PacingOptions)
  | {
      kind: 'status'
      status: number
      /** Sent as `retry-after` (seconds). */
      retryAfter?: number | undefined
      /** Sent as `retry-after-ms`. */
      retryAfterMs?: number | undefined
      /** The body: a string is sent raw, anything else as JSON (to a Messages request, an `error.code` also as `error.details.error_code`). Default: an OpenAI-style error object, Anthropic's to a Messages request. */
      body?: unknown
      hold?: boolean | undefined
    }
  | { kind: 'malformed'; body: string; hold?: boolean | undefined }
  | { kind: 'cutStream'; text: string; hold?: boolean | undefined }
  | { kind: 'stall'; text: string; hold?: boolean | undefined }
  | { kind: 'reset'; hold?: boolean | undefined; stream?: boolean | undefined; text?: string | undefined }
  | { kind: 'hang' }

/**
 * The options of `answer.text`. `reasoning` is sent beside the answer as `reasoning_content`, as
 * DeepSeek's thinking mode and vLLM's reasoning parsers send it (`ModelOutput.reasoning`);
 * `reasoningDetails` as the message's `reasoning_details`, as OpenRouter sends them
 * (`ModelOutput.reasoningDetails`; in a stream in pieces, as OpenRouter streams them: see `detailParts`).
 */
export type TextOptions = AnswerOptions &
  PacingOptions & { finishReason?: string | undefined; usage?: ScriptedUsage | null | undefined; reasoning?: string | undefined; reasoningDetails?: JsonValue | undefined }
/** The options of `answer.toolCalls`. */
export type ToolCallsOptions = AnswerOptions &
  PacingOptions & { text?: string | undefined; finishReason?: string | undefined; usage?: ScriptedUsage | null | undefined; reasoning?: string | undefined; reasoningDetails?: JsonValue | undefined }
/** The options of `answer.status`. */
export type StatusOptions = { retryAfter?: number | undefined; retryAfterMs?: number | undefined; body?: unknown; hold?: boolean | undefined }

/**
 * The options of `answer.<builder>`, read once: a key the builder does not take (`retryAfterSeconds`
 * for `retryAfter`) is refused; their values are checked with the answer they build (`checkedAnswer`).
 */
function answerOptions<T extends object>(builder: string, options: unknown, known: readonly (keyof T & string)[]): T {
  return readOptions(options, known, { call: `answer.${builder}`, code: 'TESTING_INVALID_OPTIONS', details: (field) => ({ field }) }) as T
}

/** A refusal of a scripted answer: `field` names the member from where the answer was given (`script[0].kind`, `calls[0].name`). */
function answerRefusal(call: string, field: string, message: string): FactstateError {
  return new FactstateError('TESTING_INVALID_OPTIONS', `${call}: ${message}`, { details: { field } })
}

/** Checks one member's value and returns what to keep of it (a copy of an object); throws `answerRefusal` naming `field`. */
type MemberCheck = (value: unknown, field: string, call: string) => unknown

interface Member {
  required?: true
  check: MemberCheck
}

/** A member whose value `ok` accepts as it is; else refused as not `what`. */
function plain(what: string, ok: (value: unknown) => boolean): MemberCheck {
  return (value, field, call) => {
    if (!ok(value)) throw answerRefusal(call, field, `${field} must be ${what}, not ${shown(value)}`)
    return value
  }
}

const isNumber = (value: unknown): value is number => typeof value === 'number'
const BOOLEAN: Member = { check: plain('true or false', (value) => typeof value === 'boolean') }
const STRING: Member = { check: plain('a string', (value) => typeof value === 'string') }
const REQUIRED_STRING: Member = { required: true, check: STRING.check }
const DELAY: Member = { check: plain('a number of at least 0', (value) => isNumber(value) && Number.isFinite(value) && value >= 0) }
const PACING: Record<string, Member> = {
  pieces: { check: plain('a whole number from 1 to 10,000', (value) => isNumber(value) && Number.isInteger(value) && value >= 1 && value <= 10_000) },
  pieceDelayMs: { check: plain('a number of ms from 0 to 60,000', (value) => isNumber(value) && Number.isFinite(value) && value >= 0 && value <= 60_000) },
}

/**
 * Hints for members named as another API names them, which no spelling check finds: a tool call's
 * `args` (Anthropic's `input`, OpenAI's `function.arguments`), an answer's `content` or `tool_calls`.
 */
const MEMBER_HINTS: Record<string, string> = { args: 'arguments', input: 'arguments', parameters: 'arguments', params: 'arguments', content: 'text', message: 'text', toolcalls: 'calls' }

/** `value` if it is an object (not an array), else refused as not `what`. */
function objectOf(value: unknown, field: string, call: string, what: string): object {
  let array = false
  try {
    // A revoked proxy throws even here.
    array = Array.isArray(value)
  } catch (error) {
    throw answerRefusal(call, field, `${field || 'the answer'} could not be read: ${shown(error)}`)
  }
  if (typeof value !== 'object' || value === null || array) throw answerRefusal(call, field, `${field || 'the answer'} must be ${what}, not ${shown(value)}`)
  return value
}

/**
 * The members of `value` that `members` lists, each checked and read once, into a plain copy that
 * begins with `given` (members read already): `value` not an object, a member it lacks or one not
 * listed (with a did-you-mean where one fits) is refused. `field` names `value` (`script[0]`; empty
 * for a builder's own answer), `what` what it must be.
 */
function readMembers(value: unknown, members: Record<string, Member>, field: string, call: string, what: string, given: Record<string, unknown> = {}): Record<string, unknown> {
  const at = (key: string) => (field === '' ? key : `${field}.${key}`)
  const object = objectOf(value, field, call, what)
  const names = [...Object.keys(given), ...Object.keys(members)]
  const listed = `{ ${[...Object.keys(given), ...Object.entries(members).map(([key, member]) => (member.required ? key : `${key}?`))].join(', ')} }`
  const copy: Record<string, unknown> = { ...given }
  let key = ''
  try {
    for (key of Object.keys(object)) {
      if (names.includes(key)) continue
      const hint = namedHint(MEMBER_HINTS, key)
      const meant = meantName(key, names) ?? (hint !== undefined && names.includes(hint) ? hint : undefined)
      throw answerRefusal(call, at(key), `${field === '' ? 'the answer' : field} has no member ${JSON.stringify(key)}${meant === undefined ? '' : `: did you mean ${meant}?`} (${what} is ${listed})`)
    }
    for (const [name, member] of Object.entries(members)) {
      key = name
      const value = (object as Record<string, unknown>)[name]
      if (value === undefined) {
        if (member.required) throw answerRefusal(call, at(name), `${at(name)} is missing (${what} is ${listed})`)
        continue
      }
      copy[name] = member.check(value, at(name), call)
    }
  } catch (error) {
    if (error instanceof FactstateError) throw error
    // A getter that throws, a proxy that refuses to be read.
    const where = key === '' ? field : at(key)
    throw answerRefusal(call, where, `${where || 'the answer'} could not be read: ${shown(error)}`)
  }
  return copy
}

const USAGE_MEMBERS: Record<string, Member> = {
  // Numbers only: odd ones (12.5, -1) are sent as given, for tests of what a client makes of them.
  prompt_tokens: { required: true, check: plain('a number', isNumber) },
  completion_tokens: { required: true, check: plain('a number', isNumber) },
  prompt_tokens_details: { check: (value, field, call) => readMembers(value, { cached_tokens: { required: true, check: plain('a number', isNumber) } }, field, call, 'prompt_tokens_details') },
  completion_tokens_details: {
    check: (value, field, call) => readMembers(value, { reasoning_tokens: { required: true, check: plain('a number', isNumber) } }, field, call, 'completion_tokens_details'),
  },
}
const USAGE: Member = { check: (value, field, call) => (value === null ? null : readMembers(value, USAGE_MEMBERS, field, call, 'usage (null for none)')) }

/**
 * A value sent as JSON unless it is a string, as `what`: one `JSON.stringify` throws on (a BigInt, a
 * cycle) or makes nothing of (a function, a symbol) is refused, since served it would be a 500 that
 * is retried, and the retry would take an array's next answer.
 */
function jsonOrString(what: string, encode: (value: unknown) => unknown = (value) => value): MemberCheck {
  return (value, field, call) => {
    if (typeof value === 'string') return value
    let text: unknown
    try {
      text = JSON.stringify(encode(value))
    } catch (error) {
      throw answerRefusal(call, field, `${field} must be ${what}, and JSON.stringify threw: ${shown(error)}`)
    }
    if (typeof text !== 'string') throw answerRefusal(call, field, `${field} must be ${what}, not ${shown(value)}`)
    return value
  }
}

const CALL_MEMBERS: Record<string, Member> = {
  name: REQUIRED_STRING,
  // A string is sent raw, anything else JSON-encoded (null as {}, as encodeArguments does).
  arguments: { required: true, check: jsonOrString('a string (sent raw) or a value JSON can encode', (value) => value ?? {}) },
  id: STRING,
  extraContent: { check: jsonOrString('a value JSON can encode (a string is sent as a JSON string)') },
}
const CALLS: Member = {
  required: true,
  check: (value, field, call) => {
    if (!Array.isArray(value)) throw answerRefusal(call, field, `${field} must be an array of tool calls ({ name, arguments, id? }), not ${shown(value)}`)
    return Array.from(value, (one: unknown, i) => readMembers(one, CALL_MEMBERS, `${field}[${i}]`, call, 'a tool call'))
  },
}
const ANSWER_TEXT: Record<string, Member> = {
  finishReason: STRING,
  reasoning: STRING,
  reasoningDetails: { check: jsonOrString('a value JSON can encode (a string is sent as a JSON string)') },
  usage: USAGE,
  hold: BOOLEAN,
  stream: BOOLEAN,
  ...PACING,
}

/** The members of each kind of answer, `kind` aside: what `answer`'s builders make of their arguments. */
const ANSWER_MEMBERS: { [K in ScriptedAnswer['kind']]: Record<string, Member> } = {
  text: { text: REQUIRED_STRING, ...ANSWER_TEXT },
  toolCalls: { calls: CALLS, text: STRING, ...ANSWER_TEXT },
  status: {
    // Node's own bounds: writeHead throws outside them. Wider than a fact's provider status (100–599):
    // a status past 599 is sendable, to test a client with one (the built-in one records no status for it).
    status: { required: true, check: plain("an HTTP status (a whole number from 100 to 999, what Node's server sends; a fact records a provider's status from 100 to 599)", (value) => isNumber(value) && Number.isInteger(value) && value >= 100 && value <= 999) },
    retryAfter: DELAY,
    retryAfterMs: DELAY,
    // A string is sent raw, anything else as JSON.
    body: { check: jsonOrString('a string (sent raw) or a value JSON can encode') },
    hold: BOOLEAN,
  },
  malformed: { body: REQUIRED_STRING, hold: BOOLEAN },
  cutStream: { text: REQUIRED_STRING, hold: BOOLEAN },
  stall: { text: REQUIRED_STRING, hold: BOOLEAN },
  reset: { hold: BOOLEAN, stream: BOOLEAN, text: STRING },
  hang: {},
}
const KINDS = Object.keys(ANSWER_MEMBERS) as ScriptedAnswer['kind'][]

/**
 * `value` checked as a {@link ScriptedAnswer} and copied, each member read once: an unknown `kind`
 * (`toolcalls`, `txt`), a member its kind lacks or of the wrong type, or one its kind has not
 * (`args` for `arguments`) is refused with `TESTING_INVALID_OPTIONS`, `details.field` naming it from
 * `field` (`script[0].kind`): served, it would be another answer than the one meant, or none.
 */
function checkedAnswer(value: unknown, field: string, call: string): ScriptedAnswer {
  const at = (key: string) => (field === '' ? key : `${field}.${key}`)
  const object = objectOf(value, field, call, 'an answer ({ kind, … }, as answer.text(…) and the other builders make one)')
  let kind: unknown
  try {
    kind = (object as { kind?: unknown }).kind
  } catch (error) {
    throw answerRefusal(call, at('kind'), `${at('kind')} could not be read: ${shown(error)}`)
  }
  if (typeof kind !== 'string' || !(KINDS as string[]).includes(kind)) {
    const meant = typeof kind === 'string' ? meantName(kind, KINDS) : undefined
    const kinds = KINDS.map((one) => JSON.stringify(one)).join(', ')
    const wrong = kind === undefined ? 'is missing' : `is ${shown(kind)}${meant === undefined ? '' : `: did you mean ${meant}?`}`
    throw answerRefusal(call, at('kind'), `${at('kind')} ${wrong} (the kinds are ${kinds})`)
  }
  const copy = readMembers(object, ANSWER_MEMBERS[kind as ScriptedAnswer['kind']], field, call, `a ${JSON.stringify(kind)} answer`, { kind })
  if (kind === 'reset' && copy.text !== undefined && copy.stream === false) {
    throw answerRefusal(call, at('text'), `${at('text')}: a reset answer's text is sent only in a stream, and stream is false`)
  }
  return copy as ScriptedAnswer
}

/** What a builder made, as it made it, once it is checked as a script's answers are (its arguments named by `details.field`: `calls[0].name`). */
function built(builder: string, made: ScriptedAnswer): ScriptedAnswer {
  checkedAnswer(made, '', `answer.${builder}`)
  return made
}

/**
 * Small constructors for {@link ScriptedAnswer}s. Each refuses an option it does not take, or an
 * argument or option of the wrong type, with `TESTING_INVALID_OPTIONS` (`details.field` names it:
 * `hold`, `calls[0].arguments`), as `scriptedModelServer` refuses such an answer in its script.
 */
export const answer = {
  /** A plain text answer, `finish_reason: "stop"`. */
  text(text: string, options: TextOptions = {}): ScriptedAnswer {
    return built('text', { ...answerOptions<TextOptions>('text', options, ['hold', 'stream', 'pieces', 'pieceDelayMs', 'finishReason', 'usage', 'reasoning', 'reasoningDetails']), kind: 'text', text })
  },
  /** An answer asking for tool calls, `finish_reason: "tool_calls"`. */
  toolCalls(calls: ScriptedToolCall[], options: ToolCallsOptions = {}): ScriptedAnswer {
    return built('toolCalls', {
      ...answerOptions<ToolCallsOptions>('toolCalls', options, ['hold', 'stream', 'pieces', 'pieceDelayMs', 'text', 'finishReason', 'usage', 'reasoning', 'reasoningDetails']),
      kind: 'toolCalls',
      calls,
    })
  },
  /** An HTTP error status, e.g. `answer.status(429, { retryAfter: 2 })`. */
  status(status: number, options: StatusOptions = {}): ScriptedAnswer {
    return built('status', { ...answerOptions<StatusOptions>('status', options, ['retryAfter', 'retryAfterMs', 'body', 'hold']), kind: 'status', status })
  },
  /** HTTP 200 with a body that is not a chat completion (default: not JSON at all). */
  malformed(options: { body?: string | undefined; hold?: boolean | undefined } = {}): ScriptedAnswer {
    const read = answerOptions<{ body?: string; hold?: boolean }>('malformed', options, ['body', 'hold'])
    return built('malformed', { kind: 'malformed', body: read.body ?? 'this is not json {', ...(read.hold === undefined ? {} : { hold: read.hold }) })
  },
  /** An SSE stream that sends some text, then ends in the middle of an event (no finish, no `[DONE]`). */
  cutStream(options: { text?: string | undefined; hold?: boolean | undefined } = {}): ScriptedAnswer {
    const read = answerOptions<{ text?: string; hold?: boolean }>('cutStream', options, ['text', 'hold'])
    return built('cutStream', { kind: 'cutStream', text: read.text ?? 'partial', ...(read.hold === undefined ? {} : { hold: read.hold }) })
  },
  /** An SSE stream that sends some text, then nothing more: the connection stays open until the server closes (an `idleTimeoutMs` notices it). */
  stall(options: { text?: string | undefined; hold?: boolean | undefined } = {}): ScriptedAnswer {
    const read = answerOptions<{ text?: string; hold?: boolean }>('stall', options, ['text', 'hold'])
    return built('stall', { kind: 'stall', text: read.text ?? 'partial', ...(read.hold === undefined ? {} : { hold: read.hold }) })
  },
  /**
   * Destroys the connection without an answer; streamed (`stream: true`, or as the server or the
   * request asks), after the SSE headers and a first chunk. With `text` always streamed, as
   * `cutStream` and `stall` are, whatever the request or the server asks, and the text sent as a
   * chunk before the connection goes: an answer cut off mid-stream, which a client retries (a plain
   * JSON request gets the stream too, which the built-in client reads). `text` with `stream: false`
   * is refused.
   *
   * @example
   * ```ts
   * const server = await scriptedModelServer([answer.reset({ text: 'a first dra' }), answer.text('a first draft')])
   * ```
   */
  reset(options: AnswerOptions & { text?: string | undefined } = {}): ScriptedAnswer {
    return built('reset', { ...answerOptions<AnswerOptions & { text?: string }>('reset', options, ['hold', 'stream', 'text']), kind: 'reset' })
  },
  /** Never answers; the connection is destroyed when the server closes. It takes no options (`hold` would change nothing). */
  hang(options?: Record<string, never>): ScriptedAnswer {
    answerOptions<Record<string, never>>('hang', options, [])
    return built('hang', { kind: 'hang' })
  },
}

/** Chooses the `x-request-id` header of each answer (see `scriptedModelServer`'s `requestIds`). */
export type RequestIds = (request: RecordedRequest, index: number) => string

/** What `scriptedModelServer` takes beside its script. */
export interface ScriptedModelServerOptions {
  /** Serve every answer as SSE (`true`) or plain JSON (`false`) unless the answer says otherwise; by default what the request asks. */
  stream?: boolean | undefined
  /** Begins the ids of the tool calls it makes (default `call`): 1–64 letters, digits, `_` or `-`. */
  callIdPrefix?: string | undefined
  /** A request id header with every answer (`x-request-id`; `request-id` for a Messages request): `true` for `req_<request>`, or a function choosing each; none by default. */
  requestIds?: boolean | RequestIds | undefined
}

/** A running scripted server. */
export interface ScriptedModelServer {
  /** `http://127.0.0.1:PORT/v1`: the run's `provider.baseUrl` (chat completions are served under it). */
  baseUrl: string
  /**
   * `http://127.0.0.1:PORT`: what Anthropic's SDK takes as its `baseURL` (it requests `/v1/messages`
   * under it): `anthropicClient(new Anthropic({ apiKey, baseURL: server.origin }))`.
   */
  origin: string
  /**
   * Every request received on a route (chat completions and Messages), in arrival order, and the
   * only place the server keeps them: a long test may empty it (`requests.length = 0`) to let them
   * go. Requests are counted apart from it (`RecordedRequest.index`): the next one keeps its number.
   */
  requests: RecordedRequest[]
  /** Indexes of requests that arrived after the script ran out (each was answered 400, `unscripted_request`, which no client retries). */
  unscripted: number[]
  /**
   * Resolves when request `n` (0-based) has arrived; rejects (`TESTING_INVALID_OPTIONS`) for one
   * that arrived and is no longer in `requests` (it was emptied since).
   */
  seen(n: number): Promise<RecordedRequest>
  /** Lets the held answer to request `n` go out (may be called before the request arrives). */
  release(n: number): void
  /**
   * Closes the server and every connection; pending holds are resolved so nothing hangs. A server
   * not closed does not keep the process alive (its listening socket and idle connections are
   * unref'd); a request in flight does, until it is answered.
   */
  close(): Promise<void>
}

/**
 * The answers in order (a request beyond them is answered 400 with the error code
 * `unscripted_request`, which is not retried, and listed in `unscripted`), or a function choosing
 * each request's answer. An array's answers are checked when the server starts (an unknown `kind`,
 * a member missing, mistyped or unknown is `TESTING_INVALID_OPTIONS`, `details.field` naming it:
 * `script[0].kind`); a function's as each is served (one that fails is answered 400
 * `invalid_scripted_answer`, naming what is wrong, which is not retried).
 */
export type Script =
  | ScriptedAnswer[]
  | ((request: RecordedRequest, index: number) => ScriptedAnswer | Promise<ScriptedAnswer>)

interface Deferred<T> {
  promise: Promise<T>
  resolve: (value: T) => void
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((r) => {
    resolve = r
  })
  return { promise, resolve }
}

/**
 * What a request past an array script is answered: a client error, which neither the engine's
 * client nor OpenAI's SDK retries, with this `code` in its OpenAI-style error body.
 */
const UNSCRIPTED_STATUS = 400
/** The error `code` of the answer to a request past an array script (see UNSCRIPTED_STATUS). */
const UNSCRIPTED_CODE = 'unscripted_request'
/** What a request is answered when its scripted answer cannot be served: a client error too, which no retry cures. */
const INVALID_STATUS = 400
/** The error `code` of that answer. */
const INVALID_CODE = 'invalid_scripted_answer'

const DEFAULT_USAGE: ScriptedUsage = { prompt_tokens: 10, completion_tokens: 5 }
const CREATED = 1_700_000_000

/** Splits `text` into up to `parts` non-empty pieces (at least one piece, possibly empty). */
function pieces(text: string, parts: number): string[] {
  if (text.length === 0) return ['']
  const size = Math.max(1, Math.ceil(text.length / parts))
  const out: string[] = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

/** The members of a `reasoning_details` entry that OpenRouter streams in pieces (the client joins them). */
const DETAIL_PIECES = ['text', 'summary', 'data'] as const

/**
 * `reasoning_details` as OpenRouter streams them, one chunk's worth per item: each entry's `text`,
 * `summary` or `data` in up to `parts` pieces, a part each, carrying the entry's `index` (the first
 * part the entry's other members, the last its `signature`), so that a client joining the parts gets
 * each entry back as given. An entry without an `index` is split only when it is a signed
 * `reasoning.text` (its parts go on until the signature ends it); others, and anything that is not a
 * list of objects, go whole in one chunk.
 */
function detailParts(details: JsonValue, parts: number): JsonValue[] {
  if (!Array.isArray(details)) return [details]
  const out: JsonValue[] = []
  let whole: JsonValue[] = []
  const flush = () => {
    if (whole.length > 0) out.push(whole)
    whole = []
  }
  for (const entry of details) {
    const object = typeof entry === 'object' && entry !== null && !Array.isArray(entry) ? entry : undefined
    const key = object === undefined ? undefined : DETAIL_PIECES.find((name) => typeof object[name] === 'string' && (object[name] as string).length > 1)
    const indexed = object !== undefined && Number.isSafeInteger(object.index)
    const splittable = object !== undefined && key !== undefined && (indexed || (object.type === 'reasoning.text' && key === 'text' && typeof object.signature === 'string'))
    if (!splittable || object === undefined || key === undefined) {
      whole.push(entry)
      continue
    }
    flush()
    const { [key]: text, signature, ...rest } = object
    const split = pieces(text as string, parts)
    split.forEach((piece, i) => {
      const part: Record<string, JsonValue> = i === 0 ? { ...rest } : { ...(rest.type === undefined ? {} : { type: rest.type }), ...(indexed ? { index: rest.index as JsonValue } : {}) }
      part[key] = piece
      if (i === split.length - 1 && signature !== undefined) part.signature = signature
      out.push([part])
    })
  }
  flush()
  return out
}

function encodeArguments(args: unknown): string {
  return typeof args === 'string' ? args : JSON.stringify(args ?? {})
}

/** A request number (`seen`, `release`) that is not one: requests count 0, 1, 2, … */
function requestNumberError(method: string, n: unknown): FactstateError {
  return new FactstateError('TESTING_INVALID_OPTIONS', `scriptedModelServer: ${method}(n) takes a request number (0, 1, 2, …), not ${shown(n)}`, { details: { field: 'n' } })
}

/**
 * Starts a scripted OpenAI-compatible chat-completions server on 127.0.0.1, which answers
 * Anthropic's Messages requests (`POST /v1/messages`, from `new Anthropic({ baseURL: server.origin })`)
 * from the same script, each as the request asks (JSON, or the API's SSE events).
 *
 * @param script the answers in order, or a function choosing the answer for each request; an array
 *   is checked at once, answer by answer, as the `answer` builders check theirs (plain JSON, such as
 *   `factstate script` prints, passes when it is what a builder makes), a function's answers as served
 * @param options `stream: true` serves every answer as SSE unless the answer says otherwise;
 *   `callIdPrefix` (default `call`) begins the ids of the tool calls it makes, `<prefix>_<request>_<index>`:
 *   give each server its own when several answer one session (a successor in another process);
 *   `requestIds` sends an `x-request-id` header with every answer, as OpenAI does (`request-id`
 *   to a Messages request, as Anthropic does): `true` sends
 *   `req_<request>` (`req_0`, `req_1`, …), a function `(request, index) => id` chooses each (one that
 *   throws or returns no non-empty string has that request answered 500 naming why); none by default
 *
 * @example
 * ```ts
 * const server = await scriptedModelServer([
 *   answer.toolCalls([{ name: 'echo', arguments: { value: 42 } }]),
 *   answer.text('done', { hold: true }),
 * ])
 * try {
 *   // point a client at server.baseUrl ...
 *   await server.seen(1)
 *   server.release(1)
 * } finally {
 *   await server.close()
 * }
 * ```
 */
export async function scriptedModelServer(script: Script, options: ScriptedModelServerOptions = {}): Promise<ScriptedModelServer> {
  if (!Array.isArray(script) && typeof script !== 'function') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'scriptedModelServer: the script must be an array of answers or a function returning one', { details: { field: 'script' } })
  }
  if (typeof options !== 'object' || options === null) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'scriptedModelServer: options must be an object', { details: { field: 'options' } })
  }
  // Checked now, every answer: one that could not be served would be answered 500 and retried, and the
  // retry served the next answer, so a misspelt kind would shift the script and a test pass without it.
  if (Array.isArray(script)) for (let i = 0; i < script.length; i += 1) checkedAnswer(script[i], `script[${i}]`, 'scriptedModelServer')
  // Read once; a misspelt option (`strem: true`) is refused, not left at its default.
  const {
    stream: given,
    callIdPrefix: prefix,
    requestIds,
  } = readOptions(options, ['stream', 'callIdPrefix', 'requestIds'], { call: 'scriptedModelServer', code: 'TESTING_INVALID_OPTIONS', details: (field) => ({ field }) })
  if (given !== undefined && typeof given !== 'boolean') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', `scriptedModelServer: stream must be a boolean, not ${typeof given}`, { details: { field: 'stream' } })
  }
  if (prefix !== undefined && (typeof prefix !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(prefix))) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'scriptedModelServer: callIdPrefix must be 1–64 characters from A–Z, a–z, 0–9, _ and -', { details: { field: 'callIdPrefix' } })
  }
  if (requestIds !== undefined && typeof requestIds !== 'boolean' && typeof requestIds !== 'function') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', `scriptedModelServer: requestIds must be a boolean or a function (request, index) => id, not ${shown(requestIds)}`, {
      details: { field: 'requestIds' },
    })
  }
  const requestIdOf = requestIds === true ? (_: RecordedRequest, n: number) => `req_${n}` : typeof requestIds === 'function' ? (requestIds as RequestIds) : undefined
  const callIdPrefix = (prefix as string | undefined) ?? 'call'
  const stream = given as boolean | undefined
  const requests: RecordedRequest[] = []
  /** Requests received so far: the next one's index, whatever the test did to `requests` meanwhile. */
  let received = 0
  const unscripted: number[] = []
  /** Waiters for requests not arrived yet; none is kept for a request once it arrived (its record is in `requests`). */
  const seenWaiters = new Map<number, Deferred<RecordedRequest>>()
  const holds = new Map<number, Deferred<void>>()
  const sockets = new Set<Socket>()
  let closed = false

  const seenDeferred = (n: number): Deferred<RecordedRequest> => {
    let d = seenWaiters.get(n)
    if (!d) {
      d = deferred<RecordedRequest>()
      seenWaiters.set(n, d)
    }
    return d
  }
  const holdDeferred = (n: number): Deferred<void> => {
    let d = holds.get(n)
    if (!d) {
      d = deferred<void>()
      holds.set(n, d)
    }
    return d
  }

  /**
   * The answer chosen for request `n`, checked as the answers of an array script are when the server
   * starts (an array changed since is checked again): one it cannot serve is answered 400
   * `invalid_scripted_answer`, which no client retries, naming what is wrong; a 500 would be retried,
   * and an array's next answer served to the retry.
   */
  function served(chosen: unknown, recorded: RecordedRequest): ScriptedAnswer {
    const n = recorded.index
    try {
      return checkedAnswer(chosen, typeof script === 'function' ? `script(request, ${n})` : `script[${n}]`, `scripted model server: the answer the script gave request ${n + 1} (index ${n}) cannot be served`)
    } catch (error) {
      if (!(error instanceof FactstateError)) throw error
      return { kind: 'status', status: INVALID_STATUS, body: errorBody(recorded, INVALID_STATUS, messageWithoutCode(error), INVALID_CODE) }
    }
  }

  /** An error answer's body in the request's protocol: OpenAI's `{ error: { message, type, param, code } }`, Anthropic's `{ type: 'error', error: { type, message, details: { error_code } } }`. */
  function errorBody(recorded: RecordedRequest, status: number, message: string, code?: string): Record<string, unknown> {
    if (recorded.api === 'messages') return anthropicErrorBody(status, message, code)
    return { error: { message, type: status >= 500 ? 'server_error' : 'invalid_request_error', ...(code === undefined ? {} : { param: null, code }) } }
  }

  async function choose(recorded: RecordedRequest): Promise<ScriptedAnswer> {
    const n = recorded.index
    if (typeof script === 'function') {
      let chosen: unknown
      try {
        chosen = await script(recorded, n)
      } catch (error) {
        return answer.status(500, { body: errorBody(recorded, 500, `scripted model server: script threw for request ${n}: ${String(error)}`) })
      }
      return served(chosen, recorded)
    }
    if (n < script.length) return served(script[n], recorded)
    unscripted.push(n)
    // A status no client retries (a 500 would be retried with back-off, and end as an opaque server
    // error): the test's script is short, which no retry cures, and the message says so.
    const answers = `${script.length} ${script.length === 1 ? 'answer' : 'answers'}`
    return answer.status(UNSCRIPTED_STATUS, {
      body: errorBody(recorded, UNSCRIPTED_STATUS, `scripted model server: the script has ${answers} and this was request ${n + 1} (index ${n}, listed in server.unscripted): script an answer for it`, UNSCRIPTED_CODE),
    })
  }

  function wantsStream(answerStream: boolean | undefined, recorded: RecordedRequest): boolean {
    if (answerStream !== undefined) return answerStream
    if (stream !== undefined) return stream
    return typeof recorded.body === 'object' && recorded.body !== null && recorded.body.stream === true
  }

  /**
   * The usage an answer reports: its own (`usage`, `null` for none), else the default, except in a
   * stream the request did not ask to carry it (`stream_options: { include_usage: true }`), which
   * OpenAI's API sends without usage: so a test sees the "tokens not reported" a real stream gives.
   */
  function usageOf(given: ScriptedUsage | null | undefined, recorded: RecordedRequest, streamed: boolean): ScriptedUsage | null {
    if (given !== undefined) return given
    if (!streamed) return DEFAULT_USAGE
    const options = typeof recorded.body === 'object' && recorded.body !== null ? recorded.body.stream_options : undefined
    return typeof options === 'object' && options !== null && (options as Record<string, unknown>).include_usage === true ? DEFAULT_USAGE : null
  }

  function modelOf(recorded: RecordedRequest): string {
    const model = typeof recorded.body === 'object' && recorded.body !== null ? recorded.body.model : undefined
    return typeof model === 'string' ? model : 'scripted-model'
  }

  function startSse(res: ServerResponse): (value: unknown) => void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
    return (value) => {
      res.write(`data: ${typeof value === 'string' ? value : JSON.stringify(value)}\n\n`)
    }
  }

  async function serveCompletion(
    res: ServerResponse,
    recorded: RecordedRequest,
    text: string | undefined,
    calls: ScriptedToolCall[],
    finishReason: string,
    usage: ScriptedUsage | null,
    stream: boolean,
    pacing: PacingOptions,
    reasoning: string | undefined,
    reasoningDetails: JsonValue | undefined,
  ): Promise<void> {
    const n = recorded.index
    const id = `chatcmpl-${n}`
    const model = modelOf(recorded)
    const toolCalls = calls.map((call, i) => ({
      id: call.id ?? `${callIdPrefix}_${n}_${i}`,
      type: 'function' as const,
      function: { name: call.name, arguments: encodeArguments(call.arguments) },
      ...(call.extraContent === undefined ? {} : { extra_content: call.extraContent }),
    }))
    if (!stream) {
      writeJson(res, 200, {
        id,
        object: 'chat.completion',
        created: CREATED,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: text ?? null,
              ...(reasoning === undefined ? {} : { reasoning_content: reasoning }),
              ...(reasoningDetails === undefined ? {} : { reasoning_details: reasoningDetails }),
              ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
            },
            finish_reason: finishReason,
          },
        ],
        ...(usage ? { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } } : {}),
      })
      return
    }
    const frames: unknown[] = []
    const send = (value: unknown) => void frames.push(value)
    const parts = pacing.pieces ?? 3
    const chunk = (delta: unknown, finish: string | null = null) => ({
      id,
      object: 'chat.completion.chunk',
      created: CREATED,
      model,
      choices: [{ index: 0, delta, finish_reason: finish }],
    })
    send(chunk({ role: 'assistant', content: '' }))
    if (reasoning !== undefined && reasoning.length > 0) {
      for (const piece of pieces(reasoning, parts)) send(chunk({ reasoning_content: piece }))
    }
    if (reasoningDetails !== undefined) for (const part of detailParts(reasoningDetails, parts)) send(chunk({ reasoning_details: part }))
    if (text !== undefined && text.length > 0) {
      for (const piece of pieces(text, parts)) send(chunk({ content: piece }))
    }
    toolCalls.forEach((call, i) => {
      const extra = call.extra_content === undefined ? {} : { extra_content: call.extra_content }
      send(chunk({ tool_calls: [{ index: i, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' }, ...extra }] }))
      for (const piece of pieces(call.function.arguments, parts)) {
        if (piece.length > 0) send(chunk({ tool_calls: [{ index: i, function: { arguments: piece } }] }))
      }
    })
    send(chunk({}, finishReason))
    if (usage) {
      send({
        id,
        object: 'chat.completion.chunk',
        created: CREATED,
        model,
        choices: [],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      })
    }
    send('[DONE]')
    const write = startSse(res)
    const delay = pacing.pieceDelayMs ?? 0
    for (const [index, frame] of frames.entries()) {
      if (index > 0 && delay > 0) {
        await new Promise<void>((resolve) => setTimeout(resolve, delay).unref())
        // The client went away (or the server closed): the rest is not sent.
        if (res.destroyed || closed) return
      }
      write(frame)
    }
    res.end()
  }

  function destroy(res: ServerResponse): void {
    const socket = res.socket
    if (!socket) return
    if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy()
    else socket.destroy()
  }

  async function respond(res: ServerResponse, recorded: RecordedRequest, scripted: ScriptedAnswer): Promise<void> {
    if (scripted.kind === 'hang') return // sockets are destroyed on close
    if (scripted.hold) {
      await holdDeferred(recorded.index).promise
      holds.delete(recorded.index)
      if (closed) return
    }
    if (recorded.api === 'messages') {
      await serveMessagesAnswer(res, recorded, scripted, { callIdPrefix, closed: () => closed, destroy })
      return
    }
    switch (scripted.kind) {
      case 'text':
        await serveCompletion(
          res,
          recorded,
          scripted.text,
          [],
          scripted.finishReason ?? 'stop',
          usageOf(scripted.usage, recorded, wantsStream(scripted.stream, recorded)),
          wantsStream(scripted.stream, recorded),
          scripted,
          scripted.reasoning,
          scripted.reasoningDetails,
        )
        return
      case 'toolCalls':
        await serveCompletion(
          res,
          recorded,
          scripted.text,
          scripted.calls,
          scripted.finishReason ?? 'tool_calls',
          usageOf(scripted.usage, recorded, wantsStream(scripted.stream, recorded)),
          wantsStream(scripted.stream, recorded),
          scripted,
          scripted.reasoning,
          scripted.reasoningDetails,
        )
        return
      case 'status':
        writeScriptedStatus(
          res,
          scripted,
          scripted.body ?? { error: { message: `scripted status ${scripted.status}`, type: scripted.status >= 500 ? 'server_error' : 'invalid_request_error' } },
        )
        return
      case 'malformed':
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(scripted.body) })
        res.end(scripted.body)
        return
      case 'cutStream': {
        const send = startSse(res)
        const base = { id: `chatcmpl-${recorded.index}`, object: 'chat.completion.chunk', created: CREATED, model: modelOf(recorded) }
        send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })
        if (scripted.text.length > 0) send({ ...base, choices: [{ index: 0, delta: { content: scripted.text }, finish_reason: null }] })
        // Half an event, then a clean end of the body: no blank line, no finish, no [DONE].
        res.end(`data: {"id":"chatcmpl-${recorded.index}","object":"chat.completion.chunk","choi`)
        return
      }
      case 'stall': {
        const send = startSse(res)
        const base = { id: `chatcmpl-${recorded.index}`, object: 'chat.completion.chunk', created: CREATED, model: modelOf(recorded) }
        send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })
        if (scripted.text.length > 0) send({ ...base, choices: [{ index: 0, delta: { content: scripted.text }, finish_reason: null }] })
        return // sockets are destroyed on close
      }
      case 'reset':
        // Never text with stream: false: checkedAnswer refuses that (answered 400 invalid_scripted_answer, see `served`).
        // Text is a chunk of a stream whatever the request asked, as cutStream's and stall's are: the
        // answer cut off mid-stream it scripts; dropped for a request that did not stream, it tested nothing.
        if (scripted.text !== undefined || wantsStream(scripted.stream, recorded)) {
          const send = startSse(res)
          send({
            id: `chatcmpl-${recorded.index}`,
            object: 'chat.completion.chunk',
            created: CREATED,
            model: modelOf(recorded),
            choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
          })
          if (scripted.text !== undefined && scripted.text.length > 0) {
            send({ id: `chatcmpl-${recorded.index}`, object: 'chat.completion.chunk', created: CREATED, model: modelOf(recorded), choices: [{ index: 0, delta: { content: scripted.text }, finish_reason: null }] })
          }
          // Let the first chunks reach the client before the connection goes.
          setTimeout(() => destroy(res), 20)
        } else {
          destroy(res)
        }
        return
      default: {
        const never: never = scripted
        throw new TypeError(`unknown scripted answer ${JSON.stringify(never)}`)
      }
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const bodyText = Buffer.concat(chunks).toString('utf8')
    const path = (req.url ?? '/').split('?')[0] ?? '/'
    const api = path === '/v1/chat/completions' ? 'chat-completions' : path === '/v1/messages' ? 'messages' : undefined
    if (req.method !== 'POST' || api === undefined) {
      // An Anthropic SDK given server.baseUrl (…/v1) asks for /v1/v1/messages: its baseURL is server.origin.
      const hint = path.endsWith('/v1/messages') ? `; an Anthropic SDK's baseURL is server.origin (${origin}), not server.baseUrl` : ''
      writeJson(res, 404, { error: { message: `scripted model server: no route ${req.method} ${path} (it serves POST /v1/chat/completions and POST /v1/messages${hint})`, type: 'not_found' } })
      return
    }
    let body: RecordedBody = { model: '', messages: [] }
    try {
      const parsed: unknown = JSON.parse(bodyText)
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) body = { messages: [], ...(parsed as Partial<RecordedBody>) } as RecordedBody
    } catch {
      // Recorded as an empty request; the raw text is in bodyText.
    }
    const recorded: RecordedRequest = { index: received, method: req.method, path, api, body, bodyText, headers: req.headers }
    received += 1
    requests.push(recorded)
    // Handed to whoever waits for it, and not kept here: a test that empties `requests` lets it go.
    seenWaiters.get(recorded.index)?.resolve(recorded)
    seenWaiters.delete(recorded.index)
    if (requestIdOf !== undefined) {
      let id: unknown
      try {
        id = requestIdOf(recorded, recorded.index)
      } catch (error) {
        id = new Error(`threw ${String(error)}`)
      }
      if (typeof id !== 'string' || id === '') {
        const why = id instanceof Error ? id.message : `returned ${shown(id)}`
        writeJson(res, 500, errorBody(recorded, 500, `scripted model server: requestIds ${why} for request ${recorded.index}`))
        return
      }
      // Sent with whatever answer this request gets (writeHead keeps it): OpenAI's header name, or Anthropic's.
      res.setHeader(api === 'messages' ? 'request-id' : 'x-request-id', id)
    }
    const scripted = await choose(recorded)
    if (closed) return
    await respond(res, recorded, scripted)
  }

  const server = createServer((req, res) => {
    // A request in flight keeps the process alive until it is answered (or its connection ends); an idle connection does not.
    const { socket } = req
    socket.ref()
    res.once('close', () => socket.unref())
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent && !res.destroyed) {
        writeJson(res, 500, { error: { message: `scripted model server failed: ${String(error)}`, type: 'server_error' } })
      } else {
        res.destroy()
      }
    })
  })
  server.on('connection', (socket) => {
    socket.unref()
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  // A server a test forgot to close does not keep the process alive (node --test would wait on it forever).
  server.unref()
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('scripted model server: no TCP address')
  const origin = `http://127.0.0.1:${address.port}`
  const baseUrl = `${origin}/v1`

  let closing: Promise<void> | undefined
  return {
    baseUrl,
    origin,
    requests,
    unscripted,
    seen(n) {
      // A request number that can never come would wait forever.
      if (!Number.isSafeInteger(n) || n < 0) return Promise.reject(requestNumberError('seen', n))
      if (n >= received) return seenDeferred(n).promise
      // Where it stands unless `requests` was emptied or cut since.
      const arrived = requests[n]?.index === n ? requests[n] : requests.find((request) => request.index === n)
      if (arrived !== undefined) return Promise.resolve(arrived)
      return Promise.reject(
        new FactstateError('TESTING_INVALID_OPTIONS', `scriptedModelServer: seen(${n}): request ${n} arrived and is no longer in server.requests (it was emptied since); wait for it before letting it go`, {
          details: { field: 'n' },
        }),
      )
    },
    release(n) {
      if (!Number.isSafeInteger(n) || n < 0) throw requestNumberError('release', n)
      holdDeferred(n).resolve()
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        closed = true
        for (const d of holds.values()) d.resolve()
        server.close(() => resolve())
        for (const socket of sockets) socket.destroy()
        sockets.clear()
      })
      return closing
    },
  }
}
