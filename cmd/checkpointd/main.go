// Command checkpointd stores versioned checkpoints of agent conversations on NATS JetStream.
//
// By default it runs an embedded NATS server with JetStream on a local data directory, so one
// command gives a working deployment; with --nats-url it joins an existing NATS server or cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == healthcheckCommand { // healthcheck.go
		os.Exit(healthcheck(os.Args[2:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// A second signal while shutting down cuts it short.
		<-ctx.Done()
		stop()
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM)
		<-c
		fmt.Fprintln(os.Stderr, "checkpointd: second signal, exiting now")
		os.Exit(1)
	}()
	err := run(ctx, os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "checkpointd:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run starts checkpointd and blocks until ctx is cancelled, then shuts down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseConfig(args, os.Stdout) // --help, asked for, to stdout (--version too, below)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if cfg.PrintVersion {
		_, err := fmt.Fprintln(os.Stdout, "checkpointd", buildinfo.Get())
		return err
	}
	if cfg.PrintNATSConfig {
		return printNATSConfig(cfg.Tenants, os.Stdout)
	}
	stopProfile, err := startCPUProfile(cfg.CPUProfile) // profile.go
	if err != nil {
		return err
	}
	defer stopProfile()
	log, level := newLogger(cfg, stderr)
	// SIGHUP is caught from here on, so that it never kills the daemon; it is acted on once the
	// daemon serves (reload.go).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	rl := &reloader{args: args, level: level, log: log}
	cfg.Security.logState(log, cfg)

	var ns *server.Server
	var nc *nats.Conn
	if cfg.NATSURL == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		// Before the server touches the store: one JetStream store, one server (datadir_lock.go).
		var lock *dataDirLock
		if lock, err = lockDataDir(cfg.DataDir); err != nil {
			return err
		}
		defer lock.release() // deferred first, so released after the server below has shut down
		srv := cfg.embeddedServer()
		login, err := withTenants(&srv, cfg, log) // tenants.go
		if err != nil {
			return err
		}
		ns, err = embedded.StartServer(srv)
		if err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		log.Info("embedded NATS server with JetStream started", "url", ns.ClientURL(), "data_dir", cfg.DataDir, "sync", cfg.Sync)
		rl.ns, rl.srv, rl.tenants = ns, srv, cfg.Tenants
		nc, err = nats.Connect(embedded.InProcessURL(ns), append(login, nats.InProcessServer(ns), nats.Name("checkpointd"))...)
	} else {
		// Connection events are logged and counted by the daemon (transfer.watchConn).
		opts := []nats.Option{nats.Name("checkpointd"), nats.MaxReconnects(-1)}
		if cfg.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
		}
		opts = append(opts, cfg.Security.natsOptions()...)
		nc, err = nats.Connect(cfg.NATSURL, opts...)
	}
	if err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()

	reg := prometheus.NewRegistry()
	cfg.Daemon.Logger, cfg.Daemon.Metrics = log, metrics.New(reg)
	if cfg.NATSURL == "" {
		reg.MustRegister(metrics.DirSize(cfg.DataDir, 30*time.Second)) // the embedded store's disk use
	}
	if err := upgradeStore(ctx, nc, cfg, log); err != nil { // upgrade.go
		return err
	}
	d, err := transfer.Open(ctx, nc, cfg.Daemon)
	if err != nil {
		return err
	}

	var hs *http.Server
	if cfg.HTTPListen != "" {
		ln, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			_ = d.Close(context.Background())
			return fmt.Errorf("--http-listen: %w", err)
		}
		hs = &http.Server{Handler: metrics.Handler(reg, d.Health, d.Readiness), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		log.Info("serving /metrics, /healthz and /readyz", "addr", "http://"+ln.Addr().String())
	}
	rl.d = d
	go rl.loop(ctx, hup)
	log.Info("checkpointd ready", "nats", nc.ConnectedUrlRedacted(), "replicas", d.Replicas())

	select {
	case <-ctx.Done():
	case refused := <-d.ServerRefused():
		return stopRefused(d, hs, refused)
	}
	log.Info("shutting down: finishing in-flight saves", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(sctx)
	}
	err = d.Close(sctx)
	if derr := nc.Drain(); derr != nil && err == nil {
		err = derr
	}
	log.Info("checkpointd stopped")
	return err
}

// embeddedServer is the configuration of the embedded NATS server that cfg asks for.
func (c config) embeddedServer() embedded.ServerConfig {
	return embedded.ServerConfig{DataDir: c.DataDir, Listen: c.NATSListen, SyncAlways: c.Sync == syncAlways,
		TLS: c.Security.ServerTLS, Encryption: c.Security.encryption}
}

// stopRefused stops a daemon that NATS reconnected to a server too old for it (a cluster of mixed
// versions) at once, leaving in-flight saves unfinished: nothing more is committed where two saves
// could both be acknowledged as one version, and what was not settled stays queued for a daemon on
// a safe server. The refusal becomes run's error, so checkpointd exits non-zero.
func stopRefused(d *transfer.Daemon, hs *http.Server, refused error) error {
	if hs != nil {
		_ = hs.Close()
	}
	now, cancel := context.WithCancel(context.Background())
	cancel()
	_ = d.Close(now)
	return refused
}
