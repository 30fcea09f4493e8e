/**
 * A reusable behavioural suite for fact logs, in the spirit of abstract-level's test suite: give
 * it a name and a factory that opens a log in a directory, and it registers a uvu suite with
 * the core rules of the log contract (DESIGN §2, §4, §8): gapless seqs, idempotent re-append,
 * conflicts, validation, sealing, integrity refusals, all-or-nothing prefixes and projections,
 * run boundaries, close semantics and atomic `appendAll`.
 *
 * Every test runs in a fresh temporary directory that is removed afterwards, is bounded in
 * time, closes every log it opens, and asserts on stable codes, seqs, digests and counts —
 * never on messages.
 *
 * This module imports `uvu`, a development dependency: import it from test code only.
 *
 * @example
 * ```ts
 * import { EventLog } from 'factstate'
 * import { logConformanceSuite } from './store/conformance.js'
 * logConformanceSuite({ name: 'EventLog', open: (dir) => EventLog.open(dir) })
 * ```
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact, Invocation, InvocationOutcome, RuntimeEvent, StoredEvent, ToolCall } from '../facts/types.js'
import { canonical } from './encoding.js'
import type { LogPrefix, RunSource } from './event-log.js'

/** What the suite needs of a log: the public surface of {@link EventLog} plus `appendAll`. */
export interface ConformantLog {
  append(event: RuntimeEvent): Promise<number>
  appendAll(events: RuntimeEvent[]): Promise<number[]>
  prefix(maxEvents: number, maxBytes: number): Promise<LogPrefix>
  runSource(sessionId: string, runId: string): Promise<RunSource | undefined>
  verify(): Promise<{ events: number; digest: string }>
  close(): Promise<void>
}

export interface LogConformanceOptions {
  /** The suite's title. */
  name: string
  /** Opens (creating if needed) a log in `dir`; called again on the same `dir` to reopen. */
  open: (dir: string) => Promise<ConformantLog>
  /** Bound of each test, in ms (default 15 000). */
  timeoutMs?: number
}

const ALL = Number.MAX_SAFE_INTEGER
const DIGEST = /^sha256:[0-9a-f]{64}$/
const REQUEST_DIGEST = `sha256:${'0'.repeat(64)}`
const CATALOG_DIGEST = `sha256:${'c'.repeat(64)}`

// ---------------------------------------------------------------------------------------------
// Builders

function invocationOf(name: string, session = `session-${name}`): Invocation {
  return { sessionId: session, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `inv-${name}` }
}

const f = {
  opened: (content = 'question'): Fact => ({
    type: 'invocation.opened',
    input: { kind: 'message', content },
    configuration: { cwd: '/work' },
    execution: { model: 'model-x', providerOptions: {}, cwd: '/work', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] } },
  }),
  requested: (stepId: string): Fact => ({ type: 'model.requested', stepId, model: 'model-x', requestDigest: REQUEST_DIGEST }),
  completed: (stepId: string, toolCalls: ToolCall[] = []): Fact => ({
    type: 'model.completed',
    stepId,
    output: { toolCalls, finishReason: toolCalls.length > 0 ? 'tool_calls' : 'stop' },
  }),
  interrupted: (stepId: string): Fact => ({ type: 'model.interrupted', stepId, status: 'failed' }),
  dispatched: (operationId: string, input: unknown = { value: 42 }): Fact => ({
    type: 'tool.dispatched',
    operationId,
    callId: `call-${operationId}`,
    name: 'echo',
    input,
  }),
  settled: (operationId: string, output: unknown = 'ok'): Fact => ({ type: 'tool.settled', operationId, outcome: { status: 'succeeded', output } }),
  rejected: (operationId: string): Fact => ({
    type: 'tool.rejected',
    operationId,
    callId: `call-${operationId}`,
    name: 'missing',
    input: {},
    reason: 'unknown_tool',
  }),
  holdEntered: (handoffId: string): Fact => ({ type: 'hold.entered', handoffId }),
  holdReleased: (handoffId: string): Fact => ({ type: 'hold.released', handoffId }),
  ended: (outcome: InvocationOutcome = { status: 'completed' }): Fact => ({ type: 'invocation.ended', outcome }),
}

const call = (operationId: string): ToolCall => ({ callId: `call-${operationId}`, name: 'echo', arguments: '{"value":42}' })

/** Makes the events of one invocation, with ids `<invocationId>/<n>`. */
class Maker {
  n = 0
  constructor(readonly invocation: Invocation) {}
  next(fact: Fact): RuntimeEvent {
    this.n += 1
    return { id: `${this.invocation.invocationId}/${this.n}`, recordedAt: 1_700_000_000_000 + this.n, invocation: this.invocation, fact }
  }
  many(list: Fact[]): RuntimeEvent[] {
    return list.map((fact) => this.next(fact))
  }
}

/** The 8 facts of a complete invocation with one tool call. */
function lifecycle(): Fact[] {
  return [
    f.opened(),
    f.requested('s1'),
    f.completed('s1', [call('op1')]),
    f.dispatched('op1'),
    f.settled('op1'),
    f.requested('s2'),
    f.completed('s2'),
    f.ended(),
  ]
}

