/**
 * Model-based tests: paths generated from the invocation machine (every answer, tool outcome,
 * hold, rollback, seal, refusal and a crash at every machine state), each run for real against an
 * engine on a LevelDB directory, a scripted model server on 127.0.0.1, and, for a crash, a child
 * process killed with SIGKILL. Also checks that the kit fails when an invariant is broken.
 */
import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, type EngineOptions, ModelExecutor, type ToolDefinition } from '../index.js'
import {
  type InvocationPath,
  type PathEvent,
  type PathStep,
  type PathModelInput,
  type StatusOptions,
  type TextOptions,
  type ToolCallsOptions,
  type PathRunResult,
  type RunPathOptions,
  PathCheckError,
  invocationPaths,
  invocationTransitions,
  pathCoverage,
  echoTool,
  runPath,
  scriptedModelServer,
} from '../testing/index.js'
import { PATH_EVENTS } from '../testing/path-model.js'
import { assertDetailsFit } from './support/error-details.js'
import { withTimeout } from './support/temp.js'

const test = suite('model paths')
const childScript = fileURLToPath(new URL('./support/path-child.ts', import.meta.url))

let generated: InvocationPath[] | undefined
const paths = () => (generated ??= invocationPaths())

/** Runs `work` over `items`, at most `width` at a time, in order of start. */
async function pool<T, R>(items: readonly T[], width: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  const lane = async () => {
    while (next < items.length) {
      const index = next++
      results[index] = await work(items[index] as T)
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane))
  return results
}

async function rejectsWithCheck(action: () => Promise<unknown>, check: string, what: string): Promise<PathCheckError> {
  try {
    await action()
  } catch (error) {
    assert.instance(error, PathCheckError, `${what}: ${(error as Error).message}`)
    assert.is((error as PathCheckError).check, check, `${what}: ${(error as Error).message}`)
    return error as PathCheckError
  }
  assert.unreachable(`${what} should have failed the ${check} check`)
  throw new Error('unreachable')
}

const findPath = (predicate: (path: InvocationPath) => boolean, what: string) => {
  const found = paths().find(predicate)
  assert.ok(found, `a generated path ${what}`)
  return found as InvocationPath
}

