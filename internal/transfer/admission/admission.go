// Package admission bounds the requests the daemon works on at once, and the bytes they hold,
// without ever waiting: a request beyond a limit is refused busy with a hint of when to retry.
// The service admits its reads and scans through one Controller, the save requests through another;
// both run what they admitted on reused goroutines (Workers, workers.go).
package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// nats.go's micro service calls a handler on the goroutine that delivers the endpoint's messages.
// A handler that waits there for room (as the service once did, on a semaphore of 256) stops the
// connection from taking messages off the socket: the server then sees the daemon as a slow
// consumer and cuts its connection, and every request, saves' results and the ingest consumer's
// pulls included, fails until it reconnects. So Controller never waits: a request beyond a limit is
// answered at once with the typed error busy and a hint of when to try again, and the SDK retries.
//
// Three limits, each checked without blocking:
//   - scans (list, admin list, history, prune), whose cost grows with what is stored: at most
//     maxScans at once, so that a flood of them cannot take the slots of the operations below;
//   - point operations (get, read, lease, seal, delete), which include the read-your-writes wait
//     for a session's queued saves: at most maxPoints at once;
//   - bytes: the replies being built and the conversations being loaded for reads share a budget
//     (Config.ReadBytes). A scan reserves the largest reply up front; a read reserves its piece and,
//     when the conversation is not cached, its size while it is loaded (ticket.take).
type Controller struct {
	mu      sync.Mutex
	running [classes]int
	limit   [classes]int
	bytes   int64 // reserved now
	peak    int64 // the most ever reserved at once
	budget  int64
	closed  bool
	service [classes]time.Duration // recent service time of each class (a moving average), for hints
	gauge   prometheus.Gauge
}

// Class is what limit a request counts against.
type Class int

const (
	ClassPoint Class = iota
	ClassScan
	ClassSave // saves sent as requests (internal/transfer/ingest), admitted apart from reads
	classes
)

const (
	maxScans  = 16
	maxPoints = 192
)

// New admits the service's requests: point operations and scans, up to maxPoints and maxScans at
// once, holding at most budget bytes together (gauge shows how many they hold).
func New(budget int64, gauge prometheus.Gauge) *Controller {
	return &Controller{limit: [classes]int{ClassPoint: maxPoints, ClassScan: maxScans}, budget: budget, gauge: gauge}
}

// NewForSaves admits saves sent as requests (class ClassSave only): up to maxRequests at once,
// holding at most budget bytes of bodies together.
func NewForSaves(budget int64, gauge prometheus.Gauge, maxRequests int) *Controller {
	a := New(budget, gauge)
	a.limit = [classes]int{ClassSave: maxRequests}
	return a
}

// Peak is the most the admitted requests ever held at once.
func (a *Controller) Peak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak
}

// Admit takes a slot of class c and, if bytes > 0, reserves them. It never waits: at a limit it
// returns a busy error with a retry hint.
func (a *Controller) Admit(c Class, bytes int64) (*Ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "checkpointd is shutting down"}
	case a.running[c] >= a.limit[c]:
		return nil, a.busy(c, fmt.Sprintf("%d %s requests in progress", a.running[c], c))
	}
	before := a.bytes
	if err := a.reserve(c, bytes); err != nil {
		return nil, err
	}
	a.running[c]++
	return &Ticket{a: a, class: c, bytes: a.bytes - before}, nil
}

// reserve adds n bytes to what is in use, unless that exceeds the budget. A single reservation
// larger than the whole budget (one very large conversation) counts as the budget: it passes when
// nothing else is in use. a.mu is held.
func (a *Controller) reserve(c Class, n int64) error {
	n = min(n, a.budget)
	if n > 0 && a.bytes > 0 && a.bytes+n > a.budget {
		what := "replies and reads"
		if c == ClassSave {
			what = "save requests (--ingest-memory)"
		}
		return a.busy(c, fmt.Sprintf("%d of %d bytes of %s in progress", a.bytes, a.budget, what))
	}
	a.bytes += n
	a.peak = max(a.peak, a.bytes)
	a.gauge.Set(float64(a.bytes))
	return nil
}

// busy is the refusal of a request of class c: what limit was reached and when to try again (twice
// the class's recent service time, between 10 ms and 2 s).
func (a *Controller) busy(c Class, why string) error {
	hint := min(max(2*a.service[c], 10*time.Millisecond), 2*time.Second)
	ms := hint.Milliseconds()
	return &wire.Error{Code: wire.CodeBusy, Message: "checkpointd is busy (" + why + "); retry later", RetryAfterMillis: &ms}
}

// Close refuses every request from now on; drained then waits for those admitted.
func (a *Controller) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}

// Drained waits until no admitted request is running, or ctx ends.
func (a *Controller) Drained(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		a.mu.Lock()
		n := 0
		for _, r := range a.running {
			n += r
		}
		a.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c Class) String() string {
	switch c {
	case ClassScan:
		return "list/history/prune"
	case ClassSave:
		return "save"
	}
	return "get/read/lease"
}

// Ticket is one admitted request: its slot and the bytes it holds, all given back by done.
type Ticket struct {
	a     *Controller
	class Class
	bytes int64
}

// Take reserves n more bytes for the request (a read's piece, a conversation loaded), or returns
// busy. A nil ticket (work outside a request) takes nothing.
func (t *Ticket) Take(n int64) error {
	if t == nil || n <= 0 {
		return nil
	}
	t.a.mu.Lock()
	defer t.a.mu.Unlock()
	before := t.a.bytes
	if err := t.a.reserve(t.class, n); err != nil {
		return err
	}
	t.bytes += t.a.bytes - before
	return nil
}

// Done gives back the slot and the bytes, and folds the request's service time into its class's
// average (a moving average over about the last eight requests).
func (t *Ticket) Done(took time.Duration) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running[t.class]--
	a.bytes -= t.bytes
	a.gauge.Set(float64(a.bytes))
	a.service[t.class] += (took - a.service[t.class]) / 8
}

type ticketKey struct{}

func WithTicket(ctx context.Context, t *Ticket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

// TicketOf returns the request's ticket, or nil outside a request.
func TicketOf(ctx context.Context) *Ticket {
	t, _ := ctx.Value(ticketKey{}).(*Ticket)
	return t
}
