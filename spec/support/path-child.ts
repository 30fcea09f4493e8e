/**
 * Child process for the crash steps of spec/model-paths.test.ts: spawned by `runPath` with the
 * path as an IPC message, it runs the path up to the crash with the spec's catalog, reports the
 * state it reached, and waits for SIGKILL.
 */
import { echoTool, runPathChild } from '../../testing/index.js'

await runPathChild({ tools: [echoTool()] })
