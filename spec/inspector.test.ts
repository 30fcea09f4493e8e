/**
 * The inspector page in headless Chromium (Debian's, driven by playwright-core) over a log written
 * by the acceptance scenario's flow, then live over a running engine. The page script is the one
 * the package build compiles (rebuilt first when missing or stale: spec/support/inspector-build.ts).
 * Screenshots are kept under spec/artifacts/ (ignored by git, collected by CI).
 */
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Browser, Page } from 'playwright-core'
import { suite } from 'uvu'
import * as assert from 'uvu/assert'
import { Engine, EventLog, type Fact, type InvocationOutcome, ModelExecutor, type RuntimeEvent, invocationMachine, recoverInvocations, usageOf } from '../index.js'
import { usageTotalsText } from '../store/fact-summary.js'
import { logInternals } from '../store/event-log.js'
import { type InspectorServer, serveInspector } from '../inspector/index.js'
import type { InvocationDetail } from '../inspector/protocol.js'
import { answer, scriptedModelServer } from '../testing/scripted-model-server.js'
import { ensurePageBuilt } from './support/inspector-build.js'
import { SCENARIO, XSS_PAYLOAD, scenarioInput, writeScenarioLog } from './support/inspector-fixtures.js'
import { EventMaker, completeInvocation, facts, invocationOf } from './support/log-fixtures.js'
import { launchChromium } from './support/chromium.js'
import { withTempDir, withTimeout } from './support/temp.js'

const ARTIFACTS = fileURLToPath(new URL('./artifacts/', import.meta.url))
const WAIT = { timeout: 10_000 }

interface Watched {
  page: Page
  /** Messages of every dialog the page opened (each dismissed). */
  dialogs: string[]
  /** Every uncaught script error. */
  errors: string[]
}

/** A page that records every dialog (and dismisses it) and every script error. */
async function watchedPage(browser: Browser): Promise<Watched> {
  const page = await browser.newPage({ viewport: { width: 1480, height: 960 } })
  page.setDefaultTimeout(10_000)
  const watched: Watched = { page, dialogs: [], errors: [] }
  page.on('dialog', (dialog) => {
    watched.dialogs.push(dialog.message())
    void dialog.dismiss()
  })
  page.on('pageerror', (error) => watched.errors.push(error.message))
  return watched
}

/** Loads the inspector afresh in `watched` and waits for its script to start. */
async function load(watched: Watched, url: string): Promise<Page> {
  watched.dialogs.length = 0
  watched.errors.length = 0
  await watched.page.goto(url)
  await watched.page.waitForSelector('#boot[hidden]', { state: 'attached', ...WAIT })
  return watched.page
}

/**
 * A page test on a log of its own (at `path` in a temporary directory), bounded at 30 s: `body` gets
 * the suite's page, the log, and `serve`, which starts the inspector on it. The inspector and the log
 * are closed after it, whatever happens, and the page is given back its size.
 */
function onOwnLog(
  context: Partial<Offline> & { setupError?: unknown },
  name: string,
  body: (watched: Watched, log: EventLog, serve: () => Promise<InspectorServer>) => Promise<void>,
  path: string[] = ['log'],
): Promise<void> {
  return withTimeout(
    withTempDir(async (dir) => {
      if (context.setupError !== undefined) throw context.setupError
      const { watched } = context as Offline
      const log = await EventLog.open(join(dir, ...path))
      let inspector: InspectorServer | undefined
      try {
        await body(watched, log, async () => (inspector = await serveInspector({ log })))
      } finally {
        await watched.page.setViewportSize({ width: 1480, height: 960 })
        await inspector?.close()
        await log.close()
      }
    }),
    30_000,
    name,
  )
}

const selectRun = async (page: Page, invocationId: string) => {
  await page.click(`button.run[data-invocation="${invocationId}"]`)
  await page.waitForSelector(`h1[data-invocation-title="${invocationId}"]`, WAIT)
  await page.waitForSelector('li.entry', WAIT)
}

const currentStates = (page: Page) => page.$$eval('g.state.current', (nodes) => nodes.map((n) => n.getAttribute('data-state')))

interface Offline {
  dir: string
  log: EventLog
  inspector: InspectorServer
  browser: Browser
  watched: Watched
}

const offline = suite<Partial<Offline> & { setupError?: unknown }>('inspector page')

// uvu drops an error thrown by a `before` hook, so it is kept and rethrown by every test.
offline.before(async (context) => {
  try {
    ensurePageBuilt()
    await mkdir(ARTIFACTS, { recursive: true })
    await withTimeout(
      async () => {
        context.dir = await mkdtemp(join(tmpdir(), 'factstate-'))
        const path = await writeScenarioLog(context.dir)
        context.log = await EventLog.open(path)
        // A run a crash left with a tool dispatched and never settled, closed by recovery.
        const crashed = new EventMaker(invocationOf('crashed', 'session-crashed'))
        const list = [facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1')]
        for (const event of crashed.many(list)) await context.log.append(event)
        await recoverInvocations(context.log)
        context.inspector = await serveInspector({ log: context.log })
        context.browser = await launchChromium()
        context.watched = await watchedPage(context.browser)
      },
      45_000,
      'setting up the recorded log, the inspector and Chromium',
    )
  } catch (error) {
    context.setupError = error
  }
})

offline.after(async (context) => {
  await context.browser?.close()
  await context.inspector?.close()
  await context.log?.close()
  if (context.dir) await rm(context.dir, { recursive: true, force: true })
})

/** A test on a freshly loaded inspector page, bounded, failing on any script error. */
function pageTest(name: string, body: (page: Page, context: Offline) => Promise<void>): void {
  offline(name, (context) =>
    withTimeout(async () => {
      if (context.setupError !== undefined) throw context.setupError
      const ready = context as Offline
      const page = await load(ready.watched, ready.inspector.url)
      await body(page, ready)
      assert.equal(ready.watched.errors, [], 'no script error')
    }, 20_000),
  )
}

pageTest('the statechart has every state of the machine, and every fact type on its transitions', async (page) => {
  const drawn = await page.$$eval('svg.statechart g.state', (nodes) => nodes.map((n) => n.getAttribute('data-state')))
  assert.equal(drawn.sort(), Object.keys(invocationMachine.root.states).sort())
  const labelled = new Set(await page.$$eval('svg.statechart tspan.ev', (nodes) => nodes.map((n) => n.textContent)))
  const handled = new Set(Object.values(invocationMachine.root.states).flatMap((node) => [...node.transitions.keys()]))
  for (const type of handled) assert.ok(labelled.has(type), `a transition is labelled ${type}`)
})

pageTest("the statechart's states read at 12 px or more at 1480 and 1280 px, and are reached by Tab and moved across with the arrows, each named with how many facts of the run passed through it", async (page, { inspector }) => {
  await selectRun(page, SCENARIO.first.invocationId)
  const smallest = () =>
    page.$$eval('svg.statechart g.state text', (texts) => Math.min(...texts.map((text) => Number.parseFloat(getComputedStyle(text).fontSize) * ((text as SVGTextElement).getScreenCTM()?.a ?? 0))))
  for (const [width, height] of [[1480, 960], [1280, 800]] as const) {
    await atViewport(page, width, height, async () => {
      const size = await smallest()
      assert.ok(size >= 12, `at ${width} px the states' names are drawn at ${size.toFixed(1)} px`)
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), `at ${width} px the page does not scroll sideways`)
    })
  }
  // From the selected run's header, Tab reaches the chart (past the header's links).
  await page.focus('#invocation')
  const inChart = () => page.evaluate(() => document.activeElement?.closest('#chart g.state')?.getAttribute('data-state') ?? null)
  let tabs = 0
  while (tabs < 8 && (await inChart()) === null) {
    await page.keyboard.press('Tab')
    tabs += 1
  }
  const first = await inChart()
  assert.ok(first !== null, `Tab reaches a state of the chart (${tabs} presses)`)
  const { entries } = (await (await fetch(`${inspector.url}api/invocation?id=${SCENARIO.first.invocationId}`)).json()) as InvocationDetail
  const passes = (state: string) => entries.filter((entry) => entry.rejected === null && (entry.stateAfter === state || entry.transitions.some((t) => t.target === state))).length
  const label = () => page.evaluate(() => document.activeElement?.getAttribute('aria-label') ?? '')
  const seen = new Set<string>()
  for (let n = 0; n < 12; n += 1) {
    const state = (await inChart()) as string
    seen.add(state)
    const count = passes(state)
    assert.match(await label(), new RegExp(`^${state}( \\(final\\))?: ${count} facts? of ${SCENARIO.first.runId} passed through it`), `the name of ${state}`)
    await page.keyboard.press(n % 2 === 0 ? 'ArrowRight' : 'ArrowDown')
  }
  assert.ok(seen.size >= 6, `the arrows moved across ${seen.size} states`)
  assert.ok(passes('held') > 0, 'the run passed through held')
  assert.is(await page.$('#timeline li.entry.selected'), null, 'the arrows on the chart travel through no fact')
  // The state after the latest fact says so; one state at a time is in the tab order.
  assert.match((await page.getAttribute('g.state[data-state="committed"]', 'aria-label')) ?? '', /the state after the selected fact$/)
  assert.is(await page.locator('g.state[tabindex="0"]').count(), 1)
})

