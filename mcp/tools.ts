/**
 * The tools an MCP server lists, as factstate tools: `toolsFromMcp(client, options?)`. No runtime
 * dependency: the client is typed by the part of `@modelcontextprotocol/sdk`'s `Client` it uses
 * (`listTools`, `callTool`), so any 1.x client (stdio, Streamable HTTP, SSE) fits, as does anything
 * shaped so.
 */
import { createHash } from 'node:crypto'
import { FactstateError, type FactstateErrorDetails } from '../errors.js'
import { kindOf, readOptions, shown } from '../options.js'
import { isAbortSignal, messageOf } from '../store/encoding.js'
import type { NeedsApproval } from '../actors/approval.js'
import { onAbort } from '../actors/abort-listeners.js'
import { OutcomeUnknownError } from '../actors/outcome-unknown.js'
import { toolProblem } from '../actors/run-input.js'
import type { ToolContext, ToolDefinition } from '../actors/tool-catalog.js'
import { inputCheckOf } from '../actors/tool-input.js'

/** The annotations an MCP server may give a tool (hints: the server's word, not a guarantee). */
export interface McpToolAnnotations {
  title?: string | undefined
  readOnlyHint?: boolean | undefined
  destructiveHint?: boolean | undefined
  idempotentHint?: boolean | undefined
  openWorldHint?: boolean | undefined
}

/** A tool as an MCP server lists it (`tools/list`), the members factstate reads. */
export interface McpTool {
  name: string
  title?: string | undefined
  description?: string | undefined
  /** A JSON Schema object (MCP requires `type: "object"`). */
  inputSchema?: object | undefined
  annotations?: McpToolAnnotations | undefined
}

/** A page of `tools/list`. */
export interface McpListToolsResult {
  tools: McpTool[]
  nextCursor?: string | undefined
}

/** The request options of the MCP SDK's client that factstate passes. */
export interface McpRequestOptions {
  signal?: AbortSignal | undefined
  /** The client's own limit on waiting for the answer, in milliseconds (the SDK's default: 60,000). */
  timeout?: number | undefined
  /** Restart `timeout` on each progress notification of the request (the SDK's default: `false`). */
  resetTimeoutOnProgress?: boolean | undefined
  onprogress?: ((progress: { progress: number; total?: number | undefined; message?: string | undefined }) => void) | undefined
}

/** What `callTool` is given. */
export interface McpCallToolParams {
  name: string
  arguments?: Record<string, unknown> | undefined
  _meta?: Record<string, unknown> | undefined
}

/** What `callTool` answers (`content` blocks, `structuredContent`, `isError`; `toolResult` of the 2024-10-07 protocol). */
export interface McpCallToolResult {
  content?: unknown
  structuredContent?: unknown
  isError?: unknown
  toolResult?: unknown
}

/**
 * The part of the MCP TypeScript SDK's `Client` (`@modelcontextprotocol/sdk/client/index.js`, 1.x)
 * that {@link toolsFromMcp} uses: a connected `Client` is one.
 */
export interface McpClient {
  listTools(params?: { cursor?: string | undefined }, options?: McpRequestOptions): Promise<McpListToolsResult>
  callTool(params: McpCallToolParams, resultSchema?: undefined, options?: McpRequestOptions): Promise<McpCallToolResult>
}

/** Options of {@link toolsFromMcp}. */
export interface McpToolsOptions {
  /**
   * Put before every mapped name (not before a `rename`'s): 1–32 characters from `[A-Za-z0-9_-]`,
   * such as `github_`, so that the tools of two servers cannot take one name.
   */
  prefix?: string | undefined
  /**
   * The name to give an MCP tool, by its MCP name: the whole name (no `prefix` is put before it),
   * 1–64 characters from `[A-Za-z0-9_-]`. Each key must be a tool the server lists.
   */
  rename?: Readonly<Record<string, string>> | undefined
  /** Which of the listed tools to make: their MCP names (each must be listed), or a predicate of each. Default: all. */
  include?: readonly string[] | ((tool: McpTool) => boolean) | undefined
  /**
   * Make a tool whose `annotations.readOnlyHint` is `true` `readOnly` (its calls then need no
   * reconciliation after a crash, and may be made again). Default `false`: a hint is the server's
   * word; give `true` only for a server you trust.
   */
  trustReadOnlyHint?: boolean | undefined
  /** Each tool's `needsApproval`: `true` for all, or a function of the MCP tool (its `annotations`) giving one (`undefined`: none). */
  needsApproval?: boolean | ((tool: McpTool) => NeedsApproval | undefined) | undefined
  /** Each tool's `timeoutMs` (1 to 2,147,483,647). */
  timeoutMs?: number | undefined
  /**
   * The MCP client's own limit on each request (`tools/list` and `tools/call`), in milliseconds.
   * Default: for a call, 5,000 past the call's time limit as the engine gives it (`context.timeoutMs`:
   * the tool's `timeoutMs`, this option's or one set on the tool, else the engine's `toolTimeoutMs`),
   * so that factstate's limit is the one that fires; for the listing, `timeoutMs` + 5,000; with no
   * limit, the SDK's own (60,000). When the call has a limit, each progress notification starts the
   * request's again (`resetTimeoutOnProgress`), and the limit bounds the whole call; without one, it
   * is the whole call's limit, progress or not (nothing else bounds it).
   */
  requestTimeoutMs?: number | undefined
  /**
   * Your word that the server does not act on a call of a tool with effects once it was sent
   * `notifications/cancelled` (it undoes, or never commits, what a cancelled call began): `true` for
   * every tool, or a function of the listed tool giving a boolean. Default `false`: a call cancelled
   * (the run's cancel, the tool's time limit) is left uncertain, as any tool's that throws once its
   * signal aborted, and the session needs reconciliation. With it, such a call returns
   * `{ done: false, reason }` (what a tool returns once its signal aborted is recorded), so a cancelled
   * run ends `cancelled` and needs none, and one past its `timeoutMs` goes on, the model told the call
   * was not done; the client's own request timeout (which cancels the request too) is the call's
   * failure. MCP's cancel is a notification nobody answers, and the SDK drops an answer that comes after
   * it: a call the server had finished as the cancel was sent is recorded as not done all the same.
   * Give it only for a server that makes that so (its effects committed by a later call of yours, say).
   */
  cancelMeansNotDone?: boolean | ((tool: McpTool) => boolean) | undefined
  /** Keep the base64 `data` of image and audio blocks and the `blob` of embedded resources in results (default `false`: their size in bytes instead). */
  keepBinaryData?: boolean | undefined
  /** Aborts the listing. */
  signal?: AbortSignal | undefined
}

