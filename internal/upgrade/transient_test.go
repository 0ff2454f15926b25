package upgrade

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// The daemon runs the upgrade again on what waiting may cure, and stops on anything else.
func TestTransient(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("reading its history in format 2: %w", nats.ErrNoResponders),
		fmt.Errorf("copying: %w", engine.ErrUnavailable),
		nats.ErrTimeout,
		// What a cluster answers while it elects its meta leader (TestRun_Cluster under load).
		fmt.Errorf("logstore: creating stream CP_LOG: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}),
	} {
		require.True(t, Transient(err), "%v", err)
	}
	for _, err := range []error{ErrChangedAfter, ErrIncomplete, engine.ErrHashMismatch, errors.New("disk full")} {
		require.False(t, Transient(err), "%v", err)
	}
}
