/**
 * The invocation loop (DESIGN §5): tools run at most once, in order, durable before they start;
 * failures and rejections are reported to the model; maxSteps and cancellation end the run.
 */
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { type HandoffReservation, type RunningInvocation, type ToolCall, answerOf, transcriptOf } from '../index.js'
import { isAbortSignal, messageOf } from '../store/encoding.js'
import { answer } from '../testing/scripted-model-server.js'
import { assertFoldMatches, countingTool, engineTest, factsOf, intentOf, lastFactOf, messagesOf, only, sealAtFirstSafePoint, successorInput, typesOf } from './support/engine-fixtures.js'

test(
  'several tool calls in one answer are dispatched and settled in order, each executed once; an unknown tool is rejected',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-a', name: 'echo', arguments: { value: 1 } },
        { id: 'call-b', name: 'echo', arguments: { value: 2 } },
        { id: 'call-c', name: 'missing', arguments: {} },
        { id: 'call-d', name: 'echo', arguments: { value: 3 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const echo = countingTool()
      assert.equal(await h.run(h.input('calls', { tools: [echo] })), { status: 'completed' })
      assert.equal(
        echo.calls.map((call) => call.input),
        [{ value: 1 }, { value: 2 }, { value: 3 }],
      )
      const facts = await factsOf(h.log, 'invocation-calls')
      const tools = facts.filter((f) => f.type.startsWith('tool.'))
      assert.equal(
        tools.map((f) => [f.type, 'callId' in f ? f.callId : undefined]),
        [
          ['tool.dispatched', 'call-a'],
          ['tool.settled', undefined],
          ['tool.dispatched', 'call-b'],
          ['tool.settled', undefined],
          ['tool.rejected', 'call-c'],
          ['tool.dispatched', 'call-d'],
          ['tool.settled', undefined],
        ],
      )
      const dispatched = only(facts, 'tool.dispatched')
      const settled = only(facts, 'tool.settled')
      assert.equal(
        settled.map((f) => f.operationId),
        dispatched.map((f) => f.operationId),
        'each settlement follows its own dispatch',
      )
      assert.equal(
        echo.calls.map((call) => call.operationId),
        dispatched.map((f) => f.operationId),
        'the tool got the dispatched operation id',
      )
      assert.is(new Set([...dispatched.map((f) => f.operationId), only(facts, 'tool.rejected')[0]?.operationId]).size, 4, 'operation ids are distinct')
      assert.equal(
        settled.map((f) => f.outcome),
        [1, 2, 3].map((value) => ({ status: 'succeeded', output: { value } })),
      )
      assert.equal(only(facts, 'tool.rejected')[0]?.reason, 'unknown_tool')
      const replies = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool')
      assert.equal(
        replies.map((m) => m.tool_call_id),
        ['call-a', 'call-b', 'call-c', 'call-d'],
        'every call is answered to the model, in order',
      )
      assert.equal(
        replies.map((m) => (m.tool_call_id === 'call-c' ? null : JSON.parse(m.content ?? 'null'))),
        [{ value: 1 }, { value: 2 }, null, { value: 3 }],
      )
    },
  ),
)

test(
  'a tool that throws settles failed and the run goes on to completion',
  engineTest([answer.toolCalls([{ id: 'call-boom', name: 'boom', arguments: {} }]), answer.text('recovered')], {}, async (h) => {
    const boom = countingTool('boom', async () => {
      throw new Error('the disk is full')
    })
    const running = await h.start(h.input('boom', { tools: [boom] }))
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(boom.calls.length, 1)
    const settled = only(await factsOf(h.log, 'invocation-boom'), 'tool.settled')
    assert.is(settled.length, 1)
    assert.is(settled[0]?.outcome.status, 'failed')
    const reply = messagesOf(h.server.requests[1]?.body).find((m) => m.role === 'tool')
    assert.is(reply?.tool_call_id, 'call-boom', 'the failure is reported to the model')
    assert.is(h.server.requests.length, 2)
  }),
)

