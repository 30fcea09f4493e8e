/**
 * Tool retries (`ToolDefinition.retry`): an attempt that threw is followed by another within the one
 * dispatch, under the same operation id (`context.attempt` counting them), after a backoff that a
 * cancel, the log's close or a call beside it failing ends at once. One `tool.dispatched` and one `tool.settled` whatever the attempts, the
 * settlement with the last attempt's outcome; a failure after several says how many were made. No
 * retry starts while an earlier attempt may still be running (an uncertain or abandoned attempt is
 * not retried), `retryOn` may decline one, a crash during the backoff leaves the call uncertain as a
 * crash mid-call does, bad policies are refused before anything is written, and callTool agrees.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { answerOf, childRunFor, childRunOf, EventLog, type RunningInvocation, recoverInvocations, type ToolContext, type ToolDefinition, type ToolRetry } from '../index.js'
import { callTool } from '../testing/call-tool.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { engineTest, factsOf, messagesOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'
import { killChildAt } from './support/log-fixtures.js'

/** One attempt as the tool saw it. */
interface Seen {
  operationId: string
  attempt: number
}

/**
 * A tool named `charge` with `retry` whose attempt `n` does `plan[n - 1]`: a thrown error, or a value
 * returned; past the plan it throws `attempt n failed`. Keeps what each attempt was given.
 */
function plannedTool(retry: ToolRetry | undefined, plan: readonly (Error | unknown)[], extra: Partial<ToolDefinition> = {}): ToolDefinition & { seen: Seen[] } {
  const seen: Seen[] = []
  return {
    name: 'charge',
    description: 'charges a card',
    inputSchema: { type: 'object', properties: { cents: { type: 'integer' } } },
    ...(retry === undefined ? {} : { retry }),
    ...extra,
    seen,
    execute: async (_input: unknown, context: ToolContext) => {
      seen.push({ operationId: context.operationId, attempt: context.attempt })
      const step = plan[context.attempt - 1] ?? new Error(`attempt ${context.attempt} failed`)
      if (step instanceof Error) throw step
      return step
    },
  }
}

const CHARGE = [answer.toolCalls([{ id: 'call-1', name: 'charge', arguments: { cents: 500 } }]), answer.text('done')]
const FAST = { backoffMs: 1, maxBackoffMs: 5 }

/** The same operation id on each of `attempts` attempts, counted from 1. */
const attemptsOf = (operationId: string, attempts: number): Seen[] => Array.from({ length: attempts }, (_, index) => ({ operationId, attempt: index + 1 }))

test(
  'an attempt that threw is retried under the same operation id, context.attempt counting up; success on the second records succeeded with its output, one dispatch and one settlement',
  engineTest(CHARGE, {}, async (h) => {
    const charge = plannedTool({ retries: 3, ...FAST }, [new Error('ECONNRESET'), { charged: 500 }])
    assert.equal(await h.run(h.input('ok', { tools: [charge] })), { status: 'completed' })
    assert.equal(charge.seen, attemptsOf('invocation-ok/step-1/0', 2))
    const facts = await factsOf(h.log, 'invocation-ok')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'model.requested', 'model.completed', 'invocation.ended'],
    )
    assert.equal(only(facts, 'tool.dispatched').map((fact) => fact.operationId), ['invocation-ok/step-1/0'])
    assert.equal(only(facts, 'tool.settled'), [{ type: 'tool.settled', operationId: 'invocation-ok/step-1/0', outcome: { status: 'succeeded', output: { charged: 500 } } }])
    const told = messagesOf(h.server.requests[1]?.body).find((m) => m.role === 'tool')
    assert.is(told?.content, '{"charged":500}')
  }),
)

test(
  'every attempt failing: retries + 1 attempts, then one settlement failed with the last failure and how many attempts were made; the model is told and the run goes on',
  engineTest(CHARGE, {}, async (h) => {
    const charge = plannedTool({ retries: 2, ...FAST }, [])
    assert.equal(await h.run(h.input('spent', { tools: [charge] })), { status: 'completed' })
    assert.equal(charge.seen, attemptsOf('invocation-spent/step-1/0', 3))
    const facts = await factsOf(h.log, 'invocation-spent')
    assert.is(only(facts, 'tool.dispatched').length, 1)
    assert.equal(only(facts, 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message: 'after 3 attempts: attempt 3 failed' }])
    const told = messagesOf(h.server.requests[1]?.body).find((m) => m.role === 'tool')
    assert.is(told?.content, 'error: after 3 attempts: attempt 3 failed')
  }),
)

