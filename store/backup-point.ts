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

/** The stored record of a backup point. */
export const encodeBackupPoint = (point: BackupPoint): Uint8Array => encodeRecord({ highWater: point.highWater, digest: point.digest, takenAt: point.takenAt })

/** What is wrong with a decoded backup point, or undefined when it is one (at most `highWater` facts back). */
function backupPointProblem(value: unknown, highWater: number): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'it is not a record'
  const point = value as Record<string, unknown>
  const members = Object.keys(point).sort().join(',')
  if (members !== 'digest,highWater,takenAt') return `it holds ${members || 'nothing'}, not highWater, digest and takenAt`
  if (typeof point.highWater !== 'number' || !Number.isSafeInteger(point.highWater) || point.highWater < 0) return 'its highWater is not a seq'
  if (point.highWater > highWater) return `its highWater ${point.highWater} lies beyond the log's ${highWater}`
  if (typeof point.digest !== 'string' || !DIGEST.test(point.digest)) return 'its digest is not a sha256 digest'
  if (typeof point.takenAt !== 'number' || !Number.isSafeInteger(point.takenAt) || point.takenAt < 0) return 'its takenAt is not a time'
  return undefined
}

/** The backup point stored as `bytes`, in a log whose high-water is `highWater`; `LOG_CORRUPT` naming the record when it is not one. */
export function decodeBackupPoint(bytes: Uint8Array, highWater: number): BackupPoint {
  let value: unknown
  try {
    value = decodeRecord<unknown>(bytes, keys.backup)
  } catch (cause) {
    throw damagedPoint('it cannot be decoded', cause)
  }
  const problem = backupPointProblem(value, highWater)
  if (problem !== undefined) throw damagedPoint(problem)
  const { highWater: at, digest, takenAt } = value as BackupPoint
  return { highWater: at, digest, takenAt }
}

/** `LOG_CORRUPT` for the backup point's record, as the index audit reports a damaged marker. */
export function damagedPoint(problem: string, cause?: unknown): FactstateError {
  return new FactstateError('LOG_CORRUPT', `the backup point record ${keys.backup} is damaged: ${problem}`, {
    ...(cause === undefined ? {} : { cause }),
    details: { index: 'marker', key: keys.backup },
  })
}
