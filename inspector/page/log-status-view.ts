/** The top bar: the log's location, high-water, digest, `verify` status and the live indicator. */
import type { BackupPoint } from '../../store/backup-point.js'
import type { Overview, VerifyReport } from '../protocol.js'
import { byId, visible } from './dom.js'
import { shortDigest } from './format.js'

export function showLog(location: string, highWater: number, digest: string): void {
  const where = byId('log-location')
  where.textContent = visible(location)
  where.title = visible(location)
  byId('log-highwater').textContent = String(highWater)
  const digestNode = byId('log-digest')
  digestNode.textContent = shortDigest(digest)
  digestNode.title = digest
}

/** For a backup, or a log put back from one: where it was taken (hidden for any other log). */
export function showBackup(point: BackupPoint | null): void {
  const item = byId('log-backup-item')
  item.hidden = point === null
  if (point === null) return
  const taken = new Date(point.takenAt).toISOString()
  const node = byId('log-backup')
  node.textContent = `taken at ${taken} · seq ${point.highWater}`
  node.title = `This log is a backup taken at ${taken}, at seq ${point.highWater} (digest ${point.digest}), or was put back from one: what its sessions did after that is not in it. Each session that has not run since needs allowRestored on its next run.`
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
  delete badge.dataset.partial
  if (report.status === 'ok') {
    const newer = highWater - report.highWater
    if (newer > 0) {
      // Only part of the log was checked: neutral, not the all-good green, and saying how far.
      badge.className = 'badge badge-neutral'
      badge.dataset.partial = 'true'
      badge.textContent = `verified through #${report.highWater} · ${newer} newer`
      badge.title = `verify() checked the facts up to seq ${report.highWater} (digest ${report.digest ?? '?'}); the ${newer} newer fact${newer === 1 ? '' : 's'}, to seq ${highWater}, ${newer === 1 ? 'is' : 'are'} not checked yet: press Verify`
    } else {
      badge.className = 'badge badge-ok'
      badge.textContent = `✓ verified · ${report.events} facts`
      badge.title = report.digest ?? ''
    }
  } else {
    badge.className = 'badge badge-bad'
    badge.textContent = report.status === 'corrupt' ? `✗ ${report.code}${report.seq === null ? '' : ` at seq ${report.seq}`}` : `✗ ${report.code}`
    badge.title = visible(report.message ?? '')
  }
}

export function showLive(connected: boolean, overview: Pick<Overview, 'mode' | 'refresh'> | null): void {
  const box = byId('live-status')
  const mode = overview?.mode ?? null
  if (mode === 'snapshot') {
    const refresh = overview?.refresh ?? null
    if (refresh !== null && refresh.stopped === null) {
      // Copies taken again when the log's files change: new facts arrive as in live mode, a little later.
      box.className = connected ? 'live live-on' : 'live live-off'
      box.title = `the log is open in another process: the inspector shows copies of it, taken again when it changes (it looks every ${seconds(refresh.everyMs)})`
      byId('live-label').textContent = connected ? `snapshot · refreshed every ${seconds(refresh.everyMs)}` : 'reconnecting…'
      return
    }
    // A copy taken when the server started: nothing lands on it, so it is never live.
    box.className = 'live live-off'
    box.title = refresh?.stopped ?? 'the log is open in another process: this is a copy taken when the inspector started, and it does not update'
    byId('live-label').textContent = connected ? 'snapshot · not updating' : 'reconnecting…'
    return
  }
  box.className = connected ? 'live live-on' : 'live live-off'
  byId('live-label').textContent = connected ? (mode === 'engine' ? 'live · engine attached' : 'live') : 'reconnecting…'
}

/** `2000` as `2 s`, `500` as `0.5 s`. */
function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`
}
