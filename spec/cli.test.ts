/**
 * The `factstate` CLI as a user runs it: the demo end to end, then log, verify and recover on the
 * demo's log, usage errors and the busy-log exit code.
 */
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs'
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import { constants } from 'node:os'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { ClassicLevel } from 'classic-level'
import { EventLog, type Fact, recoverInvocations } from '../index.js'
import { prepare } from '../bin/commands/demo.js'
import { closeLog, openLogToRead } from '../bin/io.js'
import { collector } from './support/cli-io.js'
import { completeInvocation, EventMaker, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'
import { ensureBuilt } from './support/built.js'
import { collected } from './support/faults-process.js'

/** Bounds a test's body: uvu has no timeout of its own. */
const bounded30 = <T>(body: Promise<T>): Promise<T> => withTimeout(body, 30_000)

/**
 * The CLI's environment: without the colour settings, since uvu sets FORCE_COLOR and Node 24 and
 * later warn on standard error when NO_COLOR (set by CI) is there too.
 */
const cliEnv = (() => {
  const env = { ...process.env }
  delete env.FORCE_COLOR
  delete env.NO_COLOR
  return env
})()

/**
 * The CLI as a user runs it: the built `factstate` (dist/bin/factstate.js, rebuilt first by
 * `ensureBuilt` when a source is newer), with plain Node. A process started through tsx spends most
 * of a second loading it, and this file starts about a hundred.
 */
const BUILT_CLI = ['dist/bin/factstate.js']
/** The CLI from its sources through tsx, as `npm run demo` and `npm run inspect` run it. */
const SOURCE_CLI = ['--import', 'tsx', 'bin/factstate.ts']
ensureBuilt()

/** Runs the CLI (the build unless `from` says the sources) with `env` added to its environment. */
function cli(args: string[], env?: NodeJS.ProcessEnv, from: readonly string[] = BUILT_CLI): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return collected(process.execPath, [...from, ...args], { env: { ...cliEnv, ...env } })
}

test('a reading command never locks the application out of its log: it reads a snapshot made beside the log, and removes it', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const path = join(dir, 'log')
      const written = await EventLog.open(path)
      await written.appendAll(completeInvocation('before'))
      await written.close()
      const copies = async () => (await readdir(dir)).filter((name) => name.startsWith('.factstate-cli-'))
      const { io, err } = collector()
      // What `verify` and `log` open, for as long as they read.
      const reading = await openLogToRead(path, io)
      try {
        assert.ok(reading?.snapshotOf !== undefined, 'a snapshot')
        assert.is((await copies()).length, 1, 'its copy is beside the log, on its file system')
        // The application starts meanwhile: its open is not LOG_WRITER_BUSY.
        const app = await EventLog.open(path)
        try {
          await app.append(new EventMaker(invocationOf('after')).next(facts.opened()))
        } finally {
          await app.close()
        }
        assert.equal(err, [], 'nobody else had the log open when it was read: no note')
        assert.is(reading?.head().highWater, completeInvocation('x').length, 'the snapshot holds what was there when it was taken')
      } finally {
        await closeLog(reading)
      }
      assert.equal(await copies(), [], 'the copy was removed')
    }),
    30_000,
  ))

test('demo passes every step, then log, verify and recover read its log', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const demoDir = join(dir, 'demo')
      // From the sources: the demo then runs its phases through tsx too (its other branch, from the
      // build, is the signal test's below).
      const demo = await cli(['demo', '--dir', demoDir], undefined, SOURCE_CLI)
      assert.is(demo.code, 0, demo.stdout + demo.stderr)
      assert.match(demo.stdout, /demo passed: every step behaved as described/)
      assert.not.match(demo.stdout, /✘/)
      const location = join(demoDir, 'log')

      const verify = await cli(['verify', location])
      assert.is(verify.code, 0, verify.stderr)
      const [, events, digest] = /^ok: (\d+) events, digest (sha256:[0-9a-f]{64})$/m.exec(verify.stdout) ?? []
      assert.ok(Number(events) > 20)

      // A backup is the same log, verified, and a log of its own.
      const backup = await cli(['backup', location, join(dir, 'backup')])
      assert.is(backup.code, 0, backup.stderr)
      assert.is(backup.stdout.trim(), `backed up ${events} events to ${join(dir, 'backup')}, digest ${digest}`)
      const backupVerify = await cli(['verify', join(dir, 'backup')])
      assert.is(backupVerify.stdout.trim().split('\n')[0], `ok: ${events} events, digest ${digest}`)
      assert.match(backupVerify.stdout, new RegExp(`^a backup taken at \\S+, at seq ${events} \\(digest ${digest}\\)`, 'm'))
      const again = await cli(['backup', location, join(dir, 'backup')])
      assert.is(again.code, 2, 'a destination that exists is a usage error')
      assert.match(again.stderr, /^error: LOG_INVALID_ARGUMENT: the backup's destination .* already exists/m)

      const json = await cli(['log', location, '--json', '--type', 'tool.*'])
      assert.is(json.code, 0, json.stderr)
      const facts = json.stdout.trim().split('\n').map((line) => JSON.parse(line) as { seq: number; fact: { type: string } })
      assert.ok(facts.length >= 5)
      assert.ok(facts.every((f) => f.fact.type.startsWith('tool.')))
      assert.equal(facts.map((f) => f.seq), [...facts.map((f) => f.seq)].sort((a, b) => a - b))
      assert.is(facts.filter((f) => f.fact.type === 'tool.dispatched').length, 3)
      // A family's name alone is its family, as tool.* is.
      const family = await cli(['log', location, '--json', '--type', 'tool'])
      assert.equal([family.code, family.stdout], [0, json.stdout], '--type tool is --type tool.*')

      const one = await cli(['log', location, '--invocation', 'inv-crash-run-1'])
      assert.is(one.code, 0)
      assert.match(one.stdout, /outcome_unknown/)
      assert.not.match(one.stdout, /inv-run-1 /)

      const seqsOf = (text: string) => text.trim().split('\n').map((line) => Number(/^#\s*(\d+) /.exec(line)?.[1]))
      const last = await cli(['log', location, '--last', '3'])
      assert.is(last.code, 0, last.stderr)
      assert.equal(seqsOf(last.stdout), [Number(events) - 2, Number(events) - 1, Number(events)])
      const lastTo = await cli(['log', location, '--last', '2', '--to', '5'])
      assert.equal(seqsOf(lastTo.stdout), [4, 5], '--last counts back from --to')
      // With filters, the last N facts that match, however many others came after them.
      const allLines = (await cli(['log', location, '--json'])).stdout.trim().split('\n').map((line) => JSON.parse(line) as { seq: number; invocation: { invocationId: string }; fact: { type: string } })
      const ofCrash = allLines.filter((line) => line.invocation.invocationId === 'inv-crash-run-1').map((line) => line.seq)
      assert.ok(ofCrash.length >= 3 && ofCrash.at(-1)! < Number(events), 'facts of other runs came after it')
      const lastOfRun = await cli(['log', location, '--invocation', 'inv-crash-run-1', '--last', '2'])
      assert.equal(seqsOf(lastOfRun.stdout), ofCrash.slice(-2))
      const dispatched = allLines.filter((line) => line.fact.type === 'tool.dispatched').map((line) => line.seq)
      const lastOfType = await cli(['log', location, '--type', 'tool.dispatched', '--last', '2'])
      assert.equal(seqsOf(lastOfType.stdout), dispatched.slice(-2))
      const range = await cli(['log', location, '--from', '5', '--to', '7'])
      assert.equal(seqsOf(range.stdout), [5, 6, 7])
      // A --from past the log's end (a seq it never reached) is refused, as events() refuses it, with 4 and the
      // high-water, whatever --to (one below --from is a usage error); the next fact's seq reads nothing, with 0.
      for (const args of [['--from', '999999'], ['--from', '999999', '--to', '1000000'], ['--json', '--from', String(Number(events) + 2)]]) {
        const beyond = await cli(['log', location, ...args])
        assert.is(beyond.code, 4, `${args.join(' ')}: ${beyond.stderr}`)
        assert.is(beyond.stdout, '', args.join(' '))
        assert.match(beyond.stderr, new RegExp(`^error: --from ${args.at(-1) === '1000000' ? 999999 : args.at(-1)} is past the end of the log at .*, whose high-water is ${events} \\(its next fact is ${Number(events) + 1}\\)`), args.join(' '))
      }
      const next = await cli(['log', location, '--from', String(Number(events) + 1)])
      assert.is(next.code, 0, next.stderr)
      assert.is(next.stdout, '')
      assert.match(next.stderr, new RegExp(`^0 fact\\(s\\) shown; log high-water ${events}`))
      // --invocation reads through the invocation's index: the same lines as filtering every fact.
      const every = await cli(['log', location, '--json'])
      const indexed = await cli(['log', location, '--json', '--invocation', 'inv-crash-run-1', '--from', '2'])
      const expected = every.stdout.trim().split('\n').filter((line) => {
        const { seq, invocation } = JSON.parse(line) as { seq: number; invocation: { invocationId: string } }
        return invocation.invocationId === 'inv-crash-run-1' && seq >= 2
      })
      assert.ok(expected.length >= 3)
      assert.equal(indexed.stdout.trim().split('\n'), expected)
      const badId = await cli(['log', location, '--invocation', 'a/b'])
      assert.is(badId.code, 2)
      assert.match(badId.stderr, /--invocation takes an id/)
      const zero = await cli(['log', location, '--from', '0'])
      assert.is(zero.code, 2)
      assert.match(zero.stderr, /--from takes a whole number from 1 to 999,999,999,999,999, not 0/)
      // Node's own words for a missing or dash-led value, in one line of the CLI's.
      const dashed = await cli(['log', location, '--last', '-5'])
      assert.is(dashed.code, 2)
      assert.match(dashed.stderr, /^error: --last needs a value, and one that begins with '-' is taken for an option$/m)
      assert.not.match(dashed.stderr, /XYZ/)
      const missing = await cli(['log', location, '--session'])
      assert.is(missing.code, 2)
      assert.match(missing.stderr, /^error: --session needs a value$/m)

      const recover = await cli(['recover', location])
      assert.is(recover.code, 0)
      assert.match(recover.stdout, new RegExp(`^closed 0 invocation\\(s\\); log high-water ${events}, digest ${digest}$`, 'm'))

      // The demo's (fake) API key reached no file of the log directory and no output.
      for (const file of await readdir(location)) {
        assert.is((await readFile(join(location, file))).indexOf('sk-demo-never-persisted'), -1, file)
      }
      assert.not.ok((demo.stdout + json.stdout + one.stdout).includes('sk-demo-never-persisted'))

      // A log held by another process: the reading commands read a snapshot of it (and say so);
      // recover, which writes, is exit 3 with the code and a remedy.
      const held = await EventLog.open(location)
      try {
        const snapshotVerify = await cli(['verify', location])
        assert.is(snapshotVerify.code, 0, snapshotVerify.stderr)
        assert.equal(snapshotVerify.stdout.trim().split('\n'), [`ok: ${events} events, digest ${digest}`, 'index format 5: factstate 0.9.0 and later open it'], 'and the format of the log it copies')
        assert.match(snapshotVerify.stderr, /^note: another process has this log open: reading a snapshot of it taken now \(\d+ facts\)/m)
        const snapshotLog = await cli(['log', location, '--json', '--last', '1'])
        assert.is(snapshotLog.code, 0, snapshotLog.stderr)
        assert.is((JSON.parse(snapshotLog.stdout) as { seq: number }).seq, Number(events))
        // No snapshot can be made where FACTSTATE_SNAPSHOT_DIR is no directory: LOG_IO, with the
        // remedy for a snapshot, not the one for the log's own directory.
        const noTmp = await cli(['verify', location], { FACTSTATE_SNAPSHOT_DIR: join(location, 'CURRENT') })
        assert.is(noTmp.code, 4, noTmp.stderr)
        assert.match(noTmp.stderr, /^error: LOG_IO: no snapshot of the log can be made in .*CURRENT \(FACTSTATE_SNAPSHOT_DIR\)/m)
        assert.match(noTmp.stderr, /^remedy: no snapshot of the log could be taken: it is made in a directory beside the log/m)
        assert.not.match(noTmp.stderr, /check permissions and free disk space/)
        const busy = await cli(['recover', location])
        assert.is(busy.code, 3)
        assert.match(busy.stderr, /LOG_WRITER_BUSY/)
        assert.match(busy.stderr, /remedy: .*stop that process first/)
        assert.is(held.head().highWater, Number(events), 'nothing was written to the held log')
      } finally {
        await held.close()
      }
    }),
    90_000,
  ))

