/**
 * Model text and tool values that a fact could not hold byte for byte (a lone surrogate, an own
 * `__proto__` key from JSON.parse) never make a run fail half-way: arguments become invalid input
 * (never executed), outputs settle as failed, text is recorded well-formed; the run completes.
 */
import { runInNewContext } from 'node:vm'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { ToolDefinition } from '../index.js'
import { callTool } from '../testing/call-tool.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, only } from './support/engine-fixtures.js'
import { REPO_ROOT } from './support/log-fixtures.js'

/** A plain object of `members` members. */
const wide = (members: number): Record<string, number> => Object.fromEntries(Array.from({ length: members }, (_, index) => [`k${index}`, index]))

test(
  'arguments with an own __proto__ key are rejected as invalid input and never executed',
  engineTest(
    [answer.toolCalls([{ id: 'call-p', name: 'echo', arguments: '{"__proto__":{"admin":true},"value":1}' }]), answer.text('done')],
    {},
    async (h) => {
      const echo = countingTool()
      assert.equal(await h.run(h.input('proto', { tools: [echo] })), { status: 'completed' })
      assert.is(echo.calls.length, 0)
      const facts = await factsOf(h.log, 'invocation-proto')
      const [rejected] = only(facts, 'tool.rejected')
      assert.is(rejected?.reason, 'invalid_input')
      assert.is(rejected?.input, '{"__proto__":{"admin":true},"value":1}')
      assert.is(only(facts, 'tool.dispatched').length, 0)
      // The model is told why, and where.
      const told = (h.server.requests[1]?.body.messages as { role: string; content: string }[]).find((m) => m.role === 'tool')
      assert.is(told?.content, 'error: the arguments for "echo" hold what cannot be stored exactly (at the arguments themselves: an own "__proto__" key cannot be stored exactly); it was not run')
    },
  ),
)

test(
  'a tool output a fact cannot hold exactly settles failed and the run goes on',
  engineTest([answer.toolCalls([{ id: 'call-o', name: 'echo', arguments: {} }]), answer.text('done')], {}, async (h) => {
    const echo = countingTool('echo', async () => JSON.parse('{"__proto__":{"x":1}}'))
    assert.equal(await h.run(h.input('output', { tools: [echo] })), { status: 'completed' })
    assert.is(echo.calls.length, 1)
    const [settled] = only(await factsOf(h.log, 'invocation-output'), 'tool.settled')
    assert.is(settled?.outcome.status, 'failed')
  }),
)