test(
  'a tool result with a BigInt is recorded with its decimal text; one that is not JSON (a cycle) settles failed, and the model is told the tool ran',
  engineTest([answer.toolCalls([{ name: 'row', arguments: {} }, { name: 'odd', arguments: {} }]), answer.text('done')], {}, async (h) => {
    const row = countingTool('row', async () => ({ id: 9_007_199_254_740_993n, total: 10n }))
    const odd = countingTool('odd', async () => {
      const cycle: Record<string, unknown> = { name: 'loop' }
      cycle.self = cycle
      return cycle
    })
    assert.equal(await h.run(h.input('odd', { tools: [row, odd] })), { status: 'completed' })
    const settled = only(await factsOf(h.log, 'invocation-odd'), 'tool.settled').map((fact) => fact.outcome)
    assert.equal(settled[0], { status: 'succeeded', output: { id: '9007199254740993', total: '10' } })
    assert.is(settled[1]?.status, 'failed')
    assert.is(odd.calls.length, 1)
    const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content)
    assert.is(told.length, 2)
    assert.match(String(told[1]), /^error: the tool ran, but its result could not be recorded: it is not JSON \(/)
  }),
)

test(
  'a tool that returns a revoked proxy has run: its result could not be recorded (not the tool failing, which the model might take as a reason to call it again)',
  engineTest([answer.toolCalls([{ name: 'revoked', arguments: {} }]), answer.text('done')], {}, async (h) => {
    let effects = 0
    const revoked = {
      name: 'revoked',
      inputSchema: { type: 'object' },
      execute: () => {
        effects += 1
        const handle = Proxy.revocable({}, {})
        handle.revoke()
        return handle.proxy
      },
    }
    assert.equal(await h.run(h.input('revoked', { tools: [revoked] })), { status: 'completed' })
    assert.is(effects, 1)
    const settled = only(await factsOf(h.log, 'invocation-revoked'), 'tool.settled').map((fact) => fact.outcome)
    assert.equal(settled.length, 1)
    assert.match((settled[0] as { message: string }).message, /^the tool ran, but its result could not be recorded: it cannot be read \(.*revoked/)
  }),
)

/** What a tool with effects is told besides why its result was not recorded: not to call it again to redo them. */
const HAPPENED = "; the call's effect has happened, so do not call the tool again to redo it"

const UNREADABLE = 'a value that cannot be read (such as a revoked proxy)'

test(
  'a tool that throws a revoked proxy fails as any tool that throws: recorded, the model told, the run goes on (messageOf never throws, nor does isAbortSignal)',
  engineTest([answer.toolCalls([{ name: 'revoked', arguments: {} }]), answer.text('done')], {}, async (h) => {
    const handle = Proxy.revocable({}, {})
    handle.revoke()
    const revoked = { name: 'revoked', inputSchema: { type: 'object' }, execute: () => Promise.reject(handle.proxy) }
    assert.equal(await h.run(h.input('thrown', { tools: [revoked] })), { status: 'completed' })
    const settled = only(await factsOf(h.log, 'invocation-thrown'), 'tool.settled').map((fact) => fact.outcome)
    assert.equal(settled, [{ status: 'failed', message: UNREADABLE }])
    assert.is(messageOf(handle.proxy), UNREADABLE)
    assert.is(isAbortSignal(handle.proxy), false)
  }),
)

test(
  'a tool that returns (without a promise, as plain JavaScript may) a value whose then getter throws has run: its result could not be recorded, and the model is told so',
  engineTest([answer.toolCalls([{ name: 'lazy', arguments: {} }]), answer.text('done')], {}, async (h) => {
    let effects = 0
    const lazy = {
      name: 'lazy',
      description: 'charges a card and returns a record with a lazy field',
      inputSchema: { type: 'object' },
      execute: (() => {
        effects += 1
        return {
          id: 'ch_1',
          get then(): unknown {
            throw new Error('lazy field not loaded')
          },
        }
      }) as never,
    }
    assert.equal(await h.run(h.input('lazy', { tools: [lazy] })), { status: 'completed' })
    assert.is(effects, 1)
    const settled = only(await factsOf(h.log, 'invocation-lazy'), 'tool.settled').map((fact) => fact.outcome)
    assert.equal(settled, [{ status: 'failed', message: `the tool ran, but its result could not be recorded: its then member cannot be read (lazy field not loaded)${HAPPENED}` }])
    const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content)
    assert.match(String(told[0]), /^error: the tool ran, but its result could not be recorded/)
  }),
)

