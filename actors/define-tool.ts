/**
 * `defineTool`: a tool whose `execute` is given its input typed, parsed by a function of yours (a zod
 * schema's `parse`, say), as a plain `ToolDefinition` that a run's `tools` takes beside any other.
 *
 * Why not a generic `ToolDefinition<Input>`: `execute` is a property, so under `strictFunctionTypes`
 * a `ToolDefinition<{ order: string }>` is no `ToolDefinition<unknown>` (its `execute` cannot take
 * every input), and a list of tools of several inputs would not type-check; as a method it would, but
 * then nothing would check that the input is what `execute` claims. Here the parse does: the type
 * is what it returns.
 */
import type { ToolContext, ToolDefinition } from './tool-catalog.js'
import { type OutcomeUnknownError, isOutcomeUnknown } from './outcome-unknown.js'

/** What {@link defineTool} takes: a tool, its input parsed by `parseInput` for `execute` (and a `needsApproval` predicate). */
export interface TypedToolDefinition<Input> extends Omit<ToolDefinition, 'execute' | 'needsApproval'> {
  /**
   * Makes the typed input of the model's arguments (parsed JSON, checked against `inputSchema` first
   * unless `validateInput` is `false`), or throws: `Refund.parse` of a zod schema `Refund`. It may
   * return a promise (`Refund.parseAsync`, for a schema with async refinements): it is awaited, and
   * `Input` is what it resolves to. A throw or a rejection is the call's failure, as `execute`'s is
   * (the call settles `failed` and the model is told), and `execute` is not run: an
   * {@link OutcomeUnknownError} too, since nothing ran whose outcome could be unknown.
   */
  parseInput: (input: unknown) => Input | PromiseLike<Input>
  /** As `ToolDefinition.needsApproval`, its predicate given the parsed input (a parse that throws or rejects asks). */
  needsApproval?: boolean | ((input: Input) => boolean | Promise<boolean>) | undefined
  /** As `ToolDefinition.execute`, given the parsed input. */
  execute: (input: Input, context: ToolContext) => unknown
}

/**
 * A `ToolDefinition` whose `execute` gets its input as `parseInput` makes it: the tool as given,
 * without `parseInput`, its `execute` (and a `needsApproval` predicate) running the parse first
 * (and awaiting it, when it returns a promise). Each member is read once, here.
 *
 * `Input` is inferred from `parseInput`, which TypeScript reads before the members that use it only
 * when it comes first or is no inline function with an untyped parameter: `parseInput: Refund.parse`
 * may come anywhere, but an inline `parseInput: (raw) => Refund.parse(raw)` written after `execute`
 * or `needsApproval` leaves their input `unknown` (TS18046). Give `parseInput` first, or annotate
 * its parameter: `(raw: unknown) => Refund.parse(raw)`.
 *
 * @example
 * ```ts
 * const Refund = z.object({ order: z.string(), cents: z.number().int().positive() })
 * const refund = defineTool({
 *   name: 'refund',
 *   inputSchema: z.toJSONSchema(Refund),
 *   parseInput: Refund.parse,
 *   needsApproval: (input) => input.cents > 10_000,
 *   execute: (input, { operationId }) => payments.refund(input.order, input.cents, { idempotencyKey: operationId }),
 * })
 * await engine.start({ ...settings, tools: [refund, lookupOrder], invocation, work })
 * ```
 */
export function defineTool<Input>(definition: TypedToolDefinition<Input>): ToolDefinition {
  const { parseInput, execute, needsApproval, ...tool } = definition
  if (typeof parseInput !== 'function') throw new TypeError('defineTool: parseInput must be a function of the input (a zod schema\'s parse, say)')
  if (typeof execute !== 'function') throw new TypeError('defineTool: execute must be a function of the parsed input and the context')
  // A parse that returns a promise is awaited, so that its rejection fails the call before `execute`
  // runs; a synchronous one is used as it is (no microtask added).
  const parsed = <R>(input: unknown, then: (value: Input) => R | Promise<R>): R | Promise<R> => {
    let value: Input | PromiseLike<Input>
    try {
      value = parseInput(input)
    } catch (error) {
      throw parseFailure(error)
    }
    return isThenable(value) ? Promise.resolve(value).then(then, (error: unknown) => Promise.reject(parseFailure(error))) : then(value)
  }
  return {
    ...tool,
    ...(needsApproval === undefined ? {} : { needsApproval: typeof needsApproval === 'function' ? (input: unknown) => parsed(input, needsApproval) : needsApproval }),
    execute: (input, context) => parsed(input, (value) => execute(value, context)),
  }
}

/**
 * What a throw of `parseInput` is passed on as: itself, but an {@link OutcomeUnknownError} as a
 * plain error of the same name, message and cause. `execute` was not run, so nothing can be
 * uncertain: the call fails (the model told), as the parse's other failures do, and the session is
 * not held for a reconciliation of an effect that never happened.
 */
function parseFailure(error: unknown): unknown {
  if (!isOutcomeUnknown(error)) return error
  try {
    const { name, message, cause } = error as Error
    const plain = new Error(String(message), cause === undefined ? undefined : { cause })
    plain.name = String(name)
    return plain
  } catch {
    return new Error('parseInput threw an OutcomeUnknownError that cannot be read')
  }
}

/** Whether `value` is a promise or another thenable (what `await` would wait for). */
function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function'
}
