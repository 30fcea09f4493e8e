/**
 * A tool's input checked against its `inputSchema` before the call is dispatched, by
 * `@cfworker/json-schema` (JSON Schema 2020-12; no code generation, so it also runs where that is
 * disallowed). What is wrong is told to the model, which can call again with better arguments.
 */
import { type OutputUnit, type Schema, Validator, dereference, ignoredKeyword, initialBaseURI, schemaArrayKeyword, schemaKeyword, schemaMapKeyword, validate } from '@cfworker/json-schema'
import { messageOf, wellFormed } from '../store/encoding.js'
import { TOOL_INPUT_META_SCHEMA } from './tool-input-meta-schema.js'

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

/** A subschema as the validator marked it: its references resolved against its base URI. */
type Marked = Record<string, unknown> & { __absolute_ref__?: string; __absolute_recursive_ref__?: string }

/** `pointer` (RFC 6901, `''` for the schema itself) as a message shows it. */
const at = (pointer: string): string => `#${pointer}`

/**
 * Throws when a part of `schema` that a check can reach would fail every check that reaches it: a
 * reference the validator cannot resolve (it resolves them only when a check reaches them, so one
 * in a branch few inputs take would fail only those calls), a pattern that does not compile (as
 * the validator compiles it: as a string, with the `u` flag), references that lead back to where
 * they are without stepping into the input (`{ allOf: [{ $ref: '#' }] }`: the validator would apply
 * the same schema to the same value until the stack overflows), more schemas applied one inside
 * another to one value than it can follow, or more applied to one value in all than a call can
 * afford (every branch of an `anyOf` is checked: branches through references multiply). Walks what
 * the validator evaluates: the subschemas of its keywords, and the schemas references lead to; not
 * vendor keywords, annotations such as `examples`, `$defs` no reference uses, or a keyword the
 * validator skips where it stands (`then` without `if`). A `$dynamicRef` it reaches throws too: the validator would leave that part of the
 * input unchecked.
 *
 * The walk is over what the validator carries from schema to schema: a subschema, and the schema a
 * `$recursiveRef: '#'` there resolves to (set by the first `$recursiveAnchor: true` on the way,
 * dropped entering `allOf`/`anyOf`/`oneOf` of a schema without one); the anchor is kept apart only
 * where a `$recursiveRef` can be reached, else one anchor would multiply the walk by every schema it
 * reaches. Iterative: a chain of thousands of definitions overflows no stack here.
 */
function checkSchema(root: object, lookup: Record<string, unknown>, places: Map<object, string>): Walked {
  const recursing = reachingRecursiveRef(root, lookup, places)
  const states = new Map<object, Map<object | null, Walked>>()
  const pending: Walked[] = []
  const all: Walked[] = []
  /** States first met while one is walked: walked next, in the document's order. */
  let found: Walked[] = []
  const stateOf = (schema: Record<string, unknown>, carried: object | null, pointer: string): Walked => {
    // Where no `$recursiveRef` can be reached the anchor changes nothing: one state, not one per anchor.
    const anchor = recursing.has(schema) ? carried : null
    let byAnchor = states.get(schema)
    if (byAnchor === undefined) states.set(schema, (byAnchor = new Map()))
    let state = byAnchor.get(anchor)
    if (state === undefined) {
      state = { schema: schema as Marked, anchor, pointer: places.get(schema) ?? pointer, next: [], into: [] }
      byAnchor.set(anchor, state)
      all.push(state)
      found.push(state)
      if (all.length - states.size > MAX_REANCHORED) {
        throw new Error(
          `its subschemas would be checked under more than ${MAX_REANCHORED.toLocaleString('en-US')} combinations of $recursiveAnchor and $recursiveRef (a schema this entangled cannot be checked when it is admitted)`,
        )
      }
    }
    return state
  }
  const rootState = stateOf(root as Record<string, unknown>, null, '')
  pending.push(...found) // the root alone
  while (pending.length > 0) {
    const state = pending.pop() as Walked
    found = []
    for (const step of stepsFrom(state.schema, state.pointer, state.anchor, lookup)) {
      const next = stateOf(step.to, step.anchor, step.pointer)
      if (step.inPlace) state.next.push({ to: next, via: step.via, reference: step.reference, keyword: step.keyword, name: step.name })
      else state.into.push({ to: next, keyword: step.keyword, name: step.name })
    }
    for (let index = found.length - 1; index >= 0; index--) pending.push(found[index] as Walked)
  }
  for (const state of all) if (state.mark === undefined) followFrom(state, places)
  return rootState
}

