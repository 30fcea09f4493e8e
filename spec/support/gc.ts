/**
 * Garbage collection for tests that check what is let go: `gc()` exposed at run time (the suite
 * runs without `--expose-gc`), and a wait until a set of objects is collected.
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** Collects garbage, up to 20 rounds a few ms apart, until every one of `refs` is gone; returns how many are still alive. */
export async function aliveAfterCollection(refs: readonly WeakRef<object>[]): Promise<number> {
  for (let round = 0; round < 20 && refs.some((ref) => ref.deref() !== undefined); round += 1) {
    await new Promise((resolve) => setTimeout(resolve, 5))
    gc()
  }
  return refs.filter((ref) => ref.deref() !== undefined).length
}
