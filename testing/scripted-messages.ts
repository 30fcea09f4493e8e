/**
 * The scripted model server's answers in Anthropic's Messages protocol (POST /v1/messages), for an
 * agent built on `anthropicClient(new Anthropic({ baseURL: server.origin }))`: the same
 * {@link ScriptedAnswer}s as the chat-completions route serves, as a `Message` in JSON or as the
 * API's server-sent events (message_start, ping, content_block_start / content_block_delta /
 * content_block_stop for each block, message_delta with the stop reason and usage, message_stop).
 */
import type { ServerResponse } from 'node:http'
import type { JsonValue } from '../facts/types.js'
import type { PacingOptions, RecordedRequest, ScriptedAnswer, ScriptedToolCall, ScriptedUsage } from './scripted-model-server.js'

/** What the server lends the Messages route: its settings and its connection handling. */
export interface MessagesServing {
  callIdPrefix: string
  /** Whether the server closed (a paced stream stops sending). */
  closed(): boolean
  /** Resets the connection. */
  destroy(res: ServerResponse): void
}

/**
 * Whether the request asked for a stream: a Messages answer is served as it was asked for, whatever
 * the server's or the answer's `stream` option, since Anthropic's SDK reads the answer as it asked
 * for it (SSE for `stream: true`, else JSON) and would make nothing of the other.
 */
function requestStreams(recorded: RecordedRequest): boolean {
  return isObject(recorded.body) && recorded.body.stream === true
}

const DEFAULT_USAGE: ScriptedUsage = { prompt_tokens: 10, completion_tokens: 5 }

/** Anthropic's error `type` for an HTTP status, as its API answers them. */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request_error'
    case 401:
      return 'authentication_error'
    case 402:
      return 'billing_error'
    case 403:
      return 'permission_error'
    case 404:
      return 'not_found_error'
    case 413:
      return 'request_too_large'
    case 429:
      return 'rate_limit_error'
    case 504:
      return 'timeout_error'
    case 529:
      return 'overloaded_error'
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error'
  }
}

/** Anthropic's error body: `{ type: 'error', error: { type, message, details? } }`, a `code` as `details.error_code` (the SDK's `errorCode`). */
export function anthropicErrorBody(status: number, message: string, code?: string): Record<string, unknown> {
  return { type: 'error', error: { type: anthropicErrorType(status), message, ...(code === undefined ? {} : { details: { error_code: code } }) } }
}

/** An answer's `finishReason` in Anthropic's words (`stop_reason`): OpenAI's four mapped back as `anthropicClient` maps them, any other sent as given. */
function stopReasonOf(finishReason: string | undefined, fallback: string): string {
  switch (finishReason) {
    case undefined:
      return fallback
    case 'stop':
      return 'end_turn'
    case 'tool_calls':
      return 'tool_use'
    case 'length':
      return 'max_tokens'
    case 'content_filter':
      return 'refusal'
    default:
      return finishReason
  }
}

/** The usage a Message reports: cached prompt tokens as `cache_read_input_tokens`, the rest as `input_tokens` (Anthropic counts them apart). */
function usageOf(usage: ScriptedUsage): Record<string, number> {
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0
  return { input_tokens: Math.max(0, usage.prompt_tokens - cached), cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: usage.completion_tokens }
}

/** A signature for a thinking block the script gave none: opaque base64, as the API's are. */
function signatureOf(n: number, i: number): string {
  return Buffer.from(`scripted thinking signature: request ${n}, block ${i}`).toString('base64')
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/**
 * The thinking blocks an answer starts with: each `reasoningDetails` entry of Anthropic's (format
 * `anthropic-claude-v1`, or none) that is a `reasoning.text` with its `text` (a `thinking` block, its
 * `signature` or one made up) or a `reasoning.encrypted` with its `data` (a `redacted_thinking`
 * block), in order; without any, `reasoning` as one thinking block.
 */
function thinkingBlocks(n: number, reasoning: string | undefined, details: JsonValue | undefined): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = []
  for (const entry of Array.isArray(details) ? details : []) {
    if (!isObject(entry) || (entry.format !== undefined && entry.format !== 'anthropic-claude-v1')) continue
    if (entry.type === 'reasoning.text' && typeof entry.text === 'string') {
      blocks.push({ type: 'thinking', thinking: entry.text, signature: typeof entry.signature === 'string' ? entry.signature : signatureOf(n, blocks.length) })
    } else if (entry.type === 'reasoning.encrypted' && typeof entry.data === 'string') {
      blocks.push({ type: 'redacted_thinking', data: entry.data })
    }
  }
  if (blocks.length === 0 && reasoning !== undefined && reasoning !== '') blocks.push({ type: 'thinking', thinking: reasoning, signature: signatureOf(n, 0) })
  return blocks
}

/** Why a call's arguments cannot be a Message's `tool_use.input`: a text that is not JSON (a stream's `input_json_delta` carries any text, a Message only JSON). */
const NOT_JSON = Symbol('not JSON')

