/**
 * Secrets: canary values in `apiKey` and in every header travel every path — runs with tools,
 * model failures whose error bodies echo the secrets back (whole and masked), retries, a handoff
 * and its successor, a refused input, a process killed with SIGKILL in the middle of a tool and
 * the recovery after it, the CLI's `log` output. The server proves the canaries were sent; then
 * no canary (nor any 8-byte piece of one, nor its base64 or hex) is in any file of the log
 * directory, in any fact, or in the CLI's output.
 */
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import {
  Engine,
  EventLog,
  FactstateError,
  ModelExecutor,
  OpenAIChatClient,
  type ModelResponse,
  type ProviderConfig,
  type RunInput,
  type StoredEvent,
  type HandoffIntent,
  type ToolContext,
  childRunFor,
  intentFor as libraryIntentFor,
  recoverInvocations,
  successorOf,
} from '../index.js'
import { type RecordedRequest, type ScriptedAnswer, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { ALL, CWD, effectTool, intentFor, sequenceOf } from './support/faults-engine.js'
import { everyFile } from './support/faults-files.js'
import { ROOT, killGroup, runScript } from './support/faults-process.js'
import { bounded } from './support/temp.js'
import { ensureBuilt } from './support/built.js'
import { DECLARED_SECRET, type Secrets, redact, redactAnswer, redactDeep, secretsOf, withToolSecret } from '../actors/redaction.js'

/** An engine on `log` whose custom model client answers with `complete`, never retried. */
const answeringWith = (log: EventLog, complete: (provider: ProviderConfig) => Promise<ModelResponse>) =>
  new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: (provider) => ({ complete: () => complete(provider) }) }) })

const canary = (name: string) => `${name}-${randomBytes(16).toString('hex')}`
const API_KEY = canary('sk-canary-key')
const HEADERS: Record<string, string> = {
  'x-canary-one': canary('header-one'),
  'x-canary-two': canary('header-two'),
  'openai-organization': canary('org'),
}
const SECRETS = [API_KEY, ...Object.values(HEADERS)]

/** Every run of `width` characters of `secret`. */
function piecesOf(secret: string, width: number): string[] {
  const pieces: string[] = []
  for (let at = 0; at + width <= secret.length; at += 1) pieces.push(secret.slice(at, at + width))
  return pieces
}

/** The first user message of a chat request, and how many tool results it carries. */
function conversationOf(request: RecordedRequest): { user: string; tools: number } {
  const messages = (request.body?.messages ?? []) as { role: string; content: string }[]
  return { user: messages.find((m) => m.role === 'user')?.content ?? '', tools: messages.filter((m) => m.role === 'tool').length }
}

/** Every form in which a secret (or a piece of it) could leak. */
const NEEDLES: string[] = SECRETS.flatMap((secret) => [...piecesOf(secret, 8), Buffer.from(secret).toString('base64'), Buffer.from(secret).toString('hex')])

/** The needles found in `bytes` (utf8 and utf16le). */
function leaks(bytes: Buffer | string): string[] {
  const buffer = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes
  return NEEDLES.filter((needle) => buffer.includes(Buffer.from(needle, 'utf8')) || buffer.includes(Buffer.from(needle, 'utf16le')))
}

async function assertNoLeakIn(directory: string, what: string): Promise<number> {
  const files = await everyFile(directory)
  assert.ok(files.length >= 4, `${what}: the log directory has its files`)
  for (const file of files) assert.equal(leaks(file.bytes), [], `${what}: ${file.path}`)
  return files.length
}

function assertNoLeakInFacts(events: readonly StoredEvent[], what: string): void {
  assert.equal(leaks(JSON.stringify(events)), [], `${what}: facts`)
}

function provider(baseUrl: string): RunInput['provider'] {
  return { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey: API_KEY, headers: { ...HEADERS } }
}

function run(baseUrl: string, name: string, extra: Partial<RunInput> = {}): RunInput {
  return {
    invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: provider(baseUrl),
    providerOptions: { temperature: 0 },
    configuration: { cwd: CWD, workspaceIdentity: 'workspace-1' },
    mainOutputLimit: 100,
    maxSteps: 6,
    tools: [effectTool()],
    work: { kind: 'message', content: `question ${name}` },
    ...extra,
  }
}

/** The server echoes the secrets it received in its error bodies: whole, masked like OpenAI does, and as headers. */
function echoing(request: RecordedRequest): { whole: string; masked: string } {
  const authorization = String(request.headers.authorization ?? '')
  const key = authorization.replace(/^Bearer /, '')
  const header = String(request.headers['x-canary-one'] ?? '')
  return {
    whole: `Incorrect API key provided: ${key}; header ${header}; ${authorization}`,
    masked: `Incorrect API key provided: ${key.slice(0, 8)}************${key.slice(-4)}`,
  }
}

function scriptFor(request: RecordedRequest): ScriptedAnswer {
  const { user, tools } = conversationOf(request)
  const echo = echoing(request)
  switch (user) {
    case 'question tools':
      return tools === 0 ? answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]) : answer.text('done')
    case 'question unauthorized':
      return answer.status(401, { body: { error: { message: echo.whole, type: 'invalid_request_error' } } })
    case 'question masked':
      return answer.status(401, { body: { error: { message: echo.masked, type: 'invalid_request_error' } } })
    case 'question retried': {
      // Attempt 1: a 500 echoing everything; attempt 2: a 429 in plain text; attempt 3: an answer.
      const attempt = retried.get(user) ?? 0
      retried.set(user, attempt + 1)
      if (attempt === 0) return answer.status(500, { body: { error: { message: echo.whole } } })
      if (attempt === 1) return answer.status(429, { retryAfterMs: 5, body: echo.whole })
      return answer.text('done')
    }
    case 'question malformed':
      return answer.malformed({ body: `not json, but it quotes ${echo.whole}` })
    case 'question handoff':
      return answer.text('done')
    case 'question killed':
      return tools === 0 ? answer.toolCalls([{ name: 'echo', arguments: { value: 2 } }]) : answer.text('done')
    case 'question after':
      return answer.text('done')
    default:
      return answer.text('done')
  }
}
const retried = new Map<string, number>()

/** Starts the child that is killed in the middle of a tool; resolves once it was killed. */
async function killInTool(dir: string, baseUrl: string): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', join('spec', 'support', 'faults-secrets-child.ts'), dir, baseUrl], {
    cwd: ROOT,
    env: { ...process.env, FAULTS_API_KEY: API_KEY, FAULTS_HEADERS: JSON.stringify(HEADERS) },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
  })
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_, signal) => resolve(signal)))
  try {
    await new Promise<void>((resolve, reject) => {
      let out = ''
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        out += chunk
        if (out.includes('tool running\n')) resolve()
      })
      child.on('exit', () => reject(new Error(`the child ended before its tool ran: ${stderr}`)))
    })
    child.kill('SIGKILL')
    assert.is(await exited, 'SIGKILL')
  } finally {
    killGroup(child.pid)
  }
}

