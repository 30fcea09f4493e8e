/**
 * The plain-data msgpack writer against msgpackr, the encoder it stands in for: for every value it
 * packs, the bytes must be msgpackr's (stored facts and their digests depend on them); for anything
 * else it must decline, and a pack must never overwrite the bytes of an earlier one.
 */
import fc from 'fast-check'
import { Packr, RESERVE_START_SPACE } from 'msgpackr'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { STEPS, invocationEvents, invocationFacts, invocationFor } from '../bench/workload.js'
import { encodeEvent, validateEvent } from '../store/encoding.js'
import { arrayWriter, constantWriter, packPlain, packWith, shapeWriter, writePlain, writePlainNumber, writePlainString } from '../store/msgpack-plain.js'

const test = suite('msgpack plain')

/** The log's own msgpackr settings (store/encoding.ts). */
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false })

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex')
const reference = (value: unknown): string => hex(packr.pack(value))

function packed(value: unknown): string {
  const out = packPlain(value)
  assert.ok(out, `packPlain declined ${JSON.stringify(value)?.slice(0, 200)}`)
  return hex(out)
}

/** Integers on and around every header boundary msgpack has, both signs, and a few floats. */
const BOUNDARIES = [0, 1, 0x1f, 0x20, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xffff_ffff, 0x1_0000_0000, 2 ** 53 - 1]
const NUMBERS = [
  ...BOUNDARIES.flatMap((n) => [n, -n, n - 1, -n - 1, n + 1, -n + 1]),
  -0x20, -0x21, -0x80, -0x81, -0x8000, -0x8001, -0x8000_0000, -0x8000_0001,
  -0, 0.5, -0.5, 1e-300, 1.7976931348623157e308, Number.MIN_VALUE, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY,
  1_750_000_000_000,
]

test('numbers on every header boundary are msgpackr bytes', () => {
  for (const n of NUMBERS) assert.is(packed(n), reference(n), `number ${Object.is(n, -0) ? '-0' : n}`)
})

test('strings of every header width, multi-byte characters and lone surrogates are msgpackr bytes', () => {
  const strings = ['', 'a', 'x'.repeat(0x1f), 'x'.repeat(0x20), 'x'.repeat(0x3f), 'x'.repeat(0x40), 'x'.repeat(0xff), 'x'.repeat(0x100)]
  // A short UTF-16 length with a long UTF-8 one: the header must follow the bytes, not the characters.
  strings.push('é'.repeat(0x1f), '€'.repeat(0x1f), '€'.repeat(0x55), '€'.repeat(0x5556), '😀'.repeat(0x10), 'x'.repeat(0xffff), 'x'.repeat(0x1_0000))
  strings.push('\ud800', 'a\udc00b', '\ud83d', `${'x'.repeat(0x50)}\ud800`, '\u0000\u007f\u0080\u07ff\u0800\uffff')
  for (const text of strings) assert.is(packed(text), reference(text), `string of ${text.length} units`)
})

test('objects keep msgpackr key order, own-key rule and map16 headers; arrays every width', () => {
  const values: unknown[] = [
    {},
    { b: 1, a: 2, 10: 'ten', 2: 'two', z: [1, 2, 3] },
    JSON.parse('{"__proto__": {"x": 1}, "y": 2}'),
    { hasOwnProperty: 'not a function', k: true },
    // msgpackr asks an object's own hasOwnProperty (here a hidden one that hides `skip`), as this writer must.
    Object.defineProperty({ k: false, skip: 1, kept: 2 }, 'hasOwnProperty', { value: (key: string) => key !== 'skip', enumerable: false }),
    Array.from({ length: 0x0f }, (_, i) => i),
    Array.from({ length: 0x10 }, (_, i) => i),
    Array.from({ length: 0x1_0000 }, (_, i) => i % 3),
    Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i])),
    [null, true, false, [], {}, [[[]]], { a: { b: { c: 'deep' } } }],
  ]
  for (const value of values) assert.is(packed(value), reference(value))
})

test('generated JSON-like values are msgpackr bytes', () => {
  const text = fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.string({ unit: 'binary' }), fc.string({ unit: 'binary-ascii', maxLength: 300 }))
  const number = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(...NUMBERS), fc.maxSafeInteger(), fc.integer({ min: -0x8000_0001, max: 0x1_0000_0001 }))
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, text, number, fc.boolean(), fc.constant(null), tie('array'), tie('object')),
    array: fc.array(tie('value'), { maxLength: 20 }),
    object: fc.dictionary(fc.oneof(text, fc.nat().map(String)), tie('value'), { maxKeys: 20, noNullPrototype: true }),
  }))
  fc.assert(
    fc.property(value, (generated) => packed(generated) === reference(generated)),
    { numRuns: 3_000 },
  )
})

test('anything but plain data is declined, so the caller packs it with msgpackr', () => {
  class Point {
    x = 1
  }
  const cyclic: Record<string, unknown> = {}
  cyclic.self = cyclic
  const declined: unknown[] = [
    undefined,
    { a: undefined },
    new Uint8Array([1, 2]),
    Buffer.from('ab'),
    new Date(0),
    new Map([[1, 2]]),
    new Point(),
    Object.create(null),
    { nested: [1, { when: new Date(0) }] },
    10n,
    Symbol('s'),
    () => 1,
    Object.fromEntries(Array.from({ length: 0x1_0000 }, (_, i) => [`k${i}`, 0])),
    cyclic,
  ]
  for (const value of declined) assert.is(packPlain(value), undefined, String(typeof value))
  // A decline leaves nothing behind: the next pack is whole and right.
  assert.is(packed({ after: 'decline' }), reference({ after: 'decline' }))
})

