/**
 * The meta-schema a tool's `inputSchema` must match to be admitted: what a JSON Schema may say, as
 * the validator (`@cfworker/json-schema` in 2020-12 mode) reads it.
 *
 * Data, not logic: the JSON Schema 2019-09 meta-schemas (json-schema.org, as ajv 8 ships them in
 * `dist/refs/json-schema-2019-09`) with their six vocabularies merged into one document, so that
 * each `$recursiveRef: '#'` becomes `$ref: '#'` (the same schema once there is one root; the
 * validator loses the recursive anchor inside `anyOf`, which would check a schema under `items`
 * against the applicator vocabulary alone). Added from 2020-12: `prefixItems` (which the validator
 * applies), and `$anchor` names as 2020-12 writes them (also starting with `_`). Left out: `format`
 * on `pattern`, `$ref` and `$id` (an annotation in 2019-09's meta-schema; patterns are compiled
 * where a check reaches them, references resolved there), `default` members, the meta-data and
 * content annotations the validator never reads, and `minItems: 1` on `prefixItems` and an `items`
 * array (an empty tuple). Changed: `$recursiveRef` must be `'#'` (the only one applied); `$id` may
 * be draft 7's `#name`.
 * Unknown keywords are allowed, as in any meta-schema.
 */
export const TOOL_INPUT_META_SCHEMA = {
  $id: 'urn:factstate:tool-input-meta-schema',
  type: ['object', 'boolean'],
  properties: {
    // Core
    // Or draft 7's plain-name fragment (`#addr`), which the validator registers as an anchor.
    $id: { type: 'string', pattern: '^([^#]*#?|#[A-Za-z_][-A-Za-z0-9.:_]*)$' },
    $schema: { type: 'string' },
    // 2019-09's names and 2020-12's (which may start with `_`).
    $anchor: { type: 'string', pattern: '^[A-Za-z_][-A-Za-z0-9.:_]*$' },
    $ref: { type: 'string' },
    // The validator applies `'#'` only: any other would leave that part unchecked.
    $recursiveRef: { const: '#' },
    $recursiveAnchor: { type: 'boolean' },
    $vocabulary: { type: 'object', propertyNames: { type: 'string' }, additionalProperties: { type: 'boolean' } },
    $comment: { type: 'string' },
    $defs: { type: 'object', additionalProperties: { $ref: '#' } },
    // Kept by 2019-09's meta-schema for schemas written before it.
    definitions: { type: 'object', additionalProperties: { $ref: '#' } },
    dependencies: { type: 'object', additionalProperties: { anyOf: [{ $ref: '#' }, { $ref: '#/$defs/stringArray' }] } },
    // Applicator
    // Empty for an empty tuple (zod writes it): the validator reads it as no item at all.
    prefixItems: { type: 'array', items: { $ref: '#' } },
    additionalItems: { $ref: '#' },
    unevaluatedItems: { $ref: '#' },
    items: { anyOf: [{ $ref: '#' }, { type: 'array', items: { $ref: '#' } }] },
    contains: { $ref: '#' },
    additionalProperties: { $ref: '#' },
    unevaluatedProperties: { $ref: '#' },
    properties: { type: 'object', additionalProperties: { $ref: '#' } },
    patternProperties: { type: 'object', additionalProperties: { $ref: '#' } },
    dependentSchemas: { type: 'object', additionalProperties: { $ref: '#' } },
    propertyNames: { $ref: '#' },
    if: { $ref: '#' },
    then: { $ref: '#' },
    else: { $ref: '#' },
    allOf: { $ref: '#/$defs/schemaArray' },
    anyOf: { $ref: '#/$defs/schemaArray' },
    oneOf: { $ref: '#/$defs/schemaArray' },
    not: { $ref: '#' },
    // Validation
    multipleOf: { type: 'number', exclusiveMinimum: 0 },
    maximum: { type: 'number' },
    exclusiveMaximum: { type: 'number' },
    minimum: { type: 'number' },
    exclusiveMinimum: { type: 'number' },
    maxLength: { $ref: '#/$defs/nonNegativeInteger' },
    minLength: { $ref: '#/$defs/nonNegativeInteger' },
    pattern: { type: 'string' },
    maxItems: { $ref: '#/$defs/nonNegativeInteger' },
    minItems: { $ref: '#/$defs/nonNegativeInteger' },
    uniqueItems: { type: 'boolean' },
    maxContains: { $ref: '#/$defs/nonNegativeInteger' },
    minContains: { $ref: '#/$defs/nonNegativeInteger' },
    maxProperties: { $ref: '#/$defs/nonNegativeInteger' },
    minProperties: { $ref: '#/$defs/nonNegativeInteger' },
    required: { $ref: '#/$defs/stringArray' },
    dependentRequired: { type: 'object', additionalProperties: { $ref: '#/$defs/stringArray' } },
    enum: { type: 'array' },
    type: {
      anyOf: [{ $ref: '#/$defs/simpleTypes' }, { type: 'array', items: { $ref: '#/$defs/simpleTypes' }, minItems: 1, uniqueItems: true }],
    },
    // Meta-data and content annotations (title, description, examples, readOnly, contentMediaType, …)
    // are left unconstrained: the validator never reads them, so a `description: null` fails no call.
    contentSchema: { $ref: '#' },
  },
  $defs: {
    schemaArray: { type: 'array', minItems: 1, items: { $ref: '#' } },
    nonNegativeInteger: { type: 'integer', minimum: 0 },
    // `type: 'string'` added: a list given as `type` is then told by its own errors (too few, repeated), not by this enum.
    simpleTypes: { type: 'string', enum: ['array', 'boolean', 'integer', 'null', 'number', 'object', 'string'] },
    stringArray: { type: 'array', items: { type: 'string' }, uniqueItems: true },
  },
} as const
