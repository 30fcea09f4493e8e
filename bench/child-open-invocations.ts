/**
 * The process the recovery benchmark kills: it opens the log at `argv[2]`, starts `argv[3]`
 * invocations whose model requests never answer, prints `ready` once every one of them has its
 * `model.requested` fact durable, and waits to be killed.
 */
import { Engine } from '../actors/engine.js'
import { ModelExecutor } from '../actors/model-executor.js'
import { EventLog } from '../store/event-log.js'
import { runInput, silentClient } from './workload.js'

const [path, countText] = process.argv.slice(2)
const count = Number(countText)
if (!path || !Number.isSafeInteger(count) || count < 1) throw new Error('usage: child-open-invocations.ts <log> <count>')

const log = await EventLog.open(path)
let requested = 0
const engine = new Engine({
  log,
  model: new ModelExecutor({
    createClient: () =>
      silentClient(() => {
        requested += 1
        if (requested === count) process.stdout.write('ready\n')
      }),
  }),
})
const WINDOW = 512
for (let first = 0; first < count; first += WINDOW) {
  await Promise.all(Array.from({ length: Math.min(WINDOW, count - first) }, (_, k) => engine.start(runInput('killed', first + k))))
}
setInterval(() => undefined, 60_000)
