/**
 * The workload every benchmark shares: the facts of realistic agent invocations (a message, then
 * steps of model request → answer with one tool call → dispatch → settlement, then the end), the
 * in-process scripted model client, and the run input the engine benchmarks start.
 */
import type { ModelClient, ModelRequest, ModelResponse } from '../actors/model-client.js'
import type { RunInput } from '../actors/run-input.js'
import type { ToolDefinition } from '../actors/tool-catalog.js'
import type { Fact, Invocation, RuntimeEvent } from '../facts/types.js'
import { contentDigest } from '../store/digest.js'
import type { EventLog } from '../store/event-log.js'

/** Tool steps per invocation in the agent loop (each: model request, one tool call, settle). */
export const STEPS = 20

const CATALOG_DIGEST = contentDigest('bench catalog')
const REQUEST_DIGEST = contentDigest('bench request')

export function invocationFor(prefix: string, index: number, session = `${prefix}-s${index}`): Invocation {
  return { sessionId: session, turnId: `${prefix}-t${index}`, runId: `${prefix}-r${index}`, invocationId: `${prefix}-i${index}` }
}

/** The facts of one invocation of `steps` tool steps and a final answer, as the engine records them. */
export function invocationFacts(steps: number, open = false): Fact[] {
  const facts: Fact[] = [
    {
      type: 'invocation.opened',
      input: { kind: 'message', content: 'Summarise the open issues of the repository and file a report.' },
      configuration: { cwd: '/srv/agent/workspace' },
      execution: { model: 'bench-model', providerOptions: { temperature: 0 }, mainOutputLimit: 1024, cwd: '/srv/agent/workspace', tools: { catalogDigest: CATALOG_DIGEST, names: ['echo'] } },
    },
  ]
  for (let step = 1; step <= steps; step += 1) {
    const stepId = `step-${step}`
    const callId = `call-${step}`
    const operationId = `op-${step}`
    const args = JSON.stringify({ value: step, note: 'look up the next item' })
    facts.push(
      { type: 'model.requested', stepId, model: 'bench-model', requestDigest: REQUEST_DIGEST },
      {
        type: 'model.completed',
        stepId,
        output: { toolCalls: [{ callId, name: 'echo', arguments: args }], finishReason: 'tool_calls', usage: { inputTokens: 900 + step * 40, outputTokens: 24 } },
      },
      { type: 'tool.dispatched', operationId, callId, name: 'echo', input: { value: step, note: 'look up the next item' } },
      { type: 'tool.settled', operationId, outcome: { status: 'succeeded', output: { value: step, note: 'look up the next item' } } },
    )
  }
  if (open) {
    facts.push({ type: 'model.requested', stepId: `step-${steps + 1}`, model: 'bench-model', requestDigest: REQUEST_DIGEST })
    return facts
  }
  facts.push(
    { type: 'model.requested', stepId: `step-${steps + 1}`, model: 'bench-model', requestDigest: REQUEST_DIGEST },
    { type: 'model.completed', stepId: `step-${steps + 1}`, output: { text: 'done', toolCalls: [], finishReason: 'stop' } },
    { type: 'invocation.ended', outcome: { status: 'completed' } },
  )
  return facts
}

/** The events of one invocation, ids `<invocationId>/<n>` as the engine makes them. */
export function invocationEvents(invocation: Invocation, facts: readonly Fact[], recordedAt = 1_750_000_000_000): RuntimeEvent[] {
  return facts.map((fact, index) => ({ id: `${invocation.invocationId}/${index + 1}`, recordedAt: recordedAt + index, invocation, fact }))
}

/** `facts` events split over `appenders` streams, each a sequence of complete invocations of its own session. */
export function appenderLanes(appenders: number, facts: number, tag: string): RuntimeEvent[][] {
  const perAppender = Math.ceil(facts / appenders)
  const template = invocationFacts(STEPS)
  return Array.from({ length: appenders }, (_, appender) => {
    const events: RuntimeEvent[] = []
    for (let n = 0; events.length < perAppender; n += 1) {
      events.push(...invocationEvents(invocationFor(`${tag}-a${appender}`, n, `${tag}-s${appender}`), template))
    }
    return events.slice(0, perAppender)
  })
}

/** The appenders through `EventLog.append`, side by side, each awaiting its appends one by one. */
export async function appendLanes(log: EventLog, lanes: readonly RuntimeEvent[][]): Promise<void> {
  await Promise.all(
    lanes.map(async (lane) => {
      for (const event of lane) await log.append(event)
    }),
  )
}

/**
 * A model client that answers from memory: a call to `echo` for each of the first `steps`
 * requests of an invocation, then the text `done`. No HTTP.
 */
export function scriptedClient(steps = STEPS): ModelClient {
  return {
    async complete(request: ModelRequest): Promise<ModelResponse> {
      const answered = request.body.messages.filter((message) => message.role === 'assistant').length
      if (answered < steps) {
        return {
          kind: 'completed',
          output: {
            toolCalls: [{ callId: `call-${answered + 1}`, name: 'echo', arguments: JSON.stringify({ value: answered + 1 }) }],
            finishReason: 'tool_calls',
            usage: { inputTokens: 900, outputTokens: 24 },
          },
        }
      }
      return { kind: 'completed', output: { text: 'done', toolCalls: [], finishReason: 'stop', usage: { inputTokens: 900, outputTokens: 2 } } }
    },
  }
}

/** A model client that never answers (its requests stay in flight until the process dies). */
export function silentClient(onRequest: () => void): ModelClient {
  return {
    complete(): Promise<ModelResponse> {
      onRequest()
      return new Promise<ModelResponse>(() => undefined)
    },
  }
}

export const echoTool: ToolDefinition = {
  name: 'echo',
  description: 'Echoes its input',
  inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
  async execute(input) {
    return input
  },
}

/** The run input of invocation `index` (its own session). */
export function runInput(prefix: string, index: number, maxSteps = STEPS + 1): RunInput {
  return {
    invocation: invocationFor(prefix, index),
    provider: { kind: 'openai-chat', baseUrl: 'http://127.0.0.1:9/v1', model: 'bench-model' },
    configuration: { cwd: '/srv/agent/workspace' },
    mainOutputLimit: 1024,
    maxSteps,
    tools: [echoTool],
    work: { kind: 'message', content: 'Summarise the open issues of the repository and file a report.' },
  }
}
