/**
 * Keeps a provider's secrets (its API key and header values) out of what reaches facts: error
 * messages of the provider, of the HTTP stack, of custom model clients and of tools can quote them,
 * and a provider (or a proxy before it) can echo them in an answer. Every configured secret is
 * removed, in the forms it travels in: as is, base64-encoded (at any byte offset of a longer encoded
 * text, so "Bearer <key>" encoded is found too), hex, URL-encoded, and the user and password of a
 * Basic credential decoded. For the API key and for credentials (a header whose name says it holds
 * one, and in it the credential after an authorization scheme) every run of 8 or more characters of
 * any of those forms goes too: providers echo keys masked ("sk-proj-ab****wxyz") or cut. Other header
 * values (a referer, an application title) are removed whole, not piece by piece: their pieces are
 * everyday text ("https://"). Data (answers, tool results) loses only credentials that look like
 * keys, whole (see {@link Secrets.inData}); a tool call's arguments keep parsing ({@link redactAnswer}).
 *
 * Finding the pieces costs time in proportion to the message, not to the message times the secret:
 * every 8-character window of every form is hashed once, and the message is scanned with a rolling
 * hash of the same width.
 *
 * Everywhere, a text is also read once with its JSON escapes (any mix of `\uXXXX` and the
 * two-character ones, as PHP and Python write JSON) and its percent-encoded bytes read (see
 * `redactEscaped`), every run of integers in an array as UTF-16 code units and, where they are
 * bytes, as Latin-1, UTF-8 and UTF-16LE text (see `redactRun`), and a Buffer or a typed array as
 * bytes (see `redactBytes`): msgpack stores a small integer in one byte, so a run of them is the
 * text itself in the log's files, whatever else the array holds. A text holding a NUL is read
 * without its NULs too (see `redactNuls`: UTF-16 read a byte a character), and a number in data
 * whose decimal text holds a secret of digits becomes `[redacted]` (see `numericOf`). A string in an array is read with
 * the integers below 128 after it, a key with an integer value below 128 (see `joined`): msgpack
 * writes their bytes one after the other. Last, data a fact records is searched for the secrets'
 * bytes as the log writes it (see {@link holdsSecretBytes}), which msgpack's own bytes can complete.
 */
import type { ModelOutput } from '../facts/types.js'
import type { ProviderConfig } from './model-client.js'
import { FactstateError } from '../errors.js'
import { messageOf, packedValue } from '../store/encoding.js'
import { kindOf } from '../options.js'

/** The shortest piece of a secret that is redacted on its own. */
const SECRET_PIECE = 8
/**
 * The shortest credential removed from data (answers, tool results), where only credentials that
 * look like keys are looked for, whole: at least this long, with a letter and a digit. A placeholder
 * key ("anything", "lm-studio", "sk-no-key-required") is everyday text there, and a key is echoed
 * whole there, not masked or cut.
 */
const DATA_SECRET = 16
const looksLikeKey = (secret: string) => secret.length >= DATA_SECRET && /[0-9]/.test(secret) && /[A-Za-z]/.test(secret)
/** Secrets shorter than this are not looked for (they would match everyday text). */
const SHORTEST_SECRET = 4
export const REDACTED = '[redacted]'

/**
 * The header names an engine's own secrets (`EngineOptions.secrets`) go under among a run's provider
 * headers, for redaction only (no header name has a space, so none is sent). From failure messages
 * (the provider's, the HTTP stack's, a model client's) each goes in every form and by its pieces, as
 * a credential does; from data (answers, tool results and errors, approvers' text, the run's settings
 * at admission) whole, as it is, trimmed or JSON-escaped, whether or not it looks like a key: the
 * application said it is a secret. Not by pieces or encoded forms there: the hex of "2024" is the
 * number 32303234, and "password" a word, so a piece could change a tool's arguments or refuse an
 * ordinary message.
 */
export const DECLARED_SECRET = 'engine secret '

/**
 * The header names a run's tools' secrets (`ToolContext.addSecret`) go under: declared secrets (see
 * {@link DECLARED_SECRET}), numbered in the order they were added.
 */
const TOOL_SECRET = `${DECLARED_SECRET}added by a tool `
/** The header names the secrets a child run holds from the run whose tool started it go under (see {@link passedOn}). */
const PARENT_SECRET = `${DECLARED_SECRET}of the parent run `

/**
 * The header names the secrets a run's model client declares it holds (`ModelClient.secrets`) go
 * under: declared secrets (see {@link DECLARED_SECRET}), looked for whatever they look like, as the
 * engine's own are. Counted with those the client adds (`CLIENT_SECRET`, see {@link withClientSecret}).
 */
const CLIENT_DECLARED = `${DECLARED_SECRET}of the model client `

/**
 * What a child run one of a run's tools starts holds too (see {@link withPassedOn}): the secrets the
 * run's tools added (`ToolContext.addSecret`), its model client's (`ModelClient.secrets` and
 * `ModelRequest.addSecret`), its provider's credentials that look like keys (`provider.apiKey`, a
 * credential header's value), and those it holds from its own parent run. A tool that got a token at
 * run time, or read the supervisor's key, may pass it on in the child's message, which the child
 * records; and a child run may use another client, which knows nothing of them. Each once.
 */
export function passedOn(secrets: Secrets): string[] {
  const headers = Object.entries(secrets.from?.headers ?? {})
  const held = headers.flatMap(([name, value]) =>
    name.startsWith(TOOL_SECRET) || name.startsWith(PARENT_SECRET) || name.startsWith(CLIENT_DECLARED) || name.startsWith(CLIENT_SECRET) ? [value] : [],
  )
  // The provider's own, as data loses them: a placeholder key ("lm-studio") is no secret to pass on.
  const provider = { apiKey: secrets.from?.apiKey, headers: Object.fromEntries(headers.filter(([name]) => !name.startsWith(DECLARED_SECRET) && !name.startsWith(CLIENT_SECRET))) }
  const keys = provider.apiKey === undefined && Object.keys(provider.headers).length === 0 ? [] : [...formsFrom(provider, false).keys]
  return [...new Set([...held, ...keys])]
}

/** `declared` (an engine's secrets, as `DECLARED_SECRET` headers) with `inherited` (see {@link passedOn}) as declared secrets too, those it holds already left out. */
export function withPassedOn(declared: Record<string, string>, inherited: readonly string[]): Record<string, string> {
  const known = new Set(Object.values(declared))
  const added = inherited.filter((secret) => !known.has(secret))
  if (added.length === 0) return declared
  return { ...declared, ...Object.fromEntries(added.map((secret, index) => [`${PARENT_SECRET}${index}`, secret])) }
}

/** The most secrets a run's tools may add (as many as an engine takes: `EngineOptions.secrets`). */
export const MAX_TOOL_SECRETS = 64
/**
 * The longest secret an engine (`EngineOptions.secrets`) or a run's tools (`ToolContext.addSecret`)
 * may declare, in characters, as given (spaces around it counted: it is looked for as given too):
 * bearer tokens and JWTs with many claims, a 4096-bit RSA key with its certificate (~5.2 KB) fit.
 */
export const MAX_SECRET_LENGTH = 16_384
/**
 * The most characters the engine's secrets may hold together, and the most a run's tools may add
 * together: looking for a secret's pieces and encoded forms costs time in proportion to its length
 * for every text a run records (64 tokens of 4 KB took 9 to 14 s to add, 64 of 2 KB 3 to 4.5 s), so
 * the bound is on the sum, not on each.
 */
export const MAX_SECRETS_TOTAL = 65_536

/** The most secrets a run's model client may add (`ModelRequest.addSecret`): as many as its tools may. */
const MAX_CLIENT_SECRETS = MAX_TOOL_SECRETS

/** The header names a run's model client's secrets (`ModelRequest.addSecret`) go under, numbered in the order they were added. */
const CLIENT_SECRET = 'client secret '

/**
 * `secrets` with `secret`, which the run's model client holds besides its provider's key and headers
 * (`ModelClient.secrets` at admission, `ModelRequest.addSecret` after), added as a credential header is: removed from failure messages in every
 * form and by its pieces, from data whole when it looks like a key. The same secrets when it was
 * added already (clients call it on every attempt). Bounded as declared secrets are: not a string
 * (`not_a_string`), shorter than 8 characters once trimmed (`too_short`), longer than
 * {@link MAX_SECRET_LENGTH} characters (`too_long`), or past
 * {@link MAX_CLIENT_SECRETS} secrets or {@link MAX_SECRETS_TOTAL} characters together in the run
 * (`too_many`): `MODEL_SECRET_INVALID`, thrown to the client, never quoting the value (a secret of
 * 256 KB took 3.1 s and 430 MB to add). Built from the new secret alone and laid over the run's, as
 * {@link withToolSecret} does: rebuilding them all at each addition made 64 secrets of 1 KB cost 12 s.
 * `by` names what gave it, in the refusal's message.
 */
export function withClientSecret(secrets: Secrets, secret: unknown, by = 'request.addSecret'): Secrets {
  const refused = (reason: SecretRefusal, why: string) => new FactstateError('MODEL_SECRET_INVALID', `${by} ${why}; the value is not shown`, { details: { reason } })
  // Named as no header of the provider's can be (admission refuses a name with a space); a credential by its name.
  const added = headersWith(secrets, secret, CLIENT_SECRET, MAX_CLIENT_SECRETS, refused, CLIENT_SECRETS)
  if (added === undefined) return secrets
  const { headers, name, secret: text } = added
  const { whole, pieced, data } = formsFrom({ headers: { [name]: text } })
  const inData = layered(secrets.inData, [...data], [])
  const all = layered(secrets, [...whole], [...pieced]) as { inData?: Secrets; inToolFailures?: Secrets; from?: SecretSource }
  all.inData = inData
  // A tool's failure message loses what data loses, and the declared secrets it lost before.
  if (secrets.inToolFailures !== undefined) all.inToolFailures = layered(secrets.inToolFailures, [...data], [])
  all.from = { apiKey: secrets.from?.apiKey, headers }
  return all as Secrets
}