test('generation is deterministic, bounded, and covers every machine state, transition and event variant', () =>
  withTimeout(async () => {
    const first = paths()
    const again = invocationPaths()
    assert.equal(JSON.stringify(again), JSON.stringify(first), 'the same options give the same paths')
    assert.ok(first.length > 50 && first.length < 400, `a bounded number of paths (${first.length})`)

    const coverage = pathCoverage(first)
    assert.equal(coverage.missing, [], 'every transition of the machine is planned')
    assert.is(coverage.total, invocationTransitions().length)
    assert.ok(coverage.total >= 17)

    const states = new Set(first.flatMap((path) => path.steps.map((step) => step.machineState)))
    for (const state of ['safePoint', 'awaitingModel', 'settlingTool', 'held', 'committed', 'ended'] as const) {
      assert.ok(states.has(state), `state ${state} is reached`)
    }
    const variants = new Set(first.flatMap((path) => path.steps.map((step) => JSON.stringify(step.event))))
    for (const event of PATH_EVENTS) assert.ok(variants.has(JSON.stringify(event)), `variant ${JSON.stringify(event)} is in some path`)

    const crashes = first.filter((path) => path.crash)
    const crashedIn = crashes.map((path) => {
      const at = path.steps.findIndex((step) => step.event.type === 'crash')
      return path.steps[at - 1]?.machineState ?? 'opening'
    })
    assert.equal(
      crashedIn,
      ['opening', 'safePoint', 'awaitingModel', 'settlingTool', 'settlingTool', 'settlingTool', 'held', 'committed', 'ended'],
      'one crash in each machine state, and in settlingTool while a tool with effects runs, a call waits for its approver and a read-only tool runs',
    )
    const crashedAfter = crashes.map((path) => path.steps[path.steps.findIndex((step) => step.event.type === 'crash') - 1])
    assert.equal(
      crashedAfter.slice(3, 6).map((step) => [step?.state, step?.facts.at(-1)]),
      [
        ['toolRunning', 'tool.dispatched'],
        ['awaitingApproval', 'model.completed:calls=1'],
        ['toolRunning', 'tool.dispatched:readOnly'],
      ],
    )
    for (const path of crashes) assert.is(path.steps.filter((step) => step.event.type === 'crash').length, 1)
    const classes = crashes.flatMap((path) => path.steps.find((step) => step.event.type === 'crash')?.facts ?? [])
    assert.ok(classes.includes('invocation.ended:failed:outcome_unknown'), 'a crash while a tool runs leaves its outcome unknown')
    assert.ok(classes.includes('invocation.ended:failed:host_interrupted'), 'a crash elsewhere is host_interrupted')
    // What follows each crash in settlingTool: the session must acknowledge the unknown effect, not a read-only one nor a call never approved.
    const nextStart = (path: InvocationPath) => path.steps.slice(path.steps.findIndex((step) => step.event.type === 'crash')).find((step) => step.event.type === 'start')?.event
    assert.equal(
      crashes.slice(3, 6).map((path) => [path.steps.find((step) => step.event.type === 'crash')?.facts, nextStart(path)]),
      [
        [['invocation.ended:failed:outcome_unknown'], { type: 'start', allowPriorUnknown: true }],
        [['invocation.ended:failed:host_interrupted'], { type: 'start', allowPriorUnknown: false }],
        [['invocation.ended:failed:outcome_unknown'], { type: 'start', allowPriorUnknown: false }],
      ],
    )
    // A cancel while a tool runs (the path's tool throws once its signal aborts): a call with effects is
    // left uncertain, as a crash leaves it, and the session must acknowledge it; a read-only call fails.
    const cancelledWhile = (dispatched: string) =>
      findPath((path) => path.steps.some((step, index) => step.event.type === 'cancel' && path.steps[index - 1]?.facts.at(-1) === dispatched), `cancelled after ${dispatched}`)
    const cancelStep = (path: InvocationPath) => path.steps.find((step) => step.event.type === 'cancel')
    assert.equal(cancelStep(cancelledWhile('tool.dispatched'))?.facts, ['invocation.ended:failed:outcome_unknown'])
    const acknowledging = paths().filter((path) => cancelStep(path)?.facts.join() === 'invocation.ended:failed:outcome_unknown')
    assert.ok(acknowledging.length > 0 && acknowledging.every((path) => path.steps.slice(path.steps.indexOf(cancelStep(path) as PathStep)).every((step) => step.event.type !== 'start' || step.event.allowPriorUnknown)))
    // The default paths cancel no read-only call (each event variant is taken once per state); the edges strategy does.
    const readOnlyCancel = invocationPaths({ strategy: 'edges' }).find((path) => path.steps.some((step, index) => step.event.type === 'cancel' && path.steps[index - 1]?.facts.at(-1) === 'tool.dispatched:readOnly'))
    assert.equal(readOnlyCancel && cancelStep(readOnlyCancel)?.facts.slice(-1), ['invocation.ended:cancelled'])
    const shapes = new Set(first.flatMap((path) => path.steps.flatMap((step) => step.facts)))
    for (const shape of ['tool.dispatched:approved', 'tool.rejected:denied', 'tool.rejected:cancelled', 'tool.dispatched:readOnly', 'tool.rejected:invalid_input']) {
      assert.ok(shapes.has(shape), `some path plans ${shape}`)
    }

    for (const path of first) {
      const last = path.steps.at(-1)
      assert.ok(last?.state === 'ended' || last?.state === 'committed', `${path.id} ends with its run settled`)
      assert.ok(path.steps.filter((step) => step.event.type === 'start' || step.event.type === 'successor').length <= path.bounds.maxRuns)
    }
    for (const [options, field] of [
      [{ maxSteps: 0 }, 'maxSteps'],
      [{ maxRuns: 5 }, 'maxRuns'],
      [{ strategy: 'random' as never }, 'strategy'],
      [{ strategy: 'simple', maxPaths: Number.NaN }, 'maxPaths'],
      [{ strategy: 'simple', maxPaths: Number.POSITIVE_INFINITY }, 'maxPaths'],
      [{ include: 5 as never }, 'include'],
      [{ maxStep: 3 } as never, 'maxStep'],
      [{ crashes: 'no' as never }, 'crashes'],
    ] as const) {
      assert.throws(
        () => invocationPaths(options),
        (error: unknown) => (error as { code?: string }).code === 'TESTING_INVALID_OPTIONS' && (error as { details?: { field?: string } }).details?.field === field,
        `invocationPaths(${JSON.stringify(options)})`,
      )
    }

    // Coverage is measured, not assumed: without the fault that ends a run while its request is in flight, exactly that transition is missing.
    const withoutFault = invocationPaths({ include: (event) => event.type !== 'log.refuses' })
    assert.equal(pathCoverage(withoutFault).missing, ['awaitingModel --invocation.ended[endsAbnormally]--> ended'])
    const simple = invocationPaths({ strategy: 'simple', maxSteps: 1, maxRuns: 1, crashes: false, maxPaths: 25 })
    assert.is(simple.length, 25)
    assert.ok(simple.every((path) => new Set(path.steps.map((step) => JSON.stringify([step.state, step.run]))).size > 0))
  }, 30_000))

