/**
 * The scripted model server's Anthropic Messages route (factstate/testing: POST /v1/messages),
 * end to end: the real `@anthropic-ai/sdk` client through `anthropicClient`, real engine runs on
 * real LevelDB logs. The same script as the chat-completions route serves a tool run with thinking
 * (streamed and as JSON), usage with cache reads, request ids, the engine's retries of 429 / 529 /
 * a reset stream, a cut stream, and a request past the script; and a recorded run replays through
 * it (`scriptOf`, `compareRuns`) with its thinking blocks sent back as recorded.
 */
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, answerOf, type ModelTextPiece, type RunInput, type ToolDefinition } from '../index.js'
import { anthropicClient } from '../anthropic/index.js'
import { answer, compareRuns, recordedRun, scriptedModelServer, scriptOf, type Script, type ScriptedModelServer } from '../testing/index.js'
import { factsOf, only } from './support/engine-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const KEY = "sk-ant-api03-QWxZ9vLp3RtY7uN2mK8sD4fH6jB0"

function weather(calls: unknown[]): ToolDefinition {
  return {
    name: 'get_weather',
    description: 'The weather in a city',
    inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    execute: async (args) => {
      calls.push(args)
      return { sky: 'sunny' }
    },
  }
}

let counter = 0
function runInput(server: ScriptedModelServer, tools: ToolDefinition[], providerOptions: RunInput['providerOptions'] = {}, name = `m${++counter}`): RunInput {
  return {
    invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'claude-sonnet-4-5' },
    configuration: { cwd: '/workspace' },
    instructions: 'You are a weather assistant.',
    mainOutputLimit: 2048,
    tools,
    work: { kind: 'message', content: 'What is the weather in Paris?' },
    providerOptions,
  }
}

/** A server with `script`, a log, and an engine whose client is anthropicClient over a real SDK client pointed at the server (checked against the run's provider.baseUrl); all closed after `body`. */
function withServer(
  script: Script,
  body: (w: { server: ScriptedModelServer; log: EventLog; engine: Engine; dir: string }) => Promise<void>,
  options: { stream?: boolean; requestIds?: boolean } = {},
): () => Promise<void> {
  return () =>
    withTimeout(
      withTempDir(async (dir) => {
        const server = await scriptedModelServer(script, options)
        const log = await EventLog.open(join(dir, 'log'))
        const sdk = new Anthropic({ apiKey: KEY, baseURL: server.origin, logLevel: 'off' })
        const model = new ModelExecutor({ timeoutMs: 10_000, backoffMs: 1, maxBackoffMs: 5, createClient: (provider) => anthropicClient(sdk, { provider }) })
        const engine = new Engine({ log, model })
        try {
          await body({ server, log, engine, dir })
        } finally {
          await engine.drain().catch(() => undefined)
          await log.close().catch(() => undefined)
          await server.close()
        }
      }),
      20_000,
    )
}

const THINKING = { type: 'enabled', budget_tokens: 1024 }
const FORMAT = 'anthropic-claude-v1'

/** A tool run whose first answer thinks (a reasoning text, signed by the server), the second with cache reads in its usage. */
const TOOL_RUN: Script = [
  answer.toolCalls([{ name: 'get_weather', arguments: { city: 'Paris' } }], { text: 'Let me check.', reasoning: 'The user wants Paris: call get_weather.' }),
  answer.text('It is sunny in Paris today.', { usage: { prompt_tokens: 120, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 100 } } }),
]

