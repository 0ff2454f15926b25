package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
)

// samples are the durations of one operation, repeated.
type samples []time.Duration

// pct returns the p-th percentile (0 < p ≤ 100), nearest rank.
func (s samples) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(float64(len(c))*p/100+0.5) - 1
	return c[min(max(i, 0), len(c)-1)]
}

// op is one operation to time; setup, outside the timer, prepares the next call.
type op struct {
	name  string
	setup func(i int) error
	run   func(i int) error
}

// interleave runs each op n times, taking turns (the order rotated every iteration, so that none
// always runs right after another), and returns each op's durations. One op's failure ends it.
func interleave(n int, ops ...op) ([]samples, error) {
	out := make([]samples, len(ops))
	for i := range n {
		for k := range ops {
			o := ops[(i+k)%len(ops)]
			if o.setup != nil {
				if err := o.setup(i); err != nil {
					return nil, fmt.Errorf("%s: %w", o.name, err)
				}
			}
			start := time.Now()
			if err := o.run(i); err != nil {
				return nil, fmt.Errorf("%s (iteration %d): %w", o.name, i, err)
			}
			out[(i+k)%len(ops)] = append(out[(i+k)%len(ops)], time.Since(start))
		}
	}
	return out, nil
}

// The zstd encoder and decoder of the raw side: klauspost's default level, as the daemon and SDK use.
var (
	zenc, _ = zstd.NewWriter(nil)
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
)

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func times(x float64) string { return fmt.Sprintf("%.2f×", x) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// size prints a byte count in B, KB or MB (decimal, as the tables).
func size(n int64) string {
	switch {
	case n < 10_000 && n > -10_000:
		return fmt.Sprintf("%d B", n)
	case n < 1_000_000 && n > -1_000_000:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.2f MB", float64(n)/1e6)
}
