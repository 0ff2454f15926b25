package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testEntries(t testing.TB) map[string]struct {
	meta entryMeta
	data string
} {
	state, err := extendHash(nil, []byte("x"))
	require.NoError(t, err)
	keep := int64(7)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rec := headState{Version: 3, RawBytes: 1234, State: state, Counts: Counts{Messages: 9, User: 4, Assistant: 4, ToolResult: 1, ToolCalls: 1},
		Parent: 2, SaveID: "id-3", Writer: "w", Reason: "turn", Dialect: "anthropic", Created: created, StoredBytes: 77,
		FirstVersion: 2, Pack: 12, TailEntries: 3, TailBytes: 300, Deleted: 4}
	forked := rec
	forked.ForkOf = &ForkRef{Key: Key{"n", "s", "a"}, Version: 5}
	forked.Origin = &Origin{Via: "migrate", Source: "east", At: created}
	leased := rec
	leased.Lease = &Lease{Epoch: 2, Owner: "host-a", Acquired: created, Expires: created.Add(time.Minute)}
	leased.Moved = &Moved{To: "west", At: created}
	hash := "sha256:" + strings.Repeat("ab", 32)
	return map[string]struct {
		meta entryMeta
		data string
	}{
		"save": {entryMeta{Kind: kindSave, Head: rec, Piece: &pieceInfo{Messages: 2, RawBytes: 300, Frame: true, CRC: 0xdeadbeef}}, "zstd bytes"},
		"save with parts, extras": {entryMeta{Kind: kindSave, Head: forked, Parts: 3,
			Piece: &pieceInfo{Messages: 2, RawBytes: 300, CRC: 1}}, "z"},
		"rewrite with lease and seal": {entryMeta{Kind: kindSave, Head: leased, Piece: &pieceInfo{Messages: 1, RawBytes: 3, Keep: &keep,
			Values: []valueRef{{At: 1, Size: 40000, ID: strings.Repeat("0f", 32)}, {At: 50000, Size: 33000, ID: strings.Repeat("1e", 32)}}}}, "z"},
		"state":       {entryMeta{Kind: kindState, Head: leased}, ""},
		"empty state": {entryMeta{Kind: kindState, Head: headState{State: state, Lease: &Lease{Epoch: 1}}}, ""},
		"deletion":    {entryMeta{Kind: kindState, Deletion: true, Head: headState{State: state, Deleted: 9, Lease: &Lease{Epoch: 3}}}, ""},
		"fork":        {entryMeta{Kind: kindFork, Head: forked, Source: &forkPin{Fork: Key{"n", "src", "a"}, Version: 7}}, ""},
		"pinned state": {entryMeta{Kind: kindState, Head: func() headState {
			h := rec
			h.Pins = []forkPin{{Fork: Key{"n", "f1", "a"}, Version: 3}, {Fork: Key{"n", "f2", "a"}, Version: 1}}
			return h
		}()}, ""},
		"part": {entryMeta{Kind: kindPart, Head: rec}, "part bytes"},
		// States that are those of their rawBytes are stored compact (state.go), the others
		// (above: the state of "[x" in a head of 1,234 bytes) whole.
		"save, compact state": {entryMeta{Kind: kindSave, Head: compactHead(t, rec, 1234), Piece: &pieceInfo{Messages: 2, RawBytes: 300, CRC: 7},
			HasBack: true, Back: 20}, "zstd bytes"},
		"empty state, compact":  {entryMeta{Kind: kindState, Head: compactHead(t, headState{Lease: &Lease{Epoch: 1}}, 0)}, ""},
		"leased state, compact": {entryMeta{Kind: kindState, Head: compactHead(t, leased, 62)}, ""},
		"pack, compact state": {entryMeta{Kind: kindPack, Head: compactHead(t, rec, 127), Packed: []packedVersion{
			{Record: Record{Version: 3, SaveID: "a", Created: created, Counts: Counts{Messages: 9}, RawBytes: 129, Hash: hash},
				Piece: pieceInfo{RawBytes: 127, Frame: true, CRC: 5}}}}, "frame"},
		"open pack": {entryMeta{Kind: kindPack, Head: rec, Open: true, Parts: 1, Packed: []packedVersion{
			{Record: Record{Version: 8, SaveID: "a", Created: created, Counts: Counts{Messages: 18}, RawBytes: 900, Hash: hash, Reason: "turn"},
				Piece: pieceInfo{RawBytes: 50, Frame: true, CRC: 5}},
			{Record: Record{Version: 9, Parent: 8, SaveID: "b", Created: created, Counts: Counts{Messages: 20, System: 1}, RawBytes: 1001, Hash: hash,
				ForkOf: forked.ForkOf, Origin: forked.Origin}, Piece: pieceInfo{RawBytes: 99, Keep: &keep,
				Values: []valueRef{{At: 9, Size: 40000, ID: strings.Repeat("0f", 32)}}}}}}, "frames"},
		// A group entry (group.go): versions 1 and 2 before its head version 3.
		"group": {entryMeta{Kind: kindSave, Head: withExtra(rec, 2), Piece: &pieceInfo{Messages: 2, RawBytes: 300, CRC: 3},
			HasBack: true, Back: 20, Group: []packedVersion{
				{Record: Record{Version: 1, SaveID: "g-1", Writer: "w", Created: created, Counts: Counts{Messages: 2, User: 1}, RawBytes: 90, Hash: hash},
					Piece: pieceInfo{Messages: 2, RawBytes: 88, Frame: true, CRC: 1}},
				{Record: Record{Version: 2, Parent: 1, SaveID: "g-2", Writer: "w", Created: created, Counts: Counts{Messages: 4, User: 2}, RawBytes: 200, Hash: hash},
					Piece: pieceInfo{Messages: 2, RawBytes: 109, CRC: 2, Values: []valueRef{{At: 9, Size: 40000, ID: strings.Repeat("0f", 32)}}}}}}, "zstd bytes"},
		"state after a group": {entryMeta{Kind: kindState, Head: withExtra(leased, 7)}, ""},
	}
}

