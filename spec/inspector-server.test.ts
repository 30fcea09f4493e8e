/**
 * The inspector's server without a browser: option checks, the read-only and local-only rules,
 * the statechart read from the machine, time travel computed by the machine, and the flags for
 * runs a crash left behind. Real LevelDB logs, real HTTP on 127.0.0.1.
 */
import { request } from 'node:http'
import { connect, createServer } from 'node:net'
import { mkdir, readFile, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type Fact, type InvocationOutcome, type RuntimeEvent, type StoredEvent, foldFacts, invocationMachine, recoverInvocations, stateOf } from '../index.js'
import { STEPS, invocationEvents, invocationFacts, invocationFor } from '../bench/workload.js'
import type { Chart, InvocationDetail, Overview, VerifyReport } from '../inspector/protocol.js'
import { Catalog } from '../inspector/catalog.js'
import { type InspectorServer, serveInspector } from '../inspector/index.js'
import { MAX_STREAMS } from '../inspector/server.js'
import { logInternals } from '../store/event-log.js'
import { logHeldOpen } from '../store/writer-presence.js'
import { rejectsWithCode } from './support/codes.js'
import { SCENARIO, writeScenarioLog } from './support/inspector-fixtures.js'
import { EventMaker, REPO_ROOT, completeInvocation, facts, invocationOf, refusal, startChild } from './support/log-fixtures.js'
import { ensurePageBuilt } from './support/inspector-build.js'
import { bounded } from './support/temp.js'

/** The facts of a run of one model step that completes. */
const oneStep = (): Fact[] => [facts.opened(), facts.requested('s1'), facts.completed('s1', [], 'hi'), facts.ended()]

/** Sessions `s0`…`s<count-1>`, each with one run (`inv-r<n>`) of one step, more than the index always keeps. */
async function oneRunSessions(log: EventLog, count: number): Promise<void> {
  for (let n = 0; n < count; n += 1) await log.appendAll(new EventMaker(invocationOf(`r${n}`, `s${n}`)).many(oneStep()))
}

/** Asks `look` every 20 ms until `done` holds of its answer, for at most 10 s; the last answer either way. */
async function eventually<T>(look: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  let value = await look()
  for (const deadline = Date.now() + 10_000; !done(value) && Date.now() < deadline; value = await look()) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return value
}

/** The invocation ids of a session's runs as an overview lists them (none when it is not listed). */
const runIdsOf = (overview: Overview, sessionId: string): string[] =>
  overview.sessions.find((session) => session.sessionId === sessionId)?.turns.flatMap((turn) => turn.runs.map((run) => run.invocation.invocationId)) ?? []

async function getJson<T>(url: string): Promise<{ status: number; body: T }> {
  const response = await fetch(url)
  return { status: response.status, body: (await response.json()) as T }
}

/** A raw request, so the test controls the Host header and the method. */
function raw(url: string, options: { method?: string; host?: string; target?: string; site?: string }): Promise<{ status: number; body: string }> {
  const target = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: options.target ?? target.pathname,
        method: options.method ?? 'GET',
        headers: { ...(options.host ? { host: options.host } : {}), ...(options.site ? { 'sec-fetch-site': options.site } : {}) },
      },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          body += chunk
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

test(
  'refuses bad options with INSPECTOR_INVALID_OPTIONS, and a port in use',
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const blocker = createServer()
    try {
      await rejectsWithCode(() => serveInspector({ log, host: '0.0.0.0' as '127.0.0.1' }), 'INSPECTOR_INVALID_OPTIONS', 'another host')
      for (const port of [-1, 65_536, 1.5, Number.NaN]) {
        await rejectsWithCode(() => serveInspector({ log, port }), 'INSPECTOR_INVALID_OPTIONS', `port ${port}`)
      }
      await rejectsWithCode(() => serveInspector({ log: {} as EventLog }), 'INSPECTOR_INVALID_OPTIONS', 'not a log')
      // An engine of another log: the page would report live mode for runs it never sees.
      const other = await EventLog.open(join(dir, 'other'))
      try {
        // Closed if it is served after all, so that the failure ends the test instead of hanging it.
        const stranger = await refusal(serveInspector({ log, engine: new Engine({ log: other }) }).then((served) => served.close()))
        assert.equal([stranger.code, stranger.details], ['INSPECTOR_INVALID_OPTIONS', { field: 'engine' }], 'an engine of another log')
      } finally {
        await other.close()
      }
      // A misspelt option is refused, not left at its default (a port the caller did not ask for).
      const misspelt = await refusal(serveInspector({ log, prot: 4000 } as unknown as { log: EventLog }))
      assert.equal([misspelt.code, misspelt.details], ['INSPECTOR_INVALID_OPTIONS', { field: 'prot' }], 'prot')
      // A refresh is for a snapshot only, within bounds, with a directory that is a path.
      await log.append(new EventMaker(invocationOf('refresh')).next(facts.opened()))
      const refused = await refusal(serveInspector({ log, refresh: { everyMs: 1_000 } }))
      assert.equal([refused.code, refused.details], ['INSPECTOR_INVALID_OPTIONS', { field: 'refresh' }], 'refresh for a log that is no snapshot')
      const snapshot = await EventLog.openSnapshot(join(dir, 'log'))
      try {
        for (const [refresh, field] of [
          [{ everyMs: 99 }, 'refresh.everyMs'],
          [{ everyMs: 3_600_001 }, 'refresh.everyMs'],
          [{ everyMs: 150.5 }, 'refresh.everyMs'],
          [{ everyMs: 1_000, directory: '' }, 'refresh.directory'],
          [{ everyMs: 1_000, directory: 5 }, 'refresh.directory'],
          [{ everyMs: 1_000, dir: '/elsewhere' }, 'refresh.dir'],
          [null, 'refresh'],
        ] as const) {
          const error = await refusal(serveInspector({ log: snapshot, refresh: refresh as unknown as { everyMs: number } }))
          assert.is(error.code, 'INSPECTOR_INVALID_OPTIONS', JSON.stringify(refresh))
          assert.is(error.details?.field, field, JSON.stringify(refresh))
        }
      } finally {
        await snapshot.close()
      }
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
      const taken = (blocker.address() as { port: number }).port
      await rejectsWithCode(() => serveInspector({ log, port: taken }), 'INSPECTOR_INVALID_OPTIONS', 'a port in use')
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()))
      await log.close()
    }
  }),
)