for (const streamed of [true, false]) {
  test(
    `${streamed ? 'streamed (SSE events)' : 'plain (a JSON Message)'}: a tool run with thinking through the real SDK: calls, text, reasoning and its signed block, usage, ids recorded; the thinking sent back first in its turn`,
    withServer(
      TOOL_RUN,
      async ({ server, log, engine }) => {
        const calls: unknown[] = []
        const text: ModelTextPiece[] = []
        const reasoning: ModelTextPiece[] = []
        const run = runInput(server, [weather(calls)], { thinking: THINKING, ...(streamed ? { stream: true } : {}) })
        const running = await engine.start(run, { onModelText: (piece) => void text.push(piece), onModelReasoning: (piece) => void reasoning.push(piece) })
        assert.equal(await running.wait(), { status: 'completed' })
        assert.equal(calls, [{ city: 'Paris' }])
        assert.is(answerOf(await log.invocationEvents(run.invocation.invocationId)), 'It is sunny in Paris today.')
        const [first, second] = only(await factsOf(log, run.invocation.invocationId), 'model.completed').map((fact) => fact.output)
        assert.is(first?.text, 'Let me check.')
        assert.is(first?.finishReason, 'tool_calls')
        assert.equal(first?.toolCalls.map((call) => [call.callId, call.name, JSON.parse(call.arguments)]), [['call_0_0', 'get_weather', { city: 'Paris' }]])
        assert.is(first?.reasoning, 'The user wants Paris: call get_weather.')
        const signature = first?.reasoningDetails?.[0]?.signature
        assert.type(signature, 'string')
        assert.equal(first?.reasoningDetails, [{ type: 'reasoning.text', text: 'The user wants Paris: call get_weather.', signature, format: FORMAT }])
        assert.match(first?.responseId ?? '', /^msg_/)
        assert.equal([first?.requestId, second?.requestId], ['req_0', 'req_1'])
        assert.is(second?.finishReason, 'stop')
        assert.equal(second?.usage, { inputTokens: 120, cachedInputTokens: 100, outputTokens: 9 })
        assert.equal(first?.usage, { inputTokens: 10, cachedInputTokens: 0, outputTokens: 5 })
        // Both requests were Messages requests, the second with the signed thinking first in the assistant turn.
        assert.equal(server.requests.map((request) => [request.api, request.path, request.headers['anthropic-version'] !== undefined]), [
          ['messages', '/v1/messages', true],
          ['messages', '/v1/messages', true],
        ])
        const sent = server.requests[1]?.body as unknown as { system: string; messages: { role: string; content: Record<string, unknown>[] }[] }
        assert.is(sent.system, 'You are a weather assistant.')
        assert.equal(sent.messages[1]?.content.map((block) => block.type), ['thinking', 'text', 'tool_use'])
        assert.equal(sent.messages[1]?.content[0], { type: 'thinking', thinking: 'The user wants Paris: call get_weather.', signature })
        assert.is(sent.messages[2]?.content[0]?.tool_use_id, 'call_0_0')
        if (streamed) {
          // Pieces as they came: the text in more than one, the thinking live.
          const step2 = text.filter((piece) => piece.stepId === 'step-2')
          assert.ok(step2.length >= 2, `streamed in ${step2.length} pieces`)
          assert.is(reasoning.map((piece) => piece.text).join(''), 'The user wants Paris: call get_weather.')
        }
      },
      { requestIds: true },
    ),
  )
}

test(
  "the engine's retries of a 429 (retry-after), a 529 and a stream reset mid-answer, each recorded with Anthropic's error type; a cut stream is model_malformed",
  withServer(
    [answer.status(429, { retryAfter: 0 }), answer.status(529), answer.reset({ text: 'It is sun' }), answer.text('Sunny.'), answer.cutStream({ text: 'Half' })],
    async ({ server, log, engine }) => {
      const run = runInput(server, [], { stream: true })
      assert.equal(await engine.run(run), { status: 'completed' })
      const interrupted = only(await factsOf(log, run.invocation.invocationId), 'model.interrupted')
      assert.equal(interrupted.map((fact) => fact.status), ['retryable_failure', 'retryable_failure', 'retryable_failure'])
      assert.equal(interrupted[0]?.provider, { status: 429, type: 'rate_limit_error', requestId: 'req_0' })
      assert.is(interrupted[0]?.message, 'the provider answered HTTP 429: scripted status 429')
      assert.equal(interrupted[1]?.provider, { status: 529, type: 'overloaded_error', requestId: 'req_1' })
      assert.match(interrupted[2]?.message ?? '', /^the connection to the provider failed: /)
      assert.is(answerOf(await log.invocationEvents(run.invocation.invocationId)), 'Sunny.')
      const cut = await engine.run(runInput(server, [], { stream: true }))
      assert.equal(cut.status === 'failed' && [cut.class, cut.message], ['model_malformed', 'the stream ended before the answer did (no message_stop)'])
      assert.is(server.requests.length, 5)
    },
    { requestIds: true },
  ),
)

test(
  "a request past the script is answered 400 in Anthropic's words, with the code unscripted_request: the run fails at once, model_failed",
  withServer([answer.text('Only one.')], async ({ server, engine }) => {
    assert.equal(await engine.run(runInput(server, [])), { status: 'completed' })
    const outcome = await engine.run(runInput(server, []))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
    assert.is(
      outcome.status === 'failed' && outcome.message,
      'the provider answered HTTP 400: scripted model server: the script has 1 answer and this was request 2 (index 1, listed in server.unscripted): script an answer for it',
    )
    assert.equal(outcome.status === 'failed' && outcome.provider, { status: 400, type: 'invalid_request_error', code: 'unscripted_request' })
    assert.equal(server.unscripted, [1])
  }),
)

