/**
 * Child process for the held run that keeps no process alive: opens the log in `argv[2]`, starts
 * the fixtures' run `held` against a model server that is never reached (the hold is taken at the
 * run's first safe point, before its first request), reserves a hold right after `start()`, prints
 * `held` once `ready()` resolves, and then awaits, at the top level, a decision nothing will give
 * (as a script that waits for a reviewer who is not in the process does). Nothing else is pending:
 * Node ends the process (exit 13, an unsettled top-level await) with the run open and held.
 */
import { Engine, EventLog, intentFor } from '../../index.js'
import { runInput } from './engine-fixtures.js'

const [dir] = process.argv.slice(2)
if (!dir) throw new Error('usage: child-held-run.ts <dir>')

const log = await EventLog.open(dir)
const engine = new Engine({ log })
// Port 9 (discard): never asked, the hold comes first.
const running = await engine.start(runInput('http://127.0.0.1:9/v1', 'held'))
const held = await running.handoff().reserve(intentFor(running.invocation, 'review')).ready()
process.stdout.write(`held ${held.preview().remainingSteps}\n`)
// The decision, from a reviewer this process does not have: nothing resolves it.
const decision = await new Promise<'approve' | 'reject'>(() => undefined)
await (decision === 'approve' ? held.commit() : held.release())
