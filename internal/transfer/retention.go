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

	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// RetentionPolicy is the daemon's retention: a default, and overrides by namespace.
type RetentionPolicy struct {
	Default     snapshot.Retention
	ByNamespace map[string]snapshot.Retention
}

// For returns the retention of a namespace.
func (p RetentionPolicy) For(namespace string) snapshot.Retention {
	if r, ok := p.ByNamespace[namespace]; ok {
		return r
	}
	return p.Default
}

// ParseNamespaceRetention parses "NAMESPACE:keep=N,age=DURATION" (either part may be left out).
func ParseNamespaceRetention(s string) (string, snapshot.Retention, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", snapshot.Retention{}, fmt.Errorf("%q: want NAMESPACE:keep=N,age=DURATION", s)
	}
	ns, spec := s[:i], s[i+1:]
	var r snapshot.Retention
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
			return "", snapshot.Retention{}, fmt.Errorf("retention for namespace %q: %w", ns, err)
		}
	}
	if r.KeepLast < 0 || r.MaxAge < 0 {
		return "", snapshot.Retention{}, fmt.Errorf("retention for namespace %q: negative limit", ns)
	}
	return ns, r, nil
}

// pruneSessions applies retention to the given sessions and reports per session.
func pruneSessions(ctx context.Context, store snapshot.Store, heads []snapshot.Head, ret func(ns string) snapshot.Retention, dryRun bool) ([]wire.PruneResult, error) {
	out := []wire.PruneResult{}
	for _, h := range heads {
		var res snapshot.Pruned
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			res, err = snapshot.Prune(ctx, store, h.Key, ret(h.Key.Namespace), time.Now(), dryRun)
			if !errors.Is(err, snapshot.ErrRevisionMismatch) {
				break // a save moved the head: look again
			}
		}
		if err != nil {
			return out, fmt.Errorf("session %s: %w", h.Key, err)
		}
		if len(res.Versions) > 0 {
			out = append(out, wire.PruneResult{Key: h.Key, Versions: res.Versions, Kept: res.Kept, Segments: res.Segments})
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

// pruner applies the retention policy to every session now and then, and sweeps away segments a
// crashed save left behind (snapshot.Sweep).
type pruner struct {
	store    snapshot.Store
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

// round applies retention, then sweeps; it reports whether every step succeeded.
func (p *pruner) round(ctx context.Context) bool {
	heads, err := p.store.Heads(ctx, "")
	if err != nil {
		p.log.Warn("housekeeping: listing sessions failed; trying again next round", "err", err)
		return false
	}
	ok := true
	if policy := p.policy.get(); policy.Default != (snapshot.Retention{}) || len(policy.ByNamespace) > 0 {
		res, err := pruneSessions(ctx, p.store, heads, policy.For, false)
		if p.pruned != nil {
			p.pruned(res)
		}
		if err != nil && ctx.Err() == nil {
			ok = false
			p.log.Warn("retention: prune failed; trying again next round", "err", err)
		}
		for _, r := range res {
			p.m.RetentionRemoved.WithLabelValues("version").Add(float64(len(r.Versions)))
			p.m.RetentionRemoved.WithLabelValues("segment").Add(float64(r.Segments))
			p.log.Info("retention: pruned old versions", "session", r.Key, "versions", len(r.Versions), "kept", r.Kept, "segments_freed", r.Segments)
		}
	}
	before := time.Now().Add(-snapshot.SweepGrace)
	for _, h := range heads {
		n, err := snapshot.Sweep(ctx, p.store, h.Key, before)
		if err != nil && ctx.Err() == nil && !errors.Is(err, snapshot.ErrNotFound) {
			ok = false
			p.log.Warn("housekeeping: sweeping unreferenced segments failed; trying again next round", "session", h.Key, "err", err)
		}
		if n > 0 {
			p.m.RetentionRemoved.WithLabelValues("segment").Add(float64(n))
			p.log.Info("housekeeping: removed segments a crashed save left behind", "session", h.Key, "segments", n)
		}
	}
	return p.sweepValues(ctx, heads, before) && ok
}

// sweepValues deletes the large values no session of their namespace refers to any more
// (snapshot.SweepValues), in every namespace that has sessions or values.
func (p *pruner) sweepValues(ctx context.Context, heads []snapshot.Head, before time.Time) bool {
	entries, _, err := p.store.ValueEntries(ctx, "")
	if err != nil {
		p.log.Warn("housekeeping: listing values failed; trying again next round", "err", err)
		return false
	}
	ok := true
	namespaces := map[string]bool{}
	for _, h := range heads {
		namespaces[h.Key.Namespace] = true
	}
	for _, e := range entries {
		namespaces[e.Namespace] = true
	}
	for ns := range namespaces {
		res, err := snapshot.SweepValues(ctx, p.store, ns, before)
		if err != nil && ctx.Err() == nil {
			ok = false
			p.log.Warn("housekeeping: sweeping unused values failed; trying again next round", "namespace", ns, "err", err)
		}
		if res.Deleted > 0 || res.Orphans > 0 {
			p.m.RetentionRemoved.WithLabelValues("value").Add(float64(res.Deleted))
			p.log.Info("housekeeping: removed values no session uses", "namespace", ns, "values", res.Deleted, "freed_bytes", res.FreedBytes, "orphans", res.Orphans)
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
