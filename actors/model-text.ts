/**
 * A model answer's text passed on live, piece by piece, while the provider streams it (see
 * `StartOptions.onModelText`). The pieces are what the run records, not what the provider sent:
 * well-formed (a surrogate pair split between two pieces is joined first) and without the
 * provider's credentials (removed from data, as from the recorded answer, see `CredentialFilter`). A
 * credential can arrive split across pieces, so the end of what arrived is held back while it could
 * still become one.
 */
import type { ToolCall } from '../facts/types.js'
import { wellFormed } from '../store/encoding.js'
import type { ToolCallPiece } from './model-client.js'
import { REDACTED, type Secrets, redact } from './redaction.js'

/**
 * One piece of a model answer's text, passed on before the answer is recorded; also one piece of its
 * reasoning (`StartOptions.onModelReasoning`), where `index`, `offset` and `text` are the
 * reasoning's, numbered apart from the text's, and the pieces add up to the recorded `reasoning`.
 */
export interface ModelTextPiece {
  /** The invocation whose model request this is. */
  invocationId: string
  /** The step, as its `model.requested` and `model.completed` facts name it (`step-1`, …). */
  stepId: string
  /**
   * 1 for a step's first request; a retry after a failure counts up, and its text starts over.
   * Attempt N is the step's Nth `model.requested` fact (each retry records one more, with the same
   * `stepId`); `requestSeq` names that fact.
   */
  attempt: number
  /**
   * The log seq of this attempt's `model.requested` fact. That fact is appended (as durable as the
   * log's durability makes a fact) before the request is sent, so before any piece of the attempt
   * is passed on: a reader of the log can always find it. `requestSeq` and `index` together name
   * the piece, uniquely and in order (an SSE id `${requestSeq}:${digest}.${index}` with the log's
   * digest at `requestSeq`, as the README's "Pieces and SSE ids" gives it).
   */
  requestSeq: number
  /**
   * The piece's place among the text pieces of its attempt, from 0, counting only pieces passed on
   * (text held back comes later in a piece of its own, with the next index): no number is skipped,
   * so a receiver can tell a piece it missed.
   */
  index: number
  /** How many characters of the attempt's text were passed on before this piece: the pieces before it, their `text` joined, is that long. */
  offset: number
  /**
   * The piece. The pieces of an attempt that completes add up to the text its `model.completed`
   * records, when the client streamed the text it answers with (the built-in client does).
   */
  text: string
}

/** One piece of a tool call of a model answer, passed on before the answer is recorded. */
export interface ModelToolCallPiece {
  /** The invocation whose model request this is. */
  invocationId: string
  /** The step, as its facts name it (`step-1`, …). */
  stepId: string
  /** 1 for a step's first request; a retry counts up, and its calls start over. Attempt N is the step's Nth `model.requested` fact. */
  attempt: number
  /** The log seq of this attempt's `model.requested` fact, appended before any piece of the attempt is passed on (see `ModelTextPiece.requestSeq`). */
  requestSeq: number
  /**
   * The piece's place among the tool-call pieces of its attempt (all its calls together, each call's
   * first `''` piece included), from 0, with no number skipped. Text pieces are counted apart: an
   * id for both kinds needs the kind in it too.
   */
  index: number
  /** How many characters of this call's arguments text were passed on before this piece (0 for its first piece, and for its second). */
  offset: number
  /** The call's id, as `model.completed` and the call's `tool.*` facts name it. */
  callId: string
  /**
   * The tool it calls, as known when the piece was passed on. A call begins once its id and name
   * are known and its arguments have begun, so a name the provider streams in parts before the
   * arguments (`web_`, `search`) is whole from the first piece; a part that comes after the
   * arguments began makes the later pieces carry the name grown (the latest piece's is the one to
   * show). `model.completed` records the name.
   */
  name: string
  /**
   * A piece of its arguments text. Each call's first piece is `''` (the call begins, its name
   * known); the pieces of an attempt that completes add up to the arguments its `model.completed`
   * records, when the client streamed them as it answers them (the built-in client does).
   */
  arguments: string
}

