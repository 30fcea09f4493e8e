import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { ChatRequestBody, ModelRequest, ModelResponse, ProviderConfig } from '../actors/model-client.js'
import { OpenAIChatClient, retryAfterMsOf } from '../actors/openai-chat-client.js'
import { answer, scriptedModelServer, type Script, type ScriptedAnswer, type ScriptedModelServer, type ScriptedModelServerOptions } from '../testing/scripted-model-server.js'
import { aliveAfterCollection } from './support/gc.js'
import { withTimeout } from './support/temp.js'

const TEST_MS = 5_000

function bodyOf(extra: Record<string, unknown> = {}): ChatRequestBody {
  return { model: 'test-model', messages: [{ role: 'user', content: 'hello ✓ “quotes” \u2028' }], ...extra }
}

function requestFor(body: ChatRequestBody, options: { signal?: AbortSignal; timeoutMs?: number; idleTimeoutMs?: number; bodyText?: string } = {}): ModelRequest {
  return {
    body,
    bodyText: options.bodyText ?? JSON.stringify(body),
    signal: options.signal ?? new AbortController().signal,
    timeoutMs: options.timeoutMs ?? 3_000,
    ...(options.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.idleTimeoutMs }),
  }
}

function provider(server: { baseUrl: string }, extra: Partial<ProviderConfig> = {}): ProviderConfig {
  return { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'test-model', ...extra }
}

/** Runs `body` against a fresh scripted server, bounded by a timeout, always closing the server. */
function withServer(
  script: Script,
  body: (server: ScriptedModelServer) => Promise<void>,
  options: ScriptedModelServerOptions = {},
): () => Promise<void> {
  return () =>
    withTimeout(async () => {
      const server = await scriptedModelServer(script, options)
      try {
        await body(server)
      } finally {
        await server.close()
      }
    }, TEST_MS)
}

function interrupted(response: ModelResponse): Extract<ModelResponse, { kind: 'interrupted' }> {
  if (response.kind !== 'interrupted') assert.unreachable(`expected interrupted, got ${JSON.stringify(response)}`)
  return response as Extract<ModelResponse, { kind: 'interrupted' }>
}

test(
  'plain JSON text answer maps to a completed output without tool calls',
  withServer([answer.text('done')], async (server) => {
    const response = await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf()))
    assert.equal(response, {
      kind: 'completed',
      output: { text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5 }, responseId: 'chatcmpl-0' },
    })
    assert.is(server.requests.length, 1)
    assert.is(server.requests[0]?.path, '/v1/chat/completions')
  }),
)

test(
  "the provider's x-request-id, as the SDK reads it, is returned: output.requestId of a plain and a streamed answer, provider.requestId of a 500, a 400 and an unreadable answer; none when no answer came",
  withServer(
    [
      answer.text('plain', { stream: false }),
      answer.text('streamed', { stream: true }),
      answer.status(500, { body: { error: { message: 'upstream failed', type: 'server_error' } } }),
      answer.status(400, { body: { error: { message: 'too long', type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } } }),
      answer.malformed({ body: 'not json' }),
      answer.reset(),
    ],
    async (server) => {
      const client = new OpenAIChatClient(provider(server))
      const responses: ModelResponse[] = []
      for (let n = 0; n < 6; n += 1) responses.push(await client.complete(requestFor(bodyOf())))
      assert.equal(
        responses.map((response) => (response.kind === 'completed' ? response.output.requestId : response.provider)),
        [
          'req_0',
          'req_1',
          { status: 500, type: 'server_error', requestId: 'req_2' },
          { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages', requestId: 'req_3' },
          { requestId: 'req_4' },
          undefined,
        ],
      )
      assert.equal(
        responses.map((response) => (response.kind === 'interrupted' ? response.status : response.kind)),
        ['completed', 'completed', 'retryable_failure', 'failed', 'failed', 'retryable_failure'],
      )
    },
    { requestIds: true },
  ),
)

test(
  "the scripted server's requestIds function chooses each answer's id; an id over 256 characters is dropped, not the answer; a function that throws or gives no id has that request answered 500 naming why; requestIds of another kind is refused",
  withServer(
    [answer.text('one'), answer.text('two'), answer.status(429), answer.text('four'), answer.text('five')],
    async (server) => {
      const client = new OpenAIChatClient(provider(server))
      const responses: ModelResponse[] = []
      for (let n = 0; n < 5; n += 1) responses.push(await client.complete(requestFor(bodyOf())))
      assert.equal(responses[0]?.kind === 'completed' && responses[0].output.requestId, 'r'.repeat(256))
      assert.equal(responses[1]?.kind === 'completed' && 'requestId' in responses[1].output, false)
      assert.equal(interrupted(responses[2]!).provider, { status: 429, type: 'invalid_request_error', requestId: 'gw-2' })
      assert.match(interrupted(responses[3]!).message, /requestIds threw Error: no id today for request 3/)
      assert.match(interrupted(responses[4]!).message, /requestIds returned 42 for request 4/)
      for (const requestIds of ['yes', 1, null]) {
        const refused = await scriptedModelServer([], { requestIds: requestIds as never }).then(
          async (unexpected) => {
            await unexpected.close()
            return undefined
          },
          (error: { code?: string; details?: { field?: string } }) => [error.code, error.details?.field],
        )
        assert.equal(refused, ['TESTING_INVALID_OPTIONS', 'requestIds'], String(requestIds))
      }
    },
    {
      requestIds: (_, index) => {
        if (index === 3) throw new Error('no id today')
        return [`${'r'.repeat(256)}`, 'r'.repeat(257), `gw-${index}`, '', 42][index] as string
      },
    },
  ),
)

test(
  'a JSON tool-call answer has no text key and keeps arguments as raw JSON text',
  withServer([answer.toolCalls([{ name: 'echo', arguments: { value: 42 } }])], async (server) => {
    const response = await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf()))
    if (response.kind !== 'completed') return assert.unreachable(JSON.stringify(response))
    assert.equal(response.output, {
      toolCalls: [{ callId: 'call_0_0', name: 'echo', arguments: '{"value":42}' }],
      finishReason: 'tool_calls',
      usage: { inputTokens: 10, outputTokens: 5 },
      responseId: 'chatcmpl-0',
    })
    assert.not.ok('text' in response.output)
  }),
)

test(
  "the scripted server's callIdPrefix begins the ids of its calls, streamed or not: two servers answering one session (a successor in another process) make different ids",
  withServer(
    [answer.toolCalls([{ name: 'echo', arguments: {} }, { name: 'echo', arguments: {} }]), answer.toolCalls([{ name: 'echo', arguments: {} }], { stream: true })],
    async (server) => {
      const ids: string[] = []
      for (let round = 0; round < 2; round += 1) {
        const response = await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf()))
        if (response.kind !== 'completed') return assert.unreachable(JSON.stringify(response))
        ids.push(...response.output.toolCalls.map((call) => call.callId))
      }
      assert.equal(ids, ['worker-b_0_0', 'worker-b_0_1', 'worker-b_1_0'])
    },
    { callIdPrefix: 'worker-b' },
  ),
)

test(
  'several tool calls in one JSON answer, invalid JSON arguments passed through untouched',
  withServer(
    [
      answer.toolCalls(
        [
          { name: 'echo', arguments: { value: 1 } },
          { name: 'broken', arguments: '{"raw":' },
          { name: 'echo', arguments: { value: 3 } },
        ],
        { usage: null },
      ),
    ],
    async (server) => {
      const response = await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf()))
      assert.equal(response, {
        kind: 'completed',
        output: {
          toolCalls: [
            { callId: 'call_0_0', name: 'echo', arguments: '{"value":1}' },
            { callId: 'call_0_1', name: 'broken', arguments: '{"raw":' },
            { callId: 'call_0_2', name: 'echo', arguments: '{"value":3}' },
          ],
          finishReason: 'tool_calls',
          responseId: 'chatcmpl-0',
        },
      })
    },
  ),
)

