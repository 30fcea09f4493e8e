/**
 * `log.sessions({ order: 'recent' })`: the sessions most recently active first, by the seq their
 * latest run opened at, paged with `before`, through the recency index (`a!<seq>` → session id)
 * written in the batch of each run's `invocation.opened`. Real logs on disk: interleaved runs,
 * continuations and handoff successors, a property against a model computed from `log.runs`, the
 * index after a reopen, a log of 0.8.0 (index format 4) upgraded on open, a snapshot of one, the CLI.
 */
import { cp } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import fc from 'fast-check'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact, type RunBoundary, type RuntimeEvent, type SessionListing } from '../index.js'
import { decodeRecord, encodeRecord } from '../store/encoding.js'
import { keys } from '../store/keys.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal, withDb, withLog } from './support/log-fixtures.js'

const test = suite('store: sessions most recent first')

type Opened = Extract<Fact, { type: 'invocation.opened' }>

const failed = () => facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })

/** A run that opens and fails at once (two facts), in `session`, named `name`. */
const shortRun = (name: string, session: string): RuntimeEvent[] => new EventMaker(invocationOf(name, session)).many([facts.opened(), failed()])

/** A continuation of the run whose boundary is `source`, named `name`, that fails at once. */
function continuation(name: string, source: RunBoundary): RuntimeEvent[] {
  const opened = facts.opened('again') as Opened
  return new EventMaker(invocationOf(name, source.invocation.sessionId)).many([{ ...opened, input: { kind: 'continuation', source, content: 'again' } }, failed()])
}

const call = { callId: 'call-op1', name: 'echo', arguments: '{"value":42}' }

