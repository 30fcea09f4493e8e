/**
 * The CLI as a shell pipes it: a reader that stops early (`2>&1 | head -1`) takes stdout and stderr
 * with it, and every command then stops quietly (exit 0) and leaves no snapshot directory behind;
 * the writer's next open sweeps an empty CLI directory one left anyway; `verify` says the log's
 * index format. Each runs the built `factstate` in a child process, through real pipes (bash).
 */
import { spawn } from 'node:child_process'
import { closeSync, openSync } from 'node:fs'
import { mkdir, readdir, stat, utimes } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { forgetSweeps } from '../store/snapshot.js'
import { EventMaker, completeInvocation, facts, invocationOf, startChild } from './support/log-fixtures.js'
import { bounded, withTmpdir } from './support/temp.js'
import { ensureBuilt } from './support/built.js'
import { collected } from './support/faults-process.js'

ensureBuilt()
const BUILT_CLI = 'dist/bin/factstate.js'

/** The CLI's environment: without the colour settings (see spec/cli.test.ts), with `TMPDIR` the test's own. */
function cliEnv(tmp: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp }
  delete env.FORCE_COLOR
  delete env.NO_COLOR
  return env
}

/** Runs `script` with bash (Node and the CLI's command line as its arguments); resolves with what it printed and its exit code. */
function bash(script: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return collected('bash', ['-c', script, 'bash', ...args], { env })
}

/**
 * The command writes into a pipe whose reader, `head -1`, has read one line and gone: a line is
 * written first, and the command starts only once a write finds the pipe closed (so every write of
 * its own, to stdout or to stderr, fails with EPIPE, whatever the timing).
 */
const AFTER_READER_WENT = `
trap '' PIPE
{ echo first; while printf x 2>/dev/null; do sleep 0.01; done; exec "$@"; } 2>&1 | head -1
echo "exit \${PIPESTATUS[0]}"`
/** The user's own line: the reader reads the command's first line and goes, while the command writes on. */
const AS_TYPED = `"$@" 2>&1 | head -1; echo "exit \${PIPESTATUS[0]}"`

/** The CLI's directories for snapshots (and snapshot copies) in `directory`. */
const leftIn = async (directory: string): Promise<string[]> => (await readdir(directory)).filter((name) => /^\.?factstate-(cli|snapshot)-/.test(name))

/** A log at `dir`/log of 14 ended invocations (112 facts, `session-r0` … `session-r13`). */
/** A log of 14 runs in `dir`, and beside it the directory the CLI is given as its TMPDIR. */
async function writtenLog(dir: string): Promise<{ location: string; tmp: string }> {
  const location = join(dir, 'log')
  const log = await EventLog.open(location)
  await log.appendAll(Array.from({ length: 14 }, (_, i) => completeInvocation(`r${i}`)).flat())
  await log.close()
  const tmp = join(dir, 'tmp')
  await mkdir(tmp)
  return { location, tmp }
}

const readers = (location: string): string[][] => [
  ['log', location],
  ['log', location, '--session', 'session-r1', '--runs'],
  ['log', location, '--sessions', '--recent'],
  ['log', location, '--json'],
  ['log', location, '--type', 'invocation.*', '--last', '5'],
  ['pending', location],
  ['pending', location, '--unanswered'],
  ['verify', location],
  ['verify', location, '--json'],
  ['script', location, '--invocation', 'inv-r1'],
]

