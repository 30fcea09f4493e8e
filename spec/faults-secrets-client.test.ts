/**
 * Secrets a model client declares it holds (`ModelClient.secrets`): a client that holds its own
 * credential (an SDK client made with its key) and talks to a real HTTP server on 127.0.0.1, with
 * nothing of the key in the run's `provider`. The run is covered from its first fact: an input that
 * holds the key is refused before anything is written, an echo of it (a tool's result, the model's
 * answer) is redacted, a child run's message is refused too, and no file of the LevelDB directory
 * holds it, read raw. A client whose `secrets` cannot be used refuses the run, naming `provider`.
 */
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, FactstateError, ModelExecutor, OpenAIChatClient, type ModelClient, type RunInput, type ToolContext, type ToolDefinition, childRunFor } from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { ALL, holdingClient, secretsRun } from './support/faults-engine.js'
import { everyFile } from './support/faults-files.js'
import { rejectsWithCode } from './support/codes.js'
import { bounded } from './support/temp.js'

const KEY = `sk-own-${randomBytes(20).toString('hex')}`

/** The files of the log directory that hold `needle` (or a 24-character piece of it), read raw. */
async function filesHolding(dir: string, needle: string): Promise<string[]> {
  const files = await everyFile(dir)
  assert.ok(files.length >= 4, 'the log directory has its files')
  return files.filter((file) => file.bytes.includes(Buffer.from(needle.slice(7, 31)))).map((file) => file.path)
}

test(
  "secrets: a client's declared secrets are the run's from its first fact: a key in the message, the instructions or a tool's description is refused with nothing written; a tool result and an answer that echo it are redacted; no file holds it",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer((request) => {
      const answered = request.body.messages.some((message) => message.role === 'tool')
      return answered ? answer.text(`your key is ${KEY}`) : answer.toolCalls([{ id: 'call-echo', name: 'echo', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: holdingClient(KEY, [KEY]) }) })
      const echo: ToolDefinition = { name: 'echo', readOnly: true, execute: async () => `the vault says ${KEY}` }
      for (const [what, given, field] of [
        ['the message', secretsRun(server.baseUrl, 'pasted', { work: { kind: 'message', content: `here is my key: ${KEY}` } }), 'work.content'],
        ['the instructions', secretsRun(server.baseUrl, 'instructed', { instructions: `Use ${KEY} when asked.` }), 'instructions'],
        ['a tool description', secretsRun(server.baseUrl, 'described', { tools: [{ ...echo, description: `calls with ${KEY}` }] }), 'tools.0.description'],
      ] as const) {
        const before = log.head()
        const refused = await rejectsWithCode(() => engine.start(given), 'RUN_INVALID_INPUT', what)
        assert.equal(refused.details, { fields: [field] }, what)
        assert.match(refused.message, /the model client's secrets \(ModelClient\.secrets\)/, what)
        assert.not.ok(refused.message.includes(KEY.slice(7, 31)), `${what}: the refusal quotes no piece of the key`)
        assert.equal(log.head(), before, `${what}: nothing written`)
      }
      assert.is(server.requests.length, 0, 'nothing was sent')

      // A run that does not hold it runs; its tool's result and its model's answer echo the key.
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'echoed', { tools: [echo] })), { status: 'completed' })
      assert.is(server.requests[0]?.headers.authorization, `Bearer ${KEY}`, 'the client sent the key it holds')
      const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event)
      const results = events.flatMap(({ fact }) => (fact.type === 'tool.settled' && fact.outcome.status === 'succeeded' ? [fact.outcome.output] : []))
      assert.equal(results, ['the vault says [redacted]'], 'the tool result, as recorded')
      const texts = events.flatMap(({ fact }) => (fact.type === 'model.completed' && fact.output.text !== undefined ? [fact.output.text] : []))
      assert.equal(texts, ['your key is [redacted]'], 'the answer, as recorded')
      assert.not.ok(JSON.stringify(events).includes(KEY.slice(7, 31)), 'facts')
      assert.equal(new Set(events.map((event) => event.invocation.invocationId)), new Set(['invocation-echoed']), 'only the admitted run wrote')
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(join(dir, 'log'), KEY), [], 'no file of the log holds the key')
  }),
)

