/**
 * `log.events({ follow: true })`: a reader that reads what the log holds and then each event as it
 * becomes durable, in seq order, each once — also when it falls far behind — and ends at `to` or
 * when the log closes.
 */
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RuntimeEvent, type StoredEvent } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { keys } from '../store/keys.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { countingTool, runInput } from './support/engine-fixtures.js'
import { aliveAfterCollection } from './support/gc.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal } from './support/log-fixtures.js'

const follow = suite('store: follow')

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** The events of `count` invocations, each opened and cancelled. */
function invocations(count: number, tag: string) {
  return Array.from({ length: count }, (_, index) => new EventMaker(invocationOf(`${tag}-${index}`)).many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })])).flat()
}

follow(
  'a follower reads what the log holds, then each event as it becomes durable, in order and once, and stops at `to`',
  boundedTest(30_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      await log.appendAll(completeInvocation('before'))
      const reader = log.events({ follow: true, to: 20 })
      const seen: StoredEvent[] = []
      const reading = (async () => {
        for await (const stored of reader) seen.push(stored)
      })()
      // Some appended while the reader waits, some in one call, some side by side.
      await log.appendAll(completeInvocation('during').slice(0, 4))
      await log.appendAll(completeInvocation('during').slice(4))
      await Promise.all(invocations(3, 'side').map((event) => log.append(event)))
      await reading
      assert.equal(
        seen.map((stored) => stored.seq),
        Array.from({ length: 20 }, (_, index) => index + 1),
      )
      const stored: StoredEvent[] = []
      for await (const event of log.events({ to: 20 })) stored.push(event)
      assert.equal(seen, stored, 'the same events as a plain read gives')
      // Fresh objects, as a read from the log gives: changing one changes nothing the log holds.
      ;(seen[0] as { event: { id: string } }).event.id = 'changed'
      const again: StoredEvent[] = []
      for await (const event of log.events({ from: 1, to: 1, follow: true })) again.push(event)
      assert.is(again[0]?.event.id, stored[0]?.event.id)
    } finally {
      await log.close()
    }
  }),
)

follow(
  'a follower that falls behind by more than it keeps in memory reads the rest from the log: every event once, in order',
  boundedTest(60_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    try {
      const reader = log.events({ follow: true })
      const first = await Promise.all([reader.next(), log.append(new EventMaker(invocationOf('first')).next(facts.opened()))])
      assert.is(first[0].value?.seq, 1)
      // 24,000 events while the reader is not reading: more than the 16,384 it keeps.
      const events = invocations(12_000, 'many')
      for (let index = 0; index < events.length; index += 2_000) await log.appendAll(events.slice(index, index + 2_000))
      let expected = 2
      for await (const stored of reader) {
        assert.is(stored.seq, expected)
        expected += 1
        if (stored.seq === 24_001) break
      }
      assert.is(expected, 24_002)
    } finally {
      await log.close()
    }
  }),
)

follow(
  'a close ends a follower that has caught up once it has read every event written before the close; one far behind gets LOG_CLOSED naming its place',
  boundedTest(60_000, async (root) => {
    let log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    const reader = log.events({ follow: true })
    const seen: number[] = []
    const reading = (async () => {
      for await (const stored of reader) seen.push(stored.seq)
      return 'ended'
    })()
    const pending = invocations(5, 'closing').map((event) => log.append(event))
    await log.close()
    await Promise.all(pending)
    assert.is(await reading, 'ended')
    assert.equal(
      seen,
      Array.from({ length: 10 }, (_, index) => index + 1),
    )

    log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    const behind = log.events({ follow: true, from: 11 })
    const never = log.events({ follow: true, from: 11 })
    const [read] = await Promise.all([behind.next(), log.append(new EventMaker(invocationOf('eleventh')).next(facts.opened()))])
    assert.is(read.value?.seq, 11)
    // 20,000 events the reader does not read: more than the 16,384 it keeps for it.
    const events = invocations(10_000, 'behind')
    for (let index = 0; index < events.length; index += 2_000) await log.appendAll(events.slice(index, index + 2_000))
    await log.close()
    const error = await refusal(behind.next())
    assert.is(error.code, 'LOG_CLOSED')
    assert.equal(error.details, { seq: 11 })
    const unread = await refusal(never.next())
    assert.equal([unread.code, unread.details], ['LOG_CLOSED', { seq: 10 }], 'one that never started reading')
  }),
)

