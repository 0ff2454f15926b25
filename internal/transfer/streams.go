package transfer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// ingestConsumer is the durable consumer that every checkpointd instance of a deployment pulls from;
// sharing it is what spreads saves over several daemons.
const ingestConsumer = "checkpointd"

// dedupWindow is how long JetStream remembers message ids to drop duplicate publishes. Saves
// repeated later are still caught by their save id at the session's head.
const dedupWindow = 2 * time.Minute

type streams struct {
	ingest, chunks, results jetstream.Stream
	read                    reader     // from the leader when the streams are replicated (leaderget.go)
	floor                   floorCache // the ingest consumer's ack floor (reconcile.go)
}

// ensureStreams creates or updates the three streams of the protocol (docs/protocol.md):
//
//	CP_INGEST   cp.ingest.>  work queue: a save stays until a daemon has settled it, so "is anything
//	                         still pending for this session?" is one direct get.
//	CP_CHUNKS   cp.chunk.>   pieces of saves too large for one message, removed once settled.
//	CP_RESULTS  cp.result.>  the outcome of each save, one per save id, kept for resultTTL.
func ensureStreams(ctx context.Context, js jetstream.JetStream, replicas int, resultTTL time.Duration) (*streams, error) {
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
	return &streams{ingest: out[0], chunks: out[1], results: out[2], read: reader{nc: js.Conn(), leader: replicas > 1}}, nil
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
