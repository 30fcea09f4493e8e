/**
 * `EventLog.openSnapshot`: a read-only, consistent copy of a log that another process (or this one)
 * keeps writing, checked against what the writer acknowledged and against the log itself
 * afterwards; and the copy's retries when LevelDB changes its files during a copy.
 */
import { copyFile, cp, mkdir, readdir, readFile, rename, rm, stat, unlink, utimes, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine } from '../actors/engine.js'
import type { StoredEvent } from '../facts/types.js'
import { CACHE_LIMIT, EventLog, logInternals } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { LISTED, SNAPSHOT_ATTEMPTS, copySnapshot, forgetSweeps } from '../store/snapshot.js'
import { logHeldOpen } from '../store/writer-presence.js'
import { withTmpdir } from './support/temp.js'
import { EventMaker, type Child, boundedTest, completeInvocation, facts, invocationOf, refusal, startChild } from './support/log-fixtures.js'

const test = suite('store: snapshots')

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  )
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = []
  for await (const item of items) all.push(item)
  return all
}

const tables = async (dir: string): Promise<string[]> => (await readdir(dir)).filter((name) => /\.(?:ldb|sst)$/.test(name)).sort()

/** The highest seq the child acknowledged so far (every `ack` line is printed once its append is durable). */
function lastAck(child: Child): { seq: number; id: string } {
  let last = { seq: 0, id: '' }
  for (const line of child.lines) {
    if (!line.startsWith('ack ')) continue
    const [, seq, id] = line.split(' ')
    if (Number(seq) > last.seq) last = { seq: Number(seq), id: id as string }
  }
  return last
}

interface Taken {
  highWater: number
  digest: string
  /** The snapshot's last events, as read from it. */
  tail: StoredEvent[]
}

const TAIL = 300

/**
 * Takes snapshots of the log in `dir` while a child appends to it with 32 appenders, then kills the
 * child and compares each snapshot with the log.
 */
async function appendAndSnapshot(dir: string): Promise<void> {
  const child = startChild('child-append-stream.ts', [dir, '32'])
  const taken: Taken[] = []
  const tableSets = new Set<string>()
  try {
    await child.waitForLine((line) => line === 'parked', 40_000)
    // Until LevelDB has flushed (or compacted) several times during the snapshots: each flush
    // changes the manifest and the table files, which a copy must not mix up.
    const deadline = Date.now() + 60_000
    while ((taken.length < 8 || tableSets.size < 3) && Date.now() < deadline) {
      const acked = lastAck(child)
      const snapshot = await EventLog.openSnapshot(dir)
      const copy = logInternals(snapshot).location
      try {
        assert.is(snapshot.snapshotOf, resolve(dir))
        const head = snapshot.head()
        assert.ok(head.highWater >= acked.seq, `snapshot ${taken.length + 1}: high-water ${head.highWater} holds the last acknowledged seq ${acked.seq}`)
        if (acked.seq > 0) {
          const [event] = await collect(snapshot.events({ from: acked.seq, to: acked.seq }))
          assert.is(event?.event.id, acked.id, `seq ${acked.seq} is the acknowledged ${acked.id}`)
        }
        const verified = await snapshot.verify()
        assert.equal(verified, { events: head.highWater, digest: head.digest }, 'the copy passes verify: seqs, digest chain, every index record')
        const tail = await collect(snapshot.events({ from: Math.max(1, head.highWater - TAIL + 1) }))
        taken.push({ ...head, tail })
        if (taken.length === 1) {
          const event = new EventMaker(invocationOf('snapshot-write')).next(facts.opened())
          assert.is((await refusal(snapshot.append(event))).code, 'LOG_READ_ONLY')
          assert.is((await refusal(snapshot.appendAll([event]))).code, 'LOG_READ_ONLY')
          assert.is((await refusal(recoverInvocations(snapshot))).code, 'LOG_READ_ONLY', 'recovery writes: refused before anything')
          const engine = await refusal(() => new Engine({ log: snapshot }))
          assert.is(engine.code, 'ENGINE_INVALID_OPTIONS')
          assert.equal(engine.details, { field: 'log' })
          assert.is(snapshot.head().highWater, head.highWater, 'nothing was written to the copy')
        }
      } finally {
        await snapshot.close()
      }
      assert.not.ok(await exists(copy), 'close removed the copy')
      tableSets.add((await tables(dir)).join(','))
    }
    assert.ok(taken.length >= 8, `${taken.length} snapshots taken`)
    assert.ok(tableSets.size >= 3, `LevelDB changed its table files during the snapshots (${tableSets.size} sets seen)`)
    for (let index = 1; index < taken.length; index += 1) {
      assert.ok((taken[index] as Taken).highWater >= (taken[index - 1] as Taken).highWater, 'later snapshots hold at least as much')
    }
    assert.ok((taken.at(-1) as Taken).highWater > (taken[0] as Taken).highWater, 'the log grew between the snapshots')
  } finally {
    await child.stop('SIGKILL')
  }
  assert.not.ok(child.lines.some((line) => line.startsWith('error')), `the writer was never disturbed: ${child.stderr()}`)

  // Each snapshot is the log as it was at its high-water: the same events, byte for byte as decoded.
  const log = await EventLog.open(dir)
  try {
    for (const snapshot of taken) {
      const from = snapshot.tail[0]?.seq ?? 1
      const real = await collect(log.events({ from, to: snapshot.highWater }))
      assert.equal(real, snapshot.tail, `the snapshot at ${snapshot.highWater} is the log's prefix`)
    }
  } finally {
    await log.close()
  }
}

