/**
 * Model faults against the scripted OpenAI-compatible server on 127.0.0.1: HTTP 500s, 429 with
 * `retry-after`, a body that is not JSON, an SSE stream cut mid-event, tool-call arguments that
 * are not JSON, a reset connection and a server that never answers. Each ends in its documented
 * fact sequence and outcome; no invocation is left open (recovery after a reopen closes nothing);
 * no effect repeats; every retry sends the byte-identical request.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type InvocationOutcome, ModelExecutor, type ModelExecutorOptions, recoverInvocations } from '../index.js'
import { type ScriptedAnswer, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { ALL, effectTool, messageRun, sequenceOf } from './support/faults-engine.js'
import { bounded } from './support/temp.js'

interface Case {
  name: string
  script: ScriptedAnswer[]
  /** Ask for SSE (`stream: true` in the body). */
  stream?: boolean
  executor?: ModelExecutorOptions
  facts: string[]
  outcome: InvocationOutcome | { status: 'failed'; class: string }
  /** Requests the server must see. */
  requests: number
  /** Executions of `echo`. */
  effects: number
}

const EXECUTOR: ModelExecutorOptions = { timeoutMs: 2_000, retries: 2, backoffMs: 5, maxBackoffMs: 2_000 }

const echoCall = answer.toolCalls([{ name: 'echo', arguments: { value: 42 } }])

/** Three model attempts (the first and both retries) interrupted, then the end they lead to. */
const RETRIES_EXHAUSTED = [
  'model.requested',
  'model.interrupted:retryable_failure',
  'model.requested',
  'model.interrupted:retryable_failure',
  'model.requested',
  'model.interrupted:failed',
  'invocation.ended:failed/model_failed',
]

