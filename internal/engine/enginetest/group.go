package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
)

// RunGroups runs the group commit scenarios (Engine.SaveGroup, docs/format.md §8.15m) on l: k
// saves of one session stored as one entry, each version restorable byte for byte (Read and
// ReadZstd) from a warm and from a cold engine, listed with its own save id, a retried group
// answered as duplicates without a write, a refusal in the middle of a group, a fork of a version
// inside a group, packs after groups and a tail of groups after a pack. The messages are the
// corpus's (testdata/corpus/pi_before_compaction.json, read from ../../testdata: the callers'
// packages are two directories below the module). Each scenario uses a namespace of its own.
func RunGroups(t *testing.T, l engine.Log) {
	msgs := corpusMessages(t)
	for _, sc := range []struct {
		name string
		fn   func(t *testing.T, l engine.Log, k engine.Key, g *groups)
	}{
		{"EightAppends", groupEightAppends},
		{"RetriedGroup", groupRetried},
		{"RefusalInTheMiddle", groupRefusalInTheMiddle},
		{"ForkInsideAGroup", groupFork},
		{"PacksAndTails", groupPacksAndTails},
		{"TailAfterOnePack", groupTailAfterOnePack},
		{"LongTailAndLeases", groupLongTailAndLeases},
		{"WholeArrays", groupWholeArrays},
		{"RetentionCopyDelete", groupRetentionCopyDelete},
		{"TailsPackedOpen", groupTailsPackedOpen},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.fn(t, l, engine.Key{Namespace: "group-" + sc.name, Session: "s", Agent: "a"}, &groups{msgs: msgs})
		})
	}
}

// groupTailsPackedOpen: a tail written in groups is packed open (docs/format.md §8.15s): the
// pack joins the group entries' stored bytes (flag bit 3), nothing decoded or compressed again. A
// crash between the pack's append and its deletes (a Log whose Delete fails) leaves the packed
// entries, which readers skip and the next pack deletes; a group sent again is duplicates; single
// saves after an open pack start a frame of their own, so their tail is compressed again (not
// open). Every version is read back from the engine that wrote it and from a cold one.
func groupTailsPackedOpen(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	cfg := engine.Config{PackEntries: 16}
	crashing := engine.New(failingDeletes{l}, cfg)
	for v := uint64(0); v < 24; v += 8 {
		for i, r := range crashing.SaveGroup(ctx, g.appends(k, "g", v, v+8)) {
			require.NoError(t, r.Err, "save %d of the group at %d", i, v)
		}
	}
	_, err := crashing.Pack(ctx, k, true)
	require.ErrorIs(t, err, errDeletes)
	require.Equal(t, []bool{true}, packsOf(t, l, k), "one pack, open")
	require.Equal(t, 4, Entries(t, l, k), "the 3 group entries, not deleted, and the pack")
	id := func(v uint64) string {
		if v > 40 {
			return fmt.Sprint("s-", v)
		}
		return fmt.Sprint("g-", v)
	}
	g.checkAll(t, engine.New(l, cfg), k, 1, 24, id)

	// Two groups more make the next pack due: open too, and it deletes what the crash left.
	e := engine.New(l, cfg)
	g.saveGroup(t, e, g.appends(k, "g", 24, 32))
	g.saveGroup(t, e, g.appends(k, "g", 32, 40))
	require.Equal(t, []bool{true, true}, packsOf(t, l, k))
	EntriesGone(t, l, k, 2) // the second pack deleted its 2 entries and the 3 the crash left
	for i, r := range e.SaveGroup(ctx, g.appends(k, "g", 8, 16)) {
		require.NoError(t, r.Err)
		require.True(t, r.Saved.Duplicate, "save %d of a group sent again", i)
		require.Equal(t, uint64(9+i), r.Saved.Record.Version)
	}
	require.Equal(t, 2, Entries(t, l, k), "duplicates write nothing")

	// Single saves after the open pack, turn by turn: their tail is compressed again.
	for v := uint64(40); v < 56; v++ {
		g.saveGroup(t, e, g.appends(k, "s", v, v+1))
	}
	require.Equal(t, []bool{true, true, false}, packsOf(t, l, k))
	g.checkAll(t, e, k, 1, 56, id)
	g.checkAll(t, engine.New(l, cfg), k, 1, 56, id)
}

// failingDeletes is a Log whose Delete fails, as a crash between a pack's append and its deletes.
type failingDeletes struct{ engine.Log }

var errDeletes = errors.New("deletes fail (a crash)")

func (failingDeletes) Delete(context.Context, engine.Key, ...uint64) error { return errDeletes }

