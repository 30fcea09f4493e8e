import { FactstateError } from '../errors.js'
import { shown } from '../options.js'
import { cutText as cut, messageOf } from '../store/encoding.js'
/**
 * Rebuilds the model transcript from facts. Replay never executes: settled tools are read back
 * as their recorded outcomes, rejected calls as errors, and calls the log cannot vouch for as
 * "outcome unknown".
 */
import type { Fact, RuntimeEvent, StoredEvent, ToolOutcome, UncertainOperation } from '../facts/types.js'
import type { ChatMessage } from './model-client.js'
import { argumentsOf, isUnusableArguments } from './tool-arguments.js'

/** A call as the note names it: with the input it was dispatched with, where the fact records it. */
const namedCall = (op: UncertainOperation) => `${op.name}${op.input === undefined ? '' : ` with ${JSON.stringify(op.input)}`} (operation ${op.operationId})`

const unknownNote = (ops: UncertainOperation[]) =>
  `Note: in an earlier run of this session, these tool calls were dispatched but their outcome is unknown: ` +
  `${ops.map(namedCall).join(', ')}. Their effects may or may not have happened; ` +
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
  /**
   * The current step's tool calls not yet in the messages, in the order the model made them, each
   * with its answer once it has one. A call is tied to the operation dispatched for it, so a call id
   * the model reuses (across steps, or twice in one step) is answered for its own operation. The
   * tool messages follow the calls' order, not the order their answers came in: calls run side by
   * side (`toolConcurrency`) settle in any order, and the next request is the same whatever it was.
   */
  #unanswered: { callId: string; operationId?: string; readOnly?: boolean; answer?: string }[] = []
  /** The system prompt of the invocation last opened: a run's own setting, not part of the history it replays. */
  #instructions: string | undefined


  /** Adds the messages `event`'s fact contributes. */
  push({ fact }: RuntimeEvent): void {
    switch (fact.type) {
      case 'invocation.opened':
        this.#instructions = fact.execution.instructions
        if (fact.input.kind !== 'handoff' && fact.input.priorUnknown?.length) {
          // First in the request, even for a continuation (whose lineage's messages are in already): many
          // chat templates and providers refuse a system message anywhere else. One leading system
          // message: a note the lineage began with takes this one after it.
          const note = unknownNote(fact.input.priorUnknown)
          const first = this.#messages[0]
          if (first?.role === 'system') this.#messages[0] = { role: 'system', content: `${first.content ?? ''}\n\n${note}` }
          else this.#messages.unshift({ role: 'system', content: note })
        }
        // A message run's question, a continuation's next message after the lineage it replays, or what a
        // successor was told of its paused turn after the sealed transcript (none: the sealed request as it was).
        if (fact.input.content !== undefined) this.#messages.push({ role: 'user', content: fact.input.content })
        break
      case 'model.completed': {
        this.#closeUnanswered()
        const calls = fact.output.toolCalls
        if (calls.length === 0) {
          // A final answer that is empty or blank (a filtered one, whose run ended `model_filtered`, is one) says nothing,
          // and a continuation must not end its request with it: some providers refuse empty assistant content, others
          // continue it as a prefix. The same test as the actor's for a filtered answer (`text.trim() === ''`).
          // Opaque provider state goes back only when recorded: a request of a run without it keeps its bytes.
          if (fact.output.text?.trim()) {
            this.#messages.push({ role: 'assistant', content: fact.output.text, ...(fact.output.reasoningDetails ? { reasoning_details: fact.output.reasoningDetails } : {}) })
          }
        } else {
          this.#messages.push({
            role: 'assistant',
            content: fact.output.text ?? null,
            tool_calls: calls.map((call) => ({
              id: call.callId,
              type: 'function',
              function: { name: call.name, arguments: replayedArguments(call.arguments) },
              // Gemini answers 400 to a replayed call without its thought signature.
              ...(call.extraContent ? { extra_content: call.extraContent } : {}),
            })),
            // DeepSeek's thinking mode answers 400 to a tool round whose reasoning is not sent back; only what a provider returned is.
            ...(fact.output.reasoning ? { reasoning_content: fact.output.reasoning } : {}),
            // OpenRouter's reasoning models (Anthropic's, Gemini's) want their reasoning_details back with the calls.
            ...(fact.output.reasoningDetails ? { reasoning_details: fact.output.reasoningDetails } : {}),
          })
          this.#unanswered = calls.map((call) => ({ callId: call.callId }))
        }
        break
      }
      case 'tool.dispatched': {
        const call = this.#unanswered.find((slot) => slot.callId === fact.callId && slot.operationId === undefined && slot.answer === undefined)
        if (call) {
          call.operationId = fact.operationId
          if (fact.readOnly === true) call.readOnly = true
        }
        break
      }
      case 'tool.settled': {
        const call = this.#unanswered.find((slot) => slot.operationId === fact.operationId && slot.answer === undefined)
        if (call) this.#answer(call, outcomeText(fact.outcome))
        break
      }
      case 'tool.rejected': {
        const call = this.#unanswered.find((slot) => slot.callId === fact.callId && slot.operationId === undefined && slot.answer === undefined)
        if (call) this.#answer(call, rejectionText(fact))
        break
      }
      case 'invocation.ended':
        this.#closeUnanswered()
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

  /**
   * The messages so far (a copy: the builder goes on). The system prompt of the invocation last
   * opened leads them, in the one leading system message a note of unknown outcomes also goes in.
   */
  messages(): ChatMessage[] {
    const instructions = this.#instructions
    if (instructions === undefined) return [...this.#messages]
    const [first, ...rest] = this.#messages
    if (first?.role === 'system') return [{ role: 'system', content: `${instructions}\n\n${first.content}` }, ...rest]
    return [{ role: 'system', content: instructions }, ...this.#messages]
  }

  #answer(call: { callId: string; operationId?: string; answer?: string }, content: string): void {
    // Callers find `call` among the unanswered slots; one answered already keeps its first answer.
    if (call.answer !== undefined) return
    call.answer = content
    // The answered calls at the front go into the messages; one still running holds back those after it.
    let answered = 0
    for (const slot of this.#unanswered) {
      if (slot.answer === undefined) break
      this.#messages.push({ role: 'tool', tool_call_id: slot.callId, content: slot.answer })
      answered += 1
    }
    if (answered > 0) this.#unanswered = this.#unanswered.slice(answered)
  }

  /**
   * Answers what is left of the step: a dispatched call's outcome is unknown (a read-only tool's had
   * no effect, and its result is lost), any other call never ran.
   */
  #closeUnanswered(): void {
    for (const call of [...this.#unanswered]) {
      if (call.answer !== undefined) continue
      this.#answer(
        call,
        call.operationId === undefined
          ? 'error: this call was never executed'
          : call.readOnly
            ? `result lost: read-only operation ${call.operationId} was dispatched but never settled; it has no side effect, so it can be called again`
            : `outcome unknown: operation ${call.operationId} was dispatched but never settled; its effect may or may not have happened`,
      )
    }
  }
}

