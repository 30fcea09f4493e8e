/**
 * An answer served to a web page as it is written, over Server-Sent Events: `sessionFeed` gives the
 * session's facts and the live text in one ordered stream whose ids let a page that loses its
 * connection resume where it was (`Last-Event-ID`), and `toServerSentEvent` writes each message.
 * The page here drops the connection in the middle of the answer and comes back; it ends with the
 * text the log records, no piece missed or shown twice.
 *
 *   npx tsx examples/answer-over-sse.ts
 */
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type SessionFeedMessage, answerOf, sessionFeed, toServerSentEvent } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const ANSWER = 'Tomorrow in Oslo: light snow, -3 °C, with a clear evening. Take gloves, and a hat for the walk home.'
// A local model that streams its answer slowly, in 12 pieces.
const model = await scriptedModelServer([answer.text(ANSWER, { pieces: 12, pieceDelayMs: 40 })])
const directory = await mkdtemp(join(tmpdir(), 'factstate-sse-'))
const log = await EventLog.open(join(directory, 'log'))
const engine = new Engine({ log })
const sessionId = 'weather'

// GET /events?session=…: the session's feed, as long as the page stays.
const web = createServer((request, response) => {
  const session = new URL(request.url ?? '/', 'http://localhost').searchParams.get('session') ?? ''
  const gone = new AbortController()
  response.on('close', () => gone.abort())
  let feed: AsyncIterable<SessionFeedMessage>
  try {
    feed = sessionFeed(log, { sessionId: session, lastEventId: request.headers['last-event-id'], engine, signal: gone.signal })
  } catch {
    response.writeHead(400).end('not a session id')
    return
  }
  response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store' })
  void (async () => {
    for await (const message of feed) {
      // A page that reads slowly: the feed reads on once the socket has taken what was written.
      if (!response.write(toServerSentEvent(message))) await once(response, 'drain', { signal: gone.signal }).catch(() => undefined)
    }
    response.end()
  })()
})
await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
const url = `http://127.0.0.1:${(web.address() as AddressInfo).port}/events?session=${sessionId}`

// The page, as a browser's EventSource would drive it: what it shows, and the last id it got.
let passed = 0
let lastEventId = ''
let text = ''
let ended = false
const shown: string[] = []
function apply(event: string, data: string): void {
  const value = JSON.parse(data)
  if (event === 'reset') text = ''
  if (event === 'text') text += value.text
  if (event === 'text-so-far') text = value.text // replaces what the page has of that attempt
  if (event === 'fact' && value.event.fact.type === 'model.completed') text = value.event.fact.output.text ?? text
  if (event === 'fact' && value.event.fact.type === 'invocation.ended') ended = true
  shown.push(event)
}

/** One connection: reads events until `leaveAfter` text pieces (then drops it) or the run's end. */
async function connect(leaveAfter: number): Promise<void> {
  const leave = new AbortController()
  const response = await fetch(url, { headers: lastEventId === '' ? {} : { 'last-event-id': lastEventId }, signal: leave.signal })
  const decoder = new TextDecoder()
  const reader = (response.body as ReadableStream<Uint8Array>).getReader()
  let buffer = ''
  let pieces = 0
  shown.length = 0
  try {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) return
      buffer += decoder.decode(value, { stream: true })
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const fields = new Map<string, string>()
        for (const line of buffer.slice(0, end).split('\n')) {
          const colon = line.indexOf(':')
          const field = line.slice(0, colon)
          fields.set(field, (fields.has(field) && field === 'data' ? `${fields.get(field)}\n` : '') + line.slice(colon + 1).replace(/^ /, ''))
        }
        buffer = buffer.slice(end + 2)
        if (fields.has('id')) lastEventId = fields.get('id') as string
        apply(fields.get('event') ?? 'message', fields.get('data') ?? '')
        if (fields.get('event') === 'text') pieces += 1
        if (ended || pieces === leaveAfter) return
      }
    }
  } finally {
    leave.abort() // the page goes: the server's feed ends at once
  }
}

const running = await engine.start(
  {
    invocation: { sessionId, turnId: 't-1', runId: 'r-1', invocationId: 'i-1' },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'my-model' },
    providerOptions: { stream: true },
    configuration: { cwd: process.cwd() },
    tools: [],
    work: { kind: 'message', content: 'What will the weather be in Oslo tomorrow?' },
  },
  // The feed passes on the live text of a run started with a text receiver (here it also counts them).
  { onModelText: () => void (passed += 1) },
)
await connect(4) // the connection drops after four pieces of the answer
const dropped = text
while (passed < 7) await new Promise((resolve) => setTimeout(resolve, 10)) // the page is away while three more are written
await connect(Number.POSITIVE_INFINITY) // back, with the last id it got
const outcome = await running.wait()
const recorded = answerOf(await log.invocationEvents('i-1'))

const gap = shown.indexOf('text')
console.log(`dropped mid-answer, the page showing ${JSON.stringify(dropped)}`)
console.log(`back with its last id, it got: ${shown.slice(0, gap).join(', ')}, ${shown.filter((event) => event === 'text').length} pieces, ${shown.slice(shown.lastIndexOf('text') + 1).join(', ')}`)
console.log(`${outcome.status}: the page shows ${text === recorded ? 'the recorded answer' : 'another text'}: ${JSON.stringify(text)}`)

web.close()
web.closeAllConnections()
await log.close()
await model.close()
await rm(directory, { recursive: true, force: true })
if (outcome.status !== 'completed' || text !== recorded || text !== ANSWER || dropped.length === 0 || shown[0] !== 'text-so-far') process.exit(1)
