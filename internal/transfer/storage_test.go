package transfer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// corpusMessages returns the messages of a corpus file, canonical.
func corpusMessages(t testing.TB, name string) []json.RawMessage {
	data, err := os.ReadFile("../../testdata/corpus/" + name)
	require.NoError(t, err)
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(data, &msgs))
	for i, m := range msgs {
		var b bytes.Buffer
		require.NoError(t, json.Compact(&b, m))
		msgs[i] = b.Bytes()
	}
	return msgs
}

func arrayOf(msgs []json.RawMessage) []byte {
	parts := make([][]byte, len(msgs))
	for i, m := range msgs {
		parts[i] = m
	}
	return append(append([]byte("["), bytes.Join(parts, []byte(","))...), ']')
}

// turnEnds returns the message counts after which an agent would checkpoint: after each assistant
// message.
func turnEnds(t testing.TB, msgs []json.RawMessage) []int {
	var ends []int
	for i, m := range msgs {
		var r struct{ Role string }
		require.NoError(t, json.Unmarshal(m, &r))
		if r.Role == "assistant" {
			ends = append(ends, i+1)
		}
	}
	return ends
}

func head(t testing.TB, env *testenv.Env, key checkpoint.Key) snapshot.Head {
	h, _, err := env.Daemon.Store.Head(context.Background(), key.WithDefaults())
	require.NoError(t, err)
	return h
}

// waitCompacted waits until the head's layout is down to n extents (the idle merge has run).
func waitCompacted(t testing.TB, env *testenv.Env, key checkpoint.Key, n int) snapshot.Head {
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := head(t, env, key)
		if len(h.Layout.Extents) <= n || time.Now().After(deadline) {
			require.LessOrEqual(t, len(h.Layout.Extents), n, "compaction did not run")
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fastIdle(c *transfer.Config) { c.CompactIdle = 200 * time.Millisecond }

// A session checkpointed after every turn stores each message once: every version's StoredBytes is
// only what it added, every version restores exactly, and the layout stays bounded.
func TestStorage_EachMessageStoredOnce(t *testing.T) {
	env := testenv.Start(t, fastIdle)
	ctx := ctxT(t)
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	ends := turnEnds(t, msgs)
	key := checkpoint.Key{Session: "turns"}
	var added int64
	maxExtents := 0
	for _, n := range ends {
		v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
		added += v.StoredBytes
		maxExtents = max(maxExtents, len(head(t, env, key).Layout.Extents))
	}
	require.LessOrEqual(t, maxExtents, snapshot.HardMaxExtents, "merging keeps restores bounded")

	whole := int64(0)
	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, len(ends))
	for i, v := range hist {
		got, _, err := env.Client.Restore(ctx, key, v.Version)
		require.NoError(t, err)
		require.Equal(t, string(arrayOf(msgs[:ends[i]])), string(got), "version %d", v.Version)
		whole += v.RawBytes
	}
	last := hist[len(hist)-1]
	t.Logf("%d versions: %d bytes stored by saves, raw final %d, raw of all versions whole %d", len(hist), added, last.RawBytes, whole)
	require.Less(t, added, last.RawBytes, "the saves stored less than the final conversation raw: no version was stored whole")

	h := waitCompacted(t, env, key, 1)
	require.Equal(t, last.Counts.Messages, h.Layout.Messages())
	h = waitArchived(t, env, key)
	require.Equal(t, last.Version-1, h.Archives[0].To, "every record but the head's is archived")
	indexed, err := env.Daemon.Store.Versions(ctx, key.WithDefaults())
	require.NoError(t, err)
	require.LessOrEqual(t, len(indexed), 1, "archived records left the index")

	after, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Equal(t, hist, after, "history reads the same from the archive")
	for _, i := range []int{0, len(hist) / 2, len(hist) - 2} {
		got, _, err := env.Client.Restore(ctx, key, hist[i].Version)
		require.NoError(t, err, "older versions read from the merged segment and the archive")
		require.Equal(t, string(arrayOf(msgs[:ends[i]])), string(got))
	}

	// The agent carries on: saves after archiving keep the archive reachable.
	next, err := env.Client.Append(ctx, key, last.Version, []byte(`[{"role":"user","content":"after the archive"}]`))
	require.NoError(t, err)
	require.Equal(t, h.Archives, head(t, env, key).Archives)
	after, err = env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, after, len(hist)+1)
	require.Equal(t, next.Version, after[len(after)-1].Version)
	got, _, err := env.Client.Restore(ctx, key, hist[3].Version)
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs[:ends[3]])), string(got))
}

