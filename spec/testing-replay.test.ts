/**
 * Replaying a recorded run (factstate/testing: `recordedRun`, `scriptOf`, `compareRuns`): a run
 * recorded against the scripted server on a real LevelDB log is scripted from its facts, run again
 * with the same input on a fresh log against a server given that script, and compared; the replay
 * sends the recorded requests byte for byte. A tool that behaves otherwise is named as the first
 * difference, a continuation replays with the runs it continued, and bad input is refused.
 */
import { spawn } from 'node:child_process'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, childRunFor, recoverInvocations, type Invocation, type JsonObject, type RunInput, type StoredEvent, type ToolDefinition } from '../index.js'
import { providerWordsOf } from '../actors/openai-chat-client.js'
import { answer, compareRuns, recordedRun, scriptedModelServer, scriptOf, type Script, type ScriptedAnswer, type ScriptedModelServerOptions } from '../testing/index.js'
import { rejectsWithCode } from './support/codes.js'
import { REPO_ROOT, killChildAt } from './support/log-fixtures.js'
import { DEPLOY } from './support/replay-crash-tool.js'
import { withTempDir, withTimeout } from './support/temp.js'
import { ensureBuilt } from './support/built.js'

/** An order lookup whose answer for each order the test chooses. */
function lookupOrder(statuses: Record<string, string>): ToolDefinition & { calls: string[] } {
  const calls: string[] = []
  return {
    name: 'lookupOrder',
    description: 'the status of an order',
    inputSchema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] },
    calls,
    async execute(input, context) {
      const { orderId } = input as { orderId: string }
      calls.push(orderId)
      // The operation id is the invocation's: a replay's differs, and is compared by its step and index.
      return { orderId, status: statuses[orderId] ?? 'unknown', key: context.operationId }
    },
  }
}

