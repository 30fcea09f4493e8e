/**
 * Child process for the crash tests: opens the log in `argv[2]`, parks a few invocations in
 * known states, prints `parked`, then runs `argv[3]` (default 32) concurrent appenders forever.
 * Each appender drives invocations through a full lifecycle, one awaited append at a time (opening
 * the next before ending the current, so one is always open), and
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

// Each worker opens its next invocation before it ends the current one, so at every instant after
// its first acknowledgement the log holds an open invocation of every worker: a kill at any moment
// leaves streaming invocations open (the workers run in lockstep, so ending one invocation before
// opening the next let a kill land where none was open).
async function appender(worker: number): Promise<never> {
  const makerOf = (n: number) => new EventMaker(invocationOf(`w${worker}-${n}`, `session-w${worker % 8}`))
  const write = async (make: EventMaker, fact: Fact) => {
    const event = make.next(fact)
    const seq = await log.append(event)
    process.stdout.write(`ack ${seq} ${event.id}\n`)
  }
  let make = makerOf(0)
  await write(make, lifecycle(0)[0] as Fact)
  for (let n = 0; ; n += 1) {
    const list = lifecycle(n)
    for (const fact of list.slice(1, -1)) await write(make, fact)
    const next = makerOf(n + 1)
    await write(next, lifecycle(n + 1)[0] as Fact)
    await write(make, list.at(-1) as Fact)
    make = next
  }
}

await Promise.all(Array.from({ length: appenders }, (_, worker) => appender(worker)))
