/**
 * Edges of the append path found by a concurrency trial: a close made while appends wait behind
 * a source check, an event id given twice in one call, and a precondition that throws something
 * whose `code` cannot be read. Also the operation ids an invocation has used: shared between the
 * versions of its record, never leaking from a refused call into the next.
 */
import { join } from 'node:path'
import fc from 'fast-check'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { ExecutionSettings, Fact, HandoffPause, RuntimeEvent } from '../facts/types.js'
import { decodeEvent, decodeRecord, encodeEvent } from '../store/encoding.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { keys } from '../store/keys.js'
import { OperationIds } from '../store/projection.js'
import { CATALOG_DIGEST, EventMaker, boundedTest, facts, invocationOf, refusal, withDb } from './support/log-fixtures.js'

const edges = suite('store: append edges')

edges(
  'appends made before close() are written even when they wait behind a continuation whose source the log has not checked yet',
  boundedTest(30_000, async (root) => {
    const dir = join(root, 'log')
    const source = new EventMaker(invocationOf('src'))
    let log = await EventLog.open(dir)
    await log.appendAll(source.many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })]))
    const boundary = (await log.runSource('session-src', 'run-src'))?.boundary
    await log.close()
    assert.ok(boundary)
    // A fresh handle has not checked that boundary: the continuation waits for it, and the plain append behind it.
    log = await EventLog.open(dir)
    const opened = facts.opened() as Extract<Fact, { type: 'invocation.opened' }>
    const continuation = new EventMaker({ ...invocationOf('cont'), sessionId: 'session-src' }).next({ ...opened, input: { kind: 'continuation', source: boundary } })
    const plain = new EventMaker(invocationOf('plain')).next(facts.opened())
    const outcomes = Promise.allSettled([log.append(continuation), log.append(plain)])
    await log.close()
    assert.equal(await outcomes, [
      { status: 'fulfilled', value: 3 },
      { status: 'fulfilled', value: 4 },
    ])
    assert.is((await refusal(log.append(new EventMaker(invocationOf('late')).next(facts.opened())))).code, 'LOG_CLOSED', 'one made after the close is refused')
    log = await EventLog.open(dir)
    try {
      assert.equal(await log.verify(), { events: 4, digest: log.head().digest })
      assert.is(await log.append(structuredClone(plain)), 4, 'stored as acknowledged')
    } finally {
      await log.close()
    }
  }),
)

edges(
  'one call giving an event id twice with different content is LOG_CONFLICT naming the id, not a seq it never wrote',
  boundedTest(30_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      const make = new EventMaker(invocationOf('twice'))
      const first = make.next(facts.opened())
      const again = { ...first, recordedAt: first.recordedAt + 1 }
      const error = await refusal(log.appendAll([first, again]))
      assert.is(error.code, 'LOG_CONFLICT')
      assert.equal(error.details, { eventId: first.id })
      assert.is(log.head().highWater, 0, 'nothing of the call was written')
      assert.equal(await log.appendAll([first, structuredClone(first)]), [1, 1], 'the same content twice is one event')
      // Another caller's event staged in the same group is a seq that will hold it.
      const other = new EventMaker(invocationOf('other')).next(facts.opened())
      const [stored, clash] = await Promise.allSettled([log.append(other), log.append({ ...other, recordedAt: other.recordedAt + 1 })])
      assert.equal(stored, { status: 'fulfilled', value: 2 })
      assert.is(clash.status === 'rejected' && (clash.reason as { details?: unknown }).details !== undefined, true)
      assert.equal((clash as PromiseRejectedResult).reason.details, { seq: 2 })
    } finally {
      await log.close()
    }
  }),
)

