/**
 * The vocabulary of factstate: invocations, facts, and the handoff records that travel inside
 * them. Everything here is plain data: it survives encode → decode → replay unchanged.
 */

/**
 * A JSON value: what JSON.parse can give back (a finite number, no undefined, Date, Map or class
 * instance). Read-only, so a list or object written `as const` fits; a mutable one fits too.
 */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | JsonObject

/**
 * A JSON object, as `providerOptions` must be: its members JSON values (none `undefined`; leave a
 * member out instead).
 *
 * @example
 * ```ts
 * const providerOptions: JsonObject = { temperature: 0, stop: ['\n\n'], response_format: { type: 'json_object' } }
 * ```
 */
export interface JsonObject {
  readonly [key: string]: JsonValue
}

/** Identifies one invocation: Session ⊃ Turn ⊃ Run ⊃ Invocation (one invocation per run). */
export interface Invocation {
  /** The conversation the run belongs to; one run of a session is active at a time. An id: 1–128 characters from `[A-Za-z0-9._:-]`. */
  sessionId: string
  /** The logical turn: a handoff's successor runs in the same turn, a continuation starts a new one. An id, as `sessionId`. */
  turnId: string
  /** The physical run, unique within its session and never reused. An id, as `sessionId`. */
  runId: string
  /** The run's one invocation, unique in the whole log and never reused. An id, as `sessionId`. */
  invocationId: string
}

/** Where a run stands in the log: its invocation, the seq of its last fact and its lineage digest. */
export interface RunBoundary {
  /** The run's invocation. */
  invocation: Invocation
  /** The seq of the run's last fact (a log seq, gapless from 1). */
  highWater: number
  /** The rolling digest over the run's lineage only (appends elsewhere in the log never change it), as `sha256:<hex>`. */
  digest: string
}

/** What a handoff reserves: who may succeed the held run, under which claim. */
export interface HandoffIntent {
  /** Names this hold in its `hold.entered` and `hold.released` facts. An id: 1–128 characters from `[A-Za-z0-9._:-]`. */
  handoffId: string
  /** Who took the hold (a host and its boot, say): recorded in the seal, not interpreted. An id, as `handoffId`. */
  hostEpoch: string
  /** The first run of this turn's chain of runs: recorded in the seal, not interpreted. An id, as `handoffId`. */
  rootRunId: string
  /**
   * The run id the successor must run as, in the held run's session; reserved by the seal. Not the
   * held run's own id. An id, as `handoffId`.
   */
  successorRunId: string
  /** The successor's invocation id, reserved by the seal in the whole log. Not the held run's own. An id, as `handoffId`. */
  successorInvocationId: string
  /** Admits one successor, once, in the whole log: a second use is `HANDOFF_CLAIMED`. Reserved by the seal. An id, as `handoffId`. */
  claimId: string
}

/** The tool catalog as the model sees it: digests over names, descriptions and input schemas, the whole catalog's and each tool's. */
export interface ToolCatalogSummary {
  /** `sha256:<hex>` over each tool's name, description and input schema, in catalog order (not its code, `readOnly`, `needsApproval` or `validateInput`). */
  catalogDigest: string
  /** The tools' names, in the order the model is shown them. */
  names: string[]
  /**
   * Each tool's own `sha256:<hex>` over its name, description and input schema (the text the catalog
   * digest covers of it), in `names` order: what lets a refused successor be told which tool changed.
   * Sealed and compared with the rest. Absent in settings recorded by a release before 2026-12-06,
   * whose seals are compared by `catalogDigest` and `names` alone.
   */
  digests?: string[] | undefined
}

/** The execution settings a successor must match exactly. No secrets. */
export interface ExecutionSettings {
  /** The provider's model name (`provider.model`), sent as the request's `model`. Sealed. */
  model: string
  /** The run's `providerOptions`, merged into every request body (`{}` when none were given). Sealed, compared as JSON whatever the keys' order. */
  providerOptions: JsonObject
  /** The run's `mainOutputLimit`, sent as `max_tokens`; absent when none was given. Sealed. */
  mainOutputLimit?: number | undefined
  /** `configuration.cwd`: an absolute path, compared exactly (`/srv/` is not `/srv`). Sealed. */
  cwd: string
  /** The tool catalog's digest, names and each tool's digest. Sealed by its digests (the catalog's and, when recorded, each tool's). */
  tools: ToolCatalogSummary
  /** The run's system prompt, when it has one: sent first in every request, as a system message. Sealed. */
  instructions?: string | undefined
  /** Present exactly when the paused run was a continuation: the boundary it continued from. */
  replayBase?: RunBoundary | undefined
}