test(
  'SSE tool-call answer: deltas merged by index, text concatenated, usage from the final chunk',
  withServer(
    [
      answer.toolCalls(
        [
          { name: 'echo', arguments: { value: 42, nested: { list: [1, 2, 3] } } },
          { name: 'search', arguments: '{"q":"a longer query string"}' },
          { name: 'broken', arguments: '{"raw":' },
        ],
        { text: 'let me check that for you' },
      ),
    ],
    async (server) => {
      const body = bodyOf({ stream: true, stream_options: { include_usage: true } })
      const response = await new OpenAIChatClient(provider(server)).complete(requestFor(body))
      assert.equal(response, {
        kind: 'completed',
        output: {
          text: 'let me check that for you',
          toolCalls: [
            { callId: 'call_0_0', name: 'echo', arguments: '{"value":42,"nested":{"list":[1,2,3]}}' },
            { callId: 'call_0_1', name: 'search', arguments: '{"q":"a longer query string"}' },
            { callId: 'call_0_2', name: 'broken', arguments: '{"raw":' },
          ],
          finishReason: 'tool_calls',
          usage: { inputTokens: 10, outputTokens: 5 },
          responseId: 'chatcmpl-0',
        },
      })
    },
  ),
)

test(
  'the scripted server streams usage only when the request asks for it (stream_options.include_usage), as OpenAI does, or when the answer gives its own',
  withServer([answer.text('a'), answer.text('b'), answer.text('c', { usage: { prompt_tokens: 3, completion_tokens: 2 } }), answer.text('d')], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const usages = []
    for (const body of [bodyOf({ stream: true }), bodyOf({ stream: true, stream_options: { include_usage: true } }), bodyOf({ stream: true }), bodyOf()]) {
      const response = await client.complete(requestFor(body))
      usages.push(response.kind === 'completed' ? (response.output.usage ?? null) : response.kind)
    }
    assert.equal(usages, [null, { inputTokens: 10, outputTokens: 5 }, { inputTokens: 3, outputTokens: 2 }, { inputTokens: 10, outputTokens: 5 }])
  }),
)

test(
  'SSE is understood even when the body did not ask for a stream; JSON when it did',
  withServer([answer.text('streamed anyway', { stream: true, usage: { prompt_tokens: 10, completion_tokens: 5 } }), answer.text('plain anyway', { stream: false })], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const first = await client.complete(requestFor(bodyOf()))
    const second = await client.complete(requestFor(bodyOf({ stream: true })))
    assert.equal(first, {
      kind: 'completed',
      output: { text: 'streamed anyway', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5 }, responseId: 'chatcmpl-0' },
    })
    assert.equal(second, {
      kind: 'completed',
      output: { text: 'plain anyway', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5 }, responseId: 'chatcmpl-1' },
    })
  }),
)

test(
  'the server receives exactly bodyText, even when it is not what the SDK would serialize',
  withServer([answer.text('a'), answer.text('b')], async (server) => {
    const body = bodyOf({ temperature: 0.5 })
    const canonical = JSON.stringify(body)
    // Same JSON value, different bytes: spacing and key order the SDK would never produce.
    const odd = `{ "messages" : ${JSON.stringify(body.messages)},\n "temperature": 0.50, "model":"test-model" }`
    const client = new OpenAIChatClient(provider(server))
    const r1 = await client.complete(requestFor(body))
    const r2 = await client.complete(requestFor(body, { bodyText: odd }))
    assert.is(r1.kind, 'completed')
    assert.is(r2.kind, 'completed')
    assert.is(server.requests[0]?.bodyText, canonical)
    assert.is(server.requests[1]?.bodyText, odd)
    assert.equal(server.requests[0]?.body, body)
    assert.is(server.requests[0]?.headers['content-type'], 'application/json')
  }),
)

test(
  'HTTP 500 is a retryable failure without retryAfterMs, and the SDK does not retry on its own',
  withServer([answer.status(500), answer.text('should not be reached')], async (server) => {
    const response = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf())))
    assert.is(response.status, 'retryable_failure')
    assert.is(response.retryAfterMs, undefined)
    assert.not.ok('retryAfterMs' in response)
    assert.not.ok(response.malformed)
    assert.match(response.message, /HTTP 500/)
    assert.match(response.message, /scripted status 500/)
    assert.is(server.requests.length, 1)
  }),
)

test(
  'HTTP 502/503 and 408 (request timeout) are retryable too; 400, 401 and 404 are not',
  withServer([answer.status(502), answer.status(503, { body: 'upstream down' }), answer.status(408), answer.status(400), answer.status(401), answer.status(404)], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const statuses: string[] = []
    for (let n = 0; n < 6; n += 1) {
      const response = interrupted(await client.complete(requestFor(bodyOf())))
      statuses.push(response.status)
      if (n === 1) assert.match(response.message, /HTTP 503: upstream down/)
    }
    assert.equal(statuses, ['retryable_failure', 'retryable_failure', 'retryable_failure', 'failed', 'failed', 'failed'])
  }),
)

test(
  'HTTP 429 with retry-after (seconds) gives retryAfterMs; retry-after-ms wins when present',
  withServer([answer.status(429, { retryAfter: 2 }), answer.status(429, { retryAfter: 9, retryAfterMs: 1500 })], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const a = interrupted(await client.complete(requestFor(bodyOf())))
    const b = interrupted(await client.complete(requestFor(bodyOf())))
    assert.is(a.status, 'retryable_failure')
    assert.is(a.retryAfterMs, 2000)
    assert.is(b.status, 'retryable_failure')
    assert.is(b.retryAfterMs, 1500)
    assert.is(server.requests.length, 2)
  }),
)

test('retry-after as an HTTP date (of any of the three forms), and of a header sent twice its first value', () => {
  const now = Date.parse('2025-01-01T00:00:00Z')
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': 'Wed, 01 Jan 2025 00:00:30 GMT' }), now), 30_000)
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': 'Tue, 31 Dec 2024 23:59:00 GMT' }), now), 0)
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': 'soon' }), now), undefined)
  // A header sent twice reaches us joined: its first value counts ("2, 5" is no date in 2001).
  const twice = (name: string, a: string, b: string) => {
    const headers = new Headers()
    headers.append(name, a)
    headers.append(name, b)
    return headers
  }
  assert.is(retryAfterMsOf(twice('retry-after', '2', '5'), now), 2_000)
  assert.is(retryAfterMsOf(twice('retry-after', '120', '120'), now), 120_000)
  assert.is(retryAfterMsOf(twice('retry-after-ms', '150', '300'), now), 150)
  assert.is(retryAfterMsOf(twice('retry-after', 'Wed, 01 Jan 2025 00:00:30 GMT', 'Wed, 01 Jan 2025 00:01:00 GMT'), now), 30_000)
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': '2 5' }), now), undefined)
  // RFC 850 and asctime dates name their month too.
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': 'Wednesday, 01-Jan-25 00:00:30 GMT' }), now), 30_000)
  assert.is(retryAfterMsOf(new Headers({ 'retry-after': 'Wed Jan  1 00:00:30 2025' }), now), Date.parse('Wed Jan  1 00:00:30 2025') - now)
  assert.is(retryAfterMsOf(new Headers({}), now), undefined)
})

test(
  'HTTP 400 and 401 are failed, not malformed, not retryable',
  withServer([answer.status(400, { body: { error: { message: 'bad tools' } } }), answer.status(401)], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const a = interrupted(await client.complete(requestFor(bodyOf())))
    const b = interrupted(await client.complete(requestFor(bodyOf())))
    assert.is(a.status, 'failed')
    assert.not.ok(a.malformed)
    assert.match(a.message, /HTTP 400: bad tools/)
    assert.is(b.status, 'failed')
    assert.match(b.message, /HTTP 401/)
  }),
)

