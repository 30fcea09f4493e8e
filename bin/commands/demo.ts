import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { readdir, rm, stat, writeFile } from 'node:fs/promises'
import { constants } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { FactstateError } from '../../errors.js'
import { escapeControls } from '../../store/fact-summary.js'
import { EventLog } from '../../store/event-log.js'
import { makeDirectory } from '../../store/writer-lock.js'
import { paths, readLedger, shownBaseUrl } from '../demo/agent.js'
import { type CommandIo, EXIT, endBySignal, parseCommand, reportError, usage } from '../io.js'

export const demoHelp = `usage: factstate demo [--dir DIRECTORY]

Runs the whole promise of factstate on this machine, with no network and no API key: a small
shop agent whose tools write to a ledger file, against a built-in OpenAI-compatible server on
127.0.0.1 (or a real endpoint when OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL are set).
  1. a tool runs; a hold reserved mid-request becomes ready at the safe point and is rolled back
  2. a second hold is committed: the run is sealed, and that process exits
  3. a second process reopens the log, recovers, and runs the successor — no tool re-runs
  4. a process is killed with SIGKILL while a tool runs; recovery marks the outcome unknown and
     the next message needs reconciliation
  5. a summary: facts, digest, verify, how often each tool really ran
DIRECTORY defaults to ./.factstate/demo (replaced on each run). Exit 0 only if every step
behaved as described; 1 with the reason otherwise. Stopped by Ctrl-C, SIGTERM or SIGHUP, the
demo passes the signal to the process it is running, waits for it, and ends by the signal itself
(a shell says 130, 143, 129), so a script or loop running it stops too.`

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏']

/** How to run a phase in a fresh Node process, from source (through tsx) or from the built package. */
function phaseCommand(phase: string, dir: string): { command: string; args: string[] } {
  const here = import.meta.url
  if (here.endsWith('.ts')) {
    return { command: process.execPath, args: ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL('../demo/phase.ts', here)), phase, dir] }
  }
  return { command: process.execPath, args: [fileURLToPath(new URL('../demo/phase.js', here)), phase, dir] }
}

interface PhaseRun {
  code: number | null
  signal: NodeJS.Signals | null
  result: Record<string, unknown> | undefined
}

/** The signals that stop the demo. */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const

/** How long a phase process has to end by the signal passed to it before it is killed. */
const STOP_GRACE_MS = 5_000

/** The signal that stopped the demo, the phase process running meanwhile, and whether that one was running when the signal came. */
interface Stop {
  signal?: NodeJS.Signals
  child?: ChildProcess
  passed?: boolean
}

/** Thrown between phases once a signal stopped the demo. */
class Stopped extends Error {}

/**
 * Passes SIGINT, SIGTERM and SIGHUP to the phase process running: a signal sent to the demo alone
 * (`kill PID`, a job runner's timeout; Ctrl-C reaches both) would otherwise leave it running after the
 * demo ended. Returns the disposer of its listeners.
 */
function passSignals(stop: Stop): () => void {
  const listeners = STOP_SIGNALS.map((signal) => {
    const listener = (): void => {
      stop.signal ??= signal
      const child = stop.child
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) return
      stop.passed = true
      child.kill(signal)
      // A phase that does not end by the signal is not left behind either.
      setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS).unref()
    }
    process.on(signal, listener)
    return [signal, listener] as const
  })
  return () => {
    for (const [signal, listener] of listeners) process.off(signal, listener)
  }
}

/**
 * Runs one phase in its own process, relaying its lines with a process label. `killOn` names
 * a line at which the orchestrator kills the process with SIGKILL.
 */
async function runPhase(phase: string, dir: string, label: string, io: CommandIo, stop: Stop, killOn?: string): Promise<PhaseRun> {
  if (stop.signal !== undefined) throw new Stopped()
  const { command, args } = phaseCommand(phase, dir)
  const run = await new Promise<PhaseRun>((resolve, reject) => {
    const child: ChildProcess = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    stop.child = child
    let result: Record<string, unknown> | undefined
    let buffered = ''
    let errors = ''
    let spin = 0
    let idle = 0
    const interactive = process.stderr.isTTY === true
    const ticker = interactive
      ? setInterval(() => {
          idle += 1
          if (idle > 2) process.stderr.write(`\r${SPINNER[spin++ % SPINNER.length]} ${label} working…`)
        }, 120)
      : undefined
    const clear = () => {
      if (interactive && idle > 2) process.stderr.write('\r\x1b[2K')
      idle = 0
    }
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk
      let newline = buffered.indexOf('\n')
      while (newline !== -1) {
        const line = buffered.slice(0, newline)
        buffered = buffered.slice(newline + 1)
        clear()
        if (line.startsWith('RESULT ')) result = JSON.parse(line.slice(7)) as Record<string, unknown>
        else if (killOn !== undefined && line === killOn) {
          io.stdout(`[${label} pid ${child.pid}] the refund tool is running — kill -9 now`)
          child.kill('SIGKILL')
        } else io.stdout(`[${label}] ${line}`)
        newline = buffered.indexOf('\n')
      }
    })
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      errors += chunk
    })
    child.on('error', (error) => {
      if (ticker) clearInterval(ticker)
      stop.child = undefined
      reject(error)
    })
    child.on('close', (code, signal) => {
      if (ticker) clearInterval(ticker)
      stop.child = undefined
      clear()
      if (errors.trim() !== '' && code !== 0 && signal === null) io.stderr(`[${label}] ${errors.trim()}`)
      resolve({ code, signal, result })
    })
  })
  // Its outcome is the signal's, not a step that misbehaved: the demo stops here.
  if (stop.signal !== undefined) throw new Stopped()
  return run
}

