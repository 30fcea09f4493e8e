/**
 * What a log writes beside LevelDB's files (the head anchor, the stored id filter) goes only into
 * the directory it opened, only when there is something new to record, and never into another
 * program's LevelDB database; LevelDB's own failures on open say what LevelDB found.
 */
import { lstat, mkdir, readdir, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, logInternals } from '../store/event-log.js'
import { keys } from '../store/keys.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal, withDb } from './support/log-fixtures.js'

const directory = suite('store: the log directory')

directory(
  'a log whose directory was moved away and replaced while it was open writes its anchor into neither the new directory nor anywhere else',
  boundedTest(20_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    await log.appendAll(completeInvocation('a'))
    // What another process may do once this one stops using the directory: put something else at its name.
    await rename(path, join(root, 'moved'))
    await mkdir(path)
    await writeFile(join(path, 'NOTES'), 'not a log\n')
    await log.close()
    assert.equal(await readdir(path), ['NOTES'], 'nothing was written into the new directory')
    const reopened = await EventLog.open(join(root, 'moved'))
    try {
      assert.is((await reopened.verify()).events, 8, 'the moved log is whole')
    } finally {
      await reopened.close()
    }
  }),
)

directory(
  'an append made after the directory was removed or moved under the open log is refused LOG_IO, not acknowledged (LevelDB writes on into its unlinked files), and so is every one after it',
  boundedTest(20_000, async (root) => {
    for (const how of ['removed', 'moved'] as const) {
      const path = join(root, `log-${how}`)
      const log = await EventLog.open(path)
      try {
        await log.appendAll(completeInvocation(`${how}-before`))
        if (how === 'removed') await rm(path, { recursive: true })
        else await rename(path, join(root, `moved-${how}`))
        const after = new EventMaker(invocationOf(`${how}-after`))
        const refused = await refusal(log.append(after.next(facts.opened())))
        assert.is(refused.code, 'LOG_IO', refused.message)
        assert.match(refused.message, how === 'removed' ? /was removed \(or moved away\) while the log was open: what was written since is in no directory of that name, so it was not acknowledged/ : /was removed \(or moved away\)/)
        const next = await refusal(log.append(new EventMaker(invocationOf(`${how}-later`)).next(facts.opened())))
        assert.is(next.code, 'LOG_IO', 'the log stays failed')
      } finally {
        await log.close()
      }
      // What was acknowledged before is where the directory went, and the refused group with it (written, not acknowledged).
      if (how === 'moved') {
        const moved = await EventLog.open(join(root, `moved-${how}`))
        try {
          assert.is((await moved.verify()).events, 9)
        } finally {
          await moved.close()
        }
      }
    }
    // Replaced by another directory: the same refusal, naming it.
    const path = join(root, 'log-replaced')
    const log = await EventLog.open(path)
    try {
      await log.appendAll(completeInvocation('replaced-before'))
      await rename(path, join(root, 'old-replaced'))
      await mkdir(path)
      const refused = await refusal(log.append(new EventMaker(invocationOf('replaced-after')).next(facts.opened())))
      assert.is(refused.code, 'LOG_IO')
      assert.match(refused.message, /is now another directory/)
    } finally {
      await log.close()
    }
  }),
)

directory(
  'an open and close that append nothing leave the head anchor as it was (a read, under either durability), and an empty log gets none',
  boundedTest(20_000, async (root) => {
    for (const durability of ['sync', 'os'] as const) {
      const path = join(root, durability)
      await (await EventLog.open(path, { durability })).close()
      assert.not.ok((await readdir(path)).includes('FACTSTATE-HEAD'), `${durability}: no anchor for no facts`)
      const log = await EventLog.open(path, { durability })
      await log.appendAll(completeInvocation('a'))
      await log.close()
      const anchor = join(path, 'FACTSTATE-HEAD')
      const before = await stat(anchor)
      const reader = await EventLog.open(path, { durability })
      assert.is((await reader.verify()).events, 8)
      await reader.close()
      const after = await stat(anchor)
      assert.equal([after.ino, after.mtimeMs], [before.ino, before.mtimeMs], `${durability}: the anchor was not rewritten`)
      // One more fact, and it is.
      const writer = await EventLog.open(path, { durability })
      await writer.append(new EventMaker(invocationOf('b')).next(facts.opened()))
      await writer.close()
      assert.is.not((await stat(anchor)).ino, before.ino, `${durability}: a new head gets a new anchor`)
    }
  }),
)

