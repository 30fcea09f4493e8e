/**
 * The engine's `maxInputBytes` (default 4 MiB, as `maxToolResultBytes`): a run whose input would put
 * more than that in its `invocation.opened` (the message, instructions, provider options,
 * configuration, model name and request fingerprint, counted in UTF-8 bytes, objects as JSON text) is
 * refused `RUN_INVALID_INPUT` with the largest part, the size and the limit in `details`, and nothing
 * is written: a message of 200 MB was recorded whole, and every reader of the run read it whole.
 * Continuations, handoff successors and child runs are held to it as messages are. Bad values of the
 * option are `ENGINE_INVALID_OPTIONS`.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, ModelExecutor, childRunFor, type RunInput, type ToolDefinition } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { engineTest, factsOf, only, refusedWithoutWriting, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'

const LIMIT = 1_000
const MiB4 = 4 * 1024 * 1024

/** The input's recorded size besides its message, as the refusal of a message of `LIMIT` bytes tells it. */
async function sizeBesidesContent(start: (input: RunInput) => Promise<unknown>, input: RunInput): Promise<number> {
  const error = await rejectsWithCode(() => start({ ...input, work: { kind: 'message', content: 'y'.repeat(LIMIT) } }), 'RUN_INVALID_INPUT', 'a message of the whole limit')
  return (error.details?.bytes as number) - LIMIT
}

test(
  "a message over maxInputBytes is refused, RUN_INVALID_INPUT naming work.content, the input's size and the limit, and nothing is written; one that fits to the byte runs",
  engineTest([answer.text('fits')], { engine: { maxInputBytes: LIMIT } }, async (h) => {
    const besides = await sizeBesidesContent((input) => h.start(input), h.input('probe'))
    assert.ok(besides > 0 && besides < 200, `the configuration and the model's name count too (${besides} bytes)`)
    const room = LIMIT - besides
    const over = await refusedWithoutWriting(h.log, () => h.start(h.input('over', { content: 'y'.repeat(room + 1) })), 'RUN_INVALID_INPUT', 'one byte over')
    assert.equal(over.details, { fields: ['work.content'], field: 'work.content', bytes: LIMIT + 1, limit: LIMIT })
    assert.match(over.message, `work.content: the run's input is 1,001 bytes as its invocation.opened would record it (work.content ${(room + 1).toLocaleString('en-US')}, configuration `)
    assert.match(over.message, "over the engine's limit of 1,000 bytes (maxInputBytes)")
    assert.equal(await h.log.runs('session-over'), [], 'no run of the session')
    // Counted in UTF-8 bytes, not characters: é is two.
    const accented = await refusedWithoutWriting(h.log, () => h.start(h.input('accented', { content: 'é'.repeat(Math.ceil((room + 1) / 2)) })), 'RUN_INVALID_INPUT', 'two bytes a character')
    assert.is(accented.details?.field, 'work.content')
    assert.equal(await h.run(h.input('fits', { content: 'y'.repeat(room) })), { status: 'completed' })
    const [opened] = await factsOf(h.log, 'invocation-fits')
    assert.is(opened?.type === 'invocation.opened' && opened.input.kind === 'message' && opened.input.content.length, room, 'recorded whole')
  }),
)

test(
  'the input is counted together: instructions, provider options and the message; the largest part is named',
  engineTest([], { engine: { maxInputBytes: LIMIT } }, async (h) => {
    const half = 'i'.repeat(LIMIT / 2)
    const instructions = await refusedWithoutWriting(h.log, () => h.start({ ...h.input('instructions', { content: half.slice(0, 300) }), instructions: half + half }), 'RUN_INVALID_INPUT', 'long instructions')
    assert.equal([instructions.details?.fields, instructions.details?.limit], [['instructions'], LIMIT])
    const options = await refusedWithoutWriting(h.log, () => h.start({ ...h.input('options'), providerOptions: { metadata: { note: half + half } } }), 'RUN_INVALID_INPUT', 'large provider options')
    assert.is(options.details?.field, 'providerOptions')
    assert.ok((options.details?.bytes as number) > LIMIT)
    // Neither part over the limit alone: refused together, the larger named.
    const both = await refusedWithoutWriting(h.log, () => h.start({ ...h.input('both', { content: 'm'.repeat(LIMIT / 2) }), instructions: 'i'.repeat(LIMIT / 2 + 50) }), 'RUN_INVALID_INPUT', 'message and instructions together')
    assert.is(both.details?.field, 'instructions')
    assert.ok((both.details?.bytes as number) > LIMIT + 50)
  }),
)

test(
  'the default is 4 MiB: a message over it is refused with limit 4,194,304, nothing written',
  engineTest([], {}, async (h) => {
    const error = await refusedWithoutWriting(h.log, () => h.start(h.input('large', { content: 'y'.repeat(MiB4 + 1) })), 'RUN_INVALID_INPUT', 'a message of 4 MiB and a byte')
    assert.is(error.details?.limit, MiB4)
    assert.is(error.details?.field, 'work.content')
    assert.ok((error.details?.bytes as number) > MiB4 + 1)
  }),
)

