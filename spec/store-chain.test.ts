/**
 * The rolling chain and the id index record that carries it: `chainStep` against sha256 computed
 * here from its definition, and `chainedIdRecord` byte for byte against the generic record encoder.
 */
import fc from 'fast-check'
import { createHash } from 'node:crypto'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { CHAIN_BYTES, EMPTY_CHAIN, chainStep } from '../store/digest.js'
import { chainedIdRecord, decodeRecord, encodeRecord } from '../store/encoding.js'

const test = suite('store: chain')

/** sha256(previous ‖ u64be(seq) ‖ stored), as DESIGN defines a chain step. */
function reference(previous: Uint8Array, seq: number, stored: Uint8Array): Buffer {
  const seqBytes = Buffer.alloc(8)
  seqBytes.writeBigUInt64BE(BigInt(seq))
  return createHash('sha256').update(previous).update(seqBytes).update(stored).digest()
}

/** Seqs on every width boundary of the record's msgpack uint, and past the fast path's 2^32. */
const boundarySeqs = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xffff_ffff, 0x1_0000_0000, 2 ** 40 + 3, Number.MAX_SAFE_INTEGER]
const seqs = fc.oneof(fc.constantFrom(...boundarySeqs), fc.integer({ min: 0, max: 0xffff_ffff }), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }))
const chains = fc.uint8Array({ minLength: CHAIN_BYTES, maxLength: CHAIN_BYTES })
const stored = fc.uint8Array({ maxLength: 2048 })

test('chainStep is sha256 of previous, the seq as 8 bytes and the stored bytes', () => {
  fc.assert(
    fc.property(chains, seqs, stored, (previous, seq, bytes) => {
      assert.equal(Buffer.from(chainStep(previous, seq, bytes)).toString('hex'), reference(previous, seq, bytes).toString('hex'))
    }),
    { numRuns: 500 },
  )
})

test('chainedIdRecord is encodeRecord([seq, chain]) and ends with the chain', () => {
  fc.assert(
    fc.property(chains, seqs, stored, (previous, seq, bytes) => {
      const record = chainedIdRecord(previous, seq, bytes)
      const chain = chainStep(previous, seq, bytes)
      assert.equal(Buffer.from(record).toString('hex'), Buffer.from(encodeRecord([seq, chain])).toString('hex'))
      assert.equal(Buffer.from(record.subarray(record.length - CHAIN_BYTES)).toString('hex'), Buffer.from(chain).toString('hex'))
      const [decodedSeq, decodedChain] = decodeRecord<[number, Uint8Array]>(record, 'id record')
      assert.is(decodedSeq, seq)
      assert.equal(Buffer.from(decodedChain).toString('hex'), Buffer.from(chain).toString('hex'))
    }),
    { numRuns: 500 },
  )
})

test('a step over stored bytes larger than the reused input buffer is the same sha256', () => {
  for (const length of [4096, 64 * 1024 - 40, 64 * 1024, 300_000]) {
    const bytes = new Uint8Array(length).map((_, index) => (index * 31) & 0xff)
    const expected = reference(EMPTY_CHAIN, length, bytes).toString('hex')
    assert.is(Buffer.from(chainStep(EMPTY_CHAIN, length, bytes)).toString('hex'), expected, `${length} bytes`)
    const record = chainedIdRecord(EMPTY_CHAIN, length, bytes)
    assert.is(Buffer.from(record.subarray(record.length - CHAIN_BYTES)).toString('hex'), expected, `${length} bytes, id record`)
  }
  // A small step after the big ones still hashes only its own input.
  const small = new Uint8Array([1, 2, 3])
  assert.is(Buffer.from(chainStep(EMPTY_CHAIN, 7, small)).toString('hex'), reference(EMPTY_CHAIN, 7, small).toString('hex'))
})

test('each step returns bytes of its own: a later step leaves earlier chains and records unchanged', () => {
  let previous: Uint8Array = EMPTY_CHAIN
  const chainsSeen: { chain: Uint8Array; hex: string }[] = []
  const records: { record: Uint8Array; hex: string }[] = []
  for (let seq = 1; seq <= 64; seq += 1) {
    const bytes = new Uint8Array(seq * 7).fill(seq)
    const record = chainedIdRecord(previous, seq, bytes)
    records.push({ record, hex: Buffer.from(record).toString('hex') })
    const chain = chainStep(previous, seq, bytes)
    chainsSeen.push({ chain, hex: Buffer.from(chain).toString('hex') })
    // The next step chains from the record's own view of the chain, as the log does.
    previous = record.subarray(record.length - CHAIN_BYTES)
  }
  for (const { chain, hex } of chainsSeen) assert.is(Buffer.from(chain).toString('hex'), hex)
  for (const { record, hex } of records) assert.is(Buffer.from(record).toString('hex'), hex)
  assert.is(new Set(chainsSeen.map(({ hex }) => hex)).size, 64)
})

test.run()
