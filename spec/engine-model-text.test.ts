/**
 * A model answer's text passed on live (`start(input, { onModelText })`): piece by piece as the
 * provider streams it, as one piece for a plain JSON answer, per step and attempt, never past the
 * attempt, without the provider's credentials, and always adding up to the recorded text.
 */
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { ModelClient, ModelResponse, ModelTextPiece } from '../index.js'
import { LiveText } from '../actors/model-text.js'
import { redact, secretsOf } from '../actors/redaction.js'
import { wellFormed } from '../store/encoding.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, only, refusedWithoutWriting, storedEvents, typesOf } from './support/engine-fixtures.js'

const joined = (pieces: readonly ModelTextPiece[], stepId: string, attempt = 1) =>
  pieces
    .filter((piece) => piece.stepId === stepId && piece.attempt === attempt)
    .map((piece) => piece.text)
    .join('')

const FINAL = 'the echo said forty-two, which answers the question'

/** The seqs of an invocation's `model.requested` facts, step by step, in the order they were recorded (attempt 1, 2, …). */
async function requestSeqs(log: import('../index.js').EventLog, invocationId: string): Promise<[string, number][]> {
  return (await storedEvents(log))
    .filter(({ event }) => event.invocation.invocationId === invocationId && event.fact.type === 'model.requested')
    .map(({ seq, event }) => [(event.fact as { stepId: string }).stepId, seq])
}

/** Checks that `pieces` (of one attempt) are numbered 0, 1, … with no gap and that each offset is the length of the text before it; returns their text. */
function contiguous(pieces: readonly { index: number; offset: number; text: string }[], what: string): string {
  let text = ''
  pieces.forEach((piece, position) => {
    assert.is(piece.index, position, `${what}: piece ${position}'s index`)
    assert.is(piece.offset, text.length, `${what}: piece ${position}'s offset`)
    text += piece.text
  })
  return text
}

const DRAFT = 'a first draft, cut off'
const DIGITS = '0123456789'.repeat(4)

for (const stream of [true, false]) {
  test(
    `${stream ? 'a streamed' : 'a plain JSON'} answer: its text reaches onModelText ${stream ? 'piece by piece' : 'as one piece'}, before it is recorded, and adds up to the recorded text`,
    engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 42 } }], { text: 'let me look that up' }), answer.toolCalls([{ name: 'echo', arguments: { value: 7 } }]), answer.text(FINAL)], { stream }, async (h) => {
      const pieces: ModelTextPiece[] = []
      const recordedWhenPassed: number[] = []
      const outcome = await h.run(h.input('live', { tools: [countingTool()] }), {
        onModelText: (piece) => {
          pieces.push(piece)
          recordedWhenPassed.push(h.server.requests.length)
        },
      })
      assert.equal(outcome, { status: 'completed' })
      const completed = only(await factsOf(h.log, 'invocation-live'), 'model.completed')
      assert.equal(
        completed.map((fact) => [fact.stepId, fact.output.text]),
        [
          ['step-1', 'let me look that up'],
          ['step-2', undefined],
          ['step-3', FINAL],
        ],
      )
      assert.is(joined(pieces, 'step-1'), 'let me look that up')
      assert.is(joined(pieces, 'step-2'), '', 'an answer without text passes nothing on')
      assert.is(joined(pieces, 'step-3'), FINAL)
      assert.equal([...new Set(pieces.map((piece) => piece.stepId))], ['step-1', 'step-3'], 'steps in order')
      assert.ok(pieces.every((piece) => piece.invocationId === 'invocation-live' && piece.attempt === 1 && piece.text.length > 0))
      // The scripted server streams text in three chunks; plain JSON comes whole.
      assert.is(pieces.filter((piece) => piece.stepId === 'step-3').length, stream ? 3 : 1)
      // Each step's pieces came while its own request was the last one sent: before the next step.
      assert.equal(
        pieces.map((piece, index) => [piece.stepId, recordedWhenPassed[index]]),
        pieces.map((piece) => [piece.stepId, Number(piece.stepId.slice(5))]),
      )
    }),
  )
}

