package edge

import (
	"context"
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
// queue ask JetStream for it at most every floorTTL.
type floorCache struct {
	mu  sync.Mutex
	at  time.Time
	seq uint64
}

const floorTTL = 100 * time.Millisecond

// AckFloor returns the CP_INGEST sequence up to which the ingest consumer has acknowledged every
// save.
func (st *Streams) AckFloor(ctx context.Context) (uint64, error) {
	st.floor.mu.Lock()
	defer st.floor.mu.Unlock()
	if time.Since(st.floor.at) < floorTTL {
		return st.floor.seq, nil
	}
	c, err := st.Ingest.Consumer(ctx, IngestConsumer)
	if err != nil {
		return 0, err
	}
	st.floor.at, st.floor.seq = time.Now(), c.CachedInfo().AckFloor.Stream
	return st.floor.seq, nil
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
