// Package transfer is the daemon's assembly: everything that moves checkpoints, wired together.
// Open checks the NATS server (serverversion.go), opens storage and the protocol's streams
// (edge), and starts the parts: the ingest of saves (ingest), the micro service (service), the
// packer and the retention rounds (housekeeping), each request within bounds (admission). Health
// and readiness (health.go) and the state collector (state.go) watch the whole. The embedded
// nats-server is its own package (embedded), run by cmd/checkpointd beside the daemon.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/pieces"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/housekeeping"
	"github.com/checkpointd/checkpointd/internal/transfer/ingest"
	"github.com/checkpointd/checkpointd/internal/transfer/service"
)

// Config is what the daemon needs beyond a NATS connection.
type Config struct {
	Replicas           int              // JetStream replicas for every stream and bucket; 0: 3 in a cluster, else 1
	MaxCheckpointBytes int64            // largest conversation accepted (canonical JSON bytes)
	IngestBudgetBytes  int64            // bytes the saves being settled may hold at once (ingest/ingestbudget.go); 0: MaxCheckpointBytes
	ImagePaths         codec.ImagePaths // what a save does with images naming local files (refuse, redact, allow)
	NamespaceKeys      *sealing.Keys    // encrypts stored conversation bytes per namespace (nil: off); see sealLog
	ResultTTL          time.Duration    // how long save outcomes stay readable on CP_RESULTS
	RequestTimeout     time.Duration    // upper bound on one service request, including waiting for ingest
	Lanes              int              // sessions settled in parallel by this instance
	CacheBytes         int64            // read cache size
	Engine             engine.Config    // the log engine's settings (packs, zstd window, sessions cached)
	Retention          housekeeping.RetentionPolicy
	RetentionInterval  time.Duration // how often the retention policy is applied (0: only on request)
	Version            string        // reported by the service (semver)
	Logger             *slog.Logger
	Metrics            *metrics.Metrics

	// ReadBytes bounds the bytes of replies being built and of conversations being loaded for
	// reads; beyond it requests are refused busy (internal/transfer/admission).
	ReadBytes int64
	// StallAfter: the daemon reports itself unhealthy when the oldest queued save is older than
	// this and no save was settled meanwhile (health.go).
	StallAfter time.Duration
	// HealthInterval is how often the daemon checks its ingest consumer and queue, and how soon it
	// recreates a lost consumer (0: 2 s).
	HealthInterval time.Duration
}

// DefaultConfig returns the configuration checkpointd runs with when no flag says otherwise.
func DefaultConfig() Config {
	return Config{
		Replicas:           0,
		MaxCheckpointBytes: 256 << 20,
		ImagePaths:         codec.ImagePathsRefuse,
		ResultTTL:          24 * time.Hour,
		RequestTimeout:     15 * time.Second, // above ackWait: a read can outwait a dead daemon's claim
		Lanes:              8,
		CacheBytes:         64 << 20,
		ReadBytes:          128 << 20,
		StallAfter:         time.Minute,
		RetentionInterval:  time.Hour,
		Version:            "0.1.0",
	}
}

// ingestBudget is IngestBudgetBytes, its default applied.
func (c Config) ingestBudget() int64 {
	if c.IngestBudgetBytes == 0 {
		return c.MaxCheckpointBytes
	}
	return c.IngestBudgetBytes
}

