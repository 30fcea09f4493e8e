/**
 * The inspector's page is TypeScript compiled by the package build; the server (run from source
 * in tests) serves the compiled files from dist/inspector/page/. Before a browser suite runs,
 * this rebuilds the package once (`tsc -p tsconfig.build.json`, what `npm run build` runs) when
 * a compiled page file is missing or older than its source. A clean CI checkout is built by
 * `npm ci` (the `prepare` script) already, so this only costs time after page edits.
 */
import { existsSync, readdirSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildPackage } from './built.js'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const sourceDir = join(root, 'inspector', 'page')
const builtDir = join(root, 'dist', 'inspector', 'page')

/** Page sources whose compiled file is missing or older than the source (or a shared input). */
export function stalePageFiles(): string[] {
  const shared = [join(root, 'inspector', 'protocol.ts')].filter(existsSync).map((file) => statSync(file).mtimeMs)
  const newestShared = Math.max(0, ...shared)
  return readdirSync(sourceDir)
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.d.ts'))
    .filter((name) => {
      const built = join(builtDir, name.replace(/\.ts$/, '.js'))
      if (!existsSync(built)) return true
      const builtAt = statSync(built).mtimeMs
      return builtAt < statSync(join(sourceDir, name)).mtimeMs || builtAt < newestShared
    })
}

let ensured = false

/** Builds the package if the compiled page is missing or stale; throws when it still is afterwards. */
export function ensurePageBuilt(): void {
  if (ensured) return
  if (stalePageFiles().length > 0) {
    const said = buildPackage()
    const stale = stalePageFiles()
    if (stale.length > 0) throw new Error(`the inspector page is not built (${stale.join(', ')}): ${said}`)
  }
  ensured = true
}
