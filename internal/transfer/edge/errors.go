package edge

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// ErrBadRequest marks a request that cannot be served as sent (a bad header, a missing field).
var ErrBadRequest = errors.New("bad request")

// IsTransient reports errors worth retrying: storage or the network was briefly unavailable.
func IsTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, ErrUnavailable) || errors.Is(err, engine.ErrBusy) ||
		errors.Is(err, engine.ErrUnavailable)
}

// ErrUnavailable marks a condition that will pass: JetStream has no leader, ingest is catching up.
var ErrUnavailable = errors.New("temporarily unavailable")
