/**
 * Secrets in the forms data and failure messages carry them beyond the plain text: bytes (a Buffer a
 * tool returns, an array of byte values in a tool call's arguments, which msgpack writes a byte each:
 * the text itself in the log's files; a run of them beside other elements, or written `115.0`; UTF-16
 * code units), JSON escapes of any character (PHP's `\/`, Python's `\u00e4`,
 * every character as `\uXXXX`), percent-encoding of every byte, and UTF-16LE text a tool throws. The
 * raw files of the log directory (its `.log` write-ahead file, where a short run's facts are) are read
 * for the secrets and for the exact spellings that were sent.
 */
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type JsonObject, type ModelOutput, ModelExecutor, type ModelRequest, type RunInput, type ToolDefinition } from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { callTool } from '../testing/index.js'
import { ALL, CWD } from './support/faults-engine.js'
import { everyFile } from './support/faults-files.js'
import { bounded } from './support/temp.js'
import { DECLARED_SECRET, redact, redactDeep, redactFailure, secretsOf } from '../actors/redaction.js'

const API_KEY = `sk-forms-${randomBytes(16).toString('hex')}`
/** A tool's key, declared to the engine: a slash (PHP escapes it) and a non-ASCII letter (Python escapes it). */
const SECRET = `pk_live/ä${randomBytes(16).toString('hex')}`

/** Every character as `\uXXXX`, hex in `upper` case or not. */
const escapedEvery = (text: string, upper: boolean) => [...text].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).map((e) => (upper ? e.toUpperCase().replace('\\U', '\\u') : e)).join('')
/** Every UTF-8 byte as `%XX`, hex in `upper` case or not. */
const percentEvery = (text: string, upper: boolean) => [...Buffer.from(text)].map((b) => `%${upper ? b.toString(16).toUpperCase().padStart(2, '0') : b.toString(16).padStart(2, '0')}`).join('')
/** As PHP's json_encode writes it (`\/`, `\u00e4`), and as Python's json.dumps (`\u00e4`). */
const php = JSON.stringify(SECRET).slice(1, -1).replaceAll('/', '\\/').replace('ä', '\\u00e4')
const python = JSON.stringify(SECRET).slice(1, -1).replace('ä', '\\u00e4')
/** Some characters escaped, in both cases of hex, the rest as they are. */
const mixed = SECRET.replace('p', '\\u0070').replace('/', '\\u002F').replace('ä', '\\u00E4')
const utf16 = Buffer.from(SECRET, 'utf16le').toString('latin1')

/** The random parts' runs of 8 characters, and each exact spelling that was sent: any in the bytes is a leak. */
const NEEDLES = [
  ...[API_KEY.slice(9), SECRET.slice(9)].flatMap((random) => Array.from({ length: random.length - 7 }, (_, at) => random.slice(at, at + 8))),
  escapedEvery(API_KEY, true),
  escapedEvery(API_KEY, false),
  percentEvery(API_KEY, true),
  percentEvery(API_KEY, false),
  percentEvery(SECRET, false),
  escapedEvery(SECRET, false),
  mixed,
]
const leaks = (bytes: Buffer | string) => {
  const buffer = typeof bytes === 'string' ? Buffer.from(bytes) : bytes
  return NEEDLES.filter((needle) => buffer.includes(Buffer.from(needle, 'utf8')) || buffer.includes(Buffer.from(needle, 'utf16le')))
}

/** Every file of the log directory is free of them, and its `.log` write-ahead file holds the run's facts. */
async function assertNoLeakInFiles(directory: string, runId: string, found: (bytes: Buffer) => string[] = leaks): Promise<void> {
  const files = await everyFile(directory)
  const logs = files.filter((file) => file.path.endsWith('.log') && file.bytes.includes(Buffer.from(runId)))
  assert.ok(logs.length > 0, 'the facts are in a .log file, which is read raw')
  for (const file of files) assert.equal(found(file.bytes), [], file.path)
}

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

