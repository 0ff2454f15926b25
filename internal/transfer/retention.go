package transfer

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

// pruneSessions applies retention to the given sessions and reports per session. A session gone
// meanwhile (deleted, or leased without a version) is skipped.
func pruneSessions(ctx context.Context, e *engine.Engine, keys []engine.Key, ret func(ns string) engine.Retention, dryRun bool) ([]wire.PruneResult, error) {
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

// pruneNamespace applies retention to every session of namespace ns ("": of every namespace), a
// page of the engine's index at a time.
func pruneNamespace(ctx context.Context, e *engine.Engine, ns string, ret func(ns string) engine.Retention, dryRun bool) ([]wire.PruneResult, error) {
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
			heads, next, err := e.Sessions(ctx, space, cursor, listPageSessions)
			if err != nil {
				return out, err
			}
			keys := make([]engine.Key, 0, len(heads))
			for _, h := range heads {
				if h.Record.Version > 0 {
					keys = append(keys, h.Key)
				}
			}
			res, err := pruneSessions(ctx, e, keys, ret, dryRun)
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

// livePolicy is the retention policy in force, shared by the pruner and the prune requests, and
// replaced whole when the operator reloads it (Daemon.SetRetention, on SIGHUP).
type livePolicy struct {
	p atomic.Pointer[RetentionPolicy]
}

func newLivePolicy(p RetentionPolicy) *livePolicy {
	l := &livePolicy{}
	l.set(p)
	return l
}

func (l *livePolicy) get() RetentionPolicy  { return *l.p.Load() }
func (l *livePolicy) set(p RetentionPolicy) { l.p.Store(&p) }

// pruner applies the retention policy to every session now and then (engine.Prune), and sweeps the
// values nothing refers to (engine.SweepValues).
type pruner struct {
	engine   *engine.Engine
	policy   *livePolicy
	interval time.Duration
	log      *slog.Logger
	m        *metrics.Metrics
	pruned   func([]wire.PruneResult) // told what a round removed (the service drops held reads of it)
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func (p *pruner) start() {
	if p.interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.interval)
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
func (p *pruner) run(ctx context.Context) {
	start := time.Now()
	ok := p.round(ctx)
	if ctx.Err() != nil {
		return // stopped midway: not a round
	}
	p.m.RetentionSeconds.Observe(time.Since(start).Seconds())
	result := "ok"
	if !ok {
		result = "error"
	}
	p.m.RetentionRounds.WithLabelValues(result).Inc()
}

// round applies retention, then sweeps the values no session refers to any more
// (engine.SweepValues); it reports whether every step succeeded. The log engine has nothing else to
// sweep: a crashed save leaves no orphan (its entry is its commit), and packs delete what they
// packed.
func (p *pruner) round(ctx context.Context) bool {
	ok := true
	if policy := p.policy.get(); policy.Default != (engine.Retention{}) || len(policy.ByNamespace) > 0 {
		res, err := pruneNamespace(ctx, p.engine, "", policy.For, false)
		if p.pruned != nil {
			p.pruned(res)
		}
		for _, r := range res {
			p.m.RetentionRemoved.WithLabelValues("version").Add(float64(len(r.Versions)))
			p.log.Info("retention: pruned old versions", "session", r.Key, "versions", len(r.Versions), "kept", r.Kept)
		}
		if err != nil && ctx.Err() == nil {
			ok = false
			p.log.Warn("retention: prune failed; trying again next round", "err", err)
		}
	}
	return p.sweepValues(ctx) && ok
}

// sweepValues sweeps the values of every namespace (engine.SweepValues: a value is gone two sweeps
// after nothing referred to it).
func (p *pruner) sweepValues(ctx context.Context) bool {
	namespaces, err := p.engine.Namespaces(ctx)
	if err != nil {
		p.log.Warn("housekeeping: listing namespaces failed; trying again next round", "err", err)
		return false
	}
	ok := true
	for _, ns := range namespaces {
		res, err := p.engine.SweepValues(ctx, ns)
		if err != nil && ctx.Err() == nil {
			ok = false
			p.log.Warn("housekeeping: sweeping unused values failed; trying again next round", "namespace", ns, "err", err)
		}
		if res.Deleted > 0 || res.Trashed > 0 || res.Restored > 0 {
			p.m.RetentionRemoved.WithLabelValues("value").Add(float64(res.Deleted))
			p.log.Info("housekeeping: values no session uses", "namespace", ns, "trashed", res.Trashed,
				"deleted", res.Deleted, "freed_bytes", res.FreedBytes, "restored", res.Restored)
		}
	}
	return ok
}

func (p *pruner) stop() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
}
