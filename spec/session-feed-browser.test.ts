/**
 * `sessionFeed` and `toServerSentEvent` served as the README's "Watching a run" shows, read by a
 * real browser's `EventSource` (headless Chromium), which reconnects by itself and sends the last id
 * it got as `Last-Event-ID`. The pages render what a chat UI would: each attempt's text (pieces
 * appended, `text-so-far` replacing, `reset` clearing), its tool calls and each call's progress.
 * While the run streams, the server cuts connections mid-answer, a page reloads, one reads over a
 * slow network, one is sent an id the log does not bear out; each ends showing exactly the recorded
 * answers and call (the call done), no fact or piece twice, none skipped, and Chromium's reconnects
 * carry the ids the feed relies on: the last one the page got, none after a reload or a `reset`.
 * The README's server block itself then runs as written: open at once for a session with no fact
 * yet, a 400 for a bad session id (the EventSource gives up, the process lives on).
 */
import { once } from 'node:events'
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Browser, Page } from 'playwright-core'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { type Engine, type EventLog, type StoredEvent, type ToolDefinition, sessionFeed, toServerSentEvent } from '../index.js'
import { answer } from '../testing/scripted-model-server.js'
import { launchChromium } from './support/chromium.js'
import { engineTest } from './support/engine-fixtures.js'
import { readmeBlock } from './support/readme.js'

const ANSWER = 'Tomorrow in Oslo: light snow, -3 °C, with a clear evening.\nTake gloves, and a hat for the walk home.'
const THOUGHT = 'Let me check the forecast for Oslo.'
const PACING = { pieces: 24, pieceDelayMs: 30 }
const SCRIPT = [answer.toolCalls([{ name: 'forecast', arguments: { city: 'Oslo', days: [1, 2, 3] } }], { text: THOUGHT, ...PACING }), answer.text(ANSWER, PACING)]
const RETRY_MS = 150

/** A tool that reports its progress five times while it runs. */
const forecast: ToolDefinition = {
  name: 'forecast',
  description: 'The forecast for a city',
  async execute(_input, context) {
    for (let done = 1; done <= 5; done += 1) {
      await new Promise((resolve) => setTimeout(resolve, 40))
      context.progress({ done, total: 5 })
    }
    return { sky: 'light snow', celsius: -3 }
  },
}