test(
  'a snapshot of a log a child process keeps appending to holds every acknowledged fact, verifies, is an exact prefix of the log, refuses writes, and is removed at close',
  boundedTest(120_000, async (dir) => {
    // Copies go to a directory of this test's own, to see that none is left behind.
    const copies = join(dir, 'tmp')
    await mkdir(copies)
    const log = join(dir, 'log')
    await withTmpdir(copies, () => appendAndSnapshot(log))
    assert.equal((await readdir(copies)).filter((name) => name.startsWith('factstate-snapshot-')), [], 'no copy was left behind')
  }),
)


test(
  'a snapshot of a log this process has open: the handle keeps appending, tables are linked (copied across file systems), the copy goes where options.directory says, and a missing log is LOG_INVALID_ARGUMENT with nothing created',
  boundedTest(60_000, async (dir) => {
    const path = join(dir, 'log')
    let log = await EventLog.open(path)
    for (let index = 0; index < 40; index += 1) await log.appendAll(completeInvocation(`before-${index}`))
    await log.close()
    // Reopening writes the write-ahead log out as a table file.
    log = await EventLog.open(path)
    try {
      const sourceTables = await tables(path)
      assert.ok(sourceTables.length > 0, 'the log has a table file')
      await log.appendAll(completeInvocation('after'))
      const head = log.head()

      const snapshot = await EventLog.openSnapshot(path)
      const copy = logInternals(snapshot).location
      try {
        assert.equal(snapshot.head(), head, 'the snapshot holds every fact appended so far')
        const linked = await Promise.all(
          (await tables(copy)).filter((name) => sourceTables.includes(name)).map(async (name) => (await stat(join(copy, name))).nlink),
        )
        assert.ok(linked.length > 0 && linked.every((count) => count >= 2), `the copy's tables are links to the log's: ${linked}`)
        assert.is(await log.append(new EventMaker(invocationOf('later')).next(facts.opened())), head.highWater + 1, 'the handle appends on')
        assert.is(snapshot.head().highWater, head.highWater, 'a snapshot does not follow the log')
      } finally {
        await snapshot.close()
      }

      // A directory on another file system (tmpfs) gets copies instead of links.
      const shm = '/dev/shm'
      if ((await exists(shm)) && (await stat(shm)).dev !== (await stat(path)).dev) {
        const copied = await EventLog.openSnapshot(path, { directory: shm })
        const where = logInternals(copied).location
        try {
          assert.ok(where.startsWith(shm), where)
          assert.is((await copied.verify()).events, head.highWater + 1)
          const counts = await Promise.all((await tables(where)).map(async (name) => (await stat(join(where, name))).nlink))
          assert.ok(counts.length > 0 && counts.every((count) => count === 1), `copied, not linked: ${counts}`)
        } finally {
          await copied.close()
        }
        assert.not.ok(await exists(where))
      }
      // A directory the caller names, on the log's file system: links again.
      const beside = join(dir, 'copies')
      await mkdir(beside)
      const named = await EventLog.openSnapshot(path, { directory: beside })
      const there = logInternals(named).location
      try {
        assert.is(resolve(there, '..'), resolve(beside))
        const counts = await Promise.all(
          (await tables(there)).filter((name) => sourceTables.includes(name)).map(async (name) => (await stat(join(there, name))).nlink),
        )
        assert.ok(counts.length > 0 && counts.every((count) => count >= 2), `the log's tables are linked: ${counts}`)
      } finally {
        await named.close()
      }
      assert.equal(await readdir(beside), [], 'close removed the copy')
    } finally {
      await log.close()
    }

    const missing = join(dir, 'nothing-here')
    const refused = await refusal(EventLog.openSnapshot(missing))
    assert.is(refused.code, 'LOG_INVALID_ARGUMENT')
    assert.match(refused.message, /no log at/)
    assert.not.ok(await exists(missing), 'nothing was created')
    assert.is((await refusal(EventLog.openSnapshot(''))).code, 'LOG_INVALID_ARGUMENT')
    await writeFile(join(dir, 'a-file'), 'x')
    assert.is((await refusal(EventLog.openSnapshot(join(dir, 'a-file')))).code, 'LOG_INVALID_ARGUMENT')
  }),
)

