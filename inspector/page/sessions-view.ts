/** The sidebar: sessions → turns → runs (one invocation each), with status, steps and run links. */
import type { InvocationSummary, Overview, SessionView } from '../protocol.js'
import { el, replaceChildren } from './dom.js'
import { attentionWords, dateTime, statusLook, statusWords, unsettledFlag } from './format.js'

export interface SessionsOptions {
  selected: string | null
  filter: string
  onSelect: (invocationId: string) => void
}

/** What the filter looks in, as the server's does (`Catalog.sessions`): the run's ids, its tools' names and its status words. */
function matches(filter: string, session: SessionView, run: InvocationSummary): boolean {
  if (filter === '') return true
  const { sessionId, turnId, runId, invocationId } = run.invocation
  return [sessionId, turnId, runId, invocationId, session.sessionId, ...run.tools, ...statusWords(run), ...attentionWords(session.attention)].some((text) => text.toLowerCase().includes(filter))
}

/** What a filter that matches nothing means: no run of the log, as far as the filter looks. */
const NO_MATCH =
  "in its session, turn, run or invocation id, its tools' names, its status (completed, failed, handed off, max_steps, …) or its session's flag (unanswered, awaiting its successor, needs attention), in any session of the log; a session the index dropped is found by its exact session or invocation id only"

/** Operations dispatched and not settled: in flight while a process may still settle them, uncertain once none can. */
function sidebarFlag(run: InvocationSummary): HTMLElement {
  const flag = unsettledFlag(run.status, false)
  const acknowledged = new Set(run.acknowledged.map((ack) => ack.operationId))
  if (flag.warn && run.uncertain.every((op) => acknowledged.has(op))) {
    const by = [...new Set(run.acknowledged.map((ack) => ack.runId))].join(', ')
    return el('span', { class: 'flag flag-calm', title: `operations dispatched and never settled, acknowledged by ${by} (allowPriorUnknown)`, data: { flag: 'acknowledged' } }, `${run.uncertain.length} unknown · acknowledged`)
  }
  return el(
    'span',
    { class: flag.warn ? 'flag' : 'flag flag-calm', title: flag.warn ? 'operations dispatched and never settled' : 'tool calls dispatched and not settled yet', data: { flag: flag.kind } },
    flag.warn ? `⚠ ${run.uncertain.length} uncertain` : `${run.uncertain.length} in flight`,
  )
}

function runButton(run: InvocationSummary, options: SessionsOptions): HTMLButtonElement {
  const look = statusLook(run)
  // A sealed run's last fact is its seal: it has waited since then.
  const awaiting = run.status === 'paused' && run.successor?.exists === false
  const meta = el(
    'span',
    { class: 'run-meta' },
    el('span', {}, `${run.steps} step${run.steps === 1 ? '' : 's'}`),
    el('span', {}, `${run.facts} facts`),
    run.source ? el('span', { class: 'run-link', title: `${run.source.kind} of ${run.source.invocationId}` }, `← ${run.source.runId}`) : null,
    run.successor ? el('span', { class: 'run-link', title: `successor ${run.successor.invocationId}` }, `→ ${run.successor.runId}`) : null,
    ...run.continuedBy.map((link) => el('span', { class: 'run-link', title: `continued by ${link.invocationId}` }, `⇢ ${link.runId}`)),
    awaiting ? el('span', { title: `sealed at ${new Date(run.lastAt).toISOString()}: its successor has not started since`, data: { sealed: String(run.lastAt) } }, `sealed ${dateTime(run.lastAt)}`) : null,
    run.uncertain.length > 0 ? sidebarFlag(run) : null,
    run.failedCalls > 0 ? el('span', { class: 'flag flag-bad', title: 'tool calls that settled failed (or unknown)', data: { flag: 'failed-calls' } }, `${run.failedCalls} failed call${run.failedCalls === 1 ? '' : 's'}`) : null,
    run.rejectedCalls > 0 ? el('span', { class: 'flag flag-bad', title: 'tool calls rejected before dispatch: an unknown tool, invalid input, denied by the approver, or cancelled', data: { flag: 'rejected-calls' } }, `${run.rejectedCalls} rejected call${run.rejectedCalls === 1 ? '' : 's'}`) : null,
    run.machineError ? el('span', { class: 'flag', title: run.machineError }, '⚠ contradicts machine') : null,
  )
  const button = el(
    'button',
    {
      class: 'run',
      title: `${run.invocation.invocationId} — ${look.label}`,
      attrs: { type: 'button', 'aria-current': String(run.invocation.invocationId === options.selected) },
      data: { invocation: run.invocation.invocationId, status: run.status },
      onClick: () => options.onSelect(run.invocation.invocationId),
    },
    el('span', { class: `status-dot s-${look.tone}`, attrs: { 'aria-hidden': 'true' } }),
    el('span', { class: 'run-id' }, run.invocation.runId),
    el('span', { class: `pill s-${look.tone}` }, look.label),
    meta,
  )
  return button
}