test(
  'a tool that returns an async iterable or an iterator (an AI SDK streaming tool, a function*) settles failed saying so, not succeeded with {}; an array and a value with toJSON are recorded',
  engineTest(
    [answer.toolCalls([{ id: 'call-a', name: 'stream', arguments: {} }, { id: 'call-g', name: 'gen', arguments: {} }, { id: 'call-l', name: 'list', arguments: {} }, { id: 'call-j', name: 'own', arguments: {} }]), answer.text('done')],
    {},
    async (h) => {
      let bodies = 0
      // Returned as it is (the AI SDK's `async *execute`), and a generator as a promise's value.
      const stream: ToolDefinition = { name: 'stream', execute: () => (async function* () { bodies += 1; yield { part: 1 } })() }
      const gen = countingTool('gen', async () => (function* () { bodies += 1; yield 1 })())
      const list = countingTool('list', async () => [1, 2])
      const own = countingTool('own', async () => ({ toJSON: () => ({ kept: true }), async *[Symbol.asyncIterator]() { yield 1 } }))
      assert.equal(await h.run(h.input('iterables', { tools: [stream, gen, list, own] })), { status: 'completed' })
      assert.is(bodies, 0)
      const settled = only(await factsOf(h.log, 'invocation-iterables'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled.map((outcome) => outcome.status), ['failed', 'failed', 'succeeded', 'succeeded'])
      assert.match(settled[0]?.status === 'failed' ? settled[0].message : '', /^the tool returned an async iterable \(an async function\*, a stream\), which was not read/)
      // A generator a promise gave came of an execute that ran (what it did before has happened): told so, as for any result not recorded.
      assert.match(settled[1]?.status === 'failed' ? settled[1].message : '', /^the tool ran, but its result could not be recorded: it is an iterator \(a function\*\), not read .*; the call's effect has happened, so do not call the tool again to redo it$/)
      assert.equal(settled[2]?.status === 'succeeded' ? settled[2].output : undefined, [1, 2])
      assert.equal(settled[3]?.status === 'succeeded' ? settled[3].output : undefined, { kept: true })
      assert.equal(await callTool({ name: 'gen', execute: async function* () { yield 1 } }, {}), { status: 'failed', message: 'the tool returned an async iterable (an async function*, a stream), which was not read (JSON would record it as {}): iterate it in execute and return what it gives (its parts can go to context.progress)' })
    },
  ),
)

test(
  'a tool with effects whose execute ran and returned a stream (anywhere in its output) is told its effect happened, never a plain failure the model makes again; only an execute that is itself a generator (its body never ran) fails plainly',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-s', name: 'post', arguments: {} },
        { id: 'call-n', name: 'nested', arguments: {} },
        { id: 'call-g', name: 'streaming', arguments: {} },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      let effects = 0
      // A POST whose answer is streamed: the request was made, its body returned unread.
      const post = countingTool('post', async () => {
        effects += 1
        return new Response('{"id":1}').body
      })
      const nested = countingTool('nested', async () => {
        effects += 1
        return { sent: true, receipts: [1, 2].values() }
      })
      const streaming: ToolDefinition = { name: 'streaming', execute: async function* () { effects += 1; yield 1 } }
      assert.equal(await h.run(h.input('unread', { tools: [post, nested, streaming] })), { status: 'completed' })
      assert.is(effects, 2, 'post and nested ran; the generator never did')
      const messages = only(await factsOf(h.log, 'invocation-unread'), 'tool.settled').map((fact) => (fact.outcome.status === 'failed' ? fact.outcome.message : fact.outcome.status))
      const happened = "; the call's effect has happened, so do not call the tool again to redo it"
      const iterate = 'iterate it in execute and return what it gives (its parts can go to context.progress)'
      assert.equal(messages, [
        `the tool ran, but its result could not be recorded: it is an async iterable (an async function*, a stream), not read (JSON would record it as {}): ${iterate}${happened}`,
        `the tool ran, but its result could not be recorded: its member "receipts" is an iterator (a function*), not read (JSON would record it as {}): ${iterate}${happened}`,
        `the tool returned an async iterable (an async function*, a stream), which was not read (JSON would record it as {}): ${iterate}`,
      ])
      // A readOnly tool has no effect to tell of.
      assert.equal(await callTool({ name: 'lookup', readOnly: true, execute: async () => new Response('x').body }, {}), {
        status: 'failed',
        message: `the tool ran, but its result could not be recorded: it is an async iterable (an async function*, a stream), not read (JSON would record it as {}): ${iterate}`,
      })
    },
  ),
)

test(
  'a result that is or holds a Map, a Set or a Response (JSON would write each as {}, what it held lost) is a result that could not be recorded, saying what to return',
  engineTest(
    [answer.toolCalls([{ id: 'call-r', name: 'fetched', arguments: {} }, { id: 'call-m', name: 'indexed', arguments: {} }, { id: 'call-n', name: 'nested', arguments: {} }]), answer.text('done')],
    {},
    async (h) => {
      const fetched = countingTool('fetched', async () => new Response('{"id":2}'))
      const indexed = countingTool('indexed', async () => new Map([['order-1', 'refunded']]))
      const nested = countingTool('nested', async () => ({ sent: true, tags: new Set(['a']) }))
      assert.equal(await h.run(h.input('lost', { tools: [fetched, indexed, nested] })), { status: 'completed' })
      const messages = only(await factsOf(h.log, 'invocation-lost'), 'tool.settled').map((fact) => (fact.outcome.status === 'failed' ? fact.outcome.message : fact.outcome.status))
      const happened = "; the call's effect has happened, so do not call the tool again to redo it"
      assert.equal(messages, [
        `the tool ran, but its result could not be recorded: it is a Response, its body not read (JSON would record it as {}): return await response.json() (or .text()) instead${happened}`,
        `the tool ran, but its result could not be recorded: it is a Map, which JSON would record as {}: return Object.fromEntries(map) or [...map] instead${happened}`,
        `the tool ran, but its result could not be recorded: its member "tags" is a Set, which JSON would record as {}: return [...set] instead${happened}`,
      ])
      assert.equal(await callTool({ name: 'lookup', readOnly: true, execute: async () => new Set([1]) }, {}), {
        status: 'failed',
        message: 'the tool ran, but its result could not be recorded: it is a Set, which JSON would record as {}: return [...set] instead',
      })
      // One with its own toJSON is recorded as that makes it.
      class Index extends Map<string, number> {
        toJSON() {
          return Object.fromEntries(this)
        }
      }
      assert.equal(await callTool({ name: 'own', execute: async () => new Index([['a', 1]]) }, {}), { status: 'succeeded', output: { a: 1 } })
    },
  ),
)

