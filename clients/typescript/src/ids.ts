// Ids in subjects (docs/protocol.md §2): every id becomes exactly one subject token.
// Bytes A-Z a-z 0-9 - _ stand for themselves; every other byte of the UTF-8 form is =XX (upper-case hex).

import { badRequest } from "./errors.js";

const utf8 = new TextEncoder();

function standsForItself(b: number): boolean {
  return (
    (b >= 0x41 && b <= 0x5a) || // A-Z
    (b >= 0x61 && b <= 0x7a) || // a-z
    (b >= 0x30 && b <= 0x39) || // 0-9
    b === 0x2d || // -
    b === 0x5f // _
  );
}

/** The largest integer the protocol uses (versions, epochs, offsets): 2^53 − 1. */
export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Throws bad_request unless id is a valid id (§1): 1 to 256 bytes of UTF-8 (no lone surrogates). */
export function checkId(what: string, id: string): void {
  if (typeof id !== "string") throw badRequest(`${what}: want a string, got ${typeof id}`);
  if (!id.isWellFormed()) throw badRequest(`${what}: not valid UTF-8 (a lone surrogate)`);
  const n = utf8.encode(id).length;
  if (n < 1 || n > 256) throw badRequest(`${what}: ${n} bytes; an id is 1 to 256 bytes of UTF-8`);
}

/** encodeId turns an id into its subject token (§2). */
export function encodeId(id: string): string {
  let out = "";
  for (const b of utf8.encode(id)) {
    out += standsForItself(b) ? String.fromCharCode(b) : "=" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/**
 * decodeId is encodeId's inverse. It refuses lower-case hex, a truncated escape and an escape of a
 * byte that stands for itself, so every id has exactly one token.
 */
export function decodeId(token: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c === 0x3d /* = */) {
      const hex = token.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(hex)) throw new TypeError(`token ${JSON.stringify(token)}: bad escape at ${i}`);
      const b = parseInt(hex, 16);
      if (standsForItself(b)) throw new TypeError(`token ${JSON.stringify(token)}: byte ${hex} at ${i} must not be escaped`);
      bytes.push(b);
      i += 2;
    } else if (c < 0x80 && standsForItself(c)) {
      bytes.push(c);
    } else {
      throw new TypeError(`token ${JSON.stringify(token)}: character at ${i} must be escaped`);
    }
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(bytes));
}

/** A session key (§1). namespace defaults to "default", agent to "main". */
export interface Key {
  namespace: string;
  session: string;
  agent: string;
}

/** KeyLike is what callers may pass: a session name, or a partial key. */
export type KeyLike = string | { namespace?: string; session: string; agent?: string };

export function toKey(k: KeyLike): Key {
  const key: Key =
    typeof k === "string"
      ? { namespace: "default", session: k, agent: "main" }
      : { namespace: k.namespace || "default", session: k.session, agent: k.agent || "main" };
  checkId("namespace", key.namespace);
  checkId("session", key.session);
  checkId("agent", key.agent);
  return key;
}

/** The key token <ns>.<session>.<agent>, each part encoded. */
export function keyToken(k: Key): string {
  return `${encodeId(k.namespace)}.${encodeId(k.session)}.${encodeId(k.agent)}`;
}

export const subjects = {
  /** §4.0: a save as a request to a daemon, answered once durable. */
  save: (k: Key) => `cp.save.${keyToken(k)}`,
  ingest: (k: Key) => `cp.ingest.${keyToken(k)}`,
  chunk: (ns: string, saveId: string) => `cp.chunk.${encodeId(ns)}.${encodeId(saveId)}`,
  result: (ns: string, saveId: string) => `cp.result.${encodeId(ns)}.${encodeId(saveId)}`,
  api: (ns: string, op: string) => `cp.api.${encodeId(ns)}.${op}`,
  /** §4.3: the direct get of the stored result on a result subject. */
  directGetResult: (resultSubject: string) => `$JS.API.DIRECT.GET.CP_RESULTS.${resultSubject}`,
};
