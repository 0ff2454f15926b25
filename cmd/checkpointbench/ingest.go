package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// runIngest: many agents saving at once, each appending 2 messages per save, against the same
// agents publishing the same bytes asynchronously to a plain stream (issue 12, first table's last
// row). Each agent has its own connection, as an agent process would; the two sides take turns.
func runIngest(ctx context.Context, b *bench) error {
	d, err := b.startDaemon(ctx, "ingest")
	if err != nil {
		return err
	}
	sc := b.o.scale
	agents := make([]*conn, sc.IngestAgents)
	for i := range agents {
		if agents[i], err = b.connect(d); err != nil {
			return err
		}
	}
	if _, err := agents[0].rawStream(ctx, "ingest"); err != nil {
		return err
	}
	appenders := make([]*appender, len(agents))
	for i, c := range agents {
		appenders[i] = &appender{c: c, conv: b.corpus.large, prefix: fmt.Sprintf("agent%02d", i)}
	}
	var cpRates, rawRates []float64
	var refused int64
	for round := range sc.IngestRounds {
		b.logf("ingest: round %d of %d, %d agents, %s each side", round+1, sc.IngestRounds, len(agents), sc.IngestPhase)
		r, err := saveFlood(ctx, appenders, sc.IngestPhase)
		if err != nil {
			return err
		}
		cpRates = append(cpRates, r)
		r, n, err := publishFlood(ctx, agents, b.corpus.large, sc.IngestPhase)
		if err != nil {
			return err
		}
		rawRates, refused = append(rawRates, r), refused+n
	}
	cp, raw := median(cpRates), median(rawRates)
	t := b.report.add("ingest", fmt.Sprintf("Ingest: %d agents, each appending 2 messages per save", len(agents)),
		"checkpointd", "raw JetStream", "checkpointd saves/s", "async publishes/s", "checkpointd / raw")
	t.row("append 2 messages per save", "async publish of the same bytes", fmt.Sprintf("%.0f", cp), fmt.Sprintf("%.0f", raw), fmt.Sprintf("%.1f %%", 100*cp/raw)).
		check("≥ 50 %", fmt.Sprintf("%.1f %%", 100*cp/raw), cp/raw >= 0.5).value("checkpointd_per_s", cp).value("raw_per_s", raw).value("ratio", cp/raw)
	t.note("median of %d rounds; each round %s of saves (checkpoint.Client.Append, one after another per agent), then %s of "+
		"jetstream.PublishAsync by the same agents on the same connections, every publish acknowledged. Rounds, saves/s: %v; publishes/s: %v.",
		sc.IngestRounds, sc.IngestPhase, sc.IngestPhase, rounded(cpRates), rounded(rawRates))
	t.note("each agent keeps at most %d publishes in flight (nats.go's default, 4000, makes the server refuse some with 429); refused and not counted: %d.",
		maxPendingPublishes, refused)
	return d.stop()
}

// saveFlood has every appender append pairs one save after another for the phase; it returns the
// saves per second, counting the saves that finished within it.
func saveFlood(ctx context.Context, appenders []*appender, phase time.Duration) (float64, error) {
	var done atomic.Int64
	errs := make(chan error, len(appenders))
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for _, a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := a.prepare(ctx); err != nil {
					errs <- err
					return
				}
				if err := a.append(ctx); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// publishFlood has every agent publish pairs asynchronously for the phase, then waits for every
// acknowledgement; it returns the acknowledged publishes per second, waiting included, and how
// many the server refused (a server past its limit of publishes in flight says 429: not counted).
func publishFlood(ctx context.Context, agents []*conn, conv conversation, phase time.Duration) (float64, int64, error) {
	var acked, refused atomic.Int64
	errs := make(chan error, len(agents))
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := fmt.Sprintf("bench.ingest.agent%02d", i)
			var futures []jetstream.PubAckFuture
			for n := 0; time.Now().Before(deadline); n++ {
				f, err := c.js.PublishAsync(subject, conv.pair(n), jetstream.WithStallWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				futures = append(futures, f)
			}
			for _, f := range futures {
				select {
				case <-f.Ok():
					acked.Add(1)
				case <-f.Err():
					refused.Add(1)
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	if acked.Load() == 0 {
		return 0, refused.Load(), fmt.Errorf("none of %d publishes was acknowledged", refused.Load())
	}
	return float64(acked.Load()) / time.Since(start).Seconds(), refused.Load(), nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}
