/**
 * Tool timeouts (`ToolDefinition.timeoutMs`): past it a call's signal aborts with a `TimeoutError`.
 * What the tool then returns is recorded as usual; what it throws is recorded as a failure only for
 * a `readOnly` tool: a tool with effects that throws once its signal aborted may have had its effect
 * (a request its server received before the client gave up), so its call is left uncertain. A tool
 * that does not settle within a second more is not waited for. Either way the run ends
 * `failed{outcome_unknown}` with the call left dispatched and uncertain, as a crash leaves it, and
 * the session needs reconciliation; a `readOnly` tool not waited for has no effect to be uncertain
 * about, and settles failed. Bad values are refused before anything is written.
 */
import { mock } from 'node:test'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, recoverInvocations, type ToolContext, type ToolDefinition } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { engineTest, factsOf, messagesOf, only, refusedWithoutWriting } from './support/engine-fixtures.js'
import { rejectsWithCode } from './support/codes.js'
import { ABANDONED, TOOL_TIMEOUT_GRACE_MS, timedCall } from '../actors/invocation-actor.js'

/** A tool that fails with its signal's reason once the signal aborts (a tool that honours it, as `fetch` does); `readOnly` when asked. */
const politeTool = (name: string, timeoutMs?: number, readOnly = false): ToolDefinition => ({
  name,
  ...(timeoutMs === undefined ? {} : { timeoutMs }),
  ...(readOnly ? { readOnly: true } : {}),
  execute: (_input: unknown, { signal }: ToolContext) =>
    new Promise((_resolve, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason), { once: true })
    }),
})

/** A tool that ignores its signal and finishes only when `finish` is called. */
function stubbornTool(name: string, timeoutMs: number): ToolDefinition & { finish: () => void; started: number } {
  let finish = () => undefined as void
  const tool = {
    name,
    timeoutMs,
    started: 0,
    finish: () => finish(),
    execute: () => {
      tool.started += 1
      return new Promise((resolve) => {
        finish = () => resolve('finished late')
      })
    },
  }
  return tool
}

