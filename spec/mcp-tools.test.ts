/**
 * `toolsFromMcp` (`factstate/mcp`) against a real MCP server: spec/fixtures/mcp-server.ts, run with
 * tsx as a child process over stdio and reached through the MCP SDK's own `Client`, its tools run
 * by a real engine against the scripted model server. Names are mapped the same way on every start
 * and collisions refused; results, `isError` and structured content are recorded as the README
 * says; a server that dies during a call with effects, and a result the client refuses after the
 * server acted, leave the call uncertain (outcome_unknown) with its effect made once.
 */
import { readFile, writeFile } from 'node:fs/promises'
import { getEventListeners } from 'node:events'
import { createServer as createHttpServer, request as httpRequest } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { join } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { catalogOf, type ToolDefinition } from '../index.js'
import { mcpToolName, toolsFromMcp, type McpClient, type McpTool } from '../mcp/index.js'
import { answer } from '../testing/scripted-model-server.js'
import { engineTest, factsOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'
import { rejectsWithCode } from './support/codes.js'
import { REPO_ROOT } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const FIXTURE = join(REPO_ROOT, 'spec', 'fixtures', 'mcp-server.ts')

interface Served {
  client: Client
  /** The server's ledger: one line `<idempotencyKey>\t<what>` per effect. */
  ledger: () => Promise<string[]>
  pid: () => number | null
}

/** A connected client of a fresh fixture server (a child process), closed and the child killed after `body`. */
async function withMcpServer<T>(dir: string, body: (served: Served) => Promise<T>, extra = ''): Promise<T> {
  const file = join(dir, `ledger-${Math.random().toString(36).slice(2)}.txt`)
  await writeFile(file, '')
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', FIXTURE],
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', MCP_FIXTURE_FILE: file, MCP_FIXTURE_EXTRA: extra },
    stderr: 'pipe',
  })
  const client = new Client({ name: 'factstate-test', version: '1.0.0' })
  try {
    await client.connect(transport)
    return await body({
      client,
      ledger: async () => (await readFile(file, 'utf8')).split('\n').filter((line) => line !== ''),
      pid: () => transport.pid,
    })
  } finally {
    const pid = transport.pid
    await client.close().catch(() => undefined)
    if (pid !== null) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {
        // Already gone (closed, or killed itself).
      }
    }
  }
}