func waitArchived(t testing.TB, env *testenv.Env, key checkpoint.Key) snapshot.Head {
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := head(t, env, key)
		indexed, err := env.Daemon.Store.Versions(context.Background(), key.WithDefaults())
		require.NoError(t, err)
		if len(h.Archives) > 0 && len(indexed) <= 1 || time.Now().After(deadline) {
			require.NotEmpty(t, h.Archives, "the idle session's records were not archived")
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStorage_AppendClient(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "append"}
	v1, err := env.Client.Append(ctx, key, 0, []byte(`[{"role":"user","content":"one"}]`))
	require.NoError(t, err)
	v2, err := env.Client.Append(ctx, key, v1.Version, []byte(`[{"role":"assistant","content":[{"type":"text","text":"two"}]},{"role":"user","content":"three"}]`))
	require.NoError(t, err)
	require.Equal(t, 3, v2.Counts.Messages)
	require.Equal(t, 1, v2.Counts.Assistant)
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, `[{"role":"user","content":"one"},{"role":"assistant","content":[{"type":"text","text":"two"}]},{"role":"user","content":"three"}]`, string(got))

	_, err = env.Client.Append(ctx, key, v1.Version, []byte(`[{"role":"user","content":"stale"}]`))
	require.ErrorIs(t, err, checkpoint.ErrConflict, "appending to a version that is no longer the head")

	_, err = env.Client.Append(ctx, key, v2.Version, []byte(`[{"role":"user","content":"ok"},{"role":"alien"}]`))
	require.ErrorIs(t, err, checkpoint.ErrInvalid)
	var ce *checkpoint.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 4, ce.Index, "the index counts from the start of the conversation")
	require.Contains(t, ce.Message, "message 4")

	// A whole-array save with a bad appended message names its index in the whole array too.
	_, err = env.Client.Save(ctx, key, []byte(string(got[:len(got)-1])+`,{"role":"alien"}]`))
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 3, ce.Index)
}

// A client that resends its whole array pretty-printed is not byte-identical to what is stored, so
// the daemon compares messages: still only the new ones are stored.
func TestStorage_NonCanonicalWholeArrayStoresOnlyTheTail(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "pretty"}
	msgs := corpusMessages(t, "openhands_multi_swe_bench.json")
	_, err := env.Client.Save(ctx, key, arrayOf(msgs[:80]))
	require.NoError(t, err)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, arrayOf(msgs[:82]), "", "  "))
	v, err := env.Client.Save(ctx, key, pretty.Bytes())
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Gen, "an append, not a rewrite")
	require.Less(t, v.StoredBytes, int64(len(msgs[80])+len(msgs[81])), "only the two new messages were stored")
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs[:82])), string(got))
}

// Editing or removing a message starts a new generation; every version, before and after, restores
// exactly, also after compaction.
func TestStorage_RewriteHistoryKeepsEveryVersion(t *testing.T) {
	env := testenv.Start(t, fastIdle)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "rewrite"}
	msgs := corpusMessages(t, "swe_agent_marshmallow_fc.json")
	want := map[uint64][]byte{}
	save := func(conv []byte) checkpoint.Version {
		v, err := env.Client.Save(ctx, key, conv)
		require.NoError(t, err)
		want[v.Version] = conv
		return v
	}
	for _, n := range []int{5, 10, 15, 20} {
		save(arrayOf(msgs[:n]))
	}
	// The agent's runtime rolls back a compaction / edits message 12 and carries on.
	edited := append([]json.RawMessage(nil), msgs[:20]...)
	edited[12] = json.RawMessage(`{"role":"user","content":"edited: let us try another way"}`)
	v5 := save(arrayOf(edited[:22-2]))
	require.Equal(t, uint64(2), v5.Gen, "a rewrite starts a new generation")
	removed := append(append([]json.RawMessage(nil), edited[:8]...), msgs[20:25]...)
	v6 := save(arrayOf(removed))
	require.Equal(t, uint64(3), v6.Gen)
	v7 := save(arrayOf(append(removed, msgs[25:29]...)))
	require.Equal(t, uint64(3), v7.Gen, "appending after a rewrite stays in its generation")

	check := func() {
		for n, conv := range want {
			got, _, err := env.Client.Restore(ctx, key, n)
			require.NoError(t, err, "version %d", n)
			require.Equal(t, string(conv), string(got), "version %d", n)
		}
	}
	check()
	waitCompacted(t, env, key, 1)
	check()
	env.Restart()
	check()
}

// Restores keep succeeding while compaction replaces the segments they read.
func TestStorage_RestoresDuringCompaction(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CompactIdle = 0; c.CacheBytes = 1 }) // no idle merges, no cache
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "racing"}
	msgs := corpusMessages(t, "codex_rollout_codemie.json")
	var versions []uint64
	for n := 10; n <= len(msgs); n += 10 {
		v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
		versions = append(versions, v.Version)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := versions[(i*7+r)%len(versions)]
				got, _, err := env.Client.Restore(ctx, key, n)
				if err == nil && !bytes.Equal(got, arrayOf(msgs[:int(n)*10])) {
					err = fmt.Errorf("version %d restored different bytes", n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(r)
	}
	merged := 0
	for i := 0; i < 20; i++ {
		res, err := snapshot.Compact(ctx, env.Daemon.Store, key.WithDefaults(), i%2 == 1)
		if errors.Is(err, snapshot.ErrRevisionMismatch) {
			continue // the daemon's own compaction got there first: the documented "try later"
		}
		require.NoError(t, err)
		merged += res.Merged
		// Grow the session again so there is something to merge next time.
		_, err = env.Client.Append(ctx, key, head(t, env, key).Version.Version, []byte(fmt.Sprintf(`[{"role":"user","content":"more %d"}]`, i)))
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, merged, "compactions ran under the readers")
}

func TestStorage_IdenticalResaveStoresNothing(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "same"}
	conv := []byte(`[{"role":"user","content":"` + strings.Repeat("x", 10000) + `"}]`)
	v1, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	v2, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	require.Equal(t, v1.Version+1, v2.Version)
	require.Equal(t, v1.Hash, v2.Hash)
	require.Zero(t, v2.StoredBytes)
}

