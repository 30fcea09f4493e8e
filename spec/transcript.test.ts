/**
 * The transcript rebuilt from facts (actors/transcript.ts) when a model reuses a tool call id, as
 * many OpenAI-compatible servers do (`call_0` at every step, or twice in one answer): each tool
 * message answers its own call, and a crash's "outcome unknown" names the operation that was
 * dispatched for that very call, never another one that settled.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { transcriptOf } from '../actors/transcript.js'
import type { Fact, RuntimeEvent } from '../facts/types.js'
import { facts, invocationOf } from './support/log-fixtures.js'

const invocation = invocationOf('t')
const events = (list: Fact[]): RuntimeEvent[] => list.map((fact, index) => ({ id: `t/${index + 1}`, recordedAt: index, invocation, fact }))
const answer = (stepId: string, calls: [callId: string, name: string][]): Fact => ({
  type: 'model.completed',
  stepId,
  output: { toolCalls: calls.map(([callId, name]) => ({ callId, name, arguments: '{}' })), finishReason: 'tool_calls' },
})
const dispatched = (operationId: string, callId: string, name: string): Fact => ({ type: 'tool.dispatched', operationId, callId, name, input: {} })
const settled = (operationId: string, output: string): Fact => ({ type: 'tool.settled', operationId, outcome: { status: 'succeeded', output } })
const ended = (failure: string): Fact => ({ type: 'invocation.ended', outcome: { status: 'failed', class: failure } })

/** The tool messages of the transcript, as `callId: content`. */
function toolMessages(list: Fact[]): string[] {
  return transcriptOf(events(list)).flatMap((message) => (message.role === 'tool' ? [`${message.tool_call_id}: ${message.content}`] : []))
}

const unknown = (operationId: string) => `outcome unknown: operation ${operationId} was dispatched but never settled; its effect may or may not have happened`

const uncertain = (operationId: string, name: string) => ({ invocationId: 't', operationId, callId: `call-${operationId}`, name, input: { amount: 5 } })
const source = { invocation, highWater: 6, digest: `sha256:${'0'.repeat(64)}` }

test('the note on unknown outcomes leads the request, for a continuation too, in one system message', () => {
  const lineage: Fact[] = [
    { ...facts.opened(), input: { kind: 'message', content: 'charge twice', priorUnknown: [uncertain('op-a', 'charge')] } } as Fact,
    facts.requested('step-1'),
    answer('step-1', [['call_1', 'charge']]),
    dispatched('op-b', 'call_1', 'charge'),
    ended('outcome_unknown'),
  ]
  const continued: Fact = { ...facts.opened(), input: { kind: 'continuation', source, priorUnknown: [uncertain('op-b', 'charge')] } } as Fact
  const messages = transcriptOf(events([...lineage, continued]))
  // Many chat templates and providers refuse a system message that is not the first.
  assert.equal(
    messages.map((message) => message.role),
    ['system', 'user', 'assistant', 'tool'],
  )
  const note = messages[0]?.content ?? ''
  assert.ok(note.indexOf('operation op-a') >= 0 && note.indexOf('operation op-a') < note.indexOf('operation op-b'), note)
  assert.is(note.split('Note: in an earlier run').length, 3, 'both notes, in the order the runs were opened')
  // Without a note at the lineage's start, the continuation's own leads.
  const plain = transcriptOf(events([{ ...facts.opened(), input: { kind: 'message', content: 'charge' } } as Fact, ...lineage.slice(1), continued]))
  assert.equal(
    plain.map((message) => message.role),
    ['system', 'user', 'assistant', 'tool'],
  )
  assert.match(plain[0]?.content ?? '', /^Note: in an earlier run of this session, .*operation op-b/)
})

