/** The top bar: the log's location, high-water, digest, `verify` status and the live indicator. */
import type { VerifyReport } from '../protocol.js'
import { byId } from './dom.js'
import { shortDigest } from './format.js'

export function showLog(location: string, highWater: number, digest: string): void {
  const where = byId('log-location')
  where.textContent = location
  where.title = location
  byId('log-highwater').textContent = String(highWater)
  const digestNode = byId('log-digest')
  digestNode.textContent = shortDigest(digest)
  digestNode.title = digest
}

/** Shows a verify report; `highWater` is the log's current one (a report older than it is stale). */
export function showVerify(report: VerifyReport | 'checking', highWater: number): void {
  const badge = byId('verify-status')
  if (report === 'checking') {
    badge.className = 'badge badge-neutral'
    badge.textContent = 'checking…'
    badge.title = 'verify() is re-reading every fact'
    return
  }
  badge.dataset.status = report.status
  if (report.status === 'ok') {
    const stale = report.highWater < highWater
    badge.className = stale ? 'badge badge-stale' : 'badge badge-ok'
    const newer = highWater - report.highWater
    badge.textContent = stale ? `✓ verified · ${newer} newer fact${newer === 1 ? '' : 's'} unchecked` : `✓ verified · ${report.events} facts`
    badge.title = `${report.digest ?? ''}${stale ? `\nnewer facts (to seq ${highWater}) not yet verified` : ''}`
  } else {
    badge.className = 'badge badge-bad'
    badge.textContent = report.status === 'corrupt' ? `✗ ${report.code}${report.seq === null ? '' : ` at seq ${report.seq}`}` : `✗ ${report.code}`
    badge.title = report.message ?? ''
  }
}

export function showLive(connected: boolean, mode: 'engine' | 'log' | 'snapshot' | null): void {
  const box = byId('live-status')
  if (mode === 'snapshot') {
    // A copy taken when the server started: nothing lands on it, so it is never live.
    box.className = 'live live-off'
    box.title = 'the log is open in another process: this is a copy taken when the inspector started, and it does not update'
    byId('live-label').textContent = connected ? 'snapshot · not updating' : 'reconnecting…'
    return
  }
  box.className = connected ? 'live live-on' : 'live live-off'
  byId('live-label').textContent = connected ? (mode === 'engine' ? 'live · engine attached' : 'live') : 'reconnecting…'
}
