/**
 * Test paths generated from the machine: `xstate/graph` walks the driver-level path model
 * (`path-model.ts`), and every fact sequence a path plans is folded through the real
 * `invocationMachine`, which must accept it and arrive in the state the path expects. A path that
 * the machine contradicts is never handed out: generation throws instead.
 */
import { createTestModel } from 'xstate/graph'
import type { Fact } from '../facts/types.js'
import { type InvocationSnapshot, type InvocationState, initialInvocationSnapshot, pureScope, stateOf } from '../machines/invocation.js'
import { invocationTransitions, stepTransitions } from './machine-coverage.js'
import { type PathContext, type PathEvent, type PathModelInput, type PathState, MACHINE_STATE_OF, PATH_EVENTS, pathModel } from './path-model.js'
import { FactstateError } from '../errors.js'
import { meantName } from '../options.js'

export type { AnswerKind, PathEvent, PathState, RefusalCode } from './path-model.js'

/** How paths are chosen from the model's state graph. */
export type PathStrategy =
  /** Every event variant from every stable state (by state, event, target state and pending reservation): compact, the default. */
  | 'events'
  /** The shortest path to every state of the model (with its full context), each completed to a settled run. */
  | 'states'
  /** Every edge of the model's state graph: several times more paths than `events`. */
  | 'edges'
  /** Simple paths (no state twice) to a settled run, depth first, up to `maxPaths` (default 1000). */
  | 'simple'

/** Options of {@link invocationPaths}. */
export interface InvocationPathOptions {
  /** Model steps of a message run (default 2). A successor gets the steps its pause left. */
  maxSteps?: number | undefined
  /** Runs in one path: the first message run, then successors and new messages (default 2). */
  maxRuns?: number | undefined
  /** How paths are chosen (default `events`). */
  strategy?: PathStrategy | undefined
  /** Add one crash path for each machine state a crash can hit (default true). Each runs a child process. */
  crashes?: boolean | undefined
  /** Keep only event variants for which this returns true (others are never offered). */
  include?: ((event: PathEvent) => boolean) | undefined
  /**
   * At most this many non-crash paths (default: all; for `simple`, 1000). Those kept come first a
   * path that runs your tool (`answer(known)` then `outcome(succeeds)`), then one of each answer
   * kind, transition and event variant not yet covered, then the first of the rest, in their order.
   */
  maxPaths?: number | undefined
}

const PATH_OPTIONS: ReadonlySet<string> = new Set(['maxSteps', 'maxRuns', 'strategy', 'crashes', 'include', 'maxPaths'] satisfies (keyof InvocationPathOptions)[])

/** One step of a path: what the test does, and what must follow. */
export interface PathStep {
  /** What the test does at this step (`describeEvent` gives its label). */
  event: PathEvent
  /** The run the step acts on: 1 for the first run, 0 before any run. */
  run: number
  /** The path model's state after the step. */
  state: PathState
  /** The invocation machine's state of run `run` after the step (`null` before the first run). */
  machineState: InvocationState | null
  /** The facts this step makes the engine (or recovery) append, as {@link factShape}s, in order. */
  facts: string[]
  /**
   * After a `hold.commit`: the steps the sealed pause leaves its successor (`remainingSteps`). A seal
   * in a retry's back-off does not spend the failed step: the successor sends that request again.
   */
  remainingSteps?: number
}

/** A generated path. */
export interface InvocationPath {
  /**
   * `path-001`, ... : the path's position in the list generated (stable for the same options and
   * version), not a name for what it does: other options (`maxSteps`, `crashes`, `strategy`,
   * `include`, `maxPaths`) number other paths so (`path-016` of `invocationPaths()` is not that of
   * `invocationPaths({ maxSteps: 1 })`). To pick, skip or report a path across runs, match its
   * `description`, unique in a list and naming the same events under any options.
   */
  id: string
  /** The events, e.g. `start · request · answer(known) · outcome(succeeds) · answer(text)`. */
  description: string
  /** The steps, in order. */
  steps: PathStep[]
  /** The path releases a hold (rollback). */
  rollback: boolean
  /** The path commits a hold (seal). */
  seal: boolean
  /** The path crashes the process (at most once). */
  crash: boolean
  /** The bounds the path was generated with (the runner configures the runs the same way). */
  bounds: PathModelInput
  /** The invocation-machine transitions its planned facts take (`MachineTransition.id`), without repeats. */
  transitions: string[]
}

