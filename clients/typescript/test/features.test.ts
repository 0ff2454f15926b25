// Saves, appends, views, listings, leases and typed refusals, against a real checkpointd; the
// hostile cases forge results with a raw NATS connection, on a server of their own.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import type { Msg } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Client, CheckpointError, joinRaw, subjects } from "../src/index.js";
import { Daemon, NatsServer } from "./support/daemon.js";

let d: Daemon;
let c: Client;

before(async () => {
  d = await Daemon.start();
  c = await Client.connect({ servers: d.natsURL }, { timeoutMs: 10_000 });
});
after(async () => {
  await c?.close();
  await d?.stop();
});

const user = (i: number) => `{"role":"user","content":[{"type":"text","text":"question ${i}"}],"timestamp":${1700000000000 + 2 * i}}`;
const assistant = (i: number) =>
  `{"role":"assistant","content":[{"type":"text","text":"answer ${i}"}],"api":"anthropic-messages","provider":"anthropic","model":"m",` +
  `"usage":{"input":${i},"output":9007199254740993,"cacheRead":0,"cacheWrite":0,"totalTokens":1,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},` +
  `"stopReason":"stop","timestamp":${1700000000001 + 2 * i}}`;
const compaction = (i: number) => `{"role":"extension","kind":"compaction","data":{"summary":"summary ${i}"},"timestamp":${1700000000001 + 2 * i}}`;
const turns = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => [user(from + k), assistant(from + k)]).flat();

/** Asserts that p is refused with a CheckpointError of code, and returns it. */
async function refused(p: Promise<unknown>, code: string): Promise<CheckpointError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof CheckpointError, `want a CheckpointError, got ${e}`);
    assert.equal(e.code, code, e.message);
    return e;
  }
  assert.fail(`want ${code}, got success`);
}

test("append (Cp-Base-Version) extends the head; the result is the whole conversation, on both sides", async () => {
  const first = turns(0, 2);
  const v1 = await c.save("append", joinRaw(first));
  const r1 = await c.restore("append");
  const more = turns(2, 4);
  const v2 = await c.append("append", v1.version, joinRaw(more));
  assert.equal(v2.version, 2);
  assert.equal(v2.parent, 1);
  assert.equal(v2.counts.messages, 8);
  const whole = joinRaw([...r1.rawMessages(), ...more]);
  const r2 = await c.restore("append");
  assert.equal(r2.text(), whole);
  assert.equal((await d.ctl(["restore", "append"])).toString(), whole);
  // An old version still restores as it was.
  assert.equal((await c.restore("append", 1)).text(), joinRaw(first));
});

test("append onto a version that is not the head is a typed conflict naming the head", async () => {
  const e = await refused(c.append("append", 1, joinRaw(turns(9, 10))), "conflict");
  assert.equal(e.head, 2);
  const e2 = await refused(c.save("append", joinRaw(turns(0, 5)), { expectedVersion: 0 }), "conflict");
  assert.equal(e2.head, 2);
  assert.equal((await c.get("append")).version, 2, "nothing stored");
});

test("an invalid message is a typed error with its index (from the conversation's start) and field", async () => {
  const bad = '{"role":"user","content":[{"type":"video","url":"x"}],"timestamp":1}';
  const e = await refused(c.save("invalid", joinRaw([user(0), assistant(0), bad])), "invalid");
  assert.equal(e.index, 2);
  assert.equal(e.field, "content[0].type");
  const e2 = await refused(c.append("append", 2, joinRaw([user(50), bad])), "invalid");
  assert.equal(e2.index, 9, "an append's index counts from the start of the whole conversation");
  await refused(c.save("invalid", "[{", {}), "invalid");
  await refused(c.get("invalid"), "not_found");
});

test("a save id saves once: the retry returns the same version, marked as the first save's", async () => {
  const body = joinRaw(turns(0, 1));
  const a = await c.save("idem", body, { saveId: "turn-1" });
  const b = await c.save("idem", body, { saveId: "turn-1" });
  assert.equal(b.version, a.version);
  assert.equal(b.saveId, "turn-1");
  assert.equal((await c.history("idem")).length, 1);
});

