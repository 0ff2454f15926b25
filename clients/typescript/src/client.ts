// A checkpointd client written from docs/protocol.md. Section numbers (§) refer to that document.

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, headers as natsHeaders, errors as natsErrors } from "@nats-io/transport-node";
import type { ConnectionOptions, Msg, MsgHdrs, NatsConnection, Subscription } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import type { JetStreamClient, PubAck } from "@nats-io/jetstream";
import { checkId, MAX_SAFE, subjects, toKey } from "./ids.js";
import type { Key, KeyLike } from "./ids.js";
import { CheckpointError, badRequest, corrupt, internal, unavailable } from "./errors.js";
import { CHUNK_ROOM, OffsetJoiner, PieceError, parseNumber, pieceSize, split } from "./pieces.js";
import type { WireError } from "./errors.js";
import { sha256, toBytes, utf8Decode, joinRaw, splitRaw } from "./bytes.js";
import type { ConversationInput } from "./bytes.js";
import { decoders, nodeZstdEncoder } from "./encoding.js";
import type { Encoder } from "./encoding.js";
import { KNOWN_RECORD_FORMATS } from "./types.js";
import type { Head, LeaseState, PruneReply, SaveResult, SavedVersion, VersionRecord } from "./types.js";

export interface ClientOptions {
  /** Longest any one operation may take, retries included (default 30 s). */
  timeoutMs?: number;
  /** Written into every version as Cp-Writer (default: host/pid). */
  writer?: string;
  /**
   * How save bodies are compressed: "auto" (default) uses Node's zstd where it exists (Node 22.15+)
   * and identity elsewhere; "identity" never compresses; or an Encoder of your own.
   */
  encoder?: "auto" | "identity" | Encoder;
  /** Largest body sent in one message; larger saves are chunked (§4.2). Default: max_payload − 16 KiB. */
  maxMessageBytes?: number;
}

export interface SaveOptions {
  /**
   * Idempotency key (§1): saving the same conversation twice with the same id creates one version;
   * another conversation under an id already used is refused with `save_id_reused` (§4.3). Default:
   * random.
   */
  saveId?: string;
  /** The head the save must extend; 0: the session must not exist yet (§4.1 Cp-Expected-Version). */
  expectedVersion?: number;
  /** The lease epoch while the session is leased (§9). */
  epoch?: number;
  /** turn (default), pause, migrate, import, manual or fork. */
  reason?: string;
  /** The conversation's shape (docs/format.md §1.1); default native. */
  dialect?: string;
  /** Overrides the client's writer for this save. */
  writer?: string;
  /** Overrides the client's timeout for this save. */
  timeoutMs?: number;
}

export interface ReadOptions {
  /** "full" (default) or "request" (from the last compaction marker on). */
  view?: "full" | "request";
  /** Only the most recent messages (§5). */
  maxMessages?: number;
  /**
   * The encoding to ask the daemon for: "identity" (default; every daemon serves it) or "zstd"
   * (checkpointd 0.4; an older daemon's refusal, or a zstd body that does not check out, is read
   * again as identity).
   */
  encoding?: string;
  timeoutMs?: number;
}

/** A restored conversation: its bytes exactly as stored, and the record they were checked against. */
export class Restored {
  constructor(
    readonly record: VersionRecord,
    /** The canonical JSON bytes (or the view's), verified. */
    readonly bytes: Uint8Array,
  ) {}
  /** The JSON text. */
  text(): string {
    return utf8Decode(this.bytes);
  }
  /** The raw JSON text of each message, digit for digit (see joinRaw to build a body from them). */
  rawMessages(): string[] {
    return splitRaw(this.text());
  }
  /** JSON.parse of the conversation: convenient, but numbers beyond 2^53 lose digits. */
  messages(): unknown[] {
    return JSON.parse(this.text()) as unknown[];
  }
}

const DEFAULT_TIMEOUT_MS = 30_000;
/** §4.3: bound each publish attempt (the Go SDK: 2 s) and retry with the same Nats-Msg-Id. */
const PUBLISH_ATTEMPT_MS = 2_000;
/**
 * §4.0: bound each save request (the Go SDK's: 5 s, and 1 s more per chunk, at most 30 s) and send
 * it again with the same save id.
 */
const REQUEST_ATTEMPT_MS = 5_000;
const REQUEST_ATTEMPT_PER_CHUNK_MS = 1_000;
const MAX_REQUEST_ATTEMPT_MS = 30_000;
/** §4.3: bound each direct get of a stored result (the Go SDK: one second). */
const LOOKUP_ATTEMPT_MS = 1_000;

/** §4.3: "no responders" retries on a single server before it counts as "no stream" (the Go SDK's). */
const NO_STREAM_RETRIES = 4;

/**
 * §4.0: a client that a daemon has answered takes "no responders" for the daemons reconnecting (the
 * server they were on died, a rolling restart), and sends the request again for up to
 * NO_RESPONDERS_WINDOW_MS, pausing 50 ms and twice as long each time (at most 500 ms), before
 * falling back to the ingest stream (the Go SDK's). One never answered falls back at once.
 */
const NO_RESPONDERS_WINDOW_MS = 2_000;
const NO_RESPONDERS_FIRST_WAIT_MS = 50;
const NO_RESPONDERS_MAX_WAIT_MS = 500;

const REASONS = new Set(["turn", "pause", "migrate", "import", "manual", "fork"]);

export class Client {
  readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly ownsConnection: boolean;
  private readonly timeoutMs: number;
  private readonly writer: string;
  private readonly encoder: Encoder | undefined;
  private readonly maxMessageBytes: number | undefined;
  /** A daemon answered a save request, and has not been missing for a whole window since (§4.0). */
  private answered = false;

  constructor(nc: NatsConnection, opts: ClientOptions = {}, ownsConnection = false) {
    this.nc = nc;
    this.js = jetstream(nc);
    this.ownsConnection = ownsConnection;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.writer = opts.writer ?? `${hostname()}/${process.pid}`;
    const enc = opts.encoder ?? "auto";
    this.encoder = enc === "auto" ? nodeZstdEncoder : enc === "identity" ? undefined : enc;
    this.maxMessageBytes = opts.maxMessageBytes;
  }

