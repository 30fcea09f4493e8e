/**
 * Approval of single tool calls: a tool that `needsApproval` is not dispatched until the run's
 * approver (`StartOptions.onApproval`) says yes. The decision is part of the facts (`approval` on
 * the call's `tool.dispatched`, or a `tool.rejected{denied}`); the wait for it is not: a crash
 * while the approver thinks leaves the call never dispatched, and so never run.
 */
import { messageOf, wellFormed } from '../store/encoding.js'
import type { ApprovalRecord, Invocation } from '../facts/types.js'
import { type Secrets, redact } from './redaction.js'

/** What the approver is asked: one call of a tool that needs approval, not dispatched yet. */
export interface ApprovalRequest {
  /** The invocation whose model made the call. */
  invocationId: string
  /**
   * The run the call belongs to (`sessionId`, `turnId`, `runId`, `invocationId`; the approver's own
   * copy): whose conversation it is, to route the request to the person who decides.
   */
  invocation: Invocation
  /** The model step whose answer made the call. */
  stepId: string
  /** The model's id for the call. */
  callId: string
  /** The operation id the call is dispatched under once approved (the tool's idempotency key). */
  operationId: string
  /** The tool's name. */
  name: string
  /** The call's arguments, parsed (the approver's own copy). */
  input: unknown
  /** Aborts when the run is cancelled, its log closes or a call beside this one fails: the call is then not run, whatever the approver says. */
  signal: AbortSignal
}

/**
 * The approver's answer. `by` names who decided (recorded); `reason` says why a call was denied
 * (recorded, and the model is told).
 */
export type ApprovalDecision =
  | {
      /** Dispatch the call. */
      approved: true
      /** Who decided: recorded in `tool.dispatched{approval}` (cut to 2,000 characters, without the provider's key). */
      by?: string | undefined
    }
  | {
      /** Do not run the call: it is `tool.rejected{denied}`. */
      approved: false
      /** Who decided: recorded (cut to 2,000 characters, without the provider's key). */
      by?: string | undefined
      /** Why: recorded, and the model is told it (cut to 2,000 characters, without the provider's key). */
      reason?: string | undefined
    }

/** Decides on one call; may take as long as it needs (the run waits, at no safe point). */
export type Approver = (request: ApprovalRequest) => ApprovalDecision | Promise<ApprovalDecision>

/** How `needsApproval` may be given: always, never, or by the call's input. */
export type NeedsApproval = boolean | ((input: unknown) => boolean | Promise<boolean>)

/** Whether a call of a tool with `needsApproval` needs it; a predicate that throws asks, to be safe. */
export async function needsApprovalFor(needsApproval: NeedsApproval | undefined, input: unknown): Promise<boolean> {
  if (needsApproval === undefined || needsApproval === false) return false
  if (needsApproval === true) return true
  try {
    return (await needsApproval(structuredClone(input))) !== false
  } catch {
    return true
  }
}

/** The longest `by` or `reason` recorded (a fact holds it; the model is told the reason). */
const APPROVAL_TEXT = 2_000

/**
 * What an approver said, as a fact records it: without the provider's secrets (taken out before the
 * text is cut, which could leave part of one), bounded, well-formed (a cut can split a surrogate pair).
 */
function recorded(text: unknown, secrets: Secrets): string | undefined {
  if (typeof text !== 'string' || text.length === 0) return undefined
  const redacted = redact(wellFormed(text), secrets)
  return wellFormed(redacted.length > APPROVAL_TEXT ? `${redacted.slice(0, APPROVAL_TEXT)}…` : redacted)
}

/**
 * What the approver decided, read once: `approved` must be a boolean, anything else (or an
 * approver that throws) denies the call, saying why. Never throws.
 */
export async function decide(approver: Approver, request: ApprovalRequest, secrets: Secrets): Promise<{ approved: boolean; record: ApprovalRecord }> {
  let answer: unknown
  try {
    answer = await approver(request)
  } catch (error) {
    return { approved: false, record: { reason: recorded(`the approver failed: ${messageOf(error)}`, secrets) } }
  }
  let approved: unknown
  let by: unknown
  let reason: unknown
  try {
    ;({ approved, by, reason } = (answer ?? {}) as { approved?: unknown; by?: unknown; reason?: unknown })
  } catch (error) {
    return { approved: false, record: { reason: recorded(`the approver's answer cannot be read: ${messageOf(error)}`, secrets) } }
  }
  if (typeof approved !== 'boolean') {
    return { approved: false, record: { reason: 'the approver did not answer with a decision ({ approved: boolean })' } }
  }
  const record: ApprovalRecord = {}
  const who = recorded(by, secrets)
  if (who !== undefined) record.by = who
  const why = approved ? undefined : recorded(reason, secrets)
  if (why !== undefined) record.reason = why
  return { approved, record }
}
