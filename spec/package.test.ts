/**
 * The package as a user installs it: `npm pack`'s tarball, unpacked into a fresh project whose
 * node_modules holds only factstate's declared dependencies (linked from this repository's). A
 * plain-JavaScript consumer imports every subpath and runs an agent step, the inspector serves its
 * page, generated paths run (a crash path in a child process) as the README's testing kit shows,
 * the CLI runs from the package's bin, and a TypeScript consumer type-checks against the
 * shipped declarations. Catches files missing from `files`, exports that point nowhere, runtime
 * imports of dev dependencies, declarations that do not resolve, and source maps without their sources.
 */
import { execFile } from 'node:child_process'
import { readFile, mkdir, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { REPO_ROOT } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const run = promisify(execFile)

interface PackedFile {
  path: string
  mode: number
}

/** Packs the built package into `dir` (without running `prepare`: `npm test` has just built it). */
async function pack(dir: string): Promise<{ tarball: string; files: PackedFile[] }> {
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: REPO_ROOT })
  const [packed] = JSON.parse(stdout) as { filename: string; files: PackedFile[] }[]
  assert.ok(packed, 'npm pack described its tarball')
  return { tarball: join(dir, packed.filename), files: packed.files }
}

/** A project with the tarball unpacked as node_modules/factstate and only its declared dependencies beside it. */
async function consumerProject(dir: string, tarball: string): Promise<string> {
  const app = join(dir, 'app')
  const modules = join(app, 'node_modules')
  await mkdir(modules, { recursive: true })
  await run('tar', ['-xzf', tarball, '-C', dir])
  await run('mv', [join(dir, 'package'), join(modules, 'factstate')])
  const manifest = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; peerDependencies: Record<string, string> }
  // The optional peers (Node types for the TypeScript consumer, the OpenTelemetry API for
  // factstate/opentelemetry) and an OpenTelemetry SDK, as a user's project would have them.
  for (const name of [...Object.keys(manifest.dependencies), ...Object.keys(manifest.peerDependencies), '@opentelemetry/sdk-trace-base']) {
    const parent = join(modules, name, '..')
    await mkdir(parent, { recursive: true })
    await symlink(join(REPO_ROOT, 'node_modules', name), join(modules, name))
  }
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
  return app
}

const consumerJs = `
import { Engine, EventLog, recoverInvocations, successorOf } from 'factstate'
import { answer, scriptedModelServer, invocationPaths } from 'factstate/testing'
import { serveInspector } from 'factstate/inspector'
import { toolsFromMcp } from 'factstate/mcp'
import { anthropicClient } from 'factstate/anthropic'
import { telemetryFromLog } from 'factstate/opentelemetry'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'

const server = await scriptedModelServer([
  answer.toolCalls([{ name: 'add', arguments: { a: 2, b: 3 } }]),
  answer.text('5'),
])
const log = await EventLog.open('./log')
await recoverInvocations(log)
const engine = new Engine({ log })
// Spans from the log's facts, on a tracer of the application's own SDK.
const spanExporter = new InMemorySpanExporter()
const telemetry = telemetryFromLog(log, { tracer: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] }).getTracer('consumer'), from: 1 })
let ran = 0
const outcome = await engine.run({
  invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
  provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'm' },
  configuration: { cwd: process.cwd() },
  tools: [{ name: 'add', execute: async ({ a, b }) => { ran += 1; return a + b } }],
  work: { kind: 'message', content: 'add 2 and 3' },
})
const inspector = await serveInspector({ log, engine })
const html = await (await fetch(inspector.url)).text()
const scripts = [...html.matchAll(/src="([^"]+)"/g)].map((m) => m[1])
const statuses = await Promise.all(scripts.map(async (src) => (await fetch(new URL(src, inspector.url))).status))
await inspector.close()
const paths = invocationPaths({ maxSteps: 1, maxRuns: 1 })
// An MCP client is typed by its shape: the package needs no MCP SDK.
const mcpTools = await toolsFromMcp({
  listTools: async () => ({ tools: [{ name: 'files.read', inputSchema: { type: 'object' } }] }),
  callTool: async () => ({ content: [{ type: 'text', text: 'read' }] }),
})
const mcpResult = await mcpTools[0].execute({}, { operationId: 'op', signal: new AbortController().signal, progress: () => {} })
// An Anthropic SDK client is typed by its shape too: the package needs no @anthropic-ai/sdk.
const sent = []
const claude = anthropicClient({
  apiKey: 'sk-ant-consumer-0123456789',
  messages: {
    create: (params, options) => {
      sent.push([params, options.maxRetries])
      const message = { type: 'message', id: 'msg_1', content: [{ type: 'text', text: 'hello' }], stop_reason: 'end_turn', usage: { input_tokens: 3, output_tokens: 1 } }
      return { withResponse: async () => ({ data: message, response: { headers: new Headers({ 'request-id': 'req_1' }) }, request_id: 'req_1' }) }
    },
  },
})
const claudeAnswer = await claude.complete({ body: { model: 'claude', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }], max_tokens: 10 }, bodyText: '', signal: new AbortController().signal, timeoutMs: 1000 })
const highWater = log.head().highWater
// The follower ends once it has read every fact written before the close.
await log.close()
await telemetry.done
console.log(JSON.stringify({
  anthropic: [claudeAnswer, sent],
  mcp: [mcpTools.map((tool) => tool.name), mcpResult],
  outcome,
  ran,
  scripts: scripts.length,
  statuses,
  paths: paths.length,
  successor: successorOf({ handoffId: 'h', hostEpoch: 'e', rootRunId: 'r', successorRunId: 'r2', successorInvocationId: 'i2', claimId: 'c' }, { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }).invocationId,
  highWater,
  spans: spanExporter.getFinishedSpans().map((span) => span.name).sort(),
}))
await server.close()
`

