package transfer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
)

// appendAnswerLost is the real JetStream log (stream CP_LOG), except that the answer to one Append
// is lost after the entry was stored: what a daemon sees when the stream's leader stores the entry
// and dies before replying (the cluster harness met it with format 2: an acknowledged version whose
// data was gone).
type appendAnswerLost struct {
	engine.Log
	lose atomic.Bool
}

func (l *appendAnswerLost) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	seq, err := l.Log.Append(ctx, key, data, after)
	if err == nil && l.lose.CompareAndSwap(true, false) {
		return 0, context.DeadlineExceeded
	}
	return seq, err
}

// lossyEngine is an engine of its own over env's CP_LOG whose next Append answer is lost when lose
// is set.
func lossyEngine(t *testing.T, env *testenv.Env, cfg engine.Config) (*engine.Engine, *appendAnswerLost) {
	log, err := logstore.OpenLog(context.Background(), env.NC, logstore.LogConfig{Stream: edge.LogStream})
	require.NoError(t, err)
	lossy := &appendAnswerLost{Log: log}
	return engine.New(lossy, cfg), lossy
}

// A save whose entry was stored but not answered is retried under its save id and found committed
// (a duplicate, not a second version): the acknowledged version reads, also through the daemon.
func TestFailover_AppendAnsweredLateKeepsTheSave(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	eng, lossy := lossyEngine(t, env, engine.Config{})
	key := engine.Key{Namespace: "default", Session: "late", Agent: "main"}
	save := func(id string, conv []byte) (engine.Saved, error) {
		return eng.Save(ctx, engine.SaveRequest{Key: key, SaveID: id, Writer: "t", Now: time.Now(),
			Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
	}
	_, err := save("one", []byte(`[{"role":"user","content":"one"}]`))
	require.NoError(t, err)
	lossy.lose.Store(true)
	conv := []byte(`[{"role":"user","content":"one"},{"role":"user","content":"two"}]`)
	_, err = save("two", conv)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the answer was lost")
	saved, err := save("two", conv) // the daemon retries the save
	require.NoError(t, err)
	require.True(t, saved.Duplicate, "the retry finds the save committed")
	require.Equal(t, uint64(2), saved.Record.Version)
	got, _, err := env.Client.Restore(ctx, keyOfEngine(key), 2)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))
	hist, err := env.Client.History(ctx, keyOfEngine(key))
	require.NoError(t, err)
	require.Len(t, hist, 2, "one version per save")
}

// A pack whose entry was stored but not answered leaves every version readable: the pack is the
// head (the entries it packed are read from it), and the next pack deletes what it packed.
func TestFailover_PackAnsweredLateKeepsEveryVersion(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	eng, lossy := lossyEngine(t, env, engine.Config{PackBytes: 1 << 40, PackEntries: 1 << 30})
	key := engine.Key{Namespace: "default", Session: "packed-late", Agent: "main"}
	var convs [][]byte
	conv := []byte(`[`)
	for i := 0; i < 10; i++ {
		if i > 0 {
			conv = conv[:len(conv)-1]
			conv = append(conv, ',')
		}
		conv = append(conv, fmt.Sprintf(`{"role":"user","content":"turn %d"}]`, i)...)
		_, err := eng.Save(ctx, engine.SaveRequest{Key: key, SaveID: fmt.Sprint("s", i), Writer: "t", Now: time.Now(),
			Payload: conv, Limits: codec.Limits{MaxBytes: 1 << 20}})
		require.NoError(t, err)
		convs = append(convs, append([]byte(nil), conv...))
	}
	lossy.lose.Store(true)
	_, err := eng.Pack(ctx, key, true)
	require.Error(t, err, "the pack's answer was lost")
	for i, want := range convs {
		got, _, err := env.Client.Restore(ctx, keyOfEngine(key), uint64(i+1))
		require.NoError(t, err, "version %d", i+1)
		require.Equal(t, string(want), string(got))
	}
	_, err = eng.Pack(ctx, key, true)
	require.NoError(t, err)
	for i, want := range convs {
		got, _, err := env.Client.Restore(ctx, keyOfEngine(key), uint64(i+1))
		require.NoError(t, err, "version %d", i+1)
		require.Equal(t, string(want), string(got))
	}
}
