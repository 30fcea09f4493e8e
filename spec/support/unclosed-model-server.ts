/**
 * A scripted model server that is never closed (run by spec/openai-chat-client.test.ts in a child
 * process): it prints its base URL, waits for the parent's request, and answers it only from an
 * unref'd timer, which fires only while the request in flight keeps the process alive. Answered,
 * the process must end by itself, the server still open and the parent's connection idle.
 */
import { answer, scriptedModelServer } from '../../testing/scripted-model-server.js'

const server = await scriptedModelServer([answer.text('answered while in flight', { hold: true, stream: false })])
// Only until the parent's request arrives: nothing but the server's own handles is left after it.
const keep = setInterval(() => undefined, 1_000)
process.stdout.write(`${server.baseUrl}\n`)
await server.seen(0)
clearInterval(keep)
setTimeout(() => server.release(0), 100).unref()