test('every generated path runs against a real engine, with every invariant checked at every step', () =>
  withTimeout(async () => {
    const all = paths()
    const calm = all.filter((path) => !path.crash)
    const crashing = all.filter((path) => path.crash)
    // Crash paths first: their child processes start (slowly, through tsx) while the others run here.
    const ordered = [...crashing, ...calm]
    const results: PathRunResult[] = await pool(ordered, 3, (path) => runPath(path, { childScript }))
    const transitions = new Set(results.flatMap((result) => result.transitions))
    const total = invocationTransitions().length
    const rollback = all.filter((path) => path.rollback).length
    const seal = all.filter((path) => path.seal).length
    // On a line of its own: uvu has already written the suite's name and progress marks on this one.
    const counts = `${rollback} with rollback, ${seal} with seal, ${crashing.length} with crash`
    process.stdout.write(`\nmodel paths: ${results.length} run (${counts}), ${transitions.size} transitions covered of ${total}\n`)

    assert.is(results.length, all.length)
    assert.is(transitions.size, total, 'the logs written by the runs take every transition of the machine')
    for (const [index, result] of results.entries()) {
      const path = ordered[index] as InvocationPath
      assert.is(result.pathId, path.id)
      assert.ok(result.checks.states >= 1 && result.checks.facts >= 1 && result.checks.verifies >= 2, `${path.id} was checked`)
      assert.ok(result.checks.reopenings >= 1, `${path.id} reopened its log`)
      const planned = path.steps.flatMap((step) => step.facts)
      assert.is(result.events, planned.length, `${path.id}: the log holds exactly the planned facts`)
      assert.is(result.executions, planned.filter((fact) => fact.startsWith('tool.dispatched')).length, `${path.id}: one execution per dispatch`)
      if (path.crash) {
        // The steps the crash child ran were checked there, and count: a state check for every step but the crash and the last.
        assert.ok(result.checks.states >= path.steps.length - 2, `${path.id}: ${result.checks.states} state checks for ${path.steps.length} steps`)
        assert.is(result.checks.recoveries, 1, `${path.id} recovered once`)
        assert.ok(result.checks.reopenings >= 2)
      }
      if (path.steps.some((step) => step.event.type === 'refusal')) assert.ok(result.checks.refusals >= 1)
      const successors = new Set(path.steps.filter((step) => step.event.type === 'successor').map((step) => step.run))
      if (path.steps.some((step) => successors.has(step.run) && step.facts.includes('model.requested:step-1'))) {
        assert.ok(result.checks.replays >= 1, `${path.id} checked the successor's replay`)
      }
    }
  }, 170_000))

test('a seal in the back-off of a run\u2019s only step leaves that step to its successor', () =>
  withTimeout(async () => {
    // The default bounds (two steps) seal back-offs at the first step only: one step makes it the last.
    const sealedInBackOff = invocationPaths({ maxSteps: 1, maxRuns: 2, crashes: false }).filter((path) => {
      const commit = path.steps.findIndex((step) => step.event.type === 'hold.commit')
      return commit > 0 && path.steps.slice(0, commit).some((step) => step.facts.includes('model.interrupted:retryable_failure'))
    })
    assert.ok(sealedInBackOff.length >= 2, `paths that seal in the back-off (${sealedInBackOff.length})`)
    assert.ok(sealedInBackOff.every((path) => path.steps.find((step) => step.event.type === 'hold.commit')?.remainingSteps === 1))
    // A successor with a step left holds at its first safe point; one with none would end max_steps there.
    const successorHolds = sealedInBackOff.filter((path) => path.steps.some((step) => step.run === 2 && step.facts.includes('hold.entered')))
    assert.ok(successorHolds.length >= 1, 'one of them admits the successor, which has its step')
    const results = await pool(sealedInBackOff, 3, (path) => runPath(path, { childScript }))
    assert.equal(
      results.map((result) => result.pathId),
      sealedInBackOff.map((path) => path.id),
    )
  }, 120_000))