/** A call's arguments as `tool_use.input`: an object as it is; an empty text `{}` (as a call streamed without input); another text parsed, or {@link NOT_JSON}. */
function inputOf(args: unknown): unknown {
  if (typeof args !== 'string') return args ?? {}
  if (args.trim() === '') return {}
  try {
    return JSON.parse(args) as unknown
  } catch {
    return NOT_JSON
  }
}

/**
 * An error object as this route sends it: a `code` given in OpenAI's place (`error.code`: what
 * `scriptOf` scripts of a recorded code, and what a script written for the chat route gives) also
 * as `details.error_code`, where Anthropic's SDK reads it (`errorCode`), unless `details` is given.
 */
function anthropicError(error: Record<string, unknown>): Record<string, unknown> {
  return typeof error.code === 'string' && error.details === undefined ? { ...error, details: { error_code: error.code } } : error
}

/** Splits `text` into up to `parts` non-empty pieces (none for an empty text). */
function pieces(text: string, parts: number): string[] {
  const out: string[] = []
  const size = Math.max(1, Math.ceil(text.length / parts))
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

function modelOf(recorded: RecordedRequest): string {
  const model = isObject(recorded.body) ? recorded.body.model : undefined
  return typeof model === 'string' && model !== '' ? model : 'scripted-model'
}

/** Writes `value` as a JSON answer. */
export function writeJson(res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(value)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

/** Writes a scripted status answer (both routes): its retry headers, a string body as text, any other as JSON. */
export function writeScriptedStatus(res: ServerResponse, scripted: Extract<ScriptedAnswer, { kind: 'status' }>, body: unknown): void {
  const headers: Record<string, string> = {}
  if (scripted.retryAfter !== undefined) headers['retry-after'] = String(scripted.retryAfter)
  if (scripted.retryAfterMs !== undefined) headers['retry-after-ms'] = String(scripted.retryAfterMs)
  if (typeof body === 'string') {
    res.writeHead(scripted.status, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body), ...headers })
    res.end(body)
  } else {
    writeJson(res, scripted.status, body, headers)
  }
}

/** Starts an SSE answer; each call writes one event, its name the data's `type`. */
function startSse(res: ServerResponse): (data: { type: string; [key: string]: unknown }) => void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
  return (data) => void res.write(frameOf(data))
}

const frameOf = (data: { type: string; [key: string]: unknown }) => `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`

/** The start of a streamed Message: message_start (its usage as the API sends it there, one output token) and a ping. */
function openingOf(recorded: RecordedRequest, usage: Record<string, number> | undefined): { type: string; [key: string]: unknown }[] {
  const message = { id: `msg_scripted_${recorded.index}`, type: 'message', role: 'assistant', model: modelOf(recorded), content: [], stop_reason: null, stop_sequence: null }
  return [{ type: 'message_start', message: usage === undefined ? message : { ...message, usage: { ...usage, output_tokens: 1 } } }, { type: 'ping' }]
}

/** A text block begun and given `text` (a stream cut, stalled or reset after it). */
function partialText(text: string | undefined): { type: string; [key: string]: unknown }[] {
  return [
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    ...(text === undefined || text === '' ? [] : [{ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } }]),
  ]
}

async function serveMessage(
  res: ServerResponse,
  recorded: RecordedRequest,
  serving: MessagesServing,
  parts: { text: string | undefined; calls: ScriptedToolCall[]; stop: string; usage: ScriptedUsage | null; reasoning: string | undefined; reasoningDetails: JsonValue | undefined },
  streamed: boolean,
  pacing: PacingOptions,
): Promise<void> {
  const n = recorded.index
  const content: Record<string, unknown>[] = thinkingBlocks(n, parts.reasoning, parts.reasoningDetails)
  if (parts.text !== undefined && parts.text !== '') content.push({ type: 'text', text: parts.text })
  const raw = new Map<Record<string, unknown>, string>()
  for (const [i, call] of parts.calls.entries()) {
    const input = inputOf(call.arguments)
    if (input === NOT_JSON && !streamed) {
      // A Message's tool_use.input is JSON: served otherwise, the client would record other arguments than scripted.
      const message =
        `scripted model server: the answer to request ${n + 1} (index ${n}) cannot be served as a Message: calls[${i}].arguments is not JSON (${JSON.stringify(call.arguments).slice(0, 200)}), ` +
        'and a Message\'s tool_use.input is a JSON object: script the arguments as an object, or have the request ask for a stream (stream: true), whose input_json_delta carries any text'
      writeJson(res, 400, anthropicErrorBody(400, message, 'invalid_scripted_answer'))
      return
    }
    const block = { type: 'tool_use', id: call.id ?? `${serving.callIdPrefix}_${n}_${i}`, name: call.name, input }
    raw.set(block, typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}))
    content.push(block)
  }
  const usage = parts.usage === null ? undefined : usageOf(parts.usage)
  if (!streamed) {
    writeJson(res, 200, {
      id: `msg_scripted_${n}`,
      type: 'message',
      role: 'assistant',
      model: modelOf(recorded),
      content,
      stop_reason: parts.stop,
      stop_sequence: null,
      ...(usage === undefined ? {} : { usage }),
    })
    return
  }
  const count = pacing.pieces ?? 3
  const events = openingOf(recorded, usage)
  content.forEach((block, index) => {
    if (block.type === 'thinking') {
      // As the API streams thinking: the text in pieces, then the whole signature in one delta.
      events.push({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } })
      for (const piece of pieces(String(block.thinking), count)) events.push({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: piece } })
      events.push({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: block.signature } })
    } else if (block.type === 'redacted_thinking') {
      // Whole at its start, no deltas.
      events.push({ type: 'content_block_start', index, content_block: block })
    } else if (block.type === 'text') {
      events.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } })
      for (const piece of pieces(String(block.text), count)) events.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: piece } })
    } else {
      // As the API streams a call: its input `{}` at the start, then its JSON in pieces (the first empty).
      events.push({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } })
      events.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: '' } })
      for (const piece of pieces(raw.get(block) ?? '', count)) events.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: piece } })
    }
    events.push({ type: 'content_block_stop', index })
  })
  events.push({ type: 'message_delta', delta: { stop_reason: parts.stop, stop_sequence: null }, usage: usage === undefined ? {} : { output_tokens: usage.output_tokens } })
  events.push({ type: 'message_stop' })
  const write = startSse(res)
  const delay = pacing.pieceDelayMs ?? 0
  for (const [index, event] of events.entries()) {
    if (index > 0 && delay > 0) {
      await new Promise<void>((resolve) => setTimeout(resolve, delay).unref())
      // The client went away (or the server closed): the rest is not sent.
      if (res.destroyed || serving.closed()) return
    }
    write(event)
  }
  res.end()
}

