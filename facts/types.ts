/**
 * The vocabulary of factstate: invocations, facts, and the handoff records that travel inside
 * them. Everything here is plain data: it survives encode → decode → replay unchanged.
 */

/** Identifies one invocation: Session ⊃ Turn ⊃ Run ⊃ Invocation (one invocation per run). */
export interface Invocation {
  sessionId: string
  turnId: string
  runId: string
  invocationId: string
}

/** Where a run stands in the log: its invocation, the seq of its last fact and its lineage digest. */
export interface RunBoundary {
  invocation: Invocation
  highWater: number
  digest: string
}

/** What a handoff reserves: who may succeed the held run, under which claim. */
export interface HandoffIntent {
  handoffId: string
  hostEpoch: string
  rootRunId: string
  successorRunId: string
  successorInvocationId: string
  claimId: string
}

/** The tool catalog as the model sees it: digest over names, descriptions and input schemas. */
export interface ToolCatalogSummary {
  catalogDigest: string
  names: string[]
}

/** The execution settings a successor must match exactly. No secrets. */
export interface ExecutionSettings {
  model: string
  providerOptions: Record<string, unknown>
  mainOutputLimit?: number
  cwd: string
  tools: ToolCatalogSummary
  /** The run's system prompt, when it has one: sent first in every request, as a system message. */
  instructions?: string
  /** Present exactly when the paused run was a continuation: the boundary it continued from. */
  replayBase?: RunBoundary
}

/** What a committed hold seals: the intent, the steps left, the settings to match. */
export interface HandoffPause {
  intent: HandoffIntent
  remainingSteps: number
  execution: ExecutionSettings
}

/** The invocation's configuration as recorded (never secrets). */
export interface InvocationConfiguration {
  cwd: string
  workspaceIdentity?: string
}

/** What started an invocation. */
export type InvocationInput =
  | {
      kind: 'message'
      content: string
      requestFingerprint?: string
      /** Operations of earlier runs in this session whose outcome is unknown, acknowledged by `allowPriorUnknown`. */
      priorUnknown?: UncertainOperation[]
    }
  | {
      kind: 'continuation'
      source: RunBoundary
      /** The user's next message, after the replayed lineage (a continuation without one finishes what its source left). */
      content?: string
      requestFingerprint?: string
      priorUnknown?: UncertainOperation[]
    }
  | { kind: 'handoff'; source: RunBoundary; pause: HandoffPause }

/** An operation whose effect may or may not have happened. */
export interface UncertainOperation {
  invocationId: string
  operationId: string
  callId: string
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
  callId: string
  name: string
  arguments: string
}

/** Token usage as reported by the provider. */
export interface ModelUsage {
  inputTokens?: number | undefined
  outputTokens?: number | undefined
}

/** What the model answered for one step. */
export interface ModelOutput {
  text?: string | undefined
  toolCalls: ToolCall[]
  finishReason: string
  usage?: ModelUsage | undefined
}

export type ModelInterruptStatus = 'cancelled' | 'timed_out' | 'failed' | 'retryable_failure'

export type ToolOutcome =
  | { status: 'succeeded'; output: unknown }
  | { status: 'failed'; message: string }
  | { status: 'unknown'; message: string }

/** `denied`: the call's tool needs approval, and the approver said no (see `ToolDefinition.needsApproval`). */
export type ToolRejectReason = 'unknown_tool' | 'invalid_input' | 'cancelled' | 'denied'

/** An approver's decision as a fact records it: who decided (when the approver said), and why, for a denial. */
export interface ApprovalRecord {
  by?: string | undefined
  reason?: string | undefined
}

/** Why a failed invocation failed. */
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

export type InvocationOutcome =
  | { status: 'completed' }
  | { status: 'handoff_paused'; pause: HandoffPause }
  | { status: 'failed'; class: FailureClass; message?: string }
  | { status: 'cancelled'; source: string }

/**
 * One durable record of something that happened. A discriminated union on `type`; the facts
 * are also the invocation machine's events.
 */
export type Fact =
  | { type: 'invocation.opened'; input: InvocationInput; configuration: InvocationConfiguration; execution: ExecutionSettings }
  | { type: 'model.requested'; stepId: string; model: string; requestDigest: string }
  | { type: 'model.completed'; stepId: string; output: ModelOutput }
  | { type: 'model.interrupted'; stepId: string; status: ModelInterruptStatus; message?: string }
  | {
      type: 'tool.dispatched'
      operationId: string
      callId: string
      name: string
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
      input: unknown
      reason: ToolRejectReason
      /** The approver's decision: present exactly when `reason` is `denied` (an append refuses anything else, `LOG_INVALID_EVENT`). */
      approval?: ApprovalRecord | undefined
      /** What is wrong with the input, when it does not match the tool's `inputSchema` (only with `invalid_input`). */
      message?: string | undefined
    }
  | { type: 'hold.entered'; handoffId: string }
  | { type: 'hold.released'; handoffId: string }
  | { type: 'invocation.ended'; outcome: InvocationOutcome }

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
  id: string
  recordedAt: number
  invocation: Invocation
  fact: Fact
}

/** An event as stored: `seq` is gapless from 1 and is the only order. */
export interface StoredEvent {
  seq: number
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
