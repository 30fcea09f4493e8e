/**
 * The secrets a run holds beyond the engine's own (its model client's, `ModelClient.secrets`; those it
 * holds from a supervisor run) where they were found missing by a review of 0.11.0's secrets change:
 * a handoff successor of a child run's turn, started while the supervisor runs, holds the
 * supervisor's secrets as the child did; a child's start refused before its admission does not quote
 * them; a hold reserved while a run is being admitted is refused for them; and two runs admitted at
 * once on one engine with clients that declare different secrets each look for their own; a model
 * client that cannot be made refuses its run without quoting them. Real
 * LevelDB directories read raw, a real HTTP server on 127.0.0.1.
 */
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, FactstateError, ModelExecutor, OpenAIChatClient, type ModelClient, type RunInput, type ToolContext, type ToolDefinition, childRunFor, intentFor, successorOf } from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { ALL, CWD, holdingClient, secretsRun } from './support/faults-engine.js'
import { everyFile } from './support/faults-files.js'
import { bounded } from './support/temp.js'

/** A key the supervisor's client holds itself and declares (`ModelClient.secrets`); no run's provider gives it. */
const KEY = `sk-own-${randomBytes(20).toString('hex')}`

/** The files of the log directory `dir` whose raw bytes hold one of `secrets`. */
async function filesHolding(dir: string, secrets: readonly string[]): Promise<string[]> {
  const files = await everyFile(dir)
  assert.ok(files.some((file) => file.path.endsWith('.log')), 'the write-ahead log is read')
  return files.filter((file) => secrets.some((secret) => file.bytes.includes(Buffer.from(secret)))).map((file) => file.path)
}

test(
  "secrets: a handoff successor of a child run's turn (and its own successor), started while the supervisor runs, holds the supervisor's client key and provider key as the child did: its message holding one is refused, its tool's result and its answer that echo them are redacted, and no file holds them",
  bounded(30_000, async (dir) => {
    const providerKey = `sk-supervisor-${randomBytes(20).toString('hex')}`
    const server = await scriptedModelServer((request) => {
      const first = request.body.messages.find((message) => message.role === 'user')?.content
      const answered = request.body.messages.some((message) => message.role === 'tool')
      if (first === 'question supervisor') return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
      // The child's turn (held at once, so its successor makes these requests): a tool that reads the supervisor's keys, an answer that echoes them.
      return answered ? answer.text(`keys: ${KEY} ${providerKey}`) : answer.toolCalls([{ id: 'call-config', name: 'config', arguments: {} }])
    })
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    const outcomes: unknown[] = []
    const refusals: unknown[] = []
    try {
      const holding = holdingClient(KEY, [KEY])
      const engine: Engine = new Engine({
        log,
        model: new ModelExecutor({ retries: 0, createClient: (provider) => (provider.model === 'supervisor' ? holding(provider) : new OpenAIChatClient(provider)) }),
      })
      // The specialist's tool reads the application's configuration, which holds the supervisor's keys.
      const config: ToolDefinition = { name: 'config', readOnly: true, execute: async () => `client ${KEY}, provider ${providerKey}` }
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          const ids = childRunFor(context, 'specialist')
          const child: RunInput = { ...secretsRun(server.baseUrl, 'specialist', { tools: [config] }), ...ids, provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'specialist' } }
          // A reviewer takes the child's turn over before its first request, and gives it back: its successor
          // runs it, here; the successor's turn is taken over at once too, and its own successor runs it.
          const paused = async (given: RunInput) => {
            const started = await engine.start(given)
            const pause = await (await started.handoff().reserve(intentFor(given.invocation, 'review')).ready()).commit()
            outcomes.push((await started.wait()).status)
            const source = (await log.runSource(given.invocation.sessionId, given.invocation.runId))?.boundary
            if (source === undefined) throw new Error('the paused run has no boundary')
            const { parent: _parent, ...settings } = child
            return { ...settings, invocation: successorOf(pause.intent, source.invocation), work: { kind: 'handoff', source, pause } } satisfies RunInput
          }
          const successor = await paused(await paused(child))
          const { source, pause } = successor.work
          // A reviewer's decision that quotes a key is refused as the child's message would be, with nothing written.
          for (const secret of [KEY, providerKey]) {
            await engine.start({ ...successor, work: { kind: 'handoff', source, pause, content: `approved, use ${secret}` } }).then(
              () => refusals.push('admitted'),
              (error: unknown) => {
                const { code, details, message } = error as FactstateError
                refusals.push({ code, details, quotes: message.includes(secret) })
              },
            )
          }
          outcomes.push((await engine.run(successor)).status)
          return 'delegated'
        },
      }
      const supervisor = secretsRun(server.baseUrl, 'supervisor', { tools: [delegate], provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'supervisor', apiKey: providerKey } })
      assert.equal(await engine.run(supervisor), { status: 'completed' })
      assert.equal(outcomes, ['handoff_paused', 'handoff_paused', 'completed'], "the child paused, its successor paused, the successor's successor completed")
      const refused = { code: 'RUN_INVALID_INPUT', details: { fields: ['work.content'] }, quotes: false }
      assert.equal(refusals, [refused, refused], "the successor's message holding the client's key, then the provider's")
      const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event)
      const successorId = events.findLast(({ fact }) => fact.type === 'invocation.opened' && fact.input.kind === 'handoff')?.invocation.invocationId
      assert.is(successorId, 'invocation-supervisor.step-1.0.specialist.review.review', "the successor's successor opened last")
      const mine = events.filter((event) => event.invocation.invocationId === successorId)
      const results = mine.flatMap(({ fact }) => (fact.type === 'tool.settled' && fact.outcome.status === 'succeeded' ? [fact.outcome.output] : []))
      assert.equal(results, ['client [redacted], provider [redacted]'], "the successor's tool result, as recorded")
      const texts = mine.flatMap(({ fact }) => (fact.type === 'model.completed' && fact.output.text !== undefined ? [fact.output.text] : []))
      assert.equal(texts, ['keys: [redacted] [redacted]'], "the successor's answer, as recorded")
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(path, [KEY, providerKey]), [], 'no file of the log holds a key of the supervisor')
  }),
)

