/**
 * `anthropicClient` (`factstate/anthropic`) through the real `@anthropic-ai/sdk` client against a
 * fake of Anthropic's Messages API on 127.0.0.1 (spec/fixtures/anthropic-server.ts: JSON and SSE
 * answers, `request-id` headers, Anthropic's error bodies, and the API's checks of a request), driving
 * real engine runs over real LevelDB logs: what is recorded of a streamed tool run (facts, usage,
 * ids, live pieces), how each failure is classified (429 with retry-after, 529, overloaded inside a
 * stream, 400, 401, a cancel, a stall, answers that cannot be read, max_tokens, a refusal), that
 * extended thinking works with tools (the signed thinking and redacted_thinking blocks recorded as
 * reasoningDetails and sent back as the fake, like the API, requires), that the API key the SDK holds
 * reaches no file of the log, and that the SDK sends one HTTP request per attempt.
 */
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type ModelExecutorOptions, type ModelRequest, type ModelTextPiece, type ModelToolCallPiece, type RunInput, type ToolDefinition, answerOf, usageOf } from '../index.js'
import { RAW_ARGUMENTS_KEY, anthropicClient, toMessagesRequest, type AnthropicClientOptions } from '../anthropic/index.js'
import { fakeAnthropic, type FakeAnthropic, type Step } from './fixtures/anthropic-server.js'
import { rejectsWithCode } from './support/codes.js'
import { factsOf, only } from './support/engine-fixtures.js'
import { everyFile } from './support/faults-files.js'
import { withTempDir, withTimeout } from './support/temp.js'

const KEY = 'sk-ant-api03-specKEYspecKEYspecKEY0123456789abcdef'

interface World {
  fake: FakeAnthropic
  log: EventLog
  engine: Engine
  sdk: Anthropic
  dir: string
}

/** A fake server with `script`, a fresh log and an engine whose model client is anthropicClient over a real SDK client; all closed after `body`. */
function world(
  script: Step[],
  body: (w: World) => Promise<void>,
  setup: { executor?: Omit<ModelExecutorOptions, 'createClient'>; key?: string; sdkRetries?: number; client?: AnthropicClientOptions; withProvider?: boolean } = {},
): () => Promise<void> {
  return () =>
    withTimeout(
      withTempDir(async (dir) => {
        const fake = await fakeAnthropic({ apiKey: KEY, script })
        const log = await EventLog.open(join(dir, 'log'))
        const sdk = new Anthropic({ apiKey: setup.key ?? KEY, baseURL: fake.baseURL, logLevel: 'off', ...(setup.sdkRetries === undefined ? {} : { maxRetries: setup.sdkRetries }) })
        const model = new ModelExecutor({ backoffMs: 10, maxBackoffMs: 50, ...setup.executor, createClient: (provider) => anthropicClient(sdk, setup.withProvider ? { ...setup.client, provider } : setup.client) })
        const engine = new Engine({ log, model })
        try {
          await body({ fake, log, engine, sdk, dir })
        } finally {
          await engine.drain().catch(() => undefined)
          await log.close().catch(() => undefined)
          await fake.close()
        }
      }),
      20_000,
    )
}

let counter = 0
function input(w: World, over: Partial<RunInput> = {}): RunInput {
  const id = `a${++counter}`
  return {
    invocation: { sessionId: `session-${id}`, turnId: `turn-${id}`, runId: `run-${id}`, invocationId: `invocation-${id}` },
    provider: { kind: 'openai-chat', baseUrl: w.fake.baseURL, model: 'claude-sonnet-4-5' },
    configuration: { cwd: '/workspace' },
    instructions: 'You are a weather assistant.',
    mainOutputLimit: 1000,
    tools: [],
    work: { kind: 'message', content: 'What is the weather in Paris?' },
    ...over,
  }
}

function weatherTool(calls: unknown[]): ToolDefinition {
  return {
    name: 'get_weather',
    description: 'The weather in a city',
    inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
    execute: async (args) => {
      calls.push(args)
      return { sky: 'sunny' }
    },
  }
}

/** A request as the engine gives one, for calling the client directly. */
function directRequest(signal: AbortSignal, over: Partial<ModelRequest> = {}): ModelRequest {
  const body = { model: 'claude-sonnet-4-5', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 100, stream: true }
  return { body, bodyText: JSON.stringify(body), signal, timeoutMs: 10_000, ...over }
}

type Blocks = { role: string; content: Record<string, unknown>[] }[]

