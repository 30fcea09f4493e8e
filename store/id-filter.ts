/**
 * A Bloom filter over event ids: "certainly not in the log" in a fraction of a microsecond, where
 * LevelDB answers a missing key only after a memtable search and a probe of every level-0 table
 * (several microseconds under write load). It may answer "maybe" for an id the log lacks (then the
 * index is read), never "no" for an id it holds.
 */

import { createHash } from 'node:crypto'
import { endianness } from 'node:os'

/** Bits per expected id: with 7 probes, about 1% false "maybe" answers at capacity. */
const BITS_PER_ID = 10
const PROBES = 7

/** FNV-1a over the UTF-16 code units, with a second, differently seeded pass for double hashing. */
function hashes(id: string): [number, number] {
  let a = 0x811c9dc5
  let b = 0x01000193 ^ id.length
  for (let i = 0; i < id.length; i += 1) {
    const unit = id.charCodeAt(i)
    a = Math.imul(a ^ unit, 0x01000193)
    b = Math.imul(b ^ unit, 0x5bd1e995)
    b ^= b >>> 15
  }
  // An odd step visits distinct bits for every probe of a power-of-two table.
  return [a >>> 0, (b | 1) >>> 0]
}

/** No filter is made for more ids than this (the log's own limit is lower). */
const MAX_CAPACITY = 1 << 28

export class IdFilter {
  readonly capacity: number
  #count = 0
  readonly #bits: Uint32Array
  readonly #mask: number

  /**
   * A filter sized for `capacity` ids: 10 bits each, rounded up to a power of two of bits. `bits`
   * (that size) are a stored filter's, taken over: `restore` checks them before it passes them.
   */
  constructor(capacity: number, bits: Uint32Array = new Uint32Array(IdFilter.#bitsFor(capacity) / 32), count = 0) {
    this.capacity = capacity
    this.#bits = bits
    this.#count = count
    this.#mask = this.#bits.length * 32 - 1
  }

  static #bitsFor(capacity: number): number {
    let size = 1 << 10
    while (size < capacity * BITS_PER_ID) size *= 2
    return size
  }

  /** How many ids were added (repeats included). */
  get count(): number {
    return this.#count
  }

  /** Past its capacity the filter answers "maybe" more and more often. */
  get full(): boolean {
    return this.#count > this.capacity
  }

  /**
   * A filter of `capacity` ids over `bits` as `stored` gave them (taken over, not copied), or
   * `undefined` when they cannot be one (another size, a count that is not a count).
   */
  static restore(capacity: number, count: number, bits: Uint32Array): IdFilter | undefined {
    if (!Number.isSafeInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY || !Number.isSafeInteger(count) || count < 0) return undefined
    if (bits.length * 32 !== IdFilter.#bitsFor(capacity)) return undefined
    return new IdFilter(capacity, bits, count)
  }

  /** The filter's own bits (not a copy: valid while no id is added), its capacity and count. */
  stored(): { capacity: number; count: number; bits: Uint32Array } {
    return { capacity: this.capacity, count: this.#count, bits: this.#bits }
  }

  /** Adds `id`; true when it was certainly not added before (what `mayContain` would have said false to). */
  add(id: string): boolean {
    const [a, b] = hashes(id)
    let fresh = false
    for (let i = 0; i < PROBES; i += 1) {
      const bit = (a + Math.imul(i, b)) & this.#mask
      const word = this.#bits[bit >>> 5] as number
      const mask = 1 << (bit & 31)
      if ((word & mask) === 0) {
        fresh = true
        this.#bits[bit >>> 5] = word | mask
      }
    }
    this.#count += 1
    return fresh
  }

  /** False only when `id` was never added. */
  mayContain(id: string): boolean {
    const [a, b] = hashes(id)
    for (let i = 0; i < PROBES; i += 1) {
      const bit = (a + Math.imul(i, b)) & this.#mask
      if (((this.#bits[bit >>> 5] as number) & (1 << (bit & 31))) === 0) return false
    }
    return true
  }
}

/**
 * A filter as stored beside the log (`FACTSTATE-IDS`): what it holds the ids of (every event up to
 * `highWater`, whose digest chain is `chain`) and the filter itself.
 */
export interface StoredIdFilter {
  highWater: number
  chain: Uint8Array
  filter: IdFilter
}

/** 16 bytes of magic; the high-water, capacity and count (float64); the chain; the bits; a sha256 of all before it. */
const MAGIC = Buffer.from('factstate-ids v1', 'latin1')
const CHAIN = 32
const HEADER = MAGIC.length + 24 + CHAIN
const CHECKSUM = 32

/**
 * The bytes to store for `filter`, covering the events up to `highWater` with chain `chain`, in
 * parts to write one after another: the header, the filter's own bits (not a copy: write them
 * before another id is added) and the checksum. The bits are in this machine's byte order, which the
 * count's sign records; `parseIdFilter` refuses them on a machine of the other.
 */
export function serializeIdFilter(filter: IdFilter, highWater: number, chain: Uint8Array): Uint8Array[] {
  const { capacity, count, bits } = filter.stored()
  const header = Buffer.alloc(HEADER)
  MAGIC.copy(header, 0)
  header.writeDoubleLE(highWater, MAGIC.length)
  header.writeDoubleLE(capacity, MAGIC.length + 8)
  header.writeDoubleLE(endianness() === 'LE' ? count : -1 - count, MAGIC.length + 16)
  header.set(chain.subarray(0, CHAIN), MAGIC.length + 24)
  const body = new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength)
  return [header, body, createHash('sha256').update(header).update(body).digest()]
}

/**
 * The stored filter, or `undefined` for anything that is not one written by `serializeIdFilter` on
 * a machine of this byte order: wrong magic, size or checksum. A stored filter is only a shortcut,
 * so a damaged one is ignored, never trusted. The filter is built over `bytes`' own memory when it
 * is aligned for it (as a file read whole is).
 */
export function parseIdFilter(bytes: Uint8Array): StoredIdFilter | undefined {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (buffer.length < HEADER + CHECKSUM || !buffer.subarray(0, MAGIC.length).equals(MAGIC)) return undefined
  const body = buffer.subarray(0, buffer.length - CHECKSUM)
  if (!createHash('sha256').update(body).digest().equals(buffer.subarray(body.length))) return undefined
  const highWater = buffer.readDoubleLE(MAGIC.length)
  const capacity = buffer.readDoubleLE(MAGIC.length + 8)
  const stored = buffer.readDoubleLE(MAGIC.length + 16)
  // A negative count marks bits stored in big-endian order.
  if (!Number.isSafeInteger(highWater) || highWater < 0 || stored < 0 !== (endianness() === 'BE')) return undefined
  const at = body.byteOffset + HEADER
  const length = body.length - HEADER
  if (length % 4 !== 0) return undefined
  const bits = at % 4 === 0 ? new Uint32Array(body.buffer, at, length / 4) : new Uint32Array(Uint8Array.from(body.subarray(HEADER)).buffer)
  const filter = IdFilter.restore(capacity, stored < 0 ? -1 - stored : stored, bits)
  if (filter === undefined) return undefined
  return { highWater, chain: Uint8Array.from(body.subarray(MAGIC.length + 24, HEADER)), filter }
}
