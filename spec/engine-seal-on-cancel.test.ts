/**
 * `reserve(intent, { sealOnCancel: true })`: a graceful shutdown's cancel (a signal's `abort('shutdown')`) that
 * comes while the reservation waits for its safe point, or while its hold waits for a decision, seals
 * the hold rather than ending the run cancelled; a hold that cannot be taken there is given up as
 * without the option. Real LevelDB, the scripted model server, and a child process sent SIGTERM
 * running the README's reviewer recipe and a shutdown handler that aborts its signal.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type HandoffPause, type HandoffReservation, type HeldInvocation, type RunInput, type RunningInvocation, type ToolDefinition, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { startChild } from './support/log-fixtures.js'
import {
  type EngineHarness,
  countingTool,
  engineTest,
  factsOf,
  intentOf,
  lastFactOf,
  messagesOf,
  only,
  refusedWithoutWriting,
  type SealedRun,
  sealAtFirstSafePoint,
  successorInput,
  typesOf,
} from './support/engine-fixtures.js'

/**
 * A run whose one tool reserves a hold on its own run (`options` given to `reserve`) and then runs
 * until its signal aborts, as a tool that records a review request may still be running when a
 * shutdown comes; the test aborts the run's signal with `'shutdown'` once the tool has reserved.
 */
async function shutDownWhileToolRuns(
  h: EngineHarness,
  name: string,
  options: { sealOnCancel?: boolean } | undefined,
  input: (tools: ToolDefinition[]) => RunInput = (tools) => h.input(name, { tools }),
  intent = intentOf(`${name}-next`, `run-${name}`),
) {
  let running: RunningInvocation | undefined
  let reservation: HandoffReservation | undefined
  let reserved: () => void = () => undefined
  const toolReserved = new Promise<void>((resolve) => (reserved = resolve))
  const tool = countingTool('prepare', async (_input, context) => {
    reservation = (running as RunningInvocation).handoff().reserve(intent, options)
    reserved()
    await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }))
    return 'sent to a reviewer'
  })
  const shutdown = new AbortController()
  const given = input([tool])
  running = await h.start(given, { signal: shutdown.signal })
  await toolReserved
  shutdown.abort('shutdown')
  return { running, reservation: reservation as HandoffReservation, tool, input: given }
}

test(
  'sealOnCancel: a shutdown while the reserving tool runs seals the hold (handoff_paused); a successor is admitted and completes without running the tool again',
  engineTest([answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }]), answer.text('refund issued')], { ms: 10_000 }, async (h) => {
    const { running, reservation, tool, input } = await shutDownWhileToolRuns(h, 'seal', { sealOnCancel: true })
    const outcome = await running.wait()
    assert.is(outcome.status, 'handoff_paused', 'the pause the app asked for is kept')
    const pause = (outcome as { pause: HandoffPause }).pause
    assert.equal(pause.intent, intentOf('seal-next', 'run-seal'))
    assert.is(pause.remainingSteps, 3, 'one of the four steps is spent')
    assert.equal(await typesOf(h.log, 'invocation-seal'), [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled',
      'hold.entered',
      'invocation.ended',
    ])
    const facts = await factsOf(h.log, 'invocation-seal')
    assert.equal(facts.at(-2), { type: 'hold.entered', handoffId: 'handoff-seal-next' })
    assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } }, 'what held.commit() writes')
    const settled = facts.find((fact) => fact.type === 'tool.settled')
    assert.equal(settled?.type === 'tool.settled' ? settled.outcome : undefined, { status: 'succeeded', output: 'sent to a reviewer' })

    // ready() resolves with the hold already sealed: the recipe's `.then((held) => held.commit())` gets the pause, nothing more is written.
    const held = await reservation.ready()
    assert.equal(held.preview(), pause)
    assert.equal(await held.commit(), pause)
    await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'a release of a hold sealed on the cancel')
    assert.is((await factsOf(h.log, 'invocation-seal')).length, 7, 'commit() wrote nothing')

    const sealed = await h.log.runSource(input.invocation.sessionId, input.invocation.runId)
    assert.ok(sealed?.pause, 'the run is sealed for a successor')
    assert.equal(sealed.pause, pause)
    assert.equal(await h.run(successorInput({ running, pause, source: sealed.boundary, input })), { status: 'completed' })
    assert.is(tool.calls.length, 1, 'the tool is not run again')
    assert.is(h.server.requests.length, 2)
    const replayed = messagesOf(h.server.requests[1]?.body)
    assert.equal(replayed.at(-1), { role: 'tool', tool_call_id: (replayed.at(-2)?.tool_calls?.[0] as { id: string }).id, content: 'sent to a reviewer' })
  }),
)

