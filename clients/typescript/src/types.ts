// The JSON objects of docs/protocol.md §5, §6 and §9. Every number in them is at most 2^53 − 1
// (§1), so JSON.parse holds them exactly; conversations are never parsed (see bytes.ts).

import type { Key } from "./ids.js";

/** Version-record formats this client understands (§6: a client MUST refuse others). */
export const KNOWN_RECORD_FORMATS: readonly number[] = [2];

/** The version record (§6). Unknown fields are kept as received. */
export interface VersionRecord {
  format: number;
  key: Key;
  version: number;
  parent: number;
  hash: string;
  saveId: string;
  writer?: string;
  reason: string;
  created: string;
  rawBytes: number;
  storedBytes: number;
  counts: {
    messages: number;
    user: number;
    assistant: number;
    toolResult: number;
    extension: number;
    toolCalls: number;
    system?: number;
  };
  gen?: number;
  dialect?: string;
  forkOf?: { key: Key; version: number };
  origin?: { via: string; source: string; at: string };
  [extra: string]: unknown;
}

/**
 * The record a save returns (`save`, `append`): the version record, and `unverified` when the
 * save was a duplicate (its save id had made this version) that the daemon could not compare with
 * that version: the sentence saying what was not compared (its chunks were removed, or the base
 * of its append was removed by retention; docs/protocol.md §4.3). Absent when the daemon compared
 * it whole, or when the save made a new version. The client does not compare it further.
 */
export interface SavedVersion extends VersionRecord {
  unverified?: string;
}

/** A head in a `list` reply: a version record, plus lease and moved when they apply (§5). */
export interface Head extends VersionRecord {
  lease?: LeaseState;
  moved?: { to: string; at: string };
}

/** The lease of a session (§9). epoch 0: never leased. owner absent once released. */
export interface LeaseState {
  key: Key;
  epoch: number;
  owner?: string;
  acquired?: string;
  expires?: string;
  head: number;
  [extra: string]: unknown;
}

/** The outcome of a save as published on cp.result.<ns>.<saveid> (§4.3). */
export interface SaveResult {
  saveId: string;
  key: Key;
  ok: boolean;
  duplicate?: boolean;
  version?: VersionRecord;
  received?: string;
  /** On a duplicate the daemon could not compare with the version its save id made: why (§4.3). */
  unverified?: string;
  seq?: number;
  error?: import("./errors.js").WireError;
}

/** The reply of `prune` (§5): per session, the versions removed (or, in a dry run, that would be). */
export interface PruneReply {
  sessions: { key: Key; versions: number[]; kept: number; segments?: number; [extra: string]: unknown }[];
  [extra: string]: unknown;
}
