/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), so that a
// consumer whose tsconfig names no `types` still gets Node's AbortSignal and Headers there, not `any`.
/**
 * `factstate/inspector`: a local, offline, read-only visualizer for a factstate log. It draws the
 * invocation machine as a statechart, lists sessions → turns → runs → invocations, and replays
 * any invocation's facts through the machine (time travel). Live pages follow new facts.
 *
 * @example
 * ```ts
 * import { EventLog, Engine } from 'factstate'
 * import { serveInspector } from 'factstate/inspector'
 *
 * const log = await EventLog.open('./.factstate/app')
 * const engine = new Engine({ log })
 * const inspector = await serveInspector({ log, engine })
 * console.log(`open ${inspector.url}`) // http://127.0.0.1:<port>/
 * ```
 */
export { serveInspector, type InspectorOptions, type InspectorServer } from './server.js'
/** What `InvocationDetail.usage` holds: an invocation's token totals, as `usageOf` gives them. */
export type { UsageTotals } from '../actors/transcript.js'
/** The shapes of the inspector's JSON API (`/api/overview`, `/api/invocation`, `/api/machine`, `/api/verify`, `/api/events`), for scripts that read it. */
export type {
  ApiError,
  CallLink,
  Chart,
  ChartEdge,
  ChartState,
  FactsLanded,
  InvocationDetail,
  InvocationStatus,
  InvocationSummary,
  Overview,
  Point,
  RunLink,
  SessionView,
  TakenTransition,
  TimelineEntry,
  TurnView,
  VerifyReport,
} from './protocol.js'