/** A class whose data JSON does not write: a private field read through a getter on its prototype. */
class Balance {
  readonly #cents: number
  constructor(cents: number) {
    this.#cents = cents
  }
  get cents() {
    return this.#cents
  }
}

const HAPPENED = "; the call's effect has happened, so do not call the tool again to redo it"
const BASE64 = "return Buffer.from(bytes).toString('base64') instead"
/** What each tool returns, anywhere in its result, and what is recorded: the message of a result that could not be recorded (`failed`), or the output. */
const LEFT_OVER: [string, () => unknown, { failed: string } | { output: unknown }][] = [
  ['buffer', () => Buffer.from('hi'), { failed: `it is a Buffer, which JSON would record as {"type":"Buffer","data":[…]}, a number for each byte: return buffer.toString('base64') instead` }],
  ['buffers', () => ({ pages: [Buffer.from('p1')] }), { failed: `its member "0" is a Buffer, which JSON would record as {"type":"Buffer","data":[…]}, a number for each byte: return buffer.toString('base64') instead` }],
  ['bytes', () => new Uint8Array([1, 2]), { failed: `it is a Uint8Array, which JSON would record as an object of its bytes by index: ${BASE64}` }],
  ['floats', () => ({ embedding: new Float32Array([0.5]) }), { failed: 'its member "embedding" is a Float32Array, which JSON would record as an object of its elements by index: return Array.from(array) instead' }],
  ['arrayBuffer', () => ({ body: new Uint8Array([1]).buffer }), { failed: `its member "body" is an ArrayBuffer, which JSON would record as {}: return Buffer.from(arrayBuffer).toString('base64') instead` }],
  ['view', () => new DataView(new ArrayBuffer(2)), { failed: "it is a DataView, which JSON would record as {}: return its bytes as base64 text instead (Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64'))" }],
  ['weakMap', () => ({ cache: new WeakMap() }), { failed: 'its member "cache" is a WeakMap, which JSON would record as {} (its entries cannot be listed): return what it holds as a plain object or an array instead' }],
  ['weakSet', () => new WeakSet(), { failed: 'it is a WeakSet, which JSON would record as {} (its entries cannot be listed): return what it holds as a plain object or an array instead' }],
  ['promise', () => ({ sent: true, receipt: Promise.resolve('r-1') }), { failed: 'its member "receipt" is a Promise, which JSON would record as {}: await it in execute and return what it gives instead' }],
  ['getters', () => new Balance(1250), { failed: 'it is a Balance object with no members of its own, which JSON would record as {} (it writes neither getters nor private fields): return a plain object of what it holds instead' }],
  ['iteratorLike', () => ({ rows: { next: () => ({ done: true, value: undefined }) } }), {
    failed: 'its member "rows" is an iterator (an object with a next method), not read (JSON would record it as {}): iterate it in execute and return what it gives (its parts can go to context.progress)',
  }],
  // An Error returned (not thrown) is recorded as its name, message and own members, not as {}.
  ['error', () => new Error('card declined'), { output: { name: 'Error', message: 'card declined' } }],
  ['otherRealmError', () => ({ error: runInNewContext("Object.assign(new TypeError('no route'), { code: 'E_ROUTE' })") }), { output: { error: { name: 'TypeError', message: 'no route', code: 'E_ROUTE' } } }],
  ['nestedError', () => ({ charged: false, error: Object.assign(new RangeError('over the limit'), { code: 'E_LIMIT' }) }), { output: { charged: false, error: { name: 'RangeError', message: 'over the limit', code: 'E_LIMIT' } } }],
  // Recorded as before: plain objects, empty or shaped like a Buffer's JSON, and an object with data beside a next method.
  ['plain', () => ({ empty: {}, bare: Object.create(null), shaped: { type: 'Buffer', data: [1] }, page: { next: () => 2, items: [1] } }), { output: { empty: {}, bare: {}, shaped: { type: 'Buffer', data: [1] }, page: { items: [1] } } }],
  // A boxed primitive is written by JSON as the primitive (an empty String object has no members of its own).
  ['boxed', () => ({ count: Object(3), empty: Object(''), flag: Object(false) }), { output: { count: 3, empty: '', flag: false } }],
]

