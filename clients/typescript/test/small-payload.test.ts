// Against a checkpointd on a nats-server whose max_payload is 32 KiB (checkpointd needs more than 16 KiB): every save of a real
// conversation is chunked at the size the client derives from the server's INFO, every restore
// comes in many pieces, and list and history answer in pages. Also: no daemon at all.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { connect, headers } from "@nats-io/transport-node";
import { join } from "node:path";
import { Client, CheckpointError, joinRaw, sha256 } from "../src/index.js";
import { Daemon, NatsServer, corpusDir } from "./support/daemon.js";
import { jsonCompact } from "./support/json.js";

const MAX_PAYLOAD = 32 * 1024;
const N = 120; // versions and sessions: their records fill several pages
let nats: NatsServer;
let d: Daemon;
let c: Client;

before(async () => {
  nats = await NatsServer.start(MAX_PAYLOAD);
  d = await Daemon.start([], nats.url);
  c = await Client.connect({ servers: nats.url }, { encoder: "identity" });
});
after(async () => {
  await c?.close();
  await d?.stop();
  await nats?.stop();
});

test("a 600 KB conversation is saved in chunks and restored in pieces, byte for byte (also by the Go CLI)", async () => {
  const text = readFileSync(join(corpusDir, "claude_code_spotter_258c7280.json"), "utf8");
  const canonical = Buffer.from(jsonCompact(text));
  assert.ok(canonical.length > 10 * MAX_PAYLOAD);
  const v = await c.save("gemini", text);
  assert.equal(v.rawBytes, canonical.length);
  // One read reply holds only part of it: the restore below must have asked for several pieces.
  const first = await c.request("default", "read", { session: "gemini", version: v.version, offset: 0 });
  assert.equal(Number(first.headers?.get("Cp-Total")), canonical.length);
  assert.ok(first.data.length < canonical.length / 10, `first piece: ${first.data.length} bytes`);
  const r = await c.restore("gemini");
  assert.ok(Buffer.from(r.bytes).equals(canonical));
  assert.ok((await d.ctl(["restore", "gemini"])).equals(canonical));
});

const firstPageMore = (m: { data: Uint8Array }) => (JSON.parse(new TextDecoder().decode(m.data)) as { more?: boolean }).more;

test("list and history page through every session and version", async () => {
  const msg = (i: number) => `{"role":"user","content":[{"type":"text","text":"${i}"}],"timestamp":${i}}`;
  const ns = "paging";
  const key = { namespace: ns, session: "many" };
  let v = await c.save(key, joinRaw([msg(0)]));
  for (let i = 1; i < N; i++) v = await c.append(key, v.version, joinRaw([msg(i)]));
  const hist = await c.history(key);
  assert.deepEqual(hist.map((h) => h.version), Array.from({ length: N }, (_, i) => i + 1));
  // The daemon had to page: one reply holds at most max_payload − 8 KiB of records.
  assert.equal(firstPageMore(await c.request(ns, "history", { session: "many" })), true, "history paged");
  assert.deepEqual((await c.history(key, { after: N - 3 })).map((h) => h.version), [N - 2, N - 1, N]);

  const sessions = Array.from({ length: N }, (_, i) => `s${String(i).padStart(3, "0")}`);
  for (const s of sessions) await c.save({ namespace: ns, session: s }, joinRaw([msg(1)]));
  const heads = await c.list(ns);
  assert.deepEqual(heads.map((h) => h.key.session), ["many", ...sessions].sort());
  assert.equal(firstPageMore(await c.request(ns, "list", {})), true, "list paged");
  const newest = await c.recentHistory(key, { limit: 5 });
  assert.deepEqual(newest.map((h) => h.version), [N, N - 1, N - 2, N - 3, N - 4]);
  assert.deepEqual((await c.recentHistory(key)).map((h) => h.version), Array.from({ length: N }, (_, i) => N - i), "every page, newest first");
});

test("with no checkpointd on the server, saves and requests fail typed (unavailable) within the timeout", async () => {
  const bare = await NatsServer.start(MAX_PAYLOAD);
  const lone = await Client.connect({ servers: bare.url }, { timeoutMs: 1500 });
  try {
    for (const op of [() => lone.get("s"), () => lone.save("s", joinRaw([])), () => lone.acquire("s", "me", 1000)]) {
      const t0 = Date.now();
      await assert.rejects(op(), (e: unknown) => e instanceof CheckpointError && e.code === "unavailable");
      assert.ok(Date.now() - t0 < 5000);
    }
  } finally {
    await lone.close();
    await bare.stop();
  }
});

