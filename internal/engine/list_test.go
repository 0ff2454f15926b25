package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func TestSessions(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	for i := range 7 {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", i), Agent: "a"}
		_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(i + 1)})
		require.NoError(t, err)
	}
	_, err := save(e, engine.SaveRequest{Key: engine.Key{Namespace: "m", Session: "x", Agent: "a"}, SaveID: "1", Payload: conversation(1)})
	require.NoError(t, err)
	leased := engine.Key{Namespace: "n", Session: "leased", Agent: "a"}
	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: leased, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Delete(ctx, engine.Key{Namespace: "n", Session: "s3", Agent: "a"}, nil)
	require.NoError(t, err)

	var got []string
	cursor := uint64(0)
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		page, next, err := e.Sessions(ctx, "n", cursor, 3)
		require.NoError(t, err)
		for _, s := range page {
			got = append(got, fmt.Sprintf("%s:%d", s.Key.Session, s.Record.Version))
			if s.Record.Version > 0 {
				require.Equal(t, s.Key, s.Record.Key)
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"s0:1", "s1:1", "s2:1", "s4:1", "s5:1", "s6:1", "leased:0"}, got)
	ns, err := e.Namespaces(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"m", "n"}, ns)
}

// A cache of one session: sessions saved in turn evict each other, and every save still
// lands on the right head (a new frame after each eviction).
func TestEngine_SessionCacheEviction(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{Sessions: 1, PackEntries: 4})
	a, b := engine.Key{Namespace: "n", Session: "a", Agent: "x"}, engine.Key{Namespace: "n", Session: "b", Agent: "x"}
	for i := 0; i < 30; i += 2 {
		saveTurns(t, e, a, i, i+2)
		saveTurns(t, e, b, i, i+2)
	}
	checkVersions(t, e, a, 15)
	checkVersions(t, e, b, 15)
}
