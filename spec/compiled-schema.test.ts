/**
 * The compiled copier against the slow path it stands in front of: for valid events of every
 * fact type it must answer, with the very value (members, key order, encoded bytes) the zod
 * path returns; for mutated and odd inputs it may decline, but whatever it answers the slow path
 * must answer identically, and validateEvent refuses exactly what it refused before.
 */
import fc from 'fast-check'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { z } from 'zod'
import { FactstateError } from '../errors.js'
import { UnsupportedSchemaError, compileSchema, objectsGenerated, parseRuntimeEvent } from '../facts/compiled-schema.js'
import { ID_PATTERN, runtimeEventSchema } from '../facts/schema.js'
import type { RuntimeEvent } from '../facts/types.js'
import { STEPS, invocationEvents, invocationFacts, invocationFor } from '../bench/workload.js'
import { canonical, decodeEvent, encodeEvent, encodeValidatedEvent, validateEvent } from '../store/encoding.js'
import { withTimeout } from './support/temp.js'

/** Set in the child that runs this whole file again with code generation disallowed (see the last test). */
const WITHOUT_CODEGEN = process.env.FACTSTATE_SPEC_NO_CODEGEN === '1'
const test = suite(WITHOUT_CODEGEN ? 'compiled schema (no code generation)' : 'compiled schema')

/** store/encoding.ts refuses objects and arrays nested deeper than this (the event at depth 0). */
const MAX_DEPTH = 64
const RUNS = 2_000

// ---------------------------------------------------------------------------------------------
// The slow path, and comparing answers.

type Outcome = { ok: true; value: RuntimeEvent } | { ok: false; code: string }

function outcome(run: () => RuntimeEvent): Outcome {
  try {
    return { ok: true, value: run() }
  } catch (error) {
    if (error instanceof FactstateError) return { ok: false, code: error.code }
    throw error
  }
}

/**
 * What validateEvent answered before the fast path existed. A null-prototype root is something the
 * fast path declines (asserted) while zod and the storage checks treat it like the plain object it
 * copies, descriptors and all, so validateEvent on it runs only the old code.
 */
function slowPath(value: unknown): Outcome {
  const root =
    typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype
      ? Object.defineProperties(Object.create(null) as object, Object.getOwnPropertyDescriptors(value))
      : value
  assert.is(parseRuntimeEvent(root, MAX_DEPTH), undefined, 'the slow-path probe must not take the fast path')
  return outcome(() => validateEvent(root))
}

/** Same values, same prototypes, same own keys in the same order (so the same msgpack bytes); -0 is not 0. */
function sameData(actual: unknown, expected: unknown, path = '(event)'): void {
  if (typeof expected !== 'object' || expected === null) {
    assert.ok(Object.is(actual, expected), `${path}: ${String(actual)} is not ${String(expected)}`)
    return
  }
  assert.ok(typeof actual === 'object' && actual !== null, `${path}: not an object`)
  assert.is(Object.getPrototypeOf(actual), Object.getPrototypeOf(expected), `${path}: prototype`)
  assert.is(Array.isArray(actual), Array.isArray(expected), `${path}: array`)
  const keys = Reflect.ownKeys(expected)
  assert.equal(Reflect.ownKeys(actual), keys, `${path}: own keys in order`)
  for (const key of keys) {
    sameData((actual as Record<PropertyKey, unknown>)[key], (expected as Record<PropertyKey, unknown>)[key], `${path}.${String(key)}`)
  }
}

function sameEvent(actual: RuntimeEvent, expected: RuntimeEvent): void {
  sameData(actual, expected)
  const bytes = Buffer.from(encodeEvent(expected))
  assert.ok(Buffer.from(encodeEvent(actual)).equals(bytes), 'encoded bytes differ')
  // Both are validated events: the log's writer shaped by the schema must give the very same bytes.
  assert.ok(Buffer.from(encodeValidatedEvent(actual)).equals(bytes), 'the shaped writer wrote other bytes')
  assert.ok(Buffer.from(encodeValidatedEvent(expected)).equals(bytes), 'the shaped writer wrote other bytes for the zod path')
}

/**
 * The fast path (`parseRuntimeEvent`) accepts `event` as the zod path does, to the same data and bytes
 * (`sameEvent`), the shaped writer writes what `encodeEvent` writes, and the bytes decode to `event`.
 */
function fastPathAgrees(event: unknown, label?: string): void {
  const fast = parseRuntimeEvent(event, MAX_DEPTH)
  const slow = slowPath(event)
  assert.ok(fast !== undefined && slow.ok, label)
  sameEvent(fast, slow.value)
  assert.is(Buffer.from(encodeValidatedEvent(fast)).toString('base64'), Buffer.from(encodeEvent(fast)).toString('base64'))
  assert.equal(decodeEvent(encodeValidatedEvent(fast), 1), event)
}

// ---------------------------------------------------------------------------------------------
// Valid events of every fact type: shuffled key order, optional members absent, present or
// present-but-undefined, strings with astral characters, nested JSON.

type Shape = Record<string, fc.Arbitrary<unknown>>

function object(required: Shape, optional: Shape = {}): fc.Arbitrary<Record<string, unknown>> {
  const keys = [...Object.keys(required), ...Object.keys(optional)]
  const presence = Object.fromEntries(Object.keys(optional).map((key) => [key, fc.constantFrom('absent', 'present', 'undefined')]))
  return fc
    .record({
      values: fc.record({ ...required, ...optional }),
      presence: fc.record(presence),
      order: fc.shuffledSubarray(keys, { minLength: keys.length, maxLength: keys.length }),
    })
    .map(({ values, presence, order }) => {
      const out: Record<string, unknown> = {}
      for (const key of order) {
        const state = presence[key]
        if (state === 'absent') continue
        out[key] = state === 'undefined' ? undefined : values[key]
      }
      return out
    })
}

const astral = fc.constantFrom('😀', '\u{10FFFF}', '𝄞', '\u{1F3F3}\u{FE0F}\u200D\u{1F308}')
const text = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  { weight: 1, arbitrary: fc.constantFrom('', 'a😀b', 'é', '\u0000', '\uFEFF', 'x'.repeat(300)) },
)
const nonEmptyText = text.filter((value) => value.length > 0)
/** 1–`max` code points; astral strings of up to `max` code points are up to twice as many UTF-16 units. */
const boundedText = (max: number) =>
  fc.oneof(nonEmptyText.filter((value) => [...value].length <= max), fc.string({ unit: astral, minLength: 1, maxLength: max }), fc.constant('z'.repeat(max)))
const id = fc.oneof(fc.stringMatching(ID_PATTERN), fc.constantFrom('a', 'x'.repeat(128), 'run-1:2.3_4'))
const eventId = fc.oneof(
  fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((code) => String.fromCharCode(code)), minLength: 1, maxLength: 40 }),
  fc.constant('~'.repeat(512)),
)
const digest = fc.uint8Array({ minLength: 32, maxLength: 32 }).map((bytes) => `sha256:${Buffer.from(bytes).toString('hex')}`)
const count = fc.oneof(fc.nat(), fc.constantFrom(0, -0, Number.MAX_SAFE_INTEGER))
const positive = fc.oneof(fc.integer({ min: 1, max: 2 ** 31 }), fc.constant(Number.MAX_SAFE_INTEGER))