test('the run\'s instructions lead the request, with any note on unknown outcomes after them in the same system message', () => {
  const opened = facts.opened() as Extract<Fact, { type: 'invocation.opened' }>
  const instructed = (instructions: string | undefined, input: Extract<Fact, { type: 'invocation.opened' }>['input']): Fact => ({
    ...opened,
    input,
    execution: { ...opened.execution, ...(instructions === undefined ? {} : { instructions }) },
  })
  const lineage: Fact[] = [
    instructed('Be brief.', { kind: 'message', content: 'charge', priorUnknown: [uncertain('op-a', 'charge')] }),
    facts.requested('step-1'),
    answer('step-1', [['call_1', 'charge']]),
    dispatched('op-b', 'call_1', 'charge'),
    ended('outcome_unknown'),
  ]
  const own = transcriptOf(events(lineage.slice(0, 1)))
  assert.equal(own.map((message) => message.role), ['system', 'user'])
  assert.match(own[0]?.content ?? '', /^Be brief\.\n\nNote: in an earlier run of this session, .*operation op-a/)
  // A continuation's own instructions replace its source's; the notes stay, after them.
  const continued = transcriptOf(events([...lineage, instructed('Be thorough.', { kind: 'continuation', source, priorUnknown: [uncertain('op-b', 'charge')] })]))
  assert.equal(continued.map((message) => message.role), ['system', 'user', 'assistant', 'tool'])
  const lead = continued[0]?.content ?? ''
  assert.ok(lead.startsWith('Be thorough.\n\nNote: in an earlier run'), lead)
  assert.not.ok(lead.includes('Be brief.'), 'the source run\'s instructions are not sent again')
  assert.is(lead.split('Note: in an earlier run').length, 3)
  // Without instructions of its own, the continuation sends only the notes.
  const bare = transcriptOf(events([...lineage, instructed(undefined, { kind: 'continuation', source })]))
  assert.match(bare[0]?.content ?? '', /^Note: in an earlier run of this session, .*operation op-a/)
})

test('one answer with the same call id twice: the settled call answers with its output, the other names its own operation', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call_0', 'echo'],
      ['call_0', 'deploy'],
    ]),
    dispatched('op-echo', 'call_0', 'echo'),
    settled('op-echo', 'echoed'),
    dispatched('op-deploy', 'call_0', 'deploy'),
    ended('outcome_unknown'),
  ])
  assert.equal(messages, ['call_0: echoed', `call_0: ${unknown('op-deploy')}`])
})

test('a call id reused at the next step: a call that never ran is "never executed", not the earlier step\'s operation', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [['call_0', 'echo']]),
    dispatched('op-1', 'call_0', 'echo'),
    settled('op-1', 'echoed'),
    facts.requested('step-2'),
    answer('step-2', [['call_0', 'deploy']]),
    ended('host_interrupted'),
  ])
  assert.equal(messages, ['call_0: echoed', 'call_0: error: this call was never executed'])
})

test('a call id reused at the next step and dispatched there: the unknown outcome names that step\'s operation', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [['call_0', 'echo']]),
    dispatched('op-1', 'call_0', 'echo'),
    settled('op-1', 'echoed'),
    facts.requested('step-2'),
    answer('step-2', [['call_0', 'deploy']]),
    dispatched('op-2', 'call_0', 'deploy'),
    ended('outcome_unknown'),
  ])
  assert.equal(messages, ['call_0: echoed', `call_0: ${unknown('op-2')}`])
})

test('a rejected and a dispatched call sharing an id are each answered once, in the order the model made them', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call_0', 'missing'],
      ['call_0', 'echo'],
    ]),
    { type: 'tool.rejected', operationId: 'op-missing', callId: 'call_0', name: 'missing', input: {}, reason: 'unknown_tool' },
    dispatched('op-echo', 'call_0', 'echo'),
    settled('op-echo', 'echoed'),
    facts.requested('step-2'),
    { type: 'model.completed', stepId: 'step-2', output: { text: 'done', toolCalls: [], finishReason: 'stop' } },
  ])
  assert.equal(messages, ['call_0: error: there is no tool named "missing"; it was not run', 'call_0: echoed'])
})

test('calls that ran side by side are answered in the order the model made them: a call still running holds back the answers after it', () => {
  const step = [
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call-a', 'echo'],
      ['call-b', 'echo'],
      ['call-c', 'echo'],
    ]),
    dispatched('op-a', 'call-a', 'echo'),
    dispatched('op-b', 'call-b', 'echo'),
    dispatched('op-c', 'call-c', 'echo'),
    settled('op-c', 'c done'),
    settled('op-b', 'b done'),
  ]
  assert.equal(toolMessages(step), [], 'a is still running: b and c wait behind it')
  assert.equal(toolMessages([...step, settled('op-a', 'a done')]), ['call-a: a done', 'call-b: b done', 'call-c: c done'])
  // A crash while a ran: its outcome is unknown, and it keeps its place among the others.
  assert.equal(toolMessages([...step, ended('outcome_unknown')]), ['call-a: ' + unknown('op-a'), 'call-b: b done', 'call-c: c done'])
  // A crash before c was dispatched: c never ran, and is answered after the unknown b, as the model ordered them.
  assert.equal(toolMessages([...step.slice(0, 5), settled('op-a', 'a done'), ended('outcome_unknown')]), [
    'call-a: a done',
    'call-b: ' + unknown('op-b'),
    'call-c: error: this call was never executed',
  ])
})

