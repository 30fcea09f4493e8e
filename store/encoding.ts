import { isDeepStrictEqual } from 'node:util'
import { Packr, RESERVE_START_SPACE } from 'msgpackr'
import { FactstateError } from '../errors.js'
import { parseRuntimeEvent } from '../facts/compiled-schema.js'
import { describeIssues, issueFields, providerStateProblem, requestFingerprintSchema, runtimeEventSchema } from '../facts/schema.js'
import type { ExecutionSettings, Fact, Invocation, ParentCall, RuntimeEvent } from '../facts/types.js'
import { CHAIN_BYTES, chainStep, chainStepInto } from './digest.js'
import { packPlain } from './msgpack-plain.js'
import { packValidatedEvent } from './shaped-writer.js'

/**
 * The index format a log must be marked with (at least) once it holds a fact that `carriesProviderState`:
 * the releases that read up to 5 (0.9.x) refuse such a fact as damage (see `INDEX_FORMAT` in event-log.ts).
 */
export const PROVIDER_STATE_FORMAT = 6

/** Whether `fact` is a `model.completed` carrying the provider's opaque state (`output.reasoningDetails`, a call's `extraContent`). */
export function carriesProviderState(fact: Fact): boolean {
  if (fact.type !== 'model.completed') return false
  if (fact.output.reasoningDetails !== undefined) return true
  for (const call of fact.output.toolCalls) if (call.extraContent !== undefined) return true
  return false
}

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

/** How deep a fact's JSON may nest; deeper (or cyclic) values are refused before schema parsing recurses. */
export const MAX_DEPTH = 64
/** The most members an object may have: msgpack as the log writes it (map16, as msgpackr does) holds no more. */
export const MAX_OBJECT_MEMBERS = 0xffff
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
// `isWellFormed` (Node 20+, not yet in the es2023 lib) answers the same question as the pattern, several times faster.
const isWellFormed = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed
const hasLoneSurrogate = (text: string): boolean => (isWellFormed ? !isWellFormed.call(text) : LONE_SURROGATE.test(text))

/**
 * What the schema cannot see but the stored bytes would change: a string with a lone surrogate
 * (msgpack stores it as U+FFFD), an own `__proto__` key (JSON.parse makes one; copying drops it),
 * and values nested too deep or in a cycle. Returns the path of the first offence.
 */
function unstorable(value: unknown, path: string, depth: number): string | undefined {
  const found = offence(value, depth)
  if (found === undefined) return undefined
  if (found.reason !== TOO_DEEP) return `${path}${found.path}: ${found.reason}`
  // Too deep: a cycle is named by where it closes, not by a path that goes round it until the limit.
  const cycle = cycleIn(value, '', { ancestors: new Map(), done: new Set(), steps: 0, cut: false }, 0)
  if (cycle !== undefined) return `${path}${cycle.at}: refers back to ${path}${cycle.to} (a cycle: a fact holds JSON data, which has none)`
  return `${path}${found.path}: ${found.reason}`
}

const TOO_DEEP = `nested deeper than ${MAX_DEPTH} levels`
/** How many members the search for a cycle looks at, at most: past it the value is refused for its depth alone. */
const CYCLE_SEARCH_STEPS = 100_000

interface CycleSearch {
  /** The objects on the path from the root, with their paths. */
  ancestors: Map<object, string>
  /** Objects searched whole, with no cycle through them: one reached again by another path is not searched again. */
  done: Set<object>
  steps: number
  /** The search stopped short somewhere below (depth or steps): what it left is not known to be free of cycles. */
  cut: boolean
}

/**
 * The first member of `value` that is one of its own ancestors (by identity), and where that
 * ancestor is: a depth-first search that visits each object once (objects shared by several
 * members are common in real values), so its cost stays in proportion to the value. Only on an
 * error's path.
 */