test(
  'indexes a log many chunks long by streaming it; maxEvents and maxBytes still refuse with LOG_PREFIX_TOO_LARGE',
  bounded(60_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    const template = invocationFacts(STEPS)
    const sessions = 8
    const perSession = 12
    for (let session = 0; session < sessions; session += 1) {
      const batch = Array.from({ length: perSession }, (_, n) => invocationEvents(invocationFor(`big${session}`, n, `big-s${session}`), template)).flat()
      await log.appendAll(batch)
    }
    const highWater = log.head().highWater
    assert.is(highWater, sessions * perSession * template.length)
    assert.ok(highWater > 3 * 2_048, `${highWater} facts span several index chunks`)
    try {
      // The scan itself: contiguous seqs in chunks of the asked size, the stored bytes counted, bounded by upTo.
      let seen = 0
      let bytes = 0
      const sizes: number[] = []
      for await (const chunk of logInternals(log).scanEvents(highWater - 5, 1_000)) {
        for (const { seq } of chunk.events) assert.is(seq, ++seen)
        sizes.push(chunk.events.length)
        bytes += chunk.bytes
      }
      assert.is(seen, highWater - 5)
      assert.ok(sizes.slice(0, -1).every((size) => size === 1_000) && (sizes.at(-1) ?? 0) <= 1_000, sizes.join(','))
      const prefix = await log.prefix(highWater, 2 ** 40)
      assert.ok(bytes > 0 && bytes < prefix.events.length * 2_000, `${bytes} bytes`)
      await rejectsWithCode(() => logInternals(log).scanEvents(1, 0)[Symbol.asyncIterator]().next(), 'LOG_INVALID_ARGUMENT', 'chunk 0')

      const inspector = await serveInspector({ log })
      try {
        const { body } = await getJson<Overview>(`${inspector.url}api/overview`)
        assert.is(body.highWater, highWater)
        assert.is(body.sessionsTotal, sessions)
        const runs = body.sessions.flatMap((session) => session.turns.flatMap((turn) => turn.runs))
        assert.is(runs.length, sessions * perSession)
        for (const run of runs) {
          assert.is(run.status, 'completed', run.invocation.invocationId)
          assert.is(run.facts, template.length)
          assert.is(run.steps, STEPS + 1)
        }
        const last = runs.find((run) => run.lastSeq === highWater)
        assert.ok(last, 'the last fact of the log is indexed')
      } finally {
        await inspector.close()
      }
      await rejectsWithCode(() => serveInspector({ log, maxEvents: highWater - 1 }), 'LOG_PREFIX_TOO_LARGE', 'maxEvents')
      await rejectsWithCode(() => serveInspector({ log, maxBytes: 50_000 }), 'LOG_PREFIX_TOO_LARGE', 'maxBytes')
      // The port is taken before the log is indexed: a port in use is refused as such, even on a log
      // the index would refuse, and a refused index frees the port it took.
      const blocker = createServer()
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
      const port = (blocker.address() as { port: number }).port
      await rejectsWithCode(() => serveInspector({ log, port, maxBytes: 50_000 }), 'INSPECTOR_INVALID_OPTIONS', 'the port first')
      await new Promise<void>((resolve) => blocker.close(() => resolve()))
      await rejectsWithCode(() => serveInspector({ log, port, maxBytes: 50_000 }), 'LOG_PREFIX_TOO_LARGE', 'then the index')
      await new Promise<void>((resolve, reject) => {
        blocker.once('error', reject)
        blocker.listen(port, '127.0.0.1', () => blocker.close(() => resolve()))
      })
      assert.is(log.head().highWater, highWater, 'nothing was written')
    } finally {
      await log.close()
    }
  }),
)

/**
 * Serves `log` (holding an opened invocation, `inv-early`, and its request) with its initial index
 * held at a gate until `release()`, on a port known before the server listens; resolves once the
 * server answers (a refused Host: 403) while the index still waits. `restore()` gives the log its
 * own scan back.
 */
async function servedWhileIndexing(log: EventLog): Promise<{ serving: Promise<InspectorServer>; port: number; url: string; release: () => void; restore: () => void }> {
  const internals = logInternals(log)
  const scan = internals.scanEvents
  let release = (): void => undefined
  const gate = new Promise<void>((resolve) => {
    release = resolve
  })
  await log.appendAll(new EventMaker(invocationOf('early')).many([facts.opened(), facts.requested('s1')]))
  internals.scanEvents = (upTo, chunk) =>
    (async function* () {
      await gate
      yield* scan(upTo, chunk)
    })()
  const restore = () => {
    release()
    internals.scanEvents = scan
  }
  const probe = createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const port = (probe.address() as { port: number }).port
  await new Promise<void>((resolve) => probe.close(() => resolve()))
  const serving = serveInspector({ log, port })
  serving.catch(() => undefined)
  const url = `http://127.0.0.1:${port}/`
  for (let attempt = 0; ; attempt += 1) {
    const answered = await raw(url, { host: 'evil.example' }).then(
      (response) => response.status,
      () => 0,
    )
    if (answered === 403) break
    if (attempt >= 200) {
      restore()
      throw new Error('the inspector did not listen while it indexed')
    }
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return { serving, port, url, release, restore }
}

test(
  'a request that arrives while the log is being indexed is answered once the index is whole; the server answers meanwhile',
  bounded(20_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    let restore = (): void => undefined
    try {
      // The index waits at the gate: the server listens (it answers), the catalog is still empty.
      const held = await servedWhileIndexing(log)
      restore = held.restore
      const { serving, url, release } = held
      let overviewAnswered = false
      const overview = getJson<Overview>(`${url}api/overview`).then((response) => {
        overviewAnswered = true
        return response
      })
      // Another request, answered at once (refused by its Host), while the overview waits for the index.
      assert.is((await raw(url, { host: 'evil.example' })).status, 403)
      assert.is(overviewAnswered, false, 'not answered from a half-built index')
      release()
      const inspector = await serving
      try {
        const { status, body } = await overview
        assert.is(status, 200)
        assert.is(body.highWater, 2)
        assert.is(body.sessionsTotal, 1, 'answered from the whole index')
      } finally {
        await inspector.close()
      }
    } finally {
      restore()
      await log.close()
    }
  }),
)

test(
  'read-only and local-only: other methods, other Host headers are refused; closing leaves the log open',
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const inspector = await serveInspector({ log })
    try {
      assert.match(inspector.url, /^http:\/\/127\.0\.0\.1:\d+\/$/)
      const before = log.head()
      for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
        assert.is((await raw(`${inspector.url}api/overview`, { method })).status, 405, method)
      }
      assert.is((await raw(`${inspector.url}api/overview`, { host: 'attacker.example:80' })).status, 403)
      assert.is((await raw(`${inspector.url}api/overview`, { host: `localhost:${new URL(inspector.url).port}` })).status, 200)
      // Another site's page may send requests (a browser says so), though it cannot read the answers.
      for (const site of ['cross-site', 'same-site']) assert.is((await raw(`${inspector.url}api/verify?force=1`, { site })).status, 403, site)
      for (const site of ['same-origin', 'none']) assert.is((await raw(`${inspector.url}api/overview`, { site })).status, 200, site)
      // A request target no URL can be made of is answered, not thrown in the process's face.
      assert.is((await raw(inspector.url, { target: 'http://[/' })).status, 400)
      assert.is((await raw(`${inspector.url}api/overview`, {})).status, 200, 'the server still answers')
      assert.equal(log.head(), before, 'nothing was written')
      const page = await fetch(inspector.url)
      assert.is(page.status, 200)
      const policy = page.headers.get('content-security-policy') ?? ''
      assert.ok(policy.includes("script-src 'self'") && policy.includes("default-src 'none'"), policy)
      assert.is(page.headers.get('x-content-type-options'), 'nosniff')
      ensurePageBuilt()
      assert.is((await fetch(`${inspector.url}page/app.js`)).status, 200, 'the compiled page script is found')
      assert.is((await fetch(`${inspector.url}page/..%2Fserver.js`)).status, 404)
      // A script that is not there (a bundled factstate has none) says where they are looked for and what to do.
      const noScript = await fetch(`${inspector.url}page/missing.js`)
      assert.is(noScript.status, 404)
      const noScriptBody = (await noScript.json()) as { code: string; message: string }
      assert.is(noScriptBody.code, 'NOT_FOUND')
      assert.match(noScriptBody.message, /beside its own module, which a bundle of factstate does not have \(keep factstate out of the bundle/)
      assert.is((await fetch(`${inspector.url}api/invocations/nope`)).status, 404)
      assert.is((await fetch(`${inspector.url}api/invocation`)).status, 400, 'which invocation is not said')
      assert.is((await fetch(`${inspector.url}api/invocation?id=nope`)).status, 404)
    } finally {
      await inspector.close()
    }
    assert.is(log.head().highWater, 0, 'the log is still open after the inspector closed')
    await log.close()
  }),
)

