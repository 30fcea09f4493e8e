/**
 * `engine.check(input, options?)`: a dry run of `start()`'s admission. For each kind of refusal it
 * rejects with the very error `start()` gives (code, message and details), and neither writes
 * anything: the log's high-water and digest, its events and the files of its directory stay as they
 * were. A check that passes is followed by a `start()` that admits, and registers no handle meanwhile.
 */
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RunInput, type StartOptions, type ToolDefinition, type UncertainOperation, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { type EngineHarness, countingTool, engineTest, markOf, runInput, sealAtFirstSafePoint, storedEvents, successorInput } from './support/engine-fixtures.js'
import { killChildAt } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** Every file under `dir` with its size, sorted: what a write would change. */
async function listing(dir: string): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) found.push(...(await listing(path)).map((inner) => `${entry.name}/${inner}`))
    else if (entry.isFile()) found.push(`${entry.name} ${(await stat(path)).size}`)
  }
  return found.sort()
}

/** The log as a refusal must leave it: high-water, digest, every event's id, and its directory's files. */
async function stateOf(log: EventLog, logPath: string) {
  return { mark: await markOf(log), ids: (await storedEvents(log)).map((stored) => stored.event.id), files: await listing(logPath) }
}

/**
 * Asserts that `engine.check` and then `engine.start` both refuse `input` with `code`, with the same
 * message and details, and that neither changed the log; returns the refusal.
 */
async function refusedAlike(h: Pick<EngineHarness, 'log' | 'logPath'>, engine: Engine, input: RunInput, code: string, what: string, options?: StartOptions) {
  const before = await stateOf(h.log, h.logPath)
  const checked = await rejectsWithCode(() => engine.check(input, options), code, `check: ${what}`)
  assert.equal(await stateOf(h.log, h.logPath), before, `check: ${what}: nothing is written`)
  assert.is(engine.running(input.invocation.invocationId), undefined, `check: ${what}: no handle is registered`)
  const started = await rejectsWithCode(() => engine.start(input, options), code, `start: ${what}`)
  assert.equal(await stateOf(h.log, h.logPath), before, `start: ${what}: nothing is written`)
  assert.is(checked.message, started.message, `${what}: the same message`)
  assert.equal(checked.details, started.details, `${what}: the same details`)
  return checked
}

/** Asserts that `check` resolves and writes nothing, then that `start` admits the run. */
async function admittedAfterCheck(h: EngineHarness, input: RunInput, what: string, options?: StartOptions) {
  const before = await stateOf(h.log, h.logPath)
  await h.engine.check(input, options)
  assert.equal(await stateOf(h.log, h.logPath), before, `${what}: a check that passes writes nothing either`)
  assert.is(h.engine.running(input.invocation.invocationId), undefined, `${what}: the check registered no handle`)
  assert.equal(h.engine.inFlight(), [], `${what}: nor anything drain() would wait for`)
  return h.start(input, options)
}

const KEY = 'sk-check-do-not-persist-1234567890'