pageTest('the log digest and its verify status are shown', async (page, { log }) => {
  const { digest } = await log.verify()
  assert.is(await page.getAttribute('#log-digest', 'title'), digest)
  assert.is(await page.textContent('#log-highwater'), String(log.head().highWater))
  await page.waitForSelector('#verify-status[data-status="ok"]', WAIT)
  await page.click('#verify-button')
  await page.waitForSelector('#verify-status[data-status="ok"]', WAIT)
})

/** Runs `body` with the page at `width` × `height`, then puts the desktop size back for the next test. */
async function atViewport(page: Page, width: number, height: number, body: () => Promise<void>): Promise<void> {
  await page.setViewportSize({ width, height })
  try {
    await body()
  } finally {
    await page.setViewportSize({ width: 1480, height: 960 })
  }
}

/**
 * The badges (`.pill`, `.badge`, a run's `.flag`, the list's `.count`) whose right edge passes the
 * right edge of their panel (a `.panel`, the sidebar, the top bar), described; those not shown left out.
 */
function badgesPastTheirPanel(page: Page): Promise<string[]> {
  return page.$$eval('.pill, .badge, .flag, .count', (nodes) =>
    nodes.flatMap((node) => {
      const panel = node.closest('.panel, .sidebar, .topbar')
      if (panel === null || node.getClientRects().length === 0) return []
      const [right, edge] = [node.getBoundingClientRect().right, panel.getBoundingClientRect().right]
      return right > edge + 0.5 ? [`${node.className} "${node.textContent}" to ${Math.round(right)}, its panel to ${Math.round(edge)}`] : []
    }),
  )
}

pageTest('on a phone (390 px) the run list stacks above the detail: nothing scrolls sideways and every header item shows', async (page) => {
  await atViewport(page, 390, 844, async () => {
    await selectRun(page, SCENARIO.first.invocationId)
    await page.waitForSelector('#verify-status[data-status="ok"]', WAIT)
    const box = (selector: string) => page.$eval(selector, (node) => node.getBoundingClientRect().toJSON() as { width: number; top: number; bottom: number; right: number })
    const header: { selector: string; width: number; right: number }[] = []
    for (const selector of ['#log-location', '#log-highwater', '#log-digest', '#verify-status', '#verify-button', '#live-status']) header.push({ selector, ...(await box(selector)) })
    const layout = {
      ...(await page.evaluate(() => ({ scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth }))),
      detail: (await box('#invocation')).width,
      timeline: (await box('.timeline-panel')).width,
      sidebarBottom: (await box('.sidebar')).bottom,
      detailTop: (await box('#invocation')).top,
      header,
    }
    assert.ok(layout.scrollWidth <= layout.innerWidth, `the page scrolls sideways: ${layout.scrollWidth} > ${layout.innerWidth}`)
    assert.ok(layout.detail >= 300, `the detail is ${layout.detail} px wide`)
    assert.ok(layout.timeline >= 300, `the timeline is ${layout.timeline} px wide`)
    assert.ok(layout.sidebarBottom <= layout.detailTop, 'the list is above the detail')
    for (const item of layout.header) {
      assert.ok(item.width > 0 && item.right <= layout.innerWidth, `${item.selector} shows within the page (width ${item.width}, right ${item.right})`)
    }
    await page.screenshot({ path: join(ARTIFACTS, 'inspector-phone.png'), fullPage: true })
  })
})

pageTest('on a phone the run list folds away behind a button (aria-expanded), and stays folded while runs are picked', async (page) => {
  await atViewport(page, 390, 844, async () => {
    await selectRun(page, SCENARIO.first.invocationId)
    const toggle = '#sessions-toggle'
    assert.ok(await page.isVisible(toggle), 'the button shows on a phone')
    assert.is(await page.getAttribute(toggle, 'aria-expanded'), 'true')
    assert.is(await page.getAttribute(toggle, 'aria-controls'), 'sidebar-body')
    await page.click(toggle)
    assert.is(await page.getAttribute(toggle, 'aria-expanded'), 'false')
    assert.not.ok(await page.isVisible('#sessions'), 'the list is folded away')
    assert.not.ok(await page.isVisible('#filter'))
    const height = await page.$eval('.sidebar', (node) => node.getBoundingClientRect().height)
    assert.ok(height < 80, `the folded list takes ${height} px`)
    // A run picked meanwhile (here through its successor link) leaves it folded.
    await page.click(`[data-link="successor"][data-target="${SCENARIO.successor.invocationId}"]`)
    await page.waitForSelector(`h1[data-invocation-title="${SCENARIO.successor.invocationId}"]`, WAIT)
    assert.is(await page.getAttribute(toggle, 'aria-expanded'), 'false')
    assert.not.ok(await page.isVisible('#sessions'))
    // Unfolded, a run picked in the list leaves it unfolded.
    await page.focus(toggle)
    await page.keyboard.press('Enter')
    assert.is(await page.getAttribute(toggle, 'aria-expanded'), 'true')
    await selectRun(page, SCENARIO.first.invocationId)
    assert.is(await page.getAttribute(toggle, 'aria-expanded'), 'true')
    assert.ok(await page.isVisible('#sessions'))
    await page.click(toggle)
  })
  // On a desktop the list is always shown, and the button is not.
  assert.not.ok(await page.isVisible('#sessions-toggle'))
  assert.ok(await page.isVisible('#sessions'), 'the list shows on a desktop even if folded on a phone')
})

const focused = (page: Page) =>
  page.evaluate(() => {
    const node = document.activeElement
    return { tag: node?.tagName ?? null, className: node?.className ?? null, invocation: node?.getAttribute('data-invocation') ?? null, seq: node?.closest('li.entry')?.getAttribute('data-seq') ?? null }
  })

