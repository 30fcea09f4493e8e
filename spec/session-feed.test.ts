/**
 * `sessionFeed`: one session's facts and its runs' live pieces as one ordered stream whose ids
 * (the README's "Pieces and SSE ids") let a page that reconnects resume, against a real log, a real
 * engine and a scripted model that streams slowly. Pages that drop the connection every 1, 2, 3 or
 * 5 messages while a run writes its answers hold, in the end, exactly what a page that never
 * dropped holds: every fact once, in order, and each answer's text and calls as recorded, with no
 * piece skipped or applied twice, and never a piece before its attempt's `model.requested`.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type ModelClient, type ModelResponse, type ModelTextPiece, type ModelToolCallPiece, type SessionFeedMessage, type StoredEvent, type ToolDefinition, type ToolProgressUpdate, sessionFeed, toServerSentEvent } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { type EngineHarness, engineTest } from './support/engine-fixtures.js'
import { refusal } from './support/log-fixtures.js'
import { withTimeout } from './support/temp.js'

const ANSWER = 'Tomorrow in Oslo: light snow, -3 °C, with a clear evening.\nTake gloves, and a hat.'
const THOUGHT = 'Let me check the forecast for Oslo.'
const PACING = { pieces: 16, pieceDelayMs: 15 }
const SCRIPT = [answer.toolCalls([{ name: 'forecast', arguments: { city: 'Oslo', days: [1, 2, 3] } }], { text: THOUGHT, ...PACING }), answer.text(ANSWER, PACING)]

/** A tool that reports its progress five times while it runs. */
const forecast: ToolDefinition = {
  name: 'forecast',
  description: 'The forecast for a city',
  async execute(_input, context) {
    for (let done = 1; done <= 5; done += 1) {
      await new Promise((resolve) => setTimeout(resolve, 10))
      context.progress({ done, total: 5 })
    }
    return { sky: 'light snow', celsius: -3 }
  },
}

/** What a page holds, built from the messages it got: it checks each as a page that trusts the ids would apply it. */
class Page {
  readonly facts: StoredEvent[] = []
  /** Each attempt's text (by requestSeq) and its next piece's index. */
  readonly texts = new Map<number, { text: string; next: number }>()
  /** Each attempt's calls (by requestSeq): callId → [name, arguments], and the next call piece's index. */
  readonly calls = new Map<number, { calls: Map<string, [string, string]>; next: number }>()
  readonly progress = new Map<string, ToolProgressUpdate>()
  /** Every message applied, as `event id`. */
  readonly applied: string[] = []
  lastId: string | undefined
  resets = 0

  constructor(readonly name: string) {}

  get ended(): boolean {
    return this.facts.at(-1)?.event.fact.type === 'invocation.ended'
  }