test(
  'sealOnCancel: a log that closes while the reserving tool ignores its signal settles ready() (HANDOFF_UNAVAILABLE): the pending reservation no longer waits for a safe point that will not come',
  engineTest([answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    let running: RunningInvocation | undefined
    let reservation: HandoffReservation | undefined
    let reserved: () => void = () => undefined
    const toolReserved = new Promise<void>((resolve) => (reserved = resolve))
    let letGo: (value: string) => void = () => undefined
    const stuck = new Promise<string>((resolve) => (letGo = resolve))
    const tool = countingTool('prepare', async () => {
      reservation = (running as RunningInvocation).handoff().reserve(intentOf('stuck-next', 'run-stuck'), { sealOnCancel: true })
      reserved()
      // Ignores its signal: the cancel never reaches a safe point.
      return stuck
    })
    const shutdown = new AbortController()
    // Not the harness's start: the log closes under this run, so its live state is not the folded one.
    running = await h.engine.start(h.input('stuck', { tools: [tool] }), { signal: shutdown.signal })
    try {
      await toolReserved
      shutdown.abort('shutdown')
      await h.log.close()
      const error = await rejectsWithCode(() => (reservation as HandoffReservation).ready(), 'HANDOFF_UNAVAILABLE', 'ready() once the log closed')
      assert.match(error.message, /stopped/)
    } finally {
      letGo('too late')
    }
    // Once the tool returns, the run finds the log closed.
    await rejectsWithCode(() => (running as RunningInvocation).wait(), 'LOG_CLOSED', 'the run the log closed under')
    // The directory stays locked until the tool, let go above, has settled (LOG_WRITER_BUSY, toolsRunning): waited for.
    h.log = await EventLog.open(h.logPath, { waitMs: 5_000 })
    assert.is(await recoverInvocations(h.log), 1, 'the run the log closed under, ended by recovery')
  }),
)

test(
  'without sealOnCancel, a shutdown while the reserving tool runs refuses the hold (HANDOFF_UNAVAILABLE) and the run ends cancelled{shutdown}',
  engineTest([answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }]), answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    for (const [name, options] of [
      ['plain', undefined],
      ['off', { sealOnCancel: false }],
    ] as const) {
      const { running, reservation } = await shutDownWhileToolRuns(h, name, options)
      assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' }, name)
      await rejectsWithCode(() => reservation.ready(), 'HANDOFF_UNAVAILABLE', `${name}: ready()`)
      assert.equal(await typesOf(h.log, `invocation-${name}`), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'invocation.ended'], name)
    }
  }),
)

test(
  'sealOnCancel: a cancel while the hold waits for its decision seals it; a commit in the same tick resolves with the pause, a later release is HANDOFF_NOT_HELD',
  engineTest([answer.text('done')], { ms: 10_000 }, async (h) => {
    const cases: { name: string; decide: (held: HeldInvocation) => Promise<unknown> | undefined }[] = [
      { name: 'undecided', decide: () => undefined },
      { name: 'committing', decide: (held) => held.commit() },
    ]
    for (const { name, decide } of cases) {
      const shutdown = new AbortController()
      const running = await h.start(h.input(name), { signal: shutdown.signal })
      const held = await running.handoff().reserve(intentOf(`${name}-next`, `run-${name}`), { sealOnCancel: true }).ready()
      assert.is(running.state(), 'held')
      shutdown.abort('shutdown')
      const deciding = decide(held)
      const pause = held.preview()
      assert.equal(await running.wait(), { status: 'handoff_paused', pause }, name)
      if (deciding) assert.equal(await deciding, pause, `${name}: the commit taken as the run was cancelled`)
      assert.equal(await held.commit(), pause, `${name}: commit() afterwards`)
      await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', `${name}: release() afterwards`)
      assert.equal(await typesOf(h.log, `invocation-${name}`), ['invocation.opened', 'hold.entered', 'invocation.ended'], name)
      assert.equal(await lastFactOf(h.log, `invocation-${name}`), { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } })
    }
    // Sealed before any request: the successor makes the run's first one.
    const input = h.input('undecided')
    const sealed = await h.log.runSource(input.invocation.sessionId, input.invocation.runId)
    assert.ok(sealed?.pause)
    assert.equal(await h.run(successorInput({ running: h.runs[0] as RunningInvocation, pause: sealed.pause, source: sealed.boundary, input })), { status: 'completed' })
  }),
)

