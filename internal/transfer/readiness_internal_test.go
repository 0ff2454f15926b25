package transfer

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestReadiness_CaughtUp: ready needs the queue read once, and no queued save older than the lag; a
// backlog being worked through (settled moving) is not ready, yet healthy (no stall).
func TestReadiness_CaughtUp(t *testing.T) {
	h := &healthMonitor{log: slog.New(slog.NewTextHandler(io.Discard, nil)), stallAfter: time.Minute, progress: time.Now()}
	now := time.Now()
	require.ErrorContains(t, h.caughtUp(now, readyLag), "not read yet")

	h.stalled(jetstream.StreamState{Msgs: 0, LastSeq: 10}, now)
	require.NoError(t, h.caughtUp(now, readyLag))

	h.stalled(jetstream.StreamState{Msgs: 5, LastSeq: 20, FirstTime: now.Add(-3 * time.Second)}, now)
	require.NoError(t, h.caughtUp(now, readyLag), "a fresh queue is caught up")

	later := now.Add(30 * time.Second)
	h.stalled(jetstream.StreamState{Msgs: 400, LastSeq: 900, FirstTime: later.Add(-25 * time.Second)}, later)
	err := h.caughtUp(later, readyLag)
	require.ErrorContains(t, err, "catching up: 400 messages queued, the oldest for 25s")
	require.Empty(t, h.problems(), "working through a backlog is healthy")
}