test('runPath fails when the engine does not do what the path plans', () =>
  withTimeout(async () => {
    // A plan the engine cannot meet: the tool is said to fail where it succeeds.
    const known = findPath((path) => !path.crash && path.steps.some((step) => step.facts.includes('tool.settled:succeeded')), 'with a succeeding tool')
    const tampered: InvocationPath = structuredClone(known)
    for (const step of tampered.steps) step.facts = step.facts.map((fact) => (fact === 'tool.settled:succeeded' ? 'tool.settled:failed' : fact))
    await rejectsWithCheck(() => runPath(tampered), 'facts', 'a plan that contradicts the engine')

    // An engine built without the runner's model executor does not retry the way the path plans.
    const retried = (path: InvocationPath) =>
      path.steps.some((step, i) => step.event.type === 'model.answer' && step.event.answer === 'failure' && path.steps[i + 1]?.event.type === 'request')
    const failure = findPath((path) => !path.crash && retried(path), 'that retries a failed request')
    const ownRetries = (options: EngineOptions) => new Engine({ ...options, model: new ModelExecutor({ retries: 0 }) })
    const error = await rejectsWithCheck(
      () => runPath(failure, { createEngine: ownRetries, stepTimeoutMs: 2_000 }),
      'facts',
      'an engine with its own retry policy',
    )
    assert.ok(error.step >= 0)

    // A refusal the engine gives with another code.
    const busyWhileHeld = (step: InvocationPath['steps'][number]) => step.event.type === 'refusal' && step.event.code === 'RUN_BUSY' && step.state === 'held'
    const busy = findPath((path) => !path.crash && path.steps.some(busyWhileHeld), 'refused RUN_BUSY while held')
    const wrong: InvocationPath = structuredClone(busy)
    for (const step of wrong.steps) {
      if (busyWhileHeld(step)) step.event = { type: 'refusal', code: 'RUN_RECONCILIATION_REQUIRED' } satisfies PathEvent
    }
    await rejectsWithCheck(() => runPath(wrong), 'refusal', 'a refusal with another code')

    // Recovery must close a crash during a tool with outcome_unknown: a plan that says host_interrupted fails.
    const crashed = findPath((path) => path.crash && path.steps.some((step) => step.facts.includes('invocation.ended:failed:outcome_unknown')), 'crashing in a tool')
    const misclassified: InvocationPath = structuredClone(crashed)
    for (const step of misclassified.steps) {
      step.facts = step.facts.map((fact) => (fact === 'invocation.ended:failed:outcome_unknown' ? 'invocation.ended:failed:host_interrupted' : fact))
    }
    await rejectsWithCheck(() => runPath(misclassified, { childScript }), 'recovery', 'a crash closed with another class')

    // An engine that drops the tools' flags: the approval tool runs unasked, the read-only one is recorded as one with effects.
    const flagless = (options: EngineOptions) => {
      const engine = new Engine(options)
      const start = engine.start.bind(engine)
      engine.start = (input, startOptions) =>
        start({ ...input, tools: input.tools.map(({ needsApproval: _approval, readOnly: _readOnly, ...tool }) => tool) }, startOptions)
      return engine
    }
    const answered = (kind: 'needsApproval' | 'readOnly' | 'invalidInput') => (path: InvocationPath) =>
      !path.crash && path.steps.some((step) => step.event.type === 'model.answer' && step.event.answer === kind)
    for (const kind of ['needsApproval', 'readOnly'] as const) {
      const path = findPath(answered(kind), `with answer(${kind})`)
      await rejectsWithCheck(() => runPath(path, { createEngine: flagless, stepTimeoutMs: 2_000 }), 'facts', `an engine that ignores ${kind}`)
    }
    // An engine that does not check tool input against its schema: the call the path makes with a wrong argument runs.
    const unchecked = (options: EngineOptions) => {
      const engine = new Engine(options)
      const start = engine.start.bind(engine)
      engine.start = (input, startOptions) => start({ ...input, tools: input.tools.map((tool) => ({ ...tool, validateInput: false })) }, startOptions)
      return engine
    }
    const invalid = findPath(answered('invalidInput'), 'with answer(invalidInput)')
    await rejectsWithCheck(() => runPath(invalid, { createEngine: unchecked, stepTimeoutMs: 2_000 }), 'facts', 'an engine that runs a call its schema refuses')
    // An engine that records another decision than the approver gave (here: another approver's name).
    const misrecorded = (options: EngineOptions) => {
      const engine = new Engine(options)
      const start = engine.start.bind(engine)
      engine.start = (input, startOptions) => {
        const approver = startOptions?.onApproval
        return start(input, approver ? { ...startOptions, onApproval: async (request) => ({ ...(await approver(request)), by: 'someone-else' }) } : startOptions)
      }
      return engine
    }
    for (const decision of ['approve', 'deny'] as const) {
      const path = findPath((p) => !p.crash && p.steps.some((step) => step.event.type === 'approval' && step.event.decision === decision), `that decides ${decision}`)
      const error = await rejectsWithCheck(() => runPath(path, { createEngine: misrecorded, stepTimeoutMs: 2_000 }), 'facts', `a decision recorded as another's (${decision})`)
      assert.match(error.message, /someone-else/)
    }
  }, 60_000))

