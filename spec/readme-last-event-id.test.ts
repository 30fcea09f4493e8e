/**
 * The README's check of an SSE client's `Last-Event-ID` ("Watching a run"), run as it is written
 * against a real log: the id the page was sent (`${seq}:${digest}`, the digest itself `sha256:…`)
 * resumes after its seq; an id whose digest is another log's, a seq past the end, or an id that is
 * not one (no colon, a seq that is not a whole number, none at all) starts the page over from 1. A
 * piece's id (`${requestSeq}:${digest}.${index}`, the same scheme) resumes the facts after its
 * requestSeq and names that attempt, whose text the page is sent again, when the digest checks.
 */
import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join, relative, sep } from 'node:path'
import { promisify } from 'node:util'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { REPO_ROOT, boundedTest, completeInvocation, refusal } from './support/log-fixtures.js'
import { readmeBlock } from './support/readme.js'

/** What the README block gives: the seq to read from, and for a piece's id the attempt being written (its requestSeq). */
interface Resumed {
  from: number
  writing: number | undefined
}

/** The README block that reads `last-event-id`, as a function of the request and the log giving `from` and `writing`. */
async function checkOfLastEventId(): Promise<(request: { headers: Record<string, string | undefined> }, log: EventLog) => Promise<Resumed>> {
  const block = await readmeBlock("lastId.indexOf(':')", 'one block checks Last-Event-ID')
  const AsyncFunction = (async () => undefined).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<Resumed>
  // The block has no types: it runs as JavaScript.
  const run = new AsyncFunction('request', 'log', `${block}\nreturn { from, writing }`)
  return (request, log) => run(request, log)
}

test(
  "the README's Last-Event-ID check resumes the page after the seq it names when the digest is the log's, and starts it over otherwise, never throwing",
  boundedTest(10_000, async (root) => {
    const check = await checkOfLastEventId()
    const log = await EventLog.open(join(root, 'log'))
    try {
      await log.appendAll(completeInvocation('first'))
      const { highWater } = log.head()
      const seq = highWater - 1
      const digest = await log.digestAt(seq)
      const from = async (id: string | undefined) => (await check({ headers: id === undefined ? {} : { 'last-event-id': id } }, log)).from
      assert.is(await from(`${seq}:${digest}`), seq + 1, 'the id the page was sent')
      assert.is(await from(`${highWater}:${log.head().digest}`), highWater + 1, 'the last fact')
      for (const id of [undefined, '', `${seq}:sha256:${'0'.repeat(64)}`, `${highWater + 5}:${digest}`, `${seq}`, `1.5:${digest}`, `-1:${digest}`, `x:${digest}`, `:${digest}`]) {
        assert.is(await from(id), 1, String(id))
      }
      assert.is((await check({ headers: { 'last-event-id': `${seq}:${digest}` } }, log)).writing, undefined, "a fact's id is no piece's")
    } finally {
      await log.close()
    }
  }),
)

