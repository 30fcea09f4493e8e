/**
 * Generated bad and borderline input at the public API, against a real log: a valid run input,
 * handoff intent or log query with one member replaced by a generated value (fast-check's
 * `anything`, plus the odd values JavaScript callers hand over: -0, huge and unsafe integers,
 * BigInt, Symbol, Date, Map, typed arrays, sparse arrays, Proxies, cyclic objects, getters that
 * throw, `toJSON`, `__proto__` and `constructor` keys, lone surrogates). Each call is either
 * refused with a FactstateError whose `code` is the call's documented one, whose details fit its
 * code and name a field the message names, with the log's digest unchanged; or it is accepted and
 * the run completes, its stored input reading back as given. No call may throw anything else,
 * hang, or leave a promise rejected unhandled.
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, FactstateError, type HandoffIntent, ModelExecutor, type RunInput, type RunningInvocation } from '../index.js'
import { serveInspector } from '../inspector/index.js'
import { telemetryFromLog } from '../opentelemetry/index.js'
import { recoverInvocations, successorOf } from '../index.js'
import { callTool } from '../testing/index.js'
import { type RecordedRequest, answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { assertDetailsFit } from './support/error-details.js'
import { effectTool, intentFor, messageRun } from './support/faults-engine.js'
import { bounded } from './support/temp.js'

type Loose = Record<string, any>

const ALL = { events: 1_000_000, bytes: 1_000_000_000 }

/** A cyclic object. */
function cyclic(): Loose {
  const value: Loose = { a: 1 }
  value.self = value
  return value
}

/** An object whose one enumerable getter throws. */
function throwingGetter(): Loose {
  return Object.defineProperty({}, 'x', {
    enumerable: true,
    get() {
      throw new Error('getter throws')
    },
  })
}

function sparse(length: number): unknown[] {
  const holes: unknown[] = []
  holes.length = length
  return holes
}

function deep(levels: number): Loose {
  let value: Loose = {}
  for (let level = 0; level < levels; level += 1) value = { a: value }
  return value
}

/** The odd values a JavaScript caller may hand over, each made fresh. */
const oddValues: (() => unknown)[] = [
  () => -0,
  () => Number.MAX_SAFE_INTEGER + 2,
  () => 2 ** 64,
  () => -(2 ** 63),
  () => 1e308,
  () => Number.MIN_VALUE,
  () => 10n,
  () => Symbol('s'),
  () => new Date(0),
  () => new Date(Number.NaN),
  () => new Map([['a', 1]]),
  () => new Set([1]),
  () => new Uint8Array([1, 2, 3]),
  () => new Float64Array([Number.NaN]),
  () => new ArrayBuffer(4),
  () => sparse(5),
  () => [1, , 3],
  () => new Proxy({ a: 1 }, {}),
  () => new Proxy([1], {}),
  () => {
    const revocable = Proxy.revocable({}, {})
    revocable.revoke()
    return revocable.proxy
  },
  () => cyclic(),
  () => throwingGetter(),
  () => ({ toJSON: () => 'replaced' }),
  () => ({ toJSON: () => {
    throw new Error('toJSON throws')
  } }),
  () => JSON.parse('{"__proto__":{"polluted":1}}'),
  () => ({ constructor: 'x', prototype: 1, hasOwnProperty: 2 }),
  () => Object.create(null),
  () => Object.assign(Object.create(null), { a: 1 }),
  () => new (class Custom {
    a = 1
  })(),
  () => '',
  () => ' ',
  () => 'a\u0000b',
  () => '\ud800',
  () => 'é\u0301🙂',
  () => 'x'.repeat(128),
  () => 'x'.repeat(129),
  () => 'x'.repeat(100_000),
  () => deep(30),
  () => deep(70),
  () => Number.NaN,
  () => Number.POSITIVE_INFINITY,
  () => () => 1,
  () => new Error('an error'),
  () => /regexp/,
  () => Promise.resolve(1),
  () => new String('boxed'),
  () => new Number(3),
  () => true,
  () => null,
  () => undefined,
]