pageTest('keyboard: Enter on a run keeps focus on it, a skip link reaches the facts, and the arrows move from the fact that has focus', async (page, { watched }) => {
  const run = `button.run[data-invocation="${SCENARIO.successor.invocationId}"]`
  await page.focus(run)
  await page.keyboard.press('Enter')
  await page.waitForSelector(`h1[data-invocation-title="${SCENARIO.successor.invocationId}"]`, WAIT)
  await page.waitForSelector(`${run}[aria-current="true"]`, WAIT)
  assert.equal((await focused(page)).invocation, SCENARIO.successor.invocationId, 'the chosen run keeps focus')

  // From the top of the page: a Tab or two to a skip link, then one more to the first fact.
  assert.equal(watched.errors, [], 'no script error')
  await page.reload()
  await page.waitForSelector(`h1[data-invocation-title="${SCENARIO.successor.invocationId}"]`, WAIT)
  await page.waitForSelector('li.entry', WAIT)
  let tabs = 0
  while (tabs < 3 && (await page.evaluate(() => document.activeElement?.getAttribute('data-skip'))) !== 'timeline') {
    await page.keyboard.press('Tab')
    tabs += 1
  }
  assert.is(await page.evaluate(() => document.activeElement?.getAttribute('data-skip')), 'timeline', `a skip link to the facts within ${tabs} Tabs`)
  await page.keyboard.press('Enter')
  assert.is(await page.evaluate(() => document.activeElement?.id), 'timeline')
  assert.ok(page.url().includes(`invocation=${SCENARIO.successor.invocationId}`), 'the address still holds the selection')
  await page.keyboard.press('Tab')
  const seqs = await page.$$eval('#timeline li.entry', (items) => items.map((li) => li.getAttribute('data-seq')))
  assert.ok(seqs.length >= 3, `${seqs.length} facts`)
  assert.equal(await focused(page), { tag: 'BUTTON', className: 'entry-row', invocation: null, seq: seqs[0] ?? null }, 'the first fact has focus')

  // No fact selected (following the latest): ↓ goes to the fact after the one that has focus.
  assert.is(await page.$('#timeline li.entry.selected'), null)
  await page.keyboard.press('ArrowDown')
  assert.is(await page.getAttribute('#timeline li.entry.selected', 'data-seq'), seqs[1] ?? null)
  assert.is((await focused(page)).seq, seqs[1] ?? null, 'focus follows')
  await page.keyboard.press('ArrowUp')
  assert.is(await page.getAttribute('#timeline li.entry.selected', 'data-seq'), seqs[0] ?? null)
})

/** The WCAG contrast ratio of two `rgb(…)` colours. */
function contrast(a: string, b: string): number {
  const luminance = (color: string) => {
    const [r, g, bl] = (color.match(/[\d.]+/g) ?? []).slice(0, 3).map((v) => {
      const c = Number(v) / 255
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4
    })
    return 0.2126 * (r ?? 0) + 0.7152 * (g ?? 0) + 0.0722 * (bl ?? 0)
  }
  const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x)
  return ((light ?? 0) + 0.05) / ((dark ?? 0) + 0.05)
}

pageTest('small grey text (field keys, times, seq ranges, id labels) has a contrast of at least 4.5:1', async (page) => {
  await selectRun(page, SCENARIO.first.invocationId)
  for (const selector of ['#timeline .summary .k', '#timeline .time', '.session-meta', '.ids dt', '.stat dt', '#session-count', '.turn-head']) {
    const { color, background } = await page.$eval(selector, (node) => {
      let back: Element | null = node
      let fill = 'rgba(0, 0, 0, 0)'
      while (back && (fill === 'rgba(0, 0, 0, 0)' || fill === 'transparent')) {
        fill = getComputedStyle(back).backgroundColor
        back = back.parentElement
      }
      return { color: getComputedStyle(node).color, background: fill }
    })
    const ratio = contrast(color, background)
    assert.ok(ratio >= 4.5, `${selector}: ${color} on ${background} is ${ratio.toFixed(2)}:1`)
  }
})

pageTest('a backup says where it was taken, and flags each session that has not run since', async (page, { dir, log, watched }) => {
  assert.ok(await page.$('#log-backup-item[hidden]'), 'the log itself is no backup: nothing is shown')
  const backupPath = join(dir, 'backup-for-page')
  const { events } = await EventLog.backup(logInternals(log).location, backupPath)
  const backup = await EventLog.open(backupPath)
  let served: InspectorServer | undefined
  try {
    // Put back in use: one session runs again, the others have not.
    const again = new EventMaker(invocationOf('after-restore', 'session-crashed'))
    for (const event of again.many([facts.opened(), facts.ended({ status: 'cancelled', source: 'test' })])) await backup.append(event)
    served = await serveInspector({ log: backup })
    const shown = await load(watched, served.url)
    await shown.waitForSelector('#log-backup-item:not([hidden])', WAIT)
    assert.match((await shown.textContent('#log-backup')) ?? '', new RegExp(`^taken at \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z · seq ${events}$`))
    assert.match((await shown.getAttribute('#log-backup', 'title')) ?? '', /allowRestored/)
    const sessions = await shown.$$eval('section.session', (nodes) => nodes.map((n) => [n.getAttribute('data-session'), n.querySelector('[data-flag="restored"]') !== null]))
    assert.ok(sessions.length >= 2, `${sessions.length} sessions shown`)
    assert.equal(
      sessions.filter(([, flagged]) => !flagged).map(([id]) => id),
      ['session-crashed'],
      'every session but the one that ran since the backup is flagged',
    )
  } finally {
    await served?.close()
    await backup.close()
  }
})

pageTest('an operation dispatched and never settled is flagged on the run, its session and its fact', async (page) => {
  const run = 'button.run[data-invocation="inv-crashed"]'
  assert.is(await page.getAttribute(run, 'data-status'), 'failed')
  assert.ok(await page.$(`${run} .flag`), 'the run is flagged in the sidebar')
  assert.ok(await page.$('section.session[data-session="session-crashed"] [data-flag="reconciliation"]'))
  await selectRun(page, 'inv-crashed')
  assert.ok(await page.$('#invocation [data-flag="uncertain"]'))
  const flagged = await page.$$eval('li.entry:has([data-flag="uncertain"])', (items) => items.map((li) => li.getAttribute('data-type')))
  assert.equal(flagged, ['tool.dispatched'])
})

pageTest('the timeline lists the facts in seq order; clicking hold.entered highlights held', async (page, { log }) => {
  await selectRun(page, SCENARIO.first.invocationId)
  const prefix = await log.prefix(1_000, 1 << 24)
  const own = prefix.events.filter((e) => e.event.invocation.invocationId === SCENARIO.first.invocationId)
  const rows = await page.$$eval('#timeline li.entry', (items) => items.map((li) => ({ seq: Number(li.getAttribute('data-seq')), type: li.getAttribute('data-type') })))
  assert.equal(
    rows,
    own.map((e) => ({ seq: e.seq, type: e.event.fact.type })),
  )
  assert.ok(rows.every((row, i) => i === 0 || row.seq > (rows[i - 1]?.seq ?? 0)), 'ascending seq')
  assert.equal(await currentStates(page), ['committed'], 'following the latest fact: the sealed state')

  const hold = page.locator('#timeline li.entry[data-type="hold.entered"]').first()
  await hold.locator('.entry-row').click()
  await page.waitForSelector('g.state.current[data-state="held"]', WAIT)
  assert.equal(await currentStates(page), ['held'])
  assert.ok(await page.$('g.edge.taken[data-edge="safePoint->held"]'), 'the transition taken is highlighted')
  assert.ok(await page.$('g.edge-label[data-edge="safePoint->held"] tspan.ev.taken[data-event="hold.entered"]'))
  assert.is(await page.textContent('[data-current-state]'), 'held')

  await page.locator('#timeline li.entry[data-type="hold.released"] .entry-row').click()
  await page.waitForSelector('g.state.current[data-state="safePoint"]', WAIT)
  assert.ok(await page.$('g.edge.taken[data-edge="held->safePoint"]'))
  await page.keyboard.press('Escape')
  await page.waitForSelector('g.state.current[data-state="committed"]', WAIT)

  await hold.locator('.entry-row').click()
  await page.waitForSelector('g.state.current[data-state="held"]', WAIT)
  await page.locator('li.entry[data-type="tool.settled"] details[data-payload="tool-output"] summary').last().click()
  await page.screenshot({ path: join(ARTIFACTS, 'inspector-time-travel.png') })
})

