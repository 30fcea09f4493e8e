/**
 * `onlyIfLatest`: a continuation admitted only from the session's last run opened, checked
 * atomically with its admission, else `RUN_SOURCE_STALE` and nothing written. Without it a source
 * read before another message's run opened (two messages at once, a retry after `RUN_BUSY`) makes a
 * branch that silently leaves that run's turn out.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RunBoundary, type RunInput } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { answer } from '../testing/scripted-model-server.js'
import { completeInvocation, refusal } from './support/log-fixtures.js'
import { CWD, countingTool, engineTest, markOf, messagesOf, refusedWithoutWriting, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'

/** The boundary of the session's last run, as a chat backend reads it for the next message. */
async function lastSource(log: EventLog, session: string): Promise<RunBoundary> {
  const last = (await log.runs(session)).at(-1)
  assert.ok(last, `${session} has a run`)
  const source = (await log.runSource(session, last.runId))?.boundary
  assert.ok(source)
  return source
}

test(
  'two messages at once, the second retried after RUN_BUSY with the same work: RUN_SOURCE_STALE naming the latest run, nothing written; read again, it is admitted and sees both turns',
  engineTest([answer.text('one'), answer.toolCalls([{ name: 'gate', arguments: {} }]), answer.text('two'), answer.text('three')], {}, async (h) => {
    let entered: () => void = () => undefined
    const inGate = new Promise<void>((resolve) => (entered = resolve))
    let release: () => void = () => undefined
    const gate = countingTool('gate', async () => {
      entered()
      await new Promise<void>((resolve) => (release = resolve))
      return 'open'
    })
    const input = (name: string, work: RunInput['work']): RunInput => ({ ...h.input(name, { session: 'chat', tools: [gate] }), work })
    assert.equal(await h.run(input('first', { kind: 'message', content: 'hello' })), { status: 'completed' })

    // The double click: both requests read the same last run before either is admitted.
    const [readA, readB] = await Promise.all([lastSource(h.log, 'chat'), lastSource(h.log, 'chat')])
    const workA: RunInput['work'] = { kind: 'continuation', source: readA, content: 'message A', onlyIfLatest: true }
    const workB: RunInput['work'] = { kind: 'continuation', source: readB, content: 'message B', onlyIfLatest: true }
    const a = await h.start(input('a', workA))
    await inGate
    const busy = await refusedWithoutWriting(h.log, () => h.start(input('b', workB)), 'RUN_BUSY', 'B while A runs')
    assert.is(busy.details?.reason, 'active', 'RUN_BUSY keeps precedence while the session has an active run')
    release()
    assert.equal(await a.wait(), { status: 'completed' })

    // The app waited, then retried the same work: its source is run-first, and run-a opened after it.
    const stale = await refusedWithoutWriting(h.log, () => h.start(input('b', workB)), 'RUN_SOURCE_STALE', 'B retried with its old source')
    assert.equal(stale.details, { sessionId: 'chat', sourceRunId: 'run-first', latestRunId: 'run-a', latestInvocationId: 'invocation-a' })
    assert.match(stale.message, /continue the latest run/)
    assert.equal((await h.log.runs('chat')).map((run) => run.runId), ['run-first', 'run-a'])

    const fresh = await lastSource(h.log, 'chat')
    assert.equal(await h.run(input('b', { ...workB, source: fresh })), { status: 'completed' })
    const asked = messagesOf(h.server.requests.at(-1)?.body).filter((message) => message.role === 'user')
    assert.equal(asked.map((message) => message.content), ['hello', 'message A', 'message B'], 'the transcript has both turns')
    const runs = await h.log.runs('chat')
    assert.equal(runs.map((run) => [run.runId, run.sourceRunId ?? null]), [['run-first', null], ['run-a', 'run-first'], ['run-b', 'run-a']])
  }),
)

