/**
 * A msgpack writer for plain data (objects made by `{}`, arrays, strings, numbers, booleans, null)
 * that produces byte for byte what the log's msgpackr `Packr({ useRecords: false })` produces, about
 * a third faster (0.95 vs 1.35 µs per fact of the bench workload): the log stores every fact this
 * way, and the digest chains those bytes.
 *
 * msgpackr's rules, reproduced: an object is always a map16 of its `for…in` keys that pass its own
 * `hasOwnProperty` test (every key when that is not a function); an array is a fixarray, array16 or
 * array32; a string's header follows its UTF-8 length (fixstr, str8, str16, str32) and a lone
 * surrogate is written as U+FFFD; an integer takes the smallest of positive fixint (below 0x80),
 * uint8/16/32, negative fixint, int8/16/32, and every other number is a float64. Anything else (a
 * Uint8Array, a Date, `undefined`, an object made by a class or with no prototype, a map too big
 * for map16, nesting deeper than 512, a pack started by a getter during a pack) makes `packPlain`
 * answer `undefined`: the caller then packs with msgpackr itself.
 * spec/msgpack-plain.test.ts holds the two to the same bytes over generated values.
 *
 * The same writer also comes in parts (`shapeWriter`, `arrayWriter`, `constantWriter` and the typed
 * writers) that store/shaped-writer.ts assembles, following the fact schema, into a faster writer of
 * validated events with the very same bytes.
 */

const CHUNK = 64 * 1024
/** Room kept free at the end of the buffer for one header or one number. */
const SLACK = 16

let target = Buffer.allocUnsafe(CHUNK)
let view = new DataView(target.buffer, target.byteOffset, target.byteLength)
let position = 0
/** Where the value being packed began (moved with it when the buffer grows). */
let start = 0
/** A pack is under way: a getter that packs again gets msgpackr, which keeps its own state. */
let busy = false
/** Deeper values are declined (msgpackr itself runs out of stack a few thousand levels down). */
const MAX_DEPTH = 512
let depth = 0

/** Nothing this writer packs as a value: the caller falls back to msgpackr. */
class Unsupported extends Error {}
const unsupported = new Unsupported('not plain data')

function grow(need: number): void {
  const next = Buffer.allocUnsafe(Math.max(CHUNK, (position - start + need) * 2))
  target.copy(next, 0, start, position)
  position -= start
  start = 0
  target = next
  view = new DataView(next.buffer, next.byteOffset, next.byteLength)
}

function writeString(value: string): void {
  const length = value.length
  if (position + length * 3 + 5 > target.length) grow(length * 3 + 5)
  if (length < 0x20) {
    // The common case, a short ASCII string: its bytes are its characters and its header is one byte.
    // (Locals, not the module's bindings, inside the loop: those are reloaded on every access.)
    const out = target
    const from = position
    let index = 0
    for (; index < length; index += 1) {
      const code = value.charCodeAt(index)
      if (code >= 0x80) break
      out[from + 1 + index] = code
    }
    if (index === length) {
      out[from] = 0xa0 | length
      position = from + 1 + length
      return
    }
  }
  // Room for the widest header the UTF-16 length allows, then the bytes are moved if a narrower one fits.
  const room = length < 0x20 ? 1 : length < 0x100 ? 2 : length < 0x10000 ? 3 : 5
  const bytes = target.write(value, position + room)
  const header = bytes < 0x20 ? 1 : bytes < 0x100 ? 2 : bytes < 0x10000 ? 3 : 5
  if (header !== room) target.copyWithin(position + header, position + room, position + room + bytes)
  if (header === 1) target[position] = 0xa0 | bytes
  else if (header === 2) {
    target[position] = 0xd9
    target[position + 1] = bytes
  } else if (header === 3) {
    target[position] = 0xda
    target[position + 1] = bytes >> 8
    target[position + 2] = bytes & 0xff
  } else {
    target[position] = 0xdb
    view.setUint32(position + 1, bytes)
  }
  position += header + bytes
}

