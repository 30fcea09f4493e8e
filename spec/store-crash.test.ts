/**
 * The log across processes: the writer lock against a child process, and kill -9 of a child in
 * the middle of a stream of acknowledged appends.
 */
import { cp, readFile, readdir, stat, truncate } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { StoredEvent } from '../facts/types.js'
import { ClassicLevel } from 'classic-level'
import { EventLog } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { lockHolder, logHeldOpen } from '../store/writer-presence.js'
import { EventMaker, type Child, boundedTest, facts, invocationOf, refusal, startChild } from './support/log-fixtures.js'

const ALL = Number.MAX_SAFE_INTEGER
const test = suite('store: processes')

/** Runs `body` with children that are always stopped afterwards. */
async function withChildren(body: (start: (script: string, args: string[]) => Child) => Promise<void>): Promise<void> {
  const children: Child[] = []
  try {
    await body((script, args) => {
      const child = startChild(script, args)
      children.push(child)
      return child
    })
  } finally {
    await Promise.all(children.map((child) => child.stop()))
  }
}

/** A child process that has the log at `dir` open (`child-hold-log.ts`), once it says so. */
async function holdingChild(start: (script: string, args: string[]) => Child, dir: string): Promise<Child> {
  const child = start('child-hold-log.ts', [dir])
  await child.waitForLine((line) => line === 'ready')
  return child
}

/** Asks a child from `holdingChild` to close its log, and waits until it has. */
async function closedBy(child: Child): Promise<void> {
  child.send('close')
  await child.waitForLine((line) => line === 'closed')
}

test(
  'writer lock: a log held by a child process is LOG_WRITER_BUSY here, the child keeps appending, and after kill -9 the open succeeds',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const child = await holdingChild(start, dir)
      child.send('append first')
      await child.waitForLine((line) => line === 'ack 1')

      const busy = await refusal(EventLog.open(dir))
      assert.is(busy.code, 'LOG_WRITER_BUSY')
      // Which process holds it, where Linux lists the lock; and the option of a worker that should wait its turn.
      const holder = process.platform === 'linux' ? { pid: child.process.pid } : {}
      assert.equal(busy.details, { holder: 'another-process', closing: false, ...holder })
      if (process.platform === 'linux') assert.match(busy.message, `another process (pid ${String(child.process.pid)}) holds this log`)
      assert.match(busy.message, 'EventLog.open(dir, { waitMs })')
      const again = await refusal(EventLog.open(dir))
      assert.is(again.code, 'LOG_WRITER_BUSY', 'a refused open leaves nothing behind that changes the answer')

      child.send('append second')
      await child.waitForLine((line) => line === 'ack 2')
      assert.not.ok(child.lines.some((line) => line.startsWith('error')), 'the child handle was not disturbed')

      await child.stop('SIGKILL')
      assert.is(child.process.signalCode, 'SIGKILL')
      const log = await EventLog.open(dir)
      try {
        assert.is((await log.verify()).events, 2, 'both acknowledged appends of the child are there')
        assert.is(await log.append(new EventMaker(invocationOf('third')).next(facts.opened())), 3)
      } finally {
        await log.close()
      }
    }),
  ),
)

test(
  'writer lock: a log held here is LOG_WRITER_BUSY in a child, also after a refused second open in this process',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const log = await EventLog.open(dir)
      try {
        await log.append(new EventMaker(invocationOf('a')).next(facts.opened()))
        // A same-process second open must not release this handle's LevelDB lock.
        assert.is((await refusal(EventLog.open(dir))).code, 'LOG_WRITER_BUSY')
        const child = start('child-hold-log.ts', [dir])
        await child.waitForLine((line) => line.startsWith('error') || line === 'ready')
        assert.equal(child.lines, ['error LOG_WRITER_BUSY'])
        assert.is((await child.exited).code, 3)
        assert.is(await log.append(new EventMaker(invocationOf('b')).next(facts.opened())), 2, 'this handle still appends')
        const verified = await log.verify()
        assert.is(verified.events, 2)
      } finally {
        await log.close()
      }
      // Once closed here, a child may open it.
      const child = start('child-hold-log.ts', [dir])
      await child.waitForLine((line) => line === 'ready' || line.startsWith('error'))
      assert.is(child.lines[0], 'ready')
      await closedBy(child)
      assert.is((await child.exited).code, 0)
    }),
  ),
)

