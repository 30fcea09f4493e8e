/**
 * One process of the demo. The orchestrator (bin/commands/demo.ts) runs each phase in its own
 * process, so that "another process resumes it" and "the process is killed" are real.
 *
 * usage: phase.ts <seal|successor|crash|reconcile> <demo-directory>
 */
import { Engine, type RunningInvocation } from '../../actors/engine.js'
import { isFactstateError } from '../../errors.js'
import type { HandoffPause, Invocation, InvocationOutcome } from '../../facts/types.js'
import type { HeldInvocation } from '../../actors/handoff.js'
import { EventLog } from '../../store/event-log.js'
import { escapeControls } from '../../store/fact-summary.js'
import { recoverInvocations } from '../../store/recovery.js'
import { answer } from '../../testing/scripted-model-server.js'
import { CRASH_SESSION, SESSION, demoModel, intent, paths, printTransitions, readLedger, result, runInput, tools } from './agent.js'

const say = (line: string) => process.stdout.write(`${line}\n`)

const first: Invocation = { sessionId: SESSION, turnId: 'turn-1', runId: 'run-1', invocationId: 'inv-run-1' }

/** A step that could not be shown, in the demo's words: printed as its message alone, without a stack. */
class StepFailed extends Error {}

/** Against a real endpoint the steps depend on the model: what the demo needs it to do. */
const realModel = process.env.OPENAI_BASE_URL !== undefined && process.env.OPENAI_BASE_URL !== ''

/** An outcome in a line: `failed model_failed: the provider answered HTTP 401: …`. */
function describeOutcome(outcome: InvocationOutcome): string {
  if (outcome.status === 'failed') return escapeControls(`failed ${outcome.class}${outcome.message === undefined ? '' : `: ${outcome.message}`}`)
  if (outcome.status === 'cancelled') return `cancelled (${outcome.source})`
  return outcome.status
}

/**
 * Reserves hold `handoffId` on the first run while the model's answer `answer` is in flight, then
 * lets the answer go: the hold at the run's next safe point, or, when the run ended first (a real
 * model that did not call the tools the demo asks for, an endpoint that refused every request), why not.
 */
async function hold(running: RunningInvocation, model: { release(index: number): void }, handoffId: string, answer: number, needs: string): Promise<HeldInvocation> {
  try {
    const reservation = running.handoff().reserve(intent(handoffId, first.runId))
    model.release(answer)
    return await reservation.ready()
  } catch (error) {
    if (!isFactstateError(error, 'HANDOFF_UNAVAILABLE')) throw error
    const outcome = await running.wait()
    // A model that answered without the calls is told what the demo needs; a failure speaks for itself.
    const hint = realModel && outcome.status === 'completed' ? `: with a real model the demo needs ${needs}` : ''
    throw new StepFailed(`the run ended ${describeOutcome(outcome)} before the demo could hold it${hint}`)
  }
}

/** Phase 1 and 2: a tool runs, a hold is rolled back, a second hold seals the run. */
async function seal(dir: string): Promise<void> {
  const { log: location, ledger } = paths(dir)
  const model = await demoModel([
    answer.toolCalls([{ name: 'append_ledger', arguments: { entry: 'order #1001 shipped' } }], { hold: true }),
    answer.toolCalls([{ name: 'append_ledger', arguments: { entry: 'invoice #1001 sent' } }], { hold: true }),
    answer.text('unused: the run is sealed before this answer is asked for'),
  ])
  const log = await EventLog.open(location)
  const stop = await printTransitions(log, say)
  const unwatch = model.watch(log)
  try {
    const engine = new Engine({ log })
    const running = await engine.start(
      runInput(model, ledger, first, { kind: 'message', content: 'Ship order #1001 and record it in the ledger, then send its invoice.' }),
    )
    await model.seen(0)
    say('» request 1 is in flight: a reviewer reserves hold "review" (it waits for the next safe point)')
    const held = await hold(running, model, 'review', 0, 'it to call append_ledger for the shipment, then again for the invoice, one call per answer')
    say(`» safe point reached: the tool ran ${(await readLedger(ledger)).length} time(s), nothing is in flight; the run is held`)
    say('» the reviewer approves: roll the hold back, the run goes on')
    await held.release()
    await model.seen(1)
    say('» request 2 is in flight: reserve hold "handoff" to move the run to another process')
    const sealing = await hold(running, model, 'handoff', 1, 'its second answer to call append_ledger for the invoice (it answered without it)')
    const preview = sealing.preview()
    const pause: HandoffPause = await sealing.commit()
    const outcome = await running.wait()
    await engine.drain()
    say(`» sealed: ${pause.remainingSteps} step(s) left, successor ${pause.intent.successorRunId}; this process now exits`)
    result({
      outcome: outcome.status,
      pauseMatchesPreview: JSON.stringify(pause) === JSON.stringify(preview),
      requests: model.server?.requests.length ?? null,
      ledger: (await readLedger(ledger)).length,
    })
  } finally {
    unwatch()
    stop()
    await log.close()
    await model.close()
  }
}

