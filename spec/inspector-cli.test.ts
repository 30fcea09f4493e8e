/**
 * `factstate inspect <dir> [--port N]`: usage errors, a log held by another process (served as a
 * snapshot), and a real child process that serves until SIGTERM, ends by it and leaves
 * the log exactly as it found it.
 */
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, readdir } from 'node:fs/promises'
import { type AddressInfo, createServer } from 'node:net'
import { join, resolve } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { inspectCommand } from '../bin/commands/inspect.js'
import { EventLog } from '../index.js'
import type { FactsLanded, Overview, VerifyReport } from '../inspector/protocol.js'
import { completeInvocation, startChild } from './support/log-fixtures.js'
import { collector, printed } from './support/cli-io.js'
import { bounded, withTimeout, withTmpdir } from './support/temp.js'
import { ensureBuilt } from './support/built.js'

/** The URL `inspect` prints once it serves (bounded by `ms`). */
async function urlPrinted(out: readonly string[], ms: number): Promise<string> {
  const line = await printed(out, (l) => l.startsWith('factstate inspector: '), 'the URL line', ms)
  return line.slice('factstate inspector: '.length)
}

async function writeLog(path: string): Promise<string> {
  const log = await EventLog.open(path)
  try {
    for (const event of completeInvocation('inspected')) await log.append(event)
    return (await log.verify()).digest
  } finally {
    await log.close()
  }
}

test(
  'usage errors exit 2; --help exits 0; a missing directory is not created',
  bounded(10_000, async (dir) => {
    const help = collector()
    assert.is(await inspectCommand(['--help'], help.io), 0)
    assert.ok(help.out.join('\n').includes('factstate inspect <log-directory>'))
    const missing = join(dir, 'missing')
    for (const args of [[], [dir, dir], [dir, '--port', 'abc'], [dir, '--port', '70000'], [dir, '--bogus'], [missing]]) {
      const { io } = collector()
      assert.is(await inspectCommand(args, io), 2, `args ${JSON.stringify(args)}`)
    }
    assert.not.ok(existsSync(missing), 'inspect never creates a log')
  }),
)

test(
  'a port already in use is a refusal (exit 4) with the code printed',
  bounded(10_000, async (dir) => {
    const path = join(dir, 'log')
    await writeLog(path)
    const blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
    try {
      const { io, err } = collector()
      assert.is(await inspectCommand([path, '--port', String((blocker.address() as AddressInfo).port)], io), 4)
      assert.ok(err.some((line) => line.includes('INSPECTOR_INVALID_OPTIONS')), err.join('\n'))
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()))
    }
  }),
)

/** The next `facts` frame of an inspector's event stream whose events include `seq` (bounded by `ms`). */
async function factsFrame(url: string, seq: number, ms: number, opened: () => void): Promise<FactsLanded> {
  const controller = new AbortController()
  try {
    return await withTimeout(
      async () => {
        const response = await fetch(`${url}api/events`, { signal: controller.signal })
        const reader = (response.body as ReadableStream<Uint8Array>).getReader()
        const decoder = new TextDecoder()
        let text = ''
        let told = false
        for (;;) {
          const { value, done } = await reader.read()
          if (done) throw new Error('the event stream ended')
          text += decoder.decode(value, { stream: true })
          if (!told && text.includes('event: hello')) {
            told = true
            opened()
          }
          for (const frame of text.split('\n\n')) {
            if (!frame.startsWith('event: facts\n')) continue
            const landed = JSON.parse(frame.slice(frame.indexOf('data: ') + 'data: '.length)) as FactsLanded
            if (landed.events.some((event) => event.seq === seq)) return landed
          }
        }
      },
      ms,
      `a facts frame with seq ${seq}`,
    )
  } finally {
    controller.abort()
  }
}

