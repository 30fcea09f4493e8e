/** Draws the laid-out statechart as SVG and highlights a moment of an invocation on it. */
import type { Chart, ChartEdge, ChartState, Point } from '../protocol.js'
import { replaceChildren, svg } from './dom.js'

/** What to highlight: the state after the selected fact, the one before, and how it got there. */
export interface ChartMoment {
  current: string | null
  previous: string | null
  /** Edges (`source->target`) taken by the selected fact, each with the event that took it. */
  taken: { edge: string; event: string }[]
  /** States and edges visited before the selected fact. */
  visitedStates: Set<string>
  visitedEdges: Set<string>
}

/** The selected run, for the states' names: how many of its facts passed through each state. */
export interface ChartRun {
  runId: string
  /** State → the facts that took the machine into it or left it there. */
  passes: ReadonlyMap<string, number>
}

export interface ChartView {
  highlight(moment: ChartMoment): void
  /** Names each state after `run` (null: no run selected). */
  describe(run: ChartRun | null): void
}

/**
 * The smallest scale the chart is drawn at: its states' 16 px names then read at 12 px. A panel
 * narrower than that scrolls the chart rather than shrinking it further.
 */
const MIN_SCALE = 0.75

/** States in reading order (top to bottom, then left to right), the order the arrow keys move in. */
const readingOrder = (a: ChartState, b: ChartState) => a.y - b.y || a.x - b.x

/** A B-spline through dagre's points (the curve dagre-d3 draws). */
function curve(points: readonly Point[]): string {
  const f = (n: number) => Math.round(n * 10) / 10
  if (points.length < 3) return points.map((p, i) => `${i === 0 ? 'M' : 'L'}${f(p.x)},${f(p.y)}`).join(' ')
  const parts: string[] = []
  let x0 = Number.NaN
  let y0 = Number.NaN
  let x1 = Number.NaN
  let y1 = Number.NaN
  const bezier = (x: number, y: number) =>
    parts.push(`C${f((2 * x0 + x1) / 3)},${f((2 * y0 + y1) / 3)} ${f((x0 + 2 * x1) / 3)},${f((y0 + 2 * y1) / 3)} ${f((x0 + 4 * x1 + x) / 6)},${f((y0 + 4 * y1 + y) / 6)}`)
  points.forEach(({ x, y }, index) => {
    if (index === 0) parts.push(`M${f(x)},${f(y)}`)
    else if (index === 2) {
      parts.push(`L${f((5 * x0 + x1) / 6)},${f((5 * y0 + y1) / 6)}`)
      bezier(x, y)
    } else if (index > 2) bezier(x, y)
    x0 = x1
    y0 = y1
    x1 = x
    y1 = y
  })
  bezier(x1, y1)
  parts.push(`L${f(x1)},${f(y1)}`)
  return parts.join(' ')
}

