/**
 * Many invocations in one engine (DESIGN §5): sessions run concurrently with correct facts each,
 * concurrent admissions in one session admit exactly one run, and with an injected clock two
 * identical runs in two fresh logs give identical digests.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type FactstateErrorOf, ModelExecutor, type RunningInvocation, recoverInvocations } from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { assertConsistent, countingTool, engineTest, factsOf, markOf, only, runInput, typesOf } from './support/engine-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

type Message = { role: string; content: string }

const SESSIONS = 50

test(
  `${SESSIONS} sessions run concurrently in one engine, each with its own correct facts`,
  engineTest(
    (request) => {
      const messages = (request.body as { messages: Message[] }).messages
      const n = Number(messages[0]?.content.split(' ')[1])
      return messages.at(-1)?.role === 'tool' ? answer.text(`done ${n}`) : answer.toolCalls([{ id: `call-${n}`, name: 'echo', arguments: { value: n } }])
    },
    { ms: 30_000 },
    async (h) => {
      const echo = countingTool()
      const runs = await Promise.all(
        Array.from({ length: SESSIONS }, (_, n) => h.start(h.input(`s${n}`, { tools: [echo], content: `question ${n}` }))),
      )
      const outcomes = await Promise.all(runs.map((run) => run.wait()))
      assert.equal(outcomes, Array.from({ length: SESSIONS }, () => ({ status: 'completed' })))
      await h.engine.drain()
      assert.is(echo.calls.length, SESSIONS, 'each call executed exactly once')
      assert.is(h.server.requests.length, SESSIONS * 2)
      for (let n = 0; n < SESSIONS; n += 1) {
        const facts = await factsOf(h.log, `invocation-s${n}`)
        assert.equal(
          facts.map((f) => f.type),
          ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'model.requested', 'model.completed', 'invocation.ended'],
          `session ${n}`,
        )
        assert.equal(only(facts, 'tool.dispatched')[0]?.input, { value: n })
        assert.equal(only(facts, 'tool.settled')[0]?.outcome, { status: 'succeeded', output: { value: n } })
        assert.is(only(facts, 'model.completed')[1]?.output.text, `done ${n}`)
      }
    },
  ),
)

test(
  'two starts at once in one session: exactly one is admitted, the other is RUN_BUSY and writes nothing',
  engineTest([answer.text('one', { hold: true }), answer.text('two', { hold: true })], {}, async (h) => {
    const before = await markOf(h.log)
    const attempts = await Promise.allSettled([h.start(h.input('left', { session: 'shared' })), h.start(h.input('right', { session: 'shared' }))])
    const admitted = attempts.filter((a): a is PromiseFulfilledResult<RunningInvocation> => a.status === 'fulfilled')
    const refused = attempts.filter((a): a is PromiseRejectedResult => a.status === 'rejected')
    assert.is(admitted.length, 1)
    assert.equal(
      refused.map((a) => (a.reason as { code?: string }).code),
      ['RUN_BUSY'],
    )
    await h.server.seen(0)
    const winner = admitted[0]?.value.invocation.invocationId
    const loser = winner === 'invocation-left' ? 'invocation-right' : 'invocation-left'
    assert.equal(await factsOf(h.log, loser), [], 'the refused start wrote nothing')
    assert.equal(await typesOf(h.log, winner ?? ''), ['invocation.opened', 'model.requested'])
    assert.is((await markOf(h.log)).highWater, before.highWater + 2)
    h.server.release(0)
    assert.equal(await admitted[0]?.value.wait(), { status: 'completed' })
  }),
)

test(
  'the same input started twice at once: one run, and the refused start does not expose the admitted one to recovery',
  engineTest([answer.text('once', { hold: true })], {}, async (h) => {
    const input = h.input('twice')
    const attempts = await Promise.allSettled([h.start(input), h.start(input)])
    const admitted = attempts.filter((a): a is PromiseFulfilledResult<RunningInvocation> => a.status === 'fulfilled')
    assert.is(admitted.length, 1)
    // The second names the run the first opened: a refusal that waiting would not cure (ids used)
    // comes before one it would (the session is busy), as when the two are started one after the other.
    const refused = attempts.filter((a) => a.status === 'rejected').map((a) => a.reason as { code?: string; details?: { fields?: string[] } })
    assert.equal(refused.map((error) => error.code), ['RUN_INVALID_INPUT'])
    assert.equal(refused[0]?.details?.fields, ['invocation.invocationId', 'invocation.runId'], 'both reused ids are named, as one after the other')
    await h.server.seen(0)
    assert.is(await recoverInvocations(h.log), 0, 'a live invocation is left alone by recovery')
    h.server.release(0)
    assert.equal(await admitted[0]?.value.wait(), { status: 'completed' })
    assert.equal(
      (await factsOf(h.log, 'invocation-twice')).map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'],
    )
  }),
)

/** The error `start` rejects with (it must reject). */
const refusal = (starting: Promise<unknown>, what: string): Promise<FactstateErrorOf<'RUN_INVALID_INPUT'>> =>
  starting.then(
    () => {
      throw new Error(`${what} must be refused`)
    },
    (error: unknown) => error as FactstateErrorOf<'RUN_INVALID_INPUT'>,
  )

