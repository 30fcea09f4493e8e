/**
 * The mark `EventLog.backup` leaves in every copy it makes: the point of the log the copy was taken
 * at. A log that holds it is a backup, and a backup opened as a log (put back in the log's place) has
 * gone back in time to that point: what its sessions did after it is not in the log.
 */
import { FactstateError } from '../errors.js'
import { decodeRecord, encodeRecord } from './encoding.js'
import { keys } from './keys.js'

/** Where a backup was taken: the log's high-water and digest then, and the time (ms since the epoch). */
export interface BackupPoint {
  highWater: number
  digest: string
  takenAt: number
}

const DIGEST = /^sha256:[0-9a-f]{64}$/

/**
 * The stored record of a backup's points, oldest first: the last is the backup's own, the others those
 * of the backups it descends from (a backup of a log put back from a backup), which the sessions that
 * have not run since them still need (`earlier`, only when there are some).
 */
export function encodeBackupPoints(points: readonly BackupPoint[]): Uint8Array {
  const plain = (point: BackupPoint) => ({ highWater: point.highWater, digest: point.digest, takenAt: point.takenAt })
  const last = points[points.length - 1]
  if (last === undefined) throw new TypeError('no backup point to record')
  const earlier = points.slice(0, -1).map(plain)
  return encodeRecord({ ...plain(last), ...(earlier.length === 0 ? {} : { earlier }) })
}

/** What is wrong with a decoded backup point, or undefined when it is one (at most `highWater` facts back). */
function backupPointProblem(value: unknown, highWater: number): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'it is not a record'
  const point = value as Record<string, unknown>
  const members = Object.keys(point).filter((member) => member !== 'earlier').sort().join(',')
  if (members !== 'digest,highWater,takenAt') return `it holds ${members || 'nothing'}, not highWater, digest and takenAt`
  if (typeof point.highWater !== 'number' || !Number.isSafeInteger(point.highWater) || point.highWater < 0) return 'its highWater is not a seq'
  if (point.highWater > highWater) return `its highWater ${point.highWater} lies beyond the log's ${highWater}`
  if (typeof point.digest !== 'string' || !DIGEST.test(point.digest)) return 'its digest is not a sha256 digest'
  if (typeof point.takenAt !== 'number' || !Number.isSafeInteger(point.takenAt) || point.takenAt < 0) return 'its takenAt is not a time'
  return undefined
}

/**
 * The backup points stored as `bytes` (oldest first, the backup's own last), in a log whose high-water
 * is `highWater`; `LOG_CORRUPT` naming the record when it is not one.
 */
export function decodeBackupPoints(bytes: Uint8Array, highWater: number): BackupPoint[] {
  let value: unknown
  try {
    value = decodeRecord<unknown>(bytes, keys.backup)
  } catch (cause) {
    throw damagedPoint('it cannot be decoded', cause)
  }
  const problem = backupPointProblem(value, highWater)
  if (problem !== undefined) throw damagedPoint(problem)
  const { highWater: at, digest, takenAt, earlier } = value as BackupPoint & { earlier?: unknown }
  const points: BackupPoint[] = []
  if (earlier !== undefined) {
    if (!Array.isArray(earlier) || earlier.length === 0) throw damagedPoint('its earlier points are not a list of points')
    for (const [index, point] of earlier.entries()) {
      const wrong = typeof point === 'object' && point !== null && 'earlier' in point ? 'it holds earlier points of its own' : backupPointProblem(point, highWater)
      if (wrong !== undefined) throw damagedPoint(`its earlier point ${index}: ${wrong}`)
      const { highWater: pointAt, digest: pointDigest, takenAt: pointTaken } = point as BackupPoint
      points.push({ highWater: pointAt, digest: pointDigest, takenAt: pointTaken })
    }
  }
  points.push({ highWater: at, digest, takenAt })
  if (points.some((point, index) => index > 0 && point.highWater < (points[index - 1] as BackupPoint).highWater)) {
    throw damagedPoint('its points are not in the order of the log')
  }
  return points
}

/** `LOG_CORRUPT` for the backup point's record, as the index audit reports a damaged marker. */
export function damagedPoint(problem: string, cause?: unknown): FactstateError {
  return new FactstateError('LOG_CORRUPT', `the backup point record ${keys.backup} is damaged: ${problem}`, {
    ...(cause === undefined ? {} : { cause }),
    details: { index: 'marker', key: keys.backup },
  })
}