function writeNumber(value: number): void {
  if (value >>> 0 === value) {
    if (value < 0x80) target[position++] = value
    else if (value < 0x100) {
      target[position++] = 0xcc
      target[position++] = value
    } else if (value < 0x1_0000) {
      target[position++] = 0xcd
      target[position++] = value >> 8
      target[position++] = value & 0xff
    } else {
      target[position++] = 0xce
      view.setUint32(position, value)
      position += 4
    }
  } else if (value >> 0 === value) {
    if (value >= -0x20) target[position++] = 0x100 + value
    else if (value >= -0x80) {
      target[position++] = 0xd0
      target[position++] = value + 0x100
    } else if (value >= -0x8000) {
      target[position++] = 0xd1
      view.setInt16(position, value)
      position += 2
    } else {
      target[position++] = 0xd2
      view.setInt32(position, value)
      position += 4
    }
  } else {
    target[position++] = 0xcb
    view.setFloat64(position, value)
    position += 8
  }
}

function writeValue(value: unknown): void {
  if (position + SLACK > target.length) grow(SLACK)
  switch (typeof value) {
    case 'string':
      return writeString(value)
    case 'number':
      return writeNumber(value)
    case 'boolean':
      target[position++] = value ? 0xc3 : 0xc2
      return
    case 'object': {
      if (value === null) {
        target[position++] = 0xc0
        return
      }
      const { constructor } = value
      if (constructor !== Array && constructor !== Object) throw unsupported
      if (++depth > MAX_DEPTH) throw unsupported
      if (constructor === Array) writeArray(value as unknown[])
      else writeObject(value as Record<string, unknown>)
      depth -= 1
      return
    }
    default:
      throw unsupported
  }
}

/** An array's header (fixarray, array16 or array32); the caller has made room for it. */
function writeArrayHeader(length: number): void {
  if (length < 0x10) target[position++] = 0x90 | length
  else if (length < 0x1_0000) {
    target[position++] = 0xdc
    target[position++] = length >> 8
    target[position++] = length & 0xff
  } else {
    target[position++] = 0xdd
    view.setUint32(position, length)
    position += 4
  }
}

function writeArray(value: unknown[]): void {
  const { length } = value
  writeArrayHeader(length)
  for (let index = 0; index < length; index += 1) writeValue(value[index])
}

function writeObject(value: Record<string, unknown>): void {
  // The size goes in afterwards, as msgpackr does: it counts while it walks.
  const at = openMap()
  let size = 0
  for (const key in value) {
    // Asked for every key, as msgpackr does: a getter may replace hasOwnProperty midway.
    if (typeof value.hasOwnProperty !== 'function' || value.hasOwnProperty(key)) {
      writeString(key)
      writeValue(value[key])
      size += 1
    }
  }
  closeMap(at, size)
}

/** Writes one value at the end of the pack under way; throws when it declines the value. */
export type ValueWriter = (value: unknown) => void

/** The general writer: any plain data, by the rules above. */
export const writePlain: ValueWriter = writeValue

/** `writePlain` for a value known to be a string. */
export const writePlainString = writeString as ValueWriter

/** `writePlain` for a value known to be a number. */
export const writePlainNumber: ValueWriter = (value) => {
  if (position + SLACK > target.length) grow(SLACK)
  writeNumber(value as number)
}

/** A writer that writes `value`'s bytes whatever it is given: for a member that can only hold `value`. */
export function constantWriter(value: string | number | boolean | null): ValueWriter {
  const bytes = packedCopy(value)
  return () => writeBytes(bytes)
}

function openMap(): number {
  if (position + SLACK > target.length) grow(SLACK)
  const at = position - start
  target[position] = 0xde
  position += 3
  return at
}

function closeMap(at: number, size: number): void {
  if (size > 0xffff) throw unsupported
  target[start + at + 1] = size >> 8
  target[start + at + 2] = size & 0xff
}

function writeBytes(bytes: Uint8Array): void {
  const length = bytes.length
  if (position + length + SLACK > target.length) grow(length + SLACK)
  const out = target
  const from = position
  for (let index = 0; index < length; index += 1) out[from + index] = bytes[index] as number
  position = from + length
}

/** `value`'s bytes in a buffer of their own (packed outside any pack under way). */
function packedCopy(value: string | number | boolean | null): Uint8Array {
  const packed = packPlain(value)
  if (packed === undefined) throw new TypeError(`${JSON.stringify(value)} cannot be packed`)
  return Uint8Array.from(packed)
}

/** Keys that `for…in` visits before the others (array indices), whatever their insertion order. */
const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/

