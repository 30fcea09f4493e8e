/**
 * `jsonSyntaxFault` (actors/json-syntax.ts) names where a text stops being JSON in the library's
 * own words, which a `tool.rejected` records: it finds a fault exactly when `JSON.parse` throws,
 * and its words and positions are its own, not V8's (which differ between Node versions).
 */
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { jsonSyntaxFault } from '../actors/json-syntax.js'

const parses = (text: string): boolean => {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/** Pieces of JSON and of what models send instead, from which texts are made. */
const PIECES = ['{', '}', '[', ']', '"', ',', ':', ' ', '\n', '\\', 'u', '0', '1', '9', '-', '+', '.', 'e', 'E', 'true', 'false', 'null', 'tru', 'None', "'", '\u0001', '\u00a0', '\u201c', '\ud83d', 'x', 'A', '"key"', '```']

test('a fault is found exactly when JSON.parse throws: valid JSON, JSON cut anywhere, texts of JSON pieces', () => {
  fc.assert(
    fc.property(fc.jsonValue(), (value) => {
      const text = JSON.stringify(value)
      assert.is(jsonSyntaxFault(text), undefined, text)
      for (const end of [0, 1, Math.floor(text.length / 2), text.length - 1]) {
        const cut = text.slice(0, end)
        assert.is(jsonSyntaxFault(cut) === undefined, parses(cut), cut)
      }
    }),
    { numRuns: 500 },
  )
  fc.assert(
    fc.property(fc.array(fc.constantFrom(...PIECES), { maxLength: 24 }), (pieces) => {
      const text = pieces.join('')
      assert.is(jsonSyntaxFault(text) === undefined, parses(text), JSON.stringify(text))
    }),
    { numRuns: 20_000 },
  )
})

test('faults are named in fixed words, by position (UTF-16 code units from 0), quoting at most one character', () => {
  const cases: [string, string][] = [
    ['{"orderId": "A-1', 'at position 16: the text ends inside the string begun at position 12'],
    ['{"value": 4', 'at position 11: the text ends where a comma or "}" was expected'],
    ["{'value': 42}", `at position 1: "'" where a property name in double quotes was expected`],
    ['{"a": 1,}', 'at position 8: "}" where a property name in double quotes was expected'],
    ['[1,]', 'at position 3: "]" where a value was expected'],
    ['{"a" 1}', 'at position 5: "1" where a colon was expected'],
    ['{"a": 1} and more', 'at position 9: "a" after the end of the JSON value'],
    ['```json\n{}\n```', 'at position 0: "`" where a value was expected'],
    ['{"a": True}', 'at position 6: "T" where a value was expected'],
    ['{"a": tru}', 'at position 9: "}" where the "e" of true was expected'],
    ['nope', 'at position 1: "o" where the "u" of null was expected'],
    ['[fals', 'at position 5: the text ends where the "e" of false was expected'],
    ['{"a": 01}', 'at position 7: "1" where a comma or "}" was expected'],
    ['{"a": 1.}', 'at position 8: "}" where a digit was expected'],
    ['{"a": -}', 'at position 7: "}" where a digit was expected'],
    ['{"a": "\\x"}', 'at position 7: an escape JSON does not have (a backslash before "x")'],
    ['{"a": "\\u12g4"}', 'at position 11: "g" in a \\u escape, where a hex digit was expected'],
    ['{"a": "b\nc"}', 'at position 8: a control character (U+000A) inside a string, where JSON needs an escape'],
    ['\u201c{}', 'at position 0: U+201C where a value was expected'],
    ['{"a": \u{1F600}}', 'at position 6: U+1F600 where a value was expected'],
    ['{"a": \ud83d}', 'at position 6: U+D83D where a value was expected'],
    ['   ', 'at position 3: the text ends where a value was expected'],
  ]
  for (const [text, fault] of cases) assert.is(jsonSyntaxFault(text), fault, JSON.stringify(text))
  // Any depth, no stack.
  assert.is(jsonSyntaxFault('['.repeat(1_000_000)), 'at position 1000000: the text ends where a value was expected')
  assert.is(jsonSyntaxFault(`${'['.repeat(100_000)}${']'.repeat(100_000)}`), undefined)
})

test.run()
