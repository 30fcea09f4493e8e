/**
 * `recoverInvocations(log, { onClosed })`: each invocation recovery closes is reported once its
 * closing facts are durable, with how it ended, what it left uncertain and its run's new boundary,
 * from which a continuation picks the run up. Produced for real: a child process is SIGKILLed while
 * its tools run.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type RecoveredInvocation, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, refusedWithoutWriting } from './support/engine-fixtures.js'
import { EventMaker, facts, invocationOf, refusal, startChild } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

async function killWhileToolsRun(logPath: string): Promise<void> {
  const child = startChild('child-engine-tool.ts', [logPath, 'mixed'])
  try {
    for (let seen = 0; seen < 2; seen += 1) await child.waitForLine((line) => line.startsWith('executing '), 20_000)
  } finally {
    await child.stop('SIGKILL')
  }
  assert.is((await child.exited).signal, 'SIGKILL', `the child was killed, not finished (${child.stderr()})`)
}

test(
  'each closed invocation is reported with its outcome, its uncertain operations and the boundary a continuation starts from',
  engineTest([answer.text('picked up where it stopped')], { ms: 30_000, before: killWhileToolsRun }, async (h) => {
    // Before recovery the session is busy with a run no process runs any more: the refusal says what closes it.
    const early = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('early', { session: 'session-crash' })), 'RUN_BUSY', 'a message before recovery')
    assert.is(early.details?.reason, 'active')
    assert.match(early.message, /left open by a process that stopped \(run-crash\): recoverInvocations\(log\) closes it/)
    const reported: RecoveredInvocation[] = []
    assert.is(await recoverInvocations(h.log, { onClosed: (closed) => void reported.push(closed) }), 1)
    assert.is(reported.length, 1)
    const [closed] = reported as [RecoveredInvocation]
    assert.equal(closed.invocation, { sessionId: 'session-crash', turnId: 'turn-crash', runId: 'run-crash', invocationId: 'invocation-crash' })
    assert.is(closed.outcome.status === 'failed' && closed.outcome.class, 'outcome_unknown')
    const ended = (await factsOf(h.log, 'invocation-crash')).at(-1)
    assert.equal(ended, { type: 'invocation.ended', outcome: closed.outcome }, 'the outcome is the recorded one')
    assert.equal(
      closed.uncertainOperations.map((op) => [op.name, op.callId, op.readOnly]),
      [
        ['search', 'call-search', true],
        ['deploy', 'call-deploy', undefined],
      ],
    )
    // Each with the input it was dispatched with: what the application checks the effect by.
    const dispatched = new Map((await factsOf(h.log, 'invocation-crash')).flatMap((fact) => (fact.type === 'tool.dispatched' ? [[fact.operationId, fact.input] as const] : [])))
    assert.equal(
      closed.uncertainOperations.map((op) => op.input),
      closed.uncertainOperations.map((op) => dispatched.get(op.operationId)),
    )
    assert.ok(closed.uncertainOperations.every((op) => op.input !== undefined))
    assert.equal(closed.boundary, (await h.log.runSource('session-crash', 'run-crash'))?.boundary)
    assert.is(closed.boundary.highWater, h.log.head().highWater, 'the run ends with its closing')
    // What an application does with it: continue the run (acknowledging the deploy that may have happened).
    const input = h.input('continued', { session: 'session-crash', tools: [countingTool('deploy'), countingTool('search')] })
    input.work = { kind: 'continuation', source: closed.boundary, allowPriorUnknown: true }
    assert.equal(await h.run(input), { status: 'completed' })
    assert.is(await recoverInvocations(h.log, { onClosed: () => assert.unreachable('nothing is left to close') }), 0)
  }),
)

test('a run cut short in a model request is reported host_interrupted; what onClosed throws, recovery rejects with once every closing is written', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const path = join(dir, 'log')
      let log = await EventLog.open(path)
      const first = new EventMaker(invocationOf('first'))
      const second = new EventMaker(invocationOf('second'))
      await log.appendAll([...first.many([facts.opened(), facts.requested('step-1')]), ...second.many([facts.opened()])])
      await log.close()
      log = await EventLog.open(path)
      try {
        const reported: RecoveredInvocation[] = []
        const failure = new Error('the application could not queue it')
        let caught: unknown
        try {
          await recoverInvocations(log, {
            onClosed: async (closed) => {
              reported.push(closed)
              if (closed.invocation.invocationId === invocationOf('first').invocationId) throw failure
            },
          })
        } catch (error) {
          caught = error
        }
        assert.is(caught, failure)
        assert.equal(reported.map((closed) => [closed.invocation.invocationId, closed.outcome.status === 'failed' && closed.outcome.class, closed.uncertainOperations]).sort(), [
          [invocationOf('first').invocationId, 'host_interrupted', []],
          [invocationOf('second').invocationId, 'host_interrupted', []],
        ])
        assert.is(await recoverInvocations(log), 0, 'both closings were written')
        const prefix = await log.prefix(100, 1 << 20)
        assert.is(prefix.projectInvocation(invocationOf('first').invocationId).terminal, 'failed')
        assert.is(prefix.projectInvocation(invocationOf('second').invocationId).terminal, 'failed')
      } finally {
        await log.close()
      }
    }),
    10_000,
  ))

test('options that are not { now?, onClosed? } are refused with LOG_INVALID_ARGUMENT before anything is written', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(join(dir, 'log'))
      try {
        await log.appendAll(new EventMaker(invocationOf('open')).many([facts.opened()]))
        const before = log.head()
        const unreadable = {
          get now(): never {
            throw new Error('no clock')
          },
        }
        for (const [index, options] of [{ onClosed: 'print' }, { now: 5 }, { onclosed: () => undefined }, null, [], unreadable].entries()) {
          const error = await refusal(() => recoverInvocations(log, options as never))
          assert.is(error.code, 'LOG_INVALID_ARGUMENT', `options #${index}`)
        }
        // What is not a log is named, not a TypeError from deep inside.
        for (const [given, named] of [[undefined, /not undefined/], [{}, /not an object that is not one/], [join(dir, 'log'), /not the string .* \(open the log first\)/]] as const) {
          const error = await refusal(() => recoverInvocations(given as never))
          assert.is(error.code, 'LOG_INVALID_ARGUMENT', String(given))
          assert.match(error.message, named)
        }
        assert.equal(log.head(), before, 'nothing was written')
        assert.is(await recoverInvocations(log), 1)
      } finally {
        await log.close()
      }
    }),
    10_000,
  ))

test('recovering through a closed handle is LOG_CLOSED, not "nothing to close": the open run is still there for the next open', () =>
  withTimeout(
    withTempDir(async (dir) => {
      // Nothing open at close: the closed handle's answer used to be 0, as if the log had been looked at.
      const empty = await EventLog.open(join(dir, 'empty'))
      await empty.close()
      assert.is((await refusal(() => recoverInvocations(empty))).code, 'LOG_CLOSED')
      const path = join(dir, 'log')
      const log = await EventLog.open(path)
      await log.appendAll(new EventMaker(invocationOf('open')).many([facts.opened()]))
      await log.close()
      const error = await refusal(() => recoverInvocations(log))
      assert.is(error.code, 'LOG_CLOSED')
      const reopened = await EventLog.open(path)
      try {
        assert.is(await recoverInvocations(reopened), 1, 'the run the closed handle could not see is closed once the log is open again')
      } finally {
        await reopened.close()
      }
    }),
    10_000,
  ))

test.run()
