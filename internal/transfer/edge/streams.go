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
		Subjects:    []string{wire.EverySubject(wire.IngestSubjectPrefix)},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  dedupWindow,
		RePublish:   new(IngestRePublish), // notes.go: reads learn of queued saves without asking
	}, {
		Name:        wire.StreamChunks,
		Description: "checkpointd: pieces of large saves",
		Subjects:    []string{wire.EverySubject(wire.ChunkSubjectPrefix)},
		MaxAge:      24 * time.Hour,
		Duplicates:  dedupWindow,
	}, {
		Name:              wire.StreamResults,
		Description:       "checkpointd: the outcome of each save",
		Subjects:          []string{wire.EverySubject(wire.ResultSubjectPrefix)},
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
//
// A save waits here (the first save off the ingest stream a daemon settles), and so does every
// other save that needs the stream meanwhile, so each request is bounded by OpTimeout: one sent to
// a leader that has just died (the stream's, or the meta group's, which makes and updates streams
// and answers for one that does not exist) is never answered, and failing in seconds lets the save
// be retried against the new leader. Bounded only by the save's deadline, it held every save off
// the ingest stream for 30 s after the meta leader's death (TestCluster_Harness).
func (l *lazyStream) open(ctx context.Context, create bool) (jetstream.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	lctx, cancel := OpContext(ctx)
	s, err := l.js.Stream(lctx, l.cfg.Name)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) && !create {
		return nil, nil
	}
	sctx, cancel := OpContext(ctx)
	defer cancel()
	if s, err = settleStream(sctx, l.js, l.cfg, s, err); err != nil {
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

// sameSettings compares what checkpointd sets on its streams (want) with what the server keeps
// (have). A setting checkpointd leaves unset the server stores as its default (MaxMsgsPerSubject
// -1, no limit; Duplicates its dedup window, 2 min or MaxAge if shorter): that is no difference.
// Counting it as one made every daemon send an update of CP_INGEST and CP_CHUNKS when it started,
// and of CP_RESULTS when it first opened it after another daemon had made it: an update is a
// request only the meta leader answers, so after its death the save waiting on it waited out its
// deadline.
func sameSettings(have, want jetstream.StreamConfig) bool {
	dups := have.Duplicates
	if want.Duplicates == 0 {
		dups = 0 // the server's default, whatever it is
	}
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.MaxAge == want.MaxAge &&
		dups == want.Duplicates && perSubjectLimit(have) == perSubjectLimit(want) && have.Replicas == want.Replicas &&
		have.AllowDirect == want.AllowDirect && have.Storage == want.Storage && have.Description == want.Description &&
		sameRePublish(have.RePublish, want.RePublish)
}

// perSubjectLimit is cfg's MaxMsgsPerSubject, 0 for no limit (the server stores -1).
func perSubjectLimit(cfg jetstream.StreamConfig) int64 {
	return max(cfg.MaxMsgsPerSubject, 0)
}

func sameRePublish(a, b *jetstream.RePublish) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
