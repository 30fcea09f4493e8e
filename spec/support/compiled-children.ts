/**
 * The child processes of spec/support (spec/support/child-*.ts: crash children, log holders,
 * appenders) run compiled, with plain Node. Started through tsx, each spent most of a second loading
 * tsx's hooks and resolving the library through them before its first line. The first child a test
 * process starts compiles them all, with the library sources they import, from the current sources
 * (`tsc` without type checking, which `npm run typecheck` does, in well under a second) into a
 * temporary directory of that process's own (removed when it exits), so that two suites running at
 * once never share or race on one, and a child never runs anything older than the sources.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const supportDir = join(root, 'spec', 'support')
const CHILD = /^child-[\w-]+\.ts$/
/**
 * The system's temporary directory as this module is loaded, before any test points TMPDIR at a
 * directory of its own whose contents it checks (withTmpdir).
 */
const TEMPORARY = tmpdir()

let compiled: string | undefined

/** Compiles every spec/support/child-*.ts (once per process); the directory holding the output. */
function compileChildren(): string {
  if (compiled !== undefined) return compiled
  const dir = mkdtempSync(join(TEMPORARY, 'factstate-children-'))
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }))
  // The compiled files are ES modules that import the project's dependencies by name.
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir')
  const children = readdirSync(supportDir).filter((name) => CHILD.test(name))
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      extends: join(root, 'tsconfig.json'),
      compilerOptions: { noEmit: false, noCheck: true, outDir: dir, rootDir: root, declaration: false, sourceMap: false, types: [] },
      files: children.map((name) => join(supportDir, name)),
      include: [],
    }),
  )
  const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc')
  const result = spawnSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { cwd: root, encoding: 'utf8', timeout: 120_000 })
  const missing = children.filter((name) => !existsSync(join(dir, 'spec', 'support', name.replace(/\.ts$/, '.js'))))
  if (result.status !== 0 || missing.length > 0) {
    throw new Error(`could not compile the test children (${missing.join(', ') || 'all emitted'}): tsc exited ${result.status}\n${result.stdout}${result.stderr}`)
  }
  compiled = dir
  return dir
}

/**
 * The arguments that run `spec/support/<script>` with `process.execPath`: a child-*.ts compiled, any
 * other script (one that finds files beside its source, as the inspector's page) through tsx.
 */
export function childArguments(script: string): string[] {
  if (!CHILD.test(script)) return ['--import', 'tsx', join('spec', 'support', script)]
  return [join(compileChildren(), 'spec', 'support', script.replace(/\.ts$/, '.js'))]
}
