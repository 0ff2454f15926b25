package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/ingest"
)

// watchConn logs and counts every event of the daemon's NATS connection: disconnects, reconnects,
// asynchronous errors (a slow consumer above all: the client dropped messages of one of its
// subscriptions) and its closing. With the embedded server nothing else reports them. Handlers set
// before (checkpointd's own, with --nats-url) still run.
func watchConn(nc *nats.Conn, log *slog.Logger, m *metrics.Metrics) {
	count := func(event string) { m.NATSEvents.WithLabelValues(event).Inc() }
	prevDisconnect, prevReconnect, prevErr, prevClosed := nc.DisconnectErrHandler(), nc.ReconnectHandler(), nc.ErrorHandler(), nc.ClosedHandler()
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		if err == nil && c.IsClosed() { // our own close or drain at shutdown: nothing was lost
			return
		}
		count("disconnect")
		log.Warn("NATS connection lost", "err", err, "url", c.ConnectedUrlRedacted())
		if prevDisconnect != nil {
			prevDisconnect(c, err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		count("reconnect")
		log.Info("NATS connection restored", "url", c.ConnectedUrlRedacted(), "reconnects", c.Stats().Reconnects)
		if prevReconnect != nil {
			prevReconnect(c)
		}
	})
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		if errors.Is(err, nats.ErrSlowConsumer) {
			count("slow_consumer")
			log.Error("NATS slow consumer: messages dropped", "subject", subject, "err", err)
		} else {
			count("error")
			log.Warn("NATS asynchronous error", "subject", subject, "err", err)
		}
		if prevErr != nil {
			prevErr(c, sub, err)
		}
	})
	nc.SetClosedHandler(func(c *nats.Conn) {
		count("closed")
		log.Info("NATS connection closed", "err", c.LastError())
		if prevClosed != nil {
			prevClosed(c)
		}
	})
}

// healthMonitor watches whether saves are being processed: it recreates the ingest consumer when it
// stops delivering (an operator deleted it: saving would otherwise stop until a restart), and
// notices a queue whose oldest save waits while none is settled.
type healthMonitor struct {
	in         *ingest.Ingester
	st         *edge.Streams
	log        *slog.Logger
	interval   time.Duration
	stallAfter time.Duration

	mu          sync.Mutex
	consumerErr error // the ingest consumer is gone, being recreated
	stallErr    error // saves are queued and none is settled

	queue    jetstream.StreamState // the ingest queue at the last check
	queueAt  time.Time             // when that was (zero: not checked yet)
	settled  uint64                // saves ever removed from the queue, at the last check
	progress time.Time             // when settled last moved (or the monitor started)
	lost     bool                  // the consume stopped: recreate the consumer at the next tick

	done chan struct{}
	wg   sync.WaitGroup
}

func newHealthMonitor(in *ingest.Ingester, st *edge.Streams, cfg Config) *healthMonitor {
	interval := cfg.HealthInterval
	if interval == 0 {
		interval = 2 * time.Second
	}
	return &healthMonitor{in: in, st: st, log: cfg.Logger, interval: interval, stallAfter: cfg.StallAfter,
		progress: time.Now(), done: make(chan struct{})}
}

func (h *healthMonitor) start() {
	h.checkQueue() // so that readiness is known from the start, not one interval later
	h.wg.Add(1)
	go h.run()
}

// stop ends the monitor before the ingester shuts down, so that a consume stopped by the shutdown is
// not taken for a lost consumer.
func (h *healthMonitor) stop() {
	if h == nil {
		return
	}
	close(h.done)
	h.wg.Wait()
}

// problems lists what is wrong now, nil when nothing is.
func (h *healthMonitor) problems() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []error
	for _, err := range []error{h.consumerErr, h.stallErr} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

