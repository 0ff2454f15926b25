package engine

import (
	"bytes"
	"encoding/binary"
)

// A head's SHA-256 state is crypto/sha256's MarshalBinary (stateSize bytes): the magic "sha\x03",
// the chaining value (8 × 4 bytes, big-endian), the 64-byte input block of which only the first
// len mod 64 bytes are input (the rest zeros), and len, the bytes hashed (8 bytes, big-endian).
// A head's state is always that of "[" and its rawBytes, so len is rawBytes + 1 and the magic,
// the zeros and len are known from the head itself: an entry stores the state compact, the
// chaining value and the pending input alone (32 to 95 bytes, 64 on average instead of 108: ~44
// bytes less per entry, 21 kB over the corpus saved turn by turn; docs/format.md §8.3.1).

const (
	stateMagic = "sha\x03"           // crypto/sha256's, for SHA-256
	shaChain   = 32                  // the chaining value
	shaBlock   = 64                  // SHA-256's input block
	shaLenAt   = stateSize - 8       // where len starts
	shaBlockAt = shaLenAt - shaBlock // where the input block starts
)

// compactStateSize is the size of the compact state of a head of rawBytes bytes.
func compactStateSize(rawBytes int64) uint64 { return shaChain + uint64(rawBytes+1)%shaBlock }

// compactState returns state compact, or false if it is not the state of rawBytes + 1 bytes
// hashed as crypto/sha256 marshals it (then the entry stores it whole).
func compactState(state []byte, rawBytes int64) ([]byte, bool) {
	if len(state) != stateSize || string(state[:len(stateMagic)]) != stateMagic || rawBytes < 0 ||
		binary.BigEndian.Uint64(state[shaLenAt:]) != uint64(rawBytes)+1 {
		return nil, false
	}
	pending := int(compactStateSize(rawBytes)) - shaChain
	block := state[shaBlockAt:shaLenAt]
	if !allZero(block[pending:]) {
		return nil, false
	}
	out := make([]byte, 0, shaChain+pending)
	out = append(out, state[len(stateMagic):shaBlockAt]...)
	return append(out, block[:pending]...), true
}

// fullState is the state compactState made compact (nil for nil: a field cut short, which the
// reader has already failed).
func fullState(compact []byte, rawBytes int64) []byte {
	if compact == nil {
		return nil
	}
	out := make([]byte, 0, stateSize)
	out = append(out, stateMagic...)
	out = append(out, compact[:shaChain]...)
	out = append(out, compact[shaChain:]...)
	out = append(out, make([]byte, shaBlock-(len(compact)-shaChain))...)
	return binary.BigEndian.AppendUint64(out, uint64(rawBytes)+1)
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }
