// Fidelity against a real checkpointd: the real corpus saved from TypeScript restores byte for byte
// from TypeScript and from the Go CLI, and the reverse; numbers beyond 2^53 come back digit for digit.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, sha256, joinRaw } from "../src/index.js";
import type { Encoder } from "../src/index.js";
import { Daemon, corpusDir } from "./support/daemon.js";
import { jsonCompact } from "./support/json.js";

let d: Daemon;
let c: Client;
let tmp: string;

before(async () => {
  d = await Daemon.start();
  c = await Client.connect({ servers: d.natsURL }, { encoder: "identity" });
  tmp = mkdtempSync(join(tmpdir(), "cp-ts-fid-"));
});
after(async () => {
  await c?.close();
  await d?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const corpus = readdirSync(corpusDir).filter((f) => f.endsWith(".json")).sort();

test("every corpus file saved from TypeScript restores identically from TypeScript and from the Go CLI", async () => {
  assert.ok(corpus.length >= 8, `corpus: ${corpus.join(", ")}`);
  for (const f of corpus) {
    const text = readFileSync(join(corpusDir, f), "utf8");
    const canonical = Buffer.from(jsonCompact(text));
    const session = `ts-${f}`;
    const v = await c.save(session, text, { reason: "import" });
    assert.equal(v.version, 1, f);
    assert.equal(v.rawBytes, canonical.length, f);
    assert.equal(v.hash, sha256(canonical), f);

    const r = await c.restore(session);
    assert.ok(Buffer.from(r.bytes).equals(canonical), `${f}: TS restore differs from the canonical input`);
    const goOut = await d.ctl(["restore", session]);
    assert.ok(goOut.equals(Buffer.from(r.bytes)), `${f}: Go CLI restore differs from TS restore`);
    // Asked for zstd: decoded (a daemon that serves it) or read again as identity (one that does not).
    const z = await c.restore(session, 0, { encoding: "zstd" });
    assert.ok(Buffer.from(z.bytes).equals(canonical), `${f}: zstd restore differs`);
  }
});

test("a conversation saved by the Go CLI restores byte for byte in TypeScript", async () => {
  for (const f of ["pi_before_compaction.json", "openhands_gui_todo_app.json"]) {
    const session = `go-${f}`;
    await d.ctl(["put", session, join(corpusDir, f)]);
    const r = await c.restore(session);
    const canonical = Buffer.from(jsonCompact(readFileSync(join(corpusDir, f), "utf8")));
    assert.ok(Buffer.from(r.bytes).equals(canonical), f);
    assert.equal(r.record.hash, sha256(canonical));
    assert.equal(r.record.saveId.length > 0, true);
  }
});

test("numbers beyond 2^53, odd spellings and escapes come back digit for digit, on both sides", async () => {
  const msgs = [
    '{"role":"user","content":[{"type":"text","text":"\\u0000 \\ud83d\\ude00 \\"hi\\""}],"timestamp":1700000000000}',
    '{"role":"assistant","content":[{"type":"text","text":"ok"}],"api":"x","provider":"p","model":"m",' +
      '"usage":{"input":123456789012345678901234567890,"output":9007199254740993,"cacheRead":1e400,"cacheWrite":0,' +
      '"totalTokens":18446744073709551615,"cost":{"input":0.1000000000000000055511151231257827,"output":0,"cacheRead":0,"cacheWrite":0,"total":1E+2}},' +
      '"stopReason":"stop","timestamp":1700000000001,"unknownField":{"deep":[12345678901234567890123,-0.0000000000000000001,-0.0,1E-7]}}',
  ];
  const text = joinRaw(msgs);
  const v = await c.save("bigints", text);
  const r = await c.restore("bigints");
  assert.equal(r.text(), text);
  assert.deepEqual(r.rawMessages(), msgs);
  assert.equal(v.hash, sha256(new TextEncoder().encode(text)));
  const goOut = await d.ctl(["restore", "bigints"]);
  assert.equal(goOut.toString("utf8"), text);

  // And the reverse: the Go CLI saves, TypeScript restores.
  const file = join(tmp, "big.json");
  writeFileSync(file, text);
  await d.ctl(["put", "bigints-go", file]);
  assert.equal((await c.restore("bigints-go")).text(), text);
});

test("a body larger than one message goes chunked (§4.2) and restores identically", async () => {
  // 2.3 MB: three pieces at the default 1 MiB max_payload; and the same body in 64 KiB pieces.
  const text = readFileSync(join(corpusDir, "pi_before_compaction.json"), "utf8");
  const canonical = Buffer.from(jsonCompact(text));
  const small = new Client(c.nc, { encoder: "identity", maxMessageBytes: 64 * 1024 });
  for (const [cl, session] of [[c, "chunked-default"], [small, "chunked-64k"]] as const) {
    const v = await cl.save(session, text);
    assert.equal(v.rawBytes, canonical.length);
    assert.ok(Buffer.from((await cl.restore(session)).bytes).equals(canonical), session);
  }
});

function zstdCLI(): Encoder | undefined {
  try {
    execFileSync("zstd", ["--version"]);
  } catch {
    return undefined;
  }
  return { name: "zstd", encode: (b) => new Uint8Array(execFileSync("zstd", ["-q", "-3", "-c"], { input: b, maxBuffer: 64 << 20 })) };
}

test("a zstd body (Cp-Encoding: zstd), single and chunked, is stored as its identity bytes", { skip: !zstdCLI() && "no zstd tool" }, async () => {
  const text = readFileSync(join(corpusDir, "pi_large_session.json"), "utf8");
  const canonical = Buffer.from(jsonCompact(text));
  for (const [max, session] of [[undefined, "zstd-one"], [32 * 1024, "zstd-chunked"]] as const) {
    const z = new Client(c.nc, { encoder: zstdCLI(), maxMessageBytes: max });
    await z.save(session, text);
    assert.ok(Buffer.from((await c.restore(session)).bytes).equals(canonical), session);
  }
});
