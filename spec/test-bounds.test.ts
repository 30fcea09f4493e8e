/**
 * The suite's own bounds: a test that times out while holding a server open fails, the tests after
 * it run, and the process ends once uvu has printed its summary (it would otherwise stay alive on
 * the leaked server until CI's timeout).
 */
import { spawn } from 'node:child_process'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { withTimeout } from './support/temp.js'

test('a timed-out test that leaks a server fails, and the process still exits after the summary', () =>
  withTimeout(async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'node_modules/uvu/bin.js', 'spec/support', '^hanging-suite\\.ts$'], {
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
    let killed = false
    const guard = setTimeout(() => {
      killed = true
      child.kill('SIGKILL')
    }, 30_000)
    const code = await new Promise<number | null>((resolve) => child.on('close', (exit) => resolve(exit)))
    clearTimeout(guard)
    const plain = output.replace(/\x1b\[[0-9;]*m/g, '')
    assert.not.ok(killed, `the child ended by itself:\n${plain}`)
    assert.is(code, 1, 'uvu exit code for a failed run')
    assert.match(plain, /hanging body did not finish within 200 ms/)
    assert.match(plain, /Total:\s+2/)
    assert.match(plain, /Passed:\s+1/)
  }, 60_000, 'test bounds'),
)

test.run()