  /** A piece of attempt `requestSeq` goes after that fact, before any other. */
  #attempt(requestSeq: number, what: string): void {
    const last = this.facts.at(-1)
    assert.ok(last !== undefined && last.seq === requestSeq && last.event.fact.type === 'model.requested', `${this.name}: ${what} of attempt ${requestSeq} comes right after its model.requested (the page's last fact is ${last?.seq})`)
  }

  apply(message: SessionFeedMessage): void {
    this.applied.push(`${message.event} ${message.id}`)
    if (message.id !== undefined) this.lastId = message.id
    switch (message.event) {
      case 'reset':
        assert.is(message.id, '', 'a reset clears the last id')
        this.facts.length = 0
        this.texts.clear()
        this.calls.clear()
        this.progress.clear()
        this.resets += 1
        return
      case 'fact': {
        const { seq } = message.data
        const last = this.facts.at(-1)?.seq ?? 0
        assert.ok(seq > last, `${this.name}: fact ${seq} after ${last}: no fact twice, none out of order`)
        assert.ok(message.id.startsWith(`${seq}:sha256:`), message.id)
        this.facts.push(message.data)
        return
      }
      case 'text': {
        const piece: ModelTextPiece = message.data
        this.#attempt(piece.requestSeq, 'a text piece')
        const held = this.texts.get(piece.requestSeq) ?? { text: '', next: 0 }
        assert.is(piece.index, held.next, `${this.name}: text piece ${piece.index} of ${piece.requestSeq}: none skipped, none twice`)
        assert.is(piece.offset, held.text.length)
        assert.is(message.id, `${piece.requestSeq}:${this.#digestOf(piece.requestSeq)}.${piece.index}`)
        this.texts.set(piece.requestSeq, { text: held.text + piece.text, next: piece.index + 1 })
        return
      }
      case 'text-so-far': {
        const live = message.data
        this.#attempt(live.requestSeq, 'the text so far')
        const held = this.texts.get(live.requestSeq)
        assert.ok(live.text.startsWith(held?.text ?? ''), `${this.name}: the text so far goes on from what the page has`)
        assert.ok(live.pieces > (held?.next ?? 0), `${this.name}: the text so far only when the page lacks a piece of it (${live.pieces} pieces, the page has ${held?.next})`)
        assert.is(message.id, `${live.requestSeq}:${this.#digestOf(live.requestSeq)}.${live.pieces - 1}`)
        this.texts.set(live.requestSeq, { text: live.text, next: live.pieces })
        return
      }
      case 'tool-call': {
        const piece: ModelToolCallPiece = message.data
        this.#attempt(piece.requestSeq, 'a tool-call piece')
        const held = this.calls.get(piece.requestSeq) ?? { calls: new Map(), next: 0 }
        assert.is(piece.index, held.next, `${this.name}: call piece ${piece.index} of ${piece.requestSeq}: none skipped, none twice`)
        assert.is(message.id, `${piece.requestSeq}:${this.#digestOf(piece.requestSeq)}.c.${piece.index}`)
        const call = held.calls.get(piece.callId)
        assert.is(call === undefined, piece.arguments === '' && piece.offset === 0, "a call begins with its '' piece")
        assert.is(piece.offset, call?.[1].length ?? 0)
        held.calls.set(piece.callId, [piece.name, (call?.[1] ?? '') + piece.arguments])
        this.calls.set(piece.requestSeq, { calls: held.calls, next: piece.index + 1 })
        return
      }
      case 'tool-calls-so-far': {
        const live = message.data
        this.#attempt(live.requestSeq, 'the calls so far')
        const had = this.calls.get(live.requestSeq)?.next ?? 0
        assert.ok(live.pieces > had, `${this.name}: the calls so far only when the page lacks a piece of them (${live.pieces} pieces, the page has ${had})`)
        assert.is(message.id, `${live.requestSeq}:${this.#digestOf(live.requestSeq)}.c.${live.pieces - 1}`)
        this.calls.set(live.requestSeq, { calls: new Map(live.calls.map((call) => [call.callId, [call.name, call.arguments]])), next: live.pieces })
        return
      }
      case 'tool-progress': {
        const update = message.data
        assert.is(message.id, undefined, 'progress keeps the last id')
        const dispatched = this.facts.find((stored) => stored.seq === update.dispatchedSeq)
        assert.is(dispatched?.event.fact.type, 'tool.dispatched', `${this.name}: progress comes after its call's dispatch`)
        assert.not.ok(
          this.facts.some((stored) => stored.event.fact.type === 'tool.settled' && stored.event.fact.operationId === update.operationId),
          'and before it settled',
        )
        // A state to replace: a resume sends the latest again.
        const before = this.progress.get(update.callId)
        assert.ok(before === undefined || update.index >= before.index, `${this.name}: progress ${update.index} after ${before?.index}`)
        this.progress.set(update.callId, update)
        return
      }
    }
  }

  /** The digest a fact id the page holds gave for `seq`. */
  #digestOf(seq: number): string {
    const id = this.applied.find((line) => line.startsWith(`fact ${seq}:`))
    assert.ok(id !== undefined, `${this.name}: the page holds fact ${seq}'s id`)
    return id.slice(`fact ${seq}:`.length)
  }

  /** What a page shows of the session: the facts' ids, and each attempt's text and calls where it has pieces of them. */
  held(): unknown {
    return {
      facts: this.facts.map(({ seq }) => seq),
      texts: [...this.texts].map(([seq, { text }]) => [seq, text]),
      calls: [...this.calls].map(([seq, { calls }]) => [seq, [...calls]]),
    }
  }
}

/** The kind of a last id, as a reconnect sends it. */
const kindOf = (id: string | undefined) => (id === undefined || id === '' ? 'none' : id.includes('.c.') ? 'call piece' : id.includes('.') ? 'text piece' : 'fact')

/**
 * A page that drops the connection after every `every` messages with an id and reconnects with its
 * last id, until the run has ended. (Progress has none: it moves no resume point, and a resume sends
 * the latest of each running call again, so a page that left after each would see it over and over.)
 */
async function reconnecting(h: EngineHarness, sessionId: string, page: Page, every: number, reconnects: string[]): Promise<void> {
  while (!page.ended) {
    const feed = sessionFeed(h.log, { sessionId, lastEventId: page.lastId, engine: h.engine })
    let got = 0
    for await (const message of feed) {
      page.apply(message)
      if (message.id !== undefined) got += 1
      if (page.ended || got >= every) break
    }
    reconnects.push(kindOf(page.lastId))
    // A reconnect is the network's: the next one comes in a later turn.
    await new Promise((resolve) => setImmediate(resolve))
  }
}