/** Phase 3: a second process reopens the log and runs the successor; nothing is re-executed. */
async function successor(dir: string): Promise<void> {
  const { log: location, ledger } = paths(dir)
  const model = await demoModel([answer.text('Order #1001 is shipped and its invoice is sent. Done.')])
  const log = await EventLog.open(location)
  const stop = await printTransitions(log, say)
  try {
    const closed = await recoverInvocations(log)
    say(`» process ${process.pid} reopened the log; recovery closed ${closed} invocation(s)`)
    const source = (await log.runSource(SESSION, first.runId))?.boundary
    if (!source) throw new Error('run-1 is not in the log')
    let pause: HandoffPause | undefined
    for await (const { event } of log.events()) {
      if (event.invocation.invocationId === first.invocationId && event.fact.type === 'invocation.ended' && event.fact.outcome.status === 'handoff_paused') {
        pause = event.fact.outcome.pause
      }
    }
    if (!pause) throw new Error('run-1 was not sealed')
    const invocation: Invocation = { ...first, runId: pause.intent.successorRunId, invocationId: pause.intent.successorInvocationId }
    say(`» the sealed pause authorizes ${invocation.runId}; its settings match, so it is admitted`)
    const engine = new Engine({ log })
    const before = await readLedger(ledger)
    const outcome = await engine.run(runInput(model, ledger, invocation, { kind: 'handoff', source, pause }))
    // What it was sent of the sealed run's tools: their results, from the facts (the first request's tool messages).
    let replayed = 0
    for await (const { event } of log.events()) if (event.invocation.invocationId === first.invocationId && event.fact.type === 'tool.settled') replayed += 1
    say(`» the successor replayed ${replayed} tool result(s) from facts and finished: ${describeOutcome(outcome)}`)
    const after = await readLedger(ledger)
    // A tool of the sealed run run again would repeat its operation id; a real model may make calls of its own.
    const earlier = new Set(before.map((entry) => entry.operationId))
    result({ recovered: closed, outcome: outcome.status, ledger: after.length, rerun: after.slice(before.length).filter((entry) => earlier.has(entry.operationId)).length, calls: after.length - before.length })
  } finally {
    stop()
    await log.close()
    await model.close()
  }
}

/** Phase 4a: a refund is dispatched and the process is killed (SIGKILL) while the tool runs. */
async function crash(dir: string): Promise<void> {
  const { log: location, ledger } = paths(dir)
  const model = await demoModel([answer.toolCalls([{ name: 'refund', arguments: { order: '1002' } }])])
  const log = await EventLog.open(location)
  const stop = await printTransitions(log, say)
  const engine = new Engine({ log })
  const invocation: Invocation = { sessionId: CRASH_SESSION, turnId: 'turn-1', runId: 'crash-run-1', invocationId: 'inv-crash-run-1' }
  const input = runInput(model, ledger, invocation, { kind: 'message', content: 'Refund order #1002.' })
  input.tools = tools(ledger, { refundHangs: () => say('TOOL_RUNNING') })
  const running = await engine.start(input)
  // The orchestrator kills this process while the refund runs: the run ends only if the refund never ran.
  const outcome = await running.wait()
  stop()
  await log.close()
  await model.close()
  const hint = realModel && outcome.status === 'completed' ? ': with a real model the demo needs it to call refund for order 1002' : ''
  throw new StepFailed(`the run ended ${describeOutcome(outcome)} without running refund, so there is no crash to show${hint}`)
}

/** Phase 4b: recovery marks the refund's outcome unknown; the next message must reconcile. */
async function reconcile(dir: string): Promise<void> {
  const { log: location, ledger } = paths(dir)
  const model = await demoModel([
    answer.text('The refund for order #1002 may or may not have gone through. I will not retry it; please check the payment dashboard.'),
  ])
  const log = await EventLog.open(location)
  const stop = await printTransitions(log, say)
  try {
    const closed = await recoverInvocations(log)
    const projection = (await log.prefix(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)).projectInvocation('inv-crash-run-1')
    say(`» recovery closed ${closed} invocation(s); unknown outcome(s): ${projection.uncertainOperations.join(', ') || 'none'}`)
    const engine = new Engine({ log })
    const next = (allowPriorUnknown: boolean) =>
      runInput(
        model,
        ledger,
        { sessionId: CRASH_SESSION, turnId: 'turn-2', runId: 'crash-run-2', invocationId: 'inv-crash-run-2' },
        { kind: 'message', content: 'Did the refund for #1002 go through?', allowPriorUnknown },
      )
    let refusal = 'none'
    try {
      const admitted = await engine.start(next(false))
      // Admitted: the crash left no unknown outcome (the refund never ran), and the demo's point is gone.
      const outcome = await admitted.wait()
      throw new StepFailed(`the next message was not refused (no outcome was left unknown) and ended ${describeOutcome(outcome)}`)
    } catch (error) {
      if (!isFactstateError(error)) throw error
      refusal = error.code
      say(`» a new message is refused: ${error.code} — the refund may or may not have happened`)
    }
    say('» the user acknowledges it (allowPriorUnknown: true); the model is told, the refund is never replayed')
    const outcome = await engine.run(next(true))
    const request = JSON.stringify(model.server?.requests[0]?.body ?? {})
    result({
      recovered: closed,
      uncertain: projection.uncertainOperations.length,
      terminal: projection.terminal,
      refusal,
      outcome: outcome.status,
      modelTold: model.server ? request.includes('outcome is unknown') : true,
      ledger: (await readLedger(ledger)).length,
    })
  } finally {
    stop()
    await log.close()
    await model.close()
  }
}

const phases: Record<string, (dir: string) => Promise<void>> = { seal, successor, crash, reconcile }
const [phase, dir] = process.argv.slice(2)
const run = phase === undefined ? undefined : phases[phase]
if (!run || !dir) {
  process.stderr.write('usage: phase.ts <seal|successor|crash|reconcile> <demo-directory>\n')
  process.exit(2)
}
run(dir).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${isFactstateError(error) || error instanceof StepFailed ? error.message : String((error as Error)?.stack ?? error)}\n`)
    process.exit(1)
  },
)