test(
  'writer lock: an open with waitMs waits while a child process holds the log, and opens once the child has closed it',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const child = await holdingChild(start, dir)
      child.send('append first')
      await child.waitForLine((line) => line === 'ack 1')

      let settled = false
      const waiting = EventLog.open(dir, { waitMs: 45_000 })
      void waiting.then(
        () => (settled = true),
        () => (settled = true),
      )
      // The child still holds the log (a plain open is refused, and the child appends): the waiting open has not given up.
      assert.is((await refusal(EventLog.open(dir))).code, 'LOG_WRITER_BUSY')
      child.send('append second')
      await child.waitForLine((line) => line === 'ack 2')
      assert.is((await refusal(EventLog.open(dir))).code, 'LOG_WRITER_BUSY')
      assert.not.ok(settled, 'the open waits rather than failing LOG_WRITER_BUSY at once')

      await closedBy(child)
      const log = await waiting
      try {
        assert.is((await log.verify()).events, 2, 'the open that waited reads what the child wrote')
        assert.is(await log.append(new EventMaker(invocationOf('third')).next(facts.opened())), 3)
      } finally {
        await log.close()
      }
      assert.is((await child.exited).code, 0)
    }),
  ),
)

test(
  'writer lock: an open whose waitMs runs out, or whose signal aborts, while a child holds the log fails LOG_WRITER_BUSY with the details of an open that does not wait',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const child = await holdingChild(start, dir)

      const timedOut = await refusal(EventLog.open(dir, { waitMs: 300 }))
      assert.is(timedOut.code, 'LOG_WRITER_BUSY')
      const holder = process.platform === 'linux' ? { pid: child.process.pid } : {}
      assert.equal(timedOut.details, { holder: 'another-process', closing: false, ...holder })
      assert.match(timedOut.message, /^LOG_WRITER_BUSY: another process (\(pid \d+\) )?holds this log: .* \(still so after waiting 300 ms \(waitMs\)\)$/)

      // A signal ends a long wait early (aborted once a plain open has been refused meanwhile).
      const controller = new AbortController()
      const given = refusal(EventLog.open(dir, { waitMs: 600_000, signal: controller.signal }))
      assert.is((await refusal(EventLog.open(dir))).code, 'LOG_WRITER_BUSY')
      controller.abort()
      const givenUp = await given
      assert.is(givenUp.code, 'LOG_WRITER_BUSY')
      assert.equal(givenUp.details, { holder: 'another-process', closing: false, ...holder })
      assert.match(givenUp.message, /\(its signal aborted the wait\)$/)
      // An already aborted signal: one try, as without waitMs.
      const already = await refusal(EventLog.open(dir, { waitMs: 600_000, signal: AbortSignal.abort() }))
      assert.equal([already.code, already.details], ['LOG_WRITER_BUSY', { holder: 'another-process', closing: false, ...holder }])

      child.send('append after')
      await child.waitForLine((line) => line === 'ack 1')
      assert.not.ok(child.lines.some((line) => line.startsWith('error')), 'the child handle was not disturbed by the tries')
      await closedBy(child)
    }),
  ),
)

/** How many LevelDB opens (`ClassicLevel`'s `_open`, refused ones included) `body` makes. */
async function levelDbOpens(body: () => Promise<void>): Promise<number> {
  const proto = ClassicLevel.prototype as unknown as { _open: (...args: unknown[]) => unknown }
  const original = proto._open
  let opens = 0
  proto._open = function (this: unknown, ...args: unknown[]) {
    opens += 1
    return original.apply(this, args)
  }
  try {
    await body()
  } finally {
    proto._open = original
  }
  return opens
}

test(
  'writer lock: two opens waiting in one process for a log a child holds back off: a refused try wakes no other waiter (they woke each other at once, hundreds of tries a second)',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const child = await holdingChild(start, dir)
      const tries = await levelDbOpens(async () => {
        const both = await Promise.all([refusal(EventLog.open(dir, { waitMs: 1_500 })), refusal(EventLog.open(dir, { waitMs: 1_500 }))])
        assert.equal(
          both.map((error) => error.code),
          ['LOG_WRITER_BUSY', 'LOG_WRITER_BUSY'],
        )
      })
      // Backing off from 25 ms, doubling, each waiter tries about 7 times in 1.5 s.
      assert.ok(tries > 0 && tries <= 40, `${tries} LevelDB opens`)
      await closedBy(child)
    }),
  ),
)

