/**
 * `factstate/opentelemetry` against the real OpenTelemetry SDK (an in-memory span exporter, a metric
 * reader): a real engine on a real LevelDB log in a temporary directory runs against the scripted
 * model server, and the follower's spans and metrics are checked against the log's facts: names,
 * parents, times equal to the facts' `recordedAt`, attributes, statuses, and nothing of the runs'
 * contents or the provider's key.
 */
import { type DiagLogger, DiagLogLevel, diag, type HrTime, type Meter, metrics, SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { type CollectionResult, type DataPoint, type Histogram, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, ModelExecutor, type RunInput, type StoredEvent, type ToolDefinition, childRunFor, intentFor, isFactstateError } from '../index.js'
import { type LogTelemetry, type TelemetryRun, telemetryFromLog } from '../opentelemetry/index.js'
import { answer, type RecordedRequest, type ScriptedAnswer, type ScriptedModelServer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { logInternals } from '../store/event-log.js'
import { rejectsWithCode } from './support/codes.js'
import { storedEvents } from './support/engine-fixtures.js'
import { EventMaker, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const API_KEY = 'sk-test-OTELSECRET1234567890abcdef'
/** Marks every piece of a run's contents: none may reach a span or a metric. */
const CONTENT = 'PRIVATE-CONTENT'

class TestReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** A tracer and a meter of the real SDK, and what they exported. */
function otel(more: SpanProcessor[] = []) {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter), ...more] })
  const reader = new TestReader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  return {
    tracer: tracerProvider.getTracer('factstate-test'),
    meter: meterProvider.getMeter('factstate-test'),
    spans: () => exporter.getFinishedSpans(),
    metrics: async () => (await reader.collect()).resourceMetrics,
    async shutdown() {
      await tracerProvider.shutdown()
      await meterProvider.shutdown()
    },
  }
}

/** An array proxy already revoked: any read of it throws. */
function revokedArray(): unknown {
  const { proxy, revoke } = Proxy.revocable<string[]>([], {})
  revoke()
  return proxy
}

/** The data points of metric `name`, each as its attributes (as JSON, keys sorted) and its value. */
function pointsOf(collected: CollectionResult['resourceMetrics'], name: string): { attributes: Record<string, unknown>; value: unknown }[] {
  const metric = collected.scopeMetrics.flatMap((scope) => scope.metrics).find((m) => m.descriptor.name === name)
  return (metric?.dataPoints ?? []).map((point: DataPoint<unknown>) => ({ attributes: { ...point.attributes }, value: point.value }))
}

/** A histogram's points as `[attributes, count, sum]`, sorted. */
function histogram(collected: CollectionResult['resourceMetrics'], name: string): [Record<string, unknown>, number, number][] {
  return pointsOf(collected, name)
    .map(({ attributes, value }) => [attributes, (value as Histogram).count, (value as Histogram).sum] as [Record<string, unknown>, number, number])
    .sort((a, b) => JSON.stringify(a[0]).localeCompare(JSON.stringify(b[0])))
}

const time = (ms: number): HrTime => [Math.floor(ms / 1000), (ms % 1000) * 1e6]

/** An engine on a fresh log, its clock a counter a second apart (so every fact has its own time), and a scripted server. */
async function withEngine(script: (request: RecordedRequest) => ScriptedAnswer, body: (h: { log: EventLog; engine: Engine; server: ScriptedModelServer; dir: string }) => Promise<void>) {
  await withTimeout(
    withTempDir(async (dir) => {
      const server = await scriptedModelServer(script)
      let clock = 1_800_000_000_000
      const log = await EventLog.open(join(dir, 'log'))
      try {
        const engine = new Engine({ log, now: () => (clock += 1000), model: new ModelExecutor({ timeoutMs: 5_000, retries: 0 }) })
        await withTimeout(body({ log, engine, server, dir }), 20_000, 'the body')
      } finally {
        await server.close()
        await log.close()
      }
    }),
    30_000,
  )
}

const input = (server: ScriptedModelServer, name: string, tools: ToolDefinition[], content = `${CONTENT} question ${name}`): RunInput => ({
  invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
  provider: { kind: 'openai-chat', baseUrl: server.baseUrl, model: 'scripted', apiKey: API_KEY },
  configuration: { cwd: '/srv/app' },
  tools,
  work: { kind: 'message', content },
})

const lastContent = (request: RecordedRequest) => {
  const messages = request.body.messages as { role: string; content?: unknown }[]
  return { first: String(messages.find((m) => m.role === 'user')?.content), last: messages.at(-1)?.role }
}

/** Waits (bounded by its test) until the follower has read the log's head. */
async function caughtUp(telemetry: LogTelemetry, log: EventLog): Promise<void> {
  while (telemetry.highWater() < log.head().highWater) await new Promise((resolve) => setTimeout(resolve, 5))
}

const byId = (spans: ReadableSpan[]) => new Map(spans.map((span) => [span.spanContext().spanId, span]))