/**
 * The text of the attempt in flight, as passed on so far (`RunningInvocation.liveText()`): the
 * text pieces of the attempt joined, as they were passed on (so without the provider's
 * credentials, and without what is still held back).
 */
export interface LiveModelText {
  /** The log seq of the attempt's `model.requested` fact (as its pieces' `requestSeq`). */
  requestSeq: number
  /** The step (`step-1`, …). */
  stepId: string
  /** The attempt (1, then a retry's 2, …). */
  attempt: number
  /** The pieces passed on so far, joined. */
  text: string
  /** How many pieces were passed on: the next piece's `index`. */
  pieces: number
}

/** One tool call of the attempt in flight, as passed on so far (an item of `LiveModelToolCalls.calls`). */
export interface LiveModelToolCall {
  /** The call's id, as its pieces' `callId`. */
  callId: string
  /** The tool it calls, as its latest piece's `name`. */
  name: string
  /** Its arguments passed on so far, its pieces joined (without what is still held back). */
  arguments: string
}

/**
 * The tool calls of the attempt in flight, as passed on so far (`RunningInvocation.liveToolCalls()`):
 * each call begun (its `''` piece passed on), in the order they began, with its pieces joined, as
 * they were passed on.
 */
export interface LiveModelToolCalls {
  /** The log seq of the attempt's `model.requested` fact (as its pieces' `requestSeq`). */
  requestSeq: number
  /** The step (`step-1`, …). */
  stepId: string
  /** The attempt (1, then a retry's 2, …). */
  attempt: number
  /** The calls begun so far, in the order they began (none before the first call's `''` piece). */
  calls: LiveModelToolCall[]
  /** How many tool-call pieces were passed on, of all the calls: the next piece's `index`. */
  pieces: number
}

/** Where a piece of text goes once it may be passed on: its place in the attempt's text. */
export interface PieceAt {
  /** Its place among the pieces passed on, from 0. */
  index: number
  /** The characters passed on before it. */
  offset: number
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/**
 * One credential taken out of a stream of text exactly as `text.split(secret).join(REDACTED)` takes
 * it out of the whole: the leftmost occurrence first, then on after it. A Knuth-Morris-Pratt matcher
 * keeps how much of the credential the text ends with; that part is held back until the text goes
 * another way (then it is passed on) or completes the credential (then `[redacted]` is). Linear in
 * the text, however the credential overlaps itself.
 */
class CredentialFilter {
  /** `fallback[i]`: the longest proper prefix of `secret.slice(0, i + 1)` that is also its suffix. */
  readonly #fallback: Int32Array
  /** How many of the credential's first characters the text so far ends with (held back). */
  #matched = 0

  constructor(readonly secret: string) {
    const fallback = new Int32Array(secret.length)
    for (let i = 1, k = 0; i < secret.length; i += 1) {
      while (k > 0 && secret.charCodeAt(i) !== secret.charCodeAt(k)) k = fallback[k - 1] as number
      if (secret.charCodeAt(i) === secret.charCodeAt(k)) k += 1
      fallback[i] = k
    }
    this.#fallback = fallback
  }

  /** What can be passed on once `text` has arrived. */
  push(text: string): string {
    const { secret } = this
    let out = ''
    let matched = this.#matched
    for (let i = 0; i < text.length; i += 1) {
      const code = text.charCodeAt(i)
      while (matched > 0 && code !== secret.charCodeAt(matched)) {
        // The held part that can no longer start the credential goes on.
        const next = this.#fallback[matched - 1] as number
        out += secret.slice(0, matched - next)
        matched = next
      }
      if (code === secret.charCodeAt(matched)) {
        matched += 1
        if (matched === secret.length) {
          out += REDACTED
          matched = 0
        }
      } else {
        out += text[i]
      }
    }
    this.#matched = matched
    return out
  }
}

/** The text of one attempt, passed on as it arrives and completed from the recorded answer. */
export class LiveText {
  /** A high surrogate that ended the last piece: its low half may start the next one. */
  #high = ''
  /** The credentials looked for in data, in the order `redact` takes them out. */
  readonly #filters: CredentialFilter[]
  /** What was passed on, the pieces joined. */
  #passed = ''
  /** How many pieces were passed on. */
  #pieces = 0
  #done = false

