/**
 * The handoff hold: a reservation waits for the next safe point, where the run is parked; the
 * holder then rolls back (`release`) or seals (`commit`). An in-memory reservation has no
 * authority of its own: only the sealed `invocation.ended{handoff_paused}` fact admits a successor.
 */
import { createHash } from 'node:crypto'
import { hostname } from 'node:os'
import { FactstateError, messageWithoutCode } from '../errors.js'
import { messageOf } from '../store/encoding.js'
import { readOptions } from '../options.js'
import { ID_PATTERN, describeIssues, handoffIntentSchema, invocationSchema, issueFields, safeParseNow } from '../facts/schema.js'
import type { HandoffIntent, HandoffPause, Invocation } from '../facts/types.js'
import { type Secrets, redact, redactDeep } from './redaction.js'

/** Takes holds on one running invocation; one reservation at a time. */
export interface HandoffGate {
  /**
   * Reserves a hold for the next safe point. Throws at once: `HANDOFF_MISMATCH` for an invalid intent
   * (`details.fields`), or one a member of which is the run's provider credential or one of the engine's
   * secrets (the message names the members, never the value; the intent would be written to the log
   * as given), `HANDOFF_BUSY` while another reservation is pending or held,
   * `HANDOFF_UNAVAILABLE` once the run has ended or its signal has aborted; `HANDOFF_MISMATCH`
   * (`details.field: 'options'`) for options that are not {@link ReserveOptions}.
   */
  reserve(intent: HandoffIntent, options?: ReserveOptions): HandoffReservation
}

/** What `reserve()` may be told besides the intent. */
export interface ReserveOptions {
  /**
   * When the run's signal aborts (a shutdown's cancel) while the reservation is pending or its hold
   * is undecided, seal the hold instead of ending the run `cancelled`: calls in flight settle as for
   * a cancel (their signals abort), and at the safe point that follows the hold is taken and sealed
   * at once (`hold.entered`, `invocation.ended{handoff_paused}`, what `commit()` writes), so `wait()`
   * resolves `handoff_paused` and a successor is admitted as for any seal. `ready()` then resolves
   * with the hold already sealed: its `commit()` resolves with the sealed pause, writing nothing, and
   * `release()` rejects `HANDOFF_NOT_HELD`. A hold that cannot be taken or sealed there (the budget
   * spent, the final answer given, a successor that could not be admitted) is given up as without
   * the option, and the run ends `cancelled`; so is every hold when the log closes under the run.
   * Default false.
   */
  sealOnCancel?: boolean | undefined
}

/** A pending hold. */
export interface HandoffReservation {
  /**
   * Resolves at the next safe point with the run held (`hold.entered` is durable), or, with
   * `sealOnCancel`, once the seal a cancel made is durable (the hold is then sealed already). Rejects with
   * `HANDOFF_CANCELLED` after `cancel()`, `HANDOFF_UNAVAILABLE` if the run ends first, and — nothing
   * written, the run goes on — `HANDOFF_CLAIMED` if the intent's claim is already used or
   * `HANDOFF_MISMATCH` if its successor run or invocation id already exists.
   */
  ready(): Promise<HeldInvocation>
  /**
   * Gives the reservation up; the run goes on. Before `ready()` settles it always takes effect (`ready()`
   * rejects `HANDOFF_CANCELLED`): if the actor was already writing `hold.entered`, the hold is rolled
   * back at once (`hold.released`). After `ready()` settled it has no effect, nor once a cancel of the
   * run is writing the seal of a `sealOnCancel` reservation (`ready()` then resolves with it sealed).
   */
  cancel(): void
}

/** A run parked at a safe point. */
export interface HeldInvocation {
  /** The pause `commit()` will seal. */
  preview(): HandoffPause
  /** Rolls back: `hold.released`, and the run continues with its next model request. No effect repeats. */
  release(): Promise<void>
  /**
   * Seals: `invocation.ended{handoff_paused}`; resolves with exactly `preview()` once durable. No further model request.
   * Refused atomically with the seal — nothing written, the run still held — when no successor could
   * be admitted: `HANDOFF_CLAIMED` (the claim was used meanwhile), `HANDOFF_MISMATCH` (the successor run
   * or invocation id exists). `HANDOFF_NOT_HELD` once the hold is released, sealed or ended by cancellation,
   * except that a hold sealed by a cancel (`sealOnCancel`) resolves with its pause, writing nothing.
   */
  commit(): Promise<HandoffPause>
}

