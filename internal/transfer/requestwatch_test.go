package transfer_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