func TestStorage_ViewsDiffFork(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "views"}
	msgs := corpusMessages(t, "pi_before_compaction.json")
	var markers []int
	for i, m := range msgs {
		if bytes.Contains(m, []byte(`"kind":"compaction"`)) {
			markers = append(markers, i)
		}
	}
	require.Len(t, markers, 2, "the corpus file has two compactions")
	v1, err := env.Client.Save(ctx, key, arrayOf(msgs))
	require.NoError(t, err)

	got, _, err := env.Client.Restore(ctx, key, 0, checkpoint.WithView("request"))
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs[markers[1]:])), string(got), "from the last marker on")

	full, _, err := env.Client.Restore(ctx, key, 0, checkpoint.WithView("full"))
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs)), string(full))

	// Rolling the last compaction back: a version without its marker.
	rolled := append(append([]json.RawMessage(nil), msgs[:markers[1]]...), msgs[markers[1]+1:]...)
	v2, err := env.Client.Save(ctx, key, arrayOf(rolled))
	require.NoError(t, err)
	got, _, err = env.Client.Restore(ctx, key, 0, checkpoint.WithView("request"))
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(rolled[markers[0]:])), string(got), "the request view reaches back to the earlier marker")

	got, _, err = env.Client.Restore(ctx, key, v1.Version, checkpoint.WithMaxMessages(7))
	require.NoError(t, err)
	var trimmed []json.RawMessage
	require.NoError(t, json.Unmarshal(got, &trimmed))
	require.LessOrEqual(t, len(trimmed), 6)
	require.NotContains(t, string(trimmed[0]), `"role":"toolResult"`)
	require.Equal(t, string(arrayOf(msgs[len(msgs)-len(trimmed):])), string(got))

	_, _, err = env.Client.Restore(ctx, key, 0, checkpoint.WithView("summary"))
	require.ErrorIs(t, err, checkpoint.ErrBadRequest)

	changes, err := env.Client.Diff(ctx, key, v1.Version, v2.Version)
	require.NoError(t, err)
	require.NotEmpty(t, changes)
	require.Equal(t, markers[1], changes[0].Index)
	removed := 0
	for _, c := range changes {
		if c.Op == "removed" {
			removed++
		}
	}
	require.Equal(t, 1, removed, "one message fewer")

	forked, err := env.Client.Fork(ctx, key, v1.Version, checkpoint.Key{Session: "views-fork"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), forked.Version)
	require.Equal(t, "fork", forked.Reason)
	require.NotNil(t, forked.ForkOf)
	require.Equal(t, v1.Version, forked.ForkOf.Version)
	require.Equal(t, key.WithDefaults(), forked.ForkOf.Key)
	require.Equal(t, v1.Hash, forked.Hash)
	_, err = env.Client.Fork(ctx, key, v1.Version, checkpoint.Key{Session: "views-fork"})
	require.ErrorIs(t, err, checkpoint.ErrConflict, "a fork never overwrites an existing session")
}

// storedSegments lists the segment ids stored for a session.
func storedSegments(t testing.TB, env *testenv.Env, key checkpoint.Key) map[string]bool {
	js, err := jetstream.New(env.NC)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), wire.BucketSegment)
	require.NoError(t, err)
	keys, err := kv.ListKeysFiltered(context.Background(), key.WithDefaults().Token()+".>")
	require.NoError(t, err)
	ids := map[string]bool{}
	for k := range keys.Keys() {
		parts := strings.Split(k, ".")
		ids[parts[3]] = true
	}
	return ids
}

// A busy session makes background merges lose their swap to saves, and saves merge inline; once it
// settles, every stored segment is one the head refers to: nothing a lost race wrote is left behind.
func TestStorage_NoSegmentOutlivesItsReferences(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CompactIdle = 300 * time.Millisecond; c.SegmentGrace = 0 })
	ctx := ctxT(t)
	msgs := corpusMessages(t, "pi_before_compaction.json")
	key := checkpoint.Key{Session: "busy"}
	for _, n := range turnEnds(t, msgs)[:200] {
		_, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
	}
	waitCompacted(t, env, key, 1)
	h := waitArchived(t, env, key)
	want := map[string]bool{h.Layout.Extents[0].Segment.ID: true, h.Archives[0].Segment.ID: true}
	require.Eventually(t, func() bool { return len(storedSegments(t, env, key)) == len(want) }, 5*time.Second, 20*time.Millisecond,
		"stored %d segments, the head refers to %d", len(storedSegments(t, env, key)), len(want))
	require.Equal(t, want, storedSegments(t, env, key))
}

