/**
 * `log.sessions()`: the sessions of a log, in id order, a page at a time, each with its last run
 * opened (LangGraph's threads.search, here). Real logs on disk; a snapshot lists what the log does.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact, type SessionListing } from '../index.js'
import { logInternals } from '../store/event-log.js'
import { EventMaker, boundedTest, completeInvocation, facts, invocationOf, refusal, withLog } from './support/log-fixtures.js'

/** Ids and how each listed session's last run stands, for comparing listings. */
const shortly = (listed: SessionListing[]) => listed.map(({ sessionId, latestRun }) => [sessionId, latestRun.runId, latestRun.terminal])

test(
  "log.latestRun(sessionId): the last run opened, as the last of log.runs, also open, for sessions whose ids begin one another, after a reopen and on a snapshot; none for a session without runs; an id that is no id is LOG_INVALID_ARGUMENT",
  boundedTest(20_000, async (dir) => {
    const location = join(dir, 'log')
    const ids = ['chat', 'chat-1', 'chat.2', 'notebook', 'note', 'zzz']
    await withLog(location, async (log) => {
      assert.is(await log.latestRun('chat'), undefined, 'an empty log has none')
      // Three runs of chat, then sessions whose ids begin with its id, and notebook without note.
      await log.appendAll(completeInvocation('c1', 'chat'))
      await log.appendAll(completeInvocation('c2', 'chat'))
      await log.appendAll(completeInvocation('x', 'chat-1'))
      await log.appendAll(new EventMaker(invocationOf('c3', 'chat')).many([facts.opened(), facts.requested('s1')]))
      await log.appendAll(completeInvocation('y', 'chat.2'))
      await log.appendAll(completeInvocation('n', 'notebook'))
      for (const sessionId of ids) {
        assert.equal(await log.latestRun(sessionId), (await log.runs(sessionId)).at(-1), `${sessionId}: the last of log.runs`)
      }
      assert.is((await log.latestRun('chat'))?.runId, 'run-c3', 'the last opened, open still')
      assert.is((await log.latestRun('chat'))?.terminal, null)
      assert.is(await log.latestRun('note'), undefined, 'a session whose id begins another one has no run')
      for (const bad of ['', 'a b', 'x'.repeat(300)]) {
        const refused = await refusal(log.latestRun(bad))
        assert.equal([refused.code, refused.details?.field], ['LOG_INVALID_ARGUMENT', 'sessionId'], JSON.stringify(bad))
      }
    })
    await withLog(location, async (log) => {
      for (const sessionId of ids) assert.equal(await log.latestRun(sessionId), (await log.runs(sessionId)).at(-1), `${sessionId} after a reopen`)
      await log.appendAll(completeInvocation('c4', 'chat'))
      assert.is((await log.latestRun('chat'))?.runId, 'run-c4', 'a run opened since is the last')
    })
    const snapshot = await EventLog.openSnapshot(location, { directory: dir })
    try {
      for (const sessionId of ids) assert.equal(await snapshot.latestRun(sessionId), (await snapshot.runs(sessionId)).at(-1), `${sessionId} on a snapshot`)
    } finally {
      await snapshot.close()
    }
  }),
)

test(
  'sessions lists every session in id order with its last run opened (not the last in id order), filtered by prefix, a page at a time',
  boundedTest(20_000, async (dir) => {
    const location = join(dir, 'log')
    await withLog(location, async (log) => {
      assert.equal(await log.sessions(), [], 'an empty log has none')
      // Session alpha: run-z opened first and ended, run-a opened after it and is still open.
      await log.appendAll(completeInvocation('z', 'alpha'))
      await log.appendAll(new EventMaker(invocationOf('a', 'alpha')).many([facts.opened(), facts.requested('s1')]))
      await log.appendAll(completeInvocation('ab', 'alpha.b'))
      await log.appendAll(completeInvocation('alphabet', 'alphabet'))
      await log.appendAll(new EventMaker(invocationOf('beta', 'beta')).many([facts.opened(), facts.ended({ status: 'failed', class: 'model_failed', message: 'HTTP 500' })]))
      await log.appendAll(completeInvocation('g', 'gamma'))
      const all = await log.sessions()
      assert.equal(shortly(all), [
        ['alpha', 'run-a', null],
        ['alpha.b', 'run-ab', 'completed'],
        ['alphabet', 'run-alphabet', 'completed'],
        ['beta', 'run-beta', 'failed'],
        ['gamma', 'run-g', 'completed'],
      ])
      for (const { sessionId, latestRun } of all) assert.equal(latestRun, (await log.runs(sessionId)).at(-1), `${sessionId}: the last of log.runs`)
      assert.equal(all[3]?.latestRun.outcome, { status: 'failed', class: 'model_failed', message: 'HTTP 500' })
      assert.equal((await log.sessions({ prefix: 'alpha' })).map((session) => session.sessionId), ['alpha', 'alpha.b', 'alphabet'])
      assert.equal((await log.sessions({ prefix: 'alpha.' })).map((session) => session.sessionId), ['alpha.b'])
      assert.equal(await log.sessions({ prefix: 'delta' }), [])
      // Pages of two, each after the last id of the one before: every session once, in order.
      const paged: string[] = []
      for (let page = await log.sessions({ limit: 2 }); page.length > 0; page = await log.sessions({ limit: 2, after: page.at(-1)?.sessionId })) {
        assert.ok(page.length <= 2)
        paged.push(...page.map((session) => session.sessionId))
      }
      assert.equal(paged, all.map((session) => session.sessionId))
      assert.equal((await log.sessions({ prefix: 'alpha', after: 'alpha.b' })).map((session) => session.sessionId), ['alphabet'], 'after, within a prefix')
      assert.equal((await log.sessions({ prefix: 'beta', after: 'a' })).map((session) => session.sessionId), ['beta'], 'after, before the prefix')
      assert.equal(await log.sessions({ prefix: 'alpha', after: 'b' }), [], 'after, past the prefix')
      assert.equal((await log.sessions({ after: 'alpha.b', limit: 1 })).map((session) => session.sessionId), ['alphabet'], 'after a session that is listed: not it again')
      // What the caller changes is its own copy.
      const [first] = await log.sessions({ limit: 1 })
      if (first) first.latestRun.runId = 'changed'
      assert.is((await log.sessions({ limit: 1 }))[0]?.latestRun.runId, 'run-a')
    })
    // A reopened log, and a snapshot of it, list the same.
    await withLog(location, async (log) => {
      const listed = await log.sessions()
      assert.is(listed.length, 5)
      assert.is(listed[0]?.latestRun.runId, 'run-a', 'read from the run index after a reopen')
      const snapshot = await EventLog.openSnapshot(location, { directory: dir })
      try {
        assert.equal(await snapshot.sessions({ limit: 1_000 }), listed)
      } finally {
        await snapshot.close()
      }
    })
  }),
)

