package transfer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
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

// packByHand keeps the daemon from packing by itself: the test packs (packNow).
func packByHand(c *transfer.Config) { c.Engine.PackBytes, c.Engine.PackEntries = 1<<40, 1<<30 }

// packNow packs the session's entries since its last pack, as the daemon does after due saves.
func packNow(t testing.TB, env *testenv.Env, key checkpoint.Key) engine.PackResult {
	k := key.WithDefaults()
	res, err := env.Daemon.Engine.Pack(context.Background(), engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}, true)
	require.NoError(t, err)
	return res
}

// A session checkpointed after every turn stores each message once: every version's StoredBytes is
// only what it added, and every version restores exactly, before and after its entries are packed.
func TestStorage_EachMessageStoredOnce(t *testing.T) {
	env := testenv.Start(t, packByHand) // packed by the test
	ctx := ctxT(t)
	msgs := corpusMessages(t, "claude_code_spotter_258c7280.json")
	ends := turnEnds(t, msgs)
	key := checkpoint.Key{Session: "turns"}
	var added int64
	for _, n := range ends {
		v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
		require.NoError(t, err)
		added += v.StoredBytes
	}
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

	require.Positive(t, packNow(t, env, key).Entries, "the saves were packed")
	after, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Equal(t, hist, after, "history reads the same from the pack")
	for _, i := range []int{0, len(hist) / 2, len(hist) - 2} {
		got, _, err := env.Client.Restore(ctx, key, hist[i].Version)
		require.NoError(t, err, "older versions read from the pack")
		require.Equal(t, string(arrayOf(msgs[:ends[i]])), string(got))
	}
	// The agent carries on after the pack.
	next, err := env.Client.Append(ctx, key, last.Version, []byte(`[{"role":"user","content":"after the pack"}]`))
	require.NoError(t, err)
	after, err = env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, after, len(hist)+1)
	require.Equal(t, next.Version, after[len(after)-1].Version)
	got, _, err := env.Client.Restore(ctx, key, hist[3].Version)
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs[:ends[3]])), string(got))
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
	require.Less(t, v.StoredBytes, int64(len(msgs[80])+len(msgs[81])), "only the two new messages were stored")
	got, _, err := env.Client.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(arrayOf(msgs[:82])), string(got))
}

// Editing or removing a message rewrites the conversation; every version, before and after, restores
// exactly, also once packed.
func TestStorage_RewriteHistoryKeepsEveryVersion(t *testing.T) {
	env := testenv.Start(t, packByHand)
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
	save(arrayOf(edited[:22-2]))
	removed := append(append([]json.RawMessage(nil), edited[:8]...), msgs[20:25]...)
	save(arrayOf(removed))
	save(arrayOf(append(removed, msgs[25:29]...)))

	check := func() {
		for n, conv := range want {
			got, _, err := env.Client.Restore(ctx, key, n)
			require.NoError(t, err, "version %d", n)
			require.Equal(t, string(conv), string(got), "version %d", n)
		}
	}
	check()
	require.Positive(t, packNow(t, env, key).Entries)
	check()
	env.Restart()
	check()
}

// Restores keep succeeding while packs replace the entries they read.
func TestStorage_RestoresDuringPacks(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { packByHand(c); c.CacheBytes = 1 }) // no cache
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
	packed := 0
	head := versions[len(versions)-1]
	for i := 0; i < 20; i++ {
		packed += packNow(t, env, key).Entries
		// Grow the session again so there is something to pack next time.
		v, err := env.Client.Append(ctx, key, head, []byte(fmt.Sprintf(`[{"role":"user","content":"more %d"}]`, i)))
		require.NoError(t, err)
		head = v.Version
		v, err = env.Client.Append(ctx, key, head, []byte(fmt.Sprintf(`[{"role":"user","content":"and more %d"}]`, i)))
		require.NoError(t, err)
		head = v.Version
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, packed, "packs ran under the readers")
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

// Conversations larger than a log entry are stored in parts and read back whole; what
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
	require.Greater(t, len(conv), 3*int(env.NC.MaxPayload()), "larger than three log entries")
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

// storedValues counts the values namespace ns has in CP_LOG (cp.val.<ns>.<id>).
func storedValues(t testing.TB, env *testenv.Env, ns string) int {
	js, err := jetstream.New(env.NC)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), edge.LogStream)
	require.NoError(t, err)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter("cp.val."+wire.EncodeID(ns)+".>"))
	require.NoError(t, err)
	return len(info.State.Subjects)
}

// The same image in several sessions of a namespace, or twice in one conversation, is stored once;
// another namespace stores its own copy; a fork stores it by reference; deleting a session keeps
// what the others use.
func TestStorage_LargeValuesStoredOncePerNamespace(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	img := randomBytes(512 << 10) // its blob fits in one log entry: larger values stay in their save (engine/values.go)
	other := randomBytes(100 << 10)
	a := checkpoint.Key{Namespace: "team", Session: "a"}
	b := checkpoint.Key{Namespace: "team", Session: "b"}
	c := checkpoint.Key{Namespace: "elsewhere", Session: "c"}
	convA := []byte(`[{"role":"user","content":"what is on screen?"},` + imageMessage("s1", img) + `]`)
	convB := []byte(`[{"role":"user","content":"and here, é ü 😀?"},` + imageMessage("s1", img) + `,` + imageMessage("s2", other) + `,` + imageMessage("s3", img) + `]`)

	va, err := env.Client.Save(ctx, a, convA)
	require.NoError(t, err)
	require.Greater(t, va.StoredBytes, int64(512<<10), "the first copy is stored")
	vb, err := env.Client.Save(ctx, b, convB)
	require.NoError(t, err)
	require.Less(t, vb.StoredBytes, int64(140<<10), "the image again is not stored again, only the new one")
	vc, err := env.Client.Save(ctx, c, convA)
	require.NoError(t, err)
	require.Greater(t, vc.StoredBytes, int64(512<<10), "another namespace keeps its own copy")
	require.Equal(t, 2, storedValues(t, env, "team"))
	require.Equal(t, 1, storedValues(t, env, "elsewhere"))

	forked, err := env.Client.Fork(ctx, b, vb.Version, checkpoint.Key{Namespace: "team", Session: "b-fork"})
	require.NoError(t, err)
	require.Less(t, forked.StoredBytes, int64(4<<10), "a fork stores its images by reference")
	for key, want := range map[checkpoint.Key][]byte{a: convA, b: convB, c: convA, {Namespace: "team", Session: "b-fork"}: convB} {
		got, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%v restores byte for byte", key)
	}
	_, err = env.Client.Delete(ctx, a, nil)
	require.NoError(t, err)
	got, _, err := env.Client.Restore(ctx, b, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(convB, got), "b still reads the image a stored first")
	va, err = env.Client.Save(ctx, a, convA)
	require.NoError(t, err)
	require.Less(t, va.StoredBytes, int64(4<<10), "a session saved again finds the image stored")
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

// keyOfEngine is the client's key of an engine key.
func keyOfEngine(k engine.Key) checkpoint.Key {
	return checkpoint.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent}
}
