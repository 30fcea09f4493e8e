/**
 * Every runnable example in examples/ is run as its README command runs it, in its own process,
 * and must exit 0 (each example checks its own outcome and exits 1 when it is wrong).
 */
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { REPO_ROOT } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** `output` is stdout and stderr as they came; `stdout` alone, for lines a warning on stderr must not split. */
function run(file: string, cwd = REPO_ROOT): Promise<{ code: number | null; output: string; stdout: string }> {
  return new Promise((resolve, reject) => {
    // tsx resolved here, so that an example can run in another working directory.
    const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(REPO_ROOT, file)], { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    let stdout = ''
    child.stdout.on('data', (chunk) => {
      output += chunk
      stdout += chunk
    })
    child.stderr.on('data', (chunk) => (output += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output, stdout }))
  })
}

const examples: [file: string, mustSay: RegExp][] = [
  ['examples/many-actors.ts', /100 of 100 sessions completed/],
  ['examples/human-approval.ts', /✔ B: the successor's model was told, after the sealed transcript: carol@acme approved the refund of B-7 \(ticket 77\)\n[\s\S]*✔ C: asked before its preparation, the refund was refused and nothing issued before the review\n✔ C: approved, the successor issued it\n✔ every tool ran exactly once, each refund after its approval/],
  ['examples/cross-process-handoff.ts', /the tool ran 1 time\(s\) across both processes/],
  ['examples/continuation.ts', /charge_card ran 1 time\(s\) in total/],
  ['examples/conversation.ts', /run-2 \(completed\): the model was sent 4 messages \(system, user, assistant, user\) and said "Your name is Ada\."/],
  ['examples/custom-model-client.ts', /the model said: The clock said 12:00\nthe provider was asked by: i step-1 attempt 1; i step-2 attempt 1\n/],
  ['examples/parallel-tools-progress.ts', /#5 tool\.dispatched \{"city":"Oslo"\}[\s\S]*completed: 3 lookups of 300 ms each, at most 3 at once/],
  ['examples/resume-after-crash.ts', /search_orders {} [^ ]+: no effect \(read-only\)\n  charge_card {"cents":4200} [^ ]+: the charge went through\ncontinued: completed; the card was charged 1 time\(s\)/],
  ['examples/tool-approval.ts', /#8 rejected \{"order":"C-3","amount":9000\} denied: over 1,000 needs a manager[\s\S]*completed: 2 refunds issued/],
  ['examples/stuck-tool-and-backup.ts', /run 1: failed outcome_unknown: tool export_report \(operation invocation-1\/step-1\/0\) did not finish within 200 ms \(its timeoutMs\)[\s\S]*pending: reports has 1 tool outcome\(s\) to acknowledge: export_report invocation-1\/step-1\/0\nrun 2: completed; nothing pending\nbackup: 9 events, the same digest as the log\nrun 3: completed; summaries sent: 1\nrestored: a backup taken at seq 9; run 3 is not in it \(high-water 9\)\nrun 4: refused: RUN_RECONCILIATION_REQUIRED, restored at seq 9\nrun 4 \(acknowledged\): completed; summaries sent: 1/],
  ['examples/delegation.ts', /delegate editor-1\/step-1\/0: child editor-1\.step-1\.0\.writer, outcome_unknown\n  save_draft \(operation editor-1\.step-1\.0\.writer\/step-1\/0\): the draft was saved; do not save it again; the writer, continued: completed\nsupervisor, told: completed: [^\n]+\nthe draft was saved 1 time\(s\)/],
  ['examples/supervisor-waits-for-child.ts', /pending: editor-1\.step-1\.0\.writer: paused editor-1\.step-1\.0\.writer; editor-desk: paused run-1\n[\s\S]*pending: editor-desk: paused run-1\n[\s\S]*✔ the note was published 1 time\(s\)\n✔ nothing pending\n[\s\S]*✔ the editor's model was asked 1 time\(s\) before the seal[\s\S]*✔ each tool ran once, across three processes: delegate, submit_for_review, publish\n/],
  ['examples/streaming-answer.ts', /\[step-2\] Tomorrow in Oslo[\s\S]*completed: 6 pieces for 2 answers; 2 of 2 add up to the recorded text/],
]

for (const [file, mustSay] of examples) {
  test(`${file} runs and checks itself`, async () => {
    const { code, output, stdout } = await withTimeout(run(file), 60_000, file)
    assert.is(code, 0, output)
    assert.match(stdout, mustSay, output)
  })
}

test('the README Quick start is examples/quick-start.ts, and it runs twice in one directory', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
      const section = readme.slice(readme.indexOf('## Quick start'), readme.indexOf('## Concepts'))
      const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1]
      const file = await readFile(join(REPO_ROOT, 'examples/quick-start.ts'), 'utf8')
      assert.is(block, file.slice(file.indexOf('*/\n') + 3), 'the README block is the example without its header')
      for (const time of [1, 2]) {
        const { code, output, stdout } = await run('examples/quick-start.ts', dir)
        assert.is(code, 0, output)
        assert.match(stdout, /^completed · 1 email\(s\) sent · log digest sha256:[0-9a-f]{64}\nThe report is on its way to ops\.$/m, `run ${time}`)
      }
      const log = await EventLog.open(join(dir, '.factstate/quick-start'))
      try {
        const opened = []
        for await (const { event } of log.events()) if (event.fact.type === 'invocation.opened') opened.push(event.invocation.turnId)
        assert.is(new Set(opened).size, 2, 'two runs, each in its own turn, in one log')
        assert.is((await log.verify()).events, log.head().highWater)
      } finally {
        await log.close()
      }
    }),
    60_000,
  ))

test('the README recipe "A child run that waits for a person" shows examples/supervisor-waits-for-child.ts as it is', async () => {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf('### A child run that waits for a person'), readme.indexOf('## Cancelling a run'))
  const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const file = await readFile(join(REPO_ROOT, 'examples/supervisor-waits-for-child.ts'), 'utf8')
  // The helper as it is in the file; the tool as it is there, one level of indentation less.
  const helper = block.slice(0, block.indexOf('\n// The writer'))
  assert.ok(helper.startsWith('/**') && file.includes(helper), 'sealAtNextSafePoint')
  const tool = block.slice(block.indexOf('const delegate'))
  const inFile = file.slice(file.indexOf('  const delegate'), file.indexOf('  const editor ='))
  assert.is(tool.trimEnd(), inFile.split('\n').map((line) => line.slice(2)).join('\n').trimEnd(), 'the delegate tool')
})

test.run()