directory(
  "another program's LevelDB database is refused with LOG_INVALID_ARGUMENT, and nothing of factstate's is written into it",
  boundedTest(20_000, async (root) => {
    const path = join(root, 'theirs')
    const db = new ClassicLevel<string, string>(path)
    await db.put('user:1', 'Ada')
    await db.close()
    const error = await refusal(EventLog.open(path))
    assert.is(error.code, 'LOG_INVALID_ARGUMENT', error.message)
    assert.equal(error.details, { notALog: true })
    assert.match(error.message, /not a factstate log.*"user:1"/)
    assert.not.ok((await readdir(path)).some((name) => name.startsWith('FACTSTATE')), 'no anchor, no filter')
    const again = new ClassicLevel<string, string>(path)
    try {
      assert.equal(await again.keys().all(), ['user:1'], 'its keys are as they were')
    } finally {
      await again.close()
    }
    // A factstate log that lost its facts and head (a damaged table) is damaged, not somebody else's.
    const damaged = join(root, 'damaged')
    const log0 = await EventLog.open(damaged)
    await log0.appendAll(completeInvocation('a'))
    await log0.close()
    await withDb(damaged, async (stored) => {
      for (const key of await stored.keys({ gte: keys.eventLow, lt: keys.eventHigh }).all()) await stored.del(key)
      await stored.del(keys.head)
      await stored.del(keys.format)
    })
    const lost = await refusal(EventLog.open(damaged))
    assert.is(lost.code, 'LOG_CORRUPT', lost.message)
    await rm(join(damaged, 'FACTSTATE-HEAD'))
    assert.is((await refusal(EventLog.open(damaged))).code, 'LOG_CORRUPT', 'without its anchor, by its own keys')
    // An empty LevelDB directory is an empty log, as a new directory is.
    const empty = join(root, 'empty')
    await new ClassicLevel(empty).close()
    const log = await EventLog.open(empty)
    try {
      assert.is(log.head().highWater, 0)
    } finally {
      await log.close()
    }
  }),
)

directory(
  'open makes the missing directories of its location, one level at a time: a name the file system refuses under a directory that exists (/proc) is LOG_IO, not a hang; a file in the way is LOG_INVALID_ARGUMENT',
  boundedTest(20_000, async (root) => {
    const deep = join(root, 'a', 'b', 'c', 'log')
    const log = await EventLog.open(deep)
    try {
      await log.appendAll(completeInvocation('made'))
    } finally {
      await log.close()
    }
    assert.ok((await stat(deep)).isDirectory(), 'every missing level was made')
    // Node's own recursive mkdir retries /proc/<name> for ever (each try: ENOENT; its parent: exists).
    if ((await stat('/proc').then((found) => found.isDirectory(), () => false)) && process.platform === 'linux') {
      const refused = await refusal(EventLog.open('/proc/factstate-cannot-be-made/log'))
      assert.is(refused.code, 'LOG_IO', refused.message)
      assert.match(refused.message, /\/proc\/factstate-cannot-be-made/)
    }
    await writeFile(join(root, 'file'), 'in the way')
    assert.is((await refusal(EventLog.open(join(root, 'file')))).code, 'LOG_INVALID_ARGUMENT')
    assert.is((await refusal(EventLog.open(join(root, 'file', 'below', 'log')))).code, 'LOG_INVALID_ARGUMENT')
  }),
)

directory(
  'a log whose manifest is gone is LOG_CORRUPT naming the manifest CURRENT names (it was LevelDB\'s LOG_IO, a missing file)',
  boundedTest(20_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    for (const name of await readdir(path)) if (name.startsWith('MANIFEST-')) await rm(join(path, name))
    const error = await refusal(EventLog.open(path))
    assert.is(error.code, 'LOG_CORRUPT', error.message)
    assert.is(error.details?.file, 'CURRENT')
    assert.match(error.message, /CURRENT file names MANIFEST-\d+, which is not in .*: the manifest is missing/)
  }),
)

directory(
  'what is left at the temporary names of the anchor and the filter (symlinks out of the directory) is replaced, never written through',
  boundedTest(20_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    const victims = [join(root, 'victim-head'), join(root, 'victim-ids')]
    try {
      logInternals(log).setIdFilterStoredFrom(0)
      await log.appendAll(completeInvocation('a'))
      assert.is(await logInternals(log).buildIdFilter(), true)
      for (const [index, name] of ['FACTSTATE-HEAD.tmp', 'FACTSTATE-IDS.tmp'].entries()) {
        await writeFile(victims[index] as string, 'precious\n')
        await symlink(victims[index] as string, join(path, name))
      }
    } finally {
      await log.close()
    }
    for (const victim of victims) assert.is(await readFile(victim, 'utf8'), 'precious\n', victim)
    for (const name of ['FACTSTATE-HEAD', 'FACTSTATE-IDS']) assert.ok((await lstat(join(path, name))).isFile(), `${name} is a file of the log`)
    const reopened = await EventLog.open(path)
    try {
      assert.is(await logInternals(reopened).idFilterReady(), true, 'the stored filter is taken up')
    } finally {
      await reopened.close()
    }
  }),
)

