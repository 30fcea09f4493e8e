/**
 * One session's facts and live pieces as one ordered stream of messages with resumable ids, for a
 * page that reconnects (Server-Sent Events): the README's "Pieces and SSE ids" scheme, built in.
 */
import { FactstateError } from '../errors.js'
import { ID_PATTERN } from '../facts/schema.js'
import type { StoredEvent } from '../facts/types.js'
import { readOptions, shown } from '../options.js'
import { isAbortSignal } from '../store/encoding.js'
import { type EventLog, logInternals } from '../store/event-log.js'
import { onAbort } from './abort-listeners.js'
import { Engine, type LiveTap, engineInternals, engineLog } from './engine.js'
import type { LiveModelText, LiveModelToolCalls, ModelTextPiece, ModelToolCallPiece } from './model-text.js'
import type { ToolProgressUpdate } from './tool-progress.js'

/** Options of {@link sessionFeed}. */
export interface SessionFeedOptions {
  /** The session to send: its facts, and the live pieces of its runs. */
  sessionId: string
  /**
   * The id of the last message the page has, as it sends it back (an SSE client's `Last-Event-ID`
   * header; Node's `request.headers['last-event-id']` as it is). None (or `''`): the session from its
   * first fact. One the log does not bear out starts the page over, with a `reset` message first.
   */
  lastEventId?: string | readonly string[] | undefined
  /**
   * The engine that runs the session in this process, driving `log`: its runs' live pieces go in
   * the feed (for a run started with `onModelText`, `onToolCallText`, `onToolProgress`, each of its
   * own kind). Without it, or for a snapshot, the feed holds facts only.
   */
  engine?: Engine | undefined
  /** Aborting ends the feed at once (its `next()` resolves done), as `return()` does. */
  signal?: AbortSignal | undefined
}

/** Why a feed starts the page over (`reset` message's `data.reason`). */
export type SessionFeedResetReason = 'not_an_id' | 'past_the_end' | 'not_this_log' | 'not_this_session'

/**
 * A message of {@link sessionFeed}: an SSE event's `id`, `event` and `data` (write it with
 * {@link toServerSentEvent}). Each id but `reset`'s (`''`, which clears the page's) and
 * `tool-progress`'s (none, which keeps the page's) names a place the feed can resume from.
 */
export type SessionFeedMessage =
  /** The page holds what the log does not bear out: drop everything shown, the session follows from its first fact. */
  | { id: ''; event: 'reset'; data: { reason: SessionFeedResetReason } }
  /** A fact of the session, `id` `${seq}:${digest}` (the log's digest at its seq). */
  | { id: string; event: 'fact'; data: StoredEvent }
  /** A piece of an answer's text, `id` `${requestSeq}:${digest}.${index}`: append it to its attempt's text. */
  | { id: string; event: 'text'; data: ModelTextPiece }
  /** An attempt's text so far (on a resume), `id` its last piece's: replaces what the page has of that attempt's text. */
  | { id: string; event: 'text-so-far'; data: LiveModelText }
  /** A piece of an answer's tool call, `id` `${requestSeq}:${digest}.c.${index}`. */
  | { id: string; event: 'tool-call'; data: ModelToolCallPiece }
  /** An attempt's tool calls so far (on a resume), `id` its last call piece's: replaces what the page has of that attempt's calls. */
  | { id: string; event: 'tool-calls-so-far'; data: LiveModelToolCalls }
  /** What a running tool reported (live only; a resume sends the latest of each call running): no id, a state to replace. */
  | { id: undefined; event: 'tool-progress'; data: ToolProgressUpdate }

/** One message before its id is made (a piece's needs the digest at its attempt's `model.requested`). */
type Item =
  | { event: 'reset'; reason: SessionFeedResetReason }
  | { event: 'fact'; stored: StoredEvent; digest: string }
  | { event: 'text'; piece: ModelTextPiece }
  | { event: 'text-so-far'; live: LiveModelText }
  | { event: 'tool-call'; piece: ModelToolCallPiece }
  | { event: 'tool-calls-so-far'; live: LiveModelToolCalls }
  | ProgressItem