// packsOf says, for each pack entry on k's log, oldest first, whether it is open: its stored
// bytes, per docs/format.md §8.3.1, are the magic CPL2, the kind (4, bit 7 an extension) and the
// flags (bit 3: open).
func packsOf(t *testing.T, l engine.Log, k engine.Key) []bool {
	t.Helper()
	var open []bool
	require.NoError(t, l.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		require.True(t, len(en.Data) > 6 && string(en.Data[:4]) == "CPL2", "entry %d", en.Seq)
		if en.Data[4]&0x7f == 4 {
			open = append(open, en.Data[5]&(1<<3) != 0)
		}
		return true
	}))
	return open
}

// corpusMessages returns the corpus conversation's messages, each in canonical form.
func corpusMessages(t *testing.T) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	out := make([][]byte, len(c.Messages))
	for i := range c.Messages {
		out[i] = c.Span(i, i+1)
	}
	return out
}

// groups builds saves of the corpus: version v holds the first 2v messages (2 per save, as an
// agent's turn appends them).
type groups struct{ msgs [][]byte }

// array is the JSON array of messages from..to-1.
func (g *groups) array(from, to int) []byte {
	out := []byte{'['}
	for i := from; i < to; i++ {
		if i > from {
			out = append(out, ',')
		}
		out = append(out, g.msgs[i]...)
	}
	return append(out, ']')
}

// version is the conversation of version v.
func (g *groups) version(v uint64) []byte { return g.array(0, int(2*v)) }

// appends are the saves making versions from+1..to, each appending 2 messages onto the one before
// (Base), with save ids named by id and v.
func (g *groups) appends(k engine.Key, id string, from, to uint64) []engine.SaveRequest {
	var out []engine.SaveRequest
	for v := from + 1; v <= to; v++ {
		out = append(out, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("%s-%d", id, v), Base: U64(v - 1),
			Payload: g.array(int(2*(v-1)), int(2*v)), Writer: "agent-" + id, Reason: fmt.Sprint("turn ", v), Now: Now})
	}
	return out
}

// saveGroup saves reqs as a group, requires every save to be stored as the next version, and
// packs when one is due, as the daemon does after answering.
func (g *groups) saveGroup(t *testing.T, e *engine.Engine, reqs []engine.SaveRequest) {
	t.Helper()
	res := e.SaveGroup(ctx, reqs)
	require.Len(t, res, len(reqs))
	for i, r := range res {
		require.NoError(t, r.Err, "save %d of the group", i)
		require.False(t, r.Saved.Duplicate, "save %d of the group", i)
		require.Equal(t, *reqs[i].Base+1, r.Saved.Record.Version)
		require.Equal(t, reqs[i].SaveID, r.Saved.Record.SaveID)
		require.Equal(t, hash(g.version(r.Saved.Record.Version)), r.Saved.Record.Hash, "save %d of the group", i)
		if r.Saved.PackDue {
			_, err := e.Pack(ctx, reqs[0].Key, false)
			require.NoError(t, err)
		}
	}
}

// checkAll reads every version first..head of k (Read, verified, and ReadZstd, decoded) and checks
// the history: each version byte for byte, its record's save id the one ids names.
func (g *groups) checkAll(t *testing.T, e *engine.Engine, k engine.Key, first, head uint64, id func(v uint64) string) {
	t.Helper()
	for v := first; v <= head; v++ {
		got, rec, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, v, rec.Version)
		require.True(t, string(g.version(v)) == string(got), "version %d is not byte-identical", v)
		require.Equal(t, id(v), rec.SaveID, "version %d", v)
		z, zrec, err := e.ReadZstd(ctx, k, v)
		require.NoError(t, err, "ReadZstd of version %d", v)
		require.Equal(t, rec, zrec)
		plain, err := decoder.DecodeAll(z, nil)
		require.NoError(t, err, "ReadZstd of version %d", v)
		require.True(t, string(g.version(v)) == string(plain), "ReadZstd of version %d is not byte-identical", v)
		r, err := e.Version(ctx, k, v)
		require.NoError(t, err)
		require.Equal(t, rec, r)
	}
	all, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, all, int(head-first+1))
	for i, r := range all {
		require.Equal(t, first+uint64(i), r.Version)
		require.Equal(t, id(r.Version), r.SaveID)
		require.Equal(t, hash(g.version(r.Version)), r.Hash)
	}
	CheckHistory(t, e, k, first, head)
}

