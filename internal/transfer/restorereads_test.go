package transfer_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
)

// logReads counts the storage reads of the log stream that reach the server from any connection
// (the daemon's direct gets and leader gets of CP_LOG, seen as the requests they are) from the
// call on: every read of the engine is one of them. Each call of the function it returns counts
// those since its last call; the requests are held on synchronous subscriptions, so a flush of nc
// makes sure all those sent before are there.
func logReads(t *testing.T, nc *nats.Conn) func() []string {
	t.Helper()
	var subs []*nats.Subscription
	for _, subject := range []string{
		"$JS.API.DIRECT.GET." + edge.LogStream, "$JS.API.DIRECT.GET." + edge.LogStream + ".>",
		"$JS.API.STREAM.MSG.GET." + edge.LogStream,
	} {
		sub, err := nc.SubscribeSync(subject)
		require.NoError(t, err)
		require.NoError(t, sub.SetPendingLimits(-1, -1))
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		subs = append(subs, sub)
	}
	require.NoError(t, nc.Flush())
	return func() []string {
		require.NoError(t, nc.Flush())
		var reads []string
		for _, sub := range subs {
			for {
				m, err := sub.NextMsg(0)
				if err != nil {
					break
				}
				reads = append(reads, m.Subject+" "+string(m.Data))
			}
		}
		return reads
	}
}

// A restore of the head (the SDK's: one read request, zstd) asks the engine for the head's record
// and body together: the log's last entry is read once, and for a session saved once, whose last
// entry holds its head alone, nothing else is (docs/format.md §8.6). A session saved twice costs
// that entry and one read of the entries before it. Each is measured on a session read for the
// first time (nothing cached: each conversation is its own), the fewest reads of three taken: the daemon's housekeeping may read
// the log at any moment too. Read again (the body cached), the head the daemon saved costs no
// read of the log at all: the first restore asked whether the log has an entry after it (docs/format.md
// §8.6), and the stream's notes tell the daemon of any entry since (§8.15o, edge/notes.go).
func TestRestore_HeadIsReadWithItsRecordInOneStorageRead(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.Engine.NoPack = true })
	ctx := ctxT(t)
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	reads := logReads(t, env.Conn())
	for _, c := range []struct {
		saves int
		want  int64
	}{{1, 1}, {2, 2}} {
		fewest, fewestAgain, lastsAgain := int64(-1), int64(1<<62), 1<<30
		for i := range 3 {
			key := checkpoint.Key{Session: fmt.Sprintf("saved-%d-times-%d", c.saves, i)}
			var want []byte
			var saved checkpoint.Version
			for s := range c.saves {
				// Its own last message: the cache holds conversations by their hash, across sessions.
				own := json.RawMessage(fmt.Sprintf(`{"role":"user","content":%q}`, key.Session))
				want = arrayOf(append(slices.Clone(msgs[:len(msgs)-c.saves+s]), own))
				v, err := env.Client.Save(ctx, key, want)
				require.NoError(t, err)
				saved = v
			}
			reads()
			got, v, err := env.Client.Restore(ctx, key, 0)
			during := reads()
			n := int64(len(during))
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, saved, v, "the record get returns")
			t.Logf("saved %d times: restored with %d storage reads: %q", c.saves, n, during)
			if fewest < 0 || n < fewest {
				fewest = n
			}
			_, _, err = env.Client.Restore(ctx, key, 0)
			require.NoError(t, err)
			again := reads()
			t.Logf("saved %d times: restored again with %d storage reads", c.saves, len(again))
			fewestAgain = min(fewestAgain, int64(len(again)))
			lasts := 0
			for _, r := range again {
				if strings.Contains(r, `"last_by_subj"`) {
					lasts++
				}
			}
			lastsAgain = min(lastsAgain, lasts)
		}
		require.Equal(t, c.want, fewest, "storage reads of a head restore, session saved %d times", c.saves)
		require.Zero(t, fewestAgain, "a restore of a head this daemon saved and read before: the notes know it is still the head")
		require.Zero(t, lastsAgain, "a restore of a head this daemon saved and read before: only asks whether the log moved (Moved), reads no entry")
	}
}
