/**
 * Model requests and answers at their edges (DESIGN §5), from a review: provider options that
 * would override what the engine sets and records, token usage a fact cannot hold, and a model
 * answer the log refuses (the step is interrupted, never left in flight).
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { JsonObject, ModelClient, RunInput } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { everyFile } from './support/faults-files.js'
import { countingTool, engineTest, factsOf, only, refusedWithoutWriting, storedEvents, typesOf } from './support/engine-fixtures.js'

test(
  'a provider error whose message has a lone surrogate is recorded well-formed: a 503 is retried, a 400 ends the run model_failed',
  engineTest(
    [
      answer.status(503, { body: { error: { message: 'overloaded \ud800 now' } } }),
      answer.text('done'),
      answer.status(400, { body: { error: { message: 'bad \udc00 request' } } }),
    ],
    {},
    async (h) => {
      assert.equal(await h.run(h.input('retried')), { status: 'completed' })
      const [interrupted] = only(await factsOf(h.log, 'invocation-retried'), 'model.interrupted')
      assert.is(interrupted?.status, 'retryable_failure')
      assert.match(interrupted?.message ?? '', /overloaded \ufffd now/)
      const ended = await h.run(h.input('refused'))
      assert.is(ended.status === 'failed' ? ended.class : ended.status, 'model_failed')
      assert.match(ended.status === 'failed' ? (ended.message ?? '') : '', /bad \ufffd request/)
    },
  ),
)

test(
  'a final answer the provider filtered away (finish_reason content_filter, no text) ends the run failed model_filtered; a filtered answer that kept some text completes',
  engineTest([answer.text('', { finishReason: 'content_filter' }), answer.text('the part that passed', { finishReason: 'content_filter' })], {}, async (h) => {
    assert.equal(await h.run(h.input('filtered')), {
      status: 'failed',
      class: 'model_filtered',
      message: 'the provider filtered the final answer (finish_reason content_filter) and returned no text',
    })
    const filtered = await factsOf(h.log, 'invocation-filtered')
    assert.equal(filtered.map((fact) => fact.type), ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'])
    const completed = filtered[2]
    assert.is(completed?.type === 'model.completed' ? completed.output.finishReason : undefined, 'content_filter', 'the finish reason is recorded')
    assert.equal(await h.run(h.input('partial')), { status: 'completed' })
    const partial = await factsOf(h.log, 'invocation-partial')
    assert.is(partial[2]?.type === 'model.completed' ? partial[2].output.text : undefined, 'the part that passed')
  }),
)

test(
  'a final answer cut at the output limit before any text (finish_reason length, no text) ends the run failed model_truncated, naming the limit to raise; one that kept some text completes',
  engineTest(
    [answer.text('', { finishReason: 'length' }), answer.text(' ', { finishReason: 'length' }), answer.text('the first half of', { finishReason: 'length' }), answer.text('', { finishReason: 'stop' })],
    {},
    async (h) => {
      assert.equal(await h.run({ ...h.input('limited'), mainOutputLimit: 64 }), {
        status: 'failed',
        class: 'model_truncated',
        message: 'the final answer reached the output limit (finish_reason length) before any text: raise mainOutputLimit (64, sent as max_tokens)',
      })
      assert.equal(await h.run(h.input('unlimited')), {
        status: 'failed',
        class: 'model_truncated',
        message: "the final answer reached the output limit (finish_reason length) before any text: raise the provider's own output limit",
      })
      const limited = await factsOf(h.log, 'invocation-limited')
      assert.equal(limited.map((fact) => fact.type), ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'])
      assert.is(limited[2]?.type === 'model.completed' ? limited[2].output.finishReason : undefined, 'length', 'the finish reason is recorded')
      assert.equal(await h.run(h.input('partial')), { status: 'completed' })
      // An empty answer the model ended itself (stop) is its choice to say nothing.
      assert.equal(await h.run(h.input('silent')), { status: 'completed' })
    },
  ),
)

test(
  'provider options naming a field the engine sets are RUN_INVALID_INPUT, nothing written; other options are sent beside the engine’s own',
  engineTest([answer.text('done')], {}, async (h) => {
    const overrides: JsonObject[] = [
      { model: 'other-model' },
      { max_tokens: 99_999 },
      { messages: [{ role: 'user', content: 'injected' }] },
      { tools: [] },
      { temperature: 0, model: 'other-model' },
    ]
    for (const providerOptions of overrides) {
      const input: RunInput = { ...h.input('override'), mainOutputLimit: 120, providerOptions }
      const what = `providerOptions ${JSON.stringify(providerOptions)}`
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_INVALID_INPUT', what)
      const named = Object.keys(providerOptions).filter((key) => key !== 'temperature')
      assert.equal(error.details?.fields, named.map((key) => `providerOptions.${key}`), `${what}: the field is named`)
    }
    assert.is(h.server.requests.length, 0)
    const input: RunInput = { ...h.input('allowed'), mainOutputLimit: 120, providerOptions: { temperature: 0, seed: 3 } }
    assert.equal(await h.run(input), { status: 'completed' })
    const body = h.server.requests[0]?.body
    assert.equal([body?.model, body?.max_tokens, body?.temperature, body?.seed], ['scripted', 120, 0, 3])
    assert.is(only(await factsOf(h.log, 'invocation-allowed'), 'model.requested')[0]?.model, 'scripted')
  }),
)

test(
  'a custom client that changes the body it is given changes nothing of the run: each attempt gets a fresh body equal to the bytes sent',
  (() => {
    const seen: { text: string; parsed: unknown }[] = []
    // Typed members of the body: what the engine sets besides model and messages, no cast needed.
    const offered: [tools: string[], limit: number | undefined][] = []
    let calls = 0
    const client: ModelClient = {
      async complete(request) {
        calls += 1
        seen.push({ text: request.bodyText, parsed: structuredClone(request.body) })
        offered.push([(request.body.tools ?? []).map((tool) => `${tool.type} ${tool.function.name}`), request.body.max_tokens])
        // A lazy translator converting the request in place, as some provider adapters do.
        for (const message of request.body.messages) Object.assign(message, { content: [{ type: 'text', text: 'rewritten' }] })
        for (const tool of request.body.tools ?? []) tool.function.parameters.mutated = true
        ;(request.body as unknown as Record<string, { tier?: string }>).metadata = { tier: 'changed' }
        if (calls === 1) return { kind: 'interrupted', status: 'retryable_failure', message: 'try again' }
        if (calls === 2) return { kind: 'completed', output: { toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{"value":1}' }], finishReason: 'tool_calls' } }
        return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } }
      },
    }
    return engineTest([], { model: { createClient: () => client } }, async (h) => {
      const input: RunInput = { ...h.input('mutating'), mainOutputLimit: 64, providerOptions: { metadata: { tier: 'a' } } }
      assert.equal(await h.run(input), { status: 'completed' })
      assert.is(seen.length, 3)
      assert.equal(offered, Array(3).fill([['function echo'], 64]), 'the catalog as function tools and the output limit, each attempt')
      for (const [index, { text, parsed }] of seen.entries()) assert.equal(parsed, JSON.parse(text), `attempt ${index + 1}: the body is the bytes sent`)
      assert.is(seen[1]?.text, seen[0]?.text, 'the retry sends the same bytes')
      const last = seen[2]?.parsed as { messages: { content: unknown }[]; tools: { function: { parameters: Record<string, unknown> } }[]; metadata: unknown }
      assert.is(last.messages[0]?.content, 'question mutating', 'the transcript is untouched')
      assert.not.ok('mutated' in (last.tools[0]?.function.parameters ?? {}), 'the tool schema is untouched')
      assert.equal(last.metadata, { tier: 'a' })
      const digests = only(await factsOf(h.log, 'invocation-mutating'), 'model.requested').map((f) => f.requestDigest)
      assert.is(digests[0], digests[1])
    })
  })(),
)

for (const stream of [false, true]) {
  test(
    `token usage that is not a non-negative integer is dropped and the answer recorded (${stream ? 'SSE' : 'JSON'})`,
    engineTest(
      [
        answer.text('first', { usage: { prompt_tokens: 12.5, completion_tokens: -1 } }),
        answer.text('second', { usage: { prompt_tokens: 7, completion_tokens: 2 ** 60 } }),
      ],
      { stream },
      async (h) => {
        for (const [name, usage] of [
          ['fractional', undefined],
          ['huge', { inputTokens: 7 }],
        ] as const) {
          assert.equal(await h.run(h.input(name)), { status: 'completed' }, name)
          const completed = only(await factsOf(h.log, `invocation-${name}`), 'model.completed')
          assert.is(completed.length, 1, `${name}: the answer is recorded`)
          assert.equal(completed[0]?.output.usage, usage, `${name}: only the counts a fact can hold are kept`)
        }
      },
    ),
  )
}

/** A client whose every answer arms a clock fault for the next `facts` facts (each gets recordedAt -1, which the log refuses), and the engine clock it breaks. */
function clockFaults(facts: number): { client: ModelClient; now: () => number } {
  let faults = 0
  let clock = Date.UTC(2024, 0, 1)
  return {
    now: () => (faults > 0 ? ((faults -= 1), -1) : (clock += 1)),
    client: {
      async complete() {
        faults = facts
        return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } }
      },
    },
  }
}

