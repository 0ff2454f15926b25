// A Session for the OpenAI Agents SDK for JavaScript (@openai/agents, @openai/agents-core) that
// keeps the conversation in checkpointd: every change is a new version of one checkpointd session
// in the `openai-responses` dialect, so a Go process (checkpointctl restore, the Go SDK) resumes it.
//
// Imported as "@checkpointd/client/agents". Only types come from @openai/agents-core (an optional
// peer dependency): the compiled module loads nothing of it, and the core client does not depend
// on it.

import { randomUUID } from "node:crypto";
import type { AgentInputItem, Session } from "@openai/agents-core";
import type { Client, SaveOptions } from "./client.js";
import { joinRaw } from "./bytes.js";
import { CheckpointError, isCheckpointError } from "./errors.js";
import { toKey } from "./ids.js";
import type { Key, KeyLike } from "./ids.js";
import type { VersionRecord } from "./types.js";
import { fromResponsesItem, toResponsesItem } from "./agentsItems.js";

/** The dialect a CheckpointSession stores (docs/format.md §1.1). */
export const AGENTS_DIALECT = "openai-responses";

export interface CheckpointSessionOptions {
  /** A connected checkpointd client; the session never closes it. */
  client: Client;
  /** The checkpointd session: a name, or {namespace, session, agent}. Default: a random UUID. */
  session?: KeyLike;
  /** Passed to every save (reason, writer, epoch of a lease, timeoutMs). Default reason: "turn". */
  saveOptions?: Omit<SaveOptions, "expectedVersion" | "dialect" | "saveId">;
}

/**
 * CheckpointSession implements the Agents SDK's `Session` on checkpointd.
 *
 * - addItems appends (Cp-Base-Version) onto the head this object last saw;
 * - popItem saves the whole conversation minus its last item, expecting that head;
 * - clearSession saves `[]` as a new version (earlier versions stay in the history: `checkpointctl
 *   history`, restore of any version); a session that does not exist stays absent;
 * - getItems restores the head and returns its last `limit` items, and remembers the head.
 *
 * Every write names the version it builds on, so a write after another process changed the session
 * fails with `CheckpointError` code `conflict` (its `head` says where the session is) instead of
 * overwriting it; read again (getItems) and retry. Operations on one object run one at a time.
 *
 * Items are stored in the Responses API's spelling (see agentsItems.ts) and JSON-parsed where this
 * interface hands them out (getItems, popItem): numbers beyond 2^53 in items another writer stored
 * lose digits there, as everywhere JSON.parse is used. Stored bytes are never rewritten: popItem
 * keeps the other items' JSON text as read.
 */
export class CheckpointSession implements Session {
  readonly client: Client;
  readonly key: Key;
  private readonly saveOptions: CheckpointSessionOptions["saveOptions"];
  /** The head version this object last read or wrote; undefined until it knows. 0: no session. */
  private head: number | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(opts: CheckpointSessionOptions) {
    this.client = opts.client;
    this.key = toKey(opts.session ?? randomUUID());
    this.saveOptions = opts.saveOptions;
  }

  /** The checkpointd session's name (the key's `session`). */
  async getSessionId(): Promise<string> {
    return this.key.session;
  }

  /** The version this object last read or wrote (0: none yet), or undefined before its first call. */
  get version(): number | undefined {
    return this.head;
  }

  async getItems(limit?: number): Promise<AgentInputItem[]> {
    return this.serial(async () => {
      const raw = await this.readRaw(0);
      if (limit === undefined) return raw.map(parseItem);
      if (limit <= 0) return [];
      return raw.slice(Math.max(raw.length - limit, 0)).map(parseItem);
    });
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) return;
    // Mapped (and refused, for a shape it cannot map) before anything is sent.
    const body = joinRaw(items.map((it, i) => JSON.stringify(toResponsesItem(it, `items[${i}]`))));
    await this.serial(async () => {
      const base = await this.knownHead();
      const rec =
        base === 0
          ? await this.client.save(this.key, body, { ...this.opts(), expectedVersion: 0 })
          : await this.client.append(this.key, base, body, this.opts());
      this.head = rec.version;
    });
  }

  async popItem(): Promise<AgentInputItem | undefined> {
    return this.serial(async () => {
      const base = await this.knownHead();
      if (base === 0) return undefined;
      const raw = await this.readRaw(base);
      const last = raw.pop();
      if (last === undefined) return undefined;
      const rec = await this.client.save(this.key, joinRaw(raw), { ...this.opts(), expectedVersion: base });
      this.head = rec.version;
      return parseItem(last);
    });
  }

  async clearSession(): Promise<void> {
    await this.serial(async () => {
      const base = await this.knownHead();
      if (base === 0) return;
      const rec = await this.client.save(this.key, "[]", { ...this.opts(), expectedVersion: base });
      this.head = rec.version;
    });
  }

  // -----------------------------------------------------------------------------------------------

  private opts(): SaveOptions {
    return { reason: "turn", ...this.saveOptions, dialect: AGENTS_DIALECT };
  }

  /** serial runs fn after every earlier operation of this object has settled. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** The head to build on: the one last seen, else the session's current head (0: none). */
  private async knownHead(): Promise<number> {
    if (this.head !== undefined) return this.head;
    try {
      this.head = checkDialect(this.key, await this.client.get(this.key)).version;
    } catch (e) {
      if (!isCheckpointError(e, "not_found")) throw e;
      this.head = 0;
    }
    return this.head;
  }

  /**
   * readRaw restores a version (0: the head, which it then remembers) and returns each item's JSON
   * text as stored. A session that does not exist has no items.
   */
  private async readRaw(version: number): Promise<string[]> {
    try {
      const r = await this.client.restore(this.key, version);
      checkDialect(this.key, r.record);
      if (version === 0) this.head = r.record.version;
      return r.rawMessages();
    } catch (e) {
      if (version !== 0 || !isCheckpointError(e, "not_found")) throw e;
      this.head = 0;
      return [];
    }
  }
}

function parseItem(raw: string): AgentInputItem {
  return fromResponsesItem(JSON.parse(raw)) as AgentInputItem;
}

/** A session in another dialect would be misread item by item: refuse it whole. */
function checkDialect(key: Key, rec: VersionRecord): VersionRecord {
  const d = rec.dialect || "native";
  if (d !== AGENTS_DIALECT) {
    throw new CheckpointError(
      "bad_request",
      `session ${key.namespace}/${key.session}/${key.agent} holds ${d} conversations; a CheckpointSession reads and writes ${AGENTS_DIALECT}`,
    );
  }
  return rec;
}

export { toResponsesItem, fromResponsesItem, HINT } from "./agentsItems.js";
