// Package embedded runs the nats-server checkpointd starts when no --nats-url is given: its
// options (listen address, JetStream store, max payload, sync), TLS, the tenants' NATS accounts
// (accounts.go), encryption of the JetStream store (jetstreamkey.go) and reloads on SIGHUP. It knows
// nothing of checkpoints beyond the subjects it grants to tenants.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures the embedded nats-server that checkpointd runs when no --nats-url is given.
type ServerConfig struct {
	DataDir string // JetStream store directory
	Listen  string // host:port for clients; port 0 picks a free one
	Name    string // server name; stable across restarts so JetStream finds its own data
	// MaxPayload is the largest message the server accepts (0: NATS's default, 1 MiB).
	MaxPayload int32
	// SyncAlways makes JetStream fsync every write before acknowledging it (nats-server's
	// `sync_interval: always`). Off, it syncs every 2 minutes, as nats-server does by default:
	// an acknowledged save then survives a crash of the process, not always one of the machine.
	SyncAlways bool
	// Cluster, when ClusterListen is set, joins a JetStream cluster: the routes listen there and
	// connect to Routes (nats-route://host:port of every node). Tests build clusters with it;
	// production clusters are run as nats-server processes and reached with --nats-url.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// TLS of the client port (tls.go) and encryption of the store (jetstreamkey.go); zero: off.
	TLS        ServerTLS
	Encryption StoreEncryption
	// Tenants, when set, requires every client to log in and confines each tenant to its own
	// namespace (accounts.go); the daemon logs in as DaemonUser with DaemonPassword. Nil: open.
	Tenants        *Tenants
	DaemonPassword string
}

// StartServer starts an embedded nats-server with JetStream on cfg.DataDir and waits until it
// accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	opts, err := serverOptions(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkStoreAccount(cfg.DataDir, cfg.Tenants != nil); err != nil {
		return nil, err
	}
	if cfg.Encryption.Key != "" {
		return startEncrypted(opts, cfg) // jetstreamkey.go
	}
	if _, err := checkStoreKey(cfg.DataDir, cfg.Encryption); err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	startErr := &startupErrors{}
	s.SetLogger(startErr, false, false)
	s.Start()
	if err := waitReady(s, startErr, 10*time.Second); err != nil {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s (data in %s): %w", cfg.Listen, cfg.DataDir, err)
	}
	return s, nil
}

// serverOptions builds the embedded server's options from cfg; a reload (ReloadServer) builds
// them again from a changed cfg.
func serverOptions(cfg ServerConfig) (*server.Options, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: bad port: %w", cfg.Listen, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := cfg.Name
	if name == "" {
		name = "checkpointd"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true, // checkpointd owns the signals and shuts the server down itself
		NoLog:      true,
		MaxPayload: cfg.MaxPayload,
		SyncAlways: cfg.SyncAlways,
	}
	if cfg.ClusterListen != "" {
		chost, cport, err := net.SplitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("cluster listen address %q: %w", cfg.ClusterListen, err)
		}
		opts.Cluster.Name, opts.Cluster.Host = cfg.ClusterName, chost
		if opts.Cluster.Port, err = strconv.Atoi(cport); err != nil {
			return nil, fmt.Errorf("cluster listen address %q: bad port: %w", cfg.ClusterListen, err)
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if err := applyServerTLS(opts, cfg.TLS); err != nil {
		return nil, err
	}
	if cfg.Tenants != nil {
		if err := applyTenants(opts, cfg.Tenants, cfg.DaemonPassword); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// waitReady waits until s accepts connections, or returns at once the reason it cannot: the
// server gives up on a port already in use, or a store it cannot write, without ever saying
// so to ReadyForConnections, which would only time out.
func waitReady(s *server.Server, startErr *startupErrors, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := startErr.first(); err != nil {
			return err
		}
		if s.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s", timeout)
		}
	}
}

// startupErrors is the embedded server's logger: it keeps the first fatal error the server
// reports (it stops after one) and drops everything else, as NoLog would.
type startupErrors struct {
	mu  sync.Mutex
	err error
}

func (l *startupErrors) first() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *startupErrors) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = fmt.Errorf(format, v...)
	}
}

func (*startupErrors) Noticef(string, ...any) {}
func (*startupErrors) Warnf(string, ...any)   {}
func (*startupErrors) Errorf(string, ...any)  {}
func (*startupErrors) Debugf(string, ...any)  {}
func (*startupErrors) Tracef(string, ...any)  {}
