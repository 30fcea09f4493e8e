/** Follows new facts over server-sent events; the browser reconnects on its own after a drop. */
import type { FactsLanded } from '../protocol.js'
import { token } from './api.js'

export interface LiveHandlers {
  onFacts: (landed: FactsLanded) => void
  onConnection: (connected: boolean) => void
  /** The log's high-water as each (re)connection starts: facts may have landed while the page was not listening. */
  onHello: (highWater: number) => void
}

/** Opens `/api/events`; returns a function that closes it. */
export function follow(handlers: LiveHandlers): () => void {
  // An EventSource sends no headers of the page's: the token goes in the query.
  const source = new EventSource(token === null ? '/api/events' : `/api/events?${new URLSearchParams({ token })}`)
  source.addEventListener('open', () => handlers.onConnection(true))
  source.addEventListener('error', () => handlers.onConnection(false))
  source.addEventListener('hello', (event) => {
    try {
      const { highWater } = JSON.parse((event as MessageEvent<string>).data) as { highWater: number }
      if (Number.isSafeInteger(highWater)) handlers.onHello(highWater)
    } catch {
      // A malformed frame is dropped.
    }
  })
  source.addEventListener('facts', (event) => {
    try {
      handlers.onFacts(JSON.parse((event as MessageEvent<string>).data) as FactsLanded)
    } catch {
      // A malformed frame is dropped; the next one (or a refresh) brings the page up to date.
    }
  })
  return () => source.close()
}