/** The words a gateway of the tests below answers each status with. */
const STATUS_TEXT: Readonly<Record<number, string>> = { 500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' }

const NAMES = ['lookup', 'append_line', 'files_read', 'fail', 'stats', 'picture', 'crash', 'crash_read', 'slow', 'checked']

test('mcpToolName maps what factstate refuses to _, cuts a long name with a digest of the whole, and depends on the name and prefix alone', () => {
  assert.is(mcpToolName('files.read'), 'files_read')
  assert.is(mcpToolName('repo/issues list'), 'repo_issues_list')
  assert.is(mcpToolName('café', 'x_'), 'x_caf_')
  assert.is(mcpToolName('send-mail_2'), 'send-mail_2')
  const long = mcpToolName(`${'a'.repeat(70)}.b`)
  assert.is(long.length, 64)
  assert.match(long, /^a{55}_[0-9a-f]{8}$/)
  assert.is(mcpToolName(`${'a'.repeat(70)}.b`), long, 'the same name on every call')
  assert.is.not(mcpToolName(`${'a'.repeat(70)}.c`), long, 'two long names that share their first 55 characters differ')
})

test('every page is listed; names mapped, descriptions and schemas as listed; readOnly only when trusted; needsApproval and timeoutMs from the options', () =>
  withTimeout(
    withTempDir((dir) =>
      withMcpServer(dir, async ({ client }) => {
        const listed = await client.listTools()
        assert.is(listed.nextCursor, '3', 'the server pages its listing')
        const tools = await toolsFromMcp(client)
        assert.equal(tools.map((tool) => tool.name), NAMES, 'all four pages, in the order listed, files.read as files_read')
        const lookup = tools[0] as ToolDefinition
        assert.equal(lookup.inputSchema, { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', properties: { key: { type: 'string' } }, required: ['key'], additionalProperties: false })
        assert.is(lookup.description, 'Looks a key up')
        assert.equal(tools.map((tool) => [tool.readOnly, tool.needsApproval, tool.timeoutMs]).filter((member) => member.some((value) => value !== undefined)), [], 'a hint is not trusted by default')
        assert.ok(catalogOf(tools).catalogDigest.startsWith('sha256:'), 'a run takes them')

        const trusted = await toolsFromMcp(client, {
          trustReadOnlyHint: true,
          needsApproval: (tool: McpTool) => (tool.annotations?.destructiveHint === true ? true : undefined),
          timeoutMs: 2_000,
          prefix: 'fx_',
          rename: { 'files.read': 'read_file' },
        })
        assert.equal(
          trusted.map((tool) => [tool.name, tool.readOnly ?? false, tool.needsApproval ?? false, tool.timeoutMs]),
          [
            ['fx_lookup', true, false, 2_000],
            ['fx_append_line', false, true, 2_000],
            ['read_file', true, false, 2_000],
            ['fx_fail', false, false, 2_000],
            ['fx_stats', true, false, 2_000],
            ['fx_picture', true, false, 2_000],
            ['fx_crash', false, true, 2_000],
            ['fx_crash_read', true, false, 2_000],
            ['fx_slow', false, false, 2_000],
            ['fx_checked', false, false, 2_000],
          ],
        )
        assert.equal((await toolsFromMcp(client, { include: ['stats', 'files.read'] })).map((tool) => tool.name), ['files_read', 'stats'], 'in the order listed')
        assert.equal((await toolsFromMcp(client, { include: (tool) => tool.annotations?.readOnlyHint === true })).map((tool) => tool.name), ['lookup', 'files_read', 'stats', 'picture', 'crash_read'])
        // Two servers side by side: a prefix each.
        const both = [...(await toolsFromMcp(client, { prefix: 'one_' })), ...(await toolsFromMcp(client, { prefix: 'two_' }))]
        assert.is(catalogOf(both).names.length, 20)
        assert.equal(catalogOf(await toolsFromMcp(client)), catalogOf(tools), 'the same catalog on every listing: names, descriptions and schemas are sealed')
      }),
    ),
    20_000,
  ),
)

test('options it cannot use are MCP_INVALID_OPTIONS naming the option; a client that is not one too', () =>
  withTimeout(
    withTempDir((dir) =>
      withMcpServer(dir, async ({ client }) => {
        const cases: [unknown, string][] = [
          [{ prefix: 'a.b' }, 'prefix'],
          [{ prefix: 'x'.repeat(33) }, 'prefix'],
          [{ rename: { lookup: 'look up' } }, 'rename.lookup'],
          [{ rename: { lookup: 'same', stats: 'same' } }, 'rename.stats'],
          [{ include: 'lookup' }, 'include'],
          [{ include: () => 'yes' }, 'include'],
          [{ trustReadOnlyHint: 'yes' }, 'trustReadOnlyHint'],
          [{ needsApproval: 'always' }, 'needsApproval'],
          [{ needsApproval: () => 'always' }, 'needsApproval'],
          [{ timeoutMs: 0 }, 'timeoutMs'],
          [{ requestTimeoutMs: 1.5 }, 'requestTimeoutMs'],
          [{ keepBinaryData: 1 }, 'keepBinaryData'],
          [{ cancelMeansNotDone: 'yes' }, 'cancelMeansNotDone'],
          [{ cancelMeansNotDone: () => 'yes' }, 'cancelMeansNotDone'],
          [{ timeout: 1_000 }, 'timeout'],
          [{ trustReadOnlyHints: true }, 'trustReadOnlyHints'],
        ]
        for (const [options, field] of cases) {
          const error = await rejectsWithCode(() => toolsFromMcp(client, options as never), 'MCP_INVALID_OPTIONS', JSON.stringify(options))
          assert.is(error.details?.field, field, error.message)
        }
        const misspelt = await rejectsWithCode(() => toolsFromMcp(client, { trustReadOnlyHints: true } as never), 'MCP_INVALID_OPTIONS')
        assert.match(misspelt.message, /did you mean trustReadOnlyHint\?/)
        const notClient = await rejectsWithCode(() => toolsFromMcp({ tools: [] } as unknown as McpClient), 'MCP_INVALID_OPTIONS')
        assert.is(notClient.details?.field, 'client')
      }),
    ),
    20_000,
  ),
)

test('two MCP tools that map to one name are MCP_INVALID_TOOLS (collision) naming both, until rename parts them; include and rename must name listed tools; a schema a run refuses is named', () =>
  withTimeout(
    withTempDir((dir) =>
      withMcpServer(
        dir,
        async ({ client }) => {
          const collision = await rejectsWithCode(() => toolsFromMcp(client), 'MCP_INVALID_TOOLS')
          assert.equal(collision.details, { reason: 'collision', tools: ['a.b', 'a_b'], name: 'a_b' })
          assert.match(collision.message, /rename/)
          const renamed = await rejectsWithCode(() => toolsFromMcp(client, { rename: { 'a.b': 'lookup' } }), 'MCP_INVALID_TOOLS', 'a rename onto a mapped name')
          assert.equal(renamed.details, { reason: 'collision', tools: ['lookup', 'a.b'], name: 'lookup' })
          const broken = await rejectsWithCode(() => toolsFromMcp(client, { rename: { 'a.b': 'a_dot_b' } }), 'MCP_INVALID_TOOLS', 'the broken schema')
          assert.equal(broken.details, { reason: 'schema', tools: ['broken'], name: 'broken' })
          const tools = await toolsFromMcp(client, { rename: { 'a.b': 'a_dot_b' }, include: (tool) => tool.name !== 'broken' })
          assert.equal(tools.map((tool) => tool.name).slice(-2), ['a_dot_b', 'a_b'])
          const missing = await rejectsWithCode(() => toolsFromMcp(client, { include: ['lookup', 'serach'] }), 'MCP_INVALID_TOOLS')
          assert.equal(missing.details, { reason: 'not_listed', tools: ['serach'] })
          const unlisted = await rejectsWithCode(() => toolsFromMcp(client, { rename: { nothing: 'x' }, include: ['lookup'] }), 'MCP_INVALID_TOOLS')
          assert.equal(unlisted.details, { reason: 'not_listed', tools: ['nothing'] })
        },
        'collide,bad-schema',
      ).then(() =>
        withMcpServer(
          dir,
          async ({ client }) => {
            const looping = await rejectsWithCode(() => toolsFromMcp(client), 'MCP_INVALID_TOOLS', 'a cursor given twice')
            assert.equal(looping.details, { reason: 'listing', tools: [] })
            assert.match(looping.message, /the cursor "3" twice/)
          },
          'loop',
        ),
      ),
    ),
    20_000,
  ),
)

test(
  'through a real engine: read-only, dotted, structured and mixed results recorded; isError is the call failure in its words; an effect is made once with the operationId as its idempotency key',
  engineTest(
    [
      answer.toolCalls([
        { id: 'c1', name: 'lookup', arguments: { key: 'k' } },
        { id: 'c2', name: 'files_read', arguments: { path: 'a.txt' } },
        { id: 'c3', name: 'append_line', arguments: { line: 'paid 10' } },
        { id: 'c4', name: 'stats', arguments: {} },
        { id: 'c5', name: 'picture', arguments: {} },
        { id: 'c6', name: 'fail', arguments: {} },
        { id: 'c7', name: 'lookup', arguments: { key: 'k', extra: 1 } },
      ]),
      answer.text('done'),
    ],
    { ms: 20_000 },
    async (h) =>
      withMcpServer(h.dir, async ({ client, ledger }) => {
        const tools = await toolsFromMcp(client, { trustReadOnlyHint: true })
        const outcome = await h.run(h.input('mcp', { tools }))
        assert.equal(outcome, { status: 'completed' })
        const facts = await factsOf(h.log, 'invocation-mcp')
        const settled = new Map(only(facts, 'tool.settled').map((fact) => [fact.operationId, fact.outcome]))
        const op = (index: number) => `invocation-mcp/step-1/${index}`
        assert.equal(settled.get(op(0)), { status: 'succeeded', output: 'value of k' })
        assert.equal(settled.get(op(1)), { status: 'succeeded', output: 'contents of a.txt' })
        assert.equal(settled.get(op(2)), { status: 'succeeded', output: 'appended' })
        assert.equal(settled.get(op(3)), { status: 'succeeded', output: { count: 3, items: ['a', 'b', 'c'] } }, 'structuredContent, not its text')
        assert.equal(settled.get(op(4)), { status: 'succeeded', output: [{ type: 'text', text: 'a red dot' }, { type: 'image', mimeType: 'image/png', bytes: 300 }] }, 'the image as its size')
        assert.equal(settled.get(op(5)), { status: 'failed', message: 'no such account' })
        assert.equal(only(facts, 'tool.rejected').map((fact) => [fact.operationId, fact.reason]), [[op(6), 'invalid_input']], 'the listed draft-07 schema checks calls (additionalProperties: false)')
        assert.equal(await ledger(), [`${op(2)}\tpaid 10`], 'one effect, keyed by its operationId')
        assert.equal(only(facts, 'tool.dispatched').map((fact) => [fact.name, fact.readOnly ?? false]), [
          ['lookup', true],
          ['files_read', true],
          ['append_line', false],
          ['stats', true],
          ['picture', true],
          ['fail', false],
        ])
      }),
  ),
)

test(
  'a server that dies during a call with effects leaves the call uncertain (outcome_unknown, never settled, the session to reconcile), its effect made once; from a read-only tool the death is a failure and the run goes on',
  engineTest(
    [answer.toolCalls([{ id: 'c1', name: 'crash', arguments: { line: 'transfer 100' } }]), answer.toolCalls([{ id: 'c2', name: 'crash_read', arguments: {} }]), answer.text('read failed')],
    { ms: 20_000 },
    async (h) => {
      await withMcpServer(h.dir, async ({ client, ledger }) => {
        const tools = await toolsFromMcp(client, { trustReadOnlyHint: true })
        const outcome = await h.run(h.input('crash', { tools }))
        assert.equal(outcome, {
          status: 'failed',
          class: 'outcome_unknown',
          message:
            'tool crash (operation invocation-crash/step-1/0) reported its outcome unknown: the MCP connection closed during the call of crash, after the request was sent; cause: McpError: MCP error -32000: Connection closed; its effect may or may not have happened',
        })
        const facts = await factsOf(h.log, 'invocation-crash')
        assert.equal(only(facts, 'tool.settled'), [], 'not settled: not told to the model as a failure')
        assert.equal((await h.log.prefix(100, 1 << 20)).projectInvocation('invocation-crash').uncertainOperations, ['invocation-crash/step-1/0'])
        assert.is(h.server.requests.length, 1, 'the model was not asked again')
        assert.equal(await ledger(), ['invocation-crash/step-1/0\ttransfer 100'], 'the effect, once')
        await refusedWithoutWriting(h.log, () => h.start(h.input('after', { tools, session: 'session-crash' })), 'RUN_RECONCILIATION_REQUIRED', 'the next message')
      })
      await withMcpServer(h.dir, async ({ client }) => {
        const tools = await toolsFromMcp(client, { trustReadOnlyHint: true })
        const outcome = await h.run(h.input('read', { tools }))
        assert.equal(outcome, { status: 'completed' })
        const settled = only(await factsOf(h.log, 'invocation-read'), 'tool.settled')
        assert.equal(settled.map((fact) => fact.outcome), [{ status: 'failed', message: 'McpError: MCP error -32000: Connection closed' }])
      })
    },
  ),
)

test(
  'a result the client refuses after the server acted (its outputSchema not met) leaves the call uncertain, the effect made once',
  engineTest([answer.toolCalls([{ id: 'c1', name: 'checked', arguments: { line: 'shipped' } }]), answer.text('unreachable')], { ms: 20_000 }, async (h) =>
    withMcpServer(h.dir, async ({ client, ledger }) => {
      const outcome = await h.run(h.input('checked', { tools: await toolsFromMcp(client) }))
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      assert.match((outcome as { message: string }).message, /answered the call of checked without an error, but the client refused its result; cause: McpError: MCP error -32602: Structured content does not match the tool's output schema/)
      assert.equal(await ledger(), ['invocation-checked/step-1/0\tshipped'])
    }),
  ),
)

test(
  "timeoutMs is factstate's limit, not the client's: the call is cancelled at the server, left uncertain, its progress passed on",
  engineTest([answer.toolCalls([{ id: 'c1', name: 'slow', arguments: { line: 'deploy' } }]), answer.text('unreachable')], { ms: 20_000 }, async (h) =>
    withMcpServer(h.dir, async ({ client, ledger }) => {
      const progress: unknown[] = []
      const tools = await toolsFromMcp(client, { timeoutMs: 500, include: ['slow'] })
      const outcome = await h.run(h.input('slow', { tools }), { onToolProgress: (update) => progress.push(update.value) })
      // The limit told once: the SDK's McpError wrapping the abort's reason is not told beside the reason.
      assert.equal(outcome, {
        status: 'failed',
        class: 'outcome_unknown',
        message: 'tool slow (operation invocation-slow/step-1/0) failed after its signal aborted (the tool did not finish within 500 ms (its timeoutMs)); its effect may or may not have happened',
      })
      assert.equal(progress, [{ progress: 1, total: 2, message: 'started' }])
      // The server hears the cancel (notifications/cancelled) once factstate's signal aborts.
      const deadline = Date.now() + 5_000
      while ((await ledger()).length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
      assert.equal(await ledger(), ['invocation-slow/step-1/0\tdeploy', 'invocation-slow/step-1/0\tcancelled'])
    }),
  ),
)

test(
  "the client's own request timeout (requestTimeoutMs, no timeoutMs) after the request went out leaves a call with effects uncertain, not failed",
  engineTest([answer.toolCalls([{ id: 'c1', name: 'slow', arguments: { line: 'deploy' } }]), answer.text('unreachable')], { ms: 20_000 }, async (h) =>
    withMcpServer(h.dir, async ({ client, ledger }) => {
      const tools = await toolsFromMcp(client, { requestTimeoutMs: 400, include: ['slow'] })
      const outcome = await h.run(h.input('client-timeout', { tools }))
      assert.equal(outcome, {
        status: 'failed',
        class: 'outcome_unknown',
        message:
          'tool slow (operation invocation-client-timeout/step-1/0) reported its outcome unknown: the MCP client stopped waiting for the call of slow (its request timeout) while the server may still be running it; cause: McpError: MCP error -32001: Request timed out; its effect may or may not have happened',
      })
      assert.equal(only(await factsOf(h.log, 'invocation-client-timeout'), 'tool.settled'), [])
      assert.is(h.server.requests.length, 1, 'the model was not asked again')
      assert.equal((await ledger())[0], 'invocation-client-timeout/step-1/0\tdeploy')
    }),
  ),
)

test(
  "a JSON-RPC error the server answered with is the call's failure, -32000 included; only the client's own (or a relayed) closed connection or timeout leaves it uncertain; a call the client never sent (not connected) fails",
  engineTest(
    [
      answer.toolCalls([
        { id: 'c1', name: 'quota', arguments: { line: 'charge 5' } },
        { id: 'c2', name: 'relayed_timeout', arguments: { line: 'charge 6' } },
      ]),
      answer.toolCalls([{ id: 'c3', name: 'append_line', arguments: { line: 'never sent' } }]),
      answer.text('not connected'),
    ],
    { ms: 20_000 },
    async (h) => {
      await withMcpServer(
        h.dir,
        async ({ client, ledger }) => {
          const tools = await toolsFromMcp(client, { include: ['quota', 'relayed_timeout', 'append_line'] })
          const outcome = await h.run(h.input('server-errors', { tools }))
          const facts = await factsOf(h.log, 'invocation-server-errors')
          assert.equal(
            only(facts, 'tool.settled').map((fact) => [fact.operationId, fact.outcome]),
            [['invocation-server-errors/step-1/0', { status: 'failed', message: 'McpError: MCP error -32000: MCP error -32000: quota exceeded, try again tomorrow' }]],
            'the server answered: a failure the model is told',
          )
          assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown', 'a timeout a proxy relays is uncertain')
          assert.match((outcome as { message: string }).message, /^tool relayed_timeout \(operation invocation-server-errors\/step-1\/1\) reported its outcome unknown: /)
          assert.equal(await ledger(), ['invocation-server-errors/step-1/1\tcharge 6'])
          // Closed by the application: the SDK refuses the call before anything is sent (Error: Not connected).
          await client.close()
          const closed = await h.run(h.input('not-connected', { tools }))
          assert.equal(closed, { status: 'completed' })
          assert.equal(only(await factsOf(h.log, 'invocation-not-connected'), 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message: 'Not connected' }])
          assert.equal(await ledger(), ['invocation-server-errors/step-1/1\tcharge 6'], 'nothing more done')
        },
        'errors',
      )
    },
  ),
)

test(
  "a call leaves nothing on the signal it was given once it settled: the SDK's abort listener (never removed) would pile up on a run's signal, one per call, and a later cancel would send notifications/cancelled for every answered request",
  engineTest(
    [answer.toolCalls(Array.from({ length: 12 }, (_, index) => ({ id: `c${index}`, name: 'lookup', arguments: { key: `k${index}` } }))), answer.text('done')],
    { ms: 20_000 },
    async (h) =>
      withMcpServer(h.dir, async ({ client }) => {
        const signals = new Set<AbortSignal>()
        const warnings: string[] = []
        const onWarning = (warning: Error) => warnings.push(warning.name)
        process.on('warning', onWarning)
        try {
          // No timeoutMs: each call is given the run's own signal.
          const tools = (await toolsFromMcp(client, { include: ['lookup'] })).map((tool) => ({
            ...tool,
            execute: (input: unknown, context: Parameters<ToolDefinition['execute']>[1]) => {
              signals.add(context.signal)
              return tool.execute(input, context)
            },
          }))
          const outcome = await h.run(h.input('listeners', { tools }))
          assert.equal(outcome, { status: 'completed' })
          assert.is(only(await factsOf(h.log, 'invocation-listeners'), 'tool.settled').length, 12)
          const left = [...signals].reduce((count, signal) => count + getEventListeners(signal, 'abort').length, 0)
          assert.ok(left <= signals.size, `${left} abort listeners left on ${signals.size} signal(s) after 12 calls settled`)
          await new Promise((resolve) => setImmediate(resolve))
          assert.not.ok(warnings.includes('MaxListenersExceededWarning'))
        } finally {
          process.off('warning', onWarning)
        }
      }),
  ),
)

test('the listing leaves no listener on the signal it was given, one page after another', () =>
  withTimeout(
    withTempDir((dir) =>
      withMcpServer(dir, async ({ client }) => {
        const controller = new AbortController()
        const tools = await toolsFromMcp(client, { signal: controller.signal })
        assert.equal(tools.map((tool) => tool.name), NAMES, 'every page (four)')
        assert.is(getEventListeners(controller.signal, 'abort').length, 0)
        controller.abort()
        const refused = await toolsFromMcp(client, { signal: controller.signal }).then(
          () => undefined,
          (error: unknown) => error,
        )
        assert.is((refused as Error | undefined)?.name, 'AbortError', 'an aborted signal still stops the listing')
      }),
    ),
    20_000,
  ))

test('a listed description a fact cannot hold is MCP_INVALID_TOOLS with reason description, one in the input schema reason schema (not name)', () =>
  withTimeout(
    withTempDir((dir) =>
      withMcpServer(
        dir,
        async ({ client }) => {
          const described = await rejectsWithCode(() => toolsFromMcp(client, { include: ['garbled'] }), 'MCP_INVALID_TOOLS')
          assert.equal(described.details, { reason: 'description', tools: ['garbled'], name: 'garbled' })
          assert.match(described.message, /tool\.description: a string with a lone surrogate/)
          const schema = await rejectsWithCode(() => toolsFromMcp(client, { include: ['garbled_schema'] }), 'MCP_INVALID_TOOLS')
          assert.equal(schema.details, { reason: 'schema', tools: ['garbled_schema'], name: 'garbled_schema' })
        },
        'bad-description',
      ),
    ),
    20_000,
  ))

test(
  'over Streamable HTTP: a connection that drops after the server acted, before its answer, leaves the call uncertain, the effect made once; a call whose connection is refused (nothing sent) fails',
  engineTest(
    [answer.toolCalls([{ id: 'c1', name: 'pay', arguments: {} }]), answer.toolCalls([{ id: 'c2', name: 'pay', arguments: {} }]), answer.text('server down')],
    { ms: 20_000 },
    async (h) => {
      const effects: string[] = []
      const sockets = new Set<Socket>()
      const httpServer = createHttpServer((request, response) => {
        const server = new Server({ name: 'http-fixture', version: '1.0.0' }, { capabilities: { tools: {} } })
        server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: [{ name: 'pay', inputSchema: { type: 'object' } }] }))
        server.setRequestHandler(CallToolRequestSchema, (call) => {
          effects.push(String(call.params._meta?.idempotencyKey))
          // The effect made, the connection drops before the answer is written (JSON response mode).
          for (const socket of sockets) socket.destroy()
          return { content: [{ type: 'text', text: 'paid' }] }
        })
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
        void server.connect(transport).then(() => transport.handleRequest(request, response))
      })
      httpServer.on('connection', (socket) => {
        sockets.add(socket)
        socket.on('close', () => sockets.delete(socket))
      })
      await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve))
      const client = new Client({ name: 'factstate-test', version: '1.0.0' })
      try {
        await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${(httpServer.address() as AddressInfo).port}/mcp`)))
        const tools = await toolsFromMcp(client)
        const outcome = await h.run(h.input('http-drop', { tools }))
        assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
        assert.match((outcome as { message: string }).message, /the HTTP connection to the MCP server dropped during the call of pay, after the request was sent; cause: TypeError: fetch failed/)
        assert.equal(only(await factsOf(h.log, 'invocation-http-drop'), 'tool.settled'), [], 'not told to the model as a failure it would make again')
        assert.equal(effects, ['invocation-http-drop/step-1/0'])
        // The server gone: the connection is refused, nothing is sent, and the call fails.
        await new Promise<void>((resolve) => httpServer.close(() => resolve()))
        const refused = await h.run(h.input('http-refused', { tools }))
        assert.equal(refused, { status: 'completed' })
        const settled = only(await factsOf(h.log, 'invocation-http-refused'), 'tool.settled')
        assert.is(settled.length, 1)
        assert.is(settled[0]?.outcome.status, 'failed')
        assert.equal(effects, ['invocation-http-drop/step-1/0'])
      } finally {
        await client.close().catch(() => undefined)
        for (const socket of sockets) socket.destroy()
        if (httpServer.listening) await new Promise<void>((resolve) => httpServer.close(() => resolve()))
      }
    },
  ),
)

test(
  "with timeoutMs, a server that reports progress keeps the client's request timeout (requestTimeoutMs) from firing, and timeoutMs bounds the whole call, told once; without, the request timeout stays the call's limit",
  engineTest(
    [
      answer.toolCalls([{ id: 'c1', name: 'progressing', arguments: { line: 'migrate', ms: 2_500 } }]),
      answer.text('migrated'),
      answer.toolCalls([{ id: 'c2', name: 'progressing', arguments: { line: 'forever', ms: 60_000 } }]),
      // (the run above ends at its tool: the next answer is the next run's)
      answer.toolCalls([{ id: 'c3', name: 'progressing', arguments: { line: 'unbounded', ms: 2_500 } }]),
      answer.text('unreachable'),
    ],
    { ms: 30_000 },
    async (h) =>
      withMcpServer(
        h.dir,
        async ({ client, ledger }) => {
          // Reports every 100 ms for 2.5 s: past a request timeout of 1 s, which the progress restarts each
          // time, since the tool's timeoutMs bounds the whole call.
          const progress: unknown[] = []
          const outcome = await h.run(h.input('progressing', { tools: await toolsFromMcp(client, { timeoutMs: 10_000, requestTimeoutMs: 1_000, include: ['progressing'] }) }), {
            onToolProgress: (update) => progress.push(update.value),
          })
          assert.equal(outcome, { status: 'completed' })
          assert.equal(only(await factsOf(h.log, 'invocation-progressing'), 'tool.settled').map((fact) => fact.outcome), [{ status: 'succeeded', output: 'done' }])
          assert.ok(progress.length >= 2, `${progress.length} progress report(s)`)
          assert.equal(await ledger(), ['invocation-progressing/step-1/0\tmigrate'])

          // Reports for a minute: the tool's timeoutMs (its request timeout 5 s past it, reset by the progress) ends it, at the server too.
          const bounded = await h.run(h.input('bounded', { tools: await toolsFromMcp(client, { timeoutMs: 1_500, include: ['progressing'] }) }))
          assert.equal(bounded, {
            status: 'failed',
            class: 'outcome_unknown',
            message: 'tool progressing (operation invocation-bounded/step-1/0) failed after its signal aborted (the tool did not finish within 1,500 ms (its timeoutMs)); its effect may or may not have happened',
          })
          const deadline = Date.now() + 5_000
          while ((await ledger()).length < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
          assert.equal((await ledger()).slice(1), ['invocation-bounded/step-1/0\tforever', 'invocation-bounded/step-1/0\tcancelled'])

          // Without timeoutMs nothing else bounds the call: the request timeout stays its limit, progress or not.
          const unbounded = await h.run(h.input('unbounded', { tools: await toolsFromMcp(client, { requestTimeoutMs: 1_000, include: ['progressing'] }) }))
          assert.is(unbounded.status, 'failed')
          assert.is(unbounded.status === 'failed' && unbounded.class, 'outcome_unknown')
          assert.match(unbounded.status === 'failed' ? (unbounded.message ?? '') : '', /Request timed out/)
          const until = Date.now() + 5_000
          while ((await ledger()).length < 5 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 25))
          assert.equal((await ledger()).slice(3), ['invocation-unbounded/step-1/0\tunbounded', 'invocation-unbounded/step-1/0\tcancelled'])
        },
        'progress',
      ),
  ),
)

/** `client`, passing every request on, keeping the `timeout` and `resetTimeoutOnProgress` each call was given. */
function watched(client: Client): { client: McpClient; calls: [number | undefined, boolean | undefined][] } {
  const calls: [number | undefined, boolean | undefined][] = []
  return {
    calls,
    client: {
      listTools: (params, options) => client.listTools(params, options),
      callTool: (params, _schema, options) => {
        calls.push([options?.timeout, options?.resetTimeoutOnProgress])
        return client.callTool(params, undefined, options)
      },
    },
  }
}

test(
  "without timeoutMs, a call's request timeout follows the engine's limit (context.timeoutMs): 5 s past the engine's toolTimeoutMs or the tool's own timeoutMs, reset by progress; the engine's limit ends the call, cancelled at the server",
  engineTest(
    [answer.toolCalls([{ id: 'c1', name: 'slow', arguments: { line: 'deploy' } }]), answer.toolCalls([{ id: 'c2', name: 'slow', arguments: { line: 'migrate' } }])],
    { ms: 20_000, engine: { toolTimeoutMs: 1_500 } },
    async (h) =>
      withMcpServer(h.dir, async ({ client, ledger }) => {
        const seen = watched(client)
        const tools = await toolsFromMcp(seen.client, { include: ['slow'] })
        assert.is(tools[0]?.timeoutMs, undefined, 'the tool has no limit of its own')
        const outcome = await h.run(h.input('engine-limit', { tools }))
        assert.equal(outcome, {
          status: 'failed',
          class: 'outcome_unknown',
          message: "tool slow (operation invocation-engine-limit/step-1/0) failed after its signal aborted (the tool did not finish within 1,500 ms (the engine's toolTimeoutMs)); its effect may or may not have happened",
        })
        assert.equal(seen.calls, [[6_500, true]], "the request's own limit is past the engine's, reset by progress: the engine's bounds the call")
        const deadline = Date.now() + 5_000
        while ((await ledger()).length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
        assert.equal(await ledger(), ['invocation-engine-limit/step-1/0\tdeploy', 'invocation-engine-limit/step-1/0\tcancelled'], 'the server hears the cancel at the engine\'s limit')

        // A timeoutMs set on the tool it returned (not through the option) is the call's limit as the engine gives it.
        const own = tools.map((tool) => ({ ...tool, timeoutMs: 800 }))
        const owned = await h.run(h.input('own-limit', { tools: own }))
        assert.equal(owned, {
          status: 'failed',
          class: 'outcome_unknown',
          message: 'tool slow (operation invocation-own-limit/step-1/0) failed after its signal aborted (the tool did not finish within 800 ms (its timeoutMs)); its effect may or may not have happened',
        })
        assert.equal(seen.calls[1], [5_800, true])
      }),
  ),
)

test(
  "with the engine's toolTimeoutMs (no timeoutMs option), a server that reports progress keeps a short requestTimeoutMs from firing: the engine's limit bounds the whole call",
  engineTest(
    [answer.toolCalls([{ id: 'c1', name: 'progressing', arguments: { line: 'migrate', ms: 2_000 } }]), answer.text('migrated')],
    { ms: 30_000, engine: { toolTimeoutMs: 15_000 } },
    async (h) =>
      withMcpServer(
        h.dir,
        async ({ client, ledger }) => {
          const seen = watched(client)
          // Reports every 100 ms for 2 s: past a request timeout of 1 s, which each report restarts, as the engine's limit bounds the call.
          const outcome = await h.run(h.input('progressing', { tools: await toolsFromMcp(seen.client, { requestTimeoutMs: 1_000, include: ['progressing'] }) }))
          assert.equal(outcome, { status: 'completed' })
          assert.equal(only(await factsOf(h.log, 'invocation-progressing'), 'tool.settled').map((fact) => fact.outcome), [{ status: 'succeeded', output: 'done' }])
          assert.equal(seen.calls, [[1_000, true]], 'requestTimeoutMs as given, reset by progress')
          assert.equal(await ledger(), ['invocation-progressing/step-1/0\tmigrate'])
        },
        'progress',
      ),
  ),
)

test(
  'a signal aborted before the call: its reason is thrown and nothing is sent, even by a client that would not check the signal itself',
  () =>
    withTimeout(
      withTempDir((dir) =>
        withMcpServer(dir, async ({ client, ledger }) => {
          // Shaped as McpClient, passing every request on to the SDK's client, without the signal.
          const careless: McpClient = {
            listTools: (params, options) => client.listTools(params, options),
            callTool: (params, _schema, options) => client.callTool(params, undefined, { ...options, signal: undefined }),
          }
          for (const [which, given] of [
            ['the SDK client', client],
            ['a client that ignores the signal', careless],
          ] as const) {
            const [tool] = await toolsFromMcp(given, { include: ['append_line'] })
            const controller = new AbortController()
            const reason = new Error('the user stopped the run')
            controller.abort(reason)
            const context: Parameters<ToolDefinition['execute']>[1] = {
              signal: controller.signal,
              operationId: `inv/step-1/${which}`,
              attempt: 1,
              invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'inv' },
              addSecret: () => undefined,
              progress: () => undefined,
            }
            const thrown = await Promise.resolve()
              .then(() => (tool as ToolDefinition).execute({ line: 'never sent' }, context))
              .then(
                (value: unknown) => ({ value }),
                (error: unknown) => ({ error }),
              )
            assert.equal(thrown, { error: reason }, which)
            assert.ok('error' in thrown && thrown.error === reason, `${which}: the reason itself, not an OutcomeUnknownError`)
            assert.equal(await ledger(), [], `${which}: nothing sent`)
          }
        }),
      ),
      20_000,
    ),
)

test(
  "a server's own error in the words the SDK's client gives its refusal of a result, but not under the SDK's code (-32603, not -32602), is the call's failure: the server answered, having done nothing",
  engineTest([answer.toolCalls([{ id: 'c1', name: 'internal_refusal', arguments: { line: 'ship' } }]), answer.text('failed')], { ms: 20_000 }, async (h) =>
    withMcpServer(
      h.dir,
      async ({ client, ledger }) => {
        const outcome = await h.run(h.input('internal', { tools: await toolsFromMcp(client, { include: ['internal_refusal'] }) }))
        assert.equal(outcome, { status: 'completed' })
        assert.equal(only(await factsOf(h.log, 'invocation-internal'), 'tool.settled').map((fact) => fact.outcome), [
          { status: 'failed', message: "McpError: MCP error -32603: Structured content does not match the tool's output schema: data/n must be number" },
        ])
        assert.equal(await ledger(), [])
      },
      'internal',
    ),
  ),
)

test(
  'over Streamable HTTP behind a gateway: a 502 or 504 to the POST of a call (the gateway had the request and passed it on), or a 500 (the server acted, then failed), leaves a call with effects uncertain; a 503 (not passed on) and any status for a read-only tool are failures',
  engineTest(
    [
      answer.toolCalls([{ id: 'c1', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c2', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c5', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c3', name: 'pay', arguments: {} }]),
      answer.text('unavailable'),
      answer.toolCalls([{ id: 'c4', name: 'read', arguments: {} }]),
      answer.text('read failed'),
    ],
    { ms: 20_000 },
    async (h) => {
      const effects: string[] = []
      const upstream = createHttpServer((request, response) => {
        const server = new Server({ name: 'http-fixture', version: '1.0.0' }, { capabilities: { tools: {} } })
        server.setRequestHandler(ListToolsRequestSchema, () => ({
          tools: [
            { name: 'pay', inputSchema: { type: 'object' } },
            { name: 'read', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
          ],
        }))
        server.setRequestHandler(CallToolRequestSchema, (call) => {
          effects.push(`${call.params.name} ${String(call.params._meta?.idempotencyKey)}`)
          return { content: [{ type: 'text', text: 'done' }] }
        })
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
        void server.connect(transport).then(() => transport.handleRequest(request, response))
      })
      // The gateway: passes each request on and relays the answer, but answers the next status of `statuses`
      // to a tools/call instead (502, 504 and 500 once the server behind it answered, 503 without passing it on).
      const statuses: number[] = [502, 504, 500, 503, 502]
      let upstreamUrl = ''
      const gateway = createHttpServer((request, response) => {
        const chunks: Buffer[] = []
        request.on('data', (chunk: Buffer) => chunks.push(chunk))
        request.on('end', () => {
          void (async () => {
            const body = Buffer.concat(chunks)
            const headers = new Headers()
            for (const [key, value] of Object.entries(request.headers)) {
              if (typeof value === 'string' && !['host', 'connection', 'content-length'].includes(key)) headers.set(key, value)
            }
            const isCall = request.method === 'POST' && (JSON.parse(body.toString('utf8') || '{}') as { method?: unknown }).method === 'tools/call'
            const status = isCall ? statuses.shift() : undefined
            if (status === 503) {
              response.writeHead(503, { 'content-type': 'text/plain' }).end('Service Unavailable')
              return
            }
            const answered = await fetch(upstreamUrl, { method: request.method ?? 'GET', headers, ...(request.method === 'POST' ? { body } : {}) })
            const text = await answered.text()
            if (status !== undefined) {
              response.writeHead(status, { 'content-type': 'text/plain' }).end(STATUS_TEXT[status] ?? String(status))
              return
            }
            const relayed: Record<string, string> = {}
            for (const key of ['content-type', 'mcp-session-id']) {
              const value = answered.headers.get(key)
              if (value !== null) relayed[key] = value
            }
            response.writeHead(answered.status, relayed).end(text)
          })().catch(() => response.destroy())
        })
      })
      const listen = (server: typeof upstream) => new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)))
      const client = new Client({ name: 'factstate-test', version: '1.0.0' })
      try {
        upstreamUrl = `http://127.0.0.1:${await listen(upstream)}/mcp`
        await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${await listen(gateway)}/mcp`)))
        const tools = await toolsFromMcp(client, { trustReadOnlyHint: true })
        for (const [run, status] of [
          ['gw-502', 502],
          ['gw-504', 504],
        ] as const) {
          const outcome = await h.run(h.input(run, { tools }))
          assert.equal(outcome, {
            status: 'failed',
            class: 'outcome_unknown',
            message: `tool pay (operation invocation-${run}/step-1/0) reported its outcome unknown: the MCP server's HTTP gateway answered ${status} to the call of pay, after the request was sent: the server behind it may have run the call; cause: Streamable HTTP error: Error POSTing to endpoint: ${STATUS_TEXT[status]}; its effect may or may not have happened`,
          })
          assert.equal(only(await factsOf(h.log, `invocation-${run}`), 'tool.settled'), [], run)
        }
        const internal = await h.run(h.input('gw-500', { tools }))
        assert.equal(internal, {
          status: 'failed',
          class: 'outcome_unknown',
          message:
            'tool pay (operation invocation-gw-500/step-1/0) reported its outcome unknown: the MCP server (or an HTTP gateway before it) answered 500 to the call of pay, after the request was sent: it may have run the call before it failed; cause: Streamable HTTP error: Error POSTing to endpoint: Internal Server Error; its effect may or may not have happened',
        })
        assert.equal(only(await factsOf(h.log, 'invocation-gw-500'), 'tool.settled'), [], 'not told to the model as a failure it would make again')
        const unavailable = await h.run(h.input('gw-503', { tools }))
        assert.equal(unavailable, { status: 'completed' })
        assert.equal(only(await factsOf(h.log, 'invocation-gw-503'), 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message: 'Streamable HTTP error: Error POSTing to endpoint: Service Unavailable' }])
        const read = await h.run(h.input('gw-read', { tools }))
        assert.equal(read, { status: 'completed' })
        assert.equal(only(await factsOf(h.log, 'invocation-gw-read'), 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message: 'Streamable HTTP error: Error POSTing to endpoint: Bad Gateway' }])
        assert.equal(effects, ['pay invocation-gw-502/step-1/0', 'pay invocation-gw-504/step-1/0', 'pay invocation-gw-500/step-1/0', 'read invocation-gw-read/step-1/0'], 'the server acted behind each 502, 504 and 500, not behind the 503')
        assert.equal(statuses, [])
      } finally {
        await client.close().catch(() => undefined)
        for (const server of [gateway, upstream]) {
          server.closeAllConnections()
          if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()))
        }
      }
    },
  ),
)

