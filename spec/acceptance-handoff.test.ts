/**
 * The acceptance scenario of DESIGN §9, transcribed from shared/seeds/handoff.rs: run twice,
 * plain and as a continuation. Real LevelDB directory, real HTTP server on 127.0.0.1.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import {
  Engine,
  EventLog,
  type Fact,
  type HandoffIntent,
  ModelExecutor,
  type RunInput,
  type ToolDefinition,
  foldFacts,
  recoverInvocations,
  stateOf,
  successorOf,
} from '../index.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { withTempDir, withTimeout } from './support/temp.js'

const SECRET = 'do-not-persist-this-secret'

function intent(id: string): HandoffIntent {
  return {
    handoffId: id,
    hostEpoch: 'host',
    rootRunId: 'run-first',
    successorRunId: `run-${id}`,
    successorInvocationId: `invocation-${id}`,
    claimId: `claim-${id}`,
  }
}

function echoTool(counter: { count: number }): ToolDefinition {
  return {
    name: 'echo',
    description: 'Echoes its input',
    inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
    async execute(input) {
      counter.count += 1
      return input
    },
  }
}

function input(baseUrl: string, name: string, counter: { count: number }): RunInput {
  return {
    invocation: { sessionId: 'session', turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted', apiKey: SECRET },
    configuration: { cwd: '/workspace/project', workspaceIdentity: 'ef751105-55b5-4d65-a364-646281586a17' },
    maxSteps: 3,
    tools: [echoTool(counter)],
    work: { kind: 'message', content: `question ${name}` },
  }
}

const opened = (facts: Fact[]) => facts.filter((fact) => fact.type === 'invocation.opened').length

async function notWithin<T>(promise: Promise<T>, ms: number): Promise<boolean> {
  const marker = Symbol('pending')
  const result = await Promise.race([promise.then(() => 'settled' as const, () => 'settled' as const), new Promise((r) => setTimeout(() => r(marker), ms))])
  return result === marker
}

async function scenario(manual: boolean): Promise<void> {
  await withTempDir(async (directory) => {
    const path = join(directory, 'events')
    const server = await scriptedModelServer([
      answer.toolCalls([{ name: 'echo', arguments: { value: 42 } }], { hold: true }),
      answer.toolCalls([{ name: 'unavailable', arguments: {} }], { hold: true }),
      answer.text('done'),
    ])
    const count = { count: 0 }
    let log = await EventLog.open(path)
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
      const run = input(server.baseUrl, 'first', count)
      run.mainOutputLimit = 120
      if (manual) {
        run.requestFingerprint = 'manual-resume'
        const source = { ...run.invocation, turnId: 'turn-source', runId: 'run-source', invocationId: 'invocation-source' }
        const branch = { ...source, turnId: 'turn-branch', runId: 'run-branch', invocationId: 'invocation-branch' }
        const execution = { model: 'scripted', providerOptions: {}, cwd: run.configuration.cwd, tools: { catalogDigest: `sha256:${'0'.repeat(64)}`, names: [] } }
        for (const [invocation, text] of [[source, 'question source'], [branch, 'unrelated branch']] as const) {
          await log.append({
            id: `${invocation.invocationId}/1`,
            recordedAt: 1,
            invocation,
            fact: { type: 'invocation.opened', input: { kind: 'message', content: text }, configuration: run.configuration, execution },
          })
          await log.append({ id: `${invocation.invocationId}/2`, recordedAt: 2, invocation, fact: { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'user' } } })
        }
        const prefix = await log.runSource('session', 'run-source')
        assert.ok(prefix)
        run.work = { kind: 'continuation', source: prefix.boundary }
      }
      const configuration = run.configuration
      const running = await engine.start(run)
      await server.seen(0)
      const gate = running.handoff()
      const reservation = gate.reserve(intent('cancelled'))
      const ready = reservation.ready()
      assert.ok(await notWithin(ready, 30), 'ready() waits for the safe point')
      assert.is(count.count, 0, 'model request has not returned a tool')
      server.release(0)
      const held = await ready
      assert.is(count.count, 1)
      let prefix = await log.prefix(100, 128 * 1024)
      assert.ok(prefix.events.some((event) => event.event.fact.type === 'tool.settled'))
      assert.is(prefix.projectInvocation('invocation-first').terminal, null)
      assert.is(running.state(), 'held')
      await held.release()

      await server.seen(1)
      const next = gate.reserve(intent('committed'))
      server.release(1)
      const sealing = await next.ready()
      const expected = sealing.preview()
      assert.is(expected.execution.replayBase !== undefined, manual)
      assert.is(expected.remainingSteps, 1)
      const receipt = await sealing.commit()
      assert.equal(receipt, expected)
      const outcome = await running.wait()
      assert.equal(outcome, { status: 'handoff_paused', pause: expected })
      await engine.drain()
      assert.is(count.count, 1, 'rejected calls, rollback and seal never repeat effects')
      assert.is(server.requests.length, 2, 'no model request follows the committed hold')
      const before = await log.prefix(100, 128 * 1024)
      assert.is(opened(before.events.map((e) => e.event.fact)), manual ? 3 : 1)
      const last = before.events.at(-1)?.event.fact
      assert.equal(last, { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause: expected } })

      await rejectsWithCode(
        () => engine.start(input(server.baseUrl, 'unrelated', count)),
        'RUN_BUSY',
        'physical sealing does not release the logical Turn to a different admission',
      )
      assert.is((await log.prefix(100, 128 * 1024)).digest, before.digest)
      const firstFacts = before.events.filter((e) => e.event.invocation.invocationId === 'invocation-first').map((e) => e.event.fact)
      assert.is(stateOf(foldFacts(firstFacts)), 'committed', 'the state folded from the log is the sealed one')
      await log.close()

      log = await EventLog.open(path)
      assert.is(await recoverInvocations(log), 0)
      const after = await log.prefix(100, 128 * 1024)
      assert.is(after.digest, before.digest)
      assert.is(after.projectInvocation('invocation-first').terminal, 'paused')
      const sealed = await log.runSource('session', 'run-first')
      const source = sealed?.boundary
      assert.ok(source)
      assert.equal(sealed?.pause, expected, 'runSource gives the sealed pause, read back after reopening')
      const resumed = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
      const successor = (): RunInput => {
        const run = input(server.baseUrl, 'successor', count)
        run.invocation = successorOf(expected.intent, source.invocation)
        run.configuration = configuration
        if (expected.execution.mainOutputLimit !== undefined) run.mainOutputLimit = expected.execution.mainOutputLimit
        run.work = { kind: 'handoff', source, pause: structuredClone(expected) }
        return run
      }
      for (let field = 0; field < 5; field += 1) {
        const changed = successor()
        if (field === 0) delete changed.mainOutputLimit
        if (field === 1) changed.providerOptions = { changed: true }
        if (field === 2) changed.provider.model = 'changed'
        if (field === 3) changed.configuration = { ...changed.configuration, cwd: `${changed.configuration.cwd}/changed` }
        if (field === 4) changed.tools = []
        await rejectsWithCode(() => resumed.start(changed), 'HANDOFF_MISMATCH', `field ${field} must be refused`)
        assert.is((await log.prefix(100, 128 * 1024)).digest, after.digest)
      }
      const final = await resumed.run(successor())
      assert.equal(final, { status: 'completed' })
      await resumed.drain()
      const successorSource = await log.runSource('session', expected.intent.successorRunId)
      assert.ok(successorSource && !('pause' in successorSource), 'a run that completed has no pause')
      assert.is(server.requests.length, 3)
      const messages = server.requests[2]?.body.messages as { role: string; content: unknown }[]
      assert.is(messages.filter((m) => m.role === 'user').length, 1)
      assert.is(messages.filter((m) => m.role === 'tool').length, 2)
      const prompt = JSON.stringify(messages)
      assert.ok(prompt.includes(manual ? 'question source' : 'question first'))
      assert.not.ok(prompt.includes('unrelated branch'))
      assert.is(count.count, 1, 'settled effects are replayed as facts, never executed')
      const finished = await log.prefix(100, 128 * 1024)
      assert.is(finished.projectInvocation('invocation-committed').terminal, 'completed')
      assert.not.ok(JSON.stringify(finished.events).includes(SECRET))
      const second = successor()
      second.invocation = { ...second.invocation }
      await rejectsWithCode(() => resumed.start(second), ['HANDOFF_CLAIMED', 'RUN_INVALID_INPUT'], 'a second successor')
      await log.close()
      for (const file of await readdir(path)) {
        const bytes = await readFile(join(path, file))
        assert.is(bytes.indexOf(SECRET), -1, `the API key is not in ${file}`)
      }
    } finally {
      await log.close()
      await server.close()
    }
  })
}

test('acceptance: hold waits for settlement, rollback keeps the run, the seal survives reopen (plain)', () =>
  withTimeout(scenario(false), 20_000))

test('acceptance: the same as a continuation from an earlier run', () => withTimeout(scenario(true), 20_000))

test.run()