// The README's "Testing your agent" pattern, from the package: a crash path runs in a child
// process (a plain .js script that calls runPathChild with the same tools) and is killed there.
const pathChild = `
import { runPathChild } from 'factstate/testing'
import { tools } from './tools.mjs'
await runPathChild({ tools: tools() })
`
const pathTools = `
export const tools = () => [{
  name: 'create_ticket',
  description: 'Files a ticket',
  inputSchema: { type: 'object', properties: { title: { type: 'string' } } },
  async execute({ title }) { return { id: 'T-1', title } },
}]
`
const pathRunner = `
import { fileURLToPath } from 'node:url'
import { invocationPaths, runPath } from 'factstate/testing'
import { tools } from './tools.mjs'
const childScript = fileURLToPath(new URL('./path-child.mjs', import.meta.url))
const paths = invocationPaths({ maxSteps: 1, maxRuns: 1 })
const chosen = [paths.find((path) => path.crash), paths.find((path) => path.seal), paths.find((path) => path.rollback)]
const results = []
for (const path of chosen) {
  const result = await runPath(path, { tools: tools(), toolCall: { name: 'create_ticket', arguments: { title: 'printer on fire' } }, childScript })
  results.push({ id: result.pathId, crash: path.crash, seal: path.seal, rollback: path.rollback, ledger: result.checks.ledger, states: result.checks.states })
}
console.log(JSON.stringify(results))
`