test(
  'an API key the provider echoes, split across streamed chunks, never reaches a piece: the pieces add up to the redacted text',
  engineTest([answer.text('your key is sk-live-0123456789abcdefXYZ, keep it safe; sk-live-0123 is not it')], { stream: true }, async (h) => {
    const pieces: string[] = []
    const input = { ...h.input('key'), provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted', apiKey: 'sk-live-0123456789abcdefXYZ' } }
    assert.equal(await h.run(input, { onModelText: (piece) => pieces.push(piece.text) }), { status: 'completed' })
    const [completed] = only(await factsOf(h.log, 'invocation-key'), 'model.completed')
    assert.is(completed?.output.text, 'your key is [redacted], keep it safe; sk-live-0123 is not it')
    assert.is(pieces.join(''), completed?.output.text)
    assert.ok(pieces.length >= 2, `the text came in pieces (${pieces.length})`)
    for (const piece of pieces) assert.not.ok(piece.includes('0123456789abcdef'), `no piece holds the key: ${JSON.stringify(piece)}`)
  }),
)

/** A client whose first attempt streams a draft and fails retryably, and whose second streams the answer, then keeps calling. */
function retryingClient(late: Promise<void>[]): ModelClient {
  let attempts = 0
  return {
    async complete(request): Promise<ModelResponse> {
      attempts += 1
      if (attempts === 1) {
        request.onText?.('a draft that ')
        request.onText?.('breaks off')
        return { kind: 'interrupted', status: 'retryable_failure', message: 'connection reset' }
      }
      request.onText?.('final ')
      request.onText?.(42 as unknown as string)
      request.onText?.('')
      request.onText?.('answer')
      const onText = request.onText
      late.push(new Promise((resolve) => setTimeout(() => resolve(onText?.(' and a late piece')), 5)))
      // Two microtasks after the answer: the client has answered by then.
      void Promise.resolve()
        .then(() => undefined)
        .then(() => onText?.(' and a piece right after'))
      return { kind: 'completed', output: { text: 'final answer', toolCalls: [], finishReason: 'stop' } }
    },
  }
}

test(
  'a retry starts its text over under the next attempt; what a client passes after its attempt, or passes that is not text, is dropped',
  (() => {
    const late: Promise<void>[] = []
    return engineTest([], { model: { createClient: () => retryingClient(late) } }, async (h) => {
      const pieces: ModelTextPiece[] = []
      assert.equal(await h.run(h.input('retry'), { onModelText: (piece) => pieces.push(piece) }), { status: 'completed' })
      await Promise.all(late)
      assert.equal(
        pieces.map((piece) => [piece.stepId, piece.attempt, piece.text]),
        [
          ['step-1', 1, 'a draft that '],
          ['step-1', 1, 'breaks off'],
          ['step-1', 2, 'final '],
          ['step-1', 2, 'answer'],
        ],
      )
      assert.equal(await typesOf(h.log, 'invocation-retry'), [
        'invocation.opened',
        'model.requested',
        'model.interrupted',
        'model.requested',
        'model.completed',
        'invocation.ended',
      ])
    })
  })(),
)

test(
  'a receiver that throws changes nothing of the run; a client that streams other text than it answers with gets no more pieces',
  engineTest(
    [],
    {
      model: {
        createClient: () => ({
          async complete(request) {
            request.onText?.('other')
            return { kind: 'completed', output: { text: 'recorded words', toolCalls: [], finishReason: 'stop' } }
          },
        }),
      },
    },
    async (h) => {
      const seen: string[] = []
      const outcome = await h.run(h.input('throws'), {
        onModelText: (piece) => {
          seen.push(piece.text)
          throw new Error('the receiver broke')
        },
      })
      assert.equal(outcome, { status: 'completed' })
      assert.equal(seen, ['other'], 'the recorded text is not passed on over pieces that do not start it')
      const [completed] = only(await factsOf(h.log, 'invocation-throws'), 'model.completed')
      assert.is(completed?.output.text, 'recorded words')
    },
  ),
)

test(
  'a run that asks for a stream (providerOptions.stream) gets its text piece by piece, as a paced answer sends it; one that does not, in one piece',
  engineTest([answer.text(DIGITS, { pieces: 8, pieceDelayMs: 15 }), answer.text(DIGITS, { pieces: 8, pieceDelayMs: 15 })], {}, async (h) => {
    const streamed: string[] = []
    const asked = { ...h.input('paced'), providerOptions: { stream: true } }
    assert.equal(await h.run(asked, { onModelText: ({ text }) => void streamed.push(text) }), { status: 'completed' })
    // Sent 15 ms apart, each chunk is read on its own: one piece each.
    assert.equal(streamed, Array.from({ length: 8 }, (_, index) => DIGITS.slice(index * 5, index * 5 + 5)))
    const plain: string[] = []
    assert.equal(await h.run(h.input('plain'), { onModelText: ({ text }) => void plain.push(text) }), { status: 'completed' })
    assert.equal(plain, [DIGITS], 'a plain JSON answer is one piece')
    assert.equal(h.server.requests.map((request) => request.body.stream), [true, undefined])
    for (const [options, field] of [
      [{ pieces: 0 }, 'pieces'],
      [{ pieces: 1.5 }, 'pieces'],
      [{ pieceDelayMs: -1 }, 'pieceDelayMs'],
      [{ pieceDelayMs: 60_001 }, 'pieceDelayMs'],
    ] as const) {
      let code: unknown
      let named: unknown
      try {
        answer.text('x', options)
      } catch (error) {
        code = (error as { code?: unknown }).code
        named = (error as { details?: { field?: unknown } }).details?.field
      }
      assert.equal([code, named], ['TESTING_INVALID_OPTIONS', field], JSON.stringify(options))
    }
  }),
)

test(
  'onModelText that is not a function is refused with RUN_INVALID_INPUT, and nothing is written',
  engineTest([answer.text('unused')], {}, async (h) => {
    const error = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('bad'), { onModelText: 'print' as unknown as () => void }),
      'RUN_INVALID_INPUT',
      'a string receiver',
    )
    assert.equal(error.details, { fields: ['options.onModelText'] })
    assert.is(h.server.requests.length, 0)
  }),
)