/**
 * A call's arguments as the next request replays them: the text the model sent when it is a JSON
 * object, else `{}`. Servers that turn the history back into their own form parse it (Ollama answers
 * 400 "invalid tool call arguments", vLLM and LiteLLM fail on it too), so replaying text that is not
 * JSON (single quotes, a trailing comma, a code fence, a call cut by the token limit), or none at all
 * (`""`, which ran as `{}`), would refuse every later request of the session. The tool message of a
 * call refused for such text quotes it, so the model still sees what it sent.
 */
function replayedArguments(text: string): string {
  try {
    const value: unknown = JSON.parse(text)
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) return text
  } catch {
    // Replayed as `{}` below.
  }
  return '{}'
}

/** How much of the arguments the model sent a tool message quotes when they were not replayed as sent. */
const SENT_QUOTED = 1_000

/** Why arguments kept as the text the model sent were refused (`undefined` if that text is not at hand). */
function unusableArguments(input: unknown): string | undefined {
  if (typeof input !== 'string') return undefined
  const taken = argumentsOf(input)
  return 'unusable' in taken ? taken.unusable : undefined
}

/**
 * `text` as a clause before "; it was not run": a full stop at its end (a schema check's message,
 * an approver's reason) is dropped, so the model is not told "….; it was not run". An ellipsis stays.
 */
