/**
 * The driver-level model of one session for model-based tests: what a test can do to an engine
 * (answer the model, settle a tool, take, release or commit a hold, cancel, crash the process)
 * and which facts the engine and recovery must append in response. It is a pure XState machine,
 * walked by `xstate/graph`; every fact sequence it plans is folded through the real
 * `invocationMachine` (see `paths.ts`), so the model cannot drift from the machine unnoticed.
 *
 * Its stable states are the points where a test can act: `idle` (no run yet), `started` (just
 * admitted, before the first model request), `awaitingModel` (a request in flight),
 * `awaitingApproval` (a call of a tool that needs approval, waiting for the approver),
 * `toolRunning` (a dispatched tool executing), `backoff` (a failed request waiting for its retry),
 * `held`, `committed` and `ended`. `opened`, `calling` and `safePoint` are transient: the engine decides
 * there by itself, exactly as the invocation actor does.
 */
import { assign, setup } from 'xstate'
import type { ExecutionSettings, Fact, HandoffPause, InvocationOutcome } from '../facts/types.js'
import type { InvocationState } from '../machines/invocation.js'

/** What the scripted model answers to one request. */
export type AnswerKind =
  /** One call to a tool of the catalog. */
  | 'known'
  /** One call to a tool that is not in the catalog (rejected `unknown_tool`, never run). */
  | 'unknown'
  /** Three calls in one answer: known, unknown, known. */
  | 'several'
  /** One call to a tool that needs approval: the path approves it (then it runs) or denies it (rejected `denied`, never run). */
  | 'needsApproval'
  /** One call to a read-only tool: a crash while it runs leaves its outcome unknown, and the session need not reconcile it. */
  | 'readOnly'
  /** One call whose arguments do not match its tool's input schema (rejected `invalid_input`, never run). */
  | 'invalidInput'
  /** Final text, no tool calls: the run completes. */
  | 'text'
  /** HTTP 500 (retryable); the engine retries once, a second failure fails the run. */
  | 'failure'
  /** No answer until the request times out. */
  | 'timeout'

/**
 * The refusals a path may provoke; each must leave the log byte for byte unchanged. `RUN_SOURCE_STALE`:
 * once a later run has opened, a continuation of the run before the last one, with `onlyIfLatest`.
 */
export type RefusalCode = 'RUN_BUSY' | 'HANDOFF_BUSY' | 'HANDOFF_MISMATCH' | 'RUN_RECONCILIATION_REQUIRED' | 'RUN_SOURCE_STALE'

/** One thing a test does (or lets happen) in a path. */
export type PathEvent =
  /** Admit a new message run (after a crash with unknown outcomes, it must pass `allowPriorUnknown`). */
  | { type: 'start'; allowPriorUnknown: boolean }
  /** Admit the successor of the sealed run (work `handoff`). */
  | { type: 'successor' }
  /** Let the engine send its next model request (the first one, or the retry after a failure). */
  | { type: 'request' }
  /** The model answers the request in flight. */
  | { type: 'model.answer'; answer: AnswerKind }
  /** The running tool returns (`succeeds`) or throws. */
  | { type: 'tool.outcome'; outcome: 'succeeds' | 'throws' }
  /** The approver decides on the call waiting for it. */
  | { type: 'approval'; decision: 'approve' | 'deny' }
  /** Reserve a hold: `before` the next request (just after admission, or while a tool runs), or `during` one. */
  | { type: 'hold.reserve'; when: 'before' | 'during' }
  /** Give the pending reservation up before its safe point. */
  | { type: 'hold.cancel' }
  /** Roll back: the held run goes on. */
  | { type: 'hold.release' }
  /** Seal: the held run ends `handoff_paused`. */
  | { type: 'hold.commit' }
  /** Cancel the run through its `AbortSignal`. */
  | { type: 'cancel' }
  /**
   * The log refuses the fact recording the model's answer and the `model.interrupted` the engine
   * writes for it (an injected clock fault, twice): the run ends `engine_error` from `awaitingModel`.
   * (One refusal alone interrupts the step first.)
   */
  | { type: 'log.refuses' }
  /** Try something the engine must refuse without writing. */
  | { type: 'refusal'; code: RefusalCode }
  /** The process is killed (SIGKILL); the log is reopened and recovered. */
  | { type: 'crash' }