const THOUGHT = 'The user asks for the answer; forty-two it is.'

for (const stream of [true, false]) {
  test(
    `${stream ? 'a streamed' : 'a plain JSON'} answer's reasoning reaches onModelReasoning ${stream ? 'piece by piece, in order, before its text' : 'as one piece'}; onModelText gets the text only, and the recorded reasoning is the pieces joined`,
    engineTest([answer.text(FINAL, { reasoning: THOUGHT })], { stream }, async (h) => {
      const order: string[] = []
      const reasoning: ModelTextPiece[] = []
      const text: ModelTextPiece[] = []
      const outcome = await h.run(h.input('think'), {
        onModelReasoning: (piece) => {
          reasoning.push(piece)
          order.push('reasoning')
        },
        onModelText: (piece) => {
          text.push(piece)
          order.push('text')
        },
      })
      assert.equal(outcome, { status: 'completed' })
      const [completed] = only(await factsOf(h.log, 'invocation-think'), 'model.completed')
      assert.is(completed?.output.reasoning, THOUGHT)
      assert.is(completed?.output.text, FINAL)
      // The scripted server streams the reasoning in three chunks, then the text in three.
      assert.is(reasoning.length, stream ? 3 : 1)
      assert.is(contiguous(reasoning, 'reasoning'), THOUGHT)
      assert.is(contiguous(text, 'text'), FINAL)
      if (stream) assert.equal(order, ['reasoning', 'reasoning', 'reasoning', 'text', 'text', 'text'])
      const [[, requestSeq] = ['', -1]] = await requestSeqs(h.log, 'invocation-think')
      assert.ok(reasoning.every((piece) => piece.invocationId === 'invocation-think' && piece.stepId === 'step-1' && piece.attempt === 1 && piece.requestSeq === requestSeq))
    }),
  )
}

