/**
 * Agents that call agents: `childRunFor` / `childRunOf` make a tool call's child run ids from its
 * operation id, the child's run records the call as its `parent`, and the log refuses a parent that
 * cannot be the call that started the run.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type RunInput, type ToolContext, type ToolDefinition, answerOf, childRunFor, childRunOf, usageOf } from '../index.js'
import { ID_PATTERN } from '../facts/schema.js'
import { answer } from '../testing/scripted-model-server.js'
import { pendingCommand } from '../bin/commands/pending.js'
import { collector } from './support/cli-io.js'
import { rejectsWithCode } from './support/codes.js'
import { factsOf, engineTest, refusedWithoutWriting, runInput, sealAtFirstSafePoint, successorInput } from './support/engine-fixtures.js'
import { EventMaker, REPO_ROOT, completeInvocation, facts, invocationOf, withDb } from './support/log-fixtures.js'
import { keys } from '../store/keys.js'
import { bounded } from './support/temp.js'
import { familyFacts } from './support/family-facts.js'

const supervisor = { sessionId: 'support', turnId: 'turn-1', runId: 'run-1', invocationId: 'sup-1' }
const contextOf = (operationId: string, invocation = supervisor): ToolContext => ({ signal: new AbortController().signal, operationId, attempt: 1, invocation, addSecret: () => undefined, progress: () => undefined })

test('childRunFor names the child by the call: the same call, the same ids, which childRunOf makes from the operation id alone', async () => {
  const child = childRunFor(contextOf('sup-1/step-1/0'), 'writer')
  assert.equal(child, {
    invocation: { sessionId: 'sup-1.step-1.0.writer', turnId: 'sup-1.step-1.0.writer', runId: 'sup-1.step-1.0.writer', invocationId: 'sup-1.step-1.0.writer' },
    parent: { invocation: supervisor, operationId: 'sup-1/step-1/0' },
  })
  assert.equal(childRunFor(contextOf('sup-1/step-1/0'), 'writer'), child, 'the same ids each time')
  assert.equal(childRunOf('sup-1/step-1/0', 'writer'), child.invocation)
  // Two calls, two names, and an invocation id that ends like a step: all apart.
  const ids = [childRunOf('sup-1/step-1/0', 'writer'), childRunOf('sup-1/step-1/1', 'writer'), childRunOf('sup-1/step-2/0', 'writer'), childRunOf('sup-1/step-1/0', 'critic'), childRunOf('sup-1.step-1/step-1/0', 'writer')]
  assert.is(new Set(ids.map((ids) => ids.invocationId)).size, ids.length)
  assert.is.not(child.parent.invocation, supervisor, "the parent is the child's own copy")
})

test('childRunFor keeps every id an id: a long operation id is cut and told apart by a digest', async () => {
  const long = 'i'.repeat(128)
  const a = childRunOf(`${long}/step-1/0`, 'writer')
  const b = childRunOf(`${long}/step-1/1`, 'writer')
  for (const made of [a, b]) {
    for (const value of Object.values(made)) assert.ok(ID_PATTERN.test(value), `${value} is an id`)
    assert.is(made.invocationId.length, 128)
  }
  assert.is.not(a.invocationId, b.invocationId, 'two cut ids differ by their digest')
  assert.equal(childRunOf(`${long}/step-1/0`, 'writer'), a)
  assert.equal(childRunFor(contextOf(`${long}/step-1/0`, { ...supervisor, invocationId: long }), 'writer').invocation, a)
})

test('childRunFor and childRunOf refuse what is not a call or a name: RUN_INVALID_INPUT naming the argument', async () => {
  const cases: [string, () => unknown, string][] = [
    ['no context', () => childRunFor(null as never, 'writer'), 'context'],
    ['a context without an invocation', () => childRunFor({ operationId: 'sup-1/step-1/0', signal: new AbortController().signal } as never, 'writer'), 'context'],
    ['an operation id with no step', () => childRunFor(contextOf('sup-1'), 'writer'), 'context'],
    ["an operation id of another invocation", () => childRunFor(contextOf('other/step-1/0'), 'writer'), 'context'],
    [
      'a context that cannot be read',
      () =>
        childRunFor(
          Object.defineProperty({}, 'operationId', {
            get() {
              throw new Error('no')
            },
          }) as never,
          'writer',
        ),
      'context',
    ],
    ['a name with a dot', () => childRunFor(contextOf('sup-1/step-1/0'), 'a.b'), 'name'],
    ['an empty name', () => childRunOf('sup-1/step-1/0', ''), 'name'],
    ['a name that is not a string', () => childRunOf('sup-1/step-1/0', 7 as never), 'name'],
    ['an operation id with a slash too many', () => childRunOf('a/b/c/0', 'writer'), 'operationId'],
    ['an operation id whose index is not a number', () => childRunOf('a/step-1/x', 'writer'), 'operationId'],
    ['an operation id that is not a string', () => childRunOf(undefined as never, 'writer'), 'operationId'],
  ]
  for (const [what, call, field] of cases) {
    const error = await rejectsWithCode(async () => call(), 'RUN_INVALID_INPUT', what)
    assert.is(error.details?.field, field, what)
    assert.equal(error.details?.fields, [field], what)
  }
})

/** A `delegate` tool that runs `name`'s agent as a child run of the call, on the same engine. */
function delegateTool(h: { engine: { start: (input: RunInput, options?: { signal?: AbortSignal }) => Promise<{ invocation: RunInput['invocation']; wait(): Promise<{ status: string }> }> }; log: EventLog }, baseUrl: string, tools: ToolDefinition[] = []): ToolDefinition & { children: string[] } {
  const children: string[] = []
  return {
    name: 'delegate',
    description: 'hands a task to a specialist agent',
    inputSchema: { type: 'object', properties: { specialist: { type: 'string' }, task: { type: 'string' } }, required: ['specialist', 'task'] },
    children,
    async execute(input, context) {
      const { specialist, task } = input as { specialist: string; task: string }
      const child = await h.engine.start({ ...runInput(baseUrl, specialist, { tools, content: task }), ...childRunFor(context, specialist) }, { signal: context.signal })
      children.push(child.invocation.invocationId)
      const outcome = await child.wait()
      if (outcome.status !== 'completed') return { status: outcome.status }
      return { status: outcome.status, answer: answerOf(await h.log.invocationEvents(child.invocation.invocationId)) }
    },
  }
}