/**
 * A fact reduced to what a path can predict: its type and the fields that say which way things
 * went (`invocation.ended:failed:outcome_unknown`, `model.requested:step-2`,
 * `tool.rejected:unknown_tool`, `model.completed:calls=3`, `invocation.opened:message+priorUnknown`,
 * `tool.dispatched:approved` for a call the approver let go, `tool.dispatched:readOnly`).
 *
 * @example
 * ```ts
 * factShape({ type: 'tool.settled', operationId: 'op', outcome: { status: 'failed', message: 'boom' } })
 * // 'tool.settled:failed'
 * ```
 */
export function factShape(fact: Fact): string {
  switch (fact.type) {
    case 'invocation.opened':
      return `invocation.opened:${fact.input.kind}${fact.input.kind !== 'handoff' && fact.input.priorUnknown?.length ? '+priorUnknown' : ''}`
    case 'model.requested':
      return `model.requested:${fact.stepId}`
    case 'model.completed':
      return fact.output.toolCalls.length === 0 ? 'model.completed:text' : `model.completed:calls=${fact.output.toolCalls.length}`
    case 'model.interrupted':
      return `model.interrupted:${fact.status}`
    case 'tool.dispatched':
      return `tool.dispatched${fact.approval === undefined ? '' : ':approved'}${fact.readOnly === true ? ':readOnly' : ''}`
    case 'tool.settled':
      return `tool.settled:${fact.outcome.status}`
    case 'tool.rejected':
      return `tool.rejected:${fact.reason}`
    case 'hold.entered':
      return 'hold.entered'
    case 'hold.released':
      return 'hold.released'
    case 'invocation.ended':
      return fact.outcome.status === 'failed' ? `invocation.ended:failed:${fact.outcome.class}` : `invocation.ended:${fact.outcome.status}`
    default: {
      const never: never = fact
      throw new TypeError(`unknown fact ${JSON.stringify(never)}`)
    }
  }
}

/**
 * A short name of a path event, as used in path descriptions.
 *
 * @example
 * ```ts
 * describeEvent({ type: 'model.answer', answer: 'several' }) // 'answer(several)'
 * describeEvent({ type: 'refusal', code: 'RUN_BUSY' })       // 'refused(RUN_BUSY)'
 * ```
 */
export function describeEvent(event: PathEvent): string {
  switch (event.type) {
    case 'start':
      return event.allowPriorUnknown ? 'start(allowPriorUnknown)' : 'start'
    case 'model.answer':
      return `answer(${event.answer})`
    case 'tool.outcome':
      return `outcome(${event.outcome})`
    case 'approval':
      return event.decision
    case 'hold.reserve':
      return `reserve(${event.when})`
    case 'hold.cancel':
      return 'reservation.cancel'
    case 'hold.release':
      return 'release'
    case 'hold.commit':
      return 'commit'
    case 'refusal':
      return `refused(${event.code})`
    default:
      return event.type
  }
}

type Snapshot = ReturnType<typeof pathModel.getInitialSnapshot>
type Scope = Parameters<typeof pathModel.transition>[2]


interface Edge {
  event: PathEvent
  target: string
}

interface Graph {
  initial: string
  vertices: Map<string, Snapshot>
  edges: Map<string, Edge[]>
}

/** What identifies a model state: the state and its context, without the planned facts and the ids they use. */
function identity(snapshot: Snapshot): string {
  const { facts: _facts, callIndex: _callIndex, inflight: _inflight, ...context } = snapshot.context
  return JSON.stringify({ value: snapshot.value, context })
}

const eventKey = (event: PathEvent) => JSON.stringify(event)
const valueOf = (snapshot: Snapshot) => snapshot.value as PathState
const settled = (snapshot: Snapshot) => snapshot.value === 'ended' || snapshot.value === 'committed'