test(
  'every command stops quietly when the reader of stdout and stderr (2>&1 | head -1) goes: exit 0, and no snapshot directory left beside the log or in TMPDIR, with a service holding the log and without',
  bounded(240_000, async (dir) => {
    const { location, tmp } = await writtenLog(dir)
    const env = cliEnv(tmp)
    const check = async (args: string[], how: string, script: string) => {
      const run = await bash(script, [process.execPath, BUILT_CLI, ...args], env)
      const name = `${how}: ${args.slice(0, 1).concat(args.slice(2)).join(' ')}`
      assert.is(/^exit (\d+)$/m.exec(run.stdout)?.[1], '0', `${name}: ${run.stdout}${run.stderr}`)
      assert.is(run.stdout.split('\n').length, 3, `${name}: one line read, then the status: ${run.stdout}`)
      assert.equal(await leftIn(dir), [], `${name}: no directory left beside the log`)
      assert.equal(await leftIn(tmp), [], `${name}: none in TMPDIR`)
    }
    // Nobody has the log open: stdout's lines and the summaries on stderr are what fails.
    for (const args of [...readers(location), ['log', location, '--follow', '--refresh', '0.1'], ['recover', location]]) {
      await check(args, 'closed before it wrote', AFTER_READER_WENT)
    }
    for (const args of readers(location)) await check(args, 'as typed', AS_TYPED)
    // A service holds the log: each reader's first line is the note on stderr that it reads a snapshot.
    const holder = startChild('child-hold-log.ts', [location])
    try {
      await holder.waitForLine((line) => line === 'ready')
      for (const args of readers(location)) await check(args, 'held, closed before it wrote', AFTER_READER_WENT)
      for (const args of readers(location)) await check(args, 'held, as typed', AS_TYPED)
      holder.send('close')
      assert.equal(await holder.exited, { code: 0, signal: null }, holder.stderr())
    } finally {
      await holder.stop('SIGKILL')
    }
    const reopened = await EventLog.open(location)
    try {
      assert.is((await reopened.verify()).events, 14 * completeInvocation('x').length, 'the log is as it was')
    } finally {
      await reopened.close()
    }
  }),
)

test(
  'stderr that fails otherwise (2>/dev/full): the command finishes, stdout whole, exits 4 (output that cannot be written), and leaves no snapshot directory',
  bounded(60_000, async (dir) => {
    const { location, tmp } = await writtenLog(dir)
    const env = cliEnv(tmp)
    // Linux's /dev/full answers every write with ENOSPC. `log` writes its summary there; held, `verify` its note.
    const holder = startChild('child-hold-log.ts', [location])
    try {
      await holder.waitForLine((line) => line === 'ready')
      for (const [args, lines] of [
        [['log', location], 14 * completeInvocation('x').length],
        [['verify', location], 2],
      ] as const) {
        const deviceFull = openSync('/dev/full', 'w')
        const run = await new Promise<{ code: number | null; stdout: string }>((resolve, reject) => {
          const child = spawn(process.execPath, [BUILT_CLI, ...args], { stdio: ['ignore', 'pipe', deviceFull], env })
          let stdout = ''
          child.stdout?.on('data', (chunk) => (stdout += chunk))
          child.on('error', reject)
          child.on('close', (code) => resolve({ code, stdout }))
        }).finally(() => closeSync(deviceFull))
        assert.is(run.code, 4, `${args[0]}: ${run.stdout.slice(-300)}`)
        assert.is(run.stdout.trim().split('\n').length, lines, `${args[0]}: its output is whole`)
        assert.equal(await leftIn(dir), [], `${args[0]}: no directory left beside the log`)
        assert.equal(await leftIn(tmp), [], `${args[0]}: none in TMPDIR`)
      }
      holder.send('close')
      await holder.exited
    } finally {
      await holder.stop('SIGKILL')
    }
  }),
)