follow(
  'a close while a follower reads what the log holds: it names its place with LOG_CLOSED, and a follower from there reads the rest',
  boundedTest(60_000, async (root) => {
    let log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    const events = invocations(1_000, 'held')
    for (let index = 0; index < events.length; index += 500) await log.appendAll(events.slice(index, index + 500))
    const reader = log.events({ follow: true })
    assert.is((await reader.next()).value?.seq, 1)
    await log.close()
    let last = 1
    const error = await refusal(async () => {
      for await (const { seq } of reader) last = seq
    })
    assert.equal([error.code, error.details], ['LOG_CLOSED', { seq: last }])
    log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    try {
      let seen = 0
      for await (const { seq } of log.events({ from: last + 1, to: 2_000, follow: true })) seen = seq
      assert.is(seen, 2_000)
    } finally {
      await log.close()
    }
  }),
)

follow(
  'a follower that keeps up lets go of what it read: with one event always unread, it holds no more than it may keep',
  boundedTest(60_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    try {
      const handed: WeakRef<object>[] = []
      const unsubscribe = logInternals(log).subscribe((stored) => {
        for (const { event } of stored) handed.push(new WeakRef(event))
      })
      const reader = log.events({ follow: true })
      const [one] = await Promise.all([reader.next(), log.appendAll(invocations(1, 'start'))])
      assert.is(one.value?.seq, 1)
      for (let round = 0; round < 200; round += 1) {
        await log.appendAll(invocations(50, `round-${round}`))
        for (let read = 0; read < 100; read += 1) assert.is((await reader.next()).done, false)
      }
      unsubscribe()
      for (let pass = 0; pass < 3; pass += 1) {
        await new Promise((resolve) => setTimeout(resolve, 10))
        gc()
      }
      const alive = handed.filter((ref) => ref.deref() !== undefined).length
      assert.ok(alive <= 16_384, `${alive} of ${handed.length} events handed to the follower are still held`)
      await reader.return(undefined)
    } finally {
      await log.close()
    }
  }),
)

/** Heap and array-buffer memory in use after collecting garbage, MiB. */
async function memoryInUse(): Promise<number> {
  for (let pass = 0; pass < 3; pass += 1) {
    await new Promise((resolve) => setTimeout(resolve, 10))
    gc()
  }
  const { heapUsed, arrayBuffers } = process.memoryUsage()
  return (heapUsed + arrayBuffers) / 2 ** 20
}

follow(
  'a follower that does not read holds no more than 16 MiB of large events, only their stored bytes: the rest it reads back from the log, in order',
  boundedTest(60_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    try {
      const reader = log.events({ follow: true })
      const [first] = await Promise.all([reader.next(), log.append(new EventMaker(invocationOf('big-0')).next(facts.opened('small')))])
      assert.is(first.value?.seq, 1)
      const before = await memoryInUse()
      // 40 facts of ~1 MiB each as stored while the reader waits, far fewer than 16,384 events; each
      // an array of small numbers, whose decoded copy is ~8 times its stored size.
      const big = Array.from({ length: 1 << 20 }, (_, index) => index & 7)
      for (let index = 1; index <= 40; index += 1) {
        const make = new EventMaker(invocationOf(`big-${index}`))
        await log.appendAll(make.many([facts.opened(`${index}`), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }])]))
        await log.append(make.next(facts.dispatched('op1', big)))
        // Under the bound, it keeps them: as stored bytes (~20 MiB with their buffers), not as the log's decoded copies (~110 MiB).
        if (index === 12) {
          const held = (await memoryInUse()) - before
          assert.ok(held < 48, `the waiting follower holds ${held.toFixed(1)} MiB for 12 MiB of stored events`)
        }
      }
      const grown = (await memoryInUse()) - before
      assert.ok(grown < 48, `the waiting follower holds ${grown.toFixed(1)} MiB for 40 MiB of stored events`)
      const read: string[] = []
      for (let index = 1; index <= 40 * 4; index += 1) {
        const { value } = await reader.next()
        const fact = value?.event.fact
        if (fact?.type === 'invocation.opened' && fact.input.kind === 'message') read.push(`${value?.seq} ${fact.input.content}`)
        if (fact?.type === 'tool.dispatched') assert.is((fact.input as number[]).length, 1 << 20)
      }
      assert.equal(
        read,
        Array.from({ length: 40 }, (_, index) => `${index * 4 + 2} ${index + 1}`),
      )
      await reader.return(undefined)
    } finally {
      await log.close()
    }
  }),
)