const jsonKey = fc.oneof(fc.string({ unit: 'binary', maxLength: 6 }), fc.constantFrom('0', '1', '10', '-1', 'constructor', 'toString', 'a b')).filter((key) => key !== '__proto__')
const jsonNumber = fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(-0, Number.MAX_VALUE, Number.MIN_VALUE))
const { json } = fc.letrec<{ json: unknown }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    jsonNumber,
    text,
    fc.array(tie('json'), { maxLength: 4 }),
    fc.dictionary(jsonKey, tie('json'), { maxKeys: 4, noNullPrototype: true }),
  ),
}))
const jsonObject = fc.dictionary(jsonKey, json, { maxKeys: 4, noNullPrototype: true })

const invocation = object({ sessionId: id, turnId: id, runId: id, invocationId: id })
const runBoundary = object({ invocation, highWater: positive, digest })
const intent = object({ handoffId: id, hostEpoch: id, rootRunId: id, successorRunId: id, successorInvocationId: id, claimId: id })
const execution = object(
  { model: nonEmptyText, providerOptions: jsonObject, cwd: nonEmptyText, tools: object({ catalogDigest: digest, names: fc.array(text, { maxLength: 3 }) }, { digests: fc.array(digest, { maxLength: 3 }) }) },
  { mainOutputLimit: positive, instructions: nonEmptyText, replayBase: runBoundary },
)
const pause = object({ intent, remainingSteps: count, execution })
const parent = object({ invocation, operationId: nonEmptyText })
const uncertain = object({ invocationId: id, operationId: nonEmptyText, callId: text, name: text }, { input: json })
const invocationInput = fc.oneof(
  object({ kind: fc.constant('message'), content: text }, { requestFingerprint: text, priorUnknown: fc.array(uncertain, { maxLength: 2 }), parent }),
  object({ kind: fc.constant('continuation'), source: runBoundary }, { content: nonEmptyText, requestFingerprint: text, priorUnknown: fc.array(uncertain, { maxLength: 2 }), parent }),
  object({ kind: fc.constant('handoff'), source: runBoundary, pause }, { content: nonEmptyText, requestFingerprint: text }),
)
const stepId = boundedText(256)
const operationId = boundedText(512)
const toolOutcome = fc.oneof(
  object({ status: fc.constant('succeeded'), output: json }),
  object({ status: fc.constant('failed'), message: text }),
  object({ status: fc.constant('unknown'), message: text }),
)
const providerRefusal = object({}, { status: fc.integer({ min: 100, max: 599 }), code: boundedText(128), type: boundedText(128), param: boundedText(128), requestId: boundedText(256) })
const invocationOutcome = fc.oneof(
  object({ status: fc.constant('completed') }),
  object({ status: fc.constant('handoff_paused'), pause }),
  object({ status: fc.constant('failed'), class: nonEmptyText }, { message: text, provider: providerRefusal }),
  object({ status: fc.constant('cancelled'), source: nonEmptyText }),
)

const factArbitraries = {
  'invocation.opened': object({
    type: fc.constant('invocation.opened'),
    input: invocationInput,
    configuration: object({ cwd: nonEmptyText }, { workspaceIdentity: text }),
    execution,
  }),
  'model.requested': object({ type: fc.constant('model.requested'), stepId, model: nonEmptyText, requestDigest: digest }),
  'model.completed': object({
    type: fc.constant('model.completed'),
    stepId,
    output: object(
      { toolCalls: fc.array(object({ callId: text, name: text, arguments: text }, { extraContent: jsonObject }), { maxLength: 3 }), finishReason: text },
      {
        text,
        usage: object({}, { inputTokens: count, outputTokens: count, cachedInputTokens: count, reasoningTokens: count }),
        reasoning: text,
        responseId: boundedText(256),
        requestId: boundedText(256),
        reasoningDetails: fc.array(jsonObject, { maxLength: 3 }),
      },
    ),
  }),
  'model.interrupted': object(
    { type: fc.constant('model.interrupted'), stepId, status: fc.constantFrom('cancelled', 'timed_out', 'failed', 'retryable_failure') },
    { message: text, provider: providerRefusal },
  ),
  'tool.dispatched': object(
    { type: fc.constant('tool.dispatched'), operationId, callId: text, name: nonEmptyText, input: json },
    { readOnly: fc.constant(true), approval: object({}, { by: text, reason: text }) },
  ),
  'tool.settled': object({ type: fc.constant('tool.settled'), operationId, outcome: toolOutcome }),
  'tool.rejected': object(
    {
      type: fc.constant('tool.rejected'),
      operationId,
      callId: text,
      name: text,
      input: json,
      reason: fc.constantFrom('unknown_tool', 'invalid_input', 'cancelled', 'denied'),
    },
    { approval: object({}, { by: text, reason: text }), message: text },
  ),
  'hold.entered': object({ type: fc.constant('hold.entered'), handoffId: id }),
  'hold.released': object({ type: fc.constant('hold.released'), handoffId: id }),
  'invocation.ended': object({ type: fc.constant('invocation.ended'), outcome: invocationOutcome }),
} satisfies Record<RuntimeEvent['fact']['type'], fc.Arbitrary<Record<string, unknown>>>

const validEvent = object({ id: eventId, recordedAt: count, invocation, fact: fc.oneof(...Object.values(factArbitraries)) })

test('every valid event takes the fast path and comes out exactly as the zod path makes it', () => {
  const seen = new Set<unknown>()
  fc.assert(
    fc.property(validEvent, (event) => {
      const before = slowPath(event)
      assert.ok(before.ok, 'the generated event is valid')
      const fast = parseRuntimeEvent(event, MAX_DEPTH)
      assert.ok(fast !== undefined, 'the fast path answers for a valid event')
      sameEvent(fast, before.value)
      sameEvent(validateEvent(event), before.value)
      seen.add((event.fact as { type: unknown }).type)
    }),
    { numRuns: RUNS },
  )
  assert.is(seen.size, Object.keys(factArbitraries).length, 'every fact type was generated')
})

test('the benchmark workload takes the fast path, value for value and byte for byte', () => {
  const events = invocationEvents(invocationFor('x', 1, 's'), invocationFacts(STEPS))
  // What bench/profile.ts validate compares it with: the same compiler told not to generate code.
  const loop = compileSchema(runtimeEventSchema, '(root)', { generate: false })
  for (const event of events) {
    const fast = parseRuntimeEvent(event, MAX_DEPTH)
    const before = slowPath(event)
    assert.ok(fast !== undefined && before.ok)
    sameEvent(fast, before.value)
    const looped = loop(event, MAX_DEPTH)
    assert.ok(looped !== undefined)
    sameEvent(looped, before.value)
  }
})