func TestStorage_MergedViewOfAgents(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	planner := checkpoint.Key{Namespace: "team", Session: "task", Agent: "planner"}
	coder := checkpoint.Key{Namespace: "team", Session: "task", Agent: "coder.1"}
	_, err := env.Client.Save(ctx, planner, []byte(`[{"role":"user","content":"plan it","timestamp":100},{"role":"assistant","content":[{"type":"text","text":"step 1"}],"timestamp":300}]`))
	require.NoError(t, err)
	vc, err := env.Client.Save(ctx, coder, []byte(`[{"role":"user","content":"code it","timestamp":200},{"role":"assistant","content":[{"type":"text","text":"done"}],"timestamp":400}]`))
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, checkpoint.Key{Namespace: "team", Session: "other"}, []byte(`[{"role":"user","content":"elsewhere","timestamp":1}]`))
	require.NoError(t, err)

	got, pins, err := env.Client.RestoreMerged(ctx, "team", "task", false)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"planner": 1, "coder.1": vc.Version}, pins)
	require.Equal(t, `[{"role":"user","content":"plan it","timestamp":100,"agentId":"planner"},`+
		`{"role":"user","content":"code it","timestamp":200,"agentId":"coder.1"},`+
		`{"role":"assistant","content":[{"type":"text","text":"step 1"}],"timestamp":300,"agentId":"planner"},`+
		`{"role":"assistant","content":[{"type":"text","text":"done"}],"timestamp":400,"agentId":"coder.1"}]`, string(got))

	got, _, err = env.Client.RestoreMerged(ctx, "team", "task", true, checkpoint.WithMaxMessages(2))
	require.NoError(t, err)
	require.Equal(t, `[{"role":"assistant","content":[{"type":"text","text":"[planner] step 1"}],"timestamp":300,"agentId":"planner"},`+
		`{"role":"assistant","content":[{"type":"text","text":"[coder.1] done"}],"timestamp":400,"agentId":"coder.1"}]`, string(got))

	// The stored conversations are untouched.
	plain, _, err := env.Client.Restore(ctx, planner, 0)
	require.NoError(t, err)
	require.NotContains(t, string(plain), "agentId")

	_, _, err = env.Client.RestoreMerged(ctx, "team", "missing", false)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// Views and merged views larger than a NATS message and than the read cache come back whole and
// exact, piece by piece, while reads of other large things interleave with them.
func TestStorage_LargeViewsInPieces(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10, func(c *transfer.Config) { c.CacheBytes = 32 << 10 })
	ctx := ctxT(t)
	msg := func(agent string, i int) string {
		return fmt.Sprintf(`{"role":"user","content":"%s %d %s","timestamp":%d}`, agent, i, strings.Repeat("é", 200), 2*i+len(agent)%2)
	}
	var a, b []string
	for i := range 600 {
		a, b = append(a, msg("a", i)), append(b, msg("bb", i))
	}
	a[300] = `{"role":"extension","kind":"compaction","data":{"summary":"the first 300"},"timestamp":601}`
	join := func(ms []string) string { return "[" + strings.Join(ms, ",") + "]" }
	ka := checkpoint.Key{Namespace: "big", Session: "task", Agent: "a"}
	kb := checkpoint.Key{Namespace: "big", Session: "task", Agent: "bb"}
	_, err := env.Client.Save(ctx, ka, []byte(join(a)))
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, kb, []byte(join(b)))
	require.NoError(t, err)

	// b's messages have even timestamps, a's odd: merged, they alternate, b first.
	var merged []string
	for i := range 600 {
		merged = append(merged, b[i][:len(b[i])-1]+`,"agentId":"bb"}`, a[i][:len(a[i])-1]+`,"agentId":"a"}`)
	}
	same := func(want, got string) {
		t.Helper()
		if want != got {
			i := 0
			for i < min(len(want), len(got)) && want[i] == got[i] {
				i++
			}
			t.Fatalf("%d bytes, want %d: first difference at byte %d: %.80q", len(got), len(want), i, got[i:])
		}
	}
	for range 2 {
		got, _, err := env.Client.Restore(ctx, ka, 0, checkpoint.WithView("request"))
		require.NoError(t, err)
		same(join(a[300:]), string(got))
		got, _, err = env.Client.Restore(ctx, kb, 0)
		require.NoError(t, err)
		same(join(b), string(got))
		got, _, err = env.Client.Restore(ctx, ka, 0, checkpoint.WithMaxMessages(400))
		require.NoError(t, err)
		same(join(a[200:]), string(got))
		got, _, err = env.Client.RestoreMerged(ctx, "big", "task", false)
		require.NoError(t, err)
		same(join(merged), string(got))
	}
}

func TestStorage_AppendsCannotGrowPastTheLimit(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes = 4096 })
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "growing"}
	msg := `{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}`
	v, err := env.Client.Append(ctx, key, 0, []byte("["+msg+","+msg+","+msg+"]"))
	require.NoError(t, err)
	_, err = env.Client.Append(ctx, key, v.Version, []byte("["+msg+"]"))
	require.ErrorIs(t, err, checkpoint.ErrTooLarge, "each append is small, the conversation would not be")
	require.Contains(t, err.Error(), "would grow")
	_, err = env.Client.Save(ctx, key, []byte("["+msg+","+msg+","+msg+","+msg+"]"))
	require.ErrorIs(t, err, checkpoint.ErrTooLarge, "the same through the whole-array path")
}