  /** Connects to NATS (the daemon's embedded server or your own) and returns a client owning that connection. */
  static async connect(natsOpts: ConnectionOptions, opts: ClientOptions = {}): Promise<Client> {
    let nc: NatsConnection;
    try {
      nc = await connect(natsOpts);
    } catch (e) {
      throw unavailable(`connecting to ${JSON.stringify(natsOpts.servers ?? "nats://127.0.0.1:4222")}: ${(e as Error).message}`, e);
    }
    return new Client(nc, opts, true);
  }

  /** Closes the connection if this client opened it. */
  async close(): Promise<void> {
    if (this.ownsConnection) await this.nc.close();
  }

  // ---------------------------------------------------------------------------------------------
  // Saving (§4)

  /** Saves the whole conversation as the session's next version and returns its record. */
  async save(key: KeyLike, conversation: ConversationInput, opts: SaveOptions = {}): Promise<SavedVersion> {
    return this.publishSave(toKey(key), toBytes(conversation), undefined, opts);
  }

  /**
   * Saves only the messages appended to baseVersion, which must be the head (else `conflict`):
   * `messages` is a JSON array of the new messages (§4.1 Cp-Base-Version).
   */
  async append(
    key: KeyLike,
    baseVersion: number,
    messages: ConversationInput,
    opts: SaveOptions = {},
  ): Promise<SavedVersion> {
    checkRange("baseVersion", baseVersion, 0);
    return this.publishSave(toKey(key), toBytes(messages), baseVersion, opts);
  }

  private async publishSave(
    key: Key,
    body: Uint8Array,
    baseVersion: number | undefined,
    opts: SaveOptions,
  ): Promise<SavedVersion> {
    const saveId = opts.saveId ?? randomToken();
    checkId("saveId", saveId);
    const hdrs = this.saveHeaders(saveId, baseVersion, opts);
    const deadline = Date.now() + (opts.timeoutMs ?? this.timeoutMs);
    const sent = sha256(body);
    const payload = this.encoder ? this.encoder.encode(body) : body;
    if (this.encoder) hdrs.set("Cp-Encoding", this.encoder.name);

    // §4.0: a request to a daemon first, answered once the save is durable. The pieces of a body
    // too large for one message go to CP_CHUNKS before it (§4.2).
    const firstMsgId = `${saveId}/${randomToken()}`;
    let message = payload;
    if (payload.length > this.maxBodyBytes()) {
      await this.publishChunks(key, saveId, firstMsgId, hdrs, payload, deadline);
      message = new Uint8Array(0);
    }
    const data = await this.requestSave(key, saveId, hdrs, message, deadline);
    if (data !== undefined) return await this.checkResult(data, key, saveId, sent, deadline);
    // No daemon answers: the ingest stream keeps the save until one does (§4.1).
    return await this.ingestSave(key, saveId, firstMsgId, hdrs, payload, sent, deadline);
  }