test(
  "the writer's open sweeps an empty CLI directory beside the log once it has not changed for a minute (a command killed before it removed it, or an older version's), and leaves a fresh one and a running command's",
  bounded(60_000, async (dir) => {
    const { location, tmp } = await writtenLog(dir)
    const minutesAgo = new Date(Date.now() - 120_000)
    const abandoned = [join(dir, '.factstate-cli-abandoned'), join(tmp, 'factstate-cli-abandoned')]
    const fresh = join(dir, '.factstate-cli-fresh')
    for (const path of [...abandoned, fresh]) await mkdir(path)
    for (const path of abandoned) await utimes(path, minutesAgo, minutesAgo)
    // A command that goes on reading: its directory, and its copy's LOCK, aged as the abandoned ones.
    const follower = spawn(process.execPath, [BUILT_CLI, 'log', location, '--follow', '--refresh', '0.1'], { stdio: ['ignore', 'pipe', 'pipe'], env: cliEnv(tmp) })
    try {
      const printed = new Promise<void>((resolve, reject) => {
        follower.stdout.once('data', () => resolve())
        follower.stdout.resume()
        follower.once('close', (code) => reject(new Error(`log --follow ended (${code})`)))
      })
      await printed
      const running = (await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-') && !['.factstate-cli-abandoned', '.factstate-cli-fresh'].includes(name))
      assert.is(running.length, 1, running.join(', '))
      const wrapper = join(dir, running[0] as string)
      const [copy] = await readdir(wrapper)
      await utimes(join(wrapper, copy as string, 'LOCK'), minutesAgo, minutesAgo)
      await utimes(wrapper, minutesAgo, minutesAgo)
      forgetSweeps()
      await withTmpdir(tmp, async () => {
        const log = await EventLog.open(location)
        try {
          await logInternals(log).swept()
        } finally {
          await log.close()
        }
      })
      for (const path of abandoned) assert.not.ok(await exists(path), `${path} was swept`)
      assert.ok(await exists(fresh), 'an empty directory made a moment ago is left: a command may be about to make its copy there')
      assert.ok(await exists(join(wrapper, copy as string)), "the running command's directory and copy are left")
      follower.kill('SIGINT')
      await new Promise((resolve) => follower.once('close', resolve))
      assert.equal((await leftIn(dir)).filter((name) => name !== '.factstate-cli-fresh'), [], 'the follower removed its own as it ended')
    } finally {
      follower.kill('SIGKILL')
    }
  }),
)

test(
  "verify says the log's index format (5 without a provider's opaque state, 6 with it), as log.indexFormat() gives it, in text and with --json",
  bounded(60_000, async (dir) => {
    const location = join(dir, 'log')
    const env = cliEnv(dir)
    const log = await EventLog.open(location)
    const a = new EventMaker(invocationOf('a'))
    try {
      assert.is(log.indexFormat(), undefined, 'a new log is not marked yet')
      await log.appendAll([a.next(facts.opened()), a.next(facts.requested('s1'))])
      assert.is(log.indexFormat(), 5)
    } finally {
      await log.close()
    }
    const verified = async (format: number) => {
      const text = await bash('"$@"', [process.execPath, BUILT_CLI, 'verify', location], env)
      assert.is(text.code, 0, text.stderr)
      assert.match(text.stdout, new RegExp(`^index format ${format}: factstate 0\\.${format === 6 ? 10 : 9}\\.0 and later open it`, 'm'))
      assert.is(text.stdout.includes('0.9.x refuses it'), format === 6)
      const json = await bash('"$@"', [process.execPath, BUILT_CLI, 'verify', location, '--json'], env)
      assert.is(json.code, 0, json.stderr)
      assert.is((JSON.parse(json.stdout) as { format: unknown }).format, format)
    }
    await verified(5)
    const written = await EventLog.open(location)
    try {
      await written.append(a.next({ type: 'model.completed', stepId: 's1', output: { text: 'done', toolCalls: [], finishReason: 'stop', reasoningDetails: [{ type: 'reasoning.encrypted', data: 'gAAAAABo' }] } }))
      assert.is(written.indexFormat(), 6, 'marked by the batch that wrote the state')
      const snapshot = await EventLog.openSnapshot(location, { directory: dir })
      try {
        assert.is(snapshot.indexFormat(), 6, "a snapshot says its log's")
      } finally {
        await snapshot.close()
      }
    } finally {
      await written.close()
    }
    await verified(6)
  }),
)

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path)
    return true
  } catch {
    return false
  }
}

test.run()