// Conversations with segments past snapshot.StreamBytes are stored and read piece by piece; what
// comes back is still exactly what was saved, alone or next to small segments.
func TestStorage_LargeSegmentsStreamed(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "large"}
	img := randomBytes(3 << 20)
	var conv []byte
	conv = append(conv, `[{"role":"user","content":"look"}`...)
	for i := 0; i < 3; i++ {
		conv = append(conv, fmt.Sprintf(`,{"role":"toolResult","toolCallId":"c%d","content":[{"type":"image","data":"%s","mimeType":"image/png"}]}`, i, base64.StdEncoding.EncodeToString(img))...)
	}
	conv = append(conv, ']')
	require.Greater(t, len(conv), 3*snapshot.StreamBytes)
	v1, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	conv2 := turn(conv, "me", 1)
	_, err = env.Client.Save(ctx, key, conv2)
	require.NoError(t, err)
	for _, c := range []struct {
		version uint64
		want    []byte
	}{{v1.Version, conv}, {0, conv2}} {
		got, _, err := env.Client.Restore(ctx, key, c.version)
		require.NoError(t, err)
		require.True(t, bytes.Equal(c.want, got), "version %d", c.version)
	}
	got, _, err := env.Client.Restore(ctx, key, 0, checkpoint.WithMaxMessages(2))
	require.NoError(t, err)
	require.Contains(t, string(got), `"me turn 1"`)
}

// A daemon that crashes between writing a segment and committing it leaves the segment behind;
// the sweep removes it, and only it, once it is older than the grace period.
func TestStorage_SweepRemovesOnlyOrphans(t *testing.T) {
	// No background merging: it deletes merged-away segments, and this test counts them. Fewer
	// versions than snapshot.MaxExtents keep a merge from falling due; the test merges itself.
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = 0; c.CompactIdle = 0 })
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "swept"}
	k := key.WithDefaults()
	msgs := corpusMessages(t, "openhands_gui_todo_app.json")
	step := len(msgs)/snapshot.MaxExtents + 1
	for n := step; n <= len(msgs); n += step {
		_, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
	}
	merged, err := snapshot.Compact(ctx, env.Daemon.Store, k, true)
	require.NoError(t, err)
	require.Positive(t, merged.Merged, "a merged layout, with merged-away segments already gone")
	_, err = env.Client.Save(ctx, key, arrayOf(msgs[:3])) // a rewrite: an older generation to keep
	require.NoError(t, err)
	orphan, err := env.Daemon.Store.PutSegment(ctx, k, snapshot.SegmentRef{ID: "0rphan", Messages: 1, StoredBytes: 3}, []byte("abc"))
	require.NoError(t, err)
	before, err := env.Daemon.Store.SegmentIDs(ctx, k)
	require.NoError(t, err)
	require.Contains(t, before, orphan.ID)

	n, err := snapshot.Sweep(ctx, env.Daemon.Store, k, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing is old enough yet")
	n, err = snapshot.Sweep(ctx, env.Daemon.Store, k, time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the orphan, and only the orphan")
	after, err := env.Daemon.Store.SegmentIDs(ctx, k)
	require.NoError(t, err)
	require.NotContains(t, after, orphan.ID)
	require.Len(t, after, len(before)-1)

	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	for _, v := range hist {
		_, _, err := env.Client.Restore(ctx, key, v.Version)
		require.NoError(t, err, "version %d still restores", v.Version)
	}
}

// imageMessage is a tool result carrying one inline image, as agents send screenshots.
func imageMessage(id string, img []byte) string {
	return fmt.Sprintf(`{"role":"toolResult","toolCallId":"%s","content":[{"type":"image","data":"%s","mimeType":"image/png"}]}`, id, base64.StdEncoding.EncodeToString(img))
}

// randomBytes stands in for a screenshot: it compresses as little as one.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// requireVersions restores each version of key and compares it byte for byte with want's.
func requireVersions(t *testing.T, env *testenv.Env, key checkpoint.Key, want map[uint64][]byte) {
	t.Helper()
	for n, conv := range want {
		got, _, err := env.Client.Restore(ctxT(t), key, n)
		require.NoError(t, err, "version %d", n)
		require.True(t, bytes.Equal(conv, got), "version %d restores byte for byte", n)
	}
}

func valueEntries(t testing.TB, env *testenv.Env, ns string) []snapshot.ValueEntry {
	es, _, err := env.Daemon.Store.ValueEntries(context.Background(), ns)
	require.NoError(t, err)
	return es
}

// The same image in several sessions of a namespace, or twice in one conversation, is stored once;
// another namespace stores its own copy; the sweep deletes it only once no session refers to it.
func TestStorage_LargeValuesStoredOncePerNamespace(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = 0 })
	ctx := ctxT(t)
	img := randomBytes(1 << 20)
	other := randomBytes(100 << 10)
	a := checkpoint.Key{Namespace: "team", Session: "a"}
	b := checkpoint.Key{Namespace: "team", Session: "b"}
	c := checkpoint.Key{Namespace: "elsewhere", Session: "c"}
	convA := []byte(`[{"role":"user","content":"what is on screen?"},` + imageMessage("s1", img) + `]`)
	convB := []byte(`[{"role":"user","content":"and here, é ü 😀?"},` + imageMessage("s1", img) + `,` + imageMessage("s2", other) + `,` + imageMessage("s3", img) + `]`)

	va, err := env.Client.Save(ctx, a, convA)
	require.NoError(t, err)
	require.Greater(t, va.StoredBytes, int64(1<<20), "the first copy is stored")
	vb, err := env.Client.Save(ctx, b, convB)
	require.NoError(t, err)
	require.Less(t, vb.StoredBytes, int64(140<<10), "the image again is not stored again, only the new one")
	vc, err := env.Client.Save(ctx, c, convA)
	require.NoError(t, err)
	require.Greater(t, vc.StoredBytes, int64(1<<20), "another namespace keeps its own copy")
	require.Len(t, valueEntries(t, env, "team"), 2)
	require.Len(t, valueEntries(t, env, "elsewhere"), 1)

	forked, err := env.Client.Fork(ctx, b, vb.Version, checkpoint.Key{Namespace: "team", Session: "b-fork"})
	require.NoError(t, err)
	require.Less(t, forked.StoredBytes, int64(4<<10), "a fork stores its images by reference")
	for key, want := range map[checkpoint.Key][]byte{a: convA, b: convB, c: convA, {Namespace: "team", Session: "b-fork"}: convB} {
		got, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%v restores byte for byte", key)
	}

	sweep := func(ns string) snapshot.ValueSweep {
		res, err := snapshot.SweepValues(ctx, env.Daemon.Store, ns, time.Now().Add(time.Hour)) // as if an hour had passed
		require.NoError(t, err)
		return res
	}
	_, err = env.Client.Delete(ctx, a, nil)
	require.NoError(t, err)
	require.Zero(t, sweep("team").Deleted, "b and its fork still use both images")
	got, _, err := env.Client.Restore(ctx, b, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(convB, got))

	// A value used recently is kept even with nothing referring to it: a save may be about to.
	_, err = env.Client.Delete(ctx, c, nil)
	require.NoError(t, err)
	res, err := snapshot.SweepValues(ctx, env.Daemon.Store, "elsewhere", time.Now().Add(-snapshot.SweepGrace))
	require.NoError(t, err)
	require.Zero(t, res.Deleted, "used a moment ago")
	require.Equal(t, 1, sweep("elsewhere").Deleted)
	require.Empty(t, valueEntries(t, env, "elsewhere"))

	for _, k := range []checkpoint.Key{b, {Namespace: "team", Session: "b-fork"}} {
		_, err = env.Client.Delete(ctx, k, nil)
		require.NoError(t, err)
	}
	res = sweep("team")
	require.Equal(t, 2, res.Deleted)
	require.Greater(t, res.FreedBytes, int64(1<<20))
	require.Empty(t, valueEntries(t, env, "team"))
	blobs, err := env.Daemon.Store.SegmentIDs(ctx, snapshot.ValuesKey("team"))
	require.NoError(t, err)
	require.Empty(t, blobs, "the blobs went with their entries")

	// Stored again when a new session brings it back.
	va, err = env.Client.Save(ctx, a, convA)
	require.NoError(t, err)
	require.Greater(t, va.StoredBytes, int64(1<<20))
	got, _, err = env.Client.Restore(ctx, a, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(convA, got))
}