test(
  'the statechart is read from the machine: every state and every transition, laid out',
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const inspector = await serveInspector({ log })
    try {
      const { body: chart } = await getJson<Chart>(`${inspector.url}api/machine`)
      assert.equal(chart.states.map((s) => s.id).sort(), Object.keys(invocationMachine.root.states).sort())
      const expected = new Set<string>()
      for (const node of Object.values(invocationMachine.root.states)) {
        for (const [event, transitions] of node.transitions) {
          for (const t of transitions) expected.add(`${node.key}->${t.target?.[0]?.key ?? node.key}:${event}`)
        }
        for (const t of node.always ?? []) expected.add(`${node.key}->${t.target?.[0]?.key ?? node.key}:always`)
      }
      const drawn = new Set(chart.edges.flatMap((edge) => edge.events.map(({ event }) => `${edge.id}:${event}`)))
      assert.equal([...drawn].sort(), [...expected].sort())
      assert.ok(drawn.has('settlingTool->safePoint:always'), 'the eventless transition is drawn')
      for (const edge of chart.edges) assert.ok(edge.points.length >= 2, `${edge.id} has a route`)
      const places = new Set(chart.states.map((s) => `${Math.round(s.x)},${Math.round(s.y)}`))
      assert.is(places.size, chart.states.length, 'no two states share a place')
      for (const s of chart.states) assert.ok(s.x >= 0 && s.y >= 0 && s.x <= chart.width && s.y <= chart.height)
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  'time travel: the state after each fact equals folding the facts up to it; links both ways',
  bounded(20_000, async (dir) => {
    const path = await writeScenarioLog(dir)
    const log = await EventLog.open(path)
    const inspector = await serveInspector({ log })
    try {
      const prefix = await log.prefix(1_000, 1 << 24)
      const own = prefix.events.filter((e) => e.event.invocation.invocationId === SCENARIO.first.invocationId)
      const { status, body: detail } = await getJson<InvocationDetail>(`${inspector.url}api/invocations/${SCENARIO.first.invocationId}`)
      assert.is(status, 200)
      assert.equal(
        detail.entries.map((e) => e.seq),
        own.map((e) => e.seq),
      )
      detail.entries.forEach((entry, index) => {
        const folded = stateOf(foldFacts(own.slice(0, index + 1).map((e) => e.event.fact)))
        assert.is(entry.stateAfter, folded, `state after seq ${entry.seq}`)
        assert.is(entry.rejected, null)
      })
      const holds = detail.entries.filter((e) => e.fact.type === 'hold.entered')
      assert.is(holds.length, 2)
      for (const hold of holds) assert.equal(hold.transitions, [{ source: 'safePoint', target: 'held', event: 'hold.entered' }])
      const lastSettle = detail.entries.filter((e) => e.fact.type === 'tool.settled').at(-1)
      assert.equal(lastSettle?.transitions, [
        { source: 'settlingTool', target: 'settlingTool', event: 'tool.settled' },
        { source: 'settlingTool', target: 'safePoint', event: 'always' },
      ])
      assert.equal(detail.summary.successor, { kind: 'handoff', runId: SCENARIO.successor.runId, invocationId: SCENARIO.successor.invocationId, exists: true })
      assert.is(detail.summary.status, 'paused')
      assert.is(detail.summary.steps, 2)
      const { body: overview } = await getJson<Overview>(`${inspector.url}api/overview`)
      assert.is(overview.highWater, prefix.highWater)
      assert.is(overview.digest, prefix.digest)
      const runs = overview.sessions.flatMap((s) => s.turns.flatMap((t) => t.runs))
      const successor = runs.find((r) => r.invocation.invocationId === SCENARIO.successor.invocationId)
      assert.equal(successor?.source, { kind: 'handoff', runId: SCENARIO.first.runId, invocationId: SCENARIO.first.invocationId, exists: true })
      assert.is(successor?.status, 'completed')
      assert.is(overview.mode, 'log')
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  'a busy log never pushes a session that needs someone off the overview, and match finds any session',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    const inspector = await serveInspector({ log })
    try {
      // Written first, so 350 later sessions are all more recently active than these three.
      await log.appendAll(new EventMaker(invocationOf('left-open', 'alice-wire')).many([facts.opened(), facts.requested('s1')]))
      await log.appendAll(new EventMaker(invocationOf('gave-up', 'bob-failed')).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })]))
      await log.appendAll(new EventMaker(invocationOf('answered', 'carol-done')).many(oneStep()))
      const busy: RuntimeEvent[] = []
      for (let n = 0; n < 350; n += 1) busy.push(...new EventMaker(invocationOf(`busy-${n}`, `busy-session-${n}`)).many(oneStep()))
      await log.appendAll(busy)
      const overviewOf = async (query = '') => (await getJson<Overview>(`${inspector.url}api/overview${query}`)).body
      const all = await overviewOf()
      assert.is(all.sessionsTotal, 353)
      assert.is(all.sessionsMatching, 353)
      assert.is(all.sessions.length, 300)
      assert.is(all.attention, 2)
      assert.is(all.match, null)
      assert.equal(
        all.sessions.slice(0, 3).map((session) => [session.sessionId, session.attention]),
        [['bob-failed', 'unanswered'], ['alice-wire', 'open'], ['busy-session-349', null]],
        'the sessions that need someone first, then the most recent',
      )
      assert.not.ok(all.sessions.some((session) => session.sessionId === 'carol-done'), 'an answered old session is left to match')

      const carol = await overviewOf('?match=%20CAROL%20')
      assert.is(carol.match, 'CAROL')
      assert.equal([carol.sessionsTotal, carol.sessionsMatching, carol.attention], [353, 1, 0])
      assert.equal(carol.sessions.map((session) => session.sessionId), ['carol-done'])
      assert.equal(carol.sessions[0]?.turns[0]?.runs.map((run) => run.status), ['completed'])
      // Any id of the session's turns, runs or invocations matches it; most recently active first.
      assert.equal(
        (await overviewOf('?match=inv-busy-17')).sessions.map((session) => session.sessionId),
        ['busy-session-179', 'busy-session-178', 'busy-session-177', 'busy-session-176', 'busy-session-175', 'busy-session-174', 'busy-session-173', 'busy-session-172', 'busy-session-171', 'busy-session-170', 'busy-session-17'],
      )
      assert.equal((await overviewOf('?match=turn-left')).sessions.map((session) => session.sessionId), ['alice-wire'])
      // The flags the list shows on sessions match too, as on the page.
      assert.equal((await overviewOf('?match=unanswered')).sessions.map((session) => session.sessionId), ['bob-failed'])
      assert.equal((await overviewOf('?match=left%20by%20a%20crash')).sessions.map((session) => session.sessionId), ['alice-wire'])
      assert.equal((await overviewOf('?match=needs%20attention')).sessions.map((session) => session.sessionId).sort(), ['alice-wire', 'bob-failed'])
      const none = await overviewOf('?match=nobody')
      assert.equal([none.sessions.length, none.sessionsMatching, none.sessionsTotal], [0, 0, 353])
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

test("a run's summary counts its tool calls that failed and those rejected before dispatch", () => {
  const catalog = new Catalog()
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  const calls = ['op1', 'op2', 'op3', 'op4'].map((op) => ({ callId: `call-${op}`, name: 'echo', arguments: '{}' }))
  const run = new EventMaker(invocationOf('mixed', 'session-mixed'))
  catalog.apply(
    stored(
      run.many([
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', calls),
        facts.dispatched('op1'),
        facts.dispatched('op2'),
        facts.dispatched('op3'),
        facts.denied('op4', 'echo', 'dana@support', 'not for this customer'),
        facts.settled('op1'),
        facts.failed('op2'),
        { type: 'tool.settled', operationId: 'op3', outcome: { status: 'unknown', message: 'lost' } },
        facts.ended(),
      ]),
    ),
  )
  catalog.apply(stored(completeInvocation('clean', 'session-clean')))
  const summary = catalog.summary('inv-mixed', new Set())
  assert.equal([summary?.failedCalls, summary?.rejectedCalls], [2, 1])
  const clean = catalog.summary('inv-clean', new Set())
  assert.equal([clean?.failedCalls, clean?.rejectedCalls], [0, 0])
})

test("a run's unknown outcomes that a later run acknowledged (allowPriorUnknown, its opened fact's priorUnknown) name that run in its summary", () => {
  const catalog = new Catalog()
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  const crashed = invocationOf('crashed', 'session-ack')
  catalog.apply(
    stored(
      new EventMaker(crashed).many([
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]),
        facts.dispatched('op1'),
        facts.ended({ status: 'failed', class: 'outcome_unknown' } as InvocationOutcome),
      ]),
    ),
  )
  assert.equal(catalog.summary('inv-crashed', new Set())?.acknowledged, [])
  const next = { ...invocationOf('next', 'session-ack'), turnId: 'turn-next' }
  const opened = facts.opened('go on')
  if (opened.type === 'invocation.opened' && opened.input.kind === 'message') opened.input.priorUnknown = [{ invocationId: 'inv-crashed', operationId: 'op1', callId: 'call-op1', name: 'echo' }]
  catalog.apply(stored(new EventMaker(next).many([opened])))
  const summary = catalog.summary('inv-crashed', new Set())
  assert.equal(summary?.uncertain, ['op1'], 'still unknown')
  assert.equal(summary?.acknowledged, [{ operationId: 'op1', runId: 'run-next', invocationId: 'inv-next' }])
})