/** A maker of a generated value (made inside the property: fast-check itself cannot inspect a revoked Proxy). */
interface Odd {
  make(): unknown
  toString(): string
}
const odd: fc.Arbitrary<Odd> = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0, max: oddValues.length - 1 }).map((index) => ({ make: oddValues[index] as () => unknown, toString: () => `odd value ${index}` })) },
  {
    weight: 2,
    arbitrary: fc.anything({
      maxDepth: 3,
      withBigInt: true,
      withDate: true,
      withMap: true,
      withSet: true,
      withTypedArray: true,
      withSparseArray: true,
      withNullPrototype: true,
      withBoxedValues: true,
      withObjectString: true,
      withUnicodeString: true,
    }).map((value) => ({ make: () => value, toString: () => describe(value) })),
  },
)

/** The members of a message run a generated value replaces (or adds, where it names none). */
const runPaths = [
  'invocation',
  'invocation.sessionId',
  'invocation.turnId',
  'invocation.runId',
  'invocation.invocationId',
  'provider',
  'provider.kind',
  'provider.model',
  'provider.apiKey',
  'provider.headers',
  'provider.headers.x-a',
  'configuration',
  'configuration.cwd',
  'configuration.workspaceIdentity',
  'maxSteps',
  'mainOutputLimit',
  'providerOptions',
  'providerOptions.temperature',
  'providerOptions.nested',
  'requestFingerprint',
  'instructions',
  'work',
  'work.kind',
  'work.content',
  'tools',
  'tools.0',
  'tools.0.name',
  'tools.0.description',
  'tools.0.inputSchema',
  'tools.0.inputSchema.properties',
  'tools.0.inputSchema.properties.value',
  'tools.0.timeoutMs',
  'tools.0.needsApproval',
  'tools.0.readOnly',
  'tools.0.retry',
] as const

function setPath(target: Loose, path: string, value: unknown): void {
  const parts = path.split('.')
  let at: Loose = target
  for (const part of parts.slice(0, -1)) at = at[part]
  at[parts.at(-1) as string] = value
}

/** Whether `value` is plain JSON data (what a stored member may be given as and read back equal). */
function plainJson(value: unknown, depth = 0): boolean {
  if (depth > 40) return false
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return true
  if (typeof value === 'number') return Number.isFinite(value)
  if (Array.isArray(value)) return Object.getPrototypeOf(value) === Array.prototype && value.length === Object.keys(value).length && value.every((item) => plainJson(item, depth + 1))
  if (typeof value !== 'object') return false
  if (Object.getPrototypeOf(value) !== Object.prototype) return false
  return Object.values(value as object).every((item) => plainJson(item, depth + 1))
}

/** Deep equality of plain data. */
function same(a: unknown, b: unknown): boolean {
  // A -0 is stored as 0, as JSON writes it (README).
  if (typeof a === 'number' && typeof b === 'number') return a === b
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const keysA = Object.keys(a)
  const keysB = Object.keys(b)
  return keysA.length === keysB.length && keysA.every((key) => Object.hasOwn(b, key) && same((a as Loose)[key], (b as Loose)[key]))
}

function describe(value: unknown): string {
  try {
    return fc.stringify(value).slice(0, 200)
  } catch {
    return typeof value
  }
}

/** Asserts `error` is a FactstateError of one of `codes`, with details of its code's shape. */
function assertRefusal(error: unknown, codes: readonly string[], what: string): FactstateError {
  assert.ok(error instanceof FactstateError, `${what}: refused with a FactstateError, not ${describe(error)} (${(error as Error)?.stack ?? ''})`)
  const code = (error as FactstateError).code
  assert.ok(codes.includes(code), `${what}: refused with ${codes.join(' or ')}, not ${code} (${(error as Error).message})`)
  assertDetailsFit(error as FactstateError, what)
  return error as FactstateError
}

/** The path a RUN_INVALID_INPUT's message must name: one of its fields, or its last segment. */
function assertNamesField(error: FactstateError, what: string): void {
  const details = error.details as { fields?: string[]; field?: string } | undefined
  const fields = [...(details?.fields ?? []), ...(details?.field === undefined ? [] : [details.field])]
  assert.ok(fields.length > 0, `${what}: the refusal names a field (${error.message})`)
  // As given, or as JSON quotes it (a quote or a control character escaped); the whole path or its last segment.
  const names = (name: string) => error.message.includes(name) || error.message.includes(JSON.stringify(name).slice(1, -1))
  const named = fields.some((field) => field === '(root)' || names(field) || names(field.split('.').at(-1) as string))
  assert.ok(named, `${what}: the message names one of ${JSON.stringify(fields)}: ${error.message}`)
}

