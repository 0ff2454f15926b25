package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// Hostile review of group commit (s21-review1).

// A save sent twice in one group (a writer's retry queued behind its first send) is the
// duplicate of the first; when the store fails to write the group's entry, the retry must be told
// that failure too, not that the first send's version was stored: nothing was.
func TestSaveGroup_RepeatInGroupWhoseEntryFailed(t *testing.T) {
	log := &failingLog{Log: memlog.New(1 << 20), fail: 1}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first := engine.SaveRequest{Key: k, SaveID: "1", Base: u64(0), Payload: array(0, 2), Now: now}
	reqs := []engine.SaveRequest{
		first,
		first, // the same save again: a duplicate of the first, in the same entry
		{Key: k, SaveID: "2", Base: u64(1), Payload: array(2, 4), Now: now},
	}
	res := e.SaveGroup(ctx, reqs)
	require.Len(t, res, 3)
	for i, r := range res {
		require.ErrorIs(t, r.Err, errInjected, "save %d: nothing was stored", i+1)
	}
	_, _, err := engine.New(log, engine.Config{}).Read(ctx, k, 1, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrNotFound)
}

// A session mixing group entries, single saves, state entries (leases), packs and retention,
// walked every way a reader walks it: history pages of every size from every cursor (by back
// pointer and by tail read, with and without the pack hint), a record by version, the save-id
// lookup (SavedBy) and a repeat of every save id (the duplicate of its own version), against the
// whole history.
func TestSaveGroup_EveryWalkAgainstHistory(t *testing.T) {
	for _, back := range []bool{false, true} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("back=%v/%d", back, seed), func(t *testing.T) {
				if back {
					engine.AlwaysBack(t)
				}
				walkEverySession(t, seed)
			})
		}
	}
}

