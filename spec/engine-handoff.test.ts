/**
 * The handoff (DESIGN §6): reservations and holds on a running invocation, and successor
 * admission — every refusal with its code, nothing written.
 */
import { getEventListeners } from 'node:events'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type ExecutionSettings, type Fact, type HandoffIntent, type HandoffPause, type RunInput, type RuntimeEvent, type RunningInvocation, answerOf, catalogOf, intentFor, successorOf, transcriptOf } from '../index.js'
import { summarizeFact } from '../store/fact-summary.js'
import { keyFields, payloads } from '../inspector/page/format.js'
import { ID_PATTERN } from '../facts/schema.js'
import { answer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { runScript } from './support/faults-process.js'
import { assertDetailsFit } from './support/error-details.js'
import {
  assertFoldMatches,
  type EngineHarness,
  type SealedRun,
  CWD,
  countingTool,
  engineTest,
  factsOf,
  filesHolding,
  messagesOf,
  intentOf,
  lastFactOf,
  only,
  refusedWithoutWriting,
  sealAtFirstSafePoint,
  stillPending,
  successorInput,
  typesOf,
} from './support/engine-fixtures.js'

test(
  'HANDOFF_MISMATCH for each setting, another successor, or a pause that is not the sealed one; HANDOFF_CLAIMED for a second successor',
  engineTest([answer.text('successor done', { hold: true })], {}, async (h) => {
    const paused = h.input('paused', { session: 'shared' })
    paused.mainOutputLimit = 120
    paused.providerOptions = { temperature: 0, metadata: { tier: 'a' } }
    const sealed = await sealAtFirstSafePoint(h, paused, 'successor')
    assert.is(sealed.pause.remainingSteps, paused.maxSteps)
    assert.equal(sealed.pause.execution.mainOutputLimit, 120)
    assert.equal(successorInput(sealed).invocation, successorOf(sealed.pause.intent, sealed.source.invocation))
    const differ: { what: string; change: (input: RunInput) => void }[] = [
      { what: 'no output limit', change: (i) => delete i.mainOutputLimit },
      { what: 'another output limit', change: (i) => (i.mainOutputLimit = 121) },
      { what: 'other provider options', change: (i) => (i.providerOptions = { temperature: 0, metadata: { tier: 'b' } }) },
      { what: 'no provider options', change: (i) => delete i.providerOptions },
      { what: 'another model', change: (i) => (i.provider = { ...i.provider, model: 'other-model' }) },
      { what: 'another cwd', change: (i) => (i.configuration = { cwd: '/workspace/other' }) },
      { what: 'no tools', change: (i) => (i.tools = []) },
      { what: 'a tool with another description (same names)', change: (i) => (i.tools = [{ ...countingTool('echo'), description: 'changed' }]) },
      { what: 'another successor invocation id', change: (i) => (i.invocation = { ...i.invocation, invocationId: 'invocation-other' }) },
      { what: 'another successor run id', change: (i) => (i.invocation = { ...i.invocation, runId: 'run-other' }) },
      { what: 'another turn', change: (i) => (i.invocation = { ...i.invocation, turnId: 'turn-other' }) },
      {
        what: 'a pause with other remaining steps',
        change: (i) => {
          if (i.work.kind === 'handoff') i.work.pause.remainingSteps += 1
        },
      },
      {
        what: 'a pause with another claim',
        change: (i) => {
          if (i.work.kind === 'handoff') i.work.pause.intent.claimId = 'claim-forged'
        },
      },
      {
        what: 'a pause whose execution was rewritten to match',
        change: (i) => {
          i.mainOutputLimit = 500
          if (i.work.kind === 'handoff') i.work.pause.execution.mainOutputLimit = 500
        },
      },
      {
        what: 'a forged source digest',
        change: (i) => {
          if (i.work.kind === 'handoff') i.work.source.digest = `sha256:${'f'.repeat(64)}`
        },
      },
      {
        what: 'an earlier source high-water',
        change: (i) => {
          if (i.work.kind === 'handoff') i.work.source.highWater -= 1
        },
      },
      {
        what: 'the source and the successor moved to another turn together',
        change: (i) => {
          if (i.work.kind !== 'handoff') return
          i.work.source.invocation = { ...i.work.source.invocation, turnId: 'turn-elsewhere' }
          i.invocation = successorOf(i.work.pause.intent, i.work.source.invocation)
        },
      },
    ]
    for (const { what, change } of differ) {
      const candidate = successorInput(sealed)
      change(candidate)
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(candidate), 'HANDOFF_MISMATCH', what)
      assert.type(error.details?.field, 'string', `${what}: details.field names what differs`)
      if (what === 'another model') {
        assert.equal([error.details?.sealed, error.details?.given], [sealed.pause.execution.model, 'other-model'])
        assert.match(error.message, new RegExp(`setting model does not match the sealed pause \\(sealed "${sealed.pause.execution.model}", given "other-model"\\); run the successor`))
      }
      if (what === 'another output limit') assert.equal([error.details?.sealed, error.details?.given], [120, 121])
      if (what === 'a tool with another description (same names)') {
        assert.match(error.message, /the same tools, but a description or input schema changed \(tool "echo"\); run the successor with the sealed settings, or give its turn up by admitting it with an already aborted signal$/)
        assert.equal(error.details?.tools, { added: [], removed: [], changed: ['echo'] })
      }
      if (what === 'no tools') {
        assert.match(error.message, /the successor's execution setting tools does not match the sealed pause \(sealed \["[^"]+"[^)]*\], given \[\]\): tool "echo" removed; run the successor/)
        assert.equal(error.details?.tools, { added: [], removed: ['echo'], changed: [] })
      }
    }
    // A deploy that changed several settings learns of every one at once, the first with both values.
    const redeployed = successorInput(sealed)
    redeployed.provider = { ...redeployed.provider, model: 'other-model' }
    redeployed.instructions = 'new instructions'
    redeployed.tools = []
    const several = await refusedWithoutWriting(h.log, () => h.engine.start(redeployed), 'HANDOFF_MISMATCH', 'three settings changed')
    assert.is(several.details?.field, 'model')
    assert.equal(several.details?.fields, ['model', 'tools', 'instructions'])
    assert.match(several.message, /\(sealed "[^"]+", given "other-model"\); tools \(tool "echo" removed\), instructions differ too; run the successor/)
    assert.equal(several.details?.tools, { added: [], removed: ['echo'], changed: [] }, 'the tools by name, whatever setting comes first')
    assert.is(h.server.requests.length, 0, 'no refused successor reached the model')

    const successor = await h.start(successorInput(sealed))
    await h.server.seen(0)
    const claimed = await refusedWithoutWriting(h.log, () => h.engine.start(successorInput(sealed)), 'HANDOFF_CLAIMED', 'a second successor while the first runs')
    assert.equal(claimed.details, { claimId: sealed.pause.intent.claimId, claimedBy: successor.invocation.invocationId }, 'details name the claim and its user')
    assert.match(claimed.message, /was already used by [^ ]+, which is still open: running, or left open by a crash until recoverInvocations closes it$/)
    h.server.release(0)
    assert.equal(await successor.wait(), { status: 'completed' })
    const again = await refusedWithoutWriting(h.log, () => h.engine.start(successorInput(sealed)), 'HANDOFF_CLAIMED', 'a second successor')
    // Once it has ended: how to go on from it, since a successor runs once.
    assert.match(
      again.message,
      new RegExp(`which ended completed: to go on from it, continue its run ${successor.invocation.runId} \\(work kind continuation, from log\\.runSource's boundary for it\\), which gets maxSteps anew, not the seal's remainingSteps$`),
    )
    assert.is(h.server.requests.length, 1)
  }),
)

test(
  'runSource and wait() hand out copies: changing the pause or boundary they gave forges nothing',
  engineTest([answer.text('successor done')], {}, async (h) => {
    const paused = h.input('copied')
    const sealed = await sealAtFirstSafePoint(h, paused, 'successor')
    const { sessionId, runId } = paused.invocation
    const given = await h.log.runSource(sessionId, runId)
    assert.ok(given?.pause)
    assert.equal(given.pause, sealed.pause)
    const untouched = structuredClone(given)
    given.pause.remainingSteps += 5
    given.pause.execution.model = 'forged-model'
    given.boundary.invocation.turnId = 'turn-forged'
    assert.equal(await h.log.runSource(sessionId, runId), untouched, 'the log still reports what it sealed')
    const outcome = await sealed.running.wait()
    if (outcome.status === 'handoff_paused') outcome.pause.remainingSteps += 5
    assert.equal(await sealed.running.wait(), { status: 'handoff_paused', pause: untouched.pause }, 'each wait() gets its own outcome')
    const forged = successorInput({ ...sealed, pause: given.pause })
    forged.provider = { ...forged.provider, model: 'forged-model' }
    await refusedWithoutWriting(h.log, () => h.engine.start(forged), 'HANDOFF_MISMATCH', 'a successor with the changed pause')
    const successor = successorInput({ ...sealed, source: untouched.boundary, pause: untouched.pause as NonNullable<typeof untouched.pause> })
    assert.equal(await h.run(successor), { status: 'completed' })
  }),
)

test(
  'a message run under an invocation id a pending seal reserved is RUN_INVALID_INPUT (nothing written); the successor still runs under it',
  engineTest([answer.text('successor done')], {}, async (h) => {
    const sealed = await sealAtFirstSafePoint(h, h.input('reserving'), 'reserved')
    const squatter = h.input('squatter', { session: 'elsewhere' })
    squatter.invocation = { ...squatter.invocation, invocationId: sealed.pause.intent.successorInvocationId }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start(squatter), 'RUN_INVALID_INPUT', 'a run under a reserved id')
    assert.equal(error.details?.fields, ['invocation.invocationId'])
    assert.match(error.message, /reserved for the successor of invocation-reserving/)
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' })
  }),
)

test(
  'a paused turn blocks the session with RUN_BUSY naming the way out; its successor admitted with an aborted signal gives the turn up',
  engineTest([answer.text('after')], {}, async (h) => {
    const sealed = await sealAtFirstSafePoint(h, h.input('parked', { session: 'parked' }), 'parked-successor')
    const next = h.input('next', { session: 'parked' })
    const busy = await refusedWithoutWriting(h.log, () => h.engine.start(next), 'RUN_BUSY', 'a message while the turn is paused')
    assert.is(busy.details?.reason, 'paused')
    assert.match(busy.message, /admit its successor .*with an aborted signal/)
    const controller = new AbortController()
    controller.abort('given up')
    const running = await h.start(successorInput(sealed), { signal: controller.signal })
    assert.equal(await running.wait(), { status: 'cancelled', source: 'given up' })
    assert.is(h.server.requests.length, 0, 'the successor asked the model nothing')
    assert.equal(await typesOf(h.log, sealed.pause.intent.successorInvocationId), ['invocation.opened', 'invocation.ended'])
    // Giving up uses the claim: no other successor can be admitted after it.
    await refusedWithoutWriting(h.log, () => h.engine.start(successorInput(sealed)), 'HANDOFF_CLAIMED', 'a successor after the turn was given up')
    assert.equal(await h.run(next), { status: 'completed' })
  }),
)

test(
  'a paused turn can be given up after a deploy changed its settings: the aborted successor records the seal\'s, a live one is still refused',
  engineTest([answer.text('after the deploy')], {}, async (h) => {
    const sealed = await sealAtFirstSafePoint(h, h.input('deployed', { session: 'deployed' }), 'deployed-successor')
    // The next build: another description for the same tool, another model, another cwd.
    const redeployed = successorInput(sealed)
    // The new build's echo also needs approval: a successor given up runs no tool, so it needs no approver.
    redeployed.tools = [{ ...countingTool('echo'), description: 'echo, described anew', needsApproval: true }]
    redeployed.provider = { ...redeployed.provider, model: 'next-model' }
    redeployed.configuration = { cwd: '/workspace/next' }
    await refusedWithoutWriting(h.log, () => h.engine.start(redeployed, { onApproval: () => ({ approved: true }) }), 'HANDOFF_MISMATCH', 'a live successor on the new build')
    const controller = new AbortController()
    controller.abort('given up after the deploy')
    // Giving up still needs the seal itself: a forged pause or another successor id is refused, aborted signal or not.
    const forged = successorInput(sealed)
    if (forged.work.kind === 'handoff') forged.work.pause.remainingSteps += 1
    await refusedWithoutWriting(h.log, () => h.engine.start(forged, { signal: controller.signal }), 'HANDOFF_MISMATCH', 'a forged pause with an aborted signal')
    const elsewhere = { ...redeployed, invocation: { ...redeployed.invocation, invocationId: 'invocation-elsewhere' } }
    await refusedWithoutWriting(h.log, () => h.engine.start(elsewhere, { signal: controller.signal }), 'HANDOFF_MISMATCH', 'another successor id with an aborted signal')
    const running = await h.start(redeployed, { signal: controller.signal })
    assert.equal(await running.wait(), { status: 'cancelled', source: 'given up after the deploy' })
    assert.is(h.server.requests.length, 0, 'the successor asked the model nothing')
    const facts = await factsOf(h.log, sealed.pause.intent.successorInvocationId)
    assert.equal(facts.map((fact) => fact.type), ['invocation.opened', 'invocation.ended'])
    const [opened] = only(facts, 'invocation.opened')
    assert.equal(opened?.execution, sealed.pause.execution, 'the given-up successor records the seal\'s settings, not the new build\'s')
    assert.is(opened?.configuration.cwd, sealed.pause.execution.cwd)
    // The claim is used and the session is free for the new build.
    await refusedWithoutWriting(h.log, () => h.engine.start(successorInput(sealed)), 'HANDOFF_CLAIMED', 'the old successor after the turn was given up')
    const next = h.input('after-deploy', { session: 'deployed' })
    next.provider = { ...next.provider, model: 'next-model' }
    assert.equal(await h.run(next), { status: 'completed' })
  }),
)

test(
  "a deploy while turns are paused, the README's two ways through: run the successor with the catalog its seal names, kept by digest; or give the turn up and continue it under the new tools",
  engineTest([answer.text('kept catalog'), answer.text('new tools')], {}, async (h) => {
    const v1 = () => [countingTool('echo')]
    const v2 = () => [{ ...countingTool('echo'), description: 'echo, described anew', inputSchema: { type: 'object', properties: { value: { type: 'number' }, cc: { type: 'string' } } } }]
    // The new build keeps the catalogs of earlier builds by their digest.
    const catalogs = new Map([v1(), v2()].map((tools) => [catalogOf(tools).catalogDigest, tools]))
    const first = await sealAtFirstSafePoint(h, { ...h.input('kept', { session: 'kept' }), tools: v1() }, 'kept-successor')
    const second = await sealAtFirstSafePoint(h, { ...h.input('given', { session: 'given' }), tools: v1() }, 'given-successor')
    const onNewBuild = { ...successorInput(first), tools: v2() }
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(onNewBuild), 'HANDOFF_MISMATCH', 'the successor under the new tools')
    assert.is(refused.details?.field, 'tools')
    assert.match(refused.message, /the same tools, but a description or input schema changed \(tool "echo"\)/)
    // One way: the catalog the seal names.
    const sealedTools = catalogs.get(first.pause.execution.tools.catalogDigest)
    assert.ok(sealedTools, "the seal's catalog is among the kept ones")
    assert.equal(await h.run({ ...successorInput(first), tools: sealedTools }), { status: 'completed' })
    // The other: the turn given up, then its run continued under the new tools, which the model is shown.
    const controller = new AbortController()
    controller.abort('deployed')
    assert.equal(await h.run({ ...successorInput(second), tools: v2() }, { signal: controller.signal }), { status: 'cancelled', source: 'deployed' })
    const end = (await h.log.runSource('given', second.pause.intent.successorRunId))?.boundary
    assert.ok(end)
    const continued: RunInput = { ...h.input('given-2', { session: 'given' }), tools: v2(), work: { kind: 'continuation', source: end } }
    assert.equal(await h.run(continued), { status: 'completed' })
    const request = h.server.requests.at(-1)?.body as { tools: { function: { description?: string } }[]; messages: { role: string; content: string | null }[] }
    assert.is(request.tools[0]?.function.description, 'echo, described anew')
    assert.equal(request.messages.filter((m) => m.role === 'user').map((m) => m.content), ['question given'], "the turn's question, replayed from the sealed run")
  }),
)