/**
 * Runs `body` and fails if any promise was left rejected unhandled meanwhile (counted until a turn
 * of the event loop after it, its closing included).
 */
async function withoutUnhandled(body: () => Promise<void>): Promise<void> {
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown) => unhandled.push(reason)
  process.on('unhandledRejection', onUnhandled)
  try {
    await body()
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(unhandled.map(describe), [], 'no promise was left rejected unhandled')
  } finally {
    process.off('unhandledRejection', onUnhandled)
  }
}

test(
  'engine.start: a run input with one member replaced by a generated value is refused with RUN_INVALID_INPUT, nothing written, or run and read back as given',
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      const server = await scriptedModelServer((_request: RecordedRequest) => answer.text('done'))
      const log = await EventLog.open(join(dir, 'log'))
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000, retries: 0 }) })
      let fresh = 0
      try {
        // The base every case mutates is admitted as it is.
        const base = messageRun(server.baseUrl, 'base', [effectTool()], { providerOptions: { temperature: 0 } })
        base.provider.headers = { 'x-a': '1' }
        assert.equal(await engine.run(base), { status: 'completed' })
        await fc.assert(
          fc.asyncProperty(fc.constantFrom(...runPaths), odd, async (path, maker) => {
            const value = maker.make()
            fresh += 1
            const input = messageRun(server.baseUrl, `gen-${fresh}`, [effectTool()], { providerOptions: { temperature: 0 } }) as Loose
            input.provider.headers = { 'x-a': '1' }
            setPath(input, path, value)
            const what = `${path} = ${describe(value)}`
            const before = log.head()
            let running: RunningInvocation | undefined
            try {
              running = await engine.start(input as RunInput)
            } catch (error) {
              const refusal = assertRefusal(error, ['RUN_INVALID_INPUT'], what)
              assertNamesField(refusal, what)
              assert.equal(log.head(), before, `${what}: nothing was written`)
              return
            }
            const outcome = await running.wait()
            assert.ok(['completed', 'failed'].includes(outcome.status), `${what}: ${JSON.stringify(outcome)}`)
            const events = (await log.prefix(ALL.events, ALL.bytes)).events.map((e) => e.event)
            const opened = events.find((event) => event.invocation.invocationId === running.invocation.invocationId && event.fact.type === 'invocation.opened')
            assert.ok(opened, `${what}: the run was opened`)
            const fact = opened.fact as Loose
            // A member given as plain JSON reads back as given.
            if (path === 'providerOptions' && plainJson(value)) assert.ok(same(fact.execution.providerOptions, value), `${what}: providerOptions read back ${describe(fact.execution.providerOptions)}`)
            if (path.startsWith('providerOptions.') && plainJson(value)) {
              const key = path.split('.')[1] as string
              assert.ok(same(fact.execution.providerOptions[key], value), `${what}: read back ${describe(fact.execution.providerOptions[key])}`)
            }
            if (path === 'work.content' && typeof value === 'string') assert.is(fact.input.content, value, `${what}: the message reads back as given`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 150), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
        const verified = await log.verify()
        assert.is(verified.digest, log.head().digest)
      } finally {
        await engine.drain()
        await log.close()
        await server.close()
      }
    })),
)

/** The log's query calls, each with a generated argument in one position. */
const queries: { name: string; call: (log: EventLog, value: unknown) => unknown }[] = [
  { name: 'runs(value)', call: (log, value) => log.runs(value as string) },
  { name: 'latestRun(value)', call: (log, value) => log.latestRun(value as string) },
  { name: 'runSource(value, run)', call: (log, value) => log.runSource(value as string, 'run-done') },
  { name: 'runSource(session, value)', call: (log, value) => log.runSource('session-done', value as string) },
  { name: 'sessions(value)', call: (log, value) => log.sessions(value as {}) },
  { name: 'sessions({ limit: value })', call: (log, value) => log.sessions({ limit: value } as never) },
  { name: 'pendingSessions(value)', call: (log, value) => log.pendingSessions(value as {}) },
  { name: 'pendingSessions({ unanswered: value })', call: (log, value) => log.pendingSessions({ unanswered: value } as never) },
  { name: 'events(value)', call: (log, value) => collect(log.events(value as {})) },
  { name: 'events({ from: value })', call: (log, value) => collect(log.events({ from: value } as never)) },
  { name: 'events({ to: value })', call: (log, value) => collect(log.events({ to: value } as never)) },
  { name: 'prefix(value, bytes)', call: (log, value) => log.prefix(value as number, ALL.bytes) },
  { name: 'prefix(events, value)', call: (log, value) => log.prefix(ALL.events, value as number) },
]