  /**
   * §4.0: sends the save as a core NATS request and returns the result its reply carries, or
   * undefined when nobody listens ("no responders": no daemon runs, or one too old for requests).
   * A request unanswered in time is sent again with the same save id (the daemon recognises the
   * repeat); a `busy` or `unavailable` refusal (nothing stored) is retried after its hint, until
   * the deadline, when the last refusal is returned. After a daemon has answered this client, "no
   * responders" is asked again for a moment first (NO_RESPONDERS_WINDOW_MS).
   */
  private async requestSave(key: Key, saveId: string, hdrs: MsgHdrs, body: Uint8Array, deadline: number): Promise<Uint8Array | undefined> {
    const subject = subjects.save(key);
    const chunks = Number(hdrs.get("Cp-Chunks") || "0");
    const attemptMs = Math.min(REQUEST_ATTEMPT_MS + chunks * REQUEST_ATTEMPT_PER_CHUNK_MS, MAX_REQUEST_ATTEMPT_MS);
    let quietSince: number | undefined; // the first "no responders" of this save
    let quietWait = NO_RESPONDERS_FIRST_WAIT_MS;
    for (let attempt = 0; ; attempt++) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw unavailable(
          `no checkpointd answered the save on ${subject} in time; its outcome is unknown: ` +
            `restore the session to see it, or save again with the same save id (${saveId})`,
        );
      }
      let m: Msg;
      try {
        m = await this.nc.request(subject, body, { headers: hdrs, timeout: Math.max(1, Math.min(attemptMs, left)) });
      } catch (e) {
        if (isNoResponders(e)) {
          if (!this.answered) return undefined;
          const now = Date.now();
          quietSince ??= now;
          if (now - quietSince + quietWait > NO_RESPONDERS_WINDOW_MS) {
            this.answered = false; // no daemon came back: the next saves fall back at once
            return undefined;
          }
          if (now + quietWait >= deadline) return undefined;
          await sleep(quietWait);
          quietWait = Math.min(2 * quietWait, NO_RESPONDERS_MAX_WAIT_MS);
          continue;
        }
        if (isMaxPayload(e)) throw new CheckpointError("too_large", `sending the save on ${subject}: ${(e as Error).message}`);
        if (!(e instanceof natsErrors.TimeoutError) && !isTransient(e)) throw unavailable(`sending the save on ${subject}: ${(e as Error).message}`, e);
        // Unanswered in time (the daemon died, or is slow): send it again, with the same save id.
        await sleep(Math.min(50, Math.max(0, deadline - Date.now())));
        continue;
      }
      this.answered = true;
      const wait = retryPause(m.data, attempt);
      if (wait === undefined || Date.now() + wait >= deadline) return m.data;
      await sleep(wait);
    }
  }

  /**
   * §4.1: the save on the ingest stream, the fallback when no daemon answers requests. The PubAck
   * means it is durable; its result comes once a daemon settled it. A `busy` refusal is retried
   * under a new message id (§4.5).
   */
  private async ingestSave(
    key: Key,
    saveId: string,
    firstMsgId: string,
    hdrs: MsgHdrs,
    payload: Uint8Array,
    sent: string,
    deadline: number,
  ): Promise<SavedVersion> {
    // Listen before publishing (§4.3), and make sure the server has the subscription first.
    const resultSubject = subjects.result(key.namespace, saveId);
    const results = new Inbox(this.nc.subscribe(resultSubject));
    try {
      await this.nc.flush();
      const consumed = new Set<string>();
      for (let attempt = 0; ; attempt++) {
        if (attempt === 0 && hdrs.has("Cp-Chunks")) {
          // The chunks are stored already (for the request): the save message alone.
          await this.publishOnce(subjects.ingest(key), new Uint8Array(0), firstMsgId, hdrs, deadline);
        } else {
          // Each attempt gets its own unguessable message id (§4.1; §4.5: a busy save is retried
          // under a new one); the save id stays.
          const msgId = attempt === 0 ? firstMsgId : `${saveId}/${randomToken()}`;
          await this.publishBody(key, saveId, msgId, hdrs, payload, deadline);
        }
        const data = await this.awaitResult(results, resultSubject, consumed, deadline);
        consumed.add(sha256(data));
        try {
          return await this.checkResult(data, key, saveId, sent, deadline);
        } catch (e) {
          if (!(e instanceof CheckpointError && e.code === "busy")) throw e;
          const wait = busyPause(e.retryAfterMs, attempt);
          if (Date.now() + wait >= deadline) throw e;
          await sleep(wait);
        }
      }
    } finally {
      results.close();
    }
  }

  private saveHeaders(saveId: string, baseVersion: number | undefined, opts: SaveOptions): MsgHdrs {
    const h = natsHeaders();
    h.set("Cp-Save-Id", saveId);
    h.set("Cp-Writer", opts.writer ?? this.writer);
    const reason = opts.reason ?? "turn";
    if (!REASONS.has(reason)) throw badRequest(`reason: ${JSON.stringify(reason)} is not one of ${[...REASONS].join(", ")}`);
    h.set("Cp-Reason", reason);
    if (baseVersion !== undefined) h.set("Cp-Base-Version", String(baseVersion));
    if (opts.expectedVersion !== undefined) {
      checkRange("expectedVersion", opts.expectedVersion, 0);
      h.set("Cp-Expected-Version", String(opts.expectedVersion));
    }
    if (opts.epoch !== undefined) {
      checkRange("epoch", opts.epoch, 1);
      h.set("Cp-Epoch", String(opts.epoch));
    }
    if (opts.dialect !== undefined && opts.dialect !== "") h.set("Cp-Dialect", opts.dialect);
    return h;
  }

  /** Publishes the body in one message, or chunked (§4.2) when it does not fit. */
  private async publishBody(
    key: Key,
    saveId: string,
    msgId: string,
    hdrs: MsgHdrs,
    payload: Uint8Array,
    deadline: number,
  ): Promise<void> {
    hdrs.delete("Cp-Chunks");
    if (payload.length <= this.maxBodyBytes()) {
      await this.publishOnce(subjects.ingest(key), payload, msgId, hdrs, deadline);
      return;
    }
    await this.publishChunks(key, saveId, msgId, hdrs, payload, deadline);
    await this.publishOnce(subjects.ingest(key), new Uint8Array(0), msgId, hdrs, deadline);
  }

  /** Publishes the pieces of a body too large for one message (§4.2) and sets Cp-Chunks. */
  private async publishChunks(
    key: Key,
    saveId: string,
    msgId: string,
    hdrs: MsgHdrs,
    payload: Uint8Array,
    deadline: number,
  ): Promise<void> {
    let chunks: Uint8Array[];
    try {
      chunks = split(payload, this.maxBodyBytes());
    } catch (e) {
      throw new CheckpointError("too_large", `save ${saveId}: ${(e as Error).message}`);
    }
    const chunkSubject = subjects.chunk(key.namespace, saveId);
    let lastSeq = 0;
    for (const [n, chunk] of chunks.entries()) {
      const ch = natsHeaders();
      ch.set("Cp-Chunk", String(n));
      // One piece at a time, each acknowledged before the next, so the pieces are stored in order.
      const ack = await this.publishOnce(chunkSubject, chunk, `${msgId}.${n}`, ch, deadline);
      if (ack.seq <= lastSeq) {
        throw unavailable(`save ${saveId}: chunk ${n} was stored out of order (sequence ${ack.seq} after ${lastSeq}); save again under a new save id`);
      }
      lastSeq = ack.seq;
    }
    hdrs.set("Cp-Chunks", String(chunks.length));
  }

  private maxBodyBytes(): number {
    if (this.maxMessageBytes !== undefined) return this.maxMessageBytes;
    return pieceSize(this.nc.info?.max_payload ?? 1024 * 1024, CHUNK_ROOM);
  }

  /**
   * A JetStream publish, each attempt bounded, retried with the same Nats-Msg-Id on no answer or
   * "no responders" (a leader election, §4.3) until the deadline.
   */
  private async publishOnce(subject: string, data: Uint8Array, msgId: string, hdrs: MsgHdrs, deadline: number): Promise<PubAck> {
    let lastErr: unknown;
    let noStream = 0;
    for (let pause = 100; Date.now() < deadline; pause = Math.min(pause * 2, 1000)) {
      try {
        return await this.js.publish(subject, data, {
          msgID: msgId,
          headers: hdrs,
          timeout: Math.max(1, Math.min(PUBLISH_ATTEMPT_MS, deadline - Date.now())),
          retries: 1, // our loop retries, never the library on its own (§4.2)
        });
      } catch (e) {
        if (isMaxPayload(e)) throw new CheckpointError("too_large", `publishing to ${subject}: ${(e as Error).message}`);
        if (!isTransient(e)) throw unavailable(`publishing to ${subject}: ${(e as Error).message}`, e);
        lastErr = e;
        // "No responders" outside a cluster cannot be an election: after a few tries, no stream
        // exists (§4.3). In a cluster it may be one, so it is retried until the deadline.
        if (!(e instanceof natsErrors.TimeoutError) && ++noStream > NO_STREAM_RETRIES && !this.nc.info?.cluster) break;
      }
      await sleep(Math.min(pause, Math.max(0, deadline - Date.now())));
    }
    throw unavailable(
      `no JetStream stream acknowledged ${subject} in time (has checkpointd ever started on this server? ` +
        `with --tenants a login saves only to its own namespace): ${(lastErr as Error)?.message ?? "timeout"}`,
      lastErr,
    );
  }

  /**
   * Waits for the save's outcome on the subscription and, when it is slow, asks CP_RESULTS for the
   * stored one with a direct get (§4.3). A stored result already consumed (the refusal of an
   * earlier attempt, §4.5) is not taken again.
   */
  private async awaitResult(results: Inbox, subject: string, consumed: Set<string>, deadline: number): Promise<Uint8Array> {
    for (let wait = 250; ; wait = Math.min(wait * 2, 1000)) {
      const m = await results.next(Math.min(wait, Math.max(0, deadline - Date.now())));
      if (m) return m.data;
      if (Date.now() >= deadline) {
        throw unavailable(
          `the save was published and is durable, but its outcome did not arrive in time (${subject}); ` +
            `restore the session to see it, or save again with the same save id`,
        );
      }
      const stored = await this.lookupResult(subject, deadline);
      if (stored && !consumed.has(sha256(stored))) return stored;
    }
  }

  /** The result stored on subject, or undefined when there is none yet or no server answered. */
  private async lookupResult(subject: string, deadline: number): Promise<Uint8Array | undefined> {
    try {
      const m = await this.nc.request(subjects.directGetResult(subject), new Uint8Array(0), {
        timeout: Math.max(1, Math.min(LOOKUP_ATTEMPT_MS, deadline - Date.now())),
      });
      // A status (404: none stored yet) has no body; the message must be the one of our subject.
      if (m.headers?.hasError || (m.headers?.code ?? 0) !== 0) return undefined;
      if (m.headers?.get("Nats-Subject") !== subject) return undefined;
      return m.data;
    } catch {
      return undefined;
    }
  }

  /**
   * Decides whether to believe a result (§4.3 "End-to-end check"): it must name this save, and
   * `received` must be the hash of what was sent. A success without that hash is believed only once
   * a `get` shows the version it names was made by this save id. Anything else is `corrupt`.
   */
  private async checkResult(data: Uint8Array, key: Key, saveId: string, sent: string, deadline: number): Promise<SavedVersion> {
    let res: SaveResult;
    try {
      res = JSON.parse(utf8Decode(data)) as SaveResult;
    } catch (e) {
      throw corrupt(`save ${saveId}: the result is not JSON: ${(e as Error).message}`);
    }
    const where = `save ${saveId} of ${fmtKey(key)}`;
    if (res === null || typeof res !== "object" || res.saveId !== saveId || !sameKey(res.key, key)) {
      throw corrupt(`${where}: the result names save ${JSON.stringify(res?.saveId)} of ${fmtKey(res?.key)}`);
    }
    if (res.error) {
      if (res.received && res.received !== sent) {
        throw corrupt(`${where}: the refusal is of a body with hash ${res.received}, but ${sent} was sent`);
      }
      throw CheckpointError.fromWire(res.error);
    }
    if (!res.ok || !res.version || typeof res.version.version !== "number") {
      throw internal(`${where}: the result has neither a version nor an error`);
    }
    // A duplicate the daemon could not compare says so; the caller learns it with the record.
    const unverified = res.duplicate && typeof res.unverified === "string" && res.unverified !== "" ? { unverified: res.unverified } : {};
    if (res.received === sent) return { ...checkRecord(res.version), ...unverified };
    // No hash, or another one (an earlier attempt that sent the body differently, a duplicate of a
    // chunked save whose chunks are gone, or a result the daemon did not write): ask the daemon.
    let v: VersionRecord;
    try {
      v = await this.get(key, res.version.version, { timeoutMs: Math.max(1, deadline - Date.now()) });
    } catch (e) {
      if (e instanceof CheckpointError && e.code === "not_found") {
        throw corrupt(`${where}: the result names version ${res.version.version}, which does not exist`);
      }
      throw e;
    }
    if (v.saveId !== saveId) {
      throw corrupt(`${where}: the result names version ${v.version}, which save ${JSON.stringify(v.saveId)} made`);
    }
    return { ...v, ...unverified };
  }

  // ---------------------------------------------------------------------------------------------
  // Reading (§5)

  /** The record of one version; version 0 or absent: the head. */
  async get(key: KeyLike, version = 0, opts: { timeoutMs?: number } = {}): Promise<VersionRecord> {
    const k = toKey(key);
    checkRange("version", version, 0);
    const reply = await this.request(k.namespace, "get", { session: k.session, agent: k.agent, version }, opts.timeoutMs);
    return checkRecord(parseJSON(reply, "get") as VersionRecord);
  }

  /**
   * Restores a version (default: the head): read its first piece, which carries the version's
   * record (Cp-Version) → read the other pieces → check SHA-256 and length against the record (§5,
   * "Restoring, step by step"): one request when the conversation fits one reply. A daemon that
   * sends no record (before checkpointd 0.5) is asked get for it, as before. With `encoding:
   * "zstd"`, a daemon that does not serve it (bad_request) or a zstd body that does not check out
   * is read again as identity, which every daemon serves and checks before sending.
   */
  async restore(key: KeyLike, version = 0, opts: ReadOptions = {}): Promise<Restored> {
    const k = toKey(key);
    checkRange("version", version, 0);
    const deadline = Date.now() + (opts.timeoutMs ?? this.timeoutMs);
    const encoding = opts.encoding ?? "identity";
    const { record, first } = await this.openRead(k, version, { ...opts, encoding }, deadline);
    if (encoding !== "identity") {
      try {
        return await this.readChecked(k, record, { ...opts, encoding }, deadline, first);
      } catch (e) {
        if (!(e instanceof CheckpointError && (e.code === "bad_request" || e.code === "corrupt"))) throw e;
      }
    }
    return this.readChecked(k, record, { ...opts, encoding: "identity" }, deadline, encoding === "identity" ? first : undefined);
  }

  /**
   * Asks for the first piece of a read of `version` (0: the head) and takes the version's record
   * from its Cp-Version header (§5). A daemon before checkpointd 0.5 sends none: it refuses version
   * 0 as bad_request and answers an exact version without it; the record is then asked for with
   * get, and the piece kept if it is of the version get named (an exact one; the head may have moved).
   */
  private async openRead(k: Key, version: number, opts: ReadOptions, deadline: number): Promise<{ record: VersionRecord; first?: Msg }> {
    const req = this.readRequest(k, version, opts, 0);
    let m: Msg | undefined;
    try {
      m = await this.request(k.namespace, "read", req, Math.max(1, deadline - Date.now()));
    } catch (e) {
      if (!(e instanceof CheckpointError && e.code === "bad_request")) throw e;
    }
    const h = m?.headers?.get("Cp-Version") ?? "";
    if (m && h !== "") return { record: recordOf(h, k, version), first: m };
    const record = await this.get(k, version, { timeoutMs: Math.max(1, deadline - Date.now()) });
    return { record, first: version !== 0 ? m : undefined };
  }

  /** Reads a version (or a view of it) and checks it against Cp-Hash and, for the full view, the record. */
  private async readChecked(k: Key, record: VersionRecord, opts: ReadOptions, deadline: number, first?: Msg): Promise<Restored> {
    const what = `restore ${fmtKey(k)} v${record.version}`;
    const { bytes, hash } = await this.read(k, record.version, opts, record.rawBytes, deadline, first);
    if (sha256(bytes) !== hash) throw corrupt(`${what}: the bytes read do not hash to Cp-Hash ${hash}`);
    if ((opts.view ?? "full") === "full" && !opts.maxMessages) {
      if (hash !== record.hash) throw corrupt(`${what}: Cp-Hash ${hash} is not the record's ${record.hash}`);
      if (bytes.length !== record.rawBytes) throw corrupt(`${what}: ${bytes.length} bytes, the record says ${record.rawBytes}`);
    }
    return new Restored(record, bytes);
  }

  /**
   * Reads one exact version in pieces until Cp-Total (§5), and decodes it by Cp-Encoding. limit
   * bounds what is accepted: no view of a version is longer than the version itself. An encoded
   * body is bounded before anything is allocated for it: its decoded length (Cp-Raw-Total) by
   * limit, its own length by Cp-Raw-Total + Cp-Raw-Total/128 + 64 KiB, and it must decode to exactly
   * Cp-Raw-Total bytes. firstPiece, if given, is the reply to the first piece, already received.
   */
  private async read(
    key: Key,
    version: number,
    opts: ReadOptions,
    limit: number,
    deadline: number,
    firstPiece?: Msg,
  ): Promise<{ bytes: Uint8Array; hash: string }> {
    const req = this.readRequest(key, version, opts, 0);
    let pending = firstPiece;
    let first: { total: number; hash: string; encoding: string; rawTotal: string } | undefined;
    let rawTotal = limit;
    const what = `read ${fmtKey(key)} v${version}`;
    // The pieces, by offset (§12); the limit is checked per piece, the totals below.
    const joiner = new OffsetJoiner(limit + Math.floor(limit / 128) + 65536);
    let body: Uint8Array;
    try {
      do {
        req.offset = joiner.next;
        const m = pending ?? (await this.request(key.namespace, "read", req, Math.max(1, deadline - Date.now())));
        pending = undefined;
        const cur = {
          total: headerInt(m, "Cp-Total", what),
          hash: m.headers?.get("Cp-Hash") ?? "",
          encoding: m.headers?.get("Cp-Encoding") || "identity",
          rawTotal: m.headers?.get("Cp-Raw-Total") ?? "",
        };
        if (!first) {
          first = cur;
          rawTotal = this.checkReadBounds(first, limit, what);
        }
        joiner.expect(cur.total, `${cur.encoding} ${cur.rawTotal} ${cur.hash}`);
        joiner.add(parseNumber("Cp-Offset", m.headers?.get("Cp-Offset"), joiner.taken), m.data);
      } while (!joiner.done);
      body = joiner.finish();
    } catch (e) {
      if (e instanceof PieceError) throw corrupt(`${what}: ${e.message}`);
      throw e;
    }
    if (first.encoding === "identity") return { bytes: body, hash: first.hash };
    const bytes = decoders[first.encoding].decode(body, rawTotal);
    if (bytes.length !== rawTotal) throw corrupt(`${what}: the ${first.encoding} body decodes to ${bytes.length} bytes, Cp-Raw-Total says ${rawTotal}`);
    return { bytes, hash: first.hash };
  }

  /** The body of a read request (§5) for one version (0: the head, at offset 0 only). */
  private readRequest(key: Key, version: number, opts: ReadOptions, offset: number): Record<string, unknown> {
    if (opts.maxMessages !== undefined) checkRange("maxMessages", opts.maxMessages, 0);
    const req: Record<string, unknown> = { session: key.session, agent: key.agent, version, offset };
    if (opts.view && opts.view !== "full") req.view = opts.view;
    if (opts.maxMessages) req.maxMessages = opts.maxMessages;
    if (opts.encoding && opts.encoding !== "identity") req.encoding = opts.encoding;
    return req;
  }

  /** Checks the first piece's totals against limit; returns the decoded length to expect. */
  private checkReadBounds(first: { total: number; encoding: string; rawTotal: string }, limit: number, what: string): number {
    if (first.encoding === "identity") {
      if (first.total > limit) throw corrupt(`${what}: Cp-Total ${first.total} exceeds the ${limit} bytes of the version`);
      return first.total;
    }
    if (!decoders[first.encoding]) throw internal(`${what}: the daemon sent encoding ${JSON.stringify(first.encoding)}, which this client cannot decode`);
    if (!/^(0|[1-9][0-9]{0,15})$/.test(first.rawTotal)) throw corrupt(`${what}: Cp-Raw-Total ${JSON.stringify(first.rawTotal)} is not a length`);
    const raw = Number(first.rawTotal);
    if (raw > limit) throw corrupt(`${what}: Cp-Raw-Total ${raw} exceeds the ${limit} bytes of the version`);
    const most = raw + Math.floor(raw / 128) + 65536;
    if (first.total > most) throw corrupt(`${what}: Cp-Total ${first.total} exceeds the ${most} bytes a ${first.encoding} body of ${raw} can have`);
    return raw;
  }

  /**
   * The heads of the namespace's sessions (every page, following the daemon's cursor), optionally of
   * one session only (all its agents), sorted by session and agent (the daemon lists them in the
   * order they were created, §5 "Paging").
   */
  async list(namespace = "default", opts: { session?: string; timeoutMs?: number } = {}): Promise<Head[]> {
    checkId("namespace", namespace);
    const out: Head[] = [];
    let cursor: string | undefined;
    for (;;) {
      const body: Record<string, unknown> = {};
      if (opts.session) body.session = opts.session;
      if (cursor !== undefined) body.cursor = cursor;
      const reply = parseJSON(await this.request(namespace, "list", body, opts.timeoutMs), "list") as { sessions?: Head[]; more?: boolean; cursor?: string };
      out.push(...(reply.sessions ?? []));
      if (!reply.more) break;
      if (typeof reply.cursor !== "string" || reply.cursor === "" || reply.cursor === cursor) throw internal("list: more is true but the reply gives no new cursor");
      cursor = reply.cursor;
    }
    const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
    return out.sort((a, b) => cmp(a.key.session, b.key.session) || cmp(a.key.agent, b.key.agent));
  }

  /**
   * One page of the namespace's sessions, in the order they were created, from `cursor` (default:
   * the first page): at most `limit` of them (1..10000; default 0: as many as fit in one reply),
   * exactly `limit` unless the listing ends first or they do not fit in one message (§5 "Paging").
   * `next` is the cursor of the page after, undefined after the last page: pass it back as it came.
   */
  async listPage(
    namespace = "default",
    opts: { cursor?: string; limit?: number; session?: string; timeoutMs?: number } = {},
  ): Promise<{ sessions: Head[]; next?: string }> {
    checkId("namespace", namespace);
    const limit = opts.limit ?? 0;
    checkRange("limit", limit, 0, MAX_LIST_LIMIT);
    const body: Record<string, unknown> = {};
    if (opts.session) body.session = opts.session;
    if (opts.cursor) body.cursor = opts.cursor;
    if (limit > 0) body.limit = limit;
    const reply = parseJSON(await this.request(namespace, "list", body, opts.timeoutMs), "list") as { sessions?: Head[]; more?: boolean; cursor?: string };
    const sessions = reply.sessions ?? [];
    if (!reply.more) return { sessions };
    if (typeof reply.cursor !== "string" || reply.cursor === "" || reply.cursor === opts.cursor) throw internal("list: more is true but the reply gives no new cursor");
    return { sessions, next: reply.cursor };
  }

  /**
   * The newest versions of one session, newest first: at most `limit` (default: every version). The
   * daemon reads them from the head back (§5 "history, newest first"), so a long history's recent
   * versions are cheap.
   */
  async recentHistory(key: KeyLike, opts: { limit?: number; timeoutMs?: number } = {}): Promise<VersionRecord[]> {
    const k = toKey(key);
    const limit = opts.limit ?? 0;
    checkRange("limit", limit, 0);
    const out: VersionRecord[] = [];
    let cursor: string | undefined;
    for (;;) {
      const body: Record<string, unknown> = { session: k.session, agent: k.agent, newestFirst: true };
      if (limit > 0) body.limit = limit - out.length;
      if (cursor !== undefined) body.cursor = cursor;
      const reply = parseJSON(await this.request(k.namespace, "history", body, opts.timeoutMs), "history") as {
        versions?: VersionRecord[];
        more?: boolean;
        cursor?: string;
      };
      out.push(...(reply.versions ?? []).map(checkRecord));
      if (limit > 0 && out.length >= limit) return out.slice(0, limit);
      if (!reply.more) return out;
      if (typeof reply.cursor !== "string" || reply.cursor === "" || reply.cursor === cursor) throw internal("history: more is true but the reply gives no new cursor");
      cursor = reply.cursor;
    }
  }

  /** Every version of one session after `after` (default: all), oldest first, every page. */
  async history(key: KeyLike, opts: { after?: number; timeoutMs?: number } = {}): Promise<VersionRecord[]> {
    const k = toKey(key);
    let after = opts.after ?? 0;
    checkRange("after", after, 0);
    const out: VersionRecord[] = [];
    for (;;) {
      const reply = parseJSON(
        await this.request(k.namespace, "history", { session: k.session, agent: k.agent, after }, opts.timeoutMs),
        "history",
      ) as { versions?: VersionRecord[]; more?: boolean };
      const page = reply.versions ?? [];
      out.push(...page.map(checkRecord));
      if (!reply.more) return out;
      if (page.length === 0 || page[page.length - 1].version <= after) throw internal("history: more is true but the page makes no progress");
      after = page[page.length - 1].version;
    }
  }

  /**
   * Removes the versions a retention policy does not keep (§5 prune): of one session, or (no
   * session) of every session of the namespace. The head is always kept.
   */
  async prune(
    namespace: string,
    opts: { session?: string; agent?: string; keepLast?: number; maxAgeSeconds?: number; dryRun?: boolean; timeoutMs?: number } = {},
  ): Promise<PruneReply> {
    checkId("namespace", namespace);
    const body: Record<string, unknown> = {};
    if (opts.session) {
      const k = toKey({ namespace, session: opts.session, agent: opts.agent });
      body.session = k.session;
      body.agent = k.agent;
    }
    if (opts.keepLast !== undefined) body.keepLast = (checkRange("keepLast", opts.keepLast, 0), opts.keepLast);
    if (opts.maxAgeSeconds !== undefined) body.maxAgeSeconds = (checkRange("maxAgeSeconds", opts.maxAgeSeconds, 0, 9223372036), opts.maxAgeSeconds);
    if (opts.dryRun) body.dryRun = true;
    return parseJSON(await this.request(namespace, "prune", body, opts.timeoutMs), "prune") as PruneReply;
  }

  /**
   * Removes a session entirely (§10 delete): head, version records, stored messages. With expected,
   * only while its head is that version (else `conflict`). Returns the deleted head's record.
   */
  async delete(key: KeyLike, opts: { expected?: number; timeoutMs?: number } = {}): Promise<VersionRecord> {
    const k = toKey(key);
    const body: Record<string, unknown> = { session: k.session, agent: k.agent };
    if (opts.expected !== undefined) body.expected = (checkRange("expected", opts.expected, 0), opts.expected);
    return parseJSON(await this.request(k.namespace, "delete", body, opts.timeoutMs), "delete") as VersionRecord;
  }

  // ---------------------------------------------------------------------------------------------
  // Leases (§9)

  /** Acquires the session's lease for owner; refused with `leased` while another owner holds it, unless force. */
  async acquire(key: KeyLike, owner: string, ttlMillis: number, opts: { force?: boolean } = {}): Promise<Lease> {
    const k = toKey(key);
    checkId("owner", owner);
    checkRange("ttlMillis", ttlMillis, 1, 86_400_000);
    const st = await this.leaseOp(k, { op: "acquire", owner, ttlMillis, force: opts.force || undefined });
    return new Lease(this, k, st, ttlMillis);
  }

  /** The session's lease as it is (epoch 0: never leased). */
  async leaseStatus(key: KeyLike): Promise<LeaseState> {
    return this.leaseOp(toKey(key), { op: "status" });
  }

  /** @internal */
  async leaseOp(k: Key, body: Record<string, unknown>): Promise<LeaseState> {
    const reply = await this.request(k.namespace, "lease", { session: k.session, agent: k.agent, ...body });
    return parseJSON(reply, "lease") as LeaseState;
  }

  // ---------------------------------------------------------------------------------------------
  // Requests

  /**
   * A request to the checkpointd service, retried on `busy` after retryAfterMs (with jitter, and
   * longer if busy again) within the timeout. Service errors become CheckpointErrors.
   */
  async request(namespace: string, op: string, body: unknown, timeoutMs?: number): Promise<Msg> {
    const subject = subjects.api(namespace, op);
    const deadline = Date.now() + (timeoutMs ?? this.timeoutMs);
    const data = new TextEncoder().encode(JSON.stringify(body));
    for (let attempt = 0; ; attempt++) {
      let m: Msg;
      try {
        m = await this.nc.request(subject, data, { timeout: Math.max(1, deadline - Date.now()) });
      } catch (e) {
        if (e instanceof natsErrors.NoRespondersError || (e as { cause?: unknown })?.cause instanceof natsErrors.NoRespondersError) {
          throw unavailable(`${subject}: no responders (no checkpointd running, or this login does not reach namespace ${JSON.stringify(namespace)})`, e);
        }
        if (e instanceof natsErrors.TimeoutError) throw unavailable(`${subject}: no answer in time`, e);
        throw unavailable(`${subject}: ${(e as Error).message}`, e);
      }
      const err = serviceError(m);
      if (!err) return m;
      if (err.code !== "busy") throw err;
      const wait = busyPause(err.retryAfterMs, attempt);
      if (Date.now() + wait >= deadline) throw err;
      await sleep(wait);
    }
  }
}