test('a model.completed written before usage details and responseId were recorded keeps its bytes; one with them takes the fast path and decodes as written', () => {
  const completed = (output: Record<string, unknown>) => ({
    id: 'e-old',
    recordedAt: 1_700_000_000_000,
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    fact: { type: 'model.completed', stepId: 'step-1', output },
  })
  const before = { text: 'done', toolCalls: [{ callId: 'call_1', name: 'echo', arguments: '{"value":1}' }], finishReason: 'tool_calls', usage: { inputTokens: 10, outputTokens: 5 }, reasoning: 'think' }
  // Its bytes as the release before wrote them.
  const written =
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gADpHR5cGWvbW9kZWwuY29tcGxldGVkpnN0ZXBJZKZzdGVwLTGmb3V0cHV03gAFpHRleHSkZG9uZal0b29sQ2FsbHOR3gADpmNhbGxJZKZjYWxsXzGkbmFtZaRlY2hvqWFyZ3VtZW50c6t7InZhbHVlIjoxfaxmaW5pc2hSZWFzb26qdG9vbF9jYWxsc6V1c2FnZd4AAqtpbnB1dFRva2Vucwqsb3V0cHV0VG9rZW5zBalyZWFzb25pbmeldGhpbms='
  const old = validateEvent(completed(before))
  assert.is(Buffer.from(encodeValidatedEvent(old)).toString('base64'), written)
  assert.is(Buffer.from(encodeEvent(old)).toString('base64'), written)
  assert.equal(decodeEvent(Buffer.from(written, 'base64'), 1), completed(before))
  const after = { ...before, usage: { ...before.usage, cachedInputTokens: 8, reasoningTokens: 3 }, responseId: 'chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT' }
  fastPathAgrees(completed(after))
})

test("a model.interrupted and a failed outcome written before the provider's refusal was recorded keep their bytes; ones with it take the fast path and decode as written", () => {
  const message = 'the provider answered HTTP 400: too long'
  const eventOf = (id: string, fact: Record<string, unknown>) => ({ id, recordedAt: 1_700_000_000_000, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }, fact })
  const interrupted = (extra: Record<string, unknown>) => eventOf('e-old', { type: 'model.interrupted', stepId: 'step-1', status: 'failed', message, ...extra })
  const ended = (extra: Record<string, unknown>) => eventOf('e-old-2', { type: 'invocation.ended', outcome: { status: 'failed', class: 'model_failed', message, ...extra } })
  // Their bytes as the release before wrote them.
  const written = [
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gAEpHR5cGWxbW9kZWwuaW50ZXJydXB0ZWSmc3RlcElkpnN0ZXAtMaZzdGF0dXOmZmFpbGVkp21lc3NhZ2XZKHRoZSBwcm92aWRlciBhbnN3ZXJlZCBIVFRQIDQwMDogdG9vIGxvbmc=',
    'Ad4ABKJpZKdlLW9sZC0yqnJlY29yZGVkQXTLQni8/laAAACqaW52b2NhdGlvbt4ABKlzZXNzaW9uSWShc6Z0dXJuSWShdKVydW5JZKFyrGludm9jYXRpb25JZKFppGZhY3TeAAKkdHlwZbBpbnZvY2F0aW9uLmVuZGVkp291dGNvbWXeAAOmc3RhdHVzpmZhaWxlZKVjbGFzc6xtb2RlbF9mYWlsZWSnbWVzc2FnZdkodGhlIHByb3ZpZGVyIGFuc3dlcmVkIEhUVFAgNDAwOiB0b28gbG9uZw==',
  ]
  const provider = { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' }
  for (const [index, make] of [interrupted, ended].entries()) {
    const old = validateEvent(make({}))
    assert.is(Buffer.from(encodeValidatedEvent(old)).toString('base64'), written[index])
    assert.is(Buffer.from(encodeEvent(old)).toString('base64'), written[index])
    assert.equal(decodeEvent(Buffer.from(written[index]!, 'base64'), 1), make({}))
    fastPathAgrees(make({ provider }))
    // What the schema refuses of it (a status that is no HTTP status, a code over 128 characters, a member it does not have) the fast path leaves to the slow one.
    for (const bad of [{ status: 600 }, { code: 'c'.repeat(129) }, { code: '' }, { code: 400 }, { retryable: true }]) {
      assert.is(parseRuntimeEvent(make({ provider: bad }), MAX_DEPTH), undefined, JSON.stringify(bad))
      assert.not.ok(slowPath(make({ provider: bad })).ok, JSON.stringify(bad))
    }
  }
})

test("a model.completed, a model.interrupted and a failed outcome written before the provider's request id was recorded keep their bytes; ones with it take the fast path and decode as written", () => {
  const eventOf = (id: string, fact: Record<string, unknown>) => ({ id, recordedAt: 1_700_000_000_000, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }, fact })
  const output = { text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 8, reasoningTokens: 3 }, reasoning: 'think', responseId: 'chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT' }
  const provider = { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' }
  const message = 'the provider answered HTTP 400: too long'
  const completed = (extra: Record<string, unknown>) => eventOf('e-old', { type: 'model.completed', stepId: 'step-1', output: { ...output, ...extra } })
  const interrupted = (extra: Record<string, unknown>) => eventOf('e-old', { type: 'model.interrupted', stepId: 'step-1', status: 'failed', message, provider: { ...provider, ...extra } })
  const ended = (extra: Record<string, unknown>) => eventOf('e-old-2', { type: 'invocation.ended', outcome: { status: 'failed', class: 'model_failed', message, provider: { ...provider, ...extra } } })
  // Their bytes as the release before wrote them.
  const written = [
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gADpHR5cGWvbW9kZWwuY29tcGxldGVkpnN0ZXBJZKZzdGVwLTGmb3V0cHV03gAGpHRleHSkZG9uZal0b29sQ2FsbHOQrGZpbmlzaFJlYXNvbqRzdG9wpXVzYWdl3gAEq2lucHV0VG9rZW5zCqxvdXRwdXRUb2tlbnMFsWNhY2hlZElucHV0VG9rZW5zCK9yZWFzb25pbmdUb2tlbnMDqXJlYXNvbmluZ6V0aGlua6pyZXNwb25zZUlk2SZjaGF0Y21wbC1COU1CczhDamN2T1UyakxuNG41NzBTNXFNSktjVA==',
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gAFpHR5cGWxbW9kZWwuaW50ZXJydXB0ZWSmc3RlcElkpnN0ZXAtMaZzdGF0dXOmZmFpbGVkp21lc3NhZ2XZKHRoZSBwcm92aWRlciBhbnN3ZXJlZCBIVFRQIDQwMDogdG9vIGxvbmeocHJvdmlkZXLeAASmc3RhdHVzzQGQpGNvZGW3Y29udGV4dF9sZW5ndGhfZXhjZWVkZWSkdHlwZbVpbnZhbGlkX3JlcXVlc3RfZXJyb3KlcGFyYW2obWVzc2FnZXM=',
    'Ad4ABKJpZKdlLW9sZC0yqnJlY29yZGVkQXTLQni8/laAAACqaW52b2NhdGlvbt4ABKlzZXNzaW9uSWShc6Z0dXJuSWShdKVydW5JZKFyrGludm9jYXRpb25JZKFppGZhY3TeAAKkdHlwZbBpbnZvY2F0aW9uLmVuZGVkp291dGNvbWXeAASmc3RhdHVzpmZhaWxlZKVjbGFzc6xtb2RlbF9mYWlsZWSnbWVzc2FnZdkodGhlIHByb3ZpZGVyIGFuc3dlcmVkIEhUVFAgNDAwOiB0b28gbG9uZ6hwcm92aWRlct4ABKZzdGF0dXPNAZCkY29kZbdjb250ZXh0X2xlbmd0aF9leGNlZWRlZKR0eXBltWludmFsaWRfcmVxdWVzdF9lcnJvcqVwYXJhbahtZXNzYWdlcw==',
  ]
  for (const [index, make] of [completed, interrupted, ended].entries()) {
    const old = validateEvent(make({}))
    assert.is(Buffer.from(encodeValidatedEvent(old)).toString('base64'), written[index])
    assert.is(Buffer.from(encodeEvent(old)).toString('base64'), written[index])
    assert.equal(decodeEvent(Buffer.from(written[index]!, 'base64'), 1), make({}))
    // 256 characters is the most a fact holds (astral ones counted as one, as the schema counts).
    for (const requestId of ['req_b4b1b7a1c8d34b6f9ad6d2b1f0d3c9e2', '😀'.repeat(256)]) {
      fastPathAgrees(make({ requestId }), requestId)
    }
    // What the schema refuses of it (empty, over 256 characters, not a string) the fast path leaves to the slow one.
    for (const bad of ['', 'r'.repeat(257), 42, null]) {
      assert.is(parseRuntimeEvent(make({ requestId: bad }), MAX_DEPTH), undefined, JSON.stringify(bad))
      assert.not.ok(slowPath(make({ requestId: bad })).ok, JSON.stringify(bad))
    }
  }
})

