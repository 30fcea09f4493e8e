/**
 * The inspector page: loads the overview and the laid-out statechart, shows one invocation at a
 * time, replays a selected fact on the chart (time travel) and follows new facts live.
 */
import type { FactsLanded, InvocationDetail, Overview, VerifyReport } from '../protocol.js'
import { api } from './api.js'
import { type ChartMoment, type ChartRun, type ChartView, renderChart } from './chart-view.js'
import { byId, el, replaceChildren } from './dom.js'
import { renderInvocation } from './invocation-view.js'
import { follow } from './live.js'
import { showBackup, showLive, showLog, showVerify } from './log-status-view.js'
import { renderSessions } from './sessions-view.js'
import { markSelection, renderTimeline } from './timeline-view.js'

interface PageState {
  overview: Overview | null
  chart: ChartView | null
  selectedId: string | null
  detail: InvocationDetail | null
  /** The fact being looked at, or null to follow the latest. */
  selectedSeq: number | null
  /** The reader went to the latest fact (Latest, End): new facts of the run are scrolled into view as they land. */
  following: boolean
  filter: string
  verify: VerifyReport | null
  highWater: number
  open: Set<string>
  fresh: Set<number>
}

const state: PageState = {
  overview: null,
  chart: null,
  selectedId: null,
  detail: null,
  selectedSeq: null,
  following: false,
  filter: '',
  verify: null,
  highWater: 0,
  open: new Set(),
  fresh: new Set(),
}

function readHash(): { id: string | null; seq: number | null } {
  const params = new URLSearchParams(location.hash.slice(1))
  const seq = Number(params.get('seq'))
  return { id: params.get('invocation'), seq: Number.isSafeInteger(seq) && seq > 0 ? seq : null }
}

function writeHash(): void {
  const params = new URLSearchParams()
  if (state.selectedId) params.set('invocation', state.selectedId)
  if (state.selectedSeq !== null) params.set('seq', String(state.selectedSeq))
  history.replaceState(null, '', `#${params.toString()}`)
}

/** The chart highlight for the selected fact (or the latest one). */
function momentOf(detail: InvocationDetail, selectedSeq: number | null): ChartMoment & { index: number } {
  const { entries, initialState } = detail
  const index = selectedSeq === null ? entries.length - 1 : entries.findIndex((entry) => entry.seq === selectedSeq)
  const visitedStates = new Set<string>([initialState])
  const visitedEdges = new Set<string>([`->${initialState}`])
  for (const entry of entries.slice(0, Math.max(0, index))) {
    for (const t of entry.transitions) {
      visitedEdges.add(`${t.source}->${t.target}`)
      visitedStates.add(t.source)
      visitedStates.add(t.target)
    }
  }
  const entry = entries[index]
  if (!entry) return { index, current: initialState, previous: null, taken: [], visitedStates, visitedEdges }
  return {
    index,
    current: entry.rejected === null ? entry.stateAfter : null,
    previous: entry.transitions[0]?.source ?? null,
    taken: entry.transitions.map((t) => ({ edge: `${t.source}->${t.target}`, event: t.event })),
    visitedStates,
    visitedEdges,
  }
}

/** How many of the run's facts passed through each state: took the machine into it, or left it there. */
function passesOf(detail: InvocationDetail): ChartRun {
  const passes = new Map<string, number>()
  for (const entry of detail.entries) {
    if (entry.rejected !== null) continue
    for (const state of new Set([entry.stateAfter, ...entry.transitions.map((t) => t.target)])) passes.set(state, (passes.get(state) ?? 0) + 1)
  }
  return { runId: detail.summary.invocation.runId, passes }
}