test('a sealed run whose successor has not started needs someone, until the successor opens', () => {
  const catalog = new Catalog()
  const sealer = invocationOf('sealer', 'session-seal')
  const successor = { ...invocationOf('successor', 'session-seal'), turnId: sealer.turnId }
  const pause = { intent: { handoffId: 'h1', hostEpoch: 'host', rootRunId: sealer.runId, successorRunId: successor.runId, successorInvocationId: successor.invocationId, claimId: 'c1' } }
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  const attention = () => catalog.sessions(10).sessions.map((session) => session.attention)
  catalog.apply(stored(new EventMaker(sealer).many([facts.opened(), facts.ended({ status: 'handoff_paused', pause } as unknown as InvocationOutcome)])))
  assert.equal(attention(), ['paused'])
  const next = new EventMaker(successor)
  catalog.apply(stored([next.next(facts.opened())]))
  assert.equal(attention(), ['open'])
  catalog.apply(stored(next.many([facts.requested('s1'), facts.completed('s1', [], 'hi'), facts.ended()])))
  assert.equal(attention(), [null])
  assert.equal([catalog.sessions(10).attention, catalog.sessions(10).total], [0, 1])
})

test('the index keeps at most its limit of invocations (and a tenth more): it drops the least recently active sessions that need nobody, counts them, and takes a dropped one back whole when it has a new fact', () => {
  const catalog = new Catalog(150)
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  const written: StoredEvent[] = []
  const add = (events: StoredEvent[]) => {
    written.push(...events)
    catalog.apply(events)
  }
  for (let n = 0; n < 20; n += 1) {
    add(stored(new EventMaker(invocationOf(`failed-${n}`, `failed-${n}`)).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })])))
  }
  for (let n = 0; n < 300; n += 1) {
    add(stored(new EventMaker(invocationOf(`done-${n}`, `done-${n}`)).many(oneStep())))
    assert.ok(catalog.invocationCount <= 165, `at most 165 invocations kept (${catalog.invocationCount} after session ${n})`)
  }
  assert.ok(catalog.trimmed)
  assert.is(catalog.sessionCount, 320, 'dropped sessions are still counted')
  const listed = catalog.sessions(300)
  assert.is(listed.attention, 20, 'no session that needs someone is dropped')
  assert.equal(listed.sessions.slice(20, 120).map((session) => session.sessionId), Array.from({ length: 100 }, (_, index) => `done-${299 - index}`), 'the most recent sessions stay')
  assert.not.ok(catalog.hasSession('done-0'))
  assert.is(catalog.summary('inv-done-0', new Set()), undefined)
  // done-0 has a new run: it is indexed again, and its earlier run read back before it.
  const again = { ...invocationOf('again', 'done-0'), turnId: 'turn-again' }
  add(stored(new EventMaker(again).many([facts.opened(), facts.ended()])))
  // Every session first indexed since a trim may be a dropped one back: the server reads each one's earlier runs.
  assert.ok(catalog.takeReturning().includes('done-0'))
  assert.equal(catalog.takeReturning(), [], 'told once')
  assert.ok(catalog.backfill('done-0', written.filter(({ event }) => event.invocation.sessionId === 'done-0' && event.invocation.invocationId === 'inv-done-0')))
  assert.not.ok(catalog.backfill('done-0', written.filter(({ event }) => event.invocation.invocationId === 'inv-done-0')), 'nothing more to add')
  const session = catalog.sessions(300, 'done-0').sessions.find((found) => found.sessionId === 'done-0')
  assert.equal(session?.turns, [{ turnId: 'turn-done-0', invocationIds: ['inv-done-0'] }, { turnId: 'turn-again', invocationIds: ['inv-again'] }])
  assert.is(session?.firstSeq, written.find(({ event }) => event.invocation.invocationId === 'inv-done-0')?.seq)
  assert.is(catalog.summary('inv-done-0', new Set())?.status, 'completed')
  assert.is(catalog.sessionCount, 320, 'a session taken back is not counted twice')
})