test(
  'secrets: canaries in apiKey and every header reach the provider, but no file of the log directory, no fact and no CLI output',
  bounded(60_000, async (dir) => {
    const server = await scriptedModelServer(scriptFor)
    const path = join(dir, 'log')
    let log = await EventLog.open(path)
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, retries: 2, backoffMs: 5 }) })
      // Runs, failures whose bodies echo the secrets, retries.
      assert.equal(await engine.run(run(server.baseUrl, 'tools')), { status: 'completed' })
      const unauthorized = await engine.run(run(server.baseUrl, 'unauthorized'))
      assert.is(unauthorized.status, 'failed')
      assert.equal(leaks(JSON.stringify(unauthorized)), [], 'the outcome returned to the caller')
      const masked = await engine.run(run(server.baseUrl, 'masked'))
      assert.equal(leaks(JSON.stringify(masked)), [], 'a masked echo of the key')
      assert.equal(await engine.run(run(server.baseUrl, 'retried')), { status: 'completed' })
      assert.is((await engine.run(run(server.baseUrl, 'malformed'))).status, 'failed')
      // A refused input carrying the secrets.
      try {
        await engine.start({ ...run(server.baseUrl, 'refused'), maxSteps: 0 })
        assert.unreachable('maxSteps 0 is refused')
      } catch (error) {
        assert.ok(error instanceof FactstateError && error.code === 'RUN_INVALID_INPUT')
        assert.equal(leaks(`${(error as Error).message} ${JSON.stringify((error as FactstateError).details)}`), [], 'the refusal')
      }
      // A handoff: hold, seal, successor.
      const handoff = run(server.baseUrl, 'handoff')
      const sealing = await engine.start(handoff)
      const held = await sealing.handoff().reserve(intentFor('handoff', 'run-handoff')).ready()
      const pause = await held.commit()
      assert.equal(leaks(JSON.stringify(pause)), [], 'the pause')
      await sealing.wait()
      const source = (await log.runSource('session-handoff', 'run-handoff'))?.boundary
      assert.ok(source)
      const successor = run(server.baseUrl, 'handoff')
      successor.invocation = successorOf(pause.intent, source.invocation)
      successor.work = { kind: 'handoff', source, pause }
      assert.equal(await engine.run(successor), { status: 'completed' })
      await engine.drain()
      await log.close()

      // A process killed with SIGKILL while its tool runs, then recovery and reconciliation here.
      await killInTool(path, server.baseUrl)
      log = await EventLog.open(path)
      assert.is(await recoverInvocations(log), 1)
      const after = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
      const next = run(server.baseUrl, 'after')
      next.invocation = { ...next.invocation, sessionId: 'session-killed' }
      next.work = { kind: 'message', content: 'question after', allowPriorUnknown: true }
      assert.equal(await after.run(next), { status: 'completed' })

      const { events } = await log.prefix(ALL.events, ALL.bytes)
      assert.equal(sequenceOf(events, 'invocation-killed').at(-1), 'invocation.ended:failed/outcome_unknown')
      assert.equal(sequenceOf(events, 'invocation-retried'), [
        'invocation.opened',
        'model.requested',
        'model.interrupted:retryable_failure',
        'model.requested',
        'model.interrupted:retryable_failure',
        'model.requested',
        'model.completed',
        'invocation.ended:completed',
      ])
      assert.equal(sequenceOf(events, 'invocation-unauthorized').at(-1), 'invocation.ended:failed/model_failed')
      assert.equal(sequenceOf(events, 'invocation-malformed').at(-1), 'invocation.ended:failed/model_malformed')
      assertNoLeakInFacts(events, 'after every path')
      await log.close()

      // The canaries were really in use: every request carried them.
      assert.is(server.requests.length, 11, '2 tools, 1 + 1 unauthorized, 3 retried, 1 malformed, 1 successor, 1 killed, 1 after')
      for (const request of server.requests) {
        assert.is(request.headers.authorization, `Bearer ${API_KEY}`)
        for (const [name, value] of Object.entries(HEADERS)) assert.is(request.headers[name], value, name)
        assert.equal(leaks(request.bodyText), [], 'the request body carries no secret')
      }

      await assertNoLeakIn(path, 'closed after every path')
      // Reopening moves the write-ahead log into tables; look again.
      log = await EventLog.open(path)
      assert.is((await log.verify()).events, events.length)
      await log.close()
      await assertNoLeakIn(path, 'after a reopen')

      // The CLI's log output, human and JSON: the built CLI, as a user runs it (rebuilt first when a source is newer).
      ensureBuilt()
      for (const args of [['log', path, '--json'], ['log', path]]) {
        const result = await runScript(join('dist', 'bin', 'factstate.js'), args, 30_000)
        assert.is(result.code, 0, `factstate ${args.join(' ')}: ${result.stderr}`)
        assert.equal(leaks(result.stdout + result.stderr), [], `factstate ${args[0]} ${args.slice(2).join(' ')}`)
        if (args.includes('--json')) assert.is(result.stdout.trim().split('\n').length, events.length, 'one JSON line a fact')
      }
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  'secrets: credentials in the URL, a Basic credential echoed decoded, a custom client quoting the key and a client that cannot be made reach no fact and no file',
  bounded(30_000, async (dir) => {
    const user = canary('basic-user')
    const password = canary('basic-password')
    const basic = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`
    const needles = [API_KEY, user, password].flatMap((secret) => [
      ...piecesOf(secret, 8),
      Buffer.from(secret).toString('base64').replace(/=+$/, ''),
      Buffer.from(secret).toString('hex'),
    ])
    const found = (text: string | Buffer) => needles.filter((needle) => Buffer.from(text).includes(Buffer.from(needle)))
    // The server answers 401 quoting the credentials it got, decoded.
    const server = await scriptedModelServer((request) => {
      const authorization = String(request.headers.authorization ?? '')
      const decoded = Buffer.from(authorization.replace(/^Basic /, ''), 'base64').toString('utf8')
      return answer.status(401, { body: { error: { message: `invalid credentials ${decoded} (from ${authorization})` } } })
    })
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const base = (name: string): RunInput => ({ ...run(server.baseUrl, name), provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted', headers: { authorization: basic } } })
      const plain = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      const basicOutcome = await plain.run(base('basic'))
      assert.is(basicOutcome.status, 'failed')
      assert.is(server.requests.length, 1, 'the Basic credential was sent')

      const withUrl = { ...base('url'), provider: { kind: 'openai-chat', baseUrl: server.baseUrl.replace('http://', `http://${user}:${password}@`), model: 'scripted' } } as RunInput
      const before = log.head()
      const refusedUrl = await plain.start(withUrl).then(
        () => undefined,
        (error: FactstateError) => error,
      )
      assert.is(refusedUrl?.code, 'RUN_INVALID_INPUT')
      assert.equal(log.head(), before, 'a refused run writes nothing')

      const quoting = answeringWith(log, async (provider) => {
        throw new Error(`401: the key ${provider.apiKey} was refused`)
      })
      const quoted = await quoting.run({ ...run(server.baseUrl, 'quoting'), tools: [] })
      assert.is(quoted.status, 'failed')
      assert.match(quoted.status === 'failed' ? (quoted.message ?? '') : '', /\[redacted\]/)

      const broken = new Engine({
        log,
        model: new ModelExecutor({
          createClient: (provider) => {
            throw new Error(`no client for the key ${provider.apiKey}`)
          },
        }),
      })
      const beforeBroken = log.head()
      const refusedClient = await broken.start({ ...run(server.baseUrl, 'broken'), tools: [] }).then(
        () => undefined,
        (error: FactstateError) => error,
      )
      assert.is(refusedClient?.code, 'RUN_INVALID_INPUT')
      assert.equal(log.head(), beforeBroken, 'a client that cannot be made writes nothing')
      assert.equal(found(refusedClient?.message ?? ''), [], 'the refusal quotes no secret')
      // The session is not left with a run that never started: the same run is admitted (this server refuses every key).
      const admitted = await plain.run({ ...run(server.baseUrl, 'broken'), tools: [] })
      assert.equal(admitted.status === 'failed' ? admitted.class : admitted.status, 'model_failed')

      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      assert.ok(events.some((stored) => stored.event.fact.type === 'model.interrupted'), 'the failures were recorded')
      assert.equal(found(JSON.stringify(events)), [], 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.equal(found(file.bytes), [], file.path)
  }),
)

test(
  'secrets: a run whose recorded settings carry the API key (provider options, instructions, the message, the configuration, the model) is refused and writes nothing; a placeholder key in the message is admitted',
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([answer.text('done'), answer.text('done')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log })
      const carrying: [string, RunInput][] = [
        ['providerOptions', run(server.baseUrl, 'options', { providerOptions: { api_key: API_KEY } })],
        ['instructions', run(server.baseUrl, 'instructions', { instructions: `Use the key ${API_KEY} when asked.` })],
        ['work.content', { ...run(server.baseUrl, 'content'), work: { kind: 'message', content: `my key is ${API_KEY}` } }],
        ['configuration', run(server.baseUrl, 'configuration', { configuration: { cwd: CWD, workspaceIdentity: API_KEY } })],
        ['provider.model', { ...run(server.baseUrl, 'model'), provider: { ...provider(server.baseUrl), model: `scripted-${API_KEY}` } }],
      ]
      for (const [field, input] of carrying) {
        const before = log.head()
        const refused = await engine.start(input).then(
          () => undefined,
          (error: FactstateError) => error,
        )
        assert.is(refused?.code, 'RUN_INVALID_INPUT', field)
        assert.equal(refused?.details, { fields: [field] }, field)
        assert.not.match(refused?.message ?? '', API_KEY, 'the refusal does not quote the key')
        assert.equal(log.head(), before, `${field}: nothing was written`)
      }
      // A credential header's value is the provider's credential too; an Idempotency-Key is not, and may be the run's own fingerprint.
      const headerKey = canary('x-api-key-value')
      const viaHeader = { ...run(server.baseUrl, 'header'), provider: { ...provider(server.baseUrl), headers: { 'x-api-key': headerKey } }, providerOptions: { key: headerKey } }
      const refusedHeader = await engine.start(viaHeader).then(
        () => undefined,
        (error: FactstateError) => error,
      )
      assert.equal([refusedHeader?.code, refusedHeader?.details], ['RUN_INVALID_INPUT', { fields: ['providerOptions'] }], 'an x-api-key header value in providerOptions')
      const fingerprint = 'req-7f3a9c1e2b4d6f80'
      const idempotent = { ...run(server.baseUrl, 'idempotent'), provider: { ...provider(server.baseUrl), headers: { 'Idempotency-Key': fingerprint } }, requestFingerprint: fingerprint, tools: [] }
      assert.equal(await engine.run(idempotent), { status: 'completed' }, 'an Idempotency-Key equal to the fingerprint is admitted')
      // A placeholder key (what local servers take) is everyday text: a message that says it is recorded.
      const placeholder = { ...run(server.baseUrl, 'placeholder'), provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted', apiKey: 'lm-studio' }, work: { kind: 'message', content: 'run it on lm-studio' } } as RunInput
      assert.equal(await engine.run(placeholder), { status: 'completed' })
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.is(file.bytes.includes(Buffer.from(API_KEY)), false, file.path)
  }),
)