/** The `error` object of a body that is a JSON object with one, else nothing. */
function reportedErrorOf(body: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(body)
    return isObject(parsed) && isObject(parsed.error) ? parsed.error : undefined
  } catch {
    return undefined
  }
}

/** Serves `scripted` to a Messages request (its `hold` already waited for). */
export async function serveMessagesAnswer(res: ServerResponse, recorded: RecordedRequest, scripted: ScriptedAnswer, serving: MessagesServing): Promise<void> {
  switch (scripted.kind) {
    case 'text':
    case 'toolCalls': {
      const streamed = requestStreams(recorded)
      const calls = scripted.kind === 'toolCalls' ? scripted.calls : []
      const stop = stopReasonOf(scripted.finishReason, scripted.kind === 'toolCalls' ? 'tool_use' : 'end_turn')
      const usage = scripted.usage === undefined ? DEFAULT_USAGE : scripted.usage
      await serveMessage(res, recorded, serving, { text: scripted.text, calls, stop, usage, reasoning: scripted.reasoning, reasoningDetails: scripted.reasoningDetails }, streamed, scripted)
      return
    }
    case 'status': {
      const given = scripted.body ?? anthropicErrorBody(scripted.status, `scripted status ${scripted.status}`)
      writeScriptedStatus(res, scripted, isObject(given) && isObject(given.error) ? { ...given, error: anthropicError(given.error) } : given)
      return
    }
    case 'malformed': {
      // A JSON error (`{ error: { type, message } }`, what `scriptOf` scripts for an error the
      // provider reported inside an answer begun as HTTP 200), to a streamed request: the stream's
      // `event: error`, as the API reports an error after its 200.
      const reported = requestStreams(recorded) ? reportedErrorOf(scripted.body) : undefined
      if (reported !== undefined) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
        res.end(frameOf({ type: 'error', error: anthropicError(reported) }))
        return
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(scripted.body) })
      res.end(scripted.body)
      return
    }
    case 'cutStream': {
      const send = startSse(res)
      for (const event of [...openingOf(recorded, usageOf(DEFAULT_USAGE)), ...partialText(scripted.text)]) send(event)
      // Half an event, then a clean end of the body: no message_delta, no message_stop.
      res.end('event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "del')
      return
    }
    case 'stall': {
      const send = startSse(res)
      for (const event of [...openingOf(recorded, usageOf(DEFAULT_USAGE)), ...partialText(scripted.text)]) send(event)
      return // sockets are destroyed on close
    }
    case 'reset':
      // Streamed as the request asked, or with `text` (an answer cut mid-stream), as on the chat route.
      if (scripted.text !== undefined || requestStreams(recorded)) {
        const send = startSse(res)
        for (const event of [...openingOf(recorded, usageOf(DEFAULT_USAGE)), ...(scripted.text === undefined ? [] : partialText(scripted.text))]) send(event)
        // Let the first events reach the client before the connection goes.
        setTimeout(() => serving.destroy(res), 20)
      } else {
        serving.destroy(res)
      }
      return
    case 'hang':
      return
    default: {
      const never: never = scripted
      throw new TypeError(`unknown scripted answer ${JSON.stringify(never)}`)
    }
  }
}
