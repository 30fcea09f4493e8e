import { isAbsolute } from 'node:path'
import { z } from 'zod'
import { FactstateError } from '../errors.js'
import { meantName, namedHint, normalizedName } from '../options.js'
import { foreignRunInputHint, foreignToolMemberHint } from './foreign-names.js'
import { describeIssues, handoffPauseSchema, ID_MAPPING, ID_RULE, issueFields, id, invocationSchema, jsonValue, parentCallSchema, requestFingerprintSchema, runBoundarySchema } from '../facts/schema.js'
import type { HandoffPause, Invocation, JsonObject, ParentCall, RunBoundary } from '../facts/types.js'
import { parentProblem, storageProblemAt } from '../store/encoding.js'
import type { ProviderConfig } from './model-client.js'
import type { ToolDefinition, ToolRetry } from './tool-catalog.js'
import { DEFAULT_TOOL_BACKOFF_MS, DEFAULT_TOOL_MAX_BACKOFF_MS, MAX_TOOL_BACKOFF_MS, MAX_TOOL_RETRIES } from './tool-retry.js'

/** What a run is asked to do. */
export type RunWork =
  | {
      kind: 'message'
      /** The user's message, not empty: the first of a fresh transcript (after `instructions`). Recorded. */
      content: string
      /**
       * Acknowledges the session's unknown tool outcomes (checked by you): without it such a session
       * refuses the run, `RUN_RECONCILIATION_REQUIRED`. Recorded, and the model is told of them.
       */
      allowPriorUnknown?: boolean | undefined
      /**
       * In a log put back from a backup (\`log.restoredFrom()\`), acknowledges that this session may have
       * run after the backup (its tools' effects since then checked by you): without it a session that
       * has runs and none since the backup is refused, \`RUN_RECONCILIATION_REQUIRED\` with
       * \`details.restored\`. Apart from \`allowPriorUnknown\`, which does not acknowledge it: a run that
       * recovery closed with nothing uncertain says nothing of what the session did after the backup.
       * Not recorded; without effect in a log that is not a restored backup.
       */
      allowRestored?: boolean | undefined
    }
  | {
      kind: 'continuation'
      /** The boundary of an ended run to continue from, as `log.runSource(sessionId, runId)` gives it. */
      source: RunBoundary
      /**
       * The user's next message: the model gets the source's lineage, then this (a conversation's next
       * turn). Without it the continuation finishes what the source left unfinished.
       */
      content?: string | undefined
      /**
       * Admits the continuation only if its source is the session's last run opened (the last of
       * `log.runs(sessionId)`, branches, messages and handoff successors included), checked atomically
       * with the admission; else it is refused, `RUN_SOURCE_STALE`, naming the latest run, and nothing
       * is written. For a conversation's next message: a source read before another message's run
       * opened (two sent at once, a retry after `RUN_BUSY`) would otherwise make a branch that leaves
       * that run's turn out. Without it any ended run of the session may be continued. Not recorded.
       */
      onlyIfLatest?: boolean | undefined
      /** As for a message: acknowledges the session's unknown tool outcomes. */
      allowPriorUnknown?: boolean | undefined
      /** As for a message: acknowledges a session in a log put back from a backup. */
      allowRestored?: boolean | undefined
    }
  | {
      kind: 'handoff'
      /** The sealed run's boundary, `log.runSource(sessionId, runId).boundary`. */
      source: RunBoundary
      /** The sealed pause, `log.runSource(sessionId, runId).pause`: only the sealed facts admit a successor. */
      pause: HandoffPause
      /**
       * What happened while the turn was paused (a reviewer's decision: "carol@acme approved the refund
       * of O-3"), as the user's message: the model gets the sealed run's transcript, then this. Not
       * empty; checked and recorded as a continuation's `content` is (in `invocation.opened`), replayed
       * by every later run of the chain, and not an execution setting: a seal does not compare it.
       * Without it the successor's first request is the one the sealed run would have sent. A successor
       * given up (admitted with an already aborted signal) records it too, unsent: a continuation of
       * that successor's run replays it.
       */
      content?: string | undefined
      /**
       * In a log put back from a backup (`log.restoredFrom()`), acknowledges that the turn's successor may
       * have run after the backup (checked by you): without it the successor of a session that has not
       * run since is refused, `RUN_RECONCILIATION_REQUIRED`. Not recorded; without effect elsewhere.
       */
      allowRestored?: boolean | undefined
    }

