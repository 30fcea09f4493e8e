/**
 * The inspector links a child run and the tool call that started it, both ways: the child's summary
 * names its parent call, and the parent's lists the children its calls started (read from the
 * children's opened facts as the index takes them in, or with `log.childRuns` for a parent read from
 * the log), whatever the child's ids and session. Real LevelDB log, real HTTP on 127.0.0.1.
 */
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, type Fact, type RunInput, type RuntimeEvent, type ToolDefinition, childRunFor } from '../index.js'
import { Catalog } from '../inspector/catalog.js'
import { serveInspector } from '../inspector/index.js'
import type { InvocationDetail, Overview } from '../inspector/protocol.js'
import { EventMaker, completeInvocation, facts, invocationOf } from './support/log-fixtures.js'
import type { Browser } from 'playwright-core'
import { launchChromium } from './support/chromium.js'
import { ensurePageBuilt } from './support/inspector-build.js'
import { bounded } from './support/temp.js'
import { engineTest } from './support/engine-fixtures.js'
import { answer } from '../testing/scripted-model-server.js'

const supervisor = invocationOf('sup', 'desk')
const operationId = 'inv-sup/step-1/0'

/** The supervisor's run, and the opened fact of one child of its first call (session `<op>.<name>`). */
function childOf(name: string, parent = supervisor): RuntimeEvent {
  const opened = facts.opened(`task for ${name}`) as Extract<Fact, { type: 'invocation.opened' }>
  if (opened.input.kind === 'message') opened.input.parent = { invocation: parent, operationId: `${parent.invocationId}/step-1/0` }
  return new EventMaker(invocationOf(name, `${parent.invocationId}.step-1.0.${name}`)).next(opened)
}

/**
 * One Chromium for the file, launched by the first page test and closed after the last: each test
 * opens a context of its own (its own pages, cookies and storage) and closes it, where each launched
 * and closed a browser of its own (a second or more of each test's time, for nothing it checks).
 */
let launched: Promise<Browser> | undefined
const sharedBrowser = () =>
  (launched ??= launchChromium())
test.after(async () => {
  if (launched !== undefined) await (await launched.catch(() => undefined))?.close()
})

test('the index links a child to its parent call and the parent to its children, including a parent in another log (named, not linked)', () => {
  const catalog = new Catalog()
  let seq = 0
  const stored = (events: RuntimeEvent[]) => events.map((event) => ({ seq: (seq += 1), event }))
  catalog.apply(stored(completeInvocation('sup', 'desk')))
  catalog.apply(stored([childOf('writer'), childOf('critic')]))
  const writer = catalog.summary('inv-writer', new Set())
  assert.equal(writer?.parent, { invocation: supervisor, operationId, exists: true })
  assert.equal(
    catalog.summary('inv-sup', new Set())?.children.map((child) => [child.operationId, child.invocation.invocationId, child.exists]),
    [
      [operationId, 'inv-writer', true],
      [operationId, 'inv-critic', true],
    ],
  )
  assert.equal(catalog.summary('inv-sup', new Set())?.parent, null)
  // A child whose parent the index does not hold (another log): named, not linked.
  catalog.apply(stored([childOf('orphan', invocationOf('elsewhere', 'other'))]))
  assert.is(catalog.summary('inv-orphan', new Set())?.parent?.exists, false)
})

test(
  "the inspector's API gives a child its parent call and the parent's call its child runs",
  bounded(30_000, async (dir) => {
    const log = await EventLog.open(join(dir, 'log'))
    try {
      await log.appendAll(completeInvocation('sup', 'desk'))
      await log.append(childOf('writer'))
      const inspector = await serveInspector({ log })
      try {
        const child = (await (await fetch(`${inspector.url}api/invocation?id=inv-writer`)).json()) as InvocationDetail
        assert.equal(child.summary.parent, { invocation: supervisor, operationId, exists: true })
        const parent = (await (await fetch(`${inspector.url}api/invocation?id=inv-sup`)).json()) as InvocationDetail
        assert.equal(parent.summary.children, [{ operationId, invocation: invocationOf('writer', 'inv-sup.step-1.0.writer'), exists: true }])
        // A child that opens while the inspector serves is linked too.
        await log.append(childOf('critic'))
        let children: string[] = []
        for (const deadline = Date.now() + 10_000; children.length < 2 && Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 20))) {
          const detail = (await (await fetch(`${inspector.url}api/invocation?id=inv-sup`)).json()) as InvocationDetail
          children = detail.summary.children.map((link) => link.invocation.invocationId)
        }
        assert.equal(children, ['inv-writer', 'inv-critic'])
      } finally {
        await inspector.close()
      }
    } finally {
      await log.close()
    }
  }),
)

