/**
 * An option a JavaScript caller misspells or gives the wrong type of is refused, and the refusal
 * says which field and, where the name is another spelling of one the call takes (`waitms`,
 * `unAnswered`, the OpenAI SDK's `baseURL`), which one was meant: a plain-JS user got
 * `LOG_INVALID_ARGUMENT` with no `details` and had to read the message to find the field.
 */
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { validateRunInput } from '../actors/run-input.js'
import { EventLog, ModelExecutor, recoverInvocations } from '../index.js'
import { invocationPaths } from '../testing/index.js'
import { boundedTest, refusal } from './support/log-fixtures.js'

test(
  "the log's calls name the refused option in details.field (as given, when it is not one they take) and the option meant; nothing is made or written",
  boundedTest(20_000, async (dir) => {
    const location = join(dir, 'log')
    const open = await refusal(EventLog.open(location, { waitms: 1 } as never))
    assert.equal([open.code, open.details], ['LOG_INVALID_ARGUMENT', { field: 'waitms' }])
    assert.match(open.message, 'there is no option "waitms": did you mean waitMs? (the options are { durability?, create?, waitMs?, signal? })')
    assert.is(await stat(location).then(() => 'made', () => 'absent'), 'absent', 'the refused open made no directory')
    const far = await refusal(EventLog.open(location, { bogus: 1 } as never))
    assert.equal(far.details, { field: 'bogus' })
    assert.not.match(far.message, 'did you mean', 'a name like none of the options gets no guess')

    const log = await EventLog.open(location)
    try {
      const before = log.head()
      const misspelt = await refusal(log.pendingSessions({ unAnswered: true } as never))
      assert.equal([misspelt.code, misspelt.details], ['LOG_INVALID_ARGUMENT', { field: 'unAnswered' }])
      assert.match(misspelt.message, 'there is no option "unAnswered": did you mean unanswered?')
      const wrongType = await refusal(log.pendingSessions({ unanswered: 'yes' } as never))
      assert.equal(wrongType.details, { field: 'unanswered' })
      assert.match(wrongType.message, 'unanswered must be a boolean, not "yes"')
      assert.equal((await refusal(log.pendingSessions([] as never))).details, { field: 'options' }, 'options that are not an object')
      assert.equal((await refusal(async () => log.events({ to: -5 }))).details, { field: 'to' })
      assert.equal((await refusal(async () => log.events({ from: 0 }))).details, { field: 'from' })
      assert.equal((await refusal(async () => log.events({ follow: 'yes' } as never))).details, { field: 'follow' })
      assert.equal((await refusal(async () => log.events({ session: 'a' } as never))).details, { field: 'session' })
      // A short name one edit off (a letter added, changed, or two swapped) is told as surely as a long one.
      for (const [given, meant] of [['fromm', 'from'], ['form', 'from'], ['fom', 'from'], ['ot', 'to'], ['folow', 'follow']] as const) {
        const short = await refusal(async () => log.events({ [given]: 1 } as never))
        assert.equal(short.details, { field: given }, given)
        assert.match(short.message, `there is no option "${given}": did you mean ${meant}?`, given)
      }
      assert.not.match((await refusal(async () => log.events({ frobnicate: 1 } as never))).message, 'did you mean', 'a name like none of the options gets no guess')
      const recovery = await refusal(recoverInvocations(log, { onclosed: () => undefined } as never))
      assert.equal(recovery.details, { field: 'onclosed' })
      assert.match(recovery.message, 'did you mean onClosed?')
      assert.equal((await refusal(recoverInvocations(log, { now: 5 } as never))).details, { field: 'now' })
      assert.equal(log.head(), before, 'nothing was written')
    } finally {
      await log.close()
    }
  }),
)

test("ModelExecutor says a number given as a string was a string (an environment variable's, say)", async () => {
  const error = await refusal(() => new ModelExecutor({ timeoutMs: '5000' } as never))
  assert.equal([error.code, error.details], ['ENGINE_INVALID_OPTIONS', { field: 'timeoutMs' }])
  assert.match(error.message, 'ModelExecutor: timeoutMs must be a positive number, not a string ("5000"): pass Number(…) of it')
  assert.match((await refusal(() => new ModelExecutor({ retries: -1 }))).message, 'retries must be a non-negative number, not -1')
})

test("a run input's provider member in another spelling (the OpenAI SDK's baseURL, api_key) is told the member meant", async () => {
  const input = (provider: Record<string, unknown>) => ({
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    provider: { kind: 'openai-chat', model: 'm', ...provider },
    configuration: { cwd: '/srv' },
    tools: [],
    work: { kind: 'message', content: 'hi' },
  })
  const sdk = await refusal(() => validateRunInput(input({ baseURL: 'http://127.0.0.1:1/v1' })))
  assert.is(sdk.code, 'RUN_INVALID_INPUT')
  assert.ok((sdk.details?.fields as string[]).includes('provider.baseURL'))
  assert.match(sdk.message, '(provider.baseURL: did you mean baseUrl?)')
  assert.match((await refusal(() => validateRunInput(input({ baseUrl: 'http://127.0.0.1:1/v1', api_key: 'k' })))).message, '(provider.api_key: did you mean apiKey?)')
  const top = { ...input({ baseUrl: 'http://127.0.0.1:1/v1' }), maxsteps: 3 }
  assert.match((await refusal(() => validateRunInput(top))).message, '(maxsteps: did you mean maxSteps?)')
})