// withExtra is h with TailExtra n.
func withExtra(h headState, n int) headState {
	h.TailExtra = n
	return h
}

// compactHead is h with the state of a head of n raw bytes.
func compactHead(t testing.TB, h headState, n int64) headState {
	state, err := extendHash(nil, []byte(strings.Repeat("m", int(n))))
	require.NoError(t, err)
	h.RawBytes, h.State = n, state
	return h
}

// A head's state is stored compact when it is that of "[" and the head's rawBytes (state.go):
// 32 + (rawBytes + 1) mod 64 bytes instead of 108, behind the second flags byte; it reads back
// byte for byte, for every length of pending input. A state that is not its head's is stored
// whole, without the second flags byte, as entries were before.
func TestEntry_CompactState(t *testing.T) {
	for n := int64(0); n < 200; n++ {
		h := compactHead(t, headState{Version: 1, SaveID: "s"}, n)
		m := entryMeta{Kind: kindSave, Head: h, Piece: &pieceInfo{Messages: 1, RawBytes: n}}
		b, err := encodeEntry(m, nil)
		require.NoError(t, err)
		require.Equal(t, byte(kindSave)|kindExt, b[4], "raw %d", n)
		require.Equal(t, byte(flag2Compact), b[6], "raw %d", n)
		whole := m
		whole.Head.State = append([]byte(nil), h.State...)
		whole.Head.RawBytes = n + 64 // the same pending input, another length: stored whole
		wb, err := encodeEntry(whole, nil)
		require.NoError(t, err)
		require.Equal(t, byte(kindSave), wb[4])
		require.Equal(t, stateSize-shaChain-int((n+1)%64)-1, len(wb)-len(b)-varintGrowth(n, n+64), "raw %d", n)
		got, _, err := decodeEntry(b)
		require.NoError(t, err, "raw %d", n)
		require.Equal(t, h.State, got.Head.State, "raw %d", n)
		got, _, err = decodeEntry(wb)
		require.NoError(t, err)
		require.Equal(t, h.State, got.Head.State)
	}
	save, err := encodeEntry(testEntries(t)["save, compact state"].meta, nil)
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"unknown second flag": append(append([]byte(nil), save[:6]...), append([]byte{0x02}, save[7:]...)...),
		"cut before flags2":   save[:6],
		"compact state cut":   save[:len(save)-60],
	} {
		_, _, err := decodeEntry(b)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}

