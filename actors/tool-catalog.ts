import { contentDigest } from '../store/digest.js'
import type { Invocation, ToolCatalogSummary } from '../facts/types.js'
import { FactstateError } from '../errors.js'
import { shown } from '../options.js'
import { messageOf } from '../store/encoding.js'
import type { NeedsApproval } from './approval.js'
import type { ChatRequestBody } from './model-client.js'
import { firstHole, toolProblem } from './run-input.js'

/**
 * A tool the model may call. Its `execute` runs at most once per dispatched call; with `retry`, once
 * per attempt, each after the one before it has settled, all under the call's one `operationId`.
 */
export interface ToolDefinition {
  /** The name the model calls it by: 1–64 characters from `[A-Za-z0-9_-]`, unique in the run. Sealed (in the catalog digest). */
  name: string
  /** What the tool does, shown to the model. Sealed (in the catalog digest). */
  description?: string | undefined
  /**
   * A JSON Schema object describing the input, sent to the model as the function's parameters. A
   * call whose input does not match it (JSON Schema 2020-12) is not run: it is
   * `tool.rejected{invalid_input}` with a `message` saying what is wrong, and the model is told so
   * (it may call again). A schema that cannot be used (a `$ref` to nothing) refuses the run.
   */
  inputSchema?: object | undefined
  /**
   * `false` sends `inputSchema` to the model but does not check calls against it (default `true`).
   * Not part of the catalog digest: what the model is shown is unchanged.
   */
  validateInput?: boolean | undefined
  /**
   * The tool has no side effect (a search, a read): when a crash leaves a call of it unsettled, its
   * outcome is still unknown (the run ends `outcome_unknown`, the call is listed as uncertain), but
   * the session needs no reconciliation for it, and a continuation tells the model it may call it
   * again. A call of it that throws, or is not waited for past its `timeoutMs`, settles `failed` and
   * the run goes on. Recorded in each `tool.dispatched` fact (`readOnly: true`), so recovery in another
   * process knows. Not part of the catalog digest: what the model is shown is unchanged.
   */
  readOnly?: boolean | undefined
  /**
   * Each call of the tool waits for the run's approver (`StartOptions.onApproval`) before it is
   * dispatched: `true`, or a predicate of the call's input (one that throws asks too). Approved, the
   * call is dispatched with the decision recorded in its `tool.dispatched` (`approval`); denied, it is
   * `tool.rejected{denied}`, and the model is told why. Not part of the catalog digest.
   */
  needsApproval?: NeedsApproval | undefined
  /**
   * The longest a call (with `retry`, each attempt of it) may run, in whole milliseconds (1 to 2,147,483,647; default: no limit). Past
   * it the call's `context.signal` aborts with a `TimeoutError` ("the tool did not finish within
   * 30,000 ms (its timeoutMs)"), and what the tool then returns is recorded as usual; what it throws
   * is recorded only for a `readOnly` tool, and leaves a tool with effects uncertain (the run ends
   * `failed{outcome_unknown}`: its effect may have happened before the abort cut it short). A tool
   * that has not settled 1 s later is not waited for: the run ends `failed{outcome_unknown}` with the
   * call left uncertain, as a crash leaves it (the session needs reconciliation before its next
   * message), unless the tool is `readOnly`: its call then settles `failed` ("… and was not waited
   * for"), the model is told, and the run goes on. A tool with effects left so ends the whole run: with
   * `toolConcurrency`, the calls beside it are told to stop first (their signals abort, whatever their
   * own limits) and settle as they answer. Bounds a cancel's and `drain()`'s wait for the tool too.
   * Not part of the catalog digest.
   */
  timeoutMs?: number | undefined
  /**
   * Retries a call whose attempt threw, within the one dispatch: every attempt gets the call's same
   * `context.operationId` (and `context.attempt`, 1-based), so setting it declares that running the
   * tool again under that key is safe (the service the tool calls deduplicates by it, or the tool
   * has no effect). One `tool.dispatched` and one `tool.settled` are recorded whatever the attempts,
   * the settlement with the last attempt's outcome; a failure after more than one attempt says how
   * many were made (`after 3 attempts: …`). Default: no retry. Not part of the catalog digest.
   */
  retry?: ToolRetry | undefined
  /**
   * Runs the call. `input` is the model's arguments as parsed JSON, checked against `inputSchema`
   * when there is one. It is still typed `unknown`, and `execute` is a property (not a method) so that
   * TypeScript refuses an `execute` that claims a narrower type: narrow it yourself (with zod, say).
   * It returns the result or a promise of it; a rejection (or a throw) is the tool's failure. The
   * result is recorded as JSON makes it (an `Error` returned as its name, message and own members);
   * one that is or holds what JSON would write as `{}` though it holds more (a Map, a Set, a
   * Response, a Promise, a class instance whose data is in getters) or as a number for each byte (a
   * Buffer, a typed array) is a result that could not be recorded, its message saying what to
   * return instead: return binary data as base64 text.
   */
  execute: (input: unknown, context: ToolContext) => unknown
}

