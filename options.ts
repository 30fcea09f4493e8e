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
      if (!(known as readonly string[]).includes(key)) throw refuse(`there is no option ${JSON.stringify(key)} (the options are ${listed})`, key)
    }
    // Inherited ones too (options made by a class with getters).
    for (key of known) {
      const value = key in options ? (options as Record<string, unknown>)[key] : undefined
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