test(
  "over SSE behind a gateway, as over Streamable HTTP: a 502, 504 or 500 to the POST of a call with effects leaves it uncertain; a 503, the SDK server's own 500 to a message it never passed on, and any status for a read-only tool are failures",
  engineTest(
    [
      answer.toolCalls([{ id: 'c1', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c2', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c3', name: 'pay', arguments: {} }]),
      answer.toolCalls([{ id: 'c4', name: 'pay', arguments: {} }]),
      answer.text('unavailable'),
      answer.toolCalls([{ id: 'c5', name: 'pay', arguments: {} }]),
      answer.text('not passed on'),
      answer.toolCalls([{ id: 'c6', name: 'read', arguments: {} }]),
      answer.text('read failed'),
    ],
    { ms: 20_000 },
    async (h) => {
      const effects: string[] = []
      // The server's answers to calls are held until the test ends: the client has settled each call on its POST's status by then.
      const held: (() => void)[] = []
      const acted: (() => void)[] = []
      const transports = new Map<string, SSEServerTransport>()
      const upstream = createHttpServer((request, response) => {
        const url = new URL(request.url ?? '/', 'http://127.0.0.1')
        if (request.method === 'GET' && url.pathname === '/sse') {
          const transport = new SSEServerTransport('/messages', response)
          transports.set(transport.sessionId, transport)
          const server = new Server({ name: 'sse-fixture', version: '1.0.0' }, { capabilities: { tools: {} } })
          server.setRequestHandler(ListToolsRequestSchema, () => ({
            tools: [
              { name: 'pay', inputSchema: { type: 'object' } },
              { name: 'read', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
            ],
          }))
          server.setRequestHandler(CallToolRequestSchema, async (call) => {
            effects.push(`${call.params.name} ${String(call.params._meta?.idempotencyKey)}`)
            acted.shift()?.()
            await new Promise<void>((resolve) => held.push(resolve))
            return { content: [{ type: 'text', text: 'done' }] }
          })
          void server.connect(transport)
          return
        }
        const transport = transports.get(url.searchParams.get('sessionId') ?? '')
        if (request.method === 'POST' && url.pathname === '/messages' && transport !== undefined) void transport.handlePostMessage(request, response)
        else response.writeHead(404).end()
      })
      // The gateway: relays the event stream and each POST, but answers a tools/call the next status of
      // `statuses` instead (once the server behind it has acted on it for 502, 504 and 500; without passing
      // it on for 503, and for the 500 in the SDK server's words for a message it did not pass on).
      const statuses: (number | 'not dispatched')[] = [502, 504, 500, 503, 'not dispatched', 502]
      let upstreamPort = 0
      const gateway = createHttpServer((request, response) => {
        // Passes the request (its `body` read already, for a POST) on, and its answer back when `answer`.
        const relay = (body: Buffer | undefined, answer: boolean) =>
          new Promise<void>((resolve, reject) => {
            const headers = { ...request.headers, host: `127.0.0.1:${upstreamPort}` }
            const out = httpRequest({ host: '127.0.0.1', port: upstreamPort, method: request.method, path: request.url, headers }, (answered) => {
              if (answer) {
                response.writeHead(answered.statusCode ?? 502, answered.headers)
                answered.pipe(response)
              } else answered.resume()
              answered.on('end', resolve)
            })
            out.on('error', reject)
            out.end(body)
          })
        if (request.method === 'GET') {
          void relay(undefined, true).catch(() => response.destroy())
          return
        }
        const chunks: Buffer[] = []
        request.on('data', (chunk: Buffer) => chunks.push(chunk))
        request.on('end', () => {
          void (async () => {
            const body = Buffer.concat(chunks)
            const isCall = (JSON.parse(body.toString('utf8') || '{}') as { method?: unknown }).method === 'tools/call'
            const status = isCall ? statuses.shift() : undefined
            if (status === undefined) {
              await relay(body, true)
              return
            }
            if (status === 503) {
              response.writeHead(503, { 'content-type': 'text/plain' }).end(STATUS_TEXT[503])
              return
            }
            if (status === 'not dispatched') {
              response.writeHead(500).end('SSE connection not established')
              return
            }
            const done = new Promise<void>((resolve) => acted.push(resolve))
            await relay(body, false)
            await done
            response.writeHead(status, { 'content-type': 'text/plain' }).end(STATUS_TEXT[status])
          })().catch(() => response.destroy())
        })
      })
      const listen = (server: typeof upstream) => new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)))
      const client = new Client({ name: 'factstate-test', version: '1.0.0' })
      try {
        upstreamPort = await listen(upstream)
        await client.connect(new SSEClientTransport(new URL(`http://127.0.0.1:${await listen(gateway)}/sse`)))
        const tools = await toolsFromMcp(client, { trustReadOnlyHint: true })
        for (const [run, status, said] of [
          ['sse-502', 502, "the MCP server's HTTP gateway answered 502 to the call of pay, after the request was sent: the server behind it may have run the call"],
          ['sse-504', 504, "the MCP server's HTTP gateway answered 504 to the call of pay, after the request was sent: the server behind it may have run the call"],
          ['sse-500', 500, 'the MCP server (or an HTTP gateway before it) answered 500 to the call of pay, after the request was sent: it may have run the call before it failed'],
        ] as const) {
          const outcome = await h.run(h.input(run, { tools }))
          assert.equal(outcome, {
            status: 'failed',
            class: 'outcome_unknown',
            message: `tool pay (operation invocation-${run}/step-1/0) reported its outcome unknown: ${said}; cause: Error POSTing to endpoint (HTTP ${status}): ${STATUS_TEXT[status]}; its effect may or may not have happened`,
          })
          assert.equal(only(await factsOf(h.log, `invocation-${run}`), 'tool.settled'), [], run)
        }
        for (const [run, message] of [
          ['sse-503', 'Error POSTing to endpoint (HTTP 503): Service Unavailable'],
          ['sse-undispatched', 'Error POSTing to endpoint (HTTP 500): SSE connection not established'],
          ['sse-read', 'Error POSTing to endpoint (HTTP 502): Bad Gateway'],
        ] as const) {
          assert.equal(await h.run(h.input(run, { tools })), { status: 'completed' }, run)
          assert.equal(only(await factsOf(h.log, `invocation-${run}`), 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message }], run)
        }
        assert.equal(effects, ['pay invocation-sse-502/step-1/0', 'pay invocation-sse-504/step-1/0', 'pay invocation-sse-500/step-1/0', 'read invocation-sse-read/step-1/0'], 'the server acted behind each 502, 504 and 500, not behind the 503 nor the undispatched 500')
        assert.equal(statuses, [])
      } finally {
        for (const release of held.splice(0)) release()
        await client.close().catch(() => undefined)
        for (const server of [gateway, upstream]) {
          server.closeAllConnections()
          if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()))
        }
      }
    },
  ),
)