function handoffPause(handoffId: string) {
  return {
    intent: { handoffId, hostEpoch: 'epoch-1', rootRunId: 'run-root', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: 'claim-1' },
    remainingSteps: 2,
    execution: { model: 'model-x', providerOptions: {}, cwd: '/work', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] } },
  }
}

// ---------------------------------------------------------------------------------------------
// Harness

async function inTempDir(ms: number, body: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'factstate-conformance-'))
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    await Promise.race([
      body(dir),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`test did not finish within ${ms} ms`)), ms)
      }),
    ])
  } finally {
    clearTimeout(timer)
    await rm(dir, { recursive: true, force: true })
  }
}

/**
 * uvu's reporter reads `err.details` as a string: an error with object details (a
 * FactstateError) makes it drop the rest of the suite and still exit 0. Re-throw such errors as
 * plain Errors that keep the code, message, details and stack.
 */
function reportable(error: unknown): unknown {
  const source = error as { name?: unknown; message?: unknown; stack?: unknown; details?: unknown } | null | undefined
  if (error instanceof Error && (source?.details === undefined || typeof source.details === 'string')) return error
  const details = source?.details === undefined ? '' : ` details=${JSON.stringify(source.details)}`
  const plain = new Error(`${String(source?.name ?? 'thrown')}: ${String(source?.message ?? source)}${details}`, { cause: error })
  if (typeof source?.stack === 'string') plain.stack = `${plain.message}\n${source.stack.split('\n').slice(1).join('\n')}`
  return plain
}

/** The error a refused call rejects with; fails the test when the call succeeds. */
async function refusal(run: () => Promise<unknown>): Promise<{ code: unknown; details?: Record<string, unknown> }> {
  let result: unknown
  try {
    result = await run()
  } catch (error) {
    assert.ok(error !== null && typeof error === 'object' && 'code' in error, `expected an error with a code, got ${String(error)}`)
    return error as { code: unknown; details?: Record<string, unknown> }
  }
  assert.unreachable(`expected a refusal, but the call resolved with ${JSON.stringify(result)}`)
  throw new Error('unreachable')
}

async function expectCode(run: () => Promise<unknown>, code: string, what = code): Promise<void> {
  const error = await refusal(run)
  assert.is(error.code, code, what)
}

interface Snapshot {
  highWater: number
  digest: string
}

async function snapshot(log: ConformantLog): Promise<Snapshot> {
  const verified = await log.verify()
  const prefix = await log.prefix(ALL, ALL)
  assert.is(prefix.highWater, verified.events, 'prefix and verify agree on the high-water')
  assert.is(prefix.digest, verified.digest, 'prefix and verify agree on the digest')
  assert.is(prefix.events.length, prefix.highWater, 'the prefix holds every event')
  return { highWater: verified.events, digest: verified.digest }
}

/** The events as the log must return them: undefined members dropped. */
const stored = (events: RuntimeEvent[], firstSeq: number): StoredEvent[] => events.map((event, index) => ({ seq: firstSeq + index, event: canonical(event) }))

// ---------------------------------------------------------------------------------------------
// The suite

