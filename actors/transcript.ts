/**
 * Rebuilds the model transcript from facts. Replay never executes: settled tools are read back
 * as their recorded outcomes, rejected calls as errors, and calls the log cannot vouch for as
 * "outcome unknown".
 */
import type { RuntimeEvent, ToolOutcome, UncertainOperation } from '../facts/types.js'
import type { ChatMessage } from './model-client.js'

const unknownNote = (ops: UncertainOperation[]) =>
  `Note: in an earlier run of this session, these tool calls were dispatched but their outcome is unknown: ` +
  `${ops.map((op) => `${op.name} (operation ${op.operationId})`).join(', ')}. Their effects may or may not have happened; ` +
  `they will not be repeated automatically. Check before relying on or redoing them.`

function outcomeText(outcome: ToolOutcome): string {
  switch (outcome.status) {
    case 'succeeded':
      return typeof outcome.output === 'string' ? outcome.output : JSON.stringify(outcome.output ?? null)
    case 'failed':
      return `error: ${outcome.message}`
    case 'unknown':
      return `outcome unknown: ${outcome.message}`
  }
}

/**
 * Builds the chat messages of a lineage fact by fact. The actor keeps one per invocation and
 * feeds it each fact it records, so a step costs what the new facts cost, not the whole history.
 */
export class TranscriptBuilder {
  readonly #messages: ChatMessage[] = []
  readonly #callOf = new Map<string, string>()
  #unanswered: string[] = []

  /** Adds the messages `event`'s fact contributes. */
  push({ fact }: RuntimeEvent): void {
    switch (fact.type) {
      case 'invocation.opened':
        if (fact.input.kind !== 'handoff' && fact.input.priorUnknown?.length) {
          this.#messages.push({ role: 'system', content: unknownNote(fact.input.priorUnknown) })
        }
        if (fact.input.kind === 'message') this.#messages.push({ role: 'user', content: fact.input.content })
        break
      case 'model.completed': {
        this.#closeUnanswered('error: this call was never executed')
        const calls = fact.output.toolCalls
        if (calls.length === 0) {
          this.#messages.push({ role: 'assistant', content: fact.output.text ?? '' })
        } else {
          this.#messages.push({
            role: 'assistant',
            content: fact.output.text ?? null,
            tool_calls: calls.map((call) => ({ id: call.callId, type: 'function', function: { name: call.name, arguments: call.arguments } })),
          })
          this.#unanswered = calls.map((call) => call.callId)
        }
        break
      }
      case 'tool.dispatched':
        this.#callOf.set(fact.operationId, fact.callId)
        break
      case 'tool.settled': {
        const callId = this.#callOf.get(fact.operationId)
        if (callId !== undefined) this.#answer(callId, outcomeText(fact.outcome))
        break
      }
      case 'tool.rejected':
        this.#answer(
          fact.callId,
          fact.reason === 'unknown_tool'
            ? `error: there is no tool named "${fact.name}"; it was not run`
            : fact.reason === 'invalid_input'
              ? `error: the arguments for "${fact.name}" are not valid JSON; it was not run`
              : `error: the call to "${fact.name}" was cancelled before it ran`,
        )
        break
      case 'invocation.ended':
        for (const [operationId, callId] of this.#callOf) {
          if (this.#unanswered.includes(callId)) {
            this.#answer(callId, `outcome unknown: operation ${operationId} was dispatched but never settled; its effect may or may not have happened`)
          }
        }
        this.#closeUnanswered('error: this call was never executed')
        break
      case 'model.requested':
      case 'model.interrupted':
      case 'hold.entered':
      case 'hold.released':
        break
      default: {
        const never: never = fact
        throw new TypeError(`unknown fact ${JSON.stringify(never)}`)
      }
    }
  }

  /** The messages so far (a copy: the builder goes on). */
  messages(): ChatMessage[] {
    return [...this.#messages]
  }

  #answer(callId: string, content: string): void {
    const index = this.#unanswered.indexOf(callId)
    if (index === -1) return
    this.#unanswered.splice(index, 1)
    this.#messages.push({ role: 'tool', tool_call_id: callId, content })
  }

  #closeUnanswered(why: string): void {
    for (const callId of [...this.#unanswered]) this.#answer(callId, why)
  }
}

/**
 * The chat messages of the facts in `events` (a lineage followed by the invocation's own facts), in order.
 *
 * @example
 * ```ts
 * const messages = transcriptOf((await log.prefix(1000, 1 << 20)).events.map((stored) => stored.event))
 * ```
 */
export function transcriptOf(events: readonly RuntimeEvent[]): ChatMessage[] {
  const builder = new TranscriptBuilder()
  for (const event of events) builder.push(event)
  return builder.messages()
}