const ids = (name: string): Invocation => ({ sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` })

function input(
  baseUrl: string,
  name: string,
  cwd: string,
  tools: ToolDefinition[],
  work: RunInput['work'] = { kind: 'message', content: 'Where are A-17 and B-2?' },
  providerOptions: RunInput['providerOptions'] = {},
): RunInput {
  return {
    providerOptions,
    invocation: ids(name),
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted' },
    configuration: { cwd },
    instructions: 'You track orders.',
    maxSteps: 5,
    tools,
    work,
  }
}

/** Quick retries, so a recorded 503 and its retry replay in no time; a timeout no answer on a loaded machine reaches (no case here is one). */
const executor = () => new ModelExecutor({ timeoutMs: 30_000, backoffMs: 1, maxBackoffMs: 5 })

/** The production run: two lookups, a call to a tool the catalog lacks, a 503 retried, reasoning and cache counts, the provider's opaque state (a call's thought signature, reasoning_details). */
const PRODUCTION: Script = [
  answer.toolCalls(
    [
      // A provider's own call ids, which the replay must send back as recorded.
      { name: 'lookupOrder', arguments: { orderId: 'A-17' }, id: 'call_Xq17', extraContent: { google: { thought_signature: 'CiQBVKhc7nX0' } } },
      { name: 'cancelOrder', arguments: { orderId: 'A-17' }, id: 'call_Zc17' },
    ],
    { text: 'Looking.', usage: { prompt_tokens: 120, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 100 } } },
  ),
  answer.status(503),
  answer.toolCalls([{ name: 'lookupOrder', arguments: '{"orderId": "B-2"}' }], {
    reasoning: 'A-17 is done; now B-2.',
    reasoningDetails: [{ type: 'reasoning.text', text: 'A-17 is done; now B-2.', signature: 'EqoBCkgIARAB', index: 0 }],
  }),
  answer.text('A-17 has shipped; B-2 is lost.', { usage: { prompt_tokens: 300, completion_tokens: 12, completion_tokens_details: { reasoning_tokens: 4 } } }),
]

/** A run's input, or what makes it from the log the runs before it wrote (a continuation's source). */
type Next = RunInput | ((log: EventLog) => Promise<RunInput>)

/** Runs `inputs` one after the other on a fresh log at `dir` against a server answering `script` (an array read back from its JSON); returns the server's request bodies. */
async function runAll(
  dir: string,
  script: Script,
  inputs: (baseUrl: string) => Next[],
  read: (log: EventLog) => Promise<void>,
  modelExecutor = executor(),
  serverOptions: ScriptedModelServerOptions = {},
): Promise<string[]> {
  // Read back from JSON, as `factstate script` hands a script over: every answer scriptOf makes of a real run passes the server's check so.
  const model = await scriptedModelServer(Array.isArray(script) ? (JSON.parse(JSON.stringify(script)) as ScriptedAnswer[]) : script, serverOptions)
  const log = await EventLog.open(join(dir, 'log'))
  try {
    const engine = new Engine({ log, model: modelExecutor })
    for (const next of inputs(model.baseUrl)) await engine.run(typeof next === 'function' ? await next(log) : next)
    assert.equal(model.unscripted, [], 'every request was scripted')
    await read(log)
    return model.requests.map((request) => request.bodyText)
  } finally {
    await log.close()
    await model.close()
  }
}

/** The messages of a run's model.interrupted facts. */
const interruptions = (events: readonly StoredEvent[]) => events.flatMap(({ event }) => (event.fact.type === 'model.interrupted' ? [event.fact.message] : []))

test('a refused request replays with the recorded message, however often it is re-recorded: the script carries the provider\'s own words', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const script: Script = [
          // An error reported in an answer begun as a success (HTTP 200), retried as its type says.
          answer.malformed({ body: JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } }) }),
          answer.status(429),
          answer.status(503),
          answer.status(404, { body: { error: { message: 'no such model' } } }),
          answer.text('done'),
        ]
        const generations: (string | undefined)[][] = []
        let next = script
        for (const generation of [0, 1, 2]) {
          let run: StoredEvent[] = []
          // A 404 is not retried: the run fails there, and `done` is never asked for.
          await runAll(join(dir, `generation-${generation}`), next, (baseUrl) => [input(baseUrl, `g${generation}`, join(dir, `g${generation}`), [])], async (log) => {
            run = await recordedRun(log, `invocation-g${generation}`)
          })
          generations.push(interruptions(run))
          next = scriptOf(run)
        }
        assert.equal(generations[0], ['the provider reported an error in its answer: overloaded', 'the provider answered HTTP 429: scripted status 429', 'the provider answered HTTP 503: scripted status 503', 'the provider answered HTTP 404: no such model'])
        assert.equal(generations[1], generations[0])
        assert.equal(generations[2], generations[0])
        // A 404 from a baseUrl without a path also carries the client's hint about /v1: not the provider's words either.
        const hinted = 'the provider answered HTTP 404: no such route (requests go to http://127.0.0.1:9/chat/completions: most OpenAI-compatible servers serve them under /v1, so try the baseUrl http://127.0.0.1:9/v1)'
        assert.is(providerWordsOf(hinted, 404), 'no such route')
        assert.is(providerWordsOf('the provider answered HTTP 503 and then sent nothing for 50ms (idleTimeoutMs)', 503), undefined, 'a message the client composed otherwise is kept whole')
      }),
    30_000,
    'replayed refusals',
  ))

for (const stream of [false, true]) {
  // Streamed (SSE) too: the reasoning, the calls' pieces and the usage chunk.
  const providerOptions: JsonObject = stream ? { stream: true, stream_options: { include_usage: true } } : {}
  test(`a recorded run scripted from its facts replays on a fresh log${stream ? ' (streamed)' : ''}: the same requests byte for byte, and compareRuns finds no difference`, () =>
    withTimeout(
      () =>
        withTempDir(async (dir) => {
          let recorded: StoredEvent[] = []
          const recordedTool = lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })
          const sent = await runAll(join(dir, 'production'), PRODUCTION, (baseUrl) => [input(baseUrl, 'production', '/srv/prod', [recordedTool], undefined, providerOptions)], async (log) => {
            recorded = await recordedRun(log, 'invocation-production')
          })
          assert.equal(recorded.map(({ event }) => event.fact.type).filter((type) => type === 'model.requested').length, 4)
          const script = scriptOf(recorded)
          assert.equal(script.map((a) => a.kind), ['toolCalls', 'status', 'toolCalls', 'text'])
          // The provider's own words, not the message the client composed of them.
          assert.equal(script[1], answer.status(503, { body: { error: { message: 'scripted status 503', type: 'server_error' } } }))

          const replayTool = lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })
          let replayed: StoredEvent[] = []
          const resent = await runAll(join(dir, 'replay'), script, (baseUrl) => [input(baseUrl, 'replay', join(dir, 'replay'), [replayTool], undefined, providerOptions)], async (log) => {
            replayed = await recordedRun(log, 'invocation-replay')
          })
          // The only bytes that differ are the operation ids the tool returns, which name the invocation.
          assert.equal(resent.map((body) => body.replaceAll('invocation-replay/', 'invocation-production/')), sent, 'the replay sent the recorded requests byte for byte')
          assert.equal(replayTool.calls, ['A-17', 'B-2'])
          assert.is(compareRuns(recorded, replayed), undefined)
          // The model's answers came back as recorded, reasoning and cache counts included; the provider's ids are not compared.
          const answers = (events: typeof recorded) => events.flatMap(({ event }) => (event.fact.type === 'model.completed' ? [{ ...event.fact.output, responseId: undefined }] : []))
          assert.equal(answers(replayed), answers(recorded))
          assert.is(answers(replayed)[1]?.reasoning, 'A-17 is done; now B-2.')
          assert.is(answers(replayed)[0]?.usage?.cachedInputTokens, 100)
          assert.is(answers(replayed)[2]?.usage?.reasoningTokens, 4)
          assert.equal(answers(replayed)[0]?.toolCalls[0]?.extraContent, { google: { thought_signature: 'CiQBVKhc7nX0' } })
          assert.equal(answers(replayed)[1]?.reasoningDetails, [{ type: 'reasoning.text', text: 'A-17 is done; now B-2.', signature: 'EqoBCkgIARAB', index: 0 }])
          assert.equal(interruptions(replayed), interruptions(recorded))
          assert.equal(interruptions(recorded), ['the provider answered HTTP 503: scripted status 503'])
        }),
      30_000,
      'replay',
    ),
  )
}

test('a replay whose tool answers otherwise: compareRuns names the first fact that differs, and what differs in it', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), PRODUCTION, (baseUrl) => [input(baseUrl, 'production', '/srv/prod', [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })])], async (log) => {
          recorded = await recordedRun(log, 'invocation-production')
        })
        let replayed: StoredEvent[] = []
        // B-2 is found now: the second lookup's outcome differs, and so (the model being scripted) nothing before it.
        await runAll(join(dir, 'replay'), scriptOf(recorded), (baseUrl) => [input(baseUrl, 'replay', dir, [lookupOrder({ 'A-17': 'shipped', 'B-2': 'found' })])], async (log) => {
          replayed = await recordedRun(log, 'invocation-replay')
        })
        const difference = compareRuns(recorded, replayed)
        const settledB2 = recorded.findLast(({ event }) => event.fact.type === 'tool.settled')
        assert.ok(difference, 'a difference is found')
        assert.is(difference.type, 'tool.settled')
        assert.is(difference.field, 'outcome.output.status')
        assert.is(difference.recorded, 'lost')
        assert.is(difference.replayed, 'found')
        assert.is(difference.recordedSeq, settledB2?.seq)
        assert.is(difference.message, `fact ${difference.index} (tool.settled:succeeded, seq ${settledB2?.seq}): outcome.output.status is "lost" in the recording, "found" in the replay`)

        // A tool renamed: the catalog differs from the first fact on.
        let renamed: StoredEvent[] = []
        await runAll(join(dir, 'renamed'), scriptOf(recorded), (baseUrl) => [input(baseUrl, 'renamed', dir, [{ ...lookupOrder({}), name: 'findOrder' }])], async (log) => {
          renamed = await recordedRun(log, 'invocation-renamed')
        })
        const catalog = compareRuns(recorded, renamed)
        assert.is(catalog?.index, 0)
        assert.is(catalog?.type, 'invocation.opened')
        assert.is(catalog?.field, 'execution.tools.catalogDigest')
        // The digest alone names no tool: the message names the tools that differ, by each one's own digest.
        assert.match(catalog?.message ?? '', / in the replay \(tool "findOrder" added, tool "lookupOrder" removed\)$/)
        // A tool whose description changed (the same name): named as changed.
        let described: StoredEvent[] = []
        await runAll(join(dir, 'described'), scriptOf(recorded), (baseUrl) => [input(baseUrl, 'described', dir, [{ ...lookupOrder({}), description: 'where an order is' }])], async (log) => {
          described = await recordedRun(log, 'invocation-described')
        })
        const changed = compareRuns(recorded, described)
        assert.is(changed?.field, 'execution.tools.catalogDigest')
        assert.match(changed?.message ?? '', / in the replay \(tool "lookupOrder" changed \(description or input schema\)\)$/)

        // A replay cut short: the recording goes on.
        const short = compareRuns(recorded, replayed.slice(0, 3))
        assert.is(short?.index, 3)
        assert.is(short?.field, 'facts')
        assert.match(short?.message ?? '', /the replay ends here, after 3 facts/)
      }),
    60_000,
    'replay difference',
  ),
)

test('a continuation replays with the run it continued: recordedRun reads the lineage, and the replay agrees', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const script: Script = [
          answer.toolCalls([{ name: 'lookupOrder', arguments: { orderId: 'A-17' } }]),
          answer.text('A-17 has shipped.'),
          answer.toolCalls([{ name: 'lookupOrder', arguments: { orderId: 'B-2' } }]),
          answer.text('B-2 is lost.'),
        ]
        const chain = (prefix: string, cwd: string) => (baseUrl: string): Next[] => [
          input(baseUrl, `${prefix}-first`, cwd, [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })], { kind: 'message', content: 'Where is A-17?' }),
          async (log) => {
            const source = await log.runSource(`session-${prefix}-first`, `run-${prefix}-first`)
            assert.ok(source, 'the first run is in the log')
            return {
              ...input(baseUrl, `${prefix}-next`, cwd, [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })], { kind: 'continuation', source: source.boundary, content: 'And B-2?' }),
              invocation: { ...ids(`${prefix}-next`), sessionId: `session-${prefix}-first` },
            }
          },
        ]
        let recorded: StoredEvent[] = []
        const sent = await runAll(join(dir, 'production'), script, chain('production', '/srv/prod'), async (log) => {
          recorded = await recordedRun(log, 'invocation-production-next')
        })
        assert.equal([...new Set(recorded.map(({ event }) => event.invocation.invocationId))], ['invocation-production-first', 'invocation-production-next'])
        assert.is(scriptOf(recorded).length, 4)
        let replayed: StoredEvent[] = []
        const resent = await runAll(join(dir, 'replay'), scriptOf(recorded), chain('replay', dir), async (log) => {
          replayed = await recordedRun(log, 'invocation-replay-next')
        })
        assert.equal(resent.map((body) => body.replaceAll('invocation-replay-', 'invocation-production-')), sent)
        assert.is(compareRuns(recorded, replayed), undefined)
        // Only the continuation replayed, as its first run: the runs are named apart.
        const own = replayed.filter(({ event }) => event.invocation.invocationId === 'invocation-replay-next')
        assert.is(compareRuns(recorded, own)?.field, 'input.kind')
      }),
    60_000,
    'continuation replay',
  ),
)

test("a fact naming another run's ids (an operation of the run it continued, a child run's, a run's own) agrees with the replay's naming the replay's", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        /** A note saver that returns the ids its call has: its child run's, its invocation's, its run's. */
        const saveNote = (): ToolDefinition => ({
          name: 'save_note',
          inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
          execute: async (_input, context) => ({
            saved: true,
            writer: childRunFor(context, 'writer').invocation.sessionId,
            invocation: context.invocation.invocationId,
            run: context.invocation.runId,
          }),
        })
        const script: Script = [answer.toolCalls([{ name: 'save_note', arguments: { text: 'call Ann' } }]), answer.text('Saved.'), answer.text('Not saved again.')]
        /** The first run saves the note; its continuation is told so, naming the operation (of `step`, in the replay that names another). */
        const chain = (prefix: string, step = 'step-1') => (baseUrl: string): Next[] => [
          input(baseUrl, `${prefix}-1`, dir, [saveNote()], { kind: 'message', content: 'Note: call Ann.' }),
          async (log) => {
            const source = await log.runSource(`session-${prefix}-1`, `run-${prefix}-1`)
            assert.ok(source, 'the first run is in the log')
            const content = `save_note (operation invocation-${prefix}-1/${step}/0): the note was saved; do not save it again`
            return { ...input(baseUrl, `${prefix}-2`, dir, [saveNote()], { kind: 'continuation', source: source.boundary, content }), invocation: { ...ids(`${prefix}-2`), sessionId: `session-${prefix}-1` } }
          },
        ]
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), script, chain('prod'), async (log) => {
          recorded = await recordedRun(log, 'invocation-prod-2')
        })
        const settled = recorded.find(({ event }) => event.fact.type === 'tool.settled')?.event.fact
        assert.equal(settled?.type === 'tool.settled' && settled.outcome.status === 'succeeded' ? settled.outcome.output : undefined, {
          saved: true,
          writer: 'invocation-prod-1.step-1.0.writer',
          invocation: 'invocation-prod-1',
          run: 'run-prod-1',
        })
        let replayed: StoredEvent[] = []
        await runAll(join(dir, 'replay'), scriptOf(recorded), chain('replay'), async (log) => {
          replayed = await recordedRun(log, 'invocation-replay-2')
        })
        assert.is(compareRuns(recorded, replayed)?.message, undefined)

        // A continuation told of another operation of the first run: named by its run's label, step and index.
        let other: StoredEvent[] = []
        await runAll(join(dir, 'other'), scriptOf(recorded), chain('other', 'step-2'), async (log) => {
          other = await recordedRun(log, 'invocation-other-2')
        })
        const difference = compareRuns(recorded, other)
        assert.is(difference?.field, 'input.content')
        assert.is(difference?.recorded, 'save_note (operation <run 1>/step-1/0): the note was saved; do not save it again')
        assert.is(difference?.replayed, 'save_note (operation <run 1>/step-2/0): the note was saved; do not save it again')
      }),
    60_000,
    'other runs\' ids',
  ),
)

test("a provider's refusal replays as the same status, code and type: the run fails alike", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const refusal = answer.status(400, { body: { error: { message: 'too long', type: 'invalid_request_error', code: 'context_length_exceeded', param: 'messages' } } })
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), [refusal], (baseUrl) => [input(baseUrl, 'production', '/srv/prod', [lookupOrder({})])], async (log) => {
          recorded = await recordedRun(log, 'invocation-production')
        })
        let replayed: StoredEvent[] = []
        await runAll(join(dir, 'replay'), scriptOf(recorded), (baseUrl) => [input(baseUrl, 'replay', dir, [lookupOrder({})])], async (log) => {
          replayed = await recordedRun(log, 'invocation-replay')
        })
        assert.is(compareRuns(recorded, replayed), undefined)
        const ended = replayed.at(-1)?.event.fact
        assert.equal(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' ? [ended.outcome.class, ended.outcome.provider?.code] : undefined, ['model_failed', 'context_length_exceeded'])
        // A replay that got a 500 instead is told apart by the provider's status.
        let other: StoredEvent[] = []
        await runAll(join(dir, 'other'), [answer.status(401)], (baseUrl) => [input(baseUrl, 'other', dir, [lookupOrder({})])], async (log) => {
          other = await recordedRun(log, 'invocation-other')
        })
        assert.is(compareRuns(recorded, other)?.field, 'provider.status')
      }),
    60_000,
    'refusal replay',
  ),
)

test('bad input is refused with TESTING_INVALID_OPTIONS naming the field, and the log is not written', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        await runAll(dir, [answer.text('hi')], (baseUrl) => [input(baseUrl, 'one', dir, [lookupOrder({})])], async (log) => {
          const before = log.head()
          const unknown = await rejectsWithCode(() => recordedRun(log, 'invocation-nobody'), 'TESTING_INVALID_OPTIONS', 'an unknown invocation')
          assert.is(unknown.details?.field, 'invocationId')
          assert.match(unknown.message, /the log has no invocation "invocation-nobody"/)
          await rejectsWithCode(() => recordedRun(log, 'not an id'), 'LOG_INVALID_ARGUMENT', 'an id that is no id')
          const notLog = await rejectsWithCode(() => recordedRun({ invocationEvents: async () => [] } as unknown as EventLog, 'invocation-one'), 'TESTING_INVALID_OPTIONS', 'not a log')
          assert.is(notLog.details?.field, 'log')
          const events = await recordedRun(log, 'invocation-one')
          for (const [call, field] of [
            [() => scriptOf([]), 'events'],
            [() => scriptOf('events' as never), 'events'],
            [() => scriptOf([{ seq: 1, event: { fact: 'x' } }] as never), 'events'],
            [() => compareRuns(events, {} as never), 'replayed'],
            [() => compareRuns([null] as never, events), 'recorded'],
          ] as const) {
            const error = await rejectsWithCode(async () => call(), 'TESTING_INVALID_OPTIONS')
            assert.is(error.details?.field, field)
          }
          assert.equal(log.head(), before, 'nothing was written')
        })
      }),
    60_000,
    'bad input',
  ),
)

/**
 * Runs `file` with `node --test` (tsx for TypeScript) from the repository, in TAP (from Node 23 the
 * default reporter is spec, piped or not); resolves with its exit code and output.
 */
async function nodeTest(file: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=tap', file], { cwd: REPO_ROOT, env: { ...process.env, ...env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000)
  const code = await new Promise<number | null>((resolve) => child.on('close', (exit) => resolve(exit)))
  clearTimeout(guard)
  return { code, output }
}

test("the README's replay snippet runs as a node:test file against a recorded log: it passes, and fails naming the difference when the recording differs", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
        const section = readme.slice(readme.indexOf('### Replaying a recorded run'), readme.indexOf('## How it compares'))
        const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1]
        assert.ok(block, 'the section has a TypeScript block')
        // The package's imports, from this checkout's sources.
        const from = (path: string) => `from ${JSON.stringify(pathToFileURL(join(REPO_ROOT, path)).href)}`
        const file = join(dir, 'replay.test.ts')
        await writeFile(file, block.replace("from 'factstate/testing'", from('testing/index.ts')).replace("from 'factstate'", from('index.ts')))
        // The incident: the snippet's tool said `status` of A-17 (its execute says "shipped").
        for (const status of ['shipped', 'lost']) {
          const incident = join(dir, `incident-${status}`)
          const model = await scriptedModelServer([answer.toolCalls([{ name: 'lookupOrder', arguments: { orderId: 'A-17' } }]), answer.text(`A-17: ${status}.`)])
          const log = await EventLog.open(incident)
          try {
            const tool: ToolDefinition = {
              name: 'lookupOrder',
              inputSchema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] },
              execute: async (input) => ({ orderId: (input as { orderId: string }).orderId, status }),
            }
            const outcome = await new Engine({ log }).run({
              invocation: { sessionId: 'production', turnId: 'turn-7', runId: 'run-7', invocationId: 'invocation-7' },
              provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'gpt-4o' },
              configuration: { cwd: '/srv/shop' },
              tools: [tool],
              work: { kind: 'message', content: 'Where is A-17?' },
            })
            assert.is(outcome.status, 'completed')
          } finally {
            await log.close()
            await model.close()
          }
        }
        // The two node:test runs side by side: each a process of its own (tsx's start is most of its time) on a log of its own.
        const [shipped, lost] = await Promise.all([nodeTest(file, { INCIDENT_LOG: join(dir, 'incident-shipped') }), nodeTest(file, { INCIDENT_LOG: join(dir, 'incident-lost') })])
        assert.is(shipped.code, 0, shipped.output)
        assert.match(shipped.output, /# pass 1/)
        assert.is(lost.code, 1, lost.output)
        assert.match(lost.output, /outcome\.output\.status is "lost" in the recording, "shipped" in the replay/)
      }),
    120_000,
    'README replay snippet',
  ),
)

test('attempts that got no answer replay alike: a reset retried, one past the retries, a malformed body, an error inside an answer, a timeout', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        // One retry: the replay's executor is the recording's. A timeout short enough for a test where the
        // case is a timeout (a hang times out however slow the machine); elsewhere one a loaded machine never reaches.
        const IN_ANSWER = JSON.stringify({ error: { message: 'overloaded', code: 'server_overloaded', type: 'server_error' } })
        const quick = (timeoutMs: number) => new ModelExecutor({ timeoutMs, retries: 1, backoffMs: 1, maxBackoffMs: 5 })
        const cases: [string, ScriptedAnswer[], string[], string][] = [
          ['retried', [answer.reset(), answer.text('ok')], ['reset', 'text'], 'completed'],
          ['exhausted', [answer.reset(), answer.reset()], ['reset', 'reset'], 'failed model_failed'],
          ['malformed', [answer.malformed()], ['malformed'], 'failed model_malformed'],
          // An error the provider reported in an answer it began as a success (HTTP 200): retried, its code and type kept.
          ['in the answer', [answer.malformed({ body: IN_ANSWER }), answer.malformed({ body: IN_ANSWER })], ['malformed', 'malformed'], 'failed model_failed'],
          ['timeout', [answer.hang()], ['hang'], 'failed model_timeout'],
        ]
        for (const [name, production, kinds, ending] of cases) {
          const timeoutMs = name === 'timeout' ? 400 : 30_000
          const read = (into: StoredEvent[], id: string) => async (log: EventLog) => void into.push(...(await recordedRun(log, id)))
          const recorded: StoredEvent[] = []
          await runAll(join(dir, name, 'production'), production, (baseUrl) => [input(baseUrl, 'production', '/srv/prod', [lookupOrder({})])], read(recorded, 'invocation-production'), quick(timeoutMs))
          const ended = recorded.at(-1)?.event.fact
          assert.is(ended?.type === 'invocation.ended' ? `${ended.outcome.status}${ended.outcome.status === 'failed' ? ` ${ended.outcome.class}` : ''}` : undefined, ending, name)
          const script = scriptOf(recorded)
          assert.equal(script.map((scripted) => scripted.kind), kinds, name)
          const replayed: StoredEvent[] = []
          await runAll(join(dir, name, 'replay'), script, (baseUrl) => [input(baseUrl, 'replay', dir, [lookupOrder({})])], read(replayed, 'invocation-replay'), quick(timeoutMs))
          assert.is(compareRuns(recorded, replayed), undefined, name)
        }
      }),
    180_000,
    'failure replay',
  ),
)

test('attempts that failed after the headers came replay alike when recorded with request ids, as a real provider sends them (replayed without): a cut stream, a plain body reset, a stall', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const quick = () => new ModelExecutor({ timeoutMs: 30_000, idleTimeoutMs: 300, retries: 1, backoffMs: 1, maxBackoffMs: 5 })
        const cases: [string, ScriptedAnswer[], RunInput['providerOptions'], string][] = [
          ['cut stream', [answer.cutStream({ text: 'Half' })], { stream: true }, 'failed model_malformed'],
          ['plain reset after its headers', [answer.reset({ text: 'A-17 has' }), answer.text('ok')], {}, 'completed'],
          ['stall', [answer.stall({ text: 'A-17 has' })], { stream: true }, 'failed model_timeout'],
        ]
        for (const [name, production, providerOptions, ending] of cases) {
          const read = (into: StoredEvent[], id: string) => async (log: EventLog) => void into.push(...(await recordedRun(log, id)))
          const run = (baseUrl: string, label: string) => [input(baseUrl, label, '/srv/prod', [lookupOrder({})], undefined, providerOptions)]
          const recorded: StoredEvent[] = []
          await runAll(join(dir, name, 'production'), production, (baseUrl) => run(baseUrl, 'production'), read(recorded, 'invocation-production'), quick(), { requestIds: true })
          const ended = recorded.at(-1)?.event.fact
          assert.is(ended?.type === 'invocation.ended' ? `${ended.outcome.status}${ended.outcome.status === 'failed' ? ` ${ended.outcome.class}` : ''}` : undefined, ending, name)
          assert.ok(recorded.some(({ event }) => event.fact.type === 'model.interrupted' && event.fact.provider?.requestId === 'req_0'), `${name}: its request id recorded`)
          const replayed: StoredEvent[] = []
          await runAll(join(dir, name, 'replay'), scriptOf(recorded), (baseUrl) => run(baseUrl, 'replay'), read(replayed, 'invocation-replay'), quick())
          assert.is(compareRuns(recorded, replayed)?.message, undefined, name)
        }
      }),
    60_000,
    'failure replay with request ids',
  ),
)

test("an error reported inside a 200 answer that names no kind but a request's status (not retried) replays alike, with or without request ids", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const quick = () => new ModelExecutor({ timeoutMs: 30_000, retries: 1, backoffMs: 1, maxBackoffMs: 5 })
        // Its status says the request's fault: not retried, and nothing of it but the request id recorded in `provider`.
        const production = [answer.malformed({ body: JSON.stringify({ error: { message: 'the prompt is too long', status: 400 } }) })]
        for (const requestIds of [true, false]) {
          const name = requestIds ? 'with-ids' : 'without-ids'
          const read = (into: StoredEvent[], id: string) => async (log: EventLog) => void into.push(...(await recordedRun(log, id)))
          const run = (baseUrl: string, label: string) => [input(baseUrl, label, '/srv/prod', [lookupOrder({})])]
          const recorded: StoredEvent[] = []
          await runAll(join(dir, name, 'production'), production, (baseUrl) => run(baseUrl, 'production'), read(recorded, 'invocation-production'), quick(), { requestIds })
          const interrupted = recorded.flatMap(({ event }) => (event.fact.type === 'model.interrupted' ? [event.fact] : []))
          assert.equal(
            interrupted.map((fact) => [fact.status, fact.provider]),
            [['failed', requestIds ? { requestId: 'req_0' } : undefined]],
            `${name}: recorded failed, not retried`,
          )
          const replayed: StoredEvent[] = []
          await runAll(join(dir, name, 'replay'), scriptOf(recorded), (baseUrl) => run(baseUrl, 'replay'), read(replayed, 'invocation-replay'), quick())
          assert.is(compareRuns(recorded, replayed)?.message, undefined, name)
        }
      }),
    60_000,
    'reported error with a status replay',
  ),
)

test('calls run side by side may settle in another order in the replay: compareRuns compares a step by call', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        /** A lookup whose call for `last` settles only after the other call has returned. */
        const ordered = (last: string): ToolDefinition => {
          let otherDone: () => void = () => {}
          const other = new Promise<void>((resolve) => (otherDone = resolve))
          return {
            ...lookupOrder({}),
            async execute(input) {
              const { orderId } = input as { orderId: string }
              if (orderId === last) await other
              else setImmediate(otherDone)
              return { orderId, status: 'shipped' }
            },
          }
        }
        const script: Script = [
          answer.toolCalls([
            { name: 'lookupOrder', arguments: { orderId: 'A-17' } },
            { name: 'lookupOrder', arguments: { orderId: 'B-2' } },
          ]),
          answer.text('Both shipped.'),
        ]
        const side = (baseUrl: string, name: string, last: string): RunInput => ({ ...input(baseUrl, name, dir, [ordered(last)]), toolConcurrency: 2 })
        const settledOrder = (events: StoredEvent[]) => events.flatMap(({ event }) => (event.fact.type === 'tool.settled' ? [(event.fact.outcome as { output: { orderId: string } }).output.orderId] : []))
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), script, (baseUrl) => [side(baseUrl, 'production', 'A-17')], async (log) => {
          recorded = await recordedRun(log, 'invocation-production')
        })
        let replayed: StoredEvent[] = []
        await runAll(join(dir, 'replay'), scriptOf(recorded), (baseUrl) => [side(baseUrl, 'replay', 'B-2')], async (log) => {
          replayed = await recordedRun(log, 'invocation-replay')
        })
        assert.equal([settledOrder(recorded), settledOrder(replayed)], [['B-2', 'A-17'], ['A-17', 'B-2']], 'the calls settled in another order')
        assert.is(compareRuns(recorded, replayed), undefined)
      }),
    60_000,
    'side by side',
  ),
)

test('calls the recording ran one at a time, replayed side by side: compareRuns names the dispatch that came before the settlement', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        /** A lookup whose first call returns only once the second has started: the two calls overlap. */
        const overlapping = (): ToolDefinition => {
          let secondStarted: () => void = () => {}
          const second = new Promise<void>((resolve) => (secondStarted = resolve))
          return {
            ...lookupOrder({}),
            async execute(input) {
              const { orderId } = input as { orderId: string }
              if (orderId === 'A-17') await second
              else secondStarted()
              return { orderId, status: 'shipped' }
            },
          }
        }
        const script: Script = [
          answer.toolCalls([
            { name: 'lookupOrder', arguments: { orderId: 'A-17' } },
            { name: 'lookupOrder', arguments: { orderId: 'B-2' } },
          ]),
          answer.text('Both shipped.'),
        ]
        const shipped = (): ToolDefinition => ({ ...lookupOrder({}), execute: async (input) => ({ orderId: (input as { orderId: string }).orderId, status: 'shipped' }) })
        const toolFacts = (events: StoredEvent[]) => events.flatMap(({ event }) => (event.fact.type.startsWith('tool.') ? [event.fact.type] : []))
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), script, (baseUrl) => [{ ...input(baseUrl, 'production', dir, [shipped()]), toolConcurrency: 1 }], async (log) => {
          recorded = await recordedRun(log, 'invocation-production')
        })
        let replayed: StoredEvent[] = []
        await runAll(join(dir, 'replay'), scriptOf(recorded), (baseUrl) => [{ ...input(baseUrl, 'replay', dir, [overlapping()]), toolConcurrency: 2 }], async (log) => {
          replayed = await recordedRun(log, 'invocation-replay')
        })
        assert.equal(toolFacts(recorded), ['tool.dispatched', 'tool.settled', 'tool.dispatched', 'tool.settled'])
        assert.equal(toolFacts(replayed), ['tool.dispatched', 'tool.dispatched', 'tool.settled', 'tool.settled'])
        const difference = compareRuns(recorded, replayed)
        const firstSettled = recorded.find(({ event }) => event.fact.type === 'tool.settled')
        assert.is(difference?.field, 'fact.type')
        assert.is(difference?.recordedSeq, firstSettled?.seq)
        assert.equal([difference?.recorded, difference?.replayed], ['tool.settled', 'tool.dispatched'])
        // The same replay run one call at a time agrees.
        let sequential: StoredEvent[] = []
        await runAll(join(dir, 'sequential'), scriptOf(recorded), (baseUrl) => [{ ...input(baseUrl, 'sequential', dir, [shipped()]), toolConcurrency: 1 }], async (log) => {
          sequential = await recordedRun(log, 'invocation-sequential')
        })
        assert.is(compareRuns(recorded, sequential), undefined)
      }),
    60_000,
    'sequential replayed side by side',
  ),
)

/**
 * A turn sealed by a handoff after its first step and finished by its successor, on a fresh log at
 * `dir`, against a server answering `script` (whose first answer is held until the hold is reserved,
 * so the seal comes at the same safe point every time); returns the successor's lineage.
 */
async function handedOff(dir: string, script: ScriptedAnswer[], name: string): Promise<StoredEvent[]> {
  const model = await scriptedModelServer(script.map((scripted, index) => (index === 0 && scripted.kind === 'toolCalls' ? { ...scripted, hold: true } : scripted)))
  const log = await EventLog.open(join(dir, 'log'))
  try {
    const engine = new Engine({ log, model: executor() })
    const first = input(model.baseUrl, name, dir, [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })])
    const running = await engine.start(first)
    await model.seen(0)
    const intent = { handoffId: `handoff-${name}`, hostEpoch: 'epoch-1', rootRunId: `run-${name}`, successorRunId: `run-${name}-2`, successorInvocationId: `invocation-${name}-2`, claimId: `claim-${name}` }
    const reservation = running.handoff().reserve(intent)
    model.release(0)
    const pause = await (await reservation.ready()).commit()
    assert.is((await running.wait()).status, 'handoff_paused')
    const source = (await log.runSource(`session-${name}`, `run-${name}`))?.boundary
    assert.ok(source)
    const outcome = await engine.run({
      ...first,
      invocation: { ...first.invocation, runId: intent.successorRunId, invocationId: intent.successorInvocationId },
      work: { kind: 'handoff', source, pause },
    })
    assert.is(outcome.status, 'completed')
    assert.equal(model.unscripted, [])
    return await recordedRun(log, intent.successorInvocationId)
  } finally {
    await log.close()
    await model.close()
  }
}

test("a handoff's successor replays with the run it succeeded: the seal and the steps after it agree", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const recorded = await handedOff(join(dir, 'production'), [answer.toolCalls([{ name: 'lookupOrder', arguments: { orderId: 'A-17' } }]), answer.text('A-17 has shipped.')], 'production')
        assert.equal(
          recorded.map(({ event }) => event.fact.type).filter((type) => type === 'hold.entered' || type === 'invocation.ended' || type === 'invocation.opened'),
          ['invocation.opened', 'hold.entered', 'invocation.ended', 'invocation.opened', 'invocation.ended'],
          'the sealed run, then its successor',
        )
        const replayed = await handedOff(join(dir, 'replay'), scriptOf(recorded), 'replay')
        assert.is(compareRuns(recorded, replayed), undefined)
      }),
    60_000,
    'handoff replay',
  ),
)

/**
 * Runs the CLI as a user runs it, built (rebuilt first by `ensureBuilt` when a source is newer), with
 * plain Node rather than through tsx; resolves with its exit code and output.
 */
async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  ensureBuilt()
  const env = { ...process.env }
  delete env.FORCE_COLOR
  delete env.NO_COLOR
  const child = spawn(process.execPath, ['dist/bin/factstate.js', ...args], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000)
  const code = await new Promise<number | null>((resolve) => child.on('close', (exit) => resolve(exit)))
  clearTimeout(guard)
  return { code, stdout, stderr }
}

test('factstate script prints the script of a recorded run as JSON, redacted as its facts are, which replays it; an unknown invocation or a missing --invocation is refused', () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const key = 'sk-replay-never-printed-0123456789'
        // The model echoes the key: the fact, and so the script, holds it redacted.
        const production: Script = [...PRODUCTION.slice(0, 3), answer.text(`A-17 has shipped; B-2 is lost. (key ${key})`)]
        let recorded: StoredEvent[] = []
        await runAll(join(dir, 'production'), production, (baseUrl) => [{ ...input(baseUrl, 'production', '/srv/prod', [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })]), provider: { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey: key } }], async (log) => {
          recorded = await recordedRun(log, 'invocation-production')
        })
        const printed = await cli(['script', join(dir, 'production', 'log'), '--invocation', 'invocation-production'])
        assert.is(printed.code, 0, printed.stderr)
        assert.not.ok(printed.stdout.includes(key), 'the key is not printed')
        assert.ok(printed.stdout.includes('(key [redacted])'), 'the answer that echoed it is, redacted as its fact is')
        const script = JSON.parse(printed.stdout) as ScriptedAnswer[]
        assert.equal(script, scriptOf(recorded))
        let replayed: StoredEvent[] = []
        await runAll(join(dir, 'replay'), script, (baseUrl) => [input(baseUrl, 'replay', dir, [lookupOrder({ 'A-17': 'shipped', 'B-2': 'lost' })])], async (log) => {
          replayed = await recordedRun(log, 'invocation-replay')
        })
        assert.is(compareRuns(recorded, replayed), undefined)

        const unknown = await cli(['script', join(dir, 'production', 'log'), '--invocation', 'invocation-nobody'])
        assert.is(unknown.code, 4)
        assert.match(unknown.stderr, /TESTING_INVALID_OPTIONS: recordedRun: the log has no invocation "invocation-nobody"/)
        assert.is(unknown.stdout, '')
        const missing = await cli(['script', join(dir, 'production', 'log')])
        assert.is(missing.code, 2)
        assert.match(missing.stderr, /--invocation ID is required/)
        const notLog = await cli(['script', dir, '--invocation', 'invocation-production'])
        assert.is(notLog.code, 2)
        assert.match(notLog.stderr, /no factstate log at/)
      }),
    120_000,
    'factstate script',
  ),
)

test('compareRuns given hand-made events whose tool catalog is malformed tells the difference, without naming tools, rather than throwing', () => {
  const invocation = { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }
  const opened = (tools: unknown) => ({ id: 'i/1', recordedAt: 1, invocation, fact: { type: 'invocation.opened', input: { kind: 'message', content: 'hi' }, execution: { model: 'm', tools } } })
  const recorded = { catalogDigest: 'a', names: ['lookupOrder'], digests: ['d1'] }
  for (const replayed of [
    { catalogDigest: 'b', names: ['lookupOrder'], digests: null },
    { catalogDigest: 'b', names: 'lookupOrder', digests: ['d2'] },
    { catalogDigest: 'b', names: ['lookupOrder'], digests: [7] },
  ]) {
    const difference = compareRuns([opened(recorded)] as never, [opened(replayed)] as never)
    assert.is(difference?.type, 'invocation.opened', JSON.stringify(replayed))
    assert.match(difference?.field ?? '', /^execution\.tools\./)
    assert.not.match(difference?.message ?? '', /tool "/)
  }
  // Well-formed, the tools are named.
  const named = compareRuns([opened(recorded)] as never, [opened({ catalogDigest: 'b', names: ['lookupOrder'], digests: ['d2'] })] as never)
  assert.match(named?.message ?? '', /\(tool "lookupOrder" changed \(description or input schema\)\)$/)
})

/**
 * Runs `invocation-<name>` in a child process answering `script` (through its JSON, as `factstate
 * script` hands it over) until its tool runs, kills it there, and recovers the log as the next open of
 * it by the application would; returns the run's facts.
 */
async function crashedWhileToolRuns(dir: string, name: string, script: ScriptedAnswer[]): Promise<StoredEvent[]> {
  const file = join(dir, `${name}.json`)
  await writeFile(file, JSON.stringify(script))
  await killChildAt('child-replay-crash.ts', [join(dir, name), name, file], 'executing ')
  const log = await EventLog.open(join(dir, name))
  try {
    assert.is(await recoverInvocations(log), 1, 'recovery closed the run the kill left open')
    return await recordedRun(log, `invocation-${name}`)
  } finally {
    await log.close()
  }
}

test("a run a crash cut short while its tool ran: replayed with the tool run for real it agrees up to the crash, where compareRuns names the recovery's end against the tool's settlement; replayed in a process killed while the tool runs, then recovered, it agrees to the end", () =>
  withTimeout(
    () =>
      withTempDir(async (dir) => {
        const recorded = await crashedWhileToolRuns(dir, 'production', [answer.toolCalls([{ name: 'deploy', arguments: { target: 'production' } }])])
        const ended = recorded.at(-1)?.event.fact
        assert.equal(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' ? ended.outcome.class : ended, 'outcome_unknown')
        const script = scriptOf(recorded)
        assert.equal(script.map((scripted) => scripted.kind), ['toolCalls'], 'the model answers only: the crash is no answer')

        // The tool run for real settles; the replay then asks the model for an answer the recording never got.
        const model = await scriptedModelServer(script)
        const log = await EventLog.open(join(dir, 'replay-real'))
        try {
          const deploy: ToolDefinition = { ...DEPLOY, inputSchema: structuredClone(DEPLOY.inputSchema) as JsonObject, execute: async () => ({ deployed: true }) }
          const replay = ids('replay-real')
          await new Engine({ log, model: executor() }).run({ invocation: replay, provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'scripted' }, configuration: { cwd: dir }, tools: [deploy], work: { kind: 'message', content: 'deploy it' } })
          assert.equal(model.unscripted, [1])
          const difference = compareRuns(recorded, await recordedRun(log, replay.invocationId))
          assert.equal([difference?.index, difference?.field, difference?.recorded, difference?.replayed], [4, 'fact.type', 'invocation.ended', 'tool.settled'], difference?.message)
        } finally {
          await log.close()
          await model.close()
        }

        // Killed as the recording's host was, and recovered alike: the same facts, the recovery's end included.
        const replayed = await crashedWhileToolRuns(dir, 'replay-crash', script)
        assert.is(compareRuns(recorded, replayed), undefined)
      }),
    120_000,
    'crash mid-tool replay',
  ),
)

test("recorded reasoningDetails are streamed in pieces, as OpenRouter streams them (an entry's text, summary or data over several chunks, its signature with the last), and the built-in client puts each entry back as recorded", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const details: JsonObject[] = [
        { type: 'reasoning.text', text: 'First, look up A-17 and then B-2.', signature: 'EqoBCkgIARAB', format: 'openai-responses-v1', index: 0 },
        { type: 'reasoning.encrypted', data: 'gAAAAABo0pQrKq3v1bU9', format: 'openai-responses-v1', index: 1 },
        { type: 'reasoning.text', text: 'The user wants both orders.', signature: 'c2lnbmVkIHRoaW5raW5n', format: 'anthropic-claude-v1' },
        { type: 'reasoning.summary', summary: 'Looked up two orders.' },
      ]
      const server = await scriptedModelServer([answer.text('Both shipped.', { reasoningDetails: details, pieces: 3 })], { stream: true })
      const log = await EventLog.open(join(dir, 'log'))
      try {
        // The SSE as sent: the details over several chunks, none of them whole but the unindexed summary.
        const response = await fetch(`${server.baseUrl}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [], stream: true }) })
        const chunks = (await response.text())
          .split('\n\n')
          .map((frame) => frame.replace(/^data: /, ''))
          .filter((data) => data.startsWith('{'))
          .map((data) => JSON.parse(data) as { choices: { delta: { reasoning_details?: JsonObject[] } }[] })
          .flatMap((chunk) => (chunk.choices[0]?.delta.reasoning_details === undefined ? [] : [chunk.choices[0].delta.reasoning_details]))
        assert.is(chunks.length, 10, 'three pieces of each of the first three entries, and the summary whole')
        assert.equal(chunks[0], [{ type: 'reasoning.text', format: 'openai-responses-v1', index: 0, text: 'First, look' }])
        assert.equal(chunks[2], [{ type: 'reasoning.text', index: 0, text: 'd then B-2.', signature: 'EqoBCkgIARAB' }])
        assert.equal(chunks[9], [{ type: 'reasoning.summary', summary: 'Looked up two orders.' }])
        // Through the engine's client: recorded as given.
        const again = await scriptedModelServer([answer.text('Both shipped.', { reasoningDetails: details, pieces: 3 })], { stream: true })
        try {
          assert.equal(await new Engine({ log }).run(input(again.baseUrl, 'pieces', dir, [], undefined, { stream: true })), { status: 'completed' })
          const [completed] = (await recordedRun(log, 'invocation-pieces')).flatMap(({ event }) => (event.fact.type === 'model.completed' ? [event.fact.output] : []))
          assert.equal(completed?.reasoningDetails, details)
        } finally {
          await again.close()
        }
      } finally {
        await log.close()
        await server.close()
      }
    }),
    20_000,
    'reasoning details in pieces',
  ),
)

test.run()
