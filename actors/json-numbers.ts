/**
 * Number literals in a JSON text that `JSON.parse` does not take exactly. It reads every number as
 * the nearest double, silently: `{"orderId": 12345678901234567891}` reaches a tool as
 * 12345678901234567000, while the transcript replays the digits the model sent. "Exactly" is read as
 * JavaScript prints numbers: a literal is taken exactly when the shortest text of its double (what
 * `String(n)` and `JSON.stringify` write) denotes the same decimal value as the literal. So `0.1` is
 * taken (its double prints back as 0.1, the value any JSON reader means by it), as are `1.50` and
 * `0.1e1`; `0.30000000000000000001` is not (it is read as 0.3), nor is `1e-400` (read as 0). An
 * integer written out in digits is also refused beyond ±(2^53 − 1), though some such (2^53 itself)
 * happen to be doubles: its neighbours are read as it, so an id that large cannot be trusted.
 */

/**
 * Where a literal might not be exact: a double keeps every decimal of up to 15 significant digits,
 * so only a run of 16 or more digits (a point among them) can lose one, or an exponent of three
 * digits (a value below the normal doubles, such as `1e-320`, loses digits however few it has).
 * Text without either, nearly every call's, is not scanned.
 */
const MAYBE_INEXACT = /[0-9.]{16}|[eE][+-]?[0-9]{3}/

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y
const LITERAL_SHOWN = 40

/** A number literal of the arguments that is not taken exactly: where (keys and indexes), the literal, and what it is read as. */
export interface InexactNumber {
  path: string[]
  literal: string
  read: number
}

/** A decimal's value as sign, significant digits (no leading or trailing zero) and exponent: equal values, equal triples. */
function decimalOf(text: string): { negative: boolean; digits: string; exponent: bigint } {
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(text) ?? []
  let digits = `${whole}${fraction}`.replace(/^0+/, '')
  // A BigInt: the exponent of a literal may have more digits than a double keeps.
  let power = BigInt(exponent) - BigInt(fraction.length)
  const trailing = digits.length - digits.replace(/0+$/, '').length
  digits = digits.slice(0, digits.length - trailing)
  power += BigInt(trailing)
  // Zero has one value whatever its sign and exponent.
  return digits === '' ? { negative: false, digits: '', exponent: 0n } : { negative: sign === '-', digits, exponent: power }
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** Whether `literal` (valid JSON number text) is taken exactly (see the module's comment); `read` is what `JSON.parse` makes of it. */
function exact(literal: string, read: number): boolean {
  // Infinity is refused on its own (see tool-arguments.ts), with a message of its own.
  if (!Number.isFinite(read)) return true
  if (/^-?[0-9]+$/.test(literal)) {
    if (literal.length <= 16) return Math.abs(read) <= Number.MAX_SAFE_INTEGER
    const value = BigInt(literal)
    return value <= MAX_SAFE && value >= -MAX_SAFE
  }
  // Most literals are written as JavaScript prints them: no need to compare values.
  if (String(read) === literal) return true
  const given = decimalOf(literal)
  const printed = decimalOf(String(read).replace('e+', 'e'))
  return given.negative === printed.negative && given.digits === printed.digits && given.exponent === printed.exponent
}

/** Where the string that opens at `start` ends (past its closing quote): found with indexOf, not a regular expression, which may overflow on a string of megabytes. */
function stringEnd(text: string, start: number): number {
  let from = start + 1
  for (;;) {
    const quote = text.indexOf('"', from)
    if (quote === -1) return text.length
    let backslashes = 0
    while (text.charCodeAt(quote - 1 - backslashes) === 0x5c) backslashes += 1
    // An odd count escapes the quote.
    if (backslashes % 2 === 0) return quote + 1
    from = quote + 1
  }
}

/**
 * The first number literal of `text` (JSON that parses) not taken exactly, with its path, or
 * `undefined`. Only text that might hold one is scanned (see `MAYBE_INEXACT`).
 */
export function inexactNumberIn(text: string): InexactNumber | undefined {
  if (!MAYBE_INEXACT.test(text)) return undefined
  // Each open object or array: its current key (undefined until read) or index.
  const frames: { key: string | undefined; index: number; array: boolean }[] = []
  let expectKey = false
  let at = 0
  while (at < text.length) {
    const char = text.charCodeAt(at)
    if (char === 0x22) {
      const end = stringEnd(text, at)
      const frame = frames.at(-1)
      if (expectKey && frame !== undefined) frame.key = JSON.parse(text.slice(at, end)) as string
      expectKey = false
      at = end
      continue
    }
    if (char === 0x2d || (char >= 0x30 && char <= 0x39)) {
      NUMBER.lastIndex = at
      const literal = (NUMBER.exec(text) as RegExpExecArray)[0]
      at = NUMBER.lastIndex
      // At most 15 characters without an exponent: 15 digits or fewer, exact.
      if (literal.length <= 15 && !literal.includes('e') && !literal.includes('E')) continue
      const read = Number(literal)
      if (!exact(literal, read)) return { path: frames.map((frame) => (frame.array ? String(frame.index) : (frame.key ?? ''))), literal, read }
      continue
    }
    if (char === 0x7b || char === 0x5b) {
      frames.push({ key: undefined, index: 0, array: char === 0x5b })
      expectKey = char === 0x7b
    } else if (char === 0x7d || char === 0x5d) {
      frames.pop()
    } else if (char === 0x2c) {
      const frame = frames.at(-1)
      if (frame?.array === true) frame.index += 1
      else expectKey = true
    }
    at += 1
  }
  return undefined
}

/** Why `found` is refused, for the model: the value, what it would be read as, and what to send instead. */
export function inexactReason(found: InexactNumber): string {
  const cut = found.literal.length > LITERAL_SHOWN
  const literal = cut ? `${found.literal.slice(0, LITERAL_SHOWN)}…` : found.literal
  const read = String(found.read)
  const asString = cut ? 'send it as a string' : `send it as a string ("${literal}")`
  if (/^-?[0-9]+$/.test(found.literal)) {
    const rounded = read === found.literal ? '' : `, and it would be read as ${read}`
    return `${literal} is an integer beyond ±9,007,199,254,740,991 (2^53 − 1), past which JSON numbers are not read exactly${rounded}; ${asString}`
  }
  return `${literal} would be read as ${read}, the nearest double; ${asString}, or with fewer digits`
}