function cycleIn(value: unknown, path: string, search: CycleSearch, depth: number): { at: string; to: string } | undefined {
  if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value)) return undefined
  const seen = search.ancestors.get(value)
  if (seen !== undefined) return { at: path, to: seen }
  if (search.done.has(value)) return undefined
  // Past twice the limit a value is refused for its depth whatever it holds; this also bounds the stack.
  if (depth > 2 * MAX_DEPTH || search.steps > CYCLE_SEARCH_STEPS) {
    search.cut = true
    return undefined
  }
  const cutAbove = search.cut
  search.cut = false
  search.ancestors.set(value, path)
  try {
    for (const key of Object.getOwnPropertyNames(value)) {
      if (Array.isArray(value) && key === 'length') continue
      search.steps += 1
      let member: unknown
      try {
        member = (value as Record<string, unknown>)[key]
      } catch {
        continue
      }
      const found = cycleIn(member, `${path}.${key}`, search, depth + 1)
      if (found) return found
    }
    if (!search.cut) search.done.add(value)
    return undefined
  } finally {
    search.ancestors.delete(value)
    search.cut ||= cutAbove
  }
}

// The path is put together only for an offence, on the way back up: a clean event builds no strings.
function offence(value: unknown, depth: number): { path: string; reason: string } | undefined {
  if (typeof value === 'string') return hasLoneSurrogate(value) ? { path: '', reason: 'a string with a lone surrogate cannot be stored exactly' } : undefined
  if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value)) return undefined
  if (depth > MAX_DEPTH) return { path: '', reason: TOO_DEEP }
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index += 1) {
      const item: unknown = value[index]
      // Refused here, at the first, not by the schema's parse: it would word a union's issues for each
      // item, and a sparse array of millions of holes costs its maker nothing (no fact's array holds one).
      if (item === undefined || typeof item === 'function' || typeof item === 'symbol' || typeof item === 'bigint') {
        const what = item === undefined ? (index in value ? 'undefined' : 'a hole') : `a ${typeof item}`
        return { path: `.${index}`, reason: `${what} cannot be stored: an array holds JSON values` }
      }
      const found = offence(item, depth + 1)
      if (found) return { path: `.${index}${found.path}`, reason: found.reason }
    }
    return undefined
  }
  if (Object.hasOwn(value, '__proto__')) return { path: '', reason: 'an own "__proto__" key cannot be stored exactly' }
  // Every own member, enumerable or not: the schema's parse reads a non-enumerable one too.
  const names = Object.getOwnPropertyNames(value)
  if (names.length > MAX_OBJECT_MEMBERS) return { path: '', reason: `an object with more than ${MAX_OBJECT_MEMBERS} members cannot be stored` }
  for (const key of names) {
    if (hasLoneSurrogate(key)) return { path: '', reason: 'a key with a lone surrogate cannot be stored exactly' }
    const found = offence((value as Record<string, unknown>)[key], depth + 1)
    if (found) return { path: `.${key}${found.path}`, reason: found.reason }
  }
  return undefined
}

/** Why `value` could not be stored exactly in a fact, or `undefined` when it can. */
export function storageProblem(value: unknown): string | undefined {
  return unstorable(value, '(value)', 1)
}

/**
 * `storageProblem` for a value that will sit `depth` levels down in the deepest event that holds it;
 * `root` is what its paths start with (`tools.0`, say).
 */
export function storageProblemAt(value: unknown, depth: number, root = '(value)'): string | undefined {
  return unstorable(value, root, depth)
}

/**
 * Something that can be listened to as an AbortSignal (an `AbortController`'s, or one of another
 * realm): what `engine.start` and `EventLog.open` take. Never throws: what cannot be read (a
 * revoked proxy, a getter that throws) is no signal.
 */
export function isAbortSignal(value: unknown): value is AbortSignal {
  const candidate = value as Partial<AbortSignal> | null
  try {
    return typeof candidate === 'object' && candidate !== null && typeof candidate.aborted === 'boolean' && typeof candidate.addEventListener === 'function' && typeof candidate.removeEventListener === 'function'
  } catch {
    return false
  }
}

/** What `messageOf` says of a value none of whose readings work: a revoked proxy throws even for `Object.prototype.toString`. */
export const UNREADABLE_THROWN = 'a value that cannot be read (such as a revoked proxy)'

