package logstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// An entry is the body of one message on a session's log subject, all integers unsigned
// varints (encoding/binary Uvarint) unless said otherwise:
//
//	magic      4    "CPL1"
//	kind       1    KindSave, KindLease or KindFork
//	flags      1    bit 0: the data starts a zstd frame; bit 1: keep present (a rewrite);
//	                bit 2: lease present; bit 3 (packs): the data is the saves' stored bytes,
//	                its last frame left open; bits 4-7: zero
//	version, messages, rawBytes                 the head after the entry (Head)
//	state      108  the SHA-256 state after "[" and the head's messages (crypto/sha256 MarshalBinary)
//	pack, tailEntries, tailBytes               where the last pack is, what came after it (Head)
//	lease      if flag 2: owner (length, bytes), epoch, expires (unix ms)
//	save/fork  saveID (length, bytes), time (unix ms)
//	save       piece messages, piece rawBytes, piece CRC-32C (4 bytes, big-endian), keep if flag 1
//	fork       source subject (length, bytes), upTo, source version, rawBytes
//	pack       count, then per version: version, saveID (length, bytes), time, messages,
//	           rawBytes, hash (32 bytes), piece rawBytes, piece CRC-32C (4 bytes), piece flags
//	           (bit 0: frame, bit 1: keep), keep if flag 1
//	data       the rest: bytes of the session's zstd stream (saves and packs only)
//
// No NATS headers are needed: a direct get returns the whole entry as one byte slice. A save's
// meta is about 140 bytes.
var entryMagic = [4]byte{'C', 'P', 'L', '1'}

// Kind says what an entry is.
type Kind byte

const (
	KindSave  Kind = 1 // a version: the head state after it, its save id and time, its new messages
	KindLease Kind = 2 // a lease taken: the head state with the new lease, no data
	KindFork  Kind = 3 // first entry of a fork: version 1, whose messages are another session's
	KindPack  Kind = 4 // the saves since the previous pack, joined: their records and data
)

// ErrMalformed is returned for stored bytes that are not an entry this code can read.
var ErrMalformed = errors.New("logstore: malformed entry")

// Meta is an entry's fields (its byte layout is above).
type Meta struct {
	// Head is the session's state after the entry: all a save needs, so that a daemon without
	// a cache reads one message (the subject's last) before it saves.
	Head   Head
	SaveID string // saves and forks: the version's save id
	Time   int64  // saves and forks: unix ms
	Piece  *Piece
	Fork   *Fork
	Packed []Packed // a pack's versions
	// Open, on a pack, says its data is the packed saves' stored bytes as they were (frames
	// ended where a new one starts, the last left open for the saves after it); otherwise the
	// data is one whole frame of its own (pack.go).
	Open bool
}

// Packed is one version in a pack: its record and its piece (whose Messages is not stored: the
// record has the count).
type Packed struct {
	Record Record
	Piece  Piece
}

// Head is the state of a session after an entry.
type Head struct {
	Version  uint64
	Messages int   // messages in the head version
	RawBytes int64 // bytes of those messages joined by "," (no brackets)
	// State is the SHA-256 state (crypto/sha256 MarshalBinary) after "[" and the messages: a
	// save hashes only its new bytes, and the version's hash is this state finished with "]".
	State []byte
	Lease *Lease
	// Pack is the sequence of the last pack before the entry (0: none); TailEntries and
	// TailBytes count the saves and leases after it, and their data, the entry included (a pack
	// entry: 0, 0).
	Pack        uint64
	TailEntries int
	TailBytes   int64
}

// Piece describes a save's data.
type Piece struct {
	Messages int
	RawBytes int64 // bytes the data decodes to (a leading "," included, after the first)
	// Frame is set when the data starts a new zstd frame (the daemon had no encoder for the
	// session: first save, restart, eviction, lost compare-and-swap).
	Frame bool
	// CRC is the CRC-32C (Castagnoli) of the piece's raw bytes: readers check every piece with it
	// (0.1 ms for 2.3 MB, against 1–2 ms for the version's SHA-256).
	CRC uint32
	// Keep, on a rewrite, is how many bytes of the log before this entry the new version keeps;
	// the entry's data follows them (docs/format.md §8, "Rewrites").
	Keep *int64
}

// Fork says that the log of a fork starts with the first RawBytes bytes of the log of another
// session's subject, read up to (and including) stream sequence UpTo.
type Fork struct {
	Subject  string
	UpTo     uint64
	Version  uint64 // the source's version: the fork's log is the source's log at it
	RawBytes int64
}

