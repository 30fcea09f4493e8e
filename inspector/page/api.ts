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

async function getJson<T>(path: string): Promise<T> {
  const response = await fetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' })
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