function renderMoment(): void {
  const caption = byId('chart-caption')
  const context = byId('state-context')
  const detail = state.detail
  if (!detail) {
    state.chart?.highlight({ current: null, previous: null, taken: [], visitedStates: new Set(), visitedEdges: new Set() })
    caption.textContent = ''
    replaceChildren(context)
    return
  }
  const moment = momentOf(detail, state.selectedSeq)
  state.chart?.highlight(moment)
  const entry = detail.entries[moment.index]
  if (!entry) {
    caption.textContent = `before any fact · ${detail.initialState}`
    replaceChildren(context)
    return
  }
  const following = state.selectedSeq === null
  replaceChildren(
    caption,
    following ? 'now · ' : 'time travel · ',
    'after seq ',
    el('strong', {}, String(entry.seq)),
    ` ${entry.fact.type} → `,
    el('strong', { data: { 'current-state': entry.stateAfter } }, entry.stateAfter),
  )
  const item = (label: string, value: string) => el('span', {}, `${label} `, el('strong', {}, value))
  replaceChildren(
    context,
    item('steps used', String(entry.context.stepsUsed)),
    item('pending calls', entry.context.pendingCalls.length === 0 ? 'none' : entry.context.pendingCalls.join(', ')),
    // The machine's memory counts tool calls only: a model request in flight is its state (awaitingModel).
    // Once the run has ended, a call still in that memory never settled: its outcome is unknown, not in flight.
    entry.fact.type === 'invocation.ended' && entry.context.inflight.length > 0
      ? el('span', { class: 'context-warn', data: { context: 'never-settled' } }, 'never settled, outcome unknown ', el('strong', {}, entry.context.inflight.join(', ')))
      : item('tools in flight', entry.context.inflight.length === 0 ? 'none' : entry.context.inflight.join(', ')),
    item('hold', entry.context.holdId ?? 'none'),
    entry.rejected ? el('span', { class: 'pill s-failed', title: entry.rejected }, 'refused by the machine') : null,
    following
      ? null
      : el('button', { class: 'note-link', attrs: { type: 'button' }, data: { action: 'follow' }, onClick: () => selectSeq(null) }, 'follow latest (Esc)'),
  )
}

/** The `data-<key>` of the focused element when it is inside `container`: which row had focus before a re-render. */
function focusedData(container: HTMLElement, key: string): string | undefined {
  const focused = document.activeElement
  return focused instanceof HTMLElement && container.contains(focused) ? focused.closest<HTMLElement>(`[data-${key}]`)?.dataset[key] : undefined
}

function renderSidebar(): void {
  if (!state.overview) return
  // The list is rebuilt: the run that had focus (the one just chosen with Enter, say) keeps it.
  const focused = focusedData(byId('sessions'), 'invocation')
  const shown = renderSessions(byId('sessions'), state.overview, { selected: state.selectedId, filter: state.filter, onSelect: (id) => void selectInvocation(id) })
  const { sessions, sessionsTotal, attention } = state.overview
  const total = sessions.reduce((n, s) => n + s.turns.reduce((m, t) => m + t.runs.length, 0), 0)
  // The run count is of the sessions listed, which may be fewer than the log holds: said so.
  const listed = sessions.length < sessionsTotal ? ` · ${sessions.length} listed` : ''
  const runs = shown === total ? `${total} run${total === 1 ? '' : 's'}` : `${shown} of ${total} runs`
  showFilterResult(shown, state.overview)
  if (focused !== undefined) byId('sessions').querySelector<HTMLElement>(`button.run[data-invocation="${CSS.escape(focused)}"]`)?.focus()
  const count = byId('session-count')
  count.textContent = `${sessionsTotal} session${sessionsTotal === 1 ? '' : 's'}${listed} · ${runs}${attention > 0 ? ` · ${attention} need${attention === 1 ? 's' : ''} attention` : ''}`
  // The header keeps to one line, so a long count may be cut: its whole text is its title.
  count.title = count.textContent
}

/** How many runs the filter matches, said beside it (and to a screen reader, as a status). */
function showFilterResult(shown: number, overview: Overview): void {
  const result = byId('filter-result')
  const filter = state.filter.trim()
  result.hidden = filter === ''
  if (filter === '') {
    result.textContent = ''
    return
  }
  // The server lists the first few hundred sessions that match: runs of the others are not counted.
  const more = overview.sessionsMatching > overview.sessions.length ? ` in the ${overview.sessions.length} sessions listed of ${overview.sessionsMatching} that match` : ''
  result.textContent = shown === 0 ? `No run matches “${filter}”` : `${shown} run${shown === 1 ? ' matches' : 's match'} “${filter}”${more}`
}

/**
 * Folds the run list away (on a phone, where it sits above the run; the button shows there only).
 * It stays as the reader left it while runs are picked and facts land: only the button changes it.
 */
function setCollapsed(collapsed: boolean): void {
  const toggle = byId('sessions-toggle')
  toggle.setAttribute('aria-expanded', String(!collapsed))
  toggle.textContent = collapsed ? 'Show runs' : 'Hide runs'
  byId('sessions').closest('.sidebar')?.setAttribute('data-collapsed', String(collapsed))
}