function pauseFor(name: string, successor: string) {
  return {
    intent: { handoffId: `h-${name}`, hostEpoch: 'epoch', rootRunId: `run-${name}`, successorRunId: `run-${successor}`, successorInvocationId: `inv-${successor}`, claimId: `claim-${name}` },
    remainingSteps: 1,
    execution: { model: 'test-model', providerOptions: {}, cwd: '/srv/app', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
  }
}

/** A run of `session` held after a tool and sealed for the successor `successor`. */
const sealedRun = (name: string, session: string, successor: string): RuntimeEvent[] =>
  new EventMaker(invocationOf(name, session)).many([
    facts.opened(),
    facts.requested('s1'),
    facts.completed('s1', [call]),
    facts.dispatched('op1'),
    facts.settled('op1'),
    facts.holdEntered(`h-${name}`),
    facts.ended({ status: 'handoff_paused', pause: pauseFor(name, successor) }),
  ])

/** The successor of the sealed run `name` (its boundary `source`), in the sealed run's turn. */
function successorRun(name: string, successor: string, source: RunBoundary): RuntimeEvent[] {
  const opened = facts.opened() as Opened
  const maker = new EventMaker({ ...invocationOf(successor, source.invocation.sessionId), turnId: source.invocation.turnId })
  return maker.many([{ ...opened, input: { kind: 'handoff', source, pause: pauseFor(name, successor) } }, facts.requested('s1'), facts.completed('s1', [], 'done'), facts.ended()])
}

async function boundaryOf(log: EventLog, sessionId: string, runId: string): Promise<RunBoundary> {
  const source = await log.runSource(sessionId, runId)
  assert.ok(source, `run ${sessionId}/${runId} has a boundary`)
  return source.boundary
}

/** The model: every session with the seq its last run opened at (the last of `log.runs`), newest first. */
async function modelOf(log: EventLog, sessionIds: Iterable<string>, prefix = ''): Promise<[string, string, number][]> {
  const model: [string, string, number][] = []
  for (const sessionId of sessionIds) {
    if (!sessionId.startsWith(prefix)) continue
    const last = (await log.runs(sessionId)).at(-1)
    if (last !== undefined) model.push([sessionId, last.runId, last.openedSeq])
  }
  return model.sort((a, b) => b[2] - a[2])
}

const shortly = (listed: SessionListing[]): [string, string, number][] => listed.map(({ sessionId, latestRun }) => [sessionId, latestRun.runId, latestRun.openedSeq])

/** Every page of `order: 'recent'` of `limit`, each before the last seq of the one before, checked to be no longer than `limit`. */
async function allPages(log: EventLog, limit: number, prefix?: string): Promise<SessionListing[]> {
  const listed: SessionListing[] = []
  let page = await log.sessions({ order: 'recent', limit, ...(prefix === undefined ? {} : { prefix }) })
  for (let pages = 0; page.length > 0; pages += 1) {
    assert.ok(page.length <= limit, 'a page holds at most limit')
    assert.ok(pages < 1_000, 'the pages end')
    listed.push(...page)
    page = await log.sessions({ order: 'recent', limit, before: page.at(-1)?.latestRun.openedSeq, ...(prefix === undefined ? {} : { prefix }) })
  }
  return listed
}

/** The recency index as stored: [seq, session id], in key order. */
async function storedIndex(location: string): Promise<[string, string][]> {
  return withDb(location, async (db) => {
    const found: [string, string][] = []
    for await (const [key, value] of db.iterator({ gte: keys.recentLow, lt: keys.recentHigh })) found.push([key, decodeRecord<string>(value, key)])
    return found
  })
}

const SESSIONS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon']

/** Writes the log the ordering tests share and returns what each session's runs are. */
async function interleaved(log: EventLog): Promise<void> {
  await log.appendAll(completeInvocation('a1', 'alpha'))
  await log.appendAll(completeInvocation('b1', 'beta'))
  // gamma's run is left open: it is still its session's latest.
  await log.appendAll(new EventMaker(invocationOf('g1', 'gamma')).many([facts.opened(), facts.requested('s1')]))
  await log.appendAll(sealedRun('d1', 'delta', 'd2'))
  await log.appendAll(shortRun('e1', 'epsilon'))
  // alpha continued: to the front.
  await log.appendAll(continuation('a2', await boundaryOf(log, 'alpha', 'run-a1')))
  // delta's successor opens (a run too): delta to the front.
  await log.appendAll(successorRun('d1', 'd2', await boundaryOf(log, 'delta', 'run-d1')))
  // beta gets a new message in one batch with epsilon's: both move, in the batch's order.
  await log.appendAll([...shortRun('b2', 'beta'), ...shortRun('e2', 'epsilon')])
}

test(
  'sessions are listed by the seq their latest run opened at, newest first: a continuation and a handoff successor move theirs to the front',
  boundedTest(30_000, async (dir) => {
    const location = join(dir, 'log')
    await withLog(location, async (log) => {
      assert.equal(await log.sessions({ order: 'recent' }), [], 'an empty log has none')
      await interleaved(log)
      const recent = await log.sessions({ order: 'recent' })
      assert.equal(
        recent.map((session) => [session.sessionId, session.latestRun.runId, session.latestRun.kind]),
        [
          ['epsilon', 'run-e2', 'message'],
          ['beta', 'run-b2', 'message'],
          ['delta', 'run-d2', 'handoff'],
          ['alpha', 'run-a2', 'continuation'],
          ['gamma', 'run-g1', 'message'],
        ],
      )
      assert.equal(shortly(recent), await modelOf(log, SESSIONS))
      for (const { sessionId, latestRun } of recent) assert.equal(latestRun, (await log.runs(sessionId)).at(-1), `${sessionId}: the last of log.runs`)
      assert.is(recent[4]?.latestRun.terminal, null, 'an open run is listed as open')
      // The same sessions as the id order, with the same latest runs.
      const byId = await log.sessions()
      assert.equal([...recent].sort((a, b) => (a.sessionId < b.sessionId ? -1 : 1)), byId)
      // Pages of two, each before the last seq of the page before: every session once, in order.
      assert.equal(shortly(await allPages(log, 2)), shortly(recent))
      assert.equal(shortly(await allPages(log, 1)), shortly(recent))
      const [, second] = recent
      assert.equal(
        (await log.sessions({ order: 'recent', before: second?.latestRun.openedSeq })).map((session) => session.sessionId),
        ['delta', 'alpha', 'gamma'],
        'before a session: the ones whose latest run opened before it',
      )
      assert.equal(await log.sessions({ order: 'recent', before: 1 }), [], 'nothing opened before seq 1')
      assert.equal((await log.sessions({ order: 'recent', before: Number.MAX_SAFE_INTEGER })).length, 5, 'a seq past every key bounds nothing')
      // A prefix is filtered as the index is walked.
      assert.equal((await log.sessions({ order: 'recent', prefix: 'g' })).map((session) => session.sessionId), ['gamma'])
      assert.equal((await log.sessions({ order: 'recent', prefix: 'a' })).map((session) => session.sessionId), ['alpha'])
      assert.equal(await log.sessions({ order: 'recent', prefix: 'zeta' }), [])
      // An open run of a session that already has one: the session moves, listed once.
      const [g2] = await log.appendAll(new EventMaker(invocationOf('g2', 'gamma')).many([facts.opened()]))
      assert.equal(shortly(await log.sessions({ order: 'recent', limit: 2 })), [
        ['gamma', 'run-g2', g2 as number],
        ['epsilon', 'run-e2', recent[0]?.latestRun.openedSeq as number],
      ])
      assert.equal(shortly(await allPages(log, 3)), await modelOf(log, SESSIONS))
    })
    // Written with the facts: after a reopen the index holds one entry a session, at its latest run's
    // opened seq, and a snapshot lists what the log does.
    const model = await withLog(location, async (log) => {
      const listed = await log.sessions({ order: 'recent' })
      assert.equal(shortly(listed), await modelOf(log, SESSIONS))
      const snapshot = await EventLog.openSnapshot(location, { directory: dir })
      try {
        assert.equal(await snapshot.sessions({ order: 'recent' }), listed)
      } finally {
        await snapshot.close()
      }
      assert.is((await log.verify()).events, log.head().highWater, 'and verify() finds the index matching the facts')
      return modelOf(log, SESSIONS)
    })
    assert.equal(
      await storedIndex(location),
      [...model].reverse().map(([sessionId, , seq]) => [keys.recent(seq), sessionId]),
    )
    // A backup carries the index with the rest of the directory.
    const backup = join(dir, 'backup')
    await EventLog.backup(location, backup)
    assert.equal(await storedIndex(backup), await storedIndex(location))
    await withLog(backup, async (log) => {
      assert.equal(shortly(await log.sessions({ order: 'recent' })), model)
      await log.verify()
    })
  }),
)

test(
  'paging while sessions become active: a session listed already is not listed twice, one not reached yet is left out of the pages after (it moved above them), and a fresh first page lists both first',
  boundedTest(15_000, (dir) =>
    withLog(join(dir, 'log'), async (log) => {
      for (const name of ['s0', 's1', 's2', 's3', 's4']) await log.appendAll(completeInvocation(`${name}-1`, name))
      const first = await log.sessions({ order: 'recent', limit: 2 })
      assert.equal(first.map((listed) => listed.sessionId), ['s4', 's3'])
      // New turns while the user scrolls: s3 (on the page shown) and s1 (on a page not read yet).
      await log.appendAll(continuation('s3-2', await boundaryOf(log, 's3', 'run-s3-1')))
      await log.appendAll(continuation('s1-2', await boundaryOf(log, 's1', 'run-s1-1')))
      const rest: string[] = []
      for (let page = first; page.length > 0; ) {
        page = await log.sessions({ order: 'recent', limit: 2, before: page.at(-1)?.latestRun.openedSeq })
        rest.push(...page.map((listed) => listed.sessionId))
      }
      assert.equal(rest, ['s2', 's0'], 'the pages after the first list neither s3 again nor s1')
      assert.equal((await log.sessions({ order: 'recent', limit: 2 })).map((listed) => listed.sessionId), ['s1', 's3'], 'a fresh first page lists both')
    }),
  ),
)

test(
  'a child run started with parent is listed with it, as log.runs gives it',
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const supervisor = invocationOf('sup', 'desk')
      await log.appendAll(completeInvocation('sup', 'desk'))
      const opened = facts.opened('draft it') as Opened
      if (opened.input.kind === 'message') opened.input.parent = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
      await log.append(new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer')).next(opened))
      const [child, desk] = await log.sessions({ order: 'recent' })
      assert.is(child?.sessionId, 'inv-sup.step-1.0.writer')
      assert.equal(child?.latestRun.parent, { invocation: supervisor, operationId: 'inv-sup/step-1/0' })
      assert.is(desk?.latestRun.parent, undefined)
    }),
  ),
)