test(
  "writer lock: while /proc/locks lists the child's lock, an open with waitMs tries LevelDB only first and at its deadline (each refused LevelDB open renames the holder's LOG to LOG.old)",
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const child = await holdingChild(start, dir)
      assert.is(await logHeldOpen(dir), true, "the child's lock is listed")
      const logBefore = (await stat(join(dir, 'LOG'))).ino
      const tries = await levelDbOpens(async () => {
        const refused = await refusal(EventLog.open(dir, { waitMs: 1_500 }))
        assert.equal([refused.code, refused.details], ['LOG_WRITER_BUSY', { holder: 'another-process', closing: false, pid: child.process.pid }])
        assert.match(refused.message, /\(still so after waiting 1,500 ms \(waitMs\)\)$/)
      })
      const renamed = (await stat(join(dir, 'LOG'))).ino !== logBefore
      // Without the check, backing off from 25 ms it tried about 7 times.
      assert.is(tries, 2, `${tries} LevelDB opens`)
      assert.ok(renamed, 'the refused tries did reach LevelDB (the count is of real tries)')
      child.send('append after')
      await child.waitForLine((line) => line === 'ack 1')
      await closedBy(child)
    }),
  ),
)

interface Ack {
  seq: number
  id: string
}

const ACKS_BEFORE_KILL = 1_000

test(
  'kill -9 during a stream of acknowledged appends: every acknowledged seq survives, verify passes, recovery closes the open invocations once',
  boundedTest(90_000, (dir) =>
    withChildren(async (start) => {
      const child = start('child-append-stream.ts', [dir, '32'])
      await child.waitForLine((line) => line === 'parked', 40_000)
      await child.waitForLine(() => child.lines.length > ACKS_BEFORE_KILL, 40_000)
      child.process.kill('SIGKILL')
      const status = await child.exited
      assert.is(status.signal, 'SIGKILL', `the child was killed (stderr: ${child.stderr()})`)

      // Every line printed is an acknowledgement made after the append was durable.
      const acks: Ack[] = child.lines
        .filter((line) => line.startsWith('ack '))
        .map((line) => {
          const [, seq, id] = line.split(' ')
          return { seq: Number(seq), id: id as string }
        })
      assert.ok(acks.length >= ACKS_BEFORE_KILL, `${acks.length} acknowledgements`)

      const log = await EventLog.open(dir)
      try {
        const before = await log.prefix(ALL, ALL)
        const maxAck = Math.max(...acks.map((ack) => ack.seq))
        assert.ok(before.highWater >= maxAck, `high-water ${before.highWater} covers the last acknowledged seq ${maxAck}`)
        for (const ack of acks) {
          assert.is(before.events[ack.seq - 1]?.event.id, ack.id, `acknowledged seq ${ack.seq} holds ${ack.id}`)
        }
        assert.equal(
          before.events.map((item) => item.seq),
          Array.from({ length: before.highWater }, (_, index) => index + 1),
          'seqs are gapless',
        )
        const verified = await log.verify()
        assert.is(verified.events, before.highWater)
        assert.is(verified.digest, before.digest)

        // What recovery must do, decided from the facts before it runs.
        const ids = [...new Set(before.events.map((item) => item.event.invocation.invocationId))]
        const open = ids.filter((id) => before.projectInvocation(id).terminal === null)
        for (const state of ['model', 'tool', 'between', 'rejected', 'held']) {
          assert.ok(open.includes(`inv-park-${state}`), `parked ${state} is open`)
        }
        assert.ok(open.length > 5, 'the crash left streaming invocations open too')

        const closed = await recoverInvocations(log)
        assert.is(closed, open.length)

        const after = await log.prefix(ALL, ALL)
        const added = after.events.slice(before.highWater)
        const addedFor = (id: string): StoredEvent['event']['fact'][] =>
          added.filter((item) => item.event.invocation.invocationId === id).map((item) => item.event.fact)
        for (const id of open) {
          const projection = before.projectInvocation(id)
          const expected: unknown[] = projection.unfinishedModelSteps.map((stepId) => ({ type: 'model.interrupted', stepId, status: 'failed' }))
          const recoveryClass = projection.uncertainOperations.length > 0 ? 'outcome_unknown' : 'host_interrupted'
          expected.push({ type: 'invocation.ended', outcome: { status: 'failed', class: recoveryClass } })
          const got = addedFor(id).map((fact) => {
            const { message: _message, ...rest } = fact as { message?: string }
            if (fact.type === 'invocation.ended' && fact.outcome.status === 'failed') {
              return { ...rest, outcome: { status: fact.outcome.status, class: fact.outcome.class } }
            }
            return rest
          })
          assert.equal(got, expected, `recovery of ${id}`)
          const projected = after.projectInvocation(id)
          assert.is(projected.terminal, 'failed')
          assert.equal(projected.unfinishedModelSteps, [])
          assert.equal(projected.uncertainOperations, projection.uncertainOperations, 'no settlement is invented')
        }
        const classOf = (id: string) => {
          const end = addedFor(id).at(-1)
          return end?.type === 'invocation.ended' && end.outcome.status === 'failed' ? end.outcome.class : undefined
        }
        assert.is(addedFor('inv-park-model')[0]?.type, 'model.interrupted')
        assert.is(classOf('inv-park-model'), 'host_interrupted')
        assert.is(classOf('inv-park-tool'), 'outcome_unknown')
        assert.equal(after.projectInvocation('inv-park-tool').uncertainOperations, ['op1'])
        assert.is(classOf('inv-park-between'), 'host_interrupted')
        assert.is(classOf('inv-park-rejected'), 'host_interrupted')
        assert.is(classOf('inv-park-held'), 'host_interrupted')
        assert.is(added.length, open.length + open.filter((id) => before.projectInvocation(id).unfinishedModelSteps.length > 0).length)
        for (const id of ids) assert.ok(after.projectInvocation(id).terminal !== null, `${id} is closed`)

        const recovered = await log.verify()
        assert.is(await recoverInvocations(log), 0, 'a second recovery closes nothing')
        assert.equal(await log.verify(), recovered, 'and writes nothing')
      } finally {
        await log.close()
      }

      const reopened = await EventLog.open(dir)
      try {
        const verified = await reopened.verify()
        assert.is(await recoverInvocations(reopened), 0, 'nothing is left open after a reopen')
        assert.equal(await reopened.verify(), verified)
      } finally {
        await reopened.close()
      }
    }),
  ),
)