/**
 * A message for anything thrown, as a fact can hold it: never throws (a thrown value whose `String`
 * or `message` getter throws, one with no prototype, or a revoked proxy still gets one), and every
 * lone surrogate is replaced by U+FFFD.
 */
export function messageOf(error: unknown): string {
  let text: string
  try {
    const message = error instanceof Error ? (error as { message?: unknown }).message : undefined
    text = typeof message === 'string' ? message : String(error)
  } catch {
    try {
      text = Object.prototype.toString.call(error)
    } catch {
      text = UNREADABLE_THROWN
    }
  }
  return wellFormed(text)
}

/**
 * Whether `value` holds a number JSON cannot write (NaN, ±Infinity). `JSON.parse` makes one of a
 * literal too large for a double, such as `1e400`: valid JSON text whose value no fact can hold.
 */
export function hasNonFiniteNumber(value: unknown, depth = 0): boolean {
  if (typeof value === 'number') return !Number.isFinite(value)
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return false
  for (const member of Array.isArray(value) ? value : Object.values(value)) {
    if (hasNonFiniteNumber(member, depth + 1)) return true
  }
  return false
}

/** `text` cut to at most `limit` UTF-16 units, never between the two halves of a character, with an ellipsis when cut. */
export function cutText(text: string, limit: number): string {
  if (text.length <= limit) return text
  const end = /[\uD800-\uDBFF]/.test(text.charAt(limit - 1)) ? limit - 1 : limit
  return `${text.slice(0, end)}…`
}

/** A copy of text from outside (a model's answer) with every lone surrogate replaced by U+FFFD, as a fact can hold it. */
export function wellFormed<T>(value: T): T {
  if (typeof value === 'string') return (LONE_SURROGATE.test(value) ? value.replace(new RegExp(LONE_SURROGATE, 'g'), '\ufffd') : value) as T
  if (Array.isArray(value)) return value.map((item) => wellFormed(item)) as T
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, member]) => [wellFormed(key), wellFormed(member)])) as T
  }
  return value
}

/**
 * Validates an event at the boundary; an event that does not fit is `LOG_INVALID_EVENT`, and so is
 * one that cannot be read (a getter or a proxy trap that throws).
 */
export function validateEvent(event: unknown): RuntimeEvent {
  try {
    return validate(event)
  } catch (error) {
    if (error instanceof FactstateError) throw error
    throw new FactstateError('LOG_INVALID_EVENT', `the event cannot be read: ${messageOf(error)}`, { cause: error, details: { fields: [] } })
  }
}

function validate(event: unknown): RuntimeEvent {
  // The compiled copier answers exactly what the checks below would for plain valid events, or
  // nothing when unsure; only then do the checks run, and they alone word the refusal.
  const copied = parseRuntimeEvent(event, MAX_DEPTH)
  if (copied !== undefined) return copied
  const found = offence(event, 0)
  if (found) {
    throw new FactstateError('LOG_INVALID_EVENT', `the event cannot be stored exactly: (event)${found.path}: ${found.reason}`, {
      details: { fields: [found.path === '' ? '(root)' : found.path.slice(1)] },
    })
  }
  const parsed = runtimeEventSchema.safeParse(event)
  if (!parsed.success) {
    throw new FactstateError('LOG_INVALID_EVENT', `the event does not fit the fact schema: ${describeIssues(parsed.error)}`, {
      details: { fields: issueFields(parsed.error) },
    })
  }
  // zod's output is already a fresh copy: only copy again when there is an `undefined` to drop.
  const data = parsed.data as RuntimeEvent
  // Checked again on the copy, which is what is stored: a getter of the caller's may have given the
  // parse another value than the check above read (one nested past the depth limit, say).
  const inCopy = offence(data, 0)
  if (inCopy) {
    throw new FactstateError('LOG_INVALID_EVENT', `the event cannot be stored exactly: (event)${inCopy.path}: ${inCopy.reason}`, {
      details: { fields: [inCopy.path === '' ? '(root)' : inCopy.path.slice(1)] },
    })
  }
  return hasUndefined(data) ? canonical(data) : data
}

