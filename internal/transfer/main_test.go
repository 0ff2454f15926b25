package transfer_test

import (
	"os"
	"testing"

	"github.com/checkpointd/checkpointd/internal/testenv"
)

// TestMain lets this test binary also run as a node of a crash cluster (testenv.StartCrashCluster).
func TestMain(m *testing.M) {
	testenv.RunNodeIfChild()
	os.Exit(m.Run())
}