test('values that run code while packed: hasOwnProperty replaced midway, a pack from a getter, deep nesting', () => {
  // msgpackr asks hasOwnProperty for every key; a getter replacing it changes which keys are written.
  const replaced: Record<string, unknown> = { hasOwnProperty: 1, b: 2 }
  Object.defineProperty(replaced, 'a', { enumerable: true, get: () => (Reflect.set(replaced, 'hasOwnProperty', () => false), 1) })
  const expected = reference(replaced)
  Reflect.set(replaced, 'hasOwnProperty', 1)
  assert.is(packed(replaced), expected)
  const broken: Record<string, unknown> = { b: 2 }
  Object.defineProperty(broken, 'a', { enumerable: true, get: () => (Reflect.set(broken, 'hasOwnProperty', 5), 1) })
  const brokenExpected = reference(broken)
  Reflect.deleteProperty(broken, 'hasOwnProperty')
  assert.is(packed(broken), brokenExpected)
  // A pack inside a pack is declined (msgpackr packs it) and disturbs neither the outer bytes nor earlier ones.
  const earlier = packPlain({ earlier: true })
  assert.ok(earlier)
  const earlierHex = hex(earlier)
  let inner: Buffer | undefined | null = null
  const outer = { a: 1, get b() {
    inner = packPlain({ x: 'inner' })
    return 2
  }, c: 3 }
  const outerBytes = packPlain(outer)
  assert.is(inner, undefined, 'the nested pack is declined')
  assert.ok(outerBytes)
  assert.is(hex(outerBytes), hex(packr.pack({ a: 1, b: 2, c: 3 })))
  assert.is(packPlain({ ...outer, d: undefined }), undefined)
  assert.is(packed({ after: 'x'.repeat(40) }), reference({ after: 'x'.repeat(40) }))
  assert.is(hex(earlier), earlierHex)
  // 512 levels are packed; deeper is declined.
  const nest = (levels: number): unknown => (levels === 0 ? 'leaf' : [nest(levels - 1)])
  assert.is(packed(nest(511)), reference(nest(511)))
  assert.is(packPlain(nest(600)), undefined)
})

test('later packs never overwrite earlier ones, across buffer chunks and values larger than a chunk', () => {
  const kept: { value: unknown; bytes: Buffer }[] = []
  for (let i = 0; i < 3_000; i += 1) {
    const value = i % 500 === 7 ? { big: 'y'.repeat(100_000 + i) } : { i, text: `value ${i}`, list: [i, -i, i / 3] }
    const bytes = packPlain(value)
    assert.ok(bytes)
    kept.push({ value, bytes })
  }
  for (const { value, bytes } of kept) assert.is(hex(bytes), reference(value))
})

test('a reserved front byte is left for the caller; workload events encode exactly as msgpackr would', () => {
  const out = packPlain({ a: 1 }, 1)
  assert.ok(out)
  assert.is(hex(out.subarray(1)), reference({ a: 1 }))
  const events = invocationEvents(invocationFor('mp', 1), invocationFacts(STEPS)).map((event) => validateEvent(event))
  for (const event of events) {
    const expected = packr.pack(event, RESERVE_START_SPACE | 1)
    expected[0] = 1
    assert.is(hex(encodeEvent(event)), hex(expected), event.fact.type)
  }
})

test('shape writers write what packPlain writes for objects of their shape, across buffer growth', () => {
  const point = shapeWriter(['x', 'label', 'tags', 'kind', 'ü-ключ'], [writePlainNumber, writePlainString, arrayWriter(writePlainString), constantWriter('point'), writePlain])
  assert.ok(point)
  const values = [
    { x: 1 },
    { x: -0x81, label: 'a'.repeat(40), tags: ['b', 'ü'.repeat(300)], kind: 'point', 'ü-ключ': { nested: [1, null, true] } },
    { label: '', kind: 'point' },
    {},
    { x: 0.5, tags: Array.from({ length: 70_000 }, (_, i) => `t${i}`) },
  ]
  for (const value of values) {
    const bytes = packWith(point, value)
    assert.ok(bytes)
    assert.is(hex(bytes), reference(value))
  }
  // A key `for…in` visits first (an array index) would change the order: no shape writer then.
  assert.is(shapeWriter(['a', '1'], [writePlain, writePlain]), undefined)
  const notIndex = shapeWriter(['a', '01', '4294967295'], [writePlain, writePlain, writePlain])
  assert.ok(notIndex)
  const odd = { a: 1, '01': 2, '4294967295': 3 }
  assert.is(hex(packWith(notIndex, odd) as Buffer), reference(odd))
  for (const constant of ['', 'x'.repeat(40), 0, -1, 0x1_0000, 0.25, true, false, null]) {
    assert.is(hex(packWith(constantWriter(constant), 'ignored') as Buffer), reference(constant))
  }
})

test.run()
