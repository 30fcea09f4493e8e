import { z } from 'zod'
import type { Fact, HandoffIntent, HandoffPause, Invocation, JsonObject, JsonValue, ProviderRefusal, RunBoundary, RuntimeEvent } from './types.js'

/** Ids are non-empty strings of at most 128 characters from `[A-Za-z0-9._:-]`. */
export const ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/
/** What an id is, as refusals say it. */
export const ID_RULE = 'an id is 1–128 characters from [A-Za-z0-9._:-]'
/**
 * How an id made elsewhere (a thread id that is an email address or a path) becomes one: said once
 * by a refusal of such an id, which never shows the id itself whole.
 */
export const ID_MAPPING =
  "an id made elsewhere (an email address, a path, a longer id) maps to one: its SHA-256 digest in base64url (createHash('sha256').update(id).digest('base64url'), 43 characters), or a table of your own from one to the other"
/** What a refusal of `value` as an id adds: {@link ID_MAPPING} for a string (a thread id made elsewhere), nothing for what is no string. */
export const idMappingFor = (value: unknown): string => (typeof value === 'string' ? ` (${ID_MAPPING})` : '')
export const id = z.string().regex(ID_PATTERN, ID_RULE)
const text = z.string()
const digest = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'a digest is "sha256:" and 64 lowercase hex digits')
const count = z.number().int().nonnegative()

/** Any plain JSON value: what tool inputs, outputs and provider options may hold. */
export const jsonValue: z.ZodType<JsonValue> = z.lazy(() =>
  z.union([z.null(), z.boolean(), z.number().finite(), z.string(), z.array(jsonValue), z.record(z.string(), jsonValue)], {
    error: (issue) => `not JSON (${issue.input === undefined ? 'undefined' : typeof issue.input === 'number' ? String(issue.input) : typeof issue.input}): JSON is null, a boolean, a finite number, a string, an array or an object`,
  }),
)
const jsonObject = z.record(z.string(), jsonValue)

export const invocationSchema = z.strictObject({ sessionId: id, turnId: id, runId: id, invocationId: id }) satisfies z.ZodType<Invocation>

export const runBoundarySchema = z.strictObject({
  invocation: invocationSchema,
  highWater: count.min(1),
  digest,
}) satisfies z.ZodType<RunBoundary>

export const handoffIntentSchema = z.strictObject({
  handoffId: id,
  hostEpoch: id,
  rootRunId: id,
  successorRunId: id,
  successorInvocationId: id,
  claimId: id,
}) satisfies z.ZodType<HandoffIntent>

export const executionSchema = z.strictObject({
  model: text.min(1),
  providerOptions: jsonObject,
  mainOutputLimit: count.min(1).optional(),
  cwd: text.min(1),
  // `digests` last and optional: a seal (and every execution) written without it keeps its bytes.
  tools: z.strictObject({ catalogDigest: digest, names: z.array(text), digests: z.array(digest).optional() }),
  instructions: text.min(1).optional(),
  replayBase: runBoundarySchema.optional(),
})

export const handoffPauseSchema = z.strictObject({
  intent: handoffIntentSchema,
  remainingSteps: count,
  execution: executionSchema,
}) satisfies z.ZodType<HandoffPause>

/** An approver's decision on a call of a tool that needs approval: who decided, and why (for a denial). */
const approvalRecord = z.strictObject({ by: text.optional(), reason: text.optional() })

/**
 * A run input's `requestFingerprint`: 1–256 characters (counted as zod counts). The engine refuses
 * any other in the run input, and the log any other in an appended `invocation.opened` (the fact
 * schema itself accepts any string, so a stored fact is read as it was written).
 */
export const requestFingerprintSchema = text.min(1).max(256)

const uncertainOperation = z.strictObject({ invocationId: id, operationId: text.min(1), callId: text, name: text, input: jsonValue.optional() })

/**
 * The tool call that started a child run (an agent called by an agent's tool): the calling run's
 * invocation and the call's operation id. The log also refuses, on append, one whose operation id is
 * not one of that invocation's (`<invocationId>/…`), and a run that is its own parent (store/encoding.ts).
 */
