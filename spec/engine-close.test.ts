/**
 * `engine.close({ cancel?, signal? })`: from its call the engine admits no new run (`ENGINE_CLOSED`,
 * nothing written), a start called before it but not yet written included; it resolves once every
 * run it had has ended (held ones too), cancels them with `cancel`, gives up waiting on `signal`,
 * is one close however often it is called, and leaves the log open. A child run started by a tool of
 * a run the engine still runs is that run's work: admitted, and cancelled with it. `drain({ signal })`.
 */
import { isDeepStrictEqual } from 'node:util'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type RunningInvocation, childRunFor } from '../index.js'
import { readmeBlock, repoModuleParts } from './support/readme.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { countingTool, engineTest, factsOf, intentOf, lastFactOf, markOf, refusedWithoutWriting, stillPending } from './support/engine-fixtures.js'

/** What a run's question asks the scripted model for: `hang` never answers, anything else is answered `done`. */
const byContent = (request: { body: { messages: unknown[] } }) => {
  const first = request.body.messages.find((message) => (message as { role?: string }).role === 'user') as { content?: string } | undefined
  return String(first?.content ?? '').includes('hang') ? answer.hang() : answer.text('done')
}

test(
  'after close(), start(), run() and check() are refused ENGINE_CLOSED with nothing written; the log stays open, and another engine on it admits runs',
  engineTest([answer.text('before'), answer.text('after')], {}, async (h) => {
    assert.equal(await h.run(h.input('before')), { status: 'completed' })
    await h.engine.close() // nothing in flight: resolves at once
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('late')), 'ENGINE_CLOSED', 'start after close')
    assert.equal(refused.details, { call: 'start', invocationId: 'invocation-late' })
    assert.match(refused.message, /^ENGINE_CLOSED: engine\.start: the engine is closed/)
    await refusedWithoutWriting(h.log, () => h.engine.run(h.input('late-run')), 'ENGINE_CLOSED', 'run after close')
    const checked = await refusedWithoutWriting(h.log, () => h.engine.check(h.input('late-check')), 'ENGINE_CLOSED', 'check after close')
    assert.equal(checked.details, { call: 'check', invocationId: 'invocation-late-check' })
    // Before the input is read: what is not a run input is refused as closed too, naming no id.
    const unread = await refusedWithoutWriting(h.log, () => h.engine.start({} as never), 'ENGINE_CLOSED', 'a bad input after close')
    assert.equal(unread.details, { call: 'start' })
    assert.equal(h.engine.inFlight(), [])
    assert.is(h.engine.running('invocation-late'), undefined)
    assert.is(h.server.requests.length, 1, 'no request for a refused run')
    // The log is not closed: a new engine on it (a pool's next engine for the tenant) admits runs.
    const next = new Engine({ log: h.log })
    assert.equal(await (await next.start(h.input('after'))).wait(), { status: 'completed' })
    await next.close()
  }),
)

test(
  'a start called before close() but not yet written is refused ENGINE_CLOSED, nothing written; one already admitted is waited for',
  engineTest([answer.text('admitted', { hold: true })], {}, async (h) => {
    const admitted = await h.start(h.input('admitted'))
    await h.server.seen(0)
    const before = await markOf(h.log)
    const racing = h.engine.start(h.input('racing')) // called first, its admission not yet written
    const closing = h.engine.close()
    await rejectsWithCode(() => racing, 'ENGINE_CLOSED', 'the start called just before close()')
    assert.equal(await markOf(h.log), before, 'nothing written for it')
    assert.equal(await factsOf(h.log, 'invocation-racing'), [])
    assert.ok(await stillPending(closing, 50), 'close() waits for the admitted run')
    assert.equal(h.engine.inFlight(), ['invocation-admitted'])
    h.server.release(0)
    await closing
    assert.equal(await admitted.wait(), { status: 'completed' })
    assert.equal(h.engine.inFlight(), [])
  }),
)

test(
  'close() without cancel lets a run in flight complete; close({ cancel }) ends one cancelled{reason}, its request interrupted',
  engineTest(byContent, {}, async (h) => {
    const server = h.server
    // Without cancel: the run answers as it would have.
    const finishing = await h.start(h.input('finishing', { content: 'answer' }))
    const closing = h.engine.close()
    await closing
    assert.equal(await finishing.wait(), { status: 'completed' })
    assert.equal(await lastFactOf(h.log, 'invocation-finishing'), { type: 'invocation.ended', outcome: { status: 'completed' } })

    // With cancel, on a second engine of the same log: a request that never answers is cut short.
    const engine = new Engine({ log: h.log })
    const hanging = await engine.start(h.input('hanging', { content: 'hang' }))
    await server.seen(1)
    await engine.close({ cancel: 'tenant-evicted' })
    assert.equal(engine.inFlight(), [], 'every run it had has ended when close() resolves')
    assert.equal(await hanging.wait(), { status: 'cancelled', source: 'tenant-evicted' })
    const facts = await factsOf(h.log, 'invocation-hanging')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    assert.equal((facts[2] as { status?: string }).status, 'cancelled')
    assert.equal(facts[3], { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'tenant-evicted' } })
  }),
)