/** What a committed hold seals: the intent, the steps left, the settings to match. */
export interface HandoffPause {
  /** The intent the hold was reserved with. */
  intent: HandoffIntent
  /** The model steps the successor gets (its own `maxSteps` is checked but not used); a step whose request was being retried counts as left. */
  remainingSteps: number
  /** The settings the successor must match exactly (`HANDOFF_MISMATCH` names the first that differs). */
  execution: ExecutionSettings
}

/** The invocation's configuration as recorded (never secrets). */
export interface InvocationConfiguration {
  /** The run's working directory, an absolute path. Also in the execution settings, where a seal compares it. */
  cwd: string
  /** Your name for the workspace, 1–256 characters: recorded, not compared by a seal. */
  workspaceIdentity?: string | undefined
}

/** What started an invocation. */
export type InvocationInput =
  | {
      kind: 'message'
      /** The user's message. */
      content: string
      /** The run input's `requestFingerprint`, 1–256 characters of your own, when it had one. */
      requestFingerprint?: string | undefined
      /** Operations of earlier runs in this session whose outcome is unknown, acknowledged by `allowPriorUnknown`. */
      priorUnknown?: UncertainOperation[] | undefined
      /** The tool call that started this run, when an agent's tool started it as a child run (the run input's `parent`). */
      parent?: ParentCall | undefined
    }
  | {
      kind: 'continuation'
      /** The boundary of the ended run it continues. */
      source: RunBoundary
      /** The user's next message, after the replayed lineage (a continuation without one finishes what its source left). */
      content?: string | undefined
      /** The run input's `requestFingerprint`, when it had one. */
      requestFingerprint?: string | undefined
      /** Operations of earlier runs in this session whose outcome is unknown, acknowledged by `allowPriorUnknown`. */
      priorUnknown?: UncertainOperation[] | undefined
      /** The tool call that started this run, when an agent's tool started it as a child run (the run input's `parent`). */
      parent?: ParentCall | undefined
    }
  | {
      kind: 'handoff'
      /** The sealed run's boundary. */
      source: RunBoundary
      /** The pause it was sealed with. */
      pause: HandoffPause
      /**
       * What the run input's `work.content` told the successor (what happened while the turn was paused:
       * a reviewer's decision), after the replayed sealed transcript; absent in successors given none and
       * in those recorded before it was.
       */
      content?: string | undefined
      /** The run input's `requestFingerprint`, when it had one; absent in successors recorded before it was. */
      requestFingerprint?: string | undefined
    }

/**
 * The tool call of another run that started a run: an agent that calls an agent (see `childRunFor`).
 * Recorded in the child's `invocation.opened` (`input.parent`), so the log links each child run to
 * the call that started it.
 */
export interface ParentCall {
  /** The calling run's invocation (the tool's `context.invocation`). */
  invocation: Invocation
  /** The call's operation id (the tool's `context.operationId`), one of that invocation's: `<invocationId>/<stepId>/<index>`. */
  operationId: string
}

/** An operation whose effect may or may not have happened. */
export interface UncertainOperation {
  /** The invocation that dispatched it. */
  invocationId: string
  /** Its operation id (`<invocationId>/<stepId>/<index>`), the one its tool was given: check the effect by it. */
  operationId: string
  /** The model's id for the call. */
  callId: string
  /** The tool's name. */
  name: string
  /**
   * The input it was dispatched with, as recorded: in a run's `priorUnknown` and in the details of
   * `RUN_RECONCILIATION_REQUIRED` (absent where a fact could not hold it there, and in logs written
   * before it was recorded). The session's own index keeps the operation without it.
   */
  input?: unknown
}

/** A tool call as the model asked for it. `arguments` is the raw JSON text the model sent. */
export interface ToolCall {
  /** The model's id for the call; a tool message answers it by this id. */
  callId: string
  /** The tool's name, as the model wrote it (it may name no tool of the catalog: `tool.rejected{unknown_tool}`). */
  name: string
  /** The arguments as the raw JSON text the model sent (redacted of the provider's secrets), not parsed. */
  arguments: string
  /**
   * Opaque state the provider returned with the call and requires back with it (Gemini's
   * `extra_content: { google: { thought_signature } }` on its OpenAI-compatible endpoint): recorded as
   * given (redacted of the provider's secrets) and sent back as the call's `extra_content` in every
   * later request. A plain JSON object with a member, at most 256 KiB of JSON text and 32 levels deep
   * (else dropped, not the answer); absent when the provider returned none, and in answers recorded before it was.
   */
  extraContent?: JsonObject | undefined
}

