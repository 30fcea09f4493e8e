#!/usr/bin/env node
/**
 * The `factstate` command line: demo, inspect, log, verify, backup, recover, pending, script. Each command lives in
 * bin/commands/ and returns its exit code.
 */
import { fstatSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { type CommandIo, EXIT, removeCopiesOnExit, removeCopiesOnSignals, signalToEndBy } from './io.js'
import { meantName } from '../options.js'

const help = `usage: factstate <command> [options]

commands:
  demo [--dir D]       run the whole promise end to end (no network, no API key)
  inspect <log-dir>    open the statechart visualizer on a log (127.0.0.1 only; --port N, --refresh S, --token)
  log <log-dir>        print facts (--session, --run, --invocation, --type, --from, --to, --last, --json),
                       then those that land (--follow), a session's runs (--runs), or the sessions (--sessions,
                       most recently active first with --recent)
  verify <log-dir>     re-read every fact, check the digest chain and every index record; say the log's
                       index format (which versions open it)
  backup <log-dir> <backup-dir>
                       copy the log, verified, while the application runs
  recover <log-dir>    close invocations a crash left open
  pending <log-dir>    list the sessions with a run open, a turn paused or outcomes to acknowledge
  script <log-dir> --invocation ID
                       print the scripted model server's script that replays a recorded run (JSON)

Run 'factstate <command> --help' (or 'factstate help <command>') for a command's options;
'factstate --version' prints the version.
exit codes: 0 ok, 1 a check failed, 2 usage, 3 the log is open in another process, 4 refused`

type Command = (args: string[], io: CommandIo) => Promise<number>

const commands: Record<string, () => Promise<Command>> = {
  demo: async () => (await import('./commands/demo.js')).demoCommand,
  inspect: async () => (await import('./commands/inspect.js')).inspectCommand,
  log: async () => (await import('./commands/log.js')).logCommand,
  verify: async () => (await import('./commands/verify.js')).verifyCommand,
  backup: async () => (await import('./commands/backup.js')).backupCommand,
  recover: async () => (await import('./commands/recover.js')).recoverCommand,
  pending: async () => (await import('./commands/pending.js')).pendingCommand,
  script: async () => (await import('./commands/script.js')).scriptCommand,
}

/** `: did you mean verify?` for a command that misspells one (`verfy`, `Pending`), else nothing. */
function meantCommand(name: string): string {
  const meant = meantName(name, Object.keys(commands))
  return meant === undefined ? '' : `: did you mean ${meant}?`
}

// A reader that stops early (`| head -1`) closes the pipe: the next write fails with EPIPE. That
// is not an error of the command: stop writing, let the command close its log (and remove its
// snapshot's directory), and exit 0. So for stderr, which `2>&1 | head -1` sends to that reader too:
// a note or a summary written after the reader went is dropped, and, that being the pipe stdout
// writes to, the command stops as it would at its next line.
// Any other failure to write (a full disk, `> /dev/full`) is said once on stderr, and the command
// stops the same way, its log closed, with exit 4; on stderr (`2> /dev/full`) it cannot be said:
// exit 4 alone says it.
let stdoutClosed = false
let stderrClosed = false
let stdoutFailed: NodeJS.ErrnoException | undefined
let stderrFailed: NodeJS.ErrnoException | undefined
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  stdoutClosed = true
  if (error.code !== 'EPIPE') stdoutFailed ??= error
})
process.stderr.on('error', (error: NodeJS.ErrnoException) => {
  stderrClosed = true
  if (error.code !== 'EPIPE') stderrFailed ??= error
  else if (sameFile(1, 2)) stdoutClosed = true
})

/** Whether descriptors `a` and `b` are the same file (`2>&1`: the one pipe). */
function sameFile(a: number, b: number): boolean {
  try {
    const [first, second] = [fstatSync(a), fstatSync(b)]
    return first.dev === second.dev && first.ino === second.ino
  } catch {
    return false
  }
}

const io: CommandIo = {
  stdout: (line) => {
    if (!stdoutClosed) process.stdout.write(`${line}\n`)
  },
  stderr: (line) => {
    if (!stderrClosed) process.stderr.write(`${line}\n`)
  },
  stdoutClosed: () => stdoutClosed,
}

/** This package's version, from its manifest: one directory up from the sources, two from the build (dist/bin). */
async function version(): Promise<string> {
  for (const path of ['../package.json', '../../package.json']) {
    try {
      const manifest = JSON.parse(await readFile(new URL(path, import.meta.url), 'utf8')) as { name?: unknown; version?: unknown }
      if (manifest.name === 'factstate' && typeof manifest.version === 'string') return manifest.version
    } catch {
      // Not there: the other layout.
    }
  }
  return 'unknown'
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined) {
    io.stderr(help)
    return EXIT.usage
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    io.stdout(`factstate ${await version()}`)
    return EXIT.ok
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    const about = rest[0] === undefined || !Object.hasOwn(commands, rest[0]) ? undefined : commands[rest[0]]
    if (about) return (await about())(['--help'], io)
    if (rest[0] !== undefined) {
      io.stderr(`error: unknown command ${rest[0]}${meantCommand(rest[0])}`)
      io.stderr(help)
      return EXIT.usage
    }
    io.stdout(help)
    return EXIT.ok
  }
  // Own members only: `toString` or `__proto__` is no command.
  const load = Object.hasOwn(commands, name) ? commands[name] : undefined
  if (!load) {
    io.stderr(`error: unknown command ${name}${meantCommand(name)}`)
    io.stderr(help)
    return EXIT.usage
  }
  return (await load())(rest, io)
}

// Ctrl-C while a command reads a snapshot of a busy log leaves no copy of it behind, and neither
// does an exit the command did not get to close its log before (an uncaught exception).
removeCopiesOnSignals()
removeCopiesOnExit()

main(process.argv.slice(2)).then(
  async (code) => {
    // A failed write is reported on a later tick: a command whose last write was its last step (help) waits for it.
    await new Promise<void>((resolve) => setImmediate(resolve))
    if (stdoutFailed) {
      if (!stderrClosed) process.stderr.write(`error: the output could not be written (${stdoutFailed.code ?? stdoutFailed.message})\n`)
      process.exitCode = EXIT.refused
      return
    }
    if (stderrFailed) {
      process.exitCode = EXIT.refused
      return
    }
    process.exitCode = code
    // Ended by the signal that stopped the command: with no listener left (the command has closed
    // its logs, no copy is left to remove), its default action ends the process before it can exit.
    const signal = signalToEndBy()
    if (signal !== undefined) {
      // What is still queued for a slow reader (a paused pager) is written first: the signal would drop it.
      await Promise.all([process.stdout, process.stderr].map((stream) => new Promise<void>((resolve) => stream.write('', () => resolve()))))
      process.removeAllListeners(signal)
      process.kill(process.pid, signal)
    }
  },
  (error: unknown) => {
    if (!stderrClosed) process.stderr.write(`error: ${(error as Error)?.stack ?? String(error)}\n`)
    process.exitCode = EXIT.refused
  },
)
