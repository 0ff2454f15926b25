// Large bodies (protocol.md §12): the piece-size rule, the cutting and the joining by offset, with
// hostile piece sequences. No daemon needed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CHUNK_ROOM, OffsetJoiner, PieceError, parseNumber, pieceSize, split } from "../src/pieces.js";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);

test("pieceSize: max_payload less the room, never negative", () => {
  assert.equal(pieceSize(1024 * 1024, CHUNK_ROOM), 1024 * 1024 - 16 * 1024);
  assert.equal(pieceSize(32 * 1024, CHUNK_ROOM), 16 * 1024);
  assert.equal(pieceSize(8 * 1024, CHUNK_ROOM), 0);
});

test("split: full pieces but the last, none for an empty body, refused without room", () => {
  assert.deepEqual(split(bytes("abcdefghij"), 3).map(text), ["abc", "def", "ghi", "j"]);
  assert.deepEqual(split(bytes("abcdefghij"), 10).map(text), ["abcdefghij"]);
  assert.deepEqual(split(new Uint8Array(0), 3), []);
  for (const size of [0, -1, NaN]) {
    assert.throws(() => split(bytes("ab"), size), (e: unknown) => e instanceof PieceError && e.reason === "no_room");
  }
});

test("parseNumber: decimal integers from 0 only", () => {
  assert.equal(parseNumber("Cp-Offset", "4096", 0), 4096);
  for (const v of [undefined, "", "-1", "+1", "01", "1e3", " 1", "x", "99999999999999999"]) {
    assert.throws(() => parseNumber("Cp-Offset", v, 2), (e: unknown) => e instanceof PieceError && e.reason === "not_a_number" && /piece 2/.test(e.message));
  }
});

/** Feeds [offset, bytes] pieces announcing total; returns the body or the reason of the refusal. */
function join(total: number, seq: [number, string][], limit = 100): string {
  const j = new OffsetJoiner(limit);
  try {
    for (const [at, data] of seq) {
      j.expect(total, "tag");
      j.add(at, bytes(data));
      if (j.done) break;
    }
    return text(j.finish());
  } catch (e) {
    assert.ok(e instanceof PieceError, String(e));
    return e.reason;
  }
}

test("OffsetJoiner: in order, and every hostile sequence refused naming the piece", () => {
  assert.equal(join(5, [[0, "ab"], [2, "cde"]]), "abcde");
  assert.equal(join(0, [[0, ""]]), "");
  assert.equal(join(5, [[0, "ab"], [1, "bcde"]]), "repeat");
  assert.equal(join(5, [[0, "ab"], [3, "de"]]), "gap");
  assert.equal(join(5, [[0, "ab"], [2, "cdef"]]), "overrun");
  assert.equal(join(5, [[0, "ab"], [2, ""]]), "empty");
  assert.equal(join(5, [[0, "ab"]]), "missing");
  assert.equal(join(101, [[0, "ab"]]), "too_large");
  const j = new OffsetJoiner(100);
  j.expect(5, "a");
  assert.throws(() => j.expect(6, "a"), (e: unknown) => e instanceof PieceError && e.reason === "changed");
  assert.throws(() => j.expect(5, "b"), (e: unknown) => e instanceof PieceError && e.reason === "changed");
});

test("OffsetJoiner: random hostile sequences never take a piece out of place nor pass the limit", () => {
  let seed = 12345;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  for (let round = 0; round < 2000; round++) {
    const total = rnd(40);
    const limit = rnd(50);
    const j = new OffsetJoiner(limit);
    const taken: string[] = [];
    try {
      j.expect(total, "t");
      for (let k = 0; k < 20 && !j.done; k++) {
        const at = j.next + rnd(5) - 2;
        const data = "x".repeat(rnd(8));
        const before = j.next;
        j.add(at, bytes(data));
        if (j.next !== before) {
          assert.equal(at, before, "taken only at the offset expected");
          taken.push(data);
        }
        assert.ok(j.next <= Math.min(total, limit));
      }
      const body = j.finish();
      assert.equal(body.length, total);
      assert.equal(text(body), taken.join(""));
    } catch (e) {
      assert.ok(e instanceof PieceError, String(e));
    }
  }
});
