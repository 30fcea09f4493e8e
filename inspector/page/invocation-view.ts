/** The header of the selected invocation: ids, status, counts, run links and warnings. */
import type { UsageTotals } from '../../actors/transcript.js'
import type { CallLink, InvocationSummary, RunLink } from '../protocol.js'
import { el, replaceChildren } from './dom.js'
import { dateTime, duration, statusDetail, statusLook, usageTotalsText } from './format.js'

export interface InvocationOptions {
  onNavigate: (invocationId: string) => void
}

function linkButton(link: RunLink, role: string, options: InvocationOptions): HTMLButtonElement {
  return el(
    'button',
    {
      class: 'note-link',
      title: link.exists ? `open ${link.invocationId}` : `${link.invocationId} is not in the log yet`,
      attrs: { type: 'button', ...(link.exists ? {} : { disabled: '' }) },
      data: { link: role, target: link.invocationId },
      onClick: () => options.onNavigate(link.invocationId),
    },
    `${role === 'source' || role === 'continues' ? '←' : '→'} ${link.runId}`,
  )
}

/**
 * A button to the other end of a tool call that started a child run: the parent run, or a child. One
 * the index dropped still opens (read from the log), and says it is not in the index.
 */
export function callButton(link: CallLink, role: 'parent' | 'child', onNavigate: (invocationId: string) => void): HTMLButtonElement {
  const target = link.invocation.invocationId
  const title = link.dropped
    ? `open ${target} (session ${link.invocation.sessionId}): not in the inspector's index (its session was dropped past maxIndexed), read from the log`
    : link.exists
      ? `open ${target} (session ${link.invocation.sessionId})`
      : `${target} (session ${link.invocation.sessionId}) is not in this log's index`
  return el(
    'button',
    {
      class: 'note-link',
      title,
      attrs: { type: 'button', ...(link.exists ? {} : { disabled: '' }) },
      data: { link: role, target, operation: link.operationId, ...(link.dropped ? { indexed: 'false' } : {}) },
      onClick: () => onNavigate(target),
    },
    `${role === 'parent' ? '←' : '→'} ${link.invocation.sessionId}/${link.invocation.runId}`,
    link.dropped ? el('span', { class: 'link-note' }, '· not in the index') : null,
  )
}

function stat(label: string, value: string, props: { title?: string; data?: Record<string, string> } = {}): HTMLElement {
  return el('div', { class: 'stat', ...props }, el('dt', {}, label), el('dd', {}, value))
}

/** The run's token totals, with what a partial one lacks said on hover. */
function usageStat(usage: UsageTotals): HTMLElement {
  const partial = (usage.unreported > 0 && usage.unreported < usage.answers) || (usage.interrupted > 0 && usage.answers > 0)
  const interrupted = usage.interrupted > 0 ? `; ${usage.interrupted} request(s) ended model.interrupted, which a provider may bill and nothing counts, so the sums are short of what was spent` : ''
  const title =
    usage.answers === 0
      ? `no model.completed fact yet${interrupted}`
      : `the output.usage of its model.completed facts, summed${usage.unreported > 0 ? `; ${usage.unreported} of them reported no input or output count, so the sums are short of what was spent` : ''}${interrupted}; cached and reasoning tokens are counted within in and out`
  return stat('usage', usageTotalsText(usage), { title, data: { usage: partial ? 'partial' : usage.unreported > 0 ? 'unreported' : usage.answers === 0 ? 'none' : 'reported' } })
}