/** Token usage as reported by the provider. */
export interface ModelUsage {
  /** Prompt tokens, when the provider reported a non-negative integer. */
  inputTokens?: number | undefined
  /** Completion tokens, when the provider reported a non-negative integer. */
  outputTokens?: number | undefined
  /**
   * Of the prompt tokens, those the provider served from its prompt cache (billed cheaper): OpenAI's
   * `prompt_tokens_details.cached_tokens`, else DeepSeek's `prompt_cache_hit_tokens`, when a
   * non-negative integer. Absent in answers recorded before it was.
   */
  cachedInputTokens?: number | undefined
  /**
   * Of the completion tokens, those spent on reasoning: `completion_tokens_details.reasoning_tokens`,
   * when a non-negative integer. Absent in answers recorded before it was.
   */
  reasoningTokens?: number | undefined
}

/** What the model answered for one step. */
export interface ModelOutput {
  /** The answer's text (a refusal's text included), well-formed and redacted of the provider's secrets; absent (or empty) when there was none. */
  text?: string | undefined
  /** The calls the model asked for, in its order; empty for a final answer. */
  toolCalls: ToolCall[]
  /** The provider's finish reason (`stop`, `tool_calls`, `length`, `content_filter`, …). */
  finishReason: string
  /** Token counts, when the provider reported them. */
  usage?: ModelUsage | undefined
  /**
   * The reasoning the provider returned beside the answer as `reasoning_content` (DeepSeek's
   * thinking mode, vLLM's and SGLang's reasoning parsers) or `reasoning` (OpenRouter), redacted as the text is; absent when it
   * returned none. Sent back with an answer that made tool calls, as such providers require.
   */
  reasoning?: string | undefined
  /**
   * The provider's id for the answer (OpenAI's `chatcmpl-…`, what its dashboard and support name), to
   * match the fact with the provider's records: a non-empty string of at most 256 characters,
   * redacted as a failure message is (encoded and masked forms too: it is never sent back; one
   * that no longer fits is dropped); absent when the provider gave none (or another), and in answers
   * recorded before it was. Never sent back to the model.
   */
  responseId?: string | undefined
  /**
   * The provider's id for the HTTP exchange that brought the answer: its `x-request-id` response
   * header (OpenAI's `req_…`, what its support asks for), kept as `responseId` is (1–256 characters,
   * redacted as a failure message is, else dropped); absent when the provider sent none, and in
   * answers recorded before it was. Never sent back to the model.
   */
  requestId?: string | undefined
  /**
   * Opaque reasoning state the provider returned with the answer and requires back with it
   * (OpenRouter's `reasoning_details`: `reasoning.text` entries with their `signature`,
   * `reasoning.encrypted`, `reasoning.summary`; a custom client's signed thinking blocks): entries
   * recorded as given (redacted of the provider's secrets) and sent back as the assistant message's
   * `reasoning_details` in every later request. 1–256 plain JSON objects, at most 1 MiB of JSON text
   * together and 32 levels deep each (else the whole member is dropped, not the answer); absent when
   * the provider returned none, and in answers recorded before it was.
   */
  reasoningDetails?: JsonObject[] | undefined
}

/**
 * Why a model attempt ended without an answer: `retryable_failure` (429, 5xx, a connection failure,
 * retried next with the same body), `failed` (retries exhausted included), `timed_out` or `cancelled`.
 */
export type ModelInterruptStatus = 'cancelled' | 'timed_out' | 'failed' | 'retryable_failure'

/**
 * What the provider said of a request it refused, as it said it: to tell a refusal that every
 * later request would meet too (OpenAI's `code: 'context_length_exceeded'`) from a bad key or a
 * wrong model without matching the message's words. Each member present only when the provider
 * gave it in a form a fact can hold; an object without any is not recorded.
 */