test(
  'a streamed run with a tool: the calls run, text and call pieces stream, usage and ids are recorded, the request is a Messages request',
  world(
    [
      { kind: 'tools', text: 'Let me check.', calls: [{ name: 'get_weather', input: { city: 'Paris' } }] },
      { kind: 'text', text: 'It is sunny in Paris today.', chunks: 4 },
    ],
    async (w) => {
      const calls: unknown[] = []
      const text: ModelTextPiece[] = []
      const pieces: ModelToolCallPiece[] = []
      const run = input(w, { tools: [weatherTool(calls)], providerOptions: { stream: true, temperature: 0 } })
      const running = await w.engine.start(run, { onModelText: (piece) => void text.push(piece), onToolCallText: (piece) => void pieces.push(piece) })
      assert.equal(await running.wait(), { status: 'completed' })
      assert.equal(calls, [{ city: 'Paris' }])
      const events = await w.log.invocationEvents(run.invocation.invocationId)
      assert.is(answerOf(events), 'It is sunny in Paris today.')
      const facts = await factsOf(w.log, run.invocation.invocationId)
      const completed = only(facts, 'model.completed').map((fact) => fact.output)
      assert.is(completed.length, 2)
      const [first, second] = completed
      assert.is(first?.finishReason, 'tool_calls')
      assert.is(first?.text, 'Let me check.')
      assert.is(first?.toolCalls[0]?.name, 'get_weather')
      assert.equal(JSON.parse(first?.toolCalls[0]?.arguments ?? ''), { city: 'Paris' })
      assert.is(second?.finishReason, 'stop')
      // Ids: the message's id, and the request-id header the server answered each request with.
      assert.match(first?.responseId ?? '', /^msg_/)
      assert.is(first?.requestId, w.fake.received[0]?.requestId)
      assert.is(second?.requestId, w.fake.received[1]?.requestId)
      // Usage: input tokens count the cache reads (100, as the fake reports them) with the fresh ones.
      const fresh = JSON.stringify(w.fake.received[1]?.body.messages).length >> 2
      assert.equal(second?.usage, { inputTokens: fresh + 100, cachedInputTokens: 100, outputTokens: 8 })
      const totals = usageOf(events)
      assert.is(totals.answers, 2)
      assert.is(totals.unreported, 0)
      // Live pieces: the second answer's text in more than one piece, the call's arguments as streamed.
      const step2 = text.filter((piece) => piece.stepId === 'step-2')
      assert.ok(step2.length >= 2, `streamed in ${step2.length} pieces`)
      assert.is(step2.map((piece) => piece.text).join(''), 'It is sunny in Paris today.')
      assert.is(pieces[0]?.name, 'get_weather')
      assert.is(pieces.map((piece) => piece.arguments).join(''), first?.toolCalls[0]?.arguments)
      // One HTTP request per answer; the second as the API takes it.
      assert.is(w.fake.received.length, 2)
      const sent = w.fake.received[1]
      assert.is(sent?.headers.authorization, `Bearer ${KEY}`)
      assert.is(sent?.headers['x-stainless-retry-count'], '0')
      assert.is(sent?.body.system, 'You are a weather assistant.')
      assert.is(sent?.body.max_tokens, 1000)
      assert.is(sent?.body.temperature, 0)
      assert.is(sent?.body.stream, true)
      const messages = sent?.body.messages as Blocks
      assert.equal(
        messages.map((m) => [m.role, m.content.map((b) => b.type).join(',')]),
        [
          ['user', 'text'],
          ['assistant', 'text,tool_use'],
          ['user', 'tool_result'],
        ],
      )
      assert.is(messages[2]?.content[0]?.tool_use_id, first?.toolCalls[0]?.callId)
      assert.equal((sent?.body.tools as unknown[])[0], { name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } })
    },
  ),
)

test(
  'a plain JSON run: two calls answered in one user turn (tool_result blocks first), a failed tool told as its result',
  world(
    [{ kind: 'tools', calls: [{ name: 'get_weather', input: { city: 'Oslo' } }, { name: 'broken', input: {} }] }, { kind: 'text', text: 'Oslo is sunny.' }],
    async (w) => {
      const broken: ToolDefinition = {
        name: 'broken',
        execute: async () => {
          throw new Error('the broken tool broke')
        },
      }
      assert.equal(await w.engine.run(input(w, { tools: [weatherTool([]), broken] })), { status: 'completed' })
      const messages = w.fake.received[1]?.body.messages as Blocks
      assert.equal(messages.map((m) => m.role), ['user', 'assistant', 'user'])
      assert.equal(messages[2]?.content.map((b) => b.type), ['tool_result', 'tool_result'])
      assert.match(String(messages[2]?.content[1]?.content), /broke/)
      assert.is(w.fake.received[1]?.body.stream, undefined)
    },
  ),
)