test(
  'a 200 body that is not JSON, or JSON without choices[0].message, is failed + malformed',
  withServer(
    [answer.malformed(), answer.malformed({ body: '{"ok":true}' }), answer.malformed({ body: '{"choices":[{"finish_reason":"stop"}]}' })],
    async (server) => {
      const client = new OpenAIChatClient(provider(server))
      for (let i = 0; i < 3; i++) {
        const r = interrupted(await client.complete(requestFor(bodyOf())))
        assert.is(r.status, 'failed', `answer ${i}`)
        assert.is(r.malformed, true, `answer ${i}`)
      }
    },
  ),
)

test(
  'an SSE stream cut mid-event is failed + malformed',
  withServer([answer.cutStream({ text: 'half an ans' })], async (server) => {
    const r = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf({ stream: true }))))
    assert.is(r.status, 'failed')
    assert.is(r.malformed, true)
  }),
)


/** A raw HTTP server whose handler writes whatever the test asks; closed (every connection too) after `body`. */
function withRawServer(
  handler: (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, request: number) => void,
  body: (baseUrl: string, requests: () => number) => Promise<void>,
): () => Promise<void> {
  return () =>
    withTimeout(async () => {
      let requests = 0
      const server = createServer((req, res) => handler(req, res, requests++))
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      try {
        await body(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, () => requests)
      } finally {
        server.closeAllConnections()
        await new Promise((resolve) => server.close(resolve))
      }
    }, TEST_MS)
}

const sse = (chunk: unknown) => `data: ${JSON.stringify(chunk)}\n\n`
const delta = (value: Record<string, unknown>, finish: string | null = null) => ({ choices: [{ index: 0, delta: value, finish_reason: finish }] })

test(
  'a redirect is not followed: the origin it names gets no request (nor the configured headers), and the attempt fails naming the status',
  () =>
    withTimeout(async () => {
      const elsewhere: Record<string, string | string[] | undefined>[] = []
      const other = createServer((req, res) => {
        elsewhere.push(req.headers)
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'hijacked' }, finish_reason: 'stop' }] }))
      })
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve))
      const target = `http://127.0.0.1:${(other.address() as AddressInfo).port}/v1/chat/completions`
      try {
        for (const status of [301, 302, 307, 308]) {
          await withRawServer(
            (_req, res) => {
              res.writeHead(status, { location: target })
              res.end()
            },
            async (baseUrl, requests) => {
              const client = new OpenAIChatClient(provider({ baseUrl }, { apiKey: 'sk-redirect-test-key', headers: { 'x-api-key': 'tenant-secret-value' } }))
              const r = interrupted(await client.complete(requestFor(bodyOf())))
              assert.is(r.status, 'failed', `${status}`)
              assert.match(r.message, new RegExp(`HTTP ${status}, moved to ${target}, which is not followed`))
              assert.is(requests(), 1)
            },
          )()
        }
        assert.equal(elsewhere, [], 'the other origin got nothing')
      } finally {
        other.closeAllConnections()
        await new Promise((resolve) => other.close(resolve))
      }
    }, TEST_MS),
)

test(
  'an SSE stream that ends cleanly with neither a finish_reason nor [DONE] is failed + malformed; one that reaches [DONE] without a finish_reason is whole, finished as a JSON answer is',
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      if (request === 0) res.end(sse(delta({ content: 'hi' })))
      else if (request === 1) res.end(sse(delta({ content: 'hi' })) + 'data: [DONE]\n\n')
      else res.end(sse(delta({ tool_calls: [{ index: 0, id: 'call-1', function: { name: 'echo', arguments: '{}' } }] })) + 'data: [DONE]\n\n')
    },
    async (baseUrl, requests) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const r = interrupted(await client.complete(requestFor(bodyOf())))
      assert.is(r.status, 'failed')
      assert.is(r.malformed, true)
      assert.match(r.message, /finish_reason/)
      assert.equal(await client.complete(requestFor(bodyOf())), { kind: 'completed', output: { text: 'hi', toolCalls: [], finishReason: 'stop' } })
      assert.equal(await client.complete(requestFor(bodyOf())), {
        kind: 'completed',
        output: { toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls' },
      })
      assert.is(requests(), 3)
    },
  ),
)

test(
  'a streamed answer is complete at [DONE]: a connection that then breaks, or never ends, does not discard it',
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse(delta({ content: 'complete answer' })) + sse(delta({}, 'stop')) + 'data: [DONE]\n\n')
      // The first breaks the connection without ending the chunked body; the second never ends it.
      if (request === 0) setTimeout(() => res.socket?.destroy(), 30)
    },
    async (baseUrl, requests) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      for (const what of ['broken after [DONE]', 'never ended after [DONE]']) {
        const response = await client.complete(requestFor(bodyOf(), { timeoutMs: 2_000 }))
        assert.equal(response, { kind: 'completed', output: { text: 'complete answer', toolCalls: [], finishReason: 'stop' } }, what)
      }
      assert.is(requests(), 2)
    },
  ),
)

test(
  'a stream that breaks after its finish_reason (before [DONE]) keeps the answer; one that breaks before it is retryable',
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse(delta({ content: 'whole' })) + (request === 0 ? sse(delta({}, 'stop')) : ''))
      setTimeout(() => res.socket?.destroy(), 30)
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      assert.equal(await client.complete(requestFor(bodyOf())), { kind: 'completed', output: { text: 'whole', toolCalls: [], finishReason: 'stop' } })
      assert.is(interrupted(await client.complete(requestFor(bodyOf()))).status, 'retryable_failure')
    },
  ),
)

test(
  'a refusal is recorded as the answer text, plain or streamed; token counts of the wrong type are dropped, not the answer',
  withRawServer(
    (_req, res, request) => {
      if (request === 0) {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ choices: [{ message: { content: null, refusal: 'I cannot help with that' }, finish_reason: 'stop' }], usage: { prompt_tokens: '12', completion_tokens: 3 } }))
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(sse(delta({ refusal: 'I cannot ' })) + sse(delta({ refusal: 'help' }, 'stop')) + sse({ choices: [], usage: 0 }) + 'data: [DONE]\n\n')
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      assert.equal(await client.complete(requestFor(bodyOf())), {
        kind: 'completed',
        output: { text: 'I cannot help with that', toolCalls: [], finishReason: 'stop', usage: { outputTokens: 3 } },
      })
      assert.equal(await client.complete(requestFor(bodyOf())), { kind: 'completed', output: { text: 'I cannot help', toolCalls: [], finishReason: 'stop' } })
    },
  ),
)

test(
  'streamed tool calls: a name repeated in every delta is the name, and a new id at an index in use is another call',
  withRawServer(
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const call = (id: string | undefined, name: string | undefined, args: string) => ({ index: 0, ...(id ? { id } : {}), function: { ...(name ? { name } : {}), arguments: args } })
      res.end(
        sse(delta({ tool_calls: [call('c1', 'echo', '{"v":')] })) +
          sse(delta({ tool_calls: [call(undefined, 'echo', '"a"}')] })) +
          sse(delta({ tool_calls: [call('c2', 'echo', '{"v":"b"}')] })) +
          sse(delta({}, 'tool_calls')) +
          'data: [DONE]\n\n',
      )
    },
    async (baseUrl) => {
      const response = await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf()))
      assert.equal(response, {
        kind: 'completed',
        output: {
          toolCalls: [
            { callId: 'c1', name: 'echo', arguments: '{"v":"a"}' },
            { callId: 'c2', name: 'echo', arguments: '{"v":"b"}' },
          ],
          finishReason: 'tool_calls',
        },
      })
    },
  ),
)

