export { EventLog, type EventLogOptions, type SnapshotOptions, type Durability, type LogPrefix, type RunSource } from './event-log.js'
export type { InvocationProjection } from './projection.js'
export { recoverInvocations } from './recovery.js'
export { contentDigest } from './digest.js'
