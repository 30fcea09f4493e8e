/**
 * Tool input checked against the tool's `inputSchema` (JSON Schema 2020-12) before the call is
 * dispatched: a call that does not match is `tool.rejected{invalid_input}` with a `message` saying
 * what is wrong, never runs (nor reaches an approver), and the model is told, so it can call again.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { z } from 'zod'
import type { ToolDefinition } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting, typesOf } from './support/engine-fixtures.js'

const REFUND_SCHEMA = {
  type: 'object',
  properties: { order: { type: 'string', pattern: '^C-[0-9]+$' }, cents: { type: 'integer', minimum: 1 } },
  required: ['order', 'cents'],
  additionalProperties: false,
}
/**
 * `count` definitions, each with `$recursiveAnchor: true` and two references on to the next ones, each
 * the property of the root: each definition is reached under every anchor (and with
 * `recursiveRef`, each holds a `$recursiveRef: '#'`, where the anchor matters).
 */
function anchoredDefinitions(count: number, recursiveRef: boolean): object {
  const $defs: Record<string, object> = {}
  const properties: Record<string, object> = {}
  for (let i = 0; i < count; i++) {
    const next = { x: { $ref: `#/$defs/d${(i + 1) % count}` }, y: { $ref: `#/$defs/d${(i + 2) % count}` } }
    $defs[`d${i}`] = { $recursiveAnchor: true, properties: recursiveRef ? { ...next, z: { $recursiveRef: '#' } } : next }
    properties[`p${i}`] = { $ref: `#/$defs/d${i}` }
  }
  return { type: 'object', properties, $defs }
}

const refund = (extra: Partial<ToolDefinition> = {}) => ({ ...countingTool('refund'), inputSchema: structuredClone(REFUND_SCHEMA), ...extra })

test(
  'a call that does not match the schema is rejected with what is wrong and never runs; the model is told and calls again correctly',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-bad', name: 'refund', arguments: { order: 'order 7', cents: '12.5', note: 'asap' } }]),
      answer.toolCalls([{ id: 'call-good', name: 'refund', arguments: { order: 'C-7', cents: 1250 } }]),
      answer.text('refunded 12.50'),
    ],
    {},
    async (h) => {
      const tool = refund()
      assert.equal(await h.run(h.input('schema', { tools: [tool] })), { status: 'completed' })
      assert.equal(
        tool.calls.map((call) => call.input),
        [{ order: 'C-7', cents: 1250 }],
        'only the call that matches ran',
      )
      const facts = await factsOf(h.log, 'invocation-schema')
      const [rejected] = only(facts, 'tool.rejected')
      assert.equal(
        [rejected?.callId, rejected?.reason, rejected?.input],
        ['call-bad', 'invalid_input', { order: 'order 7', cents: '12.5', note: 'asap' }],
      )
      assert.is(
        rejected?.message,
        'order: String does not match pattern "^C-[0-9]+$"; cents: Instance type "string" is invalid. Expected "integer"; the input: Property "note" does not match additional properties schema.',
      )
      assert.equal(
        only(facts, 'tool.dispatched').map((fact) => fact.callId),
        ['call-good'],
      )
      const told = messagesOf(h.server.requests[1]?.body).find((message) => message.role === 'tool')
      // The schema's message ends with a full stop, the clause before "; it was not run" does not.
      assert.is(
        told?.content,
        'error: the arguments for "refund" do not match its input schema: order: String does not match pattern "^C-[0-9]+$"; cents: Instance type "string" is invalid. Expected "integer"; the input: Property "note" does not match additional properties schema; it was not run',
      )
    },
  ),
)

/** A document of two kinds of node, both with `children` (as a discriminated union writes it), nested `depth` levels. */
const documentOf = (depth: number): object => {
  let node: object = { kind: 'text', children: [] }
  for (let level = 0; level < depth; level++) node = { kind: 'section', children: [node] }
  return { doc: node }
}
const DOCUMENT_SCHEMA = {
  type: 'object',
  properties: { doc: { $ref: '#/$defs/node' } },
  required: ['doc'],
  $defs: {
    node: {
      oneOf: ['section', 'text'].map((kind) => ({ type: 'object', properties: { kind: { const: kind }, children: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['kind'] })),
    },
  },
}

test(
  'an input whose check would apply its schema too many times is rejected before the validator starts (each nested part checked against every branch)',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-flat', name: 'write', arguments: documentOf(5) },
        // Every node is checked against both kinds, and so are its children: 2^17 checks of the innermost.
        { id: 'call-deep', name: 'write', arguments: documentOf(17) },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const tool = { ...countingTool('write'), inputSchema: DOCUMENT_SCHEMA }
      assert.equal(await h.run(h.input('document', { tools: [tool] })), { status: 'completed' })
      assert.equal(
        tool.calls.map((call) => call.input),
        [documentOf(5)],
      )
      const rejected = only(await factsOf(h.log, 'invocation-document'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => [fact.callId, fact.reason, fact.message]),
        [
          [
            'call-deep',
            'invalid_input',
            'the input: too costly to check against its schema, more than 500,000 steps (each nested part is checked against every branch of an anyOf or oneOf that reaches it, so nesting multiplies them; uniqueItems compares every item with every other): a smaller or less deeply nested input can be checked',
          ],
        ],
      )
    },
  ),
)

