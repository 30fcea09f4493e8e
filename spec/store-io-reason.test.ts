/**
 * `LOG_IO` says why in `details.reason` (and where, `details.path`), from the system's error code or
 * the system's words LevelDB's message ends with, so an alert can be routed without parsing the
 * message; a full disk says how much to free; the CLI's remedy fits the reason; `log.failure()`
 * tells a health check that the log failed. Each failure is a real one: a full disk is LevelDB
 * writing into /dev/full (its next files linked there), or a backup's copy filling a small tmpfs
 * (where one can be mounted), a permission is another user's open (or a
 * directory without write permission, for a test not run as root), the limit of open files a child
 * under `ulimit -n`, a removed directory a removed directory.
 */
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { chmod, lstat, mkdir, readdir, realpath, rm, symlink, unlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type FactstateError } from '../index.js'
import { recoverCommand } from '../bin/commands/recover.js'
import { backupCommand } from '../bin/commands/backup.js'
import { ioCause, shownBytes, writeAheadBytes } from '../store/io-reason.js'
import { collector } from './support/cli-io.js'
import { EventMaker, REPO_ROOT, boundedTest, completeInvocation, facts, invocationOf, refusal } from './support/log-fixtures.js'

/** What classic-level throws when LevelDB's open fails: its own error, LevelDB's as the cause. */
function levelOpenError(message: string): Error {
  const inner = Object.assign(new Error(message), { code: 'LEVEL_IO_ERROR' })
  return Object.assign(new Error('Database failed to open', { cause: inner }), { code: 'LEVEL_DATABASE_NOT_OPEN' })
}

test('the reason is read from LevelDB\u2019s own messages (the system\u2019s words after the file) and from error codes', () => {
  // LevelDB's messages as it gives them (`IO error: <file>: <strerror>`; a lock's context is `lock <file>`).
  const messages: [string, string, string][] = [
    ['IO error: /logs/app/000003.log: No space left on device', 'no_space', '/logs/app/000003.log'],
    ['IO error: /logs/app/000005.ldb: Disk quota exceeded', 'no_space', '/logs/app/000005.ldb'],
    ['IO error: /logs/app/LOCK: Permission denied', 'permission', '/logs/app/LOCK'],
    ['IO error: lock /logs/app/LOCK: Permission denied', 'permission', '/logs/app/LOCK'],
    ['IO error: /logs/app/LOCK: Read-only file system', 'read_only', '/logs/app/LOCK'],
    ['IO error: /logs/app/MANIFEST-000001: Too many open files', 'too_many_files', '/logs/app/MANIFEST-000001'],
    ['IO error: /logs/app/000007.ldb: No such file or directory', 'directory_gone', '/logs/app/000007.ldb'],
    ['IO error: /logs/app/000007.ldb: Input/output error', 'other', ''],
  ]
  assert.equal(
    messages.map(([message]) => {
      const found = ioCause(levelOpenError(message))
      return [found.reason, found.path ?? '']
    }),
    messages.map(([, reason, path]) => [reason, reason === 'other' ? '' : path]),
  )
  // A file call's error carries its code (and path): the code decides, whatever the words.
  const coded = (code: string) => ioCause(Object.assign(new Error('words that say nothing'), { code, path: '/x' }))
  assert.equal(
    ['ENOSPC', 'EDQUOT', 'EACCES', 'EPERM', 'EROFS', 'EMFILE', 'ENFILE', 'ENOENT', 'EIO'].map((code) => coded(code).reason),
    ['no_space', 'no_space', 'permission', 'permission', 'read_only', 'too_many_files', 'too_many_files', 'directory_gone', 'other'],
  )
  assert.equal(ioCause(undefined), { reason: 'other' })
})

test(
  'spaceNeeded counts the write-ahead logs still there: one gone since the directory was read (a compaction ending) costs nothing but its own size',
  boundedTest(10_000, async (root) => {
    await writeFile(join(root, '000003.log'), Buffer.alloc(5000))
    // Listed, but gone before its size is read: as a name whose file is gone.
    await symlink(join(root, 'deleted'), join(root, '000004.log'))
    assert.is(writeAheadBytes(root), 5000)
    assert.is(writeAheadBytes(join(root, 'none')), undefined, 'a directory that cannot be read')
  }),
)

