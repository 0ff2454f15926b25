package checkpoint

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Backpressure for AppendAsync: a session's queue of appends not yet sent is bounded, so that a
// producer faster than the daemon (or one that keeps appending while no daemon answers) holds a
// bounded number of appends and bytes, not all it ever produced. AppendAsync waits for room, as
// long as its ctx allows; the appends already queued are not disturbed.

// maxQueuedAppends and maxQueuedBytes bound a session's appends queued and not yet sent: sixteen
// groups' worth (wire.MaxGroupSaves saves each, about one message of bytes each), enough to keep a
// request in flight at all times, and a bound on what a stalled session holds.
const (
	maxQueuedAppends = 16 * wire.MaxGroupSaves
	maxQueuedBytes   = 16 << 20
)

// full reports whether q has no room for an append of n bytes (one append always fits an empty
// queue, whatever its size).
func (q *appendQueue) full(n int) bool {
	return len(q.queued) > 0 && (len(q.queued) >= maxQueuedAppends || q.queuedBytes+n > maxQueuedBytes)
}

// roomMade wakes the AppendAsync calls waiting for room in q (appends left its queue). Called
// with the queues' lock held.
func (q *appendQueue) roomMade() {
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// waitForRoom waits, the queues' lock held (and released while it waits), until q has room for
// an append of n bytes, or ctx ends: then the session's run ends with that error (a later
// append stored without this one's messages would leave a gap), and the error is returned.
func (qs *appendQueues) waitForRoom(ctx context.Context, q *appendQueue, n int) error {
	for q.full(n) && q.failed == nil {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		qs.mu.Unlock()
		select {
		case <-room:
			qs.mu.Lock()
		case <-ctx.Done():
			qs.mu.Lock()
			err := &Error{Code: wire.CodeUnavailable, Index: -1, Offset: -1, Cause: ctx.Err(),
				Message: fmt.Sprintf("not queued: %d appends of this session were waiting to be sent when the context ended (%v); the appends after this one will fail until the session is restarted with ExpectVersion", len(q.queued), ctx.Err())}
			if q.failed == nil {
				q.failed, q.failedWaiting = err, true
			}
			return err
		}
	}
	return nil
}