/** `{ [key]: { [key]: … } }`, `depth` levels, around `inner`. */
const chainOf = (key: string, depth: number, inner: object = {}): object => {
  let node = inner
  for (let level = 0; level < depth; level++) node = { [key]: node }
  return node
}

/** Nodes of kind "b", each the `children` of the one above, `depth` levels, around one of kind "a". */
const taggedOf = (depth: number): object => {
  let node: object = { kind: 'a' }
  for (let level = 0; level < depth; level++) node = { kind: 'b', children: node }
  return node
}

test(
  'the bound counts what the validator does: then or else as if decides, additionalProperties for the members left, true and false as schemas, uniqueItems as comparisons; a stack overflow is the input\'s',
  engineTest(
    [
      answer.toolCalls([
        // A union tagged by if/then, 30 levels deep: the validator takes one branch per level.
        { id: 'call-tagged', name: 'tagged', arguments: { doc: taggedOf(30) } },
        { id: 'call-else', name: 'either', arguments: { doc: chainOf('c', 40) } },
        { id: 'call-more', name: 'more', arguments: { doc: chainOf('child', 40) } },
        // 2,000 items each checked against 2,000 `true`s: 4,000,000 schemas.
        { id: 'call-true', name: 'trues', arguments: { a: Array.from({ length: 2000 }, () => 1) } },
        // 20,000 objects compared each with each (~13 s); 2,000 numbers (~16 ms) are checked.
        { id: 'call-unique', name: 'unique', arguments: { a: Array.from({ length: 20_000 }, (_, i) => ({ i })) } },
        { id: 'call-unique-numbers', name: 'unique', arguments: { a: Array.from({ length: 2000 }, (_, i) => i) } },
        // 2^15 errors, more than the validator's list of them holds.
        { id: 'call-errors', name: 'errors', arguments: { doc: chainOf('c', 15) } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const tagged = {
        ...countingTool('tagged'),
        inputSchema: {
          type: 'object',
          properties: { doc: { $ref: '#/$defs/node' } },
          $defs: {
            node: {
              type: 'object',
              properties: { kind: { enum: ['a', 'b', 'c'] } },
              required: ['kind'],
              allOf: ['a', 'b', 'c'].map((kind) => ({ if: { properties: { kind: { const: kind } }, required: ['kind'] }, then: { properties: { children: { $ref: '#/$defs/node' } } } })),
            },
          },
        },
      }
      const either = {
        ...countingTool('either'),
        inputSchema: {
          type: 'object',
          properties: { doc: { $ref: '#/$defs/n' } },
          $defs: { n: { if: { required: ['x'] }, then: { properties: { c: { $ref: '#/$defs/n' } } }, else: { properties: { c: { $ref: '#/$defs/n' } } } } },
        },
      }
      const more = { ...countingTool('more'), inputSchema: { type: 'object', properties: { doc: { $ref: '#/$defs/n' } }, $defs: { n: { properties: { child: { $ref: '#/$defs/n' } }, additionalProperties: { $ref: '#/$defs/n' } } } } }
      const trues = { ...countingTool('trues'), inputSchema: { type: 'object', properties: { a: { items: { anyOf: Array.from({ length: 2000 }, () => true) } } } } }
      const unique = { ...countingTool('unique'), inputSchema: { type: 'object', properties: { a: { uniqueItems: true } } } }
      const errors = {
        ...countingTool('errors'),
        inputSchema: { type: 'object', properties: { doc: { $ref: '#/$defs/n' } }, $defs: { n: { properties: { c: { allOf: [{ $ref: '#/$defs/n' }, { $ref: '#/$defs/n' }] } }, required: ['x'] } } },
      }
      assert.equal(await h.run(h.input('bounds', { tools: [tagged, either, more, trues, unique, errors] })), { status: 'completed' })
      assert.equal(
        [tagged, either, more, trues, unique, errors].map((tool) => tool.calls.length),
        [1, 1, 1, 0, 1, 0],
      )
      const rejected = only(await factsOf(h.log, 'invocation-bounds'), 'tool.rejected')
      const costly = /^the input: too costly to check against its schema, more than 500,000 steps /
      assert.equal(
        rejected.map((fact) => fact.callId),
        ['call-true', 'call-unique', 'call-errors'],
      )
      assert.match(rejected[0]?.message ?? '', costly)
      assert.match(rejected[1]?.message ?? '', costly)
      assert.is(rejected[2]?.message, 'the input: too deeply nested or with too many errors to be checked against its schema (Maximum call stack size exceeded): a smaller input can be checked')
    },
  ),
)

test(
  'validateInput: false sends the schema but runs the call as the model made it',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { order: 7 } }]), answer.text('done')], {}, async (h) => {
    const tool = refund({ validateInput: false })
    assert.equal(await h.run(h.input('unchecked', { tools: [tool] })), { status: 'completed' })
    assert.equal(
      tool.calls.map((call) => call.input),
      [{ order: 7 }],
    )
    assert.equal(only(await factsOf(h.log, 'invocation-unchecked'), 'tool.rejected'), [])
    const sent = (h.server.requests[0]?.body as { tools: { function: { parameters: unknown } }[] }).tools
    assert.equal(sent[0]?.function.parameters, REFUND_SCHEMA, 'the model is shown the schema all the same')
  }),
)

