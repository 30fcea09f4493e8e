/**
 * `callTool` (factstate/testing) unit-tests one tool as the engine calls it, without a model or a
 * log: the same argument parsing, input check, context, time limit and result conversion. The first
 * test runs one set of calls through a real `Engine` and holds `callTool` to what the log recorded.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact, Invocation, ToolContext, ToolDefinition } from '../index.js'
import { answer, type CallToolProgress, callTool, type ToolCallOutcome } from '../testing/index.js'
import { engineTest, factsOf } from './support/engine-fixtures.js'
import { rejectsWithCode } from './support/codes.js'
import { withTimeout } from './support/temp.js'

const REFUND_SCHEMA = {
  type: 'object',
  properties: { order: { type: 'string', pattern: '^C-[0-9]+$' }, cents: { type: 'integer', minimum: 1 } },
  required: ['order', 'cents'],
  additionalProperties: false,
}

/** The tools of the comparison, each keeping the contexts it was called with. */
function tools(): { tools: ToolDefinition[]; contexts: Omit<ToolContext, 'signal' | 'addSecret' | 'progress'>[] } {
  const contexts: Omit<ToolContext, 'signal' | 'addSecret' | 'progress'>[] = []
  const seen = (context: ToolContext) => contexts.push({ operationId: context.operationId, attempt: context.attempt, invocation: context.invocation })
  return {
    contexts,
    tools: [
      {
        name: 'refund',
        inputSchema: REFUND_SCHEMA,
        execute: async (input, context) => {
          seen(context)
          const { order, cents } = input as { order: string; cents: number }
          // What a database client returns: a Date and a BigInt, which the engine records as text.
          return { order, refunded: cents, at: new Date(Date.UTC(2026, 11, 6)), id: 9007199254740993n, dropped: undefined }
        },
      },
      {
        name: 'ticket',
        execute: (_input, context) => {
          seen(context)
          throw new Error('ticket service said no')
        },
      },
      {
        name: 'export',
        execute: (_input, context) => {
          seen(context)
          return { rows: 'x'.repeat(2_000) }
        },
      },
      {
        name: 'charge',
        execute: (_input, context) => {
          seen(context)
          // An error returned as data (not thrown): JSON would write it as its own members only.
          return { charged: false, error: Object.assign(new TypeError('card declined'), { code: 'E_DECLINED' }) }
        },
      },
      {
        name: 'upload',
        execute: (_input, context) => {
          seen(context)
          return { stored: true, receipt: Buffer.from('r-1') }
        },
      },
    ],
  }
}

/** The calls of the comparison: arguments as the model sends them (JSON text). */
const CALLS: { name: string; arguments: string }[] = [
  { name: 'refund', arguments: JSON.stringify({ order: 'C-7', cents: 1250 }) },
  { name: 'refund', arguments: JSON.stringify({ order: 'order 7', cents: '12.5', note: 'asap' }) },
  { name: 'refund', arguments: '{"order": "C-7", ' },
  { name: 'ticket', arguments: '{}' },
  { name: 'export', arguments: '' },
  { name: 'charge', arguments: '{}' },
  { name: 'upload', arguments: '{}' },
]

/** What the log recorded of one call, as a `ToolCallOutcome`. */
function recorded(facts: Fact[], operationId: string): ToolCallOutcome | undefined {
  for (const fact of facts) {
    if (fact.type === 'tool.rejected' && fact.operationId === operationId && fact.reason === 'invalid_input') {
      return { status: 'rejected', reason: 'invalid_input', message: fact.message ?? '' }
    }
    if (fact.type === 'tool.settled' && fact.operationId === operationId) {
      return fact.outcome.status === 'succeeded' ? { status: 'succeeded', output: fact.outcome.output } : { status: 'failed', message: fact.outcome.message }
    }
  }
  return undefined
}

