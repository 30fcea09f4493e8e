/**
 * Reading an options object given to a public call: each option read once, into a plain copy, and
 * anything else refused with the call's own error code. A misspelt option is refused, not ignored
 * (`{ durabilty: 'os' }` would otherwise sync every append; `{ timeout: 5 }` would wait a minute),
 * and a getter or proxy trap that throws is the call's refusal, not an error from deep inside.
 */
import { FactstateError, type FactstateErrorCode } from './errors.js'

/** The error's constructor, for a code known only at run time (its details are typed per code). */
const OptionsError = FactstateError as unknown as new (code: FactstateErrorCode, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) => FactstateError

/** Whose options these are, and how a refusal of them is made. */
export interface OptionsOwner {
  /** The call, as its messages name it: `EventLog.open`, `Engine`. */
  call: string
  code: FactstateErrorCode
  /** `details` of a refusal that names a field (`{ field }`, `{ fields: [field] }`); none by default. */
  details?: ((field: string) => Record<string, unknown>) | undefined
  /** Options the call cannot do without: listed in its messages without a `?`. */
  required?: readonly string[] | undefined
}

/**
 * The options in `options` (undefined is none), copied member by member: only `known` ones, each
 * read once. Not an object, unreadable, or with another member: a refusal of `owner`'s code.
 */
export function readOptions<K extends string>(options: unknown, known: readonly K[], owner: OptionsOwner): { [P in K]?: unknown } {
  if (options === undefined) return {}
  const listed = `{ ${known.map((key) => (owner.required?.includes(key) ? key : `${key}?`)).join(', ')} }`
  const refuse = (message: string, field: string, cause?: unknown) =>
    new OptionsError(owner.code, `${owner.call}: ${message}`, { ...(owner.details ? { details: owner.details(field) } : {}), ...(cause === undefined ? {} : { cause }) })
  let array: boolean
  try {
    // A revoked proxy throws even here.
    array = Array.isArray(options)
  } catch (error) {
    throw refuse(`the options could not be read: ${error instanceof Error ? error.message : 'a proxy that refuses to be read'}`, 'options', error)
  }
  if (typeof options !== 'object' || options === null || array) {
    throw refuse(`options must be an object ${listed}, not ${options === null ? 'null' : array ? 'an array' : typeof options}`, 'options')
  }
  const copy: { [P in K]?: unknown } = {}
  let key = ''
  try {
    for (key of Object.keys(options)) {
      if (!(known as readonly string[]).includes(key)) {
        const meant = meantName(key, known)
        throw refuse(`there is no option ${JSON.stringify(key)}${meant === undefined ? '' : `: did you mean ${meant}?`} (the options are ${listed})`, key)
      }
    }
    // Inherited ones too (options made by a class with getters).
    for (key of known) {
      const value = key in options ? (options as Record<string, unknown>)[key] : undefined
      // A revoked proxy throws at its first use, later checks' included: refused here, named.
      if ((typeof value === 'object' && value !== null) || typeof value === 'function') Array.isArray(value)
      if (value !== undefined) copy[key as K] = value
    }
  } catch (error) {
    if (error instanceof FactstateError) throw error
    // A getter that throws, a proxy that refuses to be read.
    throw refuse(`the options could not be read${key === '' ? '' : ` (at ${key})`}: ${shown(error)}`, key === '' ? 'options' : key, error)
  }
  return copy
}

/** How much of a string value an error message shows. */
const SHOWN_CHARACTERS = 60

/**
 * A value as an error message shows it, without ever throwing: `String(value)` throws for an object
 * with no prototype, a revoked proxy, or a `toString` that throws.
 */
export function shown(value: unknown): string {
  // A long string (an id taken from a request path, say) is cut: the message must not carry it whole.
  if (typeof value === 'string') return value.length > SHOWN_CHARACTERS ? `${JSON.stringify(value.slice(0, SHOWN_CHARACTERS))}… (${value.length.toLocaleString('en-US')} characters)` : JSON.stringify(value)
  // A BigInt's String() is its digits; a symbol's its description.
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return typeof value === 'bigint' ? `${String(value)}n` : String(value)
  try {
    // `instanceof` and `Array.isArray` read the value too: a revoked proxy throws in both.
    if (value instanceof Error) return typeof value.message === 'string' ? value.message : 'an error'
    return Array.isArray(value) ? 'an array' : typeof value === 'function' ? 'a function' : 'an object'
  } catch {
    return 'an object that cannot be read'
  }
}