function marker(id: string, className: string): SVGMarkerElement {
  return svg(
    'marker',
    { attrs: { id, viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' } },
    svg('path', { class: className, attrs: { d: 'M0,0 L10,5 L0,10 z' } }),
  )
}

function edgeLabel(edge: ChartEdge): SVGGElement | null {
  if (!edge.label || edge.events.length === 0) return null
  const { x, y, width, height } = edge.label
  const text = svg('text', { attrs: { x: String(x), 'text-anchor': 'middle' } })
  edge.events.forEach(({ event }, index) => {
    text.appendChild(svg('tspan', { class: 'ev', attrs: { x: String(x), y: String(y - height / 2 + 3 + 11.5 + index * 15) }, data: { event } }, event))
  })
  const tooltip = edge.events.map(({ event, guards }) => (guards.length > 0 ? `${event} [${guards.join(' | ')}]` : event)).join('\n')
  return svg(
    'g',
    { class: 'edge-label', data: { edge: edge.id } },
    svg('title', {}, `${edge.source} → ${edge.target}\n${tooltip}`),
    svg('rect', { attrs: { x: String(x - width / 2), y: String(y - height / 2), width: String(width), height: String(height), rx: '4' } }),
    text,
  )
}

/** Renders `chart` into `container`. */
export function renderChart(container: HTMLElement, chart: Chart): ChartView {
  const pad = 6
  const root = svg('svg', {
    class: 'statechart',
    attrs: {
      viewBox: `${-pad} ${-pad} ${chart.width + 2 * pad} ${chart.height + 2 * pad}`,
      role: 'group',
      'aria-label': 'The invocation statechart: the arrow keys move across its states',
    },
  })
  // Set through the style object, which the page's Content-Security-Policy allows (a style attribute it would not).
  root.style.minWidth = `${Math.round((chart.width + 2 * pad) * MIN_SCALE)}px`
  root.style.minHeight = `${Math.round((chart.height + 2 * pad) * MIN_SCALE)}px`
  root.appendChild(svg('defs', {}, marker('arrow', 'arrowhead'), marker('arrow-trail', 'arrowhead-trail'), marker('arrow-taken', 'arrowhead-taken')))
  const edgeLayer = svg('g', { class: 'edges' })
  const labelLayer = svg('g', { class: 'labels' })
  const stateLayer = svg('g', { class: 'states' })
  const edges = new Map<string, SVGGElement>()
  const labels = new Map<string, SVGGElement>()
  const states = new Map<string, SVGGElement>()
  for (const edge of chart.edges) {
    const path = svg('path', { attrs: { d: curve(edge.points), 'marker-end': 'url(#arrow)' } })
    const group = svg('g', { class: 'edge', data: { edge: edge.id } }, path)
    edges.set(edge.id, group)
    edgeLayer.appendChild(group)
    if (edge.source === null) {
      const start = edge.points[0]
      if (start) stateLayer.appendChild(svg('circle', { class: 'initial', attrs: { cx: String(start.x), cy: String(start.y), r: '6' } }))
    }
    const label = edgeLabel(edge)
    if (label) {
      labels.set(edge.id, label)
      labelLayer.appendChild(label)
    }
  }
  const order = [...chart.states].sort(readingOrder)
  for (const state of order) {
    const x = state.x - state.width / 2
    const y = state.y - state.height / 2
    const group = svg(
      'g',
      // One state is in the tab order at a time (the one last focused, the first at start); the arrows move across them.
      { class: `state${state.final ? ' final' : ''}`, data: { state: state.id }, attrs: { tabindex: order[0] === state ? '0' : '-1', role: 'img', 'aria-label': state.final ? `${state.id} (final)` : state.id } },
      svg('title', {}, state.final ? `${state.id} (final)` : state.id),
      svg('rect', { class: 'outer', attrs: { x: String(x), y: String(y), width: String(state.width), height: String(state.height), rx: '10' } }),
      state.final
        ? svg('rect', { class: 'inner', attrs: { x: String(x + 4), y: String(y + 4), width: String(state.width - 8), height: String(state.height - 8), rx: '7' } })
        : null,
      svg('text', { attrs: { x: String(state.x), y: String(state.y) } }, state.id),
    )
    states.set(state.id, group)
    stateLayer.appendChild(group)
  }
  root.append(edgeLayer, labelLayer, stateLayer)
  replaceChildren(container, root)

  const groups = order.map((state) => states.get(state.id) as SVGGElement)
  root.addEventListener('keydown', (event) => {
    const from = groups.indexOf((event.target as Element | null)?.closest?.('g.state') as SVGGElement)
    const step = event.key === 'ArrowRight' || event.key === 'ArrowDown' ? 1 : event.key === 'ArrowLeft' || event.key === 'ArrowUp' ? -1 : 0
    if (from < 0 || step === 0) return
    event.preventDefault()
    const next = groups[(from + step + groups.length) % groups.length] as SVGGElement
    for (const group of groups) group.setAttribute('tabindex', group === next ? '0' : '-1')
    next.focus()
  })

  let run: ChartRun | null = null
  let current: string | null = null
  const name = () => {
    for (const state of chart.states) {
      const group = states.get(state.id) as SVGGElement
      const passes = run?.passes.get(state.id) ?? 0
      const label = [
        state.final ? `${state.id} (final)` : state.id,
        run === null ? '' : `: ${passes} fact${passes === 1 ? '' : 's'} of ${run.runId} passed through it`,
        state.id === current ? ' · the state after the selected fact' : '',
      ].join('')
      group.setAttribute('aria-label', label)
      const title = group.querySelector('title')
      if (title) title.textContent = label
    }
  }

  return {
    describe(given) {
      run = given
      name()
    },
    highlight(moment) {
      current = moment.current
      name()
      for (const [id, group] of states) {
        group.classList.toggle('current', id === moment.current)
        group.classList.toggle('previous', id === moment.previous && id !== moment.current)
        group.classList.toggle('visited', moment.visitedStates.has(id))
      }
      const takenEdges = new Set(moment.taken.map((t) => t.edge))
      for (const [id, group] of edges) {
        const taken = takenEdges.has(id)
        const trail = !taken && moment.visitedEdges.has(id)
        group.classList.toggle('taken', taken)
        group.classList.toggle('trail', trail)
        group.querySelector('path')?.setAttribute('marker-end', taken ? 'url(#arrow-taken)' : trail ? 'url(#arrow-trail)' : 'url(#arrow)')
      }
      for (const [id, label] of labels) {
        const events = new Set(moment.taken.filter((t) => t.edge === id).map((t) => t.event))
        label.classList.toggle('taken', events.size > 0)
        for (const tspan of label.querySelectorAll<SVGTSpanElement>('tspan.ev')) tspan.classList.toggle('taken', events.has(tspan.dataset.event ?? ''))
      }
    },
  }
}