test(
  'a tool with effects that throws once timeoutMs aborted its signal leaves its outcome unknown: outcome_unknown, the call uncertain and never settled, the session to reconcile',
  engineTest([answer.toolCalls([{ id: 'call-slow', name: 'slow', arguments: {} }]), answer.text('went on')], {}, async (h) => {
    const tools = [politeTool('slow', 50)]
    const outcome = await h.run(h.input('polite', { tools, session: 'session-polite' }))
    assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
    assert.is(
      outcome.status === 'failed' ? outcome.message : '',
      'tool slow (operation invocation-polite/step-1/0) failed after its signal aborted (the tool did not finish within 50 ms (its timeoutMs)); its effect may or may not have happened',
    )
    const facts = await factsOf(h.log, 'invocation-polite')
    assert.equal(facts.map((fact) => fact.type), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'], 'no failure is claimed')
    const prefix = await h.log.prefix(100, 1 << 20)
    assert.equal(prefix.projectInvocation('invocation-polite').uncertainOperations, ['invocation-polite/step-1/0'])
    assert.is(h.server.requests.length, 1, 'the model is not told the call failed')
    const error = await refusedWithoutWriting(h.log, () => h.start(h.input('next', { tools, session: 'session-polite' })), 'RUN_RECONCILIATION_REQUIRED', 'a message after the unknown outcome')
    assert.equal((error.details as { unknown: { operationId: string }[] }).unknown.map((op) => op.operationId), ['invocation-polite/step-1/0'])
  }),
)

test(
  'a tool that returns once timeoutMs aborted its signal is recorded as it returned, and the run goes on',
  engineTest([answer.toolCalls([{ id: 'call-slow', name: 'slow', arguments: {} }]), answer.text('it said it stopped')], {}, async (h) => {
    const stops: ToolDefinition = {
      name: 'slow',
      timeoutMs: 50,
      execute: (_input: unknown, { signal }: ToolContext) =>
        new Promise((resolve) => signal.addEventListener('abort', () => resolve({ stopped: (signal.reason as Error).name, sent: false }), { once: true })),
    }
    assert.equal(await h.run(h.input('returns', { tools: [stops] })), { status: 'completed' })
    const facts = await factsOf(h.log, 'invocation-returns')
    assert.equal(only(facts, 'tool.settled').map((fact) => fact.outcome), [{ status: 'succeeded', output: { stopped: 'TimeoutError', sent: false } }])
  }),
)

test(
  'a read-only tool that honours its signal past timeoutMs settles failed with the limit named; the model is told and the run goes on',
  engineTest([answer.toolCalls([{ id: 'call-slow', name: 'slow', arguments: {} }]), answer.text('it was too slow')], {}, async (h) => {
    const input = h.input('polite', { tools: [politeTool('slow', 50, true)] })
    assert.equal(await h.run(input), { status: 'completed' })
    const facts = await factsOf(h.log, 'invocation-polite')
    assert.equal(only(facts, 'tool.settled').map((fact) => fact.outcome), [{ status: 'failed', message: 'TimeoutError: the tool did not finish within 50 ms (its timeoutMs)' }])
    const told = messagesOf(h.server.requests[1]?.body).find((message) => message.role === 'tool')
    assert.match(String(told?.content), /did not finish within 50 ms \(its timeoutMs\)/)
  }),
)

test(
  'a tool that ignores its signal is not waited for a second past timeoutMs: outcome_unknown, the call uncertain and never settled, the session to reconcile',
  engineTest([answer.toolCalls([{ id: 'call-stuck', name: 'stuck', arguments: {} }]), answer.text('went on')], {}, async (h) => {
    const stuck = stubbornTool('stuck', 50)
    const tools = [stuck]
    const outcome = await h.run(h.input('stuck', { tools, session: 'session-stuck' }))
    assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
    assert.match(
      outcome.status === 'failed' ? (outcome.message ?? '') : '',
      /^tool stuck \(operation invocation-stuck\/step-1\/0\) did not finish within 50 ms \(its timeoutMs\), nor within 1,000 ms of its signal aborting/,
    )
    const facts = await factsOf(h.log, 'invocation-stuck')
    assert.equal(
      facts.map((fact) => fact.type),
      ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'invocation.ended'],
      'no settlement is invented',
    )
    const prefix = await h.log.prefix(100, 1 << 20)
    assert.equal(prefix.projectInvocation('invocation-stuck').uncertainOperations, ['invocation-stuck/step-1/0'])
    assert.is(await recoverInvocations(h.log), 0, 'nothing is left open')
    // The tool finishing now writes nothing.
    const before = h.log.head()
    stuck.finish()
    await new Promise((resolve) => setTimeout(resolve, 50))
    assert.equal(h.log.head(), before)
    // As after a crash: the next message waits for the unknown effect to be acknowledged.
    await refusedWithoutWriting(h.log, () => h.start(h.input('next', { tools, session: 'session-stuck' })), 'RUN_RECONCILIATION_REQUIRED', 'a message after the unknown outcome')
    const acknowledged = h.input('next', { tools, session: 'session-stuck' })
    acknowledged.work = { kind: 'message', content: 'go on', allowPriorUnknown: true }
    assert.equal(await h.run(acknowledged), { status: 'completed' })
    assert.is(stuck.started, 1, 'the tool was run once')
  }),
)

test(
  'a read-only tool that ignores its signal is not waited for either, but it has no effect: its call settles failed, the model is told, the run goes on, and the session needs no reconciliation',
  engineTest([answer.toolCalls([{ id: 'call-search', name: 'search', arguments: {} }]), answer.text('I could not search'), answer.text('next')], {}, async (h) => {
    const search = { ...stubbornTool('search', 50), readOnly: true }
    const tools = [search]
    assert.equal(await h.run(h.input('hang', { tools, session: 'session-hang' })), { status: 'completed' })
    const message = 'the tool did not finish within 50 ms (its timeoutMs), nor within 1,000 ms of its signal aborting, and was not waited for: what it returns later is not recorded'
    const facts = await factsOf(h.log, 'invocation-hang')
    assert.equal(only(facts, 'tool.settled'), [{ type: 'tool.settled', operationId: 'invocation-hang/step-1/0', outcome: { status: 'failed', message } }])
    assert.equal(messagesOf(h.server.requests[1]?.body).find((m) => m.role === 'tool')?.content, `error: ${message}`)
    // The tool finishing now writes nothing, and the next message needs no acknowledgement.
    const before = h.log.head()
    search.finish()
    await new Promise((resolve) => setTimeout(resolve, 50))
    assert.equal(h.log.head(), before)
    assert.equal(await h.run(h.input('after', { tools, session: 'session-hang' })), { status: 'completed' })
  }),
)

