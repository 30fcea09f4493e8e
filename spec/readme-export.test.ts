/**
 * The README's "Exporting the facts to another system": its TypeScript blocks type-check as they are
 * written (strict, against the repository's sources), and the JSON-lines exporter, run as written
 * against a real log, writes every fact once across restarts, cuts a torn last line, and refuses a
 * log put back from a backup and grown again (another digest at the file's last seq).
 */
import { spawn } from 'node:child_process'
import { appendFile, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { z } from 'zod'
import { EventLog } from '../index.js'
import { factSchema } from '../facts/schema.js'
import { FACT_TYPES } from '../facts/types.js'
import { REPO_ROOT, boundedTest, completeInvocation } from './support/log-fixtures.js'

const SECTION = { from: '### Exporting the facts to another system', until: '### Running a log in production' }

/** The ```ts blocks of the section, in order. */
async function sectionBlocks(): Promise<string[]> {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
  const text = readme.slice(readme.indexOf(SECTION.from), readme.indexOf(SECTION.until))
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map(([, code]) => code as string)
}

/** A block as a module of the repository: `factstate` its index. */
const asModule = (block: string) => block.replaceAll("from 'factstate'", `from '${join(REPO_ROOT, 'index.js')}'`)

/** Runs `node args` in `cwd`: its exit code and output together. */
function run(args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => (output += chunk))
    child.stderr.on('data', (chunk: Buffer) => (output += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output }))
  })
}

test(
  "the section's TypeScript blocks type-check as written (strict), the checkpoint and the sink declared",
  boundedTest(120_000, async (dir) => {
    const blocks = await sectionBlocks()
    assert.ok(blocks.length >= 3, `the section has its blocks (${blocks.length})`)
    const files = blocks.map((_, index) => `block-${index}.ts`)
    for (const [index, block] of blocks.entries()) await writeFile(join(dir, files[index] as string), asModule(block))
    await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
    await writeFile(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          lib: ['es2023', 'dom'],
          types: ['node'],
          typeRoots: [join(REPO_ROOT, 'node_modules', '@types')],
          strict: true,
          noUncheckedIndexedAccess: true,
          verbatimModuleSyntax: true,
          skipLibCheck: true,
          noEmit: true,
        },
        files,
      }),
    )
    const checked = await run([join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], dir)
    assert.is(checked.output, '', 'no type errors')
    assert.is(checked.code, 0)
  }),
)

test(
  "the README's JSON-lines exporter writes every fact once across restarts, each line with the log's digest there; a torn last line is cut; a log put back from a backup and grown is refused",
  boundedTest(30_000, async (dir) => {
    const block = (await sectionBlocks()).find((code) => code.includes('export async function exportToFile'))
    assert.ok(block, 'one block defines exportToFile')
    await writeFile(join(dir, 'exporter.ts'), asModule(block))
    const { exportToFile } = (await import(pathToFileURL(join(dir, 'exporter.ts')).href)) as { exportToFile: (location: string, file: string) => Promise<number> }
    const path = join(dir, 'log')
    const file = join(dir, 'facts.jsonl')
    const lines = async () => (await readFile(file, 'utf8')).split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as { seq: number; id: string; digest: string })

    const log = await EventLog.open(path)
    try {
      await log.appendAll(completeInvocation('a'))
      const first = log.head().highWater
      assert.is(await exportToFile(path, file), first, 'every fact, the application keeping the log open')
      assert.is(await exportToFile(path, file), 0, 'nothing new, nothing written')
      await log.appendAll(completeInvocation('b'))
      // A crash part-way through a write: half a line at the end.
      await appendFile(file, '{"seq":')
      assert.is(await exportToFile(path, file), log.head().highWater - first, 'the new facts only')
      const written = await lines()
      assert.equal(
        written.map((line) => line.seq),
        Array.from({ length: log.head().highWater }, (_, index) => index + 1),
        'each seq once, the torn line cut',
      )
      for (const line of written) assert.is(line.digest, await log.digestAt(line.seq), `the digest at ${line.seq}`)
      assert.is(written.at(-1)?.digest, (await log.verify()).digest, "the last line's digest is verify's")
    } finally {
      await log.close()
    }

    // Put back from a backup taken earlier, then grown past the file's last seq with other facts.
    await EventLog.backup(path, join(dir, 'backup'))
    await withOpen(path, async (live) => void (await live.appendAll(completeInvocation('c'))))
    assert.ok((await exportToFile(path, file)) > 0)
    const exported = (await lines()).at(-1)?.seq as number
    await rm(path, { recursive: true })
    await withOpen(join(dir, 'backup'), async (restored) => {
      await restored.appendAll([...completeInvocation('d'), ...completeInvocation('e')])
      assert.ok(restored.head().highWater >= exported, 'the restored log reaches the seq again')
    })
    const refused = await exportToFile(join(dir, 'backup'), file).then(
      () => undefined,
      (error: Error) => error,
    )
    assert.match(refused?.message ?? 'not refused', `no longer has the facts of ${file} up to ${exported}`)
    assert.is((await lines()).at(-1)?.seq, exported, 'nothing written')
  }),
)

async function withOpen(path: string, body: (log: EventLog) => Promise<void>): Promise<void> {
  const log = await EventLog.open(path)
  try {
    await body(log)
  } finally {
    await log.close()
  }
}

test("the section's table of facts names every fact type of the schema, each with every field it has (and, for a field that is a union by kind or status, every variant with its fields), and no type the schema lacks", async () => {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
  const text = readme.slice(readme.indexOf(SECTION.from), readme.indexOf(SECTION.until))
  const rows = new Map<string, string>()
  for (const [, type, rest] of text.matchAll(/^\| `([a-z]+\.[a-z]+)` \|(.*)\|$/gm)) rows.set(type as string, rest as string)
  const names = (row: string, name: string) => new RegExp(`\`[^\`]*\\b${name}\\b[^\`]*\``).test(row)
  const missing: string[] = []
  const types: string[] = []
  for (const option of factSchema.options) {
    const { type, ...fields } = option.shape
    const name = type.value
    types.push(name)
    const row = rows.get(name)
    if (row === undefined) {
      missing.push(`${name}: no row`)
      continue
    }
    for (const [field, schema] of Object.entries(fields)) {
      if (!names(row, field)) missing.push(`${name}: ${field}`)
      if (!(schema instanceof z.ZodDiscriminatedUnion)) continue
      for (const variant of schema.options as unknown as z.ZodObject[]) {
        for (const [member, value] of Object.entries(variant.shape)) {
          const tag = value instanceof z.ZodLiteral ? String(value.value) : member
          if (!names(row, tag)) missing.push(`${name}: ${field} ${tag}`)
        }
      }
    }
  }
  assert.equal(missing, [], 'named in the table')
  assert.equal([...rows.keys()].filter((type) => !types.includes(type)), [], 'rows of types the schema lacks')
  assert.equal(types, [...FACT_TYPES], 'the schema has every fact type')
})

test.run()
