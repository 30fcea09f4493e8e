/**
 * Secrets that msgpack's bytes would spell across the elements of data: a string followed at once by
 * the byte of an integer below 128 (`["sk-forms-ab", 99, 100, …]`, `{ "sk-forms-…c": 100 }`), and
 * msgpack's own header bytes beside the data's (`true` is 0xC3, a string of 4 bytes begins with 0xA4:
 * "ä" in UTF-8). The raw files of the log directory are read for the secrets' bytes.
 */
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RunInput, type ToolDefinition } from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { callTool } from '../testing/index.js'
import { ALL, CWD } from './support/faults-engine.js'
import { everyFile } from './support/faults-files.js'
import { bounded } from './support/temp.js'
import { packedValue } from '../store/encoding.js'
import { holdsSecretBytes, redactDeep, secretsOf } from '../actors/redaction.js'

const API_KEY = `sk-forms-${randomBytes(16).toString('hex')}`
/** A tool's key, declared to the engine, with a non-ASCII letter: "ä" is 0xC3 0xA4 in UTF-8. */
const SECRET = `pk_live/ä${randomBytes(16).toString('hex')}`
const bytes = (text: string) => [...Buffer.from(text)]
const SECRETS = [API_KEY, SECRET]

/** A string and the integers after it: msgpack writes the string's bytes, then each integer's byte. */
const stringThenRun = (secret: string) => [secret.slice(0, 12), ...bytes(secret.slice(12))]
/** A key and its integer value: the key's bytes, then the value's byte. */
const keyThenValue = (secret: string) => ({ [secret.slice(0, -1)]: secret.charCodeAt(secret.length - 1) })
/** `true` (0xC3) and the header of a string of 4 bytes (0xA4) spell the "ä" of SECRET between its other bytes. */
const headers = () => [...bytes(SECRET.slice(0, 8)), true, SECRET.slice(9, 13), ...bytes(SECRET.slice(13))]

/** Which secrets `bytes` holds, as UTF-8. */
const held = (buffer: Uint8Array) => SECRETS.filter((secret) => Buffer.from(buffer).includes(Buffer.from(secret)))

function run(baseUrl: string, name: string, tools: ToolDefinition[]): RunInput {
  return {
    invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey: API_KEY },
    providerOptions: { temperature: 0 },
    configuration: { cwd: CWD, workspaceIdentity: 'workspace-1' },
    mainOutputLimit: 100,
    maxSteps: 4,
    tools,
    work: { kind: 'message', content: `question ${name}` },
  }
}

async function assertNoSecretInFiles(directory: string, runId: string): Promise<void> {
  const files = await everyFile(directory)
  assert.ok(files.some((file) => file.path.endsWith('.log') && file.bytes.includes(Buffer.from(runId))), 'the facts are in a .log file, which is read raw')
  for (const file of files) assert.equal(held(file.bytes), [], file.path)
}

/** Two read-only tools: `ret` returns what `returned` makes, `take` keeps the input it is given in `got`. */
function retAndTake(returned: () => unknown, got: unknown[]): ToolDefinition[] {
  return [
    { name: 'ret', readOnly: true, execute: async () => returned() },
    {
      name: 'take',
      readOnly: true,
      execute: async (input: unknown) => {
        got.push(input)
        return 'taken'
      },
    },
  ]
}

test('the shapes are what they claim: packed, each spells its secret', () => {
  assert.equal(held(packedValue(stringThenRun(API_KEY))), [API_KEY])
  assert.equal(held(packedValue(keyThenValue(SECRET))), [SECRET])
  assert.equal(held(packedValue(headers())), [SECRET])
})

test('a string takes only the integers that end the secret begun in it: those after it stay numbers, and a secret they spell is read in their run', () => {
  const key = secretsOf({ apiKey: API_KEY }).inData
  // Integers past the secret's end were taken into the string: 7 and 8 became characters, and a second
  // secret's first bytes ended the string while its rest stayed a run too short to be read (caught only
  // by the final byte check, which recorded the whole value as [redacted]).
  assert.equal(redactDeep([...stringThenRun(API_KEY), 7, 8], key), ['[redacted]', 7, 8])
  const twice = redactDeep([...stringThenRun(API_KEY), ...bytes(API_KEY)], key)
  assert.equal(twice, ['[redacted]', ...bytes('[redacted]')])
  assert.equal(held(packedValue(twice)), [])
  assert.is(holdsSecretBytes(twice, key), false)
})

