/**
 * Child processes for the fault suites: a script run to its end (the chaos harness, the CLI), in
 * its own process group so that a timeout kills it together with anything it started.
 */
import { spawn, type SpawnOptions } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { childArguments } from './compiled-children.js'

/** The repository root: scripts run with it as their working directory. */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url))

export interface ScriptResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

/**
 * Runs `script ...args` from the repository root (see `commandFor`: TypeScript through tsx, a child
 * of spec/support compiled, JavaScript such as the built CLI with plain Node); past `ms` its whole process group is killed and the promise rejects.
 */
export function runScript(script: string, args: string[], ms: number, env: NodeJS.ProcessEnv = process.env): Promise<ScriptResult> {
  return new Promise<ScriptResult>((resolve, reject) => {
    const child = spawn(process.execPath, [...commandFor(script), ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk
    })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk
    })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      killGroup(child.pid)
    }, ms)
    child.on('error', (error) => {
      clearTimeout(timer)
      reject(error)
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      if (timedOut) reject(new Error(`${script} did not finish within ${ms} ms; stderr: ${stderr}`))
      else resolve({ code, signal, stdout, stderr })
    })
  })
}

/** Runs `command ...args` (stdin closed) to its end; resolves with its exit code and all it printed. Unbounded: the caller's test bounds it. */
export function collected(command: string, args: readonly string[], options: SpawnOptions = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** How `script` runs: a child of spec/support compiled (compiled-children.ts), other TypeScript through tsx, JavaScript as it is. */
function commandFor(script: string): string[] {
  const inSupport = /^spec[\\/]support[\\/](child-[\w-]+\.ts)$/.exec(script)
  if (inSupport) return childArguments(inSupport[1] as string)
  return /\.[mc]?ts$/.test(script) ? ['--import', 'tsx', script] : [script]
}

/** Kills a process group started with `detached: true` (the script and every child it started). */
export function killGroup(pid: number | undefined): void {
  if (pid === undefined) return
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    // Already gone.
  }
}