const consumerTs = `
import { Engine, EventLog, FactstateError, recoverInvocations, type HandoffPause, type RunInput, type ToolDefinition } from 'factstate'
import { answer, scriptedModelServer, type ScriptedModelServer } from 'factstate/testing'
import { serveInspector, type InvocationDetail, type Overview } from 'factstate/inspector'
import { toolsFromMcp, type McpClient } from 'factstate/mcp'
import { anthropicClient, type AnthropicSdk } from 'factstate/anthropic'
import { telemetryFromLog, type LogTelemetry } from 'factstate/opentelemetry'
import { trace } from '@opentelemetry/api'
import type { ModelClient } from 'factstate'

// Spans from a log, on the application's tracer; the handle is typed.
export const traced = (log: EventLog): LogTelemetry => telemetryFromLog(log, { tracer: trace.getTracer('app') })
// @ts-expect-error from is a seq
export const wrongFrom = (log: EventLog): LogTelemetry => telemetryFromLog(log, { tracer: trace.getTracer('app'), from: '1' })
// @ts-expect-error a tracer, a meter or both: with neither there is nothing to record
export const untraced = (log: EventLog): LogTelemetry => telemetryFromLog(log, {})
// The provider by name, or by a function of the run (the facts do not record it).
export const named = (log: EventLog): LogTelemetry => telemetryFromLog(log, { tracer: trace.getTracer('app'), providerName: (run) => (run.model.startsWith('claude') ? 'anthropic' : 'openai') })

// A model client for Anthropic's Messages API over an SDK client typed by its shape.
export const claude = (sdk: AnthropicSdk): ModelClient => anthropicClient(sdk, { maxTokens: 1024 })
// @ts-expect-error maxTokens is a number
export const wrong = (sdk: AnthropicSdk): ModelClient => anthropicClient(sdk, { maxTokens: '1024' })

// The tools of an MCP server, typed; an approval decided by the server's hints.
export const fromMcp = (client: McpClient): Promise<ToolDefinition[]> => toolsFromMcp(client, { prefix: 'x_', needsApproval: (tool) => tool.annotations?.destructiveHint === true })

// The inspector's JSON API is typed for scripts that read it.
export const listed = (overview: Overview): string[] => overview.sessions.map((session) => session.sessionId)
export const states = (detail: InvocationDetail): string[] => detail.entries.map((entry) => entry.stateAfter)
// A tool may return its result without a promise.
export const clock: ToolDefinition = { name: 'clock', execute: () => ({ at: 1 }) }
// What recovery closed is always failed, so its class reads without narrowing.
export const classes = (log: EventLog) => recoverInvocations(log, { onClosed: ({ outcome }) => void outcome.class.length })

export async function main(): Promise<number> {
  const server: ScriptedModelServer = await scriptedModelServer([answer.text('hi')])
  const log = await EventLog.open('./log')
  const input: RunInput = {
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'm' },
    configuration: { cwd: '/srv' },
    tools: [],
    work: { kind: 'message', content: 'x' },
  }
  const outcome = await new Engine({ log }).run(input)
  const pause: HandoffPause | undefined = (await log.runSource('s', 'r'))?.pause
  const inspector = await serveInspector({ log })
  await inspector.close()
  await log.close()
  await server.close()
  try {
    await EventLog.open('')
  } catch (error) {
    if (error instanceof FactstateError) return error.code.length
  }
  return outcome.status === 'completed' && pause === undefined ? 0 : 1
}
`

/**
 * A consumer under \`exactOptionalPropertyTypes\`, passing \`undefined\` to every optional input (as
 * \`apiKey: process.env.OPENAI_API_KEY\` does), which the runtime accepts. \`skipLibCheck\` stays on:
 * xstate's own declarations do not compile under that flag (statelyai/xstate#4613).
 */
