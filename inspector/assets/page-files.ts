/**
 * Finds the compiled page scripts. Built, the server runs from dist/inspector/ with its page in
 * dist/inspector/page/. From source (tsx, tests) there is no compiled script next to the server,
 * so it uses the package build's output in ../dist/inspector/page/ instead; nothing is compiled
 * at runtime.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

let pageDirectories: readonly string[] | undefined

/**
 * Where to look for `app.js`, in order; found when first asked, not as the module loads: a
 * CommonJS bundle has no `import.meta.url` (esbuild leaves `import.meta` empty), and reading it at
 * load threw as the bundle started. Such a bundle has no page scripts to find.
 */
function directories(): readonly string[] {
  if (pageDirectories !== undefined) return pageDirectories
  const url: unknown = import.meta.url
  if (typeof url !== 'string') return (pageDirectories = [])
  const inspectorDir = dirname(dirname(fileURLToPath(url)))
  return (pageDirectories = [join(inspectorDir, 'page'), join(inspectorDir, '..', 'dist', 'inspector', 'page')])
}

/** The directory holding the compiled page, or `undefined` when the package was never built (or is bundled). */
export function pageDirectory(): string | undefined {
  return directories().find((dir) => existsSync(join(dir, 'app.js')))
}

const SCRIPT_NAME = /^[a-z][a-z0-9-]*\.js$/

/** The text of one compiled page module, or `undefined` for a name that is not one. */
export async function readPageScript(name: string): Promise<string | undefined> {
  const dir = pageDirectory()
  if (dir === undefined || !SCRIPT_NAME.test(name)) return undefined
  try {
    return await readFile(join(dir, name), 'utf8')
  } catch {
    return undefined
  }
}
