/**
 * The EventLog beyond the conformance suite: the in-process writer lock, the integrity rules of
 * `store/projection.ts`, recovery, tamper and corruption detection, and group commit under 256
 * concurrent appenders.
 */
import { createHash } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { cp, mkdir, readFile, rm, symlink } from 'node:fs/promises'
import { createRequire } from 'node:module'
import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { FactstateError } from '../errors.js'
import type { Fact, Invocation, RunBoundary, RuntimeEvent, StoredEvent } from '../facts/types.js'
import { EMPTY_CHAIN, chainStep, logDigest } from '../store/digest.js'
import { canonical, decodeRecord, encodeEvent, encodeRecord } from '../store/encoding.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { applyFact, foldFacts } from '../machines/invocation.js'
import { keys } from '../store/keys.js'
import { recoverInvocations } from '../store/recovery.js'
import { EventMaker, boundedTest, completeInvocation, facts, filesContaining, flipByte, invocationOf, refusal, withDb, withLog } from './support/log-fixtures.js'

const ALL = Number.MAX_SAFE_INTEGER
const call = (operationId: string) => ({ callId: `call-${operationId}`, name: 'echo', arguments: '{"value":42}' })

async function digestOf(log: EventLog): Promise<{ events: number; digest: string }> {
  return log.verify()
}

// =============================================================================================
const lock = suite('store: writer lock in one process')

lock(
  'a second open of the same directory is LOG_WRITER_BUSY, by any path, and the first handle keeps appending and verifying',
  boundedTest(15_000, async (dir) => {
    const logDir = join(dir, 'log')
    await mkdir(logDir)
    await symlink(logDir, join(dir, 'alias'))
    const first = await EventLog.open(logDir)
    try {
      const a = new EventMaker(invocationOf('a'))
      assert.is(await first.append(a.next(facts.opened())), 1)
      for (const path of [logDir, join(dir, 'alias'), `${logDir}/.`, join(dir, 'alias', '..', 'log')]) {
        const busy = await refusal(EventLog.open(path))
        assert.is(busy.code, 'LOG_WRITER_BUSY', path)
        assert.equal(busy.details, { holder: 'this-process', closing: false }, path)
      }
      assert.is(await first.append(a.next(facts.requested('s1'))), 2, 'the first handle still appends')
      const verified = await first.verify()
      assert.is(verified.events, 2)
      assert.is((await first.prefix(ALL, ALL)).events.length, 2)
    } finally {
      await first.close()
    }
    await withLog(join(dir, 'alias'), async (second) => {
      assert.is((await second.verify()).events, 2, 'once closed, the directory opens again and holds what was written')
    })
  }),
)

lock(
  'an open while this process closes the log is told to await that close (details.closing), and succeeds once it is done',
  boundedTest(15_000, async (dir) => {
    const logDir = join(dir, 'log')
    const first = await EventLog.open(logDir)
    assert.is(await first.append(new EventMaker(invocationOf('a')).next(facts.opened())), 1)
    const closing = first.close()
    const busy = await refusal(EventLog.open(logDir))
    assert.is(busy.code, 'LOG_WRITER_BUSY')
    assert.equal(busy.details, { holder: 'this-process', closing: true })
    assert.match(busy.message, /is being closed in this process: await its close\(\) before opening it again/)
    await closing
    await withLog(logDir, async (second) => {
      assert.is((await second.verify()).events, 1, 'once the close is done, the directory opens again')
    })
  }),
)

lock(
  'an open with waitMs while this process closes the log waits for that close and opens; one while a handle here stays open fails LOG_WRITER_BUSY as without a wait',
  boundedTest(15_000, async (dir) => {
    const logDir = join(dir, 'log')
    const first = await EventLog.open(logDir)
    assert.is(await first.append(new EventMaker(invocationOf('a')).next(facts.opened())), 1)
    const stillOpen = await refusal(EventLog.open(logDir, { waitMs: 100 }))
    assert.equal([stillOpen.code, stillOpen.details], ['LOG_WRITER_BUSY', { holder: 'this-process', closing: false }])
    assert.match(stillOpen.message, /already open in this process: .* \(still so after waiting 100 ms \(waitMs\)\)$/)
    assert.is(await first.append(new EventMaker(invocationOf('b')).next(facts.opened())), 2, 'the refused tries did not disturb the open handle')
    const closing = first.close()
    // Refused without a wait: the close has begun and is not done.
    assert.equal((await refusal(EventLog.open(logDir))).details, { holder: 'this-process', closing: true })
    const second = await EventLog.open(logDir, { waitMs: 10_000 })
    try {
      await closing
      assert.is((await second.verify()).events, 2, 'the open that waited has the log as the close left it')
      assert.is(await second.append(new EventMaker(invocationOf('c')).next(facts.opened())), 3)
    } finally {
      await second.close()
    }
  }),
)

lock(
  'open refuses a waitMs that is not a number of milliseconds, 0 or more, or a signal that is not an AbortSignal (details.field), creating nothing',
  boundedTest(15_000, async (dir) => {
    const missing = join(dir, 'never')
    const bad: [Record<string, unknown>, string][] = [
      [{ waitMs: -1 }, 'waitMs'],
      [{ waitMs: Number.NaN }, 'waitMs'],
      [{ waitMs: Number.POSITIVE_INFINITY }, 'waitMs'],
      [{ waitMs: '30000' }, 'waitMs'],
      [{ waitMs: 10n }, 'waitMs'],
      [{ waitMs: 1_000, signal: {} }, 'signal'],
      [{ signal: 'abort' }, 'signal'],
      [{ durability: 'fast' }, 'durability'],
      [{ create: 'no' }, 'create'],
    ]
    for (const [options, field] of bad) {
      const refused = await refusal(EventLog.open(missing, options as never))
      assert.equal([refused.code, refused.details], ['LOG_INVALID_ARGUMENT', { field }], JSON.stringify(options, (_, value: unknown) => (typeof value === 'bigint' ? `${value}n` : value)))
      assert.match(refused.message, new RegExp(`^LOG_INVALID_ARGUMENT: ${field} must be `))
    }
    assert.not.ok(existsSync(missing), 'nothing is created')
    // Good values: 0 (the default), and a signal with nothing to wait for.
    await withLog(missing, async () => undefined)
    const log = await EventLog.open(missing, { waitMs: 0, signal: new AbortController().signal })
    await log.close()
  }),
)

lock(
  'a read given an id argument that is not an id says the rule and names the argument (details.field)',
  boundedTest(15_000, async (dir) => {
    await withLog(dir, async (log) => {
      const cases: [string, () => Promise<unknown>, string, string][] = [
        ['invocationEvents', () => log.invocationEvents('i:writer@sup-1/step-1/0'), 'invocationId', '"i:writer@sup-1/step-1/0"'],
        ['runs', () => log.runs(''), 'sessionId', '""'],
        ['runSource', () => log.runSource('session-a', 'run/1'), 'runId', '"run/1"'],
        ['runSource', () => log.runSource('x'.repeat(129), 'run-1'), 'sessionId', '"xxx'],
        ['pendingSessions', () => log.pendingSessions({ sessionId: 'a b' }), 'sessionId', '"a b"'],
        // An id from a request path may be any length: the message shows its start and how long it is.
        ['runs', () => log.runs('y'.repeat(100_000)), 'sessionId', `"${'y'.repeat(60)}"… (100,000 characters)`],
      ]
      for (const [call, read, field, value] of cases) {
        const refused = await refusal(read())
        assert.equal([refused.code, refused.details], ['LOG_INVALID_ARGUMENT', { field }], call)
        assert.ok(
          refused.message.startsWith(`LOG_INVALID_ARGUMENT: ${call}: ${field} must be an id, 1–128 characters from [A-Za-z0-9._:-], not ${value}`),
          refused.message,
        )
        // How to make an id of a thread id from elsewhere (an email address, a path), never the id whole.
        assert.match(refused.message, "its SHA-256 digest in base64url (createHash('sha256').update(id).digest('base64url'), 43 characters)", call)
        assert.not.match(refused.message, 'y'.repeat(61), call)
      }
      // What it says makes an id the log takes.
      assert.equal(await log.runs(createHash('sha256').update('alice@example.com').digest('base64url')), [])
    })
  }),
)

lock(
  'open with create: false opens a log that is there and refuses, creating nothing, where there is none',
  boundedTest(15_000, async (dir) => {
    const missing = join(dir, 'tenant-typo', 'log')
    const refused = await refusal(EventLog.open(missing, { create: false }))
    assert.equal([refused.code, refused.message], ['LOG_INVALID_ARGUMENT', `LOG_INVALID_ARGUMENT: there is no log at ${missing} to open (create: false)`])
    assert.not.ok(existsSync(join(dir, 'tenant-typo')), 'nothing is created')
    await mkdir(join(dir, 'empty'))
    assert.is((await refusal(EventLog.open(join(dir, 'empty'), { create: false }))).code, 'LOG_INVALID_ARGUMENT', 'an empty directory holds no log')
    assert.equal(readdirSync(join(dir, 'empty')), [])
    assert.is((await refusal(EventLog.open(join(dir, 'empty'), { create: 'no' as unknown as boolean }))).code, 'LOG_INVALID_ARGUMENT')
    await withLog(join(dir, 'log'), async (log) => {
      await log.append(new EventMaker(invocationOf('a')).next(facts.opened()))
    })
    const existing = await EventLog.open(join(dir, 'log'), { create: false })
    try {
      assert.is(existing.head().highWater, 1, 'a log that is there opens')
    } finally {
      await existing.close()
    }
    // The default still makes a log where there is none.
    await withLog(join(dir, 'empty'), async (log) => assert.is(log.head().highWater, 0))
  }),
)

lock(
  'open refuses bad arguments with LOG_INVALID_ARGUMENT and leaves no claim behind',
  boundedTest(15_000, async (dir) => {
    assert.is((await refusal(EventLog.open(''))).code, 'LOG_INVALID_ARGUMENT')
    assert.is((await refusal(EventLog.open(`${dir}\0x`))).code, 'LOG_INVALID_ARGUMENT')
    assert.is((await refusal(EventLog.open(dir, { durability: 'fast' as 'sync' }))).code, 'LOG_INVALID_ARGUMENT')
    await withLog(dir, async (log) => {
      assert.is((await log.verify()).events, 0)
    })
  }),
)

lock.run()

// =============================================================================================
const prefixBytes = suite('store: prefix budget')

prefixBytes(
  'the byte budget of prefix is the exact stored size: enough at the size, LOG_PREFIX_TOO_LARGE one byte below',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const events = completeInvocation('a')
      await log.appendAll(events)
      const size = events.reduce((sum, event) => sum + encodeEvent(canonical(event)).length, 0)
      assert.is((await log.prefix(8, size)).events.length, 8)
      assert.is((await refusal(log.prefix(8, size - 1))).code, 'LOG_PREFIX_TOO_LARGE')
      assert.is((await refusal(log.prefix(7, size))).code, 'LOG_PREFIX_TOO_LARGE')
    }),
  ),
)