test(
  "sessions gives a child run's last run its parent, as log.runs does",
  boundedTest(15_000, (dir) =>
    withLog(dir, async (log) => {
      const supervisor = invocationOf('sup', 'desk')
      await log.appendAll(completeInvocation('sup', 'desk'))
      const opened = facts.opened('draft it') as Extract<Fact, { type: 'invocation.opened' }>
      if (opened.input.kind === 'message') opened.input.parent = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
      await log.append(new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer')).next(opened))
      const [desk, child] = await log.sessions()
      assert.is(desk?.latestRun.parent, undefined)
      assert.equal(child?.latestRun.parent, { invocation: supervisor, operationId: 'inv-sup/step-1/0' })
    }),
  ),
)

test(
  'sessions refuses options it cannot use, LOG_INVALID_ARGUMENT naming the option, a misspelt one told the one meant; a closed log is LOG_CLOSED',
  boundedTest(15_000, async (dir) => {
    const location = join(dir, 'log')
    await withLog(location, async (log) => {
      await log.appendAll(completeInvocation('a', 'alpha'))
      const cases: [string, unknown, string][] = [
        ['options that are no object', 'alpha', 'options'],
        ['an unknown option', { cursor: 'alpha' }, 'cursor'],
        ['a misspelt option', { limt: 5 }, 'limt'],
        ['a prefix with a character no id has', { prefix: 'user@' }, 'prefix'],
        ['a prefix longer than an id', { prefix: 'x'.repeat(129) }, 'prefix'],
        ['a prefix that is no string', { prefix: 7 }, 'prefix'],
        ['an empty after', { after: '' }, 'after'],
        ['an after that is no id', { after: 'a/b' }, 'after'],
        ['a limit of 0', { limit: 0 }, 'limit'],
        ['a limit past 1,000', { limit: 1_001 }, 'limit'],
        ['a limit that is no whole number', { limit: 1.5 }, 'limit'],
        ['a limit that is a string', { limit: '5' }, 'limit'],
      ]
      for (const [what, options, field] of cases) {
        const refused = await refusal(log.sessions(options as never))
        assert.equal([refused.code, refused.details], ['LOG_INVALID_ARGUMENT', { field }], what)
      }
      assert.match((await refusal(log.sessions({ limt: 5 } as never))).message, 'did you mean limit?')
      // A thread id made elsewhere is told how to make an id of it, as log.runs tells it.
      const mapping = "its SHA-256 digest in base64url (createHash('sha256').update(id).digest('base64url'), 43 characters)"
      assert.match((await refusal(log.sessions({ after: 'alice@example.com' }))).message, mapping)
      assert.match((await refusal(log.runs('alice@example.com'))).message, mapping)
      assert.equal((await log.sessions({ prefix: '', limit: 1_000 })).map((session) => session.sessionId), ['alpha'], 'an empty prefix and the largest limit')
    })
    const closed = await EventLog.open(location)
    await closed.close()
    assert.is((await refusal(closed.sessions())).code, 'LOG_CLOSED')
  }),
)

test(
  "a child run is a session of its own (childRunFor's ids): listed beside the conversations, its latestRun.parent naming the call that started it, so a list of conversations leaves those with a parent out",
  boundedTest(20_000, async (dir) => {
    await withLog(join(dir, 'log'), async (log) => {
      const supervisor = invocationOf('sup', 'user-42.desk')
      await log.appendAll(completeInvocation('sup', 'user-42.desk'))
      const opened = facts.opened('draft it') as Extract<Fact, { type: 'invocation.opened' }>
      if (opened.input.kind === 'message') opened.input.parent = { invocation: supervisor, operationId: 'inv-sup/step-1/0' }
      await log.append(new EventMaker(invocationOf('writer', 'inv-sup.step-1.0.writer')).next(opened))
      const listed = await log.sessions()
      assert.equal(listed.map(({ sessionId, latestRun }) => [sessionId, latestRun.parent?.operationId]), [
        ['inv-sup.step-1.0.writer', 'inv-sup/step-1/0'],
        ['user-42.desk', undefined],
      ])
      assert.equal(listed.filter(({ latestRun }) => latestRun.parent === undefined).map(({ sessionId }) => sessionId), ['user-42.desk'], 'the conversations')
      assert.equal((await log.sessions({ prefix: 'user-42.' })).map(({ sessionId }) => sessionId), ['user-42.desk'], "a prefix of the app's own leaves the child out too")
    })
  }),
)

test(
  "id-order pages list what the recent order does, sorted by id, across page boundaries, with latest runs remembered, trimmed, changed after they were remembered, and read afresh; the listing fills no memory",
  boundedTest(30_000, async (dir) => {
    const location = join(dir, 'log')
    const ids = Array.from({ length: 13 }, (_, index) => `s${String(index).padStart(2, '0')}`)
    /** Every page of `limit` in id order, joined. */
    const pages = async (log: EventLog, limit: number) => {
      const all: SessionListing[] = []
      for (let page = await log.sessions({ limit }); page.length > 0; page = await log.sessions({ limit, after: page.at(-1)?.sessionId })) all.push(...page)
      return all
    }
    const byId = (listed: SessionListing[]) => [...listed].sort((a, b) => (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0))
    const expectAgreement = async (log: EventLog, what: string) => {
      const listed = await pages(log, 5)
      assert.equal(listed.map(({ sessionId }) => sessionId), ids, `${what}: every session once, in id order`)
      assert.equal(listed, byId(await log.sessions({ order: 'recent', limit: 1_000 })), `${what}: the recent order's, sorted by id`)
      for (const { sessionId, latestRun } of listed) assert.equal(latestRun, (await log.runs(sessionId)).at(-1), `${what}: ${sessionId}'s last of log.runs`)
      return listed
    }
    let listed: SessionListing[] = []
    await withLog(location, async (log) => {
      // Sessions added out of id order; every third gets a second run whose id sorts before its first.
      for (const id of [...ids].reverse()) await log.appendAll(completeInvocation(`z-${id}`, id))
      for (const id of ids.filter((_, index) => index % 3 === 0)) await log.appendAll(completeInvocation(`m-${id}`, id))
      const internals = logInternals(log)
      // Latest runs remembered (as an admission remembers them), then some changed, then the map trimmed.
      for (const id of ids) await internals.latestRun(id)
      for (const id of ['s01', 's05', 's06', 's12']) await log.appendAll(new EventMaker(invocationOf(`a-${id}`, id)).many([facts.opened(), facts.requested('s1')]))
      await expectAgreement(log, 'remembered and changed')
      internals.setLatestRunLimit(4)
      // A session the log has not (remembered as having no run) is one entry too many.
      await internals.latestRun('nobody')
      for (const id of ids.slice(0, 6)) await internals.latestRun(id)
      assert.ok(internals.latestRunCache().evictions > 0, 'the map was trimmed')
      await log.appendAll(completeInvocation('b-s04', 's04'))
      listed = await expectAgreement(log, 'trimmed')
      assert.equal(
        listed.map(({ sessionId, latestRun }) => [sessionId, latestRun.runId]).filter(([, runId]) => !runId?.startsWith('run-z-')),
        [
          ['s00', 'run-m-s00'],
          ['s01', 'run-a-s01'],
          ['s03', 'run-m-s03'],
          ['s04', 'run-b-s04'],
          ['s05', 'run-a-s05'],
          ['s06', 'run-a-s06'],
          ['s09', 'run-m-s09'],
          ['s12', 'run-a-s12'],
        ],
        'the latest run opened, not the last by id',
      )
    })
    // Reopened, nothing remembered: each page read from the session records; a listing of every session remembers none of them.
    await withLog(location, async (log) => {
      const internals = logInternals(log)
      assert.equal(await expectAgreement(log, 'reopened'), listed)
      assert.equal(await pages(log, 1_000), listed, 'one page of every session')
      assert.is(internals.latestRunCache().sessions, 0, 'listing remembers no latest run')
      const snapshot = await EventLog.openSnapshot(location, { directory: dir })
      try {
        assert.equal(await expectAgreement(snapshot, 'a snapshot'), listed)
      } finally {
        await snapshot.close()
      }
    })
  }),
)

test.run()
