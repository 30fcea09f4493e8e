/**
 * A model answer's tool calls passed on live (`start(input, { onToolCallText })`): each call begun
 * once its id and name are known and its arguments have begun, its arguments piece by piece as the provider streams them (whole
 * for a plain JSON answer), per step and attempt, never past the attempt, without the provider's
 * credentials, and always adding up to the arguments the answer records.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { ModelClient, ModelResponse, ModelToolCallPiece, ToolCallPiece } from '../index.js'
import { LiveToolCalls } from '../actors/model-text.js'
import { secretsOf } from '../actors/redaction.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, only, refusedWithoutWriting, storedEvents } from './support/engine-fixtures.js'

/** Each call's pieces of one step and attempt: [callId, name, the arguments joined, how many pieces]. */
const calls = (pieces: readonly ModelToolCallPiece[], stepId: string, attempt = 1) => {
  const found = new Map<string, { name: string; text: string; pieces: number; first: string }>()
  for (const piece of pieces) {
    if (piece.stepId !== stepId || piece.attempt !== attempt) continue
    const call = found.get(piece.callId)
    if (call === undefined) found.set(piece.callId, { name: piece.name, text: piece.arguments, pieces: 1, first: piece.arguments })
    else {
      call.text += piece.arguments
      call.pieces += 1
    }
  }
  return [...found].map(([callId, call]) => ({ callId, ...call }))
}

for (const stream of [true, false]) {
  test(
    `${stream ? 'a streamed' : 'a plain JSON'} answer: each tool call reaches onToolCallText begun with an empty piece, then its arguments ${stream ? 'piece by piece' : 'whole'}, before it is recorded, adding up to the recorded arguments`,
    engineTest(
      [
        answer.toolCalls(
          [
            { id: 'call-a', name: 'echo', arguments: { value: 42, note: 'the first of two calls, long enough to be cut' } },
            { id: 'call-b', name: 'lookup', arguments: { key: 'weather/berlin' } },
          ],
          { text: 'checking' },
        ),
        answer.text('done'),
      ],
      { stream },
      async (h) => {
        const pieces: ModelToolCallPiece[] = []
        const requestsWhenPassed: number[] = []
        const outcome = await h.run({ ...h.input('calls', { tools: [countingTool('echo'), countingTool('lookup')] }), toolConcurrency: 2 }, {
          onToolCallText: (piece) => {
            pieces.push(piece)
            requestsWhenPassed.push(h.server.requests.length)
          },
        })
        assert.equal(outcome, { status: 'completed' })
        const [completed] = only(await factsOf(h.log, 'invocation-calls'), 'model.completed')
        const recorded = completed?.output.toolCalls ?? []
        const seen = calls(pieces, 'step-1')
        assert.equal(
          seen.map((call) => [call.callId, call.name, call.text, call.first]),
          recorded.map((call) => [call.callId, call.name, call.arguments, '']),
          'each call begins with an empty piece, and its pieces add up to what is recorded',
        )
        if (stream) assert.ok(seen.every((call) => call.pieces > 2), `streamed in pieces: ${seen.map((call) => call.pieces)}`)
        else assert.equal(seen.map((call) => call.pieces), [2, 2], 'begun, then whole')
        assert.equal(calls(pieces, 'step-2'), [], 'an answer without calls passes nothing on')
        assert.ok(pieces.every((piece) => piece.invocationId === 'invocation-calls' && piece.attempt === 1))
        assert.ok(requestsWhenPassed.every((count) => count === 1), 'every piece came before the next request: before the calls ran')
      },
    ),
  )
}

