/** The page's calls to its server (same origin, JSON). */
import type { ApiError, Chart, InvocationDetail, Overview, VerifyReport } from '../protocol.js'

/** A failed API call, with the server's code. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

/** Where the tab keeps the inspector's token: session storage is its origin's, port included (a cookie of 127.0.0.1 would reach every port). */
const TOKEN_KEY = 'factstate-inspector-token'

/**
 * The token the page was opened with (`?token=…`, then kept for reloads of this tab), taken out of
 * the address bar so that it leaves the history entry; null for an inspector without one.
 */
export const token: string | null = (() => {
  const address = new URL(location.href)
  const given = address.searchParams.get('token')
  if (given === null) {
    try {
      return sessionStorage.getItem(TOKEN_KEY)
    } catch {
      return null
    }
  }
  try {
    sessionStorage.setItem(TOKEN_KEY, given)
  } catch {
    // Storage refused: the token serves this page until it is reloaded.
  }
  address.searchParams.delete('token')
  history.replaceState(null, '', `${address.pathname}${address.search}${address.hash}`)
  return given
})()

async function getJson<T>(path: string): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' }
  if (token !== null) headers.authorization = `Bearer ${token}`
  const response = await fetch(path, { headers, cache: 'no-store' })
  const body: unknown = await response.json().catch(() => null)
  if (!response.ok) {
    const error = (body ?? {}) as Partial<ApiError>
    throw new ApiFailure(response.status, error.code ?? 'HTTP_ERROR', error.message ?? `HTTP ${response.status}`)
  }
  return body as T
}

export const api = {
  overview: (match = '') => getJson<Overview>(match.trim() === '' ? '/api/overview' : `/api/overview?${new URLSearchParams({ match: match.trim() })}`),
  machine: () => getJson<Chart>('/api/machine'),
  // In the query, not the path: an id of `.` or `..` would be a dot segment there, removed from the URL.
  invocation: (id: string) => getJson<InvocationDetail>(`/api/invocation?${new URLSearchParams({ id })}`),
  verify: (force: boolean) => getJson<VerifyReport>(force ? '/api/verify?force=1' : '/api/verify'),
}