/** One step of the property: a run in a session, how it is appended. */
type Step =
  | { kind: 'message'; session: number }
  | { kind: 'continuation'; session: number }
  /** Two runs of one session in one appendAll: the second replaces the first's entry in the same batch. */
  | { kind: 'twice'; session: number }
  /** Runs of these sessions appended without waiting for each other: several group commits in flight. */
  | { kind: 'together'; sessions: number[] }
  | { kind: 'reopen' }

const PROPERTY_SESSIONS = ['p.one', 'p.two', 'q.three', 'q.four', 'p.five', 'r.six']
const session = fc.integer({ min: 0, max: PROPERTY_SESSIONS.length - 1 })
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('message' as const), session }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('continuation' as const), session }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('twice' as const), session }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('together' as const), sessions: fc.array(session, { minLength: 2, maxLength: 5 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'reopen' as const }) },
)

test(
  'property: over random runs (messages, continuations, two in a batch, several in flight, reopens), every page size lists each session once, in the order its latest run opened, newest first, with and without a prefix',
  boundedTest(240_000, async (dir) => {
    let trial = 0
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 14 }), fc.integer({ min: 1, max: 4 }), fc.constantFrom('', 'p.', 'q.', 'r.six', 'x'), async (steps, limit, prefix) => {
        const location = join(dir, `trial-${(trial += 1)}`)
        let log = await EventLog.open(location, { durability: 'os' })
        try {
          let runs = 0
          const lastRun = new Map<string, string>()
          const name = () => `n${(runs += 1)}`
          for (const next of steps) {
            if (next.kind === 'reopen') {
              await log.close()
              log = await EventLog.open(location, { durability: 'os' })
              continue
            }
            if (next.kind === 'together') {
              const appends = next.sessions.map((index) => {
                const sessionId = PROPERTY_SESSIONS[index] as string
                const run = name()
                lastRun.set(sessionId, `run-${run}`)
                return log.appendAll(shortRun(run, sessionId))
              })
              await Promise.all(appends)
              continue
            }
            const sessionId = PROPERTY_SESSIONS[next.session] as string
            const previous = lastRun.get(sessionId)
            const run = name()
            if (next.kind === 'continuation' && previous !== undefined) await log.appendAll(continuation(run, await boundaryOf(log, sessionId, previous)))
            else if (next.kind === 'twice') {
              const second = name()
              await log.appendAll([...shortRun(run, sessionId), ...shortRun(second, sessionId)])
              lastRun.set(sessionId, `run-${second}`)
              continue
            } else await log.appendAll(shortRun(run, sessionId))
            lastRun.set(sessionId, `run-${run}`)
          }
          const model = await modelOf(log, PROPERTY_SESSIONS, prefix)
          // The model's latest runs are the ones appended last in each session.
          assert.equal(
            model.map(([sessionId, runId]) => [sessionId, runId]).sort(),
            [...lastRun].filter(([sessionId]) => sessionId.startsWith(prefix)).sort(),
          )
          assert.equal(shortly(await allPages(log, limit, prefix)), model, `pages of ${limit}, prefix ${JSON.stringify(prefix)}`)
          assert.equal(shortly(await log.sessions({ order: 'recent', prefix, limit: 1_000 })), model)
          await log.verify()
        } finally {
          await log.close()
        }
      }),
      { numRuns: 40, seed: 20_260_901 },
    )
  }),
)