edges(
  'a precondition throwing a value whose code cannot be read rejects its own append with that value; the appends behind it are written',
  boundedTest(30_000, async (root) => {
    const log = await EventLog.open(join(root, 'log'))
    try {
      const odd = Object.defineProperty({}, 'code', {
        get() {
          throw new Error('no code here')
        },
      })
      const revoked = Proxy.revocable({}, {})
      revoked.revoke()
      const internals = logInternals(log)
      const refused = [odd, revoked.proxy].map((thrown, index) =>
        internals.appendAll([new EventMaker(invocationOf(`refused-${index}`)).next(facts.opened())], async () => {
          throw thrown
        }),
      )
      const behind = log.append(new EventMaker(invocationOf('behind')).next(facts.opened()))
      const outcomes = await Promise.allSettled(refused)
      assert.ok(outcomes[0]?.status === 'rejected' && outcomes[0].reason === odd, 'rejected with the very value')
      assert.ok(outcomes[1]?.status === 'rejected' && outcomes[1].reason === revoked.proxy)
      assert.is(await behind, 1)
      assert.is((await log.verify()).events, 1)
    } finally {
      await log.close()
    }
  }),
)

edges('every version of an invocation\'s operation ids sees exactly its own ids, whichever version later ones grow from', () => {
  const pool = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']
  // Each command grows a new version from an earlier one (by index), as refused and discarded stagings do.
  const command = fc.tuple(fc.nat(), fc.constantFrom(...pool))
  fc.assert(
    fc.property(fc.array(command, { maxLength: 40 }), (commands) => {
      const versions: { ids: OperationIds; expected: string[] }[] = [{ ids: OperationIds.NONE, expected: [] }]
      for (const [pick, id] of commands) {
        const from = versions[pick % versions.length] as (typeof versions)[number]
        if (from.expected.includes(id)) continue
        versions.push({ ids: from.ids.with(id), expected: [...from.expected, id] })
      }
      for (const { ids, expected } of versions) {
        assert.equal(ids.toArray(), expected)
        assert.is(ids.size, expected.length)
        for (const id of pool) assert.is(ids.has(id), expected.includes(id), `has(${id}) of [${expected}]`)
        assert.equal(OperationIds.of(expected).toArray(), expected, 'a stored array reads back as the same ids')
      }
    }),
    { numRuns: 300 },
  )
})

edges(
  'an operation id staged by a refused call stays free, and one appended is refused when used again, also after a reopen',
  boundedTest(30_000, async (root) => {
    const dir = join(root, 'log')
    const make = new EventMaker(invocationOf('ops'))
    const dispatch = (operationId: string, callId: string): Fact => ({ type: 'tool.dispatched', operationId, callId, name: 'echo', input: {} })
    const calls = [1, 2, 3].map((n) => ({ callId: `call-op${n}`, name: 'echo', arguments: '{}' }))
    let log = await EventLog.open(dir)
    try {
      await log.appendAll(make.many([facts.opened(), facts.requested('s1'), facts.completed('s1', calls), facts.dispatched('op1')]))
      // op2 is staged (after op1, as the record's ids grow), then the call is refused whole by its last event.
      const refused = await refusal(log.appendAll(make.many([facts.dispatched('op2'), facts.settled('op-never')])))
      assert.is(refused.code, 'LOG_REJECTED_FACT')
      assert.is(log.head().highWater, 4, 'nothing of the refused call was written')
      assert.is(await log.append(make.next(facts.dispatched('op2'))), 5, 'op2 is still free')
      const reused = await refusal(log.append(make.next(dispatch('op1', 'call-op3'))))
      assert.is(reused.code, 'LOG_REJECTED_FACT')
      assert.match(reused.message, 'operation op1 was already used')
    } finally {
      await log.close()
    }
    // Reopened, the open invocation's ids are rebuilt from its stored record and its facts after it.
    log = await EventLog.open(dir)
    try {
      const again = await refusal(log.append(make.next(dispatch('op2', 'call-op3'))))
      assert.match(again.message, 'operation op2 was already used')
      assert.is(await log.append(make.next(facts.dispatched('op3'))), 6)
      await log.appendAll(make.many([facts.settled('op1'), facts.settled('op2'), facts.settled('op3'), facts.requested('s2'), facts.completed('s2', [], 'done'), facts.ended()]))
      assert.equal(await log.verify(), { events: 12, digest: log.head().digest })
    } finally {
      await log.close()
    }
    await withDb(dir, async (db) => {
      const record = decodeRecord<{ operations: string[] }>((await db.get(keys.invocation('inv-ops'))) as Uint8Array, 'invocation')
      assert.equal(record.operations, ['op1', 'op2', 'op3'], 'stored as an array, in the order used')
    })
  }),
)