/** Refuses a `model.completed` whose provider state (`field`) is out of bounds (`problem`). */
function providerStateRule(problem: string | undefined, field: string): void {
  if (problem !== undefined) throw new FactstateError('LOG_INVALID_EVENT', `the event does not fit the fact schema: ${field}: ${problem}`, { details: { fields: [field] } })
}

/**
 * The rules between a fact's fields that its schema does not state, checked for every append after
 * `validateEvent` (stored facts are read as written, so a log written before a rule stays readable):
 * a `tool.rejected` is `denied` exactly when it records the approver's decision (`approval`); an
 * `invocation.opened`'s `requestFingerprint` is 1–256 characters, as the engine's run input is; its
 * `parent`, when present, names one of its invocation's operations and another invocation; its
 * `execution.replayBase`, when present, is a continuation's `input.source`; a
 * tool catalog's `digests`, when present, has one digest per name; a `model.completed`'s
 * `reasoningDetails` and each call's `extraContent`, when present, are within their bounds (see
 * `providerStateProblem`: 1–256 entries, 1 MiB of JSON; a non-empty object of 256 KiB at most).
 */
export function checkFactRules(event: RuntimeEvent): void {
  const { fact } = event
  if (fact.type === 'model.completed') {
    const { output } = fact
    if (output.reasoningDetails !== undefined) providerStateRule(providerStateProblem(output.reasoningDetails, undefined), 'fact.output.reasoningDetails')
    for (const [index, call] of output.toolCalls.entries()) {
      if (call.extraContent !== undefined) providerStateRule(providerStateProblem(undefined, call.extraContent), `fact.output.toolCalls.${index}.extraContent`)
    }
    return
  }
  if (fact.type === 'invocation.opened') {
    const fingerprint = fact.input.requestFingerprint
    if (fingerprint !== undefined && !requestFingerprintSchema.safeParse(fingerprint).success) {
      throw new FactstateError(
        'LOG_INVALID_EVENT',
        `the event does not fit the fact schema: fact.input.requestFingerprint is 1–256 characters, as a run input's is (counted as a string's length, in UTF-16 units: this one's is ${fingerprint.length})`,
        { details: { fields: ['fact.input.requestFingerprint'] } },
      )
    }
    if (fact.input.kind !== 'handoff' && fact.input.parent !== undefined) checkParent(fact.input.parent, event.invocation)
    checkCatalog(fact.execution, 'fact.execution')
    // The boundary a run's transcript is replayed from is its source, which a continuation's input
    // names: the engine records the two alike, and a message run has none. (A successor's execution
    // is its seal's, whose replayBase is the sealed run's own source.)
    const { replayBase } = fact.execution
    if (replayBase !== undefined && fact.input.kind !== 'handoff' && (fact.input.kind === 'message' || !isDeepStrictEqual(replayBase, fact.input.source))) {
      throw new FactstateError(
        'LOG_INVALID_EVENT',
        fact.input.kind === 'message'
          ? 'the event does not fit the fact schema: a run opened with a message replays no source (fact.execution.replayBase is only a continuation\'s)'
          : "the event does not fit the fact schema: fact.execution.replayBase is the continuation's source, and differs from fact.input.source",
        { details: { fields: ['fact.execution.replayBase'] } },
      )
    }
    if (fact.input.kind === 'handoff') checkCatalog(fact.input.pause.execution, 'fact.input.pause.execution')
  }
  if (fact.type === 'invocation.ended' && fact.outcome.status === 'handoff_paused') checkCatalog(fact.outcome.pause.execution, 'fact.outcome.pause.execution')
  if (fact.type === 'tool.rejected' && (fact.reason === 'denied') !== (fact.approval !== undefined)) {
    throw new FactstateError(
      'LOG_INVALID_EVENT',
      fact.reason === 'denied'
        ? `the event does not fit the fact schema: a tool.rejected for reason denied records the approver's decision (fact.approval)`
        : `the event does not fit the fact schema: only a tool.rejected for reason denied records an approver's decision (fact.approval), not one for ${fact.reason}`,
      { details: { fields: ['fact.approval'] } },
    )
  }
  if (fact.type === 'tool.rejected' && fact.message !== undefined && fact.reason !== 'invalid_input') {
    throw new FactstateError(
      'LOG_INVALID_EVENT',
      `the event does not fit the fact schema: only a tool.rejected for reason invalid_input says what is wrong with the input (fact.message), not one for ${fact.reason}`,
      { details: { fields: ['fact.message'] } },
    )
  }
}

