/**
 * Child process: opens the log in `argv[2]` and runs the successor whose run input (without its
 * tools, as JSON) is `argv[3]`, with the fixtures' echo tool; prints the outcome as JSON, then
 * closes the log. A successor in another process than the one that sealed its turn.
 */
import { Engine, EventLog, ModelExecutor, type RunInput } from '../../index.js'
import { countingTool } from './engine-fixtures.js'

const [dir, given] = process.argv.slice(2)
if (!dir || !given) throw new Error('usage: child-handoff-successor.ts <dir> <run input JSON>')
const log = await EventLog.open(dir, { create: false })
try {
  const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000, backoffMs: 1, maxBackoffMs: 20 }) })
  const input = { ...(JSON.parse(given) as RunInput), tools: [countingTool()] }
  process.stdout.write(`${JSON.stringify(await engine.run(input))}\n`)
} finally {
  await log.close()
}
