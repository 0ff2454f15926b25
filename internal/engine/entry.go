package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// An entry is one element of a session's log (docs/format.md §8.3, format CPL2). Every entry
// carries the session's head after it (the head version's record, its SHA-256 state, the lease,
// the seal, where the last pack is), so that the log's last entry alone answers a save, a lease
// operation or a head read. Integers are unsigned varints (encoding/binary Uvarint) unless said
// otherwise; a string is a varint length then its bytes; a time is its Unix seconds as a signed
// varint (binary.Varint) then its nanoseconds (< 1e9) as a varint.
//
//	magic    4    "CPL2" (a reader refuses other formats: ErrUnknownFormat)
//	kind     1    kindSave (1), kindState (2), kindFork (3), kindPack (4), kindPart (5); bit 7
//	              (kindExt): flags2 follows flags
//	flags    1    bit 0: the data starts a zstd frame (save, pack); bit 1: keep present (save);
//	              bit 2: lease present; bit 3: open pack; bit 4: moved present; bit 5: a
//	              deletion (state); bit 6: values listed (save); bit 7: back present (not on
//	              packs); others 0
//	flags2   1    if kind bit 7: bit 0: the state is compact; bit 1 (packs only): the packed
//	              records are delta-coded; bit 2 (saves only): a group entry (group below);
//	              bit 3: tailExtra present (not on packs); others 0
//	head          version, messages, rawBytes (of the messages joined by ",", no brackets),
//	              state (108 bytes, crypto/sha256 MarshalBinary after "[" and those bytes; compact,
//	              flags2 bit 0: its 32 bytes of chaining value, then its nx = (rawBytes + 1) mod
//	              64 bytes of pending input: compactState),
//	              counts (user, assistant, toolResult, extension, toolCalls, system),
//	              firstVersion, pack, tailEntries, tailBytes, tailExtra if flags2 bit 3 (the
//	              versions the entries since the last pack hold beyond one each: group
//	              entries' earlier versions), deleted, pins (count, then
//	              per pin: the fork's namespace, session, agent, the version it reads, and
//	              when the pin was written (time)),
//	              back if flag 7: b, the back pointer (0 if b is 0, else pack + b - 1),
//	              lease if flag 2: owner, epoch, acquired (time), expires (time),
//	              moved if flag 4: to, at (time),
//	              and, if version > 0, the head version's record: parent, saveId, writer, reason,
//	              dialect, created (time), storedBytes, extras (a string holding a JSON object,
//	              empty when there are none: {"forkOf":{...},"origin":{...}})
//	save          piece: messages, rawBytes, CRC-32C (4 bytes, big-endian), parts, keep if flag 1,
//	              values if flag 6: count, then per value at, size, id (32 bytes: SHA-256);
//	              group if flags2 bit 2: the versions of the entry before its head version, as a
//	              pack's records (count, then delta-coded records with their pieces), then each
//	              one's piece messages; the data is their pieces then the head's, back to back in
//	              the session's stream
//	pack          parts, count, then per version: version, messages, rawBytes (brackets included),
//	              hash (32 bytes), counts (6), parent, saveId, writer, reason, dialect, created,
//	              storedBytes, extras; piece rawBytes, piece CRC-32C, piece flags (bit 0 frame, bit 1
//	              keep, bit 2 values), keep if set, values if set. Delta-coded (flags2 bit 1), a
//	              record after the first has no version (the one before's + 1); messages,
//	              rawBytes and the counts are each its value less the record before's (a signed
//	              varint; the first record's less 0); saveId is a varint p, the bytes it shares
//	              with the record before's save id ("" for the first), then the rest (a string);
//	              writer, reason and dialect are each a varint n, 0 for the record before's (""
//	              for the first), else n - 1 bytes;
//	              created is its seconds less the record before's (signed varint; the first
//	              record's less 0), then its nanoseconds
//	fork          the source's namespace, session, agent, and the version version 1 is
//	part          nothing more
//	data          the rest: save and pack: the session's zstd stream (§8.4); part: a piece of the
//	              next save's or pack's data; state: none (refused if present)
//
// A save or pack whose entry would be larger than the Log's MaxEntry is written as parts: entries
// of kind kindPart carrying the head unchanged and the first bytes of its data, then the save or
// pack itself with parts = how many, its data the rest. Readers join the parts right before it;
// parts no save or pack takes (a save that failed half-way) are skipped, and the next pack deletes
// them.
var entryMagic = [4]byte{'C', 'P', 'L', '2'}

// entryKind says what an entry is.
type entryKind byte

const (
	kindSave  entryKind = 1 // a version: its record in the head, and its new messages
	kindState entryKind = 2 // the head unchanged, its lease, seal or first version changed
	kindPack  entryKind = 4 // the saves since the previous pack, joined: their records and data
	kindPart  entryKind = 5 // the first bytes of the data of the save or pack that follows
)

// kindFork is the first entry of a fork: version 1 is another session's version, read through
// that session (docs/format.md §8.11); the fork's first pack copies it in.
const kindFork entryKind = 3

