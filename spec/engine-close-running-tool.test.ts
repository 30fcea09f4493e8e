/**
 * A tool that ignores its abort signal keeps running after the log's `close()`: until it settles the
 * directory stays locked (LevelDB open, appends refused), so that no open, in this process or another,
 * finds its run cut short and ends it outcome_unknown while its effect may still happen. The close
 * itself resolves after a second's grace.
 */
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, recoverInvocations } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { refusal } from './support/log-fixtures.js'
import { countingTool, engineTest, factsOf } from './support/engine-fixtures.js'

const root = fileURLToPath(new URL('..', import.meta.url))

/** `EventLog.open(path)` in another process: `opened`, or the refusal's code and holder. */
function openInChild(path: string): Promise<{ opened: true } | { code: string; holder: unknown }> {
  const source = pathToFileURL(join(root, 'store', 'event-log.ts')).href
  const code = `import(${JSON.stringify(source)}).then(async ({ EventLog }) => {
    try { const log = await EventLog.open(${JSON.stringify(path)}); await log.close(); console.log(JSON.stringify({ opened: true })) }
    catch (error) { console.log(JSON.stringify({ code: error.code, holder: error.details?.holder })) }
  })`
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: root, timeout: 20_000 }, (error, stdout) => {
      if (error) reject(error)
      else resolve(JSON.parse(stdout.trim().split('\n').at(-1) as string) as { opened: true } | { code: string; holder: unknown })
    })
  })
}

test(
  "after close(), a tool that ignores its abort keeps the directory locked until it settles: a reopen here is LOG_WRITER_BUSY (toolsRunning), another process's too, and an open with waitMs opens once it has settled",
  engineTest(
    () => answer.toolCalls([{ id: 'call-1', name: 'charge', arguments: {} }]),
    {},
    async (h) => {
      let started!: () => void
      const running = new Promise<void>((resolve) => (started = resolve))
      let finish!: (value: unknown) => void
      let settled = false
      // Ignores its signal: the charge lands whenever the bank answers.
      const charge = countingTool('charge', () => {
        started()
        return new Promise((resolve) => (finish = resolve)).finally(() => {
          settled = true
        })
      })
      const run = await h.engine.start(h.input('pay', { tools: [charge] }))
      await running
      await h.log.close()

      const busy = await refusal(EventLog.open(h.logPath))
      assert.equal([busy.code, busy.details], ['LOG_WRITER_BUSY', { holder: 'this-process', closing: true, toolsRunning: 1 }])
      assert.match(busy.message, /1 tool call its engines started is still running/)
      assert.equal(await openInChild(h.logPath), { code: 'LOG_WRITER_BUSY', holder: 'another-process' }, 'another process is kept out too')

      const waiting = EventLog.open(h.logPath, { waitMs: 20_000 }).then((log) => {
        assert.ok(settled, 'the open that waited opened only once the tool had settled')
        return log
      })
      finish({ charged: true })
      h.log = await waiting
      assert.is(await run.wait().then(() => 'resolved', (error: { code?: string }) => error.code), 'LOG_CLOSED')
      const last = (await factsOf(h.log, 'invocation-pay')).at(-1)?.type
      assert.is(last, 'tool.dispatched', 'its settlement came after the close: not recorded')
      // Recovery ends it outcome_unknown now that the tool has settled, as it does after a crash.
      assert.is(await recoverInvocations(h.log), 1)
    },
  ),
)

test.run()
