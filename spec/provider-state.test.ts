/**
 * Opaque state a provider returns with an answer and requires back unchanged: Gemini's
 * `extra_content.google.thought_signature` on each tool call (its OpenAI-compatible endpoint answers
 * 400 to a replayed call without it), OpenRouter's `reasoning_details` on the assistant message, and
 * a custom client's `reasoningDetails` / `extraContent`. Raw `node:http` servers on 127.0.0.1 refuse
 * as the providers do; the engine runs on a real log. Recorded, redacted, sent back exactly as
 * recorded, after a crash too, and only when recorded: a run without it sends the bytes it always did.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type JsonObject, type ModelOutput, ModelExecutor, type ModelRequest, type ToolDefinition, recoverInvocations } from '../index.js'
import { type ChatRequest, type Responder, chatCompletionsServer, chunk, completion, json, sse, text } from './support/chat-completions-server.js'
import { effectTool, messageRun } from './support/faults-engine.js'
import { filesContaining } from './support/log-fixtures.js'
import { bounded } from './support/temp.js'

/** The model.completed outputs of `invocationId`, in order. */
const outputsOf = async (log: EventLog, invocationId: string): Promise<ModelOutput[]> =>
  (await log.invocationEvents(invocationId)).flatMap((stored) => (stored.event.fact.type === 'model.completed' ? [stored.event.fact.output] : []))
/** The assistant messages of a request. */
const assistants = (body: ChatRequest | undefined) => (body?.messages ?? []).filter((message) => message.role === 'assistant')

/** Limits of the model executor the runs use: a refusal fails the run at once, not retried. */
const EXECUTOR = { timeoutMs: 3_000, retries: 0 }

/** Runs `body` with an engine (EXECUTOR) on a fresh log in `dir`, then closes the log and `server`. */
async function withEngine(dir: string, server: { close(): Promise<void> }, body: (engine: Engine, log: EventLog) => Promise<void>): Promise<void> {
  try {
    const log = await EventLog.open(join(dir, 'log'))
    try {
      await body(new Engine({ log, model: new ModelExecutor(EXECUTOR) }), log)
    } finally {
      await log.close()
    }
  } finally {
    await server.close()
  }
}

const SIGNATURE = 'CiQBVKhc7nX0xQ2mZ3rLzNf1ybqgYd9oHk1uL0w5s8uT6cQmCj8BVKhc7u'
/** Google's words for a replayed call without its signature (its OpenAI-compatible endpoint, Gemini 3). */
const GEMINI_REFUSAL = [
  {
    error: {
      code: 400,
      message:
        'Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:echo` , position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.',
      status: 'INVALID_ARGUMENT',
    },
  },
]
/** As Gemini does: a request replaying a call it signed without that exact signature is refused. */
const geminiRule =
  (signed: Map<string, unknown>) =>
  (body: ChatRequest): Responder | undefined =>
    assistants(body).some((message) => (message.tool_calls ?? []).some((call) => signed.has(call.id) && JSON.stringify(call.extra_content) !== JSON.stringify(signed.get(call.id))))
      ? json(GEMINI_REFUSAL, 400)
      : undefined