test(
  "secrets: a child run's own client declares them too: a tool that passes the key on in a child's message gets RUN_INVALID_INPUT, and no file holds it",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer((request) => {
      const answered = request.body.messages.some((message) => message.role === 'tool')
      return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    const refusals: unknown[] = []
    try {
      const engine: Engine = new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: holdingClient(KEY, [KEY]) }) })
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          await engine.run({ ...secretsRun(server.baseUrl, 'child'), ...childRunFor(context, 'child'), work: { kind: 'message', content: `use ${KEY}` } }).catch((error: unknown) => {
            const { code, details, message } = error as FactstateError
            refusals.push({ code, details, quotes: message.includes(KEY.slice(7, 31)) })
          })
          return 'tried'
        },
      }
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'parent', { tools: [delegate] })), { status: 'completed' })
      assert.equal(refusals, [{ code: 'RUN_INVALID_INPUT', details: { fields: ['work.content'] }, quotes: false }])
      const events = (await log.prefix(ALL.events, ALL.bytes)).events
      assert.equal(new Set(events.map((stored) => stored.event.invocation.invocationId)), new Set(['invocation-parent']), 'the child wrote nothing')
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(join(dir, 'log'), KEY), [], 'no file of the log holds the key')
  }),
)

test(
  "secrets: a client whose secrets cannot be used refuses the run (RUN_INVALID_INPUT naming provider, the MODEL_SECRET_INVALID as its cause), writes nothing and quotes no value; with ModelRequest.addSecret they count together",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([answer.text('fine')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const long = `x${'y'.repeat(16_384)}`
      const throwing = {
        get secrets(): readonly string[] {
          throw new Error('the vault is sealed')
        },
      }
      const cases: [string, unknown, RegExp, string | undefined][] = [
        ['a getter that throws', throwing, /^RUN_INVALID_INPUT: provider: the model client's secrets could not be read: the vault is sealed$/, undefined],
        ['a string, not an array', KEY, /must be an array of strings \(ModelClient\.secrets\), not a string of \d+ characters$/, undefined],
        ['a secret that is no string', [KEY, 12345678], /are refused \(item 1\): ModelClient\.secrets takes a string, not a number; the value is not shown$/, 'not_a_string'],
        ['a short secret', ['tiny-1'], /are refused \(item 0\): ModelClient\.secrets takes a secret of 8 characters or more/, 'too_short'],
        ['a secret too long', [long], /are refused \(item 0\): ModelClient\.secrets takes a secret of at most 16,384 characters, not 16,385/, 'too_long'],
        ['65 secrets', Array.from({ length: 65 }, (_, index) => `secret-number-${index}`), /are refused \(item 64\): ModelClient\.secrets was given more than 64 secrets in one run/, 'too_many'],
      ]
      for (const [what, secrets, message, reason] of cases) {
        const client = what === 'a getter that throws' ? () => Object.assign(throwing, { complete: async () => ({ kind: 'interrupted' as const, status: 'failed' as const, message: 'never' }) }) : holdingClient(KEY, secrets)
        const engine = new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: client as (provider: RunInput['provider']) => ModelClient }) })
        const before = log.head()
        const refused = await rejectsWithCode(() => engine.start(secretsRun(server.baseUrl, 'refused')), 'RUN_INVALID_INPUT', what)
        assert.equal(refused.details, { fields: ['provider'] }, what)
        assert.match(refused.message, message, what)
        const cause = (refused as { cause?: unknown }).cause
        assert.is(cause instanceof FactstateError ? `${cause.code} ${String(cause.details?.reason)}` : undefined, reason === undefined ? undefined : `MODEL_SECRET_INVALID ${reason}`, what)
        assert.not.ok(refused.message.includes(KEY.slice(7, 31)) || refused.message.includes('y'.repeat(32)), `${what}: no value quoted`)
        assert.equal(log.head(), before, `${what}: nothing written`)
      }
      assert.is(server.requests.length, 0, 'nothing was sent')

      // 64 declared: an addSecret of one more on the first attempt is the 65th of the run, refused to the client.
      const declared = Array.from({ length: 64 }, (_, index) => `secret-number-${index}`)
      let added: unknown
      const inner = holdingClient(KEY, declared)
      const engine = new Engine({
        log,
        model: new ModelExecutor({
          retries: 0,
          createClient: (provider) => {
            const client = inner(provider)
            return {
              secrets: client.secrets,
              complete: (request) => {
                request.addSecret?.(declared[3] as string)
                try {
                  request.addSecret?.('one-secret-more')
                } catch (error) {
                  added = error instanceof FactstateError ? [error.code, error.details?.reason] : error
                }
                return client.complete(request)
              },
            }
          },
        }),
      })
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'counted')), { status: 'completed' })
      assert.equal(added, ['MODEL_SECRET_INVALID', 'too_many'], 'one already declared adds nothing; one more is the 65th')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: a child run holds its ancestors' client and provider secrets though it runs on another client: one passed on in a child's or a grandchild's message is refused, an echo in a child's tool result or answer is redacted, and no file holds any",
  bounded(30_000, async (dir) => {
    // The supervisor's client holds KEY itself and declares it and a secret that looks like no key; its
    // provider gives PROVIDER_KEY. The children run on a plain client, with a provider key of their own.
    const phrase = 'correct horse battery staple'
    const providerKey = `sk-supervisor-${randomBytes(20).toString('hex')}`
    const childKey = `sk-child-${randomBytes(20).toString('hex')}`
    const server = await scriptedModelServer((request) => {
      const first = request.body.messages.find((message) => message.role === 'user')?.content
      const answered = request.body.messages.some((message) => message.role === 'tool')
      if (first === 'question parent') return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
      // The child: a tool that starts a grandchild and echoes the supervisor's secrets, then an answer that echoes them too.
      return answered ? answer.text(`keys: ${KEY} ${providerKey} ${phrase}`) : answer.toolCalls([{ id: 'call-nested', name: 'nested', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    const refusals: unknown[] = []
    const refusalOf = (error: unknown) => {
      const { code, details, message } = error as FactstateError
      return { code, details, quotes: [KEY, providerKey, phrase].some((secret) => message.includes(secret)) }
    }
    const holding = holdingClient(KEY, [KEY, phrase])
    try {
      const engine: Engine = new Engine({
        log,
        model: new ModelExecutor({ retries: 0, createClient: (provider) => (provider.model === 'supervisor' ? holding(provider) : new OpenAIChatClient(provider)) }),
      })
      const childInput = (context: ToolContext, name: string, content: string, tools: ToolDefinition[]): RunInput => ({
        ...secretsRun(server.baseUrl, name, { tools }),
        provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'specialist', apiKey: childKey },
        ...childRunFor(context, name),
        work: { kind: 'message', content },
      })
      const nested: ToolDefinition = {
        name: 'nested',
        readOnly: true,
        async execute(_input: unknown, context: ToolContext) {
          await engine.run(childInput(context, 'grandchild', `use ${KEY}`, [])).catch((error: unknown) => refusals.push(refusalOf(error)))
          return `echo: ${KEY} ${providerKey} ${phrase}`
        },
      }
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          for (const [name, secret] of [['client-key', KEY], ['provider-key', providerKey], ['phrase', phrase]] as const) {
            await engine.run(childInput(context, name, `use ${secret}`, [])).catch((error: unknown) => refusals.push(refusalOf(error)))
          }
          return engine.run(childInput(context, 'echo', 'child echo', [nested]))
        },
      }
      const parent = secretsRun(server.baseUrl, 'parent', { tools: [delegate], provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'supervisor', apiKey: providerKey } })
      assert.equal(await engine.run(parent), { status: 'completed' })
      const refused = { code: 'RUN_INVALID_INPUT', details: { fields: ['work.content'] }, quotes: false }
      assert.equal(refusals, [refused, refused, refused, refused], "the children's messages (the client's key, the provider's key, the phrase) and the grandchild's")
      const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event)
      const opened = events.filter(({ fact }) => fact.type === 'invocation.opened').map((event) => event.invocation.invocationId)
      assert.equal(opened.length, 2, `the parent and the echoing child only: ${opened.join(', ')}`)
      const results = events.flatMap(({ fact }) => (fact.type === 'tool.settled' && fact.outcome.status === 'succeeded' && typeof fact.outcome.output === 'string' ? [fact.outcome.output] : []))
      assert.ok(results.includes('echo: [redacted] [redacted] [redacted]'), JSON.stringify(results))
      const texts = events.flatMap(({ fact }) => (fact.type === 'model.completed' && fact.output.text !== undefined ? [fact.output.text] : []))
      assert.ok(texts.includes('keys: [redacted] [redacted] [redacted]'), JSON.stringify(texts))
      const text = JSON.stringify(events)
      for (const secret of [KEY, providerKey, phrase]) assert.not.ok(text.includes(secret), 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) {
      for (const secret of [KEY, providerKey, phrase]) assert.not.ok(file.bytes.includes(Buffer.from(secret)), `${file.path} holds a secret of the supervisor's`)
    }
  }),
)