export const parentCallSchema = z.strictObject({ invocation: invocationSchema, operationId: text.min(1).max(512) })

const invocationInput = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('message'),
    content: text,
    requestFingerprint: text.optional(),
    priorUnknown: z.array(uncertainOperation).optional(),
    // `parent` last and optional: a run written without it keeps its bytes (and its digest).
    parent: parentCallSchema.optional(),
  }),
  z.strictObject({
    kind: z.literal('continuation'),
    source: runBoundarySchema,
    content: text.min(1).optional(),
    requestFingerprint: text.optional(),
    priorUnknown: z.array(uncertainOperation).optional(),
    parent: parentCallSchema.optional(),
  }),
  // `content` and `requestFingerprint` last and optional: a successor written without them keeps its bytes.
  z.strictObject({ kind: z.literal('handoff'), source: runBoundarySchema, pause: handoffPauseSchema, content: text.min(1).optional(), requestFingerprint: text.optional() }),
])

/** A provider's id for an answer: 1–256 characters (a longer one is dropped, not the answer). */
const responseId = text.min(1).max(256)
/** `value` when a fact can hold it as `ModelOutput.responseId` (counted as the schema counts), else none. */
export const responseIdOf = (value: unknown): string | undefined => (responseId.safeParse(value).success ? (value as string) : undefined)

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** The id a provider gave the HTTP exchange (its `x-request-id` header): 1–256 characters (a longer one is dropped, not the answer or the failure). */
const requestId = text.min(1).max(256)
/**
 * `value` passed through `clean` (the redaction of the provider's secrets) when a fact can then hold
 * it as a `requestId` (a string of 1–256 characters, counted as the schema counts, of well-formed
 * text), else none. The client, the engine and the stored fact check by the same member.
 */
export function requestIdOf(value: unknown, clean: (text: string) => string = (text) => text): string | undefined {
  if (typeof value !== 'string') return undefined
  const cleaned = clean(value)
  return requestId.safeParse(cleaned).success && !LONE_SURROGATE.test(cleaned) ? cleaned : undefined
}
/** An HTTP status. */
const httpStatus = z.number().int().min(100).max(599)
/** A provider's error code, type or param: 1–128 characters (a longer one is dropped, not the failure). */
const refusalTag = text.min(1).max(128)
// `requestId` last and optional: a refusal written without it keeps its bytes.
const providerRefusal = z.strictObject({
  status: httpStatus.optional(),
  code: refusalTag.optional(),
  type: refusalTag.optional(),
  param: refusalTag.optional(),
  requestId: requestId.optional(),
})

/**
 * What a fact can hold of `value` as a `ProviderRefusal`, member by member: a `status` that is an
 * HTTP status (100–599), a `code` that is a string or a whole number (as its decimal digits), a
 * `type` and a `param` that are strings, each string passed through `clean` (the redaction of the
 * provider's secrets) and kept when it is then 1–128 characters (counted as the schema counts) of
 * well-formed text, and a `requestId` as `requestIdOf` keeps it (1–256 characters). What does not fit is dropped, never failing anything; `undefined` when nothing
 * is left. The client, the engine and the stored fact check by the same members, so cannot disagree.
 */
export function providerRefusalOf(value: unknown, clean: (text: string) => string = (text) => text): ProviderRefusal | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  // Member by member: one whose getter throws (a custom client's) is dropped, not the others.
  const member = (name: string): unknown => {
    try {
      return (value as Record<string, unknown>)[name]
    } catch {
      return undefined
    }
  }
  const [status, code, type, param, id] = ['status', 'code', 'type', 'param', 'requestId'].map(member)
  const tag = (given: unknown): string | undefined => {
    if (typeof given !== 'string') return undefined
    const cleaned = clean(given)
    // A lone surrogate is no text a fact holds: such a tag is dropped, not mended.
    return refusalTag.safeParse(cleaned).success && !LONE_SURROGATE.test(cleaned) ? cleaned : undefined
  }
  const out: ProviderRefusal = {}
  if (httpStatus.safeParse(status).success) out.status = status as number
  const codeText = tag(Number.isSafeInteger(code) ? String(code) : code)
  if (codeText !== undefined) out.code = codeText
  const typeText = tag(type)
  if (typeText !== undefined) out.type = typeText
  const paramText = tag(param)
  if (paramText !== undefined) out.param = paramText
  const idText = requestIdOf(id, clean)
  if (idText !== undefined) out.requestId = idText
  return Object.keys(out).length > 0 ? out : undefined
}