follow(
  'a reader that has read everything takes one group commit however big: a fact over 16 MiB written just before the close is read, then the reader ends',
  boundedTest(60_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    let closed = false
    try {
      await log.append(new EventMaker(invocationOf('a')).next(facts.opened('first')))
      const reader = log.events({ follow: true })
      assert.is((await reader.next()).value?.seq, 1)
      const pending = reader.next().then(
        (result) => `seq ${result.value?.seq}`,
        (error: { code?: string; details?: unknown }) => `${error.code} ${JSON.stringify(error.details)}`,
      )
      await log.append(new EventMaker(invocationOf('b')).next(facts.opened('x'.repeat(17 << 20))))
      await log.close()
      closed = true
      const after = await reader.next().then(
        (result) => (result.done ? 'done' : `seq ${result.value?.seq}`),
        (error: { code?: string }) => `${error.code}`,
      )
      assert.equal([await pending, after], ['seq 2', 'done'])
    } finally {
      if (!closed) await log.close()
    }
  }),
)

follow(
  'a follower left while it waits for the next event (return() or throw() with its next() pending) ends at once, on a log that stays idle, and is handed no later event',
  boundedTest(10_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      await log.append(new EventMaker(invocationOf('idle')).next(facts.opened()))
      const settles = <T>(promise: Promise<T>, what: string): Promise<T> =>
        Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} did not settle on an idle log`)), 2_000))])
      const reader = log.events({ follow: true })
      assert.is((await reader.next()).value?.seq, 1)
      // Nothing more is appended: the next() waits, and the consumer leaves (an SSE client gone, say).
      const waiting = reader.next()
      const left = reader.return(undefined)
      assert.equal(await settles(waiting, 'the waiting next()'), { done: true, value: undefined })
      assert.equal(await settles(left, 'return()'), { done: true, value: undefined })
      await log.append(new EventMaker(invocationOf('later')).next(facts.opened()))
      assert.equal(await reader.next(), { done: true, value: undefined }, 'nothing after it left')
      // throw() the same way: the waiting next() ends, and throw() rejects with what it was given.
      const other = log.events({ follow: true, from: 3 })
      const pending = other.next()
      const thrown = other.throw(new Error('client gone'))
      assert.equal(await settles(pending, 'the waiting next()'), { done: true, value: undefined })
      await settles(thrown.then(() => assert.unreachable('throw() resolved'), (error: Error) => assert.is(error.message, 'client gone')), 'throw()')
      assert.is(logInternals(log).followerCount(), 0, 'no follower is left registered')
    } finally {
      await log.close()
    }
  }),
)

follow(
  'a reader that ended, however it ended, is collected with all it held: 300 followers and 100 plain readers leave nothing behind',
  boundedTest(20_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'), { durability: 'os' })
    try {
      await log.appendAll(invocations(3, 'before'))
      const ended: WeakRef<object>[] = []
      // In a function of its own, so that no frame of the test keeps the last reader.
      const readAndEnd = async (): Promise<void> => {
        for (let n = 0; n < 100; n += 1) {
          // Left with return() while its next() waits for an event on an idle log (an SSE client gone).
          const left = log.events({ follow: true, from: 7 })
          ended.push(new WeakRef(left))
          const waiting = left.next()
          await left.return(undefined)
          await waiting
          // Read up to its `to`.
          const bounded = log.events({ follow: true, to: 6 })
          ended.push(new WeakRef(bounded))
          for await (const stored of bounded) assert.ok(stored.seq <= 6)
          // Left with break at a fact it was waiting for.
          const broken = log.events({ follow: true })
          ended.push(new WeakRef(broken))
          for await (const { event } of broken) if (event.fact.type === 'invocation.ended') break
          // A plain reader left part-way.
          const plain = log.events()
          ended.push(new WeakRef(plain))
          for await (const stored of plain) if (stored.seq === 2) break
        }
      }
      await readAndEnd()
      assert.is(logInternals(log).followerCount(), 0, 'no follower is left registered')
      assert.is(await aliveAfterCollection(ended), 0, 'every reader that ended was collected')
    } finally {
      await log.close()
    }
  }),
)

follow(
  'events({ sessionId }) reads the session through its run and invocation indexes, never the whole log (a follower\'s catch-up too): the same events, in seq order, for any bounds, runs appended side by side included',
  boundedTest(30_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    const proto = ClassicLevel.prototype as unknown as { iterator: (...args: unknown[]) => unknown }
    const original = proto.iterator
    try {
      // Sessions whose runs follow one another, interleaved with each other and with many unrelated facts,
      // and one session with two runs open at once (their facts interleaved).
      const turns: EventMaker[][] = [0, 1, 2].map((session) => [0, 1, 2].map((run) => new EventMaker(invocationOf(`s${session}-r${run}`, `session-${session}`))))
      for (let run = 0; run < 3; run += 1) {
        for (let step = 0; step < 4; step += 1) {
          const batch: RuntimeEvent[] = []
          for (let session = 0; session < 3; session += 1) {
            const maker = (turns[session] as EventMaker[])[run] as EventMaker
            batch.push(step === 0 ? maker.next(facts.opened()) : step === 1 ? maker.next(facts.requested('s1')) : step === 2 ? maker.next(facts.completed('s1', [], 'done')) : maker.next(facts.ended()))
          }
          await log.appendAll([...batch, ...completeInvocation(`noise-${run}-${step}`)])
        }
      }
      const x = new EventMaker(invocationOf('x1', 'session-x'))
      const y = new EventMaker(invocationOf('x2', 'session-x'))
      await log.appendAll([x.next(facts.opened()), y.next(facts.opened()), x.next(facts.requested('s1')), y.next(facts.requested('s1')), y.next(facts.completed('s1', [], 'y')), y.next(facts.ended())])
      await log.appendAll(completeInvocation('noise-last'))
      await log.appendAll([x.next(facts.completed('s1', [], 'x')), x.next(facts.ended())])
      const all: StoredEvent[] = []
      for await (const stored of log.events()) all.push(stored)
      const high = log.head().highWater
      let scans = 0
      proto.iterator = function (this: unknown, ...args: unknown[]) {
        const range = (args[0] ?? {}) as { gte?: string; gt?: string }
        // Over the event records (`e!…`): a read of the log, not of an index.
        if ((range.gte ?? range.gt ?? '').startsWith(keys.eventLow.slice(0, 2))) scans += 1
        return original.apply(this, args)
      }
      for (const sessionId of ['session-0', 'session-2', 'session-x', 'session-none']) {
        for (const [from, to] of [[1, high], [5, 40], [30, 31], [high, high], [2, 1]] as const) {
          const read: StoredEvent[] = []
          for await (const stored of log.events({ sessionId, from, to })) read.push(stored)
          const expected = all.filter(({ seq, event }) => seq >= from && seq <= to && event.invocation.sessionId === sessionId)
          assert.equal(read, expected, `${sessionId} ${from}..${to}`)
        }
      }
      // A follower of one session catches up the same way, then takes what lands.
      const followed: StoredEvent[] = []
      const reading = (async () => {
        for await (const stored of log.events({ sessionId: 'session-2', follow: true, to: high + 8 })) followed.push(stored)
      })()
      const late = new EventMaker(invocationOf('late', 'session-2'))
      await log.appendAll([...completeInvocation('noise-later'), ...late.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [], 'late'), facts.ended()])])
      await reading
      assert.is(scans, 0, 'no iterator over the log was opened')
      const all2: StoredEvent[] = []
      for await (const stored of log.events()) all2.push(stored)
      assert.equal(followed, all2.filter(({ seq, event }) => seq <= high + 8 && event.invocation.sessionId === 'session-2'), 'followed')
      const twoAtOnce: number[] = []
      for await (const { seq } of log.events({ sessionId: 'session-x' })) twoAtOnce.push(seq)
      assert.is(twoAtOnce.length, 8)
      assert.equal(twoAtOnce, [...twoAtOnce].sort((a, b) => a - b), 'two runs side by side come out in seq order')
    } finally {
      proto.iterator = original
      await log.close()
    }
  }),
)

follow(
  'events({ sessionId }) yields one session\'s events with the log\'s seqs: read from the log, then as they become durable, and from a plain reader',
  boundedTest(10_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      const a = new EventMaker(invocationOf('a', 'session-a'))
      const b = new EventMaker(invocationOf('b', 'session-b'))
      // Interleaved, before the reader starts (read from the log) and after (taken as they land).
      await log.appendAll([a.next(facts.opened()), b.next(facts.opened()), a.next(facts.requested('s1')), b.next(facts.requested('s1'))])
      const reader = log.events({ follow: true, sessionId: 'session-a', to: 10 })
      const read: [number, string][] = []
      const reading = (async () => {
        for await (const { seq, event } of reader) read.push([seq, event.invocation.sessionId])
      })()
      await log.append(b.next(facts.completed('s1', [], 'b says')))
      await log.appendAll([a.next(facts.completed('s1', [], 'a says')), b.next(facts.ended())])
      await log.append(new EventMaker(invocationOf('b2', 'session-b')).next(facts.opened()))
      await log.appendAll([a.next(facts.ended()), new EventMaker(invocationOf('c', 'session-c')).next(facts.opened())])
      await reading
      assert.equal(read, [[1, 'session-a'], [3, 'session-a'], [6, 'session-a'], [9, 'session-a']])
      const plain: number[] = []
      for await (const { seq } of log.events({ sessionId: 'session-b' })) plain.push(seq)
      assert.equal(plain, [2, 4, 5, 7, 8])
      for (const sessionId of ['', 'a b', 5, 'x'.repeat(129)]) {
        assert.throws(
          () => log.events({ sessionId: sessionId as string }),
          (error: { code?: string }) => error.code === 'LOG_INVALID_ARGUMENT',
          JSON.stringify(sessionId),
        )
      }
      assert.is(logInternals(log).followerCount(), 0)
    } finally {
      await log.close()
    }
  }),
)

follow(
  'follow must be a boolean: LOG_INVALID_ARGUMENT where it is given',
  boundedTest(10_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      for (const value of ['yes', 1, null]) {
        const error = await refusal(() => log.events({ follow: value as unknown as boolean }))
        assert.is(error.code, 'LOG_INVALID_ARGUMENT')
      }
    } finally {
      await log.close()
    }
  }),
)

follow(
  "a follower shows a run's facts as the engine records them: the same facts the log holds when the run ends",
  boundedTest(30_000, async (root) => {
    const server = await scriptedModelServer([answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 1 } }]), answer.text('done')])
    const log = await EventLog.open(join(root, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
      const live: string[] = []
      const watching = (async () => {
        for await (const { event } of log.events({ follow: true })) {
          live.push(event.fact.type)
          if (event.fact.type === 'invocation.ended') return
        }
      })()
      const echo = countingTool()
      assert.equal(await engine.run(runInput(server.baseUrl, 'watched', { tools: [echo] })), { status: 'completed' })
      await watching
      const stored: string[] = []
      for await (const { event } of log.events()) stored.push(event.fact.type)
      assert.equal(live, stored)
      assert.equal(live, ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'model.requested', 'model.completed', 'invocation.ended'])
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

follow(
  'a follower of a log that failed (LOG_IO) ends with that error once it has read every durable event, not waiting for facts that cannot come',
  boundedTest(30_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    try {
      await log.appendAll(completeInvocation('before'))
      const seen: number[] = []
      let ended: unknown = 'still waiting'
      const reading = (async () => {
        try {
          for await (const { seq } of log.events({ follow: true })) seen.push(seq)
          ended = 'ended without an error'
        } catch (error) {
          ended = error
        }
      })()
      // The directory removed under the open log: the next group commit is refused and the log fails.
      await rm(path, { recursive: true })
      const refused = await refusal(log.appendAll(invocations(1, 'after')))
      assert.is(refused.code, 'LOG_IO')
      const settled = await Promise.race([reading.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 2_000))])
      assert.ok(settled, 'the follower ended once the log failed, before any close')
      assert.equal(seen, Array.from({ length: completeInvocation('before').length }, (_, index) => index + 1), 'every durable event first')
      assert.is((ended as { code?: string }).code, 'LOG_IO', `the follower ended with the log's failure (${String(ended)})`)
    } finally {
      await log.close()
    }
  }),
)