test(
  'a model answer the log refuses: model.interrupted{failed} closes the step before invocation.ended{failed, engine_error}',
  (() => {
    // The answer gets an invalid recordedAt, the interruption a good one.
    const { client, now } = clockFaults(1)
    return engineTest([], { model: { createClient: () => client }, engine: { now } }, async (h) => {
      const running = await h.start(h.input('refused'))
      await rejectsWithCode(() => running.wait(), 'LOG_INVALID_EVENT', 'wait()')
      assert.equal(await typesOf(h.log, 'invocation-refused'), ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'])
      const facts = await factsOf(h.log, 'invocation-refused')
      const interrupted = only(facts, 'model.interrupted')[0]
      assert.equal([interrupted?.stepId, interrupted?.status], ['step-1', 'failed'])
      const ended = only(facts, 'invocation.ended')[0]
      assert.equal([ended?.outcome.status, ended?.outcome.status === 'failed' ? ended.outcome.class : undefined], ['failed', 'engine_error'])
      const prefix = await h.log.prefix(1_000, 1 << 20)
      assert.equal(prefix.projectInvocation('invocation-refused'), { terminal: 'failed', uncertainOperations: [], unfinishedModelSteps: [] })
      assert.is((await storedEvents(h.log)).length, 4)
    })
  })(),
)

test(
  'a custom client that answers something other than a ModelResponse fails its step as malformed (model_malformed), with what is wrong named; nothing is retried',
  (() => {
    const answers: unknown[] = [
      undefined,
      { kind: 'completed' },
      { kind: 'completed', output: { text: 'done', toolCalls: [{ name: 'echo' }], finishReason: 'stop' } },
      { kind: 'completed', output: { text: 7, toolCalls: [], finishReason: 'stop' } },
      { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: null } },
      { kind: 'interrupted', status: 'paused', message: 'no such status' },
      'done',
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return answers[calls++] as never
      },
    }
    return engineTest([], { model: { createClient: () => client } }, async (h) => {
      for (const [index] of answers.entries()) {
        const outcome = await h.run(h.input(`junk-${index}`))
        assert.equal([outcome.status, outcome.status === 'failed' ? outcome.class : undefined], ['failed', 'model_malformed'], `answer ${index}`)
        const interrupted = only(await factsOf(h.log, `invocation-junk-${index}`), 'model.interrupted')
        assert.is(interrupted.length, 1, `answer ${index}: one attempt, not retried`)
        assert.match(interrupted[0]?.message ?? '', /not a ModelResponse/, `answer ${index}`)
      }
      assert.is(calls, answers.length)
      // A tool call without an id could not be answered by a tool message: malformed too, and no tool runs.
      answers.push({ kind: 'completed', output: { toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{}' }, { callId: '', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls' } })
      const echo = countingTool()
      const outcome = await h.run(h.input('nameless', { tools: [echo] }))
      assert.equal([outcome.status, outcome.status === 'failed' ? outcome.class : undefined], ['failed', 'model_malformed'])
      assert.is(echo.calls.length, 0)
      const facts = await factsOf(h.log, 'invocation-nameless')
      assert.equal(only(facts, 'model.interrupted').map((fact) => fact.message), ['the model client returned a tool call without an id (output.toolCalls[1].callId is empty)'])
      assert.is(only(facts, 'model.completed').length, 0)
    })
  })(),
)