prefixBytes(
  'projectInvocation reads the prefix as read, whatever the caller does to the events it got',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      await log.appendAll(completeInvocation('a'))
      const prefix = await log.prefix(ALL, ALL)
      const completed = prefix.projectInvocation('inv-a')
      assert.is(completed.terminal, 'completed')
      prefix.events.reverse()
      assert.equal(prefix.projectInvocation('inv-a'), completed, 'newest first')
      prefix.events.splice(3)
      assert.equal(prefix.projectInvocation('inv-a'), completed, 'cut short')
    }),
  ),
)

prefixBytes(
  'a reader of events() let go part-way without return() has its LevelDB iterator closed once it is collected',
  boundedTest(30_000, async (dir) => {
    v8.setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const proto = ClassicLevel.prototype as unknown as { iterator(options?: unknown): { close(): Promise<void> } }
    const original = proto.iterator
    const iterators: { closed: boolean }[] = []
    proto.iterator = function (this: unknown, options?: unknown) {
      const made = original.call(this, options)
      const entry = { closed: false }
      const close = made.close.bind(made)
      made.close = () => {
        entry.closed = true
        return close()
      }
      iterators.push(entry)
      return made
    }
    try {
      await withLog(dir, async (log) => {
        // More events than one read-ahead (256): a reader that took one still has its iterator open.
        for (let n = 0; n < 40; n += 1) await log.appendAll(completeInvocation(`r${n}`))
        iterators.length = 0
        // In a function of its own, so that no frame of the test keeps the last reader.
        const dropReaders = async (count: number): Promise<number[]> => {
          const first: number[] = []
          for (let n = 0; n < count; n += 1) {
            const next = await log.events().next()
            if (!next.done) first.push(next.value.seq)
          }
          return first
        }
        assert.equal(await dropReaders(8), Array.from({ length: 8 }, () => 1))
        assert.is(iterators.length, 8)
        for (let round = 0; round < 20 && iterators.some((entry) => !entry.closed); round += 1) {
          gc()
          await new Promise((resolve) => setTimeout(resolve, 10))
        }
        assert.equal(iterators.map((entry) => entry.closed), Array.from({ length: 8 }, () => true), 'every dropped reader’s iterator is closed')
      })
    } finally {
      proto.iterator = original
    }
  }),
)

prefixBytes(
  'events() streams in seq order across read chunks, within from/to, stops at the high-water of its start, refuses bad bounds',
  boundedTest(30_000, (dir) =>
    withLog(dir, async (log) => {
      // 90 invocations of 8 facts: 720 events, several of the store reads events() makes (256 each).
      for (let n = 0; n < 90; n += 1) await log.appendAll(completeInvocation(`s${n}`, `session-${n % 7}`))
      const all: StoredEvent[] = []
      for await (const stored of log.events()) all.push(stored)
      assert.equal(all.map(({ seq }) => seq), Array.from({ length: 720 }, (_, i) => i + 1))
      const prefix = await log.prefix(ALL, ALL)
      assert.equal(all, prefix.events, 'the same events as prefix, decoded the same way')
      const window: number[] = []
      for await (const { seq } of log.events({ from: 250, to: 530 })) window.push(seq)
      assert.equal(window, Array.from({ length: 281 }, (_, i) => i + 250))
      // Appends landing while a stream runs are after its end.
      const seen: number[] = []
      for await (const { seq } of log.events({ from: 700 })) {
        if (seen.length === 0) await log.appendAll(completeInvocation('late'))
        seen.push(seq)
      }
      assert.equal(seen, Array.from({ length: 21 }, (_, i) => i + 700))
      assert.is(log.head().highWater, 728)
      let none = 0
      for await (const _ of log.events({ from: 729 })) none += 1
      assert.is(none, 0)
      for (const bounds of [{ from: 0 }, { from: 1.5 }, { to: Number.NaN }]) {
        let refused: FactstateError | undefined
        try {
          log.events(bounds)
        } catch (error) {
          refused = error as FactstateError
        }
        assert.is(refused?.code, 'LOG_INVALID_ARGUMENT', `${JSON.stringify(bounds)}: refused at the call`)
      }
      // The default end is the high-water when events() was called, even if reading starts later.
      const taken = log.events({ from: 727 })
      await log.appendAll(completeInvocation('later'))
      const read: number[] = []
      for await (const { seq } of taken) read.push(seq)
      assert.equal(read, [727, 728])
    }),
  ),
)

prefixBytes(
  'events() hands out every fact before a damaged one, then LOG_CORRUPT naming it',
  boundedTest(30_000, async (dir) => {
    // Damage deeper than the open's chain check (the last 1,024 facts), so the log still opens.
    await withLog(dir, async (log) => {
      for (let n = 0; n < 170; n += 1) await log.appendAll(completeInvocation(`d${n}`))
    })
    const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    const stored = (await db.get(keys.event(300))) as Uint8Array
    await db.put(keys.event(300), Uint8Array.from([9, ...stored.subarray(1)]))
    await db.close()
    await withLog(dir, async (log) => {
      const seen: number[] = []
      let failure: FactstateError | undefined
      try {
        for await (const { seq } of log.events()) seen.push(seq)
      } catch (error) {
        failure = error as FactstateError
      }
      assert.equal(seen, Array.from({ length: 299 }, (_, i) => i + 1))
      assert.is(failure?.code, 'LOG_CORRUPT')
      assert.equal(failure?.details, { seq: 300 })
    })
  }),
)

prefixBytes.run()

// =============================================================================================
const rules = suite('store: integrity rules')

rules(
  'facts that contradict the invocation are LOG_REJECTED_FACT and write nothing; the same shapes pass once legal',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      await log.appendAll(a.many([facts.opened(), facts.requested('s1')]))
      let before = await digestOf(log)
      const rejected = async (fact: Fact | RuntimeEvent, what: string) => {
        const event = 'fact' in fact ? fact : a.next(fact)
        assert.is((await refusal(log.append(event))).code, 'LOG_REJECTED_FACT', what)
        assert.equal(await digestOf(log), before, `${what}: nothing written`)
      }
      const accepted = async (fact: Fact) => {
        await log.append(a.next(fact))
        before = await digestOf(log)
      }
      await rejected(facts.requested('s2'), 'a request while another is in flight')
      await rejected(facts.completed('s9'), 'completing a step not in flight')
      await rejected(facts.interrupted('s9'), 'interrupting a step not in flight')
      await rejected(facts.holdEntered('h1'), 'a hold while a request is in flight')
      await accepted(facts.completed('s1', [call('op1'), call('op2')]))
      await rejected(facts.completed('s1'), 'completing a step twice')
      await accepted(facts.dispatched('op1'))
      await rejected(facts.dispatched('op1'), 'dispatching an operation twice')
      await rejected(facts.rejected('op1'), 'rejecting a dispatched operation')
      await rejected(facts.holdEntered('h1'), 'a hold while a tool is unsettled')
      await accepted(facts.settled('op1'))
      await accepted(facts.rejected('op2'))
      await rejected(facts.dispatched('op2'), 'dispatching a rejected operation')
      await rejected({ ...a.next(facts.requested('s2')), invocation: { ...a.invocation, runId: 'run-other' } }, 'a fact naming another run')
      await rejected({ ...a.next(facts.requested('s2')), invocation: { ...a.invocation, turnId: 'turn-other' } }, 'a fact naming another turn')
      await rejected(facts.holdReleased('h1'), 'releasing a hold never entered')
      await rejected(facts.ended({ status: 'handoff_paused', pause: pauseFor('h1') }), 'a handoff pause without a hold')
      await accepted(facts.holdEntered('h1'))
      await rejected(facts.holdEntered('h2'), 'a second hold')
      await rejected(facts.holdReleased('h2'), 'releasing another hold')
      await rejected(facts.ended({ status: 'handoff_paused', pause: pauseFor('h2') }), 'a pause for another hold')
      await accepted(facts.holdReleased('h1'))
      await accepted(facts.holdEntered('h3'))
      await accepted(facts.ended({ status: 'handoff_paused', pause: pauseFor('h3') }))
      assert.is((await log.prefix(ALL, ALL)).projectInvocation('inv-a').terminal, 'paused')

      const intruder = { ...invocationOf('intruder'), sessionId: 'session-a', runId: 'run-a' }
      await rejected(new EventMaker(intruder).next(facts.opened()), 'opening a second invocation on a run')
    }),
  ),
)

rules(
  'after the final answer an invocation is not held: the hold is LOG_REJECTED_FACT and MACHINE_REJECTED, and it still completes',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('answered'))
      const history = [facts.opened(), facts.requested('s1'), facts.completed('s1')]
      await log.appendAll(a.many(history))
      const before = await digestOf(log)
      assert.is((await refusal(log.append(a.next(facts.holdEntered('h1'))))).code, 'LOG_REJECTED_FACT')
      assert.equal(await digestOf(log), before, 'nothing written')
      const answered = foldFacts(history)
      assert.is(answered.value, 'safePoint')
      assert.throws(() => applyFact(answered, facts.holdEntered('h1')), (error: FactstateError) => error.code === 'MACHINE_REJECTED')
      await log.append(a.next(facts.ended({ status: 'completed' })))
      assert.is((await log.prefix(ALL, ALL)).projectInvocation('inv-answered').terminal, 'completed')
    }),
  ),
)

rules(
  'a handoff claim is used once: a second successor with the same claim is HANDOFF_CLAIMED',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const source = new EventMaker(invocationOf('source'))
      await log.appendAll(source.many(heldAfterTool()))
      const pause = pauseFor('h1')
      await log.append(source.next(facts.ended({ status: 'handoff_paused', pause })))
      const boundary = (await log.runSource('session-source', 'run-source'))?.boundary
      assert.ok(boundary)
      const successor = (name: string): RuntimeEvent =>
        new EventMaker({ ...invocationOf(name), sessionId: 'session-source', turnId: boundary.invocation.turnId }).next({
          ...(facts.opened() as Extract<Fact, { type: 'invocation.opened' }>),
          input: { kind: 'handoff', source: boundary, pause },
        })
      assert.is(await log.append(successor('next')), 8)
      const before = await digestOf(log)
      assert.is((await refusal(log.append(successor('second')))).code, 'HANDOFF_CLAIMED')
      assert.equal(await digestOf(log), before)
    }),
  ),
)