test(
  "the page shows on a child run a link to its parent call's run, and on the parent each call's child run; each link opens the other",
  bounded(90_000, async (dir) => {
    ensurePageBuilt()
    const log = await EventLog.open(join(dir, 'log'))
    await log.appendAll(completeInvocation('sup', 'desk'))
    await log.append(childOf('writer'))
    const inspector = await serveInspector({ log })
    const browsing = await (await sharedBrowser()).newContext()
    try {
      const page = await browsing.newPage()
      page.setDefaultTimeout(10_000)
      const errors: string[] = []
      page.on('pageerror', (error) => errors.push(error.message))
      await page.goto(inspector.url)
      await page.waitForSelector('#boot[hidden]', { state: 'attached' })
      await page.click('button.run[data-invocation="inv-writer"]')
      await page.waitForSelector('h1[data-invocation-title="inv-writer"]')
      const parentLink = await page.waitForSelector('button[data-link="parent"]')
      assert.is(await parentLink.getAttribute('data-target'), 'inv-sup')
      assert.is(await parentLink.getAttribute('data-operation'), operationId)
      assert.match((await page.textContent('div.note[data-parent]')) ?? '', /Child run of.*desk\/run-sup.*inv-sup\/step-1\/0/)
      // Found again when clicked: a click on the run the page opened with renders it once more.
      await page.click('button[data-link="parent"]')
      await page.waitForSelector('h1[data-invocation-title="inv-sup"]')
      const childLink = await page.waitForSelector('button[data-link="child"]')
      assert.is(await childLink.getAttribute('data-target'), 'inv-writer')
      const childNote = (await page.textContent('div.note[data-child="inv-writer"]')) ?? ''
      assert.match(childNote, /Call.*inv-sup\/step-1\/0.*started the child run.*inv-sup\.step-1\.0\.writer\/run-writer/, JSON.stringify(childNote))
      await page.click('div.note[data-child="inv-writer"] button[data-link="child"]')
      await page.waitForSelector('h1[data-invocation-title="inv-writer"]')
      assert.equal(errors, [])
    } finally {
      await browsing.close()
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  "a child run the index dropped (past maxIndexed) is still linked from its parent's header and its call's row, saying it is not in the index, and opens from the log; a parent dropped too finds it by its call's operation id",
  bounded(90_000, async (dir) => {
    ensurePageBuilt()
    const log = await EventLog.open(join(dir, 'log'))
    // The parent stays open (a session that needs someone is never dropped); its child ended, and
    // 150 later sessions push it out of an index of 20.
    const parent = new EventMaker(supervisor)
    await log.appendAll(
      parent.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: `call-${operationId}`, name: 'delegate', arguments: '{}' }]), facts.dispatched(operationId)]),
    )
    const opened = childOf('writer')
    const child = new EventMaker(opened.invocation)
    child.next(opened.fact)
    await log.appendAll([opened, ...child.many([facts.requested('s1'), facts.completed('s1', [], 'drafted'), facts.ended()])])
    // A parent that ended, dropped with its child: read from the log, it finds the child by its call's operation id.
    const boss = invocationOf('boss', 'desk-2')
    const bossOp = 'inv-boss/step-1/0'
    await log.appendAll(
      new EventMaker(boss).many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: `call-${bossOp}`, name: 'delegate', arguments: '{}' }]), facts.dispatched(bossOp)]),
    )
    const critic = childOf('critic', boss)
    const criticMaker = new EventMaker(critic.invocation)
    criticMaker.next(critic.fact)
    await log.appendAll([critic, ...criticMaker.many([facts.requested('s1'), facts.completed('s1', [], 'fine'), facts.ended()])])
    await log.appendAll(new EventMaker(boss).many([facts.settled(bossOp), facts.requested('s2'), facts.completed('s2', [], 'ok'), facts.ended()]).map((event, n) => ({ ...event, id: `inv-boss/late-${n}` })))
    await log.appendAll(Array.from({ length: 150 }, (_, n) => completeInvocation(`later-${n}`)).flat())
    const inspector = await serveInspector({ log, maxIndexed: 20 })
    const browsing = await (await sharedBrowser()).newContext()
    try {
      const overview = (await (await fetch(`${inspector.url}api/overview`)).json()) as Overview
      assert.not.ok(overview.sessions.some((session) => session.sessionId === opened.invocation.sessionId), 'the child is not in the index')
      const detail = (await (await fetch(`${inspector.url}api/invocation?id=inv-sup`)).json()) as InvocationDetail
      assert.equal(detail.summary.children, [{ operationId, invocation: opened.invocation, exists: true, dropped: true }])
      assert.not.ok(overview.sessions.some((session) => session.sessionId === 'desk-2'), 'the ended parent is not in the index either')
      const fromLog = (await (await fetch(`${inspector.url}api/invocation?id=inv-boss`)).json()) as InvocationDetail
      assert.equal(fromLog.summary.children, [{ operationId: bossOp, invocation: critic.invocation, exists: true, dropped: true }])

      const page = await browsing.newPage()
      page.setDefaultTimeout(10_000)
      const errors: string[] = []
      page.on('pageerror', (error) => errors.push(error.message))
      await page.goto(`${inspector.url}#invocation=inv-sup`)
      await page.waitForSelector('h1[data-invocation-title="inv-sup"]')
      const headerLink = await page.waitForSelector('div.note[data-child="inv-writer"] button[data-link="child"]')
      assert.is(await headerLink.getAttribute('data-indexed'), 'false')
      assert.is(await headerLink.isEnabled(), true)
      assert.match((await headerLink.textContent()) ?? '', /^→ inv-sup\.step-1\.0\.writer\/run-writer· not in the index$/)
      assert.match((await headerLink.getAttribute('title')) ?? '', /not in the inspector's index \(its session was dropped past maxIndexed\), read from the log/)
      const rowLink = await page.waitForSelector(`li.entry[data-type="tool.dispatched"] [data-child="inv-writer"] button[data-link="child"][data-operation="${operationId}"]`)
      assert.is(await rowLink.getAttribute('data-indexed'), 'false')
      await rowLink.click()
      await page.waitForSelector('h1[data-invocation-title="inv-writer"]')
      await page.waitForSelector('li.entry[data-type="invocation.ended"]')
      // A new load (a change of the hash alone is not one).
      await page.goto('about:blank')
      await page.goto(`${inspector.url}#invocation=inv-boss`)
      await page.waitForSelector('h1[data-invocation-title="inv-boss"]')
      await page.click('div.note[data-child="inv-critic"] button[data-link="child"][data-indexed="false"]')
      await page.waitForSelector('h1[data-invocation-title="inv-critic"]')
      assert.equal(errors, [])
    } finally {
      await browsing.close()
      await inspector.close()
      await log.close()
    }
  }),
)

