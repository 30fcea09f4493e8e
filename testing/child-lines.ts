/**
 * The stdout lines of a child process, and callers waiting for one of them: shared by the chaos
 * harness and the crash tests, which both drive children line by line. Not part of the kit's API.
 */

/** What a wait answers when it fails. */
export interface LineWaitErrors {
  /** The child's stdout ended without such a line. */
  ended(): Error
  /** No such line within the wait's time. */
  timedOut(ms: number): Error
}

export class ChildLines {
  /** Every complete line so far, in order. */
  readonly lines: string[] = []
  #ended = false
  readonly #waiters = new Set<() => void>()

  push(line: string): void {
    this.lines.push(line)
    this.#wake()
  }

  /** No more lines will come: waits still unanswered fail. */
  end(): void {
    this.#ended = true
    this.#wake()
  }

  /**
   * Resolves with the first line (from the very first) that satisfies `predicate`, checking each
   * line once as it arrives; rejects when the lines end first or after `ms`.
   */
  waitFor(predicate: (line: string) => boolean, ms: number, errors: LineWaitErrors): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      let from = 0
      const check = () => {
        for (; from < this.lines.length; from += 1) {
          const line = this.lines[from] as string
          if (predicate(line)) return finish(() => resolve(line))
        }
        if (this.#ended) finish(() => reject(errors.ended()))
      }
      const timer = setTimeout(() => finish(() => reject(errors.timedOut(ms))), ms)
      const finish = (settle: () => void) => {
        clearTimeout(timer)
        this.#waiters.delete(check)
        settle()
      }
      this.#waiters.add(check)
      check()
    })
  }

  #wake(): void {
    for (const wake of [...this.#waiters]) wake()
  }
}
