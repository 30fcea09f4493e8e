/**
 * Runs one generated path for real and checks the invariants at every step: a real `Engine` on a
 * real LevelDB directory, a scripted OpenAI-compatible server on 127.0.0.1, tools counted by an
 * external ledger, and for a crash step a child process killed with SIGKILL, after which the log
 * is reopened, recovered, and the path goes on.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { isAbsolute, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Engine, type EngineOptions, admittedInputCheck } from '../actors/engine.js'
import { toolProblem } from '../actors/run-input.js'
import type { ToolDefinition } from '../actors/tool-catalog.js'
import { foldFacts, stateOf } from '../machines/invocation.js'
import { type Durability, EventLog, type LogPrefix } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { ExecutionLedger } from './ledger.js'
import { transitionsOf } from './machine-coverage.js'
import { PathCheckError, type PathChecks, noChecks } from './path-check.js'
import type { PathChildJob, PathChildReport } from './path-child.js'
import { PATH_APPROVAL_TOOL, PATH_CHECKED_TOOL, PATH_READ_ONLY_TOOL, PathHarness, echoTool } from './path-harness.js'
import { type InvocationPath, factShape } from './paths.js'
import { FactstateError } from '../errors.js'
import { readOptions } from '../options.js'

export { PathCheckError, type PathCheck, type PathChecks } from './path-check.js'
export { PATH_APPROVAL_TOOL, PATH_CHECKED_TOOL, PATH_READ_ONLY_TOOL, echoTool } from './path-harness.js'

/** Options of {@link runPath}. */
export interface RunPathOptions {
  /**
   * The run's catalog (default: one `echo` tool). Each tool is wrapped: counted in the ledger, and
   * held until the path settles it. Its `readOnly` and `needsApproval` are not applied; its
   * `validateInput` is, and its `timeoutMs` counts from when the path lets your `execute` run. A path that calls a tool needing approval, a read-only tool or
   * one with arguments its schema refuses adds the kit's own (`PATH_APPROVAL_TOOL`, `PATH_READ_ONLY_TOOL`, `PATH_CHECKED_TOOL`): those names are refused here.
   */
  tools?: readonly ToolDefinition[] | undefined
  /** What a `known` answer calls (default: the first tool, with `{ value: 42 }` for `echo` and `{}` otherwise). */
  toolCall?:
    | {
        /** A tool of `tools`. */
        name: string
        /** The call's arguments (an object is JSON-encoded); its tool's `inputSchema` must accept them. */
        arguments: unknown
      }
    | undefined
  /** The tool name an `unknown` answer calls; must not be in the catalog (default `unavailable`). */
  unknownTool?: string | undefined
  /**
   * Builds the engine of each process from the options the runner needs (the log, a model
   * executor pointed at the scripted server, a clock); pass them on. Default `new Engine(options)`.
   */
  createEngine?: ((options: EngineOptions) => Engine) | undefined
  /**
   * The script a crash step runs in (it must call `runPathChild` with the same `tools` and
   * `createEngine`). Default: the kit's own script, which uses the default catalog.
   */
  childScript?: string | URL | undefined
  /** Node options for the child (default `['--import', 'tsx']` for a `.ts` script, none otherwise). */
  childExecArgv?: string[] | undefined
  /** An absolute, empty directory for the log and the ledger (made if missing), kept afterwards (default: a fresh temporary one, removed afterwards). */
  directory?: string | undefined
  /**
   * How long any one thing the path waits for may take (default 15 s). Past it the path fails
   * `timeout`, naming the tool calls whose `execute` has not returned.
   */
  stepTimeoutMs?: number | undefined
  /** The model name the runs are configured with (default `scripted`). */
  model?: string | undefined
  /**
   * How the logs are opened (default `sync`). `os` is as durable against a killed process (the
   * crash steps) and faster; only `sync` survives losing the machine, which no path does.
   */
  durability?: Durability | undefined
}