// varintGrowth is how many bytes longer b's varint is than a's.
func varintGrowth(a, b int64) int {
	size := func(v int64) int { return len(binary.AppendUvarint(nil, uint64(v))) }
	return size(b) - size(a)
}

// Every entry reads back as written; bad stored bytes are refused with ErrCorrupt (or
// ErrUnknownFormat), never a panic.
func TestEntry_RoundTripAndRefusals(t *testing.T) {
	for name, e := range testEntries(t) {
		b, err := encodeEntry(e.meta, []byte(e.data))
		require.NoError(t, err, name)
		m, data, err := decodeEntry(b)
		require.NoError(t, err, name)
		require.Equal(t, e.meta, m, name)
		require.Equal(t, e.data, string(data), name)
		// Every cut of its meta is refused (a cut inside the data reads as shorter data).
		for n := range len(b) - len(e.data) {
			if e.meta.Kind == kindPart && n == len(b)-len(e.data) {
				continue
			}
			_, _, err := decodeEntry(b[:n])
			require.ErrorIs(t, err, ErrCorrupt, "%s cut to %d bytes", name, n)
		}
	}
	save, err := encodeEntry(testEntries(t)["save"].meta, nil)
	require.NoError(t, err)
	state, err := encodeEntry(testEntries(t)["state"].meta, nil)
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"empty": nil, "bad magic": append([]byte("CPKT"), save[4:]...),
		"unknown kind":            append([]byte("CPL2\x09"), save[5:]...),
		"unknown flag":            append([]byte("CPL2\x01\x80"), save[6:]...),
		"frame flag on a state":   append([]byte("CPL2\x02\x01"), state[6:]...),
		"keep flag on a pack":     append([]byte("CPL2\x04\x02"), state[6:]...),
		"deletion flag on a save": append([]byte("CPL2\x01\x21"), save[6:]...),
		"version above the max":   append([]byte("CPL2\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), save[7:]...),
		"state with data":         append(state, 'x'),
		"frame flag on a fork":    append([]byte("CPL2\x03\x01"), state[6:]...),
		"save of version 0":       append([]byte("CPL2\x01\x01\x00"), save[7:]...),
	} {
		_, _, err := decodeEntry(b)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
	_, _, err = decodeEntry(append([]byte("CPL1"), save[4:]...))
	require.ErrorIs(t, err, ErrUnknownFormat, "the prototype's format")
	_, err = encodeEntry(entryMeta{Kind: kindSave, Piece: &pieceInfo{}}, nil)
	require.Error(t, err, "an entry without a hash state is not written")
}

// FuzzDecodeEntry: whatever the bytes, decoding returns an entry or a typed error, never a panic,
// and an entry it returns encodes back to bytes that decode to the same entry.
func FuzzDecodeEntry(f *testing.F) {
	for _, e := range testEntries(f) {
		b, err := encodeEntry(e.meta, []byte(e.data))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, data, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrUnknownFormat) {
				require.ErrorIs(t, err, ErrCorrupt)
			}
			return
		}
		again, err := encodeEntry(m, data)
		if err != nil {
			return // e.g. a record string the writer refuses: never written, but read safely
		}
		m2, data2, err := decodeEntry(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
		require.Equal(t, data, data2)
	})
}

func TestEntry_TimesOutOfRange(t *testing.T) {
	e := testEntries(t)["state"]
	e.meta.Head.Lease.Expires = time.Unix(secondsMax+1, 0)
	_, err := encodeEntry(e.meta, nil)
	require.ErrorIs(t, err, ErrBadRequest)
	e.meta.Head.Lease.Expires = time.Unix(secondsMax, 999_999_999).UTC()
	b, err := encodeEntry(e.meta, nil)
	require.NoError(t, err)
	m, _, err := decodeEntry(b)
	require.NoError(t, err)
	require.Equal(t, e.meta.Head.Lease.Expires, m.Head.Lease.Expires)
}