test(
  "a custom client's answer is recorded without what the output has no place for (other members, token counts that are not whole numbers, text null): an answer already paid for is not lost; a cancel the run did not ask for fails the step",
  (() => {
    const answers: unknown[] = [
      // Anthropic-style extras: cache token counts, a stop sequence, a count of 12.5.
      {
        kind: 'completed',
        output: { text: 'first', toolCalls: [], finishReason: 'stop', stopSequence: null, usage: { inputTokens: 12.5, outputTokens: 3, cacheReadTokens: 100 } },
      },
      // text null beside a call that carries its index and type; no usable count at all.
      {
        kind: 'completed',
        output: { text: null, toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{"value":1}', index: 0, type: 'function' }], finishReason: 'tool_calls', usage: { inputTokens: null } },
      },
      { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } },
      // Its own SDK aborted, not the run.
      { kind: 'interrupted', status: 'cancelled', message: 'the SDK aborted the request' },
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return answers[calls++] as never
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      assert.equal(await h.run(h.input('extras')), { status: 'completed' })
      const first = only(await factsOf(h.log, 'invocation-extras'), 'model.completed').map((fact) => fact.output)
      assert.equal(first, [{ text: 'first', toolCalls: [], finishReason: 'stop', usage: { outputTokens: 3 } }])
      const echo = countingTool()
      assert.equal(await h.run(h.input('call', { tools: [echo] })), { status: 'completed' })
      assert.is(echo.calls.length, 1)
      const outputs = only(await factsOf(h.log, 'invocation-call'), 'model.completed').map((fact) => fact.output)
      assert.equal(outputs[0], { toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{"value":1}' }], finishReason: 'tool_calls' })
      const outcome = await h.run(h.input('unasked'))
      assert.equal([outcome.status, outcome.status === 'failed' ? outcome.class : undefined], ['failed', 'model_failed'], 'not cancelled: nobody cancelled it')
      assert.equal(only(await factsOf(h.log, 'invocation-unasked'), 'model.interrupted').map((fact) => [fact.status, fact.message]), [
        ['failed', 'the model client reported the request cancelled, but the run was not cancelled: the SDK aborted the request'],
      ])
    })
  })(),
)

test(
  "a custom client's cached and reasoning token counts are taken by the rules of the other counts: a non-negative whole number is recorded, anything else dropped, not the answer",
  (() => {
    const usages: unknown[] = [
      { inputTokens: 100, outputTokens: 20, cachedInputTokens: 80, reasoningTokens: 12 },
      { inputTokens: 100, cachedInputTokens: -1, reasoningTokens: 2.5 },
      { cachedInputTokens: '80', reasoningTokens: null },
      { reasoningTokens: 0 },
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return { kind: 'completed', output: { text: `answer ${calls}`, toolCalls: [], finishReason: 'stop', usage: usages[calls++] } } as never
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      const recorded: unknown[] = []
      for (const name of ['all', 'bad', 'none', 'zero']) {
        assert.equal(await h.run(h.input(name)), { status: 'completed' })
        recorded.push(...only(await factsOf(h.log, `invocation-${name}`), 'model.completed').map((fact) => fact.output.usage))
      }
      assert.equal(recorded, [{ inputTokens: 100, outputTokens: 20, cachedInputTokens: 80, reasoningTokens: 12 }, { inputTokens: 100 }, undefined, { reasoningTokens: 0 }])
    })
  })(),
)

