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

const inspectorDir = dirname(dirname(fileURLToPath(import.meta.url)))

/** Where to look for `app.js`, in order. */
const PAGE_DIRECTORIES: readonly string[] = [join(inspectorDir, 'page'), join(inspectorDir, '..', 'dist', 'inspector', 'page')]

/** The directory holding the compiled page, or `undefined` when the package was never built. */
export function pageDirectory(): string | undefined {
  return PAGE_DIRECTORIES.find((dir) => existsSync(join(dir, 'app.js')))
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
