package logstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// Creations of one key share one index entry (Nats-Msg-Id cp.idx.<ns>/<token>, within the
// stream's duplicate window): a creation tried again, or racing creators. These tests drive the
// interleavings the conformance suite's racing creators meet by chance, between two logs (two
// daemons): on the embedded server and, unless -short, on an R3 cluster (one log on the stream
// leader's node, the other on a follower's).

// twoLogs runs f with two logs on one fresh store, for each store.
func twoLogs(t *testing.T, f func(t *testing.T, a, b *logstore.Log)) {
	t.Run("embedded", func(t *testing.T) {
		s, err := logstore.StartEmbedded(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		cfg := logstore.LogConfig{}
		a := logstore.OpenFresh(t, logstore.Connect(t, s.ClientURL()), cfg)
		b := logstore.OpenFresh(t, logstore.Connect(t, s.ClientURL()), cfg)
		f(t, a, b)
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		c := testenv.StartCluster(t, 3)
		cfg := logstore.LogConfig{Replicas: 3}
		logstore.OpenFresh(t, logstore.Connect(t, c.URLs()), cfg)
		leader := "nats://" + c.Node(c.StreamLeader(logstore.StreamOf(cfg), 10*time.Second)).Listen
		a := logstore.OpenFresh(t, logstore.Connect(t, leader), cfg)
		b := logstore.OpenFresh(t, logstore.Connect(t, followerURL(c, logstore.StreamOf(cfg))), cfg)
		f(t, a, b)
	})
}

// walk returns the keys of ns's listing, page after page of limit keys.
func walk(t *testing.T, l engine.Log, ns string, limit int) []engine.Key {
	t.Helper()
	var keys []engine.Key
	cursor := uint64(0)
	for range 100 {
		page, next, err := l.Sessions(context.Background(), ns, cursor, limit)
		require.NoError(t, err)
		keys = append(keys, page...)
		if cursor = next; cursor == 0 {
			return keys
		}
	}
	t.Fatalf("the listing of %s never ends", ns)
	return nil
}

// requireListed: every walk of ns's listing, by pages of 1, 2 and 10, names want in that order,
// each once, as both logs see it.
func requireListed(t *testing.T, ns string, want []engine.Key, logs ...engine.Log) {
	t.Helper()
	for _, l := range logs {
		for _, limit := range []int{1, 2, 10} {
			require.Equal(t, want, walk(t, l, ns, limit), "pages of %d", limit)
		}
	}
}

// A session creation whose first entry went unanswered (its index entry written; the entry not
// stored, as far as anyone can tell) keeps its index entry, for an entry still under way; the
// save is tried again (through the other daemon) and creates the session. The walk of the
// listing must name the session once: before, the retry wrote a second index entry and pages of
// one listed the key twice (on two pages; within a page it was dropped).
func TestCreate_RetriedCreationListedOnce(t *testing.T) {
	twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
		ctx := context.Background()
		before := engine.Key{Namespace: "n", Session: "before", Agent: "main"}
		k := engine.Key{Namespace: "n", Session: "retried", Agent: "main"}
		after := engine.Key{Namespace: "n", Session: "after", Agent: "main"}
		_, err := a.Append(ctx, before, []byte("b"), 0)
		require.NoError(t, err)
		logstore.SetBeforeFirstEntry(a, func() error {
			return fmt.Errorf("publishing the first entry: %w", context.DeadlineExceeded)
		})
		_, err = a.Append(ctx, k, []byte("first"), 0)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the creation's outcome is unknown")
		logstore.SetBeforeFirstEntry(a, nil)
		_, err = b.Append(ctx, k, []byte("first"), 0) // tried again through the other daemon
		require.NoError(t, err)
		_, err = a.Append(ctx, after, []byte("a"), 0)
		require.NoError(t, err)
		requireListed(t, "n", []engine.Key{before, k, after}, a, b)

		// Deleted and created again within the duplicate window: listed again, once.
		require.NoError(t, b.Purge(ctx, k))
		requireListed(t, "n", []engine.Key{before, after}, a, b)
		_, err = a.Append(ctx, k, []byte("again"), 0)
		require.NoError(t, err)
		requireListed(t, "n", []engine.Key{before, after, k}, a, b)
	})
}

// Two creations of one key share its index entry, and the one that wrote it loses the
// compare-and-swap to the other: the loser must leave the entry that the winner's first entry
// names (it deleted it in s19's 911a8a9, and the winner's session went unlisted: CI's "Sessions of
// n: got [], want [n/race/main]").
func TestCreate_LoserLeavesTheSharedIndexEntryOfTheWinner(t *testing.T) {
	twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
		ctx := context.Background()
		k := engine.Key{Namespace: "n", Session: "race", Agent: "main"}
		listed, won := make(chan struct{}), make(chan struct{})
		logstore.SetBeforeFirstEntry(a, func() error { close(listed); <-won; return nil })
		lost := make(chan error, 1)
		go func() { _, err := a.Append(ctx, k, []byte("a"), 0); lost <- err }()
		<-listed // a wrote the index entry; b shares it, and its first entry lands first
		seq, err := b.Append(ctx, k, []byte("b"), 0)
		require.NoError(t, err)
		close(won)
		require.ErrorIs(t, <-lost, engine.ErrConflict)
		requireListed(t, "n", []engine.Key{k}, a, b)
		last, err := a.Last(ctx, k)
		require.NoError(t, err)
		require.Equal(t, seq, last.Seq)
	})
}

