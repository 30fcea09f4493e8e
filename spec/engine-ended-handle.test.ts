/**
 * A handle kept after its run ended (a page's map of runs to reconnect to) keeps what its API still
 * promises (the outcome, the state, the closed gate) and lets go of the run's transcript: the facts
 * the run recorded and the messages built from them, which hold every tool output it sent.
 *
 * Nothing the run keeps is the test's own object (facts are copies, request bodies are parsed from
 * their text), so what a kept handle holds is measured: the heap with the handle kept, less the heap
 * once it is let go (both after collection), against the size of the tool outputs.
 */
import { getHeapStatistics } from 'node:v8'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import type { InvocationOutcome, RunningInvocation } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { countingTool, type EngineHarness, engineTest, intentOf } from './support/engine-fixtures.js'
import { aliveAfterCollection } from './support/gc.js'

const MIB = 1024 * 1024

/** A tool output of 1 MiB of text, its own each call: three make a transcript of some 6 MiB (the outputs, and the tool messages made of them). */
const big = (input: unknown) => Promise.resolve({ input, blob: JSON.stringify(input).padEnd(MIB, '.') })

/** The heap used once collected: the run's and the server's leftovers collected first. */
async function heapUsed(): Promise<number> {
  // A reference to an object made now: gone once a full collection has run, after which the heap is read.
  await aliveAfterCollection([new WeakRef({})])
  await aliveAfterCollection([new WeakRef({})])
  return getHeapStatistics().used_heap_size
}

/**
 * Runs `name` to its end (`end` may cancel it) through `engine.start` (not the harness's, which
 * keeps every handle), and gives the heap held by its handle alone, with what `check` found of
 * the handle after the end.
 */
async function heldByHandle(h: EngineHarness, name: string, check: (running: RunningInvocation, outcome: InvocationOutcome) => void, end?: (running: RunningInvocation) => void): Promise<number> {
  let running: RunningInvocation | undefined = await h.engine.start(h.input(name, { tools: [countingTool('echo', big)] }))
  end?.(running)
  const outcome = await running.wait()
  // The server keeps every request (each carrying the outputs sent so far): the test's, not the run's.
  h.server.requests.length = 0
  const kept = await heapUsed()
  check(running, outcome)
  const handle = new WeakRef(running)
  running = undefined
  assert.is(await aliveAfterCollection([handle]), 0, 'nothing but the test kept the handle')
  return kept - (await heapUsed())
}

test(
  'a handle kept after its run completed holds none of its transcript, and still answers as its API says',
  engineTest(
    [
      answer.toolCalls([{ id: 'call-1', name: 'echo', arguments: { value: 1 } }]),
      answer.toolCalls([{ id: 'call-2', name: 'echo', arguments: { value: 2 } }]),
      answer.toolCalls([{ id: 'call-3', name: 'echo', arguments: { value: 3 } }]),
      answer.text('done'),
    ],
    {},
    async (h) => {
      const held = await heldByHandle(h, 'kept', (running, outcome) => {
        // What the handle promises after the end, with the transcript gone.
        assert.equal(outcome, { status: 'completed' })
        assert.is(running.state(), 'ended')
        assert.is(running.snapshot().context.stepsUsed, 4)
        assert.is(running.liveText(), undefined)
        assert.is(running.liveToolCalls(), undefined)
        assert.equal(running.invocation.invocationId, 'invocation-kept')
        running.cancel('too late')
        assert.is(running.snapshot().context.outcome?.status, 'completed', 'a cancel after the end changes nothing')
        assert.throws(
          () => running.handoff().reserve(intentOf('kept-successor', 'run-kept')),
          (error: unknown) => (error as { code?: string }).code === 'HANDOFF_UNAVAILABLE',
        )
      })
      assert.ok(held < MIB, `the handle of the ended run holds ${(held / MIB).toFixed(2)} MiB (its tool outputs were 3 MiB)`)
    },
  ),
)

test(
  'a handle kept after its run was cancelled between tool calls holds none of its transcript either',
  engineTest(
    (_request, index) => (index < 3 ? answer.toolCalls([{ id: `call-${index}`, name: 'echo', arguments: { value: index } }]) : answer.text('done')),
    {},
    async (h) => {
      const held = await heldByHandle(
        h,
        'cancelled',
        (running, outcome) => {
          assert.equal(outcome, { status: 'cancelled', source: 'stop' })
          assert.is(running.state(), 'ended')
        },
        (running) => {
          void h.server.seen(2).then(() => running.cancel('stop'))
        },
      )
      assert.ok(held < MIB, `the handle of the cancelled run holds ${(held / MIB).toFixed(2)} MiB (its tool outputs were 2 MiB)`)
    },
  ),
)

test.run()
