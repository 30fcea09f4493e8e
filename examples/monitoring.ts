/**
 * The README's "Monitoring" recipe (a test checks the README shows the part between the markers as
 * it is here): metrics of a running service read from its log by a follower, and a health check from
 * `log.failure()` and `engine.inFlight()`. Three runs (one calls a tool, one's tool is not waited for
 * past its timeoutMs, one is cancelled), then the log's directory is removed under it, as an
 * operator's mistake would, and the health check says so.
 *
 *   npx tsx examples/monitoring.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type RunInput, isFactstateError } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

// --- the README's recipe
// What to export (as gauges and histograms of your metrics library), from the facts alone.
const metrics = { runsStarted: 0, runsEnded: {} as Record<string, number>, toolMs: [] as number[], modelMs: [] as number[], highWater: 0 }
const began = new Map<string, number>() // a model attempt or tool call under way (by invocation): its first fact's recordedAt

/** Reads each fact once it is durable, from the head on; ends when the log closes, throws when it fails. */
async function follow(log: EventLog): Promise<void> {
  for await (const { seq, event } of log.events({ from: log.head().highWater + 1, follow: true })) {
    const { fact, recordedAt, invocation } = event
    metrics.highWater = seq
    if (fact.type === 'invocation.opened') metrics.runsStarted += 1
    if (fact.type === 'invocation.ended') {
      const outcome = fact.outcome.status === 'failed' ? `failed ${fact.outcome.class}` : fact.outcome.status
      metrics.runsEnded[outcome] = (metrics.runsEnded[outcome] ?? 0) + 1
      // What the run left unfinished (a tool past its timeoutMs never settles) is timed no more.
      for (const key of began.keys()) if (key.startsWith(`${invocation.invocationId} `)) began.delete(key)
    }
    const step = 'stepId' in fact ? `${invocation.invocationId} ${fact.stepId}` : undefined
    const call = 'operationId' in fact ? `${invocation.invocationId} ${fact.operationId}` : undefined
    if (fact.type === 'model.requested' && step) began.set(step, recordedAt)
    if ((fact.type === 'model.completed' || fact.type === 'model.interrupted') && step && began.has(step)) {
      metrics.modelMs.push(recordedAt - (began.get(step) ?? recordedAt))
      began.delete(step)
    }
    if (fact.type === 'tool.dispatched' && call) began.set(call, recordedAt)
    if (fact.type === 'tool.settled' && call && began.has(call)) {
      metrics.toolMs.push(recordedAt - (began.get(call) ?? recordedAt))
      began.delete(call)
    }
  }
}

/** For a health endpoint: the log's failure and why (its LOG_IO reason), and the runs in flight. */
function health(log: EventLog, engine: Engine) {
  const failure = log.failure()
  return {
    ok: failure === undefined,
    failure: failure === undefined ? undefined : failure.code === 'LOG_IO' ? `LOG_IO ${failure.details?.reason}` : failure.code,
    runsInFlight: engine.inFlight().length,
    highWater: metrics.highWater,
  }
}
// --- end of the README's recipe

let failed = false
const check = (ok: boolean, what: string) => {
  console.log(`${ok ? '✔' : '✘'} ${what}`)
  if (!ok) failed = true
}

const model = await scriptedModelServer((request) => {
  const last = request.body.messages.at(-1) as { role: string; content?: string } | undefined
  if (last?.role === 'tool') return answer.text('Looked it up.')
  return String(last?.content).includes('slow') ? answer.hang() : answer.toolCalls([{ name: 'lookup', arguments: { q: 'status' } }])
})
const dir = await mkdtemp(join(tmpdir(), 'factstate-monitoring-'))
const log = await EventLog.open(join(dir, 'log'))
const engine = new Engine({ log })
const following = follow(log).then(
  () => 'ended',
  (error: unknown) => (isFactstateError(error) ? error.code : String(error)),
)
try {
  const input = (name: string, content: string): RunInput => ({
    invocation: { sessionId: name, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'stand-in' },
    configuration: { cwd: '/srv/app' },
    tools: [{ name: 'lookup', readOnly: true, execute: async () => ({ status: 'green' }) }],
    work: { kind: 'message', content },
  })
  check((await engine.run(input('a', 'What is the status?'))).status === 'completed', 'run a completed')
  // A tool past its timeoutMs is not waited for: the run ends outcome_unknown, the call never settles.
  const stuck = { ...input('s', 'What is the status?'), tools: [{ name: 'lookup', readOnly: false, timeoutMs: 100, execute: () => new Promise(() => undefined) }] }
  check((await engine.run(stuck)).status === 'failed', 'run s failed: its tool did not finish in time')
  const stop = new AbortController()
  const slow = await engine.start(input('b', 'a slow question'), { signal: stop.signal })
  await model.seen(3)
  check(health(log, engine).runsInFlight === 1, 'one run in flight while b waits for its model')
  stop.abort('shutdown')
  await slow.wait()
  // The follower gets each fact once it is durable: wait until it has read the log's head.
  while (metrics.highWater < log.head().highWater) await new Promise((resolve) => setTimeout(resolve, 5))
  console.log(`runs started ${metrics.runsStarted}; ended ${JSON.stringify(metrics.runsEnded)}; tool calls timed ${metrics.toolMs.length}; model requests timed ${metrics.modelMs.length}`)
  check(metrics.runsStarted === 3 && metrics.runsEnded.completed === 1 && metrics.runsEnded.cancelled === 1 && metrics.runsEnded['failed outcome_unknown'] === 1, 'runs by outcome')
  check(metrics.toolMs.length === 1 && metrics.modelMs.length === 4, 'latencies: 1 tool call settled; 3 model answers and the request the cancel cut short')
  check(began.size === 0, 'nothing left timed once every run ended (the call that never settled included)')
  check(JSON.stringify(health(log, engine)) === JSON.stringify({ ok: true, runsInFlight: 0, highWater: log.head().highWater }), 'healthy')

  // The directory removed under the running log: the next run is refused, and health says why.
  await rm(join(dir, 'log'), { recursive: true })
  const refused = await engine.run(input('c', 'What is the status now?')).then(
    () => 'ran',
    (error: unknown) => (isFactstateError(error) ? error.code : String(error)),
  )
  const now = health(log, engine)
  console.log(`after the directory was removed: ${refused}; health ${JSON.stringify(now)}`)
  check(!now.ok && now.failure === 'LOG_IO directory_gone', 'unhealthy: LOG_IO directory_gone')
  check((await following) === 'LOG_IO', 'the follower ended with the failure')
} finally {
  await log.close()
  await model.close()
  await rm(dir, { recursive: true, force: true })
}
process.exit(failed ? 1 : 0)
