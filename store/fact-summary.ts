import type { Fact, ProviderRefusal } from '../facts/types.js'
import { usageText } from '../inspector/page/format.js'

/** `text` cut to `max` characters with `…`, never between the two halves of a character (an emoji). */
export const clip = (text: string, max = 80): string => {
  if (text.length <= max) return text
  let end = max - 1
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end -= 1
  return `${text.slice(0, end)}…`
}
/**
 * JSON `text` cut as `clip` cuts it, and never inside an escape: `"RED\u001b[0m"` cut after `\u00`
 * would read as a broken escape, so the cut moves back to the escape's start.
 */
export const clipJson = (text: string, max = 80): string => {
  if (text.length <= max) return text
  let end = clip(text, max).length - 1
  for (let index = 0; index < end; index += 1) {
    if (text.charCodeAt(index) !== 0x5c) continue
    const length = text[index + 1] === 'u' ? 6 : 2
    if (index + length > end) {
      end = index
      break
    }
    index += length - 1
  }
  return `${text.slice(0, end)}…`
}
const json = (value: unknown) => clipJson(JSON.stringify(value) ?? 'null')

// C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional controls (which
// reorder what a terminal shows): a model or a tool wrote the text.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g
const escapeControl = (char: string) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`

/**
 * `text` with every control character escaped (`\u001b`), for a terminal: text from facts (a model's,
 * a tool's, whatever a direct append wrote) can neither break a line nor drive the terminal. On JSON
 * text it keeps the JSON valid and its value the same (JSON leaves C1 and bidirectional controls raw).
 */
export function escapeControls(text: string): string {
  return text.replace(CONTROL, escapeControl)
}

/** ` (code)` for a provider's refusal that named one (`context_length_exceeded`), shown beside its status: what an on-call engineer acts on. */
function refusalCode(provider: ProviderRefusal | undefined): string {
  return provider?.code === undefined ? '' : ` (${clip(provider.code)})`
}

// One answer's token counts and a run's totals read the same in the CLI and on the inspector's page,
// which loads only its own modules: the page's are the ones.
export { usageText, usageTotalsText } from '../inspector/page/format.js'

/**
 * The tools of the calls in flight, for the `tool.settled` lines `summarizeFact` names (a settle's
 * fact has only its operation id; the name is its `tool.dispatched`'s). Given each fact in seq
 * order, `note` keeps a dispatch's name until its operation settles, and gives the settle that name.
 */
export class SettledToolNames {
  readonly #names = new Map<string, string>()

  /** The tool of `fact` when it is a `tool.settled` whose dispatch was noted (or learnt), else undefined. */
  note(fact: Fact): string | undefined {
    if (fact.type === 'tool.dispatched') this.#names.set(fact.operationId, fact.name)
    else if (fact.type === 'tool.settled') {
      const name = this.#names.get(fact.operationId)
      this.#names.delete(fact.operationId)
      return name
    }
    return undefined
  }

  /** Whether the tool of `operationId` is known. */
  knows(operationId: string): boolean {
    return this.#names.has(operationId)
  }

  /** Learns the tool of a dispatch read out of order (one before where the reading began). */
  learn(operationId: string, name: string): void {
    if (!this.#names.has(operationId)) this.#names.set(operationId, name)
  }
}

/**
 * The key fields of a fact in one short line (for the CLI, logs and the inspector's timeline).
 * Control characters are escaped (`\u000a`): text a model or a tool wrote can neither break the
 * line nor drive a terminal. `toolName` names the tool of a `tool.settled`, whose fact has only
 * the operation id (the name is its `tool.dispatched`'s): `charge i-1/step-1/2 succeeded …`.
 */
export function summarizeFact(fact: Fact, toolName?: string): string {
  return escapeControls(describe(fact, toolName))
}

function describe(fact: Fact, toolName: string | undefined): string {
  switch (fact.type) {
    case 'invocation.opened': {
      const { instructions } = fact.execution
      const told = instructions === undefined ? '' : `; instructions ${clipJson(JSON.stringify(instructions), 40)}`
      const { input } = fact
      // A message or a continuation may acknowledge the outcomes a crash left unknown (allowPriorUnknown).
      const unknown = input.kind === 'handoff' ? 0 : (input.priorUnknown?.length ?? 0)
      const acknowledged = unknown > 0 ? ` (acknowledges ${unknown} unknown outcome(s))` : ''
      // A child run: the tool call of another run that started it (its session is the call's run's).
      const parent = input.kind === 'handoff' || input.parent === undefined ? '' : `, child of ${input.parent.operationId} (session ${input.parent.invocation.sessionId})`
      return input.kind === 'message'
        ? `message ${json(input.content)}${parent}${acknowledged}${told}`
        : `${input.kind} from ${input.source.invocation.runId}@${input.source.highWater}${input.content !== undefined ? `, message ${json(input.content)}` : ''}${parent}${acknowledged}${told}`
    }
    case 'model.requested':
      return `${fact.stepId} model=${fact.model}`
    case 'model.completed': {
      const tokens = usageText(fact.output.usage)
      const answered =
        fact.output.toolCalls.length > 0
          ? `${fact.stepId} calls ${fact.output.toolCalls.map((call) => `${call.name}(${clipJson(call.arguments, 40)})`).join(', ')}`
          : `${fact.stepId} text ${json(fact.output.text ?? '')}`
      return tokens === '' ? answered : `${answered} · tokens ${tokens}`
    }
    case 'model.interrupted':
      return `${fact.stepId} ${fact.status}${refusalCode(fact.provider)}${fact.message ? `: ${clip(fact.message)}` : ''}`
    case 'tool.dispatched':
      return `${fact.name}${fact.readOnly ? ' (read-only)' : ''} ${fact.operationId} input=${json(fact.input)}${fact.approval ? ` approved${fact.approval.by ? ` by ${json(fact.approval.by)}` : ''}` : ''}`
    case 'tool.settled':
      return `${toolName === undefined ? '' : `${toolName} `}${fact.operationId} ${fact.outcome.status}${fact.outcome.status === 'succeeded' ? ` ${json(fact.outcome.output)}` : `: ${clip(fact.outcome.message)}`}`
    case 'tool.rejected':
      return `${fact.name} ${fact.operationId} ${fact.reason}${fact.approval?.by ? ` by ${json(fact.approval.by)}` : ''}${fact.approval?.reason ? `: ${clip(fact.approval.reason)}` : ''}${fact.message ? `: ${clip(fact.message)}` : ''}`
    case 'hold.entered':
    case 'hold.released':
      return fact.handoffId
    case 'invocation.ended': {
      const { outcome } = fact
      switch (outcome.status) {
        case 'completed':
          return 'completed'
        case 'handoff_paused':
          return `handoff_paused → ${outcome.pause.intent.successorRunId}/${outcome.pause.intent.successorInvocationId} (${outcome.pause.remainingSteps} step(s) left)`
        case 'failed':
          return `failed ${outcome.class}${refusalCode(outcome.provider)}${outcome.message ? `: ${clip(outcome.message)}` : ''}`
        case 'cancelled':
          return `cancelled by ${outcome.source}`
      }
    }
  }
}