/**
 * A hostile responder on a server without checkpointd answers `get` and `read` itself (anyone may,
 * without per-namespace accounts). The client checks what it restores against the record and
 * Cp-Hash, and refuses replies that do not add up.
 */
test("hostile: read replies that do not match the record (hash, length, offset, total) are refused as corrupt", async () => {
  const bare = await NatsServer.start(MAX_PAYLOAD);
  const rogue = await connect({ servers: bare.url });
  const lone = await Client.connect({ servers: bare.url }, { timeoutMs: 3000 });
  const genuine = new TextEncoder().encode(joinRaw(['{"role":"user","content":"hi","timestamp":1}']));
  const record = {
    format: 2, key: { namespace: "default", session: "s", agent: "main" }, version: 1, parent: 0,
    hash: sha256(genuine), saveId: "x", reason: "turn", created: "2026-01-01T00:00:00Z",
    rawBytes: genuine.length, storedBytes: 1, counts: { messages: 1, user: 1, assistant: 0, toolResult: 0, extension: 0, toolCalls: 0 },
  };
  // Each case: what the rogue sends for a read at an offset.
  type Reply = { body: Uint8Array; total: number; offset: number; hash: string };
  let answer: (offset: number) => Reply = () => ({ body: genuine, total: genuine.length, offset: 0, hash: record.hash });
  rogue.subscribe("cp.api.default.get", { callback: (_e, m) => void m.respond(JSON.stringify(record)) });
  rogue.subscribe("cp.api.default.read", {
    callback: (_e, m) => {
      const req = JSON.parse(new TextDecoder().decode(m.data)) as { offset: number };
      const a = answer(req.offset);
      const h = headers();
      h.set("Cp-Total", String(a.total));
      h.set("Cp-Offset", String(a.offset));
      h.set("Cp-Hash", a.hash);
      m.respond(a.body, { headers: h });
    },
  });
  await rogue.flush();
  try {
    assert.ok(Buffer.from((await lone.restore("s")).bytes).equals(Buffer.from(genuine)), "the honest answer restores");
    const altered = Buffer.from(genuine);
    altered[altered.length - 3] ^= 1; // same length, other bytes
    const cases: [string, (o: number) => Reply][] = [
      ["other bytes, the record's hash", () => ({ body: altered, total: altered.length, offset: 0, hash: record.hash })],
      ["other bytes, their own Cp-Hash", () => ({ body: altered, total: altered.length, offset: 0, hash: sha256(altered) })],
      ["a longer body than the record", () => ({ body: Buffer.concat([genuine, Buffer.from(" ")]), total: genuine.length + 1, offset: 0, hash: record.hash })],
      ["a piece at another offset", (o) => ({ body: genuine.subarray(o, o + 5), total: genuine.length, offset: o === 0 ? 0 : o + 1, hash: record.hash })],
      ["more bytes than Cp-Total", () => ({ body: genuine, total: 4, offset: 0, hash: record.hash })],
      ["an empty piece before the end", () => ({ body: new Uint8Array(0), total: genuine.length, offset: 0, hash: record.hash })],
      ["pieces disagreeing on Cp-Total", (o) => ({ body: genuine.subarray(o, o + 5), total: genuine.length - (o === 0 ? 0 : 1), offset: o, hash: record.hash })],
    ];
    for (const [what, a] of cases) {
      answer = a;
      await assert.rejects(lone.restore("s"), (e: unknown) => e instanceof CheckpointError && e.code === "corrupt", what);
    }
  } finally {
    await lone.close();
    await rogue.close();
    await bare.stop();
  }
});

function zstdTool(b: Uint8Array): Buffer | undefined {
  try {
    return execFileSync("zstd", ["-q", "-c"], { input: b });
  } catch {
    return undefined;
  }
}

/**
 * zstd reads (§5) from a rogue responder: an honest zstd body is decoded; one whose totals break the
 * bounds, or whose bytes do not check out, is read again as identity; when that is bad too, corrupt.
 */
