package edge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A save leaves CP_INGEST when the daemon acknowledges it (work-queue retention). A server killed
// with SIGKILL can keep the consumer's record of that acknowledgement and lose the stream's removal
// of the message: the save is settled, will never be delivered again, and yet sits in the queue,
// where reads of its session (awaitIngest) would wait for it forever. Everything at or below the
// consumer's ack floor was acknowledged, so it is settled whatever the stream still holds: reads
// look past it, and the daemon purges it.

// floorCache remembers the ingest consumer's ack floor for a moment, so that reads waiting on the
// queue ask JetStream for it at most every floorTTL, and at most one request at a time: while the
// consumer's leader is dead, a request hangs for OpTimeout, and no read may queue behind it.
type floorCache struct {
	mu     sync.Mutex
	at     time.Time     // when seq was learnt; zero until the first answer
	seq    uint64        // the ack floor learnt at at
	err    error         // why the last request failed, for readers that know no floor yet
	asking chan struct{} // closed when the request in flight ends; nil when none is
}

const floorTTL = 100 * time.Millisecond

// AckFloor returns the CP_INGEST sequence up to which the ingest consumer has acknowledged every
// save. Everything at or below a floor learnt a moment ago was acknowledged, so that floor is still
// true, only maybe low (a read then waits a little longer on the queue): while a request for a
// newer one is in flight, or hangs on a dead leader, readers get the floor last learnt. Only a
// reader that knows none yet waits, for that one request (at most OpTimeout), within ctx. A floor
// is a consumer's: once its consumer is not found, it is forgotten (askFloor).
func (st *Streams) AckFloor(ctx context.Context) (uint64, error) {
	f := &st.floor
	f.mu.Lock()
	if time.Since(f.at) < floorTTL {
		defer f.mu.Unlock()
		return f.seq, nil
	}
	if f.asking == nil {
		f.asking = make(chan struct{})
		go st.askFloor(f.asking)
	}
	asking, known, seq := f.asking, !f.at.IsZero(), f.seq
	f.mu.Unlock()
	if known {
		return seq, nil
	}
	select {
	case <-asking:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() {
		return 0, f.err
	}
	return f.seq, nil
}

// askFloor asks JetStream for the ack floor, bounded by OpTimeout and by no reader's context (it
// serves all of them), and closes done when the answer, or the failure, is recorded.
func (st *Streams) askFloor(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	c, err := st.Ingest.Consumer(ctx, IngestConsumer)
	f := &st.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.err = fmt.Errorf("ingest consumer %s: ack floor: %w", IngestConsumer, err)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			// The floor learnt was the floor of a consumer that is gone. The next one, maybe of a
			// CP_INGEST made again whose sequences start over at 1, has a floor of its own, maybe
			// lower: the old one, still served, would let a read skip a save not settled yet.
			f.at, f.seq = time.Time{}, 0
		}
	} else {
		f.at, f.seq, f.err = time.Now(), c.CachedInfo().AckFloor.Stream, nil
	}
	f.asking = nil
	close(done)
}

// PurgeAcknowledged removes from CP_INGEST the saves at or below the consumer's ack floor that a
// crash left behind, and returns how many there were.
func (st *Streams) PurgeAcknowledged(ctx context.Context) (uint64, error) {
	c, err := st.Ingest.Consumer(ctx, IngestConsumer)
	if err != nil {
		return 0, err
	}
	floor := c.CachedInfo().AckFloor.Stream
	if floor == 0 {
		return 0, nil
	}
	info, err := st.Ingest.Info(ctx)
	if err != nil || info.State.Msgs == 0 || info.State.FirstSeq > floor {
		return 0, err
	}
	// Purge keeps everything from floor+1 on: saves still pending or not yet delivered.
	if err := st.Ingest.Purge(ctx, jetstream.WithPurgeSequence(floor+1)); err != nil {
		return 0, err
	}
	return floor - info.State.FirstSeq + 1, nil
}