/** The messages of a feed until `count` facts have come (then it is left with `break`). */
async function untilFacts(feed: AsyncIterable<SessionFeedMessage>, count: number): Promise<SessionFeedMessage[]> {
  const messages: SessionFeedMessage[] = []
  let facts = 0
  for await (const message of feed) {
    messages.push(message)
    if (message.event === 'fact' && ++facts === count) break
  }
  return messages
}

test(
  'pages that reconnect after every 1, 2, 3 or 5 messages, with fact ids, text piece ids and tool-call piece ids, end up holding exactly what a page that never dropped holds: every fact once, each answer as recorded',
  engineTest(SCRIPT, { stream: true, ms: 30_000 }, async (h) => {
    const input = h.input('feed', { tools: [forecast] })
    const { sessionId } = input.invocation
    // What the run passed on, in order: the sequence a page that never dropped must get.
    const passed: (ModelTextPiece | ModelToolCallPiece | ToolProgressUpdate)[] = []
    // A page from before the run, never dropped; and one that reads the session's first fact before it starts.
    const steady = new Page('steady')
    const steadyFeed = sessionFeed(h.log, { sessionId, engine: h.engine })
    const steadyDone = (async () => {
      for await (const message of steadyFeed) {
        steady.apply(message)
        if (steady.ended) break
      }
    })()
    const rhythms = [1, 2, 3, 5]
    const pages = rhythms.map((every) => new Page(`every ${every}`))
    const reconnects = rhythms.map(() => [] as string[])
    const running = await h.start(input, {
      onModelText: (piece) => passed.push(piece),
      onToolCallText: (piece) => passed.push(piece),
      onToolProgress: (update) => passed.push(update),
    })
    await Promise.all(pages.map((page, i) => reconnecting(h, sessionId, page, rhythms[i] as number, reconnects[i] as string[])))
    assert.equal(await running.wait(), { status: 'completed' })
    await steadyDone

    // The session's facts, and what each recorded attempt said.
    const facts: StoredEvent[] = []
    for await (const stored of h.log.events({ sessionId })) facts.push(stored)
    const requested = facts.filter(({ event }) => event.fact.type === 'model.requested').map(({ seq }) => seq)
    const completed = facts.flatMap(({ event }) => (event.fact.type === 'model.completed' ? [event.fact.output] : []))
    assert.equal(completed.map((output) => output.text), [THOUGHT, ANSWER])
    const expectedTexts = requested.map((seq, i) => [seq, completed[i]?.text])
    const expectedCalls = [[requested[0], (completed[0]?.toolCalls ?? []).map((call) => [call.callId, [call.name, call.arguments]])]]

    // The steady page got exactly: each fact, and after each model.requested its attempt's pieces as passed on, after each dispatch its progress.
    const digest = async (seq: number) => `${seq}:${await h.log.digestAt(seq)}`
    const expected: string[] = []
    for (const { seq, event } of facts) {
      expected.push(`fact ${await digest(seq)}`)
      for (const item of passed) {
        if ('text' in item && item.requestSeq === seq) expected.push(`text ${await digest(seq)}.${item.index}`)
        else if ('callId' in item && 'requestSeq' in item && item.requestSeq === seq) expected.push(`tool-call ${await digest(seq)}.c.${item.index}`)
        else if ('dispatchedSeq' in item && item.dispatchedSeq === seq && event.fact.type === 'tool.dispatched') expected.push('tool-progress undefined')
      }
    }
    assert.equal(steady.applied, expected, 'the never-dropped page: every fact and piece once, in order')
    assert.ok(passed.length > 24, `pieces were streamed (${passed.length})`)
    assert.equal(steady.held(), { facts: facts.map(({ seq }) => seq), texts: expectedTexts, calls: expectedCalls })

    for (const [i, page] of pages.entries()) {
      assert.is(page.resets, 0, `${page.name}: never started over`)
      const held = page.held() as { facts: number[]; texts: [number, string][]; calls: unknown[] }
      assert.equal(held.facts, facts.map(({ seq }) => seq), `${page.name}: every fact once`)
      // An attempt the page only saw end (its model.completed) has no pieces: its text is the fact's.
      for (const [seq, text] of held.texts) assert.is(text, expectedTexts.find(([at]) => at === seq)?.[1], `${page.name}: the text of attempt ${seq}`)
      for (const calls of held.calls) assert.equal(calls, expectedCalls[0], `${page.name}: the calls`)
      assert.ok(held.texts.length > 0, `${page.name}: got live text`)
      assert.ok((reconnects[i] as string[]).length > 1, `${page.name} reconnected`)
    }
    // The page that drops after every message resumed with each kind of id.
    const kinds = new Set(reconnects[0])
    for (const kind of ['fact', 'text piece', 'call piece']) assert.ok(kinds.has(kind), `reconnected with a ${kind} id (${[...kinds].join(', ')})`)
  }),
)