const OVER = "it is 1,002 bytes of JSON, over the engine's limit of 1,000 bytes (maxToolResultBytes)"

test(
  'a tool result over maxToolResultBytes is not recorded and the model is told the tool ran and how large the result was, that its effect happened (a tool with effects) or to ask for less (a readOnly one); one at the limit is recorded whole',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-over', name: 'blob', arguments: { value: 1 } },
        { id: 'call-at', name: 'blob', arguments: { value: 2 } },
        { id: 'call-read', name: 'read', arguments: { value: 1 } },
      ]),
      answer.text('done'),
    ],
    { engine: { maxToolResultBytes: 1_000 } },
    async (h) => {
      // 'é' is two bytes in UTF-8: 500 of them and the quotes are 1,002 bytes in 502 characters.
      const blob = countingTool('blob', async (input) => ((input as { value: number }).value === 1 ? 'é'.repeat(500) : 'a'.repeat(998)))
      const read = { ...countingTool('read', async () => 'é'.repeat(500)), readOnly: true }
      assert.equal(await h.run(h.input('big', { tools: [blob, read] })), { status: 'completed' })
      assert.is(blob.calls.length, 2, 'each call ran once')
      const settled = only(await factsOf(h.log, 'invocation-big'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled, [
        { status: 'failed', message: `the tool ran, but its result could not be recorded: ${OVER}${HAPPENED}` },
        { status: 'succeeded', output: 'a'.repeat(998) },
        { status: 'failed', message: `the tool ran, but its result could not be recorded: ${OVER}; ask for less of it` },
      ])
      const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool')
      assert.equal(
        told.map((m) => [m.tool_call_id, m.content]),
        [
          ['call-over', `error: the tool ran, but its result could not be recorded: ${OVER}${HAPPENED}`],
          ['call-at', 'a'.repeat(998)],
          ['call-read', `error: the tool ran, but its result could not be recorded: ${OVER}; ask for less of it`],
        ],
      )
    },
  ),
)

test(
  "a tool's failure message over maxToolResultBytes is cut at a character's start, with a note; the default limit is 4 MiB",
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-long', name: 'fails', arguments: { value: 1 } },
        { id: 'call-short', name: 'fails', arguments: { value: 2 } },
      ]),
      answer.text('done'),
      answer.toolCalls([{ id: 'call-huge', name: 'huge', arguments: {} }]),
      answer.text('done'),
    ],
    { engine: { maxToolResultBytes: 1_001 } },
    async (h) => {
      const fails = countingTool('fails', async (input) => {
        throw new Error((input as { value: number }).value === 1 ? 'é'.repeat(2_000) : 'no such ticket')
      })
      assert.equal(await h.run(h.input('long', { tools: [fails] })), { status: 'completed' })
      const settled = only(await factsOf(h.log, 'invocation-long'), 'tool.settled').map((fact) => fact.outcome)
      // 1,001 bytes would end inside the 501st 'é': the cut is at 1,000.
      assert.equal(settled, [
        { status: 'failed', message: `${'é'.repeat(500)}… (cut: the message is 4,000 bytes, over the engine's limit of 1,001 bytes, maxToolResultBytes)` },
        { status: 'failed', message: 'no such ticket' },
      ])
      // Another engine on the same log, with the default limit: 5 MiB is over it, 4 MiB of it is recorded by the first.
      const { Engine } = await import('../index.js')
      const engine = new Engine({ log: h.log })
      const huge = countingTool('huge', async () => 'x'.repeat(5 * 1024 * 1024))
      const running = await engine.start(h.input('huge', { tools: [huge] }))
      assert.equal(await running.wait(), { status: 'completed' })
      assert.is(huge.calls.length, 1)
      assert.equal(only(await factsOf(h.log, 'invocation-huge'), 'tool.settled').map((fact) => fact.outcome), [
        {
          status: 'failed',
          message: `the tool ran, but its result could not be recorded: it is 5,242,882 bytes of JSON, over the engine's limit of 4,194,304 bytes (maxToolResultBytes)${HAPPENED}`,
        },
      ])
    },
  ),
)