/**
 * The JSON-RPC codes of the SDK's `McpError` for a request that went out and got no answer, with the
 * words the SDK gives them. A server may answer with these codes too (-32000 to -32099 are for any
 * server error: "quota exceeded"), and then it did answer: only these words (after the `MCP error
 * <code>: ` the client puts before them, once, or again for each proxy that relays them) mean no answer came.
 */
const CONNECTION_CLOSED = -32000
const REQUEST_TIMEOUT = -32001
const NO_ANSWER: Readonly<Record<number, readonly RegExp[]>> = {
  [CONNECTION_CLOSED]: [/^Connection closed$/],
  [REQUEST_TIMEOUT]: [/^Request timed out$/, /^Maximum total timeout exceeded$/],
}
const MCP_ERROR_PREFIX = /^MCP error -?[0-9]+: /
/** The SDK's words for its own request timeout, on which it sends the server `notifications/cancelled`. */
const CANCELLED_ON_TIMEOUT: readonly RegExp[] = [/^Request timed out$/]

/**
 * How the SDK 1.x refuses a result after the server answered (a tool's `outputSchema` not met): an
 * `McpError` of its own, `InvalidParams` (-32602) or `InvalidRequest` (-32600), in these words. The
 * code alone cannot tell it from a server's answer under the same code (a server refusing the
 * arguments answers -32602, having done nothing), and the SDK marks its own in no other way: the code
 * and the words must both match (after the `MCP error <code>: ` put before them, once or again per proxy).
 */
