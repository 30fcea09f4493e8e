/**
 * The one-line summaries the CLI prints (store/fact-summary.ts): text is cut to its width with `…`,
 * never between the two halves of a character, which would print as U+FFFD.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { join } from 'node:path'
import { pendingCommand } from '../bin/commands/pending.js'
import { EventLog, recoverInvocations } from '../index.js'
import { clip, clipJson, summarizeFact } from '../store/fact-summary.js'
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

test.run()
