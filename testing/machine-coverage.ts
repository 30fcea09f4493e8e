/**
 * Which transitions of the real invocation machine a fact sequence takes. The transitions are
 * read from the machine definition itself (every guarded candidate of every `on` event, and
 * every eventless `always` candidate), so coverage is measured against the machine as it is,
 * not against a list someone keeps by hand.
 */
import type { Fact } from '../facts/types.js'
import {
  type InvocationSnapshot,
  type InvocationState,
  applyFact,
  initialInvocationSnapshot,
  invocationMachine,
  stateOf,
} from '../machines/invocation.js'

/** One transition of the invocation machine. */
export interface MachineTransition {
  /** `source --event[guard]--> target`, e.g. `safePoint --invocation.ended[completes]--> ended`. */
  id: string
  /** The state the transition leaves. */
  source: InvocationState
  /** The fact type, or `always` for an eventless transition. */
  event: string
  /** The target state (the source itself for a transition without a target). */
  target: InvocationState
  /** The guard's name, or null for a transition without one. */
  guard: string | null
}

type Definition = (typeof invocationMachine.root.always & object)[number]

function guardName(definition: Definition): string | null {
  const guard = definition.guard as unknown
  if (guard === undefined || guard === null) return null
  if (typeof guard === 'string') return guard
  if (typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') return guard.type
  return 'inline'
}

function describe(definition: Definition, event: string): MachineTransition {
  const source = definition.source.key as InvocationState
  const target = (definition.target?.[0]?.key ?? source) as InvocationState
  const guard = guardName(definition)
  return { id: `${source} --${event}${guard ? `[${guard}]` : ''}--> ${target}`, source, event, target, guard }
}

let catalog: { all: MachineTransition[]; byDefinition: Map<Definition, MachineTransition> } | undefined

function transitionCatalog() {
  if (catalog) return catalog
  const all: MachineTransition[] = []
  const byDefinition = new Map<Definition, MachineTransition>()
  for (const node of Object.values(invocationMachine.root.states)) {
    for (const [event, definitions] of node.transitions) {
      for (const definition of definitions) {
        const described = describe(definition, event)
        all.push(described)
        byDefinition.set(definition, described)
      }
    }
    for (const definition of node.always ?? []) {
      const described = describe(definition, 'always')
      all.push(described)
      byDefinition.set(definition, described)
    }
  }
  catalog = { all, byDefinition }
  return catalog
}

/**
 * Every transition of the invocation machine: each guarded candidate of each state's `on`
 * events, and each `always` candidate.
 *
 * @example
 * ```ts
 * import { invocationTransitions } from 'factstate/testing'
 * invocationTransitions().map((t) => t.id)
 * // ['opening --invocation.opened--> safePoint', 'safePoint --model.requested[mayRequest]--> awaitingModel', ...]
 * ```
 */
export function invocationTransitions(): MachineTransition[] {
  return transitionCatalog().all.map((transition) => ({ ...transition }))
}

/**
 * The transitions one fact takes from `snapshot` (its `on` candidate, then any `always` that
 * fires), and the next snapshot. `MACHINE_REJECTED` if the machine does not accept the fact.
 */
export function stepTransitions(snapshot: InvocationSnapshot, fact: Fact): { next: InvocationSnapshot; taken: string[] } {
  const { byDefinition } = transitionCatalog()
  const next = applyFact(snapshot, fact)
  const taken: string[] = []
  const [definition] = invocationMachine.getTransitionData(snapshot, fact)
  if (!definition) return { next, taken }
  const first = byDefinition.get(definition as Definition)
  if (first) taken.push(first.id)
  const intermediate = (definition.target?.[0]?.key ?? definition.source.key) as InvocationState
  const final = stateOf(next)
  if (final !== intermediate) {
    const node = invocationMachine.root.states[intermediate]
    const eventless = (node?.always ?? []).find((candidate) => (candidate.target?.[0]?.key ?? intermediate) === final)
    const described = eventless ? byDefinition.get(eventless as Definition) : undefined
    if (described) taken.push(described.id)
  }
  return { next, taken }
}

/**
 * Folds one invocation's facts through the machine and returns the transitions taken, in order
 * (`MACHINE_REJECTED` if the machine refuses a fact).
 *
 * @example
 * ```ts
 * const facts = prefix.events.filter((e) => e.event.invocation.invocationId === id).map((e) => e.event.fact)
 * transitionsOf(facts) // ['opening --invocation.opened--> safePoint', ...]
 * ```
 */
export function transitionsOf(facts: Iterable<Fact>): string[] {
  let snapshot = initialInvocationSnapshot()
  const taken: string[] = []
  for (const fact of facts) {
    const step = stepTransitions(snapshot, fact)
    taken.push(...step.taken)
    snapshot = step.next
  }
  return taken
}
