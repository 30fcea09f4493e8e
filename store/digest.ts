import { createHash, hash } from 'node:crypto'

/** The length of a chain value (sha256). */
export const CHAIN_BYTES = 32
/** The chain value before the first event. */
export const EMPTY_CHAIN: Uint8Array = new Uint8Array(CHAIN_BYTES)

function u64(value: number): Buffer {
  const out = Buffer.alloc(8)
  out.writeBigUInt64BE(BigInt(value))
  return out
}

/** The chain step's input (previous ‖ u64(seq) ‖ stored), reused: a step is synchronous. */
let stepInput = Buffer.allocUnsafeSlow(4096)
/** Inputs longer than this get a buffer of their own rather than growing the shared one for good. */
const STEP_INPUT_KEPT = 64 * 1024

/**
 * One step of a rolling chain, written as 32 bytes into `out` at `offset`: binds the previous value,
 * the seq and the exact stored bytes. Lets the id index record carry the chain without a copy.
 */
export function chainStepInto(previous: Uint8Array, seq: number, stored: Uint8Array, out: Buffer, offset: number): void {
  const length = previous.length + 8 + stored.length
  if (length > stepInput.length) {
    if (length > STEP_INPUT_KEPT) {
      out.set(createHash('sha256').update(previous).update(u64(seq)).update(stored).digest(), offset)
      return
    }
    stepInput = Buffer.allocUnsafeSlow(STEP_INPUT_KEPT)
  }
  // The same bytes hashed in one call: a Hash object per step costs more than the hashing.
  const input = stepInput
  input.set(previous, 0)
  input.writeUInt32BE(Math.floor(seq / 0x1_0000_0000), previous.length)
  input.writeUInt32BE(seq >>> 0, previous.length + 4)
  input.set(stored, previous.length + 8)
  // A plain view, not `subarray`: Node 20 makes a Buffer's subarray several times slower.
  const view = new Uint8Array(input.buffer, input.byteOffset, length)
  // Node 20's one-shot hash hands back a Buffer slowly: its latin1 string is written straight into `out`
  // (named `latin1`, not its alias `binary`, which `hash` normalises on a slower path; Node documents
  // any encoding for its output, its types only the binary-to-text ones).
  if (typeof hash === 'function') out.write(hash('sha256', view, 'latin1' as 'binary'), offset, 'latin1')
  else out.set(createHash('sha256').update(view).digest(), offset)
}

/** One step of a rolling chain: binds the previous value, the seq and the exact stored bytes. */
export function chainStep(previous: Uint8Array, seq: number, stored: Uint8Array): Uint8Array {
  const out = Buffer.allocUnsafe(CHAIN_BYTES)
  chainStepInto(previous, seq, stored, out, 0)
  return out
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