test(
  "secrets: a child run's start refused before its admission (an unknown member, a header's name, a configuration member named by the key) does not quote its supervisor's client key, as a run's refusal does not quote the engine's secrets",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer((request) => {
      const answered = request.body.messages.some((message) => message.role === 'tool')
      return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
    })
    const log = await EventLog.open(join(dir, 'log'))
    const refusals: [string, string, boolean][] = []
    try {
      const holding = holdingClient(KEY, [KEY])
      const engine: Engine = new Engine({
        log,
        model: new ModelExecutor({ retries: 0, createClient: (provider) => (provider.model === 'supervisor' ? holding(provider) : new OpenAIChatClient(provider)) }),
      })
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          const child = { ...secretsRun(server.baseUrl, 'child'), ...childRunFor(context, 'child'), provider: { kind: 'openai-chat' as const, baseUrl: server.baseUrl, model: 'specialist' } }
          const cases: [string, unknown][] = [
            ['an unknown member', { ...child, [KEY]: true }],
            ["a header's name", { ...child, provider: { ...child.provider, headers: { [`Bearer ${KEY}`]: 'x' } } }],
            ['a configuration member', { ...child, configuration: { cwd: CWD, [KEY]: true } }],
          ]
          for (const [what, given] of cases) {
            await engine.start(given as RunInput).then(
              () => refusals.push([what, 'admitted', false]),
              (error: unknown) => {
                const { code, details, message } = error as FactstateError
                refusals.push([what, code, `${message} ${JSON.stringify(details)}`.includes(KEY.slice(7))])
              },
            )
          }
          return 'tried'
        },
      }
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'supervisor', { tools: [delegate], provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'supervisor' } })), { status: 'completed' })
      assert.equal(
        refusals,
        [
          ['an unknown member', 'RUN_INVALID_INPUT', false],
          ["a header's name", 'RUN_INVALID_INPUT', false],
          ['a configuration member', 'RUN_INVALID_INPUT', false],
        ],
        'refused, the key not quoted',
      )
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  "secrets: a hold reserved while a run is being admitted (its handle from running(id) before start() resolves) is refused when its intent holds one of the run's model client's secrets, or one of a child's supervisor; nothing of it reaches the log's files",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer((request) => {
      const first = request.body.messages.find((message) => message.role === 'user')?.content
      const answered = request.body.messages.some((message) => message.role === 'tool')
      if (first === 'question supervisor') return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
      return answer.text('fine')
    })
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    const refusals: [string, string | undefined, unknown][] = []
    const reserveEarly = async (engine: Engine, given: RunInput, what: string) => {
      const starting = engine.start(given)
      const opening = engine.running(given.invocation.invocationId)
      assert.is(opening?.state(), 'opening', what)
      let sealing: Promise<unknown> | undefined
      try {
        const reservation = opening?.handoff().reserve({ ...intentFor(given.invocation, 'early'), hostEpoch: KEY })
        // Taken: sealed as soon as the run reaches its first safe point.
        sealing = reservation?.ready().then((held) => held.commit())
        refusals.push([what, 'taken', undefined])
      } catch (error) {
        const { code, details, message } = error as FactstateError
        refusals.push([what, code, { details, quotes: message.includes(KEY) }])
      }
      await sealing
      return (await starting).wait()
    }
    try {
      const holding = holdingClient(KEY, [KEY])
      const engine: Engine = new Engine({
        log,
        model: new ModelExecutor({ retries: 0, createClient: (provider) => (provider.model === 'scripted' ? new OpenAIChatClient(provider) : holding(provider)) }),
      })
      const supervised = { kind: 'openai-chat' as const, baseUrl: server.baseUrl, model: 'supervisor' }
      // A run whose own client declares the key.
      assert.equal(await reserveEarly(engine, secretsRun(server.baseUrl, 'own', { provider: supervised }), 'its own client'), { status: 'completed' })
      // A child run on another client, whose supervisor's client declares it.
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          return reserveEarly(engine, { ...secretsRun(server.baseUrl, 'child'), ...childRunFor(context, 'child') }, "its supervisor's client")
        },
      }
      assert.equal(await engine.run(secretsRun(server.baseUrl, 'supervisor', { tools: [delegate], provider: supervised })), { status: 'completed' })
      const refused = { details: { field: 'hostEpoch', fields: ['hostEpoch'] }, quotes: false }
      assert.equal(refusals, [
        ['its own client', 'HANDOFF_MISMATCH', refused],
        ["its supervisor's client", 'HANDOFF_MISMATCH', refused],
      ])
      const { events } = await log.prefix(ALL.events, ALL.bytes)
      assert.equal(
        events.filter((stored) => stored.event.fact.type.startsWith('hold.') || (stored.event.fact.type === 'invocation.ended' && stored.event.fact.outcome.status === 'handoff_paused')).length,
        0,
        'no hold was taken',
      )
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(path, [KEY]), [], 'no file of the log holds the key')
  }),
)

