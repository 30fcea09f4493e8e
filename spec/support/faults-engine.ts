/**
 * Helpers shared by the fault suites (`spec/faults-*.test.ts`): run inputs against a scripted
 * server, a tool that counts its effects, and compact renderings of fact sequences so a test can
 * assert the exact sequence of an invocation in one line.
 */
import { OpenAIChatClient, type Fact, type HandoffIntent, type ModelClient, type RunInput, type StoredEvent, type ToolDefinition } from '../../index.js'

/** The cwd of every fault run (never touched on disk). */
export const CWD = '/workspace/faults'

/** A tool that counts its executions and echoes its input. */
export interface EffectTool extends ToolDefinition {
  readonly runs: string[]
}

/** An `echo` tool whose every execution is recorded by operation id. */
export function effectTool(name = 'echo'): EffectTool {
  const runs: string[] = []
  return {
    name,
    description: 'Echoes its input',
    inputSchema: { type: 'object', properties: { value: { type: 'number' } } },
    runs,
    async execute(input, { operationId }) {
      runs.push(operationId)
      return input
    },
  }
}

/** A message run in session `session-<name>` (ids derived from `name`). */
export function messageRun(baseUrl: string, name: string, tools: ToolDefinition[], extra: Partial<RunInput> = {}): RunInput {
  return {
    invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted' },
    configuration: { cwd: CWD },
    maxSteps: 4,
    tools,
    work: { kind: 'message', content: `question ${name}` },
    ...extra,
  }
}

/**
 * A message run for the secrets suites (ids derived from `name`): no tools and the default step
 * budget unless `extra` gives them, a main output limit of 100.
 */
export function secretsRun(baseUrl: string, name: string, extra: Partial<RunInput> = {}): RunInput {
  return {
    invocation: { sessionId: `session-${name}`, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` },
    provider: { kind: 'openai-chat', baseUrl, model: 'scripted' },
    configuration: { cwd: CWD },
    mainOutputLimit: 100,
    tools: [],
    work: { kind: 'message', content: `question ${name}` },
    ...extra,
  }
}

/**
 * A client that holds `key` itself (as an SDK client made with it does) and declares `secrets` (any
 * value, so a suite can declare one the engine must refuse); the run's provider gives no key.
 */
export function holdingClient(key: string, secrets: unknown): (provider: RunInput['provider']) => ModelClient {
  return (provider) => {
    const inner = new OpenAIChatClient({ ...provider, apiKey: key })
    return { secrets: secrets as readonly string[], complete: (request) => inner.complete(request) }
  }
}

/** A handoff intent whose successor ids derive from `name`. */
export function intentFor(name: string, rootRunId: string): HandoffIntent {
  return {
    handoffId: `handoff-${name}`,
    hostEpoch: 'epoch-1',
    rootRunId,
    successorRunId: `run-${name}-successor`,
    successorInvocationId: `invocation-${name}-successor`,
    claimId: `claim-${name}`,
  }
}

/** One fact as a short string: its type, with the status or reason that tells outcomes apart. */
export function brief(fact: Fact): string {
  switch (fact.type) {
    case 'model.interrupted':
      return `${fact.type}:${fact.status}`
    case 'tool.settled':
      return `${fact.type}:${fact.outcome.status}`
    case 'tool.rejected':
      return `${fact.type}:${fact.reason}`
    case 'invocation.ended':
      return `${fact.type}:${fact.outcome.status === 'failed' ? `failed/${fact.outcome.class}` : fact.outcome.status}`
    default:
      return fact.type
  }
}

/** The brief facts of one invocation, in log order. */
export function sequenceOf(events: readonly StoredEvent[], invocationId: string): string[] {
  return events.filter((stored) => stored.event.invocation.invocationId === invocationId).map((stored) => brief(stored.event.fact))
}

/** Everything larger than any fault-suite log. */
export const ALL = { events: 1_000_000, bytes: 1 << 30 } as const