pageTest('the sealed run links to its successor, and the successor back', async (page) => {
  assert.is(await page.getAttribute(`button.run[data-invocation="${SCENARIO.first.invocationId}"]`, 'data-status'), 'paused')
  // Its successor has started (here, completed): the run reads as handed off, not as a pause.
  assert.is(await page.textContent(`button.run[data-invocation="${SCENARIO.first.invocationId}"] .pill`), 'handed off')
  assert.is(await page.getAttribute(`button.run[data-invocation="${SCENARIO.successor.invocationId}"]`, 'data-status'), 'completed')
  await selectRun(page, SCENARIO.first.invocationId)
  await page.click(`[data-link="successor"][data-target="${SCENARIO.successor.invocationId}"]`)
  await page.waitForSelector(`h1[data-invocation-title="${SCENARIO.successor.invocationId}"]`, WAIT)
  assert.is(await page.getAttribute('.invocation-title [data-status]', 'data-status'), 'completed')
  await page.click(`[data-link="source"][data-target="${SCENARIO.first.invocationId}"]`)
  await page.waitForSelector(`h1[data-invocation-title="${SCENARIO.first.invocationId}"]`, WAIT)
  assert.is(await page.getAttribute('.invocation-title [data-status]', 'data-status'), 'paused')
  assert.is(await page.textContent('.invocation-title [data-status]'), 'handed off')
  assert.is(await page.textContent('.invocation-title .state-name'), 'sealed by a handoff (handoffId committed) · its successor has started')
  assert.is(await page.$('#invocation [data-sealed]'), null, 'no waiting time once the successor started')
})

pageTest('a run that ended with a call never settled says its outcome is unknown, not that the tool is in flight', async (page) => {
  await selectRun(page, 'inv-crashed')
  assert.is(await page.textContent('[data-current-state]'), 'ended')
  assert.is(await page.textContent('[data-context="never-settled"]'), 'never settled, outcome unknown op1')
  assert.not.match((await page.textContent('#state-context')) ?? '', /tools in flight/)
})

offline('an unknown outcome a later run acknowledged reads as acknowledged by that run, still unknown', (context) =>
  onOwnLog(context, 'the acknowledged unknown test', async (watched, log, serve) => {
    const crashed = new EventMaker(invocationOf('crashed', 'session-ack'))
    await log.appendAll(crashed.many([facts.opened(), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]), facts.dispatched('op1')]))
    await recoverInvocations(log)
    const opened = facts.opened('go on')
    if (opened.type === 'invocation.opened' && opened.input.kind === 'message') opened.input.priorUnknown = [{ invocationId: 'inv-crashed', operationId: 'op1', callId: 'call-op1', name: 'echo' }]
    await log.appendAll(new EventMaker({ ...invocationOf('next', 'session-ack'), turnId: 'turn-next' }).many([opened, facts.requested('s1'), facts.completed('s1', [], 'ok'), facts.ended()]))
    const inspector = await serve()
    const page = await load(watched, `${inspector.url}#invocation=inv-crashed`)
    await page.waitForSelector('h1[data-invocation-title="inv-crashed"]', WAIT)
    assert.is(await page.textContent('button.run[data-invocation="inv-crashed"] [data-flag]'), '1 unknown · acknowledged')
    assert.is(await page.$('#invocation .note-warn'), null, 'no warning banner')
    const note = '#invocation [data-flag="acknowledged"]'
    assert.match((await page.textContent(note)) ?? '', /^Outcome unknown:op1— dispatched, never settled; it may or may not have taken effect\. Acknowledged by→ run-next\(allowPriorUnknown\)$/)
    // Its dispatch in the timeline says so too, without the warning.
    assert.is(await page.textContent('#timeline li[data-type="tool.dispatched"] [data-flag]'), 'never settled — outcome unknown, acknowledged by run-next')
    assert.is(await page.$('#timeline li[data-type="tool.dispatched"] .pill-warn'), null)
    await page.click(`${note} [data-link="acknowledged-by"][data-target="inv-next"]`)
    await page.waitForSelector('h1[data-invocation-title="inv-next"]', WAIT)
    assert.is(await page.$('section.session[data-session="session-ack"] [data-flag="reconciliation"]'), null)
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline('a sealed run awaiting its successor reads as paused and says since when it was sealed', (context) =>
  onOwnLog(context, 'the awaiting seal test', async (watched, log, serve) => {
    const make = new EventMaker(invocationOf('sealed', 'session-sealed'))
    const pause = {
      intent: { handoffId: 'review-7', hostEpoch: 'epoch', rootRunId: 'run-sealed', successorRunId: 'run-next', successorInvocationId: 'inv-next', claimId: 'claim-7' },
      remainingSteps: 1,
      execution: { model: 'test-model', providerOptions: {}, cwd: '/work', tools: { catalogDigest: `sha256:${'a'.repeat(64)}`, names: ['echo'] } },
    }
    const events = make.many([
      facts.opened(),
      facts.requested('s1'),
      facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: '{}' }]),
      facts.dispatched('op1'),
      facts.settled('op1'),
      facts.holdEntered('review-7'),
      facts.ended({ status: 'handoff_paused', pause } as unknown as InvocationOutcome),
    ])
    await log.appendAll(events)
    const sealedAt = events.at(-1)?.recordedAt ?? 0
    const inspector = await serve()
    const page = await load(watched, `${inspector.url}#invocation=inv-sealed`)
    await page.waitForSelector('h1[data-invocation-title="inv-sealed"]', WAIT)
    const run = 'button.run[data-invocation="inv-sealed"]'
    assert.is(await page.textContent(`${run} .pill`), 'paused')
    assert.is(await page.getAttribute(`${run} [data-sealed]`, 'data-sealed'), String(sealedAt))
    assert.is(await page.getAttribute(`${run} [data-sealed]`, 'title'), `sealed at ${new Date(sealedAt).toISOString()}: its successor has not started since`)
    assert.is(await page.getAttribute('#invocation [data-sealed]', 'data-sealed'), String(sealedAt))
    assert.match((await page.textContent('#invocation [data-sealed]')) ?? '', /^has not started yet \(the turn waits for it\) · sealed \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, .+ ago$/)
    assert.is(await page.textContent('.invocation-title .state-name'), 'sealed by a handoff (handoffId review-7) · awaiting its successor')
    assert.equal(watched.errors, [], 'no script error')
  }),
)

pageTest('tool output and model text from the log render as text: the XSS payload runs nothing', async (page, { watched }) => {
  await selectRun(page, SCENARIO.first.invocationId)
  const output = page.locator('li.entry[data-type="tool.settled"] details[data-payload="tool-output"] pre', { hasText: XSS_PAYLOAD })
  assert.is(await output.count(), 1)
  assert.is(await output.textContent(), XSS_PAYLOAD)
  await page.locator('li.entry[data-type="tool.settled"] details[data-payload="tool-output"] summary').last().click()
  assert.ok(await output.isVisible())
  await selectRun(page, SCENARIO.successor.invocationId)
  const text = page.locator('details[data-payload="model-text"] pre')
  assert.is(await text.textContent(), `done ${XSS_PAYLOAD}`)
  await page.locator('details[data-payload="model-text"] summary').click()
  assert.ok(await text.isVisible())
  // The page draws no images at all: one would only come from the payload.
  assert.is(await page.locator('img').count(), 0)
  assert.equal(watched.dialogs, [])
})

offline('a snapshot of the log is served as one: marked as not updating, at the log\'s location, with its facts', (context) =>
  withTimeout(async () => {
    if (context.setupError !== undefined) throw context.setupError
    const { watched, log } = context as Offline
    const location = logInternals(log).location
    // The log stays open here: the snapshot is what a second process gets.
    const snapshot = await EventLog.openSnapshot(location)
    let inspector: InspectorServer | undefined
    try {
      inspector = await serveInspector({ log: snapshot })
      const page = await load(watched, inspector.url)
      await page.waitForFunction(() => document.querySelector('#live-label')?.textContent === 'snapshot · not updating', undefined, WAIT)
      assert.is(await page.textContent('#log-location'), location)
      assert.is(await page.textContent('#log-highwater'), String(log.head().highWater))
      assert.is(await page.getAttribute('#log-digest', 'title'), log.head().digest)
      await selectRun(page, SCENARIO.first.invocationId)
      assert.ok((await page.locator('li.entry').count()) > 0, 'its facts are listed')
      assert.equal(watched.errors, [], 'no script error')
    } finally {
      await inspector?.close()
      await snapshot.close()
    }
  }, 20_000),
)

