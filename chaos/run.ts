/**
 * `npm run chaos -- --kills N`: kill -9 a running factstate workload N times and check, after
 * every kill and at the end, that nothing acknowledged was lost, no effect ran twice and the
 * digest chain is whole. See chaos/child.ts for the workload and chaos/audit.ts for the checks.
 *
 * Prints `chaos: K kills, D duplicate effects, L lost acknowledged facts, C digest failures,
 * U unknown outcomes` as its last stdout line; exits 0 only when D = L = C = 0, K = N and no
 * other rule was broken (each broken rule is printed to stderr).
 *
 * Options: `--kills N` (20), `--sessions S` concurrent sessions in the child (8), `--max-ms M`
 * the longest a life runs before its kill (250), `--verify-every V` a full `verify()` after every
 * V-th kill (1: every kill), `--seed X` for the kill moments, `--dir D` to keep the log and
 * ledger in D (default: a temporary directory, removed unless the run fails or `--keep`).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Audit, parseReport } from './audit.js'
import { prepareChild, startChild } from './child-process.js'

const { values } = parseArgs({
  options: {
    kills: { type: 'string', default: '20' },
    sessions: { type: 'string', default: '8' },
    'max-ms': { type: 'string', default: '250' },
    'verify-every': { type: 'string', default: '1' },
    seed: { type: 'string' },
    dir: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
})

function positiveInteger(name: string, text: string | undefined, allowZero = false): number {
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < (allowZero ? 0 : 1)) {
    process.stderr.write(`chaos: --${name} takes a ${allowZero ? 'non-negative' : 'positive'} integer, not ${text}\n`)
    process.exit(2)
  }
  return value
}

const KILLS = positiveInteger('kills', values.kills)
const SESSIONS = positiveInteger('sessions', values.sessions)
const MAX_MS = positiveInteger('max-ms', values['max-ms'])
const VERIFY_EVERY = positiveInteger('verify-every', values['verify-every'])
const SEED = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : positiveInteger('seed', values.seed, true)
/** How long a child may take to open its log and recover before that counts as a failure. */
const START_LIMIT_MS = 60_000

/** mulberry32: the kill moments are reproducible from the seed. */
function generator(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const log = (line: string) => process.stderr.write(`${line}\n`)

async function main(): Promise<number> {
  const random = generator(SEED)
  const base = values.dir ?? (await mkdtemp(join(tmpdir(), 'factstate-chaos-')))
  await mkdir(base, { recursive: true })
  const logDir = join(base, 'log')
  const ledger = join(base, 'ledger')
  await writeFile(ledger, '', { flag: 'a' })
  const command = await prepareChild()
  const audit = new Audit(logDir, ledger)
  const started = Date.now()
  let kills = 0
  let failed = false
  log(`chaos: ${KILLS} kills, ${SESSIONS} sessions, seed ${SEED}, ${command.bundled ? 'bundled child' : 'child through tsx'}, in ${base}`)
  try {
    for (let life = 1; life <= KILLS; life += 1) {
      const child = startChild(command, ['--log', logDir, '--ledger', ledger, '--generation', String(life), '--sessions', String(SESSIONS)])
      let startProblem: string | undefined
      try {
        await child.waitFor((line) => line.startsWith('opened '), START_LIMIT_MS)
        // One kill in ten lands while the child recovers and reconciles; the rest mid-workload.
        if (random() < 0.1) await sleep(Math.floor(random() * 40))
        else {
          await child.waitFor((line) => line === 'running', START_LIMIT_MS)
          await sleep(Math.floor(random() * MAX_MS))
        }
      } catch (error) {
        startProblem = (error as Error).message
      }
      child.kill()
      const ended = await child.ended
      if (ended.signal === 'SIGKILL') kills += 1
      else {
        failed = true
        log(`chaos: life ${life}: the child ended by itself (code ${ended.code}, ${startProblem ?? ''}); stderr:\n${ended.stderr}`)
      }
      await audit.afterKill(parseReport(ended.lines), { verify: life % VERIFY_EVERY === 0 || life === KILLS, label: `kill ${life}` })
      if (audit.broken) break
      if (life % Math.max(1, Math.floor(KILLS / 20)) === 0) {
        const f = audit.figures
        log(
          `chaos: ${life}/${KILLS} kills, ${audit.highWater} facts, D ${f.duplicates} L ${f.lost} C ${f.digestFailures}, ` +
            `${f.violations.length} violations, ${Math.round((Date.now() - started) / 1000)} s`,
        )
      }
    }
    await audit.finish()
  } finally {
    await command.dispose()
  }
  const { duplicates, lost, digestFailures, unknown, violations, stats } = audit.figures
  for (const violation of violations) log(`chaos: violation: ${violation}`)
  const seconds = Math.round((Date.now() - started) / 1000)
  log(`chaos: ${seconds} s; ${Object.entries(stats).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k} ${v}`).join(', ')}`)
  const ok = !failed && kills === KILLS && duplicates === 0 && lost === 0 && digestFailures === 0 && violations.length === 0
  process.stdout.write(`chaos: ${kills} kills, ${duplicates} duplicate effects, ${lost} lost acknowledged facts, ${digestFailures} digest failures, ${unknown} unknown outcomes\n`)
  if (ok && !values.keep && values.dir === undefined) await rm(base, { recursive: true, force: true })
  else log(`chaos: the log and the ledger are kept in ${base}`)
  return ok ? 0 : 1
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    log(`chaos: ${(error as Error)?.stack ?? String(error)}`)
    process.exitCode = 1
  },
)