test('spans from the facts: a run, its model attempts and tool calls (one failed, one a child run), at the facts times, parented; a failed run; metrics; no contents', () =>
  withEngine(
    (request) => {
      const { first, last } = lastContent(request)
      if (first.includes('child task')) return answer.text(`${CONTENT} the child's answer`, { usage: { prompt_tokens: 7, completion_tokens: 3 } })
      if (first.includes('doomed')) return answer.status(400)
      if (last === 'tool') return answer.text(`${CONTENT} the answer`, { usage: { prompt_tokens: 20, completion_tokens: 8 } })
      return answer.toolCalls(
        [
          { id: 'call-lookup', name: 'lookup', arguments: { q: `${CONTENT} lookup` } },
          { id: 'call-explode', name: 'explode', arguments: { q: `${CONTENT} explode` } },
          { id: 'call-delegate', name: 'delegate', arguments: { task: `${CONTENT} child task` } },
        ],
        { usage: { prompt_tokens: 10, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 4 }, completion_tokens_details: { reasoning_tokens: 2 } } },
      )
    },
    async ({ log, engine, server }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, meter: sdk.meter })
      const tools: ToolDefinition[] = [
        { name: 'lookup', readOnly: true, execute: async () => ({ found: `${CONTENT} output` }) },
        {
          name: 'explode',
          execute: async () => {
            throw new Error(`${CONTENT} failure message`)
          },
        },
        {
          name: 'delegate',
          async execute(args, context) {
            const child = await engine.start({ ...input(server, 'child', []), ...childRunFor(context, 'writer'), work: { kind: 'message', content: `${CONTENT} child task` } })
            return (await child.wait()).status
          },
        },
      ]
      assert.equal(await engine.run(input(server, 'main', tools)), { status: 'completed' })
      const doomed = await engine.run(input(server, 'doomed', [], `${CONTENT} doomed`))
      assert.is(doomed.status === 'failed' && doomed.class, 'model_failed')
      const facts = await storedEvents(log)
      // The follower ends once it has read every fact written before the close.
      await log.close()
      await telemetry.done
      assert.is(telemetry.highWater(), facts.length)

      const spans = sdk.spans()
      const ids = byId(spans)
      const parentOf = (span: ReadableSpan) => ids.get(span.parentSpanContext?.spanId ?? '')
      const factAt = (invocationId: string, type: string, key?: (stored: StoredEvent) => boolean) => {
        const found = facts.find((stored) => stored.event.invocation.invocationId === invocationId && stored.event.fact.type === type && (key === undefined || key(stored)))
        assert.ok(found, `${invocationId} has a ${type} fact`)
        return found
      }
      const runs = spans.filter((span) => span.name === 'invoke_agent')
      // The child's ids are childRunFor's: the call's operation id and the specialist's name.
      const childId = 'invocation-main.step-1.2.writer'
      assert.equal(runs.map((span) => span.attributes['factstate.invocation.id']).sort(), ['invocation-doomed', 'invocation-main', childId])
      const run = (id: string) => runs.find((span) => span.attributes['factstate.invocation.id'] === id) as ReadableSpan
      const main = run('invocation-main')
      const child = run(childId)
      const failed = run('invocation-doomed')

      // The run's span: from its opened fact to its ended fact, a root.
      assert.equal(main.startTime, time(factAt('invocation-main', 'invocation.opened').event.recordedAt))
      assert.equal(main.endTime, time(factAt('invocation-main', 'invocation.ended').event.recordedAt))
      assert.is(main.parentSpanContext, undefined)
      assert.is(main.status.code, SpanStatusCode.UNSET)
      assert.equal(
        { ...main.attributes },
        {
          'gen_ai.operation.name': 'invoke_agent',
          'gen_ai.conversation.id': 'session-main',
          'gen_ai.request.model': 'scripted',
          'factstate.invocation.id': 'invocation-main',
          'factstate.turn.id': 'turn-main',
          'factstate.run.id': 'run-main',
          'factstate.input.kind': 'message',
          'factstate.seq': factAt('invocation-main', 'invocation.opened').seq,
          'factstate.outcome.status': 'completed',
          'factstate.ended.seq': factAt('invocation-main', 'invocation.ended').seq,
        },
      )

      // Its model attempts and tool calls are its children.
      const children = spans.filter((span) => parentOf(span) === main)
      assert.equal(children.map((span) => span.name).sort(), ['chat scripted', 'chat scripted', 'execute_tool delegate', 'execute_tool explode', 'execute_tool lookup'])
      const chats = children.filter((span) => span.name === 'chat scripted').sort((a, b) => Number(a.attributes['factstate.seq']) - Number(b.attributes['factstate.seq']))
      const [firstChat, secondChat] = chats as [ReadableSpan, ReadableSpan]
      const requested = factAt('invocation-main', 'model.requested')
      const completed = factAt('invocation-main', 'model.completed')
      assert.equal(firstChat.startTime, time(requested.event.recordedAt))
      assert.equal(firstChat.endTime, time(completed.event.recordedAt))
      assert.is(firstChat.kind, SpanKind.CLIENT)
      assert.equal(
        { ...firstChat.attributes },
        {
          'gen_ai.operation.name': 'chat',
          'gen_ai.request.model': 'scripted',
          'gen_ai.conversation.id': 'session-main',
          'factstate.invocation.id': 'invocation-main',
          'factstate.step.id': 'step-1',
          'factstate.seq': requested.seq,
          'gen_ai.response.finish_reasons': ['tool_calls'],
          'gen_ai.response.id': (completed.event.fact as { output: { responseId: string } }).output.responseId,
          'gen_ai.usage.input_tokens': 10,
          'gen_ai.usage.output_tokens': 5,
          'gen_ai.usage.cache_read.input_tokens': 4,
          'gen_ai.usage.reasoning.output_tokens': 2,
          'factstate.tool_calls': 3,
        },
      )
      assert.is(secondChat.attributes['gen_ai.usage.input_tokens'], 20)
      // Not reported, not recorded.
      assert.equal([secondChat.attributes['gen_ai.usage.cache_read.input_tokens'], secondChat.attributes['gen_ai.usage.reasoning.output_tokens']], [undefined, undefined])

      const tool = (name: string) => children.find((span) => span.name === `execute_tool ${name}`) as ReadableSpan
      const operation = (name: string) => (stored: StoredEvent) => (stored.event.fact as { name?: string; operationId?: string }).name === name
      const lookupDispatched = factAt('invocation-main', 'tool.dispatched', operation('lookup'))
      const lookupOperation = (lookupDispatched.event.fact as { operationId: string }).operationId
      const lookupSettled = factAt('invocation-main', 'tool.settled', (stored) => (stored.event.fact as { operationId: string }).operationId === lookupOperation)
      assert.equal(tool('lookup').startTime, time(lookupDispatched.event.recordedAt))
      assert.equal(tool('lookup').endTime, time(lookupSettled.event.recordedAt))
      assert.is(tool('lookup').status.code, SpanStatusCode.UNSET)
      assert.equal(
        { ...tool('lookup').attributes },
        {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': 'lookup',
          'gen_ai.conversation.id': 'session-main',
          'factstate.invocation.id': 'invocation-main',
          'gen_ai.tool.call.id': 'call-lookup',
          'factstate.operation.id': lookupOperation,
          'factstate.seq': lookupDispatched.seq,
          'factstate.tool.read_only': true,
          'factstate.tool.outcome': 'succeeded',
        },
      )
      // The failed tool: an error, its message not recorded.
      assert.is(tool('explode').status.code, SpanStatusCode.ERROR)
      assert.is(tool('explode').attributes['factstate.tool.outcome'], 'failed')
      assert.is(tool('explode').attributes['error.type'], 'tool_failed')

      // The child run is under the call that started it, its model attempt under it.
      assert.is(parentOf(child), tool('delegate'))
      assert.is(child.attributes['factstate.parent.operation.id'], tool('delegate').attributes['factstate.operation.id'])
      assert.equal(spans.filter((span) => parentOf(span) === child).map((span) => span.name), ['chat scripted'])
      assert.equal(new Set([main, child, ...children].map((span) => span.spanContext().traceId)).size, 1, 'one trace')

      // The failed run: an error with its class; its one attempt an error with the interruption's status.
      assert.is(failed.status.code, SpanStatusCode.ERROR)
      assert.is(failed.status.message, 'failed: model_failed')
      assert.is(failed.attributes['factstate.outcome.class'], 'model_failed')
      assert.is(failed.attributes['error.type'], 'model_failed')
      const [failedChat, ...more] = spans.filter((span) => parentOf(span) === failed)
      assert.is(more.length, 0)
      assert.is(failedChat?.status.code, SpanStatusCode.ERROR)
      assert.equal([failedChat?.attributes['error.type'], failedChat?.attributes['http.response.status_code']], ['failed', 400])
      assert.equal(failedChat?.endTime, time(factAt('invocation-doomed', 'model.interrupted').event.recordedAt))

      // Metrics from the same facts.
      const collected = await sdk.metrics()
      assert.equal(pointsOf(collected, 'factstate.runs.started'), [{ attributes: { 'factstate.input.kind': 'message' }, value: 3 }])
      assert.equal(
        pointsOf(collected, 'factstate.runs.ended').sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
        [
          { attributes: { 'factstate.outcome.status': 'completed' }, value: 2 },
          { attributes: { 'factstate.outcome.status': 'failed', 'factstate.outcome.class': 'model_failed', 'error.type': 'model_failed' }, value: 1 },
        ],
      )
      // Each attempt's and call's duration in seconds: whole seconds, by the engine's clock.
      const durations = histogram(collected, 'gen_ai.client.operation.duration')
      assert.equal(
        durations.map(([attributes, count]) => [attributes, count]),
        [
          [{ 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'scripted', 'error.type': 'failed' }, 1],
          [{ 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'scripted' }, 3],
          [{ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'delegate' }, 1],
          [{ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'explode', 'error.type': 'tool_failed' }, 1],
          [{ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'lookup' }, 1],
        ],
      )
      const lookupSeconds = (lookupSettled.event.recordedAt - lookupDispatched.event.recordedAt) / 1000
      assert.is(durations[4]?.[2], lookupSeconds)
      assert.equal(
        histogram(collected, 'gen_ai.client.token.usage').map(([attributes, count, sum]) => [attributes['gen_ai.token.type'], count, sum]),
        [
          ['input', 3, 10 + 20 + 7],
          ['output', 3, 5 + 8 + 3],
        ],
      )

      // Nothing of the contents (messages, tool inputs, outputs, failure messages, answers), nor the key.
      const exported = JSON.stringify([spans.map((span) => [span.name, span.attributes, span.events, span.status]), collected.scopeMetrics])
      assert.ok(exported.includes('invocation-main'), 'the spans were read')
      assert.not.ok(exported.includes(CONTENT), 'no contents in the spans or metrics')
      assert.not.ok(exported.includes(API_KEY), 'no key')
      await sdk.shutdown()
    },
  ))

