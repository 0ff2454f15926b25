package engine_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"

	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// The group commit scenarios (enginetest.RunGroups) on memlog; internal/logstore runs them on
// JetStream.
func TestEngine_Groups(t *testing.T) {
	enginetest.RunGroups(t, memlog.New(1<<20))
}

// A group whose saves hold values (large strings stored apart): the sweep finds them referred to
// by the group entry's earlier versions as by its head, and every version reads after it.
func TestSaveGroup_ValuesSurviveTheSweep(t *testing.T) {
	const grace = time.Minute
	clk := &clock{t: now}
	log := memlog.New(1 << 20)
	cfg := engine.Config{ValueGrace: grace, Clock: clk.now}
	e := engine.New(log, cfg)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	img1, img2 := image(30<<10), image(31<<10)
	msgs := [][]byte{imageMessage(0, img1), imageMessage(1, img2), message(2)}
	var reqs []engine.SaveRequest
	for i, m := range msgs {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("v", i+1), Base: u64(uint64(i)),
			Payload: []byte("[" + string(m) + "]"), Now: now})
	}
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i)
	}
	require.Equal(t, 1, entries(t, log, k))
	require.Equal(t, 2, valueCount(t, log, "n"))
	for range 2 {
		clk.add(3 * grace)
		res, err := e.SweepValues(ctx, "n")
		require.NoError(t, err)
		require.Equal(t, engine.ValueSweep{}, res, "every value is referred to")
	}
	for v := 1; v <= 3; v++ {
		got, _, err := engine.New(log, cfg).Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		want := "[" + string(bytes.Join(msgs[:v], []byte(","))) + "]"
		require.True(t, want == string(got), "version %d", v)
	}
}

// A save of a group delivered again after retention removed the version it appended to: the
// engine cannot rebuild what it would make, and checks it against what that version's save
// appended, which the group entry keeps per version: the same messages are a duplicate, fewer of
// them are refused (ErrSaveIDReused), as for saves stored one by one.
func TestSaveGroup_RepeatAfterRetention(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var reqs []engine.SaveRequest
	for v := 1; v <= 6; v++ {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("v", v), Base: u64(uint64(v - 1)),
			Payload: array(2*(v-1), 2*v), Now: now})
	}
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i)
	}
	_, err := e.Prune(ctx, k, engine.Retention{KeepLast: 3}, now, false)
	require.NoError(t, err)
	again := reqs[3] // version 4, whose base (3) is gone
	saved, err := e.Save(ctx, again)
	require.NoError(t, err)
	require.True(t, saved.Duplicate)
	require.Equal(t, uint64(4), saved.Record.Version)
	fewer := again
	fewer.Payload = array(7, 8) // the last of the 2 messages it appended
	_, err = e.Save(ctx, fewer)
	require.ErrorIs(t, err, engine.ErrSaveIDReused)
	require.ErrorContains(t, err, "appended 2 messages, this save appends 1")
}

// A group past the bytes one group entry takes (maxGroupBytes, 1 MiB of new bytes) goes in
// several entries, each its own compare-and-swap, and an entry past the log's largest is written
// in parts: every version reads back, from a cold engine too.
func TestSaveGroup_LargeGroupsInSeveralEntriesAndParts(t *testing.T) {
	e, log := newEngine(t, 64<<10, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	rnd := rand.New(rand.NewPCG(1, 2))
	text := func() string { // hardly compressible: zstd keeps most of it
		b := make([]byte, 300<<10)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz0123456789 "[rnd.IntN(37)]
		}
		return string(b)
	}
	var msgs [][]byte
	var reqs []engine.SaveRequest
	for v := 1; v <= 8; v++ {
		m := []byte(fmt.Sprintf(`{"role":"user","content":%q}`, text()))
		msgs = append(msgs, m)
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("v", v), Base: u64(uint64(v - 1)),
			Payload: []byte("[" + string(m) + "]"), Now: now})
	}
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i)
		require.Equal(t, uint64(i+1), r.Saved.Record.Version)
	}
	n := entries(t, log, k)
	require.Greater(t, n, 3, "3 entries (3, 3 and 2 saves of 300 KB), in parts of at most 64 KiB")
	for _, en := range []*engine.Engine{e, engine.New(log, engine.Config{})} {
		for v := 1; v <= 8; v++ {
			got, rec, err := en.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v)
			require.Equal(t, fmt.Sprint("v", v), rec.SaveID)
			require.True(t, "["+string(bytes.Join(msgs[:v], []byte(",")))+"]" == string(got), "version %d", v)
		}
		checkVersionsOf(t, en, k, 8)
	}
}