/** A closed log with a few facts, copied to `source`, whose files the tests change during a copy. */
async function sourceLog(dir: string): Promise<{ source: string; highWater: number }> {
  const path = join(dir, 'log')
  const log = await EventLog.open(path)
  await log.appendAll(completeInvocation('a'))
  await log.appendAll(completeInvocation('b'))
  const { highWater } = log.head()
  await log.close()
  const source = join(dir, 'source')
  await cp(path, source, { recursive: true })
  return { source, highWater }
}

/** What a flush does to the manifest, as far as a copy can tell: CURRENT names another one. */
async function renameManifest(source: string): Promise<void> {
  const current = (await readFile(join(source, 'CURRENT'), 'utf8')).trim()
  const next = `MANIFEST-${String(Number(current.slice('MANIFEST-'.length)) + 1).padStart(6, '0')}`
  await copyFile(join(source, current), join(source, next))
  await writeFile(join(source, 'CURRENT.tmp'), `${next}\n`)
  await rename(join(source, 'CURRENT.tmp'), join(source, 'CURRENT'))
  await unlink(join(source, current))
}

async function opensWith(copy: string, highWater: number): Promise<void> {
  const log = await EventLog.open(copy)
  try {
    assert.is((await log.verify()).events, highWater)
  } finally {
    await log.close()
  }
}

test(
  'only the tables the manifest lists are linked: a table being written, numbered where the copy numbers its new files, is left alone',
  boundedTest(60_000, async (dir) => {
    const { source, highWater } = await sourceLog(dir)
    const numbers = (await readdir(source)).map((name) => Number.parseInt(name, 10)).filter((number) => Number.isSafeInteger(number))
    // A compaction's outputs, not in the manifest yet, take the next numbers: so does the copy's
    // LevelDB when it opens, writing its write-ahead log out as a table.
    const pending = Array.from({ length: 12 }, (_, index) => `${String(Math.max(...numbers) + 1 + index).padStart(6, '0')}.ldb`)
    for (const name of pending) await writeFile(join(source, name), `the writer's table ${name}`)
    const copy = join(dir, 'copy')
    await mkdir(copy)
    assert.is(await copySnapshot(source, copy), 1)
    for (const name of pending) assert.not.ok(await exists(join(copy, name)), `${name} is not in the copy`)
    await opensWith(copy, highWater)
    assert.ok((await tables(copy)).some((name) => pending.includes(name)), 'the copy made tables with those numbers')
    for (const name of pending) assert.is(await readFile(join(source, name), 'utf8'), `the writer's table ${name}`, `${name} is untouched`)
  }),
)

