package logstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine/logtest"
)

// ReadData (batched direct gets without headers) passes the DataReader cases of the conformance
// suite on the embedded server, and on Debian's nats-server 2.9.10 (no batches: Range).
func TestLog_DataReader(t *testing.T) {
	nc, _ := startServer(t)
	logtest.RunDataReader(t, freshLog(nc, LogConfig{}))
}

func TestLog_DataReaderOldNATS(t *testing.T) {
	bin := oldNATS(t)
	nc := connect(t, startProcess(t, bin))
	require.False(t, serverAtLeast(nc, 2, 11))
	logtest.RunDataReader(t, freshLog(nc, LogConfig{}))
}