/** The stable states of the path model. */
export type PathState = 'idle' | 'started' | 'awaitingModel' | 'awaitingApproval' | 'toolRunning' | 'backoff' | 'held' | 'committed' | 'ended'

/** The invocation machine state each stable path state stands for (`null`: no run yet). */
export const MACHINE_STATE_OF: Readonly<Record<PathState, InvocationState | null>> = {
  idle: null,
  started: 'safePoint',
  awaitingModel: 'awaitingModel',
  awaitingApproval: 'settlingTool',
  toolRunning: 'settlingTool',
  backoff: 'safePoint',
  held: 'held',
  committed: 'committed',
  ended: 'ended',
}

/** Bounds of the model. */
export interface PathModelInput {
  /** Model steps of a message run. */
  maxSteps: number
  /** Runs in one path (message runs and successors). */
  maxRuns: number
}

/** `gated`: a call of the tool that needs approval; `readOnly`: of the read-only tool; `invalid`: arguments its tool's schema refuses. */
type CallKind = 'known' | 'unknown' | 'gated' | 'readOnly' | 'invalid'

/** A fact the model plans, for the run it belongs to (1-based). */
export interface PlannedFact {
  run: number
  fact: Fact
}

/** What the model remembers. Everything but `facts` (and `callIndex` and `inflight`, the ids those facts use) identifies a state. */
export interface PathContext extends PathModelInput {
  /** Retries after a retryable model failure (the engine under test is configured with the same). */
  retries: number
  /** Runs admitted so far; the current run is number `run`. */
  run: number
  /** How the current run was admitted. */
  kind: 'message' | 'handoff' | null
  /** The current run has rolled a hold back. */
  rolledBack: boolean
  budget: number
  stepsUsed: number
  /** Attempts of the current step's request. */
  attempt: number
  /** Calls of the current answer neither dispatched nor rejected yet, and the index of the next one. */
  calls: CallKind[]
  callIndex: number
  /** The operation running now (`toolRunning`). */
  inflight: string | null
  /** The operation running now is of the read-only tool: a crash leaves it unknown without asking the session to reconcile. */
  inflightReadOnly: boolean
  reserved: boolean
  /** Held during a retry's back-off: a release goes back to it, and the retry is the same step. */
  retrying: boolean
  /** Steps left by the sealed pause, while `committed`. */
  pausedSteps: number | null
  /** The session has tool outcomes left unknown by a crash and not yet acknowledged. */
  unknown: boolean
  crashed: boolean
  /** Every fact planned so far, in order. Not part of a state's identity. */
  facts: PlannedFact[]
}

/** Retries after a retryable model failure: the model plans them, and the runner configures the engine's executor the same way. */
export const MODEL_RETRIES = 1

const ANSWER_CALLS: Partial<Record<AnswerKind, CallKind[]>> = {
  known: ['known'],
  unknown: ['unknown'],
  several: ['known', 'unknown', 'known'],
  needsApproval: ['gated'],
  readOnly: ['readOnly'],
  invalidInput: ['invalid'],
}

/** The approver's decisions as the path makes them (and the runner's approver records them). */
export const PATH_APPROVER = 'path'
export const PATH_DENIAL = 'the path denied it'

const PLACEHOLDER_DIGEST = `sha256:${'0'.repeat(64)}`
const PLACEHOLDER_EXECUTION: ExecutionSettings = {
  model: 'model',
  providerOptions: {},
  cwd: '/',
  tools: { catalogDigest: PLACEHOLDER_DIGEST, names: ['known'] },
}

const stepIdOf = (context: PathContext) => `step-${context.stepsUsed}`
const callIdOf = (context: PathContext, index: number) => `call-${context.run}-${context.stepsUsed}-${index}`
const operationIdOf = (context: PathContext, index: number) => `run-${context.run}/step-${context.stepsUsed}/${index}`
const holdIdOf = (context: PathContext) => `hold-${context.run}-${context.stepsUsed}`

/** The steps a seal leaves its successor: held in a retry's back-off, the failed step is not spent (its request is the successor's first). */
const stepsLeft = (context: PathContext) => context.budget - context.stepsUsed + (context.retrying ? 1 : 0)