/** The chat page: an EventSource on the session's feed, rendering what a UI would. */
const PAGE = `<!doctype html><meta charset="utf-8"><title>chat</title><div id="answers"></div><script>
const state = { opens: 0, errors: 0, ended: false, facts: [], problems: [], lastIds: [], texts: {}, next: {}, calls: {}, callNext: {}, progress: {}, operations: {}, settled: {}, lastProgress: undefined }
window.state = state
const answers = document.getElementById('answers')
function box(seq) {
  let el = document.getElementById('a' + seq)
  if (!el) {
    el = document.createElement('section'); el.id = 'a' + seq
    el.innerHTML = '<p class="text"></p><ul class="calls"></ul>'
    answers.append(el)
  }
  return el
}
function render(seq) {
  const el = box(seq)
  el.querySelector('.text').textContent = state.texts[seq] ?? ''
  const calls = state.calls[seq] ?? {}
  el.querySelector('.calls').innerHTML = ''
  for (const [callId, call] of Object.entries(calls)) {
    const li = document.createElement('li'); li.dataset.call = callId
    li.dataset.name = call.name; li.dataset.args = call.arguments
    li.dataset.progress = state.settled[callId] ? 'done' : JSON.stringify(state.progress[callId]?.value ?? null)
    el.querySelector('.calls').append(li)
  }
}
const source = new EventSource('/events' + location.search)
source.onopen = () => { state.opens += 1 }
source.onerror = () => { state.errors += 1; state.readyState = source.readyState }
const on = (name, apply) => source.addEventListener(name, (e) => { state.lastIds.push(name + ' ' + e.lastEventId); apply(JSON.parse(e.data)) })
on('reset', () => {
  for (const key of ['texts', 'next', 'calls', 'callNext', 'progress', 'operations', 'settled']) state[key] = {}
  state.facts = []; state.ended = false; answers.innerHTML = ''
})
on('fact', ({ seq, event }) => {
  if (state.facts.includes(seq)) state.problems.push('fact twice ' + seq)
  if (state.facts.length > 0 && seq <= state.facts[state.facts.length - 1]) state.problems.push('fact out of order ' + seq)
  state.facts.push(seq)
  const fact = event.fact
  if (fact.type === 'model.requested') { state.texts[seq] = ''; state.next[seq] = 0; render(seq) }
  if (fact.type === 'model.completed') {
    const at = state.facts.slice().reverse().find((s) => s < seq && state.texts[s] !== undefined)
    // The attempt's text and calls are the fact's (a page back after the attempt ended has not had its last pieces).
    if (at !== undefined) {
      const recorded = fact.output.text ?? ''
      if (!recorded.startsWith(state.texts[at])) state.problems.push('live text ' + JSON.stringify(state.texts[at]) + ' is not the start of the recorded one')
      const calls = {}
      for (const call of fact.output.toolCalls ?? []) {
        const live = state.calls[at]?.[call.callId]
        if (live !== undefined && (live.name !== call.name || !call.arguments.startsWith(live.arguments))) state.problems.push('live call ' + JSON.stringify(live) + ' is not the start of the recorded one')
        calls[call.callId] = { name: call.name, arguments: call.arguments }
      }
      state.texts[at] = recorded; state.calls[at] = calls; render(at)
    }
  }
  if (fact.type === 'tool.dispatched') state.operations[fact.operationId] = fact.callId
  // The call ended: it shows done, not its last progress (a page away meanwhile was sent none of the updates after).
  if (fact.type === 'tool.settled') {
    const callId = state.operations[fact.operationId]
    state.settled[callId] = true; delete state.progress[callId]
    for (const seq of Object.keys(state.calls)) render(seq)
  }
  if (fact.type === 'invocation.ended') state.ended = true
})
on('text', (piece) => {
  const seq = piece.requestSeq
  if (state.texts[seq] === undefined) state.problems.push('text before its model.requested ' + seq)
  if (piece.index !== (state.next[seq] ?? 0)) state.problems.push('text piece ' + piece.index + ' where ' + state.next[seq] + ' was next')
  state.texts[seq] = (state.texts[seq] ?? '') + piece.text; state.next[seq] = piece.index + 1; render(seq)
})
on('text-so-far', (live) => { state.texts[live.requestSeq] = live.text; state.next[live.requestSeq] = live.pieces; render(live.requestSeq) })
on('tool-call', (piece) => {
  const seq = piece.requestSeq
  if (piece.index !== (state.callNext[seq] ?? 0)) state.problems.push('call piece ' + piece.index + ' where ' + state.callNext[seq] + ' was next')
  const calls = (state.calls[seq] ??= {})
  const call = (calls[piece.callId] ??= { name: piece.name, arguments: '' })
  call.arguments += piece.arguments
  state.callNext[seq] = piece.index + 1; render(seq)
})
on('tool-calls-so-far', (live) => {
  const calls = {}
  for (const call of live.calls) calls[call.callId] = { name: call.name, arguments: call.arguments }
  state.calls[live.requestSeq] = calls; state.callNext[live.requestSeq] = live.pieces; render(live.requestSeq)
})
on('tool-progress', (update) => {
  const before = state.progress[update.callId]
  if (before && update.index < before.index) state.problems.push('progress went back')
  if (state.settled[update.callId]) state.problems.push('progress after the call settled')
  state.progress[update.callId] = update; state.lastProgress = update.value
  for (const seq of Object.keys(state.calls)) render(seq)
})
</script>`

interface Shown {
  answers: { text: string; calls: { name: string; args: string; progress: string }[] }[]
  state: { opens: number; errors: number; ended: boolean; facts: number[]; problems: string[]; lastIds: string[]; lastProgress: unknown; readyState?: number }
}

/** What the page shows (read from its DOM) and what it counted. */
async function shown(page: Page): Promise<Shown> {
  return page.evaluate(() => {
    const answers = [...document.querySelectorAll('section')].map((section) => ({
      text: section.querySelector('.text')?.textContent ?? '',
      calls: [...section.querySelectorAll('li')].map((li) => ({ name: li.dataset.name ?? '', args: li.dataset.args ?? '', progress: li.dataset.progress ?? '' })),
    }))
    const { opens, errors, ended, facts, problems, lastIds, lastProgress, readyState } = (window as unknown as { state: Shown['state'] }).state
    return { answers, state: { opens, errors, ended, facts, problems, lastIds, lastProgress, readyState } }
  })
}

