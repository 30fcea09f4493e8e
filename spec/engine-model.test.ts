/**
 * Model trouble (DESIGN §5): 429/5xx are retried with the identical body, each failure a
 * `model.interrupted` fact; a timeout, a malformed answer or exhausted retries end the run failed.
 * Secrets (`apiKey`, `headers`) never reach the log directory, whatever happened.
 */
import { createHash } from 'node:crypto'
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, ModelExecutor, OpenAIChatClient, recoverInvocations, type ModelClient, type ModelRequestOrigin, type ProviderConfig } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, engineTest, factsOf, filesHolding, only, storedEvents } from './support/engine-fixtures.js'
import { withTimeout } from './support/temp.js'

const seenOrigins: (ModelRequestOrigin | undefined)[] = []

const sha256 = (text: string) => `sha256:${createHash('sha256').update(text).digest('hex')}`

test(
  '429 with retry-after, then success: the retried body is byte-identical and carries the same digest',
  engineTest([answer.status(429, { retryAfter: 1 }), answer.text('done')], { model: { backoffMs: 1, maxBackoffMs: 20 } }, async (h) => {
    assert.equal(await h.run(h.input('retry')), { status: 'completed' })
    assert.is(h.server.requests.length, 2)
    const [first, second] = h.server.requests
    assert.ok(first && second)
    assert.is(second.bodyText, first.bodyText, 'the retry sends the same bytes')
    const facts = await factsOf(h.log, 'invocation-retry')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'model.requested', 'model.completed', 'invocation.ended'],
    )
    const requested = only(facts, 'model.requested')
    assert.equal(
      requested.map((f) => [f.stepId, f.requestDigest]),
      [
        ['step-1', sha256(first.bodyText)],
        ['step-1', sha256(first.bodyText)],
      ],
      'both attempts are the same step with the digest of the exact bytes sent',
    )
    assert.is(only(facts, 'model.interrupted')[0]?.status, 'retryable_failure')
  }),
)

test(
  '500 forever: retries exhausted, the run ends failed model_failed and nothing is left open',
  engineTest(() => answer.status(500), { model: { retries: 3, backoffMs: 1, maxBackoffMs: 5 } }, async (h) => {
    const outcome = await h.run(h.input('down'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
    assert.is(h.server.requests.length, 4, 'one attempt and three retries')
    assert.is(new Set(h.server.requests.map((r) => r.bodyText)).size, 1, 'every retry sends the same bytes')
    const facts = await factsOf(h.log, 'invocation-down')
    assert.equal(
      only(facts, 'model.interrupted').map((f) => f.status),
      ['retryable_failure', 'retryable_failure', 'retryable_failure', 'failed'],
    )
    assert.is(new Set(only(facts, 'model.requested').map((f) => `${f.stepId} ${f.requestDigest}`)).size, 1)
    const prefix = await h.log.prefix(1_000, 1 << 20)
    assert.equal(prefix.projectInvocation('invocation-down'), { terminal: 'failed', uncertainOperations: [], unfinishedModelSteps: [] })
    assert.is(await recoverInvocations(h.log), 0, 'no invocation left open')
  }),
)

test(
  'cancelling during the backoff before a retry ends the run cancelled without another attempt',
  engineTest([answer.status(503, { retryAfter: 30 }), answer.text('never')], { model: { maxBackoffMs: 60_000 } }, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('backoff'), { signal: controller.signal })
    await h.server.seen(0)
    let interrupted = false
    while (!interrupted) {
      interrupted = (await factsOf(h.log, 'invocation-backoff')).some((f) => f.type === 'model.interrupted')
      if (!interrupted) await new Promise((resolve) => setTimeout(resolve, 5))
    }
    controller.abort('shutdown')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'shutdown' })
    assert.is(h.server.requests.length, 1)
    assert.equal(
      (await factsOf(h.log, 'invocation-backoff')).map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    assert.is(getEventListeners(controller.signal, 'abort').length, 0)
  }),
)

test(
  'a connection reset is retried like a 5xx',
  engineTest([answer.reset(), answer.text('done')], {}, async (h) => {
    assert.equal(await h.run(h.input('reset')), { status: 'completed' })
    assert.equal(
      only(await factsOf(h.log, 'invocation-reset'), 'model.interrupted').map((f) => f.status),
      ['retryable_failure'],
    )
  }),
)