test(
  'secrets: a key echoed in answers, by tools, in an abort reason, encoded or cut by the quote limit, or by a custom client reaches no fact and no file',
  bounded(30_000, async (dir) => {
    const referer = 'https://app.example.test/agent'
    const keyOf = (request: RecordedRequest) => String(request.headers.authorization ?? '').replace(/^Bearer /, '')
    /** The received key, encoded four ways. */
    const encoded = (received: string) =>
      [
        Buffer.from(`Bearer ${received}`).toString('base64'),
        Buffer.from(`key=${received}`).toString('base64url'),
        Buffer.from(received).toString('hex').toUpperCase(),
        encodeURIComponent(`${received}/tenant one`),
      ].join(' ')
    const server = await scriptedModelServer((request) => {
      const { user, tools } = conversationOf(request)
      const key = keyOf(request)
      switch (user) {
        case 'question echoed':
          // A proxy that echoes the key in a successful answer: in the text, a tool call's arguments, split across stream chunks.
          return tools === 0
            ? answer.toolCalls([{ name: 'leaky', arguments: { value: key } }, { name: 'failing', arguments: { value: 1 } }], { text: `calling with ${key}`, stream: true })
            : answer.text(`done, your key was ${key}; see ${referer}`, { stream: false })
        case 'question encoded':
          return answer.status(401, { body: { error: { message: `refused ${encoded(key)}` } } })
        case 'question cut':
          // Quoted messages are cut at 300 characters: a key straddling the cut must not leave its first characters.
          return answer.status(400, { body: { error: { message: `${'x'.repeat(293)}${key} and\tmore` } } })
        case 'question aborted':
          return answer.hang()
        default:
          return answer.text('done')
      }
    })
    const key = API_KEY
    const tools: RunInput['tools'] = [
      { name: 'leaky', description: 'returns what it got', async execute(input) { return { got: input, mine: `the key is ${key}`, docs: 'https://docs.example.test/keys' } } },
      { name: 'failing', description: 'fails quoting the key', async execute() { throw new Error(`the sub-agent was refused: Incorrect API key ${key}`) } },
    ]
    const needles = [...piecesOf(key, 7), Buffer.from(key).toString('hex'), Buffer.from(key).toString('hex').toUpperCase()]
    const found = (text: string | Buffer) => [...new Set(needles.filter((needle) => Buffer.from(text).includes(Buffer.from(needle))))]
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const withReferer = (name: string, extra: Partial<RunInput> = {}): RunInput => {
        const input = run(server.baseUrl, name, { tools, ...extra })
        return { ...input, provider: { ...input.provider, headers: { ...HEADERS, 'HTTP-Referer': referer } } }
      }
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      const echoed = await engine.run(withReferer('echoed'))
      assert.equal(echoed, { status: 'completed' })
      // The tools got the answer as recorded (the key replaced), and the next request replayed it.
      const replayed = JSON.stringify(server.requests.at(-1)?.body)
      assert.match(replayed, /\[redacted\]/)
      assert.equal(found(replayed), [], 'the next request replays the redacted answer')
      for (const name of ['encoded', 'cut']) {
        const outcome = await engine.run(withReferer(name, { tools: [] }))
        assert.is(outcome.status, 'failed', name)
        assert.equal(found(JSON.stringify(outcome)), [], `${name}: the outcome`)
      }
      const stop = new AbortController()
      const hanging = await engine.start(withReferer('aborted', { tools: [] }), { signal: stop.signal })
      await server.seen(server.requests.length)
      stop.abort(`operator stopped the run holding key ${key}`)
      const aborted = await hanging.wait()
      assert.is(aborted.status, 'cancelled')
      assert.match(aborted.status === 'cancelled' ? aborted.source : '', /operator stopped the run holding key \[redacted\]/)

      // A custom client: an answer quoting the key, then one with a member named after it (left out of the record),
      // then one that is malformed (a tool call without a name) whose status names the key.
      let calls = 0
      const custom = answeringWith(log, async (provider) => {
        calls += 1
        if (calls === 1) return { kind: 'completed', output: { text: `ERROR 401: invalid key ${provider.apiKey}`, toolCalls: [], finishReason: 'stop' } }
        if (calls === 2) return { kind: 'completed', output: { text: 'x', toolCalls: [], finishReason: 'stop', [`debug_${provider.apiKey}`]: 1 } } as never
        return { kind: 'interrupted', status: `failed_${provider.apiKey}`, message: `no such status ${provider.apiKey}` } as never
      })
      assert.equal(await custom.run(withReferer('custom-text', { tools: [] })), { status: 'completed' })
      assert.equal(await custom.run(withReferer('custom-member', { tools: [] })), { status: 'completed' })
      const malformed = await custom.run(withReferer('custom-malformed', { tools: [] }))
      assert.equal(malformed.status === 'failed' ? malformed.class : malformed.status, 'model_malformed')
      assert.equal(found(JSON.stringify(malformed)), [], 'the malformed answer is described without the key')

      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      const text = JSON.stringify(events)
      assert.equal(found(text), [], 'facts')
      assert.equal(leaks(text), [], 'facts: no piece of any secret')
      // Redacted where it was, and nothing else: the referer is a header, but not a credential, so only its whole value goes.
      const settled = events.filter((stored) => stored.event.fact.type === 'tool.settled').map((stored) => JSON.stringify(stored.event.fact))
      assert.is(settled.length, 2)
      assert.match(settled.join(' '), /the sub-agent was refused: Incorrect API key \[redacted\]/)
      // In data (an answer), only credentials go: the referer header's value is everyday text there.
      assert.ok(text.includes(`done, your key was [redacted]; see ${referer}`), 'the answer keeps the referer')
      // Each encoded form loses all but the characters it shares with what surrounds the key (at most 2 bytes at each end).
      const refused = /refused [^"]*/.exec(text)?.[0] ?? ''
      const forms = encoded(key).split(' ')
      assert.is(refused.split('[redacted]').length - 1, forms.length, refused)
      for (const form of forms) assert.not.ok(refused.includes(form.slice(6, -6)), `${form} in ${refused}`)
      assert.ok(text.includes('https://docs.example.test/keys'), 'pieces of a header that is not a credential stay (here: the scheme of a URL a tool returned)')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.equal(found(file.bytes), [], file.path)
  }),
)

test(
  "secrets: a key or a header value echoed in the provider's x-request-id (whole, masked, base64, hex), on an answer, a stream or a refusal, reaches no fact and no file; the id is recorded redacted",
  bounded(30_000, async (dir) => {
    const keyOf = (request: RecordedRequest) => String(request.headers.authorization ?? '').replace(/^Bearer /, '')
    // Each request's id echoes what it was sent, in another form.
    const forms = [
      (request: RecordedRequest) => `req-${keyOf(request)}`,
      (request: RecordedRequest) => `req-${keyOf(request).slice(0, 8)}****${keyOf(request).slice(-4)}`,
      (request: RecordedRequest) => `req-${Buffer.from(keyOf(request)).toString('base64')}`,
      (request: RecordedRequest) => `req-${Buffer.from(String(request.headers['x-canary-one'] ?? '')).toString('hex')}`,
    ]
    const server = await scriptedModelServer(
      (request) => {
        switch (conversationOf(request).user) {
          case 'question streamed':
            return answer.text('done', { stream: true })
          case 'question refused':
            return answer.status(401, { body: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' } } })
          default:
            return answer.text('done', { stream: false })
        }
      },
      { requestIds: (request, index) => forms[index % forms.length]!(request) },
    )
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, retries: 0 }) })
      const outcomes = []
      for (const name of ['plain', 'streamed', 'refused', 'again']) outcomes.push(await engine.run(run(server.baseUrl, name)))
      assert.equal(
        outcomes.map((outcome) => outcome.status),
        ['completed', 'completed', 'failed', 'completed'],
      )
      assert.equal(leaks(JSON.stringify(outcomes)), [], 'the outcomes returned to the caller')
      const { events } = await log.prefix(ALL.events, ALL.bytes)
      // Recorded, each without its secret: the key whole, masked (its pieces), base64, the header's hex.
      const ids = events.flatMap(({ event: { fact } }) => (fact.type === 'model.completed' ? [fact.output.requestId] : fact.type === 'model.interrupted' ? [fact.provider?.requestId] : []))
      // (A masked key's last four characters, and the padding of its base64, are no secret; the leak checks below say so.)
      assert.equal(ids.length, 4)
      assert.equal([ids[0], ids[1], ids[3]], ['req-[redacted]', `req-[redacted]****${API_KEY.slice(-4)}`, 'req-[redacted]'])
      assert.match(ids[2] ?? '', /^req-\[redacted\][A-Za-z0-9+/=]{0,4}$/)
      const refused = outcomes[2]
      assert.equal(refused?.status === 'failed' ? refused.provider : undefined, { status: 401, code: 'invalid_api_key', type: 'invalid_request_error', requestId: ids[2] })
      assertNoLeakInFacts(events, 'request ids')
      // The server sent them, with the secrets in them.
      assert.is(server.requests.length, 4)
      await log.close()
      await assertNoLeakIn(path, 'request ids, closed')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test('secrets: redaction finds every piece of a long secret in a long message, wherever it starts', () => {
  const secret = `tok-${randomBytes(1024).toString('base64url')}`
  const provider = { kind: 'openai-chat' as const, baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: secret }
  const secrets = secretsOf(provider)
  const parts: string[] = []
  const expected: string[] = []
  for (let n = 0; n < 200; n += 1) {
    const start = (n * 37) % (secret.length - 40)
    const piece = secret.slice(start, start + 8 + (n % 30))
    parts.push(`${'y'.repeat(900)} ${piece} `)
    expected.push(`${'y'.repeat(900)} [redacted] `)
  }
  assert.is(redact(parts.join(''), secrets), expected.join(''))
  // Seven characters are not a piece; base64 of a longer text holding the key at any offset is found.
  assert.is(redact(`a ${secret.slice(100, 107)} b`, secrets), `a ${secret.slice(100, 107)} b`)
  for (const prefix of ['', 'B', 'Be', 'Bearer ']) {
    const encoded = Buffer.from(`${prefix}${secret}`).toString('base64')
    assert.not.ok(redact(encoded, secrets).includes(encoded.slice(8, 24)), `base64 after ${JSON.stringify(prefix)}`)
  }
})

test('secrets: answers and tool results lose only credentials; failure messages lose every configured value', () => {
  const token = `tok-${randomBytes(24).toString('hex')}`
  const provider = {
    kind: 'openai-chat' as const,
    baseUrl: 'http://127.0.0.1:9/v1',
    model: 'm',
    apiKey: 'none',
    headers: { 'content-type': 'application/json', 'X-Title': 'Acme Support Desk', authorization: `Bearer ${token}` },
  }
  const secrets = secretsOf(provider)
  const data = JSON.stringify({ contentType: 'application/json', answer: 'none', title: 'Acme Support Desk', leaked: token, masked: `${token.slice(0, 20)}…`, short: `${token.slice(0, 12)}…` })
  assert.is(
    redact(data, secrets.inData),
    // Data loses credentials whole: a piece of one is left (a key is echoed whole in an answer, not masked).
    JSON.stringify({ contentType: 'application/json', answer: 'none', title: 'Acme Support Desk', leaked: '[redacted]', masked: `${token.slice(0, 20)}…`, short: `${token.slice(0, 12)}…` }),
  )
  assert.is(
    redact(`HTTP 401: key none, title Acme Support Desk, type application/json, token ${token}`, secrets),
    'HTTP 401: key [redacted], title [redacted], type [redacted], token [redacted]',
  )
  // In data a credential goes whole (a key is echoed whole there, not masked); in a message, so do its runs of 8.
  assert.is(redact(`cut: ${token.slice(0, 12)}`, secrets), 'cut: [redacted]')
  // The pieces of `Bearer <token>` whole are not looked for: they begin with everyday text.
  const prose = 'send it with a Bearer tok-en or the Bearer scheme'
  assert.is(redact(prose, secrets.inData), prose)
  assert.is(redact(prose, secrets), prose)
  assert.is(redact(`Bearer ${token}`, secrets), '[redacted]')
  assert.is(redact(`Bearer ${token}`, secrets.inData), '[redacted]')
  // A tool call's arguments are redacted as the values they hold: a key with a quote and a backslash leaves them JSON.
  const quoted = secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: `"q\\${token}"` })
  const answer = redactAnswer(
    { text: 'ok', toolCalls: [{ callId: 'c1', name: 'set', arguments: JSON.stringify({ key: `"q\\${token}"`, mode: 'none' }) }], finishReason: 'tool_calls' },
    quoted.inData,
  )
  assert.equal(JSON.parse(answer.toolCalls[0]?.arguments ?? ''), { key: '[redacted]', mode: 'none' })
})

