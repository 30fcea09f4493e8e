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

  /** A filter sized for `capacity` ids: 10 bits each, rounded up to a power of two of bits. */
  constructor(capacity: number) {
    this.capacity = capacity
    let size = 1 << 10
    while (size < capacity * BITS_PER_ID) size *= 2
    this.#bits = new Uint32Array(size / 32)
    this.#mask = size - 1
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
   * A filter with the bits and count `snapshot` took, or `undefined` when they cannot be a filter
   * of `capacity` ids (a different size).
   */
  static restore(capacity: number, count: number, bits: Uint8Array): IdFilter | undefined {
    if (!Number.isSafeInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY || !Number.isSafeInteger(count) || count < 0) return undefined
    const filter = new IdFilter(capacity)
    if (bits.byteLength !== filter.#bits.byteLength) return undefined
    new Uint8Array(filter.#bits.buffer).set(bits)
    filter.#count = count
    return filter
  }

  /** A copy of the filter's bits (in this machine's byte order), with its capacity and count. */
  snapshot(): { capacity: number; count: number; bits: Uint8Array } {
    return { capacity: this.capacity, count: this.#count, bits: new Uint8Array(this.#bits.buffer.slice(0)) }
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

/** 16 bytes of magic, then the high-water, capacity and count (float64), the chain, the bits, and a sha256 of all of it. */
const MAGIC = Buffer.from('factstate-ids v1', 'latin1')
const HEADER = MAGIC.length + 24
const CHAIN = 32
const CHECKSUM = 32

/**
 * The bytes to store for `filter`, covering the events up to `highWater` with chain `chain`. The bits
 * are stored in this machine's byte order; `parseIdFilter` refuses them on a machine of the other.
 */
export function serializeIdFilter(filter: IdFilter, highWater: number, chain: Uint8Array): Uint8Array {
  const { capacity, count, bits } = filter.snapshot()
  const bytes = Buffer.alloc(HEADER + CHAIN + bits.byteLength + CHECKSUM)
  MAGIC.copy(bytes, 0)
  bytes.writeDoubleLE(highWater, MAGIC.length)
  bytes.writeDoubleLE(capacity, MAGIC.length + 8)
  bytes.writeDoubleLE(endianness() === 'LE' ? count : -1 - count, MAGIC.length + 16)
  bytes.set(chain.subarray(0, CHAIN), HEADER)
  bytes.set(bits, HEADER + CHAIN)
  const body = bytes.subarray(0, bytes.length - CHECKSUM)
  bytes.set(createHash('sha256').update(body).digest(), body.length)
  return bytes
}

/**
 * The stored filter, or `undefined` for anything that is not one written by `serializeIdFilter` on
 * a machine of this byte order: wrong magic, size or checksum. A stored filter is only a shortcut,
 * so a damaged one is ignored, never trusted.
 */
export function parseIdFilter(bytes: Uint8Array): StoredIdFilter | undefined {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (buffer.length < HEADER + CHAIN + CHECKSUM || !buffer.subarray(0, MAGIC.length).equals(MAGIC)) return undefined
  const body = buffer.subarray(0, buffer.length - CHECKSUM)
  if (!createHash('sha256').update(body).digest().equals(buffer.subarray(body.length))) return undefined
  const highWater = buffer.readDoubleLE(MAGIC.length)
  const capacity = buffer.readDoubleLE(MAGIC.length + 8)
  const stored = buffer.readDoubleLE(MAGIC.length + 16)
  // A negative count marks bits stored in big-endian order.
  if (!Number.isSafeInteger(highWater) || highWater < 0 || stored < 0 !== (endianness() === 'BE')) return undefined
  const filter = IdFilter.restore(capacity, stored < 0 ? -1 - stored : stored, body.subarray(HEADER + CHAIN))
  if (filter === undefined) return undefined
  return { highWater, chain: Uint8Array.from(body.subarray(HEADER, HEADER + CHAIN)), filter }
}