test(
  "Chromium's EventSource on the README's server: pages whose connection the server cuts mid-answer, that reload, that read over a slow network, show exactly the recorded answers, calls and progress",
  engineTest(SCRIPT, { stream: true, ms: 25_000 }, async (h) => {
    const input = h.input('browser', { tools: [forecast] })
    const { sessionId } = input.invocation
    /** Each tab's requests' Last-Event-ID, and after how many messages the server cuts each of its connections. */
    const requests = new Map<string, (string | undefined)[]>()
    const cuts: Record<string, number[]> = { cut: [3, 5, 2, 7, 1, 4, 9], reset: [1] }
    const cutsMade = new Map<string, number>()

    // The README's server, with the page at '/' and `retry:` written first.
    const web = createServer(async (request: IncomingMessage, response: ServerResponse) => {
      const url = new URL(request.url ?? '/', 'http://localhost')
      if (url.pathname === '/') {
        response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE)
        return
      }
      if (url.pathname !== '/events') {
        response.writeHead(404).end()
        return
      }
      const tab = url.searchParams.get('tab') ?? ''
      const header = request.headers['last-event-id']
      const seen = requests.get(tab) ?? []
      seen.push(typeof header === 'string' ? header : undefined)
      requests.set(tab, seen)
      const gone = new AbortController()
      response.on('close', () => gone.abort())
      // The 'reset' tab's first connection is sent an id this log does not bear out (as if the data directory were reset).
      if (tab === 'reset' && seen.length === 1) {
        response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store' })
        response.end(`retry: ${RETRY_MS}\n\n${toServerSentEvent({ id: '999999:sha256:00', event: 'noop', data: {} })}`)
        return
      }
      const feed = sessionFeed(h.log, { sessionId: url.searchParams.get('session') ?? '', lastEventId: header, engine: h.engine, signal: gone.signal })
      response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
      response.write(`retry: ${RETRY_MS}\n\n`)
      const cutAfter = cuts[tab]?.shift()
      let sent = 0
      for await (const message of feed) {
        if (sent + 1 !== cutAfter && !response.write(toServerSentEvent(message))) await once(response, 'drain', { signal: gone.signal }).catch(() => undefined)
        if (++sent === cutAfter) {
          cutsMade.set(tab, (cutsMade.get(tab) ?? 0) + 1)
          await new Promise((resolve) => response.write(toServerSentEvent(message), resolve))
          // The connection breaks mid-answer (a proxy's idle timeout, a network change). A message on its way
          // may then be lost (tried: now and then one was): its id never reached the page, which resumes before it.
          // The reset tab's connection ends cleanly instead, its last message delivered.
          if (tab === 'cut') response.socket?.destroy()
          break
        }
      }
      response.end()
    })
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
    const origin = `http://127.0.0.1:${(web.address() as AddressInfo).port}`
    let browser: Browser | undefined
    try {
      const launched = await launchChromium()
      browser = launched
      const open = async (tab: string) => {
        const page = await launched.newPage()
        page.setDefaultTimeout(15_000)
        if (tab === 'slow') {
          // Before the page loads: the emulation slows the requests made after it.
          const cdp = await page.context().newCDPSession(page)
          await cdp.send('Network.enable')
          await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 300, downloadThroughput: 4_000, uploadThroughput: 4_000 })
        }
        await page.goto(`${origin}/?session=${sessionId}&tab=${tab}`)
        return page
      }
      const steady = await open('steady')
      const cut = await open('cut')
      const reset = await open('reset')
      const reload = await open('reload')
      const slow = await open('slow')
      await steady.waitForFunction(() => (window as unknown as { state: { opens: number } }).state.opens === 1)

      const running = await h.start(input, { onModelText: () => undefined, onToolCallText: () => undefined, onToolProgress: () => undefined })
      // The reloading page reloads once the answer is being written: a new EventSource, no Last-Event-ID.
      await reload.waitForFunction(() => Object.values((window as unknown as { state: { texts: Record<string, string> } }).state.texts).some((text) => text.length > 10))
      await reload.reload()
      assert.equal(await running.wait(), { status: 'completed' })

      const facts: StoredEvent[] = []
      for await (const stored of h.log.events({ sessionId })) facts.push(stored)
      const completed = facts.flatMap(({ event }) => (event.fact.type === 'model.completed' ? [event.fact.output] : []))
      assert.equal(completed.map((output) => output.text), [THOUGHT, ANSWER])
      const call = completed[0]?.toolCalls?.[0]
      const expected = [
        { text: THOUGHT, calls: [{ name: 'forecast', args: call?.arguments ?? '?', progress: 'done' }] },
        { text: ANSWER, calls: [] },
      ]
      for (const [name, page] of Object.entries({ steady, cut, reset, reload, slow })) {
        await page.waitForFunction(() => (window as unknown as { state: { ended: boolean } }).state.ended, undefined, { timeout: 15_000 })
        const { answers, state } = await shown(page)
        assert.equal(state.problems, [], `${name}: no piece twice, none skipped, none before its fact`)
        assert.equal(state.facts, facts.map(({ seq }) => seq), `${name}: every fact once, in order`)
        assert.equal(answers, expected, `${name}: the recorded answers, and the call shown done`)
        // A page that never dropped saw the tool's last report; one away meanwhile may have missed it (the call is done anyway).
        if (name === 'steady') assert.equal(state.lastProgress, { done: 5, total: 5 })
        if (name === 'steady') assert.is(state.opens, 1)
        if (name === 'cut') {
          assert.ok((cutsMade.get('cut') ?? 0) >= 2, 'cut mid-answer, more than once')
          assert.is(state.opens, 1 + (cutsMade.get('cut') ?? 0), 'reconnected after each cut')
        }
      }
      // The cut page's reconnects each sent the last id it got; the reloaded one's first request after the reload, none.
      const cutIds = requests.get('cut') ?? []
      assert.is(cutIds[0], undefined)
      assert.ok(cutIds.slice(1).every((id) => id !== undefined && /^\d+:sha256:[0-9a-f]+(\.(c\.)?\d+)?$/.test(id)), cutIds.join(' | '))
      assert.equal(requests.get('reload'), [undefined, undefined])
      // The reset page: the feed's `reset` (id '') cleared its last id, so the reconnect after it sent none.
      const { state: resetState } = await shown(reset)
      assert.is(resetState.lastIds[0], 'reset ', 'the reset message leaves the page an empty last id')
      assert.equal(requests.get('reset'), [undefined, '999999:sha256:00', undefined], 'no Last-Event-ID after the reset')
    } finally {
      await browser?.close()
      web.closeAllConnections()
      await new Promise((resolve) => web.close(resolve))
    }
  }),
)