test(
  'a call that does not match is rejected before its approver is asked',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { order: 'C-1' } }]), answer.text('done')], {}, async (h) => {
    const tool = refund({ needsApproval: true })
    let asked = 0
    const outcome = await h.run(h.input('unasked', { tools: [tool] }), {
      onApproval: () => {
        asked += 1
        return { approved: true }
      },
    })
    assert.equal(outcome, { status: 'completed' })
    assert.is(asked, 0)
    assert.is(tool.calls.length, 0)
    const [rejected] = only(await factsOf(h.log, 'invocation-unasked'), 'tool.rejected')
    assert.equal([rejected?.reason, rejected?.message, rejected?.approval], ['invalid_input', 'the input: Instance does not have required property "cents".', undefined])
  }),
)

test(
  'a needsApproval predicate is not asked about an input the schema refuses; it decides on the valid one',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-bad', name: 'refund', arguments: { order: 'C-1' } }]),
      answer.toolCalls([{ id: 'call-good', name: 'refund', arguments: { order: 'C-1', cents: 500 } }]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const judged: unknown[] = []
      const tool = refund({
        needsApproval: (input) => {
          judged.push(input)
          return (input as { cents: number }).cents > 100
        },
      })
      const decided: string[] = []
      const outcome = await h.run(h.input('predicate', { tools: [tool] }), {
        onApproval: (request) => {
          decided.push(request.callId)
          return { approved: true }
        },
      })
      assert.equal(outcome, { status: 'completed' })
      assert.equal(judged, [{ order: 'C-1', cents: 500 }], 'the predicate saw only the input that matched the schema')
      assert.equal(decided, ['call-good'])
      assert.equal(
        tool.calls.map((call) => call.input),
        [{ order: 'C-1', cents: 500 }],
      )
    },
  ),
)

test(
  'under toolConcurrency 3, an answer mixing calls that match and calls that do not: the matching ones run side by side, the others are rejected, each result in its call\'s place',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-1', name: 'refund', arguments: { order: 'C-1', cents: 1 } },
        { id: 'call-2', name: 'refund', arguments: { order: 'nope', cents: 2 } },
        { id: 'call-3', name: 'refund', arguments: { order: 'C-3', cents: 3 } },
        { id: 'call-4', name: 'refund', arguments: { cents: 4 } },
        { id: 'call-5', name: 'refund', arguments: { order: 'C-5', cents: 5 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      let running = 0
      let most = 0
      const tool = {
        ...countingTool('refund', async (input) => {
          running += 1
          most = Math.max(most, running)
          await new Promise((resolve) => setTimeout(resolve, 40))
          running -= 1
          return { refunded: (input as { cents: number }).cents }
        }),
        inputSchema: structuredClone(REFUND_SCHEMA),
      }
      assert.equal(await h.run({ ...h.input('mixed', { tools: [tool] }), toolConcurrency: 3 }), { status: 'completed' })
      assert.equal(
        tool.calls.map((call) => (call.input as { order: string }).order).sort(),
        ['C-1', 'C-3', 'C-5'],
      )
      assert.is(most, 3, 'the three that match ran at once')
      const facts = await factsOf(h.log, 'invocation-mixed')
      assert.equal(
        only(facts, 'tool.rejected').map((fact) => [fact.callId, fact.reason]),
        [
          ['call-2', 'invalid_input'],
          ['call-4', 'invalid_input'],
        ],
      )
      assert.is(only(facts, 'tool.settled').length, 3)
      const sent = messagesOf(h.server.requests[1]?.body).filter((message) => message.role === 'tool')
      assert.equal(
        sent.map((message) => message.tool_call_id),
        ['call-1', 'call-2', 'call-3', 'call-4', 'call-5'],
        'the model gets every result in the order it made the calls',
      )
      assert.match(sent[1]?.content ?? '', /order: String does not match pattern/)
      assert.match(sent[3]?.content ?? '', /required property "cents"|required property "order"/)
      assert.is(sent[4]?.content, '{"refunded":5}')
    },
  ),
)

test(
  'the schema is checked as the model was shown it: the caller changing its object after admission changes neither, and the object gets no marks',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { order: 'C-2', cents: 5 } }]), answer.text('done')], {}, async (h) => {
    const tool = refund()
    const schema = tool.inputSchema as typeof REFUND_SCHEMA
    const running = await h.start(h.input('copied', { tools: [tool] }))
    schema.properties.cents.minimum = 100
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(tool.calls.length, 1, 'checked against the schema as admitted (minimum 1)')
    assert.equal(Object.getOwnPropertyNames(schema).sort(), Object.keys(REFUND_SCHEMA).sort(), 'the validator marked its own copy, not the caller\'s')
  }),
)

