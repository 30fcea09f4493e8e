/**
 * A run input member given one level off (`providerOptions` inside `provider`, `model` beside it) is
 * refused, as every unknown member is, and the message says where it belongs.
 */
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

test.run()