/** Why `parent` cannot be the call that started the run of `own`, or `undefined`: the engine's run input and the log check by this one rule. */
export function parentProblem(parent: ParentCall, own: Invocation): { field: string; why: string } | undefined {
  if (!parent.operationId.startsWith(`${parent.invocation.invocationId}/`)) {
    return { field: 'parent.operationId', why: `parent.operationId must be an operation of parent.invocation (${parent.invocation.invocationId}/<stepId>/<index>, a tool's context.operationId)` }
  }
  if (parent.invocation.invocationId === own.invocationId || (parent.invocation.sessionId === own.sessionId && parent.invocation.runId === own.runId)) {
    return { field: 'parent.invocation', why: 'parent.invocation is the run itself: a child run has ids of its own (childRunFor makes them)' }
  }
  return undefined
}

/** A child run's `parent` names one of its parent invocation's operations, and another run. */
function checkParent(parent: ParentCall, own: Invocation): void {
  const problem = parentProblem(parent, own)
  if (problem !== undefined) {
    throw new FactstateError('LOG_INVALID_EVENT', `the event does not fit the fact schema: fact.input.${problem.why}`, { details: { fields: [`fact.input.${problem.field}`] } })
  }
}

/** A catalog's per-tool `digests` are in `names` order, one each: a list of another length names no tool's. */
function checkCatalog(execution: ExecutionSettings, at: string): void {
  const { names, digests } = execution.tools
  if (digests !== undefined && digests.length !== names.length) {
    throw new FactstateError(
      'LOG_INVALID_EVENT',
      `the event does not fit the fact schema: ${at}.tools.digests holds one digest per tool, in names order (${names.length} names, ${digests.length} digests)`,
      { details: { fields: [`${at}.tools.digests`] } },
    )
  }
}

/** `value` as the log writes it inside an event (msgpack, as `encodeEvent` packs it). */
export function packedValue(value: unknown): Uint8Array {
  return packPlain(value) ?? packr.pack(value)
}

/** Encodes a validated event: one version byte, then msgpack. */
export function encodeEvent(event: RuntimeEvent): Uint8Array {
  // Room for the version byte is left in front of the body: no second buffer, no copy. What comes
  // back is a fresh region of an output buffer that later packs never write over. The plain-data
  // writer gives msgpackr's very bytes, about a third faster; msgpackr packs what it declines.
  const out = packPlain(event, 1) ?? packr.pack(event, RESERVE_START_SPACE | 1)
  out[0] = EVENT_FORMAT_VERSION
  return out
}

/**
 * `encodeEvent` for an event `validateEvent` returned (the log's own appends): the same bytes,
 * written by a writer shaped by the fact schema (store/shaped-writer.ts), ~30% faster.
 */
