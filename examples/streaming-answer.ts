/**
 * An answer shown as it is written: `onModelText` gets the text of each model answer piece by
 * piece while the provider streams it, and the pieces add up to what the log then records.
 *
 *   npx tsx examples/streaming-answer.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type ModelTextPiece } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

// A local model that answers a first thought with a tool call, then its answer; as OpenAI's API
// does, it streams them (SSE) when the request asks for a stream.
const model = await scriptedModelServer([
  answer.toolCalls([{ name: 'forecast', arguments: { city: 'Oslo' } }], { text: 'Let me check the forecast for Oslo.' }),
  answer.text('Tomorrow in Oslo: light snow, -3 °C, with a clear evening. Take gloves.'),
])
const directory = await mkdtemp(join(tmpdir(), 'factstate-streaming-'))
const log = await EventLog.open(join(directory, 'log'))
const engine = new Engine({ log })

const pieces: ModelTextPiece[] = []
let shownStep = ''
const running = await engine.start(
  {
    invocation: { sessionId: 'weather', turnId: 't-1', runId: 'r-1', invocationId: 'i-1' },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'my-model' },
    // Ask for a stream: without it the provider answers in one body, and the text comes in one piece.
    providerOptions: { stream: true },
    configuration: { cwd: process.cwd() },
    tools: [{ name: 'forecast', description: 'The forecast for a city', execute: async () => ({ sky: 'light snow', celsius: -3 }) }],
    work: { kind: 'message', content: 'What will the weather be in Oslo tomorrow?' },
  },
  {
    // Called as each piece arrives, before the answer is a fact.
    onModelText: (piece) => {
      pieces.push(piece)
      if (piece.stepId !== shownStep) process.stdout.write(`${shownStep ? '\n' : ''}[${piece.stepId}] `)
      shownStep = piece.stepId
      process.stdout.write(`${piece.text}|`)
    },
  },
)
const outcome = await running.wait()
process.stdout.write('\n')

// What the log recorded, answer by answer, against the pieces passed on for it. Each piece names
// the seq of its attempt's model.requested (`requestSeq`; a retry records another) and its place
// in that attempt (`index`, from 0, no gap): with the log's digest at requestSeq, an SSE id
// `${requestSeq}:${digest}.${index}` for a page, as `sessionFeed` gives it (examples/answer-over-sse.ts).
let matching = 0
let answers = 0
let requested = 0
for await (const { seq, event } of log.events()) {
  if (event.fact.type === 'model.requested') requested = seq
  if (event.fact.type !== 'model.completed' || event.fact.output.text === undefined) continue
  answers += 1
  const own = pieces.filter((piece) => piece.requestSeq === requested)
  if (own.every((piece, index) => piece.index === index) && own.map((piece) => piece.text).join('') === event.fact.output.text) matching += 1
}
console.log(`${outcome.status}: ${pieces.length} pieces for ${answers} answers; ${matching} of ${answers} add up to the recorded text`)

await log.close()
await model.close()
await rm(directory, { recursive: true, force: true })
if (outcome.status !== 'completed' || answers !== 2 || matching !== 2 || pieces.length <= answers) process.exit(1)
