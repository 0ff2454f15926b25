package edge

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NewNotesSized is NewNotes with at most buffer notes waiting, taken out every poll.
func NewNotesSized(nc *nats.Conn, log, ingest jetstream.Stream, buffer int, poll time.Duration) *Notes {
	return newNotes(nc, log, ingest, buffer, poll)
}
