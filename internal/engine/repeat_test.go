package engine_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// A save id sent again with another conversation is not that save again: it is refused with a
// *SaveIDReusedError naming the version the save id made, instead of answering that version as
// if the new conversation were stored (docs/protocol.md §4.3). The same conversation, however it
// is sent (whitespace, a whole array for an append's version), is still the duplicate.
func TestSave_SaveIDReusedForOtherContent(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first, err := save(e, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.NoError(t, err)
	second, err := save(e, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	n := entries(t, log, k)

	reused := func(req engine.SaveRequest, want engine.Record) {
		t.Helper()
		_, err := save(e, req)
		var re *engine.SaveIDReusedError
		require.ErrorAs(t, err, &re, "save id %s with other bytes", req.SaveID)
		require.ErrorIs(t, err, engine.ErrSaveIDReused)
		require.Equal(t, want.Version, re.Version)
		require.Equal(t, want.Hash, re.Hash)
		require.Contains(t, err.Error(), req.SaveID)
	}
	same := func(req engine.SaveRequest, want engine.Record) {
		t.Helper()
		s, err := save(e, req)
		require.NoError(t, err, "save id %s with the same conversation", req.SaveID)
		require.True(t, s.Duplicate)
		require.Equal(t, want.Version, s.Record.Version)
	}
	spaced := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(`},{`), []byte("},\n  {")) }

	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget() // found in the log's records, not in the cache
		}
		// A whole array: its version is no longer the head.
		reused(engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(3)}, first.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "x", Payload: []byte(`[]`)}, first.Record)
		same(engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)}, first.Record)
		same(engine.SaveRequest{Key: k, SaveID: "x", Payload: spaced(conversation(2))}, first.Record)
		// An append: more messages, fewer (the same last ones), other ones.
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 5)}, second.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(3, 4)}, second.Record)
		reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(4, 6)}, second.Record)
		same(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: spaced(array(2, 4))}, second.Record)
		same(engine.SaveRequest{Key: k, SaveID: "y", Payload: conversation(4)}, second.Record)
	}
	require.Equal(t, n, entries(t, log, k), "refusals and duplicates write nothing")

	// Once the head moved on, the append is found by its base (savedAfter) and read from there.
	third, err := save(e, engine.SaveRequest{Key: k, SaveID: "z", Base: u64(2), Payload: array(4, 6)})
	require.NoError(t, err)
	reused(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 5)}, second.Record)
	same(engine.SaveRequest{Key: k, SaveID: "y", Base: u64(1), Payload: array(2, 4)}, second.Record)
	reused(engine.SaveRequest{Key: k, SaveID: "z", Base: u64(2), Payload: array(4, 7)}, third.Record)
	head, err := e.Head(ctx, k)
	require.NoError(t, err)
	require.Equal(t, third.Record.Version, head.Version, "nothing stored past the third save")
}

// A repeat of an append's save id whose base version retention removed cannot be hashed (the
// base's messages are gone). Before, it was answered as the duplicate whatever it appended. Now
// what can still be told is: the save id's version was made onto another version than this
// repeat's base, or does not end with the messages this repeat appends, is another save
// (SaveIDReusedError), and so is one appending another number of messages than the save that made
// the version (its entry says, until it is packed); otherwise the repeat is the duplicate, and
// Saved.Unverified says it was not compared whole.
func TestSave_RepeatOfAnAppendWhoseBaseWasRemoved(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "a", Payload: conversation(2)})
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	made, err := save(e, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(2), Payload: array(4, 6)})
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "z", Base: u64(3), Payload: array(6, 8)})
	require.NoError(t, err)
	pruned, err := e.Prune(ctx, k, engine.Retention{KeepLast: 2}, now, false)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, pruned.Versions)
	type repeat struct {
		base    uint64
		payload []byte
		says    string // "" for the duplicate
	}
	check := func(cases []repeat) {
		t.Helper()
		for _, c := range cases {
			s, err := save(e, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(c.base), Payload: c.payload})
			if c.says != "" {
				var re *engine.SaveIDReusedError
				require.ErrorAs(t, err, &re, "base %d %s", c.base, c.payload)
				require.Equal(t, made.Record.Version, re.Version)
				require.Contains(t, err.Error(), c.says)
				continue
			}
			require.NoError(t, err, "base %d %s", c.base, c.payload)
			require.True(t, s.Duplicate)
			require.Equal(t, made.Record.Version, s.Record.Version)
			require.Contains(t, s.Unverified, "version 2, the base this save appends to, was removed by retention")
		}
	}
	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
		}
		check([]repeat{
			{2, array(4, 6), ""},
			{2, spacedArray(4, 6), ""},
			{2, array(5, 6), "that version's save appended 2 messages, this save appends 1"},
			{2, array(4, 7), "appended 2 messages, this save appends 3"},
			{2, array(6, 8), "does not end with the 2 messages"},
			{1, array(4, 6), "saved onto version 2, this save appends to version 1"},
		})
	}
	// Once packed, the version's entry no longer says how many messages its save appended: a
	// repeat appending fewer of the same last messages is not told apart, and is answered
	// Unverified.
	_, err = e.Pack(ctx, k, true)
	require.NoError(t, err)
	e.Forget()
	check([]repeat{
		{2, array(4, 6), ""},
		{2, array(5, 6), ""},
		{2, array(4, 7), "does not end with the 3 messages"},
		{1, array(4, 6), "saved onto version 2, this save appends to version 1"},
	})
	n := entries(t, log, k)
	// The same through CheckRepeat (a delivery again found by its stored result).
	unverified, err := e.CheckRepeat(ctx, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(2), Payload: array(4, 6), Now: now}, made.Record)
	require.NoError(t, err)
	require.NotEmpty(t, unverified)
	_, err = e.CheckRepeat(ctx, engine.SaveRequest{Key: k, SaveID: "y", Base: u64(2), Payload: array(4, 7), Now: now}, made.Record)
	require.ErrorIs(t, err, engine.ErrSaveIDReused)
	// A repeat whose base is still there is compared whole, and says nothing.
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "z", Base: u64(3), Payload: array(6, 8)})
	require.NoError(t, err)
	require.True(t, s.Duplicate)
	require.Empty(t, s.Unverified)
	require.Equal(t, n, entries(t, log, k), "refusals and duplicates write nothing")
}

