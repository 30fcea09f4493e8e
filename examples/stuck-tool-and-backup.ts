/**
 * A tool that hangs, and what an operator does next: the tool has a time limit (`timeoutMs`), ignores
 * its signal, and is not waited for, so the run ends `outcome_unknown`, its call uncertain.
 * `log.pendingSessions()` then lists the session as waiting for that outcome to be acknowledged; a
 * message that acknowledges it (after checking the effect by its operation id) goes on. Then a
 * verified backup is taken while the log is open (`EventLog.backup`), and opened on its own. Last,
 * the session sends a summary, the log is lost and the backup put back: the restored log knows it
 * is one (`restoredFrom()`), so the session's next message is refused until it acknowledges that
 * what happened after the backup (the summary sent) is not in the log.
 *
 *   npx tsx examples/stuck-tool-and-backup.ts
 */
import { mkdtemp, rename, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type RunInput, type ToolDefinition, isFactstateError } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const exportReport: ToolDefinition = {
  name: 'export_report',
  description: 'Exports the monthly report to the archive (a slow upstream that sometimes hangs)',
  // A hung upstream must not hold the run for ever: past 200 ms the signal aborts, and a tool that
  // has not settled a second later is not waited for.
  timeoutMs: 200,
  // This one ignores its signal: it hangs for 3 s.
  execute: () => new Promise((resolve) => setTimeout(() => resolve('exported'), 3_000).unref()),
}

let summariesSent = 0
const sendSummary: ToolDefinition = {
  name: 'send_summary',
  description: 'Emails the report summary to the team',
  execute: async () => {
    summariesSent += 1
    return 'sent'
  },
}

const model = await scriptedModelServer([
  answer.toolCalls([{ name: 'export_report', arguments: { month: '2026-11' } }]),
  answer.text('The export may or may not have happened; I will not run it again.'),
  answer.toolCalls([{ name: 'send_summary', arguments: {} }]),
  answer.text('Summary sent.'),
  answer.text('I cannot tell whether the summary went out; I will ask before sending it again.'),
])
const dir = await mkdtemp(join(tmpdir(), 'factstate-stuck-'))
const log = await EventLog.open(join(dir, 'log'))
let restored: EventLog | undefined
try {
  const engine = new Engine({ log })
  const input = (run: string, work: RunInput['work']): RunInput => ({
    invocation: { sessionId: 'reports', turnId: `turn-${run}`, runId: `run-${run}`, invocationId: `invocation-${run}` },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'stand-in' },
    configuration: { cwd: '/srv/reports' },
    tools: [exportReport, sendSummary],
    work,
  })
  const first = await engine.run(input('1', { kind: 'message', content: 'Export the November report' }))
  console.log(`run 1: ${first.status}${first.status === 'failed' ? ` ${first.class}: ${first.message}` : ''}`)

  // What a restart (or an operator: npx factstate pending <log-dir>) sees.
  for (const { sessionId, unknown } of await log.pendingSessions()) {
    console.log(`pending: ${sessionId} has ${unknown.length} tool outcome(s) to acknowledge: ${unknown.map((op) => `${op.name} ${op.operationId}`).join(', ')}`)
  }
  // ... the archive is checked by the operation id; then the next message acknowledges the unknown outcome.
  const second = await engine.run(input('2', { kind: 'message', content: 'Where is the report?', allowPriorUnknown: true }))
  const pending = await log.pendingSessions()
  console.log(`run 2: ${second.status}; ${pending.length === 0 ? 'nothing pending' : `${pending.length} session(s) pending`}`)

  // A backup while the log is open: a consistent copy, verified in full, synced, a log of its own.
  const { events, digest } = await EventLog.backup(join(dir, 'log'), join(dir, 'backup'))
  const copy = await EventLog.open(join(dir, 'backup'))
  const same = copy.head().digest === log.head().digest && digest === log.head().digest
  await copy.close()
  console.log(`backup: ${events} events, ${same ? 'the same digest as the log' : 'a different digest'}`)

  // After the backup the session sends a summary; then the disk is lost, and the backup put back.
  const third = await engine.run(input('3', { kind: 'message', content: 'Send the summary to the team' }))
  console.log(`run 3: ${third.status}; summaries sent: ${summariesSent}`)
  await log.close()
  await rm(join(dir, 'log'), { recursive: true })
  await rename(join(dir, 'backup'), join(dir, 'log'))
  restored = await EventLog.open(join(dir, 'log'))
  const point = restored.restoredFrom()
  console.log(`restored: a backup taken at seq ${point?.highWater}; run 3 is not in it (high-water ${restored.head().highWater})`)
  const again = new Engine({ log: restored })
  // The session's next message is refused: its summary may have been sent after the backup.
  let refused = ''
  try {
    await again.run(input('4', { kind: 'message', content: 'Did the summary go out?' }))
  } catch (error) {
    if (!isFactstateError(error, 'RUN_RECONCILIATION_REQUIRED')) throw error
    refused = `${error.code}, restored at seq ${error.details?.restored?.highWater}`
  }
  console.log(`run 4: refused: ${refused}`)
  // ... the team's inbox is checked; then the next message acknowledges it.
  const fourth = await again.run(input('4', { kind: 'message', content: 'Did the summary go out?', allowRestored: true }))
  console.log(`run 4 (acknowledged): ${fourth.status}; summaries sent: ${summariesSent}`)
  process.exitCode =
    first.status === 'failed' && first.class === 'outcome_unknown' && second.status === 'completed' && pending.length === 0 && same &&
    third.status === 'completed' && point?.highWater === events && refused !== '' && fourth.status === 'completed' && summariesSent === 1
      ? 0
      : 1
} finally {
  await log.close()
  await restored?.close()
  await model.close()
  await rm(dir, { recursive: true, force: true })
}