class Declined extends Error {
  override name = 'Declined'
}

test(
  'retryOn decides with the error and the attempt: false (or anything but true, or a throw) stops at once, with the failure of the attempt it declined (and, for a throw, that retryOn threw and what)',
  engineTest([answer.toolCalls(['stop', 'later', 'odd', 'throws'].map((id) => ({ id, name: id, arguments: {} }))), answer.text('done')], {}, async (h) => {
    const asked: [string, number][] = []
    const retryOn = (verdict: (error: unknown, attempt: number) => unknown) => (error: unknown, attempt: number) => {
      asked.push([error instanceof Error ? error.message : String(error), attempt])
      return verdict(error, attempt) as boolean
    }
    const tools = [
      // Declined at once: one attempt, told as a tool without retries tells it.
      plannedTool({ retries: 5, ...FAST, retryOn: retryOn((error) => !(error instanceof Declined)) }, [new Declined('card declined')], { name: 'stop' }),
      // Retried once, then declined.
      plannedTool({ retries: 5, ...FAST, retryOn: retryOn((error) => !(error instanceof Declined)) }, [new Error('timeout'), new Declined('card declined')], { name: 'later' }),
      // Truthy is not true.
      plannedTool({ retries: 5, ...FAST, retryOn: retryOn(() => 'yes') }, [new Error('odd')], { name: 'odd' }),
      plannedTool(
        {
          retries: 5,
          ...FAST,
          retryOn: retryOn(() => {
            throw new Error('retryOn bug')
          }),
        },
        [new Error('first')],
        { name: 'throws' },
      ),
    ]
    assert.equal(await h.run(h.input('declined', { tools })), { status: 'completed' })
    assert.equal(
      tools.map((tool) => tool.seen.length),
      [1, 2, 1, 1],
    )
    assert.equal(asked, [
      ['card declined', 1],
      ['timeout', 1],
      ['card declined', 2],
      ['odd', 1],
      ['first', 1],
    ])
    const facts = await factsOf(h.log, 'invocation-declined')
    assert.is(only(facts, 'tool.dispatched').length, 4)
    assert.equal(
      only(facts, 'tool.settled').map((fact) => fact.outcome),
      [
        { status: 'failed', message: 'Declined: card declined' },
        { status: 'failed', message: 'after 2 attempts: Declined: card declined' },
        { status: 'failed', message: 'odd' },
        // A retryOn that threw is said to have: a bug in it is not taken for a decision not to retry.
        { status: 'failed', message: 'after 1 attempt: first (no retry was made: its retryOn threw: retryOn bug)' },
      ],
    )
    // callTool tells it alike, with the thrown error's class.
    const broken = plannedTool(
      {
        retries: 2,
        ...FAST,
        retryOn: () => {
          throw new TypeError("Cannot read properties of undefined (reading 'status')")
        },
      },
      [new Error('ECONNRESET')],
    )
    assert.equal(await callTool(broken, {}), {
      status: 'failed',
      message: "after 1 attempt: ECONNRESET (no retry was made: its retryOn threw: TypeError: Cannot read properties of undefined (reading 'status'))",
    })
    assert.is(broken.seen.length, 1, 'no retry was made')
    // After a retry was made, one that throws stopped the next: "no retry was made" would deny the one made.
    const later = plannedTool(
      {
        retries: 3,
        ...FAST,
        retryOn: (_error, attempt) => {
          if (attempt === 1) return true
          throw new Error('retryOn bug')
        },
      },
      [new Error('ECONNRESET'), new Error('ETIMEDOUT')],
    )
    assert.equal(await callTool(later, {}), { status: 'failed', message: 'after 2 attempts: ETIMEDOUT (no further retry was made: its retryOn threw: retryOn bug)' })
    assert.is(later.seen.length, 2)
  }),
)

