/**
 * The log and the invocation machine agree on what may happen: random fact sequences for one
 * invocation are offered to both, fact by fact, and the log accepts a fact only when the machine
 * does (`applyFact`); the rules the log adds are that an operation id is used once and that a
 * claim and a successor are sealed by one invocation only (each invocation here seals its own). Refusals of
 * both carry their codes (`LOG_REJECTED_FACT` or `LOG_SEALED`, `MACHINE_REJECTED`) and the log
 * writes nothing for them.
 */
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact } from '../facts/types.js'
import { type InvocationSnapshot, applyFact, foldFacts, initialInvocationSnapshot } from '../machines/invocation.js'
import type { FactstateError } from '../errors.js'
import { EventLog } from '../store/event-log.js'
import { EventMaker, ZERO_DIGEST, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const steps = ['s1', 's2'] as const
const calls = ['c1', 'c2'] as const
const operations = ['o1', 'o2', 'o3'] as const
const pause = {
  intent: { handoffId: 'h1', hostEpoch: 'epoch', rootRunId: 'run-x', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: 'claim-1' },
  remainingSteps: 1,
  execution: { model: 'm', providerOptions: {}, cwd: '/work', tools: { catalogDigest: ZERO_DIGEST, names: [] } },
}

/** Every fact a step of the sequence may offer, over a few ids so that they collide. */
const fact: fc.Arbitrary<Fact> = fc.oneof(
  fc.constantFrom(...steps).map((stepId): Fact => ({ type: 'model.requested', stepId, model: 'm', requestDigest: ZERO_DIGEST })),
  fc
    .tuple(fc.constantFrom(...steps), fc.subarray([...calls]))
    .map(([stepId, ids]): Fact => ({
      type: 'model.completed',
      stepId,
      output: ids.length > 0 ? { toolCalls: ids.map((callId) => ({ callId, name: 'echo', arguments: '{}' })), finishReason: 'tool_calls' } : { text: 'done', toolCalls: [], finishReason: 'stop' },
    })),
  fc.constantFrom(...steps).map((stepId): Fact => ({ type: 'model.interrupted', stepId, status: 'failed' })),
  fc.tuple(fc.constantFrom(...operations), fc.constantFrom(...calls)).map(([operationId, callId]): Fact => ({ type: 'tool.dispatched', operationId, callId, name: 'echo', input: {} })),
  fc
    .tuple(fc.constantFrom(...operations), fc.constantFrom(...calls))
    .map(([operationId, callId]): Fact => ({ type: 'tool.rejected', operationId, callId, name: 'echo', input: {}, reason: 'unknown_tool' })),
  fc.constantFrom(...operations).map((operationId): Fact => ({ type: 'tool.settled', operationId, outcome: { status: 'succeeded', output: null } })),
  fc.constantFrom<Fact>({ type: 'hold.entered', handoffId: 'h1' }, { type: 'hold.released', handoffId: 'h1' }),
  fc.constantFrom<Fact>(
    { type: 'invocation.ended', outcome: { status: 'completed' } },
    { type: 'invocation.ended', outcome: { status: 'failed', class: 'test' } },
    { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'test' } },
    { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } },
  ),
)

/** The log also refuses a claim or successor another invocation sealed: each invocation here seals its own. */
function ownClaim(fact: Fact, n: number): Fact {
  if (fact.type !== 'invocation.ended' || fact.outcome.status !== 'handoff_paused') return fact
  const { pause } = fact.outcome
  const intent = { ...pause.intent, claimId: `claim-${n}`, successorRunId: `run-next-${n}`, successorInvocationId: `inv-next-${n}` }
  return { ...fact, outcome: { ...fact.outcome, pause: { ...pause, intent } } }
}

test('the log accepts a fact exactly when the invocation machine does (and the operation id is fresh)', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(dir)
      let n = 0
      let accepted = 0
      let refused = 0
      try {
        await fc.assert(
          fc.asyncProperty(fc.array(fact, { minLength: 1, maxLength: 14 }), async (sequence) => {
            n += 1
            const maker = new EventMaker(invocationOf(`m${n}`))
            await log.append(maker.next(facts.opened()))
            let snapshot: InvocationSnapshot = applyFact(initialInvocationSnapshot(), facts.opened())
            const kept: Fact[] = [facts.opened()]
            const used = new Set<string>()
            for (const offered of sequence) {
              const next = ownClaim(offered, n)
              let machine: InvocationSnapshot | FactstateError
              try {
                machine = applyFact(snapshot, next)
              } catch (error) {
                machine = error as FactstateError
              }
              const before = log.head()
              const logged: true | FactstateError = await log.append(maker.next(next)).then(
                () => true as const,
                (error: FactstateError) => error,
              )
              const operation = 'operationId' in next && next.type !== 'tool.settled' ? next.operationId : undefined
              const reused = operation !== undefined && used.has(operation)
              if (logged === true) {
                assert.ok(!(machine instanceof Error), `the log accepted ${JSON.stringify(next)} after ${kept.map((f) => f.type).join(', ')}; the machine refused it`)
                snapshot = machine as InvocationSnapshot
                kept.push(next)
                if (operation !== undefined) used.add(operation)
                accepted += 1
              } else {
                assert.ok(['LOG_REJECTED_FACT', 'LOG_SEALED'].includes(logged.code), logged.message)
                assert.equal(log.head(), before, 'a refusal writes nothing')
                if (!(machine instanceof Error)) {
                  assert.ok(reused, `the log refused ${JSON.stringify(next)} after ${kept.map((f) => f.type).join(', ')} (${logged.message}); the machine accepted it`)
                } else {
                  assert.is(machine.code, 'MACHINE_REJECTED')
                }
                refused += 1
              }
            }
            // What the log kept folds through the machine to the same state.
            assert.equal(foldFacts(kept).value, snapshot.value)
          }),
          { numRuns: 400 },
        )
      } finally {
        await log.close()
      }
      assert.ok(accepted > 300 && refused > 300, `${accepted} accepted, ${refused} refused: both sides exercised`)
    }),
    120_000,
  ))

test.run()