test(
  'an error inside a started stream: retryable when it says overload or a 5xx/429 code, failed otherwise; an `event: error` is one too',
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const events = [
        sse({ error: { message: 'overloaded', code: 502 } }),
        sse({ error: { message: 'Overloaded', type: 'overloaded_error' } }),
        sse({ error: { message: 'bad tool schema', type: 'invalid_request_error' } }),
        `event: error\ndata: ${JSON.stringify({ message: 'upstream went away', status: 503 })}\n\n`,
      ]
      res.end(sse(delta({ content: 'partial' })) + events[request])
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const outcomes: [string, string][] = []
      for (let n = 0; n < 4; n += 1) {
        const r = interrupted(await client.complete(requestFor(bodyOf())))
        outcomes.push([r.status, r.message])
      }
      assert.equal(
        outcomes.map(([status]) => status),
        ['retryable_failure', 'retryable_failure', 'failed', 'retryable_failure'],
      )
      assert.match(outcomes[2]?.[1] ?? '', /bad tool schema/)
      assert.match(outcomes[3]?.[1] ?? '', /upstream went away/)
    },
  ),
)

test(
  "an error in a started stream that names no kind is retryable_failure: an `event: error` whose data is not JSON (a proxy's words, or none), `{ message }` alone, an `error` that is a string; one naming a request error (its type, a 4xx code) still fails, and a data event that is not JSON is still malformed",
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const events = [
        'event: error\ndata: upstream connect error or disconnect/reset before headers. reset reason: connection termination\n\n',
        'event: error\ndata:\n\n',
        `event: error\ndata: ${JSON.stringify({ message: 'upstream went away' })}\n\n`,
        sse({ error: 'the model runner stopped' }),
        sse({ error: { message: 'no route to a model', type: null, code: null } }),
        sse({ error: { message: 'bad tool schema', type: 'invalid_request_error' } }),
        `event: error\ndata: ${JSON.stringify({ error: { message: 'prompt too long', code: 400 } })}\n\n`,
        'data: upstream connect error\n\n',
        'event: error\ndata: the proxy refused key sk-proxy-test-0123456789abcdef\n\n',
      ]
      res.end(sse(delta({ content: 'partial' })) + events[request])
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }, { apiKey: 'sk-proxy-test-0123456789abcdef' }))
      const outcomes: [string, string, boolean][] = []
      for (let n = 0; n < 9; n += 1) {
        const r = interrupted(await client.complete(requestFor(bodyOf({ stream: true }))))
        outcomes.push([r.status, r.message, r.malformed ?? false])
      }
      assert.equal(outcomes, [
        ['retryable_failure', 'the provider reported an error in its stream that could not be read: upstream connect error or disconnect/reset before headers. reset reason: connection termination', false],
        ['retryable_failure', 'the provider reported an error in its stream that could not be read: (no data)', false],
        ['retryable_failure', 'the provider reported an error in its stream: upstream went away', false],
        ['retryable_failure', 'the provider reported an error in its stream: the model runner stopped', false],
        ['retryable_failure', 'the provider reported an error in its stream: no route to a model', false],
        ['failed', 'the provider reported an error in its stream: bad tool schema', false],
        ['failed', 'the provider reported an error in its stream: prompt too long', false],
        ['failed', 'the provider streamed an event that is not JSON (the stream was cut mid-event?)', true],
        ['retryable_failure', 'the provider reported an error in its stream that could not be read: the proxy refused key [redacted]', false],
      ])
    },
  ),
)

test(
  'an error in a 200 JSON answer that names no kind is retryable_failure too; one naming a request error fails',
  withRawServer(
    (_req, res, request) => {
      const bodies = [{ error: { message: 'generation failed upstream' } }, { error: { message: 'invalid model', code: 400 } }]
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(bodies[request]))
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const outcomes: [string, string][] = []
      for (let n = 0; n < 2; n += 1) {
        const r = interrupted(await client.complete(requestFor(bodyOf())))
        outcomes.push([r.status, r.message])
      }
      assert.equal(outcomes, [
        ['retryable_failure', 'the provider reported an error in its answer: generation failed upstream'],
        ['failed', 'the provider reported an error in its answer: invalid model'],
      ])
    },
  ),
)

test(
  "a provider's reason is kept when its error body is not OpenAI's shape ({ message }, { detail }, plain text), and an error in a 200 answer is one",
  withRawServer(
    (_req, res, request) => {
      const answers: [number, string][] = [
        [400, JSON.stringify({ object: 'error', message: "This model's maximum context length is 4096 tokens", type: 'BadRequestError', code: 400 })],
        [422, JSON.stringify({ detail: [{ loc: ['body', 'messages'], msg: 'field required' }] })],
        [400, 'plain words of refusal'],
        [200, JSON.stringify({ error: { message: 'Rate limit reached', type: 'rate_limit_exceeded' } })],
      ]
      const [status, text] = answers[request] ?? [500, '']
      res.writeHead(status, { 'content-type': text.startsWith('{') ? 'application/json' : 'text/plain' })
      res.end(text)
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const results: [string, string][] = []
      for (let n = 0; n < 4; n += 1) {
        const r = interrupted(await client.complete(requestFor(bodyOf())))
        results.push([r.status, r.message])
      }
      assert.equal(results.map(([status]) => status), ['failed', 'failed', 'failed', 'retryable_failure'])
      assert.match(results[0]?.[1] ?? '', /HTTP 400: This model's maximum context length is 4096 tokens/)
      assert.match(results[1]?.[1] ?? '', /HTTP 422: .*field required/)
      assert.match(results[2]?.[1] ?? '', /HTTP 400: plain words of refusal/)
      assert.match(results[3]?.[1] ?? '', /Rate limit reached/)
    },
  ),
)

test(
  'a reset connection is a retryable failure, before the answer and mid-stream, also after some text',
  withServer([answer.reset(), answer.reset({ stream: true }), answer.reset({ stream: true, text: 'half an ans' })], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const a = interrupted(await client.complete(requestFor(bodyOf())))
    const b = interrupted(await client.complete(requestFor(bodyOf())))
    const streamed: string[] = []
    const c = interrupted(await client.complete({ ...requestFor(bodyOf()), onText: (text) => streamed.push(text) }))
    assert.is(a.status, 'retryable_failure')
    assert.not.ok(a.malformed)
    assert.is(b.status, 'retryable_failure')
    assert.not.ok(b.malformed)
    assert.is(c.status, 'retryable_failure')
    assert.not.ok(c.malformed)
    assert.is(streamed.join(''), 'half an ans', 'the text came before the connection went')
  }),
)

for (const stream of [undefined, false, true]) {
  test(
    `answer.reset({ text }) sends its text in a stream whatever the request asks (a server ${stream === undefined ? 'without a stream option' : `with stream: ${stream}`}), then resets: retryable, the text passed on; one written out with stream: false, chosen by a function, is answered 400 invalid_scripted_answer`,
    withServer(
      // A function, since an array with that last answer is refused when the server starts (scriptedModelServer's check).
      (_request, index) => [answer.reset({ text: 'half an ans' }), answer.reset({ text: 'half an ans' }), answer.reset({ text: '' }), { kind: 'reset', stream: false, text: 'x' } as const][index] ?? answer.hang(),
      async (server) => {
        const client = new OpenAIChatClient(provider(server))
        const attempt = async (body: ChatRequestBody) => {
          const streamed: string[] = []
          const response = interrupted(await client.complete({ ...requestFor(body), onText: (text) => streamed.push(text) }))
          return { status: response.status, malformed: response.malformed ?? false, text: streamed.join('') }
        }
        const cut = { status: 'retryable_failure', malformed: false, text: 'half an ans' }
        assert.equal(await attempt(bodyOf()), cut, 'a request that did not ask for a stream')
        assert.equal(await attempt(bodyOf({ stream: true })), cut, 'a request that asked for one')
        assert.equal(await attempt(bodyOf()), { ...cut, text: '' }, 'empty text: a stream cut after its first chunk')
        const refused = interrupted(await client.complete(requestFor(bodyOf())))
        assert.is(refused.status, 'failed', 'not retried')
        assert.is(refused.provider?.status, 400)
        assert.is(refused.provider?.code, 'invalid_scripted_answer')
        assert.match(refused.message, 'script(request, 3).text: a reset answer\'s text is sent only in a stream, and stream is false')
      },
      stream === undefined ? {} : { stream },
    ),
  )
}