func walkEverySession(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 21))
	log := memlog.New(1 << 20)
	e := engine.New(log, engine.Config{PackEntries: 3 + int(seed%4), NoPack: seed == 5})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	type saved struct {
		req engine.SaveRequest
		v   uint64
	}
	var all []saved
	head, msgs, epoch, first := uint64(0), 0, uint64(0), uint64(1)
	var packHeads []uint64 // the head when each pack was written
	pack := func(force bool) {
		t.Helper()
		res, err := e.Pack(ctx, k, force)
		require.NoError(t, err)
		if res.Seq != 0 {
			packHeads = append(packHeads, head)
		}
	}
	for step := range 40 {
		switch op := rng.IntN(10); {
		case op < 4: // a group of appends
			var reqs []engine.SaveRequest
			for j := range 2 + rng.IntN(6) {
				n := 1 + rng.IntN(2)
				reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("g%d-%d", step, j), Base: u64(head + uint64(j)),
					Payload: array(msgs, msgs+n), Now: now, Epoch: epoch})
				msgs += n
			}
			for j, r := range e.SaveGroup(ctx, reqs) {
				require.NoError(t, r.Err, "step %d save %d", step, j)
				head++
				require.Equal(t, head, r.Saved.Record.Version)
				all = append(all, saved{reqs[j], head})
				if r.Saved.PackDue {
					pack(false)
				}
			}
		case op < 7: // a single append
			req := engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s", step), Base: u64(head), Payload: array(msgs, msgs+1), Now: now, Epoch: epoch}
			s, err := e.Save(ctx, req)
			require.NoError(t, err)
			msgs++
			head++
			all = append(all, saved{req, head})
			if s.PackDue {
				pack(false)
			}
		case op == 7: // a lease taken or given up: a state entry
			if epoch == 0 {
				l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Hour, Now: now})
				require.NoError(t, err)
				epoch = l.Lease.Epoch
			} else {
				_, err := e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: epoch, Now: now})
				require.NoError(t, err)
				epoch = 0
			}
		case op == 8 && head > 4: // retention
			keep := 3 + rng.IntN(int(head))
			_, err := e.Prune(ctx, k, engine.Retention{KeepLast: keep}, now, false)
			require.NoError(t, err)
			if head > uint64(keep) {
				first = max(first, head-uint64(keep)+1)
			}
		default: // a pack now
			pack(rng.IntN(2) == 0)
		}
	}
	fresh := engine.New(log, engine.Config{})
	for _, eng := range []*engine.Engine{e, fresh} {
		h, err := eng.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, h, int(head-first+1))
		for i, r := range h {
			require.Equal(t, first+uint64(i), r.Version)
		}
		byVersion := map[uint64]engine.Record{}
		for _, r := range h {
			byVersion[r.Version] = r
		}
		for limit := 1; limit <= 9; limit++ {
			for _, hinted := range []bool{true, false} {
				var got []engine.Record
				var cur engine.HistoryCursor
				for pages := 0; ; pages++ {
					require.Less(t, pages, 1000)
					recs, next, err := eng.HistoryPage(ctx, k, cur, limit)
					require.NoError(t, err)
					got = append(got, recs...)
					if next == (engine.HistoryCursor{}) {
						break
					}
					cur = next
					if !hinted {
						cur.Pack = 0
					}
				}
				require.Len(t, got, len(h), "limit %d", limit)
				for i, r := range got {
					require.Equal(t, h[len(h)-1-i], r, "limit %d, record %d", limit, i)
				}
			}
		}
		lookedUp := uint64(0) // SavedBy looks among the last pack's versions and those after it
		if len(packHeads) > 1 {
			lookedUp = packHeads[len(packHeads)-2]
		}
		for _, s := range all {
			rec, ok, err := eng.SavedBy(ctx, k, s.req.SaveID)
			require.NoError(t, err)
			if s.v < first {
				continue // retention may have removed it
			}
			if ok || s.v > lookedUp {
				require.True(t, ok, "save %s", s.req.SaveID)
				require.Equal(t, byVersion[s.v], rec, "save %s", s.req.SaveID)
			}
			r, err := eng.Version(ctx, k, s.v)
			require.NoError(t, err)
			require.Equal(t, byVersion[s.v], r)
		}
		// Every save sent again (the newest few: within the save-id lookup) is the duplicate of
		// its own version, whether it was a group's or alone; and again as a group.
		var again []engine.SaveRequest
		for _, s := range all[max(0, len(all)-12):] {
			if s.v < first {
				continue
			}
			req := s.req
			req.Epoch = epoch
			got, err := eng.Save(ctx, req)
			require.NoError(t, err, "save %s again", req.SaveID)
			require.True(t, got.Duplicate)
			require.Equal(t, s.v, got.Record.Version, "save %s again", req.SaveID)
			again = append(again, req)
		}
		for i, r := range eng.SaveGroup(ctx, again) {
			require.NoError(t, r.Err, "save %s again in a group", again[i].SaveID)
			require.True(t, r.Saved.Duplicate)
		}
	}
}

