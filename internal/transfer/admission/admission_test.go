package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

func requireBusy(t *testing.T, err error) {
	t.Helper()
	we, ok := err.(*wire.Error)
	require.True(t, ok, "a typed error, got %v", err)
	require.Equal(t, wire.CodeBusy, we.Code)
	require.NotNil(t, we.RetryAfterMillis, "a busy refusal says when to retry")
	require.GreaterOrEqual(t, *we.RetryAfterMillis, int64(10))
}

func TestAdmission_RefusesBeyondEachLimitWithoutWaiting(t *testing.T) {
	a := New(10<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))

	var scans []*Ticket
	for i := 0; i < maxScans; i++ {
		tk, err := a.Admit(ClassScan, 0)
		require.NoError(t, err)
		scans = append(scans, tk)
	}
	_, err := a.Admit(ClassScan, 0)
	requireBusy(t, err)
	tk, err := a.Admit(ClassPoint, 0)
	require.NoError(t, err, "scans have no claim on the slots of point operations")
	tk.Done(time.Millisecond)

	scans[0].Done(time.Second)
	tk, err = a.Admit(ClassScan, 0)
	require.NoError(t, err, "a slot given back is taken again")
	tk.Done(time.Millisecond)
	for _, tk := range scans[1:] {
		tk.Done(time.Second)
	}
	_, err = a.Admit(ClassScan, 0)
	require.NoError(t, err)
}

func TestAdmission_ByteBudget(t *testing.T) {
	a := New(4<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
	big, err := a.Admit(ClassPoint, 0)
	require.NoError(t, err)
	require.NoError(t, big.Take(64<<20), "one load larger than the whole budget passes when nothing else is in use")
	other, err := a.Admit(ClassPoint, 0)
	require.NoError(t, err, "a request that reserves nothing is admitted")
	requireBusy(t, other.Take(1))
	_, err = a.Admit(ClassScan, 1<<20)
	requireBusy(t, err)
	big.Done(time.Millisecond)
	require.NoError(t, other.Take(3<<20))
	requireBusy(t, other.Take(2<<20))
	_, err = a.Admit(ClassScan, 1<<20)
	require.NoError(t, err, "within the budget")
	other.Done(time.Millisecond)

	a.Close()
	_, err = a.Admit(ClassPoint, 0)
	require.ErrorContains(t, err, "shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, a.Drained(ctx), "one scan is still running")
}

func TestAdmission_HintFollowsServiceTime(t *testing.T) {
	a := New(4<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
	for i := 0; i < 50; i++ {
		tk, err := a.Admit(ClassScan, 0)
		require.NoError(t, err)
		tk.Done(300 * time.Millisecond)
	}
	for i := 0; i < maxScans; i++ {
		_, err := a.Admit(ClassScan, 0)
		require.NoError(t, err)
	}
	_, err := a.Admit(ClassScan, 0)
	requireBusy(t, err)
	require.InDelta(t, 600, *err.(*wire.Error).RetryAfterMillis, 60, "twice the recent service time")
}