/**
 * A held lease (§9). Save through it (the epoch rides on every save), renew at a third of the TTL,
 * release when done. A `fenced` refusal means the session was taken over: stop writing.
 */
export class Lease {
  private timer: NodeJS.Timeout | undefined;
  constructor(
    readonly client: Client,
    readonly key: Key,
    public state: LeaseState,
    readonly ttlMillis: number,
  ) {}

  get epoch(): number {
    return this.state.epoch;
  }

  save(conversation: ConversationInput, opts: SaveOptions = {}): Promise<VersionRecord> {
    return this.client.save(this.key, conversation, { ...opts, epoch: this.epoch });
  }

  append(baseVersion: number, messages: ConversationInput, opts: SaveOptions = {}): Promise<VersionRecord> {
    return this.client.append(this.key, baseVersion, messages, { ...opts, epoch: this.epoch });
  }

  async renew(ttlMillis = this.ttlMillis): Promise<LeaseState> {
    checkRange("ttlMillis", ttlMillis, 1, 86_400_000);
    this.state = await this.client.leaseOp(this.key, { op: "renew", epoch: this.epoch, ttlMillis });
    return this.state;
  }

  async release(): Promise<LeaseState> {
    this.stopRenewing();
    this.state = await this.client.leaseOp(this.key, { op: "release", epoch: this.epoch });
    return this.state;
  }

