/**
 * The chaos parent's bookkeeping: everything it checks after each kill, while the child is dead.
 *
 * Independently of the log's own checks, the audit reads the stored bytes of every new event
 * straight from LevelDB and carries the digest chain forward from where the last check left it,
 * so a history rewritten between kills is caught even if the log agrees with itself. Then it
 * opens the log (its own continuity checks), runs `verify()`, compares digests, and matches the
 * child's acknowledgements and the external ledger against the facts.
 */
import { open as openFile } from 'node:fs/promises'
import { ClassicLevel } from 'classic-level'
import { isUnusableArguments } from '../actors/tool-arguments.js'
import { isFactstateError } from '../errors.js'
import type { InvocationOutcome, RuntimeEvent } from '../facts/types.js'
import { EMPTY_CHAIN, chainStep, logDigest } from '../store/digest.js'
import { decodeEvent, decodeRecord } from '../store/encoding.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { keys, seqOfEventKey } from '../store/keys.js'
import { projectionOf } from '../store/projection.js'
import { recoverInvocations } from '../store/recovery.js'
import { effectNeedsApproval } from './rules.js'

/** What the child reported about one of its lives. */
export interface ChildReport {
  /** `opened <highWater> <digest>`: the head it found on open, before recovery. */
  opened?: { highWater: number; digest: string }
  /** `recovered <closed> <secondPass> <stillOpen>`. */
  recovered?: { closed: number; again: number; stillOpen: number }
  /** `a <seq> <eventId>`: facts acknowledged as durable. */
  acks: { seq: number; id: string }[]
  /** `v <text>`: violations the child saw itself. */
  violations: string[]
}

/** Parses the child's stdout lines. */
export function parseReport(lines: readonly string[]): ChildReport {
  const report: ChildReport = { acks: [], violations: [] }
  for (const line of lines) {
    const [tag, ...rest] = line.split(' ')
    if (tag === 'a' && rest.length === 2) report.acks.push({ seq: Number(rest[0]), id: rest[1] as string })
    else if (tag === 'opened') report.opened = { highWater: Number(rest[0]), digest: String(rest[1]) }
    else if (tag === 'recovered') report.recovered = { closed: Number(rest[0]), again: Number(rest[1]), stillOpen: Number(rest[2]) }
    else if (tag === 'v') report.violations.push(rest.join(' '))
  }
  return report
}

interface Tracked {
  openStep: string | null
  unsettled: Set<string>
  outcome?: InvocationOutcome
  kind: string
  sessionId: string
}

/** How many of the log's last events each check appends again (see `#checkWithLog`). */
const REPEATED = 64

const isRecovery = (event: RuntimeEvent) => event.id.includes('/recovered/')

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0
}

/** The figures of a chaos run. */
export interface Figures {
  duplicates: number
  lost: number
  digestFailures: number
  unknown: number
  violations: string[]
  stats: Record<string, number>
}

export class Audit {
  #highWater = 0
  #chain: Uint8Array = EMPTY_CHAIN
  #digest = logDigest(0, EMPTY_CHAIN)
  readonly #ids: string[] = ['']
  /** The seq of every event id read so far: an id must never be stored twice. */
  readonly #seqOfId = new Map<string, number>()
  readonly #invocations = new Map<string, Tracked>()
  readonly #dispatched = new Map<string, string>()
  readonly #settled = new Set<string>()
  /** Operations of the read-only `lookup` tool: they have no effect, so no ledger line. */
  readonly #readOnly = new Set<string>()
  readonly #ledgerOps = new Map<string, number>()
  readonly #ledgerKeys = new Map<string, number>()
  #ledgerOffset = 0
  #ledgerRest = ''
  /** Invocations open when the last check ended: the next life's recovery must close exactly these. */
  #openAtKill = new Set<string>()
  #broken = false
  readonly figures: Figures = { duplicates: 0, lost: 0, digestFailures: 0, unknown: 0, violations: [], stats: {} }

  constructor(
    private readonly logDir: string,
    private readonly ledgerFile: string,
  ) {}

  /** True once the log cannot be checked any more (it failed to open or lost its chain). */
  get broken(): boolean {
    return this.#broken
  }

  get highWater(): number {
    return this.#highWater
  }