async function collect(events: AsyncIterable<unknown>): Promise<number> {
  let count = 0
  for await (const _ of events) count += 1
  return count
}

test(
  "the log's queries given a generated argument answer or refuse with LOG_INVALID_ARGUMENT naming the argument; nothing is written",
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      const server = await scriptedModelServer(() => answer.text('done'))
      const log = await EventLog.open(join(dir, 'log'))
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
      try {
        assert.equal(await engine.run(messageRun(server.baseUrl, 'done', [effectTool()])), { status: 'completed' })
        const before = log.head()
        await fc.assert(
          fc.asyncProperty(fc.integer({ min: 0, max: queries.length - 1 }), odd, async (index, maker) => {
            const value = maker.make()
            const query = queries[index] as (typeof queries)[number]
            const what = `${query.name} with ${describe(value)}`
            try {
              await query.call(log, value)
            } catch (error) {
              // A bound of 0 (or -0) is valid, and too small for this log.
              const refusal = assertRefusal(error, query.name.startsWith('prefix') ? ['LOG_INVALID_ARGUMENT', 'LOG_PREFIX_TOO_LARGE'] : ['LOG_INVALID_ARGUMENT'], what)
              const field = (refusal.details as { field?: string } | undefined)?.field
              // Named as given, or quoted as JSON quotes it (a control character escaped).
              if (field !== undefined) assert.ok(refusal.message.includes(field) || refusal.message.includes(JSON.stringify(field).slice(1, -1)), `${what}: the message names ${field}: ${refusal.message}`)
            }
            assert.equal(log.head(), before, `${what}: nothing was written`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 300), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
        assert.is((await log.verify()).digest, before.digest)
      } finally {
        await engine.drain()
        await log.close()
        await server.close()
      }
    })),
)

/**
 * A log and engine with one run ("blocked") whose first model request the server holds, so that
 * its handle stays live while the properties work on it; `release()` lets the request answer.
 * Released, drained and closed after `body`, whatever it did.
 */
async function withBlockedRun<T>(
  dir: string,
  body: (context: { log: EventLog; engine: Engine; baseUrl: string; blocked: RunningInvocation; before: ReturnType<EventLog['head']>; release: () => void }) => Promise<T>,
): Promise<T> {
  let heldIndex = -1
  let sawHeld!: () => void
  const heldSeen = new Promise<void>((resolve) => {
    sawHeld = resolve
  })
  const server = await scriptedModelServer((_request: RecordedRequest, index: number) => {
    if (heldIndex === -1) {
      heldIndex = index
      sawHeld()
      return answer.text('done', { hold: true })
    }
    return answer.text('done')
  })
  const log = await EventLog.open(join(dir, 'log'))
  const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 20_000 }) })
  const release = () => server.release(heldIndex)
  try {
    const blocked = await engine.start(messageRun(server.baseUrl, 'blocked', [effectTool()]))
    await heldSeen
    return await body({ log, engine, baseUrl: server.baseUrl, blocked, before: log.head(), release })
  } finally {
    release()
    await engine.drain()
    await log.close()
    await server.close()
  }
}

const intentPaths = ['handoffId', 'hostEpoch', 'rootRunId', 'successorRunId', 'successorInvocationId', 'claimId', 'extra'] as const

