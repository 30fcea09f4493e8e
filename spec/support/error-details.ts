/**
 * What `details` each code has (errors.ts `FactstateErrorDetails`), checked at run time: every
 * refusal a test expects through `rejectsWithCode` must carry details of its code's shape, no
 * member missing or extra. The map's type ties each schema to the declared type.
 */
import * as assert from 'uvu/assert'
import { z } from 'zod'
import type { FactstateErrorCode, FactstateErrorDetails } from '../../index.js'

const text = z.string()
const fields = z.strictObject({ fields: z.array(text) })
const invocation = z.strictObject({ sessionId: text, turnId: text, runId: text, invocationId: text })
const uncertain = z.strictObject({ invocationId: text, operationId: text, callId: text, name: text, input: z.unknown().optional() })

const schemas: { [C in FactstateErrorCode]: z.ZodType<FactstateErrorDetails[C]> } = {
  LOG_WRITER_BUSY: z.strictObject({ holder: z.enum(['this-process', 'another-process']), closing: z.boolean(), pid: z.number().int().positive().optional(), toolsRunning: z.number().int().positive().optional() }),
  LOG_INVALID_EVENT: fields,
  LOG_CONFLICT: z.union([z.strictObject({ seq: z.number().int() }), z.strictObject({ eventId: text })]),
  LOG_SEALED: z.strictObject({ invocationId: text, eventId: text }),
  LOG_REJECTED_FACT: z.strictObject({ eventId: text, invocationId: text.optional(), type: text.optional() }),
  LOG_CORRUPT: z.strictObject({ seq: z.number().int().optional(), index: text.optional(), key: text.optional(), file: text.optional() }).optional(),
  LOG_CLOSED: z.strictObject({ seq: z.number().int() }).optional(),
  LOG_PREFIX_TOO_LARGE: z.undefined(),
  LOG_INVALID_ARGUMENT: z.union([z.strictObject({ notALog: z.literal(true) }), z.strictObject({ destination: z.enum(['exists', 'no_parent', 'inside_log']) }), z.strictObject({ field: text }), z.strictObject({ field: z.literal('from'), highWater: z.number().int().min(0), snapshotOf: text.optional() }), z.strictObject({ field: z.literal('seq'), highWater: z.number().int().min(0) }), z.strictObject({ reason: z.literal('no_log'), path: text })]).optional(),
  LOG_IO: z.strictObject({ reason: z.enum(['no_space', 'permission', 'read_only', 'too_many_files', 'directory_gone', 'changing', 'other']), path: text.optional(), spaceNeeded: z.number().int().positive().optional() }).optional(),
  LOG_FORMAT_UNSUPPORTED: z.strictObject({ format: z.number(), supported: z.number() }),
  LOG_READ_ONLY: z.undefined(),
  RUN_INVALID_INPUT: z.strictObject({
    fields: z.array(text),
    field: text.optional(),
    bytes: z.number().int().positive().optional(),
    limit: z.number().int().positive().optional(),
    reason: z.literal('exists').optional(),
    existing: z.strictObject({ sessionId: text, runId: text, invocationId: text, turnId: text.optional() }).optional(),
  }),
  RUN_BUSY: z.strictObject({
    sessionId: text,
    reason: z.enum(['active', 'paused', 'source_running']),
    runId: text,
    invocationId: text,
    turnId: text.optional(),
  }),
  RUN_RECONCILIATION_REQUIRED: z.strictObject({
    unknown: z.array(uncertain),
    restored: z.strictObject({ highWater: z.number().int().min(0), digest: z.string().regex(/^sha256:[0-9a-f]{64}$/), takenAt: z.number().int().min(0) }).optional(),
  }),
  RUN_SOURCE_MISMATCH: z.strictObject({
    sessionId: text,
    runId: text,
    field: z.enum(['invocation', 'highWater', 'digest']),
    lastSeq: z.number().int().min(1).optional(),
    ended: z.boolean().optional(),
    eventId: text.optional(),
  }),
  RUN_SOURCE_STALE: z.strictObject({ sessionId: text, sourceRunId: text, latestRunId: text, latestInvocationId: text }),
  HANDOFF_MISMATCH: z.strictObject({
    field: text,
    fields: z.array(text).optional(),
    expected: invocation.optional(),
    sealed: z.unknown().optional(),
    given: z.unknown().optional(),
    tools: z.strictObject({ added: z.array(text), removed: z.array(text), changed: z.array(text) }).optional(),
    eventId: text.optional(),
  }),
  HANDOFF_CLAIMED: z.strictObject({ claimId: text, claimedBy: text.optional(), sealedBy: text.optional(), field: text.optional(), eventId: text.optional() }),
  HANDOFF_BUSY: z.undefined(),
  HANDOFF_NOT_HELD: z.undefined(),
  HANDOFF_CANCELLED: z.undefined(),
  HANDOFF_UNAVAILABLE: z.undefined(),
  MACHINE_REJECTED: z.strictObject({ state: text.nullable().optional(), type: text.nullable().optional(), index: z.number().int().nullable().optional() }),
  TOOL_SECRET_INVALID: z.strictObject({ reason: z.enum(['not_a_string', 'too_short', 'too_long', 'too_many']) }),
  TOOL_PROGRESS_INVALID: z.strictObject({ reason: z.enum(['not_json', 'too_large', 'too_deep']) }),
  MODEL_SECRET_INVALID: z.strictObject({ reason: z.enum(['too_long', 'too_many']) }),
  ENGINE_INVALID_OPTIONS: z.strictObject({ field: text }),
  ENGINE_CLOSED: z.strictObject({ call: z.enum(['start', 'check']), invocationId: text.optional() }),
  INSPECTOR_INVALID_OPTIONS: z.strictObject({ field: text, value: z.unknown().optional() }),
  TESTING_INVALID_OPTIONS: z.strictObject({ field: text }),
  MCP_INVALID_OPTIONS: z.strictObject({ field: text }),
  MCP_INVALID_TOOLS: z.strictObject({ reason: z.enum(['collision', 'name', 'description', 'schema', 'not_listed', 'listing']), tools: z.array(text), name: text.optional() }),
  ANTHROPIC_INVALID_OPTIONS: z.strictObject({ field: text }),
  OPENTELEMETRY_INVALID_OPTIONS: z.strictObject({ field: text }),
}

/** Asserts that `error`'s details have the shape its code declares. */
export function assertDetailsFit(error: { code: string; details?: unknown }, what: string): void {
  const schema = (schemas as Record<string, z.ZodType | undefined>)[error.code]
  assert.ok(schema, `${what}: ${error.code} is not a code`)
  const checked = schema.safeParse(error.details)
  if (checked.success) return
  // Rendered only for a misfit: a detail may hold what JSON cannot write (an inspector option's refused value, a BigInt).
  let shown: string
  try {
    shown = JSON.stringify(error.details)
  } catch {
    shown = String(error.details)
  }
  assert.unreachable(`${what}: details of ${error.code} do not fit its declared shape: ${shown} (${checked.error.message})`)
}