test(
  'sealOnCancel: a request the cancel cuts short is the successor\u2019s first step (not spent), sent again',
  engineTest([answer.text('late', { hold: true }), answer.text('done')], { ms: 10_000 }, async (h) => {
    const input = { ...h.input('cut'), maxSteps: 1 }
    const shutdown = new AbortController()
    const running = await h.start(input, { signal: shutdown.signal })
    await h.server.seen(0)
    const reservation = running.handoff().reserve(intentOf('cut-next', 'run-cut'), { sealOnCancel: true })
    shutdown.abort('shutdown')
    const outcome = await running.wait()
    assert.is(outcome.status, 'handoff_paused')
    const pause = (outcome as { pause: HandoffPause }).pause
    assert.is(pause.remainingSteps, 1, 'the only step was cut short and is not spent')
    assert.equal(await typesOf(h.log, 'invocation-cut'), ['invocation.opened', 'model.requested', 'model.interrupted', 'hold.entered', 'invocation.ended'])
    assert.equal(await (await reservation.ready()).commit(), pause)
    h.server.release(0)
    const sealed = await h.log.runSource(input.invocation.sessionId, input.invocation.runId)
    assert.ok(sealed?.pause)
    assert.equal(await h.run(successorInput({ running, pause, source: sealed.boundary, input })), { status: 'completed' })
    assert.equal(messagesOf(h.server.requests[1]?.body), messagesOf(h.server.requests[0]?.body), 'the same conversation is asked again')
  }),
)

test(
  'sealOnCancel on a hold that cannot be taken: the budget spent, or a successor that could not be admitted, ends the run cancelled as without it',
  engineTest([answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }]), answer.text('done'), answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    // Its one step spent by the answer whose tool reserved: no step is left for a successor.
    const spent = await shutDownWhileToolRuns(h, 'spent', { sealOnCancel: true }, (tools) => ({ ...h.input('spent', { tools }), maxSteps: 1 }))
    assert.equal(await spent.running.wait(), { status: 'cancelled', source: 'shutdown' })
    const refused = await rejectsWithCode(() => spent.reservation.ready(), 'HANDOFF_UNAVAILABLE', 'spent: ready()')
    // It says why no seal was possible, not only that the run ended.
    assert.is(refused.message, 'HANDOFF_UNAVAILABLE: invocation invocation-spent has ended (cancelled) with no hold sealed on the cancel: its one model step is spent, none left for a successor')
    assert.equal(await typesOf(h.log, 'invocation-spent'), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'invocation.ended'])

    // The claim is used already (a seal admitted its successor): the log refuses the seal, nothing of it is written.
    const used = await sealAtFirstSafePoint(h, h.input('a', { session: 'used' }), 'b')
    assert.equal(await h.run(successorInput(used)), { status: 'completed' })
    const claimed = await shutDownWhileToolRuns(h, 'claimed', { sealOnCancel: true }, undefined, { ...intentOf('claimed-next', 'run-claimed'), claimId: 'claim-b' })
    assert.equal(await claimed.running.wait(), { status: 'cancelled', source: 'shutdown' })
    await rejectsWithCode(() => claimed.reservation.ready(), 'HANDOFF_CLAIMED', 'claimed: ready()')
    assert.equal(await typesOf(h.log, 'invocation-claimed'), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'invocation.ended'])
  }),
)

