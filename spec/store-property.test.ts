/**
 * Property: random legal fact sequences for several invocations, appended in random ways,
 * round-trip through encode, decode and reopen with identical digests, events, projections and
 * run boundaries — and the projections agree with a model computed from the plan itself.
 */
import fc from 'fast-check'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import type { Fact, InvocationOutcome, ModelInterruptStatus, RuntimeEvent, ToolOutcome, ToolRejectReason } from '../facts/types.js'
import { canonical, storageProblem } from '../store/encoding.js'
import { EventLog, type RunSource } from '../store/event-log.js'
import type { InvocationProjection } from '../store/projection.js'
import { recoverInvocations } from '../store/recovery.js'
import { CATALOG_DIGEST, ZERO_DIGEST, invocationOf, reportable } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

const ALL = Number.MAX_SAFE_INTEGER
const test = suite('store: property')

// ---------------------------------------------------------------------------------------------
// Plans: what one invocation does, generated freely and then made legal.

type CallPlan =
  | { kind: 'settled'; input: unknown; outcome: ToolOutcome }
  | { kind: 'rejected'; input: unknown; reason: ToolRejectReason }
  | { kind: 'unsettled'; input: unknown }

type StepPlan =
  | { kind: 'interrupted'; status: ModelInterruptStatus; message: string | undefined }
  | { kind: 'completed'; text: string | undefined; usage: { inputTokens: number; outputTokens: number | undefined } | undefined; calls: CallPlan[] }

type EndPlan = 'open' | 'completed' | 'failed' | 'cancelled' | 'paused'

interface Plan {
  content: string
  fingerprint: string | undefined
  steps: StepPlan[]
  hold: 'none' | 'released' | 'paused'
  inFlight: boolean
  end: EndPlan
  recordedAt: number
}

// Legal facts hold only what can be stored exactly: jsonValue makes an own "__proto__" key now and then,
// which the log refuses by design (store-log and faults-bad-input test the refusal).
const json = fc.jsonValue({ maxDepth: 2, stringUnit: 'grapheme' }).filter((value) => storageProblem(value) === undefined)
const text = fc.string({ unit: 'binary', maxLength: 24 })

const callPlan: fc.Arbitrary<CallPlan> = fc.oneof(
  fc.record({
    kind: fc.constant('settled' as const),
    input: json,
    outcome: fc.oneof(
      fc.record({ status: fc.constant('succeeded' as const), output: json }),
      fc.record({ status: fc.constant('failed' as const), message: text }),
      fc.record({ status: fc.constant('unknown' as const), message: text }),
    ),
  }),
  fc.record({ kind: fc.constant('rejected' as const), input: json, reason: fc.constantFrom<ToolRejectReason>('unknown_tool', 'invalid_input', 'cancelled') }),
  fc.record({ kind: fc.constant('unsettled' as const), input: json }),
)

const stepPlan: fc.Arbitrary<StepPlan> = fc.oneof(
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('interrupted' as const), status: fc.constantFrom<ModelInterruptStatus>('cancelled', 'timed_out', 'failed', 'retryable_failure'), message: fc.option(text, { nil: undefined }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('completed' as const),
      text: fc.option(text, { nil: undefined }),
      usage: fc.option(fc.record({ inputTokens: fc.nat(), outputTokens: fc.option(fc.nat(), { nil: undefined }) }), { nil: undefined }),
      calls: fc.array(callPlan, { maxLength: 2 }),
    }),
  },
)

/**
 * Makes a free plan legal, by the invocation machine's rules: a model answer without tool calls is
 * the final one (no request and no hold after it, and only it lets the invocation complete); unsettled tools only
 * in the last step, and never before another request, a completion, a hold or a pause.
 */