test('log --runs lists a session\'s runs in the order they opened, how each began and ended, and what tokens its answers reported; it needs --session and takes no fact filter', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    try {
      // Both answers reported their counts; then one of two did (a stream not asked for usage); then none; then no answer yet.
      await log.appendAll(completeInvocation('a', 'chat', [{ inputTokens: 1000, outputTokens: 40, cachedInputTokens: 800, reasoningTokens: 15 }, { inputTokens: 1100, outputTokens: 16 }]))
      await log.appendAll(completeInvocation('other', 'chat2', [{ inputTokens: 5, outputTokens: 5 }, { inputTokens: 5, outputTokens: 5 }]))
      await log.appendAll(completeInvocation('b', 'chat', [{ inputTokens: 300, outputTokens: 20 }]))
      await log.appendAll(completeInvocation('d', 'chat'))
      await log.append(new EventMaker(invocationOf('c', 'chat')).next(facts.opened()))
    } finally {
      await log.close()
    }
    const listed = await cli(['log', location, '--session', 'chat', '--runs'])
    assert.is(listed.code, 0, listed.stderr)
    assert.equal(listed.stdout.trim().split('\n'), [
      'run-a  turn-a  inv-a  message  completed  #1–#8  2 answers, tokens 2100 in (800 cached), 56 out (15 reasoning)',
      'run-b  turn-b  inv-b  message  completed  #17–#24  2 answers, tokens at least 300 in, 20 out (usage missing from 1)',
      'run-d  turn-d  inv-d  message  completed  #25–#32  2 answers, tokens not reported',
      'run-c  turn-c  inv-c  message  open  #33–#33  no answers',
    ])
    assert.match(listed.stderr, /^4 run\(s\) in session chat; log high-water 33$/m)
    const json = await cli(['log', location, '--session', 'chat', '--runs', '--json'])
    assert.equal(
      json.stdout.trim().split('\n').map((line) => JSON.parse(line) as { runId: string; terminal: string | null; usage: unknown }).map((run) => [run.runId, run.terminal, run.usage]),
      [
        ['run-a', 'completed', { answers: 2, unreported: 0, interrupted: 0, inputTokens: 2100, outputTokens: 56, cachedInputTokens: 800, reasoningTokens: 15 }],
        ['run-b', 'completed', { answers: 2, unreported: 1, interrupted: 0, inputTokens: 300, outputTokens: 20, cachedInputTokens: 0, reasoningTokens: 0 }],
        ['run-d', 'completed', { answers: 2, unreported: 2, interrupted: 0, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 }],
        ['run-c', null, { answers: 0, unreported: 0, interrupted: 0, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 }],
      ],
    )
    const none = await cli(['log', location, '--session', 'nobody', '--runs'])
    assert.equal([none.code, none.stdout], [0, ''])
    for (const [args, message] of [
      [['--runs'], /--runs lists the runs of one session: give --session/],
      [['--session', 'chat', '--runs', '--type', 'tool.*'], /--runs does not combine with --type/],
      [['--session', 'chat', '--runs', '--last', '2'], /--runs does not combine with --last/],
    ] as const) {
      const refused = await cli(['log', location, ...args])
      assert.is(refused.code, 2, args.join(' '))
      assert.match(refused.stderr, message)
    }
  })))

/**
 * A closed log at `dir`/log with two invocations a crash left open: `inv-cut` with a model request
 * in flight, `inv-tool` with a tool dispatched and never settled (6 facts). Returns its path.
 */
async function leftOpenByACrash(dir: string): Promise<string> {
  const location = join(dir, 'log')
  const log = await EventLog.open(location)
  const cut = new EventMaker(invocationOf('cut'))
  const tool = new EventMaker(invocationOf('tool'))
  await log.appendAll([
    ...cut.many([facts.opened(), facts.requested('s1')]),
    ...tool.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1')]),
  ])
  await log.close()
  return location
}

test('recover prints each invocation it closes, how it ended and where its run now ends; a second recover closes nothing', () =>
  bounded30(withTempDir(async (dir) => {
    const location = await leftOpenByACrash(dir)
    const first = await cli(['recover', location])
    assert.is(first.code, 0, first.stderr)
    const lines = first.stdout.trim().split('\n')
    assert.is(lines.length, 4, first.stdout)
    assert.match(lines[2] as string, /^closed 2 invocation\(s\); log high-water 9, digest sha256:[0-9a-f]{64}$/)
    assert.match(lines[3] as string, /^their turns got no answer: .*\(factstate pending --unanswered lists them\)$/, 'a plain pending would not show them')
    const unanswered = await cli(['pending', location, '--unanswered'])
    assert.equal(
      unanswered.stdout.trim().split('\n').filter((line) => line.includes('unanswered turn')).map((line) => line.split(':')[0]),
      ['session-cut', 'session-tool'],
      'what the line points to lists both',
    )
    const reopened = await EventLog.open(location)
    try {
      for (const [line, name, how] of [
        [lines[0], 'cut', 'host_interrupted'],
        [lines[1], 'tool', 'outcome_unknown (echo op1)'],
      ] as const) {
        const { sessionId, runId, invocationId } = invocationOf(name)
        const end = (await reopened.runSource(sessionId, runId))?.boundary.highWater
        assert.is(line, `${sessionId}/${runId} ${invocationId}: ${how}; run ends at ${end}`)
      }
    } finally {
      await reopened.close()
    }
    const second = await cli(['recover', location])
    assert.match(second.stdout, /^closed 0 invocation\(s\); log high-water 9, /)
    assert.not.match(second.stdout, /no answer/, 'nothing closed, nothing said of turns')
  })))

test('verify --json of a damaged log prints the refusal as one JSON object too (status corrupt, the seq), besides the text on stderr and exit 1', () =>
  bounded30(withTempDir(async (dir) => {
    const location = await leftOpenByACrash(dir)
    // A fact rewritten through LevelDB itself (its own checksums valid): one id's character changed.
    const db = new ClassicLevel<string, Uint8Array>(location, { keyEncoding: 'utf8', valueEncoding: 'view' })
    try {
      const key = (await db.keys({ gte: 'e!', lt: 'e"' }).all())[1] as string
      const stored = Buffer.from((await db.get(key)) as Uint8Array)
      const at = stored.indexOf('session-cut')
      assert.ok(at > 0, 'the fact names its session')
      stored[at + 'session-cu'.length] = 'x'.charCodeAt(0)
      await db.put(key, stored)
    } finally {
      await db.close()
    }
    const damaged = await cli(['verify', location, '--json'])
    assert.is(damaged.code, 1)
    assert.match(damaged.stderr, /LOG_CORRUPT/)
    const report = JSON.parse(damaged.stdout) as { status: string; code: string; message: string; seq: number | null }
    assert.equal([report.status, report.code, report.seq], ['corrupt', 'LOG_CORRUPT', 2], damaged.stdout)
    assert.match(report.message, /event 2/)
    const text = await cli(['verify', location])
    assert.is(text.stdout, '', 'without --json, stdout stays empty')
    const busy = await EventLog.open(join(dir, 'other'))
    try {
      const refused = await cli(['recover', join(dir, 'other'), '--json'])
      assert.is(refused.stdout, '', 'only verify prints its refusal as JSON')
    } finally {
      await busy.close()
    }
  })))

