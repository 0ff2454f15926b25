package engine_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// The engine's own cost on the corpus, on the in-memory log (no storage, no network): what a save
// and a restore cost the daemon's CPU beside the JetStream operations of docs/format.md §8.15.
//
//	go test -run '^$' -bench . -benchtime 3x ./internal/engine/
func loadCorpus(b *testing.B) (*codec.Conversation, []int) {
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		b.Fatal(err)
	}
	c, err := codec.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	return c, cuts
}

// BenchmarkSave: every turn of the corpus saved as an append (validation included), packs run
// after the saves that make them due; per save, against zstd alone on the same bytes.
func BenchmarkSave(b *testing.B) {
	c, cuts := loadCorpus(b)
	payloads := make([][]byte, len(cuts))
	for i := range cuts {
		from := 0
		if i > 0 {
			from = cuts[i-1]
		}
		payloads[i] = append(append([]byte{'['}, c.Span(from, cuts[i])...), ']')
	}
	var engineTime, packTime, zstdTime time.Duration
	var written, live int64
	for n := range b.N {
		mem := memlog.New(1 << 20)
		log := &writeCounter{Log: mem}
		e := engine.New(log, engine.Config{})
		k := engine.Key{Namespace: "b", Session: fmt.Sprint(n), Agent: "a"}
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		for i, p := range payloads {
			start := time.Now()
			s, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Base: u64(uint64(i)), Payload: p, Now: now})
			engineTime += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			start = time.Now()
			if s.PackDue {
				if _, err := e.Pack(ctx, k, false); err != nil {
					b.Fatal(err)
				}
			}
			packTime += time.Since(start)
			start = time.Now()
			_ = enc.EncodeAll(p, nil)
			zstdTime += time.Since(start)
		}
		written += log.bytes
		_ = mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool { live += int64(len(en.Data)); return true })
	}
	final, _ := zstd.NewWriter(nil)
	zfinal := float64(len(final.EncodeAll(c.Encode(), nil)) * b.N)
	b.ReportMetric(float64(written)/zfinal, "written/zstd(final)")
	b.ReportMetric(float64(live)/zfinal, "live/zstd(final)")
	saves := float64(b.N * len(payloads))
	b.ReportMetric(float64(engineTime.Nanoseconds())/saves, "ns/save")
	b.ReportMetric(float64(packTime.Nanoseconds())/saves, "ns-pack/save")
	b.ReportMetric(float64(engineTime)/float64(zstdTime), "save/zstd")
}

// BenchmarkRead: the head (2.3 MB, 485 versions, default packs) restored, SHA-256 checked or not,
// and as zstd (stored frames passed through), against one zstd decode of the whole conversation.
func BenchmarkRead(b *testing.B) {
	c, cuts := loadCorpus(b)
	e := engine.New(memlog.New(1<<20), engine.Config{})
	k := engine.Key{Namespace: "b", Session: "s", Agent: "a"}
	for i := range cuts {
		from := 0
		if i > 0 {
			from = cuts[i-1]
		}
		s, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Base: u64(uint64(i)),
			Payload: append(append([]byte{'['}, c.Span(from, cuts[i])...), ']'), Now: now})
		if err != nil {
			b.Fatal(err)
		}
		if s.PackDue {
			if _, err := e.Pack(ctx, k, false); err != nil {
				b.Fatal(err)
			}
		}
	}
	whole := c.Encode()
	enc, _ := zstd.NewWriter(nil)
	frame := enc.EncodeAll(whole, nil)
	dec, _ := zstd.NewReader(nil)
	var times [4]time.Duration
	for range b.N {
		for i, f := range []func() error{
			func() error { _, err := dec.DecodeAll(frame, make([]byte, 0, len(whole))); return err },
			func() error { _, _, err := e.Read(ctx, k, 0, engine.ReadOptions{}); return err },
			func() error { _, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true}); return err },
			func() error { _, _, err := e.ReadZstd(ctx, k, 0); return err },
		} {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			times[i] += time.Since(start)
		}
	}
	b.ReportMetric(float64(times[1])/float64(times[0]), "read/zstd")
	b.ReportMetric(float64(times[2])/float64(times[0]), "verified/zstd")
	b.ReportMetric(float64(times[3])/float64(times[0]), "readzstd/zstd")
	b.ReportMetric(float64(times[1].Microseconds())/float64(b.N), "µs/read")
}

// writeCounter counts the bytes appended to a log.
type writeCounter struct {
	engine.Log
	bytes int64
}

func (w *writeCounter) Append(cx ctxT, k engine.Key, data []byte, after uint64) (uint64, error) {
	w.bytes += int64(len(data))
	return w.Log.Append(cx, k, data, after)
}

// BenchmarkSaveGroup: the corpus's messages appended two at a time (the pairs of issue 12's "50
// agents" row), eight pairs per SaveGroup (docs/format.md §8.15m), packs run when due; per save,
// the group's CPU and the packs', and what was written and is left against zstd(final). One
// session on the in-memory log: the engine's own share of BenchmarkGroupCommit
// (internal/logstore), without the server (docs/format.md §8.15p). Times are the process's CPU
// (getrusage, garbage collection included), steadier than the wall clock on a shared machine.
func BenchmarkSaveGroup(b *testing.B) {
	c, _ := loadCorpus(b)
	var pairs [][]byte
	for i := 0; i+2 <= len(c.Messages); i += 2 {
		pairs = append(pairs, append(append([]byte{'['}, c.Span(i, i+2)...), ']'))
	}
	per := 8
	if v, err := strconv.Atoi(os.Getenv("CP_BENCH_PER")); err == nil {
		per = v
	}
	var groupTime, packTime time.Duration // CPU
	var written, live int64
	for n := range b.N {
		mem := memlog.New(1 << 20)
		log := &writeCounter{Log: mem}
		e := engine.New(log, engine.Config{})
		k := engine.Key{Namespace: "b", Session: fmt.Sprint(n), Agent: "a"}
		for v := 0; v+per <= len(pairs); v += per {
			reqs := make([]engine.SaveRequest, per)
			for i := range reqs {
				reqs[i] = engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v + i), Base: u64(uint64(v + i)), Payload: pairs[v+i], Now: now}
			}
			start := cpuNow(b)
			results := e.SaveGroup(ctx, reqs)
			groupTime += cpuNow(b) - start
			due := false
			for _, r := range results {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				due = due || r.Saved.PackDue
			}
			if due {
				start = cpuNow(b)
				if _, err := e.Pack(ctx, k, false); err != nil {
					b.Fatal(err)
				}
				packTime += cpuNow(b) - start
			}
		}
		written += log.bytes
		_ = mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool { live += int64(len(en.Data)); return true })
	}
	final, _ := zstd.NewWriter(nil)
	saves := float64(b.N * (len(pairs) / per * per))
	whole := append(append([]byte{'['}, c.Span(0, int(saves)/b.N*2)...), ']')
	zfinal := float64(len(final.EncodeAll(whole, nil)) * b.N)
	b.ReportMetric(float64(written)/zfinal, "written/zstd(final)")
	b.ReportMetric(float64(live)/zfinal, "live/zstd(final)")
	b.ReportMetric(float64(groupTime.Nanoseconds())/saves, "cpu-ns/save")
	b.ReportMetric(float64(packTime.Nanoseconds())/saves, "cpu-ns-pack/save")
}

// cpuNow is the CPU time this process has used (user and system, all threads).
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