function renderSelection(): void {
  const summary = state.detail?.summary ?? null
  const focusedSeq = focusedData(byId('timeline'), 'seq')
  renderInvocation(byId('invocation'), summary, { onNavigate: (id) => void selectInvocation(id) }, state.detail?.usage)
  renderTimeline(byId('timeline'), state.detail, {
    selectedSeq: state.selectedSeq,
    fresh: state.fresh,
    open: state.open,
    onSelect: (seq) => selectSeq(seq),
    onNavigate: (id) => void selectInvocation(id),
  })
  if (focusedSeq !== undefined) focusRow(Number(focusedSeq))
  const count = state.detail?.entries.length ?? 0
  byId('timeline-caption').textContent = state.detail ? `${count} fact${count === 1 ? '' : 's'} · click one to travel` : ''
  byId('latest-button').hidden = count === 0
  showFollowing()
  document.title = summary ? `${summary.invocation.runId} · factstate inspector` : 'factstate inspector'
  state.chart?.describe(state.detail ? passesOf(state.detail) : null)
  renderMoment()
}

function showFollowing(): void {
  byId('latest-button').setAttribute('aria-pressed', String(state.following && state.selectedSeq === null))
}

/**
 * Goes to the run's latest fact: selected as Esc does (the chart follows it), scrolled into view
 * and, when `focus`, given focus (so ↑ goes on from it); new facts of the run are then kept in view
 * as they land, until a fact is chosen.
 */
function goToLatest(focus: boolean): void {
  state.following = true
  selectSeq(null)
  const last = state.detail?.entries.at(-1)
  if (!last) return
  if (focus) focusRow(last.seq)
  byId('timeline').querySelector(`li.entry[data-seq="${last.seq}"]`)?.scrollIntoView({ block: 'nearest' })
}

function selectSeq(seq: number | null): void {
  if (seq !== null) state.following = false
  state.selectedSeq = seq
  markSelection(byId('timeline'), seq)
  renderMoment()
  showFollowing()
  writeHash()
}

/** Counts the choices of a run: only the last one's answer is shown. */
let selecting = 0

async function selectInvocation(id: string, seq: number | null = null): Promise<void> {
  const ticket = (selecting += 1)
  state.selectedId = id
  state.selectedSeq = seq
  state.following = false
  state.open.clear()
  state.fresh.clear()
  renderSidebar()
  let detail: InvocationDetail | null
  try {
    detail = await api.invocation(id)
  } catch {
    detail = null
  }
  // An earlier choice's answer (another run, or this one chosen again while it loaded: a click on
  // the run the page opens with) is dropped, so the run shown is not rendered again under the reader.
  if (ticket !== selecting) return
  state.detail = detail
  if (seq !== null && !state.detail?.entries.some((entry) => entry.seq === seq)) state.selectedSeq = null
  renderSelection()
  writeHash()
}

async function refreshOverview(): Promise<void> {
  const filter = state.filter
  const overview = await api.overview(filter)
  // A filter typed meanwhile has asked for its own overview: this one is not shown over it.
  if (filter !== state.filter) return
  state.overview = overview
  state.highWater = Math.max(state.highWater, state.overview.highWater)
  showLog(state.overview.location, state.overview.highWater, state.overview.digest)
  showBackup(state.overview.backup)
  if (state.verify) showVerify(state.verify, state.highWater)
  renderSidebar()
}

async function runVerify(force: boolean): Promise<void> {
  const button = byId<HTMLButtonElement>('verify-button')
  button.disabled = true
  showVerify('checking', state.highWater)
  try {
    state.verify = await api.verify(force)
    showVerify(state.verify, state.highWater)
  } finally {
    button.disabled = false
  }
}

let pendingIds = new Set<string>()
let pendingSeqs: number[] = []
let refreshTimer: number | undefined

async function applyLanded(): Promise<void> {
  const ids = pendingIds
  const seqs = pendingSeqs
  pendingIds = new Set()
  pendingSeqs = []
  await refreshOverview()
  if (state.selectedId && ids.has(state.selectedId)) {
    const id = state.selectedId
    const detail = await api.invocation(id)
    if (state.selectedId !== id) return
    // The row that had focus keeps it, unless it was the latest and the reader follows: then the new latest takes it.
    const previousLast = state.detail?.entries.at(-1)?.seq
    const focusedLast = previousLast !== undefined && focusedData(byId('timeline'), 'seq') === String(previousLast)
    state.detail = detail
    state.fresh = new Set(seqs)
    renderSelection()
    if (state.following && state.selectedSeq === null) goToLatest(focusedLast)
  }
}

function onFacts(landed: FactsLanded): void {
  state.highWater = Math.max(state.highWater, landed.highWater)
  for (const event of landed.events) {
    pendingIds.add(event.invocationId)
    pendingSeqs.push(event.seq)
  }
  clearTimeout(refreshTimer)
  refreshTimer = window.setTimeout(() => {
    applyLanded().catch(() => undefined)
  }, 120)
}