test(
  'an API key the model echoes in a tool call\'s arguments, split across streamed chunks, never reaches a piece: the pieces add up to the redacted arguments',
  engineTest(
    [answer.toolCalls([{ id: 'call-k', name: 'echo', arguments: { note: 'the key is sk-live-0123456789abcdefXYZ', value: 1 } }]), answer.text('done')],
    { stream: true },
    async (h) => {
      const pieces: ModelToolCallPiece[] = []
      const input = { ...h.input('key', { tools: [countingTool('echo')] }), provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted', apiKey: 'sk-live-0123456789abcdefXYZ' } }
      assert.equal(await h.run(input, { onToolCallText: (piece) => pieces.push(piece) }), { status: 'completed' })
      const [completed] = only(await factsOf(h.log, 'invocation-key'), 'model.completed')
      const recorded = completed?.output.toolCalls[0]?.arguments
      assert.is(recorded, '{"note":"the key is [redacted]","value":1}')
      assert.is(calls(pieces, 'step-1')[0]?.text, recorded)
      assert.not.ok(pieces.some((piece) => piece.arguments.includes('0123456789abcdef')), 'no piece holds the key, nor the part of it a chunk held')
    },
  ),
)

test(
  'a retried step starts its calls over under the next attempt; pieces a client sends after it answered, and pieces of no known shape, are dropped; a receiver that throws changes nothing',
  (() => {
    let attempt = 0
    let late: ((piece: ToolCallPiece) => void) | undefined
    const client: ModelClient = {
      async complete(request): Promise<ModelResponse> {
        attempt += 1
        // The next step's answer: text only.
        if (attempt === 3) return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } }
        const send = request.onToolCall as (piece: unknown) => void
        send({ index: 0, callId: 'call-r', name: 'echo', arguments: '{"va' })
        send({ index: 'x', arguments: 'junk' })
        send(null)
        send({ index: 0 })
        if (attempt === 1) return { kind: 'interrupted', status: 'retryable_failure', message: 'busy' }
        if (attempt === 2) {
          send({ index: 0, arguments: 'lue":1}' })
          late = request.onToolCall
        }
        return { kind: 'completed', output: { toolCalls: [{ callId: 'call-r', name: 'echo', arguments: '{"value":1}' }], finishReason: 'tool_calls' } }
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 2, backoffMs: 1 } }, async (h) => {
      const pieces: ModelToolCallPiece[] = []
      const outcome = await h.run(h.input('retry', { tools: [countingTool('echo')] }), {
        onToolCallText: (piece) => {
          pieces.push(piece)
          late?.({ index: 0, arguments: 'after' })
          throw new Error('the receiver failed')
        },
      })
      assert.equal(outcome, { status: 'completed' })
      assert.equal(
        pieces.map((piece) => [piece.attempt, piece.callId, piece.arguments]),
        [
          [1, 'call-r', ''],
          [1, 'call-r', '{"va'],
          [2, 'call-r', ''],
          [2, 'call-r', '{"va'],
          [2, 'call-r', 'lue":1}'],
        ],
      )
      const [completed] = only(await factsOf(h.log, 'invocation-retry'), 'model.completed')
      assert.is(completed?.output.toolCalls[0]?.arguments, '{"value":1}')
    })
  })(),
)

test(
  "each call piece names its attempt's model.requested (durable before it) by seq, also a retry's; indexes run over the attempt's call pieces with no gap, and offsets add up per call, held-back key and all",
  engineTest(
    [
      answer.reset({ stream: true }),
      answer.toolCalls(
        [
          { id: 'call-a', name: 'echo', arguments: { value: 42, note: 'sk-live-0123 is not the key, sk-live-0123456789abcdefXYZ is' } },
          { id: 'call-b', name: 'lookup', arguments: { key: 'weather/berlin' } },
        ],
        { text: 'checking', pieces: 12 },
      ),
      answer.text('done'),
    ],
    { stream: true },
    async (h) => {
      const pieces: ModelToolCallPiece[] = []
      let allDurable = true
      const base = h.input('seqs', { tools: [countingTool('echo'), countingTool('lookup')] })
      const input = { ...base, provider: { ...base.provider, apiKey: 'sk-live-0123456789abcdefXYZ' }, toolConcurrency: 2 }
      const outcome = await h.run(input, {
        onToolCallText: (piece) => {
          pieces.push(piece)
          allDurable &&= h.log.head().highWater >= piece.requestSeq
        },
      })
      assert.equal(outcome, { status: 'completed' })
      const requested = (await storedEvents(h.log))
        .filter(({ event }) => event.invocation.invocationId === 'invocation-seqs' && event.fact.type === 'model.requested')
        .map(({ seq, event }) => [(event.fact as { stepId: string }).stepId, seq] as const)
      assert.equal(requested.map(([stepId]) => stepId), ['step-1', 'step-1', 'step-2'], 'the reset step was retried under the same stepId')
      const retrySeq = requested[1]?.[1]
      assert.ok(allDurable, 'the fact a piece names was in the log when the piece came')
      assert.ok(pieces.length > 4)
      assert.ok(
        pieces.every((piece) => piece.stepId === 'step-1' && piece.attempt === 2 && piece.requestSeq === retrySeq),
        `every piece is of the retry, the second model.requested (seq ${retrySeq}): ${JSON.stringify(pieces.map((piece) => [piece.attempt, piece.requestSeq]))}`,
      )
      assert.equal(
        pieces.map((piece) => piece.index),
        pieces.map((_, at) => at),
        'numbered over all the calls, with no gap',
      )
      const [completed] = only(await factsOf(h.log, 'invocation-seqs'), 'model.completed')
      const recorded = completed?.output.toolCalls ?? []
      assert.is(recorded[0]?.arguments, '{"value":42,"note":"sk-live-0123 is not the key, [redacted] is"}')
      for (const call of recorded) {
        let text = ''
        for (const piece of pieces.filter((candidate) => candidate.callId === call.callId)) {
          assert.is(piece.offset, text.length, `${call.callId}: offset of ${JSON.stringify(piece.arguments)}`)
          text += piece.arguments
        }
        assert.is(text, call.arguments, `${call.callId}: the pieces add up to the recorded arguments`)
      }
    },
  ),
)

