/**
 * `factstate log --follow`: the facts that land after the first ones are printed as they land, read
 * through snapshots (so the log's own process, or one that opens it later, is never locked out),
 * until Ctrl-C; usage errors; a log replaced under it.
 */
import { spawn } from 'node:child_process'
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { logCommand } from '../bin/commands/log.js'
import { EventLog } from '../index.js'
import { EventMaker, completeInvocation, facts, invocationOf, startChild, withDb } from './support/log-fixtures.js'
import { keys } from '../store/keys.js'
import { collector, printed } from './support/cli-io.js'
import { bounded, withTimeout, withTmpdir } from './support/temp.js'

const opened = (name: string) => new EventMaker(invocationOf(name)).next(facts.opened())

/**
 * A closed log at `dir`/log holding one opened invocation (`inv-a`), followed by `log <path> …args`
 * in-process until `stop` aborts; `io` defaults to a collector's.
 */
async function followed(dir: string, args: string[], given?: ReturnType<typeof collector>['io']) {
  const path = join(dir, 'log')
  const log = await EventLog.open(path)
  await log.append(opened('a'))
  await log.close()
  const lines = collector()
  const stop = new AbortController()
  const running = logCommand([path, ...args], given ?? lines.io, { signal: stop.signal })
  return { path, out: lines.out, err: lines.err, stop, running }
}

test(
  'usage: --follow takes no --to and does not combine with --runs; --refresh is for --follow, 0.1 to 3600 seconds',
  bounded(10_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    await log.close()
    for (const [args, message] of [
      [['--follow', '--to', '3'], /--follow prints facts as they land: it takes no --to/],
      [['--follow', '--runs', '--session', 's'], /does not combine with --runs/],
      [['--refresh', '1'], /--refresh is for --follow/],
      [['-f', '--refresh', '0.05'], /--refresh must be a number of seconds from 0\.1 to 3600, not 0\.05/],
      [['-f', '--refresh', 'soon'], /not soon/],
    ] as const) {
      const { io, err } = collector()
      assert.is(await logCommand([path, ...args], io), 2, args.join(' '))
      assert.match(err.join('\n'), message)
    }
  }),
)

