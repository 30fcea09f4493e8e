/**
 * `defineTool`: a tool whose `execute` gets its input typed by a parse of the caller's (a zod schema's
 * `parse`), as a plain `ToolDefinition` that a run's `tools` takes beside others; and `RunSettings`,
 * the settings part of a run input. The types are checked by `npm run typecheck` (this file is part
 * of it): a wrong member of the parsed input does not compile.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { z } from 'zod'
import { type ApprovalRequest, type RunInput, type RunSettings, type ToolDefinition, defineTool } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only } from './support/engine-fixtures.js'

const Refund = z.object({ order: z.string().regex(/^C-[0-9]+$/), cents: z.number().int().positive(), note: z.string().default('none') })
type RefundInput = z.infer<typeof Refund>

test(
  'defineTool: execute and a needsApproval predicate get the input as parseInput makes it; a parse that throws is the call failing, told to the model, execute not run',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-big', name: 'refund', arguments: { order: 'C-7', cents: 25_000 } },
        { id: 'call-small', name: 'refund', arguments: { order: 'C-8', cents: 100, note: 'late' } },
        { id: 'call-bad', name: 'refund', arguments: { order: 'order 9', cents: 100 } },
      ]),
      answer.text('two refunded'),
    ],
    {},
    async (h) => {
      const executed: RefundInput[] = []
      const asked: unknown[] = []
      const refund = defineTool({
        name: 'refund',
        description: 'refunds an order',
        inputSchema: { type: 'object', properties: { order: { type: 'string' }, cents: { type: 'integer' }, note: { type: 'string' } }, required: ['order', 'cents'] },
        parseInput: Refund.parse,
        needsApproval: (input) => input.cents > 10_000,
        execute: (input, { operationId }) => {
          executed.push(input)
          // Typed: a member the parsed input lacks does not compile.
          // @ts-expect-error amount is no member of the parsed input
          void input.amount
          return { refunded: input.cents, order: input.order, operationId: operationId.length > 0 }
        },
      })
      // A plain tool beside it: a list of tools of several inputs is one ToolDefinition[].
      const tools: ToolDefinition[] = [refund, countingTool('echo')]
      assert.equal(Object.keys(refund).sort(), ['description', 'execute', 'inputSchema', 'name', 'needsApproval'], 'no parseInput among its members')
      const onApproval = (request: ApprovalRequest) => {
        asked.push(request.input)
        return { approved: true, by: 'test' }
      }
      assert.equal(await h.run(h.input('typed', { tools }), { onApproval }), { status: 'completed' })
      // zod's default filled in: the parse ran before execute.
      assert.equal(executed, [
        { order: 'C-7', cents: 25_000, note: 'none' },
        { order: 'C-8', cents: 100, note: 'late' },
      ])
      assert.equal(asked, [{ order: 'C-7', cents: 25_000 }, { order: 'order 9', cents: 100 }], 'the call the predicate of the parsed input asks for, and the one whose parse throws (to be safe), not the small one')
      const settled = only(await factsOf(h.log, 'invocation-typed'), 'tool.settled').map((fact) => fact.outcome.status)
      assert.equal(settled, ['succeeded', 'succeeded', 'failed'])
      const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content ?? '')
      assert.match(told[2] ?? '', /^error: ZodError: [\s\S]*"path": \[\s*"order"/, 'the model is told what the parse said')
    },
  ),
)

test(
  'defineTool with an async parseInput (a schema\'s parseAsync): awaited before execute and the needsApproval predicate; a rejection fails the call, execute not run, and asks for approval',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-good', name: 'refund', arguments: { order: 'C-7', cents: 25_000 } },
        { id: 'call-bad', name: 'refund', arguments: { order: 'order 9', cents: 100 } },
      ]),
      answer.text('one refunded'),
    ],
    {},
    async (h) => {
      const executed: unknown[] = []
      const asked: unknown[] = []
      const refund = defineTool({
        name: 'refund',
        inputSchema: { type: 'object', properties: { order: { type: 'string' }, cents: { type: 'integer' }, note: { type: 'string' } }, required: ['order', 'cents'] },
        parseInput: Refund.parseAsync,
        needsApproval: (input) => input.cents > 10_000,
        execute: (input) => {
          // The resolved type, not a promise of it.
          const parsed: RefundInput = input
          // @ts-expect-error amount is no member of the parsed input
          void input.amount
          executed.push(parsed)
          return { refunded: input.cents }
        },
      })
      const onApproval = (request: ApprovalRequest) => {
        asked.push(request.input)
        return { approved: true, by: 'test' }
      }
      assert.equal(await h.run(h.input('async-parse', { tools: [refund] }), { onApproval }), { status: 'completed' })
      assert.equal(executed, [{ order: 'C-7', cents: 25_000, note: 'none' }], 'execute got the resolved parse (zod\'s default filled in), and only for the call whose parse resolved')
      assert.equal(asked, [{ order: 'C-7', cents: 25_000 }, { order: 'order 9', cents: 100 }], 'the predicate of the resolved input asks, and so does a parse that rejects')
      const settled = only(await factsOf(h.log, 'invocation-async-parse'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled.map((outcome) => outcome.status), ['succeeded', 'failed'])
      assert.equal(settled[0], { status: 'succeeded', output: { refunded: 25_000 } })
      const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool').map((m) => m.content ?? '')
      assert.match(told[1] ?? '', /^error: ZodError: [\s\S]*"path": \[\s*"order"/, 'the model is told what the rejected parse said')
    },
  ),
)

test('defineTool infers Input from parseInput: a schema\'s parse or parseAsync anywhere, an inline parse first or with its parameter typed', () => {
  const Order = z.object({ order: z.string() })
  const tools = [
    defineTool({ name: 'a', execute: (input) => input.order, parseInput: Order.parse }),
    defineTool({ name: 'b', execute: (input) => input.order, parseInput: Order.parseAsync }),
    defineTool({ name: 'c', parseInput: (raw) => Order.parseAsync(raw), execute: (input) => input.order }),
    defineTool({ name: 'd', needsApproval: (input) => input.order === 'x', parseInput: (raw: unknown) => Order.parse(raw), execute: (input) => input.order }),
    // @ts-expect-error the parse gives { order: string }, not a number
    defineTool({ name: 'e', parseInput: Order.parseAsync, execute: (input: { order: number }) => input.order }),
  ]
  assert.equal(tools.map((tool) => tool.name), ['a', 'b', 'c', 'd', 'e'])
})

test('defineTool refuses what is no function as parseInput or execute; RunSettings is a run input without invocation and work', () => {
  assert.throws(() => defineTool({ name: 'x', parseInput: undefined as never, execute: () => 1 }), /parseInput must be a function/)
  assert.throws(() => defineTool({ name: 'x', parseInput: (input) => input, execute: 'run' as never }), /execute must be a function/)
  const settings: RunSettings = { provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' }, configuration: { cwd: '/srv' }, tools: [] }
  const input: RunInput = { ...settings, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }, work: { kind: 'message', content: 'hi' } }
  assert.is(input.tools, settings.tools)
  const withoutIds: 'invocation' | 'work' extends keyof RunSettings ? false : true = true
  assert.ok(withoutIds, "a run's settings have no invocation nor work")
})

test.run()
