/**
 * `EventLog.backup`: a consistent copy of a log another process keeps writing, verified in full and
 * left as a log of its own (a clean close, synced), which opens and takes appends; refusals leave
 * nothing at the destination and never touch what is there.
 */
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, logInternals } from '../store/event-log.js'
import type { BackupPoint } from '../store/backup-point.js'
import { decodeRecord, encodeRecord } from '../store/encoding.js'
import { keys } from '../store/keys.js'
import { rejectsWithCode } from './support/codes.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, startChild } from './support/log-fixtures.js'

const test = suite('store: backups')

const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  )

test(
  'a backup of a log another process keeps writing holds every fact it acknowledged before, byte for byte, verifies, and opens as a log of its own',
  boundedTest(60_000, async (dir) => {
    const source = join(dir, 'log')
    const seeded = await EventLog.open(source)
    await seeded.appendAll(completeInvocation('seed'))
    await seeded.close()
    const child = startChild('child-hold-log.ts', [source])
    try {
      await child.waitForLine((line) => line === 'ready')
      for (const name of ['a', 'b', 'c']) {
        child.send(`append ${name}`)
        await child.waitForLine((line) => line.startsWith('ack ') && child.lines.filter((l) => l.startsWith('ack ')).length === ['a', 'b', 'c'].indexOf(name) + 1)
      }
      const acknowledged = Number(child.lines.filter((line) => line.startsWith('ack ')).at(-1)?.slice(4))
      const backup = join(dir, 'backup')
      const result = await EventLog.backup(source, backup)
      assert.ok(result.events >= acknowledged, `${result.events} events, ${acknowledged} acknowledged`)
      assert.ok(await exists(join(backup, 'FACTSTATE-HEAD')), 'closed cleanly: its head is anchored')
      assert.equal((await readFile(join(backup, 'FACTSTATE-HEAD'), 'utf8')).split(' ').slice(2, 3), [String(result.events)])
      child.send('close')
      await child.waitForLine((line) => line === 'closed')
      const original = await EventLog.open(source)
      const copy = await EventLog.open(backup)
      try {
        // Nothing was appended after the backup: the two are the same log.
        assert.equal(copy.head(), original.head())
        assert.equal(copy.head(), { highWater: result.events, digest: result.digest })
        assert.equal((await copy.prefix(1_000, 1 << 24)).events, (await original.prefix(1_000, 1 << 24)).events, 'the same facts, in the same seqs')
        // Each a log of its own from here: appends to one do not reach the other.
        assert.is(await original.append(new EventMaker(invocationOf('after')).next(facts.opened())), result.events + 1)
        assert.is(await copy.append(new EventMaker(invocationOf('restored')).next(facts.opened())), result.events + 1)
        assert.is.not(copy.head().digest, original.head().digest)
      } finally {
        await copy.close()
        await original.close()
      }
    } finally {
      await child.stop()
    }
  }),
)

