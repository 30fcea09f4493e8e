/**
 * Where a text stops being JSON, in this library's own words. `JSON.parse` says why too, but its
 * wording is V8's and changes between Node versions (`Unexpected end of JSON input` in one,
 * `Unterminated string in JSON at position 16` in another): what a fact records must read the same
 * whichever Node wrote it, or a replay on another Node would record a different fact.
 */

/** A code unit that may stand between tokens, as JSON and `JSON.parse` allow: space, tab, LF, CR. */
const isSpace = (code: number) => code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d
const isDigit = (code: number) => code >= 0x30 && code <= 0x39
const isHex = (code: number) => isDigit(code) || (code >= 0x41 && code <= 0x46) || (code >= 0x61 && code <= 0x66)

/** One character as a fault names it: printable ASCII quoted as JSON writes it (`"'"`), anything else by its code point (`U+201C`). */
function characterShown(text: string, at: number): string {
  const code = text.codePointAt(at) as number
  if (code >= 0x21 && code <= 0x7e) return JSON.stringify(String.fromCharCode(code))
  return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`
}

/** What a value in a container waits for next. */
type Expecting = 'a value' | 'a property name in double quotes' | 'a colon' | 'a comma or "}"' | 'a comma or "]"' | 'the end'

/**
 * The first fault of `text` as JSON (`at position 11: "'" where a property name in double quotes
 * was expected`), or `undefined` when it is JSON. Positions count UTF-16 code units from 0, as
 * JavaScript indexes a string. It names at most one character of the text, so it quotes nothing
 * the text holds. Iterative: nesting of any depth takes no stack.
 */
export function jsonSyntaxFault(text: string): string | undefined {
  /** The containers open around the position: `{` or `[`. */
  const open: number[] = []
  let at = 0
  let expecting: Expecting = 'a value'
  const skipSpace = () => {
    while (at < text.length && isSpace(text.charCodeAt(at))) at += 1
  }
  const unexpected = (what: string) =>
    at >= text.length ? `at position ${at}: the text ends where ${what} was expected` : `at position ${at}: ${characterShown(text, at)} where ${what} was expected`
  /** A string from its opening quote at `at`; `at` after its closing quote, or the fault. */
  const string = (): string | undefined => {
    const start = at
    at += 1
    for (;;) {
      if (at >= text.length) return `at position ${at}: the text ends inside the string begun at position ${start}`
      const code = text.charCodeAt(at)
      if (code === 0x22) {
        at += 1
        return undefined
      }
      if (code < 0x20) return `at position ${at}: a control character (${characterShown(text, at)}) inside a string, where JSON needs an escape`
      if (code !== 0x5c) {
        at += 1
        continue
      }
      at += 1
      if (at >= text.length) return `at position ${at}: the text ends inside the string begun at position ${start}`
      const escape = text.charCodeAt(at)
      if (escape === 0x75) {
        for (let digit = 1; digit <= 4; digit += 1) {
          if (at + digit >= text.length) return `at position ${at + digit}: the text ends inside the string begun at position ${start}`
          if (!isHex(text.charCodeAt(at + digit))) return `at position ${at + digit}: ${characterShown(text, at + digit)} in a \\u escape, where a hex digit was expected`
        }
        at += 5
        continue
      }
      // \" \\ \/ \b \f \n \r \t
      if ([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74].includes(escape)) {
        at += 1
        continue
      }
      return `at position ${at - 1}: an escape JSON does not have (a backslash before ${characterShown(text, at)})`
    }
  }
  /** A number from `at`; `at` after it, or the fault. */
  const number = (): string | undefined => {
    if (text.charCodeAt(at) === 0x2d) at += 1
    if (!isDigit(text.charCodeAt(at))) return unexpected('a digit')
    if (text.charCodeAt(at) === 0x30) at += 1
    else while (isDigit(text.charCodeAt(at))) at += 1
    if (text.charCodeAt(at) === 0x2e) {
      at += 1
      if (!isDigit(text.charCodeAt(at))) return unexpected('a digit')
      while (isDigit(text.charCodeAt(at))) at += 1
    }
    if (text.charCodeAt(at) === 0x65 || text.charCodeAt(at) === 0x45) {
      at += 1
      if (text.charCodeAt(at) === 0x2b || text.charCodeAt(at) === 0x2d) at += 1
      if (!isDigit(text.charCodeAt(at))) return unexpected('a digit')
      while (isDigit(text.charCodeAt(at))) at += 1
    }
    return undefined
  }
  /** `true`, `false` or `null` from `at`; `at` after it, or the fault. */
  const literal = (word: string): string | undefined => {
    for (let index = 0; index < word.length; index += 1, at += 1) {
      // The one letter that was due, and of which word: `"o" where the "u" of null was expected`.
      if (text[at] !== word[index]) return unexpected(`the "${word[index]}" of ${word}`)
    }
    return undefined
  }
  /** After a value: what its container waits for (or the end of the text). */
  const afterValue = (): Expecting => {
    const container = open.at(-1)
    return container === undefined ? 'the end' : container === 0x7b ? 'a comma or "}"' : 'a comma or "]"'
  }
  for (;;) {
    skipSpace()
    if (expecting === 'the end') {
      // The top-level value is complete: only space may follow it.
      return at >= text.length ? undefined : `at position ${at}: ${characterShown(text, at)} after the end of the JSON value`
    }
    if (at >= text.length) return unexpected(expecting)
    const code = text.charCodeAt(at)
    let fault: string | undefined
    switch (expecting) {
      case 'a value':
        if (code === 0x7b || code === 0x5b) {
          open.push(code)
          at += 1
          skipSpace()
          // An empty container closes at once.
          if (text.charCodeAt(at) === (code === 0x7b ? 0x7d : 0x5d)) {
            open.pop()
            at += 1
            expecting = afterValue()
          } else expecting = code === 0x7b ? 'a property name in double quotes' : 'a value'
          continue
        }
        if (code === 0x22) fault = string()
        else if (code === 0x2d || isDigit(code)) fault = number()
        else if (code === 0x74) fault = literal('true')
        else if (code === 0x66) fault = literal('false')
        else if (code === 0x6e) fault = literal('null')
        else return unexpected('a value')
        if (fault !== undefined) return fault
        expecting = afterValue()
        continue
      case 'a property name in double quotes':
        if (code !== 0x22) return unexpected(expecting)
        fault = string()
        if (fault !== undefined) return fault
        expecting = 'a colon'
        continue
      case 'a colon':
        if (code !== 0x3a) return unexpected(expecting)
        at += 1
        expecting = 'a value'
        continue
      case 'a comma or "}"':
      case 'a comma or "]"': {
        const close: number = expecting === 'a comma or "}"' ? 0x7d : 0x5d
        if (code === close) {
          open.pop()
          at += 1
          expecting = afterValue()
        } else if (code === 0x2c) {
          at += 1
          expecting = close === 0x7d ? 'a property name in double quotes' : 'a value'
        } else return unexpected(expecting)
        continue
      }
    }
  }
}