function pauseOf(context: PathContext): HandoffPause {
  return {
    intent: {
      handoffId: holdIdOf(context),
      hostEpoch: 'host',
      rootRunId: 'run-1',
      successorRunId: `run-${context.run + 1}`,
      successorInvocationId: `invocation-${context.run + 1}`,
      claimId: `claim-${context.run}`,
    },
    remainingSteps: stepsLeft(context),
    execution: PLACEHOLDER_EXECUTION,
  }
}

/** The rejection of the current answer's call at `index` (its kind names the tool). */
const rejection = (
  context: PathContext,
  index: number,
  name: string,
  reason: 'unknown_tool' | 'invalid_input' | 'cancelled' | 'denied',
): Extract<Fact, { type: 'tool.rejected' }> => ({
  type: 'tool.rejected',
  operationId: operationIdOf(context, index),
  callId: callIdOf(context, index),
  name,
  input: {},
  reason,
})
/** The calls of the answer not begun, rejected `cancelled` (a cancel starts none of them). */
const cancelledCalls = (context: PathContext): Fact[] => context.calls.map((kind, offset) => rejection(context, context.callIndex + offset, kind, 'cancelled'))
const plan = (context: PathContext, ...facts: Fact[]): PlannedFact[] => [...context.facts, ...facts.map((fact) => ({ run: context.run, fact }))]
const ended = (outcome: InvocationOutcome): Fact => ({ type: 'invocation.ended', outcome })
const failed = (failureClass: string): Fact => ended({ status: 'failed', class: failureClass })
const interrupted = (context: PathContext, status: 'cancelled' | 'timed_out' | 'failed' | 'retryable_failure'): Fact => ({
  type: 'model.interrupted',
  stepId: stepIdOf(context),
  status,
})

/** The per-run part of the context as a run starts. */
function runStart(): Pick<PathContext, 'rolledBack' | 'stepsUsed' | 'attempt' | 'calls' | 'callIndex' | 'inflight' | 'inflightReadOnly' | 'reserved' | 'retrying' | 'pausedSteps'> {
  return { rolledBack: false, stepsUsed: 0, attempt: 0, calls: [], callIndex: 0, inflight: null, inflightReadOnly: false, reserved: false, retrying: false, pausedSteps: null }
}

function opened(context: PathContext, run: number, budget: number, kind: 'message' | 'handoff', priorUnknown: boolean): Partial<PathContext> {
  const input =
    kind === 'handoff'
      ? {
          kind: 'handoff' as const,
          source: {
            invocation: { sessionId: 's', turnId: 't', runId: `run-${run - 1}`, invocationId: `invocation-${run - 1}` },
            highWater: 1,
            digest: PLACEHOLDER_DIGEST,
          },
          pause: pauseOf(context),
        }
      : {
          kind: 'message' as const,
          content: `question ${run}`,
          ...(priorUnknown ? { priorUnknown: [{ invocationId: 'unknown', operationId: 'unknown', callId: 'unknown', name: 'known' }] } : {}),
        }
  return {
    run,
    kind,
    budget,
    ...runStart(),
    unknown: kind === 'message' ? false : context.unknown,
    facts: [
      ...context.facts,
      { run, fact: { type: 'invocation.opened', input, configuration: { cwd: '/' }, execution: PLACEHOLDER_EXECUTION } },
    ],
  }
}

/**
 * The path model: a pure statechart over {@link PathEvent}s whose context plans the facts the
 * engine (and recovery) must append. `paths.ts` walks it with `xstate/graph`.
 *
 * @example
 * ```ts
 * import { createTestModel } from 'xstate/graph'
 * const model = createTestModel(pathModel, { input: { maxSteps: 2, maxRuns: 2 } })
 * model.getShortestPaths().length // one path to each reachable state
 * ```
 */
