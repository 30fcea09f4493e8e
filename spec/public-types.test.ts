/**
 * The public types as a consumer meets them, checked by `npm run typecheck` (this file is part of it:
 * an `@ts-expect-error` line that stops being an error fails it), beside what the runtime does with
 * the same values. Those that need `exactOptionalPropertyTypes` are in spec/package.test.ts's strict
 * consumer, which compiles under it.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type FailureClass, type RuntimeEvent, type StoredEvent } from '../index.js'
import { EventMaker, completeInvocation, facts, invocationOf } from './support/log-fixtures.js'
import { withTempDir, withTimeout } from './support/temp.js'

test('log.events() is an AsyncGenerator<StoredEvent, void, undefined>: a finished step has no value to read, return() takes none', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(dir)
      try {
        await log.appendAll(completeInvocation('typed'))
        const reader = log.events({ from: 8 })
        const first = await reader.next()
        if (first.done) throw new Error('expected the 8th event')
        const seq: number = first.value.seq
        const end = await reader.next()
        if (!end.done) throw new Error('expected the end of the log')
        // @ts-expect-error a finished step's value is void, not any (not called: it would throw)
        const unread = (): unknown => end.value.seq
        const nothing: void = end.value
        // @ts-expect-error return() takes no value of its own (TReturn is void)
        await reader.return('anything')
        const returned: IteratorResult<StoredEvent, void> = await reader.return(undefined)
        assert.equal([seq, nothing, returned.done, typeof unread], [8, undefined, true, 'function'])
      } finally {
        await log.close()
      }
    }),
    10_000,
  ))

test('FailureClass names the classes the engine writes and takes any other string, as the log does', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(dir)
      try {
        const make = new EventMaker(invocationOf('own-class'))
        // An application's own class: the log takes it, so the type read back must admit it.
        const own: FailureClass = 'quota_exhausted'
        const events: RuntimeEvent[] = make.many([facts.opened(), { type: 'invocation.ended', outcome: { status: 'failed', class: own, message: undefined } }])
        await log.appendAll(events)
        const stored: string[] = []
        for await (const { event } of log.events()) if (event.fact.type === 'invocation.ended' && event.fact.outcome.status === 'failed') stored.push(event.fact.outcome.class)
        assert.equal(stored, ['quota_exhausted'])
      } finally {
        await log.close()
      }
    }),
    10_000,
  ))

test('an optional member given as undefined is stored as one left out: the same bytes, the same digest', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const digests: string[] = []
      for (const given of [false, true]) {
        const log = await EventLog.open(join(dir, String(given)))
        try {
          const make = new EventMaker(invocationOf('optional'))
          const opened = facts.opened()
          if (opened.type !== 'invocation.opened') throw new Error('expected invocation.opened')
          const input = opened.input.kind === 'message' ? { ...opened.input, ...(given ? { requestFingerprint: undefined, priorUnknown: undefined, parent: undefined } : {}) } : opened.input
          const execution = { ...opened.execution, ...(given ? { mainOutputLimit: undefined, instructions: undefined, replayBase: undefined } : {}) }
          const configuration = { ...opened.configuration, ...(given ? { workspaceIdentity: undefined } : {}) }
          await log.appendAll(
            make.many([
              { ...opened, input, execution, configuration },
              { type: 'invocation.ended', outcome: { status: 'failed', class: 'engine_error', ...(given ? { message: undefined } : {}) } },
            ]),
          )
          digests.push((await log.verify()).digest)
          // Read back without the member, not with it undefined.
          const keys: string[][] = []
          for await (const { event } of log.events()) {
            const { fact } = event
            keys.push(fact.type === 'invocation.opened' ? [...Object.keys(fact.input), ...Object.keys(fact.execution), ...Object.keys(fact.configuration)] : fact.type === 'invocation.ended' ? Object.keys(fact.outcome) : [])
          }
          assert.equal(keys, [
            ['kind', 'content', 'model', 'providerOptions', 'cwd', 'tools', 'cwd'],
            ['status', 'class'],
          ])
        } finally {
          await log.close()
        }
      }
      assert.is(digests.length, 2)
      assert.is(digests[0], digests[1])
    }),
    10_000,
  ))

test.run()
