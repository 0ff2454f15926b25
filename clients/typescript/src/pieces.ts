// Large bodies (docs/protocol.md §12): the one rule for how large a piece may be, the cutting of a
// body into pieces, and the joining of pieces in order with every check. This client moves large
// bytes twice, and both go through here: a save's chunks (numbered by index, Cp-Chunk, §4.2) and
// a read's replies (numbered by offset, Cp-Offset, §5 "read"). The Go code's twin is
// internal/pieces.

/** Room a save's chunk keeps of max_payload for its headers (§12): 16 KiB, as every client. */
export const CHUNK_ROOM = 16 * 1024;

/** The most bytes of a body one message may carry: max_payload less the room its headers need; 0 when nothing is left. */
export function pieceSize(maxPayload: number, room: number): number {
  return Math.max(maxPayload - room, 0);
}

/** Why a piece (or a body) is refused. */
export type PieceReason =
  | "no_room"
  | "gap"
  | "repeat"
  | "overrun"
  | "empty"
  | "too_large"
  | "missing"
  | "changed"
  | "not_a_number";

/** A refused piece: which one (its place among those taken, from 0), the number it carried, and why. */
export class PieceError extends Error {
  constructor(
    readonly reason: PieceReason,
    readonly piece: number,
    readonly at: number | undefined,
    detail: string,
  ) {
    super(`piece ${piece}${at === undefined ? "" : ` (${at})`}: ${reason.replace(/_/g, " ")}: ${detail}`);
    this.name = "PieceError";
  }
}

/** Cuts body into the pieces a receiver joins by index: every piece `size` bytes but the last; none for an empty body. */
export function split(body: Uint8Array, size: number): Uint8Array[] {
  if (!(size > 0)) throw new PieceError("no_room", 0, undefined, "the server's max_payload leaves no room beside the headers");
  const out: Uint8Array[] = [];
  for (let off = 0; off < body.length; off += size) out.push(body.subarray(off, off + size));
  return out;
}

/** Reads the number a piece carries in a header: a decimal integer from 0, as every sender writes it. */
export function parseNumber(header: string, value: string | undefined, piece: number): number {
  const v = value ?? "";
  if (!/^(0|[1-9][0-9]{0,15})$/.test(v) || !Number.isSafeInteger(Number(v))) {
    throw new PieceError("not_a_number", piece, undefined, `header ${header}: ${JSON.stringify(v)}`);
  }
  return Number(v);
}

/**
 * Joins the pieces of one body in order, by offset (a read's replies): each must carry the offset
 * of the bytes received so far, hold at least a byte, stay within the announced total and the
 * limit, and come with the same announcement as the first. Nothing is sized from the total: the
 * pieces are kept as they arrive and joined once, at the end.
 */
export class OffsetJoiner {
  private end = -1;
  private tag = "";
  private received = 0;
  private readonly parts: Uint8Array[] = [];

  constructor(private readonly limit: number) {}

  /** Records what a piece announces of the whole body (its total, and a tag: hash, encoding...). */
  expect(total: number, tag: string): void {
    if (total < 0 || total > this.limit) {
      throw new PieceError("too_large", this.parts.length, undefined, `${total} bytes announced, the limit is ${this.limit}`);
    }
    if (this.end < 0) {
      this.end = total;
      this.tag = tag;
    } else if (total !== this.end || tag !== this.tag) {
      throw new PieceError("changed", this.parts.length, undefined, `${total} bytes and ${JSON.stringify(tag)} announced, first ${this.end} and ${JSON.stringify(this.tag)}`);
    }
  }

  /** Takes the piece that carries offset `at`. */
  add(at: number, data: Uint8Array): void {
    const piece = this.parts.length;
    if (at < this.received) throw new PieceError("repeat", piece, at, `offset ${this.received} was expected`);
    if (at > this.received) throw new PieceError("gap", piece, at, `offset ${this.received} was expected`);
    if (data.length === 0) {
      if (this.end >= 0 && at === this.end) return; // the end of an empty body
      throw new PieceError("empty", piece, at, "a piece holds at least one byte");
    }
    if (this.end >= 0 && data.length > this.end - this.received) {
      throw new PieceError("overrun", piece, at, `${data.length} bytes from ${this.received}, ${this.end} announced`);
    }
    if (data.length > this.limit - this.received) throw new PieceError("too_large", piece, at, `the pieces hold more than ${this.limit} bytes`);
    this.parts.push(data);
    this.received += data.length;
  }

  /** How many pieces were taken. */
  get taken(): number {
    return this.parts.length;
  }

  /** The offset the next piece must carry. */
  get next(): number {
    return this.received;
  }

  get done(): boolean {
    return this.end >= 0 && this.received === this.end;
  }

  /** The body, once the announced total is reached. */
  finish(): Uint8Array {
    if (!this.done) throw new PieceError("missing", this.parts.length, undefined, `${this.received} of ${this.end} bytes received`);
    return Buffer.concat(this.parts, this.received);
  }
}