export const pathModel = setup({
  types: {
    context: {} as PathContext,
    events: {} as PathEvent,
    input: {} as PathModelInput,
  },
  guards: {
    admits: ({ context, event }) => event.type === 'start' && context.run < context.maxRuns && event.allowPriorUnknown === context.unknown,
    succeeds: ({ context }) => context.pausedSteps !== null && context.run < context.maxRuns,
    budgetLeft: ({ context }) => context.stepsUsed < context.budget,
    budgetSpent: ({ context }) => context.stepsUsed >= context.budget,
    answersCalls: ({ event }) => event.type === 'model.answer' && ANSWER_CALLS[event.answer] !== undefined,
    answersText: ({ event }) => event.type === 'model.answer' && event.answer === 'text',
    failsAndRetries: ({ context, event }) => event.type === 'model.answer' && event.answer === 'failure' && context.attempt <= context.retries,
    // The back-off before a retry is a safe point: a reservation made while the request failed is taken there,
    // in the last step's too (the retry would be the successor's first step).
    failsAndRetriesReserved: ({ context, event }) => event.type === 'model.answer' && event.answer === 'failure' && context.attempt <= context.retries && context.reserved,
    retrying: ({ context }) => context.retrying,
    fails: ({ event }) => event.type === 'model.answer' && event.answer === 'failure',
    timesOut: ({ event }) => event.type === 'model.answer' && event.answer === 'timeout',
    nextCallRuns: ({ context }) => context.calls[0] === 'known' || context.calls[0] === 'readOnly',
    nextCallGated: ({ context }) => context.calls[0] === 'gated',
    approves: ({ event }) => event.type === 'approval' && event.decision === 'approve',
    reservesBefore: ({ context, event }) => event.type === 'hold.reserve' && event.when === 'before' && !context.reserved,
    reservesDuring: ({ context, event }) => event.type === 'hold.reserve' && event.when === 'during' && !context.reserved,
    reserved: ({ context }) => context.reserved,
    mayCrash: ({ context }) => !context.crashed,
    inflightReadOnly: ({ context }) => context.inflightReadOnly,
    refusedWhileHeld: ({ event }) => event.type === 'refusal' && (event.code === 'RUN_BUSY' || event.code === 'HANDOFF_BUSY'),
    refusedWhileSealed: ({ event }) => event.type === 'refusal' && (event.code === 'RUN_BUSY' || event.code === 'HANDOFF_MISMATCH'),
    // Unknown outcomes are refused first: a continuation of a stale source would have to reconcile them too.
    refusedAfterEnd: ({ context, event }) =>
      event.type === 'refusal' && (event.code === 'RUN_RECONCILIATION_REQUIRED' ? context.unknown : event.code === 'RUN_SOURCE_STALE' && context.run >= 2 && !context.unknown),
  },
  actions: {
    openMessage: assign(({ context, event }) =>
      opened(context, context.run + 1, context.maxSteps, 'message', event.type === 'start' && event.allowPriorUnknown),
    ),
    openSuccessor: assign(({ context }) => opened(context, context.run + 1, context.pausedSteps ?? 0, 'handoff', false)),
    newStep: assign(({ context }) => {
      const next = { ...context, stepsUsed: context.stepsUsed + 1, attempt: 1 }
      return {
        stepsUsed: next.stepsUsed,
        attempt: 1,
        facts: plan(context, { type: 'model.requested', stepId: stepIdOf(next), model: 'model', requestDigest: PLACEHOLDER_DIGEST }),
      }
    }),
    retryStep: assign(({ context }) => ({
      attempt: context.attempt + 1,
      facts: plan(context, { type: 'model.requested', stepId: stepIdOf(context), model: 'model', requestDigest: PLACEHOLDER_DIGEST }),
    })),
    complete: assign(({ context, event }) => {
      const calls = event.type === 'model.answer' ? (ANSWER_CALLS[event.answer] ?? []) : []
      const toolCalls = calls.map((kind, index) => ({ callId: callIdOf(context, index), name: kind, arguments: '{}' }))
      return {
        calls,
        callIndex: 0,
        facts: plan(context, { type: 'model.completed', stepId: stepIdOf(context), output: { toolCalls, finishReason: 'tool_calls' } }),
      }
    }),
    completeText: assign(({ context }) => ({
      facts: plan(context, { type: 'model.completed', stepId: stepIdOf(context), output: { text: 'done', toolCalls: [], finishReason: 'stop' } }),
    })),
    rejectUnknowns: assign(({ context }) => {
      let { calls, callIndex } = context
      const rejected: Fact[] = []
      // Calls of no tool, and calls whose input their tool's schema refuses: rejected without running.
      while (calls[0] === 'unknown' || calls[0] === 'invalid') {
        rejected.push(rejection(context, callIndex, calls[0], calls[0] === 'unknown' ? 'unknown_tool' : 'invalid_input'))
        calls = calls.slice(1)
        callIndex += 1
      }
      return { calls, callIndex, facts: plan(context, ...rejected) }
    }),
    // A call of the read-only tool is recorded as one; a call of the tool that needs approval is dispatched once approved.
    dispatch: assign(({ context }) => {
      const operationId = operationIdOf(context, context.callIndex)
      const kind = context.calls[0] ?? 'known'
      return {
        calls: context.calls.slice(1),
        callIndex: context.callIndex + 1,
        inflight: operationId,
        inflightReadOnly: kind === 'readOnly',
        facts: plan(context, {
          type: 'tool.dispatched',
          operationId,
          callId: callIdOf(context, context.callIndex),
          name: kind,
          input: {},
          ...(kind === 'readOnly' ? { readOnly: true as const } : {}),
          ...(kind === 'gated' ? { approval: { by: PATH_APPROVER } } : {}),
        }),
      }
    }),
    denyCall: assign(({ context }) => ({
      calls: context.calls.slice(1),
      callIndex: context.callIndex + 1,
      facts: plan(context, { ...rejection(context, context.callIndex, 'gated', 'denied'), approval: { by: PATH_APPROVER, reason: PATH_DENIAL } }),
    })),
    // A cancel while the approver is asked: that call and the ones after it are rejected `cancelled`, none is run.
    cancelApproval: assign(({ context }) => ({ calls: [], facts: plan(context, ...cancelledCalls(context)) })),
    settle: assign(({ context, event }) => ({
      inflight: null,
      inflightReadOnly: false,
      facts: plan(context, {
        type: 'tool.settled',
        operationId: context.inflight ?? '',
        outcome:
          event.type === 'tool.outcome' && event.outcome === 'succeeds'
            ? { status: 'succeeded', output: {} }
            : { status: 'failed', message: 'the tool threw' },
      }),
    })),
    settleCancelled: assign(({ context }) => {
      const rejected = cancelledCalls(context)
      return {
        inflight: null,
        inflightReadOnly: false,
        calls: [],
        facts: plan(
          context,
          { type: 'tool.settled', operationId: context.inflight ?? '', outcome: { status: 'failed', message: 'the run was cancelled' } },
          ...rejected,
        ),
      }
    }),
    reserve: assign({ reserved: true }),
    unreserve: assign({ reserved: false }),
    enterHold: assign(({ context }) => ({ reserved: false, facts: plan(context, { type: 'hold.entered', handoffId: holdIdOf(context) }) })),
    enterRetryHold: assign(({ context }) => ({ reserved: false, retrying: true, facts: plan(context, { type: 'hold.entered', handoffId: holdIdOf(context) }) })),
    release: assign(({ context }) => ({ rolledBack: true, retrying: false, facts: plan(context, { type: 'hold.released', handoffId: holdIdOf(context) }) })),
    commit: assign(({ context }) => ({
      retrying: false,
      pausedSteps: stepsLeft(context),
      facts: plan(context, ended({ status: 'handoff_paused', pause: pauseOf(context) })),
    })),
    interruptRetryable: assign(({ context }) => ({ facts: plan(context, interrupted(context, 'retryable_failure')) })),
    interruptFailed: assign(({ context }) => ({ facts: plan(context, interrupted(context, 'failed')) })),
    interruptTimedOut: assign(({ context }) => ({ facts: plan(context, interrupted(context, 'timed_out')) })),
    interruptCancelled: assign(({ context }) => ({ facts: plan(context, interrupted(context, 'cancelled')) })),
    endCompleted: assign(({ context }) => ({ facts: plan(context, ended({ status: 'completed' })) })),
    endCancelled: assign(({ context }) => ({ reserved: false, retrying: false, facts: plan(context, ended({ status: 'cancelled', source: 'path' })) })),
    endMaxSteps: assign(({ context }) => ({ reserved: false, facts: plan(context, failed('max_steps')) })),
    endModelFailed: assign(({ context }) => ({ reserved: false, facts: plan(context, failed('model_failed')) })),
    endTimedOut: assign(({ context }) => ({ reserved: false, facts: plan(context, failed('model_timeout')) })),
    endEngineError: assign(({ context }) => ({ reserved: false, facts: plan(context, failed('engine_error')) })),
    // A refusal writes nothing and changes nothing; the action only makes the transition visible to `snapshot.can`.
    refused: assign({}),
    crash: assign({ crashed: true, reserved: false, retrying: false }),
    // What `recoverInvocations` appends for each kind of open invocation (DESIGN §7).
    recoverRequest: assign(({ context }) => ({ facts: plan(context, interrupted(context, 'failed'), failed('host_interrupted')) })),
    recoverIdle: assign(({ context }) => ({ calls: [], facts: plan(context, failed('host_interrupted')) })),
    // A cancel while a tool with effects runs, which throws once told: its call is left dispatched, as a crash leaves it.
    leaveUncertain: assign(({ context }) => ({
      unknown: true,
      reserved: false,
      retrying: false,
      inflight: null,
      inflightReadOnly: false,
      calls: [],
      facts: plan(context, failed('outcome_unknown')),
    })),
    // A read-only tool's outcome is unknown too, but the session need not reconcile it (DESIGN §7).
    recoverTool: assign(({ context }) => ({
      unknown: context.unknown || !context.inflightReadOnly,
      inflight: null,
      inflightReadOnly: false,
      calls: [],
      facts: plan(context, failed('outcome_unknown')),
    })),
  },
}).createMachine({
  id: 'invocationPaths',
  context: ({ input }) => ({
    ...input,
    retries: MODEL_RETRIES,
    run: 0,
    kind: null,
    budget: 0,
    ...runStart(),
    unknown: false,
    crashed: false,
    facts: [],
  }),
  initial: 'idle',
  states: {
    idle: {
      on: {
        start: { guard: 'admits', target: 'opened', actions: 'openMessage' },
        crash: { guard: 'mayCrash', actions: 'crash' },
      },
    },
    opened: {
      always: [{ guard: 'budgetLeft', target: 'started' }, { target: 'ended', actions: 'endMaxSteps' }],
    },
    started: {
      on: {
        request: { target: 'awaitingModel', actions: 'newStep' },
        'hold.reserve': { guard: 'reservesBefore', target: 'held', actions: 'enterHold' },
        cancel: { target: 'ended', actions: 'endCancelled' },
      },
    },
    awaitingModel: {
      on: {
        'model.answer': [
          { guard: 'answersCalls', target: 'calling', actions: ['complete', 'rejectUnknowns'] },
          { guard: 'answersText', target: 'ended', actions: ['completeText', 'endCompleted'] },
          { guard: 'failsAndRetriesReserved', target: 'held', actions: ['interruptRetryable', 'enterRetryHold'] },
          { guard: 'failsAndRetries', target: 'backoff', actions: 'interruptRetryable' },
          { guard: 'fails', target: 'ended', actions: ['interruptFailed', 'endModelFailed'] },
          { guard: 'timesOut', target: 'ended', actions: ['interruptTimedOut', 'endTimedOut'] },
        ],
        'hold.reserve': { guard: 'reservesDuring', actions: 'reserve' },
        'hold.cancel': { guard: 'reserved', actions: 'unreserve' },
        cancel: { target: 'ended', actions: ['interruptCancelled', 'endCancelled'] },
        'log.refuses': { target: 'ended', actions: 'endEngineError' },
        crash: { guard: 'mayCrash', target: 'ended', actions: ['crash', 'recoverRequest'] },
      },
    },
    calling: {
      always: [
        { guard: 'nextCallRuns', target: 'toolRunning', actions: 'dispatch' },
        { guard: 'nextCallGated', target: 'awaitingApproval' },
        { target: 'safePoint' },
      ],
    },
    // The engine asks the run's approver (`onApproval`) and waits: no fact until it decides.
    awaitingApproval: {
      on: {
        approval: [
          { guard: 'approves', target: 'toolRunning', actions: 'dispatch' },
          { target: 'calling', actions: ['denyCall', 'rejectUnknowns'] },
        ],
        'hold.reserve': { guard: 'reservesBefore', actions: 'reserve' },
        'hold.cancel': { guard: 'reserved', actions: 'unreserve' },
        cancel: { target: 'ended', actions: ['cancelApproval', 'endCancelled'] },
        // Never dispatched: recovery ends the run with nothing left unknown.
        crash: { guard: 'mayCrash', target: 'ended', actions: ['crash', 'recoverIdle'] },
      },
    },
    toolRunning: {
      on: {
        'tool.outcome': { target: 'calling', actions: ['settle', 'rejectUnknowns'] },
        'hold.reserve': { guard: 'reservesBefore', actions: 'reserve' },
        'hold.cancel': { guard: 'reserved', actions: 'unreserve' },
        // The path's tool throws once its signal aborts: a read-only call's failure is recorded, a call
        // with effects is left uncertain (the abort may have cut short an effect that happened).
        cancel: [
          { guard: 'inflightReadOnly', target: 'ended', actions: ['settleCancelled', 'endCancelled'] },
          { target: 'ended', actions: 'leaveUncertain' },
        ],
        crash: { guard: 'mayCrash', target: 'ended', actions: ['crash', 'recoverTool'] },
      },
    },
    // As the actor decides at a safe point: a spent budget ends the run before any hold is entered.
    safePoint: {
      always: [
        { guard: 'budgetSpent', target: 'ended', actions: 'endMaxSteps' },
        { guard: 'reserved', target: 'held', actions: 'enterHold' },
        { target: 'awaitingModel', actions: 'newStep' },
      ],
    },
    backoff: {
      on: {
        request: { target: 'awaitingModel', actions: 'retryStep' },
        cancel: { target: 'ended', actions: 'endCancelled' },
        crash: { guard: 'mayCrash', target: 'ended', actions: ['crash', 'recoverIdle'] },
      },
    },
    held: {
      on: {
        'hold.release': [
          { guard: 'retrying', target: 'backoff', actions: 'release' },
          { target: 'safePoint', actions: 'release' },
        ],
        'hold.commit': { target: 'committed', actions: 'commit' },
        cancel: { target: 'ended', actions: 'endCancelled' },
        refusal: { guard: 'refusedWhileHeld', actions: 'refused' },
        crash: { guard: 'mayCrash', target: 'ended', actions: ['crash', 'recoverIdle'] },
      },
    },
    committed: {
      on: {
        successor: { guard: 'succeeds', target: 'opened', actions: 'openSuccessor' },
        refusal: { guard: 'refusedWhileSealed', actions: 'refused' },
        crash: { guard: 'mayCrash', actions: 'crash' },
      },
    },
    ended: {
      on: {
        start: { guard: 'admits', target: 'opened', actions: 'openMessage' },
        refusal: { guard: 'refusedAfterEnd', actions: 'refused' },
        crash: { guard: 'mayCrash', actions: 'crash' },
      },
    },
  },
})

