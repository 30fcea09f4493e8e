/**
 * Golden histories: logs recorded by earlier releases (spec/fixtures/<name>/, with what they
 * held in <name>.json) must still open, verify with the same digest, and replay through the
 * machine to the same states. A change to encoding, digest or machine that breaks an old log
 * fails here.
 */
import { cp, readFile, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type RunBoundary, type RuntimeEvent, foldFacts, recoverInvocations, stateOf, transcriptOf } from '../index.js'
import { withTempDir, withTimeout } from './support/temp.js'

interface Golden {
  events: number
  digest: string
  run1Boundary: RunBoundary
  states: Record<string, string>
  terminals: Record<string, string | null>
  uncertain: string[]
}

const fixtures = fileURLToPath(new URL('./fixtures/', import.meta.url))
const names = (await readdir(fixtures)).filter((name) => name.endsWith('.json')).map((name) => name.slice(0, -5))

test('there is at least one golden history', () => {
  assert.ok(names.length >= 1)
})

for (const name of names) {
  test(`golden history ${name} opens, verifies and replays unchanged`, () =>
    withTimeout(
      withTempDir(async (dir) => {
        const golden = JSON.parse(await readFile(join(fixtures, `${name}.json`), 'utf8')) as Golden
        // Opening writes (LevelDB recovers its write log), so work on a copy.
        await cp(join(fixtures, name), join(dir, name), { recursive: true })
        const log = await EventLog.open(join(dir, name))
        try {
          const verified = await log.verify()
          assert.is(verified.events, golden.events)
          assert.is(verified.digest, golden.digest)
          assert.equal((await log.runSource(golden.run1Boundary.invocation.sessionId, golden.run1Boundary.invocation.runId))?.boundary, golden.run1Boundary)
          const prefix = await log.prefix(golden.events, 1 << 24)
          for (const [invocationId, state] of Object.entries(golden.states)) {
            const facts = prefix.events.filter((e) => e.event.invocation.invocationId === invocationId).map((e) => e.event.fact)
            assert.is(stateOf(foldFacts(facts)), state, invocationId)
            assert.is(prefix.projectInvocation(invocationId).terminal, golden.terminals[invocationId] ?? null, invocationId)
          }
          const uncertain = Object.keys(golden.states).flatMap((id) => prefix.projectInvocation(id).uncertainOperations)
          assert.equal(uncertain, golden.uncertain)
          assert.is(await recoverInvocations(log), 0)
          assert.is(log.head().digest, golden.digest)
        } finally {
          await log.close()
        }
      }),
      20_000,
    ))
}

/** The events of one invocation of one model step: opened, requested, then `answer` and its end with `outcome`. */
function oneStep(answer: Record<string, unknown>, outcome: Record<string, unknown>): RuntimeEvent[] {
  const invocation = { sessionId: 'session-old', turnId: 'turn-old', runId: 'run-old', invocationId: 'inv-old' }
  const facts = [
    {
      type: 'invocation.opened',
      input: { kind: 'message', content: 'question' },
      configuration: { cwd: '/srv/project' },
      execution: { model: 'model-x', providerOptions: {}, cwd: '/srv/project', tools: { catalogDigest: `sha256:${'0'.repeat(64)}`, names: [] } },
    },
    { type: 'model.requested', stepId: 'step-1', model: 'model-x', requestDigest: `sha256:${'1'.repeat(64)}` },
    answer,
    { type: 'invocation.ended', outcome },
  ]
  return facts.map((fact, n) => ({ id: `inv-old/${n + 1}`, recordedAt: 1_700_000_000_000 + n, invocation, fact }) as RuntimeEvent)
}

/** The events of one invocation answered in one step, its `model.completed` output as given. */
const answeredWith = (output: Record<string, unknown>) => oneStep({ type: 'model.completed', stepId: 'step-1', output }, { status: 'completed' })

test('a model.completed without usage details or responseId (as written before they were recorded) digests as it did; one with them is read back as written, after a reopen too', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const before = answeredWith({ text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5 }, reasoning: 'think' })
      const after = answeredWith({
        text: 'done',
        toolCalls: [],
        finishReason: 'stop',
        usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 8, reasoningTokens: 3 },
        reasoning: 'think',
        responseId: 'chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT',
      })
      // The digest the release before gave this log.
      const digests: Record<string, string> = { before: 'sha256:1fcfa8f09d6593f05e467a8bcc83752a1bdfa7f329d31c1d935fcd5504307712' }
      for (const [name, events] of [['before', before], ['after', after]] as const) {
        for (const reopened of [false, true]) {
          const log = await EventLog.open(join(dir, name))
          try {
            if (!reopened) assert.equal(await log.appendAll(events), [1, 2, 3, 4])
            const verified = await log.verify()
            assert.is(verified.events, 4)
            if (digests[name] !== undefined) assert.is(verified.digest, digests[name], name)
            assert.equal((await log.invocationEvents('inv-old')).map((e) => e.event), events, name)
          } finally {
            await log.close()
          }
        }
      }
    }),
    20_000,
  ))

