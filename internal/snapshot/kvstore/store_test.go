package kvstore_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
	"github.com/checkpointd/checkpointd/internal/snapshot/storetest"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// The JetStream store keeps the snapshot.Store contract, on a real embedded nats-server.
func TestStore_Conformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (snapshot.Store, int) {
		s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
		require.NoError(t, err)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		nc, err := nats.Connect(s.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		const chunk = 4096 // small pieces, so multi-piece segments are cheap to test
		st, err := kvstore.OpenStore(context.Background(), js, kvstore.StoreConfig{Replicas: 1, ChunkSize: chunk})
		require.NoError(t, err)
		return st, chunk
	})
}