test(
  'handoff().reserve: an intent with one member replaced by a generated value is refused with HANDOFF_MISMATCH, nothing written, or taken and cancelled',
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      return withBlockedRun(dir, async ({ log, blocked, before, release }) => {
        let fresh = 0
        await fc.assert(
          fc.asyncProperty(fc.constantFrom(...intentPaths), odd, async (path, maker) => {
            const value = maker.make()
            fresh += 1
            const intent = intentFor(`gen-${fresh}`, 'run-blocked') as Loose
            intent[path] = value
            const what = `intent.${path} = ${describe(value)}`
            try {
              const reservation = blocked.handoff().reserve(intent as HandoffIntent)
              const ready = reservation.ready()
              reservation.cancel()
              await ready.then(
                () => assert.unreachable(`${what}: a cancelled reservation was held`),
                (error: unknown) => assertRefusal(error, ['HANDOFF_CANCELLED'], what),
              )
            } catch (error) {
              if (error instanceof assert.Assertion) throw error
              const refusal = assertRefusal(error, ['HANDOFF_MISMATCH'], what)
              assertNamesField(refusal, what)
            }
            assert.equal(log.head(), before, `${what}: nothing was written`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 150), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
        release()
        assert.equal(await blocked.wait(), { status: 'completed' })
      })
    })),
)

/** What an accepted call made, to be closed. */
type Made = { close?: () => Promise<unknown>; stop?: () => Promise<unknown> } | undefined

/** Public calls taking options, each given one option (a documented name or another) of a generated value. */
const optionCalls: { name: string; code: string | string[]; keys: readonly string[]; call: (context: { log: EventLog; dir: string; fresh: string }, options: Loose) => Promise<Made> | Made }[] = [
  { name: 'EventLog.open', code: 'LOG_INVALID_ARGUMENT', keys: ['durability', 'create', 'waitMs', 'signal', 'durabilty'], call: ({ fresh }, options) => EventLog.open(fresh, options as never) },
  // A directory that cannot be made in (a path that is not there, a file) is LOG_IO.
  { name: 'EventLog.openSnapshot', code: ['LOG_INVALID_ARGUMENT', 'LOG_IO'], keys: ['directory', 'dir'], call: ({ dir }, options) => EventLog.openSnapshot(join(dir, 'log'), options as never) },
  { name: 'new Engine', code: 'ENGINE_INVALID_OPTIONS', keys: ['model', 'now', 'eventId', 'maxToolResultBytes', 'maxInputBytes', 'toolTimeoutMs', 'secrets', 'evntId'], call: ({ log }, options) => void new Engine({ log, ...options } as never) },
  { name: 'new ModelExecutor', code: 'ENGINE_INVALID_OPTIONS', keys: ['timeoutMs', 'idleTimeoutMs', 'retries', 'backoffMs', 'maxBackoffMs', 'createClient', 'timeout'], call: (_, options) => void new ModelExecutor(options as never) },
  { name: 'recoverInvocations', code: 'LOG_INVALID_ARGUMENT', keys: ['onClosed', 'onclosed', 'now'], call: async ({ log }, options) => void (await recoverInvocations(log, options as never)) },
  { name: 'telemetryFromLog', code: 'OPENTELEMETRY_INVALID_OPTIONS', keys: ['tracer', 'meter', 'from', 'providerName', 'attributes', 'provider'], call: ({ log }, options) => telemetryFromLog(log, options as never) },
  // maxEvents and maxBytes below the log's size refuse it (LOG_PREFIX_TOO_LARGE, README).
  { name: 'serveInspector', code: ['INSPECTOR_INVALID_OPTIONS', 'LOG_PREFIX_TOO_LARGE'], keys: ['port', 'host', 'maxEvents', 'maxBytes', 'maxIndexed', 'refresh', 'token', 'engine', 'prot'], call: ({ log }, options) => serveInspector({ log, port: 0, ...options } as never) },
]

/** A full listing of `dir`: names and sizes, what a write would change. */
async function listing(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])
  return entries.map((entry) => join(entry.parentPath, entry.name)).sort()
}