test(
  'onToolCallText that is not a function is refused with RUN_INVALID_INPUT, and nothing is written',
  engineTest([answer.text('unused')], {}, async (h) => {
    const error = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('bad'), { onToolCallText: 42 as unknown as () => void }),
      'RUN_INVALID_INPUT',
      'a number receiver',
    )
    assert.equal(error.details, { fields: ['options.onToolCallText'] })
    assert.is(h.server.requests.length, 0)
  }),
)

test('LiveToolCalls: a new id at an index in use starts another call; a call streamed under another id than recorded comes whole under the recorded one', () => {
  const passed: [string, string, string][] = []
  const live = new LiveToolCalls(secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' }).inData, ({ callId, name }, text) => passed.push([callId, name, text]))
  live.push({ index: 0, arguments: '{"a"' })
  live.push({ index: 0, callId: 'c1', name: 'one' })
  live.push({ index: 0, arguments: ':1}' })
  live.push({ index: 0, callId: 'c2', name: 'two', arguments: '{}' })
  live.push({ index: 1, callId: 'c3', name: 'three', arguments: '{"b":' })
  live.finish([
    { callId: 'c1', name: 'one', arguments: '{"a":1}' },
    { callId: 'c2', name: 'two', arguments: '{}' },
    { callId: 'x3', name: 'three', arguments: '{"b":2}' },
  ])
  live.push({ index: 0, callId: 'c9', name: 'late', arguments: '{}' })
  assert.equal(passed, [
    ['c1', 'one', ''],
    ['c1', 'one', '{"a"'],
    ['c1', 'one', ':1}'],
    ['c2', 'two', ''],
    ['c2', 'two', '{}'],
    ['c3', 'three', ''],
    ['c3', 'three', '{"b":'],
    ['x3', 'three', ''],
    ['x3', 'three', '{"b":2}'],
  ])
})

test(
  "liveToolCalls() is the calls passed on so far of the attempt in flight, as the pieces come (a retry's starting over), held-back key text not in it; undefined once the answer is recorded, and after the run",
  engineTest(
    [
      answer.reset({ stream: true }),
      answer.toolCalls(
        [
          { id: 'call-a', name: 'echo', arguments: { value: 42, note: 'sk-live-0123 is not the key, sk-live-0123456789abcdefXYZ is' } },
          { id: 'call-b', name: 'lookup', arguments: { key: 'weather/berlin' } },
        ],
        { pieces: 9, pieceDelayMs: 5 },
      ),
      answer.text('done'),
    ],
    { stream: true },
    async (h) => {
      const pieces: ModelToolCallPiece[] = []
      const seen: unknown[] = []
      const base = h.input('calls-so-far', { tools: [countingTool('echo'), countingTool('lookup')] })
      const input = { ...base, provider: { ...base.provider, apiKey: 'sk-live-0123456789abcdefXYZ' }, toolConcurrency: 2 }
      const running = await h.start(input, {
        onToolCallText: (piece) => {
          pieces.push(piece)
          seen.push(h.engine.running('invocation-calls-so-far')?.liveToolCalls())
        },
      })
      assert.is(running.liveToolCalls(), undefined, 'no attempt in flight before the first request')
      assert.equal(await running.wait(), { status: 'completed' })
      assert.is(running.liveToolCalls(), undefined, 'nothing in flight once the run has ended')
      assert.is(running.liveText(), undefined, 'no text kept for a run started without onModelText')
      assert.ok(pieces.length > 6, `the calls came in pieces (${pieces.length})`)
      // What liveToolCalls() gave at each piece: the calls begun so far, each with its pieces joined.
      const expected = pieces.map((piece, at) => {
        const calls: { callId: string; name: string; arguments: string }[] = []
        for (const before of pieces.slice(0, at + 1)) {
          const call = calls.find((candidate) => candidate.callId === before.callId)
          if (call === undefined) calls.push({ callId: before.callId, name: before.name, arguments: before.arguments })
          else call.arguments += before.arguments
        }
        return { requestSeq: piece.requestSeq, stepId: 'step-1', attempt: 2, calls, pieces: at + 1 }
      })
      assert.equal(seen, expected)
      const [completed] = only(await factsOf(h.log, 'invocation-calls-so-far'), 'model.completed')
      const last = seen.at(-1) as { calls: { callId: string; name: string; arguments: string }[] }
      assert.equal(
        last.calls,
        (completed?.output.toolCalls ?? []).map(({ callId, name, arguments: text }) => ({ callId, name, arguments: text })),
        'the last piece leaves the calls as recorded (the key [redacted])',
      )
      assert.ok(
        seen.every((so) => !JSON.stringify(so).includes('sk-live-0123456789')),
        'no key, nor the part of one held back',
      )
    },
  ),
)

test(
  'liveToolCalls() of a request still waiting for its answer is its attempt with no call yet, and is gone once the attempt is cancelled; without onToolCallText there is none, onModelText or not',
  engineTest([answer.hang(), answer.hang()], { stream: true }, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('waiting'), { signal: controller.signal, onToolCallText: () => undefined })
    await h.server.seen(0)
    const [requested] = (await storedEvents(h.log)).filter(({ event }) => event.invocation.invocationId === 'invocation-waiting' && event.fact.type === 'model.requested')
    assert.equal(running.liveToolCalls(), { requestSeq: requested?.seq, stepId: 'step-1', attempt: 1, calls: [], pieces: 0 })
    assert.is(running.liveText(), undefined, 'no text kept without onModelText')
    controller.abort()
    assert.is((await running.wait()).status, 'cancelled')
    assert.is(running.liveToolCalls(), undefined)

    const other = new AbortController()
    const textOnly = await h.start(h.input('text-only'), { signal: other.signal, onModelText: () => undefined })
    await h.server.seen(1)
    assert.is(textOnly.liveToolCalls(), undefined, 'a run started without onToolCallText keeps no calls')
    assert.equal(textOnly.liveText()?.pieces, 0, 'its text is kept as before')
    other.abort()
    assert.is((await textOnly.wait()).status, 'cancelled')
  }),
)