// The creation that wrote the shared index entry is refused (a full store) while the log is still
// empty, and takes the entry back so that it lists nothing; the creation sharing it lands after,
// naming the deleted entry. The key must be listed (once), and deleting the session must unlist
// it.
func TestCreate_SharerLandingAfterTheRefusedWriterTookTheEntryBackIsListed(t *testing.T) {
	twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
		ctx := context.Background()
		k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
		aListed, bListed, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
		logstore.SetBeforeFirstEntry(a, func() error { close(aListed); <-bListed; return logstore.ErrStoreFull })
		logstore.SetBeforeFirstEntry(b, func() error { close(bListed); <-aDone; return nil })
		refused := make(chan error, 1)
		go func() {
			defer close(aDone)
			_, err := a.Append(ctx, k, []byte("a"), 0)
			refused <- err
		}()
		<-aListed
		_, err := b.Append(ctx, k, []byte("b"), 0)
		require.NoError(t, err)
		require.ErrorIs(t, <-refused, logstore.ErrStoreFull)
		requireListed(t, "n", []engine.Key{k}, a, b)

		logstore.SetIndexGrace(b, 0)
		require.NoError(t, b.Purge(ctx, k))
		requireListed(t, "n", nil, a, b)
	})
}

// As above, but the sharing creation's first entry lands between the refused writer's read of the
// empty log and its delete of the entry: the sharer found its entry still there, and the writer,
// reading the log again after the delete, lists the key again.
func TestCreate_SharerLandingWhileTheRefusedWriterTakesTheEntryBackIsListed(t *testing.T) {
	twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
		ctx := context.Background()
		k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
		aListed, bListed, aRead, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		logstore.SetBeforeFirstEntry(a, func() error { close(aListed); <-bListed; return logstore.ErrStoreFull })
		logstore.SetBeforeUnlistDelete(a, func() { close(aRead); <-bDone })
		logstore.SetBeforeFirstEntry(b, func() error { close(bListed); <-aRead; return nil })
		refused := make(chan error, 1)
		go func() {
			_, err := a.Append(ctx, k, []byte("a"), 0)
			refused <- err
		}()
		<-aListed
		_, err := b.Append(ctx, k, []byte("b"), 0)
		close(bDone)
		require.NoError(t, err)
		require.ErrorIs(t, <-refused, logstore.ErrStoreFull)
		requireListed(t, "n", []engine.Key{k}, a, b)

		logstore.SetIndexGrace(b, 0)
		require.NoError(t, b.Purge(ctx, k))
		requireListed(t, "n", nil, a, b)
	})
}

// A first save that begins its creation early (Log.Create) and is then refused before it appends
// (invalid bytes: Abandon) shares its index entry with a creation of the same key on another
// daemon. Whichever order the two take, the winner stays listed once: an abandon must not take
// back an entry the winner's first entry names (the reverted 911a8a9's bug, in Abandon's path),
// and a winner landing after the abandon took it back lists the key again.
func TestCreate_AbandonedCreationLeavesTheSharedIndexEntryOfTheWinner(t *testing.T) {
	for _, winnerFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("winner first ", winnerFirst), func(t *testing.T) {
			twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
				ctx := context.Background()
				k := engine.Key{Namespace: "n", Session: "abandon", Agent: "main"}
				ca := a.Create(ctx, k) // a's index entry, published at once
				cb := b.Create(ctx, k) // b's: the same entry, shared (Nats-Msg-Id)
				if winnerFirst {
					_, err := cb.Append(ctx, []byte("b"))
					require.NoError(t, err)
					require.NoError(t, ca.Abandon(ctx))
				} else {
					require.NoError(t, ca.Abandon(ctx))
					_, err := cb.Append(ctx, []byte("b"))
					require.NoError(t, err)
				}
				requireListed(t, "n", []engine.Key{k}, a, b)
			})
		})
	}
}

// The creation that wrote the index entry is still under way (its first entry not yet sent) when a
// creation of the same key on another daemon shares the entry and is abandoned (a first save
// refused: a hostile client's invalid body). The abandoned sharer must leave the entry: the
// writer's first entry, landing after the abandon, names it, and the writer (not a sharer) does
// not look whether it is still there. Before, the sharer deleted it, and the writer's session was
// stored but never listed.
func TestCreate_AbandonedSharerLeavesTheEntryOfTheWriterUnderWay(t *testing.T) {
	twoLogs(t, func(t *testing.T, a, b *logstore.Log) {
		ctx := context.Background()
		k := engine.Key{Namespace: "n", Session: "writer-under-way", Agent: "main"}
		aListed, bAbandoned := make(chan struct{}), make(chan struct{})
		logstore.SetBeforeFirstEntry(a, func() error { close(aListed); <-bAbandoned; return nil })
		ca := a.Create(ctx, k) // a writes the index entry
		landed := make(chan error, 1)
		go func() { _, err := ca.Append(ctx, []byte("a")); landed <- err }()
		<-aListed // a's index entry is stored; its first entry waits
		require.NoError(t, b.Create(ctx, k).Abandon(ctx))
		close(bAbandoned)
		require.NoError(t, <-landed)
		requireListed(t, "n", []engine.Key{k}, a, b)

		logstore.SetIndexGrace(b, 0)
		require.NoError(t, b.Purge(ctx, k))
		requireListed(t, "n", nil, a, b)
	})
}
