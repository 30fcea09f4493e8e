/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), as every entry's are.
/**
 * `factstate/opentelemetry`: OpenTelemetry spans and metrics read from a log's facts by a follower.
 * Needs `@opentelemetry/api` (1.x, an optional peer dependency) beside factstate, and your own
 * OpenTelemetry SDK for the tracer and the meter: it configures none.
 *
 * @example
 * ```ts
 * import { metrics, trace } from '@opentelemetry/api'
 * const telemetry = telemetryFromLog(log, { tracer: trace.getTracer('factstate'), meter: metrics.getMeter('factstate'), providerName: 'openai' })
 * // at shutdown, before log.close(): await telemetry.stop()
 * ```
 */
export { telemetryFromLog, type LogTelemetry, type LogTelemetryOptions, type TelemetryRun } from './telemetry.js'
