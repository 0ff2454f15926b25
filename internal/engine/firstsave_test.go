package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// A save that creates its session (Expected 0) on an engine that has not cached the session
// appends with the compare-and-swap on an empty log and does not read the head first: one read
// less on the first save of every session.
func TestFirstSaveReadsNoHead(t *testing.T) {
	counting := &countingLog{Log: memlog.New(1 << 20)}
	e := engine.New(counting, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "new", Agent: "a"}
	saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "first", Expected: u64(0), Payload: conversation(4), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), saved.Record.Version)
	require.Zero(t, counting.reads, "the first save of a new session read the log")

	// The cache it left is the log's: the next save needs no read either, and both read back.
	saved, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "second", Base: u64(1), Payload: array(4, 6), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(2), saved.Record.Version)
	require.Zero(t, counting.reads)
	got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(6)), string(got))
}

// A save that expects to create its session, sent to an engine that has not cached it, answers
// as it would with the head read first (the compare-and-swap on an empty log fails when the log is
// not empty, and the save is decided again from the head): for a session that exists, one that
// was deleted (its log ends with the deletion), one leased by another owner, one a fork made, and
// a save delivered again. The answer, the log's entries and the next save are the same both ways.
func TestFirstSaveOnSessionsThatExist(t *testing.T) {
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	src := engine.Key{Namespace: "n", Session: "src", Agent: "a"}
	first := engine.SaveRequest{Key: k, SaveID: "one", Expected: u64(0), Payload: conversation(2), Now: now}
	cases := map[string]func(t *testing.T, e *engine.Engine){
		"new": func(t *testing.T, e *engine.Engine) {},
		"exists": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
		},
		"deleted": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
			_, err := e.Delete(ctx, k, nil)
			require.NoError(t, err)
		},
		"deleted and saved again": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
			_, err := e.Delete(ctx, k, nil)
			require.NoError(t, err)
			_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "again", Expected: u64(0), Payload: conversation(2), Now: now})
			require.NoError(t, err)
		},
		"leased": func(t *testing.T, e *engine.Engine) {
			_, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "other", TTL: time.Hour, Now: now})
			require.NoError(t, err)
		},
		"forked": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, src, 0, 4)
			_, err := e.Fork(ctx, engine.ForkRequest{From: src, To: k, SaveID: "fork", Now: now})
			require.NoError(t, err)
		},
		"delivered again": func(t *testing.T, e *engine.Engine) {
			_, err := e.Save(ctx, first)
			require.NoError(t, err)
		},
	}
	// outcome is what a cold engine answers to first, then to a save after whatever head it found,
	// and the log's entries then. warm: the engine loads the session (the head read first) before.
	outcome := func(t *testing.T, prepare func(*testing.T, *engine.Engine), warm bool) []string {
		log := memlog.New(1 << 20)
		prepare(t, engine.New(log, engine.Config{}))
		e := engine.New(log, engine.Config{})
		if warm {
			// A save the head refuses loads the session and writes nothing.
			_, err := e.Save(ctx, engine.SaveRequest{Key: k, Expected: u64(99), Payload: conversation(2), Now: now})
			require.Error(t, err)
		}
		var out []string
		saved, err := e.Save(ctx, first)
		out = append(out, fmt.Sprintf("first: %+v, %v", saved, err))
		head, herr := e.Head(ctx, k)
		var next uint64
		if herr == nil {
			next = head.Version
		}
		saved, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "next", Expected: u64(next), Payload: conversation(int(2*next) + 2), Now: now})
		out = append(out, fmt.Sprintf("next: %+v, %v", saved, err))
		require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
			out = append(out, fmt.Sprintf("entry %d: %x", en.Seq, en.Data))
			return true
		}))
		keys, _, err := log.Sessions(ctx, k.Namespace, 0, 100)
		require.NoError(t, err)
		return append(out, fmt.Sprintf("sessions: %v", keys))
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, outcome(t, prepare, true), outcome(t, prepare, false))
		})
	}
}