// A group entry written in parts whose write stops after any of its parts (the store failing: a
// crash of the daemon between them looks the same to the log): the parts left are no version,
// nothing stored before is touched, every save of the group is told the failure, and the group
// sent again (to this engine, or to another one on the same log) stores every version, each
// read back byte for byte, with the tail packed after it.
func TestSaveGroup_StoppedBetweenItsParts(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	text := func(n int) string { // hardly compressible: zstd keeps most of it
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz0123456789 "[rnd.IntN(37)]
		}
		return string(b)
	}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var msgs [][]byte
	var reqs []engine.SaveRequest
	for v := 1; v <= 6; v++ {
		m := []byte(fmt.Sprintf(`{"role":"user","content":%q}`, text(6<<10)))
		msgs = append(msgs, m)
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("v", v), Base: u64(uint64(v - 1)),
			Payload: []byte("[" + string(m) + "]"), Now: now})
	}
	conv := func(v int) string { return "[" + string(bytes.Join(msgs[:v], []byte(","))) + "]" }
	// The first save alone (one entry), then the other five as a group: ~30 KB of text, ~20 KB
	// compressed, in 3 appends of at most 8 KiB (two parts, then the entry): each one fails once.
	for stop := 2; stop <= 4; stop++ {
		t.Run(fmt.Sprint("append ", stop, " fails"), func(t *testing.T) {
			log := &failingLog{Log: memlog.New(8 << 10), fail: stop}
			e := engine.New(log, engine.Config{PackEntries: 3})
			_, err := e.Save(ctx, reqs[0])
			require.NoError(t, err)
			res := e.SaveGroup(ctx, reqs[1:])
			require.Equal(t, stop, log.n, "the group's appends stop at the failing one")
			for i, r := range res {
				require.ErrorIs(t, r.Err, errInjected, "save %d", i+2)
			}
			for _, en := range []*engine.Engine{e, engine.New(log.Log, engine.Config{})} {
				got, rec, err := en.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
				require.NoError(t, err)
				require.Equal(t, uint64(1), rec.Version, "the parts left are no version")
				require.True(t, conv(1) == string(got))
			}
			other := engine.New(log.Log, engine.Config{PackEntries: 3})
			for _, en := range []*engine.Engine{e, other} {
				for i, r := range en.SaveGroup(ctx, reqs[1:]) {
					require.NoError(t, r.Err, "save %d", i+2)
					require.Equal(t, uint64(i+2), r.Saved.Record.Version)
					if r.Saved.PackDue {
						_, err := en.Pack(ctx, k, false)
						require.NoError(t, err)
					}
				}
			}
			for _, en := range []*engine.Engine{e, other, engine.New(log.Log, engine.Config{})} {
				checkVersionsOf(t, en, k, 6)
				for v := 1; v <= 6; v++ {
					got, rec, err := en.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
					require.NoError(t, err, "version %d", v)
					require.Equal(t, fmt.Sprint("v", v), rec.SaveID)
					require.True(t, conv(v) == string(got), "version %d", v)
					z, _, err := en.ReadZstd(ctx, k, uint64(v))
					require.NoError(t, err, "version %d", v)
					plain, err := zstdDecoder.DecodeAll(z, nil)
					require.NoError(t, err)
					require.True(t, conv(v) == string(plain), "version %d as zstd", v)
				}
			}
			_, err = e.Pack(ctx, k, true)
			require.NoError(t, err)
			got, _, err := engine.New(log.Log, engine.Config{}).Read(ctx, k, 4, engine.ReadOptions{Verify: true})
			require.NoError(t, err)
			require.True(t, conv(4) == string(got))
		})
	}
}

// flakyLog fails some appends at random: before storing anything (the store unavailable), or
// after storing the entry (its acknowledgement lost: the outcome unknown to the writer).
type flakyLog struct {
	*memlog.Log
	mu  sync.Mutex
	rng *rand.Rand
}

func (l *flakyLog) Append(c ctxT, key engine.Key, data []byte, after uint64) (uint64, error) {
	l.mu.Lock()
	roll := l.rng.IntN(10)
	l.mu.Unlock()
	if roll == 0 {
		return 0, errInjected
	}
	seq, err := l.Log.Append(c, key, data, after)
	if err == nil && roll == 1 {
		return 0, errors.New("nats: timeout")
	}
	return seq, err
}

// Groups of appends with repeats in them (a save twice in one group) and resends of the group
// before (its answers lost), through two engines on a store that fails one append in ten before
// or after storing it: every save answered as stored (new or duplicate) reads back as the
// conversation it made, under its own save id, from a cold engine; nothing answered stored is
// missing, and the history has no gap.
func TestSaveGroup_RandomRepeatsOnAFlakyStore(t *testing.T) {
	configs := []struct {
		name     string
		maxEntry int
		cfg      engine.Config
	}{
		{"parts", 4 << 10, engine.Config{PackEntries: 4}},
		{"open packs", 1 << 20, engine.Config{PackEntries: 5, PackOpen: true}},
		{"small parts", 1 << 10, engine.Config{PackEntries: 6}},
	}
	seeds := uint64(4)
	if s := os.Getenv("CP_RANDOM_SEEDS"); s != "" {
		n, _ := strconv.Atoi(s)
		seeds = uint64(n)
	}
	for i, c := range configs {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", c.name, seed), func(t *testing.T) { flakyGroups(t, 100*uint64(i)+seed, c.maxEntry, c.cfg) })
		}
	}
}

