package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// IngestConsumer is the durable consumer that every checkpointd instance of a deployment pulls from;
// sharing it is what spreads saves over several daemons.
const IngestConsumer = "checkpointd"

// dedupWindow is how long JetStream remembers message ids to drop duplicate publishes. Saves
// repeated later are still caught by their save id at the session's head.
const dedupWindow = 2 * time.Minute

// Streams are the protocol's streams as the daemon opened them (EnsureStreams), and how it reads
// them.
type Streams struct {
	Ingest, Chunks jetstream.Stream
	Read           Reader     // from the leader when the streams are replicated (leaderget.go)
	floor          floorCache // the ingest consumer's ack floor (reconcile.go)
	results        lazyStream // CP_RESULTS: made by the first result stored (Results)
}

// lazyStream is a stream the daemon makes only when it first writes to it: until then it takes
// no file in the data directory (docs/format.md §8.15f).
type lazyStream struct {
	js  jetstream.JetStream
	cfg jetstream.StreamConfig
	mu  sync.Mutex
	s   jetstream.Stream // once it is known to exist
}

// EnsureStreams creates or updates the streams of the protocol (docs/protocol.md):
//
//	CP_INGEST   cp.ingest.>  work queue: a save stays until a daemon has settled it, so "is anything
//	                         still pending for this session?" is one direct get.
//	CP_CHUNKS   cp.chunk.>   pieces of saves too large for one message, removed once settled.
//	CP_RESULTS  cp.result.>  the outcome of each save, one per save id, kept for resultTTL.
//
// CP_INGEST and CP_CHUNKS are made here: clients publish to them, even while no daemon runs.
// CP_RESULTS only the daemon writes, and only for saves off CP_INGEST (a save sent as a request
// is answered in its reply): it is updated here if it exists, and otherwise made by the first
// result stored (Results). A client looking a result up before then gets no responders, which
// it takes as "none stored yet", as it does a 404.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int, resultTTL time.Duration) (*Streams, error) {
	cfgs := []jetstream.StreamConfig{{
		Name:        wire.StreamIngest,
		Description: "checkpointd: saves waiting to be versioned",
		Subjects:    []string{"cp.ingest.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  dedupWindow,
		RePublish:   new(IngestRePublish), // notes.go: reads learn of queued saves without asking
	}, {
		Name:        wire.StreamChunks,
		Description: "checkpointd: pieces of large saves",
		Subjects:    []string{"cp.chunk.>"},
		MaxAge:      24 * time.Hour,
		Duplicates:  dedupWindow,
	}, {
		Name:              wire.StreamResults,
		Description:       "checkpointd: the outcome of each save",
		Subjects:          []string{"cp.result.>"},
		MaxAge:            resultTTL,
		MaxMsgsPerSubject: 1,
	}}
	for i := range cfgs {
		cfgs[i].Storage = jetstream.FileStorage
		cfgs[i].Replicas = max(replicas, 1)
		cfgs[i].AllowDirect = true
	}
	var out [2]jetstream.Stream
	for i, cfg := range cfgs[:2] {
		s, err := ensureStream(ctx, js, cfg)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
		out[i] = s
	}
	st := &Streams{Ingest: out[0], Chunks: out[1], Read: Reader{nc: js.Conn(), Leader: replicas > 1},
		results: lazyStream{js: js, cfg: cfgs[2]}}
	if _, err := st.results.open(ctx, false); err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfgs[2].Name, err)
	}
	return st, nil
}

// Results returns CP_RESULTS; with create, making it if it does not exist yet (before the
// first result is stored), otherwise nil when it does not.
func (st *Streams) Results(ctx context.Context, create bool) (jetstream.Stream, error) {
	return st.results.open(ctx, create)
}

// OpenedResults returns CP_RESULTS if the daemon has opened it (it existed at start-up, or a
// result was stored since), nil otherwise, without asking JetStream.
func (st *Streams) OpenedResults() jetstream.Stream {
	st.results.mu.Lock()
	defer st.results.mu.Unlock()
	return st.results.s
}

// open returns the stream if it exists (updating its settings the first time it is seen, as
// ensureStream does), makes it if it does not and create is set, and otherwise returns nil.
func (l *lazyStream) open(ctx context.Context, create bool) (jetstream.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	s, err := l.js.Stream(ctx, l.cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && !create {
		return nil, nil
	}
	if s, err = settleStream(ctx, l.js, l.cfg, s, err); err != nil {
		return nil, err
	}
	l.s = s
	return s, nil
}

// ensureStream creates the stream, or updates it if a setting checkpointd owns differs. It never
// sends an update that changes nothing: in a cluster, an update is a placement decision that can be
// refused while a peer is briefly unseen, and several checkpointd instances start at once.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	return settleStream(ctx, js, cfg, s, err)
}

// settleStream is ensureStream once the stream was looked up (s, err: what js.Stream answered).
func settleStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, s jetstream.Stream, err error) (jetstream.Stream, error) {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another instance was quicker
			s, err = js.Stream(ctx, cfg.Name)
		}
		return s, err
	}
	if err != nil {
		return nil, err
	}
	if have := s.CachedInfo().Config; !sameSettings(have, cfg) {
		return js.UpdateStream(ctx, cfg)
	}
	return s, nil
}

// sameSettings compares what checkpointd sets on its streams.
func sameSettings(a, b jetstream.StreamConfig) bool {
	return slices.Equal(a.Subjects, b.Subjects) && a.Retention == b.Retention && a.MaxAge == b.MaxAge &&
		a.Duplicates == b.Duplicates && a.MaxMsgsPerSubject == b.MaxMsgsPerSubject && a.Replicas == b.Replicas &&
		a.AllowDirect == b.AllowDirect && a.Storage == b.Storage && a.Description == b.Description &&
		sameRePublish(a.RePublish, b.RePublish)
}

func sameRePublish(a, b *jetstream.RePublish) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
