package upgrade

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// The daemon runs the upgrade again on what waiting may cure, and stops on anything else.
func TestTransient(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("reading its history in format 2: %w", nats.ErrNoResponders),
		fmt.Errorf("copying: %w", engine.ErrUnavailable),
		nats.ErrTimeout,
	} {
		require.True(t, Transient(err), "%v", err)
	}
	for _, err := range []error{ErrChangedAfter, ErrIncomplete, engine.ErrHashMismatch, errors.New("disk full")} {
		require.False(t, Transient(err), "%v", err)
	}
}