// headState is the session's state after an entry.
type headState struct {
	Version  uint64
	RawBytes int64  // bytes of the messages joined by "," (no brackets)
	State    []byte // SHA-256 state after "[" and those bytes
	Counts   Counts // Counts.Messages: the messages of the head version
	// The head version's record (Version > 0).
	Parent      uint64
	SaveID      string
	Writer      string
	Reason      string
	Dialect     string
	Created     time.Time
	StoredBytes int64
	ForkOf      *ForkRef
	Origin      *Origin

	FirstVersion uint64 // the oldest version retention keeps (0: every version)
	Lease        *Lease
	Moved        *Moved
	// Pack is the sequence of the last pack before the entry (0: none); TailEntries and
	// TailBytes count the entries after it and their bytes (meta and data), the entry included.
	Pack        uint64
	TailEntries int
	TailBytes   int64
	// TailExtra counts the versions the entries since the last pack hold beyond one each: the
	// earlier versions of group entries (group.go). Every entry after the last pack adds
	// 1 + its group's versions, so the last pack holds version Version - TailEntries - TailExtra
	// or a later one (read.go upToFor).
	TailExtra int
	// Deleted is the sequence of the session's last deletion before the entry (0: none): the
	// entries before it are not this session's (a crash kept them from being deleted).
	Deleted uint64
	// Pins are the forks that read this session through one of its versions: retention keeps
	// those versions, and a deletion copies the forks in first.
	Pins []forkPin
}

// forkPin names a fork reading a session's version.
type forkPin struct {
	Fork    Key
	Version uint64
	// At is when the pin was written (zero in a fork entry's Source): until the fork's entry is
	// written, the pin of a fork in flight looks like a stale one, and At tells them apart
	// (fork.go pinUse).
	At time.Time
}

// is reports whether p and q pin the same version for the same fork (whenever written).
func (p forkPin) is(q forkPin) bool { return p.Fork == q.Fork && p.Version == q.Version }

// pieceInfo describes a save's data.
type pieceInfo struct {
	Messages int
	RawBytes int64 // bytes the data decodes to (a leading "," included, after the first)
	Frame    bool  // the data starts a new zstd frame
	CRC      uint32
	// Keep, on a rewrite, is how many bytes of the log before this entry the version keeps.
	Keep *int64
	// Values are the large strings cut out of the piece (values.go): its bytes are RawBytes (what
	// the data decodes to, CRC covers) plus theirs.
	Values []valueRef
}

// packedVersion is one version in a pack: its record and its piece.
type packedVersion struct {
	Record Record    // Key not stored
	Piece  pieceInfo // Messages not stored
}

// entryMeta is an entry's fields.
type entryMeta struct {
	Kind   entryKind
	Head   headState
	Piece  *pieceInfo      // saves
	Packed []packedVersion // packs
	Open   bool            // packs: the data is the packed saves' stored bytes, its last frame open
	Parts  int             // saves and packs: part entries before it holding the first bytes of its data
	Source *forkPin        // a fork's first entry: the session (Fork) and version it starts from
	// Deletion, on a state entry, says it deletes the session: its log starts again after it.
	Deletion bool
	// Back, when HasBack (entries written since back pointers, never packs), is where a walk back
	// from this entry goes on (docs/format.md §8.3.1): the sequence of the entry holding the
	// record of the version before Head.Version (a save, fork, state or part holding it as its
	// head), or of the last pack (which holds it, or names the pack that does), 0 if there is
	// none. Following them, the newest versions' records cost a read of about as many entries
	// instead of a read of every entry since the last pack (back.go).
	Back    uint64
	HasBack bool
	// Group, on a save written by SaveGroup (group.go), holds the versions of the entry before
	// its head version (Head.Version - len(Group) to Head.Version - 1), each with its record and
	// piece; the data holds their pieces then Piece's, back to back in one run of the stream.
	Group []packedVersion
}

const (
	flagFrame = 1 << iota
	flagKeep
	flagLease
	flagOpen
	flagMoved
	flagDeletion
	flagValues
	flagBack
	flagsKnown = flagFrame | flagKeep | flagLease | flagOpen | flagMoved | flagDeletion | flagValues | flagBack

	pieceValues = 1 << 2 // a packed piece's flag: values listed

	stateSize  = 108 // crypto/sha256's MarshalBinary
	maxString  = 4096
	maxExtras  = 64 << 10
	maxCount   = 1 << 53
	maxSize    = 1 << 62
	maxPacked  = 1 << 16
	maxPins    = 64      // forks reading one session at once; more forks are copies
	secondsMax = 1 << 40 // far beyond year 9999 both ways
)

// The second flags byte (since s18-disk; additive: entries without it read as before).
const (
	// kindExt, on the kind byte, says a second flags byte (flags2) follows flags.
	kindExt = 1 << 7
	// flag2Compact: the state is stored compact (compactState).
	flag2Compact = 1 << 0
	// flag2Delta, on packs only (since s19-disk): each packed record is written against the one
	// before it (packedPrev): a version after the first left out, numbers as differences, the
	// save id's shared prefix left out, writer, reason and dialect "as before" when unchanged.
	// Consecutive versions share most of those: 105 -> 65 bytes per packed version on the
	// corpus (docs/format.md §8.15f).
	flag2Delta = 1 << 1
	// flag2Group, on saves only (since s21-gengine): the entry holds a group of versions
	// (entryMeta.Group), written by SaveGroup with one compare-and-swap (docs/format.md §8.15m).
	flag2Group = 1 << 2
	// flag2Extra: the head's TailExtra is present (not 0).
	flag2Extra  = 1 << 3
	flags2Known = flag2Compact | flag2Delta | flag2Group | flag2Extra
)

