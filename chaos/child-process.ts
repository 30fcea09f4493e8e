/**
 * Starting and reading the chaos child. A child is started a thousand times, so its startup
 * matters: when esbuild (tsx's own dependency) is there, the child is bundled once per chaos run
 * and started with plain `node`; otherwise it runs through `--import tsx`.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ChildLines } from '../testing/child-lines.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const ENTRY = join(ROOT, 'chaos', 'child.ts')

/** How to start the child: node arguments before the child's own, and what to clean up afterwards. */
export interface ChildCommand {
  args: string[]
  bundled: boolean
  dispose(): Promise<void>
}

interface Esbuild {
  build(options: Record<string, unknown>): Promise<unknown>
  stop?(): void | Promise<void>
}

/** Bundles the child (or falls back to tsx). The bundle lives under node_modules/.cache so its imports resolve. */
export async function prepareChild(): Promise<ChildCommand> {
  const fallback: ChildCommand = { args: ['--import', 'tsx', ENTRY], bundled: false, dispose: async () => undefined }
  let esbuild: Esbuild
  try {
    const name = 'esbuild'
    esbuild = (await import(name)) as Esbuild
  } catch {
    return fallback
  }
  const directory = join(ROOT, 'node_modules', '.cache', 'factstate-chaos')
  const outfile = join(directory, `child-${process.pid}-${Date.now()}.mjs`)
  try {
    await mkdir(directory, { recursive: true })
    await esbuild.build({
      entryPoints: [ENTRY],
      outfile,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      // Native and optionally-native packages load files relative to themselves.
      external: ['classic-level', 'msgpackr'],
      banner: { js: "import { createRequire as __chaosRequire } from 'node:module'; const require = __chaosRequire(import.meta.url);" },
      logLevel: 'silent',
    })
  } catch {
    return fallback
  } finally {
    await esbuild.stop?.()
  }
  return { args: [outfile], bundled: true, dispose: () => rm(outfile, { force: true }) }
}

/** A running child: its complete stdout lines as they arrive, and its end. */
export interface RunningChild {
  process: ChildProcess
  /** Resolves when a line satisfying `predicate` arrives; rejects if the child ends first or after `ms`. */
  waitFor(predicate: (line: string) => boolean, ms: number): Promise<string>
  /** Resolves once the child exited and every complete line of its stdout was read. */
  ended: Promise<{ code: number | null; signal: NodeJS.Signals | null; lines: string[]; stderr: string }>
  kill(): void
}

/** Starts the child. Only newline-terminated lines count: a line cut by SIGKILL is dropped. */
export function startChild(command: ChildCommand, args: string[]): RunningChild {
  const child = spawn(process.execPath, [...command.args, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  const lines = new ChildLines()
  let partial = ''
  let stderr = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n')
    partial = parts.pop() ?? ''
    for (const line of parts) if (line.length > 0) lines.push(line)
  })
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-20_000)
  })
  const stdoutDone = new Promise<void>((resolve) => child.stdout.on('close', resolve))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  )
  const ended = Promise.all([exited, stdoutDone]).then(([status]) => {
    lines.end()
    return { ...status, lines: lines.lines, stderr }
  })
  return {
    process: child,
    ended,
    waitFor(predicate, ms) {
      return lines.waitFor(predicate, ms, {
        ended: () => new Error('the child ended first'),
        timedOut: (limit) => new Error(`no such line within ${limit} ms`),
      })
    },
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    },
  }
}
