/**
 * What a tool's failure is recorded as, and the model told: the thrown value in words. `String()` of
 * a thrown object is `[object Object]`, which tells the model nothing, and an error's `message`
 * alone drops what its name, its `cause` and an `AggregateError`'s errors say.
 */
import { cutText, messageOf, wellFormed } from '../store/encoding.js'

/** The most characters a tool's failure message keeps (4 MiB of it would go with every later request of the session). */
export const FAILURE_CHARS = 16_000
/** The most characters of each part beyond the error's own message: a cause, an inner error, an object's JSON. */
const PART_CHARS = 1_000
/** How many causes, one inside another, are followed. */
const CAUSES = 5
/** How many of an `AggregateError`'s errors are named. */
const INNER_ERRORS = 10
/** How deep, and how many members of each object, a thrown object's JSON shows. */
const JSON_DEPTH = 4
const JSON_MEMBERS = 20

/** `get()`, or `undefined` when it throws: a getter or a proxy trap may. */
function read<T>(get: () => T): T | undefined {
  try {
    return get()
  } catch {
    return undefined
  }
}

/** Whether `value` is an Error, also of another realm (`instanceof` then says no). */
const isError = (value: unknown): value is Error =>
  read(() => value instanceof Error || Object.prototype.toString.call(value) === '[object Error]') === true

/**
 * What each piece of text is redacted with before it is cut (see {@link failureText}): set for the
 * duration of one synchronous `failureText` call.
 */
let redacting: (text: string) => string = (text) => text

/** `text` redacted (see `redacting`), then cut (`cutText`). */
function cut(given: string, limit: number): string {
  // Redacted before it is cut: a secret across a cut would otherwise be kept in part, and match no redaction after.
  return cutText(redacting(given), limit)
}

/**
 * A tool's failure message for what it threw (never throws, every lone surrogate replaced): an
 * error's message, after its name when that is not plain `Error` (`TypeError: …`), then an
 * `AggregateError`'s errors and the `cause` chain, each part cut at 1,000 characters; for a thrown
 * object that is no error and has no `toString` of its own, its own members as JSON, cut likewise.
 * Not cut as a whole: see {@link failureWithin}. `redact` is applied to every piece of text before
 * it is cut (a part cut across a secret would keep part of it); apply it to the whole text too.
 */
export function failureText(thrown: unknown, redact?: (text: string) => string): string {
  const before = redacting
  if (redact !== undefined) redacting = redact
  try {
    let text = headline(thrown, Number.POSITIVE_INFINITY)
    if (isError(thrown)) {
      const inner = read(() => (thrown as { errors?: unknown }).errors)
      if (Array.isArray(inner) && inner.length > 0) text += ` (${innerErrors(inner)})`
      const seen = new Set<unknown>([thrown])
      let current: unknown = thrown
      for (let depth = 0; depth < CAUSES; depth += 1) {
        const holder = current
        if (!isError(holder) || read(() => 'cause' in holder) !== true) break
        current = read(() => holder.cause)
        if (seen.has(current)) break
        seen.add(current)
        text += `; cause: ${headline(current, PART_CHARS)}`
      }
    }
    return wellFormed(text)
  } catch {
    // Nothing above should throw; if it does, the plain message stands.
    return messageOf(thrown)
  } finally {
    redacting = before
  }
}

/** An `AggregateError`'s errors, each cut at `PART_CHARS`, the first `INNER_ERRORS` of them. */
function innerErrors(errors: readonly unknown[]): string {
  const shown = errors.slice(0, INNER_ERRORS).map((error) => headline(error, PART_CHARS))
  const more = errors.length > INNER_ERRORS ? `; and ${(errors.length - INNER_ERRORS).toLocaleString('en-US')} more` : ''
  return `${errors.length.toLocaleString('en-US')} error${errors.length === 1 ? '' : 's'}: ${shown.join('; ')}${more}`
}

