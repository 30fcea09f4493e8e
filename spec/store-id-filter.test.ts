/**
 * The id filter that lets appends skip the id index: it never answers "absent" for an id the log
 * holds (ids stored before an open, ids staged while it is being built), and the log keeps its
 * idempotency and conflict rules with it in use.
 */
import { cp, copyFile, readFile, writeFile } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { RuntimeEvent } from '../facts/types.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { IdFilter, parseIdFilter, serializeIdFilter } from '../store/id-filter.js'
import { boundedTest, completeInvocation, refusal } from './support/log-fixtures.js'

const filter = suite('store: id filter')

filter('no false "absent" for 200,000 added ids; about 1% false "maybe" at capacity', () => {
  const ids = new IdFilter(200_000)
  const added = Array.from({ length: 200_000 }, (_, i) => `inv-${i % 977}/${i}:${(i * 2654435761) >>> 0}`)
  for (const id of added) ids.add(id)
  assert.ok(ids.count === 200_000 && !ids.full)
  assert.ok(added.every((id) => ids.mayContain(id)), 'every added id may be contained')
  let maybe = 0
  for (let i = 0; i < 100_000; i += 1) if (ids.mayContain(`other-${i}`)) maybe += 1
  assert.ok(maybe < 3_000, `false "maybe" answers: ${maybe} of 100,000`)
  ids.add('one-more')
  assert.ok(ids.full, 'past its capacity the filter says so')
})

filter('an empty filter answers "absent" for everything, including the empty string and astral ids', () => {
  const ids = new IdFilter(10)
  for (const id of ['', 'a', '😀', 'x'.repeat(512)]) assert.is(ids.mayContain(id), false, id)
  assert.is(ids.add('😀'), true, 'certainly new the first time')
  assert.is(ids.mayContain('😀'), true)
  assert.is(ids.add('😀'), false, 'not the second time')
})

