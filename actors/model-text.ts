/**
 * A model answer's text passed on live, piece by piece, while the provider streams it (see
 * `StartOptions.onModelText`). The pieces are what the run records, not what the provider sent:
 * well-formed (a surrogate pair split between two pieces is joined first) and without the
 * provider's credentials (removed from data, as from the recorded answer). A credential can arrive
 * split across pieces, so the end of what arrived is held back while it could still become one.
 */
import { wellFormed } from '../store/encoding.js'
import { redact, type Secrets } from './redaction.js'

/** One piece of a model answer's text, passed on before the answer is recorded. */
export interface ModelTextPiece {
  /** The invocation whose model request this is. */
  invocationId: string
  /** The step, as its `model.requested` and `model.completed` facts name it (`step-1`, …). */
  stepId: string
  /** 1 for a step's first request; a retry after a failure counts up, and its text starts over. */
  attempt: number
  /** The piece: the pieces of an attempt that completes add up to the text its `model.completed` records. */
  text: string
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/** The text of one attempt, passed on as it arrives and completed from the recorded answer. */
export class LiveText {
  /** Arrived and not passed on yet. */
  #pending = ''
  /** What was passed on, the pieces joined. */
  #passed = ''
  #done = false

  constructor(
    private readonly secrets: Secrets,
    private readonly pass: (text: string) => void,
  ) {}

  /** A piece as the client read it. */
  push(text: string): void {
    if (this.#done) return
    this.#pending += text
    this.#emit(this.#safeEnd())
  }

  /**
   * The attempt's answer as recorded: passes on whatever of it was not passed on yet. When what was
   * passed on is not where the recorded text starts (a client that streamed other text than it
   * answered with), nothing more is passed on: the recorded answer is the one that counts.
   */
  finish(recorded: string): void {
    if (this.#done) return
    this.#done = true
    this.#pending = ''
    if (recorded.startsWith(this.#passed) && recorded.length > this.#passed.length) this.#send(recorded.slice(this.#passed.length))
  }

  /** Ends an attempt that did not complete: nothing more is passed on. */
  close(): void {
    this.#done = true
    this.#pending = ''
  }

  /**
   * How much of `#pending` can be passed on: not a tail that could still grow into a credential, no
   * credential cut in two, and not a high surrogate whose low half may be in the next piece.
   */
  #safeEnd(): number {
    const pending = this.#pending
    let end = pending.length
    const secrets = this.secrets.whole
    for (const secret of secrets) {
      // The longest tail of what arrived that the credential starts with.
      const first = secret.charCodeAt(0)
      for (let start = Math.max(0, pending.length - secret.length + 1); start < end; start += 1) {
        if (pending.charCodeAt(start) === first && secret.startsWith(pending.slice(start))) {
          end = start
          break
        }
      }
    }
    // Whole credentials are redacted where they lie; the end must not cut one (nor, then, one that
    // overlaps it: moving the end can cut another).
    for (let moved = true; moved && end > 0; ) {
      moved = false
      for (const secret of secrets) {
        for (let at = pending.indexOf(secret, Math.max(0, end - secret.length + 1)); at !== -1 && at < end; at = pending.indexOf(secret, at + 1)) {
          if (at + secret.length > end) {
            end = at
            moved = true
            break
          }
        }
      }
    }
    if (end > 0 && isHighSurrogate(pending.charCodeAt(end - 1))) end -= 1
    return end
  }

  #emit(end: number): void {
    if (end === 0) return
    const text = this.#pending.slice(0, end)
    this.#pending = this.#pending.slice(end)
    this.#send(redact(wellFormed(text), this.secrets))
  }

  #send(text: string): void {
    if (text.length === 0) return
    this.#passed += text
    try {
      this.pass(text)
    } catch {
      // The receiver's failure is its own: the run goes on, and what it records is unchanged.
    }
  }
}