test("views: request view from the last compaction marker, maxMessages; identical to the Go CLI's", async () => {
  const msgs = [...turns(0, 3), compaction(3), ...turns(4, 6)];
  await c.save("views", joinRaw(msgs));
  const req = await c.restore("views", 0, { view: "request" });
  assert.deepEqual(req.rawMessages(), msgs.slice(6));
  assert.equal((await d.ctl(["restore", "views", "--view", "request"])).toString(), req.text());
  const last = await c.restore("views", 0, { maxMessages: 3 });
  assert.deepEqual(last.rawMessages(), msgs.slice(-2), "3 rounds down to 2");
  assert.equal((await d.ctl(["restore", "views", "--max-messages", "3"])).toString(), last.text());
  await refused(c.restore("views", 0, { maxMessages: -1 }), "bad_request");
});

test("list and history: heads of the namespace, versions after `after`", async () => {
  const ns = "list-ns@example.com";
  for (const s of ["b", "a", "c"]) await c.save({ namespace: ns, session: s }, joinRaw(turns(0, 1)));
  await c.append({ namespace: ns, session: "a" }, 1, joinRaw(turns(1, 2)));
  const heads = await c.list(ns);
  assert.deepEqual(heads.map((h) => [h.key.session, h.version]), [["a", 2], ["b", 1], ["c", 1]]);
  assert.deepEqual((await c.list(ns, { session: "a" })).map((h) => h.key.session), ["a"]);
  const hist = await c.history({ namespace: ns, session: "a" });
  assert.deepEqual(hist.map((v) => [v.version, v.parent]), [[1, 0], [2, 1]]);
  assert.deepEqual((await c.history({ namespace: ns, session: "a" }, { after: 1 })).map((v) => v.version), [2]);
  assert.deepEqual((await c.recentHistory({ namespace: ns, session: "a" })).map((v) => v.version), [2, 1]);
  assert.deepEqual((await c.recentHistory({ namespace: ns, session: "a" }, { limit: 1 })).map((v) => v.version), [2]);
  assert.deepEqual(await c.list("nobody-here"), []);
});

test("listPage: pages of `limit` sessions in the order they were created, each session once", async () => {
  const ns = "paged";
  const made = ["e", "a", "d", "b", "c"];
  for (const s of made) await c.save({ namespace: ns, session: s }, joinRaw(turns(0, 1)));
  const pages: string[][] = [];
  let cursor: string | undefined;
  do {
    const p = await c.listPage(ns, { cursor, limit: 2 });
    pages.push(p.sessions.map((h) => h.key.session));
    cursor = p.next;
  } while (cursor !== undefined && pages.length < 10);
  assert.deepEqual(pages, [["e", "a"], ["d", "b"], ["c"]]);
  assert.deepEqual((await c.listPage(ns)).sessions.map((h) => h.key.session), made, "no limit: as many as fit");
  assert.equal((await c.listPage(ns)).next, undefined);
  for (const limit of [-1, 1.5, 10_001, Number.NaN]) await refused(c.listPage(ns, { limit }), "bad_request");
  // The daemon refuses what the client would not send, naming the field.
  for (const limit of [-1, 10_001, 2 ** 53, "10", 1.5]) {
    const e = await refused(c.request(ns, "list", { limit }), "bad_request");
    assert.match(e.message, /limit/);
  }
});

test("prune keeps the newest versions, delete removes the session (guarded by expected)", async () => {
  const key = { namespace: "tidy", session: "s" };
  let v = await c.save(key, joinRaw(turns(0, 1)));
  for (let i = 1; i < 4; i++) v = await c.append(key, v.version, joinRaw(turns(i, i + 1)));
  const dry = await c.prune("tidy", { session: "s", keepLast: 2, dryRun: true });
  assert.deepEqual(dry.sessions.map((x) => x.versions), [[1, 2]]);
  assert.equal((await c.get(key, 1)).version, 1, "a dry run removes nothing");
  await c.prune("tidy", { session: "s", keepLast: 2 });
  await refused(c.get(key, 1), "not_found");
  assert.equal((await c.restore(key, 3)).rawMessages().length, 6);
  assert.deepEqual((await c.history(key)).map((x) => x.version), [3, 4]);
  await refused(c.prune("tidy", { keepLast: -1 }), "bad_request");

  const e = await refused(c.delete(key, { expected: 3 }), "conflict");
  assert.equal(e.head, 4);
  assert.equal((await c.delete(key, { expected: 4 })).version, 4);
  await refused(c.get(key), "not_found");
  assert.deepEqual(await c.list("tidy"), []);
});