test(
  'secrets: a string followed by the integers that end a secret, and a key followed by the integer that ends one, lose it in a tool result, a tool call input and providerOptions',
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([
      answer.toolCalls([
        { id: 'call-ret', name: 'ret', arguments: {} },
        { id: 'call-run', name: 'take', arguments: `{"v":${JSON.stringify(stringThenRun(API_KEY))}}` },
        { id: 'call-key', name: 'take', arguments: JSON.stringify(keyThenValue(API_KEY)) },
      ]),
      answer.text('done'),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    const got: unknown[] = []
    try {
      const tools = retAndTake(() => ({ a: [7, ...stringThenRun(SECRET), 'x'], k: keyThenValue(SECRET) }), got)
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [SECRET] })
      assert.equal(await engine.run(run(server.baseUrl, 'shapes', tools)), { status: 'completed' })
      for (const [name, options] of [
        ['po-run', { seed: stringThenRun(API_KEY) }],
        ['po-key', keyThenValue(SECRET)],
      ] as const) {
        const refused = await engine.run({ ...run(server.baseUrl, name, []), providerOptions: options }).then(
          () => undefined,
          (error: unknown) => error as { code?: string; details?: unknown },
        )
        assert.equal([refused?.code, refused?.details], ['RUN_INVALID_INPUT', { fields: ['providerOptions'] }], name)
      }
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      assert.is(facts.filter((fact) => fact.type === 'invocation.opened').length, 1, 'no refused run was opened')
      const settled = facts.flatMap((fact) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      // The string takes the integers that ended the secret, and is redacted; a key's value goes with it.
      assert.equal(settled[0], { status: 'succeeded', output: { a: [7, '[redacted]', 'x'], k: { '[redacted]': '[redacted]' } } })
      const dispatched = facts.flatMap((fact) => (fact.type === 'tool.dispatched' ? [fact.input] : []))
      assert.equal(dispatched.slice(1), [{ v: ['[redacted]'] }, { '[redacted]': '[redacted]' }])
      assert.equal(got, dispatched.slice(1), 'the tool was given what was recorded')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoSecretInFiles(join(dir, 'log'), 'run-shapes')
  }),
)

test(
  "secrets: data whose bytes spell a secret only with msgpack's own (true is 0xC3, a 4-byte string's header 0xA4) is recorded as [redacted] whole, and refused in providerOptions",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([
      answer.toolCalls([
        { id: 'call-ret', name: 'ret', arguments: {} },
        { id: 'call-take', name: 'take', arguments: JSON.stringify({ v: headers() }) },
      ]),
      answer.text('done'),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    const got: unknown[] = []
    try {
      const tools = retAndTake(() => ({ v: headers() }), got)
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [SECRET] })
      assert.equal(await engine.run(run(server.baseUrl, 'headers', tools)), { status: 'completed' })
      const refused = await engine.run({ ...run(server.baseUrl, 'po-headers', []), providerOptions: { v: headers() } }).then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: unknown },
      )
      assert.equal([refused?.code, refused?.details], ['RUN_INVALID_INPUT', { fields: ['providerOptions'] }])
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      assert.is(facts.filter((fact) => fact.type === 'invocation.opened').length, 1, 'no refused run was opened')
      const settled = facts.flatMap((fact) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      assert.equal(settled[0], { status: 'succeeded', output: '[redacted]' })
      const dispatched = facts.flatMap((fact) => (fact.type === 'tool.dispatched' ? [fact.input] : []))
      assert.equal(dispatched[1], '[redacted]')
      assert.equal(got, ['[redacted]'], 'the tool was given what was recorded')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoSecretInFiles(join(dir, 'log'), 'run-headers')
    // callTool records what the engine would.
    const called = await callTool({ name: 'ret', execute: async () => ({ v: headers() }) }, {}, { secrets: [SECRET] })
    assert.equal(called, { status: 'succeeded', output: '[redacted]' })
  }),
)