  /** Pause (§9): the final save with reason pause, then release. Returns the final version. */
  async pause(conversation: ConversationInput, opts: SaveOptions = {}): Promise<VersionRecord> {
    const v = await this.save(conversation, { ...opts, reason: "pause" });
    await this.release();
    return v;
  }

  /** Renews every third of the TTL until release or stopRenewing; onError gets a failed renewal (fenced: stop). */
  startRenewing(onError: (e: unknown) => void): void {
    this.stopRenewing();
    this.timer = setInterval(() => {
      this.renew().catch((e) => {
        if (e instanceof CheckpointError && e.code === "fenced") this.stopRenewing();
        onError(e);
      });
    }, Math.max(1, Math.floor(this.ttlMillis / 3)));
    this.timer.unref();
  }

  stopRenewing(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

// -----------------------------------------------------------------------------------------------
// Helpers

/**
 * A subscription read one message at a time, with a timeout. It keeps at most MAX_QUEUED unread
 * messages (only the first is ever checked: a flood of forged results costs no memory).
 */
const MAX_QUEUED = 16;
class Inbox {
  private readonly queue: Msg[] = [];
  private waiter: ((m: Msg | undefined) => void) | undefined;
  constructor(private readonly sub: Subscription) {
    void (async () => {
      for await (const m of sub) {
        if (this.waiter) {
          const w = this.waiter;
          this.waiter = undefined;
          w(m);
        } else if (this.queue.length < MAX_QUEUED) {
          this.queue.push(m);
        }
      }
    })();
  }
  next(timeoutMs: number): Promise<Msg | undefined> {
    const m = this.queue.shift();
    if (m) return Promise.resolve(m);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.waiter = undefined;
        resolve(undefined);
      }, timeoutMs);
      this.waiter = (msg) => {
        clearTimeout(t);
        resolve(msg);
      };
    });
  }
  close(): void {
    this.sub.unsubscribe();
  }
}

