package transfer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// growing saves the first n prefixes of a real transcript (cut every step messages) as versions.
func growing(t *testing.T, c *checkpoint.Client, key checkpoint.Key, name string, step int, opts ...checkpoint.SaveOption) [][]byte {
	t.Helper()
	msgs := corpusMessages(t, name)
	var versions [][]byte
	for n := step; n <= len(msgs); n += step {
		body := arrayOf(msgs[:n])
		_, err := c.Save(context.Background(), key, body, opts...)
		require.NoError(t, err)
		versions = append(versions, body)
	}
	return versions
}

func requireSameHistory(t *testing.T, src, dst *checkpoint.Client, key checkpoint.Key) []checkpoint.Version {
	t.Helper()
	ctx := ctxT(t)
	hs, err := src.History(ctx, key)
	require.NoError(t, err)
	hd, err := dst.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hd, len(hs))
	for i := range hs {
		require.Equal(t, hs[i].Version, hd[i].Version)
		require.Equal(t, hs[i].Hash, hd[i].Hash, "version %d", hs[i].Version)
		require.Equal(t, hs[i].Writer, hd[i].Writer)
		require.Equal(t, hs[i].Reason, hd[i].Reason)
		require.True(t, hs[i].Created.Equal(hd[i].Created))
		require.NotNil(t, hd[i].Origin)
		require.Equal(t, wire.ReasonMigrate, hd[i].Origin.Via)
		a, _, err := src.Restore(ctx, key, hs[i].Version)
		require.NoError(t, err)
		b, _, err := dst.Restore(ctx, key, hd[i].Version)
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
	return hd
}

func TestMigrate_BetweenDeployments(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Namespace: "team a", Session: "user@example.com/a.b*c >d"}
	owner := client(t, src, "owner")
	lease, err := owner.Acquire(ctx, key, checkpoint.WithOwner("owner"))
	require.NoError(t, err)
	versions := growing(t, owner, key, "pi_before_compaction.json", 100, checkpoint.WithEpoch(lease.Epoch()))
	require.Len(t, versions, 10)

	// A migration of a leased session needs force: somebody is writing it.
	_, err = src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{MovedTo: dst.URL()})
	require.ErrorIs(t, err, checkpoint.ErrLeased)

	// Interrupted after three versions, then run again: it resumes.
	ictx, cancel := context.WithCancel(ctx)
	_, err = src.Client.Migrate(ictx, dst.Client, key, checkpoint.MigrateOptions{MovedTo: dst.URL(), Force: true,
		Progress: func(p checkpoint.MigrateProgress) {
			if p.Versions == 3 {
				cancel()
			}
		}})
	require.Error(t, err)
	_, err = owner.Save(ctx, key, turn(versions[len(versions)-1], "owner", 1), checkpoint.WithEpoch(lease.Epoch()))
	require.NoError(t, err, "the interrupted migration sealed nothing: the owner still writes at the source")
	p, err := src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{MovedTo: dst.URL(), Force: true})
	require.NoError(t, err)
	require.Equal(t, 8, p.Versions, "only what the first run did not copy")
	require.Equal(t, 3, p.Skipped)
	hist := requireSameHistory(t, src.Client, dst.Client, key)

	// The old owner's late write is refused at the source, and says where the session went.
	_, err = lease.Save(ctx, turn(versions[len(versions)-1], "owner", 2))
	require.ErrorIs(t, err, checkpoint.ErrMoved)
	var ce *checkpoint.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, dst.URL(), ce.MovedTo)
	_, err = src.Client.Save(ctx, key, []byte(`[]`))
	require.ErrorIs(t, err, checkpoint.ErrMoved)
	list, err := src.Client.List(ctx, key.Namespace)
	require.NoError(t, err)
	require.NotNil(t, list[0].Moved)

	// Restored at the destination, the conversation continues there.
	conv, head, err := dst.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, hist[len(hist)-1].Version, head.Version)
	next, err := dst.Client.Save(ctx, key, turn(conv, "dst", 1))
	require.NoError(t, err)
	require.Equal(t, head.Version+1, next.Version)

	// Again: nothing to copy, nothing changes.
	p, err = src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{MovedTo: dst.URL(), Force: true})
	require.NoError(t, err)
	require.Zero(t, p.Versions)

	// And back: the original deployment takes the session again and the other one is sealed.
	p, err = dst.Client.Migrate(ctx, src.Client, key, checkpoint.MigrateOptions{MovedTo: src.URL()})
	require.NoError(t, err)
	require.Equal(t, 1, p.Versions)
	_, err = src.Client.Save(ctx, key, turn(turn(conv, "dst", 1), "src", 1))
	require.NoError(t, err, "the session is writable where it went back to")
	_, err = dst.Client.Save(ctx, key, []byte(`[]`))
	require.ErrorIs(t, err, checkpoint.ErrMoved)
}

func TestMigrate_HeadOnlyForgetAndConflicts(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "s"}
	versions := growing(t, src.Client, key, "pi_before_compaction.json", 250)

	p, err := src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{HeadOnly: true, Forget: true, MovedTo: dst.URL()})
	require.NoError(t, err)
	require.Equal(t, 1, p.Versions)
	h, err := dst.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, h, 1, "head only")
	require.Equal(t, uint64(len(versions)), h[0].Version, "the head keeps its number")
	_, err = dst.Client.Get(ctx, key, 1)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
	got, _, err := dst.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(versions[len(versions)-1]), string(got))
	_, err = src.Client.Get(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "forgotten at the source")

	// A different session under the same key at the destination is never overwritten.
	other := checkpoint.Key{Session: "other"}
	_, err = src.Client.Save(ctx, other, turn(nil, "src", 1))
	require.NoError(t, err)
	_, err = dst.Client.Save(ctx, other, turn(nil, "dst", 1))
	require.NoError(t, err)
	_, err = src.Client.Migrate(ctx, dst.Client, other, checkpoint.MigrateOptions{MovedTo: dst.URL()})
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	got, _, err = dst.Client.Restore(ctx, other, 0)
	require.NoError(t, err)
	require.Equal(t, string(turn(nil, "dst", 1)), string(got))
	_, err = src.Client.Save(ctx, other, turn(turn(nil, "src", 1), "src", 2))
	require.NoError(t, err, "a refused migration leaves the source writable")

	// An import whose conversation does not match its declared hash is refused.
	rec := checkpoint.Version{Version: 7, Hash: wire.Hash([]byte("something else")), Reason: wire.ReasonTurn}
	_, err = dst.Client.Import(ctx, checkpoint.Key{Session: "forged"}, rec, turn(nil, "x", 1), wire.ReasonImport, "test")
	require.ErrorIs(t, err, checkpoint.ErrInvalid)
	_, err = dst.Client.Get(ctx, checkpoint.Key{Session: "forged"}, 0)
	require.True(t, errors.Is(err, checkpoint.ErrNotFound))
}