/** Makes the log at `location` what 0.8.0 left: index format 4, no recency index or marker, session records without the seq. */
async function asWrittenBy080(location: string): Promise<void> {
  await withDb(location, async (db) => {
    const batch = db.batch()
    for await (const key of db.keys({ gte: keys.recentLow, lt: keys.recentHigh })) batch.del(key)
    for await (const [key, value] of db.iterator({ gte: keys.sessionLow, lt: keys.sessionHigh })) {
      const { latestOpenedSeq, ...record } = decodeRecord<{ latestOpenedSeq?: number }>(value, key)
      assert.ok(latestOpenedSeq !== undefined, `${key} holds its latest run's seq`)
      batch.put(key, encodeRecord(record))
    }
    batch.del(keys.recencyIndexed)
    batch.put(keys.format, encodeRecord(4))
    await batch.write()
  })
}

async function formatOf(location: string): Promise<number | undefined> {
  return withDb(location, async (db) => {
    const stored = await db.get(keys.format)
    return stored === undefined ? undefined : decodeRecord<number>(stored, 'format')
  })
}

/**
 * The shared log of the upgrade tests, as 0.8.0 would have left it (no recency index, format 4): its
 * location, what a log of this version lists most recent first, and the index it stores.
 */
async function writtenBy080(dir: string): Promise<{ location: string; expected: [string, string, number][]; indexed: [string, string][] }> {
  const location = join(dir, 'log')
  const expected = await withLog(location, async (log) => {
    await interleaved(log)
    return shortly(await log.sessions({ order: 'recent' }))
  })
  const indexed = await storedIndex(location)
  await asWrittenBy080(location)
  return { location, expected, indexed }
}

