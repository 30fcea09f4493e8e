/**
 * The README's code blocks, for the tests that run a recipe as it is written: the one ```ts block
 * (within a section, when given) that contains a marker, and a block's lines made into a module of
 * this repository (`factstate` imported from its sources).
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import * as assert from 'uvu/assert'
import { REPO_ROOT } from './log-fixtures.js'

/**
 * The README's one ```ts block that contains `marker`; with `section`, looked for from that heading
 * up to `until` (the next heading named) only. Fails the test when there is not exactly one.
 */
export async function readmeBlock(marker: string, what: string, section?: { from: string; until: string }): Promise<string> {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
  const text = section === undefined ? readme : readme.slice(readme.indexOf(section.from), readme.indexOf(section.until))
  const blocks = [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map(([, code]) => code as string).filter((code) => code.includes(marker))
  assert.is(blocks.length, 1, what)
  return blocks[0] as string
}

/** A README block's imports (`factstate` the repository's index) and the rest of its lines, apart: a module's imports go at its top. */
export function repoModuleParts(block: string): { index: string; imports: string; lines: string[] } {
  const index = pathToFileURL(join(REPO_ROOT, 'index.ts')).href
  const lines = block.replaceAll("from 'factstate'", `from '${index}'`).split('\n')
  return { index, imports: lines.filter((line) => line.startsWith('import ')).join('\n'), lines: lines.filter((line) => !line.startsWith('import ')) }
}