test("a model.completed written before the provider's state was recorded keeps its bytes; one with reasoningDetails and a call's extraContent takes the fast path and decodes as written", () => {
  const eventOf = (output: Record<string, unknown>) => ({ id: 'e-old', recordedAt: 1_700_000_000_000, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }, fact: { type: 'model.completed', stepId: 'step-1', output } })
  const before = { text: 'done', toolCalls: [{ callId: 'call_1', name: 'echo', arguments: '{"value":1}' }], finishReason: 'tool_calls', usage: { inputTokens: 10, outputTokens: 5 }, reasoning: 'think' }
  // Its bytes as the release before wrote them (the same fact as the first test's above).
  const written =
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gADpHR5cGWvbW9kZWwuY29tcGxldGVkpnN0ZXBJZKZzdGVwLTGmb3V0cHV03gAFpHRleHSkZG9uZal0b29sQ2FsbHOR3gADpmNhbGxJZKZjYWxsXzGkbmFtZaRlY2hvqWFyZ3VtZW50c6t7InZhbHVlIjoxfaxmaW5pc2hSZWFzb26qdG9vbF9jYWxsc6V1c2FnZd4AAqtpbnB1dFRva2Vucwqsb3V0cHV0VG9rZW5zBalyZWFzb25pbmeldGhpbms='
  assert.is(Buffer.from(encodeValidatedEvent(validateEvent(eventOf(before)))).toString('base64'), written)
  const after = {
    ...before,
    toolCalls: [{ ...before.toolCalls[0], extraContent: { google: { thought_signature: 'CiQBVKhc7nX0' } } }, { callId: 'call_2', name: 'echo', arguments: '{}' }],
    reasoningDetails: [
      { type: 'reasoning.text', text: 'Let me look.', signature: 'EqoBCkYIBx', format: 'anthropic-claude-v1', index: 0 },
      { type: 'reasoning.encrypted', data: 'gAAAAABo', index: 1 },
    ],
  }
  fastPathAgrees(eventOf(after))
  // What the schema refuses of them (an entry that is not an object, a call's state that is not one) the fast path leaves to the slow one.
  for (const bad of [{ reasoningDetails: ['text'] }, { reasoningDetails: {} }, { toolCalls: [{ ...before.toolCalls[0], extraContent: ['x'] }] }, { toolCalls: [{ ...before.toolCalls[0], extraContent: 'sig' }] }]) {
    assert.is(parseRuntimeEvent(eventOf({ ...before, ...bad }), MAX_DEPTH), undefined, JSON.stringify(bad))
    assert.not.ok(slowPath(eventOf({ ...before, ...bad })).ok, JSON.stringify(bad))
  }
})