/** What {@link runPath} ran and checked. */
export interface PathRunResult {
  /** The path's `id`. */
  pathId: string
  /** Steps executed (a crash step included). */
  steps: number
  /** How many times each invariant was checked. */
  checks: PathChecks
  /** Invocation-machine transitions the facts in the final log take (`MachineTransition.id`), without repeats. */
  transitions: string[]
  /** Model requests the scripted servers received, over all processes. */
  requests: number
  /** Calls the engine made to the tools (the ledger's lines, over all processes): a call the path makes throw counts, though your `execute` does not run. */
  executions: number
  /**
   * Calls that reached the `execute` of one of your tools (over all processes): the `known` calls
   * the path lets succeed. 0 on a path without `answer(known)` (or `answer(several)`) followed by
   * `outcome(succeeds)`, where your tools' own code is never run.
   */
  toolRuns: number
  /** Events in the final log. */
  events: number
  /** The final log's digest, `sha256:<hex>` (unchanged by the final reopen). */
  digest: string
}

const PREFIX_EVENTS = 1_000_000
const PREFIX_BYTES = 256 * 1024 * 1024

/** Whether `specifier` resolves from the working directory, as the child's `--import` does. */
function resolvableFromCwd(specifier: string): boolean {
  try {
    createRequire(join(process.cwd(), 'noop.js')).resolve(specifier)
    return true
  } catch {
    return false
  }
}

function defaultChild(): { script: string; execArgv: string[] } {
  const typescript = import.meta.url.endsWith('.ts')
  const script = fileURLToPath(new URL(`./default-path-child.${typescript ? 'ts' : 'js'}`, import.meta.url))
  return { script, execArgv: typescript ? ['--import', 'tsx'] : [] }
}

/** Every option `runPath` reads: any other key is a typo that would otherwise be ignored without a word. */
const RUN_PATH_OPTIONS = [
  'tools',
  'toolCall',
  'unknownTool',
  'createEngine',
  'childScript',
  'childExecArgv',
  'directory',
  'stepTimeoutMs',
  'model',
  'durability',
] as const satisfies readonly (keyof RunPathOptions)[]