test('a call whose outcome is unknown ends with its run: outcome unknown, at the ended fact; the run an error with its class', () =>
  withEngine(
    (request) => (lastContent(request).last === 'tool' ? answer.text('done') : answer.toolCalls([{ name: 'stuck', arguments: {} }])),
    async ({ log, engine, server }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer })
      const outcome = await engine.run(input(server, 'stuck', [{ name: 'stuck', timeoutMs: 50, execute: () => new Promise(() => undefined) }]))
      assert.is(outcome.status === 'failed' && outcome.class, 'outcome_unknown')
      const facts = await storedEvents(log)
      await log.close()
      await telemetry.done
      const spans = sdk.spans()
      const run = spans.find((span) => span.name === 'invoke_agent') as ReadableSpan
      const call = spans.find((span) => span.name === 'execute_tool stuck') as ReadableSpan
      const ended = facts.find((stored) => stored.event.fact.type === 'invocation.ended') as StoredEvent
      assert.is(call.parentSpanContext?.spanId, run.spanContext().spanId)
      assert.equal([call.status.code, call.attributes['factstate.tool.outcome'], call.attributes['error.type']], [SpanStatusCode.ERROR, 'unknown', 'outcome_unknown'])
      assert.is(call.status.message, 'outcome unknown: the call never settled, and its run ended failed: outcome_unknown')
      assert.equal(call.endTime, time(ended.event.recordedAt))
      assert.equal([run.status.code, run.status.message, run.attributes['factstate.outcome.class']], [SpanStatusCode.ERROR, 'failed: outcome_unknown', 'outcome_unknown'])
      await sdk.shutdown()
    },
  ))

test("an outcome unknown says what the log says: a call settled unknown (an application's own fact), one never settled before its run ended cancelled", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(join(dir, 'log'))
      try {
        const sdk = otel()
        const telemetry = telemetryFromLog(log, { tracer: sdk.tracer })
        const calls = ['op1', 'op2'].map((op) => ({ callId: `call-${op}`, name: 'echo', arguments: '{}' }))
        const run = new EventMaker(invocationOf('unknowns'))
        for (const event of run.many([
          facts.opened(),
          facts.requested('s1'),
          facts.completed('s1', calls),
          facts.dispatched('op1'),
          facts.dispatched('op2'),
          { type: 'tool.settled', operationId: 'op1', outcome: { status: 'unknown', message: `${CONTENT} lost` } },
          facts.ended({ status: 'cancelled', source: 'signal' }),
        ])) {
          await log.append(event)
        }
        await log.close()
        await telemetry.done
        const call = (op: string) => sdk.spans().find((span) => span.attributes['factstate.operation.id'] === op) as ReadableSpan
        assert.equal([call('op1').status, call('op1').attributes['factstate.tool.outcome']], [{ code: SpanStatusCode.ERROR, message: 'outcome unknown: the call settled with its outcome unknown' }, 'unknown'])
        assert.equal([call('op2').status, call('op2').attributes['factstate.tool.outcome']], [{ code: SpanStatusCode.ERROR, message: 'outcome unknown: the call never settled, and its run ended cancelled' }, 'unknown'])
        assert.not.ok(JSON.stringify(sdk.spans().map((span) => [span.attributes, span.status])).includes(CONTENT), "the settle's message is not in a span")
        await sdk.shutdown()
      } finally {
        await log.close()
      }
    }),
    30_000,
    'the test',
  ))

