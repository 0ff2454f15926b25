package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// headReads counts how a listing reads heads: Last per session, or Lasts per page.
type headReads struct {
	engine.Log
	last, lasts int
}

func (h *headReads) Last(cx ctxT, k engine.Key) (engine.Entry, error) {
	h.last++
	return h.Log.Last(cx, k)
}

func (h *headReads) Lasts(cx ctxT, keys []engine.Key) ([]engine.Entry, error) {
	h.lasts++
	return h.Log.Lasts(cx, keys)
}

// A page of sessions reads its heads in one Lasts (docs/format.md §8.6), not one Last each, and
// shows each session at its head, the last of several versions.
func TestSessions_OneHeadReadPerPage(t *testing.T) {
	log := &headReads{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{NoPack: true})
	var want []string
	for i := range 12 {
		k := engine.Key{Namespace: "n", Session: fmt.Sprint("s", i), Agent: "a"}
		saveTurns(t, e, k, 0, 2*(1+i%3)) // 1 to 3 versions
		want = append(want, fmt.Sprintf("s%d:%d", i, 1+i%3))
	}
	e.Forget() // a listing reads the store, not the engine's cache
	log.last, log.lasts = 0, 0
	var got []string
	var cursor uint64
	pages := 0
	for {
		page, next, err := e.Sessions(ctx, "n", cursor, 5)
		require.NoError(t, err)
		pages++
		for _, s := range page {
			got = append(got, fmt.Sprintf("%s:%d", s.Key.Session, s.Record.Version))
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	require.Equal(t, want, got, "every session at its head version")
	require.Equal(t, 3, pages)
	require.Equal(t, pages, log.lasts, "one Lasts per page")
	require.Zero(t, log.last, "no Last per session")
}

// A Log whose Lasts answers for fewer keys than it was given is refused, never indexed past.
func TestSessions_ShortLastsRefused(t *testing.T) {
	log := &shortLasts{Log: memlog.New(1 << 20)}
	e := engine.New(log, engine.Config{})
	saveTurns(t, e, engine.Key{Namespace: "n", Session: "s", Agent: "a"}, 0, 2)
	_, _, err := e.Sessions(ctx, "n", 0, 10)
	require.ErrorContains(t, err, "0 last entries for 1 sessions")
}

type shortLasts struct{ engine.Log }

func (shortLasts) Lasts(ctxT, []engine.Key) ([]engine.Entry, error) { return nil, nil }