/** The most states beyond one per subschema the walk takes on (each a subschema met under another anchor). */
const MAX_REANCHORED = 20_000

/** Where the validator goes from a subschema: to a subschema or a referenced schema, carrying an anchor; `inPlace` when it applies that schema to the same value. */
interface Step {
  to: Record<string, unknown>
  anchor: object | null
  pointer: string
  via: string
  reference: boolean
  inPlace: boolean
  /** The keyword the step is under (`properties`, `items`, …), and the name or index under it. */
  keyword?: string
  name?: string
}

/** A schema with nothing to apply below it, standing for `true` and `false` (each applied as one schema). */
const LEAF: Record<string, unknown> = Object.freeze({})

/** The steps the validator takes from `node` (at `pointer`, given the recursive anchor `anchor`). */
function stepsFrom(node: Marked, pointer: string, anchor: object | null, lookup: Record<string, unknown>): Step[] {
  const steps: Step[] = []
  // As the validator does: the first `$recursiveAnchor: true` met is where `$recursiveRef: '#'` leads.
  const carried = node.$recursiveAnchor === true && anchor === null ? node : anchor
  if (node.$recursiveRef === '#' && node.__absolute_recursive_ref__ !== undefined) {
    const via = `$recursiveRef "#" at ${at(pointer)}`
    // Without an anchor, the validator applies this same schema again, with the base URI's schema as the anchor.
    if (carried === null) {
      const target = lookup[node.__absolute_recursive_ref__]
      if (isSchemaObject(target)) steps.push({ to: node, anchor: target, pointer, via, reference: true, inPlace: true })
    } else steps.push({ to: carried as Record<string, unknown>, anchor: carried, pointer: `${pointer}/$recursiveRef`, via, reference: true, inPlace: true })
  }
  if (typeof node.$ref === 'string') {
    const found = lookup[node.__absolute_ref__ ?? node.$ref]
    const target = typeof found === 'boolean' ? LEAF : found
    if (isSchemaObject(target)) steps.push({ to: target, anchor: carried, pointer: `${pointer}/$ref`, via: `$ref ${JSON.stringify(node.$ref)} at ${at(pointer)}`, reference: true, inPlace: true, keyword: '$ref' })
  }
  for (const [found, subPointer, keyword, name] of subschemas(node, pointer)) {
    // `true` and `false` are schemas too: applied, with nothing below them.
    const sub = typeof found === 'boolean' ? LEAF : found
    if (!applied(node, keyword) || !isSchemaObject(sub)) continue
    const subAnchor = COMBINATIONS.has(keyword) && node.$recursiveAnchor !== true ? null : carried
    steps.push({ to: sub, anchor: subAnchor, pointer: subPointer, via: `the schema at ${at(subPointer)}`, reference: false, inPlace: IN_PLACE.has(keyword), keyword, name })
  }
  return steps
}

/**
 * Checks each subschema a check can reach (`checkNode`, in document order), and returns those from
 * which a `$recursiveRef: '#'` can be reached: only there does the anchor a check carries matter.
 */
