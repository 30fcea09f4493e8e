/**
 * Approval of single tool calls (`ToolDefinition.needsApproval`, `StartOptions.onApproval`): a call
 * of such a tool is dispatched only once the approver says yes, with the decision in its
 * `tool.dispatched`; a denial is `tool.rejected{denied}` and the model is told why; a cancel while
 * the approver thinks rejects the call; a crash then leaves it never dispatched (a real child
 * process is SIGKILLed while its approver is asked).
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, recoverInvocations, type ApprovalRequest, type NeedsApproval } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, messagesOf, only, refusedWithoutWriting, typesOf } from './support/engine-fixtures.js'
import { startChild } from './support/log-fixtures.js'

const refund = (needsApproval: NeedsApproval = true) => ({ ...countingTool('refund'), needsApproval })

test(
  'an approved call is dispatched with the decision recorded and runs once; a denied one is rejected, never runs, and the model is told why',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-small', name: 'refund', arguments: { value: 20 } },
        { id: 'call-big', name: 'refund', arguments: { value: 5000 } },
      ]),
      answer.text('refunded 20, the other was refused'),
    ],
    {},
    async (h) => {
      const tool = refund()
      const asked: Omit<ApprovalRequest, 'signal'>[] = []
      const outcome = await h.run(h.input('approve', { tools: [tool] }), {
        onApproval: ({ signal, ...request }) => {
          asked.push(request)
          assert.is(signal.aborted, false)
          return (request.input as { value: number }).value <= 100
            ? { approved: true, by: 'alice' }
            : { approved: false, by: 'bob', reason: 'over the limit of 100' }
        },
      })
      assert.equal(outcome, { status: 'completed' })
      // The whole run's ids, to route the request to whoever decides for that conversation.
      const invocation = h.input('approve').invocation
      assert.equal(asked, [
        { invocationId: 'invocation-approve', invocation, stepId: 'step-1', callId: 'call-small', operationId: 'invocation-approve/step-1/0', name: 'refund', input: { value: 20 } },
        { invocationId: 'invocation-approve', invocation, stepId: 'step-1', callId: 'call-big', operationId: 'invocation-approve/step-1/1', name: 'refund', input: { value: 5000 } },
      ])
      assert.is(invocation.sessionId.length > 0, true)
      const facts = await factsOf(h.log, 'invocation-approve')
      assert.equal(only(facts, 'tool.dispatched'), [
        { type: 'tool.dispatched', operationId: 'invocation-approve/step-1/0', callId: 'call-small', name: 'refund', input: { value: 20 }, approval: { by: 'alice' } },
      ])
      assert.equal(only(facts, 'tool.rejected'), [
        {
          type: 'tool.rejected',
          operationId: 'invocation-approve/step-1/1',
          callId: 'call-big',
          name: 'refund',
          input: { value: 5000 },
          reason: 'denied',
          approval: { by: 'bob', reason: 'over the limit of 100' },
        },
      ])
      assert.equal(
        tool.calls.map((call) => call.input),
        [{ value: 20 }],
      )
      const told = messagesOf(h.server.requests[1]?.body).filter((m) => m.role === 'tool')
      assert.equal(
        told.map((m) => [m.tool_call_id, m.content]),
        [
          ['call-small', '{"value":20}'],
          ['call-big', 'error: the call to "refund" was denied by its approver: over the limit of 100; it was not run'],
        ],
      )
    },
  ),
)

test(
  'needsApproval as a predicate of the input asks only for the calls it names; an approver that throws, or answers with no decision, denies the call',
  engineTest(
    [
      answer.toolCalls([
        { name: 'refund', arguments: { value: 5 } },
        { name: 'refund', arguments: { value: 500 } },
        { name: 'refund', arguments: { value: 700 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const tool = refund((input) => (input as { value: number }).value > 100)
      let asked = 0
      const outcome = await h.run(h.input('predicate', { tools: [tool] }), {
        onApproval: (request) => {
          asked += 1
          if ((request.input as { value: number }).value === 500) throw new Error('the approval service is down')
          return { approve: 'yes' } as never
        },
      })
      assert.equal(outcome, { status: 'completed' })
      assert.is(asked, 2, 'the small refund needed no approval')
      const facts = await factsOf(h.log, 'invocation-predicate')
      assert.equal(
        only(facts, 'tool.dispatched').map((fact) => [fact.input, fact.approval]),
        [[{ value: 5 }, undefined]],
      )
      assert.equal(
        only(facts, 'tool.rejected').map((fact) => [fact.input, fact.reason, fact.approval]),
        [
          [{ value: 500 }, 'denied', { reason: 'the approver failed: the approval service is down' }],
          [{ value: 700 }, 'denied', { reason: 'the approver did not answer with a decision ({ approved: boolean })' }],
        ],
      )
      assert.is(tool.calls.length, 1)
    },
  ),
)

test(
  'a cancel while the approver thinks: the request signal aborts, the call is rejected cancelled and never runs, whatever the approver says later',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { value: 1 } }])], {}, async (h) => {
    const tool = refund()
    const controller = new AbortController()
    let approve: (() => void) | undefined
    let requestSignal: AbortSignal | undefined
    const running = await h.start(h.input('cancel', { tools: [tool] }), {
      signal: controller.signal,
      onApproval: (request) => {
        requestSignal = request.signal
        return new Promise((resolve) => {
          approve = () => resolve({ approved: true })
        })
      },
    })
    while (approve === undefined) await new Promise((resolve) => setTimeout(resolve, 5))
    controller.abort('user cancelled')
    const outcome = await running.wait()
    approve()
    assert.is(outcome.status, 'cancelled')
    assert.is(requestSignal?.aborted, true)
    const facts = await factsOf(h.log, 'invocation-cancel')
    assert.equal(
      only(facts, 'tool.rejected').map((fact) => fact.reason),
      ['cancelled'],
    )
    assert.is(only(facts, 'tool.dispatched').length, 0)
    await new Promise((resolve) => setTimeout(resolve, 10))
    assert.is(tool.calls.length, 0)
  }),
)

test(
  'calls side by side are asked side by side; what an approver writes is recorded without the provider key',
  engineTest(
    [
      answer.toolCalls([
        { name: 'refund', arguments: { value: 1 } },
        { name: 'refund', arguments: { value: 2 } },
      ]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const apiKey = 'sk-approval-0123456789abcdef'
      const input = { ...h.input('side', { tools: [refund()] }), toolConcurrency: 2 }
      input.provider = { ...input.provider, apiKey }
      const waiting: (() => void)[] = []
      const outcome = await h.run(input, {
        onApproval: (request) =>
          new Promise((resolve) => {
            waiting.push(() => resolve({ approved: false, by: 'ops', reason: `key ${apiKey} would be charged for ${String((request.input as { value: number }).value)}` }))
            // Both are asked before either is answered.
            if (waiting.length === 2) for (const release of waiting) release()
          }),
      })
      assert.equal(outcome, { status: 'completed' })
      const rejected = only(await factsOf(h.log, 'invocation-side'), 'tool.rejected')
      assert.equal(
        rejected.map((fact) => fact.approval?.reason),
        ['key [redacted] would be charged for 1', 'key [redacted] would be charged for 2'],
      )
    },
  ),
)

test(
  'twelve calls asked at once leave one abort listener on the run signal: no MaxListenersExceededWarning',
  engineTest([answer.toolCalls(Array.from({ length: 12 }, (_, value) => ({ name: 'refund', arguments: { value } }))), answer.text('done')], {}, async (h) => {
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(warning.name)
    process.on('warning', onWarning)
    try {
      const tool = refund()
      const waiting: (() => void)[] = []
      const outcome = await h.run(
        { ...h.input('many', { tools: [tool] }), toolConcurrency: 12 },
        {
          onApproval: () =>
            new Promise((resolve) => {
              waiting.push(() => resolve({ approved: true }))
              if (waiting.length === 12) for (const release of waiting) release()
            }),
        },
      )
      assert.equal(outcome, { status: 'completed' })
      assert.is(tool.calls.length, 12)
      await new Promise((resolve) => setImmediate(resolve))
    } finally {
      process.off('warning', onWarning)
    }
    assert.equal(warnings, [])
  }),
)

test(
  'a cancel while the tool\'s predicate decides: a predicate that never settles, or one that says no approval is needed after the cancel, and the call is rejected cancelled, never dispatched',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { value: 1 } }]), answer.toolCalls([{ name: 'refund', arguments: { value: 2 } }])], {}, async (h) => {
    for (const [name, predicate] of [
      ['never', () => new Promise<boolean>(() => undefined)],
      ['late-no', () => new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 150))],
    ] as const) {
      // Cancelled once the predicate is deciding (a fixed wait let a slow model answer come after the cancel).
      let deciding: () => void = () => undefined
      const decides = new Promise<void>((resolve) => (deciding = resolve))
      const tool = refund(() => {
        deciding()
        return predicate()
      })
      const controller = new AbortController()
      let asked = 0
      const running = await h.start(h.input(name, { tools: [tool] }), {
        signal: controller.signal,
        onApproval: () => {
          asked += 1
          return { approved: true }
        },
      })
      await decides
      controller.abort('user cancelled')
      assert.is((await running.wait()).status, 'cancelled', name)
      await new Promise((resolve) => setTimeout(resolve, 150))
      const facts = await factsOf(h.log, `invocation-${name}`)
      assert.equal(
        facts.filter((fact) => fact.type.startsWith('tool.')).map((fact) => (fact.type === 'tool.rejected' ? `rejected ${fact.reason}` : fact.type)),
        ['rejected cancelled'],
        name,
      )
      assert.equal([tool.calls.length, asked], [0, 0], name)
    }
  }),
)

test(
  'a call beside it fails while the approver thinks: its signal aborts, the run ends at once, and nothing is written for the waiting call',
  engineTest(
    [
      answer.toolCalls([
        { id: 'call-a', name: 'echo', arguments: { value: 1 } },
        { id: 'call-b', name: 'refund', arguments: { value: 2 } },
      ]),
    ],
    // call-a's dispatch (the invocation's fourth fact) takes an event id already used: the log refuses it.
    { engine: { eventId: (invocation, at) => (invocation.invocationId === 'invocation-sibling' && at === 4 ? 'invocation-sibling/1' : `${invocation.invocationId}/${at}`) } },
    async (h) => {
      const tool = refund()
      let signal: AbortSignal | undefined
      let approve: (() => void) | undefined
      const running = await h.start(
        { ...h.input('sibling', { tools: [countingTool('echo'), tool] }), toolConcurrency: 2 },
        {
          onApproval: (request) => {
            signal = request.signal
            return new Promise((resolve) => {
              approve = () => resolve({ approved: true, by: 'late' })
            })
          },
        },
      )
      const failure = await running.wait().then(
        () => undefined,
        (error: { code?: string }) => error.code,
      )
      assert.is(failure, 'LOG_CONFLICT')
      assert.is(signal?.aborted, true, 'the approver is told to stop')
      approve?.()
      await new Promise((resolve) => setTimeout(resolve, 20))
      const facts = await factsOf(h.log, 'invocation-sibling')
      assert.is(facts.filter((fact) => (fact.type === 'tool.dispatched' || fact.type === 'tool.rejected') && fact.callId === 'call-b').length, 0, 'nothing for the waiting call')
      const ended = facts.at(-1)
      assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'engine_error')
      assert.is(tool.calls.length, 0)
    },
  ),
)

test(
  'what an approver writes is cut to 2,000 characters after the provider key is taken out: no piece of a key at the cut is recorded',
  engineTest([answer.toolCalls([{ name: 'refund', arguments: { value: 1 } }]), answer.text('done')], {}, async (h) => {
    const apiKey = 'sk-approval-0123456789abcdef'
    const input = h.input('cut', { tools: [refund()] })
    input.provider = { ...input.provider, apiKey }
    const outcome = await h.run(input, { onApproval: () => ({ approved: false, by: `${'x'.repeat(1990)}${apiKey}`, reason: `${'y'.repeat(1985)}${apiKey}` }) })
    assert.equal(outcome, { status: 'completed' })
    const [rejected] = only(await factsOf(h.log, 'invocation-cut'), 'tool.rejected')
    assert.is(rejected?.approval?.by, `${'x'.repeat(1990)}[redacted]`)
    assert.is(rejected?.approval?.reason, `${'y'.repeat(1985)}[redacted]`)
    assert.not.ok(JSON.stringify(h.server.requests[1]?.body).includes('sk-approva'), 'nor in what the model is told')
  }),
)

test(
  'a tool that needs approval without an approver, a bad approver or a bad needsApproval: RUN_INVALID_INPUT naming the field, and nothing is written',
  engineTest([answer.text('unused')], {}, async (h) => {
    const missing = await refusedWithoutWriting(h.log, () => h.engine.start(h.input('missing', { tools: [refund()] })), 'RUN_INVALID_INPUT', 'no onApproval')
    assert.equal(missing.details, { fields: ['options.onApproval'] })
    const predicate = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('predicate', { tools: [refund(() => false)] })),
      'RUN_INVALID_INPUT',
      'a predicate without onApproval',
    )
    assert.equal(predicate.details, { fields: ['options.onApproval'] })
    const bad = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('bad', { tools: [refund()] }), { onApproval: 'yes' as never }),
      'RUN_INVALID_INPUT',
      'onApproval: "yes"',
    )
    assert.equal(bad.details, { fields: ['options.onApproval'] })
    const flag = await refusedWithoutWriting(
      h.log,
      () => h.engine.start(h.input('flag', { tools: [{ ...countingTool('refund'), needsApproval: 'always' as never }] }), { onApproval: () => ({ approved: true }) }),
      'RUN_INVALID_INPUT',
      'needsApproval: "always"',
    )
    assert.equal(flag.details, { fields: ['tools.0.needsApproval'] })
    // needsApproval: false needs no approver.
    assert.equal(await h.run(h.input('free', { tools: [refund(false)] })), { status: 'completed' })
  }),
)

{
  let operationId = ''
  test(
    'a crash while the approver is asked: the call was never dispatched, so recovery ends the run host_interrupted and nothing needs reconciliation',
    engineTest(
      [answer.text('asking again')],
      {
        ms: 30_000,
        before: async (logPath) => {
          const child = startChild('child-engine-tool.ts', [logPath, 'approval'])
          try {
            operationId = (await child.waitForLine((line) => line.startsWith('asking '), 20_000)).slice('asking '.length)
          } finally {
            await child.stop('SIGKILL')
          }
          assert.is((await child.exited).signal, 'SIGKILL', child.stderr())
          const log = await EventLog.open(logPath)
          try {
            assert.is(await recoverInvocations(log), 1)
          } finally {
            await log.close()
          }
        },
      },
      async (h) => {
        assert.ok(operationId)
        assert.equal(await typesOf(h.log, 'invocation-crash'), ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'], 'never dispatched')
        const ended = (await factsOf(h.log, 'invocation-crash')).at(-1)
        assert.is(ended?.type === 'invocation.ended' && ended.outcome.status === 'failed' && ended.outcome.class, 'host_interrupted')
        // The session is free: a new message needs no acknowledgement.
        assert.equal(await h.run(h.input('next', { session: 'session-crash', tools: [countingTool('deploy')] })), { status: 'completed' })
      },
    ),
  )
}

test(
  'a tool member that misnames one it lacks is refused without writing (a misspelt needsApproval would run the tool unapproved); members of its own are admitted',
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'refund', arguments: { value: 7 } }]), answer.text('done')], {}, async (h) => {
    const approve = () => ({ approved: true, by: 'alice' })
    for (const [member, meant] of [
      ['needsApprovl', 'needsApproval'],
      ['requiresApproval', 'needsApproval'],
      ['NeedsApproval', 'needsApproval'],
    ] as const) {
      const tool = { ...countingTool('refund'), [member]: true }
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input(`misnamed-${member}`, { tools: [tool] }), { onApproval: approve }), 'RUN_INVALID_INPUT', member)
      assert.equal(error.details, { fields: [`tools.0.${member}`] }, member)
      assert.match(error.message, `${member} is not a member of a tool: did you mean ${meant}?`)
      assert.equal(tool.calls, [], `${member}: never run`)
    }
    // Other libraries' words for asking a person first: refused, pointed to needsApproval (admitted, the tool would run unasked).
    for (const [member, value] of [
      ['approval', 'always'],
      ['confirm', true],
      ['requiresConfirmation', true],
      ['require_confirmation', true],
      ['needsConfirmation', true],
      ['humanInTheLoop', true],
    ] as const) {
      const tool = { ...countingTool('refund'), [member]: value }
      const error = await refusedWithoutWriting(h.log, () => h.start(h.input(`foreign-${member}`, { tools: [tool] }), { onApproval: approve }), 'RUN_INVALID_INPUT', member)
      assert.equal(error.details, { fields: [`tools.0.${member}`] }, member)
      assert.match(error.message, `${member} is not a member of a tool: did you mean needsApproval? (true, or a function of the call's input: start's onApproval is asked before each call`)
      assert.equal(tool.calls, [], `${member}: never run`)
    }
    // Its own state and helpers, and a look-alike beside the member it resembles, are the tool's own.
    // An MCP tool's annotations describe it (destructiveHint) and ask for nothing: left alone. Beside
    // needsApproval, another library's word for it is the tool's own too (needsApproval decides).
    const tool = { ...countingTool('refund'), needsApproval: true, runs: 0, executor: 'pool-1', parameters: { legacy: true }, annotations: { destructiveHint: true }, confirm: 'twice' }
    const asked: string[] = []
    const outcome = await h.run(h.input('own-members', { tools: [tool] }), {
      onApproval: (request) => {
        asked.push(request.callId)
        return approve()
      },
    })
    assert.equal(outcome, { status: 'completed' })
    assert.equal(asked, ['call-1'], 'the approver was asked')
    assert.is(tool.calls.length, 1)
  }),
)

test.run()