// Validate reports the first unusable setting, naming it.
func (c Config) Validate() error {
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("replicas: %d is outside 0..5 (0: automatic)", c.Replicas)
	case c.MaxCheckpointBytes < 1024:
		return fmt.Errorf("max checkpoint bytes: %d is below 1024", c.MaxCheckpointBytes)
	case c.IngestBudgetBytes != 0 && c.IngestBudgetBytes < 1<<20:
		return fmt.Errorf("ingest budget: %d bytes is below 1 MiB (0: as much as the max checkpoint bytes)", c.IngestBudgetBytes)
	case c.ResultTTL < time.Minute:
		return fmt.Errorf("result ttl: %s is below one minute", c.ResultTTL)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout: must be positive")
	case c.Lanes < 1:
		return fmt.Errorf("lanes: must be at least 1")
	case c.ReadBytes < 1<<20:
		return fmt.Errorf("read bytes: %d is below 1 MiB", c.ReadBytes)
	case c.StallAfter < time.Second:
		return fmt.Errorf("stall after: %s is below one second", c.StallAfter)
	case c.HealthInterval < 0:
		return fmt.Errorf("health interval: must not be negative")
	case c.Retention.Default.KeepLast < 0 || c.Retention.Default.MaxAge < 0:
		return fmt.Errorf("retention: limits must not be negative")
	case c.Logger == nil || c.Metrics == nil:
		return errors.New("logger and metrics are required")
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

// Daemon is one checkpointd instance: it settles saves from the ingest stream and serves reads.
// Several may run against one JetStream deployment.
type Daemon struct {
	cfg    Config
	in     *ingest.Ingester
	budget *ingest.Budget // the bytes of the saves being settled (ingest/ingestbudget.go), held here for HoldIngestBudget
	st     *edge.Streams  // CP_INGEST, CP_CHUNKS, CP_RESULTS
	svc    *service.Service
	saves  *ingest.SaveRequests // saves sent as requests (ingest/saverequest.go)
	packer *housekeeping.Packer
	pruner *housekeeping.Pruner
	// Engine is the storage domain (internal/engine) over the stream CP_LOG (internal/logstore).
	Engine    *engine.Engine
	logStream jetstream.Stream // CP_LOG, for its figures (state.go)
	sealed    *sealing.Log     // the log sealing entries with --namespace-keys (its keys nil: off), for SIGHUP
	notes     *edge.Notes      // the streams' notes, nil where they cannot be trusted (edge/notes.go)
	ready     atomic.Bool
	guard     *serverGuard // refuses NATS servers too old for safe saves (serverversion.go)
	nc        *nats.Conn
	health    *healthMonitor
	policy    *housekeeping.LivePolicy // the retention policy in force (SetRetention)
}

// Open sets up its streams (idempotently), then starts ingesting and serving.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkConnectedServer(nc); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = autoReplicas(nc)
	}
	if mp := nc.MaxPayload(); mp < pieces.MinMaxPayload {
		return nil, fmt.Errorf("the NATS server's max_payload is %d bytes; checkpointd needs at least %d (%d KiB of headers and room for pieces): raise max_payload in the server's configuration",
			mp, pieces.MinMaxPayload, pieces.ChunkRoom/1024)
	}
	var st *edge.Streams
	var log engine.Log
	var logStream jetstream.Stream
	err = retryStartup(ctx, cfg.Logger, func(ctx context.Context) (err error) {
		if err = edge.RefuseFormat2(ctx, js); err != nil {
			return err
		}
		if st, err = edge.EnsureStreams(ctx, js, cfg.Replicas, cfg.ResultTTL); err != nil {
			return err
		}
		log, logStream, err = edge.OpenLog(ctx, nc, js, cfg.Replicas)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := checkOpenedStreams(st, logStream); err != nil {
		return nil, err
	}
	notes := edge.NewNotes(nc, logStream, st.Ingest) // nil where notes cannot be trusted: every read asks
	sealed := edge.SealLog(edge.BoundedLog{Log: log, Notes: notes}, cfg.NamespaceKeys)
	eng := engine.New(sealed, cfg.Engine)
	d := &Daemon{cfg: cfg, Engine: eng, st: st, logStream: logStream, sealed: sealed, notes: notes, nc: nc, policy: housekeeping.NewLivePolicy(cfg.Retention)}
	watchConn(nc, cfg.Logger, cfg.Metrics)
	d.svc = service.New(service.Config{NC: nc, Streams: st, Engine: eng, CacheBytes: cfg.CacheBytes, ReadBytes: cfg.ReadBytes,
		Logger: cfg.Logger, Metrics: cfg.Metrics, Timeout: cfg.RequestTimeout, Version: cfg.Version, Policy: d.policy, Notes: notes})
	if err := d.svc.Start(); err != nil {
		notes.Stop()
		return nil, err
	}
	d.packer = housekeeping.NewPacker(eng, cfg.Logger, cfg.Metrics)
	d.budget = ingest.NewBudget(cfg.ingestBudget())
	d.in = ingest.New(ingest.Config{JS: js, Streams: st, Engine: eng, MaxBytes: cfg.MaxCheckpointBytes, ImagePaths: cfg.ImagePaths,
		Logger: cfg.Logger, Metrics: cfg.Metrics, Packer: d.packer, Budget: d.budget})
	if err := d.in.Start(ctx, cfg.Lanes); err != nil {
		d.packer.Stop()
		_ = d.svc.Stop(ctx)
		notes.Stop()
		return nil, err
	}
	d.saves = ingest.NewSaveRequests(d.in, nc, cfg.ingestBudget())
	if err := d.saves.Start(); err != nil {
		d.in.Shutdown(ctx)
		d.packer.Stop()
		_ = d.svc.Stop(ctx)
		notes.Stop()
		return nil, err
	}
	d.pruner = &housekeeping.Pruner{Engine: eng, Policy: d.policy, Interval: cfg.RetentionInterval, Log: cfg.Logger, Metrics: cfg.Metrics,
		Pruned: d.svc.DropPrunedReads}
	d.pruner.Start()
	go d.svc.PurgeAcknowledged() // what a crash of the server may have left in the queue
	d.health = newHealthMonitor(d.in, st, cfg)
	d.health.start()
	if err := cfg.Metrics.Register(newStateCollector(d)); err != nil { // state.go
		cfg.Logger.Warn("metrics: the daemon's state is not reported (a daemon opened before on the same registry reports its own)", "err", err)
	}
	// The subscriptions above are sent to the server asynchronously: a writer asking right after
	// Open returns would otherwise find no responder and take the ingest stream's slower path.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		cfg.Logger.Warn("the server did not confirm the daemon's subscriptions yet; they take effect when it does", "err", err)
	}
	d.ready.Store(true)
	d.guard = watchServer(nc, cfg.Logger, func() { d.ready.Store(false) })
	return d, nil
}