test('pending lists what recovery and the sessions wait for; verify, recover and backup print one JSON object with --json, for scripts', () =>
  bounded30(withTempDir(async (dir) => {
    const location = await leftOpenByACrash(dir)
    const before = await cli(['pending', location])
    assert.is(before.code, 0, before.stderr)
    const crashed = '; no process has the log open: a crash, or a close that did not wait for it, left it; factstate recover closes it'
    // The run with a tool call in flight says so, with its input: after recover it is an outcome to acknowledge.
    const flying = '; 1 tool call in flight when it stopped: echo op1 {"value":42}; after recover it is an outcome to acknowledge'
    assert.equal(before.stdout.trim().split('\n'), [`session-cut: open run run-cut (inv-cut, turn turn-cut)${crashed}`, `session-tool: open run run-tool (inv-tool, turn turn-tool)${crashed}${flying}`])
    // --json says as much of each open run: no process holds the log, and the calls in flight with their inputs.
    type Active = { sessionId: string; active: { runId: string; logHeldOpen: boolean | null; unsettled?: { name: string; operationId: string; input?: unknown }[] }[] }[]
    const activeOf = (text: string) => (JSON.parse(text) as Active).map((session) => [session.sessionId, session.active.map(({ runId, logHeldOpen, unsettled }) => ({ runId, logHeldOpen, unsettled }))])
    assert.equal(activeOf((await cli(['pending', location, '--json'])).stdout), [
      ['session-cut', [{ runId: 'run-cut', logHeldOpen: false, unsettled: [] }]],
      ['session-tool', [{ runId: 'run-tool', logHeldOpen: false, unsettled: [{ name: 'echo', operationId: 'op1', input: { value: 42 } }] }]],
    ])
    // Held by a process: the same runs may be running there, and nothing says they were left.
    const holder = await EventLog.open(location)
    try {
      const held = await cli(['pending', location])
      assert.equal(held.stdout.trim().split('\n'), ['session-cut: open run run-cut (inv-cut, turn turn-cut)', 'session-tool: open run run-tool (inv-tool, turn turn-tool)'])
      assert.equal(activeOf((await cli(['pending', location, '--json'])).stdout), [
        ['session-cut', [{ runId: 'run-cut', logHeldOpen: true, unsettled: undefined }]],
        ['session-tool', [{ runId: 'run-tool', logHeldOpen: true, unsettled: undefined }]],
      ])
    } finally {
      await holder.close()
    }
    const recovered = await cli(['recover', location, '--json'])
    assert.is(recovered.code, 0, recovered.stderr)
    type Closed = { invocation: { invocationId: string }; outcome: { class: string }; uncertainOperations: { operationId: string }[]; boundary: { highWater: number } }
    const report = JSON.parse(recovered.stdout) as { closed: number; invocations: Closed[]; highWater: number; digest: string }
    assert.is(report.closed, 2)
    assert.is(report.highWater, 9)
    assert.equal(
      // In the order of the text's lines (session, run): recovery itself closes them in no fixed order.
      report.invocations.map((closed) => [closed.invocation.invocationId, closed.outcome.class, closed.uncertainOperations.map((op) => op.operationId)]),
      [
        ['inv-cut', 'host_interrupted', []],
        ['inv-tool', 'outcome_unknown', ['op1']],
      ],
    )
    const after = await cli(['pending', location])
    assert.equal(after.stdout.trim().split('\n'), ['session-tool: 1 tool outcome(s) to acknowledge: echo op1 {"value":42}'], 'with the input it was dispatched with')
    const pendingJson = JSON.parse((await cli(['pending', location, '--json'])).stdout) as { sessionId: string; unknown: { operationId: string; input?: unknown }[] }[]
    assert.equal(pendingJson.map((session) => [session.sessionId, session.unknown.map((op) => [op.operationId, op.input])]), [['session-tool', [['op1', { value: 42 }]]]])
    const verified = await cli(['verify', location, '--json'])
    assert.equal(JSON.parse(verified.stdout), { status: 'ok', events: 9, digest: report.digest, format: 5 })
    const backup = join(dir, 'backup')
    const backedUp = await cli(['backup', location, backup, '--json'])
    const backedUpJson = JSON.parse(backedUp.stdout) as { takenAt: number }
    assert.equal({ ...backedUpJson, takenAt: 0 }, { events: 9, digest: report.digest, takenAt: 0, destination: backup })
    // The backup says what it is; put back in use, each of its sessions waits for an acknowledgement.
    type Verified = { status: 'ok'; events: number; digest: string; format: number; backup: { highWater: number; digest: string; takenAt: number } }
    const backupVerified = JSON.parse((await cli(['verify', backup, '--json'])).stdout) as Verified
    assert.ok(Number.isSafeInteger(backupVerified.backup.takenAt) && backupVerified.backup.takenAt > 0)
    assert.equal(backupVerified, { status: 'ok', events: 9, digest: report.digest, format: 5, backup: { highWater: 9, digest: report.digest, takenAt: backedUpJson.takenAt } }, 'the point the backup reported')
    const backupText = await cli(['verify', backup])
    assert.match(backupText.stdout, /^a backup taken at \d{4}-\d\d-\d\dT[\d:.]+Z, at seq 9 \(digest sha256:[0-9a-f]{64}\): what its sessions did after that is not in it$/m)
    const restored = await cli(['pending', backup])
    assert.is(restored.code, 0, restored.stderr)
    const since = "has not run since the backup taken at T (seq 9): check its tools' effects since then; its next run passes allowRestored"
    assert.equal(
      restored.stdout.trim().split('\n').map((line) => line.replace(/taken at \S+ /, 'taken at T ')),
      [`session-cut: ${since}`, `session-tool: ${since}`, 'session-tool: 1 tool outcome(s) to acknowledge: echo op1 {"value":42}'],
    )
    const original = await cli(['verify', location])
    assert.equal(original.stdout.trim().split('\n'), [`ok: 9 events, digest ${report.digest}`, 'index format 5: factstate 0.9.0 and later open it'], 'the log itself is no backup')
  })))

test('log shows a child run as the child of the call that started it, on its opened line and in --runs', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      const supervisor = invocationOf('sup', 'desk')
      const writer = new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer'))
      try {
        await log.appendAll(completeInvocation('sup', 'desk'))
        const opened = facts.opened('draft it') as Extract<Fact, { type: 'invocation.opened' }>
        if (opened.input.kind === 'message') opened.input.parent = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
        await log.append(writer.next(opened))
      } finally {
        await log.close()
      }
      const lines = await cli(['log', location, '--type', 'invocation.opened'])
      assert.is(lines.code, 0, lines.stderr)
      const [parentLine, childLine] = lines.stdout.trim().split('\n')
      assert.not.match(parentLine ?? '', /child of/)
      assert.match(childLine ?? '', /message "draft it", child of inv-sup\/step-1\/0 \(session desk\)$/)
      const none = await cli(['log', location, '--session', 'nosuch'])
      assert.equal([none.code, none.stdout], [0, ''])
      assert.match(none.stderr, /^0 fact\(s\) shown \(the log has no session nosuch\); log high-water 9,/)
      const quiet = await cli(['log', location, '--session', 'desk', '--type', 'hold.entered'])
      assert.match(quiet.stderr, /^0 fact\(s\) shown; log high-water/, 'a session the log has, with nothing matching, is not called unknown')
      const runs = await cli(['log', location, '--session', 'inv-sup.step-1.0.writer', '--runs'])
      assert.is(runs.code, 0, runs.stderr)
      assert.match(runs.stdout, /^run-writer {2}turn-writer {2}inv-writer {2}message {2}child of inv-sup\/step-1\/0 \(session desk\) {2}open/)
      const json = await cli(['log', location, '--session', 'inv-sup.step-1.0.writer', '--runs', '--json'])
      assert.equal((JSON.parse(json.stdout.trim()) as { parent: unknown }).parent, { invocation: supervisor, operationId: 'inv-sup/step-1/0' })
      const mark = "; a child run of inv-sup/step-1/0 (session desk): settle it through its supervisor's recovery"
      assert.equal((await cli(['pending', location])).stdout.trim().split('\n'), [
        `inv-sup.step-1.0.writer: open run run-writer (inv-writer, turn turn-writer); no process has the log open: a crash, or a close that did not wait for it, left it; factstate recover closes it${mark}`,
      ])
      // Its tool call left uncertain by a crash: pending says whose child it is, so it is settled through the supervisor.
      const again = await EventLog.open(location)
      try {
        await again.appendAll(writer.many([facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'save', arguments: '{}' }]), facts.dispatched('op1')]))
        await recoverInvocations(again)
      } finally {
        await again.close()
      }
      const pending = await cli(['pending', location, '--unanswered'])
      assert.equal(pending.stdout.trim().split('\n'), [
        `inv-sup.step-1.0.writer: 1 tool outcome(s) to acknowledge: echo op1 {"value":42}${mark}`,
        `inv-sup.step-1.0.writer: unanswered turn turn-writer: run run-writer (inv-writer) ended failed outcome_unknown at seq 13${mark}`,
      ])
      const waited = await cli(['pending', location])
      assert.equal(waited.stderr.trim().split('\n').filter((line) => line.startsWith('hint:')), ['hint: 1 turn ended unanswered (cancelled or failed): factstate pending --unanswered lists it'], 'its supervisor waits for it')
      // Once the supervisor has run since (told that the child's turn was given up, say), nothing waits for that turn.
      const later = await EventLog.open(location)
      try {
        await later.appendAll(completeInvocation('sup-2', 'desk'))
      } finally {
        await later.close()
      }
      const left = await cli(['pending', location, '--unanswered', '--session', 'inv-sup.step-1.0.writer'])
      assert.is(left.code, 0, left.stderr)
      assert.is(
        left.stdout.trim().split('\n')[1],
        'inv-sup.step-1.0.writer: unanswered turn turn-writer: run run-writer (inv-writer) ended failed outcome_unknown at seq 13; a child run of inv-sup/step-1/0 (session desk), whose supervisor has run since (run run-sup-2): nothing waits for this turn',
      )
      const gone = await cli(['pending', location])
      assert.equal(gone.stderr.trim().split('\n').filter((line) => line.startsWith('hint:')), [], 'a child turn nothing waits for is not counted')
    }),
    60_000,
  ))

