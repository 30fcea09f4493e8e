/**
 * A suite whose first test times out while its body still holds an HTTP server open (run by
 * spec/test-bounds.test.ts in a child process): the process must still end once uvu has reported.
 */
import { createServer } from 'node:http'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { withTimeout } from './temp.js'

test('a body that never finishes and leaves a server listening', () =>
  withTimeout(async () => {
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    await new Promise(() => {})
  }, 200, 'hanging body'),
)

test('a later test still runs', () => {
  assert.is(1 + 1, 2)
})

test.run()