// A version that takes only the first messages of a segment (here a rewrite keeps the first three
// of four) fetches only the values among them: restoring it, or saving a rewrite of it, does not
// read the image it dropped.
func TestStorage_CutExtentFetchesOnlyItsValues(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = 0 }) // deletes at once
	ctx := ctxT(t)
	st := env.Daemon.Store
	kept, dropped := randomBytes(100<<10), randomBytes(100<<10)
	key := checkpoint.Key{Namespace: "cut", Session: "s"}
	v1 := []byte(`[{"role":"user","content":"a"},` + imageMessage("s1", kept) + `,{"role":"user","content":"b"},` + imageMessage("s2", dropped) + `]`)
	v2 := []byte(`[{"role":"user","content":"a"},` + imageMessage("s1", kept) + `,{"role":"user","content":"b"},{"role":"user","content":"edited"}]`)
	_, err := env.Client.Save(ctx, key, v1)
	require.NoError(t, err)
	_, err = env.Client.Save(ctx, key, v2)
	require.NoError(t, err)

	// Take the dropped image's blob away behind the daemon's back.
	id := sha256.Sum256([]byte(`"` + base64.StdEncoding.EncodeToString(dropped) + `"`))
	var gone snapshot.ValueEntry
	for _, e := range valueEntries(t, env, "cut") {
		if e.ID == hex.EncodeToString(id[:]) {
			gone = e
		}
	}
	require.NotEmpty(t, gone.Name, "the dropped image is a stored value")
	require.NoError(t, st.DeleteSegment(ctx, snapshot.ValuesKey("cut"), snapshot.SegmentRef{ID: gone.Name, Chunks: gone.Chunks}))

	got, _, err := env.Client.Restore(ctx, key, 2)
	require.NoError(t, err, "version 2 does not hold the dropped image")
	require.True(t, bytes.Equal(v2, got))
	_, _, err = env.Client.Restore(ctx, key, 1)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt, "version 1 does, and its blob is gone")

	// Another rewrite compares with the head without reading its values (they are compared by
	// hash): it does not trip over the missing one either, and keeps the image by reference.
	v3 := []byte(`[{"role":"user","content":"a"},` + imageMessage("s1", kept) + `,{"role":"user","content":"b"},{"role":"user","content":"edited again"}]`)
	ver, err := env.Client.Save(ctx, key, v3)
	require.NoError(t, err)
	require.Less(t, ver.StoredBytes, int64(4<<10), "the kept prefix, image included, is not stored again")
	got, _, err = env.Client.Restore(ctx, key, 3)
	require.NoError(t, err)
	require.True(t, bytes.Equal(v3, got))
}