test(
  'a held run keeps close() waiting; its signal gives up (rejects with the reason, the engine stays closed); release() lets the run complete and close() resolve',
  engineTest([answer.text('after the hold')], {}, async (h) => {
    const held = await h.start(h.input('held'))
    const hold = await held.handoff().reserve(intentOf('held-next', held.invocation.runId)).ready()
    const closing = h.engine.close()
    const giveUp = new AbortController()
    const bounded = h.engine.close({ signal: giveUp.signal })
    const drained = h.engine.drain({ signal: giveUp.signal })
    assert.ok(await stillPending(closing, 50), 'close() waits while the run is held')
    giveUp.abort('gave up')
    for (const waiting of [bounded, drained]) {
      await waiting.then(
        () => assert.unreachable('the wait was given up'),
        (reason: unknown) => assert.is(reason, 'gave up', 'rejects with the signal reason'),
      )
    }
    assert.equal(h.engine.inFlight(), ['invocation-held'], 'giving up cancels nothing')
    await rejectsWithCode(() => h.engine.start(h.input('late')), 'ENGINE_CLOSED', 'still closed after giving up')
    // An already aborted signal rejects at once, the close still made.
    await h.engine.close({ signal: AbortSignal.abort('already') }).then(
      () => assert.unreachable('an aborted signal'),
      (reason: unknown) => assert.is(reason, 'already'),
    )
    await hold.release()
    await closing
    assert.equal(await held.wait(), { status: 'completed' })
    assert.equal(
      (await factsOf(h.log, 'invocation-held')).map((fact) => fact.type),
      ['invocation.opened', 'hold.entered', 'hold.released', 'model.requested', 'model.completed', 'invocation.ended'],
    )
  }),
)

test(
  'close({ cancel }) ends a held run cancelled (its decision refused HANDOFF_NOT_HELD), and seals one whose reservation asked for sealOnCancel',
  engineTest([], {}, async (h) => {
    const plain = await h.start(h.input('plain'))
    const plainHold = await plain.handoff().reserve(intentOf('plain-next', plain.invocation.runId)).ready()
    const sealing = await h.start(h.input('sealing'))
    const sealingHold = await sealing.handoff().reserve(intentOf('sealing-next', sealing.invocation.runId), { sealOnCancel: true }).ready()
    await h.engine.close({ cancel: 'shutdown' })
    assert.equal(h.engine.inFlight(), [])
    assert.equal(await plain.wait(), { status: 'cancelled', source: 'shutdown' })
    await rejectsWithCode(() => plainHold.commit(), 'HANDOFF_NOT_HELD', 'the ended hold')
    assert.equal(
      (await factsOf(h.log, 'invocation-plain')).map((fact) => fact.type),
      ['invocation.opened', 'hold.entered', 'invocation.ended'],
      'no rollback fact: the hold ends with the run',
    )
    const pause = sealingHold.preview()
    assert.equal(await sealing.wait(), { status: 'handoff_paused', pause })
    assert.equal(await sealingHold.commit(), pause, "the cancel's seal")
    assert.equal(await lastFactOf(h.log, 'invocation-sealing'), { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } })
    assert.is(h.server.requests.length, 0)
  }),
)