test(
  "a custom client's responseId is recorded when it is a string of 1–256 characters, and redacted of the provider's secrets; any other is dropped, not the answer",
  (() => {
    const key = 'sk-client-1234567890abcdefXYZ'
    // 256 astral characters are 512 UTF-16 units: counted as the fact schema counts, by character.
    const ids: unknown[] = ['msg_01XFDUDYJgAACzvnptvVoYEL', 'r'.repeat(256), '😀'.repeat(256), 'r'.repeat(257), '', 42, null, `resp-${key}`]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop', responseId: ids[calls++] } } as never
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      const recorded: unknown[] = []
      for (const [index] of ids.entries()) {
        const input = h.input(`id-${index}`)
        assert.equal(await h.run({ ...input, provider: { ...input.provider, apiKey: key } }), { status: 'completed' })
        recorded.push(...only(await factsOf(h.log, `invocation-id-${index}`), 'model.completed').map((fact) => fact.output.responseId))
      }
      assert.equal(recorded, ['msg_01XFDUDYJgAACzvnptvVoYEL', 'r'.repeat(256), '😀'.repeat(256), undefined, undefined, undefined, undefined, 'resp-[redacted]'])
    })
  })(),
)

test(
  "a responseId is redacted as a failure message is (encoded forms, masked pieces), not only of whole keys as text is: it is never sent back, and an id the redaction makes too long is dropped, not the answer",
  (() => {
    // A key with the characters URL-encoding changes, as base64-alphabet keys have.
    const key = 'sk-client/1234567890+abcdefXYZ'
    const ids = [
      `resp-${encodeURIComponent(key)}`,
      `resp-${key.slice(0, 12)}****${key.slice(-4)}`,
      `resp-${Buffer.from(key).toString('base64')}`,
      `resp-${Buffer.from(key).toString('hex')}`,
      // 32 pieces of 8 characters: each redacted to 10, 320 in all, more than a fact holds.
      key.slice(0, 8).repeat(32),
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop', responseId: ids[calls++] } } as never
      },
    }
    const needles = [encodeURIComponent(key), Buffer.from(key).toString('base64').slice(4, 36), Buffer.from(key).toString('hex')]
    for (let at = 0; at + 8 <= key.length; at += 1) needles.push(key.slice(at, at + 8))
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      const recorded: (string | undefined)[] = []
      for (const [index] of ids.entries()) {
        const input = h.input(`masked-${index}`)
        assert.equal(await h.run({ ...input, provider: { ...input.provider, apiKey: key } }), { status: 'completed' }, `${index}`)
        recorded.push(...only(await factsOf(h.log, `invocation-masked-${index}`), 'model.completed').map((fact) => fact.output.responseId))
      }
      assert.equal(recorded, ['resp-[redacted]', 'resp-[redacted]****fXYZ', 'resp-[redacted]', 'resp-[redacted]', undefined])
      // The write-ahead log holds every fact written: the raw files, as spec/faults-secrets.test.ts reads them.
      for (const file of await everyFile(h.logPath)) {
        assert.equal(
          needles.filter((needle) => file.bytes.includes(Buffer.from(needle))),
          [],
          file.path,
        )
      }
    })
  })(),
)

