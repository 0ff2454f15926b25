package transfer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// compactor merges the segments of sessions in the background, off the save path: as soon as a
// head has too many extents, and once more, whole, when a session has been idle for a while (one
// segment compresses best and reads fastest). Several daemons may compact one session; the head
// swap lets one win and the others find nothing left to do.
type compactor struct {
	store snapshot.Store
	log   *slog.Logger
	m     *metrics.Metrics
	idle  time.Duration

	mu      sync.Mutex
	timers  map[string]*time.Timer
	pending map[compactJob]bool
	work    chan compactJob
	stopped bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type compactJob struct {
	key  wire.Key
	full bool
}

func newCompactor(store snapshot.Store, log *slog.Logger, m *metrics.Metrics, idle time.Duration) *compactor {
	c := &compactor{store: store, log: log, m: m, idle: idle, timers: map[string]*time.Timer{},
		pending: map[compactJob]bool{}, work: make(chan compactJob, 1024)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	return c
}

// due queues a session whose head has too many extents.
func (c *compactor) due(key wire.Key) { c.enqueue(compactJob{key: key}) }

// touched (re)starts the session's idle timer: when it fires, the session is merged whole.
func (c *compactor) touched(key wire.Key) {
	if c.idle <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	tok := key.Token()
	if t, ok := c.timers[tok]; ok {
		t.Reset(c.idle)
		return
	}
	c.timers[tok] = time.AfterFunc(c.idle, func() {
		c.mu.Lock()
		delete(c.timers, tok)
		c.mu.Unlock()
		c.enqueue(compactJob{key: key, full: true})
	})
}

func (c *compactor) enqueue(j compactJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.pending[j] {
		return
	}
	select {
	case c.work <- j:
		c.pending[j] = true
	default: // the queue is full: the next save of the session asks again
	}
}

func (c *compactor) run() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case j := <-c.work:
			c.mu.Lock()
			delete(c.pending, j)
			c.mu.Unlock()
			c.compact(j)
		}
	}
}

func (c *compactor) compact(j compactJob) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	res, err := snapshot.Compact(ctx, c.store, j.key, j.full)
	if err == nil && j.full {
		var n int
		if n, err = snapshot.ArchiveVersions(ctx, c.store, j.key); n > 0 {
			res.Merged += n
		}
	}
	switch {
	case errors.Is(err, snapshot.ErrRevisionMismatch):
		// A save moved the head meanwhile; it will ask again if the layout is still long.
		c.m.Compactions.WithLabelValues("raced").Inc()
		if j.full {
			c.touched(j.key)
		}
	case err != nil:
		c.m.Compactions.WithLabelValues("error").Inc()
		c.log.Warn("compaction failed; the session stays readable and is retried after its next save", "session", j.key, "err", err)
	case res.Merged > 0:
		c.m.Compactions.WithLabelValues("ok").Inc()
		c.m.CompactedBytes.Add(float64(res.WroteBytes))
		c.log.Debug("compacted", "session", j.key, "full", j.full, "merged", res.Merged, "deleted", res.Deleted,
			"wrote_bytes", res.WroteBytes, "freed_bytes", res.FreedBytes)
	}
}

// stop ends compaction; what was not merged yet is merged after a later save.
func (c *compactor) stop() {
	c.mu.Lock()
	c.stopped = true
	for _, t := range c.timers {
		t.Stop()
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}