// Merging the pieces of a conversation full of images joins their blobs and carries the images
// over by reference: every version restores exactly after it, and a merge reads no image (here one
// whose blob was taken away behind the daemon's back does not stop it).
func TestStorage_MergesCarryValuesByReference(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CompactIdle = 0; c.SegmentGrace = 0 }) // merges only when asked
	ctx := ctxT(t)
	st := env.Daemon.Store
	imgs := make([][]byte, 3)
	for i := range imgs {
		imgs[i] = randomBytes(60 << 10)
	}
	for _, ns := range []string{"merge", "gone"} {
		key := checkpoint.Key{Namespace: ns, Session: "s"}
		conv := []byte(`[{"role":"user","content":"look"}]`)
		want := map[uint64][]byte{}
		for i := range 6 {
			conv = append(conv[:len(conv)-1], `,`+imageMessage(fmt.Sprint("c", i), imgs[i%3])+`,{"role":"user","content":"and é `+fmt.Sprint(i)+`"}]`...)
			v, err := env.Client.Save(ctx, key, conv)
			require.NoError(t, err)
			want[v.Version] = slices.Clone(conv)
		}
		require.Len(t, valueEntries(t, env, ns), 3, "each image stored once")
		if ns == "gone" {
			e := valueEntries(t, env, ns)[0]
			require.NoError(t, st.DeleteSegment(ctx, snapshot.ValuesKey(ns), snapshot.SegmentRef{ID: e.Name, Chunks: e.Chunks}))
		}
		res, err := snapshot.Compact(ctx, st, key.WithDefaults(), true)
		require.NoError(t, err, "a merge reads no image")
		require.Equal(t, 6, res.Merged)
		h := head(t, env, key)
		require.Len(t, h.Layout.Extents, 1)
		require.Len(t, h.Layout.Extents[0].Segment.Values, 6, "the images, by reference")
		require.Less(t, res.WroteBytes, int64(8<<10), "the merged blob holds no image")
		if ns == "merge" {
			requireVersions(t, env, key, want)
			continue
		}
		for n := range want {
			_, _, err := env.Client.Restore(ctx, key, n)
			require.ErrorIs(t, err, checkpoint.ErrCorrupt, "version %d", n)
		}
	}
}

// A segment written before large strings were stored as values (or under other thresholds) has
// them inline: merging it cuts them out, so the namespace stores them once from then on.
func TestStorage_MergeCutsOutValuesOfOlderSegments(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.CompactIdle = 0 })
	ctx := ctxT(t)
	st := env.Daemon.Store
	img := randomBytes(60 << 10)
	key := checkpoint.Key{Namespace: "old", Session: "s"}
	first := `{"role":"user","content":"look"},` + imageMessage("c1", img)
	conv := []byte("[" + first + "]")
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)

	// Store version 1's messages as a segment of before values, the image inline, in place of its own.
	h, rev, err := st.Head(ctx, key.WithDefaults())
	require.NoError(t, err)
	raw := []byte(first)
	blob := codec.EncodeBlob(raw)
	old, err := st.PutSegment(ctx, key.WithDefaults(), snapshot.SegmentRef{ID: "pre-values", Messages: 2, RawBytes: int64(len(raw)), StoredBytes: int64(len(blob))}, blob)
	require.NoError(t, err)
	h.Layout.Extents = []snapshot.Extent{{Segment: old, Count: 2, RawBytes: int64(len(raw))}}
	require.NoError(t, st.SwapHead(ctx, h, rev))
	got, _, err := env.Client.Restore(ctx, key, 1)
	require.NoError(t, err)
	require.True(t, bytes.Equal(conv, got))

	conv = []byte("[" + first + `,{"role":"user","content":"more"}]`)
	_, err = env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	_, err = snapshot.Compact(ctx, st, key.WithDefaults(), true)
	require.NoError(t, err)
	merged := head(t, env, key).Layout.Extents
	require.Len(t, merged, 1)
	require.Len(t, merged[0].Segment.Values, 1, "the inline image became a value")
	require.Less(t, merged[0].Segment.StoredBytes, int64(4<<10))
	requireVersions(t, env, key, map[uint64][]byte{1: []byte("[" + first + "]"), 2: conv})
}

// The sweep and saves race on a value's entry: a save that finds the value being deleted stores
// it again under a new name, the sweep that was deleting it leaves the new one alone, and the blob
// the loser left is swept as an orphan.
func TestStorage_ValueSweepRacesSaves(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = 0 })
	ctx := ctxT(t)
	st := env.Daemon.Store
	img := randomBytes(200 << 10)
	conv := []byte(`[{"role":"user","content":"x"},` + imageMessage("s1", img) + `]`)
	key := checkpoint.Key{Namespace: "race", Session: "s"}
	_, err := env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	entries, revs, err := st.ValueEntries(ctx, "race")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	first := entries[0]

	// The session goes; the sweep claims the value (Deleting) and then, before it deletes, a new
	// session saves the same image.
	_, err = env.Client.Delete(ctx, key, nil)
	require.NoError(t, err)
	claimed := first
	claimed.Deleting = true
	_, err = st.SwapValueEntry(ctx, claimed, revs[0])
	require.NoError(t, err)
	key2 := checkpoint.Key{Namespace: "race", Session: "s2"}
	v, err := env.Client.Save(ctx, key2, conv)
	require.NoError(t, err)
	require.Greater(t, v.StoredBytes, int64(200<<10), "stored again, not referred to while deleting")
	now, _, err := st.ValueEntry(ctx, "race", first.ID)
	require.NoError(t, err)
	require.False(t, now.Deleting)
	require.NotEqual(t, first.Name, now.Name, "under a new name")

	// The old blob is now an orphan: swept once old enough; the new one stays.
	res, err := snapshot.SweepValues(ctx, st, "race", time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, res.Deleted, "s2 uses the value")
	require.Equal(t, 1, res.Orphans)
	got, _, err := env.Client.Restore(ctx, key2, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(conv, got))

	// A save that touched the entry after the sweep read it wins: the sweep's swap fails.
	_, err = env.Client.Delete(ctx, key2, nil)
	require.NoError(t, err)
	cur, rev, err := st.ValueEntry(ctx, "race", first.ID)
	require.NoError(t, err)
	cur.Used = time.Now()
	_, err = st.SwapValueEntry(ctx, cur, rev)
	require.NoError(t, err)
	cur.Deleting = true
	_, err = st.SwapValueEntry(ctx, cur, rev)
	require.ErrorIs(t, err, snapshot.ErrRevisionMismatch, "the sweep's claim with the revision it read loses")
}

