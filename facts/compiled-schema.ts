/**
 * A validating copier compiled from the zod schemas at module load: one pass over a value that
 * answers either the exact value the store's slow path (`storageProblem` rules, then
 * `schema.safeParse`, then dropping `undefined` members) would produce, or `undefined` when it is
 * not sure. It never decides a refusal: `undefined` only sends the caller to the slow path, which
 * produces the error. facts/schema.ts stays the one source of truth: the compiler reads each
 * schema's `_zod.def` and throws at load on anything whose semantics it does not reproduce.
 */
import { z } from 'zod'
import { runtimeEventSchema } from './schema.js'
import type { RuntimeEvent } from './types.js'

/**
 * Copies `value` as the schema's parse would, or answers `undefined` when the value is invalid or
 * unusual. `maxDepth` is the deepest an object or array may sit (the top value at depth 0).
 */
export type SchemaCopier<T> = (value: unknown, maxDepth: number) => T | undefined

/** Thrown at load when a schema holds a construct the compiler does not reproduce exactly. */
export class UnsupportedSchemaError extends Error {
  /** Where in the schema the construct sits, e.g. `(root).fact[tool.settled].outcome`. */
  readonly path: string

  constructor(path: string, what: string) {
    super(`${path}: ${what} is not supported by the compiled copier (facts/compiled-schema.ts); extend it or keep the schema within it`)
    this.name = 'UnsupportedSchemaError'
    this.path = path
  }
}

/**
 * What the compiler reads of zod's internals (`schema._zod`); store/shaped-writer.ts walks the same
 * schemas through it. `traits` names every constructor a schema was built by.
 */
export interface Internals {
  readonly def: Def
  readonly traits: ReadonlySet<string>
  readonly values?: ReadonlySet<unknown>
  readonly propValues?: Readonly<Record<string, ReadonlySet<unknown>>>
  readonly innerType?: Schema
}
/** A zod schema as the compiler sees it. */
export interface Schema {
  readonly _zod: Internals
}
/** A schema's `_zod.def`: its type, its checks and the type's own fields. */
export interface Def {
  readonly type: string
  readonly checks?: readonly Schema[]
  readonly [field: string]: unknown
}

/** A compiled parse: the copy, or `undefined` when not sure. `depthLeft` below zero refuses an object or array. */
type Parse = (value: unknown, depthLeft: number) => unknown
type Category = 'null' | 'boolean' | 'number' | 'string' | 'array' | 'object'

const getPrototypeOf = Object.getPrototypeOf
const getOwnPropertySymbols = Object.getOwnPropertySymbols
const hasOwn = Object.hasOwn
const isArray = Array.isArray
const isSafeInteger = Number.isSafeInteger
const isFinite = Number.isFinite
const objectPrototype = Object.prototype
const arrayPrototype = Array.prototype
// `isWellFormed` (Node 20+, not yet in the es2023 lib); the pattern is the fallback encoding.ts uses too.
const nativeIsWellFormed = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
const isWellFormed = nativeIsWellFormed ? (text: string): boolean => nativeIsWellFormed.call(text) : (text: string): boolean => !LONE_SURROGATE.test(text)
const { codePointLength, NUMBER_FORMAT_RANGES } = z.core.util
/** The most members the store writes in one object (msgpack's map16); a record with more is declined. */
const MAX_RECORD_MEMBERS = 0xffff

// A length check attached without its own `when` gets zod's default one; any other `when` is the schema author's.
const defaultLengthWhen = new z.core.$ZodCheckMinLength({ check: 'min_length', minimum: 0 })._zod.def.when

function coreTraits(schema: Schema): string {
  return [...schema._zod.traits].filter((trait) => trait.startsWith('$')).sort().join(' ')
}

function isSchema(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && '_zod' in value
}

/**
 * Compiles `schema` into a {@link SchemaCopier}. Supported: `z.string()` with `min`/`max`/`regex`,
 * `z.number()` with `int`/`min`/`max`/`gt`/`lt`/`nonnegative`/`finite`, `z.int()`, `z.boolean()`,
 * `z.null()`, `z.literal`, `z.enum`, `z.array`, `z.strictObject` (members may be `.optional()`),
 * `z.record(z.string(), …)`, `z.discriminatedUnion`, `z.union` of options that accept disjoint
 * kinds of value, and `z.lazy`. Anything else throws {@link UnsupportedSchemaError}.
 * Strict objects are parsed by code generated for their shape unless `generate` is false (or code
 * generation is disallowed); both give the same answers.
 *
 * @example
 * ```ts
 * const copyInvocation = compileSchema(invocationSchema)
 * const copy = copyInvocation(input, 64) ?? invocationSchema.parse(input)
 * ```
 */