test(
  'callTool gives what the engine records for the same calls: the output as stored, the schema refusal, the arguments that are not JSON, the failure, the result over the limit, an Error returned as data, a Buffer refused',
  engineTest(
    [answer.toolCalls(CALLS), answer.text('done')],
    { engine: { maxToolResultBytes: 1_000 } },
    async ({ run, input, log }) => {
      const engineSide = tools()
      const outcome = await run({ ...input('compare'), tools: engineSide.tools })
      assert.is(outcome.status, 'completed')
      const facts = await factsOf(log, 'invocation-compare')
      const invocation: Invocation = { sessionId: 'session-compare', turnId: 'turn-compare', runId: 'run-compare', invocationId: 'invocation-compare' }
      const unitSide = tools()
      for (const [index, call] of CALLS.entries()) {
        const operationId = `invocation-compare/step-1/${index}`
        const fromLog = recorded(facts, operationId)
        assert.ok(fromLog, `the log recorded call ${index}`)
        const tool = unitSide.tools.find((candidate) => candidate.name === call.name) as ToolDefinition
        const fromUnit = await callTool(tool, call.arguments, { invocation, operationId, maxToolResultBytes: 1_000 })
        assert.equal(fromUnit, fromLog, `call ${index} (${call.name} ${call.arguments})`)
      }
      assert.equal(
        (recorded(facts, 'invocation-compare/step-1/0') as { output: unknown }).output,
        { order: 'C-7', refunded: 1250, at: '2026-12-06T00:00:00.000Z', id: '9007199254740993' },
        'a Date and a BigInt as text, an undefined member dropped',
      )
      assert.match((recorded(facts, 'invocation-compare/step-1/1') as { message: string }).message, /pattern|must/)
      // Arguments that are not JSON: the log says where they stop being JSON, in words that are the same on every Node.
      assert.is((recorded(facts, 'invocation-compare/step-1/2') as { message: string }).message, 'the arguments are not valid JSON (at position 17: the text ends where a property name in double quotes was expected)')
      assert.match((recorded(facts, 'invocation-compare/step-1/4') as { message: string }).message, /over the engine's limit of 1,000 bytes/)
      assert.equal(recorded(facts, 'invocation-compare/step-1/5'), { status: 'succeeded', output: { charged: false, error: { name: 'TypeError', message: 'card declined', code: 'E_DECLINED' } } }, 'an Error returned as data: its name and message, not {}')
      assert.equal(recorded(facts, 'invocation-compare/step-1/6'), {
        status: 'failed',
        message: `the tool ran, but its result could not be recorded: its member "receipt" is a Buffer, which JSON would record as {"type":"Buffer","data":[…]}, a number for each byte: return buffer.toString('base64') instead; the call's effect has happened, so do not call the tool again to redo it`,
      })
      // The tools were called with the same contexts on both sides: the refused calls on neither.
      assert.equal(unitSide.contexts, engineSide.contexts)
      assert.equal(
        engineSide.contexts.map((context) => context.operationId),
        ['invocation-compare/step-1/0', 'invocation-compare/step-1/3', 'invocation-compare/step-1/4', 'invocation-compare/step-1/5', 'invocation-compare/step-1/6'],
      )
    },
  ),
)

/** Tools that return the limit their context gives each attempt (`null` for none); `retried` fails its first attempt. */
const limitTools = (): ToolDefinition[] => {
  const told = (context: ToolContext) => ({ attempt: context.attempt, timeoutMs: context.timeoutMs ?? null, given: 'timeoutMs' in context })
  return [
    { name: 'defaulted', execute: (_input, context) => told(context) },
    { name: 'own', timeoutMs: 5_000, execute: (_input, context) => told(context) },
    {
      name: 'retried',
      timeoutMs: 7_000,
      retry: { retries: 1, backoffMs: 1 },
      execute: (_input, context) => {
        if (context.attempt === 1) throw new Error(`attempt 1 had ${String(context.timeoutMs)} ms`)
        return told(context)
      },
    },
  ]
}

test(
  "callTool gives context.timeoutMs as a run does: the tool's timeoutMs, else the toolTimeoutMs option, else undefined; on every attempt",
  engineTest(
    [answer.toolCalls(['defaulted', 'own', 'retried'].map((name) => ({ name, arguments: {} }))), answer.text('done')],
    { engine: { toolTimeoutMs: 30_000 } },
    async ({ run, input, log }) => {
      assert.equal(await run({ ...input('limits'), tools: limitTools() }), { status: 'completed' })
      const facts = await factsOf(log, 'invocation-limits')
      const invocation: Invocation = { sessionId: 'session-limits', turnId: 'turn-limits', runId: 'run-limits', invocationId: 'invocation-limits' }
      for (const [index, tool] of limitTools().entries()) {
        const operationId = `invocation-limits/step-1/${index}`
        assert.equal(await callTool(tool, {}, { invocation, operationId, toolTimeoutMs: 30_000 }), recorded(facts, operationId), tool.name)
      }
      assert.equal(
        facts.flatMap((fact) => (fact.type === 'tool.settled' && fact.outcome.status === 'succeeded' ? [fact.outcome.output] : [])),
        [
          { attempt: 1, timeoutMs: 30_000, given: true },
          { attempt: 1, timeoutMs: 5_000, given: true },
          { attempt: 2, timeoutMs: 7_000, given: true },
        ],
      )
      // Without the toolTimeoutMs option: no limit, the member there and undefined, as in a run without the engine's.
      const [defaulted, own] = limitTools() as [ToolDefinition, ToolDefinition]
      assert.equal(await callTool(defaulted, {}), { status: 'succeeded', output: { attempt: 1, timeoutMs: null, given: true } })
      assert.equal(await callTool(own, {}), { status: 'succeeded', output: { attempt: 1, timeoutMs: 5_000, given: true } })
    },
  ),
)

const TOOL_KEY = 'sk_live_tool_0123456789abcdef0123'
/** A payment tool that throws its own key (whole, masked, in a cause) and a lookup that returns it. */
const keyTools = (): ToolDefinition[] => [
  {
    name: 'pay',
    readOnly: true,
    execute: async () => {
      throw new Error(`401 invalid api key ${TOOL_KEY} (ending ${TOOL_KEY.slice(-10)})`, { cause: new Error(`sent ${Buffer.from(TOOL_KEY).toString('base64')}`) })
    },
  },
  { name: 'lookup', readOnly: true, execute: async () => ({ key: TOOL_KEY, year: 2024 }) },
]

test(
  "callTool with the engine's secrets gives what a run with them records: the key gone from the failure (whole, masked, encoded) and from the output",
  engineTest(
    [answer.toolCalls([{ name: 'pay', arguments: {} }, { name: 'lookup', arguments: {} }]), answer.text('done')],
    { engine: { secrets: [TOOL_KEY] } },
    async ({ run, input, log }) => {
      assert.equal(await run({ ...input('keys'), tools: keyTools() }), { status: 'completed' })
      const facts = await factsOf(log, 'invocation-keys')
      const invocation: Invocation = { sessionId: 'session-keys', turnId: 'turn-keys', runId: 'run-keys', invocationId: 'invocation-keys' }
      const unit = keyTools()
      for (const [index, tool] of unit.entries()) {
        const operationId = `invocation-keys/step-1/${index}`
        const fromUnit = await callTool(tool, {}, { invocation, operationId, secrets: [TOOL_KEY] })
        assert.equal(fromUnit, recorded(facts, operationId), tool.name)
        assert.not.ok(JSON.stringify(fromUnit).includes(TOOL_KEY.slice(-10)), `${tool.name}: no piece of the key`)
      }
      // Without the option the key stays, as the README says: callTool records nothing.
      assert.match(JSON.stringify(await callTool(unit[0] as ToolDefinition, {})), new RegExp(TOOL_KEY))
      await rejectsWithCode(() => callTool(unit[0] as ToolDefinition, {}, { secrets: ['short'] }), 'TESTING_INVALID_OPTIONS', 'a secret under 8 characters')
      // A tool that would show the model one of the secrets is refused, as a run with them refuses it, before it is called.
      const calls: unknown[] = []
      for (const [field, shown] of [
        ['tool.description', { description: `charges with ${TOOL_KEY}` }],
        ['tool.inputSchema', { inputSchema: { type: 'object', properties: { key: { const: TOOL_KEY } } } }],
      ] as const) {
        const tool: ToolDefinition = {
          name: 'pay',
          ...shown,
          execute: async (input) => {
            calls.push(input)
            return 'ran'
          },
        }
        const refused = await rejectsWithCode(() => callTool(tool, {}, { secrets: [TOOL_KEY] }), 'TESTING_INVALID_OPTIONS', field)
        assert.equal((refused as { details?: unknown }).details, { field }, field)
        assert.not.ok(refused.message.includes(TOOL_KEY.slice(8, 24)), `${field}: the refusal does not quote it`)
        assert.equal(await callTool(tool, {}), { status: 'succeeded', output: 'ran' }, `${field}: without the option it runs`)
      }
      assert.is(calls.length, 2, 'only the calls without the option ran')
    },
  ),
)

const TOKEN = 'oauth-access-token-for-tests-7f3a9c'
const LEASE = 'vault-lease-credential-42b8e1d0c5'
/** Tools that get a credential while they run and add it with `context.addSecret`, then return or throw it. */
const addingTools = (): ToolDefinition[] => [
  {
    name: 'login',
    readOnly: true,
    retry: { retries: 1, backoffMs: 1 },
    // Added on attempt 1, which throws; attempt 2 returns it without adding it again.
    execute: (_input, context) => {
      if (context.attempt === 2) return { token: TOKEN }
      context.addSecret(TOKEN)
      throw new Error(`exchange answered 503 for ${TOKEN}`)
    },
  },
  {
    name: 'lease',
    readOnly: true,
    execute: (_input, context) => {
      context.addSecret(LEASE)
      throw new Error(`lease ${LEASE} refused (ending ${LEASE.slice(-10)})`, { cause: new Error(`sent ${Buffer.from(LEASE).toString('base64')}`) })
    },
  },
  {
    name: 'invalid',
    readOnly: true,
    execute: (_input, context) => {
      context.addSecret('tiny')
      return 'not reached'
    },
  },
]

test(
  'callTool honours context.addSecret as a run does: the added value gone from the output (of a later attempt too) and from the failure (whole, masked, encoded); an invalid one is TOOL_SECRET_INVALID',
  engineTest(
    [answer.toolCalls([{ name: 'login', arguments: {} }, { name: 'lease', arguments: {} }, { name: 'invalid', arguments: {} }]), answer.text('done')],
    {},
    async ({ run, input, log }) => {
      assert.equal(await run({ ...input('added'), tools: addingTools() }), { status: 'completed' })
      const facts = await factsOf(log, 'invocation-added')
      const invocation: Invocation = { sessionId: 'session-added', turnId: 'turn-added', runId: 'run-added', invocationId: 'invocation-added' }
      const outcomes: (ToolCallOutcome | undefined)[] = []
      for (const [index, tool] of addingTools().entries()) {
        const operationId = `invocation-added/step-1/${index}`
        // Without the `secrets` option: what the tool adds is redacted all the same.
        const fromUnit = await callTool(tool, {}, { invocation, operationId })
        assert.equal(fromUnit, recorded(facts, operationId), tool.name)
        outcomes.push(fromUnit)
      }
      assert.equal(outcomes, [
        { status: 'succeeded', output: { token: '[redacted]' } },
        { status: 'failed', message: 'lease [redacted] refused (ending [redacted]); cause: sent [redacted]' },
        { status: 'failed', message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret takes a secret of 8 characters or more (spaces around it not counted); the value is not shown' },
      ])
      for (const secret of [TOKEN, LEASE]) assert.not.ok(JSON.stringify(facts).includes(secret.slice(-8)), 'no fact holds a piece of it')
      const refusals: unknown[] = []
      const many: ToolDefinition = {
        name: 'many',
        execute: (_input, context) => {
          for (let index = 0; index < 65; index += 1) context.addSecret(`lease-number-${index}`)
          return 'not reached'
        },
      }
      // A token passed as a Buffer is named by its kind, in words: not quoted, not 'a object'.
      const buffer: ToolDefinition = { name: 'buffer', execute: (_input, context) => context.addSecret(Buffer.from('lease-as-bytes') as unknown as string) }
      assert.equal(await callTool(buffer, {}), { status: 'failed', message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret takes a string, not an object; the value is not shown' })
      const tooMany = await callTool(many, {})
      assert.equal(tooMany, { status: 'failed', message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret was given more than 64 secrets in one run; the value is not shown' })
      const probing: ToolDefinition = {
        name: 'probing',
        execute: (_input, context) => {
          for (const value of [null, 12345678, '       7', `jwt-${'a'.repeat(16_381)}`, 'again-the-same', 'again-the-same', `jwt-${'b'.repeat(16_380)}`]) {
            try {
              context.addSecret(value as string)
              refusals.push('added')
            } catch (error) {
              refusals.push([(error as { code?: string }).code, (error as { details?: unknown }).details])
            }
          }
          return 'again-the-same, 2024'
        },
      }
      assert.equal(await callTool(probing, {}), { status: 'succeeded', output: '[redacted], 2024' })
      assert.equal(refusals, [
        ['TOOL_SECRET_INVALID', { reason: 'not_a_string' }],
        ['TOOL_SECRET_INVALID', { reason: 'not_a_string' }],
        ['TOOL_SECRET_INVALID', { reason: 'too_short' }],
        ['TOOL_SECRET_INVALID', { reason: 'too_long' }],
        'added',
        'added',
        'added',
      ])
      const long: ToolDefinition = { name: 'long', execute: (_input, context) => context.addSecret(`jwt-${'c'.repeat(17_000)}`) }
      assert.equal(await callTool(long, {}), {
        status: 'failed',
        message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret takes a secret of at most 16,384 characters, not 17,004 (each is looked for, in every form, in all the run records); the value is not shown',
      })
      // A token with many claims (5 KB) fits; the bound is on what a run's tools add together.
      const together: string[] = []
      const hoarding: ToolDefinition = {
        name: 'hoarding',
        execute: (_input, context) => {
          for (let index = 0; index < 5; index += 1) {
            try {
              context.addSecret(`jwt-${index}-${String.fromCharCode(97 + index).repeat(15_000)}`)
              together.push('added')
            } catch (error) {
              together.push(`${(error as { code?: string }).code} ${JSON.stringify((error as { details?: unknown }).details)} ${(error as Error).message}`)
            }
          }
          context.addSecret(`jwt-${'e'.repeat(5_600)}`)
          return 'done'
        },
      }
      assert.equal(await callTool(hoarding, {}), {
        status: 'failed',
        message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret was given secrets of more than 65,536 characters together in one run (65,628 with this one); the value is not shown',
      })
      assert.equal(together.slice(0, 4), ['added', 'added', 'added', 'added'])
      assert.match(together[4] ?? '', /^TOOL_SECRET_INVALID \{"reason":"too_many"\} TOOL_SECRET_INVALID: context\.addSecret was given secrets of more than 65,536 characters together in one run \(75,030 with this one\)/)
      // The engine's own secrets (here callTool's option, which takes the same) have the same bounds.
      const declared = await rejectsWithCode(() => callTool(long, {}, { secrets: [`key-${'d'.repeat(16_381)}`] }), 'TESTING_INVALID_OPTIONS', 'a declared secret past the bound')
      assert.equal(declared.details, { field: 'secrets' })
      assert.match(declared.message, 'strings of 8 to 16,384 characters, 65,536 together: item 0 is longer (16,385 characters)')
      assert.not.match(declared.message, 'dddddddd', 'the secret is not shown')
      const many16 = Array.from({ length: 5 }, (_, index) => `key-${index}-${'f'.repeat(15_000)}`)
      const summed = await rejectsWithCode(() => callTool(long, {}, { secrets: many16 }), 'TESTING_INVALID_OPTIONS', 'declared secrets past the bound together')
      assert.equal(summed.details, { field: 'secrets' })
      assert.match(summed.message, 'they hold 75,030 characters together')
      assert.equal((await callTool({ name: 'plain', execute: () => 'ok' }, {}, { secrets: many16.slice(0, 4) })).status, 'succeeded', 'four of 15 KB fit')
    },
  ),
)

test('callTool gives a tool its default context, an arguments value JSON-encoded first, and the engine-side limits', () =>
  withTimeout(async () => {
    const contexts: ToolContext[] = []
    const echo: ToolDefinition = {
      name: 'echo',
      execute: (input, context) => {
        contexts.push(context)
        return input
      },
    }
    assert.equal(await callTool(echo, { when: new Date(Date.UTC(2026, 0, 1)), n: 1 }), { status: 'succeeded', output: { when: '2026-01-01T00:00:00.000Z', n: 1 } })
    assert.equal(contexts[0]?.invocation, { sessionId: 'session-1', turnId: 'turn-1', runId: 'run-1', invocationId: 'invocation-1' })
    assert.is(contexts[0]?.operationId, 'invocation-1/step-1/0')
    assert.is(contexts[0]?.signal.aborted, false)
    // The tool gets a copy of its input, as the engine's tools do: changing it changes nothing recorded.
    const mutating: ToolDefinition = {
      name: 'mutating',
      execute: (input) => {
        ;(input as { items: number[] }).items.push(4)
        return 'ok'
      },
    }
    const args = { items: [1, 2, 3] }
    assert.equal(await callTool(mutating, args), { status: 'succeeded', output: 'ok' })
    assert.equal(args.items, [1, 2, 3])
    // validateInput: false leaves the schema unchecked, as the engine does.
    const unchecked: ToolDefinition = { name: 'unchecked', inputSchema: REFUND_SCHEMA, validateInput: false, execute: (input) => input }
    assert.equal(await callTool(unchecked, { anything: true }), { status: 'succeeded', output: { anything: true } })
    // A cancelled run's signal reaches the tool.
    const controller = new AbortController()
    const waiting: ToolDefinition = {
      name: 'waiting',
      execute: (_input, context) =>
        new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(new Error(`stopped: ${String(context.signal.reason)}`)), { once: true })),
    }
    const call = callTool(waiting, {}, { signal: controller.signal })
    controller.abort('the user left')
    assert.equal(await call, { status: 'unknown', message: 'tool waiting failed after its signal aborted (the user left): stopped: the user left; its effect may or may not have happened' })
    // A tool that throws its signal's reason has it said once.
    const rethrown = new AbortController()
    const rethrows: ToolDefinition = { name: 'rethrows', execute: (_input, context) => new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason), { once: true })) }
    const rethrowing = callTool(rethrows, {}, { signal: rethrown.signal })
    rethrown.abort('user pressed stop')
    assert.equal(await rethrowing, { status: 'unknown', message: 'tool rethrows failed after its signal aborted (user pressed stop); its effect may or may not have happened' })
    // A signal aborted before the call: not called, as a cancelled run starts no call.
    let calls = 0
    assert.equal(await callTool({ name: 'never', execute: () => ++calls }, {}, { signal: AbortSignal.abort('gone') }), { status: 'rejected', reason: 'cancelled' })
    assert.is(calls, 0)
    // A read-only tool's failure is one; what a tool returns once told is recorded as it returned.
    const again = new AbortController()
    const readOnly = callTool({ ...waiting, readOnly: true }, {}, { signal: again.signal })
    again.abort('the user left')
    assert.equal(await readOnly, { status: 'failed', message: 'stopped: the user left' })
    const third = new AbortController()
    const returns: ToolDefinition = { name: 'returns', execute: (_input, context) => new Promise((resolve) => context.signal.addEventListener('abort', () => resolve({ sent: false }), { once: true })) }
    const returned = callTool(returns, {}, { signal: third.signal })
    third.abort('the user left')
    assert.equal(await returned, { status: 'succeeded', output: { sent: false } })
  }, 10_000),
)

test('callTool applies the time limit as the engine does: the signal aborts at timeoutMs, and a tool that ignores it is abandoned', () =>
  withTimeout(async () => {
    const polite: ToolDefinition = {
      name: 'polite',
      timeoutMs: 20,
      execute: (_input, context) => new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason), { once: true })),
    }
    const stopped = await callTool(polite, {})
    assert.is(stopped.status, 'unknown', 'a tool with effects that throws once its time is up: a run leaves it uncertain')
    assert.match((stopped as { message: string }).message, /^tool polite failed after its signal aborted \(the tool did not finish within 20 ms \(its timeoutMs\)\); its effect may or may not have happened$/)
    assert.equal(await callTool({ ...polite, readOnly: true }, {}), { status: 'failed', message: 'TimeoutError: the tool did not finish within 20 ms (its timeoutMs)' })
    // A long failure is quoted in part, and the note names that limit, not maxToolResultBytes.
    const wordy: ToolDefinition = { ...polite, execute: (_input, context) => new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(new Error('x'.repeat(5_000))), { once: true })) }
    const quoted = await callTool(wordy, {})
    assert.is(quoted.status, 'unknown')
    assert.match((quoted as { message: string }).message, /x{1000}… \(cut: the message is 5,000 bytes, over the 1,000 bytes an outcome's message quotes of it\); its effect may or may not have happened$/)
    let release = () => undefined as void
    const deaf: ToolDefinition = { name: 'deaf', execute: () => new Promise<void>((resolve) => (release = resolve)) }
    const abandoned = await callTool(deaf, {}, { toolTimeoutMs: 20 })
    release()
    assert.equal(abandoned, { status: 'abandoned', message: 'tool deaf did not finish within 20 ms, nor within 1,000 ms of its signal aborting' })
    // A read-only tool not waited for failed, as the engine records it (spec/engine-tool-timeout.test.ts).
    const deafReader = await callTool({ ...deaf, readOnly: true }, {}, { toolTimeoutMs: 20 })
    release()
    assert.equal(deafReader, {
      status: 'failed',
      message: "the tool did not finish within 20 ms (the engine's toolTimeoutMs), nor within 1,000 ms of its signal aborting, and was not waited for: what it returns later is not recorded",
    })
  }, 10_000),
)

