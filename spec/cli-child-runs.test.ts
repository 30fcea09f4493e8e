/**
 * `factstate log` shows a child run's parent call: on its `invocation.opened` line, and in `--runs`
 * (text and `--json`).
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact } from '../index.js'
import { EventMaker, completeInvocation, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** Runs the CLI from its sources (through tsx), without the colour settings uvu sets. */
function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env }
  delete env.FORCE_COLOR
  delete env.NO_COLOR
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bin/factstate.ts', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

test('log shows a child run as the child of the call that started it, on its opened line and in --runs', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      const supervisor = invocationOf('sup', 'desk')
      try {
        await log.appendAll(completeInvocation('sup', 'desk'))
        const opened = facts.opened('draft it') as Extract<Fact, { type: 'invocation.opened' }>
        if (opened.input.kind === 'message') opened.input.parent = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
        await log.append(new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer')).next(opened))
      } finally {
        await log.close()
      }
      const lines = await cli(['log', location, '--type', 'invocation.opened'])
      assert.is(lines.code, 0, lines.stderr)
      const [parentLine, childLine] = lines.stdout.trim().split('\n')
      assert.not.match(parentLine ?? '', /child of/)
      assert.match(childLine ?? '', /message "draft it", child of inv-sup\/step-1\/0 \(session desk\)$/)
      const runs = await cli(['log', location, '--session', 'inv-sup.step-1.0.writer', '--runs'])
      assert.is(runs.code, 0, runs.stderr)
      assert.match(runs.stdout, /^run-writer {2}turn-writer {2}inv-writer {2}message {2}child of inv-sup\/step-1\/0 \(session desk\) {2}open/)
      const json = await cli(['log', location, '--session', 'inv-sup.step-1.0.writer', '--runs', '--json'])
      assert.equal((JSON.parse(json.stdout.trim()) as { parent: unknown }).parent, { invocation: supervisor, operationId: 'inv-sup/step-1/0' })
    }),
    60_000,
  ))

test.run()
