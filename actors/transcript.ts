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

/** The chat messages of the facts in `events` (a lineage followed by the invocation's own facts), in order. */
export function transcriptOf(events: readonly RuntimeEvent[]): ChatMessage[] {
  const messages: ChatMessage[] = []
  const callOf = new Map<string, string>()
  let unanswered: string[] = []
  const answer = (callId: string, content: string) => {
    const index = unanswered.indexOf(callId)
    if (index === -1) return
    unanswered.splice(index, 1)
    messages.push({ role: 'tool', tool_call_id: callId, content })
  }
  const closeUnanswered = (why: string) => {
    for (const callId of [...unanswered]) answer(callId, why)
  }
  for (const { fact } of events) {
    switch (fact.type) {
      case 'invocation.opened':
        if (fact.input.kind !== 'handoff' && fact.input.priorUnknown?.length) {
          messages.push({ role: 'system', content: unknownNote(fact.input.priorUnknown) })
        }
        if (fact.input.kind === 'message') messages.push({ role: 'user', content: fact.input.content })
        break
      case 'model.completed': {
        closeUnanswered('error: this call was never executed')
        const calls = fact.output.toolCalls
        if (calls.length === 0) {
          messages.push({ role: 'assistant', content: fact.output.text ?? '' })
        } else {
          messages.push({
            role: 'assistant',
            content: fact.output.text ?? null,
            tool_calls: calls.map((call) => ({ id: call.callId, type: 'function', function: { name: call.name, arguments: call.arguments } })),
          })
          unanswered = calls.map((call) => call.callId)
        }
        break
      }
      case 'tool.dispatched':
        callOf.set(fact.operationId, fact.callId)
        break
      case 'tool.settled': {
        const callId = callOf.get(fact.operationId)
        if (callId !== undefined) answer(callId, outcomeText(fact.outcome))
        break
      }
      case 'tool.rejected':
        answer(
          fact.callId,
          fact.reason === 'unknown_tool'
            ? `error: there is no tool named "${fact.name}"; it was not run`
            : fact.reason === 'invalid_input'
              ? `error: the arguments for "${fact.name}" are not valid JSON; it was not run`
              : `error: the call to "${fact.name}" was cancelled before it ran`,
        )
        break
      case 'invocation.ended':
        for (const [operationId, callId] of callOf) {
          if (unanswered.includes(callId)) {
            answer(callId, `outcome unknown: operation ${operationId} was dispatched but never settled; its effect may or may not have happened`)
          }
        }
        closeUnanswered('error: this call was never executed')
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
  return messages
}