  #violation(text: string): void {
    if (this.figures.violations.length < 200) this.figures.violations.push(text)
    else this.figures.stats['violations beyond the first 200'] = (this.figures.stats['violations beyond the first 200'] ?? 0) + 1
  }

  #count(name: string, by = 1): void {
    this.figures.stats[name] = (this.figures.stats[name] ?? 0) + by
  }

  #digestFailure(text: string): void {
    this.figures.digestFailures += 1
    this.#violation(`digest: ${text}`)
  }

  /**
   * Checks the log after a kill (the child is dead). `verify` runs the log's full `verify()` too.
   * `recovered` is the recovery report of the life that just ended, checked against what the
   * previous check left open.
   */
  async afterKill(report: ChildReport, options: { verify: boolean; label: string }): Promise<void> {
    for (const text of report.violations) this.#violation(`child: ${text}`)
    if (report.opened && (report.opened.highWater !== this.#highWater || report.opened.digest !== this.#digest)) {
      this.#digestFailure(`${options.label}: the child opened head ${report.opened.highWater} ${report.opened.digest}, the last check left ${this.#highWater} ${this.#digest}`)
    }
    const recoveredNow = new Set<string>()
    await this.#readNewEvents(options.label, recoveredNow)
    if (this.#broken) return
    if (report.recovered) {
      const { closed, again, stillOpen } = report.recovered
      if (again !== 0 || stillOpen !== 0) this.#violation(`${options.label}: a second recovery closed ${again}, ${stillOpen} left open`)
      if (closed !== this.#openAtKill.size) {
        this.#violation(`${options.label}: recovery closed ${closed}, but ${this.#openAtKill.size} invocations were open at the kill`)
      }
      for (const id of this.#openAtKill) {
        if (!recoveredNow.has(id)) this.#violation(`${options.label}: ${id} was open at the kill and not closed by recovery`)
      }
    }
    await this.#checkWithLog(options)
    for (const ack of report.acks) {
      if (!(ack.seq <= this.#highWater && this.#ids[ack.seq] === ack.id)) {
        this.figures.lost += 1
        this.#violation(`${options.label}: acknowledged seq ${ack.seq} (${ack.id}) is ${ack.seq > this.#highWater ? 'beyond the head' : `now ${this.#ids[ack.seq]}`}`)
      }
    }
    this.#count('acknowledged facts', report.acks.length)
    await this.#readLedger(options.label)
    this.#openAtKill = new Set([...this.#invocations].filter(([, tracked]) => !tracked.outcome).map(([id]) => id))
  }

  /** Reads the stored bytes of every event after the last checked one, straight from LevelDB. */
  async #readNewEvents(label: string, recoveredNow: Set<string>): Promise<void> {
    const db = new ClassicLevel<string, Uint8Array>(this.logDir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    try {
      await db.open()
      const stored = await db.get(keys.head)
      const head = stored === undefined ? { highWater: 0, chain: EMPTY_CHAIN } : decodeRecord<{ highWater: number; chain: Uint8Array }>(stored, 'head')
      let chain = this.#chain
      let expected = this.#highWater + 1
      const fresh: { seq: number; event: RuntimeEvent }[] = []
      for await (const [key, bytes] of db.iterator({ gt: keys.event(this.#highWater), lt: keys.eventHigh })) {
        const seq = seqOfEventKey(key)
        if (seq !== expected || seq > head.highWater) {
          this.#digestFailure(`${label}: found event ${seq} where ${expected} was expected (head ${head.highWater})`)
          this.#broken = true
          return
        }
        fresh.push({ seq, event: decodeEvent(bytes, seq) })
        chain = chainStep(chain, seq, bytes)
        expected += 1
      }
      if (expected - 1 !== head.highWater || !equalBytes(chain, new Uint8Array(head.chain))) {
        this.#digestFailure(`${label}: the chain carried from seq ${this.#highWater} does not reach the head ${head.highWater}`)
        this.#broken = true
        return
      }
      for (const { seq, event } of fresh) this.#apply(seq, event, label, recoveredNow)
      this.#highWater = head.highWater
      this.#chain = chain
      this.#digest = logDigest(head.highWater, chain)
    } catch (error) {
      this.#digestFailure(`${label}: reading the stored events failed: ${String(error)}`)
      this.#broken = true
    } finally {
      await db.close().catch(() => undefined)
    }
  }

  async #checkWithLog(options: { verify: boolean; label: string }): Promise<void> {
    let log: EventLog
    try {
      log = await EventLog.open(this.logDir)
    } catch (error) {
      this.#digestFailure(`${options.label}: open failed: ${isFactstateError(error) ? error.code : String(error)}`)
      this.#broken = true
      return
    }
    try {
      const head = log.head()
      if (head.highWater !== this.#highWater || head.digest !== this.#digest) {
        this.#digestFailure(`${options.label}: the log's head ${head.highWater} ${head.digest} differs from the chain read ${this.#highWater} ${this.#digest}`)
      }
      // The id filter this check's close stores (the log is far below the 65,536 events it is
      // otherwise stored from) is the one the next check opens with, caught up with the events the
      // killed writer appended since: repeating the last of them must give back their seqs, never
      // write them again.
      const internals = logInternals(log)
      internals.setIdFilterStoredFrom(0)
      if (await internals.idFilterReady()) this.#count('id filters taken up from the last check')
      for await (const stored of log.events({ from: Math.max(1, head.highWater - REPEATED + 1) })) {
        const seq = await log.append(structuredClone(stored.event))
        if (seq !== stored.seq) this.#violation(`${options.label}: repeating ${stored.event.id} (seq ${stored.seq}) gave seq ${seq}`)
      }
      await internals.buildIdFilter()
      if (options.verify) {
        this.#count('full verifications')
        const verified = await log.verify()
        if (verified.events !== this.#highWater || verified.digest !== this.#digest) {
          this.#digestFailure(`${options.label}: verify() gave ${verified.events} ${verified.digest}`)
        }
      }
    } catch (error) {
      this.#digestFailure(`${options.label}: verify failed: ${isFactstateError(error) ? error.code : String(error)}`)
    } finally {
      await log.close()
    }
  }

  #apply(seq: number, event: RuntimeEvent, label: string, recoveredNow: Set<string>): void {
    this.#ids[seq] = event.id
    const first = this.#seqOfId.get(event.id)
    if (first !== undefined && first !== seq) this.#violation(`${label}: event id ${event.id} is written twice, at seq ${first} and ${seq}`)
    this.#seqOfId.set(event.id, seq)
    const { fact } = event
    const id = event.invocation.invocationId
    this.#count(`fact ${fact.type}`)
    if (fact.type === 'invocation.opened') {
      this.#invocations.set(id, { openStep: null, unsettled: new Set(), kind: fact.input.kind, sessionId: event.invocation.sessionId })
      this.#count(`opened ${fact.input.kind}`)
      if (fact.input.kind !== 'handoff' && fact.input.priorUnknown?.length) this.#count('unknown outcomes acknowledged', fact.input.priorUnknown.length)
      return
    }
    const tracked = this.#invocations.get(id)
    if (!tracked || tracked.outcome) {
      this.#violation(`${label}: seq ${seq} ${fact.type} for ${tracked ? 'ended' : 'unknown'} invocation ${id}`)
      return
    }
    const recovery = isRecovery(event)
    if (recovery && fact.type !== 'model.interrupted' && fact.type !== 'invocation.ended') {
      this.#violation(`${label}: recovery wrote ${fact.type} for ${id}`)
    }
    switch (fact.type) {
      case 'model.requested':
        tracked.openStep = fact.stepId
        return
      case 'model.completed':
      case 'model.interrupted':
        if (recovery && (fact.type !== 'model.interrupted' || fact.status !== 'failed' || tracked.openStep !== fact.stepId)) {
          this.#violation(`${label}: recovery closed step ${fact.stepId} of ${id} wrongly`)
        }
        if (fact.type === 'model.interrupted' && fact.status === 'retryable_failure') this.#count('model retries')
        tracked.openStep = null
        return
      case 'tool.dispatched':
        if (this.#dispatched.has(fact.operationId)) this.#violation(`${label}: operation ${fact.operationId} dispatched twice`)
        this.#dispatched.set(fact.operationId, id)
        tracked.unsettled.add(fact.operationId)
        if (fact.readOnly === true) this.#readOnly.add(fact.operationId)
        if ((fact.readOnly === true) !== (fact.name === 'lookup')) this.#violation(`${label}: ${fact.name} dispatched with readOnly ${String(fact.readOnly)}`)
        if (fact.approval !== undefined) this.#count('calls approved')
        if (fact.callId.endsWith('-y') || fact.callId.endsWith('-z')) this.#violation(`${label}: call ${fact.callId}, whose arguments are not valid, dispatched`)
        if (fact.name === 'effect' && (fact.approval !== undefined) !== effectNeedsApproval(fact.input)) {
          this.#violation(`${label}: ${fact.operationId} dispatched ${fact.approval ? 'with' : 'without'} an approval, against the workload's rule`)
        }
        return
      case 'tool.settled':
        if (this.#settled.has(fact.operationId) || !tracked.unsettled.has(fact.operationId)) {
          this.#violation(`${label}: operation ${fact.operationId} settled twice or never dispatched`)
        }
        tracked.unsettled.delete(fact.operationId)
        this.#settled.add(fact.operationId)
        this.#count(`tool ${fact.outcome.status}`)
        return
      case 'tool.rejected':
        // The workload's calls with arguments the schema refuses (`-z`) are told what is wrong; those
        // with arguments that are not JSON (`-y`, `{"key": `) are told where the text ends.
        if (fact.callId.endsWith('-z') && isUnusableArguments(fact)) {
          this.#violation(`${label}: call ${fact.callId}, whose arguments its schema refuses, rejected without saying what is wrong`)
        }
        if (fact.callId.endsWith('-y') && fact.reason === 'invalid_input' && fact.message !== 'the arguments are not valid JSON (at position 8: the text ends where a value was expected)') {
          this.#violation(`${label}: call ${fact.callId}, whose arguments are not JSON, rejected without saying where they stop being JSON`)
        }
        this.#count(`tool rejected ${fact.reason}${fact.reason === 'invalid_input' && !isUnusableArguments(fact) ? ' (schema)' : ''}`)
        return
      case 'hold.entered':
        return
      case 'hold.released':
        this.#count('holds released')
        return
      case 'invocation.ended': {
        const { outcome } = fact
        tracked.outcome = outcome
        this.#count(`ended ${outcome.status === 'failed' ? `failed ${outcome.class}` : outcome.status}`)
        if (recovery) {
          recoveredNow.add(id)
          const expected = tracked.unsettled.size > 0 ? 'outcome_unknown' : 'host_interrupted'
          if (outcome.status !== 'failed' || outcome.class !== expected || tracked.openStep !== null) {
            this.#violation(`${label}: recovery ended ${id} as ${JSON.stringify(outcome)}, expected ${expected}`)
          }
        } else if (outcome.status === 'failed' && outcome.class === 'outcome_unknown' && tracked.unsettled.size > 0 && / \(its timeoutMs\), nor within /.test(outcome.message ?? '')) {
          // A tool that outlasted its timeoutMs and its grace: not waited for, left uncertain.
          this.#count('tools not waited for past their timeoutMs')
        } else if (
          outcome.status === 'failed' &&
          outcome.class === 'outcome_unknown' &&
          tracked.unsettled.size > 0 &&
          / failed after its signal aborted \(the tool did not finish within [\d,]+ ms \(its timeoutMs\)\)/.test(outcome.message ?? '')
        ) {
          // A tool with effects that threw once its timeoutMs aborted its signal: its effect may have happened, left uncertain.
          this.#count('tools that threw past their timeoutMs')
        } else if (outcome.status === 'failed' && (outcome.class === 'outcome_unknown' || outcome.class === 'host_interrupted')) {
          this.#violation(`${label}: a live run ended ${id} as ${outcome.class}`)
        }
        return
      }
      default: {
        const never: never = fact
        this.#violation(`${label}: unknown fact ${JSON.stringify(never)}`)
      }
    }
  }

  /** Reads the ledger lines added since the last check; every effect must have a durable dispatch. */
  async #readLedger(label: string): Promise<void> {
    const file = await openFile(this.ledgerFile, 'r')
    try {
      const { size } = await file.stat()
      if (size <= this.#ledgerOffset) return
      const buffer = Buffer.alloc(size - this.#ledgerOffset)
      await file.read(buffer, 0, buffer.length, this.#ledgerOffset)
      this.#ledgerOffset = size
      const parts = (this.#ledgerRest + buffer.toString('utf8')).split('\n')
      this.#ledgerRest = parts.pop() ?? ''
      for (const line of parts) {
        const [operationId, key] = line.split(' ') as [string, string]
        this.#count('effects in the ledger')
        const ops = (this.#ledgerOps.get(operationId) ?? 0) + 1
        this.#ledgerOps.set(operationId, ops)
        const keyed = (this.#ledgerKeys.get(key) ?? 0) + 1
        this.#ledgerKeys.set(key, keyed)
        if (ops > 1) {
          this.figures.duplicates += 1
          this.#violation(`${label}: operation ${operationId} executed ${ops} times`)
        } else if (keyed > 1) {
          this.figures.duplicates += 1
          this.#violation(`${label}: effect ${key} executed ${keyed} times (last by ${operationId}): a settled tool was re-executed`)
        }
        if (!this.#dispatched.has(operationId)) this.#violation(`${label}: effect ${operationId} has no durable tool.dispatched`)
        if (this.#readOnly.has(operationId)) this.#violation(`${label}: read-only operation ${operationId} has an effect`)
      }
    } finally {
      await file.close()
    }
  }

  /**
   * The last check, after the final kill: recovery by the parent itself, then the strict
   * end-state rules: every invocation terminal, every effect settled or marked unknown by
   * recovery, every settlement's effect in the ledger exactly once, every acknowledged fact in place.
   */
  async finish(): Promise<void> {
    if (this.#broken) return
    const log = await EventLog.open(this.logDir)
    let recovered: ChildReport['recovered']
    try {
      const closed = await recoverInvocations(log)
      recovered = { closed, again: await recoverInvocations(log), stillOpen: logInternals(log).openInvocations().length }
    } finally {
      await log.close()
    }
    await this.afterKill({ recovered, acks: [], violations: [] }, { verify: true, label: 'final' })
    if (this.#broken) return
    if (this.#ledgerRest.length > 0) this.#violation(`final: the ledger ends in a partial line ${JSON.stringify(this.#ledgerRest)}`)
    const final = await EventLog.open(this.logDir)
    try {
      const internals = logInternals(final)
      let seq = 0
      for await (const stored of final.events()) {
        seq += 1
        if (stored.seq !== seq || this.#ids[seq] !== stored.event.id) {
          this.figures.lost += 1
          this.#violation(`final: seq ${stored.seq} holds ${stored.event.id}, earlier checks saw ${this.#ids[stored.seq]}`)
        }
      }
      for (const [id, tracked] of this.#invocations) {
        if (!tracked.outcome) this.#violation(`final: invocation ${id} is left open`)
        const projection = projectionOf(await internals.invocationRecord(id))
        if (projection.terminal === null) this.#violation(`final: the log has ${id} open`)
        if (tracked.outcome?.status === 'failed' && tracked.outcome.class === 'outcome_unknown') {
          const expected = [...tracked.unsettled].sort()
          if (JSON.stringify([...projection.uncertainOperations].sort()) !== JSON.stringify(expected)) {
            this.#violation(`final: ${id} lists uncertain operations ${projection.uncertainOperations.join(',')}, expected ${expected.join(',')}`)
          }
          this.figures.unknown += tracked.unsettled.size
          for (const op of tracked.unsettled) if (this.#ledgerOps.has(op)) this.#count('unknown outcomes whose effect happened')
        } else if (tracked.unsettled.size > 0) {
          this.#violation(`final: ${id} ended ${tracked.outcome?.status} with unsettled ${[...tracked.unsettled].join(',')}`)
        }
      }
      for (const [operationId] of this.#ledgerOps) {
        const owner = this.#invocations.get(this.#dispatched.get(operationId) ?? '')
        const markedUnknown = owner?.outcome?.status === 'failed' && owner.outcome.class === 'outcome_unknown' && owner.unsettled.has(operationId)
        if (this.#settled.has(operationId) === markedUnknown) {
          this.#violation(`final: effect ${operationId} is ${markedUnknown ? 'both settled and unknown' : 'neither settled nor marked outcome_unknown'}`)
        }
      }
      for (const operationId of this.#settled) {
        if (this.#readOnly.has(operationId)) continue
        if (!this.#ledgerOps.has(operationId)) this.#violation(`final: operation ${operationId} settled, but its effect is not in the ledger`)
      }
      // Read-only operations left uncertain hold up no session: none is among what a session must acknowledge.
      for (const session of new Set([...this.#invocations.values()].map((tracked) => tracked.sessionId))) {
        const { unknown } = await internals.sessionRecord(session)
        for (const op of unknown) if (this.#readOnly.has(op.operationId)) this.#violation(`final: session ${session} must acknowledge read-only ${op.operationId}`)
      }
      for (const [, tracked] of this.#invocations) {
        if (tracked.outcome?.status === 'failed' && tracked.outcome.class === 'outcome_unknown') {
          for (const op of tracked.unsettled) if (this.#readOnly.has(op)) this.#count('read-only calls left uncertain')
        }
      }
      this.figures.stats['facts in the log'] = this.#highWater
      this.figures.stats.invocations = this.#invocations.size
    } finally {
      await final.close()
    }
  }
}

