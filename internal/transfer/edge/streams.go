package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	Ingest, Chunks, Results jetstream.Stream
	Read                    Reader     // from the leader when the streams are replicated (leaderget.go)
	floor                   floorCache // the ingest consumer's ack floor (reconcile.go)
}

// EnsureStreams creates or updates the three streams of the protocol (docs/protocol.md):
//
//	CP_INGEST   cp.ingest.>  work queue: a save stays until a daemon has settled it, so "is anything
//	                         still pending for this session?" is one direct get.
//	CP_CHUNKS   cp.chunk.>   pieces of saves too large for one message, removed once settled.
//	CP_RESULTS  cp.result.>  the outcome of each save, one per save id, kept for resultTTL.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int, resultTTL time.Duration) (*Streams, error) {
	cfgs := []jetstream.StreamConfig{{
		Name:        wire.StreamIngest,
		Description: "checkpointd: saves waiting to be versioned",
		Subjects:    []string{"cp.ingest.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  dedupWindow,
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
	var out [3]jetstream.Stream
	for i, cfg := range cfgs {
		cfg.Storage = jetstream.FileStorage
		cfg.Replicas = max(replicas, 1)
		cfg.AllowDirect = true
		s, err := ensureStream(ctx, js, cfg)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
		out[i] = s
	}
	return &Streams{Ingest: out[0], Chunks: out[1], Results: out[2], Read: Reader{nc: js.Conn(), Leader: replicas > 1}}, nil
}

// ensureStream creates the stream, or updates it if a setting checkpointd owns differs. It never
// sends an update that changes nothing: in a cluster, an update is a placement decision that can be
// refused while a peer is briefly unseen, and several checkpointd instances start at once.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
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
		a.AllowDirect == b.AllowDirect && a.Storage == b.Storage && a.Description == b.Description
}
