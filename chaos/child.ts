/**
 * The chaos workload: one process, one log, one Engine, many concurrent sessions. The parent
 * (chaos/run.ts) kills it with SIGKILL at random moments and starts it again on the same log.
 *
 * Every start: open the log, report its head, run recovery, reconcile each session from what the
 * log says (a turn sealed by a handoff is resumed by its successor; a session with unknown tool
 * outcomes must be refused a plain new message, then gets one with `allowPriorUnknown: true`),
 * and go on with the steady workload:
 *
 * - the model is served in-process (a `ModelClient` given to `ModelExecutor`): a few ms of latency,
 *   occasional retryable and terminal failures, tool calls derived from the transcript so that a
 *   run that re-executed a settled tool would ask for an effect key twice;
 * - the `effect` tool appends `<operationId> <key>` to an fsync'd ledger before it returns (and
 *   sometimes fails after its effect); one effect call in five needs approval, which an in-process
 *   approver gives after a few ms (or denies, one in ten: that call is rejected, never run); calls
 *   to an unknown tool, calls with invalid JSON arguments and calls whose arguments the tool's
 *   schema refuses are rejected, never run;
 * - the read-only `lookup` tool has no effect: a crash while it runs leaves it uncertain without
 *   holding up its session (recovery's session records, which `reconcile` reads, leave it out);
 * - holds are reserved at random moments, then released (rollback) or committed (seal), and a
 *   committed turn is resumed by its successor.
 *
 * Protocol on stdout, one record a line (written synchronously: stdout is a pipe):
 * `opened <highWater> <digest>`, `recovered <closed> <secondPass> <stillOpen>`, `running`,
 * `a <seq> <eventId>` for every fact once it is durable, `v <text>` for a violation seen here.
 *
 * Usage: `node chaos/child.ts --log <dir> --ledger <file> --generation <n> [--sessions 8]`
 */
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { isFactstateError } from '../errors.js'
import type { HandoffIntent, HandoffPause, Invocation, InvocationOutcome, RunBoundary, StoredEvent } from '../facts/types.js'
import { Engine } from '../actors/engine.js'
import type { ChatMessage, ModelClient, ModelRequest, ModelResponse } from '../actors/model-client.js'
import { ModelExecutor } from '../actors/model-executor.js'
import type { RunInput } from '../actors/run-input.js'
import type { ApprovalDecision } from '../actors/approval.js'
import type { ToolDefinition } from '../actors/tool-catalog.js'
import { successorOf } from '../actors/handoff.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { recoverInvocations } from '../store/recovery.js'
import { effectNeedsApproval, hash } from './rules.js'

const { values } = parseArgs({
  options: {
    log: { type: 'string' },
    ledger: { type: 'string' },
    generation: { type: 'string' },
    sessions: { type: 'string', default: '8' },
  },
})
if (!values.log || !values.ledger || values.generation === undefined) {
  process.stderr.write('usage: child.ts --log <dir> --ledger <file> --generation <n> [--sessions N]\n')
  process.exit(2)
}
const LOG_DIR = values.log
const GENERATION = Number(values.generation)
const SESSIONS = Number(values.sessions)
const ledger = openSync(values.ledger, 'a')

const say = (line: string) => process.stdout.write(`${line}\n`)
const violation = (text: string) => say(`v g${GENERATION} ${text.replace(/\s+/g, ' ')}`)

const random = (low: number, high: number) => low + Math.floor(Math.random() * (high - low + 1))
const chance = (p: number) => Math.random() < p

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/**
 * The in-process model. It reads the transcript it is sent: the turn key from the first user
 * message, and how many tool results came back. It asks for effect `<turn>/<k>` for the next k
 * until the turn's quota is met, then answers text. A run that lost or re-executed settled
 * results would ask for a key that the ledger already holds.
 */
