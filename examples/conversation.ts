/**
 * A conversation: every user message after the first continues from the previous turn's boundary
 * (`work: { kind: 'continuation', source, content }`), so the model gets the whole history, rebuilt
 * from the log's facts, then the new message. The app keeps only the session id (`log.runs`
 * finds its last run); the second message is answered by a new engine on the reopened log, as
 * another process would.
 *
 *   npx tsx examples/conversation.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type RunInput } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

type Sent = { role: string; content: string | null }

// A stand-in model that remembers only what it is sent: a name it was told, in any earlier message.
const model = await scriptedModelServer((request) => {
  const messages = (request.body as { messages: Sent[] }).messages
  const said = messages.filter((message) => message.role === 'user').map((message) => message.content ?? '')
  const name = said.map((text) => /my name is (\w+)/i.exec(text)?.[1]).find((found) => found !== undefined)
  const last = said.at(-1) ?? ''
  if (/what is my name/i.test(last)) return answer.text(name ? `Your name is ${name}.` : 'You have not told me.')
  return answer.text(name ? `Nice to meet you, ${name}.` : 'Hello.')
})
const dir = await mkdtemp(join(tmpdir(), 'factstate-conversation-'))

const turn = (n: number, work: RunInput['work']): RunInput => ({
  invocation: { sessionId: 'chat-7', turnId: `turn-${n}`, runId: `run-${n}`, invocationId: `invocation-${n}` },
  provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'stand-in' },
  configuration: { cwd: process.cwd() },
  instructions: 'You are a friendly assistant. Remember what the user tells you.',
  tools: [],
  work,
})

/** One turn on a log: runs it and prints what the model was sent and what it answered. */
async function say(log: EventLog, n: number, work: RunInput['work']): Promise<string> {
  let reply = ''
  const running = await new Engine({ log }).start(turn(n, work), { onModelText: ({ text }) => (reply += text) })
  const outcome = await running.wait()
  const sent = (model.requests.at(-1)?.body as { messages: Sent[] }).messages
  console.log(`run-${n} (${outcome.status}): the model was sent ${sent.length} messages (${sent.map((m) => m.role).join(', ')}) and said "${reply}"`)
  return reply
}

try {
  let log = await EventLog.open(join(dir, 'log'))
  await say(log, 1, { kind: 'message', content: 'Hi, my name is Ada.' })
  await log.close()

  // Later, in another process: the app knows the conversation as session "chat-7", and continues its last run.
  log = await EventLog.open(join(dir, 'log'))
  // Its last run, read from the session's latest-run index (log.runs would read every run of the session).
  const last = (await log.latestRun('chat-7'))!
  const source = (await log.runSource('chat-7', last.runId))!.boundary
  // onlyIfLatest: refused (RUN_SOURCE_STALE) if another message's run opened since `last` was read, instead of branching past it.
  const reply = await say(log, 2, { kind: 'continuation', source, content: 'What is my name?', onlyIfLatest: true })
  await log.close()
  process.exitCode = reply === 'Your name is Ada.' ? 0 : 1
} finally {
  await model.close()
  await rm(dir, { recursive: true, force: true })
}
