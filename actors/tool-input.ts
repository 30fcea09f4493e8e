/**
 * A tool's input checked against its `inputSchema` before the call is dispatched, by
 * `@cfworker/json-schema` (JSON Schema 2020-12; no code generation, so it also runs where that is
 * disallowed). What is wrong is told to the model, which can call again with better arguments.
 */
import { type OutputUnit, type Schema, Validator, dereference, ignoredKeyword, initialBaseURI, schemaArrayKeyword, schemaMapKeyword, validate } from '@cfworker/json-schema'
import { messageOf, wellFormed } from '../store/encoding.js'
import { TOOL_INPUT_META_SCHEMA } from './tool-input-meta-schema.js'
import { MAX_CALL_APPLIED, at, checkSchema, isSchemaObject, placesOf, stepsOf, subschemas, token } from './tool-input-walk.js'

/** What is wrong with an input (`undefined`: nothing). */
export type InputCheck = (input: unknown) => string | undefined

/** The check of each admitted tool that has one (a tool without `inputSchema`, or with `validateInput: false`, has none). */
export const inputChecks = new WeakMap<object, InputCheck>()

/** For each check `inputCheckOf` made: the steps checking an input takes, as the check counts them before it runs the validator (`Infinity` past its limit). */
export const inputCheckSteps = new WeakMap<InputCheck, (input: unknown) => number>()

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
 * would recurse without end), chains or fans of references too big to check, a `$dynamicRef` (which
 * the validator does not apply); two subschemas with one `$id`, an `$id` that is not a URI reference.
 */
export function inputCheckOf(schema: object): InputCheck {
  metaValidator ??= new Validator(structuredClone(TOOL_INPUT_META_SCHEMA) as unknown as Schema, '2020-12', false)
  const conformance = metaValidator.validate(schema)
  if (!conformance.valid) throw new Error(`it is not a JSON Schema: ${describeSchemaErrors(conformance.errors, schema)}`)
  // A tool's input is the arguments of a call: a JSON object (also what every provider asks the schema to describe).
  const rootType = (schema as { type?: unknown }).type
  if ((typeof rootType === 'string' || Array.isArray(rootType)) && ![rootType].flat().includes('object')) {
    throw new Error(`its type is ${JSON.stringify(rootType)}, but a tool's input (the arguments of a call) is a JSON object: the schema's type must be "object" or left out`)
  }
  // The validator marks the schema's objects (non-enumerable members): it gets its own copy.
  const copy = structuredClone(schema)
  withoutInstanceAnnotations(copy)
  const places = placesOf(copy)
  // The validator's table of the schema's URIs, as its `Validator` builds it (and keeps to itself).
  let lookup: Record<string, Schema | boolean>
  try {
    lookup = dereference(copy as Schema)
  } catch (error) {
    throw new Error(uriFaultNamed(error, copy, places))
  }
  const root = checkSchema(copy, lookup, places)
  const check: InputCheck = (input) => {
    // Nested parts each checked against every branch of an anyOf that reaches them multiply: bounded before the validator starts.
    if (stepsOf(root, input, lookup) > MAX_CALL_APPLIED) {
      return `the input: too costly to check against its schema, more than ${MAX_CALL_APPLIED.toLocaleString('en-US')} steps (each nested part is checked against every branch of an anyOf or oneOf that reaches it, so nesting multiplies them; uniqueItems compares every item with every other): a smaller or less deeply nested input can be checked`
    }
    let result: ReturnType<typeof validate>
    try {
      result = validate(input, copy as Schema, '2020-12', lookup, false)
    } catch (error) {
      // The schema was admitted, so its references and patterns hold: what overflows is the input's nesting, or its errors' list.
      if (error instanceof RangeError) {
        return `the input: too deeply nested or with too many errors to be checked against its schema (${messageOf(error)}): a smaller input can be checked`
      }
      return `its input schema could not be applied (${messageOf(error)})`
    }
    return result.valid ? undefined : describeErrors(result.errors, copy)
  }
  inputCheckSteps.set(check, (input) => stepsOf(root, input, lookup))
  return check
}

/**
 * Removes from `root`'s schemas the annotations whose values are instances, not schemas (OpenAPI's
 * `example`, `examples`): the validator never reads them, but registers an `id` in them as a
 * schema's, so `example: { id: 'u1' }` on two properties would be two schemas with one URI.
 * Only where a schema stands: through schema keywords, never into an unknown one.
 */
function withoutInstanceAnnotations(root: object): void {
  const seen = new Set<object>()
  const stack: unknown[] = [root]
  while (stack.length > 0) {
    const node = stack.pop()
    if (!isSchemaObject(node) || seen.has(node)) continue
    seen.add(node)
    delete node.example
    delete node.examples
    // Where schemas stand: the subschemas of its keywords, and its definitions (a reference may use any).
    for (const [sub] of subschemas(node, '')) stack.push(sub)
    for (const key of ['$defs', 'definitions']) {
      const definitions = node[key]
      if (isSchemaObject(definitions)) for (const name in definitions) stack.push(definitions[name])
    }
  }
}

