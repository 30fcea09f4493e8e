/**
 * What a change to the append path must not change: the bytes it writes. Builds one log
 * deterministically through `EventLog` (the golden history's facts appended again one by one, an
 * idempotent repeat and refused appends, invocations whose strings and numbers cover msgpack's
 * widths and UTF-8, `appendAll` calls, 8,600 facts of the benchmark workload one appender after
 * another and 1,920 more issued 64 at a time in one turn) and prints a sha256 of every key and
 * value LevelDB holds, with their count, the refusals' codes and the log's digest. Run it on the
 * code before and after a change; the lines must be the same.
 *
 *   node --import tsx bench/log-bytes.ts
 *
 * Not part of `npm run bench`. Several appenders awaiting one another would make the seqs depend
 * on the disk's timing, so only appends issued in one turn run side by side.
 */
import { createHash } from 'node:crypto'
import { cp } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ClassicLevel } from 'classic-level'
import type { Fact, RuntimeEvent } from '../facts/types.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { EventMaker, completeInvocation, facts, invocationOf } from '../spec/support/log-fixtures.js'
import { withTempDir } from './support.js'
import { appenderLanes } from './workload.js'

const GOLDEN = fileURLToPath(new URL('../spec/fixtures/golden-v1', import.meta.url))
const TEXTS = ['', 'a', 'x'.repeat(31), 'x'.repeat(32), 'y'.repeat(255), 'z'.repeat(256), 'w'.repeat(70_000), 'héllo wörld', '日本語のテキスト', '😀 emoji 😀', 'mixed ascii then é'.repeat(3)]
const NUMBERS = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, -1, -32, -33, -128, -129, -32_768, -32_769, 1.5, -2.25, 2 ** 53 - 1]

await withTempDir(async (dir) => {
  await cp(GOLDEN, join(dir, 'golden'), { recursive: true })
  const golden = await EventLog.open(join(dir, 'golden'))
  const goldenEvents: RuntimeEvent[] = []
  try {
    const { events } = await golden.verify()
    for await (const chunk of logInternals(golden).scanEvents(events, 100)) for (const stored of chunk.events) goldenEvents.push(stored.event)
  } finally {
    await golden.close()
  }
  const log = await EventLog.open(join(dir, 'log'))
  const refusals: string[] = []
  const attempt = async (append: Promise<unknown>): Promise<void> => {
    try {
      await append
    } catch (error) {
      refusals.push(String((error as { code?: unknown }).code))
    }
  }
  let digest: string
  try {
    for (const event of goldenEvents) await attempt(log.append(event))
    const repeated = goldenEvents[3] as RuntimeEvent
    await attempt(log.append(repeated))
    await attempt(log.append({ ...repeated, recordedAt: 1 }))
    for (const [index, text] of TEXTS.entries()) {
      const make = new EventMaker(invocationOf(`vary-${index}`))
      const steps: Fact[] = [
        facts.opened(text || 'empty'),
        facts.requested('s1'),
        facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: JSON.stringify({ text }) }], text, { inputTokens: 10 + index, outputTokens: 3 }),
        facts.dispatched('op1', { text, numbers: NUMBERS, nested: { a: [1, [2, { b: text }]], n: null, t: true, f: false } }),
        facts.settled('op1', { echoed: text, numbers: NUMBERS }),
        facts.requested('s2'),
        facts.completed('s2', [], text),
        facts.ended(),
      ]
      const events = make.many(steps)
      if (index % 2 === 0) await attempt(log.appendAll(events))
      else for (const event of events) await attempt(log.append(event))
    }
    for (let index = 0; index < 20; index += 1) {
      await attempt(log.appendAll(completeInvocation(`c${index}`, `sess-${index % 3}`, [{ inputTokens: index, outputTokens: index * 1000 }, undefined])))
    }
    await attempt(log.append(new EventMaker(invocationOf('c1', 'sess-1')).many([facts.opened(), facts.requested('s9')])[1] as RuntimeEvent))
    await attempt(log.append({ id: 'bad', recordedAt: 1, invocation: invocationOf('bad'), fact: { type: 'nope' } } as unknown as RuntimeEvent))
    const lanes = appenderLanes(16, 16 * 400, 'b')
    for (const lane of lanes.slice(0, 8)) for (const event of lane) await log.append(event)
    for (const lane of lanes.slice(8)) await attempt(log.appendAll(lane))
    const side = appenderLanes(64, 64 * 30, 'm')
    for (let step = 0; step < 30; step += 1) await Promise.all(side.map((lane) => attempt(log.append(lane[step] as RuntimeEvent))))
    digest = (await log.verify()).digest
  } finally {
    await log.close()
  }
  const db = new ClassicLevel<Uint8Array, Uint8Array>(join(dir, 'log'), { keyEncoding: 'view', valueEncoding: 'view' })
  const hash = createHash('sha256')
  let records = 0
  try {
    for await (const [key, value] of db.iterator()) {
      records += 1
      hash.update(`${key.length}:${value.length}:`).update(key).update(value)
    }
  } finally {
    await db.close()
  }
  process.stdout.write(`${records} records, sha256 ${hash.digest('hex')}; refused ${refusals.join(', ')}; log digest ${digest}\n`)
})
