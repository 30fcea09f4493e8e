/**
 * The id filter that lets appends skip the id index: it never answers "absent" for an id the log
 * holds (ids stored before an open, ids staged while it is being built), and the log keeps its
 * idempotency and conflict rules with it in use.
 */
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { RuntimeEvent } from '../facts/types.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { IdFilter } from '../store/id-filter.js'
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

filter.run()