func flakyGroups(t *testing.T, seed uint64, maxEntry int, cfg engine.Config) {
	rng := rand.New(rand.NewPCG(seed, 99))
	log := &flakyLog{Log: memlog.New(maxEntry), rng: rand.New(rand.NewPCG(seed, 100))}
	engines := []*engine.Engine{engine.New(log, cfg), engine.New(log, cfg)}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	type sent struct {
		req    engine.SaveRequest
		conv   string // the conversation it makes onto the base it was made for
		resent bool   // sent again in a later group: its base may be another version by then
	}
	stored := map[uint64]sent{} // every version answered as stored, by version
	var before []sent           // the group sent before
	next := 0                   // messages made so far (each save's are new ones)
	for step := range 30 {
		cold := engine.New(log.Log, engine.Config{})
		got, rec, err := cold.Read(ctx, k, 0, engine.ReadOptions{})
		head, conv := uint64(0), "[]"
		if err == nil {
			head, conv = rec.Version, string(got)
		} else {
			require.ErrorIs(t, err, engine.ErrNotFound)
		}
		var group []sent
		for j := range 2 + rng.IntN(6) {
			switch r := rng.IntN(6); {
			case r == 0 && len(group) > 0: // a save of this group sent twice
				group = append(group, group[rng.IntN(len(group))])
				continue
			case r == 1 && len(before) > 0: // a save of the group before, sent again
				s := before[rng.IntN(len(before))]
				s.resent = true
				group = append(group, s)
				continue
			}
			n := 1 + rng.IntN(2)
			msgs := array(next, next+n)
			req := engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("%d-%d", step, j), Base: u64(head), Payload: msgs, Now: now}
			next += n
			if conv == "[]" {
				conv = string(msgs)
			} else {
				conv = conv[:len(conv)-1] + "," + string(msgs[1:])
			}
			head++
			group = append(group, sent{req: req, conv: conv})
		}
		reqs := make([]engine.SaveRequest, len(group))
		for i, g := range group {
			reqs[i] = g.req
		}
		for i, r := range engines[rng.IntN(2)].SaveGroup(ctx, reqs) {
			if r.Err != nil {
				continue // not stored, or not known to be: the version, if any, is checked below
			}
			v := r.Saved.Record.Version
			require.Equal(t, group[i].req.SaveID, r.Saved.Record.SaveID, "step %d save %d", step, i)
			if s, ok := stored[v]; ok {
				require.Equal(t, s.req.SaveID, group[i].req.SaveID, "step %d save %d: version %d answered to two saves", step, i, v)
				continue
			}
			stored[v] = group[i]
		}
		before = group
		if rng.IntN(3) == 0 {
			_, _ = engines[rng.IntN(2)].Pack(ctx, k, false) // may fail on the flaky store
		}
	}
	cold := engine.New(log.Log, engine.Config{})
	h, err := cold.History(ctx, k)
	require.NoError(t, err)
	for i, r := range h {
		require.Equal(t, uint64(i+1), r.Version, "no gap")
	}
	for v, s := range stored {
		if s.resent && *s.req.Base == 0 {
			s.conv = string(s.req.Payload)
		} else if s.resent { // stored onto the version its base names now: its messages, then its own
			base, _, err := cold.Read(ctx, k, *s.req.Base, engine.ReadOptions{})
			require.NoError(t, err)
			if s.conv = string(s.req.Payload); len(base) > 2 {
				s.conv = string(base[:len(base)-1]) + "," + string(s.req.Payload[1:])
			}
		}
		got, rec, err := cold.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d, answered stored to save %s", v, s.req.SaveID)
		require.Equal(t, s.req.SaveID, rec.SaveID, "version %d", v)
		if s.conv != string(got) {
			i := 0
			for i < len(got) && i < len(s.conv) && got[i] == s.conv[i] {
				i++
			}
			t.Fatalf("version %d (save %s, base %d): differs at byte %d of %d/%d: want ...%.200s\ngot ...%.200s", v, s.req.SaveID, *s.req.Base, i, len(s.conv), len(got), s.conv[max(0, i-60):], got[max(0, i-60):])
		}
	}
}

