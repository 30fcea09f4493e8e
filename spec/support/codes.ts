import * as assert from 'uvu/assert'
import { assertDetailsFit } from './error-details.js'

/** Awaits `action` and asserts it fails with a FactstateError of `code` (or one of `code`), with details of its code's shape; returns the error. */
export async function rejectsWithCode(
  action: () => Promise<unknown>,
  code: string | readonly string[],
  what = 'the call',
): Promise<Error & { code: string; details?: Record<string, unknown> }> {
  const codes = typeof code === 'string' ? [code] : code
  try {
    await action()
  } catch (error) {
    const actual = (error as { code?: unknown }).code
    assert.ok(codes.includes(actual as string), `${what}: expected ${codes.join(' or ')}, got ${String(actual)} (${(error as Error).message})`)
    // Every expected refusal also carries the details its code declares (errors.ts).
    assertDetailsFit(error as { code: string; details?: unknown }, what)
    return error as Error & { code: string; details?: Record<string, unknown> }
  }
  assert.unreachable(`${what} should have failed with ${codes.join(' or ')}`)
  throw new Error('unreachable')
}
