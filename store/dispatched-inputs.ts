import type { StoredEvent, UncertainOperation } from '../facts/types.js'

/**
 * The input each operation was dispatched with, read from its invocation's `tool.dispatched` fact
 * (the session's index keeps an unknown operation without it), keyed by `dispatchedKey`.
 */
export async function dispatchedInputs(
  unknown: readonly UncertainOperation[],
  invocationEvents: (invocationId: string) => Promise<StoredEvent[]>,
): Promise<Map<string, unknown>> {
  const inputs = new Map<string, unknown>()
  for (const invocationId of new Set(unknown.map((op) => op.invocationId))) {
    for (const { event } of await invocationEvents(invocationId)) {
      if (event.fact.type === 'tool.dispatched') inputs.set(dispatchedKey(invocationId, event.fact.operationId), event.fact.input)
    }
  }
  return inputs
}

/** The key of an operation in `dispatchedInputs`' map. */
export const dispatchedKey = (invocationId: string, operationId: string): string => `${invocationId}\n${operationId}`