test(
  'a destination that exists, one without a parent, and a location with no log are LOG_INVALID_ARGUMENT; nothing is made or changed',
  boundedTest(30_000, async (dir) => {
    const source = join(dir, 'log')
    const log = await EventLog.open(source)
    await log.appendAll(completeInvocation('x'))
    await log.close()
    const taken = join(dir, 'taken')
    await mkdir(taken)
    await writeFile(join(taken, 'keep.txt'), 'mine')
    const existing = await rejectsWithCode(() => EventLog.backup(source, taken), 'LOG_INVALID_ARGUMENT', 'an existing destination')
    assert.match(existing.message, /already exists: give a new path/)
    assert.equal(existing.details, { destination: 'exists' })
    assert.equal(await readdir(taken), ['keep.txt'])
    const orphan = await rejectsWithCode(() => EventLog.backup(source, join(dir, 'missing', 'backup')), 'LOG_INVALID_ARGUMENT', 'no parent')
    assert.match(orphan.message, /has no parent directory/)
    assert.equal(orphan.details, { destination: 'no_parent' })
    assert.not.ok(await exists(join(dir, 'missing')))
    const inside = await rejectsWithCode(() => EventLog.backup(source, join(source, 'backup')), 'LOG_INVALID_ARGUMENT', 'inside the log')
    assert.match(inside.message, /is inside the log's own directory/)
    assert.equal(inside.details, { destination: 'inside_log' })
    assert.not.ok(await exists(join(source, 'backup')))
    await rejectsWithCode(() => EventLog.backup(join(dir, 'nothing'), join(dir, 'b')), 'LOG_INVALID_ARGUMENT', 'no log')
    assert.not.ok(await exists(join(dir, 'nothing')), 'no log was created at the location')
    assert.not.ok(await exists(join(dir, 'b')))
  }),
)

test(
  'a damaged log is not backed up: LOG_CORRUPT from the checks, and nothing is left at the destination',
  boundedTest(30_000, async (dir) => {
    const source = join(dir, 'log')
    const log = await EventLog.open(source)
    await log.appendAll(completeInvocation('damaged'))
    await log.close()
    // An index record that disagrees with the facts (the session's record rewritten).
    const db = new ClassicLevel<string, Uint8Array>(source, { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    await db.put(keys.session(invocationOf('damaged').sessionId), encodeRecord({ active: ['someone'], paused: [], unknown: [] }))
    await db.close()
    const backup = join(dir, 'backup')
    await rejectsWithCode(() => EventLog.backup(source, backup), 'LOG_CORRUPT', 'a damaged log')
    assert.not.ok(await exists(backup))
    assert.equal(await readdir(dir), ['log'], 'no working copy is left beside it either')
  }),
)

test(
  'the destination appears only once the backup is whole, verified and synced: a process killed part-way leaves nothing there that opens as a log with facts missing',
  boundedTest(30_000, async (dir) => {
    const source = join(dir, 'log')
    const log = await EventLog.open(source)
    for (let index = 0; index < 200; index += 1) await log.appendAll(completeInvocation(`many-${index}`))
    const backup = join(dir, 'backup')
    let finished = false
    const backingUp = EventLog.backup(source, backup).finally(() => {
      finished = true
    })
    // What a process killed at each of these moments would have left at the destination.
    const seen: string[][] = []
    while (!finished) {
      const listed = await readdir(backup).catch(() => undefined)
      if (listed !== undefined) seen.push(listed.sort())
      await new Promise((resolve) => setImmediate(resolve))
    }
    const result = await backingUp
    await log.close()
    const final = (await readdir(backup)).sort()
    for (const listed of seen) assert.equal(listed, final, 'never a partial copy at the destination')
    assert.equal((await readdir(dir)).sort(), ['backup', 'log'], 'no working copy is left beside it')
    const copy = await EventLog.open(backup)
    try {
      assert.equal(copy.head(), { highWater: result.events, digest: result.digest })
    } finally {
      await copy.close()
    }
  }),
)

test(
  'a backup records the point it was taken at (restoredFrom), which verify checks against the log; a backup of it records its own; a damaged point is LOG_CORRUPT',
  boundedTest(30_000, async (dir) => {
    const source = join(dir, 'log')
    const log = await EventLog.open(source)
    try {
      await log.appendAll(completeInvocation('first'))
      assert.is(log.restoredFrom(), undefined, 'a log that was never a backup')
      const before = Date.now()
      const first = await EventLog.backup(source, join(dir, 'first'))
      await log.appendAll(completeInvocation('second'))
      const copy = await EventLog.open(join(dir, 'first'))
      try {
        const point = copy.restoredFrom()
        assert.equal(point, { highWater: first.events, digest: first.digest, takenAt: first.takenAt }, 'the point the backup resolved with')
        assert.ok(point !== undefined && point.takenAt >= before && point.takenAt <= Date.now())
        // Put back in use: it goes on from the point, and stays a backup of it.
        await copy.appendAll(completeInvocation('third'))
        assert.equal(await copy.verify(), { events: copy.head().highWater, digest: copy.head().digest })
        assert.equal(copy.restoredFrom(), point)
      } finally {
        await copy.close()
      }
      const second = await EventLog.backup(join(dir, 'first'), join(dir, 'second'))
      const again = await EventLog.open(join(dir, 'second'))
      try {
        assert.equal(again.restoredFrom()?.highWater, second.events, 'a backup of a restored log records its own point')
        assert.ok(second.events > first.events)
      } finally {
        await again.close()
      }
    } finally {
      await log.close()
    }
    // The point's digest must be the log's at its high-water; a point that is not a record refuses the open.
    const damage = async (name: string, value: Uint8Array) => {
      const db = new ClassicLevel<string, Uint8Array>(join(dir, name), { keyEncoding: 'utf8', valueEncoding: 'view' })
      await db.open()
      try {
        await db.put(keys.backup, value)
      } finally {
        await db.close()
      }
    }
    await damage('first', encodeRecord({ highWater: 1, digest: `sha256:${'0'.repeat(64)}`, takenAt: 1 }))
    const wrong = await EventLog.open(join(dir, 'first'))
    try {
      const error = await rejectsWithCode(() => wrong.verify(), 'LOG_CORRUPT', 'a point off the chain')
      assert.equal(error.details, { index: 'marker', key: 'h!backup' })
      assert.match(error.message, /digest is not the log's digest at its high-water 1/)
    } finally {
      await wrong.close()
    }
    await damage('second', encodeRecord({ highWater: 1e9, digest: `sha256:${'0'.repeat(64)}`, takenAt: 1 }))
    const beyond = await rejectsWithCode(() => EventLog.open(join(dir, 'second')), 'LOG_CORRUPT', 'a point beyond the log')
    assert.match(beyond.message, /the backup point record h!backup is damaged: its highWater 1000000000 lies beyond the log's \d+/)
    await damage('second', encodeRecord(['not', 'a', 'point']))
    await rejectsWithCode(() => EventLog.open(join(dir, 'second')), 'LOG_CORRUPT', 'a point that is not a record')
  }),
)

test(
  'a backup of a restored log keeps the earlier point for the sessions that have not run since it: their effects are unknown from the first backup on, not the second',
  boundedTest(30_000, async (dir) => {
    const source = join(dir, 'log')
    const log = await EventLog.open(source)
    try {
      await log.appendAll(completeInvocation('a1', 'A'))
      await log.appendAll(completeInvocation('b1', 'B'))
    } finally {
      await log.close()
    }
    await EventLog.backup(source, join(dir, 'first'))
    // Put back in use: A runs (acknowledged), B does not; then the nightly backup of it.
    const restored = await EventLog.open(join(dir, 'first'))
    let first: BackupPoint | undefined
    try {
      first = restored.restoredFrom()
      await restored.appendAll(completeInvocation('a2', 'A'))
      assert.equal(await logInternals(restored).restoredSince('B'), first)
      assert.is(await logInternals(restored).restoredSince('A'), undefined)
    } finally {
      await restored.close()
    }
    await EventLog.backup(join(dir, 'first'), join(dir, 'second'))
    const again = await EventLog.open(join(dir, 'second'))
    try {
      const second = again.restoredFrom()
      assert.ok(first !== undefined && second !== undefined && second.highWater > first.highWater)
      assert.equal(await logInternals(again).restoredSince('A'), second, 'A ran after the first backup: unknown since the second')
      assert.equal(await logInternals(again).restoredSince('B'), first, 'B has not run since the first backup: unknown since then')
      assert.equal(
        (await again.pendingSessions()).map((session) => [session.sessionId, session.restored]),
        [
          ['A', second],
          ['B', first],
        ],
      )
      assert.equal(await again.verify(), { events: again.head().highWater, digest: again.head().digest })
    } finally {
      await again.close()
    }
    // Each point is checked: an earlier one off the chain is LOG_CORRUPT too.
    const db = new ClassicLevel<string, Uint8Array>(join(dir, 'second'), { keyEncoding: 'utf8', valueEncoding: 'view' })
    await db.open()
    try {
      const stored = decodeRecord<{ earlier: BackupPoint[] }>((await db.get(keys.backup)) as Uint8Array, 'backup')
      assert.is(stored.earlier.length, 1)
      await db.put(keys.backup, encodeRecord({ ...stored, earlier: [{ ...stored.earlier[0], digest: `sha256:${'0'.repeat(64)}` }] }))
    } finally {
      await db.close()
    }
    const wrong = await EventLog.open(join(dir, 'second'))
    try {
      const error = await rejectsWithCode(() => wrong.verify(), 'LOG_CORRUPT', 'an earlier point off the chain')
      assert.equal(error.details, { index: 'marker', key: 'h!backup' })
    } finally {
      await wrong.close()
    }
  }),
)

test.run()