test("dialects: the record keeps the dialect; another dialect on the same session is a bad_request", async () => {
  const chat = '[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]';
  const v = await c.save("chat", chat, { dialect: "openai-chat" });
  assert.equal(v.dialect, "openai-chat");
  assert.equal(v.counts.system, 1);
  assert.equal((await c.restore("chat")).text(), chat);
  await refused(c.save("chat", chat, { dialect: "anthropic" }), "bad_request");
  await refused(c.save("chat2", chat, { dialect: "no-such-dialect" }), "bad_request");
});

test("leases: saves carry the epoch; a takeover fences the old owner with a typed error", async () => {
  const key = { session: "leased", agent: "worker" };
  const a = await c.acquire(key, "node-a", 60_000);
  assert.equal(a.epoch, 1);
  const v1 = await a.save(joinRaw(turns(0, 1)));
  const noEpoch = await refused(c.save(key, joinRaw(turns(0, 2))), "leased");
  assert.equal(noEpoch.owner, "node-a");
  assert.equal(noEpoch.epoch, 1);
  await refused(c.acquire(key, "node-b", 60_000), "leased");

  const b = await c.acquire(key, "node-b", 60_000, { force: true });
  assert.equal(b.epoch, 2);
  const fenced = await refused(a.append(v1.version, joinRaw(turns(1, 2))), "fenced");
  assert.equal(fenced.epoch, 2);
  assert.equal(fenced.owner, "node-b");
  await refused(a.renew(), "fenced");
  await refused(a.release(), "fenced");

  // The new owner writes, renews, pauses (final save + release); then anyone may save.
  const v2 = await b.append(v1.version, joinRaw(turns(1, 2)));
  assert.equal((await b.renew()).epoch, 2);
  const paused = await b.pause(joinRaw(turns(0, 3)));
  assert.equal(paused.reason, "pause");
  assert.equal(paused.parent, v2.version);
  const st = await c.leaseStatus(key);
  assert.equal(st.epoch, 2);
  assert.equal(st.owner, undefined, "released");
  await refused(c.save(key, joinRaw(turns(0, 3)), { epoch: 2 }), "fenced");
  // A Go process resumes it: the Go CLI takes the lease (the next epoch) and restores what Node paused.
  const goLease = JSON.parse((await d.ctl(["lease", "acquire", "leased", "--agent", "worker", "--owner", "go-process", "-o", "json"])).toString());
  assert.equal(goLease.epoch, 3);
  assert.equal((await c.leaseStatus(key)).owner, "go-process");
  assert.equal((await d.ctl(["restore", "leased", "--agent", "worker"])).toString(), joinRaw(turns(0, 3)));
});

test("a lease renews itself every third of its TTL, and stops when fenced", async () => {
  const key = { session: "renewing" };
  const a = await c.acquire(key, "node-a", 600);
  const errors: unknown[] = [];
  a.startRenewing((e) => errors.push(e));
  await new Promise((r) => setTimeout(r, 1000));
  // Past its first TTL, still held: nobody may take it without force.
  await refused(c.acquire(key, "node-b", 600), "leased");
  assert.equal(errors.length, 0);
  await c.acquire(key, "node-b", 60_000, { force: true });
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(errors.length >= 1 && errors[0] instanceof CheckpointError && errors[0].code === "fenced", `errors: ${errors}`);
  const n = errors.length;
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(errors.length, n, "no renewal after fenced");
});

/**
 * A hostile client (a raw NATS connection) forges the outcome of a save of session "forged", by
 * both ways a result reaches the client: as the reply to its save request (§4.0: without
 * per-namespace accounts anyone may answer on cp.save), and, when no daemon answers requests, on
 * the save's result subject after the save reached the ingest stream (§4.3). It also answers the
 * `get` with which the client confirms a version it is told of, with a record of another save.
 * Each runs on a server of its own, where the forger is the only one answering, so the forgery is
 * what the client gets. The client must not believe it.
 */
