/**
 * Child process for the crash tests: opens the log in `argv[2]`, parks a few invocations in
 * known states, prints `parked`, then runs `argv[3]` (default 32) concurrent appenders forever.
 * Each appender drives invocations through a full lifecycle, one awaited append at a time, and
 * prints `ack <seq> <eventId>` for every acknowledged (durable) append. The parent kills it
 * with SIGKILL at an arbitrary moment.
 *
 * Parked states (invocation ids `inv-park-<state>`):
 * - `model`: a model request in flight
 * - `tool`: a tool dispatched, never settled
 * - `between`: a tool settled, the next request not issued
 * - `rejected`: the only tool call rejected, the next request not issued
 * - `held`: a hold entered at a safe point
 */
import { EventLog } from '../../store/event-log.js'
import type { Fact } from '../../facts/types.js'
import { EventMaker, facts, invocationOf } from './log-fixtures.js'

const dir = process.argv[2]
if (!dir) throw new Error('usage: child-append-stream.ts <dir> [appenders]')
const appenders = Number(process.argv[3] ?? 32)

const call = (operationId: string) => ({ callId: `call-${operationId}`, name: 'echo', arguments: '{"value":42}' })
const log = await EventLog.open(dir)

const parked: Record<string, Fact[]> = {
  model: [facts.opened(), facts.requested('s1')],
  tool: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1')],
  between: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1')],
  rejected: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.rejected('op1')],
  held: [facts.opened(), facts.requested('s1'), facts.completed('s1', [call('op1')]), facts.dispatched('op1'), facts.settled('op1'), facts.holdEntered('h1')],
}
for (const [state, list] of Object.entries(parked)) {
  await log.appendAll(new EventMaker(invocationOf(`park-${state}`, 'session-park')).many(list))
}
process.stdout.write('parked\n')

function lifecycle(n: number): Fact[] {
  const list: Fact[] = [facts.opened(`message ${n}`)]
  const steps = 1 + (n % 3)
  for (let step = 1; step <= steps; step += 1) {
    list.push(facts.requested(`s${step}`))
    if (step < steps) {
      const op = `op${step}`
      list.push(facts.completed(`s${step}`, [call(op)]), facts.dispatched(op), facts.settled(op, `output ${n}/${step}`))
    } else {
      list.push(facts.completed(`s${step}`, [], 'done'))
    }
  }
  list.push(facts.ended())
  return list
}

async function appender(worker: number): Promise<never> {
  for (let n = 0; ; n += 1) {
    const make = new EventMaker(invocationOf(`w${worker}-${n}`, `session-w${worker % 8}`))
    for (const fact of lifecycle(n)) {
      const event = make.next(fact)
      const seq = await log.append(event)
      process.stdout.write(`ack ${seq} ${event.id}\n`)
    }
  }
}

await Promise.all(Array.from({ length: appenders }, (_, worker) => appender(worker)))
