package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/procfs"
)

// runIngest: many agents saving at once, each appending 2 messages per save, against the same
// agents publishing the same bytes to a plain stream (issue 12, first table's last row): once
// asynchronously (the target row) and once synchronously, each agent waiting for every
// ack before its next publish, as it waits for every save. Each agent has its own connection, as
// an agent process would; the phases take turns: saves one after another, async publishes, async
// publishes after the work a save must do (saveWork: the target row's floor), sync publishes, and
// the same appends with AppendAsync (ingest_async.go), the row the target is read from.
// The CPU each save and each publish cost, agents, daemon and its server together, is printed
// beside the rates: on a shared machine it is the steadier figure.
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
	cpu := cpuMeter{pid: d.pid()}
	var cp, async, worked, syncPub, grouped phases
	var refused int64
	groups := "none yet"
	for round := range sc.IngestRounds {
		b.logf("ingest: round %d of %d, %d agents, %s each side", round+1, sc.IngestRounds, len(agents), sc.IngestPhase)
		if err := cp.measure(cpu, func() (int64, time.Duration, error) { return saveFlood(ctx, appenders, sc.IngestPhase) }); err != nil {
			return err
		}
		var n int64
		if err := async.measure(cpu, func() (acked int64, took time.Duration, err error) {
			acked, n, took, err = publishFlood(ctx, agents, b.corpus.large, sc.IngestPhase, nil)
			return acked, took, err
		}); err != nil {
			return err
		}
		refused += n
		if err := worked.measure(cpu, func() (acked int64, took time.Duration, err error) {
			acked, n, took, err = publishFlood(ctx, agents, b.corpus.large, sc.IngestPhase, saveWork)
			return acked, took, err
		}); err != nil {
			return err
		}
		refused += n
		if err := syncPub.measure(cpu, func() (int64, time.Duration, error) {
			return syncPublishFlood(ctx, agents, b.corpus.large, sc.IngestPhase)
		}); err != nil {
			return err
		}
		before, err := scrapeRequestSaves(d.httpAddr)
		if err != nil {
			return err
		}
		b.logf("ingest: AppendAsync for %s", sc.IngestPhase)
		if err := grouped.measure(cpu, func() (int64, time.Duration, error) {
			return asyncSaveFlood(ctx, agents, b.corpus.large, sc.IngestPhase, round)
		}); err != nil {
			return err
		}
		after, err := scrapeRequestSaves(d.httpAddr)
		if err != nil {
			return err
		}
		groups = after.since(before)
		b.logf("ingest: AppendAsync, groups: %s", groups)
	}
	t := b.report.add("ingest", fmt.Sprintf("Ingest: %d agents, each appending 2 messages per save", len(agents)),
		"checkpointd", "raw JetStream", "checkpointd saves/s", "raw publishes/s", "checkpointd / raw", "CPU per save / per publish")
	row := func(what, raw string, cp, r phases) *row {
		ratio := cp.rate() / r.rate()
		return t.row(what, raw, fmt.Sprintf("%.0f", cp.rate()), fmt.Sprintf("%.0f", r.rate()),
			fmt.Sprintf("%.1f %%", 100*ratio), fmt.Sprintf("%s / %s = %.1f×", micros(cp.cpuPerOp()), micros(r.cpuPerOp()), float64(cp.cpuPerOp())/float64(r.cpuPerOp()))).
			value("checkpointd_per_s", cp.rate()).value("raw_per_s", r.rate()).value("ratio", ratio).
			value("checkpointd_cpu_seconds_per_save", cp.cpuPerOp().Seconds()).value("raw_cpu_seconds_per_publish", r.cpuPerOp().Seconds())
	}
	const oneByOne = "append 2 messages per save, one after another"
	asyncRatio := grouped.rate() / async.rate()
	workedRatio := worked.rate() / async.rate()
	row("append 2 messages per save, AppendAsync (≤ 256 in flight per agent, group commit)", "async publish of the same bytes", grouped, async).
		check("≥ 50 %", fmt.Sprintf("%.1f %%", 100*asyncRatio), asyncRatio >= 0.5).
		floor("async publish after the work a save must do (validated, hashed, compressed, in the agents): %.1f %%", 100*workedRatio).
		value("floor_ratio", workedRatio)
	row("  async publish after the work a save must do", "async publish of the same bytes", worked, async)
	row(oneByOne, "async publish of the same bytes", cp, async)
	row(oneByOne, "sync publish of the same bytes, one after another per agent", cp, syncPub)
	t.note("the target row: each agent calls checkpoint.Client.AppendAsync without waiting, at most %d appends in flight, "+
		"as it keeps its async publishes; the client sends the appends of a session that queue while one request is in "+
		"flight as the next request (docs/protocol.md §4.0.1), each counted once durable. Rounds, saves/s: %v. Groups "+
		"in the last round (the daemon's save_request_saves, read from its /metrics before and after): %s.",
		maxPendingPublishes, rounded(grouped.rates), groups)
	t.note("median of %d rounds; each round %s of saves (checkpoint.Client.Append, one after another per agent), then %s of "+
		"jetstream.PublishAsync by the same agents on the same connections, every publish acknowledged, then %s of the same "+
		"after the work a save must do, then %s of "+
		"jetstream.Publish, each agent waiting for every ack before its next publish, as it waits for every save, then %s "+
		"of AppendAsync (the target row). "+
		"Rounds, saves/s: %v; async publishes/s: %v; after the work: %v; sync publishes/s: %v.",
		sc.IngestRounds, sc.IngestPhase, sc.IngestPhase, sc.IngestPhase, sc.IngestPhase, sc.IngestPhase,
		rounded(cp.rates), rounded(async.rates), rounded(worked.rates), rounded(syncPub.rates))
	t.note("each phase starts on a settled daemon and ends once it has settled again (under %s of its CPU in %s, at most %s "+
		"of waiting), the work it does after the phase's last acknowledgement counted in that phase's CPU: per round, one "+
		"after another %v, async publish %v, after the work %v, sync publish %v, AppendAsync %v.",
		settledCPU, settleWindow, settleMost, millis(cp.left), millis(async.left), millis(worked.left), millis(syncPub.left), millis(grouped.left))
	t.note("CPU per save or publish: the CPU time of the checkpointd process (daemon and its embedded server) and of this " +
		"process (the agents) during the phase and until the daemon settled, over the saves or publishes acknowledged in it; median of the rounds.")
	t.note("the work a save must do, done by each agent before its async publish: the pair validated as the daemon " +
		"validates a save (internal/codec), its SHA-256, and zstd at the fastest level (what the daemon stores of a group), " +
		"the compressed bytes published. No engine built on these parts does less for a save; what it adds is the " +
		"request, the version and the reply.")
	t.note("each agent keeps at most %d publishes in flight (nats.go's default, 4000, makes the server refuse some with 429); refused and not counted: %d.",
		maxPendingPublishes, refused)
	return d.stop()
}