test(
  'a copy is taken again when the manifest changes or a listed file goes away during it, and gives up with LOG_IO when it never holds still',
  boundedTest(60_000, async (dir) => {
    const { source, highWater } = await sourceLog(dir)
    const copied: string[] = []

    const first = join(dir, 'first')
    await mkdir(first)
    const attempts = await copySnapshot(source, first, async (name, attempt) => {
      copied.push(`${attempt}:${name}`)
      if (attempt === 1 && name.startsWith('MANIFEST-')) await renameManifest(source)
    })
    assert.is(attempts, 2, 'the manifest changed during the first copy')
    assert.equal(copied.slice(0, 2), ['1:FACTSTATE-HEAD', `1:${LISTED}`], 'the head anchor is copied first, before the directory is listed')
    assert.ok(copied.filter((entry) => entry.startsWith('2:')).at(-1)?.endsWith('.log'), `the write-ahead log is copied last: ${copied}`)
    assert.equal((await readdir(first)).filter((name) => name.startsWith('MANIFEST-')), [(await readFile(join(source, 'CURRENT'), 'utf8')).trim()], 'only the manifest CURRENT names')
    await opensWith(first, highWater)

    // A file listed and deleted before it was reached (a write-ahead log a flush made obsolete).
    await writeFile(join(source, '000777.log'), 'an obsolete write-ahead log')
    const second = join(dir, 'second')
    await mkdir(second)
    const again = await copySnapshot(source, second, async (name, attempt) => {
      if (attempt === 1 && name === LISTED) await unlink(join(source, '000777.log'))
    })
    assert.is(again, 2)
    assert.not.ok(await exists(join(second, '000777.log')))
    await opensWith(second, highWater)

    let calls = 0
    const third = join(dir, 'third')
    await mkdir(third)
    const refused = await refusal(
      copySnapshot(source, third, async (name, attempt) => {
        if (name.startsWith('MANIFEST-')) {
          calls = attempt
          await renameManifest(source)
        }
      }),
    )
    assert.is(refused.code, 'LOG_IO')
    assert.match(refused.message, /kept changing/)
    assert.is(calls, SNAPSHOT_ATTEMPTS)
    assert.equal(await readdir(third), [], 'the last copy was cleared')
  }),
)

/** A log of a few facts in `dir`/name whose facts are in a table file, not only in its write-ahead log, closed. */
async function tabledLog(dir: string, name: string): Promise<{ path: string; highWater: number }> {
  const path = join(dir, name)
  let log = await EventLog.open(path)
  await log.appendAll(completeInvocation('a'))
  await log.close()
  // Reopening writes the write-ahead log out as a table file.
  log = await EventLog.open(path)
  await log.appendAll(completeInvocation('b'))
  const { highWater } = log.head()
  await log.close()
  assert.ok((await tables(path)).length > 0, 'the log has a table file')
  return { path, highWater }
}

const writeAheadLogs = async (dir: string): Promise<string[]> => (await readdir(dir)).filter((name) => name.endsWith('.log'))

test(
  'the head anchor is copied before the directory is listed: refreshed after the listing for facts in a write-ahead log the listing missed, it does not get into the copy',
  boundedTest(60_000, async (dir) => {
    const { source, highWater } = await sourceLog(dir)
    // What the writer does next, taken from a copy of it: LevelDB starts a new write-ahead log, more
    // facts go there, and the anchor is refreshed to count them; the manifest is not written yet.
    const later = join(dir, 'later')
    await cp(source, later, { recursive: true })
    const before = await writeAheadLogs(source)
    const log = await EventLog.open(later)
    await log.appendAll(completeInvocation('c'))
    const grown = log.head().highWater
    await log.close()
    const [added, ...others] = (await writeAheadLogs(later)).filter((name) => !before.includes(name))
    assert.ok(added !== undefined && others.length === 0, 'one new write-ahead log')

    const copy = join(dir, 'copy')
    await mkdir(copy)
    const attempts = await copySnapshot(source, copy, async (name, attempt) => {
      if (attempt !== 1 || name !== LISTED) return
      await copyFile(join(later, added), join(source, added))
      await copyFile(join(later, 'FACTSTATE-HEAD'), join(source, 'FACTSTATE-HEAD'))
    })
    assert.is(attempts, 1, 'the manifest did not change')
    assert.not.ok(await exists(join(copy, added)), 'the new write-ahead log came after the listing')
    await opensWith(copy, highWater)
    // The writer's directory as it stands now is a whole log of every fact.
    await opensWith(source, grown)
  }),
)