test(
  'a result that is or holds binary data, a WeakMap, a WeakSet, a Promise, an object of a class with no members of its own or an object with only a next method is a result that could not be recorded, saying what to return, not {} or a number for each byte; an Error is recorded as its name and message; callTool says the same',
  engineTest([answer.toolCalls(LEFT_OVER.map(([name], index) => ({ id: `call-${index}`, name, arguments: {} }))), answer.text('done')], {}, async (h) => {
    const tools = LEFT_OVER.map(([name, make]) => countingTool(name, async () => make()))
    assert.equal(await h.run(h.input('left', { tools })), { status: 'completed' })
    assert.equal(tools.map((tool) => tool.calls.length), LEFT_OVER.map(() => 1))
    const settled = only(await factsOf(h.log, 'invocation-left'), 'tool.settled')
    for (const [index, [name, make, expected]] of LEFT_OVER.entries()) {
      const outcome = settled.find((fact) => fact.operationId === `invocation-left/step-1/${index}`)?.outcome
      const wanted = 'failed' in expected ? { status: 'failed', message: `the tool ran, but its result could not be recorded: ${expected.failed}${HAPPENED}` } : { status: 'succeeded', output: expected.output }
      assert.equal(outcome, wanted, name)
      assert.equal(await callTool({ name, execute: async () => make() }, {}), wanted, `callTool: ${name}`)
    }
    // A readOnly tool is not told of an effect.
    assert.equal(await callTool({ name: 'read', readOnly: true, execute: async () => new Uint8Array([1]) }, {}), {
      status: 'failed',
      message: `the tool ran, but its result could not be recorded: it is a Uint8Array, which JSON would record as an object of its bytes by index: ${BASE64}`,
    })
  }),
)

test(
  'a tool output cut mid-character (a lone surrogate, in a value or a key) is recorded with U+FFFD, as model text is; two keys that would merge settle failed',
  engineTest(
    [answer.toolCalls([{ id: 'call-t', name: 'read', arguments: {} }, { id: 'call-m', name: 'merge', arguments: {} }]), answer.text('done')],
    {},
    async (h) => {
      const text = 'smile \u{1F600} and more'
      const read = countingTool('read', async () => ({ content: text.slice(0, 7), ['k\ud83d']: [text.slice(0, 7)] }))
      const merge = countingTool('merge', async () => ({ 'a\ud800': 1, 'a\udc00': 2 }))
      assert.equal(await h.run(h.input('cut', { tools: [read, merge] })), { status: 'completed' })
      const settled = only(await factsOf(h.log, 'invocation-cut'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled[0], { status: 'succeeded', output: { content: 'smile \ufffd', 'k\ufffd': ['smile \ufffd'] } })
      assert.is(settled[1]?.status, 'failed')
      assert.match(settled[1]?.status === 'failed' ? settled[1].message : '', /^the tool ran, but its result could not be recorded: a fact cannot hold it exactly: .*lone surrogate/)
      assert.is(merge.calls.length, 1)
    },
  ),
)

test(
  'a tool output with more members than msgpack holds settles failed, and arguments with as many are invalid input',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-w', name: 'echo', arguments: {} }]),
      answer.toolCalls([{ id: 'call-a', name: 'echo', arguments: JSON.stringify(wide(65_536)) }]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const echo = countingTool('echo', async () => wide(65_536))
      assert.equal(await h.run(h.input('wide', { tools: [echo] })), { status: 'completed' })
      assert.is(echo.calls.length, 1)
      const facts = await factsOf(h.log, 'invocation-wide')
      const [settled] = only(facts, 'tool.settled')
      assert.is(settled?.outcome.status, 'failed')
      assert.match(settled?.outcome.status === 'failed' ? settled.outcome.message : '', /more than 65535 members/)
      const [rejected] = only(facts, 'tool.rejected')
      assert.is(rejected?.reason, 'invalid_input')
      assert.is(only(facts, 'tool.dispatched').length, 1)
    },
  ),
)