test('connection refused is a retryable failure', () =>
  withTimeout(async () => {
    const server = await scriptedModelServer([])
    const baseUrl = server.baseUrl
    await server.close()
    const r = interrupted(await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf())))
    assert.is(r.status, 'retryable_failure')
    assert.match(r.message, /ECONNREFUSED/)
  }, TEST_MS))

test(
  'a hanging provider with timeoutMs 200 is timed_out, promptly',
  withServer([answer.hang()], async (server) => {
    const started = Date.now()
    const r = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf(), { timeoutMs: 200 })))
    const elapsed = Date.now() - started
    assert.is(r.status, 'timed_out')
    assert.ok(elapsed >= 150 && elapsed < 2_000, `took ${elapsed}ms`)
    assert.is(server.requests.length, 1)
  }),
)

test('the deadline also covers a stream that stalls after its headers', () =>
  withTimeout(async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] })}\n\n`)
      // ...and nothing more.
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
      const started = Date.now()
      const r = interrupted(await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf(), { timeoutMs: 250 })))
      assert.is(r.status, 'timed_out')
      assert.ok(Date.now() - started < 2_000)
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  }, TEST_MS))

test(
  'idleTimeoutMs: a stream that stalls after its first text is timed_out as stalled, long before timeoutMs',
  withServer([answer.stall({ text: 'hal' })], async (server) => {
    const r = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf({ stream: true }), { timeoutMs: 4_000, idleTimeoutMs: 200 })))
    assert.is(r.status, 'timed_out')
    assert.is(r.message, 'the answer stalled: nothing arrived for 200ms (idleTimeoutMs)')
  }),
)

test(
  'idleTimeoutMs: a provider that sends no headers is timed_out as not answering',
  withServer([answer.hang()], async (server) => {
    const r = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf(), { timeoutMs: 4_000, idleTimeoutMs: 200 })))
    assert.is(r.status, 'timed_out')
    assert.is(r.message, 'the provider did not start answering within 200ms (idleTimeoutMs)')
  }),
)

test(
  'idleTimeoutMs: a JSON answer whose body stops half-way is timed_out as stalled',
  withRawServer(
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"choices":[{"message":')
    },
    async (baseUrl) => {
      const r = interrupted(await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf(), { timeoutMs: 4_000, idleTimeoutMs: 200 })))
      assert.is(r.status, 'timed_out')
      assert.match(r.message, /stalled/)
    },
  ),
)

test(
  'idleTimeoutMs: an error answer whose body stalls after its headers is that error, retried as its status says, not "did not start answering"',
  withRawServer(
    (req, res) => {
      const status = req.headers['x-test-status'] === '400' ? 400 : 503
      res.writeHead(status, { 'content-type': 'application/json' })
      res.write('{"error":{"message":"over')
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const busy = interrupted(await client.complete(requestFor(bodyOf(), { timeoutMs: 4_000, idleTimeoutMs: 200 })))
      assert.equal([busy.status, busy.message], ['retryable_failure', 'the provider answered HTTP 503 and then sent nothing for 200ms (idleTimeoutMs)'])
      const refused = new OpenAIChatClient(provider({ baseUrl }, { headers: { 'x-test-status': '400' } }))
      const bad = interrupted(await refused.complete(requestFor(bodyOf(), { timeoutMs: 4_000, idleTimeoutMs: 200 })))
      assert.equal([bad.status, bad.message], ['failed', 'the provider answered HTTP 400 and then sent nothing for 200ms (idleTimeoutMs)'])
    },
  ),
)

test(
  'idleTimeoutMs: an error body that trickles in, each piece within the limit, is read whole and its reason kept',
  withRawServer(
    (_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' })
      const pieces = ['{"mess', 'age":"the ', 'GPU is ', 'on fire"}']
      const next = () => {
        const piece = pieces.shift()
        if (piece === undefined) res.end()
        else {
          res.write(piece)
          setTimeout(next, 120)
        }
      }
      next()
    },
    async (baseUrl) => {
      const r = interrupted(await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf(), { timeoutMs: 4_000, idleTimeoutMs: 250 })))
      assert.equal([r.status, r.message], ['retryable_failure', 'the provider answered HTTP 500: the GPU is on fire'])
    },
  ),
)

test(
  'two attempts with the same body at once each get their own error reason',
  (() => {
    const held: [number, import('node:http').ServerResponse][] = []
    return withRawServer(
      (_req, res, request) => {
        // Both get their headers once both arrived, and their bodies a moment later: a reason kept
        // by body text would be the same for both.
        held.push([request, res])
        if (held.length < 2) return
        for (const [which, answer] of held) {
          answer.writeHead(which === 0 ? 500 : 400, { 'content-type': 'application/json' })
          answer.flushHeaders()
          setTimeout(() => answer.end(JSON.stringify(which === 0 ? { message: 'first' } : { detail: 'second' })), 100)
        }
      },
      async (baseUrl, requests) => {
        const client = new OpenAIChatClient(provider({ baseUrl }))
        const first = client.complete(requestFor(bodyOf()))
        while (requests() < 1) await new Promise((resolve) => setTimeout(resolve, 5))
        const second = client.complete(requestFor(bodyOf()))
        const [a, b] = (await Promise.all([first, second])).map(interrupted)
        assert.equal([a?.status, a?.message], ['retryable_failure', 'the provider answered HTTP 500: first'])
        assert.equal([b?.status, b?.message], ['failed', 'the provider answered HTTP 400: second'])
      },
    )
  })(),
)

test(
  'idleTimeoutMs: a stream that stalls after naming its finish reason is whole, not timed out',
  withRawServer(
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'all here' }, finish_reason: null }] })}\n\n`)
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`)
      // ...and no [DONE]: the connection is kept open.
    },
    async (baseUrl) => {
      const response = await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf({ stream: true }), { timeoutMs: 4_000, idleTimeoutMs: 200 }))
      assert.equal(response, { kind: 'completed', output: { text: 'all here', toolCalls: [], finishReason: 'stop' } })
    },
  ),
)

test(
  'timeoutMs: a stream that runs out of time after naming its finish reason (no idleTimeoutMs) is whole, not timed out; one that had not named it is timed out',
  withRawServer(
    (_req, res, request) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'all here' }, finish_reason: null }] })}\n\n`)
      if (request === 0) res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`)
      // ...and no [DONE]: the connection is kept open.
    },
    async (baseUrl) => {
      const client = new OpenAIChatClient(provider({ baseUrl }))
      const whole = await client.complete(requestFor(bodyOf({ stream: true }), { timeoutMs: 300 }))
      assert.equal(whole, { kind: 'completed', output: { text: 'all here', toolCalls: [], finishReason: 'stop' } })
      const cut = interrupted(await client.complete(requestFor(bodyOf({ stream: true }), { timeoutMs: 300 })))
      assert.equal([cut.status, cut.message], ['timed_out', 'the request timed out after 300ms'])
    },
  ),
)

test(
  'idleTimeoutMs: a slow stream whose parts keep coming (keep-alive comments count) completes, however long it takes in all',
  withRawServer(
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      // 16 keep-alive comments while the model "thinks", then 8 pieces of text: 24 parts 30 ms apart,
      // over 700 ms in all against an idle limit of 400 ms (the thinking alone outlasts it).
      const parts = [
        ...Array.from({ length: 16 }, () => ': keep-alive\n\n'),
        ...Array.from({ length: 8 }, (_, i) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: `p${i} ` }, finish_reason: null }] })}\n\n`),
        `data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`,
      ]
      const next = () => {
        const part = parts.shift()
        if (part === undefined || res.destroyed) return void res.end()
        res.write(part)
        setTimeout(next, 30)
      }
      next()
    },
    async (baseUrl) => {
      const response = await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf({ stream: true }), { timeoutMs: 4_000, idleTimeoutMs: 400 }))
      assert.equal(response, { kind: 'completed', output: { text: 'p0 p1 p2 p3 p4 p5 p6 p7 ', toolCalls: [], finishReason: 'stop' } })
    },
  ),
)

