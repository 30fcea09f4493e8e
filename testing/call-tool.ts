import { admittedCall, DEFAULT_MAX_TOOL_RESULT_BYTES, engineSecrets, toolLimitProblem, toolSecretProblem } from '../actors/engine.js'
import { ABANDONED, notWaitedFor, runToolCall, uncertainMessage } from '../actors/invocation-actor.js'
import { redact, redactArguments, redactData, redactFailure, secretsOf, withToolSecret } from '../actors/redaction.js'
import { toolProblem } from '../actors/run-input.js'
import { argumentsOf, unusableMessage } from '../actors/tool-arguments.js'
import type { ToolDefinition } from '../actors/tool-catalog.js'
import { deliver } from '../actors/model-text.js'
import { progressValue, type ToolProgressUpdate } from '../actors/tool-progress.js'
import { FactstateError, messageWithoutCode } from '../errors.js'
import { describeIssues, invocationSchema, safeParseNow } from '../facts/schema.js'
import type { Invocation } from '../facts/types.js'
import { readOptions } from '../options.js'

/** Options of {@link callTool}: what the engine would give the call. */
export interface CallToolOptions {
  /** The run the call serves, the tool's `context.invocation` (default: `session-1`, `turn-1`, `run-1`, `invocation-1`). */
  invocation?: Invocation | undefined
  /** The call's `context.operationId` (default `<invocationId>/step-1/0`, the id of a run's first call). */
  operationId?: string | undefined
  /** Aborting it aborts the tool's `context.signal`, as a cancel or the log's close would. */
  signal?: AbortSignal | undefined
  /** The engine's `toolTimeoutMs`: the limit of a tool without a `timeoutMs` of its own (its `context.timeoutMs`). */
  toolTimeoutMs?: number | undefined
  /** The engine's `maxToolResultBytes` (default 4 MiB, as the engine's). */
  maxToolResultBytes?: number | undefined
  /** The engine's `secrets` (your tools' own keys): removed from the outcome as a run removes them from its facts. */
  secrets?: readonly string[] | undefined
  /**
   * Receives what the tool reports with `context.progress(value)`, as a run's
   * `StartOptions.onToolProgress` would (made JSON, copied, redacted of the `secrets` option's values and
   * of what the tool added), with the call's `operationId`, `name`, `attempt` and the update's `index`
   * (from 0, over all attempts). As there, what it throws is ignored: collect the updates and assert
   * after the call. Without it, a value `progress` refuses still throws `TOOL_PROGRESS_INVALID` to the tool.
   */
  onToolProgress?: ((update: CallToolProgress) => void) | undefined
}

/** What {@link CallToolOptions.onToolProgress} gets: a run's `ToolProgressUpdate` without the ids a call outside a run has none of. */
export type CallToolProgress = Pick<ToolProgressUpdate, 'operationId' | 'name' | 'attempt' | 'index' | 'value'>

/** What the engine would record of one call (see {@link callTool}). */
export type ToolCallOutcome =
  /** `tool.settled{succeeded}` with this `output`: what the model is shown. */
  | { status: 'succeeded'; output: unknown }
  /** `tool.settled{failed}` with this `message`: the tool threw (or its result could not be recorded). */
  | { status: 'failed'; message: string }
  /** `tool.rejected{invalid_input}`: the arguments are not JSON or the tool's input schema refuses them; the tool was not called. */
  | { status: 'rejected'; reason: 'invalid_input'; message: string }
  /** `tool.rejected{cancelled}`: the `signal` option had aborted before the call; the tool was not called, as a cancelled run starts no call. */
  | { status: 'rejected'; reason: 'cancelled' }
  /**
   * A tool with effects not settled within its time limit and the grace after it: left dispatched, an
   * unknown outcome for its session to reconcile. A `readOnly` tool is `failed` then, as a run records it.
   */
  | { status: 'abandoned'; message: string }
  /**
   * A tool with effects (not `readOnly`) threw an `OutcomeUnknownError` (it cannot tell whether its
   * effect happened), or threw once its signal had aborted (its time limit, or the `signal` option):
   * the abort may have cut short an effect that happened. A run leaves such a call dispatched, an
   * unknown outcome for its session to reconcile. A tool that knows what happened returns it instead.
   */
  | { status: 'unknown'; message: string }

