/**
 * A raw `node:http` OpenAI-compatible chat-completions server on 127.0.0.1 for tests that need to
 * answer as a particular provider does (spec/provider-quirks.test.ts, spec/provider-state.test.ts),
 * and helpers writing its answers.
 */
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/** Writes one answer. */
export type Responder = (res: ServerResponse) => void

/** A tool call of an assistant message, as a request replays it. */
export interface ReplayedCall {
  id: string
  function: { name: string; arguments: string }
  extra_content?: unknown
}
/** A message of a request, with the members the tests read. */
export interface Message {
  role: string
  content?: string | null
  reasoning_content?: string
  reasoning_details?: unknown
  tool_call_id?: string
  tool_calls?: ReplayedCall[]
}
/** A request's body, parsed. */
export interface ChatRequest {
  messages: Message[]
}
/** A provider's own rule: the answer to a request it refuses, or undefined to let the script answer. */
export type Refusal = (body: ChatRequest) => Responder | undefined

/**
 * A server answering each request with the next responder (500 "the script ran out" once they run
 * out), unless `refuse` answers it in their place. `requests` holds each request's parsed body,
 * `raw` its text as sent; `close()` ends open connections and stops the server.
 */
export async function chatCompletionsServer(responders: Responder[], refuse: Refusal = () => undefined) {
  const requests: ChatRequest[] = []
  /** Each request's body as sent. */
  const raw: string[] = []
  const server = createServer((req, res) => {
    let text = ''
    req.setEncoding('utf8')
    req.on('data', (piece: string) => (text += piece))
    req.on('end', () => {
      const body = JSON.parse(text) as ChatRequest
      requests.push(body)
      raw.push(text)
      const own = refuse(body)
      if (own) return own(res)
      const next = responders.shift()
      if (next) return next(res)
      res.writeHead(500).end('the script ran out')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    requests,
    raw,
    close: () => {
      server.closeAllConnections()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** A JSON answer. */
export const json =
  (body: unknown, status = 200): Responder =>
  (res) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  }

/** A streamed answer: each event as one `data:` line, then `[DONE]`. */
export const sse =
  (events: unknown[]): Responder =>
  (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const event of events) res.write(`data: ${JSON.stringify(event)}\n\n`)
    res.end('data: [DONE]\n\n')
  }

/** A plain JSON answer's body: one choice holding `message` as the assistant's. */
export const completion = (message: Record<string, unknown>, finishReason: string | null = 'tool_calls') => ({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finishReason }],
})
/** One event of a streamed answer: one choice holding `delta`. */
export const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta, finish_reason: finishReason }],
})
/** A plain JSON answer of `content` alone. */
export const text = (content: string) => json(completion({ content }, 'stop'))
