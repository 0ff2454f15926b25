// Saves as requests (docs/protocol.md §4.0): a real checkpointd answers them once durable, and the
// client falls back to the ingest stream (§4.1) when no daemon answers. A raw responder plays a
// daemon that refuses busy and unavailable, which the client sends again under the same save id.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect, headers as natsHeaders } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Client, isCheckpointError, joinRaw, sha256 } from "../src/index.js";
import { Daemon, NatsServer } from "./support/daemon.js";

let nats: NatsServer;
let d: Daemon | undefined;
let c: Client;

before(async () => {
  nats = await NatsServer.start(1024 * 1024);
  d = await Daemon.start([], nats.url);
  c = await Client.connect({ servers: nats.url }, { encoder: "identity", maxMessageBytes: 16 * 1024 });
});
after(async () => {
  await c?.close();
  await d?.stop();
  await nats?.stop();
});

const msg = (i: number, pad = "") => `{"role":"user","content":[{"type":"text","text":"turn ${i} ${pad}"}],"timestamp":${i}}`;

/** saves_total{path, result} of the daemon, from its /metrics. */
async function saves(daemon: Daemon, path: string, result: string): Promise<number> {
  const text = await (await fetch(`${daemon.httpURL}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`checkpointd_saves_total{path="${path}",result="${result}"} `));
  return line ? Number(line.split(" ")[1]) : NaN;
}

test("saves, appends and chunked saves go to the daemon as requests, none through the ingest stream", async () => {
  const key = { session: "by-request" };
  let v = await c.save(key, joinRaw([msg(1)]));
  v = await c.append(key, v.version, joinRaw([msg(2)]));
  assert.equal(v.version, 2);
  const big = joinRaw(Array.from({ length: 40 }, (_, i) => msg(i, "x".repeat(1000)))); // 40 KB: chunked at 16 KiB
  const b = await c.save({ session: "big" }, big);
  assert.equal(b.rawBytes, Buffer.byteLength(big));
  assert.equal(Buffer.from((await c.restore({ session: "big" })).bytes).toString(), big);
  assert.equal(await saves(d!, "request", "ok"), 3);
  assert.equal(await saves(d!, "ingest", "ok"), 0);
});

test("a save id sent again with another conversation is refused save_id_reused, naming its version; the same conversation is its duplicate", async () => {
  const key = { session: "save-id-reused" };
  const first = await c.save(key, joinRaw([msg(1)]), { saveId: "turn-1" });
  await assert.rejects(c.save(key, joinRaw([msg(2)]), { saveId: "turn-1" }), (e: unknown) => {
    assert.ok(isCheckpointError(e, "save_id_reused"), String(e));
    assert.equal(e.version, first.version);
    assert.match(e.message, /turn-1/);
    return true;
  });
  const again = await c.save(key, joinRaw([msg(1)]), { saveId: "turn-1" });
  assert.equal(again.version, first.version);
  const second = await c.append(key, first.version, joinRaw([msg(2)]), { saveId: "turn-2" });
  await assert.rejects(c.append(key, first.version, joinRaw([msg(3)]), { saveId: "turn-2" }), (e: unknown) =>
    isCheckpointError(e, "save_id_reused") && e.version === second.version);
  assert.equal((await c.get(key)).version, second.version, "nothing stored");
});

test("an append sent again after retention removed its base is the duplicate, with unverified saying what was not compared", async () => {
  const key = { session: "unverified" };
  let v = await c.save(key, joinRaw([msg(1)]));
  for (const i of [2, 3, 4]) {
    v = await c.append(key, v.version, joinRaw([msg(i)]), { saveId: `append-${i}` });
    assert.equal(v.unverified, undefined, "a new version");
  }
  const compared = await c.append(key, 3, joinRaw([msg(4)]), { saveId: "append-4" });
  assert.equal(compared.version, 4);
  assert.equal(compared.unverified, undefined, "compared by the daemon");

  await c.prune("default", { session: key.session, keepLast: 2 }); // versions 1 and 2 removed
  const again = await c.append(key, 2, joinRaw([msg(3)]), { saveId: "append-3" });
  assert.equal(again.version, 3);
  assert.equal(again.saveId, "append-3");
  assert.match(again.unverified ?? "", /removed by retention/);
});

test("after a daemon answered, no responders while the daemon restarts is asked again, not sent to the ingest stream", async () => {
  const key = { session: "daemon-restarting" };
  const v = await c.save(key, joinRaw([msg(1)])); // answered by the daemon
  const raw = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(raw);
    const queued = async () => (await jsm.streams.info("CP_INGEST")).state.last_seq;
    const before = await queued();
    await d!.stop();
    d = undefined;
    const saving = c.append(key, v.version, joinRaw([msg(2)]));
    await new Promise((r) => setTimeout(r, 300)); // the save meets "no responders" meanwhile
    d = await Daemon.start([], nats.url);
    assert.equal((await saving).version, 2);
    assert.equal(await queued(), before, "the save went by request, not to the ingest stream");
    assert.equal(await saves(d, "request", "ok"), 1);
  } finally {
    await raw.close();
  }
});

test("with no daemon answering, a save goes to the ingest stream and is settled when a daemon starts", async () => {
  await d!.stop();
  d = undefined;
  const key = { session: "while-down" };
  const body = joinRaw([msg(1)]);
  const saving = c.save(key, body);
  // The save waits on CP_INGEST (durable there) until a daemon comes.
  const raw = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(raw);
    const until = Date.now() + 10_000;
    while ((await jsm.streams.info("CP_INGEST")).state.messages === 0) {
      assert.ok(Date.now() < until, "the save reached the ingest stream");
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    await raw.close();
  }
  d = await Daemon.start([], nats.url);
  const v = await saving;
  assert.equal(v.version, 1);
  const until = Date.now() + 5000;
  while ((await saves(d, "ingest", "ok")) !== 1) {
    assert.ok(Date.now() < until, "counted as an ingest save");
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(Buffer.from((await c.restore(key)).bytes).toString(), body);
});

test("a save request refused busy, then unavailable, is sent again under the same save id until it goes through", async () => {
  const bare = await NatsServer.start(1024 * 1024);
  const rogue = await connect({ servers: bare.url });
  const lone = await Client.connect({ servers: bare.url }, { encoder: "identity", timeoutMs: 5000 });
  const key = { namespace: "default", session: "s", agent: "main" };
  const ids: string[] = [];
  rogue.subscribe("cp.save.>", {
    callback: (_e, m) => {
      const saveId = m.headers?.get("Cp-Save-Id") ?? "";
      ids.push(saveId);
      const base = { saveId, key };
      let res: unknown;
      if (ids.length === 1) res = { ...base, ok: false, error: { code: "busy", message: "busy", retryAfterMs: 20 } };
      else if (ids.length === 2) res = { ...base, ok: false, error: { code: "unavailable", message: "shutting down" } };
      else {
        const hash = sha256(m.data);
        res = {
          ...base, ok: true, received: hash,
          version: {
            format: 2, key, version: 1, parent: 0, hash, saveId, reason: "turn", created: "2026-01-01T00:00:00Z",
            rawBytes: m.data.length, storedBytes: 1, counts: { messages: 1, user: 1, assistant: 0, toolResult: 0, extension: 0, toolCalls: 0 },
          },
        };
      }
      m.respond(JSON.stringify(res), { headers: natsHeaders() });
    },
  });
  await rogue.flush();
  try {
    const v = await lone.save("s", joinRaw([msg(1)]));
    assert.equal(v.version, 1);
    assert.equal(ids.length, 3);
    assert.ok(ids.every((id) => id === ids[0]), `one save id: ${ids.join(", ")}`);
  } finally {
    await lone.close();
    await rogue.close();
    await bare.stop();
  }
});