/** Registers and runs the conformance suite for the log that `options.open` opens. */
export function logConformanceSuite(options: LogConformanceOptions): void {
  const test = suite(`conformance: ${options.name}`)
  const ms = options.timeoutMs ?? 15_000
  const it = (name: string, body: (dir: string) => Promise<void>) =>
    test(name, async () => {
      try {
        await inTempDir(ms, body)
      } catch (error) {
        throw reportable(error)
      }
    })
  const withLog = async (dir: string, body: (log: ConformantLog) => Promise<void>) => {
    const log = await options.open(dir)
    try {
      await body(log)
    } finally {
      await log.close()
    }
  }

  // -- 1. seqs, idempotency, conflicts ----------------------------------------------------------

  it('an empty log has high-water 0, an empty prefix and one digest', async (dir) => {
    await withLog(dir, async (log) => {
      const verified = await log.verify()
      assert.is(verified.events, 0)
      assert.match(verified.digest, DIGEST)
      const prefix = await log.prefix(0, 0)
      assert.is(prefix.highWater, 0)
      assert.equal(prefix.events, [])
      assert.is(prefix.digest, verified.digest)
    })
  })

  it('append assigns gapless seqs from 1 in append order, and the prefix returns the events as appended', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const b = new Maker(invocationOf('b'))
    const eventsA = a.many(lifecycle())
    const eventsB = b.many(lifecycle())
    let before: Snapshot | undefined
    await withLog(dir, async (log) => {
      const seqs: number[] = []
      for (const event of eventsA) seqs.push(await log.append(event))
      assert.equal(seqs, [1, 2, 3, 4, 5, 6, 7, 8])
      assert.equal(await log.appendAll(eventsB), [9, 10, 11, 12, 13, 14, 15, 16])
      before = await snapshot(log)
      assert.is(before.highWater, 16)
      assert.match(before.digest, DIGEST)
      const prefix = await log.prefix(ALL, ALL)
      assert.equal(prefix.events, stored([...eventsA, ...eventsB], 1))
    })
    await withLog(dir, async (log) => {
      assert.equal(await snapshot(log), before, 'reopening gives the same high-water and digest')
      assert.is(await log.append(new Maker(invocationOf('c')).next(f.opened())), 17, 'seqs go on after a reopen')
    })
  })

  it('each append changes the digest', async (dir) => {
    await withLog(dir, async (log) => {
      const seen = new Set([(await log.verify()).digest])
      const a = new Maker(invocationOf('a'))
      for (const fact of lifecycle()) {
        await log.append(a.next(fact))
        seen.add((await log.verify()).digest)
      }
      assert.is(seen.size, 9)
    })
  })

  it('an idempotent re-append returns the original seq and writes nothing', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const events = a.many([f.opened(), f.requested('s1'), f.completed('s1', [call('op1')]), f.dispatched('op1')])
    let before: Snapshot | undefined
    await withLog(dir, async (log) => {
      assert.equal(await log.appendAll(events), [1, 2, 3, 4])
      before = await snapshot(log)
      assert.is(await log.append(events[1]!), 2, 'the same object')
      assert.is(await log.append(structuredClone(events[2]!)), 3, 'an equal copy')
      const withUndefined = structuredClone(events[2]!) as RuntimeEvent & { fact: { output: Record<string, unknown> } }
      withUndefined.fact.output.text = undefined
      withUndefined.fact.output.usage = undefined
      assert.is(await log.append(withUndefined), 3, 'undefined members do not change the bytes')
      assert.equal(await log.appendAll([events[0]!, events[3]!]), [1, 4], 'appendAll of stored events')
      assert.equal(await snapshot(log), before, 'nothing was written')
    })
    await withLog(dir, async (log) => {
      assert.is(await log.append(structuredClone(events[1]!)), 2, 'idempotent after a reopen')
      assert.equal(await snapshot(log), before)
    })
  })

  it('the same new event appended twice concurrently is written once', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.append(a.next(f.opened()))
      const event = a.next(f.requested('s1'))
      const seqs = await Promise.all([log.append(event), log.append(structuredClone(event)), log.append(event)])
      assert.equal(seqs, [2, 2, 2])
      assert.is((await snapshot(log)).highWater, 2)
    })
  })

  it('the same id with other bytes is LOG_CONFLICT and writes nothing', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const events = a.many([f.opened(), f.requested('s1'), f.completed('s1')])
    await withLog(dir, async (log) => {
      await log.appendAll(events)
      const before = await snapshot(log)
      const second = events[1]!
      await expectCode(() => log.append({ ...second, recordedAt: second.recordedAt + 1 }), 'LOG_CONFLICT', 'another recordedAt')
      await expectCode(() => log.append({ ...second, fact: f.requested('s9') }), 'LOG_CONFLICT', 'another fact')
      await expectCode(() => log.append({ ...second, invocation: invocationOf('b'), fact: f.opened() }), 'LOG_CONFLICT', 'another invocation')
      await expectCode(() => log.appendAll([a.next(f.ended({ status: 'cancelled', source: 'user' })), { ...second, recordedAt: 1 }]), 'LOG_CONFLICT', 'in a batch')
      assert.equal(await snapshot(log), before)
    })
    await withLog(dir, async (log) => {
      const before = await snapshot(log)
      await expectCode(() => log.append({ ...events[2]!, recordedAt: 5 }), 'LOG_CONFLICT', 'after a reopen')
      assert.equal(await snapshot(log), before)
    })
  })

  it('two different events with one new id in the same tick: one is written, the other is LOG_CONFLICT', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.append(a.next(f.opened()))
      const event = a.next(f.requested('s1'))
      const results = await Promise.allSettled([log.append(event), log.append({ ...event, recordedAt: event.recordedAt + 1 })])
      assert.is(results[0]!.status, 'fulfilled')
      assert.is((results[0] as PromiseFulfilledResult<number>).value, 2)
      assert.is(results[1]!.status, 'rejected')
      assert.is(((results[1] as PromiseRejectedResult).reason as { code: string }).code, 'LOG_CONFLICT')
      const prefix = await log.prefix(ALL, ALL)
      assert.is(prefix.highWater, 2)
      assert.equal(prefix.events[1]!.event, canonical(event))
    })
  })

  // -- 2. validation, sealing, integrity --------------------------------------------------------

  it('malformed events are LOG_INVALID_EVENT and write nothing', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.append(a.next(f.opened()))
      const before = await snapshot(log)
      const base = a.next(f.requested('s1'))
      const dispatch = (input: unknown) => ({ ...base, fact: { ...f.dispatched('op1'), input } })
      class Point {
        x = 1
      }
      const variants: [string, unknown][] = [
        ['not an object: null', null],
        ['not an object: string', 'event'],
        ['not an object: array', [base]],
        ['empty id', { ...base, id: '' }],
        ['id with a space', { ...base, id: 'a b' }],
        ['id of 513 characters', { ...base, id: 'x'.repeat(513) }],
        ['numeric id', { ...base, id: 7 }],
        ['missing id', { recordedAt: base.recordedAt, invocation: base.invocation, fact: base.fact }],
        ['negative recordedAt', { ...base, recordedAt: -1 }],
        ['fractional recordedAt', { ...base, recordedAt: 1.5 }],
        ['NaN recordedAt', { ...base, recordedAt: Number.NaN }],
        ['string recordedAt', { ...base, recordedAt: '1' }],
        ['missing recordedAt', { id: base.id, invocation: base.invocation, fact: base.fact }],
        ['empty sessionId', { ...base, invocation: { ...base.invocation, sessionId: '' } }],
        ['runId with a slash', { ...base, invocation: { ...base.invocation, runId: 'a/b' } }],
        ['invocationId of 129 characters', { ...base, invocation: { ...base.invocation, invocationId: 'x'.repeat(129) } }],
        ['turnId with a space', { ...base, invocation: { ...base.invocation, turnId: 'turn a' } }],
        ['missing turnId', { ...base, invocation: { sessionId: 'session-a', runId: 'run-a', invocationId: 'inv-a' } }],
        ['extra invocation field', { ...base, invocation: { ...base.invocation, extra: 'x' } }],
        ['unknown fact type', { ...base, fact: { type: 'model.exploded', stepId: 's1' } }],
        ['missing fact type', { ...base, fact: { stepId: 's1', model: 'm', requestDigest: REQUEST_DIGEST } }],
        ['missing fact field', { ...base, fact: { type: 'model.requested', stepId: 's1', model: 'm' } }],
        ['extra fact field', { ...base, fact: { ...base.fact, extra: 1 } }],
        ['extra event field', { ...base, extra: 1 }],
        ['wrongly typed fact field', { ...base, fact: { ...base.fact, stepId: 5 } }],
        ['malformed digest', { ...base, fact: { ...base.fact, requestDigest: 'sha256:xyz' } }],
        ['unknown outcome status', { ...base, fact: { type: 'invocation.ended', outcome: { status: 'exploded' } } }],
        ['unknown interrupt status', { ...base, fact: { type: 'model.interrupted', stepId: 's1', status: 'bored' } }],
        ['tool input: a function', dispatch(() => 1)],
        ['tool input: NaN', dispatch(Number.NaN)],
        ['tool input: Infinity', dispatch(Number.POSITIVE_INFINITY)],
        ['tool input: undefined', dispatch(undefined)],
        ['tool input: a bigint', dispatch(1n)],
        ['tool input: a symbol', dispatch(Symbol('s'))],
        ['tool input: a Date', dispatch(new Date(0))],
        ['tool input: a Map', dispatch(new Map([['a', 1]]))],
        ['tool input: a class instance', dispatch(new Point())],
        ['tool input: bytes', dispatch(new Uint8Array([1, 2]))],
        ['tool input: a nested function', dispatch({ a: [1, { b: () => 2 }] })],
        ['tool input: a nested NaN', dispatch({ a: [Number.NaN] })],
        ['tool input: a sparse array', dispatch([1, , 3])],
        ['a denied call without the approver\'s decision', { ...base, fact: { ...f.rejected('op1'), reason: 'denied' } }],
        ['an approver\'s decision on a call rejected as cancelled', { ...base, fact: { ...f.rejected('op1'), reason: 'cancelled', approval: { by: 'ana' } } }],
        ['what is wrong with the input, on a call rejected as an unknown tool', { ...base, fact: { ...f.rejected('op1'), reason: 'unknown_tool', message: 'amount: wrong' } }],
      ]
      for (const [what, event] of variants) {
        await expectCode(() => log.append(event as RuntimeEvent), 'LOG_INVALID_EVENT', what)
      }
      await expectCode(() => log.appendAll([base, variants[4]![1] as RuntimeEvent]), 'LOG_INVALID_EVENT', 'one malformed event in a batch')
      for (const [what, event] of variants.slice(-3, -1)) {
        const error = await refusal(() => log.append(event as RuntimeEvent))
        assert.equal(error.details?.fields, ['fact.approval'], what)
      }
      const [what, unknownWithMessage] = variants.at(-1)!
      assert.equal((await refusal(() => log.append(unknownWithMessage as RuntimeEvent))).details?.fields, ['fact.message'], what)
      assert.equal(await snapshot(log), before, 'nothing was written')
      assert.is(await log.append(base), 2, 'no seq was consumed')
    })
  })

  it('after invocation.ended every new fact is LOG_SEALED, while stored events still re-append idempotently', async (dir) => {
    const outcomes: InvocationOutcome[] = [
      { status: 'completed' },
      { status: 'failed', class: 'model_failed', message: 'boom' },
      { status: 'cancelled', source: 'user' },
    ]
    await withLog(dir, async (log) => {
      for (const [index, outcome] of outcomes.entries()) {
        const a = new Maker(invocationOf(`a${index}`))
        const events = a.many([...lifecycle().slice(0, -1), f.ended(outcome)])
        const seqs = await log.appendAll(events)
        const before = await snapshot(log)
        await expectCode(() => log.append(a.next(f.requested('s3'))), 'LOG_SEALED', `${outcome.status}: a new step`)
        await expectCode(() => log.append(a.next(f.ended({ status: 'cancelled', source: 'user' }))), 'LOG_SEALED', `${outcome.status}: a second end`)
        await expectCode(() => log.append(a.next(f.opened())), 'LOG_SEALED', `${outcome.status}: a reopening`)
        await expectCode(() => log.appendAll([events[2]!, a.next(f.requested('s4'))]), 'LOG_SEALED', `${outcome.status}: in a batch`)
        assert.is(await log.append(structuredClone(events[2]!)), seqs[2], `${outcome.status}: a stored event`)
        assert.is(await log.append(structuredClone(events.at(-1)!)), seqs.at(-1), `${outcome.status}: the stored end`)
        assert.equal(await snapshot(log), before)
      }
    })
  })

  it('LOG_REJECTED_FACT: a second opened, a never-opened invocation, completing with an unsettled tool, settling an unknown operation', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.appendAll(a.many([f.opened(), f.requested('s1'), f.completed('s1', [call('op1'), call('op2')]), f.dispatched('op1'), f.rejected('op2')]))
      const before = await snapshot(log)
      await expectCode(() => log.append(a.next(f.opened())), 'LOG_REJECTED_FACT', 'second invocation.opened')
      await expectCode(() => log.append(a.next(f.opened('other content'))), 'LOG_REJECTED_FACT', 'second invocation.opened, other input')
      const ghost = new Maker(invocationOf('ghost'))
      await expectCode(() => log.append(ghost.next(f.requested('s1'))), 'LOG_REJECTED_FACT', 'a fact for a never-opened invocation')
      await expectCode(() => log.append(ghost.next(f.ended({ status: 'cancelled', source: 'user' }))), 'LOG_REJECTED_FACT', 'ending a never-opened invocation')
      await expectCode(() => log.append(a.next(f.ended())), 'LOG_REJECTED_FACT', 'completed while op1 is dispatched and unsettled')
      await expectCode(() => log.append(a.next(f.settled('op-unknown'))), 'LOG_REJECTED_FACT', 'settling an unknown operation')
      await expectCode(() => log.append(a.next(f.settled('op2'))), 'LOG_REJECTED_FACT', 'settling a rejected operation')
      assert.equal(await snapshot(log), before, 'nothing was written')
      // Positive controls: the same shapes are accepted once the rule is satisfied.
      assert.is(await log.append(a.next(f.settled('op1'))), 6)
      await expectCode(() => log.append(a.next(f.settled('op1'))), 'LOG_REJECTED_FACT', 'settling twice')
      await expectCode(() => log.append(a.next(f.ended())), 'LOG_REJECTED_FACT', 'completing before a model answer without tool calls')
      assert.is(await log.appendAll(a.many([f.requested('s2'), f.completed('s2')])).then((seqs) => seqs.at(-1)), 8)
      assert.is(await log.append(a.next(f.ended())), 9, 'completing after the final answer, every dispatched tool settled')
      assert.is(await log.append(ghost.next(f.opened())), 10)
    })
  })

  it('LOG_REJECTED_FACT for what the invocation machine refuses: a request before the last calls are resolved or after the final answer, a dispatch of a call the model did not make, facts while held, a hold with calls pending or after the final answer', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.appendAll(a.many([f.opened(), f.requested('s1'), f.completed('s1', [call('op1'), call('op2')])]))
      const before = await snapshot(log)
      await expectCode(() => log.append(a.next(f.requested('s2'))), 'LOG_REJECTED_FACT', 'a request while two calls are pending')
      await expectCode(() => log.append(a.next(f.holdEntered('h1'))), 'LOG_REJECTED_FACT', 'a hold while calls are pending')
      await expectCode(() => log.append(a.next(f.dispatched('op-other'))), 'LOG_REJECTED_FACT', 'a dispatch of a call the model did not make')
      assert.equal(await snapshot(log), before, 'nothing was written')
      await log.appendAll(a.many([f.dispatched('op1'), f.rejected('op2')]))
      await expectCode(() => log.append(a.next(f.requested('s2'))), 'LOG_REJECTED_FACT', 'a request while op1 is dispatched and unsettled')
      const again: Fact = { type: 'tool.rejected', operationId: 'op2-again', callId: 'call-op2', name: 'echo', input: {}, reason: 'unknown_tool' }
      await expectCode(() => log.append(a.next(again)), 'LOG_REJECTED_FACT', 'a rejection of a call already resolved')
      await log.appendAll(a.many([f.settled('op1'), f.holdEntered('h1')]))
      const held = await snapshot(log)
      await expectCode(() => log.append(a.next(f.requested('s2'))), 'LOG_REJECTED_FACT', 'a request while held')
      assert.equal(await snapshot(log), held, 'nothing was written while held')
      await log.appendAll(a.many([f.holdReleased('h1'), f.requested('s2'), f.completed('s2')]))
      await expectCode(() => log.append(a.next(f.requested('s3'))), 'LOG_REJECTED_FACT', 'a request after the final answer')
      await expectCode(() => log.append(a.next(f.holdEntered('h2'))), 'LOG_REJECTED_FACT', 'a hold after the final answer')
      assert.ok((await log.append(a.next(f.ended()))) > 0, 'the invocation completes')
    })
  })

  it('an invocation may end failed or cancelled with a dispatched tool unsettled', async (dir) => {
    await withLog(dir, async (log) => {
      for (const outcome of [
        { status: 'failed', class: 'outcome_unknown' },
        { status: 'cancelled', source: 'user' },
      ] as InvocationOutcome[]) {
        const a = new Maker(invocationOf(`a-${outcome.status}`))
        const seqs = await log.appendAll(a.many([f.opened(), f.requested('s1'), f.completed('s1', [call('op1')]), f.dispatched('op1'), f.ended(outcome)]))
        const prefix = await log.prefix(ALL, ALL)
        assert.is(prefix.highWater, seqs.at(-1))
        assert.equal(prefix.projectInvocation(a.invocation.invocationId), {
          terminal: outcome.status as 'failed' | 'cancelled',
          uncertainOperations: ['op1'],
          unfinishedModelSteps: [],
        })
      }
    })
  })

  // -- 8. prefix and projections ----------------------------------------------------------------

  it('prefix is all or nothing by events: LOG_PREFIX_TOO_LARGE', async (dir) => {
    await withLog(dir, async (log) => {
      await log.appendAll(new Maker(invocationOf('a')).many(lifecycle()))
      await log.appendAll(new Maker(invocationOf('b')).many(lifecycle()))
      for (const max of [0, 1, 15]) {
        await expectCode(() => log.prefix(max, ALL), 'LOG_PREFIX_TOO_LARGE', `maxEvents ${max}`)
      }
      const exact = await log.prefix(16, ALL)
      assert.is(exact.highWater, 16)
      assert.is(exact.events.length, 16)
      assert.equal(
        exact.events.map((item) => item.seq),
        Array.from({ length: 16 }, (_, index) => index + 1),
      )
    })
  })

  it('prefix is all or nothing by bytes: LOG_PREFIX_TOO_LARGE just below the stored size', async (dir) => {
    await withLog(dir, async (log) => {
      await log.appendAll(new Maker(invocationOf('a')).many(lifecycle()))
      await expectCode(() => log.prefix(ALL, 0), 'LOG_PREFIX_TOO_LARGE', 'maxBytes 0')
      await expectCode(() => log.prefix(ALL, 16), 'LOG_PREFIX_TOO_LARGE', 'maxBytes 16 for 8 events')
      // The smallest budget that is enough: found by bisection, the budget one byte below fails whole.
      let low = 0
      let high = 1 << 20
      assert.is((await log.prefix(ALL, high)).events.length, 8)
      while (high - low > 1) {
        const middle = Math.floor((low + high) / 2)
        const ok = await log.prefix(ALL, middle).then(
          () => true,
          (error: { code?: string }) => {
            assert.is(error.code, 'LOG_PREFIX_TOO_LARGE')
            return false
          },
        )
        if (ok) high = middle
        else low = middle
      }
      assert.ok(high > 8 * 16, `8 events take more than 128 bytes (found ${high})`)
      assert.is((await log.prefix(ALL, high)).events.length, 8)
      await expectCode(() => log.prefix(ALL, high - 1), 'LOG_PREFIX_TOO_LARGE', 'one byte short')
    })
  })

  it('prefix refuses bad limits with LOG_INVALID_ARGUMENT', async (dir) => {
    await withLog(dir, async (log) => {
      for (const [events, bytes] of [
        [-1, ALL],
        [ALL, -1],
        [1.5, ALL],
        [ALL, Number.NaN],
        [Number.POSITIVE_INFINITY, ALL],
      ] as [number, number][]) {
        await expectCode(() => log.prefix(events, bytes), 'LOG_INVALID_ARGUMENT', `prefix(${events}, ${bytes})`)
      }
    })
  })

  it('a prefix is a snapshot: later appends do not change it', async (dir) => {
    const a = new Maker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.appendAll(a.many([f.opened(), f.requested('s1')]))
      const early = await log.prefix(ALL, ALL)
      await log.appendAll(a.many([f.completed('s1'), f.ended()]))
      assert.is(early.highWater, 2)
      assert.is(early.events.length, 2)
      assert.equal(early.projectInvocation('inv-a'), { terminal: null, uncertainOperations: [], unfinishedModelSteps: ['s1'] })
      const late = await log.prefix(ALL, ALL)
      assert.is.not(late.digest, early.digest)
      assert.equal(late.projectInvocation('inv-a'), { terminal: 'completed', uncertainOperations: [], unfinishedModelSteps: [] })
    })
  })

  it('projectInvocation: dispatched adds, settled removes, rejected never adds, they stay after the end; requested adds a step, completed or interrupted removes it', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const b = new Maker(invocationOf('b'))
    await withLog(dir, async (log) => {
      const project = async (id = 'inv-a') => (await log.prefix(ALL, ALL)).projectInvocation(id)
      const expectProjection = async (uncertainOperations: string[], unfinishedModelSteps: string[], terminal: string | null = null) =>
        assert.equal(await project(), { terminal, uncertainOperations, unfinishedModelSteps })

      assert.equal(await project('inv-never-seen'), { terminal: null, uncertainOperations: [], unfinishedModelSteps: [] })
      await log.append(a.next(f.opened()))
      await expectProjection([], [])
      await log.append(a.next(f.requested('s1')))
      await expectProjection([], ['s1'])
      await log.append(a.next(f.completed('s1', [call('op1'), call('op2'), call('op3')])))
      await expectProjection([], [])
      await log.append(a.next(f.dispatched('op1')))
      await expectProjection(['op1'], [])
      await log.append(b.next(f.opened()))
      await log.append(a.next(f.rejected('op3')))
      await expectProjection(['op1'], [])
      await log.append(a.next(f.dispatched('op2')))
      await expectProjection(['op1', 'op2'], [])
      await log.append(a.next(f.settled('op1')))
      await expectProjection(['op2'], [])
      await log.append(a.next(f.settled('op2')))
      await expectProjection([], [])
      await log.append(a.next(f.requested('s2')))
      await expectProjection([], ['s2'])
      await log.append(a.next(f.interrupted('s2')))
      await expectProjection([], [])
      await log.append(a.next(f.requested('s3')))
      await expectProjection([], ['s3'])
      await log.append(a.next(f.completed('s3', [call('op4')])))
      await log.append(a.next(f.dispatched('op4')))
      await expectProjection(['op4'], [])
      await log.append(a.next(f.ended({ status: 'failed', class: 'outcome_unknown' })))
      await expectProjection(['op4'], [], 'failed')
      // A request in flight stays listed after an abnormal end.
      await log.appendAll(b.many([f.requested('s1'), f.ended({ status: 'failed', class: 'host_interrupted' })]))
      assert.equal(await project('inv-b'), { terminal: 'failed', uncertainOperations: [], unfinishedModelSteps: ['s1'] })
    })
  })

  it('projectInvocation maps each outcome to its terminal status (handoff_paused reads paused)', async (dir) => {
    const cases: [InvocationOutcome, string][] = [
      [{ status: 'completed' }, 'completed'],
      [{ status: 'failed', class: 'max_steps' }, 'failed'],
      [{ status: 'cancelled', source: 'signal' }, 'cancelled'],
      [{ status: 'handoff_paused', pause: handoffPause('h1') }, 'paused'],
    ]
    await withLog(dir, async (log) => {
      for (const [index, [outcome, terminal]] of cases.entries()) {
        const a = new Maker(invocationOf(`t${index}`))
        // A run is held with a step to go (after its final answer there is nothing to hand off).
        const list =
          outcome.status === 'handoff_paused'
            ? [f.opened(), f.requested('s1'), f.completed('s1', [call('op1')]), f.dispatched('op1'), f.settled('op1'), f.holdEntered('h1')]
            : [f.opened(), f.requested('s1'), f.completed('s1')]
        await log.appendAll(a.many([...list, f.ended(outcome)]))
        assert.is((await log.prefix(ALL, ALL)).projectInvocation(a.invocation.invocationId).terminal, terminal, outcome.status)
      }
    })
  })

  // -- 9. run boundaries ------------------------------------------------------------------------

  it('runSource: undefined for an unknown run; a boundary over the run lineage only', async (dir) => {
    const a = new Maker(invocationOf('a', 'session-1'))
    const sibling = new Maker(invocationOf('sibling', 'session-1'))
    const other = new Maker(invocationOf('other', 'session-2'))
    let boundaryAfter: RunSource | undefined
    await withLog(dir, async (log) => {
      assert.is(await log.runSource('session-1', 'run-a'), undefined, 'empty log')
      await log.appendAll(a.many([f.opened(), f.requested('s1')]))
      assert.is(await log.runSource('session-1', 'run-unknown'), undefined, 'unknown run of a known session')
      assert.is(await log.runSource('session-unknown', 'run-a'), undefined, 'known run id in an unknown session')
      const first = await log.runSource('session-1', 'run-a')
      assert.ok(first)
      assert.equal(first.boundary.invocation, a.invocation)
      assert.is(first.boundary.highWater, 2)
      assert.match(first.boundary.digest, DIGEST)
      const logBefore = await snapshot(log)

      await log.appendAll(other.many([f.opened(), f.requested('s1'), f.completed('s1')]))
      assert.equal(await log.runSource('session-1', 'run-a'), first, 'appends in another session leave it unchanged')
      await log.appendAll(sibling.many([f.opened(), f.requested('s1')]))
      assert.equal(await log.runSource('session-1', 'run-a'), first, 'appends to another run of the session leave it unchanged')
      assert.is.not((await snapshot(log)).digest, logBefore.digest, 'while the log digest moved')

      const seq = await log.append(a.next(f.completed('s1')))
      const second = await log.runSource('session-1', 'run-a')
      assert.ok(second)
      assert.is(second.boundary.highWater, seq)
      assert.is.not(second.boundary.digest, first.boundary.digest, 'a fact of the run changes it')
      assert.equal(second.boundary.invocation, a.invocation)
      const siblingSource = await log.runSource('session-1', 'run-sibling')
      assert.ok(siblingSource)
      assert.is.not(siblingSource.boundary.digest, second.boundary.digest, 'each run has its own digest')
      boundaryAfter = second
    })
    await withLog(dir, async (log) => {
      assert.equal(await log.runSource('session-1', 'run-a'), boundaryAfter, 'the same boundary after a reopen')
    })
  })

  it('runSource refuses bad ids with LOG_INVALID_ARGUMENT', async (dir) => {
    await withLog(dir, async (log) => {
      await log.append(new Maker(invocationOf('a', 'session-1')).next(f.opened()))
      const bad: unknown[] = ['', 'a b', 'a/b', 'x'.repeat(129), 'caf\u00e9', undefined, null, 5]
      for (const value of bad) {
        await expectCode(() => log.runSource(value as string, 'run-a'), 'LOG_INVALID_ARGUMENT', `sessionId ${String(value)}`)
        await expectCode(() => log.runSource('session-1', value as string), 'LOG_INVALID_ARGUMENT', `runId ${String(value)}`)
      }
      assert.ok(await log.runSource('session-1', 'run-a'), 'the valid pair still answers')
    })
  })

  // -- 10. close --------------------------------------------------------------------------------

  it('close waits for pending appends: 100 appends started without awaiting all resolve and are present after a reopen', async (dir) => {
    const events = Array.from({ length: 100 }, (_, index) => new Maker(invocationOf(`c${index}`)).next(f.opened()))
    const resolved = new Map<number, string>()
    const log = await options.open(dir)
    let closed = false
    try {
      const appends = events.map((event) => log.append(event).then((seq) => resolved.set(seq, event.id)))
      await log.close()
      closed = true
      assert.is(resolved.size, 100, 'every append resolved before close did')
      await Promise.all(appends)
    } finally {
      if (!closed) await log.close()
    }
    assert.equal(
      [...resolved.keys()].sort((x, y) => x - y),
      Array.from({ length: 100 }, (_, index) => index + 1),
    )
    await withLog(dir, async (reopened) => {
      const prefix = await reopened.prefix(ALL, ALL)
      assert.is(prefix.highWater, 100)
      for (const { seq, event } of prefix.events) assert.is(event.id, resolved.get(seq), `seq ${seq}`)
      assert.is((await reopened.verify()).events, 100)
    })
  })

  it('after close every call is LOG_CLOSED; closing twice, even concurrently, is harmless', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const log = await options.open(dir)
    try {
      await log.append(a.next(f.opened()))
    } finally {
      await log.close()
    }
    await expectCode(() => log.append(a.next(f.requested('s1'))), 'LOG_CLOSED', 'append')
    await expectCode(() => log.appendAll([a.next(f.requested('s1'))]), 'LOG_CLOSED', 'appendAll')
    await expectCode(() => log.prefix(ALL, ALL), 'LOG_CLOSED', 'prefix')
    await expectCode(() => log.runSource('session-a', 'run-a'), 'LOG_CLOSED', 'runSource')
    await expectCode(() => log.verify(), 'LOG_CLOSED', 'verify')
    await log.close()

    // Two concurrent closes with appends still pending: whichever resolves, the directory is free.
    const again = await options.open(dir)
    const pending = Array.from({ length: 20 }, (_, index) => again.append(new Maker(invocationOf(`p${index}`)).next(f.opened())))
    const first = again.close()
    await again.close()
    await withLog(dir, async (third) => {
      assert.is((await third.verify()).events, 21, 'the pending appends were written before the second close resolved')
    })
    await first
    await Promise.all(pending)
  })

  // -- 12. appendAll atomicity ------------------------------------------------------------------

  it('appendAll is atomic: an event refused by the rules writes none of the batch', async (dir) => {
    await withLog(dir, async (log) => {
      await log.appendAll(new Maker(invocationOf('a')).many(lifecycle()))
      const before = await snapshot(log)
      const b = new Maker(invocationOf('b'))
      const batch = b.many([f.opened(), f.requested('s1'), f.settled('op-unknown')])
      await expectCode(() => log.appendAll(batch), 'LOG_REJECTED_FACT', 'third event settles an unknown operation')
      assert.equal(await snapshot(log), before)
      assert.is(await log.runSource('session-b', 'run-b'), undefined, 'the run was not recorded')
      assert.equal((await log.prefix(ALL, ALL)).projectInvocation('inv-b'), { terminal: null, uncertainOperations: [], unfinishedModelSteps: [] })

      const invalid = [batch[0]!, batch[1]!, { ...batch[2]!, fact: { type: 'tool.settled', operationId: 'op1' } } as unknown as RuntimeEvent]
      await expectCode(() => log.appendAll(invalid), 'LOG_INVALID_EVENT', 'third event is malformed')
      const conflicting = [batch[0]!, batch[1]!, { ...new Maker(invocationOf('a')).next(f.opened()), recordedAt: 3 }]
      await expectCode(() => log.appendAll(conflicting), 'LOG_CONFLICT', 'third event reuses a stored id')
      await expectCode(() => log.appendAll([]), 'LOG_INVALID_ARGUMENT', 'an empty batch')
      assert.equal(await snapshot(log), before)

      assert.equal(await log.appendAll([batch[0]!, batch[1]!]), [9, 10], 'no seq was consumed; the valid part is accepted alone')
    })
  })

  it('a refused appendAll does not disturb appends committed in the same group', async (dir) => {
    const a = new Maker(invocationOf('a'))
    const b = new Maker(invocationOf('b'))
    const c = new Maker(invocationOf('c'))
    await withLog(dir, async (log) => {
      const opened = a.next(f.opened())
      await log.append(opened)
      const good1 = a.next(f.requested('s1'))
      const bad = b.many([f.opened(), f.requested('s1'), f.settled('op-unknown')])
      const good2 = c.next(f.opened())
      const results = await Promise.allSettled([log.append(good1), log.appendAll(bad), log.append(good2)])
      assert.is(results[0]!.status, 'fulfilled')
      assert.is(results[1]!.status, 'rejected')
      assert.is(results[2]!.status, 'fulfilled')
      assert.is(((results[1] as PromiseRejectedResult).reason as { code: string }).code, 'LOG_REJECTED_FACT')
      assert.equal(
        [(results[0] as PromiseFulfilledResult<number>).value, (results[2] as PromiseFulfilledResult<number>).value],
        [2, 3],
      )
      const prefix = await log.prefix(ALL, ALL)
      assert.equal(prefix.events, stored([opened, good1, good2], 1))
    })
  })

  test.run()
}