test(
  "secrets: as bytes (byte values in a tool's result and in a call's arguments), JSON-escaped any way, percent-encoded byte by byte and in UTF-16 reach no file of the log directory",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([
      answer.toolCalls([
        { id: 'call-blob', name: 'blob', arguments: {} },
        { id: 'call-escaped', name: 'escaped', arguments: {} },
        { id: 'call-thrower', name: 'thrower', arguments: {} },
        // The model passes the key on as byte values: the arguments are recorded, parsed.
        { id: 'call-bytes', name: 'bytes', arguments: { bytes: [...Buffer.from(API_KEY)], small: [1, 2, 3, 4, 5, 6, 7, 8, 9] } },
      ]),
      // A proxy echoes the key with every character escaped.
      answer.text(`done: "${escapedEvery(API_KEY, true)}" and "${escapedEvery(API_KEY, false)}"`),
      // A 401 quoting the key percent-encoded byte by byte, in upper and lower case.
      answer.status(401, { body: { error: { message: `Incorrect API key provided: ${percentEvery(API_KEY, true)} (${percentEvery(API_KEY, false)})`, type: 'invalid_request_error' } } }),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const tools: ToolDefinition[] = [
        { name: 'blob', readOnly: true, execute: async () => ({ bytes: [...Buffer.from(`password=${SECRET}`)] }) },
        { name: 'escaped', readOnly: true, execute: async () => `{"php":"${php}","python":"${python}","mixed":"${mixed}","every":"${escapedEvery(SECRET, false)}"}` },
        {
          name: 'thrower',
          readOnly: true,
          execute: async () => {
            throw new Error(`vault said ${percentEvery(SECRET, false)}; body ${utf16}`)
          },
        },
        { name: 'bytes', readOnly: true, execute: async (input: unknown) => `got ${JSON.stringify(input).length}` },
      ]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [SECRET] })
      assert.equal(await engine.run(run(server.baseUrl, 'forms', tools)), { status: 'completed' })
      assert.equal((await engine.run(run(server.baseUrl, 'refused', []))).status, 'failed')
      assert.is(server.requests.length, 3)
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      const settled = facts.flatMap((fact) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      assert.equal(settled[0], { status: 'succeeded', output: { bytes: [...Buffer.from('password=[redacted]')] } })
      assert.equal(settled[1], { status: 'succeeded', output: '{"php":"[redacted]","python":"[redacted]","mixed":"[redacted]","every":"[redacted]"}' })
      // The NULs of the UTF-16 text go first, as from a provider's failure message.
      assert.equal(settled[2], { status: 'failed', message: 'vault said [redacted]; body [redacted]' })
      const dispatched = facts.flatMap((fact) => (fact.type === 'tool.dispatched' ? [fact.input] : []))
      assert.equal(dispatched[3], { bytes: [...Buffer.from('[redacted]')], small: [1, 2, 3, 4, 5, 6, 7, 8, 9] }, 'the byte values lose the key; other numbers stay')
      const texts = facts.flatMap((fact) => (fact.type === 'model.completed' ? [fact.output.text] : []))
      assert.ok(texts.includes('done: "[redacted]" and "[redacted]"'), JSON.stringify(texts))
      const failed = facts.flatMap((fact) => (fact.type === 'model.interrupted' ? [fact.message ?? ''] : []))
      assert.ok(failed.length === 1 && failed[0]?.includes('provided: [redacted] ([redacted])'), JSON.stringify(failed))
      assert.equal(leaks(JSON.stringify(facts)), [], 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoLeakInFiles(join(dir, 'log'), 'run-forms')
  }),
)

