/**
 * One writer per directory across the realms of one process: a Worker (its own globals) and a second
 * copy of factstate loaded in the same thread (two installs, a bundled copy) are refused
 * `LOG_WRITER_BUSY` (`this-process`) without touching the directory, so the first handle keeps its
 * LevelDB lock and another process still cannot open the log. Needs the built package (`npm run build`).
 */
import { execFile } from 'node:child_process'
import { cp, mkdir, readdir, rm, symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { Worker } from 'node:worker_threads'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, logInternals } from '../store/event-log.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal } from './support/log-fixtures.js'

const root = fileURLToPath(new URL('..', import.meta.url))
const source = pathToFileURL(join(root, 'store', 'event-log.ts')).href

/** What an `EventLog.open(path)` elsewhere ended in: `opened`, or the refusal's code and details. */
type Outcome = { opened: true } | { code: string; details: unknown }

const tryOpen = `async (EventLog, path) => {
  try {
    const log = await EventLog.open(path)
    await log.close()
    return { opened: true }
  } catch (error) {
    return { code: error.code, details: error.details }
  }
}`

/** `EventLog.open(path)` in a Worker of this process, which loads the library from source through tsx as the tests do. */
function openInWorker(path: string): Promise<Outcome> {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads')
    import(workerData.tsx)
      .then(({ register }) => { register(); return import(workerData.source) })
      .then(({ EventLog }) => (${tryOpen})(EventLog, workerData.path))
      .then((outcome) => parentPort.postMessage(outcome), (error) => parentPort.postMessage({ code: 'WORKER_FAILED', details: String(error) }))`
  const worker = new Worker(code, { eval: true, workerData: { tsx: import.meta.resolve('tsx/esm/api'), source, path } })
  return new Promise<Outcome>((resolve, reject) => {
    worker.once('message', (outcome: Outcome) => resolve(outcome))
    worker.once('error', reject)
  }).finally(() => worker.terminate())
}

/** `EventLog.open(path)` in another process. */
function openInChild(path: string): Promise<Outcome> {
  const code = `import(${JSON.stringify(source)}).then(({ EventLog }) => (${tryOpen})(EventLog, ${JSON.stringify(path)})).then((outcome) => console.log(JSON.stringify(outcome)))`
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: root, timeout: 20_000 }, (error, stdout) => {
      if (error) reject(error)
      else resolve(JSON.parse(stdout.trim().split('\n').at(-1) as string) as Outcome)
    })
  })
}

/** The holder of the log in `path` opens it, appends, has `intruder` try it, then checks another process is still kept out and nothing was lost. */
async function holdAndIntrude(path: string, intruder: () => Promise<Outcome>, expected: Outcome): Promise<void> {
  const log = await EventLog.open(path)
  try {
    await log.appendAll(completeInvocation('a'))
    assert.equal(await intruder(), expected, 'the second open in this process is refused as this-process')
    const other = await openInChild(path)
    assert.equal(other, { code: 'LOG_WRITER_BUSY', details: { holder: 'another-process', closing: false, pid: process.pid } }, "another process is still kept out: this one's lock was not released")
    const maker = new EventMaker(invocationOf('b'))
    await log.append(maker.next(facts.opened()))
  } finally {
    await log.close()
  }
  const reopened = await EventLog.open(path)
  try {
    const { events } = await reopened.verify()
    assert.is(events, completeInvocation('a').length + 1, 'the log holds what its one writer wrote, whole')
  } finally {
    await reopened.close()
  }
}

const realms = suite('store: one writer across the realms of a process')

realms(
  "a Worker's open of a directory the main thread holds is LOG_WRITER_BUSY 'this-process', and another process still cannot open it",
  boundedTest(60_000, async (dir) => {
    const path = join(dir, 'log')
    await holdAndIntrude(path, () => openInWorker(path), { code: 'LOG_WRITER_BUSY', details: { holder: 'this-process', closing: false } })
  }),
)

realms(
  "a second copy of factstate in the same thread shares the registry: its open is LOG_WRITER_BUSY 'this-process' and another process still cannot open the log",
  boundedTest(60_000, async (dir) => {
    // Another install of the package: its own modules, the same dependencies.
    const copy = join(dir, 'copy')
    await mkdir(copy)
    await cp(join(root, 'dist'), join(copy, 'dist'), { recursive: true })
    await cp(join(root, 'package.json'), join(copy, 'package.json'))
    await symlink(join(root, 'node_modules'), join(copy, 'node_modules'))
    const second = (await import(pathToFileURL(join(copy, 'dist', 'index.js')).href)) as { EventLog: typeof EventLog }
    assert.is.not(second.EventLog, EventLog, 'a distinct copy of the library')
    const path = join(dir, 'log')
    await holdAndIntrude(path, () => new Function(`return ${tryOpen}`)()(second.EventLog, path) as Promise<Outcome>, {
      code: 'LOG_WRITER_BUSY',
      details: { holder: 'this-process', closing: false },
    })
    // What only the shared registry knows (/proc/locks lists a lock, not why): the first copy's
    // handle is closed, a tool its engine started still running.
    const log = await EventLog.open(path)
    const release = logInternals(log).lease()
    await log.close()
    // Refused with the second copy's own FactstateError class: its code and details are read as they are.
    const busy = (await second.EventLog.open(path).then(
      () => ({ code: 'opened', details: undefined }),
      (error: { code: string; details: unknown }) => error,
    )) as { code: string; details: unknown }
    assert.equal([busy.code, busy.details], ['LOG_WRITER_BUSY', { holder: 'this-process', closing: true, toolsRunning: 1 }])
    assert.equal(await openInChild(path), { code: 'LOG_WRITER_BUSY', details: { holder: 'another-process', closing: false, pid: process.pid } })
    const waiting = second.EventLog.open(path, { waitMs: 20_000 })
    release()
    await (await waiting).close()
  }),
)

realms(
  'an open refused as this-process makes nothing: a directory the held log lost is not made again',
  boundedTest(20_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    try {
      await rm(path, { recursive: true, force: true })
      const busy = await refusal(EventLog.open(path))
      assert.equal([busy.code, busy.details], ['LOG_WRITER_BUSY', { holder: 'this-process', closing: false }])
      assert.equal(await readdir(dir), [], 'no directory was made for the refused open')
    } finally {
      await log.close()
    }
  }),
)

realms.run()
