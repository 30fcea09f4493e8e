/**
 * Bad input, table-driven: invalid run inputs, handoff intents, handoff pauses, ids, tool
 * definitions, `prefix` / `runSource` / `EventLog.open` arguments and appended events. Each is
 * refused with its documented code, and the log digest is unchanged after each. At the end the
 * unmutated inputs the cases were made from are admitted, so every refusal was the mutation's.
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import { z } from 'zod'
import * as assert from 'uvu/assert'
import {
  Engine,
  type EngineOptions,
  EventLog,
  type Fact,
  type HandoffIntent,
  type HandoffPause,
  ModelExecutor,
  type ModelExecutorOptions,
  type RunBoundary,
  type RunInput,
  type RunningInvocation,
  type RuntimeEvent,
  successorOf,
  foldFacts,
  applyFact,
  accepts,
  initialInvocationSnapshot,
  type InvocationSnapshot,
  stateOf,
  answerOf,
  catalogOf,
  recoverInvocations,
  retryAfterMsOf,
  transcriptOf,
  intentFor as publicIntentFor,
} from '../index.js'
import { type RecordedRequest, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { rejectsWithCode } from './support/codes.js'
import { ALL, effectTool, intentFor, messageRun } from './support/faults-engine.js'
import { facts as logFacts } from './support/log-fixtures.js'
import { bounded } from './support/temp.js'
import { assertDetailsFit } from './support/error-details.js'

/** A schema as the AI SDK's `jsonSchema(schema)` makes it (`@ai-sdk/provider-utils`), without the dependency. */
function aiSdkSchema(schema: object): object {
  return { [Symbol.for('vercel.ai.schema')]: true, _type: undefined, get jsonSchema() { return schema }, validate: undefined }
}

/** A deep, loosely typed copy to break on purpose. */
type Loose = Record<string, any>

interface Context {
  dir: string
  log: EventLog
  engine: Engine
  /** A valid message run for a fresh session. */
  message(): Loose
  /** A valid continuation from the completed run `run-done`. */
  continuation(): Loose
  /** The valid successor of the sealed run `run-sealed`. */
  successor(): Loose
  /** The invocation held in a model request (its gate takes intents). */
  blocked: RunningInvocation
  /** A valid intent for the blocked invocation. */
  intent(): Loose
  /** A valid event for a fresh invocation. */
  event(fact?: Loose): Loose
  /** The facts of the completed invocation `invocation-done`. */
  done: RuntimeEvent[]
}

interface Case {
  area: string
  name: string
  code: string | string[]
  /** Paths `details.fields` must name (where the refusal can name them). */
  fields?: string[]
  /** What the message must say (where it tells how to fix the input). */
  message?: RegExp
  act(context: Context): unknown
}

const start = (change: (input: Loose) => void, base: (c: Context) => Loose = (c) => c.message()) => (c: Context) => {
  const input = base(c)
  change(input)
  return c.engine.start(input as RunInput)
}
const startContinuation = (change: (input: Loose) => void) => start(change, (c) => c.continuation())
const startSuccessor = (change: (input: Loose) => void) => start(change, (c) => c.successor())
const reserve = (change: (intent: Loose) => void) => (c: Context) => {
  const intent = c.intent()
  change(intent)
  return c.blocked.handoff().reserve(intent as HandoffIntent)
}
const append = (change: (event: Loose) => void) => (c: Context) => {
  const event = c.event()
  change(event)
  return c.log.append(event as RuntimeEvent)
}
const appendFact = (fact: Loose) => (c: Context) => c.log.append(c.event(fact) as RuntimeEvent)
/** `open` given a path to a fresh plain file in the test's directory. */
const inFile = async (c: Context, open: (file: string) => Promise<unknown>) => {
  const file = join(c.dir, `file-${Math.random().toString(36).slice(2)}`)
  await writeFile(file, 'not a directory')
  return open(file)
}

const LONG_ID = 'x'.repeat(129)
/** An array of `length` holes. */
const sparse = (length: number): unknown[] => {
  const holes: unknown[] = []
  holes.length = length
  return holes
}
/** `{ a: { a: … } }`, `levels` deep. */
const deep = (levels: number): Loose => {
  let value: Loose = {}
  for (let level = 0; level < levels; level += 1) value = { a: value }
  return value
}