test(
  'after kill -9 the head recorded while the log ran catches a write-ahead log that lost synced facts: LOG_CORRUPT, not a shorter log',
  boundedTest(60_000, (dir) =>
    withChildren(async (start) => {
      const live = join(dir, 'live')
      const child = start('child-hold-log.ts', [live])
      await child.waitForLine((line) => line === 'ready')
      for (const [n, name] of ['one', 'two', 'three'].entries()) {
        child.send(`append ${name}`)
        await child.waitForLine((line) => line === `ack ${n + 1}`)
      }
      // No clean close will record the head: the log refreshes its anchor about a second after a commit.
      const anchored = async () => Number((await readFile(join(live, 'FACTSTATE-HEAD'), 'utf8').catch(() => '')).split(' ')[2] ?? 0)
      for (let waited = 0; (await anchored()) < 3 && waited < 20_000; waited += 50) await sleep(50)
      assert.is(await anchored(), 3, 'the head of the running log was recorded')
      child.send('append four')
      await child.waitForLine((line) => line === 'ack 4')
      await child.stop('SIGKILL')
      assert.is(child.process.signalCode, 'SIGKILL')

      // Intact, the killed log opens with every acknowledged fact (the anchor may count fewer).
      const intact = join(dir, 'intact')
      await cp(live, intact, { recursive: true })
      const log = await EventLog.open(intact)
      try {
        assert.is((await log.verify()).events, 4)
      } finally {
        await log.close()
      }

      // Every fact was still in LevelDB's write-ahead log; losing it (as a damaged block loses itself and
      // the rest of its file, which LevelDB takes for a torn write) used to open an empty log.
      const logs = (await readdir(live)).filter((name) => name.endsWith('.log'))
      assert.ok(logs.length > 0, 'a write-ahead log is there')
      for (const name of logs) await truncate(join(live, name), 0)
      const lost = await refusal(EventLog.open(live))
      assert.is(lost.code, 'LOG_CORRUPT', lost.message)
      assert.equal(lost.details, { seq: 1 })
      assert.match(lost.message, /held 3 events when its head was last recorded, now 0/)
    }),
  ),
)

test('a lock line of /proc/locks names its holder: a pid, none when it lists 0 or -1 (an open file description lock, held all the same); a waiter holds nothing', () => {
  const locks = [
    '1: POSIX  ADVISORY  WRITE 2400 fe:00:2154529 0 EOF',
    '2: OFDLCK ADVISORY  WRITE -1 fe:00:3000001 0 EOF',
    '3: POSIX  ADVISORY  WRITE 0 00:2a:3000002 0 EOF',
    '4: POSIX  ADVISORY  WRITE 2500 fe:00:3000003 0 EOF',
    '4: -> POSIX  ADVISORY  WRITE 2600 fe:00:3000004 0 EOF',
    '',
  ].join('\n')
  assert.equal(lockHolder(locks, 2154529n), { pid: 2400 })
  assert.equal(lockHolder(locks, 3000001n), {}, 'an OFD lock is held')
  assert.equal(lockHolder(locks, 3000002n), {}, 'a holder outside the pid namespace')
  assert.equal(lockHolder(locks, 3000004n), false, 'a waiter')
  assert.equal(lockHolder(locks, 42n), false)
})

test.run()
