/**
 * The CLI given generated arguments (a command, then options and values drawn from its own flags,
 * misspellings, odd text and numbers), run as a user runs it, against a real log: it exits with one
 * of its documented codes, a failure says so in an `error:` line on stderr, it never crashes (no
 * stack trace, no unhandled rejection), and the log it read is left as it was (its digest, its
 * files, nothing left beside it).
 */
import { mkdir, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import fc from 'fast-check'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog } from '../index.js'
import { ensureBuilt } from './support/built.js'
import { collected } from './support/faults-process.js'
import { REPO_ROOT, completeInvocation } from './support/log-fixtures.js'
import { bounded } from './support/temp.js'

ensureBuilt()

const env = (() => {
  const copy = { ...process.env }
  delete copy.FORCE_COLOR
  delete copy.NO_COLOR
  return copy
})()

/** inspect and log --follow run until a signal ends them: not generated. */
const commands = ['log', 'verify', 'pending', 'recover', 'script', 'backup', 'help', 'lgo', '']
const flags = ['--session', '--run', '--invocation', '--type', '--from', '--to', '--last', '--json', '--runs', '--sessions', '--recent', '--unanswered', '--allow-damaged', '--help', '--sesion', '-x', '--', '--from=', '--json=1']
const values = fc.oneof(
  fc.constantFrom('0', '-1', '1.5', '1e3', '9007199254740993', 'NaN', '', ' ', 'session-a', 'a/b', '../..', '\u00e9\u0301', '🙂', 'x'.repeat(200), '--json'),
  fc.string({ maxLength: 12, unit: 'grapheme' }).filter((text) => !text.includes('\0')),
  fc.integer().map(String),
)

/** What is beside the log, and in the CLI's directory (inside the log, `recover` opens it to write: LevelDB may roll its files). */
async function listing(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true })
  return entries
    .map((entry) => join(entry.parentPath, entry.name))
    .filter((path) => !path.startsWith(join(dir, 'log', '/')))
    .sort()
}

test(
  'the CLI given generated arguments exits 0, 1, 2 or 4 with an error line for a failure, never crashes, and leaves the log as it was',
  bounded(120_000, async (dir) => {
    const location = join(dir, 'log')
    const log = await EventLog.open(location)
    await log.appendAll(completeInvocation('a'))
    const digest = log.head().digest
    await log.close()
    // The CLI runs in a directory of its own: a relative path it is given (a backup's) lands there.
    const cwd = join(dir, 'cwd')
    await mkdir(cwd)
    const before = await listing(dir)
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...commands), fc.array(fc.oneof(fc.constantFrom(...flags), values), { maxLength: 5 }), fc.boolean(), async (command, rest, withLog) => {
        const args = [command, ...(withLog ? [location] : []), ...rest].filter((arg, index) => index > 0 || arg !== '')
        const what = `factstate ${JSON.stringify(args)}`
        const { code, stdout, stderr } = await collected(process.execPath, [join(REPO_ROOT, 'dist/bin/factstate.js'), ...args], { env, cwd })
        assert.ok(code !== null && [0, 1, 2, 4].includes(code), `${what}: exit code ${code}; stderr ${stderr}`)
        assert.not.match(stderr, /\n\s+at [^\n]+:\d+:\d+\)?\n|Unhandled|TypeError|ReferenceError/, `${what}: no crash: ${stderr}`)
        // Without a command it prints its usage (exit 2).
        if (args.length === 0) assert.equal([code, stderr.startsWith('usage: factstate')], [2, true], `${what}: ${stderr}`)
        else if (code !== 0) assert.match(stderr, /^(warning: [^\n]*\n)*error: /m, `${what}: says why in an error line: ${stderr}`)
        if (code !== 0 && args.includes('--json') && command !== 'verify') assert.is(stdout, '', `${what}: a failure prints nothing on stdout with --json`)
        // A backup given a directory as its second argument makes it: only a failed one must leave nothing.
        if (command !== 'backup' || code !== 0) assert.equal(await listing(dir), before, `${what}: nothing made or left beside the log`)
        else for (const made of await readdir(cwd)) await rm(join(cwd, made), { recursive: true, force: true })
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 30), seed: Number(process.env.FUZZ_SEED ?? 20261208), endOnFailure: true, includeErrorInReport: true },
    )
    const after = await EventLog.open(location)
    try {
      assert.is((await after.verify()).digest, digest, 'the log is as it was')
    } finally {
      await after.close()
    }
  }),
)

test.run()
