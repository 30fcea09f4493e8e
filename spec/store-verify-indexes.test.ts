/**
 * `verify()` compares every index record with the facts (store/index-audit.ts): a log holding every
 * kind of record (ended, open, sealed and used, sealed and pending, ended with an unknown outcome)
 * verifies; each kind deleted, changed or added where no fact calls for it is `LOG_CORRUPT` naming
 * its key space and key; damage to the facts is still reported first, by seq; and a verify running
 * beside appends reads one snapshot and finds nothing wrong.
 */
import { cp, mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact, InvocationOutcome, RuntimeEvent } from '../facts/types.js'
import { decodeEvent, decodeRecord, encodeEvent, encodeRecord } from '../store/encoding.js'
import { EventLog } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { keys } from '../store/keys.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal, withDb, withLog } from './support/log-fixtures.js'
import { withTimeout } from './support/temp.js'

const audit = suite('store: verify() audits the index records')

type Db = ClassicLevel<string, Uint8Array>

const call = (operationId: string) => ({ callId: `call-${operationId}`, name: 'echo', arguments: '{"value":42}' })

function pause(handoffId: string, successor: string) {
  return {
    intent: { handoffId, hostEpoch: 'epoch', rootRunId: 'run-a', successorRunId: `run-${successor}`, successorInvocationId: `inv-${successor}`, claimId: `claim-${handoffId}` },
    remainingSteps: 1,
    execution: { model: 'test-model', providerOptions: {}, cwd: '/work', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
  }
}

const held = (handoffId: string): Fact[] => [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1'), facts.holdEntered(handoffId)]

/** The log every case starts from, and the seqs each invocation opened and ended at. */
interface Mixed {
  events: number
  digest: string
  openedAt: Record<string, number>
  endedAt: Record<string, number>
}

/**
 * `done` completed; `source` sealed and its successor `next` admitted and completed; `waiting`
 * sealed with its successor `later` never admitted; `open` left with a model request in flight;
 * `lost` ended with a dispatched tool unsettled (its session owes an acknowledgement).
 */
async function writeMixed(dir: string): Promise<Mixed> {
  return withLog(dir, async (log) => {
    const openedAt: Record<string, number> = {}
    const endedAt: Record<string, number> = {}
    const record = (name: string, seqs: number[]) => {
      openedAt[name] = seqs[0] as number
      return seqs[seqs.length - 1] as number
    }
    endedAt.done = record('done', await log.appendAll(completeInvocation('done')))
    const source = new EventMaker(invocationOf('source'))
    endedAt.source = record('source', await log.appendAll(source.many([...held('h1'), facts.ended({ status: 'handoff_paused', pause: pause('h1', 'next') })])))
    const boundary = (await log.runSource('session-source', 'run-source'))?.boundary
    assert.ok(boundary, 'the sealed run has a boundary')
    const next = new EventMaker({ ...invocationOf('next'), sessionId: 'session-source', turnId: boundary.invocation.turnId })
    endedAt.next = record(
      'next',
      await log.appendAll(
        next.many([
          { ...(facts.opened() as Extract<Fact, { type: 'invocation.opened' }>), input: { kind: 'handoff', source: boundary, pause: pause('h1', 'next') } },
          facts.requested('s1'),
          facts.completed('s1', [], 'done'),
          facts.ended(),
        ]),
      ),
    )
    const waiting = new EventMaker(invocationOf('waiting'))
    endedAt.waiting = record('waiting', await log.appendAll(waiting.many([...held('h2'), facts.ended({ status: 'handoff_paused', pause: pause('h2', 'later') })])))
    record('open', await log.appendAll(new EventMaker(invocationOf('open')).many([facts.opened(), facts.requested('s1')])))
    const unknown: InvocationOutcome = { status: 'failed', class: 'outcome_unknown', message: 'the host stopped while echo ran' }
    const lost = new EventMaker(invocationOf('lost'))
    endedAt.lost = record('lost', await log.appendAll(lost.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op9')]), facts.dispatched('op9'), facts.ended(unknown)])))
    const { events, digest } = await log.verify()
    return { events, digest, openedAt, endedAt }
  })
}

/** The mixed log, written once for the suite in a directory of its own (removed after the suite). */
let base: { dir: string; mixed: Mixed } | undefined

audit.before(async () => {
  const dir = await mkdtemp(join(tmpdir(), 'factstate-'))
  base = { dir, mixed: await withTimeout(writeMixed(join(dir, 'log')), 20_000, 'writing the mixed log') }
})

audit.after(async () => {
  if (base !== undefined) await rm(base.dir, { recursive: true, force: true })
})

/** A copy of the mixed log in `dir`/log. */
async function mixedLog(dir: string): Promise<Mixed> {
  assert.ok(base, 'the mixed log was written')
  await cp(join(base.dir, 'log'), join(dir, 'log'), { recursive: true })
  return base.mixed
}

/** Opens the log in `dir`/log and returns what `verify()` rejects with. */
function verifyRefusal(dir: string) {
  return withLog(join(dir, 'log'), (log) => refusal(log.verify()))
}

/** Rewrites the record at `key` through `change` (its decoded value in, the new value out). */
async function rewrite(db: Db, key: string, change: (record: Record<string, unknown>) => unknown): Promise<void> {
  const stored = await db.get(key)
  assert.ok(stored, `${key} is stored`)
  await db.put(key, encodeRecord(change(decodeRecord<Record<string, unknown>>(stored, key))))
}

audit(
  'a log holding every kind of index record verifies, and again after recovery closes its open invocation',
  boundedTest(20_000, async (dir) => {
    const mixed = await mixedLog(dir)
    await withLog(join(dir, 'log'), async (log) => {
      assert.equal(await log.verify(), { events: mixed.events, digest: mixed.digest })
      assert.is(await recoverInvocations(log), 1)
      assert.is((await log.verify()).events, mixed.events + 2)
    })
  }),
)

/** Each case: what is done to the stored records, and the key space and key `verify()` must name. */
const cases: [string, (db: Db, mixed: Mixed) => Promise<void>, string, string | ((mixed: Mixed) => string), (mixed: Mixed) => number | undefined][] = [
  ['a fact missing from its invocation’s index', (db, mixed) => db.del(keys.byInvocation('inv-done', mixed.endedAt.done as number)), 'byInvocation', 'v!', () => undefined],
  ['an extra entry in an invocation’s index', (db) => db.put(keys.byInvocation('inv-done', 9999), new Uint8Array(0)), 'byInvocation', 'v!', () => undefined],
  [
    'an entry moved to another invocation',
    async (db) => {
      await db.del(keys.byInvocation('inv-done', 1))
      await db.put(keys.byInvocation('inv-lost', 1), new Uint8Array(0))
    },
    'byInvocation',
    'v!',
    () => undefined,
  ],
  ['an open invocation missing from the open index', (db) => db.del(keys.open('inv-open')), 'open', keys.open('inv-open'), () => undefined],
  ['an ended invocation listed as open', (db) => db.put(keys.open('inv-done'), new Uint8Array(0)), 'open', keys.open('inv-done'), () => undefined],
  ['an ended invocation’s record with another outcome', (db) => rewrite(db, keys.invocation('inv-done'), (r) => ({ ...r, terminal: 'failed' })), 'invocation', keys.invocation('inv-done'), (m) => m.endedAt.done],
  ['an ended invocation’s record without its unsettled operation', (db) => rewrite(db, keys.invocation('inv-lost'), (r) => ({ ...r, uncertain: [] })), 'invocation', keys.invocation('inv-lost'), (m) => m.endedAt.lost],
  ['an ended invocation’s record deleted', (db) => db.del(keys.invocation('inv-next')), 'invocation', keys.invocation('inv-next'), (m) => m.endedAt.next],
  // Stored with the batch that opened it, which also held its model request: compared at that request.
  ['an open invocation’s record that disagrees with its facts', (db) => rewrite(db, keys.invocation('inv-open'), (r) => ({ ...r, operations: ['op-ghost'] })), 'invocation', keys.invocation('inv-open'), (m) => (m.openedAt.open as number) + 1],
  ['a record of an invocation that has no facts', (db) => db.put(keys.invocation('inv-ghost'), encodeRecord({ terminal: null })), 'invocation', 'n!', () => undefined],
  ['a run record naming another invocation', (db) => rewrite(db, keys.run('session-done', 'run-done'), (r) => ({ ...r, invocationId: 'inv-lost' })), 'run', keys.run('session-done', 'run-done'), () => 1],
  ['a successor’s run record without its source', (db) => rewrite(db, keys.run('session-source', 'run-next'), (r) => ({ invocationId: r.invocationId })), 'run', keys.run('session-source', 'run-next'), (m) => m.openedAt.next],
  // A member 0.7.0 writes (null: the run records no parent call), compared where present.
  ['a run record naming a parent call its opening fact does not', (db) => rewrite(db, keys.run('session-done', 'run-done'), (r) => ({ ...r, parentOperationId: 'op-ghost' })), 'run', keys.run('session-done', 'run-done'), () => 1],
  ['a run record with no run', (db) => db.put(keys.run('session-ghost', 'run-ghost'), encodeRecord({ invocationId: 'inv-ghost' })), 'run', 'r!', () => undefined],
  ['a used claim naming another successor', (db) => db.put(keys.claim('claim-h1'), encodeRecord('inv-other')), 'claim', keys.claim('claim-h1'), (m) => m.openedAt.next],
  ['a used claim deleted', (db) => db.del(keys.claim('claim-h1')), 'claim', keys.claim('claim-h1'), (m) => m.openedAt.next],
  ['a session record that forgot an unknown outcome', (db) => rewrite(db, keys.session('session-lost'), (r) => ({ ...r, unknown: [] })), 'session', keys.session('session-lost'), () => undefined],
  ['a session record that forgot a pending seal', (db) => rewrite(db, keys.session('session-waiting'), (r) => ({ ...r, paused: [] })), 'session', keys.session('session-waiting'), () => undefined],
  ['a session record deleted', (db) => db.del(keys.session('session-done')), 'session', keys.session('session-done'), () => undefined],
  ['a session record with no invocation', (db) => db.put(keys.session('session-ghost'), encodeRecord({ active: [], paused: [], unknown: [] })), 'session', keys.session('session-ghost'), () => undefined],
  // The recency index (`a!`): one entry a session, at its latest run's opened seq, naming it.
  ['a session’s recency entry deleted', (db, m) => db.del(keys.recent(m.openedAt.lost as number)), 'recent', (m) => keys.recent(m.openedAt.lost as number), (m) => m.openedAt.lost],
  [
    'a recency entry left at a session’s earlier run (its successor opened since)',
    async (db, m) => {
      await db.del(keys.recent(m.openedAt.next as number))
      await db.put(keys.recent(m.openedAt.source as number), encodeRecord('session-source'))
    },
    'recent',
    (m) => keys.recent(m.openedAt.source as number),
    () => undefined,
  ],
  ['a second recency entry of a session', (db, m) => db.put(keys.recent((m.openedAt.lost as number) + 1), encodeRecord('session-lost')), 'recent', (m) => keys.recent((m.openedAt.lost as number) + 1), () => undefined],
  ['a recency entry naming a session with no run', (db) => db.put(keys.recent(9_999), encodeRecord('session-ghost')), 'recent', keys.recent(9_999), () => undefined],
  ['a recency entry that is no session id', (db, m) => db.put(keys.recent(m.openedAt.done as number), encodeRecord(7)), 'recent', (m) => keys.recent(m.openedAt.done as number), () => undefined],
  ['a key in the recency index that names no seq', (db) => db.put('a!x', encodeRecord('session-done')), 'recent', 'a!x', () => undefined],
  ['a session record without its latest run’s seq', (db) => rewrite(db, keys.session('session-done'), ({ latestOpenedSeq: _, ...r }) => r), 'session', keys.session('session-done'), () => undefined],
  ['a session record with another latest run’s seq', (db, m) => rewrite(db, keys.session('session-source'), (r) => ({ ...r, latestOpenedSeq: m.openedAt.source })), 'session', keys.session('session-source'), () => undefined],
  ['a pending seal’s claim reservation deleted', (db) => db.del(keys.sealedClaim('claim-h2')), 'reservation', keys.sealedClaim('claim-h2'), () => undefined],
  ['a pending seal’s successor reserved for another seal', (db) => db.put(keys.sealedSuccessor('inv-later'), encodeRecord('inv-done')), 'reservation', keys.sealedSuccessor('inv-later'), () => undefined],
  ['a reservation no seal made', (db) => db.put(keys.sealedClaim('claim-ghost'), encodeRecord('inv-done')), 'reservation', keys.sealedClaim('claim-ghost'), () => undefined],
  ['an id record no fact has', (db) => db.put(keys.eventId('ghost/1'), encodeRecord([1, new Uint8Array(32)])), 'id', 'i!', () => undefined],
  // The fact itself is intact: its id record is what is named, with the fact's seq.
  ['a fact’s id record deleted', (db) => db.del(keys.eventId('inv-done/3')), 'id', keys.eventId('inv-done/3'), () => 3],
  [
    'a fact’s id record naming another fact',
    async (db) => {
      const stored = await db.get(keys.eventId('inv-done/3'))
      assert.ok(stored)
      const [, chain] = decodeRecord<[number, Uint8Array]>(stored, 'id')
      await db.put(keys.eventId('inv-done/3'), encodeRecord([4, chain]))
    },
    'id',
    keys.eventId('inv-done/3'),
    () => 3,
  ],
  ['an ended invocation’s record that is null', (db) => db.put(keys.invocation('inv-done'), encodeRecord(null)), 'invocation', keys.invocation('inv-done'), (m) => m.endedAt.done],
  ['a run record that is a number', (db) => db.put(keys.run('session-done', 'run-done'), encodeRecord(5)), 'run', keys.run('session-done', 'run-done'), () => 1],
  ['a run record whose bytes do not decode', (db) => db.put(keys.run('session-done', 'run-done'), new Uint8Array([0xde, 0x00])), 'run', keys.run('session-done', 'run-done'), () => 1],
  ['a session record whose bytes do not decode', (db) => db.put(keys.session('session-done'), new Uint8Array([0xde, 0x00])), 'session', keys.session('session-done'), () => undefined],
  // The log opens with both: a format below its own is an older log's (rewritten by the next batch), and the reservations marker's value is not read.
  ['an index format marker no version writes', (db) => db.put(keys.format, encodeRecord(0)), 'marker', keys.format, () => undefined],
  ['a reservations marker that does not hold 1', (db) => db.put(keys.reservationsIndexed, encodeRecord('yes')), 'marker', keys.reservationsIndexed, () => undefined],
  ['a recency marker that does not hold 1', (db) => db.put(keys.recencyIndexed, encodeRecord('yes')), 'marker', keys.recencyIndexed, () => undefined],
  ['a key in the head space that the log never writes', (db) => db.put('h!extra', encodeRecord(1)), 'unknown', 'h!extra', () => undefined],
  ['a key before every key space', (db) => db.put('0!x', new Uint8Array(0)), 'unknown', '0!x', () => undefined],
  // Not read as open invocation "x" (the open index's range is `o!` alone), nor as an event.
  ['a key between two key spaces', (db) => db.put('o#x', new Uint8Array(0)), 'unknown', 'o#x', () => undefined],
  ['a key just past the events', (db) => db.put('e#1', new Uint8Array(0)), 'unknown', 'e#1', () => undefined],
  ['a key after every key space, outside the Basic Multilingual Plane', (db) => db.put('\u{1F600}', new Uint8Array(0)), 'unknown', '\u{1F600}', () => undefined],
]

for (const [name, damage, index, key, seqOf] of cases) {
  audit(
    `${name} is LOG_CORRUPT naming the ${index} index`,
    boundedTest(20_000, async (dir) => {
      const mixed = await mixedLog(dir)
      await withDb(join(dir, 'log'), (db) => damage(db, mixed))
      const error = await verifyRefusal(dir)
      assert.is(error.code, 'LOG_CORRUPT', error.message)
      const seq = seqOf(mixed)
      assert.equal(error.details, { index, key: typeof key === 'string' ? key : key(mixed), ...(seq === undefined ? {} : { seq }) }, error.message)
      // The facts are untouched: the log still opens at the same head.
      await withLog(join(dir, 'log'), async (log) => {
        assert.equal(log.head(), { highWater: mixed.events, digest: mixed.digest })
      })
    }),
  )
}

audit(
  'a fact’s id record that is not an id record is LOG_CORRUPT naming that record and the fact’s seq, and an append of that id is refused with LOG_CORRUPT, not a TypeError',
  boundedTest(20_000, async (dir) => {
    await mixedLog(dir)
    await withDb(join(dir, 'log'), (db) => db.put(keys.eventId('inv-done/3'), encodeRecord(null)))
    const error = await verifyRefusal(dir)
    assert.is(error.code, 'LOG_CORRUPT', error.message)
    assert.equal(error.details, { index: 'id', key: keys.eventId('inv-done/3'), seq: 3 }, error.message)
    await withLog(join(dir, 'log'), async (log) => {
      const again = await refusal(log.append(completeInvocation('done')[2] as RuntimeEvent))
      assert.is(again.code, 'LOG_CORRUPT', again.message)
      assert.match(again.message, /index record id inv-done\/3 is not an id record/)
    })
  }),
)

audit(
  'a key in the event space that is no event’s key is LOG_CORRUPT on open, naming it, not read as a fact',
  boundedTest(20_000, async (dir) => {
    await mixedLog(dir)
    // After every event, and among them (an event key and more, which parseInt used to read as event 3).
    for (const key of ['e!zz', `${keys.event(3)}x`]) {
      await withDb(join(dir, 'log'), (db) => db.put(key, new Uint8Array(0)))
      const error = await refusal(EventLog.open(join(dir, 'log')))
      assert.is(error.code, 'LOG_CORRUPT', error.message)
      assert.equal(error.details, { index: 'unknown', key }, error.message)
      await withDb(join(dir, 'log'), (db) => db.del(key))
    }
  }),
)

audit(
  'an open invocation’s record that is not a record is LOG_CORRUPT already on open, naming it',
  boundedTest(20_000, async (dir) => {
    await mixedLog(dir)
    await withDb(join(dir, 'log'), (db) => db.put(keys.invocation('inv-open'), encodeRecord('x')))
    const error = await refusal(EventLog.open(join(dir, 'log')))
    assert.is(error.code, 'LOG_CORRUPT', error.message)
    assert.match(error.message, /index record invocation inv-open is not an invocation record/)
  }),
)

audit(
  'damage to a fact is reported by its seq even when an index record is damaged too',
  boundedTest(30_000, async (dir) => {
    await mixedLog(dir)
    // Enough facts after it that the damaged one lies before the tail `open` checks.
    await withLog(join(dir, 'log'), async (log) => {
      await Promise.all(Array.from({ length: 140 }, (_, n) => log.appendAll(completeInvocation(`later${n}`))))
    })
    await withDb(join(dir, 'log'), async (db) => {
      await db.del(keys.session('session-done'))
      const other: RuntimeEvent = { ...(completeInvocation('done')[2] as RuntimeEvent), recordedAt: 1 }
      await db.put(keys.event(3), encodeEvent(other))
    })
    const error = await verifyRefusal(dir)
    assert.is(error.code, 'LOG_CORRUPT')
    // The fact by its seq, and the id record whose chain it no longer matches (either may have changed).
    assert.equal(error.details, { seq: 3, key: keys.eventId('inv-done/3') }, error.message)
  }),
)

audit(
  'a fact whose id was changed is reported by its seq, on open and by verify(), not as its id record missing; a lost id record of the last fact, or of the fact before the tail the open checks, is named as the record',
  boundedTest(30_000, async (dir) => {
    const mixed = await mixedLog(dir)
    const renamed = async (seq: number) =>
      withDb(join(dir, 'log'), async (db) => {
        const stored = await db.get(keys.event(seq))
        assert.ok(stored)
        await db.put(keys.event(seq), encodeEvent({ ...decodeEvent(stored, seq), id: `renamed/${seq}` }))
      })
    // In the tail the open checks: the open finds it.
    await renamed(3)
    const onOpen = await refusal(EventLog.open(join(dir, 'log')))
    assert.is(onOpen.code, 'LOG_CORRUPT', onOpen.message)
    assert.equal(onOpen.details, { seq: 3 }, onOpen.message)
    // Before the tail: verify() finds it, and the chain after it tells a changed fact from a lost record.
    const big = join(dir, 'big')
    await mkdir(big)
    await mixedLog(big)
    await withLog(join(big, 'log'), async (log) => {
      await Promise.all(Array.from({ length: 140 }, (_, n) => log.appendAll(completeInvocation(`later${n}`))))
    })
    await withDb(join(big, 'log'), async (db) => {
      const stored = await db.get(keys.event(3))
      assert.ok(stored)
      await db.put(keys.event(3), encodeEvent({ ...decodeEvent(stored, 3), id: 'renamed/3' }))
    })
    const changed = await verifyRefusal(big)
    assert.equal(changed.details, { seq: 3 }, changed.message)
    const last = join(dir, 'last')
    await mkdir(last)
    await mixedLog(last)
    await withDb(join(last, 'log'), async (db) => {
      const stored = await db.get(keys.event(mixed.events))
      assert.ok(stored)
      await db.del(keys.eventId(decodeEvent(stored, mixed.events).id))
    })
    const lost = await verifyRefusal(last)
    assert.is(lost.details?.index, 'id', lost.message)
    assert.is(lost.details?.seq, mixed.events, lost.message)
    // The fact just before the tail the open checks: its id record gives the chain the check starts
    // from, and a lost one is named as the record there too.
    const edge = join(dir, 'edge')
    await mkdir(edge)
    await mixedLog(edge)
    let before = 0
    await withLog(join(edge, 'log'), async (log) => {
      await Promise.all(Array.from({ length: 140 }, (_, n) => log.appendAll(completeInvocation(`later${n}`))))
      before = log.head().highWater - 1_024
    })
    assert.ok(before > 0)
    let key = ''
    await withDb(join(edge, 'log'), async (db) => {
      const stored = await db.get(keys.event(before))
      assert.ok(stored)
      key = keys.eventId(decodeEvent(stored, before).id)
      await db.del(key)
    })
    const beforeTail = await refusal(EventLog.open(join(edge, 'log')))
    assert.is(beforeTail.code, 'LOG_CORRUPT', beforeTail.message)
    assert.equal(beforeTail.details, { index: 'id', key, seq: before }, beforeTail.message)
  }),
)

const legacy = fileURLToPath(new URL('./fixtures/legacy/', import.meta.url))

for (const [name, what, events, recovered, after] of [
  ['shared-claim', 'two pending seals under one claim id (allowed before claims were reserved; the reservation names one of them)', 14, 0, 14],
  ['shared-successor', 'two pending seals naming one successor invocation id (allowed before successors were reserved)', 14, 0, 14],
  ['open-before-pending-calls', 'invocations left open before records held pending calls and final answers, then closed by recovery', 6, 2, 8],
] as const) {
  audit(
    `a log an earlier version wrote verifies: ${what}`,
    boundedTest(20_000, async (dir) => {
      await cp(join(legacy, name), join(dir, name), { recursive: true })
      await withLog(join(dir, name), async (log) => {
        const before = await log.verify()
        assert.is(before.events, events)
        assert.is(await recoverInvocations(log), recovered)
        assert.is((await log.verify()).events, after)
      })
    }),
  )
}

audit(
  'a read ahead that fails while verify waits on another read rejects verify with LOG_IO, never as an unhandled rejection',
  boundedTest(30_000, async (dir) => {
    await mixedLog(dir)
    const log = await EventLog.open(join(dir, 'log'))
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    const proto = ClassicLevel.prototype as unknown as {
      iterator(options: { gte?: string }): { nextv(size: number): Promise<unknown[]> }
      getMany(...args: unknown[]): Promise<unknown>
    }
    const { iterator, getMany } = proto
    try {
      // Enough facts for several batches of the events' pass and a full window of id records.
      await Promise.all(Array.from({ length: 300 }, (_, n) => log.appendAll(completeInvocation(`more${n}`))))
      process.on('unhandledRejection', onUnhandled)
      // Reads ahead fail once 1,024 facts were read: the one issued when the batch holding the 1,024th fact
      // arrives settles while verify, checking that fact, waits on the id records' window (read slowly).
      let read = 0
      proto.iterator = function (this: unknown, options: { gte?: string }) {
        const made = iterator.call(this, options)
        if (options?.gte === keys.eventLow) {
          const nextv = made.nextv.bind(made)
          made.nextv = (size: number) => {
            if (read < 1024) return nextv(size).then((batch) => ((read += batch.length), batch))
            return new Promise((_, reject) => setTimeout(() => reject(Object.assign(new Error('simulated read failure'), { code: 'LEVEL_IO_ERROR' })), 5))
          }
        }
        return made
      }
      proto.getMany = function (this: unknown, ...args: unknown[]) {
        return new Promise((resolve) => setTimeout(resolve, 30)).then(() => getMany.apply(this, args))
      }
      const error = await refusal(log.verify())
      assert.is(error.code, 'LOG_IO', error.message)
      await new Promise((resolve) => setTimeout(resolve, 50))
      assert.equal(unhandled, [], 'no rejection went unhandled')
    } finally {
      proto.iterator = iterator
      proto.getMany = getMany
      process.off('unhandledRejection', onUnhandled)
      await log.close()
    }
  }),
)

audit(
  'a verify called while appends keep coming does not wait for them to stop: it reads the snapshot of its call',
  boundedTest(60_000, async (dir) => {
    await mixedLog(dir)
    await withLog(join(dir, 'log'), async (log) => {
      let appended = 0
      // 64 appenders, each awaiting its appends: the log always has some pending.
      const lanes = Array.from({ length: 64 }, async (_, lane) => {
        for (let n = 0; appended < 4_000; n += 1) {
          await log.appendAll(completeInvocation(`steady${lane}-${n}`))
          appended += 8
        }
      })
      while (appended < 80) await new Promise((resolve) => setTimeout(resolve, 5))
      const calledAt = log.head().highWater
      const seen = await log.verify()
      await Promise.all(lanes)
      const final = log.head().highWater
      assert.ok(seen.events >= calledAt, `it counts what was durable at its call (${seen.events} ≥ ${calledAt})`)
      assert.ok(seen.events < final, `and not what landed after it (${seen.events} < ${final}): it did not wait for the appends to stop`)
      assert.is((await log.verify()).events, final)
    })
  }),
)

audit(
  'a verify running while appends land reads one snapshot: it passes and counts what was durable when it started',
  boundedTest(30_000, async (dir) => {
    const mixed = await mixedLog(dir)
    await withLog(join(dir, 'log'), async (log) => {
      const verifying = log.verify()
      const appends = Array.from({ length: 40 }, (_, n) => log.appendAll(completeInvocation(`busy${n}`)))
      const seen = await verifying
      await Promise.all(appends)
      assert.ok(seen.events >= mixed.events && seen.events <= mixed.events + 40 * 8, `verified ${seen.events}`)
      assert.is((await log.verify()).events, mixed.events + 40 * 8)
    })
  }),
)

/** The provider's opaque state a `model.completed` may carry (0.10.0), each of the two kinds, and the facts that end its invocation. */
const providerState: [string, Fact, Fact[]][] = [
  [
    'output.reasoningDetails',
    { type: 'model.completed', stepId: 's1', output: { text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: [{ type: 'reasoning.encrypted', data: 'gAAAAABo' }] } },
    [facts.ended()],
  ],
  [
    "a tool call's extraContent",
    { type: 'model.completed', stepId: 's1', output: { toolCalls: [{ ...call('op1'), extraContent: { google: { thought_signature: 'CiQBVKhc7nX0' } } }], finishReason: 'tool_calls' } },
    [facts.dispatched('op1'), facts.settled('op1'), facts.requested('s2'), facts.completed('s2', [], 'done'), facts.ended()],
  ],
]

for (const [kind, stateful, rest] of providerState) {
  audit(
    `a log holding a model.completed with ${kind} but marked below format 6, or not marked, is LOG_CORRUPT naming the format marker and the first such fact; marked 6 it verifies, and a format-5 log without one does`,
    boundedTest(20_000, async (dir) => {
      const path = join(dir, 'log')
      const formatOf = () => withDb(path, async (db) => decodeRecord<number>((await db.get(keys.format)) as Uint8Array, 'format'))
      await withLog(path, (log) => log.appendAll(completeInvocation('plain')))
      assert.is(await formatOf(), 5, 'a log without provider state is marked 5')
      await withLog(path, async (log) => assert.is((await log.verify()).events, 8, 'and verifies'))
      // The first fact with state at seq 11, another one later: the finding names the first.
      await withLog(path, async (log) => {
        for (const name of ['first', 'second']) {
          const make = new EventMaker(invocationOf(name))
          await log.appendAll(make.many([facts.opened(), facts.requested('s1'), stateful, ...rest]))
        }
      })
      assert.is(await formatOf(), 6, 'the batch of the first such fact marked it 6')
      const verified = await withLog(path, (log) => log.verify())
      const events = 8 + 2 * (3 + rest.length)
      assert.is(verified.events, events, 'a log marked 6 verifies')
      for (const [how, damage] of [
        ['marked 5', (db: Db) => db.put(keys.format, encodeRecord(5))],
        ['marked 1', (db: Db) => db.put(keys.format, encodeRecord(1))],
        ['not marked', (db: Db) => db.del(keys.format)],
      ] as const) {
        await withDb(path, damage)
        const error = await withLog(path, async (log) => {
          // Opening it is no finding (an older log's marker is rewritten by its next batch): verify is.
          assert.equal(log.head(), { highWater: events, digest: verified.digest }, how)
          return refusal(log.verify())
        })
        assert.is(error.code, 'LOG_CORRUPT', `${how}: ${error.message}`)
        assert.equal(error.details, { index: 'marker', key: keys.format, seq: 11 }, `${how}: ${error.message}`)
        assert.match(error.message, /event 11 carries the provider's opaque state, which needs index format 6/)
        // A backup's check of its copy and a snapshot's verify() are the same check.
        const backup = await refusal(EventLog.backup(path, join(dir, 'backup')))
        assert.equal([backup.code, backup.details], ['LOG_CORRUPT', { index: 'marker', key: keys.format, seq: 11 }], `backup, ${how}: ${backup.message}`)
        const snapshot = await EventLog.openSnapshot(path, { directory: dir })
        try {
          const refused = await refusal(snapshot.verify())
          assert.equal([refused.code, refused.details], ['LOG_CORRUPT', { index: 'marker', key: keys.format, seq: 11 }], `snapshot, ${how}: ${refused.message}`)
        } finally {
          await snapshot.close()
        }
      }
      await withDb(path, (db) => db.put(keys.format, encodeRecord(6)))
      await withLog(path, async (log) => assert.equal(await log.verify(), verified, 'marked 6 again, it verifies'))
    }),
  )
}

audit.run()