offline('a refreshed snapshot: the page says so, and a fact the log\'s writer appends appears without a reload; the copies the inspector took are removed at its close', (context) =>
  withTimeout(
    withTempDir(async (dir) => {
      if (context.setupError !== undefined) throw context.setupError
      const { watched } = context as Offline
      const held = await EventLog.open(join(dir, 'log'))
      const copies = join(dir, 'copies')
      await mkdir(copies)
      let inspector: InspectorServer | undefined
      let snapshot: EventLog | undefined
      try {
        await held.append(new EventMaker(invocationOf('first', 'session-refresh')).next(facts.opened()))
        snapshot = await EventLog.openSnapshot(join(dir, 'log'))
        inspector = await serveInspector({ log: snapshot, refresh: { everyMs: 200, directory: copies } })
        const page = await load(watched, inspector.url)
        await page.waitForFunction(() => document.querySelector('#live-label')?.textContent === 'snapshot · refreshed every 0.2 s', undefined, WAIT)
        assert.is(await page.textContent('#log-highwater'), '1')
        await held.append(new EventMaker(invocationOf('second', 'session-refresh')).next(facts.opened()))
        await page.waitForFunction(() => document.querySelector('#log-highwater')?.textContent === '2', undefined, WAIT)
        await page.waitForFunction(() => document.querySelector('[data-invocation="inv-second"]') !== null, undefined, WAIT)
        assert.ok((await readdir(copies)).length > 0, 'the refreshed snapshot is in the directory given')
        assert.equal(watched.errors, [], 'no script error')
      } finally {
        await inspector?.close()
        await snapshot?.close()
        await held.close()
      }
      assert.equal(await readdir(copies), [], 'the inspector closed the snapshots it took')
    }),
    30_000,
  ),
)

offline('text from the log shows its reordering and hidden characters escaped; an unsettled call reads as in flight while a process has the log, unknown after a crash; the filter finds a session the list left out', (context) =>
  withTimeout(
    withTempDir(async (dir) => {
      if (context.setupError !== undefined) throw context.setupError
      const { watched } = context as Offline
      const held = await EventLog.open(join(dir, 'log'), { durability: 'os' })
      let snapshot: EventLog | undefined
      let inspector: InspectorServer | undefined
      try {
        // U+202E shows `evil` as `live`; U+0007 and U+2028 would not show at all.
        const tricky = 'pay \u202eevil\u202c done \u0007\u2028'
        const make = new EventMaker(invocationOf('bidi', 'zeta-old-session'))
        await held.appendAll(
          make.many([facts.opened(tricky), facts.requested('s1'), facts.completed('s1', [{ callId: 'call-op1', name: 'echo', arguments: JSON.stringify({ note: tricky }) }]), facts.dispatched('op1', { note: tricky })]),
        )
        const busy: RuntimeEvent[] = []
        for (let n = 0; n < 300; n += 1) busy.push(...new EventMaker(invocationOf(`busy-${n}`, `busy-${n}`)).many([facts.opened(), facts.requested('s1'), facts.completed('s1', [], 'hi'), facts.ended()]))
        await held.appendAll(busy)
        const escaped = 'pay \\u202eevil\\u202c done \\u0007\\u2028'

        // A snapshot while this process has the log open: the open run may be running there.
        snapshot = await EventLog.openSnapshot(join(dir, 'log'))
        inspector = await serveInspector({ log: snapshot })
        let page = await load(watched, `${inspector.url}#invocation=inv-bidi`)
        await page.waitForSelector('h1[data-invocation-title="inv-bidi"]', WAIT)
        await page.waitForSelector('li.entry[data-type="tool.dispatched"]', WAIT)
        assert.is(await page.textContent('li.entry[data-type="tool.dispatched"] [data-flag]'), 'not settled yet — running in the process that has the log open, or left by a crash')
        assert.is(await page.getAttribute('li.entry[data-type="tool.dispatched"] [data-flag]', 'data-flag'), 'in-flight')
        assert.is(await page.getAttribute('#invocation [data-flag]', 'data-flag'), 'in-flight')
        // The session needs someone (counted below): its badge says why, and that a snapshot cannot tell more.
        assert.is(await page.textContent('section.session[data-session="zeta-old-session"] [data-flag="open"]'), 'open: running, or crashed?')
        const texts = await page.$$eval('details pre', (nodes) => nodes.map((node) => node.textContent ?? ''))
        assert.ok(texts.length >= 4, `${texts.length} payloads`)
        assert.ok(texts.every((text) => !/[\u202a-\u202e\u2066-\u2069\u0007\u2028]/.test(text)), 'no payload shows a raw control')
        assert.ok(texts.some((text) => text === escaped), 'the message reads escaped')
        assert.ok(texts.filter((text) => text.includes(escaped.slice(0, 20))).length >= 4, 'so do the arguments, the input and the raw fact')

        // The list holds the 300 most recent sessions (none needs someone but the open one, first).
        const count = await page.textContent('#session-count')
        assert.is(count, '301 sessions · 300 listed · 300 runs · 1 needs attention')
        assert.is(await page.getAttribute('section.session >> nth=0', 'data-session'), 'zeta-old-session')
        assert.ok(await page.$('button.run[data-invocation="inv-busy-299"]'))
        assert.is(await page.$('button.run[data-invocation="inv-busy-0"]'), null, 'the oldest answered session is left out')
        await page.fill('#filter', 'busy-0')
        await page.waitForSelector('button.run[data-invocation="inv-busy-0"]', WAIT)
        assert.equal(await page.$$eval('button.run', (nodes) => nodes.map((node) => node.getAttribute('data-invocation'))), ['inv-busy-0'])
        await inspector.close()
        inspector = undefined

        // The log itself, with no process driving the run: a crash left it.
        inspector = await serveInspector({ log: held })
        page = await load(watched, `${inspector.url}#invocation=inv-bidi`)
        await page.waitForSelector('li.entry[data-type="tool.dispatched"] [data-flag="uncertain"]', WAIT)
        assert.is(await page.textContent('li.entry[data-type="tool.dispatched"] [data-flag]'), '⚠ never settled — a crash left it; recovery will record its outcome unknown')
        assert.is(await page.textContent('section.session[data-session="zeta-old-session"] [data-flag="open-crashed"]'), '⚠ open: left by a crash')
        // That flag is the longest: with the chart beside the facts (1500 px) it wraps within the timeline, as every badge keeps within its panel.
        for (const [width, height] of [[1500, 960], [1280, 800], [390, 844]] as const) {
          await atViewport(page, width, height, async () => {
            if (width === 1500) {
              const [chart, timeline] = [await page.$eval('.chart-panel', (node) => node.getBoundingClientRect().right), await page.$eval('.timeline-panel', (node) => node.getBoundingClientRect().left)]
              assert.ok(chart < timeline, `at 1500 px the chart (to ${chart}) is beside the facts (from ${timeline})`)
            }
            assert.equal(await badgesPastTheirPanel(page), [], `at ${width} px no badge runs past its panel`)
          })
        }
        assert.is(await page.getAttribute('li.entry[data-type="tool.dispatched"] [data-flag]', 'title'), '⚠ never settled — a crash left it; recovery will record its outcome unknown')
        // The count is cut in the list's one-line header: its whole text is its title.
        const counted = await page.$eval('#session-count', (node) => ({ text: node.textContent, title: node.getAttribute('title'), cut: node.scrollWidth > node.clientWidth }))
        assert.ok(counted.cut, 'the count is cut')
        assert.is(counted.title, counted.text)
        assert.equal(watched.errors, [], 'no script error')
      } finally {
        await inspector?.close()
        await snapshot?.close()
        await held.close()
      }
    }),
    30_000,
    'the escaped text and unsettled call test',
  ),
)