test('the consumer kit: own tools and arguments, the default crash child, and bad options refused', () =>
  withTimeout(async () => {
    const created: unknown[] = []
    const tools = [
      {
        name: 'create_ticket',
        description: 'Creates a ticket',
        inputSchema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
        async execute(input: unknown) {
          created.push(input)
          return { id: `T-${created.length}` }
        },
      },
    ]
    const mine = invocationPaths({ maxSteps: 2, maxRuns: 2, crashes: false }).filter((path) => path.seal && path.rollback).slice(0, 3)
    assert.ok(mine.length > 0)
    for (const path of mine) {
      const result = await runPath(path, { tools, toolCall: { name: 'create_ticket', arguments: { title: 'printer on fire' } } })
      assert.is(result.pathId, path.id)
    }
    assert.ok(created.every((input) => JSON.stringify(input) === '{"title":"printer on fire"}'))

    // Your tool throwing where the path plans it to succeed: the failure names the fact and your tool's message.
    const shapes = (path: InvocationPath) => path.steps.flatMap((step) => step.facts)
    const succeeding = findPath(
      (path) => !path.crash && shapes(path).includes('tool.dispatched') && shapes(path).includes('tool.settled:succeeded') && !shapes(path).some((fact) => fact.startsWith('tool.dispatched:')),
      'whose only calls are of your tool, succeeding',
    )
    const throwing = [{ ...(tools[0] as (typeof tools)[number]), execute: async () => Promise.reject(new Error('ticket service said no')) }]
    const thrown = await rejectsWithCheck(() => runPath(succeeding, { tools: throwing, toolCall: { name: 'create_ticket', arguments: { title: 'x' } } }), 'facts', 'a tool of yours that throws')
    assert.match(thrown.detail, /is tool\.settled:failed, where the path plans tool\.settled:succeeded \([^ ]+ failed: ticket service said no\)/)

    const unknownOutcome = (path: InvocationPath) => path.steps.some((step) => step.facts.includes('invocation.ended:failed:outcome_unknown'))
    const crash = findPath((path) => path.crash && unknownOutcome(path), 'crashing while a tool runs')
    // Own tools on a crashing path need a child script that has them too: refused before anything runs.
    const ownTools = await runPath(crash, { tools, toolCall: { name: 'create_ticket', arguments: { title: 'printer on fire' } } }).then(
      () => undefined,
      (error: unknown) => error as { code?: string; details?: { field?: string }; message?: string },
    )
    assert.equal([ownTools?.code, ownTools?.details?.field], ['TESTING_INVALID_OPTIONS', 'childScript'], ownTools?.message)
    assert.match(ownTools?.message ?? '', /runPathChild with the same tools/)
    const result = await runPath(crash)
    assert.is(result.checks.recoveries, 1)
    assert.is(result.executions, 1, 'the tool that ran when the process died never runs again')
    // A TypeScript child script runs with `--import tsx`, resolved from the working directory: where
    // tsx cannot be found, that is said before anything runs, not as a child that died at its first line.
    const elsewhere = await mkdtemp(join(tmpdir(), 'factstate-no-tsx-'))
    const cwd = process.cwd()
    let noTsx: { code?: string; details?: { field?: string }; message?: string } | undefined
    try {
      process.chdir(elsewhere)
      noTsx = await runPath(crash, { childScript }).then(
        () => undefined,
        (error: unknown) => error as typeof noTsx,
      )
    } finally {
      process.chdir(cwd)
      await rm(elsewhere, { recursive: true, force: true })
    }
    assert.equal([noTsx?.code, noTsx?.details?.field], ['TESTING_INVALID_OPTIONS', 'childScript'], noTsx?.message)
    assert.match(noTsx?.message ?? '', /is TypeScript, which the crash child runs with `node --import tsx`, and tsx cannot be found from .*: install it \(npm install -D tsx\)/)

    const badOptions: [RunPathOptions, string][] = [
      [{ unknownTool: 'echo' }, 'unknownTool'],
      [{ unknownTool: 'path-read-only' }, 'unknownTool'],
      [{ tools: [{ ...echoTool(), name: 'path-needs-approval' }] }, 'tools'],
      [{ tools, toolCall: { name: 'missing', arguments: {} } }, 'toolCall'],
      [{ toolCall: null as never }, 'toolCall'],
      // Arguments the tool's schema refuses would be rejected on every path that plans a dispatch: refused before anything runs.
      [{ toolCall: { name: 'echo', arguments: { value: 'forty-two' } } }, 'toolCall'],
      [{ tools: [{ ...echoTool(), inputSchema: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } } }] }, 'toolCall'],
      [{ tools: [] }, 'tools'],
      [{ stepTimeoutMs: 0 }, 'stepTimeoutMs'],
      [{ directory: 'relative/dir' }, 'directory'],
      [{ stepTimeoutMs: Number.POSITIVE_INFINITY }, 'stepTimeoutMs'],
      [{ stepTimeoutMs: 2 ** 31 }, 'stepTimeoutMs'],
      [{ stepTimeoutMs: '100' as never }, 'stepTimeoutMs'],
      [{ createEngine: 5 as never }, 'createEngine'],
      [{ tools: [null as never] }, 'tools'],
      [{ tools: [echoTool(), echoTool()] }, 'tools'],
      [{ directory: dirname(fileURLToPath(import.meta.url)) }, 'directory'],
      // A file where the directory should be, and a directory under a file.
      [{ directory: fileURLToPath(import.meta.url) }, 'directory'],
      [{ directory: join(fileURLToPath(import.meta.url), 'log') }, 'directory'],
      [{ toolCall: { name: 'echo' } as never }, 'toolCall'],
      [{ stepTimeout: 100 } as never, 'stepTimeout'],
      [{ model: '' }, 'model'],
      [{ durability: 'fast' as never }, 'durability'],
      [{ childScript: 5 as never }, 'childScript'],
      [{ childScript: new URL('https://example.com/child.js') }, 'childScript'],
      [{ childExecArgv: ['--import', 5] as never }, 'childExecArgv'],
      // A getter that throws is the call's refusal, naming the option, not an error from deep inside.
      [Object.defineProperty({}, 'model', { enumerable: true, get: () => { throw new Error('unreadable') } }) as RunPathOptions, 'model'],
    ]
    for (const [options, field] of badOptions) {
      const refused = await runPath(mine[0] as InvocationPath, options).then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: { field?: string } },
      )
      let shown: string
      try {
        shown = JSON.stringify(options)
      } catch {
        shown = `that cannot be read (${field})`
      }
      assert.equal([refused?.code, refused?.details?.field], ['TESTING_INVALID_OPTIONS', field], `options ${shown} are refused`)
      assertDetailsFit(refused as { code: string; details?: unknown }, `options ${shown}`)
    }
    // Each option is read once: a getter is asked once, and what it answered is what the run uses.
    let reads = 0
    const counted = Object.defineProperty({}, 'durability', {
      enumerable: true,
      get: () => {
        reads += 1
        return 'os'
      },
    }) as RunPathOptions
    const once = await runPath(mine[0] as InvocationPath, counted)
    assert.is(once.pathId, (mine[0] as InvocationPath).id)
    assert.is(reads, 1, 'durability was read once')
    let directoryReads = 0
    const fresh = join(tmpdir(), `factstate-path-once-${process.pid}`)
    const withDirectory = Object.defineProperty({}, 'directory', {
      enumerable: true,
      get: () => {
        directoryReads += 1
        return directoryReads === 1 ? fresh : undefined
      },
    }) as RunPathOptions
    await mkdir(fresh, { recursive: true })
    try {
      assert.is((await runPath(mine[0] as InvocationPath, withDirectory)).pathId, (mine[0] as InvocationPath).id)
      assert.is(directoryReads, 1, 'directory was read once')
      assert.ok((await readdir(fresh)).includes('log'), 'the run used the directory the getter answered first, and left it to its owner')
    } finally {
      await rm(fresh, { recursive: true, force: true })
    }
    // The kit keeps a schema's check while the schema's text stays the same: one changed between calls is checked as it is now.
    const changing: Record<string, unknown> = { type: 'object', required: ['id'], properties: { value: { type: 'number' } } }
    const changingTool = { ...echoTool(), inputSchema: changing }
    const asBefore = await runPath(mine[0] as InvocationPath, { tools: [changingTool] }).then(
      () => undefined,
      (error: { code?: string; details?: { field?: string } }) => [error.code, error.details?.field],
    )
    assert.equal(asBefore, ['TESTING_INVALID_OPTIONS', 'toolCall'], 'the default call lacks the required id')
    delete changing.required
    const admitted = await runPath(mine[0] as InvocationPath, { tools: [changingTool] })
    assert.is(admitted.pathId, (mine[0] as InvocationPath).id, 'without required, the same tool object is admitted and its path runs')
    assert.ok(admitted.requests > 0, 'the path ran against the model')
    // A createEngine that throws: runPath rejects with its error and leaves no server behind.
    const servers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'TCPServerWrap').length
    const serversBefore = servers()
    const broken = await runPath(mine[0] as InvocationPath, {
      createEngine: () => {
        throw new Error('factory broke')
      },
    }).then(
      () => undefined,
      (error: Error) => error.message,
    )
    assert.match(broken ?? '', /factory broke/)
    assert.is(servers(), serversBefore, 'no model server is left listening')
    const badScript = await scriptedModelServer(5 as never).then(
      () => undefined,
      (error: { code?: string }) => error.code,
    )
    assert.is(badScript, 'TESTING_INVALID_OPTIONS', 'scriptedModelServer(5)')
    // What is not a path, a misspelt server option, a request number that can never come: refused, not a TypeError or a wait forever.
    for (const [what, call, field] of [
      ['runPath(null)', () => runPath(null as never), 'path'],
      ['runPath({ steps: null })', () => runPath({ ...(mine[0] as InvocationPath), steps: null as never }), 'path'],
      ['pathCoverage(null)', async () => pathCoverage(null as never), 'paths'],
      ['pathCoverage([{}])', async () => pathCoverage([{}] as never), 'paths'],
      ['scriptedModelServer([], { strem: true })', () => scriptedModelServer([], { strem: true } as never), 'strem'],
      ['scriptedModelServer([], { stream: "yes" })', () => scriptedModelServer([], { stream: 'yes' as never }), 'stream'],
      ['scriptedModelServer([], { callIdPrefix: "a b" })', () => scriptedModelServer([], { callIdPrefix: 'a b' }), 'callIdPrefix'],
      ['scriptedModelServer([], { callIdPrefix: "" })', () => scriptedModelServer([], { callIdPrefix: '' }), 'callIdPrefix'],
    ] as const) {
      const refused = await call().then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: { field?: string } },
      )
      assert.equal([refused?.code, refused?.details?.field], ['TESTING_INVALID_OPTIONS', field], what)
    }
    const server = await scriptedModelServer([])
    try {
      const never = await server.seen(-1).then(
        () => undefined,
        (error: { code?: string }) => error.code,
      )
      assert.is(never, 'TESTING_INVALID_OPTIONS', 'seen(-1)')
      assert.throws(() => server.release(Number.NaN), (error: { code?: string }) => error.code === 'TESTING_INVALID_OPTIONS', 'release(NaN)')
    } finally {
      await server.close()
    }
  }, 40_000))