/**
 * Each (re)connection of the live stream starts from the log's high-water: facts that landed while
 * the page was not listening (a dropped connection, a restarted inspector, the moment between the
 * first overview and the stream) are fetched now rather than with the next fact.
 */
function onHello(highWater: number): void {
  if (highWater === state.overview?.highWater) return
  state.highWater = Math.max(state.highWater, highWater)
  if (state.selectedId) pendingIds.add(state.selectedId)
  clearTimeout(refreshTimer)
  refreshTimer = window.setTimeout(() => {
    applyLanded().catch(() => undefined)
  }, 0)
}

/** Moves focus to the row of fact `seq`, if it is shown. */
function focusRow(seq: number): void {
  byId('timeline').querySelector<HTMLElement>(`li.entry[data-seq="${seq}"] .entry-row`)?.focus()
}

function onKey(event: KeyboardEvent): void {
  const target = event.target as HTMLElement | null
  if (target && (target.tagName === 'INPUT' || target.tagName === 'TEXTAREA')) return
  const entries = state.detail?.entries ?? []
  if (event.key === 'Escape') {
    selectSeq(null)
    return
  }
  if (event.key === 'End' && entries.length > 0 && !(target && byId('sessions').contains(target))) {
    event.preventDefault()
    goToLatest(true)
    return
  }
  if ((event.key !== 'ArrowDown' && event.key !== 'ArrowUp') || entries.length === 0) return
  // In the run list the arrows scroll it, on the chart they move across its states; they travel through facts anywhere else.
  if (target && (byId('sessions').contains(target) || byId('chart').contains(target))) return
  event.preventDefault()
  // From the fact that has focus, else from the one selected, else from the latest.
  const focusedSeq = focusedData(byId('timeline'), 'seq')
  const from = focusedSeq !== undefined ? Number(focusedSeq) : state.selectedSeq
  const current = from === null ? entries.length - 1 : entries.findIndex((entry) => entry.seq === from)
  const next = Math.min(entries.length - 1, Math.max(0, current + (event.key === 'ArrowDown' ? 1 : -1)))
  const entry = entries[next]
  if (!entry) return
  selectSeq(entry.seq)
  if (focusedSeq !== undefined) focusRow(entry.seq)
  document.querySelector(`li.entry[data-seq="${entry.seq}"]`)?.scrollIntoView({ block: 'nearest' })
}

/** A skip link moves focus to its target without changing the address (which holds the selection). */
function onSkip(event: MouseEvent): void {
  const link = (event.target as HTMLElement | null)?.closest<HTMLElement>('[data-skip]')
  if (!link) return
  event.preventDefault()
  const target = byId(link.dataset.skip ?? '')
  target.scrollIntoView({ block: 'start' })
  target.focus({ preventScroll: true })
}

async function start(): Promise<void> {
  const [overview, chart] = await Promise.all([api.overview(), api.machine()])
  state.chart = renderChart(byId('chart'), chart)
  state.overview = overview
  state.highWater = overview.highWater
  showLog(overview.location, overview.highWater, overview.digest)
  showBackup(overview.backup)
  showLive(false, overview)
  byId('boot').hidden = true
  let filterTimer: number | undefined
  byId<HTMLInputElement>('filter').addEventListener('input', (event) => {
    state.filter = (event.target as HTMLInputElement).value
    // The runs listed are filtered at once; the server is then asked for every session that
    // matches, since the page holds only the first few hundred of a busy log.
    renderSidebar()
    clearTimeout(filterTimer)
    filterTimer = window.setTimeout(() => void refreshOverview().catch(() => undefined), 150)
  })
  byId('verify-button').addEventListener('click', () => void runVerify(true))
  byId('latest-button').addEventListener('click', () => goToLatest(true))
  byId('sessions-toggle').addEventListener('click', (event) => setCollapsed((event.currentTarget as HTMLElement).getAttribute('aria-expanded') === 'true'))
  document.addEventListener('keydown', onKey)
  for (const link of document.querySelectorAll<HTMLElement>('[data-skip]')) link.addEventListener('click', onSkip)
  follow({ onFacts, onHello, onConnection: (connected) => showLive(connected, state.overview ?? null) })
  renderSidebar()
  const wanted = readHash()
  const first = overview.sessions[0]?.turns.at(-1)?.runs.at(-1)?.invocation.invocationId ?? null
  if (wanted.id || first) await selectInvocation((wanted.id ?? first) as string, wanted.id ? wanted.seq : null)
  else renderSelection()
  await runVerify(false)
}

start().catch((error: unknown) => {
  const boot = byId('boot')
  boot.hidden = false
  boot.textContent = `The inspector could not load: ${(error as Error)?.message ?? String(error)}`
})
