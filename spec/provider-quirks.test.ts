/**
 * Quirks of real OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio, Gemini's and
 * OpenRouter's endpoints), reproduced by a raw `node:http` server on 127.0.0.1 and run through the
 * engine on a real log: what is recorded, what the next request sends, and that a harmless quirk
 * does not fail the run.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type InvocationOutcome, type LiveModelToolCalls, ModelExecutor, type ModelTextPiece, type ModelToolCallPiece, type StartOptions } from '../index.js'
import { type Refusal, type Responder, chatCompletionsServer, chunk, completion, json, sse, text } from './support/chat-completions-server.js'
import { effectTool, messageRun, sequenceOf } from './support/faults-engine.js'
import { bounded } from './support/temp.js'

/**
 * Like Ollama's /v1 (openai/openai.go, FromCompletionToolCall): 400 "invalid tool call arguments"
 * to a request whose history holds a call whose arguments are not a JSON object.
 */
const ollamaArguments: Refusal = (body) =>
  body.messages.some((m) =>
    (m.tool_calls ?? []).some((call) => {
      try {
        const value: unknown = JSON.parse(call.function.arguments)
        return value === null || typeof value !== 'object' || Array.isArray(value)
      } catch {
        return true
      }
    }),
  )
    ? json({ error: { message: 'invalid tool call arguments' } }, 400)
    : undefined

/**
 * A server answering each request with the next responder (500 once they run out), refusing as
 * Ollama does a replayed call whose arguments are not a JSON object (`ollamaArguments`); `refuse`
 * may answer a request in place of the next responder (a provider's own rule).
 */
const quirkServer = (responders: Responder[], refuse: Refusal = () => undefined) => chatCompletionsServer(responders, (body) => ollamaArguments(body) ?? refuse(body))

/**
 * One message run against `responders`: its outcome, its facts in brief, the requests the server saw
 * and the inputs its tools ran with (`tools`: their names, echo tools all; `echo` alone by default).
 */
async function runAgainst(
  dir: string,
  responders: Responder[],
  options: {
    stream?: boolean
    tools?: string[]
    providerOptions?: Record<string, unknown>
    onToolCallText?: (piece: ModelToolCallPiece, live: LiveModelToolCalls | undefined) => void
    onModelReasoning?: (piece: ModelTextPiece) => void
  } = {},
) {
  const server = await quirkServer(responders)
  const log = await EventLog.open(join(dir, 'log'))
  try {
    const inputs: unknown[] = []
    const tools = (options.tools ?? ['echo']).map((name) => {
      const tool = effectTool(name)
      const execute = tool.execute
      tool.execute = (input, context) => {
        inputs.push(input)
        return execute(input, context)
      }
      return tool
    })
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 1, backoffMs: 5 }) })
    const providerOptions = { ...(options.stream ? { stream: true } : {}), ...options.providerOptions }
    const startOptions: StartOptions = {
      // Each piece with what `liveToolCalls()` gives once it was passed on.
      ...(options.onToolCallText ? { onToolCallText: (piece: ModelToolCallPiece) => options.onToolCallText?.(piece, engine.running('invocation-quirk')?.liveToolCalls()) } : {}),
      ...(options.onModelReasoning ? { onModelReasoning: options.onModelReasoning } : {}),
    }
    const outcome: InvocationOutcome = await engine.run(messageRun(server.baseUrl, 'quirk', tools, Object.keys(providerOptions).length > 0 ? { providerOptions } : {}), startOptions)
    const events = await log.invocationEvents('invocation-quirk')
    return { outcome, facts: sequenceOf(events, 'invocation-quirk'), requests: server.requests, inputs, events }
  } finally {
    await log.close()
    await server.close()
  }
}

const TOOL_ROUND = ['invocation.opened', 'model.requested', 'model.completed']
const ANSWERED = ['model.requested', 'model.completed', 'invocation.ended:completed']

test(
  'arguments that are not a JSON object are replayed as {} (Ollama refuses the request otherwise) and quoted in the tool message',
  bounded(10_000, async (dir) => {
    const calls = [
      { id: 'call_a', type: 'function', function: { name: 'echo', arguments: "{'value': 42}" } },
      { id: 'call_b', type: 'function', function: { name: 'echo', arguments: '```json\n{"value": 1}\n```' } },
      { id: 'call_c', type: 'function', function: { name: 'echo', arguments: '' } },
    ]
    const run = await runAgainst(dir, [json(completion({ content: null, tool_calls: calls })), text('done')])
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(run.facts, [...TOOL_ROUND, 'tool.rejected:invalid_input', 'tool.rejected:invalid_input', 'tool.dispatched', 'tool.settled:succeeded', ...ANSWERED])
    assert.equal(run.inputs, [{}], 'no arguments at all ran as {}')
    const messages = run.requests[1]?.messages ?? []
    const replayed = messages.find((m) => m.role === 'assistant')?.tool_calls?.map((call) => [call.id, call.function.arguments])
    assert.equal(replayed, [['call_a', '{}'], ['call_b', '{}'], ['call_c', '{}']])
    const told = messages.filter((m) => m.role === 'tool').map((m) => String(m.content))
    assert.match(told[0] ?? '', /^error: the arguments for "echo" are not valid JSON \(.*\); it was not run\. The arguments sent were: \{'value': 42\}$/)
    assert.ok(told[1]?.endsWith('The arguments sent were: ```json\n{"value": 1}\n```'), told[1])
    assert.is(told[2], '{}')
    // The facts keep what the model sent.
    const completed = run.events.map((e) => e.event.fact).find((fact) => fact.type === 'model.completed')
    assert.equal(completed?.type === 'model.completed' && completed.output.toolCalls.map((call) => call.arguments), ["{'value': 42}", '```json\n{"value": 1}\n```', ''])
  }),
)

const calledWith = (run: Awaited<ReturnType<typeof runAgainst>>) =>
  run.events.flatMap((e) => (e.event.fact.type === 'model.completed' ? e.event.fact.output.toolCalls.map((call) => [call.callId, call.name, call.arguments]) : []))

