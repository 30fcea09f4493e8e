/**
 * Child process for the seal-on-cancel test: opens the log in `argv[2]`, starts a scripted model
 * server that asks for one call to `prepare`, and runs the fixtures' run `shutdown` with one
 * shutdown signal. As in the README's "A reviewer who may take days", the tool reserves a hold
 * on its own run (with `sealOnCancel` when `argv[3]` is `seal`), seals it in a `.then` once held,
 * prints `reserved`, and runs until its signal aborts. SIGTERM aborts the one signal its run was
 * started with, then drains, closes and exits (the README's recipe, `engine.close({ cancel })`,
 * cancels a run the same way, `running.cancel`); it prints `decided <code or sealed>` and `outcome <JSON>`.
 */
import { Engine, EventLog, intentFor, isFactstateError, ModelExecutor } from '../../index.js'
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'
import { countingTool, runInput } from './engine-fixtures.js'

const [dir, mode] = process.argv.slice(2)
if (!dir || (mode !== 'seal' && mode !== 'plain')) throw new Error('usage: child-seal-on-cancel.ts <dir> seal|plain')

const log = await EventLog.open(dir)
const server = await scriptedModelServer([answer.toolCalls([{ id: 'call-prepare', name: 'prepare', arguments: { value: 1 } }])])
const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
const shutdown = new AbortController()
let decided: Promise<void> = Promise.resolve()
const prepare = countingTool('prepare', async (_input, context) => {
  const run = engine.running(context.invocation.invocationId)
  const reservation = run?.handoff().reserve(intentFor(context.invocation, 'review'), mode === 'seal' ? { sealOnCancel: true } : undefined)
  decided = (reservation?.ready().then((held) => held.commit()) ?? Promise.reject(new Error('no run')))
    .then(() => {
      process.stdout.write('decided sealed\n')
    })
    .catch((error: unknown) => {
      process.stdout.write(`decided ${isFactstateError(error) ? error.code : String(error)}\n`)
    })
  process.stdout.write('reserved\n')
  await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }))
  return 'sent to a reviewer'
})
const running = await engine.start(runInput(server.baseUrl, 'shutdown', { tools: [prepare] }), { signal: shutdown.signal })

// What an application's own HTTP server does: keep the process until it is told to stop (the scripted server does not).
const alive = setInterval(() => undefined, 1_000)
process.once('SIGTERM', async () => {
  clearInterval(alive)
  shutdown.abort('shutdown')
  await Promise.race([engine.drain(), new Promise((resolve) => setTimeout(resolve, 10_000))])
  await decided
  process.stdout.write(`outcome ${JSON.stringify(await running.wait())}\n`)
  await server.close()
  await log.close()
  process.exit(0)
})
