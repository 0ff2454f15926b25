package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func TestLease_Fencing(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	st, err := e.LeaseStatus(ctx, k)
	require.NoError(t, err)
	require.Zero(t, st.Lease.Epoch, "never leased")

	// Leased before the first save: a head of version 0.
	l, took, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-a", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Lease.Epoch)
	require.Equal(t, uint64(0), l.Head)
	require.Empty(t, took.From)
	_, err = e.Head(ctx, k)
	require.ErrorIs(t, err, engine.ErrNotFound, "a lease is not a version")

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2)})
	require.ErrorIs(t, err, engine.ErrLeased, "no epoch while the lease is held")
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(2), Epoch: 2})
	require.ErrorIs(t, err, engine.ErrFenced)
	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-b", TTL: time.Minute, Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	var le *engine.LeaseError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "host-a", le.Lease.Owner)

	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "a1", Payload: conversation(2), Epoch: 1})
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.Record.Version)

	// Another daemon (cold cache) sees the lease in the head.
	other := engine.New(log, engine.Config{})
	_, err = other.Save(ctx, engine.SaveRequest{Key: k, SaveID: "b1", Payload: conversation(4), Now: now})
	require.ErrorIs(t, err, engine.ErrLeased)
	_, err = other.Save(ctx, engine.SaveRequest{Key: k, SaveID: "a2", Payload: conversation(4), Epoch: 1, Now: now})
	require.NoError(t, err)

	// Renew; after expiry another owner takes over under epoch 2: the old epoch is fenced, in the
	// engine whose cache still holds the old head too.
	_, err = e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: 1, TTL: time.Minute, Now: now.Add(30 * time.Second)})
	require.NoError(t, err)
	later := now.Add(2 * time.Minute)
	l, took, err = other.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-b", TTL: time.Minute, Now: later})
	require.NoError(t, err)
	require.Equal(t, uint64(2), l.Lease.Epoch)
	require.Equal(t, uint64(2), l.Head)
	require.Equal(t, engine.Takeover{From: "host-a"}, took)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "a3", Payload: conversation(6), Epoch: 1, Now: later})
	require.ErrorIs(t, err, engine.ErrFenced)
	_, err = e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: 1, TTL: time.Minute, Now: later})
	require.ErrorIs(t, err, engine.ErrFenced)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "b3", Payload: conversation(6), Epoch: 2, Now: later})
	require.NoError(t, err)

	// A forced takeover of a live lease, then a release: that epoch writes no more.
	_, took, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "host-c", TTL: time.Minute, Now: later, Force: true})
	require.NoError(t, err)
	require.Equal(t, engine.Takeover{From: "host-b", Forced: true}, took)
	l, err = e.Release(ctx, engine.LeaseRequest{Key: k, Epoch: 3, Now: later})
	require.NoError(t, err)
	require.Empty(t, l.Lease.Owner)
	_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "c1", Payload: conversation(8), Epoch: 3, Now: later})
	require.ErrorIs(t, err, engine.ErrFenced)
	s, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "free", Payload: conversation(8), Now: later})
	require.NoError(t, err, "released: anyone may save without an epoch")
	require.Equal(t, uint64(4), s.Record.Version)
	st, err = other.LeaseStatus(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Lease.Epoch)
	require.Equal(t, uint64(4), st.Head)

	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, TTL: time.Minute, Now: later})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	_, err = e.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: 0, TTL: time.Minute, Now: later})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	checkHistory(t, e, k, 4)
}

// A sealed (moved) session refuses writes and lease acquisitions, stays readable, and comes back
// when its next version is migrated in.
func TestSeal_Moved(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := e.Seal(ctx, k, 0, "west", now)
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)
	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = e.Seal(ctx, k, 2, "west", now)
	require.ErrorIs(t, err, engine.ErrVersionConflict)
	rec, err := e.Seal(ctx, k, 1, "west", now)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rec.Version)
	_, err = e.Seal(ctx, k, 1, "west", now)
	require.NoError(t, err, "sealing again is a no-op")

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(4), Epoch: 1})
	var me *engine.MovedError
	require.ErrorAs(t, err, &me)
	require.Equal(t, "west", me.Moved.To)
	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.ErrorIs(t, err, engine.ErrMoved)
	st, err := e.LeaseStatus(ctx, k)
	require.NoError(t, err)
	require.Empty(t, st.Lease.Owner, "the seal ended the lease")
	_, _, err = e.Read(ctx, k, 1, engine.ReadOptions{Verify: true})
	require.NoError(t, err)

	imp := &engine.Import{Version: 2, Created: now, Hash: hashOf(conversation(4)), Origin: engine.Origin{Via: engine.ReasonImport}}
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(4), Import: imp})
	require.ErrorIs(t, err, engine.ErrMoved, "an import of a bundle does not bring it back")
	imp.Origin.Via = engine.ReasonMigrate
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(4), Import: imp})
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.Record.Version)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "3", Payload: conversation(6)})
	require.NoError(t, err, "migrated back: writable again")
}

// checkHistory checks that key has versions 1..n, in order, each readable.
func checkHistory(t *testing.T, e *engine.Engine, k engine.Key, n int) {
	t.Helper()
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, n)
	for i, r := range h {
		require.Equal(t, uint64(i+1), r.Version)
		got, rec, err := e.Read(ctx, k, r.Version, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, r, rec)
		require.Equal(t, r.RawBytes, int64(len(got)))
	}
}

// What an entry cannot hold is refused before anything is written: the session stays readable.
func TestLease_LongStrings(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)
	long := string(make([]byte, 5000))
	_, _, err = e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: long, TTL: time.Minute, Now: now})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	_, err = e.Seal(ctx, k, 1, long, now)
	require.ErrorIs(t, err, engine.ErrBadRequest)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: long, Payload: conversation(4)})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "2", Writer: long, Payload: conversation(4)})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	e.Forget()
	checkHistory(t, e, k, 1)
}

// A refusal is never decided on a cached head another daemon has moved past: its lease, its
// version are seen.
func TestSave_StaleCacheRefusals(t *testing.T) {
	a, log := newEngine(t, 1<<20, engine.Config{})
	b := engine.New(log, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(a, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)
	l, _, err := b.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "o", TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = save(b, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(4), Epoch: l.Lease.Epoch})
	require.NoError(t, err)
	// a's cache holds version 1 and no lease.
	s, err := save(a, engine.SaveRequest{Key: k, SaveID: "3", Expected: u64(2), Payload: conversation(6), Epoch: l.Lease.Epoch})
	require.NoError(t, err)
	require.Equal(t, uint64(3), s.Record.Version)
	_, err = b.Renew(ctx, engine.LeaseRequest{Key: k, Epoch: l.Lease.Epoch, TTL: time.Minute, Now: now})
	require.NoError(t, err)
	_, err = a.Seal(ctx, k, 3, "west", now)
	require.NoError(t, err)
	_, err = save(b, engine.SaveRequest{Key: k, SaveID: "4", Payload: conversation(8)})
	require.ErrorIs(t, err, engine.ErrMoved, "b sees the seal")
}