/** Left in every directory the demo prepares: only such a directory (or an empty one) is ever emptied. */
const MARKER = '.factstate-demo'

/** A demo directory's log that another process has open is `LOG_WRITER_BUSY`: the demo then exits 3. */
async function notInUse(location: string): Promise<void> {
  let log: EventLog
  try {
    log = await EventLog.open(location)
  } catch (error) {
    // Anything else (a damaged log of an earlier demo) is the demo's own to replace.
    if (error instanceof FactstateError && error.code === 'LOG_WRITER_BUSY') throw error
    return
  }
  await log.close()
}

/** Empties the demo directory, refusing to touch one that holds anything but an earlier demo. */
export async function prepare(dir: string): Promise<void> {
  if (dir.trim() === '') throw new Error('--dir needs a directory')
  if (existsSync(dir)) {
    if (!(await stat(dir)).isDirectory()) throw new Error(`${dir} is a file, not a directory; choose another --dir`)
    const entries = await readdir(dir)
    const foreign = entries.filter((name) => name !== 'log' && name !== 'ledger.jsonl' && name !== MARKER)
    if (foreign.length > 0) throw new Error(`${dir} holds other files (${foreign.slice(0, 3).join(', ')}); choose another --dir`)
    // A `log` the demo did not write (no marker) is somebody's log: never deleted.
    if (entries.length > 0 && !entries.includes(MARKER)) {
      throw new Error(`${dir} holds a log the demo did not write; choose another --dir`)
    }
    // Nor one in use (an inspector left open on the last demo): deleted under that process, the
    // log it holds would get its head anchor written into the new demo's directory at its close.
    if (entries.includes('log')) await notInUse(join(dir, 'log'))
    // The entries, not the directory: it may be the current one (`--dir .`).
    for (const name of entries) await rm(join(dir, name), { recursive: true, force: true })
  }
  try {
    await makeDirectory(dir)
  } catch (error) {
    throw new Error(`${dir} cannot be made (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); choose another --dir`)
  }
  await writeFile(join(dir, MARKER), 'written by `factstate demo`: the next demo run in this directory empties it\n')
}

/**
 * `factstate demo`: the whole promise, end to end, in separate processes.
 *
 * @example
 * ```sh
 * npm install && npm run demo
 * ```
 */
