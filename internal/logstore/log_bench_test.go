package logstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkLogRange: is a batched read without headers ("no_hdr": true, nats-server ≥ 2.11) worth
// a method of its own? It reads the corpus's sessions as the engine will (every entry of a
// session, as stored by the prototype: 485 saves without packs, or 28 entries with packs of 64
// KiB), interleaved, CP_BENCH_ROUNDS rounds (default 300):
//
//	go test -run '^$' -bench LogRange -benchtime 1x ./internal/logstore/
//
// Variants: Log.Range (headers: each entry's sequence); the same batched direct get by hand, with
// headers and with no_hdr (the data alone); and the prototype's Restore of the head without the
// SHA-256 check (read and decode), to weigh what the saving is worth in a restore.
func BenchmarkLogRange(b *testing.B) {
	c := loadCorpus(b)
	bs := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, bs.s.ClientURL())
	ctx := context.Background()
	rounds := 300
	if s, err := strconv.Atoi(os.Getenv("CP_BENCH_ROUNDS")); err == nil && s > 0 {
		rounds = s
	}
	type session struct {
		name string
		k    wire.Key
		st   *Store
	}
	sessions := []session{
		{name: "485 saves, no packs", k: wire.Key{Namespace: "bench", Session: "nopack", Agent: "main"}, st: open(b, nc, Config{NoPack: true, NoVerify: true})},
		{name: "packs of 64 KiB", k: wire.Key{Namespace: "bench", Session: "packs", Agent: "main"}, st: open(b, nc, Config{NoVerify: true})},
	}
	for _, s := range sessions {
		for i := range c.cuts {
			msgs, _ := c.save(i)
			_, err := s.st.Save(ctx, SaveRequest{Key: s.k, SaveID: fmt.Sprint("s", i), Messages: msgs})
			must(b, err)
			_, err = s.st.Pack(ctx, s.k, false) // packs if due (never with NoPack)
			must(b, err)
		}
	}
	l, err := OpenLog(ctx, nc, LogConfig{})
	must(b, err)
	for _, s := range sessions {
		s.st.Forget()
		k := engine.Key{Namespace: s.k.Namespace, Session: s.k.Session, Agent: s.k.Agent}
		subject := LogSubject(s.k)
		var entries, bytes int
		must(b, l.Range(ctx, k, 0, 0, func(e engine.Entry) bool { entries++; bytes += len(e.Data); return true }))
		byHand := func(noHdr bool) func() {
			return func() {
				n := 0
				_, err := l.directBatchMore(ctx, getRequest{Seq: 1, NextFor: subject, Batch: rangeBatch, MaxBytes: rangeBytes, NoHdr: noHdr},
					func(m msg) bool { n += len(m.data); return true })
				must(b, err)
				if n != bytes {
					b.Fatalf("read %d bytes, not %d", n, bytes)
				}
			}
		}
		variants := []struct {
			what string
			fn   func()
		}{
			{"Log.Range (headers)", func() {
				must(b, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { return true }))
			}},
			{"batch by hand, headers", byHand(false)},
			{"batch by hand, no_hdr", byHand(true)},
			{"prototype Restore of the head (read + decode, CRC-32C)", func() {
				_, _, err := s.st.Restore(ctx, s.k, 0)
				must(b, err)
			}},
		}
		lat := make([][]time.Duration, len(variants))
		for range rounds {
			for _, i := range rand.Perm(len(variants)) { // no variant always follows the same one (GC)
				start := time.Now()
				variants[i].fn()
				lat[i] = append(lat[i], time.Since(start))
			}
		}
		w := table(fmt.Sprintf("Reading a session of %s: %d entries, %d bytes (%s, %d rounds, interleaved)", s.name, entries, bytes, uptime(), rounds))
		fmt.Fprintln(w, "what\tp50\tp99\tp50 / no_hdr")
		base, _ := percentiles(lat[2])
		for i, v := range variants {
			p50, p99 := percentiles(lat[i])
			fmt.Fprintf(w, "%s\t%s\t%s\t%.2f×\n", v.what, ms(p50), ms(p99), float64(p50)/float64(base))
		}
		must(b, w.Flush())
	}
}
