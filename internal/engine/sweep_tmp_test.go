package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

func BenchmarkTmpSweep(b *testing.B) {
	c, cuts := loadCorpus(b)
	whole := c.Encode()
	enc, _ := zstd.NewWriter(nil)
	frame := enc.EncodeAll(whole, nil)
	dec, _ := zstd.NewReader(nil)
	for _, p := range []struct {
		name string
		cfg  engine.Config
	}{
		{"default", engine.Config{}},
		{"nopack", engine.Config{NoPack: true}},
		{"256K/128", engine.Config{PackEntries: 128}},
		{"256K/64", engine.Config{PackEntries: 64}},
		{"128K/128", engine.Config{PackBytes: 128 << 10, PackEntries: 128}},
		{"64K/64", engine.Config{PackBytes: 64 << 10, PackEntries: 64}},
		{"open 256K/64", engine.Config{PackEntries: 64, PackOpen: true}},
		{"open 256K/32", engine.Config{PackEntries: 32, PackOpen: true}},
	} {
		mem := memlog.New(1 << 20)
		log := &writeCounter{Log: mem}
		e := engine.New(log, p.cfg)
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
		n := 0
		_ = mem.Range(ctx, k, 0, 0, func(en engine.Entry) bool { n++; return true })
		var td, tr time.Duration
		for range 30 {
			t0 := time.Now()
			_, _ = dec.DecodeAll(frame, make([]byte, 0, len(whole)))
			t1 := time.Now()
			if _, _, err := e.Read(ctx, k, 0, engine.ReadOptions{}); err != nil {
				b.Fatal(err)
			}
			td, tr = td+t1.Sub(t0), tr+time.Since(t1)
		}
		fmt.Printf("%-14s written %7d (%.2fx zstd %d) entries %3d read/decode %.2f\n", p.name, log.bytes, float64(log.bytes)/float64(len(frame)), len(frame), n, float64(tr)/float64(td))
	}
}
