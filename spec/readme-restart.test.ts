/**
 * The README's start-up loop ("After a crash": recover, then continue what a crash cut short, from
 * `pendingSessions({ unanswered: true })`), run as it is written in real processes: a worker is
 * killed with SIGKILL while one run's model request is in flight, another's tool with effects runs,
 * a third's user has pressed stop (recorded in the application's store, the run not yet ended), and a
 * supervisor's delegate call waits for its child run; a restart runs the loop and is killed right
 * after its recovery, before any continuation; the next restart runs it twice at once (a start-up run
 * twice in one process) and continues each cut-short run once, the stopped one and the child not at
 * all; a third start continues nothing.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { type ScriptedModelServer, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { readmeBlock, repoModuleParts } from './support/readme.js'
import { withTempDir, withTimeout } from './support/temp.js'

/** The README block that recovers and continues: in "After a crash", the one that calls recoverInvocations. */
const startUpLoop = (): Promise<string> => readmeBlock('await recoverInvocations(log', 'one start-up loop in the README', { from: '## After a crash', until: '## Concepts' })

/** The session of the supervisor's child run: childRunFor's ids for its delegate call. */
const CHILD = 'supervisor-i1.step-1.0.writer'

/**
 * The child's module: the application around the README's block (its `declare`d functions defined,
 * `factstate` the repository's). `ROLE`: `worker` starts three runs and waits to be killed;
 * `dies-after-recovery` runs the block and kills itself where it would start the first continuation;
 * `restart` runs the block, waits for what it started and prints the log's runs.
 */
function childModule(block: string): string {
  // Its imports go first (a module's imports are at its top level); its declared functions are the application's, below.
  const { index, imports, lines } = repoModuleParts(block)
  const body = lines.filter((line) => !line.startsWith('declare function ')).join('\n')
  return `${imports}
import { appendFileSync, existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Engine as AppEngine, EventLog as AppLog, ModelExecutor as AppExecutor, childRunFor as appChildRunFor } from '${index}'

const ROLE = process.env.ROLE as string
const SESSIONS = ['uncertain', 'interrupted', 'stopped', 'supervisor', ${JSON.stringify(CHILD)}]
const DIR = process.env.DIR as string
const URLS = JSON.parse(process.env.URLS as string) as Record<string, string>
const log = await AppLog.open(join(DIR, 'log'))
const engine = new AppEngine({ log, model: new AppExecutor({ retries: 0 }) })
const saveNote = {
  name: 'save_note',
  description: 'Saves a note',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
  async execute(_input: unknown, { operationId }: { operationId: string }) {
    appendFileSync(join(DIR, 'notes.txt'), operationId + '\\n')
    if (ROLE !== 'worker') return { saved: true }
    process.stdout.write('tool-started\\n')
    return new Promise(() => undefined) // the worker dies before the note's outcome is recorded
  },
}
const delegate = {
  name: 'delegate',
  description: 'Hands a task to a writer agent',
  inputSchema: { type: 'object', properties: { task: { type: 'string' } } },
  async execute(_input: unknown, context: Parameters<typeof appChildRunFor>[0]) {
    const ids = appChildRunFor(context, 'writer')
    const child = await engine.start({ ...settingsFor(ids.invocation.sessionId), ...ids, work: { kind: 'message', content: 'Write it' } }, { signal: context.signal })
    process.stdout.write('child-started\\n')
    return (await child.wait()).status
  },
}
let checks = 0
function settingsFor(sessionId: string) {
  if (ROLE === 'dies-after-recovery') {
    process.kill(process.pid, 'SIGKILL')
    for (;;);
  }
  return { provider: { kind: 'openai-chat' as const, baseUrl: URLS[sessionId] as string, model: 'stand-in' }, configuration: { cwd: '/srv/notes' }, tools: [saveNote, delegate] }
}
async function effectFound(_op: unknown): Promise<string | undefined> {
  return 'the note was saved; do not save it again'
}
async function stopRequested(sessionId: string): Promise<boolean> {
  // Two passes at once: each check a while after the one before, so both passes list every session
  // before either continues it, and one pass's continuation has started before the other's check ends.
  if (ROLE === 'overlap') await new Promise((resolve) => setTimeout(resolve, 150 * checks++))
  return existsSync(join(DIR, 'stops.txt')) && readFileSync(join(DIR, 'stops.txt'), 'utf8').split('\\n').includes(sessionId)
}
async function decisionFor(_intent: unknown): Promise<string | undefined> {
  return undefined
}
void decisionFor

if (ROLE === 'worker') {
  for (const sessionId of ['uncertain', 'interrupted', 'stopped', 'supervisor']) {
    const ids = { sessionId, turnId: sessionId + '-t1', runId: sessionId + '-r1', invocationId: sessionId + '-i1' }
    await engine.start({ ...settingsFor(sessionId), invocation: ids, work: { kind: 'message', content: 'Save a note' } })
  }
  // The user pressed stop on this one: recorded in the application's store before cancel(), and the process dies first.
  appendFileSync(join(DIR, 'stops.txt'), 'stopped\\n')
  process.stdout.write('started\\n')
  setInterval(() => undefined, 60_000) // alive until killed
}
if (ROLE !== 'worker') {
  const startUp = async () => {
${body}
  }
  await (ROLE === 'overlap' ? Promise.all([startUp(), startUp()]) : startUp())
  await engine.drain()
  const runs: Record<string, unknown[]> = {}
  for (const sessionId of SESSIONS) {
    runs[sessionId] = (await log.runs(sessionId)).map((run) => ({ kind: run.kind, sourceRunId: run.sourceRunId, outcome: run.outcome }))
  }
  process.stdout.write(JSON.stringify(runs) + '\\n')
  await log.close()
}
`
}

