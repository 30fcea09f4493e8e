/**
 * The chaos harness in CI: `chaos/run.ts --kills 5` kills a real workload process with SIGKILL
 * five times, restarting it on the same log, and must report no duplicate effect, no lost
 * acknowledged fact and no digest failure (the full run, `npm run chaos -- --kills 1000`, is
 * reported in the README).
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { runScript } from './support/faults-process.js'

const SUMMARY = /^chaos: (\d+) kills, (\d+) duplicate effects, (\d+) lost acknowledged facts, (\d+) digest failures, (\d+) unknown outcomes$/

test('chaos: 5 kills -9 of a busy engine lose nothing acknowledged, repeat no effect, keep the digest chain whole', async () => {
  const result = await runScript('chaos/run.ts', ['--kills', '5', '--sessions', '6'], 80_000)
  const lines = result.stdout.trim().split('\n')
  const summary = lines.at(-1) ?? ''
  const match = SUMMARY.exec(summary)
  assert.ok(match, `the last line is the summary: ${JSON.stringify(summary)}; stderr: ${result.stderr}`)
  const [, kills, duplicates, lost, digestFailures, unknown] = match.map(Number)
  assert.is(kills, 5, 'five kills')
  assert.is(duplicates, 0, `no duplicate effect; stderr: ${result.stderr}`)
  assert.is(lost, 0, `no lost acknowledged fact; stderr: ${result.stderr}`)
  assert.is(digestFailures, 0, `no digest failure; stderr: ${result.stderr}`)
  assert.ok(Number.isInteger(unknown) && (unknown as number) >= 0)
  assert.is(result.code, 0, `the harness saw no other broken rule; stderr: ${result.stderr}`)
})

test.run()
