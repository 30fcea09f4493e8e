/**
 * Other agent libraries' words for what a run input or `start`'s options name otherwise (LangGraph,
 * the OpenAI Agents SDK, the Vercel AI SDK, LangChain): an input written in their words is refused
 * with a pointer to factstate's, not only with "unrecognized key". Each pointer says where the
 * setting lives here and, where the two differ in meaning, how; a name with no counterpart here
 * is left out rather than pointed somewhere near.
 */
import { namedHint } from '../options.js'

const TO_INSTRUCTIONS = 'instructions is the system prompt (sent first in every request of the run)'
const TO_MAX_STEPS = 'maxSteps bounds the model requests of a run (1–256, default 8; past them it ends failed{max_steps})'
const TO_SESSION = 'a conversation (a thread) is invocation.sessionId; each run has its own invocation.runId and invocation.invocationId'
const TO_CONTENT = "the user's message is work.content (one message a run: a continuation replays the earlier ones from the log)"
const TO_STREAMING =
  "a run's progress is its facts: log.events({ follow: true }) gives each as it lands, and start's options onModelText and onToolCallText the answer and a tool call's arguments as they stream (onModelReasoning its reasoning), onToolProgress what a running tool reports"
const TO_TOOL_PROGRESS = "a running tool reports with context.progress(value), which start's onToolProgress receives (live, never a fact)"
const TO_SIGNAL = 'a run is cancelled through engine.start(input, { signal }), or running.cancel()'
const TO_OUTPUT_LIMIT = 'mainOutputLimit is the most tokens an answer may take (sent as max_tokens)'

/** Progress callbacks, named alike in a run input and among `start`'s options. */
const STREAMING_NAMES: Readonly<Record<string, string>> = {
  callbacks: TO_STREAMING,
  onstepfinish: TO_STREAMING,
  onfinish: `${TO_STREAMING}; running.wait() gives how the run ended`,
  onchunk: TO_STREAMING,
  streammode: TO_STREAMING,
}

/** Run-input members of other libraries (normalized: `system_prompt`, `systemPrompt` are one), with where the setting is here. */
const RUN_INPUT_NAMES: Readonly<Record<string, string>> = {
  systemprompt: TO_INSTRUCTIONS,
  system: TO_INSTRUCTIONS,
  systemmessage: TO_INSTRUCTIONS,
  statemodifier: TO_INSTRUCTIONS,
  messagesmodifier: TO_INSTRUCTIONS,
  // LangGraph's createReactAgent takes the system prompt as `prompt`; the AI SDK the user's message.
  prompt: `${TO_INSTRUCTIONS}; ${TO_CONTENT}`,
  recursionlimit: `${TO_MAX_STEPS}; LangGraph's recursionLimit counts graph steps, about two a model request with tools`,
  maxturns: TO_MAX_STEPS,
  maxiterations: TO_MAX_STEPS,
  stopwhen: TO_MAX_STEPS,
  threadid: TO_SESSION,
  conversationid: TO_SESSION,
  configurable: TO_SESSION,
  messages: TO_CONTENT,
  input: TO_CONTENT,
  ...STREAMING_NAMES,
  signal: TO_SIGNAL,
  abortsignal: TO_SIGNAL,
  maxtokens: TO_OUTPUT_LIMIT,
  maxoutputtokens: TO_OUTPUT_LIMIT,
  maxcompletiontokens: TO_OUTPUT_LIMIT,
  temperature: 'the request body\'s own settings go in providerOptions ({ temperature: 0 })',
  topp: "the request body's own settings go in providerOptions ({ top_p: 0.9 })",
}

/** `start`'s options in other libraries' words (LangGraph's invoke config, the AI SDK's callbacks), with where the setting is here. */
const START_OPTION_NAMES: Readonly<Record<string, string>> = {
  ...STREAMING_NAMES,
  onevent: TO_STREAMING,
  abortsignal: 'did you mean signal?',
  // Temporal's activity heartbeats, an SDK's progress callback.
  progress: TO_TOOL_PROGRESS,
  heartbeat: TO_TOOL_PROGRESS,
  onheartbeat: TO_TOOL_PROGRESS,
  configurable: `the run input's invocation names the run: ${TO_SESSION}`,
  threadid: `the run input's invocation names the run: ${TO_SESSION}`,
  recursionlimit: `the run input's maxSteps: ${TO_MAX_STEPS}`,
  maxturns: `the run input's maxSteps: ${TO_MAX_STEPS}`,
}

/** Where what another library calls `key` in a run input's top level is here, or undefined. */
export const foreignRunInputHint = (key: string): string | undefined => namedHint(RUN_INPUT_NAMES, key)

/** Where what another library calls `key` among `start`'s options is here, or undefined. */
export const foreignStartOptionHint = (key: string): string | undefined => namedHint(START_OPTION_NAMES, key)

// Other libraries' words for a tool that asks a person before it runs (the Vercel AI SDK's `needsApproval`
// is this one; `requireApproval`-like spellings are TOOL_MEMBER_ALIASES' in run-input.ts). Only names that
// cannot mean anything but "ask first": a tool's own member is left alone, and an MCP tool's
// `annotations: { destructiveHint }` describes the tool without asking for anything.
const TO_NEEDS_APPROVAL =
  "did you mean needsApproval? (true, or a function of the call's input: start's onApproval is asked before each call, and a call it denies is not run)"

/** Tool members of other libraries (normalized), with where the setting is here. */
const TOOL_MEMBER_NAMES: Readonly<Record<string, string>> = {
  approval: TO_NEEDS_APPROVAL,
  requiresconfirmation: TO_NEEDS_APPROVAL,
  requireconfirmation: TO_NEEDS_APPROVAL,
  needsconfirmation: TO_NEEDS_APPROVAL,
  confirm: TO_NEEDS_APPROVAL,
  humanintheloop: TO_NEEDS_APPROVAL,
}

/** Where what another library calls `key` among a tool's members is here, or undefined. */
export const foreignToolMemberHint = (key: string): string | undefined => namedHint(TOOL_MEMBER_NAMES, key)