const consumerStrictTs = `
import { Engine, EventLog, FactstateError, ModelExecutor, defineTool, isFactstateError, type FactstateErrorCode, type FactstateErrorOf, type Invocation, type ModelClient, type RunInput, type RuntimeEvent, type ToolDefinition } from 'factstate'
import { z } from 'zod'
import { answer, invocationPaths, type RunPathOptions } from 'factstate/testing'
import { serveInspector } from 'factstate/inspector'
import { anthropicClient, type AnthropicSdk } from 'factstate/anthropic'

const unset = <T>(_value: T): T | undefined => undefined

export async function main(dir: string): Promise<string> {
  const log = await EventLog.open(dir, { durability: unset('sync' as const) })
  const client: ModelClient = {
    async complete() {
      return { kind: 'completed', output: { text: unset('x'), toolCalls: [], finishReason: 'stop', usage: { inputTokens: unset(1), outputTokens: unset(1) } } }
    },
  }
  const model = new ModelExecutor({ timeoutMs: unset(1), retries: unset(1), backoffMs: unset(1), maxBackoffMs: unset(1), createClient: () => client })
  const engine = new Engine({ log, model, now: unset(() => 1), eventId: unset((invocation, ordinal) => \`\${invocation.invocationId}/\${ordinal}\`) })
  const tool: ToolDefinition = { name: 'echo', description: unset('d'), inputSchema: unset({}), execute: async (input) => input }
  // @ts-expect-error the input is the model's JSON, unchecked: a tool may not claim a narrower type than it checks
  const claimed: ToolDefinition = { name: 'typed', async execute(input: { to: string }) { return input.to } }
  const input: RunInput = {
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9', model: 'm', apiKey: process.env.NO_SUCH_KEY, headers: unset({}) },
    providerOptions: unset({}),
    configuration: { cwd: '/srv', workspaceIdentity: unset('w') },
    mainOutputLimit: unset(1),
    maxSteps: unset(1),
    requestFingerprint: unset('f'),
    tools: [tool, claimed],
    work: { kind: 'message', content: 'x', allowPriorUnknown: unset(true) },
  }
  const outcome = await engine.run(input, { signal: unset(new AbortController().signal) })
  for await (const stored of log.events({ from: unset(1), to: unset(1) })) void stored
  const inspector = await serveInspector({ log, engine: unset(engine), port: unset(0), host: unset('127.0.0.1' as const), maxEvents: unset(1), maxBytes: unset(1) })
  await inspector.close()
  await log.close()
  const paths = invocationPaths({ maxSteps: unset(1), maxRuns: unset(1), strategy: unset('events' as const), crashes: unset(false), include: unset(() => true), maxPaths: unset(1) })
  const options: RunPathOptions = { tools: unset([]), toolCall: unset({ name: 'a', arguments: {} }), unknownTool: unset('u'), childScript: unset('c.js'), childExecArgv: unset([]), directory: unset('d'), stepTimeoutMs: unset(1), model: unset('m'), durability: unset('os' as const) }
  const answers = [answer.text('t', { hold: unset(true), stream: unset(false), finishReason: unset('stop'), usage: unset(null) }), answer.status(429, { retryAfter: unset(1), retryAfterMs: unset(1), hold: unset(true) })]
  const error: unknown = new Error('x')
  // Narrowed to the code asked for.
  const busy: 'RUN_BUSY' | undefined = isFactstateError(error, 'RUN_BUSY') ? error.code : undefined
  return busy ?? \`\${outcome.status} \${paths.length} \${Object.keys(options).length} \${answers.length}\`
}

// The Anthropic client's options take undefined too.
export const claude = (sdk: AnthropicSdk): ModelClient => anthropicClient(sdk, { maxTokens: unset(1), secrets: unset(['a-secret-value']) })

// An append's optional members take undefined, as the log does (the same bytes as one left out).
export async function end(log: EventLog, invocation: Invocation, reason: string | undefined, fingerprint: string | undefined): Promise<number[]> {
  const opened: RuntimeEvent = {
    id: \`\${invocation.invocationId}/1\`, recordedAt: 1, invocation,
    fact: {
      type: 'invocation.opened',
      input: { kind: 'message', content: 'x', requestFingerprint: fingerprint, priorUnknown: undefined, parent: undefined },
      configuration: { cwd: '/srv', workspaceIdentity: unset('w') },
      execution: { model: 'm', providerOptions: {}, cwd: '/srv', tools: { catalogDigest: 'd', names: [], digests: undefined }, mainOutputLimit: unset(1), instructions: unset('i'), replayBase: undefined },
    },
  }
  return log.appendAll([opened, { id: \`\${invocation.invocationId}/2\`, recordedAt: 2, invocation, fact: { type: 'invocation.ended', outcome: { status: 'failed', class: 'engine_error', message: reason } } }])
}

// A finished step of events() has no value (void, not any); return() takes none.
export async function first(log: EventLog): Promise<number> {
  const reader = log.events({ from: 1 })
  const step = await reader.next()
  // @ts-expect-error a finished step's value is void
  if (step.done) return step.value.seq
  // @ts-expect-error return() takes no value
  await reader.return('anything')
  return step.value.seq
}

// Guarded without a code: every refusal, each code with its details, for a typed switch.
export function remedy(error: unknown): string {
  if (!isFactstateError(error)) return 'not ours'
  const typed: FactstateErrorOf<FactstateErrorCode> = error
  switch (typed.code) {
    case 'RUN_BUSY': return typed.details.runId
    default: return typed.code
  }
}

// A construction's code, and a subclass's, is the code it names.
export class DiskFull extends FactstateError<'LOG_IO'> {}
export const codes: ['RUN_BUSY', 'LOG_IO'] = [
  new FactstateError('RUN_BUSY', 'busy', { details: { sessionId: 's', reason: 'active', runId: 'r', invocationId: 'i' } }).code,
  new DiskFull('LOG_IO', 'disk', { details: { reason: 'no_space' } }).code,
]

// An async parse: the input is what it resolves to.
const Order = z.object({ order: z.string() })
export const typed = defineTool({ name: 'typed', execute: (input) => input.order.length, parseInput: Order.parseAsync })
export const annotated = defineTool({ name: 'annotated', execute: (input) => input.order.length, parseInput: (raw: unknown) => Order.parse(raw) })
`