test(
  'options of the public calls given one generated value are refused with the call\'s code naming the option, nothing made or written, or accepted',
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      const server = await scriptedModelServer(() => answer.text('done'))
      const log = await EventLog.open(join(dir, 'log'))
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000 }) })
      let fresh = 0
      try {
        assert.equal(await engine.run(messageRun(server.baseUrl, 'done', [effectTool()])), { status: 'completed' })
        await fc.assert(
          fc.asyncProperty(fc.integer({ min: 0, max: optionCalls.length - 1 }), fc.nat(), odd, async (index, keyIndex, maker) => {
            const target = optionCalls[index] as (typeof optionCalls)[number]
            const key = target.keys[keyIndex % target.keys.length] as string
            const value = maker.make()
            const what = `${target.name}({ ${key}: ${describe(value)} })`
            fresh += 1
            const place = join(dir, `fresh-${fresh}`)
            const before = log.head()
            const files = await listing(join(dir, 'log'))
            let made: Made
            try {
              made = await target.call({ log, dir, fresh: place }, { [key]: value })
            } catch (error) {
              const refusal = assertRefusal(error, typeof target.code === 'string' ? [target.code] : target.code, what)
              const field = (refusal.details as { field?: string } | undefined)?.field
              // Named as given, as JSON quotes it, or (a member of an option) by its last segment.
              const names = (name: string) => refusal.message.includes(name) || refusal.message.includes(JSON.stringify(name).slice(1, -1))
              if (refusal.code !== 'LOG_IO' && refusal.code !== 'LOG_PREFIX_TOO_LARGE') assert.ok(field !== undefined && (names(field) || names(field.split('.').at(-1) as string)), `${what}: the message names ${field}: ${refusal.message}`)
              assert.equal(await listing(place), [], `${what}: nothing was made`)
            }
            await made?.close?.()
            await made?.stop?.()
            assert.equal(log.head(), before, `${what}: nothing was written`)
            assert.equal(await listing(join(dir, 'log')), files, `${what}: no file of the log was made or removed`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 150), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
      } finally {
        await engine.drain()
        await log.close()
        await server.close()
      }
    })),
)

/** The members of an appended `invocation.opened` event a generated value replaces (or adds). */
const eventPaths = [
  'id',
  'recordedAt',
  'invocation',
  'invocation.sessionId',
  'invocation.invocationId',
  'fact',
  'fact.type',
  'fact.input',
  'fact.input.content',
  'fact.configuration.cwd',
  'fact.configuration.workspaceIdentity',
  'fact.execution.model',
  'fact.execution.providerOptions',
  'fact.execution.providerOptions.temperature',
  'fact.execution.tools.names',
  'fact.execution.tools.catalogDigest',
  'fact.note',
  'seq',
] as const

test(
  'log.append: an event with one member replaced by a generated value is refused with LOG_INVALID_EVENT naming it, nothing written, or stored and read back as given',
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      const log = await EventLog.open(join(dir, 'log'))
      let fresh = 0
      const opened = (): Loose => {
        fresh += 1
        return {
          id: `direct-${fresh}/1`,
          recordedAt: 1_700_000_000_000,
          invocation: { sessionId: `session-${fresh}`, turnId: 'turn', runId: 'run', invocationId: `invocation-${fresh}` },
          fact: {
            type: 'invocation.opened',
            input: { kind: 'message', content: 'direct' },
            configuration: { cwd: '/workspace/faults' },
            execution: { model: 'm', providerOptions: { temperature: 0 }, cwd: '/workspace/faults', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: [] } },
          },
        }
      }
      try {
        // The base every case mutates is stored as it is.
        assert.is(await log.append(opened() as never), 1)
        await fc.assert(
          fc.asyncProperty(fc.constantFrom(...eventPaths), odd, async (path, maker) => {
            const value = maker.make()
            const event = opened()
            setPath(event, path, value)
            const what = `event.${path} = ${describe(value)}`
            const before = log.head()
            let seq: number
            try {
              seq = await log.append(event as never)
            } catch (error) {
              const refusal = assertRefusal(error, ['LOG_INVALID_EVENT', 'LOG_REJECTED_FACT'], what)
              if (refusal.code === 'LOG_INVALID_EVENT') {
                const fields = (refusal.details as { fields: string[] }).fields
                // An event that cannot be read at all names no field.
                if (fields.length > 0) assertNamesField(refusal, what)
              }
              assert.equal(log.head(), before, `${what}: nothing was written`)
              return
            }
            assert.is(seq, before.highWater + 1, `${what}: stored as the next fact`)
            let read: Loose | undefined
            for await (const entry of log.events({ from: seq, to: seq })) read = entry.event as Loose
            assert.ok(read, `${what}: read back`)
            // Plain JSON data reads back as given (a -0 as 0, as JSON writes it).
            const parts = path.split('.')
            let given: unknown = event
            let got: unknown = read
            for (const part of parts) {
              given = (given as Loose)?.[part]
              got = (got as Loose)?.[part]
            }
            if (plainJson(given)) assert.ok(same(got, given), `${what}: read back ${describe(got)}`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 200), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
        assert.is((await log.verify()).digest, log.head().digest)
      } finally {
        await log.close()
      }
    })),
)