/** Everything needed to admit and run one invocation. */
export interface RunInput {
  /**
   * The run's ids, each used once: a run or invocation id the log has seen is refused
   * (`RUN_INVALID_INPUT`). A successor's is `successorOf(pause.intent, source.invocation)`.
   */
  invocation: Invocation
  /** Where and how model requests go. Only `model` is recorded and sealed; `apiKey` and `headers` stay in memory. */
  provider: ProviderConfig
  /**
   * Merged into every request body (`{ temperature: 0 }`, say), as JSON. Recorded and sealed. The
   * fields the engine sets (`model`, `messages`, `tools`, `max_tokens`) are refused: `RUN_INVALID_INPUT`.
   * JSON only (a {@link JsonObject}): a member that is `undefined`, a Date, a Map, a function, NaN or
   * Infinity is refused too, as no request body could carry it exactly.
   */
  providerOptions?: JsonObject | undefined
  /** Where the run works; recorded in `invocation.opened`. */
  configuration: {
    /** The working directory: must be an absolute path. Recorded and sealed (compared exactly). */
    cwd: string
    /** Your name for the workspace, 1–256 characters: recorded, not compared by a seal. */
    workspaceIdentity?: string | undefined
  }
  /**
   * The system prompt, not empty: sent first in every request of the run, as a system message.
   * Recorded in the run's execution settings (so a seal carries it and a successor must have the
   * same); a continuation is a run of its own and gives its own.
   */
  instructions?: string | undefined
  /** The most tokens an answer may take, a whole number 1–1,000,000, sent as `max_tokens` (default: none sent). Recorded and sealed. */
  mainOutputLimit?: number | undefined
  /**
   * Model steps allowed, a whole number 1–256 (default 8); past them the run ends `failed{max_steps}`.
   * A successor gets the steps its pause left (`remainingSteps`): its own must be valid but is not used.
   */
  maxSteps?: number | undefined
  /**
   * 1–256 characters of your own (a hash of the request that started the run, say), recorded in the
   * run's `invocation.opened` (a message's, a continuation's or a successor's). Not sealed.
   */
  requestFingerprint?: string | undefined
  /**
   * The tool call that starts this run, when an agent's tool runs another agent (a child run):
   * `{ invocation: context.invocation, operationId: context.operationId }`, as `childRunFor(context, name).parent`
   * gives it. Recorded in the run's `invocation.opened` (`input.parent`), so the log links the child to
   * the call, and `childRunOf(operationId, name)` finds the child from the call. For a message or a
   * continuation; a handoff successor's turn keeps the parent its first run recorded, so one given here
   * is refused. Its `operationId` must be one of `invocation`'s (`<invocationId>/…`) and the run may not
   * be its own parent (`RUN_INVALID_INPUT`, `details.fields`: `parent…`); it is not looked up in the
   * log, so the parent may live in another log.
   */
  parent?: ParentCall | undefined
  /**
   * The tools the model may call, in the order it is shown them; names unique. Sealed by a digest over
   * each one's name, description and input schema (not its code).
   */
  tools: readonly ToolDefinition[]
  /**
   * How many tool calls of one model answer may run at once (default 1: one after the other, in the
   * order the model made them; at most 64). Each dispatch is durable before its tool starts either way.
   */
  toolConcurrency?: number | undefined
  /** What the run is asked to do: a new message, a continuation of an ended run, or a handoff's successor. */
  work: RunWork
}

/**
 * A run input's settings: everything but which run it is (`invocation`) and what it is asked to do
 * (`work`). What an application keeps once and spreads into each run of a session.
 *
 * @example
 * ```ts
 * const settings: RunSettings = { provider, configuration: { cwd: '/srv/app' }, instructions: 'Be brief.', tools }
 * await engine.start({ ...settings, invocation: { sessionId, turnId, runId, invocationId }, work: { kind: 'message', content } })
 * ```
 */
export type RunSettings = Omit<RunInput, 'invocation' | 'work'>

export const DEFAULT_MAX_STEPS = 8
export const MAX_STEPS_LIMIT = 256
export const MAX_TOOL_CONCURRENCY = 64

/**
 * The request-body fields the engine sets itself (and records: the model in `model.requested`, the
 * output limit and the catalog in the execution settings). Provider options may not name them.
 */
const ENGINE_BODY_FIELDS: readonly string[] = ['model', 'messages', 'tools', 'max_tokens']