follow(
  "a from past the log's end (a client's seq from another log) is refused at the call, follow or not, with the high-water, unless a to below it makes the range empty; from the high-water + 1 a follower waits for the next fact",
  boundedTest(10_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      // An empty log (a directory reset under a client that still has seq 500).
      for (const options of [{ from: 500, follow: true }, { from: 2, follow: true }, { from: 500 }, { from: 2, to: 9 }, { from: 500, follow: true, sessionId: 'session-a' }]) {
        const error = await refusal(() => log.events(options))
        assert.is(error.code, 'LOG_INVALID_ARGUMENT', JSON.stringify(options))
        assert.equal(error.details, { field: 'from', highWater: 0 }, JSON.stringify(options))
        assert.match(error.message, `from ${options.from} is past the end of the log, whose high-water is 0`)
      }
      assert.is(logInternals(log).followerCount(), 0, 'a refused follower is not registered')
      await log.appendAll(completeInvocation('first'))
      const { highWater } = log.head()
      assert.equal((await refusal(() => log.events({ from: highWater + 2, follow: true }))).details, { field: 'from', highWater })
      assert.equal((await refusal(() => log.events({ from: highWater + 2, to: highWater + 2 }))).details, { field: 'from', highWater }, 'a range of one seq past the end')
      // A to below from reads nothing, past the end as within the log: an empty range is not refused, followed or not.
      for (const options of [{ from: highWater + 2, to: 2 }, { from: highWater + 2, to: 0, follow: true }, { from: 500, to: highWater, sessionId: 'session-a' }, { from: 3, to: 2 }]) {
        const read: StoredEvent[] = []
        for await (const stored of log.events(options)) read.push(stored)
        assert.equal(read, [], JSON.stringify(options))
      }
      assert.is(logInternals(log).followerCount(), 0, 'an empty followed range leaves no follower')
      // The high-water + 1 is the next fact: read plainly, nothing; followed, the fact once it lands.
      const plain: StoredEvent[] = []
      for await (const stored of log.events({ from: highWater + 1 })) plain.push(stored)
      assert.equal(plain, [])
      const reader = log.events({ from: highWater + 1, follow: true })
      const [next] = await Promise.all([reader.next(), log.appendAll(completeInvocation('second'))])
      assert.is(next.value?.seq, highWater + 1)
      await reader.return(undefined)
    } finally {
      await log.close()
    }
  }),
)