const OPTIONS = ['invocation', 'operationId', 'signal', 'toolTimeoutMs', 'maxToolResultBytes', 'secrets', 'onToolProgress'] as const
const DEFAULT_INVOCATION: Invocation = Object.freeze({ sessionId: 'session-1', turnId: 'turn-1', runId: 'run-1', invocationId: 'invocation-1' })

const invalid = (message: string, field: string) => new FactstateError('TESTING_INVALID_OPTIONS', `callTool: ${message}`, { details: { field } })

/**
 * Calls one tool as the engine calls it for a model's tool call, without a model or a log: the
 * arguments (a JSON text as a model sends them, or a value, JSON-encoded first) are parsed and checked
 * against the tool's input schema with the engine's own check, then `execute` runs with a context
 * (`signal`, `operationId`, `attempt`, `timeoutMs`, `invocation`) under the tool's `timeoutMs` (else
 * `toolTimeoutMs`) for each attempt, which is its `context.timeoutMs`, retried as its `retry` asks (as a run retries it: the same `operationId`), and its
 * result becomes what the engine would record: plain JSON (a Date as its text, a BigInt as decimal
 * text), a failure for a result over `maxToolResultBytes` or not JSON. Approval is not asked: the call
 * runs as an approved one; what it reports with `context.progress` goes to `onToolProgress`. A tool or options the engine would refuse are `TESTING_INVALID_OPTIONS`
 * (`details.field`), before the tool is called.
 */
export async function callTool(tool: ToolDefinition, args: unknown, options: CallToolOptions = {}): Promise<ToolCallOutcome> {
  // Checked as given, then called as the copy a run would admit: its timeoutMs and retry read once and
  // checked again, so that a getter cannot give the check one value and the call another.
  let called: ToolDefinition
  let check: ((input: unknown) => string | undefined) | undefined
  try {
    const problem = toolProblem(tool, 'tool')
    if (problem !== undefined) throw new FactstateError('TESTING_INVALID_OPTIONS', `callTool: ${problem.message}`, { details: { field: problem.fields[0] ?? 'tool' } })
    ;({ tool: called, check } = admittedCall(tool))
  } catch (error) {
    if (error instanceof FactstateError && error.code === 'TESTING_INVALID_OPTIONS') throw error
    // The engine refuses such a tool with RUN_INVALID_INPUT when a run is started with it; a getter or a proxy trap that throws, as the run input that cannot be read.
    if (error instanceof FactstateError) {
      const field = (error.details?.fields as string[] | undefined)?.[0] ?? 'tools.0'
      throw new FactstateError('TESTING_INVALID_OPTIONS', `callTool: ${messageWithoutCode(error).replaceAll(/\btools\.0\b/g, 'tool')}`, { cause: error, details: { field: field.replace(/^tools\.0/, 'tool') } })
    }
    throw new FactstateError('TESTING_INVALID_OPTIONS', `callTool: the tool cannot be read: ${error instanceof Error ? error.message : String(error)}`, { cause: error, details: { field: 'tool' } })
  }
  const given = readOptions(options, OPTIONS, { call: 'callTool', code: 'TESTING_INVALID_OPTIONS', details: (field) => ({ field }) })
  const invocation = invocationOf(given.invocation)
  const operationId = given.operationId ?? `${invocation.invocationId}/step-1/0`
  if (typeof operationId !== 'string' || operationId === '') throw invalid('operationId must be a non-empty string', 'operationId')
  const signal = given.signal ?? new AbortController().signal
  let isSignal: boolean
  try {
    isSignal = signal instanceof AbortSignal
  } catch {
    // A revoked proxy throws even for instanceof.
    isSignal = false
  }
  if (!isSignal) throw invalid('signal must be an AbortSignal', 'signal')
  for (const field of ['toolTimeoutMs', 'maxToolResultBytes'] as const) {
    const problem = toolLimitProblem(field, given[field])
    if (problem !== undefined) throw invalid(`${field} must be ${problem}`, field)
  }
  const toolTimeoutMs = given.toolTimeoutMs
  const maxToolResultBytes = given.maxToolResultBytes ?? DEFAULT_MAX_TOOL_RESULT_BYTES
  // Redacted as a run's facts are: failures by the secrets' pieces too, data of them whole.
  const declared = engineSecrets(given.secrets, (field, what) => invalid(`${field} must be ${what}`, field))
  let secrets = secretsOf({ headers: declared })
  // A run with these secrets refuses a tool that would show the model one of them.
  const shown = toolSecretProblem(called, 'tool', declared)
  if (shown !== undefined) throw invalid(shown.message, shown.fields[0] as string)
  // Read when used: a secret the tool adds (`context.addSecret`) redacts the outcome too, whichever attempt it comes from.
  const failureSecrets = () => secrets.inToolFailures ?? secrets.inData
  const addSecret = (secret: unknown) => {
    secrets = withToolSecret(secrets, secret)
  }
  const receiver = given.onToolProgress
  if (receiver !== undefined && typeof receiver !== 'function') throw invalid('onToolProgress must be a function ((update) => void)', 'onToolProgress')
  let updates = 0
  const progress =
    receiver === undefined
      ? undefined
      : (text: string, attempt: number) => {
          const update: CallToolProgress = { operationId, name: called.name, attempt, index: updates++, value: progressValue(text, secrets.inData) }
          deliver(() => (receiver as (update: CallToolProgress) => unknown)(update))
        }
  let text: string | undefined
  try {
    text = typeof args === 'string' ? args : JSON.stringify(args)
  } catch (error) {
    throw invalid(`the arguments cannot be encoded as JSON (${error instanceof Error ? error.message : String(error)})`, 'args')
  }
  if (text === undefined) throw invalid('the arguments must be a JSON text or a value JSON can encode', 'args')
  const taken = argumentsOf(text)
  if (!('input' in taken)) {
    // The message a run records: from the arguments as a run keeps them (their string literals redacted of the secrets), redacted again as a message.
    const kept = argumentsOf(redactArguments(text, secrets.inData))
    return { status: 'rejected', reason: 'invalid_input', message: unusableMessage('input' in kept ? taken : kept, (reason) => redact(reason, secrets)) }
  }
  const wrong = check?.(taken.input)
  if (wrong !== undefined) return { status: 'rejected', reason: 'invalid_input', message: wrong }
  if ((signal as AbortSignal).aborted) return { status: 'rejected', reason: 'cancelled' }
  const limits = { toolTimeoutMs: toolTimeoutMs as number | undefined, maxToolResultBytes: maxToolResultBytes as number }
  const result = await runToolCall(called, taken.input, signal as AbortSignal, { operationId, invocation, addSecret, progress }, limits, (message) => redactFailure(message, failureSecrets()))
  if (result === ABANDONED) {
    const timeoutMs = (called.timeoutMs ?? limits.toolTimeoutMs) as number
    return {
      status: 'abandoned',
      message: `tool ${called.name} ${notWaitedFor(timeoutMs)}`,
    }
  }
  if (!result.ok && result.uncertain !== undefined) return { status: 'unknown', message: uncertainMessage(called.name, { ...result, uncertain: result.uncertain }) }
  return result.ok ? { status: 'succeeded', output: redactData(result.value, secrets.inData) } : { status: 'failed', message: redactFailure(result.message, failureSecrets()) }
}

function invocationOf(given: unknown): Invocation {
  if (given === undefined) return { ...DEFAULT_INVOCATION }
  let parsed: ReturnType<typeof invocationSchema.safeParse>
  try {
    parsed = safeParseNow(invocationSchema, given)
  } catch (error) {
    // A getter or a proxy that refuses to be read: not an invocation.
    throw invalid(`invocation cannot be read: ${error instanceof Error ? error.message : String(error)}`, 'invocation')
  }
  if (!parsed.success) throw invalid(`invocation: ${describeIssues(parsed.error)}`, 'invocation')
  return parsed.data as Invocation
}
