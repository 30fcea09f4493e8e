/**
 * The README's fetch tool that throws `OutcomeUnknownError` ("A tool that cannot tell whether its
 * effect happened says so"), run as it is written against a real HTTP server on 127.0.0.1 through
 * `callTool`: an answer is `succeeded`, an HTTP error and a refused connection (nothing sent) are
 * `failed`, and a connection dropped once the request arrived, or an answer cut off or unreadable
 * after the server had it, are `unknown`. The server records each request it got: every `unknown`
 * is a request that arrived, every refused one is none.
 */
import { createServer, type Server } from 'node:http'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { ToolDefinition } from '../index.js'
import { callTool } from '../testing/index.js'
import { boundedTest } from './support/log-fixtures.js'
import { readmeBlock, repoModuleParts } from './support/readme.js'

type Mode = 'ok' | 'drop' | 'cut' | 'error' | 'not-json'

/** The README block, dedented, as a module of the repository whose bank is `url`. */
async function readmeTransfer(dir: string, url: string): Promise<ToolDefinition> {
  const block = await readmeBlock("new OutcomeUnknownError('the bank dropped the connection", 'one block shows a fetch tool throwing OutcomeUnknownError')
  const dedented = block.split('\n').map((line) => line.replace(/^ {2}/, '')).join('\n')
  assert.ok(dedented.includes("'https://bank.example/transfers'"), 'the block posts to the bank')
  const { imports, lines } = repoModuleParts(dedented.replace("'https://bank.example/transfers'", JSON.stringify(`${url}/transfers`)))
  await mkdir(dir, { recursive: true })
  const file = join(dir, 'transfer.ts')
  await writeFile(file, `${imports}\n${lines.join('\n')}\nexport { transfer }\n`)
  const module = (await import(pathToFileURL(file).href)) as { transfer: ToolDefinition }
  return module.transfer
}

test(
  "the README's fetch tool: succeeded, failed for an HTTP error or a refused connection, unknown for a connection dropped or an answer lost after the bank had the request",
  boundedTest(20_000, async (dir) => {
    let mode: Mode = 'ok'
    const received: string[] = []
    const bank: Server = createServer(async (request, response) => {
      for await (const _ of request) {
        // read the body whole: the transfer arrived
      }
      received.push(`${mode} ${String(request.headers['idempotency-key'])}`)
      if (mode === 'drop') return void request.socket.destroy()
      if (mode === 'cut') {
        response.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
        response.write('{"ok":', () => request.socket.destroy())
        return
      }
      if (mode === 'error') return void response.writeHead(422).end('{"error":"no such account"}')
      response.end(mode === 'not-json' ? '<html>' : '{"ok":true}')
    })
    await new Promise<void>((resolve) => bank.listen(0, '127.0.0.1', resolve))
    const { port } = bank.address() as { port: number }
    const outcomes: Record<string, { status: string; message?: string }> = {}
    try {
      const transfer = await readmeTransfer(dir, `http://127.0.0.1:${port}`)
      for (const each of ['ok', 'drop', 'cut', 'error', 'not-json'] as const) {
        mode = each
        outcomes[each] = (await callTool(transfer, { to: 'bob', cents: 500 }, { operationId: `op-${each}` })) as { status: string; message?: string }
      }
    } finally {
      await new Promise<void>((resolve) => {
        bank.close(() => resolve())
        bank.closeAllConnections()
      })
    }
    // A port nothing listens on, never connected to (a pooled keep-alive connection to the bank's
    // closed one would be a connection that dropped: unknown, as it may be): refused, nothing sent.
    const closed = createServer()
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const { port: closedPort } = closed.address() as { port: number }
    await new Promise<void>((resolve) => closed.close(() => resolve()))
    const nowhere = await readmeTransfer(join(dir, 'nowhere'), `http://127.0.0.1:${closedPort}`)
    const refused = (await callTool(nowhere, { to: 'bob', cents: 500 }, { operationId: 'op-refused' })) as { status: string; message?: string }
    assert.equal(
      Object.fromEntries(Object.entries(outcomes).map(([mode, outcome]) => [mode, outcome.status])),
      { ok: 'succeeded', drop: 'unknown', cut: 'unknown', error: 'failed', 'not-json': 'unknown' },
    )
    assert.match(outcomes.drop?.message ?? '', 'the bank dropped the connection after the transfer was sent')
    assert.match(outcomes.cut?.message ?? '', 'the bank accepted the transfer, but its answer was lost')
    assert.match(outcomes.error?.message ?? '', 'HTTP 422')
    assert.is(refused.status, 'failed', 'a refused connection sent nothing')
    assert.match(refused.message ?? '', 'ECONNREFUSED')
    assert.equal(received, ['ok op-ok', 'drop op-drop', 'cut op-cut', 'error op-error', 'not-json op-not-json'], 'each request arrived with its operationId as the key; the refused one did not')
  }),
)

test.run()
