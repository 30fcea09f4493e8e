/**
 * The baseline agent loop in LangGraph JS: a model node (an in-process scripted model client, no
 * HTTP) → the prebuilt `ToolNode` with one `echo` tool → back to the model, until the model answers
 * without tool calls. Checkpoints go to `SqliteSaver` on better-sqlite3, with `durability: 'sync'`.
 *
 * Durability: `SqliteSaver.setup()` only switches the database to `journal_mode=WAL`; it leaves
 * `synchronous` at better-sqlite3's build default, which is `NORMAL` in WAL mode
 * (`SQLITE_DEFAULT_WAL_SYNCHRONOUS=1`): commits are not fsynced, so an acknowledged checkpoint can
 * be lost on power failure. For durability equal to factstate's `sync` we set
 * `PRAGMA synchronous=FULL`, which fsyncs the WAL on every commit.
 */
import { AIMessage, HumanMessage } from '@langchain/core/messages'
import { tool } from '@langchain/core/tools'
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import { SqliteSaver } from '@langchain/langgraph-checkpoint-sqlite'
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt'
import Database from 'better-sqlite3'
import { z } from 'zod'
import { STEPS } from './workload.js'

/** The in-process model client of the LangGraph side: the same script as `scriptedClient`. */
function scriptedModel(steps: number) {
  return {
    complete(answered: number): AIMessage {
      if (answered < steps) {
        return new AIMessage({
          content: '',
          tool_calls: [{ id: `call-${answered + 1}`, name: 'echo', args: { value: answered + 1 }, type: 'tool_call' }],
          usage_metadata: { input_tokens: 900, output_tokens: 24, total_tokens: 924 },
        })
      }
      return new AIMessage({ content: 'done', usage_metadata: { input_tokens: 900, output_tokens: 2, total_tokens: 902 } })
    },
  }
}

const echo = tool(async (input: { value: number }) => JSON.stringify(input), {
  name: 'echo',
  description: 'Echoes its input',
  schema: z.object({ value: z.number() }),
})

/** An open LangGraph agent over a SQLite checkpoint file. */
export interface LangGraphAgent {
  /** Runs one invocation (a thread) to its final answer; resolves with the number of messages. */
  invoke(threadId: string): Promise<number>
  /** `PRAGMA synchronous` as `SqliteSaver` left it, before we set FULL. */
  defaultSynchronous: number
  journalMode: string
  close(): void
}

export async function openLangGraphAgent(file: string, steps = STEPS): Promise<LangGraphAgent> {
  const db = new Database(file)
  const saver = new SqliteSaver(db)
  // Any call sets the saver up (tables and its pragmas); read what it left before changing it.
  await saver.getTuple({ configurable: { thread_id: 'setup' } })
  const defaultSynchronous = Number(db.pragma('synchronous', { simple: true }))
  const journalMode = String(db.pragma('journal_mode', { simple: true }))
  db.pragma('synchronous = FULL')
  const model = scriptedModel(steps)
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('model', async (state) => {
      const answered = state.messages.filter((message) => message.getType() === 'ai').length
      return { messages: [model.complete(answered)] }
    })
    .addNode('tools', new ToolNode([echo]))
    .addEdge(START, 'model')
    .addConditionalEdges('model', toolsCondition, ['tools', END])
    .addEdge('tools', 'model')
    .compile({ checkpointer: saver })
  return {
    defaultSynchronous,
    journalMode,
    async invoke(threadId) {
      const out = await graph.invoke(
        { messages: [new HumanMessage('Summarise the open issues of the repository and file a report.')] },
        { configurable: { thread_id: threadId }, durability: 'sync', recursionLimit: 4 * steps + 10 },
      )
      return out.messages.length
    },
    close() {
      db.close()
    },
  }
}