test(
  'an async retryOn retries nothing: its promise is not true, and a rejection of it is caught, not left unhandled (which would end the process)',
  engineTest([answer.toolCalls(['resolves', 'rejects'].map((id) => ({ id, name: id, arguments: {} }))), answer.text('done')], {}, async (h) => {
    const unhandled: unknown[] = []
    const listener = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', listener)
    try {
      // As a caller without types would give them: TypeScript refuses an async retryOn.
      const resolves = (async () => true) as unknown as ToolRetry['retryOn']
      const rejects = (async () => {
        throw new Error('retryOn lookup failed')
      }) as unknown as ToolRetry['retryOn']
      const tools = [
        plannedTool({ retries: 3, ...FAST, retryOn: resolves }, [new Error('ECONNRESET')], { name: 'resolves' }),
        plannedTool({ retries: 3, ...FAST, retryOn: rejects }, [new Error('ECONNRESET')], { name: 'rejects' }),
      ]
      assert.equal(await h.run(h.input('async', { tools })), { status: 'completed' })
      assert.equal(
        tools.map((tool) => tool.seen.length),
        [1, 1],
      )
      assert.equal(
        only(await factsOf(h.log, 'invocation-async'), 'tool.settled').map((fact) => fact.outcome),
        [
          { status: 'failed', message: 'ECONNRESET' },
          { status: 'failed', message: 'ECONNRESET' },
        ],
      )
      assert.equal(await callTool(plannedTool({ retries: 3, ...FAST, retryOn: rejects }, [new Error('ECONNRESET')]), {}), { status: 'failed', message: 'ECONNRESET' })
      // An unhandled rejection is reported once the microtasks of the turn it happened in have run.
      await new Promise((resolve) => setImmediate(resolve))
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(unhandled, [])
    } finally {
      process.off('unhandledRejection', listener)
    }
  }),
)

test(
  'a cancel during the backoff ends it at once: no further attempt, the call settles failed with the last failure and why no more were made, and the run ends cancelled',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'charge', arguments: { cents: 500 } }])], {}, async (h) => {
    // A backoff longer than the test's bound: only the cancel can end it in time.
    const { charge, failed: first } = backingOff()
    const controller = new AbortController()
    const running = await h.start(h.input('cancel', { tools: [charge] }), { signal: controller.signal })
    await first
    controller.abort('shutdown')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })
    assert.equal(charge.seen, attemptsOf('invocation-cancel/step-1/0', 1))
    const facts = await factsOf(h.log, 'invocation-cancel')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'invocation.ended'],
    )
    assert.equal(only(facts, 'tool.settled').map((fact) => fact.outcome), [
      { status: 'failed', message: 'after 1 attempt: attempt 1 failed (no further attempt was started: its signal aborted during the backoff: shutdown)' },
    ])
  }),
)

/** `charge` with a backoff longer than any test's bound, and a promise that resolves once its first attempt has failed. */
function backingOff(): { charge: ToolDefinition & { seen: Seen[] }; failed: Promise<void> } {
  let failed = () => undefined as void
  const first = new Promise<void>((resolve) => (failed = resolve))
  const charge = plannedTool({ retries: 3, backoffMs: 60_000, maxBackoffMs: 60_000 }, [])
  const execute = charge.execute
  charge.execute = async (input, context) => {
    try {
      return await execute(input, context)
    } finally {
      setImmediate(failed)
    }
  }
  return { charge, failed: first }
}

test(
  "the log closing during the backoff ends it at once: wait() rejects LOG_CLOSED, nothing more is written, and the call is left dispatched, as a running tool's is",
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'charge', arguments: {} }])], {}, async (h) => {
    const { charge, failed } = backingOff()
    // Not one of the harness's runs: recovery, not the live run, ends it in the log.
    const running = await h.engine.start(h.input('closed', { tools: [charge] }))
    await failed
    const before = h.log.head()
    await h.log.close()
    assert.is(await running.wait().then(() => 'ended', (error: { code?: string }) => error.code), 'LOG_CLOSED')
    await h.engine.drain()
    h.log = await EventLog.open(h.logPath)
    assert.equal(h.log.head(), before, 'nothing was written after close()')
    assert.is((await factsOf(h.log, 'invocation-closed')).at(-1)?.type, 'tool.dispatched')
    assert.is(await recoverInvocations(h.log), 1)
    assert.is(charge.seen.length, 1)
    const ended = (await factsOf(h.log, 'invocation-closed')).at(-1)
    assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'outcome_unknown')
  }),
)

