/**
 * Traces and metrics of a running service from its log (`factstate/opentelemetry`): a follower
 * started with the log records a span per run, model attempt and tool call on the application's
 * OpenTelemetry tracer, at the times the facts record, and the GenAI metrics on its meter. Two runs:
 * one looks an order up and fails to refund it (the tool throws), one is refused by the model's
 * provider. The spans are printed as a tree; an in-memory exporter stands in for yours (OTLP, say).
 * Beside factstate: `npm install @opentelemetry/api @opentelemetry/sdk-trace-base @opentelemetry/sdk-metrics`.
 *
 *   npx tsx examples/opentelemetry.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader, type Histogram } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { Engine, EventLog, ModelExecutor, type RunInput } from 'factstate'
import { telemetryFromLog } from 'factstate/opentelemetry'
import { answer, scriptedModelServer } from 'factstate/testing'

// Your SDK, as your service configures it.
const spans = new InMemorySpanExporter()
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] })
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const metricReader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 60_000 })
const meterProvider = new MeterProvider({ readers: [metricReader] })

let failed = false
const check = (ok: boolean, what: string) => {
  console.log(`${ok ? '✔' : '✘'} ${what}`)
  if (!ok) failed = true
}

const model = await scriptedModelServer((request) => {
  const messages = request.body.messages as { role: string; content?: string }[]
  if (String(messages.find((m) => m.role === 'user')?.content).includes('B-2')) return answer.status(400)
  if (messages.at(-1)?.role === 'tool') return answer.text('The refund of A-1 could not be issued.')
  return answer.toolCalls([
    { name: 'lookup_order', arguments: { order: 'A-1' } },
    { name: 'refund', arguments: { order: 'A-1' } },
  ])
})
const dir = await mkdtemp(join(tmpdir(), 'factstate-opentelemetry-'))
const log = await EventLog.open(join(dir, 'log'))
// Started with the log, before any run: every run is traced.
const telemetry = telemetryFromLog(log, { tracer: tracerProvider.getTracer('shop'), meter: meterProvider.getMeter('shop') })
try {
  const engine = new Engine({ log, model: new ModelExecutor({ retries: 0 }) })
  const input = (name: string, content: string): RunInput => ({
    invocation: { sessionId: `customer-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'stand-in' },
    configuration: { cwd: '/srv/shop' },
    tools: [
      { name: 'lookup_order', readOnly: true, execute: async () => ({ order: 'A-1', total: 4200 }) },
      {
        name: 'refund',
        execute: async () => {
          throw new Error('the payment provider refused the refund')
        },
      },
    ],
    work: { kind: 'message', content },
  })
  check((await engine.run(input('a', 'Please refund order A-1'))).status === 'completed', 'run a completed (its refund failed, the model was told)')
  const b = await engine.run(input('b', 'Where is order B-2?'))
  check(b.status === 'failed' && b.class === 'model_failed', 'run b failed: the provider refused the request')
} finally {
  // The follower ends once it has read every fact written before the close.
  await log.close()
  await telemetry.done
  await model.close()
  await rm(dir, { recursive: true, force: true })
}

// The spans as a tree, each with its duration by the facts' times.
const finished = spans.getFinishedSpans()
const ms = (span: ReadableSpan) => (span.endTime[0] - span.startTime[0]) * 1000 + (span.endTime[1] - span.startTime[1]) / 1e6
const show = (span: ReadableSpan, depth: number) => {
  const status = span.status.code === 2 ? ` ERROR ${String(span.attributes['error.type'])}` : ''
  console.log(`${'  '.repeat(depth)}${span.name} [${String(span.attributes['gen_ai.conversation.id'])}] ${ms(span).toFixed(1)} ms${status}`)
  for (const child of finished.filter((other) => other.parentSpanContext?.spanId === span.spanContext().spanId)) show(child, depth + 1)
}
for (const root of finished.filter((span) => span.parentSpanContext === undefined)) show(root, 0)

await metricReader.forceFlush()
const metrics = metricExporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics))
const points = (name: string) => metrics.find((metric) => metric.descriptor.name === name)?.dataPoints ?? []
const ended = Object.fromEntries(points('factstate.runs.ended').map((point) => [String(point.attributes['factstate.outcome.class'] ?? point.attributes['factstate.outcome.status']), point.value]))
const timed = points('gen_ai.client.operation.duration').reduce((sum, point) => sum + (point.value as Histogram).count, 0)
console.log(`runs ended ${JSON.stringify(ended)}; operations timed ${timed}`)

check(finished.filter((span) => span.name === 'invoke_agent').length === 2, 'a span per run')
check(finished.some((span) => span.name === 'execute_tool refund' && span.status.code === 2), 'the failed refund is an error')
check(JSON.stringify(ended) === JSON.stringify({ completed: 1, model_failed: 1 }), 'runs ended by outcome')
check(!JSON.stringify(finished.map((span) => span.attributes)).includes('A-1'), "no span holds the runs' contents")
await tracerProvider.shutdown()
await meterProvider.shutdown()
process.exit(failed ? 1 : 0)