follow(
  "on a snapshot, a from past its end that the live log has reached is refused as the snapshot's end, not guessed to be another log's: details.snapshotOf names the log, and its message says to take a later snapshot, which reads the seq",
  boundedTest(10_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    try {
      await log.appendAll(completeInvocation('first'))
      const snapshot = await EventLog.openSnapshot(path, { directory: root })
      try {
        await log.appendAll(completeInvocation('second'))
        const taken = snapshot.head().highWater
        const live = log.head().highWater
        assert.ok(live > taken + 1)
        const error = await refusal(() => snapshot.events({ from: live }))
        assert.is(error.code, 'LOG_INVALID_ARGUMENT')
        assert.equal(error.details, { field: 'from', highWater: taken, snapshotOf: path }, "the snapshot's end, told from the log's by the log's path")
        assert.match(error.message, `past the end of this snapshot of the log at ${path}, whose high-water is ${taken}: a seq the log reached after the snapshot was taken (take a later one)`)
        // The live log reads it.
        const read: number[] = []
        for await (const stored of log.events({ from: live })) read.push(stored.seq)
        assert.equal(read, [live])
        // A snapshot taken now reaches it; past the live log's end it refuses as the log would, naming the log too.
        const later = await EventLog.openSnapshot(path, { directory: root })
        try {
          const seen: number[] = []
          for await (const stored of later.events({ from: live })) seen.push(stored.seq)
          assert.equal(seen, [live], 'a later snapshot reads the seq')
          assert.equal((await refusal(() => later.events({ from: live + 2 }))).details, { field: 'from', highWater: live, snapshotOf: path })
        } finally {
          await later.close()
        }
        assert.equal((await refusal(() => log.events({ from: live + 2 }))).details, { field: 'from', highWater: live }, 'the log itself names no snapshotOf')
      } finally {
        await snapshot.close()
      }
    } finally {
      await log.close()
    }
  }),
)

follow.run()