// A group of saves each of which fits an entry alone, but whose records together do not fit one
// entry's meta (long writers and save ids, on a store of 64 KiB entries: a NATS server with a
// lowered max_payload): an entry's meta is never cut into parts, so the group is stored in as
// many entries as its records need, every save stored, not every save refused as too large.
func TestSaveGroup_RecordsLargerThanAnEntry(t *testing.T) {
	e, log := newEngine(t, 64<<10, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var reqs []engine.SaveRequest
	for v := range 64 {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("%03d", v) + strings.Repeat("s", 250), Base: u64(uint64(v)),
			Writer: fmt.Sprintf("%03d", v) + strings.Repeat("w", 1000), Reason: "turn", Payload: array(v, v+1), Now: now})
	}
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i+1)
		require.Equal(t, uint64(i+1), r.Saved.Record.Version)
	}
	require.Greater(t, entries(t, log, k), 1)
	for _, en := range []*engine.Engine{e, engine.New(log, engine.Config{})} {
		h, err := en.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, h, 64)
		for i, r := range h {
			require.Equal(t, reqs[i].SaveID, r.SaveID)
			require.Equal(t, reqs[i].Writer, r.Writer)
		}
		got, _, err := en.Read(ctx, k, 40, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, string(array(0, 40)), string(got))
	}
}

// The records of a group's saves differ in everything a save sets (writer, reason, save ids
// without a shared prefix, a fork reference, the time): each one read back, from a cold engine,
// before and after a pack, is the record its save was answered, field for field.
func TestSaveGroup_RecordsRoundTrip(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	reqs := []engine.SaveRequest{
		{Key: k, SaveID: "alpha", Base: u64(0), Writer: "w1", Payload: array(0, 1), Now: now},
		{Key: k, SaveID: "zz-2", Base: u64(1), Writer: "w2", Reason: "compaction", Payload: array(1, 3), Now: now.Add(time.Second)},
		{Key: k, SaveID: "alpha-3", Base: u64(2), Writer: "w2", Reason: "compaction", Payload: array(3, 4), Now: now.Add(time.Minute),
			ForkOf: &engine.ForkRef{Key: engine.Key{Namespace: "n", Session: "src\"é", Agent: "a"}, Version: 9}},
		{Key: k, SaveID: "4", Base: u64(3), Payload: array(4, 4), Now: now.Add(time.Hour)}, // appends nothing
		{Key: k, SaveID: "five", Base: u64(4), Writer: "w1", Payload: array(4, 6), Now: now},
	}
	var want []engine.Record
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i+1)
		want = append(want, r.Saved.Record)
	}
	require.Equal(t, 1, entries(t, log, k), "one entry")
	check := func(what string) {
		t.Helper()
		cold := engine.New(log, engine.Config{})
		h, err := cold.History(ctx, k)
		require.NoError(t, err)
		require.Equal(t, want, h, what)
		for _, w := range want {
			r, err := cold.Version(ctx, k, w.Version)
			require.NoError(t, err)
			require.Equal(t, w, r, "%s: version %d", what, w.Version)
			_, r, err = cold.Read(ctx, k, w.Version, engine.ReadOptions{Verify: true})
			require.NoError(t, err)
			require.Equal(t, w, r, "%s: version %d read", what, w.Version)
		}
	}
	check("group entry")
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	for i := range want {
		want[i].StoredBytes = 0 // a pack shares its data out anew
	}
	cold := engine.New(log, engine.Config{})
	h, err := cold.History(ctx, k)
	require.NoError(t, err)
	for i := range h {
		want[i].StoredBytes = h[i].StoredBytes
	}
	check("packed")
}