test(
  'check refuses as start does, code, message and details, and neither writes: bad input, secrets, ids used, busy sessions, sources, seals and claims',
  engineTest([answer.text('done'), answer.text('second'), answer.text('resumed')], { ms: 20_000 }, async (h) => {
    assert.equal(await h.run(h.input('first')), { status: 'completed' })
    const first = (await h.log.runSource('session-first', 'run-first'))?.boundary
    assert.ok(first)

    // RUN_INVALID_INPUT, each as start() refuses it.
    const empty = h.input('bad')
    empty.work = { kind: 'message', content: '' }
    assert.equal((await refusedAlike(h, h.engine, empty, 'RUN_INVALID_INPUT', 'an empty message')).details?.fields, ['work.content'])
    const relative = h.input('bad')
    relative.configuration = { cwd: 'workspace' }
    await refusedAlike(h, h.engine, relative, 'RUN_INVALID_INPUT', 'a relative cwd')
    const secret = h.input('bad', { content: `my key is ${KEY}` })
    secret.provider = { ...secret.provider, apiKey: KEY }
    const leak = await refusedAlike(h, h.engine, secret, 'RUN_INVALID_INPUT', "a message holding the provider's key")
    assert.not.ok(leak.message.includes(KEY), 'the refusal does not quote the key')
    const gated: ToolDefinition = { ...countingTool('refund'), needsApproval: true }
    assert.equal(
      (await refusedAlike(h, h.engine, h.input('bad', { tools: [gated] }), 'RUN_INVALID_INPUT', 'a tool needing approval without onApproval')).details?.fields,
      ['options.onApproval'],
    )
    await refusedAlike(h, h.engine, h.input('bad'), 'RUN_INVALID_INPUT', 'options that are not an object', 'soon' as unknown as StartOptions)
    const small = new Engine({ log: h.log, maxInputBytes: 1_000 })
    const large = await refusedAlike(h, small, h.input('bad', { content: 'x'.repeat(2_000) }), 'RUN_INVALID_INPUT', 'a message over maxInputBytes')
    assert.match(large.message, 'maxInputBytes')
    const again = await refusedAlike(h, h.engine, h.input('first'), 'RUN_INVALID_INPUT', 'the ids of a run that exists')
    assert.is(again.details?.reason, 'exists')

    // Sources: a boundary the log does not reproduce; a continuation, not the latest, with onlyIfLatest.
    const forged = h.input('forged', { session: 'session-first' })
    forged.work = { kind: 'continuation', source: { ...first, digest: `sha256:${'0'.repeat(64)}` } }
    await refusedAlike(h, h.engine, forged, 'RUN_SOURCE_MISMATCH', 'a source whose digest the log does not reproduce')
    const second = h.input('second', { session: 'session-first' })
    second.work = { kind: 'continuation', source: first }
    assert.equal(await (await admittedAfterCheck(h, second, 'a continuation')).wait(), { status: 'completed' })
    const stale = h.input('stale', { session: 'session-first' })
    stale.work = { kind: 'continuation', source: first, onlyIfLatest: true }
    assert.is((await refusedAlike(h, h.engine, stale, 'RUN_SOURCE_STALE', 'onlyIfLatest from a run that is not the latest')).details?.latestRunId, 'run-second')

    // RUN_BUSY: a run held at its first safe point (active), then the same run sealed (paused).
    const held = await h.start(h.input('held'))
    const reservation = held.handoff().reserve({
      handoffId: 'review',
      hostEpoch: 'epoch-1',
      rootRunId: 'run-held',
      successorRunId: 'run-held-2',
      successorInvocationId: 'invocation-held-2',
      claimId: 'claim-held-2',
    })
    const hold = await reservation.ready()
    const active = await refusedAlike(h, h.engine, h.input('next', { session: 'session-held' }), 'RUN_BUSY', 'a session with a held run')
    assert.is(active.details?.reason, 'active')
    const pause = await hold.commit()
    assert.equal(await held.wait(), { status: 'handoff_paused', pause })
    const paused = await refusedAlike(h, h.engine, h.input('next', { session: 'session-held' }), 'RUN_BUSY', 'a session with a paused turn')
    assert.is(paused.details?.reason, 'paused')

    // The successor: refused while its ids or its source differ from the seal, then admitted once, then HANDOFF_CLAIMED.
    const source = (await h.log.runSource('session-held', 'run-held'))?.boundary
    assert.ok(source)
    const successor = successorInput({ running: held, pause, source, input: h.input('held') })
    const otherIds = { ...successor, invocation: { ...successor.invocation, invocationId: 'invocation-other' } }
    assert.is((await refusedAlike(h, h.engine, otherIds, 'HANDOFF_MISMATCH', 'a successor under other ids')).details?.field, 'invocation')
    const otherSource = { ...successor, work: { ...successor.work, source: { ...source, highWater: first.highWater } } as RunInput['work'] }
    await refusedAlike(h, h.engine, otherSource, 'HANDOFF_MISMATCH', 'a successor from another boundary')
    assert.equal(await (await admittedAfterCheck(h, successor, 'the successor')).wait(), { status: 'completed' })
    const claimed = await refusedAlike(h, h.engine, successor, 'HANDOFF_CLAIMED', 'the successor again')
    assert.is(claimed.details?.claimedBy, 'invocation-held-2')
  }),
)