test(
  'a log 0.8.0 wrote (index format 4) gets the index on open, marked format 5 at once (0.8.0 then refuses it), and lists and keeps it as a new log does; a snapshot of one builds it in its copy',
  boundedTest(30_000, async (dir) => {
    const { location, expected, indexed } = await writtenBy080(dir)
    assert.is(indexed.length, 5)
    assert.equal(await storedIndex(location), [], 'no index left')
    // A snapshot of it lists the same, from the index it builds in its copy; the log is left as it was.
    const snapshot = await EventLog.openSnapshot(location, { directory: dir })
    try {
      assert.equal(shortly(await snapshot.sessions({ order: 'recent' })), expected)
      assert.equal(shortly(await allPages(snapshot, 2)), expected)
      assert.is((await snapshot.verify()).events, snapshot.head().highWater)
    } finally {
      await snapshot.close()
    }
    assert.is(await formatOf(location), 4, 'the snapshot wrote nothing to the log')
    assert.equal(await storedIndex(location), [])
    // Opened in place: built at once, with the marker and format 5, before any append.
    await withLog(location, async (log) => {
      assert.equal(shortly(await log.sessions({ order: 'recent' })), expected)
      assert.is((await log.verify()).events, log.head().highWater, 'the session records and the index match the facts')
    })
    assert.is(await formatOf(location), 5, 'marked 5 by the open: 0.8.0 (which reads up to 4) refuses it now')
    assert.equal(await storedIndex(location), indexed, 'the index a new log would hold')
    assert.ok(await withDb(location, (db) => db.get(keys.recencyIndexed)), 'and the marker')
    // Kept up to date from then on: alpha continued moves to the front.
    await withLog(location, async (log) => {
      await log.appendAll(continuation('a3', await boundaryOf(log, 'alpha', 'run-a2')))
      const recent = shortly(await log.sessions({ order: 'recent' }))
      assert.equal(recent[0]?.slice(0, 2), ['alpha', 'run-a3'])
      assert.equal(recent, await modelOf(log, SESSIONS))
      await log.verify()
    })
    assert.is((await storedIndex(location)).length, 5, 'still one entry a session')
  }),
)

