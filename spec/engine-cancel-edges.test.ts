/**
 * Cancellation at its edges (found by an adversarial trial): start options that cannot be used are
 * refused before anything is written; an abort reason a fact cannot hold still cancels; an abort
 * that lands while a dispatch is written does not start the tool; and one signal shared by many
 * runs (a shutdown signal given to every start) carries one listener, not one per run.
 */
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { Invocation, StartOptions } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'

test(
  'start options that cannot be used are RUN_INVALID_INPUT naming the option, nothing is written, and the session stays free',
  engineTest([answer.text('done')], {}, async (h) => {
    const throwing = {
      get signal(): AbortSignal {
        throw new Error('getter')
      },
    }
    const cases: [string, unknown, string[] | undefined][] = [
      ['options null', null, ['options']],
      ['options that are a string', 'stop', ['options']],
      ['a signal that is a string', { signal: 'stop' }, ['options.signal']],
      ['a signal that is a plain object', { signal: {} }, ['options.signal']],
      ['an unknown option (a typo of signal)', { signall: new AbortController().signal }, ['options.signall']],
      ['a progress receiver that is no function', { onToolProgress: 'ui' }, ['options.onToolProgress']],
      ['a signal getter that throws', throwing, undefined],
    ]
    for (const [what, options, fields] of cases) {
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), options as StartOptions), 'RUN_INVALID_INPUT', what)
      if (fields) assert.equal(error.details?.fields, fields, what)
    }
    // A misspelt option is told the one meant (as the library's other options are), and one like none is not.
    const misspelt = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), { onAproval: () => ({ approved: true }) } as StartOptions), 'RUN_INVALID_INPUT', 'onAproval')
    assert.equal(misspelt.details?.fields, ['options.onAproval'])
    assert.match(misspelt.message, 'start options have no "onAproval": did you mean onApproval? (only signal, onModelText, onModelReasoning, onToolCallText, onToolProgress, onApproval)')
    const reasoning = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), { onReasoning: () => undefined } as StartOptions), 'RUN_INVALID_INPUT', 'onReasoning')
    assert.match(reasoning.message, 'start options have no "onReasoning": did you mean onModelReasoning?')
    // A word left out of the name (an SDK's onProgress) is a guess at it too.
    for (const key of ['onProgress', 'on_progress', 'onToolProgressUpdate']) {
      const worded = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), { [key]: () => undefined } as StartOptions), 'RUN_INVALID_INPUT', key)
      assert.match(worded.message, `start options have no ${JSON.stringify(key)}: did you mean onToolProgress?`, key)
    }
    // Another library's option (LangGraph's invoke config, the AI SDK's callbacks) is told where the setting is here.
    for (const [key, where] of [
      ['callbacks', 'log.events({ follow: true })'],
      ['onStepFinish', 'onModelText and onToolCallText'],
      ['recursionLimit', "the run input's maxSteps"],
      ['configurable', 'invocation.sessionId'],
      ['abortSignal', 'did you mean signal?'],
      ['heartbeat', 'context.progress(value), which start\'s onToolProgress receives'],
      ['progress', 'context.progress(value)'],
      // A run input's own member given among the options: told it belongs in the run input.
      ['maxSteps', "maxSteps belongs in the run input (engine.start(input, options)'s first argument), not in its options"],
      ['instructions', 'instructions belongs in the run input'],
      ['providerOptions', 'providerOptions belongs in the run input'],
    ] as const) {
      const foreign = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), { [key]: () => undefined } as StartOptions), 'RUN_INVALID_INPUT', key)
      assert.equal(foreign.details?.fields, [`options.${key}`])
      assert.match(foreign.message, `start options have no ${JSON.stringify(key)}: `, key)
      assert.match(foreign.message, where, key)
    }
    const far = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('free'), { deadline: 5 } as StartOptions), 'RUN_INVALID_INPUT', 'deadline')
    assert.not.match(far.message, 'did you mean')
    // Nothing was marked live or opened: the same run is admitted and completes.
    assert.equal(await h.run(h.input('free')), { status: 'completed' })
  }),
)

