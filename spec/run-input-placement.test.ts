/**
 * A run input member given one level off (`providerOptions` inside `provider`, `model` beside it) is
 * refused, as every unknown member is, and the message says where it belongs.
 */
import { createHash } from 'node:crypto'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { validateRunInput } from '../actors/run-input.js'
import { FactstateError } from '../errors.js'

const valid = () => ({
  invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
  provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' } as Record<string, unknown>,
  configuration: { cwd: '/srv' },
  tools: [],
  work: { kind: 'message', content: 'hi' },
} as Record<string, unknown>)

function refusal(input: unknown): FactstateError {
  try {
    validateRunInput(input)
  } catch (error) {
    if (error instanceof FactstateError) return error
    throw error
  }
  throw new Error('the input was admitted')
}

test('the valid base is admitted', () => {
  assert.is(validateRunInput(valid()).provider.model, 'm')
})

test('a top-level member given inside provider is told it belongs beside provider', () => {
  for (const [key, value] of [['providerOptions', { temperature: 0 }], ['mainOutputLimit', 100], ['instructions', 'be brief']] as const) {
    const input = valid()
    ;(input.provider as Record<string, unknown>)[key] = value
    const error = refusal(input)
    assert.is(error.code, 'RUN_INVALID_INPUT', key)
    assert.match(error.message, `(${key} belongs beside provider, at the top of the run input, not in it)`, key)
  }
})

test('a provider member given beside provider is told it belongs in provider', () => {
  const input = valid()
  input.apiKey = 'not-here'
  input.model = 'm2'
  const error = refusal(input)
  assert.is(error.code, 'RUN_INVALID_INPUT')
  assert.match(error.message, '(apiKey belongs in provider; model belongs in provider)')
})

test('a name that belongs to more than one place gets no hint that names one of them', () => {
  const flat = valid()
  flat.kind = 'message'
  assert.not.match(refusal(flat).message, 'belongs', 'kind is also a member of work')
  const nested = valid()
  ;(nested.provider as Record<string, unknown>).provider = {}
  assert.not.match(refusal(nested).message, 'belongs', 'provider inside provider')
})

test('an unknown member that is no member at either level gets no hint', () => {
  const input = valid()
  ;(input.provider as Record<string, unknown>).temprature = 0
  const error = refusal(input)
  assert.is(error.code, 'RUN_INVALID_INPUT')
  assert.not.match(error.message, 'belongs')
})

test("another library's name for a member is told where the setting is here: LangGraph's, the OpenAI Agents SDK's, the AI SDK's", () => {
  const cases: [string, unknown, string][] = [
    ['systemPrompt', 'be brief', 'systemPrompt: instructions is the system prompt'],
    ['system', 'be brief', 'system: instructions is the system prompt'],
    ['prompt', 'be brief', "prompt: instructions is the system prompt (sent first in every request of the run); the user's message is work.content"],
    ['recursionLimit', 25, 'recursionLimit: maxSteps bounds the model requests of a run'],
    ['maxTurns', 10, 'maxTurns: maxSteps bounds the model requests of a run'],
    ['max_iterations', 10, 'max_iterations: maxSteps bounds'],
    ['thread_id', 'chat-7', 'thread_id: a conversation (a thread) is invocation.sessionId'],
    ['messages', [{ role: 'user', content: 'hi' }], "messages: the user's message is work.content"],
    ['callbacks', [], 'callbacks: a run\'s progress is its facts: log.events({ follow: true })'],
    ['maxTokens', 100, 'maxTokens: mainOutputLimit is the most tokens an answer may take'],
    ['temperature', 0, 'temperature: the request body\'s own settings go in providerOptions'],
    ['sessionId', 'chat-7', 'sessionId belongs in invocation'],
  ]
  for (const [key, value, hint] of cases) {
    const input = valid()
    input[key] = value
    const error = refusal(input)
    assert.is(error.code, 'RUN_INVALID_INPUT', key)
    assert.match(error.message, hint, key)
  }
  // Only at the top of the run input: inside provider, a member of its own name is only unknown.
  const nested = valid()
  ;(nested.provider as Record<string, unknown>).system = 'x'
  assert.not.match(refusal(nested).message, 'instructions is the system prompt')
})

test('an id that is no id (a thread id that is an email address or a path) is told, once, how to make one of it, without the id shown', () => {
  const input = valid()
  const long = `user/${'x'.repeat(300)}`
  input.invocation = { sessionId: 'alice@example.com', turnId: long, runId: 'r', invocationId: 'i' }
  const error = refusal(input)
  assert.equal(error.details, { fields: ['invocation.sessionId', 'invocation.turnId'] })
  assert.is(error.message.split("SHA-256 digest in base64url (createHash('sha256').update(id).digest('base64url'), 43 characters), or a table of your own").length, 2, error.message)
  assert.not.match(error.message, 'x'.repeat(20), 'the long id is not shown')
  const mapped = valid()
  mapped.invocation = { sessionId: createHash('sha256').update('alice@example.com').digest('base64url'), turnId: 't', runId: 'r', invocationId: 'i' }
  assert.is(validateRunInput(mapped).invocation.sessionId.length, 43, 'what it says makes an id')
  const other = valid()
  other.maxSteps = 0
  assert.not.match(refusal(other).message, 'base64url', 'only a refused id is told it')
})

test.run()