test(
  "a custom client's provider object is taken member by member, as the built-in client's: what fits is recorded in model.interrupted and the failed outcome, redacted as the message is; what does not is dropped, never the failure",
  (() => {
    const key = 'sk-client-1234567890abcdefXYZ'
    const given: unknown[] = [
      { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' },
      { status: 'bad', code: { nested: true }, type: 't'.repeat(129), param: 7, extra: 'not a member' },
      { status: 700, code: 4031, type: 'permission_error', param: null },
      { status: 401.5, code: `invalid_api_key ${key}` },
      'context_length_exceeded',
      null,
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return { kind: 'interrupted', status: 'failed', message: 'refused', provider: given[calls++] } as never
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      const recorded: unknown[] = []
      for (const [index] of given.entries()) {
        const input = h.input(`refusal-${index}`)
        const outcome = await h.run({ ...input, provider: { ...input.provider, apiKey: key } })
        const [interrupted] = only(await factsOf(h.log, `invocation-refusal-${index}`), 'model.interrupted')
        assert.is(outcome.status === 'failed' && outcome.class, 'model_failed', `${index}`)
        assert.equal(outcome.status === 'failed' ? outcome.provider : 'none', interrupted?.provider, `${index}`)
        assert.is(outcome.status === 'failed' && 'provider' in outcome, interrupted?.provider !== undefined, `${index}: no empty member`)
        recorded.push(interrupted?.provider)
      }
      assert.equal(recorded, [
        { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' },
        undefined,
        { code: '4031', type: 'permission_error' },
        { code: 'invalid_api_key [redacted]' },
        undefined,
        undefined,
      ])
    })
  })(),
)

test(
  "a custom client's requestId, in a completed output or an interrupted answer's provider, is recorded when a string of 1–256 characters, redacted of the provider's secrets as a failure message is; any other, or one whose getter throws, is dropped, never the answer nor the rest of provider",
  (() => {
    const key = 'sk-client/1234567890+abcdefXYZ'
    const throwing = (fields: Record<string, unknown>, name: string) =>
      Object.defineProperty(fields, name, {
        enumerable: true,
        get() {
          throw new Error(`no ${name} today`)
        },
      })
    const done = { text: 'done', toolCalls: [], finishReason: 'stop' }
    const answers: unknown[] = [
      { kind: 'completed', output: { ...done, responseId: 'chatcmpl-1', requestId: 'req_01' } },
      // 256 astral characters are 512 UTF-16 units: counted as the fact schema counts, by character.
      { kind: 'completed', output: { ...done, requestId: '😀'.repeat(256) } },
      { kind: 'completed', output: { ...done, requestId: 'r'.repeat(257) } },
      { kind: 'completed', output: { ...done, requestId: 42 } },
      { kind: 'completed', output: { ...done, requestId: `req-${encodeURIComponent(key)}` } },
      { kind: 'completed', output: throwing({ ...done }, 'requestId') },
      { kind: 'interrupted', status: 'failed', message: 'refused', provider: { status: 500, requestId: 'req_06' } },
      { kind: 'interrupted', status: 'failed', message: 'refused', provider: { code: 'overloaded', requestId: `req-${key.slice(0, 12)}****${key.slice(-4)}` } },
      { kind: 'interrupted', status: 'failed', message: 'refused', provider: { code: 'overloaded', requestId: '' } },
      { kind: 'interrupted', status: 'failed', message: 'refused', provider: { requestId: '\ud800' } },
      { kind: 'interrupted', status: 'failed', message: 'refused', provider: throwing({ status: 503 }, 'requestId') },
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return answers[calls++] as never
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 } }, async (h) => {
      const recorded: unknown[] = []
      for (const [index] of answers.entries()) {
        const input = h.input(`request-id-${index}`)
        const outcome = await h.run({ ...input, provider: { ...input.provider, apiKey: key } })
        const [fact] = (await factsOf(h.log, `invocation-request-id-${index}`)).filter((f) => f.type === 'model.completed' || f.type === 'model.interrupted')
        if (fact?.type === 'model.completed') {
          assert.equal(outcome, { status: 'completed' }, `${index}`)
          recorded.push(fact.output.requestId)
        } else if (fact?.type === 'model.interrupted') {
          assert.equal(outcome.status === 'failed' ? outcome.provider : 'none', fact.provider, `${index}: the outcome carries the fact's`)
          recorded.push(fact.provider)
        }
      }
      assert.equal(recorded, [
        'req_01',
        '😀'.repeat(256),
        undefined,
        undefined,
        'req-[redacted]',
        undefined,
        { status: 500, requestId: 'req_06' },
        { code: 'overloaded', requestId: 'req-[redacted]****fXYZ' },
        { code: 'overloaded' },
        undefined,
        { status: 503 },
      ])
    })
  })(),
)

