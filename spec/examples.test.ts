/**
 * Every runnable example in examples/ is run as its README command runs it, in its own process,
 * and must exit 0 (each example checks its own outcome and exits 1 when it is wrong).
 */
import { spawn } from 'node:child_process'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { withTimeout } from './support/temp.js'

function run(file: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], { stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (chunk) => (output += chunk))
    child.stderr.on('data', (chunk) => (output += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output }))
  })
}

const examples: [file: string, mustSay: RegExp][] = [
  ['examples/many-actors.ts', /100 of 100 sessions completed/],
  ['examples/human-approval.ts', /✔ every tool ran exactly once/],
  ['examples/cross-process-handoff.ts', /the tool ran 1 time\(s\) across both processes/],
  ['examples/continuation.ts', /charge_card ran 1 time\(s\) in total/],
  ['examples/custom-model-client.ts', /the model said: The clock said 12:00/],
]

for (const [file, mustSay] of examples) {
  test(`${file} runs and checks itself`, async () => {
    const { code, output } = await withTimeout(run(file), 60_000, file)
    assert.is(code, 0, output)
    assert.match(output, mustSay)
  })
}

test.run()
