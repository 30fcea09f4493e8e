/**
 * `factstate pending`'s hint after "nothing pending" (how many turns ended unanswered) is a hint:
 * on a log whose run index cannot be read to count them it is given without the count, and it never
 * turns a listing that succeeded into an error or another exit code.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { pendingCommand } from '../bin/commands/pending.js'
import { EXIT } from '../bin/io.js'
import { keys } from '../store/keys.js'
import { collector } from './support/cli-io.js'
import { EventMaker, boundedTest, facts, invocationOf, withDb, withLog } from './support/log-fixtures.js'

test(
  'a run whose invocation record is gone: "nothing pending", exit 0, and the hint without a count (it listed nothing it could not read)',
  boundedTest(20_000, async (root) => {
    const dir = join(root, 'log')
    await withLog(dir, async (log) => {
      for (const name of ['a', 'b']) {
        await log.appendAll(new EventMaker(invocationOf(name)).many([facts.opened(), facts.ended({ status: 'cancelled', source: 'shutdown' })]))
      }
    })
    const before = collector()
    assert.is(await pendingCommand([dir], before.io), EXIT.ok, before.err.join('\n'))
    assert.equal([before.out, before.err], [['nothing pending'], ['hint: 2 turns ended unanswered (cancelled or failed): factstate pending --unanswered lists them']])
    // The record a run index entry points to, lost: what the listing above never reads.
    await withDb(dir, (db) => db.del(keys.invocation('inv-b')))
    for (const extra of [[], ['--allow-damaged']]) {
      const damaged = collector()
      assert.is(await pendingCommand([dir, ...extra], damaged.io), EXIT.ok, `${extra.join(' ')}: ${damaged.err.join('\n')}`)
      assert.equal(damaged.out, ['nothing pending'], 'stdout as before')
      assert.equal(damaged.err, ['hint: turns that ended cancelled or failed (a shutdown, a crash) are not pending; factstate pending --unanswered lists them'])
    }
  }),
)

test.run()
