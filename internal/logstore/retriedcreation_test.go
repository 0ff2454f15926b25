package logstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// A session creation whose first entry went unanswered (its index entry written; the entry not
// stored, as far as anyone can tell) keeps its index entry, for an entry still under way; the
// save is tried again and creates the session. The walk of the listing, page after page, must
// name the session once: before, the retry wrote a second index entry and pages of one listed
// the key twice (on two pages; within a page it was dropped).
func TestSessions_RetriedCreationListedOnceAcrossPages(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	e := engine.New(l, engine.Config{})
	ctx := context.Background()
	save := func(k engine.Key) error {
		_, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "first", Payload: []byte(`[{"role":"user","content":"hi"}]`), Now: time.Now()})
		return err
	}
	before := engine.Key{Namespace: "n", Session: "before", Agent: "main"}
	k := engine.Key{Namespace: "n", Session: "retried", Agent: "main"}
	after := engine.Key{Namespace: "n", Session: "after", Agent: "main"}
	require.NoError(t, save(before))
	l.failFirstEntry = func() error {
		l.failFirstEntry = nil
		return fmt.Errorf("publishing the first entry: %w", context.DeadlineExceeded)
	}
	require.ErrorIs(t, save(k), context.DeadlineExceeded, "the creation's outcome is unknown")
	require.NoError(t, save(k), "tried again")
	require.NoError(t, save(after))

	for _, limit := range []int{1, 2, 10} {
		var walked []engine.Key
		cursor := uint64(0)
		for page := 0; page < 10; page++ {
			heads, next, err := e.Sessions(ctx, "n", cursor, limit)
			require.NoError(t, err)
			for _, h := range heads {
				walked = append(walked, h.Key)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		require.Equal(t, []engine.Key{before, k, after}, walked, "pages of %d: each session once", limit)
	}
}