test('pending on an open run a crash left lists the calls of tools with effects it had in flight (not the settled ones, not the read-only ones), each with its input; recover makes them the outcomes to acknowledge', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const run = new EventMaker(invocationOf('notes'))
    const calls = ['op1', 'op2', 'op3', 'op4'].map((op) => ({ callId: `call-${op}`, name: 'echo', arguments: '{}' }))
    const log = await EventLog.open(location)
    try {
      await log.appendAll(
        run.many([
          facts.opened(),
          facts.requested('s1'),
          facts.completed('s1', calls),
          facts.dispatched('op1', { text: 'settled' }),
          facts.settled('op1'),
          { ...facts.dispatched('op2', { text: 'read only' }), readOnly: true } as Fact,
          facts.dispatched('op3', { text: 'first' }),
          facts.dispatched('op4', { text: 'second' }),
        ]),
      )
    } finally {
      await log.close()
    }
    const before = await cli(['pending', location])
    assert.is(before.code, 0, before.stderr)
    assert.equal(before.stdout.trim().split('\n'), [
      'session-notes: open run run-notes (inv-notes, turn turn-notes); no process has the log open: a crash, or a close that did not wait for it, left it; factstate recover closes it; 2 tool calls in flight when it stopped: echo op3 {"text":"first"}, echo op4 {"text":"second"}; after recover each is an outcome to acknowledge',
    ])
    assert.is((await cli(['recover', location])).code, 0)
    const after = await cli(['pending', location])
    assert.equal(after.stdout.trim().split('\n'), ['session-notes: 2 tool outcome(s) to acknowledge: echo op3 {"text":"first"}, echo op4 {"text":"second"}'], 'what the line said recover would leave')
  })))

test('pending on a big log put back from a backup: past 20 sessions that have only not run since it, one line says how many; --restored and --session list them, --json has them all', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    try {
      for (let index = 0; index < 25; index += 1) await log.appendAll(completeInvocation(`done-${String(index).padStart(2, '0')}`))
      const tool = new EventMaker(invocationOf('tool'))
      await log.appendAll(tool.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1')]))
    } finally {
      await log.close()
    }
    const backup = join(dir, 'backup')
    assert.is((await cli(['backup', location, backup])).code, 0)
    const lines = (result: { stdout: string }) => result.stdout.trim().split('\n').map((line) => line.replace(/taken at \S+ /, 'taken at T '))
    const since = "has not run since the backup taken at T (seq 204): check its tools' effects since then; its next run passes allowRestored"
    const plain = await cli(['pending', backup])
    assert.is(plain.code, 0, plain.stderr)
    assert.equal(lines(plain), [
      `session-tool: ${since}`,
      'session-tool: open run run-tool (inv-tool, turn turn-tool); no process has the log open: a crash, or a close that did not wait for it, left it; factstate recover closes it; 1 tool call in flight when it stopped: echo op1 {"value":42}; after recover it is an outcome to acknowledge',
      "25 sessions with nothing else pending have not run since the backup taken at T (seq 204): check their tools' effects since then; each one's next run passes allowRestored (--restored lists them)",
    ])
    const listed = lines(await cli(['pending', backup, '--restored']))
    assert.is(listed.length, 27)
    assert.is(listed[0], `session-done-00: ${since}`)
    assert.equal(lines(await cli(['pending', backup, '--session', 'session-done-07'])), [`session-done-07: ${since}`])
    assert.is((JSON.parse((await cli(['pending', backup, '--json'])).stdout) as unknown[]).length, 26)
    // Backed up again after one of its sessions ran: that one has the later point, the rest keep the earlier, a line each.
    const reopened = await EventLog.open(backup)
    try {
      await reopened.appendAll(completeInvocation('again', 'session-done-00'))
    } finally {
      await reopened.close()
    }
    const again = join(dir, 'again')
    assert.is((await cli(['backup', backup, again])).code, 0)
    assert.equal(lines(await cli(['pending', again])).slice(-2), [
      "24 sessions with nothing else pending have not run since the backup taken at T (seq 204): check their tools' effects since then; each one's next run passes allowRestored (--restored lists them)",
      "1 session with nothing else pending has not run since the backup taken at T (seq 212): check their tools' effects since then; each one's next run passes allowRestored (--restored lists them)",
    ])
  })))

test('pending shows when each paused turn was sealed (its line, and sealedAt in --json)', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const paused = new EventMaker(invocationOf('paused'))
    const pause = {
      intent: { handoffId: 'h1', hostEpoch: 'epoch', rootRunId: 'run-paused', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: 'claim-h1' },
      remainingSteps: 1,
      execution: { model: 'test-model', providerOptions: {}, cwd: '/work', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
    }
    const log = await EventLog.open(location)
    try {
      const held = paused.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1'), facts.settled('op1'), facts.holdEntered('h1')])
      await log.appendAll([...held, { ...paused.next(facts.ended({ status: 'handoff_paused', pause })), recordedAt: Date.parse('2026-12-06T09:12:44.120Z') }])
    } finally {
      await log.close()
    }
    const text = await cli(['pending', location])
    assert.is(text.code, 0, text.stderr)
    assert.equal(text.stdout.trim().split('\n'), ['session-paused: paused turn turn-paused (sealed 2026-12-06T09:12:44.120Z): run run-paused waits for its successor run-next (inv-next, claim claim-h1)'])
    const json = JSON.parse((await cli(['pending', location, '--json'])).stdout) as { paused: { turnId: string; sealedAt: number }[] }[]
    assert.equal(json.map((session) => session.paused.map((turn) => [turn.turnId, turn.sealedAt])), [[['turn-paused', Date.parse('2026-12-06T09:12:44.120Z')]]])
  })))

test('pending says of a paused turn of a child run whose child it is, so that its answer is carried to the supervisor', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const writer = new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer'))
    const pause = {
      intent: { handoffId: 'review', hostEpoch: 'epoch', rootRunId: 'run-writer', successorRunId: 'run-writer.review', successorInvocationId: 'inv-writer.review', claimId: 'inv-writer.review.claim' },
      remainingSteps: 1,
      execution: { model: 'test-model', providerOptions: {}, cwd: '/srv/newsroom', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
    }
    const log = await EventLog.open(location)
    try {
      await log.appendAll(completeInvocation('sup', 'desk'))
      const opened = facts.opened('draft it') as Extract<Fact, { type: 'invocation.opened' }>
      if (opened.input.kind === 'message') opened.input.parent = { invocation: invocationOf('sup', 'desk'), operationId: 'inv-sup/step-1/0' }
      const held = writer.many([opened, facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1'), facts.settled('op1'), facts.holdEntered('review')])
      await log.appendAll([...held, { ...writer.next(facts.ended({ status: 'handoff_paused', pause })), recordedAt: Date.parse('2026-12-06T09:12:44.120Z') }])
    } finally {
      await log.close()
    }
    const text = await cli(['pending', location])
    assert.is(text.code, 0, text.stderr)
    assert.equal(text.stdout.trim().split('\n'), [
      'inv-sup.step-1.0.writer: paused turn turn-writer (sealed 2026-12-06T09:12:44.120Z): run run-writer waits for its successor run-writer.review (inv-writer.review, claim inv-writer.review.claim); a child run of inv-sup/step-1/0 (session desk): once its successor has finished, tell its supervisor the answer',
    ])
  })))

test('pending --session ID lists that session alone; one with nothing pending prints what an empty list prints; a missing or bad id is a usage error', () =>
  bounded30(withTempDir(async (dir) => {
    // Two sessions with a run open (session-cut, session-tool), and one whose run completed.
    const location = await leftOpenByACrash(dir)
    const log = await EventLog.open(location)
    try {
      await log.appendAll(completeInvocation('quiet'))
    } finally {
      await log.close()
    }
    const crashed = '; no process has the log open: a crash, or a close that did not wait for it, left it; factstate recover closes it'
    const flying = '; 1 tool call in flight when it stopped: echo op1 {"value":42}; after recover it is an outcome to acknowledge'
    const every = await cli(['pending', location])
    assert.equal(every.stdout.trim().split('\n'), [`session-cut: open run run-cut (inv-cut, turn turn-cut)${crashed}`, `session-tool: open run run-tool (inv-tool, turn turn-tool)${crashed}${flying}`])
    const one = await cli(['pending', location, '--session', 'session-tool'])
    assert.is(one.code, 0, one.stderr)
    assert.equal(one.stdout.trim().split('\n'), [`session-tool: open run run-tool (inv-tool, turn turn-tool)${crashed}${flying}`])
    const oneJson = JSON.parse((await cli(['pending', location, '--session=session-cut', '--json'])).stdout) as { sessionId: string; active: { runId: string }[] }[]
    assert.equal(oneJson.map((session) => [session.sessionId, session.active.map((run) => run.runId)]), [['session-cut', ['run-cut']]])
    // Nothing pending, and never seen: as the whole log with nothing pending prints.
    for (const session of ['session-quiet', 'session-never']) {
      const none = await cli(['pending', location, '--session', session])
      assert.equal([none.code, none.stdout], [0, 'nothing pending\n'], session)
      const noneJson = await cli(['pending', location, '--session', session, '--json'])
      assert.equal([noneJson.code, noneJson.stdout], [0, '[]\n'], `${session} --json`)
    }
    const missing = await cli(['pending', location, '--session'])
    assert.is(missing.code, 2)
    assert.match(missing.stderr, /^error: --session needs a value$/m)
    const bad = await cli(['pending', location, '--session', 'a/b'])
    assert.is(bad.code, 2)
    assert.match(bad.stderr, /^error: --session takes an id \(1–128 characters from \[A-Za-z0-9._:-\]\), not a\/b$/m)
    assert.match(bad.stderr, /^usage: factstate pending <log-directory> \[--session ID\]/m, 'with the synopsis')
    const unknown = await cli(['pending', location, '--sessions', 'session-cut'])
    assert.is(unknown.code, 2)
    assert.match(unknown.stderr, /^error: unknown option --sessions: did you mean --session\?$/m)
    const misspelt = await cli(['pending', location, '--sesion=session-cut'])
    assert.is(misspelt.code, 2)
    assert.match(misspelt.stderr, /^error: unknown option --sesion: did you mean --session\?$/m)
    // A short name one letter off (added, dropped, changed or swapped) is told too.
    for (const [given, meant] of [['fromm', 'from'], ['form', 'from'], ['jsno', 'json'], ['lst', 'last']] as const) {
      const short = await cli(['log', location, `--${given}`, '3'])
      assert.is(short.code, 2, given)
      assert.match(short.stderr, new RegExp(`^error: unknown option --${given}: did you mean --${meant}\\?$`, 'm'), given)
    }
    const far = await cli(['log', location, '--frobnicate'])
    assert.is(far.code, 2)
    assert.match(far.stderr, /^error: unknown option --frobnicate$/m, 'a name like none gets no guess')
    const help = await cli(['pending', '--help'])
    assert.match(help.stdout, /^--session ID lists that session alone/m)
  })))