function reachingRecursiveRef(root: object, lookup: Record<string, unknown>, places: Map<object, string>): Set<object> {
  const cameFrom = new Map<object, object[]>([[root, []]])
  const recursiveRefs: object[] = []
  const pending: [Marked, string][] = [[root as Marked, '']]
  while (pending.length > 0) {
    const [node, pointer] = pending.pop() as [Marked, string]
    checkNode(node, pointer, lookup)
    if (node.$recursiveRef === '#' && node.__absolute_recursive_ref__ !== undefined) recursiveRefs.push(node)
    const met: [Marked, string][] = []
    const steps: { to: unknown; pointer: string }[] = stepsFrom(node, pointer, null, lookup)
    // Without an anchor on the way, `$recursiveRef: '#'` leads to its base URI's schema (with one, to the anchor, met before).
    if (node.$recursiveRef === '#' && node.__absolute_recursive_ref__ !== undefined) steps.push({ to: lookup[node.__absolute_recursive_ref__], pointer: `${pointer}/$recursiveRef` })
    for (const step of steps) {
      if (!isSchemaObject(step.to)) continue
      const sources = cameFrom.get(step.to)
      if (sources !== undefined) sources.push(node)
      else {
        cameFrom.set(step.to, [node])
        met.push([step.to as Marked, places.get(step.to) ?? step.pointer])
      }
    }
    for (let index = met.length - 1; index >= 0; index--) pending.push(met[index] as [Marked, string])
  }
  const reaching = new Set<object>(recursiveRefs)
  const back = [...recursiveRefs]
  while (back.length > 0) {
    for (const source of cameFrom.get(back.pop() as object) ?? []) {
      if (!reaching.has(source)) {
        reaching.add(source)
        back.push(source)
      }
    }
  }
  return reaching
}

/** A subschema as the walk meets it: with the schema `$recursiveRef: '#'` resolves to there, and the schemas it applies to the value it is given. */
interface Walked {
  schema: Marked
  anchor: object | null
  pointer: string
  next: { to: Walked; via: string; reference: boolean; keyword: string | undefined; name: string | undefined }[]
  /** The schemas it applies to parts of the value (`properties`, `items`, …): under which keyword, at which name or index. */
  into: { to: Walked; keyword: string | undefined; name: string | undefined }[]
  mark?: 'open' | 'closed'
  /** The most schemas applied one inside another to one value, from this one. */
  depth?: number
  /** How many schemas are applied to one value from this one, all branches counted (up to just past the limit). */
  applied?: number
}

/** The most schemas the validator applies one inside another to one value (it has a stack for about 550, input parts included). */
const MAX_IN_PLACE = 128

/** The most schemas the validator may apply to one value, all branches counted (~2 µs each here; past ~65,000 errors its list of them overflows the stack). */
const MAX_APPLIED = 50_000

/** One plus what the schemas applied in place apply (of `then` and `else`, whichever applies more); up to just past the limit. */
function appliedBelow(state: Walked): number {
  let sum = 1
  let conditional = 0
  for (const step of state.next) {
    if (step.keyword === 'then' || step.keyword === 'else') conditional = Math.max(conditional, step.to.applied ?? 0)
    else sum += step.to.applied ?? 0
  }
  return Math.min(MAX_APPLIED + 1, sum + conditional)
}

/** Depth-first from `start` over schemas applied to the same value: throws at a cycle, or at a chain longer than the validator can follow. */
function followFrom(start: Walked, places: Map<object, string>): void {
  const path: { state: Walked; index: number; entered?: Walked['next'][number] }[] = [{ state: start, index: 0 }]
  start.mark = 'open'
  while (path.length > 0) {
    const top = path[path.length - 1] as (typeof path)[number]
    const edge = top.state.next[top.index]
    if (edge !== undefined) {
      top.index += 1
      if (edge.to.mark === 'open') {
        // Named by the last reference on the loop (a loop has one: subschemas alone nest).
        const loop = [edge, ...path.slice(path.findIndex((step) => step.state === edge.to) + 1).map((step) => step.entered).reverse()]
        const closing = loop.find((step) => step?.reference) ?? edge
        throw new Error(`${closing.via} leads back to ${at(places.get(closing.to.schema) ?? closing.to.pointer)} without stepping into the input (a check reaching it would never end)`)
      }
      if (edge.to.mark === undefined) {
        edge.to.mark = 'open'
        path.push({ state: edge.to, index: 0, entered: edge })
      }
      continue
    }
    const state = top.state
    state.mark = 'closed'
    state.depth = 1 + state.next.reduce((most, step) => Math.max(most, step.to.depth ?? 0), 0)
    state.applied = appliedBelow(state)
    if (state.depth > MAX_IN_PLACE) {
      throw new Error(
        `from ${at(state.pointer)}, ${state.depth} schemas are applied one inside another to one value (through references, allOf, anyOf, …): more than the validator can follow (${MAX_IN_PLACE})`,
      )
    }
    if (state.applied > MAX_APPLIED) {
      throw new Error(
        `from ${at(state.pointer)}, more than ${MAX_APPLIED.toLocaleString('en-US')} schemas are applied to one value (branches of allOf, anyOf, oneOf and the like through references multiply, and the validator checks every branch at each call)`,
      )
    }
    path.pop()
  }
}