test(
  'sealOnCancel, held: a successor taken after the hold was entered makes the seal refused, and the cancel ends the run cancelled',
  engineTest([answer.text('done')], { ms: 10_000 }, async (h) => {
    const shutdown = new AbortController()
    const running = await h.start(h.input('taken'), { signal: shutdown.signal })
    const held = await running.handoff().reserve(intentOf('taken-next', 'run-taken'), { sealOnCancel: true }).ready()
    // Another session's run takes the invocation id the hold names for its successor.
    const thief = h.input('thief')
    thief.invocation.invocationId = 'invocation-taken-next'
    assert.equal(await h.run(thief), { status: 'completed' })
    shutdown.abort('shutdown')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })
    await rejectsWithCode(() => held.commit(), 'HANDOFF_NOT_HELD', 'commit() after the cancel')
    assert.equal(await typesOf(h.log, 'invocation-taken'), ['invocation.opened', 'hold.entered', 'invocation.ended'])
  }),
)

test(
  'sealOnCancel and the log closing under the run: a crash as without it, each wait() rejects LOG_CLOSED and nothing is sealed; recovery ends both runs',
  engineTest([answer.toolCalls([{ name: 'prepare', arguments: { value: 1 } }])], { ms: 10_000 }, async (h) => {
    // A reservation waiting for the safe point after its tool, which runs until its signal aborts.
    let tooling: RunningInvocation | undefined
    let reservation: HandoffReservation | undefined
    let reserved: () => void = () => undefined
    const toolReserved = new Promise<void>((resolve) => (reserved = resolve))
    const tool = countingTool('prepare', async (_input, context) => {
      reservation = (tooling as RunningInvocation).handoff().reserve(intentOf('tool-next', 'run-tool'), { sealOnCancel: true })
      reserved()
      await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }))
      return 'sent to a reviewer'
    })
    // Started on the engine, not the harness: their live state ends with the closed log, not as recovery leaves it.
    tooling = await h.engine.start(h.input('tool', { tools: [tool] }))
    await toolReserved
    // A run held, its decision never made.
    const holding = await h.engine.start(h.input('held'))
    const held = await holding.handoff().reserve(intentOf('held-next', 'run-held'), { sealOnCancel: true }).ready()

    const before = h.log.head()
    await h.log.close()
    const outcomes = await Promise.allSettled([tooling.wait(), holding.wait()])
    assert.equal(
      outcomes.map((outcome) => (outcome.status === 'rejected' ? (outcome.reason as { code?: string }).code : outcome.status)),
      ['LOG_CLOSED', 'LOG_CLOSED'],
    )
    await rejectsWithCode(() => (reservation as HandoffReservation).ready(), 'HANDOFF_UNAVAILABLE', 'the pending reservation')
    await rejectsWithCode(() => held.commit(), 'HANDOFF_NOT_HELD', 'the held one')
    await h.engine.drain()
    h.log = await EventLog.open(h.logPath)
    assert.equal(h.log.head(), before, 'nothing was written after close()')
    assert.is(await recoverInvocations(h.log), 2)
    const ended = async (name: string) => {
      const fact = (await factsOf(h.log, `invocation-${name}`)).at(-1)
      return fact?.type === 'invocation.ended' ? fact.outcome : undefined
    }
    assert.equal((await ended('tool'))?.status, 'failed', 'not sealed')
    assert.equal((await ended('held'))?.status, 'failed', 'not sealed')
  }),
)

/**
 * Runs the README's reviewer recipe in a child process (`seal`: with `sealOnCancel`), sends it
 * SIGTERM while its tool runs, and keeps what it printed; its shutdown handler exits on its own.
 */
function shutDownChild(mode: 'seal' | 'plain', printed: string[]) {
  return async (logPath: string): Promise<void> => {
    const child = startChild('child-seal-on-cancel.ts', [logPath, mode])
    try {
      await child.waitForLine((line) => line === 'reserved', 20_000)
      child.process.kill('SIGTERM')
      // The bound's timer is cleared once the child exits: left pending, it kept the test process alive 20 s after the last test.
      let giveUp: () => void = () => undefined
      const bound = setTimeout(() => giveUp(), 20_000)
      const exited = await Promise.race([child.exited, new Promise<undefined>((resolve) => (giveUp = () => resolve(undefined)))])
      clearTimeout(bound)
      assert.equal(exited, { code: 0, signal: null }, `the child shut down cleanly (${child.stderr()})`)
    } finally {
      await child.stop('SIGKILL')
    }
    printed.push(...child.lines)
  }
}

