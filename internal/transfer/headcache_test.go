package transfer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
)

// A head restore whose old head's body the daemon has cached, after another daemon (an engine of
// its own on the same log) saved a version too large for the read cache, returns that version's
// body under its number: the daemon is asked about the cached head first (a hit), then, the log
// having moved, about the new head (not cacheable: no lookup), and must not serve the old body.
func TestRestore_HeadTooLargeToCacheAfterAnotherDaemonSaved(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CacheBytes = 64 << 10; c.Engine.NoPack = true })
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "cached-then-large"}
	small := []byte(`[{"role":"user","content":"small"}]`)
	_, err := env.Client.Save(ctx, key, small)
	require.NoError(t, err)
	for range 2 { // the second is served from the read cache
		got, v, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(1), v.Version)
		require.JSONEq(t, string(small), string(got))
	}

	other, _ := lossyEngine(t, env, engine.Config{NoPack: true})   // another daemon on the same store
	content, err := json.Marshal(strings.Repeat("large ", 20<<10)) // 120 KiB: more than the read cache holds
	require.NoError(t, err)
	large := []byte(fmt.Sprintf(`[{"role":"user","content":"small"},{"role":"user","content":%s}]`, content))
	_, err = other.Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: "default", Session: key.Session, Agent: "main"},
		SaveID: "large", Writer: "t", Now: time.Now(), Payload: large, Limits: codec.Limits{MaxBytes: 1 << 20}})
	require.NoError(t, err)

	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version, "the version the other daemon saved")
	require.JSONEq(t, string(large), string(got), "its body, not the cached head's")
}

// A session another daemon deleted and saved again with the same conversation has a head of the
// same number and hash as the one this daemon's engine cached, but another save: a head restore
// returns the new head's record (its save id), not the cached one's, whether the body is in the
// read cache (a hit on the cached head, then the log moved) or not (a miss: the daemon is asked
// to read, then the log's last entry names a head of the same number and hash).
func TestRestore_HeadAfterAnotherDaemonDeletedAndSavedTheSameConversation(t *testing.T) {
	for name, cacheBytes := range map[string]int64{"body cached": 64 << 20, "no read cache": 1} {
		t.Run(name, func(t *testing.T) {
			env := testenv.Start(t, func(c *transfer.Config) { c.Engine.NoPack, c.CacheBytes = true, cacheBytes })
			ctx := ctxT(t)
			key := checkpoint.Key{Session: "deleted-then-same"}
			conv := []byte(`[{"role":"user","content":"same"}]`)
			saved, err := env.Client.Save(ctx, key, conv)
			require.NoError(t, err)
			for range 2 { // the second is served from the read cache, if there is one
				_, v, err := env.Client.Restore(ctx, key, 0)
				require.NoError(t, err)
				require.Equal(t, saved, v)
			}

			other, _ := lossyEngine(t, env, engine.Config{NoPack: true}) // another daemon on the same store
			k := engine.Key{Namespace: "default", Session: key.Session, Agent: "main"}
			_, err = other.Delete(ctx, k, nil)
			require.NoError(t, err)
			_, err = other.Save(ctx, engine.SaveRequest{Key: k, SaveID: "saved-again", Writer: "t", Now: time.Now(),
				Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
			require.NoError(t, err)

			got, v, err := env.Client.Restore(ctx, key, 0)
			require.NoError(t, err)
			require.JSONEq(t, string(conv), string(got))
			require.Equal(t, uint64(1), v.Version)
			require.Equal(t, saved.Hash, v.Hash)
			require.Equal(t, "saved-again", v.SaveID, "the record of the head the other daemon saved, not the cached one")
		})
	}
}

// A key dropped while the daemon runs (SIGHUP) stops what it sealed from opening at once, also for
// a head restore whose body the daemon has in its read cache and whose session its engine holds for
// saves: the head is then read (and refused), not trusted from the engine's cache.
func TestRestore_HeadCachedAfterItsKeyWasDropped(t *testing.T) {
	k1, k2 := newNamespaceKey(t), newNamespaceKey(t)
	env := testenv.Start(t, func(c *transfer.Config) {
		c.NamespaceKeys = namespaceKeys(t, map[string]any{"*": k1})
	})
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "team", Session: "dropped"}
	_, err := env.Client.Save(ctx, key, markedConversation(2, "one"))
	require.NoError(t, err)
	for range 2 { // the second is served from the read cache
		_, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
	}
	dropped, err := env.Daemon.SetNamespaceKeys(namespaceKeys(t, map[string]any{"*": k2}))
	require.NoError(t, err)
	require.Len(t, dropped, 1)
	_, _, err = env.Client.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt, "what the dropped key sealed no longer opens")
}
