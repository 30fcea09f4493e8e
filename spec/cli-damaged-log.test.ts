/**
 * The CLI's readers on a damaged log (one whose snapshot lost facts): `log`, `pending` and `script`
 * print what is left, after a warning, and exit 1, as `verify` does for it, so that a script notices; with
 * `--allow-damaged` the user accepts that and they exit 0.
 */
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { logCommand } from '../bin/commands/log.js'
import { pendingCommand } from '../bin/commands/pending.js'
import { scriptCommand } from '../bin/commands/script.js'
import { verifyCommand } from '../bin/commands/verify.js'
import { type CommandIo, EXIT } from '../bin/io.js'
import { EventLog } from '../index.js'
import { collector } from './support/cli-io.js'
import { EventMaker, completeInvocation, facts, invocationOf, logLosingItsLastBatch, refusal, withLog } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** The facts of a run left open in session-open: what the damaged log keeps. */
const openRun = () => new EventMaker(invocationOf('open')).many([facts.opened(), facts.requested('s1')])

/** Each reader, and how many lines it prints for `openRun` alone (its two facts, its run, its session, the script of its request: one unanswered). */
const readers: { name: string; run: (args: string[], io: CommandIo) => Promise<number>; args: string[]; lines: number }[] = [
  { name: 'log', run: logCommand, args: [], lines: 2 },
  { name: 'log --json', run: logCommand, args: ['--json'], lines: 2 },
  { name: 'log --runs', run: logCommand, args: ['--session', 'session-open', '--runs'], lines: 1 },
  { name: 'pending', run: pendingCommand, args: [], lines: 1 },
  { name: 'pending --json', run: pendingCommand, args: ['--json'], lines: 1 },
  { name: 'script', run: scriptCommand, args: ['--invocation', 'inv-open'], lines: 5 },
]

/** Runs every reader on the damaged log at `location`, without and with --allow-damaged. */
async function readDamaged(location: string, state: string): Promise<void> {
  for (const reader of readers) {
    const name = `${state}: ${reader.name}`
    const refused = collector()
    assert.is(await reader.run([location, ...reader.args], refused.io), EXIT.failed, `${name}: ${refused.err.join('\n')}`)
    // What is left is printed all the same, and nothing of what was lost.
    assert.is(refused.out.length, reader.lines, name)
    assert.not.match(refused.out.join('\n'), /lost/, name)
    assert.match(refused.err[0] ?? '', /^warning: the log is damaged, and what follows may lack facts it held: /, name)
    const error = refused.err.findIndex((line) => line.startsWith('error: '))
    assert.is(
      refused.err[error],
      'error: LOG_CORRUPT: the log is damaged, and what was printed may lack facts it held (the warning above says what was lost; --allow-damaged accepts that, with exit 0)',
      name,
    )
    assert.match(refused.err[error + 1] ?? '', /^remedy: the log, as read through a snapshot of it, is damaged /, name)

    const accepted = collector()
    assert.is(await reader.run([location, ...reader.args, '--allow-damaged'], accepted.io), EXIT.ok, `${name} --allow-damaged: ${accepted.err.join('\n')}`)
    assert.equal(accepted.out, refused.out, `${name} --allow-damaged prints the same`)
    assert.match(accepted.err[0] ?? '', /^warning: the log is damaged/, `${name} --allow-damaged still warns`)
    assert.not.ok(accepted.err.some((line) => line.startsWith('error: ')), `${name} --allow-damaged: no error line`)
  }
}

test('log, pending and script print what is left of a damaged log, then exit 1 with LOG_CORRUPT and its remedy; --allow-damaged accepts it (exit 0)', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      // A crash lost the log's last batch (a whole invocation) before its head anchor counted it.
      await logLosingItsLastBatch(location, openRun(), completeInvocation('lost'), { crashed: true })
      // Read before any open in place: LevelDB finds the damage in the snapshot's copy.
      await readDamaged(location, 'before an open in place')
      // The application's open refuses the log and marks it damaged: snapshots say so from the marker.
      assert.is((await refusal(EventLog.open(location))).code, 'LOG_CORRUPT')
      assert.ok(await stat(join(location, 'FACTSTATE-DAMAGED')).then(() => true, () => false), 'marked damaged')
      await readDamaged(location, 'marked damaged')
      // verify is the check itself: it takes no such flag, and still refuses the log.
      const flagged = collector()
      assert.is(await verifyCommand([location, '--allow-damaged'], flagged.io), EXIT.usage)
      assert.is(flagged.err[0], 'error: unknown option --allow-damaged')
      assert.is(await verifyCommand([location], collector().io), EXIT.failed)
      // script prints JSON whatever it is given: a --json would promise nothing on stdout when it fails, which a damaged log breaks.
      const json = collector()
      assert.is(await scriptCommand([location, '--invocation', 'inv-open', '--json'], json.io), EXIT.usage)
      assert.is(json.err[0], 'error: script always prints JSON: it takes no --json')
      assert.equal(json.out, [])
      // A follow ends at Ctrl-C with 0 whatever the log: the flag would do nothing there, and is refused.
      const following = collector()
      assert.is(await logCommand([location, '--follow', '--allow-damaged'], following.io), EXIT.usage)
      assert.is(following.err[0], 'error: --follow ends at Ctrl-C with exit 0, a damaged log or not (after its warning): it takes no --allow-damaged')
    }),
    30_000,
  ))

test('an undamaged log: log, pending and script exit 0, with or without --allow-damaged, and print no warning', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      await withLog(location, (log) => log.appendAll(openRun()))
      for (const reader of readers) {
        for (const extra of [[], ['--allow-damaged']]) {
          const { io, out, err } = collector()
          const name = [reader.name, ...extra].join(' ')
          assert.is(await reader.run([location, ...reader.args, ...extra], io), EXIT.ok, `${name}: ${err.join('\n')}`)
          assert.is(out.length, reader.lines, name)
          assert.not.ok(err.some((line) => /^(warning|error): /.test(line)), name)
        }
      }
    }),
    30_000,
  ))

test.run()