// encodeEntry builds an entry's bytes.
func encodeEntry(m entryMeta, data []byte) ([]byte, error) {
	h := &m.Head
	if len(h.State) != stateSize {
		return nil, fmt.Errorf("engine: a hash state of %d bytes, want %d", len(h.State), stateSize)
	}
	if err := checkTimes(m); err != nil {
		return nil, err
	}
	var flags byte
	if m.Piece != nil && m.Piece.Frame || m.Kind == kindPack && len(m.Packed) > 0 && m.Packed[0].Piece.Frame {
		flags |= flagFrame
	}
	if m.Piece != nil && m.Piece.Keep != nil {
		flags |= flagKeep
	}
	if h.Lease != nil {
		flags |= flagLease
	}
	if m.Open {
		flags |= flagOpen
	}
	if h.Moved != nil {
		flags |= flagMoved
	}
	if m.Deletion {
		flags |= flagDeletion
	}
	if m.Piece != nil && len(m.Piece.Values) > 0 {
		flags |= flagValues
	}
	if m.HasBack {
		if m.Kind == kindPack || m.Back != 0 && m.Back < h.Pack {
			return nil, fmt.Errorf("engine: a back pointer %d in an entry of kind %d after pack %d", m.Back, m.Kind, h.Pack)
		}
		flags |= flagBack
	}
	compact, isCompact := compactState(h.State, h.RawBytes)
	var flags2 byte
	if isCompact {
		flags2 |= flag2Compact
	}
	if m.Kind == kindPack {
		flags2 |= flag2Delta
	}
	if len(m.Group) > 0 {
		if m.Kind != kindSave || len(m.Group) >= maxGroup {
			return nil, fmt.Errorf("engine: a group of %d versions in an entry of kind %d", len(m.Group), m.Kind)
		}
		flags2 |= flag2Group
	}
	if h.TailExtra != 0 {
		if m.Kind == kindPack || h.TailExtra < 0 {
			return nil, fmt.Errorf("engine: %d extra tail versions in an entry of kind %d", h.TailExtra, m.Kind)
		}
		flags2 |= flag2Extra
	}
	out := make([]byte, 0, 256+len(data))
	out = append(out, entryMagic[:]...)
	if flags2 != 0 {
		out = append(out, byte(m.Kind)|kindExt, flags, flags2)
	} else {
		out = append(out, byte(m.Kind), flags)
	}
	out = binary.AppendUvarint(out, h.Version)
	out = binary.AppendUvarint(out, uint64(h.Counts.Messages))
	out = binary.AppendUvarint(out, uint64(h.RawBytes))
	if isCompact {
		out = append(out, compact...)
	} else {
		out = append(out, h.State...)
	}
	out = appendCounts(out, h.Counts)
	out = binary.AppendUvarint(out, h.FirstVersion)
	out = binary.AppendUvarint(out, h.Pack)
	out = binary.AppendUvarint(out, uint64(h.TailEntries))
	out = binary.AppendUvarint(out, uint64(h.TailBytes))
	if h.TailExtra != 0 {
		out = binary.AppendUvarint(out, uint64(h.TailExtra))
	}
	out = binary.AppendUvarint(out, h.Deleted)
	out = binary.AppendUvarint(out, uint64(len(h.Pins)))
	for _, p := range h.Pins {
		var err error
		if out, err = appendKey(out, p.Fork); err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, p.Version)
		out = appendTime(out, p.At)
	}
	if m.HasBack {
		b := uint64(0) // no version before: 0; otherwise its distance from the last pack, + 1 (short)
		if m.Back != 0 {
			b = m.Back - h.Pack + 1
		}
		out = binary.AppendUvarint(out, b)
	}
	if l := h.Lease; l != nil {
		if len(l.Owner) > maxString {
			return nil, fmt.Errorf("%w: a lease owner of %d bytes (at most %d)", ErrBadRequest, len(l.Owner), maxString)
		}
		out = appendString(out, l.Owner)
		out = binary.AppendUvarint(out, l.Epoch)
		out = appendTime(appendTime(out, l.Acquired), l.Expires)
	}
	if mv := h.Moved; mv != nil {
		if len(mv.To) > maxString {
			return nil, fmt.Errorf("%w: a new home of %d bytes (at most %d)", ErrBadRequest, len(mv.To), maxString)
		}
		out = appendTime(appendString(out, mv.To), mv.At)
	}
	if h.Version > 0 {
		var err error
		if out, err = appendRecordFields(out, h.Parent, h.SaveID, h.Writer, h.Reason, h.Dialect, h.Created, h.StoredBytes, h.ForkOf, h.Origin, nil); err != nil {
			return nil, err
		}
	}
	switch m.Kind {
	case kindSave:
		p := m.Piece
		out = binary.AppendUvarint(out, uint64(p.Messages))
		out = binary.AppendUvarint(out, uint64(p.RawBytes))
		out = binary.BigEndian.AppendUint32(out, p.CRC)
		out = binary.AppendUvarint(out, uint64(m.Parts))
		if p.Keep != nil {
			out = binary.AppendUvarint(out, uint64(*p.Keep))
		}
		var err error
		if out, err = appendValues(out, p.Values); err != nil {
			return nil, err
		}
		if len(m.Group) > 0 {
			if out, err = appendGroup(out, m.Group, h.Version); err != nil {
				return nil, err
			}
		}
	case kindFork:
		var err error
		if out, err = appendKey(out, m.Source.Fork); err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, m.Source.Version)
	case kindPack:
		out = binary.AppendUvarint(out, uint64(m.Parts))
		var err error
		if out, err = appendPacked(out, m.Packed); err != nil {
			return nil, err
		}
	}
	return append(out, data...), nil
}

