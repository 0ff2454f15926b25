package transfer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// swapAnswerLost is the real JetStream store, except that the answer to one SwapHead is lost after
// the swap was applied: what a daemon sees when the leader of the heads bucket commits the new head
// and dies before replying (the cluster harness met it: an acknowledged version whose segment was
// gone).
type swapAnswerLost struct {
	snapshot.Store
	lose atomic.Bool
}

func (s *swapAnswerLost) SwapHead(ctx context.Context, h snapshot.Head, rev uint64) error {
	err := s.Store.SwapHead(ctx, h, rev)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		return context.DeadlineExceeded
	}
	return err
}

// A save whose head swap was applied but not answered is retried under its save id and found
// committed (a duplicate): what it wrote must still be there, so the acknowledged version reads.
func TestFailover_SwapAnsweredLateKeepsTheSave(t *testing.T) {
	// Segments a failed save wrote are deleted after SegmentGrace: make that at once.
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = time.Millisecond })
	st := &swapAnswerLost{Store: env.Daemon.Store}
	ctx := ctxT(t)
	key := wire.Key{Namespace: "default", Session: "lost-answer", Agent: "main"}
	save := func(id string, conv []byte) (snapshot.Saved, error) {
		return snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: id, Writer: "t", Now: time.Now(),
			Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
	}
	conv := turn(nil, "a", 0)
	_, err := save("s1", conv)
	require.NoError(t, err)

	conv = turn(nil, "b", 1) // a rewrite: stored in a segment of its own
	st.lose.Store(true)
	_, err = save("s2", conv)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the swap's answer was lost")
	saved, err := save("s2", conv) // the ingest retry
	require.NoError(t, err)
	require.True(t, saved.Duplicate, "the first attempt was committed")

	time.Sleep(200 * time.Millisecond) // past the grace
	v, err := snapshot.GetVersion(ctx, st, key, saved.Head.Version.Version, nil)
	require.NoError(t, err)
	got, err := snapshot.Read(ctx, st, v, nil)
	require.NoError(t, err, "the acknowledged version reads")
	testenv.RequireSameConversation(t, conv, got)
}

// A compaction whose head swap was applied but not answered must not delete the segment it merged
// into: the head now refers to it.
func TestFailover_CompactionAnsweredLateKeepsItsSegment(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = time.Millisecond; c.CompactIdle = 0 })
	st := &swapAnswerLost{Store: env.Daemon.Store}
	ctx := ctxT(t)
	key := wire.Key{Namespace: "default", Session: "lost-compaction", Agent: "main"}
	var conv []byte
	var convs [][]byte
	for i := range 4 {
		conv = turn(conv, "a", i)
		convs = append(convs, conv)
		_, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: key, SaveID: fmt.Sprint("s", i), Writer: "t", Now: time.Now(),
			Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
		require.NoError(t, err)
	}
	st.lose.Store(true)
	_, err := snapshot.Compact(ctx, st, key, true)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the swap's answer was lost")

	time.Sleep(200 * time.Millisecond) // past the grace
	for i, want := range convs {
		v, err := snapshot.GetVersion(ctx, st, key, uint64(i+1), nil)
		require.NoError(t, err)
		got, err := snapshot.Read(ctx, st, v, nil)
		require.NoError(t, err, "version %d reads after the compaction", i+1)
		testenv.RequireSameConversation(t, want, got)
	}
}