test(
  'following a log another process writes: the last facts, then each one that lands, filtered; Ctrl-C (the signal) ends it with 0 and no copy left',
  bounded(40_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    await log.appendAll(completeInvocation('first'))
    await log.close()
    const holder = startChild('child-hold-log.ts', [path])
    const copies = join(dir, 'tmp')
    await mkdir(copies)
    try {
      await holder.waitForLine((line) => line === 'ready')
      const { io, out, err } = collector()
      const stop = new AbortController()
      const running = withTmpdir(copies, () => logCommand([path, '--last', '3', '-f', '--refresh', '0.1', '--type', 'invocation.*'], io, { signal: stop.signal }))
      try {
        // The last three facts of that family: the first invocation's two.
        await printed(out, (line) => line.includes('invocation.ended'), 'the first facts')
        assert.is(out.length, 2, out.join('\n'))
        holder.send('append second')
        await holder.waitForLine((line) => line === 'ack 9')
        const line = await printed(out, (l) => l.includes('inv-second'), 'the fact that landed')
        assert.match(line, /^#     9  \S+  session-second\/turn-second\/run-second\/inv-second  invocation\.opened/)
        holder.send('append third')
        await printed(out, (l) => l.includes('inv-third'), 'the next one')
        assert.equal(out.map((l) => Number(/^#\s*(\d+)/.exec(l)?.[1])), [1, 8, 9, 10], 'each once, in order')
      } finally {
        stop.abort()
      }
      assert.is(await running, 0)
      assert.equal(err.filter((l) => l.startsWith('note:')), [], 'no snapshot note: following always reads snapshots')
      assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'no copy left')
      holder.send('close')
      await holder.waitForLine((l) => l === 'closed')
    } finally {
      await holder.stop()
    }
  }),
)

test(
  'following a log nobody has open never locks it: the application opens it meanwhile and its facts are printed (--json); a log replaced under it ends the follow with 4',
  bounded(40_000, async (dir) => {
    const { path, out, err, stop, running } = await followed(dir, ['--follow', '--refresh', '0.1', '--json'])
    let log: EventLog
    try {
      await printed(out, (line) => line.includes('inv-a'), 'the first fact')
      // The application starts while the follow goes on: its open is not LOG_WRITER_BUSY.
      log = await EventLog.open(path)
      try {
        await log.append(opened('b'))
        const line = await printed(out, (l) => l.includes('inv-b'), 'the application\'s fact')
        assert.equal((JSON.parse(line) as { seq: number; invocation: { invocationId: string } }).seq, 2)
      } finally {
        await log.close()
      }
      // Another log put in its place, as long as the one followed and longer.
      await rm(path, { recursive: true })
      log = await EventLog.open(path)
      await log.appendAll([opened('x'), opened('y'), opened('z')])
      await log.close()
      assert.is(await withTimeout(running, 15_000, 'the follow to stop'), 4)
      assert.match(err.join('\n'), /no longer begins with the facts printed \(was it replaced\?\); stopped following/)
      assert.not.ok(out.some((l) => l.includes('inv-z')), 'nothing of the other log printed')
    } finally {
      stop.abort()
      await running
    }
  }),
)

test(
  'following with --from at the next fact prints each fact from it as it lands',
  bounded(40_000, async (dir) => {
    const lines = collector()
    // The follow asks whether stdout is closed at each look, the first one after the first read: then it follows.
    let looks = 0
    const io = { ...lines.io, stdoutClosed: () => (looks += 1) < 0 }
    const { path, stop, running } = await followed(dir, ['--from', '2', '--follow', '--refresh', '0.1', '--json'], io)
    const { out } = lines
    let log: EventLog
    try {
      await withTimeout(async () => {
        while (looks === 0) await new Promise((resolve) => setTimeout(resolve, 20))
      }, 15_000, 'the follow to start')
      log = await EventLog.open(path)
      try {
        await log.appendAll([opened('b'), opened('c'), opened('d')])
      } finally {
        await log.close()
      }
      await printed(out, (line) => line.includes('inv-d'), 'the last fact')
      assert.equal(out.map((line) => (JSON.parse(line) as { seq: number }).seq), [2, 3, 4], 'from seq 2 on, each once')
    } finally {
      stop.abort()
    }
    assert.is(await running, 0)
  }),
)

test(
  'following with --from past the log\'s end (a checkpoint kept from before the log was put back from a backup) is refused at once with 4, naming the high-water, not waited on in silence',
  bounded(20_000, async (dir) => {
    // The log holds seq 1; an exporter resumes from its sink's seq 5 + 1.
    const { path, out, err, stop, running } = await followed(dir, ['--from', '6', '--follow', '--refresh', '0.1', '--json'])
    try {
      assert.is(await withTimeout(running, 15_000, 'the follow to be refused'), 4)
    } finally {
      stop.abort()
    }
    assert.equal(out, [], 'nothing printed')
    assert.match(err.join('\n'), /^error: --from 6 is past the end of the log at .*, whose high-water is 1 \(its next fact is 2\): .*Give --from 2 or less/)
    assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'no copy left')
  }),
)

test(
  'a log that goes missing while followed is waited for (a replace that is not one rename); one that stays gone ends the follow with 4 and says so',
  bounded(40_000, async (dir) => {
    const { path, out, err, stop, running } = await followed(dir, ['--follow', '--refresh', '0.1', '--json'])
    let log: EventLog
    try {
      await printed(out, (line) => line.includes('inv-a'), 'the first fact')
      await rename(path, `${path}.moved`)
      await new Promise((resolve) => setTimeout(resolve, 500))
      await rename(`${path}.moved`, path)
      log = await EventLog.open(path)
      try {
        await log.append(opened('b'))
      } finally {
        await log.close()
      }
      await printed(out, (line) => line.includes('inv-b'), 'the fact appended after the gap')
      assert.equal(err, [], 'the gap went unremarked')
      await rm(path, { recursive: true })
      assert.is(await withTimeout(running, 20_000, 'the follow to stop'), 4)
      assert.match(err.join('\n'), /^error: the log at .* is gone \(deleted or moved away\) and did not come back within 5 s; stopped following$/)
    } finally {
      stop.abort()
      await running
    }
  }),
)

test(
  'the real CLI: log --follow on a held log prints what lands and ends by SIGINT on Ctrl-C (as tail -f, so a shell loop stops too), leaving no copy',
  bounded(60_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    const copies = join(dir, 'tmp')
    await mkdir(copies)
    try {
      await log.append(opened('held'))
      // The build (`npm test` builds first): tsx would keep a cache in TMPDIR.
      const child = spawn(process.execPath, ['dist/bin/factstate.js', 'log', path, '--follow', '--refresh', '0.1'], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, TMPDIR: copies, FORCE_COLOR: undefined, NO_COLOR: undefined },
      })
      let stdout = ''
      let stderr = ''
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk))
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk))
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })))
      const lines = () => stdout.split('\n')
      try {
        await printed(lines, (line) => line.includes('inv-held'), 'the first fact', 20_000)
        await log.append(opened('later'))
        await printed(lines, (line) => line.includes('inv-later'), 'the fact that landed', 20_000)
        child.kill('SIGINT')
        assert.equal(await exited, { code: null, signal: 'SIGINT' }, stderr)
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      }
      assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'no copy left')
    } finally {
      await log.close()
    }
  }),
)