test(
  "the README's Last-Event-ID check takes a piece's id (`${requestSeq}:${digest}.${index}`): the facts after its requestSeq, and the attempt to send the text of, when the digest at requestSeq is the log's; else the page starts over",
  boundedTest(10_000, async (root) => {
    const check = await checkOfLastEventId()
    const log = await EventLog.open(join(root, 'log'))
    try {
      await log.appendAll(completeInvocation('first'))
      const { highWater } = log.head()
      const requestSeq = highWater - 2
      const digest = await log.digestAt(requestSeq)
      assert.ok(digest.startsWith('sha256:') && !digest.includes('.'), 'a digest holds no dot')
      const resumed = (id: string) => check({ headers: { 'last-event-id': id } }, log)
      // A page that got piece 3 of the attempt whose model.requested is at requestSeq.
      assert.equal(await resumed(`${requestSeq}:${digest}.3`), { from: requestSeq + 1, writing: requestSeq }, 'a text piece')
      assert.equal(await resumed(`${requestSeq}:${digest}.0`), { from: requestSeq + 1, writing: requestSeq }, 'the first piece')
      assert.equal(await resumed(`${requestSeq}:${digest}.c.2`), { from: requestSeq + 1, writing: requestSeq }, "a tool call's piece")
      const over = { from: 1, writing: undefined }
      assert.equal(await resumed(`${requestSeq}:sha256:${'0'.repeat(64)}.3`), over, "a digest that is not the log's at requestSeq")
      assert.equal(await resumed(`${requestSeq}:${await log.digestAt(requestSeq - 1)}.3`), over, 'the digest of the fact before')
      assert.equal(await resumed(`${highWater + 1}:${digest}.3`), over, 'a requestSeq past the end')
      assert.equal(await resumed(`${highWater + 1}:${log.head().digest}.0`), over, 'a requestSeq past the end, with the last digest')
      // The old scheme (`${requestSeq}.${index}`, no digest), and pieces with an index that is none.
      for (const id of [`${requestSeq}.3`, `${requestSeq}:${digest}.`, `${requestSeq}:${digest}.x`, `${requestSeq}:${digest}.3.4`, `${requestSeq}:${digest}.c.`, `${requestSeq}:${digest}.-1`]) {
        assert.equal(await resumed(id), over, id)
      }
    } finally {
      await log.close()
    }
  }),
)

/** The README block for a server that reads snapshots: the log to run the check on, given the snapshot at hand and the Last-Event-ID. */
async function logToCheck(): Promise<(latest: EventLog, lastId: string) => Promise<EventLog>> {
  const block = await readmeBlock('latest.snapshotOf', 'one block checks Last-Event-ID against a later snapshot')
  const AsyncFunction = (async () => undefined).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<EventLog>
  const run = new AsyncFunction('latest', 'lastId', 'EventLog', `${block}\nreturn log`)
  return (latest, lastId) => run(latest, lastId, EventLog)
}

test(
  "served from a snapshot, the README's check resumes a page that holds facts past the snapshot's end the log reached since (on a later snapshot), and starts over one whose seq the log never reached or whose digest is not the log's",
  boundedTest(20_000, async (root) => {
    const check = await checkOfLastEventId()
    const checkedOn = await logToCheck()
    const path = join(root, 'log')
    const live = await EventLog.open(path)
    const opened: EventLog[] = []
    try {
      await live.appendAll(completeInvocation('first'))
      const latest = await EventLog.openSnapshot(path, { directory: root })
      opened.push(latest)
      const taken = latest.head().highWater
      // The page was sent facts the log made durable after `latest` was taken (a later snapshot, another worker).
      await live.appendAll(completeInvocation('second'))
      const seq = live.head().highWater - 1
      assert.ok(seq > taken + 1, 'the page is past the snapshot at hand')
      const digest = await live.digestAt(seq)
      const resumed = async (id: string) => {
        const log = await checkedOn(latest, id)
        if (log !== latest) opened.push(log)
        return { log, ...(await check({ headers: { 'last-event-id': id } }, log)) }
      }

      // The check alone, on the snapshot at hand, takes the seq for another log's.
      assert.equal(await check({ headers: { 'last-event-id': `${seq}:${digest}` } }, latest), { from: 1, writing: undefined }, 'the snapshot at hand alone starts the page over')
      assert.equal((await refusal(() => latest.events({ from: seq + 1 }))).details, { field: 'from', highWater: taken, snapshotOf: path })

      const fact = await resumed(`${seq}:${digest}`)
      assert.equal({ from: fact.from, writing: fact.writing }, { from: seq + 1, writing: undefined }, 'resumed after the seq, on a later snapshot')
      assert.is(fact.log.snapshotOf, path)
      assert.ok(fact.log.head().highWater >= seq, 'the later snapshot holds the seq')
      const read: number[] = []
      for await (const stored of fact.log.events({ from: fact.from })) read.push(stored.seq)
      assert.equal(read, [seq + 1], 'the later snapshot reads on from there')
      const piece = await resumed(`${seq}:${digest}.c.2`)
      assert.equal({ from: piece.from, writing: piece.writing }, { from: seq + 1, writing: seq }, "a piece's id past the snapshot at hand")

      // Past the log's end too, or another log's digest: the later snapshot settles it, the page starts over.
      const { highWater } = live.head()
      for (const id of [`${highWater + 5}:${live.head().digest}`, `${seq}:sha256:${'0'.repeat(64)}`, `${highWater + 1}:${digest}.3`]) {
        const over = await resumed(id)
        assert.equal({ from: over.from, writing: over.writing }, { from: 1, writing: undefined }, id)
        assert.is.not(over.log, latest, `${id}: checked on a later snapshot`)
      }

      // A seq the snapshot at hand holds (or no id) is checked there: no snapshot is taken.
      const within = await latest.digestAt(taken)
      const here = await resumed(`${taken}:${within}`)
      assert.ok(here.log === latest && here.from === taken + 1, 'a seq within the snapshot at hand')
      for (const id of ['', 'x:y']) assert.ok((await resumed(id)).log === latest, JSON.stringify(id))
      // The log itself (the writer's process) is never replaced by a snapshot.
      assert.ok((await checkedOn(live, `${highWater + 5}:${digest}`)) === live, 'the log itself is checked as it is')
    } finally {
      for (const log of opened) await log.close()
      await live.close()
    }
  }),
)