const cases: Case[] = [
  // RunInput: the invocation and its ids
  { area: 'RunInput', name: 'no invocation', code: 'RUN_INVALID_INPUT', act: start((i) => delete i.invocation) },
  { area: 'ids', name: 'empty sessionId', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.sessionId = '')) },
  { area: 'ids', name: 'sessionId with a space', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.sessionId = 'a b')) },
  { area: 'ids', name: 'sessionId of 129 characters', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.sessionId = LONG_ID)) },
  { area: 'ids', name: 'turnId with a slash', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.turnId = 'turn/1')) },
  { area: 'ids', name: 'runId that is a number', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.runId = 7)) },
  { area: 'ids', name: 'invocationId with a non-ASCII letter', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.invocationId = 'invocación')) },
  { area: 'ids', name: 'invocationId with NUL', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.invocationId = 'a\0b')) },
  { area: 'ids', name: 'invocationId already used', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.invocationId = 'invocation-done')) },
  { area: 'RunInput', name: 'an unknown field in the invocation', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation.parent = 'x')) },
  // RunInput: the provider
  { area: 'RunInput', name: 'no provider', code: 'RUN_INVALID_INPUT', act: start((i) => delete i.provider) },
  { area: 'RunInput', name: 'provider kind anthropic', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.kind = 'anthropic')) },
  { area: 'RunInput', name: 'baseUrl that is not a URL', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.baseUrl = 'not a url')) },
  { area: 'RunInput', name: 'baseUrl with ftp:', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.baseUrl = 'ftp://127.0.0.1/v1')) },
  { area: 'RunInput', name: 'empty model', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.model = '')) },
  { area: 'RunInput', name: 'apiKey that is a number', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.apiKey = 12345)) },
  { area: 'RunInput', name: 'header value that is a number', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.headers = { 'x-a': 1 })) },
  // Refused before the run, not a run that fails model_failed at its first request with its ids used up.
  { area: 'RunInput', name: 'a header value with CR LF', code: 'RUN_INVALID_INPUT', fields: ['provider.headers.x-trace'], message: /the value of x-trace is not text an HTTP header can carry .*it is not shown$/, act: start((i) => (i.provider.headers = { 'x-trace': 'a\r\nsecret-b' })) },
  { area: 'RunInput', name: 'a header value with a control character (fetch refuses it mid-run)', code: 'RUN_INVALID_INPUT', fields: ['provider.headers.x-app'], act: start((i) => (i.provider.headers = { 'x-app': 'a\u0001b' })) },
  { area: 'RunInput', name: 'an apiKey with DEL', code: 'RUN_INVALID_INPUT', fields: ['provider.apiKey'], act: start((i) => (i.provider.apiKey = 'sk-\u007fabc')) },
  { area: 'RunInput', name: 'providerOptions holding a class instance', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = { budget: new (class Budget { limit = 5 })() })) },
  { area: 'RunInput', name: 'a header value that is not Latin-1', code: 'RUN_INVALID_INPUT', fields: ['provider.headers.x-user'], act: start((i) => (i.provider.headers = { 'x-user': 'Пётр' })) },
  { area: 'RunInput', name: 'a header name with a space', code: 'RUN_INVALID_INPUT', fields: ['provider.headers.x trace'], act: start((i) => (i.provider.headers = { 'x trace': '1' })) },
  { area: 'RunInput', name: 'an empty header name', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.headers = { '': '1' })) },
  { area: 'RunInput', name: 'a content-length header (it hung the request)', code: 'RUN_INVALID_INPUT', fields: ['provider.headers.Content-Length'], act: start((i) => (i.provider.headers = { 'Content-Length': '5' })) },
  { area: 'RunInput', name: 'an apiKey with a line break', code: 'RUN_INVALID_INPUT', fields: ['provider.apiKey'], message: /^(?![\s\S]*secret-k)[\s\S]*its value is not shown/, act: start((i) => (i.provider.apiKey = 'sk-1\nsecret-k')) },
  { area: 'RunInput', name: 'an apiKey that is not Latin-1', code: 'RUN_INVALID_INPUT', fields: ['provider.apiKey'], act: start((i) => (i.provider.apiKey = 'sk-ключ')) },
  { area: 'RunInput', name: 'an unknown provider field', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.organization = 'org')) },
  { area: 'RunInput', name: 'providerOptions that is an array', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = [1, 2])) },
  { area: 'RunInput', name: 'providerOptions with Infinity', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = { temperature: Number.POSITIVE_INFINITY })) },
  { area: 'RunInput', name: 'providerOptions with a function', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = { hook: () => 1 })) },
  { area: 'RunInput', name: 'providerOptions with an own __proto__ key', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = JSON.parse('{"temperature":0,"__proto__":{"x":1}}'))) },
  { area: 'RunInput', name: 'an invocation that is a Proxy (not plain data)', code: 'RUN_INVALID_INPUT', act: start((i) => (i.invocation = new Proxy({ ...i.invocation }, {}))) },
  // A sparse array costs its maker nothing: refused at its first hole, not parsed item by item (which ran out of memory).
  { area: 'RunInput', name: 'providerOptions with 3,000,000 holes', code: 'RUN_INVALID_INPUT', fields: ['providerOptions'], message: /providerOptions\.stop\.0: a hole cannot be stored/, act: start((i) => (i.providerOptions = { stop: sparse(3_000_000) })) },
  { area: 'tools', name: 'a tools list with a hole', code: 'RUN_INVALID_INPUT', fields: ['tools.0'], message: /tools\.0: a hole in the list is not a tool/, act: start((i) => (i.tools = [, i.tools[0]])) },
  { area: 'tools', name: 'a tools list of 10,000,000 holes', code: 'RUN_INVALID_INPUT', fields: ['tools.0'], act: start((i) => (i.tools = sparse(10_000_000))) },
  { area: 'tools', name: 'an input schema enum of 3,000,000 holes', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].inputSchema = { type: 'object', properties: { a: { enum: sparse(3_000_000) } } })) },
  { area: 'RunInput', name: 'providerOptions with a lone surrogate', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = { stop: 'a\ud800' })) },
  { area: 'RunInput', name: 'a tool schema nested 20,000 deep', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools = [{ ...i.tools[0], inputSchema: deep(20_000) }])) },
  // 59 levels under providerOptions would fit an opened fact but not a seal's pause (fact.outcome.pause.execution…).
  { area: 'RunInput', name: 'providerOptions too deep for a seal', code: 'RUN_INVALID_INPUT', act: start((i) => (i.providerOptions = { deep: deep(59) })) },
  { area: 'RunInput', name: 'a message with a lone surrogate', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work.content = 'half \udc00 a pair')) },
  { area: 'RunInput', name: 'baseUrl with credentials', code: 'RUN_INVALID_INPUT', act: start((i) => (i.provider.baseUrl = 'http://user:secret@127.0.0.1:9/v1')) },
  // RunInput: configuration and limits
  { area: 'RunInput', name: 'relative cwd', code: 'RUN_INVALID_INPUT', act: start((i) => (i.configuration.cwd = 'relative/path')) },
  { area: 'RunInput', name: 'cwd with NUL', code: 'RUN_INVALID_INPUT', act: start((i) => (i.configuration.cwd = '/workspace\0faults')) },
  { area: 'RunInput', name: 'empty cwd', code: 'RUN_INVALID_INPUT', act: start((i) => (i.configuration.cwd = '')) },
  { area: 'RunInput', name: 'no configuration', code: 'RUN_INVALID_INPUT', act: start((i) => delete i.configuration) },
  { area: 'RunInput', name: 'empty workspaceIdentity', code: 'RUN_INVALID_INPUT', act: start((i) => (i.configuration.workspaceIdentity = '')) },
  { area: 'RunInput', name: 'an unknown configuration field', code: 'RUN_INVALID_INPUT', act: start((i) => (i.configuration.env = {})) },
  { area: 'RunInput', name: 'mainOutputLimit 0', code: 'RUN_INVALID_INPUT', act: start((i) => (i.mainOutputLimit = 0)) },
  { area: 'RunInput', name: 'mainOutputLimit 1.5', code: 'RUN_INVALID_INPUT', act: start((i) => (i.mainOutputLimit = 1.5)) },
  { area: 'RunInput', name: 'mainOutputLimit as a string', code: 'RUN_INVALID_INPUT', act: start((i) => (i.mainOutputLimit = '120')) },
  { area: 'RunInput', name: 'maxSteps 0', code: 'RUN_INVALID_INPUT', act: start((i) => (i.maxSteps = 0)) },
  { area: 'RunInput', name: 'maxSteps 257', code: 'RUN_INVALID_INPUT', act: start((i) => (i.maxSteps = 257)) },
  { area: 'RunInput', name: 'maxSteps NaN', code: 'RUN_INVALID_INPUT', act: start((i) => (i.maxSteps = Number.NaN)) },
  { area: 'RunInput', name: 'empty requestFingerprint', code: 'RUN_INVALID_INPUT', act: start((i) => (i.requestFingerprint = '')) },
  { area: 'RunInput', name: 'an unknown top-level field', code: 'RUN_INVALID_INPUT', act: start((i) => (i.priority = 1)) },
  { area: 'RunInput', name: 'null input', code: 'RUN_INVALID_INPUT', act: (c) => c.engine.start(null as unknown as RunInput) },
  // tool definitions
  { area: 'tools', name: 'tools that is not an array', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools = { echo: {} })) },
  { area: 'tools', name: 'a tool name with a space', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].name = 'echo it')) },
  { area: 'tools', name: 'a tool timeoutMs of 0', code: 'RUN_INVALID_INPUT', fields: ['tools.0.timeoutMs'], act: start((i) => (i.tools[0].timeoutMs = 0)) },
  { area: 'tools', name: 'a tool name of 65 characters', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].name = 'e'.repeat(65))) },
  { area: 'tools', name: 'an empty tool name', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].name = '')) },
  { area: 'tools', name: 'a tool without execute', code: 'RUN_INVALID_INPUT', act: start((i) => delete i.tools[0].execute) },
  { area: 'tools', name: 'execute that is not a function', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].execute = 'run')) },
  { area: 'tools', name: 'two tools with one name', code: 'RUN_INVALID_INPUT', act: start((i) => i.tools.push({ ...i.tools[0] })) },
  { area: 'tools', name: 'inputSchema that is a string', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].inputSchema = 'object')) },
  // A misspelt member is refused, not ignored: ignored, `needsApprovl` would run the tool unapproved.
  { area: 'tools', name: 'a misspelt needsApproval', code: 'RUN_INVALID_INPUT', fields: ['tools.0.needsApprovl'], act: start((i) => (i.tools[0].needsApprovl = true)) },
  { area: 'tools', name: 'a zod schema as inputSchema', code: 'RUN_INVALID_INPUT', fields: ['tools.0.inputSchema'], message: /inputSchema takes a JSON Schema object, not a zod schema: convert it first \(z\.toJSONSchema\(schema\) in zod 4\)/, act: start((i) => (i.tools[0].inputSchema = z.object({ to: z.string() }))) },
  // What the AI SDK's jsonSchema() makes (and its MCP client's tools carry): its symbol key, _type, validate and a jsonSchema getter.
  { area: 'tools', name: "an AI SDK schema wrapper as inputSchema", code: 'RUN_INVALID_INPUT', fields: ['tools.0.inputSchema'], message: /not an AI SDK schema \(jsonSchema\(\), zodSchema\(\)\): pass the JSON Schema it wraps \(await asSchema\(schema\)\.jsonSchema\)/, act: start((i) => (i.tools[0].inputSchema = aiSdkSchema({ type: 'object', properties: { to: { type: 'string' } } }))) },
  { area: 'tools', name: 'readOnly in lower case', code: 'RUN_INVALID_INPUT', fields: ['tools.0.readonly'], act: start((i) => (i.tools[0].readonly = true)) },
  { area: 'tools', name: 'a schema given as input_schema', code: 'RUN_INVALID_INPUT', fields: ['tools.0.input_schema'], act: start((i) => {
      delete i.tools[0].inputSchema
      i.tools[0].input_schema = { type: 'object' }
    }) },
  // Beside the member it resembles, such a member is the tool's own: an `executor` beside `execute` is admitted (see engine-tools' own-members test).
  { area: 'tools', name: 'a schema given as parameters', code: 'RUN_INVALID_INPUT', fields: ['tools.0.parameters'], act: start((i) => {
      delete i.tools[0].inputSchema
      i.tools[0].parameters = { type: 'object' }
    }) },
  { area: 'tools', name: 'an inputSchema behind a proxy (not plain data)', code: 'RUN_INVALID_INPUT', fields: ['tools.0.inputSchema'], act: start((i) => (i.tools[0].inputSchema = new Proxy({ type: 'object' }, {}))) },
  { area: 'tools', name: 'a description that is a number', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools[0].description = 42)) },
  { area: 'tools', name: 'a tool that is null', code: 'RUN_INVALID_INPUT', act: start((i) => (i.tools = [null])) },
  {
    area: 'tools',
    name: 'a tool whose inputSchema getter throws',
    code: 'RUN_INVALID_INPUT',
    act: start((i) => Object.defineProperty(i.tools[0], 'inputSchema', { enumerable: true, get: () => { throw new Error('no schema today') } })),
  },
  {
    area: 'RunInput',
    name: 'a work.content getter that throws',
    code: 'RUN_INVALID_INPUT',
    act: start((i) => Object.defineProperty(i.work, 'content', { enumerable: true, get: () => { throw new Error('no content today') } })),
  },
  // RunInput: work
  { area: 'RunInput', name: 'no work', code: 'RUN_INVALID_INPUT', act: start((i) => delete i.work) },
  { area: 'RunInput', name: 'an unknown work kind', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work = { kind: 'resume', content: 'x' })) },
  { area: 'RunInput', name: 'an empty message', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work.content = '')) },
  { area: 'RunInput', name: 'a message that is a number', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work.content = 3)) },
  { area: 'RunInput', name: 'allowPriorUnknown "yes"', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work.allowPriorUnknown = 'yes')) },
  { area: 'RunInput', name: 'allowRestored "yes"', code: 'RUN_INVALID_INPUT', act: start((i) => (i.work.allowRestored = 'yes')) },
  { area: 'RunInput', name: 'a successor\'s allowRestored "yes"', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => (i.work.allowRestored = 'yes')) },
  { area: 'RunInput', name: 'a successor\'s allowPriorUnknown (a seal leaves no unknown outcome to acknowledge)', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => (i.work.allowPriorUnknown = true)) },
  { area: 'RunInput', name: 'a continuation without a source', code: 'RUN_INVALID_INPUT', act: startContinuation((i) => delete i.work.source) },
  { area: 'RunInput', name: 'a continuation source with highWater 0', code: 'RUN_INVALID_INPUT', act: startContinuation((i) => (i.work.source.highWater = 0)) },
  { area: 'RunInput', name: 'a continuation source with a malformed digest', code: 'RUN_INVALID_INPUT', act: startContinuation((i) => (i.work.source.digest = 'sha256:xyz')) },
  {
    area: 'RunInput',
    name: 'a continuation from another session',
    code: 'RUN_INVALID_INPUT',
    act: startContinuation((i) => (i.invocation.sessionId = 'session-elsewhere')),
  },
  {
    area: 'RunInput',
    name: 'a continuation whose boundary digest is not the log’s',
    code: 'RUN_SOURCE_MISMATCH',
    act: startContinuation((i) => (i.work.source.digest = `sha256:${'1'.repeat(64)}`)),
  },
  { area: 'RunInput', name: 'a continuation from a run the log never saw', code: 'RUN_SOURCE_MISMATCH', act: startContinuation((i) => (i.work.source.invocation.runId = 'run-nowhere')) },
  // The engine's maxInputBytes, 4 MiB by default: nothing of a larger input is written.
  { area: 'RunInput', name: 'a message over maxInputBytes (4 MiB)', code: 'RUN_INVALID_INPUT', fields: ['work.content'], act: start((i) => (i.work.content = 'y'.repeat(4 * 1024 * 1024 + 1))) },
  { area: 'RunInput', name: "a successor's message over maxInputBytes", code: 'RUN_INVALID_INPUT', fields: ['work.content'], act: startSuccessor((i) => (i.work.content = 'y'.repeat(4 * 1024 * 1024 + 1))) },
  // HandoffIntent (gate.reserve)
  { area: 'HandoffIntent', name: 'empty handoffId', code: 'HANDOFF_MISMATCH', act: reserve((i) => (i.handoffId = '')) },
  { area: 'HandoffIntent', name: 'hostEpoch with a space', code: 'HANDOFF_MISMATCH', fields: ['hostEpoch'], act: reserve((i) => (i.hostEpoch = 'epoch 1')) },
  { area: 'HandoffIntent', name: 'no claimId', code: 'HANDOFF_MISMATCH', fields: ['claimId'], act: reserve((i) => delete i.claimId) },
  { area: 'HandoffIntent', name: 'rootRunId of 129 characters', code: 'HANDOFF_MISMATCH', act: reserve((i) => (i.rootRunId = LONG_ID)) },
  { area: 'HandoffIntent', name: 'successorRunId that is a number', code: 'HANDOFF_MISMATCH', act: reserve((i) => (i.successorRunId = 2)) },
  { area: 'HandoffIntent', name: 'an unknown field', code: 'HANDOFF_MISMATCH', fields: ['priority'], act: reserve((i) => (i.priority = 'high')) },
  { area: 'HandoffIntent', name: 'the successor reuses the held run id', code: 'HANDOFF_MISMATCH', fields: ['successorRunId'], act: reserve((i) => (i.successorRunId = 'run-blocked')) },
  {
    area: 'HandoffIntent',
    name: 'the successor reuses the held invocation id',
    code: 'HANDOFF_MISMATCH',
    act: reserve((i) => (i.successorInvocationId = 'invocation-blocked')),
  },
  {
    area: 'HandoffIntent',
    name: 'the successor reuses both held ids',
    code: 'HANDOFF_MISMATCH',
    fields: ['successorRunId', 'successorInvocationId'],
    act: reserve((i) => {
      i.successorRunId = 'run-blocked'
      i.successorInvocationId = 'invocation-blocked'
    }),
  },
  // Every bad field in one refusal: a malformed id does not hide a reused one.
  {
    area: 'HandoffIntent',
    name: 'a claimId with a space and the held run id reused',
    code: 'HANDOFF_MISMATCH',
    fields: ['successorRunId', 'claimId'],
    act: reserve((i) => {
      i.claimId = 'bad id!'
      i.successorRunId = 'run-blocked'
    }),
  },
  { area: 'HandoffIntent', name: 'null intent', code: 'HANDOFF_MISMATCH', fields: ['(root)'], act: (c) => c.blocked.handoff().reserve(null as unknown as HandoffIntent) },
  {
    area: 'HandoffIntent',
    name: 'an intent whose getter throws',
    code: 'HANDOFF_MISMATCH',
    fields: ['intent'],
    act: (c) =>
      c.blocked.handoff().reserve(
        Object.defineProperty(c.intent(), 'claimId', {
          enumerable: true,
          get() {
            throw new Error('no claim')
          },
        }) as unknown as HandoffIntent,
      ),
  },
  { area: 'HandoffIntent', name: 'intentFor with an option it does not take', code: 'HANDOFF_MISMATCH', fields: ['options'], act: (c) => publicIntentFor(c.blocked.invocation, 'x', { hostEpch: 'h' } as never) },
  // HandoffPause (handoff work)
  { area: 'HandoffPause', name: 'remainingSteps differs from the sealed pause', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.work.pause.remainingSteps -= 1)) },
  { area: 'HandoffPause', name: 'the claim differs from the sealed pause', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.work.pause.intent.claimId = 'claim-other')) },
  {
    area: 'HandoffPause',
    name: 'the sealed model changed in pause and provider alike',
    code: 'HANDOFF_MISMATCH',
    act: startSuccessor((i) => {
      i.work.pause.execution.model = 'other'
      i.provider.model = 'other'
    }),
  },
  { area: 'HandoffPause', name: 'the successor’s output limit differs', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.mainOutputLimit = 99)) },
  { area: 'HandoffPause', name: 'the successor’s provider options differ', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.providerOptions = { seed: 1 })) },
  { area: 'HandoffPause', name: 'the successor’s cwd differs', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.configuration.cwd = '/elsewhere')) },
  { area: 'HandoffPause', name: 'the successor’s tool catalog differs', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.tools[0].description = 'changed')) },
  { area: 'HandoffPause', name: 'the successor is not successorOf(intent, source)', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.invocation.runId = 'run-any')) },
  { area: 'HandoffPause', name: 'the source boundary is one fact short', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.work.source.highWater -= 1)) },
  { area: 'HandoffPause', name: 'the source digest is wrong', code: 'HANDOFF_MISMATCH', act: startSuccessor((i) => (i.work.source.digest = `sha256:${'2'.repeat(64)}`)) },
  { area: 'HandoffPause', name: 'remainingSteps -1', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => (i.work.pause.remainingSteps = -1)) },
  { area: 'HandoffPause', name: 'a malformed catalog digest', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => (i.work.pause.execution.tools.catalogDigest = 'md5:1')) },
  { area: 'HandoffPause', name: 'no execution settings', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => delete i.work.pause.execution) },
  { area: 'HandoffPause', name: 'no pause', code: 'RUN_INVALID_INPUT', act: startSuccessor((i) => delete i.work.pause) },
  // prefix arguments
  { area: 'prefix', name: 'maxEvents -1', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix(-1, 1_000) },
  { area: 'prefix', name: 'maxBytes -1', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix(1_000, -1) },
  { area: 'prefix', name: 'maxEvents 1.5', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix(1.5, 1_000) },
  { area: 'prefix', name: 'maxEvents NaN', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix(Number.NaN, 1_000) },
  { area: 'prefix', name: 'maxBytes Infinity', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix(1_000, Number.POSITIVE_INFINITY) },
  { area: 'prefix', name: 'maxEvents as a string', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.prefix('10' as unknown as number, 1_000) },
  { area: 'prefix', name: 'no arguments', code: 'LOG_INVALID_ARGUMENT', act: (c) => (c.log.prefix as unknown as () => Promise<unknown>)() },
  { area: 'prefix', name: 'fewer events allowed than the log holds', code: 'LOG_PREFIX_TOO_LARGE', act: (c) => c.log.prefix(1, ALL.bytes) },
  { area: 'prefix', name: 'fewer bytes allowed than the log holds', code: 'LOG_PREFIX_TOO_LARGE', act: (c) => c.log.prefix(ALL.events, 16) },
  // events() bounds, refused where they are given (the generator is made by the call)
  { area: 'events', name: 'to -5', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ to: -5 }) },
  { area: 'events', name: 'to as a string', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ to: '3' as unknown as number }) },
  { area: 'events', name: 'to 1.5, past the high-water or not', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ to: 1.5 }) },
  { area: 'events', name: 'to true', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ to: true as unknown as number }) },
  { area: 'events', name: 'from 0', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ from: 0 }) },
  { area: 'events', name: 'options that are a number', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events(42 as unknown as {}) },
  { area: 'events', name: 'options null', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events(null as unknown as {}) },
  { area: 'events', name: 'a misspelt bound (fromSeq)', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ fromSeq: 3 } as unknown as {}) },
  { area: 'events', name: 'from null', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.events({ from: null as unknown as number }) },
  // runSource arguments
  { area: 'runSource', name: 'empty sessionId', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.runSource('', 'run-done') },
  { area: 'runSource', name: 'empty runId', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.runSource('session-done', '') },
  { area: 'runSource', name: 'sessionId with a slash', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.runSource('session/done', 'run-done') },
  { area: 'runSource', name: 'runId of 129 characters', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.runSource('session-done', LONG_ID) },
  { area: 'runSource', name: 'runId that is a number', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.runSource('session-done', 5 as unknown as string) },
  { area: 'runSource', name: 'no arguments', code: 'LOG_INVALID_ARGUMENT', act: (c) => (c.log.runSource as unknown as () => Promise<unknown>)() },
  // EventLog.open arguments
  { area: 'EventLog.open', name: 'an empty location', code: 'LOG_INVALID_ARGUMENT', act: () => EventLog.open('') },
  { area: 'EventLog.open', name: 'a location with NUL', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.open(`${c.dir}\0x`) },
  // A directory named by spaces alone would be made wherever the process runs.
  { area: 'EventLog.open', name: 'a location of spaces only', code: 'LOG_INVALID_ARGUMENT', act: () => EventLog.open('   ') },
  { area: 'EventLog.open', name: 'a location that is a number', code: 'LOG_INVALID_ARGUMENT', act: () => EventLog.open(42 as unknown as string) },
  { area: 'EventLog.open', name: 'durability "fast"', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.open(join(c.dir, 'other'), { durability: 'fast' as 'sync' }) },
  { area: 'EventLog.open', name: 'the location of the open log', code: 'LOG_WRITER_BUSY', act: (c) => EventLog.open(join(c.dir, 'log')) },
  { area: 'EventLog.open', name: 'a location that is a file', code: 'LOG_INVALID_ARGUMENT', act: (c) => inFile(c, (file) => EventLog.open(file)) },
  { area: 'EventLog.open', name: 'a location under a file', code: 'LOG_INVALID_ARGUMENT', act: (c) => inFile(c, (file) => EventLog.open(join(file, 'log'))) },
  { area: 'EventLog.open', name: 'options null', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.open(join(c.dir, 'other'), null as unknown as {}) },
  { area: 'EventLog.open', name: 'a misspelt durability option', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.open(join(c.dir, 'other'), { durabilty: 'os' } as unknown as {}) },
  { area: 'EventLog.open', name: 'options whose getter throws', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.open(join(c.dir, 'other'), Object.defineProperty({}, 'durability', { enumerable: true, get: () => { throw new Error('unreadable') } }) as {}) },
  // EventLog.openSnapshot arguments: nothing is created where there is no log
  { area: 'EventLog.openSnapshot', name: 'an empty location', code: 'LOG_INVALID_ARGUMENT', act: () => EventLog.openSnapshot('') },
  { area: 'EventLog.openSnapshot', name: 'a location with NUL', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(`${c.dir}\0x`) },
  { area: 'EventLog.openSnapshot', name: 'a directory that holds no log', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'nothing')) },
  { area: 'EventLog.openSnapshot', name: 'a location that is a file', code: 'LOG_INVALID_ARGUMENT', act: (c) => inFile(c, (file) => EventLog.openSnapshot(file)) },
  { area: 'EventLog.openSnapshot', name: 'options null', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'log'), null as unknown as {}) },
  { area: 'EventLog.openSnapshot', name: 'an unknown option (dir)', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'log'), { dir: c.dir } as unknown as {}) },
  { area: 'EventLog.openSnapshot', name: 'an empty directory name', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'log'), { directory: '' }) },
  { area: 'EventLog.openSnapshot', name: 'a directory name of spaces only', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'log'), { directory: '  ' }) },
  { area: 'EventLog.openSnapshot', name: 'a directory that is a number', code: 'LOG_INVALID_ARGUMENT', act: (c) => EventLog.openSnapshot(join(c.dir, 'log'), { directory: 5 as unknown as string }) },
  { area: 'EventLog.openSnapshot', name: 'a directory that is a file', code: 'LOG_IO', act: (c) => inFile(c, (file) => EventLog.openSnapshot(join(c.dir, 'log'), { directory: file })) },
  // Engine and ModelExecutor options
  { area: 'Engine', name: 'a log that is not an EventLog', code: 'ENGINE_INVALID_OPTIONS', act: () => new Engine({ log: {} as EventLog }) },
  {
    area: 'Engine',
    name: 'a closed log',
    code: 'LOG_CLOSED',
    act: async (c) => {
      const closed = await EventLog.open(join(c.dir, 'closed'))
      await closed.close()
      return new Engine({ log: closed })
    },
  },
  { area: 'Engine', name: 'a model that is not a ModelExecutor', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, model: {} as ModelExecutor }) },
  { area: 'Engine', name: 'a clock that is a number', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, now: 5 as unknown as () => number }) },
  // A clock or id maker that misbehaves is the option's fault when a run starts, not the event's.
  { area: 'Engine', name: 'a clock that throws', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, now: () => { throw new Error('no time') } }).start(c.message() as RunInput) },
  { area: 'Engine', name: 'a clock that tells NaN', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, now: () => Number.NaN }).start(c.message() as RunInput) },
  { area: 'Engine', name: 'an id maker that makes a number', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, eventId: () => 42 as unknown as string }).start(c.message() as RunInput) },
  { area: 'Engine', name: 'an id maker that makes an id with a space', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, eventId: () => 'bad id' }).start(c.message() as RunInput) },
  { area: 'Engine', name: 'maxToolResultBytes 0', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxToolResultBytes: 0 }) },
  { area: 'Engine', name: 'maxToolResultBytes 1.5', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxToolResultBytes: 1.5 }) },
  { area: 'Engine', name: 'maxToolResultBytes as text', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxToolResultBytes: '4MB' as unknown as number }) },
  { area: 'Engine', name: 'maxToolResultBytes over 256 MiB', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxToolResultBytes: 256 * 1024 * 1024 + 1 }) },
  { area: 'Engine', name: 'maxInputBytes 0', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxInputBytes: 0 }) },
  { area: 'Engine', name: 'maxInputBytes as text', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, maxInputBytes: '4MB' as unknown as number }) },
  { area: 'Engine', name: 'ModelExecutor timeoutMs -1', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ timeoutMs: -1 }) },
  { area: 'Engine', name: 'ModelExecutor idleTimeoutMs 0', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ idleTimeoutMs: 0 }) },
  { area: 'Engine', name: 'ModelExecutor idleTimeoutMs Infinity', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ idleTimeoutMs: Number.POSITIVE_INFINITY }) },
  { area: 'Engine', name: 'ModelExecutor idleTimeoutMs over the default timeoutMs', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ idleTimeoutMs: 60_001 }) },
  { area: 'Engine', name: 'ModelExecutor retries NaN', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ retries: Number.NaN }) },
  { area: 'Engine', name: 'ModelExecutor createClient that is a string', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ createClient: 'openai' as unknown as () => never }) },
  { area: 'Engine', name: 'a misspelt Engine option (evntId)', code: 'ENGINE_INVALID_OPTIONS', message: /there is no option "evntId": did you mean eventId\? \(the options are \{ log, model\?, now\?, eventId\?, maxToolResultBytes\?, maxInputBytes\?, toolTimeoutMs\?, secrets\? \}\)/, act: (c) => new Engine({ log: c.log, evntId: () => 'x' } as unknown as EngineOptions) },
  { area: 'Engine', name: 'an Engine toolTimeoutMs of -1', code: 'ENGINE_INVALID_OPTIONS', act: (c) => new Engine({ log: c.log, toolTimeoutMs: -1 }) },
  { area: 'Engine', name: 'Engine options whose getter throws', code: 'ENGINE_INVALID_OPTIONS', act: () => new Engine(Object.defineProperty({}, 'log', { enumerable: true, get: () => { throw new Error('unreadable') } }) as unknown as EngineOptions) },
  { area: 'Engine', name: 'ModelExecutor options null', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor(null as unknown as ModelExecutorOptions) },
  { area: 'Engine', name: 'a misspelt ModelExecutor option (timeout)', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ timeout: 5 } as unknown as ModelExecutorOptions) },
  { area: 'Engine', name: 'ModelExecutor retries 1.5', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ retries: 1.5 }) },
  { area: 'Engine', name: 'ModelExecutor backoffMs over maxBackoffMs', code: 'ENGINE_INVALID_OPTIONS', act: () => new ModelExecutor({ backoffMs: 500, maxBackoffMs: 100 }) },
  // appended events: shape
  { area: 'append', name: 'no id', code: 'LOG_INVALID_EVENT', fields: ['id'], act: append((e) => delete e.id) },
  { area: 'append', name: 'an id with a space', code: 'LOG_INVALID_EVENT', act: append((e) => (e.id = 'event 1')) },
  { area: 'append', name: 'an id of 513 characters', code: 'LOG_INVALID_EVENT', act: append((e) => (e.id = 'e'.repeat(513))) },
  { area: 'append', name: 'recordedAt -1', code: 'LOG_INVALID_EVENT', act: append((e) => (e.recordedAt = -1)) },
  { area: 'append', name: 'recordedAt 1.5', code: 'LOG_INVALID_EVENT', act: append((e) => (e.recordedAt = 1.5)) },
  { area: 'append', name: 'recordedAt as a Date', code: 'LOG_INVALID_EVENT', act: append((e) => (e.recordedAt = new Date(0))) },
  { area: 'append', name: 'no invocation', code: 'LOG_INVALID_EVENT', act: append((e) => delete e.invocation) },
  { area: 'append', name: 'an invocation id with a space', code: 'LOG_INVALID_EVENT', fields: ['invocation.turnId'], act: append((e) => (e.invocation.turnId = 'turn 1')) },
  { area: 'append', name: 'an unknown event field', code: 'LOG_INVALID_EVENT', fields: ['seq'], act: append((e) => (e.seq = 1)) },
  { area: 'append', name: 'no fact', code: 'LOG_INVALID_EVENT', act: append((e) => delete e.fact) },
  { area: 'append', name: 'an unknown fact type', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'tool.retried', operationId: 'op' }) },
  { area: 'append', name: 'an opened fact without execution', code: 'LOG_INVALID_EVENT', act: append((e) => delete e.fact.execution) },
  { area: 'append', name: 'an unknown fact field', code: 'LOG_INVALID_EVENT', fields: ['fact.note'], act: append((e) => (e.fact.note = 'x')) },
  { area: 'append', name: 'a request digest that is not sha256', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'model.requested', stepId: 's1', model: 'm', requestDigest: 'abc' }) },
  { area: 'append', name: 'an empty stepId', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'model.requested', stepId: '', model: 'm', requestDigest: `sha256:${'0'.repeat(64)}` }) },
  { area: 'append', name: 'an interrupt status "crashed"', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'model.interrupted', stepId: 's1', status: 'crashed' }) },
  { area: 'append', name: 'a tool input with NaN', code: 'LOG_INVALID_EVENT', fields: ['fact.input'], act: appendFact({ type: 'tool.dispatched', operationId: 'op', callId: 'c', name: 'echo', input: { v: Number.NaN } }) },
  { area: 'append', name: 'a tool output that is a function', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'tool.settled', operationId: 'op', outcome: { status: 'succeeded', output: () => 1 } }) },
  { area: 'append', name: 'a settlement status "maybe"', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'tool.settled', operationId: 'op', outcome: { status: 'maybe', message: '' } }) },
  { area: 'append', name: 'a rejection reason "timeout"', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'tool.rejected', operationId: 'op', callId: 'c', name: 'x', input: {}, reason: 'timeout' }) },
  { area: 'append', name: 'a hold id with a space', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'hold.entered', handoffId: 'hold 1' }) },
  { area: 'append', name: 'a failure without a class', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'invocation.ended', outcome: { status: 'failed', class: '' } }) },
  { area: 'append', name: 'an outcome status "done"', code: 'LOG_INVALID_EVENT', act: appendFact({ type: 'invocation.ended', outcome: { status: 'done' } }) },
  { area: 'append', name: 'a string instead of an event', code: 'LOG_INVALID_EVENT', act: (c) => c.log.append('event' as unknown as RuntimeEvent) },
  { area: 'append', name: 'appendAll of nothing', code: 'LOG_INVALID_ARGUMENT', act: (c) => c.log.appendAll([]) },
  {
    area: 'append',
    name: 'provider options whose getter gives a value nested 1,000 deep only on its third read (the parse\'s)',
    code: 'LOG_INVALID_EVENT',
    message: /nested deeper than 64 levels/,
    act: append((e) => {
      let reads = 0
      Object.defineProperty(e.fact.execution, 'providerOptions', { enumerable: true, get: () => (++reads <= 2 ? undefined : deep(1_000)) })
    }),
  },
  { area: 'append', name: 'appendAll of 100,000,000 holes', code: 'LOG_INVALID_EVENT', message: /appendAll's event 0 is a hole/, act: (c) => c.log.appendAll(sparse(100_000_000) as RuntimeEvent[]) },
  { area: 'append', name: 'provider options of 3,000,000 holes in an appended fact', code: 'LOG_INVALID_EVENT', message: /a hole cannot be stored/, act: append((e) => (e.fact.execution.providerOptions = { stop: sparse(3_000_000) })) },
  {
    area: 'append',
    name: 'appendAll of an array whose length cannot be read (a promise rejected, not a throw)',
    code: 'LOG_INVALID_ARGUMENT',
    act: (c) => {
      const events = new Proxy([c.event() as RuntimeEvent], {
        get(target, key, receiver) {
          if (key === 'length') throw new Error('no length')
          return Reflect.get(target, key, receiver)
        },
      })
      let returned: Promise<unknown> | undefined
      try {
        returned = c.log.appendAll(events)
      } catch (error) {
        return Promise.resolve(error).then((thrown) => assert.unreachable(`appendAll threw at the call: ${String(thrown)}`))
      }
      return returned
    },
  },
  {
    area: 'append',
    name: 'appendAll with one valid and one invalid event (nothing is written)',
    code: 'LOG_INVALID_EVENT',
    act: (c) => c.log.appendAll([c.event() as RuntimeEvent, { ...c.event(), recordedAt: -5 } as RuntimeEvent]),
  },
  // appended events: well formed, but contradicting the log
  {
    area: 'append',
    name: 'a fact for an invocation never opened',
    code: 'LOG_REJECTED_FACT',
    act: appendFact({ type: 'tool.settled', operationId: 'op', outcome: { status: 'succeeded', output: 1 } }),
  },
  {
    area: 'append',
    name: 'a fact for an ended invocation',
    code: 'LOG_SEALED',
    act: (c) => {
      const last = c.done.at(-1) as RuntimeEvent
      return c.log.append({ ...last, id: 'invocation-done/late', fact: { type: 'hold.entered', handoffId: 'late' } })
    },
  },
  {
    area: 'append',
    name: 'a stored event id with other content',
    code: 'LOG_CONFLICT',
    act: (c) => {
      const first = c.done[0] as RuntimeEvent
      return c.log.append({ ...first, recordedAt: first.recordedAt + 1 })
    },
  },
  {
    area: 'append',
    name: 'a second invocation for a run that has one',
    code: 'LOG_REJECTED_FACT',
    act: (c) => {
      const first = c.done[0] as RuntimeEvent
      return c.log.append({ ...first, id: 'invocation-other/1', invocation: { ...first.invocation, invocationId: 'invocation-other' } })
    },
  },
  {
    area: 'append',
    name: 'a hold entered while a model request is in flight',
    code: 'LOG_REJECTED_FACT',
    act: (c) => c.log.append({ id: 'invocation-blocked/forged', recordedAt: 1, invocation: c.blocked.invocation, fact: { type: 'hold.entered', handoffId: 'forged' } }),
  },
]