export function compileSchema<T>(schema: z.ZodType<T>, name = '(root)', options: { generate?: boolean } = {}): SchemaCopier<T> {
  const root = new Compiler(options.generate ?? true).compile(schema as unknown as Schema, name)
  return root as SchemaCopier<T>
}

class Compiler {
  readonly #compiled = new Map<Schema, Parse>()
  readonly #categorising = new Set<Schema>()
  readonly #generate: boolean

  constructor(generate: boolean) {
    this.#generate = generate
  }

  compile(schema: Schema, path: string): Parse {
    const known = this.#compiled.get(schema)
    if (known) return known
    const def = schema._zod.def
    if (def.type === 'lazy') return this.#lazy(schema, path)
    const parse = this.#build(schema, def, path)
    this.#compiled.set(schema, parse)
    return parse
  }

  #build(schema: Schema, def: Def, path: string): Parse {
    const traits = coreTraits(schema)
    const expect = (...names: string[]): void => {
      if (traits !== [...names].sort().join(' ')) throw new UnsupportedSchemaError(path, `a schema built as ${traits}`)
    }
    if (def.type !== 'string' && def.type !== 'number' && def.checks?.length) {
      throw new UnsupportedSchemaError(path, `checks on a ${def.type} (${checkNames(def.checks)})`)
    }
    switch (def.type) {
      case 'string':
        expect('$ZodString', '$ZodType')
        return this.#string(def, path)
      case 'number':
        if (traits.includes('$ZodCheckNumberFormat')) expect('$ZodNumberFormat', '$ZodCheckNumberFormat', '$ZodCheck', '$ZodNumber', '$ZodType')
        else expect('$ZodNumber', '$ZodType')
        return this.#number(schema, def, path)
      case 'boolean':
        expect('$ZodBoolean', '$ZodType')
        noCoercion(def, path)
        return (value) => (typeof value === 'boolean' ? value : undefined)
      case 'null':
        expect('$ZodNull', '$ZodType')
        return (value) => (value === null ? null : undefined)
      case 'literal':
        expect('$ZodLiteral', '$ZodType')
        return this.#values(schema, path)
      case 'enum':
        expect('$ZodEnum', '$ZodType')
        return this.#values(schema, path)
      case 'array':
        expect('$ZodArray', '$ZodType')
        return this.#array(def, path)
      case 'object':
        if (traits.includes('$ZodObjectJIT')) expect('$ZodObjectJIT', '$ZodObject', '$ZodType')
        else expect('$ZodObject', '$ZodType')
        return this.#object(def, path)
      case 'record':
        expect('$ZodRecord', '$ZodType')
        return this.#record(def, path)
      case 'union':
        if (traits.includes('$ZodDiscriminatedUnion')) {
          expect('$ZodDiscriminatedUnion', '$ZodUnion', '$ZodType')
          return this.#discriminatedUnion(def, path)
        }
        expect('$ZodUnion', '$ZodType')
        return this.#union(def, path)
      case 'optional':
        throw new UnsupportedSchemaError(path, '.optional() other than directly as a strict object member')
      default:
        throw new UnsupportedSchemaError(path, `zod type "${def.type}"`)
    }
  }

  #lazy(schema: Schema, path: string): Parse {
    if (coreTraits(schema) !== '$ZodLazy $ZodType') throw new UnsupportedSchemaError(path, `a lazy schema built as ${coreTraits(schema)}`)
    let inner: Parse | undefined
    // Registered before the inner schema compiles, so a recursive reference finds it.
    const forward: Parse = (value, depthLeft) => inner!(value, depthLeft)
    this.#compiled.set(schema, forward)
    inner = this.compile(innerOfLazy(schema, path), path)
    return forward
  }

  #string(def: Def, path: string): Parse {
    noCoercion(def, path)
    let minLength = 0
    let maxLength = Infinity
    const patterns: RegExp[] = []
    for (const check of def.checks ?? []) {
      const checkDef = check._zod.def
      const traits = coreTraits(check)
      if (checkDef.check === 'min_length' && traits === '$ZodCheck $ZodCheckMinLength' && checkDef.when === defaultLengthWhen) {
        minLength = Math.max(minLength, numberField(checkDef, 'minimum', path))
      } else if (checkDef.check === 'max_length' && traits === '$ZodCheck $ZodCheckMaxLength' && checkDef.when === defaultLengthWhen) {
        maxLength = Math.min(maxLength, numberField(checkDef, 'maximum', path))
      } else if (
        checkDef.check === 'string_format' &&
        checkDef.format === 'regex' &&
        traits === '$ZodCheck $ZodCheckRegex $ZodCheckStringFormat' &&
        checkDef.when === undefined &&
        checkDef.pattern instanceof RegExp
      ) {
        patterns.push(checkDef.pattern)
      } else {
        throw new UnsupportedSchemaError(path, `the string check ${checkNames([check])}`)
      }
    }
    if (minLength === 0 && maxLength === Infinity && patterns.length === 0) {
      return (value) => (typeof value === 'string' && isWellFormed(value) ? value : undefined)
    }
    const pattern = patterns.length === 1 ? patterns[0]! : undefined
    return (value) => {
      if (typeof value !== 'string' || !isWellFormed(value)) return undefined
      // zod counts code points, not UTF-16 units; it only counts when units alone cannot decide.
      const units = value.length
      if (units < minLength || (units < minLength * 2 && codePointLength(value) < minLength)) return undefined
      if (units > maxLength && codePointLength(value) > maxLength) return undefined
      if (pattern) {
        pattern.lastIndex = 0
        if (!pattern.test(value)) return undefined
      } else {
        for (const each of patterns) {
          each.lastIndex = 0
          if (!each.test(value)) return undefined
        }
      }
      return value
    }
  }

  #number(schema: Schema, def: Def, path: string): Parse {
    noCoercion(def, path)
    // Every check must pass, so they fold into one interval and an integer flag.
    let low = -Infinity
    let lowInclusive = true
    let high = Infinity
    let highInclusive = true
    let integer = false
    const raise = (value: number, inclusive: boolean): void => {
      if (value > low) [low, lowInclusive] = [value, inclusive]
      else if (value === low) lowInclusive &&= inclusive
    }
    const lower = (value: number, inclusive: boolean): void => {
      if (value < high) [high, highInclusive] = [value, inclusive]
      else if (value === high) highInclusive &&= inclusive
    }
    const checks = schema._zod.traits.has('$ZodCheck') ? [schema, ...(def.checks ?? [])] : (def.checks ?? [])
    for (const check of checks) {
      const checkDef = check._zod.def
      const traits = coreTraits(check)
      if (checkDef.when !== undefined) throw new UnsupportedSchemaError(path, `a number check with its own "when" (${checkNames([check])})`)
      if (checkDef.check === 'greater_than' && traits === '$ZodCheck $ZodCheckGreaterThan') {
        raise(numberField(checkDef, 'value', path), checkDef.inclusive === true)
      } else if (checkDef.check === 'less_than' && traits === '$ZodCheck $ZodCheckLessThan') {
        lower(numberField(checkDef, 'value', path), checkDef.inclusive === true)
      } else if (checkDef.check === 'number_format' && traits.includes('$ZodCheckNumberFormat')) {
        const format = checkDef.format
        const range = typeof format === 'string' && hasOwn(NUMBER_FORMAT_RANGES, format) ? NUMBER_FORMAT_RANGES[format as keyof typeof NUMBER_FORMAT_RANGES] : undefined
        if (!range) throw new UnsupportedSchemaError(path, `the number format ${String(format)}`)
        if (String(format).includes('int')) integer = true
        raise(range[0], true)
        lower(range[1], true)
      } else {
        throw new UnsupportedSchemaError(path, `the number check ${checkNames([check])}`)
      }
    }
    return (value) =>
      isFinite(value) &&
      (lowInclusive ? (value as number) >= low : (value as number) > low) &&
      (highInclusive ? (value as number) <= high : (value as number) < high) &&
      (!integer || isSafeInteger(value))
        ? value
        : undefined
  }

  #values(schema: Schema, path: string): Parse {
    const values = schema._zod.values
    if (!values || values.size === 0) throw new UnsupportedSchemaError(path, 'a literal or enum without values')
    for (const value of values) {
      const plain = value === null || typeof value === 'number' || typeof value === 'boolean' || (typeof value === 'string' && isWellFormed(value))
      if (!plain) throw new UnsupportedSchemaError(path, `the literal value ${String(value)}`)
    }
    if (values.size === 1) {
      const [only] = values
      if (only === only) return (value) => (value === only ? value : undefined)
    }
    return (value) => (values.has(value) ? value : undefined)
  }

  #array(def: Def, path: string): Parse {
    const element = this.compile(schemaField(def, 'element', path), `${path}[]`)
    return (value, depthLeft) => {
      if (!isArray(value) || depthLeft < 0 || getPrototypeOf(value) !== arrayPrototype) return undefined
      const length = value.length
      const copy: unknown[] = new Array(length)
      for (let index = 0; index < length; index += 1) {
        const item = element(value[index], depthLeft - 1)
        if (item === undefined) return undefined
        copy[index] = item
      }
      return copy
    }
  }

  #object(def: Def, path: string): Parse {
    const catchall = def.catchall
    if (!isSchema(catchall) || catchall._zod.def.type !== 'never' || coreTraits(catchall) !== '$ZodNever $ZodType') {
      throw new UnsupportedSchemaError(path, 'an object that is not strict (use z.strictObject)')
    }
    const shape = def.shape
    if (typeof shape !== 'object' || shape === null || getOwnPropertySymbols(shape).length > 0) {
      throw new UnsupportedSchemaError(path, 'an object shape with symbol keys')
    }
    const keys = Object.keys(shape)
    const parsers: Parse[] = []
    const optional: boolean[] = []
    for (const key of keys) {
      if (key === '__proto__' || !isWellFormed(key)) throw new UnsupportedSchemaError(path, `the object key ${JSON.stringify(key)}`)
      const member = (shape as Record<string, unknown>)[key]
      if (!isSchema(member)) throw new UnsupportedSchemaError(`${path}.${key}`, 'a member that is not a zod schema')
      const isOptional = member._zod.def.type === 'optional'
      if (isOptional && (coreTraits(member) !== '$ZodOptional $ZodType' || member._zod.def.checks?.length)) {
        throw new UnsupportedSchemaError(`${path}.${key}`, `an optional built as ${coreTraits(member)}`)
      }
      const required = isOptional ? schemaField(member._zod.def, 'innerType', `${path}.${key}`) : member
      parsers.push(this.compile(required, `${path}.${key}`))
      optional.push(isOptional)
    }
    const count = keys.length
    const keySet = new Set(keys)
    return (this.#generate ? generatedObject(keys, keySet, optional, parsers) : undefined) ?? ((value, depthLeft) => {
      if (typeof value !== 'object' || value === null || depthLeft < 0 || getPrototypeOf(value) !== objectPrototype || hasOwn(value, '__proto__')) {
        return undefined
      }
      const input = value as Record<string, unknown>
      // zod's strict check walks for...in and refuses any key outside the shape. Members are then read
      // as zod reads them (inherited or not enumerable alike), so both copy the same values.
      let position = 0
      for (const key in input) {
        if (!((position < count && key === keys[position]) || keySet.has(key))) return undefined
        position += 1
      }
      const copy: Record<string, unknown> = {}
      for (let index = 0; index < count; index += 1) {
        const key = keys[index]!
        const member = input[key]
        if (member === undefined) {
          // zod keeps a present `undefined` member of an optional, and the store drops it: absent either way.
          if (!optional[index]) return undefined
          continue
        }
        const parsed = parsers[index]!(member, depthLeft - 1)
        if (parsed === undefined) return undefined
        copy[key] = parsed
      }
      return copy
    })
  }

  #record(def: Def, path: string): Parse {
    if (def.mode !== undefined || def.partial !== undefined) throw new UnsupportedSchemaError(path, `a record in mode ${String(def.mode)}`)
    const keyType = schemaField(def, 'keyType', path)
    if (keyType._zod.def.type !== 'string') throw new UnsupportedSchemaError(path, 'a record key that is not z.string()')
    const keyParse = this.compile(keyType, `${path}{key}`)
    const valueParse = this.compile(schemaField(def, 'valueType', path), `${path}{}`)
    return (value, depthLeft) => {
      if (typeof value !== 'object' || value === null || depthLeft < 0 || getPrototypeOf(value) !== objectPrototype || hasOwn(value, '__proto__')) {
        return undefined
      }
      // zod walks own keys including symbols (and refuses one); for...in cannot see them.
      if (getOwnPropertySymbols(value).length > 0) return undefined
      const input = value as Record<string, unknown>
      const copy: Record<string, unknown> = {}
      let members = 0
      for (const key in input) {
        // More members than the store can write is for the slow path to word.
        if (++members > MAX_RECORD_MEMBERS || !hasOwn(input, key) || keyParse(key, depthLeft) === undefined) return undefined
        const parsed = valueParse(input[key], depthLeft - 1)
        if (parsed === undefined) return undefined
        copy[key] = parsed
      }
      return copy
    }
  }

  #discriminatedUnion(def: Def, path: string): Parse {
    const discriminator = def.discriminator
    if (typeof discriminator !== 'string' || def.unionFallback) throw new UnsupportedSchemaError(path, 'a discriminated union with fallback')
    const byValue = new Map<unknown, Parse>()
    for (const option of schemaList(def, 'options', path)) {
      const values = option._zod.def.type === 'object' ? option._zod.propValues?.[discriminator] : undefined
      if (!values || values.size === 0) throw new UnsupportedSchemaError(path, 'a discriminated union option that is not a strict object with a literal discriminator')
      const label = [...values].map(String).join('|')
      const parse = this.compile(option, `${path}[${label}]`)
      for (const value of values) {
        if (value === undefined || byValue.has(value)) throw new UnsupportedSchemaError(path, `an optional or repeated discriminator value ${String(value)}`)
        byValue.set(value, parse)
      }
    }
    return (value, depthLeft) => {
      if (typeof value !== 'object' || value === null || isArray(value)) return undefined
      const option = byValue.get((value as Record<string, unknown>)[discriminator])
      return option === undefined ? undefined : option(value, depthLeft)
    }
  }

  // zod takes the first option that succeeds; with options that accept disjoint kinds of value at
  // most one can, so dispatching on the kind of value picks the same one.
  #union(def: Def, path: string): Parse {
    const slots = new Map<Category, Parse>()
    schemaList(def, 'options', path).forEach((option, index) => {
      const optionPath = `${path}|${index}`
      const parse = this.compile(option, optionPath)
      for (const category of this.#categories(option, optionPath)) {
        if (slots.has(category)) throw new UnsupportedSchemaError(optionPath, `a union whose options overlap on ${category} values`)
        slots.set(category, parse)
      }
    })
    const forNull = slots.get('null')
    const forBoolean = slots.get('boolean')
    const forNumber = slots.get('number')
    const forString = slots.get('string')
    const forArray = slots.get('array')
    const forObject = slots.get('object')
    return (value, depthLeft) => {
      if (value === null) return forNull?.(value, depthLeft)
      switch (typeof value) {
        case 'string':
          return forString?.(value, depthLeft)
        case 'number':
          return forNumber?.(value, depthLeft)
        case 'boolean':
          return forBoolean?.(value, depthLeft)
        case 'object':
          return isArray(value) ? forArray?.(value, depthLeft) : forObject?.(value, depthLeft)
        default:
          return undefined
      }
    }
  }

  /** The kinds of value a (compiled) schema can accept, as zod's own type checks decide them. */
  #categories(schema: Schema, path: string): Category[] {
    const def = schema._zod.def
    switch (def.type) {
      case 'string':
      case 'number':
      case 'boolean':
      case 'null':
      case 'array':
        return [def.type]
      case 'object':
      case 'record':
        return ['object']
      case 'literal':
      case 'enum':
        return [...new Set([...(schema._zod.values ?? [])].map((value): Category => (value === null ? 'null' : (typeof value as Category))))]
      case 'union': {
        if (schema._zod.traits.has('$ZodDiscriminatedUnion')) return ['object']
        const all = schemaList(def, 'options', path).flatMap((option, index) => this.#categories(option, `${path}|${index}`))
        if (new Set(all).size !== all.length) throw new UnsupportedSchemaError(path, 'a union whose options overlap')
        return all
      }
      case 'lazy': {
        if (this.#categorising.has(schema)) throw new UnsupportedSchemaError(path, 'a lazy schema that refers to itself through unions only')
        this.#categorising.add(schema)
        try {
          return this.#categories(innerOfLazy(schema, path), path)
        } finally {
          this.#categorising.delete(schema)
        }
      }
      default:
        throw new UnsupportedSchemaError(path, `a ${def.type} inside a union`)
    }
  }
}