class ChaosModel implements ModelClient {
  async complete(request: ModelRequest): Promise<ModelResponse> {
    await sleep(random(1, 8), request.signal)
    if (request.signal.aborted) return { kind: 'interrupted', status: 'cancelled', message: 'cancelled' }
    if (chance(0.04)) return { kind: 'interrupted', status: 'retryable_failure', message: 'simulated 429', retryAfterMs: random(0, 4) }
    if (chance(0.005)) return { kind: 'interrupted', status: 'failed', message: 'simulated 400', malformed: chance(0.5) }
    const messages = request.body.messages as ChatMessage[]
    const user = messages.find((message) => message.role === 'user')
    const turn = user?.content.replace(/^turn /, '') ?? 'unknown'
    const results = messages.filter((message) => message.role === 'tool').length
    const quota = 2 + (hash(turn) % 4)
    if (results >= quota) {
      return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 10, outputTokens: 1 } } }
    }
    const count = Math.min(quota - results, chance(0.3) ? 2 : 1)
    const toolCalls = Array.from({ length: count }, (_, i) => ({
      callId: `call-${results + i}`,
      name: 'effect',
      arguments: JSON.stringify({ key: `${turn}/${results + i}` }),
    }))
    if (chance(0.15)) toolCalls.push({ callId: `call-${results}-l`, name: 'lookup', arguments: JSON.stringify({ key: `${turn}/${results}` }) })
    if (chance(0.04)) toolCalls.push({ callId: `call-${results}-x`, name: 'missing_tool', arguments: '{}' })
    else if (chance(0.03)) toolCalls.push({ callId: `call-${results}-y`, name: 'effect', arguments: '{"key": ' })
    // JSON its schema refuses (a number key): rejected with what is wrong, never run.
    else if (chance(0.03)) toolCalls.push({ callId: `call-${results}-z`, name: 'effect', arguments: JSON.stringify({ key: results }) })
    return { kind: 'completed', output: { toolCalls, finishReason: 'tool_calls', usage: { inputTokens: 10, outputTokens: 5 } } }
  }
}

const effect: ToolDefinition = {
  name: 'effect',
  description: 'Performs an external effect once: appends to the ledger.',
  inputSchema: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] },
  // One key in five asks the approver first (`approve` below).
  needsApproval: effectNeedsApproval,
  // One call in a hundred outlasts it after its effect: half of those throw when their signal aborts,
  // half ignore it and are not waited for; either way the run ends outcome_unknown, the call uncertain.
  timeoutMs: 40,
  async execute(input, { operationId, signal }) {
    if (chance(0.3)) await sleep(random(0, 4))
    const key = typeof input === 'object' && input !== null && 'key' in input ? String((input as { key: unknown }).key) : '?'
    writeSync(ledger, `${operationId} ${key}\n`)
    fsyncSync(ledger)
    if (chance(0.01)) {
      if (chance(0.5)) {
        await sleep(200, signal)
        if (signal.aborted) throw signal.reason
      } else await sleep(1_500)
    }
    await sleep(random(0, 4))
    if (chance(0.05)) throw new Error('the effect happened, then the tool failed')
    return { key, done: true }
  },
}

const lookup: ToolDefinition = {
  name: 'lookup',
  description: 'Reads something; no effect.',
  inputSchema: { type: 'object', properties: { key: { type: 'string' } } },
  readOnly: true,
  async execute(input) {
    await sleep(random(0, 4))
    return { found: input }
  },
}

/** The approver of the calls that need one: a few ms to decide, and one call in ten denied. */
async function approve(): Promise<ApprovalDecision> {
  await sleep(random(0, 6))
  return chance(0.1) ? { approved: false, by: 'chaos', reason: 'denied at random' } : { approved: true, by: 'chaos' }
}

const model = new ModelExecutor({ timeoutMs: 5_000, retries: 2, backoffMs: 1, maxBackoffMs: 5, createClient: () => new ChaosModel() })

function baseInput(invocation: Invocation, work: RunInput['work']): RunInput {
  return {
    invocation,
    provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'chaos-model', apiKey: 'chaos-key' },
    providerOptions: { temperature: 0 },
    configuration: { cwd: '/chaos/workspace' },
    mainOutputLimit: 64,
    maxSteps: 10,
    tools: [effect, lookup],
    // Half the runs run an answer's calls side by side (the chaos model asks for up to three).
    toolConcurrency: chance(0.5) ? 3 : 1,
    work,
  }
}

