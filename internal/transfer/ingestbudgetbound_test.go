package transfer_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// One save sent alone may hold past the ingest budget (it is the oldest, which is never held back,
// so that a save larger than the budget goes through): its bytes as received, its body twice (read
// into growing blocks, never sized from what the client declares, then joined into one buffer) and
// the window of each zstd decoder it runs, reserved before decoding: what its frames declare, up to
// 8 MiB, plus 512 KiB, for each run of frames decoded at once (at most 4). A 2 MiB zstd bomb of 77
// bytes held 6.8 MB (3.2 times --max-checkpoint-bytes), where the budget's comment and
// docs/format.md said one --max-checkpoint-bytes; the docs now give this bound, and this test pins
// it, for the worst frames a client can choose: a single-segment frame (window = its content), a
// frame declaring an 8 MiB window, and a body of several frames decoded at once.
func TestIngestBudget_OneSaveHoldsAtMostItsBodyTwiceAndItsWindows(t *testing.T) {
	const maxBytes, budget = 2 << 20, 1 << 20
	const window = codec.MaxBodyWindow + 512<<10 // a decoder's reservation at most
	frame := func(size int, opts ...zstd.EOption) []byte {
		enc, err := zstd.NewWriter(nil, append([]zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedBestCompression)}, opts...)...)
		require.NoError(t, err)
		return enc.EncodeAll(make([]byte, size), nil)
	}
	// A frame written as a stream declares no content size, and the encoder's window: 8 MiB.
	streamed := func(size int) []byte {
		var b bytes.Buffer
		enc, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(codec.MaxBodyWindow))
		require.NoError(t, err)
		_, err = enc.Write(make([]byte, size))
		require.NoError(t, err)
		require.NoError(t, enc.Close())
		var h zstd.Header
		require.NoError(t, h.Decode(b.Bytes()))
		require.EqualValues(t, codec.MaxBodyWindow, h.WindowSize)
		require.False(t, h.HasFCS)
		return b.Bytes()
	}
	var fourFrames, fourStreamed []byte
	for range 4 {
		fourFrames = append(fourFrames, frame(maxBytes/4-256)...)
		fourStreamed = append(fourStreamed, streamed(maxBytes/4-256)...)
	}
	for _, c := range []struct {
		name    string
		body    []byte
		windows int // decoders run at once
	}{
		{"single-segment frame", frame(maxBytes - 1024), 1},
		{"8 MiB window declared", streamed(maxBytes - 1024), 1},
		{"four frames", fourFrames, 4},
		{"four frames, 8 MiB windows", fourStreamed, 4},
		{"one byte too many", frame(maxBytes + 1), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes, c.IngestBudgetBytes = maxBytes, budget })
			m := nats.NewMsg(wire.SaveSubject(wire.Key{Session: "bomb"}.WithDefaults()))
			m.Header.Set(wire.HdrSaveID, "bomb-"+c.name)
			m.Header.Set(wire.HdrEncoding, wire.EncodingZstd)
			m.Data = c.body
			_, err := env.Conn().RequestMsg(m, 10*time.Second)
			require.NoError(t, err)
			peak := transfer.IngestBudgetPeakBytes(env.Daemon)
			bound := int64(len(c.body)) + 2*(maxBytes+1) + int64(c.windows)*window
			t.Logf("%s, %d bytes: the budget's peak %d bytes (%.1f times the max checkpoint; bound %d)", c.name, len(c.body), peak, float64(peak)/maxBytes, bound)
			require.LessOrEqual(t, peak, bound, fmt.Sprintf("past docs/protocol.md §4.5's bound (budget %d)", budget))
		})
	}
}