test("a meter taken before a meter provider was registered (the API's no-op meter) is warned of on diag, once; a meter of a provider is not", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(join(dir, 'log'))
      const warned: string[] = []
      diag.setLogger({ error: () => undefined, warn: (message) => void warned.push(message), info: () => undefined, debug: () => undefined, verbose: () => undefined }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true })
      const sdk = otel()
      try {
        const early = metrics.getMeter('factstate-early')
        const noop = telemetryFromLog(log, { meter: early })
        assert.equal(warned.length, 1, 'the no-op meter is warned of')
        assert.match(warned[0] as string, /no-op meter, which records nothing/)
        await log.append(new EventMaker(invocationOf('counted')).next(facts.opened()))
        await caughtUp(noop, log)
        assert.is(warned.length, 1, 'once, not per fact')
        await noop.stop()
        const provider = new MeterProvider()
        metrics.setGlobalMeterProvider(provider)
        try {
          const late = telemetryFromLog(log, { meter: metrics.getMeter('factstate-late') })
          const given = telemetryFromLog(log, { tracer: sdk.tracer, meter: sdk.meter })
          await Promise.all([late.stop(), given.stop()])
          assert.is(warned.length, 1, "a meter of a registered provider, or of the SDK's own, is not warned of")
        } finally {
          metrics.disable()
          await provider.shutdown()
        }
      } finally {
        diag.disable()
        await sdk.shutdown()
        await log.close()
      }
    }),
    30_000,
    'the test',
  ))

test('a follower started mid-log: a run opened before it has no spans but its end is counted; the runs after it are traced', () =>
  withEngine(
    (request) => answer.text('answer', { hold: lastContent(request).first.includes('early') }),
    async ({ log, engine, server }) => {
      const sdk = otel()
      const early = await engine.start(input(server, 'early', [], 'early'))
      await server.seen(0)
      const from = log.head().highWater + 1
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, meter: sdk.meter })
      assert.is(telemetry.highWater(), from - 1)
      server.release(0)
      assert.equal(await early.wait(), { status: 'completed' })
      assert.equal(await engine.run(input(server, 'late', [], 'late')), { status: 'completed' })
      await log.close()
      await telemetry.done
      const spans = sdk.spans()
      assert.equal(spans.map((span) => [span.name, span.attributes['factstate.invocation.id']]).sort(), [
        ['chat scripted', 'invocation-late'],
        ['invoke_agent', 'invocation-late'],
      ])
      const collected = await sdk.metrics()
      assert.equal(pointsOf(collected, 'factstate.runs.started').map((point) => point.value), [1])
      assert.equal(pointsOf(collected, 'factstate.runs.ended').map((point) => point.value), [2], "the early run's end is counted")
      // The early run's attempt began before the follower: not timed.
      assert.equal(histogram(collected, 'gen_ai.client.operation.duration').map(([, count]) => count), [1])
      await sdk.shutdown()
    },
  ))

test('stop() ends the follower at once: an open run ends unfinished at the last fact read, and nothing after is recorded', () =>
  withEngine(
    (request) => answer.text('answer', { hold: lastContent(request).first.includes('held') }),
    async ({ log, engine, server }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer })
      const running = await engine.start(input(server, 'held', [], 'held'))
      await server.seen(0)
      await caughtUp(telemetry, log)
      const requested = (await storedEvents(log)).at(-1) as StoredEvent
      assert.is(requested.event.fact.type, 'model.requested')
      await telemetry.stop()
      await telemetry.done
      const stopped = sdk.spans().map((span) => [span.name, span.attributes['factstate.unfinished'], span.endTime])
      assert.equal(stopped, [
        ['chat scripted', true, time(requested.event.recordedAt)],
        ['invoke_agent', true, time(requested.event.recordedAt)],
      ])
      server.release(0)
      assert.equal(await running.wait(), { status: 'completed' })
      assert.equal(await engine.run(input(server, 'after', [])), { status: 'completed' })
      assert.is(telemetry.highWater(), requested.seq, 'nothing read after the stop')
      assert.is(sdk.spans().length, 2)
      await sdk.shutdown()
    },
  ))

test("a log that fails ends the follower with the failure once it read every durable fact", () =>
  withEngine(
    () => answer.text('answer'),
    async ({ log, engine, server, dir }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { meter: sdk.meter })
      assert.equal(await engine.run(input(server, 'one', [])), { status: 'completed' })
      await rm(join(dir, 'log'), { recursive: true })
      await engine.run(input(server, 'two', [])).catch(() => undefined)
      const error = await telemetry.done.then(
        () => undefined,
        (failure: unknown) => failure,
      )
      assert.ok(isFactstateError(error, 'LOG_IO'), `the follower ended with ${String(error)}`)
      const collected = await sdk.metrics()
      assert.equal(pointsOf(collected, 'factstate.runs.ended').map((point) => point.value), [1])
      await telemetry.stop()
      await sdk.shutdown()
    },
  ))

