/**
 * The seam between the engine and a model provider. The engine builds every request in the
 * OpenAI chat-completions shape (that is what the transcript is rebuilt into); a client sends
 * it and answers with a {@link ModelResponse}. A client never throws for provider trouble: it
 * classifies it, so the engine can record it as a `model.interrupted` fact.
 */
import type { Invocation, JsonObject, ModelOutput, ProviderRefusal } from '../facts/types.js'

/** One chat message in the OpenAI chat-completions shape. */
export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | {
      role: 'assistant'
      content: string | null
      tool_calls?: {
        id: string
        type: 'function'
        function: { name: string; arguments: string }
        /** The call's `ToolCall.extraContent` as recorded (Gemini's `thought_signature`); absent when none was. */
        extra_content?: JsonObject
      }[]
      /** The reasoning the provider returned with an answer that made tool calls (`ModelOutput.reasoning`), sent back as it requires. */
      reasoning_content?: string
      /** The answer's `ModelOutput.reasoningDetails` as recorded (OpenRouter's `reasoning_details`), with any answer; absent when none were. */
      reasoning_details?: JsonObject[]
    }
  | { role: 'tool'; tool_call_id: string; content: string }

/** The request body: `model`, `messages`, `tools`, the output limit, and the run's provider options merged in. */
export interface ChatRequestBody {
  /** The run's `provider.model`. */
  model: string
  /** The transcript: `instructions` as a system message, then the user's, the model's and the tools' messages. */
  messages: ChatMessage[]
  /**
   * The run's catalog as OpenAI function tools, in catalog order (`parameters`: the tool's
   * `inputSchema`, or an object schema that takes no members); absent when the run has no tools.
   * Like the whole body, the client's own copy: it may change it.
   */
  tools?: { type: 'function'; function: { name: string; description?: string; parameters: Record<string, unknown> } }[]
  /** The run's `mainOutputLimit`; absent when it has none. */
  max_tokens?: number
  /** The run's `providerOptions`, at the top level (none of them is `model`, `messages`, `tools` or `max_tokens`). */
  [key: string]: unknown
}

/**
 * Which request of which run an attempt is: for a client to tag what it sends and logs (a tracing
 * span, a provider's request metadata, a log line) so that the provider's records and the log's facts
 * can be matched, or to key a cache by. Every member is what the log records for the attempt.
 */
export interface ModelRequestOrigin {
  /** The invocation the request is made for: its session, turn, run and invocation ids. */
  invocation: Invocation
  /** The step, as its `model.requested` facts name it (`step-1`, `step-2`, …). */
  stepId: string
  /** 1 for the step's first attempt, 2 for its first retry, …: one `model.requested` fact each. */
  attempt: number
  /**
   * The `requestDigest` of the step's `model.requested` facts: `sha256:` and the hex SHA-256 of
   * `bodyText`. The same for every attempt of the step, and for the same request sent again by a successor.
   */
  requestDigest: string
}

/** Everything a client needs for one attempt. `bodyText` is the exact bytes to send. */
export interface ModelRequest {
  /**
   * Which request this is (the invocation, step, attempt and request digest the log records for it).
   * The engine sets it on every request it sends; absent only when a client is called directly.
   */
  origin?: ModelRequestOrigin | undefined
  /** `bodyText` parsed: the client's own copy for this attempt (changing it changes nothing of the run). */
  body: ChatRequestBody
  /** `JSON.stringify(body)`: the digest in `model.requested` is over these bytes, and a retry sends them unchanged. */
  bodyText: string
  /** Aborts when the run is cancelled or its log closes, and when the engine gives up on the attempt (past `timeoutMs` + 1 s). */
  signal: AbortSignal
  /** How long the whole attempt may take, from sending the request to the last part of the answer. */
  timeoutMs: number
  /**
   * The longest the provider may send nothing, when the executor sets one (`idleTimeoutMs`): before
   * its answer starts, and between any two parts of it. Past it the client gives up with `timed_out`.
   * A client that does not honour it is held to `timeoutMs` only.
   */
  idleTimeoutMs?: number | undefined
  /**
   * Call it with each piece of the answer's text as it arrives, if the provider streams (optional:
   * a client that never calls it still works, and the engine then passes the recorded text on
   * whole). Pieces are the text only (not a refusal, not tool-call arguments), in order; what the
   * run records is still the `output` the client answers with. Calls after the client has answered are ignored.
   */
  onText?: ((text: string) => void) | undefined
  /**
   * Call it with each piece of the answer's reasoning (thinking) text as it arrives, if the provider
   * streams it (optional, like `onText`: the engine then passes the recorded `reasoning` on whole).
   * Pieces are the reasoning text only, in order; what the run records is still the `reasoning` of
   * the `output` the client answers with. Calls after the client has answered are ignored.
   */
  onReasoning?: ((text: string) => void) | undefined
  /**
   * Call it with each piece of a tool call as it arrives, if the provider streams calls (optional,
   * like `onText`: the engine then passes each recorded call on whole). `index` tells the calls of
   * the answer apart as the provider numbers them; `callId` comes with the piece that first has it,
   * `name` with the piece that first has it and with any piece that changes it (a name the provider
   * streams in parts comes joined so far: a piece's `name` replaces the one before), `arguments`
   * with each piece of the arguments text. A new `callId` at an index in use starts another call.
   * Calls after the client has answered are ignored.
   */
  onToolCall?: ((piece: ToolCallPiece) => void) | undefined
  /**
   * Registers a secret the client holds besides the run's `provider.apiKey` and `provider.headers`
   * (an access token it exchanged its key for, a signed URL): from then on it is removed from
   * everything the run records, as the API key is (in every form it travels in, and its pieces of
   * 8 characters or more from failure messages). Call it before answering with anything that may
   * quote it; again on each attempt is cheap. The engine sets it; absent when a client is called directly.
   * Bounded as the engine's `secrets` are: it throws `MODEL_SECRET_INVALID` (`details.reason`
   * `not_a_string`, `too_short`, `too_long`, `too_many`; the value never quoted) for what is not a
   * string, a secret under 8 characters once trimmed or over 16,384, a 65th one in the run, or one
   * past 65,536 characters together, and adds nothing.
   */
  addSecret?: ((secret: string) => void) | undefined
}

