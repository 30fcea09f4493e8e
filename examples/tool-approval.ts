/**
 * Approval of single tool calls: `issue_refund` needs approval, so each of its calls waits for the
 * run's approver before it is dispatched. Small refunds are approved, a large one is denied: the
 * decision is in the log (who approved, why a call was denied), the denied call never ran, and the
 * model was told why.
 *
 *   npx tsx examples/tool-approval.ts
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type ToolDefinition } from 'factstate'
import { answer, scriptedModelServer } from 'factstate/testing'

const issued: unknown[] = []
const issueRefund: ToolDefinition = {
  name: 'issue_refund',
  description: 'Sends money back to a customer',
  inputSchema: { type: 'object', properties: { order: { type: 'string' }, amount: { type: 'number' } } },
  // Only refunds over 100 need a person; a predicate of the input (or `true`: every call).
  needsApproval: (input) => (input as { amount: number }).amount > 100,
  async execute(input) {
    issued.push(input)
    return { refunded: true }
  },
}

// A local model that asks for three refunds at once, then reports.
const model = await scriptedModelServer([
  answer.toolCalls([
    { name: 'issue_refund', arguments: { order: 'A-1', amount: 40 } },
    { name: 'issue_refund', arguments: { order: 'B-2', amount: 250 } },
    { name: 'issue_refund', arguments: { order: 'C-3', amount: 9_000 } },
  ]),
  answer.text('Refunded A-1 and B-2; C-3 needs a manager.'),
])
const directory = await mkdtemp(join(tmpdir(), 'factstate-tool-approval-'))
const log = await EventLog.open(join(directory, 'log'))
const engine = new Engine({ log })

const outcome = await engine.run(
  {
    invocation: { sessionId: 'support', turnId: 't-1', runId: 'r-1', invocationId: 'i-1' },
    provider: { kind: 'openai-chat', baseUrl: model.baseUrl, model: 'my-model' },
    configuration: { cwd: process.cwd() },
    tools: [issueRefund],
    work: { kind: 'message', content: 'Refund orders A-1, B-2 and C-3' },
  },
  {
    // In an application this would ask a person (a chat message, a ticket) and may take as long as it needs.
    onApproval: async ({ name, input }) => {
      const { order, amount } = input as { order: string; amount: number }
      console.log(`approval asked: ${name} ${order} ${amount}`)
      return amount <= 1_000 ? { approved: true, by: 'dana@support' } : { approved: false, by: 'dana@support', reason: 'over 1,000 needs a manager' }
    },
  },
)

for await (const { seq, event } of log.events()) {
  const { fact } = event
  if (fact.type === 'tool.dispatched') console.log(`#${seq} dispatched ${JSON.stringify(fact.input)}${fact.approval ? ` approved by ${fact.approval.by}` : ''}`)
  if (fact.type === 'tool.rejected') console.log(`#${seq} rejected ${JSON.stringify(fact.input)} ${fact.reason}: ${fact.approval?.reason}`)
}
console.log(`${outcome.status}: ${issued.length} refunds issued`)

await log.close()
await model.close()
await rm(directory, { recursive: true, force: true })
if (outcome.status !== 'completed' || issued.length !== 2) process.exit(1)