/** Renders `summary` (or a hint when nothing is selected) into `section`. */
export function renderInvocation(section: HTMLElement, summary: InvocationSummary | null, options: InvocationOptions, usage?: UsageTotals): void {
  if (!summary) {
    replaceChildren(section, el('div', { class: 'empty' }, 'Select a run on the left to see its statechart and its facts.'))
    return
  }
  const { invocation } = summary
  const notes: HTMLElement[] = []
  if (summary.source) {
    const handoff = summary.source.kind === 'handoff'
    notes.push(
      el(
        'div',
        { class: 'note' },
        el('span', { class: 'note-label' }, handoff ? 'Successor of' : 'Continues'),
        linkButton(summary.source, handoff ? 'source' : 'continues', options),
        el('span', {}, handoff ? 'resumed from its sealed pause' : 'replays its facts as history'),
      ),
    )
  }
  if (summary.successor) {
    notes.push(
      el(
        'div',
        { class: 'note' },
        el('span', { class: 'note-label' }, 'Sealed by a handoff; successor'),
        linkButton(summary.successor, 'successor', options),
        summary.successor.exists
          ? null
          : el(
              'span',
              { title: new Date(summary.lastAt).toISOString(), data: { sealed: String(summary.lastAt) } },
              `has not started yet (the turn waits for it) · sealed ${dateTime(summary.lastAt)}, ${duration(Date.now() - summary.lastAt)} ago`,
            ),
      ),
    )
  }
  if (summary.parent) {
    notes.push(
      el(
        'div',
        { class: 'note', data: { parent: summary.parent.operationId } },
        el('span', { class: 'note-label' }, 'Child run of'),
        callButton(summary.parent, 'parent', options.onNavigate),
        el('span', {}, 'started by its call '),
        el('span', { class: 'mono' }, summary.parent.operationId),
      ),
    )
  }
  for (const child of summary.children) {
    notes.push(
      el(
        'div',
        { class: 'note', data: { child: child.invocation.invocationId } },
        el('span', { class: 'note-label' }, 'Call'),
        el('span', { class: 'mono' }, child.operationId),
        el('span', {}, 'started the child run'),
        callButton(child, 'child', options.onNavigate),
      ),
    )
  }
  for (const link of summary.continuedBy) {
    notes.push(el('div', { class: 'note' }, el('span', { class: 'note-label' }, 'Continued by'), linkButton(link, 'continued-by', options)))
  }
  const settledLater = summary.status !== 'running' && summary.status !== 'open' && summary.status !== 'interrupted'
  const acknowledgedBy = new Map(summary.acknowledged.map((ack) => [ack.operationId, ack]))
  if (summary.uncertain.length > 0 && settledLater && summary.uncertain.every((op) => acknowledgedBy.has(op))) {
    // Still unknown, but a later run of the session has taken that on: no longer a warning.
    const runs = [...new Map(summary.acknowledged.map((ack) => [ack.invocationId, ack])).values()]
    notes.push(
      el(
        'div',
        { class: 'note', data: { flag: 'acknowledged' } },
        el('span', { class: 'note-label' }, 'Outcome unknown:'),
        el('span', { class: 'mono' }, summary.uncertain.join(', ')),
        el('span', {}, '— dispatched, never settled; it may or may not have taken effect. Acknowledged by'),
        ...runs.map((ack) => linkButton({ kind: 'continuation', runId: ack.runId, invocationId: ack.invocationId, exists: true }, 'acknowledged-by', options)),
        el('span', {}, '(allowPriorUnknown)'),
      ),
    )
  } else if (summary.uncertain.length > 0) {
    notes.push(
      el(
        'div',
        { class: summary.status === 'running' || summary.status === 'open' ? 'note' : 'note note-warn', data: { flag: summary.status === 'running' || summary.status === 'open' ? 'in-flight' : 'uncertain' } },
        el('span', { class: 'note-label' }, summary.status === 'running' ? 'Tool in flight:' : summary.status === 'open' ? 'Not settled yet:' : '⚠ Outcome unknown:'),
        el('span', { class: 'mono' }, summary.uncertain.join(', ')),
        el(
          'span',
          {},
          summary.status === 'running'
            ? ''
            : summary.status === 'open'
              ? '— running in the process that has the log open, or left by a crash it has not recovered'
              : '— dispatched, never settled; it may or may not have taken effect and is never replayed',
        ),
      ),
    )
  }
  if (summary.status === 'open') {
    notes.push(
      el(
        'div',
        { class: 'note' },
        el('span', { class: 'note-label' }, 'Open in another process:'),
        el('span', {}, 'this is a snapshot of a log another process has open; that process may be running this invocation, or a crash left it there until that process recovers'),
      ),
    )
  }
  if (summary.status === 'interrupted') {
    notes.push(
      el('div', { class: 'note note-warn' }, el('span', { class: 'note-label' }, '⚠ Open with no live actor:'), el('span', {}, 'a crash left it; recoverInvocations will close it')),
    )
  }
  if (summary.machineError) {
    notes.push(el('div', { class: 'note note-bad' }, el('span', { class: 'note-label' }, 'The log contradicts the machine:'), el('span', {}, summary.machineError)))
  }
  replaceChildren(
    section,
    el(
      'div',
      { class: 'invocation-title' },
      el('h1', { data: { 'invocation-title': invocation.invocationId } }, invocation.runId),
      el('span', { class: `pill s-${statusLook(summary).tone}`, data: { status: summary.status } }, statusLook(summary).label),
      el('span', { class: 'state-name' }, statusDetail(summary)),
    ),
    el(
      'dl',
      { class: 'ids' },
      el('div', {}, el('dt', {}, 'session'), el('dd', { title: invocation.sessionId }, invocation.sessionId)),
      el('div', {}, el('dt', {}, 'turn'), el('dd', { title: invocation.turnId }, invocation.turnId)),
      el('div', {}, el('dt', {}, 'run'), el('dd', { title: invocation.runId }, invocation.runId)),
      el('div', {}, el('dt', {}, 'invocation'), el('dd', { title: invocation.invocationId }, invocation.invocationId)),
    ),
    el(
      'dl',
      { class: 'stats' },
      stat('started as', summary.inputKind),
      stat('state', summary.state),
      stat('steps', String(summary.steps)),
      stat('facts', String(summary.facts)),
      usage === undefined ? null : usageStat(usage),
      stat('seq', `${summary.firstSeq}–${summary.lastSeq}`),
      stat('opened', dateTime(summary.openedAt)),
      stat('span', duration(summary.lastAt - summary.openedAt)),
      // An open run that has written nothing for a while is how a stuck one shows.
      summary.outcome === null ? stat('last fact', `${duration(Date.now() - summary.lastAt)} ago`) : null,
    ),
    notes.length > 0 ? el('div', { class: 'notes' }, ...notes) : null,
  )
}