const toolName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a tool name is 1–64 characters from [A-Za-z0-9_-]')
/** What each member of a tool may be misnamed as (other providers' names, other spellings), normalized. */
const TOOL_MEMBER_ALIASES: Readonly<Record<string, string>> = {
  parameters: 'inputSchema',
  schema: 'inputSchema',
  jsonschema: 'inputSchema',
  requiresapproval: 'needsApproval',
  requireapproval: 'needsApproval',
  approvalrequired: 'needsApproval',
  isreadonly: 'readOnly',
  validate: 'validateInput',
  timeout: 'timeoutMs',
  timeoutms: 'timeoutMs',
  retries: 'retry',
  retrypolicy: 'retry',
  retryoptions: 'retry',
}
const TOOL_MEMBERS = ['name', 'description', 'inputSchema', 'readOnly', 'validateInput', 'needsApproval', 'timeoutMs', 'retry', 'execute'] as const

/**
 * The tool member that `key` misnames, if it looks like one (another case or separator, a typo of one
 * or two letters, another provider's name), else undefined: a tool may carry members of its own.
 */
function misnamedToolMember(key: string): string | undefined {
  if ((TOOL_MEMBERS as readonly string[]).includes(key)) return undefined
  const normalized = key.toLowerCase().replace(/[^a-z0-9]/g, '')
  const alias = TOOL_MEMBER_ALIASES[normalized]
  if (alias !== undefined) return alias
  return meantName(key, TOOL_MEMBERS)
}

/** Another name of `timeoutMs` (normalized): refused even beside `timeoutMs`, which would leave one of two limits unapplied. */
const TIMEOUT_ALIASES: ReadonlySet<string> = new Set(['timeout', 'timeoutms'])

/**
 * The member of a retry policy that `key`, given at a tool's top level, names (`retries`,
 * `backoffMs`, `RetryOn`, another library's `maxRetries`), else undefined.
 */
function misplacedRetryMember(key: string): string | undefined {
  if ((TOOL_MEMBERS as readonly string[]).includes(key)) return undefined
  const normalized = normalizedName(key)
  const member = RETRY_MEMBERS.find((name) => normalizedName(name) === normalized)
  // Of other libraries' words only `maxRetries`: `delayMs` and the like may well be a tool's own.
  return member ?? (normalized === 'maxretries' ? 'retries' : undefined)
}

const wholeMs = (name: string, most: number) =>
  z.number().refine((value) => Number.isSafeInteger(value) && value >= 0 && value <= most, `${name} must be a whole number of milliseconds from 0 to ${most.toLocaleString('en-US')}`)

/** What other libraries call what `retry` names otherwise, normalized: a policy given in their words would be refused without a hint. */
const RETRY_MEMBER_HINTS: Readonly<Record<string, string>> = {
  attempts: 'retries counts the retries after the first attempt (attempts - 1)',
  maxattempts: 'retries counts the retries after the first attempt (maxAttempts - 1)',
  maximumattempts: 'retries counts the retries after the first attempt (maximumAttempts - 1)',
  maxretries: 'did you mean retries?',
  retry: 'did you mean retries?',
  initialdelayms: 'did you mean backoffMs?',
  initialintervalms: 'did you mean backoffMs?',
  delayms: 'did you mean backoffMs?',
  maxdelayms: 'did you mean maxBackoffMs?',
  maximumintervalms: 'did you mean maxBackoffMs?',
  backofffactor: 'the wait doubles for each retry, and has no other factor',
  backoffcoefficient: 'the wait doubles for each retry, and has no other factor',
  shouldretry: 'did you mean retryOn?',
}
const RETRY_MEMBERS = ['retries', 'backoffMs', 'maxBackoffMs', 'retryOn']