test(
  `bad input: ${cases.length} invalid inputs are each refused with their documented code, and the log digest is unchanged`,
  bounded(30_000, async (dir) => {
    assert.ok(cases.length >= 60, `${cases.length} cases`)
    let blockedIndex = -1
    let sawBlocked!: () => void
    const blockedSeen = new Promise<void>((resolve) => {
      sawBlocked = resolve
    })
    const server = await scriptedModelServer((request: RecordedRequest, index: number) => {
      const user = (request.body?.messages as { role: string; content: string }[] | undefined)?.find((m) => m.role === 'user')
      if (user?.content === 'question blocked') {
        blockedIndex = index
        sawBlocked()
        return answer.text('done', { hold: true })
      }
      return answer.text('done')
    })
    const log = await EventLog.open(join(dir, 'log'))
    const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
    try {
      const tools = () => [effectTool()]
      // A completed run (a continuation source), a sealed run (a handoff source), a run held in a model request.
      assert.equal(await engine.run(messageRun(server.baseUrl, 'done', tools())), { status: 'completed' })
      const sealedRun = messageRun(server.baseUrl, 'sealed', tools(), { mainOutputLimit: 64, providerOptions: { temperature: 0 } })
      const sealing = await engine.start(sealedRun)
      const held = await sealing.handoff().reserve(intentFor('sealed', 'run-sealed')).ready()
      const pause: HandoffPause = await held.commit()
      await sealing.wait()
      const sealedSource = (await log.runSource('session-sealed', 'run-sealed'))?.boundary as RunBoundary
      const doneSource = (await log.runSource('session-done', 'run-done'))?.boundary as RunBoundary
      const blocked = await engine.start(messageRun(server.baseUrl, 'blocked', tools()))
      await blockedSeen
      const done = (await log.prefix(ALL.events, ALL.bytes)).events.filter((e) => e.event.invocation.invocationId === 'invocation-done').map((e) => e.event)

      let fresh = 0
      const context: Context = {
        dir,
        log,
        engine,
        blocked,
        done,
        message: () => {
          fresh += 1
          return messageRun(server.baseUrl, `fresh-${fresh}`, tools()) as Loose
        },
        continuation: () => ({
          ...messageRun(server.baseUrl, 'continued', tools()),
          invocation: { sessionId: 'session-done', turnId: 'turn-continued', runId: 'run-continued', invocationId: 'invocation-continued' },
          work: { kind: 'continuation', source: structuredClone(doneSource) },
        }),
        successor: () => ({
          ...sealedRun,
          tools: tools(),
          provider: { ...sealedRun.provider },
          configuration: { ...sealedRun.configuration },
          invocation: successorOf(pause.intent, sealedSource.invocation),
          work: { kind: 'handoff', source: structuredClone(sealedSource), pause: structuredClone(pause) },
        }),
        intent: () => intentFor('blocked', 'run-blocked') as Loose,
        event: (fact?: Loose) => {
          fresh += 1
          const opened: Fact = {
            type: 'invocation.opened',
            input: { kind: 'message', content: 'direct' },
            configuration: { cwd: '/workspace/faults' },
            execution: { model: 'm', providerOptions: {}, cwd: '/workspace/faults', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: [] } },
          }
          return {
            id: `direct-${fresh}/1`,
            recordedAt: 1_700_000_000_000,
            invocation: { sessionId: `session-direct-${fresh}`, turnId: 'turn', runId: 'run', invocationId: `invocation-direct-${fresh}` },
            fact: fact ?? opened,
          }
        },
      }

      const before = await log.prefix(ALL.events, ALL.bytes)
      const areas = new Map<string, number>()
      for (const item of cases) {
        const error = await rejectsWithCode(async () => item.act(context), item.code, `${item.area}: ${item.name}`)
        if (item.message) assert.match(error.message, item.message, `${item.area}: ${item.name}: the message`)
        for (const field of item.fields ?? []) {
          const named = error.details?.fields as string[] | undefined
          assert.ok(named?.includes(field), `${item.area}: ${item.name}: details.fields ${JSON.stringify(named)} names ${field}`)
        }
        const after = await log.prefix(ALL.events, ALL.bytes)
        assert.is(after.digest, before.digest, `${item.area}: ${item.name} left the digest unchanged`)
        assert.is(after.highWater, before.highWater)
        areas.set(item.area, (areas.get(item.area) ?? 0) + 1)
      }
      for (const area of ['RunInput', 'ids', 'tools', 'HandoffIntent', 'HandoffPause', 'prefix', 'runSource', 'EventLog.open', 'Engine', 'append']) {
        assert.ok((areas.get(area) ?? 0) >= 3, `area ${area} has cases`)
      }

      // The bases were valid: unmutated, each is admitted (and the intent is taken).
      const reservation = blocked.handoff().reserve(context.intent() as HandoffIntent)
      reservation.cancel()
      server.release(blockedIndex)
      assert.equal(await blocked.wait(), { status: 'completed' })
      assert.equal(await engine.run(context.message() as RunInput), { status: 'completed' })
      assert.equal(await engine.run(context.continuation() as RunInput), { status: 'completed' })
      assert.equal(await engine.run(context.successor() as RunInput), { status: 'completed' })
      assert.ok((await log.append(context.event() as RuntimeEvent)) > before.highWater)
      // A claim authorizes one successor.
      const settled = await log.prefix(ALL.events, ALL.bytes)
      const again = context.successor()
      again.invocation = { ...again.invocation }
      await rejectsWithCode(() => engine.start(again as RunInput), ['HANDOFF_CLAIMED', 'RUN_INVALID_INPUT'], 'a second successor')
      assert.is((await log.prefix(ALL.events, ALL.bytes)).digest, settled.digest)
      await engine.drain()
    } finally {
      server.release(blockedIndex)
      await engine.drain()
      await log.close()
      await server.close()
    }
  }),
)