test(
  "secrets: two runs admitted at once on one engine, their clients declaring different secrets, each look for their own: a message holding its own client's secret is refused for each, and each one's echo of its own is redacted",
  bounded(30_000, async (dir) => {
    const first = `first-client-${randomBytes(12).toString('hex')}`
    const second = `second-client-${randomBytes(12).toString('hex')}`
    const server = await scriptedModelServer((request) => {
      const question = request.body.messages.find((message) => message.role === 'user')?.content ?? ''
      return answer.text(`echo ${question.endsWith('first') ? first : second}`)
    })
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    try {
      // One client per provider model, as an application with a client per tenant makes them; the same engine secrets and provider.
      const clients = { first: holdingClient(`sk-${first}`, [first]), second: holdingClient(`sk-${second}`, [second]) }
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0, createClient: (provider) => clients[provider.model as 'first' | 'second'](provider) }) })
      const on = (model: 'first' | 'second', name: string, content: string) => secretsRun(server.baseUrl, name, { provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model }, work: { kind: 'message', content } })
      // Both starts at once, in both orders: each is looked through for its own client's secret.
      for (const [a, b] of [
        ['first', 'second'],
        ['second', 'first'],
      ] as const) {
        const secrets = { first, second }
        const started = await Promise.allSettled([engine.start(on(a, `${a}-pasted-${b}`, `use ${secrets[a]}`)), engine.start(on(b, `${b}-pasted-after-${a}`, `use ${secrets[b]}`))])
        assert.equal(
          started.map((settled) => (settled.status === 'rejected' ? (settled.reason as FactstateError).code : 'admitted')),
          ['RUN_INVALID_INPUT', 'RUN_INVALID_INPUT'],
          `${a} then ${b}: each refused for its own client's secret`,
        )
      }
      const ran = await Promise.all([engine.run(on('first', 'echo-first', 'question first')), engine.run(on('second', 'echo-second', 'question second'))])
      assert.equal(ran, [{ status: 'completed' }, { status: 'completed' }])
      const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event)
      const texts = events.flatMap(({ fact, invocation }) => (fact.type === 'model.completed' ? [`${invocation.invocationId}: ${fact.output.text}`] : [])).sort()
      assert.equal(texts, ['invocation-echo-first: echo [redacted]', 'invocation-echo-second: echo [redacted]'])
    } finally {
      await log.close()
      await server.close()
    }
    assert.equal(await filesHolding(path, [first, second]), [], "no file of the log holds either client's secret")
  }),
)