// groupEightAppends: 3 versions saved one by one, then a group of 8 appends of 2 corpus messages
// each: one entry more, 8 versions, each with its own save id, writer, reason and hash; read from
// this engine, then from a new one (its cache cold, as after a restart).
func groupEightAppends(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	for _, req := range g.appends(k, "one", 0, 3) {
		_, err := e.Save(ctx, req)
		require.NoError(t, err)
	}
	before := Entries(t, l, k)
	reqs := g.appends(k, "group", 3, 11)
	g.saveGroup(t, e, reqs)
	require.Equal(t, before+1, Entries(t, l, k), "a group of 8 saves is one entry")
	id := func(v uint64) string {
		if v <= 3 {
			return fmt.Sprint("one-", v)
		}
		return fmt.Sprint("group-", v)
	}
	g.checkAll(t, e, k, 1, 11, id)
	for v := uint64(4); v <= 11; v++ {
		r, err := e.Version(ctx, k, v)
		require.NoError(t, err)
		require.Equal(t, "agent-group", r.Writer)
		require.Equal(t, fmt.Sprint("turn ", v), r.Reason)
		require.Equal(t, v-1, r.Parent)
	}
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 11, id)
	// A save after the group, as Save writes it, and the group after it read back.
	_, err := e.Save(ctx, g.appends(k, "group", 11, 12)[0])
	require.NoError(t, err)
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 12, id)
}

// groupRetried: a group sent again whole (its answer lost) is 8 duplicates, each of its own
// version, and writes nothing; from the engine that wrote it and from a cold one, whose records
// of the tail are read from the log; and a group whose first saves are stored and the rest new
// stores only the rest.
func groupRetried(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	reqs := g.appends(k, "g", 0, 8)
	g.saveGroup(t, e, reqs)
	n := Entries(t, l, k)
	for _, en := range []*engine.Engine{e, engine.New(l, engine.Config{})} {
		res := en.SaveGroup(ctx, reqs)
		for i, r := range res {
			require.NoError(t, r.Err, "save %d", i)
			require.True(t, r.Saved.Duplicate, "save %d", i)
			require.Equal(t, uint64(i+1), r.Saved.Record.Version)
		}
		require.Equal(t, n, Entries(t, l, k), "a retried group writes nothing")
	}
	more := append(g.appends(k, "g", 4, 8), g.appends(k, "g", 8, 12)...)
	res := e.SaveGroup(ctx, more)
	for i, r := range res {
		require.NoError(t, r.Err, "save %d", i)
		require.Equal(t, i < 4, r.Saved.Duplicate, "save %d", i)
		require.Equal(t, uint64(i+5), r.Saved.Record.Version)
	}
	require.Equal(t, n+1, Entries(t, l, k))
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 12, func(v uint64) string { return fmt.Sprint("g-", v) })
}

// groupRefusalInTheMiddle: a group of 8 whose 4th save is not JSON: saves 1-3 stored (one entry),
// the 4th refused as invalid, 5-8 refused as conflicts without being stored; what was stored
// before the group is untouched.
func groupRefusalInTheMiddle(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	g.saveGroup(t, e, g.appends(k, "first", 0, 2))
	n := Entries(t, l, k)
	reqs := g.appends(k, "g", 2, 10)
	reqs[3].Payload = []byte(`[{"role":"user","content":"no end`)
	res := e.SaveGroup(ctx, reqs)
	require.Len(t, res, 8)
	for i := range 3 {
		require.NoError(t, res[i].Err)
		require.Equal(t, uint64(i+3), res[i].Saved.Record.Version)
	}
	var ve *codec.ValidationError
	require.True(t, errors.As(res[3].Err, &ve), "save 4: %v", res[3].Err)
	for i := 4; i < 8; i++ {
		require.ErrorIs(t, res[i].Err, engine.ErrVersionConflict, "save %d", i+1)
		require.ErrorContains(t, res[i].Err, "an earlier save of the group was refused")
	}
	require.Equal(t, n+1, Entries(t, l, k))
	head, err := e.Head(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(5), head.Version)
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 5, func(v uint64) string {
		if v <= 2 {
			return fmt.Sprint("first-", v)
		}
		return fmt.Sprint("g-", v)
	})
	// The rest, sent again correctly, continues the session.
	g.saveGroup(t, e, g.appends(k, "g", 5, 10))
	require.Equal(t, n+2, Entries(t, l, k))
}

