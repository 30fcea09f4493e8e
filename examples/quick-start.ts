/**
 * The README's Quick start, verbatim (a test checks they stay equal): one run with one tool call,
 * against a scripted OpenAI-compatible server on 127.0.0.1. Run it again and it starts a new turn.
 *
 *   npx tsx examples/quick-start.ts
 */
import { Engine, EventLog, answerOf, recoverInvocations } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

// Your email API. Pass it the operationId as its idempotency key: after a crash, your
// reconciliation can ask the API whether that very call took effect.
const mailer = {
  sent: new Map<string, unknown>(),
  async send(input: unknown, { idempotencyKey }: { idempotencyKey: string }) {
    this.sent.set(idempotencyKey, input)
    return { queued: true }
  },
}

// A local model that asks for one email, then answers. With a real provider, drop this and pass
// its baseUrl (e.g. https://api.openai.com/v1), model and apiKey below.
const model = await scriptedModelServer([
  answer.toolCalls([{ name: 'send_email', arguments: { to: 'ops@example.com' } }]),
  answer.text('The report is on its way to ops.'),
])

const log = await EventLog.open('./.factstate/quick-start') // one writer per directory
await recoverInvocations(log) // close what a crash left open
const engine = new Engine({ log })

const id = Date.now().toString(36) // ids are never reused: a second run with the same ids is refused
const running = await engine.start({
  invocation: { sessionId: 'user-42', turnId: `t-${id}`, runId: `r-${id}`, invocationId: `i-${id}` },
  provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'my-model', apiKey: process.env.OPENAI_API_KEY },
  configuration: { cwd: process.cwd() },
  instructions: 'You run errands for the ops team. Use a tool for anything that has an effect.',
  tools: [{
    name: 'send_email',
    description: 'Send an email',
    inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
    execute: async (input, { operationId }) => mailer.send(input, { idempotencyKey: operationId }),
  }],
  work: { kind: 'message', content: 'Email the report to ops' },
})
const outcome = await running.wait() // completed | handoff_paused | failed | cancelled
console.log(outcome.status, `· ${mailer.sent.size} email(s) sent · log digest ${log.head().digest}`)
console.log(answerOf(await log.invocationEvents(running.invocation.invocationId))) // the model's final answer

await log.close()
await model.close()
if (outcome.status !== 'completed' || mailer.sent.size !== 1) process.exit(1)
