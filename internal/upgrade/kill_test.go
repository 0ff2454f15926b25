package upgrade

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// childEnv, set to a data directory, makes the test binary an upgrading daemon (runChild).
const childEnv = "CP_UPGRADE_CHILD_DIR"

// A real kill: a child process runs the embedded server and the upgrade on the fixture and is
// SIGKILLed in the middle of copying a session (after version 5 of chat-appends's 21: the server dies with it);
// a new process's run on the directory finishes the upgrade, and the store is the manifest.
func TestRun_SIGKILL(t *testing.T) {
	dir := unpack(t, "store.tar.gz")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		n, err := strconv.Atoi(strings.Fields(lines.Text())[0])
		require.NoError(t, err, "child said %q", lines.Text())
		if strings.HasSuffix(lines.Text(), "version 5 of team/chat-appends/main") {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
			t.Logf("killed after the child's write %d: %s", n, lines.Text())
			break
		}
	}
	require.True(t, killed, "the child finished before version 5 of chat-appends")
	_ = cmd.Wait()

	s := open(t, dir)
	opts := testOptions()
	opts.Embedded = true // the child's run is another process's: dead, since the directory is ours
	rep, err := Run(context.Background(), s.js, s.eng, s.log, opts)
	require.NoError(t, err)
	require.Positive(t, rep.Skipped, "%+v", rep)
	require.Equal(t, 1, rep.Redone, "chat-appends was half-copied: %+v", rep)
	t.Logf("after the kill: %+v", rep)
	checkUpgraded(t, s, "manifest.json")
}

// runChild runs the upgrade on dir with an embedded server, printing each write's number and
// what it was, a little slowly so that the parent kills it mid-way.
func runChild(dir string) int {
	ctx := context.Background()
	srv, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, _ := jetstream.New(nc)
	log, err := logstore.OpenLog(ctx, nc, logstore.LogConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := testOptions()
	opts.step = func(n int, what string) error {
		fmt.Printf("%d %s\n", n, what)
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	if _, err := Run(ctx, js, engine.New(log, engine.Config{}), log, opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func snapshotDelete(ctx context.Context, st snapshot.Store, key snapshot.Key) (snapshot.Version, error) {
	return snapshot.Delete(ctx, st, key, nil)
}

func snapshotAcquire(ctx context.Context, st snapshot.Store, key snapshot.Key) (snapshot.Lease, error) {
	return snapshot.Acquire(ctx, st, snapshot.LeaseRequest{Key: key, Owner: "older-daemon/1", TTL: time.Hour, Now: time.Now()})
}