filter(
  'after a reopen, with the filter built from the index, stored ids re-append idempotently or conflict, and nothing is written',
  boundedTest(30_000, async (dir) => {
    const invocations = Array.from({ length: 300 }, (_, i) => completeInvocation(`old-${i}`, `session-${i % 7}`))
    const stored = invocations.flat()
    const log = await EventLog.open(dir)
    try {
      await Promise.all(
        Array.from({ length: 16 }, async (_, lane) => {
          for (let i = lane; i < invocations.length; i += 16) await log.appendAll(invocations[i] as RuntimeEvent[])
        }),
      )
    } finally {
      await log.close()
    }
    const reopened = await EventLog.open(dir)
    try {
      const before = await reopened.verify()
      // The build starts after 1,024 appends since open, in the middle of these: those staged while
      // it reads the index must reach the filter too.
      const fresh = Array.from({ length: 200 }, (_, i) => completeInvocation(`new-${i}`, `session-${i % 5}`))
      const during = fresh.flat()
      await Promise.all(
        Array.from({ length: 16 }, async (_, lane) => {
          for (let i = lane; i < fresh.length; i += 16) await reopened.appendAll(fresh[i] as RuntimeEvent[])
        }),
      )
      assert.is(await logInternals(reopened).idFilterReady(), true, 'the filter is in use')
      const prefix = await reopened.prefix(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      const seqOf = new Map(prefix.events.map(({ seq, event }) => [event.id, seq]))
      assert.is(before.events, stored.length)
      for (const event of [...stored, ...during]) {
        assert.is(await reopened.append(structuredClone(event)), seqOf.get(event.id), event.id)
      }
      for (const event of [stored[0], stored[1000], during[0], during.at(-1)] as RuntimeEvent[]) {
        assert.is((await refusal(reopened.append({ ...event, recordedAt: event.recordedAt + 1 }))).code, 'LOG_CONFLICT', event.id)
      }
      const after = await reopened.verify()
      assert.is(after.events, before.events + during.length, 'only the new facts were written')
    } finally {
      await reopened.close()
    }
  }),
)

filter(
  'closing right after the id filter build started neither hangs nor loses anything, and the log reopens whole',
  boundedTest(30_000, async (dir) => {
    const invocations = Array.from({ length: 160 }, (_, i) => completeInvocation(`c-${i}`, `session-${i % 3}`))
    const log = await EventLog.open(dir)
    let appended = 0
    try {
      // More than 1,024 events: the build starts during the last appends and is still reading when close is called.
      await Promise.all(
        invocations.map(async (events) => {
          const seqs = await log.appendAll(events)
          appended += seqs.length
        }),
      )
    } finally {
      await log.close()
    }
    const total = invocations.flat().length
    assert.ok(total > 1_024)
    assert.is(appended, total)
    const reopened = await EventLog.open(dir)
    try {
      assert.is((await reopened.verify()).events, total)
      assert.is(await reopened.append(structuredClone(invocations[0]?.[0] as RuntimeEvent)), 1, 'still idempotent after the reopen')
    } finally {
      await reopened.close()
    }
  }),
)

filter(
  'a filter that fills up is built again, bigger, from the index: ids of every group, whole batches included, stay idempotent',
  boundedTest(60_000, async (dir) => {
    const log = await EventLog.open(dir)
    try {
      const internals = logInternals(log)
      internals.setIdFilterMinimum(64)
      // Atomic batches of 8 from 16 lanes: a rebuild must also get the ids of a batch staged while it starts.
      const invocations = Array.from({ length: 700 }, (_, i) => completeInvocation(`g-${i}`, `session-${i % 9}`))
      await Promise.all(
        Array.from({ length: 16 }, async (_, lane) => {
          for (let i = lane; i < invocations.length; i += 16) await log.appendAll(invocations[i] as RuntimeEvent[])
        }),
      )
      assert.is(await internals.idFilterReady(), true)
      assert.ok(internals.idFilterBuilds() >= 2, `the filter was built ${internals.idFilterBuilds()} times`)
      const prefix = await log.prefix(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      const seqOf = new Map(prefix.events.map(({ seq, event }) => [event.id, seq]))
      const all = invocations.flat()
      assert.is(prefix.events.length, all.length)
      await Promise.all(
        Array.from({ length: 16 }, async (_, lane) => {
          for (let i = lane; i < all.length; i += 16) {
            const event = all[i] as RuntimeEvent
            assert.is(await log.append(structuredClone(event)), seqOf.get(event.id), event.id)
          }
        }),
      )
      assert.equal(await log.appendAll(invocations[3] as RuntimeEvent[]), (invocations[3] as RuntimeEvent[]).map((event) => seqOf.get(event.id)))
      assert.is((await log.verify()).events, all.length, 'nothing was written twice')
    } finally {
      await log.close()
    }
  }),
)

/** The file a clean close stores the id filter in, beside LevelDB's. */
const STORED = 'FACTSTATE-IDS'

/** Appends `invocations` from 16 lanes to the log in `dir`, lets the id filter finish building, and closes (storing it). */
async function appendAndClose(dir: string, invocations: RuntimeEvent[][], durability: 'sync' | 'os' = 'sync'): Promise<void> {
  const log = await EventLog.open(dir, { durability })
  try {
    logInternals(log).setIdFilterStoredFrom(0)
    await Promise.all(
      Array.from({ length: 16 }, async (_, lane) => {
        for (let i = lane; i < invocations.length; i += 16) await log.appendAll(invocations[i] as RuntimeEvent[])
      }),
    )
    assert.is(await logInternals(log).idFilterReady(), true, 'the filter was built before the close')
  } finally {
    await log.close()
  }
}

/** Every stored event repeated returns its seq, a changed one is LOG_CONFLICT, and nothing is written. */
async function assertRepeats(log: EventLog, events: RuntimeEvent[]): Promise<void> {
  const prefix = await log.prefix(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
  const seqOf = new Map(prefix.events.map(({ seq, event }) => [event.id, seq]))
  assert.is(prefix.events.length, events.length)
  await Promise.all(
    Array.from({ length: 16 }, async (_, lane) => {
      for (let i = lane; i < events.length; i += 16) {
        const event = events[i] as RuntimeEvent
        assert.is(await log.append(structuredClone(event)), seqOf.get(event.id), event.id)
      }
    }),
  )
  for (const event of [events[0], events[Math.floor(events.length / 2)], events.at(-1)] as RuntimeEvent[]) {
    assert.is((await refusal(log.append({ ...event, recordedAt: event.recordedAt + 1 }))).code, 'LOG_CONFLICT', event.id)
  }
  assert.is((await log.verify()).events, events.length, 'nothing was written twice')
}

const invocationsNamed = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => completeInvocation(`${prefix}-${i}`, `session-${i % 5}`))

filter('a stored filter reads back with the same answers; a cut, changed or foreign file reads as none', () => {
  const ids = new IdFilter(5_000)
  const added = Array.from({ length: 5_000 }, (_, i) => `id-${i}`)
  for (const id of added) ids.add(id)
  const chain = new Uint8Array(32).fill(7)
  const bytes = Buffer.concat(serializeIdFilter(ids, 4_321, chain))
  const stored = parseIdFilter(bytes)
  assert.ok(stored, 'it reads back')
  assert.is(stored.highWater, 4_321)
  assert.equal([...stored.chain], [...chain])
  assert.is(stored.filter.count, 5_000)
  assert.is(stored.filter.capacity, 5_000)
  assert.ok(added.every((id) => stored.filter.mayContain(id)), 'no stored id reads as absent')
  let agree = 0
  for (let i = 0; i < 20_000; i += 1) if (stored.filter.mayContain(`other-${i}`) === ids.mayContain(`other-${i}`)) agree += 1
  assert.is(agree, 20_000, 'the same answers for ids never added')
  const changed = Uint8Array.from(bytes)
  changed[100] = (changed[100] as number) ^ 1
  const foreign = Uint8Array.from(bytes)
  foreign[0] = 0x46
  for (const [what, damaged] of [
    ['cut', bytes.subarray(0, bytes.length - 1)],
    ['changed', changed],
    ['foreign', foreign],
    ['empty', new Uint8Array(0)],
  ] as const) {
    assert.is(parseIdFilter(damaged), undefined, what)
  }
  assert.is(IdFilter.restore(5_000, 1, new Uint32Array(2)), undefined, 'bits of another size')
  const unaligned = new Uint8Array(bytes.length + 1)
  unaligned.set(bytes, 1)
  assert.ok(parseIdFilter(unaligned.subarray(1))?.filter.mayContain('id-42'), 'read from memory not aligned for its bits')
})

filter(
  'a filter stored by a clean close is in use from the next open, without reading the id index: stored ids still repeat idempotently or conflict',
  boundedTest(60_000, async (root) => {
    const dir = join(root, 'log')
    const invocations = invocationsNamed('kept', 200)
    await appendAndClose(dir, invocations)
    assert.ok(existsSync(join(dir, STORED)), 'the close stored the filter')
    const log = await EventLog.open(dir)
    try {
      const internals = logInternals(log)
      assert.is(await internals.idFilterReady(), true, 'in use from the open')
      await assertRepeats(log, invocations.flat())
      assert.is(internals.idFilterBuilds(), 0, 'never built from the index')
    } finally {
      await log.close()
    }
  }),
)

filter(
  'a stored filter behind the log (its writer crashed after the close that stored it) gets the ids of the events since: none of them is written again',
  boundedTest(60_000, async (root) => {
    const dir = join(root, 'log')
    const first = invocationsNamed('first', 160)
    const later = invocationsNamed('later', 200)
    await appendAndClose(dir, first)
    await copyFile(join(dir, STORED), join(root, 'ids-first'))
    await appendAndClose(dir, later)
    // What a writer that appended `later` and was killed before closing leaves.
    await copyFile(join(root, 'ids-first'), join(dir, STORED))
    const log = await EventLog.open(dir)
    try {
      assert.is(await logInternals(log).idFilterReady(), true, 'caught up at the open')
      await assertRepeats(log, [...first.flat(), ...later.flat()])
      assert.is(logInternals(log).idFilterBuilds(), 0)
    } finally {
      await log.close()
    }
  }),
)

filter(
  "a stored filter is ignored when it is not this log's prefix (another log's, damaged, ahead of the log) or lags too far: the log reads its index, and no id is written twice",
  boundedTest(120_000, async (root) => {
    const dir = join(root, 'log')
    const other = join(root, 'other-log')
    const backup = join(root, 'backup-log')
    const mine = invocationsNamed('mine', 160)
    await appendAndClose(dir, mine)
    await cp(dir, backup, { recursive: true })
    await appendAndClose(other, invocationsNamed('theirs', 160))
    const cases: [string, string, RuntimeEvent[], () => Promise<void>][] = [
      ["another log's, of as many events", dir, mine.flat(), () => copyFile(join(other, STORED), join(dir, STORED))],
      [
        'damaged',
        dir,
        mine.flat(),
        async () => {
          // The backup's copy is this log's own filter, stored by the close that made the backup.
          const bytes = await readFile(join(backup, STORED))
          const middle = bytes.length >> 1
          bytes[middle] = (bytes[middle] as number) ^ 0x10
          await writeFile(join(dir, STORED), bytes)
        },
      ],
    ]
    for (const [what, path, events, spoil] of cases) {
      await spoil()
      const log = await EventLog.open(path)
      try {
        assert.is(await logInternals(log).idFilterReady(), false, `${what}: not in use at the open`)
        await assertRepeats(log, events)
      } finally {
        await log.close()
      }
    }
    // Ahead: the backup holds fewer events than the filter of the log it was copied from counts.
    const more = invocationsNamed('more', 40)
    await copyFile(join(backup, STORED), join(dir, STORED))
    const log = await EventLog.open(dir)
    try {
      logInternals(log).setIdFilterStoredFrom(0)
      for (const events of more) await log.appendAll(events)
      assert.is(await logInternals(log).idFilterReady(), true)
    } finally {
      await log.close()
    }
    await copyFile(join(dir, STORED), join(backup, STORED))
    const restored = await EventLog.open(backup)
    try {
      assert.is(await logInternals(restored).idFilterReady(), false, 'ahead of the log: not in use')
      await assertRepeats(restored, mine.flat())
    } finally {
      await restored.close()
    }
    // Too far behind: more than 16,384 events since the stored filter's high-water.
    await copyFile(join(dir, STORED), join(backup, STORED))
    const far = invocationsNamed('far', 2_100)
    await appendAndClose(dir, far, 'os')
    await copyFile(join(backup, STORED), join(dir, STORED))
    const behind = await EventLog.open(dir)
    try {
      assert.is(await logInternals(behind).idFilterReady(), false, 'too far behind: not in use')
      await assertRepeats(behind, [...mine.flat(), ...more.flat(), ...far.flat()])
    } finally {
      await behind.close()
    }
  }),
)

filter.run()