test(
  'a call beside it not waited for (toolConcurrency) ends the backoff: no further attempt, the call settles failed with why, and the run ends outcome_unknown for the other call',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-1', name: 'charge', arguments: {} },
        { id: 'call-2', name: 'stuck', arguments: {} },
      ]),
    ],
    {},
    async (h) => {
      const { charge } = backingOff()
      const stuck: ToolDefinition = { name: 'stuck', timeoutMs: 20, execute: () => new Promise(() => undefined) }
      const input = { ...h.input('beside', { tools: [charge, stuck] }), toolConcurrency: 2 }
      const outcome = await h.run(input)
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      assert.is(charge.seen.length, 1)
      const facts = await factsOf(h.log, 'invocation-beside')
      assert.equal(only(facts, 'tool.dispatched').map((fact) => fact.name), ['charge', 'stuck'])
      const settled = only(facts, 'tool.settled')
      assert.equal(settled.map((fact) => fact.operationId), ['invocation-beside/step-1/0'])
      const message = settled[0]?.outcome.status === 'failed' ? settled[0].outcome.message : ''
      assert.match(message, /^after 1 attempt: attempt 1 failed \(no further attempt was started: its signal aborted during the backoff: tool stuck \(operation invocation-beside\/step-1\/1\) did not finish within 20 ms/)
      assert.match(message, /its effect may or may not have happened\)$/)
    },
  ),
)

test(
  'timeoutMs limits each attempt: a read-only attempt that honoured its timeout is retried; a tool with effects that threw once its timeout aborted it, or a read-only one not waited for, is not (it may have had its effect, or still be running)',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-s', name: 'search', arguments: {} },
        { id: 'call-w', name: 'wedged', arguments: {} },
      ]),
      answer.text('searched'),
      answer.toolCalls([{ id: 'call-c', name: 'charge', arguments: {} }]),
    ],
    { ms: 15_000 },
    async (h) => {
      const honours = (_input: unknown, { signal }: ToolContext) =>
        new Promise((_resolve, reject) => {
          signal.addEventListener('abort', () => reject(signal.reason), { once: true })
        })
      const searched: number[] = []
      const search: ToolDefinition = {
        name: 'search',
        readOnly: true,
        timeoutMs: 30,
        retry: { retries: 2, ...FAST },
        execute: (input, context) => {
          searched.push(context.attempt)
          return context.attempt === 1 ? honours(input, context) : { hits: 3 }
        },
      }
      let wedgedAttempts = 0
      const wedged: ToolDefinition = {
        name: 'wedged',
        readOnly: true,
        timeoutMs: 30,
        retry: { retries: 2, ...FAST },
        execute: () => {
          wedgedAttempts += 1
          return new Promise(() => undefined)
        },
      }
      assert.equal(await h.run(h.input('reads', { tools: [search, wedged] })), { status: 'completed' })
      assert.equal(searched, [1, 2])
      assert.is(wedgedAttempts, 1)
      const settled = only(await factsOf(h.log, 'invocation-reads'), 'tool.settled').map((fact) => fact.outcome)
      assert.equal(settled, [
        { status: 'succeeded', output: { hits: 3 } },
        { status: 'failed', message: 'the tool did not finish within 30 ms (its timeoutMs), nor within 1,000 ms of its signal aborting, and was not waited for: what it returns later is not recorded' },
      ])

      let charged = 0
      const charge: ToolDefinition = {
        name: 'charge',
        timeoutMs: 30,
        retry: { retries: 2, ...FAST },
        execute: (input, context) => {
          charged += 1
          return honours(input, context)
        },
      }
      const outcome = await h.run(h.input('effects', { tools: [charge] }))
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      assert.is(charged, 1)
      const facts = await factsOf(h.log, 'invocation-effects')
      assert.is(only(facts, 'tool.dispatched').length, 1)
      assert.is(only(facts, 'tool.settled').length, 0, 'left dispatched, uncertain, as without retries')
      assert.equal((await h.log.prefix(100, 1 << 20)).projectInvocation('invocation-effects').uncertainOperations, ['invocation-effects/step-1/0'])
    },
  ),
)

test(
  'a result that cannot be recorded is not retried: the tool ran',
  engineTest(CHARGE, { engine: { maxToolResultBytes: 100 } }, async (h) => {
    let attempts = 0
    const charge: ToolDefinition = {
      name: 'charge',
      retry: { retries: 3, ...FAST },
      execute: async () => {
        attempts += 1
        return 'x'.repeat(1_000)
      },
    }
    assert.equal(await h.run(h.input('unrecorded', { tools: [charge] })), { status: 'completed' })
    assert.is(attempts, 1)
    const settled = only(await factsOf(h.log, 'invocation-unrecorded'), 'tool.settled').map((fact) => fact.outcome)
    assert.is(settled.length, 1)
    assert.match(String(settled[0]?.status === 'failed' && settled[0].message), /^the tool ran, but its result could not be recorded/)
  }),
)

