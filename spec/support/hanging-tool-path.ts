/**
 * Runs one path whose `known` call succeeds with a tool that never settles, with nothing else
 * keeping the process alive (run by spec/model-paths.test.ts in a child process): runPath must
 * reject with its timeout, and the process must print it and end by itself, not exit 13 with the
 * promise pending and nothing said.
 */
import { invocationPaths, runPath } from '../../testing/index.js'

const path = invocationPaths({ maxSteps: 2, crashes: false }).find(({ steps }) =>
  steps.some(({ event }, index) => event.type === 'model.answer' && event.answer === 'known' && steps[index + 1]?.event.type === 'tool.outcome' && (steps[index + 1]?.event as { outcome?: string }).outcome === 'succeeds'),
)
if (path === undefined) throw new Error('no path lets a known call succeed')
const outcome = await runPath(path, { tools: [{ name: 'hang', execute: () => new Promise(() => {}) }], toolCall: { name: 'hang', arguments: {} }, stepTimeoutMs: 1_000 }).then(
  () => ({ resolved: true }),
  (error: { check?: string; message?: string }) => ({ check: error.check, message: error.message }),
)
process.stdout.write(`${JSON.stringify(outcome)}\n`)
