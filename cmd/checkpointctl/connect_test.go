package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Nothing listening: exit 6 at once, naming the URL and how to start checkpointd.
func TestCheckpointctl_NothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	_, stderr, code := ctl(t, "", "--server=nats://"+addr, "list")
	require.Equal(t, exitUnavailable, code, stderr)
	require.Contains(t, stderr, "is checkpointd running on nats://"+addr+"?")
	require.Contains(t, stderr, "go run ./cmd/checkpointd")
}

// An HTTP server (checkpointd's own /metrics port, say) never speaks NATS: the handshake gives up
// after dialTimeout, not the whole --timeout, and says what to try.
func TestCheckpointctl_NotNATS(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	url := "nats://" + strings.TrimPrefix(srv.URL, "http://")

	start := time.Now()
	_, stderr, code := ctl(t, "", "--server="+url, "--timeout=60s", "list")
	require.Equal(t, exitUnavailable, code, stderr)
	require.Less(t, time.Since(start), 30*time.Second, "waited for --timeout instead of the handshake's")
	require.Contains(t, stderr, "is checkpointd running on "+url+"?")
}

// The default HTTP port gets its own hint: the NATS port to use instead.
func TestUnreachableHint_HTTPPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, dialErr := net.Dial("tcp", addr) // a real "connection refused"

	got := unreachableHint("nats://u:secret@127.0.0.1:9333", dialErr).Error()
	require.Contains(t, got, "nats://127.0.0.1:9333 is checkpointd's HTTP port")
	require.Contains(t, got, "--server nats://127.0.0.1:4222")
	require.NotContains(t, got, "secret", "the password is not printed")

	// A refused login is not "unreachable": no hint.
	require.Equal(t, nats.ErrAuthorization, unreachableHint("nats://127.0.0.1:4222", nats.ErrAuthorization))
}
