/**
 * The walk over a tool's input schema as `@cfworker/json-schema` applies it: from each subschema to
 * the ones its keywords and references apply, carrying `$recursiveRef`'s anchor. At admission it
 * refuses what would fail or never end at every call (`checkSchema`); at each call it counts the
 * steps a check would take before the validator runs (`stepsOf`). `tool-input.ts` uses both.
 */
import { type Schema, schemaArrayKeyword, schemaKeyword, schemaMapKeyword, validate } from '@cfworker/json-schema'
import { messageOf } from '../store/encoding.js'

/** A subschema as the validator marked it: its references resolved against its base URI. */
type Marked = Record<string, unknown> & { __absolute_ref__?: string; __absolute_recursive_ref__?: string }

/** `pointer` (RFC 6901, `''` for the schema itself) as a message shows it. */
export const at = (pointer: string): string => `#${pointer}`

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
 * validator skips where it stands (`then` without `if`). A `$dynamicRef` it reaches throws too: the
 * validator would leave that part of the input unchecked. Returns where a check starts, the root's
 * state, for `stepsOf`.
 *
 * The walk is over what the validator carries from schema to schema: a subschema, and the schema a
 * `$recursiveRef: '#'` there resolves to (set by the first `$recursiveAnchor: true` on the way,
 * dropped entering `allOf`/`anyOf`/`oneOf` of a schema without one); the anchor is kept apart only
 * where a `$recursiveRef` can be reached, else one anchor would multiply the walk by every schema it
 * reaches. Iterative: a chain of thousands of definitions overflows no stack here.
 */
export function checkSchema(root: object, lookup: Record<string, unknown>, places: Map<object, string>): Walked {
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

/** Whether `node` holds a `$recursiveRef: '#'` the validator resolved (the only one it applies). */
const recursesHere = (node: Marked): node is Marked & { __absolute_recursive_ref__: string } => node.$recursiveRef === '#' && node.__absolute_recursive_ref__ !== undefined

/** The steps the validator takes from `node` (at `pointer`, given the recursive anchor `anchor`). */
function stepsFrom(node: Marked, pointer: string, anchor: object | null, lookup: Record<string, unknown>): Step[] {
  const steps: Step[] = []
  // As the validator does: the first `$recursiveAnchor: true` met is where `$recursiveRef: '#'` leads.
  const carried = node.$recursiveAnchor === true && anchor === null ? node : anchor
  if (recursesHere(node)) {
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
    if (recursesHere(node)) recursiveRefs.push(node)
    const met: [Marked, string][] = []
    const steps: { to: unknown; pointer: string }[] = stepsFrom(node, pointer, null, lookup)
    // Without an anchor on the way, `$recursiveRef: '#'` leads to its base URI's schema (with one, to the anchor, met before).
    if (recursesHere(node)) steps.push({ to: lookup[node.__absolute_recursive_ref__], pointer: `${pointer}/$recursiveRef` })
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
export interface Walked {
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
export const MAX_CALL_APPLIED = 500_000

/**
 * How many steps checking `input` from `root` takes (`Infinity` past `MAX_CALL_APPLIED`; 0 for an
 * input nested deeper than a stack holds, which the validator then reports): schemas applied, as
 * the validator applies them (a schema, the ones applied in place, those of its keywords to each
 * part they reach), plus the comparisons of `uniqueItems` (weighed by what one costs against a
 * schema applied). Counted once per schema and part of the input (or distinct string, number, …):
 * polynomial where the validator's own walk is exponential. `then` or `else` as `if` decides (the
 * validator asked, once per schema and part); `unevaluated…` for every part, never fewer than the
 * validator takes.
 */
export function stepsOf(root: Walked, input: unknown, lookup: Record<string, Schema | boolean>): number {
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
      // Every item compared with every other: about 4 ns a pair of strings or numbers, 30 ns of small objects, against ~1 µs a step.
      if (state.schema.uniqueItems === true && Array.isArray(value)) {
        const pairs = value.length * (value.length - 1)
        add(Math.ceil(pairs / (value.some((item) => typeof item === 'object' && item !== null) ? 32 : 256)))
      }
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

/** Where each object of `root` is (RFC 6901; `''` for `root`): the first place met in document order. */
export function placesOf(root: object): Map<object, string> {
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

export const isSchemaObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** `key` as a JSON pointer's token. */
export const token = (key: string): string => key.replaceAll('~', '~0').replaceAll('/', '~1')

/** The subschemas of `node`'s keywords the validator evaluates (not its `$defs`: only what references use), with their places and keywords. */
export function subschemas(node: Record<string, unknown>, pointer: string): [sub: unknown, pointer: string, keyword: string, name?: string][] {
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
