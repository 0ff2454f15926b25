package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/service"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// On a daemon without the fork op (no responders), the SDK's Fork falls back to the save with
// Cp-Fork-Of: the same record, stored as a copy.
func TestFork_FallsBackOnADaemonWithoutTheOp(t *testing.T) {
	service.WithoutForkOp(t)
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := env.Conn().Request(wire.APISubject("default", wire.OpFork), []byte(`{}`), 5*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "the daemon plays one before the fork op")
	src, dst := checkpoint.Key{Session: "old"}, checkpoint.Key{Session: "old-fork"}
	conv := `[{"role":"user","content":"one"}]`
	sv, err := env.Client.Save(ctx, src, []byte(conv))
	require.NoError(t, err)
	fv, err := env.Client.Fork(ctx, src, 0, dst)
	require.NoError(t, err)
	require.Equal(t, uint64(1), fv.Version)
	require.Equal(t, sv.Hash, fv.Hash)
	require.Equal(t, "fork", fv.Reason)
	require.Equal(t, &wire.ForkRef{Key: sv.Key, Version: 1}, fv.ForkOf)
	got, _, err := env.Client.Restore(ctx, dst, 0)
	require.NoError(t, err)
	require.Equal(t, conv, string(got))
}