/** Runs `script` with `node --import tsx`, killed if it has not ended by itself within `ms`; its exit code, stdout and stderr. */
async function ownProcess(script: string, ms: number): Promise<{ code: number | null; killed: boolean; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  let killed = false
  const guard = setTimeout(() => {
    killed = true
    child.kill('SIGKILL')
  }, ms)
  const code = await new Promise<number | null>((resolve) => child.on('close', (exit) => resolve(exit)))
  clearTimeout(guard)
  return { code, killed, stdout, stderr }
}

/** A path whose `known` calls succeed, and that calls no tool of the kit's. */
const ownToolSucceeds = () => {
  const shapes = (path: InvocationPath) => path.steps.flatMap((step) => step.facts)
  return findPath(
    (path) => !path.crash && shapes(path).includes('tool.dispatched') && shapes(path).includes('tool.settled:succeeded') && !shapes(path).some((fact) => fact.startsWith('tool.dispatched:')),
    'whose only calls are of your tool, succeeding',
  )
}

test('a tool that never settles: runPath rejects with its timeout, naming the call still running, in a process with nothing else alive', () =>
  withTimeout(async () => {
    // In its own process: here the test's own timer would keep the event loop alive and hide an exit with the promise pending.
    const script = fileURLToPath(new URL('./support/hanging-tool-path.ts', import.meta.url))
    const { code, killed, stdout, stderr } = await ownProcess(script, 50_000)
    assert.not.ok(killed, `the process ended by itself; stdout: ${stdout}; stderr: ${stderr}`)
    assert.is(code, 0, `exit code; stdout: ${stdout}; stderr: ${stderr}`)
    const reported = JSON.parse(stdout.trim()) as { check?: string; message?: string; resolved?: boolean }
    assert.is(reported.check, 'timeout', stdout)
    assert.match(reported.message ?? '', /did not settle within 1000 ms \(stepTimeoutMs\); still running: tool hang \(operation invocation-\d+\/step-\d+\/0\), whose execute has not returned/)
  }, 60_000))