edges(
  "an appended invocation.opened's requestFingerprint is 1–256 characters, and a catalog's digests one per name, as the engine writes them; stored facts that break either still read",
  boundedTest(30_000, async (root) => {
    type Opened = Extract<Fact, { type: 'invocation.opened' }>
    const opened = facts.opened() as Opened
    const digest = (hex: string): string => `sha256:${hex.repeat(64)}`
    const catalog = (digests: string[]): ExecutionSettings => ({ ...opened.execution, tools: { catalogDigest: CATALOG_DIGEST, names: ['echo', 'add'], digests } })
    const pause = (execution: ExecutionSettings): HandoffPause => ({
      intent: { handoffId: 'h1', hostEpoch: 'epoch-1', rootRunId: 'run-root', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: 'claim-1' },
      remainingSteps: 2,
      execution,
    })
    const boundary = { invocation: invocationOf('src'), highWater: 2, digest: digest('0') }
    const withFingerprint = (requestFingerprint: string): Fact => ({ ...opened, input: { kind: 'message', content: 'hello', requestFingerprint } })
    const refused: [string, Fact, string][] = [
      ['an empty fingerprint', withFingerprint(''), 'fact.input.requestFingerprint'],
      ['a fingerprint of 257 characters', withFingerprint('f'.repeat(257)), 'fact.input.requestFingerprint'],
      ['a fingerprint of a continuation', { ...opened, input: { kind: 'continuation', source: boundary, requestFingerprint: '' } }, 'fact.input.requestFingerprint'],
      ['one digest for two tools', { ...opened, execution: catalog([digest('1')]) }, 'fact.execution.tools.digests'],
      ['three digests for two tools', { ...opened, execution: catalog([digest('1'), digest('2'), digest('3')]) }, 'fact.execution.tools.digests'],
      [
        "a successor's seal with one digest for two tools",
        { ...opened, input: { kind: 'handoff', source: boundary, pause: pause(catalog([digest('1')])) } },
        'fact.input.pause.execution.tools.digests',
      ],
      ["a seal's pause with no digest for two tools", { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause: pause(catalog([])) } }, 'fact.outcome.pause.execution.tools.digests'],
    ]
    const log = await EventLog.open(join(root, 'log'))
    try {
      for (const [what, fact, path] of refused) {
        const error = await refusal(log.append(new EventMaker(invocationOf('bad')).next(fact)))
        assert.is(error.code, 'LOG_INVALID_EVENT', what)
        assert.equal(error.details, { fields: [path] }, what)
        // Read back as stored (a log another version or a direct append wrote): the rule is the append's alone.
        const event = new EventMaker(invocationOf('stored')).next(fact)
        assert.equal(decodeEvent(encodeEvent(event), 1), event, `${what}: a stored one decodes as written`)
      }
      assert.is(log.head().highWater, 0, 'nothing was written')
      // 256 characters counted as the run input counts them: astral ones are one each, not two.
      const fine: RuntimeEvent[] = [
        new EventMaker(invocationOf('a')).next(withFingerprint('\u{1F600}'.repeat(256))),
        new EventMaker(invocationOf('b')).next(withFingerprint('f')),
        new EventMaker(invocationOf('c')).next({ ...opened, execution: catalog([digest('1'), digest('2')]) }),
        new EventMaker(invocationOf('d')).next(facts.opened()),
      ]
      assert.equal(await log.appendAll(fine), [1, 2, 3, 4])
    } finally {
      await log.close()
    }
  }),
)

edges.run()
