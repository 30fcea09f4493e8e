/**
 * Tests that start the CLI or library code as processes of their own run the built package
 * (dist/, what a user's `factstate` runs and what `npm test` builds first) with plain Node: a
 * process started through tsx spends most of a second loading its hooks and resolving the
 * library through them, which across a file's hundred processes was most of its time. So that
 * such a file run alone after an edit still runs the edited code, `ensureBuilt` rebuilds the
 * package once (`tsc -p tsconfig.build.json`, what `npm run build` runs) when a compiled file is
 * missing or older than its source, and throws when it still is afterwards.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The build's sources: every .ts file (not .d.ts) under tsconfig.build.json's include, less its exclude. */
function buildSources(): string[] {
  const config = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { include: string[]; exclude: string[] }
  const excluded = new Set(config.exclude)
  const sources: string[] = []
  const visit = (path: string): void => {
    if (excluded.has(relative(root, path))) return
    if (statSync(path).isDirectory()) {
      for (const name of readdirSync(path)) visit(join(path, name))
    } else if (path.endsWith('.ts') && !path.endsWith('.d.ts')) {
      sources.push(path)
    }
  }
  for (const entry of config.include) if (existsSync(join(root, entry))) visit(join(root, entry))
  return sources
}

/** Build sources whose compiled file in dist/ is missing or older than the source. */
export function staleBuildFiles(): string[] {
  return buildSources()
    .filter((source) => {
      const built = join(root, 'dist', relative(root, source).replace(/\.ts$/, '.js'))
      return !existsSync(built) || statSync(built).mtimeMs < statSync(source).mtimeMs
    })
    .map((source) => relative(root, source))
}

/** Builds the package (`tsc -p tsconfig.build.json`, what `npm run build` runs); returns what tsc said, for an error. */
export function buildPackage(): string {
  const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc')
  const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, encoding: 'utf8', timeout: 120_000 })
  return `tsc exited ${result.status}\n${result.stdout}${result.stderr}`
}

let ensured = false

/** Builds the package if any compiled file is missing or stale; throws when one still is afterwards. */
export function ensureBuilt(): void {
  if (ensured) return
  if (staleBuildFiles().length > 0) {
    const said = buildPackage()
    const stale = staleBuildFiles()
    if (stale.length > 0) throw new Error(`the package is not built (${stale.slice(0, 5).join(', ')}${stale.length > 5 ? ', …' : ''}): ${said}`)
  }
  ensured = true
}
