import { Packr } from 'msgpackr'
import { FactstateError } from '../errors.js'
import { describeIssues, runtimeEventSchema } from '../facts/schema.js'
import type { RuntimeEvent } from '../facts/types.js'

/** The version byte in front of every stored event. A record with another first byte is corrupt. */
export const EVENT_FORMAT_VERSION = 1

// Records, not shared structures: a shared-structure table that drifts silently mis-decodes.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false })

/**
 * Returns a copy of `value` with every `undefined` object member removed, so that one value has
 * exactly one encoding (msgpack would otherwise keep an explicit `undefined`).
 */
export function canonical<T>(value: T): T {
  if (Array.isArray(value)) return value.map((item) => canonical(item)) as T
  if (value !== null && typeof value === 'object' && !ArrayBuffer.isView(value)) {
    const out: Record<string, unknown> = {}
    for (const [key, member] of Object.entries(value)) {
      if (member !== undefined) out[key] = canonical(member)
    }
    return out as T
  }
  return value
}

/** True when `value` holds an `undefined` object member somewhere (what `canonical` would drop). */
function hasUndefined(value: unknown): boolean {
  if (Array.isArray(value)) return value.some((item) => hasUndefined(item))
  if (value !== null && typeof value === 'object' && !ArrayBuffer.isView(value)) {
    for (const member of Object.values(value)) {
      if (member === undefined || hasUndefined(member)) return true
    }
  }
  return false
}

/** Validates an event at the boundary; an event that does not fit is `LOG_INVALID_EVENT`. */
export function validateEvent(event: unknown): RuntimeEvent {
  const parsed = runtimeEventSchema.safeParse(event)
  if (!parsed.success) {
    throw new FactstateError('LOG_INVALID_EVENT', `the event does not fit the fact schema: ${describeIssues(parsed.error)}`)
  }
  // zod's output is already a fresh copy: only copy again when there is an `undefined` to drop.
  const data = parsed.data as RuntimeEvent
  return hasUndefined(data) ? canonical(data) : data
}

/** Encodes a validated event: one version byte, then msgpack. */
export function encodeEvent(event: RuntimeEvent): Uint8Array {
  const body = packr.pack(event)
  const out = new Uint8Array(body.length + 1)
  out[0] = EVENT_FORMAT_VERSION
  out.set(body, 1)
  return out
}

/** Decodes and validates stored bytes; anything else is `LOG_CORRUPT` naming `seq`. */
export function decodeEvent(bytes: Uint8Array, seq: number): RuntimeEvent {
  if (bytes.length < 2 || bytes[0] !== EVENT_FORMAT_VERSION) {
    throw new FactstateError('LOG_CORRUPT', `event ${seq} has unknown format version ${bytes[0] ?? 'none'}`, { details: { seq } })
  }
  let decoded: unknown
  try {
    decoded = packr.unpack(bytes.subarray(1))
  } catch (cause) {
    throw new FactstateError('LOG_CORRUPT', `event ${seq} cannot be decoded`, { cause, details: { seq } })
  }
  const parsed = runtimeEventSchema.safeParse(decoded)
  if (!parsed.success) {
    throw new FactstateError('LOG_CORRUPT', `event ${seq} decodes to something that is not an event: ${describeIssues(parsed.error)}`, {
      details: { seq },
    })
  }
  return parsed.data as RuntimeEvent
}

/** The invocation id of stored event bytes, read without validating the event; `undefined` if they do not decode. */
export function peekInvocationId(bytes: Uint8Array): string | undefined {
  if (bytes[0] !== EVENT_FORMAT_VERSION) return undefined
  try {
    const id = (packr.unpack(bytes.subarray(1)) as { invocation?: { invocationId?: unknown } } | null)?.invocation?.invocationId
    return typeof id === 'string' ? id : undefined
  } catch {
    return undefined
  }
}

/** Encodes an index record (internal bookkeeping, not part of the digest). */
export function encodeRecord(value: unknown): Uint8Array {
  return packr.pack(hasUndefined(value) ? canonical(value) : value)
}

/** Decodes an index record; `what` names it in the corruption error. */
export function decodeRecord<T>(bytes: Uint8Array, what: string): T {
  try {
    return packr.unpack(bytes) as T
  } catch (cause) {
    throw new FactstateError('LOG_CORRUPT', `index record ${what} cannot be decoded`, { cause })
  }
}