test('recover on a log put back from a backup says which closed runs are in sessions that have not run since it (text and --json)', () =>
  bounded30(withTempDir(async (dir) => {
    const location = await leftOpenByACrash(dir)
    const backup = join(dir, 'backup')
    const taken = JSON.parse((await cli(['backup', location, backup, '--json'])).stdout) as { takenAt: number; events: number; digest: string }
    const second = join(dir, 'second')
    await cli(['backup', location, second])
    const recovered = await cli(['recover', backup, '--json'])
    assert.is(recovered.code, 0, recovered.stderr)
    const report = JSON.parse(recovered.stdout) as { invocations: { invocation: { sessionId: string }; restored?: unknown }[] }
    const point = { highWater: taken.events, digest: taken.digest, takenAt: taken.takenAt }
    assert.equal(report.invocations.map((closed) => [closed.invocation.sessionId, closed.restored]), [['session-cut', point], ['session-tool', point]])
    // The log itself is no backup: its closed runs say nothing of one.
    const own = JSON.parse((await cli(['recover', location, '--json'])).stdout) as { invocations: { restored?: unknown }[] }
    assert.equal(own.invocations.map((closed) => closed.restored), [undefined, undefined])
    // In text, on a second copy.
    const text = await cli(['recover', second])
    assert.match(text.stdout, /^session-cut\/run-cut inv-cut: host_interrupted; run ends at \d+; restored from the backup taken at \S+ \(seq \d+\): its next run passes allowRestored$/m)
  })))

test('verify, log and recover refuse a path that holds no log (exit 2) and create nothing there', () =>
  bounded30(withTempDir(async (dir) => {
    for (const command of ['verify', 'log', 'recover']) {
      const typo = join(dir, 'typo', command)
      const result = await cli([command, typo])
      assert.is(result.code, 2, `${command}: ${result.stdout}${result.stderr}`)
      assert.match(result.stderr, /no factstate log at/)
    }
    // A path is text from the command line too: one that holds a terminal's control sequence is printed escaped.
    const typed = await cli(['log', join(dir, 'x\u001b[2Jy')])
    assert.is(typed.code, 2)
    assert.ok(!typed.stderr.includes('\u001b'), 'no raw escape character reaches the terminal')
    assert.match(typed.stderr, /no factstate log at .*x\\u001b\[2Jy/)
    assert.equal(await readdir(dir), [], 'no directory was made')
  })))

test('log prints one line per fact: text a model or a tool wrote cannot break a line or drive the terminal', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    const a = new EventMaker(invocationOf('a'))
    await log.appendAll(
      a.many([
        facts.opened(),
        facts.requested('s1'),
        {
          type: 'model.completed',
          stepId: 's1',
          output: { toolCalls: [{ callId: 'call-c1', name: 'echo', arguments: '{"a":1}\n#     42  forged line' }], finishReason: 'tool_calls' },
        },
        facts.dispatched('c1'),
        { type: 'tool.settled', operationId: 'c1', outcome: { status: 'failed', message: 'gone\r\u001b[2K\u001b[1A\u001b]0;title\u0007 \u2028 \u0085' } },
      ]),
    )
    await log.close()
    const result = await cli(['log', location])
    assert.is(result.code, 0, result.stderr)
    const lines = result.stdout.trimEnd().split('\n')
    assert.is(lines.length, 5, result.stdout)
    assert.not.match(result.stdout, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029]/, 'no control character reaches the terminal')
    assert.match(lines[2] as string, /\\u000a#     42  forged line/)
    assert.match(lines[4] as string, /gone\\u000d\\u001b\[2K/)
  })))

test("log names the tool on each tool.settled line (its fact has only the operation id): from the dispatch read before it, or, past --from, --last or a filter that left it out, from its invocation's facts; --json is the facts as written", () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    // Five calls in parallel, settling out of order, beside another run's call.
    const tools = ['lookup', 'charge', 'email', 'refund', 'audit']
    const op = (index: number) => `inv-par/step-1/${index}`
    const par = new EventMaker(invocationOf('par'))
    const other = new EventMaker(invocationOf('other'))
    await log.appendAll([
      ...par.many([
        facts.opened(),
        facts.requested('step-1'),
        facts.completed('step-1', tools.map((name, index) => ({ callId: `call-${index}`, name, arguments: '{}' }))),
        ...tools.map((name, index): Fact => ({ type: 'tool.dispatched', operationId: op(index), callId: `call-${index}`, name, input: {} })),
      ]),
      ...other.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-inv-other/s1/0', name: 'echo', arguments: '{}' }]), facts.dispatched('inv-other/s1/0')]),
      ...par.many([facts.settled(op(3)), facts.failed(op(0)), facts.settled(op(4)), facts.settled(op(1)), facts.settled(op(2))]),
      ...other.many([facts.settled('inv-other/s1/0')]),
    ])
    await log.close()
    const settledLines = (stdout: string) => stdout.split('\n').filter((line) => line.includes('tool.settled')).map((line) => line.replace(/^.*tool\.settled +/, ''))
    const named = [`refund ${op(3)} succeeded "ok"`, `lookup ${op(0)} failed: the tool threw`, `audit ${op(4)} succeeded "ok"`, `charge ${op(1)} succeeded "ok"`, `email ${op(2)} succeeded "ok"`, 'echo inv-other/s1/0 succeeded "ok"']
    const whole = await cli(['log', location])
    assert.is(whole.code, 0, whole.stderr)
    assert.equal(settledLines(whole.stdout), named)
    // The dispatches are before --from (seq 13 is the first settle), or filtered out: read through the invocations' indexes.
    const cases: [string[], string[]][] = [
      [['--from', '13'], named],
      [['--type', 'tool.settled'], named],
      [['--last', '3', '--type', 'tool.settled'], named.slice(-3)],
      [['--last', '2'], named.slice(-2)],
      [['--invocation', 'inv-par', '--from', '13'], named.slice(0, 5)],
    ]
    for (const [args, expected] of cases) {
      const result = await cli(['log', location, ...args])
      assert.is(result.code, 0, result.stderr)
      assert.equal(settledLines(result.stdout), expected, args.join(' '))
    }
    // --json: each line the fact as written, nothing added.
    const json = await cli(['log', location, '--type', 'tool.settled', '--json'])
    assert.equal(json.stdout.trimEnd().split('\n').map((line) => JSON.parse(line).fact), [
      facts.settled(op(3)), facts.failed(op(0)), facts.settled(op(4)), facts.settled(op(1)), facts.settled(op(2)), facts.settled('inv-other/s1/0'),
    ])
  })))

test('log stops quietly, exit 0 and its log closed, when its reader goes away (| head -1)', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    // Far more output than a pipe buffers (64 KiB), so the writes outlive the reader.
    await log.appendAll(Array.from({ length: 400 }, (_, i) => completeInvocation(`r${i}`)).flat())
    const total = log.head().highWater
    await log.close()
    const { code, firstLine, stderr } = await new Promise<{ code: number | null; firstLine: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [...BUILT_CLI, 'log', location], { stdio: ['ignore', 'pipe', 'pipe'], env: cliEnv })
      let firstLine = ''
      let stderr = ''
      child.stdout.once('data', (chunk: Buffer) => {
        firstLine = chunk.toString().split('\n')[0] as string
        child.stdout.destroy() // what `head -1` does after its line
      })
      child.stderr.on('data', (chunk) => (stderr += chunk))
      child.on('error', reject)
      child.on('close', (code) => resolve({ code, firstLine, stderr }))
    })
    assert.match(firstLine, /^#\s+1 /)
    assert.is(code, 0, stderr)
    assert.not.match(stderr, /EPIPE|error/i)
    assert.not.match(stderr, /fact\(s\) shown/, 'it stopped before the end')
    const reopened = await EventLog.open(location) // the lock was released: the command closed its log
    try {
      assert.is(reopened.head().highWater, total)
    } finally {
      await reopened.close()
    }
  })))

/** The processes whose parent is `pid` (Linux: read from /proc). */
function childrenOf(pid: number): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue // ended meanwhile
    }
    // pid (comm) state ppid …: the command may hold spaces and parentheses, the last ")" ends it.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
    if (ppid === pid) found.push(Number(entry))
  }
  return found
}

/** A process's state letter (`R`, `S`, `T` for stopped, …), from /proc; undefined once it has ended. */
function stateOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]
  } catch {
    return undefined
  }
}

