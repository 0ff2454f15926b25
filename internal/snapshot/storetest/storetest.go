// Package storetest is the conformance suite of snapshot.Store: the contract every storage backend
// must keep, run against a real one (the JetStream store runs it on an embedded nats-server).
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/snapshot"
)

// Run runs the suite. newStore returns an empty store whose segment pieces are at most chunkSize
// bytes and whose deletions take effect at once (no grace period).
func Run(t *testing.T, newStore func(t *testing.T) (st snapshot.Store, chunkSize int)) {
	ctx := context.Background()
	k1 := snapshot.Key{Namespace: "ns a", Session: "s.1", Agent: "main"}
	k2 := snapshot.Key{Namespace: "ns b", Session: "s.1", Agent: "main"}
	head := func(k snapshot.Key, v uint64) snapshot.Head {
		return snapshot.Head{Version: snapshot.Version{Format: snapshot.VersionFormat, Key: k, Version: v, Created: time.Unix(int64(v), 0).UTC()},
			Layout: snapshot.Layout{Key: k, Gen: 1}}
	}

	t.Run("Head_CompareAndSwap", func(t *testing.T) {
		st, _ := newStore(t)
		_, _, err := st.Head(ctx, k1)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		require.NoError(t, st.SwapHead(ctx, head(k1, 1), 0), "revision 0 creates")
		require.ErrorIs(t, st.SwapHead(ctx, head(k1, 1), 0), snapshot.ErrRevisionMismatch, "a second create loses")
		h, rev, err := st.Head(ctx, k1)
		require.NoError(t, err)
		require.Equal(t, uint64(1), h.Version.Version)
		require.NoError(t, st.SwapHead(ctx, head(k1, 2), rev))
		require.ErrorIs(t, st.SwapHead(ctx, head(k1, 3), rev), snapshot.ErrRevisionMismatch, "a stale revision loses")
		h, rev2, err := st.Head(ctx, k1)
		require.NoError(t, err)
		require.Equal(t, uint64(2), h.Version.Version)
		require.NotEqual(t, rev, rev2)
	})

	t.Run("Versions_CreateOnly", func(t *testing.T) {
		st, _ := newStore(t)
		for _, n := range []uint64{3, 1, 2} {
			require.NoError(t, st.PutVersion(ctx, head(k1, n).Version))
		}
		other := head(k1, 2).Version
		other.Reason = "changed"
		require.NoError(t, st.PutVersion(ctx, other), "idempotent")
		v, err := st.Version(ctx, k1, 2)
		require.NoError(t, err)
		require.Empty(t, v.Reason, "a written version is never overwritten")
		vs, err := st.Versions(ctx, k1)
		require.NoError(t, err)
		require.Equal(t, []uint64{1, 2, 3}, []uint64{vs[0].Version, vs[1].Version, vs[2].Version})
		_, err = st.Version(ctx, k1, 9)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		vs, err = st.Versions(ctx, k2)
		require.NoError(t, err)
		require.Empty(t, vs)
	})

	t.Run("Layouts", func(t *testing.T) {
		st, _ := newStore(t)
		_, err := st.Layout(ctx, k1, 1)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		l := snapshot.Layout{Key: k1, Gen: 1, Extents: []snapshot.Extent{{Segment: snapshot.SegmentRef{ID: "x", Messages: 2}, Count: 1}}}
		require.NoError(t, st.PutLayout(ctx, l))
		got, err := st.Layout(ctx, k1, 1)
		require.NoError(t, err)
		require.Equal(t, l, got)
	})

	t.Run("Segments_PiecesAndDelete", func(t *testing.T) {
		st, chunk := newStore(t)
		for _, size := range []int{1, chunk - 1, chunk, 3*chunk + 17} {
			blob := make([]byte, size)
			_, _ = rand.Read(blob)
			ref := snapshot.SegmentRef{ID: "seg" + string(rune('a'+size%26)), Messages: 1, RawBytes: int64(size), StoredBytes: int64(size)}
			ref, err := st.PutSegment(ctx, k1, ref, blob)
			require.NoError(t, err)
			require.Equal(t, (size+chunk-1)/chunk, ref.Chunks, "size %d", size)
			got, err := st.GetSegment(ctx, k1, ref)
			require.NoError(t, err)
			require.True(t, bytes.Equal(blob, got), "size %d", size)
			_, err = st.GetSegment(ctx, k2, ref)
			require.ErrorIs(t, err, snapshot.ErrNotFound, "segments belong to their session")
			require.NoError(t, st.DeleteSegment(ctx, k1, ref))
			_, err = st.GetSegment(ctx, k1, ref)
			require.ErrorIs(t, err, snapshot.ErrNotFound)
		}
	})

	t.Run("DeleteSession_OnlyThatSessionAndOnlyOnItsRevision", func(t *testing.T) {
		st, _ := newStore(t)
		for _, k := range []snapshot.Key{k1, k2} {
			require.NoError(t, st.SwapHead(ctx, head(k, 1), 0))
			require.NoError(t, st.PutVersion(ctx, snapshot.Version{Format: snapshot.VersionFormat, Key: k, Version: 1}))
			require.NoError(t, st.PutLayout(ctx, snapshot.Layout{Key: k, Gen: 1}))
			_, err := st.PutSegment(ctx, k, snapshot.SegmentRef{ID: "seg", StoredBytes: 3}, []byte("abc"))
			require.NoError(t, err)
		}
		_, rev, err := st.Head(ctx, k1)
		require.NoError(t, err)
		require.ErrorIs(t, st.DeleteSession(ctx, k1, rev+1, nil), snapshot.ErrRevisionMismatch, "a stale revision deletes nothing")
		_, _, err = st.Head(ctx, k1)
		require.NoError(t, err)
		require.NoError(t, st.DeleteSession(ctx, k1, rev, nil))
		_, _, err = st.Head(ctx, k1)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		_, err = st.Version(ctx, k1, 1)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		_, err = st.Layout(ctx, k1, 1)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		_, err = st.GetSegment(ctx, k1, snapshot.SegmentRef{ID: "seg", Chunks: 1, StoredBytes: 3})
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		// The other session is untouched, and the key can start again.
		_, _, err = st.Head(ctx, k2)
		require.NoError(t, err)
		got, err := st.GetSegment(ctx, k2, snapshot.SegmentRef{ID: "seg", Chunks: 1, StoredBytes: 3})
		require.NoError(t, err)
		require.Equal(t, "abc", string(got))
		require.NoError(t, st.SwapHead(ctx, head(k1, 1), 0), "a deleted session can be created again")
	})

	t.Run("Segments_StreamedPieces", func(t *testing.T) {
		st, chunk := newStore(t)
		for _, size := range []int{0, 1, chunk, 2*chunk + 5} {
			blob := make([]byte, size)
			_, _ = rand.Read(blob)
			ref := snapshot.SegmentRef{ID: "stream" + string(rune('a'+size%26)), Messages: 1}
			ref, err := st.PutSegmentFrom(ctx, k1, ref, bytes.NewReader(blob))
			require.NoError(t, err)
			require.Equal(t, int64(size), ref.StoredBytes)
			require.Equal(t, max((size+chunk-1)/chunk, 1), ref.Chunks, "size %d", size)
			got, err := io.ReadAll(st.OpenSegment(ctx, k1, ref))
			require.NoError(t, err)
			require.True(t, bytes.Equal(blob, got), "size %d", size)
			whole, err := st.GetSegment(ctx, k1, ref)
			require.NoError(t, err)
			require.True(t, bytes.Equal(blob, whole), "streamed and whole reads agree")
		}
		_, err := io.ReadAll(st.OpenSegment(ctx, k1, snapshot.SegmentRef{ID: "missing", Chunks: 2}))
		require.ErrorIs(t, err, snapshot.ErrNotFound)
	})

	t.Run("Segments_ShortReadIsCorrupt", func(t *testing.T) {
		st, _ := newStore(t)
		ref, err := st.PutSegment(ctx, k1, snapshot.SegmentRef{ID: "short", StoredBytes: 10}, make([]byte, 10))
		require.NoError(t, err)
		ref.StoredBytes = 11
		_, err = st.GetSegment(ctx, k1, ref)
		require.ErrorIs(t, err, snapshot.ErrCorrupt)
	})

	t.Run("ValueEntries_CompareAndSwap", func(t *testing.T) {
		st, _ := newStore(t)
		_, _, err := st.ValueEntry(ctx, "ns a", "v1")
		require.ErrorIs(t, err, snapshot.ErrNotFound)
		e := snapshot.ValueEntry{Namespace: "ns a", ID: "v1", Name: "n1", RawBytes: 5, Chunks: 1, StoredBytes: 3, Used: time.Unix(10, 0).UTC()}
		rev, err := st.SwapValueEntry(ctx, e, 0)
		require.NoError(t, err, "revision 0 creates")
		_, err = st.SwapValueEntry(ctx, e, 0)
		require.ErrorIs(t, err, snapshot.ErrRevisionMismatch, "a second create loses")
		got, rev2, err := st.ValueEntry(ctx, "ns a", "v1")
		require.NoError(t, err)
		require.Equal(t, e, got)
		require.Equal(t, rev, rev2)
		e.Used = time.Unix(20, 0).UTC()
		rev3, err := st.SwapValueEntry(ctx, e, rev)
		require.NoError(t, err)
		_, err = st.SwapValueEntry(ctx, e, rev)
		require.ErrorIs(t, err, snapshot.ErrRevisionMismatch, "a stale revision loses")

		other := snapshot.ValueEntry{Namespace: "ns b", ID: "v1", Name: "n2", Used: time.Unix(10, 0).UTC()}
		_, err = st.SwapValueEntry(ctx, other, 0)
		require.NoError(t, err, "namespaces do not share entries")
		got, rev4, err := st.ValueEntry(ctx, "ns a", "v1")
		require.NoError(t, err)
		require.Equal(t, e, got, "the other namespace's entry left it as it was")
		require.Equal(t, rev3, rev4)
	})
}