test(
  "the caller's signal aborting an in-flight request is cancelled",
  withServer([answer.hang(), answer.text('held', { hold: true, stream: true })], async (server) => {
    const client = new OpenAIChatClient(provider(server))
    const first = new AbortController()
    const pending = client.complete(requestFor(bodyOf(), { signal: first.signal, timeoutMs: 4_000 }))
    await server.seen(0)
    first.abort()
    const a = interrupted(await pending)
    assert.is(a.status, 'cancelled')

    const second = new AbortController()
    const pending2 = client.complete(requestFor(bodyOf(), { signal: second.signal, timeoutMs: 4_000 }))
    await server.seen(1)
    second.abort()
    server.release(1)
    const b = interrupted(await pending2)
    assert.is(b.status, 'cancelled')
  }),
)

test(
  'an already-aborted signal is cancelled without sending anything',
  withServer([answer.text('never')], async (server) => {
    const controller = new AbortController()
    controller.abort()
    const r = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf(), { signal: controller.signal })))
    assert.is(r.status, 'cancelled')
    assert.is(server.requests.length, 0)
  }),
)

test(
  'a held answer goes out on release',
  withServer([answer.text('after release', { hold: true })], async (server) => {
    const pending = new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf()))
    await server.seen(0)
    let settled = false
    void pending.then(() => (settled = true))
    await new Promise((resolve) => setTimeout(resolve, 50))
    assert.is(settled, false)
    server.release(0)
    const r = await pending
    assert.is(r.kind === 'completed' ? r.output.text : r.message, 'after release')
  }),
)

test(
  'the API key is sent as Authorization and extra headers are merged, but no secret appears in any message',
  withServer(
    (request, index) => {
      const echo = `you sent ${String(request.headers['authorization'])} and ${String(request.headers['x-team-secret'])}`
      const answers: ScriptedAnswer[] = [
        answer.status(401, { body: { error: { message: echo } } }),
        answer.status(500, { body: echo }),
        answer.malformed({ body: echo }),
        answer.status(429, { retryAfter: 1, body: { error: { message: echo } } }),
        answer.reset(),
        answer.hang(),
      ]
      return answers[index] ?? answer.text('ok')
    },
    async (server) => {
      const client = new OpenAIChatClient(provider(server, { apiKey: 'sk-canary-123', headers: { 'x-team-secret': 'hdr-canary-456' } }))
      const messages: string[] = []
      for (let i = 0; i < 6; i++) {
        const r = interrupted(await client.complete(requestFor(bodyOf(), { timeoutMs: i === 5 ? 200 : 3_000 })))
        messages.push(r.message)
      }
      assert.equal(
        server.requests.map((r) => r.headers['authorization']),
        Array.from({ length: 6 }, () => 'Bearer sk-canary-123'),
      )
      assert.is(server.requests[0]?.headers['x-team-secret'], 'hdr-canary-456')
      // The provider echoed them back: the messages quote the provider but redact the secrets.
      assert.match(messages[0] ?? '', /you sent Bearer \[redacted\]/)
      for (const message of messages) {
        assert.not.match(message, /sk-canary-123/)
        assert.not.match(message, /hdr-canary-456/)
      }
    },
  ),
)

test(
  'a baseUrl on a port fetch refuses (the Fetch standard\u2019s bad ports) fails at once, not as a retryable failure',
  () =>
    withTimeout(async () => {
      const r = interrupted(await new OpenAIChatClient(provider({ baseUrl: 'http://127.0.0.1:1/v1' })).complete(requestFor(bodyOf())))
      assert.is(r.status, 'failed')
      assert.match(r.message, /bad port.*fetch refuses this port/)
    }, TEST_MS),
)

test(
  'without an apiKey no Authorization header is sent (one of the configured headers is); the script running out answers 400, not retried, and is recorded',
  withServer([answer.text('one'), answer.text('two')], async (server) => {
    const own = new OpenAIChatClient(provider(server, { headers: { Authorization: 'Token own-scheme-value' } }))
    assert.is((await own.complete(requestFor(bodyOf()))).kind, 'completed')
    assert.is(server.requests[0]?.headers['authorization'], 'Token own-scheme-value')
    const client = new OpenAIChatClient(provider(server))
    assert.is((await client.complete(requestFor(bodyOf()))).kind, 'completed')
    const r = interrupted(await client.complete(requestFor(bodyOf())))
    // A short script is the test's mistake, which no retry cures.
    assert.is(r.status, 'failed')
    assert.match(r.message, /^the provider answered HTTP 400: scripted model server: the script has 2 answers and this was request 3 \(index 2/)
    assert.equal(r.provider, { status: 400, code: 'unscripted_request', type: 'invalid_request_error' })
    assert.equal(server.unscripted, [2])
    assert.is(server.requests[1]?.headers['authorization'], undefined)
    assert.is(server.requests[2]?.headers['authorization'], undefined)
  }),
)


test('a 404 from a baseUrl without a path suggests /v1; from a baseUrl with one it does not', () =>
  withTimeout(async () => {
    const server = createServer((request, response) => {
      response.writeHead(404, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ error: { message: `no route POST ${request.url}` } }))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      const messages: string[] = []
      for (const baseUrl of [origin, `${origin}/`, `${origin}/v1`, `${origin}/openai/deployments/gpt`]) {
        const response = interrupted(await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf())))
        assert.is(response.status, 'failed', baseUrl)
        messages.push(response.message)
      }
      const hint = ` (requests go to ${origin}/chat/completions: most OpenAI-compatible servers serve them under /v1, so try the baseUrl ${origin}/v1)`
      assert.equal(messages, [
        `the provider answered HTTP 404: no route POST /chat/completions${hint}`,
        `the provider answered HTTP 404: no route POST /chat/completions${hint}`,
        'the provider answered HTTP 404: no route POST /v1/chat/completions',
        'the provider answered HTTP 404: no route POST /openai/deployments/gpt/chat/completions',
      ])
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  }, TEST_MS))

test(
  'of several choices (n > 1) the one at index 0 is the answer, in whatever order a plain JSON answer lists them',
  withServer(
    [
      answer.malformed({
        body: JSON.stringify({
          choices: [
            { index: 1, message: { role: 'assistant', content: 'I am choice 1' }, finish_reason: 'stop' },
            { index: 0, message: { role: 'assistant', content: 'I am choice 0' }, finish_reason: 'stop' },
          ],
        }),
      }),
    ],
    async (server) => {
      const response = await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf({ n: 2 })))
      assert.is(response.kind, 'completed', JSON.stringify(response))
      assert.is(response.kind === 'completed' && response.output.text, 'I am choice 0')
    },
  ),
)

