/**
 * Node's longest timer: a `setTimeout` past 2^31 − 1 ms fires after 1 ms instead, so every limit a
 * timer enforces is held to it (a `timeoutMs` of 3e9 meant as "no limit" must not end an attempt at once).
 */
export const MAX_TIMER_MS = 2_147_483_647

/** `ms` as a timer's delay: whole milliseconds, at most `MAX_TIMER_MS`. */
export const timerMs = (ms: number): number => Math.min(Math.ceil(ms), MAX_TIMER_MS)
