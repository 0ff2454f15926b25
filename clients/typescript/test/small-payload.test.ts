// Against a checkpointd on a nats-server whose max_payload is 32 KiB (checkpointd needs more than 16 KiB): every save of a real
// conversation is chunked at the size the client derives from the server's INFO, every restore
// comes in many pieces, and list and history answer in pages. Also: no daemon at all.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Client, CheckpointError, joinRaw } from "../src/index.js";
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