test(
  'a build on open cut short (entries written, no marker) is done again from scratch by the next open: stale and stray entries deleted, every session at its latest run',
  boundedTest(30_000, async (dir) => {
    const { location, expected, indexed } = await writtenBy080(dir)
    // What a build killed between its batches leaves: some entries (one at a session's earlier run, one
    // naming a session at a seq that opens none of its runs) and some session records with their seq.
    await withDb(location, async (db) => {
      const batch = db.batch()
      batch.put(keys.recent(1), encodeRecord('alpha'))
      batch.put(keys.recent(2), encodeRecord('nobody'))
      await batch.write()
    })
    await withLog(location, async (log) => {
      assert.equal(shortly(await log.sessions({ order: 'recent' })), expected)
      assert.is((await log.verify()).events, log.head().highWater)
    })
    assert.equal(await storedIndex(location), indexed)
    assert.is(await formatOf(location), 5)
  }),
)

test(
  'a build on open over more sessions than one of its batches holds (10,000) indexes every one of them',
  boundedTest(120_000, async (dir) => {
    const location = join(dir, 'log')
    const count = 10_050
    await withLog(location, async (log) => {
      for (let from = 0; from < count; from += 1_000) {
        const events: RuntimeEvent[] = []
        for (let index = from; index < Math.min(count, from + 1_000); index += 1) events.push(...shortRun(`m${index}`, `many-${index}`))
        await log.appendAll(events)
      }
    })
    await asWrittenBy080(location)
    await withLog(location, async (log) => {
      const listed = await allPages(log, 1_000)
      assert.is(listed.length, count)
      // Each session's one run opened after the one before: newest first is the reverse of the order written.
      assert.equal(listed[0]?.sessionId, `many-${count - 1}`)
      assert.equal(listed.at(-1)?.sessionId, 'many-0')
      assert.is(new Set(listed.map((session) => session.sessionId)).size, count)
    })
    assert.is((await storedIndex(location)).length, count)
    assert.is(await formatOf(location), 5)
  }),
)

const legacy = fileURLToPath(new URL('./fixtures/legacy/', import.meta.url))

test(
  'logs earlier versions wrote (the legacy fixtures) list their sessions most recent first once opened',
  boundedTest(30_000, async (dir) => {
    for (const name of ['shared-claim', 'shared-successor', 'open-before-pending-calls']) {
      await cp(join(legacy, name), join(dir, name), { recursive: true })
      assert.equal(await storedIndex(join(dir, name)), [], `${name}: no recency index`)
      await withLog(join(dir, name), async (log) => {
        const ids = (await log.sessions({ limit: 1_000 })).map((listed) => listed.sessionId)
        assert.ok(ids.length > 0, `${name} has sessions`)
        assert.equal(shortly(await log.sessions({ order: 'recent', limit: 1_000 })), await modelOf(log, ids), name)
        await log.verify()
      })
    }
  }),
)

