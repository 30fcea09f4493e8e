/** How values from the log read on the page: times, statuses, and the key fields of each fact. */
import type { UsageTotals } from '../../actors/transcript.js'
import type { Fact, ModelUsage } from '../../facts/types.js'
import type { InvocationStatus, InvocationSummary } from '../protocol.js'

const pad = (n: number, width = 2) => String(n).padStart(width, '0')

/** `HH:MM:SS.mmm` in local time. */
export function clock(ms: number): string {
  const d = new Date(ms)
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`
}

/** `YYYY-MM-DD HH:MM:SS` in local time. */
export function dateTime(ms: number): string {
  const d = new Date(ms)
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

/** A short human duration. */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`
  const minutes = Math.floor(ms / 60_000)
  if (minutes < 60) return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`
}

/** `sha256:abcd…wxyz` */
export function shortDigest(digest: string): string {
  const [scheme, hex] = digest.includes(':') ? (digest.split(':', 2) as [string, string]) : ['', digest]
  return hex.length > 16 ? `${scheme ? `${scheme}:` : ''}${hex.slice(0, 8)}…${hex.slice(-6)}` : digest
}

/** One line of at most `max` characters. */
export function preview(value: unknown, max = 90): string {
  const text = (typeof value === 'string' ? value : JSON.stringify(value) ?? String(value)).replace(/\s+/g, ' ').trim()
  return text.length > max ? `${text.slice(0, max - 1)}…` : text
}

/** Pretty JSON, or the string itself. */
export function pretty(value: unknown): string {
  return typeof value === 'string' ? value : (JSON.stringify(value, null, 2) ?? String(value))
}

export const STATUS_LABEL: Record<InvocationStatus, string> = {
  completed: 'completed',
  paused: 'paused',
  failed: 'failed',
  cancelled: 'cancelled',
  running: 'running',
  open: 'open',
  interrupted: 'interrupted',
}

/**
 * How a run's status reads: a sealed run (`paused`) whose successor has started is `handed off`,
 * its turn carried on by that successor; `paused` is kept for one whose successor has not started.
 * `tone` is the colour class (`s-<tone>`).
 */
export function statusLook(summary: { status: InvocationStatus; successor: { exists: boolean } | null }): { label: string; tone: string } {
  if (summary.status === 'paused' && summary.successor?.exists === true) return { label: 'handed off', tone: 'handed-off' }
  return { label: STATUS_LABEL[summary.status], tone: summary.status }
}

/**
 * How a tool call dispatched and not settled reads, by its run's status: in flight while a process
 * may still settle it (`running`, `open`), uncertain once none can (the run ended, or a crash left it
 * and recovery will record its outcome unknown). A read-only tool had no effect to be unsure of.
 */
export function unsettledFlag(status: InvocationStatus, readOnly: boolean): { kind: 'in-flight' | 'uncertain'; warn: boolean; label: string } {
  if (status === 'running') return { kind: 'in-flight', warn: false, label: 'not settled yet — the tool is running' }
  if (status === 'open') return { kind: 'in-flight', warn: false, label: 'not settled yet — running in the process that has the log open, or left by a crash' }
  if (status === 'interrupted') {
    return { kind: 'uncertain', warn: true, label: readOnly ? '⚠ never settled — a crash left it; read-only, its result is lost' : '⚠ never settled — a crash left it; recovery will record its outcome unknown' }
  }
  return { kind: 'uncertain', warn: true, label: readOnly ? '⚠ never settled — read-only, result lost' : '⚠ never settled — outcome unknown' }
}

/**
 * The words a run's status reads as, which the run filter matches besides its ids and tools: its
 * status and label (`handed off`), and its outcome's (`handoff_paused`, a failure's class such as
 * `max_steps`, a cancel's source). The server's filter takes the same words (catalog.ts).
 */
export function statusWords(summary: Pick<InvocationSummary, 'status' | 'outcome'> & { successor: { exists: boolean } | null }): string[] {
  const { outcome } = summary
  const words = [summary.status, statusLook(summary).label]
  if (outcome?.status === 'handoff_paused') words.push(outcome.status)
  if (outcome?.status === 'failed') words.push(outcome.class)
  if (outcome?.status === 'cancelled') words.push(outcome.source)
  return words
}

/**
 * The words a session's flag reads as (the list's pill), which the run filter matches for each of its
 * runs too: `unanswered`, `awaiting its successor`, `open: left by a crash`, and `needs attention` for
 * any of them. The server's filter takes the same words (catalog.ts).
 */
export function attentionWords(attention: 'open' | 'paused' | 'unanswered' | null): string[] {
  if (attention === 'open') return ['open: left by a crash', 'open: running, or crashed?', 'needs attention']
  if (attention === 'paused') return ['paused', 'awaiting its successor', 'needs attention']
  if (attention === 'unanswered') return ['unanswered', 'needs attention']
  return []
}

/** The status of a summary with its outcome detail, e.g. `failed · outcome_unknown`. */
export function statusDetail(summary: InvocationSummary): string {
  const outcome = summary.outcome
  if (!outcome) {
    if (summary.status === 'interrupted') return 'open, no live actor — recovery will close it'
    if (summary.status === 'open') return `in ${summary.state}, in the process that has the log open`
    return `in ${summary.state}`
  }
  switch (outcome.status) {
    case 'completed':
      return 'answered without tool calls'
    case 'handoff_paused':
      return `sealed by a handoff (handoffId ${outcome.pause.intent.handoffId})${summary.successor?.exists === true ? ' · its successor has started' : ' · awaiting its successor'}`
    case 'failed':
      return `failed · ${outcome.class}${outcome.message ? ` — ${outcome.message}` : ''}`
    case 'cancelled':
      return `cancelled by ${outcome.source}`
  }
}

// These two are the CLI's too (store/fact-summary.ts takes them from here): the page loads only its own modules.

/** One answer's token counts: `1234 in (1000 cached), 56 out (20 reasoning)`, counts not reported left out; `''` for none. */
export function usageText(usage: ModelUsage | undefined): string {
  if (usage === undefined) return ''
  const part = (total: number | undefined, within: number | undefined, label: string, withinLabel: string) =>
    total === undefined && within === undefined ? [] : [`${total ?? '?'} ${label}${within === undefined ? '' : ` (${within} ${withinLabel})`}`]
  return [...part(usage.inputTokens, usage.cachedInputTokens, 'in', 'cached'), ...part(usage.outputTokens, usage.reasoningTokens, 'out', 'reasoning')].join(', ')
}

/**
 * A run's token totals (`usageOf` of its facts): `3 answers, tokens 1234 in (1000 cached), 56 out (20
 * reasoning)`; `at least …`, saying what is missing, when some answers reported no counts or some
 * requests were interrupted (a provider may bill those, and nothing records their counts), so a
 * partial total never reads as whole; `3 answers, tokens not reported` when none did; `no answers`
 * for a run without one.
 */
export function usageTotalsText(totals: UsageTotals): string {
  const { answers, unreported, interrupted, inputTokens, outputTokens, cachedInputTokens, reasoningTokens } = totals
  const uncounted = interrupted > 0 ? `${interrupted} interrupted request${interrupted === 1 ? '' : 's'} not counted` : ''
  if (answers === 0) return uncounted === '' ? 'no answers' : `no answers (${uncounted})`
  const counted = `${answers} answer${answers === 1 ? '' : 's'}`
  if (unreported === answers && inputTokens === 0 && outputTokens === 0) return `${counted}, tokens not reported${uncounted === '' ? '' : ` (${uncounted})`}`
  const counts = `${inputTokens} in${cachedInputTokens > 0 ? ` (${cachedInputTokens} cached)` : ''}, ${outputTokens} out${reasoningTokens > 0 ? ` (${reasoningTokens} reasoning)` : ''}`
  const missing = [...(unreported > 0 ? [`usage missing from ${unreported}`] : []), ...(uncounted === '' ? [] : [uncounted])]
  return missing.length === 0 ? `${counted}, tokens ${counts}` : `${counted}, tokens at least ${counts} (${missing.join('; ')})`
}

/** The colour family of a fact type. */
export function family(type: Fact['type']): 'invocation' | 'model' | 'tool' | 'hold' {
  return type.slice(0, type.indexOf('.')) as 'invocation' | 'model' | 'tool' | 'hold'
}

/** A key field shown in a timeline row. */
export interface Field {
  k?: string
  v: string
  mono?: boolean
  /** The whole text when `v` is cut (shown on hover). */
  full?: string
  /** A status that went wrong (failed, rejected, denied): shown apart from the others. */
  bad?: boolean
}

/** `preview(value, max)` as a field, keeping the whole text when it was cut. */
function cut(value: unknown, max: number, field: Omit<Field, 'v' | 'full'> = {}): Field {
  const v = preview(value, max)
  const full = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value))
  return { ...field, v, ...(full !== v ? { full } : {}) }
}

/** A fact's key fields as one line of plain text, nothing cut: what a row shows on hover. */
export function fieldsText(fields: readonly Field[]): string {
  return fields.map((field) => `${field.k ? `${field.k} ` : ''}${field.full ?? field.v}`).join(' · ')
}

/**
 * The key fields of a fact, in the order they read best: what a row cuts at its end comes last.
 * `toolName` names the tool of a `tool.settled` (its fact has only the operation id).
 */
export function keyFields(fact: Fact, toolName?: string): Field[] {
  switch (fact.type) {
    case 'invocation.opened': {
      const { input, execution } = fact
      const first: Field =
        input.kind === 'message'
          ? { k: 'message', v: preview(input.content, 60) }
          : input.kind === 'continuation'
            ? { k: 'continues', v: `${input.source.invocation.runId} @${input.source.highWater}`, mono: true }
            : { k: 'succeeds', v: `${input.source.invocation.runId} (${input.pause.intent.handoffId})`, mono: true }
      // A continuation's new message, or what a successor was told happened while its turn was paused.
      const next: Field[] = input.kind !== 'message' && input.content !== undefined ? [{ k: 'message', v: preview(input.content, 60) }] : []
      return [first, ...next, { k: 'model', v: execution.model, mono: true }, { k: 'tools', v: execution.tools.names.join(', ') || 'none', mono: true }]
    }
    case 'model.requested':
      return [{ v: fact.stepId, mono: true }, { k: 'model', v: fact.model, mono: true }, { k: 'body', v: shortDigest(fact.requestDigest), mono: true }]
    case 'model.completed': {
      const { output } = fact
      const fields: Field[] = [{ v: fact.stepId, mono: true }, { k: 'finish', v: output.finishReason, mono: true }]
      const tokens = usageText(output.usage)
      // Before the text, which the row cuts.
      if (tokens !== '') fields.push({ k: 'tokens', v: tokens, mono: true })
      if (output.toolCalls.length > 0) fields.push({ k: 'calls', v: output.toolCalls.map((call) => call.name).join(', '), mono: true })
      if (output.text) fields.push({ k: 'text', v: preview(output.text, 60) })
      return fields
    }
    case 'model.interrupted':
      return [{ v: fact.stepId, mono: true }, { k: 'status', v: fact.status, mono: true }, ...(fact.message ? [{ v: preview(fact.message, 60) }] : [])]
    case 'tool.dispatched':
      return [
        { v: fact.name, mono: true },
        ...(fact.readOnly ? [{ v: 'read-only' }] : []),
        ...(fact.approval ? [{ k: 'approved by', v: fact.approval.by ?? 'the approver' }] : []),
        cut(fact.input, 48, { k: 'input', mono: true }),
        { k: 'op', v: fact.operationId, mono: true },
      ]
    case 'tool.settled': {
      const { outcome } = fact
      return [
        ...(toolName === undefined ? [] : [{ v: toolName, mono: true }]),
        { v: outcome.status, mono: true, bad: outcome.status !== 'succeeded' },
        outcome.status === 'succeeded' ? cut(outcome.output, 48, { k: 'output', mono: true }) : cut(outcome.message, 60),
        { k: 'op', v: fact.operationId, mono: true },
      ]
    }
    case 'tool.rejected':
      return [
        { v: fact.name, mono: true },
        { k: 'rejected', v: fact.reason, mono: true, bad: true },
        ...(fact.approval?.by ? [{ k: 'by', v: fact.approval.by }] : []),
        ...(fact.approval?.reason ? [cut(fact.approval.reason, 60)] : []),
        ...(fact.message ? [cut(fact.message, 60)] : []),
        { k: 'op', v: fact.operationId, mono: true },
      ]
    case 'hold.entered':
    case 'hold.released':
      return [{ k: 'handoff', v: fact.handoffId, mono: true }]
    case 'invocation.ended': {
      const { outcome } = fact
      switch (outcome.status) {
        case 'completed':
          return [{ v: 'completed', mono: true }]
        case 'handoff_paused':
          return [
            { v: 'handoff_paused', mono: true },
            { k: 'successor', v: outcome.pause.intent.successorRunId, mono: true },
            { k: 'steps left', v: String(outcome.pause.remainingSteps), mono: true },
          ]
        case 'failed':
          return [{ v: 'failed', mono: true }, { k: 'class', v: outcome.class, mono: true }, ...(outcome.message ? [{ v: preview(outcome.message, 60) }] : [])]
        case 'cancelled':
          return [{ v: 'cancelled', mono: true }, { k: 'by', v: outcome.source, mono: true }]
      }
    }
  }
}

/** The expandable payloads of a fact: model text, tool input and output, the whole fact. */
export function payloads(fact: Fact): { label: string; text: string; kind: string }[] {
  const list: { label: string; text: string; kind: string }[] = []
  switch (fact.type) {
    case 'invocation.opened':
      if (fact.execution.instructions !== undefined) {
        list.push({ label: `instructions (${fact.execution.instructions.length} chars)`, text: fact.execution.instructions, kind: 'instructions' })
      }
      if (fact.input.content !== undefined) list.push({ label: 'message', text: fact.input.content, kind: 'message' })
      break
    case 'model.completed':
      if (fact.output.text) list.push({ label: `model text (${fact.output.text.length} chars)`, text: fact.output.text, kind: 'model-text' })
      for (const call of fact.output.toolCalls) list.push({ label: `${call.name} arguments`, text: call.arguments, kind: 'tool-call' })
      {
        const tokens = usageText(fact.output.usage)
        const { responseId } = fact.output
        const lines = [...(tokens === '' ? [] : [`tokens: ${tokens}`]), ...(responseId === undefined ? [] : [`response id: ${responseId}`])]
        if (lines.length > 0) {
          const label = tokens === '' ? 'response id' : responseId === undefined ? 'tokens' : 'tokens and response id'
          list.push({ label, text: lines.join('\n'), kind: 'usage' })
        }
      }
      break
    case 'tool.dispatched':
      list.push({ label: 'tool input', text: pretty(fact.input), kind: 'tool-input' })
      break
    case 'tool.rejected':
      list.push({ label: 'tool input', text: pretty(fact.input), kind: 'tool-input' })
      break
    case 'tool.settled':
      list.push(
        fact.outcome.status === 'succeeded'
          ? { label: 'tool output', text: pretty(fact.outcome.output), kind: 'tool-output' }
          : { label: `tool ${fact.outcome.status}`, text: fact.outcome.message, kind: 'tool-output' },
      )
      break
    default:
      break
  }
  list.push({ label: 'raw fact', text: JSON.stringify(fact, null, 2), kind: 'raw' })
  return list
}