/** `charge` whose first attempt throws, and whose second (past its 30 ms timeoutMs) rejects with its signal's reason, as `fetch` does. */
function uncertainSecond(): ToolDefinition & { seen: Seen[] } {
  const charge = plannedTool({ retries: 2, ...FAST }, [new Error('ECONNRESET')], { timeoutMs: 30 })
  const execute = charge.execute
  charge.execute = (input, context) => {
    if (context.attempt === 1) return execute(input, context)
    charge.seen.push({ operationId: context.operationId, attempt: context.attempt })
    return new Promise((_resolve, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason), { once: true }))
  }
  return charge
}

const UNCERTAIN_SECOND = 'failed after 2 attempts, the last after its signal aborted (the tool did not finish within 30 ms (its timeoutMs)); its effect may or may not have happened'

test(
  'an attempt after the first that throws once its signal aborted ends the run outcome_unknown saying the abort once, with the count beside it',
  engineTest(CHARGE, {}, async (h) => {
    const charge = uncertainSecond()
    const outcome = await h.run(h.input('second', { tools: [charge] }))
    assert.equal(outcome, { status: 'failed', class: 'outcome_unknown', message: `tool charge (operation invocation-second/step-1/0) ${UNCERTAIN_SECOND}` })
    assert.equal(charge.seen, attemptsOf('invocation-second/step-1/0', 2))
    assert.is(only(await factsOf(h.log, 'invocation-second'), 'tool.settled').length, 0)
    assert.equal(await callTool(uncertainSecond(), {}), { status: 'unknown', message: `tool charge ${UNCERTAIN_SECOND}` })
  }),
)