test("your tool's validateInput and timeoutMs apply as in a run; toolRuns counts the calls that reached your execute", () =>
  withTimeout(async () => {
    const path = ownToolSucceeds()
    const settledOk = path.steps.flatMap((step) => step.facts).filter((fact) => fact === 'tool.settled:succeeded').length
    // validateInput: false: the schema is shown, not checked; a call it refuses is accepted at start-up and runs.
    const received: unknown[] = []
    const unchecked = {
      name: 'lookup',
      inputSchema: { type: 'object', properties: { value: { type: 'number' } }, required: ['value'] },
      validateInput: false,
      execute: async (input: unknown) => {
        received.push(input)
        return { found: true }
      },
    }
    const ran = await runPath(path, { tools: [unchecked], toolCall: { name: 'lookup', arguments: { value: 'forty-two' } } })
    assert.is(ran.toolRuns, settledOk, 'each succeeding call reached your execute')
    assert.equal(received, Array.from({ length: settledOk }, () => ({ value: 'forty-two' })))
    // Checked (the default), the same call is refused before anything runs.
    const checked = await runPath(path, { tools: [{ ...unchecked, validateInput: true }], toolCall: { name: 'lookup', arguments: { value: 'forty-two' } } }).then(
      () => undefined,
      (error: { code?: string; details?: { field?: string } }) => [error.code, error.details?.field],
    )
    assert.equal(checked, ['TESTING_INVALID_OPTIONS', 'toolCall'])

    // timeoutMs counts your execute's time, not the time the call waits for the path: 1 ms is enough for a tool that returns at once.
    const quick = await runPath(path, { tools: [{ ...echoTool(), timeoutMs: 1, execute: (input: unknown) => input }] })
    assert.is(quick.toolRuns, settledOk)
    // A tool that stops at its signal: it is aborted once its timeoutMs has passed, and its failure is the path's.
    const stopsAtSignal = { ...echoTool(), timeoutMs: 50, execute: (_input: unknown, context: { signal: AbortSignal }) => new Promise((_, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason as Error))) }
    const aborted = await rejectsWithCheck(() => runPath(path, { tools: [stopsAtSignal], stepTimeoutMs: 5_000 }), 'facts', 'a tool past its timeoutMs')
    assert.match(aborted.detail, /tool\.settled:failed, where the path plans tool\.settled:succeeded \([^ ]+ failed: TimeoutError: the tool did not finish within 50 ms \(its timeoutMs\)\)/)
    // One that ignores it is given up on a second later, as the engine would, and said so.
    const ignoresSignal = { ...echoTool(), timeoutMs: 50, execute: () => new Promise(() => {}) }
    const abandoned = await rejectsWithCheck(() => runPath(path, { tools: [ignoresSignal], stepTimeoutMs: 5_000 }), 'facts', 'a tool that ignores its timeoutMs')
    assert.match(abandoned.detail, /did not finish within 50 ms \(its timeoutMs\), nor within 1,000 ms of its signal aborting: the engine would not wait for it/)
    // A timeoutMs a run would refuse is refused before anything runs.
    const refused = await runPath(path, { tools: [{ ...echoTool(), timeoutMs: 0 }] }).then(
      () => undefined,
      (error: { code?: string; details?: { field?: string }; message?: string }) => [error.code, error.details?.field, error.message],
    )
    assert.equal(refused?.slice(0, 2), ['TESTING_INVALID_OPTIONS', 'tools'], String(refused?.[2]))
    assert.match(String(refused?.[2]), /tools\.0\.timeoutMs/)

    // A path that makes your call throw: the engine called the wrapper, your execute never ran.
    const throwing = findPath((p) => !p.crash && p.description.includes('answer(known) · outcome(throws)') && !p.description.includes('outcome(succeeds)'), 'whose known calls all throw')
    const thrown = await runPath(throwing, { tools: [{ ...echoTool(), execute: () => assert.unreachable('your execute is not run on this path') }] })
    assert.ok(thrown.executions > 0, 'the wrapper was called')
    assert.is(thrown.toolRuns, 0, 'your execute was not')
  }, 60_000))