test("a successor's invocation.opened written before content and requestFingerprint were recorded keeps its bytes; one with them takes the fast path and decodes as written", () => {
  const execution = { model: 'model-x', providerOptions: {}, cwd: '/srv/project', tools: { catalogDigest: `sha256:${'0'.repeat(64)}`, names: [] } }
  const pause = {
    intent: { handoffId: 'review', hostEpoch: 'host-a', rootRunId: 'run-old', successorRunId: 'run-old.review', successorInvocationId: 'inv-old.review', claimId: 'inv-old.review.claim' },
    remainingSteps: 7,
    execution,
  }
  const source = { invocation: { sessionId: 'session-old', turnId: 'turn-old', runId: 'run-old', invocationId: 'inv-old' }, highWater: 2, digest: `sha256:${'2'.repeat(64)}` }
  const make = (extra: Record<string, unknown>) => ({
    id: 'e-old',
    recordedAt: 1_700_000_000_000,
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    fact: { type: 'invocation.opened', input: { kind: 'handoff', source, pause, ...extra }, configuration: { cwd: '/srv/project' }, execution },
  })
  // Its bytes as the release before wrote them.
  const written =
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gAEpHR5cGWxaW52b2NhdGlvbi5vcGVuZWSlaW5wdXTeAAOka2luZKdoYW5kb2ZmpnNvdXJjZd4AA6ppbnZvY2F0aW9u3gAEqXNlc3Npb25JZKtzZXNzaW9uLW9sZKZ0dXJuSWSodHVybi1vbGSlcnVuSWSncnVuLW9sZKxpbnZvY2F0aW9uSWSnaW52LW9sZKloaWdoV2F0ZXICpmRpZ2VzdNlHc2hhMjU2OjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjKlcGF1c2XeAAOmaW50ZW503gAGqWhhbmRvZmZJZKZyZXZpZXepaG9zdEVwb2Nopmhvc3QtYalyb290UnVuSWSncnVuLW9sZK5zdWNjZXNzb3JSdW5JZK5ydW4tb2xkLnJldmlld7VzdWNjZXNzb3JJbnZvY2F0aW9uSWSuaW52LW9sZC5yZXZpZXenY2xhaW1JZLRpbnYtb2xkLnJldmlldy5jbGFpba5yZW1haW5pbmdTdGVwcwepZXhlY3V0aW9u3gAEpW1vZGVsp21vZGVsLXivcHJvdmlkZXJPcHRpb25z3gAAo2N3ZKwvc3J2L3Byb2plY3SldG9vbHPeAAKtY2F0YWxvZ0RpZ2VzdNlHc2hhMjU2OjAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDClbmFtZXOQrWNvbmZpZ3VyYXRpb27eAAGjY3dkrC9zcnYvcHJvamVjdKlleGVjdXRpb27eAASlbW9kZWynbW9kZWwteK9wcm92aWRlck9wdGlvbnPeAACjY3dkrC9zcnYvcHJvamVjdKV0b29sc94AAq1jYXRhbG9nRGlnZXN02UdzaGEyNTY6MDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMKVuYW1lc5A='
  const old = validateEvent(make({}))
  assert.is(Buffer.from(encodeValidatedEvent(old)).toString('base64'), written)
  assert.is(Buffer.from(encodeEvent(old)).toString('base64'), written)
  assert.equal(decodeEvent(Buffer.from(written, 'base64'), 1), make({}))
  for (const extra of [
    { content: 'carol@acme approved the refund of O-3 (ticket 77)' },
    { requestFingerprint: 'webhook-77' },
    { content: '😀'.repeat(300), requestFingerprint: '' },
  ]) {
    const event = make(extra)
    const fast = parseRuntimeEvent(event, MAX_DEPTH)
    const slow = slowPath(event)
    assert.ok(fast !== undefined && slow.ok, JSON.stringify(extra).slice(0, 60))
    sameEvent(fast, slow.value)
    assert.is(Buffer.from(encodeValidatedEvent(fast)).toString('base64'), Buffer.from(encodeEvent(fast)).toString('base64'))
    assert.equal(decodeEvent(encodeValidatedEvent(fast), 1), event)
  }
  // What the schema refuses of them (empty content, a member that is not a string) the fast path leaves to the slow one.
  for (const bad of [{ content: '' }, { content: 42 }, { content: null }, { requestFingerprint: 7 }]) {
    assert.is(parseRuntimeEvent(make(bad), MAX_DEPTH), undefined, JSON.stringify(bad))
    assert.not.ok(slowPath(make(bad)).ok, JSON.stringify(bad))
  }
})

test("a seal and an invocation.opened written before each tool's digest was recorded keep their bytes; ones with tools.digests take the fast path, are msgpackr's bytes and decode as written", () => {
  const tools = { catalogDigest: `sha256:${'0'.repeat(64)}`, names: ['lookup_order', 'issue_refund'] }
  const execution = (extra: Record<string, unknown>) => ({ model: 'model-x', providerOptions: {}, cwd: '/srv/project', tools: { ...tools, ...extra } })
  const pause = (extra: Record<string, unknown>) => ({
    intent: { handoffId: 'review', hostEpoch: 'host-a', rootRunId: 'run-old', successorRunId: 'run-old.review', successorInvocationId: 'inv-old.review', claimId: 'inv-old.review.claim' },
    remainingSteps: 7,
    execution: execution(extra),
  })
  const invocation = { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }
  const opened = (extra: Record<string, unknown>) => ({
    id: 'e-old-1',
    recordedAt: 1_700_000_000_000,
    invocation,
    fact: { type: 'invocation.opened', input: { kind: 'message', content: 'question' }, configuration: { cwd: '/srv/project' }, execution: execution(extra) },
  })
  const ended = (extra: Record<string, unknown>) => ({ id: 'e-old', recordedAt: 1_700_000_000_000, invocation, fact: { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause: pause(extra) } } })
  // Their bytes as the release before wrote them.
  const written = [
    'Ad4ABKJpZKdlLW9sZC0xqnJlY29yZGVkQXTLQni8/laAAACqaW52b2NhdGlvbt4ABKlzZXNzaW9uSWShc6Z0dXJuSWShdKVydW5JZKFyrGludm9jYXRpb25JZKFppGZhY3TeAASkdHlwZbFpbnZvY2F0aW9uLm9wZW5lZKVpbnB1dN4AAqRraW5kp21lc3NhZ2WnY29udGVudKhxdWVzdGlvbq1jb25maWd1cmF0aW9u3gABo2N3ZKwvc3J2L3Byb2plY3SpZXhlY3V0aW9u3gAEpW1vZGVsp21vZGVsLXivcHJvdmlkZXJPcHRpb25z3gAAo2N3ZKwvc3J2L3Byb2plY3SldG9vbHPeAAKtY2F0YWxvZ0RpZ2VzdNlHc2hhMjU2OjAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDClbmFtZXOSrGxvb2t1cF9vcmRlcqxpc3N1ZV9yZWZ1bmQ=',
    'Ad4ABKJpZKVlLW9sZKpyZWNvcmRlZEF0y0J4vP5WgAAAqmludm9jYXRpb27eAASpc2Vzc2lvbklkoXOmdHVybklkoXSlcnVuSWShcqxpbnZvY2F0aW9uSWShaaRmYWN03gACpHR5cGWwaW52b2NhdGlvbi5lbmRlZKdvdXRjb21l3gACpnN0YXR1c65oYW5kb2ZmX3BhdXNlZKVwYXVzZd4AA6ZpbnRlbnTeAAapaGFuZG9mZklkpnJldmlld6lob3N0RXBvY2imaG9zdC1hqXJvb3RSdW5JZKdydW4tb2xkrnN1Y2Nlc3NvclJ1bklkrnJ1bi1vbGQucmV2aWV3tXN1Y2Nlc3Nvckludm9jYXRpb25JZK5pbnYtb2xkLnJldmlld6djbGFpbUlktGludi1vbGQucmV2aWV3LmNsYWltrnJlbWFpbmluZ1N0ZXBzB6lleGVjdXRpb27eAASlbW9kZWynbW9kZWwteK9wcm92aWRlck9wdGlvbnPeAACjY3dkrC9zcnYvcHJvamVjdKV0b29sc94AAq1jYXRhbG9nRGlnZXN02UdzaGEyNTY6MDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMKVuYW1lc5KsbG9va3VwX29yZGVyrGlzc3VlX3JlZnVuZA==',
  ]
  for (const [index, make] of [opened, ended].entries()) {
    const old = validateEvent(make({}) as never)
    assert.is(Buffer.from(encodeValidatedEvent(old)).toString('base64'), written[index])
    assert.is(Buffer.from(encodeEvent(old)).toString('base64'), written[index])
    assert.equal(decodeEvent(Buffer.from(written[index]!, 'base64'), 1), make({}))
    for (const digests of [[`sha256:${'1'.repeat(64)}`, `sha256:${'2'.repeat(64)}`], [], [`sha256:${'a'.repeat(64)}`]]) {
      const event = make({ digests })
      const fast = parseRuntimeEvent(event, MAX_DEPTH)
      const slow = slowPath(event)
      assert.ok(fast !== undefined && slow.ok, JSON.stringify(digests))
      sameEvent(fast, slow.value)
      assert.is(Buffer.from(encodeValidatedEvent(fast)).toString('base64'), Buffer.from(encodeEvent(fast)).toString('base64'))
      assert.equal(decodeEvent(encodeValidatedEvent(fast), 1), event)
    }
    // What the schema refuses of them (not a digest, not a list, null) the fast path leaves to the slow one.
    for (const bad of [[`sha256:${'1'.repeat(63)}`], [`SHA256:${'1'.repeat(64)}`], [42], `sha256:${'1'.repeat(64)}`, null]) {
      assert.is(parseRuntimeEvent(make({ digests: bad }), MAX_DEPTH), undefined, JSON.stringify(bad))
      assert.not.ok(slowPath(make({ digests: bad })).ok, JSON.stringify(bad))
    }
  }
})