test(
  'a close racing many starts: each start is either admitted and ended before close() resolved, or refused ENGINE_CLOSED with nothing written',
  engineTest(byContent, { ms: 20_000 }, async (h) => {
    for (const cancel of [undefined, 'shutdown']) {
      const engine = new Engine({ log: h.log })
      const name = (i: number) => `${cancel ?? 'plain'}-${i}`
      const starts: Promise<RunningInvocation>[] = []
      // Some admitted first, some called in the same turn as the close, the rest spread over the turns around it.
      for (let i = 0; i < 4; i += 1) starts.push(Promise.resolve(await engine.start(h.input(name(i), { content: i % 2 === 0 ? 'hang' : 'answer' }))))
      let closing: Promise<void> | undefined
      for (let i = 4; i < 40; i += 1) {
        const started = engine.start(h.input(name(i), { content: 'answer' }))
        started.catch(() => undefined) // read below, once all are settled
        starts.push(started)
        // Called in the same turn as start 20, after it: the starts before it are being admitted, some written, some not.
        if (i === 20) closing = engine.close(cancel === undefined ? {} : { cancel })
        if (i % 3 === 0) await new Promise((resolve) => setImmediate(resolve))
      }
      // The hanging runs (0 and 2) end only when cancelled: without cancel, a second close cancels them.
      if (cancel === undefined) {
        assert.ok(await stillPending(closing as Promise<void>, 50), 'close() waits for the hanging runs')
        void engine.close({ cancel: 'later' })
      }
      await closing
      assert.equal(engine.inFlight(), [], 'none left running')
      const settled = await Promise.allSettled(starts)
      let admitted = 0
      let refused = 0
      for (const [i, result] of settled.entries()) {
        const facts = await factsOf(h.log, `invocation-${name(i)}`)
        if (result.status === 'fulfilled') {
          admitted += 1
          assert.is(facts.at(-1)?.type, 'invocation.ended', `${name(i)}: admitted, and ended before close() resolved`)
          const outcome = await result.value.wait()
          if (i === 0 || i === 2) assert.equal(outcome, { status: 'cancelled', source: cancel ?? 'later' })
          else assert.ok(outcome.status === 'completed' || isDeepStrictEqual(outcome, { status: 'cancelled', source: cancel ?? 'later' }), `${name(i)}: ${JSON.stringify(outcome)}`)
        } else {
          refused += 1
          assert.is((result.reason as { code?: string }).code, 'ENGINE_CLOSED', `${name(i)}: ${String(result.reason)}`)
          assert.equal(facts, [], `${name(i)}: refused, nothing written`)
        }
      }
      assert.ok(admitted >= 4 && refused >= 5, `both kinds: ${admitted} admitted, ${refused} refused`)
      assert.is(settled.filter((result, i) => i >= 20 && result.status === 'fulfilled').length, 0, 'a start called in the same turn as close(), before it, is refused, and every one after it')
    }
  }),
)

test(
  'close() is one close: the same promise again, resolved once done; a later cancel reaches the runs still in flight; bad options are ENGINE_INVALID_OPTIONS and close nothing',
  engineTest(byContent, {}, async (h) => {
    for (const [options, field] of [
      [{ cancel: 42 }, 'cancel'],
      [{ cancel: '' }, 'cancel'],
      [{ signal: 'soon' }, 'signal'],
      [{ cancle: 'x' }, 'cancle'],
      ['shutdown', 'options'],
    ] as const) {
      const error = await rejectsWithCode(() => h.engine.close(options as never), 'ENGINE_INVALID_OPTIONS', `close(${JSON.stringify(options)})`)
      assert.is(error.details?.field, field)
    }
    await rejectsWithCode(() => h.engine.drain({ cancel: 'x' } as never), 'ENGINE_INVALID_OPTIONS', 'drain takes no cancel')
    const running = await h.start(h.input('running', { content: 'hang' }))
    await h.server.seen(0)
    const first = h.engine.close()
    assert.is(h.engine.close(), first, 'a second close without a signal is the same promise')
    assert.ok(await stillPending(first, 50))
    await h.engine.close({ cancel: 'second-close' })
    await first
    assert.equal(await running.wait(), { status: 'cancelled', source: 'second-close' })
    assert.is(h.engine.close(), first, 'and after it resolved')
    await h.engine.close({ cancel: 'third' })
    assert.equal(await lastFactOf(h.log, 'invocation-running'), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'second-close' } }, 'nothing more written')
  }),
)

test(
  "a child run started by a run's tool after close() is admitted (that run's work), and with cancel is cancelled as it opens; another start is refused",
  engineTest(
    (request) => {
      const first = request.body.messages.find((message) => (message as { role?: string }).role === 'user') as { content?: string } | undefined
      const task = String(first?.content ?? '')
      if (task.startsWith('write')) return answer.text('the draft')
      const toolResults = request.body.messages.filter((message) => (message as { role?: string }).role === 'tool').length
      return toolResults === 0 ? answer.toolCalls([{ name: 'delegate', arguments: { task: 'write it' } }]) : answer.text('supervised')
    },
    {},
    async (h) => {
      for (const cancel of [undefined, 'shutdown']) {
        const engine = new Engine({ log: h.log })
        let closing: Promise<void> | undefined
        let outsider: Promise<unknown> | undefined
        const delegate = countingTool('delegate', async (_input, context) => {
          closing = engine.close(cancel === undefined ? {} : { cancel })
          outsider = engine.start(h.input(`outsider-${cancel ?? 'plain'}`)).then(
            () => 'admitted',
            (error: { code?: string }) => error.code,
          )
          // Without the run's signal: the close's own cancel is what reaches the child.
          const child = await engine.start({ ...h.input('child'), ...childRunFor(context, 'writer'), work: { kind: 'message', content: 'write it' } })
          const outcome = await child.wait()
          return { status: outcome.status }
        })
        const supervisor = await engine.start({ ...h.input(`supervisor-${cancel ?? 'plain'}`, { tools: [delegate] }) })
        const outcome = await supervisor.wait()
        await closing
        assert.is(await outsider, 'ENGINE_CLOSED', 'a start that is no child of a running run is refused')
        const dispatched = (await factsOf(h.log, supervisor.invocation.invocationId)).find((fact) => fact.type === 'tool.dispatched') as { operationId: string }
        const [child] = await h.log.childRuns(dispatched.operationId)
        assert.ok(child, 'the child was admitted')
        const childFacts = await factsOf(h.log, child.invocationId)
        if (cancel === undefined) {
          assert.equal(outcome, { status: 'completed' })
          assert.equal(childFacts.at(-1), { type: 'invocation.ended', outcome: { status: 'completed' } })
        } else {
          assert.equal(outcome, { status: 'cancelled', source: 'shutdown' }, 'nothing uncertain: the delegate returned')
          assert.equal(
            childFacts.map((fact) => fact.type),
            ['invocation.opened', 'invocation.ended'],
            'cancelled as it opened, no model request',
          )
          assert.equal(childFacts.at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'shutdown' } })
        }
        assert.equal(engine.inFlight(), [])
      }
    },
  ),
)