test(
  "a child run records the call that started it, and childRunOf finds it from the parent's dispatched call",
  engineTest(
    [answer.toolCalls([{ id: 'call-1', name: 'delegate', arguments: { specialist: 'writer', task: 'draft the release note' } }]), answer.text('Draft: v2 is out'), answer.text('the writer drafted it')],
    { ms: 20_000 },
    async (h) => {
      const delegate = delegateTool(h, h.server.baseUrl)
      const outcome = await h.run({ ...h.input('sup', { tools: [delegate] }) })
      assert.is(outcome.status, 'completed')
      const dispatched = (await factsOf(h.log, 'invocation-sup')).find((fact) => fact.type === 'tool.dispatched')
      assert.ok(dispatched?.type === 'tool.dispatched')
      const child = childRunOf(dispatched.operationId, (dispatched.input as { specialist: string }).specialist)
      assert.equal(delegate.children, [child.invocationId])
      const runs = await h.log.runs(child.sessionId)
      assert.is(runs.length, 1)
      assert.is(runs[0]?.terminal, 'completed')
      const [opened] = await factsOf(h.log, child.invocationId)
      assert.ok(opened?.type === 'invocation.opened' && opened.input.kind === 'message')
      assert.equal(opened.input.parent, { invocation: { sessionId: 'session-sup', turnId: 'turn-sup', runId: 'run-sup', invocationId: 'invocation-sup' }, operationId: dispatched.operationId })
      assert.is(answerOf(await h.log.invocationEvents(child.invocationId)), 'Draft: v2 is out')
      // The same call names the same child: starting it again is refused, its ids used.
      const again = await refusedWithoutWriting(h.log, () => h.engine.start({ ...runInput(h.server.baseUrl, 'writer', { tools: [] }), invocation: child, parent: { invocation: { sessionId: 'session-sup', turnId: 'turn-sup', runId: 'run-sup', invocationId: 'invocation-sup' }, operationId: dispatched.operationId } }), 'RUN_INVALID_INPUT', 'the same child again')
      assert.ok((again.details?.fields as string[]).includes('invocation.invocationId'))
    },
  ),
)