func appendCounts(out []byte, c Counts) []byte {
	for _, n := range countsOf(c) {
		out = binary.AppendUvarint(out, uint64(n))
	}
	return out
}

// countsOf lists c's counts by role, in the order entries store them.
func countsOf(c Counts) [6]int {
	return [6]int{c.User, c.Assistant, c.ToolResult, c.Extension, c.ToolCalls, c.System}
}

// extras are the record fields few versions have, as a JSON object (new ones can be added
// without a new entry format: readers ignore members they do not know).
type extras struct {
	ForkOf *extraFork   `json:"forkOf,omitempty"`
	Origin *extraOrigin `json:"origin,omitempty"`
}

type extraFork struct {
	Namespace string `json:"namespace"`
	Session   string `json:"session"`
	Agent     string `json:"agent"`
	Version   uint64 `json:"version"`
}

type extraOrigin struct {
	Via    string    `json:"via"`
	Source string    `json:"source,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// packedPrev is what a delta-coded packed record (flag2Delta) is written against: the fields of
// the record before it in the pack, as stored (before the first record: empty strings, zeros).
type packedPrev struct {
	saveID, writer, reason, dialect string
	seconds                         int64
	rawBytes                        int64
	counts                          Counts
}

// appendRecordFields writes a record's fields; prev, for a delta-coded packed record, is the
// record before it (then updated to this one), nil otherwise.
func appendRecordFields(out []byte, parent uint64, saveID, writer, reason, dialect string, created time.Time, stored int64,
	fork *ForkRef, origin *Origin, prev *packedPrev) ([]byte, error) {
	out = binary.AppendUvarint(out, parent)
	for _, s := range []string{saveID, writer, reason, dialect} {
		if len(s) > maxString {
			return nil, fmt.Errorf("%w: a record string of %d bytes (at most %d)", ErrBadRequest, len(s), maxString)
		}
	}
	if prev == nil {
		out = appendString(appendString(appendString(appendString(out, saveID), writer), reason), dialect)
		out = appendTime(out, created)
	} else {
		// Save ids of one writer often share a prefix (the Go SDK's NUIDs: their first 12 of 22).
		shared := commonPrefix(saveID, prev.saveID)
		out = appendString(binary.AppendUvarint(out, uint64(shared)), saveID[shared:])
		out = appendSame(appendSame(appendSame(out, writer, prev.writer), reason, prev.reason), dialect, prev.dialect)
		seconds := storedSeconds(created)
		out = binary.AppendUvarint(binary.AppendVarint(out, seconds-prev.seconds), uint64(created.Nanosecond()))
		prev.saveID, prev.writer, prev.reason, prev.dialect, prev.seconds = saveID, writer, reason, dialect, seconds
	}
	out = binary.AppendUvarint(out, uint64(stored))
	var x []byte
	if fork != nil || origin != nil {
		var e extras
		if fork != nil {
			e.ForkOf = &extraFork{fork.Key.Namespace, fork.Key.Session, fork.Key.Agent, fork.Version}
		}
		if origin != nil {
			e.Origin = &extraOrigin{origin.Via, origin.Source, origin.At}
		}
		var err error
		if x, err = json.Marshal(e); err != nil {
			return nil, err
		}
		if len(x) > maxExtras {
			return nil, fmt.Errorf("%w: record extras of %d bytes (at most %d)", ErrBadRequest, len(x), maxExtras)
		}
	}
	return append(binary.AppendUvarint(out, uint64(len(x))), x...), nil
}

// appendPacked writes a pack's records, delta-coded (flag2Delta): a record after the first has
// no version (it is the one before's + 1, which readers check anyway), and its message count,
// raw bytes and counts are differences from the record before's (signed varints).
func appendPacked(out []byte, packed []packedVersion) ([]byte, error) {
	out = binary.AppendUvarint(out, uint64(len(packed)))
	var prev packedPrev
	for i, p := range packed {
		r := p.Record
		hash, err := hex.DecodeString(hashHex(r.Hash))
		if err != nil || len(hash) != sha256.Size {
			return nil, fmt.Errorf("engine: version %d has hash %q", r.Version, r.Hash)
		}
		if i > 0 && r.Version != packed[i-1].Record.Version+1 {
			return nil, fmt.Errorf("engine: a pack of versions %d then %d", packed[i-1].Record.Version, r.Version)
		}
		if i == 0 {
			out = binary.AppendUvarint(out, r.Version)
		}
		out = binary.AppendVarint(out, int64(r.Counts.Messages-prev.counts.Messages))
		out = binary.AppendVarint(out, r.RawBytes-prev.rawBytes)
		out = append(out, hash...)
		before := countsOf(prev.counts)
		for j, n := range countsOf(r.Counts) {
			out = binary.AppendVarint(out, int64(n-before[j]))
		}
		if out, err = appendRecordFields(out, r.Parent, r.SaveID, r.Writer, r.Reason, r.Dialect, r.Created, r.StoredBytes, r.ForkOf, r.Origin, &prev); err != nil {
			return nil, err
		}
		prev.rawBytes, prev.counts = r.RawBytes, r.Counts
		out = binary.AppendUvarint(out, uint64(p.Piece.RawBytes))
		out = binary.BigEndian.AppendUint32(out, p.Piece.CRC)
		var flags byte
		if p.Piece.Frame {
			flags |= flagFrame
		}
		if p.Piece.Keep != nil {
			flags |= flagKeep
		}
		if len(p.Piece.Values) > 0 {
			flags |= pieceValues
		}
		out = append(out, flags)
		if p.Piece.Keep != nil {
			out = binary.AppendUvarint(out, uint64(*p.Piece.Keep))
		}
		if out, err = appendValues(out, p.Piece.Values); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendValues writes a piece's value list (nothing when empty: a flag says it is there): count,
// then per value at, size, id (32 bytes).
func appendValues(out []byte, vals []valueRef) ([]byte, error) {
	if len(vals) == 0 {
		return out, nil
	}
	out = binary.AppendUvarint(out, uint64(len(vals)))
	for _, v := range vals {
		id, err := hex.DecodeString(v.ID)
		if err != nil || len(id) != sha256.Size {
			return nil, fmt.Errorf("engine: value id %q", v.ID)
		}
		out = binary.AppendUvarint(binary.AppendUvarint(out, uint64(v.At)), uint64(v.Size))
		out = append(out, id...)
	}
	return out, nil
}

// values reads a piece's value list.
func (r *reader) values() []valueRef {
	n := r.uint("value count", min(uint64(len(r.b)), maxPacked))
	if r.err == nil && n == 0 {
		r.fail("an empty value list")
	}
	if r.err != nil {
		return nil
	}
	out := make([]valueRef, 0, n)
	for range n {
		v := valueRef{At: r.int("value at", maxSize), Size: r.int("value size", maxSize)}
		v.ID = hex.EncodeToString(r.bytes("value id", sha256.Size))
		if r.err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

func appendKey(out []byte, k Key) ([]byte, error) {
	for _, s := range []string{k.Namespace, k.Session, k.Agent} {
		if len(s) > maxString {
			return nil, fmt.Errorf("%w: a key part of %d bytes (at most %d)", ErrBadRequest, len(s), maxString)
		}
		out = appendString(out, s)
	}
	return out, nil
}

func (r *reader) key(what string) Key {
	return Key{Namespace: r.string(what), Session: r.string(what), Agent: r.string(what)}
}

func appendString(out []byte, s string) []byte {
	return append(binary.AppendUvarint(out, uint64(len(s))), s...)
}

// appendSame writes s of a delta-coded packed record: 0 when it is prev (the record before's),
// else its length + 1 then its bytes.
func appendSame(out []byte, s, prev string) []byte {
	if s == prev {
		return append(out, 0)
	}
	return append(binary.AppendUvarint(out, uint64(len(s))+1), s...)
}

// commonPrefix is how many leading bytes a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// storedSeconds is the seconds appendTime stores for t (0 for the zero time).
func storedSeconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// checkTimes refuses an entry with a time a reader would refuse (beyond ±2^40 seconds).
func checkTimes(m entryMeta) error {
	ts := []time.Time{m.Head.Created}
	if l := m.Head.Lease; l != nil {
		ts = append(ts, l.Acquired, l.Expires)
	}
	if mv := m.Head.Moved; mv != nil {
		ts = append(ts, mv.At)
	}
	for _, p := range m.Packed {
		ts = append(ts, p.Record.Created)
	}
	for _, p := range m.Head.Pins {
		ts = append(ts, p.At)
	}
	for _, t := range ts {
		if s := t.Unix(); !t.IsZero() && (s > secondsMax || s < -secondsMax) {
			return fmt.Errorf("%w: the time %s is out of range", ErrBadRequest, t)
		}
	}
	return nil
}

func appendTime(out []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(binary.AppendVarint(out, 0), 0) // 1970 exactly reads as the zero time
	}
	return binary.AppendUvarint(binary.AppendVarint(out, t.Unix()), uint64(t.Nanosecond()))
}

// reader reads an entry's fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (r *reader) uint(what string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.fail("entry field %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int(what string, max uint64) int64 { return int64(r.uint(what, max)) }

func (r *reader) bytes(what string, n uint64) []byte {
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("entry field %s is cut short", what)
	}
	if r.err != nil {
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) string(what string) string { return string(r.bytes(what, r.uint(what, maxString))) }

func (r *reader) byte(what string) byte {
	if b := r.bytes(what, 1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) crc(what string) uint32 {
	if b := r.bytes(what, 4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) time(what string) time.Time {
	if r.err != nil {
		return time.Time{}
	}
	s, n := binary.Varint(r.b)
	if n <= 0 || s > secondsMax || s < -secondsMax {
		r.fail("entry field %s", what)
		return time.Time{}
	}
	r.b = r.b[n:]
	ns := r.uint(what, 999_999_999)
	if s == 0 && ns == 0 {
		return time.Time{}
	}
	return time.Unix(s, int64(ns)).UTC()
}

// same reads what appendSame wrote: prev when 0, else a string of that length - 1.
func (r *reader) same(what string, prev string) string {
	n := r.uint(what, maxString+1)
	if r.err != nil || n == 0 {
		return prev
	}
	return string(r.bytes(what, n-1))
}

// after reads a number written as its difference from prev (a signed varint); the number must
// be within [0, max] (max at most maxSize, so that no sum overflows).
func (r *reader) after(what string, prev int64, max uint64) int64 {
	if r.err != nil {
		return 0
	}
	d, n := binary.Varint(r.b)
	if n <= 0 || d > int64(max) || d < -int64(max) || prev+d < 0 || prev+d > int64(max) {
		r.fail("entry field %s", what)
		return 0
	}
	r.b = r.b[n:]
	return prev + d
}

// timeAfter reads a time written as its seconds' difference from prevSeconds (a signed varint),
// then its nanoseconds; (0, 0) once added up is the zero time, as in time.
func (r *reader) timeAfter(what string, prevSeconds int64) time.Time {
	if r.err != nil {
		return time.Time{}
	}
	d, n := binary.Varint(r.b)
	if n <= 0 || d > 2*secondsMax || d < -2*secondsMax || prevSeconds+d > secondsMax || prevSeconds+d < -secondsMax {
		r.fail("entry field %s", what)
		return time.Time{}
	}
	r.b = r.b[n:]
	s := prevSeconds + d
	ns := r.uint(what, 999_999_999)
	if s == 0 && ns == 0 {
		return time.Time{}
	}
	return time.Unix(s, int64(ns)).UTC()
}

func (r *reader) counts(messages int) Counts {
	c := Counts{Messages: messages}
	for _, p := range []*int{&c.User, &c.Assistant, &c.ToolResult, &c.Extension, &c.ToolCalls, &c.System} {
		*p = int(r.uint("counts", maxCount))
	}
	return c
}

// recordFields reads what appendRecordFields wrote into rec (prev as it was given).
func (r *reader) recordFields(rec *Record, prev *packedPrev) {
	rec.Parent = r.uint("parent", maxCount)
	if prev == nil {
		rec.SaveID = r.string("save id")
		rec.Writer, rec.Reason, rec.Dialect = r.string("writer"), r.string("reason"), r.string("dialect")
		rec.Created = r.time("created")
	} else {
		shared := r.uint("save id", uint64(len(prev.saveID)))
		rest := r.bytes("save id", r.uint("save id", maxString-shared))
		rec.SaveID = prev.saveID[:shared] + string(rest)
		rec.Writer, rec.Reason, rec.Dialect = r.same("writer", prev.writer), r.same("reason", prev.reason), r.same("dialect", prev.dialect)
		rec.Created = r.timeAfter("created", prev.seconds)
		prev.saveID, prev.writer, prev.reason, prev.dialect, prev.seconds = rec.SaveID, rec.Writer, rec.Reason, rec.Dialect, storedSeconds(rec.Created)
	}
	rec.StoredBytes = r.int("stored bytes", maxSize)
	x := r.bytes("extras", r.uint("extras", maxExtras))
	if r.err != nil || len(x) == 0 {
		return
	}
	var e extras
	if err := json.Unmarshal(x, &e); err != nil {
		r.fail("record extras: %v", err)
		return
	}
	if f := e.ForkOf; f != nil {
		rec.ForkOf = &ForkRef{Key: Key{f.Namespace, f.Session, f.Agent}, Version: f.Version}
	}
	if o := e.Origin; o != nil {
		rec.Origin = &Origin{Via: o.Via, Source: o.Source, At: o.At}
	}
}

// decodeEntry splits an entry into its meta and data (a slice of b). It never panics: bytes that
// are not an entry are refused with ErrCorrupt (ErrUnknownFormat for another format's magic).
func decodeEntry(b []byte) (entryMeta, []byte, error) {
	var m entryMeta
	if len(b) < 6 || !bytes.Equal(b[:4], entryMagic[:]) {
		if len(b) >= 4 && bytes.Equal(b[:3], entryMagic[:3]) && b[3] != entryMagic[3] {
			return m, nil, fmt.Errorf("%w: %q (this code reads %q)", ErrUnknownFormat, b[:4], entryMagic[:])
		}
		return m, nil, fmt.Errorf("%w: not a log entry (bad magic)", ErrCorrupt)
	}
	m.Kind = entryKind(b[4] &^ kindExt)
	flags, flags2, rest := b[5], byte(0), b[6:]
	if b[4]&kindExt != 0 {
		if len(rest) == 0 {
			return m, nil, fmt.Errorf("%w: an entry cut short before its second flags byte", ErrCorrupt)
		}
		flags2, rest = rest[0], rest[1:]
		if flags2&^flags2Known != 0 {
			return m, nil, fmt.Errorf("%w: second flags %#x in an entry of kind %d", ErrCorrupt, flags2, m.Kind)
		}
	}
	if m.Kind != kindSave && m.Kind != kindState && m.Kind != kindPack && m.Kind != kindPart && m.Kind != kindFork {
		return m, nil, fmt.Errorf("%w: unknown entry kind %d", ErrCorrupt, m.Kind)
	}
	if m.Kind != kindPack && flags2&flag2Delta != 0 || m.Kind != kindSave && flags2&flag2Group != 0 ||
		m.Kind == kindPack && flags2&flag2Extra != 0 {
		return m, nil, fmt.Errorf("%w: second flags %#x in an entry of kind %d", ErrCorrupt, flags2, m.Kind)
	}
	if flags&^flagsKnown != 0 || m.Kind != kindSave && m.Kind != kindPack && flags&flagFrame != 0 ||
		m.Kind != kindSave && flags&flagKeep != 0 || m.Kind != kindPack && flags&flagOpen != 0 ||
		m.Kind != kindState && flags&flagDeletion != 0 || m.Kind != kindSave && flags&flagValues != 0 ||
		m.Kind == kindPack && flags&flagBack != 0 {
		return m, nil, fmt.Errorf("%w: flags %#x in an entry of kind %d", ErrCorrupt, flags, m.Kind)
	}
	r := &reader{b: rest}
	h := &m.Head
	h.Version = r.uint("version", MaxVersion)
	messages := int(r.uint("messages", maxCount))
	h.RawBytes = r.int("raw bytes", maxSize)
	if flags2&flag2Compact != 0 {
		h.State = fullState(r.bytes("compact state", compactStateSize(h.RawBytes)), h.RawBytes)
	} else {
		h.State = r.bytes("state", stateSize)
	}
	h.Counts = r.counts(messages)
	h.FirstVersion = r.uint("first version", MaxVersion)
	h.Pack = r.uint("pack", maxSize)
	h.TailEntries = int(r.uint("tail entries", maxCount))
	h.TailBytes = r.int("tail bytes", maxSize)
	if flags2&flag2Extra != 0 {
		h.TailExtra = int(r.uint("tail extra", maxCount))
		if r.err == nil && h.TailExtra == 0 {
			r.fail("tail extra 0 written")
		}
	}
	h.Deleted = r.uint("deleted", maxSize)
	pins := r.uint("pins", maxPins)
	for range pins {
		h.Pins = append(h.Pins, forkPin{Fork: r.key("pin"), Version: r.uint("pin version", MaxVersion), At: r.time("pin time")})
	}
	m.Deletion = flags&flagDeletion != 0
	if flags&flagBack != 0 {
		m.HasBack = true
		if b := r.uint("back", maxSize); b != 0 {
			m.Back = h.Pack + b - 1
		}
	}
	if flags&flagLease != 0 {
		h.Lease = &Lease{Owner: r.string("lease owner"), Epoch: r.uint("lease epoch", MaxVersion)}
		h.Lease.Acquired, h.Lease.Expires = r.time("lease acquired"), r.time("lease expires")
	}
	if flags&flagMoved != 0 {
		h.Moved = &Moved{To: r.string("moved to")}
		h.Moved.At = r.time("moved at")
	}
	if h.Version > 0 {
		var rec Record
		r.recordFields(&rec, nil)
		h.Parent, h.SaveID, h.Writer, h.Reason, h.Dialect = rec.Parent, rec.SaveID, rec.Writer, rec.Reason, rec.Dialect
		h.Created, h.StoredBytes, h.ForkOf, h.Origin = rec.Created, rec.StoredBytes, rec.ForkOf, rec.Origin
	}
	switch m.Kind {
	case kindSave:
		m.Piece = &pieceInfo{Messages: int(r.uint("piece messages", maxCount)), RawBytes: r.int("piece raw bytes", maxDecoded),
			Frame: flags&flagFrame != 0}
		m.Piece.CRC = r.crc("piece CRC")
		m.Parts = int(r.uint("parts", maxCount))
		if flags&flagKeep != 0 {
			keep := r.int("keep", maxSize)
			m.Piece.Keep = &keep
		}
		if flags&flagValues != 0 {
			m.Piece.Values = r.values()
		}
		if flags2&flag2Group != 0 {
			m.Group = r.group(h.Version)
		}
	case kindFork:
		m.Source = &forkPin{Fork: r.key("fork source")}
		m.Source.Version = r.uint("fork source version", MaxVersion)
	case kindPack:
		m.Open = flags&flagOpen != 0
		m.Parts = int(r.uint("parts", maxCount))
		m.Packed = r.packed(flags2&flag2Delta != 0)
		if r.err == nil && len(m.Packed) == 0 {
			r.fail("an empty pack")
		}
		for i := 1; r.err == nil && i < len(m.Packed); i++ {
			if m.Packed[i].Record.Version != m.Packed[i-1].Record.Version+1 {
				r.fail("a pack of versions %d then %d", m.Packed[i-1].Record.Version, m.Packed[i].Record.Version)
			}
		}
		if r.err == nil && m.Packed[0].Piece.Frame != (flags&flagFrame != 0) {
			r.fail("a pack whose frame flag is not its first piece's")
		}
	}
	if r.err != nil {
		return entryMeta{}, nil, r.err
	}
	if (m.Kind == kindSave || m.Kind == kindFork) && h.Version == 0 {
		return entryMeta{}, nil, fmt.Errorf("%w: a version 0 in an entry of kind %d", ErrCorrupt, m.Kind)
	}
	if (m.Kind == kindState || m.Kind == kindFork) && len(r.b) > 0 {
		return entryMeta{}, nil, fmt.Errorf("%w: %d bytes of data in an entry of kind %d", ErrCorrupt, len(r.b), m.Kind)
	}
	return m, r.b, nil
}

// packed reads a pack's versions; delta: written against each other (flag2Delta).
func (r *reader) packed(delta bool) []packedVersion {
	n := r.uint("pack count", min(uint64(len(r.b)), maxPacked))
	if r.err != nil {
		return nil
	}
	out := make([]packedVersion, 0, n)
	var prev *packedPrev
	if delta {
		prev = &packedPrev{}
	}
	for i := range n {
		var p packedVersion
		if delta && i > 0 {
			p.Record.Version = out[i-1].Record.Version + 1
			if p.Record.Version > MaxVersion {
				r.fail("packed version above %d", uint64(MaxVersion))
			}
		} else {
			p.Record.Version = r.uint("packed version", MaxVersion)
		}
		if prev == nil {
			messages := int(r.uint("packed messages", maxCount))
			p.Record.RawBytes = r.int("packed raw bytes", maxSize)
			p.Record.Hash = "sha256:" + hex.EncodeToString(r.bytes("packed hash", sha256.Size))
			p.Record.Counts = r.counts(messages)
		} else {
			messages := int(r.after("packed messages", int64(prev.counts.Messages), maxCount))
			p.Record.RawBytes = r.after("packed raw bytes", prev.rawBytes, maxSize)
			p.Record.Hash = "sha256:" + hex.EncodeToString(r.bytes("packed hash", sha256.Size))
			p.Record.Counts = Counts{Messages: messages}
			before := countsOf(prev.counts)
			for i, c := range []*int{&p.Record.Counts.User, &p.Record.Counts.Assistant, &p.Record.Counts.ToolResult,
				&p.Record.Counts.Extension, &p.Record.Counts.ToolCalls, &p.Record.Counts.System} {
				*c = int(r.after("counts", int64(before[i]), maxCount))
			}
			prev.rawBytes, prev.counts = p.Record.RawBytes, p.Record.Counts
		}
		r.recordFields(&p.Record, prev)
		p.Piece.RawBytes = r.int("packed piece", maxDecoded) // a read decodes no more (stream.go)
		p.Piece.CRC = r.crc("packed piece CRC")
		flags := r.byte("packed flags")
		if r.err != nil {
			return nil
		}
		if flags&^(flagFrame|flagKeep|pieceValues) != 0 {
			r.fail("packed piece flags %#x", flags)
			return nil
		}
		p.Piece.Frame = flags&flagFrame != 0
		if flags&flagKeep != 0 {
			keep := r.int("packed keep", maxSize)
			p.Piece.Keep = &keep
		}
		if flags&pieceValues != 0 {
			p.Piece.Values = r.values()
		}
		out = append(out, p)
	}
	return out
}

// hashHex is the hex digits of a "sha256:<hex>" hash.
func hashHex(h string) string {
	if len(h) > 7 && h[:7] == "sha256:" {
		return h[7:]
	}
	return h
}

// finish returns the "sha256:<hex>" hash a SHA-256 state of "[" + messages ends with "]".
func finish(state []byte) (string, error) {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return "", fmt.Errorf("%w: hash state: %v", ErrCorrupt, err)
	}
	h.Write([]byte{']'})
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// extendHash continues the SHA-256 of "[" + messages with piece (state nil: from the start), and
// returns the new state.
func extendHash(state, piece []byte) ([]byte, error) {
	h := sha256.New()
	if state == nil {
		h.Write([]byte{'['})
	} else if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, fmt.Errorf("%w: hash state: %v", ErrCorrupt, err)
	}
	h.Write(piece)
	return h.(encoding.BinaryMarshaler).MarshalBinary()
}

// recordOf is the record of the head version an entry's head describes.
func recordOf(key Key, h headState) (Record, error) {
	hash, err := finish(h.State)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: key, Version: h.Version, Parent: h.Parent, Hash: hash, SaveID: h.SaveID, Writer: h.Writer,
		Reason: h.Reason, Created: h.Created, RawBytes: h.RawBytes + 2, StoredBytes: h.StoredBytes, Counts: h.Counts,
		ForkOf: h.ForkOf, Origin: h.Origin, Dialect: h.Dialect}, nil
}