test(
  'a live inspector with a small index: a dropped session is found by its exact session or invocation id, its timeline is served, and a new run in it brings it back whole',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    let inspector: InspectorServer | undefined
    try {
      // More than the 100 most recently active sessions, which the index always keeps.
      await oneRunSessions(log, 130)
      await rejectsWithCode(() => serveInspector({ log, maxIndexed: 0 }), 'INSPECTOR_INVALID_OPTIONS', 'maxIndexed 0')
      inspector = await serveInspector({ log, maxIndexed: 10 })
      const overview = async (match = '') => (await getJson<Overview>(`${inspector?.url}api/overview${match === '' ? '' : `?match=${encodeURIComponent(match)}`}`)).body
      const all = await overview()
      assert.is(all.sessionsTotal, 130)
      assert.not.ok(all.sessions.some((session) => session.sessionId === 's0'), 's0 was dropped from the index')
      for (const id of ['s0', 'inv-r0']) {
        const found = await overview(id)
        assert.equal(found.sessions.map((session) => [session.sessionId, session.turns.map((turn) => turn.runs.map((run) => [run.invocation.invocationId, run.status, run.facts]))]), [['s0', [[['inv-r0', 'completed', 4]]]]], id)
        assert.is(found.sessionsMatching, 1, id)
      }
      assert.equal((await overview('no-such-id')).sessions, [])
      const detail = await getJson<InvocationDetail>(`${inspector.url}api/invocation?id=inv-r0`)
      assert.equal([detail.status, detail.body.summary.status, detail.body.entries.length], [200, 'completed', 4])
      // A new run in s0: once read back, the session lists both runs, and is counted once.
      await log.appendAll(new EventMaker({ ...invocationOf('again', 's0'), turnId: 'turn-again' }).many(oneStep()))
      const seen = await eventually(overview, (listed) => runIdsOf(listed, 's0').length >= 2)
      assert.equal(runIdsOf(seen, 's0'), ['inv-r0', 'inv-again'])
      assert.is(seen.sessionsTotal, 130)
    } finally {
      await inspector?.close()
      await log.close()
    }
  }),
)

test(
  'a refreshed snapshot with a small index: a dropped session with a new run is read back whole, and counted once',
  bounded(30_000, async (dir) => {
    const path = join(dir, 'log')
    const copies = join(dir, 'copies')
    await mkdir(copies)
    const held = await EventLog.open(path)
    let snapshot: EventLog | undefined
    let inspector: InspectorServer | undefined
    try {
      await oneRunSessions(held, 130)
      snapshot = await EventLog.openSnapshot(path)
      inspector = await serveInspector({ log: snapshot, maxIndexed: 10, refresh: { everyMs: 100, directory: copies } })
      const overview = async () => (await getJson<Overview>(`${inspector?.url}api/overview`)).body
      assert.not.ok((await overview()).sessions.some((session) => session.sessionId === 's0'), 's0 was dropped from the index')
      await held.appendAll(new EventMaker({ ...invocationOf('again', 's0'), turnId: 'turn-again' }).many(oneStep()))
      const seen = await eventually(overview, (listed) => runIdsOf(listed, 's0').length >= 2)
      assert.equal(runIdsOf(seen, 's0'), ['inv-r0', 'inv-again'], 'the earlier run is read back')
      assert.is(seen.sessionsTotal, 130)
    } finally {
      await inspector?.close()
      await snapshot?.close()
      await held.close()
    }
  }),
)

test(
  'a live inspector with a small index: a dropped session that has a new fact and is dropped again before it is read back is still counted once',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    let inspector: InspectorServer | undefined
    try {
      await oneRunSessions(log, 130)
      inspector = await serveInspector({ log, maxIndexed: 10 })
      const overview = async (match = '') => (await getJson<Overview>(`${inspector?.url}api/overview${match === '' ? '' : `?match=${encodeURIComponent(match)}`}`)).body
      assert.is((await overview()).sessionsTotal, 130)
      // One commit: a new run in dropped s0, then 150 new sessions, which push s0 out again at once.
      await log.appendAll([
        ...new EventMaker({ ...invocationOf('again', 's0'), turnId: 'turn-again' }).many(oneStep()),
        ...Array.from({ length: 150 }, (_, n) => new EventMaker(invocationOf(`new${n}`, `new${n}`)).many(oneStep())).flat(),
      ])
      // Read back in the background: until then s0 is counted as dropped and as listed.
      assert.is((await eventually(overview, (listed) => listed.sessionsTotal === 280)).sessionsTotal, 280, 'every session once')
      const found = await overview('s0')
      assert.equal(found.sessions.map((session) => session.turns.flatMap((turn) => turn.runs.map((run) => run.invocation.invocationId))), [['inv-r0', 'inv-again']])
    } finally {
      await inspector?.close()
      await log.close()
    }
  }),
)

test('an index held over its limit by sessions that need someone is not trimmed again on every fact: a trim is a pass over the sessions', () => {
  const catalog = new Catalog(100)
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  for (let n = 0; n < 2_000; n += 1) {
    catalog.apply(stored(new EventMaker(invocationOf(`failed-${n}`, `failed-${n}`)).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })])))
  }
  assert.is(catalog.invocationCount, 2_000, 'nothing that needs someone is dropped')
  // Each trim walks the sessions (`Map.prototype.values`): count the walks over 200 facts, one at a time.
  const values = Map.prototype.values
  let walks = 0
  Map.prototype.values = function (this: Map<unknown, unknown>) {
    if (this.size >= 2_000) walks += 1
    return values.call(this)
  } as typeof values
  try {
    for (let n = 0; n < 50; n += 1) {
      for (const event of stored(new EventMaker(invocationOf(`done-${n}`, `done-${n}`)).many(oneStep()))) catalog.apply([event])
    }
  } finally {
    Map.prototype.values = values
  }
  assert.is(walks, 0, `${walks} passes over every session for 200 facts, a tenth more than the index held`)
})

test(
  'a live inspector with a small index: the timeline of a dropped invocation whose id is also the id of another session is served',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    let inspector: InspectorServer | undefined
    try {
      const run = oneStep()
      // Session `shared` holds invocation `inv-a`; session `a` holds invocation `shared`.
      await log.appendAll(new EventMaker(invocationOf('a', 'shared')).many(run))
      await log.appendAll(new EventMaker({ ...invocationOf('b', 'a'), invocationId: 'shared' }).many(run))
      await oneRunSessions(log, 130)
      inspector = await serveInspector({ log, maxIndexed: 10 })
      const detail = await getJson<InvocationDetail>(`${inspector.url}api/invocation?id=shared`)
      assert.equal([detail.status, detail.body.summary?.invocation.sessionId, detail.body.entries?.length], [200, 'a', 4])
    } finally {
      await inspector?.close()
      await log.close()
    }
  }),
)

test('while the index is first built, sessions seen since a trim are dropped like any other (the index stays bounded); once it watches them, one is kept until its read-back answers', () => {
  const catalog = new Catalog(10)
  let seq = 0
  const run = (name: string) => new EventMaker(invocationOf(name, name)).many(oneStep()).map((event) => ({ seq: (seq += 1), event }))
  for (let n = 0; n < 1_000; n += 1) catalog.apply(run(`built-${n}`))
  assert.ok(catalog.invocationCount <= 111, `${catalog.invocationCount} invocations kept while built`)
  assert.is(catalog.sessionCount, 1_000)
  catalog.watchReturning()
  catalog.takeReturning()
  for (const id of ['built-0', 'built-1', 'built-2']) catalog.returned(id)
  catalog.apply(run('late'))
  assert.equal(catalog.takeReturning(), ['late'])
  for (let n = 0; n < 200; n += 1) {
    catalog.apply(run(`more-${n}`))
    for (const id of catalog.takeReturning()) if (id !== 'late') catalog.returned(id)
  }
  assert.ok(catalog.hasSession('late'), 'kept until its read-back answers')
  catalog.returned('late')
  for (let n = 200; n < 400; n += 1) {
    catalog.apply(run(`more-${n}`))
    for (const id of catalog.takeReturning()) catalog.returned(id)
  }
  assert.not.ok(catalog.hasSession('late'), 'then dropped like any other')
  assert.is(catalog.sessionCount, 1_401)
})

