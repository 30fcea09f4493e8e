/**
 * A Bloom filter over event ids: "certainly not in the log" in a fraction of a microsecond, where
 * LevelDB answers a missing key only after a memtable search and a probe of every level-0 table
 * (several microseconds under write load). It may answer "maybe" for an id the log lacks (then the
 * index is read), never "no" for an id it holds.
 */

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