// Strict: a policy member ignored (`attempts: 3`, another library's word) would leave a call unretried, or
// retried otherwise than meant. Checked first, so that such a policy is told the hint, not only that `retries` is missing.
const retryPolicy = z
  .unknown()
  .superRefine((value, context) => {
    if (value === null || typeof value !== 'object') return
    for (const key of Object.keys(value)) {
      if (RETRY_MEMBERS.includes(key)) continue
      // Another library's word told what it is here; else a misspelling of a member (`backoffMS`, `retryon`) named.
      const meant = meantName(key, RETRY_MEMBERS)
      const hint = namedHint(RETRY_MEMBER_HINTS, key) ?? (meant === undefined ? undefined : `did you mean ${meant}?`)
      context.addIssue({ code: 'custom', path: [key], message: `${key} is not a member of a retry policy (it takes retries, backoffMs, maxBackoffMs and retryOn)${hint === undefined ? '' : `: ${hint}`}` })
    }
  })
  .pipe(
    z
      .object(
        {
          retries: z
            .number({ error: (issue) => (issue.input === undefined ? `retries is required: how many times to retry after the first attempt, 0 to ${MAX_TOOL_RETRIES}` : undefined) })
            .refine((value) => Number.isSafeInteger(value) && value >= 0 && value <= MAX_TOOL_RETRIES, `retries must be a whole number from 0 to ${MAX_TOOL_RETRIES}`),
          backoffMs: wholeMs('backoffMs', MAX_TOOL_BACKOFF_MS).optional(),
          maxBackoffMs: wholeMs('maxBackoffMs', MAX_TOOL_BACKOFF_MS).optional(),
          retryOn: z.custom<(error: unknown, attempt: number) => boolean>((value) => typeof value === 'function', 'retryOn must be a function of the error and the attempt').optional(),
        },
        { error: () => 'retry must be an object: { retries, backoffMs?, maxBackoffMs?, retryOn? }' },
      )
      .superRefine((value, context) => {
        // Every wait would be cut to maxBackoffMs: the backoff asked for would never apply (as ModelExecutor refuses it).
        // The default backoffMs too: { maxBackoffMs: 100 } alone is named at maxBackoffMs, the member given.
        const first = value.backoffMs ?? DEFAULT_TOOL_BACKOFF_MS
        const most = value.maxBackoffMs ?? DEFAULT_TOOL_MAX_BACKOFF_MS
        if (first > most) {
          const defaulted = (given: number | undefined) => (given === undefined ? ', the default' : '')
          context.addIssue({
            code: 'custom',
            path: [value.backoffMs === undefined ? 'maxBackoffMs' : 'backoffMs'],
            message: `backoffMs (${first}${defaulted(value.backoffMs)}) is longer than maxBackoffMs (${most}${defaulted(value.maxBackoffMs)}), which cuts every wait to it: raise maxBackoffMs, or lower backoffMs`,
          })
        }
      }),
  )

const toolTimeoutMs = z
  .number()
  .refine((value) => Number.isSafeInteger(value) && value >= 1 && value <= 2_147_483_647, 'timeoutMs must be a whole number of milliseconds from 1 to 2,147,483,647')

/** What a run reads of a tool as it runs its calls, checked again on the run's copy (see {@link toolCallLimits}). */
const callLimits = z.object({ timeoutMs: toolTimeoutMs.optional(), retry: retryPolicy.optional() })

/** The key the AI SDK (`ai`, `@ai-sdk/provider-utils`) marks its schema wrappers with. */
const AI_SDK_SCHEMA = Symbol.for('vercel.ai.schema')

// A tool may carry members of its own (its state, helpers), but one that looks like a misnamed member
// it lacks is refused: ignored, `needsApprovl: true` would run the tool unapproved, and a schema given as
// `parameters` would leave its calls unchecked.
const tool = z.looseObject({
  name: toolName,
  description: z.string().optional(),
  inputSchema: z
    .unknown()
    .superRefine((value, context) => {
      // The AI SDK's schema wrapper (`jsonSchema()`, `zodSchema()`, `asSchema()`, and so an AI SDK tool's
      // `inputSchema` from its MCP client) would fail as its `_type`, `validate` and symbol key, none of which says what to do.
      if (value !== null && typeof value === 'object' && Object.hasOwn(value, AI_SDK_SCHEMA)) {
        context.addIssue({
          code: 'custom',
          message: 'inputSchema takes a JSON Schema object, not an AI SDK schema (jsonSchema(), zodSchema()): pass the JSON Schema it wraps (await asSchema(schema).jsonSchema)',
        })
        return
      }
      // A validation library's schema (zod, valibot, ArkType: Standard Schema) is an object too, and would fail as "expected record".
      // Not a JSON Schema that carries the member hidden (zod's z.toJSONSchema output has it, not enumerable, on a plain object).
      if (value === null || typeof value !== 'object' || !('~standard' in value)) return
      if (Object.getPrototypeOf(value) === Object.prototype && !Object.prototype.propertyIsEnumerable.call(value, '~standard')) return
      const standard = (value as { '~standard'?: { vendor?: unknown } })['~standard']
      const vendor = typeof standard?.vendor === 'string' ? standard.vendor : 'validation library'
      context.addIssue({
        code: 'custom',
        message: `inputSchema takes a JSON Schema object, not a ${vendor} schema: convert it first${vendor === 'zod' ? ' (z.toJSONSchema(schema) in zod 4)' : ''}`,
      })
    })
    .pipe(z.record(z.string(), jsonValue))
    .optional(),
  readOnly: z.boolean().optional(),
  validateInput: z.boolean().optional(),
  needsApproval: z.custom<ToolDefinition['needsApproval']>((value) => typeof value === 'boolean' || typeof value === 'function', 'needsApproval must be a boolean or a function of the input').optional(),
  timeoutMs: toolTimeoutMs.optional(),
  retry: retryPolicy.optional(),
  execute: z.custom<ToolDefinition['execute']>((value) => typeof value === 'function', 'execute must be a function'),
}).superRefine((value, context) => {
  for (const key of Object.keys(value)) {
    // A member of the retry policy given beside it (`retries: 3`, `backoffMs`, `maxRetries`): pointed into `retry`
    // even when the tool has one, where it would otherwise be the tool's own and retry nothing as meant.
    const misplaced = misplacedRetryMember(key)
    if (misplaced !== undefined) {
      context.addIssue({ code: 'custom', path: [key], message: `${key} is not a member of a tool: did you mean retry.${misplaced}? (retry takes { retries, backoffMs?, maxBackoffMs?, retryOn? })` })
      continue
    }
    // `timeout` (or `timeout_ms`) beside `timeoutMs` too: two time limits where one applies.
    if (TIMEOUT_ALIASES.has(normalizedName(key)) && key !== 'timeoutMs') {
      context.addIssue({ code: 'custom', path: [key], message: `${key} is not a member of a tool: did you mean timeoutMs?` })
      continue
    }
    // Another library's word for asking a person first (`approval: 'always'`, `confirm: true`): admitted, the tool would run unasked.
    const foreign = foreignToolMemberHint(key)
    if (foreign !== undefined && !Object.hasOwn(value, 'needsApproval')) {
      context.addIssue({ code: 'custom', path: [key], message: `${key} is not a member of a tool: ${foreign}` })
      continue
    }
    const meant = misnamedToolMember(key)
    // Beside the member it resembles, it is the tool's own (an `executor` beside `execute`).
    if (meant !== undefined && !Object.hasOwn(value, meant)) context.addIssue({ code: 'custom', path: [key], message: `${key} is not a member of a tool: did you mean ${meant}?` })
  }
})