test(
  "cancelling the parent cancels the child through the tool's signal, and the tool's answer is recorded",
  engineTest([answer.toolCalls([{ id: 'call-1', name: 'delegate', arguments: { specialist: 'writer', task: 'draft it' } }]), answer.toolCalls([{ id: 'call-w', name: 'slow', arguments: {} }])], { ms: 20_000 }, async (h) => {
    let started!: () => void
    const slowStarted = new Promise<void>((resolve) => (started = resolve))
    const slow: ToolDefinition = {
      name: 'slow',
      async execute(_input, { signal }) {
        started()
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
        return { saved: false }
      },
    }
    const delegate = delegateTool(h, h.server.baseUrl, [slow])
    const controller = new AbortController()
    const parent = await h.start(h.input('sup', { tools: [delegate] }), { signal: controller.signal })
    await slowStarted
    controller.abort()
    const outcome = await parent.wait()
    assert.is(outcome.status, 'cancelled')
    const child = delegate.children[0] as string
    const ended = (await factsOf(h.log, child)).at(-1)
    assert.ok(ended?.type === 'invocation.ended' && ended.outcome.status === 'cancelled', 'the child was cancelled with its parent')
    const settled = (await factsOf(h.log, 'invocation-sup')).find((fact) => fact.type === 'tool.settled')
    assert.ok(settled?.type === 'tool.settled' && settled.outcome.status === 'succeeded', 'the delegate returned what the child did, so nothing is left uncertain')
    assert.equal(settled.outcome.status === 'succeeded' && settled.outcome.output, { status: 'cancelled' })
  }),
)

const tokens = (prompt: number, completion: number) => ({ usage: { prompt_tokens: prompt, completion_tokens: completion } })

test(
  "log.runs gives each child run the call that started it, as its opened fact records it (continuations too), none to the supervisor's, after a reopen too; a family's usage counts each answer once",
  engineTest(
    [
      answer.toolCalls([{ id: 'call-1', name: 'delegate', arguments: { specialist: 'writer', task: 'draft the release note' } }], tokens(100, 10)),
      answer.text('Draft: v2 is out', tokens(20, 2)),
      answer.text('the writer drafted it', tokens(300, 30)),
      answer.text('Draft: v2 ships today', tokens(4, 1)),
      answer.text('Draft: v2, shorter', tokens(5, 1)),
      answer.text('told', tokens(7, 1)),
    ],
    { ms: 20_000 },
    async (h) => {
      const supervisorInput = h.input('sup', { tools: [delegateTool(h, h.server.baseUrl)] })
      assert.is((await h.run(supervisorInput)).status, 'completed')
      const dispatched = (await factsOf(h.log, 'invocation-sup')).find((fact) => fact.type === 'tool.dispatched')
      assert.ok(dispatched?.type === 'tool.dispatched')
      const child = childRunOf(dispatched.operationId, 'writer')
      const parent = { invocation: supervisorInput.invocation, operationId: dispatched.operationId }
      assert.equal((await h.log.runs(child.sessionId)).map((run) => run.parent), [parent])
      // The child continued twice in its own session: with its parent, as the recovery recipe does, and without.
      const continueChild = async (name: string, withParent: boolean) => {
        const last = (await h.log.runs(child.sessionId)).at(-1)
        const source = last && (await h.log.runSource(child.sessionId, last.runId))?.boundary
        assert.ok(source)
        const input: RunInput = { ...h.input(name, { session: child.sessionId, tools: [] }), work: { kind: 'continuation', source, content: 'make it shorter' } }
        assert.is((await h.run(withParent ? { ...input, parent } : input)).status, 'completed')
      }
      await continueChild('writer-2', true)
      await continueChild('writer-3', false)
      // The supervisor continued too: its continuation's lineage holds its first run's answers, counted once.
      const supervisorSource = (await h.log.runSource('session-sup', 'run-sup'))?.boundary
      assert.ok(supervisorSource)
      assert.is((await h.run({ ...h.input('sup-2', { session: 'session-sup', tools: [] }), work: { kind: 'continuation', source: supervisorSource, content: 'thanks' } })).status, 'completed')
      const check = async (log: EventLog, when: string) => {
        const childRuns = await log.runs(child.sessionId)
        assert.equal(childRuns.map((run) => [run.runId, run.kind, run.parent]), [
          [child.runId, 'message', parent],
          ['run-writer-2', 'continuation', parent],
          ['run-writer-3', 'continuation', undefined],
        ], when)
        assert.not.ok('parent' in (childRuns[2] as object), `${when}: no parent member on a run whose opened fact has none`)
        const supervisorRuns = await log.runs('session-sup')
        assert.equal(supervisorRuns.map((run) => run.runId), ['run-sup', 'run-sup-2'], when)
        assert.ok(supervisorRuns.every((run) => !('parent' in run)), `${when}: a top-level run has no parent`)
        const family = usageOf(await familyFacts(log, 'session-sup'))
        assert.equal([family.answers, family.inputTokens, family.outputTokens, family.unreported], [6, 100 + 20 + 300 + 4 + 5 + 7, 10 + 2 + 30 + 1 + 1 + 1, 0], when)
      }
      await check(h.log, 'as written')
      // A copy: what a caller does to a summary's parent is not what the next call gives.
      const listed = (await h.log.runs(child.sessionId))[0]
      if (listed?.parent) listed.parent.invocation.sessionId = 'changed'
      await check(h.log, 'listed again')
      await h.engine.drain()
      await h.log.close()
      h.log = await EventLog.open(h.logPath)
      await check(h.log, 'after a reopen')
    },
  ),
)

