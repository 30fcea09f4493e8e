/**
 * Golden histories: logs recorded by earlier releases (spec/fixtures/<name>/, with what they
 * held in <name>.json) must still open, verify with the same digest, and replay through the
 * machine to the same states. A change to encoding, digest or machine that breaks an old log
 * fails here.
 */
import { cp, readFile, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type RunBoundary, foldFacts, recoverInvocations, stateOf } from '../index.js'
import { withTempDir, withTimeout } from './support/temp.js'

interface Golden {
  events: number
  digest: string
  run1Boundary: RunBoundary
  states: Record<string, string>
  terminals: Record<string, string | null>
  uncertain: string[]
}

const fixtures = fileURLToPath(new URL('./fixtures/', import.meta.url))
const names = (await readdir(fixtures)).filter((name) => name.endsWith('.json')).map((name) => name.slice(0, -5))

test('there is at least one golden history', () => {
  assert.ok(names.length >= 1)
})

for (const name of names) {
  test(`golden history ${name} opens, verifies and replays unchanged`, () =>
    withTimeout(
      withTempDir(async (dir) => {
        const golden = JSON.parse(await readFile(join(fixtures, `${name}.json`), 'utf8')) as Golden
        // Opening writes (LevelDB recovers its write log), so work on a copy.
        await cp(join(fixtures, name), join(dir, name), { recursive: true })
        const log = await EventLog.open(join(dir, name))
        try {
          const verified = await log.verify()
          assert.is(verified.events, golden.events)
          assert.is(verified.digest, golden.digest)
          assert.equal((await log.runSource(golden.run1Boundary.invocation.sessionId, golden.run1Boundary.invocation.runId))?.boundary, golden.run1Boundary)
          const prefix = await log.prefix(golden.events, 1 << 24)
          for (const [invocationId, state] of Object.entries(golden.states)) {
            const facts = prefix.events.filter((e) => e.event.invocation.invocationId === invocationId).map((e) => e.event.fact)
            assert.is(stateOf(foldFacts(facts)), state, invocationId)
            assert.is(prefix.projectInvocation(invocationId).terminal, golden.terminals[invocationId] ?? null, invocationId)
          }
          const uncertain = Object.keys(golden.states).flatMap((id) => prefix.projectInvocation(id).uncertainOperations)
          assert.equal(uncertain, golden.uncertain)
          assert.is(await recoverInvocations(log), 0)
          assert.is(log.head().digest, golden.digest)
        } finally {
          await log.close()
        }
      }),
      20_000,
    ))
}

test.run()