/** The invocation a successor must run as: same session and turn, the reserved run and invocation ids. */
export function successorOf(intent: HandoffIntent, source: Invocation): Invocation {
  const read = <T>(parse: () => T, field: 'intent' | 'source'): T => {
    try {
      return parse()
    } catch (error) {
      // A getter that throws, a proxy that refuses to be read: not an intent, nor an invocation.
      throw new FactstateError('HANDOFF_MISMATCH', `successorOf could not read its ${field}: ${messageOf(error)}`, { cause: error, details: { field, fields: [field] } })
    }
  }
  const badIntent = read(() => safeParseNow(handoffIntentSchema, intent), 'intent')
  const badSource = read(() => safeParseNow(invocationSchema, source), 'source')
  if (!badIntent.success || !badSource.success) {
    const fields = [
      ...(badIntent.success ? [] : issueFields(badIntent.error).map((field) => (field === '(root)' ? 'intent' : `intent.${field}`))),
      ...(badSource.success ? [] : issueFields(badSource.error).map((field) => (field === '(root)' ? 'source' : `source.${field}`))),
    ]
    throw new FactstateError('HANDOFF_MISMATCH', `successorOf needs a handoff intent and the source's invocation: ${fields.join(', ')} ${fields.length === 1 ? 'is' : 'are'} not valid`, {
      details: { field: fields[0]?.split('.')[0] ?? 'intent', fields },
    })
  }
  // From the checked copies: the caller's objects are read once.
  return { sessionId: badSource.data.sessionId, turnId: badSource.data.turnId, runId: badIntent.data.successorRunId, invocationId: badIntent.data.successorInvocationId }
}

/** What the holder decided. */
export type HoldDecision = { kind: 'release'; done: Deferred<void> } | { kind: 'commit'; done: Deferred<HandoffPause> }

const ignore = (): void => undefined

/** A promise with its settle functions. */
export class Deferred<T> {
  readonly promise: Promise<T>
  resolve!: (value: T) => void
  reject!: (error: unknown) => void
  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
    // A caller may never await it (a cancelled reservation): that is not an unhandled rejection.
    this.promise.catch(ignore)
  }
}

type ReservationState = 'pending' | 'entering' | 'sealing' | 'held' | 'deciding' | 'done' | 'cancelled'

/** One reservation and its hold, as the actor sees it. */
export class Reservation implements HandoffReservation {
  state: ReservationState = 'pending'
  readonly held = new Deferred<HeldInvocation>()
  /** The holder's next decision; renewed when a commit is refused and the hold stays held. */
  decision = new Deferred<HoldDecision>()
  pause: HandoffPause | undefined
  /** The decision being carried out, until the actor settles it. */
  #deciding: HoldDecision | undefined
  /** What a decision that comes after the hold ended is told (`HANDOFF_NOT_HELD`): how it ended. */
  #notHeld: string | undefined
  /** The pause a cancel sealed (`sealOnCancel`): a `commit()` resolves with it. */
  #sealed: HandoffPause | undefined

  constructor(
    readonly intent: HandoffIntent,
    private readonly onCancel: (reservation: Reservation) => void,
    /** See `ReserveOptions.sealOnCancel`. */
    readonly sealOnCancel = false,
  ) {}

  ready(): Promise<HeldInvocation> {
    return this.held.promise
  }

  cancel(): void {
    // While `hold.entered` is being written the cancel still counts: the actor sees it once the
    // fact is durable and rolls the hold back (`hold.released`), so `ready()` never resolves.
    if (this.state !== 'pending' && this.state !== 'entering') return
    this.state = 'cancelled'
    this.held.reject(new FactstateError('HANDOFF_CANCELLED', `reservation ${this.intent.handoffId} was cancelled`))
    this.onCancel(this)
  }

  /** Called by the actor before it appends `hold.entered`. */
  begin(): void {
    this.state = 'entering'
  }

