import { createHash, timingSafeEqual } from 'node:crypto'
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdir } from 'node:fs/promises'
import { Engine, engineLog } from '../actors/engine.js'
import { FactstateError, isFactstateError } from '../errors.js'
import { readOptions, shown } from '../options.js'
import { ID_PATTERN } from '../facts/schema.js'
import type { StoredEvent } from '../facts/types.js'
import { EventLog, logInternals } from '../store/event-log.js'
import { changeMark, idAt } from '../store/snapshot.js'
import { logHeldOpen } from '../store/writer-presence.js'
import { FAVICON_SVG, INDEX_HTML } from './assets/document.js'
import { readPageScript } from './assets/page-files.js'
import { STYLESHEET } from './assets/stylesheet.js'
import { Catalog, DEFAULT_INDEX_LIMIT } from './catalog.js'
import { invocationChart } from './chart.js'
import type { ApiError, CallLink, FactsLanded, Overview, SessionView, VerifyReport } from './protocol.js'
import { timelineOf } from './timeline.js'

/**
 * Options of {@link serveInspector}.
 *
 * @example
 * ```ts
 * const options: InspectorOptions = { log, engine, port: 4319 }
 * ```
 */
export interface InspectorOptions {
  /** The log to show. The inspector only reads it; it stays open (and yours to close) after `close()`. */
  log: EventLog
  /** The engine driving `log` in this process, if any: the page then reports live mode. */
  engine?: Engine | undefined
  /** The TCP port; 0 or absent picks a free one. */
  port?: number | undefined
  /** Only `127.0.0.1` is accepted: the inspector never listens on other interfaces. */
  host?: '127.0.0.1' | undefined
  /**
   * The most events the initial index may read (default: no limit); more is `LOG_PREFIX_TOO_LARGE`.
   * The index streams the log, so memory follows the number of invocations, not of events.
   */
  maxEvents?: number | undefined
  /** The most stored bytes the initial index may read (default: no limit); more is `LOG_PREFIX_TOO_LARGE`. */
  maxBytes?: number | undefined
  /**
   * The most invocations the inspector's index keeps in memory (about 1.1 KB each; default 20,000).
   * Past it (by a tenth), the least recently active sessions that need nobody are dropped from the
   * index down to a tenth under it: still counted, found by their exact session or invocation id and
   * shown from the log, and read back whole when they have a new fact. A whole number from 1.
   */
  maxIndexed?: number | undefined
  /**
   * A secret every request but for the page's own files must carry (16 to 512 characters: letters, digits, `-`, `_`, `.`, `~`),
   * for an inspector that other users or programs of the machine can reach: 127.0.0.1 is open to
   * every process of the host, a service with a server-side request forgery among them. The
   * page is opened through `link` (`url` with `?token=…`): it keeps the token in the tab's
   * session storage (its own origin's, port included), takes it out of the address bar and sends it
   * with each request. Scripts send `Authorization: Bearer <token>` (or `?token=`). A request
   * without it is 401 `UNAUTHORIZED`, but for the page's own files, which hold nothing of the log.
   * Kept in memory only.
   */
  token?: string | undefined
  /**
   * For a snapshot (`EventLog.openSnapshot`) of a log another process keeps writing: every
   * `everyMs` (100 to 3,600,000) the inspector looks at the log's files and, when they changed,
   * takes a new snapshot (in `directory`, as `openSnapshot`'s option) and shows the facts it adds
   * as live mode shows new ones. It closes the snapshots it takes; the one passed as `log` stays
   * yours. Absent: the snapshot is shown as it is. Refused for a log that is not a snapshot.
   */
  refresh?:
    | {
        /** How often the log's files are looked at, in whole milliseconds from 100 to 3,600,000. */
        everyMs: number
        /** Where the new snapshots are made, as `openSnapshot`'s `directory` (default: the system's temporary directory). */
        directory?: string | undefined
      }
    | undefined
}

/**
 * A running inspector.
 *
 * @example
 * ```ts
 * const inspector: InspectorServer = await serveInspector({ log })
 * console.log(inspector.url)
 * await inspector.close()
 * ```
 */