/**
 * The strict-object parse above, generated as source for one shape: every member is read and
 * written under its own name, so V8 sees one object shape per site (a loop over the keys reads
 * every member at one site, which turns megamorphic across the schema's shapes: a third slower on
 * the bench workload). Same checks in the same order, same copy. `undefined` where code cannot be
 * generated (`--disallow-code-generation-from-strings`): the caller keeps the loop.
 */
function generatedObject(keys: readonly string[], keySet: ReadonlySet<string>, optional: readonly boolean[], parsers: readonly Parse[]): Parse | undefined {
  const lines = [
    'return function parseStrictObject(value, depthLeft) {',
    "  if (typeof value !== 'object' || value === null || depthLeft < 0 || getPrototypeOf(value) !== objectPrototype || hasOwn(value, '__proto__')) return undefined",
    '  let position = 0',
    '  for (const key in value) {',
    '    if (!((position < count && key === keys[position]) || keySet.has(key))) return undefined',
    '    position += 1',
    '  }',
    '  const copy = {}',
    '  let member',
  ]
  keys.forEach((key, index) => {
    // A JSON string is a JS string literal (U+2028 and U+2029 included, since ES2019).
    const name = JSON.stringify(key)
    lines.push(`  member = value[${name}]`)
    if (optional[index]) {
      lines.push(`  if (member !== undefined) {`, `    member = parse${index}(member, depthLeft - 1)`, '    if (member === undefined) return undefined', `    copy[${name}] = member`, '  }')
    } else {
      lines.push('  if (member === undefined) return undefined', `  member = parse${index}(member, depthLeft - 1)`, '  if (member === undefined) return undefined', `  copy[${name}] = member`)
    }
  })
  lines.push('  return copy', '}')
  const names = ['getPrototypeOf', 'objectPrototype', 'hasOwn', 'count', 'keys', 'keySet', ...parsers.map((_, index) => `parse${index}`)]
  try {
    const factory = new Function(...names, lines.join('\n')) as (...args: unknown[]) => Parse
    return factory(getPrototypeOf, objectPrototype, hasOwn, keys.length, keys, keySet, ...parsers)
  } catch {
    return undefined
  }
}