test(
  "after close(), a start naming a running run as its parent is refused ENGINE_CLOSED unless that parent operation is a tool call the run has in flight: a parent named by a request handler, not a tool, starts nothing",
  engineTest([answer.text('held', { hold: true })], {}, async (h) => {
    const running = await h.start(h.input('running'))
    await h.server.seen(0)
    const closing = h.engine.close()
    const { invocation } = running
    // The ids a tool of the run would pass on (childRunFor), but no tool of it runs: its model request does.
    for (const operationId of [`${invocation.invocationId}/step-1/0`, `${invocation.invocationId}/step-9/0`]) {
      const refused = await refusedWithoutWriting(
        h.log,
        () => h.engine.start({ ...h.input(`posing-${operationId.length}`), parent: { invocation: { ...invocation }, operationId } }),
        'ENGINE_CLOSED',
        `a child of ${operationId}`,
      )
      assert.equal(refused.details, { call: 'start', invocationId: `invocation-posing-${operationId.length}` })
      await rejectsWithCode(() => h.engine.check({ ...h.input(`posing-${operationId.length}`), parent: { invocation: { ...invocation }, operationId } }), 'ENGINE_CLOSED', 'check too')
    }
    assert.equal(h.engine.inFlight(), ['invocation-running'])
    h.server.release(0)
    await closing
    assert.equal(await running.wait(), { status: 'completed' })
  }),
)

test(
  "the README's closeTenant, as written: a tenant's runs cancelled (a held one sealed by its sealOnCancel), its log closed, nothing left",
  engineTest(byContent, {}, async (h) => {
    const block = await readmeBlock('async function closeTenant', "one closeTenant in the README's pool of logs", { from: '### Running a log in production', until: '### OpenTelemetry' })
    const { imports, lines } = repoModuleParts(block)
    // The pool's module as written (its types stripped by tsx), closeTenant exported.
    const file = join(h.dir, 'close-tenant.mts')
    await writeFile(file, `${imports}\n${lines.join('\n')}\nexport { closeTenant }\n`)
    type CloseTenant = (tenant: { engine: Engine; log: EventLog }, options?: { cancel?: string; signal?: AbortSignal }) => Promise<string[]>
    const { closeTenant } = (await import(pathToFileURL(file).href)) as { closeTenant: CloseTenant }
    const engine = new Engine({ log: h.log })
    const hanging = await engine.start(h.input('tenant-hanging', { content: 'hang' }))
    const held = await engine.start(h.input('tenant-held', { content: 'answer' }))
    const hold = await held.handoff().reserve(intentOf('tenant-review', held.invocation.runId), { sealOnCancel: true }).ready()
    await h.server.seen(0)
    assert.equal(await closeTenant({ engine, log: h.log }, { cancel: 'evicted', signal: AbortSignal.timeout(5_000) }), [], 'nothing left running')
    assert.equal(await hanging.wait(), { status: 'cancelled', source: 'evicted' })
    assert.equal(await held.wait(), { status: 'handoff_paused', pause: hold.preview() })
    await rejectsWithCode(async () => h.log.head(), 'LOG_CLOSED', 'the log is closed after the engine')
    await rejectsWithCode(() => engine.start(h.input('tenant-late')), 'ENGINE_CLOSED', 'a start on the evicted engine')
    h.log = await EventLog.open(h.logPath) // for the harness's end-of-test checks
    h.runs.length = 0
  }),
)

test.run()