test('options it cannot use are OPENTELEMETRY_INVALID_OPTIONS naming the option; a from past the log is LOG_INVALID_ARGUMENT', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const sdk = otel()
      const log = await EventLog.open(join(dir, 'log'))
      try {
        const cases: [unknown, unknown, string][] = [
          [log, {}, 'tracer'],
          [log, undefined, 'tracer'],
          [log, null, 'options'],
          [log, { tracer: {} }, 'tracer'],
          [log, { meter: { createCounter: () => undefined } }, 'meter'],
          [log, { tracer: null }, 'tracer'],
          [log, { meter: null }, 'meter'],
          [log, { tracer: sdk.tracer, meter: null }, 'meter'],
          [log, { tracer: sdk.tracer, from: 0 }, 'from'],
          [log, { tracer: sdk.tracer, from: 1.5 }, 'from'],
          [log, { tracer: sdk.tracer, from: '1' }, 'from'],
          [log, { tracer: sdk.tracer, tracers: sdk.tracer }, 'tracers'],
          [log, { tracer: sdk.tracer, providerName: '' }, 'providerName'],
          [log, { tracer: sdk.tracer, providerName: 'open ai' }, 'providerName'],
          [log, { tracer: sdk.tracer, providerName: 42 }, 'providerName'],
          [log, { tracer: sdk.tracer, providerName: null }, 'providerName'],
          [log, { tracer: sdk.tracer, providerName: 'a'.repeat(65) }, 'providerName'],
          [log, { tracer: sdk.tracer, attributes: 'tenant-a' }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: null }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: ['tenant-a'] }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: { 'tenant.id': undefined } }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: { 'tenant.id': null } }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: { 'tenant.id': { id: 'a' } } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'tenant.id': Number.NaN } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'tenant.id': 10n } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'tenant.tags': ['a', 1] } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'tenant.tags': ['a', null] } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { '': 'a' } }, 'attributes'],
          // The follower's own keys: refused, neither overriding nor overridden.
          [log, { meter: sdk.meter, attributes: { 'gen_ai.provider.name': 'openai' } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'factstate.seq': 1 } }, 'attributes'],
          [log, { meter: sdk.meter, attributes: { 'error.type': 'x' } }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: { 'http.response.status_code': 200 } }, 'attributes'],
          // Attributes that cannot be read: a getter that throws, a proxy that refuses to list its keys, a revoked array in it.
          [log, { tracer: sdk.tracer, attributes: { get 'tenant.id'() { throw new Error('no tenant') } } }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: new Proxy({}, { ownKeys: () => { throw new Error('no keys') } }) }, 'attributes'],
          [log, { tracer: sdk.tracer, attributes: { 'tenant.tags': revokedArray() } }, 'attributes'],
          [{}, { tracer: sdk.tracer }, 'log'],
          [null, { tracer: sdk.tracer }, 'log'],
        ]
        for (const [index, [target, options, field]] of cases.entries()) {
          const error = await rejectsWithCode(async () => telemetryFromLog(target as EventLog, options as never), 'OPENTELEMETRY_INVALID_OPTIONS', `case ${index}`)
          assert.is(error.details?.field, field, `case ${index}`)
        }
        // A URL is no name: refused unquoted (it may carry a key), the conventions' name told for a host that serves one provider.
        const url = await rejectsWithCode(async () => telemetryFromLog(log, { tracer: sdk.tracer, providerName: 'https://api.openai.com/v1' }), 'OPENTELEMETRY_INVALID_OPTIONS')
        assert.equal([url.details?.field, url.message.includes("the conventions' name for api.openai.com is 'openai'"), url.message.includes('/v1')], ['providerName', true, false])
        const keyed = await rejectsWithCode(async () => telemetryFromLog(log, { tracer: sdk.tracer, providerName: `https://user:${API_KEY}@proxy.example/v1` }), 'OPENTELEMETRY_INVALID_OPTIONS')
        assert.equal([keyed.details?.field, keyed.message.includes(API_KEY), keyed.message.includes('proxy.example')], ['providerName', false, false])
        // Neither a tracer nor a meter: the type refuses it, and the runtime too (for JavaScript callers).
        // @ts-expect-error a tracer, a meter or both
        const neither = () => telemetryFromLog(log, {})
        // @ts-expect-error both given as undefined is neither
        const unset = () => telemetryFromLog(log, { tracer: undefined, meter: undefined })
        for (const call of [neither, unset]) assert.is((await rejectsWithCode(async () => call(), 'OPENTELEMETRY_INVALID_OPTIONS')).details?.field, 'tracer')
        const misspelt = await rejectsWithCode(async () => telemetryFromLog(log, { tracers: sdk.tracer } as never), 'OPENTELEMETRY_INVALID_OPTIONS')
        assert.match(misspelt.message, 'did you mean tracer?')
        const own = await rejectsWithCode(async () => telemetryFromLog(log, { meter: sdk.meter, attributes: { 'tenant.id': 'a', 'factstate.log': 'a' } }), 'OPENTELEMETRY_INVALID_OPTIONS')
        assert.match(own.message, '"factstate.log" is one the follower sets itself')
        assert.is(logInternals(log).followerCount(), 0, 'a refused follower is never registered')
        const past = await rejectsWithCode(async () => telemetryFromLog(log, { tracer: sdk.tracer, from: 5 }), 'LOG_INVALID_ARGUMENT')
        assert.is(past.details?.field, 'from')
        // The next fact is a valid start, as for log.events.
        const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, from: 1 })
        await telemetry.stop()
        await telemetry.done
      } finally {
        await log.close()
        await sdk.shutdown()
      }
    }),
    10_000,
  ))