{
  const printed: string[] = []
  test(
    'a real process running the reviewer recipe with sealOnCancel, sent SIGTERM while the tool runs: the run is sealed, and a successor in another process completes without the tool run again',
    engineTest([answer.text('refund issued')], { ms: 30_000, before: shutDownChild('seal', printed) }, async (h) => {
      const outcome = JSON.parse(printed.find((line) => line.startsWith('outcome '))?.slice('outcome '.length) ?? 'null') as { status: string; pause: HandoffPause }
      assert.is(outcome.status, 'handoff_paused', printed.join('\n'))
      assert.ok(printed.includes('decided sealed'), "the recipe's ready().then((held) => held.commit()) resolved")
      const facts = await factsOf(h.log, 'invocation-shutdown')
      assert.equal(
        facts.map((fact) => fact.type),
        ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'hold.entered', 'invocation.ended'],
      )
      assert.equal(facts.at(-1), { type: 'invocation.ended', outcome })
      const pending = await h.log.pendingSessions()
      assert.equal(pending.map((session) => [session.sessionId, session.paused.map((turn) => turn.runId)]), [['session-shutdown', ['run-shutdown']]])

      const prepare = countingTool('prepare')
      const input = h.input('shutdown', { tools: [prepare] })
      const sealed = await h.log.runSource(input.invocation.sessionId, input.invocation.runId)
      assert.ok(sealed?.pause)
      assert.equal(sealed.pause, outcome.pause)
      assert.equal(await h.run(successorInput({ input, pause: sealed.pause, source: sealed.boundary } as SealedRun)), { status: 'completed' })
      assert.is(prepare.calls.length, 0, 'the successor does not run the tool')
      const dispatched = (await h.log.prefix(1_000, 1 << 24)).events.filter((stored) => stored.event.fact.type === 'tool.dispatched')
      assert.is(dispatched.length, 1, 'the tool ran once in all')
    }),
  )
}

{
  const printed: string[] = []
  test(
    'the same without sealOnCancel: the hold is refused (HANDOFF_UNAVAILABLE) and the run ends cancelled{shutdown}, nothing paused',
    engineTest([], { ms: 30_000, before: shutDownChild('plain', printed) }, async (h) => {
      assert.ok(printed.includes('outcome {"status":"cancelled","source":"shutdown"}'), printed.join('\n'))
      assert.ok(printed.includes('decided HANDOFF_UNAVAILABLE'), printed.join('\n'))
      const facts = await factsOf(h.log, 'invocation-shutdown')
      assert.equal(only(facts, 'hold.entered'), [])
      assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'shutdown' } })
      assert.equal(await h.log.pendingSessions(), [])
    }),
  )
}

test(
  'sealOnCancel that is not a boolean, or options that are not reserve()\u2019s: HANDOFF_MISMATCH naming the options, nothing reserved or written',
  engineTest([answer.text('done')], { ms: 10_000 }, async (h) => {
    const running = await h.start(h.input('bad'))
    const gate = running.handoff()
    // Held, so that the run writes nothing meanwhile; the options are read before the gate is asked (else HANDOFF_BUSY).
    const held = await gate.reserve(intentOf('bad-first', 'run-bad')).ready()
    const intent = intentOf('bad-next', 'run-bad')
    const throwing = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('no keys')
        },
      },
    )
    const cases: [string, unknown][] = [
      ['sealOnCancel: "yes"', { sealOnCancel: 'yes' }],
      ['sealOnCancel: 1', { sealOnCancel: 1 }],
      ['a misspelt option', { sealsOnCancel: true }],
      ['a string', 'seal'],
      ['null', null],
      ['an array', []],
      ['options that cannot be read', throwing],
    ]
    for (const [what, options] of cases) {
      const error = await refusedWithoutWriting(h.log, async () => gate.reserve(intent, options as never), 'HANDOFF_MISMATCH', `reserve(intent, ${what})`)
      assert.is(error.details?.field, 'options')
    }
    await held.release()
    assert.equal(await running.wait(), { status: 'completed' })
    // Nothing was reserved: no second hold was taken at the safe point after the release.
    assert.equal(await typesOf(h.log, 'invocation-bad'), ['invocation.opened', 'hold.entered', 'hold.released', 'model.requested', 'model.completed', 'invocation.ended'])
  }),
)

test.run()
