/**
 * Cross-process handoff: process 1 runs an agent, seals it at a safe point and exits; process 2
 * opens the same log, finds the sealed pause, and resumes the turn as its successor. The
 * successor's transcript is rebuilt from facts — the tool is not run again.
 *
 *   npx tsx examples/cross-process-handoff.ts
 */
import { spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { appendFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Engine, EventLog, type RunInput, type ToolDefinition, successorOf } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const [role, dir] = process.argv.slice(2)
const invocation = { sessionId: 'support', turnId: 'turn-1', runId: 'run-1', invocationId: 'invocation-1' }

function input(baseUrl: string, effects: string): RunInput {
  const lookup: ToolDefinition = {
    name: 'lookup_ticket',
    description: 'Reads a support ticket',
    inputSchema: { type: 'object', properties: { id: { type: 'string' } } },
    async execute(args) {
      appendFileSync(effects, `lookup_ticket ${process.pid}\n`)
      return { id: (args as { id: string }).id, subject: 'Printer on fire' }
    },
  }
  return {
    invocation,
    provider: { kind: 'openai-chat', baseUrl, model: 'stand-in' },
    configuration: { cwd: '/srv/support' },
    mainOutputLimit: 256,
    tools: [lookup],
    work: { kind: 'message', content: 'Summarize ticket T-9' },
  }
}

if (role === 'seal' && dir) {
  // Process 1: one tool step, then a hold; commit it and exit.
  const server = await scriptedModelServer([answer.toolCalls([{ name: 'lookup_ticket', arguments: { id: 'T-9' } }], { hold: true })])
  const log = await EventLog.open(join(dir, 'log'))
  const engine = new Engine({ log })
  const running = await engine.start(input(server.baseUrl, join(dir, 'effects.txt')))
  // Reserved once the first request is in flight: the hold comes after that step. Reserved right
  // after start(), it would be held before any request (a run that has just started is at a safe point).
  await server.seen(0)
  const reservation = running.handoff().reserve({
    handoffId: 'to-process-2',
    hostEpoch: `pid-${process.pid}`,
    rootRunId: 'run-1',
    successorRunId: 'run-2',
    successorInvocationId: 'invocation-2',
    claimId: 'claim-1',
  })
  server.release(0)
  const pause = await (await reservation.ready()).commit()
  console.log(`process 1 (pid ${process.pid}): sealed with ${pause.remainingSteps} steps left`)
  await engine.drain()
  await log.close()
  await server.close()
} else if (role === 'resume' && dir) {
  // Process 2: the sealed facts alone authorize the successor.
  const server = await scriptedModelServer([answer.text('Ticket T-9: the printer is on fire.')])
  const log = await EventLog.open(join(dir, 'log'))
  const sealed = await log.runSource('support', 'run-1')
  if (!sealed?.pause) throw new Error('run-1 was not sealed')
  const { boundary: source, pause } = sealed
  const run = input(server.baseUrl, join(dir, 'effects.txt'))
  run.invocation = successorOf(pause.intent, source.invocation)
  run.work = { kind: 'handoff', source, pause }
  const outcome = await new Engine({ log }).run(run)
  const replayed = JSON.stringify(server.requests[0]?.body).includes('Printer on fire')
  console.log(`process 2 (pid ${process.pid}): successor ${outcome.status}; tool result replayed from facts: ${replayed}`)
  await log.close()
  await server.close()
  process.exitCode = outcome.status === 'completed' && replayed ? 0 : 1
} else {
  // The parent: run the two processes one after the other on one log.
  const work = await mkdtemp(join(tmpdir(), 'factstate-handoff-'))
  const self = fileURLToPath(import.meta.url)
  try {
    for (const step of ['seal', 'resume']) {
      const child = spawnSync(process.execPath, [...process.execArgv, self, step, work], { stdio: 'inherit' })
      if (child.status !== 0) throw new Error(`process for ${step} exited ${child.status}`)
    }
    const effects = (await readFile(join(work, 'effects.txt'), 'utf8')).trim().split('\n')
    console.log(`the tool ran ${effects.length} time(s) across both processes`)
    process.exitCode = effects.length === 1 ? 0 : 1
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
