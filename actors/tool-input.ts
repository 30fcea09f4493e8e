/**
 * A tool's input checked against its `inputSchema` before the call is dispatched, by
 * `@cfworker/json-schema` (JSON Schema 2020-12; no code generation, so it also runs where that is
 * disallowed). What is wrong is told to the model, which can call again with better arguments.
 */
import { type OutputUnit, type Schema, Validator } from '@cfworker/json-schema'
import { messageOf, wellFormed } from '../store/encoding.js'

/** What is wrong with an input (`undefined`: nothing). */
export type InputCheck = (input: unknown) => string | undefined

/** The check of each admitted tool that has one (a tool without `inputSchema`, or with `validateInput: false`, has none). */
export const inputChecks = new WeakMap<object, InputCheck>()

/** Errors that only say a part below them failed: the parts' own errors say what. */
const ROLLUPS = new Set(['properties', 'patternProperties', 'items', 'prefixItems', 'additionalItems', 'allOf', '$ref', '$recursiveRef', 'dependentSchemas', 'false'])
/** How many errors a message names. */
const SHOWN_ERRORS = 5
/** The longest message a rejection records. */
const MESSAGE_LIMIT = 1_000

/**
 * The check of inputs against `schema`, or a thrown `Error` naming why the schema cannot be used
 * (a `$ref` to nothing, two subschemas with one `$id`, an `$id` that is not a URI reference).
 */
export function inputCheckOf(schema: object): InputCheck {
  // The validator marks the schema's objects (non-enumerable members): it gets its own copy.
  const copy = structuredClone(schema)
  const validator = new Validator(copy as Schema, '2020-12', false)
  const check: InputCheck = (input) => {
    let result: ReturnType<Validator['validate']>
    try {
      result = validator.validate(input)
    } catch (error) {
      // A `pattern` that is not a regular expression, a `$ref` to nothing: the schema's fault, but the input is unchecked.
      return `its input schema could not be applied (${messageOf(error)})`
    }
    return result.valid ? undefined : describeErrors(result.errors, copy)
  }
  // A `$ref` is resolved when it is reached: the empty object is checked once, so a schema whose
  // top-level reference leads nowhere is refused when the run is admitted, not at its first call.
  validator.validate({})
  return check
}

/** The errors as one line: where in the input, and what. */
function describeErrors(errors: readonly OutputUnit[], schema: object): string {
  const leaves = errors.filter((error) => !ROLLUPS.has(error.keyword))
  const named = leaves.length > 0 ? leaves : errors
  const parts = named.slice(0, SHOWN_ERRORS).map((error) => `${where(error.instanceLocation)}: ${withPattern(error, schema)}`)
  if (named.length > SHOWN_ERRORS) parts.push(`and ${named.length - SHOWN_ERRORS} more`)
  const message = parts.join('; ')
  // A cut through a surrogate pair leaves half of it, which no fact holds: made well-formed, as an approver's reason is.
  return wellFormed(message.length > MESSAGE_LIMIT ? `${message.slice(0, MESSAGE_LIMIT)}…` : message)
}

/** A `pattern` error names the pattern (the validator's own message does not), where the schema has it. */
function withPattern(error: OutputUnit, schema: object): string {
  if (error.keyword !== 'pattern') return error.error
  let node: unknown = schema
  for (const part of error.keywordLocation.replace(/^#\/?/, '').split('/')) {
    if (typeof node !== 'object' || node === null) return error.error
    let key: string
    try {
      key = decodeURIComponent(part).replaceAll('~1', '/').replaceAll('~0', '~')
    } catch {
      return error.error
    }
    node = Object.hasOwn(node, key) ? (node as Record<string, unknown>)[key] : undefined
  }
  return typeof node === 'string' ? `${error.error.replace(/\.$/, '')} ${JSON.stringify(node)}.` : error.error
}

/** `#` is the input itself, `#/to/0` its member `to/0`. */
function where(location: string): string {
  const path = location.replace(/^#\/?/, '')
  return path === '' ? 'the input' : path
}
