// Body encodings (docs/protocol.md §4.1 Cp-Encoding, §5 read's encoding). A save body may be sent
// identity or zstd; a read reply is decoded by the decoder its Cp-Encoding names. New read
// encodings slot in by adding a decoder to `decoders`.

import * as zlib from "node:zlib";
import { decompress as fzstdDecompress } from "fzstd";
import { CheckpointError } from "./errors.js";

/** Turns the concatenated pieces of a read reply into the bytes they encode. */
export interface Decoder {
  /** limit: the most bytes the result may have (anything longer is refused, not kept). */
  decode(body: Uint8Array, limit: number): Uint8Array;
}

const identity: Decoder = { decode: (b) => b };

// zlib.zstdDecompressSync arrived in Node 22.15/23.8; where it is missing, fzstd (pure JS,
// maintained, MIT) decodes. Node's bounds the output while decoding (maxOutputLength); fzstd
// decodes first and the length is checked after.
type ZstdDecompress = (b: Uint8Array, o?: { maxOutputLength?: number }) => Buffer;
const nodeZstdDecompress = (zlib as unknown as { zstdDecompressSync?: ZstdDecompress }).zstdDecompressSync;

const zstd: Decoder = {
  decode(b, limit) {
    let out: Uint8Array;
    try {
      out = nodeZstdDecompress ? nodeZstdDecompress(b, { maxOutputLength: Math.max(1, limit) }) : fzstdDecompress(b);
    } catch (e) {
      throw new CheckpointError("corrupt", `read: zstd reply does not decode: ${(e as Error).message}`);
    }
    if (out.length > limit) throw new CheckpointError("corrupt", `read: zstd reply decodes to more than ${limit} bytes`);
    return out;
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