/** A call's progress waiting for the page: while it waits, the call's next update replaces its `update`. */
interface ProgressItem {
  event: 'tool-progress'
  update: ToolProgressUpdate
}

/** A page's last id, read: the fact's seq and the digest it names, and for a piece's id its kind and index. */
interface PageId {
  seq: number
  digest: string
  piece: { kind: 'text' | 'call'; index: number } | undefined
}

/** The page's last id, read, or why it is none. */
function parsedId(lastEventId: unknown): PageId | undefined | 'not_an_id' {
  const given = Array.isArray(lastEventId) && lastEventId.length === 1 ? lastEventId[0] : lastEventId
  if (given === undefined || given === '') return undefined
  if (typeof given !== 'string') return 'not_an_id'
  // `S:D`, `S:D.k` or `S:D.c.k`: a digest (`sha256:` and hex) holds no dot, so the first dot after it starts the index.
  const match = /^([1-9][0-9]{0,15}):([^.]+)(?:\.(c\.)?(0|[1-9][0-9]{0,15}))?$/.exec(given)
  const seq = Number(match?.[1])
  const index = Number(match?.[4])
  if (match === null || !Number.isSafeInteger(seq) || (match[4] !== undefined && !Number.isSafeInteger(index))) return 'not_an_id'
  return { seq, digest: match[2] as string, piece: match[4] === undefined ? undefined : { kind: match[3] === undefined ? 'text' : 'call', index } }
}

function refusal(message: string, field: string): FactstateError {
  return new FactstateError('LOG_INVALID_ARGUMENT', `sessionFeed: ${message}`, { details: { field } })
}

/**
 * One session's facts and, from an engine of this process, the live pieces of its runs, as one
 * ordered stream of messages whose ids let a page that reconnects resume where it was: nothing
 * missed, nothing repeated. Give it the page's `Last-Event-ID`: the feed checks it against the log
 * (a seq past the end, another digest at it, or a fact of another session there starts the page over
 * with a `reset` message), sends
 * the facts after it, the text and tool calls so far of an answer being written (as one message
 * each, replacing the page's), then each fact and piece as it comes, a piece never before its
 * attempt's `model.requested` fact. On a log from `EventLog.open` it follows until `return()`
 * (`break`), the `signal` aborts, or the log closes; on a snapshot it ends at the snapshot's end.
 * Messages carry what the facts and the run's receivers get (redacted as they are), nothing more.
 * Bad options are `LOG_INVALID_ARGUMENT` (`details.field`), thrown here; the log's failures
 * (`LOG_CLOSED`, `LOG_IO`) come from `next()`.
 *
 * @example
 * ```ts
 * // GET /sessions/:id/events, in the process that runs the engine
 * const abort = new AbortController()
 * response.on('close', () => abort.abort())
 * // Bad options throw here, before the headers are sent.
 * const feed = sessionFeed(log, { sessionId, lastEventId: request.headers['last-event-id'], engine, signal: abort.signal })
 * response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
 * response.write('retry: 1000\n\n') // the page's reconnect delay (a browser's own: about 3 s)
 * for await (const message of feed) {
 *   // Waits for a page that reads slowly (`once` from node:events): the feed then reads on as it does.
 *   if (!response.write(toServerSentEvent(message))) await once(response, 'drain', { signal: abort.signal }).catch(() => undefined)
 * }
 * response.end()
 * ```
 */
