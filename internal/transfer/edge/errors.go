package edge

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// ErrBadRequest marks a request that cannot be served as sent (a bad header, a missing field).
var ErrBadRequest = errors.New("bad request")

// IsTransient reports errors worth retrying: storage or the network was briefly unavailable.
func IsTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, ErrUnavailable) || errors.Is(err, engine.ErrBusy) ||
		errors.Is(err, engine.ErrUnavailable) || ClusterUnavailable(err)
}

// ClusterUnavailable reports JetStream's "JetStream system temporarily unavailable" (10008), what a
// server of a cluster answers an API request (a stream's creation, say) while it knows no leader of
// the meta group or of the stream: an election, which a loaded cluster also holds when a leader
// misses its heartbeats (TestRun_Cluster: creating CP_LOG at start-up under load).
func ClusterUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvailable
}

// errCodeClusterNotAvailable is 10008 (nats-server's JSClusterNotAvailErr).
const errCodeClusterNotAvailable = 10008

// ErrUnavailable marks a condition that will pass: JetStream has no leader, ingest is catching up.
var ErrUnavailable = errors.New("temporarily unavailable")