test(
  "secrets: byte values beside other elements, a text's UTF-16 code units, byte values a model writes otherwise (115.0, 1.15e2, beside 1000) and a progress value are read as text and reach no file of the log directory; such providerOptions are refused",
  bounded(30_000, async (dir) => {
    const keyBytes = [...Buffer.from(API_KEY)]
    const secretBytes = [...Buffer.from(SECRET)]
    const redacted = [...Buffer.from('[redacted]')]
    const codes = (text: string) => Array.from({ length: text.length }, (_, index) => text.charCodeAt(index))
    const server = await scriptedModelServer([
      answer.toolCalls([
        { id: 'call-mixed', name: 'mixed', arguments: {} },
        { id: 'call-progress', name: 'progress', arguments: {} },
        // The model passes the key on as byte values written otherwise: the arguments are recorded, parsed.
        { id: 'call-floats', name: 'take', arguments: `{"v":[${keyBytes.map((byte) => `${byte}.0`).join(',')}]}` },
        { id: 'call-exponents', name: 'take', arguments: `{"v":[${keyBytes.map((byte) => `${byte / 100}e2`).join(',')}]}` },
        { id: 'call-beside', name: 'take', arguments: `{"v":[1000,${keyBytes.join(',')}]}` },
      ]),
      answer.text('done'),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    const thrown: string[] = []
    const received: unknown[] = []
    try {
      const tools: ToolDefinition[] = [
        {
          name: 'mixed',
          readOnly: true,
          execute: async () => ({
            big: [256, ...keyBytes],
            tail: [...secretBytes, null],
            text: [...keyBytes, 'x'],
            half: [...keyBytes, 0.5],
            negative: [-1, ...secretBytes],
            units: codes(`🔑 ${SECRET}`),
          }),
        },
        {
          name: 'progress',
          readOnly: true,
          execute: async (_input, context) => {
            context.progress({ raw: [999, ...keyBytes] })
            for (const value of [{ toJSON: () => undefined }, { get vault() { throw new Error(`vault said ${SECRET}`) } }]) {
              try {
                context.progress(value)
              } catch (error) {
                thrown.push((error as Error).message)
              }
            }
            return 'reported'
          },
        },
        { name: 'take', readOnly: true, execute: async () => 'taken' },
      ]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [SECRET] })
      const running = await engine.start(run(server.baseUrl, 'runs', tools), { onToolProgress: (update) => received.push(update.value) })
      assert.equal(await running.wait(), { status: 'completed' })
      // Byte values of a secret beside other options are refused as all-byte ones are: nothing is written.
      for (const [name, seed] of [['seed-secret', [...secretBytes, -1]], ['seed-key', [256, ...keyBytes]]] as const) {
        const refused = await engine.run({ ...run(server.baseUrl, name, []), providerOptions: { temperature: 0, seed_bytes: seed } }).then(
          () => undefined,
          (error: unknown) => error as { code?: string; details?: unknown },
        )
        assert.equal([refused?.code, refused?.details], ['RUN_INVALID_INPUT', { fields: ['providerOptions'] }], name)
      }
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      assert.not.ok(facts.some((fact) => fact.type === 'invocation.opened' && JSON.stringify(fact).includes('seed_bytes')), 'no refused run was opened')
      const settled = facts.flatMap((fact) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      assert.equal(settled[0], {
        status: 'succeeded',
        output: { big: [256, ...redacted], tail: [...redacted, null], text: [...redacted, 'x'], half: [...redacted, 0.5], negative: [-1, ...redacted], units: codes('🔑 [redacted]') },
      })
      const dispatched = facts.flatMap((fact) => (fact.type === 'tool.dispatched' ? [fact.input] : []))
      assert.equal(dispatched.slice(2), [{ v: redacted }, { v: redacted }, { v: [1000, ...redacted] }], 'the parsed input loses the key, however its numbers were written')
      assert.equal(received, [{ raw: [999, ...redacted] }], 'a progress value is read as data is')
      assert.equal(thrown.length, 2)
      assert.match(thrown[0] as string, /JSON can encode, not an object;/)
      assert.match(thrown[1] as string, /\(vault said \[redacted\]\)/)
      assert.not.ok(thrown[1]?.includes(SECRET), 'the error thrown to the tool quotes no secret')
      assert.equal(leaks(JSON.stringify(facts)), [], 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoLeakInFiles(join(dir, 'log'), 'run-runs')
  }),
)

test('secrets: callTool redacts byte values, escapes and UTF-16 in what a tool returns and throws', async () => {
  const returned = await callTool({ name: 'blob', readOnly: true, execute: async () => ({ blob: [...Buffer.from(`k=${SECRET}`)], text: python }) }, {}, { secrets: [SECRET] })
  assert.equal(returned, { status: 'succeeded', output: { blob: [...Buffer.from('k=[redacted]')], text: '[redacted]' } })
  const thrown = await callTool(
    {
      name: 'thrower',
      readOnly: true,
      execute: async () => {
        throw new Error(`a ${utf16} b ${percentEvery(SECRET, true)}`)
      },
    },
    {},
    { secrets: [SECRET] },
  )
  assert.equal(thrown, { status: 'failed', message: 'a [redacted] b [redacted]' })
})

test('secrets: byte values are read as Latin-1, UTF-8 and UTF-16LE, given back as the same kind, and left alone when they hold none', () => {
  const declared = secretsOf({ headers: { [`${DECLARED_SECRET}0`]: SECRET } }).inData
  const key = secretsOf({ apiKey: API_KEY }).inData
  assert.equal(redactDeep([...Buffer.from(`x${API_KEY}y`)], key), [...Buffer.from('x[redacted]y')], 'Latin-1')
  assert.equal(redactDeep({ d: [...Buffer.from(`ä${SECRET}`)] }, declared), { d: [...Buffer.from('ä[redacted]')] }, 'UTF-8')
  assert.equal(redactDeep([...Buffer.from(`ab${API_KEY}`, 'utf16le')], key), [...Buffer.from('ab[redacted]', 'utf16le')], 'UTF-16LE')
  const buffer = redactDeep(Buffer.from(`k=${API_KEY}`), key)
  assert.ok(Buffer.isBuffer(buffer) && buffer.toString() === 'k=[redacted]', 'a Buffer stays a Buffer')
  const bytes = redactDeep(new Uint8Array(Buffer.from(API_KEY)), key)
  assert.ok(bytes instanceof Uint8Array && Buffer.from(bytes).toString() === '[redacted]', 'a Uint8Array stays one')
  // Unchanged: the same value, also for numbers that are no bytes or a secret's bytes not in a row.
  const plain = { n: [...Buffer.from('just some ordinary text')], floats: [...Buffer.from(API_KEY)].map((b) => b + 0.5), apart: [...Buffer.from(API_KEY)].flatMap((b) => [b, -1]) }
  assert.ok(redactDeep(plain, key) === plain)
  const long = Array.from({ length: 1 << 20 }, (_, index) => index % 256)
  assert.ok(redactDeep(long, key) === long, 'a MiB of bytes without a secret is left as it is')
  const units = Array.from({ length: 1 << 17 }, (_, index) => (index * 7919) % 65_536)
  assert.ok(redactDeep(units, key) === units, 'code units without a secret are left as they are')
})

test('secrets: a run of byte values or UTF-16 code units inside an array loses the secret it spells, whatever else the array holds', () => {
  const declared = secretsOf({ headers: { [`${DECLARED_SECRET}0`]: SECRET } }).inData
  const key = secretsOf({ apiKey: API_KEY }).inData
  const bytes = [...Buffer.from(API_KEY)]
  const redacted = [...Buffer.from('[redacted]')]
  // One element that is no byte anywhere: the run is read, the other elements kept as they are.
  assert.equal(redactDeep([256, ...bytes], key), [256, ...redacted], 'a code unit past Latin-1 before it')
  assert.equal(redactDeep([...bytes, null], key), [...redacted, null])
  assert.equal(redactDeep([...bytes, 'x', 0.5], key), [...redacted, 'x', 0.5])
  assert.equal(redactDeep([-1, ...bytes, 1e9, ...bytes], key), [-1, ...redacted, 1e9, ...redacted], 'each run')
  assert.equal(redactDeep({ d: [1000, ...Buffer.from(`ä${SECRET}`), 70_000] }, declared), { d: [1000, ...Buffer.from('ä[redacted]'), 70_000] }, 'UTF-8 in a run')
  assert.equal(redactDeep([-1, 7, ...Buffer.from(`ab${API_KEY}`, 'utf16le'), -1], key), [-1, 7, ...Buffer.from('ab[redacted]', 'utf16le'), -1], 'UTF-16LE from the second byte of a run')
  // The code units of a text (what charCodeAt gives), one past Latin-1 before the key: read as the text.
  const text = `🔑 ${API_KEY} ok`
  const codes = (value: string) => Array.from({ length: value.length }, (_, index) => value.charCodeAt(index))
  assert.equal(redactDeep({ units: codes(text) }, key), { units: codes('🔑 [redacted] ok') })
  assert.equal(redactDeep(codes(`Ω${SECRET}`), declared), codes('Ω[redacted]'), "a declared secret's non-ASCII letter as its code unit")
})

test('secrets: JSON escapes of any character and percent-encoding are read, one level, and only what holds a secret changes', () => {
  const key = secretsOf({ apiKey: API_KEY })
  const escapedSlash = (text: string) => text.replaceAll('-', '\\u002d')
  assert.is(redact(`a ${escapedSlash(API_KEY)} b \\n \\u00e4 %20`, key.inData), 'a [redacted] b \\n \\u00e4 %20')
  assert.is(redact(`"${escapedEvery(API_KEY, true).slice(0, -6)}\\n"`, key.inData), `"${escapedEvery(API_KEY, true).slice(0, -6)}\\n"`, 'a key cut short is no key in data')
  // An escaped backslash is a backslash: what follows is text, not an escape.
  assert.is(redact(`\\\\${escapedEvery(API_KEY, false).slice(2)}`, key.inData), `\\\\${escapedEvery(API_KEY, false).slice(2)}`)
  // In failure messages the key's pieces go too, also once read: a masked echo, percent-encoded.
  assert.is(redactFailure(`key ${percentEvery(API_KEY.slice(0, 12), false)}****`, key), 'key [redacted]****')
  // Long text with many escapes and no secret: read in one pass.
  const long = '\\u0041%41'.repeat(200_000)
  assert.is(redact(long, key), long)
})

/** An ASCII token, declared to the engine: as text with a NUL beside each character, its UTF-8 bytes are its UTF-16 ones. */
const TOKEN = `tok_${randomBytes(16).toString('hex')}`
/** A secret of digits (an account number), below 2^53: a number holding it is stored exactly. */
const DIGITS = `4${[...randomBytes(15)].map((byte) => byte % 10).join('')}`
/** `text` with a NUL after each character (UTF-16LE read a byte a character), or before it (UTF-16BE). */
const nulAfter = (text: string) => Buffer.from(text, 'utf16le').toString('latin1')
const nulBefore = (text: string) => Buffer.from(text, 'utf16le').swap16().toString('latin1')
test(
  "secrets: a provider's opaque state (reasoningDetails, a call's extraContent) loses the key in any form; state whose bytes as the log writes them spell a secret across members is left out whole; none reaches a file of the log directory or the next request",
  bounded(30_000, async (dir) => {
    // SECRET in Latin-1 is "pk_live/", the byte 0xE4 (msgpack's -28) and its hex digits: an array of a string, -28 and
    // the digits' codes (each a byte) spells it in the log's bytes, though no member holds it (see holdsSecretBytes).
    const spelledAcross = ['pk_live/', -28, ...[...SECRET.slice(9)].map((character) => character.charCodeAt(0))]
    const answers: ModelOutput[] = [
      {
        text: 'checking',
        toolCalls: [
          { callId: 'call-a', name: 'echo', arguments: '{}', extraContent: { google: { thought_signature: `sig ${percentEvery(API_KEY, true)}` } } },
          { callId: 'call-b', name: 'echo', arguments: '{}', extraContent: { google: { parts: spelledAcross } } },
        ],
        finishReason: 'tool_calls',
        reasoningDetails: [
          { type: 'reasoning.text', text: `the key is ${escapedEvery(API_KEY, false)}`, signature: `sig-${API_KEY}` },
          { type: 'reasoning.encrypted', data: [...Buffer.from(API_KEY)] },
        ],
      },
      { text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: [{ type: 'reasoning.encrypted', data: spelledAcross }] as JsonObject[] },
    ]
    const bodies: string[] = []
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const model = new ModelExecutor({
        retries: 0,
        createClient: () => ({
          complete: async (request: ModelRequest) => {
            bodies.push(request.bodyText)
            return { kind: 'completed', output: answers.shift() as ModelOutput }
          },
        }),
      })
      const tools: ToolDefinition[] = [{ name: 'echo', readOnly: true, execute: async () => 'ok' }]
      const engine = new Engine({ log, model, secrets: [SECRET] })
      assert.equal(await engine.run(run('http://127.0.0.1:9/v1', 'state', tools)), { status: 'completed' })
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      const outputs = facts.flatMap((fact) => (fact.type === 'model.completed' ? [fact.output] : []))
      assert.equal(outputs[0]?.reasoningDetails, [
        { type: 'reasoning.text', text: 'the key is [redacted]', signature: 'sig-[redacted]' },
        { type: 'reasoning.encrypted', data: [...Buffer.from('[redacted]')] },
      ])
      assert.equal(
        outputs[0]?.toolCalls.map((call) => call.extraContent ?? null),
        [{ google: { thought_signature: 'sig [redacted]' } }, null],
        "the call whose state spells the secret across members loses it whole; the other call's is kept",
      )
      assert.is(outputs[0]?.text, 'checking', 'the words beside it are kept')
      assert.is(outputs[1]?.text, 'done')
      assert.not.ok('reasoningDetails' in (outputs[1] ?? {}), 'left out whole, the answer kept')
      assert.equal(leaks(JSON.stringify(facts)), [], 'facts')
      assert.equal(leaks(bodies[1] ?? ''), [], 'the next request')
      assert.ok(bodies[1]?.includes('"thought_signature":"sig [redacted]"'), 'the state is sent back as recorded')
    } finally {
      await log.close()
    }
    await assertNoLeakInFiles(join(dir, 'log'), 'run-state')
  }),
)

/** Each secret's UTF-8, Latin-1, UTF-16LE and UTF-16BE bytes, and DIGITS as msgpack writes the number (a float64, big-endian): which `bytes` holds. */
function spelled(bytes: Buffer): string[] {
  const number = Buffer.alloc(8)
  number.writeDoubleBE(Number(DIGITS))
  const needles: [string, Buffer][] = [['DIGITS as a number', number]]
  for (const [name, secret] of [['API_KEY', API_KEY], ['TOKEN', TOKEN], ['DIGITS', DIGITS]] as const) {
    needles.push([`${name} utf8`, Buffer.from(secret)], [`${name} latin1`, Buffer.from(secret, 'latin1')], [`${name} utf16le`, Buffer.from(secret, 'utf16le')], [`${name} utf16be`, Buffer.from(secret, 'utf16le').swap16()])
  }
  return needles.filter(([, needle]) => bytes.includes(needle)).map(([name]) => name)
}

test(
  "secrets: a text with a NUL beside every character (UTF-16LE or BE read a byte a character) in a model's answer, its reasoning, a call's tool name, an approver's words and a cancel reason reaches no file of the log directory",
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer((request) => {
      if (request.body.messages.some((message) => message.content === 'question hanging')) return answer.hang()
      return request.body.messages.some((message) => message.role === 'tool')
        ? answer.text(`done ${nulBefore(TOKEN)}`)
        : answer.toolCalls(
            [
              { id: 'call-name', name: nulAfter(TOKEN), arguments: {} },
              { id: 'call-guarded', name: 'guarded', arguments: { a: 1 } },
            ],
            { text: `sure ${nulAfter(API_KEY)}`, reasoning: `${nulBefore(TOKEN)}\0 and ${nulBefore(API_KEY)}` },
          )
    })
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const tools: ToolDefinition[] = [{ name: 'guarded', readOnly: true, needsApproval: true, execute: async () => 'ran' }]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [TOKEN] })
      const outcome = await engine.run(run(server.baseUrl, 'nuls', tools), { onApproval: async () => ({ approved: false, by: nulAfter(TOKEN), reason: `no: ${nulBefore(API_KEY)}` }) })
      assert.equal(outcome, { status: 'completed' })
      const stop = new AbortController()
      const hanging = await engine.start(run(server.baseUrl, 'hanging', []), { signal: stop.signal })
      await server.seen(server.requests.length)
      stop.abort(`stopped ${nulAfter(TOKEN)}`)
      assert.equal(await hanging.wait(), { status: 'cancelled', source: 'stopped [redacted]\0' })
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      const answers = facts.flatMap((fact) => (fact.type === 'model.completed' ? [fact.output] : []))
      assert.is(answers[0]?.text, 'sure [redacted]\0')
      assert.is(answers[0]?.reasoning, '\0[redacted]\0 and \0[redacted]')
      assert.is(answers[0]?.toolCalls[0]?.name, '[redacted]\0')
      assert.is(answers[1]?.text, 'done \0[redacted]')
      const rejected = facts.flatMap((fact) => (fact.type === 'tool.rejected' ? [fact] : []))
      assert.equal(rejected.map((fact) => [fact.name, fact.reason, fact.input]), [['[redacted]\0', 'unknown_tool', {}], ['guarded', 'denied', { a: 1 }]], 'only the words that held it changed')
      assert.equal(rejected[1]?.approval, { by: '[redacted]\0', reason: 'no: \0[redacted]' })
      const ended = facts.flatMap((fact) => (fact.type === 'invocation.ended' ? [fact.outcome] : []))
      assert.equal(ended.at(-1), { status: 'cancelled', source: 'stopped [redacted]\0' })
      assert.equal(spelled(Buffer.from(JSON.stringify(facts))), [], 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoLeakInFiles(join(dir, 'log'), 'run-nuls', spelled)
  }),
)