test(
  'following a log that is not there yet waits for it, as tail -F does (a log shipper started before the application), then prints what lands',
  bounded(40_000, async (dir) => {
    const path = join(dir, 'log')
    const { io, out, err } = collector()
    const stop = new AbortController()
    const running = logCommand([path, '--follow', '--refresh', '0.1', '--json'], io, { signal: stop.signal })
    try {
      await printed(err, (line) => line.includes('yet: waiting for one'), 'the note')
      assert.equal(err, [`note: no factstate log at ${path} yet: waiting for one (Ctrl-C to stop)`])
      const log = await EventLog.open(path)
      try {
        await log.append(opened('a'))
        await printed(out, (line) => line.includes('inv-a'), 'the first fact')
        await log.append(opened('b'))
        await printed(out, (line) => line.includes('inv-b'), 'the next one')
      } finally {
        await log.close()
      }
      assert.equal(out.map((line) => (JSON.parse(line) as { seq: number }).seq), [1, 2])
    } finally {
      stop.abort()
    }
    assert.is(await running, 0)
    // Stopped while still waiting: 0, and nothing made at the path.
    const other = join(dir, 'never')
    const waiting = collector()
    const stopWaiting = new AbortController()
    const idle = logCommand([other, '--follow', '--refresh', '0.1'], waiting.io, { signal: stopWaiting.signal })
    await printed(waiting.err, (line) => line.includes('waiting for one'), 'the note')
    stopWaiting.abort()
    assert.is(await idle, 0)
    assert.not.ok((await readdir(dir)).includes('never'))
  }),
)

test(
  'following a path where no log can ever appear (a file, or a directory of other things such as the parent of the log) is a usage error at once, not a wait for ever',
  bounded(20_000, async (dir) => {
    const parent = join(dir, 'data')
    const log = await EventLog.open(join(parent, 'app'))
    await log.close()
    const file = join(dir, 'notes.txt')
    await writeFile(file, 'not a log')
    for (const [path, message] of [
      [parent, `error: no factstate log at ${parent}, and none can be made there: it holds other files (app)`],
      [file, `error: no factstate log at ${file}: it is a file, not a log's directory`],
    ] as const) {
      const { io, err } = collector()
      const stop = new AbortController()
      const code = await withTimeout(() => logCommand([path, '--follow', '--refresh', '0.1'], io, { signal: stop.signal }), 5_000).finally(() => stop.abort())
      assert.is(code, 2, path)
      assert.is(err[0], message)
    }
  }),
)

