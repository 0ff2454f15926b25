package housekeeping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// RetentionPolicy is the daemon's retention: a default, and overrides by namespace.
type RetentionPolicy struct {
	Default     engine.Retention
	ByNamespace map[string]engine.Retention
}

// For returns the retention of a namespace.
func (p RetentionPolicy) For(namespace string) engine.Retention {
	if r, ok := p.ByNamespace[namespace]; ok {
		return r
	}
	return p.Default
}

// ParseNamespaceRetention parses "NAMESPACE:keep=N,age=DURATION" (either part may be left out).
func ParseNamespaceRetention(s string) (string, engine.Retention, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", engine.Retention{}, fmt.Errorf("%q: want NAMESPACE:keep=N,age=DURATION", s)
	}
	ns, spec := s[:i], s[i+1:]
	var r engine.Retention
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(part, "=")
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("%q is not key=value", part)
		case k == "keep":
			r.KeepLast, err = strconv.Atoi(v)
		case k == "age":
			r.MaxAge, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown setting %q (want keep or age)", k)
		}
		if err != nil {
			return "", engine.Retention{}, fmt.Errorf("retention for namespace %q: %w", ns, err)
		}
	}
	if r.KeepLast < 0 || r.MaxAge < 0 {
		return "", engine.Retention{}, fmt.Errorf("retention for namespace %q: negative limit", ns)
	}
	return ns, r, nil
}

// PruneSessions applies retention to the given sessions and reports per session. A session gone
// meanwhile (deleted, or leased without a version) is skipped.
func PruneSessions(ctx context.Context, e *engine.Engine, keys []engine.Key, ret func(ns string) engine.Retention, dryRun bool) ([]wire.PruneResult, error) {
	out := []wire.PruneResult{}
	for _, k := range keys {
		res, err := e.Prune(ctx, k, ret(k.Namespace), time.Now(), dryRun)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("session %s: %w", k, err)
		}
		if len(res.Versions) > 0 {
			out = append(out, wire.PruneResult{Key: edge.WireKey(k), Versions: res.Versions, Kept: res.Kept})
		}
	}
	return out, nil
}

// PruneNamespace applies retention to every session of namespace ns ("": of every namespace), a
// page of the engine's index at a time.
func PruneNamespace(ctx context.Context, e *engine.Engine, ns string, ret func(ns string) engine.Retention, dryRun bool) ([]wire.PruneResult, error) {
	namespaces := []string{ns}
	if ns == "" {
		var err error
		if namespaces, err = e.Namespaces(ctx); err != nil {
			return nil, err
		}
	}
	out := []wire.PruneResult{}
	for _, space := range namespaces {
		if ret(space) == (engine.Retention{}) {
			continue // nothing to remove there
		}
		for cursor := uint64(0); ; {
			heads, next, err := e.Sessions(ctx, space, cursor, pruneSessionsPage)
			if err != nil {
				return out, err
			}
			keys := make([]engine.Key, 0, len(heads))
			for _, h := range heads {
				if h.Record.Version > 0 {
					keys = append(keys, h.Key)
				}
			}
			res, err := PruneSessions(ctx, e, keys, ret, dryRun)
			out = append(out, res...)
			if err != nil {
				return out, err
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return out, nil
}

// LivePolicy is the retention policy in force, shared by the pruner and the prune requests, and
// replaced whole when the operator reloads it (Daemon.SetRetention, on SIGHUP).
type LivePolicy struct {
	p atomic.Pointer[RetentionPolicy]
}

// NewLivePolicy puts p in force.
func NewLivePolicy(p RetentionPolicy) *LivePolicy {
	l := &LivePolicy{}
	l.Set(p)
	return l
}

// Get returns the policy in force; Set replaces it.
func (l *LivePolicy) Get() RetentionPolicy  { return *l.p.Load() }
func (l *LivePolicy) Set(p RetentionPolicy) { l.p.Store(&p) }

// Pruner applies the retention policy to every session now and then (engine.Prune), and sweeps the
// values nothing refers to (engine.SweepValues).
type Pruner struct {
	Engine   *engine.Engine
	Policy   *LivePolicy
	Interval time.Duration
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	Pruned   func([]wire.PruneResult) // told what a round removed (the service drops held reads of it)
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Start runs a housekeeping round every Interval (none when it is 0) until Stop.
func (p *Pruner) Start() {
	if p.Interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.run(ctx)
			}
		}
	}()
}

// run is one housekeeping round, counted in the retention metrics.
func (p *Pruner) run(ctx context.Context) {
	start := time.Now()
	ok := p.round(ctx)
	if ctx.Err() != nil {
		return // stopped midway: not a round
	}
	p.Metrics.RetentionSeconds.Observe(time.Since(start).Seconds())
	result := "ok"
	if !ok {
		result = "error"
	}
	p.Metrics.RetentionRounds.WithLabelValues(result).Inc()
}

// round applies retention, then sweeps the values no session refers to any more
// (engine.SweepValues); it reports whether every step succeeded. The log engine has nothing else to
// sweep: a crashed save leaves no orphan (its entry is its commit), and packs delete what they
// packed.
func (p *Pruner) round(ctx context.Context) bool {
	ok := true
	if policy := p.Policy.Get(); policy.Default != (engine.Retention{}) || len(policy.ByNamespace) > 0 {
		res, err := PruneNamespace(ctx, p.Engine, "", policy.For, false)
		if p.Pruned != nil {
			p.Pruned(res)
		}
		for _, r := range res {
			p.Metrics.RetentionRemoved.WithLabelValues("version").Add(float64(len(r.Versions)))
			p.Log.Info("retention: pruned old versions", "session", r.Key, "versions", len(r.Versions), "kept", r.Kept)
		}
		if err != nil && ctx.Err() == nil {
			ok = false
			p.Log.Warn("retention: prune failed; trying again next round", "err", err)
		}
	}
	return p.sweepValues(ctx) && ok
}

// sweepValues sweeps the values of every namespace (engine.SweepValues: a value is gone two sweeps
// after nothing referred to it).
func (p *Pruner) sweepValues(ctx context.Context) bool {
	namespaces, err := p.Engine.Namespaces(ctx)
	if err != nil {
		p.Log.Warn("housekeeping: listing namespaces failed; trying again next round", "err", err)
		return false
	}
	ok := true
	for _, ns := range namespaces {
		res, err := p.Engine.SweepValues(ctx, ns)
		if err != nil && ctx.Err() == nil {
			ok = false
			p.Log.Warn("housekeeping: sweeping unused values failed; trying again next round", "namespace", ns, "err", err)
		}
		if res.Deleted > 0 || res.Trashed > 0 || res.Restored > 0 {
			p.Metrics.RetentionRemoved.WithLabelValues("value").Add(float64(res.Deleted))
			p.Log.Info("housekeeping: values no session uses", "namespace", ns, "trashed", res.Trashed,
				"deleted", res.Deleted, "freed_bytes", res.FreedBytes, "restored", res.Restored)
		}
	}
	return ok
}

// Stop ends the rounds: a round under way is cancelled, and waited for.
func (p *Pruner) Stop() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
}

// pruneSessionsPage is how many sessions one read of the engine's index asks for while pruning, as
// a listing's page does.
const pruneSessionsPage = 64
