/**
 * `factstate backup`'s refusals name what to fix: the destination (not "the log directory and
 * filters", the reading commands' remedy), and a damaged log's remedy says no backup was kept.
 */
import { mkdir, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { backupCommand } from '../bin/commands/backup.js'
import { verifyCommand } from '../bin/commands/verify.js'
import { EXIT } from '../bin/io.js'
import { collector } from './support/cli-io.js'
import { completeInvocation, logLosingItsLastBatch } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

test('backup: a destination that exists, has no parent or is inside the log is a usage error (exit 2) with a remedy about the destination', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      await log.close()
      await mkdir(join(dir, 'taken'))
      for (const destination of [join(dir, 'taken'), join(dir, 'no', 'parent'), join(location, 'inner')]) {
        const { io, out, err } = collector()
        assert.is(await backupCommand([location, destination], io), EXIT.usage, destination)
        assert.equal(out, [])
        assert.match(err[0] ?? '', /^error: LOG_INVALID_ARGUMENT: the backup's destination /)
        assert.is(err[1], 'remedy: check the command line: the log directory, then a backup directory that does not exist yet, in one that does, outside the log\u2019s own directory')
        assert.not.match(err.join('\n'), /filters/)
      }
    }),
    20_000,
  ))

test('backup: a damaged log is exit 1, keeps nothing, and its remedy says no backup was kept; verify --json prints it as JSON (status corrupt) besides the remedy', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      // A byte of a fact changed in LevelDB's write-ahead log: the batch is dropped, and the open
      // finds fewer facts than the head anchor counts.
      await logLosingItsLastBatch(location, [], completeInvocation('damaged'))
      const { io, out, err } = collector()
      assert.is(await backupCommand([location, join(dir, 'backup')], io), EXIT.failed, err.join('\n'))
      assert.equal(out, [])
      assert.match(err[0] ?? '', /^error: LOG_CORRUPT: /)
      assert.match(err[1] ?? '', /^remedy: the log is damaged and no backup was kept/)
      assert.not.ok((await readdir(dir)).includes('backup'))

      // verify, which reads a snapshot too, does not send its user to run verify again when no other process has the log.
      const verify = collector()
      assert.is(await verifyCommand([location, '--json'], verify.io), EXIT.failed)
      assert.equal(verify.out.map((line) => (JSON.parse(line) as { status: string; code: string }).status), ['corrupt'], 'the refusal as JSON too, for scripts')
      // After the warning a damaged snapshot gets (it reads what is left) and the error.
      assert.match(verify.err[0] ?? '', /^warning: the log is damaged, /)
      assert.match(verify.err.at(-1) ?? '', /^remedy: the log, as read through a snapshot of it, is damaged \(its own files were not touched\): restore the directory from a backup; if another process has it open/)
    }),
    20_000,
  ))

test('backup: a destination refused is printed as every usage error is, with the synopsis and where the options are; an empty one is a usage error too', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      await log.close()
      const { io, out, err } = collector()
      assert.is(await backupCommand([location, location], io), EXIT.usage)
      assert.equal(out, [])
      assert.match(err[0] ?? '', /^error: LOG_INVALID_ARGUMENT: the backup's destination /)
      assert.match(err[1] ?? '', /^remedy: check the command line/)
      assert.match(err[2] ?? '', /^usage: factstate backup <log-directory> <backup-directory>/)
      assert.is(err.at(-1), "run 'factstate backup --help' for the options")
      // An unset variable in a script: "$BACKUP_DIR" is ''.
      for (const destination of ['', '  ']) {
        const empty = collector()
        assert.is(await backupCommand([location, destination], empty.io), EXIT.usage, JSON.stringify(destination))
        assert.match(empty.err[0] ?? '', /^error: the backup directory must be a non-empty path/)
        assert.match(empty.err[1] ?? '', /^usage: factstate backup /)
      }
    }),
    20_000,
  ))

test.run()
