package logstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// An entry is the body of one message of the log stream:
//
//	offset  size  content
//	0       4     magic "CPL1"
//	4       1     kind (KindSave, KindMerge, KindLease, KindFork, KindData)
//	5       n     uvarint: length m of the meta
//	5+n     m     meta: JSON (Meta)
//	5+n+m   …     data: bytes of the session's zstd stream (see stream.go); may be empty
//
// No NATS headers are read: a direct get returns the whole entry as one byte slice.
var entryMagic = [4]byte{'C', 'P', 'L', '1'}

// Kind says what an entry is.
type Kind byte

const (
	KindSave  Kind = 1 // a version: its record, the head state, its new messages
	KindMerge Kind = 2 // commit of a merge: the head state with a full layout, no data
	KindLease Kind = 3 // a lease taken or released: the head state, no data
	KindFork  Kind = 4 // first entry of a fork: the head state, layout referring to the source
	KindData  Kind = 5 // merged data (on a level subject), with the records of its versions
)

// ErrMalformed is returned for stored bytes that are not an entry this code can read.
var ErrMalformed = errors.New("logstore: malformed entry")

// Meta is the JSON part of an entry. Which fields are set depends on the kind: log entries
// (save, merge, lease, fork) carry the head state; a save also its record; data entries the
// records of the versions they hold.
type Meta struct {
	Head    *Head    `json:"head,omitempty"`
	Record  *Record  `json:"rec,omitempty"`
	Records []Record `json:"recs,omitempty"`
	// Own describes the entry's data (saves, forks and data entries): messages, raw and stored
	// bytes, and whether it starts a new zstd frame (stream.go). Its Seq is the entry's own.
	Own *Extent `json:"own,omitempty"`
}

// Head is the state of a session after an entry: everything a save needs, so that a save reads
// one entry (or none: the daemon caches it).
type Head struct {
	Version  uint64 `json:"v"`
	Messages int    `json:"n"`   // messages in the head version
	RawBytes int64  `json:"raw"` // bytes of those messages joined by "," (no brackets)
	// State is the SHA-256 state (crypto/sha256 MarshalBinary) after "[" and the messages, so a
	// save hashes only its new bytes.
	State []byte `json:"st"`
	// Layout is set in entries written by a merge or a fork: the extents before Since. Other
	// entries leave it out and name Base, the entry that holds it (0: none, the layout starts
	// with Since). Since is the saves (and fork) after Base, oldest first, the entry itself
	// excluded. The head's layout is Layout (or Base's), then Since, then the entry's own extent.
	Layout []Extent `json:"layout,omitempty"`
	Base   uint64   `json:"base,omitempty"`
	Since  []Extent `json:"since,omitempty"`
	Lease  *Lease   `json:"lease,omitempty"`
}

// Extent is a stored run of messages: the data of entry Seq (a save on the log subject, or a
// merged data entry on level subject Level), holding versions From..To.
type Extent struct {
	Seq      uint64 `json:"s"`
	Level    int    `json:"l,omitempty"`
	From     uint64 `json:"f"`
	To       uint64 `json:"t"`
	Messages int    `json:"n"`
	RawBytes int64  `json:"r"` // raw bytes it contributes (a leading "," included, after the first)
	Stored   int    `json:"z"` // bytes of its data as stored
	Frame    bool   `json:"fr,omitempty"`
	// Cut is set on an extent of which only the first RawBytes are used (a fork's last extent):
	// the next extent starts a new frame.
	Cut bool `json:"cut,omitempty"`
	// Shared is set on an extent of another session's subject (a fork's): this session never
	// merges or deletes it, and it holds none of this session's versions (From, To are 0).
	Shared bool `json:"sh,omitempty"`
}

// Record is a version record (the prototype's subset of docs/protocol.md §6).
type Record struct {
	Version  uint64 `json:"v"`
	SaveID   string `json:"id"`
	Time     int64  `json:"t"` // unix ms
	Messages int    `json:"n"`
	RawBytes int64  `json:"raw"` // of the whole conversation, brackets included
	Hash     string `json:"h"`   // hex SHA-256 of the conversation
}

// Lease is a session's lease: a save must name its owner and epoch.
type Lease struct {
	Owner   string `json:"o"`
	Epoch   uint64 `json:"e"`
	Expires int64  `json:"x"` // unix ms
}

// encodeEntry builds an entry's bytes.
func encodeEntry(k Kind, m Meta, data []byte) ([]byte, error) {
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 5+binary.MaxVarintLen64+len(meta)+len(data))
	out = append(out, entryMagic[:]...)
	out = append(out, byte(k))
	out = binary.AppendUvarint(out, uint64(len(meta)))
	out = append(out, meta...)
	return append(out, data...), nil
}

// decodeEntry splits an entry into its kind, meta and data (a slice of b).
func decodeEntry(b []byte) (Kind, Meta, []byte, error) {
	var m Meta
	if len(b) < 6 || !bytes.Equal(b[:4], entryMagic[:]) {
		return 0, m, nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	k := Kind(b[4])
	if k < KindSave || k > KindData {
		return 0, m, nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, k)
	}
	n, w := binary.Uvarint(b[5:])
	if w <= 0 || n > uint64(len(b)-5-w) {
		return 0, m, nil, fmt.Errorf("%w: meta length", ErrMalformed)
	}
	rest := b[5+w:]
	if err := json.Unmarshal(rest[:n], &m); err != nil {
		return 0, m, nil, fmt.Errorf("%w: meta: %v", ErrMalformed, err)
	}
	if k != KindData && m.Head == nil {
		return 0, m, nil, fmt.Errorf("%w: log entry of kind %d without head", ErrMalformed, k)
	}
	return k, m, rest[n:], nil
}