test('a failure after several attempts is cut once at maxToolResultBytes, after the count and any note are added: the cut states the size of what was cut, and the failure comes before the note', async () => {
  const long = plannedTool({ retries: 1, ...FAST }, [new Error('x'.repeat(10_000)), new Error('y'.repeat(10_000))])
  const told = await callTool(long, {}, { maxToolResultBytes: 200 })
  const message = told.status === 'failed' ? told.message : ''
  assert.is(message, `after 2 attempts: ${'y'.repeat(200 - 'after 2 attempts: '.length)}… (cut: the message is 10,018 bytes, over the engine's limit of 200 bytes, maxToolResultBytes)`)

  const controller = new AbortController()
  const shutdown = 'the host is shutting down for its maintenance window, come back later; '.repeat(4)
  const declined = plannedTool({ retries: 1, backoffMs: 60_000, maxBackoffMs: 60_000 }, [new Error('card declined: insufficient funds')])
  const execute = declined.execute
  declined.execute = async (input, context) => {
    try {
      return await execute(input, context)
    } finally {
      setImmediate(() => controller.abort(new Error(shutdown)))
    }
  }
  const stopped = await callTool(declined, {}, { maxToolResultBytes: 200, signal: controller.signal })
  const kept = stopped.status === 'failed' ? stopped.message : ''
  assert.ok(kept.startsWith('after 1 attempt: card declined: insufficient funds (no further attempt was started: its signal aborted during the backoff: the host is shutting down'), kept)
  assert.match(kept, /… \(cut: the message is [\d,]+ bytes, over the engine's limit of 200 bytes, maxToolResultBytes\)$/)
})

test(
  "a delegate tool with retry: attempt 2 is refused the child attempt 1 started (the same operationId, hence the same ids), and finds it instead, as the README's recipe does: one child run, its answer returned",
  engineTest([...Array.from({ length: 2 }, () => [answer.toolCalls([{ id: 'call-1', name: 'delegate', arguments: {} }]), answer.text('the draft'), answer.text('done')]).flat()], {}, async (h) => {
    const refused: string[] = []
    /** attempt 1 starts the child, which finishes, then fails; a later one starts it again (`naive`) or looks it up. */
    const delegate = (naive: boolean): ToolDefinition => ({
      name: 'delegate',
      retry: { retries: 1, ...FAST },
      execute: async (_input: unknown, context: ToolContext) => {
        const ids = childRunFor(context, 'writer')
        let child: RunningInvocation | undefined
        if (context.attempt > 1 && !naive) {
          child = h.engine.running(ids.invocation.invocationId)
          const last = child === undefined ? (await h.log.runs(ids.invocation.sessionId)).at(-1) : undefined
          if (last !== undefined) return { status: last.terminal, answer: answerOf(await h.log.invocationEvents(last.invocationId)) ?? null }
        }
        try {
          child ??= await h.engine.start({ ...h.input('child'), ...ids }, { signal: context.signal })
        } catch (error) {
          refused.push(`attempt ${context.attempt}: ${(error as { code?: string; details?: { reason?: string } }).code} ${(error as { details?: { reason?: string } }).details?.reason}`)
          throw error
        }
        const outcome = await child.wait()
        if (context.attempt === 1) throw new Error('the connection dropped after the child finished')
        return { status: outcome.status, answer: answerOf(await h.log.invocationEvents(child.invocation.invocationId)) ?? null }
      },
    })
    assert.equal(await h.run(h.input('sup', { tools: [delegate(false)] })), { status: 'completed' })
    assert.equal(refused, [])
    const settled = only(await factsOf(h.log, 'invocation-sup'), 'tool.settled')
    assert.equal(settled.map((fact) => fact.outcome), [{ status: 'succeeded', output: { status: 'completed', answer: 'the draft' } }])
    assert.is((await h.log.runs(childRunOf('invocation-sup/step-1/0', 'writer').sessionId)).length, 1, 'one child run')
    // Started again, the child is refused: the recipe is needed.
    const naive = await h.run(h.input('naive', { tools: [delegate(true)] }))
    assert.is(naive.status, 'completed')
    assert.equal(refused, ['attempt 2: RUN_INVALID_INPUT exists'])
  }),
)

/** Retry policies a run refuses, and the field each is refused at. */
const BAD: [string, unknown, string, RegExp][] = [
  ['not an object', 3, 'tools.0.retry', /retry must be an object/],
  ['no retries', { backoffMs: 10 }, 'tools.0.retry.retries', /retries is required/],
  ['negative retries', { retries: -1 }, 'tools.0.retry.retries', /retries must be a whole number from 0 to 10/],
  ['too many retries', { retries: 11 }, 'tools.0.retry.retries', /from 0 to 10/],
  ['fractional retries', { retries: 1.5 }, 'tools.0.retry.retries', /whole number/],
  ['backoffMs as text', { retries: 1, backoffMs: '10' }, 'tools.0.retry.backoffMs', /backoffMs/],
  ['negative backoffMs', { retries: 1, backoffMs: -1 }, 'tools.0.retry.backoffMs', /whole number of milliseconds/],
  ['backoffMs over maxBackoffMs', { retries: 1, backoffMs: 500, maxBackoffMs: 100 }, 'tools.0.retry.backoffMs', /longer than maxBackoffMs \(100\)/],
  ['backoffMs over the default maxBackoffMs', { retries: 1, backoffMs: 20_000 }, 'tools.0.retry.backoffMs', /maxBackoffMs \(10000, the default\)/],
  ['maxBackoffMs under the default backoffMs', { retries: 3, maxBackoffMs: 100 }, 'tools.0.retry.maxBackoffMs', /backoffMs \(250, the default\) is longer than maxBackoffMs \(100\)/],
  ['maxBackoffMs 0 under the default backoffMs', { retries: 1, maxBackoffMs: 0 }, 'tools.0.retry.maxBackoffMs', /backoffMs \(250, the default\)/],
  ['maxBackoffMs past a timer', { retries: 1, maxBackoffMs: 2 ** 31 }, 'tools.0.retry.maxBackoffMs', /2,147,483,647/],
  ['retryOn not a function', { retries: 1, retryOn: true }, 'tools.0.retry.retryOn', /retryOn must be a function/],
  ['attempts', { attempts: 3 }, 'tools.0.retry.attempts', /attempts is not a member of a retry policy .*retries counts the retries after the first attempt/],
  ['backoffFactor', { retries: 1, backoffFactor: 3 }, 'tools.0.retry.backoffFactor', /doubles/],
]

test(
  'a retry policy that is no policy is RUN_INVALID_INPUT naming its field, before anything is written; callTool refuses it with TESTING_INVALID_OPTIONS',
  engineTest([], {}, async (h) => {
    for (const [what, retry, field, message] of BAD) {
      const tool = { ...plannedTool(undefined, []), retry } as ToolDefinition
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input('bad', { tools: [tool] })), 'RUN_INVALID_INPUT', what)
      assert.ok((error.details?.fields as string[] | undefined)?.includes(field), `${what}: ${JSON.stringify(error.details)}`)
      assert.match(error.message, message, what)
      const refused = await rejectsWithCode(() => callTool(tool, {}), 'TESTING_INVALID_OPTIONS', `callTool, ${what}`)
      assert.is(refused.details?.field, field.replace(/^tools\.0/, 'tool'), `callTool, ${what}`)
    }
    const misnamed = { ...plannedTool(undefined, []), retries: 3 } as ToolDefinition
    const error = await refusedWithoutWriting(h.log, () => h.start(h.input('bad', { tools: [misnamed] })), 'RUN_INVALID_INPUT', 'retries on the tool')
    assert.match(error.message, /retries is not a member of a tool: did you mean retry\.retries\?/)
    // A policy member beside a retry (which would otherwise be taken for the tool's own, and apply nowhere), and
    // a second time limit beside timeoutMs: refused, pointed where they go; callTool refuses them alike.
    const beside: [string, Record<string, unknown>, string][] = [
      ['retries beside retry', { retry: { retries: 1 }, retries: 3 }, 'retries is not a member of a tool: did you mean retry.retries? (retry takes { retries, backoffMs?, maxBackoffMs?, retryOn? })'],
      ['backoffMs beside retry', { retry: { retries: 1 }, backoffMs: 5 }, 'backoffMs is not a member of a tool: did you mean retry.backoffMs?'],
      ['maxRetries without retry', { maxRetries: 2 }, 'maxRetries is not a member of a tool: did you mean retry.retries?'],
      ['retryOn beside retry', { retry: { retries: 1 }, retryOn: () => true }, 'retryOn is not a member of a tool: did you mean retry.retryOn?'],
      ['timeout beside timeoutMs', { timeoutMs: 1_000, timeout: 5 }, 'timeout is not a member of a tool: did you mean timeoutMs?'],
      ['timeout_ms beside timeoutMs', { timeoutMs: 1_000, timeout_ms: 5 }, 'timeout_ms is not a member of a tool: did you mean timeoutMs?'],
    ]
    for (const [what, members, message] of beside) {
      const tool = { ...plannedTool(undefined, []), ...members } as ToolDefinition
      const field = Object.keys(members).at(-1) as string
      const refused = await refusedWithoutWriting(h.log, () => h.start(h.input('bad', { tools: [tool] })), 'RUN_INVALID_INPUT', what)
      assert.equal(refused.details?.fields, [`tools.0.${field}`], what)
      assert.match(refused.message, message, what)
      assert.is((await rejectsWithCode(() => callTool(tool, {}), 'TESTING_INVALID_OPTIONS', `callTool, ${what}`)).details?.field, `tool.${field}`, `callTool, ${what}`)
    }
    // A member of the tool's own that only resembles one beside it stays the tool's (an `executor` beside `execute`).
    const own = { ...plannedTool(undefined, [{ ok: true }]), retry: { retries: 1 }, delayMs: 5, executor: 'mine' } as ToolDefinition
    assert.equal(await callTool(own, {}), { status: 'succeeded', output: { ok: true } })
  }),
)