test(
  'a message is measured before it is copied, and the copy again: a getter that gives the check a short text and the copy a long one is refused too',
  engineTest([], { engine: { maxInputBytes: LIMIT } }, async (h) => {
    // How often start() reads the message up to and including its copy: probed with an input refused after the copy
    // (a tool that needs approval, without onApproval to ask).
    let probed = 0
    const probe = {
      kind: 'message' as const,
      get content() {
        probed += 1
        return 'short'
      },
    }
    const gated: ToolDefinition = { name: 'gated', needsApproval: true, execute: () => 'ran' }
    const after = await refusedWithoutWriting(h.log, () => h.start({ ...h.input('probe', { tools: [gated] }), work: probe }), 'RUN_INVALID_INPUT', 'refused after the copy')
    assert.equal(after.details?.fields, ['options.onApproval'])
    // Short on every read but the copy's (the last): the copy, which is what would be recorded, is measured.
    let reads = 0
    const work = {
      kind: 'message' as const,
      get content() {
        reads += 1
        return reads < probed ? 'short' : 'y'.repeat(LIMIT * 2)
      },
    }
    const error = await refusedWithoutWriting(h.log, () => h.start({ ...h.input('getter'), work }), 'RUN_INVALID_INPUT', 'a getter that grows')
    assert.equal([error.details?.field, error.details?.limit], ['work.content', LIMIT])
    assert.is(reads, probed, 'refused once the copy had read it, before anything else read it')
    // And the input as given is measured before the copy: a configuration the copy cannot make (a proxy) is not
    // reached when the message is too long.
    const unclonable = { ...h.input('early', { content: 'y'.repeat(LIMIT * 2) }), configuration: new Proxy({ cwd: '/workspace/project' }, {}) }
    const early = await refusedWithoutWriting(h.log, () => h.start(unclonable), 'RUN_INVALID_INPUT', 'measured before the copy')
    assert.equal([early.details?.field, early.details?.limit], ['work.content', LIMIT])
    const copyFails = await refusedWithoutWriting(h.log, () => h.start({ ...unclonable, work: { kind: 'message', content: 'short' } }), 'RUN_INVALID_INPUT', 'the copy fails')
    assert.match(copyFails.message, 'could not be copied')
  }),
)

test(
  "continuations, handoff successors and child runs are held to it: each refused, nothing written; a child's refusal is its starting tool's failure",
  engineTest([answer.text('first'), answer.toolCalls([{ id: 'c1', name: 'delegate', arguments: {} }]), answer.text('the writer could not start')], { engine: { maxInputBytes: LIMIT } }, async (h) => {
    const long = 'y'.repeat(LIMIT + 1)
    assert.equal(await h.run(h.input('first')), { status: 'completed' })
    const source = (await h.log.runSource('session-first', 'run-first'))?.boundary
    assert.ok(source)
    const next: RunInput = { ...h.input('next', { session: 'session-first' }), work: { kind: 'continuation', source, content: long } }
    const continued = await refusedWithoutWriting(h.log, () => h.start(next), 'RUN_INVALID_INPUT', 'a long continuation')
    assert.equal(continued.details?.fields, ['work.content'])

    const sealed = await sealAtFirstSafePoint(h, h.input('sealed'), 'successor')
    const successor = successorInput(sealed)
    const handoff = await refusedWithoutWriting(h.log, () => h.start({ ...successor, work: { ...successor.work, content: long } as RunInput['work'] }), 'RUN_INVALID_INPUT', "a successor's long message")
    assert.equal(handoff.details?.fields, ['work.content'])
    // The turn is still the successor's to take, with a message that fits.
    await h.start(successor).then((running) => running.cancel('done with the test'))

    let childError: unknown
    const delegate: ToolDefinition = {
      name: 'delegate',
      execute: async (_input, context) => {
        try {
          return await h.engine.start({ ...childRunFor(context, 'writer'), provider: sealed.input.provider, configuration: sealed.input.configuration, tools: [], work: { kind: 'message', content: long } })
        } catch (error) {
          childError = error
          throw error
        }
      },
    }
    assert.equal(await h.run(h.input('parent', { tools: [delegate] })), { status: 'completed' })
    assert.is((childError as { code?: string }).code, 'RUN_INVALID_INPUT')
    const settled = only(await factsOf(h.log, 'invocation-parent'), 'tool.settled')[0]
    assert.match(settled?.outcome.status === 'failed' ? settled.outcome.message : '', 'maxInputBytes')
    assert.equal(await h.log.runs('invocation-parent.step-1.0.writer'), [], 'the child was never written')
  }),
)

test('maxInputBytes that is not a whole number of bytes from 1 to 268,435,456 is ENGINE_INVALID_OPTIONS naming it; a misspelling is told the option meant', async () => {
  await engineTest([], {}, async (h) => {
    for (const bad of [0, -1, 1.5, 256 * 1024 * 1024 + 1, Number.NaN, '4096', null]) {
      const error = await rejectsWithCode(async () => new Engine({ log: h.log, maxInputBytes: bad as number }), 'ENGINE_INVALID_OPTIONS', `maxInputBytes ${String(bad)}`)
      assert.equal(error.details, { field: 'maxInputBytes' })
      assert.match(error.message, 'maxInputBytes must be a whole number of bytes from 1 to 268,435,456')
    }
    const misspelt = await rejectsWithCode(async () => new Engine({ log: h.log, maxInputByte: 10 } as never), 'ENGINE_INVALID_OPTIONS', 'maxInputByte')
    assert.match(misspelt.message, 'did you mean maxInputBytes?')
    // The largest and the smallest are taken.
    for (const good of [1, 256 * 1024 * 1024]) new Engine({ log: h.log, model: new ModelExecutor(), maxInputBytes: good })
  })()
})

test.run()