/** A piece of a streamed tool call, as a client passes it on (see `ModelRequest.onToolCall`). */
export interface ToolCallPiece {
  /** The call's place in the answer, as the provider numbers it (from 0). */
  index: number
  /** The call's id, with the piece that first has it. */
  callId?: string | undefined
  /**
   * The tool's name as known so far, with the piece that first has it and with any piece that
   * changes it: it replaces the name of the pieces before. A provider that streams the name in parts
   * (`web_`, then `search`) is passed on joined so far (`web_`, then `web_search`); the built-in
   * client does so.
   */
  name?: string | undefined
  /** The next piece of the arguments' JSON text. */
  arguments?: string | undefined
}

/** How one attempt ended. */
export type ModelResponse =
  | {
      kind: 'completed'
      /** The answer: what `model.completed` records, once redacted of the provider's secrets. */
      output: ModelOutput
    }
  | {
      kind: 'interrupted'
      /** `retryable_failure` for 429, 5xx and connection failures; `failed` for anything retrying cannot fix. */
      status: 'retryable_failure' | 'failed' | 'timed_out' | 'cancelled'
      /** What went wrong, in words: recorded in `model.interrupted` (redacted of the provider's secrets). */
      message: string
      /** True when the provider answered but the answer could not be understood. */
      malformed?: boolean | undefined
      /** From a `retry-after` header, when the provider sent one: the wait before the retry, in milliseconds (capped by `maxBackoffMs`). */
      retryAfterMs?: number | undefined
      /**
       * What the provider said of the refusal: the HTTP status of its error answer, its error's
       * `code`, `type` and `param`, and its id for the request (`requestId`, the answer's
       * `x-request-id` header). Recorded in `model.interrupted` (and, when the run fails of it,
       * in the `failed` outcome) member by member: a member that does not fit (a status that is no
       * HTTP status, a code that is not a string or a whole number, a string over 128 characters, a
       * request id over 256) is dropped, never the answer; strings are redacted of the provider's
       * secrets as `message` is.
       */
      provider?: ProviderRefusal | undefined
    }

/** A provider. Implement this to plug in anything that is not OpenAI-compatible. */
export interface ModelClient {
  /** Sends one attempt and answers how it ended; trouble with the provider is an `interrupted` answer, not a throw. */
  complete(request: ModelRequest): Promise<ModelResponse>
  /**
   * The secrets the client holds itself, besides the run's `provider.apiKey` and `provider.headers`
   * (the API key of an SDK client it wraps, a proxy's token): read once, when the engine makes the
   * client for a run (before the run's first fact is written). They are then the run's secrets as the
   * engine's own `secrets` are, whatever they look like (the client said they are secrets): a run
   * whose recorded settings hold one (a key pasted into the message, the instructions, a tool's
   * description) is refused with `RUN_INVALID_INPUT` (the value never quoted) and nothing is
   * written, and from its first fact on they are removed from the failure messages the run records
   * (in every form and by their pieces) and from its data (whole). A child run one of the run's tools
   * starts on the same engine holds them too, whatever client it runs on. Bounded as `ModelRequest.addSecret` is (each a string of 8 characters or more once
   * trimmed and at most 16,384; 64 and 65,536 characters together, with those it adds later): a
   * client whose `secrets` cannot be read, is not an array, or holds one that does not fit refuses the
   * run (`RUN_INVALID_INPUT`, `details.fields` `['provider']`; for one that does not fit, the error's
   * `cause` is the `MODEL_SECRET_INVALID` that says why). A secret the client gets later (a token it
   * exchanges its key for) it registers with `ModelRequest.addSecret`.
   */
  readonly secrets?: readonly string[] | undefined
}

/** Provider settings of a run. Secrets (`apiKey`, `headers`) stay in memory only. */
export interface ProviderConfig {
  /** The protocol: `'openai-chat'`, OpenAI-compatible chat completions (the only kind). */
  kind: 'openai-chat'
  /**
   * The endpoint's base URL, an http(s) URL without credentials (`https://api.openai.com/v1`);
   * `/chat/completions` is requested under it. Not sealed: a successor may use another.
   */
  baseUrl: string
  /** The model name sent as the request's `model`, 1–256 characters. Recorded and sealed. */
  model: string
  /**
   * Sent as `Authorization: Bearer …` (without one, no such header unless `headers` has its own).
   * Never written to the log, and removed from what facts take from outside. Not sealed.
   */
  apiKey?: string | undefined
  /**
   * Extra HTTP headers sent with every request. Never written to the log; credentials among them are
   * removed from what facts take from outside (see the README's "Secrets stay in memory"). Not sealed.
   */
  headers?: Record<string, string> | undefined
}
