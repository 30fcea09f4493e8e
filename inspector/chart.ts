/**
 * The invocation statechart as the page draws it: states and transitions read from the machine
 * definition itself, positioned by dagre. Nothing here is hand-placed, so the drawing follows
 * the machine when it changes.
 */
import dagre, { type EdgeLabel, type NodeLabel } from '@dagrejs/dagre'
import { invocationMachine } from '../machines/invocation.js'
import type { Chart, ChartEdge, ChartState, Point } from './protocol.js'

/** Label metrics matching the page's CSS (11 px monospace). */
export const LABEL_METRICS = { eventChar: 6.7, eventLine: 15, padX: 12, padY: 6 } as const
/** State boxes fit their names at the page's 16 px monospace, large enough to read with the chart scaled down to fit its panel. */
const STATE_HEIGHT = 40
const STATE_CHAR = 9.7
const STATE_PAD = 26
const INITIAL = '__initial'

interface TransitionLike {
  target?: readonly { key: string }[] | undefined
  guard?: unknown
}

interface StateNodeLike {
  key: string
  type: string
  states: Record<string, StateNodeLike>
  transitions: Map<string, readonly TransitionLike[]>
  always?: readonly TransitionLike[] | undefined
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null
  if (typeof guard === 'string') return guard
  if (typeof guard === 'function') return guard.name || 'guard'
  if (typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') return guard.type
  return 'guard'
}

/** Every transition of the machine, grouped by (source, target), in definition order. */
function edgesOf(root: StateNodeLike): Omit<ChartEdge, 'points' | 'label'>[] {
  const edges = new Map<string, Omit<ChartEdge, 'points' | 'label'>>()
  const add = (source: string, target: string, event: string, guard: string | null) => {
    const id = `${source}->${target}`
    let edge = edges.get(id)
    if (!edge) {
      edge = { id, source, target, events: [] }
      edges.set(id, edge)
    }
    let entry = edge.events.find((e) => e.event === event)
    if (!entry) {
      entry = { event, guards: [] }
      edge.events.push(entry)
    }
    if (guard !== null && !entry.guards.includes(guard)) entry.guards.push(guard)
  }
  for (const node of Object.values(root.states)) {
    for (const [event, transitions] of node.transitions) {
      for (const transition of transitions) add(node.key, transition.target?.[0]?.key ?? node.key, event, guardName(transition.guard))
    }
    for (const transition of node.always ?? []) add(node.key, transition.target?.[0]?.key ?? node.key, 'always', guardName(transition.guard))
  }
  return [...edges.values()]
}

/** Labels show fact types only (guards are in the page's tooltips), which keeps the chart compact. */
function labelSize(events: ChartEdge['events']): { width: number; height: number } {
  const m = LABEL_METRICS
  const width = Math.max(...events.map(({ event }) => event.length * m.eventChar))
  return { width: Math.ceil(width + m.padX), height: Math.ceil(events.length * m.eventLine + m.padY) }
}

/**
 * dagre reserves room for a self-transition's label beside its state but routes the loop through
 * the label itself; this draws a small loop on the state's right side with the label beyond it.
 */
function selfLoop(node: NodeLabel, label: NonNullable<ChartEdge['label']>): Pick<ChartEdge, 'points' | 'label'> {
  const x = node.x ?? 0
  const y = node.y ?? 0
  const right = x + node.width / 2
  const reach = Math.max(18, Math.min(26, label.x - label.width / 2 - right - 4))
  return {
    points: [
      { x: right, y: y - 9 },
      { x: right + reach * 0.7, y: y - 20 },
      { x: right + reach, y },
      { x: right + reach * 0.7, y: y + 20 },
      { x: right, y: y + 9 },
    ],
    label: { ...label, x: Math.max(label.x, right + reach + 6 + label.width / 2) },
  }
}

function layoutChart(): Chart {
  const root = invocationMachine.root as unknown as StateNodeLike
  const initialKey = (invocationMachine.root.initial.target[0] as { key: string } | undefined)?.key ?? null
  const graph = new dagre.graphlib.Graph({ multigraph: true })
  graph.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 46, edgesep: 10, marginx: 16, marginy: 16 })
  graph.setDefaultEdgeLabel(() => ({}))
  const states: string[] = Object.keys(root.states)
  for (const id of states) graph.setNode(id, { width: Math.round(id.length * STATE_CHAR + STATE_PAD), height: STATE_HEIGHT })
  const edges = edgesOf(root)
  if (initialKey !== null) {
    graph.setNode(INITIAL, { width: 14, height: 14 })
    graph.setEdge(INITIAL, initialKey, { width: 0, height: 0 }, `->${initialKey}`)
  }
  for (const edge of edges) {
    const size = labelSize(edge.events)
    graph.setEdge(edge.source as string, edge.target, { ...size, labelpos: 'c' }, edge.id)
  }
  dagre.layout(graph)
  const chartStates: ChartState[] = states.map((id) => {
    const node = graph.node(id)
    return {
      id,
      x: node.x ?? 0,
      y: node.y ?? 0,
      width: node.width,
      height: node.height,
      final: root.states[id]?.type === 'final',
      initial: id === initialKey,
    }
  })
  const chartEdges: ChartEdge[] = []
  if (initialKey !== null) {
    const start = graph.node(INITIAL)
    const label: EdgeLabel = graph.edge({ v: INITIAL, w: initialKey, name: `->${initialKey}` })
    chartEdges.push({
      id: `->${initialKey}`,
      source: null,
      target: initialKey,
      events: [],
      points: [{ x: start.x ?? 0, y: start.y ?? 0 }, ...(label.points ?? []).slice(1)],
      label: null,
    })
  }
  for (const edge of edges) {
    const laid: EdgeLabel = graph.edge({ v: edge.source as string, w: edge.target, name: edge.id })
    const label = laid.x === undefined || laid.y === undefined ? null : { x: laid.x, y: laid.y, width: laid.width ?? 0, height: laid.height ?? 0 }
    const node = edge.source === edge.target ? graph.node(edge.target) : undefined
    if (node && label) {
      chartEdges.push({ ...edge, ...selfLoop(node, label) })
      continue
    }
    chartEdges.push({ ...edge, points: (laid.points ?? []).map((point: Point) => ({ x: point.x, y: point.y })), label })
  }
  const size = graph.graph()
  return { width: Math.ceil(size.width ?? 0), height: Math.ceil(size.height ?? 0), states: chartStates, edges: chartEdges }
}

let cached: Chart | undefined

/** The laid-out statechart of the invocation machine (computed once per process). */
export function invocationChart(): Chart {
  cached ??= layoutChart()
  return cached
}