function positive(value: number | undefined, fallback: number, name: string, max: number): number {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < 1 || value > max) throw new FactstateError('TESTING_INVALID_OPTIONS', `invocationPaths: ${name} must be an integer from 1 to ${max}`, { details: { field: name } })
  return value
}

function modelFor(input: PathModelInput, include: (event: PathEvent) => boolean) {
  const offered = PATH_EVENTS.filter(include)
  return createTestModel(pathModel, {
    input,
    events: offered as PathEvent[],
    // The test model offers a bare `{ type }` for any event type it finds no variant of: `include` must filter here too.
    filterEvents: (snapshot, event) => include(event) && snapshot.can(event),
    serializeState: (snapshot) => identity(snapshot),
  } as Parameters<typeof createTestModel<typeof pathModel>>[1])
}

function graphOf(model: ReturnType<typeof modelFor>): Graph {
  const adjacency = model.getAdjacencyMap()
  const vertices = new Map<string, Snapshot>()
  const edges = new Map<string, Edge[]>()
  let initial: string | undefined
  for (const [key, value] of Object.entries(adjacency)) {
    initial ??= key
    vertices.set(key, value.state)
    const transitions = Object.values(value.transitions) as { event: PathEvent; state: Snapshot }[]
    edges.set(
      key,
      transitions.map((t) => ({ event: t.event, target: identity(t.state) })),
    )
  }
  if (initial === undefined) throw new Error('invocationPaths: the path model has no initial state')
  return { initial, vertices, edges }
}

/**
 * How much an event costs when a path is completed: endings that cut a run short (cancel, a
 * refused fact, a timeout, a failure) cost more, so completions prefer the run's natural end
 * and keep those variants for the paths that are about them.
 */
function cost(event: PathEvent): number {
  if (event.type === 'cancel' || event.type === 'log.refuses') return 4
  if (event.type === 'model.answer' && (event.answer === 'timeout' || event.answer === 'failure')) return 4
  return 1
}

/** The cheapest event sequences between vertices (Dijkstra; ties go to the edge found first, so the result is deterministic). */
function cheapest(
  starts: Iterable<string>,
  neighbours: (key: string) => { key: string; event: PathEvent }[],
  join: (path: PathEvent[], event: PathEvent) => PathEvent[],
): Map<string, PathEvent[]> {
  const found = new Map<string, { weight: number; path: PathEvent[] }>()
  const open: string[] = []
  for (const key of starts) {
    found.set(key, { weight: 0, path: [] })
    open.push(key)
  }
  const done = new Set<string>()
  while (open.length > 0) {
    let best = 0
    for (let i = 1; i < open.length; i += 1) {
      if ((found.get(open[i] as string)?.weight ?? 0) < (found.get(open[best] as string)?.weight ?? 0)) best = i
    }
    const key = open.splice(best, 1)[0] as string
    if (done.has(key)) continue
    done.add(key)
    const here = found.get(key) as { weight: number; path: PathEvent[] }
    for (const next of neighbours(key)) {
      const weight = here.weight + cost(next.event)
      const known = found.get(next.key)
      if (known !== undefined && known.weight <= weight) continue
      found.set(next.key, { weight, path: join(here.path, next.event) })
      open.push(next.key)
    }
  }
  return new Map([...found].map(([key, { path }]) => [key, path]))
}

/** The cheapest event sequence from `from` to each vertex. */
function cheapestFrom(graph: Graph, from: string): Map<string, PathEvent[]> {
  return cheapest(
    [from],
    (key) => (graph.edges.get(key) ?? []).map((edge) => ({ key: edge.target, event: edge.event })),
    (path, event) => [...path, event],
  )
}

/** For each vertex, the cheapest event sequence that reaches a vertex where `done` holds. */
function completions(
  graph: Graph,
  done: (snapshot: Snapshot) => boolean,
  allowed: (source: Snapshot, edge: Edge) => boolean,
): Map<string, PathEvent[]> {
  const incoming = new Map<string, { key: string; event: PathEvent }[]>()
  for (const [source, edges] of graph.edges) {
    for (const edge of edges) {
      if (!allowed(graph.vertices.get(source) as Snapshot, edge)) continue
      const list = incoming.get(edge.target) ?? []
      list.push({ key: source, event: edge.event })
      incoming.set(edge.target, list)
    }
  }
  const goals = [...graph.vertices].filter(([, snapshot]) => done(snapshot)).map(([key]) => key)
  return cheapest(goals, (key) => incoming.get(key) ?? [], (path, event) => [event, ...path])
}