export interface InspectorServer {
  /** `http://127.0.0.1:<port>/` */
  url: string
  /**
   * The address to open in a browser: `url`, with `?token=…` when the inspector has a `token`
   * (a secret then: show it only to whom may read the log).
   */
  link: string
  /** Stops serving and ends every open page stream. Leaves the log and the engine alone. */
  close(): Promise<void>
}

const HOST = '127.0.0.1'
const SESSION_LIMIT = 300

/** The longest `match` of `/api/overview` looked for (ids are rarely longer; more is cut). */
const MAX_MATCH = 256
const HEARTBEAT_MS = 15_000
/** Bytes a page's event stream may have waiting before the page is taken to have stalled and is cut off. */
const STREAM_BACKLOG = 4 * 1024 * 1024
/**
 * The most live streams served at once (a page keeps one open): each may hold STREAM_BACKLOG bytes
 * for a page that reads slowly, so a program that opens streams without end (a reconnect loop, a
 * script left running) could otherwise hold the inspector's memory without end. One more is refused
 * with 503 `TOO_MANY_STREAMS`; the pages already open keep theirs.
 */
export const MAX_STREAMS = 32
/** Events decoded and indexed at a time when the inspector starts: only one chunk is held at once. */
const INDEX_CHUNK = 2_048

// Everything the page shows is set as text, and the policy forbids any script but our own files
// and any request elsewhere: a payload that slipped through would still have nothing to run.
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
}

/** `INSPECTOR_INVALID_OPTIONS` naming the option (`details.field`) and, where one was given, its value. */
function invalid(message: string, field: string, ...value: [unknown?]): FactstateError {
  return new FactstateError('INSPECTOR_INVALID_OPTIONS', message, { details: value.length === 0 ? { field } : { field, value: value[0] } })
}

/** What a token may hold: characters that need no escaping in a URL or a header. */
export const TOKEN_PATTERN = /^[A-Za-z0-9._~-]{16,512}$/

/** Whether `given` is `token`, in time that does not depend on where they differ. */
function sameSecret(given: string, token: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text).digest()
  return timingSafeEqual(digest(given), digest(token))
}

/** The page's own files, which hold nothing of the log (what `route` serves before `/api/`). */
function isPageFile(path: string): boolean {
  return path === '/' || path === '/index.html' || path === '/style.css' || path === '/favicon.svg' || path.startsWith('/page/')
}

/** The shortest and longest refresh intervals. */
const REFRESH_MS = { min: 100, max: 3_600_000 }

function validated(options: InspectorOptions): Required<Pick<InspectorOptions, 'port' | 'maxEvents' | 'maxBytes' | 'maxIndexed'>> & { token: string | undefined } {
  if (typeof options !== 'object' || options === null) throw invalid('serveInspector takes an options object', 'options')
  if (!(options.log instanceof EventLog)) throw invalid('options.log must be an EventLog', 'log')
  if (options.engine !== undefined && !(options.engine instanceof Engine)) throw invalid('options.engine must be an Engine', 'engine')
  // The page would report live mode for runs it never sees.
  if (options.engine !== undefined && engineLog(options.engine) !== options.log) throw invalid('options.engine must be the Engine driving options.log, not one of another log', 'engine')
  if (options.host !== undefined && options.host !== HOST) {
    throw invalid(`options.host must be ${HOST} (the inspector binds no other address), not ${shown(options.host)}`, 'host', options.host)
  }
  const port = options.port ?? 0
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw invalid('options.port must be an integer from 0 to 65535', 'port', port)
  const limit = (name: 'maxEvents' | 'maxBytes', fallback: number) => {
    const value = options[name] ?? fallback
    if (!Number.isSafeInteger(value) || value < 0) throw invalid(`options.${name} must be a non-negative integer`, name, value)
    return value
  }
  const { refresh } = options
  if (refresh !== undefined) {
    if (options.log.snapshotOf === undefined) throw invalid('options.refresh is for a snapshot (EventLog.openSnapshot): a log of this process shows new facts as they land', 'refresh')
    if (typeof refresh !== 'object' || refresh === null) throw invalid('options.refresh must be an object', 'refresh', refresh)
    const { everyMs, directory } = refresh
    if (!Number.isInteger(everyMs) || everyMs < REFRESH_MS.min || everyMs > REFRESH_MS.max) {
      throw invalid(`options.refresh.everyMs must be an integer from ${REFRESH_MS.min} to ${REFRESH_MS.max}`, 'refresh.everyMs', everyMs)
    }
    if (directory !== undefined && (typeof directory !== 'string' || directory.length === 0 || directory.includes('\0'))) {
      throw invalid('options.refresh.directory must be a non-empty path', 'refresh.directory', directory)
    }
  }
  const maxIndexed = options.maxIndexed ?? DEFAULT_INDEX_LIMIT
  if (!Number.isSafeInteger(maxIndexed) || maxIndexed < 1) throw invalid('options.maxIndexed must be a whole number from 1', 'maxIndexed', maxIndexed)
  const { token } = options
  // The value is never quoted back: it is meant to be a secret.
  if (token !== undefined && (typeof token !== 'string' || !TOKEN_PATTERN.test(token))) {
    throw invalid('options.token must be 16 to 512 characters of letters, digits, -, _, . and ~', 'token')
  }
  return { port, maxEvents: limit('maxEvents', Number.MAX_SAFE_INTEGER), maxBytes: limit('maxBytes', Number.MAX_SAFE_INTEGER), maxIndexed, token }
}