test(
  'an API key the provider echoes in its reasoning, split across two streamed chunks, never reaches onModelReasoning whole: the pieces add up to the redacted reasoning',
  // 48 characters in two chunks of 24: the key (characters 11 to 38) is cut in its middle.
  engineTest([answer.text('done', { reasoning: 'The key is sk-live-0123456789abcdefXYZ; hide it.', pieces: 2 })], { stream: true }, async (h) => {
    const pieces: string[] = []
    const input = { ...h.input('think-key'), provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted', apiKey: 'sk-live-0123456789abcdefXYZ' } }
    assert.equal(await h.run(input, { onModelReasoning: (piece) => pieces.push(piece.text) }), { status: 'completed' })
    const [completed] = only(await factsOf(h.log, 'invocation-think-key'), 'model.completed')
    assert.is(completed?.output.reasoning, 'The key is [redacted]; hide it.')
    assert.is(pieces.join(''), completed?.output.reasoning)
    assert.ok(pieces.length >= 2, `the reasoning came in pieces (${pieces.length})`)
    for (const piece of pieces) assert.not.ok(piece.includes('0123456789abcdef'), `no piece holds the key: ${JSON.stringify(piece)}`)
  }),
)

test(
  'an onModelReasoning that throws, or rejects, changes nothing: the run records what a run without it records',
  engineTest([answer.text(FINAL, { reasoning: THOUGHT }), answer.text(FINAL, { reasoning: THOUGHT }), answer.text(FINAL, { reasoning: THOUGHT })], { stream: true }, async (h) => {
    let calls = 0
    assert.equal(await h.run(h.input('plain')), { status: 'completed' })
    assert.equal(
      await h.run(h.input('throws'), {
        onModelReasoning: () => {
          calls += 1
          throw new Error('the receiver failed')
        },
      }),
      { status: 'completed' },
    )
    assert.equal(
      await h.run(h.input('rejects'), {
        onModelReasoning: async () => {
          calls += 1
          throw new Error('the async receiver failed')
        },
      }),
      { status: 'completed' },
    )
    assert.is(calls, 6, 'each receiver got the three pieces')
    const outputs = async (id: string) => only(await factsOf(h.log, `invocation-${id}`), 'model.completed').map((fact) => ({ ...fact.output, responseId: undefined, requestId: undefined }))
    const plain = await outputs('plain')
    assert.is(plain[0]?.reasoning, THOUGHT)
    assert.equal(await outputs('throws'), plain)
    assert.equal(await outputs('rejects'), plain)
    assert.equal(await typesOf(h.log, 'invocation-throws'), await typesOf(h.log, 'invocation-plain'))
    assert.equal(await typesOf(h.log, 'invocation-rejects'), await typesOf(h.log, 'invocation-plain'))
  }),
)

test(
  'onModelReasoning that is not a function is refused with RUN_INVALID_INPUT, and nothing is written',
  engineTest([answer.text('unused')], {}, async (h) => {
    const error = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('bad'), { onModelReasoning: 'print' as unknown as () => void }),
      'RUN_INVALID_INPUT',
      'a string receiver',
    )
    assert.equal(error.details, { fields: ['options.onModelReasoning'] })
    // Refused as a receiver that is not one, not as an option the engine does not know.
    assert.match(error.message, 'options.onModelReasoning must be a function')
    assert.is(h.server.requests.length, 0)
  }),
)