/** The signals sent to a process and not yet delivered (Linux: the masks in /proc/PID/status). */
function pendingSignals(pid: number): Set<string> {
  let status: string
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8')
  } catch {
    return new Set()
  }
  let mask = 0n
  for (const match of status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)) mask |= BigInt(`0x${match[1]}`)
  return new Set(Object.entries(constants.signals).filter(([, number]) => (mask >> BigInt(number - 1)) & 1n).map(([name]) => name))
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

test('a signal sent to the demo alone ends the phase process it runs too, and the demo ends by that signal', () =>
  withTempDir((dir) =>
    withTimeout(async () => {
      const demo = spawn(process.execPath, [...BUILT_CLI, 'demo', '--dir', join(dir, 'demo')], { stdio: ['ignore', 'pipe', 'pipe'], env: cliEnv })
      let stdout = ''
      let stderr = ''
      demo.stderr.on('data', (chunk) => (stderr += chunk))
      const closed = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => demo.on('close', (code, signal) => resolve([code, signal])))
      let phases: number[] = []
      try {
        // Process 1 has printed: it runs.
        await new Promise<void>((resolve) => {
          demo.stdout.on('data', (chunk) => {
            stdout += chunk
            if (stdout.includes('[process 1] ')) resolve()
          })
        })
        // Between two phases there is none for a moment: looked for again until one runs. It is
        // stopped (SIGSTOP), so that it cannot end by itself before the demo passes the signal on.
        let stopped: number | undefined
        for (let tries = 0; stopped === undefined && tries < 200; tries += 1) {
          phases = childrenOf(demo.pid ?? 0)
          const [phase] = phases
          if (phases.length === 1 && phase !== undefined) {
            process.kill(phase, 'SIGSTOP')
            // Stopped once the kernel has delivered it; or ended first (then the next phase is looked for).
            let state = stateOf(phase)
            for (let waits = 0; state !== undefined && state !== 'T' && state !== 'Z' && waits < 100; waits += 1) {
              await new Promise((resolve) => setTimeout(resolve, 2))
              state = stateOf(phase)
            }
            if (state === 'T') stopped = phase
            else if (state !== undefined) process.kill(phase, 'SIGCONT')
          }
          if (stopped === undefined) await new Promise((resolve) => setTimeout(resolve, 10))
        }
        if (stopped === undefined) throw new Error('no phase process was found running and stopped')
        const reached = Math.max(...[...stdout.matchAll(/^\[process ([0-9])/gm)].map((match) => Number(match[1])))
        demo.kill('SIGTERM')
        // The demo passes SIGTERM on: it waits, pending, in the stopped phase process.
        let pending = false
        for (let tries = 0; !pending && tries < 500; tries += 1) {
          pending = pendingSignals(stopped).has('SIGTERM')
          if (!pending) await new Promise((resolve) => setTimeout(resolve, 10))
        }
        assert.ok(pending, 'the phase process was sent SIGTERM by the demo')
        process.kill(stopped, 'SIGCONT')
        const [code, signal] = await closed
        // Ended by the signal itself, as a shell loop running it expects (it would say 143).
        assert.equal([code, signal], [null, 'SIGTERM'], stderr)
        assert.match(stderr, /demo stopped by SIGTERM: the process it was running ended too/)
        const later = [...stdout.matchAll(/^\[process ([0-9])/gm)].filter((match) => Number(match[1]) > reached + 1)
        assert.equal(later.map((match) => match[0]), [], 'no phase after the one running started')
        assert.not.match(stdout, /demo passed/)
        assert.is(isAlive(stopped), false, 'the phase process ended with the demo')
      } finally {
        demo.kill('SIGKILL')
        for (const pid of phases.filter(isAlive)) process.kill(pid, 'SIGKILL') // a stopped one too
        await closed
      }
    }, 30_000),
  ))

/**
 * An OpenAI-compatible endpoint on 127.0.0.1 that answers as a model would: `calls` drives the
 * demo's tools one call per answer, `none` answers every request with text. Every request is kept.
 */
async function modelEndpoint(mode: 'calls' | 'none'): Promise<{ baseUrl: string; requests: { authorization?: string | undefined }[]; close(): Promise<void> }> {
  const requests: { authorization?: string | undefined }[] = []
  const server = createServer((request, response) => {
    let text = ''
    request.on('data', (chunk: Buffer) => (text += chunk))
    request.on('end', () => {
      requests.push({ authorization: request.headers.authorization })
      const messages = (JSON.parse(text) as { messages: { role: string; content: string | null }[] }).messages
      const users = messages.filter((m) => m.role === 'user').map((m) => String(m.content))
      const results = messages.filter((m) => m.role === 'tool').length
      const call = (name: string, args: object) => ({ role: 'assistant', content: null, tool_calls: [{ id: `call_${requests.length}`, type: 'function', function: { name, arguments: JSON.stringify(args) } }] })
      const text_ = (content: string) => ({ role: 'assistant', content })
      let message: object = text_('Done.')
      if (mode === 'calls' && users[0]?.startsWith('Ship order') && results < 2) message = call('append_ledger', { entry: results === 0 ? 'order #1001 shipped' : 'invoice #1001 sent' })
      if (mode === 'calls' && users[0]?.startsWith('Refund order')) message = call('refund', { order: '1002' })
      if (mode === 'none') message = text_('I cannot do that myself.')
      const toolCalls = 'tool_calls' in message
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message, finish_reason: toolCalls ? 'tool_calls' : 'stop' }] }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

test('demo against a real endpoint (OPENAI_BASE_URL): passes when the model calls the tools, and otherwise stops at the first step with the reason', () =>
  withTempDir((dir) =>
    withTimeout(async () => {
      const calls = await modelEndpoint('calls')
      try {
        const env = { OPENAI_BASE_URL: calls.baseUrl, OPENAI_API_KEY: 'sk-real-mode-0123456789abcdef', OPENAI_MODEL: 'a-model' }
        const passed = await cli(['demo', '--dir', join(dir, 'calls')], env)
        assert.is(passed.code, 0, passed.stdout + passed.stderr)
        assert.match(passed.stdout, /demo passed: every step behaved as described/)
        // The holds were taken while the first and the second request were in flight, not before any request.
        const facts = await cli(['log', join(dir, 'calls', 'log'), '--session', 'demo', '--json'], env)
        const types = facts.stdout.trim().split('\n').map((line) => (JSON.parse(line) as { fact: { type: string } }).fact.type)
        assert.equal(types.slice(0, 8), ['invocation.opened', 'model.requested', 'model.completed', 'tool.dispatched', 'tool.settled', 'hold.entered', 'hold.released', 'model.requested'])
        assert.ok(calls.requests.every((request) => request.authorization === 'Bearer sk-real-mode-0123456789abcdef'))
      } finally {
        await calls.close()
      }
      const none = await modelEndpoint('none')
      try {
        // Credentials in the URL are refused by the engine, and never printed by the demo.
        const withUser = none.baseUrl.replace('http://', 'http://alice:url-password-42@')
        const refused = await cli(['demo', '--dir', join(dir, 'user')], { OPENAI_BASE_URL: withUser })
        assert.is(refused.code, 1)
        assert.not.match(refused.stdout + refused.stderr, /url-password-42|alice/)
        assert.match(refused.stdout, /^model: http:\/\/\*\*\*:\*\*\*@127\.0\.0\.1:/m)
        const failed = await cli(['demo', '--dir', join(dir, 'none')], { OPENAI_BASE_URL: none.baseUrl })
        assert.is(failed.code, 1, failed.stdout + failed.stderr)
        assert.match(failed.stderr, /^\[process 1\] the run ended completed before the demo could hold it: with a real model the demo needs it to call append_ledger/m)
        assert.match(failed.stdout, /stopped: step 1–2 did not behave as described .*; the steps after it depend on it and were not run/)
        assert.not.match(failed.stdout, /process 2|process 3|process 4/, 'no later step ran')
        assert.match(failed.stderr, /^demo failed: 1 step\(s\) did not behave as described: process 1 sealed the run and exited$/m)
      } finally {
        await none.close()
      }
    }, 90_000),
  ))

test('log (--runs, --json) and recover escape control characters a directly appended fact carries (ESC, C1, OSC 8, bidi), and nothing else', () =>
  withTempDir((dir) =>
    withTimeout(async () => {
      const location = join(dir, 'log')
      // What no engine writes but a direct append may: a failure class and a tool name that drive a terminal.
      const hostile = 'x\u001b[31mRED\u009b2J\u001b]8;;https://evil.example\u0007link\u202eevil'
      const log = await EventLog.open(location)
      try {
        await log.appendAll(new EventMaker(invocationOf('ended', 'session-hostile')).many([facts.opened(), facts.ended({ status: 'failed', class: hostile })]))
        const open = new EventMaker(invocationOf('open', 'session-hostile'))
        await log.appendAll(
          open.many([
            facts.opened(),
            facts.requested('s1'),
            facts.completed('s1', [{ callId: 'call-op1', name: hostile, arguments: '{}' }]),
            { type: 'tool.dispatched', operationId: 'op1', callId: 'call-op1', name: hostile, input: { note: hostile } },
          ]),
        )
      } finally {
        await log.close()
      }
      const raw = /[\u001b\u0007\u0080-\u009f\u202e]/
      // From the build (`npm test` builds first): no compile per command.
      const runs = await cli(['log', location, '--session', 'session-hostile', '--runs'])
      const runsJson = await cli(['log', location, '--session', 'session-hostile', '--runs', '--json'])
      const json = await cli(['log', location, '--json'])
      const recover = await cli(['recover', location])
      for (const [what, result] of [['--runs', runs], ['--runs --json', runsJson], ['--json', json], ['recover', recover]] as const) {
        assert.is(result.code, 0, `${what}: ${result.stderr}`)
        assert.not.match(result.stdout + result.stderr, raw, `${what} printed a raw control character`)
        assert.match(result.stdout, /\\u001b\[31mRED\\u009b2J/, `${what} shows it escaped`)
      }
      assert.match(runs.stdout, /failed x\\u001b\[31mRED\\u009b2J\\u001b\]8;;https:\/\/evil\.example\\u0007link\\u202eevil/)
      // Escaped JSON is still JSON, and reads back as the very text.
      for (const line of json.stdout.trim().split('\n')) JSON.parse(line)
      const ended = runsJson.stdout.trim().split('\n').map((line) => JSON.parse(line) as { outcome?: { class?: string } }).find((run) => run.outcome?.class !== undefined)
      assert.is(ended?.outcome?.class, hostile, 'the JSON value is the fact\'s text')
    }, 60_000),
  ))

test('demo refuses to empty a directory holding a log it did not write', () =>
  bounded30(withTempDir(async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    await log.append(new EventMaker(invocationOf('mine')).next(facts.opened()))
    await log.close()
    const result = await cli(['demo', '--dir', dir])
    assert.is(result.code, 2, 'a usage error: the demo did not run')
    assert.match(result.stderr, /a log the demo did not write/)
    const reopened = await EventLog.open(join(dir, 'log'))
    try {
      assert.is((await reopened.verify()).events, 1, 'the log is untouched')
    } finally {
      await reopened.close()
    }
  })))

test('demo refuses an empty --dir, a file, and a directory that cannot be made, each with its reason (exit 2)', () =>
  bounded30(withTempDir(async (dir) => {
    const file = join(dir, 'a-file')
    await writeFile(file, 'mine')
    for (const [given, reason] of [
      ['', /--dir needs a directory/],
      [file, /is a file, not a directory/],
      [join(file, 'below'), /cannot be made \(ENOTDIR\)/],
    ] as const) {
      const result = await cli(['demo', '--dir', given])
      assert.is(result.code, 2, `--dir ${JSON.stringify(given)}: ${result.stderr}`)
      assert.match(result.stderr, reason)
      assert.not.match(result.stderr, /^error: E[A-Z]+:/m, 'not a raw system error')
    }
    assert.is(await readFile(file, 'utf8'), 'mine', 'the file is untouched')
  })))

test('usage errors exit 2 and say what is wrong', () =>
  withTimeout(
    (async () => {
      const unknown = await cli(['frobnicate'])
      assert.is(unknown.code, 2)
      assert.match(unknown.stderr, /^error: unknown command frobnicate$/m, 'a name like no command gets no guess')
      // An object's inherited member is no command (it used to crash with a TypeError).
      for (const inherited of ['toString', 'constructor', '__proto__']) {
        const named = await cli([inherited])
        assert.is(named.code, 2, `${inherited}: ${named.stderr}`)
        assert.match(named.stderr, new RegExp(`^error: unknown command ${inherited}`, 'm'))
        const helped = await cli(['help', inherited])
        assert.is(helped.code, 2, `help ${inherited}: ${helped.stderr}`)
      }
      const misspelt = await cli(['verfy', 'somewhere'])
      assert.is(misspelt.code, 2)
      assert.match(misspelt.stderr, /^error: unknown command verfy: did you mean verify\?$/m)
      const missing = await cli(['verify'])
      assert.is(missing.code, 2)
      const badType = await cli(['log', 'somewhere', '--type', 'no.such'])
      assert.is(badType.code, 2)
      assert.match(badType.stderr, /unknown fact type no\.such; known: invocation\.opened, .*, or a family: invocation, model, tool, hold \(tool is tool\.\*\)/)
      const help = await cli(['log', '--help'])
      assert.is(help.code, 0)
      assert.match(help.stdout, /usage: factstate log/)
      // A usage error is its one line, the synopsis and where the options are: not the page of help under which it got lost.
      const bogus = await cli(['log', 'somewhere', '--bogus'])
      assert.is(bogus.code, 2)
      const lines = bogus.stderr.trimEnd().split('\n')
      assert.is(lines[0], 'error: unknown option --bogus')
      const synopsis = help.stdout.split(/\n\s*\n/)[0] as string
      assert.equal(lines.slice(1), [...synopsis.split('\n'), "run 'factstate log --help' for the options"])
      assert.ok(help.stdout.trimEnd().split('\n').length > lines.length + 5, 'the help itself is longer than what a usage error prints')
      const manifest = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
      for (const flag of ['--version', '-V']) {
        const version = await cli([flag])
        assert.equal([version.code, version.stdout.trim()], [0, `factstate ${manifest.version}`], flag)
      }
    })(),
    30_000,
  ))

test('demo refuses with exit 3, deleting nothing, while its last log is open in another process', () =>
  bounded30(withTempDir(async (dir) => {
    await writeFile(join(dir, '.factstate-demo'), 'an earlier demo\n')
    const held = await EventLog.open(join(dir, 'log'))
    try {
      await held.append(new EventMaker(invocationOf('earlier')).next(facts.opened()))
      const result = await cli(['demo', '--dir', dir])
      assert.is(result.code, 3, result.stderr)
      assert.match(result.stderr, /^error: LOG_WRITER_BUSY: another process has the log of the last demo in .* open \(.*\); nothing was deleted$/m)
      assert.match(result.stderr, /^remedy: stop that process, or run the demo with another --dir$/m)
      assert.is((await held.verify()).events, 1, 'the log in use is whole')
    } finally {
      await held.close()
    }
    assert.equal((await readdir(dir)).sort(), ['.factstate-demo', 'log'])
  })))

test('demo empties a directory it may not remove (the current one, --dir .) instead of failing on it', () =>
  bounded30(withTempDir(async (dir) => {
    await writeFile(join(dir, '.factstate-demo'), 'an earlier demo\n')
    await mkdir(join(dir, 'log'))
    await writeFile(join(dir, 'ledger.jsonl'), '{}\n')
    // A path ending in "." names the directory itself, which rm cannot remove (EINVAL), as with "--dir .".
    await prepare(`${dir}/.`)
    assert.equal(await readdir(dir), ['.factstate-demo'], 'emptied, and marked again')
  })))

test("log, verify, recover and inspect refuse another program's LevelDB database (exit 2) and write nothing into it", () =>
  bounded30(withTempDir(async (dir) => {
    const theirs = join(dir, 'theirs')
    const db = new ClassicLevel<string, string>(theirs)
    await db.put('user:1', 'Ada')
    await db.close()
    for (const command of ['log', 'verify', 'recover', 'inspect']) {
      const result = await cli([command, theirs])
      assert.is(result.code, 2, `${command}: ${result.stderr}`)
      assert.match(result.stderr, /no factstate log at .*another program's LevelDB database/)
    }
    assert.not.ok((await readdir(theirs)).some((name) => name.startsWith('FACTSTATE')), 'no anchor, no filter')
    const again = new ClassicLevel<string, string>(theirs)
    try {
      assert.equal(await again.keys().all(), ['user:1'])
    } finally {
      await again.close()
    }
  })))

test('log: a time past what a Date holds is printed as its number; --from after --to is a usage error; help <command>, no command, and output that cannot be written', () =>
  bounded30(withTempDir(async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    try {
      await log.append({ ...new EventMaker(invocationOf('far')).next(facts.opened()), recordedAt: Number.MAX_SAFE_INTEGER })
    } finally {
      await log.close()
    }
    const far = await cli(['log', location])
    assert.is(far.code, 0, far.stderr)
    assert.match(far.stdout, new RegExp(`@${Number.MAX_SAFE_INTEGER}`))
    const backwards = await cli(['log', location, '--from', '5', '--to', '3'])
    assert.is(backwards.code, 2)
    assert.match(backwards.stderr, /--from 5 is after --to 3/)
    const helpLog = await cli(['help', 'log'])
    assert.is(helpLog.code, 0)
    assert.match(helpLog.stdout, /^usage: factstate log/)
    const none = await cli([])
    assert.is(none.code, 2)
    assert.is(none.stdout, '', 'usage on a missing command goes to stderr')
    assert.match(none.stderr, /^usage: factstate <command>/)
    // Standard output that fails with something other than a closed pipe: Linux's /dev/full answers every write with ENOSPC.
    // Both after a log was opened and closed, and when the write was the command's last step (help).
    for (const args of [['verify', location], ['help', 'log']]) {
      const deviceFull = openSync('/dev/full', 'w')
      const full = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
        const child = spawn(process.execPath, [...BUILT_CLI, ...args], { stdio: ['ignore', deviceFull, 'pipe'], env: cliEnv })
        let stderr = ''
        child.stderr?.on('data', (chunk) => (stderr += chunk))
        child.on('error', reject)
        child.on('close', (code) => resolve({ code, stderr }))
      }).finally(() => closeSync(deviceFull))
      assert.is(full.code, 4, `${args.join(' ')}: ${full.stderr}`)
      assert.match(full.stderr, /ENOSPC/)
      assert.not.match(full.stderr, /\n\s+at /, 'no stack trace')
    }
  })))

test("log prints a child run's id once, where its session, turn, run and invocation are that one id, in facts and in --runs", () =>
  bounded30(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      const id = `inv-sup.step-1.0.${'w'.repeat(100)}`
      const child = { sessionId: id, turnId: id, runId: id, invocationId: id }
      try {
        await log.appendAll(completeInvocation('sup', 'desk'))
        await log.append(new EventMaker(child).next(facts.opened('draft it')))
      } finally {
        await log.close()
      }
      const lines = await cli(['log', location, '--type', 'invocation.opened'])
      assert.is(lines.code, 0, lines.stderr)
      const [parentLine, childLine] = lines.stdout.trim().split('\n')
      assert.match(parentLine ?? '', / {2}desk\/turn-sup\/run-sup\/inv-sup {2}invocation\.opened/, 'distinct ids are all printed')
      assert.is((childLine ?? '').split(id).length - 1, 1, 'the one id, once')
      assert.match(childLine ?? '', new RegExp(`^#\\s+\\d+ {2}\\S+ {2}${id.replaceAll('.', '\\.')} {2}invocation\\.opened`))
      const runs = await cli(['log', location, '--session', id, '--runs'])
      assert.is(runs.code, 0, runs.stderr)
      assert.is(runs.stdout.split(id).length - 1, 1, 'once in --runs too')
      assert.match(runs.stdout, new RegExp(`^${id.replaceAll('.', '\\.')} {2}message {2}open`))
    })))

