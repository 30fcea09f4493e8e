/**
 * Raw-file helpers for the corruption and secrets suites: build a closed log with findable
 * markers, find and flip bytes in LevelDB's files, and list what a log directory holds.
 */
import { randomBytes } from 'node:crypto'
import { readFile, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { EventLog, type RuntimeEvent } from '../../index.js'

/** A closed log: the seq of each marker (stored in the `invocation.opened` content) and the high-water. */
export interface BuiltLog {
  markers: { seq: number; marker: string }[]
  highWater: number
}

/**
 * Writes `invocations` invocations (opened with a marker message of `contentBytes` random hex,
 * then ended), `perBatch` to a group commit, and closes the log.
 */
export async function buildLog(dir: string, options: { invocations: number; contentBytes: number; perBatch?: number }): Promise<BuiltLog> {
  const log = await EventLog.open(dir)
  const markers: BuiltLog['markers'] = []
  try {
    const perBatch = options.perBatch ?? 1
    const execution = { model: 'm', providerOptions: {}, cwd: '/workspace/faults', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: [] } }
    for (let first = 0; first < options.invocations; first += perBatch) {
      const batch: RuntimeEvent[] = []
      for (let n = first; n < Math.min(options.invocations, first + perBatch); n += 1) {
        const marker = `MARK${String(n).padStart(6, '0')}-${randomBytes(options.contentBytes / 2).toString('hex')}`
        const invocation = { sessionId: `session-${n}`, turnId: 'turn', runId: 'run', invocationId: `invocation-${n}` }
        batch.push(
          {
            id: `invocation-${n}/1`,
            recordedAt: 1_700_000_000_000 + n,
            invocation,
            fact: { type: 'invocation.opened', input: { kind: 'message', content: marker }, configuration: { cwd: '/workspace/faults' }, execution },
          },
          { id: `invocation-${n}/2`, recordedAt: 1_700_000_000_001 + n, invocation, fact: { type: 'invocation.ended', outcome: { status: 'cancelled', source: 'test' } } },
        )
        markers.push({ seq: 0, marker })
      }
      const seqs = await log.appendAll(batch)
      const opened = seqs.filter((_, index) => index % 2 === 0)
      opened.forEach((seq, index) => {
        const entry = markers[markers.length - opened.length + index]
        if (entry) entry.seq = seq
      })
    }
    return { markers, highWater: log.head().highWater }
  } finally {
    await log.close()
  }
}

/** The files of `dir` whose name ends with `suffix` and whose bytes contain `needle`, with the first offset. */
export async function findBytes(dir: string, needle: string, suffix = ''): Promise<{ file: string; offset: number }[]> {
  const found: { file: string; offset: number }[] = []
  const target = Buffer.from(needle, 'utf8')
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(suffix)) continue
    const bytes = await readFile(join(dir, entry.name))
    const offset = bytes.indexOf(target)
    if (offset !== -1) found.push({ file: join(dir, entry.name), offset })
  }
  return found
}

/** XORs one byte of `file` with `mask` (default: a hex digit stays a letter or digit, so the value still decodes). */
export async function flipByte(file: string, offset: number, mask = 0x01): Promise<void> {
  const bytes = await readFile(file)
  bytes[offset] = (bytes[offset] as number) ^ mask
  await writeFile(file, bytes)
}

/** The names of `dir`'s files that end with `suffix`. */
export async function filesEndingWith(dir: string, suffix: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => name.endsWith(suffix)).sort()
}

/** Every regular file under `dir` (recursively), with its bytes. */
export async function everyFile(dir: string): Promise<{ path: string; bytes: Buffer }[]> {
  const out: { path: string; bytes: Buffer }[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...(await everyFile(path)))
    else if (entry.isFile()) out.push({ path, bytes: await readFile(path) })
  }
  return out
}