test(
  "429 (with retry-after), 529 and an overloaded_error inside a stream are retryable_failure facts with the provider's words, then the answer",
  world(
    [
      { kind: 'error', status: 429, type: 'rate_limit_error', message: 'Number of request tokens has exceeded your per-minute rate limit', retryAfter: '0' },
      { kind: 'error', status: 529, type: 'overloaded_error', message: 'Overloaded' },
      { kind: 'stream-error', type: 'overloaded_error', message: 'Overloaded' },
      { kind: 'text', text: 'Sunny.' },
    ],
    async (w) => {
      const run = input(w, { providerOptions: { stream: true } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      const interrupted = only(await factsOf(w.log, run.invocation.invocationId), 'model.interrupted')
      assert.equal(
        interrupted.map((fact) => fact.status),
        ['retryable_failure', 'retryable_failure', 'retryable_failure'],
      )
      assert.equal(interrupted[0]?.provider, { status: 429, type: 'rate_limit_error', requestId: w.fake.received[0]?.requestId })
      assert.match(interrupted[0]?.message ?? '', /^the provider answered HTTP 429: Number of request tokens/)
      assert.equal(interrupted[1]?.provider, { status: 529, type: 'overloaded_error', requestId: w.fake.received[1]?.requestId })
      // Inside a stream begun as HTTP 200: no status, the error's type.
      assert.equal(interrupted[2]?.provider, { type: 'overloaded_error', requestId: w.fake.received[2]?.requestId })
      assert.is(interrupted[2]?.message, 'the provider reported an error in the stream: overloaded_error: Overloaded')
      // One HTTP request per attempt, each the same bytes.
      assert.is(w.fake.received.length, 4)
      assert.is(new Set(w.fake.received.map((r) => JSON.stringify(r.body))).size, 1)
    },
  ),
)

test(
  "an error event the client cannot read (data that is not JSON, a proxy's words) or whose type says a server error is retryable_failure, then the answer; one of a request's type still fails",
  world(
    [
      { kind: 'stream-error-text', data: 'upstream connect error or disconnect/reset before headers. reset reason: overflow' },
      { kind: 'stream-error', type: 'internal_server_error', message: 'Internal server error' },
      { kind: 'text', text: 'Sunny.' },
      { kind: 'stream-error', type: 'invalid_request_error', message: 'messages: too many images' },
    ],
    async (w) => {
      const run = input(w, { providerOptions: { stream: true } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      const interrupted = only(await factsOf(w.log, run.invocation.invocationId), 'model.interrupted')
      assert.equal(interrupted.map((fact) => fact.status), ['retryable_failure', 'retryable_failure'])
      assert.is(interrupted[0]?.message, 'the provider reported an error in the stream that could not be read: upstream connect error or disconnect/reset before headers. reset reason: overflow')
      assert.equal(interrupted[0]?.provider, { requestId: w.fake.received[0]?.requestId })
      assert.equal(interrupted[1]?.provider, { type: 'internal_server_error', requestId: w.fake.received[1]?.requestId })
      assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'Sunny.')
      const refused = await w.engine.run(input(w, { providerOptions: { stream: true } }))
      assert.equal(refused.status === 'failed' && [refused.class, refused.message], ['model_failed', 'the provider reported an error in the stream: invalid_request_error: messages: too many images'])
      assert.is(w.fake.received.length, 4)
    },
  ),
)

test(
  "a 429's retry-after is the wait asked of the engine (retryAfterMs), in seconds as Anthropic sends it",
  world([{ kind: 'error', status: 429, type: 'rate_limit_error', message: 'slow down', retryAfter: '7' }], async (w) => {
    const response = await anthropicClient(w.sdk).complete(directRequest(new AbortController().signal))
    assert.is(response.kind === 'interrupted' && response.status, 'retryable_failure')
    assert.is(response.kind === 'interrupted' && response.retryAfterMs, 7_000)
  }),
)

test(
  'a connection refused, and a stream whose connection breaks mid-answer, are retryable_failure',
  world([{ kind: 'reset' }], async (w) => {
    const cut = await anthropicClient(w.sdk).complete(directRequest(new AbortController().signal))
    assert.is(cut.kind === 'interrupted' && cut.status, 'retryable_failure')
    assert.match(cut.kind === 'interrupted' ? cut.message : '', /^the connection to the provider failed: /)
    assert.is(w.fake.received.length, 1)
    const port = Number(new URL(w.fake.baseURL).port)
    await w.fake.close()
    const refused = await anthropicClient(new Anthropic({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}`, logLevel: 'off' })).complete(directRequest(new AbortController().signal))
    assert.is(refused.kind === 'interrupted' && refused.status, 'retryable_failure')
    assert.match(refused.kind === 'interrupted' ? refused.message : '', /^the connection to the provider failed: .*ECONNREFUSED/)
  }),
)

test(
  'the SDK sends one HTTP request per attempt, whatever maxRetries the injected client has: a 529 with no engine retries is one request',
  world(
    [
      { kind: 'error', status: 529, type: 'overloaded_error', message: 'Overloaded' },
      { kind: 'error', status: 529, type: 'overloaded_error', message: 'Overloaded' },
      { kind: 'text', text: 'too late' },
    ],
    async (w) => {
      const outcome = await w.engine.run(input(w))
      assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
      assert.is(w.fake.received.length, 1, 'the SDK retried on its own')
    },
    { executor: { retries: 0 }, sdkRetries: 2 },
  ),
)

test(
  "400 and 401 fail the run at once (not retried), with the provider's status, type and request id recorded",
  world(
    [{ kind: 'error', status: 400, type: 'invalid_request_error', message: 'prompt is too long: 250000 tokens > 200000 maximum' }],
    async (w) => {
      const outcome = await w.engine.run(input(w))
      assert.is(outcome.status, 'failed')
      if (outcome.status !== 'failed') return
      assert.is(outcome.class, 'model_failed')
      assert.is(outcome.message, 'the provider answered HTTP 400: prompt is too long: 250000 tokens > 200000 maximum')
      assert.equal(outcome.provider, { status: 400, type: 'invalid_request_error', requestId: w.fake.received[0]?.requestId })
      assert.is(w.fake.received.length, 1)
    },
  ),
)

const WRONG = 'sk-ant-api03-WRONGwrongWRONGwrong0123456789abcdef'

test(
  'a 401 that quotes the key the SDK holds: failed with the provider recorded, and the key is in no file of the log',
  world(
    [],
    async (w) => {
      const run = input(w)
      const outcome = await w.engine.run(run)
      assert.is(outcome.status, 'failed')
      if (outcome.status !== 'failed') return
      assert.equal(outcome.provider, { status: 401, type: 'authentication_error', requestId: w.fake.received[0]?.requestId })
      assert.is(outcome.message, 'the provider answered HTTP 401: invalid x-api-key: [redacted]')
      assert.is(w.fake.received.length, 1)
      await w.log.close()
      const files = await everyFile(join(w.dir, 'log'))
      assert.ok(files.some((file) => file.path.endsWith('.log') && file.bytes.includes(run.invocation.runId)), 'the facts are in a .log file, read raw')
      for (const file of files) {
        assert.not.ok(file.bytes.includes(WRONG), `${file.path} holds the key`)
        assert.not.ok(file.bytes.includes('WRONGwrongWRONG'), `${file.path} holds a piece of the key`)
      }
    },
    { key: WRONG },
  ),
)

test(
  'a streamed answer that quotes the key: redacted from the recorded answer and the live pieces, in no file of the log',
  world([{ kind: 'text', text: `Your key is ${KEY}, nothing more.`, chunks: 9 }], async (w) => {
    const run = input(w, { providerOptions: { stream: true } })
    const pieces: string[] = []
    const running = await w.engine.start(run, { onModelText: (piece) => void pieces.push(piece.text) })
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'Your key is [redacted], nothing more.')
    assert.not.ok(pieces.join('').includes(KEY))
    await w.log.close()
    for (const file of await everyFile(join(w.dir, 'log'))) assert.not.ok(file.bytes.includes(KEY.slice(14, 40)), `${file.path} holds the key`)
  }),
)

test(
  "the key in the run's own input: with the key given as provider.apiKey too, the run is refused before its first fact, and the key is in no file of the log",
  world([{ kind: 'text', text: 'Noted.' }], async (w) => {
    const run = input(w, { work: { kind: 'message', content: `my key is ${KEY}, keep it` } })
    run.provider = { ...run.provider, apiKey: KEY }
    const refused = await rejectsWithCode(() => w.engine.run(run), 'RUN_INVALID_INPUT')
    assert.equal(refused.details?.fields, ['work.content'])
    assert.is(w.fake.received.length, 0)
    // The key given that way is still not what is sent: the SDK sends its own credentials.
    const answered = await w.engine.run({ ...run, work: { kind: 'message', content: 'hello' } })
    assert.equal(answered, { status: 'completed' })
    assert.is(w.fake.received[0]?.headers.authorization, `Bearer ${KEY}`)
    await w.log.close()
    const files = await everyFile(join(w.dir, 'log'))
    assert.ok(files.some((file) => file.path.endsWith('.log') && file.bytes.includes(run.invocation.runId)), 'the facts are in a .log file, read raw')
    for (const file of files) assert.not.ok(file.bytes.includes(KEY.slice(14, 40)), `${file.path} holds the key`)
  }),
)

test(
  "the key the SDK holds covers the run from its first fact (anthropicClient's secrets): a key pasted into the message or the instructions is refused with nothing written and nothing sent, without provider.apiKey; no file of the log holds it",
  world([{ kind: 'text', text: 'Noted.' }], async (w) => {
    const client = anthropicClient(w.sdk, { secrets: ['proxy-token-0123456789abcdef'] })
    assert.equal(client.secrets, ['proxy-token-0123456789abcdef', KEY], "the option's secrets and the SDK's key")
    for (const [field, over] of [
      ['work.content', { work: { kind: 'message', content: `my key is ${KEY}, keep it` } }],
      ['instructions', { instructions: `Authenticate with ${KEY}.` }],
    ] as const) {
      const run = input(w, over)
      const before = w.log.head()
      const refused = await rejectsWithCode(() => w.engine.run(run), 'RUN_INVALID_INPUT', field)
      assert.equal(refused.details?.fields, [field])
      assert.not.ok(refused.message.includes(KEY.slice(14, 40)), 'the refusal quotes no piece of the key')
      assert.equal(w.log.head(), before, `${field}: nothing written`)
    }
    assert.is(w.fake.received.length, 0)
    const answered = await w.engine.run(input(w))
    assert.equal(answered, { status: 'completed' })
    await w.log.close()
    const files = await everyFile(join(w.dir, 'log'))
    assert.ok(files.some((file) => file.path.endsWith('.log') && file.bytes.includes('claude-sonnet-4-5')), 'the facts are in a .log file, read raw')
    for (const file of files) assert.not.ok(file.bytes.includes(KEY.slice(14, 40)), `${file.path} holds the key`)
  }),
)

test(
  "an SDK key too short to be a secret (a placeholder) is left out of the client's secrets: a run whose message holds it is admitted (this fake refuses the key)",
  world(
    [{ kind: 'text', text: 'Hello.' }],
    async (w) => {
      assert.equal(anthropicClient(w.sdk).secrets, [])
      const outcome = await w.engine.run(input(w, { work: { kind: 'message', content: 'the word is none' } }))
      assert.equal(outcome.status === 'failed' ? [outcome.class, outcome.provider?.status] : outcome, ['model_failed', 401])
      assert.is(w.fake.received.length, 1, 'admitted and sent')
    },
    { key: 'none' },
  ),
)

test(
  'a cancel while the answer streams: the attempt is cancelled (the SDK ends its stream quietly on abort), the run ends cancelled',
  world([{ kind: 'hang', text: 'Let me think' }, { kind: 'hang', text: 'Let me think' }], async (w) => {
    const run = input(w, { providerOptions: { stream: true } })
    let cancelled = false
    const running = await w.engine.start(run, {
      onModelText: () => {
        if (cancelled) return
        cancelled = true
        void running.cancel('the user pressed stop')
      },
    })
    const outcome = await running.wait()
    assert.is(outcome.status, 'cancelled')
    // The client's own answer, called directly: cancelled, not a cut stream (malformed).
    const controller = new AbortController()
    const answered = anthropicClient(w.sdk).complete(directRequest(controller.signal, { onText: () => controller.abort() }))
    const response = await answered
    // With the request-id of the stream it cut, as any failure after the headers.
    assert.equal(response, { kind: 'interrupted', status: 'cancelled', message: 'the run was cancelled', provider: { requestId: w.fake.received.at(-1)?.requestId } })
  }),
)

test(
  'a stream that stalls past idleTimeoutMs ends model_timeout ("the answer stalled"), long before timeoutMs',
  world(
    [{ kind: 'hang' }],
    async (w) => {
      const outcome = await w.engine.run(input(w, { providerOptions: { stream: true } }))
      assert.is(outcome.status === 'failed' && outcome.class, 'model_timeout')
      assert.is(outcome.status === 'failed' && outcome.message, 'the answer stalled: no content arrived for 300ms (idleTimeoutMs; the SDK does not pass the stream\'s pings on)')
    },
    { executor: { idleTimeoutMs: 300, timeoutMs: 60_000 } },
  ),
)

test(
  'a stream that stalls after its stop reason (no message_stop) is a whole answer, kept',
  world(
    [{ kind: 'stall-after-stop', text: 'All done.' }],
    async (w) => {
      const run = input(w, { providerOptions: { stream: true } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'All done.')
    },
    { executor: { idleTimeoutMs: 300, timeoutMs: 60_000 } },
  ),
)

test(
  'a stream whose connection breaks after its stop reason (no message_stop) is a whole answer, kept, not retried',
  world([{ kind: 'reset-after-stop', text: 'All done.' }, { kind: 'text', text: 'Sent again.' }], async (w) => {
    const run = input(w, { providerOptions: { stream: true } })
    assert.equal(await w.engine.run(run), { status: 'completed' })
    assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'All done.')
    assert.is(w.fake.received.length, 1)
  }),
)

test(
  "a server tool's block (server_tool_use, whose input streams as input_json_delta) is left out of the answer, not read as malformed",
  world([{ kind: 'server-tool', text: 'Sunny, says the web.' }], async (w) => {
    const run = input(w, { providerOptions: { stream: true } })
    assert.equal(await w.engine.run(run), { status: 'completed' })
    const [done] = only(await factsOf(w.log, run.invocation.invocationId), 'model.completed')
    assert.equal(done?.output.toolCalls, [])
    assert.is(done?.output.text, 'Sunny, says the web.')
  }),
)

test(
  'answers that cannot be read are model_malformed, not retried: JSON that is no Message, an event that is not JSON, a stream that ends mid-answer',
  world([{ kind: 'garbage' }, { kind: 'bad-event' }, { kind: 'cut' }], async (w) => {
    const plain = await w.engine.run(input(w))
    assert.is(plain.status === 'failed' && plain.class, 'model_malformed')
    assert.is(plain.status === 'failed' && plain.message, 'the provider answered something that is not a Message')
    const badEvent = await w.engine.run(input(w, { providerOptions: { stream: true } }))
    assert.is(badEvent.status === 'failed' && badEvent.class, 'model_malformed')
    const cut = await w.engine.run(input(w, { providerOptions: { stream: true } }))
    assert.is(cut.status === 'failed' && cut.class, 'model_malformed')
    assert.is(cut.status === 'failed' && cut.message, 'the stream ended before the answer did (no message_stop)')
    assert.is(w.fake.received.length, 3)
  }),
)

test(
  "a failure after the response's headers is recorded with its request-id, plain as streamed: a plain body that is not JSON, one that stalls, a stream that stalls",
  world(
    [{ kind: 'bad-json' }, { kind: 'slow-json' }, { kind: 'hang' }],
    async (w) => {
      // Plain, through the engine: the body is not JSON (model_malformed), its request-id in the attempt's fact.
      const run = input(w)
      const plain = await w.engine.run(run)
      assert.is(plain.status === 'failed' && plain.class, 'model_malformed')
      const [fact] = only(await factsOf(w.log, run.invocation.invocationId), 'model.interrupted')
      assert.equal(fact?.provider, { requestId: w.fake.received[0]?.requestId })
      // Plain, a body that stalls past idleTimeoutMs; streamed, a stream that stalls: timed_out, each with its request-id.
      const plainBody = { model: 'claude-sonnet-4-5', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 100 }
      const stalled = await anthropicClient(w.sdk).complete(directRequest(new AbortController().signal, { body: plainBody, bodyText: JSON.stringify(plainBody), idleTimeoutMs: 200 }))
      assert.is(stalled.kind === 'interrupted' && stalled.status, 'timed_out')
      assert.equal(stalled.kind === 'interrupted' && stalled.provider, { requestId: w.fake.received[1]?.requestId })
      const streamed = await anthropicClient(w.sdk).complete(directRequest(new AbortController().signal, { idleTimeoutMs: 200 }))
      assert.is(streamed.kind === 'interrupted' && streamed.status, 'timed_out')
      assert.equal(streamed.kind === 'interrupted' && streamed.provider, { requestId: w.fake.received[2]?.requestId })
      assert.is(w.fake.received.length, 3)
    },
    { executor: { retries: 0 } },
  ),
)

test(
  'stop reasons: max_tokens is finishReason length (model_truncated without text), refusal is content_filter (model_filtered)',
  world(
    [
      { kind: 'text', text: 'It is sunn', stop: 'max_tokens' },
      { kind: 'text', text: '', stop: 'max_tokens' },
      { kind: 'text', text: '', stop: 'refusal' },
    ],
    async (w) => {
      const run = input(w, { mainOutputLimit: 5, providerOptions: { stream: true } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      const [done] = only(await factsOf(w.log, run.invocation.invocationId), 'model.completed')
      assert.is(done?.output.finishReason, 'length')
      assert.is(done?.output.text, 'It is sunn')
      const truncated = await w.engine.run(input(w, { mainOutputLimit: 5 }))
      assert.is(truncated.status === 'failed' && truncated.class, 'model_truncated')
      const filtered = await w.engine.run(input(w))
      assert.is(filtered.status === 'failed' && filtered.class, 'model_filtered')
      assert.is(w.fake.received[0]?.body.max_tokens, 5)
    },
  ),
)

test(
  'a timeoutMs or idleTimeoutMs past the longest timer Node keeps (about 24.8 days, "no limit") is held to it, not fired at once',
  world(
    [{ kind: 'text', text: 'Sunny.' }, { kind: 'text', text: 'Sunny.' }],
    async (w) => {
      for (const stream of [true, false]) {
        const run = input(w, { providerOptions: { stream } })
        assert.equal(await w.engine.run(run), { status: 'completed' })
        assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'Sunny.')
      }
      assert.is(w.fake.received.length, 2)
    },
    { executor: { timeoutMs: 3_000_000_000, idleTimeoutMs: 2_500_000_000 } },
  ),
)

test(
  "max_tokens: the run's mainOutputLimit, else the client's maxTokens; with neither, the attempt fails before anything is sent",
  world([{ kind: 'text', text: 'One.' }], async (w) => {
    const none = await w.engine.run(input(w, { mainOutputLimit: undefined }))
    assert.is(none.status === 'failed' && none.class, 'model_failed')
    assert.match(none.status === 'failed' ? (none.message ?? '') : '', /^Anthropic requires max_tokens: set the run's mainOutputLimit/)
    assert.is(w.fake.received.length, 0)
    const response = await anthropicClient(w.sdk, { maxTokens: 321 }).complete(directRequest(new AbortController().signal, { body: { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }] } }))
    assert.is(response.kind, 'completed')
    assert.is(w.fake.received[0]?.body.max_tokens, 321)
  }),
)

const THINKING = { type: 'enabled', budget_tokens: 1024 }
const THOUGHT = 'The user wants the weather in Paris: call get_weather with city Paris.'
/** An opaque redacted_thinking payload, as the API sends one: base64 of encrypted bytes. */
const REDACTED = 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj+Q=='
const FORMAT = 'anthropic-claude-v1'

for (const stream of [false, true]) {
  test(
    `extended thinking with tools (${stream ? 'streamed' : 'plain JSON'}): the run completes; the thinking and redacted_thinking blocks are recorded as reasoningDetails and sent back first in their turn, the signature byte for byte`,
    world(
      [
        { kind: 'tools', thinking: THOUGHT, redacted: REDACTED, text: 'Let me check.', calls: [{ name: 'get_weather', input: { city: 'Paris' } }] },
        { kind: 'text', thinking: 'Sunny, says the tool.', text: 'It is sunny in Paris.' },
      ],
      async (w) => {
        const calls: unknown[] = []
        const run = input(w, { tools: [weatherTool(calls)], providerOptions: { stream, thinking: THINKING } })
        assert.equal(await w.engine.run(run), { status: 'completed' })
        assert.equal(calls, [{ city: 'Paris' }])
        assert.is(answerOf(await w.log.invocationEvents(run.invocation.invocationId)), 'It is sunny in Paris.')
        const [first, second] = only(await factsOf(w.log, run.invocation.invocationId), 'model.completed').map((fact) => fact.output)
        const [thought, redacted, last] = w.fake.thoughts
        const signature = String(thought?.signature)
        // Recorded in block order, as OpenRouter carries Anthropic's thinking; reasoning is the thinking's text.
        assert.equal(first?.reasoningDetails, [
          { type: 'reasoning.text', text: THOUGHT, signature, format: FORMAT },
          { type: 'reasoning.encrypted', data: REDACTED, format: FORMAT },
        ])
        assert.is(redacted?.data, REDACTED)
        assert.is(first?.reasoning, THOUGHT)
        assert.equal(second?.reasoningDetails, [{ type: 'reasoning.text', text: 'Sunny, says the tool.', signature: String(last?.signature), format: FORMAT }])
        assert.is(second?.reasoning, 'Sunny, says the tool.')
        // The tool round's turn as the API requires it: its thinking blocks first, unchanged, then its text and call.
        assert.is(w.fake.received.length, 2)
        const turn = (w.fake.received[1]?.body.messages as Blocks)[1]
        assert.equal(turn?.content, [
          { type: 'thinking', thinking: THOUGHT, signature },
          { type: 'redacted_thinking', data: REDACTED },
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: first?.toolCalls[0]?.callId, name: 'get_weather', input: { city: 'Paris' } },
        ])
        assert.ok(signature.length > 80)
        assert.ok(w.fake.received[1]?.raw.includes(`"signature":${JSON.stringify(signature)}`), 'the signature is sent as it came, byte for byte')
        assert.equal(w.fake.received[1]?.body.thinking, THINKING)
      },
    ),
  )
}

test(
  'a continuation of a thinking tool run sends every answer\'s thinking blocks back with its turn, and the API takes them (their signatures check)',
  world(
    [
      { kind: 'tools', thinking: THOUGHT, calls: [{ name: 'get_weather', input: { city: 'Paris' } }] },
      { kind: 'tools', redacted: REDACTED, calls: [{ name: 'get_weather', input: { city: 'Lyon' } }] },
      { kind: 'text', thinking: 'Both sunny.', text: 'Sunny in both.' },
      { kind: 'text', thinking: 'Nothing new to check.', text: 'Still sunny.' },
    ],
    async (w) => {
      const run = input(w, { tools: [weatherTool([])], providerOptions: { stream: true, thinking: THINKING } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      const source = (await w.log.runSource(run.invocation.sessionId, run.invocation.runId))?.boundary
      assert.ok(source)
      if (source === undefined) return
      const next = input(w, { tools: [weatherTool([])], providerOptions: { thinking: THINKING } })
      const continued = await w.engine.run({ ...next, invocation: { ...next.invocation, sessionId: run.invocation.sessionId }, work: { kind: 'continuation', source, content: 'And tomorrow?' } })
      assert.equal(continued, { status: 'completed' })
      assert.is(w.fake.received.length, 4)
      const [thought, redacted, final] = w.fake.thoughts
      const turns = w.fake.received[3]?.body.messages as Blocks
      assert.equal(turns.map((m) => [m.role, m.content.map((b) => b.type).join(',')]), [
        ['user', 'text'],
        ['assistant', 'thinking,tool_use'],
        ['user', 'tool_result'],
        ['assistant', 'redacted_thinking,tool_use'],
        ['user', 'tool_result'],
        ['assistant', 'thinking,text'],
        ['user', 'text'],
      ])
      assert.equal(turns[1]?.content[0], { type: 'thinking', thinking: THOUGHT, signature: thought?.signature })
      assert.equal(turns[3]?.content[0], { type: 'redacted_thinking', data: redacted?.data })
      assert.equal(turns[5]?.content[0], { type: 'thinking', thinking: 'Both sunny.', signature: final?.signature })
    },
  ),
)

test(
  "extended thinking without tools: the thinking's text is reasoning, the signed block reasoningDetails; a tool round recorded without its thinking blocks is sent as recorded, and the API's 400 recorded as it is",
  world(
    [
      { kind: 'text', text: 'Sunny.', thinking: 'Paris in spring: likely sunny.' },
      // An answer to a request with thinking that carries none (as a log holds one whose reasoningDetails were left out).
      { kind: 'tools', calls: [{ name: 'get_weather', input: { city: 'Paris' } }] },
    ],
    async (w) => {
      const run = input(w, { providerOptions: { stream: true, thinking: THINKING } })
      assert.equal(await w.engine.run(run), { status: 'completed' })
      const [done] = only(await factsOf(w.log, run.invocation.invocationId), 'model.completed')
      assert.is(done?.output.reasoning, 'Paris in spring: likely sunny.')
      assert.equal(done?.output.reasoningDetails, [{ type: 'reasoning.text', text: 'Paris in spring: likely sunny.', signature: String(w.fake.thoughts[0]?.signature), format: FORMAT }])
      assert.is(done?.output.text, 'Sunny.')
      assert.equal(w.fake.received[0]?.body.thinking, THINKING)
      const bare = await w.engine.run(input(w, { tools: [weatherTool([])], providerOptions: { thinking: THINKING } }))
      assert.is(bare.status === 'failed' && bare.class, 'model_failed')
      assert.match(bare.status === 'failed' ? (bare.message ?? '') : '', /^the provider answered HTTP 400: messages\.1\.content\.0\.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`/)
      assert.equal(bare.status === 'failed' && bare.provider, { status: 400, type: 'invalid_request_error', requestId: w.fake.received[2]?.requestId })
      assert.is(w.fake.received.length, 3)
    },
  ),
)

test(
  "streamed thinking reaches onModelReasoning as its thinking_delta pieces, in order, before the text; onModelText gets the text only, a redacted_thinking block's data neither, and the recorded reasoning is the pieces joined",
  world([{ kind: 'text', thinking: 'Paris in spring: likely sunny.', redacted: REDACTED, text: 'Sunny in Paris.', chunks: 3 }], async (w) => {
    const run = input(w, { providerOptions: { stream: true, thinking: THINKING } })
    const order: [string, string][] = []
    const running = await w.engine.start(run, {
      onModelReasoning: (piece) => void order.push(['reasoning', piece.text]),
      onModelText: (piece) => void order.push(['text', piece.text]),
    })
    assert.equal(await running.wait(), { status: 'completed' })
    const [done] = only(await factsOf(w.log, run.invocation.invocationId), 'model.completed')
    assert.is(done?.output.reasoning, 'Paris in spring: likely sunny.')
    assert.is(done?.output.text, 'Sunny in Paris.')
    const reasoning = order.filter(([kind]) => kind === 'reasoning').map(([, text]) => text)
    // The fake streams a thinking block in two thinking_delta pieces, as the API streams it in several.
    assert.equal(reasoning, ['Paris in spring', ': likely sunny.'])
    assert.is(order.filter(([kind]) => kind === 'text').map(([, text]) => text).join(''), 'Sunny in Paris.')
    assert.equal(order.slice(0, 2).map(([kind]) => kind), ['reasoning', 'reasoning'], 'the thinking comes first')
    assert.not.ok(order.some(([, text]) => text.includes(REDACTED.slice(0, 20))), "the redacted_thinking block's data is passed on to neither")
  }),
)

test("the translation of reasoning_details: Anthropic's entries (by format, or by shape without one) become thinking blocks first in their turn, in order; other providers' and incomplete entries are left out", () => {
  const params = toMessagesRequest(
    {
      model: 'claude',
      max_tokens: 10,
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: 'Calling.',
          reasoning_content: 'not sent: the thinking as text',
          reasoning_details: [
            { type: 'reasoning.encrypted', data: 'openai-encrypted', format: 'openai-responses-v1' },
            { type: 'reasoning.text', text: 'first', signature: 'c2lnLTE=', format: FORMAT },
            { type: 'reasoning.text', text: 'gemini', signature: 'c2lnLWc=', format: 'google-gemini-v1' },
            { type: 'reasoning.summary', summary: 'a summary', format: FORMAT },
            { type: 'reasoning.text', text: 'unsigned', format: FORMAT },
            { type: 'reasoning.encrypted', data: 'cmVkYWN0ZWQ=', format: FORMAT, index: 4 },
            { type: 'reasoning.text', text: 'no format', signature: 'c2lnLTI=' },
            { type: 'reasoning.encrypted', data: 'unknown-format', format: 'unknown' },
          ],
          tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'done' },
        { role: 'assistant', content: 'Done.', reasoning_details: [{ type: 'reasoning.encrypted', data: 'gemini-only', format: 'google-gemini-v1' }] },
        { role: 'user', content: 'thanks' },
      ],
    },
    undefined,
  )
  assert.ok(typeof params !== 'string')
  if (typeof params === 'string') return
  assert.equal(params.messages[1]?.content, [
    { type: 'thinking', thinking: 'first', signature: 'c2lnLTE=' },
    { type: 'redacted_thinking', data: 'cmVkYWN0ZWQ=' },
    { type: 'thinking', thinking: 'no format', signature: 'c2lnLTI=' },
    { type: 'text', text: 'Calling.' },
    { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} },
  ])
  assert.equal(params.messages[3]?.content, [{ type: 'text', text: 'Done.' }])
})

test('the translation: system messages apart, turns of one role merged, arguments that are no JSON object sent as { raw_arguments } (a body of your own: a run replays a rejected call\'s as {})', () => {
  const params = toMessagesRequest(
    {
      model: 'claude',
      max_tokens: 10,
      top_k: 5,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'first' },
        { role: 'user', content: 'second' },
        { role: 'assistant', content: '', tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"city": "Par' } },
          { id: 'toolu_2', type: 'function', function: { name: 'f', arguments: '[1, 2]' } },
          { id: 'toolu_3', type: 'function', function: { name: 'f', arguments: '' } },
        ] },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'the arguments are not JSON' },
        { role: 'tool', tool_call_id: 'toolu_2', content: 'not an object' },
        { role: 'tool', tool_call_id: 'toolu_3', content: '' },
        { role: 'user', content: 'and then?' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { properties: {} } } }],
    },
    undefined,
  )
  assert.ok(typeof params !== 'string')
  if (typeof params === 'string') return
  assert.is(params.system, 'Be brief.')
  assert.is(params.top_k, 5)
  assert.equal(params.tools, [{ name: 'f', input_schema: { type: 'object', properties: {} } }])
  assert.equal(params.messages, [
    { role: 'user', content: [{ type: 'text', text: 'first' }, { type: 'text', text: 'second' }] },
    { role: 'assistant', content: [
      { type: 'tool_use', id: 'toolu_1', name: 'f', input: { [RAW_ARGUMENTS_KEY]: '{"city": "Par' } },
      { type: 'tool_use', id: 'toolu_2', name: 'f', input: { [RAW_ARGUMENTS_KEY]: '[1, 2]' } },
      { type: 'tool_use', id: 'toolu_3', name: 'f', input: {} },
    ] },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: 'the arguments are not JSON' },
      { type: 'tool_result', tool_use_id: 'toolu_2', content: 'not an object' },
      { type: 'tool_result', tool_use_id: 'toolu_3' },
      { type: 'text', text: 'and then?' },
    ] },
  ])
})