test(
  "secrets: a model's answer and an approver's words that spell a secret only with msgpack's bytes between members (a member's name and its header, in Latin-1) lose the words that do, one after another",
  bounded(30_000, async (dir) => {
    // Each ends with a member's name and the byte before it (0xA0 + its length: "©" for a name of 9 characters),
    // so the words before that member complete it on disk: contrived secrets, the way msgpack's bytes can.
    const random = () => randomBytes(12).toString('hex')
    const [text, args, finish, by] = [random(), random(), random(), random()]
    const crossing = [`${text}\u00a9toolCalls`, `${args}\u00acfinishReason`, `${finish}\u00a5usage`, `${by}\u00a6reason`]
    const latin1 = (bytes: Uint8Array) => crossing.filter((secret) => Buffer.from(bytes).includes(Buffer.from(secret, 'latin1')))
    const server = await scriptedModelServer([
      answer.toolCalls(
        [
          { id: 'call-guarded', name: 'guarded', arguments: { a: 1 } },
          { id: 'call-args', name: 'take', arguments: `x ${args}` },
        ],
        { text: `said ${text}` },
      ),
      answer.text('done', { finishReason: `stop ${finish}` }),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const tools: ToolDefinition[] = [
        { name: 'guarded', readOnly: true, needsApproval: true, execute: async () => 'ran' },
        { name: 'take', readOnly: true, execute: async () => 'taken' },
      ]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: crossing })
      const outcome = await engine.run(run(server.baseUrl, 'crossing', tools), { onApproval: async () => ({ approved: false, by, reason: 'no' }) })
      assert.equal(outcome, { status: 'completed' })
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      const answers = facts.flatMap((fact) => (fact.type === 'model.completed' ? [fact.output] : []))
      // Only the members that end a secret: the text and the second call's arguments; the first call's are kept.
      assert.equal(answers[0]?.text, '[redacted]')
      assert.equal(
        answers[0]?.toolCalls.map((call) => [call.callId, call.name, call.arguments]),
        [
          ['call-guarded', 'guarded', '{"a":1}'],
          ['call-args', 'take', '[redacted]'],
        ],
      )
      assert.equal([answers[1]?.text, answers[1]?.finishReason], ['done', '[redacted]'])
      const rejected = facts.flatMap((fact) => (fact.type === 'tool.rejected' ? [fact] : []))
      assert.equal(
        rejected.map((fact) => [fact.name, fact.reason, fact.input, fact.approval]),
        [
          ['guarded', 'denied', { a: 1 }, { by: '[redacted]', reason: 'no' }],
          ['take', 'invalid_input', '[redacted]', undefined],
        ],
      )
      for (const fact of facts) assert.equal(latin1(packedValue(fact)), [], fact.type)
    } finally {
      await log.close()
      await server.close()
    }
    const files = await everyFile(join(dir, 'log'))
    assert.ok(files.some((file) => file.path.endsWith('.log') && file.bytes.includes(Buffer.from('run-crossing'))), 'the facts are in a .log file, which is read raw')
    for (const file of files) assert.equal(latin1(file.bytes), [], file.path)
  }),
)

test(
  "secrets: a run whose recorded settings spell a secret only together (the message, then the next member's header byte and name) is refused before anything is written",
  bounded(30_000, async (dir) => {
    const random = randomBytes(12).toString('hex')
    // The message is followed by the requestFingerprint member: its name's header byte is 0xB2 ("²" in Latin-1).
    const secret = `${random}\u00b2requestFingerprint`
    const server = await scriptedModelServer([answer.text('done')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [secret] })
      const input = { ...run(server.baseUrl, 'together', []), work: { kind: 'message' as const, content: `say ${random}` }, requestFingerprint: 'fp-1' }
      const refused = await engine.run(input).then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: unknown },
      )
      assert.equal([refused?.code, refused?.details], ['RUN_INVALID_INPUT', { fields: [] }])
      assert.equal(await engine.run({ ...input, requestFingerprint: undefined }), { status: 'completed' }, 'apart, they spell nothing')
      const opened = (await log.prefix(ALL.events, ALL.bytes)).events.filter((stored) => stored.event.fact.type === 'invocation.opened')
      assert.is(opened.length, 1, 'the refused run was not opened')
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(file.bytes.includes(Buffer.from(secret, 'latin1')), file.path)
  }),
)

test(
  "secrets: a cancel reason that spells a secret only with the bytes before it (the outcome's status, the source member's name and header) is recorded as [redacted], and wait() gives what was recorded",
  bounded(30_000, async (dir) => {
    const reason = randomBytes(12).toString('hex')
    // "cancelled", the source member's header byte (0xA6: "¦") and name, the reason's header (0xB8, 24 bytes: "¸"), the reason.
    const secret = `cancelled\u00a6source\u00b8${reason}`
    const server = await scriptedModelServer([answer.hang()])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [secret] })
      const stop = new AbortController()
      const running = await engine.start(run(server.baseUrl, 'cancel-crossing', []), { signal: stop.signal })
      await server.seen(0)
      stop.abort(reason)
      assert.equal(await running.wait(), { status: 'cancelled', source: '[redacted]' })
      const ended = (await log.prefix(ALL.events, ALL.bytes)).events.flatMap((stored) => (stored.event.fact.type === 'invocation.ended' ? [stored.event.fact] : []))
      assert.equal(ended.map((fact) => fact.outcome), [{ status: 'cancelled', source: '[redacted]' }])
    } finally {
      await log.close()
      await server.close()
    }
    for (const file of await everyFile(join(dir, 'log'))) assert.not.ok(file.bytes.includes(Buffer.from(secret, 'latin1')), file.path)
  }),
)

test.run()
