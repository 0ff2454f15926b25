// Body encodings (docs/protocol.md §4.1 Cp-Encoding, §5 read's encoding). A save body may be sent
// identity or zstd; a read reply is decoded by the decoder its Cp-Encoding names. New read
// encodings slot in by adding a decoder to `decoders`.

import * as zlib from "node:zlib";
import { Decompress as FzstdDecompress } from "fzstd";
import { CheckpointError } from "./errors.js";

/** Turns the concatenated pieces of a read reply into the bytes they encode. */
export interface Decoder {
  /** limit: the most bytes the result may have (anything longer is refused, not kept). */
  decode(body: Uint8Array, limit: number): Uint8Array;
}

const identity: Decoder = { decode: (b) => b };

// zlib.zstdDecompressSync arrived in Node 22.15/23.8 and bounds its output while decoding
// (maxOutputLength). Where it is missing, fzstd (pure JS, maintained, MIT) decodes as a stream, the
// output counted as it comes and the decoding stopped past limit. Both read concatenated frames,
// skippable ones included, as one stream.
type ZstdDecompress = (b: Uint8Array, o?: { maxOutputLength?: number }) => Buffer;
const nodeZstdDecompress = (zlib as unknown as { zstdDecompressSync?: ZstdDecompress }).zstdDecompressSync;

class TooLong extends Error {}

function fzstdBounded(b: Uint8Array, limit: number): Uint8Array {
  const parts: Uint8Array[] = [];
  let n = 0;
  const d = new FzstdDecompress((chunk) => {
    n += chunk.length;
    if (n > limit) throw new TooLong();
    parts.push(chunk);
  });
  const step = 64 * 1024;
  for (let off = 0; off < b.length || off === 0; off += step) {
    d.push(b.subarray(off, off + step), off + step >= b.length);
  }
  return Buffer.concat(parts, n);
}

const zstd: Decoder = {
  decode(b, limit) {
    try {
      return nodeZstdDecompress ? nodeZstdDecompress(b, { maxOutputLength: Math.max(1, limit) }) : fzstdBounded(b, limit);
    } catch (e) {
      if (e instanceof TooLong || (e as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") {
        throw new CheckpointError("corrupt", `read: zstd reply decodes to more than ${limit} bytes`);
      }
      throw new CheckpointError("corrupt", `read: zstd reply does not decode: ${(e as Error).message}`);
    }
  },
};

export const decoders: Record<string, Decoder> = { identity, zstd };

/** Compresses a save body. `name` goes into Cp-Encoding. */
export interface Encoder {
  name: string;
  encode(body: Uint8Array): Uint8Array;
}

type ZstdCompress = (b: Uint8Array) => Buffer;
const nodeZstdCompress = (zlib as unknown as { zstdCompressSync?: ZstdCompress }).zstdCompressSync;

/**
 * The zstd encoder of Node's zlib (22.15 and later), at its default level, whose window is within
 * the 8 MiB §4.1 allows; undefined on older Node, where saves go identity.
 */
export const nodeZstdEncoder: Encoder | undefined = nodeZstdCompress
  ? { name: "zstd", encode: (b) => nodeZstdCompress(b) }
  : undefined;