test(
  'a page that connects (or reconnects with a fact id) while an answer is written gets the text so far only after the model.requested it follows, then the pieces after it; one back with a piece id after missing two gets the text so far, then the next',
  // Slower: the first answer is still being written when the second page comes.
  engineTest([answer.toolCalls([{ name: 'forecast', arguments: { city: 'Oslo' } }], { text: THOUGHT, pieces: 16, pieceDelayMs: 40 }), answer.text(ANSWER)], { stream: true, ms: 20_000 }, async (h) => {
    const input = h.input('late', { tools: [forecast] })
    const { sessionId } = input.invocation
    let pieces = 0
    let waitFor = 3
    let third: () => void = () => undefined
    const thirdPiece = new Promise<void>((resolve) => {
      third = resolve
    })
    const running = await h.start(input, {
      onModelText: () => {
        if (++pieces === waitFor) third()
      },
      onToolCallText: () => undefined,
      onToolProgress: () => undefined,
    })
    await thirdPiece
    // A fresh page (its reader starts at the session's first fact), and one that holds the model.requested (the log's last fact).
    const requestSeq = running.liveText()?.requestSeq as number
    for (const lastEventId of [undefined, `${requestSeq}:${await h.log.digestAt(requestSeq)}`]) {
      const page = new Page(`from ${lastEventId ?? 'nothing'}`)
      if (lastEventId !== undefined) {
        // It holds the facts up to the id (read from the log), as a page that got them would.
        for await (const stored of h.log.events({ sessionId, to: requestSeq })) page.apply({ id: `${stored.seq}:${await h.log.digestAt(stored.seq)}`, event: 'fact', data: stored })
      }
      const feed = sessionFeed(h.log, { sessionId, lastEventId, engine: h.engine })
      for await (const message of feed) {
        page.apply(message)
        if (message.event === 'text') break
      }
      const events = page.applied.map((line) => line.split(' ')[0])
      const soFar = events.indexOf('text-so-far')
      assert.ok(soFar >= 0, `${page.name}: the text so far (${events.join(', ')})`)
      assert.is(events[soFar - 1], 'fact', 'right after its model.requested')
      assert.ok((page.texts.get(requestSeq)?.next ?? 0) >= 4, 'then the next piece')

      // Gone after that piece while two more are passed on: back with the piece's id, it gets the text so far (one message, replacing), then the next piece.
      if (lastEventId !== undefined) continue
      const at = pieces
      const twoMore = new Promise<void>((resolve) => {
        third = resolve
      })
      waitFor = at + 2
      await twoMore
      const back = sessionFeed(h.log, { sessionId, lastEventId: page.lastId, engine: h.engine })
      const first = (await back.next()).value as SessionFeedMessage
      page.apply(first)
      assert.is(first.event, 'text-so-far', `${page.name}: back mid-answer`)
      assert.ok(first.event === 'text-so-far' && first.data.pieces >= at + 2)
      const second = (await back.next()).value as SessionFeedMessage
      page.apply(second)
      assert.is(second.event, 'text', 'then the next piece, in order')
      await back.return?.()
    }
    await running.wait()
  }),
)

