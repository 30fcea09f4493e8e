/**
 * Resuming after a crash: a worker process is killed with SIGKILL while two tools run, a read-only
 * search and a card charge. A restart recovers the log and is killed too, before it continues
 * anything: what recovery closed was reported to it (`onClosed`) and is not reported again. The next
 * start asks the log instead (`pendingSessions({ unanswered: true })`, as the README's start-up loop
 * does), checks the charge's effect by its operation id (the idempotency key the tool was given), and
 * continues the run from its boundary. The charge is never run again; the search, read-only, needs
 * no acknowledgement.
 *
 *   npx tsx examples/resume-after-crash.ts
 */
import { spawn } from 'node:child_process'
import { appendFileSync, readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { Engine, EventLog, type RunInput, type ToolDefinition, isFactstateError, recoverInvocations } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const [role, dir] = process.argv.slice(2)

function input(baseUrl: string, charges: string, run: string): RunInput {
  const searchOrders: ToolDefinition = {
    name: 'search_orders',
    description: 'Finds open orders (reads only)',
    readOnly: true,
    execute: () => new Promise(() => undefined), // slow: still running when the worker dies
  }
  const chargeCard: ToolDefinition = {
    name: 'charge_card',
    description: 'Charges the customer card',
    inputSchema: { type: 'object', properties: { cents: { type: 'number' } } },
    async execute(args, { operationId }) {
      // The payment provider records the charge under its idempotency key.
      appendFileSync(charges, `${operationId} ${(args as { cents: number }).cents}\n`)
      process.stdout.write('charged\n')
      return new Promise(() => undefined) // ... and the worker dies before the answer is recorded
    },
  }
  return {
    invocation: { sessionId: 'shop', turnId: `turn-${run}`, runId: `run-${run}`, invocationId: `invocation-${run}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
    configuration: { cwd: '/srv/shop' },
    tools: [searchOrders, chargeCard],
    toolConcurrency: 2,
    work: { kind: 'message', content: 'Charge the open order' },
  }
}

if (role === 'worker' && dir) {
  const server = await scriptedModelServer([
    answer.toolCalls([
      { name: 'search_orders', arguments: {} },
      { name: 'charge_card', arguments: { cents: 4200 } },
    ]),
  ])
  const log = await EventLog.open(join(dir, 'log'))
  await new Engine({ log }).start(input(server.baseUrl, join(dir, 'charges.txt'), '1'))
} else if (role === 'restart' && dir) {
  // A restart that recovers, is told what recovery closed, and dies before it continues anything.
  const log = await EventLog.open(join(dir, 'log'))
  await recoverInvocations(log, {
    onClosed: ({ invocation, outcome }) => void process.stdout.write(`${invocation.runId} (${outcome.status === 'failed' ? outcome.class : outcome.status})\n`),
  })
  process.stdout.write('recovered\n')
  setInterval(() => undefined, 60_000) // alive until killed
} else {
  const work = await mkdtemp(join(tmpdir(), 'factstate-resume-'))
  const child = async (name: string, until: string) => {
    const started = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), name, work], { stdio: ['ignore', 'pipe', 'inherit'] })
    const said: string[] = []
    for await (const line of createInterface({ input: started.stdout })) {
      if (line === until) break
      said.push(line)
    }
    started.kill('SIGKILL')
    await new Promise((resolve) => started.once('exit', resolve))
    return said
  }
  try {
    // Process 1 runs until the card is charged, then is killed with SIGKILL.
    await child('worker', 'charged')
    console.log('worker killed while search_orders and charge_card ran')
    // Process 2 recovers (onClosed reports run-1 to it, once), then is killed before it continues it.
    const closed = await child('restart', 'recovered')
    console.log(`a restart recovered ${closed.join(', ')} and was killed before it continued anything`)

    // Process 3 (here, this one): the start-up loop. Recovery has nothing left to close; the log still
    // lists the session whose last run the crash cut short, with the call to acknowledge.
    const log = await EventLog.open(join(work, 'log'))
    console.log(`this start: recovery closed ${await recoverInvocations(log)} run(s); asking the log`)
    const server = await scriptedModelServer([answer.text('The order is paid: charged once, 42.00.')])
    const charged = readFileSync(join(work, 'charges.txt'), 'utf8')
    const engine = new Engine({ log })
    const outcomes: string[] = []
    for (const { sessionId, active, paused, unknown, restored, unanswered } of await log.pendingSessions({ unanswered: true })) {
      if (active.length > 0 || paused.length > 0 || restored !== undefined || unanswered?.outcome?.status !== 'failed') continue
      // Cut short by a crash: not a run that failed by itself, nor a cancel. (This shop has no stop button to check.)
      if (unanswered.outcome.class !== 'host_interrupted' && unanswered.outcome.class !== 'outcome_unknown') continue
      // A child run (Agents that call agents) is settled through its supervisor's recovery.
      if ((await log.runs(sessionId))[0]?.parent !== undefined) continue
      console.log(`${sessionId}: ${unanswered.runId} ${unanswered.outcome.class}, ${unknown.length} call(s) to acknowledge (read-only ones are not listed)`)
      const found: string[] = []
      for (const op of unknown) {
        // Ask the downstream system by operation id whether the call took effect.
        const happened = charged.includes(op.operationId) ? 'the charge went through' : 'not charged'
        console.log(`  ${op.name} ${JSON.stringify(op.input)} ${op.operationId}: ${happened}`)
        found.push(`${op.name} (operation ${op.operationId}): ${happened}${happened === 'the charge went through' ? '; do not charge again' : ''}`)
      }
      const source = (await log.runSource(sessionId, unanswered.runId))?.boundary
      if (!source) continue
      const next = input(server.baseUrl, join(work, 'charges.txt'), '2')
      // The model is told what the check found: told only that a call may or may not have happened, it may make it again.
      // onlyIfLatest: the session may have moved on since it was listed (a new message, another start-up's continuation).
      next.work = { kind: 'continuation', source, onlyIfLatest: true, allowPriorUnknown: unknown.length > 0, ...(found.length > 0 ? { content: found.join('\n') } : {}) }
      try {
        outcomes.push((await engine.run(next)).status)
      } catch (error) {
        if (!isFactstateError(error, 'RUN_SOURCE_STALE') && !isFactstateError(error, 'RUN_BUSY')) throw error // moved on: nothing to resume
      }
    }
    const charges = readFileSync(join(work, 'charges.txt'), 'utf8').trim().split('\n').length
    console.log(`continued: ${outcomes.join(', ') || 'nothing'}; the card was charged ${charges} time(s)`)
    await log.close()
    await server.close()
    process.exitCode = outcomes.length === 1 && outcomes[0] === 'completed' && charges === 1 ? 0 : 1
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
