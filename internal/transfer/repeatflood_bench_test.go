package transfer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkSave_RepeatFlood: what a flood of small repeats of appends' save ids, whose bases (a
// conversation of 2 MiB each, in 16 sessions) are no longer the heads, makes the daemon hold. Each
// repeat is ~60 bytes received; comparing it reads its base's whole conversation (repeats of one
// session wait for each other on the session's lock; of several sessions, they run at once).
// Reported: peak-heap-MiB, the most the process's heap in use grew above its level before the
// flood (sampled every millisecond; garbage included), and busy/op, the repeats refused busy (the
// ingest budget is 8 MiB). Before the repeat's read was counted in the budget, every repeat in
// flight held a conversation.
//
//	go test -run '^$' -bench RepeatFlood -benchtime 3x ./internal/transfer/
func BenchmarkSave_RepeatFlood(b *testing.B) {
	env := testenv.Start(b, func(c *transfer.Config) { c.IngestBudgetBytes = 8 << 20 })
	ctx := context.Background()
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	rnd := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 2<<20)
	for i := range text {
		text[i] = 'a' + byte(rnd.IntN(26)) // compresses to ~60%: the entries are large too
	}
	big := []byte(fmt.Sprintf(`[{"role":"user","content":%q}]`, text))
	tail := []byte(`[{"role":"user","content":"the append"}]`)
	const sessions = 16
	keys := make([]wire.Key, sessions)
	for i := range keys {
		key := checkpoint.Key{Session: fmt.Sprint("flood-", i)}
		keys[i] = key.WithDefaults()
		_, err = env.Client.Save(ctx, key, big)
		require.NoError(b, err)
		_, err = env.Client.Append(ctx, key, 1, tail, checkpoint.WithSaveID("y"))
		require.NoError(b, err)
		_, err = env.Client.Append(ctx, key, 2, []byte(`[{"role":"user","content":"later"}]`))
		require.NoError(b, err)
	}
	hdr := nats.Header{wire.HdrBaseVersion: {"1"}}

	var peak, busy int64
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		base := heapNow()
		var top atomic.Int64
		done := make(chan struct{})
		go func() {
			for {
				if h := heapNow() - base; h > top.Load() {
					top.Store(h)
				}
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		var refused atomic.Int64
		for i := range 2 * sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := saveRawHeader(b, nc, js, keys[i%sessions], "request", "y", hdr, tail)
				if res.Error != nil && res.Error.Code == wire.CodeBusy {
					refused.Add(1)
				} else if !res.Duplicate {
					b.Errorf("a repeat: %+v", res.Error)
				}
			}()
		}
		wg.Wait()
		close(done)
		peak = max(peak, top.Load())
		busy += refused.Load()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(busy)/float64(b.N), "busy/op")
}

// heapNow is the heap in use, without a collection first (heapInUse collects).
func heapNow() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
