/**
 * What the chaos workload decides from its inputs alone, shared by the child (chaos/child.ts) and
 * the audit (chaos/audit.ts), so the audit can tell what the workload must have done.
 */

/** A small stable hash, so a turn's number of effects does not depend on the process. */
export function hash(text: string): number {
  let h = 2166136261
  for (let i = 0; i < text.length; i += 1) h = Math.imul(h ^ text.charCodeAt(i), 16777619) >>> 0
  return h
}

/** Whether a call of the `effect` tool with `input` needs approval: one key in five. */
export const effectNeedsApproval = (input: unknown): boolean => hash(JSON.stringify(input)) % 5 === 0