/**
 * `charge` (failing every attempt up to its 50th) whose `member` reads `valid` for its first `reads`
 * reads and `later` from then on: the checks of what was given read it, then what runs must be checked too.
 */
function shifty(member: 'timeoutMs' | 'retry', reads: number, valid: unknown, later: unknown): ToolDefinition & { seen: Seen[] } {
  const charge = plannedTool(undefined, [...Array.from({ length: 49 }, () => new Error('ECONNRESET')), { charged: 500 }])
  let read = 0
  return Object.defineProperty(charge, member, {
    enumerable: true,
    get: () => {
      read += 1
      return read <= reads ? valid : later
    },
  })
}

test(
  "the timeoutMs and retry a call runs with are the ones checked: read once into the run's copy and the copy checked, so a getter that reads otherwise after the input's checks is RUN_INVALID_INPUT (callTool: TESTING_INVALID_OPTIONS), never a call retried without end; a getter that throws is refused with a code too",
  engineTest([], {}, async (h) => {
    // The run input is checked twice (as given, then its copy), callTool's tool once: each read of those sees the valid value.
    const cases: ['timeoutMs' | 'retry', unknown, unknown, string][] = [
      ['retry', { retries: 1, ...FAST }, { retries: Number.NaN, ...FAST }, 'retry.retries'],
      ['retry', { retries: 1, ...FAST }, { retries: 1_000_000_000, ...FAST }, 'retry.retries'],
      ['retry', { retries: 1, ...FAST }, 'never', 'retry'],
      ['timeoutMs', 1_000, Number.NaN, 'timeoutMs'],
    ]
    for (const [member, valid, later, field] of cases) {
      const what = `${member} read as ${String(JSON.stringify(later) ?? later)} after its checks`
      const tool = shifty(member, 2, valid, later)
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input('shifty', { tools: [tool] })), 'RUN_INVALID_INPUT', what)
      assert.equal(error.details?.fields, [`tools.0.${field}`], what)
      assert.is(tool.seen.length, 0, what)
      const alone = shifty(member, 1, valid, later)
      const refused = await rejectsWithCode(() => callTool(alone, {}), 'TESTING_INVALID_OPTIONS', `callTool, ${what}`)
      assert.is(refused.details?.field, `tool.${field}`, `callTool, ${what}`)
      assert.is(alone.seen.length, 0, `callTool, ${what}`)
    }
    for (const member of ['timeoutMs', 'retry'] as const) {
      const throwing = Object.defineProperty(plannedTool(undefined, []), member, {
        enumerable: true,
        get: () => {
          throw new Error('boom')
        },
      })
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input('throwing', { tools: [throwing] })), 'RUN_INVALID_INPUT', `${member} throws`)
      assert.match(error.message, /cannot be read: boom/)
      const refused = await rejectsWithCode(() => callTool(throwing, {}), 'TESTING_INVALID_OPTIONS', `callTool, ${member} throws`)
      assert.is(refused.details?.field, 'tool', `callTool, ${member} throws`)
      assert.match(refused.message, /callTool: the tool cannot be read: boom$/)
      assert.is(throwing.seen.length, 0)
    }
  }),
)