// `extraContent` last and optional: a call written without it keeps its bytes.
const toolCall = z.strictObject({ callId: text, name: text, arguments: text, extraContent: jsonObject.optional() })
export const modelOutputSchema = z.strictObject({
  text: text.optional(),
  toolCalls: z.array(toolCall),
  finishReason: text,
  // Members are added last and optional: a fact written without them keeps its bytes (the writer follows this order).
  usage: z
    .strictObject({ inputTokens: count.optional(), outputTokens: count.optional(), cachedInputTokens: count.optional(), reasoningTokens: count.optional() })
    .optional(),
  reasoning: text.optional(),
  responseId: responseId.optional(),
  requestId: requestId.optional(),
  // Bounded by `providerStateProblem` (checked on append, as a fingerprint's length is: see store/encoding.ts).
  reasoningDetails: z.array(jsonObject).optional(),
})

/** The most entries `ModelOutput.reasoningDetails` holds. */
export const MAX_REASONING_DETAILS = 256
/** The most JSON text (`JSON.stringify`, in UTF-16 units) `ModelOutput.reasoningDetails` holds, all entries together: 1 MiB. */
export const MAX_REASONING_DETAILS_SIZE = 1_048_576
/** The most JSON text (`JSON.stringify`, in UTF-16 units) one tool call's `extraContent` holds: 256 KiB. */
export const MAX_EXTRA_CONTENT_SIZE = 262_144
/** How deep an entry of `reasoningDetails` or an `extraContent` may nest (the object itself is level 1). */
export const MAX_PROVIDER_STATE_DEPTH = 32
/** The most members one object in `reasoningDetails` or an `extraContent` may have: msgpack as the log writes it (map16) holds no more (`MAX_OBJECT_MEMBERS`, store/encoding.ts). */
export const MAX_PROVIDER_STATE_MEMBERS = 0xffff

/**
 * A copy of `value` when it is plain JSON (null, a boolean, a finite number, a string, an array
 * or a plain object of them, no member `undefined`, no own `__proto__`, nested at most `depthLeft`
 * levels), else `undefined`. A getter that throws (a custom client's) makes it `undefined` too.
 */
function plainJsonCopy(value: unknown, depthLeft: number): JsonValue | undefined {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return value
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined
  if (typeof value !== 'object' || depthLeft <= 0) return undefined
  try {
    if (Array.isArray(value)) {
      if (Object.getPrototypeOf(value) !== Array.prototype) return undefined
      const copy: JsonValue[] = []
      for (let index = 0; index < value.length; index += 1) {
        const item = plainJsonCopy(value[index], depthLeft - 1)
        if (item === undefined) return undefined
        copy.push(item)
      }
      return copy
    }
    const prototype = Object.getPrototypeOf(value)
    if ((prototype !== Object.prototype && prototype !== null) || Object.hasOwn(value, '__proto__') || Object.getOwnPropertySymbols(value).length > 0) return undefined
    const copy: Record<string, JsonValue> = {}
    for (const key of Object.keys(value)) {
      const member = plainJsonCopy((value as Record<string, unknown>)[key], depthLeft - 1)
      if (member === undefined) return undefined
      copy[key] = member
    }
    return copy
  } catch {
    return undefined
  }
}

/** A copy of `value` when it is a plain JSON object a fact can hold as provider state (see {@link plainJsonCopy}). */
function jsonObjectCopy(value: unknown): JsonObject | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined
  return plainJsonCopy(value, MAX_PROVIDER_STATE_DEPTH) as JsonObject | undefined
}

