/**
 * The README's check of an SSE client's `Last-Event-ID` ("Watching a run"), run as it is written
 * against a real log: the id the page was sent (`${seq}:${digest}`, the digest itself `sha256:…`)
 * resumes after its seq; an id whose digest is another log's, a seq past the end, or an id that is
 * not one (no colon, a seq that is not a whole number, none at all) starts the page over from 1.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { boundedTest, completeInvocation } from './support/log-fixtures.js'
import { readmeBlock } from './support/readme.js'

/** The README block that reads `last-event-id`, as a function of the request and the log giving `from`. */
async function checkOfLastEventId(): Promise<(request: { headers: Record<string, string | undefined> }, log: EventLog) => Promise<number>> {
  const block = await readmeBlock("headers['last-event-id']", 'one block checks Last-Event-ID')
  const AsyncFunction = (async () => undefined).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<number>
  // The block has no types: it runs as JavaScript.
  const run = new AsyncFunction('request', 'log', `${block}\nreturn from`)
  return (request, log) => run(request, log)
}

test(
  "the README's Last-Event-ID check resumes the page after the seq it names when the digest is the log's, and starts it over otherwise, never throwing",
  boundedTest(10_000, async (root) => {
    const check = await checkOfLastEventId()
    const log = await EventLog.open(join(root, 'log'))
    try {
      await log.appendAll(completeInvocation('first'))
      const { highWater } = log.head()
      const seq = highWater - 1
      const digest = await log.digestAt(seq)
      const from = (id: string | undefined) => check({ headers: id === undefined ? {} : { 'last-event-id': id } }, log)
      assert.is(await from(`${seq}:${digest}`), seq + 1, 'the id the page was sent')
      assert.is(await from(`${highWater}:${log.head().digest}`), highWater + 1, 'the last fact')
      for (const id of [undefined, '', `${seq}:sha256:${'0'.repeat(64)}`, `${highWater + 5}:${digest}`, `${seq}`, `1.5:${digest}`, `-1:${digest}`, `x:${digest}`, `:${digest}`]) {
        assert.is(await from(id), 1, String(id))
      }
    } finally {
      await log.close()
    }
  }),
)

test.run()