test(
  "a specialist kept in a session of its own (ids not childRunOf's) is linked by the parent its runs record: each call's row and the supervisor's header name its writer run, the writer's header its call, indexed or dropped from the index",
  engineTest(
    [
      answer.toolCalls([{ id: 'call-d1', name: 'delegate', arguments: { task: 'draft the release note' } }]),
      answer.text('Drafted the release note.'),
      answer.text('The writer drafted it.'),
      answer.toolCalls([{ id: 'call-d2', name: 'delegate', arguments: { task: 'draft the changelog' } }]),
      answer.text('Drafted the changelog.'),
      answer.text('The writer drafted that too.'),
    ],
    { ms: 120_000 },
    async (h) => {
      ensurePageBuilt()
      const { log } = h
      const writer = { ...h.input('writer'), tools: [] }
      let tasks = 0
      // As spec/support/child-specialist-session.ts: childRunFor's parent, ids of the tool's own.
      const delegate: ToolDefinition = {
        name: 'delegate',
        description: 'hands a task to the writer, which keeps one session',
        inputSchema: { type: 'object', properties: { task: { type: 'string' } }, required: ['task'] },
        async execute(args, context) {
          const { parent } = childRunFor(context, 'writer')
          tasks += 1
          const last = (await log.runs('writer-of-desk')).at(-1)
          const source = last && (await log.runSource('writer-of-desk', last.runId))?.boundary
          const invocation = { sessionId: 'writer-of-desk', turnId: `w-turn-${tasks}`, runId: `w-run-${tasks}`, invocationId: `w-inv-${tasks}` }
          const content = (args as { task: string }).task
          const work: RunInput['work'] = source ? { kind: 'continuation', source, content } : { kind: 'message', content }
          return (await h.start({ ...writer, invocation, parent, work }, { signal: context.signal })).wait()
        },
      }
      const supervisor = h.input('sup', { session: 'desk', tools: [delegate] })
      assert.is((await h.run(supervisor)).status, 'completed')
      const first = (await log.runSource('desk', 'run-sup'))?.boundary
      assert.ok(first)
      const second = { ...supervisor, invocation: { sessionId: 'desk', turnId: 'turn-sup-2', runId: 'run-sup-2', invocationId: 'invocation-sup-2' }, work: { kind: 'continuation' as const, source: first, content: 'now the changelog' } }
      assert.is((await h.run(second)).status, 'completed')
      const call1 = 'invocation-sup/step-1/0'
      const call2 = 'invocation-sup-2/step-1/0'
      const writerRun = (n: number) => ({ sessionId: 'writer-of-desk', turnId: `w-turn-${n}`, runId: `w-run-${n}`, invocationId: `w-inv-${n}` })
      const links = (detail: InvocationDetail) => detail.summary.children.map((child) => [child.operationId, child.invocation.invocationId, child.exists, child.dropped ?? false])
      const browsing = await (await sharedBrowser()).newContext()
      try {
        // 1. Every run indexed.
        let inspector = await serveInspector({ log })
        try {
          const sup2 = (await (await fetch(`${inspector.url}api/invocation?id=invocation-sup-2`)).json()) as InvocationDetail
          assert.equal(links(sup2), [[call2, 'w-inv-2', true, false]])
          const child = (await (await fetch(`${inspector.url}api/invocation?id=w-inv-2`)).json()) as InvocationDetail
          assert.equal(child.summary.parent, { operationId: call2, invocation: second.invocation, exists: true })
          const page = await browsing.newPage()
          page.setDefaultTimeout(10_000)
          const errors: string[] = []
          page.on('pageerror', (error) => errors.push(error.message))
          await page.goto(`${inspector.url}#invocation=invocation-sup-2`)
          await page.waitForSelector('h1[data-invocation-title="invocation-sup-2"]')
          const rowLink = await page.waitForSelector(`li.entry[data-type="tool.dispatched"] [data-child="w-inv-2"] button[data-link="child"][data-operation="${call2}"]`)
          assert.match((await rowLink.textContent()) ?? '', /^→ writer-of-desk\/w-run-2$/)
          assert.is(await page.locator('button[data-link="child"][data-target="w-inv-1"]').count(), 0, "the first call's writer run is not this run's")
          await rowLink.click()
          await page.waitForSelector('h1[data-invocation-title="w-inv-2"]')
          const parentLink = await page.waitForSelector(`div.note[data-parent="${call2}"] button[data-link="parent"][data-target="invocation-sup-2"]`)
          assert.is(await parentLink.isEnabled(), true)
          assert.equal(errors, [])
          await page.close()
        } finally {
          await inspector.close()
        }
        // 2. Both sessions dropped from the index (20 runs kept, 150 later sessions): the supervisor's
        // runs are read from the log and find their writer runs by the parent those record; the
        // writer's run, read from the log too, links its parent, which opens from the log.
        await log.appendAll(Array.from({ length: 150 }, (_, n) => completeInvocation(`later-${n}`)).flat())
        inspector = await serveInspector({ log, maxIndexed: 20 })
        try {
          const overview = (await (await fetch(`${inspector.url}api/overview`)).json()) as Overview
          assert.not.ok(overview.sessions.some((session) => session.sessionId === 'desk' || session.sessionId === 'writer-of-desk'), 'neither session is in the index')
          const sup1 = (await (await fetch(`${inspector.url}api/invocation?id=invocation-sup`)).json()) as InvocationDetail
          assert.equal(links(sup1), [[call1, 'w-inv-1', true, true]])
          const sup2 = (await (await fetch(`${inspector.url}api/invocation?id=invocation-sup-2`)).json()) as InvocationDetail
          assert.equal(sup2.summary.children, [{ operationId: call2, invocation: writerRun(2), exists: true, dropped: true }])
          const child = (await (await fetch(`${inspector.url}api/invocation?id=w-inv-2`)).json()) as InvocationDetail
          assert.equal(child.summary.parent, { operationId: call2, invocation: second.invocation, exists: true, dropped: true })
          const page = await browsing.newPage()
          page.setDefaultTimeout(10_000)
          const errors: string[] = []
          page.on('pageerror', (error) => errors.push(error.message))
          await page.goto(`${inspector.url}#invocation=invocation-sup-2`)
          await page.waitForSelector('h1[data-invocation-title="invocation-sup-2"]')
          await page.click(`li.entry[data-type="tool.dispatched"] [data-child="w-inv-2"] button[data-link="child"][data-indexed="false"]`)
          await page.waitForSelector('h1[data-invocation-title="w-inv-2"]')
          const parentLink = await page.waitForSelector(`div.note[data-parent="${call2}"] button[data-link="parent"][data-indexed="false"]`)
          assert.is(await parentLink.isEnabled(), true)
          await parentLink.click()
          await page.waitForSelector('h1[data-invocation-title="invocation-sup-2"]')
          assert.equal(errors, [])
        } finally {
          await inspector.close()
        }
      } finally {
        await browsing.close()
      }
    },
  ),
)

test.run()