/**
 * What a fact can hold of `value` as `ModelOutput.reasoningDetails`: a copy of its entries that are
 * plain JSON objects (others dropped, one by one), when 1–256 are left and their JSON text is at
 * most 1 MiB together; else none (the whole member dropped: a part of a provider's signed state is
 * of no use to it). Never throws.
 */
export function reasoningDetailsOf(value: unknown): JsonObject[] | undefined {
  if (!Array.isArray(value)) return undefined
  const entries: JsonObject[] = []
  try {
    for (const entry of value as unknown[]) {
      const copy = jsonObjectCopy(entry)
      if (copy !== undefined) entries.push(copy)
    }
  } catch {
    return undefined
  }
  return providerStateProblem(entries, undefined) === undefined ? entries : undefined
}

/** What a fact can hold of `value` as a tool call's `extraContent`: a copy of a plain JSON object with a member, of at most 256 KiB of JSON text; else none. Never throws. */
export function extraContentOf(value: unknown): JsonObject | undefined {
  const copy = jsonObjectCopy(value)
  return copy !== undefined && providerStateProblem(undefined, copy) === undefined ? copy : undefined
}

/**
 * What is wrong with `reasoningDetails` or `extraContent` (as the schema reads them) for the bounds
 * above, in words, or `undefined` when they fit: an empty array or object is none (left out, not
 * recorded), more than 256 entries, more JSON text than their limit, nesting past 32 levels, an
 * object of more members than the log can store (65,535: within 1 MiB of JSON an entry can have more).
 */
export function providerStateProblem(reasoningDetails: readonly JsonObject[] | undefined, extraContent: JsonObject | undefined): string | undefined {
  if (reasoningDetails !== undefined) {
    if (reasoningDetails.length === 0) return 'reasoningDetails is empty (leave it out instead)'
    if (reasoningDetails.length > MAX_REASONING_DETAILS) return `reasoningDetails holds ${reasoningDetails.length} entries, more than ${MAX_REASONING_DETAILS}`
    const size = JSON.stringify(reasoningDetails).length
    if (size > MAX_REASONING_DETAILS_SIZE) return `reasoningDetails is ${size} characters of JSON, more than ${MAX_REASONING_DETAILS_SIZE}`
    if (reasoningDetails.some((entry) => depthOf(entry) > MAX_PROVIDER_STATE_DEPTH)) return `an entry of reasoningDetails nests deeper than ${MAX_PROVIDER_STATE_DEPTH} levels`
    if (reasoningDetails.some((entry) => widestOf(entry) > MAX_PROVIDER_STATE_MEMBERS)) return `an entry of reasoningDetails holds an object of more than ${MAX_PROVIDER_STATE_MEMBERS} members`
  }
  if (extraContent !== undefined) {
    if (Object.keys(extraContent).length === 0) return 'extraContent is empty (leave it out instead)'
    const size = JSON.stringify(extraContent).length
    if (size > MAX_EXTRA_CONTENT_SIZE) return `extraContent is ${size} characters of JSON, more than ${MAX_EXTRA_CONTENT_SIZE}`
    if (depthOf(extraContent) > MAX_PROVIDER_STATE_DEPTH) return `extraContent nests deeper than ${MAX_PROVIDER_STATE_DEPTH} levels`
    if (widestOf(extraContent) > MAX_PROVIDER_STATE_MEMBERS) return `extraContent holds an object of more than ${MAX_PROVIDER_STATE_MEMBERS} members`
  }
  return undefined
}

/** The most members an object in `value` has (arrays' items are not members: msgpack holds any number of them). */
function widestOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0
  let widest = Array.isArray(value) ? 0 : Object.keys(value).length
  for (const member of Object.values(value)) widest = Math.max(widest, widestOf(member))
  return widest
}

/** How many levels of arrays and objects `value` nests (a string is 0, `{}` 1). */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0
  let deepest = 0
  for (const member of Object.values(value)) deepest = Math.max(deepest, depthOf(member))
  return deepest + 1
}

const toolOutcome = z.discriminatedUnion('status', [
  z.strictObject({ status: z.literal('succeeded'), output: jsonValue }),
  z.strictObject({ status: z.literal('failed'), message: text }),
  z.strictObject({ status: z.literal('unknown'), message: text }),
])