test("secrets: a tool's added secrets redact as if the engine had declared them, and leave the secrets other runs share unchanged", () => {
  const apiKey = `sk-${randomBytes(16).toString('hex')}`
  const engineKey = `pk_live_${randomBytes(12).toString('hex')}`
  const added = [`oauth-${randomBytes(20).toString('base64url')}`, ` lease "q\\${randomBytes(8).toString('hex')}" `, `jwt.${randomBytes(300).toString('base64url')}`]
  const provider = { apiKey, headers: { authorization: `Bearer ${apiKey}`, 'X-Title': 'Acme Desk', [`${DECLARED_SECRET}0`]: engineKey } }
  const shared = secretsOf(provider)
  let run = shared
  for (const secret of added) run = withToolSecret(run, secret)
  assert.is(withToolSecret(run, added[0]), run, 'the same value again changes nothing')
  // What building every secret at once, the added ones declared, gives.
  const whole = secretsOf({ apiKey, headers: { ...provider.headers, ...Object.fromEntries(added.map((secret, index) => [`${DECLARED_SECRET}added ${index}`, secret])) } })
  const texts = added.flatMap((secret) => [
    `token ${secret} ended`,
    `masked ${secret.trim().slice(2, 14)}… and ${secret.trim().slice(-9)}`,
    `Basic ${Buffer.from(`svc:${secret}`).toString('base64')}; hex ${Buffer.from(secret).toString('hex').toUpperCase()}; url ${encodeURIComponent(secret)}`,
    JSON.stringify({ key: secret, trimmed: secret.trim(), note: 'password 2024', title: 'Acme Desk', api: apiKey, engine: engineKey }),
  ])
  for (const text of texts) {
    assert.is(redact(text, run), redact(text, whole), `failure of the provider: ${text.slice(0, 40)}`)
    assert.is(redact(text, run.inToolFailures as Secrets), redact(text, whole.inToolFailures as Secrets), `tool failure: ${text.slice(0, 40)}`)
    assert.is(redact(text, run.inData), redact(text, whole.inData), `data: ${text.slice(0, 40)}`)
  }
  assert.not.ok(redact(texts[0] as string, run.inData).includes(added[0] as string), 'the comparison can fail')
  // The secrets every run of this provider shares (and their cache) still hold none of them.
  for (const secrets of [shared, secretsOf(provider)]) {
    for (const secret of added) {
      assert.ok(redact(`token ${secret}`, secrets).includes(secret), 'a failure keeps it')
      assert.ok(redact(`token ${secret}`, secrets.inToolFailures as Secrets).includes(secret), 'a tool failure keeps it')
    }
  }
  // A later addition to the run adds to its secrets in place: those made before it redact it too, and still the shared ones do not.
  const before = run
  const later = `late-${randomBytes(12).toString('hex')}`
  run = withToolSecret(run, later)
  assert.is(redact(`cut ${later.slice(3, 15)}`, run), 'cut [redacted]')
  assert.is(redact(`cut ${later.slice(3, 15)}`, shared), `cut ${later.slice(3, 15)}`)
  assert.is(redact(`cut ${later.slice(3, 15)}`, before.inToolFailures as Secrets), 'cut [redacted]')
})