test(
  "a child's handoff successor has no parent of its own in log.runs: its turn keeps its first run's",
  engineTest([answer.text('done after the review')], {}, async (h) => {
    const parent = { invocation: supervisor, operationId: 'sup-1/step-1/0' }
    const child = childRunOf(parent.operationId, 'writer')
    const sealed = await sealAtFirstSafePoint(h, { ...h.input('writer'), invocation: child, parent }, 'writer-next')
    const { parent: _given, ...successor } = successorInput(sealed)
    assert.is((await h.run(successor)).status, 'completed')
    assert.equal((await h.log.runs(child.sessionId)).map((run) => [run.kind, run.parent]), [
      ['message', parent],
      ['handoff', undefined],
    ])
  }),
)

test(
  "pendingSessions gives an unanswered child run its parent, as log.runs does; a first fact that cannot be read is LOG_CORRUPT in log.runs and costs pendingSessions only that parent",
  bounded(30_000, async (dir) => {
    const path = `${dir}/log`
    const parent = { invocation: supervisor, operationId: 'sup-1/step-1/0' }
    const cancelledChild = (name: string) => {
      const opened = facts.opened() as { input: Record<string, unknown> }
      opened.input.parent = parent
      return new EventMaker(invocationOf(name)).many([opened as never, facts.ended({ status: 'cancelled', source: 'signal' })])
    }
    let damagedSeq = 0
    const first = await EventLog.open(path)
    try {
      await first.appendAll(cancelledChild('kept'))
      damagedSeq = (await first.appendAll(cancelledChild('damaged')))[0] as number
      // Far enough back that the open's check of the tail does not read it.
      for (let index = 0; index < 220; index += 1) await first.appendAll(completeInvocation(`after-${index}`))
    } finally {
      await first.close()
    }
    await withDb(path, (db) => db.put(keys.event(damagedSeq), new Uint8Array([0xc1])))
    const log = await EventLog.open(path)
    try {
      assert.equal((await log.runs('session-kept')).map((run) => run.parent), [parent])
      const unanswered = (await log.pendingSessions({ unanswered: true })).map((session) => [session.sessionId, session.unanswered?.parent])
      assert.equal(unanswered, [
        ['session-damaged', undefined],
        ['session-kept', parent],
      ])
      const error = await rejectsWithCode(() => log.runs('session-damaged'), 'LOG_CORRUPT', 'a damaged opened fact')
      assert.equal(error.details, { seq: damagedSeq })
    } finally {
      await log.close()
    }
    // factstate pending says the same: the damaged run's line without its parent, not exit 1 and nothing.
    const listed = collector()
    assert.is(await pendingCommand([path, '--unanswered'], listed.io), 0, listed.err.join('\n'))
    assert.equal(listed.out.map((line) => line.split(':')[0]), ['session-damaged', 'session-kept'])
    assert.not.match(listed.out[0] ?? '', /child run of/)
    assert.match(listed.out[1] ?? '', /a child run of sup-1\/step-1\/0/)
  }),
)

