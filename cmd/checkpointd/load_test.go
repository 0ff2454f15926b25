package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// BenchmarkLoad_Agents runs hundreds of simulated agents against one checkpointd process on
// loopback for a bounded time. Each agent works through a real transcript: per turn it appends two
// messages (every tenth turn it saves the whole array instead), restores its head every third turn,
// and every seventh turn sends a stale append on purpose, which must be refused as a conflict. It
// reports throughput, p50/p99 latencies, errors by kind (any error other than the intended
// conflicts and busy fails the benchmark) and the daemon's peak RSS (VmHWM, Linux).
//
//	go test -run '^$' -bench BenchmarkLoad_Agents ./cmd/checkpointd/
//	CHECKPOINTD_LOAD_AGENTS=500 CHECKPOINTD_LOAD_SECONDS=60 go test -run '^$' -bench BenchmarkLoad_Agents ./cmd/checkpointd/
func BenchmarkLoad_Agents(b *testing.B) {
	agents := envInt(b, "CHECKPOINTD_LOAD_AGENTS", 300)
	duration := time.Duration(envInt(b, "CHECKPOINTD_LOAD_SECONDS", 20)) * time.Second
	p := newDaemonProc(b)
	p.start()
	idle := peakRSSOf(p.pid())
	corpus := corpusMessages(b)

	// A few connections shared by all agents, as agent processes on a few hosts would.
	clients := make([]*checkpoint.Client, 8)
	for i := range clients {
		c, err := checkpoint.Connect(p.url(), []nats.Option{nats.MaxReconnects(-1)})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}

	var st loadStats
	st.errors = map[string]int{}
	b.ResetTimer()
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for a := 0; a < agents; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runAgent(clients[a%len(clients)], a, corpus[a%len(corpus)], deadline, &st)
		}()
	}
	wg.Wait()
	elapsed := duration.Seconds()
	b.StopTimer()
	peak := peakRSSOf(p.pid())

	saves, restores := st.sorted()
	b.ReportMetric(float64(agents), "agents")
	b.ReportMetric(float64(len(saves))/elapsed, "saves/s")
	b.ReportMetric(float64(len(restores))/elapsed, "restores/s")
	b.ReportMetric(ms(quantile(saves, 0.50)), "save_p50_ms")
	b.ReportMetric(ms(quantile(saves, 0.99)), "save_p99_ms")
	b.ReportMetric(ms(quantile(restores, 0.50)), "restore_p50_ms")
	b.ReportMetric(ms(quantile(restores, 0.99)), "restore_p99_ms")
	b.ReportMetric(float64(st.conflicts), "conflicts_intended")
	b.ReportMetric(float64(st.busy), "busy")
	b.ReportMetric(float64(idle)/(1<<20), "idle_rss_MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MiB")
	b.Logf("%d agents for %v: %d saves, %d restores (%d bytes restored), %d intended conflicts, %d busy, errors %v",
		agents, duration, len(saves), len(restores), st.restoredBytes, st.conflicts, st.busy, st.errors)
	if len(st.errors) > 0 {
		b.Fatalf("errors other than intended conflicts and busy: %v", st.errors)
	}
}

// loadStats gathers what the agents measured.
type loadStats struct {
	mu              sync.Mutex
	saves, restores []time.Duration
	conflicts, busy int
	restoredBytes   int64
	errors          map[string]int // by operation and code, for errors that should not happen
}

func (s *loadStats) add(save, restore []time.Duration, conflicts, busy int, restored int64, errs map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves = append(s.saves, save...)
	s.restores = append(s.restores, restore...)
	s.conflicts += conflicts
	s.busy += busy
	s.restoredBytes += restored
	for k, n := range errs {
		s.errors[k] += n
	}
}

func (s *loadStats) sorted() ([]time.Duration, []time.Duration) {
	slices.Sort(s.saves)
	slices.Sort(s.restores)
	return s.saves, s.restores
}

// runAgent is one agent until deadline: sessions one after another, each a walk through msgs.
func runAgent(c *checkpoint.Client, a int, msgs []json.RawMessage, deadline time.Time, st *loadStats) {
	var saves, restores []time.Duration
	var conflicts, busy int
	var restored int64
	errs := map[string]int{}
	fail := func(what string, err error) {
		var ce *checkpoint.Error
		code := "other"
		if errors.As(err, &ce) {
			code = ce.Code
		}
		errs[what+":"+code]++
	}
	ctx := context.Background()
	msgs = msgs[:min(len(msgs), 80)]
	for s := 0; time.Now().Before(deadline); s++ {
		key := checkpoint.Key{Namespace: "load", Session: fmt.Sprintf("agent-%d-%d", a, s)}
		var head uint64
		for n, turn := 2, 1; n <= len(msgs) && time.Now().Before(deadline); n, turn = n+2, turn+1 {
			start := time.Now()
			var v checkpoint.Version
			var err error
			if turn%10 == 0 {
				v, err = c.Save(ctx, key, indented(msgs[:n]))
			} else {
				v, err = c.Append(ctx, key, head, joinMessages(msgs[n-2:n]))
			}
			switch {
			case err == nil:
				saves = append(saves, time.Since(start))
				head = v.Version
			case errors.Is(err, checkpoint.ErrBusy):
				busy++
				n -= 2 // the same turn again
				time.Sleep(max(retryAfter(err), 10*time.Millisecond))
				continue
			default:
				fail("save", err)
				n -= 2
				continue
			}
			if turn%7 == 0 && head > 1 {
				_, err := c.Append(ctx, key, head-1, joinMessages(msgs[n-2:n]))
				switch {
				case errors.Is(err, checkpoint.ErrConflict):
					conflicts++
				case errors.Is(err, checkpoint.ErrBusy):
					busy++
				case err == nil:
					errs["stale append accepted"]++
				default:
					fail("stale append", err)
				}
			}
			if turn%3 == 0 {
				start := time.Now()
				conv, _, err := c.Restore(ctx, key, 0)
				switch {
				case err == nil:
					restores = append(restores, time.Since(start))
					restored += int64(len(conv))
				case errors.Is(err, checkpoint.ErrBusy):
					busy++
				default:
					fail("restore", err)
				}
			}
		}
	}
	st.add(saves, restores, conflicts, busy, restored, errs)
}

func retryAfter(err error) time.Duration {
	var ce *checkpoint.Error
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