/** A proxy revoked before it is given: any reading of it throws, `Array.isArray` and `instanceof` included. */
function revoked(): object {
  const handle = Proxy.revocable({}, {})
  handle.revoke()
  return handle.proxy
}

test(
  'options that cannot even be looked at (a revoked proxy, an object without a prototype in a message) and a clock that throws are refused with a code, not a TypeError',
  bounded(20_000, async (dir) => {
    await rejectsWithCode(() => EventLog.open(join(dir, 'a'), revoked() as never), 'LOG_INVALID_ARGUMENT', 'EventLog.open(dir, a revoked proxy)')
    const log = await EventLog.open(join(dir, 'log'))
    try {
      await rejectsWithCode(async () => new Engine(revoked() as never), 'ENGINE_INVALID_OPTIONS', 'new Engine(a revoked proxy)')
      await rejectsWithCode(async () => new Engine({ log, maxToolResultBytes: Object.create(null) as never }), 'ENGINE_INVALID_OPTIONS', 'maxToolResultBytes without a prototype')
      await rejectsWithCode(async () => new Engine({ log, toolTimeoutMs: Object.create(null) as never }), 'ENGINE_INVALID_OPTIONS', 'toolTimeoutMs without a prototype')
      await rejectsWithCode(async () => new Engine({ log, maxToolResultBytes: revoked() as never }), 'ENGINE_INVALID_OPTIONS', 'maxToolResultBytes a revoked proxy')
      await rejectsWithCode(() => EventLog.open(join(dir, 'b'), { durability: revoked() as never }), 'LOG_INVALID_ARGUMENT', 'durability a revoked proxy')
      await rejectsWithCode(async () => answer.status(429, { retryAfter: 2n as never }), 'TESTING_INVALID_OPTIONS', 'a BigInt retryAfter')
      await rejectsWithCode(() => recoverInvocations(log, revoked() as never), 'LOG_INVALID_ARGUMENT', 'recoverInvocations(log, a revoked proxy)')
      // An invocation a crash left open, and a clock that throws when recovery closes it: nothing is written.
      const opened = { id: 'open/1', recordedAt: 1, invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'open' }, fact: logFacts.opened() }
      await log.append(opened as RuntimeEvent)
      const before = log.head()
      await rejectsWithCode(
        () =>
          recoverInvocations(log, {
            now: () => {
              throw new Error('clock broken')
            },
          }),
        'LOG_INVALID_ARGUMENT',
        'a clock that throws',
      )
      assert.equal(log.head(), before, 'nothing was written')
      assert.is(await recoverInvocations(log), 1, 'the invocation is still open, for a recovery with a clock')
    } finally {
      await log.close()
    }
  }),
)

