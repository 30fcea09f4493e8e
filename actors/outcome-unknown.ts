/**
 * What a tool throws when it knows it cannot tell whether its effect happened: the request went out
 * and no answer came back (a connection closed after the request was sent, a server that died
 * mid-call, a client's own timeout). Any other throw is recorded as the call's failure, and a model
 * told that a call failed makes it again, under a new operation id: a second transfer.
 */

/**
 * The mark an {@link OutcomeUnknownError} carries, under a registered symbol: an error made by another
 * copy of the library (two versions installed side by side, a bundle) is recognised too.
 */
const MARK = Symbol.for('factstate.OutcomeUnknownError')

/** Its name, which a failure's text starts with (`failureText`). */
export const OUTCOME_UNKNOWN_NAME = 'OutcomeUnknownError'

/**
 * Thrown by a tool's `execute` to say its effect may or may not have happened: the call is left
 * dispatched and never settled, as a crash would leave it, and the run ends
 * `failed{outcome_unknown}` with the message (redacted, as every failure is), the tool and its
 * operation id. The session then needs its reconciliation before its next message
 * (`RUN_RECONCILIATION_REQUIRED`, `allowPriorUnknown`), and the model is told the outcome is unknown,
 * not that the call failed. Never retried (`retry`), whatever `retryOn` says. From a `readOnly` tool
 * (it has no effect to be unsure of) it is a failure like any other: the call settles `failed` and the
 * run goes on.
 *
 * @example
 * ```ts
 * execute: async (input, { operationId, signal }) => {
 *   try {
 *     return await bank.transfer(input, { idempotencyKey: operationId, signal })
 *   } catch (error) {
 *     if (error instanceof bank.ConnectionClosedAfterSend) throw new OutcomeUnknownError('the bank closed the connection after the transfer was sent', { cause: error })
 *     throw error // the bank refused it: a failure the model may act on
 *   }
 * }
 * ```
 */
export class OutcomeUnknownError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = OUTCOME_UNKNOWN_NAME
  }
}
Object.defineProperty(OutcomeUnknownError.prototype, MARK, { value: true })

/** Whether `error` is an {@link OutcomeUnknownError}, of this copy of the library or of another. */
export function isOutcomeUnknown(error: unknown): boolean {
  if (error === null || (typeof error !== 'object' && typeof error !== 'function')) return false
  try {
    return (error as { [MARK]?: unknown })[MARK] === true
  } catch {
    // A proxy whose trap throws: not one of ours.
    return false
  }
}