test("a run input's member in another spelling at any level (configuration, work, invocation, a tool's retry) is told the member meant", async () => {
  const input = (changes: Record<string, unknown>) => ({
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' },
    configuration: { cwd: '/srv' },
    tools: [],
    work: { kind: 'message', content: 'hi' },
    ...changes,
  })
  const cases: [Record<string, unknown>, string, string][] = [
    [{ configuration: { cwd: '/srv', workspace_identity: 'w' } }, 'configuration.workspace_identity', '(configuration.workspace_identity: did you mean workspaceIdentity?)'],
    [{ work: { kind: 'message', content: 'hi', allowpriorunknown: true } }, 'work.allowpriorunknown', '(work.allowpriorunknown: did you mean allowPriorUnknown?)'],
    [{ invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i', runID: 'r' } }, 'invocation.runID', '(invocation.runID: did you mean runId?)'],
    [{ tools: [{ name: 'a', execute: () => 1, retry: { retries: 1, backoffMS: 5 } }] }, 'tools.0.retry.backoffMS', 'backoffMS is not a member of a retry policy (it takes retries, backoffMs, maxBackoffMs and retryOn): did you mean backoffMs?'],
    [{ tools: [{ name: 'a', execute: () => 1, retry: { retries: 1, retryon: () => true } }] }, 'tools.0.retry.retryon', 'retryon is not a member of a retry policy (it takes retries, backoffMs, maxBackoffMs and retryOn): did you mean retryOn?'],
    [{ tools: [{ name: 'a', execute: () => 1, retry: { retries: 1, maxBackofMs: 5 } }] }, 'tools.0.retry.maxBackofMs', 'did you mean maxBackoffMs?'],
  ]
  for (const [changes, field, meant] of cases) {
    const error = await refusal(() => validateRunInput(input(changes)))
    assert.is(error.code, 'RUN_INVALID_INPUT', field)
    assert.ok((error.details?.fields as string[]).includes(field), `${field}: ${JSON.stringify(error.details)}`)
    assert.match(error.message, meant, field)
  }
  const far = await refusal(() => validateRunInput(input({ tools: [{ name: 'a', execute: () => 1, retry: { retries: 1, jitter: true } }] })))
  assert.not.match(far.message, 'did you mean', 'a name like no member gets no guess')
  // A name that is a member of every object (`constructor`) is no other library's word: no hint, not Object's source.
  const inherited = await refusal(() => validateRunInput(input({ tools: [{ name: 'a', execute: () => 1, retry: { retries: 1, constructor: 2 } }] })))
  assert.match(inherited.message, 'constructor is not a member of a retry policy (it takes retries, backoffMs, maxBackoffMs and retryOn)')
  assert.not.match(inherited.message, 'function', 'the hint table is looked up by its own keys only')
})

test("a work member in another spelling is told the member of its own kind meant, and one of another kind is said to be that kind's, not offered", async () => {
  const input = (work: Record<string, unknown>) => ({
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' },
    configuration: { cwd: '/srv' },
    tools: [],
    work,
  })
  // A message's work has no onlyIfLatest (a continuation's has): "did you mean onlyIfLatest?" would be refused again as given.
  for (const key of ['onlyiflatest', 'onlyIfLatest']) {
    const error = await refusal(() => validateRunInput(input({ kind: 'message', content: 'hi', [key]: true })))
    assert.equal(error.details?.fields, [`work.${key}`])
    assert.not.match(error.message, 'did you mean', key)
    assert.match(error.message, `(work.${key}: onlyIfLatest is taken by another kind of work, not by kind "message")`, key)
  }
  const source = { invocation: { sessionId: 's', turnId: 't0', runId: 'r0', invocationId: 'i0' }, seq: 3 }
  const continuation = await refusal(() => validateRunInput(input({ kind: 'continuation', source, onlyiflatest: true })))
  assert.match(continuation.message, '(work.onlyiflatest: did you mean onlyIfLatest?)', 'a continuation takes it')
  const unknownKind = await refusal(() => validateRunInput(input({ kind: 'mesage', content: 'hi', allowpriorunknown: true })))
  assert.is(unknownKind.code, 'RUN_INVALID_INPUT')
})

test('invocationPaths names the option a misspelt one was meant to be, with details.field as given', async () => {
  const error = await refusal(() => invocationPaths({ maxStep: 2 } as never))
  assert.equal([error.code, error.details], ['TESTING_INVALID_OPTIONS', { field: 'maxStep' }])
  assert.match(error.message, 'invocationPaths: unknown option maxStep: did you mean maxSteps? (it takes maxSteps, maxRuns, strategy, crashes, include, maxPaths)')
  assert.not.match((await refusal(() => invocationPaths({ depth: 2 } as never))).message, 'did you mean')
})

test.run()