test('callTool refuses a tool or options the engine would refuse, with TESTING_INVALID_OPTIONS, before calling the tool', () =>
  withTimeout(async () => {
    let called = 0
    const execute = () => {
      called++
      return 'ran'
    }
    const refusals: [string, () => Promise<unknown>, string][] = [
      ['no execute', () => callTool({ name: 'x' } as unknown as ToolDefinition, {}), 'tool.execute'],
      ['a bad name', () => callTool({ name: 'has space', execute }, {}), 'tool.name'],
      ['a misnamed member', () => callTool({ name: 'x', execute, needsApprovl: true } as unknown as ToolDefinition, {}), 'tool.needsApprovl'],
      ['a schema it cannot use', () => callTool({ name: 'x', execute, inputSchema: { type: 'object', properties: { a: { $ref: '#/nowhere' } } } }, {}), 'tool.inputSchema'],
      ['an unknown option', () => callTool({ name: 'x', execute }, {}, { timeoutMs: 5 } as never), 'timeoutMs'],
      ['a bad invocation', () => callTool({ name: 'x', execute }, {}, { invocation: { sessionId: 's' } as never }), 'invocation'],
      ['a bad limit', () => callTool({ name: 'x', execute }, {}, { maxToolResultBytes: 0 }), 'maxToolResultBytes'],
      ['a bad time limit', () => callTool({ name: 'x', execute }, {}, { toolTimeoutMs: 1.5 }), 'toolTimeoutMs'],
      ['arguments JSON cannot encode', () => callTool({ name: 'x', execute }, undefined), 'args'],
    ]
    for (const [what, call, field] of refusals) {
      const error = await rejectsWithCode(call, 'TESTING_INVALID_OPTIONS', what)
      assert.is(error.details?.field, field, what)
      // The engine's refusal it quotes keeps its words, not its code.
      assert.not.match(error.message.slice('TESTING_INVALID_OPTIONS: '.length), /\b[A-Z]+(?:_[A-Z]+)+: /, `${what}: ${error.message}`)
    }
    assert.is(called, 0, 'the tool was never called')
  }, 10_000),
)

