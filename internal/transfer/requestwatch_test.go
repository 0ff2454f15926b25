package transfer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
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

// lockedBuffer is a log destination the daemon's goroutines may write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A tenant account configured from a --print-nats-config before 0.4 has no cp.save import: its
// writers get no responders and every save goes through the ingest stream, silently. The daemon
// cannot see the account's imports, but it sees the saves: one of a namespace that never sent a
// request, published while requests work for another, is logged once as a warning naming the
// namespace and the likely cause. By raw NATS messages: a request from one namespace, then
// JetStream publishes on cp.ingest for another.
func TestDaemon_WarnsOfANamespaceSavingOnlyOffTheIngestStream(t *testing.T) {
	logs := &lockedBuffer{}
	env := testenv.Start(t, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	modern := wire.Key{Namespace: "modern", Session: "s"}.WithDefaults()
	res := saveRawHeader(t, nc, js, modern, "request", "m1", nil, []byte(`[{"role":"user","content":"by request"}]`))
	require.True(t, res.OK, "%+v", res.Error)
	time.Sleep(1100 * time.Millisecond) // past the margin allowed for the server's and the daemon's clocks

	legacy := wire.Key{Namespace: "legacy", Session: "s"}.WithDefaults()
	for _, id := range []string{"l1", "l2"} {
		res = saveRawHeader(t, nc, js, legacy, "ingest", id, nil, []byte(`[{"role":"user","content":"`+id+`"}]`))
		require.True(t, res.OK, "%+v", res.Error)
	}
	res = saveRawHeader(t, nc, js, modern, "ingest", "m2", nil, []byte(`[{"role":"user","content":"by request"},{"role":"user","content":"off the stream"}]`))
	require.True(t, res.OK, "%+v", res.Error)

	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "come off the ingest stream while save requests work"), "once, for legacy only:\n%s", out)
	require.Contains(t, out, "namespace=legacy")
	require.Contains(t, out, "cp.save import")
}

// A client that reaches every namespace (one account for all, or an admin) sends a save request in
// more namespaces than the watch remembers (4,096). The watch used to stop judging then, and the
// warning about a namespace saving only off the stream was never logged again, for anyone. By raw
// NATS messages: 4,200 requests with an empty body (each refused, still counted as a request).
func TestDaemon_ARequestFloodDoesNotSilenceTheMissingImportWarning(t *testing.T) {
	logs := &lockedBuffer{}
	env := testenv.Start(t, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	const flood, batch = 4200, 200 // in batches: more than 256 at once are refused busy, uncounted
	replies := make(chan *nats.Msg, flood)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i := 0; i < flood; i += batch {
		for j := i; j < i+batch; j++ {
			key := wire.Key{Namespace: fmt.Sprint("flood-", j), Session: "s"}.WithDefaults()
			m := &nats.Msg{Subject: wire.SaveSubject(key), Reply: inbox, Header: nats.Header{wire.HdrSaveID: {"f"}}}
			require.NoError(t, nc.PublishMsg(m))
		}
		for range batch {
			select {
			case r := <-replies:
				var res wire.SaveResult
				require.NoError(t, json.Unmarshal(r.Data, &res))
				require.NotNil(t, res.Error)
				require.Equal(t, wire.CodeInvalid, res.Error.Code, "refused for its body, after it was counted")
			case <-time.After(10 * time.Second):
				t.Fatal("a save request is answered")
			}
		}
	}
	time.Sleep(1100 * time.Millisecond) // past the margin allowed for the server's and the daemon's clocks

	legacy := wire.Key{Namespace: "legacy", Session: "s"}.WithDefaults()
	res := saveRawHeader(t, nc, js, legacy, "ingest", "l1", nil, []byte(`[{"role":"user","content":"l1"}]`))
	require.True(t, res.OK, "%+v", res.Error)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "come off the ingest stream while save requests work"), "for legacy:\n%s", out)
	require.Contains(t, out, "namespace=legacy")
}