for (const stream of [false, true]) {
  test(
    `${stream ? 'streamed' : 'plain JSON'}: Gemini's thought signature on a tool call (extra_content) is recorded and sent back with the call; a parallel call without one is sent without (Gemini answers 400 otherwise)`,
    bounded(15_000, async (dir) => {
      const extra = { google: { thought_signature: SIGNATURE } }
      const first = { index: 0, id: 'call_g1', type: 'function', function: { name: 'echo', arguments: '{"value":42}' } }
      const second = { index: 1, id: 'call_g2', type: 'function', function: { name: 'echo', arguments: '{"value":7}' } }
      const toolRound: Responder = stream
        ? sse([
            chunk({ role: 'assistant', tool_calls: [{ ...first, function: { name: 'echo', arguments: '' }, extra_content: { google: { thought_signature: SIGNATURE } } }] }),
            chunk({ tool_calls: [{ index: 0, function: { arguments: '{"value":42}' } }] }),
            chunk({ tool_calls: [second] }),
            chunk({}, 'tool_calls'),
          ])
        : json(completion({ content: null, tool_calls: [{ ...first, extra_content: extra }, second] }))
      const server = await chatCompletionsServer([toolRound, text('echoed')], geminiRule(new Map([['call_g1', extra]])))
      await withEngine(dir, server, async (engine, log) => {
        const outcome = await engine.run(messageRun(server.baseUrl, 'gemini', [effectTool()], stream ? { providerOptions: { stream: true } } : {}))
        assert.equal(outcome, { status: 'completed' })
        const outputs = await outputsOf(log, 'invocation-gemini')
        assert.equal(outputs[0]?.toolCalls, [
          { callId: 'call_g1', name: 'echo', arguments: '{"value":42}', extraContent: extra },
          { callId: 'call_g2', name: 'echo', arguments: '{"value":7}' },
        ])
        const calls = assistants(server.requests[1])[0]?.tool_calls
        assert.equal(calls?.map((call) => call.extra_content ?? null), [extra, null])
        assert.not.ok('extra_content' in (calls?.[1] ?? {}), 'no member at all for a call that had none')
        assert.ok(server.raw[1]?.includes(`"extra_content":${JSON.stringify(extra)}`), 'sent as recorded, byte for byte')
      })
    }),
  )
}

test(
  'streamed: extra_content objects of a call streamed in several parts are merged, member by member',
  bounded(10_000, async (dir) => {
    const server = await chatCompletionsServer([
      sse([
        chunk({ tool_calls: [{ index: 0, id: 'call_m', type: 'function', function: { name: 'echo', arguments: '{"value"' }, extra_content: { google: { thought_signature: SIGNATURE } } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: ':1}' }, extra_content: { google: { cache: 'c-1' }, other: [1, 2] } }] }),
        chunk({}, 'tool_calls'),
      ]),
      text('done'),
    ])
    await withEngine(dir, server, async (engine, log) => {
      assert.equal(await engine.run(messageRun(server.baseUrl, 'merge', [effectTool()], { providerOptions: { stream: true } })), { status: 'completed' })
      const merged = { google: { thought_signature: SIGNATURE, cache: 'c-1' }, other: [1, 2] }
      assert.equal((await outputsOf(log, 'invocation-merge'))[0]?.toolCalls[0]?.extraContent, merged)
      assert.equal(assistants(server.requests[1])[0]?.tool_calls?.[0]?.extra_content, merged)
    })
  }),
)

/** OpenRouter's reasoning_details of an Anthropic model's answer, as its JSON answer carries them. */
const DETAILS = [
  { type: 'reasoning.text', text: 'The user wants 42 echoed. ', signature: 'EqoBCkgIARABGAIiQL2m', format: 'anthropic-claude-v1', index: 0 },
  { type: 'reasoning.encrypted', data: 'gAAAAABoR3x9-ENCRYPTED', format: 'anthropic-claude-v1', index: 1 },
]
/** As OpenRouter (for Anthropic's reasoning models) does: a tool round sent back without its reasoning_details is refused. */
const openRouterRule = (expected: unknown) => (body: ChatRequest) =>
  assistants(body).some((message) => (message.tool_calls ?? []).length > 0 && JSON.stringify(message.reasoning_details) !== JSON.stringify(expected))
    ? json({ error: { code: 400, message: 'Provider returned error: messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block', metadata: { provider_name: 'Anthropic' } } }, 400)
    : undefined