const cwd = z
  .string()
  .min(1)
  .refine((value) => !value.includes('\0'), 'cwd must not contain NUL')
  .refine((value) => isAbsolute(value), 'cwd must be an absolute path')

const parseUrl = (value: string): URL | undefined => {
  try {
    return new URL(value)
  } catch {
    return undefined
  }
}
const url = z
  .string()
  .refine((value) => {
    const parsed = parseUrl(value)
    return parsed?.protocol === 'http:' || parsed?.protocol === 'https:'
  }, 'baseUrl must be an http(s) URL')
  // A password in the URL would reach every error message (and so the log); fetch refuses such URLs anyway.
  .refine((value) => {
    const parsed = parseUrl(value)
    return parsed === undefined || (parsed.username === '' && parsed.password === '')
  }, 'baseUrl must not carry credentials (user:password@); pass them as apiKey or headers')

/** An HTTP header name: a token (RFC 9110). */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** What fetch sends as a header value: Latin-1 text without control characters but tab, nor DEL (it refuses the rest, after the run has begun). */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/
/** Headers the HTTP client sets for each request from its body and connection: given, one hung the request or was refused mid-run. */
const FRAMING_HEADERS = new Set(['content-length', 'transfer-encoding', 'host', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'expect'])

const runInputSchema = z.strictObject({
  invocation: invocationSchema,
  provider: z.strictObject({
    kind: z.literal('openai-chat'),
    baseUrl: url,
    model: z.string().min(1).max(256),
    apiKey: z
      .string()
      .refine((value) => HEADER_VALUE.test(value), 'apiKey must be text an HTTP header can carry (Latin-1, no control character but tab); its value is not shown')
      .optional(),
    headers: z
      .record(z.string(), z.string())
      .superRefine((headers, context) => {
        for (const [name, value] of Object.entries(headers)) {
          if (!HEADER_NAME.test(name)) context.addIssue({ code: 'custom', path: [name], message: `${JSON.stringify(name)} is not an HTTP header name (letters, digits and !#$%&'*+-.^_\`|~)` })
          else if (FRAMING_HEADERS.has(name.toLowerCase())) context.addIssue({ code: 'custom', path: [name], message: `${name} is set by the HTTP client for each request; it cannot be given` })
          else if (!HEADER_VALUE.test(value)) context.addIssue({ code: 'custom', path: [name], message: `the value of ${name} is not text an HTTP header can carry (Latin-1, no control character but tab); it is not shown` })
        }
      })
      .optional(),
  }),
  providerOptions: z
    .record(z.string(), jsonValue)
    .superRefine((options, context) => {
      for (const field of ENGINE_BODY_FIELDS) {
        if (Object.hasOwn(options, field)) {
          context.addIssue({ code: 'custom', path: [field], message: `${field} is set by the engine; it cannot be a provider option` })
        }
      }
    })
    .optional(),
  configuration: z.strictObject({ cwd, workspaceIdentity: z.string().min(1).max(256).optional() }),
  instructions: z.string().min(1).optional(),
  mainOutputLimit: z.number().int().min(1).max(1_000_000).optional(),
  maxSteps: z.number().int().min(1).max(MAX_STEPS_LIMIT).optional(),
  requestFingerprint: requestFingerprintSchema.optional(),
  parent: parentCallSchema.optional(),
  tools: z.array(tool).refine((tools) => new Set(tools.map((t) => t.name)).size === tools.length, 'tool names must be unique'),
  toolConcurrency: z.number().int().min(1).max(MAX_TOOL_CONCURRENCY).optional(),
  work: z.discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('message'), content: z.string().min(1), allowPriorUnknown: z.boolean().optional(), allowRestored: z.boolean().optional() }),
    z.strictObject({
      kind: z.literal('continuation'),
      source: runBoundarySchema,
      content: z.string().min(1).optional(),
      onlyIfLatest: z.boolean().optional(),
      allowPriorUnknown: z.boolean().optional(),
      allowRestored: z.boolean().optional(),
    }),
    z.strictObject({
      kind: z.literal('handoff'),
      source: runBoundarySchema,
      pause: handoffPauseSchema,
      content: z.string().min(1).optional(),
      allowRestored: z.boolean().optional(),
    }),
  ]),
})

