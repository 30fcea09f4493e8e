/**
 * The only way the page builds DOM. Children are nodes or text (always a Text node, its hidden and
 * reordering characters escaped); attributes are set one by one. There is deliberately no way to
 * pass markup: data from the log can never become HTML.
 */

export type Child = Node | string | number | null | undefined | false

export interface Props {
  class?: string
  title?: string
  attrs?: Record<string, string>
  data?: Record<string, string>
  onClick?: (event: MouseEvent) => void
}

// Bidirectional controls reorder what is shown (U+202E before `evil` shows `live`); C0 and C1
// controls, DEL and the line and paragraph separators are invisible. Text from the log (a model's,
// a tool's, an id) shows them escaped (`\u202e`), as the CLI does; tabs, line feeds and carriage
// returns stay, for the payloads' lines.
const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g
const escapeHidden = (char: string) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`

/** `text` with the characters that would hide or reorder what it shows escaped. */
export function visible(text: string): string {
  return text.replace(HIDDEN, escapeHidden)
}

function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    parent.appendChild(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(visible(String(child))) : child)
  }
}

function applyProps(node: Element, props: Props): void {
  if (props.class) node.setAttribute('class', props.class)
  if (props.title !== undefined) node.setAttribute('title', visible(props.title))
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    // Event-handler attributes would be code: they are never set from here.
    if (name.toLowerCase().startsWith('on')) throw new TypeError(`refusing attribute ${name}`)
    node.setAttribute(name, value)
  }
  for (const [name, value] of Object.entries(props.data ?? {})) node.setAttribute(`data-${name}`, value)
  if (props.onClick) node.addEventListener('click', props.onClick as EventListener)
}

/** An HTML element with text-only children. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag)
  applyProps(node, props)
  append(node, children)
  return node
}

const SVG_NS = 'http://www.w3.org/2000/svg'

/** An SVG element with text-only children. */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag)
  applyProps(node, props)
  append(node, children)
  return node
}

/** Replaces every child of `parent`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren()
  append(parent, children)
}

/** The element with `id`, which the document is known to have. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id)
  if (!node) throw new Error(`the page has no #${id}`)
  return node as T
}