for (const stream of [false, true]) {
  test(
    `${stream ? 'streamed (in parts joined by index, the signature last)' : 'plain JSON'}: OpenRouter's reasoning_details are recorded and sent back verbatim with the tool round and with the final answer in a continuation; malformed entries are dropped, not the answer`,
    bounded(15_000, async (dir) => {
      const call = { index: 0, id: 'call_or', type: 'function', function: { name: 'echo', arguments: '{"value":42}' } }
      const toolRound: Responder = stream
        ? sse([
            chunk({ role: 'assistant', reasoning: 'The user wants 42 echoed.', reasoning_details: [{ type: 'reasoning.text', text: 'The user ', format: 'anthropic-claude-v1', index: 0 }] }),
            chunk({ reasoning_details: [{ type: 'reasoning.text', text: 'wants 42 echoed. ', index: 0 }, 'junk', null] }),
            chunk({ reasoning_details: [{ type: 'reasoning.text', text: '', signature: 'EqoBCkgIARABGAIiQL2m', index: 0 }] }),
            chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'gAAAAABoR3x9-', format: 'anthropic-claude-v1', index: 1 }] }),
            chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'ENCRYPTED', index: 1 }] }),
            chunk({ content: null, tool_calls: [call] }),
            chunk({}, 'tool_calls'),
          ])
        : json(completion({ content: null, reasoning: 'The user wants 42 echoed.', reasoning_details: [DETAILS[0], 'junk', 7, DETAILS[1]], tool_calls: [call] }))
      // Entries streamed without an index are entries of their own, in order.
      const summary = [{ type: 'reasoning.summary', summary: 'Echoed.' }, { type: 'reasoning.summary', summary: 'Done.' }]
      const final: Responder = stream ? sse([chunk({ reasoning_details: summary.slice(0, 1) }), chunk({ reasoning_details: summary.slice(1), content: 'echoed 42' }), chunk({}, 'stop')]) : json(completion({ content: 'echoed 42', reasoning_details: summary }, 'stop'))
      const expected = stream
        ? [
            // The members in the order they first came, as streamed.
            { type: 'reasoning.text', text: 'The user wants 42 echoed. ', format: 'anthropic-claude-v1', index: 0, signature: 'EqoBCkgIARABGAIiQL2m' },
            { type: 'reasoning.encrypted', data: 'gAAAAABoR3x9-ENCRYPTED', format: 'anthropic-claude-v1', index: 1 },
          ]
        : DETAILS
      const server = await chatCompletionsServer([toolRound, final, text('still 42')], openRouterRule(expected))
      await withEngine(dir, server, async (engine, log) => {
        const options = stream ? { providerOptions: { stream: true } } : {}
        assert.equal(await engine.run(messageRun(server.baseUrl, 'router', [effectTool()], options)), { status: 'completed' })
        const outputs = await outputsOf(log, 'invocation-router')
        assert.equal(outputs.map((output) => output.reasoningDetails), [expected, summary])
        assert.is(outputs[0]?.reasoning, 'The user wants 42 echoed.', stream ? 'reasoning streamed beside them is kept as before' : 'reasoning beside them is kept as before')
        assert.ok(server.raw[1]?.includes(`"reasoning_details":${JSON.stringify(expected)}`), 'sent back byte for byte')
        // A continuation rebuilds the transcript from the facts: each answer's reasoning_details go back with it.
        const source = (await log.runSource('session-router', 'run-router'))?.boundary
        assert.ok(source)
        const next = messageRun(server.baseUrl, 'router-on', [effectTool()], options)
        const continued = await engine.run({ ...next, invocation: { ...next.invocation, sessionId: 'session-router' }, work: { kind: 'continuation', source, content: 'and now?' } })
        assert.equal(continued, { status: 'completed' })
        assert.equal(assistants(server.requests[2]).map((message) => message.reasoning_details), [expected, summary])
      })
    }),
  )
}

