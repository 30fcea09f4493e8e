/**
 * The bound on a call's check against the validator itself: for generated schemas (combinations,
 * if/then/else, dependentSchemas, references, properties with patternProperties and
 * additionalProperties, items in every form, contains, propertyNames, unevaluated…, `true` and
 * `false`) and generated inputs, the steps `inputCheckOf`'s check counts before it runs the
 * validator are never fewer than the schemas the validator applies, and at most twice as many (the
 * count must refuse what is costly, not what is not). The comparisons `uniqueItems` adds are not
 * applications: `spec/engine-tool-input.test.ts` bounds them.
 */
import { type Schema, Validator } from '@cfworker/json-schema'
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { inputCheckOf, inputCheckSteps } from '../actors/tool-input.js'

const DEFINITIONS = 3

const schemas = fc.letrec<{ node: unknown }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constant({ type: 'object' }),
    fc.constant(true),
    fc.constant(false),
    fc.record({ required: fc.constant(['x']), minItems: fc.constant(2) }, { requiredKeys: [] }),
    fc.record({ allOf: fc.array(tie('node'), { minLength: 1, maxLength: 3 }) }),
    fc.record({ anyOf: fc.array(tie('node'), { minLength: 1, maxLength: 3 }) }),
    fc.record({ oneOf: fc.array(tie('node'), { minLength: 1, maxLength: 3 }) }),
    fc.record({ not: tie('node') }),
    fc.record({ if: tie('node'), then: tie('node'), else: tie('node') }, { requiredKeys: ['if'] }),
    tie('node').map((sub) => ({ dependentSchemas: { a: sub } })),
    tie('node').map((sub) => ({ dependencies: { b: sub } })),
    fc.integer({ min: 0, max: DEFINITIONS - 1 }).map((index) => ({ $ref: `#/$defs/d${index}` })),
    fc.record({ properties: fc.record({ a: tie('node'), b: tie('node') }, { requiredKeys: [] }) }),
    fc.record({ properties: fc.record({ a: tie('node') }), patternProperties: fc.record({ '^a': tie('node') }), additionalProperties: tie('node') }, { requiredKeys: [] }),
    fc.record(
      { items: fc.oneof(tie('node'), fc.array(tie('node'), { maxLength: 2 })), additionalItems: tie('node'), prefixItems: fc.array(tie('node'), { maxLength: 2 }) },
      { requiredKeys: [] },
    ),
    fc.record({ contains: tie('node'), propertyNames: tie('node') }, { requiredKeys: [] }),
    fc.record({ unevaluatedProperties: tie('node'), unevaluatedItems: tie('node') }, { requiredKeys: [] }),
  ),
}))

const rootSchemas = fc.tuple(schemas.node, fc.array(schemas.node, { minLength: DEFINITIONS, maxLength: DEFINITIONS })).map(([root, definitions]) => ({
  ...(typeof root === 'object' ? root : {}),
  $defs: Object.fromEntries(definitions.map((definition, index) => [`d${index}`, definition])),
}))

const values = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.constantFrom(1, 's', null, true),
    fc.dictionary(fc.constantFrom('a', 'b', 'x', 'ab', 'c'), tie('value'), { maxKeys: 4 }),
    fc.array(tie('value'), { maxLength: 4 }),
  ),
})).value

const inputs = fc.dictionary(fc.constantFrom('a', 'b', 'x', 'ab'), values, { maxKeys: 4 })

/**
 * `schema` with each of its objects behind a proxy that counts the validator's applications: it
 * reads `__absolute_recursive_ref__` once each time it applies a schema (the last member it takes
 * apart), and the proxy tells that read. `true` and `false`, applied without a read, become `{}`
 * and `{ type: [] }`, which pass and fail as they do, in one application each.
 */
function counted(schema: object): { schema: object; applied: { count: number } } {
  const applied = { count: 0 }
  const wrap = (value: unknown): unknown => {
    if (typeof value === 'boolean') return wrap(value ? {} : { type: [] })
    if (typeof value !== 'object' || value === null) return value
    const copy: Record<string, unknown> | unknown[] = Array.isArray(value)
      ? value.map((item) => wrap(item))
      : Object.fromEntries(Object.entries(value).map(([name, member]) => [name, wrap(member)]))
    if (Array.isArray(copy)) return copy
    return new Proxy(copy, {
      get(target, key, receiver) {
        if (key === '__absolute_recursive_ref__') applied.count += 1
        return Reflect.get(target, key, receiver)
      },
    })
  }
  return { schema: wrap(schema) as object, applied }
}

test('a check counts at least the schemas the validator applies to an input, and at most twice as many', () => {
  let compared = 0
  let deep = 0
  fc.assert(
    fc.property(rootSchemas, inputs, (schema, input) => {
      let check
      try {
        check = inputCheckOf(schema)
      } catch {
        return true // refused at admission: a call never reaches the count
      }
      const steps = (inputCheckSteps.get(check) as (input: unknown) => number)(input)
      const measured = counted(structuredClone(schema))
      const validator = new Validator(measured.schema as Schema, '2020-12', false)
      measured.applied.count = 0
      validator.validate(input)
      compared += 1
      const real = measured.applied.count
      if (real >= 10) deep += 1
      return steps >= real && steps <= 2 * real
    }),
    { numRuns: 3000, seed: 20261205 },
  )
  assert.ok(compared > 2500, `${compared} compared`)
  // Inputs the schemas reach into, so the property said something.
  assert.ok(deep > 150, `${deep} checks applied 10 schemas or more`)
})

test.run()