function legal(plan: Plan): Plan {
  const final = plan.steps.findIndex((step) => step.kind === 'completed' && step.calls.length === 0)
  const kept = final === -1 ? plan.steps : plan.steps.slice(0, final + 1)
  const answered = final !== -1
  const steps = kept.map((step, index): StepPlan => {
    if (step.kind !== 'completed') return step
    const lastStep = index === kept.length - 1
    const keepUnsettled = lastStep && plan.end !== 'completed' && plan.end !== 'paused'
    return {
      ...step,
      calls: step.calls.map((call): CallPlan => (call.kind === 'unsettled' && !keepUnsettled ? { kind: 'settled', input: call.input, outcome: { status: 'succeeded', output: null } } : call)),
    }
  })
  const unsettled = steps.some((step) => step.kind === 'completed' && step.calls.some((call) => call.kind === 'unsettled'))
  let { hold, inFlight, end } = plan
  if (unsettled || answered) hold = 'none'
  if (end === 'paused') {
    hold = unsettled || answered ? 'none' : 'paused'
    if (hold !== 'paused') end = 'failed'
  } else if (hold === 'paused') hold = 'released'
  if (hold === 'paused' || answered || unsettled) inFlight = false
  if (end === 'completed' && (inFlight || !answered)) end = 'failed'
  return { ...plan, steps, hold, inFlight, end }
}

const planArbitrary: fc.Arbitrary<Plan> = fc
  .record({
    content: text,
    fingerprint: fc.option(fc.string({ minLength: 1, maxLength: 8 }), { nil: undefined }),
    steps: fc.array(stepPlan, { maxLength: 3 }),
    hold: fc.constantFrom<Plan['hold']>('none', 'released', 'paused'),
    inFlight: fc.boolean(),
    end: fc.constantFrom<EndPlan>('open', 'completed', 'failed', 'cancelled', 'paused'),
    recordedAt: fc.nat(),
  })
  .map(legal)

function pauseFor(name: string, handoffId: string) {
  return {
    intent: { handoffId, hostEpoch: 'epoch', rootRunId: `run-${name}`, successorRunId: `run-${name}-next`, successorInvocationId: `inv-${name}-next`, claimId: `claim-${name}` },
    remainingSteps: 1,
    execution: { model: 'model-p', providerOptions: { temperature: 0 }, cwd: '/work', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] } },
  }
}

/** The facts of a plan and the projection the log must report for them. */
function factsOf(name: string, plan: Plan): { facts: Fact[]; expected: InvocationProjection } {
  const list: Fact[] = [
    {
      type: 'invocation.opened',
      input: { kind: 'message', content: plan.content, requestFingerprint: plan.fingerprint },
      configuration: { cwd: '/work', workspaceIdentity: undefined },
      execution: { model: 'model-p', providerOptions: { temperature: 0 }, cwd: '/work', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] }, mainOutputLimit: undefined },
    },
  ]
  const uncertain: string[] = []
  plan.steps.forEach((step, index) => {
    const stepId = `s${index + 1}`
    list.push({ type: 'model.requested', stepId, model: 'model-p', requestDigest: ZERO_DIGEST })
    if (step.kind === 'interrupted') {
      list.push({ type: 'model.interrupted', stepId, status: step.status, message: step.message })
      return
    }
    const calls = step.calls.map((call, j) => ({ call, operationId: `op-${index + 1}-${j}`, callId: `call-${index + 1}-${j}` }))
    list.push({
      type: 'model.completed',
      stepId,
      output: {
        text: step.text,
        toolCalls: calls.map(({ call, callId }) => ({ callId, name: 'echo', arguments: JSON.stringify(call.input) })),
        finishReason: calls.length > 0 ? 'tool_calls' : 'stop',
        usage: step.usage,
      },
    })
    for (const { call, operationId, callId } of calls) {
      if (call.kind === 'rejected') {
        list.push({ type: 'tool.rejected', operationId, callId, name: 'echo', input: call.input, reason: call.reason })
        continue
      }
      list.push({ type: 'tool.dispatched', operationId, callId, name: 'echo', input: call.input })
      if (call.kind === 'settled') list.push({ type: 'tool.settled', operationId, outcome: call.outcome })
      else uncertain.push(operationId)
    }
  })
  if (plan.hold !== 'none') list.push({ type: 'hold.entered', handoffId: `hold-${name}` })
  if (plan.hold === 'released') list.push({ type: 'hold.released', handoffId: `hold-${name}` })
  const unfinished: string[] = []
  if (plan.inFlight) {
    const stepId = `s${plan.steps.length + 1}`
    list.push({ type: 'model.requested', stepId, model: 'model-p', requestDigest: ZERO_DIGEST })
    unfinished.push(stepId)
  }
  const outcomes: Record<Exclude<EndPlan, 'open'>, InvocationOutcome> = {
    completed: { status: 'completed' },
    failed: { status: 'failed', class: 'model_failed', message: undefined },
    cancelled: { status: 'cancelled', source: 'user' },
    paused: { status: 'handoff_paused', pause: pauseFor(name, `hold-${name}`) },
  }
  if (plan.end !== 'open') list.push({ type: 'invocation.ended', outcome: outcomes[plan.end] })
  const terminal = plan.end === 'open' ? null : plan.end
  return { facts: list, expected: { terminal, uncertainOperations: uncertain, unfinishedModelSteps: unfinished } }
}

