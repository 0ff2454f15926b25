package memlog

import (
	"testing"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
)

func TestLog_DataReader(t *testing.T) {
	logtest.RunDataReader(t, func(t *testing.T) engine.Log { return New(1 << 20) })
}