/** Links LevelDB's next files (`NNNNNN.log`, `.ldb`) in `dir` to /dev/full: each write to one fails "No space left on device". The links made. */
async function fillDisk(dir: string, exts = ['log', 'ldb']): Promise<string[]> {
  const made: string[] = []
  const present = new Set(await readdir(dir))
  for (let n = 1; n < 40; n += 1) {
    for (const ext of exts) {
      const name = `${String(n).padStart(6, '0')}.${ext}`
      if (present.has(name)) continue
      await symlink('/dev/full', join(dir, name))
      made.push(join(dir, name))
    }
  }
  return made
}

/** Removes what `fillDisk` linked (LevelDB deletes a table it could not write). */
async function freeDisk(links: string[]): Promise<void> {
  for (const link of links) {
    const found = await lstat(link).catch(() => undefined)
    if (found?.isSymbolicLink()) await unlink(link)
  }
}

/** The bytes of the write-ahead logs (`NNNNNN.log`, regular files) in `dir`. */
async function walBytes(dir: string): Promise<number> {
  let bytes = 0
  for (const name of await readdir(dir)) {
    if (!/^\d+\.log$/.test(name)) continue
    const found = await lstat(join(dir, name))
    if (found.isFile()) bytes += found.size
  }
  return bytes
}

const HAS_DEV_FULL = existsSync('/dev/full')

test(
  'a disk full while the log runs: the append is LOG_IO no_space with the space the next open needs; log.failure() says it; close() resolves; freed, the log opens with every acknowledged fact',
  boundedTest(60_000, async (root) => {
    if (!HAS_DEV_FULL) return console.log('  (skipped: no /dev/full on this system)')
    const dir = join(root, 'log')
    const log = await EventLog.open(dir)
    let links: string[] = []
    let acknowledged = 0
    try {
      assert.is(log.failure(), undefined, 'a healthy log has no failure')
      await log.appendAll(completeInvocation('before'))
      acknowledged = 8
      links = await fillDisk(dir)
      // Past LevelDB's write buffer (4 MiB) it starts a new write-ahead log and writes the old one out: both go to /dev/full.
      const big = 'x'.repeat(60_000)
      let refused: FactstateError | undefined
      for (let i = 0; i < 200 && refused === undefined; i += 1) {
        try {
          await log.append(new EventMaker(invocationOf(`big-${i}`)).next(facts.opened(big)))
          acknowledged += 1
        } catch (error) {
          refused = error as FactstateError
        }
      }
      if (refused === undefined) throw new Error('200 appends of 60 KB never reached the full disk')
      assert.is(refused.code, 'LOG_IO', refused.message)
      const details = refused.details as { reason: string; path: string; spaceNeeded: number }
      assert.is(details.reason, 'no_space', refused.message)
      assert.match(details.path, /^.*[\\/]\d{6}\.(?:log|ldb)$/)
      assert.is(details.spaceNeeded, await walBytes(dir), 'the size of the write-ahead log the next open writes out')
      assert.ok(details.spaceNeeded > 1024 * 1024)
      assert.match(refused.message, /the disk is full: the log's next open writes its write-ahead log, \d+\.\d MiB, out as a table, so free at least that much/)
      assert.is(log.failure(), refused, 'the failure, without a call to catch')
      // Every call but close() is refused with it.
      assert.is((await refusal(() => log.head())).code, 'LOG_IO')
    } finally {
      // A failed log's close does not try to record its head, and resolves.
      await log.close()
    }
    assert.is(log.failure()?.code, 'LOG_IO', 'still readable once closed')

    // Still full: the CLI's open is refused, and its remedy says how much to free. (The write-ahead
    // logs linked to /dev/full go first: LevelDB would replay one, and /dev/full reads zeros forever.)
    await freeDisk(links.filter((link) => link.endsWith('.log')))
    // LevelDB deleted the table it could not write: linked again, as a disk still full would be.
    links.push(...(await fillDisk(dir, ['ldb'])))
    const { io, err } = collector()
    const opened = await recoverCommand([dir], io)
    assert.is(opened, 4, err.join('\n'))
    const remedy = err.find((line) => line.startsWith('remedy: ')) ?? ''
    assert.match(remedy, /^remedy: the disk is full \(.*\.ldb\): free space on the log's file system, at least \d+\.\d MiB, the size of its write-ahead log/)
    assert.ok(remedy.includes(`at least ${shownBytes(await walBytes(dir))},`), remedy)

    await freeDisk(links)
    const reopened = await EventLog.open(dir)
    try {
      assert.is(reopened.failure(), undefined)
      assert.is((await reopened.verify()).events, acknowledged, 'nothing acknowledged was lost')
    } finally {
      await reopened.close()
    }
  }),
)

test(
  'a disk full as the log opens (LevelDB writes the write-ahead log out as a table): LOG_IO no_space naming the table, spaceNeeded the write-ahead log',
  boundedTest(30_000, async (root) => {
    if (!HAS_DEV_FULL) return console.log('  (skipped: no /dev/full on this system)')
    const dir = join(root, 'log')
    const log = await EventLog.open(dir)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    const wal = await walBytes(dir)
    const links = await fillDisk(dir)
    const refused = await refusal(EventLog.open(dir))
    assert.is(refused.code, 'LOG_IO')
    assert.equal(refused.details, { reason: 'no_space', path: (refused.details as { path: string }).path, spaceNeeded: wal })
    assert.match((refused.details as { path: string }).path, /\d{6}\.ldb$/)
    await freeDisk(links)
    const reopened = await EventLog.open(dir)
    try {
      assert.is((await reopened.verify()).events, 8)
    } finally {
      await reopened.close()
    }
  }),
)

interface ChildReport {
  code: string
  reason?: string
  path?: string
  message?: string
  remedy?: string
}

/** Runs spec/support/child-io-reason.ts; as root, as the user nobody (a permission root never lacks); under `ulimit -n` with `fileLimit`. */
function runChild(args: string[], options: { asOtherUser?: boolean; fileLimit?: number } = {}): Promise<ChildReport> {
  const script = ['--import', 'tsx', join('spec', 'support', 'child-io-reason.ts'), ...args]
  const asNobody = options.asOtherUser === true && process.getuid?.() === 0
  const [command, argv] =
    options.fileLimit === undefined
      ? [process.execPath, script]
      : ['/bin/sh', ['-c', `ulimit -n ${options.fileLimit} && exec "$0" "$@"`, process.execPath, ...script]]
  return new Promise((resolve, reject) => {
    const child = spawn(command as string, argv as string[], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], ...(asNobody ? { uid: 65534, gid: 65534 } : {}) })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      const line = stdout.trim().split('\n').at(-1) ?? ''
      try {
        resolve(JSON.parse(line) as ChildReport)
      } catch {
        reject(new Error(`child exited ${code} without a report; stdout: ${stdout}; stderr: ${stderr}`))
      }
    })
  })
}