test('maxToolResultBytes must be a whole number of bytes from 1 to 256 MiB', () =>
  engineTest([answer.text('unused')], {}, async (h) => {
    const { Engine } = await import('../index.js')
    for (const bad of [0, -1, 1.5, Number.NaN, 256 * 1024 * 1024 + 1, '4MB']) {
      try {
        new Engine({ log: h.log, maxToolResultBytes: bad as number })
        assert.unreachable(`${String(bad)} was accepted`)
      } catch (error) {
        assert.is((error as { code?: string }).code, 'ENGINE_INVALID_OPTIONS', String(bad))
        assert.equal((error as { details?: unknown }).details, { field: 'maxToolResultBytes' })
      }
    }
    assert.ok(new Engine({ log: h.log, maxToolResultBytes: 1 }) && new Engine({ log: h.log, maxToolResultBytes: 256 * 1024 * 1024 }))
  })(),
)

test(
  'a tool call with arguments that are not JSON is rejected invalid_input and never executed',
  engineTest([answer.toolCalls([{ id: 'call-bad', name: 'echo', arguments: '{"value": 4' }]), answer.text('done')], {}, async (h) => {
    const echo = countingTool()
    assert.equal(await h.run(h.input('bad-json', { tools: [echo] })), { status: 'completed' })
    assert.is(echo.calls.length, 0)
    const facts = await factsOf(h.log, 'invocation-bad-json')
    assert.is(only(facts, 'tool.dispatched').length, 0)
    const rejected = only(facts, 'tool.rejected')
    assert.equal(
      rejected.map((f) => [f.callId, f.name, f.reason, f.input]),
      [['call-bad', 'echo', 'invalid_input', '{"value": 4']],
    )
    const reply = messagesOf(h.server.requests[1]?.body).find((m) => m.role === 'tool')
    assert.is(reply?.tool_call_id, 'call-bad')
    // Told what JSON.parse said (its wording is the runtime's): arguments cut off by a token limit read as such;
    // and, since the call is replayed with `{}` (servers refuse a history with arguments that do not parse), what it sent.
    assert.match(String(reply?.content), /^error: the arguments for "echo" are not valid JSON \(.*JSON.*\); it was not run\. The arguments sent were: \{"value": 4$/)
  }),
)

test(
  'maxSteps spent ends the run failed max_steps, without a further request',
  engineTest(() => answer.toolCalls([{ name: 'echo', arguments: { value: 9 } }]), {}, async (h) => {
    const echo = countingTool()
    const input = h.input('steps', { tools: [echo] })
    input.maxSteps = 2
    const controller = new AbortController()
    const outcome = await h.run(input, { signal: controller.signal })
    assert.is(getEventListeners(controller.signal, 'abort').length, 0, 'no listener left on the signal')
    assert.is(outcome.status, 'failed')
    assert.is(outcome.status === 'failed' && outcome.class, 'max_steps')
    assert.is(h.server.requests.length, 2)
    assert.is(echo.calls.length, 2)
    const facts = await factsOf(h.log, 'invocation-steps')
    assert.equal(
      only(facts, 'model.requested').map((f) => f.stepId),
      ['step-1', 'step-2'],
    )
    assert.equal(facts.at(-2)?.type, 'tool.settled', 'the run ends at a safe point')
    assert.is(outcome.status === 'failed' && outcome.message, 'all 2 model steps are spent')
    // One step: said in the singular. A hold asked of the ended run is told how it ended.
    const one = await h.start({ ...h.input('one-step', { tools: [echo] }), maxSteps: 1 })
    assert.equal(await one.wait(), { status: 'failed', class: 'max_steps', message: 'its one model step is spent' })
    assert.throws(
      () => one.handoff().reserve(intentOf('after-end', 'run-one-step')),
      (error: Error & { code?: string }) => error.code === 'HANDOFF_UNAVAILABLE' && /has ended \(failed: max_steps\)$/.test(error.message),
    )
    // A successor's budget is what its seal left, whatever maxSteps it was given: its message says so.
    const sealed = await sealAtFirstSafePoint(h, { ...h.input('sealed', { tools: [echo] }), maxSteps: 1 }, 'sealed-successor')
    assert.is(sealed.pause.remainingSteps, 1)
    const successor = await h.start({ ...successorInput(sealed), maxSteps: 256 })
    assert.equal(await successor.wait(), { status: 'failed', class: 'max_steps', message: 'its one model step is spent (the steps its seal left, remainingSteps)' })
  }),
)

test(
  'cancelling while the model request is awaited: model.interrupted{cancelled}, then invocation.ended{cancelled}',
  engineTest([answer.text('never sent', { hold: true })], {}, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('cancel-model'), { signal: controller.signal })
    await h.server.seen(0)
    assert.is(running.state(), 'awaitingModel')
    await assertFoldMatches(h.log, running, 'while the model is awaited')
    controller.abort('user-stop')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'user-stop' })
    const facts = await factsOf(h.log, 'invocation-cancel-model')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    assert.is(only(facts, 'model.interrupted')[0]?.status, 'cancelled')
    assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'user-stop' } })
    assert.is(h.server.requests.length, 1, 'no retry after a cancel')
  }),
)