// The SDK keeps a copy of what it saved last to send only what grew, extending that copy in place;
// a conversation that changes what was sent, or saves of one session from several goroutines,
// must never make it send the wrong delta.
func TestSDK_WholeArrayDeltasStayExact(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	msgs := corpusMessages(t, "openhands_gui_todo_app.json")
	key := checkpoint.Key{Session: "deltas"}
	check := func(v checkpoint.Version, want []json.RawMessage) {
		t.Helper()
		got, _, err := env.Client.Restore(ctx, key, v.Version)
		require.NoError(t, err)
		require.Equal(t, string(arrayOf(want)), string(got))
	}
	for n := 2; n <= 8; n += 2 {
		v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
		check(v, msgs[:n])
	}
	// Rewrite the last message sent, then grow from the rewrite.
	edited := append(append([]json.RawMessage(nil), msgs[:7]...), json.RawMessage(`{"role":"user","content":"edited"}`))
	v, err := env.Client.Save(ctx, key, arrayOf(edited))
	require.NoError(t, err)
	check(v, edited)
	grown := append(append([]json.RawMessage(nil), edited...), msgs[8:12]...)
	v, err = env.Client.Save(ctx, key, arrayOf(grown))
	require.NoError(t, err)
	check(v, grown)

	// Several goroutines save growing conversations of one session through one client: each save
	// either lands as exactly its conversation or is refused as a conflict.
	var wg sync.WaitGroup
	results := make(chan struct {
		v    checkpoint.Version
		want []json.RawMessage
	}, 16)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				conv := append(append([]json.RawMessage(nil), grown...), msgs[12:12+i+1]...)
				conv = append(conv, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"goroutine %d save %d"}`, g, i)))
				v, err := env.Client.Save(ctx, key, arrayOf(conv))
				if err == nil {
					results <- struct {
						v    checkpoint.Version
						want []json.RawMessage
					}{v, conv}
				} else {
					require.ErrorIs(t, err, checkpoint.ErrConflict)
				}
			}
		}(g)
	}
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		check(r.v, r.want)
		n++
	}
	require.Positive(t, n)
}

// lostReply is a store whose first value entry create is written but answered with a timeout, as
// when the reply is lost.
type lostReply struct {
	*transfer.Store
	fired bool
}

func (s *lostReply) SwapValueEntry(ctx context.Context, e snapshot.ValueEntry, rev uint64) (uint64, error) {
	r, err := s.Store.SwapValueEntry(ctx, e, rev)
	if err == nil && rev == 0 && !s.fired {
		s.fired = true
		return 0, context.DeadlineExceeded
	}
	return r, err
}

// A save whose value entry was written but whose reply was lost fails, and must leave the blob the
// entry names: the next save of the same image relies on it. A value whose blob is gone reads as
// corrupt, at once, not as a missing version after retries.
func TestStorage_ValueEntryWithLostReplyKeepsItsBlob(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.SegmentGrace = 0 })
	ctx := ctxT(t)
	st := &lostReply{Store: env.Daemon.Store}
	img := randomBytes(48 << 10)
	body := []byte(`[` + imageMessage("s1", img) + `]`)
	k1 := wire.Key{Namespace: "ns", Session: "s1", Agent: "main"}
	_, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: k1, SaveID: "1", Payload: body, Now: time.Now()})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	k2 := wire.Key{Namespace: "ns", Session: "s2", Agent: "main"}
	saved, err := snapshot.Save(ctx, st, snapshot.SaveRequest{Key: k2, SaveID: "2", Payload: body, Now: time.Now()})
	require.NoError(t, err)
	got, err := snapshot.Read(ctx, st, saved.Head.Version, nil)
	require.NoError(t, err)
	require.Equal(t, body, got)

	// Now lose the blob behind the store's back.
	e, _, err := st.ValueEntry(ctx, "ns", saved.Head.Layout.Extents[0].Segment.Values[0].ID)
	require.NoError(t, err)
	require.NoError(t, st.DeleteSegment(ctx, snapshot.ValuesKey("ns"), snapshot.SegmentRef{ID: e.Name}))
	_, _, err = env.Client.Restore(ctx, checkpoint.Key{Namespace: "ns", Session: "s2"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.Contains(t, err.Error(), "is missing")
}