test(
  "secrets: a client's declared secrets are matched whatever they look like (8 characters or more, as the engine's secrets): a phrase in the message is refused, its echo in a tool result, an answer and a tool's failure is redacted, and no file holds it",
  bounded(30_000, async (dir) => {
    const phrase = 'correct-horse-battery-staple-longer'
    const word = 'tr0ub4dor'
    const server = await scriptedModelServer((request) => {
      const answered = request.body.messages.some((message) => message.role === 'tool')
      return answered ? answer.text(`you said ${phrase} and ${word}`) : answer.toolCalls([{ id: 'call-echo', name: 'echo', arguments: {} }, { id: 'call-fail', name: 'fail', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: holdingClient(KEY, [phrase, ` ${word} `]) }) })
      const echo: ToolDefinition = { name: 'echo', readOnly: true, execute: async () => ({ said: phrase, word }) }
      const fail: ToolDefinition = {
        name: 'fail',
        readOnly: true,
        execute: async () => {
          throw new Error(`denied for ${phrase.slice(0, 12)}****`)
        },
      }
      for (const [what, given, field] of [
        ['the phrase', secretsRun(server.baseUrl, 'phrase', { work: { kind: 'message', content: `my passphrase is ${phrase}` } }), 'work.content'],
        ['the word, trimmed', secretsRun(server.baseUrl, 'word', { instructions: `Say ${word}.` }), 'instructions'],
        ['a tool description', secretsRun(server.baseUrl, 'described', { tools: [{ ...echo, description: `knows ${phrase}` }] }), 'tools.0.description'],
      ] as const) {
        const before = log.head()
        const refused = await rejectsWithCode(() => engine.start(given), 'RUN_INVALID_INPUT', what)
        assert.equal(refused.details, { fields: [field] }, what)
        assert.match(refused.message, /the model client's secrets \(ModelClient\.secrets\)/, what)
        assert.not.ok(refused.message.includes(phrase) || refused.message.includes(word), `${what}: not quoted`)
        assert.equal(log.head(), before, `${what}: nothing written`)
      }
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'echoed', { tools: [echo, fail] })), { status: 'completed' })
      const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event)
      const settled = events.flatMap(({ fact }) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      assert.equal(
        settled.map((outcome) => (outcome.status === 'succeeded' ? outcome.output : outcome.status === 'failed' ? outcome.message : outcome.status)),
        [{ said: '[redacted]', word: '[redacted]' }, 'denied for [redacted]****'],
        'the result whole, the failure by its pieces',
      )
      const texts = events.flatMap(({ fact }) => (fact.type === 'model.completed' && fact.output.text !== undefined ? [fact.output.text] : []))
      assert.equal(texts, ['you said [redacted] and [redacted]'], 'the answer, as recorded')
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(join(dir, 'log'), `xxxxxxx${phrase}`), [], 'no file of the log holds the phrase')
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(file.bytes.includes(Buffer.from(word)), `${file.path} holds the word`)
  }),
)

