package transfer_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A save id delivered again on an append whose base is not the head makes the daemon read that
// base version's whole conversation, to compare the repeat with what the save id made
// (engine.checkRepeat). The repeat itself is a few bytes: before, that read was outside the ingest
// budget, so a flood of small repeats made the daemon hold one conversation per repeat in
// progress. Now the read is reserved in the save's share of the budget first, like every buffer
// of a body: with the budget spent but for room for the repeats' bodies, every repeat is refused
// busy (retry later) instead of read; given the budget back, the repeat is the duplicate. Raw NATS
// messages, on both paths (save request, ingest stream).
func TestSave_RepeatOfAnAppendReadsItsBaseWithinTheIngestBudget(t *testing.T) {
	env := testenv.Start(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	key := wire.Key{Namespace: "default", Session: "repeats", Agent: "main"}
	big := fmt.Sprintf(`[{"role":"user","content":%q}]`, strings.Repeat("a long first message ", 20000)) // ~400 KB
	tail := []byte(`[{"role":"user","content":"the append"}]`)
	res := saveRawHeader(t, nc, js, key, "request", "base", nil, []byte(big))
	require.True(t, res.OK, "%+v", res.Error)
	appendHdr := nats.Header{wire.HdrBaseVersion: {"1"}}
	res = saveRawHeader(t, nc, js, key, "request", "append", appendHdr, tail)
	require.True(t, res.OK, "%+v", res.Error)
	res = saveRawHeader(t, nc, js, key, "request", "later", nats.Header{wire.HdrBaseVersion: {"2"}}, []byte(`[{"role":"user","content":"later"}]`))
	require.True(t, res.OK, "%+v", res.Error) // version 1 is no longer the head: a repeat reads it

	release := transfer.HoldIngestBudgetBut(env.Daemon, 16<<10, 50*time.Millisecond)
	const flood = 24
	var wg sync.WaitGroup
	results := make([]wire.SaveResult, flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = saveRawHeader(t, nc, js, key, []string{"request", "ingest"}[i%2], "append", appendHdr, tail)
		}()
	}
	wg.Wait()
	for i, res := range results {
		require.NotNil(t, res.Error, "repeat %d was read outside the budget: %+v", i, res)
		require.Equal(t, wire.CodeBusy, res.Error.Code, "repeat %d: %s", i, res.Error.Message)
	}
	release()

	for _, path := range []string{"request", "ingest"} {
		res = saveRawHeader(t, nc, js, key, path, "append", appendHdr, tail)
		require.True(t, res.OK && res.Duplicate, "%s: %+v", path, res.Error)
		require.Equal(t, uint64(2), res.Version.Version)
	}
}