test('LiveText: however the text is cut, the pieces are well-formed, hold no credential whole, and add up to the recorded text', () => {
  const keyChar = fc.constantFrom(...'abcXYZ0189-_'.split(''))
  // Random keys, and keys that overlap themselves (`a1a1…`, `ab0ab0…a`), where a match can start inside another.
  const key = fc
    .oneof(
      fc.array(keyChar, { minLength: 16, maxLength: 24 }).map((chars) => chars.join('')),
      fc.tuple(fc.array(keyChar, { minLength: 1, maxLength: 4 }), fc.integer({ min: 16, max: 24 })).map(([unit, length]) => unit.join('').repeat(length).slice(0, length)),
    )
    .filter((candidate) => /[0-9]/.test(candidate) && /[A-Za-z]/.test(candidate))
  const filler = fc.constantFrom('a', 'b', 'X', '0', '1', ' ', '-', '"', '\\', '\ud83d', '\ude00', '\ud83d\ude00', 'é')
  fc.assert(
    fc.property(key, fc.array(fc.oneof(filler, fc.constant('KEY'), fc.constant('KEYPART'), fc.constant('KEYTAIL')), { maxLength: 40 }), fc.array(fc.nat(60), { maxLength: 12 }), (apiKey, parts, cuts) => {
      const secrets = secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm', apiKey }).inData
      const text = parts.map((part) => (part === 'KEY' ? apiKey : part === 'KEYPART' ? apiKey.slice(0, 9) : part === 'KEYTAIL' ? apiKey.slice(5) : part)).join('')
      const positions = [...new Set(cuts.map((cut) => Math.min(cut, text.length)))].sort((a, b) => a - b)
      const pieces: string[] = []
      const places: { index: number; offset: number; text: string }[] = []
      const live = new LiveText(secrets, (piece, at) => {
        pieces.push(piece)
        places.push({ ...at, text: piece })
      })
      let from = 0
      for (const at of [...positions, text.length]) {
        live.push(text.slice(from, at))
        from = at
      }
      const recorded = redact(wellFormed(text), secrets)
      live.finish(recorded)
      assert.is(pieces.join(''), recorded)
      // Held back or not, each piece is numbered as it is passed on: no gap, offsets adding up.
      assert.is(contiguous(places, 'LiveText'), recorded)
      assert.equal(live.passed, { text: recorded, pieces: pieces.length })
      for (const piece of pieces) {
        assert.is(wellFormed(piece), piece, 'no lone surrogate in a piece')
        assert.not.ok(piece.includes(apiKey), 'no key in a piece')
      }
    }),
    { numRuns: 2_000 },
  )
})

test('LiveText: a key echoed over and over, each copy overlapping the last, in one-character pieces, is redacted copy by copy', () => {
  const apiKey = 'a0123456789bcdefa'
  const secrets = secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm', apiKey }).inData
  // Each copy starts with the last character of the one before: 200,000 characters.
  const text = apiKey + apiKey.slice(1).repeat(12_500)
  const pieces: string[] = []
  const live = new LiveText(secrets, (piece) => pieces.push(piece))
  for (const char of text) live.push(char)
  const recorded = redact(text, secrets)
  assert.ok(pieces.length > 1_000, 'passed on as it came, not held to the end')
  live.finish(recorded)
  assert.is(pieces.join(''), recorded)
  assert.not.ok(pieces.some((piece) => piece.includes(apiKey)))
})

test('an async receiver whose promise rejects changes nothing either: no unhandled rejection, the run completes', async () => {
  const unhandled: unknown[] = []
  const listener = (reason: unknown) => unhandled.push(reason)
  process.on('unhandledRejection', listener)
  try {
    await engineTest([answer.text('hello there, in three pieces')], { stream: true }, async (h) => {
      let calls = 0
      const outcome = await h.run(h.input('async'), {
        onModelText: async () => {
          calls += 1
          throw new Error('the socket is gone')
        },
      })
      assert.equal(outcome, { status: 'completed' })
      assert.is(calls, 3)
      await new Promise((resolve) => setTimeout(resolve, 20))
    })()
  } finally {
    process.off('unhandledRejection', listener)
  }
  assert.equal(unhandled, [])
})

