import { createHash, hash } from 'node:crypto'

/** The chain value before the first event. */
export const EMPTY_CHAIN: Uint8Array = new Uint8Array(32)

function u64(value: number): Buffer {
  const out = Buffer.alloc(8)
  out.writeBigUInt64BE(BigInt(value))
  return out
}

/** One step of a rolling chain: binds the previous value, the seq and the exact stored bytes. */
export function chainStep(previous: Uint8Array, seq: number, stored: Uint8Array): Uint8Array {
  // The same bytes as previous ‖ u64(seq) ‖ stored, hashed in one call: a Hash object per step costs more than the hashing.
  const input = Buffer.allocUnsafe(previous.length + 8 + stored.length)
  input.set(previous, 0)
  input.writeUInt32BE(Math.floor(seq / 0x1_0000_0000), previous.length)
  input.writeUInt32BE(seq >>> 0, previous.length + 4)
  input.set(stored, previous.length + 8)
  // Node 20's one-shot hash hands back a Buffer slowly: a latin1 string and a pooled copy of it cost a third.
  return typeof hash === 'function' ? Buffer.from(hash('sha256', input, 'binary'), 'latin1') : createHash('sha256').update(input).digest()
}

/** The log digest: binds the scope `log`, the high-water and the chain. */
export function logDigest(highWater: number, chain: Uint8Array): string {
  return `sha256:${createHash('sha256').update('factstate/v1\0log\0').update(u64(highWater)).update(chain).digest('hex')}`
}

/** The first chain value of a run: binds its scope and, for continuations and successors, its source. */
export function runChainStart(sessionId: string, runId: string, sourceDigest: string | undefined): Uint8Array {
  return createHash('sha256')
    .update(`factstate/v1\0run-start\0${sessionId}\0${runId}\0${sourceDigest ?? ''}`)
    .digest()
}

/** A run boundary's digest: binds the run's scope, its high-water and its lineage chain. */
export function runDigest(sessionId: string, runId: string, highWater: number, chain: Uint8Array): string {
  return `sha256:${createHash('sha256')
    .update(`factstate/v1\0run\0${sessionId}\0${runId}\0`)
    .update(u64(highWater))
    .update(chain)
    .digest('hex')}`
}

/** sha256 of a string or bytes, as `sha256:<hex>`. */
export function contentDigest(content: string | Uint8Array): string {
  return `sha256:${createHash('sha256').update(content).digest('hex')}`
}
