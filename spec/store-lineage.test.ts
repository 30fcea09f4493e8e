/**
 * A run's lineage (the facts a continuation replays): a session continued turn after turn reads
 * only the newest run, not the whole chain again (found by a soak trial: each start cost ~0.2 ms
 * per earlier turn), and reads the same facts a fresh log reads; run records whose sources go
 * round are LOG_CORRUPT, not an endless walk; a continuation appended before its source's facts
 * are durable is verified once they are.
 */
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type Invocation, ModelExecutor, type ModelClient, type RunBoundary, type RuntimeEvent, transcriptOf } from '../index.js'
import { decodeRecord, encodeRecord } from '../store/encoding.js'
import { logInternals } from '../store/event-log.js'
import { keys } from '../store/keys.js'
import { refusal, withDb } from './support/log-fixtures.js'
import { bounded } from './support/temp.js'

const client: ModelClient = {
  async complete() {
    return { kind: 'completed', output: { text: 'ok', toolCalls: [], finishReason: 'stop' } }
  },
}
const base = { provider: { kind: 'openai-chat' as const, baseUrl: 'http://127.0.0.1:9/v1', model: 'm' }, configuration: { cwd: '/w' }, tools: [] }
const turn = (n: number): Invocation => ({ sessionId: 's', turnId: `t${n}`, runId: `r${n}`, invocationId: `i${n}` })

/** A session of `turns` runs, each a continuation of the one before; returns the last run's boundary. */
async function chain(log: EventLog, turns: number, onStart?: (n: number) => void): Promise<RunBoundary> {
  const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => client }) })
  await engine.run({ ...base, invocation: turn(0), work: { kind: 'message', content: 'hi' } })
  for (let n = 1; n < turns; n += 1) {
    const source = await log.runSource('s', `r${n - 1}`)
    assert.ok(source, `run r${n - 1} has a boundary`)
    onStart?.(n)
    assert.equal(await engine.run({ ...base, invocation: turn(n), work: { kind: 'continuation', source: source.boundary } }), { status: 'completed' })
  }
  const last = await log.runSource('s', `r${turns - 1}`)
  assert.ok(last)
  return last.boundary
}

test(
  'a continuation of a long chain reads only its newest run, and its lineage is what a fresh log reads',
  bounded(60_000, async (dir) => {
    const path = join(dir, 'log')
    const proto = ClassicLevel.prototype as unknown as { keys(options?: { gt?: string }): unknown }
    const original = proto.keys
    let byInvocationReads = 0
    let counting = false
    proto.keys = function (this: unknown, options?: { gt?: string }) {
      if (counting && options?.gt?.startsWith('v!')) byInvocationReads += 1
      return original.call(this, options)
    }
    let boundary: RunBoundary
    let seqs: number[]
    try {
      const log = await EventLog.open(path, { durability: 'os' })
      try {
        const reads: number[] = []
        boundary = await chain(log, 40, (n) => {
          if (counting) reads.push(byInvocationReads)
          counting = n >= 30
          byInvocationReads = 0
        })
        // Between two starts: the start of turn n reads the facts of run n-1 alone (the lineage of its
        // source is remembered from turn n-1's start), and runSource of run n reads run n's: two, however long the chain.
        assert.ok(reads.length > 0)
        for (const count of reads) assert.is(count, 2, `runs whose facts were read between two starts`)
        counting = false
        seqs = (await logInternals(log).lineage(boundary)).map((stored) => stored.seq)
      } finally {
        await log.close()
      }
    } finally {
      proto.keys = original
    }
    assert.is(seqs.length, 40 * 4, 'four facts a run, every run of the chain')
    const fresh = await EventLog.open(path)
    try {
      assert.equal((await logInternals(fresh).lineage(boundary)).map((stored) => stored.seq), seqs)
      // A boundary with another digest is verified, not taken from what was remembered.
      const forged = await refusal(logInternals(fresh).lineage({ ...boundary, digest: `sha256:${'0'.repeat(64)}` }))
      assert.is(forged.code, 'RUN_SOURCE_MISMATCH')
    } finally {
      await fresh.close()
    }
  }),
)