/** The events of one invocation refused by its provider in one step, its interrupted fact and failed outcome with `extra`. */
function refusedWith(extra: Record<string, unknown>): RuntimeEvent[] {
  const message = "the provider answered HTTP 400: This model's maximum context length is 128000 tokens."
  return oneStep({ type: 'model.interrupted', stepId: 'step-1', status: 'failed', message, ...extra }, { status: 'failed', class: 'model_failed', message, ...extra })
}

/**
 * Each of `logs` (a one-step run of four facts, in a log of its own under `dir`) appended, then read
 * back after a reopen too: recovery leaves it alone, it verifies to the digest the release before
 * gave it (where `digests` names one), and its facts and its run's outcome are read back as written.
 */
async function appendedAndReadBack(dir: string, logs: readonly (readonly [string, RuntimeEvent[]])[], digests: Record<string, string>): Promise<void> {
  for (const [name, events] of logs) {
    for (const reopened of [false, true]) {
      const log = await EventLog.open(join(dir, name))
      try {
        if (!reopened) assert.equal(await log.appendAll(events), [1, 2, 3, 4])
        assert.is(await recoverInvocations(log), 0, name)
        const verified = await log.verify()
        assert.is(verified.events, 4)
        if (digests[name] !== undefined) assert.is(verified.digest, digests[name], name)
        assert.equal((await log.invocationEvents('inv-old')).map((e) => e.event), events, name)
        const [run] = await log.runs('session-old')
        assert.equal(run?.outcome, (events[3]!.fact as { outcome: unknown }).outcome, name)
      } finally {
        await log.close()
      }
    }
  }
}

test("a refused run without the provider's refusal recorded (as written before it was) digests as it did; one with it is read back as written, after a reopen too, and recovery leaves both alone", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const before = refusedWith({})
      const after = refusedWith({ provider: { status: 400, code: 'context_length_exceeded', type: 'invalid_request_error', param: 'messages' } })
      // The digest the release before gave this log.
      const digests: Record<string, string> = { before: 'sha256:bcd2ca53e5eddc61e973121658abb75efc31931cd748724ddf33530ae85b50c5' }
      await appendedAndReadBack(dir, [['before', before], ['after', after]], digests)
    }),
    20_000,
  ))

test("logs written before the provider's request id was recorded (an answer with its responseId, a 500's refusal) digest as they did; ones with it are read back as written, after a reopen too, and recovery leaves them alone", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const output = { text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 5, cachedInputTokens: 8, reasoningTokens: 3 }, reasoning: 'think', responseId: 'chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT' }
      const provider = { status: 500, type: 'server_error' }
      const message = 'the provider answered HTTP 500: upstream failed'
      const refused = (extra: Record<string, unknown>) =>
        oneStep({ type: 'model.interrupted', stepId: 'step-1', status: 'failed', message, provider: { ...provider, ...extra } }, { status: 'failed', class: 'model_failed', message, provider: { ...provider, ...extra } })
      const logs = [
        ['answered-before', answeredWith(output)],
        ['answered-after', answeredWith({ ...output, requestId: 'req_b4b1b7a1c8d34b6f9ad6d2b1f0d3c9e2' })],
        ['refused-before', refused({})],
        ['refused-after', refused({ requestId: 'req_5f0e3c1a9b7d4e2f8a6c0b1d3e5f7a9c' })],
      ] as const
      // The digests the release before gave these logs.
      const digests: Record<string, string> = {
        'answered-before': 'sha256:95fe1dd7f76957e71997633b20fc98a8f2f93e2af8ea4d402697e2c6e221f585',
        'refused-before': 'sha256:2386cdaf08ef4eb1debf8c8c452d6c796f06ced2f745a4bdf16751ab4cedeffc',
      }
      await appendedAndReadBack(dir, logs, digests)
    }),
    20_000,
  ))

