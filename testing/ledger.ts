/**
 * An execution ledger outside the fact log: each time a tool's `execute` is entered, one line is
 * appended to a plain file and fsynced before the tool goes on. It survives a SIGKILL of the
 * process that wrote it, so a test can count, across processes and restarts, how often each
 * dispatched operation really ran, without trusting the log it is checking.
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs'
import { FactstateError } from '../errors.js'

/** One execution as the ledger recorded it. */
export interface LedgerEntry {
  /** The operation id the tool was called with (`ToolContext.operationId`). */
  operationId: string
  /** The process that executed it. */
  pid: number
}

/**
 * A file of executions, one line per `execute` call.
 *
 * @example
 * ```ts
 * const ledger = new ExecutionLedger(join(dir, 'ledger'))
 * ledger.record('invocation-1/step-1/0')   // durable when it returns
 * ledger.entries()                         // [{ operationId: 'invocation-1/step-1/0', pid: process.pid }]
 * ```
 */
export class ExecutionLedger {
  constructor(
    /** The ledger file's path. */
    readonly file: string,
  ) {}

  /** Appends one execution and fsyncs it. */
  record(operationId: string): void {
    if (/[\t\n]/.test(operationId)) throw new FactstateError('TESTING_INVALID_OPTIONS', 'ExecutionLedger: an operation id must not contain tabs or newlines', { details: { field: 'operationId' } })
    const fd = openSync(this.file, 'a')
    try {
      writeSync(fd, `${operationId}\t${process.pid}\n`)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
  }

  /** Every execution recorded so far, in order (a torn last line, from a kill mid-write, is ignored). */
  entries(): LedgerEntry[] {
    if (!existsSync(this.file)) return []
    const entries: LedgerEntry[] = []
    for (const line of readFileSync(this.file, 'utf8').split('\n')) {
      const [operationId, pid] = line.split('\t')
      if (!operationId || !pid || !/^\d+$/.test(pid)) continue
      entries.push({ operationId, pid: Number(pid) })
    }
    return entries
  }
}