for (const last of ['text', 'call'] as const) {
  test(
    `text and call pieces interleaved, the ${last} piece passed on last: a page back with the model.requested's id gets both so-fars, the one passed on last last, so that its id tells the page has the other's too (back again, it gets neither)`,
    (() => {
      let release: () => void = () => undefined
      const held = new Promise<void>((resolve) => {
        release = resolve
      })
      const client: ModelClient = {
        async complete(request): Promise<ModelResponse> {
          if (request.onText === undefined) return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop' } }
          const text = request.onText
          const call = request.onToolCall as NonNullable<typeof request.onToolCall>
          text('It is ')
          call({ index: 0, callId: 'call-1', name: 'forecast', arguments: '{"city":' })
          if (last === 'text') text('snowing ')
          else call({ index: 0, arguments: '"Oslo"' })
          await held
          text('in Oslo.')
          if (last === 'call') text('snowing ')
          call({ index: 0, arguments: last === 'text' ? '"Oslo"}' : '}' })
          const answerText = last === 'text' ? 'It is snowing in Oslo.' : 'It is in Oslo.snowing '
          return { kind: 'completed', output: { text: answerText, toolCalls: [{ callId: 'call-1', name: 'forecast', arguments: '{"city":"Oslo"}' }], finishReason: 'tool_calls' } }
        },
      }
      return engineTest([], { model: { createClient: () => client } }, async (h) => {
        const input = h.input(`order-${last}`, { tools: [forecast] })
        const { sessionId } = input.invocation
        let passed = 0
        let three: () => void = () => undefined
        const threePassed = new Promise<void>((resolve) => {
          three = resolve
        })
        const count = () => {
          if (++passed === 4) three()
        }
        const running = await h.start(input, { onModelText: count, onToolCallText: count })
        // It is ', the call's '' and first piece, and one more: four pieces passed on.
        await threePassed
        const requestSeq = running.liveText()?.requestSeq as number
        const page = new Page(`back at ${last}`)
        for await (const stored of h.log.events({ sessionId, to: requestSeq })) page.apply({ id: `${stored.seq}:${await h.log.digestAt(stored.seq)}`, event: 'fact', data: stored })
        const first = sessionFeed(h.log, { sessionId, lastEventId: page.lastId, engine: h.engine })
        for (let i = 0; i < 2; i += 1) page.apply((await first.next()).value as SessionFeedMessage)
        await first.return?.()
        assert.equal(
          page.applied.slice(-2).map((line) => line.split(' ')[0]),
          last === 'text' ? ['tool-calls-so-far', 'text-so-far'] : ['text-so-far', 'tool-calls-so-far'],
        )
        // Back again with that id: nothing of the attempt is sent again; the next piece is the next one passed on.
        const again = sessionFeed(h.log, { sessionId, lastEventId: page.lastId, engine: h.engine })
        const next = again.next()
        release()
        page.apply((await next).value as SessionFeedMessage)
        assert.is(page.applied.at(-1)?.split(' ')[0], 'text', 'the next piece')
        for await (const message of again) {
          page.apply(message)
          if (page.ended) break
        }
        const completed = (await h.log.invocationEvents(input.invocation.invocationId)).find(({ event }) => event.fact.type === 'model.completed')
        assert.is(page.texts.get(requestSeq)?.text, completed?.event.fact.type === 'model.completed' ? completed.event.fact.output.text : undefined)
        assert.equal([...(page.calls.get(requestSeq)?.calls ?? [])], [['call-1', ['forecast', '{"city":"Oslo"}']]])
        await running.wait()
      })
    })(),
  )
}

test(
  'a page that reads nothing while the run writes both its answers gets, when it reads, every fact once and the pieces of the attempt still held for it, those of the earlier attempt let go (its model.completed has the text)',
  engineTest(SCRIPT, { stream: true, ms: 20_000 }, async (h) => {
    const input = h.input('slow', { tools: [forecast] })
    const { sessionId } = input.invocation
    const page = new Page('slow')
    const feed = sessionFeed(h.log, { sessionId, engine: h.engine })
    const running = await h.start(input, { onModelText: () => undefined, onToolCallText: () => undefined, onToolProgress: () => undefined })
    page.apply((await feed.next()).value as SessionFeedMessage)
    assert.equal(await running.wait(), { status: 'completed' })
    for await (const message of feed) {
      page.apply(message)
      if (page.ended) break
    }
    const facts: StoredEvent[] = []
    for await (const stored of h.log.events({ sessionId })) facts.push(stored)
    const requested = facts.filter(({ event }) => event.fact.type === 'model.requested').map(({ seq }) => seq)
    assert.equal(page.held(), { facts: facts.map(({ seq }) => seq), texts: [[requested[1], ANSWER]], calls: [] }, 'the last attempt in pieces, the first from its fact')
    assert.not.ok(page.applied.some((line) => line.startsWith('tool-progress')), "the call's progress let go too")
  }),
)

