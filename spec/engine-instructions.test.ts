/**
 * A run's system prompt (`RunInput.instructions`): it leads every request of the run as one system
 * message, is recorded in the run's execution settings, is sealed with a pause (a successor must
 * have the same), and belongs to one run: a continuation gives its own.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { RunInput } from '../index.js'
import { payloads } from '../inspector/page/format.js'
import { summarizeFact } from '../store/fact-summary.js'
import { answer } from '../testing/scripted-model-server.js'
import { engineTest, factsOf, messagesOf, only, refusedWithoutWriting, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'

const TERSE = 'You are terse.\nAnswer in one line, and call echo before you answer.'

test(
  'instructions lead every request of the run as one system message and are recorded in its execution settings',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]), answer.text('done'), answer.text('continued'), answer.text('plain')], {}, async (h) => {
    const input = h.input('instructed')
    input.instructions = TERSE
    assert.equal(await h.run(input), { status: 'completed' })
    const [first, second] = h.server.requests.map((request) => messagesOf(request.body))
    assert.equal(first, [
      { role: 'system', content: TERSE },
      { role: 'user', content: 'question instructed' },
    ])
    assert.equal(
      second?.map((message) => message.role),
      ['system', 'user', 'assistant', 'tool'],
      'the second step leads with them too',
    )
    assert.equal(second?.[0], { role: 'system', content: TERSE })
    const [opened] = only(await factsOf(h.log, 'invocation-instructed'), 'invocation.opened')
    assert.is(opened?.execution.instructions, TERSE)
    // Where people read the log: `factstate log` (escaped, cut) and the inspector (whole, expandable).
    assert.match(summarizeFact(opened!), /; instructions "You are terse\.\\nAnswer in one line, an…$/)
    assert.equal(
      payloads(opened!).find((payload) => payload.kind === 'instructions'),
      { label: `instructions (${TERSE.length} chars)`, text: TERSE, kind: 'instructions' },
    )

    // A continuation is a run of its own: its instructions, not its source's, lead its request.
    const source = (await h.log.runSource('session-instructed', 'run-instructed'))?.boundary
    assert.ok(source)
    const continued: RunInput = { ...h.input('continued', { session: 'session-instructed' }), instructions: 'Now be verbose.', work: { kind: 'continuation', source } }
    assert.equal(await h.run(continued), { status: 'completed' })
    const third = messagesOf(h.server.requests[2]?.body)
    assert.equal(
      third.map((message) => message.role),
      ['system', 'user', 'assistant', 'tool', 'assistant'],
    )
    assert.equal(third[0], { role: 'system', content: 'Now be verbose.' })
    const later = (await h.log.runSource('session-instructed', 'run-continued'))?.boundary
    assert.ok(later)
    const plain: RunInput = { ...h.input('plain', { session: 'session-instructed' }), work: { kind: 'continuation', source: later } }
    assert.equal(await h.run(plain), { status: 'completed' })
    assert.equal(
      messagesOf(h.server.requests[3]?.body).map((message) => message.role),
      ['user', 'assistant', 'tool', 'assistant', 'assistant'],
      'a continuation without instructions sends no system message',
    )
    const [plainOpened] = only(await factsOf(h.log, 'invocation-plain'), 'invocation.opened')
    assert.not.ok('instructions' in (plainOpened?.execution ?? {}), 'and records none')
  }),
)

test(
  'instructions are sealed with a pause: a successor with other instructions, or none, is HANDOFF_MISMATCH; the matching one sends them',
  engineTest([answer.text('successor done')], {}, async (h) => {
    const paused = h.input('sealed')
    paused.instructions = TERSE
    const sealed = await sealAtFirstSafePoint(h, paused, 'successor')
    assert.is(sealed.pause.execution.instructions, TERSE)
    const other = { ...successorInput(sealed), instructions: 'You are verbose.' }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start(other), 'HANDOFF_MISMATCH', 'other instructions')
    assert.equal([error.details?.field, error.details?.sealed, error.details?.given], ['instructions', TERSE, 'You are verbose.'])
    assert.match(error.message, /execution setting instructions does not match/)
    const none = successorInput(sealed)
    delete none.instructions
    const missing = await refusedWithoutWriting(h.log, () => h.engine.start(none), 'HANDOFF_MISMATCH', 'no instructions')
    assert.equal([missing.details?.field, missing.details?.given], ['instructions', null])
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
    assert.equal(messagesOf(h.server.requests[0]?.body), [
      { role: 'system', content: TERSE },
      { role: 'user', content: 'question sealed' },
    ])
  }),
)

test(
  'instructions that are empty, not a string, or not well-formed text are RUN_INVALID_INPUT, and nothing is written',
  engineTest([], {}, async (h) => {
    const cases: [what: string, value: unknown][] = [
      ['empty', ''],
      ['a number', 5],
      ['a lone surrogate', 'be \uD800 terse'],
    ]
    for (const [what, value] of cases) {
      const input = h.input('bad')
      ;(input as { instructions?: unknown }).instructions = value
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_INVALID_INPUT', `instructions ${what}`)
      assert.equal(error.details?.fields, ['instructions'], what)
    }
    assert.is(h.server.requests.length, 0)
  }),
)

test.run()