test('a call id the model used twice, its first use rejected while an earlier call still runs: the later use is answered for its own operation', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call-a', 'slow'],
      ['call-x', 'missing'],
      ['call-x', 'echo'],
    ]),
    dispatched('op-a', 'call-a', 'slow'),
    { type: 'tool.rejected', operationId: 'op-x1', callId: 'call-x', name: 'missing', input: {}, reason: 'unknown_tool' },
    dispatched('op-x2', 'call-x', 'echo'),
    settled('op-x2', 'echoed'),
    settled('op-a', 'slow done'),
  ])
  assert.equal(messages, ['call-a: slow done', 'call-x: error: there is no tool named "missing"; it was not run', 'call-x: echoed'])
})

test('an empty or blank final answer (a filtered one) is not replayed: a continuation of its run asks again after the user message', () => {
  const filtered: Fact = { type: 'model.completed', stepId: 'step-1', output: { text: '', toolCalls: [], finishReason: 'content_filter' } }
  const messages = transcriptOf(events([facts.opened(), facts.requested('step-1'), filtered, { type: 'invocation.ended', outcome: { status: 'failed', class: 'model_filtered' } }]))
  assert.equal(messages.map((message) => message.role), ['user'])
  // Blank counts as empty, as it does for the actor's model_filtered.
  const blank: Fact = { type: 'model.completed', stepId: 'step-1', output: { text: ' \n', toolCalls: [], finishReason: 'content_filter' } }
  assert.equal(transcriptOf(events([facts.opened(), facts.requested('step-1'), blank])).map((message) => message.role), ['user'])
  const spoken: Fact = { type: 'model.completed', stepId: 'step-1', output: { text: 'fine', toolCalls: [], finishReason: 'stop' } }
  const answered = transcriptOf(events([facts.opened(), facts.requested('step-1'), spoken]))
  assert.equal(answered.at(-1), { role: 'assistant', content: 'fine' })
})

test('a refusal whose message or reason ends with a full stop is told as one clause: no ".; it was not run"', () => {
  const messages = toolMessages([
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call-s', 'refund'],
      ['call-d', 'refund'],
      ['call-e', 'refund'],
    ]),
    { type: 'tool.rejected', operationId: 'op-s', callId: 'call-s', name: 'refund', input: {}, reason: 'invalid_input', message: 'the input: Property "note" does not match additional properties schema.' },
    { type: 'tool.rejected', operationId: 'op-d', callId: 'call-d', name: 'refund', input: {}, reason: 'denied', approval: { reason: 'over the limit.' } },
    { type: 'tool.rejected', operationId: 'op-e', callId: 'call-e', name: 'refund', input: {}, reason: 'denied', approval: { reason: 'ask again later...' } },
  ])
  assert.equal(messages, [
    'call-s: error: the arguments for "refund" do not match its input schema: the input: Property "note" does not match additional properties schema; it was not run',
    'call-d: error: the call to "refund" was denied by its approver: over the limit; it was not run',
    'call-e: error: the call to "refund" was denied by its approver: ask again later...; it was not run',
  ])
})

test('arguments kept as text are told what JSON.parse says of them whether their fact records a message (0.7.0) or not (0.6.0); a schema refusal of an input that is a string is told its message', () => {
  const text = '{"orderId": "A-1'
  let parsed = ''
  try {
    JSON.parse(text)
  } catch (error) {
    parsed = (error as Error).message
  }
  const calls: Fact[] = [
    facts.opened(),
    facts.requested('step-1'),
    answer('step-1', [
      ['call-t', 'lookup'],
      ['call-s', 'lookup'],
    ]),
  ]
  const unparsed = { type: 'tool.rejected', operationId: 'op-t', callId: 'call-t', name: 'lookup', input: text, reason: 'invalid_input' } as const
  // The model sent `"not JSON at all"`: it parses, to a string its schema refuses as a whole.
  const refused: Fact = { type: 'tool.rejected', operationId: 'op-s', callId: 'call-s', name: 'lookup', input: 'not JSON at all', reason: 'invalid_input', message: 'the input: Instance type "string" is invalid. Expected "object".' }
  const recorded = toolMessages([...calls, { ...unparsed, message: 'the arguments are not valid JSON (at position 16: the text ends inside the string begun at position 12)' }, refused])
  assert.equal(toolMessages([...calls, unparsed, refused]), recorded)
  assert.equal(recorded, [
    `call-t: error: the arguments for "lookup" are not valid JSON (${parsed}); it was not run. The arguments sent were: ${text}`,
    'call-s: error: the arguments for "lookup" do not match its input schema: the input: Instance type "string" is invalid. Expected "object"; it was not run',
  ])
})

test.run()