test(
  'an id the log does not bear out starts the page over with a reset (id "", which clears the last id), then the session from its first fact: another digest, a seq past the end, garbage; a piece id of an answer already recorded resumes after its model.requested',
  engineTest(SCRIPT, { stream: true, ms: 20_000 }, async (h) => {
    const input = h.input('ids', { tools: [forecast] })
    const { sessionId } = input.invocation
    const outcome = await h.run(input, { onModelText: () => undefined, onToolCallText: () => undefined })
    assert.equal(outcome, { status: 'completed' })
    const facts: StoredEvent[] = []
    for await (const stored of h.log.events({ sessionId })) facts.push(stored)
    const ids = await Promise.all(facts.map(async ({ seq }) => `${seq}:${await h.log.digestAt(seq)}`))
    const { highWater, digest } = h.log.head()
    const middle = facts[3] as StoredEvent
    const cases: [string, string][] = [
      [`${middle.seq}:sha256:${'0'.repeat(64)}`, 'not_this_log'],
      [`${middle.seq}:${await h.log.digestAt(middle.seq - 1)}.3`, 'not_this_log'],
      [`${highWater + 5}:${digest}`, 'past_the_end'],
      [`${highWater + 1}:${digest}.c.0`, 'past_the_end'],
      ['hello', 'not_an_id'],
      [`${middle.seq}`, 'not_an_id'],
      [`${middle.seq}:${digest}.x`, 'not_an_id'],
      [`0:${digest}`, 'not_an_id'],
    ]
    for (const [lastEventId, reason] of cases) {
      const messages = await withTimeout(untilFacts(sessionFeed(h.log, { sessionId, lastEventId, engine: h.engine }), facts.length), 5_000, lastEventId)
      assert.equal(messages[0], { id: '', event: 'reset', data: { reason } }, lastEventId)
      assert.equal(
        messages.slice(1).map((message) => message.id),
        ids,
        `${lastEventId}: then every fact of the session`,
      )
    }
    // No id at all: no reset, the session from its first fact.
    assert.equal((await untilFacts(sessionFeed(h.log, { sessionId, lastEventId: '' }), facts.length)).map((message) => message.id), ids)
    // A recorded answer's piece id (text or call): the facts after its model.requested, nothing of it live any more.
    const requestSeq = facts.find(({ event }) => event.fact.type === 'model.requested')?.seq as number
    const at = facts.findIndex(({ seq }) => seq === requestSeq)
    for (const suffix of ['.5', '.c.2']) {
      const lastEventId = `${ids[at]}${suffix}`
      const messages = await untilFacts(sessionFeed(h.log, { sessionId, lastEventId, engine: h.engine }), facts.length - at - 1)
      assert.equal(messages.map((message) => message.id), ids.slice(at + 1), lastEventId)
    }
    // Node's header as it is typed (string | string[]): one value is that id.
    const messages = await untilFacts(sessionFeed(h.log, { sessionId, lastEventId: [ids[2] as string] }), facts.length - 3)
    assert.equal(messages.map((message) => message.id), ids.slice(3))
  }),
)

test(
  "an id of another session's fact (a fact id, or a piece id of its model.requested) starts the page over with a reset, not_this_session: resumed after it, the page would miss this session's facts before its seq",
  engineTest([answer.text('one', { pieces: 2 }), answer.text('two', { pieces: 2 })], { stream: true, ms: 20_000 }, async (h) => {
    // The first session's run, then the second's, in one log: the first's facts come before all of the second's, and after.
    const first = h.input('first')
    const second = h.input('second')
    assert.equal(await h.run(first, { onModelText: () => undefined }), { status: 'completed' })
    assert.equal(await h.run(second, { onModelText: () => undefined }), { status: 'completed' })
    const factsOf = async (sessionId: string) => {
      const facts: StoredEvent[] = []
      for await (const stored of h.log.events({ sessionId })) facts.push(stored)
      return Promise.all(facts.map(async (stored) => ({ stored, id: `${stored.seq}:${await h.log.digestAt(stored.seq)}` })))
    }
    const ofFirst = await factsOf(first.invocation.sessionId)
    const ofSecond = await factsOf(second.invocation.sessionId)
    const requested = ofFirst.find(({ stored }) => stored.event.fact.type === 'model.requested')?.id as string
    const last = ofSecond.at(-1)?.id as string
    const cases: [string, string, { id: string }[]][] = [
      [second.invocation.sessionId, ofFirst.at(-1)?.id as string, ofSecond],
      [second.invocation.sessionId, `${requested}.0`, ofSecond],
      [first.invocation.sessionId, last, ofFirst],
    ]
    for (const [sessionId, lastEventId, facts] of cases) {
      const messages = await withTimeout(untilFacts(sessionFeed(h.log, { sessionId, lastEventId, engine: h.engine }), facts.length), 5_000, lastEventId)
      assert.equal(messages[0], { id: '', event: 'reset', data: { reason: 'not_this_session' } }, `${sessionId} from ${lastEventId}`)
      assert.equal(
        messages.slice(1).map((message) => message.id),
        facts.map(({ id }) => id),
        `${sessionId} from ${lastEventId}: then every fact of the session`,
      )
    }
    // A snapshot checks it too.
    const snapshot = await EventLog.openSnapshot(h.logPath)
    try {
      const messages: SessionFeedMessage[] = []
      for await (const message of sessionFeed(snapshot, { sessionId: second.invocation.sessionId, lastEventId: ofFirst.at(-1)?.id })) messages.push(message)
      assert.equal(messages[0], { id: '', event: 'reset', data: { reason: 'not_this_session' } })
      assert.is(messages.length, ofSecond.length + 1)
    } finally {
      await snapshot.close()
    }
  }),
)