/** The question of a request: its first user message. */
const questionOf = (body: unknown) => (body as { messages: { role: string; content: string }[] }).messages.find((m) => m.role === 'user')?.content ?? ''

test(
  "the provider's x-request-id is recorded with each attempt: a streamed and a plain answer's in output.requestId, an error answer's (500, 400) or an unreadable one's in provider.requestId, the model_failed outcome's the last attempt's; none where no answer came",
  (() => {
    const attempts = new Map<string, number>()
    return engineTest(
      (request) => {
        const question = questionOf(request.body)
        const attempt = (attempts.get(question) ?? 0) + 1
        attempts.set(question, attempt)
        switch (question) {
          case 'streamed':
            return answer.text('streamed', { stream: true })
          case 'plain':
            return answer.text('plain', { stream: false })
          case 'flaky':
            // No answer at all (its id never left the server), then a 500, then the answer.
            if (attempt === 1) return answer.reset()
            if (attempt === 2) return answer.status(500, { body: { error: { message: 'upstream failed', type: 'server_error' } } })
            return answer.text('recovered')
          case 'full':
            if (attempt === 1) return answer.status(500, { body: { error: { message: 'upstream failed', type: 'server_error' } } })
            return answer.status(400, {
              body: { error: { message: "This model's maximum context length is 128000 tokens.", type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } },
            })
          case 'odd':
            return answer.malformed({ body: 'not json' })
          case 'hung':
            return answer.hang()
          default:
            return answer.text('done')
        }
      },
      { requestIds: true, model: { timeoutMs: 1_000, retries: 2, backoffMs: 1, maxBackoffMs: 5 } },
      async (h) => {
        const outcomes: unknown[] = []
        for (const question of ['streamed', 'plain', 'flaky', 'full', 'odd', 'hung']) outcomes.push(await h.run(h.input(question, { content: question })))
        // The server numbers its answers by request: req_0 … req_8 (the reset's and the hang's never sent).
        assert.is(h.server.requests.length, 9)
        const attemptsOf = async (name: string) =>
          (await factsOf(h.log, `invocation-${name}`)).flatMap((fact): unknown[][] =>
            fact.type === 'model.completed' ? [['completed', fact.output.requestId]] : fact.type === 'model.interrupted' ? [[fact.status, fact.provider]] : [],
          )
        assert.equal(await attemptsOf('streamed'), [['completed', 'req_0']])
        assert.equal(await attemptsOf('plain'), [['completed', 'req_1']])
        assert.equal(await attemptsOf('flaky'), [
          ['retryable_failure', undefined],
          ['retryable_failure', { status: 500, type: 'server_error', requestId: 'req_3' }],
          ['completed', 'req_4'],
        ])
        const full = { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages', requestId: 'req_6' }
        assert.equal(await attemptsOf('full'), [
          ['retryable_failure', { status: 500, type: 'server_error', requestId: 'req_5' }],
          ['failed', full],
        ])
        assert.equal(await attemptsOf('odd'), [['failed', { requestId: 'req_7' }]])
        assert.equal(await attemptsOf('hung'), [['timed_out', undefined]])
        assert.equal(outcomes.slice(0, 3), [{ status: 'completed' }, { status: 'completed' }, { status: 'completed' }])
        assert.equal(outcomes[3], { status: 'failed', class: 'model_failed', message: "the provider answered HTTP 400: This model's maximum context length is 128000 tokens.", provider: full })
        // A malformed answer's id is in its fact; the outcome carries a provider for model_failed only, as before.
        assert.equal([(outcomes[4] as { class?: string }).class, 'provider' in (outcomes[4] as object)], ['model_malformed', false])
        assert.equal([(outcomes[5] as { class?: string }).class, 'provider' in (outcomes[5] as object)], ['model_timeout', false])
        // The run's recorded outcome is the one wait() gave.
        const [run] = await h.log.runs('session-full')
        assert.equal(run?.outcome, outcomes[3])
      },
    )
  })(),
)

test(
  'a request id is never sent back: the next step and a continuation send no trace of the ids recorded with the answers before them',
  engineTest(
    [answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]), answer.text('echoed'), answer.text('again')],
    { requestIds: (_, index) => `req-sent-back-${index}` },
    async (h) => {
      const tools = [countingTool()]
      assert.equal(await h.run(h.input('first', { tools })), { status: 'completed' })
      const source = (await h.log.runSource('session-first', 'run-first'))?.boundary
      assert.ok(source)
      const next = h.input('next', { session: 'session-first', tools })
      assert.equal(await h.run({ ...next, work: { kind: 'continuation', source, content: 'and now?' } }), { status: 'completed' })
      const recorded = [...(await factsOf(h.log, 'invocation-first')), ...(await factsOf(h.log, 'invocation-next'))].flatMap((fact) => (fact.type === 'model.completed' ? [fact.output.requestId] : []))
      assert.equal(recorded, ['req-sent-back-0', 'req-sent-back-1', 'req-sent-back-2'])
      assert.is(h.server.requests.length, 3)
      assert.equal(
        h.server.requests.filter((request) => request.bodyText.includes('sent-back')).map((request) => request.index),
        [],
      )
    },
  ),
)