test('the overview keeps the 100 most recent sessions listed however many need attention; a run this process drives needs nobody; match takes its text literally', () => {
  const catalog = new Catalog()
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  for (let n = 0; n < 250; n += 1) {
    catalog.apply(stored(new EventMaker(invocationOf(`failed-${n}`, `old-failed-${n}`)).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })])))
  }
  for (let n = 0; n < 150; n += 1) {
    catalog.apply(stored(new EventMaker(invocationOf(`done-${n}`, `recent-${n}`)).many(oneStep())))
  }
  const listed = catalog.sessions(300)
  assert.equal([listed.total, listed.attention, listed.sessions.length], [400, 250, 300])
  assert.equal(listed.sessions.slice(0, 200).map((session) => session.attention), Array.from({ length: 200 }, () => 'unanswered'))
  assert.is(listed.sessions[0]?.sessionId, 'old-failed-249', 'the most recent of those that need someone first')
  assert.equal(
    listed.sessions.slice(200).map((session) => session.sessionId),
    Array.from({ length: 100 }, (_, index) => `recent-${149 - index}`),
    'then the 100 most recently active',
  )
  // A run still open: it needs someone unless an actor of this process is driving it.
  catalog.apply(stored(new EventMaker(invocationOf('driven', 'session.driven')).many([facts.opened(), facts.requested('s1')])))
  const driven = (live: ReadonlySet<string>) => catalog.sessions(300, 'session.driven', live).sessions.map((session) => session.attention)
  assert.equal(driven(new Set()), ['open'])
  assert.equal(driven(new Set(['inv-driven'])), [null])
  assert.is(catalog.sessions(300, '', new Set(['inv-driven'])).attention, 250)
  // Literally: a dot is a dot, not any character.
  assert.equal(catalog.sessions(300, 'session.driven').sessions.map((session) => session.sessionId), ['session.driven'])
  assert.equal(catalog.sessions(300, 'session-driven').sessions.length, 0)
  assert.equal(catalog.sessions(300, 'RECENT-14').sessions.map((session) => session.sessionId), ['recent-149', 'recent-148', 'recent-147', 'recent-146', 'recent-145', 'recent-144', 'recent-143', 'recent-142', 'recent-141', 'recent-140', 'recent-14'])
})

test(
  'a run a crash left open is flagged interrupted with its uncertain operation; recovery shows live',
  bounded(15_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const inspector = await serveInspector({ log })
    try {
      const make = new EventMaker(invocationOf('crashed', 'session-crash'))
      const list: Fact[] = [
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{"value":1}' }]),
        facts.dispatched('op1'),
      ]
      for (const event of make.many(list)) await log.append(event)
      const summaryOf = async () => {
        const { body } = await getJson<Overview>(`${inspector.url}api/overview`)
        return { session: body.sessions[0], run: body.sessions[0]?.turns[0]?.runs[0] }
      }
      let { run } = await summaryOf()
      assert.is(run?.status, 'interrupted')
      assert.equal(run?.uncertain, ['op1'])
      assert.is(run?.state, 'settlingTool')
      assert.is(await recoverInvocations(log), 1)
      const after = await summaryOf()
      run = after.run
      assert.is(run?.status, 'failed')
      assert.equal(run?.outcome?.status === 'failed' ? run.outcome.class : null, 'outcome_unknown')
      assert.equal(run?.uncertain, ['op1'], 'still flagged after the end')
      assert.equal(after.session?.reconciliation.map((op) => op.operationId), ['op1'])
      const { body: detail } = await getJson<InvocationDetail>(`${inspector.url}api/invocations/${run?.invocation.invocationId}`)
      assert.equal(
        detail.entries.filter((e) => e.uncertain).map((e) => e.fact.type),
        ['tool.dispatched'],
      )
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

/**
 * Asks for the live stream on a socket of its own (added to `sockets`, for the caller to destroy);
 * resolves with the response's head once the server has answered.
 */
function streamAnswer(port: number, sockets: ReturnType<typeof connect>[]): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    sockets.push(socket)
    let text = ''
    socket.on('error', reject)
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8')
      if (text.includes('\r\n\r\n')) resolve(text)
    })
    socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
  })
}

test(
  'live streams are capped: one more than MAX_STREAMS is refused 503 TOO_MANY_STREAMS, and a closed one makes room',
  bounded(60_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    const inspector = await serveInspector({ log })
    const port = Number(new URL(inspector.url).port)
    const sockets: ReturnType<typeof connect>[] = []
    const openStream = () => streamAnswer(port, sockets)
    try {
      const answers = await Promise.all(Array.from({ length: MAX_STREAMS }, openStream))
      assert.is(answers.filter((answer) => answer.startsWith('HTTP/1.1 200')).length, MAX_STREAMS)
      const refused = await fetch(`${inspector.url}api/events`)
      assert.is(refused.status, 503)
      const body = (await refused.json()) as { code: string; message: string }
      assert.is(body.code, 'TOO_MANY_STREAMS')
      assert.match(body.message, /close a page/)
      assert.is((await fetch(`${inspector.url}api/overview`)).status, 200, 'the other endpoints still answer')
      // A page that goes away makes room for another.
      sockets[0]?.destroy()
      let status = 503
      for (let tries = 0; status === 503 && tries < 200; tries += 1) {
        await new Promise((resolve) => setTimeout(resolve, 10))
        const again = await openStream()
        status = Number(again.slice(9, 12))
      }
      assert.is(status, 200)
    } finally {
      for (const socket of sockets) socket.destroy()
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  'streams asked for while the log is indexed by clients that went away before it was done take no place: a page loaded afterwards still gets its stream',
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    const sockets: ReturnType<typeof connect>[] = []
    let restore = (): void => undefined
    try {
      const held = await servedWhileIndexing(log)
      restore = held.restore
      const { serving, port, release } = held
      // More clients than MAX_STREAMS ask for a stream while the index is read, then give up.
      const gone = Array.from({ length: MAX_STREAMS + 4 }, () => {
        const socket = connect(port, '127.0.0.1')
        socket.on('error', () => undefined)
        const closed = new Promise((resolve) => socket.on('close', resolve))
        socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
        return { socket, closed }
      })
      await new Promise((resolve) => setTimeout(resolve, 100))
      for (const { socket } of gone) socket.destroy()
      await Promise.all(gone.map(({ closed }) => closed))
      await new Promise((resolve) => setTimeout(resolve, 100))
      release()
      const inspector = await serving
      try {
        const answer = await streamAnswer(port, sockets)
        assert.match(answer, /^HTTP\/1\.1 200/, answer.split('\r\n')[0])
      } finally {
        for (const socket of sockets) socket.destroy()
        await inspector.close()
      }
    } finally {
      restore()
      await log.close()
    }
  }),
)

