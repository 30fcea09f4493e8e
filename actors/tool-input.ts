/**
 * A tool's input checked against its `inputSchema` before the call is dispatched, by
 * `@cfworker/json-schema` (JSON Schema 2020-12; no code generation, so it also runs where that is
 * disallowed). What is wrong is told to the model, which can call again with better arguments.
 */
import { type OutputUnit, type Schema, Validator, dereference, ignoredKeyword, schemaArrayKeyword, schemaMapKeyword } from '@cfworker/json-schema'
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
 * (a `$ref` to nothing, anywhere in it; a `pattern` or a `patternProperties` key that is not a
 * regular expression; two subschemas with one `$id`, an `$id` that is not a URI reference).
 */
export function inputCheckOf(schema: object): InputCheck {
  // The validator marks the schema's objects (non-enumerable members): it gets its own copy.
  const copy = structuredClone(schema)
  const validator = new Validator(copy as Schema, '2020-12', false)
  // The validator's own table of the schema's URIs is private: built again, the same way.
  checkSchema(copy, dereference(copy as Schema), '', new Set())
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
  return check
}

/** A subschema as the validator marked it: its references resolved against its base URI. */
type Marked = Record<string, unknown> & { __absolute_ref__?: string; __absolute_recursive_ref__?: string }

/** `pointer` (RFC 6901, `''` for the schema itself) as a message shows it. */
const at = (pointer: string): string => `#${pointer}`

/**
 * Throws when a part of `schema` would fail every check that reaches it: a reference the validator
 * cannot resolve (it resolves them only when a check reaches them, so one in a branch few inputs
 * take would fail only those calls), or a pattern that does not compile (as the validator compiles
 * it: with the `u` flag). Walks the subschemas the validator's `dereference` walks.
 */
function checkSchema(schema: unknown, lookup: Record<string, unknown>, pointer: string, seen: Set<object>): void {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema) || seen.has(schema)) return
  seen.add(schema)
  const node = schema as Marked
  for (const [keyword, absolute] of [
    ['$ref', node.__absolute_ref__],
    ['$recursiveRef', node.__absolute_recursive_ref__],
  ] as const) {
    const reference = node[keyword]
    if (reference === undefined) continue
    if (typeof reference !== 'string') throw new Error(`${keyword} at ${at(pointer)} is not a string`)
    if (lookup[absolute ?? reference] === undefined) {
      throw new Error(`${keyword} ${JSON.stringify(reference)} at ${at(pointer)} leads to no schema (a reference must point inside the schema: none is fetched)`)
    }
  }
  if (node.pattern !== undefined) compiles(node.pattern, `${pointer}/pattern`)
  const patterns = node.patternProperties
  if (typeof patterns === 'object' && patterns !== null) for (const pattern of Object.keys(patterns)) compiles(pattern, `${pointer}/patternProperties`)
  for (const key in node) {
    if (ignoredKeyword[key]) continue
    const sub = node[key]
    const base = `${pointer}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`
    if (Array.isArray(sub)) {
      if (schemaArrayKeyword[key]) sub.forEach((item, index) => checkSchema(item, lookup, `${base}/${index}`, seen))
    } else if (schemaMapKeyword[key]) {
      if (typeof sub === 'object' && sub !== null) {
        for (const name in sub) checkSchema((sub as Record<string, unknown>)[name], lookup, `${base}/${name.replaceAll('~', '~0').replaceAll('/', '~1')}`, seen)
      }
    } else checkSchema(sub, lookup, base, seen)
  }
}

function compiles(pattern: unknown, pointer: string): void {
  if (typeof pattern !== 'string') throw new Error(`the pattern at ${at(pointer)} is not a string`)
  try {
    new RegExp(pattern, 'u')
  } catch (error) {
    throw new Error(`the pattern ${JSON.stringify(pattern)} at ${at(pointer)} is not a regular expression (${messageOf(error)})`)
  }
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

/**
 * `#` is the input itself, `#/to/0` its member `to/0`. The validator writes locations as URI
 * fragments (`a%20b`): shown decoded, as JSON pointers (`a b`; a `/` in a key stays `~1`).
 */
function where(location: string): string {
  const path = location
    .replace(/^#\/?/, '')
    .split('/')
    .map((part) => {
      try {
        return decodeURIComponent(part)
      } catch {
        return part
      }
    })
    .join('/')
  return path === '' ? 'the input' : path
}