export function sessionFeed(log: EventLog, options: SessionFeedOptions): AsyncIterableIterator<SessionFeedMessage> {
  try {
    logInternals(log)
  } catch {
    throw refusal('log must be an EventLog (from EventLog.open or EventLog.openSnapshot)', 'log')
  }
  const given = readOptions(options, ['sessionId', 'lastEventId', 'engine', 'signal'], {
    call: 'sessionFeed',
    code: 'LOG_INVALID_ARGUMENT',
    details: (field) => ({ field }),
    required: ['sessionId'],
  })
  const { sessionId, lastEventId, engine, signal } = given
  if (typeof sessionId !== 'string' || !ID_PATTERN.test(sessionId)) throw refusal(`sessionId must be a session id (1–128 of A–Z a–z 0–9 . _ : -), not ${shown(sessionId)}`, 'sessionId')
  if (lastEventId !== undefined && typeof lastEventId !== 'string' && !Array.isArray(lastEventId)) throw refusal(`lastEventId must be a string (the Last-Event-ID header), not ${shown(lastEventId)}`, 'lastEventId')
  if (engine !== undefined) {
    if (!(engine instanceof Engine)) throw refusal('engine must be an Engine', 'engine')
    // Its pieces' requestSeqs are another log's seqs.
    if (engineLog(engine) !== log) throw refusal(`engine must be the Engine driving this log, not one of another log${log.snapshotOf === undefined ? '' : ' (a snapshot has no live pieces)'}`, 'engine')
  }
  if (signal !== undefined && !isAbortSignal(signal)) throw refusal('signal must be an AbortSignal', 'signal')
  return new SessionFeed(log, sessionId, parsedId(lastEventId), engine as Engine | undefined, signal as AbortSignal | undefined)
}

class SessionFeed implements AsyncIterableIterator<SessionFeedMessage> {
  /** What goes to the page next, in order. */
  readonly #ready: Item[] = []
  /** Pieces and progress waiting for the fact they follow (by its seq): a page resumed after them must have that fact. */
  readonly #held = new Map<number, Item[]>()
  /** The last seq the page has: a piece or an update of a later fact waits for it. */
  #through = 0
  /** Each call's progress waiting in `#ready` or `#held` (by its operation id): a page that reads slowly is sent the latest. */
  readonly #progress = new Map<string, ProgressItem>()
  /** The log's digest at the seqs pieces name. */
  readonly #digests = new Map<number, string>()
  #reader: AsyncGenerator<StoredEvent, void, undefined> | undefined
  #pulling = false
  #readerDone = false
  #failure: { error: unknown } | undefined
  #closed = false
  #wake: (() => void) | undefined
  #stopTap: (() => void) | undefined
  #unlisten: (() => void) | undefined
  readonly #started: Promise<void>
  /** `next()` calls, one after the other. */
  #chain: Promise<unknown> = Promise.resolve()