/**
 * What of a run input ends up in facts, as plain data, for the store's own checks: nesting (deep
 * values are refused before the schema's parse recurses), lone surrogates, own `__proto__` keys
 * (JSON.parse makes them; a copy would drop one, so the request would differ from what is recorded),
 * objects of more than 65,535 members.
 */
function recordedParts(input: unknown): [field: string, value: unknown, depth: number][] {
  if (typeof input !== 'object' || input === null) return []
  const run = input as Record<string, unknown>
  const provider = (typeof run.provider === 'object' && run.provider !== null ? run.provider : {}) as Record<string, unknown>
  const tools = Array.isArray(run.tools) ? run.tools : []
  // Each at the depth it sits in the deepest event that records it: provider options go as far down
  // as a seal's `fact.outcome.pause.execution.providerOptions`.
  return [
    ['invocation', run.invocation, 1],
    ['provider.model', provider.model, 5],
    ['providerOptions', run.providerOptions, 5],
    ['configuration', run.configuration, 2],
    ['instructions', run.instructions, 5],
    ['requestFingerprint', run.requestFingerprint, 3],
    ['parent', run.parent, 3],
    ['work', run.work, 2],
    // By index, not map: a hole in a sparse list is a tool like any other, refused by the schema as `tools.<index>`.
    ...Array.from({ length: tools.length }, (_, index): [string, unknown, number] => {
      const tool: unknown = tools[index]
      const { name, description, inputSchema } = (typeof tool === 'object' && tool !== null ? tool : {}) as Record<string, unknown>
      return [`tools.${index}`, { name, description, inputSchema }, 1]
    }),
  ]
}

/** Members of the run input itself and of its `provider`: one given at the other level is told where it goes. */
// Only names that belong to the other level alone: `kind` is also `work`'s, and `provider` is the level itself.
const RUN_INPUT_MEMBERS: readonly string[] = Object.keys(runInputSchema.shape).filter((key) => key !== 'provider')
/** Every member a run input may have. */
export const RUN_INPUT_KEYS: readonly string[] = Object.keys(runInputSchema.shape)
const PROVIDER_KEYS: readonly string[] = Object.keys(runInputSchema.shape.provider.shape)
const PROVIDER_MEMBERS: readonly string[] = PROVIDER_KEYS.filter((key) => key !== 'kind')
const INVOCATION_MEMBERS: readonly string[] = Object.keys(runInputSchema.shape.invocation.shape)

/**
 * The members the object at `path` of a run input (`input`) may have, from the schema itself: of a
 * discriminated union (`work`), the variant the input's own discriminator (`kind`) picks, else every
 * variant's; none for a path that is not of an object the schema describes member by member.
 * `others`: the members only other variants than the one picked have (a message's `work` given
 * `onlyIfLatest`, a continuation's).
 */