test(
  "sessions refuses order, before and after where they do not fit, LOG_INVALID_ARGUMENT naming the option, a misspelt one told the one meant",
  boundedTest(15_000, async (dir) => {
    await withLog(join(dir, 'log'), async (log) => {
      await log.appendAll(completeInvocation('a', 'alpha'))
      const cases: [string, unknown, string][] = [
        ['an order no listing has', { order: 'newest' }, 'order'],
        ['an order that is no string', { order: 1 }, 'order'],
        ['before in id order (the default)', { before: 5 }, 'before'],
        ["before in order 'id'", { order: 'id', before: 5 }, 'before'],
        ["after in order 'recent'", { order: 'recent', after: 'alpha' }, 'after'],
        ['a before of 0', { order: 'recent', before: 0 }, 'before'],
        ['a before that is no whole number', { order: 'recent', before: 1.5 }, 'before'],
        ['a before that is a string', { order: 'recent', before: '5' }, 'before'],
        ['a before past what a number holds exactly', { order: 'recent', before: 2 ** 53 }, 'before'],
        ['a misspelt order', { ordr: 'recent' }, 'ordr'],
        ['a misspelt before', { order: 'recent', befor: 5 }, 'befor'],
        ['a prefix with a character no id has, in recent order', { order: 'recent', prefix: 'user@' }, 'prefix'],
        ['a limit of 0, in recent order', { order: 'recent', limit: 0 }, 'limit'],
      ]
      for (const [what, options, field] of cases) {
        const refused = await refusal(log.sessions(options as never))
        assert.equal([refused.code, refused.details], ['LOG_INVALID_ARGUMENT', { field }], what)
      }
      assert.match((await refusal(log.sessions({ ordr: 'recent' } as never))).message, 'did you mean order?')
      assert.match((await refusal(log.sessions({ order: 'recent', befor: 5 } as never))).message, 'did you mean before?')
      assert.match((await refusal(log.sessions({ before: 5 }))).message, "order: 'recent'")
      assert.match((await refusal(log.sessions({ order: 'recent', after: 'alpha' }))).message, 'before')
      assert.equal((await log.sessions({ order: 'id' })).map((listed) => listed.sessionId), ['alpha'], "order 'id' is the default's")
      assert.equal((await log.sessions({ order: 'recent', before: undefined, after: undefined })).map((listed) => listed.sessionId), ['alpha'], 'options given as undefined are not given')
    })
  }),
)

test(
  "sessions in id order from the session records' seqs list what they listed from the run index: a damaged opening fact of a handoff successor (whose parent is never read) or a damaged session record costs nothing; one of a run whose parent is read is LOG_CORRUPT naming its seq, as before",
  boundedTest(30_000, async (dir) => {
    const location = join(dir, 'log')
    const { listed, successorSeq, continuationSeq } = await withLog(location, async (log) => {
      await interleaved(log)
      // Facts after them, enough that an open's check of the log's tail (its last 1,024) reads none of theirs.
      await log.appendAll(Array.from({ length: 600 }, (_, index) => shortRun(`z${index}`, 'zeta')).flat())
      const delta = (await log.runs('delta')).at(-1)
      const alpha = (await log.runs('alpha')).at(-1)
      assert.equal([delta?.runId, delta?.kind, alpha?.runId, alpha?.kind], ['run-d2', 'handoff', 'run-a2', 'continuation'])
      return { listed: await log.sessions(), successorSeq: delta?.openedSeq as number, continuationSeq: alpha?.openedSeq as number }
    })
    const damage = (key: string) => withDb(location, (db) => db.put(key, new Uint8Array([0xc1])))
    // delta's latest run is the successor: its opening fact damaged, then beta's session record (gamma's run is open: an open reads its record).
    await damage(keys.event(successorSeq))
    await withLog(location, async (log) => assert.equal(await log.sessions(), listed, 'the successor listed from its records'))
    await damage(keys.session('beta'))
    await withLog(location, async (log) => {
      assert.equal(await log.sessions(), listed, 'and beta from its run index')
      assert.equal(await log.sessions({ limit: 2, after: 'beta' }), listed.slice(2, 4))
    })
    await damage(keys.event(continuationSeq))
    await withLog(location, async (log) => {
      const refused = await refusal(log.sessions())
      assert.equal([refused.code, refused.details], ['LOG_CORRUPT', { seq: continuationSeq }], refused.message)
    })
  }),
)

test.run()