/** The README's server ("Watching a run") as it is written, with `log` and `engine`, serving the page at '/'. */
async function readmeServer(log: EventLog, engine: Engine): Promise<Server> {
  const block = await readmeBlock("response.write(toServerSentEvent(message))", "the README's SSE server", { from: '### Watching a run', until: '**Served from a snapshot.**' })
  const body = block
    .split('\n')
    .filter((line) => !line.startsWith('import '))
    .join('\n')
    .replace(/^createServer\(/m, 'return createServer(')
  // The block has no types: it runs as JavaScript.
  const make = new Function('createServer', 'once', 'sessionFeed', 'toServerSentEvent', 'log', 'engine', body) as (...values: unknown[]) => Server
  const feedServer = make(createServer, once, sessionFeed, toServerSentEvent, log, engine)
  const handler = feedServer.listeners('request')[0] as (request: IncomingMessage, response: ServerResponse) => void
  feedServer.removeAllListeners('request')
  feedServer.on('request', (request: IncomingMessage, response: ServerResponse) => {
    if (request.url?.startsWith('/?')) response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE)
    else handler(request, response)
  })
  return feedServer
}

test(
  "the README's server as written, in Chromium: a page on a session with no fact yet is open at once, a page with a bad session id is refused (400, the EventSource gives up) and the server lives on, a page shows the recorded answer",
  engineTest(SCRIPT, { stream: true, ms: 25_000 }, async (h) => {
    const input = h.input('readme', { tools: [forecast] })
    const { sessionId } = input.invocation
    const web = await readmeServer(h.log, h.engine)
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
    const origin = `http://127.0.0.1:${(web.address() as AddressInfo).port}`
    let browser: Browser | undefined
    try {
      const launched = await launchChromium()
      browser = launched
      const bad = await launched.newPage()
      await bad.goto(`${origin}/?session=${encodeURIComponent('not a session id')}&tab=bad`)
      // A 400: the EventSource fails for good (CLOSED), no reconnect; the handler's refusal was not left to reject.
      await bad.waitForFunction(() => (window as unknown as { state: { errors: number } }).state.errors > 0)
      assert.is((await shown(bad)).state.readyState, 2, 'CLOSED')
      const page = await launched.newPage()
      page.setDefaultTimeout(15_000)
      await page.goto(`${origin}/?session=${sessionId}&tab=readme`)
      // The session has no fact yet: the page is open (the headers came) before the run starts.
      await page.waitForFunction(() => (window as unknown as { state: { opens: number } }).state.opens === 1)
      const running = await h.start(input, { onModelText: () => undefined, onToolCallText: () => undefined, onToolProgress: () => undefined })
      assert.equal(await running.wait(), { status: 'completed' })
      await page.waitForFunction(() => (window as unknown as { state: { ended: boolean } }).state.ended)
      const { answers, state } = await shown(page)
      assert.equal(state.problems, [])
      assert.equal(answers.map(({ text }) => text), [THOUGHT, ANSWER])
      assert.equal(answers[0]?.calls.map(({ name, progress }) => [name, progress]), [['forecast', 'done']])
      assert.is(state.lastProgress === undefined ? undefined : JSON.stringify(state.lastProgress), JSON.stringify({ done: 5, total: 5 }))
      const refused = await shown(bad)
      assert.equal([refused.state.opens, refused.state.errors, refused.state.readyState], [0, 1, 2], 'refused once, never reconnected')
    } finally {
      await browser?.close()
      web.closeAllConnections()
      await new Promise((resolve) => web.close(resolve))
    }
  }),
)

test.run()