rules(
  'a seal reserves its claim and its successor id: another seal naming either is refused (also after a reopen and once the successor came), and only the sealed source admits a successor with them',
  boundedTest(20_000, async (dir) => {
    const held = heldAfterTool()
    const first = new EventMaker(invocationOf('first'))
    const second = new EventMaker(invocationOf('second'))
    const shared = pauseFor('h1')
    const sameClaim = { ...shared, intent: { ...shared.intent, successorRunId: 'run-other', successorInvocationId: 'inv-other' } }
    const sealSecond = (pause: typeof shared) => second.next(facts.ended({ status: 'handoff_paused', pause }))
    const successor = (name: string, source: RunBoundary): RuntimeEvent =>
      new EventMaker({ ...invocationOf(name), sessionId: source.invocation.sessionId, turnId: source.invocation.turnId }).next({
        ...(facts.opened() as Extract<Fact, { type: 'invocation.opened' }>),
        input: { kind: 'handoff', source, pause: shared },
      })
    await withLog(dir, async (log) => {
      await log.appendAll(first.many(held))
      await log.appendAll(second.many(held))
      const bystander = new EventMaker(invocationOf('bystander'))
      await log.appendAll(bystander.many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })]))
      await log.append(first.next(facts.ended({ status: 'handoff_paused', pause: shared })))
      const before = await digestOf(log)
      const refused = await refusal(log.append(sealSecond(sameClaim)))
      assert.is(refused.code, 'HANDOFF_CLAIMED')
      assert.match(refused.message, /named by the seal of inv-first/)
      const elsewhere = (await log.runSource('session-bystander', 'run-bystander'))?.boundary
      assert.ok(elsewhere)
      assert.is((await refusal(log.append(successor('stranger', elsewhere)))).code, 'HANDOFF_CLAIMED', 'a successor of another source')
      // The seal reserves its successor's invocation id too.
      const own = { ...shared.intent, claimId: 'claim-own', successorRunId: 'run-own' }
      assert.is((await refusal(log.append(sealSecond({ ...shared, intent: own })))).code, 'HANDOFF_MISMATCH', 'another seal naming the same successor')
      const existing = { ...own, successorInvocationId: 'inv-bystander' }
      assert.is((await refusal(log.append(sealSecond({ ...shared, intent: existing })))).code, 'HANDOFF_MISMATCH', 'a successor id already taken')
      const squatter = new EventMaker({ ...invocationOf('squatter'), invocationId: 'inv-next' })
      assert.is((await refusal(log.append(squatter.next(facts.opened())))).code, 'LOG_REJECTED_FACT', 'a run opening under the reserved id')
      assert.equal(await digestOf(log), before, 'nothing written')
    })
    await withLog(dir, async (log) => {
      const before = await digestOf(log)
      assert.is((await refusal(log.append(sealSecond(sameClaim)))).code, 'HANDOFF_CLAIMED', 'after a reopen')
      assert.equal(await digestOf(log), before)
      const boundary = (await log.runSource('session-first', 'run-first'))?.boundary
      assert.ok(boundary)
      await log.append(successor('next', boundary))
      const admitted = await digestOf(log)
      const used = await refusal(log.append(sealSecond(sameClaim)))
      assert.is(used.code, 'HANDOFF_CLAIMED', 'once the successor came')
      assert.match(used.message, /already used by inv-next/)
      assert.equal(await digestOf(log), admitted)
      // Under a claim of its own, the second run seals.
      await log.append(sealSecond({ ...sameClaim, intent: { ...sameClaim.intent, claimId: 'claim-second' } }))
      assert.is((await log.prefix(ALL, ALL)).projectInvocation('inv-second').terminal, 'paused')
    })
  }),
)