// checkVersionsOf checks k's history lists versions 1..head, each once.
func checkVersionsOf(t *testing.T, e *engine.Engine, k engine.Key, head uint64) {
	t.Helper()
	all, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, all, int(head))
	for i, r := range all {
		require.Equal(t, uint64(i+1), r.Version)
	}
}

// A group whose second entry fails to be written (the store failing, not a refusal): the saves
// of the first entry are stored, the failed one carries the store's error, and the ones after it
// are told that same error (not stored, not a conflict: the caller retries as for the failed
// one); the group sent again stores the rest and answers the first ones as duplicates.
func TestSaveGroup_StoreFailureInTheMiddle(t *testing.T) {
	log := &failingLog{Log: memlog.New(1 << 20), fail: 2}
	e := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	reqs := []engine.SaveRequest{
		{Key: k, SaveID: "1", Base: u64(0), Payload: array(0, 2), Now: now},
		{Key: k, SaveID: "2", Base: u64(1), Payload: array(2, 4), Now: now},
		{Key: k, SaveID: "3", Payload: array(1, 4), Now: now}, // a rewrite: the next entry
		{Key: k, SaveID: "4", Payload: array(2, 5), Now: now}, // another: the entry after
		{Key: k, SaveID: "5", Base: u64(4), Payload: array(5, 7), Now: now},
	}
	res := e.SaveGroup(ctx, reqs)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.Equal(t, 2, log.n, "saves 4 and 5 were not attempted")
	for i := 2; i < 5; i++ {
		require.ErrorIs(t, res[i].Err, errInjected, "save %d", i+1)
		require.NotErrorIs(t, res[i].Err, engine.ErrVersionConflict, "save %d", i+1)
	}
	res = e.SaveGroup(ctx, reqs)
	for i, r := range res {
		require.NoError(t, r.Err, "save %d", i+1)
		require.Equal(t, i < 2, r.Saved.Duplicate, "save %d", i+1)
		require.Equal(t, uint64(i+1), r.Saved.Record.Version)
	}
	got, _, err := engine.New(log, engine.Config{}).Read(ctx, k, 5, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(array(2, 7)), string(got))
}

// A group entry stored whose acknowledgement was lost: every save of it is told the store's
// error (its outcome unknown), and the group sent again finds them all stored (duplicates),
// writing nothing more.
func TestSaveGroup_LostAcknowledgement(t *testing.T) {
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	log := &lostAckLog{Log: memlog.New(1 << 20), failKey: &k}
	e := engine.New(log, engine.Config{})
	var reqs []engine.SaveRequest
	for v := 1; v <= 8; v++ {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v), Base: u64(uint64(v - 1)), Payload: array(2*(v-1), 2*v), Now: now})
	}
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.ErrorContains(t, r.Err, "timeout", "save %d", i+1)
	}
	n := entries(t, log.Log, k)
	for i, r := range e.SaveGroup(ctx, reqs) {
		require.NoError(t, r.Err, "save %d", i+1)
		require.True(t, r.Saved.Duplicate, "save %d", i+1)
		require.Equal(t, uint64(i+1), r.Saved.Record.Version)
	}
	require.Equal(t, n, entries(t, log.Log, k))
}

// Two engines (daemons) on one log take turns with groups: each one's cache goes stale when the
// other writes, its group loses the compare-and-swap, reads the head again and is decided again
// (stored, not refused); a group built on a head another engine moved past is refused as a
// conflict, first save and all after it, writing nothing.
func TestSaveGroup_TwoEnginesTakeTurns(t *testing.T) {
	log := memlog.New(1 << 20)
	engines := []*engine.Engine{engine.New(log, engine.Config{PackEntries: 10}), engine.New(log, engine.Config{PackEntries: 10})}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	group := func(from, to int) []engine.SaveRequest {
		var reqs []engine.SaveRequest
		for v := from + 1; v <= to; v++ {
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v), Base: u64(uint64(v - 1)), Payload: array(2*(v-1), 2*v), Now: now})
		}
		return reqs
	}
	for turn := range 6 {
		e := engines[turn%2]
		for i, r := range e.SaveGroup(ctx, group(4*turn, 4*turn+4)) {
			require.NoError(t, r.Err, "turn %d save %d", turn, i)
			require.Equal(t, uint64(4*turn+i+1), r.Saved.Record.Version)
			if r.Saved.PackDue {
				_, err := e.Pack(ctx, k, false)
				require.NoError(t, err)
			}
		}
	}
	n := entries(t, log, k)
	stale := group(20, 24) // on version 20, under new save ids: the head is 24
	for i := range stale {
		stale[i].SaveID = fmt.Sprint("other-", i)
	}
	res := engines[0].SaveGroup(ctx, stale)
	for i, r := range res {
		require.ErrorIs(t, r.Err, engine.ErrVersionConflict, "save %d", i)
	}
	require.Equal(t, n, entries(t, log, k))
	for _, e := range engines {
		e.Forget()
		checkVersions(t, e, k, 24)
	}
}