/** One thrown value in words, at most `limit` characters (with an ellipsis when cut). */
function headline(value: unknown, limit: number): string {
  if (typeof value === 'string') return cut(value, limit)
  if (isError(value)) {
    const name = read(() => value.name)
    let said: string
    try {
      const message: unknown = value.message
      said = typeof message === 'string' ? message : message === undefined ? '' : headline(message, limit)
    } catch {
      said = '(its message cannot be read)'
    }
    const named = typeof name === 'string' && name !== '' && name !== 'Error'
    return cut(named ? (said === '' ? name : `${name}: ${said}`) : said === '' ? 'Error' : said, limit)
  }
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return cut(messageOf(value), limit)
  const text = read(() => String(value))
  // A `toString` of its own says what the thrower meant; the default's `[object Object]` says nothing.
  if (typeof text === 'string' && !/^\[object [^\]]*\]$/.test(text)) return cut(text, limit)
  const json = jsonOf(value, 0)
  if (json === undefined) return cut(messageOf(value), limit)
  const constructor = read(() => Object.getPrototypeOf(value)?.constructor?.name)
  const kind = typeof constructor === 'string' && constructor !== '' && constructor !== 'Object' ? `${constructor} ` : ''
  return cut(`${kind}${json}`, Math.min(limit, PART_CHARS))
}

/**
 * An object's own enumerable members as JSON, bounded: `JSON_MEMBERS` members of each object, items
 * of each array, `JSON_DEPTH` levels (deeper, and a cycle, show as `…`), strings cut; a member that
 * cannot be read is left out. `undefined` for what cannot even be listed (a revoked proxy).
 */
function jsonOf(value: unknown, depth: number, budget = { left: PART_CHARS }): string | undefined {
  // Past the part's length nothing more is shown: 20 members on each of 4 levels would be 160,000 visits.
  if (budget.left <= 0) return '"…"'
  const text = jsonText(value, depth, budget)
  // An object's text is counted as its members are, keys with them (below).
  if (text !== undefined && (value === null || typeof value !== 'object')) budget.left -= text.length
  return text
}

function jsonText(value: unknown, depth: number, budget: { left: number }): string | undefined {
  if (value === null || typeof value === 'boolean') return String(value)
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : JSON.stringify(String(value))
  if (typeof value === 'bigint') return JSON.stringify(value.toString())
  if (typeof value === 'string') return JSON.stringify(cut(value, PART_CHARS))
  if (typeof value !== 'object') return undefined
  if (depth >= JSON_DEPTH) return '"…"'
  if (isError(value)) return JSON.stringify(headline(value, PART_CHARS))
  const array = read(() => Array.isArray(value))
  if (array === undefined) return undefined
  if (array) {
    const items = value as unknown[]
    const length = read(() => items.length) ?? 0
    const shown: string[] = []
    for (let index = 0; index < Math.min(length, JSON_MEMBERS); index += 1) shown.push(jsonOf(read(() => items[index]), depth + 1, budget) ?? 'null')
    if (length > JSON_MEMBERS) shown.push(`"… ${(length - JSON_MEMBERS).toLocaleString('en-US')} more"`)
    return `[${shown.join(',')}]`
  }
  const keys = read(() => Object.keys(value))
  if (keys === undefined) return undefined
  const shown: string[] = []
  for (const key of keys.slice(0, JSON_MEMBERS)) {
    const member = jsonOf(read(() => (value as Record<string, unknown>)[key]), depth + 1, budget)
    if (member === undefined) continue
    shown.push(`${JSON.stringify(key)}:${member}`)
    budget.left -= key.length
  }
  if (keys.length > JSON_MEMBERS) shown.push(`"…":"${(keys.length - JSON_MEMBERS).toLocaleString('en-US')} more members"`)
  return `{${shown.join(',')}}`
}

/** `message` cut at `FAILURE_CHARS`, with a note of how long it was. */
export function failureWithin(message: string): string {
  if (message.length <= FAILURE_CHARS) return message
  return `${cut(message, FAILURE_CHARS)} (cut: the message is ${message.length.toLocaleString('en-US')} characters, over the ${FAILURE_CHARS.toLocaleString('en-US')} a tool's failure message keeps)`
}