// Packs written before delta-coded records (testdata/packs-before-delta.hex: the entries "pack,
// compact state" and "open pack" of testEntries as the code before s19-disk encoded them) read as
// they did: the format change is additive.
func TestEntry_PacksBeforeDeltaRead(t *testing.T) {
	raw, err := os.ReadFile("testdata/packs-before-delta.hex")
	require.NoError(t, err)
	lines := strings.Fields(string(raw))
	require.Len(t, lines, 2)
	for i, name := range []string{"pack, compact state", "open pack"} {
		b, err := hex.DecodeString(lines[i])
		require.NoError(t, err)
		require.Zero(t, b[4]&kindExt != 0 && b[6]&flag2Delta != 0, name)
		m, data, err := decodeEntry(b)
		require.NoError(t, err, name)
		e := testEntries(t)[name]
		require.Equal(t, e.meta, m, name)
		require.Equal(t, e.data, string(data), name)
		again, err := encodeEntry(m, data)
		require.NoError(t, err)
		if len(m.Packed) > 1 {
			require.Less(t, len(again), len(b), "%s: written again, delta-coded", name)
		}
	}
}

// A pack's records are written against each other: a record after the first carries no
// version, and a writer, reason or dialect it shares with the one before costs a byte, its time
// a few. Whatever changes from one record to the next (back to empty, a time before the one
// before, the zero time) reads back as written.
func TestEntry_PackedRecordsDeltaCoded(t *testing.T) {
	hash := "sha256:" + strings.Repeat("cd", 32)
	at := time.Date(2026, 11, 24, 6, 0, 0, 123, time.UTC)
	recs := []Record{
		{Version: 40, Writer: "host-a/4242", Reason: "turn", Created: at},
		{Version: 41, Writer: "host-a/4242", Reason: "turn", Created: at.Add(time.Second)},
		{Version: 42, Writer: "", Reason: "turn", Dialect: "anthropic", Created: at.Add(-time.Hour)},
		{Version: 43, Writer: "host-b/1", Reason: "", Dialect: "anthropic"}, // the zero time
		{Version: 44, Writer: "host-b/1", Created: time.Unix(-secondsMax, 5).UTC()},
		{Version: 45, Writer: "host-b/1", Created: time.Unix(secondsMax, 0).UTC()},
		{Version: 46, Created: time.Unix(0, 1).UTC()},
	}
	var packed []packedVersion
	for i, r := range recs {
		r.SaveID, r.Hash, r.RawBytes, r.Counts = fmt.Sprintf("save-%d", i), hash, int64(10+i), Counts{Messages: i, User: 30 - i, ToolCalls: 3 * i}
		packed = append(packed, packedVersion{Record: r, Piece: pieceInfo{RawBytes: 10, CRC: uint32(i), Frame: i == 0}})
	}
	state, err := extendHash(nil, []byte("x"))
	require.NoError(t, err)
	m := entryMeta{Kind: kindPack, Head: headState{Version: 46, RawBytes: 5, State: state}, Packed: packed}
	b, err := encodeEntry(m, []byte("data"))
	require.NoError(t, err)
	require.Equal(t, byte(kindPack)|kindExt, b[4])
	require.Equal(t, byte(flag2Delta), b[6], "a state that is not its head's, records delta-coded")
	got, data, err := decodeEntry(b)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Equal(t, "data", string(data))

	// Save ids that share a prefix with the one before, or are a prefix of it, or empty.
	ids := append([]packedVersion(nil), packed...)
	for i, id := range []string{"abc", "abcdef", "ab", "ab", "", "xyz", "xyzé"} {
		ids[i].Record.SaveID = id
	}
	b, err = encodeEntry(entryMeta{Kind: kindPack, Head: m.Head, Packed: ids}, nil)
	require.NoError(t, err)
	got, _, err = decodeEntry(b)
	require.NoError(t, err)
	require.Equal(t, ids, got.Packed)
	// A record claiming more of the save id before it than there is is refused: "ab" then "ab"
	// is written as 2 shared bytes and an empty rest; make it 3.
	at2 := bytes.Index(b, append([]byte{2, 0}, appendSame(nil, recs[3].Writer, recs[2].Writer)...)) // shared 2, rest "", then its writer
	require.GreaterOrEqual(t, at2, 0)
	bad := append([]byte(nil), b...)
	bad[at2] = 3
	_, _, err = decodeEntry(bad)
	require.ErrorIs(t, err, ErrCorrupt, "a shared prefix longer than the save id before")

	// The same record twice more costs its save id (less the prefix it shares with the one
	// before), hash, counts and piece, not its writer, reason, dialect or version again.
	one, err := appendPacked(nil, packed[:2])
	require.NoError(t, err)
	two, err := appendPacked(nil, packed[:1])
	require.NoError(t, err)
	first, second := len(two)-1, len(one)-len(two) // less the count's byte
	saved := 1 + len(recs[1].Writer) + len(recs[1].Reason) + len(binary.AppendVarint(nil, at.Unix())) - 1 +
		len("save-") // "save-1" after "save-0": its prefix shared
	require.Equal(t, saved, first-second, "first record %d bytes, second %d", first, second)

	// Versions that do not follow each other are not written; bad delta bytes are refused.
	gap := append([]packedVersion(nil), packed...)
	gap[3].Record.Version = 50
	_, err = encodeEntry(entryMeta{Kind: kindPack, Head: m.Head, Packed: gap}, nil)
	require.Error(t, err)
	_, _, err = decodeEntry(deltaPack(t, time.Unix(secondsMax-5, 0).UTC(), time.Unix(secondsMax-1, 0).UTC(), 0))
	require.NoError(t, err, "the times as written")
	save, err := encodeEntry(testEntries(t)["save, compact state"].meta, nil)
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"delta flag on a save": append(append([]byte(nil), save[:6]...), append([]byte{flag2Compact | flag2Delta}, save[7:]...)...),
		"time past the max":    deltaPack(t, time.Unix(secondsMax-5, 0).UTC(), time.Unix(secondsMax-1, 0).UTC(), 2),
		"time before the min":  deltaPack(t, time.Unix(-secondsMax+5, 0).UTC(), time.Unix(-secondsMax+1, 0).UTC(), -2),
	} {
		_, _, err := decodeEntry(bad)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
	// A difference that takes a number below 0 or past its maximum is refused, never wrapped.
	for _, c := range []struct{ prev, diff int64 }{{3, -4}, {maxSize, 1}, {0, maxSize + 1}, {maxSize, maxSize}} {
		r := &reader{b: binary.AppendVarint(nil, c.diff)}
		r.after("n", c.prev, maxSize)
		require.ErrorIs(t, r.err, ErrCorrupt, "%d then %+d", c.prev, c.diff)
	}
}

