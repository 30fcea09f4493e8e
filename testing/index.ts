/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), so that a
// consumer whose tsconfig names no `types` still gets Node's AbortSignal, Headers and node:http there, not `any`.
/**
 * `factstate/testing`: test your tools and hold policies the way factstate tests itself. A
 * scripted OpenAI-compatible model server, test paths generated from the invocation machine, and
 * a runner that drives each path against a real engine (crashes included) and checks the
 * invariants at every step; and a recorded run turned into a script for that server, replayed, and
 * compared with what it recorded.
 */
export * from './scripted-model-server.js'
export {
  invocationPaths,
  pathCoverage,
  factShape,
  describeEvent,
  type InvocationPath,
  type InvocationPathOptions,
  type PathStep,
  type PathStrategy,
  type AnswerKind,
  type PathEvent,
  type PathState,
  type RefusalCode,
} from './paths.js'
export type { PathModelInput } from './path-model.js'
export { runPath, echoTool, PATH_APPROVAL_TOOL, PATH_READ_ONLY_TOOL, PATH_CHECKED_TOOL, type RunPathOptions, type PathRunResult } from './run-path.js'
export { PathCheckError, type PathCheck, type PathChecks } from './path-check.js'
export { runPathChild, type PathChildOptions } from './path-child.js'
export { invocationTransitions, transitionsOf, type MachineTransition } from './machine-coverage.js'
export { ExecutionLedger, type LedgerEntry } from './ledger.js'
export { callTool, type CallToolOptions, type CallToolProgress, type ToolCallOutcome } from './call-tool.js'
export { scriptOf, recordedRun, compareRuns, type RunDifference } from './replay.js'
