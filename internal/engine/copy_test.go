package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// recordFor is the record of conv as a save makes it (hash, size, counts), from a scratch engine.
func recordFor(t *testing.T, conv []byte) engine.Record {
	t.Helper()
	e, _ := newEngine(t, 1<<20, engine.Config{})
	s, err := e.Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: "n", Session: "scratch", Agent: "a"}, Payload: conv, Now: now})
	require.NoError(t, err)
	return s.Record
}

// Every record field but StoredBytes is the copied one, whatever a save would have made of it:
// a first version above 1 whose parent is not here (pruned), an origin with nanoseconds, a writer
// and reason, a fork, a rewrite, a large value; reads return the conversations, the versions below
// the first are not found, and the session goes on with ordinary saves afterwards.
func TestCopyVersion_KeepsEveryField(t *testing.T) {
	e, _ := newEngine(t, 64<<10, engine.Config{PackEntries: 3})
	k := engine.Key{Namespace: "team", Session: "copied", Agent: "main"}
	img := image(40 << 10)
	convs := [][]byte{
		conversation(4),
		append(append(append([]byte{}, conversation(5)[:len(conversation(5))-1]...), ','), append(imageMessage(5, img), ']')...),
		array(0, 2), // a rewrite: drops messages 2..5
		array(0, 3),
		array(0, 5),
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.FixedZone("x", 3600))
	var want []engine.Record
	for i, conv := range convs {
		r := recordFor(t, conv)
		r.Key, r.Version, r.Parent = k, uint64(3+i), uint64(2+i)
		r.SaveID, r.Writer, r.Reason = fmt.Sprintf("save-%d", i), fmt.Sprintf("host/%d", i), engine.ReasonTurn
		r.Created = at.Add(time.Duration(i) * time.Second).UTC()
		switch i {
		case 0:
			r.Reason = engine.ReasonMigrate // parent 2: the versions before were pruned there
			r.Origin = &engine.Origin{Via: "migrate", Source: "nats://old:4222", At: at.UTC()}
		case 1:
			r.Reason, r.Origin = engine.ReasonImport, &engine.Origin{Via: "import", Source: "b.bundle"}
		case 2:
			r.Reason, r.ForkOf = engine.ReasonFork, &engine.ForkRef{Key: engine.Key{Namespace: "team", Session: "src", Agent: "main"}, Version: 9}
		}
		got, err := e.CopyVersion(ctx, r, conv)
		require.NoError(t, err, "version %d", r.Version)
		r.StoredBytes = got.StoredBytes
		require.Equal(t, r, got)
		want = append(want, r)
	}
	check := func() {
		hist, err := e.History(ctx, k)
		require.NoError(t, err)
		require.Equal(t, want, hist)
		for i, conv := range convs {
			got, rec, err := e.Read(ctx, k, uint64(3+i), engine.ReadOptions{Verify: true})
			require.NoError(t, err)
			require.Equal(t, string(conv), string(got))
			require.Equal(t, want[i], rec)
		}
		_, _, err = e.Read(ctx, k, 2, engine.ReadOptions{})
		require.ErrorIs(t, err, engine.ErrNotFound)
		hs, err := e.HeadState(ctx, k)
		require.NoError(t, err)
		require.Equal(t, uint64(3), hs.FirstVersion)
		require.Equal(t, want[len(want)-1], hs.Record)
	}
	check()
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	e.Forget()
	check()

	base := uint64(7)
	s, err := e.Save(ctx, engine.SaveRequest{Key: k, Base: &base, Payload: array(5, 6), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(8), s.Record.Version)
	require.Equal(t, uint64(7), s.Record.Parent)
}

// A conversation that is not its record's, a version not above the head, or a gap is refused and
// writes nothing.
func TestCopyVersion_Refusals(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	r := recordFor(t, conversation(2))
	r.Key, r.Version = k, 1

	bad := r
	bad.Hash = hashOf([]byte("[]"))
	_, err := e.CopyVersion(ctx, bad, conversation(2))
	require.ErrorIs(t, err, engine.ErrHashMismatch)
	bad = r
	bad.Counts.User++
	_, err = e.CopyVersion(ctx, bad, conversation(2))
	require.ErrorIs(t, err, engine.ErrHashMismatch)
	_, err = log.Last(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound, "a refused copy writes nothing")

	_, err = e.CopyVersion(ctx, r, conversation(2))
	require.NoError(t, err)
	_, err = e.CopyVersion(ctx, r, conversation(2))
	require.ErrorIs(t, err, engine.ErrVersionConflict, "a version not above the head")
	r3 := recordFor(t, conversation(3))
	r3.Key, r3.Version = k, 3
	_, err = e.CopyVersion(ctx, r3, conversation(3))
	require.ErrorIs(t, err, engine.ErrVersionConflict, "a gap")
	r0 := r
	r0.Version = 0
	_, err = e.CopyVersion(ctx, r0, conversation(2))
	require.ErrorIs(t, err, engine.ErrBadRequest)
	require.Equal(t, 1, entries(t, log, k))
}

// CopyState sets a lease with its own epoch and times, also on a session without a version, and
// a seal: the lease fences and continues as if acquired here, the seal refuses saves, and copying
// the same state again writes nothing.
func TestCopyState(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "leased-first", Agent: "a"}
	lease := engine.Lease{Epoch: 7, Owner: "host/1", Acquired: now.Add(-time.Hour), Expires: now.Add(time.Hour)}
	require.NoError(t, e.CopyState(ctx, k, &lease, nil))
	require.NoError(t, e.CopyState(ctx, k, &lease, nil))
	require.Equal(t, 1, entries(t, log, k), "the same state again writes nothing")
	ls, err := e.LeaseStatus(ctx, k)
	require.NoError(t, err)
	require.Equal(t, engine.LeaseState{Lease: lease, Head: 0}, ls)
	hs, err := e.HeadState(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(0), hs.Record.Version)

	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "other", TTL: time.Minute, Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Payload: conversation(2), Epoch: 6, Now: now})
	require.ErrorIs(t, err, engine.ErrFenced)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Payload: conversation(2), Epoch: 7, Now: now})
	require.NoError(t, err)
	got, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "other", TTL: time.Minute, Force: true, Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(8), got.Lease.Epoch)

	moved := engine.Moved{To: "nats://elsewhere:4222", At: now}
	require.NoError(t, e.CopyState(ctx, k, nil, &moved))
	hs, err = e.HeadState(ctx, k)
	require.NoError(t, err)
	require.Nil(t, hs.Lease)
	require.Equal(t, &moved, hs.Moved)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, Payload: conversation(3), Now: now})
	var me *engine.MovedError
	require.True(t, errors.As(err, &me), "%v", err)

	bad := engine.Lease{Epoch: engine.MaxVersion + 1, Owner: "x"}
	require.ErrorIs(t, e.CopyState(ctx, k, &bad, nil), engine.ErrBadRequest)
}