/** An invocation held at the safe point after a settled tool step (hold `h1`). */
rules(
  'a run opened from a source by a direct append meets the engine\'s admission rules: its source is an ended run of its session, at its end, with its digest; a successor matches its seal',
  boundedTest(20_000, (dir) =>
    withLog(dir, async (log) => {
      const source = new EventMaker(invocationOf('source'))
      await log.appendAll(source.many(heldAfterTool()))
      const pause = pauseFor('h1')
      await log.append(source.next(facts.ended({ status: 'handoff_paused', pause })))
      const sealed = (await log.runSource('session-source', 'run-source'))?.boundary
      assert.ok(sealed)
      await log.appendAll(completeInvocation('done', 'session-source').map((event) => ({ ...event, invocation: { ...event.invocation, turnId: 'turn-done' } })))
      const done = (await log.runSource('session-source', 'run-done'))?.boundary
      assert.ok(done)
      await log.appendAll(completeInvocation('elsewhere'))
      const elsewhere = (await log.runSource('session-elsewhere', 'run-elsewhere'))?.boundary
      assert.ok(elsewhere)
      const running = new EventMaker(invocationOf('running', 'session-running'))
      await log.appendAll(running.many([facts.opened(), facts.requested('s1')]))
      const midRun = { invocation: running.invocation, highWater: (await log.head()).highWater, digest: sealed.digest }
      const opened = facts.opened() as Extract<Fact, { type: 'invocation.opened' }>
      const open = (invocation: Invocation, input: Extract<Fact, { type: 'invocation.opened' }>['input']): RuntimeEvent =>
        new EventMaker(invocation).next({ ...opened, input })
      const successorIds = { sessionId: 'session-source', turnId: 'turn-source', runId: 'run-next', invocationId: 'inv-next' }
      const before = await digestOf(log)
      const cases: [string, RuntimeEvent, string, string][] = [
        ['a successor in another session', open({ ...successorIds, sessionId: 'session-other' }, { kind: 'handoff', source: sealed, pause }), 'HANDOFF_MISMATCH', 'source'],
        ['a successor with other ids than the seal names', open({ ...successorIds, runId: 'run-mine' }, { kind: 'handoff', source: sealed, pause }), 'HANDOFF_MISMATCH', 'invocation'],
        ['a successor in another turn', open({ ...successorIds, turnId: 'turn-mine' }, { kind: 'handoff', source: sealed, pause }), 'HANDOFF_MISMATCH', 'invocation'],
        ['a successor with another pause', open(successorIds, { kind: 'handoff', source: sealed, pause: { ...pause, remainingSteps: 200 } }), 'HANDOFF_MISMATCH', 'pause'],
        [
          'a successor of a run that was never sealed',
          open({ ...successorIds, turnId: 'turn-done', runId: 'run-x', invocationId: 'inv-x' }, { kind: 'handoff', source: done, pause: { ...pause, intent: { ...pause.intent, claimId: 'never-sealed', successorRunId: 'run-x', successorInvocationId: 'inv-x' } } }),
          'HANDOFF_MISMATCH',
          'source',
        ],
        ['a continuation of a run that does not exist', open(invocationOf('c1', 'session-source'), { kind: 'continuation', source: { ...done, invocation: { ...done.invocation, runId: 'nope' } } }), 'RUN_SOURCE_MISMATCH', 'source'],
        ['a continuation of a run of another session', open(invocationOf('c2', 'session-source'), { kind: 'continuation', source: elsewhere }), 'RUN_SOURCE_MISMATCH', 'source'],
        [
          'a continuation of a run of a session the log never saw',
          open(invocationOf('c7', 'session-source'), { kind: 'continuation', source: { ...done, invocation: { ...done.invocation, sessionId: 'session-other' } } }),
          'RUN_SOURCE_MISMATCH',
          'source',
        ],
        ['a continuation of a run still running', open(invocationOf('c3', 'session-running'), { kind: 'continuation', source: midRun }), 'RUN_SOURCE_MISMATCH', 'source'],
        ['a continuation from inside its source', open(invocationOf('c4', 'session-source'), { kind: 'continuation', source: { ...done, highWater: done.highWater - 1 } }), 'RUN_SOURCE_MISMATCH', 'source'],
        ['a continuation whose digest the facts do not reproduce', open(invocationOf('c5', 'session-source'), { kind: 'continuation', source: { ...done, digest: sealed.digest } }), 'RUN_SOURCE_MISMATCH', 'source'],
      ]
      const details: Record<string, unknown> = {}
      for (const [what, event, code] of cases) {
        const refused = await refusal(log.append(event))
        assert.is(refused.code, code, `${what}: ${refused.message}`)
        if (code === 'RUN_SOURCE_MISMATCH') {
          details[what] = refused.details
          assert.match(refused.message, /log\.runs?(Source)?\("session-(source|elsewhere|running)"/, `${what}: the way out`)
          // A source of another session (one the log holds or not): the way out is a run of the continuation's own session.
          if (what.includes('session')) assert.match(refused.message, /log\.runs\("session-source"\)/, `${what}: its own session's runs`)
        }
      }
      // Which member of the boundary the log does not hold, and where the run ends (never the digest it would take).
      // Every refusal of an appended event names it (`eventId`), whichever check made it.
      assert.equal(details, {
        'a continuation of a run that does not exist': { sessionId: 'session-source', runId: 'nope', field: 'invocation', eventId: 'inv-c1/1' },
        'a continuation of a run of another session': { sessionId: 'session-elsewhere', runId: 'run-elsewhere', field: 'invocation', eventId: 'inv-c2/1' },
        'a continuation of a run of a session the log never saw': { sessionId: 'session-other', runId: 'run-done', field: 'invocation', eventId: 'inv-c7/1' },
        'a continuation of a run still running': { sessionId: 'session-running', runId: 'run-running', field: 'digest', lastSeq: midRun.highWater, ended: false, eventId: 'inv-c3/1' },
        'a continuation from inside its source': { sessionId: 'session-source', runId: 'run-done', field: 'highWater', lastSeq: done.highWater, ended: true, eventId: 'inv-c4/1' },
        'a continuation whose digest the facts do not reproduce': { sessionId: 'session-source', runId: 'run-done', field: 'digest', lastSeq: done.highWater, ended: true, eventId: 'inv-c5/1' },
      })
      // A continuation whose execution.replayBase is not its source (the engine records the two alike), and a message run with one.
      const replayed = (input: Extract<Fact, { type: 'invocation.opened' }>['input'], replayBase: RunBoundary, id: string) =>
        refusal(log.append(new EventMaker(invocationOf(id, 'session-source')).next({ ...opened, input, execution: { ...opened.execution, replayBase } })))
      for (const refused of [await replayed({ kind: 'continuation', source: done }, elsewhere, 'c8'), await replayed({ kind: 'message', content: 'hi' }, done, 'c9')]) {
        assert.is(refused.code, 'LOG_INVALID_EVENT', refused.message)
        assert.equal(refused.details, { fields: ['fact.execution.replayBase'] })
      }
      // The digest's refusal says what it compared, in words.
      assert.match(
        (await refusal(log.append(open(invocationOf('c10', 'session-source'), { kind: 'continuation', source: { ...done, digest: sealed.digest } })))).message,
        new RegExp(`\\(its digest is not that of the run's facts through seq ${done.highWater}, where the run ended\\)`),
      )
      assert.equal(await digestOf(log), before, 'nothing written')
      // The real ones are admitted, in the order they are appended even when not awaited one by one
      // (the first waits for its source to be verified; what follows waits behind it).
      await log.appendAll(completeInvocation('fresh', 'session-source').map((event) => ({ ...event, invocation: { ...event.invocation, turnId: 'turn-fresh' } })))
      const fresh = (await log.runSource('session-source', 'run-fresh'))?.boundary
      assert.ok(fresh)
      const start = (await digestOf(log)).events
      const continuation = new EventMaker(invocationOf('c6', 'session-source'))
      const pipelined = [
        log.append(continuation.next({ ...opened, input: { kind: 'continuation', source: fresh } })),
        log.append(continuation.next(facts.requested('s1'))),
        log.append(continuation.next(facts.completed('s1'))),
      ]
      assert.equal(await Promise.all(pipelined), [start + 1, start + 2, start + 3])
      assert.is(await log.append(open(successorIds, { kind: 'handoff', source: sealed, pause })), start + 4)
    }),
  ),
)

function heldAfterTool(): Fact[] {
  return [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1'), facts.holdEntered('h1')]
}

function pauseFor(handoffId: string) {
  return {
    intent: { handoffId, hostEpoch: 'epoch', rootRunId: 'run-a', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: `claim-${handoffId}` },
    remainingSteps: 1,
    execution: { model: 'test-model', providerOptions: {}, cwd: '/work', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
  }
}

rules.run()

// =============================================================================================
const recovery = suite('store: recovery')

/** Invocations parked in each state recovery distinguishes, with the closing facts it must write. */
const parkedStates: { name: string; facts: Fact[]; closing: unknown[] }[] = [
  {
    name: 'model',
    facts: [facts.opened(), facts.requested('s1')],
    closing: [
      { type: 'model.interrupted', stepId: 's1', status: 'failed' },
      { type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted' } },
    ],
  },
  {
    name: 'tool',
    facts: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1')],
    closing: [{ type: 'invocation.ended', outcome: { status: 'failed', class: 'outcome_unknown' } }],
  },
  {
    name: 'between',
    facts: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1')],
    closing: [{ type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted' } }],
  },
  {
    name: 'opened',
    facts: [facts.opened()],
    closing: [{ type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted' } }],
  },
  {
    name: 'held',
    facts: heldAfterTool(),
    closing: [{ type: 'invocation.ended', outcome: { status: 'failed', class: 'host_interrupted' } }],
  },
]

/** A fact without its free-text `message`s, to compare recovery facts by their meaning. */
function withoutMessages(fact: Fact): unknown {
  const { message: _message, ...rest } = fact as Fact & { message?: string }
  if (rest.type === 'invocation.ended' && rest.outcome.status === 'failed') {
    const { message: _outcomeMessage, ...outcome } = rest.outcome
    return { ...rest, outcome }
  }
  return rest
}

function factsAfter(events: StoredEvent[], afterSeq: number, invocationId: string): Fact[] {
  return events.filter((item) => item.seq > afterSeq && item.event.invocation.invocationId === invocationId).map((item) => item.event.fact)
}

recovery(
  'after a reopen, recoverInvocations closes each open invocation with the right facts, once',
  boundedTest(15_000, async (dir) => {
    await withLog(dir, async (log) => {
      for (const state of parkedStates) await log.appendAll(new EventMaker(invocationOf(state.name)).many(state.facts))
      await log.appendAll(completeInvocation('done'))
      const failed = new EventMaker(invocationOf('failed'))
      await log.appendAll(failed.many([facts.opened(), facts.requested('s1'), facts.interrupted('s1'), facts.ended({ status: 'failed', class: 'model_failed' })]))
    })
    let afterRecovery: { events: number; digest: string } | undefined
    await withLog(dir, async (log) => {
      const before = await log.prefix(ALL, ALL)
      assert.is(await recoverInvocations(log), parkedStates.length)
      const after = await log.prefix(ALL, ALL)
      for (const state of parkedStates) {
        const id = `inv-${state.name}`
        assert.equal(factsAfter(after.events, before.highWater, id).map(withoutMessages), state.closing, state.name)
        assert.is(after.projectInvocation(id).terminal, 'failed', state.name)
        assert.equal(after.projectInvocation(id).unfinishedModelSteps, [], state.name)
      }
      assert.equal(after.projectInvocation('inv-tool').uncertainOperations, ['op1'], 'no settlement is invented')
      assert.equal(factsAfter(after.events, before.highWater, 'inv-done'), [], 'a completed invocation is left alone')
      assert.equal(factsAfter(after.events, before.highWater, 'inv-failed'), [], 'a failed invocation is left alone')
      assert.is(after.highWater, before.highWater + parkedStates.length + 1)
      afterRecovery = await log.verify()
      assert.is(await recoverInvocations(log), 0, 'a second call closes nothing')
      assert.equal(await log.verify(), afterRecovery, 'and writes nothing')
    })
    await withLog(dir, async (log) => {
      assert.equal(await log.verify(), afterRecovery)
      assert.is(await recoverInvocations(log), 0, 'nothing is open after a reopen')
      assert.equal(await log.verify(), afterRecovery)
    })
  }),
)

recovery(
  'an empty log and a log without open invocations recover nothing and keep their digest',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const empty = await log.verify()
      assert.is(await recoverInvocations(log), 0)
      assert.equal(await log.verify(), empty)
      await log.appendAll(completeInvocation('x'))
      const full = await log.verify()
      assert.is(await recoverInvocations(log), 0)
      assert.equal(await log.verify(), full)
    }),
  ),
)

recovery(
  'invocations marked live are left alone; once unmarked, recovery closes them',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      await log.appendAll(new EventMaker(invocationOf('live')).many([facts.opened(), facts.requested('s1')]))
      await log.appendAll(new EventMaker(invocationOf('orphan')).many([facts.opened()]))
      const internals = logInternals(log)
      internals.live.add('inv-live')
      const before = await log.prefix(ALL, ALL)
      assert.is(await recoverInvocations(log), 1)
      const after = await log.prefix(ALL, ALL)
      assert.equal(factsAfter(after.events, before.highWater, 'inv-live'), [], 'the live invocation got no fact')
      assert.equal(after.projectInvocation('inv-live'), { terminal: null, uncertainOperations: [], unfinishedModelSteps: ['s1'] })
      assert.is(after.projectInvocation('inv-orphan').terminal, 'failed')
      const kept = await log.verify()
      assert.is(await recoverInvocations(log), 0)
      assert.equal(await log.verify(), kept)
      internals.live.delete('inv-live')
      assert.is(await recoverInvocations(log), 1)
      assert.is((await log.prefix(ALL, ALL)).projectInvocation('inv-live').terminal, 'failed')
    }),
  ),
)

recovery(
  'two recoveries at once, with the same clock, close each invocation once and count it once',
  boundedTest(15_000, async (dir) => {
    await withLog(dir, async (log) => {
      for (const name of ['x', 'y', 'z']) await log.appendAll(new EventMaker(invocationOf(name)).many([facts.opened(), facts.requested('s1')]))
    })
    await withLog(dir, async (log) => {
      const now = () => 1_800_000_000_000
      const counts = await Promise.all([recoverInvocations(log, { now }), recoverInvocations(log, { now })])
      assert.is(counts[0] + counts[1], 3, `counted ${counts.join(' + ')}`)
      assert.is((await log.verify()).events, 6 + 3 * 2, 'each invocation closed by one model.interrupted and one ended')
      assert.is(await recoverInvocations(log), 0)
    })
  }),
)

recovery(
  'pendingSessions lists the sessions with a run open, a turn paused for its successor or tool outcomes to acknowledge, and leaves out the rest',
  boundedTest(20_000, (dir) =>
    withLog(dir, async (log) => {
      const open = new EventMaker(invocationOf('open'))
      const paused = new EventMaker(invocationOf('paused'))
      const uncertain = new EventMaker(invocationOf('uncertain'))
      await log.appendAll([
        ...open.many([facts.opened(), facts.requested('s1')]),
        ...paused.many([...heldAfterTool(), facts.ended({ status: 'handoff_paused', pause: pauseFor('h1') })]),
        ...uncertain.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1', { amount: 5, to: ['a'] }), facts.ended({ status: 'failed', class: 'outcome_unknown' })]),
        ...completeInvocation('done'),
      ])
      const pending = await log.pendingSessions()
      assert.equal(
        pending.map(({ sessionId, active, paused: turns, unknown }) => [sessionId, active.map((run) => run.invocationId), turns.map((turn) => [turn.runId, turn.intent.successorRunId]), unknown.map((op) => op.operationId)]),
        [
          ['session-open', ['inv-open'], [], []],
          ['session-paused', [], [['run-paused', 'run-next']], []],
          ['session-uncertain', [], [], ['op1']],
        ],
      )
      // With the input the call was dispatched with (the session's record keeps the operation without it).
      assert.equal(pending[2]?.unknown.map((op) => op.input), [{ amount: 5, to: ['a'] }])
      ;((pending[2]?.unknown[0]?.input as { to: string[] }).to).push('b')
      assert.equal((await log.pendingSessions())[2]?.unknown[0]?.input, { amount: 5, to: ['a'] }, "the caller's copy")
      // The caller's copies: changing them changes nothing of the log's.
      ;(pending[0] as { active: unknown[] }).active.length = 0
      assert.is((await log.pendingSessions())[0]?.active.length, 1)
      // Recovery closes the open run: its session has nothing pending any more.
      assert.is(await recoverInvocations(log), 1)
      assert.equal((await log.pendingSessions()).map((session) => session.sessionId), ['session-paused', 'session-uncertain'])
    }),
  ),
)

recovery(
  'pendingSessions still lists a session whose unknown outcome sits in a fact that cannot be read, without that input (verify names the fact)',
  boundedTest(30_000, async (dir) => {
    const path = join(dir, 'log')
    const uncertain = new EventMaker(invocationOf('uncertain'))
    let dispatchedSeq = 0
    const first = await EventLog.open(path)
    try {
      const seqs = await first.appendAll(uncertain.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1'), facts.ended({ status: 'failed', class: 'outcome_unknown' })]))
      dispatchedSeq = seqs[3] as number
      // Far enough back that the open's check of the tail does not read it.
      for (let index = 0; index < 220; index += 1) await first.appendAll(completeInvocation(`after-${index}`))
    } finally {
      await first.close()
    }
    await withDb(path, (db) => db.put(keys.event(dispatchedSeq), new Uint8Array([0xc1])))
    const log = await EventLog.open(path)
    try {
      const pending = await log.pendingSessions()
      assert.equal(pending.map((session) => [session.sessionId, session.unknown.map((op) => [op.operationId, 'input' in op])]), [['session-uncertain', [['op1', false]]]])
      const damaged = await log.verify().then(() => undefined, (error: FactstateError) => error)
      assert.equal([damaged?.code, damaged?.details], ['LOG_CORRUPT', { seq: dispatchedSeq }])
    } finally {
      await log.close()
    }
  }),
)

recovery(
  'pendingSessions gives each paused turn the time it was sealed (sealedAt: its invocation.ended fact\'s recordedAt), after a reopen too; a seal whose fact cannot be read is listed without it',
  boundedTest(30_000, async (dir) => {
    const path = join(dir, 'log')
    const sealedAt = (event: RuntimeEvent, at: number): RuntimeEvent => ({ ...event, recordedAt: at })
    const first = new EventMaker(invocationOf('first', 'session-a'))
    const second = new EventMaker(invocationOf('second', 'session-b'))
    const pauseB = { ...pauseFor('h1'), intent: { ...pauseFor('h1').intent, successorRunId: 'run-next-b', successorInvocationId: 'inv-next-b', claimId: 'claim-b' } }
    let secondSeal = 0
    const log = await EventLog.open(path)
    try {
      await log.appendAll([...first.many(heldAfterTool()), sealedAt(first.next(facts.ended({ status: 'handoff_paused', pause: pauseFor('h1') })), 1_796_550_764_120)])
      const seqs = await log.appendAll([...second.many(heldAfterTool()), sealedAt(second.next(facts.ended({ status: 'handoff_paused', pause: pauseB })), 1_796_637_164_120)])
      secondSeal = seqs.at(-1) as number
      await log.appendAll(completeInvocation('busy', 'session-c'))
      const expected = [
        ['session-a', 'turn-first', 1_796_550_764_120],
        ['session-b', 'turn-second', 1_796_637_164_120],
      ]
      const listed = async () => (await log.pendingSessions()).flatMap((session) => session.paused.map((turn) => [session.sessionId, turn.turnId, turn.sealedAt]))
      assert.equal(await listed(), expected)
      // What an application read for itself before: the run's last fact.
      assert.is((await log.invocationEvents('inv-second')).at(-1)?.event.recordedAt, 1_796_637_164_120)
      assert.equal((await log.pendingSessions({ sessionId: 'session-b' }))[0]?.paused.map((turn) => turn.sealedAt), [1_796_637_164_120])
      // Far enough back that the open's check of the tail does not read the seal.
      for (let index = 0; index < 220; index += 1) await log.appendAll(completeInvocation(`after-${index}`))
    } finally {
      await log.close()
    }
    const reopened = await EventLog.open(path)
    try {
      const pending = await reopened.pendingSessions()
      assert.equal(pending.map((session) => session.paused.map((turn) => [turn.invocationId, turn.sealedAt])), [[['inv-first', 1_796_550_764_120]], [['inv-second', 1_796_637_164_120]]], 'read from the stored log')
    } finally {
      await reopened.close()
    }
    await withDb(path, (db) => db.put(keys.event(secondSeal), new Uint8Array([0xc1])))
    const damaged = await EventLog.open(path)
    try {
      const pending = await damaged.pendingSessions()
      assert.equal(pending.map((session) => session.paused.map((turn) => [turn.invocationId, 'sealedAt' in turn])), [[['inv-first', true]], [['inv-second', false]]])
    } finally {
      await damaged.close()
    }
  }),
)

recovery(
  'pendingSessions({ sessionId }) reads that session alone: what the whole list says of it, or nothing; not a session whose id it begins',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      await log.appendAll(new EventMaker(invocationOf('open-a', 'alpha')).many([facts.opened(), facts.requested('s1')]))
      await log.appendAll(new EventMaker(invocationOf('open-ab', 'alpha.b')).many([facts.opened()]))
      await log.appendAll(completeInvocation('done', 'beta'))
      await log.appendAll(new EventMaker(invocationOf('failed', 'gamma')).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })]))
      const all = await log.pendingSessions({ unanswered: true })
      assert.equal(all.map((session) => session.sessionId), ['alpha', 'alpha.b', 'gamma'])
      for (const session of all) assert.equal(await log.pendingSessions({ unanswered: true, sessionId: session.sessionId }), [session], session.sessionId)
      assert.equal(await log.pendingSessions({ sessionId: 'alpha' }), all.filter((session) => session.sessionId === 'alpha'))
      assert.equal(await log.pendingSessions({ sessionId: 'beta', unanswered: true }), [])
      assert.equal(await log.pendingSessions({ sessionId: 'gamma' }), [], 'unanswered only when asked')
      assert.equal(await log.pendingSessions({ sessionId: 'nobody' }), [])
      for (const sessionId of ['', 'a b', 7]) {
        assert.is((await refusal(log.pendingSessions({ sessionId: sessionId as string }))).code, 'LOG_INVALID_ARGUMENT', JSON.stringify(sessionId))
      }
    }),
  ),
)