offline('verify: once newer facts land the badge says how far it checked, neutral rather than all-good, and at 1280 or 1024 px nothing in the top bar overlaps or is cut', (context) =>
  onOwnLog(context, 'the partial verify test', async (watched, log, serve) => {
    await log.appendAll(completeInvocation('checked', 'session-checked'))
    const inspector = await serve()
    await watched.page.setViewportSize({ width: 1280, height: 800 })
    const page = await load(watched, inspector.url)
    await page.waitForSelector('#verify-status[data-status="ok"]', WAIT)
    const checked = log.head().highWater
    assert.ok(await page.$('#verify-status.badge-ok:not([data-partial])'))
    for (let n = 0; n < 6; n += 1) await log.appendAll(completeInvocation(`later-${n}`, `session-later-${n}`))
    const now = log.head().highWater
    await page.waitForFunction((expected) => document.querySelector('#log-highwater')?.textContent === String(expected), now, WAIT)
    await page.waitForSelector('#verify-status[data-partial="true"]', WAIT)
    assert.is(await page.textContent('#verify-status'), `verified through #${checked} · ${now - checked} newer`)
    assert.not.ok(await page.$('#verify-status.badge-ok'), 'a partial check does not read as all-good')
    const box = (selector: string) => page.$eval(selector, (node) => node.getBoundingClientRect().toJSON() as { left: number; right: number; width: number })
    for (const width of [1280, 1024, 800]) {
      await page.setViewportSize({ width, height: 800 })
      const [button, live, meta, badge] = [await box('#verify-button'), await box('#live-status'), await box('.log-meta'), await box('#verify-status')]
      assert.ok(button.width > 30, `at ${width} px the Verify button is ${button.width} px wide`)
      assert.ok(button.right <= meta.right && button.right <= live.left, `at ${width} px the Verify button (to ${button.right}) is neither cut by the log's items (to ${meta.right}) nor under the live status (from ${live.left})`)
      assert.ok(badge.width > 60, `at ${width} px the badge is ${badge.width} px wide`)
      // What does not fit wraps onto another line of the bar: the digest is never cut, and every item is on the page.
      const cut = await page.$$eval('.log-meta .meta-item:not([hidden]):not(.meta-location)', (items) =>
        items.flatMap((item) => {
          const value = item.querySelector('dd') as HTMLElement
          const { right } = item.getBoundingClientRect()
          return value.scrollWidth > value.clientWidth + 1 || right > window.innerWidth ? [`${item.querySelector('dt')?.textContent}: ${value.scrollWidth} > ${value.clientWidth}, right ${right}`] : []
        }),
      )
      assert.equal(cut, [], `at ${width} px nothing in the bar is cut`)
      await page.screenshot({ path: join(ARTIFACTS, `inspector-verify-partial-${width}.png`) })
    }
    await page.click('#verify-button')
    await page.waitForSelector('#verify-status.badge-ok:not([data-partial])', WAIT)
    assert.equal(watched.errors, [], 'no script error')
  }, ['an-application-with-a-rather-long-directory-name', 'state', 'log']),
)

