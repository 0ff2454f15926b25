package engine_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// Random sessions against a model: appends, whole arrays that extend, rewrite or repeat the head,
// empty saves, large values, lease entries, packs (due, forced, after a crash before their
// deletes), restarts, forks and a second engine; every version must read back as the model says,
// as plain JSON and as zstd, after every few steps. Each configuration runs with its own seed.
func TestEngine_RandomAgainstAModel(t *testing.T) {
	configs := []struct {
		name     string
		maxEntry int
		cfg      engine.Config
	}{
		{"small packs", 1 << 20, engine.Config{PackEntries: 5}},
		{"open packs", 1 << 20, engine.Config{PackEntries: 4, PackOpen: true}},
		{"parts", 2048, engine.Config{PackEntries: 6}},
		{"no packs, one cache", 1 << 20, engine.Config{NoPack: true, Sessions: 1}},
	}
	seeds := 1
	if s := os.Getenv("CP_RANDOM_SEEDS"); s != "" { // more: CP_RANDOM_SEEDS=50
		seeds, _ = strconv.Atoi(s)
	}
	for i, c := range configs {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", c.name, seed), func(t *testing.T) { randomSession(t, uint64(100*i+seed), c.maxEntry, c.cfg, false, 0) })
		}
	}
}

// The same with groups of saves among the steps (SaveGroup: appends, grown whole arrays, rewrites
// and repeats of the head, 2 to 9 in a group), with other seeds.
func TestEngine_RandomGroupsAgainstAModel(t *testing.T) {
	configs := []struct {
		name     string
		maxEntry int
		cfg      engine.Config
		maxRun   int64 // 0: the engine's
	}{
		{"small packs", 1 << 20, engine.Config{PackEntries: 5}, 0},
		{"open packs", 1 << 20, engine.Config{PackEntries: 4, PackOpen: true}, 0},
		{"parts", 2048, engine.Config{PackEntries: 6}, 0},
		{"no packs, one cache", 1 << 20, engine.Config{NoPack: true, Sessions: 1}, 0},
		// Runs of 4 KiB: frames end inside tails, and groups stop continuing open packs' frames.
		{"small runs", 1 << 20, engine.Config{PackEntries: 6}, 4 << 10},
	}
	seeds := 2
	if s := os.Getenv("CP_RANDOM_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for i, c := range configs {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", c.name, seed), func(t *testing.T) { randomSession(t, uint64(1000+100*i+seed), c.maxEntry, c.cfg, true, c.maxRun) })
		}
	}
}