for (const stream of [false, true]) {
  const shape = stream ? 'streamed' : 'plain JSON'
  const oneCall = (call: Record<string, unknown>) =>
    stream ? sse([chunk({ role: 'assistant', content: null, tool_calls: [call] }), chunk({}, 'tool_calls')]) : json(completion({ content: null, tool_calls: [call] }))

  test(
    `${shape}: arguments sent already parsed (an object) are taken as its JSON text, not failed as malformed`,
    bounded(10_000, async (dir) => {
      const run = await runAgainst(dir, [oneCall({ index: 0, id: 'call_obj', type: 'function', function: { name: 'echo', arguments: { value: 42 } } }), text('done')], { stream })
      assert.equal(run.outcome, { status: 'completed' })
      assert.equal(run.facts, [...TOOL_ROUND, 'tool.dispatched', 'tool.settled:succeeded', ...ANSWERED])
      assert.equal(calledWith(run).at(0), ['call_obj', 'echo', '{"value":42}'])
      assert.equal(run.inputs, [{ value: 42 }])
    }),
  )

  test(
    `${shape}: a call without an id (some local servers), or with an empty one, gets one of its own, which its tool message answers`,
    bounded(10_000, async (dir) => {
      const run = await runAgainst(dir, [oneCall({ index: 0, type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }), oneCall({ index: 0, id: '', function: { name: 'echo', arguments: '{"value":2}' } }), text('done')], { stream })
      assert.equal(run.outcome, { status: 'completed' })
      assert.equal(run.facts, [...TOOL_ROUND, 'tool.dispatched', 'tool.settled:succeeded', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled:succeeded', ...ANSWERED])
      const ids = calledWith(run).map(([id]) => id)
      assert.is(ids.length, 2)
      for (const id of ids) assert.match(id ?? '', /^call_[0-9a-f]{24}$/)
      assert.is.not(ids[0], ids[1])
      const last = run.requests[2]?.messages ?? []
      assert.equal(
        last.filter((m) => m.role === 'tool').map((m) => m.tool_call_id),
        ids,
      )
      assert.equal(run.inputs, [{ value: 1 }, { value: 2 }])
    }),
  )
}

test(
  'streamed tool calls without an index (Gemini\'s OpenAI endpoint): a part continues the last call, a new id starts the next',
  bounded(10_000, async (dir) => {
    const part = (fields: Record<string, unknown>) => chunk({ tool_calls: [fields] })
    const run = await runAgainst(
      dir,
      [
        sse([
          part({ id: 'call_1', type: 'function', function: { name: 'echo', arguments: '' } }),
          part({ function: { arguments: '{"value":' } }),
          part({ function: { arguments: '1}' } }),
          part({ id: 'call_2', type: 'function', function: { name: 'echo', arguments: '{"value":2}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [
      ['call_1', 'echo', '{"value":1}'],
      ['call_2', 'echo', '{"value":2}'],
    ])
    assert.equal(run.inputs, [{ value: 1 }, { value: 2 }])
  }),
)

test(
  'streamed tool calls without an index or an id: parts side by side in one delta are calls of their own, and so is a part naming another tool',
  bounded(10_000, async (dir) => {
    const run = await runAgainst(
      dir,
      [
        sse([
          chunk({ tool_calls: [{ type: 'function', function: { name: 'echo', arguments: '' } }, { type: 'function', function: { name: 'echo', arguments: '{"value":2}' } }] }),
          chunk({ tool_calls: [{ type: 'function', function: { name: 'other', arguments: '{"value":3}' } }] }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(
      calledWith(run).map(([, name, args]) => [name, args]),
      [
        ['echo', ''],
        ['echo', '{"value":2}'],
        ['other', '{"value":3}'],
      ],
    )
    assert.equal(run.inputs, [{}, { value: 2 }], 'both calls to echo ran; other is no tool of the run')
  }),
)

test(
  'streamed tool calls without an index or an id: a part naming the tool again after the last call\'s arguments are whole starts the next call of the same tool; repeated before, it continues the call',
  bounded(10_000, async (dir) => {
    const part = (fn: Record<string, unknown>) => chunk({ tool_calls: [{ type: 'function', function: fn }] })
    const run = await runAgainst(
      dir,
      [
        sse([
          part({ name: 'lookup', arguments: '' }),
          part({ arguments: '{"q":' }),
          part({ arguments: '"a"}' }),
          part({ name: 'lookup', arguments: '' }),
          part({ arguments: '{"q":"b"}' }),
          chunk({}, 'tool_calls'),
        ]),
        sse([part({ name: 'lookup', arguments: '{"q":' }), part({ name: 'lookup', arguments: '"c"}' }), chunk({}, 'tool_calls')]),
        text('done'),
      ],
      { stream: true, tools: ['lookup'] },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(
      calledWith(run).map(([, name, args]) => [name, args]),
      [
        ['lookup', '{"q":"a"}'],
        ['lookup', '{"q":"b"}'],
        ['lookup', '{"q":"c"}'],
      ],
    )
    assert.equal(run.inputs, [{ q: 'a' }, { q: 'b' }, { q: 'c' }])
  }),
)

test(
  'streamed without an index or an id, a part naming the tool again with no arguments after the call\'s whole arguments (a server repeating the name in every part, its last one included) is no second call: the tool runs once',
  bounded(10_000, async (dir) => {
    const part = (fn: Record<string, unknown>) => chunk({ tool_calls: [{ type: 'function', function: fn }] })
    const run = await runAgainst(
      dir,
      [
        sse([part({ name: 'lookup', arguments: '{"q":' }), part({ name: 'lookup', arguments: '"a"}' }), part({ name: 'lookup', arguments: '' }), chunk({}, 'tool_calls')]),
        text('done'),
      ],
      { stream: true, tools: ['lookup'] },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run).map(([, name, args]) => [name, args]), [['lookup', '{"q":"a"}']])
    assert.equal(run.inputs, [{ q: 'a' }])
  }),
)

test(
  'streamed parts of two calls interleaved, each naming its call\'s id (without an index, or all at index 0): each part goes to the call with its id',
  bounded(10_000, async (dir) => {
    const interleaved = (index: Record<string, number>) => {
      const part = (id: string, fn: Record<string, unknown>) => chunk({ tool_calls: [{ ...index, id, type: 'function', function: fn }] })
      return sse([
        part('call_A', { name: 'lookup', arguments: '{"q":' }),
        part('call_B', { name: 'lookup', arguments: '{"q":' }),
        part('call_A', { arguments: '"a"}' }),
        part('call_B', { arguments: '"b"}' }),
        chunk({}, 'tool_calls'),
      ])
    }
    // What a UI showing the calls as they are written gets: each call's pieces, by step and call id.
    const live = new Map<string, string>()
    const onToolCallText = ({ stepId, callId, arguments: piece }: { stepId: string; callId: string; arguments: string }) => {
      live.set(`${stepId} ${callId}`, (live.get(`${stepId} ${callId}`) ?? '') + piece)
    }
    const run = await runAgainst(dir, [interleaved({}), interleaved({ index: 0 }), text('done')], { stream: true, tools: ['lookup'], onToolCallText })
    assert.equal(run.outcome, { status: 'completed' })
    const round = [
      ['call_A', 'lookup', '{"q":"a"}'],
      ['call_B', 'lookup', '{"q":"b"}'],
    ]
    assert.equal(calledWith(run), [...round, ...round])
    assert.equal(run.inputs, [{ q: 'a' }, { q: 'b' }, { q: 'a' }, { q: 'b' }])
    // onToolCallText's pieces add up to the recorded arguments (README), interleaved parts included.
    assert.equal([...live], [
      ['step-1 call_A', '{"q":"a"}'],
      ['step-1 call_B', '{"q":"b"}'],
      ['step-2 call_A', '{"q":"a"}'],
      ['step-2 call_B', '{"q":"b"}'],
    ])
  }),
)

test(
  'a streamed tool name split across parts of one index (some servers stream it in pieces, as arguments are) is joined when that names a tool of the run and the last part does not; a name repeated whole in every part is that name',
  bounded(10_000, async (dir) => {
    const part = (fields: Record<string, unknown>) => chunk({ tool_calls: [{ index: 0, ...fields }] })
    const watched = watchCalls()
    const run = await runAgainst(
      dir,
      [
        sse([
          part({ id: 'call_split', type: 'function', function: { name: 'get_', arguments: '' } }),
          part({ function: { name: 'wea', arguments: '{"value":' } }),
          part({ function: { name: 'ther', arguments: '1}' } }),
          chunk({}, 'tool_calls'),
        ]),
        sse([
          part({ id: 'call_whole', type: 'function', function: { name: 'get_weather', arguments: '{"value":' } }),
          part({ function: { name: 'get_weather', arguments: '2}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true, tools: ['get_weather', 'weather'], onToolCallText: watched.onToolCallText },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [
      ['call_split', 'get_weather', '{"value":1}'],
      ['call_whole', 'get_weather', '{"value":2}'],
    ])
    assert.equal(run.inputs, [{ value: 1 }, { value: 2 }])
    // Parts of the name beside the arguments: the call begins with its arguments, under the name so
    // far, and a later piece carries the name grown; one call per index, its last piece the recorded name.
    assert.equal(watched.pieces, [
      ['call_split', 'get_wea', ''],
      ['call_split', 'get_wea', '{"value":'],
      ['call_split', 'get_weather', '1}'],
      ['call_whole', 'get_weather', ''],
      ['call_whole', 'get_weather', '{"value":'],
      ['call_whole', 'get_weather', '2}'],
    ])
    assert.equal(watched.live.map((so) => so?.calls), watched.expectedLive())
  }),
)

test(
  'a streamed tool name split where its last piece is another tool of the run (web_ + search, beside search) is the name joined, not that other tool: pieces that differ are a split, not a repeat',
  bounded(10_000, async (dir) => {
    const part = (fields: Record<string, unknown>) => chunk({ tool_calls: [{ index: 0, ...fields }] })
    const run = await runAgainst(
      dir,
      [
        sse([
          part({ id: 'call_split', type: 'function', function: { name: 'web_', arguments: '' } }),
          part({ function: { name: 'search', arguments: '{"value":1}' } }),
          chunk({}, 'tool_calls'),
        ]),
        sse([
          part({ id: 'call_whole', type: 'function', function: { name: 'search', arguments: '{"value":' } }),
          part({ function: { name: 'search', arguments: '2}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true, tools: ['web_search', 'search', 'searchsearch'] },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [
      ['call_split', 'web_search', '{"value":1}'],
      ['call_whole', 'search', '{"value":2}'],
    ])
  }),
)

/** What onToolCallText was passed ([callId, name, arguments] each) and what liveToolCalls() gave once each piece was. */
function watchCalls() {
  const pieces: [string, string, string][] = []
  /** Each piece's request (`requestSeq`): liveToolCalls() starts over with each. */
  const requests: number[] = []
  const live: (LiveModelToolCalls | undefined)[] = []
  const onToolCallText = (piece: ModelToolCallPiece, so: LiveModelToolCalls | undefined) => {
    pieces.push([piece.callId, piece.name, piece.arguments])
    requests.push(piece.requestSeq)
    live.push(so)
  }
  /** liveToolCalls() as the pieces of its request passed on so far make it, at each piece: each call under the name of its latest piece. */
  const expectedLive = () =>
    pieces.map((_, at) => {
      const calls: { callId: string; name: string; arguments: string }[] = []
      for (const [callId, name, text] of pieces.slice(0, at + 1).filter((__, before) => requests[before] === requests[at])) {
        const call = calls.find((candidate) => candidate.callId === callId)
        if (call === undefined) calls.push({ callId, name, arguments: text })
        else Object.assign(call, { name, arguments: call.arguments + text })
      }
      return calls
    })
  return { pieces, live, onToolCallText, expectedLive }
}

test(
  'a tool name streamed in parts before its arguments (web_, search; ec, ho): onToolCallText and liveToolCalls() show one call per index, begun under its whole name; model.completed records each name joined, its arguments whole',
  bounded(10_000, async (dir) => {
    const part = (index: number, fields: Record<string, unknown>) => chunk({ tool_calls: [{ index, ...fields }] })
    const watched = watchCalls()
    const run = await runAgainst(
      dir,
      [
        sse([
          part(0, { id: 'call_split', type: 'function', function: { name: 'web_', arguments: '' } }),
          part(0, { function: { name: 'search' } }),
          part(0, { function: { arguments: '{"value":' } }),
          part(0, { function: { arguments: '1}' } }),
          part(1, { id: 'call_two', type: 'function', function: { name: 'ec' } }),
          part(1, { function: { name: 'ho', arguments: '' } }),
          part(1, { function: { arguments: '{"value":2}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true, tools: ['web_search', 'search', 'echo'], onToolCallText: watched.onToolCallText },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [
      ['call_split', 'web_search', '{"value":1}'],
      ['call_two', 'echo', '{"value":2}'],
    ])
    assert.equal(run.inputs, [{ value: 1 }, { value: 2 }])
    assert.equal(watched.pieces, [
      ['call_split', 'web_search', ''],
      ['call_split', 'web_search', '{"value":'],
      ['call_split', 'web_search', '1}'],
      ['call_two', 'echo', ''],
      ['call_two', 'echo', '{"value":2}'],
    ])
    assert.equal(watched.live.map((so) => so?.calls), watched.expectedLive(), 'liveToolCalls() at each piece: the calls as the pieces so far show them')
  }),
)

test(
  'a tool name streamed in parts that names no tool of the run (web_ + lookup, neither a tool) is recorded joined, as the pieces show it, not as its last part',
  bounded(10_000, async (dir) => {
    const part = (fields: Record<string, unknown>) => chunk({ tool_calls: [{ index: 0, ...fields }] })
    const watched = watchCalls()
    const run = await runAgainst(
      dir,
      [
        sse([
          part({ id: 'call_unknown', type: 'function', function: { name: 'web_', arguments: '' } }),
          part({ function: { name: 'lookup' } }),
          part({ function: { arguments: '{"value":1}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true, tools: ['echo', 'lookup2'], onToolCallText: watched.onToolCallText },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [['call_unknown', 'web_lookup', '{"value":1}']])
    assert.equal(run.inputs, [], 'no tool of that name ran')
    assert.equal(watched.pieces, [
      ['call_unknown', 'web_lookup', ''],
      ['call_unknown', 'web_lookup', '{"value":1}'],
    ])
    const told = run.requests[1]?.messages.find((m) => m.role === 'tool')
    assert.match(String(told?.content), /web_lookup/, 'the model is told of the name it sent')
  }),
)

test(
  "a streamed call's id arriving in a later part than its first arguments (a name split too, at index 1): one call per index, begun once its id is known with the arguments so far; model.completed records each id, name and arguments whole",
  bounded(10_000, async (dir) => {
    const part = (index: number, fields: Record<string, unknown>) => chunk({ tool_calls: [{ index, ...fields }] })
    const watched = watchCalls()
    const run = await runAgainst(
      dir,
      [
        sse([
          part(0, { type: 'function', function: { name: 'echo', arguments: '{"val' } }),
          part(0, { id: 'call_late', function: { arguments: 'ue":1}' } }),
          part(1, { type: 'function', function: { name: 'ec' } }),
          part(1, { function: { name: 'ho', arguments: '{"value":' } }),
          part(1, { id: 'call_later', function: { arguments: '2}' } }),
          chunk({}, 'tool_calls'),
        ]),
        text('done'),
      ],
      { stream: true, tools: ['echo'], onToolCallText: watched.onToolCallText },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(calledWith(run), [
      ['call_late', 'echo', '{"value":1}'],
      ['call_later', 'echo', '{"value":2}'],
    ])
    assert.equal(run.inputs, [{ value: 1 }, { value: 2 }])
    assert.equal(watched.pieces, [
      ['call_late', 'echo', ''],
      ['call_late', 'echo', '{"value":1}'],
      ['call_later', 'echo', ''],
      ['call_later', 'echo', '{"value":2}'],
    ])
    assert.equal(watched.live.map((so) => so?.calls), watched.expectedLive())
  }),
)

for (const stream of [false, true]) {
  test(
    `${stream ? 'streamed' : 'plain JSON'}: finish_reason "error" (OpenRouter: the generation failed upstream) is a retryable failure, not a cut answer recorded as the final one`,
    bounded(10_000, async (dir) => {
      const failed = stream ? sse([chunk({ role: 'assistant', content: 'The answer is' }), chunk({}, 'error')]) : json(completion({ content: 'The answer is' }, 'error'))
      const run = await runAgainst(dir, [failed, text('The answer is 42.')], { stream })
      assert.equal(run.outcome, { status: 'completed' })
      assert.equal(run.facts, ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', ...ANSWERED])
      const interrupted = run.events.map((e) => e.event.fact).find((fact) => fact.type === 'model.interrupted')
      assert.match(interrupted?.type === 'model.interrupted' ? String(interrupted.message) : '', /finish_reason "error"/)
    }),
  )
}

/** OpenRouter's mid-stream error, as its documentation gives it: `error` beside a choice that ends with finish_reason "error". */
const openRouterError = (error: Record<string, unknown>) => ({
  id: 'gen-1',
  object: 'chat.completion.chunk',
  created: 1_700_000_000,
  model: 'openai/gpt-4o',
  provider: 'OpenAI',
  error,
  choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
})

test(
  "OpenRouter's mid-stream error (`error` beside finish_reason \"error\", after some text) is retried whether its code is server_error, a 502 or none, and fails at once when its code is a request's (400); the cut text is never the answer",
  bounded(15_000, async (dir) => {
    const begun = chunk({ role: 'assistant', content: 'The answer is' })
    const interruptedOf = (run: Awaited<ReturnType<typeof runAgainst>>) =>
      run.events.flatMap((e) => (e.event.fact.type === 'model.interrupted' ? [[e.event.fact.status, e.event.fact.message, e.event.fact.provider ?? null]] : []))
    const cases: [string, Record<string, unknown>, unknown[]][] = [
      ['documented', { code: 'server_error', message: 'Provider disconnected unexpectedly' }, ['retryable_failure', 'the provider reported an error in its stream: Provider disconnected unexpectedly', { code: 'server_error' }]],
      ['numeric', { code: 502, message: 'Provider returned error' }, ['retryable_failure', 'the provider reported an error in its stream: Provider returned error', { code: '502' }]],
      ['no code', { message: 'Provider disconnected unexpectedly' }, ['retryable_failure', 'the provider reported an error in its stream: Provider disconnected unexpectedly', null]],
    ]
    for (const [name, error, expected] of cases) {
      const run = await runAgainst(join(dir, name.replace(' ', '-')), [sse([begun, openRouterError(error)]), text('The answer is 42.')], { stream: true })
      assert.equal(run.outcome, { status: 'completed' }, name)
      assert.equal(run.facts, ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', ...ANSWERED], name)
      assert.equal(interruptedOf(run), [expected], name)
      assert.is(run.requests.length, 2, name)
    }
    const refused = await runAgainst(join(dir, 'request'), [sse([begun, openRouterError({ code: 400, message: 'context too long for this provider' })]), text('never sent')], { stream: true })
    assert.equal(refused.facts, ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_failed'])
    assert.equal(interruptedOf(refused), [['failed', 'the provider reported an error in its stream: context too long for this provider', { code: '400' }]])
    assert.is(refused.requests.length, 1, 'not retried')
  }),
)

test(
  "an `event: error` whose data is not JSON (a proxy's `upstream connect error …`) after some text is retried, not failed as malformed; a data event that is not JSON still fails model_malformed at once",
  bounded(10_000, async (dir) => {
    const cut =
      (last: string): Responder =>
      (res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'The answer is' }))}\n\n`)
        res.end(last)
      }
    const proxy = 'upstream connect error or disconnect/reset before headers. reset reason: connection termination'
    const run = await runAgainst(join(dir, 'event'), [cut(`event: error\ndata: ${proxy}\n\n`), text('The answer is 42.')], { stream: true })
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(run.facts, ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', ...ANSWERED])
    const interrupted = run.events.map((e) => e.event.fact).find((fact) => fact.type === 'model.interrupted')
    assert.is(interrupted?.type === 'model.interrupted' && interrupted.message, `the provider reported an error in its stream that could not be read: ${proxy}`)
    const garbled = await runAgainst(join(dir, 'data'), [cut(`data: ${proxy}\n\n`), text('never sent')], { stream: true })
    assert.equal(garbled.facts, ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_malformed'])
    assert.is(garbled.requests.length, 1, 'not retried')
  }),
)

test(
  "HTTP 429 insufficient_quota (OpenAI: the account is out of credit) fails at once; a 429 that is a rate limit is retried",
  bounded(10_000, async (dir) => {
    const quota = json({ error: { message: 'You exceeded your current quota, please check your plan and billing details.', type: 'insufficient_quota', param: null, code: 'insufficient_quota' } }, 429)
    const run = await runAgainst(join(dir, 'quota'), [quota, text('never sent')])
    assert.equal(run.facts, ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_failed'])
    assert.is(run.requests.length, 1, 'not retried')
    const limited = json({ error: { message: 'Rate limit reached for requests', type: 'requests', code: 'rate_limit_exceeded' } }, 429)
    const retried = await runAgainst(join(dir, 'limited'), [limited, text('done')])
    assert.equal(retried.facts, ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', ...ANSWERED])
  }),
)

test(
  'an error inside a stream of type api_error (OpenAI: trouble on its side; Ollama: its model runner failed) is retried; invalid_request_error is not',
  bounded(10_000, async (dir) => {
    const broken = (error: Record<string, unknown>) => sse([chunk({ role: 'assistant', content: 'partial' }), { error }])
    const run = await runAgainst(join(dir, 'runner'), [broken({ message: 'an error was encountered while running the model: unexpected EOF', type: 'api_error' }), text('done')], { stream: true })
    assert.equal(run.facts, ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', ...ANSWERED])
    const refused = await runAgainst(join(dir, 'refused'), [broken({ message: 'bad tool schema', type: 'invalid_request_error' }), text('never sent')], { stream: true })
    assert.equal(refused.facts, ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_failed'])
  }),
)

for (const stream of [false, true]) {
  test(
    `${stream ? 'streamed' : 'plain JSON'}: DeepSeek's thinking mode: the reasoning of an answer that made tool calls is recorded and sent back with it (DeepSeek answers 400 otherwise), in the run and in a continuation of it`,
    bounded(15_000, async (dir) => {
      const thought = 'The user wants 42 echoed; call echo first.'
      const call = { index: 0, id: 'call_r', type: 'function', function: { name: 'echo', arguments: '{"value":42}' } }
      const toolRound: Responder = stream
        ? sse([chunk({ role: 'assistant', reasoning_content: thought.slice(0, 10) }), chunk({ reasoning_content: thought.slice(10) }), chunk({ content: null, tool_calls: [call] }), chunk({}, 'tool_calls')])
        : json(completion({ content: null, reasoning_content: thought, tool_calls: [call] }))
      const answer = (content: string): Responder => json(completion({ content, reasoning_content: 'Done thinking.' }, 'stop'))
      // As DeepSeek does: a request whose assistant message with tool calls lacks its reasoning is refused.
      const server = await quirkServer([toolRound, answer('echoed 42'), answer('still 42')], (body) =>
        body.messages.some((m) => m.role === 'assistant' && (m.tool_calls ?? []).length > 0 && m.reasoning_content !== thought)
          ? json({ error: { message: 'Missing `reasoning_content` field in the assistant message', type: 'invalid_request_error' } }, 400)
          : undefined,
      )
      const { baseUrl, requests } = server
      const log = await EventLog.open(join(dir, 'log'))
      try {
        const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) })
        const extra = stream ? { providerOptions: { stream: true } } : {}
        assert.equal(await engine.run(messageRun(baseUrl, 'think', [effectTool()], extra)), { status: 'completed' })
        const completed = (await log.invocationEvents('invocation-think')).flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output.reasoning] : []))
        assert.equal(completed, [thought, 'Done thinking.'], 'each answer\'s reasoning is recorded')
        assert.equal(requests[1]?.messages.filter((m) => m.role === 'assistant').map((m) => m.reasoning_content), [thought])
        // A continuation rebuilds the transcript from the facts: the reasoning goes back with the tool round, not with the final answer.
        const source = (await log.runSource('session-think', 'run-think'))?.boundary
        assert.ok(source)
        const next = messageRun(baseUrl, 'think-on', [effectTool()], extra)
        const continued = await engine.run({ ...next, invocation: { ...next.invocation, sessionId: 'session-think' }, work: { kind: 'continuation', source, content: 'and now?' } })
        assert.equal(continued, { status: 'completed' })
        assert.equal(requests[2]?.messages.filter((m) => m.role === 'assistant').map((m) => m.reasoning_content ?? null), [thought, null])
      } finally {
        await log.close()
        await server.close()
      }
    }),
  )
}

for (const stream of [false, true]) {
  test(
    `${stream ? 'streamed' : 'plain JSON'}: OpenRouter's \`reasoning\` (beside its \`reasoning_details\`, recorded apart: spec/provider-state.test.ts) is recorded, sent back and passed on live (onModelReasoning) as reasoning_content is; with both, reasoning_content is taken, never the two joined`,
    bounded(10_000, async (dir) => {
      const thought = 'Echo 42 first.'
      const details = [{ type: 'reasoning.text', text: thought, format: 'unknown', index: 0 }]
      const call = { index: 0, id: 'call_or', type: 'function', function: { name: 'echo', arguments: '{"value":42}' } }
      const toolRound: Responder = stream
        ? sse([chunk({ role: 'assistant', reasoning: thought.slice(0, 5), reasoning_details: details }), chunk({ reasoning: thought.slice(5) }), chunk({ content: null, reasoning: null, tool_calls: [call] }), chunk({}, 'tool_calls')])
        : json(completion({ content: null, reasoning: thought, reasoning_details: details, tool_calls: [call] }))
      const both: Responder = stream
        ? sse([chunk({ role: 'assistant', reasoning_content: 'From reasoning_content.', reasoning: 'From reasoning.' }), chunk({ content: 'done' }), chunk({}, 'stop')])
        : json(completion({ content: 'done', reasoning_content: 'From reasoning_content.', reasoning: 'From reasoning.' }, 'stop'))
      const live: ModelTextPiece[] = []
      const run = await runAgainst(dir, [toolRound, both], { stream, onModelReasoning: (piece) => live.push(piece) })
      assert.equal(run.outcome, { status: 'completed' })
      const recorded = run.events.flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output.reasoning] : []))
      assert.equal(recorded, [thought, 'From reasoning_content.'])
      // Streamed: `reasoning` in its pieces, and with both names in one delta only reasoning_content, once.
      assert.equal(
        live.map((piece) => [piece.stepId, piece.text]),
        stream
          ? [
              ['step-1', thought.slice(0, 5)],
              ['step-1', thought.slice(5)],
              ['step-2', 'From reasoning_content.'],
            ]
          : [
              ['step-1', thought],
              ['step-2', 'From reasoning_content.'],
            ],
      )
      assert.equal(run.requests[1]?.messages.filter((m) => m.role === 'assistant').map((m) => m.reasoning_content), [thought])
    }),
  )
}

test(
  'reasoning is redacted of the provider\'s key as text is: an echo of it in reasoning_content never reaches the log',
  bounded(10_000, async (dir) => {
    const key = 'sk-reasoning-1234567890abcdefXYZ'
    const server = await quirkServer([json(completion({ content: null, reasoning_content: `The key is ${key}, echo it.`, tool_calls: [{ id: 'call_k', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }] })), text('done')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const run = messageRun(server.baseUrl, 'secret', [effectTool()])
      const outcome = await new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) }).run({ ...run, provider: { ...run.provider, apiKey: key } })
      assert.equal(outcome, { status: 'completed' })
      const reasoning = (await log.invocationEvents('invocation-secret')).flatMap((e) => (e.event.fact.type === 'model.completed' && e.event.fact.output.reasoning ? [e.event.fact.output.reasoning] : []))
      assert.is(reasoning.length, 1)
      assert.not.ok(reasoning[0]?.includes(key), reasoning[0])
      assert.match(reasoning[0] ?? '', /^The key is .+, echo it\.$/)
      assert.not.ok(JSON.stringify(server.requests[1]?.messages).includes(key), 'nor is it sent back')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

/** The usage each `model.completed` of a run recorded, in order. */
const usagesOf = (run: Awaited<ReturnType<typeof runAgainst>>) => run.events.flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output.usage] : []))

for (const stream of [false, true]) {
  const shape = stream ? 'streamed' : 'plain JSON'
  /** An answer reporting `usage`: in a stream, in a final chunk without choices, as OpenAI sends it with `stream_options.include_usage`. */
  const reporting = (message: Record<string, unknown>, finishReason: string, usage: unknown): Responder =>
    stream
      ? sse([chunk({ role: 'assistant', ...message }, null), chunk({}, finishReason), { id: 'chatcmpl-1', object: 'chat.completion.chunk', choices: [], usage }])
      : json({ ...completion(message, finishReason), usage })
  const options = { stream, ...(stream ? { providerOptions: { stream_options: { include_usage: true } } } : {}) }
  const call = { index: 0, id: 'call_u', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }

  test(
    `${shape}: cached prompt tokens and reasoning tokens are recorded: OpenAI's usage details, DeepSeek's prompt_cache_hit_tokens (OpenAI's cached_tokens wins when both come)`,
    bounded(10_000, async (dir) => {
      const openai = { prompt_tokens: 1200, completion_tokens: 300, total_tokens: 1500, prompt_tokens_details: { cached_tokens: 1024, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 256, audio_tokens: 0 } }
      const deepseek = { prompt_tokens: 900, completion_tokens: 20, prompt_cache_hit_tokens: 640, prompt_cache_miss_tokens: 260 }
      const both = { prompt_tokens: 50, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 0 }, prompt_cache_hit_tokens: 48 }
      const run = await runAgainst(dir, [reporting({ content: null, tool_calls: [call] }, 'tool_calls', openai), reporting({ content: null, tool_calls: [call] }, 'tool_calls', deepseek), reporting({ content: 'done' }, 'stop', both)], options)
      assert.equal(run.outcome, { status: 'completed' })
      assert.equal(usagesOf(run), [
        { inputTokens: 1200, outputTokens: 300, cachedInputTokens: 1024, reasoningTokens: 256 },
        { inputTokens: 900, outputTokens: 20, cachedInputTokens: 640 },
        { inputTokens: 50, outputTokens: 5, cachedInputTokens: 0 },
      ])
    }),
  )

  test(
    `${shape}: a cached or reasoning token count that is not a non-negative integer (negative, fractional, a string) is dropped, not the answer; DeepSeek's count stands in for a bad OpenAI one`,
    bounded(10_000, async (dir) => {
      const bad = { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: -1 }, completion_tokens_details: { reasoning_tokens: 1.5 } }
      const strings = { prompt_tokens: 11, completion_tokens: 3, prompt_tokens_details: { cached_tokens: '7' }, prompt_cache_hit_tokens: 4, completion_tokens_details: { reasoning_tokens: '2' } }
      const odd = { prompt_tokens: 12, prompt_tokens_details: null, completion_tokens_details: 'none', prompt_cache_hit_tokens: -3 }
      const run = await runAgainst(dir, [reporting({ content: null, tool_calls: [call] }, 'tool_calls', bad), reporting({ content: null, tool_calls: [call] }, 'tool_calls', strings), reporting({ content: 'done' }, 'stop', odd)], options)
      assert.equal(run.outcome, { status: 'completed' })
      assert.equal(usagesOf(run), [{ inputTokens: 10, outputTokens: 2 }, { inputTokens: 11, outputTokens: 3, cachedInputTokens: 4 }, { inputTokens: 12 }])
    }),
  )
}

/** The responseId each `model.completed` of a run recorded, in order. */
const responseIdsOf = (run: Awaited<ReturnType<typeof runAgainst>>) => run.events.flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output.responseId] : []))

test(
  "plain JSON: the completion's id is recorded as responseId, to match the fact with the provider's records; one that is not a string of 1–256 characters is dropped, not the answer",
  bounded(10_000, async (dir) => {
    const call = { id: 'call_i', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    const round = (id: unknown): Responder => json({ ...completion({ content: null, tool_calls: [call] }), id })
    const longest = `chatcmpl-${'a'.repeat(247)}`
    const ids = ['chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT', longest, `${longest}b`, 42, '', null, { id: 'x' }]
    const final = (id: unknown): Responder => json({ ...completion({ content: 'done' }, 'stop'), id })
    // A run has 4 steps: three tool rounds and a final answer each.
    const first = await runAgainst(join(dir, 'first'), [...ids.slice(0, 3).map(round), final(ids[3])])
    const second = await runAgainst(join(dir, 'second'), [...ids.slice(4).map(round), final(undefined)])
    assert.equal([first.outcome, second.outcome], [{ status: 'completed' }, { status: 'completed' }])
    assert.equal([...responseIdsOf(first), ...responseIdsOf(second)], ['chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT', longest, undefined, undefined, undefined, undefined, undefined, undefined])
  }),
)

test(
  "streamed: the chunks' id is recorded as responseId, the first non-empty one; an over-long or non-string one is dropped, not the answer",
  bounded(10_000, async (dir) => {
    const call = { index: 0, id: 'call_s', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    const streamed = (...ids: unknown[]): Responder =>
      sse([{ ...chunk({ role: 'assistant', content: null }), id: ids[0] }, { ...chunk({ tool_calls: [call] }), id: ids[1] }, { ...chunk({}, 'tool_calls'), id: ids[2] }])
    const run = await runAgainst(
      dir,
      [streamed('', 'chatcmpl-first', 'chatcmpl-second'), streamed(7, 7, 7), streamed(`chatcmpl-${'x'.repeat(300)}`, 'chatcmpl-later', 'chatcmpl-later'), sse([chunk({ content: 'done' }), { ...chunk({}, 'stop'), id: undefined }])],
      { stream: true },
    )
    assert.equal(run.outcome, { status: 'completed' })
    assert.equal(responseIdsOf(run), ['chatcmpl-first', undefined, undefined, 'chatcmpl-1'])
  }),
)

test(
  "a response id is redacted of the provider's key as text is: a key echoed in it never reaches the log",
  bounded(10_000, async (dir) => {
    const key = 'sk-responseid-1234567890abcdefXYZ'
    const server = await quirkServer([json({ ...completion({ content: 'done' }, 'stop'), id: `chatcmpl-${key}` })])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const run = messageRun(server.baseUrl, 'secret', [effectTool()])
      const outcome = await new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) }).run({ ...run, provider: { ...run.provider, apiKey: key } })
      assert.equal(outcome, { status: 'completed' })
      const events = await log.invocationEvents('invocation-secret')
      const ids = events.flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output.responseId] : []))
      assert.equal(ids, ['chatcmpl-[redacted]'])
      assert.not.ok(JSON.stringify(events).includes(key))
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  'an answer recorded with usage details and a responseId is sent back as one without them: the next request, in the run and in a continuation, is byte for byte the same',
  bounded(15_000, async (dir) => {
    const call = { id: 'call_same', type: 'function', function: { name: 'echo', arguments: '{"value":1}' } }
    const details = { prompt_tokens: 40, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 32 }, completion_tokens_details: { reasoning_tokens: 4 } }
    /** The bodies a run and its continuation send, against answers with or without the new members; and what was recorded. */
    const bodies = async (name: string, withMembers: boolean) => {
      const extra = (n: number) => (withMembers ? { id: `chatcmpl-${name}-${n}`, usage: details } : { id: undefined, usage: { prompt_tokens: 40, completion_tokens: 9 } })
      const server = await quirkServer([
        json({ ...completion({ content: null, tool_calls: [call] }), ...extra(1) }),
        json({ ...completion({ content: 'echoed' }, 'stop'), ...extra(2) }),
        json({ ...completion({ content: 'again' }, 'stop'), ...extra(3) }),
      ])
      const log = await EventLog.open(join(dir, name))
      try {
        const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) })
        assert.equal(await engine.run(messageRun(server.baseUrl, 'same', [effectTool()])), { status: 'completed' })
        const source = (await log.runSource('session-same', 'run-same'))?.boundary
        assert.ok(source)
        const next = messageRun(server.baseUrl, 'same-on', [effectTool()])
        assert.equal(await engine.run({ ...next, invocation: { ...next.invocation, sessionId: 'session-same' }, work: { kind: 'continuation', source, content: 'and now?' } }), { status: 'completed' })
        const outputs = (await log.invocationEvents('invocation-same')).flatMap((e) => (e.event.fact.type === 'model.completed' ? [e.event.fact.output] : []))
        return { raw: [...server.raw], outputs }
      } finally {
        await log.close()
        await server.close()
      }
    }
    const plain = await bodies('without', false)
    const rich = await bodies('with', true)
    assert.equal(rich.outputs.map((output) => [output.responseId, output.usage]), [
      ['chatcmpl-with-1', { inputTokens: 40, outputTokens: 9, cachedInputTokens: 32, reasoningTokens: 4 }],
      ['chatcmpl-with-2', { inputTokens: 40, outputTokens: 9, cachedInputTokens: 32, reasoningTokens: 4 }],
    ])
    assert.equal(plain.outputs.map((output) => [output.responseId, output.usage]), [
      [undefined, { inputTokens: 40, outputTokens: 9 }],
      [undefined, { inputTokens: 40, outputTokens: 9 }],
    ])
    assert.is(rich.raw.length, 3)
    for (const [index, body] of rich.raw.entries()) assert.is(body, plain.raw[index], `request ${index + 1}`)
    assert.not.ok(rich.raw.some((body) => /chatcmpl|cached|reasoning|responseId/i.test(body)))
  }),
)

/**
 * A message run whose model requests are answered by `responders` (`retries` retries): its outcome,
 * the `provider` of each `model.interrupted` fact, and every stored fact's JSON.
 */
async function refusedBy(dir: string, responders: Responder[], options: { stream?: boolean; apiKey?: string; retries?: number } = {}) {
  const server = await quirkServer(responders)
  const log = await EventLog.open(join(dir, 'log'))
  try {
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: options.retries ?? 0, backoffMs: 5 }) })
    const run = messageRun(server.baseUrl, 'refused', [effectTool()], options.stream ? { providerOptions: { stream: true } } : {})
    const outcome = await engine.run(options.apiKey === undefined ? run : { ...run, provider: { ...run.provider, apiKey: options.apiKey } })
    const events = await log.invocationEvents('invocation-refused')
    const interrupted = events.flatMap((e) => (e.event.fact.type === 'model.interrupted' ? [e.event.fact] : []))
    const ended = events.at(-1)?.event.fact
    return { outcome, providers: interrupted.map((fact) => fact.provider), ended: ended?.type === 'invocation.ended' ? ended.outcome : undefined, stored: JSON.stringify(events), requests: server.raw }
  } finally {
    await log.close()
    await server.close()
  }
}

test(
  "HTTP 400 context_length_exceeded (OpenAI's body): the fact and the failed outcome carry the status, code, type and param, to branch on without reading the message; a continuation's request does not carry them",
  bounded(15_000, async (dir) => {
    const overflow = json(
      {
        error: {
          message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.",
          type: 'invalid_request_error',
          param: 'messages',
          code: 'context_length_exceeded',
        },
      },
      400,
    )
    const provider = { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' }
    const server = await quirkServer([overflow, overflow])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) })
      const outcome = await engine.run(messageRun(server.baseUrl, 'long', [effectTool()]))
      assert.equal(outcome, { status: 'failed', class: 'model_failed', message: `the provider answered HTTP 400: This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens. Please reduce the length of the messages.`, provider })
      assert.ok(outcome.status === 'failed' && outcome.provider?.code === 'context_length_exceeded')
      const facts = (await log.invocationEvents('invocation-long')).map((e) => e.event.fact)
      assert.equal(facts.flatMap((fact) => (fact.type === 'model.interrupted' ? [fact] : [])), [{ type: 'model.interrupted', stepId: 'step-1', status: 'failed', message: outcome.message, provider }])
      assert.equal(facts.at(-1), { type: 'invocation.ended', outcome })
      // A continuation replays the unanswered message, never what the provider said of the refusal.
      const source = (await log.runSource('session-long', 'run-long'))?.boundary
      assert.ok(source)
      const next = messageRun(server.baseUrl, 'long-on', [effectTool()])
      const continued = await engine.run({ ...next, invocation: { ...next.invocation, sessionId: 'session-long' }, work: { kind: 'continuation', source, content: 'and now?' } })
      assert.equal(continued.status === 'failed' ? continued.provider : undefined, provider)
      assert.is(server.raw.length, 2)
      assert.not.ok(server.raw.some((body) => /context_length_exceeded|invalid_request_error|"provider"/.test(body)))
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  'HTTP 401 with only a message (or a plain text body) records the status alone; without any status, code, type or param (a connection refused) there is no provider member',
  bounded(15_000, async (dir) => {
    const onlyMessage = await refusedBy(join(dir, 'message'), [json({ error: { message: 'Incorrect API key provided.' } }, 401)])
    assert.equal(onlyMessage.providers, [{ status: 401 }])
    assert.equal(onlyMessage.outcome, { status: 'failed', class: 'model_failed', message: 'the provider answered HTTP 401: Incorrect API key provided.', provider: { status: 401 } })
    const plain = await refusedBy(join(dir, 'plain'), [(res) => res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found')])
    assert.equal(plain.providers, [{ status: 404 }])
    assert.equal(plain.outcome.status === 'failed' ? plain.outcome.provider : undefined, { status: 404 })
    // A run against a port nothing listens on: not a refusal by a provider.
    const closed = await quirkServer([])
    const baseUrl = closed.baseUrl
    await closed.close()
    const log = await EventLog.open(join(dir, 'unreachable'))
    try {
      const outcome = await new Engine({ log, model: new ModelExecutor({ timeoutMs: 3_000, retries: 0 }) }).run(messageRun(baseUrl, 'gone', [effectTool()]))
      assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
      assert.not.ok('provider' in outcome)
      const interrupted = (await log.invocationEvents('invocation-gone')).flatMap((e) => (e.event.fact.type === 'model.interrupted' ? [e.event.fact] : []))
      assert.equal(interrupted.map((fact) => 'provider' in fact), [false])
    } finally {
      await log.close()
    }
  }),
)

test(
  "a numeric code (vLLM's top-level { object: 'error', code: 400 }) is recorded as its decimal digits; a code over 128 characters, or not a string or a whole number, is dropped, not the rest",
  bounded(15_000, async (dir) => {
    const vllm = await refusedBy(join(dir, 'vllm'), [
      json({ object: 'error', message: "This model's maximum context length is 4096 tokens.", type: 'BadRequestError', param: null, code: 400 }, 400),
    ])
    assert.equal(vllm.providers, [{ status: 400, code: '400', type: 'BadRequestError' }])
    assert.equal(vllm.outcome.status === 'failed' ? vllm.outcome.provider : undefined, { status: 400, code: '400', type: 'BadRequestError' })
    const long = await refusedBy(join(dir, 'long'), [json({ error: { message: 'no', code: 'c'.repeat(129), type: 't'.repeat(128), param: { at: 'messages' } } }, 422)])
    assert.equal(long.providers, [{ status: 422, type: 't'.repeat(128) }])
    const odd = await refusedBy(join(dir, 'odd'), [json({ error: { message: 'no', code: 1.5, type: '', param: 'messages' } }, 400)])
    assert.equal(odd.providers, [{ status: 400, param: 'messages' }])
  }),
)

test(
  "a code, type or param that quotes the provider's API key is redacted as the message is",
  bounded(15_000, async (dir) => {
    const key = 'sk-proj-4f9Qz7LmN2xR8tVb6WcY1dKe'
    const run = await refusedBy(join(dir, 'key'), [json({ error: { message: `bad key ${key}`, code: `invalid_api_key:${key}`, type: `invalid_request_error ${key.slice(0, 12)}`, param: key } }, 401)], { apiKey: key })
    assert.equal(run.providers, [{ status: 401, code: 'invalid_api_key:[redacted]', type: 'invalid_request_error [redacted]', param: '[redacted]' }])
    assert.equal(run.outcome.status === 'failed' ? run.outcome.provider : undefined, run.providers[0])
    assert.not.ok(run.stored.includes(key) || run.stored.includes(key.slice(0, 12)))
  }),
)

test(
  'an error inside a stream carries its code and type (no status: the answer was HTTP 200), on each retried attempt; the failed outcome carries the last attempt’s',
  bounded(15_000, async (dir) => {
    const broken = (error: Record<string, unknown>) => sse([chunk({ role: 'assistant', content: 'partial' }), { error }])
    const run = await refusedBy(
      join(dir, 'stream'),
      [broken({ message: 'The server had an error', type: 'server_error', code: 'server_error' }), broken({ message: 'Overloaded', type: 'overloaded_error', code: 529 })],
      { stream: true, retries: 1 },
    )
    assert.equal(run.providers, [
      { code: 'server_error', type: 'server_error' },
      { code: '529', type: 'overloaded_error' },
    ])
    assert.equal(run.outcome.status === 'failed' ? [run.outcome.class, run.outcome.provider] : undefined, ['model_failed', { code: '529', type: 'overloaded_error' }])
    assert.equal(run.ended, run.outcome)
    // A 429 retried into a 503: the outcome is the last attempt's.
    const retried = await refusedBy(join(dir, 'retried'), [json({ error: { message: 'slow down', code: 'rate_limit_exceeded', type: 'requests' } }, 429), json({ error: { message: 'down' } }, 503)], { retries: 1 })
    assert.equal(retried.providers, [{ status: 429, code: 'rate_limit_exceeded', type: 'requests' }, { status: 503 }])
    assert.equal(retried.outcome.status === 'failed' ? retried.outcome.provider : undefined, { status: 503 })
  }),
)

test.run()