test(
  'cancelling while a tool runs: the tool gets the signal and settles, later calls are rejected cancelled, the run ends cancelled',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-slow', name: 'slow', arguments: {} },
        { id: 'call-echo', name: 'echo', arguments: { value: 1 } },
      ]),
    ],
    {},
    async (h) => {
      let started!: () => void
      const running = new Promise<void>((resolve) => (started = resolve))
      const slow = countingTool('slow', (_input, { signal }) => {
        started()
        return new Promise((resolve) => signal.addEventListener('abort', () => resolve({ stopped: true }), { once: true }))
      })
      const echo = countingTool()
      const controller = new AbortController()
      const run = await h.start(h.input('cancel-tool', { tools: [slow, echo] }), { signal: controller.signal })
      await running
      assert.is(run.state(), 'settlingTool')
      await assertFoldMatches(h.log, run, 'while the tool runs')
      controller.abort()
      const outcome = await run.wait()
      assert.is(outcome.status, 'cancelled')
      assert.ok(slow.calls[0]?.signal.aborted, 'the tool saw the signal')
      assert.is(echo.calls.length, 0)
      const facts = await factsOf(h.log, 'invocation-cancel-tool')
      assert.equal(
        facts.map((f) => f.type),
        ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'tool.rejected', 'invocation.ended'],
      )
      assert.equal(only(facts, 'tool.settled')[0]?.outcome, { status: 'succeeded', output: { stopped: true } })
      assert.equal(
        only(facts, 'tool.rejected').map((f) => [f.callId, f.reason]),
        [['call-echo', 'cancelled']],
      )
      assert.is(h.server.requests.length, 1)
    },
  ),
)

test(
  'a run started with an aborted signal ends cancelled before any request',
  engineTest([], {}, async (h) => {
    const running = await h.start(h.input('aborted'), { signal: AbortSignal.abort('early') })
    assert.equal(await running.wait(), { status: 'cancelled', source: 'early' })
    assert.equal(await typesOf(h.log, 'invocation-aborted'), ['invocation.opened', 'invocation.ended'])
    assert.is(h.server.requests.length, 0)
  }),
)

test(
  'the request carries the catalog as function tools, the output limit and the provider options; the transcript is rebuilt from facts',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 5 } }], { text: 'calling' }), answer.text('done')], {}, async (h) => {
    const input = h.input('body')
    input.mainOutputLimit = 64
    input.providerOptions = { temperature: 0.5, seed: 7 }
    assert.equal(await h.run(input), { status: 'completed' })
    const [first, second] = h.server.requests.map((r) => r.body as Record<string, unknown>)
    assert.is(first?.max_tokens, 64)
    assert.is(first?.temperature, 0.5)
    assert.is(first?.seed, 7)
    assert.equal(
      (first?.tools as { type: string; function: { name: string } }[]).map((t) => [t.type, t.function.name]),
      [['function', 'echo']],
    )
    const calls: ToolCall[] = only(await factsOf(h.log, 'invocation-body'), 'model.completed')[0]?.output.toolCalls ?? []
    assert.equal(calls, [{ callId: 'call-1', name: 'echo', arguments: '{"value":5}' }])
    assert.equal(
      messagesOf(second).map((m) => [m.role, m.content]),
      [
        ['user', 'question body'],
        ['assistant', 'calling'],
        ['tool', '{"value":5}'],
      ],
    )
    assert.equal(await lastFactOf(h.log, 'invocation-body'), { type: 'invocation.ended', outcome: { status: 'completed' } })
  }),
)