// Lease is a session's lease: a save must name its owner and epoch while it is held.
type Lease struct {
	Owner   string
	Epoch   uint64
	Expires int64 // unix ms
}

const (
	flagFrame = 1 << iota
	flagKeep
	flagLease
	flagOpen
	flagsKnown = flagFrame | flagKeep | flagLease | flagOpen
	stateSize  = 108 // crypto/sha256's MarshalBinary
	maxString  = 1024
)

// encodeEntry builds an entry's bytes.
func encodeEntry(k Kind, m Meta, data []byte) ([]byte, error) {
	if len(m.Head.State) != stateSize {
		return nil, fmt.Errorf("logstore: a hash state of %d bytes, want %d", len(m.Head.State), stateSize)
	}
	var flags byte
	if m.Piece != nil && m.Piece.Frame {
		flags |= flagFrame
	}
	if m.Piece != nil && m.Piece.Keep != nil {
		flags |= flagKeep
	}
	if m.Head.Lease != nil {
		flags |= flagLease
	}
	if m.Open {
		flags |= flagOpen
	}
	out := make([]byte, 0, 256+len(data))
	out = append(append(out, entryMagic[:]...), byte(k), flags)
	out = binary.AppendUvarint(out, m.Head.Version)
	out = binary.AppendUvarint(out, uint64(m.Head.Messages))
	out = binary.AppendUvarint(out, uint64(m.Head.RawBytes))
	out = append(out, m.Head.State...)
	out = binary.AppendUvarint(out, m.Head.Pack)
	out = binary.AppendUvarint(out, uint64(m.Head.TailEntries))
	out = binary.AppendUvarint(out, uint64(m.Head.TailBytes))
	if l := m.Head.Lease; l != nil {
		out = appendString(out, l.Owner)
		out = binary.AppendUvarint(out, l.Epoch)
		out = binary.AppendUvarint(out, uint64(l.Expires))
	}
	if k == KindSave || k == KindFork {
		out = appendString(out, m.SaveID)
		out = binary.AppendUvarint(out, uint64(m.Time))
	}
	switch k {
	case KindSave:
		out = binary.AppendUvarint(out, uint64(m.Piece.Messages))
		out = binary.AppendUvarint(out, uint64(m.Piece.RawBytes))
		out = binary.BigEndian.AppendUint32(out, m.Piece.CRC)
		if m.Piece.Keep != nil {
			out = binary.AppendUvarint(out, uint64(*m.Piece.Keep))
		}
	case KindFork:
		out = appendString(out, m.Fork.Subject)
		out = binary.AppendUvarint(out, m.Fork.UpTo)
		out = binary.AppendUvarint(out, m.Fork.Version)
		out = binary.AppendUvarint(out, uint64(m.Fork.RawBytes))
	case KindPack:
		var err error
		if out, err = appendPacked(out, m.Packed); err != nil {
			return nil, err
		}
	}
	return append(out, data...), nil
}

func appendPacked(out []byte, packed []Packed) ([]byte, error) {
	out = binary.AppendUvarint(out, uint64(len(packed)))
	for _, p := range packed {
		hash, err := hex.DecodeString(p.Record.Hash)
		if err != nil || len(hash) != sha256.Size {
			return nil, fmt.Errorf("logstore: version %d has hash %q", p.Record.Version, p.Record.Hash)
		}
		out = binary.AppendUvarint(out, p.Record.Version)
		out = appendString(out, p.Record.SaveID)
		out = binary.AppendUvarint(out, uint64(p.Record.Time))
		out = binary.AppendUvarint(out, uint64(p.Record.Messages))
		out = binary.AppendUvarint(out, uint64(p.Record.RawBytes))
		out = append(out, hash...)
		out = binary.AppendUvarint(out, uint64(p.Piece.RawBytes))
		out = binary.BigEndian.AppendUint32(out, p.Piece.CRC)
		var flags byte
		if p.Piece.Frame {
			flags |= flagFrame
		}
		if p.Piece.Keep != nil {
			flags |= flagKeep
		}
		out = append(out, flags)
		if p.Piece.Keep != nil {
			out = binary.AppendUvarint(out, uint64(*p.Piece.Keep))
		}
	}
	return out, nil
}

