/**
 * A tool's input checked against its `inputSchema` before the call is dispatched, by
 * `@cfworker/json-schema` (JSON Schema 2020-12; no code generation, so it also runs where that is
 * disallowed). What is wrong is told to the model, which can call again with better arguments.
 */
import { type OutputUnit, type Schema, Validator, dereference, schemaArrayKeyword, schemaKeyword, schemaMapKeyword } from '@cfworker/json-schema'
import { messageOf, wellFormed } from '../store/encoding.js'
import { TOOL_INPUT_META_SCHEMA } from './tool-input-meta-schema.js'

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

/** The validator of schemas, built when the first one is checked. */
let metaValidator: Validator | undefined

/**
 * The check of inputs against `schema`, or a thrown `Error` naming why the schema cannot be used:
 * it does not match the meta-schema (`properties` that is no object, a `type` no validator knows, a
 * `minimum` that is no number: see `tool-input-meta-schema.ts`); and, anywhere a check can reach, a
 * `$ref` to nothing, a `pattern` or a `patternProperties` key that is not a regular expression, a
 * reference that leads back to where it is without stepping into the input (every check reaching it
 * would recurse without end), a `$dynamicRef` (which the validator does not apply); two subschemas
 * with one `$id`, an `$id` that is not a URI reference.
 */