test(
  "callTool passes what the tool reports with context.progress to onToolProgress as a run would: made JSON, copied, redacted of the secrets option's values and of what the tool added, numbered over a retry's attempts; a value a run refuses is TOOL_PROGRESS_INVALID to the tool, with or without the option; a report after the call settled is dropped",
  () =>
    withTimeout(async () => {
      const KEY = 'crawler-key-0123456789'
      const LEASE = 'lease-token-ABCDEFGH77'
      let late: () => void = () => undefined
      const lateDone = new Promise<void>((resolve) => {
        late = resolve
      })
      const crawl: ToolDefinition = {
        name: 'crawl',
        retry: { retries: 1, backoffMs: 1 },
        execute: (_input, context) => {
          const value = { page: context.attempt, url: `https://example.test/?key=${KEY}`, at: new Date(0) }
          context.progress(value)
          value.page = 99
          if (context.attempt === 1) throw new Error('the site timed out')
          context.addSecret(LEASE)
          context.progress({ lease: LEASE })
          setImmediate(() => {
            context.progress('after it settled')
            late()
          })
          return 'crawled'
        },
      }
      const updates: CallToolProgress[] = []
      const outcome = await callTool(crawl, {}, { secrets: [KEY], onToolProgress: (update) => updates.push(update) })
      await lateDone
      assert.equal(outcome, { status: 'succeeded', output: 'crawled' })
      assert.equal(updates, [
        { operationId: 'invocation-1/step-1/0', name: 'crawl', attempt: 1, index: 0, value: { page: 1, url: 'https://example.test/?key=[redacted]', at: '1970-01-01T00:00:00.000Z' } },
        { operationId: 'invocation-1/step-1/0', name: 'crawl', attempt: 2, index: 1, value: { page: 2, url: 'https://example.test/?key=[redacted]', at: '1970-01-01T00:00:00.000Z' } },
        { operationId: 'invocation-1/step-1/0', name: 'crawl', attempt: 2, index: 2, value: { lease: '[redacted]' } },
      ])
      const loud: ToolDefinition = { name: 'loud', execute: (_input, context) => context.progress({ rows: 'r'.repeat(70_000) }) }
      const refused = {
        status: 'failed',
        message: 'FactstateError: TOOL_PROGRESS_INVALID: context.progress takes at most 65,536 bytes of JSON, not 70,011: pass a summary (counts, a stage), not the data; nothing was passed on',
      }
      const heard: CallToolProgress[] = []
      assert.equal(await callTool(loud, {}, { onToolProgress: (update) => heard.push(update) }), refused)
      assert.equal(await callTool(loud, {}), refused, 'refused without a receiver too')
      assert.equal(heard, [])
      // A receiver that throws changes nothing, as in a run.
      const quiet: ToolDefinition = { name: 'quiet', execute: (_input, context) => (context.progress('one'), context.progress('two'), 'ok') }
      const seen: number[] = []
      const throwing = (update: CallToolProgress) => {
        seen.push(update.index)
        throw new Error('the test page went away')
      }
      assert.equal(await callTool(quiet, {}, { onToolProgress: throwing }), { status: 'succeeded', output: 'ok' })
      assert.equal(seen, [0, 1])
      const notAFunction = await rejectsWithCode(() => callTool(quiet, {}, { onToolProgress: 'log' as never }), 'TESTING_INVALID_OPTIONS', 'a receiver that is no function')
      assert.equal(notAFunction.details, { field: 'onToolProgress' })
      const misnamed = await rejectsWithCode(() => callTool(quiet, {}, { onProgress: () => undefined } as never), 'TESTING_INVALID_OPTIONS', 'an SDK\'s name for it')
      assert.match(misnamed.message, 'there is no option "onProgress": did you mean onToolProgress?')
    }, 10_000),
)

test("callTool quotes what a progress value's getter threw redacted of the secrets, as a run does", () =>
  withTimeout(async () => {
    const secret = 'pk_live_progress_0123456789abcdef'
    const thrown: string[] = []
    const outcome = await callTool(
      {
        name: 'vault',
        readOnly: true,
        execute: async (_input, context) => {
          try {
            context.progress({ get vault() { throw new Error(`vault said ${secret}`) } })
          } catch (error) {
            thrown.push((error as Error).message)
          }
          return 'ok'
        },
      },
      {},
      { secrets: [secret] },
    )
    assert.equal(outcome, { status: 'succeeded', output: 'ok' })
    assert.equal(thrown, ['TOOL_PROGRESS_INVALID: context.progress takes a value JSON can encode, and this one cannot be (vault said [redacted]); nothing was passed on'])
  }, 10_000),
)

test.run()
