/**
 * Keeps a provider's secrets (its API key and header values) out of what reaches facts: error
 * messages of the provider, of the HTTP stack and of custom model clients can quote them. Every
 * configured secret is removed, in the forms it travels in (as is, base64-encoded, the user and
 * password of a Basic credential decoded), and so is every run of 8 or more characters of one
 * (providers echo keys masked, "sk-proj-ab****wxyz").
 */
import type { ProviderConfig } from './model-client.js'
import { messageOf } from '../store/encoding.js'

/** The shortest piece of a secret that is redacted on its own. */
const SECRET_PIECE = 8
/** Secrets shorter than this are not looked for (they would match everyday text). */
const SHORTEST_SECRET = 4

const base64 = (text: string): string[] => {
  const bytes = Buffer.from(text, 'utf8')
  return [bytes.toString('base64').replace(/=+$/, ''), bytes.toString('base64url')]
}

/** Every form of `provider`'s secrets to look for, longest first. */
export function secretsOf(provider: ProviderConfig): string[] {
  const found = new Set<string>()
  const add = (secret: string | undefined) => {
    if (typeof secret !== 'string' || secret.length < SHORTEST_SECRET) return
    found.add(secret)
    for (const encoded of base64(secret)) if (encoded.length >= SHORTEST_SECRET) found.add(encoded)
  }
  add(provider.apiKey)
  for (const value of Object.values(provider.headers ?? {})) {
    add(value)
    // `Bearer <token>`, `Basic <base64 of user:password>`: the credential alone, and a Basic one decoded.
    const [scheme, credential] = value.trim().split(/\s+/, 2)
    if (credential === undefined) continue
    add(credential)
    if (scheme?.toLowerCase() === 'basic') {
      const decoded = Buffer.from(credential, 'base64').toString('utf8')
      add(decoded)
      for (const part of decoded.split(':')) add(part)
    }
  }
  return [...found].sort((a, b) => b.length - a.length)
}

/** `message` with every one of `secrets` (and every piece of one long enough to matter) replaced by `[redacted]`. */
export function redact(message: string, secrets: readonly string[]): string {
  let out = message
  for (const secret of secrets) out = out.split(secret).join('[redacted]')
  for (const secret of secrets) out = redactPieces(out, secret)
  return out
}

/** The message of `error`, redacted of `provider`'s secrets. */
export function redactedMessage(error: unknown, provider: ProviderConfig): string {
  return redact(messageOf(error), secretsOf(provider))
}

/** Replaces every run of at least {@link SECRET_PIECE} characters of `text` that also occurs in `secret`. */
function redactPieces(text: string, secret: string): string {
  if (secret.length < SECRET_PIECE) return text
  let out = ''
  for (let i = 0; i < text.length; ) {
    let longest = 0
    for (let j = 0; j + SECRET_PIECE <= secret.length; j += 1) {
      let k = 0
      while (i + k < text.length && j + k < secret.length && text[i + k] === secret[j + k]) k += 1
      if (k > longest) longest = k
    }
    if (longest >= SECRET_PIECE) {
      out += '[redacted]'
      i += longest
    } else {
      out += text[i]
      i += 1
    }
  }
  return out
}