test('callTool honours the policy as a run does: the same operation id, success on a later attempt, exhaustion with the count, a signal aborted during the backoff', async () => {
  const later = plannedTool({ retries: 3, ...FAST }, [new Error('ECONNRESET'), { charged: 500 }])
  assert.equal(await callTool(later, { cents: 500 }, { operationId: 'op-1' }), { status: 'succeeded', output: { charged: 500 } })
  assert.equal(later.seen, attemptsOf('op-1', 2))

  const never = plannedTool({ retries: 2, ...FAST }, [])
  assert.equal(await callTool(never, {}), { status: 'failed', message: 'after 3 attempts: attempt 3 failed' })
  assert.equal(never.seen, attemptsOf('invocation-1/step-1/0', 3))

  const controller = new AbortController()
  const slow = plannedTool({ retries: 2, backoffMs: 60_000, maxBackoffMs: 60_000 }, [])
  const execute = slow.execute
  slow.execute = async (input, context) => {
    try {
      return await execute(input, context)
    } finally {
      setImmediate(() => controller.abort('stop'))
    }
  }
  assert.equal(await callTool(slow, {}, { signal: controller.signal }), {
    status: 'failed',
    message: 'after 1 attempt: attempt 1 failed (no further attempt was started: its signal aborted during the backoff: stop)',
  })
  assert.is(slow.seen.length, 1)
})

let crashedOperation = ''

/** A child runs an engine whose tool's first attempt throws, and is killed during the minute's backoff; recovery then runs on the reopened log. */
async function crashDuringBackoff(logPath: string): Promise<void> {
  crashedOperation = await killChildAt('child-engine-tool.ts', [logPath, 'retry'], 'backing off ')
  const log = await EventLog.open(logPath)
  try {
    const before = await log.prefix(100, 1 << 20)
    assert.equal(before.projectInvocation('invocation-crash'), { terminal: null, uncertainOperations: [crashedOperation], unfinishedModelSteps: [] })
    assert.is(await recoverInvocations(log), 1)
  } finally {
    await log.close()
  }
}

test(
  'a crash during the backoff leaves the call dispatched and never settled: its outcome unknown, as a crash mid-call leaves it',
  engineTest([], { ms: 30_000, before: crashDuringBackoff }, async (h) => {
    const facts = await factsOf(h.log, 'invocation-crash')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'],
      'no settlement is invented',
    )
    assert.is(only(facts, 'tool.dispatched')[0]?.operationId, crashedOperation)
    const ended = facts.at(-1)
    assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'outcome_unknown')
  }),
)

test.run()