const INVALID_REQUEST = -32600
const INVALID_PARAMS = -32602
const OUTPUT_REFUSED: Readonly<Record<number, readonly RegExp[]>> = {
  [INVALID_PARAMS]: [/^Structured content does not match the tool's output schema/, /^Failed to validate structured content/],
  [INVALID_REQUEST]: [/^Tool .+ has an output schema but did not return structured content$/],
}
/**
 * The HTTP statuses to the POST of a request after which the server may have acted: a gateway's that
 * had the request and may have passed it on (502, 504), and a 500, an unexpected condition met while
 * the request was handled (an MCP server answers a failed call in JSON-RPC, not so), perhaps after its
 * effect. Not a 503 (refused: not passed on) nor a 4xx (the request refused).
 */
const UNCERTAIN_STATUSES: ReadonlySet<number> = new Set([500, 502, 504])
/** How the SDK's Streamable HTTP transport words a status that is not 2xx to the POST of a request (its `StreamableHTTPError`, the status its `code`). */
const HTTP_POST_FAILED = 'Streamable HTTP error: Error POSTing to endpoint'
/** How the SDK's SSE transport words one (a plain `Error`, the status in its words only). */
const SSE_POST_FAILED = /^Error POSTing to endpoint \(HTTP ([0-9]{3})\): /
/** The SDK's SSE server's own 500 to a message it did not pass on (its stream to the client not open): nothing done. */
const SSE_NOT_DISPATCHED = /^Error POSTing to endpoint \(HTTP 500\): SSE connection not established$/

const NAME = /^[A-Za-z0-9_-]{1,64}$/
const PREFIX = /^[A-Za-z0-9_-]{1,32}$/
const MAX_NAME = 64
const MAX_PAGES = 1_000
const MAX_MS = 2_147_483_647
/** What the request limit exceeds `timeoutMs` by, by default: factstate waits 1 s past it for the tool, then gives up. */
const REQUEST_MARGIN_MS = 5_000

const OPTIONS = ['prefix', 'rename', 'include', 'trustReadOnlyHint', 'needsApproval', 'timeoutMs', 'requestTimeoutMs', 'cancelMeansNotDone', 'keepBinaryData', 'signal'] as const

const invalidOptions = (message: string, field: string, cause?: unknown) =>
  new FactstateError('MCP_INVALID_OPTIONS', `toolsFromMcp: ${message}`, { details: { field }, ...(cause === undefined ? {} : { cause }) })
const invalidTools = (message: string, details: FactstateErrorDetails['MCP_INVALID_TOOLS'], cause?: unknown) =>
  new FactstateError('MCP_INVALID_TOOLS', `toolsFromMcp: ${message}`, { details, ...(cause === undefined ? {} : { cause }) })

/**
 * The name factstate gives the MCP tool `name`: each character outside `[A-Za-z0-9_-]` (a `.`, a
 * `/`, a space, a letter outside ASCII) becomes `_`, after `prefix`; a name longer than 64 characters
 * is cut to 55 and ends with `_` and 8 hex digits of the SHA-256 of the whole. It depends on the
 * name and the prefix only (not on the other tools, nor their order), so a server's tools get the
 * same names on every start: names are sealed in a handoff's catalog.
 */
export function mcpToolName(name: string, prefix = ''): string {
  // `u`: a code point outside the BMP (or a lone surrogate) is one `_`, not two.
  const mapped = `${prefix}${name.replace(/[^A-Za-z0-9_-]/gu, '_')}`
  if (mapped.length <= MAX_NAME) return mapped
  const digest = createHash('sha256').update(`${prefix}${name}`).digest('hex').slice(0, 8)
  return `${mapped.slice(0, MAX_NAME - 9)}_${digest}`
}

/**
 * The tools `client` lists (every page of `tools/list`), as factstate tools, in the order listed:
 * `name` mapped ({@link mcpToolName}, `prefix`, `rename`), `description` and `inputSchema` as listed,
 * `readOnly` from `annotations.readOnlyHint` only with `trustReadOnlyHint`, `needsApproval` and
 * `timeoutMs` from the options. Each call is `client.callTool({ name, arguments, _meta: {
 * idempotencyKey: operationId } }, undefined, { signal, timeout, resetTimeoutOnProgress, onprogress })` (`timeout` the `requestTimeoutMs` option,
 * else 5,000 past the call's `context.timeoutMs`, the engine's limit for it; `resetTimeoutOnProgress`
 * when the call has a limit) (a signal already aborted is thrown, its reason, before the client is asked): a result with
 * `isError` is the call's failure (its text); else its `structuredContent`, or its content (the text
 * of text blocks alone, joined by newlines; with other blocks, the list of blocks, binary data as
 * its size unless `keepBinaryData`). For a tool that is not `readOnly`, a rejection that means the
 * request went out and no answer came (`MCP error -32000: Connection closed`, `-32001: Request timed
 * out`, in the SDK's words, or relayed so by a proxy; a server's own error under those codes is its
 * answer, a failure; over HTTP, a connection that dropped once made, `fetch failed`; over Streamable
 * HTTP or SSE, a 500, 502 or 504 to the request's POST: a gateway's that may have passed it on, a
 * server's that failed while handling it) or that the client refused the answer the server gave (its `outputSchema` not met) is
 * thrown as an `OutcomeUnknownError`: the call is left uncertain for reconciliation, not told to the
 * model as a failure it would make again. With `cancelMeansNotDone` for the tool, a call the SDK
 * cancelled at the server (`notifications/cancelled`) on the tool's signal returns `{ done: false,
 * reason }`, and one it cancelled on its own request timeout is the call's failure.
 *
 * `MCP_INVALID_OPTIONS` (`details.field`) for options it cannot use, or a client without
 * `listTools` and `callTool`; `MCP_INVALID_TOOLS` (`details.reason`, `details.tools`: the MCP
 * names) when the tools listed cannot be made factstate tools as the options ask: two that map to
 * one name (`collision`), a name that is empty (`name`), a description a fact cannot hold (`description`), an input schema a run would refuse
 * (`schema`), a tool `include` or `rename` names that is not listed (`not_listed`), or a listing
 * that is not one (`listing`). A rejection of `listTools` itself is passed on as it is.
 */
export async function toolsFromMcp(client: McpClient, options?: McpToolsOptions): Promise<ToolDefinition[]> {
  const given = readOptions(options, OPTIONS, { call: 'toolsFromMcp', code: 'MCP_INVALID_OPTIONS', details: (field) => ({ field }) })
  const settings = settingsOf(given)
  let listTools: unknown
  let callTool: unknown
  try {
    listTools = client.listTools
    callTool = client.callTool
  } catch (error) {
    throw invalidOptions(`the client cannot be read: ${messageOf(error)}`, 'client', error)
  }
  if (typeof listTools !== 'function' || typeof callTool !== 'function') {
    throw invalidOptions(`client must be an MCP client with listTools and callTool (the MCP SDK's Client, connected), not ${shown(client)}`, 'client')
  }
  const listed = await listAll(client, settings)

  const byName = new Map<string, McpTool>()
  for (const tool of listed) {
    if (byName.has(tool.name)) throw invalidTools(`the server lists two tools named ${JSON.stringify(tool.name)}`, { reason: 'collision', tools: [tool.name, tool.name], name: tool.name })
    byName.set(tool.name, tool)
  }
  for (const name of Object.keys(settings.rename)) {
    if (!byName.has(name)) throw invalidTools(`rename names ${JSON.stringify(name)}, which the server does not list (it lists ${listedNames(listed)})`, { reason: 'not_listed', tools: [name] })
  }
  let chosen: McpTool[]
  const include = settings.include
  if (include === undefined) chosen = listed
  else if (typeof include === 'function') {
    chosen = listed.filter((tool) => {
      let kept: unknown
      try {
        kept = include(tool)
      } catch (error) {
        throw invalidOptions(`include threw for ${JSON.stringify(tool.name)}: ${messageOf(error)}`, 'include', error)
      }
      if (typeof kept !== 'boolean') throw invalidOptions(`include must return a boolean, not ${kindOf(kept)} (for ${JSON.stringify(tool.name)})`, 'include')
      return kept
    })
  } else {
    const missing = include.filter((name) => !byName.has(name))
    if (missing.length > 0) throw invalidTools(`include names ${missing.map((name) => JSON.stringify(name)).join(', ')}, which the server does not list (it lists ${listedNames(listed)})`, { reason: 'not_listed', tools: missing })
    const wanted = new Set(include)
    chosen = listed.filter((tool) => wanted.has(tool.name))
  }

  const taken = new Map<string, string>()
  const tools: ToolDefinition[] = []
  for (const mcp of chosen) {
    if (mcp.name === '') throw invalidTools('the server lists a tool with an empty name: leave it out with include', { reason: 'name', tools: [''] })
    const renamed = Object.hasOwn(settings.rename, mcp.name) ? settings.rename[mcp.name] : undefined
    const name = renamed ?? mcpToolName(mcp.name, settings.prefix)
    const before = taken.get(name)
    if (before !== undefined) {
      throw invalidTools(`the MCP tools ${JSON.stringify(before)} and ${JSON.stringify(mcp.name)} both map to ${JSON.stringify(name)}: give one another name with rename (rename: { ${JSON.stringify(mcp.name)}: '…' }), or leave one out with include`, {
        reason: 'collision',
        tools: [before, mcp.name],
        name,
      })
    }
    taken.set(name, mcp.name)
    tools.push(toolOf(client, mcp, name, settings))
  }
  return tools
}

interface Settings {
  prefix: string
  rename: Readonly<Record<string, string>>
  include: readonly string[] | ((tool: McpTool) => boolean) | undefined
  trustReadOnlyHint: boolean
  needsApproval: boolean | ((tool: McpTool) => NeedsApproval | undefined) | undefined
  timeoutMs: number | undefined
  requestTimeoutMs: number | undefined
  cancelMeansNotDone: boolean | ((tool: McpTool) => boolean)
  keepBinaryData: boolean
  signal: AbortSignal | undefined
}

const isMs = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 1 && value <= MAX_MS

/** The request limit a call (or the listing) bounded by `limitMs` gets by default: a little past it, so that factstate's limit fires first. */
const requestPast = (limitMs: number | undefined): number | undefined => (limitMs === undefined ? undefined : Math.min(limitMs + REQUEST_MARGIN_MS, MAX_MS))

/**
 * The time limit of the call `context` is given for: `context.timeoutMs` as the engine (or `callTool`)
 * sets it, `undefined` there meaning none; for a context made by hand without the member, the
 * `timeoutMs` option's.
 */
function callLimitOf(context: ToolContext, settings: Settings): number | undefined {
  let given: unknown
  try {
    if (!('timeoutMs' in context)) return settings.timeoutMs
    given = context.timeoutMs
  } catch {
    return settings.timeoutMs
  }
  return isMs(given) ? given : undefined
}

function settingsOf(given: { [K in (typeof OPTIONS)[number]]?: unknown }): Settings {
  const { prefix = '', rename = {}, include, trustReadOnlyHint = false, needsApproval, timeoutMs, requestTimeoutMs, cancelMeansNotDone = false, keepBinaryData = false, signal } = given
  if (typeof prefix !== 'string' || (prefix !== '' && !PREFIX.test(prefix))) throw invalidOptions(`prefix must be 1–32 characters from [A-Za-z0-9_-], not ${shown(prefix)}`, 'prefix')
  if (rename === null || typeof rename !== 'object' || Array.isArray(rename)) throw invalidOptions(`rename must be an object of MCP names to names, not ${kindOf(rename)}`, 'rename')
  const renames: Record<string, string> = {}
  const targets = new Map<string, string>()
  for (const [from, to] of Object.entries(rename)) {
    if (typeof to !== 'string' || !NAME.test(to)) throw invalidOptions(`rename.${from} must be a tool name, 1–64 characters from [A-Za-z0-9_-], not ${shown(to)}`, `rename.${from}`)
    const other = targets.get(to)
    if (other !== undefined) throw invalidOptions(`rename gives ${JSON.stringify(other)} and ${JSON.stringify(from)} one name, ${JSON.stringify(to)}`, `rename.${from}`)
    targets.set(to, from)
    renames[from] = to
  }
  let included: Settings['include']
  if (include === undefined || typeof include === 'function') included = include as Settings['include']
  else if (Array.isArray(include) && include.every((name) => typeof name === 'string')) included = [...(include as string[])]
  else throw invalidOptions(`include must be a list of MCP tool names or a function of an MCP tool, not ${kindOf(include)}`, 'include')
  if (typeof trustReadOnlyHint !== 'boolean') throw invalidOptions(`trustReadOnlyHint must be a boolean, not ${kindOf(trustReadOnlyHint)}`, 'trustReadOnlyHint')
  if (needsApproval !== undefined && typeof needsApproval !== 'boolean' && typeof needsApproval !== 'function') {
    throw invalidOptions(`needsApproval must be a boolean or a function of an MCP tool, not ${kindOf(needsApproval)}`, 'needsApproval')
  }
  if (timeoutMs !== undefined && !isMs(timeoutMs)) throw invalidOptions(`timeoutMs must be a whole number of milliseconds from 1 to 2,147,483,647, not ${shown(timeoutMs)}`, 'timeoutMs')
  if (requestTimeoutMs !== undefined && !isMs(requestTimeoutMs)) throw invalidOptions(`requestTimeoutMs must be a whole number of milliseconds from 1 to 2,147,483,647, not ${shown(requestTimeoutMs)}`, 'requestTimeoutMs')
  if (typeof cancelMeansNotDone !== 'boolean' && typeof cancelMeansNotDone !== 'function') {
    throw invalidOptions(`cancelMeansNotDone must be a boolean or a function of an MCP tool, not ${kindOf(cancelMeansNotDone)}`, 'cancelMeansNotDone')
  }
  if (typeof keepBinaryData !== 'boolean') throw invalidOptions(`keepBinaryData must be a boolean, not ${kindOf(keepBinaryData)}`, 'keepBinaryData')
  if (signal !== undefined && !isAbortSignal(signal)) throw invalidOptions(`signal must be an AbortSignal, not ${kindOf(signal)}`, 'signal')
  return {
    prefix,
    rename: renames,
    include: included,
    trustReadOnlyHint,
    needsApproval: needsApproval as Settings['needsApproval'],
    timeoutMs,
    requestTimeoutMs,
    cancelMeansNotDone: cancelMeansNotDone as Settings['cancelMeansNotDone'],
    keepBinaryData,
    signal: signal as AbortSignal | undefined,
  }
}

const listedNames = (tools: readonly McpTool[]): string => (tools.length === 0 ? 'none' : tools.map((tool) => JSON.stringify(tool.name)).join(', '))

/** A signal of its own that aborts with `signal` (with its reason) until `unlink()`. */
function linkedSignal(signal: AbortSignal): { signal: AbortSignal; unlink: () => void } {
  const controller = new AbortController()
  return { signal: controller.signal, unlink: onAbort(signal, () => controller.abort(signal.reason)) }
}

/** Every page of `tools/list`, each tool checked to be one. */
async function listAll(client: McpClient, settings: Settings): Promise<McpTool[]> {
  const tools: McpTool[] = []
  const cursors = new Set<string>()
  let cursor: string | undefined
  for (let page = 0; ; page += 1) {
    if (page === MAX_PAGES) throw invalidTools(`the server's listing went on past ${MAX_PAGES} pages`, { reason: 'listing', tools: [] })
    // A signal of the page's own, as for a call (see `call`): the SDK's listener is never removed from the one it is given.
    const own = settings.signal === undefined ? undefined : linkedSignal(settings.signal)
    const timeout = settings.requestTimeoutMs ?? requestPast(settings.timeoutMs)
    const requestOptions: McpRequestOptions = {
      ...(own === undefined ? {} : { signal: own.signal }),
      ...(timeout === undefined ? {} : { timeout }),
    }
    let result: unknown
    try {
      result = await client.listTools(cursor === undefined ? undefined : { cursor }, requestOptions)
    } finally {
      own?.unlink()
    }
    const listedTools = result !== null && typeof result === 'object' ? (result as { tools?: unknown }).tools : undefined
    if (!Array.isArray(listedTools)) throw invalidTools(`listTools answered ${kindOf(result)} without a list of tools`, { reason: 'listing', tools: [] })
    for (const [index, tool] of listedTools.entries()) tools.push(mcpToolOf(tool, index))
    const next: unknown = (result as { nextCursor?: unknown }).nextCursor
    if (next === undefined || next === null || next === '') return tools
    if (typeof next !== 'string') throw invalidTools(`listTools answered a nextCursor that is ${kindOf(next)}, not a string`, { reason: 'listing', tools: [] })
    if (cursors.has(next)) throw invalidTools(`the server gave the cursor ${JSON.stringify(next)} twice: its listing would never end`, { reason: 'listing', tools: [] })
    cursors.add(next)
    cursor = next
  }
}

/** A listed tool, read once into a copy of what factstate uses. */
function mcpToolOf(value: unknown, index: number): McpTool {
  const where = `the listed tool at ${index}`
  if (value === null || typeof value !== 'object') throw invalidTools(`${where} is ${kindOf(value)}, not a tool`, { reason: 'listing', tools: [] })
  const { name, title, description, inputSchema, annotations } = value as Record<string, unknown>
  if (typeof name !== 'string') throw invalidTools(`${where} has a name that is ${kindOf(name)}, not a string`, { reason: 'listing', tools: [] })
  if (description !== undefined && description !== null && typeof description !== 'string') throw invalidTools(`the tool ${JSON.stringify(name)} has a description that is ${kindOf(description)}`, { reason: 'listing', tools: [name] })
  if (inputSchema !== undefined && (inputSchema === null || typeof inputSchema !== 'object' || Array.isArray(inputSchema))) {
    throw invalidTools(`the tool ${JSON.stringify(name)} has an inputSchema that is ${kindOf(inputSchema)}, not a JSON Schema object`, { reason: 'schema', tools: [name] })
  }
  const hints: McpToolAnnotations = {}
  if (annotations !== null && typeof annotations === 'object') {
    for (const key of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const) {
      const hint = (annotations as Record<string, unknown>)[key]
      if (typeof hint === 'boolean') hints[key] = hint
    }
    const hinted = (annotations as Record<string, unknown>).title
    if (typeof hinted === 'string') hints.title = hinted
  }
  let schema: object | undefined
  try {
    schema = inputSchema === undefined ? undefined : (structuredClone(inputSchema) as object)
  } catch (error) {
    throw invalidTools(`the tool ${JSON.stringify(name)} has an inputSchema that cannot be copied: ${messageOf(error)}`, { reason: 'schema', tools: [name] }, error)
  }
  return {
    name,
    ...(typeof title === 'string' ? { title } : {}),
    ...(typeof description === 'string' ? { description } : {}),
    ...(schema === undefined ? {} : { inputSchema: schema }),
    ...(annotations !== null && typeof annotations === 'object' ? { annotations: hints } : {}),
  }
}

/** The factstate tool of `mcp` named `name`, checked as a run would check it. */
function toolOf(client: McpClient, mcp: McpTool, name: string, settings: Settings): ToolDefinition {
  const readOnly = settings.trustReadOnlyHint && mcp.annotations?.readOnlyHint === true
  let approval: NeedsApproval | undefined
  const needsApproval = settings.needsApproval
  if (typeof needsApproval === 'function') {
    let decided: unknown
    try {
      decided = needsApproval(mcp)
    } catch (error) {
      throw invalidOptions(`needsApproval threw for ${JSON.stringify(mcp.name)}: ${messageOf(error)}`, 'needsApproval', error)
    }
    if (decided !== undefined && typeof decided !== 'boolean' && typeof decided !== 'function') {
      throw invalidOptions(`needsApproval must give a boolean, a function of the input or undefined, not ${kindOf(decided)} (for ${JSON.stringify(mcp.name)})`, 'needsApproval')
    }
    approval = decided as NeedsApproval | undefined
  } else approval = needsApproval
  let notDone: unknown = settings.cancelMeansNotDone
  if (typeof notDone === 'function') {
    try {
      notDone = (notDone as (tool: McpTool) => unknown)(mcp)
    } catch (error) {
      throw invalidOptions(`cancelMeansNotDone threw for ${JSON.stringify(mcp.name)}: ${messageOf(error)}`, 'cancelMeansNotDone', error)
    }
    if (typeof notDone !== 'boolean') throw invalidOptions(`cancelMeansNotDone must return a boolean, not ${kindOf(notDone)} (for ${JSON.stringify(mcp.name)})`, 'cancelMeansNotDone')
  }
  // A read-only tool's throw is its failure already: nothing to be unsure of.
  const cancelMeansNotDone = notDone === true && !readOnly
  const mcpName = mcp.name
  const tool: ToolDefinition = {
    name,
    ...(mcp.description === undefined ? {} : { description: mcp.description }),
    ...(mcp.inputSchema === undefined ? {} : { inputSchema: mcp.inputSchema }),
    ...(readOnly ? { readOnly: true } : {}),
    ...(approval === undefined ? {} : { needsApproval: approval }),
    ...(settings.timeoutMs === undefined ? {} : { timeoutMs: settings.timeoutMs }),
    execute: (input, context) => call(client, mcpName, { readOnly, cancelMeansNotDone }, settings, input, context),
  }
  const problem = toolProblem(tool, 'tool')
  if (problem !== undefined) {
    // A member a fact cannot hold is named in the message only (its field is the tool's).
    const about = (member: string) => problem.fields.some((field) => field.startsWith(member)) || problem.message.startsWith(member)
    const reason = about('tool.inputSchema') ? 'schema' : about('tool.description') ? 'description' : 'name'
    throw invalidTools(`the tool ${JSON.stringify(mcpName)} (as ${name}) would be refused by a run: ${problem.message}`, { reason, tools: [mcpName], name })
  }
  if (tool.inputSchema !== undefined) {
    try {
      inputCheckOf(tool.inputSchema)
    } catch (error) {
      throw invalidTools(`the tool ${JSON.stringify(mcpName)} has an input schema a run would refuse: ${messageOf(error)}; leave it out with include`, { reason: 'schema', tools: [mcpName], name }, error)
    }
  }
  return tool
}

/** What a call of one tool is, besides its name: `readOnly`, and `cancelMeansNotDone` as decided for it. */
interface CallKind {
  readOnly: boolean
  cancelMeansNotDone: boolean
}

async function call(client: McpClient, name: string, kind: CallKind, settings: Settings, input: unknown, context: ToolContext): Promise<unknown> {
  const { signal, operationId } = context
  // Aborted before anything is sent (a cancel, the time limit): its reason, as the SDK's client throws
  // it, and before any client is asked (one shaped as McpClient might send the request all the same).
  if (signal.aborted && kind.cancelMeansNotDone) return notDone(`it was not sent: its signal had aborted (${reasonText(signal.reason)})`)
  signal.throwIfAborted()
  // The SDK adds a listener to the signal it is given and never removes it: given the run's own signal
  // (a tool without timeoutMs gets it), one would be left per call (a warning past 10), and a later cancel
  // of the run would send notifications/cancelled for every request already answered. A signal of the
  // call's own, linked to the given one only until the call settles.
  const own = linkedSignal(signal)
  // The engine's limit for this attempt (the tool's timeoutMs, else the engine's toolTimeoutMs): the
  // request's own is a little past it, so that the engine's limit, which records the call as its
  // effects require, fires first, and the SDK's default (60 s) cannot end a call the engine waits for.
  const limit = callLimitOf(context, settings)
  const timeout = settings.requestTimeoutMs ?? requestPast(limit)
  let result: McpCallToolResult
  try {
    result = await client.callTool({ name, arguments: input as Record<string, unknown>, _meta: { idempotencyKey: operationId } }, undefined, {
      signal: own.signal,
      ...(timeout === undefined ? {} : { timeout }),
      // A server that reports progress is still at work: with a limit (the engine's signal, which
      // cancels the request, bounds the whole call) the client's limit is on silence only. Without one
      // nothing else bounds the call, so the client's stays the call's limit, progress or not.
      resetTimeoutOnProgress: limit !== undefined,
      onprogress: (progress) => {
        try {
          context.progress(progress)
        } catch {
          // A report too large or not JSON is dropped: progress is live only, the call goes on.
        }
      },
    })
  } catch (error) {
    if (kind.cancelMeansNotDone) {
      const cancelled = cancelledCall(error, name, signal)
      if (cancelled !== undefined) {
        if ('failure' in cancelled) throw cancelled.failure
        return cancelled.value
      }
    }
    throw thrownFor(error, name, kind.readOnly, signal)
  } finally {
    own.unlink()
  }
  return resultOf(result, name, settings.keepBinaryData)
}

/** What a rejection of `callTool` is thrown as. */
function thrownFor(error: unknown, name: string, readOnly: boolean, signal: AbortSignal): unknown {
  // Factstate's own abort (a cancel, the time limit): it knows what a throw then means. The SDK wraps a
  // reason that is not an McpError in one (`MCP error -32001: TimeoutError: the tool did not finish…`):
  // the reason itself is thrown, so that what it says is told once.
  if (signal.aborted) return wrapsReason(error, signal.reason) ? signal.reason : error
  if (readOnly) return error
  const code = codeOf(error)
  const said = typeof code === 'number' ? noAnswer(error, code) : undefined
  if (said !== undefined) {
    const relayed = said.relayed ? ' (relayed by the server: a proxy that lost its own connection or stopped waiting)' : ''
    return code === CONNECTION_CLOSED
      ? new OutcomeUnknownError(`the MCP connection closed during the call of ${name}, after the request was sent${relayed}`, { cause: error })
      : new OutcomeUnknownError(`the MCP client stopped waiting for the call of ${name} (its request timeout) while the server may still be running it${relayed}`, { cause: error })
  }
  // Over HTTP (the SDK's Streamable HTTP and SSE transports): the connection dropped once it was made,
  // the request body sent, before the answer came (fetch's `fetch failed` or `terminated`, its cause a
  // socket error): the server may have run the call. One never made (refused, no such host) sent nothing.
  if (droppedAfterSending(error)) {
    return new OutcomeUnknownError(`the HTTP connection to the MCP server dropped during the call of ${name}, after the request was sent`, { cause: error })
  }
  // A status to the request's POST (over Streamable HTTP or SSE) after which the server may have acted: a
  // gateway's 502 or 504 (it had the request and may have passed it on), a 500 (the server, or a gateway,
  // failed while handling it). A 503, a 4xx, refused it: a failure.
  const status = postStatus(error)
  if (status !== undefined && UNCERTAIN_STATUSES.has(status)) {
    return status === 500
      ? new OutcomeUnknownError(`the MCP server (or an HTTP gateway before it) answered 500 to the call of ${name}, after the request was sent: it may have run the call before it failed`, { cause: error })
      : new OutcomeUnknownError(`the MCP server's HTTP gateway answered ${status} to the call of ${name}, after the request was sent: the server behind it may have run the call`, { cause: error })
  }
  if (typeof code === 'number' && wordsOf(error, OUTPUT_REFUSED[code]) !== undefined) {
    return new OutcomeUnknownError(`the MCP server answered the call of ${name} without an error, but the client refused its result`, { cause: error })
  }
  return error
}

/** What a call `cancelMeansNotDone` declares not done returns: `reason` says why. */
const notDone = (reason: string): { done: false; reason: string } => ({ done: false, reason: `the call was not done: ${reason}` })

function reasonText(reason: unknown): string {
  try {
    return messageOf(reason)
  } catch {
    return 'its reason cannot be read'
  }
}

/**
 * With `cancelMeansNotDone`, what a rejection of `callTool` that the SDK's cancel of the request made
 * is (it sent the server `notifications/cancelled`): on the tool's signal (a cancel, the time limit),
 * a value to return, since what a tool returns once its signal aborted is recorded and a throw leaves
 * it uncertain; on the client's own request timeout, a failure to throw. `undefined` for any other.
 */
function cancelledCall(error: unknown, name: string, signal: AbortSignal): { value: unknown } | { failure: Error } | undefined {
  if (signal.aborted) {
    if (error !== signal.reason && !wrapsReason(error, signal.reason)) return undefined
    return { value: notDone(`it was cancelled (${reasonText(signal.reason)}), and the MCP server does not act on a cancelled call (cancelMeansNotDone)`) }
  }
  // The SDK's timer cancels the request (not its 'Maximum total timeout exceeded', which sends nothing);
  // relayed, it is a proxy's timeout beyond the server, which may not have cancelled its own request.
  const said = codeOf(error) === REQUEST_TIMEOUT ? wordsOf(error, CANCELLED_ON_TIMEOUT) : undefined
  if (said === undefined || said.relayed) return undefined
  return {
    failure: new Error(`the MCP client stopped waiting for the call of ${name} (its request timeout) and cancelled it, and the MCP server does not act on a cancelled call (cancelMeansNotDone): it was not done`, { cause: error }),
  }
}

/** Whether `error` is the SDK's `McpError` wrapping of the abort `reason` (`cancel(reason)` in its `Protocol.request`). */
function wrapsReason(error: unknown, reason: unknown): boolean {
  if (error === reason || codeOf(error) !== REQUEST_TIMEOUT) return false
  let said: string
  try {
    said = String(reason)
  } catch {
    return false
  }
  return messageText(error) === `MCP error ${REQUEST_TIMEOUT}: ${said}`
}

const messageStartsWith = (error: unknown, words: string): boolean => messageText(error)?.startsWith(words) === true

/**
 * The HTTP status the SDK's HTTP transports rejected the POST of a request with (not 2xx): the
 * Streamable HTTP transport's `StreamableHTTPError` (its `code`), the SSE transport's `Error` (its
 * words); `undefined` for any other rejection, and for the SDK's SSE server's own 500 to a message it
 * never passed on.
 */
function postStatus(error: unknown): number | undefined {
  const code = codeOf(error)
  if (typeof code === 'number') return messageStartsWith(error, HTTP_POST_FAILED) ? code : undefined
  if (code !== undefined) return undefined
  const message = messageText(error)
  const status = message === undefined ? undefined : SSE_POST_FAILED.exec(message)?.[1]
  return status === undefined || SSE_NOT_DISPATCHED.test(message ?? '') ? undefined : Number(status)
}

/** The `message` of `error` as it is, when it has one that is a string and can be read. */
function messageText(error: unknown): string | undefined {
  if (error === null || typeof error !== 'object') return undefined
  try {
    const message = (error as { message?: unknown }).message
    return typeof message === 'string' ? message : undefined
  } catch {
    return undefined
  }
}

/**
 * Whether `error` (an `McpError` of `code`) says no answer came: the SDK's own words for a closed
 * connection or a timeout (`relayed`: as a server passed them on, from beyond it). A server's own
 * error under the same code (its answer) is not.
 */
function noAnswer(error: unknown, code: number): { relayed: boolean } | undefined {
  return wordsOf(error, NO_ANSWER[code])
}

/**
 * Whether the message of `error` (an `McpError`) is one of `words` after the `MCP error <code>: ` the
 * client puts before it (`relayed`: put more than once, as a proxy server passed it on).
 */
function wordsOf(error: unknown, words: readonly RegExp[] | undefined): { relayed: boolean } | undefined {
  const message = words === undefined ? undefined : messageText(error)
  if (words === undefined || message === undefined) return undefined
  let rest = message
  let prefixes = 0
  while (MCP_ERROR_PREFIX.test(rest)) {
    rest = rest.replace(MCP_ERROR_PREFIX, '')
    prefixes += 1
  }
  return prefixes > 0 && words.some((pattern) => pattern.test(rest)) ? { relayed: prefixes > 1 } : undefined
}

/** The causes of a failed fetch that mean no connection was made, so no request was sent. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT'])

/** Whether `error` is fetch's for a connection that dropped once made (see `thrownFor`). */
function droppedAfterSending(error: unknown): boolean {
  try {
    if (!(error instanceof TypeError) || (error.message !== 'fetch failed' && error.message !== 'terminated')) return false
    const codes: unknown[] = []
    for (let cause: unknown = error.cause, depth = 0; cause !== null && typeof cause === 'object' && depth < 4; cause = (cause as { cause?: unknown }).cause, depth += 1) {
      codes.push((cause as { code?: unknown }).code)
    }
    return codes.some((code) => typeof code === 'string') && !codes.some((code) => typeof code === 'string' && NOT_CONNECTED.has(code))
  } catch {
    return false
  }
}

function codeOf(error: unknown): unknown {
  if (error === null || typeof error !== 'object') return undefined
  try {
    return (error as { code?: unknown }).code
  } catch {
    return undefined
  }
}

/** What a call's answer is recorded as. */
function resultOf(result: unknown, name: string, keepBinaryData: boolean): unknown {
  if (result === null || typeof result !== 'object') throw new Error(`the MCP server answered the call of ${name} with ${kindOf(result)}, not a tool result`)
  const { content, structuredContent, isError, toolResult } = result as McpCallToolResult
  const blocks = Array.isArray(content) ? content : []
  if (isError === true) {
    const text = textOf(blocks)
    throw new Error(text === '' ? `the MCP tool ${name} reported an error and said nothing more` : text)
  }
  if (structuredContent !== undefined && structuredContent !== null) return structuredContent
  if (!Array.isArray(content) && toolResult !== undefined) return toolResult
  if (blocks.every((block) => isTextBlock(block))) return textOf(blocks)
  return blocks.map((block) => blockOf(block, keepBinaryData))
}

const isTextBlock = (block: unknown): block is { type: 'text'; text: string } =>
  block !== null && typeof block === 'object' && (block as { type?: unknown }).type === 'text' && typeof (block as { text?: unknown }).text === 'string'

const textOf = (blocks: readonly unknown[]): string =>
  blocks
    .filter(isTextBlock)
    .map((block) => block.text)
    .join('\n')

/** The bytes base64 text decodes to. */
function base64Bytes(data: string): number {
  const trimmed = data.replace(/\s/g, '')
  const padding = trimmed.endsWith('==') ? 2 : trimmed.endsWith('=') ? 1 : 0
  return Math.max(0, Math.floor((trimmed.length * 3) / 4) - padding)
}

/** A content block as a result holds it: text as it is, binary data as its size unless kept. */
function blockOf(block: unknown, keepBinaryData: boolean): unknown {
  if (block === null || typeof block !== 'object') return block
  const { type } = block as { type?: unknown }
  if (isTextBlock(block)) return { type: 'text', text: block.text }
  if ((type === 'image' || type === 'audio') && typeof (block as { data?: unknown }).data === 'string') {
    const { data, mimeType } = block as { data: string; mimeType?: unknown }
    return keepBinaryData ? { type, mimeType, data } : { type, mimeType, bytes: base64Bytes(data) }
  }
  if (type === 'resource') {
    const resource = (block as { resource?: unknown }).resource
    if (resource !== null && typeof resource === 'object' && typeof (resource as { blob?: unknown }).blob === 'string' && !keepBinaryData) {
      const { blob, ...rest } = resource as { blob: string } & Record<string, unknown>
      return { type, resource: { ...rest, bytes: base64Bytes(blob) } }
    }
  }
  return block
}