test('attributes tell logs apart: two logs feeding one tracer and one meter, every span and every data point carrying its own log\'s, copied when the follower started', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const server = await scriptedModelServer((request) =>
        lastContent(request).last === 'tool' ? answer.text('done', { usage: { prompt_tokens: 3, completion_tokens: 2 } }) : answer.toolCalls([{ name: 'lookup', arguments: {} }], { usage: { prompt_tokens: 5, completion_tokens: 1 } }),
      )
      const sdk = otel()
      const tenants = ['acme', 'globex'] as const
      const opened: { log: EventLog; engine: Engine; telemetry: LogTelemetry }[] = []
      try {
        for (const tenant of tenants) {
          const log = await EventLog.open(join(dir, tenant))
          const given: { 'tenant.id': string; 'tenant.shard': number; 'tenant.tags': string[] } = { 'tenant.id': tenant, 'tenant.shard': tenant === 'acme' ? 1 : 2, 'tenant.tags': ['trial', tenant] }
          const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, meter: sdk.meter, attributes: given })
          // Changed after the start: not seen.
          given['tenant.id'] = 'changed'
          given['tenant.tags'].push('changed')
          opened.push({ log, engine: new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, retries: 0 }) }), telemetry })
        }
        const tools: ToolDefinition[] = [{ name: 'lookup', execute: async () => 'found' }]
        // The same ids in both logs: only the attributes tell the runs apart.
        for (const { engine } of opened) {
          assert.equal(await engine.run(input(server, 'same', tools)), { status: 'completed' })
        }
        assert.equal(await opened[1]?.engine.run(input(server, 'second', tools)), { status: 'completed' })
        for (const { log, telemetry } of opened) {
          await log.close()
          await telemetry.done
        }
        const expected = (tenant: string) => ({ 'tenant.id': tenant, 'tenant.shard': tenant === 'acme' ? 1 : 2, 'tenant.tags': ['trial', tenant] })
        const own = (attributes: Record<string, unknown>) => Object.fromEntries(Object.entries(attributes).filter(([key]) => key.startsWith('tenant.')))

        const spans = sdk.spans()
        assert.equal(spans.map((span) => span.name).sort(), [...Array(3).fill(['chat scripted', 'chat scripted', 'execute_tool lookup', 'invoke_agent'])].flat().sort())
        for (const span of spans) assert.ok(tenants.some((tenant) => JSON.stringify(own(span.attributes)) === JSON.stringify(expected(tenant))), `${span.name} carries its log's attributes: ${JSON.stringify(own(span.attributes))}`)
        // The library's own attributes are all still there.
        const run = spans.find((span) => span.name === 'invoke_agent' && span.attributes['tenant.id'] === 'globex' && span.attributes['factstate.invocation.id'] === 'invocation-same') as ReadableSpan
        assert.ok(run, "globex's run")
        assert.equal([run.attributes['gen_ai.operation.name'], run.attributes['factstate.outcome.status'], run.attributes['factstate.seq']], ['invoke_agent', 'completed', 1])
        const byTenant = (tenant: string) => spans.filter((span) => span.attributes['tenant.id'] === tenant).length
        assert.equal(tenants.map(byTenant), [4, 8])

        const collected = await sdk.metrics()
        const byLog = (name: string) =>
          pointsOf(collected, name)
            .map(({ attributes, value }) => [own(attributes), typeof value === 'number' ? value : (value as Histogram).count] as const)
            .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))
        assert.equal(byLog('factstate.runs.started'), [
          [expected('acme'), 1],
          [expected('globex'), 2],
        ])
        assert.equal(byLog('factstate.runs.ended'), [
          [expected('acme'), 1],
          [expected('globex'), 2],
        ])
        // Two points per log (chat, execute_tool); two per log (input, output tokens).
        assert.equal(byLog('gen_ai.client.operation.duration'), [
          [expected('acme'), 1],
          [expected('acme'), 2],
          [expected('globex'), 2],
          [expected('globex'), 4],
        ])
        assert.equal(byLog('gen_ai.client.token.usage'), [
          [expected('acme'), 2],
          [expected('acme'), 2],
          [expected('globex'), 4],
          [expected('globex'), 4],
        ])
      } finally {
        for (const { log } of opened) await log.close()
        await server.close()
        await sdk.shutdown()
      }
    }),
    30_000,
  ))

/** A span processor of the service's own (an enricher, a filter) that throws as a model attempt's span starts and as each span ends, after the exporter's processor took it. */
class ThrowingProcessor implements SpanProcessor {
  ends = 0
  onStart(span: { name: string }): void {
    if (span.name.startsWith('chat')) throw new Error('the processor broke at the start')
  }
  onEnd(): void {
    this.ends += 1
    throw new Error('the processor broke')
  }
  async forceFlush(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

test("a tracer that throws does not end the follower: the error goes to OpenTelemetry's diag, every fact is still read, every span still ended", () =>
  withEngine(
    (request) => (lastContent(request).last === 'tool' ? answer.text('done') : answer.toolCalls([{ name: 'lookup', arguments: {} }])),
    async ({ log, engine, server }) => {
      const throwing = new ThrowingProcessor()
      const sdk = otel([throwing])
      const reported: unknown[] = []
      const logger: DiagLogger = { error: (...args) => void reported.push(args), warn: () => undefined, info: () => undefined, debug: () => undefined, verbose: () => undefined }
      diag.setLogger(logger, { logLevel: DiagLogLevel.ERROR, suppressOverrideMessage: true })
      try {
        const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, meter: sdk.meter })
        const lookup: ToolDefinition = { name: 'lookup', execute: async () => 'found' }
        assert.equal(await engine.run(input(server, 'one', [lookup])), { status: 'completed' })
        assert.equal(await engine.run(input(server, 'two', [lookup])), { status: 'completed' })
        const facts = await storedEvents(log)
        await log.close()
        await telemetry.done
        assert.is(telemetry.highWater(), facts.length, 'every fact read')
        // Two runs, each two model attempts and one call: the attempts' spans never started (the tracer threw
        // as they did); every other span ended (and exported) despite the throws.
        assert.equal(sdk.spans().map((span) => span.name).sort(), ['execute_tool lookup', 'execute_tool lookup', 'invoke_agent', 'invoke_agent'])
        assert.is(throwing.ends, 4)
        assert.ok(reported.length >= 1, 'the errors were reported to diag')
        assert.ok(String(JSON.stringify(reported.map((args) => String((args as unknown[])[0])))).includes('factstate'), 'the report names its source')
        const collected = await sdk.metrics()
        assert.equal(pointsOf(collected, 'factstate.runs.ended').map((point) => point.value), [2], 'the metrics still taken')
        assert.equal(
          histogram(collected, 'gen_ai.client.operation.duration').map(([attributes, count]) => [attributes['gen_ai.operation.name'], count]),
          [
            ['chat', 4],
            ['execute_tool', 2],
          ],
          "the attempts whose spans did not start are timed",
        )
      } finally {
        diag.disable()
        await sdk.shutdown()
      }
    },
  ))