test('secrets: redaction leaves everyday text alone and keeps the shape of what it redacts', () => {
  const token = `tok-${randomBytes(24).toString('hex')}`
  const secrets = secretsOf({
    kind: 'openai-chat',
    baseUrl: 'http://127.0.0.1:9/v1',
    model: 'm',
    apiKey: token,
    headers: { 'X-Title': 'Key Management Assistant', 'X-App': 'Demo', 'x-api-key': `pass🔑word-${token.slice(4, 20)}` },
  })
  // A short header's encoded forms are not looked for on their own (base64 of "Demo" at an offset is "RGVt" or "ZW1v").
  for (const prefix of ['', 'R', 'Re']) {
    const encoded = Buffer.from(`${prefix}Remember the memory demo.`).toString('base64')
    assert.is(redact(encoded, secrets), encoded)
  }
  // A title that begins with a scheme word is a title: "Management" is not a credential.
  assert.is(redact('the management console', secrets), 'the management console')
  assert.is(redact('title: Key Management Assistant', secrets), 'title: [redacted]')
  // Names that redact alike are both kept, an own __proto__ member stays a member.
  const other = `pass🔑word-${token.slice(4, 20)}`
  const output = JSON.parse(`{"__proto__":{"x":1},"${token}":"first","${other}":"second","note":"${token}"}`) as Record<string, unknown>
  const redacted = redactDeep(output, secrets.inData)
  assert.equal(Object.keys(redacted), ['__proto__', '[redacted]', '[redacted] (2)', 'note'])
  assert.equal(JSON.parse(JSON.stringify(redacted)), { ['__proto__']: { x: 1 }, '[redacted]': 'first', '[redacted] (2)': 'second', note: '[redacted]' })
  // A piece that ends inside a character outside the BMP takes the whole character: no lone surrogate is left.
  const password = `pass🔑word-${token.slice(4, 20)}`
  for (const text of [`x ${password.slice(0, 9)} y`, `x ${password.slice(5)} y`, `x ${'🔑'.repeat(3)}${password.slice(5, 14)}🔑 y`]) {
    const out = redact(text, secrets)
    assert.ok(out.includes('[redacted]'), text)
    assert.not.match(out, /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/, `${JSON.stringify(out)} has a lone surrogate`)
  }
  // A periodic secret is still found (its windows repeat at every start; a few are looked at).
  const periodic = secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: 'ab'.repeat(1_000) })
  assert.is(redact(`x ${'ab'.repeat(600)} y ${'ab'.repeat(3)}`, periodic), `x [redacted] y ${'ab'.repeat(3)}`)
})