test(
  "a tool is told whose run it serves (context.invocation, its own copy), and can reserve a hold on that run, taken once its call has settled",
  engineTest([answer.toolCalls([{ id: 'call-a', name: 'echo', arguments: { value: 1 } }]), answer.text('never asked')], {}, async (h) => {
    const seen: unknown[] = []
    let running: RunningInvocation | undefined
    let reserved: HandoffReservation | undefined
    const input = h.input('told')
    const echo = countingTool('echo', async (value, context) => {
      seen.push(structuredClone(context.invocation))
      context.invocation.sessionId = 'changed by the tool'
      reserved = (running as NonNullable<typeof running>).handoff().reserve(intentOf('told-next', input.invocation.runId))
      return value
    })
    input.tools = [echo]
    running = await h.start(input)
    // Set once the tool ran; the hold waits for its call to settle.
    const held = await (await until(() => reserved)).ready()
    assert.equal(seen, [input.invocation], "the run's ids")
    assert.equal((await typesOf(h.log, 'invocation-told')).slice(-3), ['tool.dispatched', 'tool.settled', 'hold.entered'])
    const pause = await held.commit()
    assert.equal(await running.wait(), { status: 'handoff_paused', pause })
    assert.is(h.server.requests.length, 1, 'no model request after the call')
    assert.is(running.invocation.sessionId, input.invocation.sessionId, "the tool's change reached nothing of the run's")
  }),
)

async function until<T>(get: () => T | undefined): Promise<T> {
  for (let waited = 0; waited < 5_000; waited += 5) {
    const value = get()
    if (value !== undefined) return value
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  throw new Error('not set within 5 s')
}

test(
  "answerOf(log.invocationEvents(id)) is the run's final answer: not the text beside a tool call, nothing for a run that never answered",
  engineTest(
    [answer.toolCalls([{ id: 'call-a', name: 'echo', arguments: { value: 1 } }], { text: 'Let me look.' }), answer.text('It is 1.'), answer.toolCalls([{ id: 'call-b', name: 'echo', arguments: { value: 2 } }])],
    {},
    async (h) => {
      const echo = countingTool()
      const running = await h.start(h.input('answered', { tools: [echo] }))
      assert.equal(await running.wait(), { status: 'completed' })
      const stored = await h.log.invocationEvents('invocation-answered')
      assert.equal(stored.map(({ event }) => event.fact.type), await typesOf(h.log, 'invocation-answered'), "the invocation's facts, in order")
      assert.ok(stored.every(({ seq }, index) => index === 0 || seq > (stored[index - 1] as { seq: number }).seq))
      assert.is(answerOf(stored), 'It is 1.')
      assert.is(answerOf(stored.map(({ event }) => event)), 'It is 1.', 'from the events too')
      const messages = transcriptOf(stored)
      assert.equal(messages.map((message) => message.role), ['user', 'assistant', 'tool', 'assistant'])
      assert.equal(messages, transcriptOf(stored.map(({ event }) => event)), 'the stored events or their events alike')
      // A run cut short after a call, before any final answer.
      let started: () => void = () => undefined
      const running2 = new Promise<void>((resolve) => (started = resolve))
      // Read-only: its failure after the cancel is recorded as one (a tool with effects would leave its outcome unknown).
      const stopsWhenTold = {
        ...countingTool('echo', (_, context) => {
          started()
          return new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(new Error('stopped'))))
        }),
        readOnly: true,
      }
      const cancel = new AbortController()
      const unanswered = await h.start(h.input('unanswered', { tools: [stopsWhenTold] }), { signal: cancel.signal })
      await running2
      cancel.abort()
      assert.is((await unanswered.wait()).status, 'cancelled')
      assert.is(answerOf(await h.log.invocationEvents('invocation-unanswered')), undefined)
      assert.equal(await h.log.invocationEvents('invocation-never'), [], 'an invocation the log never saw')
      const refused = await h.log.invocationEvents('not an id').then(() => undefined, (error: { code?: string }) => error.code)
      assert.is(refused, 'LOG_INVALID_ARGUMENT')
    },
  ),
)

test.run()
