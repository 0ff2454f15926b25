package transfer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The NATS service's info names the build (`nats micro info checkpointd`), the same facts as
// checkpointd --version.
func TestService_InfoCarriesBuildInfo(t *testing.T) {
	env := testenv.Start(t)
	msg, err := env.Conn().Request("$SRV.INFO."+wire.ServiceName, nil, 5*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(msg.Data, &info))
	require.Equal(t, buildinfo.Get().Metadata(), info.Metadata)
}