test('maxPaths keeps, before the first paths, one that runs your tool, one of each answer kind and one of each transition it can', () =>
  withTimeout(async () => {
    const runsYours = (path: InvocationPath) => path.steps.some(({ event }, index) => event.type === 'model.answer' && event.answer === 'known' && path.steps[index + 1]?.event.type === 'tool.outcome' && (path.steps[index + 1]?.event as { outcome?: string }).outcome === 'succeeds')
    const few = invocationPaths({ maxSteps: 1, maxPaths: 15, crashes: false })
    assert.is(few.length, 15)
    assert.ok(few.some(runsYours), `a path runs your tool: ${few.map((path) => path.description).join(' | ')}`)
    const answers = (paths: InvocationPath[]) => new Set(paths.flatMap((path) => path.steps.flatMap(({ event }) => (event.type === 'model.answer' ? [event.answer] : []))))
    assert.equal([...answers(few)].sort(), [...answers(invocationPaths({ maxSteps: 1, crashes: false }))].sort(), 'every answer kind')
    assert.equal(JSON.stringify(invocationPaths({ maxSteps: 1, maxPaths: 15, crashes: false })), JSON.stringify(few), 'deterministic')
    // Even one path runs your tool; and the paths chosen keep the order they are generated in.
    const one = invocationPaths({ maxSteps: 1, maxPaths: 1, crashes: false })
    assert.is(one.length, 1)
    assert.ok(runsYours(one[0] as InvocationPath), one[0]?.description)
    const all = invocationPaths({ maxSteps: 1, crashes: false }).map((path) => path.description)
    const positions = few.map((path) => all.indexOf(path.description))
    assert.ok(positions.every((at) => at >= 0), 'each is one of the paths without maxPaths')
    assert.equal(positions, [...positions].sort((a, b) => a - b), 'in their order')
    // With crashes, the crash paths still come on top.
    assert.is(invocationPaths({ maxPaths: 10 }).length, 19)
  }, 30_000))

test('the testing kit exports every type its signatures use, and runPath takes a readonly tool list as engine.start does', () => {
  // Checked by the type-check: an option type not exported, or a tool list that must be mutable, fails it.
  const tools: readonly ToolDefinition[] = [echoTool()]
  const options: RunPathOptions = { tools }
  const text: TextOptions = { pieces: 2 }
  const status: StatusOptions = { retryAfter: 1 }
  const calls: ToolCallsOptions = { text: 'x' }
  const bounds: PathModelInput | undefined = invocationPaths({ maxSteps: 1, maxPaths: 1, crashes: false })[0]?.bounds
  assert.equal([options.tools === tools, text.pieces, status.retryAfter, calls.text, bounds?.maxSteps], [true, 2, 1, 'x', 1])
})

test("a path's id is its position in the list, which other options fill with other paths; its description is unique in a list and names the same events under any options", () => {
  const lists = [invocationPaths(), invocationPaths({ maxSteps: 1 }), invocationPaths({ crashes: false }), invocationPaths({ strategy: 'states' })]
  const byId = (paths: InvocationPath[], id: string) => paths.find((path) => path.id === id)?.description
  // As the README says: path-016 is another path with maxSteps: 1.
  assert.is(byId(lists[0] as InvocationPath[], 'path-016'), 'start · reserve(before) · commit · refused(HANDOFF_MISMATCH)')
  assert.is(byId(lists[1] as InvocationPath[], 'path-016'), 'start · request · answer(known) · outcome(succeeds)')
  const events = (path: InvocationPath) => JSON.stringify(path.steps.map((step) => step.event))
  const seen = new Map<string, string>()
  for (const paths of lists) {
    assert.is(new Set(paths.map((path) => path.description)).size, paths.length, 'no two paths of a list share a description')
    for (const path of paths) {
      const before = seen.get(path.description)
      if (before !== undefined) assert.is(events(path), before, path.description)
      seen.set(path.description, events(path))
    }
  }
})

test.run()
