/**
 * The CLI's readers on a damaged log (one whose snapshot lost facts): `log`, `pending` and `script`
 * print what is left, after a warning, and exit 1, as `verify` does for it, so that a script notices; with
 * `--allow-damaged` the user accepts that and they exit 0.
 */
import { cp, open, readFile, readdir, rm, stat } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
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
import { EventMaker, completeInvocation, facts, invocationOf, logLosingItsLastBatch, refusal, startChild, withLog } from './support/log-fixtures.js'
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

/** Runs `reader` with --allow-damaged; returns what it printed, after checking it exited 0 and warned. */
async function readAllowed(reader: (args: string[], io: CommandIo) => Promise<number>, args: string[], name: string): Promise<string[]> {
  const accepted = collector()
  assert.is(await reader([...args, '--allow-damaged'], accepted.io), EXIT.ok, `${name}: ${accepted.err.join('\n')}`)
  assert.match(accepted.err[0] ?? '', /^warning: the log is damaged, and what follows may lack facts it held: /, name)
  const refused = collector()
  assert.is(await reader(args, refused.io), EXIT.failed, `${name} without --allow-damaged`)
  assert.equal(refused.out, accepted.out, `${name}: the same is printed without --allow-damaged`)
  return accepted.out
}

test('pending on a damaged log: an open run with a call in flight is not sent to recover, which refuses the log, but to a backup', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const tool = new EventMaker(invocationOf('tool'))
      const kept = tool.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1')])
      await logLosingItsLastBatch(location, kept, completeInvocation('lost'))
      const listed = collector()
      assert.is(await pendingCommand([location, '--allow-damaged'], listed.io), EXIT.ok, listed.err.join('\n'))
      assert.equal(listed.out, [
        'session-tool: open run run-tool (inv-tool, turn turn-tool); no process has the log open: a crash, or a close that did not wait for it, left it; the log is damaged, which factstate recover refuses: restore the directory from a backup; 1 tool call in flight when it stopped: echo op1 {"value":42}',
      ])
      assert.is((await refusal(EventLog.open(location))).code, 'LOG_CORRUPT', 'recover would be refused as the open is')
    }),
    20_000,
  ))

test('a killed log whose write-ahead log lost facts its head anchor counted: --allow-damaged prints what is left, before and after an open in place marked it; deleting FACTSTATE-DAMAGED and FACTSTATE-HEAD lets it open short', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const live = join(dir, 'live')
      const child = startChild('child-hold-log.ts', [live])
      try {
        await child.waitForLine((line) => line === 'ready')
        for (const [n, name] of ['a', 'b', 'c', 'd', 'e', 'f'].entries()) {
          child.send(`append ${name}`)
          await child.waitForLine((line) => line === `ack ${n + 1}`)
        }
        // No clean close will record the head: the running log refreshes its anchor about a second after a commit.
        const anchored = async () => Number((await readFile(join(live, 'FACTSTATE-HEAD'), 'utf8').catch(() => '')).split(' ')[2] ?? 0)
        for (let waited = 0; (await anchored()) < 6 && waited < 20_000; waited += 50) await sleep(50)
        assert.is(await anchored(), 6, 'the head of the running log was recorded')
      } finally {
        await child.stop('SIGKILL')
      }
      const damaged = join(dir, 'damaged')
      await cp(live, damaged, { recursive: true })
      const wal = (await readdir(damaged)).filter((name) => name.endsWith('.log'))
      assert.is(wal.length, 1, 'one write-ahead log')
      const file = await open(join(damaged, wal[0] as string), 'r+')
      try {
        assert.ok((await file.stat()).size > 1500, 'the write-ahead log holds byte 1500')
        const byte = Buffer.alloc(1)
        await file.read(byte, 0, 1, 1500)
        byte[0] = (byte[0] as number) ^ 0xff
        await file.write(byte, 0, 1, 1500)
      } finally {
        await file.close()
      }

      const read = async (state: string) => {
        const printed = await readAllowed(logCommand, [damaged], `${state}: log`)
        assert.ok(printed.length > 0 && printed.length < 6, `${state}: log prints what is left (${printed.length} facts)`)
        assert.is((await readAllowed(logCommand, [damaged, '--json'], `${state}: log --json`)).length, printed.length)
        // No process holds the log, and recover refuses a damaged one: a backup is what brings its runs back.
        const pending = await readAllowed(pendingCommand, [damaged], `${state}: pending`)
        assert.ok(pending.length > 0, `${state}: pending lists the open runs left`)
        for (const line of pending) {
          assert.match(line, /; no process has the log open: .*; the log is damaged, which factstate recover refuses: restore the directory from a backup$/, `${state}: ${line}`)
        }
        assert.ok((await readAllowed(scriptCommand, [damaged, '--invocation', 'inv-a'], `${state}: script`)).length > 0)
        return printed
      }
      const left = await read('before an open in place')
      // An open in place never goes on without acknowledged facts: it refuses, and marks the log damaged.
      assert.is((await refusal(EventLog.open(damaged))).code, 'LOG_CORRUPT')
      assert.ok(await stat(join(damaged, 'FACTSTATE-DAMAGED')).then(() => true, () => false), 'marked damaged')
      assert.equal(await read('marked damaged'), left)
      // The marker gone, the head anchor still counts the facts lost: the refusal says what else to delete.
      await rm(join(damaged, 'FACTSTATE-DAMAGED'))
      const short = await refusal(EventLog.open(damaged))
      assert.is(short.code, 'LOG_CORRUPT')
      assert.match(short.message, /^LOG_CORRUPT: the log held 6 events when its head was last recorded, now \d+; restore the directory from a backup .*or delete FACTSTATE-HEAD /, short.message)
      assert.equal(await read('marker deleted'), left)
      await rm(join(damaged, 'FACTSTATE-HEAD'))
      const log = await EventLog.open(damaged)
      try {
        assert.is((await log.verify()).events, left.length, 'it opens with what the readers printed')
      } finally {
        await log.close()
      }
    }),
    90_000,
    'killed log, damaged write-ahead log',
  ))

test.run()