test(
  'a cyclic input schema is refused naming where the cycle closes, not by a path that goes round it 64 times',
  engineTest([], {}, async (h) => {
    const schema: Record<string, unknown> = { type: 'object', properties: { items: { type: 'array', items: {} } } }
    ;((schema.properties as Record<string, Record<string, unknown>>).items as Record<string, unknown>).items = schema
    const refused = await h.engine.start(h.input('cyclic-schema', { tools: [{ ...countingTool('x'), inputSchema: schema }] })).then(
      () => undefined,
      (error: { code?: string; message?: string; details?: unknown }) => error,
    )
    assert.is(refused?.code, 'RUN_INVALID_INPUT')
    assert.is(refused?.message, 'RUN_INVALID_INPUT: tools.0.inputSchema.properties.items.items: refers back to tools.0.inputSchema (a cycle: a fact holds JSON data, which has none)')
    assert.equal(refused?.details, { fields: ['tools.0'] })
    assert.is((await h.log.head()).highWater, 0, 'nothing was written')
  }),
)

test('a value too deep whose members share objects (no cycle) is refused for its depth in a walk that visits each object once; a cycle below shared objects is still named', () => {
  // Run in a child with a deadline: a search that walked every path (2^40 here) would never return,
  // and synchronous work cannot be bounded from inside its own process.
  const script = `
    import { storageProblem } from ${JSON.stringify(pathToFileURL(join(REPO_ROOT, 'store', 'encoding.ts')).href)}
    let shared = { leaf: true }
    for (let level = 0; level < 90; level += 1) shared = level < 50 ? { a: shared } : { a: shared, b: shared }
    const cyclic = { name: 'root' }
    let below = cyclic
    for (let level = 0; level < 30; level += 1) below = { a: below, b: below }
    cyclic.child = { deep: below }
    let outer = cyclic
    for (let level = 0; level < 70; level += 1) outer = { wrap: outer }
    console.log(JSON.stringify([storageProblem(shared), storageProblem(outer)]))
  `
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000 })
  assert.is(child.status, 0, child.stderr || `the search did not finish (${String(child.signal)})`)
  const [deep, cycle] = JSON.parse(child.stdout) as [string, string]
  assert.match(deep, /^\(value\)(\.a)+: nested deeper than 64 levels$/)
  assert.match(cycle, /^\(value\)(\.wrap){70}\.child\.deep(\.a){30}: refers back to \(value\)(\.wrap){70} \(a cycle/)
})

test(
  'model text with a lone surrogate is recorded well-formed',
  engineTest([answer.text('half a pair: \ud83d end')], {}, async (h) => {
    assert.equal(await h.run(h.input('text', { tools: [] })), { status: 'completed' })
    const [completed] = only(await factsOf(h.log, 'invocation-text'), 'model.completed')
    assert.is(completed?.output.text, 'half a pair: \ufffd end')
  }),
)

test(
  'a tool that throws a value with no prototype, or an Error whose message has a lone surrogate, settles failed with a message a fact can hold; the session owes no reconciliation',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-a', name: 'echo', arguments: {} }]),
      answer.text('done'),
      answer.toolCalls([{ id: 'call-b', name: 'echo', arguments: {} }]),
      answer.text('done'),
      answer.text('next'),
    ],
    {},
    async (h) => {
      const bare = countingTool('echo', async () => {
        throw Object.create(null)
      })
      const broken = countingTool('echo', async () => {
        throw new Error('bad \ud800 message')
      })
      for (const [name, tool, message] of [
        ['bare', bare, '{}'],
        ['broken', broken, 'bad \ufffd message'],
      ] as const) {
        assert.equal(await h.run(h.input(name, { session: 'shared', tools: [tool] })), { status: 'completed' }, name)
        assert.is(tool.calls.length, 1, `${name}: it ran once`)
        const [settled] = only(await factsOf(h.log, `invocation-${name}`), 'tool.settled')
        assert.equal(settled?.outcome, { status: 'failed', message }, name)
      }
      // Both effects are known to have happened: nothing for a next message to acknowledge.
      assert.equal(await h.run(h.input('after', { session: 'shared' })), { status: 'completed' })
    },
  ),
)

test(
  'arguments that parse to a number JSON cannot write (1e400 is Infinity) are rejected as invalid input and never executed',
  engineTest([answer.toolCalls([{ id: 'call-i', name: 'echo', arguments: '{"n":1e400,"deep":[1,{"m":-1e999}]}' }]), answer.text('done')], {}, async (h) => {
    const echo = countingTool()
    assert.equal(await h.run(h.input('infinite', { tools: [echo] })), { status: 'completed' })
    assert.is(echo.calls.length, 0)
    const facts = await factsOf(h.log, 'invocation-infinite')
    const [rejected] = only(facts, 'tool.rejected')
    assert.is(rejected?.reason, 'invalid_input')
    assert.is(rejected?.input, '{"n":1e400,"deep":[1,{"m":-1e999}]}', 'kept as the text the model sent')
    const told = (h.server.requests[1]?.body.messages as { role: string; content: string }[]).find((m) => m.role === 'tool')
    assert.is(told?.content, `error: the arguments for "echo" hold a number beyond a double's range (such as 1e400), which JSON cannot write back; it was not run`)
  }),
)

