/**
 * Tool-call arguments that are not JSON (a call cut off by the answer's token limit, single quotes,
 * a code fence): the call is `tool.rejected{invalid_input}` with a `message` saying where the text
 * stops being JSON, in the library's words (the same on every Node, so a replay on another Node
 * records the same fact), redacted and bounded as a schema refusal's is. What the model is told is
 * what it was told before the fact recorded a message (JSON.parse's words), byte for byte: a sealed
 * successor resends a request as it was and requests are compared by digest. `factstate log`, the
 * inspector's row, `log.invocationEvents` and `callTool` all say why.
 */
import { spawn } from 'node:child_process'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact, type StoredEvent, type ToolDefinition, transcriptOf } from '../index.js'
import { keyFields } from '../inspector/page/format.js'
import { summarizeFact } from '../store/fact-summary.js'
import { answer, callTool, compareRuns } from '../testing/index.js'
import { ensureBuilt } from './support/built.js'
import { engineTest, factsOf, filesHolding, messagesOf, only } from './support/engine-fixtures.js'

ensureBuilt()

/** An order lookup whose input schema wants an order id such as `A-17`. */
function lookupOrder(): ToolDefinition & { calls: unknown[] } {
  const calls: unknown[] = []
  return {
    name: 'lookupOrder',
    description: 'the status of an order',
    inputSchema: { type: 'object', properties: { orderId: { type: 'string', pattern: '^[A-Z]-[0-9]+$' } }, required: ['orderId'] },
    calls,
    async execute(input) {
      calls.push(input)
      return { status: 'shipped' }
    },
  }
}

/** A call cut off by the answer's token limit, inside the order id. */
const CUT_OFF = '{"orderId": "A-1'
const CUT_OFF_MESSAGE = 'the arguments are not valid JSON (at position 16: the text ends inside the string begun at position 12)'

/** What JSON.parse says of `text` on the Node running the test: its words differ between Node versions. */
function parseError(text: string): string {
  try {
    JSON.parse(text)
  } catch (error) {
    return (error as Error).message
  }
  throw new Error(`${text} parses`)
}

/** The events as 0.6.0 recorded them: a rejection of arguments that are not JSON had no message. */
function asRecordedBy060(events: readonly StoredEvent[]): StoredEvent[] {
  return events.map((stored) => {
    const { fact } = stored.event
    if (fact.type !== 'tool.rejected' || typeof fact.input !== 'string') return stored
    const { message: _, ...rest } = fact
    return { ...stored, event: { ...stored.event, fact: rest } }
  })
}

/** `factstate log <path>` with the built CLI: its standard output, or a failure naming its exit code. */
function logLines(path: string): Promise<string[]> {
  const env = { ...process.env }
  delete env.FORCE_COLOR
  delete env.NO_COLOR
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['dist/bin/factstate.js', 'log', path], { stdio: ['ignore', 'pipe', 'pipe'], env })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => (code === 0 ? resolve(stdout.trimEnd().split('\n')) : reject(new Error(`factstate log exited ${code}: ${stderr}`))))
  })
}

