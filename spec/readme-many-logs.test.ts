/**
 * The README's pool of logs ("Many logs in one process", under "Running a log in production"), run
 * as it is written: a log per tenant in real LevelDB directories, real engines against the scripted
 * model server. Past `max` the least recently used idle log is closed, its engine first (a start on
 * the engine a caller kept is refused ENGINE_CLOSED, nothing written; its directory can be opened
 * again), one with a held run is kept open until the hold is sealed, a tenant whose directory was
 * removed is refused `no_log` and tried again once it exists, a log a crash left with a run open is
 * recovered as it is opened, a tenant closed with `cancel` has its run cancelled with that reason, and
 * a shutdown of 20 tenants with 40 runs in flight leaves none running and every log closed, each run
 * `cancelled{shutdown}`. A tenant closed while its tool ignores its signal stays locked
 * (`LOG_WRITER_BUSY`, `toolsRunning`) until the tool settles, then opens with the run recovered.
 */
import { existsSync } from 'node:fs'
import { rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { type Engine, EventLog, type RunInput, intentFor } from '../index.js'
import { type ScriptedModelServer, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { countingTool } from './support/engine-fixtures.js'
import { completeInvocation } from './support/log-fixtures.js'
import { readmeBlock, repoModuleParts } from './support/readme.js'
import { withTempDir, withTimeout } from './support/temp.js'

interface Pool {
  use<T>(tenant: string, body: (engine: Engine, log: EventLog) => Promise<T>): Promise<T>
  close(tenant: string, options?: { cancel?: string; signal?: AbortSignal }): Promise<string[]>
  shutdown(signal: AbortSignal): Promise<string[]>
}
type PoolClass = new (root: string, max: number) => Pool

/** The README block as a module exporting its class (its imports at the module's top, `factstate` the repository's). */
async function poolClass(dir: string): Promise<PoolClass> {
  const block = await readmeBlock('class LogPool', 'one pool of logs in the README', { from: '### Running a log in production', until: '### OpenTelemetry' })
  const { imports, lines } = repoModuleParts(block)
  const file = join(dir, 'pool.mts')
  await writeFile(file, `${imports}\n${lines.join('\n')}\nexport { LogPool }\n`)
  return ((await import(pathToFileURL(file).href)) as { LogPool: PoolClass }).LogPool
}

const input = (server: ScriptedModelServer, name: string): RunInput => ({
  invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
  provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted' },
  configuration: { cwd: '/srv/app' },
  tools: [],
  work: { kind: 'message', content: `hello ${name}` },
})

/** The message `promise` rejects with (the test fails if it resolves). */
async function messageOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
  } catch (error) {
    return (error as Error).message
  }
  assert.unreachable('it should have been refused')
  return ''
}

/** Makes a tenant's log, as a sign-up would, and closes it. */
async function signUp(root: string, tenant: string): Promise<void> {
  await (await EventLog.open(join(root, tenant))).close()
}

/** Whether the tenant's log is closed in this process: it opens (then it is closed again), rather than LOG_WRITER_BUSY. */
async function isClosed(root: string, tenant: string): Promise<boolean> {
  try {
    await (await EventLog.open(join(root, tenant), { create: false })).close()
    return true
  } catch (error) {
    if ((error as { code?: string }).code === 'LOG_WRITER_BUSY') return false
    throw error
  }
}