test(
  'beside other calls, a call not waited for tells the others to stop; they settle, then the run ends outcome_unknown with that call alone uncertain',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-a', name: 'stuck', arguments: {} },
        { id: 'call-b', name: 'polite', arguments: {} },
      ]),
    ],
    {},
    async (h) => {
      const input = { ...h.input('side', { tools: [stubbornTool('stuck', 50), politeTool('polite', undefined, true)] }), toolConcurrency: 2 }
      const outcome = await h.run(input)
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      const facts = await factsOf(h.log, 'invocation-side')
      assert.equal(
        only(facts, 'tool.settled').map((fact) => [fact.operationId, fact.outcome.status]),
        [['invocation-side/step-1/1', 'failed']],
      )
      const settled = only(facts, 'tool.settled')[0]
      assert.match(settled?.outcome.status === 'failed' ? settled.outcome.message : '', /tool stuck .* did not finish within 50 ms/)
      const prefix = await h.log.prefix(100, 1 << 20)
      assert.equal(prefix.projectInvocation('invocation-side').uncertainOperations, ['invocation-side/step-1/0'])
    },
  ),
)

test(
  'a cancel waits for a tool that ignores its signal no longer than its timeoutMs and a second: outcome_unknown instead of a run that never ends',
  engineTest([answer.toolCalls([{ id: 'call-c', name: 'stuck', arguments: {} }])], {}, async (h) => {
    const stuck = stubbornTool('stuck', 200)
    const controller = new AbortController()
    const running = await h.start(h.input('cancel', { tools: [stuck] }), { signal: controller.signal })
    while (stuck.started === 0) await new Promise((resolve) => setTimeout(resolve, 5))
    controller.abort('shutdown')
    const outcome = await running.wait()
    assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
    await h.engine.drain()
    stuck.finish()
  }),
)

test(
  "the engine's toolTimeoutMs limits the calls of tools without a timeoutMs of their own; a tool's own wins",
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-d', name: 'defaulted', arguments: {} },
        { id: 'call-o', name: 'own', arguments: {} },
      ]),
      answer.text('both were too slow'),
    ],
    { engine: { toolTimeoutMs: 40 } },
    async (h) => {
      const input = h.input('defaulted', { tools: [politeTool('defaulted', undefined, true), politeTool('own', 80, true)] })
      assert.equal(await h.run(input), { status: 'completed' })
      assert.equal(
        only(await factsOf(h.log, 'invocation-defaulted'), 'tool.settled').map((fact) => fact.outcome),
        [
          { status: 'failed', message: "TimeoutError: the tool did not finish within 40 ms (the engine's toolTimeoutMs)" },
          { status: 'failed', message: 'TimeoutError: the tool did not finish within 80 ms (its timeoutMs)' },
        ],
      )
      for (const bad of [0, 2.5, 2 ** 31, '100']) {
        const error = await rejectsWithCode(async () => new Engine({ log: h.log, toolTimeoutMs: bad as number }), 'ENGINE_INVALID_OPTIONS', `toolTimeoutMs ${String(bad)}`)
        assert.equal(error.details, { field: 'toolTimeoutMs' })
      }
    },
  ),
)

test(
  'timeoutMs that is not a whole number of milliseconds from 1 to 2^31-1, or misspelt, is refused before anything is written',
  engineTest([], {}, async (h) => {
    for (const [value, field] of [
      [0, 'tools.0.timeoutMs'],
      [1.5, 'tools.0.timeoutMs'],
      [2 ** 31, 'tools.0.timeoutMs'],
      [Number.NaN, 'tools.0.timeoutMs'],
      ['1000', 'tools.0.timeoutMs'],
    ] as const) {
      const tool = { ...politeTool('slow'), timeoutMs: value as number }
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input('bad', { tools: [tool] })), 'RUN_INVALID_INPUT', `timeoutMs ${String(value)}`)
      assert.ok((error.details?.fields as string[] | undefined)?.includes(field), `${String(value)}: ${JSON.stringify(error.details)}`)
    }
    const misspelt = { ...politeTool('slow'), timeout: 1000 } as ToolDefinition
    const error = await refusedWithoutWriting(h.log, () => h.start(h.input('bad', { tools: [misspelt] })), 'RUN_INVALID_INPUT', 'timeout')
    assert.match(error.message, /timeout is not a member of a tool: did you mean timeoutMs\?/)
  }),
)