/**
 * `secrets` with `secret`, which the run's model client declares it holds (`ModelClient.secrets`,
 * read when the client is made), added as a declared secret (see {@link DECLARED_SECRET}), as the
 * engine's own are: removed from data whole whatever it looks like (as it is, trimmed or
 * JSON-escaped), and from failure messages, a tool's included, in every form and by its pieces. The
 * client said it is a secret: one that does not look like a key (`correct-horse-battery-staple`) is
 * its credential all the same. Bounded, and counted with what the client adds later, as
 * {@link withClientSecret} is (`MODEL_SECRET_INVALID`, `by` naming what gave it).
 */
export function withDeclaredClientSecret(secrets: Secrets, secret: unknown, by = 'ModelClient.secrets'): Secrets {
  const refused = (reason: SecretRefusal, why: string) => new FactstateError('MODEL_SECRET_INVALID', `${by} ${why}; the value is not shown`, { details: { reason } })
  const added = headersWith(secrets, secret, CLIENT_DECLARED, MAX_CLIENT_SECRETS, refused, CLIENT_SECRETS)
  if (added === undefined) return secrets
  return withDeclared(secrets, added.headers, added.secret)
}

/** The header names of a run's model client's secrets, declared (`ModelClient.secrets`) and added (`ModelRequest.addSecret`): counted together. */
const CLIENT_SECRETS = [CLIENT_DECLARED, CLIENT_SECRET] as const

/**
 * The secrets a run's model client holds (`ModelClient.secrets`, or added with `ModelRequest.addSecret`),
 * under the header names they have among the run's secrets (see {@link withClientSecret} and
 * {@link withDeclaredClientSecret}): what the run's recorded settings are looked through for at
 * admission, as its provider's credential is (the declared ones whatever they look like).
 */
export function clientSecretsOf(secrets: Secrets): Record<string, string> {
  return Object.fromEntries(Object.entries(secrets.from?.headers ?? {}).filter(([name]) => CLIENT_SECRETS.some((prefix) => name.startsWith(prefix))))
}

/** Why a secret a run adds (`context.addSecret`, `ModelRequest.addSecret`) is refused. */
type SecretRefusal = 'not_a_string' | 'too_short' | 'too_long' | 'too_many'

/**
 * The run's secret headers with `secret` added, under `name` (`prefix` and its number among those
 * added so far), or undefined when it was added already. Refused (`refused`, its message never
 * quoting the value) when it is not a string (`not_a_string`: a client or tool whose token is a
 * Buffer, or undefined before its exchange, would otherwise believe it redacted), shorter than
 * 8 characters once trimmed (`too_short`: it would be removed from everyday text, inside words,
 * wherever it appears), longer than {@link MAX_SECRET_LENGTH} characters (`too_long`), or past `most`
 * secrets or {@link MAX_SECRETS_TOTAL} characters added together (`too_many`).
 */
function headersWith(
  secrets: Secrets,
  secret: unknown,
  prefix: string,
  most: number,
  refused: (reason: SecretRefusal, why: string) => FactstateError,
  /** The header names counted together with `prefix`'s (a client's declared and added secrets). */
  counted: readonly string[] = [prefix],
): { headers: Record<string, string>; name: string; secret: string } | undefined {
  // Its kind, never what it holds (a Buffer of the token would be quoted otherwise): `an object`, not `a object`.
  if (typeof secret !== 'string') throw refused('not_a_string', `takes a string, not ${kindOf(secret)}`)
  if (secret.trim().length < SECRET_PIECE) throw refused('too_short', `takes a secret of ${SECRET_PIECE} characters or more (spaces around it not counted)`)
  if (secret.length > MAX_SECRET_LENGTH) {
    throw refused('too_long', `takes a secret of at most ${MAX_SECRET_LENGTH.toLocaleString('en-US')} characters, not ${secret.length.toLocaleString('en-US')} (each is looked for, in every form, in all the run records)`)
  }
  const headers = { ...secrets.from?.headers }
  const added = Object.keys(headers).filter((name) => counted.some((group) => name.startsWith(group)))
  if (added.some((name) => headers[name] === secret)) return undefined
  if (added.length >= most) throw refused('too_many', `was given more than ${most} secrets in one run`)
  const total = added.reduce((sum, name) => sum + (headers[name] as string).length, secret.length)
  if (total > MAX_SECRETS_TOTAL) {
    throw refused('too_many', `was given secrets of more than ${MAX_SECRETS_TOTAL.toLocaleString('en-US')} characters together in one run (${total.toLocaleString('en-US')} with this one)`)
  }
  const name = `${prefix}${added.length}`
  headers[name] = secret
  return { headers, name, secret }
}

/**
 * `secrets` with `secret`, which a tool got while it ran, added as a declared secret (see
 * {@link DECLARED_SECRET}): removed from data whole, and from failure messages in every form and by
 * its pieces. The same secrets when it was added already. `TOOL_SECRET_INVALID` for what is not a
 * string of 8 characters or more once trimmed and at most {@link MAX_SECRET_LENGTH} (as
 * `EngineOptions.secrets` takes), or past {@link MAX_TOOL_SECRETS} or {@link MAX_SECRETS_TOTAL} characters
 * together; the message never quotes the value.
 */
export function withToolSecret(secrets: Secrets, secret: unknown): Secrets {
  const refused = (reason: SecretRefusal, why: string) => new FactstateError('TOOL_SECRET_INVALID', `context.addSecret ${why}; the value is not shown`, { details: { reason } })
  const added = headersWith(secrets, secret, TOOL_SECRET, MAX_TOOL_SECRETS, refused)
  if (added === undefined) return secrets
  return withDeclared(secrets, added.headers, added.secret)
}

/** `secrets` with `text` added as a declared secret (see {@link withToolSecret}), `headers` the run's secret headers with it. */
function withDeclared(secrets: Secrets, headers: Record<string, string>, text: string): Secrets {
  // Built from the new secret alone and laid over the run's (as `buildSecrets` would build them all with
  // it, as a declared secret): rebuilding every secret at each addition costs the run's secrets times
  // the additions (64 tokens of 1.2 KB took 90 s and 1.2 GB so).
  const forms = new Set<string>()
  const data = new Set<string>()
  for (const value of new Set([text, text.trim()])) {
    for (const form of formsOf(value)) forms.add(form)
    data.add(value)
    data.add(JSON.stringify(value).slice(1, -1))
  }
  const inData = layered(secrets.inData, [...data], [])
  const inToolFailures = layered(secrets.inToolFailures ?? secrets.inData, [...data, ...forms], [...forms])
  const all = layered(secrets, [...forms], [...forms]) as { inData?: Secrets; inToolFailures?: Secrets; from?: SecretSource }
  all.inData = inData
  all.inToolFailures = inToolFailures
  all.from = { apiKey: secrets.from?.apiKey, headers }
  return all as Secrets
}

/**
 * `base` with `whole` (removed whole) and `pieced` (by their pieces too) added: a new object whose
 * pieces are looked for in `base`'s index and in one of its own. That own index is the run's (made by
 * an earlier addition to these secrets, never one `secretsOf` shares between runs): it is added to in
 * place, so a run's additions cost what they hold, not that times their number.
 */
function layered(base: Secrets, whole: readonly string[], pieced: readonly string[]): Secrets {
  const merged = [...new Set([...base.whole, ...whole])].sort((a, b) => b.length - a.length)
  let pieces = base.pieces
  if (pieced.length > 0) {
    if (pieces !== undefined && runIndexes.has(pieces)) pieces.add(pieced)
    else {
      pieces = new PieceIndex(pieced, pieces)
      runIndexes.add(pieces)
    }
  }
  const secrets: { whole: string[]; pieces: PieceIndex | undefined; inData?: Secrets } = { whole: merged, pieces }
  secrets.inData = secrets as Secrets
  return secrets as Secrets
}

/** The piece indexes {@link layered} made for a run's additions: added to in place (see there). */
const runIndexes = new WeakSet<PieceIndex>()

/** Header names that say the value is a credential: its pieces are redacted too. */
const CREDENTIAL_HEADER = /auth|key|token|secret|passw|cookie|signature|credential|bearer/i
/** Authorization schemes: in `<scheme> <credential>`, the credential is a secret of its own. */
const AUTH_SCHEME = /^(bearer|basic|token|apikey|api-key|key|digest|dpop|hmac|hoba|mutual|negotiate|ntlm|aws4-hmac-sha256|sharedkey|sharedkeylite|gsslogin)$/i

/** A provider's secrets, ready to be looked for (see {@link secretsOf}). */
export interface Secrets {
  /** Removed wherever they occur whole, longest first. */
  readonly whole: readonly string[]
  /** Every 8-character window of the forms whose pieces are removed too, by rolling hash. */
  readonly pieces: PieceIndex | undefined
  /**
   * What is removed from data (the model's answers, what tools return or throw, an abort reason):
   * credentials that look like keys (see `looksLikeKey`), as they are and JSON-escaped, whole. A
   * header that is not a credential (`content-type: application/json`), a placeholder key (`none`,
   * `anything`), a Basic user name or a piece shared with another token of the same issuer is
   * everyday data there, and removing it would change a tool's arguments; in a failure message
   * they go too.
   */
  readonly inData: Secrets
  /**
   * What is removed from a tool's failure message (what it throws, or why its result could not be
   * recorded) when the engine declared secrets of its own (`EngineOptions.secrets`): `inData`, and the
   * declared secrets in every form and by their pieces, as from a failure message (a payment SDK's
   * error echoes its key masked, cut or in a Basic header). Absent without declared secrets: `inData`.
   */
  readonly inToolFailures?: Secrets | undefined
  /**
   * The credentials these were built from, for adding one more (`ModelRequest.addSecret`) without
   * every run keeping its provider: kept here, on secrets shared by the runs of one provider.
   */
  readonly from?: SecretSource | undefined
}

