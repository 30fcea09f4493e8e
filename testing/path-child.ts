/**
 * The child side of a crash step: a process that runs a path up to the crash, reports the state
 * it reached, and waits to be killed with SIGKILL. `runPath` spawns it; a consumer whose catalog
 * differs from the default writes a two-line script that calls {@link runPathChild} with the same
 * tools it gives `runPath`.
 */
import { Engine, type EngineOptions } from '../actors/engine.js'
import type { ToolDefinition } from '../actors/tool-catalog.js'
import { foldFacts, stateOf, type InvocationState } from '../machines/invocation.js'
import { type Durability, EventLog } from '../store/event-log.js'
import { type PathCheck, PathCheckError, type PathChecks, noChecks } from './path-check.js'
import { PathHarness, echoTool } from './path-harness.js'
import type { InvocationPath } from './paths.js'

/** What the parent sends the child (over the IPC channel). */
export interface PathChildJob {
  path: InvocationPath
  /** Run steps `[0, until)`; step `until` is the crash. */
  until: number
  cwd: string
  logDirectory: string
  ledgerFile: string
  toolCall: { name: string; arguments: unknown }
  unknownTool: string
  model: string
  stepTimeoutMs: number
  durability: Durability
}

/** What the child reports: that it listens for its job, then that it stands at the crash state (or why it could not get there). */
export type PathChildReport =
  | { kind: 'ready' }
  | {
      kind: 'reached'
      /** The machine state of the path's current run, folded from the log (`opening` before any run). */
      folded: InvocationState
      /** The live actor's state, when the run is live. */
      live: InvocationState | null
      digest: string
      highWater: number
      requests: number
      /** Calls that reached the `execute` of a tool of the caller's catalog in the child. */
      toolRuns: number
      /** The checks made on the steps the child ran: the parent adds them to the path's. */
      checks: PathChecks
    }
  | { kind: 'failed'; check: PathCheck; step: number; message: string }

/** Options of {@link runPathChild}: the same catalog and engine factory the parent's `runPath` gets. */
export interface PathChildOptions {
  /** The same tools the parent's `runPath` gets (default: the kit's `echo` tool). */
  tools?: readonly ToolDefinition[] | undefined
  /** The same engine factory the parent's `runPath` gets (default `new Engine(options)`). */
  createEngine?: ((options: EngineOptions) => Engine) | undefined
}

/**
 * Runs in a child process spawned by `runPath` for a crash step: takes the job from the IPC
 * channel, drives the path up to the crash with every check, reports where it stands, and keeps
 * the log open until the parent kills the process.
 *
 * @example
 * ```ts
 * // test/support/path-child.ts: pass its path to runPath as `childScript`
 * import { runPathChild } from 'factstate/testing'
 * import { myTools } from '../../src/tools.js'
 * await runPathChild({ tools: myTools() })
 * ```
 */
export async function runPathChild(options: PathChildOptions = {}): Promise<void> {
  const send = process.send?.bind(process)
  if (!send) throw new TypeError('runPathChild: run this script through runPath (it needs the IPC channel)')
  const report = (message: PathChildReport) => new Promise<void>((resolve) => send(message, undefined, {}, () => resolve()))
  // Ask for the job only once listening: a message that arrives before a listener is dropped.
  const job = await new Promise<PathChildJob>((resolve) => {
    process.once('message', (message) => resolve(message as PathChildJob))
    void report({ kind: 'ready' })
  })
  try {
    const log = await EventLog.open(job.logDirectory, { durability: job.durability })
    const checks = noChecks()
    const harness = await PathHarness.open(
      {
        path: job.path,
        cwd: job.cwd,
        ledgerFile: job.ledgerFile,
        log,
        tools: options.tools ?? [echoTool()],
        createEngine: options.createEngine ?? ((engineOptions) => new Engine(engineOptions)),
        toolCall: job.toolCall,
        unknownTool: job.unknownTool,
        model: job.model,
        stepTimeoutMs: job.stepTimeoutMs,
        checks,
      },
      0,
      job.until,
    )
    await harness.run()
    const run = job.path.steps[job.until - 1]?.run ?? 0
    const prefix = await log.prefix(1_000_000, 256 * 1024 * 1024)
    const facts = prefix.events.filter(({ event }) => event.invocation.invocationId === `invocation-${run}`).map(({ event }) => event.fact)
    await report({
      kind: 'reached',
      folded: facts.length === 0 ? 'opening' : stateOf(foldFacts(facts)),
      live: harness.liveState(run) ?? null,
      digest: prefix.digest,
      highWater: prefix.highWater,
      requests: harness.requests,
      toolRuns: harness.toolRuns,
      checks,
    })
    // Stand still, the log open, a tool or a request possibly in flight, until SIGKILL.
    setInterval(() => undefined, 1 << 30)
  } catch (error) {
    const failure: PathChildReport =
      error instanceof PathCheckError
        ? { kind: 'failed', check: error.check, step: error.step, message: error.detail }
        : { kind: 'failed', check: 'child', step: -1, message: (error as Error).stack ?? String(error) }
    await report(failure)
    process.exit(1)
  }
}