/** A seal written into the log as `execution` says (direct appends, as a release with that fact shape wrote one), and the boundary and pause its successor needs. */
async function appendedSeal(log: EventLog, name: string, execution: ExecutionSettings): Promise<{ successor: (tools: RunInput['tools'], baseUrl: string) => RunInput }> {
  const source = { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` }
  const intent: HandoffIntent = { handoffId: 'review', hostEpoch: 'host-a', rootRunId: source.runId, successorRunId: `run-${name}.review`, successorInvocationId: `invocation-${name}.review`, claimId: `claim-${name}` }
  const pause: HandoffPause = { intent, remainingSteps: 2, execution }
  const facts: Fact[] = [
    { type: 'invocation.opened', input: { kind: 'message', content: `question ${name}` }, configuration: { cwd: execution.cwd }, execution },
    { type: 'hold.entered', handoffId: 'review' },
    { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause } },
  ]
  await log.appendAll(facts.map((fact, n) => ({ id: `${name}/${n + 1}`, recordedAt: 1_700_000_000_000 + n, invocation: source, fact }) as RuntimeEvent))
  const sealed = await log.runSource(source.sessionId, source.runId)
  assert.ok(sealed?.pause, 'the appended run is sealed')
  return {
    successor: (tools, baseUrl) => ({
      invocation: successorOf(intent, source),
      provider: { kind: 'openai-chat', baseUrl, model: 'scripted' },
      configuration: { cwd: execution.cwd },
      tools,
      work: { kind: 'handoff', source: sealed.boundary, pause: sealed.pause! },
    }),
  }
}

test(
  'a successor refused under a changed catalog is told which tools changed, were added or were removed (message and details.tools), by the per-tool digests its seal records',
  engineTest([answer.text('under the sealed catalog')], {}, async (h) => {
    const v1 = () => [countingTool('lookup_order'), countingTool('issue_refund')]
    const sealed = await sealAtFirstSafePoint(h, { ...h.input('catalog', { session: 'catalog' }), tools: v1() }, 'catalog-successor')
    const tools = sealed.pause.execution.tools
    assert.equal(tools.names, ['lookup_order', 'issue_refund'])
    assert.equal(tools.digests, catalogOf(v1()).digests, 'one digest per tool, in names order, as catalogOf gives them')
    assert.is(tools.digests?.length, 2)
    assert.is.not(tools.digests?.[0], tools.digests?.[1])
    const refusedUnder = (what: string, next: RunInput['tools']) => refusedWithoutWriting(h.log, () => h.engine.start({ ...successorInput(sealed), tools: next }), 'HANDOFF_MISMATCH', what)
    const redescribed = { ...countingTool('issue_refund'), description: 'refund an order, in full or in part' }
    const reshaped = { ...countingTool('lookup_order'), inputSchema: { type: 'object', properties: { value: { type: 'number' }, email: { type: 'string' } } } }

    const described = await refusedUnder('a changed description', [countingTool('lookup_order'), redescribed])
    assert.is(described.details?.field, 'tools')
    assert.equal(described.details?.tools, { added: [], removed: [], changed: ['issue_refund'] })
    assert.match(described.message, /the same tools, but a description or input schema changed \(tool "issue_refund"\); run the successor/)
    assert.equal(described.details?.sealed, tools, 'the sealed catalog, its digests included')
    assert.equal(described.details?.given, catalogOf([countingTool('lookup_order'), redescribed]))

    const schema = await refusedUnder('a changed input schema', [reshaped, countingTool('issue_refund')])
    assert.equal(schema.details?.tools, { added: [], removed: [], changed: ['lookup_order'] })
    assert.match(schema.message, /the same tools, but a description or input schema changed \(tool "lookup_order"\); run the successor/)

    const both = await refusedUnder('both changed', [reshaped, redescribed])
    assert.equal(both.details?.tools, { added: [], removed: [], changed: ['lookup_order', 'issue_refund'] })
    assert.match(both.message, /changed \(tools "lookup_order", "issue_refund"\); run the successor/)

    const swapped = await refusedUnder('a tool added, another removed', [countingTool('issue_refund'), countingTool('notify_customer')])
    assert.equal(swapped.details?.tools, { added: ['notify_customer'], removed: ['lookup_order'], changed: [] })
    assert.match(
      swapped.message,
      /setting tools does not match the sealed pause \(sealed \["lookup_order","issue_refund"\], given \["issue_refund","notify_customer"\]\): tool "notify_customer" added, tool "lookup_order" removed; run the successor/,
    )

    const grown = await refusedUnder('a tool added, another changed', [countingTool('lookup_order'), redescribed, countingTool('notify_customer')])
    assert.equal(grown.details?.tools, { added: ['notify_customer'], removed: [], changed: ['issue_refund'] })
    assert.match(grown.message, /: tool "notify_customer" added, tool "issue_refund" changed \(description or input schema\); run the successor/)

    // Many tools: the message names the first five of a kind and counts the rest; details.tools has them all.
    const many = Array.from({ length: 12 }, (_, index) => countingTool(`extra_tool_${index}`))
    const crowded = await refusedUnder('twelve tools added', [...v1(), ...many])
    assert.equal(crowded.details?.tools, { added: many.map((tool) => tool.name), removed: [], changed: [] })
    assert.match(crowded.message, /: tools "extra_tool_0", "extra_tool_1", "extra_tool_2", "extra_tool_3", "extra_tool_4" and 7 more added; run the successor/)

    const reordered = await refusedUnder('the same tools in another order', [countingTool('issue_refund'), countingTool('lookup_order')])
    assert.equal(reordered.details?.tools, { added: [], removed: [], changed: [] })
    assert.match(reordered.message, /given \["issue_refund","lookup_order"\]\): the same tools in another order; run the successor/)

    // With another setting first, the tools are named among the others.
    const several = successorInput(sealed)
    several.provider = { ...several.provider, model: 'next-model' }
    several.tools = [countingTool('lookup_order'), redescribed]
    const first = await refusedWithoutWriting(h.log, () => h.engine.start(several), 'HANDOFF_MISMATCH', 'the model and a tool')
    assert.equal([first.details?.field, first.details?.fields, first.details?.tools], ['model', ['model', 'tools'], { added: [], removed: [], changed: ['issue_refund'] }])
    assert.match(first.message, /; tools \(tool "issue_refund" changed \(description or input schema\)\) differs too; run the successor/)

    assert.is(h.server.requests.length, 0, 'no refused successor reached the model')
    assert.equal(await h.run(successorInput(sealed)), { status: 'completed' }, 'the sealed catalog admits its successor')
  }),
)

test(
  "the per-tool digests are compared with the rest: a seal whose catalog digest is the successor's but whose tools' digests are not refuses it, naming the tool",
  engineTest([], {}, async (h) => {
    const v1 = [countingTool('lookup_order'), countingTool('issue_refund')]
    const v2 = [countingTool('lookup_order'), { ...countingTool('issue_refund'), description: 'refund an order, in full or in part' }]
    // A forged seal: the new build's catalog digest over the old build's tools.
    const execution: ExecutionSettings = { model: 'scripted', providerOptions: {}, cwd: CWD, tools: { ...catalogOf(v1), catalogDigest: catalogOf(v2).catalogDigest } }
    const { successor } = await appendedSeal(h.log, 'forged', execution)
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(successor(v2, h.server.baseUrl)), 'HANDOFF_MISMATCH', 'the new build under a forged catalog digest')
    assert.is(refused.details?.field, 'tools')
    assert.equal(refused.details?.tools, { added: [], removed: [], changed: ['issue_refund'] })
    // The tools it does hold digests of: no tool changed, and the message says so.
    const old = await refusedWithoutWriting(h.log, () => h.engine.start(successor(v1, h.server.baseUrl)), 'HANDOFF_MISMATCH', 'the old build under a forged catalog digest')
    assert.equal(old.details?.tools, { added: [], removed: [], changed: [] })
    assert.match(old.message, /no tool changed, but the seal's catalog digest is not its tools'; run the successor/)
    assert.is(h.server.requests.length, 0)
  }),
)

test(
  'a seal without per-tool digests (written by the release before) admits its successor under its catalog and is refused as before under another, naming no tool, where a seal made now names it',
  engineTest([answer.text('old seal, same catalog')], {}, async (h) => {
    const v1 = () => [countingTool('lookup_order'), countingTool('issue_refund')]
    const v2 = () => [countingTool('lookup_order'), { ...countingTool('issue_refund'), description: 'refund an order, in full or in part' }]
    const { catalogDigest, names } = catalogOf(v1())
    const execution: ExecutionSettings = { model: 'scripted', providerOptions: {}, cwd: CWD, tools: { catalogDigest, names } }
    const oldSeal = await appendedSeal(h.log, 'old', execution)
    const changed = await refusedWithoutWriting(h.log, () => h.engine.start(oldSeal.successor(v2(), h.server.baseUrl)), 'HANDOFF_MISMATCH', 'an old seal, a changed description')
    assert.is(changed.details?.field, 'tools')
    assert.is(changed.details?.tools, undefined, 'a seal without per-tool digests cannot name the tool')
    assert.equal(changed.details?.sealed, { catalogDigest, names })
    assert.equal(changed.details?.given, { catalogDigest: catalogOf(v2()).catalogDigest, names }, 'the catalog as the seal recorded one, without per-tool digests')
    assert.match(changed.message, /: the same tools, but a description or input schema changed \(which cannot be told: the seal, made by factstate 0\.1\.0, records no digest per tool\); run the successor with the sealed settings/)
    const fewer = await refusedWithoutWriting(h.log, () => h.engine.start(oldSeal.successor([countingTool('lookup_order')], h.server.baseUrl)), 'HANDOFF_MISMATCH', 'an old seal, a tool removed')
    assert.is(fewer.details?.tools, undefined)
    assert.match(fewer.message, /setting tools does not match the sealed pause \(sealed \["lookup_order","issue_refund"\], given \["lookup_order"\]\); run the successor/)
    // The same deploy against a seal made now names the tool.
    const newSeal = await sealAtFirstSafePoint(h, { ...h.input('new', { session: 'new' }), tools: v1() }, 'new-successor')
    const named = await refusedWithoutWriting(h.log, () => h.engine.start({ ...successorInput(newSeal), tools: v2() }), 'HANDOFF_MISMATCH', 'a new seal, a changed description')
    assert.equal(named.details?.tools, { added: [], removed: [], changed: ['issue_refund'] })
    // The old seal's catalog admits its successor, which records the seal's settings as sealed.
    const successor = oldSeal.successor(v1(), h.server.baseUrl)
    assert.equal(await h.run(successor), { status: 'completed' })
    const [opened] = only(await factsOf(h.log, successor.invocation.invocationId), 'invocation.opened')
    assert.equal(opened?.execution, execution)
    assert.is(h.server.requests.length, 1)
  }),
)

test(
  'a held pause that was released, or a run that ended otherwise, authorizes no successor',
  engineTest([answer.text('done')], {}, async (h) => {
    const input = h.input('released')
    const running = await h.start(input)
    const held = await running.handoff().reserve(intentOf('successor', 'run-released')).ready()
    const preview = held.preview()
    await held.release()
    assert.equal(await running.wait(), { status: 'completed' })
    const source = (await h.log.runSource(input.invocation.sessionId, input.invocation.runId))?.boundary
    assert.ok(source)
    const candidate = successorInput({ running, pause: preview, source, input })
    await refusedWithoutWriting(h.log, () => h.engine.start(candidate), 'HANDOFF_MISMATCH', 'a successor of a released hold')
  }),
)

test(
  'HANDOFF_BUSY, HANDOFF_CANCELLED, HANDOFF_NOT_HELD: one reservation at a time, a cancelled one lets the run pass',
  engineTest([answer.text('first', { hold: true })], {}, async (h) => {
    const running = await h.start(h.input('run'))
    await h.server.seen(0)
    const gate = running.handoff()
    const first = gate.reserve(intentOf('first', 'run-run'))
    assert.throws(
      () => gate.reserve(intentOf('second', 'run-run')),
      (error: { code: string; details?: unknown }) => (assertDetailsFit(error, 'a second reservation'), error.code === 'HANDOFF_BUSY'),
    )
    first.cancel()
    await rejectsWithCode(() => first.ready(), 'HANDOFF_CANCELLED', 'ready() after cancel()')
    const second = gate.reserve(intentOf('second', 'run-run'))
    second.cancel()
    second.cancel()
    await rejectsWithCode(() => second.ready(), 'HANDOFF_CANCELLED', 'ready() after two cancels')
    h.server.release(0)
    assert.equal(await running.wait(), { status: 'completed' })
    assert.equal(await typesOf(h.log, 'invocation-run'), ['invocation.opened', 'model.requested', 'model.completed', 'invocation.ended'], 'no hold fact')
    assert.throws(() => gate.reserve(intentOf('late', 'run-run')), (error: { code?: string }) => error.code === 'HANDOFF_UNAVAILABLE')
  }),
)

test(
  'a hold reserved before the first request is entered at the first safe point; release() twice is HANDOFF_NOT_HELD',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 1 } }]), answer.text('done')], {}, async (h) => {
    const echo = countingTool()
    const running = await h.start(h.input('early', { tools: [echo] }))
    const gate = running.handoff()
    const held = await gate.reserve(intentOf('early-successor', 'run-early')).ready()
    assert.equal(await typesOf(h.log, 'invocation-early'), ['invocation.opened', 'hold.entered'])
    assert.is(running.state(), 'held')
    await assertFoldMatches(h.log, running, 'while held')
    assert.is(h.server.requests.length, 0, 'no request while held')
    assert.is(held.preview().remainingSteps, 4)
    assert.throws(() => gate.reserve(intentOf('other', 'run-early')), (error: { code?: string }) => error.code === 'HANDOFF_BUSY')
    const releasing = held.release()
    await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'a release while the first is in progress')
    await releasing
    const again = await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'a second release')
    assert.match(again.message, /^HANDOFF_NOT_HELD: hold [^ ]+ is no longer held: it was released$/, again.message)
    await rejectsWithCode(() => held.commit(), 'HANDOFF_NOT_HELD', 'a commit after release')
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(echo.calls.length, 1)
    assert.equal(await typesOf(h.log, 'invocation-early'), [
      'invocation.opened',
      'hold.entered',
      'hold.released',
      'model.requested',
      'model.completed',
      'tool.dispatched',
      'tool.settled',
      'model.requested',
      'model.completed',
      'invocation.ended',
    ])
  }),
)

test(
  'a hold waits for the tools of the step to settle; ready() is refused when the run completes instead',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 7 } }], { hold: true }), answer.text('done', { hold: true })], {}, async (h) => {
    const echo = countingTool()
    const running = await h.start(h.input('waits', { tools: [echo] }))
    await h.server.seen(0)
    const ready = running.handoff().reserve(intentOf('mid', 'run-waits')).ready()
    assert.ok(await stillPending(ready, 30), 'not while the model request is in flight')
    h.server.release(0)
    const held = await ready
    assert.is(echo.calls.length, 1)
    assert.equal((await typesOf(h.log, 'invocation-waits')).slice(-2), ['tool.settled', 'hold.entered'])
    await assertFoldMatches(h.log, running, 'held after the tool settled')
    await held.release()
    await h.server.seen(1)
    const late = running.handoff().reserve(intentOf('late', 'run-waits')).ready()
    h.server.release(1)
    await rejectsWithCode(() => late, 'HANDOFF_UNAVAILABLE', 'a reservation when the run completes')
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(echo.calls.length, 1, 'rollback repeats no effect')
  }),
)

test(
  'cancelling while held ends the run cancelled; the hold can no longer be released or committed',
  engineTest([], {}, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('held'), { signal: controller.signal })
    const held = await running.handoff().reserve(intentOf('held-successor', 'run-held')).ready()
    controller.abort('operator')
    assert.equal(await running.wait(), { status: 'cancelled', source: 'operator' })
    const released = await rejectsWithCode(() => held.release(), 'HANDOFF_NOT_HELD', 'release after cancel')
    // Why it is no longer held, not only that it is not.
    assert.match(released.message, /^HANDOFF_NOT_HELD: hold [^ ]+ ended: the run was cancelled$/, released.message)
    await rejectsWithCode(() => held.commit(), 'HANDOFF_NOT_HELD', 'commit after cancel')
    assert.equal(await typesOf(h.log, 'invocation-held'), ['invocation.opened', 'hold.entered', 'invocation.ended'])
    assert.equal(await lastFactOf(h.log, 'invocation-held'), { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'operator' } })
    assert.is(h.server.requests.length, 0)
  }),
)

test(
  'commit seals exactly the preview; the successor gets the remaining steps and replays the transcript without executing',
  engineTest(
    [answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }], { hold: true }), answer.toolCalls([{ name: 'echo', arguments: { value: 4 } }]), answer.text('done')],
    {},
    async (h) => {
      const echo = countingTool()
      const input = h.input('source', { tools: [echo] })
      input.maxSteps = 3
      const running = await h.start(input)
      await h.server.seen(0)
      const ready = running.handoff().reserve(intentOf('successor', 'run-source')).ready()
      h.server.release(0)
      const held = await ready
      const preview = held.preview()
      assert.is(preview.remainingSteps, 2)
      assert.equal(await held.commit(), preview)
      assert.equal(await running.wait(), { status: 'handoff_paused', pause: preview })
      assert.equal(await lastFactOf(h.log, 'invocation-source'), { type: 'invocation.ended', outcome: { status: 'handoff_paused', pause: preview } })
      const source = (await h.log.runSource(input.invocation.sessionId, 'run-source'))?.boundary
      assert.ok(source)
      const successor = successorInput({ running, pause: preview, source, input })
      successor.maxSteps = 1 // ignored: the pause decides the budget
      assert.equal(await h.run(successor), { status: 'completed' })
      assert.is(echo.calls.length, 2)
      const messages = h.server.requests[2]?.body.messages as { role: string }[]
      assert.equal(
        messages.map((m) => m.role),
        ['user', 'assistant', 'tool', 'assistant', 'tool'],
      )
      const facts = await factsOf(h.log, 'invocation-successor')
      assert.is(facts.filter((f) => f.type === 'model.requested').length, 2, 'the successor used the two remaining steps')
    },
  ),
)

test(
  'holds taken and released many times leave no listener on the run\'s signal',
  engineTest([answer.text('done')], {}, async (h) => {
    const controller = new AbortController()
    const running = await h.start(h.input('cycles'), { signal: controller.signal })
    for (let cycle = 0; cycle < 12; cycle += 1) {
      const held = await running.handoff().reserve(intentOf(`cycle-${cycle}`, 'run-cycles')).ready()
      await held.release()
    }
    assert.equal(await running.wait(), { status: 'completed' })
    assert.is(only(await factsOf(h.log, 'invocation-cycles'), 'hold.released').length, 12)
    assert.is(getEventListeners(controller.signal, 'abort').length, 0, 'every listener was removed')
  }),
)

test(
  'intentFor makes the ids a seal reserves from the invocation id: two sessions with one run id hold and seal apart, and each successor runs',
  engineTest([answer.text('a done'), answer.text('b done')], {}, async (h) => {
    const sealed: { pause: HandoffPause; source: RunInput['invocation'] }[] = []
    for (const session of ['session-a', 'session-b']) {
      const input = h.input('same', { session })
      // The same run id in both sessions, as applications name runs; invocation ids are the log's.
      input.invocation = { sessionId: session, turnId: 'turn-1', runId: 'run-1', invocationId: `${session}-inv-1` }
      const running = await h.start(input)
      const pause = await (await running.handoff().reserve(intentFor(running.invocation, 'review')).ready()).commit()
      assert.equal(await running.wait(), { status: 'handoff_paused', pause })
      assert.equal(
        { ...pause.intent, hostEpoch: ID_PATTERN.test(pause.intent.hostEpoch) },
        { handoffId: 'review', hostEpoch: true, rootRunId: 'run-1', successorRunId: 'run-1.review', successorInvocationId: `${session}-inv-1.review`, claimId: `${session}-inv-1.review.claim` },
      )
      sealed.push({ pause, source: input.invocation })
    }
    for (const { pause, source } of sealed) {
      const found = await h.log.runSource(source.sessionId, source.runId)
      if (found?.pause === undefined) return assert.unreachable('sealed')
      assert.equal(found.pause, pause)
      const successor: RunInput = { ...h.input('successor', { session: source.sessionId }), invocation: successorOf(pause.intent, source), work: { kind: 'handoff', source: found.boundary, pause: found.pause } }
      assert.equal(await h.run(successor), { status: 'completed' })
    }
  }),
)

test('intentFor keeps every id an id: long ones are cut and told apart by a digest; what is not a run, an id or options is HANDOFF_MISMATCH', async () => {
  const long = 'r'.repeat(128)
  const run = { sessionId: 's', turnId: 't', runId: long, invocationId: `i${long.slice(1)}` }
  const a = intentFor(run, 'a', { hostEpoch: 'host-1', rootRunId: 'root' })
  const b = intentFor(run, 'b')
  for (const intent of [a, b]) for (const value of Object.values(intent)) assert.ok(ID_PATTERN.test(value), value)
  assert.is.not(a.successorRunId, b.successorRunId)
  assert.is.not(a.claimId, b.claimId)
  assert.equal([a.hostEpoch, a.rootRunId], ['host-1', 'root'])
  assert.equal(intentFor(run, 'a', { hostEpoch: 'host-1', rootRunId: 'root' }), a, 'the same ids each time')
  for (const [what, call, field] of [
    ['no run', () => intentFor(null as never, 'x'), 'run'],
    ['a run without its invocation id', () => intentFor({ sessionId: 's', turnId: 't', runId: 'r' } as never, 'x'), 'run'],
    ['a handoff id with a space', () => intentFor(run, 'a b'), 'handoffId'],
    ['options that are not an object', () => intentFor(run, 'x', 3 as never), 'options'],
    ['a hostEpoch that is no id', () => intentFor(run, 'x', { hostEpoch: '' }), 'options'],
  ] as const) {
    const error = await rejectsWithCode(async () => call(), 'HANDOFF_MISMATCH', what)
    assert.is((error.details as { field?: string }).field, field, what)
  }
})

test('intentFor never gives two holds one id: a dot in the handoff id could make run a.b, hold c and run a, hold b.c alike, so it is refused', async () => {
  const dotted = (id: string) => ({ sessionId: 's', turnId: 't', runId: id, invocationId: id })
  // Told apart as long as no handoff id has a dot: the successor's ids end with the handoff id.
  const apart = [intentFor(dotted('a.b'), 'c'), intentFor(dotted('a'), 'b'), intentFor(dotted('a.b.c'), 'claim')]
  for (const field of ['successorRunId', 'successorInvocationId', 'claimId'] as const) {
    assert.is(new Set(apart.map((intent) => intent[field])).size, apart.length, field)
  }
  const error = await rejectsWithCode(async () => intentFor(dotted('a'), 'b.c'), 'HANDOFF_MISMATCH', 'a handoff id with a dot')
  assert.is((error.details as { field?: string }).field, 'handoffId')
  assert.match(error.message, /without a dot/)
})

/** What a reviewer decided while the turn was paused: the successor's message. */
const DECISION = 'carol@acme approved the refund of O-3 (ticket 77)'
/** What the sealed run's tool answered: the last message of the sealed transcript. */
const SENT_FOR_REVIEW = 'sent to a reviewer: the refund can be issued once approved'

/**
 * The reviewer pattern: a run whose echo tool sends its call for review and reserves a hold on its
 * own run, sealed at the safe point after the tool settled (request 0 asked for the call).
 */
async function sealedAfterReview(h: EngineHarness, name: string): Promise<SealedRun> {
  let started: RunningInvocation | undefined
  let committed: Promise<HandoffPause> | undefined
  const input = h.input(name, {
    tools: [
      countingTool('echo', async (_input, context) => {
        committed = started?.handoff().reserve(intentFor(context.invocation, 'review')).ready().then((held) => held.commit())
        return SENT_FOR_REVIEW
      }),
    ],
  })
  started = await h.start(input)
  const outcome = await started.wait()
  assert.ok(committed, 'the tool reserved a hold')
  const pause = await committed
  assert.equal(outcome, { status: 'handoff_paused', pause })
  const source = (await h.log.runSource(input.invocation.sessionId, input.invocation.runId))?.boundary
  assert.ok(source)
  return { running: started, pause, source, input }
}

/** `successorInput(sealed)` with `content` as its message. */
function toldSuccessor(sealed: SealedRun, content: unknown): RunInput {
  const input = successorInput(sealed)
  if (input.work.kind === 'handoff') input.work = { ...input.work, content } as typeof input.work
  return input
}

test(
  "a successor with content: the model gets the sealed transcript, then the message; it is recorded with the successor's requestFingerprint, shown by factstate log, and a continuation of the successor replays it in the same place",
  engineTest(
    [answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('Issuing the approved refund of O-3.'), answer.text('It was approved by carol.')],
    {},
    async (h) => {
      const sealed = await sealedAfterReview(h, 'told')
      assert.is(h.server.requests.length, 1, 'no request after the seal')
      const successor = toldSuccessor(sealed, DECISION)
      successor.requestFingerprint = 'webhook-77'
      assert.equal(await h.run(successor), { status: 'completed' })
      const first = messagesOf(h.server.requests[1]?.body)
      assert.equal(
        first.map((m) => [m.role, m.content]),
        [
          ['user', 'question told'],
          ['assistant', null],
          ['tool', SENT_FOR_REVIEW],
          ['user', DECISION],
        ],
        "the successor's first request: the sealed transcript, then the decision",
      )
      const successorId = sealed.pause.intent.successorInvocationId
      const [opened] = only(await factsOf(h.log, successorId), 'invocation.opened')
      assert.ok(opened?.input.kind === 'handoff')
      assert.is(opened.input.content, DECISION, 'recorded in invocation.opened')
      assert.is(opened.input.requestFingerprint, 'webhook-77', "the successor's fingerprint is recorded too")
      assert.equal(opened.execution, sealed.pause.execution, 'the settings are still the seal\'s')
      assert.is(summarizeFact(opened), `handoff from run-told@${sealed.source.highWater}, message ${JSON.stringify(DECISION)}`)
      // The inspector shows it too: in the fact's key fields and as its message.
      assert.equal(keyFields(opened).find((field) => field.k === 'message')?.v, DECISION)
      assert.equal(payloads(opened).find((payload) => payload.kind === 'message')?.text, DECISION)
      // transcriptOf the chain (the sealed run's lineage, then the successor's facts) says the same.
      const end = await h.log.runSource(sealed.source.invocation.sessionId, sealed.pause.intent.successorRunId)
      assert.ok(end)
      const chain = await h.log.lineageEvents(end.boundary)
      assert.equal(
        transcriptOf(chain).map((m) => m.content),
        ['question told', null, SENT_FOR_REVIEW, DECISION, 'Issuing the approved refund of O-3.'],
      )
      assert.is(answerOf(await h.log.invocationEvents(successorId)), 'Issuing the approved refund of O-3.')
      // The conversation goes on: the decision stays where it was said.
      const next: RunInput = { ...h.input('told-next', { session: sealed.source.invocation.sessionId }), work: { kind: 'continuation', source: end.boundary, content: 'Who approved it?' } }
      assert.equal(await h.run(next), { status: 'completed' })
      assert.equal(
        messagesOf(h.server.requests[2]?.body).map((m) => [m.role, m.content]),
        [
          ['user', 'question told'],
          ['assistant', null],
          ['tool', SENT_FOR_REVIEW],
          ['user', DECISION],
          ['assistant', 'Issuing the approved refund of O-3.'],
          ['user', 'Who approved it?'],
        ],
      )
    },
  ),
)

test(
  'a successor with bad content is RUN_INVALID_INPUT naming work.content and writes nothing; content is no setting: it never makes a successor HANDOFF_MISMATCH, and leaves the claim for the successor',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('done')], {}, async (h) => {
    const sealed = await sealedAfterReview(h, 'bad')
    for (const [what, content] of [
      ['empty', ''],
      ['a number', 42],
      ['null', null],
      ['a lone surrogate', 'approved \ud800'],
      ['an object', { text: DECISION }],
    ] as const) {
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(toldSuccessor(sealed, content)), 'RUN_INVALID_INPUT', what)
      assert.ok((error.details?.fields as string[] | undefined)?.some((field) => field.startsWith('work')), `${what}: ${JSON.stringify(error.details)}`)
    }
    // An unknown member of the handoff work is still refused (a misspelt content is not ignored).
    const misspelt = successorInput(sealed)
    ;(misspelt.work as Record<string, unknown>).contents = DECISION
    const unknown = await refusedWithoutWriting(h.log, () => h.engine.start(misspelt), 'RUN_INVALID_INPUT', 'work.contents')
    assert.equal(unknown.details?.fields, ['work.contents'])
    assert.is(h.server.requests.length, 1, 'no refused successor reached the model')
    // With the sealed settings and any message, it is admitted; another setting is refused whatever the message.
    const mismatch = toldSuccessor(sealed, DECISION)
    mismatch.mainOutputLimit = 7
    assert.is((await refusedWithoutWriting(h.log, () => h.engine.start(mismatch), 'HANDOFF_MISMATCH', 'another setting with content')).details?.field, 'mainOutputLimit')
    assert.equal(await h.run(toldSuccessor(sealed, 'denied, then approved: go ahead')), { status: 'completed' })
  }),
)

test(
  "a successor's content that carries the provider's key is RUN_INVALID_INPUT, and no file of the log holds the key; the turn still waits for its successor",
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('done')], {}, async (h) => {
    const sealed = await sealedAfterReview(h, 'secret')
    const key = 'sk-proj-7Hq2mX9vLp4RtY8wZ3nB6cK1'
    const leaking = toldSuccessor(sealed, `approved; the key is ${key}`)
    leaking.provider = { ...leaking.provider, apiKey: key }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start(leaking), 'RUN_INVALID_INPUT', 'content with the key')
    assert.equal(error.details?.fields, ['work.content'])
    assert.not.ok(error.message.includes(key), 'the refusal does not quote the key')
    const told = toldSuccessor(sealed, DECISION)
    told.provider = { ...told.provider, apiKey: key }
    assert.equal(await h.run(told), { status: 'completed' })
    assert.is(String(h.server.requests[1]?.headers.authorization), `Bearer ${key}`, 'the key was sent')
    await h.log.close()
    assert.equal(await filesHolding(h.logPath, [key, key.slice(8, 24)]), [], 'no LevelDB file holds the key')
    h.log = await EventLog.open(h.logPath)
    const [opened] = only(await factsOf(h.log, sealed.pause.intent.successorInvocationId), 'invocation.opened')
    assert.is(opened?.input.kind === 'handoff' ? opened.input.content : undefined, DECISION)
  }),
)

test(
  'a successor given up with content records it unsent; a continuation of its run replays it after the sealed transcript',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('The refund was denied.')], {}, async (h) => {
    const sealed = await sealedAfterReview(h, 'given')
    const controller = new AbortController()
    controller.abort('denied')
    const denial = 'dave@acme denied the refund of O-3 (ticket 78)'
    assert.equal(await h.run(toldSuccessor(sealed, denial), { signal: controller.signal }), { status: 'cancelled', source: 'denied' })
    assert.is(h.server.requests.length, 1, 'the given-up successor asked the model nothing')
    const [opened] = only(await factsOf(h.log, sealed.pause.intent.successorInvocationId), 'invocation.opened')
    assert.is(opened?.input.kind === 'handoff' ? opened.input.content : undefined, denial)
    const end = (await h.log.runSource(sealed.source.invocation.sessionId, sealed.pause.intent.successorRunId))?.boundary
    assert.ok(end)
    assert.equal(await h.run({ ...h.input('given-next', { session: sealed.source.invocation.sessionId }), work: { kind: 'continuation', source: end } }), { status: 'completed' })
    assert.equal(messagesOf(h.server.requests[1]?.body).map((m) => [m.role, m.content]), [
      ['user', 'question given'],
      ['assistant', null],
      ['tool', SENT_FOR_REVIEW],
      ['user', denial],
    ])
  }),
)

test(
  'a successor with content in another process, after the sealing process closed the log: it gets the decision after the sealed transcript, and the log records it',
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('Issued in the other process.')], { ms: 30_000 }, async (h) => {
    const sealed = await sealedAfterReview(h, 'elsewhere')
    await h.log.close()
    const successor = toldSuccessor(sealed, DECISION)
    const result = await runScript('spec/support/child-handoff-successor.ts', [h.logPath, JSON.stringify({ ...successor, tools: [] })], 20_000)
    assert.is(result.code, 0, result.stderr)
    assert.equal(JSON.parse(result.stdout.trim()), { status: 'completed' })
    assert.equal(messagesOf(h.server.requests[1]?.body).map((m) => [m.role, m.content]), [
      ['user', 'question elsewhere'],
      ['assistant', null],
      ['tool', SENT_FOR_REVIEW],
      ['user', DECISION],
    ])
    h.log = await EventLog.open(h.logPath)
    const facts = await factsOf(h.log, sealed.pause.intent.successorInvocationId)
    const [opened] = only(facts, 'invocation.opened')
    assert.is(opened?.input.kind === 'handoff' ? opened.input.content : undefined, DECISION)
    assert.equal(facts.at(-1), { type: 'invocation.ended', outcome: { status: 'completed' } })
  }),
)

test(
  "a successor without content sends the sealed run's next request as it was, and records its requestFingerprint (no content member); one whose source is in another session is RUN_INVALID_INPUT",
  engineTest([answer.toolCalls([{ name: 'echo', arguments: { value: 3 } }]), answer.text('done')], {}, async (h) => {
    const sealed = await sealedAfterReview(h, 'plain')
    const elsewhere = successorInput(sealed)
    elsewhere.invocation = { ...elsewhere.invocation, sessionId: 'session-other' }
    const refused = await refusedWithoutWriting(h.log, () => h.engine.start(elsewhere), 'RUN_INVALID_INPUT', 'a source in another session')
    assert.equal(refused.details?.fields, ['work.source.invocation.sessionId'])
    const successor = successorInput(sealed)
    successor.requestFingerprint = 'webhook-78'
    assert.equal(await h.run(successor), { status: 'completed' })
    assert.equal(messagesOf(h.server.requests[1]?.body).map((m) => [m.role, m.content]), [
      ['user', 'question plain'],
      ['assistant', null],
      ['tool', SENT_FOR_REVIEW],
    ])
    const [opened] = only(await factsOf(h.log, sealed.pause.intent.successorInvocationId), 'invocation.opened')
    assert.equal(opened?.input, { kind: 'handoff', source: sealed.source, pause: sealed.pause, requestFingerprint: 'webhook-78' })
    assert.is(summarizeFact(opened as NonNullable<typeof opened>), `handoff from run-plain@${sealed.source.highWater}`)
  }),
)

test.run()