test(
  'a custom client that ignores its signal and its timeout: a cancel ends the run at once, and a request past timeoutMs (plus 1 s) ends the step timed_out',
  (() => {
    let started = 0
    const signals: AbortSignal[] = []
    const client: ModelClient = {
      complete(request) {
        started += 1
        signals.push(request.signal)
        return new Promise(() => {}) // never answers, never looks at request.signal
      },
    }
    return engineTest([], { model: { createClient: () => client, timeoutMs: 50 } }, async (h) => {
      const controller = new AbortController()
      const cancelled = await h.start(h.input('ignored-cancel'), { signal: controller.signal })
      while (started < 1) await new Promise((resolve) => setTimeout(resolve, 5))
      controller.abort('user-stop')
      assert.equal(await cancelled.wait(), { status: 'cancelled', source: 'user-stop' })
      const outcome = await h.run(h.input('ignored-timeout'))
      assert.equal([outcome.status, outcome.status === 'failed' ? outcome.class : undefined], ['failed', 'model_timeout'])
      const interrupted = only(await factsOf(h.log, 'invocation-ignored-timeout'), 'model.interrupted')
      assert.equal(interrupted.map((fact) => fact.status), ['timed_out'])
      // Named by the limit given (timeoutMs), not the backstop's sum of it and the grace.
      assert.is(interrupted[0]?.message, 'the model client did not answer within 50 ms (timeoutMs), nor in the 1,000 ms the executor waits past it')
      assert.equal(signals.map((signal) => signal.aborted), [true, true], "each abandoned attempt's signal is aborted, so a client that honours it lets go")
      assert.is((signals[1]?.reason as { name?: string } | undefined)?.name, 'TimeoutError')
    })
  })(),
)

test(
  'when the log refuses the interruption too, the invocation still ends engine_error (from the request in flight)',
  (() => {
    // The answer and the model.interrupted both get an invalid recordedAt.
    const { client, now } = clockFaults(2)
    return engineTest([], { model: { createClient: () => client }, engine: { now } }, async (h) => {
      const running = await h.start(h.input('double'))
      await rejectsWithCode(() => running.wait(), 'LOG_INVALID_EVENT', 'wait()')
      assert.equal(await typesOf(h.log, 'invocation-double'), ['invocation.opened', 'model.requested', 'invocation.ended'])
      assert.is(running.state(), 'ended')
    })
  })(),
)

