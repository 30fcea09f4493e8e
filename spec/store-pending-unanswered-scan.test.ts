/**
 * `pendingSessions({ unanswered: true })` reads the run index a thousand runs at a time, and the
 * invocation records not in memory in one read a batch. Memory is shared with everything else the
 * log does meanwhile: a record it found in memory before that read may be trimmed away while the
 * read is in flight. Real logs on disk; the interleaving is made certain by running the other
 * reads while LevelDB's own getMany of the scan is under way.
 */
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact } from '../index.js'
import { CACHE_LIMIT, EventLog, logInternals } from '../store/event-log.js'
import { keys } from '../store/keys.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, withDb, withLog } from './support/log-fixtures.js'

type GetMany = (this: unknown, keys: string[], options: unknown) => Promise<unknown>

test(
  'pendingSessions({ unanswered: true }): an invocation record found in memory and trimmed away while the batch read is in flight is no missing record (no LOG_CORRUPT), the list is as without the trim',
  boundedTest(180_000, async (dir) => {
    const count = CACHE_LIMIT + 1_000
    const log = await EventLog.open(join(dir, 'log'))
    const prototype = ClassicLevel.prototype as unknown as { _getMany: GetMany }
    const original = prototype._getMany
    const runOf = (name: string, session: string) => new EventMaker(invocationOf(name, session)).many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })])
    try {
      // Many runs in session-old, then a few in session-new, whose run index entries come first:
      // the scan's first batch holds session-new's runs (in memory, the last appended) and
      // session-old's first ones (trimmed away as the log appended the later ones).
      for (let start = 0; start < count; start += 1_000) {
        await log.appendAll(Array.from({ length: Math.min(1_000, count - start) }, (_, index) => runOf(`old-${start + index}`, 'session-old')).flat())
      }
      await log.appendAll(Array.from({ length: 10 }, (_, index) => runOf(`new-${index}`, 'session-new')).flat())
      const internals = logInternals(log)
      const expected = await log.pendingSessions({ unanswered: true })
      assert.equal(
        expected.map((session) => [session.sessionId, session.unanswered?.runId]),
        [
          ['session-new', 'run-new-9'],
          ['session-old', `run-old-${count - 1}`],
        ],
      )

      // While the scan's first read of invocation records is under way, other reads (every run of
      // session-old's) fill memory past its limit twice over: the records that were in it before,
      // session-new's included, are trimmed away.
      let armed = true
      let trims = 0
      prototype._getMany = async function (this: unknown, keys: string[], options: unknown) {
        if (armed && keys[0]?.startsWith('n!')) {
          armed = false
          let size = internals.cacheSizes().invocations
          for (let index = 0; index < count; index += 1) {
            await internals.invocationRecord(`inv-old-${index}`)
            const now = internals.cacheSizes().invocations
            if (now < size) trims += 1
            size = now
          }
        }
        return original.call(this, keys, options)
      }
      const listed = await log.pendingSessions({ unanswered: true })
      assert.ok(!armed, 'the scan read invocation records')
      assert.is(trims, 2, 'memory was trimmed twice during that read')
      assert.equal(listed, expected)
    } finally {
      prototype._getMany = original
      await log.close()
    }
  }),
)

test(
  "pendingSessions({ unanswered: true }) over 1,001 unanswered child runs (a batch of 1,000 parents and one more): each with its parent, but the two whose first facts are damaged, one in each batch, which lose only their own",
  boundedTest(60_000, async (dir) => {
    const location = join(dir, 'log')
    const count = 1_001
    const name = (index: number) => `s-${String(index).padStart(4, '0')}`
    const parent = { invocation: invocationOf('supervisor', 'desk'), operationId: 'inv-supervisor/s1/0' }
    const seqs = await withLog(location, async (log) => {
      const events = Array.from({ length: count }, (_, index) => {
        const opened = facts.opened() as Extract<Fact, { type: 'invocation.opened' }>
        return new EventMaker(invocationOf(name(index), name(index))).many([
          { ...opened, input: { kind: 'message', content: 'hello', parent } },
          facts.ended({ status: 'failed', class: 'engine_error', message: 'cut short' }),
        ])
      })
      await log.appendAll(events.flat())
      // Facts after them, so that an open's check of the log's tail (its last 1,024) reads none of theirs.
      await log.appendAll(Array.from({ length: 600 }, (_, index) => completeInvocation(`z${index}`, 'zzz')).flat())
      const listed = await log.pendingSessions({ unanswered: true })
      assert.is(listed.length, count)
      assert.ok(
        listed.every((session) => session.unanswered?.parent?.operationId === 'inv-supervisor/s1/0'),
        'every one with its parent',
      )
      return [0, count - 1].map((index) => listed[index]?.unanswered?.openedSeq as number)
    })
    await withDb(location, async (db) => {
      for (const seq of seqs) await db.put(keys.event(seq), new Uint8Array([0xc1]))
    })
    await withLog(location, async (log) => {
      const listed = await log.pendingSessions({ unanswered: true })
      assert.equal(
        listed.map((session) => session.sessionId),
        Array.from({ length: count }, (_, index) => name(index)),
      )
      const without = listed.flatMap((session) => (session.unanswered?.parent === undefined ? [session.sessionId] : []))
      assert.equal(without, [name(0), name(count - 1)], 'only the damaged ones lose their parent')
      assert.equal(listed[1]?.unanswered?.parent, parent)
    })
  }),
)

test.run()