test(
  'run records whose sources go round are LOG_CORRUPT',
  bounded(30_000, async (dir) => {
    const path = join(dir, 'log')
    let boundary: RunBoundary
    let first: RunBoundary
    let log = await EventLog.open(path)
    try {
      boundary = await chain(log, 2)
      const source = await log.runSource('s', 'r0')
      assert.ok(source)
      first = source.boundary
    } finally {
      await log.close()
    }
    // Run r0 made to name r1 as its source, which names r0.
    await withDb(path, async (db) => {
      const key = keys.run('s', 'r0')
      const record = decodeRecord<Record<string, unknown>>((await db.get(key)) as Uint8Array, key)
      await db.put(key, encodeRecord({ ...record, source: { runId: 'r1', highWater: boundary.highWater, digest: boundary.digest } }))
    })
    log = await EventLog.open(path)
    try {
      const error = await refusal(logInternals(log).lineage(boundary))
      assert.is(error.code, 'LOG_CORRUPT', error.message)
      assert.match(error.message, /go round/)
      assert.ok(first.highWater < boundary.highWater)
    } finally {
      await log.close()
    }
  }),
)


test(
  'a log copied by pipelined appends keeps its continuations: each source is verified once the appends before it are durable',
  bounded(60_000, async (dir) => {
    const original = await EventLog.open(join(dir, 'original'), { durability: 'os' })
    let events: RuntimeEvent[]
    let head: { highWater: number; digest: string }
    try {
      await chain(original, 6)
      events = (await original.prefix(1_000, 1 << 20)).events.map((stored) => stored.event)
      head = original.head()
    } finally {
      await original.close()
    }
    assert.is(events.filter((event) => event.fact.type === 'invocation.opened' && event.fact.input.kind === 'continuation').length, 5)
    const copy = await EventLog.open(join(dir, 'copy'))
    try {
      // Not awaited one by one: every continuation's source is still being written when it is appended.
      const seqs = await Promise.all(events.map((event) => copy.append(event)))
      assert.equal(seqs, events.map((_, index) => index + 1))
      assert.equal(copy.head(), head, 'the copy has the original digest')
      // A source that does not match is refused once the appends before it are settled (one of them
      // refused here), not waited for forever.
      const source = await copy.runSource('s', 'r5')
      assert.ok(source)
      const opened = events.find((event) => event.invocation.runId === 'r5' && event.fact.type === 'invocation.opened') as RuntimeEvent
      const conflicting = copy.append({ ...(events[0] as RuntimeEvent), fact: (events[1] as RuntimeEvent).fact })
      const openedFact = opened.fact as Extract<RuntimeEvent['fact'], { type: 'invocation.opened' }>
      const forgedSource = { ...source.boundary, highWater: source.boundary.highWater + 1 }
      // Forged whole: its execution's replayBase is its source, as the engine records them.
      const forged = copy.append({
        ...opened,
        id: 'copy-forged-opened',
        invocation: { ...turn(7) },
        fact: { ...openedFact, input: { kind: 'continuation', source: forgedSource }, execution: { ...openedFact.execution, replayBase: forgedSource } },
      })
      assert.is((await refusal(conflicting)).code, 'LOG_CONFLICT')
      assert.is((await refusal(forged)).code, 'RUN_SOURCE_MISMATCH')
      assert.equal(copy.head(), head, 'nothing written by the refused appends')
    } finally {
      await copy.close()
    }
    // The source's last facts settle while the continuation's first check reads: it is made again
    // (without an fsync to wait for, the race was lost every time).
    const r1 = events.findIndex((event) => event.invocation.runId === 'r1')
    const r2 = events.findIndex((event) => event.invocation.runId === 'r2')
    for (let trial = 0; trial < 10; trial += 1) {
      const racing = await EventLog.open(join(dir, `racing-${trial}`), { durability: 'os' })
      try {
        for (const event of events.slice(0, r1 + 1)) await racing.append(event)
        const settled = await Promise.allSettled(events.slice(r1 + 1, r2 + 1).map((event) => racing.append(event)))
        assert.equal(
          settled.map((result) => (result.status === 'fulfilled' ? result.value : (result.reason as { code?: string }).code)),
          events.slice(r1 + 1, r2 + 1).map((_, index) => r1 + 2 + index),
          `trial ${trial}`,
        )
      } finally {
        await racing.close()
      }
    }
  }),
)

