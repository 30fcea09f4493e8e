/**
 * One `abort` listener per caller's signal, whatever the number of runs that share it. The
 * README's shutdown recipe starts every run with one signal; a listener per run would make Node
 * warn of a leak (`MaxListenersExceededWarning`, past 10) though each is removed when its run ends.
 */
interface Fanout {
  readonly listeners: Set<() => void>
  readonly dispatch: () => void
}
const fanouts = new WeakMap<AbortSignal, Fanout>()

/**
 * Calls `listener` once when `signal` aborts (right away if it already has). Returns the
 * unsubscribe, to call when the listener is no longer wanted.
 *
 * @example
 * ```ts
 * const stop = onAbort(signal, () => controller.abort(signal.reason))
 * try { await work() } finally { stop() }
 * ```
 */
export function onAbort(signal: AbortSignal, listener: () => void): () => void {
  if (signal.aborted) {
    listener()
    return () => undefined
  }
  let fanout = fanouts.get(signal)
  if (fanout === undefined) {
    const listeners = new Set<() => void>()
    const dispatch = () => {
      fanouts.delete(signal)
      for (const each of [...listeners]) each()
    }
    fanout = { listeners, dispatch }
    fanouts.set(signal, fanout)
    signal.addEventListener('abort', dispatch, { once: true })
  }
  const { listeners, dispatch } = fanout
  let done = false
  const stop = () => {
    if (done) return
    done = true
    listeners.delete(once)
    // The last one gone, the signal is left as it was found: no listener of ours on it.
    if (listeners.size === 0 && fanouts.get(signal)?.dispatch === dispatch) {
      fanouts.delete(signal)
      signal.removeEventListener('abort', dispatch)
    }
  }
  const once = () => {
    if (done) return
    stop()
    listener()
  }
  listeners.add(once)
  return stop
}