// groupFork: a fork of version 5, inside a group of versions 2-9, reads that version (through its
// source, then from its own pack once packed), and the source's versions all read after.
func groupFork(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	g.saveGroup(t, e, g.appends(k, "one", 0, 1))
	g.saveGroup(t, e, g.appends(k, "g", 1, 9))
	to := engine.Key{Namespace: k.Namespace, Session: "fork", Agent: k.Agent}
	saved, err := e.Fork(ctx, engine.ForkRequest{From: k, Version: 5, To: to, SaveID: "fork", Now: Now})
	require.NoError(t, err)
	require.Equal(t, hash(g.version(5)), saved.Record.Hash)
	for _, pack := range []bool{false, true} {
		if pack {
			_, err := e.Pack(ctx, to, true)
			require.NoError(t, err)
		}
		got, rec, err := engine.New(l, engine.Config{}).Read(ctx, to, 0, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, uint64(1), rec.Version)
		require.True(t, string(g.version(5)) == string(got), "the fork of version 5 (packed: %v)", pack)
	}
	g.checkAll(t, e, k, 1, 9, func(v uint64) string {
		if v == 1 {
			return "one-1"
		}
		return fmt.Sprint("g-", v)
	})
}

// groupPacksAndTails: small packs (8 versions: a group of 8 makes one due), groups of several
// sizes, packed as save entries are; versions inside groups read from the packs and from the tail
// after them (a tail of few entries holding many versions: the last pack holds an older version
// than one per entry says), deep in history and at the head, warm and cold.
func groupPacksAndTails(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	cfg := engine.Config{PackEntries: 8}
	e := engine.New(l, cfg)
	v := uint64(0)
	for _, size := range []uint64{3, 8, 1, 5, 7, 2, 6, 4} {
		g.saveGroup(t, e, g.appends(k, "g", v, v+size))
		v += size
	}
	id := func(v uint64) string { return fmt.Sprint("g-", v) }
	g.checkAll(t, e, k, 1, v, id)
	g.checkAll(t, engine.New(l, cfg), k, 1, v, id)
	// A pack forced now, then a tail of two groups after it: versions in the tail's first group
	// lie below head - (entries since the pack), where one version per entry would look for them
	// in the pack.
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	res := e.SaveGroup(ctx, g.appends(k, "g", v, v+3))
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	res = e.SaveGroup(ctx, g.appends(k, "g", v+3, v+6))
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	g.checkAll(t, engine.New(l, engine.Config{PackEntries: 100}), k, 1, v+6, id)
}

// groupTailAfterOnePack: one pack, then a tail of two groups and a save: a read fetches the pack
// alone and the tail without sequences where the Log can (DataReader), so each version inside a
// group is found by its entry's place in the tail.
func groupTailAfterOnePack(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	g.saveGroup(t, e, g.appends(k, "g", 0, 4))
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	g.saveGroup(t, e, g.appends(k, "g", 4, 7))
	g.saveGroup(t, e, g.appends(k, "g", 7, 10))
	g.saveGroup(t, e, g.appends(k, "g", 10, 11))
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 11, func(v uint64) string { return fmt.Sprint("g-", v) })
}

// groupLongTailAndLeases: a tail of many entries (default packs), groups between single saves
// and lease renewals (state entries, one right after each group), so that the newest pages are
// walked by back pointer through group entries and state entries that name them; every save of a
// group checked against the lease: a group whose 3rd save carries an old epoch stores 2 and
// refuses the rest.
func groupLongTailAndLeases(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	ls, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "me", TTL: time.Hour, Now: Now})
	require.NoError(t, err)
	renew := func() {
		_, err := e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: ls.Lease.Epoch, TTL: time.Hour, Now: Now})
		require.NoError(t, err)
	}
	withEpoch := func(reqs []engine.SaveRequest) []engine.SaveRequest {
		for i := range reqs {
			reqs[i].Epoch = ls.Lease.Epoch
		}
		return reqs
	}
	v := uint64(0)
	for round := range 12 {
		size := uint64(1 + round%4)
		g.saveGroup(t, e, withEpoch(g.appends(k, "g", v, v+size)))
		v += size
		renew()
		if round%3 == 2 {
			CheckHistory(t, e, k, 1, v)
		}
	}
	id := func(v uint64) string { return fmt.Sprint("g-", v) }
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, v, id)
	reqs := withEpoch(g.appends(k, "g", v, v+5))
	reqs[2].Epoch = 0 // a writer without the lease
	res := e.SaveGroup(ctx, reqs)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, engine.ErrLeased)
	require.ErrorIs(t, res[3].Err, engine.ErrVersionConflict)
	require.ErrorIs(t, res[4].Err, engine.ErrVersionConflict)
	g.checkAll(t, e, k, 1, v+2, id)
}

