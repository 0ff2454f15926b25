package transfer_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkIngest_FiftyAgents is issue 12's ingest figure in process: 50 agents, each on its own
// connection, append 2 small messages per save (checkpoint.Client.Append, one save after another)
// for a phase, then publish the same bytes asynchronously to a plain stream (at most 256 in flight
// each, every publish acknowledged) for as long, then synchronously (each agent waiting for every
// ack, as it waits for every save) for as long. It prints saves/s, publishes/s, their ratios and
// the process's CPU per save and per publish (never asserted: the machine is shared); and last,
// the row issue 12's target is read from: the same appends with AppendAsync, up to 256 in flight
// per agent as for the async publishes (group commit, docs/format.md §8.15n), with the saves per
// request seen. Run it with -benchtime 1x; CP_BENCH_SECONDS sets the
// phase (default 3), CP_BENCH_CPUPROFILE=<file> profiles the saves' phase (CP_BENCH_ASYNC_CPUPROFILE the async saves') and
// CP_BENCH_GOROUTINES=<file> dumps the goroutines in the middle of it. CP_BENCH_GROUP=<k> makes
// each append carry k pairs, counted as k saves: what today's engine would give if k saves of a
// session went in one request and one entry (group commit, docs/format.md §8.15l), one version
// standing for the k. CP_BENCH_PAD=<bytes> lengthens each pair's answer by that much.
// CP_BENCH_NOPACK=1 and CP_BENCH_FASTSAVES=1 set the engine's NoPack and
// FastSaves, to tell what packing and zstd's default level cost a save.
func BenchmarkIngest_FiftyAgents(b *testing.B) {
	const agents = 50
	phase := 3 * time.Second
	if s, err := strconv.Atoi(os.Getenv("CP_BENCH_SECONDS")); err == nil && s > 0 {
		phase = time.Duration(s) * time.Second
	}
	env := testenv.Start(b, func(c *transfer.Config) {
		c.Engine.NoPack = os.Getenv("CP_BENCH_NOPACK") == "1"
		c.Engine.FastSaves = os.Getenv("CP_BENCH_FASTSAVES") == "1"
	})
	ctx := context.Background()
	clients := make([]*checkpoint.Client, agents)
	streams := make([]jetstream.JetStream, agents)
	for i := range clients {
		nc := env.Conn()
		c, err := checkpoint.New(nc, checkpoint.WithTimeout(time.Minute))
		require.NoError(b, err)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
		require.NoError(b, err)
		clients[i], streams[i] = c, js
	}
	_, err := streams[0].CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_INGEST", Subjects: []string{"bench.ingest.>"}, Storage: jetstream.FileStorage})
	require.NoError(b, err)
	pad := strings.Repeat("words ", max(benchPad(), 0)/6) // CP_BENCH_PAD: an answer that long
	pair := func(agent, n int) []byte {
		return fmt.Appendf(nil, `[{"role":"user","content":"agent %d question %d","timestamp":%d},`+
			`{"role":"assistant","content":[{"type":"text","text":"answer %d%s"}],"stopReason":"stop","model":"m","provider":"p","usage":{"input":1,"output":1,"totalTokens":2},"timestamp":%d}]`,
			agent, n, 1700000000000+n, n, pad, 1700000000001+n)
	}
	sizes := watchGroupSizes(b, env)
	for b.Loop() {
		cpu0 := processCPU()
		saves, n := saveFlood50(b, ctx, clients, pair, phase, benchGroup())
		cpu1 := processCPU()
		pubs, m := publishFlood50(b, ctx, streams, pair, phase)
		cpu2 := processCPU()
		syncPubs, k := syncPublishFlood50(b, ctx, streams, pair, phase)
		cpu3 := processCPU()
		sizes.reset()
		asyncSaves, a := asyncSaveFlood50(b, ctx, clients, pair, phase)
		cpu4 := processCPU()
		perSave, perPub, perSync := (cpu1-cpu0)/time.Duration(max(n, 1)), (cpu2-cpu1)/time.Duration(max(m, 1)), (cpu3-cpu2)/time.Duration(max(k, 1))
		perAsync := (cpu4 - cpu3) / time.Duration(max(a, 1))
		b.Logf("%d agents appending 2 messages per save: %.0f saves/s (%v of CPU each, all in: agents, server, daemon); "+
			"async publishes of the same bytes: %.0f/s (%v each), ratio %.1f %%; sync publishes, one after another per agent: "+
			"%.0f/s (%v each), ratio %.1f %%", agents, saves, perSave, pubs, perPub, 100*saves/pubs, syncPubs, perSync, 100*saves/syncPubs)
		b.Logf("the target row: AppendAsync, up to 256 in flight per agent (group commit): %.0f saves/s (%v of CPU each), "+
			"%.1f %% of the async publishes; groups: %s", asyncSaves, perAsync, 100*asyncSaves/pubs, sizes)
		b.ReportMetric(asyncSaves, "async-saves/s")
		b.ReportMetric(100*asyncSaves/pubs, "%_async_of_raw")
		b.ReportMetric(float64(perAsync.Microseconds()), "cpu-µs/async-save")
		b.ReportMetric(saves, "saves/s")
		b.ReportMetric(pubs, "publishes/s")
		b.ReportMetric(syncPubs, "sync-publishes/s")
		b.ReportMetric(100*saves/pubs, "%_of_raw")
		b.ReportMetric(100*saves/syncPubs, "%_of_sync")
		b.ReportMetric(float64(perSave.Microseconds()), "cpu-µs/save")
		b.ReportMetric(float64(perPub.Microseconds()), "cpu-µs/publish")
		b.ReportMetric(float64(perSync.Microseconds()), "cpu-µs/sync-publish")
	}
}