/**
 * A writer for objects of one shape: plain objects whose own members are some of `keys`, in that
 * order, none of them `undefined` (what the compiled copier and zod build for a strict object).
 * Each present member is written with its own writer; the bytes are those `writePlain` writes for
 * such an object, without walking `for…in` or asking `hasOwnProperty` (the keys' bytes are
 * precomputed and each member is read at a site of its own). Given any other object it writes
 * other bytes: only use it where the shape is certain. `undefined` when a key is an array index
 * (`for…in` would visit it first).
 */
export function shapeWriter(keys: readonly string[], members: readonly ValueWriter[]): ValueWriter | undefined {
  if (keys.some((key) => ARRAY_INDEX.test(key) && Number(key) < 2 ** 32 - 1)) return undefined
  const bytes = keys.map(packedCopy)
  const lines = ['return function writeShape(value) {', '  const at = openMap()', '  let size = 0', '  let member']
  keys.forEach((key, index) => {
    // A JSON string is a JS string literal (U+2028 and U+2029 included, since ES2019).
    lines.push(`  member = value[${JSON.stringify(key)}]`, '  if (member !== undefined) {', `    writeBytes(key${index})`, `    write${index}(member)`, '    size += 1', '  }')
  })
  lines.push('  closeMap(at, size)', '}')
  const names = ['openMap', 'closeMap', 'writeBytes', ...keys.map((_, index) => `key${index}`), ...keys.map((_, index) => `write${index}`)]
  try {
    const factory = new Function(...names, lines.join('\n')) as (...args: unknown[]) => ValueWriter
    return factory(openMap, closeMap, writeBytes, ...bytes, ...members)
  } catch {
    // Code generation disallowed: the same walk over the keys, one read site for all of them.
    return (value) => {
      const object = value as Record<string, unknown>
      const at = openMap()
      let size = 0
      for (let index = 0; index < keys.length; index += 1) {
        const member = object[keys[index] as string]
        if (member === undefined) continue
        writeBytes(bytes[index] as Uint8Array)
        ;(members[index] as ValueWriter)(member)
        size += 1
      }
      closeMap(at, size)
    }
  }
}

/** A writer for arrays whose items `element` writes. */
export function arrayWriter(element: ValueWriter): ValueWriter {
  return (value) => {
    const items = value as unknown[]
    if (position + SLACK > target.length) grow(SLACK)
    const { length } = items
    writeArrayHeader(length)
    for (let index = 0; index < length; index += 1) element(items[index])
  }
}

/**
 * Packs `value` behind `reserve` bytes left for the caller (0 or more), or answers `undefined` when
 * it holds anything but plain data. The bytes are a region of a shared buffer that later packs never
 * write over (as msgpackr's are).
 */
export function packPlain(value: unknown, reserve = 0): Buffer | undefined {
  return packWith(writeValue, value, reserve)
}

/** `packPlain` with another writer for the top value (a `shapeWriter`, say). */
export function packWith(write: ValueWriter, value: unknown, reserve = 0): Buffer | undefined {
  return pack(write, value, reserve) ? target.subarray(start, position) : undefined
}

/**
 * `packWith`'s bytes as a plain Uint8Array over the same region: made in a fraction of the time a
 * Buffer's `subarray` takes (Node 20 builds a Buffer view through its species constructor), which
 * counts on a path that packs every appended fact.
 */
export function packViewWith(write: ValueWriter, value: unknown, reserve = 0): Uint8Array | undefined {
  return pack(write, value, reserve) ? new Uint8Array(target.buffer, target.byteOffset + start, position - start) : undefined
}

/** Packs `value` from `start` to `position` of `target`; false where `packPlain` declines it. */
function pack(write: ValueWriter, value: unknown, reserve: number): boolean {
  if (busy) return false
  if (target.length - position < 1024 + reserve) {
    target = Buffer.allocUnsafe(CHUNK)
    view = new DataView(target.buffer, target.byteOffset, target.byteLength)
    position = 0
  }
  start = position
  position += reserve
  busy = true
  depth = 0
  try {
    write(value)
  } catch (error) {
    position = start
    if (error === unsupported || error instanceof RangeError) return false
    throw error
  } finally {
    busy = false
  }
  return true
}