// deltaPack is a delta-coded pack of two records created at a and b (b's nanoseconds
// 987654321, which mark where its time is), the second's seconds difference moved by shift.
func deltaPack(t *testing.T, a, b time.Time, shift int64) []byte {
	state, err := extendHash(nil, []byte("x"))
	require.NoError(t, err)
	hash := "sha256:" + strings.Repeat("cd", 32)
	const ns = 987654321
	b = b.Add(ns)
	m := entryMeta{Kind: kindPack, Head: headState{Version: 2, RawBytes: 5, State: state}, Packed: []packedVersion{
		{Record: Record{Version: 1, SaveID: "a", Hash: hash, Created: a}, Piece: pieceInfo{Frame: true}},
		{Record: Record{Version: 2, SaveID: "b", Hash: hash, Created: b}},
	}}
	out, err := encodeEntry(m, nil)
	require.NoError(t, err)
	diff := binary.AppendUvarint(binary.AppendVarint(nil, b.Unix()-a.Unix()), ns)
	i := bytes.LastIndex(out, diff)
	require.GreaterOrEqual(t, i, 0)
	moved := binary.AppendUvarint(binary.AppendVarint(nil, b.Unix()-a.Unix()+shift), ns)
	return append(append(append([]byte(nil), out[:i]...), moved...), out[i+len(diff):]...)
}