test(
  "cancelMeansNotDone: a call the SDK cancelled at the server is recorded as not done: a cancelled run ends cancelled, its session needing no reconciliation; past timeoutMs the run goes on; the client's own request timeout is a failure; a tool it is false for stays uncertain",
  engineTest(
    [
      answer.toolCalls([{ id: 'c1', name: 'slow', arguments: { line: 'deploy' } }]),
      // (cancelled during its tool: the next answer is the next run's, in the same session)
      answer.text('next message answered'),
      answer.toolCalls([{ id: 'c2', name: 'slow', arguments: { line: 'migrate' } }]),
      answer.text('not migrated'),
      answer.toolCalls([{ id: 'c3', name: 'slow', arguments: { line: 'backup' } }]),
      answer.text('backup failed'),
      answer.toolCalls([{ id: 'c4', name: 'slow', arguments: { line: 'restore' } }]),
    ],
    { ms: 30_000 },
    async (h) =>
      withMcpServer(h.dir, async ({ client, ledger }) => {
        // The fixture's ledger has each call as received and its cancel as heard: a server this option fits undoes, or never commits, on the cancel.
        const heard = async (lines: number) => {
          const deadline = Date.now() + 5_000
          while ((await ledger()).length < lines && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
          return ledger()
        }
        const tools = await toolsFromMcp(client, { cancelMeansNotDone: true, include: ['slow'] })
        const running = await h.start(h.input('cancel', { tools }), {
          onToolProgress: () => running.cancel('user-stop'),
        })
        assert.equal(await running.wait(), { status: 'cancelled', source: 'user-stop' })
        const facts = await factsOf(h.log, 'invocation-cancel')
        assert.equal(only(facts, 'tool.settled').map((fact) => fact.outcome), [
          { status: 'succeeded', output: { done: false, reason: 'the call was not done: it was cancelled (user-stop), and the MCP server does not act on a cancelled call (cancelMeansNotDone)' } },
        ])
        assert.equal((await h.log.prefix(100, 1 << 20)).projectInvocation('invocation-cancel').uncertainOperations, [])
        assert.equal(await heard(2), ['invocation-cancel/step-1/0\tdeploy', 'invocation-cancel/step-1/0\tcancelled'], 'the server was sent notifications/cancelled')
        assert.equal(await h.run(h.input('after-cancel', { tools, session: 'session-cancel' })), { status: 'completed' }, 'the next message needs no reconciliation')

        // Past the tool's timeoutMs: the model is told the call was not done, and the run goes on.
        const timed = await h.run(h.input('timed', { tools: await toolsFromMcp(client, { cancelMeansNotDone: true, timeoutMs: 500, include: ['slow'] }) }))
        assert.equal(timed, { status: 'completed' })
        assert.equal(only(await factsOf(h.log, 'invocation-timed'), 'tool.settled').map((fact) => fact.outcome), [
          {
            status: 'succeeded',
            output: { done: false, reason: 'the call was not done: it was cancelled (the tool did not finish within 500 ms (its timeoutMs)), and the MCP server does not act on a cancelled call (cancelMeansNotDone)' },
          },
        ])
        assert.equal((await heard(4)).slice(2), ['invocation-timed/step-1/0\tmigrate', 'invocation-timed/step-1/0\tcancelled'])

        // The client's own request timeout cancels the request too: the call's failure, the model told.
        const stopped = await h.run(h.input('request-timeout', { tools: await toolsFromMcp(client, { cancelMeansNotDone: (tool) => tool.name === 'slow', requestTimeoutMs: 400, include: ['slow'] }) }))
        assert.equal(stopped, { status: 'completed' })
        assert.equal(only(await factsOf(h.log, 'invocation-request-timeout'), 'tool.settled').map((fact) => fact.outcome), [
          {
            status: 'failed',
            message:
              'the MCP client stopped waiting for the call of slow (its request timeout) and cancelled it, and the MCP server does not act on a cancelled call (cancelMeansNotDone): it was not done; cause: McpError: MCP error -32001: Request timed out',
          },
        ])
        assert.equal((await heard(6)).slice(4), ['invocation-request-timeout/step-1/0\tbackup', 'invocation-request-timeout/step-1/0\tcancelled'])

        // A tool the function says false for: a cancel leaves its call uncertain, as without the option.
        const others = await toolsFromMcp(client, { cancelMeansNotDone: (tool) => tool.name !== 'slow', include: ['slow'] })
        const uncertain = await h.start(h.input('uncertain', { tools: others }), { onToolProgress: () => uncertain.cancel('user-stop') })
        const outcome = await uncertain.wait()
        assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
        assert.equal(only(await factsOf(h.log, 'invocation-uncertain'), 'tool.settled'), [])

        // A signal aborted before the call: nothing is sent, and the call was not done.
        const before = (await heard(8)).length
        const controller = new AbortController()
        controller.abort('user-stop')
        const context: Parameters<ToolDefinition['execute']>[1] = {
          signal: controller.signal,
          operationId: 'inv/step-1/0',
          attempt: 1,
          invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'inv' },
          addSecret: () => undefined,
          progress: () => undefined,
        }
        assert.equal(await (tools[0] as ToolDefinition).execute({ line: 'never sent' }, context), { done: false, reason: 'the call was not done: it was not sent: its signal had aborted (user-stop)' })
        assert.is((await ledger()).length, before, 'nothing sent')
      }),
  ),
)

test.run()
