/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), so that a
// consumer whose tsconfig names no `types` still gets Node's AbortSignal and Headers there, not `any`.
/**
 * `factstate/anthropic`: a `ModelClient` for Anthropic's Messages API. Depends on no Anthropic
 * package: give it a client of `@anthropic-ai/sdk` (`new Anthropic({ apiKey })`).
 *
 * @example
 * ```ts
 * // Anthropic: the default export of the @anthropic-ai/sdk package, installed beside factstate.
 * const anthropic = new Anthropic({ apiKey })
 * // With the run's provider, its baseUrl is checked against the SDK's baseURL, where requests go.
 * const model = new ModelExecutor({ createClient: (provider) => anthropicClient(anthropic, { provider }) })
 * const engine = new Engine({ log, model })
 * await engine.run({ ...settings, mainOutputLimit: 4096, invocation, work })
 * ```
 */
export {
  anthropicClient,
  toMessagesRequest,
  RAW_ARGUMENTS_KEY,
  type AnthropicSdk,
  type AnthropicClientOptions,
  type AnthropicCreateParams,
  type AnthropicRequestOptions,
  type AnthropicResponseWithId,
  type AnthropicApiPromise,
  type AnthropicMessageParam,
  type AnthropicContentBlock,
  type AnthropicTool,
} from './client.js'