test(
  'a streamed run recorded through the Messages route (an error event in the stream and a 503 retried, a tool, thinking) replays from its facts (scriptOf) through it to the same facts (compareRuns) and the same requests, its signed thinking sent back as recorded',
  () =>
    withTimeout(
      withTempDir(async (dir) => {
        const recordLog = await EventLog.open(join(dir, 'recorded'))
        const replayLog = await EventLog.open(join(dir, 'replayed'))
        const servers: ScriptedModelServer[] = []
        const engineOver = async (log: EventLog, script: Script) => {
          const server = await scriptedModelServer(script, { requestIds: true })
          servers.push(server)
          const sdk = new Anthropic({ apiKey: KEY, baseURL: server.origin, logLevel: 'off' })
          return { server, engine: new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000, backoffMs: 1, maxBackoffMs: 5, createClient: (provider) => anthropicClient(sdk, { provider }) }) }) }
        }
        try {
          // An error event inside the stream (a JSON error body served malformed, as scriptOf scripts one), then a 503, then the run.
          const overloaded = answer.malformed({ body: JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }) })
          const recording = await engineOver(recordLog, [overloaded, answer.status(503), ...TOOL_RUN])
          const run = runInput(recording.server, [weather([])], { thinking: THINKING, stream: true }, 'replayed')
          assert.equal(await recording.engine.run(run), { status: 'completed' })
          const recorded = await recordedRun(recordLog, run.invocation.invocationId)
          const interrupted = recorded.flatMap(({ event }) => (event.fact.type === 'model.interrupted' ? [[event.fact.status, event.fact.message]] : []))
          assert.equal(interrupted, [
            ['retryable_failure', 'the provider reported an error in the stream: overloaded_error: Overloaded'],
            ['retryable_failure', 'the provider answered HTTP 503: scripted status 503'],
          ])
          const replaying = await engineOver(replayLog, scriptOf(recorded))
          assert.equal(await replaying.engine.run({ ...run, provider: { ...run.provider, baseUrl: replaying.server.baseUrl } }), { status: 'completed' })
          const replayed = await recordedRun(replayLog, run.invocation.invocationId)
          assert.is(compareRuns(recorded, replayed), undefined)
          // compareRuns leaves a failure's words out: the provider's words came back as recorded.
          assert.equal(replayed.flatMap(({ event }) => (event.fact.type === 'model.interrupted' ? [[event.fact.status, event.fact.message]] : [])), interrupted)
          // The same requests, byte for byte: the thinking block went back with the signature recorded.
          assert.equal(
            replaying.server.requests.map((request) => request.bodyText),
            recording.server.requests.map((request) => request.bodyText),
          )
          assert.ok(replaying.server.requests[3]?.bodyText.includes('"type":"thinking"'))
        } finally {
          for (const server of servers) await server.close()
          await recordLog.close()
          await replayLog.close()
        }
      }),
      20_000,
    ),
)