/** A run sealed by a handoff (opened, hold.entered, the seal) and its successor (opened with `input`'s extra members, one answer, completed). */
async function sealedAndSucceeded(log: EventLog, extra: Record<string, unknown>, tools: Record<string, unknown> = { catalogDigest: `sha256:${'0'.repeat(64)}`, names: [] }): Promise<RuntimeEvent[]> {
  const execution = { model: 'model-x', providerOptions: {}, cwd: '/srv/project', tools }
  const pause = {
    intent: { handoffId: 'review', hostEpoch: 'host-a', rootRunId: 'run-old', successorRunId: 'run-old.review', successorInvocationId: 'inv-old.review', claimId: 'inv-old.review.claim' },
    remainingSteps: 7,
    execution,
  }
  const sealed = { sessionId: 'session-old', turnId: 'turn-old', runId: 'run-old', invocationId: 'inv-old' }
  const first = [
    { type: 'invocation.opened', input: { kind: 'message', content: 'question' }, configuration: { cwd: '/srv/project' }, execution },
    { type: 'hold.entered', handoffId: 'review' },
    { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } },
  ].map((fact, n) => ({ id: `inv-old/${n + 1}`, recordedAt: 1_700_000_000_000 + n, invocation: sealed, fact }) as RuntimeEvent)
  await log.appendAll(first)
  const source = (await log.runSource('session-old', 'run-old'))?.boundary
  assert.ok(source)
  const successor = { sessionId: 'session-old', turnId: 'turn-old', runId: 'run-old.review', invocationId: 'inv-old.review' }
  const next = [
    { type: 'invocation.opened', input: { kind: 'handoff', source, pause, ...extra }, configuration: { cwd: '/srv/project' }, execution },
    { type: 'model.requested', stepId: 'step-1', model: 'model-x', requestDigest: `sha256:${'1'.repeat(64)}` },
    { type: 'model.completed', stepId: 'step-1', output: { text: 'done', toolCalls: [], finishReason: 'stop' } },
    { type: 'invocation.ended', outcome: { status: 'completed' } },
  ].map((fact, n) => ({ id: `inv-old.review/${n + 1}`, recordedAt: 1_700_000_000_010 + n, invocation: successor, fact }) as RuntimeEvent)
  await log.appendAll(next)
  return [...first, ...next]
}

test("a handoff successor without content or requestFingerprint (as written before they were recorded) digests as it did; one with them is read back as written, after a reopen too, replays its message, and recovery leaves it alone", () =>
  withTimeout(
    withTempDir(async (dir) => {
      // The digest the release before gave this log.
      const digests: Record<string, string> = { before: 'sha256:9a28f523f54b8959428b827d597727c46e8ed6d319ed809544e841f18017e706' }
      const content = 'carol@acme approved the refund of O-3 (ticket 77)'
      for (const [name, extra] of [
        ['before', {}],
        ['after', { content, requestFingerprint: 'webhook-77' }],
      ] as const) {
        let events: RuntimeEvent[] = []
        for (const reopened of [false, true]) {
          const log = await EventLog.open(join(dir, name))
          try {
            if (!reopened) events = await sealedAndSucceeded(log, extra)
            assert.is(await recoverInvocations(log), 0, name)
            const verified = await log.verify()
            assert.is(verified.events, 7)
            if (digests[name] !== undefined) assert.is(verified.digest, digests[name], name)
            assert.equal((await log.invocationEvents('inv-old.review')).map((e) => e.event), events.slice(3), name)
            const end = (await log.runSource('session-old', 'run-old.review'))?.boundary
            assert.ok(end)
            const replayed = transcriptOf(await log.lineageEvents(end)).map((m) => [m.role, m.content])
            assert.equal(replayed, [['user', 'question'], ...(name === 'after' ? [['user', content]] : []), ['assistant', 'done']], name)
          } finally {
            await log.close()
          }
        }
      }
    }),
    20_000,
  ))

test("a seal with each tool's digest (tools.digests) and its successor are read back as written, after a reopen too, and the sealed run's outcome holds them", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const tools = { catalogDigest: `sha256:${'0'.repeat(64)}`, names: ['lookup_order', 'issue_refund'], digests: [`sha256:${'3'.repeat(64)}`, `sha256:${'4'.repeat(64)}`] }
      let events: RuntimeEvent[] = []
      for (const reopened of [false, true]) {
        const log = await EventLog.open(join(dir, 'digests'))
        try {
          if (!reopened) events = await sealedAndSucceeded(log, {}, tools)
          assert.is(await recoverInvocations(log), 0)
          assert.is((await log.verify()).events, 7)
          assert.equal((await log.invocationEvents('inv-old')).map((e) => e.event), events.slice(0, 3))
          assert.equal((await log.invocationEvents('inv-old.review')).map((e) => e.event), events.slice(3))
          const [run] = await log.runs('session-old')
          assert.equal(run?.outcome, (events[2]!.fact as { outcome: unknown }).outcome)
          assert.equal((run?.outcome as { pause: { execution: { tools: unknown } } }).pause.execution.tools, tools)
        } finally {
          await log.close()
        }
      }
    }),
    20_000,
  ))

test.run()
