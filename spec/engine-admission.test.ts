/**
 * Admission (DESIGN §5): every refusal of `engine.start` carries its code and leaves the log
 * exactly as it was (high-water and digest); an admitted run frees its session when it ends.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact, HandoffIntent, HandoffPause, RunInput, RuntimeEvent, ToolDefinition } from '../index.js'
import { Engine, ModelExecutor, type ModelClient, successorOf } from '../index.js'
import { catalogOf, legacyCatalogDigest } from '../actors/tool-catalog.js'
import { answer } from '../testing/scripted-model-server.js'
import { CWD, countingTool, engineTest, factsOf, markOf, only, refusedWithoutWriting, sealAtFirstSafePoint, storedEvents, successorInput } from './support/engine-fixtures.js'

type Mutation = (input: RunInput) => RunInput

const invalid: { what: string; field: string; change: Mutation }[] = [
  { what: 'a session id with a space', field: 'invocation.sessionId', change: (i) => ({ ...i, invocation: { ...i.invocation, sessionId: 'has space' } }) },
  { what: 'an empty invocation id', field: 'invocation.invocationId', change: (i) => ({ ...i, invocation: { ...i.invocation, invocationId: '' } }) },
  { what: 'a run id of 129 characters', field: 'invocation.runId', change: (i) => ({ ...i, invocation: { ...i.invocation, runId: 'r'.repeat(129) } }) },
  { what: 'a turn id with a slash', field: 'invocation.turnId', change: (i) => ({ ...i, invocation: { ...i.invocation, turnId: 'turn/1' } }) },
  { what: 'a relative cwd', field: 'configuration.cwd', change: (i) => ({ ...i, configuration: { cwd: 'workspace/project' } }) },
  { what: 'a cwd with NUL', field: 'configuration.cwd', change: (i) => ({ ...i, configuration: { cwd: '/workspace\0/project' } }) },
  {
    what: 'an unknown work kind',
    field: 'work.kind',
    change: (i) => ({ ...i, work: { kind: 'poem', content: 'roses' } as unknown as RunInput['work'] }),
  },
  { what: 'duplicate tool names', field: 'tools', change: (i) => ({ ...i, tools: [countingTool('echo'), countingTool('echo')] }) },
  { what: 'maxSteps 0', field: 'maxSteps', change: (i) => ({ ...i, maxSteps: 0 }) },
  { what: 'maxSteps 257', field: 'maxSteps', change: (i) => ({ ...i, maxSteps: 257 }) },
  { what: 'a fractional maxSteps', field: 'maxSteps', change: (i) => ({ ...i, maxSteps: 1.5 }) },
  { what: 'a baseUrl that is not a URL', field: 'provider.baseUrl', change: (i) => ({ ...i, provider: { ...i.provider, baseUrl: 'not a url' } }) },
  { what: 'an ftp baseUrl', field: 'provider.baseUrl', change: (i) => ({ ...i, provider: { ...i.provider, baseUrl: 'ftp://127.0.0.1/v1' } }) },
  {
    what: 'a tool without execute',
    field: 'tools.0.execute',
    change: (i) => ({ ...i, tools: [{ name: 'echo', description: 'no code' } as unknown as RunInput['tools'][number]] }),
  },
  { what: 'an empty message', field: 'work.content', change: (i) => ({ ...i, work: { kind: 'message', content: '' } }) },
  {
    what: 'an unknown provider kind',
    field: 'provider.kind',
    change: (i) => ({ ...i, provider: { ...i.provider, kind: 'other' } as unknown as RunInput['provider'] }),
  },
  {
    what: 'a continuation from another session',
    field: 'work.source.invocation.sessionId',
    change: (i) => ({
      ...i,
      work: {
        kind: 'continuation',
        source: {
          invocation: { sessionId: 'session-elsewhere', turnId: 't', runId: 'r', invocationId: 'i' },
          highWater: 1,
          digest: `sha256:${'0'.repeat(64)}`,
        },
      },
    }),
  },
]

test(
  'RUN_INVALID_INPUT names the bad field and writes nothing',
  engineTest([answer.text('done')], {}, async (h) => {
    // A log that is not empty, so an unchanged digest means something.
    assert.equal(await h.run(h.input('first')), { status: 'completed' })
    for (const { what, field, change } of invalid) {
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(change(h.input('bad'))), 'RUN_INVALID_INPUT', what)
      const fields = error.details?.fields as string[] | undefined
      assert.ok(fields?.includes(field), `${what}: details.fields ${JSON.stringify(fields)} names ${field}`)
    }
    const undefinedOption: RunInput = {
      ...h.input('bad'),
      // @ts-expect-error a member that is undefined is not JSON: the type refuses it as admission does
      providerOptions: { temperature: undefined },
    }
    const notJson = await refusedWithoutWriting(h.log, () => h.engine.start(undefinedOption), 'RUN_INVALID_INPUT', 'an undefined provider option')
    assert.equal(notJson.details?.fields, ['providerOptions.temperature'])
    assert.match(notJson.message, /providerOptions\.temperature: not JSON \(undefined\)/, 'the message says why')
    const twice = h.input('bad')
    twice.maxSteps = 0
    twice.configuration = { cwd: 'relative' }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start(twice), 'RUN_INVALID_INPUT', 'two bad fields')
    assert.equal([...(error.details?.fields as string[])].sort(), ['configuration.cwd', 'maxSteps'], 'every bad field is named')
    const reused = h.input('first')
    reused.invocation.turnId = 'turn-again'
    reused.invocation.runId = 'run-again'
    const used = await refusedWithoutWriting(h.log, () => h.engine.start(reused), 'RUN_INVALID_INPUT', 'an invocation id already in the log')
    assert.equal(used.details?.fields, ['invocation.invocationId'])
    const runAgain = h.input('again')
    const { sessionId, runId } = h.input('first').invocation
    runAgain.invocation = { ...runAgain.invocation, sessionId, runId }
    const usedRunError = await refusedWithoutWriting(h.log, () => h.engine.start(runAgain), 'RUN_INVALID_INPUT', 'a run id already in the session')
    assert.equal(usedRunError.details?.fields, ['invocation.runId'])
    const sameAgain = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('first')), 'RUN_INVALID_INPUT', 'the same input again')
    assert.equal(sameAgain.details?.fields, ['invocation.invocationId', 'invocation.runId'], 'both reused ids are named')
    assert.is(h.server.requests.length, 1, 'no refused run reached the model')
  }),
)

test(
  'providerOptions is typed as what admission takes (JsonObject): JSON, written as a literal, `as const` or a type of its own; what it refuses does not type-check',
  engineTest([answer.text('done'), answer.text('done'), answer.text('done')], {}, async (h) => {
    const literal: RunInput = {
      ...h.input('literal'),
      providerOptions: { temperature: 0.2, seed: 7, stream: false, user: 'u-1', stop: ['\n\n', 'END'], metadata: null, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object', properties: { a: { type: ['string', 'null'] } } } } } },
    }
    const constant: RunInput = { ...h.input('constant'), providerOptions: { stop: ['a', 'b'], reasoning: { effort: 'low' } } as const }
    type Sampling = { temperature: number; top_p: number; stop: string[]; logit_bias: Record<string, number> }
    const sampling: Sampling = { temperature: 0, top_p: 1, stop: ['.'], logit_bias: { '50256': -100 } }
    const named: RunInput = { ...h.input('named'), providerOptions: sampling }
    for (const input of [literal, constant, named]) assert.equal(await h.run(input), { status: 'completed' }, input.invocation.runId)
    assert.equal(
      (await storedEvents(h.log)).flatMap(({ event: { fact } }) => (fact.type === 'invocation.opened' ? [fact.execution.providerOptions] : [])),
      [literal.providerOptions, constant.providerOptions, sampling],
      'recorded as given',
    )
    class Budget {
      limit = 5
      spend(): number {
        return this.limit
      }
    }
    const refused: [what: string, input: RunInput][] = [
      // @ts-expect-error a Date is not JSON
      ['a Date', { ...h.input('bad'), providerOptions: { since: new Date(0) } }],
      // @ts-expect-error a Map is not a JSON object
      ['a Map', { ...h.input('bad'), providerOptions: new Map([['temperature', 0]]) }],
      // @ts-expect-error a function is not JSON
      ['a function', { ...h.input('bad'), providerOptions: { hook: () => 1 } }],
      // @ts-expect-error a BigInt is not JSON
      ['a BigInt', { ...h.input('bad'), providerOptions: { seed: 1n } }],
      // @ts-expect-error a class instance (a method and a prototype) is not a JSON object
      ['a class instance', { ...h.input('bad'), providerOptions: { budget: new Budget() } }],
      // @ts-expect-error a list is not a JSON object
      ['a list', { ...h.input('bad'), providerOptions: [0.2] }],
    ]
    for (const [what, input] of refused) await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_INVALID_INPUT', what)
  }),
)

test(
  'RUN_BUSY while the session has an active run; the session is free once it ends',
  engineTest([answer.text('first', { hold: true }), answer.text('other'), answer.text('second')], {}, async (h) => {
    const first = await h.start(h.input('first', { session: 'shared' }))
    await h.server.seen(0)
    const busy = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('second', { session: 'shared' })), 'RUN_BUSY', 'a second message')
    const active = { sessionId: 'shared', reason: 'active', runId: first.invocation.runId, invocationId: first.invocation.invocationId }
    assert.equal(busy.details, active, 'details name the run in the way')
    assert.match(busy.message, `wait for it to end, or cancel it (engine.running("${first.invocation.invocationId}")?.cancel(), or its signal)`)
    const running = (await h.log.runSource('shared', 'run-first'))?.boundary
    assert.ok(running)
    const continuation = h.input('continued', { session: 'shared' })
    continuation.work = { kind: 'continuation', source: running }
    const busyContinuation = await refusedWithoutWriting(h.log, () => h.engine.start(continuation), 'RUN_BUSY', 'a continuation of the running run')
    assert.equal(busyContinuation.details, active)
    // Another session is not affected.
    const other = await h.start(h.input('other', { session: 'elsewhere' }))
    h.server.release(0)
    assert.equal(await first.wait(), { status: 'completed' })
    assert.equal(await other.wait(), { status: 'completed' })
    const second = await h.start(h.input('second', { session: 'shared' }))
    assert.equal(await second.wait(), { status: 'completed' })
    assert.is(h.server.requests.length, 3)
  }),
)

test(
  'RUN_BUSY while a turn is paused by a handoff, until its successor ends',
  engineTest([answer.text('successor done'), answer.text('next done')], {}, async (h) => {
    const sealed = await sealAtFirstSafePoint(h, h.input('paused', { session: 'shared' }), 'successor')
    const busy = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('next', { session: 'shared' })), 'RUN_BUSY', 'a new message in the paused turn')
    const { turnId, runId, invocationId } = sealed.input.invocation
    assert.equal(busy.details, { sessionId: 'shared', reason: 'paused', runId, invocationId, turnId }, 'details name the paused turn')
    const sameTurn = h.input('next', { session: 'shared' })
    sameTurn.invocation.turnId = sealed.input.invocation.turnId
    await refusedWithoutWriting(h.log, () => h.engine.start(sameTurn), 'RUN_BUSY', 'a new run in the paused turn itself')
    const continuation = h.input('next', { session: 'shared' })
    continuation.work = { kind: 'continuation', source: sealed.source }
    await refusedWithoutWriting(h.log, () => h.engine.start(continuation), 'RUN_BUSY', 'a continuation of the sealed run')
    const successor = await h.start(successorInput(sealed))
    assert.equal(await successor.wait(), { status: 'completed' })
    const next = await h.start(h.input('next', { session: 'shared' }))
    assert.equal(await next.wait(), { status: 'completed' })
    assert.is(h.server.requests.length, 2)
  }),
)

test(
  'a tool without inputSchema and one stating the default schema are the same catalog: a seal made with one admits a successor with the other',
  engineTest([answer.text('successor done')], {}, async (h) => {
    const bare = countingTool('echo')
    delete bare.inputSchema
    const sealed = await sealAtFirstSafePoint(h, h.input('paused', { tools: [bare] }), 'successor')
    const stated = countingTool('echo')
    stated.inputSchema = { type: 'object', properties: {} }
    const successor = successorInput(sealed)
    successor.tools = [stated]
    const running = await h.start(successor)
    assert.equal(await running.wait(), { status: 'completed' })
    const shown = (h.server.requests[0]?.body as { tools?: { function: { parameters?: unknown } }[] }).tools?.[0]?.function
    assert.equal(shown?.parameters, { type: 'object', properties: {} }, 'what the model is shown')
    // A schema that does say more is another catalog.
    const other = await sealAtFirstSafePoint(h, h.input('again', { tools: [bare] }), 'other')
    const stricter = countingTool('echo')
    const refused = successorInput(other)
    refused.tools = [stricter]
    await refusedWithoutWriting(h.log, () => h.engine.start(refused), 'HANDOFF_MISMATCH', 'a successor shown another schema')
  }),
)

test(
  'a seal made by an earlier build, which digested a tool without inputSchema with a null schema, still admits its successor',
  engineTest([answer.text('successor done')], {}, async (h) => {
    const bare = countingTool('echo')
    delete bare.inputSchema
    // The facts such a build wrote: its catalog digest is the legacy one.
    const execution = { model: 'scripted', providerOptions: {}, cwd: CWD, tools: { catalogDigest: legacyCatalogDigest([bare]), names: ['echo'] } }
    assert.is.not(execution.tools.catalogDigest, catalogOf([bare]).catalogDigest, 'the two digests differ')
    const source = { sessionId: 'session-old', turnId: 'turn-old', runId: 'run-old', invocationId: 'invocation-old' }
    const intent: HandoffIntent = { handoffId: 'handoff-old', hostEpoch: 'epoch-1', rootRunId: 'run-old', successorRunId: 'run-next', successorInvocationId: 'invocation-next', claimId: 'claim-old' }
    const pause: HandoffPause = { intent, remainingSteps: 2, execution }
    let n = 0
    const event = (fact: Fact): RuntimeEvent => ({ id: `old/${++n}`, recordedAt: 1_700_000_000_000 + n, invocation: source, fact })
    await h.log.appendAll(
      [
        { type: 'invocation.opened', input: { kind: 'message', content: 'question old' }, configuration: { cwd: CWD }, execution },
        { type: 'model.requested', stepId: 'step-1', model: 'scripted', requestDigest: `sha256:${'0'.repeat(64)}` },
        { type: 'model.completed', stepId: 'step-1', output: { toolCalls: [{ callId: 'call-1', name: 'echo', arguments: '{}' }], finishReason: 'tool_calls' } },
        { type: 'tool.dispatched', operationId: 'op-1', callId: 'call-1', name: 'echo', input: {} },
        { type: 'tool.settled', operationId: 'op-1', outcome: { status: 'succeeded', output: {} } },
        { type: 'hold.entered', handoffId: 'handoff-old' },
        { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } },
      ].map((fact) => event(fact as Fact)),
    )
    const sealed = await h.log.runSource('session-old', 'run-old')
    assert.ok(sealed?.pause, 'the old run is sealed')
    const successor: RunInput = {
      invocation: successorOf(intent, source),
      provider: { kind: 'openai-chat', baseUrl: h.server.baseUrl, model: 'scripted' },
      configuration: { cwd: CWD },
      tools: [bare],
      work: { kind: 'handoff', source: sealed.boundary, pause: sealed.pause },
    }
    assert.equal(await h.run(successor), { status: 'completed' })
    assert.is(bare.calls.length, 0, 'the sealed tool call is replayed, not run again')
  }),
)

test(
  'RUN_SOURCE_MISMATCH for a boundary taken while its source still ran: only the end of a run is a source',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 42 } }]), answer.text('source answer'), answer.text('continued')], {}, async (h) => {
    let midRun: Awaited<ReturnType<typeof h.log.runSource>>
    const echo = countingTool('echo', async (input) => {
      midRun = await h.log.runSource('shared', 'run-source')
      return input
    })
    assert.equal(await h.run(h.input('source', { session: 'shared', tools: [echo] })), { status: 'completed' })
    const stale = midRun?.boundary
    const end = (await h.log.runSource('shared', 'run-source'))?.boundary
    assert.ok(stale && end && stale.highWater < end.highWater, 'the boundary was taken mid-run')
    const continuation = h.input('continued', { session: 'shared', tools: [countingTool('echo')] })
    continuation.work = { kind: 'continuation', source: stale }
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(continuation), 'RUN_SOURCE_MISMATCH', 'a mid-run boundary')
    assert.equal(refused.details, { sessionId: 'shared', runId: 'run-source', field: 'highWater', lastSeq: end.highWater, ended: true })
    assert.match(refused.message, /read the run's boundary again with log\.runSource\("shared", "run-source"\)/)
    continuation.work = { kind: 'continuation', source: end }
    assert.equal(await h.run(continuation), { status: 'completed' })
    const messages = h.server.requests.at(-1)?.body.messages as { role: string }[]
    assert.equal(messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant'], 'the whole source is replayed, its tool answer included')
  }),
)

test(
  'what the caller changes after start() does not reach the run: its ids, cwd, options and the catalog the seal digests stay as admitted',
  engineTest(
    [answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 1 } }], { hold: true }), answer.text('done'), answer.text('next')],
    {},
    async (h) => {
      const input = h.input('kept')
      input.providerOptions = { temperature: 0 }
      const tool = input.tools[0] as ReturnType<typeof countingTool>
      const running = await h.start(input)
      await h.server.seen(0)
      // The caller changes its objects while the first request is in flight.
      tool.description = 'changed'
      ;(tool.inputSchema as { properties: Record<string, unknown> }).properties.extra = { type: 'string' }
      ;(input.providerOptions as Record<string, unknown>).temperature = 1
      ;(input.tools as ToolDefinition[]).push(countingTool('late'))
      input.invocation.sessionId = 'session-changed'
      input.configuration.cwd = '/changed'
      h.server.release(0)
      assert.equal(await running.wait().catch((error: Error) => error.message), { status: 'completed' })
      const [first, second] = h.server.requests.map((request) => request.body as Record<string, unknown>)
      assert.equal(second?.tools, first?.tools, 'the second request shows the catalog of the first')
      assert.is(second?.temperature, 0)
      assert.is(tool.calls.length, 1, "the caller's tool still ran, as its own method")
      const facts = await factsOf(h.log, 'invocation-kept')
      assert.is(facts.at(-1)?.type, 'invocation.ended', 'every fact landed under the invocation as admitted')
      assert.is(facts.length, 8)
      // The next run of the same tool object is shown the tool as it is now.
      const next = h.input('next')
      next.tools = [tool]
      assert.equal(await h.run(next), { status: 'completed' })
      const shown = (h.server.requests[2]?.body as { tools?: { function: { description?: string; parameters?: unknown } }[] }).tools?.[0]?.function
      assert.is(shown?.description, 'changed')
      assert.equal(shown?.parameters, tool.inputSchema)
    },
  ),
)

test(
  'RUN_SOURCE_MISMATCH for a continuation whose boundary the log does not hold',
  engineTest([answer.text('source answer'), answer.text('continued')], {}, async (h) => {
    assert.equal(await h.run(h.input('source', { session: 'shared' })), { status: 'completed' })
    const source = (await h.log.runSource('shared', 'run-source'))?.boundary
    assert.ok(source)
    const last = source.digest.at(-1) === '0' ? '1' : '0'
    // Which member of the boundary is at fault, where the run ends (never the digest the log would take), and what to read again.
    const atEnd = { sessionId: 'shared', runId: 'run-source', lastSeq: source.highWater, ended: true }
    const readAgain = /; read the run's boundary again with log\.runSource\("shared", "run-source"\)/
    const listRuns = /; list the session's runs with log\.runs\("shared"\)/
    const forgeries = [
      { what: 'a forged digest', boundary: { ...source, digest: `${source.digest.slice(0, -1)}${last}` }, details: { ...atEnd, field: 'digest' }, remedy: readAgain },
      { what: 'an earlier high-water', boundary: { ...source, highWater: source.highWater - 1 }, details: { ...atEnd, field: 'highWater' }, remedy: readAgain },
      { what: 'a later high-water', boundary: { ...source, highWater: source.highWater + 1 }, details: { ...atEnd, field: 'highWater' }, remedy: readAgain },
      { what: 'a run the log never saw', boundary: { ...source, invocation: { ...source.invocation, runId: 'run-ghost' } }, details: { sessionId: 'shared', runId: 'run-ghost', field: 'invocation' }, remedy: listRuns },
      { what: 'another invocation of the run', boundary: { ...source, invocation: { ...source.invocation, invocationId: 'invocation-ghost' } }, details: { sessionId: 'shared', runId: 'run-source', field: 'invocation' }, remedy: listRuns },
      { what: 'the run moved to another turn', boundary: { ...source, invocation: { ...source.invocation, turnId: 'turn-elsewhere' } }, details: { sessionId: 'shared', runId: 'run-source', field: 'invocation' }, remedy: listRuns },
    ]
    for (const { what, boundary, details, remedy } of forgeries) {
      const continuation = h.input('continued', { session: 'shared' })
      continuation.work = { kind: 'continuation', source: boundary }
      const refused = await refusedWithoutWriting(h.log, () => h.engine.start(continuation), 'RUN_SOURCE_MISMATCH', what)
      assert.equal(refused.details, details, what)
      assert.match(refused.message, remedy, what)
      const read = await h.log.lineageEvents(boundary).then(() => undefined, (error: Error & { details?: unknown }) => error.details)
      assert.equal(read, details, `${what}: lineageEvents says the same`)
    }
    const continuation = h.input('continued', { session: 'shared' })
    continuation.work = { kind: 'continuation', source }
    const before = await markOf(h.log)
    assert.equal(await h.run(continuation), { status: 'completed' })
    assert.ok((await markOf(h.log)).highWater > before.highWater)
    const messages = h.server.requests[1]?.body.messages as { role: string; content: string }[]
    assert.equal(
      messages.map((m) => [m.role, m.content]),
      [
        ['user', 'question source'],
        ['assistant', 'source answer'],
      ],
      'the continuation replays its source from facts',
    )
    const opened = only(await factsOf(h.log, 'invocation-continued'), 'invocation.opened')[0]
    assert.equal(opened?.execution.replayBase, source)
  }),
)

test(
  'a createClient that returns what is not a client (null, a promise, an object without complete(), one that cannot be read) refuses the run without writing',
  engineTest([answer.text('never asked')], {}, async (h) => {
    const unreadable = new Proxy({}, {
      get() {
        throw new Error('no client here')
      },
    })
    const made: [string, unknown, RegExp][] = [
      ['null', null, /createClient returned null, not a ModelClient/],
      ['undefined', undefined, /createClient returned undefined, not a ModelClient/],
      ['a promise', Promise.resolve({ complete: async () => ({}) }), /createClient returned a promise \(createClient must return the client itself\)/],
      ['an object without complete', { send: async () => ({}) }, /createClient returned an object without a complete\(\) method/],
      ['an unreadable client', unreadable, /the model client could not be read: no client here/],
    ]
    for (const [what, client, message] of made) {
      const engine = new Engine({ log: h.log, model: new ModelExecutor({ createClient: () => client as ModelClient }) })
      const error = await refusedWithoutWriting(h.log, () => engine.start(h.input(`client-${what.replaceAll(' ', '-')}`)), 'RUN_INVALID_INPUT', what)
      assert.equal(error.details, { fields: ['provider'] }, what)
      assert.match(error.message, message, what)
    }
    // The session was left free: the same run is admitted with a client that is one.
    assert.equal(await h.run(h.input('client-null')), { status: 'completed' })
  }),
)

test(
  'a run input is checked as it runs: a getter that gives another value when the input is copied is refused, not run with the value that was not checked',
  engineTest([answer.text('done'), answer.text('inherited done')], {}, async (h) => {
    const input = h.input('getter') as unknown as Record<string, unknown>
    let reads = 0
    const checked = { cwd: '/workspace/checked' }
    Object.defineProperty(input, 'configuration', {
      enumerable: true,
      get() {
        reads += 1
        // The first read is checked; a second would record a relative cwd, which admission refuses.
        return reads === 1 ? checked : { cwd: 'relative/path' }
      },
    })
    let optionReads = 0
    Object.defineProperty(input, 'providerOptions', {
      enumerable: true,
      get() {
        optionReads += 1
        return optionReads === 1 ? { temperature: 0 } : { model: 'another-model', temperature: 0 }
      },
    })
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(input as unknown as RunInput), 'RUN_INVALID_INPUT', 'a cwd that turns relative, provider options that come to name the model')
    assert.equal(refused.details, { fields: ['providerOptions.model', 'configuration.cwd'] })
    assert.match(refused.message, /model is set by the engine/)
    assert.equal({ reads, optionReads }, { reads: 2, optionReads: 2 }, 'read for the check, then for the copy')
    assert.equal(h.server.requests, [], 'nothing was sent')
    // A plain input of the same values runs, as given.
    const plain = { ...h.input('getter'), configuration: checked, providerOptions: { temperature: 0 } }
    assert.equal(await h.run(plain), { status: 'completed' })
    // Members it inherits (an input made with Object.create from defaults) are read as its own.
    const inherited = Object.create(h.input('inherited')) as RunInput
    assert.equal(await h.run(inherited), { status: 'completed' })
    const [opened] = only(await factsOf(h.log, 'invocation-getter'), 'invocation.opened')
    assert.equal([opened?.configuration.cwd, opened?.execution.providerOptions], ['/workspace/checked', { temperature: 0 }])
  }),
)

test.run()