/** A proxy revoked before it is handed over: every read of it throws. */
function revoked(): object {
  const revocable = Proxy.revocable({}, {})
  revocable.revoke()
  return revocable.proxy
}

/** Awaits `action` (a throw at the call counts) and returns the FactstateError it was refused with. */
async function refusedWith(action: () => unknown, code: string, what: string): Promise<FactstateError> {
  try {
    await action()
  } catch (error) {
    return assertRefusal(error, [code], what)
  }
  assert.unreachable(`${what}: accepted`)
  throw new Error('unreachable')
}

test(
  'what the properties above found, as fixed cases: a revoked proxy or an uncopiable member is refused with its code, named',
  bounded(30_000, async (dir) => {
    return withBlockedRun(dir, async ({ log, engine, baseUrl, blocked, before, release }) => {
      // zod builds a refused parse's error on its first read, after the try around the parse: a TypeError escaped.
      const reserve = await refusedWith(() => blocked.handoff().reserve({ ...intentFor('r', 'run-blocked'), hostEpoch: revoked() } as never), 'HANDOFF_MISMATCH', 'reserve')
      assert.equal(reserve.details, { field: 'intent', fields: ['intent'] })
      const invocation = blocked.invocation
      await refusedWith(() => successorOf({ ...intentFor('s', 'run-blocked'), claimId: revoked() } as never, invocation), 'HANDOFF_MISMATCH', 'successorOf')
      assert.equal((await refusedWith(() => callTool(effectTool(), {}, { invocation: { ...invocation, runId: revoked() } as never }), 'TESTING_INVALID_OPTIONS', 'callTool')).details, { field: 'invocation' })
      // A revoked proxy as an option's value: refused where the options are read, named, not a TypeError of a later check.
      for (const [what, call, code, field] of [
        ['new Engine({ secrets })', () => new Engine({ log, secrets: revoked() as never }), 'ENGINE_INVALID_OPTIONS', 'secrets'],
        ['telemetryFromLog({ meter })', () => telemetryFromLog(log, { meter: revoked() as never }), 'OPENTELEMETRY_INVALID_OPTIONS', 'meter'],
        ['serveInspector({ engine })', () => serveInspector({ log, engine: revoked() as never }), 'INSPECTOR_INVALID_OPTIONS', 'engine'],
      ] as const) {
        const refusal = await refusedWith(call, code, what)
        assert.is((refusal.details as { field: string }).field, field, what)
      }
      // A member that cannot be read is named too.
      const unreadable = messageRun(baseUrl, 'unreadable', [effectTool()], { mainOutputLimit: revoked() as never })
      const unread = await refusedWith(() => engine.start(unreadable), 'RUN_INVALID_INPUT', 'a revoked proxy as mainOutputLimit')
      assert.equal(unread.details, { fields: ['mainOutputLimit'] })
      assert.match(unread.message, /^RUN_INVALID_INPUT: mainOutputLimit: the run input cannot be read/)
      // A member that cannot be copied is named, not left for the caller to find.
      const proxied = messageRun(baseUrl, 'proxied', [effectTool()], { providerOptions: { budget: new Proxy({ limit: 5 }, {}) } })
      const copy = await refusedWith(() => engine.start(proxied), 'RUN_INVALID_INPUT', 'a proxy in providerOptions')
      assert.equal(copy.details, { fields: ['providerOptions.budget'] })
      assert.match(copy.message, /^RUN_INVALID_INPUT: providerOptions\.budget: the run input must be plain data/)
      assert.equal(log.head(), before, 'nothing was written')
      // A continuation of another session's run names the source's session, not only work.source.
      const first = messageRun(baseUrl, 'other-source', [effectTool()])
      assert.equal(await engine.run(first), { status: 'completed' })
      const source = (await log.runSource(first.invocation.sessionId, first.invocation.runId))?.boundary
      assert.ok(source)
      const elsewhere = { ...messageRun(baseUrl, 'other-next', [effectTool()]), work: { kind: 'continuation' as const, source } }
      const written = log.head()
      const session = await refusedWith(() => engine.start(elsewhere), 'RUN_INVALID_INPUT', 'a source of another session')
      assert.equal(session.details, { fields: ['work.source.invocation.sessionId'] })
      assert.match(session.message, 'work.source.invocation.sessionId: the source run belongs to another session')
      assert.equal(log.head(), written, 'nothing was written')
      // The host option's refusal names the option.
      assert.match((await refusedWith(() => serveInspector({ log, host: '0.0.0.0' as never }), 'INSPECTOR_INVALID_OPTIONS', 'host')).message, 'options.host must be 127.0.0.1')
      release()
      assert.equal(await blocked.wait(), { status: 'completed' })
    })
  }),
)