/**
 * Simple paths (no state visited twice) from the initial state to a settled run, depth first in
 * the graph's own order, stopping after `limit`: the exhaustive set grows too fast to enumerate
 * for all but the smallest bounds.
 */
function simplePaths(graph: Graph, allowed: (source: Snapshot, edge: Edge) => boolean, limit: number): PathEvent[][] {
  const found: PathEvent[][] = []
  const onPath = new Set<string>()
  const events: PathEvent[] = []
  const visit = (key: string) => {
    if (found.length >= limit) return
    const here = graph.vertices.get(key) as Snapshot
    if (settled(here) && events.length > 0) {
      found.push([...events])
      return
    }
    onPath.add(key)
    for (const edge of graph.edges.get(key) ?? []) {
      if (!allowed(here, edge) || onPath.has(edge.target)) continue
      events.push(edge.event)
      visit(edge.target)
      events.pop()
    }
    onPath.delete(key)
  }
  visit(graph.initial)
  return found
}

/** Drops paths that are a prefix of another path (or a repeat of one). */
function withoutPrefixes(paths: PathEvent[][]): PathEvent[][] {
  const keys = paths.map((path) => path.map(eventKey))
  return paths.filter((path, index) => {
    const mine = keys[index] as string[]
    return !keys.some((other, j) => {
      if (j === index || other.length < mine.length) return false
      if (other.length === mine.length && j > index) return false
      return mine.every((key, k) => other[k] === key)
    })
  })
}

/** Whether a path runs the caller's own tool: a `known` call (or `several`, which holds two) that the path lets succeed. */
function runsOwnTool(events: readonly PathEvent[]): boolean {
  let answered: string | undefined
  for (const event of events) {
    if (event.type === 'model.answer') answered = event.answer
    else if (event.type === 'tool.outcome' && event.outcome === 'succeeds' && (answered === 'known' || answered === 'several')) return true
  }
  return false
}

/**
 * `max` of `paths` (more than `max`), in their order: first, for each of these not yet covered, the
 * first path that has it: a run of the caller's own tool (`answer(known)` then `outcome(succeeds)`:
 * without one, `runPath` never calls it), each kind of model answer, each invocation-machine
 * transition, each other event variant; then the first paths not chosen, up to `max`. Deterministic,
 * as the order of `paths` is.
 */
function chosen(paths: PathEvent[][], max: number, input: PathModelInput): PathEvent[][] {
  const featuresOf = paths.map((events) => {
    const features = new Set<string>(events.map(eventKey))
    if (runsOwnTool(events)) features.add('own tool runs')
    for (const transition of planOf(input, events, 'a candidate path').transitions) features.add(`transition ${transition}`)
    return features
  })
  const answers = PATH_EVENTS.filter((event) => event.type === 'model.answer').map(eventKey)
  const others = PATH_EVENTS.filter((event) => event.type !== 'model.answer').map(eventKey)
  const wanted = ['own tool runs', ...answers, ...invocationTransitions().map(({ id }) => `transition ${id}`), ...others]
  const picked = new Set<number>()
  const covered = new Set<string>()
  for (const feature of wanted) {
    if (picked.size >= max) break
    if (covered.has(feature)) continue
    const index = featuresOf.findIndex((features) => features.has(feature))
    if (index < 0) continue
    picked.add(index)
    for (const got of featuresOf[index] as Set<string>) covered.add(got)
  }
  for (let index = 0; index < paths.length && picked.size < max; index += 1) picked.add(index)
  return paths.filter((_, index) => picked.has(index))
}

interface Plan {
  steps: PathStep[]
  transitions: string[]
}