test('secrets: a key read with its newline, a cookie value and a signature are found; arguments keep their numbers and lose an escaped key', () => {
  const key = `sk-proj-${randomBytes(20).toString('hex')}`
  const session = randomBytes(16).toString('hex')
  const signature = randomBytes(32).toString('hex')
  const secrets = secretsOf({
    kind: 'openai-chat',
    baseUrl: 'http://127.0.0.1:9/v1',
    model: 'm',
    apiKey: `${key}\n`,
    headers: {
      cookie: `session=${session}; theme=dark`,
      'x-amz-authorization': `AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261204/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=${signature}`,
    },
  })
  // Sent trimmed, so echoed trimmed.
  assert.is(redact(`proxy saw: Bearer ${key}`, secrets.inData), 'proxy saw: Bearer [redacted]')
  assert.is(redact(`session id ${session}`, secrets.inData), 'session id [redacted]')
  assert.is(redact(`sig ${signature}`, secrets.inData), 'sig [redacted]')
  assert.is(redact(`sig ${signature.slice(3, 30)}`, secrets), 'sig [redacted]')
  // Any word after the scheme; an object without a prototype.
  const third = secretsOf({ kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', headers: { authorization: `Bearer  x1 ${key}` } })
  assert.is(redact(`bad ${key}`, third.inData), 'bad [redacted]')
  assert.equal({ ...redactDeep(Object.assign(Object.create(null) as object, { k: key }), third.inData) }, { k: '[redacted]' })
  const answer = redactAnswer(
    { text: 'ok', toolCalls: [{ callId: 'c1', name: 'set', arguments: `{"n": 1e400, "z": -0, "big": 12345678901234567890, "k": "\\u0073${key.slice(1)}", "s": "${key}"}` }], finishReason: 'tool_calls' },
    secrets.inData,
  )
  assert.is(answer.toolCalls[0]?.arguments, '{"n": 1e400, "z": -0, "big": 12345678901234567890, "k": "[redacted]", "s": "[redacted]"}')
})

test(
  'secrets: an error body in UTF-16 (read as UTF-8, a NUL beside every character) that echoes the credentials reaches no fact and no file',
  bounded(30_000, async (dir) => {
    // A server (a Windows proxy's error page, say) that answers in UTF-16: fetch reads every body as
    // UTF-8, so the echoed key arrives with a NUL after each character, matching no form of the key.
    const server = createServer((request, response) => {
      request.resume()
      request.on('end', () => {
        const echoed = `Incorrect API key provided: ${request.headers.authorization}; header ${request.headers['x-canary-one']}`
        const json = request.url?.includes('json') === true
        response.writeHead(401, { 'content-type': `${json ? 'application/json' : 'text/plain'}; charset=utf-16le` })
        response.end(Buffer.from(json ? JSON.stringify({ error: { message: echoed } }) : echoed, 'utf16le'))
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      for (const [name, baseUrl] of [['utf16-text', `${base}/v1`], ['utf16-json', `${base}/json/v1`]] as const) {
        const outcome = await engine.run(run(baseUrl, name, { tools: [] }))
        assert.is(outcome.status === 'failed' ? outcome.class : outcome.status, 'model_failed', name)
        assert.match(outcome.status === 'failed' ? (outcome.message ?? '') : '', /HTTP 401/, name)
        // As given (JSON would write each NUL as an escape) and with the NULs left out.
        const message = outcome.status === 'failed' ? (outcome.message ?? '') : ''
        assert.equal([...leaks(message), ...leaks(message.replaceAll('\0', ''))], [], `${name}: the outcome`)
      }
      assertNoLeakInFacts(JSON.parse(JSON.stringify((await log.prefix(ALL.events, ALL.bytes)).events).replaceAll('\\u0000', '')), 'utf16')
    } finally {
      await log.close()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
    await assertNoLeakIn(join(dir, 'log'), 'utf16')
  }),
)

test(
  'secrets: a key in the query of a baseUrl is refused before anything is written, not quoted by the 404 hint or the server',
  bounded(30_000, async (dir) => {
    // A server that answers 404 quoting what it was asked, as many do (none of these runs may reach it).
    const server = await scriptedModelServer((request) => answer.status(404, { body: `Cannot POST ${request.path}` }))
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      for (const [name, baseUrl] of [
        // Without a path: a 404 suggests another baseUrl, quoting this one.
        ['query-root', `${server.baseUrl.replace(/\/v1$/, '')}?key=${API_KEY}`],
        ['query-v1', `${server.baseUrl}?api_key=${API_KEY}`],
        ['fragment', `${server.baseUrl}#${API_KEY}`],
      ] as const) {
        const input = { ...run(server.baseUrl, name, { tools: [] }), provider: { kind: 'openai-chat', baseUrl, model: 'scripted' } } as RunInput
        const before = log.head()
        const refused = await engine.start(input).then(
          () => undefined,
          (error: FactstateError) => error,
        )
        assert.is(refused?.code, 'RUN_INVALID_INPUT', name)
        assert.equal(log.head(), before, `${name}: a refused run writes nothing`)
        assert.equal(leaks(refused?.message ?? ''), [], `${name}: the refusal quotes no key`)
        assert.throws(() => new OpenAIChatClient(input.provider), /query/, `${name}: the client refuses it too`)
      }
      assert.is(server.requests.length, 0, 'nothing was sent')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.equal(leaks(file.bytes), [], file.path)
  }),
)

test(
  "secrets: the engine's own secrets (a tool's API key) reach no fact, no file and no request: thrown whole, cut, base64-encoded, returned as data; a run whose message holds one is refused",
  bounded(30_000, async (dir) => {
    // With a word and a year in it: its pieces are everyday text, which data must keep.
    const random = randomBytes(16).toString('hex')
    const toolKey = `pk_live_password_2024_${random}`
    /** Any 8 characters of the key's random part in a row, or its base64 (its everyday pieces, a word and a year, are everyday text). */
    const holdsKey = (text: string | Buffer): boolean => {
      const haystack = typeof text === 'string' ? text : text.toString('latin1')
      if (haystack.includes(Buffer.from(toolKey).toString('base64').slice(0, 16))) return true
      for (let at = 0; at + 8 <= random.length; at += 1) if (haystack.includes(random.slice(at, at + 8))) return true
      return false
    }
    const server = await scriptedModelServer([
      // 32303234 is the hex of "2024": a declared secret's encoded pieces must not change arguments.
      answer.toolCalls([{ id: 'call-pay', name: 'pay', arguments: { cents: 5, order: 32303234, note: 'password 2024' } }]),
      answer.toolCalls([{ id: 'call-lookup', name: 'lookup', arguments: {} }]),
      answer.text('done'),
      answer.text('reset your password: done'),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const paid: unknown[] = []
      const tools = [
        {
          name: 'pay',
          description: 'charges',
          readOnly: true,
          async execute(input: unknown): Promise<unknown> {
            paid.push(input)
            // As payment SDKs do: the key whole, then masked to its last characters, then in a Basic header echoed
            // back; and in a cause whose text a part's cut (at 1,000 characters) would split.
            // The provider's key too, in a cause of that cause, cut by the part's bound in its middle: data loses it only whole.
            throw new Error(`401 invalid api key ${toolKey}; key ending ${toolKey.slice(-12)}; sent Basic ${Buffer.from(`${toolKey}:`).toString('base64')}`, {
              cause: new Error(`${'x'.repeat(990)}${toolKey}`, { cause: new Error(`${'y'.repeat(1_000 - 20)}${API_KEY}`) }),
            })
          },
        },
        { name: 'lookup', description: 'reads', readOnly: true, execute: async () => ({ account: 'acct-1', key: toolKey }) },
      ]
      assert.throws(() => new Engine({ log, secrets: ['abcd1234'.slice(0, 7)] }), (error: FactstateError) => error.code === 'ENGINE_INVALID_OPTIONS' && error.details?.field === 'secrets' && !error.message.includes('abcd123'))
      assert.throws(() => new Engine({ log, secrets: toolKey as unknown as string[] }), (error: FactstateError) => error.code === 'ENGINE_INVALID_OPTIONS' && !holdsKey(error.message))
      assert.throws(
        () => new Engine({ log, secrets: [`${toolKey}${'k'.repeat(16_385 - toolKey.length)}`] }),
        (error: FactstateError) => error.code === 'ENGINE_INVALID_OPTIONS' && error.details?.field === 'secrets' && error.message.includes('item 0 is longer (16,385 characters)') && !holdsKey(error.message),
      )
      const secrets = [toolKey]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets })
      secrets[0] = 'changed after'
      const refused = await engine.start({ ...run(server.baseUrl, 'pasted', { tools }), work: { kind: 'message', content: `use key ${toolKey}` } }).then(
        () => undefined,
        (error: FactstateError) => error,
      )
      assert.is(refused?.code, 'RUN_INVALID_INPUT')
      assert.equal(refused?.details?.fields, ['work.content'])
      assert.not.ok(holdsKey(refused?.message ?? ''), 'the refusal does not quote it')
      assert.is(log.head().highWater, 0, 'nothing written')
      const outcome = await engine.run(run(server.baseUrl, 'tools', { tools }))
      assert.equal(outcome, { status: 'completed' })
      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      const settled = events.map((stored) => stored.event.fact).filter((fact) => fact.type === 'tool.settled')
      assert.is(settled.length, 2)
      assert.equal(paid, [{ cents: 5, order: 32303234, note: 'password 2024' }], 'the arguments reached the tool as the model wrote them')
      assert.match(JSON.stringify(settled), /401 invalid api key \[redacted\]/, 'the failure is recorded, its key redacted')
      assert.match(JSON.stringify(settled), /"key":"\[redacted\]"/, 'returned data loses a key-like secret whole')
      assert.not.ok(holdsKey(JSON.stringify(events)), `no fact holds any piece of it: ${JSON.stringify(settled)}`)
      assert.equal(leaks(JSON.stringify(events)), [], "nor any piece of the provider's key")
      assert.is(server.requests.length, 3)
      assert.not.ok(holdsKey(JSON.stringify(server.requests.map((request) => request.body))), 'the model was never told it')
      // A message with a piece of it (a word, a year) is ordinary: only the whole secret is refused.
      assert.equal(await engine.run({ ...run(server.baseUrl, 'ordinary', { tools: [] }), work: { kind: 'message', content: 'I forgot my password in 2024' } }), { status: 'completed' })
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(holdsKey(file.bytes), file.path)
  }),
)

test(
  "secrets: a tool whose description or input schema holds one of the engine's secrets is refused at the run's start, naming the tool and the field, never the secret; nothing is written or sent",
  bounded(30_000, async (dir) => {
    const toolKey = `pk_live_${randomBytes(16).toString('hex')}`
    const server = await scriptedModelServer([answer.text('done')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [toolKey] })
      const plain = { name: 'lookup', description: 'reads', readOnly: true, execute: async () => 'ok' }
      const pay = (shown: { description?: string; inputSchema?: Record<string, unknown> }) => ({ name: 'pay', execute: async () => 'paid', ...shown })
      for (const [name, tool, field] of [
        ['in the description', pay({ description: `Charges a card with the key ${toolKey}` }), 'tools.1.description'],
        ['trimmed, as the description', pay({ description: ` ${toolKey}\n` }), 'tools.1.description'],
        ['as a default in the schema', pay({ inputSchema: { type: 'object', properties: { key: { type: 'string', default: toolKey } } } }), 'tools.1.inputSchema'],
        ['as a member name in the schema', pay({ inputSchema: { type: 'object', properties: { [toolKey]: { type: 'string' } } } }), 'tools.1.inputSchema'],
      ] as const) {
        const refused = await engine.start(run(server.baseUrl, 'shown', { tools: [plain, tool] })).then(
          () => undefined,
          (error: FactstateError) => error,
        )
        assert.is(refused?.code, 'RUN_INVALID_INPUT', name)
        assert.equal(refused?.details?.fields, [field], name)
        assert.match(refused?.message ?? '', new RegExp(`^RUN_INVALID_INPUT: ${field.replaceAll('.', '\\.')}: .* of tool pay holds one of the engine's secrets`), name)
        assert.not.ok((refused?.message ?? '').includes(toolKey.slice(8, 24)), `${name}: the refusal does not quote it`)
        assert.is(log.head().highWater, 0, `${name}: nothing written`)
      }
      // The provider's own key (its apiKey, or a credential header's value) likewise, with no engine secrets at all.
      const plainEngine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      const headerKey = `hk_${randomBytes(16).toString('hex')}`
      for (const [name, given, tool, field] of [
        ['the apiKey in the description', run(server.baseUrl, 'keyed', { tools: [plain, pay({ description: `Charges with ${API_KEY}` })] }), 'pay', 'tools.1.description'],
        ['the apiKey in the schema', run(server.baseUrl, 'keyed', { tools: [pay({ inputSchema: { type: 'object', properties: { key: { const: API_KEY } } } })] }), 'pay', 'tools.0.inputSchema'],
        [
          "an x-api-key header's value in the description",
          { ...run(server.baseUrl, 'keyed', { tools: [pay({ description: `uses ${headerKey}` })] }), provider: { ...provider(server.baseUrl), headers: { 'x-api-key': headerKey } } },
          'pay',
          'tools.0.description',
        ],
      ] as const) {
        const refused = await plainEngine.start(given).then(
          () => undefined,
          (error: FactstateError) => error,
        )
        assert.is(refused?.code, 'RUN_INVALID_INPUT', name)
        assert.equal(refused?.details?.fields, [field], name)
        assert.match(refused?.message ?? '', new RegExp(`^RUN_INVALID_INPUT: ${field.replaceAll('.', '\\.')}: .* of tool ${tool} holds the provider's credential \\(its apiKey or a credential header's value\\)`), name)
        assert.not.ok([API_KEY, headerKey].some((key) => (refused?.message ?? '').includes(key.slice(4, 20))), `${name}: the refusal does not quote it`)
        assert.is(log.head().highWater, 0, `${name}: nothing written`)
      }
      assert.is(server.requests.length, 0, 'no tool list was sent')
      // A description with everyday text is sent: only a declared secret, whole, is refused.
      assert.equal(await engine.run(run(server.baseUrl, 'ordinary', { tools: [plain, pay({ description: 'charges with a pk_live key' })] })), { status: 'completed' })
      assert.is(server.requests.length, 1)
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: looking a run's tools through for the provider's credential and the engine's secrets at its start rebuilds none of the secrets the provider's runs use, run after run",
  bounded(30_000, async (dir) => {
    const toolKey = `pk_live_${randomBytes(16).toString('hex')}`
    const server = await scriptedModelServer([answer.text('one'), answer.text('two')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [toolKey] })
      const pay = { name: 'pay', description: 'charges a card', inputSchema: { type: 'object' }, execute: async () => 'paid' }
      assert.equal(await engine.run(run(server.baseUrl, 'cache-1', { tools: [pay] })), { status: 'completed' })
      // What a run of this provider redacts with (its headers and the engine's secrets), and what its client does.
      const runs = { apiKey: API_KEY, headers: { ...HEADERS, [`${DECLARED_SECRET}0`]: toolKey } }
      const built = [secretsOf(runs), secretsOf(provider(server.baseUrl))]
      assert.equal(await engine.run(run(server.baseUrl, 'cache-2', { tools: [pay] })), { status: 'completed' })
      // Built once and kept: a start that built more sets than are kept rebuilt them all (the engine's secrets, in
      // every form and by their pieces, several times over) at every run.
      assert.ok(secretsOf(runs) === built[0], "the runs' secrets were not built again")
      assert.ok(secretsOf(provider(server.baseUrl)) === built[1], "the client's were not built again")
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: a token a tool adds with context.addSecret reaches no fact, no file and no request: its call's result and failure (after it was added, on a retry's later attempt), a later call's, the rest of the run; invalid ones are TOOL_SECRET_INVALID",
  bounded(30_000, async (dir) => {
    const random = randomBytes(16).toString('hex')
    // Not key-like to the data rule (no digit needed): the tool said it is a secret, so data loses it whole.
    const token = `oauth-access-${random}`
    const later = `vault-lease-${randomBytes(16).toString('hex')}`
    /** Any 8 characters of either token's random part in a row, or its base64. */
    const holdsToken = (text: string | Buffer): boolean => {
      const haystack = typeof text === 'string' ? text : text.toString('latin1')
      for (const secret of [token, later]) {
        if (haystack.includes(Buffer.from(secret).toString('base64').slice(0, 16))) return true
        const part = secret.slice(secret.lastIndexOf('-') + 1)
        for (let at = 0; at + 8 <= part.length; at += 1) if (haystack.includes(part.slice(at, at + 8))) return true
      }
      return false
    }
    const server = await scriptedModelServer([
      answer.toolCalls([{ id: 'call-login', name: 'login', arguments: {} }]),
      answer.toolCalls([{ id: 'call-lease', name: 'lease', arguments: {} }]),
      answer.toolCalls([{ id: 'call-cached', name: 'cached', arguments: {} }]),
      answer.toolCalls([{ id: 'call-invalid', name: 'invalid', arguments: {} }]),
      // A provider that echoes it (a proxy, a model that guessed it): the run's answers lose it too.
      answer.text(`done, with ${token}`),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const attempts: number[] = []
      const refusals: unknown[] = []
      const tools = [
        {
          name: 'login',
          readOnly: true,
          retry: { retries: 1, backoffMs: 1 },
          // Attempt 1 exchanges a key for the token, adds it and throws quoting it; attempt 2 returns it without adding it again.
          execute(_input: unknown, context: ToolContext): unknown {
            attempts.push(context.attempt)
            if (context.attempt === 2) return { token, scheme: 'Bearer' }
            context.addSecret(token)
            throw new Error(`exchange answered 503 for ${token}`)
          },
        },
        {
          name: 'lease',
          readOnly: true,
          // Adds its credential, then throws quoting it whole, masked to its last characters and in a cause, base64-encoded.
          execute(_input: unknown, context: ToolContext): unknown {
            context.addSecret(later)
            throw new Error(`lease ${later} refused; ending ${later.slice(-12)}`, { cause: new Error(`sent Basic ${Buffer.from(`svc:${later}`).toString('base64')}`) })
          },
        },
        // Another tool of the run that hands out the token it cached: the run's secrets hold it.
        { name: 'cached', readOnly: true, execute: async () => ({ cached: token, lease: `${later} (expires soon)` }) },
        {
          name: 'invalid',
          readOnly: true,
          execute(_input: unknown, context: ToolContext): unknown {
            for (const value of ['short12', ' 1234567 ', 42, undefined]) {
              try {
                context.addSecret(value as string)
                refusals.push('accepted')
              } catch (error) {
                refusals.push([(error as FactstateError).code, (error as FactstateError).details, (error as Error).message.includes('short12') || (error as Error).message.includes('1234567')])
              }
            }
            // Uncaught, the refusal is the call's failure.
            context.addSecret('tiny')
            return 'not reached'
          },
        },
      ]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      const outcome = await engine.run(run(server.baseUrl, 'added', { tools }))
      assert.equal(outcome, { status: 'completed' })
      assert.equal(attempts, [1, 2], 'the login was retried once')
      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      const settled = events.map((stored) => stored.event.fact).filter((fact) => fact.type === 'tool.settled')
      assert.equal(
        settled.map((fact) => fact.outcome),
        [
          { status: 'succeeded', output: { token: '[redacted]', scheme: 'Bearer' } },
          { status: 'failed', message: `lease [redacted] refused; ending [redacted]; cause: sent Basic ${Buffer.from('svc:va').toString('base64')}[redacted]` },
          { status: 'succeeded', output: { cached: '[redacted]', lease: '[redacted] (expires soon)' } },
          { status: 'failed', message: 'FactstateError: TOOL_SECRET_INVALID: context.addSecret takes a secret of 8 characters or more (spaces around it not counted); the value is not shown' },
        ],
        JSON.stringify(settled),
      )
      const answered = events.map((stored) => stored.event.fact).filter((fact) => fact.type === 'model.completed').at(-1)
      assert.is(answered?.type === 'model.completed' ? answered.output.text : undefined, 'done, with [redacted]')
      assert.equal(refusals, [
        ['TOOL_SECRET_INVALID', { reason: 'too_short' }, false],
        ['TOOL_SECRET_INVALID', { reason: 'too_short' }, false],
        ['TOOL_SECRET_INVALID', { reason: 'not_a_string' }, false],
        ['TOOL_SECRET_INVALID', { reason: 'not_a_string' }, false],
      ])
      assert.not.ok(holdsToken(JSON.stringify(events)), 'no fact holds any piece of either')
      assert.is(server.requests.length, 5)
      assert.not.ok(holdsToken(JSON.stringify(server.requests.map((request) => request.body))), 'the model was never told either')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(holdsToken(file.bytes), file.path)
  }),
)

test(
  "secrets: a handoff intent a member of which is the provider's apiKey or one of the engine's secrets is refused at reserve() (HANDOFF_MISMATCH naming the members, never the value), before and after the run's admission, with intentFor's options too; nothing of it reaches the log's files",
  bounded(30_000, async (dir) => {
    const declared = `pk_live_${randomBytes(16).toString('hex')}`
    const server = await scriptedModelServer([answer.text('done'), answer.text('done')])
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    /** Any 8 characters in a row of either secret's random part. */
    const holdsSecret = (bytes: Buffer | string): boolean => {
      const haystack = typeof bytes === 'string' ? bytes : bytes.toString('latin1')
      return [API_KEY, declared].some((secret) => piecesOf(secret.slice(secret.lastIndexOf('-') + 1).slice(-32), 8).some((piece) => haystack.includes(piece)))
    }
    const attempt = (reserve: () => { cancel(): void } | undefined): FactstateError | undefined => {
      try {
        // Taken (without the check): given up at once, so that the run goes on.
        reserve()?.cancel()
        return undefined
      } catch (error) {
        return error as FactstateError
      }
    }
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [declared] })
      const running = await engine.start(run(server.baseUrl, 'intent'))
      const valid: HandoffIntent = libraryIntentFor(running.invocation, 'review')
      // As the review found it: the key as the handoff id, the declared secret as the host epoch, reserved and sealed.
      let sealed: unknown
      const first = attempt(() => {
        const reservation = running.handoff().reserve({ ...valid, handoffId: API_KEY, hostEpoch: declared })
        sealed = reservation.ready().then((held) => held.commit())
        return undefined
      })
      if (sealed !== undefined) await sealed
      const refusals: [string, FactstateError | undefined][] = [['handoffId and hostEpoch', first]]
      if (first !== undefined) {
        for (const field of ['handoffId', 'hostEpoch', 'rootRunId', 'successorRunId', 'successorInvocationId', 'claimId'] as const) {
          for (const [which, secret] of [
            ['the apiKey', API_KEY],
            ['a declared secret', declared],
          ] as const) {
            refusals.push([`${field} as ${which}`, attempt(() => running.handoff().reserve({ ...valid, [field]: secret }))])
          }
        }
        refusals.push(['intentFor with a declared secret as its hostEpoch', attempt(() => running.handoff().reserve(libraryIntentFor(running.invocation, 'review', { hostEpoch: declared })))])
        // The run goes on: a hold of a valid intent is taken and released, and the run completes.
        const held = await running.handoff().reserve(valid).ready()
        await held.release()
      }
      const outcome = await running.wait()
      // A run being admitted (its handle from running(id) before start() resolves) refuses alike.
      const starting = engine.start(run(server.baseUrl, 'opening'))
      const opening = engine.running('invocation-opening')
      assert.is(opening?.state(), 'opening')
      refusals.push(['claimId as the apiKey, while admitted', attempt(() => opening?.handoff().reserve({ ...libraryIntentFor(opening.invocation, 'early'), claimId: API_KEY }))])
      assert.equal(await (await starting).wait(), { status: 'completed' })
      await engine.drain()
      const { events } = await log.prefix(ALL.events, ALL.bytes)
      await log.close()
      // The log's files as they are on disk (its .log file first of all): no piece of either secret.
      const files = await everyFile(path)
      assert.ok(files.some((file) => file.path.endsWith('.log')), 'the write-ahead log is read')
      for (const file of files) assert.not.ok(holdsSecret(file.bytes), `${file.path} holds a secret`)
      assert.equal(outcome, { status: 'completed' })
      for (const [name, refused] of refusals) {
        assert.is(refused?.code, 'HANDOFF_MISMATCH', name)
        assert.not.ok(holdsSecret(`${refused?.message} ${JSON.stringify(refused?.details)}`), `${name}: the refusal does not quote it`)
        assert.match(refused?.message ?? '', /holds? the provider's credential \(its apiKey or a credential header's value\) or one of the engine's secrets/, name)
      }
      assert.equal(refusals[0]?.[1]?.details, { field: 'handoffId', fields: ['handoffId', 'hostEpoch'] })
      assert.equal(refusals[1]?.[1]?.details, { field: 'handoffId', fields: ['handoffId'] })
      assert.equal(refusals.at(-1)?.[1]?.details, { field: 'claimId', fields: ['claimId'] })
      assert.equal(
        events.map((stored) => stored.event.fact.type).filter((type) => type.startsWith('hold.')),
        ['hold.entered', 'hold.released'],
        'only the valid hold was taken',
      )
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: errors thrown to the caller quote none of the engine's secrets nor the input's apiKey: a cancel reason that is an Error, an unknown member named by a secret at start() (top level, nested), a tool or header name that quotes one, running() of a secret, reserve() with an unknown member named by one",
  bounded(30_000, async (dir) => {
    const declared = `PayS3cret-${randomBytes(16).toString('hex')}`
    const server = await scriptedModelServer([answer.text('late', { hold: true })])
    const log = await EventLog.open(join(dir, 'log'))
    /** What an application's log would show of a thrown error: its message, stack, details and causes. */
    const logged = (error: unknown): string => {
      const parts: string[] = []
      for (let at: unknown = error, depth = 0; at !== undefined && depth < 5; at = (at as { cause?: unknown }).cause, depth += 1) {
        parts.push(String((at as Error).stack ?? at), JSON.stringify((at as FactstateError).details ?? null))
      }
      return parts.join('\n')
    }
    const quotes = (text: string) => [declared, API_KEY].some((secret) => piecesOf(secret.slice(-32), 8).some((piece) => text.includes(piece)))
    const thrown = async (act: () => unknown): Promise<FactstateError | undefined> => {
      try {
        await act()
        return undefined
      } catch (error) {
        return error as FactstateError
      }
    }
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [declared] })
      const given = run(server.baseUrl, 'refused')
      const refusals: [string, FactstateError | undefined, string][] = []
      for (const [name, input] of [
        ['a top-level member named by a declared secret', { ...given, [declared]: true }],
        ['a top-level member named by the apiKey', { ...given, [API_KEY]: true }],
        ['a member of configuration named by a declared secret', { ...given, configuration: { ...given.configuration, [declared]: 'x' } }],
        ['a member of work named by the apiKey', { ...given, work: { kind: 'message', content: 'hi', [API_KEY]: 1 } }],
        ['a tool named by a declared secret and a character no tool name has', { ...given, tools: [{ ...effectTool(), name: `${declared}!` }] }],
        ['a header name that is no header name', { ...given, provider: { ...provider(server.baseUrl), headers: { [`${declared} x`]: 'v' } } }],
      ] as const) {
        const refused = await thrown(() => engine.start(input as unknown as RunInput))
        refusals.push([name, refused, 'RUN_INVALID_INPUT'])
      }
      assert.match(refusals[0]?.[1]?.message ?? '', /^RUN_INVALID_INPUT: \(root\): Unrecognized key: "\[redacted\]"/)
      assert.equal(refusals[0]?.[1]?.details, { fields: ['[redacted]'] })
      assert.is(log.head().highWater, 0, 'nothing written')

      const running = await engine.start(run(server.baseUrl, 'cancelled'))
      await server.seen(0)
      refusals.push(['running() given a declared secret with a character no id has', await thrown(() => engine.running(`${declared}!`)), 'RUN_INVALID_INPUT'])
      refusals.push(['reserve() with a member named by a declared secret', await thrown(() => running.handoff().reserve({ ...intentFor('x', 'run-cancelled'), [declared]: 'x' } as HandoffIntent)), 'HANDOFF_MISMATCH'])
      const byError = await thrown(() => running.cancel(new Error(`vault refused ${declared}`) as unknown as string))
      refusals.push(['cancel() given an Error', byError, 'RUN_INVALID_INPUT'])
      assert.is(byError?.message, 'RUN_INVALID_INPUT: cancel: reason must be a string, not an Error (pass error.message, say; the value is not shown)')
      assert.is(running.state(), 'awaitingModel', 'a refused cancel cancels nothing')
      running.cancel('stop')
      assert.equal(await running.wait(), { status: 'cancelled', source: 'stop' })

      for (const [name, refused, code] of refusals) {
        assert.is(refused?.code, code, name)
        assert.not.ok(quotes(logged(refused)), `${name}: ${refused?.message}`)
      }
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test('secrets: the leak detector finds a canary written to the log (it can fail)', () => {
  assert.ok(leaks(JSON.stringify({ output: `tool said ${API_KEY.slice(3, 20)}` })).length > 0)
  assert.ok(leaks(Buffer.from(HEADERS['x-canary-two'] as string).toString('base64')).length > 0)
})

test(
  "secrets: a child run holds the secrets its parent run's tools added: one passed on in a child's or a grandchild's message is refused, one the child's model echoes is redacted, and none reaches a file",
  bounded(30_000, async (dir) => {
    const token = `oauth-access-${randomBytes(16).toString('hex')}`
    const server = await scriptedModelServer((request) => {
      const first = request.body.messages.find((message) => message.role === 'user')?.content
      const answered = request.body.messages.some((message) => message.role === 'tool')
      if (first === 'question parent') return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
      // The child: calls a tool that starts a grandchild, then echoes the token (a model that guessed it, a proxy).
      return answered ? answer.text(`the token is ${token}`) : answer.toolCalls([{ id: 'call-nested', name: 'nested', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    const refusals: unknown[] = []
    const refusalOf = (error: unknown) => {
      const { code, details } = error as FactstateError
      return { code, details, quotes: (error as Error).message.includes(token) }
    }
    try {
      const engine: Engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
      const child = (context: ToolContext, name: string, content: string, tools: RunInput['tools']) =>
        engine.run({ ...run(server.baseUrl, name, { tools }), ...childRunFor(context, name), work: { kind: 'message', content } })
      const nested = {
        name: 'nested',
        readOnly: true,
        async execute(_input: unknown, context: ToolContext) {
          await child(context, 'grandchild', `use ${token}`, []).catch((error: unknown) => refusals.push(refusalOf(error)))
          return 'tried'
        },
      }
      const delegate = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          context.addSecret(token)
          await child(context, 'leaky', `use ${token}`, []).catch((error: unknown) => refusals.push(refusalOf(error)))
          return child(context, 'echo', 'child echo', [nested])
        },
      }
      assert.equal(await engine.run(run(server.baseUrl, 'parent', { tools: [delegate] })), { status: 'completed' })
      const refused = { code: 'RUN_INVALID_INPUT', details: { fields: ['work.content'] }, quotes: false }
      assert.equal(refusals, [refused, refused], "the child's and the grandchild's message")
      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      assert.equal(new Set(events.filter((stored) => stored.event.fact.type === 'invocation.opened').map((stored) => stored.event.invocation.invocationId)).size, 2, 'the parent and the echoing child only')
      const texts = events.flatMap(({ event }) => (event.fact.type === 'model.completed' && event.fact.output.text ? [event.fact.output.text] : []))
      assert.ok(texts.includes('the token is [redacted]'), JSON.stringify(texts))
      assert.not.ok(JSON.stringify(events).includes(token), 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(file.bytes.includes(Buffer.from(token)), file.path)
  }),
)

test.run()
