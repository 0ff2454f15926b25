package engine_test

import (
	"fmt"
	"os"
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
