package edge_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// heldAPI is a real server's JetStream API seen through a relay on heldPrefix that can stop
// answering the ingest consumer's info requests, as a consumer leader that died or hangs does: the
// request is received and never answered.
type heldAPI struct {
	js    jetstream.JetStream // JetStream through the relay
	plain jetstream.JetStream // JetStream without it
	hold  atomic.Bool         // consumer info requests go unanswered
	asked atomic.Int32        // consumer info requests received while held
}

const heldPrefix = "held.API"

func startHeldAPI(t *testing.T) *heldAPI {
	t.Helper()
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "held"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	relay, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	h := &heldAPI{}
	_, err = relay.Subscribe(heldPrefix+".>", func(m *nats.Msg) {
		api := strings.TrimPrefix(m.Subject, heldPrefix+".")
		if h.hold.Load() && strings.HasPrefix(api, "CONSUMER.INFO.") {
			h.asked.Add(1)
			return
		}
		go func() {
			reply, err := relay.Request(jetstream.DefaultAPIPrefix+api, m.Data, 5*time.Second)
			if err == nil {
				_ = m.Respond(reply.Data)
			}
		}()
	})
	require.NoError(t, err)
	require.NoError(t, relay.Flush()) // the relay's subscription is the server's before any request
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	h.js, err = jetstream.NewWithAPIPrefix(nc, heldPrefix)
	require.NoError(t, err)
	h.plain, err = jetstream.New(nc)
	require.NoError(t, err)
	return h
}

// streamsWithFloor makes the streams, the ingest consumer and saves it acknowledged, and returns
// the streams once their AckFloor is the last of them.
func streamsWithFloor(ctx context.Context, t *testing.T, h *heldAPI, saves int) *edge.Streams {
	t.Helper()
	st, err := edge.EnsureStreams(ctx, h.js, 1, time.Hour)
	require.NoError(t, err)
	consumer, err := h.plain.CreateOrUpdateConsumer(ctx, wire.StreamIngest, jetstream.ConsumerConfig{Durable: edge.IngestConsumer, AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	for range saves {
		_, err = h.plain.Publish(ctx, "cp.ingest.t.s.a", []byte("save"))
		require.NoError(t, err)
	}
	// Fetch, not FetchNoWait: a consumer just made may not have them yet.
	batch, err := consumer.Fetch(saves, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	acked := 0
	for m := range batch.Messages() {
		require.NoError(t, m.DoubleAck(ctx))
		acked++
	}
	require.Equal(t, saves, acked)
	require.Eventually(t, func() bool { f, err := st.AckFloor(ctx); return err == nil && f == uint64(saves) },
		5*time.Second, 20*time.Millisecond, "the floor of an answering consumer")
	return st
}

// While the ingest consumer's leader does not answer, reads waiting on the ingest queue ask it
// for its ack floor (service.awaitQueued). They used to queue on a mutex held across one request
// bounded only by the first reader's deadline: every read waited out the one before. Now one
// request is in flight, bounded by edge.OpTimeout, and readers get the floor last learnt; a reader
// that knows none gets an error within edge.OpTimeout, whatever its own deadline.
func TestAckFloor_UnansweredConsumerInfoHoldsNoReader(t *testing.T) {
	h := startHeldAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := streamsWithFloor(ctx, t, h, 1)

	h.hold.Store(true)
	time.Sleep(150 * time.Millisecond) // the floor learnt is now older than its cache's life
	readers := func() {
		var wg sync.WaitGroup
		start := time.Now()
		for range 8 {
			wg.Go(func() {
				readerCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // a read's own bound
				defer cancel()
				floor, err := st.AckFloor(readerCtx)
				assert.NoError(t, err) // not require: FailNow belongs to the test's goroutine
				assert.EqualValues(t, 1, floor, "the floor last learnt")
			})
		}
		wg.Wait()
		require.Less(t, time.Since(start), time.Second, "readers waited on the unanswered request")
	}
	readers()
	require.Eventually(t, func() bool { return h.asked.Load() == 1 }, time.Second, 10*time.Millisecond)
	readers()
	require.EqualValues(t, 1, h.asked.Load(), "one request in flight for all readers")

	// A daemon that never learnt the floor (just started) gets an error within OpTimeout.
	fresh, err := edge.EnsureStreams(ctx, h.js, 1, time.Hour)
	require.NoError(t, err)
	start := time.Now()
	_, err = fresh.AckFloor(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), edge.OpTimeout+time.Second, "bounded by OpTimeout, not the reader's deadline")

	h.hold.Store(false)
	require.Eventually(t, func() bool { f, err := fresh.AckFloor(ctx); return err == nil && f == 1 },
		5*time.Second, 20*time.Millisecond, "the floor again once the consumer answers")
}

// A floor is its consumer's. Once CP_INGEST is deleted and made again (its sequences start over at
// 1) the consumer whose floor was learnt is gone: the old floor, served while asking for a new one
// fails, would be too high, and a read would skip a save not settled yet (service.awaitQueued).
// Once the consumer is not found, AckFloor gives an error, never that floor.
func TestAckFloor_ForgetsTheFloorOfAConsumerThatIsGone(t *testing.T) {
	h := startHeldAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := streamsWithFloor(ctx, t, h, 3)

	// CP_INGEST made again, its consumer not yet: a save queued at sequence 1, not settled.
	require.NoError(t, h.plain.DeleteStream(ctx, wire.StreamIngest))
	_, err := edge.EnsureStreams(ctx, h.js, 1, time.Hour)
	require.NoError(t, err)
	ack, err := h.plain.Publish(ctx, "cp.ingest.t.s.a", []byte("save"))
	require.NoError(t, err)
	require.EqualValues(t, 1, ack.Sequence)

	// The first reader past the cache's life may get the floor last learnt while the request is
	// in flight; once it has failed, none does.
	require.Eventually(t, func() bool { _, err := st.AckFloor(ctx); return err != nil },
		5*time.Second, 20*time.Millisecond, "the consumer is gone: its floor must not be served")
	for range 5 {
		time.Sleep(30 * time.Millisecond)
		floor, err := st.AckFloor(ctx)
		if err == nil {
			require.Less(t, floor, ack.Sequence, "a floor above a save not settled")
		}
	}
}