export interface ProviderRefusal {
  /** The HTTP status of the provider's error answer (100–599); absent for an error it reported inside an answer it had started as a success (HTTP 200). */
  status?: number | undefined
  /**
   * The error's `code` (OpenAI: `context_length_exceeded`, `invalid_api_key`, `model_not_found`,
   * `insufficient_quota`): a string of 1–128 characters, a whole number as its decimal digits;
   * redacted of the provider's secrets as the message is.
   */
  code?: string | undefined
  /** The error's `type` (OpenAI: `invalid_request_error`), as `code` is kept (a string only). */
  type?: string | undefined
  /** The error's `param`, the request member it names (OpenAI: `messages`), as `type` is kept. */
  param?: string | undefined
  /**
   * The provider's id for the refused request: the `x-request-id` header of its answer (OpenAI's
   * `req_…`, what its support asks for), with an error answer (4xx, 5xx) or one that went wrong after
   * it began; a string of 1–256 characters, redacted as the message is, else dropped. Absent when no
   * answer came (a connection refused, a timeout before the headers) or it sent none.
   */
  requestId?: string | undefined
}

/**
 * How a dispatched tool call settled: `succeeded` with its result as JSON makes it, or `failed` with
 * the tool's error message (also for a result that could not be recorded). `unknown` is part of the
 * vocabulary but factstate never writes it: a call whose outcome is unknown has no `tool.settled`.
 */
export type ToolOutcome =
  | {
      status: 'succeeded'
      /** What `execute` returned, as JSON makes it (redacted of the provider's secrets). */
      output: unknown
    }
  | {
      status: 'failed'
      /** The tool's error message, or why its result could not be recorded; cut at the engine's `maxToolResultBytes`. */
      message: string
    }
  | { status: 'unknown'; message: string }

/** `denied`: the call's tool needs approval, and the approver said no (see `ToolDefinition.needsApproval`). */
export type ToolRejectReason = 'unknown_tool' | 'invalid_input' | 'cancelled' | 'denied'

/** An approver's decision as a fact records it: who decided (when the approver said), and why, for a denial. */
export interface ApprovalRecord {
  /** Who decided, when the approver said. */
  by?: string | undefined
  /** Why the call was denied, when the approver said (the model is told it). */
  reason?: string | undefined
}

/**
 * Why a failed invocation failed. The engine and recovery write only the named classes, but the type
 * is open (any other string fits) because a log may hold others, and this is also the type of what is
 * read: an `invocation.ended` fact takes any non-empty class (an application's own `log.append` may
 * record a class of its own, and a later release may add one, which this release still reads). So a
 * misspelt class compiles, and a `switch (outcome.class)` needs a `default` for the classes it does
 * not name; compare with the names listed here.
 */
export type FailureClass =
  | 'host_interrupted'
  | 'outcome_unknown'
  | 'model_failed'
  | 'model_timeout'
  | 'model_malformed'
  | 'model_filtered'
  | 'model_truncated'
  | 'max_steps'
  | 'engine_error'
  | (string & {})

/** How an invocation ended, as its `invocation.ended` fact records it and `wait()` resolves. */
export type InvocationOutcome =
  | { status: 'completed' }
  | {
      status: 'handoff_paused'
      /** The sealed pause: what the successor passes as `work.pause`. */
      pause: HandoffPause
    }
  | {
      status: 'failed'
      /** Why it failed (`max_steps`, `model_failed`, `outcome_unknown`, …). */
      class: FailureClass
      /** What went wrong, in words (the provider's reason, the tools left uncertain), when known. */
      message?: string | undefined
      /**
       * With class `model_failed`: what the provider said of the last attempt's refusal (its
       * `model.interrupted` fact's `provider`), when it said any of it. Branch on it, not on the
       * message's words: `outcome.provider?.code === 'context_length_exceeded'`. Absent in outcomes
       * recorded before it was.
       */
      provider?: ProviderRefusal | undefined
    }
  | {
      status: 'cancelled'
      /** The abort reason when it was a non-empty string, `'timeout'` for a `TimeoutError` (`AbortSignal.timeout`), else `'signal'`. */
      source: string
    }

/**
 * One durable record of something that happened. A discriminated union on `type`; the facts
 * are also the invocation machine's events.
 */