test(
  'a source with a later run ended after it is stale, whatever the later run is (a continuation, a branch, a new message, a handoff successor); without onlyIfLatest the branch is admitted as before',
  engineTest([answer.text('one'), answer.text('two'), answer.text('branch'), answer.text('fresh'), answer.text('after successor'), answer.text('end')], {}, async (h) => {
    const input = (name: string, work: RunInput['work']): RunInput => ({ ...h.input(name, { session: 'later' }), work })
    const source = async (runId: string) => (await h.log.runSource('later', runId))?.boundary as RunBoundary
    assert.equal(await h.run(input('one', { kind: 'message', content: 'first' })), { status: 'completed' })
    assert.equal(await h.run(input('two', { kind: 'continuation', source: await source('run-one'), content: 'second' })), { status: 'completed' })
    const staleOf = async (name: string, from: string, latest: string) => {
      const work: RunInput['work'] = { kind: 'continuation', source: await source(from), content: `from ${from}`, onlyIfLatest: true }
      const error = await refusedWithoutWriting(h.log, () => h.start(input(name, work)), 'RUN_SOURCE_STALE', `${name} from ${from}`)
      assert.equal(error.details, { sessionId: 'later', sourceRunId: from, latestRunId: `run-${latest}`, latestInvocationId: `invocation-${latest}` })
    }
    await staleOf('x1', 'run-one', 'two')

    // Without the flag, unchanged: continuing an earlier run is a branch, admitted.
    assert.equal(await h.run(input('branch', { kind: 'continuation', source: await source('run-one'), content: 'a branch' })), { status: 'completed' })
    await staleOf('x2', 'run-two', 'branch')
    assert.equal(await h.run(input('fresh', { kind: 'message', content: 'a new message' })), { status: 'completed' })
    await staleOf('x3', 'run-branch', 'fresh')

    // A handoff successor opens in the session too: it is the latest run then.
    const sealed = await sealAtFirstSafePoint(h, input('sealed', { kind: 'continuation', source: await source('run-fresh'), content: 'held', onlyIfLatest: true }), 'succ')
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
    const successor = (await h.log.runs('later')).at(-1)
    assert.ok(successor && successor.kind === 'handoff')
    const error = await refusedWithoutWriting(
      h.log,
      () => h.start(input('x4', { kind: 'continuation', source: sealed.source, content: 'from the sealed run', onlyIfLatest: true })),
      'RUN_SOURCE_STALE',
      'x4 from the sealed run',
    )
    assert.equal(error.details, { sessionId: 'later', sourceRunId: 'run-sealed', latestRunId: successor.runId, latestInvocationId: successor.invocationId })
    assert.equal(await h.run(input('end', { kind: 'continuation', source: await source(successor.runId), content: 'last', onlyIfLatest: true })), { status: 'completed' })
  }),
)