test(
  'a page that stops reading its event stream is cut off once megabytes wait for it, instead of being buffered without end',
  bounded(90_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'), { durability: 'os' })
    const inspector = await serveInspector({ log })
    const port = Number(new URL(inspector.url).port)
    const socket = connect(port, '127.0.0.1')
    try {
      let received = 0
      let closed = false
      socket.on('data', (chunk: Buffer) => {
        received += chunk.length
      })
      socket.on('error', () => undefined)
      socket.on('close', () => {
        closed = true
      })
      socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
      while (received === 0) await new Promise((resolve) => setTimeout(resolve, 10))
      socket.pause()
      // Long ids make long frames: each batch below is one frame of ~300 KB, ~19 MB in all (the kernel's
      // buffers on both ends of the socket hold a few megabytes before the server's backlog grows).
      const long = 'x'.repeat(100)
      let written = 0
      for (let batch = 0; batch < 64; batch += 1) {
        const events = Array.from({ length: 1_000 }, (_, n) => new EventMaker(invocationOf(`${long}-${batch}-${n}`, `${long}-s${batch}-${n}`)).next(facts.opened()))
        await log.appendAll(events)
        written += 1_000 * 300
      }
      socket.resume()
      const deadline = Date.now() + 20_000
      while (!closed && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
      assert.ok(closed, `the stream was still open after ~${Math.round(written / 1e6)} MB of frames (${Math.round(received / 1e6)} MB read)`)
      assert.ok(received < written / 2, `${Math.round(received / 1e6)} MB reached the stalled page of ~${Math.round(written / 1e6)} MB sent`)
      assert.is((await fetch(`${inspector.url}api/overview`)).status, 200, 'the inspector still answers')
    } finally {
      socket.destroy()
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  'a refreshed snapshot takes in thousands of facts landed between two looks, chunk by chunk: every session listed, the head and digest the log\'s',
  bounded(60_000, async (dir) => {
    const path = join(dir, 'log')
    const held = await EventLog.open(path)
    const copies = join(dir, 'copies')
    await mkdir(copies)
    let snapshot: EventLog | undefined
    let inspector: Awaited<ReturnType<typeof serveInspector>> | undefined
    try {
      await held.appendAll(completeInvocation('before'))
      snapshot = await EventLog.openSnapshot(path)
      inspector = await serveInspector({ log: snapshot, refresh: { everyMs: 100, directory: copies } })
      assert.is((await getJson<Overview>(`${inspector.url}api/overview`)).body.sessionsTotal, 1)
      // Over two of the index's chunks (2,048 facts) in one group commit.
      await held.appendAll(Array.from({ length: 600 }, (_, index) => completeInvocation(`burst-${index}`)).flat())
      const head = held.head()
      let overview: Overview | undefined
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 50))) {
        overview = (await getJson<Overview>(`${inspector.url}api/overview`)).body
        if (overview.highWater === head.highWater) break
      }
      assert.equal([overview?.highWater, overview?.digest, overview?.sessionsTotal], [head.highWater, head.digest, 601])
      const last = await getJson<InvocationDetail>(`${inspector.url}api/invocations/inv-burst-599`)
      assert.is(last.status, 200)
      assert.is(last.body.entries.length, 8, 'the last invocation of the burst, whole')
      // Its directory removed under it (a folder emptied): made again, and the refreshes go on. A
      // refresh may write a file into it while it is removed (ENOTEMPTY, seen under load): retried.
      await rm(copies, { recursive: true, force: true, maxRetries: 5 })
      await held.appendAll(completeInvocation('after'))
      const after = held.head()
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 50))) {
        overview = (await getJson<Overview>(`${inspector.url}api/overview`)).body
        if (overview.highWater === after.highWater) break
      }
      // Said with what the overview reports of the refresh (a stop's reason), should it ever not come.
      assert.is(overview?.highWater, after.highWater, `refreshed after its directory went (refresh: ${JSON.stringify(overview?.refresh)}; copies: ${JSON.stringify(await readdir(copies).catch((error: Error) => error.message))})`)
    } finally {
      await inspector?.close()
      await snapshot?.close()
      await held.close()
    }
    assert.equal(await readdir(copies), [], 'the snapshots the inspector took are closed')
  }),
)

test(
  'a snapshot refreshed every 100 ms while a child process appends with 32 appenders (LevelDB flushing meanwhile) ends with exactly the log: head, digest, every session, every invocation\'s facts',
  bounded(120_000, async (dir) => {
    const path = join(dir, 'log')
    const copies = join(dir, 'copies')
    await mkdir(copies)
    const child = startChild('child-append-stream.ts', [path, '32'])
    let snapshot: EventLog | undefined
    let inspector: Awaited<ReturnType<typeof serveInspector>> | undefined
    try {
      await child.waitForLine((line) => line === 'parked', 40_000)
      snapshot = await EventLog.openSnapshot(path)
      inspector = await serveInspector({ log: snapshot, refresh: { everyMs: 100, directory: copies } })
      const seen = new Set<number>()
      // Until the log has grown past several of LevelDB's write buffers (each flush a new table).
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 200))) {
        const { highWater } = (await getJson<Overview>(`${inspector.url}api/overview`)).body
        seen.add(highWater)
        if (highWater > 30_000 && seen.size >= 10) break
      }
      // At least a few refreshes while the log grew: how many fit in the minute depends on the
      // machine's load (a clean-clone CI run saw 9 of the 10 sought, each refresh a copy of a growing log).
      assert.ok(seen.size >= 3, `refreshed ${seen.size} times`)
      await child.stop('SIGKILL')
      const log = await EventLog.open(path)
      let head: { highWater: number; digest: string }
      let sessions: number
      let sample: StoredEvent[]
      try {
        head = log.head()
        sessions = new Set((await collectEvents(log)).map(({ event }) => event.invocation.sessionId)).size
        sample = await logInternals(log).invocationEvents('inv-park-held')
      } finally {
        await log.close()
      }
      let overview: Overview | undefined
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
        overview = (await getJson<Overview>(`${inspector.url}api/overview`)).body
        if (overview.highWater === head.highWater) break
      }
      assert.equal([overview?.highWater, overview?.digest, overview?.sessionsTotal], [head.highWater, head.digest, sessions], 'the last snapshot is the log')
      const held = await getJson<InvocationDetail>(`${inspector.url}api/invocations/inv-park-held`)
      assert.is(held.body.entries.length, sample.length)
      const verified = (await getJson<VerifyReport>(`${inspector.url}api/verify`)).body
      assert.equal([verified.status, verified.events, verified.digest], ['ok', head.highWater, head.digest])
    } finally {
      await child.stop('SIGKILL')
      await inspector?.close()
      await snapshot?.close()
    }
    assert.equal(await readdir(copies), [], 'every snapshot the inspector took was closed')
  }),
)