/** What secrets are built from: a provider's `apiKey` and `headers` (see {@link secretsOf}). */
export type SecretSource = Pick<ProviderConfig, 'apiKey' | 'headers'>

const NO_SECRETS: Secrets = (() => {
  const none: { whole: string[]; pieces: undefined; inData?: Secrets } = { whole: [], pieces: undefined }
  none.inData = none as Secrets
  return Object.freeze(none) as Secrets
})()

function secretsFrom(whole: Set<string>, pieced: Set<string>, inData: Secrets | undefined, from?: SecretSource): Secrets {
  if (whole.size === 0) return NO_SECRETS
  const secrets: { whole: string[]; pieces: PieceIndex | undefined; inData?: Secrets; from?: SecretSource } = {
    whole: [...whole].sort((a, b) => b.length - a.length),
    pieces: pieced.size === 0 ? undefined : new PieceIndex([...pieced]),
    ...(from === undefined ? {} : { from: { apiKey: from.apiKey, headers: from.headers === undefined ? undefined : { ...from.headers } } }),
  }
  secrets.inData = inData ?? (secrets as Secrets)
  return secrets as Secrets
}

/** The forms `secret` travels in: as is, base64 at each byte offset (both alphabets), hex, URL-encoded. */
function formsOf(secret: string): string[] {
  const forms = [secret]
  const bytes = Buffer.from(secret, 'utf8')
  for (let offset = 0; offset < 3; offset += 1) {
    // Encoded after `offset` other bytes, the characters of the groups that hold only the secret's
    // bytes are the same whatever surrounds it: the first group (shared with what came before) and
    // the last one (shared with what follows, or padding) are dropped.
    const encoded = Buffer.concat([Buffer.alloc(offset), bytes]).toString('base64')
    const whole = Math.floor((offset + bytes.length) / 3) * 4
    const stable = encoded.slice(offset === 0 ? 0 : 4, whole)
    forms.push(stable, stable.replace(/\+/g, '-').replace(/\//g, '_'))
  }
  forms.push(bytes.toString('hex'), bytes.toString('hex').toUpperCase(), encodeURIComponent(secret))
  // An encoded form of a short secret can be 4 characters ("RGVt" of "Demo"): common in any base64 text.
  return forms.filter((form, index) => (index === 0 ? form.length >= SHORTEST_SECRET : form.length >= SECRET_PIECE))
}

/**
 * Secrets built lately, by what they were built from (in memory only, as the provider itself is): a
 * run start builds them twice (the engine and the OpenAI client), and a 2 KB token takes ~20 ms and
 * ~2.5 MB. The few most recently used are kept.
 */
const built = new Map<string, Secrets>()
const BUILT_KEPT = 4

/** Every form of `provider`'s secrets to look for. */
export function secretsOf(provider: SecretSource | ProviderConfig): Secrets {
  if (provider.apiKey === undefined && provider.headers === undefined) return NO_SECRETS
  return keptIn(built, provider, () => buildSecrets(provider))
}

/**
 * What `cache` keeps for `source`'s credentials (in memory only, as the provider itself is), built
 * with `build` when it holds none; the `BUILT_KEPT` most recently used are kept.
 */
function keptIn(cache: Map<string, Secrets>, source: SecretSource, build: () => Secrets): Secrets {
  const key = JSON.stringify([source.apiKey ?? null, Object.entries(source.headers ?? {})])
  const found = cache.get(key)
  if (found !== undefined) {
    cache.delete(key)
    cache.set(key, found)
    return found
  }
  const secrets = build()
  if (cache.size >= BUILT_KEPT) cache.delete(cache.keys().next().value as string)
  cache.set(key, secrets)
  return secrets
}

/**
 * What data loses of `source`'s secrets (its `Secrets.inData`: credentials that look like keys and
 * declared secrets whatever they look like, as they are, trimmed and JSON-escaped, whole), built
 * without the forms and pieces failure messages are looked through for, which data never is. A run's
 * start looks its recorded settings and tools through with these: building them whole (every
 * 8-character window of every encoded form indexed) cost what building the run's own secrets does,
 * for each set, at every start whose credentials were not among the few built lately.
 */
export function dataSecretsOf(source: SecretSource): Secrets {
  if (source.apiKey === undefined && source.headers === undefined) return NO_SECRETS
  // Kept as `secretsOf` keeps what it builds: what looks a text through (its byte and form indexes)
  // is made once for one list of secrets, so the starts of runs with the same credentials share it.
  return keptIn(dataBuilt, source, () => secretsFrom(formsFrom(source, false).data, new Set(), undefined))
}

/** What {@link dataSecretsOf} built lately, by what it was built from (in memory only). */
const dataBuilt = new Map<string, Secrets>()

/**
 * `secrets` (data's, see {@link dataSecretsOf}) with `more` added as declared secrets are, as they
 * are, trimmed and JSON-escaped, whole. The last one made over `secrets` is kept with it, for the
 * next start of a run with the same secrets.
 */
export function dataSecretsWith(secrets: Secrets, more: readonly string[]): Secrets {
  const key = JSON.stringify(more)
  const kept = dataAdded.get(secrets)
  if (kept?.key === key) return kept.secrets
  const data = new Set<string>()
  for (const secret of more) {
    for (const value of new Set([secret, secret.trim()])) {
      if (value.length < SHORTEST_SECRET) continue
      data.add(value)
      data.add(JSON.stringify(value).slice(1, -1))
    }
  }
  const added = data.size === 0 ? secrets : layered(secrets.inData, [...data], [])
  dataAdded.set(secrets, { key, secrets: added })
  return added
}

/** The last {@link dataSecretsWith} of each set of secrets. */
const dataAdded = new WeakMap<Secrets, { key: string; secrets: Secrets }>()

function buildSecrets(provider: SecretSource): Secrets {
  const { whole, pieced, data, declared } = formsFrom(provider)
  const secrets = secretsFrom(whole, pieced, secretsFrom(data, new Set(), undefined), provider)
  if (declared.size > 0) {
    const inToolFailures = secretsFrom(new Set([...data, ...declared]), declared, undefined)
    ;(secrets as { inToolFailures?: Secrets }).inToolFailures = inToolFailures
  }
  return secrets
}

/**
 * What a provider's credentials are looked for as: `whole`, every form removed whole; `pieced`, the
 * forms removed by their pieces too; `data`, what is removed from data (as is and JSON-escaped);
 * `declared`, the forms of declared secrets (see {@link DECLARED_SECRET}).
 */
function formsFrom(provider: SecretSource, encoded = true): { whole: Set<string>; pieced: Set<string>; data: Set<string>; declared: Set<string>; keys: Set<string> } {
  const whole = new Set<string>()
  const pieced = new Set<string>()
  /** What data is redacted of: credentials that look like keys, as they are and JSON-escaped. */
  const data = new Set<string>()
  /** Declared secrets' forms, and which are removed by their pieces too, in tool failures (see `Secrets.inToolFailures`). */
  const declared = new Set<string>()
  /**
   * `credential`: every run of 8 characters of it too (not of `Bearer <token>` whole, whose pieces are
   * everyday text: `pieces` false); `inData`: removed from data too, when it looks like a key.
   */
  const add = (given: string | undefined, credential: boolean, pieces = credential, inData = credential) => {
    if (typeof given !== 'string') return
    // Sent trimmed (fetch trims header values), so echoed trimmed: a key read from a file with its newline.
    for (const secret of new Set([given, given.trim()])) {
      if (secret.length < SHORTEST_SECRET) continue
      for (const form of encoded ? formsOf(secret) : []) {
        whole.add(form)
        if (pieces) pieced.add(form)
      }
      if (inData && looksLikeKey(secret)) data.add(secret)
    }
  }
  add(provider.apiKey, true)
  for (const [name, value] of Object.entries(provider.headers ?? {})) {
    if (typeof value !== 'string') continue
    if (name.startsWith(DECLARED_SECRET)) {
      for (const secret of new Set([value, value.trim()])) {
        if (secret.length < SHORTEST_SECRET) continue
        for (const form of encoded ? formsOf(secret) : []) {
          whole.add(form)
          pieced.add(form)
          declared.add(form)
        }
        data.add(secret)
      }
      continue
    }
    const credential = CREDENTIAL_HEADER.test(name)
    // `Bearer <token>`, `Basic <base64 of user:password>`: the value whole, the credential alone, and a Basic one decoded.
    const [scheme, token] = value.trim().split(/\s+/, 2)
    // Only where the name says it is a credential: "Key Management Assistant" is a title, not a scheme and a key.
    const schemed = credential && scheme !== undefined && token !== undefined && AUTH_SCHEME.test(scheme)
    add(value, credential, credential && !schemed)
    if (!credential || token === undefined) continue
    add(token, true)
    // Whatever follows the scheme, and every value in it: a cookie's (`session=<id>; other=<v>`), a
    // signature's (`AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=<hex>`).
    const rest = value.trim().slice((scheme ?? '').length).trim()
    if (schemed) add(rest, true, false)
    for (const [index, part] of value.trim().split(/[\s;,]+/).entries()) {
      if (schemed && index === 0) continue
      const equals = part.indexOf('=')
      const named = (equals === -1 ? part : part.slice(equals + 1)).replace(/^"|"$/g, '')
      if (named.length >= SECRET_PIECE) add(named, true)
    }
    if (scheme?.toLowerCase() === 'basic') {
      const decoded = Buffer.from(token, 'base64').toString('utf8')
      const colon = decoded.indexOf(':')
      add(decoded, true, true, false)
      // The user name is a name (an e-mail address, `CORP\\svc`): looked for in messages, not in data.
      add(decoded.slice(0, colon === -1 ? decoded.length : colon), true, true, false)
      if (colon !== -1) add(decoded.slice(colon + 1), true)
    }
  }
  /** The credentials themselves, as given (and trimmed), before their JSON-escaped forms join `data`. */
  const keys = new Set(data)
  // In data, also as JSON writes them (a key with a quote or a backslash in a tool result's text).
  for (const secret of [...data]) data.add(JSON.stringify(secret).slice(1, -1))
  return { whole, pieced, data, declared, keys }
}

/** `message` with every secret (and every piece of one that is looked for piece by piece) replaced by `[redacted]`. */
export function redact(message: string, secrets: Secrets, nuls = true): string {
  if (secrets.whole.length === 0) return message
  // Escapes read first: a piece of an encoded form redacted first (`%2F%C3%A4…` of the URL-encoded one in a
  // text percent-encoded byte by byte) would leave the rest of the secret to be read in no form.
  let out = redactEscaped(message, secrets)
  // Not for bytes read as text (`redactBytes`, `redactRun`): they are read as UTF-16 there, and keep that encoding.
  if (nuls && out.includes('\0')) out = redactNuls(out, secrets)
  for (const secret of secrets.whole) if (out.includes(secret)) out = out.split(secret).join(REDACTED)
  return secrets.pieces === undefined ? out : secrets.pieces.redact(out)
}

/**
 * `text` (holding a NUL) redacted of what it holds of `secrets` once its NULs are left out: a text
 * with a NUL beside every character (`"s\0k\0-\0…"`, UTF-16 read a byte a character, as a proxy's
 * body or a model's answer can carry it) is written by msgpack as UTF-8, which for ASCII is the
 * secret's UTF-16LE bytes (`"\0s\0k…"` its UTF-16BE ones) in the log's files, and no form of it as
 * text. What is found (only where a NUL is inside it: the rest is found as written) is replaced
 * with its NULs by `[redacted]`; the text is otherwise kept as it is. Failure messages lose their
 * NULs before (`redactFailure`); this is for data, where a NUL is kept.
 */
function redactNuls(text: string, secrets: Secrets): string {
  /** Where each character of the text read without NULs is in `text`. */
  const at = new Int32Array(text.length + 1)
  let read = ''
  let count = 0
  let copied = 0
  for (let index = text.indexOf('\0'); index !== -1; index = text.indexOf('\0', index + 1)) {
    for (let from = copied; from < index; from += 1) at[count++] = from
    read += text.slice(copied, index)
    copied = index + 1
  }
  for (let from = copied; from < text.length; from += 1) at[count++] = from
  read += text.slice(copied)
  const found: number[] = []
  for (const secret of secrets.whole) {
    for (let start = read.indexOf(secret); start !== -1; start = read.indexOf(secret, start + secret.length)) found.push(start, start + secret.length)
  }
  if (secrets.pieces !== undefined) found.push(...secrets.pieces.spans(read))
  /** [from, to) in `text`, of those with a NUL inside, in order, overlapping ones joined. */
  const spans: [number, number][] = []
  for (let index = 0; index < found.length; index += 2) {
    const from = at[found[index] as number] as number
    const to = (at[(found[index + 1] as number) - 1] as number) + 1
    if (to - from !== (found[index + 1] as number) - (found[index] as number)) spans.push([from, to])
  }
  if (spans.length === 0) return text
  spans.sort((a, b) => a[0] - b[0])
  let out = ''
  let end = 0
  for (const [from, to] of spans) {
    if (from < end) {
      if (to > end) end = to
      continue
    }
    out += text.slice(end, from) + REDACTED
    end = to
  }
  return out + text.slice(end)
}

/**
 * `text` redacted of what it holds of `secrets` once its escapes are read (see {@link unescaped}): a
 * secret written with JSON escapes for some or all of its characters (`\/`, `\u002F`, `\u00e4` as
 * PHP's json_encode and Python's json.dumps write them) or percent-encoded byte by byte (`%73%6b…`,
 * upper or lower hex, also where `encodeURIComponent` would have left a character as it is). What
 * is found is removed from `text` as written (its escapes with it); the rest stays as written.
 * Linear in the text (one pass to read the escapes), then as {@link redact} is on the text read.
 */
function redactEscaped(text: string, secrets: Secrets): string {
  const relevant = charactersOf(secrets.whole)
  // Nothing to read unless a `\u`, a `%` or a two-character escape of a secret's character is there: JSON text
  // in a string has a `\"` every few characters, which no secret holds.
  const short = SHORT_ESCAPED.some((code) => relevant.has(code))
  if (!text.includes('\\u') && !text.includes('%') && !(short && text.includes('\\'))) return text
  const read = unescaped(text, relevant)
  if (read === undefined) return text
  const found: number[] = []
  for (const secret of secrets.whole) {
    for (let at = read.text.indexOf(secret); at !== -1; at = read.text.indexOf(secret, at + secret.length)) found.push(at, at + secret.length)
  }
  if (secrets.pieces !== undefined) found.push(...secrets.pieces.spans(read.text))
  // Only what was written with an escape: the rest is redacted as it is written, as before (see `redact`).
  const spans: number[] = []
  for (let index = 0; index < found.length; index += 2) {
    const from = found[index] as number
    const to = found[index + 1] as number
    if (read.at(to) - read.at(from) !== to - from) spans.push(from, to)
  }
  if (spans.length === 0) return text
  // In order of their starts, overlapping ones joined, each as the part of `text` it was read from.
  const order = Array.from({ length: spans.length / 2 }, (_, index) => index).sort((a, b) => (spans[2 * a] as number) - (spans[2 * b] as number))
  let out = ''
  let copied = 0
  let end = -1
  let start = -1
  const flush = () => {
    if (start === -1) return
    out += text.slice(copied, read.at(start)) + REDACTED
    copied = read.at(end)
  }
  for (const index of order) {
    const from = spans[2 * index] as number
    const to = spans[2 * index + 1] as number
    if (start !== -1 && from < end) {
      if (to > end) end = to
      continue
    }
    flush()
    start = from
    end = to
  }
  flush()
  return out + text.slice(copied)
}

/** The characters (UTF-16 code units) of some secrets' forms, by their list (built once for each). */
const characters = new WeakMap<readonly string[], Set<number>>()
function charactersOf(forms: readonly string[]): ReadonlySet<number> {
  let found = characters.get(forms)
  if (found === undefined) {
    found = new Set()
    for (const form of forms) for (let index = 0; index < form.length; index += 1) found.add(form.charCodeAt(index))
    characters.set(forms, found)
  }
  return found
}

const hexDigit = (code: number): number => (code >= 48 && code <= 57 ? code - 48 : (code | 32) >= 97 && (code | 32) <= 102 ? (code | 32) - 87 : -1)

/**
 * `text` with its JSON escapes (`\uXXXX` in either case, and the two-character ones) and its
 * percent-encoded UTF-8 (`%XX` in either case, a multi-byte character's bytes together) read, one
 * level, left to right (`\\u0041` is a backslash and "u0041"), and `at`, where a character read
 * starts in `text` (its length for the end); `undefined` when it holds none. Only escapes of
 * `relevant` characters (those of the secrets looked for) are read: JSON text within JSON has an
 * escape every few characters (`\"`, `\n`), and reading them all took ~0.5 s for 5 MB. Linear: the text is
 * looked at from one backslash or percent sign to the next, and each escape is noted.
 */
function unescaped(text: string, relevant: ReadonlySet<number>): { text: string; at: (index: number) => number } | undefined {
  /** Each escape: where its characters start in what is read, how many, and where it starts in `text`, how long. */
  let escapes = new Int32Array(64)
  let noted = 0
  let out = ''
  let read = 0
  let copied = 0
  let slash = text.indexOf('\\')
  let percent = text.indexOf('%')
  while (slash !== -1 || percent !== -1) {
    const index = slash === -1 ? percent : percent === -1 ? slash : Math.min(slash, percent)
    const found = escapeAt(text, index)
    const next = found === -1 ? index + 1 : index + escapedLength
    // One that stands for no character of a secret is left as written (it cannot be part of one), and skipped whole.
    const decoded = found !== -1 && relevant.has(found) ? (escapedText ?? String.fromCharCode(found)) : undefined
    if (decoded !== undefined) {
      read += index - copied
      out += index > copied ? text.slice(copied, index) + decoded : decoded
      if (noted + 4 > escapes.length) {
        const grown = new Int32Array(escapes.length * 2)
        grown.set(escapes)
        escapes = grown
      }
      escapes[noted] = read
      escapes[noted + 1] = decoded.length
      escapes[noted + 2] = index
      escapes[noted + 3] = escapedLength
      noted += 4
      read += decoded.length
      copied = next
    }
    if (slash !== -1 && slash < next) slash = text.indexOf('\\', next)
    if (percent !== -1 && percent < next) percent = text.indexOf('%', next)
  }
  if (noted === 0) return undefined
  out += text.slice(copied)
  const at = (index: number): number => {
    // The last escape whose characters start at or before `index`.
    let low = 0
    let high = noted / 4 - 1
    let found = -1
    while (low <= high) {
      const middle = (low + high) >> 1
      if ((escapes[4 * middle] as number) <= index) {
        found = middle
        low = middle + 1
      } else high = middle - 1
    }
    if (found === -1) return index
    const from = escapes[4 * found] as number
    const count = escapes[4 * found + 1] as number
    const origin = escapes[4 * found + 2] as number
    const unit = escapes[4 * found + 3] as number
    return index < from + count ? origin : origin + unit + (index - from - count)
  }
  return { text: out, at }
}

/** The length of the escape {@link escapeAt} read last, and what it read when that is more than one code unit. */
let escapedLength = 0
let escapedText: string | undefined

/** What the two-character JSON escapes stand for. */
const SHORT_ESCAPED = [34, 47, 92, 8, 12, 10, 13, 9]

/** The code unit a JSON escape's second character stands for (`\n`: 10), or -1. */
function shortEscape(code: number): number {
  switch (code) {
    case 34:
    case 47:
    case 92:
      return code
    case 98:
      return 8
    case 102:
      return 12
    case 110:
      return 10
    case 114:
      return 13
    case 116:
      return 9
    default:
      return -1
  }
}

/**
 * The escape at `index` of `text` (a backslash or a percent sign) read: its first code unit, or -1
 * for none; its length in `escapedLength`, and what it read in `escapedText` when that is two code
 * units (a percent-encoded character beyond the BMP).
 */
function escapeAt(text: string, index: number): number {
  escapedText = undefined
  if (text.charCodeAt(index) === 92) {
    const next = text.charCodeAt(index + 1)
    if (next !== 117) {
      escapedLength = 2
      return shortEscape(next)
    }
    escapedLength = 6
    const a = hexDigit(text.charCodeAt(index + 2))
    const b = hexDigit(text.charCodeAt(index + 3))
    const c = hexDigit(text.charCodeAt(index + 4))
    const d = hexDigit(text.charCodeAt(index + 5))
    return a < 0 || b < 0 || c < 0 || d < 0 ? -1 : ((a * 16 + b) * 16 + c) * 16 + d
  }
  const lead = percentByte(text, index)
  const count = lead < 0 ? 0 : lead < 0x80 ? 1 : lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0
  escapedLength = 3 * count
  if (count === 0) return -1
  if (count === 1) return lead
  const bytes = [lead]
  for (let more = 1; more < count; more += 1) {
    const next = percentByte(text, index + 3 * more)
    if (next < 0x80 || next > 0xbf) return -1
    bytes.push(next)
  }
  const decoded = Buffer.from(bytes).toString('utf8')
  // An overlong or surrogate encoding reads as U+FFFD: left as written.
  if (decoded.includes('\ufffd')) return -1
  if (decoded.length > 1) escapedText = decoded
  return decoded.charCodeAt(0)
}

/** The byte `%XX` at `index` of `text` stands for (either case of hex), or -1. */
function percentByte(text: string, index: number): number {
  if (text.charCodeAt(index) !== 37) return -1
  const high = hexDigit(text.charCodeAt(index + 1))
  const low = hexDigit(text.charCodeAt(index + 2))
  return high < 0 || low < 0 ? -1 : high * 16 + low
}

/**
 * A failure message redacted of `secrets` (see {@link redact}), its NUL characters left out first: an
 * error body in UTF-16 (a proxy's error page, say), which fetch reads as UTF-8, has a NUL beside every
 * character, so a key it echoes would match no form of the key, and be written with NULs in between.
 */
export function redactFailure(message: string, secrets: Secrets): string {
  return redact(message.includes('\0') ? message.replaceAll('\0', '') : message, secrets)
}

/** The message of `error`, redacted of `provider`'s secrets. */
export function redactedMessage(error: unknown, provider: ProviderConfig): string {
  return redact(messageOf(error), secretsOf(provider))
}

/**
 * `value` with every string in it (at any depth of arrays and plain objects, keys included)
 * redacted, every run of integers in an array read as text (see `redactRun`), and every Buffer and
 * typed array redacted as bytes (see `redactBytes`: a Buffer stays one); the same value when nothing
 * changed. Linear in the value.
 */
export function redactDeep<T>(value: T, secrets: Secrets): T {
  if (secrets.whole.length === 0) return value
  const shortest = shortestOf(secrets)
  const numeric = numericOf(secrets.whole)
  const walk = (item: unknown): unknown => {
    if (typeof item === 'string') return redact(item, secrets)
    // A number whose decimal text holds a secret of digits (an account number, a PIN): a fact stores it as a
    // number, which `factstate log` prints as those digits. Only looked at when a secret is such text.
    if (typeof item === 'number') return numeric.length > 0 && holdsNumber(item, numeric) ? REDACTED : item
    if (Array.isArray(item)) {
      const length = item.length
      /** The runs of integers from 0 to 65,535 at least `shortest` long: [from, to, from, to, …]. */
      const runs: number[] = []
      /** Elements walked that changed, by index (a string followed by integers that ended a secret holds them now). */
      let changed: Map<number, unknown> | undefined
      /** Integers read into the string before them (see `joined`): [from, to, …], left out of the copy. */
      let absorbed: number[] | undefined
      /** Where the run of integers from 0 to 65,535 being read began (-1: none); other elements are walked. */
      let from = -1
      for (let index = 0; index <= length; index += 1) {
        // Not read past its end (V8 makes such a read slow).
        const element: unknown = index < length ? item[index] : undefined
        if (index < length && typeof element === 'number' && element >= 0 && element <= 0xffff && Number.isInteger(element)) {
          if (from === -1) from = index
          continue
        }
        if (from !== -1) {
          if (index - from >= shortest) runs.push(from, index)
          from = -1
        }
        if (index === length) break
        let next = walk(element)
        if (typeof next === 'string' && index + 1 < length && isByteInteger(item[index + 1])) {
          // msgpack writes a string's bytes and then an integer below 128 as its one byte: read together.
          const read = joined(next, item, index + 1, secrets)
          if (read !== undefined) {
            next = read.text
            ;(absorbed ??= []).push(index + 1, index + 1 + read.count)
            changed ??= new Map()
            changed.set(index, next)
            index += read.count
            continue
          }
        }
        if (next !== element) (changed ??= new Map()).set(index, next)
      }
      const redactedRuns = runs.length === 0 ? undefined : redactRuns(item as number[], runs, secrets, shortest)
      if (changed === undefined && redactedRuns === undefined) return item
      // Copied only when something in it changed: runs as redacted, elements as walked, the rest as it was.
      const out: unknown[] = []
      let run = 0
      let skip = 0
      for (let index = 0; index < length; index += 1) {
        if (absorbed !== undefined && skip < absorbed.length && index === absorbed[skip]) {
          index = (absorbed[skip + 1] as number) - 1
          skip += 2
          continue
        }
        if (run < runs.length && index === runs[run]) {
          const units = redactedRuns?.get(run / 2)
          if (units !== undefined) {
            for (const unit of units) out.push(unit)
            index = (runs[run + 1] as number) - 1
            run += 2
            continue
          }
          run += 2
        }
        out.push(changed?.has(index) ? changed.get(index) : item[index])
      }
      return out
    }
    const prototype = item !== null && typeof item === 'object' ? Object.getPrototypeOf(item) : undefined
    if (prototype === Object.prototype || prototype === null) {
      let changed = false
      const entries: [string, unknown][] = []
      for (const [key, element] of Object.entries(item as object)) {
        let name = redact(key, secrets)
        let next = walk(element)
        if (isByteInteger(element)) {
          // msgpack writes a key's bytes and then an integer value below 128 as its one byte: read together.
          const read = joined(name, [element], 0, secrets)
          if (read !== undefined) {
            name = read.text
            next = REDACTED
          }
        }
        if (name !== key || next !== element) changed = true
        entries.push([name, next])
      }
      if (!changed) return item
      // Defined, not assigned (an own `__proto__` member stays a member), and two names that redact
      // alike both kept: the second becomes "[redacted] (2)".
      const out: Record<string, unknown> = {}
      for (const [name, next] of entries) {
        let unique = name
        for (let n = 2; Object.hasOwn(out, unique); n += 1) unique = `${name} (${n})`
        Object.defineProperty(out, unique, { value: next, enumerable: true, writable: true, configurable: true })
      }
      return out
    }
    if (ArrayBuffer.isView(item) && item.byteLength >= shortest) {
      // A Buffer or typed array given as it is (msgpack would store its bytes as they are): the same kind back.
      const redacted = redactBytes(Buffer.from(item.buffer, item.byteOffset, item.byteLength), secrets)
      if (redacted === undefined) return item
      if (Buffer.isBuffer(item)) return Buffer.from(redacted)
      if (item instanceof Uint8ClampedArray) return new Uint8ClampedArray(redacted)
      if (item instanceof Int8Array) return new Int8Array(redacted.buffer.slice(redacted.byteOffset, redacted.byteOffset + redacted.byteLength))
      // Wider elements than a byte: the redacted bytes, as bytes.
      return new Uint8Array(redacted)
    }
    return item
  }
  return walk(value) as T
}

/** Forms that a number's decimal text can hold (digits, a sign, a point, an exponent), by the list of forms. */
const numerics = new WeakMap<readonly string[], readonly string[]>()
function numericOf(forms: readonly string[]): readonly string[] {
  let found = numerics.get(forms)
  if (found === undefined) {
    found = forms.filter((form) => /^[-+0-9.eE]+$/.test(form) && /[0-9]/.test(form))
    numerics.set(forms, found)
  }
  return found
}

/** Whether `value`'s decimal text (as JSON writes it) holds one of `numeric` (see `numericOf`; sorted longest first). */
const holdsNumber = (value: number, numeric: readonly string[]): boolean => {
  // An integer whose text, its sign included, is shorter than the shortest form cannot: most counts and ids, not written out.
  if (Number.isInteger(value) && Math.abs(value) < 10 ** ((numeric.at(-1) as string).length - 2)) return false
  const text = String(value)
  return numeric.some((form) => text.includes(form))
}

/**
 * The fewest characters a secret looked for can be found in: its shortest form (they are sorted
 * longest first), or a piece of one. A shorter run of numbers, or a shorter Buffer, cannot hold one.
 */
const shortestOf = (secrets: Secrets): number => Math.min((secrets.whole.at(-1) as string).length, secrets.pieces === undefined ? Infinity : SECRET_PIECE)

/** An integer msgpack writes as one byte, the byte itself (0 to 127; not -0, which it writes as a float). */
const isByteInteger = (value: unknown): value is number =>
  typeof value === 'number' && value >= 0 && value <= 0x7f && Number.isInteger(value) && !Object.is(value, -0)

/**
 * `text` (a string already redacted) read together with the integers from 0 to 127 from `at` of
 * `items` (as many as could end a secret begun in it: fewer than its longest form's length), as
 * msgpack writes them, the string's bytes followed at once by the integers' (`["sk-proj-ab", 99,
 * 100, …]`, `{ "sk-proj-abc…": 100 }`): `undefined` when that holds no secret, else the string with
 * the integers up to the end of the last secret begun in it as its last characters, redacted, and
 * how many integers it took.
 */
function joined(text: string, items: readonly unknown[], at: number, secrets: Secrets): { text: string; count: number } | undefined {
  const most = (secrets.whole[0] as string).length - 1
  let count = 0
  while (count < most && at + count < items.length && isByteInteger(items[at + count])) count += 1
  if (count === 0) return undefined
  if (secrets.pieces === undefined) {
    // A secret ends in the integers only at a character one ends with: most integers end none.
    const ends = endingsOf(secrets.whole)
    let ending = false
    for (let index = at; index < at + count && !ending; index += 1) ending = ends.has(items[index] as number)
    if (!ending) return undefined
  }
  // Only the end of the string can begin a secret that the integers end.
  const kept = Math.max(0, text.length - most)
  const read = text.slice(kept) + String.fromCharCode(...(items.slice(at, at + count) as number[]))
  // As written only: escapes in it are not the secret's bytes in the log's files (the string alone was read with them).
  // And only a secret that begins in the string and ends in the integers: one in the integers alone is theirs to lose.
  const across = text.length - kept
  const spans = secrets.pieces === undefined ? [] : secrets.pieces.spans(read)
  let pieced = false
  for (let index = 0; index < spans.length; index += 2) if ((spans[index] as number) < across && (spans[index + 1] as number) > across) pieced = true
  if (!pieced && !holdsForm(read, secrets.whole, across)) return undefined
  // Only the integers up to the end of the last secret that crosses into them: those after it stay
  // numbers, and in their run (a secret they begin is read there, not left half in the string).
  let end = across
  for (let index = 0; index < spans.length; index += 2) if ((spans[index] as number) < across && (spans[index + 1] as number) > across) end = Math.max(end, spans[index + 1] as number)
  for (const form of secrets.whole) for (let at = Math.max(0, across - form.length + 1); at < across; at += 1) if (read.startsWith(form, at)) end = Math.max(end, at + form.length)
  const taken = read.slice(0, end)
  const redacted = redact(taken, secrets)
  return redacted === taken ? undefined : { text: text.slice(0, kept) + redacted, count: end - across }
}

/**
 * The forms of some secrets by the hash of their first characters (as many as the shortest has), by
 * their list (see `holdsForm`). The hash is taken modulo 2^32 (Math.imul), which rolls as any
 * polynomial hash does, and a table of its top 16 bits says at once whether a window can be a form's.
 */
interface FormIndex {
  width: number
  /** FORM_HASH_BASE ** (width - 1) modulo 2^32: the weight of a window's first character. */
  lead: number
  forms: Map<number, string[]>
  present: Uint8Array
}
const FORM_HASH_BASE = 0x01000193
const formIndexes = new WeakMap<readonly string[], FormIndex>()
function formIndexOf(forms: readonly string[]): FormIndex {
  let index = formIndexes.get(forms)
  if (index === undefined) {
    const width = (forms.at(-1) as string).length
    let lead = 1
    for (let at = 1; at < width; at += 1) lead = Math.imul(lead, FORM_HASH_BASE)
    index = { width, lead, forms: new Map(), present: new Uint8Array(0x10000) }
    for (const form of forms) {
      const hash = hashOf(form, width)
      index.present[hash >>> 16] = 1
      const found = index.forms.get(hash)
      if (found === undefined) index.forms.set(hash, [form])
      else found.push(form)
    }
    formIndexes.set(forms, index)
  }
  return index
}

function hashOf(text: string, width: number): number {
  let hash = 0
  for (let index = 0; index < width; index += 1) hash = (Math.imul(hash, FORM_HASH_BASE) + text.charCodeAt(index)) | 0
  return hash
}

/**
 * Whether one of `forms` (sorted longest first) occurs in `text`: one pass with a rolling hash,
 * whatever their number. With `across`, only where one begins before that index and ends after it.
 */
function holdsForm(text: string, forms: readonly string[], across?: number): boolean {
  const { width, lead, forms: byHash, present } = formIndexOf(forms)
  const length = text.length
  if (length < width) return false
  let hash = hashOf(text, width)
  for (let at = 0; ; at += 1) {
    if (across !== undefined && at >= across) return false
    if (present[hash >>> 16] === 1) {
      const candidates = byHash.get(hash)
      if (candidates !== undefined) for (const form of candidates) if (text.startsWith(form, at) && (across === undefined || at + form.length > across)) return true
    }
    if (at + width >= length) return false
    hash = (Math.imul(hash - Math.imul(text.charCodeAt(at), lead), FORM_HASH_BASE) + text.charCodeAt(at + width)) | 0
  }
}

/**
 * Whether `redact(text, secrets)` could change `text` (true whenever it would; now and then when it
 * would not, which only costs a closer look): its secrets' forms looked for in one pass each, in the
 * text as written and as its escapes read, where `redact` looks for each form in turn.
 */
function holdsSecret(text: string, secrets: Secrets): boolean {
  if (secrets.whole.length === 0) return false
  if (holdsForm(text, secrets.whole)) return true
  if (secrets.pieces !== undefined && secrets.pieces.spans(text).length > 0) return true
  const relevant = charactersOf(secrets.whole)
  const short = SHORT_ESCAPED.some((code) => relevant.has(code))
  if (!text.includes('\\u') && !text.includes('%') && !(short && text.includes('\\'))) return false
  const read = unescaped(text, relevant)
  if (read === undefined) return false
  return holdsForm(read.text, secrets.whole) || (secrets.pieces !== undefined && secrets.pieces.spans(read.text).length > 0)
}

/** The last characters (code units) of some secrets' forms, by their list. */
const endings = new WeakMap<readonly string[], Set<number>>()
function endingsOf(forms: readonly string[]): ReadonlySet<number> {
  let found = endings.get(forms)
  if (found === undefined) {
    found = new Set(forms.map((form) => form.charCodeAt(form.length - 1)))
    endings.set(forms, found)
  }
  return found
}

/** How many runs are read one by one once the runs together were found to hold a secret (see `redactRuns`). */
const RUNS_ONE_BY_ONE = 32

/**
 * The runs of `items` (`runs`: [from, to, …], each as `redactRun` takes it) redacted, by their
 * number among `runs` (only those that changed), or `undefined` when none held a secret. Read
 * together first (see `runsHold`: every reading `redactRun` makes of them, each in one text, the
 * runs apart by a character no secret holds), and one by one only among those that hold one, found
 * by halving: an array of a million short runs is read in a few passes, not a million, whatever the
 * number of secrets. The same result as reading each run alone.
 */
function redactRuns(
  items: readonly number[],
  runs: readonly number[],
  secrets: Secrets,
  shortest: number,
  one: (from: number, to: number) => Iterable<number> | undefined = (from, to) => redactRun(items, from, to, secrets, shortest),
  codeUnits = true,
): Map<number, Iterable<number>> | undefined {
  let found: Map<number, Iterable<number>> | undefined
  const visit = (first: number, end: number): void => {
    if (end - first > 1 && !runsHold(items, runs, first, end, secrets, shortest, codeUnits)) return
    if (end - first > RUNS_ONE_BY_ONE) {
      const middle = (first + end) >> 1
      visit(first, middle)
      visit(middle, end)
      return
    }
    for (let run = first; run < end; run += 1) {
      const units = one(runs[2 * run] as number, runs[2 * run + 1] as number)
      if (units !== undefined) (found ??= new Map()).set(run, units)
    }
  }
  visit(0, runs.length / 2)
  return found
}

/** The character between runs read together: one no secret holds (U+FFFF, a noncharacter, unless one does). */
function separatorFor(secrets: Secrets): number | undefined {
  const held = charactersOf(secrets.whole)
  for (const candidate of [0xffff, 0xfffe, 0xfdd0, 0xfdd1]) if (!held.has(candidate)) return candidate
  return undefined
}

/**
 * Whether `redactRun` would find a secret in any of the runs `first` to `end` of `runs`: their code
 * units read as one text, and their runs of bytes (integers up to 255, at least `shortest` long) as
 * one UTF-8 text (those with a byte of 0x80 or more) and as UTF-16LE from their first and from
 * their second byte (those with a 0), the runs apart by a character (byte 0xFF in UTF-8, which
 * reads as U+FFFD) no secret holds, so that nothing is found across two runs. True (read them one
 * by one) when every such character is in a secret.
 */
function runsHold(items: readonly number[], runs: readonly number[], first: number, end: number, secrets: Secrets, shortest: number, codeUnits: boolean): boolean {
  const separator = separatorFor(secrets)
  if (separator === undefined || charactersOf(secrets.whole).has(0xfffd)) return true
  let total = 0
  for (let run = first; run < end; run += 1) total += (runs[2 * run + 1] as number) - (runs[2 * run] as number) + 1
  const units = new Uint16Array(total)
  /** The runs of bytes: [from, to, has a byte of 0x80 or more (1/0), has a 0 (1/0), …]. */
  const stretches: number[] = []
  let length = 0
  let high = 0
  let zero = 0
  let bytes8 = 0
  let bytes16 = 0
  for (let run = first; run < end; run += 1) {
    const to = runs[2 * run + 1] as number
    let stretch = runs[2 * run] as number
    let hasHigh = 0
    let hasZero = 0
    for (let index = runs[2 * run] as number; index <= to; index += 1) {
      const unit = index < to ? (items[index] as number) : 0x10000
      if (index < to) units[length++] = unit
      if (unit <= 0xff) {
        if (unit >= 0x80) hasHigh = 1
        else if (unit === 0) hasZero = 1
        continue
      }
      if (index - stretch >= shortest && (hasHigh === 1 || hasZero === 1)) {
        stretches.push(stretch, index, hasHigh, hasZero)
        high += hasHigh
        zero += hasZero
        if (hasHigh === 1) bytes8 += index - stretch + 1
        if (hasZero === 1) bytes16 += index - stretch + 2
      }
      stretch = index + 1
      hasHigh = 0
      hasZero = 0
    }
    units[length++] = separator
  }
  if (codeUnits) {
    const text = Buffer.from(units.buffer, 0, 2 * length).toString('utf16le')
    if (holdsSecret(text, secrets)) return true
  }
  if (high > 0) {
    const bytes = Buffer.allocUnsafe(bytes8)
    let at = 0
    for (let index = 0; index < stretches.length; index += 4) {
      if (stretches[index + 2] !== 1) continue
      for (let unit = stretches[index] as number; unit < (stretches[index + 1] as number); unit += 1) bytes[at++] = items[unit] as number
      bytes[at++] = 0xff
    }
    if (holdsSecret(bytes.toString('utf8', 0, at), secrets)) return true
  }
  if (zero > 0) {
    for (const offset of [0, 1]) {
      const bytes = Buffer.allocUnsafe(2 * bytes16 + 4)
      let at = 0
      for (let index = 0; index < stretches.length; index += 4) {
        if (stretches[index + 3] !== 1) continue
        const from = (stretches[index] as number) + offset
        const to = from + (((stretches[index + 1] as number) - from) & ~1)
        for (let unit = from; unit < to; unit += 1) bytes[at++] = items[unit] as number
        bytes[at++] = separator & 0xff
        bytes[at++] = separator >> 8
      }
      if (holdsSecret(bytes.toString('utf16le', 0, at), secrets)) return true
    }
  }
  return false
}

/** Code units read into text at a time (`String.fromCharCode` takes them as arguments). */
const UNITS_AT_ONCE = 8_192

/**
 * The elements `from` to `to` of `items` (integers from 0 to 65,535, a run of them at least as
 * long as the shortest secret looked for), redacted of `secrets`, or `undefined` when they hold
 * none. Read as UTF-16 code units (what `charCodeAt` gives; a run of bytes so reads as Latin-1), a
 * secret found replaced by the code units of `[redacted]`; then each run of bytes in what that left
 * (integers from 0 to 255) read as UTF-8 and UTF-16LE (see `redactBytes`), a secret found replaced
 * by the bytes of `[redacted]` in that encoding. msgpack stores an integer below 128 in one byte,
 * so a run of them is the text itself in the log's files, whatever surrounds it in the array: a
 * number above 255, a null, a string (`[256, 115, 107, …]`, the code units of "🔑 sk-…").
 */
function redactRun(items: readonly number[], from: number, to: number, secrets: Secrets, shortest: number): number[] | undefined {
  let wide = false
  for (let index = from; index < to; index += 1) {
    if ((items[index] as number) > 0xff) {
      wide = true
      break
    }
  }
  if (!wide) {
    // Bytes only: their code units are their Latin-1 reading, which `redactBytes` makes natively.
    const bytes = redactBytes(bytesFrom(items, from, to), secrets)
    return bytes === undefined ? undefined : [...bytes]
  }
  let text = ''
  for (let at = from; at < to; at += UNITS_AT_ONCE) text += String.fromCharCode(...items.slice(at, Math.min(at + UNITS_AT_ONCE, to)))
  const read = redact(text, secrets, false)
  let changed = read !== text
  const units = changed ? Array.from({ length: read.length }, (_, index) => read.charCodeAt(index)) : items.slice(from, to)
  // The runs of bytes among them, each at least as long as a secret: read as Latin-1 above, as UTF-8 and
  // UTF-16LE here, together first (see `redactRuns`): a million short ones between wider units are not a million reads.
  const stretches: number[] = []
  let start = 0
  for (let index = 0; index <= units.length; index += 1) {
    if (index < units.length && (units[index] as number) <= 0xff) continue
    if (index - start >= shortest) stretches.push(start, index)
    start = index + 1
  }
  const found = stretches.length === 0 ? undefined : redactRuns(units, stretches, secrets, shortest, (from, to) => redactBytes(bytesFrom(units, from, to), secrets, false), false)
  if (found === undefined) return changed ? units : undefined
  const out: number[] = []
  let copied = 0
  for (const [stretch, bytes] of found) {
    const from = stretches[2 * stretch] as number
    for (let at = copied; at < from; at += 1) out.push(units[at] as number)
    for (const byte of bytes) out.push(byte)
    copied = stretches[2 * stretch + 1] as number
  }
  for (let at = copied; at < units.length; at += 1) out.push(units[at] as number)
  return out
}

/** The elements `from` to `to` of `items` (integers from 0 to 255) as a Buffer. */
function bytesFrom(items: readonly number[], from: number, to: number): Buffer {
  const bytes = Buffer.allocUnsafe(to - from)
  for (let index = from; index < to; index += 1) bytes[index - from] = items[index] as number
  return bytes
}

/**
 * `bytes` redacted of `secrets` as text (see {@link redact}): read as Latin-1 (a byte a character,
 * so an ASCII secret is found as it is; not when `latin1` is false, for bytes read so already), then,
 * when a byte is 0x80 or more, as UTF-8, then, when one is 0, as UTF-16LE from the first byte and
 * from the second (a byte before the text, and an odd one after it, left as they are); what is
 * found is replaced by `[redacted]` in that encoding (a UTF-8 reading that replaced an invalid
 * sequence keeps U+FFFD's bytes in its place). `undefined` when none holds a secret. msgpack stores
 * a small integer in one byte, so an array of them in a fact is the text itself in the log's files.
 */
function redactBytes(bytes: Buffer, secrets: Secrets, latin1 = true): Buffer | undefined {
  let current = bytes
  for (const encoding of ['latin1', 'utf8'] as const) {
    if (encoding === 'latin1' && !latin1) continue
    if (encoding === 'utf8' && !current.some((byte) => byte >= 0x80)) continue
    const text = current.toString(encoding)
    const redacted = redact(text, secrets, false)
    if (redacted !== text) current = Buffer.from(redacted, encoding)
  }
  for (const offset of [0, 1]) {
    if (!current.includes(0)) break
    const end = offset + ((current.length - offset) & ~1)
    const text = current.toString('utf16le', offset, end)
    const redacted = redact(text, secrets, false)
    if (redacted !== text) current = Buffer.concat([current.subarray(0, offset), Buffer.from(redacted, 'utf16le'), current.subarray(end)])
  }
  return current === bytes ? undefined : current
}

/**
 * Some secrets' bytes, ready to be looked for at once in a fact's bytes: every 4 bytes of each, as a
 * 32-bit integer (with where it is in which), and a table of those integers' folded halves that says
 * at once whether 4 bytes can be a secret's. Only every `step`th position of the fact's bytes is
 * looked at: each occurrence of the shortest holds 4 bytes that begin at one.
 */
interface ByteIndex {
  needles: Buffer[]
  step: number
  at: Map<number, number[]>
  present: Uint8Array
}
const byteIndexes = new WeakMap<readonly string[], ByteIndex>()
const fold = (word: number) => ((word >>> 16) ^ word) & 0xffff
const wordAt = (bytes: Uint8Array, at: number) => ((bytes[at] as number) | ((bytes[at + 1] as number) << 8) | ((bytes[at + 2] as number) << 16) | ((bytes[at + 3] as number) << 24)) | 0

/** Each secret's bytes as a fact's could hold them: UTF-8, Latin-1 (where it differs), UTF-16LE and UTF-16BE; by the list of forms. */
function byteIndexOf(forms: readonly string[]): ByteIndex {
  let index = byteIndexes.get(forms)
  if (index === undefined) {
    const all = new Map<string, Buffer>()
    for (const form of forms) {
      for (const encoding of ['utf8', 'latin1', 'utf16le', 'utf16be'] as const) {
        // A character past U+00FF has no Latin-1 byte: what Buffer writes for it is no reading of the secret.
        if (encoding === 'latin1' && [...form].some((character) => (character.codePointAt(0) as number) > 0xff)) continue
        const bytes = encoding === 'utf16be' ? Buffer.from(form, 'utf16le').swap16() : Buffer.from(form, encoding)
        all.set(bytes.toString('latin1'), bytes)
      }
    }
    const needles = [...all.values()]
    const shortest = Math.min(...needles.map((needle) => needle.length))
    index = { needles, step: shortest - 3, at: new Map(), present: new Uint8Array(0x10000) }
    needles.forEach((needle, which) => {
      for (let offset = 0; offset + 4 <= needle.length; offset += 1) {
        const word = wordAt(needle, offset)
        ;(index as ByteIndex).present[fold(word)] = 1
        const found = (index as ByteIndex).at.get(word)
        if (found === undefined) (index as ByteIndex).at.set(word, [which, offset])
        else found.push(which, offset)
      }
    })
    byteIndexes.set(forms, index)
  }
  return index
}

/**
 * Whether `value`, packed as the log writes it (see `packedValue`), holds one of `secrets` (their
 * forms, as UTF-8, Latin-1 and UTF-16LE bytes): what the redaction of data does not read can still
 * spell one in the log's files, msgpack's own bytes with the value's (`true` is the byte 0xC3, a
 * string of 4 bytes begins with 0xA4: "ä" in UTF-8). One pass over every few bytes, whatever the
 * number of secrets (see `ByteIndex`).
 */
export function holdsSecretBytes(value: unknown, secrets: Secrets): boolean {
  if (secrets.whole.length === 0) return false
  let packed: Uint8Array
  try {
    packed = packedValue(value)
  } catch {
    // Not something a fact can hold (a BigInt, a symbol): refused where it is checked, never written.
    return false
  }
  const bytes = Buffer.from(packed.buffer, packed.byteOffset, packed.byteLength)
  const { needles, step, at, present } = byteIndexOf(secrets.whole)
  if (step < 1) return needles.some((needle) => bytes.includes(needle))
  for (let position = step - 1; position + 4 <= bytes.length; position += step) {
    const word = wordAt(bytes, position)
    if (present[fold(word)] !== 1) continue
    const candidates = at.get(word)
    if (candidates === undefined) continue
    for (let index = 0; index < candidates.length; index += 2) {
      const needle = needles[candidates[index] as number] as Buffer
      const start = position - (candidates[index + 1] as number)
      if (start >= 0 && start + needle.length <= bytes.length && bytes.compare(needle, 0, needle.length, start, start + needle.length) === 0) return true
    }
  }
  return false
}

/**
 * Data (a tool's result, a call's parsed input) as a fact may record it: `redactDeep` of it, or
 * `[redacted]` in its place when its bytes as the log writes them still hold one of `secrets` (see
 * {@link holdsSecretBytes}: msgpack's own bytes beside the data's, which redacting it does not read).
 */
export function redactData(value: unknown, secrets: Secrets): unknown {
  const redacted = redactDeep(value, secrets)
  return holdsSecretBytes(redacted, secrets) ? REDACTED : redacted
}

/**
 * A model's answer without `secrets`. A tool call's arguments are JSON text: only its string
 * literals are redacted (as the values they hold, escapes read), so the arguments still parse and
 * their numbers stay as written.
 */
export function redactAnswer(output: ModelOutput, secrets: Secrets): ModelOutput {
  if (secrets.whole.length === 0) return output
  const toolCalls = output.toolCalls.map((call) => ({ ...redactDeep({ ...call, arguments: '' }, secrets), arguments: redactJsonText(call.arguments, secrets) }))
  const answer: ModelOutput = { ...redactDeep({ ...output, toolCalls: [] }, secrets), toolCalls }
  const numeric = numericOf(secrets.whole)
  if (output.usage === undefined || numeric.length === 0) return answer
  // Counts, not text: one that holds a secret of digits is left out (a fact's usage holds numbers only), in its place.
  return { ...answer, usage: Object.fromEntries(Object.entries(output.usage).filter(([, count]) => typeof count !== 'number' || !holdsNumber(count, numeric))) }
}

const JSON_STRING = /"(?:[^"\\]|\\.)*"/g
/** A JSON string literal (left as it is), or a number literal outside one. */
const JSON_STRING_OR_NUMBER = /"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/g

