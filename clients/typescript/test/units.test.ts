// Pure functions: subject tokens (§2), raw message splitting, errors. No daemon needed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { decodeId, encodeId, joinRaw, splitRaw, decoders, toKey, CheckpointError } from "../src/index.js";

test("encodeId: the examples of protocol.md §2, and back", () => {
  const cases: [string, string][] = [
    ["default", "default"],
    ["user@example.com", "user=40example=2Ecom"],
    ["a.b*c >d", "a=2Eb=2Ac=20=3Ed"],
    ["ü", "=C3=BC"],
    ["=", "=3D"],
  ];
  for (const [id, token] of cases) {
    assert.equal(encodeId(id), token);
    assert.equal(decodeId(token), id);
  }
});

test("decodeId refuses lower-case hex, truncated escapes and needless escapes", () => {
  for (const bad of ["=c3=bc", "abc=4", "=41", "a.b", "a b"]) {
    assert.throws(() => decodeId(bad), TypeError, bad);
  }
});

test("splitRaw keeps every message's text digit for digit", () => {
  const msgs = [
    '{"role":"user","content":"a, [b] {c}","n":123456789012345678901234567890}',
    '{"x":1e400,"y":-0.0,"s":"\\"quoted\\" \\\\ \\u0000 \\ud83d\\ude00"}',
    '[1,2,[3]]',
    '"str]ing"',
    "12.50",
    "null",
  ];
  assert.deepEqual(splitRaw(joinRaw(msgs)), msgs);
  assert.deepEqual(splitRaw(" [ " + msgs.join(" ,\n ") + " ] "), msgs);
  assert.deepEqual(splitRaw("[]"), []);
  for (const bad of ["{}", "[1,]", "[1 2]", "[1] x", '["open]']) {
    assert.throws(() => splitRaw(bad), SyntaxError, bad);
  }
});

test("CheckpointError.fromWire keeps code, index, field, retryAfterMs and unknown members", () => {
  const e = CheckpointError.fromWire({ code: "invalid", message: "m", index: 3, field: "content[2].type", retryAfterMs: 7, future: 1 });
  assert.equal(e.code, "invalid");
  assert.equal(e.index, 3);
  assert.equal(e.field, "content[2].type");
  assert.equal(e.retryAfterMs, 7);
  assert.equal(e.wire?.future, 1);
  assert.ok(e instanceof Error);
});

function haveZstdCLI(): boolean {
  try {
    execFileSync("zstd", ["--version"]);
    return true;
  } catch {
    return false;
  }
}

test("the zstd read decoder decodes what the zstd tool wrote, and bounds it", { skip: !haveZstdCLI() && "no zstd tool" }, () => {
  const text = new TextEncoder().encode(joinRaw(Array.from({ length: 500 }, (_, i) => `{"role":"user","content":"message ${i}"}`)));
  const z = new Uint8Array(execFileSync("zstd", ["-q", "-c"], { input: text }));
  assert.ok(z.length < text.length);
  assert.deepEqual(Buffer.from(decoders.zstd.decode(z, text.length)), Buffer.from(text));
  assert.throws(() => decoders.zstd.decode(z, text.length - 1), (e: unknown) => e instanceof CheckpointError && e.code === "corrupt");
  assert.throws(() => decoders.zstd.decode(new Uint8Array([1, 2, 3, 4]), 100), (e: unknown) => e instanceof CheckpointError && e.code === "corrupt");
  // Concatenated frames with a skippable frame between them read as one stream (§5, zstd).
  const skippable = new Uint8Array([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 7, 7, 7]);
  const two = Buffer.concat([z, skippable, z]);
  assert.deepEqual(Buffer.from(decoders.zstd.decode(two, 2 * text.length)), Buffer.concat([text, text]));
  assert.throws(() => decoders.zstd.decode(two, 2 * text.length - 1), (e: unknown) => e instanceof CheckpointError && e.code === "corrupt");
  // A cut stream never passes for the whole: it fails, or decodes short (which the read refuses).
  let short = -1;
  try {
    short = decoders.zstd.decode(z.subarray(0, z.length - 8), text.length).length;
  } catch (e) {
    assert.ok(e instanceof CheckpointError && e.code === "corrupt");
  }
  assert.ok(short < text.length);
});

test("keys: defaults, and ids outside 1..256 bytes of UTF-8 refused bad_request naming the part", () => {
  assert.deepEqual(toKey("s"), { namespace: "default", session: "s", agent: "main" });
  assert.deepEqual(toKey({ namespace: "n", session: "s" }), { namespace: "n", session: "s", agent: "main" });
  assert.equal(toKey({ session: "é".repeat(128) }).session.length, 128, "256 bytes is allowed");
  const cases: [Parameters<typeof toKey>[0], string][] = [
    ["", "session"],
    [{ session: "é".repeat(128) + "x" }, "session"],
    [{ session: "s", agent: "\ud800" }, "agent"],
    [{ namespace: "n".repeat(257), session: "s" }, "namespace"],
  ];
  for (const [k, part] of cases) {
    assert.throws(() => toKey(k), (e: unknown) => e instanceof CheckpointError && e.code === "bad_request" && e.message.startsWith(part), part);
  }
});