test(
  'after the log is reopened (nothing in memory: the run index is read), and with the in-memory map trimmed, a stale source is still refused and the latest admitted',
  engineTest([answer.text('one'), answer.text('two'), answer.text('elsewhere 1'), answer.text('elsewhere 2'), answer.text('three')], {}, async (h) => {
    const input = (name: string, work: RunInput['work'], session = 'reopened'): RunInput => ({ ...h.input(name, { session }), work })
    assert.equal(await h.run(input('one', { kind: 'message', content: 'first' })), { status: 'completed' })
    const one = (await h.log.runSource('reopened', 'run-one'))?.boundary as RunBoundary
    assert.equal(await h.run(input('two', { kind: 'continuation', source: one, content: 'second' })), { status: 'completed' })
    const two = (await h.log.runSource('reopened', 'run-two'))?.boundary as RunBoundary
    await h.engine.drain()
    await h.log.close()
    h.log = await EventLog.open(h.logPath)
    const engine = new Engine({ log: h.log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
    const internals = logInternals(h.log)
    assert.equal(internals.latestRunCache(), { sessions: 0, evictions: 0 }, 'a log just opened holds no latest run')
    const stale = await refusedWithoutWriting(
      h.log,
      () => engine.start(input('x1', { kind: 'continuation', source: one, content: 'stale', onlyIfLatest: true })),
      'RUN_SOURCE_STALE',
      'from run-one after the reopen',
    )
    assert.equal(stale.details, { sessionId: 'reopened', sourceRunId: 'run-one', latestRunId: 'run-two', latestInvocationId: 'invocation-two' })

    // Trimmed: other sessions' runs push this one's entry out; it is read from the index again.
    internals.setLatestRunLimit(1)
    for (const name of ['elsewhere-1', 'elsewhere-2']) {
      assert.equal(await (await engine.start(input(name, { kind: 'message', content: name }, name))).wait(), { status: 'completed' })
    }
    assert.ok(internals.latestRunCache().evictions > 0, 'the map was trimmed')
    await refusedWithoutWriting(
      h.log,
      () => engine.start(input('x2', { kind: 'continuation', source: one, content: 'stale', onlyIfLatest: true })),
      'RUN_SOURCE_STALE',
      'from run-one after a trim',
    )
    const running = await engine.start(input('three', { kind: 'continuation', source: two, content: 'third', onlyIfLatest: true }))
    assert.equal(await running.wait(), { status: 'completed' })
    assert.equal((await h.log.runs('reopened')).map((run) => run.runId), ['run-one', 'run-two', 'run-three'])
    await engine.drain()
  }),
)

test(
  'two continuations of the latest run started at once with onlyIfLatest: exactly one is admitted, the other refused RUN_BUSY or RUN_SOURCE_STALE',
  engineTest([answer.text('one'), answer.text('winner')], {}, async (h) => {
    const input = (name: string, work: RunInput['work']): RunInput => ({ ...h.input(name, { session: 'race' }), work })
    assert.equal(await h.run(input('one', { kind: 'message', content: 'first' })), { status: 'completed' })
    const source = await lastSource(h.log, 'race')
    const before = await markOf(h.log)
    const results = await Promise.allSettled(
      ['a', 'b'].map((name) => h.start(input(name, { kind: 'continuation', source, content: `message ${name}`, onlyIfLatest: true }))),
    )
    const admitted = results.filter((result) => result.status === 'fulfilled')
    const refused = results.filter((result): result is PromiseRejectedResult => result.status === 'rejected')
    assert.is(admitted.length, 1, 'exactly one admitted')
    assert.ok(['RUN_BUSY', 'RUN_SOURCE_STALE'].includes((refused[0]?.reason as { code?: string }).code ?? ''), String(refused[0]?.reason))
    assert.equal(await (admitted[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof h.start>>>).value.wait(), { status: 'completed' })
    assert.is((await h.log.runs('race')).length, 2)
    assert.ok((await markOf(h.log)).highWater > before.highWater)
  }),
)

test(
  'a run opened in the same group commit, not yet durable, is the latest: a continuation staged after it in that group is stale',
  engineTest([answer.text('one')], {}, async (h) => {
    assert.equal(await h.run({ ...h.input('one', { session: 'grouped' }), work: { kind: 'message', content: 'first' } }), { status: 'completed' })
    const source = await lastSource(h.log, 'grouped')
    const internals = logInternals(h.log)
    // Holds the group commit in a precondition, so the direct append and the continuation are staged together after it.
    let unblock: () => void = () => undefined
    const blocked = new Promise<void>((resolve) => (unblock = resolve))
    const blocker = internals.appendAll(completeInvocation('blocker', 'elsewhere'), () => blocked)
    const direct = internals.appendAll(completeInvocation('direct', 'grouped'))
    const continuation = refusal(h.engine.start({ ...h.input('late', { session: 'grouped' }), work: { kind: 'continuation', source, content: 'late', onlyIfLatest: true } }))
    // Until the continuation's own append is queued behind the other two (its reads before it are quick).
    await new Promise((resolve) => setTimeout(resolve, 200))
    unblock()
    await Promise.all([blocker, direct])
    const error = await continuation
    assert.is(error.code, 'RUN_SOURCE_STALE')
    assert.equal(error.details, { sessionId: 'grouped', sourceRunId: 'run-one', latestRunId: 'run-direct', latestInvocationId: 'inv-direct' })
    assert.equal((await h.log.runs('grouped')).map((run) => run.runId), ['run-one', 'run-direct'])
  }),
)

test('onlyIfLatest must be a boolean, and only a continuation has it', () => {
  // Checked without a log: validateRunInput refuses before anything is read.
  return import('../actors/run-input.js').then(({ validateRunInput }) => {
    const base = {
      invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
      provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' },
      configuration: { cwd: CWD },
      tools: [],
    }
    const source = { invocation: { sessionId: 's', turnId: 't0', runId: 'r0', invocationId: 'i0' }, highWater: 3, digest: `sha256:${'0'.repeat(64)}` }
    assert.ok(validateRunInput({ ...base, work: { kind: 'continuation', source, onlyIfLatest: true } }))
    for (const work of [
      { kind: 'continuation', source, onlyIfLatest: 'yes' },
      { kind: 'message', content: 'hi', onlyIfLatest: true },
    ]) {
      try {
        validateRunInput({ ...base, work })
        assert.unreachable(JSON.stringify(work))
      } catch (error) {
        assert.is((error as { code?: string }).code, 'RUN_INVALID_INPUT')
        assert.ok(((error as { details: { fields: string[] } }).details.fields).some((field) => field.startsWith('work')), JSON.stringify((error as { details?: unknown }).details))
      }
    }
  })
})

test.run()
