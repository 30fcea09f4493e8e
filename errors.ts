/**
 * Every refusal factstate makes carries a stable `code`. Codes never change meaning; messages
 * are free text for people and may change. Test and branch on `code`, never on `message`.
 *
 * @example
 * ```ts
 * try { await engine.start(input) }
 * catch (error) {
 *   if (error instanceof FactstateError && error.code === 'RUN_BUSY') retryLater()
 * }
 * ```
 */
export type FactstateErrorCode =
  // the log
  | 'LOG_WRITER_BUSY'
  | 'LOG_INVALID_EVENT'
  | 'LOG_CONFLICT'
  | 'LOG_SEALED'
  | 'LOG_REJECTED_FACT'
  | 'LOG_CORRUPT'
  | 'LOG_CLOSED'
  | 'LOG_PREFIX_TOO_LARGE'
  | 'LOG_INVALID_ARGUMENT'
  | 'LOG_IO'
  | 'LOG_FORMAT_UNSUPPORTED'
  // admission
  | 'RUN_INVALID_INPUT'
  | 'RUN_BUSY'
  | 'RUN_RECONCILIATION_REQUIRED'
  | 'RUN_SOURCE_MISMATCH'
  // handoff
  | 'HANDOFF_MISMATCH'
  | 'HANDOFF_CLAIMED'
  | 'HANDOFF_BUSY'
  | 'HANDOFF_NOT_HELD'
  | 'HANDOFF_CANCELLED'
  | 'HANDOFF_UNAVAILABLE'
  // the machine
  | 'MACHINE_REJECTED'
  // options of the engine, its model executor and the inspector
  | 'ENGINE_INVALID_OPTIONS'
  | 'INSPECTOR_INVALID_OPTIONS'
  // the testing kit (`factstate/testing`)
  | 'TESTING_INVALID_OPTIONS'

/** An error with a stable {@link FactstateErrorCode}; the underlying error, if any, is `cause`. */
export class FactstateError extends Error {
  readonly code: FactstateErrorCode
  /** Extra structured detail (for example the failing `seq` or the offending field paths). */
  readonly details: Readonly<Record<string, unknown>> | undefined

  constructor(code: FactstateErrorCode, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(`${code}: ${message}`, options?.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'FactstateError'
    this.code = code
    this.details = options?.details
  }
}

/** True when `error` is a {@link FactstateError}, optionally with the given code. */
export function isFactstateError<C extends FactstateErrorCode = FactstateErrorCode>(error: unknown, code?: C): error is FactstateError & { code: C } {
  return error instanceof FactstateError && (code === undefined || error.code === code)
}