/**
 * How a tool's call is retried within its dispatch (`ToolDefinition.retry`); named as the model
 * request's retries are (`ModelExecutorOptions`). Only an attempt that threw is retried, and only
 * once it has settled: never one whose result could not be recorded (the tool ran), one not waited
 * for past its `timeoutMs` (it may still be running), one of a tool with effects that threw once its
 * signal had aborted (its effect may have happened: the run ends `outcome_unknown` as without
 * retries), nor once the run's signal has aborted. `timeoutMs` limits each attempt on its own: a
 * `readOnly` tool's attempt that threw when its time ran out is retried. The waits between attempts
 * are no safe point (the call is dispatched and not settled): a hold reserved then, and `drain()`,
 * wait them out, so keep them short for runs that may be held. A tool that starts a child run
 * (`childRunFor`) gets the child's same ids on every attempt: on `context.attempt > 1`, look the
 * child up (`engine.running`, `log.runs`) instead of starting it again, which is refused.
 *
 * @example
 * ```ts
 * const charge: ToolDefinition = {
 *   name: 'charge',
 *   retry: { retries: 3, retryOn: (error) => error instanceof NetworkError },
 *   execute: (input, { operationId }) => payments.charge(input, { idempotencyKey: operationId }),
 * }
 * ```
 */
export interface ToolRetry {
  /** Retries after the first attempt: a whole number from 0 to 10 (at most `retries + 1` attempts). */
  retries: number
  /**
   * The wait before the first retry, in whole milliseconds (default 250), doubled for each further
   * one, capped by `maxBackoffMs`. A cancel (or anything else that aborts the call's signal) during
   * the wait ends it at once: no further attempt starts, and the call settles `failed` with the last
   * attempt's failure and a note of why no more were made.
   */
  backoffMs?: number | undefined
  /** The longest wait before a retry, in whole milliseconds (default 10,000; at least `backoffMs`, at most 2,147,483,647). */
  maxBackoffMs?: number | undefined
  /**
   * Whether to retry after attempt `attempt` (1-based) threw `error`: only `true` retries (default:
   * every failure is retried). Called synchronously; one that throws retries nothing, and the call's
   * failure says so ("after 1 attempt: … (no retry was made: its retryOn threw: …)", "no further retry" after a retry); an `async` one
   * retries nothing either: the promise it returns is not awaited (a rejection of it is caught and dropped).
   */
  retryOn?: ((error: unknown, attempt: number) => boolean) | undefined
}

