package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Bomb returns a zstd frame of a few KiB that decompresses to n zero bytes, made without holding
// them.
func Bomb(tb testing.TB, n int64) []byte {
	tb.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1))
	require.NoError(tb, err)
	_, err = io.CopyN(enc, zeros{}, n)
	require.NoError(tb, err)
	require.NoError(tb, enc.Close())
	return out.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// HostileSaves publishes, at once and raw, saves no honest client sends, in namespace ns of the
// server nc is connected to, and returns the result of each by save id:
//   - forged saves: a first chunk of one byte, then the save with a chunk count of 10^12 (odd
//     ones: beyond any size limit) or of 10^6 (even ones: the other chunks are never sent);
//   - bombs: a zstd body of a few KiB (bomb, from Bomb) that decompresses past any size limit.
//
// Every save is acknowledged by JetStream, so each must get a result; HostileSaves fails the test
// if one has none within a minute.
func HostileSaves(tb testing.TB, nc *nats.Conn, ns string, forged, bombs int, bomb []byte) map[string]wire.SaveResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	require.NoError(tb, err)
	results := make(chan wire.SaveResult, forged+bombs)
	sub, err := nc.Subscribe("cp.result."+wire.EncodeID(ns)+".>", func(m *nats.Msg) {
		var r wire.SaveResult
		if json.Unmarshal(m.Data, &r) == nil {
			results <- r
		}
	})
	require.NoError(tb, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(tb, nc.Flush())

	// The chunks first, each acknowledged, as a client must; then every save in one burst.
	var saves []*nats.Msg
	for i := 0; i < forged; i++ {
		id := fmt.Sprint("forged-", i)
		c := nats.NewMsg(wire.ChunkSubject(ns, id))
		c.Header.Set(wire.HdrChunk, "0")
		c.Data = []byte("[")
		_, err := js.PublishMsg(ctx, c)
		require.NoError(tb, err)
		m := nats.NewMsg(wire.IngestSubject(wire.Key{Namespace: ns, Session: id, Agent: wire.DefaultAgent}))
		m.Header.Set(wire.HdrSaveID, id)
		m.Header.Set(wire.HdrChunks, map[bool]string{true: "1000000000000", false: "1000000"}[i%2 == 1])
		saves = append(saves, m)
	}
	for i := 0; i < bombs; i++ {
		id := fmt.Sprint("bomb-", i)
		m := nats.NewMsg(wire.IngestSubject(wire.Key{Namespace: ns, Session: id, Agent: wire.DefaultAgent}))
		m.Header.Set(wire.HdrSaveID, id)
		m.Header.Set(wire.HdrEncoding, wire.EncodingZstd)
		m.Data = bomb
		saves = append(saves, m)
	}
	var acks []jetstream.PubAckFuture
	for _, m := range saves {
		f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(m.Header.Get(wire.HdrSaveID)))
		require.NoError(tb, err)
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			tb.Fatalf("publishing a hostile save: %v", err)
		case <-ctx.Done():
			tb.Fatal("hostile saves not acknowledged in time")
		}
	}

	got := map[string]wire.SaveResult{}
	for len(got) < len(saves) {
		select {
		case r := <-results:
			got[r.SaveID] = r
		case <-ctx.Done():
			tb.Fatalf("%d of %d hostile saves got a result", len(got), len(saves))
		}
	}
	return got
}

// HostileSaveIDs are the ids HostileSaves gives its saves, for checking its results.
func HostileSaveIDs(forged, bombs int) []string {
	var ids []string
	for i := 0; i < forged; i++ {
		ids = append(ids, "forged-"+strconv.Itoa(i))
	}
	for i := 0; i < bombs; i++ {
		ids = append(ids, "bomb-"+strconv.Itoa(i))
	}
	return ids
}
