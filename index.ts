/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), so that a
// consumer whose tsconfig names no `types` still gets Node's AbortSignal and Headers there, not `any`.
/**
 * factstate: durable LLM-agent invocations as XState actors over an embedded LevelDB fact log.
 * See README.md for the concepts and the guarantees.
 */
export { FactstateError, isFactstateError, type FactstateErrorCode, type FactstateErrorDetails, type FactstateErrorOf, type FactstateErrorConstructor, type FactstateErrorOptions, type LogIoReason } from './errors.js'
export * from './facts/types.js'
export { EventLog, type EventLogOptions, type SnapshotOptions, type Durability, type LogPrefix, type PendingOptions, type PendingSession, type RunSource, type RunSummary, type ChildRunSummary, type SettledEffect, type UnansweredRun } from './store/event-log.js'
export type { SessionListing, SessionsOptions } from './store/session-listing.js'
export type { InvocationProjection } from './store/projection.js'
export type { BackupPoint } from './store/backup-point.js'
export { recoverInvocations, type RecoverOptions, type RecoveredInvocation } from './store/recovery.js'
export {
  invocationMachine,
  foldFacts,
  applyFact,
  accepts,
  initialInvocationSnapshot,
  stateOf,
  type InvocationContext,
  type InvocationSnapshot,
  type InvocationState,
} from './machines/invocation.js'
export { Engine, type EngineOptions, type EngineCloseOptions, type DrainOptions, type StartOptions, type RunningInvocation } from './actors/engine.js'
export { sessionFeed, toServerSentEvent, type SessionFeedMessage, type SessionFeedOptions, type SessionFeedResetReason } from './actors/session-feed.js'
export { ModelExecutor, type ModelExecutorOptions } from './actors/model-executor.js'
export type { LiveModelText, LiveModelToolCall, LiveModelToolCalls, ModelTextPiece, ModelToolCallPiece } from './actors/model-text.js'
export type { ToolProgressUpdate } from './actors/tool-progress.js'
export { OpenAIChatClient, retryAfterMsOf } from './actors/openai-chat-client.js'
export type { ModelClient, ModelRequest, ModelRequestOrigin, ModelResponse, ProviderConfig, ChatMessage, ChatRequestBody, ToolCallPiece } from './actors/model-client.js'
export { intentFor, successorOf, type HandoffGate, type HandoffReservation, type HeldInvocation, type IntentOptions, type ReserveOptions } from './actors/handoff.js'
export { childRunFor, childRunOf, type ChildRun } from './actors/child-run.js'
export type { RunInput, RunSettings, RunWork } from './actors/run-input.js'
export { defineTool, type TypedToolDefinition } from './actors/define-tool.js'
export { checkedCatalogOf as catalogOf, type ToolDefinition, type ToolContext, type ToolRetry } from './actors/tool-catalog.js'
export { OutcomeUnknownError } from './actors/outcome-unknown.js'
export type { ApprovalDecision, ApprovalRequest, Approver, NeedsApproval } from './actors/approval.js'
export { answerOf, transcriptOf, usageOf, type UsageTotals } from './actors/transcript.js'
