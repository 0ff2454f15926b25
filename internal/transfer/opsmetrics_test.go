package transfer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/transfer/service"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// opsSamples sums, per family, the values of the samples of reg whose labels include want.
func opsSample(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n := 0 // labels matching want ("!ok": any value but ok)
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && (v == l.GetValue() || v == "!ok" && l.GetValue() != "ok") {
					n++
				}
			}
			if n == len(want) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestOpsMetrics_LeaseTakeoversAndFencing: a forced takeover and a takeover of an expired lease are
// counted by kind, acquiring a released lease is no takeover, and the old owner's late write is
// counted as a fenced save.
func TestOpsMetrics_LeaseTakeoversAndFencing(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "ops", Session: "lease"}
	a, b := client(t, env, "agent-a"), client(t, env, "agent-b")
	takeovers := func(kind string) float64 {
		return opsSample(t, env.Registry, "checkpointd_lease_takeovers_total", map[string]string{"kind": kind})
	}

	la, err := a.Acquire(ctx, key, checkpoint.WithOwner("agent-a"))
	require.NoError(t, err)
	_, err = la.Save(ctx, turn(nil, "a", 1))
	require.NoError(t, err)
	lb, err := b.Acquire(ctx, key, checkpoint.WithOwner("agent-b"), checkpoint.WithForce())
	require.NoError(t, err)
	require.Equal(t, 1.0, takeovers("forced"))
	require.Equal(t, 0.0, takeovers("expired"))
	_, err = la.Save(ctx, turn(nil, "a", 2))
	require.ErrorIs(t, err, checkpoint.ErrFenced)
	require.Eventually(t, func() bool { // counted just after the result is published
		return opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"result": "fenced"}) == 1
	}, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, lb.Release(ctx))
	la, err = a.Acquire(ctx, key, checkpoint.WithOwner("agent-a"), checkpoint.WithTTL(300*time.Millisecond), checkpoint.WithoutRenewal())
	require.NoError(t, err)
	require.Equal(t, 1.0, takeovers("forced"), "a released lease is taken over from nobody")
	require.Equal(t, 0.0, takeovers("expired"))
	time.Sleep(400 * time.Millisecond)
	_, err = b.Acquire(ctx, key, checkpoint.WithOwner("agent-b"))
	require.NoError(t, err)
	require.Equal(t, 1.0, takeovers("expired"))
	require.Equal(t, 1.0, takeovers("forced"))
}

// TestOpsMetrics_ServiceErrorsAgreeWithRefusals: the NATS service's own error count ($SRV.STATS)
// equals the requests checkpointd_requests_total counts as refused, whatever their kind.
func TestOpsMetrics_ServiceErrorsAgreeWithRefusals(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	c := client(t, env, "w")
	key := checkpoint.Key{Namespace: "ops", Session: "s"}
	_, _, err := c.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	_, err = c.Save(ctx, key, turn(nil, "w", 1))
	require.NoError(t, err)
	_, _, err = c.Restore(ctx, key, 9)
	require.Error(t, err)
	nc := env.Conn()
	msg, err := nc.Request("cp.api.ops.history", []byte(`{"session": 7}`), 5*time.Second) // bad_request, raw
	require.NoError(t, err)
	require.NotEmpty(t, msg.Header.Get(wire.HdrServiceErrorCode))

	// A request is counted just after its reply is sent: the counts are read once the three
	// refusals are in, and compared until they agree (the two counts are not one atomic step).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		refused := opsSample(t, env.Registry, "checkpointd_requests_total", map[string]string{"result": "!ok"})
		require.GreaterOrEqual(c, refused, 3.0)
		msg, err := nc.Request("$SRV.STATS."+wire.ServiceName, nil, 5*time.Second)
		require.NoError(c, err)
		var stats micro.Stats
		require.NoError(c, json.Unmarshal(msg.Data, &stats))
		var errs uint64
		for _, e := range stats.Endpoints {
			var data service.EndpointResults
			require.NoError(c, json.Unmarshal(e.Data, &data), "endpoint %s: %s", e.Name, e.Data)
			errs += data.Refused
			require.Equal(c, opsSample(t, env.Registry, "checkpointd_requests_total", map[string]string{"op": e.Name, "result": "!ok"}),
				float64(data.Refused), "endpoint %s", e.Name)
		}
		require.Equal(c, refused, float64(errs), "the service's stats and the refusals counted disagree")
	}, 10*time.Second, 10*time.Millisecond)
}