const cases: Case[] = [
  {
    name: 'HTTP 500 on every attempt: two retries, then failed model_failed',
    script: [answer.status(500), answer.status(500), answer.status(500)],
    facts: [
      'invocation.opened',
      ...RETRIES_EXHAUSTED,
    ],
    outcome: { status: 'failed', class: 'model_failed' },
    requests: 3,
    effects: 0,
  },
  {
    name: 'HTTP 500 after a tool ran: the retries never repeat the effect',
    script: [echoCall, answer.status(503), answer.status(500), answer.status(502)],
    facts: [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled:succeeded',
      ...RETRIES_EXHAUSTED,
    ],
    outcome: { status: 'failed', class: 'model_failed' },
    requests: 4,
    effects: 1,
  },
  {
    name: 'HTTP 500 once, then an answer: one retry, completed',
    script: [answer.status(500), answer.text('done')],
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', 'model.requested', 'model.completed', 'invocation.ended:completed'],
    outcome: { status: 'completed' },
    requests: 2,
    effects: 0,
  },
  {
    name: 'HTTP 429 with retry-after: retried after the wait, completed',
    script: [answer.status(429, { retryAfter: 1 }), answer.text('done')],
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', 'model.requested', 'model.completed', 'invocation.ended:completed'],
    outcome: { status: 'completed' },
    requests: 2,
    effects: 0,
  },
  {
    name: 'HTTP 429 with retry-after-ms on every attempt: failed model_failed',
    script: [answer.status(429, { retryAfterMs: 10 }), answer.status(429, { retryAfterMs: 10 }), answer.status(429, { retryAfterMs: 10 })],
    facts: [
      'invocation.opened',
      ...RETRIES_EXHAUSTED,
    ],
    outcome: { status: 'failed', class: 'model_failed' },
    requests: 3,
    effects: 0,
  },
  {
    name: 'an error in a 200 answer that names no kind (no code, type or status) on every attempt after a tool ran: retried within the retries, then failed model_failed; the effect never repeats',
    script: [echoCall, ...[1, 2, 3].map(() => answer.malformed({ body: JSON.stringify({ error: { message: 'the generation failed upstream' } }) }))],
    facts: ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled:succeeded', ...RETRIES_EXHAUSTED],
    outcome: { status: 'failed', class: 'model_failed' },
    requests: 4,
    effects: 1,
  },
  {
    name: 'a body that is not JSON: terminal, failed model_malformed, never retried',
    script: [answer.malformed(), answer.text('never sent')],
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_malformed'],
    outcome: { status: 'failed', class: 'model_malformed' },
    requests: 1,
    effects: 0,
  },
  {
    name: 'JSON that is not a chat completion: terminal, failed model_malformed',
    script: [answer.malformed({ body: '{"choices": []}' })],
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_malformed'],
    outcome: { status: 'failed', class: 'model_malformed' },
    requests: 1,
    effects: 0,
  },
  {
    name: 'an SSE stream cut mid-event: terminal, failed model_malformed',
    script: [answer.cutStream({ text: 'half an ans' }), answer.text('never sent')],
    stream: true,
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:failed', 'invocation.ended:failed/model_malformed'],
    outcome: { status: 'failed', class: 'model_malformed' },
    requests: 1,
    effects: 0,
  },
  {
    name: 'a cut stream after a tool ran: the effect is not repeated',
    script: [echoCall, answer.cutStream()],
    stream: true,
    facts: [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled:succeeded',
      'model.requested',
      'model.interrupted:failed',
      'invocation.ended:failed/model_malformed',
    ],
    outcome: { status: 'failed', class: 'model_malformed' },
    requests: 2,
    effects: 1,
  },
  {
    name: 'tool-call arguments that are not JSON: rejected invalid_input, never run; the model is told, completed',
    script: [answer.toolCalls([{ name: 'echo', arguments: '{"value": 4' }]), answer.text('done')],
    facts: [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.rejected:invalid_input',
      'model.requested',
      'model.completed',
      'invocation.ended:completed',
    ],
    outcome: { status: 'completed' },
    requests: 2,
    effects: 0,
  },
  {
    name: 'invalid arguments beside a valid call: only the valid one runs, once',
    script: [
      answer.toolCalls([
        { name: 'echo', arguments: { value: 1 } },
        { name: 'echo', arguments: 'not json at all' },
      ]),
      answer.text('done'),
    ],
    stream: true,
    facts: [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled:succeeded',
      'tool.rejected:invalid_input',
      'model.requested',
      'model.completed',
      'invocation.ended:completed',
    ],
    outcome: { status: 'completed' },
    requests: 2,
    effects: 1,
  },
  {
    name: 'a connection reset: retryable, the retry completes',
    script: [answer.reset(), answer.text('done')],
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:retryable_failure', 'model.requested', 'model.completed', 'invocation.ended:completed'],
    outcome: { status: 'completed' },
    requests: 2,
    effects: 0,
  },
  {
    name: 'a reset in the middle of an SSE stream after a tool ran: retried, the effect is not repeated',
    script: [echoCall, answer.reset({ stream: true }), answer.text('done')],
    stream: true,
    facts: [
      'invocation.opened',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled:succeeded',
      'model.requested',
      'model.interrupted:retryable_failure',
      'model.requested',
      'model.completed',
      'invocation.ended:completed',
    ],
    outcome: { status: 'completed' },
    requests: 3,
    effects: 1,
  },
  {
    name: 'a server that never answers: timed out, failed model_timeout, not retried',
    script: [answer.hang(), answer.text('never sent')],
    executor: { ...EXECUTOR, timeoutMs: 300 },
    facts: ['invocation.opened', 'model.requested', 'model.interrupted:timed_out', 'invocation.ended:failed/model_timeout'],
    outcome: { status: 'failed', class: 'model_timeout' },
    requests: 1,
    effects: 0,
  },
]