directory(
  'open makes no log among other files (a project directory, /): LOG_INVALID_ARGUMENT, and nothing is added; a new, empty or half-made log directory opens',
  boundedTest(20_000, async (root) => {
    const project = join(root, 'project')
    await mkdir(project)
    await writeFile(join(project, 'notes.txt'), 'mine\n')
    const error = await refusal(EventLog.open(project))
    assert.is(error.code, 'LOG_INVALID_ARGUMENT')
    assert.match(error.message, /holds no log but other files \(notes\.txt\): a log needs a directory of its own/)
    assert.equal(await readdir(project), ['notes.txt'], 'no LOCK, LOG, CURRENT or MANIFEST was added')
    // What LevelDB leaves when a process dies while it first makes the log (before CURRENT) is a log's own.
    const halfMade = join(root, 'half-made')
    await mkdir(halfMade)
    await writeFile(join(halfMade, 'LOCK'), '')
    await writeFile(join(halfMade, 'LOG'), 'leveldb info\n')
    await writeFile(join(halfMade, 'MANIFEST-000001'), '')
    // A fresh ext4 volume's mount point holds lost+found (a directory fsck owns): a volume for the log.
    const volume = join(root, 'volume')
    await mkdir(join(volume, 'lost+found'), { recursive: true })
    for (const path of [join(root, 'new'), join(root, 'empty'), halfMade, volume]) {
      if (path.endsWith('empty')) await mkdir(path)
      const log = await EventLog.open(path)
      try {
        await log.appendAll(completeInvocation('fresh'))
        assert.ok((await readdir(path)).includes('CURRENT'), path)
      } finally {
        await log.close()
      }
    }
    // A snapshot and a backup of the log on that volume copy its files only, not lost+found.
    const snapshot = await EventLog.openSnapshot(volume, { directory: root })
    try {
      assert.is(snapshot.head().highWater, (await collectHighWater(volume)))
    } finally {
      await snapshot.close()
    }
    const copy = join(root, 'volume-backup')
    await EventLog.backup(volume, copy)
    assert.not.ok((await readdir(copy)).includes('lost+found'), 'the backup holds the log alone')
  }),
)

async function collectHighWater(path: string): Promise<number> {
  const log = await EventLog.open(path)
  try {
    return log.head().highWater
  } finally {
    await log.close()
  }
}

/**
 * In a child whose file descriptors are limited (`ulimit -n 256`): makes a new log in `base` with
 * only `free` descriptors left (every other one taken by /dev/null), 0 up to 60, until one is made.
 * For each: how the open ended, then (every descriptor given back) how `open(dir, { create: false })`
 * ends, and what is left in the directory.
 */
function makeWithFewDescriptors(base: string): Promise<{ free: number; made: string; later: string; left: string[] | null }[]> {
  const source = pathToFileURL(join(fileURLToPath(new URL('..', import.meta.url)), 'store', 'event-log.ts')).href
  const code = `
    import { closeSync, existsSync, openSync, readdirSync } from 'node:fs'
    import { join } from 'node:path'
    const { EventLog } = await import(${JSON.stringify(source)})
    const base = ${JSON.stringify(base)}
    // Everything an open loads, loaded before descriptors run short.
    await (await EventLog.open(join(base, 'warm'))).close()
    const results = []
    for (let free = 0; free <= 60; free += 1) {
      const dir = join(base, 'log-' + free)
      const taken = []
      try { for (;;) taken.push(openSync('/dev/null', 'r')) } catch {}
      for (let i = 0; i < free; i += 1) closeSync(taken.pop())
      let log, made
      try { log = await EventLog.open(dir); made = 'made' } catch (error) { made = error.code + ':' + error.details?.reason }
      for (const fd of taken) closeSync(fd)
      await log?.close()
      let later
      try { await (await EventLog.open(dir, { create: false })).close(); later = 'opened' } catch (error) { later = error.code }
      results.push({ free, made, later, left: existsSync(dir) ? readdirSync(dir).sort() : null })
      if (made === 'made') break
    }
    console.log(JSON.stringify(results))`
  return new Promise((resolve, reject) => {
    const node = JSON.stringify(process.execPath)
    execFile('sh', ['-c', `ulimit -n 256 && exec ${node} --import tsx --input-type=module -e "$0"`, code], { cwd: fileURLToPath(new URL('..', import.meta.url)), timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(JSON.parse(stdout.trim().split('\n').at(-1) as string))
    })
  })
}

directory(
  'a new log whose making fails for want of file descriptors (LOG_IO too_many_files) leaves nothing a later open takes for a log: create: false is refused, the directory is gone',
  boundedTest(90_000, async (root) => {
    // What it removes is told by /proc/locks (see `unmake`): Linux only.
    if (process.platform !== 'linux') return
    const results = await makeWithFewDescriptors(root)
    const failed = results.filter((result) => result.made !== 'made')
    assert.ok(failed.length > 0, JSON.stringify(results))
    assert.is(results.at(-1)?.made, 'made', 'with enough descriptors the log is made')
    for (const result of failed) {
      const what = `with ${result.free} descriptors free: ${JSON.stringify(result)}`
      // Never LOG_CORRUPT: a marker of damage that could not be looked for is not damage.
      assert.is(result.made, 'LOG_IO:too_many_files', what)
      assert.is(result.later, 'LOG_INVALID_ARGUMENT', `create: false finds no log ${what}`)
      // The directory is removed, or (LevelDB failed before its LOCK, having written its info log) holds no CURRENT.
      assert.ok(result.left === null || !result.left.includes('CURRENT'), what)
    }
    assert.ok(failed.some((result) => result.left === null), `the directory it made is removed: ${JSON.stringify(results)}`)
  }),
)

directory.run()