function innerOfLazy(schema: Schema, path: string): Schema {
  const inner = schema._zod.innerType
  if (!isSchema(inner)) throw new UnsupportedSchemaError(path, 'a lazy schema whose getter returns no schema')
  return inner
}

function noCoercion(def: Def, path: string): void {
  if (def.coerce) throw new UnsupportedSchemaError(path, `z.coerce.${def.type}()`)
}

function numberField(def: Def, field: string, path: string): number {
  const value = def[field]
  if (typeof value !== 'number') throw new UnsupportedSchemaError(path, `a check whose ${field} is not a number`)
  return value
}

function schemaField(def: Def, field: string, path: string): Schema {
  const value = def[field]
  if (!isSchema(value)) throw new UnsupportedSchemaError(path, `a ${def.type} whose ${field} is not a zod schema`)
  return value
}

function schemaList(def: Def, field: string, path: string): Schema[] {
  const value = def[field]
  if (!Array.isArray(value) || !value.every(isSchema)) throw new UnsupportedSchemaError(path, `a ${def.type} whose ${field} are not zod schemas`)
  return value
}

function checkNames(checks: readonly Schema[]): string {
  return checks.map((check) => String(check._zod.def.check ?? check._zod.def.type)).join(', ')
}

/**
 * The fast path of the store's `validateEvent`: a copy of `value` exactly as validating it would
 * return it (same members, key order and bytes once encoded), or `undefined` when `value` is
 * invalid, unusual (not plain data, a lone surrogate, an own `__proto__`, nested deeper than
 * `maxDepth`, a record of more than 65,535 members) or otherwise not certain, so the caller takes
 * the slow path and its error.
 * Accessors are read like data members, as zod reads them; only a getter that answers differently
 * from one read to the next could make this copy differ from the one the slow path would make.
 *
 * @example
 * ```ts
 * const event = parseRuntimeEvent(input, 64) ?? slowValidate(input)
 * ```
 */
export const parseRuntimeEvent: SchemaCopier<RuntimeEvent> = compileSchema(runtimeEventSchema)

/** Whether strict objects are parsed by generated code here (false where code generation is disallowed). */
export const objectsGenerated: boolean = generatedObject([], new Set(), [], []) !== undefined
