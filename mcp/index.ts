/// <reference types="node" preserve="true" />
// Kept in the emitted declarations (`preserve`: TypeScript drops a reference without it), so that a
// consumer whose tsconfig names no `types` still gets Node's AbortSignal there, not `any`.
/**
 * `factstate/mcp`: the tools an MCP server lists, as factstate tools. Depends on no MCP package:
 * give it a connected client of the MCP TypeScript SDK (`@modelcontextprotocol/sdk`, 1.x).
 *
 * @example
 * ```ts
 * // client: an MCP SDK Client, connected (new Client(…), await client.connect(transport))
 * const tools = await toolsFromMcp(client, { prefix: 'files_', timeoutMs: 30_000 })
 * await engine.run({ ...settings, tools, invocation, work })
 * ```
 */
export {
  toolsFromMcp,
  mcpToolName,
  type McpClient,
  type McpTool,
  type McpToolAnnotations,
  type McpToolsOptions,
  type McpListToolsResult,
  type McpCallToolParams,
  type McpCallToolResult,
  type McpRequestOptions,
} from './tools.js'