test(
  "attempts that got no answer replay alike through the Messages route, recorded with request ids as a real provider sends them: a cut stream, a plain body reset after its headers, a stall timed out, a 400 and an error event each with Anthropic's error code (details.error_code)",
  () =>
    withTimeout(
      withTempDir(async (dir) => {
        const body = (type: string, message: string, code: string) => ({ type: 'error', error: { type, message, details: { error_code: code } } })
        const cases: [string, Script, RunInput['providerOptions'], string][] = [
          ['cut stream', [answer.cutStream({ text: 'Half' })], { stream: true }, 'failed model_malformed'],
          ['plain reset after its headers', [answer.reset({ text: 'It is sun' }), answer.text('Sunny.')], {}, 'completed'],
          ['stall', [answer.stall({ text: 'It is' })], { stream: true }, 'failed model_timeout'],
          ['400 with a code', [answer.status(400, { body: body('invalid_request_error', 'prompt is too long: 210000 tokens > 200000 maximum', 'prompt_too_long') })], { stream: true }, 'failed model_failed'],
          ['error event with a code', [answer.malformed({ body: JSON.stringify(body('invalid_request_error', 'Output blocked', 'output_blocked')) })], { stream: true }, 'failed model_failed'],
        ]
        for (const [name, script, providerOptions, ending] of cases) {
          const runOn = async (label: string, served: Script, requestIds: boolean) => {
            const server = await scriptedModelServer(served, { requestIds })
            const log = await EventLog.open(join(dir, `${name} ${label}`))
            const sdk = new Anthropic({ apiKey: KEY, baseURL: server.origin, logLevel: 'off' })
            const model = new ModelExecutor({ timeoutMs: 10_000, idleTimeoutMs: 300, backoffMs: 1, maxBackoffMs: 5, createClient: (provider) => anthropicClient(sdk, { provider }) })
            const engine = new Engine({ log, model })
            try {
              const run = runInput(server, [], providerOptions, 'replay-failures')
              const outcome = await engine.run(run)
              assert.is(outcome.status === 'failed' ? `failed ${outcome.class}` : outcome.status, ending, `${name} ${label}`)
              assert.equal(server.unscripted, [], `${name} ${label}: every request scripted`)
              return await recordedRun(log, run.invocation.invocationId)
            } finally {
              await engine.drain().catch(() => undefined)
              await log.close()
              await server.close()
            }
          }
          // Recorded with request ids, as Anthropic sends one with every answer; replayed without (scriptOf does not replay them).
          const recorded = await runOn('recorded', script, true)
          assert.ok(
            recorded.some(({ event }) => event.fact.type === 'model.interrupted' && event.fact.provider?.requestId === 'req_0'),
            `${name}: the failure recorded its request id`,
          )
          const replayed = await runOn('replayed', scriptOf(recorded), false)
          assert.is(compareRuns(recorded, replayed)?.message, undefined, name)
        }
      }),
      60_000,
    ),
)

test(
  "a call's arguments in a plain Message: an empty text is the input {} (as streamed, and as the chat route's), and a text that is not JSON, which no Message can carry, is refused naming the call (streamed, it goes as it is)",
  withServer(
    [
      answer.toolCalls([{ name: 'get_weather', arguments: '' }]),
      answer.text('Done.'),
      answer.toolCalls([{ name: 'get_weather', arguments: '{"city": "Par' }]),
      answer.toolCalls([{ name: 'get_weather', arguments: '{"city": "Par' }]),
      answer.text('Done.'),
    ],
    async ({ server, log, engine }) => {
      const calls: unknown[] = []
      const tool = { ...weather(calls), inputSchema: { type: 'object', properties: { city: { type: 'string' } } } }
      const plain = runInput(server, [tool])
      assert.equal(await engine.run(plain), { status: 'completed' })
      assert.equal(calls, [{}])
      const [first] = only(await factsOf(log, plain.invocation.invocationId), 'model.completed')
      assert.is(first?.output.toolCalls[0]?.arguments, '{}')
      const refused = await engine.run(runInput(server, [tool]))
      assert.is(refused.status === 'failed' && refused.class, 'model_failed')
      assert.equal(refused.status === 'failed' && refused.provider, { status: 400, type: 'invalid_request_error', code: 'invalid_scripted_answer' })
      assert.match(refused.status === 'failed' ? (refused.message ?? '') : '', /calls\[0\]\.arguments is not JSON/)
      const streamed = runInput(server, [tool], { stream: true })
      assert.equal(await engine.run(streamed), { status: 'completed' })
      const rejected = only(await factsOf(log, streamed.invocation.invocationId), 'tool.rejected')
      assert.equal(rejected.map((fact) => [fact.reason, fact.input]), [['invalid_input', '{"city": "Par']])
    },
  ),
)

test(
  "an Anthropic SDK given server.baseUrl, not server.origin, asks for /v1/v1/messages: the 404 says which baseURL it takes",
  () =>
    withTimeout(
      withTempDir(async (dir) => {
        const server = await scriptedModelServer([answer.text('Unused.')])
        const log = await EventLog.open(join(dir, 'log'))
        const sdk = new Anthropic({ apiKey: KEY, baseURL: server.baseUrl, logLevel: 'off' })
        const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000, createClient: (provider) => anthropicClient(sdk, { provider }) }) })
        try {
          const outcome = await engine.run(runInput(server, []))
          assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
          assert.is(
            outcome.status === 'failed' && outcome.message,
            `the provider answered HTTP 404: scripted model server: no route POST /v1/v1/messages (it serves POST /v1/chat/completions and POST /v1/messages; an Anthropic SDK's baseURL is server.origin (${server.origin}), not server.baseUrl)`,
          )
          assert.is(server.requests.length, 0)
        } finally {
          await engine.drain().catch(() => undefined)
          await log.close()
          await server.close()
        }
      }),
      20_000,
    ),
)

test.run()
