package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// FuzzCorruptLog: a session's log with one entry replaced by other bytes (a flipped byte, a cut,
// anything): every operation answers (an error or a result), never a panic.
func FuzzCorruptLog(f *testing.F) {
	f.Add(uint8(0), uint16(10), byte(0xff), uint16(0), false)
	f.Add(uint8(3), uint16(7), byte(0x80), uint16(40), true)
	f.Add(uint8(5), uint16(200), byte(1), uint16(0), false)
	f.Add(uint8(1), uint16(60), byte(0x7f), uint16(3), true)
	img := imageMessage(0, image(25<<10))
	f.Fuzz(func(t *testing.T, which uint8, at uint16, b byte, cut uint16, values bool) {
		// Small entries: the image stays in its piece, which takes parts; larger: it is a value.
		log := memlog.New(4096)
		if values {
			log = memlog.New(64 << 10)
		}
		e := engine.New(log, engine.Config{PackEntries: 3})
		k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
		for i := range 5 {
			if _, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Payload: conversation(2 * (i + 1)), Now: now}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Pack(ctx, k, true); err != nil {
			t.Fatal(err)
		}
		withImage := append(append([]byte(`[`), img...), ']')
		if _, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "img", Epoch: 1, Payload: withImage, Now: now}); err != nil {
			t.Fatal(err)
		}
		fork := engine.Key{Namespace: "n", Session: "fork", Agent: "a"}
		if _, err := e.Fork(ctx, engine.ForkRequest{From: k, Version: 2, To: fork, Now: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "x", Epoch: 1, Payload: conversation(20), Now: now}); err != nil {
			t.Fatal(err)
		}
		var all []engine.Entry
		_ = log.Range(ctx, k, 0, 0, func(en engine.Entry) bool { all = append(all, en); return true })
		// Rebuild the log with entry `which` corrupted.
		_ = log.Purge(ctx, k)
		after := uint64(0)
		for i, en := range all {
			data := en.Data
			if i == int(which)%len(all) {
				data = append([]byte(nil), data...)
				data[int(at)%len(data)] ^= b
				data = data[:len(data)-int(cut)%len(data)]
			}
			seq, err := log.Append(ctx, k, data, after)
			if err != nil {
				t.Fatal(err)
			}
			after = seq
		}
		e.Forget()
		_, _ = e.Head(ctx, k)
		_, _ = e.History(ctx, k)
		_, _, _ = e.HistoryPage(ctx, k, engine.HistoryCursor{}, 2)
		_, _, _ = e.Read(ctx, fork, 0, engine.ReadOptions{Verify: true})
		_, _ = e.Pack(ctx, fork, true)
		for v := range uint64(9) {
			_, _, _ = e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
			_, _, _ = e.ReadZstd(ctx, k, v)
			_, _ = e.Version(ctx, k, v)
		}
		_, _ = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "y", Epoch: 1, Payload: conversation(3), Now: now})
		_, _ = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "z", Epoch: 1, Payload: conversation(30), Now: now})
		_, _ = e.Pack(ctx, k, true)
		_, _ = e.Fork(ctx, engine.ForkRequest{From: k, To: engine.Key{Namespace: "n", Session: "f", Agent: "a"}, Now: now})
		_, _ = e.Prune(ctx, k, engine.Retention{KeepLast: 1}, now, false)
		_, _ = e.SweepValues(ctx, "n")
		_, _ = e.Delete(ctx, k, nil)
	})
}