test(
  'the engine refuses a parent that cannot be the call that started the run, and writes nothing',
  engineTest([], {}, async (h) => {
    const base = h.input('child')
    const parent = { invocation: supervisor, operationId: 'sup-1/step-1/0' }
    const cases: [string, RunInput, string][] = [
      ['an operation of another invocation', { ...base, parent: { ...parent, operationId: 'other/step-1/0' } }, 'parent.operationId'],
      ['the run as its own parent', { ...base, parent: { invocation: base.invocation, operationId: `${base.invocation.invocationId}/step-1/0` } }, 'parent.invocation'],
      ['a parent invocation with a bad id', { ...base, parent: { ...parent, invocation: { ...supervisor, runId: 'a b' } } }, 'parent.invocation.runId'],
      ['a parent with a member of its own', { ...base, parent: { ...parent, extra: 1 } as never }, 'parent.extra'],
      ['an empty operation id', { ...base, parent: { ...parent, operationId: '' } }, 'parent.operationId'],
    ]
    for (const [what, input, field] of cases) {
      const error = await refusedWithoutWriting(h.log, () => h.engine.start(input), 'RUN_INVALID_INPUT', what)
      assert.equal(error.details?.fields, [field], what)
    }
    const pause = { intent: { handoffId: 'h', hostEpoch: 'e', rootRunId: 'r', successorRunId: 'r2', successorInvocationId: 'i2', claimId: 'c' }, remainingSteps: 1, execution: { model: 'm', providerOptions: {}, cwd: '/w', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: [] } } }
    const handoff: RunInput = { ...base, parent, work: { kind: 'handoff', source: { invocation: supervisor, highWater: 1, digest: `sha256:${'b'.repeat(64)}` }, pause } }
    const error = await refusedWithoutWriting(h.log, () => h.engine.start({ ...handoff, invocation: { ...supervisor, runId: 'r2', invocationId: 'i2' } }), 'RUN_INVALID_INPUT', 'a successor given a parent')
    assert.equal(error.details?.fields, ['parent'])
  }),
)

test(
  'the log refuses an appended invocation.opened whose parent is not one of its parent invocation’s calls, or is the run itself; a sound one reads back as written',
  bounded(10_000, async (dir) => {
    const log = await EventLog.open(`${dir}/log`)
    try {
      const opened = facts.opened()
      const withParent = (parent: unknown, name = 'child') => {
        const fact = structuredClone(opened) as { input: Record<string, unknown> }
        fact.input.parent = parent
        return new EventMaker(invocationOf(name)).next(fact as never)
      }
      const own = invocationOf('child')
      for (const [what, parent, field] of [
        ['an operation of another invocation', { invocation: supervisor, operationId: 'other/step-1/0' }, 'fact.input.parent.operationId'],
        ['the run itself', { invocation: own, operationId: `${own.invocationId}/step-1/0` }, 'fact.input.parent.invocation'],
      ] as const) {
        const error = await rejectsWithCode(() => log.append(withParent(parent)), 'LOG_INVALID_EVENT', what)
        assert.equal(error.details?.fields, [field], what)
      }
      await rejectsWithCode(() => log.append(withParent({ invocation: supervisor })), 'LOG_INVALID_EVENT', 'a parent without its operation id')
      assert.is(log.head().highWater, 0, 'nothing is written')
      const sound = withParent({ invocation: supervisor, operationId: 'sup-1/step-1/0' })
      assert.is(await log.append(sound), 1)
      const [stored] = await log.invocationEvents(own.invocationId)
      assert.equal(stored?.event, sound)
    } finally {
      await log.close()
    }
  }),
)

test('the README\'s family usage recipe is the familyFacts this file runs (spec/support/family-facts.ts), as it is', async () => {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf("**A supervisor's children, and what they all spent.**"), readme.indexOf('**What a handoff cannot do.**'))
  const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const file = await readFile(join(REPO_ROOT, 'spec', 'support', 'family-facts.ts'), 'utf8')
  const helper = file.slice(file.indexOf('/** The facts of every run'), file.indexOf('\n}\n', file.indexOf('function familyFacts')) + 2).replace('export async function', 'async function')
  assert.ok(helper.length > 100 && block.includes(helper), 'the README shows familyFacts as spec/support/family-facts.ts has it')
})

test.run()