test(
  'arguments that are not JSON: the fact says where they stop being JSON (log.invocationEvents, factstate log, the inspector row), the model is told what it was told before, byte for byte',
  engineTest(
    [answer.toolCalls([{ id: 'call-cut', name: 'lookupOrder', arguments: CUT_OFF }, { id: 'call-quoted', name: 'lookupOrder', arguments: "{'orderId': 'A-17'}" }]), answer.text('done')],
    { ms: 30_000 },
    async (h) => {
      const tool = lookupOrder()
      assert.equal(await h.run(h.input('cut', { tools: [tool] })), { status: 'completed' })
      assert.is(tool.calls.length, 0, 'neither call ran')
      const events = await h.log.invocationEvents('invocation-cut')
      const rejected = only(
        events.map((stored) => stored.event.fact),
        'tool.rejected',
      )
      assert.equal(
        rejected.map((fact) => [fact.callId, fact.reason, fact.input, fact.message]),
        [
          ['call-cut', 'invalid_input', CUT_OFF, CUT_OFF_MESSAGE],
          ['call-quoted', 'invalid_input', "{'orderId': 'A-17'}", `the arguments are not valid JSON (at position 1: "'" where a property name in double quotes was expected)`],
        ],
      )
      // The model was told JSON.parse's words, as 0.6.0 told it; the next request is the one 0.6.0 would send.
      const told = messagesOf(h.server.requests[1]?.body).filter((message) => message.role === 'tool')
      assert.equal(
        told.map((message) => message.content),
        [
          `error: the arguments for "lookupOrder" are not valid JSON (${parseError(CUT_OFF)}); it was not run. The arguments sent were: ${CUT_OFF}`,
          `error: the arguments for "lookupOrder" are not valid JSON (${parseError("{'orderId': 'A-17'}")}); it was not run. The arguments sent were: {'orderId': 'A-17'}`,
        ],
      )
      // The second request is the transcript of the facts before its model.requested.
      const secondRequest = events.slice(0, events.findLastIndex((stored) => stored.event.fact.type === 'model.requested'))
      assert.equal(messagesOf(h.server.requests[1]?.body), transcriptOf(secondRequest), 'the request is the transcript of the facts')
      assert.equal(transcriptOf(asRecordedBy060(secondRequest)), transcriptOf(secondRequest), 'facts with the message and without it make the same transcript')
      // A replay compares the facts: a recording 0.6.0 made (no message) agrees with this one.
      assert.is(compareRuns(asRecordedBy060(events), events), undefined)
      // Shown where an operator looks: a line of `factstate log` and the inspector's row.
      const [cut] = rejected as [Fact]
      assert.is(summarizeFact(cut), `lookupOrder invocation-cut/step-1/0 invalid_input: ${CUT_OFF_MESSAGE.slice(0, 79)}…`)
      assert.ok(
        keyFields(cut).some((field) => field.full === CUT_OFF_MESSAGE),
        'the row has the message (cut, and whole on hover)',
      )
      const lines = await logLines(h.logPath)
      assert.ok(
        lines.some((line) => line.includes(`tool.rejected`) && line.includes(`invalid_input: ${CUT_OFF_MESSAGE.slice(0, 79)}…`)),
        lines.join('\n'),
      )
    },
  ),
)

const ORDER_KEY = 'sk_live_order_0123456789abcdef'
/** Calls whose arguments are not JSON or not storable, two holding the key: by call id, as the model sent them. */
const KEYED: Record<string, string> = {
  'call-cut': CUT_OFF,
  'call-key': `{"note": "${ORDER_KEY}", "orderId": A-17}`,
  'call-proto': `{"${ORDER_KEY}": {"__proto__": 1}}`,
}

test(
  'callTool resolves with the message the log holds for arguments that are not JSON, secrets in them redacted first (a position after one counts it as "[redacted]")',
  engineTest(
    [answer.toolCalls(Object.entries(KEYED).map(([id, text]) => ({ id, name: 'lookupOrder', arguments: text }))), answer.text('done')],
    { engine: { secrets: [ORDER_KEY] } },
    async (h) => {
      assert.equal(await h.run(h.input('key', { tools: [lookupOrder()] })), { status: 'completed' })
      const rejected = only(await factsOf(h.log, 'invocation-key'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => fact.message),
        [
          CUT_OFF_MESSAGE,
          // In the text as recorded, the key is "[redacted]": 20 characters shorter than in the text sent.
          'the arguments are not valid JSON (at position 34: "A" where a value was expected)',
          'the arguments hold what cannot be stored exactly (at [redacted]: an own "__proto__" key cannot be stored exactly)',
        ],
      )
      for (const fact of rejected) {
        const unit = await callTool(lookupOrder(), KEYED[fact.callId] as string, { secrets: [ORDER_KEY] })
        assert.equal(unit, { status: 'rejected', reason: 'invalid_input', message: fact.message as string }, fact.callId)
      }
      await h.log.close()
      assert.equal(await filesHolding(h.logPath, [ORDER_KEY, ORDER_KEY.slice(0, 19)]), [], 'no file of the log holds the key')
      h.log = await EventLog.open(h.logPath)
    },
  ),
)

test(
  'a fault far into long arguments is named by its position, a character past ASCII by its code point: the message quotes nothing of the text',
  engineTest(
    [answer.toolCalls([{ id: 'call-long', name: 'lookupOrder', arguments: `{"orderId": "A-17", "note": "${'x'.repeat(5_000)}", "then": ${'\u{1F600}'.repeat(3)}}` }]), answer.text('done')],
    {},
    async (h) => {
      assert.equal(await h.run(h.input('long', { tools: [lookupOrder()] })), { status: 'completed' })
      const [rejected] = only(await factsOf(h.log, 'invocation-long'), 'tool.rejected')
      assert.is(rejected?.message, 'the arguments are not valid JSON (at position 5040: U+1F600 where a value was expected)')
    },
  ),
)

test.run()