test(
  'a timeoutMs too long for a timer (meant as "never") does not time every step out at once',
  (() => {
    const client: ModelClient = {
      async complete() {
        await new Promise((resolve) => setTimeout(resolve, 20))
        return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } }
      },
    }
    return engineTest([], { model: { createClient: () => client, timeoutMs: 2 ** 31 } }, async (h) => {
      assert.equal(await h.run(h.input('patient')), { status: 'completed' })
    })
  })(),
)

test(
  "an eventId option that repeats an id or throws: the run fails, yet still ends (its end gets an id of the after-refusal form), and the session is free; one that throws at the first fact refuses the run",
  (() => {
    let mode: 'constant' | 'throws-later' | 'throws-first' = 'constant'
    const eventId = (invocation: { invocationId: string }, ordinal: number) => {
      if (mode === 'constant') return `same-${invocation.invocationId}`
      if (mode === 'throws-first' || ordinal > 1) throw new Error('no id today')
      return `${invocation.invocationId}:${ordinal}`
    }
    return engineTest([answer.text('done'), answer.text('done again')], { engine: { eventId } }, async (h) => {
      const constant = await h.start(h.input('constant', { session: 'shared' }))
      await rejectsWithCode(() => constant.wait(), 'LOG_CONFLICT', 'a repeated id')
      const facts = await storedEvents(h.log)
      assert.equal(facts.map(({ event }) => [event.id, event.fact.type]), [
        ['same-invocation-constant', 'invocation.opened'],
        ['invocation-constant/2/after-refusal', 'invocation.ended'],
      ])
      mode = 'throws-later'
      const throwing = await h.start(h.input('throwing', { session: 'shared' }))
      const error = await throwing.wait().then(
        () => undefined,
        (reason: Error) => reason,
      )
      assert.match(error?.message ?? '', /no id today/)
      assert.equal(await typesOf(h.log, 'invocation-throwing'), ['invocation.opened', 'invocation.ended'])
      mode = 'throws-first'
      await refusedWithoutWriting(h.log, () => h.engine.start(h.input('first', { session: 'shared' })), 'ENGINE_INVALID_OPTIONS', 'a maker that throws at once')
      assert.is(h.server.requests.length, 0, 'no run reached the model')
    })
  })(),
)

test(
  'a custom client whose usage, responseId or provider getter throws keeps its answer (paid for) or its refusal: the member is dropped, the step is not malformed',
  (() => {
    const throwing = (fields: Record<string, unknown>, name: string) =>
      Object.defineProperty(fields, name, {
        enumerable: true,
        get() {
          throw new Error(`no ${name} today`)
        },
      })
    const answers: unknown[] = [
      { kind: 'completed', output: throwing(throwing({ text: 'paid for', toolCalls: [], finishReason: 'stop' }, 'usage'), 'responseId') },
      { kind: 'completed', output: { text: 'counted', toolCalls: [], finishReason: 'stop', usage: throwing({ outputTokens: 3 }, 'inputTokens') } },
      throwing({ kind: 'interrupted', status: 'failed', message: 'refused' }, 'provider'),
    ]
    let calls = 0
    const client: ModelClient = {
      async complete() {
        return answers[calls++] as never
      },
    }
    return engineTest([], { model: { createClient: () => client } }, async (h) => {
      assert.equal(await h.run(h.input('getters-0')), { status: 'completed' })
      const first = only(await factsOf(h.log, 'invocation-getters-0'), 'model.completed')[0]?.output
      assert.equal([first?.text, first?.usage, first?.responseId], ['paid for', undefined, undefined])
      assert.equal(await h.run(h.input('getters-1')), { status: 'completed' })
      assert.equal(only(await factsOf(h.log, 'invocation-getters-1'), 'model.completed')[0]?.output.usage, { outputTokens: 3 })
      const refused = await h.run(h.input('getters-2'))
      assert.equal([refused.status, refused.status === 'failed' ? refused.class : undefined, 'provider' in refused], ['failed', 'model_failed', false])
      assert.equal(only(await factsOf(h.log, 'invocation-getters-2'), 'model.interrupted').map((fact) => [fact.message, fact.provider]), [['refused', undefined]])
    })
  })(),
)

test.run()