test('LiveText: after close() or finish() nothing more is passed on', () => {
  const pieces: string[] = []
  const live = new LiveText(secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' }).inData, (piece) => pieces.push(piece))
  live.push('one ')
  live.close()
  live.push('two')
  live.finish('one two')
  assert.equal(pieces, ['one '])
})

test(
  "each piece names its attempt's model.requested (durable before it) by seq, first attempt and a retry after a stream cut mid-answer, and is numbered with no gap",
  engineTest([answer.reset({ stream: true, text: DRAFT }), answer.text(FINAL, { pieces: 7 })], { stream: true }, async (h) => {
    const pieces: ModelTextPiece[] = []
    const durableWhenPassed: boolean[] = []
    const outcome = await h.run(h.input('seqs'), {
      onModelText: (piece) => {
        pieces.push(piece)
        durableWhenPassed.push(h.log.head().highWater >= piece.requestSeq)
      },
    })
    assert.equal(outcome, { status: 'completed' })
    const requested = await requestSeqs(h.log, 'invocation-seqs')
    assert.is(requested.length, 2, 'a retry records a second model.requested')
    assert.equal(
      requested.map(([stepId]) => stepId),
      ['step-1', 'step-1'],
      'with the same stepId',
    )
    assert.equal(await typesOf(h.log, 'invocation-seqs'), ['invocation.opened', 'model.requested', 'model.interrupted', 'model.requested', 'model.completed', 'invocation.ended'])
    assert.ok(durableWhenPassed.every(Boolean), 'the fact a piece names was in the log when the piece came')
    for (const [attempt, [, seq]] of requested.entries()) {
      const own = pieces.filter((piece) => piece.attempt === attempt + 1)
      assert.ok(own.length > 0, `attempt ${attempt + 1} passed text on`)
      assert.ok(
        own.every((piece) => piece.requestSeq === seq && piece.stepId === 'step-1'),
        `attempt ${attempt + 1}'s pieces name seq ${seq}: ${JSON.stringify(own.map((piece) => piece.requestSeq))}`,
      )
      assert.is(contiguous(own, `attempt ${attempt + 1}`), attempt === 0 ? DRAFT : FINAL)
    }
    const [completed] = only(await factsOf(h.log, 'invocation-seqs'), 'model.completed')
    assert.is(completed?.output.text, FINAL)
    assert.is(pieces.filter((piece) => piece.attempt === 2).length, 7, 'the answer came in the seven pieces it was sent in')
    // requestSeq and index: a unique id for each piece, ordered as the pieces came.
    const ids = pieces.map((piece) => `${piece.requestSeq}.${piece.index}`)
    assert.is(new Set(ids).size, pieces.length)
    assert.equal(ids, [...ids].sort((a, b) => Number(a.split('.')[0]) - Number(b.split('.')[0]) || Number(a.split('.')[1]) - Number(b.split('.')[1])))
  }),
)

test(
  'a run that did not ask for a stream, cut off by answer.reset({ text }): the text reaches onModelText as its attempt\'s partial answer, and the retry starts over',
  engineTest([answer.reset({ text: DRAFT }), answer.text(FINAL)], {}, async (h) => {
    const pieces: ModelTextPiece[] = []
    const outcome = await h.run(h.input('unstreamed'), { onModelText: (piece) => pieces.push(piece) })
    assert.equal(outcome, { status: 'completed' })
    assert.ok(h.server.requests.every((request) => request.body.stream === undefined), 'no request asked for a stream')
    assert.equal(await typesOf(h.log, 'invocation-unstreamed'), ['invocation.opened', 'model.requested', 'model.interrupted', 'model.requested', 'model.completed', 'invocation.ended'])
    const [[, first] = ['', 0], [, retry] = ['', 0]] = await requestSeqs(h.log, 'invocation-unstreamed')
    assert.equal(
      pieces.map(({ requestSeq, attempt, index, offset, text }) => ({ requestSeq, attempt, index, offset, text })),
      [
        { requestSeq: first, attempt: 1, index: 0, offset: 0, text: DRAFT },
        { requestSeq: retry, attempt: 2, index: 0, offset: 0, text: FINAL },
      ],
      'the draft before the reset, then the answer whole (plain JSON)',
    )
    const [interrupted] = only(await factsOf(h.log, 'invocation-unstreamed'), 'model.interrupted')
    assert.is(interrupted?.status, 'retryable_failure')
  }),
)

test(
  'text held back while it could become the provider key is counted when it is passed on: indexes with no gap, offsets adding up to the recorded text',
  engineTest([answer.text('key sk-live-0123456789abcdefXYZ then sk-live-0123 and sk-li, sk-live-0123456789abcdefXYZ', { pieces: 40 })], { stream: true }, async (h) => {
    const pieces: ModelTextPiece[] = []
    const input = { ...h.input('held'), provider: { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted', apiKey: 'sk-live-0123456789abcdefXYZ' } }
    assert.equal(await h.run(input, { onModelText: (piece) => pieces.push(piece) }), { status: 'completed' })
    const [completed] = only(await factsOf(h.log, 'invocation-held'), 'model.completed')
    assert.is(completed?.output.text, 'key [redacted] then sk-live-0123 and sk-li, [redacted]')
    assert.ok(pieces.length < 40, `held-back text came in fewer pieces than were sent (${pieces.length})`)
    assert.is(contiguous(pieces, 'the answer'), completed?.output.text)
    const [[, seq] = ['', 0]] = await requestSeqs(h.log, 'invocation-held')
    assert.ok(pieces.every((piece) => piece.requestSeq === seq))
  }),
)

test(
  "liveText() is the text passed on so far of the attempt in flight, as a slow stream comes, a retry's starting over; undefined once the answer is recorded",
  engineTest([answer.reset({ stream: true, text: DRAFT }), answer.text(FINAL, { pieces: 6, pieceDelayMs: 15 })], { stream: true }, async (h) => {
    const pieces: ModelTextPiece[] = []
    const seen: unknown[] = []
    const running = await h.start(h.input('so-far'), {
      onModelText: (piece) => {
        pieces.push(piece)
        seen.push(h.engine.running('invocation-so-far')?.liveText())
      },
    })
    assert.is(running.liveText(), undefined, 'no attempt in flight before the first request')
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(running.liveText(), undefined, 'nothing in flight once the run has ended')
    const [[, first] = ['', 0], [, retry] = ['', 0]] = await requestSeqs(h.log, 'invocation-so-far')
    assert.equal(
      pieces.map((piece) => piece.attempt),
      [1, 2, 2, 2, 2, 2, 2],
      'the draft in one piece, then the retry in six',
    )
    const expected = pieces.map((piece, at) => {
      const before = pieces.slice(0, at + 1).filter((other) => other.attempt === piece.attempt)
      return { requestSeq: piece.attempt === 1 ? first : retry, stepId: 'step-1', attempt: piece.attempt, text: before.map((other) => other.text).join(''), pieces: before.length }
    })
    assert.equal(seen, expected)
    assert.is((seen.at(-1) as { text: string }).text, FINAL)
  }),
)

test(
  'liveText() of a stream that stalls mid-answer is its text so far, for a page that comes back, and is gone once the attempt is cancelled; without onModelText there is none',
  engineTest([answer.stall({ text: 'half of an answer' }), answer.stall({ text: 'another half' })], { stream: true }, async (h) => {
    const controller = new AbortController()
    let first!: () => void
    const arrived = new Promise<void>((resolve) => (first = resolve))
    const running = await h.start(h.input('stalled'), { signal: controller.signal, onModelText: () => first() })
    await arrived
    const [[, seq] = ['', 0]] = await requestSeqs(h.log, 'invocation-stalled')
    assert.equal(running.liveText(), { requestSeq: seq, stepId: 'step-1', attempt: 1, text: 'half of an answer', pieces: 1 })
    controller.abort()
    assert.is((await running.wait()).status, 'cancelled')
    assert.is(running.liveText(), undefined)

    const silent = new AbortController()
    const quiet = await h.start(h.input('quiet'), { signal: silent.signal })
    await h.server.seen(1)
    assert.is(quiet.liveText(), undefined, 'a run started without onModelText keeps no text')
    silent.abort()
    assert.is((await quiet.wait()).status, 'cancelled')
  }),
)

test.run()