func spacedArray(from, to int) []byte {
	return bytes.ReplaceAll(array(from, to), []byte(`},{`), []byte("},\n  {"))
}

// noRoom is a memory budget with no room left, as the ingest's is when a flood of repeats holds it.
type noRoom struct{}

func (noRoom) Reserve(int64) error { return errors.New("busy: no room") }
func (noRoom) Release(int64)       {}

// A repeat refused because the caller's budget has no room to read its base is answered with the
// budget's own error, and the session stays cached: the next save reads nothing to load it (it
// was forgotten, so loaded again, when the refusal went through the default branch of again).
func TestSave_RepeatRefusedForMemoryKeepsTheSessionCached(t *testing.T) {
	log := &countingLog{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "a", Payload: conversation(2)})
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "c", Base: u64(2), Payload: array(4, 6)})
	require.NoError(t, err)

	// "b" again with other messages: telling needs version 1's state, which the budget refuses.
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Base: u64(1), Payload: array(2, 5), Memory: noRoom{}})
	require.ErrorContains(t, err, "busy: no room")

	log.reads = 0
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "d", Base: u64(3), Payload: array(6, 8)})
	require.NoError(t, err)
	require.Zero(t, log.reads, "the session was dropped from the cache by a refusal about memory")
}

// heldBudget is a memory budget with room for anything, which remembers the most held at once.
type heldBudget struct{ held, peak int64 }

func (b *heldBudget) Reserve(n int64) error {
	b.held += n
	b.peak = max(b.peak, b.held)
	return nil
}
func (b *heldBudget) Release(n int64) { b.held -= n }

// A repeat's base read is reserved by the base's own size. The version its save id made may be a
// whole-array save that rewrote its parent much shorter; a repeat naming that parent as its base
// reads the parent, far larger than the version (the reservation used to be the version's size:
// short by up to the base's size).
func TestSave_RepeatReservesItsBaseReadByTheBasesSize(t *testing.T) {
	for _, packed := range []bool{false, true} {
		// Packed: version 1 is in a pack before the last one, out of the session's recent records,
		// so its size is learnt from its entries (and reserved before its conversation is built).
		e, _ := newEngine(t, 1<<20, engine.Config{})
		k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
		pack := func() {
			if packed {
				_, err := e.Pack(ctx, k, true)
				require.NoError(t, err)
			}
		}
		long, err := save(e, engine.SaveRequest{Key: k, SaveID: "long", Payload: conversation(2000)})
		require.NoError(t, err)
		pack()
		short, err := save(e, engine.SaveRequest{Key: k, SaveID: "short", Payload: conversation(2)})
		require.NoError(t, err)
		require.Equal(t, long.Record.Version, short.Record.Parent, "a rewrite of version 1, far shorter")
		pack()
		_, err = save(e, engine.SaveRequest{Key: k, SaveID: "next", Base: u64(2), Payload: array(2, 4)})
		require.NoError(t, err)
		readsBase := 2*long.Record.RawBytes + 64<<10 // what reading version 1 holds, as the engine bounds it

		for _, cold := range []bool{false, true} {
			if cold {
				e.Forget()
			}
			mem := &heldBudget{}
			_, err = save(e, engine.SaveRequest{Key: k, SaveID: "short", Base: u64(1), Payload: array(2000, 2002), Memory: mem})
			require.ErrorIs(t, err, engine.ErrSaveIDReused, "packed %v, cold %v", packed, cold)
			require.GreaterOrEqual(t, mem.peak, readsBase, "packed %v, cold %v: version 1 read (%d bytes) within what was reserved", packed, cold, long.Record.RawBytes)
			require.Zero(t, mem.held, "packed %v, cold %v: all given back", packed, cold)
		}
	}
}

// The save-id lookup (the records of the last pack and the saves after it, read once per session
// load) is outside the ingest budget: it is bounded instead, by keeping none of the entries' data
// (only their records), so what it holds is the records and one entry at a time, however large
// the pack and the saves it reads (it used to hold them all, their parts joined).
func TestSave_SaveIDLookupKeepsNoData(t *testing.T) {
	e, _ := newEngine(t, 64<<10, engine.Config{}) // entries of at most 64 KiB: large data goes in parts
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "big", Payload: conversation(2000)})
	require.NoError(t, err)
	_, err = e.Pack(ctx, k, true)
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "bigger", Payload: conversation(4000)})
	require.NoError(t, err)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "small", Base: u64(2), Payload: array(4000, 4002)})
	require.NoError(t, err)

	records, data, err := engine.SaveIDLookupHolds(ctx, e, k)
	require.NoError(t, err)
	require.Equal(t, 3, records, "the pack's version and the two saves after it")
	require.Zero(t, data, "no entry data kept, only records")

	e.Forget() // and a repeat is still found by it
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "bigger", Payload: conversation(4000)})
	require.NoError(t, err)
	require.True(t, s.Duplicate)
	require.Equal(t, uint64(2), s.Record.Version)
}