recovery.run()

// =============================================================================================
const corruption = suite('store: corruption and tampering')

/** Opens the log and verifies it; the LOG_CORRUPT refusal and where it came from. */
async function corruptionOf(dir: string): Promise<{ at: 'open' | 'verify'; error: FactstateError }> {
  let log: EventLog
  try {
    log = await EventLog.open(dir)
  } catch (error) {
    assert.is((error as FactstateError).code, 'LOG_CORRUPT', `open: ${String(error)}`)
    return { at: 'open', error: error as FactstateError }
  }
  try {
    const error = await refusal(log.verify())
    assert.is(error.code, 'LOG_CORRUPT', 'verify')
    return { at: 'verify', error }
  } finally {
    await log.close()
  }
}

/** Fills `log` with `count` events (multiples of 100) in batches of 100. */
async function fill(log: EventLog, count: number, prefix: string): Promise<void> {
  for (let n = 0; n < count / 100; n += 1) {
    const make = new EventMaker(invocationOf(`${prefix}${n}`))
    // One answer of 96 tool calls, each rejected: 100 facts.
    const calls = Array.from({ length: 96 }, (_, k) => call(`op${k}`))
    await log.appendAll(
      make.many([facts.opened(), facts.requested('s1'), facts.completed('s1', calls), ...calls.map((_, k) => facts.rejected(`op${k}`)), facts.ended({ status: 'cancelled', source: 'test' })]),
    )
  }
}