test('secrets: UTF-16BE bytes of a secret (a NUL before each character) in what a tool returns are not recorded', async () => {
  // Read as UTF-16LE from their second byte, the last character's NUL is missing: the bytes as the log writes them are searched for the UTF-16BE form too.
  for (const returned of [[...Buffer.from(nulBefore(TOKEN), 'latin1')], { units: [...Buffer.from(nulBefore(TOKEN), 'latin1')] }]) {
    const called = await callTool({ name: 'blob', readOnly: true, execute: async () => returned }, {}, { secrets: [TOKEN] })
    assert.equal(called, { status: 'succeeded', output: '[redacted]' })
  }
})

test(
  'secrets: a secret of digits written as a number (in a call\'s arguments as written or in another notation, a tool\'s result, a token count) becomes the string "[redacted]": the arguments still parse, other numbers stay',
  bounded(30_000, async (dir) => {
    const server = await scriptedModelServer([
      answer.toolCalls(
        [
          { id: 'call-plain', name: 'take', arguments: `{"card":${DIGITS},"amount":12.5}` },
          { id: 'call-exponent', name: 'take', arguments: `{"card":${DIGITS[0]}.${DIGITS.slice(1)}e15}` },
          { id: 'call-negative', name: 'take', arguments: `{"card":-${DIGITS}0}` },
          { id: 'call-ret', name: 'ret', arguments: {} },
        ],
        { usage: { prompt_tokens: Number(DIGITS), completion_tokens: 5 } },
      ),
      answer.text('done'),
    ])
    const log = await EventLog.open(join(dir, 'log'))
    const got: unknown[] = []
    try {
      const tools: ToolDefinition[] = [
        {
          name: 'take',
          readOnly: true,
          execute: async (input: unknown) => {
            got.push(input)
            return 'taken'
          },
        },
        { name: 'ret', readOnly: true, execute: async () => ({ account: Number(DIGITS), negative: -Number(DIGITS), big: BigInt(DIGITS) * 10n, other: [42, 1e9, 0.5] }) },
      ]
      const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }), secrets: [TOKEN, DIGITS] })
      assert.equal(await engine.run(run(server.baseUrl, 'digits', tools)), { status: 'completed' })
      // A number holding it in the recorded settings is refused, as text holding it is: nothing is written.
      const refused = await engine.run({ ...run(server.baseUrl, 'po-digits', []), providerOptions: { seed: Number(DIGITS) } }).then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: unknown },
      )
      assert.equal([refused?.code, refused?.details], ['RUN_INVALID_INPUT', { fields: ['providerOptions'] }])
      const facts = (await log.prefix(ALL.events, ALL.bytes)).events.map((stored) => stored.event.fact)
      assert.is(facts.filter((fact) => fact.type === 'invocation.opened').length, 1, 'no refused run was opened')
      const calls = facts.flatMap((fact) => (fact.type === 'model.completed' ? fact.output.toolCalls.map((call) => call.arguments) : []))
      assert.equal(calls.slice(0, 3), ['{"card":"[redacted]","amount":12.5}', '{"card":"[redacted]"}', '{"card":"[redacted]"}'], 'recorded as the answer, still JSON')
      const dispatched = facts.flatMap((fact) => (fact.type === 'tool.dispatched' ? [fact.input] : []))
      assert.equal(dispatched.slice(0, 3), [{ card: '[redacted]', amount: 12.5 }, { card: '[redacted]' }, { card: '[redacted]' }])
      assert.equal(got, dispatched.slice(0, 3), 'the tool was given what was recorded')
      const settled = facts.flatMap((fact) => (fact.type === 'tool.settled' ? [fact.outcome] : []))
      assert.equal(settled[3], { status: 'succeeded', output: { account: '[redacted]', negative: '[redacted]', big: '[redacted]0', other: [42, 1e9, 0.5] } })
      const usage = facts.flatMap((fact) => (fact.type === 'model.completed' ? [fact.output.usage] : []))
      assert.equal(usage[0], { outputTokens: 5 }, 'a count holding it is left out')
      assert.equal(spelled(Buffer.from(JSON.stringify(facts))), [], 'facts')
    } finally {
      await log.close()
      await server.close()
    }
    await assertNoLeakInFiles(join(dir, 'log'), 'run-digits', spelled)
  }),
)

test.run()