test(
  'a follow whose working directory beside the log is removed (the folder emptied, as a second demo does) makes it again and goes on',
  bounded(40_000, async (dir) => {
    const { path, out, stop, running } = await followed(dir, ['--follow', '--refresh', '0.1', '--json'])
    try {
      await printed(out, (line) => line.includes('inv-a'), 'the first fact')
      const copies = (await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-'))
      assert.is(copies.length, 1)
      await rm(join(dir, copies[0] as string), { recursive: true, force: true })
      const log = await EventLog.open(path)
      try {
        await log.append(opened('b'))
      } finally {
        await log.close()
      }
      await printed(out, (line) => line.includes('inv-b'), 'the fact appended after the removal')
    } finally {
      stop.abort()
    }
    assert.is(await running, 0)
    assert.equal((await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-')), [], 'removed at the end')
  }),
)

test(
  '--json lines carry the log digest through each fact: the same as digestAt, the last one what verify gives, filtered or not',
  bounded(20_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path)
    let expected: string[]
    let verified: string
    try {
      await log.appendAll(completeInvocation('a'))
      await log.appendAll(completeInvocation('b'))
      expected = await Promise.all(Array.from({ length: 17 }, (_, seq) => log.digestAt(seq)))
      verified = (await log.verify()).digest
    } finally {
      await log.close()
    }
    const lines = async (args: string[]) => {
      const { io, out } = collector()
      assert.is(await logCommand([path, '--json', ...args], io), 0)
      return out.map((line) => JSON.parse(line) as { seq: number; id: string; digest: string })
    }
    const every = await lines([])
    assert.equal(every.map((line) => line.seq), Array.from({ length: 16 }, (_, n) => n + 1))
    for (const line of every) assert.is(line.digest, expected[line.seq], `seq ${line.seq}`)
    assert.is(every.at(-1)?.digest, verified, 'the last line ends where verify does')
    const tools = await lines(['--type', 'tool.*', '--from', '3'])
    assert.equal(tools.map((line) => [line.seq, line.digest]), [4, 5, 12, 13].map((seq) => [seq, expected[seq]]))
    const one = await lines(['--invocation', 'inv-b', '--last', '2'])
    assert.equal(one.map((line) => [line.seq, line.digest]), [15, 16].map((seq) => [seq, expected[seq]]))
  }),
)

test(
  'a follow stops (4) when the log is replaced by one that has the same event id where it stopped but other facts: the digest through it differs',
  bounded(40_000, async (dir) => {
    const { path, out, err, stop, running } = await followed(dir, ['--follow', '--refresh', '0.1', '--json'])
    try {
      await printed(out, (line) => line.includes('inv-a'), 'the first fact')
      // Another log whose fact 1 has the id inv-a/1 too, in another session.
      await rm(path, { recursive: true })
      const other = await EventLog.open(path)
      await other.append(new EventMaker(invocationOf('a', 'session-elsewhere')).next(facts.opened()))
      await other.append(opened('later'))
      await other.close()
      assert.is(await withTimeout(running, 15_000, 'the follow to stop'), 4)
      assert.match(err.join('\n'), /no longer begins with the facts printed \(was it replaced\?\); stopped following/)
      assert.not.ok(out.some((l) => l.includes('inv-later')), 'nothing of the other log printed')
    } finally {
      stop.abort()
      await running
    }
  }),
)

test(
  '--json on a log with a damaged id record: that line has digest null, a note says why once, and the facts after it are printed',
  bounded(30_000, async (dir) => {
    const path = join(dir, 'log')
    const log = await EventLog.open(path, { durability: 'os' })
    try {
      // Over 1,024 facts, so that the open checks only the tail, as for any large log.
      for (let n = 0; n < 130; n += 1) await log.appendAll(completeInvocation(`n${n}`))
    } finally {
      await log.close()
    }
    await withDb(path, (db) => db.del(keys.eventId('inv-n0/2')))
    const { io, out, err } = collector()
    assert.is(await logCommand([path, '--json', '--to', '4'], io), 0)
    const lines = out.map((line) => JSON.parse(line) as { seq: number; digest: string | null })
    assert.equal(lines.map((line) => line.seq), [1, 2, 3, 4])
    assert.equal(lines.map((line) => line.digest === null), [false, true, false, false])
    assert.is(err.filter((line) => line.startsWith('note: ')).length, 1, err.join('\n'))
    assert.match(err.join('\n'), /id record of event 2 .* is missing: its line has digest null/)
  }),
)

test.run()
