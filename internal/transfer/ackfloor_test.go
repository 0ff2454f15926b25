package transfer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A SIGKILLed server can keep the ingest consumer's acknowledgement of a save but lose the work
// queue's removal of it (the crash harness saw 1,478 settled saves left in CP_INGEST below the
// consumer's ack floor). Such a save is never delivered again, and reads of its session must not
// wait for it forever. The test makes that state by putting back the stream's files from before
// the save was settled, keeping the consumer's.
func TestIngest_SettledSaveLeftInTheQueueBlocksNothing(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "stuck"}
	_, err := env.Client.Save(ctx, key, []byte(`[{"role":"user","content":"one"}]`))
	require.NoError(t, err)

	env.StopDaemon()
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(key.WithDefaults()))
	m.Header.Set(wire.HdrSaveID, "settled-twice")
	m.Data = []byte(`[{"role":"user","content":"one"},{"role":"user","content":"two"}]`)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)

	stream := filepath.Join(env.Dir, "jetstream", "$G", "streams", wire.StreamIngest, "msgs")
	saved := filepath.Join(t.TempDir(), "msgs")
	env.Server.Shutdown()
	env.Server.WaitForShutdown()
	require.NoError(t, exec.Command("cp", "-a", stream, saved).Run())

	env.StartServer()
	env.StartDaemon()
	env.Connect()
	_, v, err := env.Client.Restore(ctx, key, 0) // the save is settled and acknowledged
	require.NoError(t, err)
	require.Equal(t, uint64(2), v.Version)

	env.StopDaemon()
	env.Server.Shutdown()
	env.Server.WaitForShutdown()
	require.NoError(t, os.RemoveAll(stream))
	require.NoError(t, exec.Command("cp", "-a", saved, stream).Run())
	env.StartServer()
	ingest, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	info, err := ingest.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the settled save is back in the queue, as after the crash")

	env.StartDaemon()
	env.Connect()
	got, v, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err, "the read does not wait for a save the consumer already acknowledged")
	require.Equal(t, uint64(2), v.Version, "and it was not stored twice")
	require.Equal(t, string(m.Data), string(got))
	require.Eventually(t, func() bool {
		info, err := ingest.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 10*time.Second, 20*time.Millisecond, "the daemon removes it from the queue")
}
