/**
 * A tool that cannot tell whether its effect happened says so (`throw new OutcomeUnknownError(…)`):
 * its call is left dispatched and never settled, as a crash leaves it, the run ends
 * `failed{outcome_unknown}` in the tool's words, and the session must reconcile before its next
 * message; never retried. From a `readOnly` tool it is a failure like any other. An error made by
 * another copy of the library (its mark is a registered symbol) counts too; `callTool` agrees.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { OutcomeUnknownError, type ToolDefinition, defineTool } from '../index.js'
import { callTool } from '../testing/call-tool.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'

const API_KEY = 'sk-test-OUTCOMEUNKNOWN1234567890abcdef'

/** An error class of "another copy of the library": not this one's class, but carrying its mark. */
class OtherCopysError extends Error {}
Object.defineProperty(OtherCopysError.prototype, Symbol.for('factstate.OutcomeUnknownError'), { value: true })

/** A transfer tool whose bank closes the connection after the request was sent. */
const transfer = (thrown: () => unknown = () => new OutcomeUnknownError('the bank closed the connection after the transfer was sent', { cause: new Error('socket hang up') })) =>
  countingTool('transfer', async () => {
    throw thrown()
  })

const SAID = 'the bank closed the connection after the transfer was sent; cause: socket hang up'

test(
  'a tool that throws OutcomeUnknownError leaves its call uncertain: outcome_unknown in its words, never settled, the model not told it failed, the session to reconcile, and it is run once',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'transfer', arguments: { value: 100 } }]), answer.text('checked it')], {}, async (h) => {
    const tool = transfer()
    const tools = [tool]
    const outcome = await h.run(h.input('unknown', { tools, session: 'session-unknown' }))
    assert.equal(outcome, {
      status: 'failed',
      class: 'outcome_unknown',
      message: `tool transfer (operation invocation-unknown/step-1/0) reported its outcome unknown: ${SAID}; its effect may or may not have happened`,
    })
    const facts = await factsOf(h.log, 'invocation-unknown')
    assert.equal(facts.map((fact) => fact.type), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'], 'no failure is claimed')
    const prefix = await h.log.prefix(100, 1 << 20)
    assert.equal(prefix.projectInvocation('invocation-unknown').uncertainOperations, ['invocation-unknown/step-1/0'])
    assert.is(h.server.requests.length, 1, 'the model is not told the call failed (it would make it again)')
    const error = await refusedWithoutWriting(h.log, () => h.start(h.input('next', { tools, session: 'session-unknown' })), 'RUN_RECONCILIATION_REQUIRED', 'a message after the unknown outcome')
    assert.equal((error.details as { unknown: { operationId: string }[] }).unknown.map((op) => op.operationId), ['invocation-unknown/step-1/0'])
    const acknowledged = h.input('next', { tools, session: 'session-unknown' })
    acknowledged.work = { kind: 'message', content: 'the bank says it went through', allowPriorUnknown: true }
    assert.equal(await h.run(acknowledged), { status: 'completed' })
    assert.is(tool.calls.length, 1, 'the transfer was run once')
  }),
)

test(
  'OutcomeUnknownError is never retried, whatever retry and retryOn say; one after a retried failure says how many attempts were made',
  engineTest(
    [answer.toolCalls([{ id: 'call-1', name: 'transfer', arguments: {} }]), answer.toolCalls([{ id: 'call-2', name: 'flaky', arguments: {} }])],
    {},
    async (h) => {
      const first = transfer()
      const retried: ToolDefinition = { ...first, retry: { retries: 3, backoffMs: 1, retryOn: () => true } }
      const outcome = await h.run(h.input('retry', { tools: [retried], session: 'session-retry' }))
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      assert.is(first.calls.length, 1, 'one attempt')
      let attempts = 0
      const flaky: ToolDefinition = {
        name: 'flaky',
        retry: { retries: 3, backoffMs: 1 },
        execute: async () => {
          attempts += 1
          if (attempts === 1) throw new Error('the bank refused the connection')
          throw new OutcomeUnknownError('the bank reset the connection mid-answer')
        },
      }
      const second = await h.run(h.input('flaky', { tools: [flaky], session: 'session-flaky' }))
      assert.equal(second, {
        status: 'failed',
        class: 'outcome_unknown',
        message: 'tool flaky (operation invocation-flaky/step-1/0) failed after 2 attempts, the last reporting its outcome unknown: the bank reset the connection mid-answer; its effect may or may not have happened',
      })
      assert.is(attempts, 2, 'not retried after it')
    },
  ),
)