/**
 * A consumer whose tsconfig names no \`types\` and no DOM (TypeScript 6's default), with
 * \`skipLibCheck\`: the declarations' reference to Node's types still types \`AbortSignal\`, \`Headers\`
 * and \`Buffer\` in them (each \`@ts-expect-error\` below is an error only then; as \`any\` they compile).
 */
const consumerNoTypesTs = `
import { retryAfterMsOf, type StartOptions, type ToolContext } from 'factstate'
import type { ScriptedModelServer } from 'factstate/testing'
// @ts-expect-error a signal is an AbortSignal
export const start: StartOptions = { signal: { bogus: true } }
// @ts-expect-error an AbortSignal has no such member
export const member = (context: ToolContext) => context.signal.notAMember
export const aborted = (context: ToolContext): boolean => context.signal.aborted
// @ts-expect-error a fetch Headers, not a plain object
export const retryAfter = (): number | undefined => retryAfterMsOf({ 'retry-after': '1' })
export const seen = (server: ScriptedModelServer): number => server.requests.length
`

test('the packed tarball installs and works: every subpath, the inspector page, the CLI, and the type declarations', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const { tarball, files } = await pack(dir)
      const paths = files.map((file) => file.path)
      for (const needed of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'dist/index.js', 'dist/index.d.ts', 'dist/testing/index.js', 'dist/inspector/index.js', 'dist/mcp/index.js', 'dist/anthropic/index.js', 'dist/opentelemetry/index.js', 'dist/inspector/page/app.js', 'dist/bin/factstate.js', 'examples/quick-start.ts', 'examples/resume-after-crash.ts', 'docs/performance.md', 'docs/inspector.png']) {
        assert.ok(paths.includes(needed), `the tarball holds ${needed}`)
      }
      // The examples and docs the README names ship too, as documentation (the examples as TypeScript, run with tsx).
      const stray = paths.filter((path) => !/^(dist\/|README\.md$|CHANGELOG\.md$|LICENSE$|package\.json$|examples\/[a-z-]+\.ts$|docs\/[a-z-]+\.(md|png)$)/.test(path) || (/\.ts$/.test(path) && !/\.d\.ts$/.test(path) && !path.startsWith('examples/')))
      assert.equal(stray, [], 'nothing but the build, the README, the examples and docs, the license and the manifest (no sources, tests or benchmarks)')
      const { dependencies, devDependencies, peerDependencies } = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as Record<string, Record<string, string>>
      // A peer dependency (@opentelemetry/api, imported by factstate/opentelemetry alone) is the user's to install.
      const devOnly = new Set(Object.keys(devDependencies ?? {}).filter((name) => !(name in (dependencies ?? {})) && !(name in (peerDependencies ?? {}))))
      for (const path of paths.filter((path) => path.endsWith('.js'))) {
        const text = await readFile(join(REPO_ROOT, path), 'utf8')
        // Static, side-effect, re-export and dynamic imports, subpaths included (\`uvu/assert\`).
        for (const [, specifier = ''] of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"./][^'"]*)['"]/g)) {
          const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : (specifier.split('/')[0] ?? '')
          assert.not.ok(devOnly.has(name), `${path} imports ${specifier}, a development dependency`)
        }
      }

      const app = await consumerProject(dir, tarball)
      // Source maps carry their sources: the .ts files are not shipped, and a map pointing at missing
      // files makes bundlers warn and debuggers show nothing.
      const maps = paths.filter((path) => path.endsWith('.js.map'))
      assert.ok(maps.length > 10)
      for (const path of maps) {
        const map = JSON.parse(await readFile(join(app, 'node_modules', 'factstate', path), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] }
        const carried = map.sources.every((_, index) => typeof map.sourcesContent?.[index] === 'string')
        assert.ok(carried, `${path} carries the text of its sources`)
      }
      // An example run where the package put it, as the README says (tsx installed beside it, as a user would).
      await symlink(join(REPO_ROOT, 'node_modules', 'tsx'), join(app, 'node_modules', 'tsx'))
      const example = await run(process.execPath, ['--import', 'tsx', join('node_modules', 'factstate', 'examples', 'quick-start.ts')], { cwd: app })
      assert.match(example.stdout, /^completed · 1 email\(s\) sent · log digest sha256:[0-9a-f]{64}\nThe report is on its way to ops\.\n$/, 'the shipped Quick start example runs from the package')
      await writeFile(join(app, 'consumer.mjs'), consumerJs)
      const { stdout } = await run(process.execPath, ['consumer.mjs'], { cwd: app })
      const result = JSON.parse(stdout.trim().split('\n').at(-1) as string) as Record<string, unknown>
      assert.equal(result.outcome, { status: 'completed' })
      assert.is(result.ran, 1, 'the tool ran once')
      assert.ok((result.scripts as number) > 0)
      assert.ok((result.statuses as number[]).every((status) => status === 200), `the page's scripts are served: ${JSON.stringify(result.statuses)}`)
      assert.ok((result.paths as number) > 0, 'path generation (xstate/graph) works from the package')
      assert.is(result.successor, 'i2')
      assert.equal(result.mcp, [['files_read'], 'read'], 'factstate/mcp maps and calls an MCP tool')
      assert.equal(
        result.anthropic,
        [
          { kind: 'completed', output: { toolCalls: [], finishReason: 'stop', text: 'hello', usage: { inputTokens: 3, outputTokens: 1 }, responseId: 'msg_1', requestId: 'req_1' } },
          [[{ model: 'claude', max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], system: 'Be brief.' }, 0]],
        ],
        'factstate/anthropic translates a request and reads a Message',
      )
      assert.equal(result.spans, ['chat m', 'chat m', 'execute_tool add', 'invoke_agent'], 'factstate/opentelemetry traces the run from its facts')

      const bin = join(app, 'node_modules', 'factstate', 'dist', 'bin', 'factstate.js')
      assert.match(await readFile(bin, 'utf8'), /^#!\/usr\/bin\/env node\n/, 'the bin starts with a shebang')
      assert.is((await run(process.execPath, [bin, '--version'], { cwd: app })).stdout.trim(), `factstate ${(JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version}`)
      // CommonJS: Node 20.19 and later load ES modules with require() (the \`default\` export conditions).
      const [major = 0, minor = 0] = process.versions.node.split('.').map(Number)
      if (major > 20 || (major === 20 && minor >= 19)) {
        const required = await run(process.execPath, ['-e', "const f = require('factstate'); console.log([typeof f.Engine, typeof require('factstate/testing').invocationPaths, typeof require('factstate/inspector').serveInspector, typeof require('factstate/mcp').toolsFromMcp, typeof require('factstate/anthropic').anthropicClient, typeof require('factstate/opentelemetry').telemetryFromLog].join(' '))"], { cwd: app })
        assert.is(required.stdout.trim(), 'function function function function function function', 'require() of every subpath')
      }
      const verify = await run(process.execPath, [bin, 'verify', 'log'], { cwd: app })
      assert.match(verify.stdout, new RegExp(`^ok: ${String(result.highWater)} events, digest sha256:[0-9a-f]{64}$`, 'm'))

      await writeFile(join(app, 'tools.mjs'), pathTools)
      await writeFile(join(app, 'path-child.mjs'), pathChild)
      await writeFile(join(app, 'paths.mjs'), pathRunner)
      const pathRuns = JSON.parse((await run(process.execPath, ['paths.mjs'], { cwd: app })).stdout.trim().split('\n').at(-1) as string) as {
        crash: boolean
        seal: boolean
        rollback: boolean
        ledger: number
        states: number
      }[]
      assert.equal(pathRuns.map((r) => [r.crash, r.seal, r.rollback].some(Boolean)), [true, true, true], 'a crash, a seal and a rollback path ran')
      assert.ok(pathRuns[0]?.crash, 'the first is the crash path, run in a child process of the package')
      assert.ok(pathRuns.every((r) => r.states > 0 && r.ledger > 0), 'each path checked states and the tool ledger')

      await writeFile(join(app, 'consumer.ts'), consumerTs)
      await writeFile(
        join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, types: ['node'], skipLibCheck: false },
          files: ['consumer.ts'],
        }),
      )
      const tsc = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
      const checked = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app }).then(
        () => '',
        (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}` || 'tsc failed',
      )
      assert.is(checked, '', 'a TypeScript consumer type-checks against the shipped declarations')

      await writeFile(join(app, 'strict.ts'), consumerStrictTs)
      await writeFile(
        join(app, 'tsconfig.strict.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'es2022',
            module: 'nodenext',
            moduleResolution: 'nodenext',
            strict: true,
            exactOptionalPropertyTypes: true,
            noUncheckedIndexedAccess: true,
            verbatimModuleSyntax: true,
            noEmit: true,
            types: ['node'],
            skipLibCheck: true,
          },
          files: ['strict.ts'],
        }),
      )
      const strict = await run(process.execPath, [tsc, '-p', 'tsconfig.strict.json'], { cwd: app }).then(
        () => '',
        (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}` || 'tsc failed',
      )
      assert.is(strict, '', 'a consumer under exactOptionalPropertyTypes may pass undefined to every optional input')

      // The entry declarations name Node's types themselves, so a consumer that loads none still gets them.
      for (const entry of ['dist/index.d.ts', 'dist/testing/index.d.ts', 'dist/inspector/index.d.ts', 'dist/mcp/index.d.ts', 'dist/anthropic/index.d.ts', 'dist/opentelemetry/index.d.ts']) {
        const text = await readFile(join(app, 'node_modules', 'factstate', entry), 'utf8')
        assert.ok(text.startsWith('/// <reference types="node" preserve="true" />\n'), `${entry} begins with a reference to Node's types`)
      }
      await writeFile(join(app, 'no-types.ts'), consumerNoTypesTs)
      await writeFile(
        join(app, 'tsconfig.no-types.json'),
        JSON.stringify({
          compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', lib: ['es2022'], types: [], strict: true, noEmit: true, skipLibCheck: true },
          files: ['no-types.ts'],
        }),
      )
      const noTypes = await run(process.execPath, [tsc, '-p', 'tsconfig.no-types.json'], { cwd: app }).then(
        () => '',
        (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}` || 'tsc failed',
      )
      assert.is(noTypes, '', 'without "types": ["node"], the declarations still type AbortSignal and Headers (not any)')
      // \`moduleResolution: node\` (node10, TypeScript 5) reads no \`exports\`: \`typesVersions\` maps the subpaths to their declarations.
      const { typesVersions } = JSON.parse(await readFile(join(app, 'node_modules', 'factstate', 'package.json'), 'utf8')) as { typesVersions: Record<string, Record<string, string[]>> }
      assert.equal(Object.keys(typesVersions['*'] ?? {}).sort(), ['anthropic', 'inspector', 'mcp', 'opentelemetry', 'testing'])
      for (const [subpath, [target = ''] = []] of Object.entries(typesVersions['*'] ?? {})) {
        assert.ok(paths.includes(target.replace(/^\.\//, '')), `typesVersions maps ${subpath} to ${target}, which the tarball holds`)
      }
    }),
    120_000,
  ))

test.run()