test('a meter whose counters throw: the runs are still traced, their spans parented, the histograms still taken', () =>
  withEngine(
    () => answer.text('done'),
    async ({ log, engine, server }) => {
      const sdk = otel()
      // A meter of the service's own making, over the SDK's, whose counters throw as they count.
      const meter = Object.assign(Object.create(sdk.meter) as Meter, {
        createCounter: () => ({
          add() {
            throw new Error('the counter broke')
          },
        }),
        createHistogram: sdk.meter.createHistogram.bind(sdk.meter),
      })
      diag.setLogger({ error: () => undefined, warn: () => undefined, info: () => undefined, debug: () => undefined, verbose: () => undefined }, { logLevel: DiagLogLevel.ERROR, suppressOverrideMessage: true })
      try {
        const telemetry = telemetryFromLog(log, { tracer: sdk.tracer, meter })
        assert.equal(await engine.run(input(server, 'counted', [])), { status: 'completed' })
        await log.close()
        await telemetry.done
        const spans = sdk.spans()
        const run = spans.find((span) => span.name === 'invoke_agent')
        assert.ok(run, "the run's span")
        assert.equal(
          spans.filter((span) => span.parentSpanContext?.spanId === run.spanContext().spanId).map((span) => span.name),
          ['chat scripted'],
        )
        assert.equal(histogram(await sdk.metrics(), 'gen_ai.client.operation.duration').map(([, count]) => count), [1])
      } finally {
        diag.disable()
        await sdk.shutdown()
      }
    },
  ))

test("a call to a tool the catalog does not have: the model's name for it (the model's own words) is in no span name or attribute", () =>
  withEngine(
    (request) => (lastContent(request).last === 'tool' ? answer.text('done') : answer.toolCalls([{ id: 'call-made-up', name: `${CONTENT}_tool`, arguments: {} }])),
    async ({ log, engine, server }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer })
      assert.equal(await engine.run(input(server, 'unknown', [{ name: 'lookup', execute: async () => 'found' }])), { status: 'completed' })
      const facts = await storedEvents(log)
      assert.ok(JSON.stringify(facts).includes(`${CONTENT}_tool`), "the log has the model's name for it")
      await log.close()
      await telemetry.done
      const rejected = sdk.spans().find((span) => span.attributes['factstate.tool.outcome'] === 'rejected') as ReadableSpan
      assert.ok(rejected, 'the rejected call has its span')
      assert.is(rejected.name, 'execute_tool')
      assert.is(rejected.attributes['gen_ai.tool.name'], undefined)
      assert.equal([rejected.attributes['factstate.tool.reject_reason'], rejected.attributes['error.type'], rejected.status.code], ['unknown_tool', 'unknown_tool', SpanStatusCode.ERROR])
      const exported = JSON.stringify(sdk.spans().map((span) => [span.name, span.attributes, span.events, span.status]))
      assert.not.ok(exported.includes(CONTENT), 'no contents in the spans')
      await sdk.shutdown()
    },
  ))

test('a snapshot cannot be followed: OPENTELEMETRY_INVALID_OPTIONS naming the log; a meter that throws as its instruments are made leaves no follower', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const sdk = otel()
      const log = await EventLog.open(join(dir, 'log'))
      const snapshot = await EventLog.openSnapshot(join(dir, 'log'), { directory: dir })
      try {
        const error = await rejectsWithCode(async () => telemetryFromLog(snapshot, { tracer: sdk.tracer }), 'OPENTELEMETRY_INVALID_OPTIONS')
        assert.is(error.details?.field, 'log')
        assert.match(error.message, 'snapshot')
        assert.is(logInternals(snapshot).followerCount(), 0)
        const broken = {
          createCounter() {
            throw new Error('no counters here')
          },
          createHistogram() {
            throw new Error('no histograms here')
          },
        } as unknown as Meter
        assert.throws(() => telemetryFromLog(log, { meter: broken }), /no counters here/)
        assert.is(logInternals(log).followerCount(), 0, 'no follower is left registered')
      } finally {
        await snapshot.close()
        await log.close()
        await sdk.shutdown()
      }
    }),
    10_000,
  ))

test('gen_ai.provider.name from providerName (a name, or a function of the run, asked once per run) on the run and chat spans and the chat measurements; what the settings record of the request; a function that throws or answers a URL is reported, never quoted', () =>
  withEngine(
    () => answer.text('done', { usage: { prompt_tokens: 3, completion_tokens: 2 } }),
    async ({ log, engine, server }) => {
      const named = otel()
      const asked = otel()
      const reported: string[] = []
      diag.setLogger({ error: (message) => void reported.push(message), warn: () => undefined, info: () => undefined, debug: () => undefined, verbose: () => undefined }, { logLevel: DiagLogLevel.ERROR, suppressOverrideMessage: true })
      try {
        const calls: TelemetryRun[] = []
        const byName = telemetryFromLog(log, { tracer: named.tracer, meter: named.meter, providerName: 'openai' })
        const bySession = telemetryFromLog(log, {
          tracer: asked.tracer,
          meter: asked.meter,
          providerName: (run) => {
            calls.push(run)
            const session = run.invocation.sessionId
            if (session === 'session-throws') throw new Error('no provider here')
            if (session === 'session-url') return `https://user:${API_KEY}@api.anthropic.com/v1`
            if (session === 'session-none') return undefined
            return 'anthropic'
          },
        })
        // Settings the request is made with, recorded in invocation.opened: the limit and sampling numbers; not the text of an option.
        const settings = { mainOutputLimit: 256, providerOptions: { temperature: 0.2, top_p: 0.9, seed: 7, n: 1, user: `${CONTENT} user`, stop: [`${CONTENT} stop`] } }
        assert.equal(await engine.run({ ...input(server, 'set', []), ...settings }), { status: 'completed' })
        for (const name of ['throws', 'url', 'none']) assert.equal(await engine.run(input(server, name, [])), { status: 'completed' })
        await log.close()
        await Promise.all([byName.done, bySession.done])

        const attributesOf = (spans: ReadableSpan[], name: string, id: string) => spans.find((span) => span.name === name && span.attributes['factstate.invocation.id'] === id)?.attributes ?? {}
        const request = { 'gen_ai.request.max_tokens': 256, 'gen_ai.request.temperature': 0.2, 'gen_ai.request.top_p': 0.9, 'gen_ai.request.seed': 7 }
        const pick = (attributes: Record<string, unknown>) =>
          Object.fromEntries(Object.entries(attributes).filter(([key]) => key === 'gen_ai.provider.name' || key.startsWith('gen_ai.request.') && key !== 'gen_ai.request.model'))
        for (const [sdk, provider] of [
          [named, 'openai'],
          [asked, 'anthropic'],
        ] as const) {
          const spans = sdk.spans()
          for (const name of ['invoke_agent', 'chat scripted']) {
            assert.equal(pick(attributesOf(spans, name, 'invocation-set')), { 'gen_ai.provider.name': provider, ...request }, `${name} of the run with settings`)
          }
          const collected = await sdk.metrics()
          const chat = histogram(collected, 'gen_ai.client.operation.duration').filter(([attributes]) => attributes['gen_ai.provider.name'] === provider)
          assert.ok(chat.length === 1 && chat[0]?.[0]['gen_ai.operation.name'] === 'chat', 'the chat durations carry the provider')
          assert.ok(histogram(collected, 'gen_ai.client.token.usage').some(([attributes]) => attributes['gen_ai.provider.name'] === provider), 'the token usage carries the provider')
        }
        // A name given: every run has it. A function: the runs it names; none for one it threw for, answered a URL or undefined.
        for (const name of ['throws', 'url', 'none']) {
          assert.is(attributesOf(named.spans(), 'invoke_agent', `invocation-${name}`)['gen_ai.provider.name'], 'openai')
          for (const span of ['invoke_agent', 'chat scripted']) assert.equal(pick(attributesOf(asked.spans(), span, `invocation-${name}`)), {}, `${span} of ${name}`)
        }
        assert.equal(
          calls.map((run) => [run.invocation.invocationId, run.model]),
          ['set', 'throws', 'url', 'none'].map((name) => [`invocation-${name}`, 'scripted']),
          'asked once per run, with its ids and model',
        )
        assert.equal(reported.length, 2, 'the throw and the URL reported')
        assert.ok(reported.every((message) => message.includes('providerName') && !message.includes(API_KEY) && !message.includes('/v1')), 'the answer is not quoted')
        assert.ok(reported.some((message) => message.includes("the conventions' name for api.anthropic.com is 'anthropic'")), 'the name meant is told')
        const exported = JSON.stringify([...named.spans(), ...asked.spans()].map((span) => [span.attributes, span.events]))
        assert.not.ok(exported.includes(CONTENT), "no provider option's text")
        assert.not.ok(exported.includes(API_KEY), 'no key')
      } finally {
        diag.disable()
        await named.shutdown()
        await asked.shutdown()
      }
    },
  ))