test(
  'secrets: a start on a closed log is refused (LOG_CLOSED) before a model client is made; a start refused later (its ids in use) has had one made, which is never used',
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([answer.text('fine')])
    const log = await EventLog.open(join(dir, 'log'))
    let made = 0
    let completed = 0
    try {
      const inner = holdingClient(KEY, [KEY])
      const engine = new Engine({
        log,
        model: new ModelExecutor({
          retries: 0,
          createClient: (provider) => {
            made += 1
            const client = inner(provider)
            return {
              secrets: client.secrets,
              complete: (request) => {
                completed += 1
                return client.complete(request)
              },
            }
          },
        }),
      })
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'once')), { status: 'completed' })
      assert.equal([made, completed], [1, 1])
      const refused = await rejectsWithCode(() => engine.start(secretsRun(server.baseUrl, 'once')), 'RUN_INVALID_INPUT', 'ids in use')
      assert.is((refused.details as { reason?: string }).reason, 'exists')
      assert.equal([made, completed], [2, 1], 'refused after its client was made (its secrets are looked for first), which answered nothing')
      await log.close()
      await rejectsWithCode(() => engine.start(secretsRun(server.baseUrl, 'closed')), 'LOG_CLOSED', 'a closed log')
      assert.equal([made, completed], [2, 1], 'no client made for a start on a closed log')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: a tool whose name holds one of the client's declared secrets or the engine's (a slug that is no key, whatever it looks like) is refused naming tools.<i>.name, not the name; nothing written",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([answer.text('fine')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const slug = 'acme-prod-eu'
      const vault = 'payments-vault'
      const engine = new Engine({ log, secrets: [vault], model: new ModelExecutor({ retries: 0, createClient: holdingClient(KEY, [slug]) }) })
      const tool = (name: string): ToolDefinition => ({ name, readOnly: true, execute: async () => 'ok' })
      for (const [what, name, holds] of [
        ["the client's", `${slug}_search`, /^RUN_INVALID_INPUT: tools\.1\.name holds one of the model client's secrets \(ModelClient\.secrets\)/],
        ["the engine's", `lookup_${vault}`, /^RUN_INVALID_INPUT: tools\.1\.name holds the provider's credential \(its apiKey or a credential header's value\) or one of the engine's secrets/],
      ] as const) {
        const before = log.head()
        const refused = await rejectsWithCode(() => engine.start(secretsRun(server.baseUrl, 'named', { tools: [tool('weather'), tool(name)] })), 'RUN_INVALID_INPUT', what)
        assert.equal(refused.details, { fields: ['tools.1.name'] }, what)
        assert.match(refused.message, holds, what)
        assert.not.ok(refused.message.includes(name), `${what}: the name is not quoted`)
        assert.equal(log.head(), before, `${what}: nothing written`)
      }
      assert.is(server.requests.length, 0, 'nothing was sent')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test.run()