for (const item of cases) {
  test(
    `model fault: ${item.name}`,
    bounded(20_000, async (dir) => {
      const server = await scriptedModelServer(item.script)
      const path = join(dir, 'log')
      let log = await EventLog.open(path)
      try {
        const engine = new Engine({ log, model: new ModelExecutor(item.executor ?? EXECUTOR) })
        const echo = effectTool()
        const run = messageRun(server.baseUrl, 'fault', [echo], item.stream ? { providerOptions: { stream: true } } : {})
        const outcome = await engine.run(run)
        await engine.drain()
        if (item.outcome.status === 'failed') {
          assert.is(outcome.status, 'failed')
          assert.is((outcome as { class: string }).class, item.outcome.class)
        } else {
          assert.equal(outcome, item.outcome)
        }
        const prefix = await log.prefix(ALL.events, ALL.bytes)
        assert.equal(sequenceOf(prefix.events, 'invocation-fault'), item.facts)
        assert.is(server.requests.length, item.requests, 'requests sent')
        assert.equal(server.unscripted, [], 'no request beyond the script')
        assert.is(echo.runs.length, item.effects, 'effects')
        assert.is(new Set(echo.runs).size, echo.runs.length, 'no operation ran twice')

        // A retry resends the exact bytes whose digest the log recorded.
        const requested = prefix.events.filter((e) => e.event.fact.type === 'model.requested').map((e) => e.event.fact)
        assert.is(requested.length, item.requests)
        for (let i = 1; i < requested.length; i += 1) {
          const [previous, current] = [requested[i - 1], requested[i]] as { stepId: string; requestDigest: string }[]
          if (current?.stepId === previous?.stepId) {
            assert.is(current?.requestDigest, previous?.requestDigest, 'a retry has the digest of the same body')
            assert.is(server.requests[i]?.bodyText, server.requests[i - 1]?.bodyText, 'a retry sends the same bytes')
          }
        }
        const projection = prefix.projectInvocation('invocation-fault')
        assert.ok(projection.terminal !== null, 'the invocation is terminal')
        assert.equal(projection.unfinishedModelSteps, [])
        assert.equal(projection.uncertainOperations, [])
        await log.close()

        log = await EventLog.open(path)
        assert.is(await recoverInvocations(log), 0, 'nothing was left open')
        const after = await log.verify()
        assert.is(after.digest, prefix.digest)
        // The session is free again: a model fault leaves nothing to reconcile.
        const next = await new Engine({ log, model: new ModelExecutor(EXECUTOR) }).start({
          ...messageRun(server.baseUrl, 'fault', [echo]),
          invocation: { sessionId: 'session-fault', turnId: 'turn-next', runId: 'run-next', invocationId: 'invocation-next' },
        })
        await next.wait()
      } finally {
        await log.close()
        await server.close()
      }
    }),
  )
}

test(
  'model fault: the model is told about an invalid-arguments call, and the tool message names it',
  bounded(20_000, async (dir) => {
    const server = await scriptedModelServer([answer.toolCalls([{ name: 'echo', arguments: '{"value": 4', id: 'call-bad' }]), answer.text('done')])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const echo = effectTool()
      await new Engine({ log, model: new ModelExecutor(EXECUTOR) }).run(messageRun(server.baseUrl, 'told', [echo]))
      const messages = server.requests[1]?.body.messages as { role: string; tool_call_id?: string }[]
      const tool = messages.filter((m) => m.role === 'tool')
      assert.is(tool.length, 1)
      assert.is(tool[0]?.tool_call_id, 'call-bad')
      assert.is(echo.runs.length, 0)
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test(
  'model fault: a request past the script fails the run at once, not retried, and says the script ran out',
  bounded(20_000, async (dir) => {
    const server = await scriptedModelServer([echoCall])
    const log = await EventLog.open(join(dir, 'log'))
    try {
      const echo = effectTool()
      // The default executor: three retries with back-off, none of which a short script may cost.
      const outcome = await new Engine({ log }).run(messageRun(server.baseUrl, 'short', [echo]))
      assert.is(outcome.status, 'failed')
      const failed = outcome as { class: string; message: string; provider?: unknown }
      assert.is(failed.class, 'model_failed')
      assert.is(
        failed.message,
        'the provider answered HTTP 400: scripted model server: the script has 1 answer and this was request 2 (index 1, listed in server.unscripted): script an answer for it',
      )
      assert.equal(failed.provider, { status: 400, code: 'unscripted_request', type: 'invalid_request_error' })
      assert.equal(server.unscripted, [1])
      assert.is(server.requests.length, 2, 'the unscripted request was not sent again')
      const prefix = await log.prefix(ALL.events, ALL.bytes)
      assert.equal(sequenceOf(prefix.events, 'invocation-short'), [
        'invocation.opened',
        'model.requested',
        'model.completed',
        'tool.dispatched',
        'tool.settled:succeeded',
        'model.requested',
        'model.interrupted:failed',
        'invocation.ended:failed/model_failed',
      ])
      assert.is(echo.runs.length, 1)
    } finally {
      await log.close()
      await server.close()
    }
  }),
)

test.run()
