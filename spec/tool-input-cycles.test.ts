/**
 * Admission against the validator itself: for schemas built only of keywords the validator applies
 * whatever the input (`allOf`, `anyOf`, `oneOf`, `not`, `$ref`, `$recursiveRef`, with or without
 * `$recursiveAnchor`) and `properties` (which steps into the input), `inputCheckOf` refuses a schema
 * exactly when checking an input nested deeper than any path through it overflows the stack. So
 * the walk follows `$recursiveRef` where the validator does, anchors included.
 */
import { type Schema, Validator } from '@cfworker/json-schema'
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { inputCheckOf } from '../actors/tool-input.js'

const DEFINITIONS = 3

/** A subschema: a leaf, a combination, a reference, or a property to step into; any of them may declare an anchor. */
const schemas = fc.letrec<{ node: Record<string, unknown> }>((tie) => ({
  node: fc
    .tuple(
      fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.constant<Record<string, unknown>>({ type: 'object' }),
        fc.record({ allOf: fc.array(tie('node'), { minLength: 1, maxLength: 2 }) }),
        fc.record({ anyOf: fc.array(tie('node'), { minLength: 1, maxLength: 2 }) }),
        fc.record({ oneOf: fc.array(tie('node'), { minLength: 1, maxLength: 2 }) }),
        fc.record({ not: tie('node') }),
        fc.integer({ min: 0, max: DEFINITIONS - 1 }).map((index) => ({ $ref: `#/$defs/d${index}` })),
        fc.constant({ $ref: '#' }),
        fc.constant({ $recursiveRef: '#' }),
        tie('node').map((sub) => ({ properties: { a: sub } })),
      ),
      fc.boolean(),
    )
    .map(([node, anchored]) => (anchored ? { ...node, $recursiveAnchor: true } : node)),
}))

const rootSchemas = fc
  .tuple(schemas.node, fc.array(schemas.node, { minLength: DEFINITIONS, maxLength: DEFINITIONS }), fc.boolean())
  .map(([root, definitions, anchored]) => ({
    ...root,
    ...(anchored ? { $recursiveAnchor: true } : {}),
    $defs: Object.fromEntries(definitions.map((definition, index) => [`d${index}`, definition])),
  }))

/** An input nested `depth` levels through `a`, deeper than any path through a generated schema steps. */
const nested = (depth: number): object => {
  let input: object = {}
  for (let level = 0; level < depth; level += 1) input = { a: input }
  return input
}

/** Whether the validator overflows checking `input` against `schema`. */
function overflows(schema: object, input: object): boolean {
  try {
    new Validator(structuredClone(schema) as Schema, '2020-12', false).validate(input)
    return false
  } catch (error) {
    if (error instanceof RangeError) return true
    throw error
  }
}

function admitted(schema: object): boolean {
  try {
    inputCheckOf(schema)
    return true
  } catch (error) {
    assert.match((error as Error).message, /leads back to .* without stepping into the input/)
    return false
  }
}

test('a schema is refused exactly when the validator would recurse without end on it', () => {
  let refused = 0
  fc.assert(
    fc.property(rootSchemas, (schema) => {
      const overflow = overflows(schema, nested(12))
      const accepted = admitted(schema)
      if (!accepted) refused += 1
      return accepted === !overflow
    }),
    { numRuns: 1500, seed: 20261205 },
  )
  // Both sides were exercised, so the property said something.
  assert.ok(refused > 100, `${refused} refused`)
  assert.ok(refused < 1400, `${1500 - refused} admitted`)
})

test.run()