/** The most schemas one call's check may apply, all parts of the input and branches counted (~1.5 µs each here). */
const MAX_CALL_APPLIED = 500_000

/**
 * How many steps checking `input` from `root` takes (`Infinity` past `MAX_CALL_APPLIED`; 0 for an
 * input nested deeper than a stack holds, which the validator then reports): schemas applied, as
 * the validator applies them (a schema, the ones applied in place, those of its keywords to each
 * part they reach), plus the comparisons of `uniqueItems`. Counted once per schema and part of the
 * input (or distinct string, number, …): polynomial where the validator's own walk is exponential. `then` or `else` as `if` decides
 * (the validator asked, once per schema and part); `unevaluated…` for every part, never fewer than
 * the validator takes.
 */
function stepsOf(root: Walked, input: unknown, lookup: Record<string, Schema | boolean>): number {
  const counted = new Map<Walked, Map<unknown, number>>()
  const patterns = new Map<string, RegExp>()
  const count = (state: Walked, value: unknown): number => {
    let byValue = counted.get(state)
    if (byValue === undefined) counted.set(state, (byValue = new Map()))
    const known = byValue.get(value)
    if (known !== undefined) return known
    let sum = 1
    const add = (more: number): void => {
      sum += more
      if (sum > MAX_CALL_APPLIED) throw TOO_COSTLY
    }
    let conditional = false
    for (const step of state.next) {
      if (step.keyword === 'then' || step.keyword === 'else') conditional = true
      else if (step.keyword === 'dependentSchemas' || step.keyword === 'dependencies') {
        // Applied to an object that has the member.
        if (isSchemaObject(value) && Object.hasOwn(value, step.name as string)) add(count(step.to, value))
      } else add(count(step.to, value))
    }
    if (conditional) {
      // Which of `then` and `else` applies is `if`'s to say: asked of the validator, within what `if` was counted at above.
      const condition = state.next.find((step) => step.keyword === 'if')?.to
      const holds = validate(value, state.schema.if as Schema | boolean, '2020-12', lookup, true, condition?.anchor ?? null).valid
      const taken = state.next.find((step) => step.keyword === (holds ? 'then' : 'else'))
      if (taken !== undefined) add(count(taken.to, value))
    }
    if (typeof value === 'object' && value !== null) {
      for (const { to, keyword, name } of state.into) for (const part of partsOf(value, keyword, name, state.schema, patterns)) add(count(to, part))
      // Every item compared with every other.
      if (state.schema.uniqueItems === true && Array.isArray(value)) add(value.length * (value.length - 1))
    }
    byValue.set(value, sum)
    return sum
  }
  try {
    return count(root, input)
  } catch (error) {
    if (error === TOO_COSTLY) return Infinity
    // Nested deeper than a stack holds: the validator says so.
    return 0
  }
}

const TOO_COSTLY = new Error('too costly')