function serviceError(m: Msg): CheckpointError | undefined {
  const num = m.headers?.get("Nats-Service-Error-Code");
  if (!num) return undefined;
  let w: WireError | undefined;
  try {
    w = JSON.parse(utf8Decode(m.data)) as WireError;
  } catch {
    // fall back on the headers
  }
  if (!w || typeof w !== "object" || typeof w.code !== "string") {
    w = { code: codeOfNumber(Number(num)), message: m.headers?.get("Nats-Service-Error") || `service error ${num}` };
  }
  return CheckpointError.fromWire(w);
}

function codeOfNumber(n: number): string {
  const byNumber: Record<number, string> = {
    400: "bad_request", 404: "not_found", 409: "conflict", 410: "moved", 413: "too_large",
    415: "unknown_format", 422: "invalid", 423: "leased", 429: "busy", 503: "unavailable",
  };
  return byNumber[n] ?? "internal";
}

function parseJSON(m: Msg, what: string): unknown {
  try {
    return JSON.parse(utf8Decode(m.data));
  } catch (e) {
    throw internal(`${what}: the reply is not JSON: ${(e as Error).message}`);
  }
}

function headerInt(m: Msg, name: string, what: string): number {
  const v = m.headers?.get(name) ?? "";
  if (!/^(0|[1-9][0-9]{0,15})$/.test(v) || Number(v) > MAX_SAFE) throw internal(`${what}: header ${name}: ${JSON.stringify(v)} is not an integer in 0..${MAX_SAFE}`);
  return Number(v);
}

