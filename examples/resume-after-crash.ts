/**
 * Resuming after a crash: a worker process is killed with SIGKILL while two tools run, a read-only
 * search and a card charge. The next process recovers the log, is told what recovery closed
 * (`onClosed`), checks the charge's effect by its operation id (the idempotency key the tool was
 * given), and continues the run from its boundary. The charge is never run again; the search needs
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
import { Engine, EventLog, type RecoveredInvocation, type RunInput, type ToolDefinition, recoverInvocations } from 'factstate'
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
} else {
  const work = await mkdtemp(join(tmpdir(), 'factstate-resume-'))
  try {
    // Process 1 runs until the card is charged, then is killed with SIGKILL.
    const worker = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), 'worker', work], { stdio: ['ignore', 'pipe', 'inherit'] })
    for await (const line of createInterface({ input: worker.stdout })) if (line === 'charged') break
    worker.kill('SIGKILL')
    await new Promise((resolve) => worker.once('exit', resolve))
    console.log('worker killed while search_orders and charge_card ran')

    // Process 2 (here, this one): recover, and continue what the crash cut short.
    const log = await EventLog.open(join(work, 'log'))
    const cutShort: RecoveredInvocation[] = []
    await recoverInvocations(log, { onClosed: (closed) => void cutShort.push(closed) })
    const server = await scriptedModelServer([answer.text('The order is paid: charged once, 42.00.')])
    const charged = readFileSync(join(work, 'charges.txt'), 'utf8')
    let outcome = 'none'
    for (const { invocation, outcome: ended, uncertainOperations, boundary } of cutShort) {
      console.log(`recovered ${invocation.runId}: ${ended.status === 'failed' ? ended.class : ended.status}, run ends at seq ${boundary.highWater}`)
      const found: string[] = []
      for (const op of uncertainOperations) {
        // Read-only calls had no effect; for the others, ask the downstream system by operation id.
        const happened = op.readOnly ? 'no effect (read-only)' : charged.includes(op.operationId) ? 'the charge went through' : 'not charged'
        console.log(`  ${op.name} ${JSON.stringify(op.input)} ${op.operationId}: ${happened}`)
        if (!op.readOnly) found.push(`${op.name} (operation ${op.operationId}): ${happened}${happened === 'the charge went through' ? '; do not charge again' : ''}`)
      }
      const next = input(server.baseUrl, join(work, 'charges.txt'), '2')
      // The model is told what the check found: told only that a call may or may not have happened, it may make it again.
      next.work = { kind: 'continuation', source: boundary, allowPriorUnknown: true, ...(found.length > 0 ? { content: found.join('\n') } : {}) }
      outcome = (await new Engine({ log }).run(next)).status
    }
    const charges = readFileSync(join(work, 'charges.txt'), 'utf8').trim().split('\n').length
    console.log(`continued: ${outcome}; the card was charged ${charges} time(s)`)
    await log.close()
    await server.close()
    process.exitCode = cutShort.length === 1 && outcome === 'completed' && charges === 1 ? 0 : 1
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