// saveWork makes an agent's work function for the floor phase: a pair validated as the daemon
// validates a save, hashed (SHA-256) and compressed as the daemon compresses a session's saves
// (zstd at the fastest level, one stream per agent continued across its pairs, flushed after each:
// 13.9 µs a corpus pair here, against 18.1 for a frame of its own and 8.5 in groups of 56, the
// daemon's group commit); what the flush wrote is what is published.
func saveWork() (func([]byte) ([]byte, error), error) {
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, err
	}
	return func(pair []byte) ([]byte, error) {
		if _, err := codec.Parse(pair); err != nil {
			return nil, err
		}
		_ = sha256.Sum256(pair)
		out.Reset()
		if _, err := enc.Write(pair); err != nil {
			return nil, err
		}
		if err := enc.Flush(); err != nil {
			return nil, err
		}
		return bytes.Clone(out.Bytes()), nil
	}, nil
}

// cpuMeter reads the CPU time the daemon (pid) and this process have used so far.
type cpuMeter struct{ pid int }

func (m cpuMeter) read() (time.Duration, error) {
	d, err := procfs.CPUTime(m.pid)
	if err != nil {
		return 0, err
	}
	self, err := procfs.CPUTime(0)
	return d + self, err
}

// A phase starts on a settled daemon, and ends once the daemon has settled again: settled is
// having used under settledCPU of CPU in the last settleWindow (or settleMost has passed). The
// daemon keeps working after a phase's saves are acknowledged (its packer writes their pieces:
// ~3.7 s of CPU after 3 s of AppendAsync, ~0.8 s after 3 s of one-after-another saves). That work is
// the phase's own: it is counted in its CPU per operation, not in the next phase's, which it also
// slowed (docs/format.md §8.15r). The rates count the phase's time only, its saves durable.
const (
	settleWindow = 100 * time.Millisecond
	settledCPU   = 5 * time.Millisecond // 5 % of one core
	settleMost   = 15 * time.Second
)

