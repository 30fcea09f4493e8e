/** The fact timeline of one invocation: one row per fact, its payloads expandable, rows selectable. */
import type { CallLink, InvocationDetail, TimelineEntry } from '../protocol.js'
import { el, replaceChildren } from './dom.js'
import type { InvocationStatus } from '../protocol.js'
import { callButton } from './invocation-view.js'
import { clock, family, fieldsText, keyFields, payloads, unsettledFlag } from './format.js'

export interface TimelineOptions {
  /** The selected fact, or null when following the latest. */
  selectedSeq: number | null
  /** Seqs that just arrived (briefly highlighted). */
  fresh: ReadonlySet<number>
  /** Payloads the reader has opened, kept open across re-renders (`<seq>:<kind>:<index>`). */
  open: Set<string>
  onSelect: (seq: number) => void
  /** Opens another run (a child run its call started). */
  onNavigate: (invocationId: string) => void
}

function row(
  entry: TimelineEntry,
  status: InvocationStatus,
  toolNames: ReadonlyMap<string, string>,
  acknowledged: ReadonlyMap<string, string>,
  children: ReadonlyMap<string, CallLink[]>,
  options: TimelineOptions,
): HTMLLIElement {
  const { fact } = entry
  const fields = keyFields(fact, fact.type === 'tool.settled' ? toolNames.get(fact.operationId) : undefined)
  const summary = el(
    'span',
    { class: 'summary' },
    // A field (its key and value) wraps as one, onto the row's second line.
    ...fields.map((field) =>
      el('span', { class: 'field' }, field.k ? el('span', { class: 'k' }, field.k) : null, el('span', { class: `v${field.mono ? ' mono' : ''}${field.bad ? ' v-bad' : ''}` }, field.v)),
    ),
  )
  const bad = fields.some((field) => field.bad === true)
  const after =
    entry.rejected !== null
      ? el('span', { class: 'after', title: entry.rejected }, el('span', { class: 'pill s-failed' }, 'refused'))
      : el('span', { class: 'after', title: entry.transitions.map((t) => `${t.source} —${t.event}→ ${t.target}`).join('\n') }, el('span', { class: 'arrow' }, '→'), entry.stateAfter)
  const button = el(
    'button',
    { class: 'entry-row', attrs: { type: 'button' }, onClick: () => options.onSelect(entry.seq) },
    el('span', { class: 'seq' }, String(entry.seq)),
    el('span', { class: `type fam-${family(fact.type)}` }, fact.type),
    after,
    // The row cuts what does not fit; its whole text is its title.
    el('span', { class: 'info', title: fieldsText(fields) }, el('span', { class: 'time', title: new Date(entry.recordedAt).toISOString() }, clock(entry.recordedAt)), summary),
  )
  const flags: HTMLElement[] = []
  if (entry.uncertain) {
    const flag = unsettledFlag(status, fact.type === 'tool.dispatched' && fact.readOnly === true)
    // Still unknown, but a later run of the session has acknowledged it: no longer waiting on anyone.
    const by = fact.type === 'tool.dispatched' && flag.kind === 'uncertain' ? acknowledged.get(fact.operationId) : undefined
    flags.push(
      by === undefined
        ? el('span', { class: flag.warn ? 'pill pill-warn' : 'pill pill-info', title: flag.label, data: { flag: flag.kind } }, flag.label)
        : el('span', { class: 'pill pill-info', title: `never settled — outcome unknown, acknowledged by ${by} (allowPriorUnknown)`, data: { flag: 'acknowledged' } }, `never settled — outcome unknown, acknowledged by ${by}`),
    )
  }
  if (fact.type === 'tool.rejected') flags.push(el('span', { class: 'pill s-cancelled' }, 'never dispatched'))
  // The call's own row links the child runs it started, as the run's header does.
  if (fact.type === 'tool.dispatched') {
    for (const child of children.get(fact.operationId) ?? []) flags.push(el('span', { class: 'child-link', data: { child: child.invocation.invocationId } }, 'started the child run', callButton(child, 'child', options.onNavigate)))
  }
  const details = payloads(fact).map((payload, index) => {
    const key = `${entry.seq}:${payload.kind}:${index}`
    const node = el('details', { class: `payload payload-${payload.kind}`, data: { payload: payload.kind } }, el('summary', {}, payload.label), el('pre', {}, payload.text))
    node.open = options.open.has(key)
    node.addEventListener('toggle', () => {
      if (node.open) options.open.add(key)
      else options.open.delete(key)
    })
    return node
  })
  return el(
    'li',
    { class: bad ? 'entry entry-bad' : 'entry', data: { seq: String(entry.seq), type: fact.type, state: entry.stateAfter, ...(bad ? { outcome: 'bad' } : {}) } },
    button,
    flags.length > 0 ? el('div', { class: 'entry-flags' }, ...flags) : null,
    el('div', { class: 'payloads' }, ...details),
  )
}

/** Renders the timeline of `detail` into `list`. */
export function renderTimeline(list: HTMLElement, detail: InvocationDetail | null, options: TimelineOptions): void {
  if (!detail) {
    replaceChildren(list, el('li', { class: 'empty' }, 'No invocation selected.'))
    return
  }
  const toolNames = new Map<string, string>()
  for (const { fact } of detail.entries) if (fact.type === 'tool.dispatched') toolNames.set(fact.operationId, fact.name)
  const acknowledged = new Map(detail.summary.acknowledged.map(({ operationId, runId }) => [operationId, runId]))
  const children = new Map<string, CallLink[]>()
  for (const child of detail.summary.children) children.set(child.operationId, [...(children.get(child.operationId) ?? []), child])
  const rows = detail.entries.map((entry) => row(entry, detail.summary.status, toolNames, acknowledged, children, options))
  replaceChildren(list, ...rows)
  markSelection(list, options.selectedSeq, options.fresh)
}

/** Updates which row is selected without rebuilding the list. */
export function markSelection(list: HTMLElement, selectedSeq: number | null, fresh: ReadonlySet<number> = new Set()): void {
  for (const item of list.querySelectorAll<HTMLLIElement>('li.entry')) {
    const seq = Number(item.dataset.seq)
    item.classList.toggle('selected', seq === selectedSeq)
    item.classList.toggle('after-selected', selectedSeq !== null && seq > selectedSeq)
    item.classList.toggle('fresh', fresh.has(seq))
    item.querySelector('.entry-row')?.setAttribute('aria-pressed', String(seq === selectedSeq))
  }
}