test('log --sessions lists the sessions in id order with their last run, --prefix only those that begin with it; --json as log.sessions gives them; usage errors', () =>
  bounded30(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      try {
        await log.appendAll(completeInvocation('z', 'alpha'))
        await log.appendAll(new EventMaker(invocationOf('a', 'alpha')).many([facts.opened(), facts.requested('s1')]))
        await log.appendAll(completeInvocation('ab', 'alpha.b'))
        await log.appendAll(completeInvocation('b', 'beta'))
        // A child run under childRunFor's ids: its session, turn, run and invocation are one id.
        const kid = { sessionId: 'gamma.kid', turnId: 'gamma.kid', runId: 'gamma.kid', invocationId: 'gamma.kid' }
        const parent = { invocation: invocationOf('b', 'beta'), operationId: 'inv-b/step-1/0' }
        await log.appendAll(
          completeInvocation('kid', 'gamma.kid').map((event) => {
            const fact = event.fact.type === 'invocation.opened' && event.fact.input.kind === 'message' ? { ...event.fact, input: { ...event.fact.input, parent } } : event.fact
            return { ...event, invocation: kid, fact }
          }),
        )
      } finally {
        await log.close()
      }
      const all = await cli(['log', location, '--sessions'])
      assert.is(all.code, 0, all.stderr)
      assert.equal(all.stdout.trim().split('\n').map((line) => line.replace(/ {2}#\d+–#\d+$/, '')), [
        'alpha  run-a  turn-a  inv-a  message  open',
        'alpha.b  run-ab  turn-ab  inv-ab  message  completed',
        'beta  run-b  turn-b  inv-b  message  completed',
        // Its one id said once, as log prints a child run's facts.
        'gamma.kid  message  child of inv-b/step-1/0 (session beta)  completed',
      ])
      assert.match(all.stderr, /^4 session\(s\); log high-water \d+/)
      const some = await cli(['log', location, '--sessions', '--prefix', 'alpha.'])
      assert.equal([some.code, some.stdout.trim().split('\n').map((line) => line.split('  ')[0])], [0, ['alpha.b']])
      assert.match(some.stderr, /^1 session\(s\) beginning with alpha\.;/)
      const json = await cli(['log', location, '--sessions', '--json'])
      const reopened = await EventLog.open(location)
      try {
        assert.equal(json.stdout.trim().split('\n').map((line) => JSON.parse(line) as unknown), await reopened.sessions())
      } finally {
        await reopened.close()
      }
      for (const [args, message] of [
        [['--sessions', '--runs'], /--sessions lists sessions and --runs the runs of one/],
        [['--sessions', '--session', 'alpha'], /--sessions does not combine with --session/],
        [['--sessions', '--follow'], /--sessions does not combine with --follow/],
        [['--prefix', 'alpha'], /--prefix is for --sessions/],
        [['--sessions', '--prefix', 'a b'], /--prefix takes the start of an id/],
      ] as const) {
        const refused = await cli(['log', location, ...args])
        assert.is(refused.code, 2, args.join(' '))
        assert.match(refused.stderr, message, args.join(' '))
      }
    })))

