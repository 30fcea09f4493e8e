/**
 * The page's static HTML. It is kept as a module (not an .html file) because the package build
 * is plain `tsc`, which copies nothing: this way the document ships inside dist/ with the server.
 * It holds no data: everything from the log is fetched by the page script and set as text.
 */
export const INDEX_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>factstate inspector</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/style.css">
<script type="module" src="/page/app.js"></script>
</head>
<body>
<nav class="skip-links" aria-label="Skip links"><a class="skip-link" href="#invocation" data-skip="invocation">Skip to the selected run</a><a class="skip-link" href="#timeline" data-skip="timeline">Skip to its facts</a></nav>
<header class="topbar">
  <div class="brand"><span class="logo" aria-hidden="true"></span><span class="brand-name">factstate</span><span class="brand-product">inspector</span></div>
  <dl class="log-meta">
    <div class="meta-item meta-location"><dt>log</dt><dd id="log-location" class="mono">–</dd></div>
    <div class="meta-item"><dt>high-water</dt><dd id="log-highwater" class="mono">–</dd></div>
    <div class="meta-item"><dt>digest</dt><dd id="log-digest" class="mono">–</dd></div>
    <div id="log-backup-item" class="meta-item" hidden><dt>backup</dt><dd id="log-backup" class="mono">–</dd></div>
    <div class="meta-item meta-verify"><dt>verify</dt><dd><span id="verify-status" class="badge badge-neutral">not checked</span><button id="verify-button" type="button" class="ghost-button">Verify</button></dd></div>
  </dl>
  <div id="live-status" class="live live-off" role="status"><span class="live-dot" aria-hidden="true"></span><span id="live-label">connecting</span></div>
</header>
<div class="layout">
  <aside class="sidebar" aria-label="Sessions">
    <div class="sidebar-head"><h2>Sessions</h2><span id="session-count" class="count"></span><button id="sessions-toggle" type="button" class="toggle-button" aria-expanded="true" aria-controls="sidebar-body">Hide runs</button></div>
    <div id="sidebar-body" class="sidebar-body">
      <input id="filter" class="filter" type="search" placeholder="Filter runs by id, tool or status" aria-label="Filter runs by id, tool name or status" aria-describedby="filter-result" autocomplete="off" spellcheck="false">
      <p id="filter-result" class="filter-result" role="status" hidden></p>
      <nav id="sessions" class="sessions"></nav>
    </div>
  </aside>
  <main class="main">
    <section id="invocation" class="panel invocation" aria-live="polite" aria-label="Selected run" tabindex="-1"></section>
    <div class="workspace">
      <section class="panel chart-panel" aria-label="Statechart">
        <div class="panel-head"><h2>Statechart</h2><span id="chart-caption" class="caption"></span></div>
        <div id="chart" class="chart"></div>
        <div id="state-context" class="state-context"></div>
      </section>
      <section class="panel timeline-panel" aria-label="Timeline">
        <div class="panel-head"><h2>Timeline</h2><span id="timeline-caption" class="caption"></span><button id="latest-button" type="button" class="head-button" aria-pressed="false" aria-keyshortcuts="End" title="Go to the run's latest fact and keep it in view as new facts land (End)" hidden>Latest ↓</button></div>
        <ol id="timeline" class="timeline" tabindex="-1" aria-label="Facts (↑/↓ move between them, End goes to the latest and follows new ones, Esc follows the latest on the chart)"></ol>
      </section>
    </div>
  </main>
</div>
<div id="boot" class="boot">Loading… If this message stays, the page script was not found: build the package (<code>npm run build</code>) and reload.</div>
</body>
</html>
`

/** A small mark for the browser tab. */
export const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect x="2" y="2" width="28" height="28" rx="7" fill="#1f6feb"/><circle cx="11" cy="11" r="4" fill="#fff"/><circle cx="21" cy="21" r="4" fill="#fff"/><path d="M14 14 L18 18" stroke="#fff" stroke-width="2.5" stroke-linecap="round"/></svg>
`
