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
			out = append(out, wire.PruneResult{Key: wireKey(k), Versions: res.Versions, Kept: res.Kept})
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

// pruner applies the retention policy to every session now and then (engine.Prune).
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

// round applies retention; it reports whether it succeeded. The log engine has nothing else to
// sweep: a crashed save leaves no orphan (its entry is its commit), and packs delete what they
// packed. Values are never deleted yet (internal/engine/values.go says why).
func (p *pruner) round(ctx context.Context) bool {
	policy := p.policy.get()
	if policy.Default == (engine.Retention{}) && len(policy.ByNamespace) == 0 {
		return true
	}
	res, err := pruneNamespace(ctx, p.engine, "", policy.For, false)
	if p.pruned != nil {
		p.pruned(res)
	}
	for _, r := range res {
		p.m.RetentionRemoved.WithLabelValues("version").Add(float64(len(r.Versions)))
		p.log.Info("retention: pruned old versions", "session", r.Key, "versions", len(r.Versions), "kept", r.Kept)
	}
	if err != nil && ctx.Err() == nil {
		p.log.Warn("retention: prune failed; trying again next round", "err", err)
		return false
	}
	return true
}

func (p *pruner) stop() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
}