/**
 * What kind of value `value` is (`a string of 12 characters`, `a number`, `an Error`, `an object`),
 * never what it holds, without ever throwing: for a refused value that may carry a secret (an
 * error's message, a token given where an id was due), which a message must not quote.
 */
export function kindOf(value: unknown): string {
  if (typeof value === 'string') return `a string of ${value.length.toLocaleString('en-US')} characters`
  if (value === null || value === undefined) return String(value)
  // A number, a bigint, a boolean, a symbol, a function.
  if (typeof value !== 'object') return `a ${typeof value}`
  try {
    // `instanceof` and `Array.isArray` read the value: a revoked proxy throws in both.
    return value instanceof Error ? 'an Error' : Array.isArray(value) ? 'an array' : 'an object'
  } catch {
    return 'an object that cannot be read'
  }
}

/**
 * The one of `names` that `key` misspells, if it looks like one: another case or separator
 * (`waitms`, `base_url`, `baseURL`); one edit (a letter added, dropped or changed, or two neighbours
 * swapped) off exactly one name, however short (`fromm`, `form`, `jsno`); one or two letters off
 * a name of 6 or more; or, for exactly one name, that name with one of its words after the first left
 * out or one more added (`onProgress`, `onToolProgressUpdate` for `onToolProgress`); else undefined.
 */
export function meantName<K extends string>(key: string, names: readonly K[]): K | undefined {
  if ((names as readonly string[]).includes(key)) return undefined
  const normalized = normalizedName(key)
  const same = names.find((name) => normalizedName(name) === normalized)
  if (same !== undefined) return same
  // A short name leaves little to go by, so one edit off it is a guess only when no other name is one edit off too.
  const oneOff = names.filter((name) => editDistance(normalized, normalizedName(name), 1) <= 1)
  if (oneOff.length === 1) return oneOff[0]
  const close = names.find((name) => name.length >= 6 && editDistance(normalized, normalizedName(name), 2) <= 2)
  if (close !== undefined) return close
  const worded = names.filter((name) => oneWordApart(key, name))
  return worded.length === 1 ? worded[0] : undefined
}

/** A name's words: split at a capital after a lower-case letter or digit, and at `_`, `-` and spaces, in lower case. */
const wordsOf = (name: string): string[] =>
  name
    .split(/[_\-\s]+|(?<=[a-z0-9])(?=[A-Z])/)
    .filter((word) => word !== '')
    .map((word) => word.toLowerCase())

/**
 * Whether one of `a` and `b` is the other with one word left out, not its first (`onProgress` and
 * `onToolProgress`), the shorter keeping two words or more: a word left out is a guess at the name,
 * not a letter missed.
 */
function oneWordApart(a: string, b: string): boolean {
  const [shorter, longer] = wordsOf(a).length < wordsOf(b).length ? [a, b] : [b, a]
  const words = wordsOf(longer)
  if (words.length < 3 || words.length !== wordsOf(shorter).length + 1) return false
  const target = normalizedName(shorter)
  return words.some((_, index) => index > 0 && words.filter((__, other) => other !== index).join('') === target)
}

/** A name in lower case without separators: `base_url`, `baseURL` and `baseUrl` are one. */
export const normalizedName = (name: string): string => name.toLowerCase().replace(/[^a-z0-9]/g, '')

/**
 * What `names` (keyed by {@link normalizedName}) says of `key`, another library's word for a setting
 * (`recursionLimit`, `max_retries`), or undefined. Own keys only: `constructor` is no hint.
 */
export function namedHint(names: Readonly<Record<string, string>>, key: string): string | undefined {
  const normalized = normalizedName(key)
  return Object.hasOwn(names, normalized) ? names[normalized] : undefined
}

/**
 * The edit distance between `a` and `b`, counting two neighbouring letters swapped (`jsno`, `json`)
 * as one edit, or `limit + 1` once it is known to be more than `limit`.
 */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i += 1) {
    const current = [i]
    for (let j = 1; j <= b.length; j += 1) {
      let cost = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1))
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) cost = Math.min(cost, (before[j - 2] as number) + 1)
      current[j] = cost
    }
    before = previous
    previous = current
  }
  return Math.min(previous[b.length] as number, limit + 1)
}
