/**
 * What a tool's failure is recorded as and the model told: a thrown object that is no error as JSON
 * of its own members (not `[object Object]`), an error's name when it is not plain `Error`, its
 * `cause` chain and an `AggregateError`'s errors, the provider's secrets redacted from all of it,
 * the whole cut at 16,000 characters with a note of its length; and callTool says the same.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { callTool } from '../testing/call-tool.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only } from './support/engine-fixtures.js'

const API_KEY = 'sk-test-SECRETKEY1234567890abcdef'

/** What each call of `fails` throws, by its `value`. */
const THROWN: Record<number, () => unknown> = {
  1: () => ({ code: 'E_QUOTA', detail: { left: 0 } }),
  2: () => Object.assign(Object.create(null) as object, { reason: 'no prototype' }),
  3: () => ({
    toString() {
      throw new Error('toString boom')
    },
    status: 503,
  }),
  4: () => new TypeError('cannot read properties of undefined'),
  5: () => new Error('charge failed', { cause: new Error(`auth with ${API_KEY} refused`, { cause: { status: 401 } }) }),
  6: () => new AggregateError([new Error('shard a down'), new RangeError('shard b out of range')], 'every shard failed'),
  7: () => new Error('x'.repeat(20_000)),
}

const TOLD: Record<number, string> = {
  1: '{"code":"E_QUOTA","detail":{"left":0}}',
  2: '{"reason":"no prototype"}',
  3: '{"status":503}',
  4: 'TypeError: cannot read properties of undefined',
  5: 'charge failed; cause: auth with [redacted] refused; cause: {"status":401}',
  6: 'AggregateError: every shard failed (2 errors: shard a down; RangeError: shard b out of range)',
  7: `${'x'.repeat(16_000)}… (cut: the message is 20,000 characters, over the 16,000 a tool's failure message keeps)`,
}

test(
  "a tool's failure is told in words: a thrown object's own members as JSON, the error's name, its cause chain and inner errors, secrets redacted, cut at 16,000 characters; callTool agrees",
  engineTest(
    [answer.toolCalls(Object.keys(THROWN).map((value) => ({ id: `call-${value}`, name: 'fails', arguments: { value: Number(value) } }))), answer.text('done')],
    {},
    async (h) => {
      const fails = countingTool('fails', async (input) => {
        throw (THROWN[(input as { value: number }).value] as () => unknown)()
      })
      const input = h.input('failures', { tools: [fails] })
      input.provider = { ...input.provider, apiKey: API_KEY }
      assert.equal(await h.run(input), { status: 'completed' })
      const settled = only(await factsOf(h.log, 'invocation-failures'), 'tool.settled').map((fact) => fact.outcome)
      const expected = Object.values(TOLD).map((message) => ({ status: 'failed', message }))
      // The redaction is the engine's, with the provider's secrets: callTool has none to remove.
      assert.equal(settled, expected)
      const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content)
      assert.equal(told, Object.values(TOLD).map((message) => `error: ${message}`))
      for (const value of [1, 2, 3, 4, 6, 7]) {
        assert.equal(await callTool(fails, { value }), { status: 'failed', message: TOLD[value] }, `callTool, value ${value}`)
      }
    },
  ),
)

test.run()