/** The parts of `value` a schema under `keyword` (at `name`) of `schema` is applied to (never fewer than the validator takes). */
function partsOf(value: object, keyword: string | undefined, name: string | undefined, schema: Record<string, unknown>, patterns: Map<string, RegExp>): unknown[] {
  const patternOf = (source: string): RegExp => {
    let pattern = patterns.get(source)
    if (pattern === undefined) patterns.set(source, (pattern = new RegExp(source, 'u')))
    return pattern
  }
  if (Array.isArray(value)) {
    // `items` takes up after `prefixItems`; `additionalItems` after a list of `items`.
    const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems.length : 0
    switch (keyword) {
      case 'prefixItems':
        return value.slice(Number(name), Number(name) + 1)
      case 'items':
        // A list of `items` goes on from where `prefixItems` stopped, as one schema does.
        return name === undefined ? value.slice(prefix) : Number(name) >= prefix ? value.slice(Number(name), Number(name) + 1) : []
      case 'additionalItems':
        return Array.isArray(schema.items) ? value.slice(Math.max(prefix, schema.items.length)) : []
      case 'unevaluatedItems':
      case 'contains':
        return value
      default:
        return []
    }
  }
  const record = value as Record<string, unknown>
  switch (keyword) {
    case 'properties':
      return name !== undefined && Object.hasOwn(record, name) ? [record[name]] : []
    case 'patternProperties':
      return Object.keys(record)
        .filter((key) => patternOf(name as string).test(key))
        .map((key) => record[key])
    case 'additionalProperties': {
      // The members neither `properties` nor `patternProperties` of the same schema took.
      const named = isSchemaObject(schema.properties) ? schema.properties : {}
      const keyed = isSchemaObject(schema.patternProperties) ? Object.keys(schema.patternProperties).map(patternOf) : []
      return Object.keys(record)
        .filter((key) => !Object.hasOwn(named, key) && !keyed.some((pattern) => pattern.test(key)))
        .map((key) => record[key])
    }
    case 'unevaluatedProperties':
      return Object.values(record)
    case 'propertyNames':
      return Object.keys(record)
    default:
      return []
  }
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

/** Where each object of `root` is (RFC 6901; `''` for `root`): the first place met in document order. */
function placesOf(root: object): Map<object, string> {
  const places = new Map<object, string>()
  const stack: [unknown, string][] = [[root, '']]
  while (stack.length > 0) {
    const [value, pointer] = stack.pop() as [unknown, string]
    if (typeof value !== 'object' || value === null || places.has(value)) continue
    places.set(value, pointer)
    const keys = Object.keys(value)
    for (let index = keys.length - 1; index >= 0; index--) {
      const key = keys[index] as string
      stack.push([(value as Record<string, unknown>)[key], `${pointer}/${token(key)}`])
    }
  }
  return places
}

/** What fails at `node` itself whenever a check reaches it. */
function checkNode(node: Marked, pointer: string, lookup: Record<string, unknown>): void {
  const reference = node.$ref
  if (reference !== undefined) {
    if (typeof reference !== 'string') throw new Error(`$ref at ${at(pointer)} is not a string`)
    if (lookup[node.__absolute_ref__ ?? reference] === undefined) {
      throw new Error(`$ref ${JSON.stringify(reference)} at ${at(pointer)} leads to no schema (a reference must point inside the schema: none is fetched)`)
    }
  }
  // The validator reads 2019-09's `$recursiveRef`, not 2020-12's `$dynamicRef`: a part it would leave unchecked.
  if (node.$dynamicRef !== undefined) throw new Error(`$dynamicRef at ${at(pointer)} is not applied by the validator (a $ref to the schema meant is)`)
  if (node.pattern !== undefined) compiles(node.pattern, `${pointer}/pattern`)
  const patterns = node.patternProperties
  if (isSchemaObject(patterns)) for (const pattern of Object.keys(patterns)) compiles(pattern, `${pointer}/patternProperties`)
}

/** Keywords whose subschemas apply to the very value their schema is given. */
const IN_PLACE = new Set(['allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else', 'dependentSchemas', 'dependencies'])
/** Keywords that drop the recursive anchor unless their own schema declares one (as the validator does). */
const COMBINATIONS = new Set(['allOf', 'anyOf', 'oneOf'])

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
function subschemas(node: Record<string, unknown>, pointer: string): [sub: unknown, pointer: string, keyword: string, name?: string][] {
  const found: [unknown, string, string, string?][] = []
  for (const key in node) {
    const sub = node[key]
    const base = `${pointer}/${token(key)}`
    if (Array.isArray(sub)) {
      if (schemaArrayKeyword[key]) sub.forEach((item, index) => found.push([item, `${base}/${index}`, key, String(index)]))
    } else if (typeof sub === 'boolean') {
      if (schemaKeyword[key]) found.push([sub, base, key])
    } else if (!isSchemaObject(sub)) continue
    else if (schemaKeyword[key]) found.push([sub, base, key])
    // `dependencies` holds a schema or a list of names per property.
    else if ((schemaMapKeyword[key] && key !== '$defs' && key !== 'definitions') || key === 'dependencies') {
      for (const name in sub) if (!Array.isArray(sub[name])) found.push([sub[name], `${base}/${token(name)}`, key, name])
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
