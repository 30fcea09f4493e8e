/**
 * Turns that got no answer: a shutdown cancels every run (`cancelled{shutdown}`), a crash leaves runs
 * that recovery ends `host_interrupted`, a provider refuses a request. None of them leaves anything
 * pending, so `pendingSessions()` did not list them, and a restarted service had no way to find the
 * conversations it cut short. `pendingSessions({ unanswered: true })` (and `factstate pending
 * --unanswered`) lists each session whose last run ended `cancelled` or `failed`, with that run.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { pendingCommand } from '../bin/commands/pending.js'
import { Engine, EventLog, ModelExecutor, intentFor, recoverInvocations, successorOf, type HandoffPause, type RunInput, type RunningInvocation } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { collector } from './support/cli-io.js'
import { rejectsWithCode } from './support/codes.js'
import { countingTool, engineTest, messagesOf } from './support/engine-fixtures.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, withDb } from './support/log-fixtures.js'
import { decodeRecord, encodeRecord } from '../store/encoding.js'
import { keys } from '../store/keys.js'
import type { Fact } from '../facts/types.js'

let answerAll = false

test(
  'pendingSessions({ unanswered: true }) lists the sessions whose last run a shutdown, a crash or a failure cut short; a continuation finishes each, and then it is not listed',
  engineTest(
    (request) => {
      const last = request.body.messages.at(-1) as { content?: string } | undefined
      const asked = String(last?.content ?? '')
      if (asked.includes('refuse')) return answer.status(400, { body: { error: { message: 'no' } } })
      if (answerAll || asked.includes('answer')) return answer.text(`answered: ${asked}`)
      return answer.hang()
    },
    { ms: 30_000 },
    async (h) => {
      const input = (name: string, content: string): RunInput => h.input(name, { session: name.toUpperCase(), content })
      assert.equal(await h.run(input('a', 'answer me')), { status: 'completed' })
      const answered = collector()
      assert.is(await pendingCommand([h.logPath], answered.io), 0)
      assert.equal([answered.out, answered.err.filter((line) => line.startsWith('hint:'))], [['nothing pending'], []], 'every turn answered: no hint')
      assert.equal((await h.run(input('f', 'refuse me'))).status, 'failed')
      // A shutdown: one signal for every run, aborted (what the README's SIGTERM recipe's engine.close({ cancel: 'shutdown' }) does to each run).
      const shutdown = new AbortController()
      const cancelled = await h.start(input('s', 'wait for me'), { signal: shutdown.signal })
      await h.server.seen(2)
      shutdown.abort('shutdown')
      assert.equal(await cancelled.wait(), { status: 'cancelled', source: 'shutdown' })
      // A crash: a run left open when the log closes, ended host_interrupted by the next open's recovery.
      const open = await h.engine.start(input('c', 'wait too'))
      await h.server.seen(3)
      await h.log.close()
      await rejectsWithCode(() => open.wait(), 'LOG_CLOSED', 'the run the log closed under')
      h.log = await EventLog.open(h.logPath)
      assert.is(await recoverInvocations(h.log), 1)
      const log = h.log

      assert.equal(await log.pendingSessions(), [], 'nothing is pending: every run ended')
      const unanswered = await log.pendingSessions({ unanswered: true })
      assert.equal(
        unanswered.map((session) => [session.sessionId, session.unanswered?.runId, session.unanswered?.outcome]),
        [
          ['C', 'run-c', { status: 'failed', class: 'host_interrupted', message: 'the host stopped' }],
          ['F', 'run-f', (await log.runs('F'))[0]?.outcome],
          ['S', 'run-s', { status: 'cancelled', source: 'shutdown' }],
        ],
      )
      assert.is((await log.runs('F'))[0]?.outcome?.status, 'failed')
      for (const session of unanswered) {
        const { effects, ...run } = session.unanswered ?? {}
        assert.equal(run, (await log.runs(session.sessionId)).at(-1), `${session.sessionId}: the last run, as runs() gives it`)
        assert.equal(effects, [], `${session.sessionId}: its run called no tool`)
      }

      // The CLI says the same, on a snapshot of the log it reads while the application has it open.
      const listed = collector()
      assert.is(await pendingCommand([h.logPath, '--unanswered'], listed.io), 0)
      assert.equal(listed.out, [
        'C: unanswered turn turn-c: run run-c (invocation-c) ended failed host_interrupted at seq ' + String((await log.runs('C'))[0]?.lastSeq),
        'F: unanswered turn turn-f: run run-f (invocation-f) ended failed ' + String(((await log.runs('F'))[0]?.outcome as { class: string }).class) + ' at seq ' + String((await log.runs('F'))[0]?.lastSeq),
        'S: unanswered turn turn-s: run run-s (invocation-s) ended cancelled shutdown at seq ' + String((await log.runs('S'))[0]?.lastSeq),
      ])
      const plain = collector()
      assert.is(await pendingCommand([h.logPath], plain.io), 0)
      assert.equal(plain.out, ['nothing pending'], 'stdout as a script reads it')
      // After a shutdown that cancelled runs, "nothing pending" alone hid the turns it cut short.
      assert.equal(plain.err.filter((line) => line.startsWith('hint:')), ['hint: 3 turns ended unanswered (cancelled or failed): factstate pending --unanswered lists them'])

      // A restart finishes the cut-short turns: a continuation from the run's end, without a message.
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
      try {
        const source = (await log.runSource('S', 'run-s'))?.boundary
        assert.ok(source)
        const again: RunInput = { ...input('s2', 'unused'), invocation: { sessionId: 'S', turnId: 'turn-s2', runId: 'run-s2', invocationId: 'invocation-s2' }, work: { kind: 'continuation', source } }
        answerAll = true
        const finishing = await engine.start(again)
        h.runs.push(finishing)
        assert.equal(await finishing.wait(), { status: 'completed' })
        assert.equal(
          (await log.pendingSessions({ unanswered: true })).map((session) => session.sessionId),
          ['C', 'F'],
          "S's last run is answered now",
        )
      } finally {
        await engine.drain()
      }

      await rejectsWithCode(() => log.pendingSessions({ unanswered: 'yes' } as never), 'LOG_INVALID_ARGUMENT', 'unanswered: "yes"')
      await rejectsWithCode(() => log.pendingSessions({ unansered: true } as never), 'LOG_INVALID_ARGUMENT', 'a misspelt option')
      await rejectsWithCode(() => log.pendingSessions(null as never), 'LOG_INVALID_ARGUMENT', 'null options')
    },
  ),
)

test(
  'an unanswered run that already called tools with effects lists them (not its read-only ones), and the CLI says to finish the turn rather than resend it; the continuation does not call them again',
  engineTest(
    [
      answer.toolCalls([
        { name: 'save_note', arguments: { value: 1 } },
        { name: 'lookup', arguments: { value: 2 } },
        { name: 'flaky', arguments: { value: 3 } },
      ]),
      answer.hang(),
      answer.text('saved it'),
    ],
    { ms: 30_000 },
    async (h) => {
      const saveNote = countingTool('save_note')
      const lookup = { ...countingTool('lookup'), readOnly: true as const }
      const flaky = countingTool('flaky', async () => {
        throw new Error('the disk is full')
      })
      const tools = [saveNote, lookup, flaky]
      // A crash mid-turn: the tools have settled, the second model request is in flight when the log closes.
      const open = await h.engine.start(h.input('n', { session: 'N', tools, content: 'save a note' }))
      await h.server.seen(1)
      await h.log.close()
      await rejectsWithCode(() => open.wait(), 'LOG_CLOSED', 'the run the log closed under')
      h.log = await EventLog.open(h.logPath)
      assert.is(await recoverInvocations(h.log), 1)
      const log = h.log

      const [session] = await log.pendingSessions({ unanswered: true })
      assert.is(session?.unanswered?.outcome?.status, 'failed')
      assert.equal(session?.unanswered?.effects, [
        { operationId: 'invocation-n/step-1/0', name: 'save_note', status: 'succeeded' },
        { operationId: 'invocation-n/step-1/2', name: 'flaky', status: 'failed' },
      ])
      assert.equal(await log.pendingSessions({ unanswered: true, sessionId: 'N' }), [session], 'one session read alone says the same')
      assert.equal(await log.pendingSessions(), [], 'without unanswered, nothing is pending')

      const listed = collector()
      assert.is(await pendingCommand([h.logPath, '--unanswered'], listed.io), 0)
      assert.equal(listed.out, [
        `N: unanswered turn turn-n: run run-n (invocation-n) ended failed host_interrupted at seq ${String(session?.unanswered?.lastSeq)}; its run's tools with effects already settled: save_note succeeded, flaky failed; finish the turn (a continuation without content) rather than resend its message`,
      ])
      const json = collector()
      assert.is(await pendingCommand([h.logPath, '--unanswered', '--json'], json.io), 0)
      assert.equal(JSON.parse(json.out.join('')), [session], '--json has the list')

      // Finishing the turn: the model gets the recorded results, and no tool runs again.
      const source = (await log.runSource('N', 'run-n'))?.boundary
      assert.ok(source)
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
      try {
        const finishing = await engine.start({ ...h.input('n2', { session: 'N', tools }), work: { kind: 'continuation', source } })
        h.runs.push(finishing)
        assert.equal(await finishing.wait(), { status: 'completed' })
      } finally {
        await engine.drain()
      }
      assert.equal([saveNote.calls.length, lookup.calls.length, flaky.calls.length], [1, 1, 1], 'each tool ran once')
      const sent = messagesOf((await h.server.seen(2)).body)
      assert.equal(sent.filter((message) => message.role === 'tool').length, 3, 'the continuation sent the three recorded results')
      assert.equal(await log.pendingSessions({ unanswered: true }), [], 'the turn is answered')
    },
  ),
)

test(
  "a handoff successor cut short lists the calls with effects its turn made before the seal: a resent message would make them again",
  engineTest([answer.toolCalls([{ name: 'save_note', arguments: { value: 1 } }]), answer.hang()], { ms: 30_000 }, async (h) => {
    let started: RunningInvocation | undefined
    let committed: Promise<HandoffPause> | undefined
    const saveNote = countingTool('save_note', async (_input, context) => {
      committed = started?.handoff().reserve(intentFor(context.invocation, 'review')).ready().then((held) => held.commit())
      return 'saved'
    })
    const input = h.input('n', { session: 'N', tools: [saveNote], content: 'save a note' })
    started = await h.start(input)
    assert.is((await started.wait()).status, 'handoff_paused')
    assert.ok(committed, 'the tool reserved a hold')
    await committed
    const found = await h.log.runSource('N', 'run-n')
    if (found?.pause === undefined) return assert.unreachable('sealed')
    // The successor's request is in flight when a shutdown cancels it.
    const shutdown = new AbortController()
    const successor: RunInput = { ...h.input('successor', { session: 'N', tools: [saveNote] }), invocation: successorOf(found.pause.intent, input.invocation), work: { kind: 'handoff', source: found.boundary, pause: found.pause } }
    const running = await h.start(successor, { signal: shutdown.signal })
    await h.server.seen(1)
    shutdown.abort('shutdown')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })

    const [session] = await h.log.pendingSessions({ unanswered: true })
    assert.equal([session?.unanswered?.runId, session?.unanswered?.kind, session?.unanswered?.outcome], ['run-n.review', 'handoff', { status: 'cancelled', source: 'shutdown' }])
    assert.equal(session?.unanswered?.effects, [{ operationId: 'invocation-n/step-1/0', name: 'save_note', status: 'succeeded' }], "the turn's call before the seal")
    assert.is(saveNote.calls.length, 1)
    const listed = collector()
    assert.is(await pendingCommand([h.logPath, '--unanswered'], listed.io), 0)
    assert.match(listed.out.join('\n'), /save_note succeeded/)
  }),
)

test(
  "a specialist's session whose last run records no call is tied to the latest call it records, by the hint's count as by its line: its supervisor still waits for that task",
  boundedTest(20_000, async (dir) => {
    const location = `${dir}/log`
    const log = await EventLog.open(location)
    try {
      // The supervisor's first run called the writer (op-1), its second run again (op-2): the writer's
      // session continues for each task, and its last run (a continuation without parent) was cancelled.
      const task = (name: string, parent: { run: string; operationId: string } | undefined, cancelled = false) => {
        const opened = facts.opened(`task ${name}`) as Extract<Fact, { type: 'invocation.opened' }>
        if (parent !== undefined && opened.input.kind === 'message') opened.input.parent = { invocation: invocationOf(parent.run, 'desk'), operationId: parent.operationId }
        const answered = cancelled ? [facts.ended({ status: 'cancelled', source: 'shutdown' })] : [facts.requested('s1'), facts.completed('s1', [], 'drafted'), facts.ended()]
        return new EventMaker(invocationOf(name, 'writer')).many([opened, ...answered])
      }
      await log.appendAll(completeInvocation('sup-1', 'desk'))
      await log.appendAll(task('w1', { run: 'sup-1', operationId: 'inv-sup-1/s1/0' }))
      await log.appendAll(completeInvocation('sup-2', 'desk'))
      await log.appendAll(task('w2', { run: 'sup-2', operationId: 'inv-sup-2/s1/0' }))
      await log.appendAll(task('w3', undefined, true))
    } finally {
      await log.close()
    }
    const listed = collector()
    assert.is(await pendingCommand([location, '--unanswered'], listed.io), 0)
    assert.equal(listed.out, ['writer: unanswered turn turn-w3: run run-w3 (inv-w3) ended cancelled shutdown at seq 26; a child run of inv-sup-2/s1/0 (session desk): settle it through its supervisor\'s recovery'])
    const hint = async () => {
      const plain = collector()
      assert.is(await pendingCommand([location], plain.io), 0)
      return plain.err.filter((line) => line.startsWith('hint:'))
    }
    assert.equal(await hint(), ['hint: 1 turn ended unanswered (cancelled or failed): factstate pending --unanswered lists it'], 'counted, as its line is not told nothing waits for it')
    // Run records as 0.6.0 wrote them (no parentOperationId): the opening facts say, and the count is the same.
    await withDb(location, async (db) => {
      for (const run of ['w1', 'w2', 'w3']) {
        const key = keys.run('writer', `run-${run}`)
        const { parentOperationId: _, ...older } = decodeRecord<Record<string, unknown>>((await db.get(key)) as Uint8Array, key)
        await db.put(key, encodeRecord(older))
      }
    })
    assert.equal(await hint(), ['hint: 1 turn ended unanswered (cancelled or failed): factstate pending --unanswered lists it'], 'counted from records without the member too')
  }),
)

test.run()
