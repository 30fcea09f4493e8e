/**
 * A tool call's arguments, as the model sent them (JSON text), taken as the call's input, or why
 * they cannot be: the engine refuses such a call (`tool.rejected{invalid_input}`, the text kept as
 * its input, the reason as its `message`) and the transcript tells the model why, found again from
 * that text.
 */
import { hasNonFiniteNumber, messageOf, storageProblemAt, wellFormed } from '../store/encoding.js'
import { inexactNumberIn, inexactReason } from './json-numbers.js'
import { jsonSyntaxFault } from './json-syntax.js'

/** The longest path into the arguments a reason names before it is cut. */
const PATH_SHOWN = 60

/** The longest message a rejection records (as a schema refusal's). */
const MESSAGE_LIMIT = 1_000

/**
 * How the `message` of a `tool.rejected{invalid_input}` for arguments that could not be taken
 * begins. A schema refusal's never does: its input is parsed, and one that is a string (the only
 * input such a rejection shares with arguments kept as text) is refused as a whole, `the input: …`.
 */
export const UNUSABLE_ARGUMENTS = 'the arguments '

/**
 * The input in `text` (none at all is `{}`), or why there is none usable: what JSON.parse said of
 * it (such as a call cut off by the answer's token limit), or what in it no fact can store exactly,
 * and where. The input sits two levels down in the fact that records it. `unusable` is what the
 * model is told (JSON.parse's words, which are the running V8's); `recorded` makes the same reason in
 * words that are the same on every Node (for a text that is not JSON, where it stops being JSON),
 * for the fact's `message`: only when a fact is recorded (a transcript that finds the reason again
 * from the text does not scan it twice).
 */
export function argumentsOf(text: string): { input: unknown } | { unusable: string; recorded: () => string } {
  if (text.trim() === '') return { input: {} }
  let input: unknown
  try {
    input = JSON.parse(text)
  } catch (error) {
    const recorded = () => {
      const fault = jsonSyntaxFault(text)
      return `are not valid JSON${fault === undefined ? '' : ` (${fault})`}`
    }
    return { unusable: `are not valid JSON (${messageOf(error)})`, recorded }
  }
  const problem = storageProblemAt(input, 2)
  if (problem !== undefined) {
    const [, path = '', reason = problem] = /^\(value\)((?:\.[^:]*)?): (.*)$/.exec(problem) ?? []
    const where = whereShown(path === '' ? [] : path.slice(1).split('.'))
    return unusable(reason.startsWith('nested deeper than') ? `are nested more than 62 levels deep (at ${where})` : `hold what cannot be stored exactly (at ${where}: ${reason})`)
  }
  if (hasNonFiniteNumber(input)) return unusable("hold a number beyond a double's range (such as 1e400), which JSON cannot write back")
  // Checked last: a text refused for an earlier reason (a log's older facts) is still told that reason.
  const inexact = inexactNumberIn(text)
  if (inexact !== undefined) return unusable(`hold a number that would not reach the tool exactly (at ${whereShown(inexact.path)}: ${inexactReason(inexact)})`)
  return { input }
}

/** A reason in the library's own words: told and recorded alike. */
const unusable = (reason: string) => ({ unusable: reason, recorded: () => reason })

/**
 * The `message` of the `tool.rejected{invalid_input}` for arguments `argumentsOf` could not take:
 * `the arguments are not valid JSON (at position 16: the text ends inside the string begun at
 * position 12)`. What follows `the arguments ` goes through `redact` (a fact's text never holds a
 * secret), then is cut at 1,000 characters and made well-formed, as a schema refusal's message is.
 */
export function unusableMessage(taken: { recorded: () => string }, redact: (text: string) => string): string {
  const message = `${UNUSABLE_ARGUMENTS}${redact(taken.recorded())}`
  return wellFormed(message.length > MESSAGE_LIMIT ? `${message.slice(0, MESSAGE_LIMIT)}…` : message)
}

/**
 * Whether a `tool.rejected` says why arguments kept as text could not be taken (not what a schema
 * found wrong with parsed ones): the transcript tells the model that reason as it always has, found
 * again from the text, and a replay compares the text, from which the message follows.
 */
export function isUnusableArguments(fact: { reason: string; input: unknown; message?: string | undefined }): boolean {
  // Without a message: what 0.6.0 and earlier recorded for such arguments.
  return fact.reason === 'invalid_input' && (fact.message === undefined || (typeof fact.input === 'string' && fact.message.startsWith(UNUSABLE_ARGUMENTS)))
}

/** A path into the arguments as a reason names it, cut past `PATH_SHOWN` characters. */
function whereShown(path: readonly string[]): string {
  const shown = path.length === 0 ? 'the arguments themselves' : path.join('/')
  return shown.length > PATH_SHOWN ? `${shown.slice(0, PATH_SHOWN)}…` : shown
}
