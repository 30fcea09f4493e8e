/**
 * What tests of CLI commands run in the test's process share: a `CommandIo` that collects lines,
 * and a bounded wait for a line to be printed.
 */
import { withTimeout } from './temp.js'

/** A `CommandIo` whose lines are kept in `out` and `err`. */
export function collector() {
  const out: string[] = []
  const err: string[] = []
  return { io: { stdout: (line: string) => out.push(line), stderr: (line: string) => err.push(line) }, out, err }
}

/**
 * Waits (bounded by `ms`) until the lines (an array that grows, or a function giving them now) hold
 * one that `predicate` accepts, and returns it.
 */
export function printed(lines: readonly string[] | (() => readonly string[]), predicate: (line: string) => boolean, what: string, ms = 15_000): Promise<string> {
  return withTimeout(
    async () => {
      for (;;) {
        const line = (typeof lines === 'function' ? lines() : lines).find(predicate)
        if (line !== undefined) return line
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    },
    ms,
    what,
  )
}