// ---------------------------------------------------------------------------------------------
// How the events reach the log.

type Mode = { kind: 'interleaved'; picks: number[] } | { kind: 'concurrent' } | { kind: 'chunks'; sizes: number[] }

const modeArbitrary: fc.Arbitrary<Mode> = fc.oneof(
  fc.record({ kind: fc.constant('interleaved' as const), picks: fc.array(fc.nat(), { maxLength: 64 }) }),
  fc.record({ kind: fc.constant('concurrent' as const) }),
  fc.record({ kind: fc.constant('chunks' as const), sizes: fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 8 }) }),
)

interface Appended {
  event: RuntimeEvent
  seq: number
}

async function appendAllWays(log: EventLog, perInvocation: RuntimeEvent[][], mode: Mode): Promise<Appended[]> {
  const out: Appended[] = []
  if (mode.kind === 'interleaved') {
    const cursors = perInvocation.map(() => 0)
    let turn = 0
    for (;;) {
      const live = perInvocation.map((_, index) => index).filter((index) => (cursors[index] as number) < (perInvocation[index] as RuntimeEvent[]).length)
      if (live.length === 0) break
      const pick = live[(mode.picks[turn % Math.max(1, mode.picks.length)] ?? 0) % live.length] as number
      turn += 1
      const event = (perInvocation[pick] as RuntimeEvent[])[cursors[pick] as number] as RuntimeEvent
      cursors[pick] = (cursors[pick] as number) + 1
      out.push({ event, seq: await log.append(event) })
    }
    return out
  }
  await Promise.all(
    perInvocation.map(async (events, index) => {
      if (mode.kind === 'concurrent') {
        for (const event of events) out.push({ event, seq: await log.append(event) })
        return
      }
      let at = 0
      let chunk = index
      while (at < events.length) {
        const size = mode.sizes[chunk % mode.sizes.length] as number
        chunk += 1
        const batch = events.slice(at, at + size)
        at += size
        const seqs = await log.appendAll(batch)
        batch.forEach((event, k) => out.push({ event, seq: seqs[k] as number }))
      }
    }),
  )
  return out
}

// ---------------------------------------------------------------------------------------------