test(
  "secrets: a model client that cannot be made (createClient throws), cannot be read, or whose secrets cannot be read, with an error quoting one of the engine's secrets or a child's supervisor's client key: the refusal (RUN_INVALID_INPUT naming provider) quotes neither, and nothing is written",
  bounded(30_000, async (dir) => {
    const vault = `vault-token-${randomBytes(12).toString('hex')}`
    const server = await scriptedModelServer((request) => {
      const answered = request.body.messages.some((message) => message.role === 'tool')
      return answered ? answer.text('done') : answer.toolCalls([{ id: 'call-delegate', name: 'delegate', arguments: {} }])
    })
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    const refusals: [string, string, unknown, boolean][] = []
    const failing: Record<string, (provider: RunInput['provider']) => ModelClient> = {
      made: () => {
        throw new Error(`the client config is invalid: token ${vault}, upstream key ${KEY}`)
      },
      read: () =>
        new Proxy({} as ModelClient, {
          get() {
            throw new Error(`the client could not be read: token ${vault}, upstream key ${KEY}`)
          },
        }),
      secrets: () => ({
        get secrets(): readonly string[] {
          throw new Error(`the vault refused token ${vault}, upstream key ${KEY}`)
        },
        complete: async () => ({ kind: 'interrupted', status: 'failed', message: 'never' }),
      }),
    }
    /** What the refusal of a start is told by `what`, and whether its message quotes one of `secrets`. */
    const refusalOf = (what: string, secrets: readonly string[]) => (error: unknown) => {
      const { code, details, message } = error as FactstateError
      refusals.push([what, code, details, secrets.some((secret) => message.includes(secret))])
    }
    try {
      const holding = holdingClient(KEY, [KEY])
      const engine: Engine = new Engine({
        log,
        secrets: [vault],
        model: new ModelExecutor({ retries: 0, createClient: (provider) => (provider.model === 'supervisor' ? holding(provider) : (failing[provider.model] as (given: RunInput['provider']) => ModelClient)(provider)) }),
      })
      // A run of the engine's own holds the engine's secret (its client's error quotes the supervisor's key, no secret of that run's);
      // a child run holds its supervisor's client key too.
      const on = (model: string, name: string): RunInput => secretsRun(server.baseUrl, name, { provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model } })
      for (const model of Object.keys(failing)) await engine.start(on(model, `top-${model}`)).then(() => refusals.push([model, 'admitted', undefined, false]), refusalOf(model, [vault]))
      const delegate: ToolDefinition = {
        name: 'delegate',
        async execute(_input: unknown, context: ToolContext) {
          for (const model of Object.keys(failing)) await engine.start({ ...on(model, `child-${model}`), ...childRunFor(context, model) }).then(() => refusals.push([`child ${model}`, 'admitted', undefined, false]), refusalOf(`child ${model}`, [vault, KEY]))
          return 'tried'
        },
      }
      assert.equal(await engine.run({ ...on('supervisor', 'supervisor'), tools: [delegate] }), { status: 'completed' })
      const refused = (what: string): [string, string, unknown, boolean] => [what, 'RUN_INVALID_INPUT', { fields: ['provider'] }, false]
      assert.equal(refusals, [refused('made'), refused('read'), refused('secrets'), refused('child made'), refused('child read'), refused('child secrets')])
      const opened = (await log.prefix(ALL.events, ALL.bytes)).events.filter((stored) => stored.event.fact.type === 'invocation.opened')
      assert.equal(opened.map((stored) => stored.event.invocation.invocationId), ['invocation-supervisor'], 'only the supervisor opened')
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test.run()
