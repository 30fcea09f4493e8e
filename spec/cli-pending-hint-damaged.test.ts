/**
 * `factstate pending`'s hint (how many turns ended unanswered, after "nothing pending" or below other lines) is a hint:
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

test(
  'after a shutdown that left a run open: the open run on stdout and, below it on stderr, how many turns ended unanswered (not with --json, --session or --unanswered)',
  boundedTest(20_000, async (root) => {
    const dir = join(root, 'log')
    await withLog(dir, async (log) => {
      for (const name of ['a', 'b']) {
        await log.appendAll(new EventMaker(invocationOf(name)).many([facts.opened(), facts.ended({ status: 'cancelled', source: 'shutdown' })]))
      }
      await log.appendAll(new EventMaker(invocationOf('c')).many([facts.opened()]))
    })
    const plain = collector()
    assert.is(await pendingCommand([dir], plain.io), EXIT.ok, plain.err.join('\n'))
    assert.is(plain.out.length, 1, plain.out.join('\n'))
    assert.match(plain.out[0] ?? '', /: open run /)
    // A shutdown that left one run open also cut two turns short: said as when nothing else is pending.
    assert.equal(plain.err, ['hint: 2 turns ended unanswered (cancelled or failed): factstate pending --unanswered lists them'])
    for (const extra of [['--json'], ['--unanswered'], ['--session', invocationOf('c').sessionId]]) {
      const other = collector()
      assert.is(await pendingCommand([dir, ...extra], other.io), EXIT.ok, extra.join(' '))
      assert.equal(other.err, [], `${extra.join(' ')}: no hint`)
    }
  }),
)

test.run()