/**
 * The record a read's first piece carries (Cp-Version, §5): JSON of a known format, of the key
 * asked for, and of the version asked for (any version for the head, 0).
 */
function recordOf(h: string, k: Key, version: number): VersionRecord {
  let v: VersionRecord;
  try {
    v = JSON.parse(h) as VersionRecord;
  } catch (e) {
    throw corrupt(`read ${fmtKey(k)} v${version}: header Cp-Version is not a version record: ${(e as Error).message}`);
  }
  checkRecord(v);
  if (!sameKey(v.key, k) || !Number.isSafeInteger(v.version) || v.version < 1 || (version !== 0 && v.version !== version)) {
    throw corrupt(`read ${fmtKey(k)} v${version}: the reply carries the record of ${fmtKey(v.key)} v${v.version}`);
  }
  return v;
}

function checkRecord(v: VersionRecord): VersionRecord {
  if (!v || typeof v !== "object" || !KNOWN_RECORD_FORMATS.includes(v.format)) {
    throw new CheckpointError("unknown_format", `version record format ${JSON.stringify(v?.format)} is not one this client knows (${KNOWN_RECORD_FORMATS.join(", ")})`);
  }
  return v;
}

/** The most sessions a `list` page may ask for (§5). */
const MAX_LIST_LIMIT = 10_000;