// processCPU is the CPU time the process has used so far (user and system): on a shared machine
// the CPU a save costs is steadier than how many saves fit in a second.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// saveFlood50 has every client append pairs one save after another for the phase, and returns the
// saves per second and their number.
func saveFlood50(b *testing.B, ctx context.Context, clients []*checkpoint.Client, pair func(agent, n int) []byte, phase time.Duration, group int) (float64, int64) {
	if path := os.Getenv("CP_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		require.NoError(b, err)
		require.NoError(b, pprof.StartCPUProfile(f))
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if path := os.Getenv("CP_BENCH_GOROUTINES"); path != "" {
		time.AfterFunc(phase/2, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				_ = f.Close()
			}
		})
	}
	var done atomic.Int64
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := checkpoint.Key{Session: fmt.Sprintf("agent-%02d-%d", i, start.UnixNano())}
			v, err := c.Save(ctx, key, pair(i, 0))
			if err != nil {
				b.Error(err)
				return
			}
			for n := 1; time.Now().Before(deadline); n++ {
				if v, err = c.Append(ctx, key, v.Version, pairs(pair, i, n*group, group)); err != nil {
					b.Error(err)
					return
				}
				done.Add(int64(group))
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), done.Load()
}

// publishFlood50 has every agent publish pairs asynchronously for the phase, then waits for every
// acknowledgement; it returns the acknowledged publishes per second and their number.
func publishFlood50(b *testing.B, ctx context.Context, streams []jetstream.JetStream, pair func(agent, n int) []byte, phase time.Duration) (float64, int64) {
	var acked atomic.Int64
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i, js := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := fmt.Sprintf("bench.ingest.agent%02d", i)
			var futures []jetstream.PubAckFuture
			for n := 0; time.Now().Before(deadline); n++ {
				f, err := js.PublishAsync(subject, pair(i, n), jetstream.WithStallWait(time.Minute))
				if err != nil {
					b.Error(err)
					return
				}
				futures = append(futures, f)
			}
			for _, f := range futures {
				select {
				case <-f.Ok():
					acked.Add(1)
				case <-f.Err():
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(acked.Load()) / time.Since(start).Seconds(), acked.Load()
}

// syncPublishFlood50 has every agent publish pairs one after another for the phase, each waiting
// for its ack; it returns the publishes per second and their number.
func syncPublishFlood50(b *testing.B, ctx context.Context, streams []jetstream.JetStream, pair func(agent, n int) []byte, phase time.Duration) (float64, int64) {
	var acked atomic.Int64
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i, js := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := fmt.Sprintf("bench.ingest.sync%02d", i)
			for n := 0; time.Now().Before(deadline); n++ {
				if _, err := js.Publish(ctx, subject, pair(i, n)); err != nil {
					b.Error(err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(acked.Load()) / time.Since(start).Seconds(), acked.Load()
}

// asyncSaveFlood50 has every client append pairs with AppendAsync for the phase, keeping up to
// 256 in flight (as publishFlood50 keeps its publishes), then waits for every future; it returns
// the durable saves per second and their number.
func asyncSaveFlood50(b *testing.B, ctx context.Context, clients []*checkpoint.Client, pair func(agent, n int) []byte, phase time.Duration) (float64, int64) {
	if path := os.Getenv("CP_BENCH_ASYNC_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		require.NoError(b, err)
		require.NoError(b, pprof.StartCPUProfile(f))
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	var done atomic.Int64
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := checkpoint.Key{Session: fmt.Sprintf("async-%02d-%d", i, start.UnixNano())}
			if _, err := c.Save(ctx, key, pair(i, 0)); err != nil {
				b.Error(err)
				return
			}
			var inFlight []*checkpoint.AppendFuture
			wait := func(f *checkpoint.AppendFuture) bool {
				if _, err := f.Wait(ctx); err != nil {
					b.Error(err)
					return false
				}
				done.Add(1)
				return true
			}
			for n := 1; time.Now().Before(deadline); n++ {
				if len(inFlight) == 256 {
					if !wait(inFlight[0]) {
						return
					}
					inFlight = inFlight[1:]
				}
				inFlight = append(inFlight, c.AppendAsync(ctx, key, pair(i, n)))
			}
			for _, f := range inFlight {
				if !wait(f) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), done.Load()
}

// groupSizes counts the saves per request seen on cp.save.> (a subscriber of its own: it costs
// the server a copy of every request, which counts against checkpointd's side).
type groupSizes struct {
	mu       sync.Mutex
	requests int
	saves    int
	largest  int
}

func watchGroupSizes(b *testing.B, env *testenv.Env) *groupSizes {
	g := &groupSizes{}
	nc := env.Conn()
	_, err := nc.Subscribe(wire.SaveSubjectPrefix+">", func(m *nats.Msg) {
		k := 1
		if s := m.Header.Get(wire.HdrGroup); s != "" {
			k, _ = strconv.Atoi(s)
		}
		g.mu.Lock()
		g.requests++
		g.saves += k
		g.largest = max(g.largest, k)
		g.mu.Unlock()
	})
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	return g
}

func (g *groupSizes) reset() {
	g.mu.Lock()
	g.requests, g.saves, g.largest = 0, 0, 0
	g.mu.Unlock()
}

func (g *groupSizes) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("%d saves in %d requests, %.1f per request on average, at most %d", g.saves, g.requests, float64(g.saves)/float64(max(g.requests, 1)), g.largest)
}

// benchPad is CP_BENCH_PAD, bytes added to each pair's answer (default 0: 330 B pairs; 4400 makes
// them the size of checkpointbench's corpus pairs, 4.7 KB on average).
func benchPad() int {
	n, _ := strconv.Atoi(os.Getenv("CP_BENCH_PAD"))
	return n
}

// benchGroup is CP_BENCH_GROUP, the pairs per append (default 1).
func benchGroup() int {
	if k, err := strconv.Atoi(os.Getenv("CP_BENCH_GROUP")); err == nil && k > 0 {
		return k
	}
	return 1
}

// pairs is the JSON array of the k pairs from the n-th on, one after another.
func pairs(pair func(agent, n int) []byte, agent, n, k int) []byte {
	if k == 1 {
		return pair(agent, n)
	}
	out := []byte{'['}
	for j := range k {
		p := pair(agent, n+j)
		if j > 0 {
			out = append(out, ',')
		}
		out = append(out, p[1:len(p)-1]...)
	}
	return append(out, ']')
}