function clause(text: string): string {
  return /[^.]\.$/.test(text) ? text.slice(0, -1) : text
}

const clauseOf = (text: string | undefined): string | undefined => (text === undefined ? undefined : clause(text))

/** What the model is told of a call that was never run. */
function rejectionText(fact: Extract<Fact, { type: 'tool.rejected' }>): string {
  switch (fact.reason) {
    case 'unknown_tool':
      return `error: there is no tool named "${fact.name}"; it was not run`
    case 'invalid_input': {
      // Arguments kept as text are told their reason found again from that text, as before their fact
      // recorded it (in words that are the same on every Node): the request stays byte for byte the same.
      if (fact.message !== undefined && !isUnusableArguments(fact)) return `error: the arguments for "${fact.name}" do not match its input schema: ${clause(fact.message)}; it was not run`
      // Text the next request does not replay as sent (see `replayedArguments`) is quoted here instead.
      const sent = typeof fact.input === 'string' && replayedArguments(fact.input) !== fact.input ? fact.input : undefined
      const quoted = sent === undefined ? '' : `. The arguments sent were: ${cut(sent, SENT_QUOTED)}`
      return `error: the arguments for "${fact.name}" ${
        clauseOf(unusableArguments(fact.input)) ??
        'are not valid JSON, or hold what cannot be stored exactly (a "__proto__" key, more than 65,535 members in one object, nesting more than 62 levels deep, a number beyond a double\'s range such as 1e400, a string with a lone surrogate)'
      }; it was not run${quoted}`
    }
    case 'denied':
      return `error: the call to "${fact.name}" was denied by its approver${fact.approval?.reason ? `: ${clause(fact.approval.reason)}` : ''}; it was not run`
    case 'cancelled':
      return `error: the call to "${fact.name}" was cancelled before it ran`
  }
}

/**
 * The chat messages of the facts in `events` (a lineage followed by the invocation's own facts), in order.
 *
 * @example
 * ```ts
 * const messages = transcriptOf(await log.invocationEvents(running.invocation.invocationId))
 * ```
 */
export function transcriptOf(events: readonly (RuntimeEvent | StoredEvent)[]): ChatMessage[] {
  const builder = new TranscriptBuilder()
  // Stored events as `log.invocationEvents` and `log.events` give them, or their events.
  for (const event of eventsOf(events, 'transcriptOf')) builder.push(event)
  return builder.messages()
}

/**
 * The events of `events` (stored ones unwrapped), each with a fact: what is not a list of events is
 * `LOG_INVALID_ARGUMENT` naming `call`, not a `TypeError` from inside it.
 */
function eventsOf(events: unknown, call: string): RuntimeEvent[] {
  const refuse = (why: string, cause?: unknown) =>
    new FactstateError('LOG_INVALID_ARGUMENT', `${call} takes a list of events, as log.invocationEvents gives them: ${why}`, cause === undefined ? {} : { cause })
  try {
    if (!Array.isArray(events)) throw refuse(`not ${shown(events)}`)
    // By index, not map: map skips the holes of a sparse list, which would reach the builder unchecked.
    const checked: RuntimeEvent[] = []
    for (let index = 0; index < events.length; index += 1) {
      const item: unknown = events[index]
      const event = item !== null && typeof item === 'object' && 'event' in item ? (item as StoredEvent).event : item
      const fact = event !== null && typeof event === 'object' ? (event as { fact?: unknown }).fact : undefined
      if (fact === null || typeof fact !== 'object' || typeof (fact as { type?: unknown }).type !== 'string') throw refuse(`item ${index} is not an event with a fact`)
      checked.push(event as RuntimeEvent)
    }
    return checked
  } catch (error) {
    if (error instanceof FactstateError) throw error
    throw refuse(`it cannot be read (${messageOf(error)})`, error)
  }
}

