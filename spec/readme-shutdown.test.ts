/**
 * The README's start-up loop ("After a crash") after a shutdown ("Cancelling a run": the SIGTERM
 * recipe's `engine.close({ cancel: 'shutdown' })` ends the runs it was answering `cancelled{shutdown}`, and the next start finishes them with
 * that loop), run as it is written: two runs are cancelled by a shutdown and one by the user, then
 * the next start runs the block twice at once (a start-up run twice in one process), both passes
 * having listed the sessions before either continues one. Each shutdown's turn is finished once, the
 * stop is left as it is, a child run the shutdown cancelled is left to its supervisor, and neither
 * pass throws.
 */
import { randomUUID } from 'node:crypto'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RunInput } from '../index.js'
import { type ScriptedModelServer, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { readmeBlock, repoModuleParts } from './support/readme.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** The README's start-up loop, in "After a crash" (the one that calls recoverInvocations): it also finishes what a shutdown cancelled. */
const startUpLoop = (): Promise<string> => readmeBlock('await recoverInvocations(log', 'one start-up loop in the README', { from: '## After a crash', until: '## Concepts' })

/**
 * The block as a module's function of the names it uses (its imports at the module's top, `factstate`
 * the repository's; the functions it declares, the application's, are the function's parameters).
 */
function loopModule(block: string): string {
  const { imports, lines } = repoModuleParts(block)
  const body = lines.filter((line) => !line.startsWith('declare function ')).join('\n')
  return `${imports}
export async function startUp(log, engine, settingsFor, effectFound, stopRequested) {
${body}
}
`
}

type StartUp = (
  log: EventLog,
  engine: Engine,
  settingsFor: (sessionId: string) => Omit<RunInput, 'invocation' | 'work'>,
  effectFound: (op: unknown) => Promise<string | undefined>,
  stopRequested: (sessionId: string) => Promise<boolean>,
) => Promise<void>

test("the README's loop after a shutdown finishes each cancelled{shutdown} turn once, with two passes at once, and leaves a user's stop", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const servers: Record<string, ScriptedModelServer> = {
        a: await scriptedModelServer([answer.hang(), answer.text('Done, A.')]),
        b: await scriptedModelServer([answer.hang(), answer.text('Done, B.')]),
        stopped: await scriptedModelServer([answer.hang()]),
        child: await scriptedModelServer([answer.hang()]),
      }
      try {
        const file = join(dir, 'loop.mts') // an ES module wherever the temporary directory is
        await writeFile(file, loopModule(await startUpLoop()))
        const { startUp } = (await import(pathToFileURL(file).href)) as { startUp: StartUp }
        const settingsFor = (sessionId: string) => ({
          provider: { kind: 'openai-chat' as const, baseUrl: servers[sessionId]?.baseUrl as string, model: 'stand-in' },
          configuration: { cwd: '/srv/chat' },
          tools: [],
        })
        const newRun = (sessionId: string) => {
          const id = randomUUID()
          return { sessionId, turnId: `turn-${id}`, runId: `run-${id}`, invocationId: `inv-${id}` }
        }

        // The first process: a shutdown cancels two runs mid-request; the user stopped a third.
        const first = await EventLog.open(join(dir, 'log'))
        try {
          const engine = new Engine({ log: first, model: new ModelExecutor({ retries: 0 }) })
          const stop = new AbortController()
          const runs = await Promise.all(
            Object.keys(servers).map((sessionId) =>
              engine.start(
                {
                  ...settingsFor(sessionId),
                  invocation: newRun(sessionId),
                  work: { kind: 'message', content: 'Hello' },
                  // A child run, as a supervisor's delegate call starts it (Agents that call agents).
                  ...(sessionId === 'child' ? { parent: { invocation: { sessionId: 'supervisor', turnId: 't1', runId: 'r1', invocationId: 'i1' }, operationId: 'i1/step-1/0' } } : {}),
                },
                sessionId === 'stopped' ? { signal: stop.signal } : {},
              ),
            ),
          )
          await Promise.all(Object.values(servers).map((server) => server.seen(0)))
          stop.abort('user-stop')
          // The README's SIGTERM recipe: the engine's close cancels every run in flight (the one the user stopped keeps its reason).
          const closed = engine.close({ cancel: 'shutdown' })
          assert.equal(await Promise.all(runs.map((run) => run.wait())), [
            { status: 'cancelled', source: 'shutdown' },
            { status: 'cancelled', source: 'shutdown' },
            { status: 'cancelled', source: 'user-stop' },
            { status: 'cancelled', source: 'shutdown' },
          ])
          await closed
          assert.equal(engine.inFlight(), [])
        } finally {
          await first.close()
        }

        // The next start runs the loop twice at once; each pass lists the sessions before either continues one.
        const log = await EventLog.open(join(dir, 'log'))
        try {
          const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
          // The application's records of the user's stops (none here: the stopped run ended cancelled{user-stop},
          // which the loop leaves by its outcome). Each pass asks it after listing the sessions and before its
          // first continuation: the first question of one pass waits for the other's, so both listed first.
          let asked = 0
          let bothListed: (() => void) | undefined
          const barrier = new Promise<void>((resolve) => (bothListed = resolve))
          const checkedForStops: string[] = []
          const stopRequested = async (sessionId: string) => {
            checkedForStops.push(sessionId)
            if (++asked === 2) bothListed?.()
            await barrier
            return false
          }
          const effectFound = async () => 'nothing was uncertain'
          await Promise.all([startUp(log, engine, settingsFor, effectFound, stopRequested), startUp(log, engine, settingsFor, effectFound, stopRequested)])
          await engine.drain()
          const shape = async (sessionId: string) => (await log.runs(sessionId)).map((run) => [run.kind, run.outcome])
          assert.equal(await shape('a'), [
            ['message', { status: 'cancelled', source: 'shutdown' }],
            ['continuation', { status: 'completed' }],
          ])
          assert.equal(await shape('b'), [
            ['message', { status: 'cancelled', source: 'shutdown' }],
            ['continuation', { status: 'completed' }],
          ])
          assert.equal(await shape('stopped'), [['message', { status: 'cancelled', source: 'user-stop' }]])
          assert.equal(await shape('child'), [['message', { status: 'cancelled', source: 'shutdown' }]], 'the child is left to its supervisor')
          assert.equal(
            Object.values(servers).map((server) => server.requests.length),
            [2, 2, 1, 1],
            'one request of each continuation, none of the stopped session nor of the child',
          )
          assert.equal((await log.pendingSessions({ unanswered: true })).map((session) => session.sessionId), ['child', 'stopped'], 'only the stop and the child are left unanswered')
          assert.not.ok(checkedForStops.includes('stopped'), "the user's stop is left by its outcome, before the application's records are asked")
        } finally {
          await log.close()
        }
      } finally {
        await Promise.all(Object.values(servers).map((server) => server.close()))
      }
    }),
    60_000,
    "the README's loop after a shutdown",
  ))

test.run()
