// Protocol paths a healthy daemon rarely takes, played by a raw NATS responder on a real
// nats-server (as internal/transfer/busy_test.go does for the Go SDK): busy replies and busy saves
// (§4.5, §5), and a result found only by direct get on CP_RESULTS (§4.3). The streams are created
// as checkpointd creates them (§3), so the client talks to real JetStream.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect, headers } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Client, CheckpointError, joinRaw, sha256, subjects } from "../src/index.js";
import { NatsServer } from "./support/daemon.js";

let nats: NatsServer;
let raw: NatsConnection;
let c: Client;

before(async () => {
  nats = await NatsServer.start(1024 * 1024);
  raw = await connect({ servers: nats.url });
  const jsm = await jetstreamManager(raw);
  await jsm.streams.add({ name: "CP_INGEST", subjects: ["cp.ingest.>"] });
  await jsm.streams.add({ name: "CP_RESULTS", subjects: ["cp.result.>"], max_msgs_per_subject: 1, allow_direct: true });
  c = await Client.connect({ servers: nats.url }, { timeoutMs: 5000, encoder: "identity" });
});
after(async () => {
  await c?.close();
  await raw?.close();
  await nats?.stop();
});

const key = { namespace: "default", session: "s", agent: "main" };
const body = joinRaw(['{"role":"user","content":"hi","timestamp":1}']);
const record = (saveId: string, version: number) => ({
  format: 2, key, version, parent: version - 1, hash: sha256(new TextEncoder().encode(body)), saveId, reason: "turn",
  created: "2026-01-01T00:00:00Z", rawBytes: body.length, storedBytes: 1,
  counts: { messages: 1, user: 1, assistant: 0, toolResult: 0, extension: 0, toolCalls: 0 },
});

function busyReply(m: { respond: (d: string, o: { headers: ReturnType<typeof headers> }) => boolean }, retryAfterMs: number): void {
  const h = headers();
  h.set("Nats-Service-Error-Code", "429");
  h.set("Nats-Service-Error", "busy");
  m.respond(JSON.stringify({ code: "busy", message: "checkpointd is busy (test)", retryAfterMs }), { headers: h });
}

test("a busy request is retried after retryAfterMs, and gives up typed busy at the deadline", async () => {
  let asked = 0;
  let busyFor = 3;
  const sub = raw.subscribe("cp.api.default.get", {
    callback: (_e, m) => {
      if (++asked <= busyFor) return busyReply(m, 20);
      m.respond(JSON.stringify(record("x", 7)));
    },
  });
  await raw.flush();
  try {
    const t0 = Date.now();
    assert.equal((await c.get("s")).version, 7);
    assert.equal(asked, 4, "busy three times, then served");
    assert.ok(Date.now() - t0 >= 3 * 20, "each retry waits at least the hint");

    asked = 0;
    busyFor = Infinity;
    const quick = new Client(c.nc, { timeoutMs: 600 });
    await assert.rejects(quick.get("s"), (e: unknown) => e instanceof CheckpointError && e.code === "busy" && e.retryAfterMs === 20);
    assert.ok(asked > 2 && asked < 40, `kept trying with growing waits: ${asked} requests`);
  } finally {
    sub.unsubscribe();
  }
});

test("a save refused busy is sent again under a new Nats-Msg-Id and the same save id", async () => {
  const seen: { msgId: string; saveId: string }[] = [];
  const sub = raw.subscribe("cp.ingest.>", {
    callback: (_e, m) => {
      const saveId = m.headers?.get("Cp-Save-Id") ?? "";
      seen.push({ msgId: m.headers?.get("Nats-Msg-Id") ?? "", saveId });
      const received = sha256(m.data);
      const res =
        seen.length === 1
          ? { saveId, key, ok: false, received, error: { code: "busy", message: "busy (test)", retryAfterMs: 30 } }
          : { saveId, key, ok: true, received, version: record(saveId, 1) };
      raw.publish(subjects.result("default", saveId), JSON.stringify(res));
    },
  });
  await raw.flush();
  try {
    const v = await c.save("s", body, { saveId: "turn-1" });
    assert.equal(v.version, 1);
    assert.equal(seen.length, 2);
    assert.equal(seen[0].saveId, "turn-1");
    assert.equal(seen[1].saveId, "turn-1");
    assert.notEqual(seen[0].msgId, seen[1].msgId);
    for (const s of seen) assert.match(s.msgId, /^turn-1\/[A-Za-z0-9_-]{22}$/, "the save id and an unguessable part");
  } finally {
    sub.unsubscribe();
  }
});