const invocationOutcome = z.discriminatedUnion('status', [
  z.strictObject({ status: z.literal('completed') }),
  z.strictObject({ status: z.literal('handoff_paused'), pause: handoffPauseSchema }),
  // `provider` last and optional: an outcome written without it keeps its bytes.
  z.strictObject({ status: z.literal('failed'), class: text.min(1), message: text.optional(), provider: providerRefusal.optional() }),
  z.strictObject({ status: z.literal('cancelled'), source: text.min(1) }),
])

const stepId = text.min(1).max(256)
const operationId = text.min(1).max(512)

export const factSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('invocation.opened'),
    input: invocationInput,
    configuration: z.strictObject({ cwd: text.min(1), workspaceIdentity: text.optional() }),
    execution: executionSchema,
  }),
  z.strictObject({ type: z.literal('model.requested'), stepId, model: text.min(1), requestDigest: digest }),
  z.strictObject({ type: z.literal('model.completed'), stepId, output: modelOutputSchema }),
  z.strictObject({
    type: z.literal('model.interrupted'),
    stepId,
    status: z.enum(['cancelled', 'timed_out', 'failed', 'retryable_failure']),
    message: text.optional(),
    // Last and optional: a fact written without it keeps its bytes.
    provider: providerRefusal.optional(),
  }),
  z.strictObject({
    type: z.literal('tool.dispatched'),
    operationId,
    callId: text,
    name: text.min(1),
    input: jsonValue,
    readOnly: z.literal(true).optional(),
    approval: approvalRecord.optional(),
  }),
  z.strictObject({ type: z.literal('tool.settled'), operationId, outcome: toolOutcome }),
  z.strictObject({
    type: z.literal('tool.rejected'),
    operationId,
    callId: text,
    name: text,
    input: jsonValue,
    reason: z.enum(['unknown_tool', 'invalid_input', 'cancelled', 'denied']),
    approval: approvalRecord.optional(),
    message: text.optional(),
  }),
  z.strictObject({ type: z.literal('hold.entered'), handoffId: id }),
  z.strictObject({ type: z.literal('hold.released'), handoffId: id }),
  z.strictObject({ type: z.literal('invocation.ended'), outcome: invocationOutcome }),
]) satisfies z.ZodType<Fact>

/** Event ids: 1–512 printable ASCII characters without spaces. */
export const eventIdSchema = z.string().regex(/^[\x21-\x7e]{1,512}$/, 'an event id is 1–512 printable ASCII characters without spaces')

export const runtimeEventSchema = z.strictObject({
  id: eventIdSchema,
  recordedAt: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  invocation: invocationSchema,
  fact: factSchema,
}) satisfies z.ZodType<RuntimeEvent>

/**
 * `schema.safeParse(value)` with a failure's error built at once. zod builds it on its first read,
 * describing each refused value, and describing one that cannot be read (a revoked Proxy) throws
 * there: after the parse, outside the try a caller put around it. Here it throws inside.
 */
export function safeParseNow<S extends z.ZodType>(schema: S, value: unknown): ReturnType<S['safeParse']> {
  const parsed = schema.safeParse(value) as ReturnType<S['safeParse']>
  if (!parsed.success) void parsed.error
  return parsed
}

/**
 * The dotted paths of the fields a parse refused (a refused unknown key is named itself; the value
 * as a whole is `(root)`), each once: what `details.fields` of an input refusal lists.
 */
export function issueFields(error: z.ZodError): string[] {
  const fields = error.issues.flatMap((issue) => {
    const at = issue.path.map(String)
    const paths = issue.code === 'unrecognized_keys' ? issue.keys.map((key) => [...at, key]) : [at]
    return paths.map((path) => (path.length > 0 ? path.join('.') : '(root)'))
  })
  return [...new Set(fields)]
}

/** Renders zod issues as `path: message` lines, naming every bad field. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => `${issue.path.length ? issue.path.map(String).join('.') : '(root)'}: ${issue.message}`)
    .join('; ')
}