/**
 * The validator's refusal of the schema's URIs with the places that cause it: two subschemas with
 * one URI (an `$id`, or an `id` as drafts 3 and 4 wrote it, resolved against the enclosing one's), or
 * an id that is no URI reference.
 */
function uriFaultNamed(error: unknown, root: object, places: Map<object, string>): string {
  const message = messageOf(error)
  /** A subschema's id as the validator reads it (any value but an empty one: `id: ["a"]` too). */
  const idOf = (value: unknown): [key: string, id: unknown] | undefined =>
    !isSchemaObject(value) ? undefined : value.$id ? ['$id', value.$id] : value.id ? ['id', value.id] : undefined
  const named = (value: object): string => {
    const place = at(places.get(value) ?? '')
    const id = idOf(value)
    return id === undefined ? place : `${place}/${id[0]} ${JSON.stringify(id[1])}`
  }
  if (error instanceof TypeError) {
    let bad: ReturnType<typeof firstUnresolved>
    try {
      bad = firstUnresolved(root, initialBaseURI, '')
    } catch {
      // Nested deeper than a stack holds: the message alone.
    }
    return bad === undefined ? message : `${at(places.get(bad.schema) ?? '')}/${bad.key} ${JSON.stringify(bad.schema[bad.key])} is not a URI reference (${message})`
  }
  const duplicate = /^Duplicate schema URI "(.*)"\.$/.exec(message)?.[1]
  if (duplicate === undefined) return message
  // The validator's table of URIs again, recording each schema registered under the URI instead of refusing the second.
  const registered = new Set<object>()
  const lookup = new Proxy(Object.create(null) as Record<string, Schema>, {
    get: () => undefined,
    set: (_, uri, schema: unknown) => {
      if (uri === duplicate && typeof schema === 'object' && schema !== null) registered.add(schema)
      return true
    },
  })
  try {
    dereference(root as Schema, lookup)
  } catch {
    // The same walk as the validator's, which got as far: the places found so far are named.
  }
  const naming = [...registered].map(named)
  if (naming.length < 2) return `two of its schemas have one URI (${duplicate}): an $id must name one schema`
  const drafts = [...registered].some((schema) => idOf(schema)?.[0] === 'id') ? ', as must an id, which the validator reads as drafts 3 and 4 wrote $id' : ''
  return `two of its schemas have one URI: ${listed(naming, naming.length)} (an $id must name one schema${drafts})`
}

/**
 * The first id or reference the validator cannot resolve against its base URI, met as its
 * `dereference` meets them: ids first (a schema's own `$id` its children's base), then `$ref` and
 * `$recursiveRef`, through every keyword it does not ignore (not `default`, `enum`, `const`).
 */
function firstUnresolved(schema: unknown, base: URL, pointer: string): { schema: Record<string, unknown>; key: string } | undefined {
  if (!isSchemaObject(schema)) return undefined
  const key = schema.$id ? '$id' : schema.id ? 'id' : undefined
  if (key !== undefined) {
    let url: URL
    try {
      url = new URL(String(schema[key]), base.href)
    } catch {
      return { schema, key }
    }
    if (url.hash.length <= 1) {
      url.hash = ''
      // The validator registers the schema under its own URI too, from there.
      if (pointer === '') base = url
      else {
        const found = firstUnresolved(schema, base, '')
        if (found !== undefined) return found
      }
    }
  }
  for (const reference of ['$ref', '$recursiveRef']) {
    if (!schema[reference]) continue
    try {
      new URL(String(schema[reference]), base.href)
    } catch {
      return { schema, key: reference }
    }
  }
  for (const name in schema) {
    if (ignoredKeyword[name]) continue
    const sub = schema[name]
    const below = `${pointer}/${token(name)}`
    const subs: [unknown, string][] = Array.isArray(sub)
      ? schemaArrayKeyword[name]
        ? sub.map((item, index) => [item, `${below}/${index}`])
        : []
      : schemaMapKeyword[name] && isSchemaObject(sub)
        ? Object.keys(sub).map((item) => [sub[item], `${below}/${token(item)}`])
        : [[sub, below]]
    for (const [item, itemPointer] of subs) {
      const found = firstUnresolved(item, base, itemPointer)
      if (found !== undefined) return found
    }
  }
  return undefined
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
  // The validator ends each error with a period: one sentence, its parts joined by semicolons.
  const message = shown.map((part, index) => (index < shown.length - 1 ? part.replace(/\.$/, '') : part)).join('; ')
  // A cut through a surrogate pair leaves half of it, which no fact holds: made well-formed, as an approver's reason is.
  return wellFormed(message.length > MESSAGE_LIMIT ? `${message.slice(0, MESSAGE_LIMIT)}…` : message)
}