/** Replays `events` through the path model and folds every planned fact through the real machine. */
function planOf(input: PathModelInput, events: PathEvent[], label: string): Plan {
  let snapshot = pathModel.getInitialSnapshot(pureScope, input)
  const machines = new Map<number, InvocationSnapshot>()
  const transitions = new Set<string>()
  const steps: PathStep[] = []
  for (const [index, event] of events.entries()) {
    if (!snapshot.can(event)) throw new Error(`invocationPaths: ${label}: step ${index} (${describeEvent(event)}) is not possible in ${String(snapshot.value)}`)
    const before = snapshot.context.facts.length
    snapshot = pathModel.transition(snapshot, event, pureScope)
    const planned = snapshot.context.facts.slice(before)
    for (const { run, fact } of planned) {
      const machine = machines.get(run) ?? initialInvocationSnapshot()
      let step: ReturnType<typeof stepTransitions>
      try {
        step = stepTransitions(machine, fact)
      } catch (error) {
        throw new Error(`invocationPaths: ${label}: the invocation machine refuses ${factShape(fact)} at step ${index}: ${(error as Error).message}`)
      }
      for (const id of step.taken) transitions.add(id)
      machines.set(run, step.next)
    }
    const context: PathContext = snapshot.context
    const state = valueOf(snapshot)
    const expected = MACHINE_STATE_OF[state]
    const machine = machines.get(context.run)
    const actual = machine ? stateOf(machine) : null
    if (expected !== actual && !(state === 'idle' && actual === null)) {
      throw new Error(`invocationPaths: ${label}: after step ${index} the model is in ${state} (${expected}) but the machine folds to ${actual}`)
    }
    const facts = planned.map(({ fact }) => factShape(fact))
    steps.push(
      event.type === 'hold.commit' && context.pausedSteps !== null
        ? { event, run: context.run, state, machineState: actual, facts, remainingSteps: context.pausedSteps }
        : { event, run: context.run, state, machineState: actual, facts },
    )
  }
  return { steps, transitions: [...transitions] }
}

/**
 * Where the crash paths crash: once in each machine state, and in `settlingTool` once more while a
 * call waits for its approver and once more while a read-only tool runs (the first one there is
 * while a tool with effects runs). The first path found to each, by the shortest way there.
 */
const CRASH_POINTS: readonly { machineState: InvocationState; matches: (snapshot: Snapshot) => boolean }[] = [
  ...(['opening', 'safePoint', 'awaitingModel'] as const).map((machineState) => ({ machineState, matches: () => true })),
  { machineState: 'settlingTool', matches: (snapshot) => valueOf(snapshot) === 'toolRunning' && !snapshot.context.inflightReadOnly },
  { machineState: 'settlingTool', matches: (snapshot) => valueOf(snapshot) === 'awaitingApproval' },
  { machineState: 'settlingTool', matches: (snapshot) => valueOf(snapshot) === 'toolRunning' && snapshot.context.inflightReadOnly },
  ...(['held', 'committed', 'ended'] as const).map((machineState) => ({ machineState, matches: () => true })),
]

/**
 * Generates test paths from the invocation machine, with every payload variant: model answers
 * (a call to a known tool, to an unknown tool, several calls in one answer, a call to a tool that
 * needs approval, to a read-only tool, final text, failure, timeout), approvals (approve, deny),
 * tool outcomes (succeeds, throws), holds reserved before or during a request, released
 * (rollback), committed (seal) or given up, cancellation, refusals that must not write, and a
 * crash (SIGKILL of the process) at every machine state, while a call waits for its approver and
 * while a read-only tool runs. Generation is deterministic: the
 * same options give the same paths, in the same order.
 *
 * By default (`strategy: 'events'`) every event variant is taken from every stable state, every
 * invocation-machine transition is covered, and each path ends with its last run settled.
 *
 * @example
 * ```ts
 * import { invocationPaths } from 'factstate/testing'
 * const paths = invocationPaths({ maxSteps: 2, maxRuns: 2 })
 * paths.filter((p) => p.seal).length    // paths that commit a hold
 * paths[0]?.description                 // 'start · request · cancel'
 * paths[0]?.steps.at(-1)?.facts         // ['model.interrupted:cancelled', 'invocation.ended:cancelled']
 * ```
 */