/** Renders the session tree into `nav`; returns how many runs are shown. */
export function renderSessions(nav: HTMLElement, overview: Overview, options: SessionsOptions): number {
  const filter = options.filter.trim().toLowerCase()
  let shown = 0
  const blocks: HTMLElement[] = []
  for (const session of overview.sessions) {
    const turns: HTMLElement[] = []
    let runs = 0
    for (const turn of session.turns) {
      const buttons = turn.runs.filter((run) => matches(filter, session, run)).map((run) => runButton(run, options))
      if (buttons.length === 0) continue
      runs += buttons.length
      turns.push(el('div', { class: 'turn', data: { turn: turn.turnId } }, el('div', { class: 'turn-head', title: turn.turnId }, turn.turnId), ...buttons))
    }
    if (turns.length === 0) continue
    shown += runs
    const reconcile =
      session.reconciliation.length > 0
        ? el(
            'span',
            {
              class: 'pill pill-warn',
              title: `A new message must acknowledge these unknown outcomes (allowPriorUnknown):\n${session.reconciliation.map((op) => `${op.name} ${op.operationId}`).join('\n')}`,
              data: { flag: 'reconciliation' },
            },
            `⚠ needs reconciliation · ${session.reconciliation.length} unknown`,
          )
        : null
    const sessionRuns = session.turns.flatMap((turn) => turn.runs)
    const attention =
      session.attention === 'open'
        ? sessionRuns.some((run) => run.status === 'interrupted')
          ? el('span', { class: 'pill pill-warn', title: 'A run of this session is open and no process has the log open: a crash left it. recoverInvocations (the next open of the log by the application) will close it.', data: { flag: 'open-crashed' } }, '⚠ open: left by a crash')
          : el(
              'span',
              {
                class: 'pill pill-info',
                title: 'A run of this session is open, and another process has the log open: that process may be running it, or it crashed there and has not recovered it yet. A snapshot cannot tell which.',
                data: { flag: 'open' },
              },
              'open: running, or crashed?',
            )
        : session.attention === 'paused'
        ? el('span', { class: 'pill pill-info', title: 'A run of this session is sealed by a handoff and its successor has not started: the turn waits for it.', data: { flag: 'awaiting-successor' } }, 'awaiting its successor')
        : session.attention === 'unanswered'
          ? el('span', { class: 'pill pill-info', title: 'The last run of this session ended failed or cancelled: its message has no answer yet (factstate pending --unanswered).', data: { flag: 'unanswered' } }, 'unanswered')
          : null
    const restored = session.restored
      ? el(
          'span',
          {
            class: 'pill pill-warn',
            title: 'The log was put back from a backup, and this session has not run since it was taken: what it did after that is not in the log. Its next run must acknowledge that (allowRestored).',
            data: { flag: 'restored' },
          },
          '⚠ not run since the backup',
        )
      : null
    blocks.push(
      el(
        'section',
        { class: 'session', data: { session: session.sessionId } },
        el(
          'div',
          { class: 'session-head' },
          el('span', { class: 'session-id', title: session.sessionId }, session.sessionId),
          el('span', { class: 'session-meta' }, `seq ${session.firstSeq}–${session.lastSeq}`),
        ),
        reconcile || restored || attention ? el('div', { class: 'session-flags' }, reconcile, restored, attention) : null,
        ...turns,
      ),
    )
  }
  if (blocks.length === 0) {
    replaceChildren(
      nav,
      el('div', { class: 'empty', data: { empty: overview.sessionsTotal === 0 ? 'log' : 'no-match' } }, overview.sessionsTotal === 0 ? 'The log holds no invocations yet.' : `No run matches “${options.filter.trim()}” ${NO_MATCH}.`),
    )
  } else {
    const more =
      overview.sessionsMatching > overview.sessions.length
        ? el(
            'div',
            { class: 'more' },
            `showing ${overview.sessions.length} of the ${overview.sessionsMatching} sessions${overview.match === null ? '' : ' that match'}: ` +
              `${overview.attention > 0 ? 'those that need attention first, then ' : ''}the most recently active; type an id in the filter to find any other`,
          )
        : null
    replaceChildren(nav, ...blocks, more)
  }
  return shown
}
