/**
 * Corruption of a closed log's stored files: a flipped byte in a value of a LevelDB table (after
 * the memtable was flushed by writing more than 4 MiB) and in the write-ahead log, a truncated
 * write-ahead log, a deleted or cut table file, a deleted CURRENT. `open` or `verify` reports
 * `LOG_CORRUPT` — with `details.seq` where one is known, with LevelDB's error as `cause` where
 * LevelDB noticed — and nothing continues on a log that lost facts: a second open refuses too.
 */
import { cp, mkdir, mkdtemp, readdir, rm, stat, truncate, unlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { ClassicLevel } from 'classic-level'
import { EventLog, type FactstateError, isFactstateError } from '../index.js'
import { encodeRecord } from '../store/encoding.js'
import { keys } from '../store/keys.js'
import { IndexAudit } from '../store/index-audit.js'
import { EventMaker, facts, invocationOf } from './support/log-fixtures.js'
import { type BuiltLog, buildLog, filesEndingWith, findBytes, flipByte } from './support/faults-files.js'
import { bounded, withTimeout } from './support/temp.js'
import { rejectsWithCode } from './support/codes.js'

const test = suite('faults: corruption')

type Finding = { at: 'open' | 'verify'; error: FactstateError } | { at: 'none'; events: number }

/** Opens and verifies `dir`; reports where the damage was found. */
async function inspect(dir: string): Promise<Finding> {
  let log: EventLog
  try {
    log = await EventLog.open(dir)
  } catch (error) {
    if (!isFactstateError(error)) throw error
    return { at: 'open', error }
  }
  try {
    return { at: 'none', events: (await log.verify()).events }
  } catch (error) {
    if (!isFactstateError(error)) throw error
    return { at: 'verify', error }
  } finally {
    await log.close()
  }
}

/** Asserts LOG_CORRUPT, found at `where`, and returns the error. */
async function corrupt(dir: string, where: 'open' | 'verify' | 'either', what: string): Promise<FactstateError> {
  const finding = await inspect(dir)
  if (finding.at === 'none') return assert.unreachable(`${what}: the damage went unnoticed (${finding.events} events verified)`) as never
  assert.is(finding.error.code, 'LOG_CORRUPT', `${what}: ${finding.error.message}`)
  if (where !== 'either') assert.is(finding.at, where, `${what} is found by ${where}`)
  return finding.error
}

/** LevelDB's error code somewhere in the cause chain of `error`. */
function levelCause(error: unknown): string | undefined {
  for (let cause = (error as { cause?: unknown }).cause; cause; cause = (cause as { cause?: unknown }).cause) {
    const code = (cause as { code?: unknown }).code
    if (code === 'LEVEL_CORRUPTION') return code
  }
  return undefined
}

async function writeLogFile(dir: string): Promise<string> {
  const logs = await filesEndingWith(dir, '.log')
  assert.is(logs.length, 1, 'one write-ahead log')
  return join(dir, logs[0] as string)
}

/** Pristine closed logs, built once and copied into each test (opening one would change it). */
const templates: { dir?: string; table?: BuiltLog; wal?: BuiltLog } = {}

test.before(() => withTimeout(buildTemplates(), 60_000, 'building the template logs'))

async function buildTemplates(): Promise<void> {
  templates.dir = await mkdtemp(join(tmpdir(), 'factstate-corruption-'))
  // More than 4 MiB written: LevelDB flushed its memtable to tables (no reopen needed).
  templates.table = await buildLog(join(templates.dir, 'table'), { invocations: 1_400, contentBytes: 4_096, perBatch: 50 })
  assert.ok((await filesEndingWith(join(templates.dir, 'table'), '.ldb')).length >= 1, 'the memtable was flushed to a table')
  // Small batches, no flush, no reopen: everything is in the write-ahead log.
  templates.wal = await buildLog(join(templates.dir, 'wal'), { invocations: 80, contentBytes: 1_024 })
  assert.equal(await filesEndingWith(join(templates.dir, 'wal'), '.ldb'), [], 'nothing was flushed')
}

test.after(async () => {
  if (templates.dir) await rm(templates.dir, { recursive: true, force: true })
})

/** A copy of a template log in `dir`. */
async function copyOf(kind: 'table' | 'wal', dir: string): Promise<BuiltLog> {
  await cp(join(templates.dir as string, kind), dir, { recursive: true })
  return templates[kind] as BuiltLog
}
const tableLog = (dir: string) => copyOf('table', dir)
const walLog = (dir: string) => copyOf('wal', dir)

test(
  'a flipped byte in a value of a table file (after a memtable flush) is LOG_CORRUPT from verify, naming its seq',
  bounded(60_000, async (dir) => {
    const { markers } = await tableLog(dir)
    const target = markers[20] as BuiltLog['markers'][number]
    const found = await findBytes(dir, target.marker, '.ldb')
    assert.is(found.length, 1, 'the event is in one table')
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    const error = await corrupt(dir, 'verify', 'an old event flipped in a table')
    assert.is(error.details?.seq, target.seq)
    const again = await corrupt(dir, 'verify', 'the second look')
    assert.is(again.details?.seq, target.seq)
  }),
)

test(
  'a flipped byte in one of the newest events of a table file is LOG_CORRUPT already on open, naming that event',
  bounded(60_000, async (dir) => {
    const { markers, highWater } = await tableLog(dir)
    // Reopening turns the write-ahead log into a table too: now every event is in a table.
    const log = await EventLog.open(dir)
    await log.close()
    // Not the newest: open names the fact that was changed, not the head.
    const target = markers.at(-3) as BuiltLog['markers'][number]
    assert.ok(target.seq < highWater)
    const found = await findBytes(dir, target.marker, '.ldb')
    assert.is(found.length, 1)
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    const error = await corrupt(dir, 'open', 'one of the newest events flipped in a table')
    assert.is(error.details?.seq, target.seq, error.message)
  }),
)

test(
  'a flipped byte in a batch in the middle of the write-ahead log: LevelDB drops it silently, open finds the gap',
  bounded(30_000, async (dir) => {
    const { markers, highWater } = await walLog(dir)
    const target = markers[10] as BuiltLog['markers'][number]
    const found = await findBytes(dir, target.marker, '.log')
    assert.is(found.length, 1, 'the batch is in the write-ahead log')
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    const error = await corrupt(dir, 'open', 'a batch dropped from the middle')
    const seq = error.details?.seq as number
    assert.ok(seq >= target.seq && seq < highWater, `the missing seq ${seq} lies in the gap after ${target.seq}`)
    // LevelDB has rewritten its write-ahead log by now; the gap is still refused.
    await corrupt(dir, 'open', 'the second open')
  }),
)

test(
  'a flipped byte in the last batch of the write-ahead log: the lost batch is LOG_CORRUPT on open, naming the first lost seq',
  bounded(30_000, async (dir) => {
    const { markers, highWater } = await walLog(dir)
    const target = markers.at(-1) as BuiltLog['markers'][number]
    const found = await findBytes(dir, target.marker, '.log')
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    const error = await corrupt(dir, 'open', 'the last batch dropped')
    assert.is(error.details?.seq, target.seq)
    assert.is(target.seq, highWater - 1)
    await corrupt(dir, 'open', 'the second open')
  }),
)

test(
  'a flipped byte in the last batch of the write-ahead log of a crashed log (its head anchor not yet refreshed): LevelDB drops it silently, the open is refused, and so is every later one',
  bounded(30_000, async (dir) => {
    const { markers, highWater } = await walLog(dir)
    // A crash within a second of the last commits: the anchor does not count them (here: none at all).
    await unlink(join(dir, 'FACTSTATE-HEAD'))
    const target = markers.at(-1) as BuiltLog['markers'][number]
    const found = await findBytes(dir, target.marker, '.log')
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    const error = await corrupt(dir, 'open', 'the last batch dropped, with no anchor to count it')
    assert.match(error.message, /LevelDB dropped \d+ bytes of the write-ahead log \d{6}\.log as it opened the log \(Corruption: checksum mismatch\)/)
    assert.match(String(error.details?.file), /^\d{6}\.log$/)
    // LevelDB has written what it recovered to a table and deleted that write-ahead log: the log is still refused.
    assert.equal(await filesEndingWith(dir, '.log').then((logs) => logs.includes(String(error.details?.file))), false, 'the damaged write-ahead log is gone')
    const again = await corrupt(dir, 'open', 'the second open')
    assert.is(again.message, error.message)
    // A snapshot still reads what is left, for whoever looks into it; its verify does not call it whole.
    const snapshot = await EventLog.openSnapshot(dir)
    try {
      assert.ok(snapshot.head().highWater < highWater, `${snapshot.head().highWater} of ${highWater} facts left`)
      const refused = await rejectsWithCode(() => snapshot.verify(), 'LOG_CORRUPT', "a snapshot's verify of the marked log")
      assert.is(refused.message, error.message, 'the loss the marker records')
    } finally {
      await snapshot.close()
    }
    // A backup of it would carry the damage on: refused, and nothing is made.
    let made: boolean
    try {
      await rejectsWithCode(() => EventLog.backup(dir, `${dir}-backup`), 'LOG_CORRUPT', 'a backup of the damaged log')
    } finally {
      made = await stat(`${dir}-backup`).then(() => true, () => false)
      // Outside the test's directory: removed here, whatever the check says.
      await rm(`${dir}-backup`, { recursive: true, force: true })
    }
    assert.is(made, false, 'no backup was made')
    // Going on without the lost facts is a decision: the marker removed, the log opens as it is.
    await unlink(join(dir, 'FACTSTATE-DAMAGED'))
    const finding = await inspect(dir)
    assert.equal(finding.at, 'none')
    assert.ok(finding.at === 'none' && finding.events < highWater)
  }),
)

test(
  'a damaged write-ahead log is refused by a backup taken before any open in place, and a damage marker that cannot be read or was cut short refuses the open too',
  bounded(30_000, async (dir) => {
    const { markers } = await walLog(dir)
    await unlink(join(dir, 'FACTSTATE-HEAD'))
    const target = markers.at(-1) as BuiltLog['markers'][number]
    const found = await findBytes(dir, target.marker, '.log')
    await flipByte(found[0]?.file as string, (found[0]?.offset as number) + 40)
    // The backup's copy is opened by LevelDB, which reports the damage there too: no backup is made.
    let refused: Error | undefined
    let made: boolean
    try {
      refused = await rejectsWithCode(() => EventLog.backup(dir, `${dir}-backup`), 'LOG_CORRUPT', 'a backup of the damaged log')
    } finally {
      made = await stat(`${dir}-backup`).then(() => true, () => false)
      // Outside the test's directory: removed here, whatever the check says.
      await rm(`${dir}-backup`, { recursive: true, force: true })
    }
    assert.match(String(refused?.message), /as it opened the backup's copy \(Corruption: checksum mismatch\)/)
    assert.is(made, false, 'no backup was made')
    // A snapshot (what verify, log, pending and inspect read) taken before any open in place: it reads
    // what LevelDB kept of its copy, and its verify says the log lost facts rather than "ok".
    const snapshot = await EventLog.openSnapshot(dir)
    try {
      const lost = await rejectsWithCode(() => snapshot.verify(), 'LOG_CORRUPT', "a snapshot's verify of the damaged log")
      assert.match(lost.message, /as it opened the snapshot's copy \(Corruption: checksum mismatch\)/)
      assert.match(String((lost as FactstateError).details?.file), /^\d{6}\.log$/)
    } finally {
      await snapshot.close()
    }
    await corrupt(dir, 'open', 'the log itself')
    // A marker cut short by a crash while it was written, or one that cannot be read: still refused.
    await writeFile(join(dir, 'FACTSTATE-DAMAGED'), '')
    const empty = await corrupt(dir, 'open', 'an empty marker')
    assert.match(empty.message, /: an earlier open found the write-ahead log damaged/)
    await unlink(join(dir, 'FACTSTATE-DAMAGED'))
    await mkdir(join(dir, 'FACTSTATE-DAMAGED'))
    const unreadable = await corrupt(dir, 'open', 'a marker that is a directory')
    assert.match(unreadable.message, /FACTSTATE-DAMAGED, left by an open that found the write-ahead log damaged, cannot be read/)
  }),
)

for (const [name, cut] of [
  ['by 1 byte (a torn last record)', (size: number) => size - 1],
  ['by half', (size: number) => Math.floor(size / 2)],
  ['to nothing', () => 0],
] as const) {
  test(
    `a write-ahead log truncated ${name} is LOG_CORRUPT on open, naming the first lost seq`,
    bounded(30_000, async (dir) => {
      const { highWater } = await walLog(dir)
      const file = await writeLogFile(dir)
      const { size } = await stat(file)
      await truncate(file, cut(size))
      const error = await corrupt(dir, 'open', `truncated ${name}`)
      const seq = error.details?.seq as number
      assert.ok(seq >= 1 && seq <= highWater, `seq ${seq}`)
      if (cut(size) === 0) assert.is(seq, 1, 'every event was in the write-ahead log')
      await corrupt(dir, 'open', 'the second open')
    }),
  )
}

test(
  'a deleted table file is LOG_CORRUPT on open, with LevelDB’s corruption error as cause',
  bounded(60_000, async (dir) => {
    await tableLog(dir)
    const tables = await filesEndingWith(dir, '.ldb')
    await unlink(join(dir, tables[0] as string))
    const error = await corrupt(dir, 'open', 'a deleted table')
    assert.is(levelCause(error), 'LEVEL_CORRUPTION', 'LevelDB noticed the missing file')
    assert.is((error.cause as { code?: string } | undefined)?.code, 'LEVEL_CORRUPTION', 'LevelDB’s own error is the cause, as the README says')
    assert.equal(error.details, { file: tables[0] }, 'the missing file is named')
    const again = await corrupt(dir, 'open', 'the second open')
    assert.is(levelCause(again), 'LEVEL_CORRUPTION')
  }),
)

test(
  'a table file cut short (by half, by its last 10 bytes) is LOG_CORRUPT naming the file, not a disk error',
  bounded(90_000, async (dir) => {
    await tableLog(join(dir, 'template'))
    const tables = await filesEndingWith(join(dir, 'template'), '.ldb')
    for (const table of tables) {
      for (const [what, cut] of [
        ['by half', (size: number) => Math.floor(size / 2)],
        ['by 10 bytes', (size: number) => size - 10],
      ] as const) {
        const copy = join(dir, `${table}-${what.replaceAll(' ', '-')}`)
        await cp(join(dir, 'template'), copy, { recursive: true })
        const file = join(copy, table)
        await truncate(file, cut((await stat(file)).size))
        const error = await corrupt(copy, 'either', `${table} cut ${what}`)
        assert.is(error.details?.file, table, `${table} cut ${what}: the file is named`)
        assert.match(error.message, new RegExp(`table file ${table.replace('.', '\\.')} is shorter`))
        assert.is((error.cause as { code?: string } | undefined)?.code, 'LEVEL_IO_ERROR', 'LevelDB’s own error is the cause')
        await rm(copy, { recursive: true, force: true })
      }
    }
  }),
)

test(
  'a deleted CURRENT makes LevelDB start over from its write-ahead log alone, orphaning the tables; open refuses the log that is left',
  bounded(60_000, async (dir) => {
    const { highWater } = await tableLog(dir)
    await unlink(join(dir, 'CURRENT'))
    const error = await corrupt(dir, 'open', 'a deleted CURRENT')
    const seq = error.details?.seq as number
    assert.ok(seq >= 1 && seq <= highWater, `seq ${seq}`)
    await corrupt(dir, 'open', 'the second open')
  }),
)

test(
  'a CURRENT that names no manifest (overwritten, cut short, its manifest deleted) is LOG_CORRUPT naming the file, from an open (which leaves the directory as it was) and from a snapshot',
  bounded(60_000, async (dir) => {
    await tableLog(join(dir, 'template'))
    const manifest = (await readdir(join(dir, 'template'))).find((name) => name.startsWith('MANIFEST-')) as string
    for (const [what, damage] of [
      ['overwritten', (copy: string) => writeFile(join(copy, 'CURRENT'), 'junk\n')],
      ['cut short', (copy: string) => writeFile(join(copy, 'CURRENT'), manifest.slice(0, 12))],
      ['emptied', (copy: string) => writeFile(join(copy, 'CURRENT'), '')],
      ['naming a deleted manifest', (copy: string) => unlink(join(copy, manifest))],
    ] as const) {
      const copy = join(dir, what.replaceAll(' ', '-'))
      await cp(join(dir, 'template'), copy, { recursive: true })
      await damage(copy)
      const before = (await readdir(copy)).sort()
      const error = await corrupt(copy, 'open', `a CURRENT ${what}`)
      assert.is(error.details?.file, 'CURRENT', `${what}: the file is named`)
      assert.equal((await readdir(copy)).sort(), before, `${what}: nothing was added to or removed from the directory`)
      // A snapshot (what `inspect` reads, and `log`/`verify` when another process has the log) says the same.
      const viaSnapshot = await EventLog.openSnapshot(copy).then(
        async (snapshot) => {
          await snapshot.close()
          return undefined
        },
        (error: FactstateError) => error,
      )
      assert.equal([viaSnapshot?.code, viaSnapshot?.details?.file], ['LOG_CORRUPT', 'CURRENT'], `${what}, through a snapshot`)
    }
  }),
)

test(
  'a head record that decodes to something else than a head (null, a number, a string, a short chain) is LOG_CORRUPT on open',
  bounded(30_000, async (dir) => {
    const { highWater } = await walLog(join(dir, 'template'))
    const shapes: [string, unknown][] = [
      ['null', null],
      ['a number', 5],
      ['a string', 'x'],
      ['a short chain', { highWater, chain: new Uint8Array(31) }],
      ['a negative high-water', { highWater: -1, chain: new Uint8Array(32) }],
    ]
    for (const [what, head] of shapes) {
      const copy = join(dir, what.replaceAll(' ', '-'))
      await cp(join(dir, 'template'), copy, { recursive: true })
      const db = new ClassicLevel<string, Uint8Array>(copy, { keyEncoding: 'utf8', valueEncoding: 'view' })
      await db.open()
      await db.put(keys.head, encodeRecord(head))
      await db.close()
      const error = await corrupt(copy, 'open', `a head record that is ${what}`)
      assert.match(error.message, /head record/, what)
    }
  }),
)

test(
  'an undamaged log of the same shapes opens and verifies (the cases above fail because of the damage)',
  bounded(60_000, async (dir) => {
    const wal = await walLog(join(dir, 'wal'))
    const table = await tableLog(join(dir, 'table'))
    assert.equal(await inspect(join(dir, 'wal')), { at: 'none', events: wal.highWater })
    assert.equal(await inspect(join(dir, 'table')), { at: 'none', events: table.highWater })
  }),
)

test('a fact that breaks its invocation\'s rules is LOG_CORRUPT, its message saying one code', async () => {
  const reader = { keys: async function* () {}, getMany: async () => [] } as unknown as Parameters<typeof IndexAudit.start>[0]
  const audit = await IndexAudit.start(reader, 1)
  let caught: FactstateError | undefined
  try {
    audit.observe(1, new EventMaker(invocationOf('never-opened')).next(facts.ended()))
  } catch (error) {
    caught = error as FactstateError
  }
  assert.is(caught?.code, 'LOG_CORRUPT')
  assert.is(caught?.details?.seq, 1)
  assert.ok(caught?.message.startsWith('LOG_CORRUPT: event 1 breaks the rules of its invocation: invocation.ended for inv-never-opened refused'), caught?.message)
  assert.not.match(caught?.message.slice('LOG_CORRUPT: '.length) ?? '', /\b[A-Z]+(?:_[A-Z]+)+: /, 'one code in the message')
})

test.run()