test(
  'a copy taken again keeps the tables it took that are still live, and removes one a compaction dropped meanwhile',
  boundedTest(60_000, async (dir) => {
    const { path: source, highWater } = await tabledLog(dir, 'source')
    const [table] = await tables(source)
    // The same log after a compaction: its tables replaced by new ones.
    const compacted = join(dir, 'compacted')
    await cp(source, compacted, { recursive: true })
    const raw = new ClassicLevel(compacted)
    await raw.open()
    await raw.compactRange('\u0000', '\uffff')
    await raw.close()
    assert.not.ok((await tables(compacted)).includes(table as string), 'the compaction replaced the table')

    // Changed once after the table was taken: taken again, the table is not taken twice.
    const copy = join(dir, 'copy')
    await mkdir(copy)
    const copied: string[] = []
    const again = await copySnapshot(source, copy, async (name, attempt) => {
      copied.push(`${attempt}:${name}`)
      if (attempt === 1 && name.startsWith('MANIFEST-')) await renameManifest(source)
    })
    assert.is(again, 2)
    assert.ok(copied.includes(`1:${table}`), `taken in the first copy: ${copied}`)
    assert.not.ok(copied.includes(`2:${table}`), `kept for the second: ${copied}`)
    assert.ok((await tables(copy)).includes(table as string))
    await opensWith(copy, highWater)

    // Compacted during the first copy: the second leaves the dropped table out.
    const second = join(dir, 'second')
    await mkdir(second)
    const attempts = await copySnapshot(source, second, async (name, attempt) => {
      if (attempt !== 1 || name !== table) return
      for (const file of await readdir(source)) await rm(join(source, file))
      await cp(compacted, source, { recursive: true })
    })
    assert.is(attempts, 2)
    assert.equal(await tables(second), await tables(compacted), 'only the tables the manifest lists now')
    await opensWith(second, highWater)
  }),
)

test(
  'a table kept from a copy is not kept when another log was put in the directory\'s place meanwhile, even under the same name',
  boundedTest(60_000, async (dir) => {
    const { path: first } = await tabledLog(dir, 'first')
    // Another log made the same way, with more facts: its tables have the same numbers, other contents.
    const other = join(dir, 'other')
    let log = await EventLog.open(other)
    for (let index = 0; index < 20; index += 1) await log.appendAll(completeInvocation(`other-${index}`))
    await log.close()
    log = await EventLog.open(other)
    await log.appendAll(completeInvocation('other-last'))
    const { highWater } = log.head()
    await log.close()
    const [table] = await tables(first)
    assert.ok((await tables(other)).includes(table as string), `both logs have ${table}`)

    const source = join(dir, 'source')
    await rename(first, source)
    const copy = join(dir, 'copy')
    await mkdir(copy)
    const attempts = await copySnapshot(source, copy, async (name, attempt) => {
      if (attempt !== 1 || name !== table) return
      await rename(source, join(dir, 'first-away'))
      await rename(other, source)
    })
    assert.is(attempts, 2)
    await opensWith(copy, highWater)
  }),
)

test(
  'a table the manifest lists and the directory lacks, with the manifest unchanged, is LOG_CORRUPT naming the file, not a log that kept changing',
  boundedTest(60_000, async (dir) => {
    const { path: source } = await tabledLog(dir, 'source')
    const [table] = await tables(source)
    await unlink(join(source, table as string))
    const copy = join(dir, 'copy')
    await mkdir(copy)
    let listed = 0
    const refused = await refusal(copySnapshot(source, copy, (name) => void (name === LISTED && (listed += 1))))
    assert.is(refused.code, 'LOG_CORRUPT')
    const number = (table as string).slice(0, -'.ldb'.length)
    assert.ok(refused.message.endsWith(`the table file ${number}.ldb the log's manifest lists is missing (nor is it there as ${number}.sst, its older name)`), refused.message)
    assert.is(refused.details?.file, `${number}.ldb`)
    assert.is(listed, 1, 'not taken again')

    // Gone between the listing and its link: the same.
    const { path: other } = await tabledLog(dir, 'other')
    const [otherTable] = await tables(other)
    const second = join(dir, 'second')
    await mkdir(second)
    const vanished = await refusal(
      copySnapshot(other, second, async (name) => {
        if (name === LISTED) await unlink(join(other, otherTable as string))
      }),
    )
    assert.is(vanished.code, 'LOG_CORRUPT')
    assert.equal(vanished.details, { file: otherTable })
    assert.is((await refusal(EventLog.openSnapshot(other))).code, 'LOG_CORRUPT', 'openSnapshot says the same')
  }),
)