// randomSession runs 120 random steps on one session against a model; groups adds groups of saves;
// maxRun, if not 0, lowers the engines' maxRun.
func randomSession(t *testing.T, seed uint64, maxEntry int, cfg engine.Config, groups bool, maxRun int64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	log := memlog.New(maxEntry)
	clk := &clock{t: now}
	cfg.Clock, cfg.ValueGrace = clk.now, time.Minute
	engines := []*engine.Engine{engine.New(log, cfg), engine.New(log, cfg)}
	if maxRun > 0 {
		for _, e := range engines {
			engine.SetMaxRun(e, maxRun)
		}
	}
	img := image(25 << 10) // 33 KB of base64: a value
	msg := func() string {
		switch rng.IntN(10) {
		case 0:
			return fmt.Sprintf(`{"role":"user","content":[{"type":"image","data":%q}]}`, img)
		case 1:
			return fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat("x", rng.IntN(3000)))
		}
		return string(message(rng.IntN(50)))
	}
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	var model []string    // the head's messages
	var versions []string // every version's JSON
	first := 1            // the oldest version retention keeps
	var forks []struct {
		key  engine.Key
		want string
	}
	arr := func(ms []string) string { return "[" + strings.Join(ms, ",") + "]" }
	epoch := uint64(0)
	for step := range 120 {
		e := engines[rng.IntN(2)]
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s", step), Now: now, Epoch: epoch}
		next := append([]string(nil), model...)
		ops := 15
		if groups {
			ops = 18
		}
		switch op := rng.IntN(ops); {
		case op >= 15: // a group of saves (SaveGroup), each against the head the ones before make
			reqs, nexts := randomGroup(rng, k, step, epoch, len(versions), model, msg)
			for j, r := range e.SaveGroup(ctx, reqs) {
				require.NoError(t, r.Err, "step %d, save %d of the group", step, j)
				require.Equal(t, uint64(len(versions)+1), r.Saved.Record.Version, "step %d, save %d", step, j)
				model = nexts[j]
				versions = append(versions, arr(model))
				require.Equal(t, hashOf([]byte(versions[len(versions)-1])), r.Saved.Record.Hash, "step %d, save %d", step, j)
				if r.Saved.PackDue && rng.IntN(4) > 0 {
					_, err := e.Pack(ctx, k, false)
					require.NoError(t, err)
				}
			}
			continue
		case op < 4: // an append of 1-3 messages
			var add []string
			for range 1 + rng.IntN(3) {
				add = append(add, msg())
			}
			next = append(next, add...)
			req.Base, req.Payload = u64(uint64(len(versions))), []byte(arr(add))
		case op < 6: // the whole array, grown
			next = append(next, msg())
			req.Payload = []byte(arr(next))
		case op < 8: // a rewrite: a prefix kept, something else after it
			next = append(next[:rng.IntN(len(next)+1)], msg())
			req.Payload = []byte(arr(next))
		case op == 8: // the same array again
			req.Payload = []byte(arr(next))
		case op == 9: // a lease taken or given up
			if epoch == 0 {
				l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Hour, Now: now})
				require.NoError(t, err)
				epoch = l.Lease.Epoch
			} else {
				_, err := e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: epoch, Now: now})
				require.NoError(t, err)
				epoch = 0
			}
			continue
		case op == 10: // a pack, maybe crashing before its deletes; a restart
			engine.CrashBeforeDeletes(e, rng.IntN(3) == 0)
			_, err := e.Pack(ctx, k, rng.IntN(2) == 0)
			require.NoError(t, err)
			engine.CrashBeforeDeletes(e, false)
			if rng.IntN(2) == 0 {
				e.Forget()
			}
			continue
		case op == 12: // retention keeps the newest few
			if len(versions) == 0 {
				continue
			}
			n := 1 + rng.IntN(8)
			_, err := e.Prune(ctx, k, engine.Retention{KeepLast: n}, now, false)
			require.NoError(t, err)
			first = max(first, len(versions)-n+1)
			continue
		case op == 13: // the values nothing refers to swept, the clock moved on
			if rng.IntN(2) == 0 {
				clk.add(3 * time.Minute)
			}
			_, err := e.SweepValues(ctx, "n")
			require.NoError(t, err)
			continue
		case op == 14: // the session deleted now and then (its forks copied in first)
			if len(versions) == 0 || rng.IntN(4) > 0 {
				continue
			}
			_, err := e.Delete(ctx, k, nil)
			require.NoError(t, err)
			model, versions, first, epoch = nil, nil, 1, 0
			continue
		default: // a fork of some version, packed or not
			if len(versions) == 0 {
				continue
			}
			v := first + rng.IntN(len(versions)-first+1)
			fk := engine.Key{Namespace: "n", Session: fmt.Sprint("fork", step), Agent: "a"}
			s, err := e.Fork(ctx, engine.ForkRequest{From: k, Version: uint64(v), To: fk, SaveID: "f", Now: now})
			require.NoError(t, err)
			if rng.IntN(2) == 0 && s.PackDue {
				_, err = e.Pack(ctx, fk, false)
				require.NoError(t, err)
			}
			forks = append(forks, struct {
				key  engine.Key
				want string
			}{fk, versions[v-1]})
			continue
		}
		s, err := e.Save(ctx, req)
		require.NoError(t, err, "step %d", step)
		require.Equal(t, uint64(len(versions)+1), s.Record.Version, "step %d", step)
		model = next
		versions = append(versions, arr(model))
		require.Equal(t, hashOf([]byte(versions[len(versions)-1])), s.Record.Hash, "step %d", step)
		if s.PackDue && rng.IntN(4) > 0 {
			_, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
		}
		if step%25 == 24 {
			checkModel(t, engines[rng.IntN(2)], k, versions, first)
		}
	}
	checkModel(t, engines[0], k, versions, first)
	for _, f := range forks {
		got, _, err := engines[1].Read(ctx, f.key, 1, engine.ReadOptions{Verify: true})
		require.NoError(t, err, "fork %s", f.key)
		require.True(t, f.want == string(got), "fork %s", f.key)
	}
}

// randomGroup makes a group of 2-9 saves onto head (version v, messages model): appends of 1-3
// messages, grown whole arrays, rewrites and the same array again; and each save's messages.
func randomGroup(rng *rand.Rand, k engine.Key, step int, epoch uint64, v int, model []string, msg func() string) ([]engine.SaveRequest, [][]string) {
	arr := func(ms []string) string { return "[" + strings.Join(ms, ",") + "]" }
	var reqs []engine.SaveRequest
	var nexts [][]string
	cur := model
	for j := range 2 + rng.IntN(8) {
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("s%d-%d", step, j), Now: now, Epoch: epoch}
		next := append([]string(nil), cur...)
		switch rng.IntN(6) {
		case 0, 1, 2: // an append
			var add []string
			for range 1 + rng.IntN(3) {
				add = append(add, msg())
			}
			next = append(next, add...)
			req.Base, req.Payload = u64(uint64(v+j)), []byte(arr(add))
		case 3: // the whole array, grown
			next = append(next, msg())
			req.Payload = []byte(arr(next))
		case 4: // a rewrite
			next = append(next[:rng.IntN(len(next)+1)], msg())
			req.Payload = []byte(arr(next))
		default: // the same array again
			req.Payload = []byte(arr(next))
		}
		reqs, nexts, cur = append(reqs, req), append(nexts, next), next
	}
	return reqs, nexts
}

func checkModel(t *testing.T, e *engine.Engine, k engine.Key, versions []string, first int) {
	t.Helper()
	h, err := e.History(ctx, k)
	if len(versions) == 0 {
		require.ErrorIs(t, err, engine.ErrNotFound)
		return
	}
	require.NoError(t, err)
	require.Len(t, h, len(versions)-first+1)
	for v, want := range versions {
		got, rec, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
		if v+1 < first {
			require.ErrorIs(t, err, engine.ErrNotFound, "version %d was pruned", v+1)
			continue
		}
		require.NoError(t, err, "version %d", v+1)
		require.True(t, want == string(got), "version %d", v+1)
		require.Equal(t, h[v+1-first], rec)
		z, _, err := e.ReadZstd(ctx, k, uint64(v+1))
		require.NoError(t, err, "version %d", v+1)
		plain, err := zstdDecoder.DecodeAll(z, nil)
		require.NoError(t, err, "version %d", v+1)
		require.True(t, want == string(plain), "version %d as zstd", v+1)
	}
}