test(
  'a process serving many conversations at once (more than the 32 lineages once remembered) still reads one run a turn: a conversation keeps one remembered lineage, not one a turn',
  bounded(60_000, async (dir) => {
    const proto = ClassicLevel.prototype as unknown as { keys(options?: { gt?: string }): unknown }
    const original = proto.keys
    let byInvocationReads = 0
    proto.keys = function (this: unknown, options?: { gt?: string }) {
      if (options?.gt?.startsWith('v!')) byInvocationReads += 1
      return original.call(this, options)
    }
    try {
      const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
      try {
        const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => client }) })
        const sessions = 40
        const at = (session: number, n: number): Invocation => ({ sessionId: `s${session}`, turnId: `t${n}`, runId: `r${n}`, invocationId: `s${session}-i${n}` })
        for (let session = 0; session < sessions; session += 1) {
          await engine.run({ ...base, invocation: at(session, 0), work: { kind: 'message', content: 'hi' } })
        }
        const reads: number[] = []
        for (let n = 1; n <= 6; n += 1) {
          for (let session = 0; session < sessions; session += 1) {
            const source = await log.runSource(`s${session}`, `r${n - 1}`)
            assert.ok(source)
            byInvocationReads = 0
            assert.equal(await engine.run({ ...base, invocation: at(session, n), work: { kind: 'continuation', source: source.boundary } }), { status: 'completed' })
            if (n >= 3) reads.push(byInvocationReads)
          }
        }
        // A start reads its source run's facts alone (the lineage before it is remembered), however many conversations take turns.
        assert.equal([...new Set(reads)], [1], `runs read per start: ${reads.join(' ')}`)
      } finally {
        await log.close()
      }
    } finally {
      proto.keys = original
    }
  }),
)

test(
  'lineageEvents(boundary): the facts a continuation replays, checked against the boundary, handed out as copies; no boundary is LOG_INVALID_ARGUMENT, a wrong digest RUN_SOURCE_MISMATCH',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    try {
      const boundary = await chain(log, 5)
      const events = await log.lineageEvents(boundary)
      assert.equal(events.map((stored) => stored.seq), (await logInternals(log).lineage(boundary)).map((stored) => stored.seq))
      assert.is(events.length, 5 * 4)
      // What the model is sent before the next message: the first user message and five answers.
      const messages = transcriptOf(events.map((stored) => stored.event))
      assert.equal(messages.map((message) => message.role), ['user', 'assistant', 'assistant', 'assistant', 'assistant', 'assistant'])
      ;(events[0] as { event: { id: string } }).event.id = 'changed'
      assert.is((await log.lineageEvents(boundary))[0]?.event.id, 'i0/1', 'a copy: the log keeps its own')
      for (const bad of [undefined, {}, { ...boundary, highWater: -1 }, { ...boundary, extra: 1 }]) {
        assert.is((await refusal(log.lineageEvents(bad as RunBoundary))).code, 'LOG_INVALID_ARGUMENT')
      }
      const wrong = { ...boundary, digest: `sha256:${'0'.repeat(64)}` }
      assert.is((await refusal(log.lineageEvents(wrong))).code, 'RUN_SOURCE_MISMATCH')
    } finally {
      await log.close()
    }
  }),
)

test(
  'remembered lineages are bounded by their stored bytes too: conversations of long answers (a web page a turn) keep the newest within 32 MiB, not 1,024 of them',
  bounded(60_000, async (dir) => {
    const page = 'x'.repeat(600_000)
    const long: ModelClient = {
      async complete() {
        return { kind: 'completed', output: { text: page, toolCalls: [], finishReason: 'stop' } }
      },
    }
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    try {
      const engine = new Engine({ log, model: new ModelExecutor({ createClient: () => long }) })
      const at = (session: number, n: number): Invocation => ({ sessionId: `s${session}`, turnId: `t${n}`, runId: `r${n}`, invocationId: `s${session}-i${n}` })
      const sessions = 70
      for (let session = 0; session < sessions; session += 1) {
        await engine.run({ ...base, invocation: at(session, 0), work: { kind: 'message', content: 'hi' } })
        const source = await log.runSource(`s${session}`, 'r0')
        assert.ok(source)
        await engine.run({ ...base, invocation: at(session, 1), work: { kind: 'continuation', source: source.boundary } })
      }
      const cache = logInternals(log).lineageCache()
      assert.ok(cache.bytes <= 32 * 1024 * 1024, `remembered ${cache.bytes} bytes`)
      assert.ok(cache.bytes > 16 * 1024 * 1024, `and not much less: ${cache.bytes} bytes`)
      assert.ok(cache.lineages < sessions && cache.lineages >= 40, `${cache.lineages} lineages`)
      assert.is(cache.events, cache.lineages * 4, 'one lineage a conversation (its first run, four facts)')
    } finally {
      await log.close()
    }
  }),
)

test.run()