test('random legal fact sequences round-trip through encode, decode and reopen with identical digests and projections', () =>
  guard(withTimeout(
    fc.assert(
      fc.asyncProperty(fc.array(planArbitrary, { minLength: 1, maxLength: 4 }), modeArbitrary, fc.array(fc.nat(), { maxLength: 4 }), async (plans, mode, repeats) =>
        withTempDir(async (dir) => {
          const names = plans.map((_, index) => `p${index}`)
          const built = plans.map((plan, index) => {
            const name = names[index] as string
            const invocation = invocationOf(name, `session-${index % 2}`)
            const { facts, expected } = factsOf(name, plan)
            const events = facts.map((fact, n): RuntimeEvent => ({ id: `${invocation.invocationId}/${n + 1}`, recordedAt: plan.recordedAt + n, invocation, fact }))
            return { name, invocation, events, expected }
          })

          let digest: string
          let storedBefore: unknown
          const projections = new Map<string, InvocationProjection>()
          const sources = new Map<string, RunSource | undefined>()
          const log = await EventLog.open(dir)
          try {
            const appended = await appendAllWays(log, built.map((item) => item.events), mode)
            const total = built.reduce((sum, item) => sum + item.events.length, 0)
            appended.sort((x, y) => x.seq - y.seq)
            assert.equal(
              appended.map((item) => item.seq),
              Array.from({ length: total }, (_, index) => index + 1),
              'seqs are gapless from 1',
            )
            const verified = await log.verify()
            assert.is(verified.events, total)
            digest = verified.digest
            const prefix = await log.prefix(ALL, ALL)
            assert.is(prefix.digest, digest)
            assert.equal(
              prefix.events,
              appended.map(({ event, seq }) => ({ seq, event: canonical(event) })),
              'the events read back are the events appended, without undefined members',
            )
            storedBefore = prefix.events
            for (const item of built) {
              const projection = prefix.projectInvocation(item.invocation.invocationId)
              assert.equal(projection, item.expected, `projection of ${item.name}`)
              projections.set(item.invocation.invocationId, projection)
              sources.set(item.name, await log.runSource(item.invocation.sessionId, item.invocation.runId))
            }
            // Idempotent re-appends of stored events change nothing.
            for (const pick of repeats) {
              const again = appended[pick % appended.length] as Appended
              assert.is(await log.append(structuredClone(again.event)), again.seq)
            }
            assert.is((await log.verify()).digest, digest)
          } finally {
            await log.close()
          }

          const reopened = await EventLog.open(dir)
          try {
            const verified = await reopened.verify()
            assert.is(verified.digest, digest, 'the same digest after a reopen')
            const prefix = await reopened.prefix(ALL, ALL)
            assert.equal(prefix.events, storedBefore, 'the same events after a reopen')
            for (const item of built) {
              assert.equal(prefix.projectInvocation(item.invocation.invocationId), projections.get(item.invocation.invocationId))
              assert.equal(await reopened.runSource(item.invocation.sessionId, item.invocation.runId), sources.get(item.name), `boundary of ${item.name}`)
            }
            const open = built.filter((item) => item.expected.terminal === null)
            assert.is(await recoverInvocations(reopened), open.length, 'recovery closes exactly the open invocations')
            const recovered = await reopened.prefix(ALL, ALL)
            for (const item of built) {
              const projection = recovered.projectInvocation(item.invocation.invocationId)
              assert.is(projection.terminal, item.expected.terminal ?? 'failed')
              assert.equal(projection.uncertainOperations, item.expected.uncertainOperations)
            }
          } finally {
            await reopened.close()
          }
        }),
      ),
      {
        numRuns: Number(process.env.PROPERTY_RUNS ?? 60),
        ...(process.env.PROPERTY_SEED === undefined ? {} : { seed: Number(process.env.PROPERTY_SEED) }),
      },
    ),
    Number(process.env.PROPERTY_TIMEOUT_MS ?? 60_000),
    'property',
  )),
)

/** Failures re-thrown in a shape uvu's reporter can print (see `reportable`). */
async function guard(run: Promise<void>): Promise<void> {
  try {
    await run
  } catch (error) {
    throw reportable(error)
  }
}

test.run()