test(
  'a start retried after its reply was lost: refused as exists, with the ids the log holds, and engine.running gives the run it started until it ends',
  engineTest([answer.text('once', { hold: true })], {}, async (h) => {
    const input = h.input('retried')
    const first = await h.start(input)
    await h.server.seen(0)
    const again = await refusal(h.engine.start(input), 'the same input started again')
    assert.is(again.code, 'RUN_INVALID_INPUT')
    assert.is(again.details.reason, 'exists', 'told apart from a bad input')
    assert.equal(again.details.existing, input.invocation, 'the ids the log holds, turn included')
    assert.match(again.message, /engine\.running\(invocationId\)/, 'the message says how to find the run')
    const attached = h.engine.running(input.invocation.invocationId)
    assert.ok(attached, 'the run this engine is running')
    assert.equal(attached.invocation, input.invocation)
    assert.is(attached.state(), first.state())
    assert.is.not(attached, h.engine.running(input.invocation.invocationId), 'each call gives a handle of its own')
    assert.is(h.engine.running('invocation-never-started'), undefined)
    // Another session's ids taken by a different run: the refusal names the run that holds them.
    const taken = h.input('other', { session: 'session-other' })
    taken.invocation.invocationId = input.invocation.invocationId
    const usedElsewhere = await refusal(h.engine.start(taken), 'an invocation id already used')
    assert.equal([usedElsewhere.details.reason, usedElsewhere.details.fields], ['exists', ['invocation.invocationId']])
    assert.equal(usedElsewhere.details.existing, input.invocation)
    const bad = (() => {
      try {
        h.engine.running('not an id')
      } catch (error) {
        return error as FactstateErrorOf<'RUN_INVALID_INPUT'>
      }
      return undefined
    })()
    assert.is(bad?.code, 'RUN_INVALID_INPUT')
    assert.is(bad?.details.field, 'invocationId')
    h.server.release(0)
    const outcome = await attached.wait()
    assert.equal(outcome, { status: 'completed' })
    assert.equal(await first.wait(), outcome, 'both handles see the one run end')
    assert.is(h.engine.running(input.invocation.invocationId), undefined, 'an ended run is no longer running: log.runs says how it went')
    assert.is(h.server.requests.length, 1, 'the retried start reached no model')
  }),
)

test(
  'a start retried before the first one resolved: refused as exists only once the first is admitted, so engine.running gives its handle then',
  engineTest([answer.text('once', { hold: true })], {}, async (h) => {
    const input = h.input('hasty')
    const first = h.start(input)
    const retried = await refusal(h.engine.start(input), 'the retry')
    assert.is(retried.details.reason, 'exists')
    const attached = h.engine.running(input.invocation.invocationId)
    assert.ok(attached, 'the run the first start admitted, at the moment the retry is refused')
    await h.server.seen(0)
    h.server.release(0)
    assert.equal(await attached.wait(), { status: 'completed' })
    assert.equal(await (await first).wait(), { status: 'completed' })
  }),
)

test(
  'a start retried after its run ended with an outcome to acknowledge is told it exists, not asked to reconcile its own run',
  engineTest([answer.toolCalls([{ id: 'call-charge', name: 'charge', arguments: {} }])], {}, async (h) => {
    // A tool with effects that throws once its time limit aborted it: its outcome is unknown.
    const charge = {
      name: 'charge',
      timeoutMs: 20,
      execute: (_input: unknown, context: { signal: AbortSignal }) =>
        new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason), { once: true })),
    }
    const input = h.input('charged', { tools: [charge] })
    const outcome = await h.run(input)
    assert.is(outcome.status === 'failed' ? outcome.class : outcome.status, 'outcome_unknown')
    const retried = await refusal(h.engine.start(input), 'the retry')
    assert.equal([retried.code, retried.details.reason], ['RUN_INVALID_INPUT', 'exists'], retried.message)
    assert.is(h.engine.running(input.invocation.invocationId), undefined, 'it ended: log.runs says how')
  }),
)

test(
  'two starts of one run and invocation at once, in different turns: the refused one names the ids the log holds, the admitted turn',
  engineTest([answer.text('once', { hold: true })], {}, async (h) => {
    const first = h.input('twin')
    const second = h.input('twin')
    second.invocation.turnId = 'turn-other'
    const attempts = await Promise.allSettled([h.start(first), h.start(second)])
    const admitted = attempts.flatMap((attempt) => (attempt.status === 'fulfilled' ? [attempt.value] : []))
    const refused = attempts.flatMap((attempt) => (attempt.status === 'rejected' ? [attempt.reason as FactstateErrorOf<'RUN_INVALID_INPUT'>] : []))
    assert.is(admitted.length, 1)
    assert.equal(refused.map((error) => [error.code, error.details.reason]), [['RUN_INVALID_INPUT', 'exists']])
    assert.equal(refused[0]?.details.existing, admitted[0]?.invocation, 'the turn the log holds, not the refused start\'s')
    assert.ok(h.engine.running(first.invocation.invocationId), 'once refused as exists, the run admitted meanwhile is running here')
    await h.server.seen(0)
    h.server.release(0)
    assert.equal(await admitted[0]?.wait(), { status: 'completed' })
  }),
)

test('deterministic ids and clock: two identical runs in two fresh logs give identical digests', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const digests: { highWater: number; digest: string }[] = []
      for (const name of ['one', 'two']) {
        const server = await scriptedModelServer([
          answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 1 } }]),
          answer.toolCalls([{ id: 'call-2', name: 'missing', arguments: {} }]),
          answer.status(503),
          answer.text('done'),
        ])
        const log = await EventLog.open(join(dir, name))
        try {
          let tick = 0
          const engine = new Engine({ log, model: new ModelExecutor({ backoffMs: 1, maxBackoffMs: 2 }), now: () => 1_700_000_000_000 + tick++ })
          const running = await engine.start(runInput(server.baseUrl, 'same'))
          assert.equal(await running.wait(), { status: 'completed' })
          await assertConsistent(log, [running])
          digests.push(await markOf(log))
        } finally {
          await log.close()
          await server.close()
        }
      }
      assert.ok(digests[0] && digests[0].highWater > 10)
      assert.equal(digests[1], digests[0])
    }),
    10_000,
  ))

test.run()