test(
  'a 400 is not retried: failed model_failed after one attempt',
  engineTest([answer.status(400), answer.text('never')], {}, async (h) => {
    const outcome = await h.run(h.input('bad-request'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_failed')
    assert.is(h.server.requests.length, 1)
  }),
)

test(
  'a malformed SSE stream ends the run failed model_malformed, without retry',
  engineTest([answer.cutStream(), answer.text('never')], { stream: true }, async (h) => {
    const outcome = await h.run(h.input('cut'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_malformed')
    assert.is(h.server.requests.length, 1)
    const facts = await factsOf(h.log, 'invocation-cut')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    assert.is(only(facts, 'model.interrupted')[0]?.status, 'failed')
  }),
)

test(
  'an answer that is not JSON ends the run failed model_malformed',
  engineTest([answer.malformed()], {}, async (h) => {
    const outcome = await h.run(h.input('garbled'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_malformed')
  }),
)

test(
  'streamed answers (SSE) are accepted: tool calls merged from deltas',
  engineTest([answer.toolCalls([{ id: 'call-s', name: 'echo', arguments: { value: 12345 } }], { text: 'let me see' }), answer.text('streamed done')], { stream: true }, async (h) => {
    assert.equal(await h.run(h.input('sse')), { status: 'completed' })
    const completed = only(await factsOf(h.log, 'invocation-sse'), 'model.completed')
    assert.equal(completed[0]?.output.toolCalls, [{ callId: 'call-s', name: 'echo', arguments: '{"value":12345}' }])
    assert.is(completed[0]?.output.text, 'let me see')
    assert.is(completed[1]?.output.text, 'streamed done')
  }),
)

test(
  'a model that never answers: model.interrupted{timed_out}, failed model_timeout',
  engineTest([answer.hang(), answer.text('never')], { model: { timeoutMs: 300 } }, async (h) => {
    const outcome = await h.run(h.input('hang'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_timeout')
    const facts = await factsOf(h.log, 'invocation-hang')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    assert.is(only(facts, 'model.interrupted')[0]?.status, 'timed_out')
    assert.is(h.server.requests.length, 1)
  }),
)

test(
  'a stream that stalls after its first text: idleTimeoutMs ends the step timed_out, long before timeoutMs',
  engineTest([answer.stall({ text: 'thinking' }), answer.text('never')], { stream: true, model: { timeoutMs: 60_000, idleTimeoutMs: 300 } }, async (h) => {
    const outcome = await h.run(h.input('stall'))
    assert.is(outcome.status === 'failed' && outcome.class, 'model_timeout')
    const facts = await factsOf(h.log, 'invocation-stall')
    assert.equal(
      facts.map((f) => f.type),
      ['invocation.opened', 'model.requested', 'model.interrupted', 'invocation.ended'],
    )
    const [stalled] = only(facts, 'model.interrupted')
    assert.is(stalled?.status, 'timed_out')
    assert.is(stalled?.message, 'the answer stalled: nothing arrived for 300ms (idleTimeoutMs)')
    assert.is(h.server.requests.length, 1, 'a timeout is not retried')
  }),
)

test(
  'idleTimeoutMs reaches a custom client as request.idleTimeoutMs, and is absent when not set',
  () =>
    withTimeout(async () => {
      const seen: (number | undefined)[] = []
      const client: ModelClient = {
        complete: async (request) => {
          seen.push(request.idleTimeoutMs)
          return { kind: 'completed', output: { text: 'ok', toolCalls: [], finishReason: 'stop' } }
        },
      }
      const provider: ProviderConfig = { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' }
      for (const executor of [new ModelExecutor({ idleTimeoutMs: 1_500, createClient: () => client }), new ModelExecutor({ createClient: () => client })]) {
        const response = await executor.attempt(executor.clientFor(provider), { bodyText: '{"model":"m","messages":[]}', signal: new AbortController().signal })
        assert.is(response.kind, 'completed')
      }
      assert.equal(seen, [1_500, undefined])
    }, 5_000),
)

const API_KEY = 'sk-factstate-never-on-disk-5f1c0d'
const HEADER_VALUE = 'hv-factstate-never-on-disk-9a7e21'
const attemptsOf = new Map<string, number>()

test(
  'secrets: the API key and header values reach the provider but no file of the log directory, through retries and failures',
  engineTest(
    (request) => {
      const messages = (request.body as { messages: { role: string; content: string }[] }).messages
      const question = messages.find((m) => m.role === 'user')?.content ?? ''
      const attempts = (attemptsOf.get(question) ?? 0) + 1
      attemptsOf.set(question, attempts)
      if (question === 'retry') {
        if (attempts === 1) return answer.status(429, { retryAfterMs: 1 })
        return messages.at(-1)?.role === 'tool' ? answer.text('done') : answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }])
      }
      if (question === 'down') return answer.status(503)
      if (question === 'cut') return answer.cutStream({ text: 'half' })
      if (question === 'echoed') return answer.status(401, { body: { error: { message: `bad key ${API_KEY} with header ${HEADER_VALUE}` } } })
      return answer.text('done')
    },
    {},
    async (h) => {
      const provider = { kind: 'openai-chat' as const, baseUrl: h.server.baseUrl, model: 'scripted', apiKey: API_KEY, headers: { 'x-tenant-token': HEADER_VALUE } }
      const outcomes = []
      for (const [name, question] of [
        ['a', 'retry'],
        ['b', 'down'],
        ['c', 'cut'],
        ['d', 'echoed'],
      ] as const) {
        const input = h.input(name, { content: question })
        input.provider = provider
        outcomes.push((await h.run(input)).status)
      }
      assert.equal(outcomes, ['completed', 'failed', 'failed', 'failed'])
      assert.is(h.server.requests.length, 9)
      for (const request of h.server.requests) {
        assert.is(request.headers.authorization, `Bearer ${API_KEY}`, 'the key was sent')
        assert.is(request.headers['x-tenant-token'], HEADER_VALUE, 'the header was sent')
      }
      const events = JSON.stringify(await storedEvents(h.log))
      assert.not.ok(events.includes(API_KEY) || events.includes(HEADER_VALUE), 'no secret in any fact')
      await h.log.close()
      assert.equal(await filesHolding(h.logPath, [API_KEY, HEADER_VALUE, API_KEY.slice(3, 20)]), [], 'no secret in any file')
      h.log = await EventLog.open(h.logPath)
    },
  ),
)

test(
  'a secret the client obtained itself (an access token exchanged for its key) and registered with addSecret reaches no fact and no file',
  (() => {
    const TOKEN = 'at_Zq81xYkWm3Tr7Pp0Lv2Nn5Bb'
    const HEADER = 'hdrsecret-ABCDEF-0123456789'
    let attempts = 0
    const client: ModelClient = {
      async complete(request) {
        attempts += 1
        // The exchange: the client holds a token the run's provider settings never had.
        request.addSecret?.(TOKEN)
        // Streamed after it was added: passed on redacted, as recorded.
        request.onText?.(`streaming ${TOKEN} for ${HEADER}`)
        if (attempts === 1) return { kind: 'interrupted', status: 'retryable_failure', message: `gateway 429: token ${TOKEN} over its quota (token ${TOKEN.slice(0, 12)}…) for ${HEADER}`, retryAfterMs: 1 }
        return { kind: 'completed', output: { text: `signed in as ${TOKEN}`, toolCalls: [], finishReason: 'stop' } }
      },
    }
    return engineTest([], { model: { createClient: () => client } }, async (h) => {
      // A provider header of the client's own naming: the client's secrets never take its place.
      const input = h.input('exchanged')
      input.provider = { ...input.provider, headers: { 'x-client-secret-token-0': HEADER, 'client-secret-0': HEADER } }
      const streamed: string[] = []
      assert.equal(await h.run(input, { onModelText: (piece) => void streamed.push(piece.text) }), { status: 'completed' })
      assert.ok(!streamed.join('').includes(TOKEN) && !streamed.join('').includes(HEADER), `nothing streamed holds a secret: ${streamed.join('')}`)
      const facts = await factsOf(h.log, 'invocation-exchanged')
      const interrupted = only(facts, 'model.interrupted')
      assert.equal(interrupted.map((fact) => fact.message), ['gateway 429: token [redacted] over its quota (token [redacted]…) for [redacted]'])
      assert.equal(only(facts, 'model.completed').map((fact) => fact.output.text), ['signed in as [redacted]'])
      await h.log.close()
      assert.equal(await filesHolding(h.logPath, [TOKEN, TOKEN.slice(0, 12), HEADER]), [], 'no piece of the token in any file')
      h.log = await EventLog.open(h.logPath)
    })
  })(),
)

test(
  'addSecret is bounded as declared secrets and context.addSecret are: not a string, under 8 characters once trimmed, over 16,384 characters, past 64 secrets or 65,536 characters together in a run, MODEL_SECRET_INVALID (the value not shown), nothing added; a client that lets it through fails its attempt, the secret in no fact',
  (() => {
    // Distinct secrets: one of the limit's length, one over it, small ones by their number.
    const big = (index: number) => `${String(index).padStart(4, '0')}${'Zq81xYkWm3Tr7Pp0'.repeat(1_024)}`.slice(0, 16_384)
    const tooLong = `${'Lv2Nn5Bb'.repeat(2_048)}X`
    const small = (index: number) => `tok-${String(index).padStart(4, '0')}-Qw7Zq81xYk`
    const refusals: { run: string; code: unknown; reason: unknown; message: string }[] = []
    const client: ModelClient = {
      async complete(request) {
        const run = request.origin?.invocation.invocationId ?? ''
        const add = (secret: unknown) => {
          try {
            request.addSecret?.(secret as string)
          } catch (error) {
            const { code, details, message } = error as { code?: unknown; details?: { reason?: unknown }; message: string }
            refusals.push({ run, code, reason: details?.reason, message })
          }
        }
        if (run === 'invocation-long') {
          add(tooLong)
          for (let index = 0; index < 4; index += 1) add(big(index))
          add(small(0))
          return { kind: 'completed', output: { text: `echo ${big(3)} and ${tooLong.slice(0, 40)}`, toolCalls: [], finishReason: 'stop' } }
        }
        if (run === 'invocation-short') {
          // Under 8 characters once trimmed (it would be redacted inside words), and what is not a string.
          add('Sec4')
          add('Sec4567')
          add('  Sec4567  ')
          add(42)
          add(undefined)
          return { kind: 'completed', output: { text: 'the Sec4567r refused Sec4', toolCalls: [], finishReason: 'stop' } }
        }
        if (run === 'invocation-many') {
          for (let index = 0; index < 65; index += 1) add(small(index))
          // Added before: no more, and not refused.
          add(small(0))
          return { kind: 'completed', output: { text: `echo ${small(63)}`, toolCalls: [], finishReason: 'stop' } }
        }
        // A client that does not catch the refusal: its attempt fails, and the message quotes no part of the secret.
        request.addSecret?.(tooLong)
        return { kind: 'completed', output: { text: 'never', toolCalls: [], finishReason: 'stop' } }
      },
    }
    return engineTest([], { model: { createClient: () => client, retries: 0 }, ms: 30_000 }, async (h) => {
      assert.equal(await h.run(h.input('long')), { status: 'completed' })
      assert.equal(await h.run(h.input('many')), { status: 'completed' })
      assert.equal(await h.run(h.input('short')), { status: 'completed' })
      const uncaught = await h.run(h.input('uncaught'))
      assert.equal(uncaught.status === 'failed' ? uncaught.class : uncaught.status, 'model_failed')
      assert.equal(
        refusals.map(({ run, code, reason }) => [run, code, reason]),
        [
          ['invocation-long', 'MODEL_SECRET_INVALID', 'too_long'],
          ['invocation-long', 'MODEL_SECRET_INVALID', 'too_many'],
          ['invocation-many', 'MODEL_SECRET_INVALID', 'too_many'],
          ['invocation-short', 'MODEL_SECRET_INVALID', 'too_short'],
          ['invocation-short', 'MODEL_SECRET_INVALID', 'too_short'],
          ['invocation-short', 'MODEL_SECRET_INVALID', 'too_short'],
          ['invocation-short', 'MODEL_SECRET_INVALID', 'not_a_string'],
          ['invocation-short', 'MODEL_SECRET_INVALID', 'not_a_string'],
        ],
      )
      assert.equal(refusals.map(({ message }) => message), [
        'MODEL_SECRET_INVALID: request.addSecret takes a secret of at most 16,384 characters, not 16,385 (each is looked for, in every form, in all the run records); the value is not shown',
        'MODEL_SECRET_INVALID: request.addSecret was given secrets of more than 65,536 characters together in one run (65,555 with this one); the value is not shown',
        'MODEL_SECRET_INVALID: request.addSecret was given more than 64 secrets in one run; the value is not shown',
        ...Array.from({ length: 3 }, () => 'MODEL_SECRET_INVALID: request.addSecret takes a secret of 8 characters or more (spaces around it not counted); the value is not shown'),
        'MODEL_SECRET_INVALID: request.addSecret takes a string, not a number; the value is not shown',
        'MODEL_SECRET_INVALID: request.addSecret takes a string, not undefined; the value is not shown',
      ])
      // A short one refused is not redacted inside words.
      assert.equal(only(await factsOf(h.log, 'invocation-short'), 'model.completed').map((fact) => fact.output.text), ['the Sec4567r refused Sec4'])
      // What was added is redacted; what was refused was not added.
      assert.equal(only(await factsOf(h.log, 'invocation-long'), 'model.completed').map((fact) => fact.output.text), [`echo [redacted] and ${tooLong.slice(0, 40)}`])
      assert.equal(only(await factsOf(h.log, 'invocation-many'), 'model.completed').map((fact) => fact.output.text), ['echo [redacted]'])
      const interrupted = only(await factsOf(h.log, 'invocation-uncaught'), 'model.interrupted')
      assert.equal(interrupted.map((fact) => fact.status), ['failed'])
      assert.match(interrupted[0]?.message ?? '', /^the model client failed: .*MODEL_SECRET_INVALID: request\.addSecret takes a secret of at most 16,384 characters/)
      assert.not.ok(JSON.stringify(await factsOf(h.log, 'invocation-uncaught')).includes(tooLong.slice(0, 16)), 'no part of the refused secret in the failure recorded')
    })
  })(),
)

test(
  "a client is told which request each attempt is: the invocation, the step, the attempt and the digest its model.requested fact records",
  engineTest(
    [answer.status(429, { retryAfterMs: 1 }), answer.toolCalls([{ id: 'call-o', name: 'echo', arguments: { value: 7 } }]), answer.text('done')],
    {
      model: {
        createClient: (provider) => {
          const inner = new OpenAIChatClient(provider)
          return {
            complete: (request) => {
              seenOrigins.push(request.origin === undefined ? undefined : structuredClone(request.origin))
              // A client that changes what it was given changes nothing of the run.
              if (request.origin) {
                request.origin.invocation.invocationId = 'changed'
                request.origin.attempt = 99
              }
              return inner.complete(request)
            },
          }
        },
      },
    },
    async (h) => {
      seenOrigins.length = 0
      assert.equal(await h.run(h.input('origin')), { status: 'completed' })
      const facts = await factsOf(h.log, 'invocation-origin')
      const requested = only(facts, 'model.requested')
      const opened = (await storedEvents(h.log)).find((stored) => stored.event.fact.type === 'invocation.opened')?.event
      assert.ok(opened)
      assert.is(requested.length, 3)
      assert.equal(
        seenOrigins,
        [
          { invocation: opened.invocation, stepId: 'step-1', attempt: 1, requestDigest: requested[0]?.requestDigest },
          { invocation: opened.invocation, stepId: 'step-1', attempt: 2, requestDigest: requested[1]?.requestDigest },
          { invocation: opened.invocation, stepId: 'step-2', attempt: 1, requestDigest: requested[2]?.requestDigest },
        ],
      )
      assert.is(requested[0]?.requestDigest, sha256(h.server.requests[0]?.bodyText ?? ''))
      assert.is.not(requested[2]?.requestDigest, requested[0]?.requestDigest)
      assert.is(opened.invocation.invocationId, 'invocation-origin', 'the run kept its own ids')
    },
  ),
)

test.run()