func (h *healthMonitor) run() {
	defer h.wg.Done()
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		var stopped <-chan struct{}
		if cc := h.in.Consuming(); cc != nil && !h.lost {
			stopped = cc.Closed()
		}
		select {
		case <-h.done:
			return
		case <-stopped:
			// The consume ended without a shutdown: its consumer was deleted (or the connection
			// closed for good, and recreating fails until it is back). Recreating waits for the
			// next tick, so that something deleting it over and over does not make a busy loop.
			h.lost = true
			h.setConsumerErr(fmt.Errorf("ingest consumer %s stopped delivering saves (deleted?); recreating it", edge.IngestConsumer))
			h.log.Error("ingest: consumer lost, recreating it", "consumer", edge.IngestConsumer)
		case <-t.C:
			if h.lost {
				h.lost = !h.recreate()
			} else {
				h.checkConsumer()
			}
			h.checkQueue()
		}
	}
}

// checkConsumer stops the consume if its consumer is gone (deleted while no pull was waiting, so
// the consume was not told), or if the consumer of its name is not one it can pull from (a push
// consumer put in its place: pulls to it are never answered, and the consume, missing heartbeats,
// would wait on it for ever): the loop then recreates it, and says so while it cannot.
func (h *healthMonitor) checkConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), edge.OpTimeout)
	defer cancel()
	_, err := h.st.Ingest.Consumer(ctx, edge.IngestConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrNotPullConsumer) {
		if cc := h.in.Consuming(); cc != nil {
			cc.Stop()
		}
	}
}

// checkQueue reads the ingest queue's state for stalled.
func (h *healthMonitor) checkQueue() {
	ctx, cancel := context.WithTimeout(context.Background(), edge.OpTimeout)
	defer cancel()
	info, err := h.st.Ingest.Info(ctx)
	if err != nil {
		return // the connection's state says more; a lost reply is no verdict on ingest
	}
	h.stalled(info.State, time.Now())
}

// stalled flags a stall: the oldest queued save is older than stallAfter and no save left the
// queue for as long. Settled saves leave the work queue, so the stream's last sequence minus the
// messages still in it counts every save settled so far, by any daemon.
func (h *healthMonitor) stalled(st jetstream.StreamState, now time.Time) {
	settled := st.LastSeq - st.Msgs
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queue, h.queueAt = st, now
	if settled != h.settled || st.Msgs == 0 {
		h.settled, h.progress = settled, now
	}
	oldest := now.Sub(st.FirstTime)
	if st.Msgs > 0 && oldest > h.stallAfter && now.Sub(h.progress) > h.stallAfter {
		if h.stallErr == nil {
			h.log.Error("ingest: saves are queued and none is being settled", "queued", st.Msgs, "oldest", oldest.Round(time.Second))
		}
		h.stallErr = fmt.Errorf("ingest stalled: %d saves queued, the oldest for %s, and none settled for %s",
			st.Msgs, oldest.Round(time.Second), now.Sub(h.progress).Round(time.Second))
		return
	}
	h.stallErr = nil
}

// caughtUp returns nil when, at the last check, no queued save was older than lag.
func (h *healthMonitor) caughtUp(now time.Time, lag time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.queueAt.IsZero():
		return errors.New("the ingest queue was not read yet")
	case h.queue.Msgs > 0 && h.queueAt.Sub(h.queue.FirstTime) > lag:
		return fmt.Errorf("catching up: %d messages queued, the oldest for %s (ready below %s)",
			h.queue.Msgs, h.queueAt.Sub(h.queue.FirstTime).Round(time.Second), lag)
	}
	return nil
}

// recreate starts consuming again, recreating the durable consumer.
func (h *healthMonitor) recreate() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.in.Consume(ctx); err != nil {
		h.setConsumerErr(fmt.Errorf("ingest consumer %s is gone and recreating it failed (will retry): %w", edge.IngestConsumer, err))
		h.log.Error("ingest: recreating the consumer failed, will retry", "err", err)
		return false
	}
	h.setConsumerErr(nil)
	h.log.Info("ingest: consumer recreated", "consumer", edge.IngestConsumer)
	return true
}

func (h *healthMonitor) setConsumerErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.consumerErr = err
}