test(
  'a snapshot that is only read keeps its caches bounded: runs() of a session with more runs than a cache holds',
  boundedTest(120_000, async (dir) => {
    const path = join(dir, 'log')
    const count = CACHE_LIMIT + 5_000
    const log = await EventLog.open(path)
    try {
      for (let start = 0; start < count; start += 1_000) {
        const events = Array.from({ length: Math.min(1_000, count - start) }, (_, index) => {
          const make = new EventMaker(invocationOf(`many-${start + index}`, 'session-many'))
          return make.many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })])
        })
        await log.appendAll(events.flat())
      }
      // Held open: what follows reads a snapshot, which absorbs nothing.
      const snapshot = await EventLog.openSnapshot(path)
      try {
        const runs = await snapshot.runs('session-many')
        assert.is(runs.length, count)
        assert.equal(runs.slice(0, 2).map((run) => run.runId), ['run-many-0', 'run-many-1'], 'in the order they opened')
        const sizes = logInternals(snapshot).cacheSizes()
        assert.ok(sizes.runs <= CACHE_LIMIT && sizes.invocations <= CACHE_LIMIT, `trimmed: ${JSON.stringify(sizes)}`)
        assert.equal(await snapshot.runs('session-many'), runs, 'read again from the indexes: the same')
      } finally {
        await snapshot.close()
      }
    } finally {
      await log.close()
    }
  }),
)

test(
  "a process that exits without its snapshot's close (process.exit(), an uncaught exception) removes the copy as it exits",
  boundedTest(60_000, async (root) => {
    const dir = join(root, 'app')
    const log = await EventLog.open(dir)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    for (const ending of ['exit', 'throw']) {
      const copies = join(root, `copies-${ending}`)
      await mkdir(copies)
      const child = startChild('child-snapshot.ts', [dir, copies, ending])
      try {
        const copy = (await child.waitForLine((line) => line.startsWith('ready '), 30_000)).slice('ready '.length)
        const status = await child.exited
        assert.is(status.code, ending === 'exit' ? 0 : 1, `${ending}: ${child.stderr()}`)
        assert.ok(copy.startsWith(copies), copy)
        assert.equal(await readdir(copies), [], `${ending}: no copy is left`)
      } finally {
        await child.stop('SIGKILL')
      }
    }
  }),
)