function send(res: ServerResponse, status: number, type: string, body: string, head: boolean, extra: Record<string, string> = {}): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': String(Buffer.byteLength(body)), ...extra })
  res.end(head ? undefined : body)
}

function sendJson(res: ServerResponse, status: number, value: unknown, head: boolean): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value), head)
}

function sendError(res: ServerResponse, status: number, code: string, message: string, head = false): void {
  const body: ApiError = { code, message }
  sendJson(res, status, body, head)
}

/**
 * Serves the inspector for `options.log` on 127.0.0.1. Read-only: it indexes the log once, then
 * follows new facts through the log's subscription and pushes them to open pages (server-sent
 * events). Refuses bad options with `INSPECTOR_INVALID_OPTIONS` (including a port in use).
 *
 * @example
 * ```ts
 * import { serveInspector } from 'factstate/inspector'
 * const inspector = await serveInspector({ log, engine, port: 4319 })
 * console.log(`inspector at ${inspector.url}`)
 * // ... later
 * await inspector.close()
 * ```
 */
export async function serveInspector(given: InspectorOptions): Promise<InspectorServer> {
  if (typeof given !== 'object' || given === null) throw invalid('serveInspector takes an options object', 'options')
  // Each read once; a misspelt option (`prot: 4000`) is refused, not left at its default.
  const options = readOptions(given, ['log', 'engine', 'port', 'host', 'maxEvents', 'maxBytes', 'maxIndexed', 'refresh', 'token'], {
    call: 'serveInspector',
    code: 'INSPECTOR_INVALID_OPTIONS',
    details: (field) => ({ field }),
    required: ['log'],
  }) as InspectorOptions
  if (options.refresh !== undefined && typeof options.refresh === 'object' && options.refresh !== null) {
    options.refresh = readOptions(options.refresh, ['everyMs', 'directory'], {
      call: 'serveInspector: refresh',
      code: 'INSPECTOR_INVALID_OPTIONS',
      details: (field) => ({ field: `refresh.${field}` }),
    }) as NonNullable<InspectorOptions['refresh']>
  }
  const { port, maxEvents, maxBytes, maxIndexed, token } = validated(options)
  const { log, refresh } = options
  const internals = logInternals(log)
  const mode: Overview['mode'] = options.engine ? 'engine' : log.snapshotOf === undefined ? 'log' : 'snapshot'
  /**
   * The log requests read: `log`, or the latest snapshot a refresh took. A request reads the one
   * that was current when it began to its end (`pinned`); a snapshot a refresh replaced is closed
   * once no request reads it.
   */
  let current = log
  const pins = new Map<EventLog, number>()
  const retired = new Set<EventLog>()
  const retire = (replaced: EventLog) => {
    // The caller's log is the caller's to close.
    if (replaced === log) return
    if (pins.has(replaced)) retired.add(replaced)
    else void replaced.close().catch(() => undefined)
  }
  const pinned = async <T>(use: (at: EventLog) => Promise<T>): Promise<T> => {
    const at = current
    pins.set(at, (pins.get(at) ?? 0) + 1)
    try {
      return await use(at)
    } finally {
      const left = (pins.get(at) as number) - 1
      if (left > 0) pins.set(at, left)
      else {
        pins.delete(at)
        if (retired.delete(at)) void at.close().catch(() => undefined)
      }
    }
  }
  let refreshStopped: string | null = null
  const catalog = new Catalog(maxIndexed)
  const streams = new Set<ServerResponse>()
  let pending: StoredEvent[][] | undefined = []

  /** Every stored event of `sessionId`'s invocations (those `skip` names left out), in seq order. */
  const sessionEvents = async (at: EventLog, sessionId: string, skip: (invocationId: string) => boolean = () => false): Promise<StoredEvent[]> => {
    const runs = await at.runs(sessionId)
    const lists = await Promise.all(runs.filter((run) => !skip(run.invocationId)).map((run) => logInternals(at).invocationEvents(run.invocationId)))
    return lists.flat().sort((a, b) => a.seq - b.seq)
  }
  /**
   * Sessions the index dropped that had a fact again: their earlier runs are read back from the log,
   * one session at a time, in the background (a page sees them on its next look).
   */
  const returning = new Set<string>()
  let readingBack: Promise<void> | undefined
  let stopped = false
  const readBack = () => {
    for (const sessionId of catalog.takeReturning()) returning.add(sessionId)
    if (readingBack !== undefined || returning.size === 0 || pending !== undefined) return
    readingBack = (async () => {
      for (const sessionId of returning) {
        returning.delete(sessionId)
        if (stopped) return
        if (!catalog.hasSession(sessionId)) {
          catalog.returned(sessionId)
          continue
        }
        try {
          await pinned(async (at) => {
            catalog.backfill(sessionId, await sessionEvents(at, sessionId, (id) => catalog.has(id)))
          })
        } catch {
          // A log that closed or failed meanwhile: the session shows what is indexed.
          catalog.returned(sessionId)
        }
      }
    })().finally(() => {
      readingBack = undefined
      if (returning.size > 0 && !stopped) readBack()
    })
  }
  /**
   * The index of a session dropped from `catalog`, read from the log, when `id` is that session's
   * id or the id of one of its invocations; undefined otherwise (nothing dropped, no such id, or a
   * session the index holds).
   */
  const droppedSession = async (at: EventLog, id: string): Promise<{ sessionId: string; index: Catalog } | undefined> => {
    if (!catalog.trimmed || !ID_PATTERN.test(id)) return undefined
    let sessionId: string | undefined
    if (!catalog.hasSession(id) && (await at.runs(id)).length > 0) sessionId = id
    else if (!catalog.has(id)) sessionId = (await logInternals(at).invocationEvents(id))[0]?.event.invocation.sessionId
    if (sessionId === undefined || catalog.hasSession(sessionId)) return undefined
    return { sessionId, index: Catalog.ofSession(await sessionEvents(at, sessionId)) }
  }

  const broadcast = (events: FactsLanded['events']) => {
    if (streams.size === 0) return
    const head = current.head()
    const landed: FactsLanded = { highWater: head.highWater, digest: head.digest, events }
    const frame = `event: facts\ndata: ${JSON.stringify(landed)}\n\n`
    for (const stream of streams) sendFrame(stream, frame)
  }
  /**
   * Writes a frame to one page's stream. A page that stopped reading (a stalled tab) is cut off
   * once STREAM_BACKLOG bytes wait for it, rather than buffered without end on a busy log; its
   * browser reconnects on its own.
   */
  const sendFrame = (stream: ServerResponse, frame: string) => {
    if (stream.writableLength > STREAM_BACKLOG) {
      streams.delete(stream)
      stream.destroy()
      return
    }
    stream.write(frame)
  }
  // Subscribe before reading, so nothing lands unseen between the read and the subscription.
  const unsubscribe = internals.subscribe((events) => {
    // This runs inside the log's commit: it must never throw back into it.
    try {
      if (pending) {
        pending.push(events)
        return
      }
      catalog.apply(events)
      readBack()
      broadcast(landedOf(events))
    } catch {
      // A page that misses a notification catches up on its next request.
    }
  })
  let verified: VerifyReport | undefined
  let verifying: Promise<VerifyReport> | undefined
  const verify = (force: boolean, at: EventLog): Promise<VerifyReport> => {
    if (!force && verified && verified.highWater === at.head().highWater) return Promise.resolve(verified)
    verifying ??= (async () => {
      const highWater = at.head().highWater
      let report: VerifyReport
      try {
        const result = await at.verify()
        report = { status: 'ok', highWater: result.events, events: result.events, digest: result.digest, code: null, seq: null, message: null, checkedAt: Date.now() }
      } catch (error) {
        const details: Readonly<Record<string, unknown>> | undefined = isFactstateError(error) ? error.details : undefined
        const seq = typeof details?.seq === 'number' ? details.seq : null
        report = {
          status: isFactstateError(error, 'LOG_CORRUPT') ? 'corrupt' : 'error',
          highWater,
          events: 0,
          digest: null,
          code: isFactstateError(error) ? error.code : 'ERROR',
          seq,
          message: (error as Error).message,
          checkedAt: Date.now(),
        }
      }
      verified = report
      return report
    })().finally(() => {
      verifying = undefined
    })
    return verifying
  }

  /**
   * What an open run no actor of this process drives is: in a snapshot, the process that has the
   * log open may be driving it (`open`), unless no process has the log open (`interrupted`: a crash
   * left it). Looked up for each request, as that process may start or end meanwhile.
   */
  const undriven = async (): Promise<'interrupted' | 'open'> =>
    log.snapshotOf === undefined ? 'interrupted' : (await logHeldOpen(log.snapshotOf)) === false ? 'interrupted' : 'open'

  /**
   * The child runs of a parent read from the log (its session dropped from the index, which is what
   * lists children): its facts do not name them, so each of its calls' runs are looked up by the
   * `parent` their `invocation.opened` records (`log.childRuns`, whatever their ids and session: a
   * specialist's own session too), and a run counts when it records this call of this run. The log
   * builds what `childRuns` looks up once per open log (a pass over its run records), so this costs
   * a first request one pass, and each later one only the children's sessions.
   */
  const childrenFromLog = async (at: EventLog, parentId: string, events: readonly StoredEvent[]): Promise<CallLink[]> => {
    const links: CallLink[] = []
    for (const { event } of events) {
      if (event.fact.type !== 'tool.dispatched') continue
      const { operationId } = event.fact
      for (const run of await at.childRuns(operationId)) {
        if (run.parent?.operationId !== operationId || run.parent.invocation.invocationId !== parentId) continue
        const invocation = { sessionId: run.sessionId, turnId: run.turnId, runId: run.runId, invocationId: run.invocationId }
        links.push({ operationId, invocation, exists: true, ...(catalog.has(run.invocationId) ? {} : { dropped: true as const }) })
      }
    }
    return links
  }

  /**
   * A child's link to its parent call's run, as the whole log has it: `exists` when the index holds
   * that run, or, past a trim, the log does (then `dropped`, read from the log when opened). A
   * summary made of one session's facts (a child read from the log) knows no other session's runs.
   */
  const parentInLog = async (at: EventLog, parent: CallLink): Promise<CallLink> => {
    const { operationId, invocation } = parent
    if (catalog.has(invocation.invocationId)) return { operationId, invocation, exists: true }
    if (!catalog.trimmed || (await logInternals(at).invocationRecord(invocation.invocationId)) === undefined) return { operationId, invocation, exists: false }
    return { operationId, invocation, exists: true, dropped: true }
  }

  const overview = async (at: EventLog, match: string): Promise<Overview> => {
    const head = at.head()
    const openAs = await undriven()
    const listed = catalog.sessions(SESSION_LIMIT, match, internals.live, openAs)
    const viewOf = async (index: Catalog, session: (typeof listed.sessions)[number]): Promise<SessionView> => ({
      sessionId: session.sessionId,
      firstSeq: session.firstSeq,
      lastSeq: session.lastSeq,
      attention: session.attention,
      reconciliation: (await logInternals(at).sessionRecord(session.sessionId)).unknown,
      restored: (await logInternals(at).restoredSince(session.sessionId)) !== undefined,
      turns: session.turns.map(({ turnId, invocationIds }) => ({
        turnId,
        runs: invocationIds.flatMap((id) => index.summary(id, internals.live, openAs) ?? []),
      })),
    })
    const sessions = await Promise.all(listed.sessions.map((session) => viewOf(catalog, session)))
    // A session dropped from the index is found by its exact id, or an exact invocation id of it.
    const dropped = match === '' ? undefined : await droppedSession(at, match)
    const found = dropped === undefined ? { attention: 0, sessions: [] } : dropped.index.sessions(1, '', internals.live)
    for (const session of found.sessions) sessions.push(await viewOf(dropped?.index as Catalog, session))
    return {
      location: log.snapshotOf ?? internals.location,
      mode,
      highWater: head.highWater,
      digest: head.digest,
      backup: at.restoredFrom() ?? null,
      sessions,
      sessionsTotal: catalog.sessionCount,
      match: match === '' ? null : match,
      sessionsMatching: listed.total + found.sessions.length,
      attention: listed.attention + found.attention,
      refresh: refresh === undefined ? null : { everyMs: refresh.everyMs, stopped: refreshStopped },
    }
  }

  const openStream = (req: IncomingMessage, res: ServerResponse, at: EventLog) => {
    // Gone already (a page reloaded, a client that gave up while the log was being indexed): its
    // `close` has been and will not come again, so a stream kept for it would hold one of the
    // MAX_STREAMS places for good.
    if (req.destroyed || res.destroyed || req.socket.destroyed) return
    if (streams.size >= MAX_STREAMS) {
      return sendError(
        res,
        503,
        'TOO_MANY_STREAMS',
        `the inspector already serves ${MAX_STREAMS} live streams, one for each open page: close a page (or a program reading /api/events) and load this one again`,
      )
    }
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' })
    const head = at.head()
    res.write(`retry: 2000\n\nevent: hello\ndata: ${JSON.stringify({ highWater: head.highWater, digest: head.digest })}\n\n`)
    streams.add(res)
    req.on('close', () => streams.delete(res))
  }

  const route = async (req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams, at: EventLog): Promise<void> => {
    const head = req.method === 'HEAD'
    if (path === '/' || path === '/index.html') return send(res, 200, 'text/html; charset=utf-8', INDEX_HTML, head)
    if (path === '/style.css') return send(res, 200, 'text/css; charset=utf-8', STYLESHEET, head)
    if (path === '/favicon.svg') return send(res, 200, 'image/svg+xml', FAVICON_SVG, head)
    if (path.startsWith('/page/')) {
      const script = await readPageScript(path.slice('/page/'.length))
      if (script === undefined) return sendError(res, 404, 'NOT_FOUND', 'no such page script: the inspector serves its page from the files beside its own module, which a bundle of factstate does not have (keep factstate out of the bundle; in its repository, npm run build makes them)', head)
      return send(res, 200, 'text/javascript; charset=utf-8', script, head)
    }
    if (path === '/api/overview') return sendJson(res, 200, await overview(at, (query.get('match') ?? '').trim().slice(0, MAX_MATCH)), head)
    if (path === '/api/machine') return sendJson(res, 200, invocationChart(), head)
    if (path === '/api/verify') return sendJson(res, 200, await verify(query.get('force') === '1', at), head)
    if (path === '/api/events') return head ? send(res, 200, 'text/event-stream; charset=utf-8', '', true) : openStream(req, res, at)
    // `/api/invocation?id=…` is what the page asks: an id of `.` or `..` in a path segment is a dot
    // segment, which URLs remove (`/api/invocations/..` is `/api/`). The path form stays for other ids.
    if (path === '/api/invocation' || path.startsWith('/api/invocations/')) {
      let id: string
      if (path === '/api/invocation') {
        const given = query.get('id')
        if (given === null) return sendError(res, 400, 'BAD_REQUEST', 'which invocation: /api/invocation?id=<invocation id>', head)
        id = given
      } else {
        try {
          id = decodeURIComponent(path.slice('/api/invocations/'.length))
        } catch {
          return sendError(res, 400, 'BAD_REQUEST', 'the invocation id is not valid URL encoding', head)
        }
      }
      const events = await logInternals(at).invocationEvents(id)
      const openAs = await undriven()
      // An invocation the index lacks (its session dropped) is summed up from its session's facts:
      // the session its own facts name, as its id may also be the id of another session.
      const sessionId = events[0]?.event.invocation.sessionId
      const indexed = catalog.summary(id, internals.live, openAs)
      const summary =
        indexed ?? (sessionId === undefined || !catalog.trimmed ? undefined : Catalog.ofSession(await sessionEvents(at, sessionId)).summary(id, internals.live, openAs))
      if (summary === undefined || events.length === 0) return sendError(res, 404, 'NOT_FOUND', 'the log has no such invocation', head)
      if (indexed === undefined) summary.children = await childrenFromLog(at, id, events)
      if (summary.parent !== null) summary.parent = await parentInLog(at, summary.parent)
      return sendJson(res, 200, timelineOf(summary, events), head)
    }
    return sendError(res, 404, 'NOT_FOUND', 'no such resource', head)
  }

  // Listening comes first, so a port that is taken is refused before a long index (~20 s per
  // million facts); a request that arrives meanwhile is answered once the index is whole.
  let markIndexed = (): void => undefined
  const indexed = new Promise<void>((resolve) => {
    markIndexed = resolve
  })
  let allowedHosts: Set<string> = new Set()
  /** Whether a request carries the token: as a bearer, or as `?token=` (what the page's live stream sends). */
  const carriesToken = (req: IncomingMessage, query: URLSearchParams, secret: string): boolean => {
    const given = query.get('token')
    if (given !== null) return sameSecret(given, secret)
    const { authorization } = req.headers
    return authorization !== undefined && /^bearer /i.test(authorization) && sameSecret(authorization.slice(7).trim(), secret)
  }
  const server: Server = createServer((req, res) => {
    // A page on another origin that rebinds its name to 127.0.0.1 still sends its own Host.
    if (!allowedHosts.has(req.headers.host ?? '')) return sendError(res, 403, 'FORBIDDEN_HOST', 'the inspector answers only to 127.0.0.1 and localhost')
    // A page of another site may still send requests here (it cannot read the answers, but it could
    // make the inspector re-verify the log again and again): browsers say where a request comes from.
    const site = req.headers['sec-fetch-site']
    if (site !== undefined && site !== 'same-origin' && site !== 'none') {
      return sendError(res, 403, 'FORBIDDEN_SITE', 'the inspector answers only its own page (or a request typed into the browser)')
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD')
      return sendError(res, 405, 'METHOD_NOT_ALLOWED', 'the inspector is read-only')
    }
    let url: URL
    try {
      url = new URL(req.url ?? '/', 'http://inspector.invalid')
    } catch {
      // A request target no URL can be made of (`http://[/`, say) must not take the process down.
      return sendError(res, 400, 'BAD_REQUEST', 'the request target is not a valid URL')
    }
    // The page's own files hold nothing of the log: they load without the token, which the page
    // then sends with each request. Not as a cookie: browsers send a cookie of 127.0.0.1 to every
    // port of it, so any program listening on one that the browser is led to would receive it.
    if (token !== undefined && !isPageFile(url.pathname) && !carriesToken(req, url.searchParams, token)) {
      res.setHeader('www-authenticate', 'Bearer realm="factstate inspector"')
      return sendError(res, 401, 'UNAUTHORIZED', 'the inspector has a token: open the link it printed (…/?token=…), or send Authorization: Bearer <token>', req.method === 'HEAD')
    }
    indexed.then(() => pinned((at) => route(req, res, url.pathname, url.searchParams, at))).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy()
        return
      }
      const code = isFactstateError(error) ? error.code : 'INTERNAL'
      sendError(res, code === 'LOG_CLOSED' ? 503 : 500, code, (error as Error)?.message ?? String(error))
    })
  })

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, HOST, () => {
        server.off('error', reject)
        resolve()
      })
    })
  } catch (error) {
    unsubscribe()
    const code = (error as NodeJS.ErrnoException).code
    throw new FactstateError('INSPECTOR_INVALID_OPTIONS', `cannot listen on ${HOST}:${port} (${code ?? 'error'})`, { cause: error, details: { field: 'port', value: port } })
  }
  const bound = (server.address() as AddressInfo).port
  allowedHosts = new Set([`${HOST}:${bound}`, `localhost:${bound}`])
  try {
    // Facts landing meanwhile wait in `pending`; the catalog skips any it has already indexed.
    const upTo = log.head().highWater
    if (upTo > maxEvents) throw new FactstateError('LOG_PREFIX_TOO_LARGE', `the log holds ${upTo} events, more than ${maxEvents}`)
    let bytesRead = 0
    for await (const { events, bytes } of internals.scanEvents(upTo, INDEX_CHUNK)) {
      bytesRead += bytes
      if (bytesRead > maxBytes) throw new FactstateError('LOG_PREFIX_TOO_LARGE', `the log holds more than ${maxBytes} bytes of events`)
      catalog.apply(events)
    }
    for (const events of pending) catalog.apply(events)
    pending = undefined
    catalog.watchReturning()
    readBack()
  } catch (error) {
    unsubscribe()
    server.close()
    server.closeAllConnections()
    throw error
  }
  markIndexed()

  const heartbeat = setInterval(() => {
    for (const stream of streams) sendFrame(stream, ': keep-alive\n\n')
  }, HEARTBEAT_MS)
  heartbeat.unref()

  let closed = false
  /**
   * One look at the log's files for a refresh, and a new snapshot when they changed. Its new facts
   * are indexed as they are read (a chunk at a time: memory for one chunk, however many landed),
   * then requests move to the new snapshot and pages are told. Meanwhile a request may find an
   * invocation listed that the old snapshot cannot show yet; it can on the next look. Facts indexed
   * from a snapshot that is then dropped are skipped when the next one brings them again.
   */
  let lastMark: string | undefined
  const refreshOnce = async (source: string, directory: string | undefined): Promise<void> => {
    const mark = await changeMark(source)
    if (mark === lastMark) return
    // Made again if it went (the CLI's copies sit beside the log, in a folder that may be emptied).
    if (directory !== undefined) await mkdir(directory, { recursive: true }).catch(() => undefined)
    const next = await EventLog.openSnapshot(source, directory === undefined ? {} : { directory })
    let kept = false
    try {
      const from = current.head().highWater
      const to = next.head().highWater
      if (to < from || (from > 0 && (await idAt(current, from)) !== (await idAt(next, from)))) {
        refreshStopped = `the log at ${source} no longer begins with the facts shown: inspect it again`
        return
      }
      const landed: FactsLanded['events'] = []
      let chunk: StoredEvent[] = []
      const index = () => {
        catalog.apply(chunk)
        landed.push(...landedOf(chunk))
        chunk = []
      }
      for await (const stored of next.events({ from: from + 1, to })) {
        chunk.push(stored)
        if (chunk.length === INDEX_CHUNK) index()
      }
      index()
      lastMark = mark
      if (closed || to === from) return
      const replaced = current
      current = next
      kept = true
      retire(replaced)
      // Sessions dropped from the index that had a fact in this look are read back from it, as a live log's are.
      readBack()
      for (let start = 0; start < landed.length; start += INDEX_CHUNK) broadcast(landed.slice(start, start + INDEX_CHUNK))
    } finally {
      if (!kept) await next.close().catch(() => undefined)
    }
  }
  let refreshTimer: ReturnType<typeof setTimeout> | undefined
  let refreshing: Promise<void> = Promise.resolve()
  const scheduleRefresh = () => {
    if (refresh === undefined || closed || refreshStopped !== null) return
    refreshTimer = setTimeout(() => {
      refreshing = refreshOnce(log.snapshotOf as string, refresh.directory)
        // A copy that failed (the log kept changing, a file system error) is tried again next time.
        .catch(() => undefined)
        .finally(scheduleRefresh)
    }, refresh.everyMs)
    refreshTimer.unref()
  }
  scheduleRefresh()

  let closing: Promise<void> | undefined
  return {
    url: `http://${HOST}:${bound}/`,
    link: `http://${HOST}:${bound}/${token === undefined ? '' : `?token=${token}`}`,
    close() {
      closing ??= (async () => {
        closed = true
        stopped = true
        clearTimeout(refreshTimer)
        unsubscribe()
        clearInterval(heartbeat)
        for (const stream of streams) stream.end()
        streams.clear()
        await new Promise<void>((resolve) => {
          server.close(() => resolve())
          server.closeAllConnections()
        })
        await refreshing
        await readingBack
        // The snapshots this inspector took; `log` is the caller's.
        for (const taken of [current, ...retired]) if (taken !== log) await taken.close().catch(() => undefined)
        retired.clear()
      })()
      return closing
    },
  }
}

/** What a page is told of facts that landed. */
function landedOf(events: readonly StoredEvent[]): FactsLanded['events'] {
  return events.map(({ seq, event }) => ({ seq, sessionId: event.invocation.sessionId, invocationId: event.invocation.invocationId, type: event.fact.type }))
}
