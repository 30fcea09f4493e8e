/**
 * The options of `EventLog.sessions`, read and checked: a listing of a log's sessions, a page at a
 * time, in id order or most recently active first (what LangGraph calls searching threads).
 */
import { FactstateError } from '../errors.js'
import { ID_PATTERN, idMappingFor } from '../facts/schema.js'
import { readOptions, shown } from '../options.js'
import type { RunSummary } from './event-log.js'

/** Options of {@link EventLog.sessions}. */
export interface SessionsOptions {
  /**
   * `'id'` (the default): in id order, paged with `after`. `'recent'`: most recently active first, by
   * the seq of each session's latest run's `invocation.opened` (`latestRun.openedSeq`; a continuation
   * or a handoff successor moves its session to the front), paged with `before`.
   */
  order?: 'id' | 'recent' | undefined
  /** Only the sessions whose id begins with this: 0–128 characters from `[A-Za-z0-9._:-]`; default `''`, every session. */
  prefix?: string | undefined
  /** In id order: only the sessions whose id sorts after this id, the last `sessionId` of the page before. */
  after?: string | undefined
  /**
   * In `'recent'` order: only the sessions whose latest run opened before this seq, the last
   * `latestRun.openedSeq` of the page before (a whole number from 1).
   */
  before?: number | undefined
  /** At most this many sessions, a whole number 1–1,000; default 100. */
  limit?: number | undefined
}

/**
 * A session as {@link EventLog.sessions} lists it. A child run (`childRunFor`) is a session of its
 * own, listed too: its `latestRun.parent` names the call that started it.
 */
export interface SessionListing {
  sessionId: string
  /**
   * Its last run opened, as the last of `log.runs(sessionId)` (running, ended, or left open by a
   * crash: `terminal` and `outcome` say which): the run a next message continues.
   */
  latestRun: RunSummary
}

/** The most sessions one call lists. */
export const SESSIONS_LIMIT = 1_000
/** How many sessions a call lists when it is not told. */
export const SESSIONS_DEFAULT_LIMIT = 100

/** What `prefix` may be: the start of an id (none, or the whole of one). */
export const SESSION_PREFIX = /^[A-Za-z0-9._:-]{0,128}$/

/** The orders `sessions` lists in. */
export const SESSION_ORDERS = ['id', 'recent'] as const

/** `sessions`' options, checked. */
export interface ReadSessionsOptions {
  order: (typeof SESSION_ORDERS)[number]
  prefix: string
  after: string | undefined
  before: number | undefined
  limit: number
}

/** `sessions`' options, checked: `LOG_INVALID_ARGUMENT` naming the option (`details.field`). */
export function readSessionsOptions(options: unknown): ReadSessionsOptions {
  const {
    order = 'id',
    prefix = '',
    after,
    before,
    limit = SESSIONS_DEFAULT_LIMIT,
  } = readOptions(options, ['order', 'prefix', 'after', 'before', 'limit'], {
    call: 'sessions',
    code: 'LOG_INVALID_ARGUMENT',
    details: (field) => ({ field }),
  })
  const refuse = (field: string, message: string) => new FactstateError('LOG_INVALID_ARGUMENT', `sessions: ${message}`, { details: { field } })
  if (order !== 'id' && order !== 'recent') throw refuse('order', `order must be 'id' (the default) or 'recent' (most recently active first), not ${shown(order)}`)
  if (typeof prefix !== 'string' || !SESSION_PREFIX.test(prefix)) throw refuse('prefix', `prefix must be the start of an id, 0–128 characters from [A-Za-z0-9._:-], not ${shown(prefix)}`)
  if (after !== undefined && order === 'recent') {
    throw refuse('after', "after pages the id order: in order 'recent', give before, the last latestRun.openedSeq of the page before")
  }
  if (after !== undefined && (typeof after !== 'string' || !ID_PATTERN.test(after))) {
    // A string that is no id (a thread id that is an email address) is told how to make one of it, as log.runs is.
    throw refuse('after', `after must be a session id (the last of the page before), 1–128 characters from [A-Za-z0-9._:-], not ${shown(after)}${idMappingFor(after)}`)
  }
  if (before !== undefined && order === 'id') {
    throw refuse('before', "before pages the order 'recent' (give order: 'recent'): in id order, give after, the last sessionId of the page before")
  }
  if (before !== undefined && (typeof before !== 'number' || !Number.isSafeInteger(before) || before < 1)) {
    throw refuse('before', `before must be a seq, a whole number from 1 (the last latestRun.openedSeq of the page before), not ${shown(before)}`)
  }
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1 || limit > SESSIONS_LIMIT) {
    throw refuse('limit', `limit must be a whole number from 1 to ${SESSIONS_LIMIT.toLocaleString('en-US')}, not ${shown(limit)}`)
  }
  return { order, prefix, after: after as string | undefined, before: before as number | undefined, limit }
}