/** What a tool is given besides its input. `operationId` is stable across crashes: use it as an idempotency key. */
export interface ToolContext {
  /**
   * Aborts when the run is cancelled or the log closes (with that reason), and once the tool's
   * `timeoutMs` has passed (a `TimeoutError`). With `toolConcurrency` above 1 it also aborts when a
   * call of the same answer fails, its fact refused by the log (the reason is then that failure, a
   * `FactstateError`, and the run is ending `failed{engine_error}`), or is not waited for past its
   * `timeoutMs` (the run is ending `failed{outcome_unknown}`). Once it has aborted, what the tool
   * returns is recorded; a throw leaves a tool with effects uncertain (its effect may have happened):
   * a tool that knows what it did returns that (`{ sent: false }`) instead of throwing the abort.
   */
  signal: AbortSignal
  /** `<invocationId>/<stepId>/<index>`, recorded in the call's `tool.dispatched`: pass it downstream as an idempotency key. */
  operationId: string
  /** Which attempt of the call this is, from 1: above 1 only for a tool with `retry` (same `operationId` on every attempt). */
  attempt: number
  /**
   * This attempt's time limit in milliseconds, counted from when `execute` was called: the tool's
   * `timeoutMs`, else the engine's `toolTimeoutMs`, else `undefined` (no limit). Each attempt of a
   * `retry` has the whole of it again. Past it `signal` aborts (a `TimeoutError`), and a tool not
   * settled 1 s later is not waited for: give a request the tool makes its own limit a little past
   * this one (as `toolsFromMcp` does), so that the engine's limit, which records the call as the
   * tool's effects require, is the one that decides. The engine and `callTool` always set it;
   * optional only so that a context made by hand (a unit test's) need not.
   */
  timeoutMs?: number | undefined
  /**
   * The run the call belongs to (`sessionId`, `turnId`, `runId`, `invocationId`; the tool's own copy):
   * whose data a tool serves, or which running invocation to reserve a hold on (see "A reviewer who
   * may take days" in the README).
   */
  invocation: Invocation
  /**
   * Declares a secret the tool got while it ran (an access token it exchanged its key for, a
   * credential fetched from a vault), which `EngineOptions.secrets` could not name: from this call
   * on it is removed from everything the run records, as the engine's secrets are: from this call's
   * settlement (what it returns, or throws even after adding it, whichever attempt of a `retry` that
   * is), from what later calls of the run return and throw, and from the model's answers and
   * approvers' text; whole from data, and in every form and by its pieces of 8 characters or more from
   * failure messages. Call it as soon as the tool has the value, before anything may quote it; again
   * for the same value is free. For the rest of this run only (another run, a continuation's or a
   * child's, has its tools add it again), and in memory only. `TOOL_SECRET_INVALID` (thrown here, the
   * value never quoted) for what is not a string of 8 characters or more once trimmed, one longer
   * than 16,384 characters, or past 64 or 65,536 characters together in one run.
   */
  addSecret: (secret: string) => void
  /**
   * Reports how the call is getting on (a deploy's stage, a crawl's page count), for a page to show
   * while the tool runs: passed on at once to the run's `StartOptions.onToolProgress`, and kept as the
   * call's latest in `RunningInvocation.liveToolProgress()` until it settles. Live only, never a fact:
   * nothing is written, and a crash, a reconnecting page (past `liveToolProgress()`) or another process
   * gets none of it. The value is made JSON as a result is (a Date as its text, a BigInt as decimal
   * text; none, or `undefined`, as `null`: a sign of life), copied (changing it afterwards changes nothing passed on) and
   * redacted of the run's secrets as the call's recorded result is. `TOOL_PROGRESS_INVALID` (thrown
   * here, nothing passed on) for a value JSON cannot encode, one over 65,536 bytes of JSON, or one
   * nested deeper than 64 levels: checked whether or not the run has a receiver. From when
   * `signal` has aborted (a cancel, the log's close, the time limit) and once the attempt has
   * settled, it does nothing. Cheap without a receiver (the value is encoded to be checked).
   *
   * @example
   * ```ts
   * execute: async ({ pages }, context) => {
   *   for (const [done, page] of pages.entries()) {
   *     await crawl(page, context.signal)
   *     context.progress({ done: done + 1, total: pages.length })
   *   }
   * }
   * ```
   */
  progress: (value?: unknown) => void
}

