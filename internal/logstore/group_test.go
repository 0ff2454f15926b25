package logstore_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// The group commit scenarios (enginetest.RunGroups: one entry for k saves, each version read
// back, duplicates, a refusal in the middle, a fork inside a group, packs and tails of groups) on
// the embedded server.
func TestEngine_Groups(t *testing.T) {
	_, l := startEngine(t, engine.Config{})
	enginetest.RunGroups(t, l)
}

// The same, every namespace sealed (--namespace-keys): group entries are sealed and opened as
// any entry.
func TestEngine_GroupsSealed(t *testing.T) {
	_, l := startEngine(t, engine.Config{})
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	keys, err := sealing.ParseKeys([]byte(`{"*":"` + base64.StdEncoding.EncodeToString(k) + `"}`))
	require.NoError(t, err)
	enginetest.RunGroups(t, sealing.NewLog(l, keys))
}

// Groups of 8 appends written, packed and written again, then the server restarted on the same
// directory: a new engine (nothing cached) reads every version back, by number and by history.
func TestEngine_GroupsAfterARestart(t *testing.T) {
	dir := t.TempDir()
	s, err := logstore.StartEmbedded(dir)
	require.NoError(t, err)
	e, _ := openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{PackEntries: 16})
	k := engine.Key{Namespace: "n", Session: "restart", Agent: "a"}
	for g := range 5 {
		var reqs []engine.SaveRequest
		for v := 8*g + 1; v <= 8*g+8; v++ {
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s-", v), Base: enginetest.U64(uint64(v - 1)),
				Payload: enginetest.Array(2*(v-1), 2*v), Now: now})
		}
		for i, r := range e.SaveGroup(ctx, reqs) {
			require.NoError(t, r.Err, "group %d save %d", g, i)
			if r.Saved.PackDue {
				_, err := e.Pack(ctx, k, false)
				require.NoError(t, err)
			}
		}
	}
	s.Shutdown()
	s.WaitForShutdown()

	s, err = logstore.StartEmbedded(dir)
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	e, _ = openEngine(t, logstore.Connect(t, s.ClientURL()), logstore.LogConfig{}, engine.Config{PackEntries: 16})
	for v := 1; v <= 40; v++ {
		got, rec, err := e.Read(ctx, k, uint64(v), engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, fmt.Sprint("s-", v), rec.SaveID)
		require.Equal(t, string(enginetest.Conversation(2*v)), string(got), "version %d", v)
	}
	enginetest.CheckHistory(t, e, k, 1, 40)
}

// Groups on an R3 cluster through two engines, one on the stream's leader and one on a follower,
// taking turns: each group after the other engine's loses its compare-and-swap (the cache is
// stale), reads the head again and is stored; every version reads back from both, cold; the
// group scenarios then run on the cluster's log.
func TestEngine_GroupsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := testenv.StartCluster(t, 3)
	lcfg := logstore.LogConfig{Replicas: 3}
	cfg := engine.Config{PackEntries: 12}
	logstore.OpenFresh(t, logstore.Connect(t, c.URLs()), lcfg)
	leader := c.StreamLeader(logstore.StreamOf(lcfg), 10*time.Second)
	a, la := openEngine(t, logstore.Connect(t, "nats://"+c.Node(leader).Listen), lcfg, cfg)
	b, _ := openEngine(t, logstore.Connect(t, followerURL(c, logstore.StreamOf(lcfg))), lcfg, cfg)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	for turn := range 6 {
		e := []*engine.Engine{a, b}[turn%2]
		var reqs []engine.SaveRequest
		for v := 5*turn + 1; v <= 5*turn+5; v++ {
			reqs = append(reqs, engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s-", v), Base: enginetest.U64(uint64(v - 1)),
				Payload: enginetest.Array(2*(v-1), 2*v), Now: now})
		}
		for i, r := range e.SaveGroup(ctx, reqs) {
			require.NoError(t, r.Err, "turn %d save %d", turn, i)
			require.Equal(t, uint64(5*turn+i+1), r.Saved.Record.Version)
			if r.Saved.PackDue {
				_, err := e.Pack(ctx, k, false)
				require.NoError(t, err)
			}
		}
	}
	for _, e := range []*engine.Engine{a, b} {
		e.Forget()
		enginetest.CheckVersions(t, e, k, 30)
	}
	enginetest.RunGroups(t, la)
}