/** A tool call's arguments (JSON text) as `redactAnswer` leaves them: what a run keeps of them. */
export function redactArguments(text: string, secrets: Secrets): string {
  return secrets.whole.length === 0 ? text : redactJsonText(text, secrets)
}

function redactJsonText(text: string, secrets: Secrets): string {
  const literals = text.replace(JSON_STRING, (literal) => {
    let value: unknown
    try {
      value = JSON.parse(literal)
    } catch {
      return literal
    }
    const redacted = redact(value as string, secrets)
    return redacted === value ? literal : JSON.stringify(redacted)
  })
  // A number that holds a secret of digits, as written or as read (`4.111111111111111e15` is 4111111111111111),
  // becomes the string "[redacted]": removed as text below, it would leave arguments that no longer parse.
  const numeric = numericOf(secrets.whole)
  const numbers =
    numeric.length === 0
      ? literals
      : literals.replace(JSON_STRING_OR_NUMBER, (token) => (token.startsWith('"') || (!numeric.some((form) => token.includes(form)) && !holdsNumber(Number(token), numeric)) ? token : JSON.stringify(REDACTED)))
  // An array of small integers (a Buffer's or a Uint8Array's JSON: `[115,107,…]`) read as bytes, so the text
  // still parses to the input a fact records: that input is redacted as data once parsed too (`redactDeep`,
  // which finds what this does not: `115.0`, `1.15e2`, a run beside other elements).
  const shortest = (secrets.whole.at(-1) as string).length
  const arrays = numbers.replace(BYTE_ARRAY, (array) => {
    const bytes = array.slice(1, -1).split(',').map((item) => Number(item.trim()))
    if (bytes.length < shortest) return array
    const redacted = redactBytes(Buffer.from(bytes), secrets)
    return redacted === undefined ? array : `[${redacted.join(',')}]`
  })
  // A secret outside the string literals (spanning the JSON's own syntax, or in text that is not JSON) goes as text.
  return redact(arrays, secrets)
}

