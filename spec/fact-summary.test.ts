/**
 * The one-line summaries the CLI prints (store/fact-summary.ts): text is cut to its width with `…`,
 * never between the two halves of a character, which would print as U+FFFD.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { join } from 'node:path'
import { pendingCommand } from '../bin/commands/pending.js'
import { EventLog, type Fact, type ModelUsage, recoverInvocations, usageOf } from '../index.js'
import { clip, clipJson, summarizeFact, usageTotalsText } from '../store/fact-summary.js'
import { collector } from './support/cli-io.js'
import { EventMaker, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir } from './support/temp.js'

const wellFormed = (text: string) => !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text)

test('clip cuts at its width, and one character earlier where the cut would split an emoji', () => {
  assert.is(clip('short', 10), 'short')
  assert.is(clip('abcdefghijk', 10), 'abcdefghi…')
  for (let pad = 0; pad < 6; pad += 1) {
    const text = `${'x'.repeat(pad)}${'😀'.repeat(10)}`
    const cut = clip(text, 10)
    assert.ok(wellFormed(cut), `${JSON.stringify(cut)} is well formed`)
    assert.ok(cut.length <= 10 && cut.endsWith('…'))
    assert.ok(text.startsWith(cut.slice(0, -1)))
  }
})

test('a summarized tool call with emoji arguments stays well formed', () => {
  const line = summarizeFact({
    type: 'model.completed',
    stepId: 'step-1',
    output: { toolCalls: [{ callId: 'c1', name: 'say', arguments: JSON.stringify({ text: '😀'.repeat(40) }) }], finishReason: 'tool_calls' },
  })
  assert.ok(wellFormed(line), line)
  assert.match(line, /step-1 calls say\(.*…\)/)
})

test('a cut JSON text never ends inside an escape: it moves back to the escape\'s start', () => {
  // Each escape is cut at every point: the line keeps whole escapes only.
  for (const escape of ['\\u001b', '\\"', '\\\\', '\\n']) {
    for (let pad = 0; pad < 8; pad += 1) {
      const text = `"${'x'.repeat(pad)}${escape.repeat(8)}"`
      const cut = clipJson(text, 10)
      assert.ok(cut.endsWith('…') && cut.length <= 10, cut)
      const kept = cut.slice(0, -1)
      assert.ok(text.startsWith(kept), cut)
      const afterPad = kept.slice(1 + pad)
      assert.is(afterPad.length % escape.length, 0, `${JSON.stringify(cut)} keeps whole ${escape} escapes`)
    }
  }
  assert.is(clipJson('"short"', 10), '"short"')
  const line = summarizeFact({ type: 'tool.dispatched', operationId: 'op1', callId: 'c1', name: 'say', input: { text: `${'a'.repeat(67)}\u001b[0m` } })
  assert.match(line, /input=\{"text":"a{67}…$/, 'the escape that would be cut is left out whole')
  assert.not.match(line, /\\u00…|\\u001…|\\u0…|\\…/)
})

test('factstate pending cuts a tool input before an escape, not inside it', () =>
  withTempDir(async (dir) => {
    const location = join(dir, 'log')
    // As JSON, `{"text":"a…a\u001b[0m"}`: the escape spans the 118th to 123rd characters, across the cut at 120.
    const input = { text: `${'a'.repeat(107)}\u001b[0m` }
    const log = await EventLog.open(location)
    await log.appendAll(new EventMaker(invocationOf('cut')).many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: JSON.stringify(input) }]), facts.dispatched('op1', input)]))
    await log.close()
    const again = await EventLog.open(location)
    await recoverInvocations(again)
    await again.close()
    const { io, out } = collector()
    await pendingCommand([location], io)
    const line = out.join('\n')
    assert.match(line, /echo op1 \{"text":"a{107}…$/, line)
  }),
)

test("a provider's refusal code is shown beside the status of the interruption and of the failed outcome it ended", () => {
  const provider = { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' }
  const message = 'the provider answered HTTP 400: too long'
  assert.is(summarizeFact({ type: 'model.interrupted', stepId: 'step-3', status: 'failed', message, provider }), `step-3 failed (context_length_exceeded): ${message}`)
  assert.is(summarizeFact({ type: 'model.interrupted', stepId: 'step-3', status: 'failed', message, provider: { status: 401 } }), `step-3 failed: ${message}`, 'no code, nothing added')
  assert.is(
    summarizeFact({ type: 'invocation.ended', outcome: { status: 'failed', class: 'model_failed', message, provider } }),
    `failed model_failed (context_length_exceeded): ${message}`,
  )
  assert.is(summarizeFact({ type: 'invocation.ended', outcome: { status: 'failed', class: 'model_failed', message } }), `failed model_failed: ${message}`)
})

const answered = (usage?: ModelUsage, text = 'hi', responseId?: string): Fact => ({
  type: 'model.completed',
  stepId: 'step-2',
  output: { text, toolCalls: [], finishReason: 'stop', ...(usage === undefined ? {} : { usage }), ...(responseId === undefined ? {} : { responseId }) },
})

test("an answer's token counts follow its summary, each count the provider reported and none it did not", () => {
  assert.is(
    summarizeFact(answered({ inputTokens: 1234, outputTokens: 56, cachedInputTokens: 1000, reasoningTokens: 20 }, 'hi', 'chatcmpl-1')),
    'step-2 text "hi" · tokens 1234 in (1000 cached), 56 out (20 reasoning)',
  )
  assert.is(summarizeFact(answered({ inputTokens: 1234, outputTokens: 56 })), 'step-2 text "hi" · tokens 1234 in, 56 out')
  assert.is(summarizeFact(answered({ inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 })), 'step-2 text "hi" · tokens 0 in (0 cached), 0 out', 'a count of 0 is a count')
  assert.is(summarizeFact(answered({ outputTokens: 7 })), 'step-2 text "hi" · tokens 7 out', 'partial: the input left out')
  assert.is(summarizeFact(answered({ inputTokens: 9 })), 'step-2 text "hi" · tokens 9 in', 'partial: the output left out')
  assert.is(summarizeFact(answered({ cachedInputTokens: 5, outputTokens: 7 })), 'step-2 text "hi" · tokens ? in (5 cached), 7 out', 'a part without its whole')
  assert.is(summarizeFact(answered()), 'step-2 text "hi"', 'no usage: nothing added')
  assert.is(summarizeFact(answered({})), 'step-2 text "hi"', 'an empty usage: nothing added')
  const calls: Fact = {
    type: 'model.completed',
    stepId: 'step-1',
    output: { toolCalls: [{ callId: 'c1', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls', usage: { inputTokens: 80, outputTokens: 12 } },
  }
  assert.is(summarizeFact(calls), 'step-1 calls echo({}) · tokens 80 in, 12 out')
  assert.is(summarizeFact(answered({ inputTokens: 3, outputTokens: 4 }, 'a\u001b[2Jb\u2028')), 'step-2 text "a\\u001b[2Jb\\u2028" · tokens 3 in, 4 out', 'the text still escaped')
})

test("usageOf sums a run's answers, and says how many reported no full count; usageTotalsText never shows a partial total as whole", () => {
  const facts: Fact[] = [
    { type: 'model.requested', stepId: 'step-1', model: 'm', requestDigest: 'sha256:00' } as Fact,
    answered({ inputTokens: 1000, outputTokens: 50, cachedInputTokens: 800, reasoningTokens: 20 }),
    answered({ inputTokens: 234, outputTokens: 6 }),
  ]
  const events = facts.map((fact, index) => ({ seq: index + 1, event: { id: `e${index}`, recordedAt: 0, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }, fact } }))
  const whole = usageOf(events)
  assert.equal(whole, { answers: 2, unreported: 0, interrupted: 0, inputTokens: 1234, outputTokens: 56, cachedInputTokens: 800, reasoningTokens: 20 })
  assert.equal(usageOf(events.map(({ event }) => event)), whole, 'from the events too')
  assert.is(usageTotalsText(whole), '2 answers, tokens 1234 in (800 cached), 56 out (20 reasoning)')

  const partial = usageOf([...events, { seq: 4, event: { ...events[1]!.event, id: 'e4', fact: answered() } }, { seq: 5, event: { ...events[1]!.event, id: 'e5', fact: answered({ inputTokens: 10 }) } }])
  assert.equal(partial, { answers: 4, unreported: 2, interrupted: 0, inputTokens: 1244, outputTokens: 56, cachedInputTokens: 800, reasoningTokens: 20 })
  assert.is(usageTotalsText(partial), '4 answers, tokens at least 1244 in (800 cached), 56 out (20 reasoning) (usage missing from 2)')

  const none = usageOf([{ seq: 1, event: { ...events[1]!.event, fact: answered() } }])
  assert.equal(none, { answers: 1, unreported: 1, interrupted: 0, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 })
  assert.is(usageTotalsText(none), '1 answer, tokens not reported')
  assert.is(usageTotalsText(usageOf([])), 'no answers')
  assert.is(usageTotalsText(usageOf([events[0]!])), 'no answers', 'a run that asked and got no answer')
  // A request interrupted instead of answered (a timeout, a cut stream) may be billed and has no count: the total says so.
  const cut = { seq: 6, event: { ...events[1]!.event, id: 'e6', fact: { type: 'model.interrupted', stepId: 'step-2', status: 'timed_out' } as Fact } }
  const short = usageOf([...events, cut])
  assert.is(short.interrupted, 1)
  assert.is(usageTotalsText(short), '2 answers, tokens at least 1234 in (800 cached), 56 out (20 reasoning) (1 interrupted request not counted)')
  assert.is(usageTotalsText(usageOf([...events, cut, cut, { seq: 4, event: { ...events[1]!.event, id: 'e4', fact: answered() } }])), '3 answers, tokens at least 1234 in (800 cached), 56 out (20 reasoning) (usage missing from 1; 2 interrupted requests not counted)')
  assert.is(usageTotalsText(usageOf([events[0]!, cut])), 'no answers (1 interrupted request not counted)')
  assert.is(usageTotalsText(usageOf([{ seq: 1, event: { ...events[1]!.event, fact: answered() } }, cut])), '1 answer, tokens not reported (1 interrupted request not counted)')
  assert.throws(() => usageOf({} as never), /usageOf takes a list of events/)
})

test.run()