// groupWholeArrays: a group of saves each sending the whole conversation (no base: recognised as
// extending the head before it in canonical form), then the same group again: duplicates found
// by save id alone (the records of the group's versions are the session's recent records), not
// rewrites; and a group whose 3rd save rewrites the conversation (it drops a message): stored in
// an entry of its own, after the first two.
func groupWholeArrays(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	var reqs []engine.SaveRequest
	for v := uint64(1); v <= 8; v++ {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("w-", v), Payload: g.version(v), Now: Now})
	}
	res := e.SaveGroup(ctx, reqs)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, uint64(i+1), r.Saved.Record.Version)
	}
	n := Entries(t, l, k)
	require.Equal(t, 1, n)
	for _, en := range []*engine.Engine{e, engine.New(l, engine.Config{})} {
		for i, r := range en.SaveGroup(ctx, reqs) {
			require.NoError(t, r.Err)
			require.True(t, r.Saved.Duplicate, "save %d", i)
			require.Equal(t, uint64(i+1), r.Saved.Record.Version)
		}
		require.Equal(t, n, Entries(t, l, k))
	}
	id := func(v uint64) string { return fmt.Sprint("w-", v) }
	g.checkAll(t, e, k, 1, 8, id)
	more := []engine.SaveRequest{
		{Key: k, SaveID: "w-9", Payload: g.version(9), Now: Now},
		{Key: k, SaveID: "w-10", Payload: g.version(10), Now: Now},
		{Key: k, SaveID: "rewrite", Payload: g.array(1, 20), Now: Now},
		{Key: k, SaveID: "after", Payload: append(bytes.TrimSuffix(g.array(1, 20), []byte("]")), append([]byte{','}, g.array(20, 22)[1:]...)...), Now: Now},
	}
	res = e.SaveGroup(ctx, more)
	for i, r := range res {
		require.NoError(t, r.Err, "save %d", i)
		require.Equal(t, uint64(9+i), r.Saved.Record.Version)
	}
	require.Equal(t, n+2, Entries(t, l, k))
	got, _, err := engine.New(l, engine.Config{}).Read(ctx, k, 11, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(g.array(1, 20)), string(got))
	got, _, err = engine.New(l, engine.Config{}).Read(ctx, k, 12, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(g.array(1, 22)), string(got))
	cold := engine.New(l, engine.Config{})
	for v := uint64(1); v <= 10; v++ {
		got, rec, err := cold.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, id(v), rec.SaveID)
		require.True(t, string(g.version(v)) == string(got), "version %d", v)
	}
	CheckHistory(t, cold, k, 1, 12)
}

// groupRetentionCopyDelete: SavedBy finds every save of a group; retention that keeps the last
// versions from the middle of a group (its first versions pruned, the entry kept); a copy of the
// session version by version (as migrate copies it: History, Read, CopyVersion) into another; a
// deletion, and a group saved again after it.
func groupRetentionCopyDelete(t *testing.T, l engine.Log, k engine.Key, g *groups) {
	e := engine.New(l, engine.Config{})
	g.saveGroup(t, e, g.appends(k, "g", 0, 8))
	g.saveGroup(t, e, g.appends(k, "g", 8, 12))
	id := func(v uint64) string { return fmt.Sprint("g-", v) }
	cold := engine.New(l, engine.Config{})
	for v := uint64(1); v <= 12; v++ {
		rec, ok, err := cold.SavedBy(ctx, k, id(v))
		require.NoError(t, err)
		require.True(t, ok, "save id of version %d", v)
		require.Equal(t, v, rec.Version)
	}
	_, err := e.Prune(ctx, k, engine.Retention{KeepLast: 7}, Now, false)
	require.NoError(t, err)
	_, _, err = e.Read(ctx, k, 5, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrNotFound, "pruned")
	g.checkAll(t, engine.New(l, engine.Config{}), k, 6, 12, id)

	to := engine.Key{Namespace: k.Namespace, Session: "copy", Agent: k.Agent}
	recs, err := e.History(ctx, k)
	require.NoError(t, err)
	for _, r := range recs {
		conv, _, err := e.Read(ctx, k, r.Version, engine.ReadOptions{})
		require.NoError(t, err)
		r.Key = to
		_, err = e.CopyVersion(ctx, r, conv)
		require.NoError(t, err, "copying version %d", r.Version)
	}
	g.checkAll(t, engine.New(l, engine.Config{}), to, 6, 12, id)

	_, err = e.Delete(ctx, k, nil)
	require.NoError(t, err)
	g.saveGroup(t, e, g.appends(k, "again", 0, 5))
	g.checkAll(t, engine.New(l, engine.Config{}), k, 1, 5, func(v uint64) string { return fmt.Sprint("again-", v) })
}

// hash is the record hash of a conversation.
func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var decoder, _ = zstd.NewReader(nil)