  /** Called by the actor once `hold.entered` is durable (and the reservation was not cancelled meanwhile). */
  enter(pause: HandoffPause): void {
    this.state = 'held'
    this.pause = pause
    this.held.resolve(this.#holder(pause))
  }

  /** Called by the actor as it seals a pending reservation on a cancel: `cancel()` comes too late from here on. */
  seal(): void {
    this.state = 'sealing'
  }

  /**
   * Called by the actor once the seal a cancel made is durable (`sealOnCancel`): `ready()` resolves
   * with the hold sealed, and a decision taken meanwhile is told so (a commit resolves with the pause).
   */
  sealed(pause: HandoffPause): void {
    this.pause = pause
    this.#sealed = pause
    this.#notHeld = `hold ${this.intent.handoffId} is no longer held: it was sealed when the run was cancelled`
    if (this.state === 'sealing') this.held.resolve(this.#holder(pause))
    const deciding = this.#deciding
    if (deciding?.kind === 'commit') deciding.done.resolve(structuredClone(pause))
    else deciding?.done.reject(new FactstateError('HANDOFF_NOT_HELD', this.#notHeld))
    this.#deciding = undefined
    this.state = 'done'
  }

  #holder(pause: HandoffPause): HeldInvocation {
    const reservation = this
    return {
      preview() {
        return structuredClone(pause)
      },
      release() {
        return reservation.#decide((done) => ({ kind: 'release', done }), new Deferred<void>())
      },
      commit() {
        // What the holder asked for is what the cancel sealed: nothing more to write.
        if (reservation.#sealed) return Promise.resolve(structuredClone(reservation.#sealed))
        return reservation.#decide((done) => ({ kind: 'commit', done }), new Deferred<HandoffPause>())
      },
    }
  }

  #decide<T>(make: (done: Deferred<T>) => HoldDecision, done: Deferred<T>): Promise<T> {
    if (this.state !== 'held') {
      return Promise.reject(new FactstateError('HANDOFF_NOT_HELD', this.#notHeld ?? `hold ${this.intent.handoffId} is no longer held`))
    }
    this.state = 'deciding'
    const decision = make(done)
    this.#deciding = decision
    this.decision.resolve(decision)
    return done.promise
  }

  /** Called by the actor once a decision is durable. */
  settle(): void {
    this.#notHeld = `hold ${this.intent.handoffId} is no longer held: it was ${this.#deciding?.kind === 'commit' ? 'committed' : 'released'}`
    this.state = 'done'
    this.#deciding = undefined
  }

  /** Called by the actor when the log refused the hold before it was entered: `ready()` rejects, the run goes on. */
  refuse(error: unknown): void {
    if (this.state === 'entering' || this.state === 'sealing') this.held.reject(error)
    this.state = 'done'
  }

  /** Called by the actor when the log refused a commit: the commit rejects with `error`, the hold stays held. */
  reopen(error: unknown): void {
    this.#deciding?.done.reject(error)
    this.#deciding = undefined
    this.decision = new Deferred<HoldDecision>()
    this.state = 'held'
  }

  /** Called by the actor when the run ends or fails before or while the hold is taken. */
  abandon(error: FactstateError): void {
    if (this.state === 'pending' || this.state === 'entering' || this.state === 'sealing') this.held.reject(error)
    if (this.state !== 'done') {
      const why = messageWithoutCode(error)
      this.#notHeld ??= error.code === 'HANDOFF_NOT_HELD' ? why : `hold ${this.intent.handoffId} is no longer held: ${why}`
    }
    // A decision taken as the hold was abandoned (an abort in the same tick as a commit) is refused, never left pending.
    if (this.#deciding) {
      const refusal =
        error.code === 'HANDOFF_NOT_HELD'
          ? error
          : new FactstateError('HANDOFF_NOT_HELD', `hold ${this.intent.handoffId} is no longer held: ${messageWithoutCode(error)}`, { cause: error })
      this.#deciding.done.reject(refusal)
      this.#deciding = undefined
    }
    this.state = 'done'
  }
}

const REUSED = "is the held run's own: the successor must have its own run and invocation ids"

/** The invocation whose gate is parsing an intent right now (parsing is synchronous). */
let reservingFor: Invocation | undefined

/**
 * `handoffIntentSchema`, refusing a successor that reuses the run or invocation id of the gate's own
 * invocation (`reservingFor`), field by field, so that one reading of the caller's object finds every
 * bad field at once (a malformed id and a reused one alike). One schema for every gate: a schema of
 * its own would cost each held invocation ~7 KiB.
 */
const reserveIntentSchema = handoffIntentSchema.extend({
  successorRunId: handoffIntentSchema.shape.successorRunId.refine((id) => id !== reservingFor?.runId, REUSED),
  successorInvocationId: handoffIntentSchema.shape.successorInvocationId.refine((id) => id !== reservingFor?.invocationId, REUSED),
})

/** The members of an intent, each written to the log as given. */
const INTENT_MEMBERS = ['handoffId', 'hostEpoch', 'rootRunId', 'successorRunId', 'successorInvocationId', 'claimId'] as const satisfies readonly (keyof HandoffIntent)[]

/** What a gate asks of the one answering for its run (see `Gate`). */
export interface GateOwner {
  /** Why the run takes no more holds though it has not ended yet, if it does not. */
  holdRefusal(): FactstateError | undefined
  /** The run's secrets, if it has any yet. */
  holdSecrets(): Secrets | undefined
}

const NO_OWNER: GateOwner = { holdRefusal: () => undefined, holdSecrets: () => undefined }

/** The gate of one running invocation. */
export class Gate implements HandoffGate {
  current: Reservation | undefined
  closed: FactstateError | undefined

  /**
   * Who answers for the run (its actor; the engine while the run is being admitted): why the run
   * takes no more holds though it has not ended yet (it is being cancelled), and the run's secrets,
   * none of which an intent's member may be, whole, as data loses them (`Secrets.inData`: as a run's
   * recorded ids at its start); a refusal's message loses them as a failure message does. An object
   * with methods, not two closures: a held run's actor is its own owner and keeps nothing more.
   */
  #owner: GateOwner

  constructor(
    private readonly invocation: Invocation,
    owner: GateOwner = NO_OWNER,
  ) {
    this.#owner = owner
  }

  /** Says from now on who answers for the run: its actor takes over a gate made while the run was being admitted. */
  refuseWith(owner: GateOwner): void {
    this.#owner = owner
  }

  reserve(given: HandoffIntent, options?: ReserveOptions): HandoffReservation {
    let parsed: ReturnType<typeof reserveIntentSchema.safeParse>
    // Restored after: a getter of the intent could make another gate reserve meanwhile.
    const outer = reservingFor
    reservingFor = this.invocation
    try {
      parsed = safeParseNow(reserveIntentSchema, given)
    } catch (error) {
      // A getter that throws, a proxy that refuses to be read: not an intent.
      throw new FactstateError('HANDOFF_MISMATCH', `the handoff intent could not be read: ${messageOf(error)}`, { cause: error, details: { field: 'intent', fields: ['intent'] } })
    } finally {
      reservingFor = outer
    }
    if (!parsed.success) {
      // An unknown member is named (zod quotes it): not one that is a secret.
      const secrets = this.#owner.holdSecrets()
      const fields = secrets === undefined ? issueFields(parsed.error) : redactDeep(issueFields(parsed.error), secrets)
      if (parsed.error.issues.every((issue) => issue.message === REUSED)) {
        throw new FactstateError('HANDOFF_MISMATCH', 'the successor must have its own run and invocation ids', { details: { field: fields[0] ?? 'successorRunId', fields } })
      }
      const issues = describeIssues(parsed.error)
      throw new FactstateError('HANDOFF_MISMATCH', `the handoff intent is not valid: ${secrets === undefined ? issues : redact(issues, secrets)}`, { details: { field: 'intent', fields } })
    }
    // The checked copy is what is kept: the caller's object is read once (a getter, an inherited or
    // hidden member, a proxy cannot make the hold differ from what was checked).
    const intent = parsed.data as HandoffIntent
    // Every member is written as given (`invocation.ended{handoff_paused}`'s pause, the successor's
    // ids): one that is a secret is refused as a run's ids are at its start. Not quoted.
    const secrets = this.#owner.holdSecrets()?.inData
    const secret = secrets === undefined || secrets.whole.length === 0 ? [] : INTENT_MEMBERS.filter((field) => redact(intent[field], secrets) !== intent[field])
    if (secret.length > 0) {
      throw new FactstateError(
        'HANDOFF_MISMATCH',
        `the handoff intent's ${secret.join(', ')} ${secret.length === 1 ? 'holds' : 'hold'} the provider's credential (its apiKey or a credential header's value) or one of the engine's secrets: the intent would be written to the log as given, and the log is kept free of them`,
        { details: { field: secret[0] as string, fields: secret } },
      )
    }
    const { sealOnCancel } = readOptions(options, ['sealOnCancel'], { call: 'reserve', code: 'HANDOFF_MISMATCH', details: () => ({ field: 'options', fields: ['options'] }) })
    if (sealOnCancel !== undefined && typeof sealOnCancel !== 'boolean') {
      throw new FactstateError('HANDOFF_MISMATCH', `reserve: options.sealOnCancel must be a boolean, not ${typeof sealOnCancel}`, { details: { field: 'options', fields: ['options'] } })
    }
    const refused = this.closed ?? this.#owner.holdRefusal()
    if (refused) throw refused
    if (this.current && this.current.state !== 'done' && this.current.state !== 'cancelled') {
      throw new FactstateError('HANDOFF_BUSY', `hold ${this.current.intent.handoffId} is still ${this.current.state}`)
    }
    const reservation = new Reservation(
      intent,
      (cancelled) => {
        if (this.current === cancelled) this.current = undefined
      },
      sealOnCancel === true,
    )
    this.current = reservation
    this.#reserved?.()
    return reservation
  }

  #reserved: (() => void) | undefined

  /** Calls `wake` once at the next reservation (one listener at a time); returns what stops listening. */
  onReserve(wake: () => void): () => void {
    const listener = () => {
      this.#reserved = undefined
      wake()
    }
    this.#reserved = listener
    return () => {
      if (this.#reserved === listener) this.#reserved = undefined
    }
  }

  /** The reservation waiting for a safe point, if any. */
  pending(): Reservation | undefined {
    return this.current?.state === 'pending' ? this.current : undefined
  }

  /** No more reservations: the invocation has ended. */
  close(error: FactstateError): void {
    this.closed = error
    this.current?.abandon(error)
  }
}

/** What `intentFor` may be told besides the run and the handoff id. */
export interface IntentOptions {
  /** Who takes the hold, recorded in the seal and not interpreted (default `<hostname>:<pid>`, as an id). */
  hostEpoch?: string | undefined
  /** The first run of the turn's chain of successors, recorded and not interpreted (default: the run's own id). */
  rootRunId?: string | undefined
}

/** The most an id holds (facts/schema.ts). */
const ID_LENGTH = 128

/** `id` as an id: kept when it fits, else cut and told apart from every other cut by a digest of the whole. */
export function fitted(id: string): string {
  if (id.length <= ID_LENGTH) return id
  return `${id.slice(0, ID_LENGTH - 25)}.${createHash('sha256').update(id).digest('hex').slice(0, 24)}`
}

/**
 * A handoff intent for a hold on `run` (the running invocation's `invocation`, or a tool's
 * `context.invocation`), with the ids a seal reserves made from the run's invocation id, which is
 * unique in the log as the claim must be (a run id is unique only in its session), and `handoffId`
 * (one per hold of that invocation, without a dot, so that no two holds get one id): the successor's run id `<runId>.<handoffId>` (its session's),
 * its invocation id `<invocationId>.<handoffId>`, the claim `<invocationId>.<handoffId>.claim`; an id
 * that would be longer than 128 characters is cut and ends with a digest of the whole. `HANDOFF_MISMATCH`
 * (`details.field`: `run`, `handoffId`, `options`) for what is not an invocation, an id or options.
 *
 * @example
 * ```ts
 * const held = await running.handoff().reserve(intentFor(running.invocation, 'review')).ready()
 * ```
 */
export function intentFor(run: Invocation, handoffId: string, options: IntentOptions = {}): HandoffIntent {
  const refused = (field: 'run' | 'handoffId' | 'options', why: string, cause?: unknown) =>
    new FactstateError('HANDOFF_MISMATCH', `intentFor: ${why}`, { ...(cause === undefined ? {} : { cause }), details: { field, fields: [field] } })
  let source: Invocation
  let given: IntentOptions
  try {
    const checked = invocationSchema.safeParse(run)
    if (!checked.success) throw refused('run', `run must be a run's invocation ({ sessionId, turnId, runId, invocationId }): ${describeIssues(checked.error)}`)
    source = checked.data
    // Without a dot, the handoff id is what follows the last dot of each id made from it, so two holds
    // never get one id (run a.b's hold c and run a's hold b.c would both make a.b.c).
    if (typeof handoffId !== 'string' || !ID_PATTERN.test(handoffId) || handoffId.includes('.')) {
      throw refused('handoffId', 'handoffId must be an id without a dot: 1–128 characters from [A-Za-z0-9_:-] (the ids made from it join it to the invocation id with one)')
    }
    given = readOptions(options, ['hostEpoch', 'rootRunId'], { call: 'intentFor', code: 'HANDOFF_MISMATCH', details: () => ({ field: 'options', fields: ['options'] }) }) as IntentOptions
  } catch (error) {
    if (error instanceof FactstateError) throw error
    throw refused('run', `intentFor could not read its arguments: ${messageOf(error)}`, error)
  }
  for (const field of ['hostEpoch', 'rootRunId'] as const) {
    const value = given[field]
    if (value !== undefined && (typeof value !== 'string' || !ID_PATTERN.test(value))) throw refused('options', `options.${field} must be an id: 1–128 characters from [A-Za-z0-9._:-]`)
  }
  return {
    handoffId,
    hostEpoch: given.hostEpoch ?? fitted(`${hostname()}:${process.pid}`.replace(/[^A-Za-z0-9._:-]/g, '-')),
    rootRunId: given.rootRunId ?? source.runId,
    successorRunId: fitted(`${source.runId}.${handoffId}`),
    successorInvocationId: fitted(`${source.invocationId}.${handoffId}`),
    claimId: fitted(`${source.invocationId}.${handoffId}.claim`),
  }
}