test("the answer builders refuse an option they do not take, or one of the wrong type, as the server's own options are refused", () => {
  const refusals: [string, () => unknown, string][] = [
    ['answer.status(429, { retryAfterSeconds: 2 })', () => answer.status(429, { retryAfterSeconds: 2 } as never), 'retryAfterSeconds'],
    ['answer.status(429, { retryAfter: "2" })', () => answer.status(429, { retryAfter: '2' } as never), 'retryAfter'],
    ['answer.status(503, { retryAfterMs: -1 })', () => answer.status(503, { retryAfterMs: -1 }), 'retryAfterMs'],
    ['answer.text("x", { hodl: true })', () => answer.text('x', { hodl: true } as never), 'hodl'],
    ['answer.text("x", { kind: "hang" })', () => answer.text('x', { kind: 'hang' } as never), 'kind'],
    ['answer.text("x", { hold: "yes" })', () => answer.text('x', { hold: 'yes' } as never), 'hold'],
    ['answer.toolCalls([], { streem: true })', () => answer.toolCalls([], { streem: true } as never), 'streem'],
    ['answer.toolCalls([], { stream: 1 })', () => answer.toolCalls([], { stream: 1 } as never), 'stream'],
    ['answer.malformed({ text: "x" })', () => answer.malformed({ text: 'x' } as never), 'text'],
    ['answer.cutStream({ body: "x" })', () => answer.cutStream({ body: 'x' } as never), 'body'],
    ['answer.stall({ stream: true })', () => answer.stall({ stream: true } as never), 'stream'],
    ['answer.reset({ retryAfter: 1 })', () => answer.reset({ retryAfter: 1 } as never), 'retryAfter'],
    ['answer.reset({ stream: false, text: "x" })', () => answer.reset({ stream: false, text: 'x' }), 'text'],
    ['answer.reset({ stream: true, text: 1 })', () => answer.reset({ stream: true, text: 1 } as never), 'text'],
    ['answer.hang({ hold: true })', () => answer.hang({ hold: true } as never), 'hold'],
    ['answer.text("x", null)', () => answer.text('x', null as never), 'options'],
    // Their arguments too, as a script's answers are checked.
    ['answer.text(7)', () => answer.text(7 as never), 'text'],
    ['answer.toolCalls([{ name: "x", args: {} }])', () => answer.toolCalls([{ name: 'x', args: {} } as never]), 'calls[0].args'],
    ['answer.toolCalls([{ arguments: {} }])', () => answer.toolCalls([{ arguments: {} } as never]), 'calls[0].name'],
    ['answer.toolCalls({ name: "x" })', () => answer.toolCalls({ name: 'x', arguments: {} } as never), 'calls'],
    ['answer.status(42)', () => answer.status(42), 'status'],
    ['answer.text("x", { usage: { prompt_tokens: 1, completion_tokens: 2, prompt_tokens_detail: {} } })', () => answer.text('x', { usage: { prompt_tokens: 1, completion_tokens: 2, prompt_tokens_detail: {} } as never }), 'usage.prompt_tokens_detail'],
  ]
  for (const [what, build, field] of refusals) {
    let refused: { code?: string; details?: { field?: string }; message?: string } | undefined
    try {
      build()
    } catch (error) {
      refused = error as typeof refused
    }
    assert.equal([refused?.code, refused?.details?.field], ['TESTING_INVALID_OPTIONS', field], `${what}: ${refused?.message ?? 'accepted'}`)
  }
  // A status is what Node's server can send, said apart from what a fact records of a provider's.
  assert.throws(() => answer.status(42), (error: Error) => error.message.includes("a whole number from 100 to 999, what Node's server sends; a fact records a provider's status from 100 to 599"))
  // What they take is kept, and an option given as undefined is none.
  assert.equal(answer.status(429, { retryAfter: 2, hold: undefined }), { kind: 'status', status: 429, retryAfter: 2 })
  assert.equal(answer.text('x', { hold: true, stream: false, finishReason: 'length' }), { kind: 'text', text: 'x', hold: true, stream: false, finishReason: 'length' })
  assert.equal(answer.hang(), { kind: 'hang' })
})

/** The refusal `run` rejects with, as `[code, details.field]`, or `['accepted']`. */
async function refusalOf(run: () => Promise<unknown>): Promise<unknown[]> {
  try {
    await run()
    return ['accepted']
  } catch (error) {
    const refused = error as { code?: string; details?: { field?: string }; message?: string }
    return [refused.code, refused.details?.field]
  }
}

test("an array script (as `factstate script` writes one, JSON) is checked when the server starts: an answer it could not serve is refused naming it, as the builders refuse one", () =>
  withTimeout(async () => {
    // Each served, the client would be answered 500 and retry, and the retry get the next answer: the script shifted.
    const refusals: [string, string, string][] = [
      ['[{ "kind": "toolcalls", "calls": [{ "name": "refund", "arguments": {} }] }, { "kind": "text", "text": "Refunded." }]', 'script[0].kind', 'did you mean toolCalls?'],
      ['[{ "kind": "txt", "text": "hi" }]', 'script[0].kind', 'did you mean text?'],
      ['[{ "text": "hi" }]', 'script[0].kind', 'is missing'],
      ['[{ "kind": "text" }]', 'script[0].text', 'is missing'],
      ['[{ "kind": "text", "text": 7 }]', 'script[0].text', 'must be a string'],
      ['[{ "kind": "text", "text": "a", "finish_reason": "length" }]', 'script[0].finish_reason', 'did you mean finishReason?'],
      ['[{ "kind": "text", "text": "a", "hold": "yes" }]', 'script[0].hold', 'must be true or false'],
      ['[{ "kind": "text", "text": "a", "usage": { "prompt_tokens": 1 } }]', 'script[0].usage.completion_tokens', 'is missing'],
      ['[{ "kind": "text", "text": "ok" }, { "kind": "toolCalls", "calls": [{ "name": "x", "args": {} }] }]', 'script[1].calls[0].args', 'did you mean arguments?'],
      ['[{ "kind": "toolCalls", "calls": [{ "name": "x" }] }]', 'script[0].calls[0].arguments', 'is missing'],
      ['[{ "kind": "toolCalls", "tool_calls": [] }]', 'script[0].tool_calls', 'did you mean calls?'],
      ['[{ "kind": "status" }]', 'script[0].status', 'is missing'],
      ['[{ "kind": "status", "status": "503" }]', 'script[0].status', 'must be an HTTP status'],
      ['[{ "kind": "malformed" }]', 'script[0].body', 'is missing'],
      ['[{ "kind": "reset", "stream": false, "text": "x" }]', 'script[0].text', 'only in a stream'],
      ['[{ "kind": "hang", "hold": true }]', 'script[0].hold', 'has no member "hold"'],
      ['[null]', 'script[0]', 'must be an answer'],
      ['[{ "kind": "text", "text": "ok" }, "done"]', 'script[1]', 'must be an answer'],
    ]
    for (const [text, field, words] of refusals) {
      let message = ''
      const refused = await refusalOf(() =>
        scriptedModelServer(JSON.parse(text) as ScriptedAnswer[]).catch((error: unknown) => {
          message = (error as Error).message
          throw error
        }),
      )
      assert.equal(refused, ['TESTING_INVALID_OPTIONS', field], text)
      assert.ok(message.includes(words), `${text}: ${message}`)
    }
    // A hole in an array (what a stray comma makes) is no answer either.
    assert.equal(await refusalOf(() => scriptedModelServer([answer.text('ok'), , answer.text('done')] as ScriptedAnswer[])), ['TESTING_INVALID_OPTIONS', 'script[1]'])

    // What the builders make, with every option they take, is served, and so is it read back from JSON.
    const everything: ScriptedAnswer[] = [
      answer.text('a', { hold: false, stream: true, pieces: 2, pieceDelayMs: 0, finishReason: 'length', reasoning: 'r', usage: { prompt_tokens: 1, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 1 }, completion_tokens_details: { reasoning_tokens: 1 } } }),
      answer.text('', { usage: null }),
      answer.toolCalls([{ name: 'x', arguments: { a: 1 }, id: 'call_x' }, { name: 'y', arguments: 'not json' }], { text: 't', hold: false, stream: false, pieces: 1, pieceDelayMs: 1, finishReason: 'stop', reasoning: 'r', usage: { prompt_tokens: 12.5, completion_tokens: -1 } }),
      answer.toolCalls([]),
      answer.status(429, { retryAfter: 2, retryAfterMs: 1500, body: { error: { message: 'slow down' } }, hold: false }),
      answer.status(500, { body: 'plain text' }),
      answer.malformed(),
      answer.malformed({ body: '{}', hold: false }),
      answer.cutStream({ text: 'par', hold: false }),
      answer.stall({ text: 'par', hold: false }),
      answer.reset(),
      answer.reset({ stream: true, text: 'half', hold: false }),
      answer.reset({ stream: false }),
      answer.hang(),
    ]
    for (const script of [everything, JSON.parse(JSON.stringify(everything)) as ScriptedAnswer[]]) {
      const server = await scriptedModelServer(script)
      await server.close()
    }
  }, TEST_MS),
)

