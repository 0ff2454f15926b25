package engine_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
)

// The real corpus (1,003 messages, 2.3 MB) saved after every assistant turn, as whole arrays and
// as appends in turn (485 saves, packed by the default policy, entries of at most 1 MiB as
// JetStream's default max_payload): every version restores byte for byte, with its hash, before
// and after a restart.
func TestEngine_Corpus(t *testing.T) {
	c, cuts := corpusTurns(t)
	version := func(i int) []byte { return append(append([]byte{'['}, c.Span(0, cuts[i])...), ']') }

	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "corpus", Session: "pi", Agent: "main"}
	packs := 0
	for i := range cuts {
		req := engine.SaveRequest{Key: k, SaveID: fmt.Sprint("turn-", i), Now: now, Payload: version(i)}
		if i%2 == 1 { // an append of what grew
			from := cuts[i-1]
			req.Base, req.Payload = u64(uint64(i)), append(append([]byte{'['}, c.Span(from, cuts[i])...), ']')
		}
		s, err := e.Save(ctx, req)
		require.NoError(t, err, "save %d", i)
		require.Equal(t, uint64(i+1), s.Record.Version)
		require.Equal(t, hashOf(version(i)), s.Record.Hash, "save %d", i)
		if s.PackDue {
			r, err := e.Pack(ctx, k, false)
			require.NoError(t, err)
			packs += min(r.Entries, 1)
		}
	}
	require.Positive(t, packs)
	t.Logf("%d saves, %d packs, %d entries left", len(cuts), packs, entries(t, log, k))
	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
		}
		for i := range cuts {
			if cold && i%7 != 0 && i != len(cuts)-1 {
				continue
			}
			got, rec, err := e.Read(ctx, k, uint64(i+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", i+1)
			require.Equal(t, hashOf(version(i)), rec.Hash)
			require.True(t, string(got) == string(version(i)), "version %d is not byte-identical", i+1)
		}
	}
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, len(cuts))
}

// corpusTurns parses the corpus's pi_before_compaction.json and returns where each checkpoint of
// it ends: after every assistant turn, and after the messages that follow the last turn (what
// checkpointbench saves too).
func corpusTurns(t *testing.T) (*codec.Conversation, []int) {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	require.NoError(t, err)
	c, err := codec.Parse(raw)
	require.NoError(t, err)
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	if cuts[len(cuts)-1] != len(c.Messages) {
		cuts = append(cuts, len(c.Messages))
	}
	return c, cuts
}
