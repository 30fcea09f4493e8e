/**
 * A conversation: each next user message is a continuation from the last turn's boundary with
 * `content`, so the model gets the whole history (rebuilt from facts, no tool run again) and then
 * the new message. A seal inside such a turn carries the message to its successor.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { RunInput } from '../index.js'
import { summarizeFact } from '../store/fact-summary.js'
import { answer } from '../testing/scripted-model-server.js'
import { refusal } from './support/log-fixtures.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'

test(
  'each next message continues from the last turn: the model gets the whole history, then the new message; no tool runs again',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 4 } }]), answer.text('four'), answer.text('twelve'), answer.text('you are welcome')], {}, async (h) => {
    const echo = countingTool('echo')
    const turn = async (name: string, work: RunInput['work']) => {
      const input: RunInput = { ...h.input(name, { session: 'chat', tools: [echo] }), work }
      assert.equal(await h.run(input), { status: 'completed' }, name)
      const source = (await h.log.runSource('chat', `run-${name}`))?.boundary
      assert.ok(source, name)
      return source
    }
    const first = await turn('first', { kind: 'message', content: 'what is 2+2?' })
    const second = await turn('second', { kind: 'continuation', source: first, content: 'and times 3?' })
    await turn('third', { kind: 'continuation', source: second, content: 'thanks' })

    const [, stepTwo, asked3, asked4] = h.server.requests.map((request) => messagesOf(request.body))
    assert.equal(
      asked3?.map((message) => [message.role, message.content]),
      [
        ['user', 'what is 2+2?'],
        ['assistant', null],
        ['tool', '{"value":4}'],
        ['assistant', 'four'],
        ['user', 'and times 3?'],
      ],
    )
    assert.equal(asked3?.slice(0, 3), stepTwo, 'the history is sent as the first turn sent it')
    assert.equal(
      asked4?.map((message) => [message.role, message.content]),
      [...(asked3 ?? []).map((message) => [message.role, message.content]), ['assistant', 'twelve'], ['user', 'thanks']],
    )
    assert.is(echo.calls.length, 1, 'replay never executes')
    const [opened] = only(await factsOf(h.log, 'invocation-third'), 'invocation.opened')
    assert.equal(opened?.input.kind === 'continuation' && opened.input.content, 'thanks')
    assert.is(summarizeFact(opened!), `continuation from run-second@${second.highWater}, message "thanks"`)
  }),
)

test(
  'log.runs lists a session\'s runs in the order they opened, how each began and ended, an open one as open; the next message continues the last',
  engineTest(
    [answer.text('hello'), answer.text('again'), answer.toolCalls([{ name: 'gate', arguments: {} }]), answer.text('through'), answer.text('other'), answer.text('dotted')],
    {},
    async (h) => {
      let open: () => void = () => undefined
      const opened = new Promise<void>((resolve) => (open = resolve))
      let release: () => void = () => undefined
      const gate = countingTool('gate', async () => {
        open()
        await new Promise<void>((resolve) => (release = resolve))
        return 'open'
      })
      const say = async (name: string, work?: RunInput['work'], session = 'listed') =>
        h.run({ ...h.input(name, { session, tools: [gate] }), ...(work ? { work } : {}) })
      assert.equal(await say('one'), { status: 'completed' })
      // What a chat app does with only the session id: continue the last run.
      const continueLast = async (name: string, content: string) => {
        const last = (await h.log.runs('listed')).at(-1)
        assert.ok(last)
        const source = (await h.log.runSource('listed', last.runId))?.boundary
        assert.ok(source)
        return { ...h.input(name, { session: 'listed', tools: [gate] }), work: { kind: 'continuation', source, content } } satisfies RunInput
      }
      assert.equal(await h.run(await continueLast('two', 'and now?')), { status: 'completed' })
      const running = await h.start(await continueLast('three', 'open the gate'))
      await opened
      // Sessions whose ids begin alike are apart.
      assert.equal(await say('other', undefined, 'listed2'), { status: 'completed' })
      assert.equal(await say('dotted', undefined, 'listed.x'), { status: 'completed' })

      const during = await h.log.runs('listed')
      assert.equal(
        during.map((run) => [run.runId, run.kind, run.sourceRunId ?? null, run.terminal]),
        [
          ['run-one', 'message', null, 'completed'],
          ['run-two', 'continuation', 'run-one', 'completed'],
          ['run-three', 'continuation', 'run-two', null],
        ],
      )
      assert.equal(
        during.map((run) => [run.turnId, run.invocationId]),
        [
          ['turn-one', 'invocation-one'],
          ['turn-two', 'invocation-two'],
          ['turn-three', 'invocation-three'],
        ],
      )
      assert.ok(during.every((run, index) => run.openedSeq <= run.lastSeq && (index === 0 || run.openedSeq > (during[index - 1] as { lastSeq: number }).lastSeq)), 'in seq order')
      release()
      assert.equal(await running.wait(), { status: 'completed' })
      const after = await h.log.runs('listed')
      assert.equal(after.at(-1)?.terminal, 'completed')
      assert.equal(after.at(-1)?.outcome, { status: 'completed' })
      assert.equal((await h.log.runs('listed2')).map((run) => run.runId), ['run-other'])
      assert.equal((await h.log.runs('listed.x')).map((run) => run.runId), ['run-dotted'])
      assert.equal(await h.log.runs('nobody'), [])
      for (const bad of ['', 'a b', 'a!b', 7]) {
        assert.is((await refusal(h.log.runs(bad as string))).code, 'LOG_INVALID_ARGUMENT', String(bad))
      }
    },
  ),
)

test(
  'a next message after a run the provider left half-way: the unfinished step is replayed, then the message',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]), answer.status(400), answer.text('done now')], {}, async (h) => {
    const echo = countingTool('echo')
    const broken: RunInput = { ...h.input('broken', { session: 'half', tools: [echo] }) }
    const outcome = await h.run(broken)
    assert.is(outcome.status, 'failed')
    const source = (await h.log.runSource('half', 'run-broken'))?.boundary
    assert.ok(source)
    const next: RunInput = { ...h.input('next', { session: 'half', tools: [echo] }), work: { kind: 'continuation', source, content: 'try again, please' } }
    assert.equal(await h.run(next), { status: 'completed' })
    assert.equal(
      messagesOf(h.server.requests[2]?.body).map((message) => message.role),
      ['user', 'assistant', 'tool', 'user'],
    )
    assert.is(echo.calls.length, 1)
  }),
)

test(
  'a seal inside a turn that carried a new message: the successor sends that message, byte for byte what the sealed run would have sent',
  engineTest([answer.text('first answer'), answer.text('successor answer')], {}, async (h) => {
    const asked: RunInput = h.input('asked', { session: 'sealed-chat' })
    assert.equal(await h.run(asked), { status: 'completed' })
    const source = (await h.log.runSource('sealed-chat', 'run-asked'))?.boundary
    assert.ok(source)
    const paused: RunInput = { ...h.input('paused', { session: 'sealed-chat' }), work: { kind: 'continuation', source, content: 'one more thing' } }
    const sealed = await sealAtFirstSafePoint(h, paused, 'successor')
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
    assert.equal(
      messagesOf(h.server.requests[1]?.body).map((message) => [message.role, message.content]),
      [
        ['user', 'question asked'],
        ['assistant', 'first answer'],
        ['user', 'one more thing'],
      ],
    )
  }),
)

test(
  'a continuation message that is empty or not a string is RUN_INVALID_INPUT naming work.content, and nothing is written',
  engineTest([answer.text('done')], {}, async (h) => {
    assert.equal(await h.run(h.input('base', { session: 'bad' })), { status: 'completed' })
    const source = (await h.log.runSource('bad', 'run-base'))?.boundary
    assert.ok(source)
    for (const content of ['', 7]) {
      const input = { ...h.input('next', { session: 'bad' }), work: { kind: 'continuation', source, content } } as unknown as RunInput
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_INVALID_INPUT', `content ${JSON.stringify(content)}`)
      assert.equal(error.details?.fields, ['work.content'])
    }
    assert.is(h.server.requests.length, 1)
  }),
)

test.run()