test(
  'a number literal JSON.parse would not take exactly (an integer past 2^53 − 1, digits a double drops) is invalid input, the model told which and why; 0.1, 1.50 and 0.1e1 run as written',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-id', name: 'echo', arguments: '{"orderId": 12345678901234567891}' },
        { id: 'call-safe', name: 'echo', arguments: '{"orderId": 9007199254740991, "rate": 0.1, "price": 1.50, "n": 0.1e1, "big": 1e20}' },
        { id: 'call-digits', name: 'echo', arguments: '{"items": [{"rate": 0.30000000000000000001}]}' },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const echo = countingTool()
      assert.equal(await h.run(h.input('inexact', { tools: [echo] })), { status: 'completed' })
      assert.equal(
        echo.calls.map((call) => call.input),
        [{ orderId: 9007199254740991, rate: 0.1, price: 1.5, n: 1, big: 1e20 }],
      )
      const rejected = only(await factsOf(h.log, 'invocation-inexact'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => [fact.callId, fact.reason, fact.input]),
        [
          ['call-id', 'invalid_input', '{"orderId": 12345678901234567891}'],
          ['call-digits', 'invalid_input', '{"items": [{"rate": 0.30000000000000000001}]}'],
        ],
      )
      const told = (h.server.requests[1]?.body.messages as { role: string; content: string; tool_call_id?: string }[]).filter((m) => m.role === 'tool')
      assert.equal(told.map((m) => m.content), [
        'error: the arguments for "echo" hold a number that would not reach the tool exactly (at orderId: 12345678901234567891 is an integer beyond ±9,007,199,254,740,991 (2^53 − 1), past which JSON numbers are not read exactly, and it would be read as 12345678901234567000; send it as a string ("12345678901234567891")); it was not run',
        JSON.stringify({ orderId: 9007199254740991, rate: 0.1, price: 1.5, n: 1, big: 1e20 }),
        'error: the arguments for "echo" hold a number that would not reach the tool exactly (at items/0/rate: 0.30000000000000000001 would be read as 0.3, the nearest double; send it as a string ("0.30000000000000000001"), or with fewer digits); it was not run',
      ])
      // callTool says what the engine told the model.
      assert.equal(await callTool(countingTool(), '{"orderId": 12345678901234567891}'), {
        status: 'rejected',
        reason: 'invalid_input',
        message: `the arguments ${told[0]?.content.replace(/^error: the arguments for "echo" /, '').replace(/; it was not run$/, '')}`,
      })
    },
  ),
)

/** Arguments whose value under "v" is `levels` arrays one inside another. */
const nestedArguments = (levels: number): string => `{"v":${'['.repeat(levels)}${']'.repeat(levels)}}`

test(
  'arguments nested more than 62 levels below the object are rejected as invalid input, and the model is told why; 62 levels run',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-62', name: 'echo', arguments: nestedArguments(62) },
        { id: 'call-63', name: 'echo', arguments: nestedArguments(63) },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const echo = countingTool()
      assert.equal(await h.run(h.input('nested', { tools: [echo] })), { status: 'completed' })
      assert.equal(
        echo.calls.map((call) => JSON.stringify(call.input)),
        [nestedArguments(62)],
      )
      const [rejected, ...more] = only(await factsOf(h.log, 'invocation-nested'), 'tool.rejected')
      assert.equal([rejected?.callId, rejected?.reason, rejected?.input, more.length], ['call-63', 'invalid_input', nestedArguments(63), 0])
      const told = (h.server.requests[1]?.body.messages as { role: string; content: string; tool_call_id?: string }[]).find((m) => m.role === 'tool' && m.tool_call_id === 'call-63')
      // Where, cut short: 62 levels of "/0".
      assert.is(told?.content, `error: the arguments for "echo" are nested more than 62 levels deep (at v${'/0'.repeat(29)}/…); it was not run`)
    },
  ),
)

test.run()