/**
 * The text of the model's final answer in one invocation's facts (as `log.invocationEvents` gives
 * them, or their events): that of its last `model.completed` without tool calls (`''` for an answer
 * with none), or `undefined` when the model gave none (a run that failed, was cancelled or was sealed
 * before its final answer).
 *
 * @example
 * ```ts
 * const reply = answerOf(await log.invocationEvents(running.invocation.invocationId))
 * ```
 */
export function answerOf(events: readonly (RuntimeEvent | StoredEvent)[]): string | undefined {
  const checked = eventsOf(events, 'answerOf')
  for (let index = checked.length - 1; index >= 0; index -= 1) {
    const { fact } = checked[index] as RuntimeEvent
    if (fact.type === 'model.completed') return fact.output.toolCalls.length === 0 ? (fact.output.text ?? '') : undefined
  }
  return undefined
}

/**
 * The token counts of a run's answers, summed: what `usageOf` gives. `cachedInputTokens` and
 * `reasoningTokens` are counted within `inputTokens` and `outputTokens`, as in `ModelUsage`.
 */
export interface UsageTotals {
  /** The answers read: the `model.completed` facts. */
  answers: number
  /**
   * Of them, those whose `usage` lacks `inputTokens` or `outputTokens` (or that have no `usage`: a
   * stream not asked for it, a provider that reports none). While it is above 0 the sums below are
   * what was reported, short of what was spent.
   */
  unreported: number
  /**
   * Model requests that ended `model.interrupted` (a failure, a timeout, a cancel, a stream cut short)
   * rather than answered: a provider may bill them (the prompt, and what it streamed), and no count
   * is recorded for them. While it is above 0 the sums are short of what was spent too.
   */
  interrupted: number
  /** The sum of the answers' `inputTokens`. */
  inputTokens: number
  /** The sum of the answers' `outputTokens`. */
  outputTokens: number
  /** The sum of the answers' `cachedInputTokens` (0 where none reported them). */
  cachedInputTokens: number
  /** The sum of the answers' `reasoningTokens` (0 where none reported them). */
  reasoningTokens: number
}

/**
 * The token counts the answers in `events` reported (their `model.completed` facts' `output.usage`),
 * summed, with how many answers there were, how many did not report both counts and how many
 * requests were interrupted instead of answered: a total is never silently short. Takes what `answerOf` takes: one invocation's facts, as
 * `log.invocationEvents` gives them, or their events (or any list of them: a session's, a lineage's,
 * several runs' together: a supervisor's and its children's, each run's own facts, never their
 * lineages, which hold the runs they continue).
 *
 * @example
 * ```ts
 * const { inputTokens, outputTokens, unreported } = usageOf(await log.invocationEvents(invocationId))
 * ```
 */
export function usageOf(events: readonly (RuntimeEvent | StoredEvent)[]): UsageTotals {
  const totals: UsageTotals = { answers: 0, unreported: 0, interrupted: 0, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 }
  for (const { fact } of eventsOf(events, 'usageOf')) {
    if (fact.type === 'model.interrupted') totals.interrupted += 1
    if (fact.type !== 'model.completed') continue
    totals.answers += 1
    const usage = fact.output?.usage
    const count = (value: number | undefined) => (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined)
    const input = count(usage?.inputTokens)
    const output = count(usage?.outputTokens)
    if (input === undefined || output === undefined) totals.unreported += 1
    totals.inputTokens += input ?? 0
    totals.outputTokens += output ?? 0
    totals.cachedInputTokens += count(usage?.cachedInputTokens) ?? 0
    totals.reasoningTokens += count(usage?.reasoningTokens) ?? 0
  }
  return totals
}