function checkRange(name: string, v: number, min: number, max = MAX_SAFE): void {
  if (!Number.isInteger(v) || v < min || v > max) throw badRequest(`${name}: ${v} is not an integer in ${min}..${max}`);
}

function sameKey(a: Key | undefined, b: Key): boolean {
  return !!a && a.namespace === b.namespace && a.session === b.session && a.agent === b.agent;
}

function fmtKey(k: Key | undefined): string {
  return k ? `${k.namespace}/${k.session}/${k.agent}` : "(no key)";
}

/** 16 random bytes in base64url: unguessable, and each character stands for itself in a subject (§2). */
export function randomToken(): string {
  return randomBytes(16).toString("base64url");
}

/**
 * How long to wait after the attempt-th busy answer in a row (§5 "Busy"): the daemon's hint (50 ms
 * without one), doubled for each busy answer in a row up to 16 times and at most 5 s, plus up to
 * half of it again as jitter, so that clients refused together do not come back together.
 */
function busyPause(hintMs: number | undefined, attempt: number): number {
  const base = Math.min((hintMs ?? 50) * 2 ** Math.min(attempt, 4), 5000);
  return Math.round(base * (1 + Math.random() * 0.5));
}

/** "No responders": nobody listens on the subject (nats.js reports it directly or as the cause). */
function isNoResponders(e: unknown): boolean {
  return e instanceof natsErrors.NoRespondersError || (e as { cause?: unknown })?.cause instanceof natsErrors.NoRespondersError;
}

/**
 * §4.0: how long to wait before sending a save request again after its result `data`, or
 * undefined when the result is final. `busy` and `unavailable` refusals stored nothing.
 */
function retryPause(data: Uint8Array, attempt: number): number | undefined {
  let res: SaveResult;
  try {
    res = JSON.parse(utf8Decode(data)) as SaveResult;
  } catch {
    return undefined; // checkResult says what is wrong with it
  }
  const code = res?.error?.code;
  if (code === "busy") return busyPause(res.error?.retryAfterMs, attempt);
  if (code === "unavailable") return busyPause(undefined, attempt);
  return undefined;
}

function isTransient(e: unknown): boolean {
  if (e instanceof natsErrors.TimeoutError || e instanceof natsErrors.NoRespondersError) return true;
  const name = (e as Error)?.name ?? "";
  const cause = (e as { cause?: unknown })?.cause;
  return name === "JetStreamNotEnabled" || cause instanceof natsErrors.NoRespondersError || cause instanceof natsErrors.TimeoutError;
}

function isMaxPayload(e: unknown): boolean {
  return /max.?payload/i.test((e as Error)?.message ?? "");
}

export { joinRaw, splitRaw };
