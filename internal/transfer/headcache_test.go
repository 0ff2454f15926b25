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