function eventWithInput(input: unknown): Record<string, unknown> {
  return {
    id: 'e1',
    recordedAt: 1,
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    fact: { type: 'tool.dispatched', operationId: 'op', callId: 'c', name: 'n', input },
  }
}

test('JSON nests on the fast path up to the storage limit and no further, in arrays and in objects', () => {
  const wrappers: Array<[(value: unknown) => unknown, number, number]> = [
    [(value) => [value], 56, 66],
    [(value) => ({ k: value }), 56, 66],
    [(value) => [{ k: value }], 28, 33],
  ]
  for (const [wrap, from, to] of wrappers) {
    let accepted = 0
    for (let levels = from; levels <= to; levels += 1) {
      let input: unknown = 'leaf'
      for (let level = 0; level < levels; level += 1) input = wrap(input)
      const event = eventWithInput(input)
      const before = slowPath(event)
      const fast = parseRuntimeEvent(event, MAX_DEPTH)
      assert.is(fast !== undefined, before.ok, `nesting ${levels}`)
      if (fast !== undefined && before.ok) sameEvent(fast, before.value)
      if (before.ok) accepted += 1
    }
    assert.ok(accepted > 0 && accepted <= to - from, 'the boundary lies inside the range tried')
  }
})

// ---------------------------------------------------------------------------------------------
// Mutated and odd inputs.

type Container = Record<PropertyKey, unknown>

class Holder {
  constructor(fields: object) {
    Object.assign(this, fields)
  }
}

const nullPrototype = (value: object): object => Object.assign(Object.create(null) as object, value)
const deep = (value: unknown, levels: number): unknown => {
  let out = value
  for (let level = 0; level < levels; level += 1) out = [out]
  return out
}

/** Replacements for any node: wrong types, bad numbers and strings, non-plain objects. */
const replacements: Array<(node: unknown) => unknown> = [
  () => 'x',
  () => '',
  () => 0,
  () => -0,
  () => -1,
  () => 1.5,
  () => Number.NaN,
  () => Number.POSITIVE_INFINITY,
  () => Number.NEGATIVE_INFINITY,
  () => 2 ** 53,
  () => Number.MAX_SAFE_INTEGER,
  () => true,
  () => null,
  () => undefined,
  () => [],
  () => ({}),
  () => 'x'.repeat(129),
  () => 'x'.repeat(257),
  () => '😀'.repeat(257),
  () => '😀'.repeat(256),
  () => 'x'.repeat(513),
  () => '~'.repeat(513),
  () => 'has space',
  () => `sha256:${'A'.repeat(64)}`,
  () => `sha256:${'a'.repeat(63)}`,
  () => '\ud800',
  () => 'a\udc00b',
  () => '😀\ud83d',
  () => 1n,
  () => Symbol('s'),
  () => () => 1,
  () => new Date(0),
  () => new Map([['a', 1]]),
  () => new Uint8Array(0),
  (node) => [node],
  (node) => deep(node, 65),
  (node) => deep(node, 40),
  (node) => (typeof node === 'object' && node !== null ? new Holder(node) : node),
  (node) => (typeof node === 'object' && node !== null ? nullPrototype(node) : node),
  (node) => (typeof node === 'object' && node !== null ? JSON.parse(JSON.stringify(node)) : node),
  (node) => (typeof node === 'string' ? `${node}\ud800` : node),
  (node) => (typeof node === 'number' ? node + 0.5 : node),
  (node) => (typeof node === 'number' ? -node - 1 : node),
]

/** Changes made to an object or array in place. */
const edits: Array<(node: Container, pick: number) => void> = [
  (node) => {
    node.extra = 1
  },
  (node) => {
    node.extra = undefined
  },
  (node, pick) => {
    const keys = Object.keys(node)
    if (keys.length) delete node[keys[pick % keys.length]!]
  },
  (node, pick) => {
    const keys = Object.keys(node)
    if (keys.length) node[keys[pick % keys.length]!] = undefined
  },
  (node) => {
    Object.defineProperty(node, '__proto__', { value: 1, enumerable: true, writable: true, configurable: true })
  },
  (node) => {
    Object.defineProperty(node, '__proto__', { value: {}, enumerable: false, writable: true, configurable: true })
  },
  (node) => {
    node[Symbol('extra')] = 1
  },
  (node) => {
    Object.defineProperty(node, Symbol('hidden'), { value: 1, enumerable: false })
  },
  (node) => {
    Object.defineProperty(node, 'hidden', { value: 1, enumerable: false })
  },
  (node) => {
    node['\ud800'] = 1
  },
  (node) => {
    node['k\udfff'] = 'v'
  },
  (node, pick) => {
    // A pure getter stands in for a data member; both paths must read it alike.
    const keys = Object.keys(node)
    if (!keys.length) return
    const key = keys[pick % keys.length]!
    const value = node[key]
    Object.defineProperty(node, key, { get: () => value, enumerable: true, configurable: true })
  },
  (node, pick) => {
    // The same members in another order.
    const keys = Object.keys(node)
    const rotated = [...keys.slice(pick % Math.max(keys.length, 1)), ...keys.slice(0, pick % Math.max(keys.length, 1))]
    const values = keys.map((key) => node[key])
    for (const key of keys) delete node[key]
    rotated.forEach((key) => (node[key] = values[keys.indexOf(key)]))
  },
  (node) => {
    if (Array.isArray(node)) node.length += 1
  },
  (node) => {
    if (Array.isArray(node)) node.push(undefined)
  },
  (node, pick) => {
    if (Array.isArray(node) && node.length) delete node[pick % node.length]
  },
  (node) => {
    if (Array.isArray(node)) (node as unknown as Container).extra = 1
  },
  (node) => {
    Object.setPrototypeOf(node, Object.create(Object.getPrototypeOf(node) as object))
  },
]

/** Every path to a node of `value`, root first. */
function pathsOf(value: unknown, prefix: PropertyKey[] = [], out: PropertyKey[][] = []): PropertyKey[][] {
  out.push(prefix)
  if (typeof value === 'object' && value !== null) {
    for (const key of Object.keys(value)) pathsOf((value as Container)[key], [...prefix, key], out)
  }
  return out
}