export function inputCheckOf(schema: object): InputCheck {
  metaValidator ??= new Validator(structuredClone(TOOL_INPUT_META_SCHEMA) as unknown as Schema, '2020-12', false)
  const conformance = metaValidator.validate(schema)
  if (!conformance.valid) throw new Error(`it is not a JSON Schema: ${describeSchemaErrors(conformance.errors)}`)
  // The validator marks the schema's objects (non-enumerable members): it gets its own copy.
  const copy = structuredClone(schema)
  const validator = new Validator(copy as Schema, '2020-12', false)
  // The validator's own table of the schema's URIs is private: built again, the same way.
  checkSchema(copy, dereference(copy as Schema))
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
 * Throws when a part of `schema` that a check can reach would fail every check that reaches it: a
 * reference the validator cannot resolve (it resolves them only when a check reaches them, so one
 * in a branch few inputs take would fail only those calls), a pattern that does not compile (as
 * the validator compiles it: as a string, with the `u` flag), or references that lead back to where
 * they are without stepping into the input (`{ allOf: [{ $ref: '#' }] }`: the validator would apply
 * the same schema to the same value until the stack overflows). Walks what the validator evaluates:
 * the subschemas of its keywords, and the schemas references lead to; not vendor keywords,
 * annotations such as `examples`, `$defs` no reference uses, or a keyword the validator skips where
 * it stands (`then` without `if`). A `$dynamicRef` it reaches throws too: the validator would leave
 * that part of the input unchecked.
 */
function checkSchema(root: object, lookup: Record<string, unknown>): void {
  // Where each object is, for messages: a reference's target is named by its own place, also one
  // under a keyword the validator does not know (a reference may point anywhere in the document).
  const places = new Map<object, string>()
  /** Edges through `$recursiveRef`, followed for cycles only where no evaluated schema declares an anchor. */
  const recursive: [from: object, target: object, via: string][] = []
  const place = (value: unknown, pointer: string): void => {
    if (typeof value !== 'object' || value === null || places.has(value)) return
    places.set(value, pointer)
    for (const key in value) place((value as Record<string, unknown>)[key], `${pointer}/${token(key)}`)
  }
  place(root, '')
  /** Each evaluated subschema, and the schemas it applies to the value it is given (not to a part of it). */
  const evaluated = new Map<object, [target: object, via: string][]>()
  const visit = (schema: unknown, pointer: string): void => {
    if (!isSchemaObject(schema) || evaluated.has(schema)) return
    const inPlace: [object, string][] = []
    evaluated.set(schema, inPlace)
    const node = schema as Marked
    const reference = node.$ref
    if (reference !== undefined) {
      if (typeof reference !== 'string') throw new Error(`$ref at ${at(pointer)} is not a string`)
      const target = lookup[node.__absolute_ref__ ?? reference]
      if (target === undefined) {
        throw new Error(`$ref ${JSON.stringify(reference)} at ${at(pointer)} leads to no schema (a reference must point inside the schema: none is fetched)`)
      }
      if (isSchemaObject(target)) inPlace.push([target, `$ref ${JSON.stringify(reference)} at ${at(pointer)}`])
      visit(target, places.get(target as object) ?? `${pointer}/$ref`)
    }
    // `$recursiveRef: '#'` is applied as the schema its base URI names (where no `$recursiveAnchor` takes over).
    if (node.$recursiveRef === '#' && node.__absolute_recursive_ref__ !== undefined) {
      const target = lookup[node.__absolute_recursive_ref__]
      // With an anchor, which schema it applies depends on the path the check took: not followed for cycles.
      if (isSchemaObject(target)) recursive.push([schema, target, `$recursiveRef "#" at ${at(pointer)}`])
      visit(target, places.get(target as object) ?? `${pointer}/$recursiveRef`)
    }
    // The validator reads 2019-09's `$recursiveRef`, not 2020-12's `$dynamicRef`: a part it would leave unchecked.
    if (node.$dynamicRef !== undefined) throw new Error(`$dynamicRef at ${at(pointer)} is not applied by the validator (a $ref to the schema meant is)`)
    if (node.pattern !== undefined) compiles(node.pattern, `${pointer}/pattern`)
    const patterns = node.patternProperties
    if (isSchemaObject(patterns)) for (const pattern of Object.keys(patterns)) compiles(pattern, `${pointer}/patternProperties`)
    for (const [sub, subPointer, keyword] of subschemas(node, pointer)) {
      if (!applied(node, keyword)) continue
      if (IN_PLACE.has(keyword) && isSchemaObject(sub)) inPlace.push([sub, `the schema at ${at(subPointer)}`])
      visit(sub, subPointer)
    }
  }
  visit(root, '')
  if (![...evaluated.keys()].some((schema) => (schema as Marked).$recursiveAnchor === true)) {
    for (const [from, target, via] of recursive) evaluated.get(from)?.push([target, via])
  }
  // A cycle of schemas each applied to the value the one before it was given.
  const state = new Map<object, 'open' | 'closed'>()
  const follow = (schema: object): void => {
    state.set(schema, 'open')
    for (const [target, via] of evaluated.get(schema) ?? []) {
      const reached = state.get(target)
      if (reached === 'open') {
        throw new Error(`${via} leads back to ${at(places.get(target) ?? '')} without stepping into the input (a check reaching it would never end)`)
      }
      if (reached === undefined) follow(target)
    }
    state.set(schema, 'closed')
  }
  for (const schema of evaluated.keys()) if (!state.has(schema)) follow(schema)
}

/** Keywords whose subschemas apply to the very value their schema is given. */
const IN_PLACE = new Set(['allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else', 'dependentSchemas', 'dependencies'])

/** Whether the validator evaluates `keyword` of `node` at all (some only beside another). */
function applied(node: Record<string, unknown>, keyword: string): boolean {
  switch (keyword) {
    case 'then':
    case 'else':
      return node.if !== undefined
    case 'additionalItems':
      return node.items !== undefined
    case 'unevaluatedProperties':
      return node.additionalProperties === undefined
    default:
      return true
  }
}

const isSchemaObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** `key` as a JSON pointer's token. */
const token = (key: string): string => key.replaceAll('~', '~0').replaceAll('/', '~1')

/** The subschemas of `node`'s keywords the validator evaluates (not its `$defs`: only what references use), with their places and keywords. */
function subschemas(node: Record<string, unknown>, pointer: string): [unknown, string, string][] {
  const found: [unknown, string, string][] = []
  for (const key in node) {
    const sub = node[key]
    const base = `${pointer}/${token(key)}`
    if (Array.isArray(sub)) {
      if (schemaArrayKeyword[key]) sub.forEach((item, index) => found.push([item, `${base}/${index}`, key]))
    } else if (!isSchemaObject(sub)) continue
    else if (schemaKeyword[key]) found.push([sub, base, key])
    // `dependencies` holds a schema or a list of names per property.
    else if ((schemaMapKeyword[key] && key !== '$defs' && key !== 'definitions') || key === 'dependencies') {
      for (const name in sub) if (!Array.isArray(sub[name])) found.push([sub[name], `${base}/${token(name)}`, key])
    }
  }
  return found
}

function compiles(pattern: unknown, pointer: string): void {
  // The validator compiles whatever it is given (`new RegExp(5)` matches "5"): so is it here.
  const source = String(pattern)
  try {
    new RegExp(source, 'u')
  } catch (error) {
    throw new Error(`the pattern ${JSON.stringify(source)} at ${at(pointer)} is not a regular expression (${messageOf(error)})`)
  }
}

/** The errors as one line: where in the input, and what. */
function describeErrors(errors: readonly OutputUnit[], schema: object): string {
  const leaves = errors.filter((error) => !ROLLUPS.has(error.keyword))
  const named = leaves.length > 0 ? leaves : errors
  return listed(named.slice(0, SHOWN_ERRORS).map((error) => `${where(error.instanceLocation)}: ${withPattern(error, schema)}`), named.length)
}

/** The first few of `total` errors, said in `parts`, as one line cut at the message limit. */
function listed(parts: readonly string[], total: number): string {
  const shown = parts.slice(0, SHOWN_ERRORS)
  if (total > SHOWN_ERRORS) shown.push(`and ${total - SHOWN_ERRORS} more`)
  const message = shown.join('; ')
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
  const path = pointerOf(location).slice(1)
  return path === '' ? 'the input' : path
}

/** A location as the validator writes it (`#/a%20b`) as a JSON pointer (`/a b`, `''` for the whole). */
function pointerOf(location: string): string {
  return location
    .replace(/^#/, '')
    .split('/')
    .map((part) => {
      try {
        return decodeURIComponent(part)
      } catch {
        return part
      }
    })
    .join('/')
}

/** What the meta-schema's patterns ask for, which the validator's message does not say. */
const META_PATTERNS: Record<string, string> = {
  $anchor: 'a name starts with a letter or "_", then letters, digits, "-", ".", ":" and "_"',
  $id: 'a URI with no fragment but an empty one',
}

/** A meta-schema's errors that only say a part below them failed. */
const SCHEMA_ROLLUPS = new Set(['anyOf', 'additionalProperties'])

/**
 * What makes a schema no JSON Schema, one error per place in it (`#/properties: Instance type
 * "array" is invalid. Expected "object".`): the first that says what is wrong there, not that an
 * `anyOf` of the meta-schema failed.
 */
function describeSchemaErrors(errors: readonly OutputUnit[]): string {
  const byPlace = new Map<string, string>()
  for (const error of errors) {
    if (ROLLUPS.has(error.keyword) || SCHEMA_ROLLUPS.has(error.keyword) || byPlace.has(error.instanceLocation)) continue
    const pointer = pointerOf(error.instanceLocation)
    // OpenAPI 3.0 and draft 4 write `exclusiveMinimum: true` beside `minimum`, which the validator would compare numbers to.
    const keyword = pointer.slice(pointer.lastIndexOf('/') + 1)
    const said =
      /^exclusive(Min|Max)imum$/.test(keyword) && error.keyword === 'type'
        ? `${error.error.replace(/\.$/, '')} (the bound itself, as from draft 6 on: exclusiveMinimum: 0, not minimum: 0 with exclusiveMinimum: true).`
        : error.keyword === 'pattern' && Object.hasOwn(META_PATTERNS, keyword)
          ? `${error.error.replace(/\.$/, '')}: ${META_PATTERNS[keyword]}.`
          : error.error
    byPlace.set(error.instanceLocation, `${at(pointer)}: ${said}`)
  }
  return listed([...byPlace.values()], byPlace.size)
}