/**
 * A JSON array of 4 or more integers from 0 to 255 written as plain decimals (`[115, 107, …]`); one
 * whose integers are written otherwise (`1.15e2`, `115.0`) is not read as bytes.
 */
const BYTE_ARRAY = /\[\s*(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\s*,\s*(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3,}\s*\]/g

const HASH_BASE = 257
const HASH_MOD = 2_147_483_647
/** Starts of one window looked at, at most: a periodic secret ("aaaa…") repeats a window at every start. */
const CANDIDATES_CHECKED = 64

/** HASH_BASE ** (SECRET_PIECE - 1) mod HASH_MOD: the weight of a window's first character. */
const HASH_LEAD = (() => {
  let lead = 1
  for (let index = 1; index < SECRET_PIECE; index += 1) lead = (lead * HASH_BASE) % HASH_MOD
  return lead
})()

function windowHash(text: string, at: number): number {
  let hash = 0
  for (let index = at; index < at + SECRET_PIECE; index += 1) hash = (hash * HASH_BASE + text.charCodeAt(index)) % HASH_MOD
  return hash
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff

/**
 * Every {@link SECRET_PIECE}-character window of some secrets, by hash: at each position of a message, the
 * longest run that also occurs in one of them (at least a window long) is redacted, and the scan
 * goes on after it. A run is widened to whole code points, so no lone surrogate is left.
 */
class PieceIndex {
  readonly #forms: string[] = []
  /** Window hash → [form, start, form, start, …]. */
  readonly #windows = new Map<number, number[]>()
  /** Another index whose forms are looked for too (see `layered`): left unchanged. */
  readonly #base: PieceIndex | undefined

  constructor(forms: readonly string[], base?: PieceIndex) {
    this.#base = base
    this.add(forms)
  }

  /** Looks for `forms` too. */
  add(forms: readonly string[]): void {
    for (const form of forms) {
      const which = this.#forms.push(form) - 1
      for (let start = 0; start + SECRET_PIECE <= form.length; start += 1) {
        const hash = windowHash(form, start)
        const found = this.#windows.get(hash)
        if (found === undefined) this.#windows.set(hash, [which, start])
        else if (found.length < 2 * CANDIDATES_CHECKED) found.push(which, start)
      }
    }
  }

  redact(text: string): string {
    const spans = this.spans(text)
    if (spans.length === 0) return text
    let out = ''
    let copied = 0
    for (let index = 0; index < spans.length; index += 2) {
      out += text.slice(copied, spans[index]) + REDACTED
      copied = spans[index + 1] as number
    }
    return out + text.slice(copied)
  }

  /** Where `redact` would redact `text`: [from, to, from, to, …], in order, none overlapping. */
  spans(text: string): number[] {
    const width = SECRET_PIECE
    const spans: number[] = []
    if ((this.#windows.size === 0 && this.#base === undefined) || text.length < width) return spans
    let copied = 0
    let at = 0
    let hash = windowHash(text, 0)
    while (at + width <= text.length) {
      const longest = this.#longestAt(text, at, hash)
      if (longest > 0) {
        let from = at
        let to = at + longest
        if (from > copied && isLowSurrogate(text.charCodeAt(from)) && isHighSurrogate(text.charCodeAt(from - 1))) from -= 1
        if (to < text.length && isHighSurrogate(text.charCodeAt(to - 1)) && isLowSurrogate(text.charCodeAt(to))) to += 1
        spans.push(from, to)
        at = to
        copied = to
        if (at + width <= text.length) hash = windowHash(text, at)
        continue
      }
      if (at + width < text.length) {
        hash = (hash - ((text.charCodeAt(at) * HASH_LEAD) % HASH_MOD) + HASH_MOD) % HASH_MOD
        hash = (hash * HASH_BASE + text.charCodeAt(at + width)) % HASH_MOD
      }
      at += 1
    }
    return spans
  }

  /** The longest run of `text` from `at` that occurs in a form (0 when no window matches). */
  #longestAt(text: string, at: number, hash: number): number {
    const below = this.#base === undefined ? 0 : this.#base.#longestAt(text, at, hash)
    const candidates = this.#windows.get(hash)
    if (candidates === undefined) return below
    let longest = below
    for (let index = 0; index < candidates.length; index += 2) {
      const form = this.#forms[candidates[index] as number] as string
      const start = candidates[index + 1] as number
      let length = 0
      while (at + length < text.length && start + length < form.length && text.charCodeAt(at + length) === form.charCodeAt(start + length)) length += 1
      if (length > longest) longest = length
    }
    return longest >= SECRET_PIECE ? longest : 0
  }
}