// settle waits until the daemon is settled; it returns how long that took and the CPU the daemon
// used meanwhile.
func (m cpuMeter) settle() (waited, spent time.Duration, err error) {
	start := time.Now()
	first, err := procfs.CPUTime(m.pid)
	if err != nil {
		return 0, 0, err
	}
	last := first
	for time.Since(start) < settleMost {
		time.Sleep(settleWindow)
		now, err := procfs.CPUTime(m.pid)
		if err != nil {
			return 0, 0, err
		}
		busy := now - last
		last = now
		if busy < settledCPU {
			break
		}
	}
	return time.Since(start), last - first, nil
}

// phases is what one side of the ingest comparison measured, a phase per round.
type phases struct {
	rates []float64       // operations acknowledged per second
	cpu   []time.Duration // CPU time per operation
	left  []time.Duration // the daemon's CPU after the phase, until it settled (in cpu)
}

// measure runs one phase from a settled daemon until it has settled again, run returning the
// operations acknowledged and how long they took.
func (p *phases) measure(m cpuMeter, run func() (int64, time.Duration, error)) error {
	if _, _, err := m.settle(); err != nil { // what setting up left: no phase's
		return err
	}
	before, err := m.read()
	if err != nil {
		return err
	}
	n, took, err := run()
	if err != nil {
		return err
	}
	_, left, err := m.settle()
	if err != nil {
		return err
	}
	p.left = append(p.left, left)
	after, err := m.read()
	if err != nil {
		return err
	}
	p.rates = append(p.rates, float64(n)/took.Seconds())
	p.cpu = append(p.cpu, (after-before)/time.Duration(max(n, 1)))
	return nil
}

func (p phases) rate() float64 { return median(p.rates) }

func (p phases) cpuPerOp() time.Duration {
	xs := make([]float64, len(p.cpu))
	for i, d := range p.cpu {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

// millis formats durations as milliseconds, for a note.
func millis(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return out
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// saveFlood has every appender append pairs one save after another for the phase; it returns the
// saves made and how long they took.
func saveFlood(ctx context.Context, appenders []*appender, phase time.Duration) (int64, time.Duration, error) {
	return oneAfterAnother(len(appenders), phase, func(i, _ int) error {
		if err := appenders[i].prepare(ctx); err != nil {
			return err
		}
		return appenders[i].append(ctx)
	})
}

// oneAfterAnother runs op for each of n agents in a loop of its own until the phase is over, each
// call after the one before returned (op(agent, call)); it returns the calls that succeeded and how
// long they all took. An agent stops at its first error, which is returned.
func oneAfterAnother(n int, phase time.Duration, op func(agent, call int) error) (int64, time.Duration, error) {
	var done atomic.Int64
	errs := make(chan error, n)
	deadline := time.Now().Add(phase)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for call := 0; time.Now().Before(deadline); call++ {
				if err := op(i, call); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return done.Load(), took, nil
}

// publishFlood has every agent publish pairs asynchronously for the phase, then waits for every
// acknowledgement; it returns the acknowledged publishes, how many the server refused (a server
// past its limit of publishes in flight says 429: not counted) and how long they took, waiting
// included. newWork, when not nil, makes each agent's own work function, which turns a pair into
// the bytes published (saveWork).
func publishFlood(ctx context.Context, agents []*conn, conv conversation, phase time.Duration, newWork func() (func([]byte) ([]byte, error), error)) (int64, int64, time.Duration, error) {
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
			do := func(p []byte) ([]byte, error) { return p, nil }
			if newWork != nil {
				var err error
				if do, err = newWork(); err != nil {
					errs <- err
					return
				}
			}
			var futures []jetstream.PubAckFuture
			for n := 0; time.Now().Before(deadline); n++ {
				data, err := do(conv.pair(n))
				if err != nil {
					errs <- err
					return
				}
				f, err := c.js.PublishAsync(subject, data, jetstream.WithStallWait(time.Minute))
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
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, 0, err
	}
	if acked.Load() == 0 {
		return 0, refused.Load(), 0, fmt.Errorf("none of %d publishes was acknowledged", refused.Load())
	}
	return acked.Load(), refused.Load(), took, nil
}

// syncPublishFlood has every agent publish pairs one after another for the phase, each waiting
// for its ack before the next (jetstream.Publish), as an agent waits for every save; it returns
// the publishes acknowledged and how long they took.
func syncPublishFlood(ctx context.Context, agents []*conn, conv conversation, phase time.Duration) (int64, time.Duration, error) {
	subjects := make([]string, len(agents))
	for i := range agents {
		subjects[i] = fmt.Sprintf("bench.ingest.sync%02d", i)
	}
	return oneAfterAnother(len(agents), phase, func(i, n int) error {
		_, err := agents[i].js.Publish(ctx, subjects[i], conv.pair(n))
		return err
	})
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
