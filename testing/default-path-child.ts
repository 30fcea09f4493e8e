/** The crash child `runPath` spawns when it is given no `childScript`: the default catalog (`echo`). */
import { runPathChild } from './path-child.js'

await runPathChild()
