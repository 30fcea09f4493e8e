/**
 * What a log writes beside LevelDB's files (the head anchor, the stored id filter) goes only into
 * the directory it opened, only when there is something new to record, and never into another
 * program's LevelDB database; LevelDB's own failures on open say what LevelDB found.
 */
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../store/event-log.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal } from './support/log-fixtures.js'

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
  'an open and close that append nothing leave the head anchor as it was (a read, under either durability)',
  boundedTest(20_000, async (root) => {
    for (const durability of ['sync', 'os'] as const) {
      const path = join(root, durability)
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
  'LevelDB failing to open (its manifest gone) is LOG_IO with what LevelDB found, not only that it failed',
  boundedTest(20_000, async (root) => {
    const path = join(root, 'log')
    const log = await EventLog.open(path)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    for (const name of await readdir(path)) if (name.startsWith('MANIFEST-')) await rm(join(path, name))
    const error = await refusal(EventLog.open(path))
    assert.is(error.code, 'LOG_IO', error.message)
    assert.match(error.message, /MANIFEST-\d+: No such file or directory/)
  }),
)

directory.run()