test(
  'an abort reason with a lone surrogate still cancels, recorded well-formed (a model request in flight, and a signal aborted at start)',
  engineTest([answer.text('late', { hold: true })], {}, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('cut'), { signal: controller.signal })
    await h.server.seen(0)
    controller.abort('user stop 😀'.slice(0, 11))
    assert.equal(await running.wait(), { status: 'cancelled', source: 'user stop \uFFFD' })
    const facts = await factsOf(h.log, 'invocation-cut')
    assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'user stop \uFFFD' } })
    const early = await h.start(h.input('early'), { signal: AbortSignal.abort('\uD800') })
    assert.equal(await early.wait(), { status: 'cancelled', source: '\uFFFD' })
  }),
)

test(
  "a signal that timed out (AbortSignal.timeout) ends the run cancelled by 'timeout', not by a plain 'signal'; a reason whose name cannot be read is a plain abort",
  engineTest([answer.text('late', { hold: true })], {}, async (h) => {
    const running = await h.start(h.input('timed'), { signal: AbortSignal.timeout(30) })
    assert.equal(await running.wait(), { status: 'cancelled', source: 'timeout' })
    assert.equal((await factsOf(h.log, 'invocation-timed')).at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'timeout' } })
    const plain = await h.start(h.input('plain'), { signal: AbortSignal.abort() })
    assert.equal(await plain.wait(), { status: 'cancelled', source: 'signal' })
    const odd = await h.start(h.input('odd'), {
      signal: AbortSignal.abort({
        get name(): string {
          throw new Error('no name')
        },
      }),
    })
    assert.equal(await odd.wait(), { status: 'cancelled', source: 'signal' })
  }),
)

const dispatchAbort = new AbortController()
test(
  'an abort that lands while a dispatch is being recorded does not start the tool: it settles failed as not started, the run ends cancelled',
  engineTest(
    [answer.toolCalls([{ id: 'call-charge', name: 'charge', arguments: {} }, { id: 'call-other', name: 'charge', arguments: {} }]), answer.text('done')],
    {
      engine: {
        // Ordinal 4 is the dispatch (opened, requested, completed, dispatched): the abort lands as it is appended.
        eventId: (invocation: Invocation, ordinal: number) => {
          if (ordinal === 4) dispatchAbort.abort('user-stop')
          return `${invocation.invocationId}/${ordinal}`
        },
      },
    },
    async (h) => {
      const charge = countingTool('charge')
      const running = await h.start(h.input('charge', { tools: [charge] }), { signal: dispatchAbort.signal })
      assert.equal(await running.wait(), { status: 'cancelled', source: 'user-stop' })
      assert.is(charge.calls.length, 0, 'the tool never started')
      const facts = await factsOf(h.log, 'invocation-charge')
      assert.equal(
        facts.map((f) => f.type),
        ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'tool.rejected', 'invocation.ended'],
      )
      assert.equal(only(facts, 'tool.settled')[0]?.outcome, { status: 'failed', message: 'not started: the run was cancelled while its dispatch was being recorded' })
      assert.equal(only(facts, 'tool.rejected')[0]?.reason, 'cancelled')
      // Nothing is uncertain: the session takes the next message.
      assert.equal(await h.run(h.input('next', { session: 'session-charge' })), { status: 'completed' })
    },
  ),
)

test(
  'one signal shared by twelve runs carries one abort listener (no MaxListenersExceededWarning), and none once they end',
  engineTest(
    Array.from({ length: 12 }, () => answer.text('late', { hold: true })),
    {},
    async (h) => {
      const warnings: string[] = []
      const onWarning = (warning: Error) => warnings.push(warning.name)
      process.on('warning', onWarning)
      try {
        const shutdown = new AbortController()
        const runs = await Promise.all(Array.from({ length: 12 }, (_, n) => h.start(h.input(`shared${n}`), { signal: shutdown.signal })))
        await h.server.seen(11)
        assert.is(getEventListeners(shutdown.signal, 'abort').length, 1, 'one listener for all twelve runs')
        shutdown.abort('shutdown')
        for (const running of runs) assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })
        await h.engine.drain()
        assert.is(getEventListeners(shutdown.signal, 'abort').length, 0)
        await new Promise((resolve) => setImmediate(resolve))
        assert.equal(warnings.filter((name) => name === 'MaxListenersExceededWarning'), [])
      } finally {
        process.off('warning', onWarning)
      }
    },
  ),
)

test.run()