// startupPatience is how long Open keeps trying to create its streams and buckets while JetStream
// does not answer in time: a cluster that is still electing leaders, or another checkpointd creating
// the same streams at the same moment.
const startupPatience = time.Minute

// retryStartup runs f until it succeeds, fails for a reason waiting will not cure, or
// startupPatience (or ctx) runs out. Each attempt gets a few seconds.
func retryStartup(ctx context.Context, log *slog.Logger, f func(context.Context) error) error {
	deadline := time.Now().Add(startupPatience)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !edge.IsTransient(err) && !clusterForming(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		log.Warn("JetStream not ready, retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(attempt, 5)) * 200 * time.Millisecond):
		}
	}
}

// clusterForming reports the placement refusal JetStream gives while it still counts a peer as
// offline (a cluster that just started, or a node restarting). If the peers never come, the
// retries run out and the error is reported.
func clusterForming(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10005 // JSClusterNoPeersErrF: no suitable peers for placement
}

// autoReplicas is the replica count when none is configured: 1 on a single server, 3 (or as many
// servers as there are, if fewer) in a cluster.
func autoReplicas(nc *nats.Conn) int {
	if nc.ConnectedClusterName() == "" {
		return 1
	}
	return min(3, max(len(nc.Servers()), 1))
}

// SetRetention replaces the retention policy, for the next housekeeping round and the prune
// requests that follow (checkpointd reloads it on SIGHUP). The interval does not change.
func (d *Daemon) SetRetention(p housekeeping.RetentionPolicy) error {
	if p.Default.KeepLast < 0 || p.Default.MaxAge < 0 {
		return errors.New("retention: limits must not be negative")
	}
	d.policy.Set(p)
	return nil
}

// Retention returns the retention policy in force.
func (d *Daemon) Retention() housekeeping.RetentionPolicy { return d.policy.Get() }

// Replicas is the JetStream replica count the daemon's streams and buckets were created with.
func (d *Daemon) Replicas() int { return d.cfg.Replicas }

// Ready reports whether the daemon is healthy (see Health).
func (d *Daemon) Ready() bool { return d.Health() == nil }

// Health returns nil while the daemon is serving and saves are being processed, and otherwise why
// not, one reason a line: it is shutting down, its NATS connection is down, its ingest consumer is
// gone (it is being recreated), or the oldest queued save has waited longer than StallAfter while
// none was settled.
func (d *Daemon) Health() error {
	var errs []error
	if !d.ready.Load() {
		errs = append(errs, errors.New("not serving (starting or shutting down)"))
	}
	if st := d.nc.Status(); st != nats.CONNECTED {
		errs = append(errs, fmt.Errorf("NATS connection is %s", strings.ToLower(st.String())))
	}
	if d.health != nil {
		errs = append(errs, d.health.problems()...)
	}
	return errors.Join(errs...)
}

// readyLag is how old the oldest queued save may be for the daemon to count as caught up.
const readyLag = 10 * time.Second

// Readiness returns nil while the daemon is healthy (Health) and caught up: no save has waited on
// the ingest queue longer than readyLag at the last check (every HealthInterval). A daemon working
// through a backlog, after a restart say, is healthy but not ready.
func (d *Daemon) Readiness() error {
	errs := []error{d.Health()}
	if d.health != nil {
		errs = append(errs, d.health.caughtUp(time.Now(), readyLag))
	}
	return errors.Join(errs...)
}

// Close stops serving new requests, answers the save requests already received, then finishes the
// saves already taken off the queue. When ctx ends first, unfinished saves stay queued for the next
// daemon (nothing acknowledged is lost), and save requests still settling are answered
// unavailable (their writers retry them).
func (d *Daemon) Close(ctx context.Context) error {
	d.ready.Store(false)
	d.guard.stop()
	d.health.stop()
	err := d.svc.Stop(ctx)
	d.saves.Stop(ctx)
	d.pruner.Stop()
	d.in.Shutdown(ctx)
	d.packer.Stop()
	d.notes.Stop()
	return err
}