test("hostile: zstd read replies out of bounds or not matching are read again as identity", { skip: !zstdTool(new Uint8Array(1)) && "no zstd tool" }, async () => {
  const bare = await NatsServer.start(MAX_PAYLOAD);
  const rogue = await connect({ servers: bare.url });
  const lone = await Client.connect({ servers: bare.url }, { timeoutMs: 3000 });
  const genuine = new TextEncoder().encode(joinRaw(Array.from({ length: 50 }, (_, i) => `{"role":"user","content":"message ${i}","timestamp":${i}}`)));
  const z = zstdTool(genuine)!;
  const record = {
    format: 2, key: { namespace: "default", session: "s", agent: "main" }, version: 1, parent: 0,
    hash: sha256(genuine), saveId: "x", reason: "turn", created: "2026-01-01T00:00:00Z",
    rawBytes: genuine.length, storedBytes: 1, counts: { messages: 50, user: 50, assistant: 0, toolResult: 0, extension: 0, toolCalls: 0 },
  };
  type Reply = { body: Uint8Array; total: number; raw?: number; hash: string };
  const honestZstd = (): Reply => ({ body: z, total: z.length, raw: genuine.length, hash: record.hash });
  const honestIdentity = (): Reply => ({ body: genuine, total: genuine.length, hash: record.hash });
  let zstdAnswer = honestZstd;
  let identityAnswer = honestIdentity;
  const asked: string[] = [];
  rogue.subscribe("cp.api.default.get", { callback: (_e, m) => void m.respond(JSON.stringify(record)) });
  rogue.subscribe("cp.api.default.read", {
    callback: (_e, m) => {
      const req = JSON.parse(new TextDecoder().decode(m.data)) as { offset: number; encoding?: string };
      const enc = req.encoding ?? "identity";
      asked.push(enc);
      const a = enc === "zstd" ? zstdAnswer() : identityAnswer();
      const h = headers();
      h.set("Cp-Total", String(a.total));
      h.set("Cp-Offset", String(req.offset));
      h.set("Cp-Hash", a.hash);
      h.set("Cp-Encoding", enc);
      if (a.raw !== undefined) h.set("Cp-Raw-Total", String(a.raw));
      if (req.offset === 0) h.set("Cp-Version", JSON.stringify(record)); // as checkpointd 0.5 does: no get
      m.respond(a.body.subarray(req.offset), { headers: h });
    },
  });
  await rogue.flush();
  const restore = async () => {
    asked.length = 0;
    return Buffer.from((await lone.restore("s", 0, { encoding: "zstd" })).bytes);
  };
  try {
    assert.ok((await restore()).equals(Buffer.from(genuine)));
    assert.deepEqual(asked, ["zstd"], "an honest zstd body is decoded, not read again");

    const other = zstdTool(new TextEncoder().encode(new TextDecoder().decode(genuine).replace("message 7", "message 8")))!;
    const bad: [string, () => Reply][] = [
      ["Cp-Raw-Total above rawBytes", () => ({ ...honestZstd(), raw: genuine.length + 1 })],
      ["Cp-Total beyond raw + raw/128 + 64 KiB", () => ({ ...honestZstd(), total: genuine.length + Math.floor(genuine.length / 128) + 65537 })],
      ["decodes to other bytes", () => ({ body: other, total: other.length, raw: genuine.length, hash: record.hash })],
      ["decodes shorter than Cp-Raw-Total", () => ({ ...honestZstd(), raw: genuine.length - 1 })],
      ["not zstd at all", () => ({ body: genuine, total: genuine.length, raw: genuine.length, hash: record.hash })],
    ];
    for (const [what, a] of bad) {
      zstdAnswer = a;
      assert.ok((await restore()).equals(Buffer.from(genuine)), what);
      // Refused on its first piece (bounds come before any further request or allocation).
      assert.deepEqual(asked, ["zstd", "identity"], `${what}: read again as identity`);
    }
    identityAnswer = () => ({ ...honestIdentity(), hash: sha256(new Uint8Array(1)) });
    await assert.rejects(restore(), (e: unknown) => e instanceof CheckpointError && e.code === "corrupt", "both bad: corrupt");
  } finally {
    await lone.close();
    await rogue.close();
    await bare.stop();
  }
});
