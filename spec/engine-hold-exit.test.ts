/**
 * A held run keeps no process alive (as the README's "Handoff, step by step" says): a process that
 * awaits a decision that never comes, with nothing else pending, exits (code 13, Node's unsettled
 * top-level await) and leaves the run open and held, as a crash does; the recovery after the next
 * open ends it `failed{host_interrupted}` and no pause is sealed. A real child process and log.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, recoverInvocations } from '../index.js'
import { startChild } from './support/log-fixtures.js'
import { factsOf } from './support/engine-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

test('a process that awaits a decision on a held run, with nothing else pending, exits 13; the run is left open, recovery ends it host_interrupted, nothing sealed', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const child = startChild('child-held-run.ts', [location])
      try {
        await child.waitForLine((line) => line.startsWith('held '), 30_000)
      } catch (error) {
        await child.stop('SIGKILL')
        throw error
      }
      const status = await child.exited
      assert.equal([status.code, status.signal], [13, null], `the process ended by itself under the held run (${child.stderr()})`)
      const log = await EventLog.open(location)
      try {
        assert.equal((await factsOf(log, 'invocation-held')).map((fact) => fact.type), ['invocation.opened', 'hold.entered'], 'held, and nothing after')
        const closed: unknown[] = []
        assert.is(await recoverInvocations(log, { onClosed: ({ outcome }) => void closed.push(outcome) }), 1)
        assert.equal(closed.map((outcome) => (outcome as { status: string; class?: string }).class ?? (outcome as { status: string }).status), ['host_interrupted'])
        const [run] = await log.runs('session-held')
        assert.equal([run?.terminal, run?.outcome?.status], ['failed', 'failed'])
        assert.is((await log.runSource('session-held', 'run-held'))?.pause, undefined, 'no pause was sealed')
      } finally {
        await log.close()
      }
    }),
    60_000,
  ))

test.run()
