package sealing_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/sealing"
)

// BenchmarkSealedEngine is what --namespace-keys costs the log engine on the embedded server, as a
// ratio taken in one run: the same operation in a namespace with a key and in one without, through
// the same sealing.Log on the same stream, interleaved (plain, sealed, plain, …) so that the
// machine's load falls on both alike. save: the corpus saved one assistant turn at a time (appends,
// packed when due, as the daemon does), a session per pass; read: a cold read (the engine's cache
// dropped) of the head of the corpus saved whole.
//
//	go test -run '^$' -bench SealedEngine -benchtime 3x -count 2 ./internal/sealing/
func BenchmarkSealedEngine(b *testing.B) {
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(b, err)
	c, err := codec.Parse(raw)
	require.NoError(b, err)
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	cuts = append(cuts, len(c.Messages))
	span := func(from, to int) []byte { return append(append([]byte{'['}, c.Span(from, to)...), ']') }

	nc, _, _ := startServer(b)
	l := sealing.NewLog(openLog(b, nc, false), keysOf(b, map[string]any{"sealed": newKey()}))
	e := engine.New(l, engine.Config{})
	ctx := b.Context()

	whole, sessions := span(0, len(c.Messages)), 0
	b.Run("save", func(b *testing.B) {
		interleave(b, func(ns string, i int) {
			sessions++
			k := engine.Key{Namespace: ns, Session: fmt.Sprint("save-", sessions), Agent: "main"}
			from := 0
			for v, to := range cuts {
				if to == from {
					continue
				}
				base := uint64(v)
				s, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(v), Base: &base, Payload: span(from, to), Now: time.Now()})
				if err != nil {
					b.Fatal(err)
				}
				from = to
				if s.PackDue {
					if _, err := e.Pack(ctx, k, false); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	})
	b.Run("read", func(b *testing.B) {
		for _, ns := range []string{"plain", "sealed"} {
			_, err := e.Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: ns, Session: "read", Agent: "main"},
				SaveID: "whole", Payload: whole, Now: time.Now()})
			require.NoError(b, err)
		}
		interleave(b, func(ns string, i int) {
			e.Forget()
			got, _, err := e.Read(ctx, engine.Key{Namespace: ns, Session: "read", Agent: "main"}, 0, engine.ReadOptions{})
			if err != nil || len(got) != len(whole) {
				b.Fatal(err, len(got))
			}
		})
	})
}

// interleave runs op in the plain and the sealed namespace in turn, b.N times each, and reports
// the mean time of each and their ratio.
func interleave(b *testing.B, op func(ns string, i int)) {
	var plain, sealed time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		op("plain", i)
		plain += time.Since(start)
		start = time.Now()
		op("sealed", i)
		sealed += time.Since(start)
	}
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "plain-ns/op")
	b.ReportMetric(float64(sealed.Nanoseconds())/float64(b.N), "sealed-ns/op")
	b.ReportMetric(float64(sealed)/float64(plain), "sealed/plain")
}