/** Every event variant the model knows; the traversal offers each one the current state accepts. */
export const PATH_EVENTS: readonly PathEvent[] = [
  { type: 'start', allowPriorUnknown: false },
  { type: 'start', allowPriorUnknown: true },
  { type: 'successor' },
  { type: 'request' },
  ...(['known', 'unknown', 'several', 'needsApproval', 'readOnly', 'invalidInput', 'text', 'failure', 'timeout'] as const).map((answer) => ({ type: 'model.answer' as const, answer })),
  { type: 'tool.outcome', outcome: 'succeeds' },
  { type: 'tool.outcome', outcome: 'throws' },
  { type: 'approval', decision: 'approve' },
  { type: 'approval', decision: 'deny' },
  { type: 'hold.reserve', when: 'before' },
  { type: 'hold.reserve', when: 'during' },
  { type: 'hold.cancel' },
  { type: 'hold.release' },
  { type: 'hold.commit' },
  { type: 'cancel' },
  { type: 'log.refuses' },
  ...(['RUN_BUSY', 'HANDOFF_BUSY', 'HANDOFF_MISMATCH', 'RUN_RECONCILIATION_REQUIRED', 'RUN_SOURCE_STALE'] as const).map((code) => ({ type: 'refusal' as const, code })),
  { type: 'crash' },
]
