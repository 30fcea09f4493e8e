/**
 * The JSON the inspector server sends its page. Types only: the page imports them with
 * `import type`, so nothing here ends up in the browser bundle.
 */
import type { Fact, Invocation, InvocationOutcome, ParentCall, TerminalStatus, UncertainOperation } from '../facts/types.js'
import type { BackupPoint } from '../store/backup-point.js'
import type { UsageTotals } from '../actors/transcript.js'

/**
 * Where an invocation stands: its terminal status, `running` (open and driven by a live actor of
 * the serving process), `open` (open in a snapshot of a log another process has open: that
 * process may be driving it, or a crash left it there and that process has not recovered it) or
 * `interrupted` (open and no process can be driving it: a crash left it, recovery will close it).
 */
export type InvocationStatus = TerminalStatus | 'running' | 'open' | 'interrupted'

/** A link between two runs of one session. */
export interface RunLink {
  kind: 'handoff' | 'continuation'
  runId: string
  invocationId: string
  /** False while the log holds no invocation with that id (a sealed run still awaiting its successor). */
  exists: boolean
}

/** A link between a tool call and the child run it started (an agent that calls an agent). */
export interface CallLink {
  /** The call's operation id. */
  operationId: string
  /** The other end: the child run (from a parent), or the calling run (from a child). */
  invocation: Invocation
  /**
   * False when no invocation with that id was found: a parent in another log (in `/api/overview`'s
   * summaries, which are not looked up in the log, also a parent dropped from the index).
   */
  exists: boolean
  /**
   * The other end's session was dropped from the index (past `maxIndexed`): a child of a parent, or
   * the parent of a child, still in the log, and `exists`, since the inspector reads it from there
   * when asked for it.
   */
  dropped?: true
}

/** One invocation (one run) as the overview lists it. */
export interface InvocationSummary {
  invocation: Invocation
  inputKind: 'message' | 'continuation' | 'handoff'
  status: InvocationStatus
  /** The machine state after the invocation's last fact, or `rejected` when the log contradicts the machine. */
  state: string
  outcome: InvocationOutcome | null
  /** Model steps begun. */
  steps: number
  facts: number
  firstSeq: number
  lastSeq: number
  openedAt: number
  lastAt: number
  /** Operations dispatched and never settled. */
  uncertain: string[]
  /**
   * Operations of this run whose outcome is unknown that a later run of its session acknowledged
   * (started with `allowPriorUnknown`: its `invocation.opened` lists them in `input.priorUnknown`),
   * each with that run. They stay unknown; the session no longer waits on them.
   */
  acknowledged: { operationId: string; runId: string; invocationId: string }[]
  /** The tools its model's calls named (asked for, dispatched or rejected), each once, in the order first named. */
  tools: string[]
  /** Tool calls that settled `failed` (or `unknown`). */
  failedCalls: number
  /** Tool calls rejected before dispatch (`tool.rejected`: unknown tool, invalid input, denied, cancelled). */
  rejectedCalls: number
  /** The run this one succeeds (handoff) or continues (continuation). */
  source: RunLink | null
  /** The successor a handoff seal names. */
  successor: RunLink | null
  /** Runs started as continuations of this one. */
  continuedBy: RunLink[]
  /** The tool call that started this run as a child run (its `invocation.opened`'s `input.parent`). */
  parent: CallLink | null
  /** The child runs this run's tool calls started, in the order they opened. */
  children: CallLink[]
  /** Set when folding the facts through the machine failed: the first refusal. */
  machineError: string | null
}

export interface TurnView {
  turnId: string
  runs: InvocationSummary[]
}

export interface SessionView {
  sessionId: string
  firstSeq: number
  lastSeq: number
  /** Operations of ended runs whose outcome is unknown and not yet acknowledged by a new message. */
  reconciliation: UncertainOperation[]
  /**
   * In a log put back from a backup (`Overview.backup`): the session has not run since the backup was
   * taken, so its next run must acknowledge that (allowRestored).
   */
  restored: boolean
  /**
   * Why the session needs someone, or null: `open` (a run is still open), `paused` (a sealed run's
   * successor has not started), `unanswered` (its last run ended failed or cancelled).
   */
  attention: 'open' | 'paused' | 'unanswered' | null
  turns: TurnView[]
}

