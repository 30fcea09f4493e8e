/**
 * A tool's retry policy (`ToolDefinition.retry`): its limits, its defaults (those of the model
 * request's retries, `ModelExecutorOptions`) and the waits between attempts.
 */
import type { ToolRetry } from './tool-catalog.js'

/** The most retries a tool may ask for: eleven attempts of one call, each up to its `timeoutMs`, already hold a run for long. */
export const MAX_TOOL_RETRIES = 10
/** The defaults of `backoffMs` and `maxBackoffMs`, as the model executor's. */
export const DEFAULT_TOOL_BACKOFF_MS = 250
export const DEFAULT_TOOL_MAX_BACKOFF_MS = 10_000
/** The longest delay `setTimeout` honours, and so the longest wait. */
export const MAX_TOOL_BACKOFF_MS = 2_147_483_647

/** A tool's retry policy with its defaults filled in; `retries` 0 (no retry) when the tool has none. */
export interface RetryPolicy {
  retries: number
  backoffMs: number
  maxBackoffMs: number
  retryOn: ((error: unknown, attempt: number) => boolean) | undefined
}

const NO_RETRY: RetryPolicy = Object.freeze({ retries: 0, backoffMs: DEFAULT_TOOL_BACKOFF_MS, maxBackoffMs: DEFAULT_TOOL_MAX_BACKOFF_MS, retryOn: undefined })

/** The policy of an admitted (checked) `retry`: read once, so a caller that changes its object later changes no run. */
export function retryPolicyOf(retry: ToolRetry | undefined): RetryPolicy {
  if (retry === undefined) return NO_RETRY
  return Object.freeze({
    retries: retry.retries,
    backoffMs: retry.backoffMs ?? DEFAULT_TOOL_BACKOFF_MS,
    maxBackoffMs: retry.maxBackoffMs ?? DEFAULT_TOOL_MAX_BACKOFF_MS,
    retryOn: retry.retryOn,
  })
}

/** The wait after attempt `attempt` (1-based) failed: `backoffMs` doubled for each retry before it, at most `maxBackoffMs`. */
export function retryBackoff(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.backoffMs * 2 ** (attempt - 1), policy.maxBackoffMs)
}

/**
 * Whether `policy.retryOn` asks for a retry of attempt `attempt`, which threw `error`: only `true`
 * does. A throw does not, and is returned (`threw`) so that the call's failure can say so: a bug in
 * retryOn would otherwise look like a decision not to retry. Nor does a promise (an `async` retryOn):
 * the decision is made at once, and the promise is given a handler, so that its rejection cannot end
 * the process as unhandled.
 */
export function retryWanted(policy: RetryPolicy, error: unknown, attempt: number): { wanted: boolean; threw?: { error: unknown } } {
  if (policy.retryOn === undefined) return { wanted: true }
  try {
    const wanted: unknown = policy.retryOn(error, attempt)
    if (wanted !== null && (typeof wanted === 'object' || typeof wanted === 'function') && typeof (wanted as { then?: unknown }).then === 'function') {
      Promise.resolve(wanted).catch(() => undefined)
    }
    return { wanted: wanted === true }
  } catch (thrown) {
    return { wanted: false, threw: { error: thrown } }
  }
}