test('LiveToolCalls.passed: the calls begun, in the order they began (a call named late after one named before it), their pieces joined, and how many pieces', () => {
  const live = new LiveToolCalls(secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm', apiKey: 'sk-live-0123456789abcdefXYZ' }).inData, () => undefined)
  assert.equal(live.passed, { calls: [], pieces: 0 }, 'nothing before the first piece')
  live.push({ index: 0, arguments: '{"a":' })
  assert.equal(live.passed, { calls: [], pieces: 0 }, 'a call without its id and name is not begun')
  live.push({ index: 1, callId: 'c-b', name: 'two', arguments: '{"k":"sk-li' })
  live.push({ index: 0, callId: 'c-a', name: 'one' })
  assert.equal(live.passed, {
    calls: [
      { callId: 'c-b', name: 'two', arguments: '{"k":"' },
      { callId: 'c-a', name: 'one', arguments: '{"a":' },
    ],
    pieces: 4,
  }, 'what could become the key is held back')
  live.push({ index: 1, arguments: 've-0123456789abcdefXYZ"}' })
  assert.equal(live.passed.calls[0], { callId: 'c-b', name: 'two', arguments: '{"k":"[redacted]"}' })
  assert.is(live.passed.pieces, 5)
})

test("LiveToolCalls: a call begins once its arguments begin, under the name its pieces last gave (a name in parts comes joined so far), and later pieces carry a name that grew; each recorded call completes the first one streamed under its id, so one id twice (or a name that differs from the pieces') begins no other call", () => {
  const passed: [string, string, string][] = []
  const live = new LiveToolCalls(secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' }).inData, ({ callId, name }, text) => passed.push([callId, name, text]))
  live.push({ index: 0, callId: 'c1', name: 'web_' })
  live.push({ index: 0, name: 'web_search' })
  assert.equal(live.passed, { calls: [], pieces: 0 }, 'not begun while its name may still grow')
  live.push({ index: 0, arguments: '{"q":' })
  live.push({ index: 0, name: 'web_search_x', arguments: '1}' })
  assert.equal(live.passed.calls, [{ callId: 'c1', name: 'web_search_x', arguments: '{"q":1}' }], 'the name as its last piece carried it')
  live.push({ index: 1, callId: 'c2', name: 'echo' })
  live.push({ index: 2, callId: 'c2', name: 'echo', arguments: '{}' })
  live.finish([
    { callId: 'c1', name: 'web_search_y', arguments: '{"q":1}' },
    { callId: 'c2', name: 'echo', arguments: '' },
    { callId: 'c2', name: 'echo', arguments: '{}' },
  ])
  assert.equal(passed, [
    ['c1', 'web_search', ''],
    ['c1', 'web_search', '{"q":'],
    ['c1', 'web_search_x', '1}'],
    ['c2', 'echo', ''],
    ['c2', 'echo', '{}'],
    ['c2', 'echo', ''],
  ])
  assert.equal(live.passed.calls.map(({ callId, name }) => [callId, name]), [['c1', 'web_search_x'], ['c2', 'echo'], ['c2', 'echo']], 'three calls, one per index')
})

test.run()