function membersAt(path: readonly PropertyKey[], input: unknown): { members: string[]; others: string[]; kind?: string } {
  let schemas: z.ZodType[] = [runInputSchema]
  let value: unknown = input
  let others: z.ZodObject[] = []
  let kind: string | undefined
  for (const segment of [...path, undefined]) {
    const objects: z.ZodObject[] = []
    others = []
    kind = undefined
    const open = [...schemas]
    for (let schema = open.pop(); schema !== undefined; schema = open.pop()) {
      if (schema instanceof z.ZodObject) objects.push(schema)
      else if (schema instanceof z.ZodOptional) open.push(schema.unwrap() as z.ZodType)
      else if (schema instanceof z.ZodDiscriminatedUnion) {
        // The variant the value names (`kind: 'message'`): a member of another is no spelling of one of its own.
        const options = schema.options as z.ZodType[]
        const discriminator = (schema.def as { discriminator: string }).discriminator
        const given = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[discriminator] : undefined
        const picked = options.filter((option) => {
          const tag = option instanceof z.ZodObject ? option.shape[discriminator] : undefined
          return tag instanceof z.ZodLiteral && tag.values.has(given as never)
        })
        open.push(...(picked.length === 0 ? options : picked))
        if (picked.length > 0) kind = String(given)
        if (picked.length > 0) others.push(...options.filter((option): option is z.ZodObject => option instanceof z.ZodObject && !picked.includes(option)))
      } else if (schema instanceof z.ZodUnion) open.push(...(schema.options as z.ZodType[]))
    }
    if (segment === undefined) {
      const members = [...new Set(objects.flatMap((object) => Object.keys(object.shape)))]
      const elsewhere = [...new Set(others.flatMap((object) => Object.keys(object.shape)))].filter((name) => !members.includes(name))
      return { members, others: elsewhere, ...(kind === undefined ? {} : { kind }) }
    }
    schemas = objects.flatMap((object) => (typeof segment === 'string' && Object.hasOwn(object.shape, segment) ? [object.shape[segment] as z.ZodType] : []))
    value = typeof value === 'object' && value !== null && typeof segment === 'string' ? (value as Record<string, unknown>)[segment] : undefined
  }
  return { members: [], others: [] }
}

/** ` (providerOptions belongs beside provider, not in it)`, for unknown keys that are members one level up or down. */
function misplacedHint(error: z.ZodError, input: unknown): string {
  const hints: string[] = []
  for (const issue of error.issues) {
    if (issue.code !== 'unrecognized_keys') continue
    const at = issue.path.join('.')
    for (const key of issue.keys) {
      const foreign = at === '' ? foreignRunInputHint(key) : undefined
      if (at === 'provider' && RUN_INPUT_MEMBERS.includes(key)) hints.push(`${key} belongs beside provider, at the top of the run input, not in it`)
      else if (at === '' && PROVIDER_MEMBERS.includes(key)) hints.push(`${key} belongs in provider`)
      else if (at === '' && INVOCATION_MEMBERS.includes(key)) hints.push(`${key} belongs in invocation`)
      // Another library's word (LangGraph's recursionLimit, the AI SDK's system): where the setting is here.
      else if (foreign !== undefined) hints.push(`${key}: ${foreign}`)
      else {
        // Another spelling of a member of its level (the OpenAI SDK's baseURL, api_key, work's allowpriorunknown): named.
        const { members, others, kind } = membersAt(issue.path, input)
        const meant = meantName(key, members)
        const elsewhere = meant === undefined ? (others.includes(key) ? key : meantName(key, others)) : undefined
        if (meant !== undefined) hints.push(`${at === '' ? '' : `${at}.`}${key}: did you mean ${meant}?`)
        // A member of another variant (a continuation's `onlyIfLatest` in a message's work): said so, not offered.
        else if (elsewhere !== undefined && kind !== undefined) hints.push(`${at}.${key}: ${elsewhere} is taken by another kind of ${at}, not by kind ${JSON.stringify(kind)}`)
      }
    }
  }
  return hints.length === 0 ? '' : ` (${hints.join('; ')})`
}

