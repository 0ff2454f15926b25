package memlog

import (
	"testing"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
)

func TestLog_Conformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T) engine.Log { return New(1 << 20) })
}
