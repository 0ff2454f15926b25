package transfer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// envInt reads a positive integer from the environment, or returns def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// putHeads makes n sessions through the daemon's engine directly (16 at a time), far faster than
// n saves over NATS: a listing reads nothing else. Each is a version 1 of an empty conversation.
func putHeads(t testing.TB, env *testenv.Env, ns string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				k := engine.Key{Namespace: ns, Session: fmt.Sprintf("flood-%06d", i), Agent: wire.DefaultAgent}
				if _, err := env.Daemon.Engine.Save(ctx, engine.SaveRequest{Key: k, SaveID: "flood", Writer: "flood",
					Payload: []byte("[]"), Now: time.Now()}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case work <- i:
		case err := <-errs:
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// floodTally counts the replies of a read flood by outcome.
type floodTally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (f *floodTally) add(outcome string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[outcome]++
}

func (f *floodTally) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.counts))
	for k := range f.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%d", k, f.counts[k])
	}
	return s
}

// replyKind names what one raw request got: ok, busy, another error code, or how it failed.
func replyKind(m *nats.Msg, err error) string {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case err != nil:
		return "error:" + err.Error()
	case m.Header.Get(wire.HdrServiceErrorCode) == "":
		return "ok"
	}
	var we wire.Error
	if json.Unmarshal(m.Data, &we) != nil {
		return "error:unreadable"
	}
	if we.Code == wire.CodeBusy && (we.RetryAfterMillis == nil || *we.RetryAfterMillis <= 0) {
		return "busy_without_hint"
	}
	return we.Code
}

// natsEvents reads the daemon's count of its NATS connection's events of one kind, failing if the
// daemon does not count them.
func natsEvents(t testing.TB, reg *prometheus.Registry, event string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "checkpointd_nats_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" && l.GetValue() == event {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	t.Fatalf("the daemon has no checkpointd_nats_events_total metric")
	return 0
}

// requests reads the daemon's count of requests of op with result.
func requests(t testing.TB, reg *prometheus.Registry, op, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "checkpointd_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == op && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestDaemon_ReadFloodStaysConnected: 64 workers looping over list, admin list and history of a
// deployment with thousands of sessions must neither crash the daemon nor cost it its NATS
// connection: every request is answered (ok, or busy with a retry hint), and an SDK restore made
// during the flood succeeds. CHECKPOINTD_FLOOD_SESSIONS and CHECKPOINTD_FLOOD_SECONDS make it larger
// (the figures are for 10000 sessions; BENCHMARKS.md).
func TestDaemon_ReadFloodStaysConnected(t *testing.T) {
	sessions := envInt("CHECKPOINTD_FLOOD_SESSIONS", 6000)
	duration := time.Duration(envInt("CHECKPOINTD_FLOOD_SECONDS", 4)) * time.Second
	const workers = 64
	// A read budget of four of the largest replies: the flood's scans fill it, so the restore's
	// reads must wait their turn (the SDK retries busy) rather than pass untouched.
	env := testenv.Start(t, func(c *transfer.Config) { c.ReadBytes = 4 << 20 })
	ctx := ctxT(t)

	conv, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", "openhands_gui_todo_app.json"))
	require.NoError(t, err)
	restoreKey := checkpoint.Key{Session: "restore-me"}
	_, err = env.Client.Save(ctx, restoreKey, conv)
	require.NoError(t, err)
	start := time.Now()
	putHeads(t, env, wire.DefaultNamespace, sessions)
	t.Logf("%d heads stored in %s", sessions, time.Since(start).Round(time.Millisecond))

	tally := &floodTally{counts: map[string]int{}}
	floodCtx, stop := context.WithTimeout(ctx, duration)
	defer stop()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := env.Conn()
			for i := 0; floodCtx.Err() == nil; i++ {
				var subject string
				var body []byte
				switch (w + i) % 3 {
				case 0:
					subject, body = wire.APISubject(wire.DefaultNamespace, wire.OpList), []byte(`{}`)
				case 1:
					subject, body = wire.AdminListSubject, []byte(`{}`)
				default:
					subject = wire.APISubject(wire.DefaultNamespace, wire.OpHistory)
					body = fmt.Appendf(nil, `{"session":"flood-%06d"}`, rand.IntN(sessions))
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				m, err := nc.RequestWithContext(rctx, subject, body)
				cancel()
				sent.Add(1)
				tally.add(replyKind(m, err))
			}
		}()
	}

	// What /healthz would have said, every 20 ms of the flood.
	var unhealthy atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for floodCtx.Err() == nil {
			if !env.Daemon.Ready() || !env.NC.IsConnected() {
				unhealthy.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// A user's restore in the middle of the flood: slower, but it succeeds.
	time.Sleep(duration / 4)
	restoreStart := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	got, _, err := env.Client.Restore(rctx, restoreKey, 0)
	cancel()
	restoreTook := time.Since(restoreStart)
	wg.Wait()

	disconnects := env.NC.Stats().Reconnects
	t.Logf("flood of %d workers for %s over %d sessions: %d requests:%s; daemon reconnects %d; unhealthy samples %d; restore took %s (err %v); daemon refused %v reads and %v gets busy",
		workers, duration, sessions, sent.Load(), tally, disconnects, unhealthy.Load(), restoreTook.Round(time.Millisecond), err,
		requests(t, env.Registry, wire.OpRead, wire.CodeBusy), requests(t, env.Registry, wire.OpGet, wire.CodeBusy))
	require.NoError(t, err, "restore during the flood")
	requireSameConversation(t, conv, got)
	require.Zero(t, disconnects, "the daemon's NATS connection was cut")
	require.True(t, env.NC.IsConnected())
	require.Zero(t, unhealthy.Load(), "health never failed during the flood")
	require.Zero(t, natsEvents(t, env.Registry, "disconnect"), "disconnects counted")
	require.Zero(t, natsEvents(t, env.Registry, "slow_consumer"), "slow consumer events counted")
	tally.mu.Lock()
	for k, n := range tally.counts {
		require.Contains(t, []string{"ok", wire.CodeBusy}, k, "%d replies were %s", n, k)
	}
	require.Positive(t, tally.counts["ok"], "the flood was served")
	tally.mu.Unlock()
	require.True(t, env.Daemon.Ready(), "healthy after the flood")
}
