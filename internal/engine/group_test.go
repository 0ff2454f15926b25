package engine_test

import (
	"testing"

	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// The group commit scenarios (enginetest.RunGroups) on memlog; internal/logstore runs them on
// JetStream.
func TestEngine_Groups(t *testing.T) {
	enginetest.RunGroups(t, memlog.New(1<<20))
}