function resolveOptions(given: RunPathOptions) {
  if (typeof given !== 'object' || given === null) throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: options must be an object', { details: { field: 'options' } })
  // Each read once (a getter is not asked twice), and a misspelt option refused, as every public call does.
  const options = readOptions(given, RUN_PATH_OPTIONS, { call: 'runPath', code: 'TESTING_INVALID_OPTIONS', details: (field) => ({ field }) }) as RunPathOptions
  if (options.model !== undefined && (typeof options.model !== 'string' || options.model.length === 0)) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: model must be a non-empty string', { details: { field: 'model' } })
  }
  if (options.durability !== undefined && options.durability !== 'sync' && options.durability !== 'os') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', "runPath: durability must be 'sync' or 'os'", { details: { field: 'durability' } })
  }
  if (
    options.childScript !== undefined &&
    ((typeof options.childScript !== 'string' && !(options.childScript instanceof URL)) ||
      (options.childScript instanceof URL && options.childScript.protocol !== 'file:') ||
      options.childScript === '')
  ) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: childScript must be a path or a file URL', { details: { field: 'childScript' } })
  }
  if (options.childExecArgv !== undefined && (!Array.isArray(options.childExecArgv) || options.childExecArgv.some((arg) => typeof arg !== 'string'))) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: childExecArgv must be an array of strings', { details: { field: 'childExecArgv' } })
  }
  if (options.createEngine !== undefined && typeof options.createEngine !== 'function') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: createEngine must be a function', { details: { field: 'createEngine' } })
  }
  const tools = options.tools ?? [echoTool()]
  if (!Array.isArray(tools) || tools.length === 0) throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: tools must be a non-empty array', { details: { field: 'tools' } })
  const names = new Set<string>()
  for (const [index, tool] of (tools as unknown[]).entries()) {
    const named = tool as Partial<ToolDefinition> | null
    if (typeof named !== 'object' || named === null || typeof named.name !== 'string' || typeof named.execute !== 'function' || names.has(named.name)) {
      throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: tools must be tool definitions (a name and an execute function), each name once', { details: { field: 'tools' } })
    }
    names.add(named.name)
    // One a run would refuse (a misnamed member, a timeoutMs of 0): the wrapper around it would hide it from the engine.
    const problem = toolProblem(tool, `tools.${index}`)
    if (problem !== undefined) throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: ${problem.message}`, { details: { field: 'tools' } })
  }
  const kitNames = [PATH_APPROVAL_TOOL, PATH_READ_ONLY_TOOL, PATH_CHECKED_TOOL]
  const taken = kitNames.find((name) => names.has(name))
  if (taken !== undefined) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: the tool name ${taken} is the kit's own (a path that calls a tool needing approval or a read-only tool adds it)`, {
      details: { field: 'tools' },
    })
  }
  const first = tools[0] as ToolDefinition
  const toolCall = options.toolCall === undefined ? { name: first.name, arguments: first.name === 'echo' ? { value: 42 } : {} } : options.toolCall
  if (typeof toolCall !== 'object' || toolCall === null || typeof toolCall.name !== 'string') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: toolCall must be { name, arguments }', { details: { field: 'toolCall' } })
  }
  if (toolCall.arguments === undefined) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: toolCall must be { name, arguments }: arguments is missing (pass {} for a tool that takes none)', { details: { field: 'toolCall' } })
  }
  const called = tools.find((tool) => tool.name === toolCall.name)
  if (called === undefined) throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: toolCall.name ${toolCall.name} is not in tools`, { details: { field: 'toolCall' } })
  // A `known` call the tool's schema refuses would be rejected, never dispatched, on every path that plans it: say so now.
  let wrong: string | undefined
  try {
    // The engine's own check, made once while the tool stays the same (a suite runs every path with the same tools).
    wrong = admittedInputCheck(called)?.(toolCall.arguments)
  } catch {
    // A schema the engine cannot use is the run's refusal (RUN_INVALID_INPUT), reported where it is admitted.
  }
  if (wrong !== undefined) {
    const defaulted = options.toolCall === undefined ? ` (the default toolCall, ${JSON.stringify(toolCall.arguments)}: pass toolCall with arguments it accepts)` : ''
    throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: toolCall's arguments do not match the input schema of ${called.name}${defaulted}: ${wrong}`, { details: { field: 'toolCall' } })
  }
  const unknownTool = options.unknownTool ?? 'unavailable'
  if (tools.some((tool) => tool.name === unknownTool) || kitNames.includes(unknownTool)) throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: unknownTool ${unknownTool} must not name a tool of the catalog, nor one the kit adds`, { details: { field: 'unknownTool' } })
  const stepTimeoutMs = options.stepTimeoutMs ?? 15_000
  // A timer longer than 2^31 - 1 ms fires at once in Node: "never" is not a step timeout.
  if (typeof stepTimeoutMs !== 'number' || !(stepTimeoutMs > 0) || stepTimeoutMs * 2 > 2_147_483_647) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: stepTimeoutMs must be a positive number of milliseconds, at most 1,073,741,823', { details: { field: 'stepTimeoutMs' } })
  }
  if (options.directory !== undefined && !isAbsolute(options.directory)) throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: directory must be absolute', { details: { field: 'directory' } })
  let child = defaultChild()
  if (options.childScript !== undefined) {
    const script = options.childScript instanceof URL ? fileURLToPath(options.childScript) : options.childScript
    child = { script, execArgv: /\.[mc]?ts$/.test(script) ? ['--import', 'tsx'] : [] }
  }
  if (options.childExecArgv) child = { ...child, execArgv: options.childExecArgv }
  const tsxNeeded = options.childScript !== undefined && options.childExecArgv === undefined && child.execArgv.includes('tsx')
  return {
    tools,
    toolCall,
    unknownTool,
    stepTimeoutMs,
    child,
    /** A TypeScript `childScript` runs with `--import tsx`, which must resolve (checked for a crash path). */
    tsxNeeded,
    model: options.model ?? 'scripted',
    durability: options.durability ?? 'sync',
    createEngine: options.createEngine ?? ((engineOptions: EngineOptions) => new Engine(engineOptions)),
    /** The options as read, once: nothing reads the caller's object again. */
    given: options,
  }
}

type Resolved = ReturnType<typeof resolveOptions>

/** Spawns the crash child, waits until it stands at the crash state, and kills it with SIGKILL. */
async function crashChild(resolved: Resolved, job: PathChildJob): Promise<Extract<PathChildReport, { kind: 'reached' }>> {
  const fail = (check: 'child' | 'timeout', message: string) => new PathCheckError(check, job.path.id, job.until, message)
  const child: ChildProcess = spawn(process.execPath, [...resolved.child.execArgv, resolved.child.script], {
    cwd: process.cwd(),
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  })
  let stderr = ''
  child.stderr?.setEncoding('utf8')
  child.stderr?.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4_000)
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const spawnFailed = new Promise<never>((_, reject) =>
    child.once('error', (error) => reject(fail('child', `the child could not start: ${error.message}`))),
  )
  spawnFailed.catch(() => undefined)
  let timer: NodeJS.Timeout | undefined
  try {
    const report = await Promise.race([
      new Promise<Exclude<PathChildReport, { kind: 'ready' }>>((resolve, reject) => {
        child.on('message', (message: PathChildReport) => {
          if (message.kind === 'ready') child.send(job)
          else resolve(message)
        })
        void exited.then(() => reject(fail('child', `the child exited before it reached the crash state; stderr: ${stderr}`)))
      }),
      new Promise<never>((_, reject) => {
        const late = () => reject(fail('timeout', `the child did not reach the crash state in time; stderr: ${stderr}`))
        timer = setTimeout(late, resolved.stepTimeoutMs * 2)
      }),
      spawnFailed,
    ])
    if (report.kind === 'failed') throw new PathCheckError(report.check, job.path.id, report.step, `in the crash child: ${report.message}`)
    return report
  } finally {
    clearTimeout(timer)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  }
}

const eventsOf = (prefix: LogPrefix, invocationId: string) =>
  prefix.events.filter(({ event }) => event.invocation.invocationId === invocationId).map(({ event }) => event.fact)

/** Reopens after the crash and checks that recovery closes exactly what the crash left open, with the right class. */
async function recoverAfterCrash(
  log: EventLog,
  path: InvocationPath,
  crashIndex: number,
  reached: { digest: string; highWater: number },
  checks: PathChecks,
): Promise<void> {
  const fail = (check: 'digest' | 'recovery' | 'state' | 'verify', message: string): never => {
    throw new PathCheckError(check, path.id, crashIndex, message)
  }
  const step = path.steps[crashIndex]
  if (!step) return fail('recovery', 'no crash step')
  const reopened = await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)
  if (reopened.digest !== reached.digest || reopened.highWater !== reached.highWater) fail('digest', 'reopening the log after the crash changed its digest')
  const verified = await log.verify()
  if (verified.digest !== reopened.digest) fail('verify', 'verify() disagrees with the reopened log')
  checks.reopenings += 1
  checks.digests += 1
  checks.verifies += 1
  const closed = await recoverInvocations(log)
  const recovered = await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)
  const added = recovered.events.slice(reopened.events.length)
  const expected = step.facts
  const open = step.facts.length > 0 ? 1 : 0
  if (closed !== open) fail('recovery', `recovery closed ${closed} invocations; the crash left ${open} open`)
  if (added.some(({ event }) => event.invocation.invocationId !== `invocation-${step.run}`)) {
    fail('recovery', 'recovery wrote facts for an invocation the crash did not leave open')
  }
  const shapes = added.map(({ event }) => factShape(event.fact))
  if (shapes.join() !== expected.join()) fail('recovery', `recovery appended [${shapes.join(', ')}], the path plans [${expected.join(', ')}]`)
  if (step.machineState !== null) {
    const folded = stateOf(foldFacts(eventsOf(recovered, `invocation-${step.run}`)))
    if (folded !== step.machineState) fail('state', `after recovery the log folds to ${folded}, the path expects ${step.machineState}`)
    checks.states += 1
  }
  if ((await recoverInvocations(log)) !== 0) fail('recovery', 'a second recovery closed something again')
  if ((await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)).digest !== recovered.digest) fail('digest', 'a second recovery changed the log')
  checks.recoveries += 1
  checks.digests += 1
}

/**
 * Runs a path from {@link invocationPaths} against a real engine and checks, at every step where
 * the engine stands still:
 * - the state folded from the log through the machine equals the path's state and the live
 *   actor's state (value and context), and the facts appended are exactly the planned ones;
 * - the engine called the tool of each `tool.dispatched` operation exactly once (the kit's wrapper
 *   writes an external, fsynced ledger line before it calls your `execute`), never without a
 *   dispatch and never again after a restart: the engine's promise, not what a tool does inside;
 * - refusals come with their code and leave the digest unchanged; reopening keeps it; `verify`
 *   passes;
 * - the model server sees exactly the planned requests (none after a seal); a successor's first
 *   request replays the lineage (one user message, one tool message per settled or rejected
 *   call) and executes nothing;
 * - after a crash (a child process killed with SIGKILL), recovery closes exactly what was left
 *   open, with `host_interrupted` or `outcome_unknown`, and a second recovery does nothing.
 *
 * Rejects with a {@link PathCheckError} naming the step and the failed check.
 *
 * @example
 * ```ts
 * import { invocationPaths, runPath } from 'factstate/testing'
 * for (const path of invocationPaths({ maxSteps: 2 })) {
 *   const result = await runPath(path)   // throws PathCheckError if an invariant breaks
 *   console.log(path.id, result.checks.states, result.transitions.length)
 * }
 * ```
 */
export async function runPath(path: InvocationPath, options: RunPathOptions = {}): Promise<PathRunResult> {
  // One of `invocationPaths`' paths, or one made like them: steps to walk.
  if (typeof path !== 'object' || path === null || !Array.isArray(path.steps) || path.steps.some((step) => typeof step !== 'object' || step === null || typeof step.event?.type !== 'string')) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'runPath: the path must be one of invocationPaths(), an object whose steps each hold an event', { details: { field: 'path' } })
  }
  const resolved = resolveOptions(options)
  const { given } = resolved
  // The crash child is another process: it cannot be handed this one's tools or engine factory.
  const crashes = Array.isArray(path?.steps) && path.steps.some((step) => step?.event?.type === 'crash')
  if (crashes && given.childScript === undefined && (given.tools !== undefined || given.createEngine !== undefined)) {
    const own = [given.tools !== undefined ? 'tools' : undefined, given.createEngine !== undefined ? 'createEngine' : undefined].filter(Boolean).join(' and ')
    throw new FactstateError(
      'TESTING_INVALID_OPTIONS',
      `runPath: path ${path.id} crashes in a child process, which runs the kit's own catalog and engine, not your ${own}: pass childScript, a script that calls runPathChild with the same ${own}`,
      { details: { field: 'childScript' } },
    )
  }
  // `--import tsx` is resolved from the child's working directory: say so here, not as a child that died at its first line.
  if (crashes && resolved.tsxNeeded && !resolvableFromCwd('tsx/package.json')) {
    throw new FactstateError(
      'TESTING_INVALID_OPTIONS',
      `runPath: childScript ${resolved.child.script} is TypeScript, which the crash child runs with \`node --import tsx\`, and tsx cannot be found from ${process.cwd()}: install it (npm install -D tsx), pass a compiled .js childScript, or give childExecArgv for another loader`,
      { details: { field: 'childScript' } },
    )
  }
  if (given.directory !== undefined) {
    const { directory } = given
    // Missing, it is made (and kept, as a directory given always is); anything else in the way is this option's fault.
    const entries = await readdir(directory).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return []
      const why = error.code === 'ENOTDIR' ? 'is not a directory (a file is in the way)' : `cannot be read: ${error.message}`
      throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: directory ${directory} ${why}`, { cause: error, details: { field: 'directory' } })
    })
    if (entries.length > 0) {
      throw new FactstateError('TESTING_INVALID_OPTIONS', `runPath: directory ${directory} is not empty (each path needs a fresh log and ledger)`, { details: { field: 'directory' } })
    }
  }
  const directory = given.directory ?? (await mkdtemp(join(tmpdir(), 'factstate-path-')))
  try {
    return await execute(path, resolved, directory)
  } finally {
    if (given.directory === undefined) await rm(directory, { recursive: true, force: true })
  }
}

async function execute(path: InvocationPath, resolved: Resolved, directory: string): Promise<PathRunResult> {
  const checks = noChecks()
  const logDirectory = join(directory, 'log')
  const ledgerFile = join(directory, 'ledger')
  const crashIndex = path.steps.findIndex((step) => step.event.type === 'crash')
  let requests = 0
  let toolRuns = 0
  let crashedAt: number | undefined
  if (crashIndex >= 0) {
    const reached = await crashChild(resolved, {
      path,
      until: crashIndex,
      cwd: directory,
      logDirectory,
      ledgerFile,
      toolCall: resolved.toolCall,
      unknownTool: resolved.unknownTool,
      model: resolved.model,
      stepTimeoutMs: resolved.stepTimeoutMs,
      durability: resolved.durability,
    })
    const expected = path.steps[crashIndex - 1]?.machineState ?? 'opening'
    if (reached.folded !== expected || (reached.live !== null && reached.live !== expected)) {
      const stood = `${reached.folded} (live ${String(reached.live)})`
      throw new PathCheckError('state', path.id, crashIndex, `the child stood in ${stood}, the path crashes in ${expected}`)
    }
    requests += reached.requests
    toolRuns += reached.toolRuns
    // The steps before the crash were checked in the child: they count.
    for (const key of Object.keys(checks) as (keyof PathChecks)[]) checks[key] += reached.checks[key] ?? 0
    crashedAt = reached.highWater
    const log = await EventLog.open(logDirectory, { durability: resolved.durability })
    try {
      await recoverAfterCrash(log, path, crashIndex, reached, checks)
    } finally {
      await log.close()
    }
  }
  const log = await EventLog.open(logDirectory, { durability: resolved.durability })
  let closed = false
  try {
    const harness = await PathHarness.open(
      {
        path,
        cwd: directory,
        ledgerFile,
        log,
        tools: resolved.tools,
        createEngine: resolved.createEngine,
        toolCall: resolved.toolCall,
        unknownTool: resolved.unknownTool,
        model: resolved.model,
        stepTimeoutMs: resolved.stepTimeoutMs,
        checks,
        ...(crashedAt === undefined ? {} : { crashedAt }),
      },
      crashIndex + 1,
      path.steps.length,
    )
    try {
      await harness.run()
      await harness.finish()
    } finally {
      await harness.close()
      requests += harness.requests
      toolRuns += harness.toolRuns
    }
    const before = await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)
    await log.close()
    closed = true
    return await reopen(path, logDirectory, ledgerFile, before, checks, requests, toolRuns)
  } finally {
    if (!closed) await log.close()
  }
}

/** Close, reopen: same digest, `verify` passes, nothing to recover. Then the result. */
async function reopen(
  path: InvocationPath,
  logDirectory: string,
  ledgerFile: string,
  before: LogPrefix,
  checks: PathChecks,
  requests: number,
  toolRuns: number,
): Promise<PathRunResult> {
  const fail = (check: 'digest' | 'recovery' | 'verify', message: string): never => {
    throw new PathCheckError(check, path.id, path.steps.length, message)
  }
  const log = await EventLog.open(logDirectory)
  try {
    const after = await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)
    if (after.digest !== before.digest || after.highWater !== before.highWater) fail('digest', 'reopening the log changed its digest')
    const verified = await log.verify()
    if (verified.digest !== after.digest || verified.events !== after.highWater) fail('verify', 'verify() disagrees with the reopened log')
    if ((await recoverInvocations(log)) !== 0) fail('recovery', 'recovery found an invocation left open after a clean run')
    if ((await log.prefix(PREFIX_EVENTS, PREFIX_BYTES)).digest !== after.digest) fail('digest', 'recovery of a clean log changed it')
    checks.reopenings += 1
    checks.digests += 2
    checks.verifies += 1
    const transitions = new Set<string>()
    const invocations = new Set(after.events.map(({ event }) => event.invocation.invocationId))
    for (const id of invocations) for (const transition of transitionsOf(eventsOf(after, id))) transitions.add(transition)
    return {
      pathId: path.id,
      steps: path.steps.length,
      checks,
      transitions: [...transitions],
      requests,
      executions: new ExecutionLedger(ledgerFile).entries().length,
      toolRuns,
      events: after.highWater,
      digest: after.digest,
    }
  } finally {
    await log.close()
  }
}
