/**
 * `engine.inFlight()`: the invocation ids of the runs this engine is running now, held ones
 * included, so a shutdown that stopped waiting for `drain()` can say what it left running.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { answer } from '../testing/scripted-model-server.js'
import { engineTest, intentOf, stillPending } from './support/engine-fixtures.js'

test(
  'inFlight() lists the runs running now (one waiting for its model, one held at a safe point), a copy, and none once they ended',
  engineTest(
    (request) => {
      const last = request.body.messages.at(-1) as { content?: string } | undefined
      return String(last?.content ?? '').includes('hang') ? answer.hang() : answer.text('done')
    },
    { ms: 20_000 },
    async (h) => {
      assert.equal(h.engine.inFlight(), [], 'an engine that runs nothing')
      assert.equal(await h.run(h.input('quick', { content: 'answer' })), { status: 'completed' })
      assert.equal(h.engine.inFlight(), [], 'an ended run is not in flight')

      const stop = new AbortController()
      const waiting = await h.start(h.input('waiting', { content: 'hang' }), { signal: stop.signal })
      const held = await h.start(h.input('held', { content: 'answer' }))
      const reservation = held.handoff().reserve(intentOf('held-next', held.invocation.runId))
      const hold = await reservation.ready()
      await h.server.seen(1)
      const listed = h.engine.inFlight()
      assert.equal(listed, ['invocation-waiting', 'invocation-held'], 'in the order they were admitted, the held run included')
      listed.pop()
      assert.equal(h.engine.inFlight(), ['invocation-waiting', 'invocation-held'], 'a copy: changing it changes nothing')

      // A shutdown by one signal, then drain (bounded); what is left is what inFlight() names (engine.close, the README's recipe now: spec/engine-close.test.ts).
      stop.abort('shutdown')
      assert.equal(await waiting.wait(), { status: 'cancelled', source: 'shutdown' })
      assert.ok(await stillPending(h.engine.drain(), 100), 'the held run keeps drain() waiting')
      assert.equal(h.engine.inFlight(), ['invocation-held'], 'the cancelled run ended; the held one waits for its decision')
      await hold.release()
      assert.equal(await held.wait(), { status: 'completed' })
      assert.equal(h.engine.inFlight(), [])
    },
  ),
)

test(
  'inFlight() lists the runs being admitted too, after the running ones, in the order their start() was called: each one running(id) gives a handle for; a refused start leaves it',
  engineTest([answer.text('late', { hold: true }), answer.text('one'), answer.text('two')], {}, async (h) => {
    const running = await h.start(h.input('running', { session: 'shared' }))
    await h.server.seen(0)
    const one = h.start(h.input('one'))
    const busy = h.engine.start(h.input('busy', { session: 'shared' }))
    const two = h.start(h.input('two'))
    const listed = h.engine.inFlight()
    assert.equal(listed, ['invocation-running', 'invocation-one', 'invocation-busy', 'invocation-two'])
    assert.ok(
      listed.every((id) => h.engine.running(id) !== undefined),
      'running(id) gives a handle for each',
    )
    await busy.then(
      () => assert.unreachable('a second run of the shared session is refused'),
      (error: { code?: string }) => assert.is(error.code, 'RUN_BUSY'),
    )
    await Promise.all([one, two])
    assert.equal(h.engine.inFlight().filter((id) => id !== 'invocation-one' && id !== 'invocation-two'), ['invocation-running'], 'the refused start is gone')
    assert.equal(await (await one).wait(), { status: 'completed' })
    assert.equal(await (await two).wait(), { status: 'completed' })
    h.server.release(0)
    assert.equal(await running.wait(), { status: 'completed' })
    assert.equal(h.engine.inFlight(), [])
  }),
)

test.run()
