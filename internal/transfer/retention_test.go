package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
)

func versionsOf(t *testing.T, env *testenv.Env, key checkpoint.Key) []uint64 {
	hist, err := env.Client.History(context.Background(), key)
	require.NoError(t, err)
	var out []uint64
	for _, v := range hist {
		out = append(out, v.Version)
	}
	return out
}

// Pruning removes the oldest versions across rewrites and packs: the kept ones restore, the removed
// ones are not found (saying they were pruned), before and after a restart.
func TestRetention_KeepLastAcrossRewritesAndPacks(t *testing.T) {
	env := testenv.Start(t, packByHand)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "prune"}
	msgs := corpusMessages(t, "openhands_multi_swe_bench.json")
	want := map[uint64][]byte{}
	save := func(conv []json.RawMessage) {
		v, err := env.Client.Save(ctx, key, arrayOf(conv))
		require.NoError(t, err)
		want[v.Version] = arrayOf(conv)
	}
	for n := 4; n <= 80; n += 4 { // versions 1-20
		save(msgs[:n])
	}
	require.Positive(t, packNow(t, env, key).Entries) // records of 1-20 in a pack
	edited := append([]json.RawMessage{json.RawMessage(`{"role":"user","content":"a different start"}`)}, msgs[1:84]...)
	save(edited)    // version 21: a rewrite
	save(msgs[:88]) // version 22: another rewrite
	save(msgs[:90]) // version 23

	res, err := env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "prune", KeepLast: 2, DryRun: true})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Len(t, res[0].Versions, 21)
	require.Len(t, versionsOf(t, env, key), 23, "a dry run removes nothing")

	res, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "prune", KeepLast: 2})
	require.NoError(t, err)
	require.Equal(t, uint64(1), res[0].Versions[0])
	require.Equal(t, uint64(21), res[0].Versions[20])
	require.Equal(t, 2, res[0].Kept)
	require.Equal(t, []uint64{22, 23}, versionsOf(t, env, key))

	for n, conv := range want {
		got, _, err := env.Client.Restore(ctx, key, n)
		if n < 22 {
			require.ErrorIs(t, err, checkpoint.ErrNotFound, "version %d", n)
			require.Contains(t, err.Error(), "pruned")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, string(conv), string(got), "version %d", n)
	}
	res, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "prune", KeepLast: 2})
	require.NoError(t, err)
	require.Empty(t, res, "nothing left to prune")

	// The session carries on after a prune, and is packed again.
	save(msgs[:92])
	require.Equal(t, []uint64{22, 23, 24}, versionsOf(t, env, key))
	packNow(t, env, key)
	require.Equal(t, []uint64{22, 23, 24}, versionsOf(t, env, key))
	env.Restart()
	require.Equal(t, []uint64{22, 23, 24}, versionsOf(t, env, key))
}

func TestRetention_MaxAgeAndRefusals(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "aged"}
	for i := 1; i <= 4; i++ {
		_, err := env.Client.Save(ctx, key, []byte(fmt.Sprintf(`[{"role":"user","content":"%d"}]`, i)))
		require.NoError(t, err)
	}
	res, err := env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "aged", MaxAge: time.Hour})
	require.NoError(t, err)
	require.Empty(t, res, "every version is younger than an hour")
	time.Sleep(1100 * time.Millisecond)
	res, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "aged", MaxAge: time.Second, KeepLast: 2})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, res[0].Versions, "old, and beyond the newest two")
	res, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "aged", MaxAge: time.Second})
	require.NoError(t, err)
	require.Equal(t, []uint64{3}, res[0].Versions, "the head is always kept")

	_, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "aged"})
	require.ErrorIs(t, err, checkpoint.ErrBadRequest, "no limit given and none configured")
	_, err = env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "nope", KeepLast: 1})
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// Restores of kept versions keep succeeding while saves go on and prunes remove older versions.
func TestRetention_PruneDuringRestores(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CacheBytes = 1 })
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "busy"}
	msgs := corpusMessages(t, "codex_rollout_codemie.json")
	convOf := func(v uint64) []byte { return arrayOf(msgs[:int(v)+2]) }
	for v := uint64(1); v <= 20; v++ {
		_, err := env.Client.Save(ctx, key, convOf(v))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	newest := uint64(20)
	stop := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				v := newest - 1 // among the newest five, which every prune keeps, when the restore starts
				mu.Unlock()
				got, _, err := env.Client.Restore(ctx, key, v)
				if err == nil && !bytes.Equal(got, convOf(v)) {
					err = fmt.Errorf("version %d restored different bytes", v)
				}
				if errors.Is(err, checkpoint.ErrNotFound) {
					mu.Lock()
					gone := v+5 <= newest // pruned meanwhile: no longer among the newest five
					mu.Unlock()
					if gone {
						continue
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	pruned := 0
	for v := uint64(21); v <= 60; v++ {
		_, err := env.Client.Save(ctx, key, convOf(v))
		require.NoError(t, err)
		mu.Lock()
		newest = v
		mu.Unlock()
		if v%5 == 0 {
			res, err := env.Client.Prune(ctx, "", checkpoint.PruneOptions{Session: "busy", KeepLast: 5})
			require.NoError(t, err)
			for _, r := range res {
				pruned += len(r.Versions)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 55, pruned)
}

func TestRetention_DaemonPolicyByNamespace(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) {
		c.RetentionInterval = 100 * time.Millisecond
		c.Retention = housekeeping.RetentionPolicy{ByNamespace: map[string]engine.Retention{"short": {KeepLast: 2}}}
	})
	ctx := ctxT(t)
	short, long := checkpoint.Key{Namespace: "short", Session: "s"}, checkpoint.Key{Namespace: "long", Session: "s"}
	for i := 1; i <= 5; i++ {
		for _, k := range []checkpoint.Key{short, long} {
			_, err := env.Client.Save(ctx, k, []byte(fmt.Sprintf(`[{"role":"user","content":"%d"}]`, i)))
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool { return len(versionsOf(t, env, short)) == 2 }, 10*time.Second, 50*time.Millisecond)
	require.Len(t, versionsOf(t, env, long), 5, "a namespace without a policy keeps everything")

	ns, r, err := housekeeping.ParseNamespaceRetention("team a:keep=50,age=720h")
	require.NoError(t, err)
	require.Equal(t, "team a", ns)
	require.Equal(t, engine.Retention{KeepLast: 50, MaxAge: 720 * time.Hour}, r)
	for _, bad := range []string{"noseparator", "ns:keep=x", "ns:size=3", "ns:keep=-1"} {
		_, _, err := housekeeping.ParseNamespaceRetention(bad)
		require.Error(t, err, bad)
	}
}
