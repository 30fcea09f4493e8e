/**
 * A running tool's progress (`context.progress(value)`), passed on live to the run's
 * `onToolProgress`: a deploy's stage, a crawl's page count. Never a fact: it is not written, and a
 * crash, a reconnecting page or another process gets none of it but what `liveToolProgress()` holds.
 */
import { FactstateError } from '../errors.js'
import type { JsonValue } from '../facts/types.js'
import { MAX_DEPTH, messageOf, wellFormed } from '../store/encoding.js'
import { kindOf } from '../options.js'
import { deliver } from './model-text.js'
import { type Secrets, redactDeep } from './redaction.js'

/** The most a progress value may hold, in UTF-8 bytes of its JSON text. */
export const MAX_TOOL_PROGRESS_BYTES = 65_536

/** One progress update of a running tool call, as `StartOptions.onToolProgress` gets it. */
export interface ToolProgressUpdate {
  /** The invocation whose call this is. */
  invocationId: string
  /** The step whose answer made the call (`step-1`, …), as the call's facts name it. */
  stepId: string
  /** The call's operation id (`<invocationId>/<stepId>/<index>`), as its `tool.dispatched` records it. */
  operationId: string
  /** The call's id, as the model's answer and the call's facts name it. */
  callId: string
  /** The tool. */
  name: string
  /** The attempt that reported it (from 1; above 1 only for a tool with `retry`). */
  attempt: number
  /**
   * The log seq of the call's `tool.dispatched` fact, durable before the tool started, so before any
   * of its updates: a reader of the log can always find it.
   */
  dispatchedSeq: number
  /** The update's place among the call's updates passed on, from 0, over all its attempts, with no number skipped. */
  index: number
  /** What the tool passed, as JSON makes it, redacted of the run's secrets as its recorded result would be. */
  value: JsonValue
}

/**
 * A `JSON.stringify` replacer that writes a BigInt as its decimal text, as a tool's result and its
 * progress are made JSON: database clients return ids as BigInt, and JSON has no such type.
 */
export const bigIntAsText = (_key: string, value: unknown): unknown => (typeof value === 'bigint' ? value.toString() : value)

const refused = (reason: 'not_json' | 'too_large' | 'too_deep', why: string) =>
  new FactstateError('TOOL_PROGRESS_INVALID', `context.progress ${why}; nothing was passed on`, { details: { reason } })

/**
 * The JSON text of a progress value, as a tool's result is made JSON (a Date as its text, a BigInt
 * as its decimal text, an undefined member dropped, `undefined` itself as `null`), or
 * `TOOL_PROGRESS_INVALID`: not JSON, over {@link MAX_TOOL_PROGRESS_BYTES}, or nested deeper than a
 * fact may be (what JSON.stringify threw quoted through `redactMessage`, as a tool's failure is).
 * Checked whether or not anyone listens, so a tool behaves the same with a page attached.
 */
export function progressText(value: unknown, redactMessage: (text: string) => string): string {
  let text: string | undefined
  try {
    text = JSON.stringify(value ?? null, bigIntAsText)
  } catch (error) {
    // What a getter or a toJSON threw may quote a secret: the tool's error is often logged by the application.
    throw refused('not_json', `takes a value JSON can encode, and this one cannot be (${redactMessage(messageOf(error))})`)
  }
  // Its kind, never what it holds: `an object` whose toJSON gives undefined, `a function`, `a symbol`.
  if (text === undefined) throw refused('not_json', `takes a value JSON can encode, not ${kindOf(value)}`)
  // Counted only when it could be over: a character takes 1 to 3 bytes.
  if (text.length * 3 > MAX_TOOL_PROGRESS_BYTES) {
    const bytes = Buffer.byteLength(text)
    if (bytes > MAX_TOOL_PROGRESS_BYTES) {
      throw refused('too_large', `takes at most ${MAX_TOOL_PROGRESS_BYTES.toLocaleString('en-US')} bytes of JSON, not ${bytes.toLocaleString('en-US')}: pass a summary (counts, a stage), not the data`)
    }
  }
  if (depthOf(text) > MAX_DEPTH) throw refused('too_deep', `takes a value nested at most ${MAX_DEPTH} levels deep`)
  return text
}

/** How deeply JSON `text` nests arrays and objects, read from the text (no recursion, nothing built). */
function depthOf(text: string): number {
  let depth = 0
  let deepest = 0
  let inString = false
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i)
    if (inString) {
      if (code === 0x5c) i += 1
      else if (code === 0x22) inString = false
    } else if (code === 0x22) inString = true
    else if (code === 0x5b || code === 0x7b) deepest = Math.max(deepest, ++depth)
    else if (code === 0x5d || code === 0x7d) depth -= 1
  }
  return deepest
}

/** A lone surrogate as JSON.stringify writes it (`\ud800`): only then is the value made well-formed. */
const ESCAPED_SURROGATE = /\\ud[89a-f]/i

/** The value a progress text stands for, redacted as recorded data is. */
export function progressValue(text: string, secrets: Secrets): JsonValue {
  const value = JSON.parse(text) as JsonValue
  return redactDeep(ESCAPED_SURROGATE.test(text) ? wellFormed(value) : value, secrets)
}

/** A call the board passes updates on for: its ids, and its latest update once it has one. */
interface BoardEntry {
  call: Omit<ToolProgressUpdate, 'attempt' | 'index' | 'value'>
  latest: ToolProgressUpdate | undefined
}

/**
 * The progress of a run's calls running now, for a run started with `onToolProgress` (a run without
 * it has none): each update passed on as it comes, the latest of each call kept until it settles
 * (`RunningInvocation.liveToolProgress`).
 */
export class ToolProgressBoard {
  /** The calls running now, in the order they were dispatched. */
  readonly #running = new Set<BoardEntry>()

  constructor(private readonly receiver: (update: ToolProgressUpdate) => unknown) {}

  /**
   * A call whose dispatch is durable: `report` passes on each update of it (a checked text, see
   * {@link progressText}) redacted of the secrets as they stand then; `end` forgets it, once it has settled.
   */
  open(call: BoardEntry['call']): { report: (text: string, attempt: number, secrets: Secrets) => void; end: () => void } {
    const entry: BoardEntry = { call, latest: undefined }
    this.#running.add(entry)
    return {
      report: (text, attempt, secrets) => {
        if (!this.#running.has(entry)) return
        const update: ToolProgressUpdate = { ...call, attempt, index: entry.latest === undefined ? 0 : entry.latest.index + 1, value: progressValue(text, secrets) }
        // Counted as it is passed on, whatever the receiver does with it; the receiver's copy is its own.
        entry.latest = update
        deliver(() => this.receiver({ ...update, value: structuredClone(update.value) }))
      },
      end: () => {
        this.#running.delete(entry)
      },
    }
  }

  /** The latest update of each call running now that has reported one, in the order they were dispatched: copies. */
  live(): ToolProgressUpdate[] {
    const updates: ToolProgressUpdate[] = []
    for (const { latest } of this.#running) if (latest !== undefined) updates.push({ ...latest, value: structuredClone(latest.value) })
    return updates
  }
}