function mutate(event: Record<string, unknown>, steps: Array<{ where: number; how: number; pick: number }>): unknown {
  let root: unknown = structuredClone(event)
  for (const { where, how, pick } of steps) {
    const paths = pathsOf(root)
    const path = paths[where % paths.length]!
    const parent = path.slice(0, -1).reduce<unknown>((node, key) => (node as Container)[key], root) as Container | undefined
    const node = path.length ? parent![path.at(-1)!] : root
    // A mutation the node does not allow (a getter without a setter, a non-configurable member) is skipped.
    try {
      if (how < replacements.length) {
        const replaced = replacements[how]!(node)
        if (path.length) Object.defineProperty(parent, path.at(-1)!, { value: replaced, writable: true, enumerable: true, configurable: true })
        else root = replaced
      } else if (typeof node === 'object' && node !== null) {
        edits[how - replacements.length]!(node as Container, pick)
      }
    } catch (error) {
      if (!(error instanceof TypeError)) throw error
    }
  }
  return root
}

const mutation = fc.record({
  where: fc.nat(),
  how: fc.oneof(fc.integer({ min: 0, max: replacements.length - 1 }), fc.integer({ min: replacements.length, max: replacements.length + edits.length - 1 })),
  pick: fc.nat(),
})

test('whatever the fast path answers for a mutated event, the slow path answers identically, and refusals are unchanged', () => {
  let fastAnswers = 0
  let refusals = 0
  fc.assert(
    fc.property(validEvent, fc.array(mutation, { minLength: 1, maxLength: 3 }), (event, steps) => {
      const input = mutate(event, steps)
      const before = slowPath(input)
      const fast = parseRuntimeEvent(input, MAX_DEPTH)
      if (fast !== undefined) {
        fastAnswers += 1
        assert.ok(before.ok, 'the fast path accepted what the slow path refuses')
        sameEvent(fast, before.value)
      }
      const after = outcome(() => validateEvent(input))
      if (before.ok) {
        assert.ok(after.ok, 'validateEvent now refuses what it accepted')
        sameEvent(after.value, before.value)
      } else {
        refusals += 1
        assert.is(before.code, 'LOG_INVALID_EVENT')
        assert.equal(after, before)
      }
    }),
    { numRuns: RUNS },
  )
  assert.ok(fastAnswers > RUNS / 20, `the fast path answered ${fastAnswers} mutated events`)
  assert.ok(refusals > RUNS / 2, `${refusals} mutated events were refused`)
})

test('odd roots and odd events are declined, and validateEvent answers as before', () => {
  const valid = invocationEvents(invocationFor('x', 1, 's'), invocationFacts(1))[2]!
  const cyclic: Record<string, unknown> = structuredClone(valid) as unknown as Record<string, unknown>
  ;(cyclic.fact as Record<string, unknown>).self = cyclic
  const odd: unknown[] = [
    undefined,
    null,
    'event',
    42,
    [],
    [valid],
    new Holder(valid),
    nullPrototype(valid),
    new Date(0),
    new Map(Object.entries(valid)),
    JSON.parse(`{"__proto__": {}, ${JSON.stringify(valid).slice(1)}`),
    { ...valid, fact: new Holder(valid.fact) },
    { ...valid, fact: { ...valid.fact, output: { ...(valid.fact as { output: object }).output, usage: new Date(0) } } },
    cyclic,
  ]
  for (const input of odd) {
    assert.is(parseRuntimeEvent(input, MAX_DEPTH), undefined)
    const before = slowPath(input)
    const after = outcome(() => validateEvent(input))
    assert.equal(after.ok, before.ok)
    if (after.ok && before.ok) sameEvent(after.value, before.value)
    else assert.equal(after, before)
  }
})

test('edge cases the fast path may take or leave: whatever it answers is exactly the slow path\'s answer', () => {
  const base = () => invocationEvents(invocationFor('x', 1, 's'), invocationFacts(1))[2]! as unknown as Record<string, Record<string, unknown>>
  const withFact = (change: (fact: Record<string, unknown>) => void) => {
    const event = base()
    change(event.fact!)
    return event
  }
  class Names extends Array<string> {}
  const sparse: string[] = ['a']
  sparse[2] = 'c'
  const opened = () => invocationEvents(invocationFor('x', 1, 's'), invocationFacts(1))[0]! as unknown as Record<string, Record<string, Record<string, unknown>>>
  const cases: Array<[string, () => unknown, 'fast' | 'refused' | 'either']> = [
    ['enumerable symbol key in a JSON object', () => eventWithInput({ a: 1, [Symbol('s')]: 2 }), 'refused'],
    [
      'enumerable symbol key in providerOptions',
      () => {
        const event = opened()
        event.fact!.execution!.providerOptions = { temperature: 0, [Symbol('s')]: 1 }
        return event
      },
      'refused',
    ],
    ['hidden symbol key in a JSON object', () => eventWithInput(Object.defineProperty({ a: 1 }, Symbol('s'), { value: 2 })), 'either'],
    ['enumerable symbol key on a strict object', () => ({ ...base(), [Symbol('s')]: 1 }), 'fast'],
    ['"__proto__" key in JSON input', () => eventWithInput(JSON.parse('{"a": 1, "__proto__": {"b": 2}}')), 'refused'],
    ['"__proto__" key deep in JSON input', () => eventWithInput(JSON.parse('[[{"x": {"__proto__": null}}]]')), 'refused'],
    ['integer-like JSON keys', () => eventWithInput({ b: 1, 2: 2, a: 3, 1: 4, '-1': 5, '01': 6, 4294967295: 7 }), 'fast'],
    ['array with an extra member', () => eventWithInput(Object.assign([1, 2], { extra: 3 })), 'fast'],
    ['array subclass', () => withFact((fact) => ((fact.output as Record<string, unknown>).toolCalls = Names.from([]))), 'either'],
    ['sparse array', () => eventWithInput(sparse), 'refused'],
    ['negative zero', () => ({ ...base(), recordedAt: -0 }), 'fast'],
    ['pure getter', () => withFact((fact) => Object.defineProperty(fact, 'stepId', { get: () => 'step-9', enumerable: true })), 'fast'],
    ['hidden own shape member', () => withFact((fact) => Object.defineProperty(fact, 'stepId', { value: 'step-9', enumerable: false })), 'either'],
    ['hidden own extra member', () => withFact((fact) => Object.defineProperty(fact, 'extra', { value: 1, enumerable: false })), 'either'],
    ['proxy of the event', () => new Proxy(base(), {}), 'either'],
    ['astral and combining text', () => eventWithInput({ '😀': 'e\u0301😀\u{10FFFF}' }), 'fast'],
  ]
  const polluted: Array<[string, PropertyDescriptor]> = [
    ['polluted', { value: 1, enumerable: true, configurable: true, writable: true }],
    ['text', { value: 'inherited', enumerable: true, configurable: true, writable: true }],
    ['text', { value: 'inherited', enumerable: false, configurable: true, writable: true }],
  ]
  const record = z.record(z.string(), z.number())
  const copyRecord = compileSchema(record)
  const check = (name: string, make: () => unknown, expect: 'fast' | 'refused' | 'either') => {
    const input = make()
    const before = slowPath(input)
    const fast = parseRuntimeEvent(input, MAX_DEPTH)
    if (expect === 'fast') assert.ok(fast !== undefined, `${name}: the fast path answers`)
    if (expect === 'refused') assert.equal(before, { ok: false, code: 'LOG_INVALID_EVENT' }, name)
    if (fast !== undefined) {
      assert.ok(before.ok, `${name}: the slow path accepts it too`)
      sameEvent(fast, before.value)
    }
    const after = outcome(() => validateEvent(input))
    if (after.ok && before.ok) sameEvent(after.value, before.value)
    else assert.equal(after, before, name)
  }
  for (const [name, make, expect] of cases) check(name, make, expect)
  // A polluted Object.prototype: inherited members reach zod (and this copier) through reads and for...in.
  for (const [key, descriptor] of polluted) {
    Object.defineProperty(Object.prototype, key, descriptor)
    try {
      for (const [name, make] of cases) check(`${name} with Object.prototype.${key}`, make, 'either')
      check(`a JSON object with Object.prototype.${key}`, () => eventWithInput({ a: 1 }), 'either')
      const copied = copyRecord({ a: 1 }, MAX_DEPTH)
      if (copied !== undefined) sameData(copied, record.parse({ a: 1 }))
    } finally {
      delete (Object.prototype as Record<string, unknown>)[key]
    }
  }
})

