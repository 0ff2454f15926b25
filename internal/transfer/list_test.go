package transfer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func keysOf(list []checkpoint.Session) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = fmt.Sprintf("%s/%s/%s@%d", s.Key.Namespace, s.Key.Session, s.Key.Agent, s.Version.Version)
	}
	return out
}

// Listings read each session's head from CP_LOG: every change acknowledged before a listing shows in
// it at once (read-your-writes), per namespace or across all of them (in key order as the SDK sorts
// them; the daemon pages them in creation order).
func TestDaemon_ListFollowsEveryChange(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	c := env.Client
	for _, k := range []checkpoint.Key{{Namespace: "b", Session: "s2"}, {Namespace: "a", Session: "s1", Agent: "z"},
		{Namespace: "a", Session: "s1"}, {Namespace: "a", Session: "s0"}, {Namespace: "b", Session: "s1"}} {
		_, err := c.Save(ctx, k, []byte(`[]`))
		require.NoError(t, err)
	}
	list, err := c.List(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@1", "a/s1/main@1", "a/s1/z@1"}, keysOf(list))
	all, err := c.ListAll(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@1", "a/s1/main@1", "a/s1/z@1", "b/s1/main@1", "b/s2/main@1"}, keysOf(all))

	// A new version, a deletion and a lease without a version, each listed as soon as acknowledged.
	_, err = c.Save(ctx, checkpoint.Key{Namespace: "a", Session: "s0"}, []byte(`[{"role":"user","content":[{"type":"text","text":"x"}]}]`))
	require.NoError(t, err)
	_, err = c.Delete(ctx, checkpoint.Key{Namespace: "a", Session: "s1", Agent: "z"}, nil)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, checkpoint.Key{Namespace: "a", Session: "leased-only"}, checkpoint.WithTTL(time.Minute))
	require.NoError(t, err)
	list, err = c.List(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@2", "a/s1/main@1"}, keysOf(list))

	// A session's agents, as RestoreMerged asks for them; an offset (the protocol before cursors) is
	// refused, naming cursor.
	merged, agents, err := c.RestoreMerged(ctx, "b", "s1", false)
	require.NoError(t, err)
	require.Equal(t, "[]", string(merged))
	require.Equal(t, map[string]uint64{"main": 1}, agents)
	m, err := env.Conn().Request(wire.APISubject("a", wire.OpList), []byte(`{"offset":99}`), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
	require.Contains(t, string(m.Data), "cursor")
}
