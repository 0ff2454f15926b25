package logstore_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/procfs"
)

// BenchmarkGroupCommit: 50 agents, each appending the corpus's messages two at a time to a
// session of its own (the pairs of issue 12's "50 agents" row, 4.7 KB on average), through the
// engine in this process over the JetStream log of an embedded server (no request/reply hop:
// the storage's share of a save), in three phases run in turn, CP_BENCH_ROUNDS rounds (default
// 2) of CP_BENCH_SECONDS each (default 2); the odd rounds append small pairs instead (enginetest's
// messages, ~330 B a pair, as BenchmarkIngest_FiftyAgents in internal/transfer does;
// CP_BENCH_PAIRS=small or corpus: every round):
//
//   - the raw floor: the same pairs' JSON published to a plain stream, asynchronously, each agent
//     keeping up to 256 publishes in flight (the denominator);
//   - Save: one save per pair, each answered after its own compare-and-swap append;
//   - SaveGroup: 8 pairs per group (docs/format.md §8.15m), one entry per group;
//   - the same with FastSaves (zstd's fastest level for the saves; packs unchanged).
//
// Packs run when due, in the agent's goroutine, as the daemon runs them after answering. For each
// phase: operations per second and this process's CPU (the engine, the client and the server)
// per operation; on a shared machine the CPU per operation is the steadier figure, and the
// ratios within one round the ones to compare.
func BenchmarkGroupCommit(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256*agents))
	must(b, err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
	must(b, err)
	l := openLog(b, nc)
	e := engine.New(l, engine.Config{Sessions: 2 * agents})
	fast := engine.New(l, engine.Config{Sessions: 2 * agents, FastSaves: true})
	rounds, seconds := envInt("CP_BENCH_ROUNDS", 2), envInt("CP_BENCH_SECONDS", 2)
	phase := time.Duration(seconds) * time.Second
	for round := range rounds {
		pairs := pairsOf(c)
		if only := os.Getenv("CP_BENCH_PAIRS"); only == "small" || only != "corpus" && round%2 == 1 {
			pairs = smallPairs()
		}
		raw := measure(b, phase, func(a int, stop *atomic.Bool) int { return asyncPublishes(b, js, pairs, a, stop) })
		one := measure(b, phase, func(a int, stop *atomic.Bool) int {
			return saves(b, e, pairs, key(round, "one", a), 1, stop)
		})
		grouped := measure(b, phase, func(a int, stop *atomic.Bool) int {
			return saves(b, e, pairs, key(round, "group", a), groupOf, stop)
		})
		groupedFast := measure(b, phase, func(a int, stop *atomic.Bool) int {
			return saves(b, fast, pairs, key(round, "fast", a), groupOf, stop)
		})
		fmt.Printf("round %d, %d agents, %s each phase (pairs of %d B on average)\n", round+1, agents, phase, pairs.avg)
		for _, p := range []struct {
			name string
			r    phaseResult
		}{{"async publish of the pair", raw}, {"Save, one per pair", one}, {fmt.Sprintf("SaveGroup, %d pairs per group", groupOf), grouped},
			{"… with FastSaves", groupedFast}} {
			fmt.Printf("  %-32s %8.0f /s  %5.1f %% of the publishes/s   CPU %6.1f µs per save  %5.2f× a publish's\n",
				p.name, p.r.rate(), 100*p.r.rate()/raw.rate(), p.r.cpuPer(), p.r.cpuPer()/raw.cpuPer())
		}
	}
}

const (
	agents  = 50
	groupOf = 8
)

// pairs are the corpus's messages two at a time, each as the JSON array an append sends.
type pairList struct {
	p   [][]byte
	avg int
}

func pairsOf(c corpus) pairList {
	var out pairList
	total := 0
	for i := 0; i+2 <= len(c.conv.Messages); i += 2 {
		p := append(append([]byte{'['}, c.conv.Span(i, i+2)...), ']')
		out.p, total = append(out.p, p), total+len(p)
	}
	out.avg = total / len(out.p)
	return out
}

// smallPairs are enginetest's messages two at a time (~330 B a pair).
func smallPairs() pairList {
	var out pairList
	total := 0
	for i := 0; i < 512; i += 2 {
		p := enginetest.Array(i, i+2)
		out.p, total = append(out.p, p), total+len(p)
	}
	out.avg = total / len(out.p)
	return out
}

func key(round int, what string, a int) engine.Key {
	return engine.Key{Namespace: "bench", Session: fmt.Sprintf("%s-%d-%d", what, round, a), Agent: "main"}
}

type phaseResult struct {
	ops     int
	elapsed time.Duration
	cpu     time.Duration
}

func (r phaseResult) rate() float64   { return float64(r.ops) / r.elapsed.Seconds() }
func (r phaseResult) cpuPer() float64 { return float64(r.cpu.Microseconds()) / float64(max(r.ops, 1)) }

// measure runs agent for each of the agents at once for d and returns the operations they did,
// the time and this process's CPU time it took.
func measure(b *testing.B, d time.Duration, agent func(a int, stop *atomic.Bool) int) phaseResult {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var ops atomic.Int64
	cpu0, err := procfs.CPUTime(0)
	must(b, err)
	t0 := time.Now()
	for a := range agents {
		wg.Go(func() { ops.Add(int64(agent(a, &stop))) })
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	cpu1, err := procfs.CPUTime(0)
	must(b, err)
	return phaseResult{ops: int(ops.Load()), elapsed: elapsed, cpu: cpu1 - cpu0}
}

// asyncPublishes publishes agent a's pairs to the plain stream until stop, up to 256 in flight,
// and returns how many were acknowledged.
func asyncPublishes(b *testing.B, js jetstream.JetStream, pairs pairList, a int, stop *atomic.Bool) int {
	subject := "raw." + strconv.Itoa(a)
	inflight := make(chan jetstream.PubAckFuture, 256)
	acked := 0
	wait := func(f jetstream.PubAckFuture) {
		select {
		case <-f.Ok():
			acked++
		case err := <-f.Err():
			must(b, err)
		}
	}
	for i := 0; !stop.Load(); i++ {
		if len(inflight) == cap(inflight) {
			wait(<-inflight)
		}
		f, err := js.PublishAsync(subject, pairs.p[(a+i)%len(pairs.p)])
		must(b, err)
		inflight <- f
	}
	for len(inflight) > 0 {
		wait(<-inflight)
	}
	return acked
}

// saves appends agent a's pairs to k until stop, per saves to a group (1: Save), packing when
// due, and returns how many saves it made.
func saves(b *testing.B, e *engine.Engine, pairs pairList, k engine.Key, per int, stop *atomic.Bool) int {
	v := 0
	for !stop.Load() {
		reqs := make([]engine.SaveRequest, per)
		for i := range reqs {
			reqs[i] = engine.SaveRequest{Key: k, SaveID: fmt.Sprint("s-", v+i), Base: enginetest.U64(uint64(v + i)),
				Payload: pairs.p[(v+i)%len(pairs.p)], Writer: "agent", Now: time.Now()}
		}
		var due bool
		if per == 1 {
			saved, err := e.Save(ctx, reqs[0])
			must(b, err)
			due = saved.PackDue
		} else {
			for _, r := range e.SaveGroup(ctx, reqs) {
				must(b, r.Err)
				due = due || r.Saved.PackDue
			}
		}
		if due {
			_, err := e.Pack(ctx, k, false)
			must(b, err)
		}
		v += per
	}
	return v
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
