package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// StartForMain runs what `go run ./cmd/checkpointd` runs (an embedded nats-server and a daemon) on
// a free loopback port and a fresh temporary directory, for a package's TestMain, where no
// testing.T exists yet: runnable Examples need a live deployment. It returns the client URL and a
// function that stops everything and removes the directory.
func StartForMain() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "checkpointd-examples-")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	listen := ln.Addr().String()
	ln.Close()
	srv, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: listen})
	if err != nil {
		return "", nil, err
	}
	url = "nats://" + listen
	nc, err := nats.Connect(url)
	if err != nil {
		return "", nil, err
	}
	cfg := transfer.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := transfer.Open(ctx, nc, cfg)
	if err != nil {
		return "", nil, err
	}
	return url, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}, nil
}

// RunWithDaemon is a whole TestMain for a package of runnable Examples: it starts a deployment
// (StartForMain), sets *url to its client URL, runs the package's tests and examples, stops it
// and exits with their code.
func RunWithDaemon(m *testing.M, url *string) {
	u, stop, err := StartForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting checkpointd for the examples:", err)
		os.Exit(1)
	}
	*url = u
	code := m.Run()
	stop()
	os.Exit(code)
}