/** Tools that return the limit their context gives them (`null` for none), and note each attempt's; `retried` fails its first attempt. */
function limitTools(): { tools: ToolDefinition[]; seen: [string, number, number | null, boolean][] } {
  const seen: [string, number, number | null, boolean][] = []
  const told = (name: string, context: ToolContext) => {
    seen.push([name, context.attempt, context.timeoutMs ?? null, 'timeoutMs' in context])
    return { timeoutMs: context.timeoutMs ?? null }
  }
  return {
    seen,
    tools: [
      { name: 'defaulted', execute: (_input, context) => told('defaulted', context) },
      { name: 'own', timeoutMs: 5_000, execute: (_input, context) => told('own', context) },
      {
        name: 'retried',
        timeoutMs: 7_000,
        retry: { retries: 1, backoffMs: 1 },
        execute: (_input, context) => {
          const result = told('retried', context)
          if (context.attempt === 1) throw new Error('first attempt fails')
          return result
        },
      },
    ],
  }
}

const LIMIT_CALLS = [
  { id: 'call-d', name: 'defaulted', arguments: {} },
  { id: 'call-o', name: 'own', arguments: {} },
  { id: 'call-r', name: 'retried', arguments: {} },
]

test(
  "context.timeoutMs is the attempt's limit: the tool's timeoutMs, else the engine's toolTimeoutMs; each attempt of a retry gets the whole of it",
  engineTest([answer.toolCalls(LIMIT_CALLS), answer.text('done')], { engine: { toolTimeoutMs: 30_000 } }, async (h) => {
    const { tools, seen } = limitTools()
    assert.equal(await h.run(h.input('limits', { tools })), { status: 'completed' })
    assert.equal(
      only(await factsOf(h.log, 'invocation-limits'), 'tool.settled').map((fact) => fact.outcome),
      [
        { status: 'succeeded', output: { timeoutMs: 30_000 } },
        { status: 'succeeded', output: { timeoutMs: 5_000 } },
        { status: 'succeeded', output: { timeoutMs: 7_000 } },
      ],
    )
    assert.equal(seen, [
      ['defaulted', 1, 30_000, true],
      ['own', 1, 5_000, true],
      ['retried', 1, 7_000, true],
      ['retried', 2, 7_000, true],
    ])
  }),
)

test(
  'without a timeoutMs or the engine\'s toolTimeoutMs, context.timeoutMs is there and undefined: no limit',
  engineTest([answer.toolCalls(LIMIT_CALLS), answer.text('done')], {}, async (h) => {
    const { tools, seen } = limitTools()
    assert.equal(await h.run(h.input('no-limit', { tools })), { status: 'completed' })
    assert.equal(
      only(await factsOf(h.log, 'invocation-no-limit'), 'tool.settled').map((fact) => fact.outcome),
      [
        { status: 'succeeded', output: { timeoutMs: null } },
        { status: 'succeeded', output: { timeoutMs: 5_000 } },
        { status: 'succeeded', output: { timeoutMs: 7_000 } },
      ],
    )
    assert.equal(seen[0], ['defaulted', 1, null, true], 'the member is given, undefined')
  }),
)

test('the largest timeoutMs still leaves the tool its second of grace after its signal aborts (Node caps a timer at 2^31-1 ms)', async () => {
  const largest = 2_147_483_647
  mock.timers.enable({ apis: ['setTimeout'] })
  try {
    // A tool that honours its signal, taking half the grace to wind down.
    const result = timedCall(new AbortController().signal, largest, 'its timeoutMs', (signal) =>
      new Promise((resolve) => {
        signal.addEventListener('abort', () => setTimeout(() => resolve('wound down'), TOOL_TIMEOUT_GRACE_MS / 2), { once: true })
      }),
    )
    mock.timers.tick(largest)
    for (let turn = 0; turn < 10; turn += 1) await Promise.resolve()
    mock.timers.tick(TOOL_TIMEOUT_GRACE_MS / 2)
    const settled = await result
    assert.ok(settled !== ABANDONED, 'given up on at the very moment its signal aborted')
    assert.is(settled, 'wound down')
  } finally {
    mock.timers.reset()
  }
})

test.run()
