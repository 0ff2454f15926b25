package transfer

import (
	"context"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reports, at scrape time, what only JetStream and the daemon's memory know: the
// ingest queue (saves waiting, the oldest one's age, what the consumer has yet to deliver), each
// stream's messages and bytes (CP_LOG holds every session), the read cache.
//
// A scrape must stay cheap and must not hang on a JetStream that does not answer: the JetStream
// figures are refreshed at most every stateMaxAge, in the background, with a deadline; a scrape
// waits for a refresh at most stateScrapeWait and otherwise reports the last figures, saying how old
// they are (checkpointd_state_age_seconds). One refresh costs one info request per stream (4) and
// one for the ingest consumer.
type stateCollector struct {
	d *Daemon

	mu         sync.Mutex
	ingest     jetstream.StreamState
	consumer   *jetstream.ConsumerInfo
	streams    map[string]jetstream.StreamState
	at         time.Time     // when the last refresh ended
	refreshing chan struct{} // closed when the refresh under way ends; nil when none is
	failures   uint64        // refreshes that failed at least one request
}

const (
	stateMaxAge     = 2 * time.Second
	stateScrapeWait = time.Second
	stateDeadline   = 5 * time.Second
)

func newStateCollector(d *Daemon) *stateCollector {
	return &stateCollector{d: d, streams: map[string]jetstream.StreamState{}}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("checkpointd_"+name, help, labels, nil)
}

var (
	queuedDesc = desc("ingest_queued_messages", "Messages waiting on the ingest stream (saves not yet settled, by any daemon).")
	oldestDesc = desc("ingest_oldest_queued_age_seconds", "Age of the oldest message waiting on the ingest stream (0 when none): the ingest lag to alert on.")
	pendDesc   = desc("ingest_consumer_pending_messages", "Messages of the ingest consumer by state: undelivered (waiting for a daemon) or unacknowledged (being settled).", "state")
	strMsgDesc = desc("stream_messages", "Messages stored in each of checkpointd's JetStream streams.", "stream")
	strByDesc  = desc("stream_bytes", "Bytes stored in each of checkpointd's JetStream streams (per replica).", "stream")
	hitsDesc   = desc("read_cache_lookups_total", "Lookups in the read cache, by result (hit, miss).", "result")
	cacheDesc  = desc("read_cache_bytes", "Bytes held by the read cache.")
	ageDesc    = desc("state_age_seconds", "Age of the JetStream figures reported (ingest queue, streams): large when JetStream does not answer.")
	failDesc   = desc("state_refresh_failures_total", "Refreshes of the JetStream figures of /metrics that failed at least one request.")
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queuedDesc, oldestDesc, pendDesc, strMsgDesc, strByDesc, hitsDesc, cacheDesc, ageDesc, failDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if done := c.startRefresh(); done != nil {
		select {
		case <-done:
		case <-time.After(stateScrapeWait):
		}
	}
	now := time.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c.mu.Lock()
	if !c.at.IsZero() {
		gauge(queuedDesc, float64(c.ingest.Msgs))
		oldest := 0.0
		if c.ingest.Msgs > 0 && !c.ingest.FirstTime.IsZero() {
			oldest = max(now.Sub(c.ingest.FirstTime).Seconds(), 0)
		}
		gauge(oldestDesc, oldest)
		gauge(ageDesc, now.Sub(c.at).Seconds())
	}
	if ci := c.consumer; ci != nil {
		gauge(pendDesc, float64(ci.NumPending), "undelivered")
		gauge(pendDesc, float64(ci.NumAckPending), "unacknowledged")
	}
	for name, st := range c.streams {
		gauge(strMsgDesc, float64(st.Msgs), name)
		gauge(strByDesc, float64(st.Bytes), name)
	}
	ch <- prometheus.MustNewConstMetric(failDesc, prometheus.CounterValue, float64(c.failures))
	c.mu.Unlock()

	hits, misses, bytes := c.d.svc.CacheStats()
	ch <- prometheus.MustNewConstMetric(hitsDesc, prometheus.CounterValue, float64(hits), "hit")
	ch <- prometheus.MustNewConstMetric(hitsDesc, prometheus.CounterValue, float64(misses), "miss")
	gauge(cacheDesc, float64(bytes))
}

// startRefresh starts a refresh if the figures are stale and none is under way, and returns a
// channel closed when the refresh under way (if any) ends.
func (c *stateCollector) startRefresh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refreshing != nil {
		return c.refreshing
	}
	if time.Since(c.at) < stateMaxAge {
		return nil
	}
	done := make(chan struct{})
	c.refreshing = done
	go c.refresh(done)
	return done
}

// refresh asks JetStream for the figures; each that answers replaces its old value.
func (c *stateCollector) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), stateDeadline)
	defer cancel()
	failed := false
	st := c.d.st
	results, err := st.Results(ctx, false) // nil until the first result is stored
	failed = failed || err != nil
	streams := []jetstream.Stream{st.Ingest, st.Chunks, results, c.d.logStream}
	fresh := map[string]jetstream.StreamState{}
	for _, s := range streams {
		if s == nil {
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			failed = true
			continue
		}
		fresh[info.Config.Name] = info.State
	}
	ci, err := st.Ingest.Consumer(ctx, edge.IngestConsumer)
	var cinfo *jetstream.ConsumerInfo
	if err == nil {
		cinfo, err = ci.Info(ctx)
	}
	failed = failed || err != nil

	c.mu.Lock()
	defer c.mu.Unlock()
	for name, s := range fresh {
		c.streams[name] = s
	}
	if s, ok := fresh[st.Ingest.CachedInfo().Config.Name]; ok {
		c.ingest = s
		c.at = time.Now()
	}
	if cinfo != nil {
		c.consumer = cinfo
	}
	if failed {
		c.failures++
	}
	c.refreshing = nil
	close(done)
}