test('log --sessions --recent lists the sessions most recently active first (a continuation moves its session to the top), --prefix only those that begin with it, --json as log.sessions({ order: \'recent\' }) gives them; --recent alone is a usage error', () =>
  bounded30(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const log = await EventLog.open(location)
      try {
        await log.appendAll(completeInvocation('a1', 'alpha'))
        await log.appendAll(completeInvocation('b1', 'beta'))
        await log.appendAll(completeInvocation('ab', 'alpha.b'))
        // beta continued: its session moves to the top.
        const source = (await log.runSource('beta', 'run-b1'))?.boundary
        assert.ok(source)
        const opened = facts.opened('again') as Extract<Fact, { type: 'invocation.opened' }>
        await log.appendAll(new EventMaker(invocationOf('b2', 'beta')).many([{ ...opened, input: { kind: 'continuation', source, content: 'again' } }, facts.requested('s1')]))
      } finally {
        await log.close()
      }
      const recent = await cli(['log', location, '--sessions', '--recent'])
      assert.is(recent.code, 0, recent.stderr)
      assert.equal(recent.stdout.trim().split('\n').map((line) => line.replace(/ {2}#\d+–#\d+$/, '')), [
        'beta  run-b2  turn-b2  inv-b2  continuation of run-b1  open',
        'alpha.b  run-ab  turn-ab  inv-ab  message  completed',
        'alpha  run-a1  turn-a1  inv-a1  message  completed',
      ])
      assert.match(recent.stderr, /^3 session\(s\), most recently active first; log high-water \d+/)
      const some = await cli(['log', location, '--sessions', '--recent', '--prefix', 'alpha'])
      assert.equal([some.code, some.stdout.trim().split('\n').map((line) => line.split('  ')[0])], [0, ['alpha.b', 'alpha']])
      assert.match(some.stderr, /^2 session\(s\) beginning with alpha, most recently active first;/)
      const json = await cli(['log', location, '--sessions', '--recent', '--json'])
      assert.is(json.code, 0, json.stderr)
      const reopened = await EventLog.open(location)
      try {
        assert.equal(json.stdout.trim().split('\n').map((line) => JSON.parse(line) as unknown), await reopened.sessions({ order: 'recent' }))
      } finally {
        await reopened.close()
      }
      const refused = await cli(['log', location, '--recent'])
      assert.is(refused.code, 2)
      assert.match(refused.stderr, /--recent is for --sessions/)
    })))

test("pending --unanswered: a turn with settled effects cancelled by a shutdown is to be finished; one cancelled otherwise may be a user's stop, and its line says both (a cancel without a reason in words); a child's says only to settle it through its supervisor, and one whose supervisor has run since says only that nothing waits for it, and the hint does not count it", () =>
  bounded30(
    withTempDir(async (dir) => {
      const location = join(dir, 'log')
      const supervisor = invocationOf('sup', 'desk')
      const withEffect = (name: string, session: string, source: string, parent?: { invocation: typeof supervisor; operationId: string }): ReturnType<EventMaker['many']> => {
        const opened = facts.opened(`task ${name}`) as Extract<Fact, { type: 'invocation.opened' }>
        if (parent !== undefined && opened.input.kind === 'message') opened.input.parent = parent
        return new EventMaker(invocationOf(name, session)).many([
          opened,
          facts.requested('s1'),
          facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]),
          facts.dispatched('op1'),
          facts.settled('op1'),
          facts.ended({ status: 'cancelled', source }),
        ])
      }
      const log = await EventLog.open(location)
      try {
        await log.appendAll(completeInvocation('sup', 'desk'))
        await log.appendAll(withEffect('shut', 'S', 'shutdown'))
        await log.appendAll(withEffect('stop', 'U', 'user-stop'))
        await log.appendAll(withEffect('plain', 'C', 'cancel'))
        await log.appendAll(withEffect('writer', 'writer-of-desk', 'signal', { invocation: supervisor, operationId: 'inv-sup/step-1/0' }))
      } finally {
        await log.close()
      }
      const finish = 'finish the turn \\(a continuation without content\\) rather than resend its message'
      const lines = async () => {
        const listed = await cli(['pending', location, '--unanswered'])
        assert.is(listed.code, 0, listed.stderr)
        return listed.stdout.trim().split('\n')
      }
      const hint = async () => (await cli(['pending', location])).stderr.trim().split('\n').filter((line) => line.startsWith('hint:'))
      const [plain, shut, stop, writer] = await lines()
      // A handle's cancel() without a reason: the engine's default 'cancel', said in words.
      assert.match(plain ?? '', new RegExp(`^C: unanswered turn turn-plain: .* ended cancelled cancel at seq \\d+; its run's tools with effects already settled: echo succeeded; a cancel without a reason, not a shutdown's: if the user stopped it, leave it \\(.*\\); if not, ${finish}$`))
      assert.match(shut ?? '', new RegExp(`^S: unanswered turn turn-shut: .* ended cancelled shutdown at seq \\d+; its run's tools with effects already settled: echo succeeded; ${finish}$`))
      assert.match(stop ?? '', new RegExp(`^U: unanswered turn turn-stop: .* ended cancelled user-stop at seq \\d+; its run's tools with effects already settled: echo succeeded; a cancel \\(user-stop\\), not a shutdown's: if the user stopped it, leave it \\(their next message continues the session, with these calls' results in its transcript\\); if not, ${finish}$`))
      // A child's turn (its supervisor not run since): only the child's advice, never to leave it or finish it alone.
      assert.match(writer ?? '', /^writer-of-desk: unanswered turn turn-writer: .* ended cancelled signal at seq \d+; its run's tools with effects already settled: echo succeeded; a child run of inv-sup\/step-1\/0 \(session desk\): settle it through its supervisor's recovery$/)
      assert.equal(await hint(), ['hint: 4 turns ended unanswered (cancelled or failed): factstate pending --unanswered lists them'])
      // The supervisor has run since (told the writer's turn was given up, say): nothing waits for it.
      const later = await EventLog.open(location)
      try {
        await later.appendAll(completeInvocation('sup-2', 'desk'))
      } finally {
        await later.close()
      }
      const after = await lines()
      assert.is(after.length, 4)
      assert.match(after[3] ?? '', /^writer-of-desk: unanswered turn turn-writer: .* ended cancelled signal at seq \d+; its run's tools with effects already settled: echo succeeded; a child run of inv-sup\/step-1\/0 \(session desk\), whose supervisor has run since \(run run-sup-2\): nothing waits for this turn$/)
      assert.equal(await hint(), ['hint: 3 turns ended unanswered (cancelled or failed): factstate pending --unanswered lists them'])
    }),
  ))

test.run()
