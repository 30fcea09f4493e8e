/**
 * The page's stylesheet, shipped as a module for the same reason as the document (see
 * document.ts). Status colours are defined once as custom properties.
 */
export const STYLESHEET = `
:root {
  --bg: #f3f5f8;
  --panel: #ffffff;
  --border: #dfe3e8;
  --border-strong: #c9d0d8;
  --text: #1c2128;
  --muted: #5d6874;
  --faint: #626c76;
  --accent: #1f6feb;
  --accent-soft: #e3eefe;
  --accent-trail: #9cbff7;
  --topbar: #161b22;
  --topbar-text: #e6edf3;
  --topbar-muted: #8d96a0;
  --completed: #1a7f37; --completed-bg: #dcf5e3;
  --paused: #7c4dde; --paused-bg: #f0e9ff;
  --failed: #c9252d; --failed-bg: #ffe8e8;
  --cancelled: #5f6b77; --cancelled-bg: #eaedf0;
  --running: #1f6feb; --running-bg: #e3eefe;
  --interrupted: #b35900; --interrupted-bg: #fff0dc;
  --warn: #9a6700; --warn-bg: #fff6d6;
  --fam-invocation: #3d4753; --fam-model: #1f6feb; --fam-tool: #0a7d74; --fam-hold: #7c4dde;
  --mono: ui-monospace, "SF Mono", SFMono-Regular, Menlo, Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace;
  --sans: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans", "Liberation Sans", "DejaVu Sans", sans-serif;
  --radius: 8px;
  --shadow: 0 1px 2px rgba(16, 24, 40, 0.05), 0 1px 3px rgba(16, 24, 40, 0.06);
}
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
/* The top bar, as tall as its items need once they wrap, then the layout in the rest of the height. */
body { display: flex; flex-direction: column; }
body { font: 13px/1.45 var(--sans); color: var(--text); background: var(--bg); -webkit-font-smoothing: antialiased; }
.mono, code, pre { font-family: var(--mono); }
code { font-size: 12px; }
h2 { font-size: 12px; font-weight: 600; letter-spacing: 0.06em; text-transform: uppercase; color: var(--muted); margin: 0; }
button { font: inherit; color: inherit; }

/* skip links: out of sight until focused */
.skip-link { position: absolute; left: 8px; top: -48px; z-index: 10; padding: 8px 12px; border-radius: 6px; background: var(--panel); color: var(--accent); font-weight: 600; box-shadow: var(--shadow); }
.skip-link:focus { top: 8px; outline: 2px solid var(--accent); }
.invocation:focus, .timeline:focus { outline: 2px solid var(--accent); outline-offset: 2px; }
.invocation:focus:not(:focus-visible), .timeline:focus:not(:focus-visible) { outline: none; }

/* top bar */
.topbar { position: sticky; top: 0; z-index: 5; display: flex; flex: none; flex-wrap: wrap; align-items: center; gap: 6px 28px; min-height: 52px; box-sizing: border-box; padding: 6px 18px; background: var(--topbar); color: var(--topbar-text); }
.brand { display: flex; align-items: center; gap: 8px; flex: none; }
.logo { width: 20px; height: 20px; border-radius: 6px; background: linear-gradient(135deg, #58a6ff, #1f6feb); box-shadow: inset 0 0 0 2px rgba(255,255,255,0.15); }
.brand-name { font-weight: 650; font-size: 15px; letter-spacing: -0.01em; }
.brand-product { font-size: 15px; color: var(--topbar-muted); }
/* Items that do not fit wrap onto another line of the bar rather than being cut (the digest, the backup point, Verify). */
.log-meta { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 22px; margin: 0; min-width: 0; flex: 1 1 0; }
.meta-item { display: flex; align-items: baseline; gap: 7px; flex: 0 1 auto; min-width: 0; max-width: 100%; }
.meta-item[hidden] { display: none; }
.meta-item dt { white-space: nowrap; font-size: 11px; text-transform: uppercase; letter-spacing: 0.06em; color: var(--topbar-muted); }
.meta-item dd { margin: 0; font-size: 12px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
/* The log's path gives way first, then the verify badge (its full text in its title); the Verify button never does. */
.meta-location { min-width: 80px; flex: 0 100 auto; overflow: hidden; }
.meta-verify { flex: 0 1 auto; min-width: 0; }
.meta-verify dd { display: flex; align-items: center; gap: 8px; min-width: 0; }
#verify-status { display: block; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
#verify-button { flex: none; }
.ghost-button { border: 1px solid #3d444d; background: transparent; color: var(--topbar-text); border-radius: 6px; padding: 2px 10px; font-size: 12px; cursor: pointer; }
.ghost-button:hover { background: #262c36; }
.ghost-button:disabled { opacity: 0.5; cursor: default; }
.badge { display: inline-flex; align-items: center; gap: 5px; padding: 1px 8px; border-radius: 999px; font-size: 11.5px; font-weight: 600; white-space: nowrap; }
.badge-neutral { background: #30363d; color: #c9d1d9; }
.badge-ok { background: #1b4721; color: #7ee2a8; }
.badge-bad { background: #5a1d1d; color: #ffb3ad; }
.live { display: flex; align-items: center; gap: 7px; font-size: 12px; color: var(--topbar-muted); flex: none; }
.live-dot { width: 8px; height: 8px; border-radius: 50%; background: #6e7681; }
.live-on { color: #7ee2a8; }
.live-on .live-dot { background: #3fb950; box-shadow: 0 0 0 3px rgba(63, 185, 80, 0.25); }
.live-off .live-dot { background: #d29922; }

/* layout */
.layout { display: grid; grid-template-columns: 300px minmax(0, 1fr); flex: 1 1 auto; min-height: 0; }
.sidebar { border-right: 1px solid var(--border); background: var(--panel); display: flex; flex-direction: column; min-height: 0; }
/* One line at any width: a long count gives way (its whole text is its title) rather than wrapping under the heading. */
.sidebar-head { display: flex; flex-wrap: nowrap; align-items: baseline; justify-content: space-between; gap: 12px; padding: 14px 16px 8px; }
.sidebar-head h2 { flex: none; }
.count { font-size: 12px; color: var(--faint); min-width: 0; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.sidebar-body { display: flex; flex-direction: column; flex: 1 1 auto; min-height: 0; }
/* The run list folds away on a phone only (see the media query below). */
.toggle-button { display: none; flex: none; align-self: center; padding: 2px 10px; border: 1px solid var(--border-strong); border-radius: 6px; background: var(--panel); font-size: 12px; cursor: pointer; }
.toggle-button:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
.filter { margin: 0 12px 10px; padding: 7px 10px; border: 1px solid var(--border-strong); border-radius: 6px; font: inherit; font-size: 12.5px; background: #fbfcfd; }
.filter:focus { outline: 2px solid var(--accent-soft); border-color: var(--accent); }
.filter-result { margin: -4px 14px 8px; font-size: 12px; color: var(--muted); }
.filter-result[hidden] { display: none; }
.sessions { overflow-y: auto; padding: 0 8px 16px; min-height: 0; }
.main { overflow-y: auto; padding: 16px 18px 24px; min-width: 0; }
.workspace { display: grid; grid-template-columns: minmax(0, 4fr) minmax(420px, 3fr); gap: 16px; align-items: start; }
.panel { background: var(--panel); border: 1px solid var(--border); border-radius: var(--radius); box-shadow: var(--shadow); }
.panel-head { display: flex; align-items: baseline; justify-content: space-between; gap: 12px; padding: 12px 16px 10px; border-bottom: 1px solid var(--border); }
.caption { font-size: 12px; color: var(--muted); text-align: right; }
.panel-head .caption { margin-left: auto; }
.head-button { flex: none; padding: 1px 9px; border: 1px solid var(--border-strong); border-radius: 6px; background: var(--panel); font-size: 12px; cursor: pointer; }
.head-button:hover { border-color: var(--accent); color: var(--accent); }
.head-button:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
.head-button[aria-pressed="true"] { background: var(--accent-soft); border-color: #b6d0fb; color: var(--accent); }
.head-button[hidden] { display: none; }
.caption strong { color: var(--text); font-weight: 600; }
.chart-panel { position: sticky; top: 0; }
.empty { padding: 28px 16px; color: var(--faint); text-align: center; }

/* session tree */
.session { margin: 6px 0 10px; }
.session-head { display: flex; align-items: center; gap: 8px; padding: 6px 8px 4px; }
.session-id { font-family: var(--mono); font-size: 12px; font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.session-meta { margin-left: auto; font-size: 11px; color: var(--faint); white-space: nowrap; }
.session-flags { padding: 0 8px 4px; }
.turn { margin: 0 0 4px 10px; padding-left: 8px; border-left: 1px solid var(--border); }
.turn-head { font-family: var(--mono); font-size: 11px; color: var(--muted); padding: 3px 4px 2px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.run { display: grid; grid-template-columns: 10px minmax(0, 1fr) auto; column-gap: 8px; row-gap: 1px; align-items: center; width: 100%; padding: 6px 8px; margin: 1px 0; border: 1px solid transparent; border-radius: 6px; background: none; text-align: left; cursor: pointer; }
.run:hover { background: #f3f6f9; }
.run[aria-current="true"] { background: var(--accent-soft); border-color: #b6d0fb; }
.run:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
.run-id { font-family: var(--mono); font-size: 12px; font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.run-meta { grid-column: 2 / 4; font-size: 11px; color: var(--muted); display: flex; flex-wrap: wrap; gap: 4px 10px; }
.run-meta .flag { color: var(--warn); font-weight: 600; }
.run-meta .flag-calm { color: var(--running); }
.run-meta .flag-bad { color: var(--failed); }
.run-link { font-family: var(--mono); font-size: 11px; color: var(--muted); }
.status-dot { width: 8px; height: 8px; border-radius: 50%; background: var(--faint); }
.more { padding: 8px; font-size: 12px; color: var(--faint); text-align: center; }

/* status colours */
.s-completed { --s: var(--completed); --s-bg: var(--completed-bg); }
.s-paused { --s: var(--paused); --s-bg: var(--paused-bg); }
.s-failed { --s: var(--failed); --s-bg: var(--failed-bg); }
.s-cancelled { --s: var(--cancelled); --s-bg: var(--cancelled-bg); }
.s-running { --s: var(--running); --s-bg: var(--running-bg); }
.s-interrupted { --s: var(--interrupted); --s-bg: var(--interrupted-bg); }
.s-open { --s: var(--running); --s-bg: var(--running-bg); }
.s-handed-off { --s: var(--fam-tool); --s-bg: #ddf4f1; }
.status-dot[class*="s-"] { background: var(--s); }
.pill { display: inline-flex; align-items: center; max-width: 100%; padding: 1px 8px; border-radius: 999px; font-size: 11px; font-weight: 600; background: var(--s-bg, #eaedf0); color: var(--s, var(--muted)); white-space: nowrap; }
.pill-warn { background: var(--warn-bg); color: var(--warn); }
.pill-info { background: var(--running-bg); color: var(--running); }
.s-running.status-dot { animation: pulse 1.6s ease-in-out infinite; }
@keyframes pulse { 50% { opacity: 0.35; } }

/* invocation header */
.invocation { padding: 14px 18px; margin-bottom: 16px; }
.invocation-title { display: flex; align-items: center; flex-wrap: wrap; gap: 10px; }
.invocation-title h1 { font-family: var(--mono); font-size: 17px; font-weight: 650; margin: 0; letter-spacing: -0.01em; }
.invocation-title .state-name { font-family: var(--mono); font-size: 12px; color: var(--muted); }
.ids { display: grid; grid-template-columns: repeat(4, minmax(0, auto)); justify-content: start; gap: 4px 26px; margin: 10px 0 0; }
.ids div { min-width: 0; }
.ids dt, .stat dt { font-size: 10.5px; text-transform: uppercase; letter-spacing: 0.06em; color: var(--faint); }
.ids dd { margin: 0; font-family: var(--mono); font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.stats { display: flex; flex-wrap: wrap; gap: 6px 26px; margin: 10px 0 0; }
.stat dd { margin: 0; font-size: 13px; font-weight: 600; font-variant-numeric: tabular-nums; }
.notes { display: flex; flex-direction: column; gap: 6px; margin-top: 12px; }
.note { display: flex; align-items: center; flex-wrap: wrap; gap: 8px; padding: 7px 10px; border-radius: 6px; background: #f6f8fa; border: 1px solid var(--border); font-size: 12.5px; }
.note-warn { background: var(--warn-bg); border-color: #f0d98a; color: #6b4a00; }
.note-bad { background: var(--failed-bg); border-color: #f5c2c2; color: #8c1d22; }
.note-link { display: inline-flex; align-items: center; gap: 6px; padding: 2px 8px; border: 1px solid var(--border-strong); border-radius: 6px; background: var(--panel); cursor: pointer; font-family: var(--mono); font-size: 12px; }
.note-link:hover { border-color: var(--accent); color: var(--accent); }
.note-link:disabled { cursor: default; color: var(--faint); border-style: dashed; }
.note-label { font-weight: 600; }
.note-link .link-note { font-family: var(--sans); color: var(--warn); }
.child-link { display: inline-flex; align-items: center; gap: 6px; font-size: 12px; color: var(--muted); }

/* statechart */
/* The chart is scaled to its panel, never below the size the page sets on it (chart-view.ts): a panel too narrow for that scrolls it. */
.chart { padding: 8px 10px 0; overflow: auto; }
.chart svg { display: block; width: 100%; height: auto; max-height: calc(100vh - 260px); }
.chart .edge path { fill: none; stroke: #aab4bf; stroke-width: 1.4; }
.chart .edge.trail path { stroke: var(--accent-trail); stroke-width: 1.8; }
.chart .edge.taken path { stroke: var(--accent); stroke-width: 2.6; }
.chart .arrowhead { fill: #aab4bf; }
.chart .arrowhead-trail { fill: var(--accent-trail); }
.chart .arrowhead-taken { fill: var(--accent); }
.chart .edge-label rect { fill: var(--panel); fill-opacity: 0.92; }
.chart .edge-label text { font-family: var(--mono); }
.chart .edge-label .ev { font-size: 11px; fill: #4a5561; }
.chart .edge-label .ev.taken { fill: var(--accent); font-weight: 700; }
.chart .state rect { fill: #f7f9fb; stroke: #9aa6b2; stroke-width: 1.3; }
.chart .state .inner { fill: none; stroke: #9aa6b2; stroke-width: 1; }
.chart .state text { font-family: var(--mono); font-size: 16px; font-weight: 600; fill: #33404d; text-anchor: middle; dominant-baseline: central; }
.chart .state.visited rect { fill: #f1f6fe; stroke: var(--accent-trail); }
.chart .state.previous rect.outer { stroke: var(--accent); stroke-dasharray: 4 3; }
.chart .state.current rect.outer { fill: var(--accent); stroke: var(--accent); stroke-width: 2; filter: drop-shadow(0 2px 4px rgba(31, 111, 235, 0.35)); }
.chart .state.current .inner { stroke: #fff; }
.chart .state.current text { fill: #fff; }
.chart .initial { fill: #4a5561; }
/* After the state rules: the state a keyboard is on shows it whatever else it is (current, previous). */
.chart .state { outline: none; }
.chart .state:focus-visible rect.outer { stroke: var(--text); stroke-width: 3; stroke-dasharray: none; }
.state-context { display: flex; flex-wrap: wrap; gap: 6px 18px; padding: 10px 16px 14px; border-top: 1px solid var(--border); font-size: 12px; color: var(--muted); min-height: 40px; }
.state-context strong { color: var(--text); font-family: var(--mono); font-weight: 600; }
.state-context .context-warn { color: var(--warn); }

/* timeline */
.timeline { list-style: none; margin: 0; padding: 4px 0; }
.entry { border-bottom: 1px solid #eef1f4; }
.entry:last-child { border-bottom: none; }
.entry-row { display: grid; grid-template-columns: 34px minmax(0, 1fr) auto; grid-template-areas: "seq type after" ". info info"; align-items: baseline; column-gap: 10px; row-gap: 1px; width: 100%; padding: 7px 16px 6px 13px; border: none; border-left: 3px solid transparent; background: none; text-align: left; cursor: pointer; }
.entry-row:hover { background: #f6f8fa; }
.entry-row:focus-visible { outline: 2px solid var(--accent); outline-offset: -2px; }
.entry.selected { background: var(--accent-soft); box-shadow: inset 3px 0 0 var(--accent); }
.entry.selected .entry-row:hover { background: transparent; }
.entry.after-selected { opacity: 0.5; }
.entry.fresh .entry-row { animation: fresh 2.4s ease-out; }
@keyframes fresh { from { background: #fff3bf; } to { background: transparent; } }
.seq { grid-area: seq; font-family: var(--mono); font-size: 12px; color: var(--muted); text-align: right; font-variant-numeric: tabular-nums; }
.time { font-family: var(--mono); font-size: 11px; color: var(--faint); font-variant-numeric: tabular-nums; margin-right: 12px; }
/* Two lines at most (the whole text is the row's title). */
.info { grid-area: info; min-width: 0; overflow: hidden; display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; }
.info .field { display: inline-block; max-width: 100%; overflow-wrap: anywhere; }
.type { grid-area: type; font-family: var(--mono); font-size: 12px; font-weight: 650; color: var(--fam, var(--text)); white-space: nowrap; }
.fam-invocation { --fam: var(--fam-invocation); }
.fam-model { --fam: var(--fam-model); }
.fam-tool { --fam: var(--fam-tool); }
.fam-hold { --fam: var(--fam-hold); }
.summary { font-size: 12.5px; color: var(--text); }
.summary .k { color: var(--faint); margin-right: 3px; }
.summary .v { margin-right: 10px; }
.summary .v.mono { font-size: 11.5px; }
.summary .v-bad { padding: 0 6px; border-radius: 999px; background: var(--failed-bg); color: var(--failed); font-weight: 600; }
.entry-bad .entry-row { border-left-color: var(--failed); }
.after { grid-area: after; font-family: var(--mono); font-size: 11px; color: var(--muted); white-space: nowrap; }
.after .arrow { color: var(--faint); margin-right: 4px; }
/* A flag too long for the panel (a call a crash left unsettled) wraps within it rather than running past its edge. */
.entry-flags { display: flex; flex-wrap: wrap; gap: 4px 6px; min-width: 0; padding: 0 16px 5px 60px; }
.entry-flags .pill, .session-flags .pill { white-space: normal; overflow-wrap: anywhere; border-radius: 10px; }
.payloads { display: flex; flex-wrap: wrap; align-items: baseline; gap: 2px 16px; padding: 0 16px 7px 60px; margin-top: -1px; }
.payload { font-size: 11.5px; }
.payload[open] { flex-basis: 100%; }
.payload summary { cursor: pointer; color: var(--muted); user-select: none; width: fit-content; }
.payload-raw summary { color: var(--faint); }
.payload summary:hover { color: var(--accent); }
.payload pre { margin: 6px 0 4px; padding: 10px 12px; max-height: 320px; overflow: auto; background: #f6f8fa; border: 1px solid var(--border); border-radius: 6px; font-size: 11.5px; line-height: 1.5; white-space: pre-wrap; word-break: break-word; }
.boot { position: fixed; inset: 52px 0 0 0; display: flex; align-items: center; justify-content: center; padding: 24px; background: var(--bg); color: var(--muted); font-size: 14px; text-align: center; }
.boot[hidden] { display: none; }
@media (max-width: 1440px) {
  .topbar { gap: 18px; }
  .log-meta { gap: 16px; }
}
@media (max-width: 1180px) {
  .topbar { gap: 18px; }
  .log-meta { gap: 16px; }
}
/* Below this the chart beside the facts would be scaled past reading: it goes above them, at full width. */
@media (max-width: 1440px) {
  .workspace { grid-template-columns: minmax(0, 1fr); }
  .chart-panel { position: static; }
}
/* A phone: the list above the detail, the header's items wrapped onto lines of their own. */
@media (max-width: 760px) {
  body { display: block; }
  .topbar { position: static; flex-wrap: wrap; height: auto; gap: 8px 16px; padding: 10px 14px; }
  .log-meta { order: 3; flex: 1 1 100%; flex-wrap: wrap; gap: 6px 16px; overflow: visible; }
  .meta-item { flex: 0 1 auto; min-width: 0; max-width: 100%; }
  .meta-location { flex: 1 1 100%; }
  .meta-verify dd { flex-wrap: wrap; }
  .layout { display: flex; flex-direction: column; height: auto; }
  .sidebar { border-right: none; border-bottom: 1px solid var(--border); max-height: 45vh; }
  .toggle-button { display: inline-block; }
  .sidebar[data-collapsed="true"] .sidebar-body { display: none; }
  .sidebar[data-collapsed="true"] .sidebar-head { padding-bottom: 12px; }
  .main { overflow: visible; padding: 12px 10px 20px; }
  .ids { grid-template-columns: repeat(2, minmax(0, 1fr)); }
  .entry-flags, .payloads { padding-left: 16px; }
  .boot { inset: 0; }
}
`