// readPacked reads a pack's versions.
func (r *reader) readPacked() []Packed {
	n := r.uint("pack count", uint64(len(r.b)))
	out := make([]Packed, 0, n)
	for range n {
		var p Packed
		p.Record.Version = r.uint("packed version", maxInt)
		p.Record.SaveID = r.string("packed save id")
		p.Record.Time = int64(r.uint("packed time", maxInt))
		p.Record.Messages = int(r.uint("packed messages", maxInt))
		p.Record.RawBytes = int64(r.uint("packed rawBytes", maxInt))
		p.Record.Hash = hex.EncodeToString(r.bytes("packed hash", sha256.Size))
		p.Piece.RawBytes = int64(r.uint("packed piece", maxInt))
		p.Piece.CRC = binary.BigEndian.Uint32(append(r.bytes("packed piece CRC", 4), 0, 0, 0, 0))
		flags := r.bytes("packed flags", 1)
		if r.err != nil {
			return nil
		}
		if flags[0]&^(flagFrame|flagKeep) != 0 {
			r.err = fmt.Errorf("%w: packed flags %#x", ErrMalformed, flags[0])
			return nil
		}
		p.Piece.Frame = flags[0]&flagFrame != 0
		if flags[0]&flagKeep != 0 {
			keep := int64(r.uint("packed keep", maxInt))
			p.Piece.Keep = &keep
		}
		out = append(out, p)
	}
	return out
}

func appendString(out []byte, s string) []byte {
	return append(binary.AppendUvarint(out, uint64(len(s))), s...)
}

// reader reads an entry's fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uint(what string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(what string, n uint64) []byte {
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: %s is cut short", ErrMalformed, what)
	}
	if r.err != nil {
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) string(what string) string { return string(r.bytes(what, r.uint(what, maxString))) }

const maxInt = 1<<63 - 1

// decodeEntry splits an entry into its kind, meta and data (a slice of b).
func decodeEntry(b []byte) (Kind, Meta, []byte, error) {
	var m Meta
	if len(b) < 6 || !bytes.Equal(b[:4], entryMagic[:]) {
		return 0, m, nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	k, flags := Kind(b[4]), b[5]
	if k < KindSave || k > KindPack {
		return 0, m, nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, k)
	}
	if flags&^flagsKnown != 0 || k != KindSave && k != KindPack && flags&(flagFrame|flagKeep) != 0 ||
		k == KindPack && flags&flagKeep != 0 || k != KindPack && flags&flagOpen != 0 {
		return 0, m, nil, fmt.Errorf("%w: flags %#x in an entry of kind %d", ErrMalformed, flags, k)
	}
	r := &reader{b: b[6:]}
	m.Head.Version = r.uint("version", maxInt)
	m.Head.Messages = int(r.uint("messages", maxInt))
	m.Head.RawBytes = int64(r.uint("rawBytes", maxInt))
	m.Head.State = r.bytes("state", stateSize)
	m.Head.Pack = r.uint("pack", maxInt)
	m.Head.TailEntries = int(r.uint("tail entries", maxInt))
	m.Head.TailBytes = int64(r.uint("tail bytes", maxInt))
	if flags&flagLease != 0 {
		m.Head.Lease = &Lease{Owner: r.string("lease owner"), Epoch: r.uint("lease epoch", maxInt),
			Expires: int64(r.uint("lease expiry", maxInt))}
	}
	if k == KindSave || k == KindFork {
		m.SaveID = r.string("save id")
		m.Time = int64(r.uint("time", maxInt))
	}
	switch k {
	case KindSave:
		m.Piece = &Piece{Messages: int(r.uint("piece messages", maxInt)), RawBytes: int64(r.uint("piece rawBytes", maxInt)),
			Frame: flags&flagFrame != 0}
		m.Piece.CRC = binary.BigEndian.Uint32(append(r.bytes("piece CRC", 4), 0, 0, 0, 0))
		if flags&flagKeep != 0 {
			keep := int64(r.uint("keep", maxInt))
			m.Piece.Keep = &keep
		}
	case KindFork:
		m.Fork = &Fork{Subject: r.string("fork subject"), UpTo: r.uint("fork upTo", maxInt), Version: r.uint("fork version", maxInt),
			RawBytes: int64(r.uint("fork rawBytes", maxInt))}
	case KindPack:
		m.Open = flags&flagOpen != 0
		m.Packed = r.readPacked()
		if r.err == nil && len(m.Packed) == 0 {
			r.err = fmt.Errorf("%w: an empty pack", ErrMalformed)
		}
	}
	if r.err != nil {
		return 0, m, nil, r.err
	}
	if k != KindSave && k != KindPack && len(r.b) > 0 {
		return 0, m, nil, fmt.Errorf("%w: %d bytes of data in an entry of kind %d", ErrMalformed, len(r.b), k)
	}
	return k, m, r.b, nil
}
