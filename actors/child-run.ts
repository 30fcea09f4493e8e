/**
 * Agents that call agents: the ids of the run a tool call starts for another agent (a child run),
 * made from the call's operation id, so that the same call always names the same child and a
 * reconciliation that holds only the operation id finds it.
 */
import { FactstateError } from '../errors.js'
import { ID_PATTERN, invocationSchema } from '../facts/schema.js'
import type { Invocation, ParentCall } from '../facts/types.js'
import { messageOf } from '../store/encoding.js'
import { fitted } from './handoff.js'
import type { ToolContext } from './tool-catalog.js'

/** What `childRunFor` gives: spread it into the child's run input (`{ ...childRunFor(context, 'writer'), provider, … }`). */
export interface ChildRun {
  /** The child run's ids, `childRunOf(context.operationId, name)`. */
  invocation: Invocation
  /** The call that starts it, recorded in the child's `invocation.opened`: the tool's own run and operation id. */
  parent: ParentCall
}

/** An operation id as the engine makes it: `<invocationId>/<stepId>/<index>`, the step id without a dot. */
const OPERATION_ID = /^([A-Za-z0-9._:-]{1,128})\/([A-Za-z0-9_:-]{1,256})\/(0|[1-9][0-9]{0,9})$/

type Field = 'context' | 'operationId' | 'name'

const refused = (call: string, field: Field, why: string, cause?: unknown) =>
  new FactstateError('RUN_INVALID_INPUT', `${call}: ${why}`, { ...(cause === undefined ? {} : { cause }), details: { field, fields: [field] } })

function childIds(call: string, operationId: unknown, name: unknown, field: Field): Invocation {
  const parts = typeof operationId === 'string' ? OPERATION_ID.exec(operationId) : null
  if (parts === null) {
    throw refused(call, field, `${field === "context" ? "context.operationId" : field} must be a tool call's operation id, <invocationId>/<stepId>/<index> as the engine makes it (a tool's context.operationId, an UncertainOperation's operationId)`)
  }
  // Without a dot, the name is what follows the last dot of the child's ids, and the step id and the
  // index the two parts before it (neither has a dot): two calls, or two children of one call, never
  // get one id.
  if (typeof name !== 'string' || !ID_PATTERN.test(name) || name.includes('.')) {
    throw refused(call, 'name', 'name must be an id without a dot: 1–128 characters from [A-Za-z0-9_:-] (the child ids join it to the operation id with one)')
  }
  const [, invocationId, stepId, index] = parts
  const id = fitted(`${invocationId}.${stepId}.${index}.${name}`)
  return { sessionId: id, turnId: id, runId: id, invocationId: id }
}

/**
 * The ids of the child run that the tool call `operationId` starts under `name` (the agent it runs,
 * say `writer`): session, turn, run and invocation are all `<invocationId>.<stepId>.<index>.<name>`
 * (the operation id with its slashes as dots; past 128 characters cut, ending with a digest of the
 * whole). What `childRunFor` gives the tool, made from what a reconciliation holds: an uncertain
 * call's `operationId` (`RUN_RECONCILIATION_REQUIRED`'s `details.unknown`, `recoverInvocations`'
 * `onClosed`) and the name, from the call's recorded `input` when the model chose the agent. Then
 * `log.runs(child.sessionId)` lists what the child did (empty: it never started). `RUN_INVALID_INPUT`
 * (`details.field`: `operationId`, `name`) for what is not an operation id the engine makes, or a
 * name that is not an id without a dot.
 *
 * @example
 * ```ts
 * for (const op of error.details.unknown) {
 *   const child = childRunOf(op.operationId, (op.input as { specialist: string }).specialist)
 *   const runs = await log.runs(child.sessionId) // [] when the call crashed before the child started
 * }
 * ```
 */
export function childRunOf(operationId: string, name: string): Invocation {
  return childIds('childRunOf', operationId, name, 'operationId')
}

/**
 * The child run a tool call starts for another agent: its ids, `childRunOf(context.operationId, name)`,
 * the same for the same call every time (so a crashed call's child can be found, and a call never
 * starts two children under one name), and its `parent`, the call (`context.invocation`,
 * `context.operationId`), which the child's run records. Spread it into the child's run input, and pass
 * `context.signal` as its signal so that cancelling the caller cancels the child. `RUN_INVALID_INPUT`
 * (`details.field`: `context`, `name`) for what is not a tool's context or a name without a dot.
 *
 * @example
 * ```ts
 * execute: async ({ task }, context) => {
 *   const child = await engine.start({ ...childRunFor(context, 'writer'), provider, configuration, tools, work: { kind: 'message', content: task } }, { signal: context.signal })
 *   const outcome = await child.wait()
 *   return { status: outcome.status, answer: answerOf(await log.invocationEvents(child.invocation.invocationId)) }
 * }
 * ```
 */
export function childRunFor(context: ToolContext, name: string): ChildRun {
  let operationId: unknown
  let invocation: ReturnType<typeof invocationSchema.safeParse>
  try {
    if (typeof context !== 'object' || context === null) throw refused('childRunFor', 'context', "context must be the tool's context (its second argument)")
    operationId = context.operationId
    invocation = invocationSchema.safeParse(context.invocation)
  } catch (error) {
    if (error instanceof FactstateError) throw error
    throw refused('childRunFor', 'context', `childRunFor could not read its context: ${messageOf(error)}`, error)
  }
  if (!invocation.success) throw refused('childRunFor', 'context', "context.invocation must be the calling run's invocation ({ sessionId, turnId, runId, invocationId })")
  const ids = childIds('childRunFor', operationId, name, 'context')
  const parent = invocation.data
  if (!(operationId as string).startsWith(`${parent.invocationId}/`)) {
    throw refused('childRunFor', 'context', "context.operationId must be one of context.invocation's operations (<invocationId>/<stepId>/<index>)")
  }
  return { invocation: ids, parent: { invocation: { ...parent }, operationId: operationId as string } }
}