offline("Latest (or End) goes to the selected run's latest fact, by keyboard, and keeps new facts of the run in view as they land until a fact is chosen", (context) =>
  onOwnLog(context, 'the latest fact test', async (watched, log, serve) => {
    const make = new EventMaker(invocationOf('long', 'session-long'))
    const ops = Array.from({ length: 16 }, (_, n) => `op${n}`)
    const calls = ops.map((op) => ({ callId: `call-${op}`, name: 'echo', arguments: '{}' }))
    await log.appendAll(make.many([facts.opened(), facts.requested('s1'), facts.completed('s1', calls), ...ops.flatMap((op) => [facts.dispatched(op), facts.settled(op)])]))
    const inspector = await serve()
    await watched.page.setViewportSize({ width: 1280, height: 700 })
    const page = await load(watched, `${inspector.url}#invocation=inv-long`)
    await page.waitForSelector('li.entry', WAIT)
    const lastSeq = () => page.$eval('#timeline li.entry:last-child', (li) => li.getAttribute('data-seq'))
    const inView = (seq: string | null) =>
      page.$eval(`#timeline li.entry[data-seq="${seq}"]`, (li) => {
        const { top, bottom } = li.getBoundingClientRect()
        return top >= 0 && bottom <= window.innerHeight
      })
    const focusedSeq = () => page.evaluate(() => document.activeElement?.closest('li.entry')?.getAttribute('data-seq') ?? null)
    await page.locator('#timeline li.entry .entry-row').first().click()
    assert.not.ok(await inView(await lastSeq()), 'the latest fact is out of view at first')
    const latest = '#latest-button'
    assert.is(await page.getAttribute(latest, 'aria-pressed'), 'false')
    assert.is(await page.$eval(latest, (node) => node.tagName === 'BUTTON' && node.tabIndex >= 0), true, 'a button in the tab order')
    // Enter on it goes to the latest fact.
    await page.focus(latest)
    await page.keyboard.press('Enter')
    const last = await lastSeq()
    assert.is(await page.$('#timeline li.entry.selected'), null, 'no fact chosen: the latest is followed')
    assert.ok(await inView(last), 'the latest fact is in view')
    assert.is(await focusedSeq(), last, 'and has focus')
    assert.is(await page.getAttribute(latest, 'aria-pressed'), 'true')
    assert.match((await page.textContent('#chart-caption')) ?? '', new RegExp(`^now · after seq ${last} `))
    // New facts of the run land: the new latest is scrolled into view and takes focus.
    await log.appendAll(make.many([facts.requested('s2'), facts.completed('s2', [{ callId: 'call-op-late', name: 'echo', arguments: '{}' }]), facts.dispatched('op-late')]))
    const landed = String(log.head().highWater)
    await page.waitForSelector(`#timeline li.entry[data-seq="${landed}"]`, WAIT)
    await page.waitForFunction((seq) => document.activeElement?.closest('li.entry')?.getAttribute('data-seq') === seq, landed, WAIT)
    assert.ok(await inView(landed), 'the fact that landed is in view')
    // A fact chosen stops the following; End starts it again.
    await page.locator('#timeline li.entry .entry-row').nth(2).click()
    assert.is(await page.getAttribute(latest, 'aria-pressed'), 'false')
    await page.keyboard.press('End')
    assert.is(await focusedSeq(), landed)
    assert.is(await page.getAttribute(latest, 'aria-pressed'), 'true')
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline('the run filter matches tool names, status and outcome words and session ids too, case-insensitive, says how many runs match, and what no match means', (context) =>
  onOwnLog(context, 'the run filter test', async (watched, log, serve) => {
    const refund: Fact = { type: 'tool.dispatched', operationId: 'op1', callId: 'call-op1', name: 'issueRefund', input: {} }
    await log.appendAll(
      new EventMaker(invocationOf('payout', 'desk-7')).many([
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', [{ callId: 'call-op1', name: 'issueRefund', arguments: '{}' }]),
        refund,
        facts.settled('op1'),
        facts.requested('s2'),
        facts.completed('s2', [], 'done'),
        facts.ended(),
      ]),
    )
    await log.appendAll(new EventMaker(invocationOf('looped', 'desk-8')).many([facts.opened(), facts.requested('s1'), facts.ended({ status: 'failed', class: 'max_steps', message: 'out of steps' })]))
    await log.appendAll(completeInvocation('plain', 'counter-1'))
    const inspector = await serve()
    const page = await load(watched, inspector.url)
    await page.waitForSelector('button.run', WAIT)
    const listed = () => page.$$eval('button.run', (nodes) => nodes.map((node) => node.getAttribute('data-invocation')))
    const filterFor = async (text: string, expected: string[]) => {
      await page.fill('#filter', text)
      // The server is asked after a pause: the list then holds what it answered.
      await page.waitForResponse((response) => response.url().includes('/api/overview?match='), WAIT)
      await page.waitForFunction((count) => document.querySelectorAll('button.run').length === count, expected.length, WAIT)
      assert.equal(await listed(), expected, `the runs "${text}" matches`)
    }
    await filterFor('REFUND', ['inv-payout'])
    assert.is(await page.textContent('#filter-result'), '1 run matches “REFUND”')
    assert.is(await page.getAttribute('#filter-result', 'role'), 'status')
    await filterFor('max_steps', ['inv-looped'])
    await filterFor('Failed', ['inv-looped'])
    await filterFor('completed', ['inv-plain', 'inv-payout'])
    assert.is(await page.textContent('#filter-result'), '2 runs match “completed”')
    await filterFor('desk', ['inv-looped', 'inv-payout'])
    await filterFor('echo', ['inv-plain'])
    await filterFor('nothing-like-it', [])
    assert.is(await page.textContent('#filter-result'), 'No run matches “nothing-like-it”')
    assert.match((await page.textContent('#sessions [data-empty="no-match"]')) ?? '', /^No run matches “nothing-like-it” in its session, turn, run or invocation id, its tools' names, its status .* or its session's flag .*in any session of the log/)
    // The server finds by tool name too: a session the page does not hold is found.
    const overview = (await (await fetch(`${inspector.url}api/overview?match=issuerefund`)).json()) as { sessions: { sessionId: string }[] }
    assert.equal(overview.sessions.map((session) => session.sessionId), ['desk-7'])
    await page.fill('#filter', '')
    await page.waitForFunction(() => document.querySelectorAll('button.run').length === 3, undefined, WAIT)
    assert.ok(await page.$('#filter-result[hidden]'), 'no count without a filter')
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline('at 1280 px the sidebar header keeps to one line, a long count cut rather than wrapped and whole in its title', (context) =>
  onOwnLog(context, 'the sidebar header test', async (watched, log, serve) => {
    for (let n = 0; n < 12; n += 1) await log.appendAll(completeInvocation(`head-${n}`, `session-head-${n}`))
    // Two runs left open: the count says they need attention, its longest form.
    for (const name of ['open-a', 'open-b']) await log.appendAll(new EventMaker(invocationOf(name)).many([facts.opened(), facts.requested('s1')]))
    const inspector = await serve()
    await watched.page.setViewportSize({ width: 1280, height: 800 })
    const page = await load(watched, inspector.url)
    await page.waitForSelector('button.run', WAIT)
    const head = await page.$eval('.sidebar-head', (node) => {
      const count = node.querySelector('#session-count') as HTMLElement
      const title = node.querySelector('h2') as HTMLElement
      const line = Number.parseFloat(getComputedStyle(count).lineHeight) || 18
      return { text: count.textContent, title: count.title, lines: count.getClientRects().length, height: count.getBoundingClientRect().height, line, sameLine: Math.abs(title.getBoundingClientRect().bottom - count.getBoundingClientRect().bottom) < 4 }
    })
    assert.is(head.text, '14 sessions · 14 runs · 2 need attention')
    assert.ok(head.lines === 1 && head.height < head.line * 1.5, `the count takes ${head.height} px (${head.lines} boxes) for a line of ${head.line}`)
    assert.ok(head.sameLine, 'the count is on the heading\'s line')
    assert.is(head.title, head.text, 'the whole count is its title')
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline('tool rows: a settled call names its tool and reads failed apart from succeeded, status first; nothing cut is lost (the row\'s title); the run says how many calls failed or were rejected', (context) =>
  onOwnLog(context, 'the tool rows test', async (watched, log, serve) => {
    const failure = `the refund service answered 502 Bad Gateway after ${'a long wait '.repeat(8)}and gave up`
    const denial = `refunds over 500 EUR need a second approver from finance ${'(policy FIN-7) '.repeat(4)}`
    const long = 'op-with-a-long-operation-id-that-pushes-the-row/step-1/0'
    const calls = [long, 'op2', 'op3'].map((op) => ({ callId: `call-${op}`, name: 'echo', arguments: '{}' }))
    const make = new EventMaker({ ...invocationOf('tools', 'session-tools'), invocationId: `inv-tools-${'with-a-long-id-'.repeat(3)}end` })
    await log.appendAll(
      make.many([
        facts.opened(),
        facts.requested('s1'),
        facts.completed('s1', calls),
        facts.dispatched(long),
        facts.dispatched('op2'),
        facts.denied('op3', 'refund', 'dana@support', denial),
        facts.settled(long),
        facts.failed('op2', failure),
        facts.requested('s2'),
        facts.completed('s2', [], 'sorry'),
        facts.ended(),
      ]),
    )
    const inspector = await serve()
    await watched.page.setViewportSize({ width: 1280, height: 800 })
    const page = await load(watched, `${inspector.url}#invocation=${make.invocation.invocationId}`)
    await page.waitForSelector('li.entry[data-type="tool.settled"]', WAIT)
    const rows = await page.$$eval('li.entry[data-type="tool.settled"], li.entry[data-type="tool.rejected"]', (items) =>
      items.map((li) => {
        const info = li.querySelector('.info')?.getBoundingClientRect()
        const bad = li.querySelector('.v-bad')?.getBoundingClientRect()
        return {
          type: li.getAttribute('data-type'),
          outcome: li.getAttribute('data-outcome'),
          values: [...li.querySelectorAll('.summary .v')].map((node) => node.textContent),
          title: li.querySelector('.info')?.getAttribute('title') ?? '',
          statusShown: bad === undefined || info === undefined ? null : bad.right <= info.right,
        }
      }),
    )
    const [rejected, succeeded, failed] = rows
    assert.equal(succeeded?.values.slice(0, 2), ['echo', 'succeeded'], 'the tool, then its status')
    assert.is(succeeded?.outcome, null)
    assert.equal(failed?.values.slice(0, 2), ['echo', 'failed'])
    assert.is(failed?.outcome, 'bad', 'a failed call reads apart')
    assert.is(failed?.statusShown, true, 'its status is not cut')
    assert.ok(failed?.title.includes(failure), 'the whole message is its title')
    assert.equal(rejected?.values.slice(0, 3), ['refund', 'denied', 'dana@support'])
    assert.is(rejected?.outcome, 'bad')
    assert.is(rejected?.statusShown, true)
    assert.ok(rejected?.title.includes(denial), 'the whole reason is its title')
    const run = `button.run[data-invocation="${make.invocation.invocationId}"]`
    assert.is(await page.textContent(`${run} [data-flag="failed-calls"]`), '1 failed call')
    assert.is(await page.textContent(`${run} [data-flag="rejected-calls"]`), '1 rejected call')
    await page.screenshot({ path: join(ARTIFACTS, 'inspector-tool-rows.png') })
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline('live: over a running engine, a new fact appears without a reload', (context) =>
  withTimeout(
    withTempDir(async (dir) => {
      if (context.setupError !== undefined) throw context.setupError
      const { watched } = context as Offline
      const server = await scriptedModelServer([
        answer.toolCalls([{ name: 'echo', arguments: { value: 7 } }], { hold: true }),
        answer.text('all done', { hold: true }),
        answer.toolCalls([{ name: 'echo', arguments: { value: 8 } }], { hold: true }),
        answer.text('later done', { hold: true }),
      ])
      const log = await EventLog.open(join(dir, 'log'))
      const engine = new Engine({ log, model: new ModelExecutor({ timeoutMs: 5_000 }) })
      let inspector: InspectorServer | undefined
      try {
        inspector = await serveInspector({ log, engine })
        const page = await load(watched, inspector.url)
        await page.waitForSelector('#live-status.live-on', WAIT)
        await page.evaluate(() => {
          ;(window as unknown as { stillHere: boolean }).stillHere = true
        })
        assert.is(await page.locator('button.run').count(), 0)

        const running = await engine.start(scenarioInput(server.baseUrl, 'live', 'session-live'))
        await server.seen(0)
        await page.waitForSelector('button.run[data-invocation="invocation-live"][data-status="running"]', WAIT)
        await selectRun(page, 'invocation-live')
        await page.waitForSelector('li.entry[data-type="model.requested"]', WAIT)
        assert.equal(await currentStates(page), ['awaitingModel'])

        server.release(0)
        await page.waitForSelector('li.entry[data-type="tool.settled"]', WAIT)
        await server.seen(1)
        server.release(1)
        assert.equal(await running.wait(), { status: 'completed' })
        await page.waitForSelector('li.entry[data-type="invocation.ended"]', WAIT)
        await page.waitForSelector('button.run[data-invocation="invocation-live"][data-status="completed"]', WAIT)
        await page.waitForSelector('g.state.current[data-state="ended"]', WAIT)
        const seqs = await page.$$eval('#timeline li.entry', (items) => items.map((li) => Number(li.getAttribute('data-seq'))))
        assert.equal(seqs, Array.from({ length: log.head().highWater }, (_, i) => i + 1))
        assert.ok(await page.evaluate(() => (window as unknown as { stillHere?: boolean }).stillHere === true), 'the page was not reloaded')
        assert.is(await page.textContent('#log-highwater'), String(log.head().highWater))
        await page.screenshot({ path: join(ARTIFACTS, 'inspector-live.png') })
        // The inspector restarts on its port while facts land: the page reconnects and catches up
        // without waiting for another fact.
        const port = new URL(inspector.url).port
        await inspector.close()
        inspector = undefined
        const later = await engine.start(scenarioInput(server.baseUrl, 'later', 'session-live-2'))
        await server.seen(2)
        const landed = log.head().highWater
        inspector = await serveInspector({ log, engine, port: Number(port) })
        await page.waitForFunction((expected) => document.querySelector('#log-highwater')?.textContent === String(expected), landed, WAIT)
        await page.waitForSelector('button.run[data-invocation="invocation-later"][data-status="running"]', WAIT)
        server.release(2)
        await server.seen(3)
        server.release(3)
        assert.equal(await later.wait(), { status: 'completed' })
        assert.equal(watched.errors, [])
      } finally {
        await inspector?.close()
        // Closing the model server first ends a request still held by a failed test, so drain returns.
        await server.close()
        await engine.drain()
        await log.close()
      }
    }),
    30_000,
    'the live inspector test',
  ),
)

offline('with a token, the link opens the page (the token leaves the address, the page, a reload and its live stream work, and no cookie carries it to other ports of 127.0.0.1) and a browser without it is refused', (context) =>
  withTimeout(async () => {
    if (context.setupError !== undefined) throw context.setupError
    const { log, watched, browser } = context as Offline
    const inspector = await serveInspector({ log, token: 'page-token-0123456789abcdef' })
    // Another program of the machine, listening on another port of 127.0.0.1: what the browser sends it.
    const received: string[] = []
    const other = createServer((req, res) => {
      received.push(`${req.url ?? ''} ${req.headers.cookie ?? ''}`)
      res.writeHead(200, { 'content-type': 'text/html' }).end('<script>fetch("/own")</script>')
    })
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve))
    try {
      const page = await load(watched, inspector.link)
      const address = page.url()
      assert.ok(address.startsWith(inspector.url) && !address.includes('token'), `the address no longer holds the token: ${address}`)
      await page.waitForSelector('#live-status.live-on', WAIT)
      await page.waitForSelector('button.run[data-invocation="inv-crashed"]', WAIT)
      await selectRun(page, 'inv-crashed')
      await load(watched, address)
      await page.waitForSelector('#live-status.live-on', WAIT)
      await page.waitForSelector('button.run[data-invocation="inv-crashed"]', WAIT)
      assert.equal(watched.errors, [], 'no script error')
      assert.equal(await page.context().cookies(), [], 'no cookie')
      await page.goto(`http://127.0.0.1:${(other.address() as AddressInfo).port}/`)
      await page.waitForFunction(() => performance.getEntriesByType('resource').length > 0, undefined, WAIT)
      assert.ok(received.length >= 2, 'the other port was asked twice')
      assert.not.ok(received.some((line) => line.includes('page-token')), `the other port received the token: ${received.join(' | ')}`)
      const stranger = await browser.newContext()
      try {
        const refused = await stranger.request.get(`${inspector.url}api/overview`)
        assert.is(refused.status(), 401)
        const strange = await stranger.newPage()
        await strange.goto(inspector.url)
        await strange.waitForSelector('#boot:not([hidden])', WAIT)
        assert.match((await strange.textContent('#boot')) ?? '', /could not load: the inspector has a token/)
      } finally {
        await stranger.close()
      }
    } finally {
      other.close()
      await inspector.close()
    }
  }, 20_000),
)

offline("an invocation's token totals are shown with its ids, partial ones as such, and each answer's counts and response id on its fact", (context) =>
  onOwnLog(context, 'the token usage test', async (watched, log, serve) => {
    const asked: Fact = {
      type: 'model.completed',
      stepId: 's1',
      output: {
        toolCalls: [{ callId: 'call-op1', name: 'echo', arguments: '{}' }],
        finishReason: 'tool_calls',
        usage: { inputTokens: 1000, outputTokens: 40, cachedInputTokens: 800, reasoningTokens: 15 },
        responseId: 'chatcmpl-abc123',
      },
    }
    const priced = new EventMaker(invocationOf('priced', 'session-priced'))
    await log.appendAll(
      priced.many([facts.opened(), facts.requested('s1'), asked, facts.dispatched('op1'), facts.settled('op1'), facts.requested('s2'), facts.completed('s2', [], 'done', { inputTokens: 1100, outputTokens: 16 }), facts.ended()]),
    )
    // Its second answer reported nothing (a stream not asked for usage).
    await log.appendAll(completeInvocation('partial', 'session-partial', [{ inputTokens: 300, outputTokens: 20 }]))
    await log.appendAll(new EventMaker(invocationOf('quiet', 'session-quiet')).many([facts.opened(), facts.requested('s1')]))
    const inspector = await serve()
    const page = await load(watched, `${inspector.url}#invocation=inv-priced`)
    await page.waitForSelector('h1[data-invocation-title="inv-priced"]', WAIT)
    await page.waitForSelector('li.entry[data-type="model.completed"]', WAIT)
    const usageStat = '#invocation .stat[data-usage]'
    assert.is(await page.textContent(`${usageStat} dt`), 'usage')
    assert.is(await page.textContent(`${usageStat} dd`), '2 answers, tokens 2100 in (800 cached), 56 out (15 reasoning)')
    assert.is(await page.getAttribute(usageStat, 'data-usage'), 'reported')
    assert.is(await page.textContent(`${usageStat} dd`), usageTotalsText(usageOf(await log.invocationEvents('inv-priced'))), 'as the CLI says it')
    // The answers' rows: their counts before the text, and the counts and response id in a payload.
    const rows = await page.$$eval('li.entry[data-type="model.completed"] .summary', (nodes) => nodes.map((node) => node.textContent))
    assert.equal(rows, ['s1finishtool_callstokens1000 in (800 cached), 40 out (15 reasoning)callsecho', 's2finishstoptokens1100 in, 16 outtextdone'])
    const payloads = await page.$$eval('li.entry[data-type="model.completed"] details[data-payload="usage"]', (nodes) =>
      nodes.map((node) => [node.querySelector('summary')?.textContent, node.querySelector('pre')?.textContent]),
    )
    assert.equal(payloads, [
      ['tokens and response id', 'tokens: 1000 in (800 cached), 40 out (15 reasoning)\nresponse id: chatcmpl-abc123'],
      ['tokens', 'tokens: 1100 in, 16 out'],
    ])
    await page.locator('li.entry[data-type="model.completed"] details[data-payload="usage"] summary').first().click()
    await page.screenshot({ path: join(ARTIFACTS, 'inspector-usage.png') })

    await page.click('button.run[data-invocation="inv-partial"]')
    await page.waitForSelector('h1[data-invocation-title="inv-partial"]', WAIT)
    await page.waitForSelector(`${usageStat}[data-usage="partial"]`, WAIT)
    assert.is(await page.textContent(`${usageStat} dd`), '2 answers, tokens at least 300 in, 20 out (usage missing from 1)')
    assert.match((await page.getAttribute(usageStat, 'title')) ?? '', /1 of them reported no input or output count, so the sums are short of what was spent/)
    assert.is(await page.locator('li.entry details[data-payload="usage"]').count(), 1, 'the answer that reported nothing has no usage payload')

    await page.click('button.run[data-invocation="inv-quiet"]')
    await page.waitForSelector('h1[data-invocation-title="inv-quiet"]', WAIT)
    await page.waitForSelector(`${usageStat}[data-usage="none"]`, WAIT)
    assert.is(await page.textContent(`${usageStat} dd`), 'no answers')
    assert.equal(watched.errors, [], 'no script error')
  }),
)

offline.run()
