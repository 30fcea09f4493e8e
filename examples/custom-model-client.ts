/**
 * A custom ModelClient for a provider that does not speak OpenAI chat completions. The engine
 * always builds requests in the OpenAI chat shape (that is what the transcript is rebuilt
 * into); a client translates them for its provider and classifies the provider's failures.
 * Here the "provider" is a tiny local HTTP service with its own protocol:
 *   POST /generate { prompt, tools } → { say } or { call: { tool, args } }
 *
 *   npx tsx examples/custom-model-client.ts
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine, EventLog, type ModelClient, ModelExecutor, type ModelRequest, type ModelResponse, retryAfterMsOf } from 'factstate'

/** The client: OpenAI-shaped request in, the provider's protocol on the wire, a ModelResponse out. */
class GenerateApiClient implements ModelClient {
  constructor(private readonly url: string) {}

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const prompt = request.body.messages.map((m) => `${m.role}: ${'content' in m ? (m.content ?? '') : ''}`).join('\n')
    const tools = (request.body.tools ?? []).map((t) => t.function.name)
    // The limits are the client's to honour: the run's cancel, timeoutMs and, when the executor has
    // one, idleTimeoutMs. This provider answers in one piece, so the idle limit bounds the wait for it.
    const limits = [request.signal, AbortSignal.timeout(request.timeoutMs)]
    if (request.idleTimeoutMs !== undefined) limits.push(AbortSignal.timeout(request.idleTimeoutMs))
    let text: string
    try {
      // `origin` says which request this is (the engine always sets it): tagged here, the provider's
      // records can be matched with the log's model.requested facts.
      const origin = request.origin ? `${request.origin.invocation.invocationId} ${request.origin.stepId} attempt ${request.origin.attempt}` : 'unknown'
      const response = await fetch(this.url, { method: 'POST', headers: { 'x-request-origin': origin }, body: JSON.stringify({ prompt, tools }), signal: AbortSignal.any(limits) })
      // What retrying can fix is retryable (the wait the provider asks for, if it says one); the rest fails the step.
      if (response.status === 408 || response.status === 429 || response.status >= 500) {
        return { kind: 'interrupted', status: 'retryable_failure', message: `HTTP ${response.status}`, retryAfterMs: retryAfterMsOf(response.headers) }
      }
      if (!response.ok) return { kind: 'interrupted', status: 'failed', message: `HTTP ${response.status}: ${(await response.text()).slice(0, 200)}` }
      text = await response.text()
    } catch (error) {
      if (request.signal.aborted) return { kind: 'interrupted', status: 'cancelled', message: 'cancelled' }
      if ((error as Error).name === 'TimeoutError') return { kind: 'interrupted', status: 'timed_out', message: 'the provider did not answer in time' }
      return { kind: 'interrupted', status: 'retryable_failure', message: (error as Error).message }
    }
    let answer: { say?: string; call?: { tool: string; args: unknown } } | undefined
    try {
      answer = JSON.parse(text) as typeof answer
    } catch {
      answer = undefined
    }
    if (answer?.call) {
      return {
        kind: 'completed',
        // This provider names no calls: an id unique within the run, from the step the call answers.
        output: { toolCalls: [{ callId: `gen-${request.origin?.stepId ?? Date.now()}`, name: answer.call.tool, arguments: JSON.stringify(answer.call.args) }], finishReason: 'tool_calls' },
      }
    }
    if (typeof answer?.say === 'string') return { kind: 'completed', output: { text: answer.say, toolCalls: [], finishReason: 'stop' } }
    return { kind: 'interrupted', status: 'failed', message: 'the provider answered something else', malformed: true }
  }
}

// The provider: calls `clock` once, then reports the time it got back.
const origins: string[] = []
const provider = createServer((req, res) => {
  origins.push(String(req.headers['x-request-origin']))
  let body = ''
  req.on('data', (chunk) => (body += chunk))
  req.on('end', () => {
    const { prompt } = JSON.parse(body) as { prompt: string }
    const reply = prompt.includes('tool:') ? { say: `The clock said ${prompt.split('tool: ')[1]?.split('\n')[0]}` } : { call: { tool: 'clock', args: {} } }
    res.setHeader('content-type', 'application/json').end(JSON.stringify(reply))
  })
})
await new Promise<void>((resolve) => provider.listen(0, '127.0.0.1', resolve))
const url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}/generate`
const dir = await mkdtemp(join(tmpdir(), 'factstate-custom-'))
const log = await EventLog.open(join(dir, 'log'))
try {
  const model = new ModelExecutor({ timeoutMs: 120_000, idleTimeoutMs: 15_000, createClient: () => new GenerateApiClient(url) })
  const engine = new Engine({ log, model })
  const outcome = await engine.run({
    invocation: { sessionId: 's', turnId: 't', runId: 'r', invocationId: 'i' },
    // The provider config still names a model (recorded and sealed into pauses) and a base URL (neither:
    // a successor may use another). Give your provider's credentials here, as apiKey or headers, or,
    // if your client holds them itself, declare them as the client's `secrets`: either way they are
    // redacted from all the run records, its first fact included, and a run input that holds one is
    // refused (a token the client gets later it registers with request.addSecret, which covers what
    // is recorded from that attempt on).
    provider: { kind: 'openai-chat', baseUrl: url, model: 'generate-v1' },
    configuration: { cwd: process.cwd() },
    tools: [{ name: 'clock', description: 'The time', async execute() { return '12:00' } }],
    work: { kind: 'message', content: 'What time is it?' },
  })
  const facts = (await log.prefix(100, 1 << 20)).events.map((e) => e.event.fact)
  const said = facts.flatMap((f) => (f.type === 'model.completed' && f.output.text ? [f.output.text] : []))
  console.log(`outcome: ${outcome.status}; the model said: ${said.join(' ')}`)
  console.log(`the provider was asked by: ${origins.join('; ')}`)
  process.exitCode = outcome.status === 'completed' && said[0] === 'The clock said 12:00' ? 0 : 1
} finally {
  await log.close()
  await new Promise((resolve) => provider.close(resolve))
  await rm(dir, { recursive: true, force: true })
}