test(
  'in a snapshot, an open run is open while another process has the log open, and interrupted once none has (/proc/locks)',
  bounded(60_000, async (dir) => {
    const path = join(dir, 'log')
    const child = startChild('child-hold-log.ts', [path])
    const served: { inspector: Awaited<ReturnType<typeof serveInspector>>; snapshot: EventLog }[] = []
    const serve = async () => {
      const snapshot = await EventLog.openSnapshot(path)
      const inspector = await serveInspector({ log: snapshot })
      served.push({ inspector, snapshot })
      return inspector
    }
    const statusIn = async (inspector: { url: string }) => {
      const overview = (await getJson<Overview>(`${inspector.url}api/overview`)).body
      const detail = (await getJson<InvocationDetail>(`${inspector.url}api/invocations/${invocationOf('elsewhere').invocationId}`)).body
      return [overview.sessions[0]?.turns[0]?.runs[0]?.status, detail.summary.status]
    }
    try {
      await child.waitForLine((line) => line === 'ready')
      child.send('append elsewhere')
      await child.waitForLine((line) => line.startsWith('ack '))
      assert.is(await logHeldOpen(path), process.platform === 'linux' ? true : undefined)
      const whileHeld = await serve()
      assert.equal(await statusIn(whileHeld), ['open', 'open'], 'the process that has the log may be running it')
      await child.stop('SIGKILL')
      if (process.platform !== 'linux') return
      assert.is(await logHeldOpen(path), false)
      // Looked up for each request: the page of the earlier snapshot says so too.
      assert.equal(await statusIn(whileHeld), ['interrupted', 'interrupted'], 'no process has the log open: a crash left it')
      assert.equal(await statusIn(await serve()), ['interrupted', 'interrupted'])
      // A log of this process: held by this one, whose live actors are the running ones.
      const log = await EventLog.open(path)
      try {
        assert.is(await logHeldOpen(path), true)
        const inspector = await serveInspector({ log })
        try {
          assert.equal(await statusIn(inspector), ['interrupted', 'interrupted'])
        } finally {
          await inspector.close()
        }
      } finally {
        await log.close()
      }
      assert.is(await logHeldOpen(path), false)
      assert.is(await logHeldOpen(join(dir, 'no-log-here')), undefined)
    } finally {
      await child.stop('SIGKILL')
      for (const { inspector, snapshot } of served) {
        await inspector.close()
        await snapshot.close()
      }
    }
  }),
)

async function collectEvents(log: EventLog): Promise<StoredEvent[]> {
  const all: StoredEvent[] = []
  for await (const stored of log.events()) all.push(stored)
  return all
}

test(
  'invocation ids that are dot segments in a URL path (".", "..") are served through the query form the page uses',
  bounded(15_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const inspector = await serveInspector({ log })
    try {
      for (const id of ['.', '..', 'a:b']) {
        await log.appendAll(new EventMaker({ sessionId: `session-${id}`, turnId: 't', runId: 'r', invocationId: id }).many([facts.opened(), facts.requested('s1')]))
      }
      for (const id of ['.', '..', 'a:b']) {
        const { status, body } = await getJson<InvocationDetail>(`${inspector.url}api/invocation?${new URLSearchParams({ id })}`)
        assert.is(status, 200, id)
        assert.equal(body.entries.map((entry) => entry.fact.type), ['invocation.opened', 'model.requested'], id)
      }
      // The path form cannot name them: the URL drops the dot segment before it is sent.
      assert.is((await fetch(`${inspector.url}api/invocations/..`)).status, 404)
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  'a token: every API request must carry it (bearer or ?token=, never a cookie), a wrong one is 401, the page\'s own files load without it, and a bad one is refused unquoted',
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    await log.appendAll(new EventMaker(invocationOf('r0', 's0')).many(oneStep()))
    for (const token of ['short', 'has space in it, long enough', 'x'.repeat(513), 42]) {
      const error = await rejectsWithCode(() => serveInspector({ log, token: token as string }), 'INSPECTOR_INVALID_OPTIONS')
      assert.equal((error as { details?: unknown }).details, { field: 'token' })
      if (typeof token === 'string') assert.not.ok(error.message.includes(token), 'the value is not quoted back')
    }
    const open = await serveInspector({ log })
    try {
      assert.is(open.link, open.url, 'without a token the link is the address')
      assert.is((await fetch(`${open.url}api/overview`)).status, 200)
    } finally {
      await open.close()
    }
    const token = 'k7-Q_p.2~aZ9mB4xR8wT'
    const inspector = await serveInspector({ log, token })
    try {
      const { url, link } = inspector
      const port = new URL(url).port
      assert.is(link, `${url}?token=${token}`)
      for (const path of ['api/overview', 'api/events', 'api/invocation?id=inv-r0', 'api/machine', 'api/verify', 'api/nope', 'nope']) {
        const refused = await fetch(`${url}${path}`)
        assert.is(refused.status, 401, `no token: ${path}`)
        assert.is(((await refused.json()) as { code: string }).code, 'UNAUTHORIZED')
        assert.match(refused.headers.get('www-authenticate') ?? '', /^Bearer/)
      }
      const bearer = (value: string) => ({ headers: { authorization: `Bearer ${value}` } })
      assert.is((await fetch(`${url}api/overview`, bearer(`${token}x`))).status, 401, 'a wrong bearer')
      assert.is((await fetch(`${url}api/overview`, bearer(token.slice(1)))).status, 401, 'a shorter one')
      assert.is((await fetch(`${url}api/overview?token=nope-nope-nope-nope`)).status, 401, 'a wrong ?token=')
      assert.is((await fetch(`${url}api/overview?token=nope-nope-nope-nope`, bearer(token))).status, 401, 'a wrong ?token= is not made up for by a bearer')
      // A cookie of 127.0.0.1 reaches every port of it, whatever its name: the token is never one.
      assert.is((await fetch(`${url}api/overview`, { headers: { cookie: `factstate-inspector-${port}=${token}` } })).status, 401, 'a cookie is no token')
      const served = await fetch(`${url}api/overview`, bearer(token))
      assert.is(served.status, 200)
      assert.equal(((await served.json()) as Overview).sessions.map((session) => session.sessionId), ['s0'])
      assert.is((await fetch(`${url}api/overview?token=${token}`)).status, 200, 'a script may put it in the query')
      // The link: the page's own files, which hold nothing of the log, load as they are, and no cookie is set.
      for (const path of [link, url, `${url}style.css`, `${url}page/app.js`]) {
        const page = await fetch(path, { redirect: 'manual' })
        assert.is(page.status, 200, path)
        assert.is(page.headers.get('set-cookie'), null, path)
        assert.not.ok((await page.text()).includes('inv-r0'), 'nothing of the log')
      }
      assert.is((await raw(`${url}api/overview`, { method: 'HEAD' })).status, 401)
      assert.is((await raw(`${url}api/overview`, { method: 'POST' })).status, 405, 'read-only is said first')
    } finally {
      await inspector.close()
    }
    await log.close()
  }),
)

test(
  "the README's row for /api/invocation names the members the server answers with, and those of a timeline entry",
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    const inspector = await serveInspector({ log })
    try {
      await log.appendAll(new EventMaker(invocationOf('r0', 's0')).many(oneStep()))
      const { body } = await getJson<InvocationDetail>(`${inspector.url}api/invocation?id=inv-r0`)
      const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
      const row = readme.split('\n').find((line) => line.startsWith('| `/api/invocation?id=ID`')) ?? ''
      const named = new Set([...row.matchAll(/`([^`]+)`/g)].flatMap(([, code]) => (code as string).match(/[A-Za-z]\w*/g) ?? []))
      const members = [...Object.keys(body), ...Object.keys(body.entries[0] ?? {})]
      assert.ok(members.includes('entries') && members.includes('stateAfter'), members.join(', '))
      assert.equal(members.filter((member) => !named.has(member)), [], 'every member is named in the row')
    } finally {
      await inspector.close()
      await log.close()
    }
  }),
)

test.run()