  constructor(
    secrets: Secrets,
    private readonly pass: (text: string, at: PieceAt) => unknown,
  ) {
    this.#filters = secrets.whole.map((secret) => new CredentialFilter(secret))
  }

  /**
   * Looks for `secrets` too from the next piece on (a client registered one mid-attempt:
   * `ModelRequest.addSecret`): what was passed on before cannot be taken back.
   */
  addSecrets(secrets: Secrets): void {
    const known = new Set(this.#filters.map((filter) => filter.secret))
    for (const secret of secrets.whole) if (!known.has(secret)) this.#filters.push(new CredentialFilter(secret))
    // Longest first, as `redact` takes them out.
    this.#filters.sort((a, b) => b.secret.length - a.secret.length)
  }

  /** A piece as the client read it. */
  push(text: string): void {
    if (this.#done) return
    let joined = this.#high + text
    this.#high = ''
    if (joined.length > 0 && isHighSurrogate(joined.charCodeAt(joined.length - 1))) {
      this.#high = joined.slice(-1)
      joined = joined.slice(0, -1)
    }
    let out = wellFormed(joined)
    for (const filter of this.#filters) out = filter.push(out)
    this.#send(out)
  }

  /**
   * The attempt's answer as recorded: passes on whatever of it was not passed on yet (what was held
   * back, and whatever the client did not stream). When what was passed on is not where the recorded
   * text starts (a client that streamed other text than it answered with), nothing more is passed
   * on: the recorded answer is the one that counts.
   */
  finish(recorded: string): void {
    if (this.#done) return
    this.#done = true
    if (recorded.startsWith(this.#passed)) this.#send(recorded.slice(this.#passed.length))
  }

  /** Ends an attempt that did not complete: nothing more is passed on. */
  close(): void {
    this.#done = true
  }

  /** What was passed on so far, the pieces joined, and how many pieces that was. */
  get passed(): { text: string; pieces: number } {
    return { text: this.#passed, pieces: this.#pieces }
  }

  #send(text: string): void {
    if (text.length === 0) return
    // Counted as it is passed on, whatever the receiver does with it: the next piece follows on.
    const at = { index: this.#pieces, offset: this.#passed.length }
    this.#passed += text
    this.#pieces += 1
    deliver(() => this.pass(text, at))
  }
}

/** Calls a receiver. Its failure is its own: the run goes on, and what it records is unchanged. */
export function deliver(call: () => unknown): void {
  try {
    const returned = call()
    // An async receiver's rejection is its own too, not the process's.
    if (typeof (returned as PromiseLike<unknown> | null)?.then === 'function') Promise.resolve(returned).catch(() => undefined)
  } catch {
    // Ignored, as above.
  }
}

/**
 * One tool call being streamed: its arguments held until its id and name are known and its arguments
 * have begun, then passed on live.
 */
interface LiveCall {
  index: number
  callId?: string
  /** Its name so far: a piece's name replaces it (a client passes a name streamed in parts joined so far). */
  name?: string
  held: string
  live?: LiveText
  /** Its id and name as its last piece carried them (redacted), once it has begun, and the name they were made from. */
  shown?: { callId: string; name: string }
  shownFrom?: string
}

/**
 * The tool calls of one attempt, passed on as they arrive and completed from the recorded answer:
 * each through a `LiveText` of its own (well-formed, without the provider's credentials), begun with
 * an empty piece once its id and name are known and its arguments have begun (a provider that
 * streams a name in parts sends them before the arguments, so the call begins under its whole name).
 */
export class LiveToolCalls {
  readonly #calls: LiveCall[] = []
  /** The calls begun (their `''` piece passed on), in the order they began. */
  readonly #begun: LiveCall[] = []
  /** How many pieces were passed on, of all the calls. */
  #pieces = 0
  #done = false

  constructor(
    private secrets: Secrets,
    private readonly pass: (call: { callId: string; name: string }, text: string, at: PieceAt) => unknown,
  ) {}

  /** Looks for `secrets` too from the next piece on, in every call (see `LiveText.addSecrets`). */
  addSecrets(secrets: Secrets): void {
    this.secrets = secrets
    for (const call of this.#calls) call.live?.addSecrets(secrets)
  }

  /** A piece as the client read it. */
  push(piece: ToolCallPiece): void {
    if (this.#done) return
    // A piece naming the id of a call begun before at its index goes to that call: some servers
    // interleave the parts of parallel calls all at index 0 (A, B, A, B), which the client merges so.
    // The call it leaves is not closed: its next piece, or `finish`, completes it.
    let call =
      (piece.callId === undefined ? undefined : this.#calls.find((candidate) => candidate.index === piece.index && candidate.callId === piece.callId)) ??
      this.#calls.findLast((candidate) => candidate.index === piece.index)
    if (call === undefined || (piece.callId !== undefined && call.callId !== undefined && piece.callId !== call.callId)) {
      call = { index: piece.index, held: '' }
      this.#calls.push(call)
    }
    call.callId ??= piece.callId
    // The name so far: a name streamed in parts comes joined so far, each time longer.
    if (piece.name !== undefined) call.name = piece.name
    if (call.live !== undefined) {
      if (piece.arguments !== undefined) call.live.push(piece.arguments)
      return
    }
    if (piece.arguments !== undefined) call.held += piece.arguments
    // Begun once its arguments have begun too: until then its name may still grow.
    if (call.callId !== undefined && call.name !== undefined && call.held !== '') this.#begin(call).push(call.held)
  }

  /**
   * The attempt's calls as recorded: each one not begun is begun, and each gets the rest of its
   * arguments (see `LiveText.finish`) under its recorded name. A call begun under an id is the
   * recorded call with that id, whatever name its pieces carried.
   */
  finish(recorded: readonly ToolCall[]): void {
    if (this.#done) return
    this.#done = true
    const finished = new Set<LiveCall>()
    for (const { callId, name, arguments: text } of recorded) {
      // The first call streamed under its id not finished yet, begun or not (two calls of one id, as
      // some local servers send, go in their order); none: a call the client did not stream.
      const streamed = this.#calls.find((candidate) => candidate.callId === callId && !finished.has(candidate))
      const call = streamed ?? { index: -1, held: '', callId }
      finished.add(call)
      call.name = name
      ;(call.live ?? this.#begin(call)).finish(text)
    }
    for (const call of this.#calls) call.live?.close()
  }

  /** Ends an attempt that did not complete: nothing more is passed on. */
  close(): void {
    this.#done = true
    for (const call of this.#calls) call.live?.close()
  }

  /**
   * What was passed on so far: the calls begun, in the order they began (a call begins once its id
   * and name are known, which may be after a call that came later), and how many pieces that was.
   */
  get passed(): { calls: LiveModelToolCall[]; pieces: number } {
    const calls: LiveModelToolCall[] = []
    for (const call of this.#begun) calls.push({ ...(call.shown as { callId: string; name: string }), arguments: (call.live as LiveText).passed.text })
    return { calls, pieces: this.#pieces }
  }

  /** Begins a call whose id and name are known: its `''` piece is passed on. */
  #begin(call: LiveCall): LiveText {
    this.#begun.push(call)
    // One count over the calls: a piece's index is its place among all the attempt's call pieces.
    // Each piece carries the call's id and its name as known when it is passed on.
    const live = new LiveText(this.secrets, (text, { offset }) => this.pass(this.#shown(call), text, { index: this.#pieces++, offset }))
    call.live = live
    const shown = this.#shown(call)
    const at = { index: this.#pieces++, offset: 0 }
    deliver(() => this.pass(shown, '', at))
    return live
  }

  /** The call's id and name as a piece passed on now carries them (kept for `passed`). */
  #shown(call: LiveCall): { callId: string; name: string } {
    const name = call.name as string
    if (call.shown === undefined || call.shownFrom !== name) {
      // What the run records of them is redacted the same way.
      call.shown = { callId: redact(call.callId as string, this.secrets), name: redact(name, this.secrets) }
      call.shownFrom = name
    }
    return call.shown
  }
}