/** Checks a run input; anything wrong is `RUN_INVALID_INPUT` naming every bad field. Nothing is written. */
export function validateRunInput(input: unknown): RunInput {
  // A sparse list of millions of holes costs its maker nothing: refused at its first, before anything
  // walks the list (a part or an issue for each hole ran out of memory).
  const tools = typeof input === 'object' && input !== null ? (input as { tools?: unknown }).tools : undefined
  const hole = Array.isArray(tools) ? firstHole(tools) : undefined
  if (hole !== undefined) throw new FactstateError('RUN_INVALID_INPUT', `tools.${hole}: a hole in the list is not a tool`, { details: { fields: [`tools.${hole}`] } })
  for (const [field, value, depth] of recordedParts(input)) {
    const problem = storageProblemAt(value, depth, field)
    if (problem !== undefined) {
      throw new FactstateError('RUN_INVALID_INPUT', problem, { details: { fields: [field] } })
    }
  }
  const parsed = runInputSchema.safeParse(input)
  if (!parsed.success) {
    // An id refused for its characters or length (a thread id 'alice@example.com'): how to make one of it, said once.
    const mapping = parsed.error.issues.some((issue) => issue.message === ID_RULE) ? ` (${ID_MAPPING})` : ''
    throw new FactstateError('RUN_INVALID_INPUT', describeIssues(parsed.error) + misplacedHint(parsed.error, input) + mapping, {
      details: { fields: issueFields(parsed.error) },
    })
  }
  const value = input as RunInput
  const { work } = value
  if (work.kind !== 'message' && work.source.invocation.sessionId !== value.invocation.sessionId) {
    throw new FactstateError('RUN_INVALID_INPUT', 'work.source.invocation.sessionId: the source run belongs to another session than invocation.sessionId', {
      details: { fields: ['work.source.invocation.sessionId'] },
    })
  }
  if (value.parent !== undefined) {
    if (work.kind === 'handoff') {
      throw new FactstateError('RUN_INVALID_INPUT', "parent: a handoff successor goes on its sealed run's turn, whose first run recorded its parent; give parent to a message or a continuation", {
        details: { fields: ['parent'] },
      })
    }
    const problem = parentProblem(value.parent, value.invocation)
    if (problem !== undefined) throw new FactstateError('RUN_INVALID_INPUT', problem.why, { details: { fields: [problem.field] } })
  }
  return value
}

export { id as idSchema }

/** The index of the first hole (or `undefined` item) of `list`, if it has one. */
export function firstHole(list: readonly unknown[]): number | undefined {
  for (let index = 0; index < list.length; index += 1) if (list[index] === undefined) return index
  return undefined
}

/**
 * Checks one tool as a member of a run input's `tools` is checked (what it records, then its shape):
 * what is wrong with it, naming the fields under `field`, or `undefined`.
 */
export function toolProblem(value: unknown, field: string): { message: string; fields: string[] } | undefined {
  const { name, description, inputSchema } = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>
  const stored = storageProblemAt({ name, description, inputSchema }, 1, field)
  if (stored !== undefined) return { message: stored, fields: [field] }
  const parsed = tool.safeParse(value)
  if (parsed.success) return undefined
  const fields = issueFields(parsed.error).map((at) => (at === '(root)' ? field : `${field}.${at}`))
  return { message: parsed.error.issues.map((issue) => `${[field, ...issue.path.map(String)].join('.')}: ${issue.message}`).join('; '), fields }
}

/**
 * What a run reads of `tool` as it runs the tool's calls, its `timeoutMs` and its `retry` policy's
 * members, each read once into a copy, and the copy checked: a getter (or a proxy) that gave the run
 * input's check one value cannot give the run another (`retries` read as `NaN` later would retry a
 * call without end). `RUN_INVALID_INPUT` naming the member under `field` (`tools.<index>`).
 */
export function toolCallLimits(tool: ToolDefinition, field: string): { timeoutMs: number | undefined; retry: ToolRetry | undefined } {
  const timeoutMs: unknown = tool.timeoutMs
  const given: unknown = tool.retry
  let retry: unknown = given
  if (given !== null && typeof given === 'object') {
    const { retries, backoffMs, maxBackoffMs, retryOn } = given as Record<string, unknown>
    retry = {
      retries,
      ...(backoffMs === undefined ? {} : { backoffMs }),
      ...(maxBackoffMs === undefined ? {} : { maxBackoffMs }),
      ...(retryOn === undefined ? {} : { retryOn }),
    }
  }
  const parsed = callLimits.safeParse({ timeoutMs, retry })
  if (!parsed.success) {
    throw new FactstateError('RUN_INVALID_INPUT', parsed.error.issues.map((issue) => `${[field, ...issue.path.map(String)].join('.')}: ${issue.message}`).join('; '), {
      details: { fields: issueFields(parsed.error).map((at) => `${field}.${at}`) },
    })
  }
  return { timeoutMs: timeoutMs as number | undefined, retry: retry === undefined ? undefined : Object.freeze(retry as ToolRetry) }
}