// A group holding a save of another session: that save is refused (ErrBadRequest), the ones
// before it stored in their own session, the ones after it refused, and the other session
// untouched.
func TestSaveGroup_ASaveOfAnotherSession(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	other := engine.Key{Namespace: "n", Session: "other", Agent: "a"}
	var reqs []engine.SaveRequest
	for v := 1; v <= 5; v++ {
		reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v), Base: u64(uint64(v - 1)), Payload: array(2*(v-1), 2*v), Now: now})
	}
	reqs[2].Key = other
	res := e.SaveGroup(ctx, reqs)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, engine.ErrBadRequest)
	require.ErrorIs(t, res[3].Err, engine.ErrVersionConflict)
	require.ErrorIs(t, res[4].Err, engine.ErrVersionConflict)
	require.Equal(t, 1, entries(t, log, k))
	require.Zero(t, entries(t, log, other))
	got, rec, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, uint64(2), rec.Version)
	require.Equal(t, string(conversation(4)), string(got))
}

// Groups of saves that add nothing (appends of no message) among others, and one of nothing but
// those: entries with empty pieces (no data at all, for the latter); every version reads, warm,
// cold and after a pack.
func TestSaveGroup_EmptyPieces(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var want []string
	save := func(msgs ...int) []engine.SaveRequest {
		var reqs []engine.SaveRequest
		for _, n := range msgs {
			v := len(want)
			from := 0
			if v > 0 {
				from = strings.Count(want[v-1], `"role"`)
			}
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v + 1), Base: u64(uint64(v)), Payload: array(from, from+n), Now: now})
			want = append(want, string(conversation(from+n)))
		}
		return reqs
	}
	for _, group := range [][]engine.SaveRequest{save(0, 2, 0), save(0, 0, 0), save(3, 0, 1)} {
		for i, r := range e.SaveGroup(ctx, group) {
			require.NoError(t, r.Err, "save %d", i)
		}
	}
	require.Equal(t, 3, entries(t, log, k))
	check := func(e *engine.Engine) {
		for v, w := range want {
			got, _, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v+1)
			require.Equal(t, w, string(got), "version %d", v+1)
			z, _, err := e.ReadZstd(ctx, k, uint64(v+1))
			require.NoError(t, err, "version %d", v+1)
			plain, err := zstdDecoder.DecodeAll(z, nil)
			require.NoError(t, err)
			require.Equal(t, w, string(plain), "version %d as zstd", v+1)
		}
	}
	check(e)
	check(engine.New(log, engine.Config{}))
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	check(engine.New(log, engine.Config{}))
}

// A tail written in groups is packed open (docs/format.md §8.15s): the pack's data is the group
// entries' stored bytes joined as they are, nothing decoded or compressed again; a tail of which
// fewer than three quarters of the versions came in groups is compressed again. Each version
// reads back, from this engine and a cold one.
func TestPack_GroupTailIsJoinedAsStored(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  []int // a group of n saves, or (1) a single save
		open   bool
		joined bool // the pack's data is exactly the entries' data, back to back
	}{
		{"three groups", []int{8, 8, 8}, true, true},
		{"groups, then two single saves", []int{8, 8, 8, 1, 1}, true, true},
		{"a group and as many single saves", []int{8, 1, 1, 1, 1, 1, 1, 1, 1}, false, false},
		{"single saves, then a group", []int{1, 1, 1, 1, 1, 1, 1, 1, 8}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := engine.Config{PackEntries: 1000}
			e, log := newEngine(t, 1<<20, cfg)
			k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
			v := 0
			for _, n := range tc.steps {
				var reqs []engine.SaveRequest
				for range n {
					v++
					reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("save-", v), Base: u64(uint64(v - 1)),
						Payload: array(2*(v-1), 2*v), Now: now})
				}
				for i, r := range e.SaveGroup(ctx, reqs) {
					require.NoError(t, r.Err, "save %d", i)
				}
			}
			var stored []byte
			require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
				data, _, _, err := engine.EntryData(en.Data)
				require.NoError(t, err)
				stored = append(stored, data...)
				return true
			}))
			res, err := e.Pack(ctx, k, true)
			require.NoError(t, err)
			require.Equal(t, 1, entries(t, log, k))
			last, err := log.Last(ctx, k)
			require.NoError(t, err)
			data, isPack, open, err := engine.EntryData(last.Data)
			require.NoError(t, err)
			require.True(t, isPack)
			require.Equal(t, tc.open, open, "open pack")
			require.Equal(t, len(data), res.Bytes)
			require.Equal(t, tc.joined, bytes.Equal(stored, data), "the pack's data is the entries' stored bytes")
			checkVersions(t, e, k, v)
			checkVersions(t, engine.New(log, cfg), k, v)
		})
	}
}

