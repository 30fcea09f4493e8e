import { EventLog } from '../store/event-log.js'
import { logConformanceSuite } from '../store/conformance.js'

logConformanceSuite({ name: 'EventLog (sync)', open: (dir) => EventLog.open(dir) })
logConformanceSuite({ name: 'EventLog (os durability)', open: (dir) => EventLog.open(dir, { durability: 'os' }) })
