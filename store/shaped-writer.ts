/**
 * The msgpack writer for events `validateEvent` returned, built from the fact schema: each strict
 * object is written by a `shapeWriter` of its keys (precomputed key bytes, one read site per member,
 * no `for…in`), each discriminated union by the writer of the option its discriminator names, each
 * array item by its element's writer; everything else by the general `writePlain`. For such events
 * the bytes are exactly `packPlain`'s (a validated event is a plain object whose members are some of
 * its shape's keys, in the shape's order, none `undefined`: the compiled copier and zod both build
 * it so), so stored facts and their digests do not change. spec/compiled-schema.test.ts holds the
 * two to the same bytes for every event it validates. The schemas are walked through the compiled
 * copier's view of zod's internals: by the time this module loads, facts/compiled-schema.ts has
 * refused any construct it does not reproduce, so the shapes here are the ones validation produces.
 */
import type { Schema } from '../facts/compiled-schema.js'
import { runtimeEventSchema } from '../facts/schema.js'
import type { RuntimeEvent } from '../facts/types.js'
import { arrayWriter, constantWriter, packViewWith, shapeWriter, type ValueWriter, writePlain, writePlainNumber, writePlainString } from './msgpack-plain.js'

function compileWriter(schema: Schema, compiled: Map<Schema, ValueWriter>): ValueWriter {
  const known = compiled.get(schema)
  if (known) return known
  const { def } = schema._zod
  if (def.type === 'lazy') {
    let inner: ValueWriter = writePlain
    // Registered before the inner schema compiles, so a recursive reference finds it.
    const forward: ValueWriter = (value) => inner(value)
    compiled.set(schema, forward)
    const innerSchema = schema._zod.innerType
    inner = innerSchema ? compileWriter(innerSchema, compiled) : writePlain
    // A lazy schema that only reaches the general writer needs no forwarding.
    if (inner !== writePlain) return forward
    compiled.set(schema, writePlain)
    return writePlain
  }
  const writer = build(schema, compiled)
  compiled.set(schema, writer)
  return writer
}

function build(schema: Schema, compiled: Map<Schema, ValueWriter>): ValueWriter {
  const { def } = schema._zod
  switch (def.type) {
    case 'object': {
      const shape = def.shape as Record<string, Schema>
      const keys = Object.keys(shape)
      const members = keys.map((key) => {
        const member = shape[key] as Schema
        const required = member._zod.def.type === 'optional' ? (member._zod.def.innerType as Schema) : member
        return compileWriter(required, compiled)
      })
      return shapeWriter(keys, members) ?? writePlain
    }
    case 'union': {
      const discriminator = def.discriminator
      if (!schema._zod.traits.has('$ZodDiscriminatedUnion') || typeof discriminator !== 'string') return writePlain
      const byValue = new Map<unknown, ValueWriter>()
      for (const option of def.options as Schema[]) {
        const writer = compileWriter(option, compiled)
        for (const value of option._zod.propValues?.[discriminator] ?? []) byValue.set(value, writer)
      }
      return (value) => (byValue.get((value as Record<string, unknown>)[discriminator]) ?? writePlain)(value)
    }
    case 'array': {
      const element = compileWriter(def.element as Schema, compiled)
      return element === writePlain ? writePlain : arrayWriter(element)
    }
    case 'string':
      return writePlainString
    case 'number':
      return writePlainNumber
    case 'literal': {
      const values = [...((def.values as readonly unknown[] | undefined) ?? [])]
      const [only] = values
      const constant = values.length === 1 && (typeof only === 'string' || typeof only === 'number' || typeof only === 'boolean' || only === null)
      return constant ? constantWriter(only) : writePlain
    }
    default:
      return writePlain
  }
}

const writeRuntimeEvent = compileWriter(runtimeEventSchema as unknown as Schema, new Map())

/**
 * Packs an event `validateEvent` returned behind `reserve` bytes, as `packPlain` would; `undefined`
 * where `packPlain` would decline it too.
 */
export function packValidatedEvent(event: RuntimeEvent, reserve: number): Uint8Array | undefined {
  return packViewWith(writeRuntimeEvent, event, reserve)
}