// After an open pack of groups, a single save starts a frame of its own (the groups' frame is at
// zstd's fastest level, and continuing it would make the session's next tails open too), while a
// group continues the frame, with its history.
func TestPack_SingleSaveAfterAnOpenGroupPackStartsAFrame(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackEntries: 1000})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	group := func(from, to int) {
		var reqs []engine.SaveRequest
		for v := from + 1; v <= to; v++ {
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("save-", v), Base: u64(uint64(v - 1)),
				Payload: array(2*(v-1), 2*v), Now: now})
		}
		for i, r := range e.SaveGroup(ctx, reqs) {
			require.NoError(t, r.Err, "save %d", i)
		}
	}
	lastStartsFrame := func() bool { // its data starts with a zstd frame's magic number
		last, err := log.Last(ctx, k)
		require.NoError(t, err)
		data, _, _, err := engine.EntryData(last.Data)
		require.NoError(t, err)
		return bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd})
	}
	group(0, 8)
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	group(8, 16)
	require.False(t, lastStartsFrame(), "a group after an open pack continues its frame")
	_, err = e.Pack(ctx, k, true)
	require.NoError(t, err)
	saveTurns(t, e, k, 32, 34)
	require.True(t, lastStartsFrame(), "a single save after an open pack starts a frame")
	checkVersions(t, engine.New(log, engine.Config{}), k, 17)
}

// A session saved only in groups has every tail packed open, and a reader decodes an open pack
// that continues a frame with the run before it, at once (logBuilder.addPack), refusing a run of
// more than maxDecoded (4 × maxRun). A group continues the frame of an open pack only while that
// run stays within maxRun: were every pack to continue the one before, the whole history of such
// a session would be one run, and past 256 MiB of saves (rewrites included) no version after that
// would read back. Here maxRun is 8 KiB, a tail 4 groups of 2 saves of ~300 bytes.
func TestPack_OpenPacksOfGroupsKeepAReadersRunWithinMaxRun(t *testing.T) {
	cfg := engine.Config{PackEntries: 8}
	e, log := newEngine(t, 1<<20, cfg)
	const maxRun = 8 << 10
	engine.SetMaxRun(e, maxRun)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	v := 0
	for range 96 { // a tail is 4 groups: frames that pass maxRun end inside tails too
		var reqs []engine.SaveRequest
		for range 2 {
			v++
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("save-", v), Base: u64(uint64(v - 1)),
				Payload: array(2*(v-1), 2*v), Now: now})
		}
		res := e.SaveGroup(ctx, reqs)
		for i, r := range res {
			require.NoError(t, r.Err, "save %d", v-2+i+1)
		}
		if res[len(res)-1].Saved.PackDue {
			_, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
		}
	}
	var runs []int64 // what a reader decodes at once, pack after pack
	continued, tail := 0, int64(0)
	require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
		isPack, starts, raw, err := engine.PackRun(en.Data)
		require.NoError(t, err)
		if !isPack {
			return true
		}
		tail = max(tail, raw)
		if starts || len(runs) == 0 {
			runs = append(runs, 0)
		} else {
			continued++
		}
		runs[len(runs)-1] += raw
		return true
	}))
	require.Positive(t, continued, "a group after an open pack continues its frame")
	for i, r := range runs {
		require.LessOrEqual(t, r, maxRun+tail, "run %d of the packs %v", i, runs)
	}
	checkVersions(t, e, k, v)
	checkVersions(t, engine.New(log, cfg), k, v)
}