test("a result published before the client listened is found by direct get on CP_RESULTS", async () => {
  // The outcome of save "early" is already stored (the save was a duplicate whose result was
  // published long ago); nothing will be published live.
  const saveId = "early";
  await raw.publish(subjects.result("default", saveId), JSON.stringify({ saveId, key, ok: true, duplicate: true, received: sha256(new TextEncoder().encode(body)), version: record(saveId, 3) }));
  await raw.flush();
  const t0 = Date.now();
  const v = await c.save("s", body, { saveId });
  assert.equal(v.version, 3);
  assert.ok(Date.now() - t0 < 3000);
});

/** A read's first piece of body, as a daemon sends it (identity, in one piece). */
function readPiece(m: { respond: (d: Uint8Array, o: { headers: ReturnType<typeof headers> }) => boolean }, rec?: string): void {
  const b = new TextEncoder().encode(body);
  const h = headers();
  h.set("Cp-Total", String(b.length));
  h.set("Cp-Offset", "0");
  h.set("Cp-Encoding", "identity");
  h.set("Cp-Hash", sha256(b));
  if (rec !== undefined) h.set("Cp-Version", rec);
  m.respond(b, { headers: h });
}

test("against a daemon that sends no record (before 0.5), a restore asks get, and keeps an exact version's first piece", async () => {
  const asked: string[] = [];
  const gets = raw.subscribe("cp.api.default.get", {
    callback: (_e, m) => {
      asked.push("get");
      m.respond(JSON.stringify(record("old", 4)));
    },
  });
  const reads = raw.subscribe("cp.api.default.read", {
    callback: (_e, m) => {
      const req = JSON.parse(new TextDecoder().decode(m.data)) as { version: number };
      asked.push(`read v${req.version}`);
      if (req.version === 0) {
        const h = headers();
        h.set("Nats-Service-Error-Code", "400");
        h.set("Nats-Service-Error", "bad request");
        m.respond(JSON.stringify({ code: "bad_request", message: "read needs an exact version (ask get for the head first)" }), { headers: h });
        return;
      }
      readPiece(m);
    },
  });
  await raw.flush();
  try {
    assert.equal((await c.restore("s")).text(), body);
    assert.deepEqual(asked, ["read v0", "get", "read v4"]);
    asked.length = 0;
    assert.equal((await c.restore("s", 4)).record.version, 4);
    assert.deepEqual(asked, ["read v4", "get"], "the first piece is kept");
  } finally {
    gets.unsubscribe();
    reads.unsubscribe();
  }
});

test("the record a read carries is checked: another session's, another version's, an unknown format, not JSON, or a hash the bytes do not have", async () => {
  const good = record("told", 2);
  for (const [name, rec] of [
    ["another session's", JSON.stringify({ ...good, key: { ...key, session: "other" } })],
    ["another version's", JSON.stringify({ ...good, version: 3 })],
    ["an unknown format", JSON.stringify({ ...good, format: 9 })],
    ["not JSON", "{"],
    ["another hash", JSON.stringify({ ...good, hash: sha256(new TextEncoder().encode("[]")) })],
  ] as const) {
    const sub = raw.subscribe("cp.api.default.read", { callback: (_e, m) => readPiece(m, rec) });
    await raw.flush();
    try {
      await assert.rejects(c.restore("s", 2), (e: unknown) => e instanceof CheckpointError && (e.code === "corrupt" || e.code === "unknown_format"), name);
    } finally {
      sub.unsubscribe();
    }
  }
});

test("before any result is stored CP_RESULTS does not exist: the lookup's no responders means none yet", async () => {
  // checkpointd makes CP_RESULTS when it first stores a result (§3): on a server that has only
  // CP_INGEST, the client's direct gets while it waits are answered by nobody, and the result
  // that then comes live is taken.
  const bare = await NatsServer.start(1024 * 1024);
  const nc = await connect({ servers: bare.url });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: "CP_INGEST", subjects: ["cp.ingest.>"] });
    nc.subscribe("cp.ingest.>", {
      callback: (_e, m) => {
        const saveId = m.headers?.get("Cp-Save-Id") ?? "";
        const res = { saveId, key, ok: true, received: sha256(m.data), version: record(saveId, 1) };
        setTimeout(() => nc.publish(subjects.result("default", saveId), JSON.stringify(res)), 900);
      },
    });
    await nc.flush();
    const client = await Client.connect({ servers: bare.url }, { timeoutMs: 5000, encoder: "identity" });
    try {
      // The result comes 900 ms after the save: the client has looked it up on CP_RESULTS (250 ms
      // of waiting, then a direct get nobody answers) before it came.
      assert.equal((await client.save("s", body, { saveId: "first" })).version, 1);
    } finally {
      await client.close();
    }
  } finally {
    await nc.close();
    await bare.stop();
  }
});