test('a follower started mid-log asks providerName for a run opened before it at its first model attempt, so its measurements carry the provider', () =>
  withEngine(
    (request) => {
      const { last } = lastContent(request)
      return last === 'tool' ? answer.text('done') : answer.toolCalls([{ name: 'lookup', arguments: {} }], { hold: true })
    },
    async ({ log, engine, server }) => {
      const sdk = otel()
      const running = await engine.start(input(server, 'early', [{ name: 'lookup', execute: async () => 'found' }]))
      await server.seen(0)
      const calls: TelemetryRun[] = []
      const telemetry = telemetryFromLog(log, { meter: sdk.meter, providerName: (run) => (calls.push(run), 'groq') })
      server.release(0)
      assert.equal(await running.wait(), { status: 'completed' })
      await log.close()
      await telemetry.done
      assert.equal(calls.map((run) => [run.invocation.invocationId, run.model]), [['invocation-early', 'scripted']])
      // The attempt begun after the follower is timed, with the provider; the call too, without it.
      assert.equal(
        histogram(await sdk.metrics(), 'gen_ai.client.operation.duration').map(([attributes, count]) => [attributes, count]),
        [
          [{ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'groq', 'gen_ai.request.model': 'scripted' }, 1],
          [{ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'lookup' }, 1],
        ],
      )
      await sdk.shutdown()
    },
  ))

test("holds are events of the run's span, at their facts' times: one released (the run goes on), one sealed (the run ends handoff_paused, no error)", () =>
  withEngine(
    () => answer.text('done'),
    async ({ log, engine, server }) => {
      const sdk = otel()
      const telemetry = telemetryFromLog(log, { tracer: sdk.tracer })
      // Reserved right after start(): held at once, before the first model request.
      const released = await engine.start(input(server, 'released', []))
      const held = await released.handoff().reserve(intentFor(released.invocation, 'to-reviewer')).ready()
      await held.release()
      assert.equal(await released.wait(), { status: 'completed' })
      const sealed = await engine.start(input(server, 'sealed', []))
      const pause = await (await sealed.handoff().reserve(intentFor(sealed.invocation, 'to-successor')).ready()).commit()
      assert.equal(await sealed.wait(), { status: 'handoff_paused', pause })
      const facts = await storedEvents(log)
      await log.close()
      await telemetry.done

      const holdFacts = (id: string) =>
        facts
          .filter((stored) => stored.event.invocation.invocationId === id && stored.event.fact.type.startsWith('hold.'))
          .map((stored) => ({ name: `factstate.${stored.event.fact.type}`, attributes: { 'factstate.handoff.id': (stored.event.fact as { handoffId: string }).handoffId, 'factstate.seq': stored.seq }, time: time(stored.event.recordedAt) }))
      const eventsOf = (id: string) => {
        const span = sdk.spans().find((candidate) => candidate.name === 'invoke_agent' && candidate.attributes['factstate.invocation.id'] === id) as ReadableSpan
        assert.ok(span, `the span of ${id}`)
        return { span, events: span.events.map((event) => ({ name: event.name, attributes: { ...event.attributes }, time: event.time })) }
      }
      const first = eventsOf('invocation-released')
      assert.equal(holdFacts('invocation-released').map((event) => event.name), ['factstate.hold.entered', 'factstate.hold.released'], 'the log holds the hold and its release')
      assert.equal(first.events, holdFacts('invocation-released'))
      assert.is(first.events[0]?.attributes['factstate.handoff.id'], 'to-reviewer')
      assert.equal([first.span.status.code, first.span.attributes['factstate.outcome.status']], [SpanStatusCode.UNSET, 'completed'])
      const second = eventsOf('invocation-sealed')
      assert.equal(second.events, holdFacts('invocation-sealed'))
      assert.equal(second.events.map((event) => [event.name, event.attributes['factstate.handoff.id']]), [['factstate.hold.entered', 'to-successor']], 'sealed: entered, never released')
      assert.equal([second.span.status.code, second.span.attributes['factstate.outcome.status']], [SpanStatusCode.UNSET, 'handoff_paused'])
      await sdk.shutdown()
    },
  ))

test.run()