/** Which of `tenants` have their log closed, once that is `expected` (the pool closes a log after the use that made it one too many returned), or as it is after 20 s. */
async function closedAs(root: string, tenants: string[], expected: boolean[]): Promise<boolean[]> {
  const deadline = Date.now() + 20_000
  for (;;) {
    const closed = await Promise.all(tenants.map((tenant) => isClosed(root, tenant)))
    if (JSON.stringify(closed) === JSON.stringify(expected) || Date.now() > deadline) return closed
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

test("the README's pool closes the least recently used idle log past max, keeps one with a held run, refuses a removed tenant and tries it again once it exists, recovers a log a crash left", () =>
  withTimeout(
    withTempDir(async (root) => {
      const server = await scriptedModelServer(() => answer.text('done'))
      const LogPool = await poolClass(root)
      const pool = new LogPool(root, 2)
      try {
        for (const tenant of ['a', 'b', 'c', 'held']) await signUp(root, tenant)
        for (const tenant of ['a', 'b']) assert.equal(await pool.use(tenant, (engine) => engine.run(input(server, tenant))), { status: 'completed' })
        const keptA = await pool.use('a', async (engine) => engine) // a caller that keeps the engine past its use
        await pool.use('b', async () => undefined) // b the most recently used again
        assert.equal([await isClosed(root, 'a'), await isClosed(root, 'b')], [false, false], 'two open: none closed')
        assert.equal(await pool.use('c', (engine) => engine.run(input(server, 'c'))), { status: 'completed' })
        assert.equal(await closedAs(root, ['a', 'b', 'c'], [true, false, false]), [true, false, false], 'a, the least recently used, closed')
        // Its engine was closed before its log: a start on the kept engine is refused, nothing written.
        await rejectsWithCode(() => keptA.start(input(server, 'a-late')), 'ENGINE_CLOSED', 'a start on an evicted engine')
        // a again: opened anew with its facts (none for the refused start), and b is closed in its place.
        assert.equal(await pool.use('a', async (_engine, log) => log.head().highWater), 4)
        assert.equal(await closedAs(root, ['a', 'b', 'c'], [false, true, false]), [false, true, false])

        // A held run keeps its log open, least recently used or not, until the hold is sealed.
        const held = await pool.use('held', async (engine) => {
          const run = await engine.start(input(server, 'held'))
          return { run, hold: await run.handoff().reserve(intentFor(run.invocation, 'to-reviewer')).ready() }
        })
        await pool.use('b', async () => undefined)
        await pool.use('c', async () => undefined)
        // held, the least recently used, is passed over: a and b are closed in turn.
        assert.equal(await closedAs(root, ['a', 'b', 'c', 'held'], [true, true, false, false]), [true, true, false, false], 'held kept open')
        await held.hold.commit()
        assert.is((await held.run.wait()).status, 'handoff_paused')
        await pool.use('b', async () => undefined)
        assert.equal(await closedAs(root, ['b', 'c', 'held'], [false, false, true]), [false, false, true], 'held closed once its run ended')

        // A tenant deleted: closed, its directory removed; then no_log, nothing made; made again, it opens.
        await pool.use('a', async () => undefined)
        assert.not.ok(await isClosed(root, 'a'), 'a open again')
        assert.equal(await pool.close('a'), [])
        assert.ok(await isClosed(root, 'a'), 'a closed by pool.close')
        await rm(join(root, 'a'), { recursive: true, force: true })
        const gone = await rejectsWithCode(() => pool.use('a', async () => undefined), 'LOG_INVALID_ARGUMENT')
        assert.is(gone.details?.reason, 'no_log')
        assert.is(existsSync(join(root, 'a')), false, 'nothing made')
        await signUp(root, 'a')
        assert.is(await pool.use('a', async (_engine, log) => log.head().highWater), 0)
        assert.match(await messageOf(pool.use('../a', async () => undefined)), 'not a tenant id')

        // A log a crash left with a run open, its tool dispatched: the pool's open recovers it.
        const crashed = await EventLog.open(join(root, 'crashed'))
        for (const event of completeInvocation('x').slice(0, 4)) await crashed.append(event)
        await crashed.close()
        const pending = await pool.use('crashed', (_engine, log) => log.pendingSessions({ unanswered: true }))
        assert.equal(
          pending.map(({ sessionId, unanswered }) => [sessionId, unanswered?.outcome?.status, unanswered?.outcome?.status === 'failed' && unanswered.outcome.class]),
          [['session-x', 'failed', 'outcome_unknown']],
        )
      } finally {
        assert.equal(await pool.shutdown(AbortSignal.timeout(20_000)), [])
        await server.close()
      }
    }),
    60_000,
  ))

test("the README's pool at shutdown: 20 tenants, 40 runs in flight, each ended cancelled{shutdown}, none left, every log closed", () =>
  withTimeout(
    withTempDir(async (root) => {
      const server = await scriptedModelServer(() => answer.hang())
      const LogPool = await poolClass(root)
      const pool = new LogPool(root, 50)
      try {
        // One tenant closed with cancel (an eviction that does not wait): its run cancelled{evicted}, its log closed.
        await signUp(root, 'evicted')
        const evicted = await pool.use('evicted', (engine) => engine.start(input(server, 'evicted')))
        await server.seen(0)
        assert.equal(await pool.close('evicted', { cancel: 'evicted', signal: AbortSignal.timeout(10_000) }), [], 'none left running')
        assert.equal(await evicted.wait(), { status: 'cancelled', source: 'evicted' })
        assert.ok(await isClosed(root, 'evicted'), 'its log closed')

        const tenants = Array.from({ length: 20 }, (_, i) => `tenant-${i}`)
        for (const tenant of tenants) await signUp(root, tenant)
        const runs = await Promise.all(
          tenants.flatMap((tenant) => [1, 2].map((n) => pool.use(tenant, (engine) => engine.start(input(server, `${tenant}-${n}`))))),
        )
        await server.seen(40)
        assert.equal(await pool.shutdown(AbortSignal.timeout(10_000)), [], 'none left running')
        assert.equal(
          (await Promise.all(runs.map((run) => run.wait()))).map((outcome) => outcome.status),
          runs.map(() => 'cancelled'),
        )
        assert.match(await messageOf(pool.use(tenants[0] as string, async () => undefined)), 'shutting down')
        for (const tenant of tenants) {
          const log = await EventLog.open(join(root, tenant), { create: false })
          try {
            const pending = await log.pendingSessions({ unanswered: true })
            assert.equal(
              pending.map((session) => [session.sessionId, session.unanswered?.outcome?.status, session.unanswered?.outcome?.status === 'cancelled' && session.unanswered.outcome.source]).sort(),
              [1, 2].map((n) => [`session-${tenant}-${n}`, 'cancelled', 'shutdown']),
            )
          } finally {
            await log.close()
          }
        }
      } finally {
        await server.close()
      }
    }),
    60_000,
  ))

test("the README's pool: a tenant closed while its tool ignores its signal is LOG_WRITER_BUSY (toolsRunning) to its next use until the tool settles, then opens, the run recovered outcome_unknown", () =>
  withTimeout(
    withTempDir(async (root) => {
      const server = await scriptedModelServer(() => answer.toolCalls([{ id: 'call-1', name: 'charge', arguments: {} }]))
      const LogPool = await poolClass(root)
      const pool = new LogPool(root, 10)
      let started!: () => void
      const running = new Promise<void>((resolve) => (started = resolve))
      let finish!: (value: unknown) => void
      // No timeoutMs, and it ignores its signal: the charge lands whenever the bank answers.
      const charge = countingTool('charge', () => {
        started()
        return new Promise((resolve) => (finish = resolve))
      })
      try {
        await signUp(root, 'pay')
        const run = await pool.use('pay', (engine) => engine.start({ ...input(server, 'pay'), tools: [charge] }))
        await running
        // The close gives up waiting (the run waits for its tool): the run is left running, the log closed.
        assert.equal(await pool.close('pay', { cancel: 'evicted', signal: AbortSignal.timeout(100) }), ['invocation-pay'])
        const busy = await rejectsWithCode(() => pool.use('pay', async () => undefined), 'LOG_WRITER_BUSY', 'a use while the tool runs')
        assert.equal(busy.details, { holder: 'this-process', closing: true, toolsRunning: 1 })
        finish({ charged: true })
        await run.wait().catch(() => undefined)
        // Once it has settled the directory is freed (as LevelDB closes): the next use opens it and recovers the run.
        const deadline = Date.now() + 20_000
        let pending: Awaited<ReturnType<EventLog['pendingSessions']>> | undefined
        while (pending === undefined) {
          try {
            pending = await pool.use('pay', (_engine, log) => log.pendingSessions())
          } catch (error) {
            if ((error as { code?: string }).code !== 'LOG_WRITER_BUSY' || Date.now() > deadline) throw error
            await new Promise((resolve) => setTimeout(resolve, 10))
          }
        }
        assert.equal(
          pending.map(({ sessionId, unknown }) => [sessionId, unknown.map((op) => op.name)]),
          [['session-pay', ['charge']]],
        )
      } finally {
        assert.equal(await pool.shutdown(AbortSignal.timeout(20_000)), [])
        await server.close()
      }
    }),
    60_000,
  ))

test.run()