test(
  'a log the process may not write: LOG_IO permission naming LevelDB\u2019s file, and a remedy about the owner; a backup destination it may not write: named as the destination, the log untouched',
  boundedTest(60_000, async (root) => {
    const asRoot = process.getuid?.() === 0
    // As root the child runs as nobody, who must be able to read this checkout (tsx's loader and every
    // module the child loads) to start it: a checkout under a directory only its owner may enter (root's
    // home), or one whose files only their owner may read (a clone made under umask 077), cannot, and
    // then only the mapping of the system's texts (the tests above) covers a permission. The probe is the
    // child itself, loading all it needs: tsx alone loading is not enough.
    const probe = ['--import', 'tsx', join('spec', 'support', 'child-io-reason.ts'), 'probe']
    if (asRoot && spawnSync(process.execPath, probe, { cwd: REPO_ROOT, uid: 65534, gid: 65534, stdio: 'ignore' }).status !== 0) {
      return console.log('  (skipped: the user nobody cannot read this checkout)')
    }
    // The user nobody must reach the directories (a temporary directory is the owner's only).
    await chmod(root, 0o755)
    const dir = join(root, 'log')
    const log = await EventLog.open(dir)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    const backups = join(root, 'backups')
    await mkdir(backups, { mode: 0o755 })
    if (!asRoot) {
      // Without root, this user's own permissions are taken away.
      await chmod(join(dir, 'LOCK'), 0o444)
      await chmod(backups, 0o555)
    }
    try {
      const opened = await runChild(['open', dir], { asOtherUser: true })
      assert.is(opened.code, 'LOG_IO', JSON.stringify(opened))
      assert.is(opened.reason, 'permission', opened.message)
      assert.is(opened.path, join(dir, 'LOCK'))
      assert.match(opened.remedy ?? '', /^remedy: this process may not read or write there \(.*LOCK\): run the command as the user that owns the log directory/)

      const destination = join(backups, 'nightly')
      const backedUp = await runChild(['backup', dir, destination], { asOtherUser: true })
      assert.is(backedUp.code, 'LOG_IO', JSON.stringify(backedUp))
      assert.is(backedUp.reason, 'permission')
      assert.is(backedUp.path, backups)
      assert.match(backedUp.message ?? '', /^LOG_IO: the backup's destination .*nightly cannot be made in .*backups: EACCES/)
      assert.match(backedUp.remedy ?? '', /^remedy: the backup directory cannot be made in .*backups \(this user may not write there\): give a backup directory in a place this user can write/)
      assert.not.match(backedUp.remedy ?? '', /LevelDB/)
    } finally {
      if (!asRoot) {
        await chmod(join(dir, 'LOCK'), 0o644)
        await chmod(backups, 0o755)
      }
    }
    assert.equal(await readdir(backups), [], 'nothing left at the destination')
  }),
)

test(
  'the process\u2019s limit of open files reached: LOG_IO too_many_files (a child under ulimit -n), and the directory it began opens later',
  boundedTest(60_000, async (root) => {
    const dir = join(root, 'log')
    const report = await runChild(['emfile', dir], { fileLimit: 256 })
    assert.is(report.code, 'LOG_IO', JSON.stringify(report))
    assert.is(report.reason, 'too_many_files', report.message)
    const log = await EventLog.open(dir)
    await log.close()
  }),
)

test(
  'a directory removed under the open log: LOG_IO directory_gone with the log\u2019s path, from log.failure() too',
  boundedTest(20_000, async (root) => {
    const dir = join(root, 'log')
    const log = await EventLog.open(dir)
    try {
      await log.appendAll(completeInvocation('a'))
      const location = await realpath(dir)
      await rm(dir, { recursive: true })
      const refused = await refusal(log.append(new EventMaker(invocationOf('b')).next(facts.opened())))
      assert.is(refused.code, 'LOG_IO')
      const details = refused.details as { reason: string; path: string }
      assert.is(details.reason, 'directory_gone')
      assert.is(details.path, location)
      assert.is(log.failure(), refused)
    } finally {
      await log.close()
    }
  }),
)

test(
  'a backup (or a snapshot) to a full disk: LOG_IO no_space naming the destination\u2019s parent (the snapshot\u2019s directory), the remedy about the destination, not the log\u2019s write-ahead log (a tmpfs, where one can be mounted)',
  boundedTest(60_000, async (root) => {
    const disk = join(root, 'disk')
    await mkdir(disk)
    const dir = join(root, 'log')
    const log = await EventLog.open(dir)
    for (let i = 0; i < 40; i += 1) {
      const noise = randomBytes(6_000).toString('base64')
      await log.appendAll(new EventMaker(invocationOf(`r${i}`)).many([facts.opened(noise), facts.ended({ status: 'cancelled', source: 'shutdown' })]))
    }
    await log.close()
    // Smaller than the log: the copy fills it.
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', disk], { stdio: 'ignore' }).status !== 0) {
      return console.log('  (skipped: no tmpfs can be mounted here)')
    }
    try {
      const destination = join(disk, 'nightly')
      const refused = await refusal(EventLog.backup(dir, destination))
      assert.is(refused.code, 'LOG_IO', refused.message)
      assert.equal(refused.details, { reason: 'no_space', path: disk }, refused.message)
      assert.match(refused.message, /^LOG_IO: the backup's destination .*nightly cannot be written in .*disk: /)
      const { io, err } = collector()
      assert.is(await backupCommand([dir, destination], io), 4)
      assert.match(err.find((line) => line.startsWith('remedy: ')) ?? '', /^remedy: the backup directory cannot be made in .*disk \(its disk is full\)/)
      assert.equal(await readdir(disk), [], 'nothing left on the full disk')
      // A snapshot made there: named as the place it was made in, not as the log.
      const snapshot = await refusal(EventLog.openSnapshot(dir, { directory: disk }))
      assert.is(snapshot.code, 'LOG_IO', snapshot.message)
      assert.equal(snapshot.details, { reason: 'no_space', path: disk }, snapshot.message)
      assert.match(snapshot.message, /^LOG_IO: no snapshot can be written in .*disk: ENOSPC/)
      assert.equal(await readdir(disk), [], 'nor of the snapshot')
    } finally {
      spawnSync('umount', [disk], { stdio: 'ignore' })
    }
  }),
)


test('sizes in remedies are shown in bytes, KiB (rounded up), MiB or GiB', () => {
  assert.equal(
    [100, 1_024, 2_049, 1.5 * 1024 * 1024, 3 * 1024 * 1024 * 1024].map(shownBytes),
    ['100 bytes', '1 KiB', '3 KiB', '1.5 MiB', '3.0 GiB'],
  )
})

test.run()