export interface Overview {
  location: string
  /**
   * `engine` when the server was given the running engine; `snapshot` for a snapshot of a log
   * another process has open (`EventLog.openSnapshot`: it updates only if refreshed, see `refresh`;
   * `location` is the log's); else `log`.
   */
  mode: 'engine' | 'log' | 'snapshot'
  highWater: number
  digest: string
  /** For a backup, or a log put back from one (`log.restoredFrom()`): where it was taken; else null. */
  backup: BackupPoint | null
  /**
   * At most 300: the sessions that need someone (`SessionView.attention`) first, then the others,
   * each part most recently active first; with `match`, only the sessions that match it.
   */
  sessions: SessionView[]
  /** How many sessions the log holds. */
  sessionsTotal: number
  /**
   * What `/api/overview?match=…` was asked for (trimmed, at most 256 characters; case-insensitive,
   * found in a session's id, in the id of one of its turns, runs or invocations, or in one of its
   * runs' tool names or status words: `failed`, `handed off`, `max_steps`, …), or null.
   */
  match: string | null
  /** How many sessions qualify (all of them without `match`); `sessions` lists the first 300. */
  sessionsMatching: number
  /** How many of the sessions that qualify need someone. */
  attention: number
  /**
   * For a snapshot the inspector refreshes (`refresh` of `serveInspector`, `factstate inspect`'s
   * default): how often it looks, and why it stopped, if it did. `null` for one it does not refresh.
   */
  refresh: { everyMs: number; stopped: string | null } | null
}

export interface Point {
  x: number
  y: number
}

export interface ChartState {
  /** The state's key, e.g. `held`. */
  id: string
  x: number
  y: number
  width: number
  height: number
  final: boolean
  initial: boolean
}

/** One transition of the machine, as drawn: all transitions between the same two states share an edge. */
export interface ChartEdge {
  /** `<source>-><target>`; the initial arrow is `->opening`. */
  id: string
  source: string | null
  target: string
  /** What the edge is labelled with: a fact type (or `always` for an eventless transition) and its guards. */
  events: { event: string; guards: string[] }[]
  points: Point[]
  label: { x: number; y: number; width: number; height: number } | null
}

export interface Chart {
  width: number
  height: number
  states: ChartState[]
  edges: ChartEdge[]
}

/** A transition the machine took on one fact. */
export interface TakenTransition {
  source: string
  target: string
  /** The fact type, or `always` for an eventless transition that followed it. */
  event: string
}

/** One fact of an invocation's timeline, with the machine state after it. */
export interface TimelineEntry {
  seq: number
  id: string
  recordedAt: number
  fact: Fact
  stateAfter: string
  transitions: TakenTransition[]
  /** The machine's memory after this fact. */
  context: { stepsUsed: number; pendingCalls: string[]; inflight: string[]; holdId: string | null }
  /** Set (and the state left unchanged) when the machine refused this fact. */
  rejected: string | null
  /** For a `tool.dispatched`: the operation never settled. */
  uncertain: boolean
}

export interface InvocationDetail {
  summary: InvocationSummary
  initialState: string
  entries: TimelineEntry[]
  /** The token counts its answers reported, summed (`usageOf` of its facts). */
  usage: UsageTotals
}

export interface VerifyReport {
  status: 'ok' | 'corrupt' | 'error'
  /** The high-water when the check ran. */
  highWater: number
  events: number
  digest: string | null
  code: string | null
  seq: number | null
  message: string | null
  checkedAt: number
}

/** Sent on `/api/events` (event name `facts`) whenever facts land. */
export interface FactsLanded {
  highWater: number
  digest: string
  events: { seq: number; sessionId: string; invocationId: string; type: Fact['type'] }[]
}

/** The JSON body of every error answer. */
export interface ApiError {
  code: string
  message: string
}
