package codec

import (
	"bytes"
	"encoding/binary"
)

// A version that ends inside a stored segment needs the segment's first bytes only. Its frame's
// blocks before the cut do not depend on anything after them (zstd matches look back, never ahead),
// so they can be sent as they are stored, in a frame of their own that ends with an empty block;
// only what follows the last whole block is compressed again. RFC 8878 §3.1.1.

// maxBlock is the largest block a zstd frame holds, and what klauspost/compress cuts its input into
// at the default level: every block but a frame's last decodes to this much (or to the window, if
// smaller). ZstdFramePrefix relies on it only as far as it checks what it built.
const maxBlock = 128 << 10

// ZstdFramePrefix returns a zstd frame made of the whole blocks of frame (the first zstd frame of a
// stored blob's payload, which decodes to raw or to a prefix of it) that decode to at most the first
// n bytes of raw, and the length of what it decodes to. ok is false when that is nothing, or when
// frame's header is not one this can rewrite (a dictionary, a reserved bit). What it returns has
// been decoded and compared with raw, so a frame whose blocks are not laid out as expected is never
// passed on: ok is false then too.
func ZstdFramePrefix(frame, raw []byte, n int) (out []byte, prefix int, ok bool) {
	h, ok := parseFrameHeader(frame)
	if !ok {
		return nil, 0, false
	}
	pos, end := h.size, h.size
	for pos+3 <= len(frame) {
		bh := int(frame[pos]) | int(frame[pos+1])<<8 | int(frame[pos+2])<<16
		last, kind, size := bh&1 == 1, (bh>>1)&3, bh>>3
		stored, decoded := size, size // raw block
		switch kind {
		case 1: // RLE: one byte, repeated size times
			stored = 1
		case 2: // compressed: its decoded size is the frame's block size (not the last block's)
			decoded = min(h.window, maxBlock)
		case 3:
			return nil, 0, false
		}
		if last || prefix+decoded > n || pos+3+stored > len(frame) {
			break
		}
		pos += 3 + stored
		prefix += decoded
		end = pos
	}
	if prefix == 0 {
		return nil, 0, false
	}
	out = h.rewrite(prefix)
	out = append(out, frame[h.size:end]...)
	out = append(out, 1, 0, 0) // an empty raw block, the last
	if got, err := DecompressExact(out, int64(prefix), nil); err != nil || !bytes.Equal(got, raw[:prefix]) {
		return nil, 0, false
	}
	return out, prefix, true
}

// frameHeader is what ZstdFramePrefix needs of a frame's header.
type frameHeader struct {
	size   int  // bytes of the header, magic included
	single bool // single segment: the window is the content
	wd     byte // the window descriptor (not single)
	window int  // the window in bytes
}

func parseFrameHeader(f []byte) (frameHeader, bool) {
	if len(f) < 6 || !bytes.Equal(f[:4], []byte{0x28, 0xB5, 0x2F, 0xFD}) {
		return frameHeader{}, false
	}
	fhd := f[4]
	h := frameHeader{size: 5, single: fhd&0x20 != 0}
	if fhd&0x08 != 0 || fhd&0x03 != 0 { // reserved bit, or a dictionary id
		return frameHeader{}, false
	}
	fcsBytes := [4]int{0, 2, 4, 8}[fhd>>6]
	if h.single && fhd>>6 == 0 {
		fcsBytes = 1
	}
	if !h.single {
		h.wd = f[5]
		h.size++
		log := 10 + int(h.wd>>3)
		h.window = 1<<log + (1<<log)/8*int(h.wd&7)
	}
	if len(f) < h.size+fcsBytes {
		return frameHeader{}, false
	}
	if h.single {
		var fcs uint64
		switch fcsBytes {
		case 1:
			fcs = uint64(f[h.size])
		case 2:
			fcs = uint64(binary.LittleEndian.Uint16(f[h.size:])) + 256
		case 4:
			fcs = uint64(binary.LittleEndian.Uint32(f[h.size:]))
		case 8:
			fcs = binary.LittleEndian.Uint64(f[h.size:])
		}
		if fcs > MaxBodyWindow {
			return frameHeader{}, false
		}
		h.window = int(fcs)
	}
	h.size += fcsBytes
	return h, true
}

// rewrite returns the header of a frame like h's that decodes to prefix bytes, without a checksum
// (the blocks after the cut are not sent, so neither is the checksum of all of them).
func (h frameHeader) rewrite(prefix int) []byte {
	out := []byte{0x28, 0xB5, 0x2F, 0xFD, 0}
	if !h.single {
		return append(out, h.wd) // the same window, no content size
	}
	// Single segment: the window is the content, now the prefix, which every match of the blocks
	// before the cut stays within.
	switch {
	case prefix < 256:
		out[4] = 0x20
		return append(out, byte(prefix))
	case prefix < 65536+256:
		out[4] = 0x20 | 1<<6
		return binary.LittleEndian.AppendUint16(out, uint16(prefix-256))
	default:
		out[4] = 0x20 | 2<<6
		return binary.LittleEndian.AppendUint32(out, uint32(prefix))
	}
}