test(
  'a log held by another process is served as a snapshot, taken again when the log changes: new facts reach the page\'s stream, and every copy is removed at the end',
  bounded(30_000, async (dir) => {
    const path = join(dir, 'log')
    await writeLog(path)
    const holder = startChild('child-hold-log.ts', [path])
    try {
      await holder.waitForLine((line) => line === 'ready')
      holder.send('append later')
      await holder.waitForLine((line) => line === 'ack 9')
      const { io, out, err } = collector()
      const stop = new AbortController()
      const copies = join(dir, 'tmp')
      await mkdir(copies)
      const running = withTmpdir(copies, () => inspectCommand([path, '--refresh', '0.2'], io, { signal: stop.signal }))
      // Stopped however the test ends: a failed step must not leave TMPDIR pointing here.
      const stopped = async () => {
        stop.abort()
        return running
      }
      try {
        const url = await urlPrinted(out, 15_000)
        const overview = (await (await fetch(`${url}api/overview`)).json()) as Overview
        assert.is(overview.mode, 'snapshot')
        assert.is(overview.highWater, 9, 'the fact the holder acknowledged last is in it')
        assert.is(overview.location, resolve(path), "the log's location, not the copy's")
        assert.equal(overview.refresh, { everyMs: 200, stopped: null })
        assert.equal(err, [], 'no note: inspect always reads a snapshot, and says so on stdout')
        assert.ok(out.some((line) => line.startsWith(`read-only snapshot of ${path} (9 facts), taken again when it changes (looked at every 0.2 s)`)), out.join('\n'))

        // A fact the holder appends reaches an open page's stream with the new head, and is served.
        const landed = await factsFrame(url, 10, 15_000, () => holder.send('append after'))
        assert.is(landed.highWater, 10)
        assert.equal(landed.events, [{ seq: 10, sessionId: 'session-after', invocationId: 'inv-after', type: 'invocation.opened' }])
        const refreshed = (await (await fetch(`${url}api/overview`)).json()) as Overview
        assert.is(refreshed.highWater, 10)
        assert.ok(refreshed.sessions.some((session) => session.sessionId === 'session-after'), 'the new session is listed')
        const timeline = await fetch(`${url}api/invocations/inv-after`)
        assert.is(timeline.status, 200, 'the new invocation is served from the new snapshot')
        const verified = (await (await fetch(`${url}api/verify`)).json()) as VerifyReport
        assert.equal([verified.status, verified.events], ['ok', 10], 'verify reads the new snapshot')
        assert.is(await stopped(), 0)
      } finally {
        await stopped()
      }
      assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'every copy was removed')
      holder.send('close')
      await holder.waitForLine((line) => line === 'closed')
    } finally {
      await holder.stop()
    }
  }),
)

test(
  '--refresh 0 keeps the first snapshot: it does not update; a bad --refresh is a usage error',
  bounded(30_000, async (dir) => {
    const path = join(dir, 'log')
    await writeLog(path)
    for (const bad of ['abc', '0.05', '3601', '-1']) {
      const { io, err } = collector()
      assert.is(await inspectCommand([path, `--refresh=${bad}`], io), 2, bad)
      assert.ok(err.some((line) => line.startsWith('error: --refresh must be 0 or a number of seconds')), `${bad}: ${err.join('\n')}`)
    }
    const holder = startChild('child-hold-log.ts', [path])
    try {
      await holder.waitForLine((line) => line === 'ready')
      const { io, out } = collector()
      const stop = new AbortController()
      const running = inspectCommand([path, '--refresh', '0'], io, { signal: stop.signal })
      const url = await urlPrinted(out, 15_000)
      const overview = (await (await fetch(`${url}api/overview`)).json()) as Overview
      assert.equal([overview.mode, overview.highWater, overview.refresh], ['snapshot', 8, null])
      holder.send('append after')
      await holder.waitForLine((line) => line === 'ack 9')
      // Longer than the default look (2 s): still the first copy.
      await new Promise((resolve) => setTimeout(resolve, 2_500))
      assert.is(((await (await fetch(`${url}api/overview`)).json()) as Overview).highWater, 8, 'not refreshed')
      stop.abort()
      assert.is(await running, 0)
      holder.send('close')
      await holder.waitForLine((line) => line === 'closed')
    } finally {
      await holder.stop()
    }
  }),
)

test(
  'in process: serves a snapshot, so the application can open its log meanwhile; its facts reach the page; ends when its signal aborts, returning 0',
  bounded(20_000, async (dir) => {
    const path = join(dir, 'log')
    const digest = await writeLog(path)
    const { io, out, err } = collector()
    const stop = new AbortController()
    const running = inspectCommand([path, '--refresh', '0.2'], io, { signal: stop.signal })
    const url = await urlPrinted(out, 10_000)
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/)
    const overview = (await (await fetch(`${url}api/overview`)).json()) as Overview
    assert.equal([overview.mode, overview.highWater], ['snapshot', 8])
    assert.ok(out.some((line) => line.startsWith(`read-only snapshot of ${path} (8 facts), taken again when it changes`)), out.join('\n'))
    assert.equal(err, [], 'no note: no other process has the log open')
    // The application opens its log while the inspector runs (a writer's lock would refuse it LOG_WRITER_BUSY).
    const log = await EventLog.open(path)
    try {
      assert.is((await log.verify()).digest, digest, 'read-only: the log is unchanged')
      const landed = await factsFrame(url, 9, 15_000, () => void log.appendAll(completeInvocation('while-inspected')))
      assert.is(landed.events[0]?.invocationId, 'inv-while-inspected')
    } finally {
      await log.close()
    }
    stop.abort()
    assert.is(await running, 0)
  }),
)

