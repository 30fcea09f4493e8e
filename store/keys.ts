/**
 * The key spaces of the LevelDB directory. Events are `e!<seq>`; everything else is an index
 * written in the same atomic batch as the event it indexes.
 */
const SEQ_WIDTH = 13 // base-16, enough for 2^52

export const seqPart = (seq: number): string => seq.toString(16).padStart(SEQ_WIDTH, '0')

export const keys = {
  head: 'h!head',
  /** The shape of the index records (see `INDEX_FORMAT` in event-log.ts). */
  format: 'h!format',
  /** Present once every pending seal has its `sealedClaim` and `sealedSuccessor` records (logs of earlier versions get them on open). */
  reservationsIndexed: 'h!reservations',
  /** Present once every session has its `recent` entry and its record its `latestOpenedSeq` (logs of earlier versions get them on open). */
  recencyIndexed: 'h!recent',
  /** In a copy made by `EventLog.backup`: the point of the log it was taken at (store/backup-point.ts). */
  backup: 'h!backup',
  sessionLow: 's!',
  sessionHigh: 's"',
  event: (seq: number) => `e!${seqPart(seq)}`,
  /** `event` from a seq already in key form (`seqPart`): one fact's keys share it. */
  eventAt: (part: string) => `e!${part}`,
  eventLow: 'e!',
  eventHigh: 'e"',
  eventId: (id: string) => `i!${id}`,
  eventIdLow: 'i!',
  eventIdHigh: 'i"',
  byInvocation: (invocationId: string, seq: number) => `v!${invocationId}!${seqPart(seq)}`,
  byInvocationAt: (invocationId: string, part: string) => `v!${invocationId}!${part}`,
  byInvocationLow: (invocationId: string) => `v!${invocationId}!`,
  byInvocationHigh: (invocationId: string) => `v!${invocationId}!~`,
  invocation: (invocationId: string) => `n!${invocationId}`,
  run: (sessionId: string, runId: string) => `r!${sessionId}!${runId}`,
  /** The range of one session's run keys (ids hold no '!' or '"': exactly those from `r!<session>!` to `r!<session>"`). */
  runsOf: (sessionId: string) => ({ gte: `r!${sessionId}!`, lt: `r!${sessionId}"` }),
  runLow: 'r!',
  runHigh: 'r"',
  session: (sessionId: string) => `s!${sessionId}`,
  /** A claim used by an admitted successor, with the successor's invocation id. */
  claim: (claimId: string) => `c!${claimId}`,
  /** A claim named by a sealed pause, with the paused invocation's id: no other seal may name it. */
  sealedClaim: (claimId: string) => `p!${claimId}`,
  /** A successor invocation id named by a sealed pause, with the paused invocation's id: only that seal's successor may open under it. */
  sealedSuccessor: (invocationId: string) => `q!${invocationId}`,
  /**
   * The sessions by their latest run: one entry a session, at the seq of its latest run's
   * `invocation.opened`, holding the session id (`log.sessions({ order: 'recent' })` walks it backwards).
   */
  recent: (seq: number) => `a!${seqPart(seq)}`,
  recentLow: 'a!',
  recentHigh: 'a"',
  open: (invocationId: string) => `o!${invocationId}`,
  openLow: 'o!',
  openHigh: 'o"',
}

const EVENT_KEY = /^e!([0-9a-f]{13})$/
const RECENT_KEY = /^a!([0-9a-f]{13})$/

/** The seq of an event key; NaN for a key in the event space that no event has (`e!3x`, say). */
export const seqOfEventKey = (key: string): number => {
  const digits = EVENT_KEY.exec(key)?.[1]
  return digits === undefined ? Number.NaN : Number.parseInt(digits, 16)
}

/** The seq of a `recent` key; NaN for a key in that space that no entry has. */
export const seqOfRecentKey = (key: string): number => {
  const digits = RECENT_KEY.exec(key)?.[1]
  return digits === undefined ? Number.NaN : Number.parseInt(digits, 16)
}