export async function demoCommand(args: string[], io: CommandIo): Promise<number> {
  const parsed = parseCommand(io, demoHelp, {
    args,
    allowPositionals: false,
    options: { dir: { type: 'string', default: '.factstate/demo' }, help: { type: 'boolean', short: 'h', default: false } },
  })
  if (typeof parsed === 'number') return parsed
  const dir = parsed.values.dir
  const failures: string[] = []
  const expect = (ok: boolean, what: string) => {
    io.stdout(`  ${ok ? '✔' : '✘'} ${what}`)
    if (!ok) failures.push(what)
  }
  try {
    await prepare(dir)
  } catch (error) {
    if (error instanceof FactstateError && error.code === 'LOG_WRITER_BUSY') {
      io.stderr(escapeControls(`error: LOG_WRITER_BUSY: another process has the log of the last demo in ${dir} open (an application, inspect or log --follow left running on it?); nothing was deleted`))
      io.stderr('remedy: stop that process, or run the demo with another --dir')
      return EXIT.busy
    }
    if (error instanceof FactstateError) return reportError(error, io)
    // A directory the demo may not empty is a matter of the command line, not a failed demo.
    return usage(io, (error as Error).message, demoHelp)
  }
  const stop: Stop = {}
  /** The demo's exit code, with its last words: stopped by a signal, failed, or passed. */
  const finish = (): number => {
    if (stop.signal !== undefined) {
      // Between phases, or in the summary (run here): no other process to end.
      io.stderr(`demo stopped by ${stop.signal}${stop.passed ? ': the process it was running ended too' : ' (no process of it was running)'}`)
      // The CLI then ends by the signal, as any program it stops; run in a test's process, the code is all.
      endBySignal(stop.signal)
      return 128 + constants.signals[stop.signal]
    }
    if (failures.length > 0) {
      io.stderr(`demo failed: ${failures.length} step(s) did not behave as described: ${failures.join('; ')}`)
      return EXIT.failed
    }
    io.stdout('\ndemo passed: every step behaved as described.')
    return EXIT.ok
  }
  const dispose = passSignals(stop)
  try {
    const { log: location, ledger } = paths(dir)
    io.stdout(`factstate demo — log in ${location}, tool effects in ${ledger}`)
    const real = process.env.OPENAI_BASE_URL
    io.stdout(real ? `model: ${shownBaseUrl(real)} (OPENAI_BASE_URL; the steps depend on the model calling the tools)` : 'model: the built-in scripted OpenAI-compatible server on 127.0.0.1 (no network, no key)')
    // Each step stands on the one before it: after one that misbehaved, the rest would only fail for that reason.
    const halted = (before: number, step: string) => {
      if (failures.length === before) return false
      io.stdout(`\n  stopped: ${step} did not behave as described${real ? ' (with a real model, see the reason above)' : ''}; the steps after it depend on it and were not run`)
      return true
    }

    io.stdout('\n1–2. A run with a tool, a hold rolled back, then a hold committed (process 1)')
    let before = failures.length
    const sealed = await runPhase('seal', dir, 'process 1', io, stop)
    expect(sealed.code === 0, 'process 1 sealed the run and exited')
    // A process that failed said why (above): its other checks would only repeat it.
    if (sealed.code !== 0 && halted(before, 'step 1–2')) return finish()
    expect(sealed.result?.outcome === 'handoff_paused', 'the invocation ended handoff_paused')
    expect(sealed.result?.pauseMatchesPreview === true, 'commit() resolved with exactly the preview')
    expect(sealed.result?.ledger === 2, 'each tool call ran exactly once (2 ledger entries)')
    if (sealed.result?.requests !== null) expect(sealed.result?.requests === 2, 'no model request after the seal')
    if (halted(before, 'step 1–2')) return finish()

    io.stdout('\n3. Another process resumes the sealed turn (process 2)')
    before = failures.length
    const resumed = await runPhase('successor', dir, 'process 2', io, stop)
    expect(resumed.code === 0, 'process 2 ran the successor')
    if (resumed.code !== 0 && halted(before, 'step 3')) return finish()
    expect(resumed.result?.recovered === 0, 'recovery found nothing open after a clean seal')
    expect(resumed.result?.outcome === 'completed', 'the successor completed')
    // A real model may make calls of its own in the successor: none may repeat an operation of process 1.
    if (real) expect(resumed.result?.rerun === 0, `the successor re-ran no tool of process 1 (it made ${String(resumed.result?.calls)} call(s) of its own)`)
    else expect(resumed.result?.ledger === 2, 'the successor re-ran no tool (still 2 ledger entries)')
    if (halted(before, 'step 3')) return finish()

    io.stdout('\n4. A crash while a tool runs (process 3 is killed with SIGKILL), then reconciliation (process 4)')
    before = failures.length
    const crashed = await runPhase('crash', dir, 'process 3', io, stop, 'TOOL_RUNNING')
    expect(crashed.signal === 'SIGKILL', 'process 3 was killed while the refund ran')
    if (halted(before, 'the crash (process 3)')) return finish()
    before = failures.length
    const reconciled = await runPhase('reconcile', dir, 'process 4', io, stop)
    expect(reconciled.code === 0, 'process 4 reopened the log and reconciled')
    if (reconciled.code !== 0 && halted(before, 'the reconciliation (process 4)')) return finish()
    expect(reconciled.result?.recovered === 1 && reconciled.result?.uncertain === 1, 'recovery closed the crashed run with its refund outcome unknown')
    expect(reconciled.result?.refusal === 'RUN_RECONCILIATION_REQUIRED', 'the next message was refused until the unknown outcome was acknowledged')
    expect(reconciled.result?.modelTold === true, 'the model was told the refund may or may not have happened')
    expect(reconciled.result?.outcome === 'completed', 'the acknowledged message completed')

    io.stdout('\n5. Summary')
    const log = await EventLog.open(location)
    try {
      const { events, digest } = await log.verify()
      const runs = await readLedger(ledger)
      const byTool = new Map<string, number>()
      for (const entry of runs) byTool.set(entry.tool, (byTool.get(entry.tool) ?? 0) + 1)
      const operations = new Set(runs.map((entry) => entry.operationId))
      io.stdout(`  facts written: ${events}`)
      io.stdout(`  digest:        ${digest}`)
      io.stdout(`  verify:        ok (seq continuity, decoding, digest chain over the stored bytes, every index record)`)
      io.stdout(`  tools really ran: ${[...byTool].map(([tool, count]) => `${tool} ×${count}`).join(', ')}`)
      expect(operations.size === runs.length, 'no operation ran twice')
      expect(byTool.get('append_ledger') === 2 && byTool.get('refund') === 1, 'append_ledger ran twice and refund once, across four processes')
    } finally {
      await log.close()
    }
    io.stdout(`\n  open the visualizer on this log:  npx factstate inspect ${location}`)
    io.stdout(`  print its facts:                   npx factstate log ${location}`)
  } catch (error) {
    // Once a signal stopped the demo, what failed after it (a phase cut short, the summary's log) is the signal's doing.
    if (!(error instanceof Stopped) && stop.signal === undefined) return reportError(error, io)
  } finally {
    dispose()
  }
  return finish()
}