test(
  'a setting changed after the seal (instructions, a tool description, the model) is refused by check as by start, HANDOFF_MISMATCH naming each field; a give-up (aborted signal) passes',
  engineTest([answer.text('resumed')], {}, async (h) => {
    const tools = [countingTool('prepare_refund'), countingTool('issue_refund')]
    const input = { ...h.input('sealed', { tools }), instructions: 'You refund orders.' }
    const sealed = await sealAtFirstSafePoint(h, input, 'successor')
    const exact = successorInput(sealed)
    const changed: [string, RunInput, string[]][] = [
      ['instructions', { ...exact, instructions: 'You refund orders, politely.' }, ['instructions']],
      ['a tool description', { ...exact, tools: [tools[0] as ToolDefinition, { ...(tools[1] as ToolDefinition), description: 'Sends the money back' }] }, ['tools']],
      ['the model', { ...exact, provider: { ...exact.provider, model: 'scripted-2' } }, ['model']],
      ['all three', { ...exact, instructions: 'Other.', provider: { ...exact.provider, model: 'scripted-2' }, tools: [tools[0] as ToolDefinition] }, ['model', 'tools', 'instructions']],
    ]
    for (const [what, successor, fields] of changed) {
      const refused = await refusedAlike(h, h.engine, successor, 'HANDOFF_MISMATCH', what)
      assert.equal([...(refused.details?.fields as string[])].sort(), [...fields].sort(), `${what}: details.fields`)
    }
    const description = await rejectsWithCode(() => h.engine.check(changed[1]?.[1] as RunInput), 'HANDOFF_MISMATCH')
    assert.equal(description.details?.tools, { added: [], removed: [], changed: ['issue_refund'] }, 'the changed tool is named')
    // The same successor given up (an already aborted signal) runs under no settings of its own: it passes.
    await h.engine.check(changed[3]?.[1] as RunInput, { signal: AbortSignal.abort('review expired') })
    assert.equal(await (await admittedAfterCheck(h, exact, 'the exact successor')).wait(), { status: 'completed' })
  }),
)

test(
  'RUN_RECONCILIATION_REQUIRED (a tool killed while it ran): check refuses as start does, with the same unknown operations; acknowledged, check passes and start admits',
  engineTest(
    [answer.text('checked')],
    {
      ms: 30_000,
      before: async (logPath) => {
        await killChildAt('child-engine-tool.ts', [logPath], 'executing ')
        const log = await EventLog.open(logPath)
        try {
          assert.is(await recoverInvocations(log), 1)
        } finally {
          await log.close()
        }
      },
    },
    async (h) => {
      const next = h.input('next', { session: 'session-crash', tools: [countingTool('deploy')] })
      const refused = await refusedAlike(h, h.engine, next, 'RUN_RECONCILIATION_REQUIRED', 'a new message after an unknown outcome')
      assert.equal(
        (refused.details?.unknown as UncertainOperation[]).map((op) => op.name),
        ['deploy'],
      )
      next.work = { kind: 'message', content: 'the deploy did happen', allowPriorUnknown: true }
      assert.equal(await (await admittedAfterCheck(h, next, 'an acknowledged message')).wait(), { status: 'completed' })
    },
  ),
)

test('a closed log: check refuses LOG_CLOSED as start does, writing nothing', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const logPath = join(dir, 'log')
      const log = await EventLog.open(logPath)
      try {
        const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 1_000 }) })
        await log.close()
        const files = await listing(logPath)
        const input = runInput('http://127.0.0.1:9/v1', 'closed')
        const checked = await rejectsWithCode(() => engine.check(input), 'LOG_CLOSED', 'check')
        const started = await rejectsWithCode(() => engine.start(input), 'LOG_CLOSED', 'start')
        assert.is(checked.message, started.message)
        assert.equal(await listing(logPath), files, 'nothing is written')
      } finally {
        await log.close()
      }
    }),
    10_000,
  ),
)

test.run()
