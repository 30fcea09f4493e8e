/**
 * A tool call's arguments, as the model sent them (JSON text), taken as the call's input, or why
 * they cannot be: the engine refuses such a call (`tool.rejected{invalid_input}`, the text kept as
 * its input) and the transcript tells the model why, found again from that text.
 */
import { hasNonFiniteNumber, messageOf, storageProblemAt } from '../store/encoding.js'
import { inexactNumberIn, inexactReason } from './json-numbers.js'

/** The longest path into the arguments a reason names before it is cut. */
const PATH_SHOWN = 60

/**
 * The input in `text` (none at all is `{}`), or why there is none usable: what JSON.parse said of
 * it (such as a call cut off by the answer's token limit), or what in it no fact can store exactly,
 * and where. The input sits two levels down in the fact that records it.
 */
export function argumentsOf(text: string): { input: unknown } | { unusable: string } {
  if (text.trim() === '') return { input: {} }
  let input: unknown
  try {
    input = JSON.parse(text)
  } catch (error) {
    return { unusable: `are not valid JSON (${messageOf(error)})` }
  }
  const problem = storageProblemAt(input, 2)
  if (problem !== undefined) {
    const [, path = '', reason = problem] = /^\(value\)((?:\.[^:]*)?): (.*)$/.exec(problem) ?? []
    const where = whereShown(path === '' ? [] : path.slice(1).split('.'))
    return { unusable: reason.startsWith('nested deeper than') ? `are nested more than 62 levels deep (at ${where})` : `hold what cannot be stored exactly (at ${where}: ${reason})` }
  }
  if (hasNonFiniteNumber(input)) return { unusable: "hold a number beyond a double's range (such as 1e400), which JSON cannot write back" }
  // Checked last: a text refused for an earlier reason (a log's older facts) is still told that reason.
  const inexact = inexactNumberIn(text)
  if (inexact !== undefined) return { unusable: `hold a number that would not reach the tool exactly (at ${whereShown(inexact.path)}: ${inexactReason(inexact)})` }
  return { input }
}

/** A path into the arguments as a reason names it, cut past `PATH_SHOWN` characters. */
function whereShown(path: readonly string[]): string {
  const shown = path.length === 0 ? 'the arguments themselves' : path.join('/')
  return shown.length > PATH_SHOWN ? `${shown.slice(0, PATH_SHOWN)}…` : shown
}