// TestOpsMetrics_RetentionRounds: the housekeeping rounds, their duration and what they removed are
// counted, and a retention policy set at run time (SIGHUP in checkpointd) applies from the next round.
func TestOpsMetrics_RetentionRounds(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.RetentionInterval = 100 * time.Millisecond })
	ctx := ctxT(t)
	c := client(t, env, "w")
	key := checkpoint.Key{Namespace: "ops", Session: "r"}
	conv := []byte(nil)
	for i := 1; i <= 3; i++ {
		conv = turn(conv, "w", i)
		_, err := c.Save(ctx, key, conv)
		require.NoError(t, err)
	}
	rounds := func() float64 {
		return opsSample(t, env.Registry, "checkpointd_retention_rounds_total", map[string]string{"result": "ok"})
	}
	require.Eventually(t, func() bool { return rounds() >= 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 0.0, opsSample(t, env.Registry, "checkpointd_retention_removed_total", map[string]string{"kind": "version"}),
		"no policy: nothing removed")

	require.NoError(t, env.Daemon.SetRetention(housekeeping.RetentionPolicy{Default: engine.Retention{KeepLast: 1}}))
	require.Eventually(t, func() bool {
		return opsSample(t, env.Registry, "checkpointd_retention_removed_total", map[string]string{"kind": "version"}) == 2
	}, 10*time.Second, 20*time.Millisecond)
	h, err := c.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 1)
	require.Equal(t, 0.0, opsSample(t, env.Registry, "checkpointd_retention_rounds_total", map[string]string{"result": "error"}))
	// A round's duration is observed when it ends, after what it removed was counted: the round
	// that removed the two versions may still be ending.
	require.Eventually(t, func() bool {
		rounds, _ := opsHistogram(t, env.Registry, "checkpointd_retention_round_duration_seconds")
		return rounds > 1
	}, 10*time.Second, 20*time.Millisecond, "every round's duration observed")
	require.Error(t, env.Daemon.SetRetention(housekeeping.RetentionPolicy{Default: engine.Retention{KeepLast: -1}}))
}

// opsHistogram returns the sample count and sum of reg's histogram name.
func opsHistogram(t *testing.T, reg prometheus.Gatherer, name string) (count uint64, sum float64) {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				count, sum = count+m.GetHistogram().GetSampleCount(), sum+m.GetHistogram().GetSampleSum()
			}
		}
	}
	return count, sum
}

// TestOpsMetrics_GroupsAndPacks: an operator sees how many saves each save request carried (a
// burst of AppendAsync joined into groups: fewer requests than saves) and the packer's packs
// with the bytes they wrote.
func TestOpsMetrics_GroupsAndPacks(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.Engine.PackEntries = 4 })
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "ops", Session: "burst"}
	const n = 60
	futures := make([]*checkpoint.AppendFuture, n)
	for i := range futures {
		futures[i] = env.Client.AppendAsync(ctx, key, oneMessage("b", i))
	}
	for i, f := range futures {
		_, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
	}
	requests, saves := opsHistogram(t, env.Registry, "checkpointd_save_request_saves")
	require.Equal(t, float64(n), saves, "every save counted once, in the request that carried it")
	require.Less(t, requests, uint64(n), "a burst is sent in groups")
	require.Positive(t, requests)

	require.Eventually(t, func() bool { // the packer runs after the saves are answered
		return opsSample(t, env.Registry, "checkpointd_compactions_total", map[string]string{"result": "ok"}) >= 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Positive(t, opsSample(t, env.Registry, "checkpointd_compacted_bytes_total", nil))
	require.Zero(t, opsSample(t, env.Registry, "checkpointd_compactions_total", map[string]string{"result": "error"}))
}