test(
  "a page that reads nothing while a tool reports its progress 2,000 times is sent, when it reads, the latest update of the call, not all of them: a call's progress waiting for the page is replaced by its next",
  engineTest([answer.toolCalls([{ name: 'chatty', arguments: {} }]), answer.text('done')], { stream: true, ms: 20_000 }, async (h) => {
    const UPDATES = 2_000
    // The tool begins to report once the page has read its tool.dispatched (and then reads nothing until the run has ended).
    let go: () => void = () => undefined
    const going = new Promise<void>((resolve) => {
      go = resolve
    })
    const chatty: ToolDefinition = {
      name: 'chatty',
      description: 'Reports its progress often',
      async execute(_input, context) {
        await going
        for (let done = 1; done <= UPDATES; done += 1) {
          context.progress({ done, note: 'x'.repeat(1_000) })
          if (done % 100 === 0) await new Promise((resolve) => setImmediate(resolve))
        }
        return 'ok'
      },
    }
    const input = h.input('chatty', { tools: [chatty] })
    const { sessionId } = input.invocation
    const feed = sessionFeed(h.log, { sessionId, engine: h.engine })
    let reported = 0
    const running = await h.start(input, { onToolProgress: () => void (reported += 1) })
    for (;;) {
      const message = (await feed.next()).value as SessionFeedMessage
      if (message.event === 'fact' && message.data.event.fact.type === 'tool.dispatched') break
    }
    go()
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(reported, UPDATES)
    const progress: ToolProgressUpdate[] = []
    for await (const message of feed) {
      if (message.event === 'tool-progress') progress.push(message.data)
      if (message.event === 'fact' && message.data.event.fact.type === 'invocation.ended') break
    }
    assert.equal(
      progress.map((update) => [update.index, update.value]),
      [[UPDATES - 1, { done: UPDATES, note: 'x'.repeat(1_000) }]],
      'one update: the last',
    )
  }),
)