test(
  'a schema that cannot be used, anywhere in it, refuses the run (RUN_INVALID_INPUT naming the tool and where), and nothing is written',
  engineTest([answer.text('done'), answer.text('done')], {}, async (h) => {
    const cases: [string, object, RegExp][] = [
      ['top', { $ref: '#/$defs/missing' }, /\$ref "#\/\$defs\/missing" at # leads to no schema/],
      // Reached only by the inputs that take the second branch: refused at admission all the same.
      [
        'nested',
        { type: 'object', properties: { order: { anyOf: [{ type: 'string' }, { $ref: '#/$defs/order' }] } } },
        /\$ref "#\/\$defs\/order" at #\/properties\/order\/anyOf\/1 leads to no schema/,
      ],
      ['remote', { type: 'object', properties: { order: { $ref: 'https://example.com/order.json' } } }, /leads to no schema \(a reference must point inside the schema: none is fetched\)/],
      ['pattern', { type: 'object', properties: { order: { type: 'string', pattern: '([' } } }, /the pattern "\(\[" at #\/properties\/order\/pattern is not a regular expression/],
      ['keys', { type: 'object', patternProperties: { '^a(': { type: 'string' } } }, /the pattern "\^a\(" at #\/patternProperties is not a regular expression/],
      // A definition a reference uses is checked where it is, also through a chain of references.
      [
        'chained',
        { type: 'object', properties: { order: { $ref: '#/$defs/order' } }, $defs: { order: { $ref: '#/$defs/code' }, code: { type: 'string', pattern: 'C-(' } } },
        /the pattern "C-\(" at #\/\$defs\/code\/pattern is not a regular expression/,
      ],
      // `$recursiveRef: '#'` is applied as the schema of its base URI: that one is checked too.
      [
        'recursive',
        {
          type: 'object',
          properties: { a: { $ref: 'https://x.test/r#/properties/x' } },
          $defs: { r: { $id: 'https://x.test/r', pattern: '(', properties: { x: { properties: { y: { $recursiveRef: '#' } } } } } },
        },
        /the pattern "\(" at #\/\$defs\/r\/pattern is not a regular expression/,
      ],
      ['dependencies', { type: 'object', dependencies: { order: { properties: { cents: { $ref: '#/$defs/cents' } } } } }, /\$ref "#\/\$defs\/cents" at #\/dependencies\/order\/properties\/cents leads to no schema/],
      // A reference may lead under a keyword the validator does not know: named where it is.
      ['vendor', { type: 'object', properties: { order: { $ref: '#/x-shared/order' } }, 'x-shared': { order: { type: 'string', pattern: 'C-(' } } }, /the pattern "C-\(" at #\/x-shared\/order\/pattern is not a regular expression/],
      // Which the validator skips: that part of the input would go unchecked.
      ['dynamic', { type: 'object', properties: { order: { $dynamicRef: '#order' } }, $defs: { order: { $dynamicAnchor: 'order', type: 'string' } } }, /\$dynamicRef at #\/properties\/order is not applied by the validator/],
    ]
    for (const [name, inputSchema, message] of cases) {
      const tool = refund({ inputSchema })
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(h.input(name, { tools: [countingTool('echo'), tool] })), 'RUN_INVALID_INPUT', name)
      assert.equal(error.details?.fields, ['tools.1.inputSchema'], name)
      assert.match(error.message, /^RUN_INVALID_INPUT: tools\.1\.inputSchema: the schema of tool refund cannot be used to check its input: /, name)
      assert.match(error.message, message, name)
      assert.not.match(error.message, /\n|cfworker/, `${name}: one line, no validator internals`)
      assert.equal(await typesOf(h.log, `invocation-${name}`), [], name)
    }
    // The same schema with the reference it names, or with validateInput: false, is admitted.
    const fixed = refund({ inputSchema: { ...(cases[1]?.[1] as object), $defs: { order: { type: 'integer' } } } })
    assert.equal(await h.run(h.input('fixed', { tools: [fixed] })), { status: 'completed' })
    assert.equal(await h.run(h.input('unchecked', { tools: [refund({ inputSchema: cases[0]?.[1] as object, validateInput: false })] })), { status: 'completed' })
  }),
)

test(
  'a schema that is no JSON Schema is refused when the run is admitted, each fault named where it is, and nothing is written',
  // One answer for each schema admitted at the end.
  engineTest(Array.from({ length: 9 }, () => answer.text('done')), {}, async (h) => {
    const cases: [string, object, RegExp][] = [
      // The validator would walk the array by index and check a member "0" (every other input passed unchecked).
      ['properties', { type: 'object', properties: [{ type: 'string' }] }, /it is not a JSON Schema: #\/properties: Instance type "array" is invalid\. Expected "object"\.$/],
      ['dependent', { type: 'object', dependentSchemas: [{ required: ['a'] }] }, /#\/dependentSchemas: Instance type "array" is invalid/],
      // Every call would fail ("Expected \"strin\"").
      ['type', { type: 'object', properties: { to: { type: 'strin' } } }, /#\/properties\/to\/type: Instance does not match any of \["array","boolean","integer","null","number","object","string"\]\.$/],
      ['required', { type: 'object', required: 'to' }, /#\/required: Instance type "string" is invalid\. Expected "array"\./],
      // The validator would throw at every call ("$allOf.entries is not a function").
      ['allOf', { allOf: { type: 'object' } }, /#\/allOf: Instance type "object" is invalid\. Expected "array"\./],
      ['empty', { anyOf: [] }, /#\/anyOf: Array has too few items \(0 < 1\)\./],
      ['not', { type: 'object', not: 5 }, /#\/not: Instance type "number" is invalid\. Expected "object", "boolean"\./],
      ['bound', { type: 'object', properties: { to: { type: 'string', minLength: -1, maxLength: 2.5 } } }, /#\/properties\/to\/maxLength: Instance type "number" is invalid\. Expected "integer"; #\/properties\/to\/minLength: -1 is less than 0\./],
      // OpenAPI 3.0's form, which the validator would read as a bound of `true` (1).
      [
        'exclusive',
        { type: 'object', properties: { cents: { type: 'number', minimum: 0, exclusiveMinimum: true } } },
        /#\/properties\/cents\/exclusiveMinimum: Instance type "boolean" is invalid\. Expected "number" \(the bound itself, as from draft 6 on: exclusiveMinimum: 0, not minimum: 0 with exclusiveMinimum: true\)\.$/,
      ],
      ['pattern', { type: 'object', properties: { to: { type: 'string', pattern: 5 } } }, /#\/properties\/to\/pattern: Instance type "number" is invalid\. Expected "string"\./],
      // A list given as `type` is told by its own fault, not by the names a single type may have.
      ['no-types', { type: 'object', properties: { to: { type: [] } } }, /#\/properties\/to\/type: Array has too few items \(0 < 1\)\.$/],
      ['repeated', { type: ['object', 'object'] }, /^[^;]*#\/type: Duplicate items at indexes 0 and 1\.$/],
      ['member', { type: 'object', properties: { to: { type: ['strin'] } } }, /: it is not a JSON Schema: #\/properties\/to\/type\/0: Instance does not match any of \["array",[^;]*\]\.$/],
      [
        'exclusive-max',
        { type: 'object', properties: { cents: { type: 'number', maximum: 10, exclusiveMaximum: true } } },
        /#\/properties\/cents\/exclusiveMaximum: Instance type "boolean" is invalid\. Expected "number" \(the bound itself, as from draft 6 on: exclusiveMaximum: 10, not maximum: 10 with exclusiveMaximum: true\)\.$/,
      ],
      // `false` was OpenAPI 3.0's default: no bound, which leaving it out says.
      [
        'exclusive-false',
        { type: 'object', properties: { cents: { type: 'number', maximum: 10, exclusiveMaximum: false } } },
        /#\/properties\/cents\/exclusiveMaximum: Instance type "boolean" is invalid\. Expected "number" \(for false, leave it out: from draft 6 on, exclusiveMaximum is the bound itself\)\.$/,
      ],
      // A value of no form the keyword takes is told the forms it takes: a name or a list of names; a schema or a list of names.
      ['type-number', { type: 'object', properties: { to: { type: 5 } } }, /#\/properties\/to\/type: Instance type "number" is invalid\. Expected "string", "array"\.$/],
      ['dependency', { type: 'object', dependencies: { to: 5 } }, /#\/dependencies\/to: Instance type "number" is invalid\. Expected "object", "boolean", "array"\.$/],
      // A property named as a keyword is a schema: no hint meant for the keyword.
      ['named', { type: 'object', properties: { exclusiveMinimum: 5 } }, /#\/properties\/exclusiveMinimum: Instance type "number" is invalid\. Expected "object", "boolean"\.$/],
      ['anchor', { type: 'object', $defs: { to: { $anchor: '1to' } } }, /#\/\$defs\/to\/\$anchor: String does not match pattern: a name starts with a letter or "_", then letters, digits, "-", "\.", ":" and "_"\.$/],
      // In a definition no reference uses, too: what a schema may say is checked everywhere in it.
      ['definition', { type: 'object', $defs: { unused: { items: 'string' } } }, /#\/\$defs\/unused\/items: Instance type "string" is invalid\. Expected "object", "boolean", "array"\.$/],
      [
        'many',
        { type: 'object', properties: { a: { type: 1 }, b: { type: 2 }, c: { type: 3 }, d: { type: 4 }, e: { type: 5 }, f: { type: 6 }, g: { type: 7 } } },
        /#\/properties\/e\/type: Instance type "number" is invalid\. Expected "string", "array"; and 2 more$/,
      ],
    ]
    for (const [name, inputSchema, message] of cases) {
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(h.input(name, { tools: [countingTool('echo'), refund({ inputSchema })] })), 'RUN_INVALID_INPUT', name)
      assert.equal(error.details?.fields, ['tools.1.inputSchema'], name)
      assert.match(error.message, /^RUN_INVALID_INPUT: tools\.1\.inputSchema: the schema of tool refund cannot be used to check its input: it is not a JSON Schema: #\//, name)
      assert.match(error.message, message, name)
      assert.not.match(error.message, /\n|cfworker|does not match any subschemas|additional properties schema/, `${name}: one line, no meta-schema internals`)
      assert.equal(await typesOf(h.log, `invocation-${name}`), [], name)
    }
    // Schemas written the ways tools get them are admitted: zod's for each target it writes, with a
    // recursive type, tuples, records, unions and formats; draft 7's `definitions`; OpenAPI's `nullable`.
    const Tree: z.ZodType = z.lazy(() => z.object({ name: z.string(), children: z.array(Tree) }))
    const shape = z.object({
      to: z.email(),
      cents: z.number().int().positive().multipleOf(5),
      kind: z.enum(['a', 'b']),
      tags: z.array(z.string().regex(/^[a-z]+$/)).max(3),
      pair: z.tuple([z.string(), z.number()]),
      meta: z.record(z.string(), z.unknown()),
      maybe: z.union([z.string(), z.null()]).optional(),
      tree: Tree,
    })
    const written: object[] = [
      z.toJSONSchema(shape),
      z.toJSONSchema(shape, { target: 'draft-7' }),
      // Draft 7's plain-name $id; an empty tuple as zod writes it; annotations the validator never reads.
      { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', definitions: { a: { $id: '#addr', type: 'string' } }, properties: { a: { $ref: '#addr' } } },
      z.toJSONSchema(z.object({ v: z.tuple([]) })),
      { type: 'object', description: null, title: 5, properties: { a: { type: 'string', examples: { a: 1 }, readOnly: 'true' } } },
      // 2020-12's anchor names may start with "_".
      { type: 'object', properties: { to: { $ref: '#_to' } }, $defs: { to: { $anchor: '_to', type: 'string' } } },
      { type: 'object', properties: { a: { $ref: '#/definitions/A' } }, definitions: { A: { type: 'string', nullable: true } }, $schema: 'http://json-schema.org/draft-07/schema#' },
      { type: 'object', properties: { a: { enum: [], default: 'x', examples: ['y'], format: 'email', deprecated: true } }, required: [], strict: true },
      // 2019-09's extensible tree: `$recursiveRef` under `items` steps into the input wherever the anchor is.
      { $id: 'https://x.test/tree', $recursiveAnchor: true, type: 'object', properties: { children: { type: 'array', items: { $recursiveRef: '#' } } } },
    ]
    for (const [index, inputSchema] of written.entries()) {
      assert.equal(await h.run(h.input(`written-${index}`, { tools: [refund({ inputSchema })] })), { status: 'completed' }, `written-${index}`)
    }
  }),
)

test(
  'a reference that leads back to where it is without stepping into the input is refused (the check would recurse without end); one that steps in checks nested input',
  engineTest(
    [
      // anchored-400, fan-out-14, chain-128; then the tree.
      answer.text('done'),
      answer.text('done'),
      answer.text('done'),
      answer.toolCalls([
        { id: 'call-deep', name: 'tree', arguments: { name: 'a', children: [{ name: 'b', children: [{ name: 'c', children: [] }] }] } },
        { id: 'call-bad', name: 'tree', arguments: { name: 'a', children: [{ name: 'b', children: [{ name: 7, children: [] }] }] } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const cases: [string, object, RegExp][] = [
        ['self', { allOf: [{ $ref: '#' }] }, /\$ref "#" at #\/allOf\/0 leads back to # without stepping into the input \(a check reaching it would never end\)$/],
        ['not', { type: 'object', not: { $ref: '#' } }, /\$ref "#" at #\/not leads back to #/],
        // Through definitions, in a branch of an anyOf: named where the loop closes.
        [
          'chain',
          { type: 'object', properties: { a: { $ref: '#/$defs/a' } }, $defs: { a: { anyOf: [{ type: 'string' }, { $ref: '#/$defs/b' }] }, b: { if: { $ref: '#/$defs/a' } } } },
          /\$ref "#\/\$defs\/a" at #\/\$defs\/b\/if leads back to #\/\$defs\/a without stepping into the input/,
        ],
        ['dependent', { type: 'object', dependentSchemas: { a: { $ref: '#' } } }, /\$ref "#" at #\/dependentSchemas\/a leads back to #/],
        ['recursive', { $id: 'https://x.test/s', oneOf: [{ $recursiveRef: '#' }] }, /\$recursiveRef "#" at #\/oneOf\/0 leads back to #/],
        // An anchor only in an example is no anchor the validator meets.
        ['example', { type: 'object', allOf: [{ $recursiveRef: '#' }], examples: [{ $recursiveAnchor: true }] }, /\$recursiveRef "#" at #\/allOf\/0 leads back to #/],
        ['other', { type: 'object', properties: { a: { $recursiveRef: '#/$defs/s' } }, $defs: { s: { type: 'string' } } }, /#\/properties\/a\/\$recursiveRef: /],
        // With an anchor, `$recursiveRef` leads to it: followed as the validator follows it.
        ['anchored', { $recursiveAnchor: true, type: 'object', allOf: [{ $recursiveRef: '#' }] }, /\$recursiveRef "#" at #\/allOf\/0 leads back to # without stepping into the input/],
        [
          'anchored-below',
          { type: 'object', properties: { a: { $ref: '#/$defs/t' } }, $defs: { t: { $recursiveAnchor: true, anyOf: [{ type: 'string' }, { not: { $recursiveRef: '#' } }] } } },
          /\$recursiveRef "#" at #\/\$defs\/t\/anyOf\/1\/not leads back to #\/\$defs\/t without stepping into the input/,
        ],
        // Thousands of definitions each a reference to the next: no stack overflow here, and none at each call.
        [
          'long-chain',
          { $ref: '#/$defs/d0', $defs: Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`d${i}`, i < 2999 ? { $ref: `#/$defs/d${i + 1}` } : { type: 'object' }])) },
          /: from #\/\$defs\/d2871, 129 schemas are applied one inside another to one value \(through references, allOf, anyOf, …\): more than the validator can follow \(128\)$/,
        ],
        // A tool's input is an object: a schema that refuses every object refuses every call.
        ['not-object', { type: ['string', 'null'] }, /: its type is \["string","null"\], but a tool's input \(the arguments of a call\) is a JSON object: the schema's type must be "object" or left out$/],
        [
          'one-uri',
          { type: 'object', properties: { a: { $id: 'item', type: 'string' }, b: { $id: 'item', type: 'number' } } },
          /: two of its schemas have one URI: #\/properties\/a\/\$id "item"; #\/properties\/b\/\$id "item" \(an \$id must name one schema\)$/,
        ],
        // Resolved against the enclosing $id, as the validator resolves them.
        [
          'one-uri-based',
          { $id: 'https://x.test/root', type: 'object', properties: { a: { $id: 'sub/', properties: { c: { $id: 'item' } } }, b: { $id: 'sub/item' } } },
          /: two of its schemas have one URI: #\/properties\/a\/properties\/c\/\$id "item"; #\/properties\/b\/\$id "sub\/item" \(an \$id must name one schema\)$/,
        ],
        // The validator reads any `id` member as a schema's URI, also a dependency on a property named "id".
        [
          'one-uri-id',
          { type: 'object', properties: { a: { dependencies: { id: ['x'] } }, b: { dependencies: { id: ['x'] } } } },
          /: two of its schemas have one URI: #\/properties\/a\/dependencies\/id \["x"\]; #\/properties\/b\/dependencies\/id \["x"\] \(an \$id must name one schema, as must an id, which the validator reads as drafts 3 and 4 wrote \$id\)$/,
        ],
        ['bad-id', { type: 'object', properties: { a: { $id: 'http://', type: 'string' } } }, /: #\/properties\/a\/\$id "http:\/\/" is not a URI reference \(Invalid URL\)$/],
        // Where the validator resolves it: not in a default value, and against the enclosing $id.
        ['bad-id-default', { type: 'object', properties: { a: { default: { id: 'http://' } }, b: { $id: 'http://x:99999/' } } }, /: #\/properties\/b\/\$id "http:\/\/x:99999\/" is not a URI reference \(Invalid URL\)$/],
        ['bad-id-base', { $id: 'urn:example:tool', type: 'object', properties: { a: { $id: 'item' } } }, /: #\/properties\/a\/\$id "item" is not a URI reference \(Invalid URL\)$/],
        ['bad-ref', { type: 'object', properties: { a: { $ref: 'http://' } } }, /: #\/properties\/a\/\$ref "http:\/\/" is not a URI reference \(Invalid URL\)$/],
        // Every branch of an anyOf is checked at each call: 16 levels of two references are 65,535 schemas applied to one value.
        [
          'fan-out',
          { type: 'object', $ref: '#/$defs/l0', $defs: Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`l${i}`, i < 15 ? { anyOf: [{ $ref: `#/$defs/l${i + 1}` }, { $ref: `#/$defs/l${i + 1}` }] } : { required: ['x'] }])) },
          /: from #\/\$defs\/l1, more than 50,000 schemas are applied to one value \(branches of allOf, anyOf, oneOf and the like through references multiply, and the validator checks every branch at each call\)$/,
        ],
        // Each definition reached under each of 100 anchors, where a $recursiveRef makes the anchor matter.
        ['reanchored', anchoredDefinitions(100, true), /: its subschemas would be checked under more than 20,000 combinations of \$recursiveAnchor and \$recursiveRef \(a schema this entangled cannot be checked when it is admitted\)$/],
      ]
      for (const [name, inputSchema, message] of cases) {
        const error = await refusedWithoutWriting(h.log, () => h.engine.start(h.input(name, { tools: [refund({ inputSchema })] })), 'RUN_INVALID_INPUT', name)
        assert.equal(error.details?.fields, ['tools.0.inputSchema'], name)
        assert.match(error.message, message, name)
        assert.equal(await typesOf(h.log, `invocation-${name}`), [], name)
      }
      // Without a $recursiveRef the anchors change nothing: 400 of them, each reaching every definition, are admitted.
      assert.equal(await h.run(h.input('anchored-400', { tools: [refund({ inputSchema: anchoredDefinitions(400, false) })] })), { status: 'completed' })
      // 14 levels of two references (32,767 schemas applied to one value) are admitted.
      const fanOut = { type: 'object', $ref: '#/$defs/l0', $defs: Object.fromEntries(Array.from({ length: 14 }, (_, i) => [`l${i}`, i < 13 ? { anyOf: [{ $ref: `#/$defs/l${i + 1}` }, { $ref: `#/$defs/l${i + 1}` }] } : {}])) }
      assert.equal(await h.run(h.input('fan-out-14', { tools: [refund({ inputSchema: fanOut })] })), { status: 'completed' })
      // 128 deep is followed (the chain above, shorter).
      const chain = { $ref: '#/$defs/d0', $defs: Object.fromEntries(Array.from({ length: 127 }, (_, i) => [`d${i}`, i < 126 ? { $ref: `#/$defs/d${i + 1}` } : { type: 'object' }])) }
      assert.equal(await h.run(h.input('chain-128', { tools: [refund({ inputSchema: chain })] })), { status: 'completed' })
      // A reference through `properties` or `items` is applied to a part of the input, which ends.
      const tree = {
        ...countingTool('tree'),
        inputSchema: {
          $ref: '#/$defs/node',
          $defs: { node: { type: 'object', properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['name', 'children'] } },
        },
      }
      assert.equal(await h.run(h.input('tree', { tools: [tree] })), { status: 'completed' })
      const rejected = only(await factsOf(h.log, 'invocation-tree'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => [fact.callId, fact.message]),
        [['call-bad', 'children/0/children/0/name: Instance type "number" is invalid. Expected "string".']],
      )
      assert.is(tree.calls.length, 1, 'the well-formed tree ran')
    },
  ),
)

test(
  'only what the validator evaluates is checked: vendor keywords, examples, name lists, unused definitions and keywords skipped where they stand are admitted as they are',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-5', name: 'refund', arguments: { order: 'C-5', cents: 1 } },
        { id: 'call-6', name: 'refund', arguments: { order: 'C-6', cents: 1 } },
        { id: 'call-bare', name: 'refund', arguments: { order: 'C-5' } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const tool = refund({
        inputSchema: {
          type: 'object',
          // OpenAPI's `example`: an `id` in it is no schema's (the validator would register both as one URI).
          // A schema named `example` under an unknown keyword stays a reference's target.
          properties: { order: { type: 'string', pattern: '5', example: { id: 'u1' } }, cents: { $ref: '#/components/schemas/example', example: { id: 'u1' } } },
          components: { schemas: { example: { type: 'integer' } } },
          required: ['order'],
          // A list of names, not a schema.
          dependencies: { order: ['cents'] },
          'x-vendor': { $ref: '#/nowhere', pattern: '([' },
          examples: [{ order: 'C-5', pattern: '([' }],
          $defs: { unused: { $ref: '#/$defs/missing', pattern: '([' } },
          // Keywords the validator skips where they stand: `then` without `if`, `additionalItems`
          // without `items`, `unevaluatedProperties` beside `additionalProperties`.
          then: { $ref: '#/nowhere' },
          additionalItems: { pattern: '([' },
          additionalProperties: true,
          unevaluatedProperties: { $ref: '#/nowhere' },
        },
      })
      assert.equal(await h.run(h.input('lenient', { tools: [tool] })), { status: 'completed' })
      const rejected = only(await factsOf(h.log, 'invocation-lenient'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => [fact.callId, fact.message]),
        [
          ['call-6', 'order: String does not match pattern "5".'],
          ['call-bare', 'the input: Instance has "order" but does not have "cents".'],
        ],
      )
      assert.equal(tool.calls.length, 1, 'the input matching the pattern "5" and naming cents ran')
    },
  ),
)

test(
  'where a rejection says the input is wrong reads as a JSON pointer: a space in a key is a space, a slash is ~1',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { 'order id': 7, 'a/b': 'x' } }]), answer.text('done')], {}, async (h) => {
    const tool = refund({ inputSchema: { type: 'object', properties: { 'order id': { type: 'string' }, 'a/b': { type: 'number' } } } })
    assert.equal(await h.run(h.input('keys', { tools: [tool] })), { status: 'completed' })
    const [rejected] = only(await factsOf(h.log, 'invocation-keys'), 'tool.rejected')
    assert.is(rejected?.message, 'order id: Instance type "number" is invalid. Expected "string"; a~1b: Instance type "string" is invalid. Expected "number".')
    assert.is(tool.calls.length, 0)
  }),
)

test(
  'a long message cut in the middle of an emoji is still recorded (cut between code points), and the model is told',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { order: 'C-1', cents: 1, tier: 'gold' } }]), answer.text('done')], {}, async (h) => {
    const tool = refund({
      inputSchema: { type: 'object', properties: { tier: { enum: [`xy${'😀'.repeat(600)}`] } }, required: ['tier'] },
    })
    assert.equal(await h.run(h.input('emoji', { tools: [tool] })), { status: 'completed' })
    const [rejected] = only(await factsOf(h.log, 'invocation-emoji'), 'tool.rejected')
    assert.is(rejected?.reason, 'invalid_input')
    assert.ok(rejected?.message?.endsWith('…'), 'cut')
    assert.not.match(rejected?.message ?? '', /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/, 'no half surrogate pair')
    assert.is(tool.calls.length, 0)
  }),
)

test.run()
