package transfer

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
	a := newAdmission(10<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))

	var scans []*ticket
	for i := 0; i < maxScans; i++ {
		tk, err := a.admit(classScan, 0)
		require.NoError(t, err)
		scans = append(scans, tk)
	}
	_, err := a.admit(classScan, 0)
	requireBusy(t, err)
	tk, err := a.admit(classPoint, 0)
	require.NoError(t, err, "scans have no claim on the slots of point operations")
	tk.done(time.Millisecond)

	scans[0].done(time.Second)
	tk, err = a.admit(classScan, 0)
	require.NoError(t, err, "a slot given back is taken again")
	tk.done(time.Millisecond)
	for _, tk := range scans[1:] {
		tk.done(time.Second)
	}
	_, err = a.admit(classScan, 0)
	require.NoError(t, err)
}

func TestAdmission_ByteBudget(t *testing.T) {
	a := newAdmission(4<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
	big, err := a.admit(classPoint, 0)
	require.NoError(t, err)
	require.NoError(t, big.take(64<<20), "one load larger than the whole budget passes when nothing else is in use")
	other, err := a.admit(classPoint, 0)
	require.NoError(t, err, "a request that reserves nothing is admitted")
	requireBusy(t, other.take(1))
	_, err = a.admit(classScan, 1<<20)
	requireBusy(t, err)
	big.done(time.Millisecond)
	require.NoError(t, other.take(3<<20))
	requireBusy(t, other.take(2<<20))
	_, err = a.admit(classScan, 1<<20)
	require.NoError(t, err, "within the budget")
	other.done(time.Millisecond)

	a.close()
	_, err = a.admit(classPoint, 0)
	require.ErrorContains(t, err, "shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, a.drained(ctx), "one scan is still running")
}

func TestAdmission_HintFollowsServiceTime(t *testing.T) {
	a := newAdmission(4<<20, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
	for i := 0; i < 50; i++ {
		tk, err := a.admit(classScan, 0)
		require.NoError(t, err)
		tk.done(300 * time.Millisecond)
	}
	for i := 0; i < maxScans; i++ {
		_, err := a.admit(classScan, 0)
		require.NoError(t, err)
	}
	_, err := a.admit(classScan, 0)
	requireBusy(t, err)
	require.InDelta(t, 600, *err.(*wire.Error).RetryAfterMillis, 60, "twice the recent service time")
}