test('the pure helpers, called from plain JavaScript with what is not a fact, a snapshot or an intent, refuse with a code', () => {
  const junk: { what: string; call: () => unknown; code: string; details?: Record<string, unknown> }[] = [
    { what: 'foldFacts([opened, completed])', call: () => foldFacts([logFacts.opened(), logFacts.completed('s1')]), code: 'MACHINE_REJECTED' },
    { what: 'foldFacts([null])', call: () => foldFacts([null as unknown as Fact]), code: 'MACHINE_REJECTED', details: { index: 0, state: 'opening', type: null } },
    { what: 'foldFacts(undefined)', call: () => foldFacts(undefined as unknown as Fact[]), code: 'MACHINE_REJECTED' },
    { what: 'foldFacts(facts, {})', call: () => foldFacts([], {} as InvocationSnapshot), code: 'MACHINE_REJECTED' },
    { what: 'applyFact(undefined, fact)', call: () => applyFact(undefined as unknown as InvocationSnapshot, { type: 'hold.released', handoffId: 'h' }), code: 'MACHINE_REJECTED' },
    { what: 'applyFact(snapshot, "text")', call: () => applyFact(initialInvocationSnapshot(), 'text' as unknown as Fact), code: 'MACHINE_REJECTED' },
    {
      what: 'foldFacts with a model.completed that has no output',
      call: () => foldFacts([logFacts.opened(), logFacts.requested('step-1'), { type: 'model.completed', stepId: 'step-1' } as Fact]),
      code: 'MACHINE_REJECTED',
      details: { index: 2, state: 'awaitingModel', type: 'model.completed' },
    },
    {
      what: 'applyFact with an invocation.ended that has no outcome',
      call: () => applyFact(foldFacts([logFacts.opened(), logFacts.requested('step-1')]), { type: 'invocation.ended' } as Fact),
      code: 'MACHINE_REJECTED',
    },
    // Not whole facts: the machine would take them on a wrong reading (the log refuses them as LOG_INVALID_EVENT).
    {
      what: 'foldFacts of facts without their members (no input, stepId, finishReason or outcome class)',
      call: () =>
        foldFacts([
          { type: 'invocation.opened' },
          { type: 'model.requested' },
          { type: 'model.completed', output: { toolCalls: [] } },
          { type: 'invocation.ended', outcome: { status: 'completed' } },
        ] as unknown as Fact[]),
      code: 'MACHINE_REJECTED',
      details: { index: 0, state: 'opening', type: 'invocation.opened' },
    },
    {
      what: 'applyFact with a hold.entered without its handoffId',
      call: () => applyFact(foldFacts([logFacts.opened()]), { type: 'hold.entered' } as unknown as Fact),
      code: 'MACHINE_REJECTED',
      details: { state: 'safePoint', type: 'hold.entered' },
    },
    { what: 'applyFact(snapshot, an object without a prototype)', call: () => applyFact(initialInvocationSnapshot(), Object.create(null) as Fact), code: 'MACHINE_REJECTED', details: { state: 'opening', type: null } },
    { what: 'foldFacts([{ toString: null }])', call: () => foldFacts([{ toString: null } as unknown as Fact]), code: 'MACHINE_REJECTED', details: { index: 0, state: 'opening', type: null } },
    {
      what: 'applyFact(snapshot, a proxy whose get trap throws)',
      call: () => applyFact(initialInvocationSnapshot(), new Proxy({}, { get: () => { throw new Error('trap') } }) as Fact),
      code: 'MACHINE_REJECTED',
      details: { state: 'opening', type: null },
    },
    {
      what: 'applyFact(snapshot, a fact whose getter throws past its type)',
      call: () => applyFact(initialInvocationSnapshot(), { ...logFacts.opened(), get input(): never { throw new Error('getter') } } as unknown as Fact),
      code: 'MACHINE_REJECTED',
      details: { state: 'opening', type: 'invocation.opened' },
    },
    // A revoked proxy throws even for Array.isArray and instanceof.
    { what: 'foldFacts(a revoked proxy)', call: () => foldFacts(revoked() as Fact[]), code: 'MACHINE_REJECTED', details: { index: null } },
    { what: 'applyFact(a revoked proxy, fact)', call: () => applyFact(revoked() as InvocationSnapshot, logFacts.opened()), code: 'MACHINE_REJECTED' },
    { what: 'applyFact(snapshot, a revoked proxy)', call: () => applyFact(initialInvocationSnapshot(), revoked() as Fact), code: 'MACHINE_REJECTED', details: { state: 'opening', type: null } },
    { what: 'stateOf(a revoked proxy)', call: () => stateOf(revoked() as InvocationSnapshot), code: 'MACHINE_REJECTED' },
    { what: 'accepts(a revoked proxy, fact)', call: () => accepts(revoked() as InvocationSnapshot, logFacts.opened()), code: 'MACHINE_REJECTED' },
    { what: 'transcriptOf("text")', call: () => transcriptOf('text' as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'transcriptOf([1])', call: () => transcriptOf([1] as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'answerOf(a revoked proxy)', call: () => answerOf(revoked() as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'answerOf([{ seq: 1 }])', call: () => answerOf([{ seq: 1 }] as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'retryAfterMsOf({ "retry-after": "2" })', call: () => retryAfterMsOf({ 'retry-after': '2' } as never), code: 'RUN_INVALID_INPUT', details: { fields: ['headers'] } },
    { what: 'catalogOf("tools")', call: () => catalogOf('tools' as never), code: 'RUN_INVALID_INPUT', details: { fields: ['tools'] } },
    { what: 'catalogOf(100,000,000 holes)', call: () => catalogOf(sparse(100_000_000) as never), code: 'RUN_INVALID_INPUT', details: { fields: ['tools.0'] } },
    { what: 'transcriptOf(a list of holes)', call: () => transcriptOf(sparse(2) as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'answerOf(a list with a hole)', call: () => answerOf([, { event: { fact: { type: 'model.requested' } } }] as never), code: 'LOG_INVALID_ARGUMENT' },
    { what: 'catalogOf([null])', call: () => catalogOf([null] as never), code: 'RUN_INVALID_INPUT', details: { fields: ['tools.0.name'] } },
    { what: 'catalogOf([{ name: "a b" }])', call: () => catalogOf([{ name: 'a b' }] as never), code: 'RUN_INVALID_INPUT', details: { fields: ['tools.0.name'] } },
    { what: 'stateOf(undefined)', call: () => stateOf(undefined as unknown as InvocationSnapshot), code: 'MACHINE_REJECTED' },
    { what: 'stateOf({})', call: () => stateOf({} as InvocationSnapshot), code: 'MACHINE_REJECTED' },
    { what: 'accepts(undefined, undefined)', call: () => accepts(undefined as unknown as InvocationSnapshot, undefined as unknown as Fact), code: 'MACHINE_REJECTED' },
    { what: 'successorOf(undefined, invocation)', call: () => successorOf(undefined as unknown as HandoffIntent, { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' }), code: 'HANDOFF_MISMATCH', details: { field: 'intent', fields: ['intent'] } },
    { what: 'successorOf(intent, {})', call: () => successorOf(intentFor('x', 'r'), {} as never), code: 'HANDOFF_MISMATCH' },
    {
      what: 'successorOf(a proxy that cannot be read, invocation)',
      call: () =>
        successorOf(
          new Proxy({} as HandoffIntent, {
            get() {
              throw new Error('trap')
            },
            ownKeys() {
              throw new Error('trap')
            },
          }),
          { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
        ),
      code: 'HANDOFF_MISMATCH',
      details: { field: 'intent', fields: ['intent'] },
    },
  ]
  for (const { what, call, code, details } of junk) {
    let caught: { code?: string; details?: Record<string, unknown>; message?: string } | undefined
    try {
      call()
    } catch (error) {
      caught = error as typeof caught
    }
    assert.is(caught?.code, code, what)
    // One code, at the start: a refusal that quotes another leaves the other's code out.
    assert.ok(caught?.message?.startsWith(`${code}: `), `${what}: ${caught?.message}`)
    assert.not.match(caught?.message?.slice(code.length + 2) ?? '', /\b[A-Z]+(?:_[A-Z]+)+: /, `${what}: one code in the message`)
    assertDetailsFit(caught as { code: string; details?: unknown }, what)
    if (details) assert.equal(caught?.details, details, `${what}: details`)
  }
  assert.equal([retryAfterMsOf(new Headers({ 'retry-after': '2' })), retryAfterMsOf(undefined)], [2_000, undefined], 'retryAfterMsOf reads a Headers')
  assert.equal(catalogOf([{ name: 'echo', description: 'd' }] as never), catalogOf([{ name: 'echo', description: 'd', execute: () => 1 }]), "a tool's description has a catalog without its execute")
  assert.is(accepts(initialInvocationSnapshot(), null as unknown as Fact), false, 'accepts() is false for what is not a fact')
  assert.is(accepts(initialInvocationSnapshot(), { type: 'invocation.opened' } as unknown as Fact), false, 'accepts() is false for a fact that is not whole')
  assert.is(accepts(initialInvocationSnapshot(), logFacts.opened()), true, 'accepts() takes a whole fact')
  // The snapshot keeps its own copy: changing the fact afterwards changes nothing.
  const ended: Fact = { type: 'invocation.ended', outcome: { status: 'failed', class: 'cancelled', message: 'stop' } }
  const after = applyFact(foldFacts([logFacts.opened()]), ended)
  ;(ended as { outcome: { message: string } }).outcome.message = 'changed'
  assert.is((after.context.outcome as { message?: string } | null)?.message, 'stop')
  const fields = (() => {
    try {
      successorOf(intentFor('x', 'r'), {} as never)
    } catch (error) {
      return (error as { details?: { fields?: string[] } }).details?.fields
    }
  })()
  assert.equal(fields, ['source.sessionId', 'source.turnId', 'source.runId', 'source.invocationId'])
})

test.run()