  constructor(
    private readonly log: EventLog,
    private readonly sessionId: string,
    private readonly id: PageId | undefined | 'not_an_id',
    private readonly engine: Engine | undefined,
    signal: AbortSignal | undefined,
  ) {
    if (signal !== undefined) {
      // Through the engine's one listener per signal: a server's feeds often share one (its
      // shutdown's), and a listener each made Node warn of a leak past ten.
      if (signal.aborted) this.#closed = true
      else this.#unlisten = onAbort(signal, () => void this.return())
    }
    this.#started = this.#start()
    // Its failure is the first `next()`'s.
    this.#started.catch(() => undefined)
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  next(): Promise<IteratorResult<SessionFeedMessage, undefined>> {
    const next = this.#chain.then(() => this.#next())
    this.#chain = next.catch(() => undefined)
    return next
  }

  /** Ends the feed at once, also while a `next()` waits for the next fact (it resolves done). */
  async return(): Promise<IteratorResult<SessionFeedMessage, undefined>> {
    this.#close()
    return { value: undefined, done: true }
  }

  async #start(): Promise<void> {
    const { log, id } = this
    if (this.#closed) return
    if (id === 'not_an_id' || id === undefined) return this.#listen(id)
    if (id.seq > log.head().highWater) return this.#listen('past_the_end')
    // Listened to at once, as if the log bore the id out (the run goes on meanwhile); started over in
    // the same turn if it does not, before any message goes to the page.
    this.#listen(id)
    let reason: SessionFeedResetReason | undefined
    if ((await log.digestAt(id.seq)) !== id.digest) reason = 'not_this_log'
    // A page sent another session's facts before (a server that takes the session from a cookie, say) would miss this one's up to the seq.
    else if (!(await this.#ofSession(id.seq))) reason = 'not_this_session'
    if (reason === undefined || this.#closed) return
    this.#stopListening()
    this.#listen(reason)
  }

  /** The facts from the page's id (or, for a reset, from the first), what the session's runs have passed on so far, and every piece after it, in one turn. */
  #listen(id: PageId | SessionFeedResetReason | undefined): void {
    const resumed = typeof id === 'object' ? id : undefined
    if (typeof id === 'string') this.#ready.push({ event: 'reset', reason: id })
    const from = resumed === undefined ? 1 : resumed.seq + 1
    if (resumed !== undefined) this.#digests.set(resumed.seq, resumed.digest)
    this.#through = from - 1
    const { log } = this
    const follow = log.snapshotOf === undefined
    this.#reader = log.events({ from, sessionId: this.sessionId, ...(follow ? { follow: true } : {}) })
    if (this.engine === undefined) return
    const tap: LiveTap = {
      text: (piece) => this.#add({ event: 'text', piece }, piece.requestSeq),
      call: (piece) => this.#add({ event: 'tool-call', piece }, piece.requestSeq),
      progress: (update) => this.#add({ event: 'tool-progress', update }, update.dispatchedSeq),
    }
    const { soFar, stop } = engineInternals(this.engine).watch(this.sessionId, tap)
    this.#stopTap = stop
    for (const { text, calls, progress, order } of soFar) {
      // What the page has of the attempt: by its id, when that is a piece of it (then, by the order
      // they were passed on, also the pieces of the other kind before it); else none.
      let hasText = 0
      let hasCalls = 0
      const piece = resumed?.piece
      if (piece !== undefined && resumed?.seq === (text ?? calls)?.requestSeq) {
        if (piece.kind === 'text') {
          hasText = piece.index + 1
          hasCalls = order === undefined ? 0 : order.textBefore.filter((before) => before <= piece.index).length
        } else {
          hasCalls = piece.index + 1
          hasText = order?.textBefore[piece.index] ?? 0
        }
      }
      const textSoFar = text !== undefined && text.pieces > hasText ? text : undefined
      const callsSoFar = calls !== undefined && calls.pieces > hasCalls ? calls : undefined
      // The kind whose last piece was passed on last goes last: its id then says the page has the other's too.
      const textLast = textSoFar !== undefined && callsSoFar !== undefined && (order?.textBefore[callsSoFar.pieces - 1] ?? 0) < textSoFar.pieces
      if (callsSoFar !== undefined && textLast) this.#add({ event: 'tool-calls-so-far', live: callsSoFar }, callsSoFar.requestSeq)
      if (textSoFar !== undefined) this.#add({ event: 'text-so-far', live: textSoFar }, textSoFar.requestSeq)
      if (callsSoFar !== undefined && !textLast) this.#add({ event: 'tool-calls-so-far', live: callsSoFar }, callsSoFar.requestSeq)
      for (const update of progress) this.#add({ event: 'tool-progress', update }, update.dispatchedSeq)
    }
  }

  /** Undoes `#listen`, for a page whose id the log does not bear out: nothing of it has gone to the page. */
  #stopListening(): void {
    this.#stopTap?.()
    this.#stopTap = undefined
    this.#reader?.return(undefined).catch(() => undefined)
    this.#reader = undefined
    this.#ready.length = 0
    this.#held.clear()
    this.#progress.clear()
    this.#digests.clear()
  }

  /** Whether the fact at `seq` (one the log holds) is of the session. */
  async #ofSession(seq: number): Promise<boolean> {
    for await (const _stored of this.log.events({ from: seq, to: seq, sessionId: this.sessionId })) return true
    return false
  }

  async #next(): Promise<IteratorResult<SessionFeedMessage, undefined>> {
    try {
      await this.#started
    } catch (error) {
      this.#close()
      throw error
    }
    for (;;) {
      if (this.#closed) return { value: undefined, done: true }
      const item = this.#ready.shift()
      if (item?.event === 'tool-progress' && this.#progress.get(item.update.operationId) === item) this.#progress.delete(item.update.operationId)
      if (item !== undefined) return { value: await this.#message(item), done: false }
      if (this.#readerDone) {
        const failure = this.#failure
        this.#close()
        if (failure !== undefined) throw failure.error
        return { value: undefined, done: true }
      }
      if (!this.#pulling) this.#pull()
      await new Promise<void>((resolve) => {
        this.#wake = resolve
      })
    }
  }

  /** Reads the next fact: one at a time, so a page that reads slowly leaves the rest in the log's reader. */
  #pull(): void {
    const reader = this.#reader
    if (reader === undefined) return
    this.#pulling = true
    reader.next().then(
      (result) => {
        this.#pulling = false
        if (this.#closed) return
        if (result.done === true) this.#readerDone = true
        else {
          const { seq, event } = result.value
          let digest: string
          try {
            digest = logInternals(this.log).digestOf(seq, event.id)
          } catch (error) {
            // The log closed (or failed) just after the reader yielded: the feed ends with it.
            this.#readerDone = true
            this.#failure = { error }
            this.#wakeUp()
            return
          }
          this.#ready.push({ event: 'fact', stored: result.value, digest })
          this.#through = seq
          // Kept for the pieces of an attempt it requests (only the latest is: they follow it).
          if (event.fact.type === 'model.requested') {
            this.#digests.clear()
            this.#digests.set(seq, digest)
          }
          for (const [after, items] of [...this.#held].sort(([a], [b]) => a - b)) {
            if (after > seq) break
            this.#held.delete(after)
            this.#ready.push(...items)
          }
        }
        this.#wakeUp()
      },
      (error: unknown) => {
        this.#pulling = false
        this.#readerDone = true
        this.#failure = { error }
        this.#wakeUp()
      },
    )
  }

  /** A live piece or update: to the page once it has the fact `after` (at once if it has). */
  #add(item: Item, after: number): void {
    if (this.#closed) return
    if (item.event === 'tool-progress') {
      // A state, not a step: an update the page has not been sent yet is replaced by the call's next,
      // so a page that reads slower than a tool reports holds one update per call, not all of them.
      const waiting = this.#progress.get(item.update.operationId)
      if (waiting !== undefined) {
        waiting.update = item.update
        return
      }
      this.#progress.set(item.update.operationId, item)
    }
    if (after <= this.#through) this.#ready.push(item)
    else {
      // A page that reads slower than the run writes: the pieces of an attempt (and the progress of
      // a call) held for it are let go once a later attempt (call) begins, since that one's request
      // (dispatch) is durable after the earlier one's end fact, which has the text (the outcome).
      const piece = item.event !== 'tool-progress'
      for (const [seq, items] of this.#held) {
        if (seq >= after) continue
        const kept = items.filter((held) => held.event === 'tool-progress' && !piece)
        for (const held of items) if (held.event === 'tool-progress' && !kept.includes(held)) this.#progress.delete(held.update.operationId)
        if (kept.length === 0) this.#held.delete(seq)
        else this.#held.set(seq, kept)
      }
      const items = this.#held.get(after)
      if (items === undefined) this.#held.set(after, [item])
      else items.push(item)
    }
    this.#wakeUp()
  }

  #wakeUp(): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }

  /** The message of an item: a piece's id has the log's digest at its attempt's `model.requested`. */
  async #message(item: Item): Promise<SessionFeedMessage> {
    const at = async (seq: number) => {
      let digest = this.#digests.get(seq)
      if (digest === undefined) {
        digest = await this.log.digestAt(seq)
        this.#digests.set(seq, digest)
      }
      return `${seq}:${digest}`
    }
    switch (item.event) {
      case 'reset':
        return { id: '', event: 'reset', data: { reason: item.reason } }
      case 'fact':
        return { id: `${item.stored.seq}:${item.digest}`, event: 'fact', data: item.stored }
      case 'text':
        return { id: `${await at(item.piece.requestSeq)}.${item.piece.index}`, event: 'text', data: item.piece }
      case 'text-so-far':
        return { id: `${await at(item.live.requestSeq)}.${item.live.pieces - 1}`, event: 'text-so-far', data: item.live }
      case 'tool-call':
        return { id: `${await at(item.piece.requestSeq)}.c.${item.piece.index}`, event: 'tool-call', data: item.piece }
      case 'tool-calls-so-far':
        return { id: `${await at(item.live.requestSeq)}.c.${item.live.pieces - 1}`, event: 'tool-calls-so-far', data: item.live }
      case 'tool-progress':
        return { id: undefined, event: 'tool-progress', data: item.update }
      default: {
        const never: never = item
        return never
      }
    }
  }

  #close(): void {
    if (this.#closed && this.#reader === undefined) return
    this.#closed = true
    this.#ready.length = 0
    this.#held.clear()
    this.#progress.clear()
    this.#stopTap?.()
    this.#stopTap = undefined
    this.#unlisten?.()
    this.#unlisten = undefined
    const reader = this.#reader
    this.#reader = undefined
    // Ends at once, also while its `next()` waits on an idle log (that `next()` then resolves done).
    reader?.return(undefined).catch(() => undefined)
    this.#wakeUp()
  }
}

/**
 * A message as Server-Sent Events wire text: `id: …` (none for a message without one; `id:` alone
 * for `''`, which clears the page's last id), `event: …`, and the data, JSON text unless it is a
 * string, one `data:` line for each of its lines, then the blank line that ends an event. What it
 * cannot write (an `id` or `event` that is not a one-line string, `data` with no JSON text: a BigInt,
 * a cycle) is `LOG_INVALID_ARGUMENT`, `details.field` naming it.
 *
 * @example
 * ```ts
 * toServerSentEvent({ id: '7:sha256:…', event: 'fact', data: { seq: 7 } })
 * // 'id: 7:sha256:…\nevent: fact\ndata: {"seq":7}\n\n'
 * ```
 */
export function toServerSentEvent(message: { id?: string | undefined; event?: string | undefined; data: unknown }): string {
  const wrong = (field: string, why: string, cause?: unknown) =>
    new FactstateError('LOG_INVALID_ARGUMENT', `toServerSentEvent: ${field} ${why}`, { ...(cause === undefined ? {} : { cause }), details: { field } })
  if (typeof message !== 'object' || message === null) throw wrong('message', `must be an object ({ id?, event?, data }), not ${shown(message)}`)
  let id: unknown
  let event: unknown
  let data: unknown
  try {
    ;({ id, event, data } = message)
  } catch (error) {
    throw wrong('message', `cannot be read: ${error instanceof Error ? error.message : String(error)}`, error)
  }
  const oneLine = (field: string, value: unknown) => {
    if (typeof value !== 'string') throw wrong(field, `must be a string, not ${shown(value)}`)
    // A line break would end the field early (and a NUL in an id is ignored by the page): not a message of the feed's.
    if (/[\r\n\0]/.test(value)) throw wrong(field, 'must be one line')
    return value === '' ? `${field}:\n` : `${field}: ${value}\n`
  }
  let text: string
  try {
    text = typeof data === 'string' ? data : (JSON.stringify(data) ?? 'null')
  } catch (error) {
    // A BigInt, a cycle, a toJSON that throws: no JSON text to send.
    throw wrong('data', `cannot be written as JSON: ${error instanceof Error ? error.message : String(error)}`, error)
  }
  let wire = ''
  if (id !== undefined) wire += oneLine('id', id)
  if (event !== undefined && event !== '') wire += oneLine('event', event)
  for (const line of text.split(/\r\n|\r|\n/)) wire += `data: ${line}\n`
  return `${wire}\n`
}