test(
  'a feed ends at once when the page goes: its signal aborts, or return() is called, while next() waits for the next fact on an idle log',
  engineTest(SCRIPT, { stream: true, ms: 20_000 }, async (h) => {
    const input = h.input('gone', { tools: [forecast] })
    const { sessionId } = input.invocation
    await h.run(input)
    const count = (await h.log.events({ sessionId }).next()).done ? 0 : 1
    assert.is(count, 1)
    let facts = 0
    for await (const _ of h.log.events({ sessionId })) facts += 1
    for (const how of ['signal', 'return', 'aborted before'] as const) {
      const abort = new AbortController()
      if (how === 'aborted before') abort.abort()
      const feed = sessionFeed(h.log, { sessionId, engine: h.engine, signal: abort.signal })
      if (how !== 'aborted before') for (let i = 0; i < facts; i += 1) assert.is((await feed.next()).done, false)
      // Caught up: this next() waits for a fact that is not coming.
      const waiting = feed.next()
      if (how === 'signal') abort.abort()
      if (how === 'return') await feed.return?.()
      assert.equal(await withTimeout(waiting, 5_000, `the feed ended by ${how}`), { value: undefined, done: true }, how)
      assert.is((await feed.next()).done, true, 'and stays ended')
    }
    // Many feeds sharing one signal (a server's shutdown): no listener each, so Node warns of no leak; all end with it.
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`)
    process.on('warning', onWarning)
    try {
      const shutdown = new AbortController()
      const feeds = Array.from({ length: 12 }, () => sessionFeed(h.log, { sessionId, engine: h.engine, signal: shutdown.signal }))
      const firsts = await Promise.all(feeds.map((feed) => feed.next()))
      assert.ok(firsts.every((first) => first.done === false), 'each feed sends the session')
      shutdown.abort()
      assert.ok((await Promise.all(feeds.map((feed) => feed.next()))).every((next) => next.done === true), 'each feed ended with the shared signal')
      // Node emits its warning on a later tick.
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(warnings.filter((warning) => warning.startsWith('MaxListenersExceededWarning')), [], 'no leak warning for one signal shared by many feeds')
    } finally {
      process.off('warning', onWarning)
    }
    // `break` in a for-await, after the last fact: no reader is left following the log.
    for await (const message of sessionFeed(h.log, { sessionId })) if (message.event === 'fact' && message.data.event.fact.type === 'invocation.ended') break
    // A run of another session meanwhile changes nothing in this session's feed.
  }),
)

test(
  'a snapshot feeds facts only, ends at its end, resumes after a fact id, starts a seq past its end over; an engine with a snapshot is refused, as are bad options',
  engineTest(SCRIPT, { stream: true, ms: 20_000 }, async (h) => {
    const input = h.input('snap', { tools: [forecast] })
    const { sessionId } = input.invocation
    await h.run(input, { onModelText: () => undefined })
    const snapshot = await EventLog.openSnapshot(h.logPath, { directory: h.dir })
    try {
      const all: SessionFeedMessage[] = []
      for await (const message of sessionFeed(snapshot, { sessionId })) all.push(message)
      const facts: StoredEvent[] = []
      for await (const stored of h.log.events({ sessionId })) facts.push(stored)
      assert.equal(
        all.map((message) => [message.event, message.id]),
        await Promise.all(facts.map(async ({ seq }) => ['fact', `${seq}:${await h.log.digestAt(seq)}`])),
        'every fact of the session, with the ids a live feed gives, then the end',
      )
      const resumed: SessionFeedMessage[] = []
      for await (const message of sessionFeed(snapshot, { sessionId, lastEventId: all[2]?.id })) resumed.push(message)
      assert.equal(resumed, all.slice(3))
      const past: SessionFeedMessage[] = []
      for await (const message of sessionFeed(snapshot, { sessionId, lastEventId: `${snapshot.head().highWater + 1}:${snapshot.head().digest}` })) past.push(message)
      assert.equal(past, [{ id: '', event: 'reset', data: { reason: 'past_the_end' } }, ...all])

      const field = async (make: () => unknown) => (await refusal(make)).details
      assert.equal(await field(() => sessionFeed(snapshot, { sessionId, engine: h.engine })), { field: 'engine' })
      assert.equal(await field(() => sessionFeed(h.log, { sessionId: 'not an id' })), { field: 'sessionId' })
      assert.equal(await field(() => sessionFeed(h.log, { sessionId, lastEventID: 'x' } as never)), { field: 'lastEventID' })
      assert.equal(await field(() => sessionFeed(h.log, { sessionId, signal: {} as AbortSignal })), { field: 'signal' })
      assert.equal(await field(() => sessionFeed({} as EventLog, { sessionId })), { field: 'log' })
      assert.is((await refusal(() => sessionFeed(h.log, { sessionId: '' }))).code, 'LOG_INVALID_ARGUMENT', 'a refusal has its code')
    } finally {
      await snapshot.close()
    }
  }),
)

test('toServerSentEvent writes the wire text: id (none, or empty to clear), event, data as JSON or a string line by line, then a blank line', () => {
  assert.is(toServerSentEvent({ id: '7:sha256:ab', event: 'fact', data: { seq: 7, text: 'a\nb' } }), 'id: 7:sha256:ab\nevent: fact\ndata: {"seq":7,"text":"a\\nb"}\n\n')
  assert.is(toServerSentEvent({ id: '', event: 'reset', data: { reason: 'not_an_id' } }), 'id:\nevent: reset\ndata: {"reason":"not_an_id"}\n\n')
  assert.is(toServerSentEvent({ id: undefined, event: 'tool-progress', data: null }), 'event: tool-progress\ndata: null\n\n')
  assert.is(toServerSentEvent({ data: 'one\ntwo\r\nthree\rfour' }), 'data: one\ndata: two\ndata: three\ndata: four\n\n')
  assert.is(toServerSentEvent({ event: 'text', data: '' }), 'event: text\ndata: \n\n')
  for (const id of ['a\nb', 'a\rb', 'a\0b']) assert.throws(() => toServerSentEvent({ id, data: 1 }), (error: { code?: string }) => error.code === 'LOG_INVALID_ARGUMENT')
  // What is not a message: LOG_INVALID_ARGUMENT naming the field, not a TypeError.
  const cycle: Record<string, unknown> = {}
  cycle.self = cycle
  const refusedAs = (message: unknown, field: string) =>
    assert.throws(() => toServerSentEvent(message as never), (error: { code?: string; details?: { field?: string } }) => error.code === 'LOG_INVALID_ARGUMENT' && error.details?.field === field, field)
  refusedAs(null, 'message')
  refusedAs('data: x', 'message')
  refusedAs({ get data() { throw new Error('gone') } }, 'message')
  refusedAs({ id: 7, data: 1 }, 'id')
  refusedAs({ event: ['fact'], data: 1 }, 'event')
  refusedAs({ data: 10n }, 'data')
  refusedAs({ data: cycle }, 'data')
})

test.run()