test(
  "the README's Last-Event-ID blocks and its sessionFeed server type-check under strict nodenext as a server would hold them: `request` Node's IncomingMessage (what Express's req extends), `log` an EventLog, `latest` a snapshot",
  boundedTest(120_000, async (root) => {
    // The repository's sources, as a package's types: a path relative to the file, as nodenext wants it.
    const index = relative(root, join(REPO_ROOT, 'index.js')).split(sep).join('/')
    const check = await readmeBlock("lastId.indexOf(':')", 'one block checks Last-Event-ID')
    const snapshot = await readmeBlock('latest.snapshotOf', 'one block checks Last-Event-ID against a later snapshot')
    // The sessionFeed server of "Watching a run", with its imports at the top.
    const feed = (await readmeBlock('response.write(toServerSentEvent(message))', 'one block serves sessionFeed')).replaceAll("from 'factstate'", `from '${index}'`).split('\n')
    const server = [
      "import type { IncomingMessage } from 'node:http'",
      `import { EventLog, type RunningInvocation, type Engine } from '${index}'`,
      ...feed.filter((line) => line.startsWith('import ')),
      'export function serve(log: EventLog, engine: Engine) {',
      '  return ' + feed.filter((line) => !line.startsWith('import ')).join('\n'),
      '}',
      'export async function resume(request: IncomingMessage, log: EventLog, running: RunningInvocation) {',
      check,
      '  return { from, writing, text: running.liveText()?.text, calls: running.liveToolCalls()?.calls }',
      '}',
      'export async function logToCheck(latest: EventLog, lastId: string) {',
      snapshot,
      '  return log',
      '}',
    ].join('\n')
    await writeFile(join(root, 'server.ts'), server)
    // The library's lib (its sources are checked too, where a package's declarations would be).
    const compilerOptions = { target: 'es2022', lib: ['es2023', 'dom'], module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, types: ['node'], typeRoots: [join(REPO_ROOT, 'node_modules', '@types')], skipLibCheck: true }
    await writeFile(join(root, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['server.ts'] }))
    const tsc = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
    const checked = await promisify(execFile)(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: root }).then(
      () => '',
      (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}` || 'tsc failed',
    )
    assert.is(checked, '', 'the blocks type-check')
  }),
)

test.run()