/** Writes a log whose event `canarySeq` settles with output `CANARY-xyz`, followed by `after` events. */
async function canaryLog(dir: string, after: number): Promise<number> {
  return withLog(dir, async (log) => {
    const a = new EventMaker(invocationOf('canary'))
    await log.appendAll(a.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1')]))
    const seq = await log.append(a.next(facts.settled('op1', 'CANARY-xyz')))
    await fill(log, after, 'after')
    return seq
  })
}

/** Flips one letter of the canary in every file of `dir` that stores it; the files touched. */
async function flipCanary(dir: string): Promise<string[]> {
  const found = await filesContaining(dir, 'CANARY-xyz')
  assert.ok(found.length > 0, 'the canary is stored in plain bytes')
  for (const { file, offsets } of found) await flipByte(file, (offsets[0] as number) + 'CANARY-'.length)
  return found.map((item) => item.file)
}

corruption(
  'a flipped byte in a stored value of a table file is LOG_CORRUPT from verify, naming the seq',
  boundedTest(20_000, async (dir) => {
    const canarySeq = await canaryLog(dir, 1_100)
    // Reopening converts LevelDB's write log into a sorted table (.ldb).
    await withLog(dir, async (log) => assert.is((await log.verify()).events, canarySeq + 1_100))
    const files = await flipCanary(dir)
    assert.ok(files.every((file) => file.endsWith('.ldb')), `the canary is in a table file: ${files.join(', ')}`)
    const { at, error } = await corruptionOf(dir)
    assert.is(at, 'verify', 'the event is older than the tail that open checks')
    assert.is(error.details?.seq, canarySeq)
  }),
)

corruption(
  'a flipped byte in the newest event of a table file is LOG_CORRUPT already on open',
  boundedTest(20_000, async (dir) => {
    const canarySeq = await canaryLog(dir, 0)
    await withLog(dir, async (log) => assert.is((await log.verify()).events, canarySeq))
    await flipCanary(dir)
    const { at } = await corruptionOf(dir)
    assert.is(at, 'open', 'open recomputes the chain of the newest events')
  }),
)

corruption(
  "a flipped byte in a batch in the middle of LevelDB's write log is LOG_CORRUPT (LevelDB drops the batch; continuity catches it)",
  boundedTest(20_000, async (dir) => {
    const canarySeq = await canaryLog(dir, 2_000)
    const files = await flipCanary(dir)
    assert.ok(files.every((file) => file.endsWith('.log')), `the canary is in the write log: ${files.join(', ')}`)
    const { at, error } = await corruptionOf(dir)
    assert.is(at, 'open', 'open finds the gap left by the dropped batch')
    // LevelDB drops the rest of the damaged 32 KiB block: the canary's batch and its neighbours.
    // Open scans backwards from the head, so it names the newest missing seq of that gap.
    const seq = error.details?.seq as number
    assert.ok(seq >= canarySeq && seq < canarySeq + 2_000, `missing seq ${seq} lies in the gap after ${canarySeq}`)
  }),
)

// LevelDB drops a corrupted *last* batch of its write log on open without an error (and deletes
// the log file), so only a record kept outside LevelDB can tell that acknowledged facts vanished.
corruption(
  "a flipped byte in the last batch of LevelDB's write log, after a clean close, is LOG_CORRUPT on open",
  boundedTest(20_000, async (dir) => {
    const canarySeq = await canaryLog(dir, 0)
    const files = await flipCanary(dir)
    assert.ok(files.every((file) => file.endsWith('.log')), `the canary is in the write log: ${files.join(', ')}`)
    const { at, error } = await corruptionOf(dir)
    assert.is(at, 'open')
    assert.ok((error.details?.seq as number) <= canarySeq, `the first lost seq is at most ${canarySeq}`)
    // A refused open leaves the evidence in place: the next open refuses too.
    assert.is((await corruptionOf(dir)).at, 'open')
  }),
)

/** Edits the raw LevelDB of a closed log. */

corruption(
  'tampered events are LOG_CORRUPT with their seq: another version byte, undecodable bytes, a re-encoded different event, a missing event',
  boundedTest(30_000, async (dir) => {
    const pristine = join(dir, 'pristine')
    const a = new EventMaker(invocationOf('a'))
    const early = a.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1', 'original')])
    await withLog(pristine, async (log) => {
      await log.appendAll(early)
      await fill(log, 1_100, 'later')
    })
    const target = 5
    const original = encodeEvent(canonical(early[target - 1] as RuntimeEvent))
    const variants: [string, (db: ClassicLevel<string, Uint8Array>) => Promise<void>][] = [
      ['version byte', (db) => db.put(keys.event(target), Uint8Array.from([2, ...original.subarray(1)]))],
      ['undecodable bytes', (db) => db.put(keys.event(target), Uint8Array.from([1, 0xc1, 0xc1]))],
      ['a valid event with one field changed', (db) => db.put(keys.event(target), encodeEvent(canonical({ ...(early[target - 1] as RuntimeEvent), fact: facts.settled('op1', 'forged') })))],
      ['a valid event that is not an event', (db) => db.put(keys.event(target), Uint8Array.from([1, 0x81, 0xa1, 0x61, 0x01]))],
      ['a missing event', (db) => db.del(keys.event(target))],
    ]
    for (const [what, edit] of variants) {
      const copy = join(dir, what.replace(/\W+/g, '-'))
      await cp(pristine, copy, { recursive: true })
      await withDb(copy, edit)
      const { error } = await corruptionOf(copy)
      assert.is(error.details?.seq, target, what)
    }
    // The untouched copy verifies: the refusals above come from the edits.
    await withLog(pristine, async (log) => assert.is((await log.verify()).events, 1_105))
  }),
)

corruption(
  'a record whose chain is consistent but which is not an event is LOG_CORRUPT on open (decoding validates)',
  boundedTest(15_000, async (dir) => {
    const bytes = Uint8Array.from([1, ...encodeRecord({ id: 'x', note: 'not an event' })])
    const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    try {
      await db.batch([
        { type: 'put', key: keys.event(1), value: bytes },
        { type: 'put', key: keys.eventId('x'), value: encodeRecord([1, chainStep(EMPTY_CHAIN, 1, bytes)]) },
        { type: 'put', key: keys.head, value: encodeRecord({ highWater: 1, chain: chainStep(EMPTY_CHAIN, 1, bytes) }) },
      ])
    } finally {
      await db.close()
    }
    const { at, error } = await corruptionOf(dir)
    assert.is(at, 'open')
    assert.is(error.details?.seq, 1)
  }),
)

corruption(
  'a tampered newest event or head is LOG_CORRUPT on open',
  boundedTest(20_000, async (dir) => {
    const pristine = join(dir, 'pristine')
    const a = new EventMaker(invocationOf('a'))
    const events = a.many([facts.opened(), facts.requested('s1'), facts.completed('s1')])
    await withLog(pristine, (log) => log.appendAll(events))
    const cases: [string, (db: ClassicLevel<string, Uint8Array>) => Promise<void>][] = [
      ['newest event changed', (db) => db.put(keys.event(3), encodeEvent(canonical({ ...(events[2] as RuntimeEvent), recordedAt: 1 })))],
      ['an event beyond the head', (db) => db.put(keys.event(4), encodeEvent(canonical(a.next(facts.ended()))))],
      ['head removed', (db) => db.del(keys.head)],
    ]
    for (const [what, edit] of cases) {
      const copy = join(dir, what.replace(/\W+/g, '-'))
      await cp(pristine, copy, { recursive: true })
      await withDb(copy, edit)
      const { at } = await corruptionOf(copy)
      assert.is(at, 'open', what)
    }
  }),
)

corruption.run()

// =============================================================================================
const concurrency = suite('store: concurrency and group commit')

concurrency(
  "under 'os' durability close() syncs LevelDB's write-ahead log before it writes the head anchor, and writes it only once LevelDB has closed (and written out a full memtable); under 'sync' there is nothing to sync",
  boundedTest(15_000, async (dir) => {
    const proto = ClassicLevel.prototype as unknown as {
      _put(key: string, value: Uint8Array, options: { sync?: boolean }): Promise<void>
      _close(): Promise<void>
      location: string
    }
    const put = proto._put
    const close = proto._close
    const synced: string[] = []
    const anchoredWhenClosing: boolean[] = []
    proto._put = function (key, value, options) {
      if (options?.sync === true) synced.push(key)
      return put.call(this, key, value, options)
    }
    proto._close = async function () {
      anchoredWhenClosing.push(await readFile(join(this.location, 'FACTSTATE-HEAD'), 'utf8').then(() => true, () => false))
      return close.call(this)
    }
    try {
      for (const durability of ['os', 'sync'] as const) {
        synced.length = 0
        const log = await EventLog.open(join(dir, durability), { durability })
        await log.append(new EventMaker(invocationOf('a')).next(facts.opened()))
        assert.equal(synced, [], `${durability}: nothing synced on its own before close`)
        await log.close()
        assert.equal(synced, durability === 'os' ? [keys.head] : [], durability)
        const anchor = await readFile(join(dir, durability, 'FACTSTATE-HEAD'), 'utf8')
        assert.match(anchor, /^factstate-head v1 1 /, `${durability}: the anchor counts the fact`)
        // Under sync a refresh a second after the append may have written one already: only os is checked.
        const anchored = anchoredWhenClosing.splice(0)
        if (durability === 'os') assert.equal(anchored, [false], 'os: no anchor yet when LevelDB closed')
      }
    } finally {
      proto._put = put
      proto._close = close
    }
  }),
)

concurrency(
  "a close that cannot record the head closes the log all the same and is LOG_IO, once: the anchor's file cannot be written, or under 'os' durability the sync before it fails",
  boundedTest(20_000, async (dir) => {
    const proto = ClassicLevel.prototype as unknown as { _put(key: string, value: Uint8Array, options: { sync?: boolean }): Promise<void> }
    const put = proto._put
    const cases = [
      {
        // A directory where the anchor is written aside: the write fails as on a full or read-only disk.
        durability: 'sync' as const,
        break: (path: string) => mkdir(join(path, 'FACTSTATE-HEAD.tmp', 'in-the-way'), { recursive: true }),
        mend: (path: string) => rm(join(path, 'FACTSTATE-HEAD.tmp'), { recursive: true }),
        said: 'could not be recorded in FACTSTATE-HEAD',
      },
      {
        durability: 'os' as const,
        break: async () => {
          proto._put = function (key, value, options) {
            if (options?.sync === true) return Promise.reject(Object.assign(new Error('injected sync failure'), { code: 'LEVEL_IO_ERROR' }))
            return put.call(this, key, value, options)
          }
        },
        mend: async () => {
          proto._put = put
        },
        said: 'could not be synced to the disk',
      },
    ]
    try {
      for (const { durability, break: breakIt, mend, said } of cases) {
        const path = join(dir, durability)
        let log = await EventLog.open(path, { durability })
        const make = new EventMaker(invocationOf('a'))
        await log.append(make.next(facts.opened()))
        await log.close()
        log = await EventLog.open(path, { durability })
        await log.append(make.next(facts.requested('s1')))
        await breakIt(path)
        const closing = log.close()
        const again = log.close()
        const error = await refusal(closing)
        assert.is(error.code, 'LOG_IO', durability)
        assert.match(error.message, said, durability)
        assert.ok(error.cause instanceof Error, `${durability}: the failure is the cause`)
        await again
        await log.close()
        assert.is((await refusal(log.append(make.next(facts.completed('s1', [], 'done'))))).code, 'LOG_CLOSED', `${durability}: the log is closed`)
        await mend(path)
        assert.match(await readFile(join(path, 'FACTSTATE-HEAD'), 'utf8'), /^factstate-head v1 1 /, `${durability}: the anchor still holds the head before`)
        await withLog(path, async (reopened) => {
          assert.is(reopened.head().highWater, 2, `${durability}: the acknowledged fact is there`)
        })
      }
    } finally {
      proto._put = put
    }
  }),
)

concurrency(
  "an append whose staging cannot read the index is LOG_IO with LevelDB's error as its cause, and the log goes on",
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      const opened = a.next(facts.opened())
      assert.is(await log.append(opened), 1)
      const proto = ClassicLevel.prototype as unknown as { _getSync(key: string, options: unknown): unknown }
      const getSync = proto._getSync
      const failure = Object.assign(new Error('the disk is gone'), { code: 'LEVEL_IO_ERROR' })
      proto._getSync = () => {
        throw failure
      }
      let refused: FactstateError
      try {
        // A repeat of a known id reads the id index to find the original.
        refused = await refusal(log.append(opened))
      } finally {
        proto._getSync = getSync
      }
      assert.is(refused.code, 'LOG_IO')
      assert.is((refused.cause as { cause?: unknown } | undefined)?.cause ?? refused.cause, failure)
      assert.is(await log.append(opened), 1, 'the repeat is recognised once the index reads again')
      assert.is(await log.append(a.next(facts.requested('s1'))), 2)
    }),
  ),
)

concurrency(
  'readers under way when the log closes end LOG_CLOSED (or finish), never with a raw LevelDB error',
  boundedTest(30_000, async (dir) => {
    const log = await EventLog.open(dir)
    await log.appendAll(Array.from({ length: 3_000 }, (_, index) => new EventMaker(invocationOf(`r${index}`)).next(facts.opened())))
    // events() hands out one chunk at a time: after the first event the rest are read after the close.
    const reader = log.events()
    assert.is((await reader.next()).value?.seq, 1)
    const verifying = log.verify().then(
      (verified) => ({ verified }),
      (error: FactstateError) => ({ error }),
    )
    await log.close()
    let read = 1
    let closed: FactstateError | undefined
    try {
      for await (const _ of reader) read += 1
    } catch (error) {
      closed = error as FactstateError
    }
    assert.is(closed?.code, 'LOG_CLOSED', `events() after close: ${closed?.message ?? `read all ${read}`}`)
    assert.ok(read < 3_000, `${read} events read`)
    const verified = await verifying
    if ('error' in verified) assert.is(verified.error.code, 'LOG_CLOSED', verified.error.message)
    else assert.is(verified.verified.events, 3_000)
    assert.is((await refusal(log.verify())).code, 'LOG_CLOSED')
  }),
)

concurrency(
  '256 concurrent appenders on 256 invocations: each keeps its order, seqs are gapless, and group commit groups',
  boundedTest(30_000, (dir) =>
    withLog(dir, async (log) => {
      const batches: number[] = []
      const unsubscribe = logInternals(log).subscribe((events) => batches.push(events.length))
      const appended = new Map<string, { seqs: number[]; events: RuntimeEvent[] }>()
      await Promise.all(
        Array.from({ length: 256 }, async (_, worker) => {
          const events = completeInvocation(`w${worker}`, `session-${worker % 16}`)
          const seqs: number[] = []
          for (const event of events) seqs.push(await log.append(event))
          appended.set(`inv-w${worker}`, { seqs, events })
        }),
      )
      unsubscribe()
      const total = 256 * 8
      const all = [...appended.values()].flatMap((item) => item.seqs).sort((x, y) => x - y)
      assert.equal(all, Array.from({ length: total }, (_, index) => index + 1), 'seqs are gapless and unique')
      const prefix = await log.prefix(ALL, ALL)
      for (const [id, { seqs, events }] of appended) {
        assert.ok(
          seqs.every((seq, index) => index === 0 || seq > (seqs[index - 1] as number)),
          `${id} seqs increase`,
        )
        const stored = prefix.events.filter((item) => item.event.invocation.invocationId === id)
        assert.equal(stored, seqs.map((seq, index) => ({ seq, event: canonical(events[index]) })), `${id} events in order`)
        assert.is(prefix.projectInvocation(id).terminal, 'completed')
      }
      assert.is(
        batches.reduce((sum, size) => sum + size, 0),
        total,
        'every fact was reported by exactly one durable batch',
      )
      assert.ok(batches.length < total / 8, `${batches.length} durable batches for ${total} facts`)
      assert.ok(Math.max(...batches) >= 64, `the largest batch held ${Math.max(...batches)} facts`)
      assert.is((await log.verify()).events, total)
    }),
  ),
)

concurrency(
  'appends to one invocation issued in one tick without awaiting are applied in call order',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const pending: { id: string; seqs: Promise<number>[] }[] = []
      for (let n = 0; n < 64; n += 1) {
        const events = completeInvocation(`n${n}`)
        pending.push({ id: `inv-n${n}`, seqs: events.map((event) => log.append(event)) })
      }
      for (const { id, seqs } of pending) {
        const resolved = await Promise.all(seqs)
        assert.ok(
          resolved.every((seq, index) => index === 0 || seq > (resolved[index - 1] as number)),
          `${id}: ${resolved.join(',')}`,
        )
      }
      const prefix = await log.prefix(ALL, ALL)
      assert.is(prefix.highWater, 64 * 8)
      for (const { id } of pending) assert.is(prefix.projectInvocation(id).terminal, 'completed')
    }),
  ),
)

