package logstore

// Tests written by the session-17 review (s17-review1), renamed for what they check. Each one
// failed on the code it was written against (findings 4, 8 and 5 of the review); they pass since
// the fixes.

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// A creation is two writes (create: the index entry, then the log's first entry). A Purge of the
// key that runs between them, while the log is still empty, reads the whole index (indexEntries:
// an empty log has no Cp-Index to follow) and deletes the in-flight creation's index entry; the
// creation's first entry then lands. The log has an entry and no listing shows it: neither "the
// Append came first" (the log would be empty) nor "the Purge came first" (it would be listed).
//
// The interleaving is made deterministic by calling create's own two steps (publish to the index,
// then to the log with Cp-Index) around a whole Purge, as a creator paused between them would.
func TestLog_PurgeOfEmptyLogKeepsACreationUnderWay(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	subject, err := LogSubject(k)
	require.NoError(t, err)
	idx, err := indexSubject(k.Namespace)
	require.NoError(t, err)

	// create, step 1: the index entry
	idxSeq, err := l.publish(ctx, idx, []byte(indexToken(k)), anyLastSeq, nil)
	require.NoError(t, err)
	// another caller purges the key, whose log is still empty
	require.NoError(t, l.Purge(ctx, k))
	// create, step 2: the log's first entry (its compare-and-swap on 0 holds: the log is empty)
	hdr := nats.Header{indexHeader: []string{strconv.FormatUint(idxSeq, 10)}}
	seq, err := l.publish(ctx, subject, []byte("first"), lastSeqIs(0), hdr)
	require.NoError(t, err)

	last, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, seq, last.Seq, "the session exists")
	keys, _, err := l.Sessions(ctx, k.Namespace, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{k}, keys, "a session with entries is listed (its index entry was deleted by a Purge that ran before its first entry)")
}

// deleteSeqs says "Messages already gone are skipped", and Delete and Purge rely on it when
// another daemon deleted the same entry first (two Purges of one session, a Delete racing a pack's
// deletes). nats-server answers 10043 for a sequence deleted inside a block, but 10057 ("message
// delete failed") for one below the stream's first sequence or in a removed block
// (filestore.removeMsg: selectMsgBlock returns nil), which apiReply does not map: the second
// delete fails although what it was asked to do is done.
func TestLog_DeleteOfAnEntryAlreadyGoneIsSkipped(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	// The stream's first message is k's index entry, its second k's first entry.
	first, err := l.Append(ctx, k, []byte("e0"), 0)
	require.NoError(t, err)
	_, err = l.Append(ctx, k, []byte("e1"), first)
	require.NoError(t, err)
	idxSeq := first - 1

	require.NoError(t, l.deleteSeqs(ctx, []uint64{idxSeq}), "the first delete")
	require.NoError(t, l.deleteSeqs(ctx, []uint64{idxSeq}), "a second delete of the same message (another daemon's) is skipped")
	require.NoError(t, l.Delete(ctx, k, first))
	require.NoError(t, l.deleteSeqs(ctx, []uint64{first}), "an entry a Delete removed, deleted again")
}

// A creation whose log entry is refused for a reason other than a lost compare-and-swap keeps the
// index entry it wrote first (create deletes it only on ErrConflict). When the creation is tried
// again and succeeds, the namespace's index holds two entries for the key, and Sessions returns
// the key twice (nothing dedupes it: engine.Sessions neither), on every listing, for good; each
// failed try adds one more, and Purge later removes only the one the first entry names. Here the
// refusal is a full stream (an operator's max_bytes, with CP_LOG's discard new); a full disk or
// account, or a publish that timed out without storing, leave the same.
func TestLog_RefusedCreationLeavesNoSecondListing(t *testing.T) {
	nc, _ := startServer(t)
	l := openFresh(t, nc, LogConfig{})
	ctx := context.Background()
	cfg := LogStreamConfig(LogConfig{})
	cfg.MaxBytes = 1 << 20
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	filler := engine.Key{Namespace: "n", Session: "filler", Agent: "main"}
	_, err = l.Append(ctx, filler, make([]byte, 600<<10), 0)
	require.NoError(t, err)
	k := engine.Key{Namespace: "n", Session: "s", Agent: "main"}
	_, err = l.Append(ctx, k, make([]byte, 600<<10), 0)
	require.Error(t, err, "the stream is full")
	require.NotErrorIs(t, err, engine.ErrConflict)
	t.Logf("refused: %v", err)
	_, err = l.Append(ctx, k, []byte("small"), 0) // the client tries again, smaller
	require.NoError(t, err)

	keys, _, err := l.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{filler, k}, keys, "each session listed once")
}