test(
  'a real child process prints the URL, serves, and ends by SIGTERM once it has closed the server and the log',
  bounded(40_000, async (dir) => {
    const path = join(dir, 'log')
    const digest = await writeLog(path)
    const child = startChild('inspector-cli-child.ts', [path, '--port', '0'])
    try {
      const line = await child.waitForLine((l) => l.startsWith('factstate inspector: '), 30_000)
      const url = line.slice('factstate inspector: '.length)
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/)
      const response = await fetch(`${url}api/overview`)
      assert.is(response.status, 200)
      assert.is(((await response.json()) as Overview).digest, digest)
      child.process.kill('SIGTERM')
      const status = await child.exited
      assert.equal(status, { code: null, signal: 'SIGTERM' }, child.stderr())
    } finally {
      await child.stop()
    }
    const log = await EventLog.open(path)
    try {
      assert.is((await log.verify()).digest, digest)
    } finally {
      await log.close()
    }
  }),
)

test(
  'Ctrl-C while inspect indexes a snapshot of a held log ends the real CLI by SIGINT (as a shell expects) and leaves no copy behind',
  bounded(90_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    try {
      // Over the size inspect says it is indexing for, so the signal arrives while it indexes.
      for (let batch = 0; batch < 125; batch += 1) {
        await log.appendAll(Array.from({ length: 100 }, (_, index) => completeInvocation(`big-${batch}-${index}`)).flat())
      }
      assert.ok(log.head().highWater >= 100_000)
      const copies = join(dir, 'tmp')
      await mkdir(copies)
      // The built CLI, as a user runs it (rebuilt first when a source is newer): plain Node, no tsx to load.
      ensureBuilt()
      const child = spawn(process.execPath, ['dist/bin/factstate.js', 'inspect', path], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, TMPDIR: copies, FORCE_COLOR: undefined, NO_COLOR: undefined },
      })
      let stderr = ''
      let stdout = ''
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk))
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })))
      try {
        await withTimeout(
          new Promise<void>((resolve) =>
            child.stderr.on('data', (chunk: Buffer) => {
              stderr += chunk
              if (/^indexing \d+ facts/m.test(stderr)) resolve()
            }),
          ),
          60_000,
          'the indexing line',
        ).catch((error: Error) => {
          throw new Error(`${error.message}; the CLI's stderr: ${stderr || '(none)'}; stdout: ${stdout || '(none)'}`)
        })
        assert.ok((await readdir(dir)).some((name) => name.startsWith('.factstate-cli-')), 'the copy is there while it indexes')
        child.kill('SIGINT')
        assert.equal(await exited, { code: null, signal: 'SIGINT' }, stderr)
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      }
      assert.not.match(stdout, /factstate inspector:/, 'it had not served yet')
      // (tsx, which runs the CLI from its sources here, keeps a cache there too.)
      assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'the copy was removed')
      assert.is(log.head().highWater, 100_000, 'nothing was written to the held log')
    } finally {
      await log.close()
    }
  }),
)

test(
  '--token: the printed link carries a random token the inspector requires; FACTSTATE_INSPECTOR_TOKEN fixes it (and implies it); a bad one is a usage error',
  bounded(20_000, async (dir) => {
    const path = join(dir, 'log')
    await writeLog(path)
    const serve = async (args: string[]): Promise<string> => {
      const { io, out } = collector()
      const stop = new AbortController()
      const running = inspectCommand([path, '--refresh', '0', ...args], io, { signal: stop.signal })
      try {
        const link = await urlPrinted(out, 10_000)
        const { origin } = new URL(link)
        assert.is((await fetch(`${origin}/api/overview`)).status, 401, 'a request without the token is refused')
        const token = new URL(link).searchParams.get('token') ?? ''
        const served = await fetch(`${origin}/api/overview`, { headers: { authorization: `Bearer ${token}` } })
        assert.is(served.status, 200)
        assert.is(((await served.json()) as Overview).highWater, 8)
        return token
      } finally {
        stop.abort()
        assert.is(await running, 0)
      }
    }
    const first = await serve(['--token'])
    const second = await serve(['-t'])
    assert.match(first, /^[A-Za-z0-9_-]{32}$/)
    assert.is.not(first, second, 'a new token each time')
    const before = process.env.FACTSTATE_INSPECTOR_TOKEN
    try {
      process.env.FACTSTATE_INSPECTOR_TOKEN = 'fixed-token-for-the-service'
      assert.is(await serve([]), 'fixed-token-for-the-service')
      process.env.FACTSTATE_INSPECTOR_TOKEN = 'too short'
      const { io, err } = collector()
      assert.is(await inspectCommand([path], io), 2)
      assert.match(err.join('\n'), /FACTSTATE_INSPECTOR_TOKEN must be 16 to 512 characters/)
      assert.not.ok(err.join('\n').includes('too short'), 'the value is not quoted back')
    } finally {
      if (before === undefined) delete process.env.FACTSTATE_INSPECTOR_TOKEN
      else process.env.FACTSTATE_INSPECTOR_TOKEN = before
    }
  }),
)

test.run()
