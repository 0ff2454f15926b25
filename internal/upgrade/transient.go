package upgrade

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// Transient reports whether err may not come back if Run is called again: nobody answered a
// request (a stream whose leader, or whose direct-get responders, are still being placed: a
// cluster just formed, or an election), the store could not answer for now, or a request timed
// out, or JetStream answered that it has no leader for now (10008, "JetStream system temporarily
// unavailable": an election, which a loaded cluster also holds). Run is crash-safe and picks up
// where a run stopped, so calling it again is always safe; the daemon does so on these errors, and
// gives up on any other.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, engine.ErrUnavailable) || errors.Is(err, nats.ErrTimeout) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvailable
}

// errCodeClusterNotAvailable is 10008 (nats-server's JSClusterNotAvailErr).
const errCodeClusterNotAvailable = 10008