/** Members of a continuation's source, and of the start options, a generated value replaces. */
const continuationPaths = [
  'work.source',
  'work.source.highWater',
  'work.source.digest',
  'work.source.invocation',
  'work.source.invocation.runId',
  'work.source.invocation.sessionId',
  'work.onlyIfLatest',
  'work.allowPriorUnknown',
  'options',
  'options.signal',
  'options.onModelText',
  'options.onModelReasoning',
  'options.onToolCallText',
  'options.onToolProgress',
  'options.onApproval',
  'options.onModeltext',
] as const

test(
  'engine.start of a continuation, or with start options, with one member replaced by a generated value is refused with its documented code, nothing written, or run',
  bounded(60_000, (dir) =>
    withoutUnhandled(async () => {
      const server = await scriptedModelServer(() => answer.text('done'))
      const log = await EventLog.open(join(dir, 'log'))
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 10_000, retries: 0 }) })
      let fresh = 0
      // Each case continues its own completed run: a run admitted before does not make the next one's source stale.
      const continuation = async (): Promise<Loose> => {
        fresh += 1
        const first = messageRun(server.baseUrl, `source-${fresh}`, [effectTool()])
        assert.equal(await engine.run(first), { status: 'completed' })
        const source = (await log.runSource(first.invocation.sessionId, first.invocation.runId))?.boundary
        assert.ok(source)
        return {
          ...messageRun(server.baseUrl, `next-${fresh}`, [effectTool()]),
          invocation: { ...first.invocation, turnId: `turn-next-${fresh}`, runId: `run-next-${fresh}`, invocationId: `invocation-next-${fresh}` },
          work: { kind: 'continuation', source: structuredClone(source) },
          options: {},
        }
      }
      try {
        // The base every case mutates is admitted as it is.
        const { options: _, ...base } = await continuation()
        assert.equal(await engine.run(base as RunInput), { status: 'completed' })
        await fc.assert(
          fc.asyncProperty(fc.constantFrom(...continuationPaths), odd, async (path, maker) => {
            const input = await continuation()
            const value = maker.make()
            setPath(input, path, value)
            const { options, ...runInput } = input
            const what = `${path} = ${describe(value)}`
            const before = log.head()
            let running: RunningInvocation
            try {
              running = await engine.start(runInput as RunInput, options as never)
            } catch (error) {
              const refusal = assertRefusal(error, ['RUN_INVALID_INPUT', 'RUN_SOURCE_MISMATCH', 'RUN_SOURCE_STALE'], what)
              if (refusal.code === 'RUN_INVALID_INPUT' && !refusal.message.includes('cannot be read')) assertNamesField(refusal, what)
              assert.equal(log.head(), before, `${what}: nothing was written`)
              return
            }
            const outcome = await running.wait()
            assert.ok(['completed', 'failed'].includes(outcome.status), `${what}: ${JSON.stringify(outcome)}`)
          }),
          { numRuns: Number(process.env.FUZZ_RUNS ?? 60), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
        )
        assert.is((await log.verify()).digest, log.head().digest)
      } finally {
        await engine.drain()
        await log.close()
        await server.close()
      }
    })),
)

test.run()
