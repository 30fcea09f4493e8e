/**
 * The README's API reference against the package: every value each entry point exports is named
 * in it (a new export the README leaves out fails here), and every error code has its section.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import * as main from '../index.js'
import * as inspector from '../inspector/index.js'
import * as mcp from '../mcp/index.js'
import * as anthropic from '../anthropic/index.js'
import * as opentelemetry from '../opentelemetry/index.js'
import * as testing from '../testing/index.js'
import { REPO_ROOT } from './support/log-fixtures.js'

const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')

/** Names the README shows as code: `name`, `name(…)`, `new Name(…)`, `name.member`. */
const named = new Set<string>()
for (const [, span] of readme.matchAll(/`([^`\n]+)`/g)) {
  for (const [word] of (span as string).matchAll(/[A-Za-z_$][\w$]*/g)) named.add(word)
}

for (const [entry, exports] of [
  ['factstate', main],
  ['factstate/testing', testing],
  ['factstate/inspector', inspector],
  ['factstate/mcp', mcp],
  ['factstate/anthropic', anthropic],
  ['factstate/opentelemetry', opentelemetry],
] as const) {
  test(`every value ${entry} exports is named in the README`, () => {
    const missing = Object.keys(exports).filter((name) => !named.has(name))
    assert.equal(missing, [], `${entry} exports ${missing.join(', ')}, which the README never names`)
  })
}

test("the README's toolsFromMcp examples name each tool as mcpToolName does with their prefix", () => {
  // `prefix: 'files_', // read → files_read`: what a user reads as the name the model will call.
  const examples = [...readme.matchAll(/prefix: '([^']*)',\s*\/\/ ([^\s,]+) → ([^\s,]+)(?:, ([^\s,]+) → ([^\s,]+))?/g)]
  assert.ok(examples.length >= 1, 'the README shows a prefix with the names it gives')
  for (const [, prefix, ...pairs] of examples) {
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const [name, mapped] = [pairs[i], pairs[i + 1]]
      if (name === undefined || mapped === undefined) continue
      assert.is(mcp.mcpToolName(name, prefix), mapped, `prefix ${prefix}: ${name} → ${mapped}, as the README says`)
    }
  }
})

test('every error code has its own section in the README, and every such section is a code', async () => {
  const text = await readFile(join(REPO_ROOT, 'errors.ts'), 'utf8')
  const from = text.indexOf('export type FactstateErrorCode')
  const codes = new Set([...text.slice(from, text.indexOf('\n\n', from)).matchAll(/'([A-Z_]+)'/g)].map(([, code]) => code as string))
  assert.ok(codes.size >= 20, `read ${codes.size} codes from errors.ts`)
  const sections = new Set([...readme.matchAll(/^### ([A-Z][A-Z_]+)$/gm)].map(([, code]) => code as string))
  assert.equal([...codes].filter((code) => !sections.has(code)), [], 'codes without a README section')
  assert.equal([...sections].filter((code) => !codes.has(code)), [], 'README sections for codes the package does not have')
})

test.run()