/** JSON with object keys sorted, so that equal values have one text. */
export function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => stableJson(item ?? null)).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, member]) => member !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([key, member]) => `${JSON.stringify(key)}:${stableJson(member)}`).join(',')}}`
  }
  return JSON.stringify(value)
}

/** The parameters a tool without `inputSchema` is shown with: an object with no declared members. */
const NO_INPUT_SCHEMA: Readonly<Record<string, unknown>> = Object.freeze({ type: 'object', properties: Object.freeze({}) })

/**
 * What the model is shown of a tool (name, description, input schema), as one stable text. A tool
 * without `inputSchema` is shown, and so digested, as one that states the default schema: the two
 * look the same to the model, so a seal made with one admits a successor with the other.
 */
export function shownText(tool: ToolDefinition, noSchema: object | null = NO_INPUT_SCHEMA): string {
  return stableJson({ name: tool.name, description: tool.description ?? null, inputSchema: tool.inputSchema ?? noSchema })
}

/**
 * The catalog digest builds before 2026-12-04 sealed for these tools: a tool without `inputSchema`
 * was digested with `null` for its schema. Different from {@link catalogOf}'s only when such a tool
 * is in the catalog; admission accepts it for a successor of a seal made then.
 */
export function legacyCatalogDigest(tools: readonly ToolDefinition[]): string {
  return catalogOf(tools, tools.map((tool) => shownText(tool, null))).catalogDigest
}

/**
 * The catalog summary sealed into a pause: a digest over each tool's name, description and input
 * schema (not its code), i.e. over the stable text of the list of what each is shown as, the names,
 * and each tool's own digest of its text (`digests`, in `names` order), so that a refused successor
 * can be told which tool changed. `shown` passes those texts when the caller has them already.
 */
export function catalogOf(tools: readonly ToolDefinition[], shown: readonly string[] = tools.map((tool) => shownText(tool))): Required<ToolCatalogSummary> {
  return { catalogDigest: contentDigest(`[${shown.join(',')}]`), names: tools.map((tool) => tool.name), digests: shown.map((text) => contentDigest(text)) }
}

/** How a successor's catalog differs from a seal's, by tool name: what is new, gone, or shown otherwise. */
export interface CatalogChanges {
  /** Tools the successor has and the seal does not, in the successor's order. */
  added: string[]
  /** Tools the seal has and the successor does not, in the seal's order. */
  removed: string[]
  /** Tools of both whose name, description or input schema differs, in the successor's order. */
  changed: string[]
}

/**
 * Which tools of `given` differ from `sealed`, by each tool's digest; `undefined` when the seal has
 * no per-tool digests (made by a release before them), which can name no changed tool. A name the
 * seal lists more than once or without a digest counts as changed.
 */
export function catalogChanges(sealed: ToolCatalogSummary, given: Required<ToolCatalogSummary>): CatalogChanges | undefined {
  const sealedDigests = sealed.digests
  if (sealedDigests === undefined) return undefined
  const before = new Map<string, string | undefined>()
  for (const [index, name] of sealed.names.entries()) before.set(name, before.has(name) ? undefined : sealedDigests[index])
  const now = new Set(given.names)
  return {
    added: given.names.filter((name) => !before.has(name)),
    removed: [...new Set(sealed.names)].filter((name) => !now.has(name)),
    changed: given.names.filter((name, index) => before.has(name) && before.get(name) !== given.digests[index]),
  }
}

/** The catalog as OpenAI function tools. */
export function functionTools(tools: readonly ToolDefinition[]): NonNullable<ChatRequestBody['tools']> {
  return tools.map((tool) => ({
    type: 'function' as const,
    function: {
      name: tool.name,
      ...(tool.description === undefined ? {} : { description: tool.description }),
      parameters: (tool.inputSchema ?? NO_INPUT_SCHEMA) as Record<string, unknown>,
    },
  }))
}

/**
 * {@link catalogOf} as the package exports it: what is not a list of tool definitions is
 * `RUN_INVALID_INPUT` naming the bad one (`tools.<index>…`), as a run given it would be.
 */
export function checkedCatalogOf(tools: readonly ToolDefinition[]): Required<ToolCatalogSummary> {
  let list: unknown[]
  try {
    if (!Array.isArray(tools)) throw new FactstateError('RUN_INVALID_INPUT', `catalogOf takes a list of tool definitions, not ${shown(tools)}`, { details: { fields: ['tools'] } })
    const hole = firstHole(tools)
    if (hole !== undefined) throw new FactstateError('RUN_INVALID_INPUT', `catalogOf: tools.${hole}: a hole in the list is not a tool`, { details: { fields: [`tools.${hole}`] } })
    list = [...tools]
  } catch (error) {
    if (error instanceof FactstateError) throw error
    throw new FactstateError('RUN_INVALID_INPUT', `catalogOf could not read its tools: ${messageOf(error)}`, { cause: error, details: { fields: ['tools'] } })
  }
  for (const [index, tool] of list.entries()) {
    // What the digest covers only: a list of tools' descriptions, without their `execute`, has a catalog too.
    const { name, description, inputSchema } = (tool !== null && typeof tool === 'object' ? tool : {}) as Record<string, unknown>
    const problem = toolProblem({ name, description, inputSchema, execute: () => undefined }, `tools.${index}`)
    if (problem !== undefined) throw new FactstateError('RUN_INVALID_INPUT', `catalogOf: ${problem.message}`, { details: { fields: problem.fields } })
  }
  return catalogOf(list as ToolDefinition[])
}