concurrency(
  'LevelDB refusing a put while a group is staged fails the log: that group is not written, what was durable stays',
  boundedTest(30_000, async (dir) => {
    // The one way to make LevelDB refuse a put: the binding's own method, for one key.
    const { ChainedBatch } = createRequire(import.meta.url)('classic-level/chained-batch.js') as {
      ChainedBatch: { prototype: { _put(key: string, value: Uint8Array): void } }
    }
    const proto = ChainedBatch.prototype
    const put = proto._put
    const poisoned = keys.eventId('inv-bad/3')
    proto._put = function (key, value) {
      if (key === poisoned) throw Object.assign(new Error('injected put failure'), { code: 'LEVEL_IO_ERROR' })
      return put.call(this, key, value)
    }
    // The ids whose append resolved: exactly these must be in the log afterwards.
    const acknowledged = new Set<string>()
    try {
      await withLog(dir, async (log) => {
        const append = async (event: RuntimeEvent) => {
          await log.append(event)
          acknowledged.add(event.id)
        }
        for (const event of completeInvocation('good')) await append(event)
        // Side by side with the bad invocation, so that they share groups.
        const lanes = [completeInvocation('bad'), ...Array.from({ length: 8 }, (_, n) => completeInvocation(`other${n}`))]
        const outcomes = await Promise.allSettled(
          lanes.map(async (events) => {
            for (const event of events) await append(event)
          }),
        )
        const failed = outcomes.filter((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected')
        assert.ok(failed.length >= 1 && outcomes[0]?.status === 'rejected', 'the appender of the refused fact is rejected')
        for (const { reason } of failed) assert.is((reason as FactstateError).code, 'LOG_IO', String(reason))
        assert.is((await refusal(log.append(completeInvocation('late')[0] as RuntimeEvent))).code, 'LOG_IO', 'a failed log refuses later appends')
        assert.is((await refusal(log.prefix(ALL, ALL))).code, 'LOG_IO', 'and reads')
      })
    } finally {
      proto._put = put
    }
    assert.ok(acknowledged.has('inv-good/8') && !acknowledged.has('inv-bad/3'))
    await withLog(dir, async (log) => {
      const prefix = await log.prefix(ALL, ALL)
      assert.equal(new Set(prefix.events.map(({ event }) => event.id)), acknowledged, 'the log holds exactly the acknowledged facts')
      assert.is(prefix.projectInvocation('inv-good').terminal, 'completed')
      assert.is((await log.verify()).events, acknowledged.size, 'the log verifies after the failure')
    })
  }),
)

concurrency.run()

// =============================================================================================
const encoding = suite('store: encoding edge cases')

// A string with a lone surrogate would be stored as U+FFFD: the event read back would differ from
// the one acknowledged, so the log refuses it.
encoding(
  'a string that cannot round-trip is refused or round-trips exactly',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      const event = a.next(facts.opened('\ud800 lone'))
      try {
        await log.append(event)
      } catch (error) {
        assert.is((error as FactstateError).code, 'LOG_INVALID_EVENT')
        return
      }
      assert.equal((await log.prefix(ALL, ALL)).events[0]?.event, canonical(event))
    }),
  ),
)

encoding(
  'a non-enumerable member with a lone surrogate is refused like an enumerable one, and nothing is written',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      const event = a.next(facts.opened())
      const input = (event.fact as { input: Record<string, unknown> }).input
      Object.defineProperty(input, 'content', { value: 'a\ud800b', enumerable: false })
      assert.is((await refusal(log.append(event))).code, 'LOG_INVALID_EVENT')
      assert.is((await log.verify()).events, 0)
    }),
  ),
)

// An event is validated and packed in one walk as `append` is called: what the caller changes in it
// afterwards, before the append is durable, reaches neither the stored bytes nor the listeners.
encoding(
  "changing an event right after append or appendAll returns changes nothing stored, digested or heard",
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      const events = [a.next(facts.opened()), ...a.many([facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1', { amount: 5, to: ['x'] })])]
      const originals = structuredClone(events)
      const heard: RuntimeEvent[] = []
      const unsubscribe = logInternals(log).subscribe((stored) => heard.push(...stored.map((each) => structuredClone(each.event))))
      const first = log.append(events[0] as RuntimeEvent)
      ;((events[0] as RuntimeEvent).fact as { model?: string }).model = 'changed'
      ;(events[0] as { recordedAt: number }).recordedAt += 1
      const rest = log.appendAll(events.slice(1))
      const args = ((events[3] as RuntimeEvent).fact as { input: { amount: number; to: string[] } }).input
      args.amount = 6
      args.to.push('y')
      ;((events[1] as RuntimeEvent).fact as { stepId: string }).stepId = 's9'
      events.length = 1
      const [seq, seqs] = await Promise.all([first, rest])
      assert.equal([seq, ...seqs], [1, 2, 3, 4])
      unsubscribe()
      const stored = (await log.prefix(ALL, ALL)).events
      assert.equal(stored.map((each) => each.event), originals.map((event) => canonical(event)))
      assert.equal(heard, originals.map((event) => canonical(event)))
      // The digest chains the bytes of the events as they were when appended.
      let chain = EMPTY_CHAIN
      originals.forEach((event, index) => (chain = chainStep(chain, index + 1, encodeEvent(canonical(event)))))
      assert.is((await log.verify()).digest, logDigest(originals.length, chain))
    }),
  ),
)

// An own `__proto__` key (JSON.parse makes one from model-written tool arguments) would be dropped
// by copying, so the log refuses it.
encoding(
  'an object with an own __proto__ key is refused or round-trips exactly',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const a = new EventMaker(invocationOf('a'))
      await log.appendAll(a.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')])]))
      const event = a.next(facts.dispatched('op1', JSON.parse('{"__proto__":{"x":1},"b":2}')))
      let seq: number
      try {
        seq = await log.append(event)
      } catch (error) {
        assert.is((error as FactstateError).code, 'LOG_INVALID_EVENT')
        return
      }
      const stored = (await log.prefix(ALL, ALL)).events[seq - 1]?.event.fact as { input: object }
      assert.equal(Object.keys(stored.input), ['__proto__', 'b'])
    }),
  ),
)

// msgpack as the log writes it (map16, msgpackr's choice, which fixes the stored bytes) holds at most
// 65,535 members in one object.
encoding(
  'an object of 65,535 members round-trips through a reopen; one of 65,536 (or a throwing getter) is LOG_INVALID_EVENT and writes nothing',
  boundedTest(30_000, async (dir) => {
    const wide = (members: number): Record<string, number> => Object.fromEntries(Array.from({ length: members }, (_, index) => [`k${index}`, index]))
    const a = new EventMaker(invocationOf('a'))
    const widest = a.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1', wide(65_535))])
    const before = await withLog(dir, async (log) => {
      await log.appendAll(widest)
      const verified = await log.verify()
      const tooWide = a.next(facts.settled('op1', wide(65_536)))
      const refused = await refusal(log.append(tooWide))
      assert.is(refused.code, 'LOG_INVALID_EVENT')
      assert.match(refused.message, /more than 65535 members/)
      const settled = facts.settled('op1')
      Object.defineProperty(settled, 'outcome', {
        enumerable: true,
        get() {
          throw new Error('no outcome today')
        },
      })
      const unreadable = await refusal(log.append(a.next(settled)))
      assert.is(unreadable.code, 'LOG_INVALID_EVENT')
      assert.match(unreadable.message, /no outcome today/)
      assert.equal(await log.verify(), verified, 'nothing was written')
      return verified
    })
    await withLog(dir, async (log) => {
      assert.equal(await log.verify(), before)
      const stored = (await log.prefix(ALL, ALL)).events.at(-1)?.event.fact as { input: Record<string, number> }
      assert.is(Object.keys(stored.input).length, 65_535)
      assert.is(stored.input.k65534, 65_534)
    })
  }),
)