export type Fact =
  | { type: 'invocation.opened'; input: InvocationInput; configuration: InvocationConfiguration; execution: ExecutionSettings }
  | {
      type: 'model.requested'
      /** The step (`step-1`, `step-2`, …); each attempt of a step, a retry included, records its own `model.requested`. */
      stepId: string
      /** The model name sent. */
      model: string
      /** `sha256:<hex>` of the exact request body sent (`ModelRequest.bodyText`). */
      requestDigest: string
    }
  | { type: 'model.completed'; stepId: string; output: ModelOutput }
  | {
      type: 'model.interrupted'
      stepId: string
      status: ModelInterruptStatus
      /** What went wrong, in words (redacted of the provider's secrets). */
      message?: string | undefined
      /**
       * What the provider said of the refusal (its HTTP status, the error's code, type and param),
       * when it said any of it; absent in facts recorded before it was.
       */
      provider?: ProviderRefusal | undefined
    }
  | {
      type: 'tool.dispatched'
      /** `<invocationId>/<stepId>/<index>`: the id the tool is given, stable across crashes (an idempotency key). */
      operationId: string
      /** The model's id for the call. */
      callId: string
      /** The tool's name. */
      name: string
      /** The call's arguments, parsed, as the tool gets them. */
      input: unknown
      /** The tool was declared read-only (`ToolDefinition.readOnly`): an unknown outcome of it needs no reconciliation. */
      readOnly?: true | undefined
      /** The tool needs approval, and this call was approved before it was dispatched. */
      approval?: ApprovalRecord | undefined
    }
  | { type: 'tool.settled'; operationId: string; outcome: ToolOutcome }
  | {
      type: 'tool.rejected'
      operationId: string
      callId: string
      name: string
      /** The call's arguments, parsed; the raw text the model sent when they could not be parsed or stored. */
      input: unknown
      reason: ToolRejectReason
      /** The approver's decision: present exactly when `reason` is `denied` (an append refuses anything else, `LOG_INVALID_EVENT`). */
      approval?: ApprovalRecord | undefined
      /**
       * Only with `invalid_input`: what is wrong with the input, when it does not match the tool's
       * `inputSchema`; or, for arguments kept as the text the model sent, why they could not be taken
       * (`the arguments are not valid JSON (at position 16: …)`; none in facts 0.6.0 and earlier wrote).
       */
      message?: string | undefined
    }
  | {
      type: 'hold.entered'
      /** The intent's `handoffId`. */
      handoffId: string
    }
  | {
      type: 'hold.released'
      /** The intent's `handoffId`. */
      handoffId: string
    }
  | { type: 'invocation.ended'; outcome: InvocationOutcome }

/** The type of a fact (`'invocation.opened'`, `'tool.settled'`, …): its `type` member, one of {@link FACT_TYPES}. */
export type FactType = Fact['type']

/** The fact of a given type. */
export type FactOf<T extends FactType> = Extract<Fact, { type: T }>

/** Every fact type, in the order an invocation usually meets them. */
export const FACT_TYPES: readonly FactType[] = [
  'invocation.opened',
  'model.requested',
  'model.completed',
  'model.interrupted',
  'tool.dispatched',
  'tool.settled',
  'tool.rejected',
  'hold.entered',
  'hold.released',
  'invocation.ended',
]

/** A fact with its identity and its place in time. Written once, never rewritten. */
export interface RuntimeEvent {
  /** The event's id, unique in the log (the engine's default: `<invocationId>/<ordinal>`). Appending the same event again writes nothing; other bytes under its id are `LOG_CONFLICT`. */
  id: string
  /** When it was recorded, in milliseconds since the Unix epoch (the `now` clock of the engine, or of recovery for the facts it writes). */
  recordedAt: number
  /** The invocation it belongs to. */
  invocation: Invocation
  /** What happened. */
  fact: Fact
}

/** An event as stored: `seq` is gapless from 1 and is the only order. */
export interface StoredEvent {
  /** Its place in the log, from 1. */
  seq: number
  /** The event as stored. */
  event: RuntimeEvent
}

/** How an invocation ended, as the log reports it. `handoff_paused` reads as `paused`. */
export type TerminalStatus = 'completed' | 'failed' | 'cancelled' | 'paused'

/** The terminal status an outcome maps to. */
export function terminalStatusOf(outcome: InvocationOutcome): TerminalStatus {
  switch (outcome.status) {
    case 'completed':
      return 'completed'
    case 'handoff_paused':
      return 'paused'
    case 'failed':
      return 'failed'
    case 'cancelled':
      return 'cancelled'
    default: {
      const never: never = outcome
      throw new TypeError(`unknown outcome ${JSON.stringify(never)}`)
    }
  }
}
