import * as assert from 'uvu/assert'

/** Awaits `action` and asserts it fails with a FactstateError of `code` (or one of `code`); returns the error. */
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
    return error as Error & { code: string; details?: Record<string, unknown> }
  }
  assert.unreachable(`${what} should have failed with ${codes.join(' or ')}`)
  throw new Error('unreachable')
}