export function encodeValidatedEvent(event: RuntimeEvent): Uint8Array {
  let out: Uint8Array
  try {
    out = packValidatedEvent(event, 1) ?? packr.pack(event, RESERVE_START_SPACE | 1)
  } catch (error) {
    // Validation refuses what msgpack cannot hold; this only words anything it missed.
    throw new FactstateError('LOG_INVALID_EVENT', `the event cannot be stored: ${messageOf(error)}`, { cause: error, details: { fields: [] } })
  }
  out[0] = EVENT_FORMAT_VERSION
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
  // The compiled copier answers what zod would for a valid event, several times faster; zod words the refusal.
  const copied = parseRuntimeEvent(decoded, MAX_DEPTH)
  if (copied !== undefined) return copied
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

/** A plain record: an object that is not null and not an array. */
export const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The members every reader of an index record relies on: a record without them is damage, not a TypeError later. */
export const recordShapes = {
  invocation: (value: unknown): boolean =>
    isObject(value) &&
    isObject(value.invocation) &&
    typeof value.invocation.sessionId === 'string' &&
    typeof value.invocation.runId === 'string' &&
    typeof value.invocation.turnId === 'string' &&
    typeof value.invocation.invocationId === 'string' &&
    typeof value.lastSeq === 'number' &&
    typeof value.facts === 'number' &&
    Array.isArray(value.openSteps) &&
    Array.isArray(value.uncertain) &&
    Array.isArray(value.operations),
  session: (value: unknown): boolean =>
    isObject(value) &&
    Array.isArray(value.active) &&
    Array.isArray(value.paused) &&
    Array.isArray(value.unknown) &&
    (value.latestOpenedSeq === undefined || (typeof value.latestOpenedSeq === 'number' && Number.isSafeInteger(value.latestOpenedSeq) && value.latestOpenedSeq >= 1)),
  run: (value: unknown): boolean => isObject(value) && typeof value.invocationId === 'string',
  name: (value: unknown): boolean => typeof value === 'string',
  id: (value: unknown): boolean => Array.isArray(value) && typeof value[0] === 'number' && value[1] instanceof Uint8Array,
}

const RECORD_NAMES: Record<keyof typeof recordShapes, string> = { invocation: 'an invocation record', session: 'a session record', run: 'a run record', name: 'a name', id: 'an id record' }

/** An index record read back: decoded and of the shape its key space holds, or `LOG_CORRUPT`. */
export function indexRecord<T>(stored: Uint8Array, what: string, shape: keyof typeof recordShapes): T {
  const value = decodeRecord<unknown>(stored, what)
  if (!recordShapes[shape](value)) throw new FactstateError('LOG_CORRUPT', `index record ${what} is not ${RECORD_NAMES[shape]}`)
  return value as T
}

/**
 * The id index record `[seq, chain]` of the event stored as `stored` at `seq`, where `chain` is the
 * step from `previous`; the new chain is its last 32 bytes (`record.subarray(-32)`). Byte for byte
 * what `encodeRecord([seq, chainStep(previous, seq, stored)])` writes, without the generic walk and
 * packing or a copy of the chain: a msgpack fixarray of two, the seq as the smallest unsigned int,
 * the chain as bin 8. Seqs of 2^32 and more take the generic path.
 */
export function chainedIdRecord(previous: Uint8Array, seq: number, stored: Uint8Array): Uint8Array {
  if (!Number.isInteger(seq) || seq < 0 || seq > 0xffff_ffff) return encodeRecord([seq, chainStep(previous, seq, stored)])
  const width = seq < 0x80 ? 1 : seq < 0x100 ? 2 : seq < 0x1_0000 ? 3 : 5
  // From Node's shared pool: a fresh ArrayBuffer per record costs more than encoding it. Every byte is written below.
  const out = Buffer.allocUnsafe(1 + width + 2 + CHAIN_BYTES)
  out[0] = 0x92
  if (width === 1) out[1] = seq
  else if (width === 2) {
    out[1] = 0xcc
    out[2] = seq
  } else if (width === 3) {
    out[1] = 0xcd
    out[2] = seq >>> 8
    out[3] = seq & 0xff
  } else {
    out[1] = 0xce
    out[2] = seq >>> 24
    out[3] = (seq >>> 16) & 0xff
    out[4] = (seq >>> 8) & 0xff
    out[5] = seq & 0xff
  }
  out[1 + width] = 0xc4
  out[2 + width] = CHAIN_BYTES
  chainStepInto(previous, seq, stored, out, 3 + width)
  return out
}

/** Decodes an index record; `what` names it in the corruption error. */
export function decodeRecord<T>(bytes: Uint8Array, what: string): T {
  try {
    return packr.unpack(bytes) as T
  } catch (cause) {
    throw new FactstateError('LOG_CORRUPT', `index record ${what} cannot be decoded`, { cause })
  }
}