export function invocationPaths(options: InvocationPathOptions = {}): InvocationPath[] {
  if (typeof options !== 'object' || options === null) throw new FactstateError('TESTING_INVALID_OPTIONS', 'invocationPaths: options must be an object', { details: { field: 'options' } })
  for (const key of Object.keys(options)) {
    // A typo (`maxStep`) would otherwise give the default paths without a word.
    if (!PATH_OPTIONS.has(key)) {
      const meant = meantName(key, [...PATH_OPTIONS])
      throw new FactstateError('TESTING_INVALID_OPTIONS', `invocationPaths: unknown option ${key}${meant === undefined ? '' : `: did you mean ${meant}?`} (it takes ${[...PATH_OPTIONS].join(', ')})`, {
        details: { field: key },
      })
    }
  }
  if (options.crashes !== undefined && typeof options.crashes !== 'boolean') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'invocationPaths: crashes must be true or false', { details: { field: 'crashes' } })
  }
  if (options.include !== undefined && typeof options.include !== 'function') {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'invocationPaths: include must be a function of a path event', { details: { field: 'include' } })
  }
  // Checked before any path is generated: the simple strategy stops at it.
  const maxPaths = options.maxPaths === undefined ? undefined : positive(options.maxPaths, 1, 'maxPaths', Number.MAX_SAFE_INTEGER)
  const input: PathModelInput = {
    maxSteps: positive(options.maxSteps, 2, 'maxSteps', 8),
    maxRuns: positive(options.maxRuns, 2, 'maxRuns', 4),
  }
  const strategy = options.strategy ?? 'events'
  if (!['events', 'states', 'edges', 'simple'].includes(strategy)) throw new FactstateError('TESTING_INVALID_OPTIONS', `invocationPaths: unknown strategy ${String(strategy)} (events, states, edges or simple)`, { details: { field: 'strategy' } })
  const include = options.include ?? (() => true)
  const model = modelFor(input, include)
  const graph = graphOf(model)
  const calm = (source: Snapshot, edge: Edge) => edge.event.type !== 'crash' && !source.context.crashed
  const heads = new Map<string, PathEvent[]>()
  const calmEvent = (snapshot: Snapshot, event: PathEvent) => event.type !== 'crash' && include(event) && snapshot.can(event)
  for (const path of model.getShortestPaths({ filterEvents: calmEvent, allowDuplicatePaths: true })) {
    heads.set(identity(path.state), path.steps.slice(1).map((step) => step.event))
  }
  const finish = completions(graph, settled, calm)
  const complete = (head: PathEvent[], key: string): PathEvent[] | undefined => {
    const tail = finish.get(key)
    return tail === undefined ? undefined : [...head, ...tail]
  }

  let calmPaths: PathEvent[][] = []
  if (strategy === 'simple') {
    calmPaths = simplePaths(graph, calm, maxPaths ?? 1_000)
  } else if (strategy === 'states') {
    for (const [key, head] of heads) {
      const path = complete(head, key)
      if (path && path.length > 0) calmPaths.push(path)
    }
  } else {
    const candidates = new Map<string, PathEvent[]>()
    const coarse = (source: Snapshot, edge: Edge) => {
      const target = graph.vertices.get(edge.target) as Snapshot
      return strategy === 'edges'
        ? `${identity(source)}|${eventKey(edge.event)}`
        : `${valueOf(source)}|${eventKey(edge.event)}|${valueOf(target)}|${source.context.reserved}|${source.context.kind}|${source.context.rolledBack}`
    }
    for (const [key, edges] of graph.edges) {
      const source = graph.vertices.get(key) as Snapshot
      const head = heads.get(key)
      if (head === undefined) continue
      for (const edge of edges) {
        if (!calm(source, edge)) continue
        const path = complete([...head, edge.event], edge.target)
        const known = candidates.get(coarse(source, edge))
        if (path && (known === undefined || path.length < known.length)) candidates.set(coarse(source, edge), path)
      }
    }
    const covered = new Set<string>()
    const ordered = [...candidates.entries()].sort(([a, x], [b, y]) => x.length - y.length || (a < b ? -1 : a > b ? 1 : 0))
    for (const [key, path] of ordered) {
      if (covered.has(key)) continue
      calmPaths.push(path)
      let at = graph.initial
      for (const event of path) {
        const edge = (graph.edges.get(at) ?? []).find((candidate) => eventKey(candidate.event) === eventKey(event)) as Edge
        covered.add(coarse(graph.vertices.get(at) as Snapshot, edge))
        at = edge.target
      }
    }
  }
  calmPaths = withoutPrefixes(calmPaths)
  if (maxPaths !== undefined && calmPaths.length > maxPaths) calmPaths = chosen(calmPaths, maxPaths, input)

  const crashPaths: PathEvent[][] = []
  if (options.crashes ?? true) {
    const ranked = [...heads.entries()].sort(([, a], [, b]) => a.length - b.length)
    for (const { machineState, matches } of CRASH_POINTS) {
      const found = ranked.find(([key]) => {
        const snapshot = graph.vertices.get(key) as Snapshot
        const state = MACHINE_STATE_OF[valueOf(snapshot)] ?? 'opening'
        return state === machineState && matches(snapshot) && snapshot.can({ type: 'crash' })
      })
      if (!found) continue
      const [key, head] = found
      const crashed = (graph.edges.get(key) ?? []).find((edge) => edge.event.type === 'crash')
      if (!crashed) continue
      const after = graph.vertices.get(crashed.target) as Snapshot
      // First every refusal the recovered session must give, then on to a new run settled.
      const refusals = (graph.edges.get(crashed.target) ?? []).filter((edge) => edge.event.type === 'refusal' && edge.target === crashed.target)
      const reach = cheapestFrom(graph, crashed.target)
      const goals = [...reach.entries()].filter(([target]) => {
        const snapshot = graph.vertices.get(target) as Snapshot
        return settled(snapshot) && snapshot.context.run > after.context.run
      })
      const fallback = [...reach.entries()].filter(([target]) => settled(graph.vertices.get(target) as Snapshot))
      const weight = (path: PathEvent[]) => path.reduce((sum, event) => sum + cost(event), 0)
      const tail = [...(goals.length > 0 ? goals : fallback)].sort(([, a], [, b]) => weight(a) - weight(b))[0]?.[1] ?? []
      crashPaths.push([...head, { type: 'crash' }, ...refusals.map((edge) => edge.event), ...tail])
    }
  }

  return [...calmPaths, ...crashPaths].map((events, index) => {
    const id = `path-${String(index + 1).padStart(3, '0')}`
    const plan = planOf(input, events, id)
    return {
      id,
      description: events.map(describeEvent).join(' · '),
      steps: plan.steps,
      rollback: events.some((event) => event.type === 'hold.release'),
      seal: events.some((event) => event.type === 'hold.commit'),
      crash: events.some((event) => event.type === 'crash'),
      bounds: { ...input },
      transitions: plan.transitions,
    }
  })
}

/**
 * What a set of paths covers of the invocation machine: the transitions their planned facts take,
 * against every transition the machine has.
 *
 * @example
 * ```ts
 * const { covered, total, missing } = pathCoverage(invocationPaths())
 * console.log(`${covered.length} of ${total}`, missing)
 * ```
 */
export function pathCoverage(paths: readonly { transitions: readonly string[] }[]): { covered: string[]; total: number; missing: string[] } {
  // Paths (or runs' results) each with their transitions: anything else would count as covering nothing.
  if (!Array.isArray(paths) || paths.some((path) => typeof path !== 'object' || path === null || !Array.isArray(path.transitions))) {
    throw new FactstateError('TESTING_INVALID_OPTIONS', 'pathCoverage takes a list of paths or path runs, each with its transitions', { details: { field: 'paths' } })
  }
  const all = invocationTransitions().map((t) => t.id)
  const seen = new Set(paths.flatMap((path) => path.transitions))
  return { covered: all.filter((id) => seen.has(id)), total: all.length, missing: all.filter((id) => !seen.has(id)) }
}