async function forging(makeResult: (saveId: string) => unknown, run: (lone: Client) => Promise<unknown>): Promise<void> {
  for (const path of ["request", "ingest"]) {
    const bare = await NatsServer.start(1024 * 1024);
    const rogue = await connect({ servers: bare.url });
    const lone = await Client.connect({ servers: bare.url }, { encoder: "identity", timeoutMs: 5000 });
    try {
      const jsm = await jetstreamManager(rogue);
      await jsm.streams.add({ name: "CP_INGEST", subjects: ["cp.ingest.>"] });
      await jsm.streams.add({ name: "CP_RESULTS", subjects: ["cp.result.>"], max_msgs_per_subject: 1, allow_direct: true });
      const forged: string[] = [];
      const saveIdOf = (m: Msg) => m.headers?.get("Cp-Save-Id") ?? "";
      if (path === "request") {
        rogue.subscribe("cp.save.default.*.*", {
          callback: (_err, m) => {
            forged.push(saveIdOf(m));
            m.respond(JSON.stringify(makeResult(saveIdOf(m))));
          },
        });
      } else {
        rogue.subscribe("cp.ingest.default.*.*", {
          callback: (_err, m) => {
            forged.push(saveIdOf(m));
            rogue.publish(subjects.result("default", saveIdOf(m)), JSON.stringify(makeResult(saveIdOf(m))));
          },
        });
      }
      rogue.subscribe("cp.api.default.get", {
        callback: (_err, m) => {
          const req = JSON.parse(new TextDecoder().decode(m.data)) as { version: number };
          m.respond(JSON.stringify({ format: 2, key: forgedKey, version: req.version, parent: 0, hash: "sha256:00", saveId: "someone-else" }));
        },
      });
      await rogue.flush();
      await run(lone);
      assert.equal(forged.length, 1, `${path}: one save was forged`);
    } finally {
      await lone.close();
      await rogue.close();
      await bare.stop();
    }
  }
}

const forgedKey = { namespace: "default", session: "forged", agent: "main" };

test("hostile: a forged refusal whose received hash is not the body's is refused as corrupt", async () => {
  await forging(
    (saveId) => ({ saveId, key: forgedKey, ok: false, received: "sha256:" + "0".repeat(64), error: { code: "conflict", message: "forged", head: 7 } }),
    (lone) => refused(lone.save("forged", joinRaw(turns(0, 10))), "corrupt"),
  );
});

test("hostile: a forged success naming a version this save did not make is refused as corrupt", async () => {
  await forging(
    (saveId) => ({
      saveId,
      key: forgedKey,
      ok: true,
      received: "sha256:" + "1".repeat(64),
      version: { format: 2, key: forgedKey, version: 99, hash: "sha256:00" },
    }),
    (lone) => refused(lone.save("forged", joinRaw(turns(0, 11))), "corrupt"),
  );
});

test("hostile: a forged result naming another save id or session is refused as corrupt", async () => {
  await forging(
    () => ({ saveId: "someone-else", key: forgedKey, ok: true }),
    (lone) => refused(lone.save("forged", joinRaw(turns(0, 12))), "corrupt"),
  );
  await forging(
    (saveId) => ({ saveId, key: { ...forgedKey, session: "other" }, ok: true }),
    (lone) => refused(lone.save("forged", joinRaw(turns(0, 13))), "corrupt"),
  );
});

test("hostile: a forged duplicate naming another save's real version is refused as corrupt", async () => {
  const first = await c.save("forged", joinRaw(turns(0, 1)), { saveId: "genuine-1" });
  await forging(
    (saveId) => ({ saveId, key: forgedKey, ok: true, duplicate: true, version: first }),
    (lone) => refused(lone.save("forged", joinRaw(turns(0, 14))), "corrupt"),
  );
});

test("a restore (the head, a given version, a view) is one read request: the record comes with its first piece", async () => {
  const v1 = await c.save("one-request", joinRaw(turns(0, 3)));
  const spy = await connect({ servers: d.natsURL });
  const asked: string[] = [];
  const sub = spy.subscribe("cp.api.>", {
    callback: (_e, m) => {
      asked.push(m.subject.slice(m.subject.lastIndexOf(".") + 1));
    },
  });
  await spy.flush();
  try {
    for (const [version, opts] of [[0, {}], [1, {}], [0, { maxMessages: 2 }], [0, { encoding: "zstd" }]] as const) {
      asked.length = 0;
      const r = await c.restore("one-request", version, opts);
      assert.deepEqual(r.record, v1);
      await spy.flush();
      assert.deepEqual(asked, ["read"], `version ${version}, ${JSON.stringify(opts)}: one read, no get`);
    }
  } finally {
    sub.unsubscribe();
    await spy.close();
  }
});