encoding(
  'unicode, nested JSON and large numbers round-trip exactly through a reopen',
  boundedTest(15_000, async (dir) => {
    const a = new EventMaker(invocationOf('a'))
    const output = { text: 'grüße 👋🏽 日本語 \u0000 "quoted"', nested: [{ deep: [1.5, -2, 2 ** 53 - 1, -(2 ** 40), 1e-300] }, null, true, ''], empty: {} }
    const events = a.many([facts.opened('héllo 🌍'), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1', output), facts.settled('op1', output)])
    const before = await withLog(dir, async (log) => {
      await log.appendAll(events)
      return log.verify()
    })
    await withLog(dir, async (log) => {
      assert.equal(await log.verify(), before)
      assert.equal(
        (await log.prefix(ALL, ALL)).events.map((item) => item.event),
        events.map((event) => canonical(event)),
      )
    })
  }),
)

encoding.run()

// =============================================================================================
const format = suite('store: index format')

format(
  'the first batch marks the index format; a log marked by a newer factstate is refused and left as it was; an unmarked (older) log opens and gets marked',
  boundedTest(20_000, async (dir) => {
    const a = new EventMaker(invocationOf('a'))
    await withLog(dir, async (log) => {
      await log.append(a.next(facts.opened()))
    })
    let marked: number | undefined
    await withDb(dir, async (db) => {
      marked = decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format')
      // 6 is this version's own (a log holding the provider's state): one past it is a newer factstate's.
      await db.put(keys.format, encodeRecord(marked + 2))
    })
    assert.is(marked, 5)
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const refused = await refusal(EventLog.open(dir))
      assert.is(refused.code, 'LOG_FORMAT_UNSUPPORTED', `attempt ${attempt}: refused again, the lock released`)
      assert.equal(refused.details, { format: 7, supported: 6 })
    }
    await withDb(dir, async (db) => {
      assert.is(decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format'), 7, 'the refusal wrote nothing')
      await db.put(keys.format, encodeRecord('two'))
    })
    assert.is((await refusal(EventLog.open(dir))).code, 'LOG_CORRUPT', 'an unreadable format record')
    await withDb(dir, (db) => db.del(keys.format))
    await withLog(dir, async (log) => {
      assert.is((await log.verify()).events, 1, 'an unmarked log opens')
      await log.append(a.next(facts.requested('s1')))
    })
    await withDb(dir, async (db) => {
      assert.is(decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format'), 5, 'and is marked by its next batch')
      // As the release before this one marked its logs: opened, read, and marked 4 by the next write.
      await db.put(keys.format, encodeRecord(3))
    })
    await withLog(dir, async (log) => {
      assert.is((await log.verify()).events, 2, 'a log marked 3 opens and verifies')
      await log.append(a.next(facts.completed('s1')))
    })
    await withDb(dir, async (db) => {
      assert.is(decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format'), 5, 'a log marked 3 is marked 5 by its next write: the releases before refuse it as newer')
    })
  }),
)

format(
  "a log is marked 6 by the batch of its first model.completed that carries the provider's state, not before: 0.9.x (which reads up to 5) refuses it then, and reads a log without one",
  boundedTest(20_000, async (dir) => {
    const formatOf = () => withDb(dir, async (db) => decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format'))
    const a = new EventMaker(invocationOf('a'))
    const call = { callId: 'call-op-1', name: 'missing', arguments: '{}' }
    await withLog(dir, async (log) => {
      await log.append(a.next(facts.opened()))
      await log.append(a.next(facts.requested('s1')))
    })
    assert.is(await formatOf(), 5, 'a log without such a fact stays readable by 0.9.x')
    await withLog(dir, async (log) => {
      // Bounds are checked on append: an empty array is none, and nothing of the refused fact is written.
      const refused = await refusal(log.append(a.next({ type: 'model.completed', stepId: 's1', output: { toolCalls: [call], finishReason: 'tool_calls', reasoningDetails: [] } })))
      assert.is(refused.code, 'LOG_INVALID_EVENT')
      assert.equal(refused.details, { fields: ['fact.output.reasoningDetails'] })
      const tooLarge = { ...call, extraContent: { google: { thought_signature: 's'.repeat(262_144) } } }
      const large = await refusal(log.append(a.next({ type: 'model.completed', stepId: 's1', output: { toolCalls: [tooLarge], finishReason: 'tool_calls' } })))
      assert.equal(large.details, { fields: ['fact.output.toolCalls.0.extraContent'] })
    })
    assert.is(await formatOf(), 5, 'a refused append marks nothing')
    await withLog(dir, async (log) => {
      const signed = { ...call, extraContent: { google: { thought_signature: 'CiQBVKhc7nX0' } } }
      await log.append(a.next({ type: 'model.completed', stepId: 's1', output: { toolCalls: [signed], finishReason: 'tool_calls' } }))
      assert.equal((await log.invocationEvents(a.invocation.invocationId)).at(-1)?.event.fact, { type: 'model.completed', stepId: 's1', output: { toolCalls: [signed], finishReason: 'tool_calls' } })
    })
    assert.is(await formatOf(), 6, 'marked 6 in the batch that wrote it')
    // A reader that takes up to 5 (0.9.x) meets 6 as a newer factstate's log: as this one meets 7.
    await withDb(dir, (db) => db.put(keys.format, encodeRecord(7)))
    const refused = await refusal(EventLog.open(dir))
    assert.is(refused.code, 'LOG_FORMAT_UNSUPPORTED')
    await withDb(dir, (db) => db.put(keys.format, encodeRecord(6)))
    await withLog(dir, async (log) => {
      assert.is((await log.verify()).events, 3)
      await log.append(a.next(facts.rejected('op-1')))
    })
    assert.is(await formatOf(), 6, 'never marked down')
    const b = new EventMaker(invocationOf('b'))
    const other = join(dir, 'reasoning')
    await mkdir(other)
    await withLog(other, async (log) => {
      await log.appendAll([b.next(facts.opened()), b.next(facts.requested('s1'))])
      await log.append(b.next({ type: 'model.completed', stepId: 's1', output: { text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: [{ type: 'reasoning.encrypted', data: 'gAAAAABo' }] } }))
    })
    assert.is(await withDb(other, async (db) => decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format')), 6, 'reasoningDetails marks it too')
  }),
)

format(
  "an ended invocation's index record holds its members in the order they have always been stored in",
  boundedTest(20_000, async (dir) => {
    const events = completeInvocation('order')
    await withLog(dir, async (log) => {
      for (const event of events) await log.append(event)
    })
    await withDb(dir, async (db) => {
      const record = decodeRecord<Record<string, unknown>>((await db.get(keys.invocation('inv-order'))) as Uint8Array, 'invocation')
      assert.equal(Object.keys(record), ['invocation', 'inputKind', 'openedSeq', 'lastSeq', 'facts', 'terminal', 'openSteps', 'uncertain', 'operations', 'held', 'pendingCalls', 'answered', 'outcome'])
      assert.equal(record, {
        invocation: events[0]?.invocation,
        inputKind: 'message',
        openedSeq: 1,
        lastSeq: events.length,
        facts: events.length,
        terminal: 'completed',
        openSteps: [],
        uncertain: [],
        operations: ['op1'],
        held: null,
        pendingCalls: [],
        answered: true,
        outcome: { status: 'completed' },
      })
    })
  }),
)

format(
  "a log from before seals reserved their claims gets its pending seals' claims indexed on open, once; a new log is marked by its first batch",
  boundedTest(20_000, async (dir) => {
    const held = heldAfterTool()
    const first = new EventMaker(invocationOf('first'))
    const second = new EventMaker(invocationOf('second'))
    const pause = pauseFor('h1')
    await withLog(dir, async (log) => {
      await log.appendAll(first.many([...held, facts.ended({ status: 'handoff_paused', pause })]))
      await log.appendAll(second.many(held))
    })
    // What a log of an earlier version holds: no claim records of seals, no marker.
    await withDb(dir, async (db) => {
      assert.ok((await db.get(keys.reservationsIndexed)) !== undefined, 'the first batch marked the log')
      assert.is(decodeRecord<string>((await db.get(keys.sealedClaim('claim-h1'))) as Uint8Array, 'sealed claim'), 'inv-first')
      await db.batch([
        { type: 'del', key: keys.sealedClaim('claim-h1') },
        { type: 'del', key: keys.sealedSuccessor('inv-next') },
        { type: 'del', key: keys.reservationsIndexed },
      ])
    })
    let digest: { events: number; digest: string } | undefined
    await withLog(dir, async (log) => {
      digest = await digestOf(log)
      const refused = await refusal(log.append(second.next(facts.ended({ status: 'handoff_paused', pause: { ...pause, intent: { ...pause.intent, successorInvocationId: 'inv-other' } } }))))
      assert.is(refused.code, 'HANDOFF_CLAIMED', 'the old seal reserves its claim')
      assert.equal(await digestOf(log), digest, 'nothing written')
    })
    await withDb(dir, async (db) => {
      assert.is(decodeRecord<string>((await db.get(keys.sealedClaim('claim-h1'))) as Uint8Array, 'sealed claim'), 'inv-first', 'indexed on open')
      assert.is(decodeRecord<string>((await db.get(keys.sealedSuccessor('inv-next'))) as Uint8Array, 'sealed successor'), 'inv-first', 'with its successor')
      assert.ok((await db.get(keys.reservationsIndexed)) !== undefined, 'and marked')
      // Marked, the log is not scanned again: a record removed now stays removed, and verify() finds it missing.
      await db.del(keys.sealedClaim('claim-h1'))
    })
    await withLog(dir, async (log) => {
      assert.equal(log.head(), { highWater: digest?.events, digest: digest?.digest })
      const damage = await refusal(log.verify())
      assert.is(damage.code, 'LOG_CORRUPT')
      assert.equal(damage.details, { index: 'reservation', key: keys.sealedClaim('claim-h1') })
    })
    await withDb(dir, async (db) => {
      assert.is(await db.get(keys.sealedClaim('claim-h1')), undefined, 'scanned once')
    })
  }),
)

format(
  'a log an earlier version wrote with a fact the machine refuses (a request after the final answer) still opens, and recovery closes its invocation',
  boundedTest(15_000, async (dir) => {
    const a = new EventMaker(invocationOf('old'))
    await withLog(dir, async (log) => {
      await log.appendAll(a.many([facts.opened(), facts.requested('s1'), facts.completed('s1')]))
      await refusal(log.append(a.next(facts.requested('s2')))).then((error) => assert.is(error.code, 'LOG_REJECTED_FACT', 'refused today'))
    })
    // What an earlier version accepted: the request written with its index records and the head, as its log did.
    const late = new EventMaker(invocationOf('old'))
    const event = late.many([facts.opened(), facts.requested('s1'), facts.completed('s1'), facts.requested('s2')])[3] as RuntimeEvent
    await withDb(dir, async (db) => {
      const head = decodeRecord<{ highWater: number; chain: Uint8Array }>((await db.get(keys.head)) as Uint8Array, 'head')
      const seq = head.highWater + 1
      const bytes = encodeEvent(canonical(event))
      const chain = chainStep(new Uint8Array(head.chain), seq, bytes)
      await db.batch([
        { type: 'put', key: keys.event(seq), value: bytes },
        { type: 'put', key: keys.eventId(event.id), value: encodeRecord([seq, chain]) },
        { type: 'put', key: keys.byInvocation('inv-old', seq), value: new Uint8Array(0) },
        { type: 'put', key: keys.head, value: encodeRecord({ highWater: seq, chain }) },
      ])
    })
    await withLog(dir, async (log) => {
      assert.is((await log.verify()).events, 4)
      assert.equal((await log.prefix(ALL, ALL)).projectInvocation('inv-old').unfinishedModelSteps, ['s2'])
      assert.is(await recoverInvocations(log), 1)
      assert.is((await log.prefix(ALL, ALL)).projectInvocation('inv-old').terminal, 'failed')
    })
  }),
)

format.run()

// =============================================================================================
const digests = suite('store: the digest at a seq')

digests(
  'digestAt(seq) is the head digest the log had at that seq, read back after a reopen; verify ends at digestAt(highWater); a log put back from a backup and grown past the seq has another one there',
  boundedTest(15_000, async (dir) => {
    const path = join(dir, 'log')
    const seen: string[] = []
    await withLog(path, async (log) => {
      seen.push(log.head().digest)
      for (const name of ['a', 'b']) {
        for (const event of completeInvocation(name)) {
          await log.append(event)
          seen.push(log.head().digest)
        }
      }
      for (let seq = 0; seq < seen.length; seq += 1) assert.is(await log.digestAt(seq), seen[seq], `seq ${seq}, the log open`)
      for (const bad of [-1, seen.length, 1.5, Number.NaN, '3' as unknown as number, undefined as unknown as number]) {
        assert.is((await refusal(log.digestAt(bad))).code, 'LOG_INVALID_ARGUMENT', String(bad))
      }
    })
    await EventLog.backup(path, join(dir, 'backup'))
    await withLog(path, async (log) => {
      for (let seq = 0; seq < seen.length; seq += 1) assert.is(await log.digestAt(seq), seen[seq], `seq ${seq}, reopened`)
      assert.is((await log.verify()).digest, await log.digestAt(log.head().highWater))
      for (const event of completeInvocation('c')) await log.append(event)
    })
    const after = await withLog(path, (log) => log.digestAt(20))
    // The backup holds 16 facts; put back and grown with other facts, its seq 20 is not the log's seq 20.
    await withLog(join(dir, 'backup'), async (restored) => {
      assert.is(await restored.digestAt(16), seen[16], 'the same facts up to the backup')
      for (const event of completeInvocation('d')) await restored.append(event)
      assert.is.not(await restored.digestAt(20), after)
      assert.is(await restored.digestAt(16), seen[16])
    })
    const closed = await EventLog.open(path)
    await closed.close()
    assert.is((await refusal(closed.digestAt(0))).code, 'LOG_CLOSED')
  }),
)

digests.run()
