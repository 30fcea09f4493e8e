import { contentDigest } from '../store/digest.js'
import type { ToolCatalogSummary } from '../facts/types.js'

/** A tool the model may call. Its `execute` runs at most once per dispatched call. */
export interface ToolDefinition {
  name: string
  description?: string
  /** A JSON Schema object describing the input, sent to the model as the function's parameters. */
  inputSchema?: object
  execute(input: unknown, context: ToolContext): Promise<unknown>
}

/** What a tool is given besides its input. `operationId` is stable across crashes: use it as an idempotency key. */
export interface ToolContext {
  signal: AbortSignal
  operationId: string
}

/** JSON with object keys sorted, so that equal values have one text. */
export function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => stableJson(item ?? null)).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, member]) => member !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([key, member]) => `${JSON.stringify(key)}:${stableJson(member)}`).join(',')}}`
  }
  return JSON.stringify(value)
}

/** The catalog summary sealed into a pause: a digest over each tool's name, description and input schema (not its code). */
export function catalogOf(tools: readonly ToolDefinition[]): ToolCatalogSummary {
  const described = tools.map((tool) => ({ name: tool.name, description: tool.description ?? null, inputSchema: tool.inputSchema ?? null }))
  return { catalogDigest: contentDigest(stableJson(described)), names: tools.map((tool) => tool.name) }
}

/** The catalog as OpenAI function tools. */
export function functionTools(tools: readonly ToolDefinition[]) {
  return tools.map((tool) => ({
    type: 'function' as const,
    function: {
      name: tool.name,
      ...(tool.description === undefined ? {} : { description: tool.description }),
      parameters: (tool.inputSchema ?? { type: 'object', properties: {} }) as Record<string, unknown>,
    },
  }))
}
