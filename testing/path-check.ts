/** What running a path checks, and how a failed check is reported. */

/** The invariant a failed check was about. */
export type PathCheck =
  /** The facts appended differ from the ones the path plans. */
  | 'facts'
  /** The state folded from the log differs from the path's machine state. */
  | 'state'
  /** The live actor's state (or context) differs from the state folded from the log. */
  | 'live-state'
  /** A refusal, or reopening the log, changed the digest. */
  | 'digest'
  /** `verify()` failed or disagrees with the log's prefix. */
  | 'verify'
  /** An operation ran twice, ran without a dispatch, was dispatched and not run, or ran again after a restart. */
  | 'ledger'
  /** The model server saw a request the path does not plan (e.g. after a seal), or missed one. */
  | 'requests'
  /** A refusal did not happen, or came with another code. */
  | 'refusal'
  /** Recovery closed the wrong invocations, with the wrong facts, or is not idempotent. */
  | 'recovery'
  /** A successor or a new run did not rebuild its transcript from the facts. */
  | 'replay'
  /** The run's outcome (`wait()`) disagrees with its last fact or with the path. */
  | 'outcome'
  /** A handoff reservation or hold behaved unlike the path plans. */
  | 'hold'
  /** Something the path waits for did not happen in time. */
  | 'timeout'
  /** The crash child failed before it reached the crash state. */
  | 'child'

/**
 * Thrown by `runPath` when an invariant does not hold; names the path, the step and the check.
 *
 * @example
 * ```ts
 * try {
 *   await runPath(path)
 * } catch (error) {
 *   if (error instanceof PathCheckError && error.check === 'ledger') console.error('a tool ran twice', error.pathId, error.step)
 *   throw error
 * }
 * ```
 */
export class PathCheckError extends Error {
  /** Which invariant failed. Stable: branch on it, not on the message. */
  readonly check: PathCheck
  /** The `id` of the path that failed. */
  readonly pathId: string
  /** The index of the step being checked (-1: before the first step, `steps.length`: after the last). */
  readonly step: number
  /** What was found, without the path, step and check that `message` starts with. */
  readonly detail: string

  constructor(check: PathCheck, pathId: string, step: number, detail: string, options?: { cause?: unknown }) {
    super(`${pathId} step ${step}: ${check}: ${detail}`, options?.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'PathCheckError'
    this.check = check
    this.pathId = pathId
    this.step = step
    this.detail = detail
  }
}

/** How many times each invariant was checked while running a path. */
export interface PathChecks {
  /** Machine state folded from the log compared with the path (and with the live actor, when one runs). */
  states: number
  /** Facts appended compared with the planned ones (shape by shape). */
  facts: number
  /** Digests compared (refusals, reopenings, recovery runs). */
  digests: number
  /** `verify()` calls that passed. */
  verifies: number
  /** Refusals provoked, each with its code and an unchanged log. */
  refusals: number
  /** Ledger comparisons against the dispatched operations. */
  ledger: number
  /** Recoveries checked (closing facts, their class, idempotence). */
  recoveries: number
  /** Transcripts rebuilt by a successor or a new run checked against the facts. */
  replays: number
  /** Close-and-reopen cycles that kept the digest. */
  reopenings: number
}

export const noChecks = (): PathChecks => ({
  states: 0,
  facts: 0,
  digests: 0,
  verifies: 0,
  refusals: 0,
  ledger: 0,
  recoveries: 0,
  replays: 0,
  reopenings: 0,
})