function child(file: string, env: Record<string, string>): { process: ChildProcessWithoutNullStreams; lines: AsyncIterator<string>; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> } {
  const proc = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), file], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  proc.stderr.on('data', (chunk) => (stderr += chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal, stderr })))
  return { process: proc, lines: createInterface({ input: proc.stdout })[Symbol.asyncIterator](), exited }
}

/** Reads lines until each of `wanted` has come, in any order. */
async function linesSaying(lines: AsyncIterator<string>, wanted: readonly string[], stderrOf: Promise<string>): Promise<void> {
  const left = new Set(wanted)
  while (left.size > 0) {
    const { value, done } = await lines.next()
    if (done) throw new Error(`the child ended before it said ${[...left].join(', ')}: ${await stderrOf}`)
    left.delete(value)
  }
}

test('the README start-up loop continues each run a crash cut short once, after a restart that died between recovery and continuation and with two passes at once, and skips the stopped one and the child run', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const servers: Record<string, ScriptedModelServer> = {
        uncertain: await scriptedModelServer([answer.toolCalls([{ name: 'save_note', arguments: { text: 'milk' } }]), answer.text('Saved: milk.')]),
        interrupted: await scriptedModelServer([answer.hang(), answer.text('Done.')]),
        stopped: await scriptedModelServer([answer.hang()]),
        supervisor: await scriptedModelServer([answer.toolCalls([{ name: 'delegate', arguments: { task: 'a poem' } }]), answer.text('The writer may have written it.')]),
        [CHILD]: await scriptedModelServer([answer.hang(), answer.text('A poem.')]),
      }
      const running: ChildProcessWithoutNullStreams[] = []
      try {
        const file = join(dir, 'app.mts') // an ES module wherever the temporary directory is
        await writeFile(file, childModule(await startUpLoop()))
        const env = { DIR: dir, URLS: JSON.stringify(Object.fromEntries(Object.entries(servers).map(([name, server]) => [name, server.baseUrl]))) }
        const start = (role: string) => {
          const made = child(file, { ...env, ROLE: role })
          running.push(made.process)
          return made
        }

        // 1. The worker: killed while save_note runs, one request hangs, and a stop is recorded.
        const worker = start('worker')
        await linesSaying(worker.lines, ['tool-started', 'child-started', 'started'], worker.exited.then(({ stderr }) => stderr))
        await Promise.all([servers.interrupted?.seen(0), servers.stopped?.seen(0), servers[CHILD]?.seen(0)])
        worker.process.kill('SIGKILL')
        assert.is((await worker.exited).signal, 'SIGKILL')

        // 2. A restart recovers, then dies where it would start its first continuation.
        const dying = start('dies-after-recovery')
        const died = await dying.exited
        assert.is(died.signal, 'SIGKILL', died.stderr)
        const log = await EventLog.open(join(dir, 'log'))
        try {
          const outcomes = await Promise.all(['uncertain', 'interrupted', 'stopped'].map(async (sessionId) => (await log.runs(sessionId)).map((run) => run.outcome)))
          assert.equal(outcomes, [
            [{ status: 'failed', class: 'outcome_unknown', message: (outcomes[0]?.[0] as { message?: string })?.message }],
            [{ status: 'failed', class: 'host_interrupted', message: (outcomes[1]?.[0] as { message?: string })?.message }],
            [{ status: 'failed', class: 'host_interrupted', message: (outcomes[2]?.[0] as { message?: string })?.message }],
          ], 'recovered, and nothing continued')
        } finally {
          await log.close()
        }

        // 3. The next restart, its loop run twice at once, continues the cut-short runs once each; the
        // stopped one and the child (its supervisor's recovery settles it) stay as they are.
        const restart = start('overlap')
        const { value: printed } = await restart.lines.next()
        const ended = await restart.exited
        assert.is(ended.code, 0, ended.stderr)
        const runs = JSON.parse(printed as string) as Record<string, { kind: string; sourceRunId?: string; outcome?: { status: string; class?: string } }[]>
        const shape = (list: (typeof runs)[string] | undefined) => list?.map((run) => [run.kind, run.sourceRunId, run.outcome?.status, run.outcome?.class])
        assert.equal(shape(runs.uncertain), [
          ['message', undefined, 'failed', 'outcome_unknown'],
          ['continuation', 'uncertain-r1', 'completed', undefined],
        ])
        assert.equal(shape(runs.interrupted), [
          ['message', undefined, 'failed', 'host_interrupted'],
          ['continuation', 'interrupted-r1', 'completed', undefined],
        ])
        assert.equal(shape(runs.stopped), [['message', undefined, 'failed', 'host_interrupted']])
        assert.equal(shape(runs.supervisor), [
          ['message', undefined, 'failed', 'outcome_unknown'],
          ['continuation', 'supervisor-r1', 'completed', undefined],
        ])
        assert.equal(shape(runs[CHILD]), [['message', undefined, 'failed', 'host_interrupted']])
        // The uncertain call was acknowledged with what the check found, and the tool never ran again.
        assert.match(servers.uncertain?.requests[1]?.bodyText ?? '', 'the note was saved; do not save it again')
        assert.is((await readFile(join(dir, 'notes.txt'), 'utf8')).trim().split('\n').length, 1)

        // 4. Another start continues nothing: each run was continued exactly once.
        const again = start('restart')
        const { value: printedAgain } = await again.lines.next()
        assert.is((await again.exited).code, 0)
        assert.equal(JSON.parse(printedAgain as string), runs)
        assert.equal(
          Object.values(servers).map((server) => server.requests.length),
          [2, 2, 1, 2, 1],
          'one request of each continuation, none of the stopped session or the child after the crash',
        )
      } finally {
        for (const proc of running) if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
        await Promise.all(Object.values(servers).map((server) => server.close()))
      }
    }),
    120_000,
    'the README start-up loop',
  ))

test.run()
