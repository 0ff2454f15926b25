// Package housekeeping is the daemon's work beside serving requests: packing sessions after their
// saves (pack.go), applying the retention policy and sweeping values nothing refers to
// (retention.go), and lowering the collector's target while a large checkpoint is in flight
// (eagergc.go). The ingest and the service call into it; it calls neither.
package housekeeping

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
)

// Packer packs sessions after their saves (docs/format.md §8.7): a save whose entries since the
// session's last pack are due says so (engine.Saved.PackDue), and the session is packed here, in
// the background, after the save was answered, so a pack never adds to a save's latency. A pack
// that loses its compare-and-swap to a newer save is simply not done: the next due save asks again.
// It replaces format 2's compactor (idle merges), eager GC and segment grace.
type Packer struct {
	engine *engine.Engine
	log    *slog.Logger
	m      *metrics.Metrics // compactions_total, compacted_bytes_total

	mu      sync.Mutex
	queued  map[engine.Key]bool // due and not yet packed: a session is queued once
	work    chan engine.Key
	done    chan struct{}
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
}

// packQueue bounds the sessions waiting to be packed. A session dropped because the queue is full
// is packed by its next due save (packs are an optimisation of reads, never needed for one).
const packQueue = 1024

// NewPacker starts a packer of e's sessions, counting its packs in m; Stop ends it.
func NewPacker(e *engine.Engine, log *slog.Logger, m *metrics.Metrics) *Packer {
	p := &Packer{engine: e, log: log, m: m, queued: map[engine.Key]bool{}, work: make(chan engine.Key, packQueue), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p
}

// Due queues key to be packed, unless it is already queued or the queue is full.
func (p *Packer) Due(key engine.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.queued[key] {
		return
	}
	select {
	case p.work <- key:
		p.queued[key] = true
	default:
	}
}

func (p *Packer) run() {
	defer close(p.done)
	for key := range p.work {
		p.mu.Lock()
		delete(p.queued, key)
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		res, err := p.engine.Pack(ctx, key, false)
		cancel()
		switch {
		case err != nil && p.ctx.Err() != nil:
			// stopping: the pack was abandoned, not failed
		case err != nil:
			p.m.Compactions.WithLabelValues("error").Inc()
			p.log.Warn("pack failed; the session's next due save tries again", "session", key, "err", err)
		case res == (engine.PackResult{}):
			p.m.Compactions.WithLabelValues("raced").Inc()
		default:
			p.m.Compactions.WithLabelValues("ok").Inc()
			p.m.CompactedBytes.Add(float64(res.Bytes))
		}
	}
}

// Stop ends the packing; a pack under way is abandoned (a pack interrupted at any point leaves the
// session readable, docs/format.md §8.7).
func (p *Packer) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	close(p.work)
	p.mu.Unlock()
	p.cancel()
	<-p.done
}