test(
  'an answer the script cannot serve, chosen by a function (or put in an array since the server started), is answered 400 naming what is wrong, which is not retried',
  withServer(
    (_request, index) => (index === 0 ? ({ kind: 'txt', text: 'hi' } as never) : answer.text('the next answer')),
    async (server) => {
      const failed = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf())))
      assert.equal([failed.status, failed.provider?.status, failed.provider?.code], ['failed', 400, 'invalid_scripted_answer'])
      assert.match(failed.message ?? '', /the answer the script gave request 1 \(index 0\) cannot be served: script\(request, 0\)\.kind is "txt": did you mean text\?/)
      assert.is(server.requests.length, 1, 'not retried')

      const script: ScriptedAnswer[] = [answer.text('ok'), answer.text('ok')]
      const changing = await scriptedModelServer(script)
      try {
        script[1] = { kind: 'text' } as never
        const client = new OpenAIChatClient(provider(changing))
        assert.is((await client.complete(requestFor(bodyOf()))).kind, 'completed')
        const second = interrupted(await client.complete(requestFor(bodyOf())))
        assert.equal([second.status, second.provider?.code], ['failed', 'invalid_scripted_answer'])
        assert.match(second.message ?? '', /script\[1\]\.text is missing/)
      } finally {
        await changing.close()
      }
    },
  ),
)

test('arguments or a body JSON cannot encode (a BigInt, a cycle, a function) are refused as a script is checked, not served as a 500 that is retried into the next answer', () =>
  withTimeout(async () => {
    const cycle: Record<string, unknown> = {}
    cycle.self = cycle
    const refusals: [string, () => unknown, string][] = [
      ['answer.toolCalls([{ name: "x", arguments: { n: 1n } }])', () => answer.toolCalls([{ name: 'x', arguments: { n: 1n } }]), 'calls[0].arguments'],
      ['answer.toolCalls([{ name: "x", arguments: cycle }])', () => answer.toolCalls([{ name: 'x', arguments: cycle }]), 'calls[0].arguments'],
      ['answer.toolCalls([{ name: "x", arguments: () => 1 }])', () => answer.toolCalls([{ name: 'x', arguments: () => 1 }]), 'calls[0].arguments'],
      ['answer.status(500, { body: { n: 1n } })', () => answer.status(500, { body: { n: 1n } }), 'body'],
    ]
    for (const [what, build, field] of refusals) {
      let refused: { code?: string; details?: { field?: string } } | undefined
      try {
        build()
      } catch (error) {
        refused = error as typeof refused
      }
      assert.equal([refused?.code, refused?.details?.field], ['TESTING_INVALID_OPTIONS', field], what)
    }
    assert.equal(await refusalOf(() => scriptedModelServer([{ kind: 'toolCalls', calls: [{ name: 'x', arguments: { n: 1n } }] }])), ['TESTING_INVALID_OPTIONS', 'script[0].calls[0].arguments'])
    // null arguments are still sent as {}, as before.
    assert.equal(answer.toolCalls([{ name: 'x', arguments: null }]).kind, 'toolCalls')

    const server = await scriptedModelServer((_request, index) => (index === 0 ? { kind: 'toolCalls', calls: [{ name: 'refund', arguments: { cents: 10n } }] } : answer.text('Refunded.')))
    try {
      const failed = interrupted(await new OpenAIChatClient(provider(server)).complete(requestFor(bodyOf())))
      assert.equal([failed.status, failed.provider?.status, failed.provider?.code], ['failed', 400, 'invalid_scripted_answer'])
      assert.is(server.requests.length, 1, 'not retried into the next answer')
    } finally {
      await server.close()
    }
  }, TEST_MS),
)

test('a scripted server keeps no request but in `requests`: one emptied lets them go; seen(n) still answers for one that arrived', () =>
  withTimeout(async () => {
    const server = await scriptedModelServer(() => answer.text('ok'))
    try {
      const post = (n: number) =>
        fetch(`${server.baseUrl}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `${n} ${'x'.repeat(10_000)}` }] }) }).then((response) => response.json())
      for (let n = 0; n < 20; n += 1) await post(n)
      // In a function of its own, so that no frame of the test keeps what seen() resolved with.
      const seeing = async () => {
        assert.is((await server.seen(3)).index, 3, 'a request that arrived is seen at once')
        const waiting = server.seen(20)
        await post(20)
        assert.is((await waiting).index, 20, 'a request waited for is handed over as it arrives')
      }
      await seeing()
      const refs = server.requests.map((request) => new WeakRef(request))
      server.requests.length = 0
      assert.is(await aliveAfterCollection(refs), 0, 'no request is kept once requests is emptied')
    } finally {
      await server.close()
    }
  }, 10_000),
)

test('emptying a scripted server\'s requests keeps their count: a function script\'s index, an array script\'s position and unscripted go on; seen(n) of one let go is refused', () =>
  withTimeout(async () => {
    const post = (server: ScriptedModelServer) =>
      fetch(`${server.baseUrl}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }) }).then(
        async (response) => ({ status: response.status, body: (await response.json()) as { choices?: { message: { content: string } }[]; error?: { code?: string } } }),
      )
    const byIndex = await scriptedModelServer((_request, index) => answer.text(`answer ${index}`))
    const byArray = await scriptedModelServer([answer.text('first'), answer.text('second'), answer.text('third')])
    try {
      const texts: string[] = []
      for (let n = 0; n < 4; n += 1) {
        texts.push((await post(byIndex)).body.choices?.[0]?.message.content ?? '')
        if (n === 1) byIndex.requests.length = 0
      }
      assert.equal(texts, ['answer 0', 'answer 1', 'answer 2', 'answer 3'], 'the function is not given an index again')
      assert.equal(
        byIndex.requests.map((request) => request.index),
        [2, 3],
        'the requests kept are numbered as they arrived',
      )
      assert.is((await byIndex.seen(3)).index, 3)
      try {
        await byIndex.seen(0)
        assert.unreachable('seen(0) resolved for a request let go')
      } catch (error) {
        assert.is((error as { code?: string }).code, 'TESTING_INVALID_OPTIONS')
        assert.match((error as Error).message, 'no longer in server.requests')
      }

      const first = await post(byArray)
      byArray.requests.length = 0
      const [second, third, past] = [await post(byArray), await post(byArray), await post(byArray)]
      assert.equal(
        [first, second, third].map((reply) => reply.body.choices?.[0]?.message.content),
        ['first', 'second', 'third'],
        'the array is not served from its start again',
      )
      assert.equal([past.status, past.body.error?.code], [400, 'unscripted_request'])
      assert.equal(byArray.unscripted, [3], 'the request past the script keeps its number')
    } finally {
      await byIndex.close()
      await byArray.close()
    }
  }, TEST_MS),
)

test('a scripted server left open does not keep its process alive; a request in flight does, until it is answered', () =>
  withTimeout(async () => {
    const script = new URL('./support/unclosed-model-server.ts', import.meta.url).pathname
    const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    let killed = false
    const guard = setTimeout(() => {
      killed = true
      child.kill('SIGKILL')
    }, 25_000)
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)))
    try {
      const baseUrl = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          stdout += chunk.toString()
          if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string)
        })
        void exited.then(() => reject(new Error(`the child ended before it listened: ${stderr}`)))
      })
      // The answer goes out from a timer that does not hold the child: only the request in flight does.
      const response = await new OpenAIChatClient(provider({ baseUrl })).complete(requestFor(bodyOf()))
      assert.is(response.kind === 'completed' && response.output.text, 'answered while in flight', JSON.stringify(response))
      // Answered, with the server never closed and this process's connection to it kept alive, the child ends by itself.
      const code = await exited
      assert.not.ok(killed, `the child ended by itself; stderr: ${stderr}`)
      assert.is(code, 0, stderr)
    } finally {
      clearTimeout(guard)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    }
  }, 30_000))

test.run()
