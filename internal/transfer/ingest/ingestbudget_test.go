package ingest

import (
	"context"
	"errors"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The budget: saves share it; beyond it a save waits, then is refused busy with a retry hint; the
// save in progress the longest is never held back, so a save larger than the budget goes through
// and saves waiting on each other cannot block for good.
func TestIngestBudget_WaitsThenBusyAndTheOldestGoesOn(t *testing.T) {
	b := NewBudget(100)
	b.wait = 20 * time.Millisecond
	ctx := context.Background()
	first, second := b.begin(ctx), b.begin(ctx)
	require.NoError(t, second.Reserve(60))
	require.NoError(t, first.Reserve(500), "the oldest save may exceed the budget")
	require.Equal(t, int64(560), b.inUse())

	err := second.Reserve(1)
	var we *wire.Error
	require.True(t, errors.As(err, &we), "%v", err)
	require.Equal(t, wire.CodeBusy, we.Code)
	require.NotNil(t, we.RetryAfterMillis)
	require.Positive(t, *we.RetryAfterMillis)
	require.Contains(t, we.Message, "--ingest-memory")

	// A waiting save goes on as soon as the oldest ends, and is then the oldest itself.
	third := b.begin(ctx)
	done := make(chan error, 1)
	third.deadline = time.Now().Add(time.Minute) // it may wait as long as it takes
	go func() { done <- third.Reserve(50) }()
	first.end()
	second.end()
	require.NoError(t, <-done)
	require.NoError(t, third.Reserve(1000), "now the oldest")
	third.end()
	require.Zero(t, b.inUse())
	require.Empty(t, b.saves)
}

// Released bytes are reusable by others at once.
func TestIngestBudget_ReleaseMakesRoom(t *testing.T) {
	b := NewBudget(100)
	b.wait = time.Minute
	ctx := context.Background()
	a, c := b.begin(ctx), b.begin(ctx)
	require.NoError(t, a.Reserve(90))
	done := make(chan error, 1)
	go func() { done <- c.Reserve(50) }()
	a.Release(60)
	require.NoError(t, <-done)
	require.Equal(t, int64(80), b.inUse())
	a.end()
	c.end()
	require.Zero(t, b.inUse())
}

// The save path: a save's reservation lowers the target once it holds a large checkpoint's bytes
// (by bytes reserved, never by a declared size) and sets it back when the save is settled.
func TestEagerGC_LargeSaveLowersUntilSettled(t *testing.T) {
	if housekeeping.EagerGCDisabled() {
		t.Skip("GOGC is set in the environment: the daemon leaves the collector alone")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	mem := NewBudget(2 * housekeeping.LargeBytes).begin(context.Background())
	require.NoError(t, mem.Reserve(housekeeping.LargeBytes-1))
	require.Equal(t, 100, housekeeping.GCPercent(), "not yet large")
	require.NoError(t, mem.Reserve(1))
	require.Equal(t, housekeeping.EagerGCPercent, housekeeping.GCPercent(), "a large save in progress")
	mem.end()
	require.Equal(t, 100, housekeeping.GCPercent(), "set back once settled")
}

// A read reserved withoutWaiting (the engine's, with a session locked) is refused busy at once
// when the budget is spent, however long a save may otherwise wait, and does not start the save's
// wait; the oldest save still takes what it needs.
func TestIngestBudget_WithoutWaitingRefusesAtOnce(t *testing.T) {
	b := NewBudget(100)
	b.wait = time.Minute
	ctx := context.Background()
	first, second := b.begin(ctx), b.begin(ctx)
	require.NoError(t, first.Reserve(90))
	start := time.Now()
	err := second.withoutWaiting().Reserve(20)
	require.Less(t, time.Since(start), time.Second, "no wait")
	var we *wire.Error
	require.True(t, errors.As(err, &we), "%v", err)
	require.Equal(t, wire.CodeBusy, we.Code)
	require.True(t, second.deadline.IsZero(), "the save's own wait has not started")
	require.NoError(t, second.withoutWaiting().Reserve(10), "what fits is taken")
	require.NoError(t, first.withoutWaiting().Reserve(500), "the oldest save may exceed the budget")
	first.withoutWaiting().Release(500)
	require.Equal(t, int64(100), b.inUse())
	first.end()
	second.end()
	require.Zero(t, b.inUse())
}