async function main(): Promise<void> {
  const log = await EventLog.open(LOG_DIR)
  const internals = logInternals(log)
  const head = log.head()
  say(`opened ${head.highWater} ${head.digest}`)
  internals.subscribe((events: StoredEvent[]) => {
    say(events.map(({ seq, event }) => `a ${seq} ${event.id}`).join('\n'))
  })
  const closed = await recoverInvocations(log)
  const again = await recoverInvocations(log)
  const stillOpen = internals.openInvocations().length
  say(`recovered ${closed} ${again} ${stillOpen}`)

  const engine = new Engine({ log, model })
  let counter = 0
  const fresh = (session: string) => {
    counter += 1
    return `${session}-g${GENERATION}-${counter}`
  }

  async function startSuccessor(source: RunBoundary, pause: HandoffPause): Promise<InvocationOutcome | undefined> {
    const invocation = successorOf(pause.intent, source.invocation)
    return drive(await engine.start(baseInput(invocation, { kind: 'handoff', source, pause }), { onApproval: approve }), invocation)
  }

  /** Runs one invocation to its end, taking a hold at a random moment now and then. */
  async function drive(running: Awaited<ReturnType<Engine['start']>>, invocation: Invocation): Promise<InvocationOutcome | undefined> {
    let committed: HandoffPause | undefined
    if (chance(0.35)) {
      await sleep(random(0, 25))
      const name = fresh(invocation.sessionId)
      const intent: HandoffIntent = {
        handoffId: `h-${name}`,
        hostEpoch: `g${GENERATION}`,
        rootRunId: invocation.runId,
        successorRunId: `r-${name}`,
        successorInvocationId: `i-${name}`,
        claimId: `c-${name}`,
      }
      try {
        const held = await running.handoff().reserve(intent).ready()
        await sleep(random(0, 6))
        if (chance(0.5)) await held.release()
        else committed = await held.commit()
      } catch (error) {
        // The run may end before it reaches a safe point: then there is nothing to hold.
        if (!isFactstateError(error, 'HANDOFF_UNAVAILABLE')) throw error
      }
    }
    const outcome = await running.wait()
    if (committed) {
      if (outcome.status !== 'handoff_paused') violation(`${invocation.invocationId} committed a hold but ended ${outcome.status}`)
      const source = (await log.runSource(invocation.sessionId, invocation.runId))?.boundary
      if (!source) {
        violation(`no run source for sealed ${invocation.invocationId}`)
        return outcome
      }
      return startSuccessor(source, committed)
    }
    return outcome
  }

  async function message(session: string, allowPriorUnknown: boolean): Promise<InvocationOutcome | undefined> {
    const name = fresh(session)
    const invocation = { sessionId: session, turnId: `t-${name}`, runId: `r-${name}`, invocationId: `i-${name}` }
    const work = { kind: 'message' as const, content: `turn ${session}/t-${name}`, ...(allowPriorUnknown ? { allowPriorUnknown } : {}) }
    return drive(await engine.start(baseInput(invocation, work), { onApproval: approve }), invocation)
  }

  /** What the log says this session needs first: its sealed turn resumed, its unknown outcomes acknowledged. */
  async function reconcile(session: string): Promise<void> {
    const record = await internals.sessionRecord(session)
    if (record.active.length > 0) violation(`session ${session} still has active ${record.active.map((a) => a.invocationId).join(',')} after recovery`)
    for (const paused of record.paused) {
      const events = await internals.invocationEvents(paused.invocationId)
      const last = events.at(-1)?.event.fact
      const source = (await log.runSource(session, paused.runId))?.boundary
      if (last?.type !== 'invocation.ended' || last.outcome.status !== 'handoff_paused' || !source) {
        violation(`paused turn ${paused.turnId} of ${session} has no sealed pause`)
        continue
      }
      await startSuccessor(source, last.outcome.pause)
    }
    if ((await internals.sessionRecord(session)).unknown.length > 0) {
      try {
        await message(session, false)
        violation(`session ${session} has unknown outcomes, yet a plain message was admitted`)
      } catch (error) {
        if (!isFactstateError(error, 'RUN_RECONCILIATION_REQUIRED')) throw error
      }
      await message(session, true)
    }
  }

  async function sessionLoop(session: string): Promise<void> {
    try {
      await reconcile(session)
      for (;;) await message(session, true)
    } catch (error) {
      violation(`session ${session} stopped: ${(error as Error)?.stack ?? String(error)}`)
    }
  }

  say('running')
  await Promise.all(Array.from({ length: SESSIONS }, (_, i) => sessionLoop(`s${String(i).padStart(2, '0')}`)))
  closeSync(ledger)
}

main().catch((error: unknown) => {
  violation(`the child failed: ${(error as Error)?.stack ?? String(error)}`)
  process.exit(1)
})