test(
  'a call the engine rejects (its input fails the schema) is replayed and answered in a request the API takes',
  world(
    [{ kind: 'tools', calls: [{ name: 'get_weather', input: { town: 'Paris' } }] }, { kind: 'tools', calls: [{ name: 'get_weather', input: { city: 'Paris' } }] }, { kind: 'text', text: 'Sunny.' }],
    async (w) => {
      const calls: unknown[] = []
      assert.equal(await w.engine.run(input(w, { tools: [weatherTool(calls)], providerOptions: { stream: true } })), { status: 'completed' })
      assert.equal(calls, [{ city: 'Paris' }])
      const messages = w.fake.received[1]?.body.messages as Blocks
      assert.equal(messages[1]?.content[0]?.input, { town: 'Paris' })
      assert.is(messages[2]?.content[0]?.type, 'tool_result')
      assert.is(w.fake.received.length, 3)
    },
  ),
)

test('options it cannot use are ANTHROPIC_INVALID_OPTIONS naming the option; an sdk without messages.create too', async () => {
  const sdk = new Anthropic({ apiKey: KEY, baseURL: 'http://127.0.0.1:9' })
  for (const [options, field] of [
    [{ maxTokens: 0 }, 'maxTokens'],
    [{ maxTokens: 1.5 }, 'maxTokens'],
    [{ secrets: 'one-secret-value' }, 'secrets'],
    [{ secrets: ['short'] }, 'secrets.0'],
    [{ maxTokenz: 10 }, 'maxTokenz'],
  ] as const) {
    const error = await rejectsWithCode(async () => anthropicClient(sdk, options as AnthropicClientOptions), 'ANTHROPIC_INVALID_OPTIONS', JSON.stringify(options))
    assert.is(error.details?.field, field)
  }
  const notSdk = await rejectsWithCode(async () => anthropicClient({} as Anthropic), 'ANTHROPIC_INVALID_OPTIONS')
  assert.is(notSdk.details?.field, 'sdk')
})

