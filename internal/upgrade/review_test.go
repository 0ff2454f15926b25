package upgrade

// Tests written by the session-17 review (s17-review1). Each one FAILS on the code it was written
// against and states the finding it proves; the lead merges it with the fix.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
)

var (
	reviewA = snapshot.Key{Namespace: "n", Session: "a", Agent: "main"}
	reviewB = snapshot.Key{Namespace: "n", Session: "b", Agent: "main"}
)

const (
	reviewV1 = `[{"role":"user","content":[{"type":"text","text":"hello"}]}]`
	reviewV2 = `[{"role":"user","content":[{"type":"text","text":"hello"}]},{"role":"user","content":[{"type":"text","text":"saved by the older daemon"}]}]`
)

// reviewStore is a format-2 store of two sessions (n/a and n/b, one version each), and a format-2
// Store on it that plays an older checkpointd still running on the same cluster.
func reviewStore(t *testing.T) (*store, *kvstore.Store) {
	t.Helper()
	ctx := context.Background()
	s := open(t, t.TempDir())
	old, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(t, err)
	for _, k := range []snapshot.Key{reviewA, reviewB} {
		_, err := snapshot.Save(ctx, old, snapshot.SaveRequest{Key: k, SaveID: "1", Payload: []byte(reviewV1), Now: time.Now()})
		require.NoError(t, err)
	}
	return s, old
}

// An older checkpointd still running on the cluster (a rolling upgrade: docs/format.md §8.17 and
// README.md say nothing about stopping the others first) acknowledges a save into format 2 after
// the upgrade copied that session. Run writes "done" and deletes the buckets without looking at
// format 2 again (checkUnchanged runs only when a later start finds "done" and all five buckets):
// the acknowledged version is lost, and nothing says so. Likewise a session the older daemon
// deletes meanwhile comes back (purgeOthers works from the heads listed at the start).
//
// Run must notice (ErrChangedAfter, nothing deleted) or carry the change over.
func TestRun_Format2WrittenDuringTheUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   string // the write after which the older daemon acts
		act  func(ctx context.Context, old *kvstore.Store) error
		ok   func(ctx context.Context, t *testing.T, s *store) bool // the engine carried the change over
	}{
		{
			name: "a save after its session was copied",
			at:   "version 1 of n/b/main",
			act:  saveV2,
			ok:   headIsV2,
		},
		{
			name: "a save after done, before the buckets go",
			at:   "marker done",
			act:  saveV2,
			ok:   headIsV2,
		},
		{
			name: "a deletion after its session was copied",
			at:   "version 1 of n/b/main",
			act:  deleteA,
			ok:   aIsGone,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, old := reviewStore(t)
			opts := testOptions()
			acted := false
			opts.step = func(_ int, what string) error {
				if what == tc.at && !acted {
					acted = true
					return tc.act(ctx, old)
				}
				return nil
			}
			_, err := Run(ctx, s.js, s.eng, s.log, opts)
			require.True(t, acted, "the older daemon acted")
			if errors.Is(err, ErrChangedAfter) {
				present, perr := presentBuckets(ctx, s.js)
				require.NoError(t, perr)
				require.Equal(t, Buckets, present, "refused: nothing deleted")
				if tc.at == "marker done" {
					return // after "done" the operator moves the session by hand (the error says how)
				}
				// before "done": once the older daemon is stopped, the next start copies what changed
				_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
				require.NoError(t, err)
				require.True(t, tc.ok(ctx, t, s), "the next start carried the change over")
				return
			}
			require.NoError(t, err)
			require.True(t, tc.ok(ctx, t, s), "Run returned nil and deleted format 2, but the engine does not hold what the older daemon acknowledged")
		})
	}
}

func saveV2(ctx context.Context, old *kvstore.Store) error {
	_, err := snapshot.Save(ctx, old, snapshot.SaveRequest{Key: reviewA, SaveID: "2", Payload: []byte(reviewV2), Now: time.Now()})
	return err
}

func deleteA(ctx context.Context, old *kvstore.Store) error {
	_, err := snapshotDelete(ctx, old, reviewA)
	return err
}

func headIsV2(ctx context.Context, t *testing.T, s *store) bool {
	h, err := s.eng.HeadState(ctx, keyOf(reviewA))
	require.NoError(t, err)
	return h.Record.Version == 2
}

func aIsGone(ctx context.Context, t *testing.T, s *store) bool {
	_, err := s.eng.HeadState(ctx, keyOf(reviewA))
	return errors.Is(err, engine.ErrNotFound)
}

// A session deleted in format 2 after "done" (by an older checkpointd started on the store before
// the buckets were deleted) is not seen by checkUnchanged, which walks format 2's heads only: the
// deleted session has none, so the buckets are deleted and the session the user deleted is served
// again by the log engine.
func TestRun_DeletedAfterDoneIsNotResurrected(t *testing.T) {
	ctx := context.Background()
	s, old := reviewStore(t)
	opts := testOptions()
	opts.step = func(_ int, what string) error {
		if what == "marker done" {
			return errKilled
		}
		return nil
	}
	_, err := Run(ctx, s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, errKilled)

	_, err = snapshotDelete(ctx, old, reviewA) // the older daemon, started on the store meanwhile
	require.NoError(t, err)

	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	if errors.Is(err, ErrChangedAfter) {
		require.ErrorContains(t, err, "n/a/main")
		return
	}
	require.NoError(t, err)
	require.True(t, aIsGone(ctx, t, s), "n/a/main was deleted in format 2 after the upgrade; the log engine serves it again")
}

// A run killed half-way ("started"), then format 2's buckets deleted by hand (the operator thought
// the upgrade had finished, or followed advice meant for after "done"): Run finds no bucket and
// returns nil without reading the marker, and the daemon serves a CP_LOG that holds part of the
// sessions. The marker says the new format is incomplete; Run (and Needed) must say so.
func TestRun_StartedMarkerWithoutFormat2(t *testing.T) {
	ctx := context.Background()
	s, _ := reviewStore(t)
	opts := testOptions()
	opts.step = func(_ int, what string) error {
		if strings.HasPrefix(what, "version 1 of n/a/main") {
			return errKilled // n/a copied, n/b not
		}
		return nil
	}
	_, err := Run(ctx, s.js, s.eng, s.log, opts)
	require.ErrorIs(t, err, errKilled)
	for _, b := range Buckets {
		require.NoError(t, s.js.DeleteKeyValue(ctx, b))
	}

	_, err = Run(ctx, s.js, s.eng, s.log, testOptions())
	require.Error(t, err, "an upgrade that never finished, with format 2 gone: the log engine holds n/a only")
	require.ErrorIs(t, err, ErrIncomplete)
	need, err := Needed(ctx, s.js)
	require.True(t, need || err != nil, "Needed says nothing is to be done: the daemon would serve the half-copied store")
	require.ErrorIs(t, err, ErrIncomplete)
}
