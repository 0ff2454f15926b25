// Conversations travel as bytes. The client never parses a conversation into JS values and
// serialises it again: JSON numbers beyond 2^53 (and spellings like 1e400 or -0.0) would not come
// back digit for digit. These helpers work on the JSON text itself.

import { createHash } from "node:crypto";

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/**
 * What a save accepts: the conversation's JSON text, its UTF-8 bytes, or JS values (serialised
 * with JSON.stringify: only for conversations with no number beyond 2^53).
 */
export type ConversationInput = Uint8Array | string | readonly unknown[];

export function toBytes(c: ConversationInput): Uint8Array {
  if (c instanceof Uint8Array) return c;
  if (typeof c === "string") return utf8.encode(c);
  if (Array.isArray(c)) return utf8.encode(JSON.stringify(c));
  throw new TypeError("a conversation is a Uint8Array, a string of JSON, or an array");
}

export function sha256(b: Uint8Array): string {
  return "sha256:" + createHash("sha256").update(b).digest("hex");
}

export function utf8Decode(b: Uint8Array): string {
  return utf8Strict.decode(b);
}

/** joinRaw builds a JSON array from the raw JSON text of each message. */
export function joinRaw(messages: readonly string[]): string {
  return "[" + messages.join(",") + "]";
}

/**
 * splitRaw returns the raw JSON text of each element of a JSON array, untouched (whitespace
 * between elements dropped), without parsing any value. It throws on text that is not an array.
 */
export function splitRaw(json: string): string[] {
  const out: string[] = [];
  let i = skipSpace(json, 0);
  if (json[i] !== "[") throw new SyntaxError(`not a JSON array: ${JSON.stringify(json.slice(i, i + 10))} at ${i}`);
  i = skipSpace(json, i + 1);
  if (json[i] === "]") return checkEnd(json, i + 1, out);
  for (;;) {
    const start = i;
    i = skipValue(json, i);
    if (i === start) throw new SyntaxError(`JSON array: missing value at ${i}`);
    out.push(json.slice(start, i));
    i = skipSpace(json, i);
    if (json[i] === ",") {
      i = skipSpace(json, i + 1);
      continue;
    }
    if (json[i] === "]") return checkEnd(json, i + 1, out);
    throw new SyntaxError(`JSON array: want , or ] at ${i}`);
  }
}

function checkEnd(json: string, i: number, out: string[]): string[] {
  if (skipSpace(json, i) !== json.length) throw new SyntaxError(`JSON array: text after the array at ${i}`);
  return out;
}

function skipSpace(s: string, i: number): number {
  while (i < s.length && (s[i] === " " || s[i] === "\n" || s[i] === "\r" || s[i] === "\t")) i++;
  return i;
}

/** skipValue returns the index just past the JSON value starting at i (structure only). */
function skipValue(s: string, i: number): number {
  let depth = 0;
  const start = i;
  for (; i < s.length; i++) {
    const c = s[i];
    if (c === '"') {
      for (i++; i < s.length && s[i] !== '"'; i++) if (s[i] === "\\") i++;
      if (i >= s.length) break;
      if (depth === 0) return i + 1;
    } else if (c === "{" || c === "[") {
      depth++;
    } else if (c === "}" || c === "]") {
      if (depth === 0) return i; // the end of a scalar right before the array's ]
      depth--;
      if (depth === 0) return i + 1;
    } else if (depth === 0 && (c === "," || c === " " || c === "\n" || c === "\r" || c === "\t")) {
      return i; // end of a scalar
    }
  }
  if (depth === 0 && i > start) return i;
  throw new SyntaxError(`JSON array: value at ${start} does not end`);
}