test(
  "with the provider option, a run whose provider.baseUrl is not the SDK's baseURL is refused before anything is written or sent (RUN_INVALID_INPUT); the SDK's baseURL, or it and /v1, runs",
  world(
    [{ kind: 'text', text: 'Sunny.' }, { kind: 'text', text: 'Still sunny.' }],
    async (w) => {
      const before = w.log.head()
      const elsewhere = input(w)
      elsewhere.provider = { ...elsewhere.provider, baseUrl: 'https://api.anthropic.com' }
      const refused = await rejectsWithCode(() => w.engine.run(elsewhere), 'RUN_INVALID_INPUT')
      assert.equal(refused.details?.fields, ['provider'])
      assert.is(
        refused.message,
        `RUN_INVALID_INPUT: provider: the model client could not be created: ANTHROPIC_INVALID_OPTIONS: anthropicClient: the run's provider.baseUrl https://api.anthropic.com is not where the SDK client sends its requests (its baseURL ${w.fake.baseURL}, which decides): give the run that baseUrl, or the SDK client that baseURL; a run served elsewhere (a child run on an OpenAI-compatible server, say) needs a createClient that picks the client by the run's provider: anthropicClient(sdk, { provider }) for the SDK's baseURL, new OpenAIChatClient(provider) for the rest`,
      )
      assert.equal(w.log.head(), before, 'nothing written')
      assert.is(w.fake.received.length, 0, 'nothing sent')
      assert.equal(await w.engine.run(input(w)), { status: 'completed' })
      const versioned = input(w)
      versioned.provider = { ...versioned.provider, baseUrl: `${w.fake.baseURL}/v1/` }
      assert.equal(await w.engine.run(versioned), { status: 'completed' })
      assert.is(w.fake.received.length, 2)
      // Called directly: a provider that is none, and an sdk with no baseURL to check against.
      const notProvider = await rejectsWithCode(async () => anthropicClient(w.sdk, { provider: 'https://api.anthropic.com' } as unknown as AnthropicClientOptions), 'ANTHROPIC_INVALID_OPTIONS')
      assert.is(notProvider.details?.field, 'provider')
      const shaped = { messages: { create: w.sdk.messages.create.bind(w.sdk.messages) } } as unknown as Anthropic
      const unchecked = await rejectsWithCode(async () => anthropicClient(shaped, { provider: { baseUrl: w.fake.baseURL } }), 'ANTHROPIC_INVALID_OPTIONS')
      assert.is(unchecked.details?.field, 'provider.baseUrl')
      anthropicClient(shaped)
    },
    { withProvider: true },
  ),
)

test(
  "a secret given as an option is registered with the run: a 401 that quotes it is recorded redacted",
  world(
    [{ kind: 'error', status: 401, type: 'authentication_error', message: 'the proxy token proxy-token-0123456789abcdef is not valid' }],
    async (w) => {
      const outcome = await w.engine.run(input(w))
      assert.is(outcome.status === 'failed' && outcome.message, 'the provider answered HTTP 401: the proxy token [redacted] is not valid')
    },
    { client: { secrets: ['proxy-token-0123456789abcdef'] } },
  ),
)

test.run()