test(
  'from a readOnly tool OutcomeUnknownError is a failure like any other: settled failed, the model told, the run goes on',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'lookup', arguments: {} }]), answer.text('could not look it up')], {}, async (h) => {
    const lookup: ToolDefinition = {
      name: 'lookup',
      readOnly: true,
      execute: async () => {
        throw new OutcomeUnknownError('the index timed out')
      },
    }
    assert.equal(await h.run(h.input('lookup', { tools: [lookup] })), { status: 'completed' })
    const settled = only(await factsOf(h.log, 'invocation-lookup'), 'tool.settled').map((fact) => fact.outcome)
    assert.equal(settled, [{ status: 'failed', message: 'OutcomeUnknownError: the index timed out' }])
    const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content)
    assert.equal(told, ['error: OutcomeUnknownError: the index timed out'])
  }),
)

test(
  "another copy of the library's OutcomeUnknownError counts (its mark is a registered symbol), and the message loses the provider's secrets",
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'transfer', arguments: {} }])], {}, async (h) => {
    const tool = transfer(() => new OtherCopysError(`the gateway dropped the call (auth ${API_KEY})`))
    const input = h.input('copy', { tools: [tool] })
    input.provider = { ...input.provider, apiKey: API_KEY }
    const outcome = await h.run(input)
    assert.equal(outcome, {
      status: 'failed',
      class: 'outcome_unknown',
      message: 'tool transfer (operation invocation-copy/step-1/0) reported its outcome unknown: the gateway dropped the call (auth [redacted]); its effect may or may not have happened',
    })
    // A plain error with the same name is no such statement: a failure.
    const named = new Error('not ours')
    named.name = 'OutcomeUnknownError'
    assert.equal(await callTool(transfer(() => named), {}), { status: 'failed', message: 'OutcomeUnknownError: not ours' })
  }),
)

test(
  "an OutcomeUnknownError from defineTool's parseInput (sync or async) is the call's failure: execute never ran, so nothing is uncertain and the run goes on",
  engineTest(
    [answer.toolCalls([{ id: 'call-1', name: 'parsed', arguments: { value: 1 } }, { id: 'call-2', name: 'awaited', arguments: { value: 2 } }]), answer.text('could not look the customer up')],
    {},
    async (h) => {
      let executed = 0
      const lookupFailed = () => new OutcomeUnknownError('the customer lookup got no answer', { cause: new Error('socket hang up') })
      const parsed = defineTool({
        name: 'parsed',
        parseInput: (raw: unknown): { value: number } => {
          if (raw !== null) throw lookupFailed()
          return { value: 0 }
        },
        execute: () => (executed += 1),
      })
      const awaited = defineTool({
        name: 'awaited',
        parseInput: async (raw: unknown): Promise<{ value: number }> => {
          if (raw !== null) throw lookupFailed()
          return { value: 0 }
        },
        execute: () => (executed += 1),
      })
      assert.equal(await h.run(h.input('parse', { tools: [parsed, awaited], session: 'session-parse' })), { status: 'completed' })
      assert.is(executed, 0)
      const said = 'OutcomeUnknownError: the customer lookup got no answer; cause: socket hang up'
      const settled = only(await factsOf(h.log, 'invocation-parse'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled, [
        { status: 'failed', message: said },
        { status: 'failed', message: said },
      ])
      const prefix = await h.log.prefix(100, 1 << 20)
      assert.equal(prefix.projectInvocation('invocation-parse').uncertainOperations, [], 'no call left uncertain')
      assert.equal(await callTool(parsed, { value: 1 }), { status: 'failed', message: said })
      assert.equal(await callTool(awaited, { value: 1 }), { status: 'failed', message: said })
    },
  ),
)

test('callTool says unknown in the same words', async () => {
  const result = await callTool(transfer(), { value: 1 })
  assert.equal(result, { status: 'unknown', message: `tool transfer reported its outcome unknown: ${SAID}; its effect may or may not have happened` })
  const readOnly: ToolDefinition = { ...transfer(), readOnly: true }
  assert.equal(await callTool(readOnly, {}), { status: 'failed', message: `OutcomeUnknownError: ${SAID}` })
})

test('an OutcomeUnknownError is an Error with its name, message and cause', () => {
  const cause = new Error('socket hang up')
  const error = new OutcomeUnknownError('sent, no answer', { cause })
  assert.ok(error instanceof Error)
  assert.is(error.name, 'OutcomeUnknownError')
  assert.is(error.message, 'sent, no answer')
  assert.is(error.cause, cause)
})

test.run()