// ---------------------------------------------------------------------------------------------
// The compiler itself.

test('the compiler refuses, at compile time, every construct it does not reproduce', () => {
  const unsupported: Array<[string, z.ZodType, string]> = [
    ['transform', z.string().transform((value) => value.length), '(root)'],
    ['date', z.date(), '(root)'],
    ['object that strips unknown keys', z.object({ a: z.string() }), '(root)'],
    ['loose object', z.looseObject({ a: z.string() }), '(root)'],
    ['string format', z.email(), '(root)'],
    ['refinement', z.string().refine(() => true), '(root)'],
    ['trim', z.string().trim(), '(root)'],
    ['coercion', z.coerce.number(), '(root)'],
    ['multipleOf', z.number().multipleOf(2), '(root)'],
    ['overlapping union', z.union([z.string(), z.literal('a')]), '(root)|1'],
    ['optional outside an object', z.array(z.string().optional()), '(root)[]'],
    ['default', z.strictObject({ a: z.string().default('x') }), '(root).a'],
    ['nullable', z.strictObject({ a: z.string().nullable() }), '(root).a'],
    ['pipe', z.string().pipe(z.string()), '(root)'],
    ['record with enum keys', z.record(z.enum(['a', 'b']), z.string()), '(root)'],
    ['nested transform', z.strictObject({ a: z.strictObject({ b: z.number().transform((value) => value + 1) }) }), '(root).a.b'],
    ['literal with a lone surrogate', z.literal('\ud800'), '(root)'],
    ['bigint literal', z.literal(1n), '(root)'],
  ]
  for (const [name, schema, path] of unsupported) {
    try {
      compileSchema(schema)
      assert.unreachable(`${name} compiled`)
    } catch (error) {
      assert.instance(error, UnsupportedSchemaError, name)
      assert.is((error as UnsupportedSchemaError).path, path, name)
    }
  }
})

test('compiled number and string checks accept exactly what zod accepts', () => {
  const schema = z.strictObject({
    n: z.number().gt(-5).lt(10.5).int(),
    i: z.int32().nonnegative().optional(),
    f: z.number().lte(1.5).gte(-1.5),
    s: z.string().min(2).max(4),
    r: z.string().regex(/^a+$/g),
    e: z.enum(['x', 'y']),
    u: z.union([z.literal(1), z.string(), z.null(), z.boolean()]),
  })
  const copy = compileSchema(schema)
  const anything = fc.oneof(
    fc.double(),
    fc.integer({ min: -10, max: 20 }),
    fc.constantFrom(-0, 1, 1.5, -1.5, 2 ** 31, 2 ** 31 - 1, -5, 10, 10.5, 11, 'x', 'y', null, true, 'a', 'aa', 'aaa'),
    fc.string({ unit: 'binary', maxLength: 6 }),
    fc.string({ unit: astral, maxLength: 5 }),
  )
  const or = (likely: fc.Arbitrary<unknown>) => fc.oneof({ weight: 12, arbitrary: likely }, { weight: 1, arbitrary: anything })
  const inputs = fc.record(
    {
      n: or(fc.integer({ min: -6, max: 12 })),
      i: or(fc.oneof(fc.integer({ min: -2, max: 5 }), fc.constantFrom(2 ** 31 - 1, 2 ** 31, 1.5))),
      f: or(fc.double({ min: -1.6, max: 1.6 })),
      s: or(fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 5 }), fc.string({ unit: astral, minLength: 1, maxLength: 5 }), fc.constantFrom('a😀', '😀😀😀😀', 'ab😀c'))),
      r: or(fc.constantFrom('a', 'aa', 'aaaa', 'ab', '')),
      e: or(fc.constantFrom('x', 'y', 'z')),
      u: or(fc.constantFrom(1, 'q', '', null, false)),
    },
    { requiredKeys: ['n', 'f', 's', 'r', 'e', 'u'] },
  )
  let accepted = 0
  fc.assert(
    fc.property(inputs, (input) => {
      const plain = { ...input }
      const fast = copy(plain, MAX_DEPTH)
      const parsed = schema.safeParse(plain)
      assert.is(fast !== undefined, parsed.success, JSON.stringify(plain))
      if (fast !== undefined && parsed.success) {
        accepted += 1
        sameData(fast, canonical(parsed.data))
      }
    }),
    { numRuns: RUNS },
  )
  assert.ok(accepted > RUNS / 20, `${accepted} inputs were valid`)
})

test('strict objects are parsed by generated code, and by the loop where code generation is disallowed', async () => {
  assert.is(objectsGenerated, !WITHOUT_CODEGEN)
  if (WITHOUT_CODEGEN) return
  // Every test above again, in a child where `new Function` throws: the loop must answer the same.
  const file = fileURLToPath(import.meta.url)
  const child = spawn(process.execPath, ['--disallow-code-generation-from-strings', '--import', 'tsx', file], {
    env: { ...process.env, FACTSTATE_SPEC_NO_CODEGEN: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
  try {
    const code = await withTimeout(new Promise<number | null>((resolve) => child.once('exit', resolve)), 120_000, 'the child run without code generation')
    assert.is(code, 0, output)
    const passed = /Passed:\s+(\d+)/.exec(output.replace(/\x1b\[[0-9;]*m/g, ''))
    assert.ok(passed && Number(passed[1]) >= 9, `the child ran every test: ${output.slice(-400)}`)
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
})

test.run()