test(
  'a run cut short (its log closed under a running tool, as a process dying) is ended by recoverInvocations; its continuation sends the recorded reasoning_details and thought signature back',
  bounded(20_000, async (dir) => {
    const extra = { google: { thought_signature: SIGNATURE } }
    const call = { id: 'call_c', type: 'function', function: { name: 'slow', arguments: '{}' }, extra_content: extra }
    const server = await chatCompletionsServer([json(completion({ content: null, reasoning_details: DETAILS, tool_calls: [call] })), text('resumed')], (body) => geminiRule(new Map([['call_c', extra]]))(body) ?? openRouterRule(DETAILS)(body))
    const path = join(dir, 'log')
    let log = await EventLog.open(path)
    try {
      let started!: () => void
      const running = new Promise<void>((resolve) => (started = resolve))
      const slow: ToolDefinition = {
        name: 'slow',
        execute: (_input, { signal }) =>
          new Promise((_, reject) => {
            started()
            signal.addEventListener('abort', () => reject(signal.reason), { once: true })
          }),
      }
      const engine = new Engine({ log, model: new ModelExecutor(EXECUTOR) })
      const handle = await engine.start(messageRun(server.baseUrl, 'cut', [slow]))
      await running
      await log.close()
      assert.is(await handle.wait().then(() => 'ended', (error: { code?: string }) => error.code), 'LOG_CLOSED')
      await engine.drain()

      log = await EventLog.open(path)
      assert.is(await recoverInvocations(log), 1, 'recovery ends the run')
      const recorded = (await outputsOf(log, 'invocation-cut'))[0]
      assert.equal([recorded?.reasoningDetails, recorded?.toolCalls[0]?.extraContent], [DETAILS, extra])
      const source = (await log.runSource('session-cut', 'run-cut'))?.boundary
      assert.ok(source)
      const next = messageRun(server.baseUrl, 'cut-on', [slow])
      const again = new Engine({ log, model: new ModelExecutor(EXECUTOR) })
      const outcome = await again.run({ ...next, invocation: { ...next.invocation, sessionId: 'session-cut' }, work: { kind: 'continuation', source, content: 'the slow call did not happen; go on', allowPriorUnknown: true } })
      assert.equal(outcome, { status: 'completed' })
      const replayed = assistants(server.requests[1])[0]
      assert.equal([replayed?.reasoning_details, replayed?.tool_calls?.[0]?.extra_content], [DETAILS, extra])
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  'a run whose provider returns no such state sends the bytes it always did: no reasoning_details or extra_content member, the same request digests as 0.9',
  bounded(10_000, async (dir) => {
    const call = { index: 0, id: 'call_plain', type: 'function', function: { name: 'echo', arguments: '{"value":42}' } }
    // Empty or malformed state is none: it adds no member either.
    const server = await chatCompletionsServer([json(completion({ content: 'let me echo', reasoning_details: [], tool_calls: [{ ...call, extra_content: null }] })), text('echoed 42')])
    await withEngine(dir, server, async (engine, log) => {
      assert.equal(await engine.run(messageRun(server.baseUrl, 'plain', [effectTool()], { providerOptions: { temperature: 0 } })), { status: 'completed' })
      assert.not.ok(server.raw.some((body) => /reasoning_details|extra_content/.test(body)), server.raw[1])
      const digests = (await log.invocationEvents('invocation-plain')).flatMap((stored) => (stored.event.fact.type === 'model.requested' ? [stored.event.fact.requestDigest] : []))
      // As 0.9.0 computed them for this run (its request bodies are these bytes).
      assert.equal(digests, ['sha256:b4e5e5073866f3cda75c298c8d32efdfd9c6d85cdcfd54fc75041c13f679db65', 'sha256:65646a708a5cfa1e4a431319500ec1f7e406e744c0cc1127cd6149cdf79da2d5'])
    })
  }),
)

test(
  "the provider's key echoed in reasoning_details or a call's extra_content is redacted before anything is recorded or sent back: no file of the log directory holds it",
  bounded(10_000, async (dir) => {
    const key = 'sk-state-1234567890abcdefXYZ0987'
    const details = [{ type: 'reasoning.text', text: `The key is ${key}.`, signature: `sig-${key}`, index: 0 }, { [`k-${key}`]: 1, type: 'reasoning.encrypted', data: 'gAAAA' }]
    const call = { id: 'call_k', type: 'function', function: { name: 'echo', arguments: '{"value":1}' }, extra_content: { google: { thought_signature: key } } }
    const server = await chatCompletionsServer([json(completion({ content: null, reasoning_details: details, tool_calls: [call] })), text('done')])
    await withEngine(dir, server, async (engine, log) => {
      const run = messageRun(server.baseUrl, 'secret', [effectTool()])
      const outcome = await engine.run({ ...run, provider: { ...run.provider, apiKey: key } })
      assert.equal(outcome, { status: 'completed' })
      const output = (await outputsOf(log, 'invocation-secret'))[0]
      assert.equal(output?.reasoningDetails, [
        { type: 'reasoning.text', text: 'The key is [redacted].', signature: 'sig-[redacted]', index: 0 },
        { 'k-[redacted]': 1, type: 'reasoning.encrypted', data: 'gAAAA' },
      ])
      assert.equal(output?.toolCalls[0]?.extraContent, { google: { thought_signature: '[redacted]' } })
      assert.not.ok(server.raw[1]?.includes(key), 'nor is it sent back')
      assert.ok(server.raw[1]?.includes('"thought_signature":"[redacted]"'), 'what is sent back is what was recorded')
    })
    for (const piece of [key, key.slice(3, 19), key.slice(12)]) assert.equal(await filesContaining(join(dir, 'log'), piece), [], piece)
  }),
)

test(
  "a custom ModelClient's reasoningDetails and a call's extraContent are recorded and come back in its next request's body; what a fact cannot hold is dropped, not the answer",
  bounded(10_000, async (dir) => {
    const thinking: JsonObject[] = [{ type: 'thinking', thinking: 'Echo 42.', signature: 'ErUBCkYIBRgCIkA' }, { type: 'redacted_thinking', data: 'EmwKAhgBEgy' }]
    const bodies: ModelRequest['body'][] = []
    const answers: ModelOutput[] = [
      {
        toolCalls: [
          { callId: 'call_1', name: 'echo', arguments: '{"value":42}', extraContent: { anthropic: { block: 3 } } },
          // Not an object, or empty: dropped, the call kept.
          { callId: 'call_2', name: 'echo', arguments: '{"value":1}', extraContent: ['x'] as unknown as JsonObject },
          { callId: 'call_3', name: 'echo', arguments: '{"value":2}', extraContent: {} },
        ],
        finishReason: 'tool_calls',
        // Entries that are no plain JSON objects are dropped one by one.
        reasoningDetails: [...thinking, 'junk' as unknown as JsonObject, { n: Number.NaN }],
      },
      // Past the bounds (257 entries) the whole member is dropped, the answer kept.
      { text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: Array.from({ length: 257 }, (_, index) => ({ index })) },
    ]
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const model = new ModelExecutor({
        retries: 0,
        createClient: () => ({
          complete: async (request) => {
            bodies.push(request.body)
            return { kind: 'completed', output: answers.shift() as ModelOutput }
          },
        }),
      })
      const engine = new Engine({ log, model })
      assert.equal(await engine.run(messageRun('http://127.0.0.1:9/v1', 'custom', [effectTool()])), { status: 'completed' })
      const outputs = await outputsOf(log, 'invocation-custom')
      assert.equal(outputs[0]?.reasoningDetails, thinking)
      assert.equal(
        outputs[0]?.toolCalls.map((call) => call.extraContent ?? null),
        [{ anthropic: { block: 3 } }, null, null],
      )
      assert.is(outputs[1]?.text, 'done')
      assert.not.ok('reasoningDetails' in (outputs[1] ?? {}), 'past the bounds: none recorded')
      const assistant = bodies[1]?.messages.find((message) => message.role === 'assistant')
      assert.ok(assistant?.role === 'assistant')
      assert.equal(assistant.reasoning_details, thinking)
      assert.equal(
        assistant.tool_calls?.map((call) => call.extra_content ?? null),
        [{ anthropic: { block: 3 } }, null, null],
      )
    } finally {
      await log.close()
    }
  }),
)

test(
  'an entry of reasoningDetails holding an object of more members than the log stores (65,535) within 1 MiB of JSON is past the bounds: the member is dropped, the answer kept (the append was refused, LOG_INVALID_EVENT, and the run threw)',
  bounded(20_000, async (dir) => {
    const wide: Record<string, number> = {}
    for (let member = 0; member < 65_536; member += 1) wide[`k${member}`] = 0
    const entries: JsonObject[] = [{ type: 'reasoning.encrypted', data: 'gAAAA' }, { type: 'reasoning.text', text: 'wide', extra: wide }]
    assert.ok(JSON.stringify(entries).length < 1_048_576, 'within the size bound')
    const call = { id: 'call_w', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    // The built-in client's plain JSON answer, then a custom client's.
    const server = await chatCompletionsServer([json(completion({ content: null, reasoning_details: entries, tool_calls: [call] })), text('done')])
    await withEngine(dir, server, async (engine, log) => {
      assert.equal(await engine.run(messageRun(server.baseUrl, 'wide', [effectTool()])), { status: 'completed' })
      const outputs = await outputsOf(log, 'invocation-wide')
      assert.equal(outputs[0]?.toolCalls.map((one) => one.callId), ['call_w'], 'the answer is recorded')
      assert.not.ok('reasoningDetails' in (outputs[0] ?? {}), 'past the bounds: none recorded')
      const answers: ModelOutput[] = [{ text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: entries }]
      const custom = new ModelExecutor({ retries: 0, createClient: () => ({ complete: async () => ({ kind: 'completed', output: answers.shift() as ModelOutput }) }) })
      assert.equal(await new Engine({ log, model: custom }).run(messageRun('http://127.0.0.1:9/v1', 'wide-custom', [effectTool()])), { status: 'completed' })
      const [output] = await outputsOf(log, 'invocation-wide-custom')
      assert.is(output?.text, 'done')
      assert.not.ok('reasoningDetails' in (output ?? {}), 'past the bounds: none recorded')
    })
  }),
)

test(
  "streamed: a reasoning_details part carrying an entry's index but another type is another entry, not a piece of that one (merged, it held one type's members under the other's)",
  bounded(10_000, async (dir) => {
    const call = { index: 0, id: 'call_t', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    const server = await chatCompletionsServer([
      sse([
        chunk({ reasoning_details: [{ type: 'reasoning.text', text: 'Echo ', format: 'google-gemini-v1', index: 0 }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.text', text: 'one.', index: 0 }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'CiQBVKhc', format: 'google-gemini-v1', index: 0 }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: '7nX0', index: 0 }] }),
        chunk({ content: null, tool_calls: [call] }),
        chunk({}, 'tool_calls'),
      ]),
      text('done'),
    ])
    await withEngine(dir, server, async (engine, log) => {
      assert.equal(await engine.run(messageRun(server.baseUrl, 'types', [effectTool()], { providerOptions: { stream: true } })), { status: 'completed' })
      const expected = [
        { type: 'reasoning.text', text: 'Echo one.', format: 'google-gemini-v1', index: 0 },
        { type: 'reasoning.encrypted', data: 'CiQBVKhc7nX0', format: 'google-gemini-v1', index: 0 },
      ]
      assert.equal((await outputsOf(log, 'invocation-types'))[0]?.reasoningDetails, expected)
      assert.equal(assistants(server.requests[1])[0]?.reasoning_details, expected)
    })
  }),
)

test(
  'streamed: reasoning_details parts without an index continue the text entry before them until its signature, so a thought streamed in many pieces stays one entry (each piece an entry, past 256 pieces the whole state was dropped)',
  bounded(10_000, async (dir) => {
    const call = { index: 0, id: 'call_u', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    const pieces = Array.from({ length: 300 }, (_, i) => chunk({ reasoning_details: [{ type: 'reasoning.text', text: `${i} ` }] }))
    const server = await chatCompletionsServer([
      sse([
        chunk({ reasoning_details: [{ type: 'reasoning.text', text: 'First: ', format: 'anthropic-claude-v1' }] }),
        ...pieces,
        chunk({ reasoning_details: [{ type: 'reasoning.text', text: '', signature: 'sig-1' }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.text', text: 'Second.' }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.text', signature: 'sig-2' }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'AAA' }] }),
        chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'BBB' }] }),
        chunk({ content: null, tool_calls: [call] }),
        chunk({}, 'tool_calls'),
      ]),
      text('done'),
    ])
    await withEngine(dir, server, async (engine, log) => {
      assert.equal(await engine.run(messageRun(server.baseUrl, 'unindexed', [effectTool()], { providerOptions: { stream: true } })), { status: 'completed' })
      const expected = [
        { type: 'reasoning.text', text: `First: ${Array.from({ length: 300 }, (_, i) => `${i} `).join('')}`, format: 'anthropic-claude-v1', signature: 'sig-1' },
        { type: 'reasoning.text', text: 'Second.', signature: 'sig-2' },
        { type: 'reasoning.encrypted', data: 'AAA' },
        { type: 'reasoning.encrypted', data: 'BBB' },
      ]
      assert.equal((await outputsOf(log, 'invocation-unindexed'))[0]?.reasoningDetails, expected)
      assert.equal(assistants(server.requests[1])[0]?.reasoning_details, expected)
    })
  }),
)

test.run()