/** A `pattern` error names the pattern (the validator's own message does not), where the schema has it. */
function withPattern(error: OutputUnit, schema: object): string {
  if (error.keyword !== 'pattern') return error.error
  const pattern = valueAt(schema, pointerOf(error.keywordLocation))
  return typeof pattern === 'string' ? `${error.error.replace(/\.$/, '')} ${JSON.stringify(pattern)}.` : error.error
}

/** What is at `pointer` (RFC 6901) in `root`, if anything. */
function valueAt(root: unknown, pointer: string): unknown {
  let node = root
  for (const part of pointer.split('/').slice(1)) {
    if (typeof node !== 'object' || node === null) return undefined
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~')
    node = Object.hasOwn(node, key) ? (node as Record<string, unknown>)[key] : undefined
  }
  return node
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
 * "array" is invalid. Expected "object".`): the one that says what is wrong there, not that an
 * `anyOf` of the meta-schema failed. Where the meta-schema allows either of two forms (`type`: a
 * name or a list of names), the error of the form the value has (`#/type: Array has too few
 * items`), not of the other one.
 */
function describeSchemaErrors(errors: readonly OutputUnit[], schema: object): string {
  const byPlace = new Map<string, OutputUnit[]>()
  for (const error of errors) {
    if (ROLLUPS.has(error.keyword) || SCHEMA_ROLLUPS.has(error.keyword)) continue
    const found = byPlace.get(error.instanceLocation)
    if (found === undefined) byPlace.set(error.instanceLocation, [error])
    else found.push(error)
  }
  const said: string[] = []
  for (const [place, found] of byPlace) {
    const [error, ofItsForm] = telling(found)
    // A list whose fault is in a member (`type: ['strin']`): the member's error says it.
    if (!ofItsForm && [...byPlace.keys()].some((other) => other.startsWith(`${place}/`))) continue
    const pointer = pointerOf(place)
    const keyword = pointer.slice(pointer.lastIndexOf('/') + 1)
    // Is the error about that keyword (not about a property with its name)?
    const about = (check: string): boolean => error.keywordLocation.endsWith(`/properties/${keyword}/${check}`)
    // OpenAPI 3.0 and draft 4 write `exclusiveMinimum: true` beside `minimum`, which the validator would compare numbers to.
    const bound = /^exclusive(Min|Max)imum$/.exec(keyword)?.[1]
    const text =
      bound !== undefined && about('type')
        ? `${error.error.replace(/\.$/, '')} (${
            valueAt(schema, pointer) === false
              ? `for false, leave it out: from draft 6 on, ${keyword} is the bound itself`
              : `the bound itself, as from draft 6 on: ${keyword}: ${bound === 'Min' ? 0 : 10}, not ${bound === 'Min' ? 'minimum: 0' : 'maximum: 10'} with ${keyword}: true`
          }).`
        : Object.hasOwn(META_PATTERNS, keyword) && about('pattern')
          ? `${error.error.replace(/\.$/, '')}: ${META_PATTERNS[keyword]}.`
          : error.error
    said.push(`${at(pointer)}: ${text}`)
  }
  return listed(said, said.length)
}

/**
 * Of the errors at one place, the one that tells what is wrong, and whether it is of the form the
 * value has: one from a branch of the meta-schema's `anyOf` whose type the value has; else, where
 * the value has the type of no branch, the types they expect together (`type: 5`: `Expected
 * "string", "array".`); else the first.
 */
function telling(errors: readonly OutputUnit[]): [error: OutputUnit, ofItsForm: boolean] {
  const branch = (error: OutputUnit): string => /^(.*\/anyOf\/\d+)\//.exec(error.keywordLocation)?.[1] ?? ''
  const typeErrors = errors.filter((error) => error.keyword === 'type')
  const mistyped = new Set(typeErrors.map(branch))
  const ofItsForm = errors.find((error) => error.keyword !== 'type' && !mistyped.has(branch(error)))
  if (ofItsForm !== undefined) return [ofItsForm, true]
  const expected = typeErrors.map((error) => /^(.* is invalid\. Expected )(.*)\.$/.exec(error.error))
  const first = expected[0]
  if (mistyped.size > 1 && first && expected.every((found) => found !== null)) {
    const types = [...new Set(expected.flatMap((found) => (found as RegExpExecArray)[2]?.split(', ') ?? []))]
    return [{ ...(typeErrors[0] as OutputUnit), error: `${first[1]}${types.join(', ')}.` }, false]
  }
  return [errors.find((error) => error.keyword !== 'type') ?? (errors[0] as OutputUnit), false]
}