test(
  "the writer's open removes the copies of snapshots whose processes were killed before their close (in the temporary directory and the CLI's beside the log), and leaves those a live process holds or has only just opened",
  boundedTest(60_000, async (root) => {
    const logs = join(root, 'logs')
    const dir = join(logs, 'app')
    const temporary = join(root, 'tmp')
    const cli = join(logs, '.factstate-cli-killed')
    await mkdir(temporary)
    await mkdir(cli, { recursive: true })
    const log = await EventLog.open(dir)
    await log.appendAll(completeInvocation('a'))
    await log.close()
    const children: Child[] = []
    const copyIn = async (directory: string): Promise<string> => {
      const child = startChild('child-snapshot.ts', [dir, directory])
      children.push(child)
      return (await child.waitForLine((line) => line.startsWith('ready '), 30_000)).slice('ready '.length)
    }
    // Aged past the moment a copy being opened may have an unlocked LOCK: as a copy is by the next open, a minute or more on.
    const age = (copy: string): Promise<void> => utimes(join(copy, 'LOCK'), new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
    let live: EventLog | undefined
    try {
      const [inTemporary, besideLog, justOpened] = [await copyIn(temporary), await copyIn(cli), await copyIn(temporary)]
      await withTmpdir(temporary, async () => {
        live = await EventLog.openSnapshot(dir)
      })
      const held = logInternals(live!).location
      for (const child of children) await child.stop('SIGKILL')
      for (const copy of [inTemporary, besideLog, held]) await age(copy)
      assert.ok((await exists(inTemporary)) && (await exists(besideLog)), 'a killed process leaves its copies')
      // What a killed open leaves (or a sweep's refused open of a copy another sweep removed): an old LOCK, no CURRENT.
      const junk = join(temporary, 'factstate-snapshot-junk')
      await mkdir(junk)
      await writeFile(join(junk, 'LOCK'), '')
      await age(junk)
      // A user's own directory in the temporary directory, however it looks, is not the sweep's.
      const own = join(temporary, 'my-snapshot-dir')
      await mkdir(own)
      await writeFile(join(own, 'LOCK'), '')
      await age(own)
      forgetSweeps()
      let removed: string[] = []
      let again: string[] | undefined
      await withTmpdir(temporary, async () => {
        const reopened = await EventLog.open(dir)
        // Started by the open, not waited for by it.
        removed = await logInternals(reopened).swept()
        await reopened.close()
        // Swept at most every ten minutes: an open right after reads no directory.
        await mkdir(join(temporary, 'factstate-snapshot-later'))
        await writeFile(join(temporary, 'factstate-snapshot-later', 'LOCK'), '')
        await age(join(temporary, 'factstate-snapshot-later'))
        const second = await EventLog.open(dir)
        again = await logInternals(second).swept()
        await second.close()
      })
      assert.equal(again, [], 'a second open within ten minutes sweeps nothing')
      assert.not.ok(await exists(junk), 'a copy with an old LOCK and no CURRENT was removed')
      assert.ok(await exists(own), 'a directory without the prefix is left')
      assert.is(removed.length, 3, removed.join(', '))
      assert.not.ok(await exists(inTemporary), 'the copy in the temporary directory was removed')
      assert.not.ok(await exists(besideLog), "the copy in the CLI's directory beside the log was removed")
      assert.not.ok(await exists(cli), "and the CLI's directory it emptied")
      assert.ok(await exists(justOpened), 'a copy whose LOCK is a moment old is left: it may be one being opened')
      assert.ok(await exists(held), 'a copy a live process holds is left')
      // Held by this process: testing its lock with a LevelDB open would have dropped it (POSIX locks
      // go with the first descriptor of the file this process closes), leaving the copy to any other sweep.
      assert.is(await logHeldOpen(held), true, "this process's lock on its copy is still listed")
      assert.is((await live!.verify()).events, 8, 'and still reads')
    } finally {
      for (const child of children) await child.stop('SIGKILL')
      await live?.close()
    }
  }),
)

test(
  "EventLog.changeMark: the same while the writer (holding the log open) appends nothing, another after each append under either durability, so a follower takes a snapshot only when it may hold new facts; no log there is no_log",
  boundedTest(20_000, async (dir) => {
    for (const durability of ['sync', 'os'] as const) {
      const path = join(dir, durability)
      const log = await EventLog.open(path, { durability })
      try {
        let mark = await EventLog.changeMark(path)
        assert.is(await EventLog.changeMark(path), mark, `${durability}: nothing appended, the same`)
        const maker = new EventMaker(invocationOf(durability))
        for (const fact of [facts.opened(), facts.requested('step-1')]) {
          await log.append(maker.next(fact))
          const after = await EventLog.changeMark(path)
          assert.is.not(after, mark, `${durability}: an append changes it`)
          mark = after
          // The snapshot taken after the mark holds the fact: the one a follower reads then.
          const snapshot = await EventLog.openSnapshot(path, { directory: dir })
          try {
            assert.is(snapshot.head().highWater, log.head().highWater)
          } finally {
            await snapshot.close()
          }
          assert.is(await EventLog.changeMark(path), mark, `${durability}: a snapshot changes nothing`)
        }
        // Looked at without a lock: the writer keeps appending.
        await log.append(maker.next(facts.completed('step-1')))
      } finally {
        await log.close()
      }
    }
    const missing = join(dir, 'not-yet')
    const refused = await refusal(EventLog.changeMark(missing))
    assert.equal([refused.code, refused.details], ['LOG_INVALID_ARGUMENT', { reason: 'no_log', path: missing }])
    await mkdir(join(dir, 'empty'))
    assert.equal((await refusal(EventLog.changeMark(join(dir, 'empty')))).details, { reason: 'no_log', path: join(dir, 'empty') })
    assert.equal(await readdir(join(dir, 'empty')), [], 'nothing made')
  }),
)

test.run()
