package snapshot

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

func msgs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestDiff(t *testing.T) {
	ops := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Op+":"+string(rune('0'+c.Index)))
		}
		return out
	}
	require.Empty(t, Diff(msgs("a", "b"), msgs("a", "b")))
	require.Equal(t, []string{"added:2", "added:3"}, ops(Diff(msgs("a", "b"), msgs("a", "b", "c", "d"))))
	require.Equal(t, []string{"changed:1"}, ops(Diff(msgs("a", "b", "c"), msgs("a", "X", "c"))))
	require.Equal(t, []string{"removed:1"}, ops(Diff(msgs("a", "b", "c"), msgs("a", "c"))))
	require.Equal(t, []string{"changed:1", "added:2"}, ops(Diff(msgs("a", "b", "c"), msgs("a", "X", "Y", "c"))))
	d := Diff(msgs("a", "b"), msgs("a", "c"))
	require.Equal(t, "b", string(d[0].Old))
	require.Equal(t, "c", string(d[0].New))
}

func TestView_Apply(t *testing.T) {
	conv := msgs(
		`{"role":"user","content":"0"}`,
		`{"role":"extension","kind":"compaction","data":{"summary":"first"}}`,
		`{"role":"user","content":"2"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"t","name":"n","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"t","content":"r"}`,
		`{"role":"extension","kind":"compaction","data":{"summary":"second"}}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"u","name":"n","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"u","content":"r"}`,
		`{"role":"toolResult","toolCallId":"u2","content":"r"}`,
		`{"role":"user","content":"9"}`,
	)
	require.Len(t, View{}.Apply(conv), 10)
	require.Equal(t, conv[5:], View{Kind: ViewRequest}.Apply(conv), "from the last marker, the marker included")
	// Rolling the compaction back (the marker removed) reaches back to the previous one.
	rolled := append(append([][]byte{}, conv[:5]...), conv[6:]...)
	require.Equal(t, rolled[1:], View{Kind: ViewRequest}.Apply(rolled))
	require.Equal(t, conv[1:3], View{Kind: ViewRequest}.Apply(conv[:3]))
	require.Equal(t, msgs(`{"role":"user","content":"0"}`), View{Kind: ViewRequest}.Apply(conv[:1]), "no marker: everything")

	// Trimmed: 3 rounds down to 2, the last two are a tool result and a user message: the orphaned
	// tool result is dropped.
	require.Equal(t, conv[9:], View{MaxMessages: 3}.Apply(conv))
	require.Equal(t, conv[6:], View{MaxMessages: 4}.Apply(conv), "the call stays with its results")
	require.Equal(t, conv[9:], View{MaxMessages: 2}.Apply(conv))
	require.Equal(t, conv, View{MaxMessages: 100}.Apply(conv))
	require.Equal(t, conv[6:], View{Kind: ViewRequest, MaxMessages: 4}.Apply(conv))

	require.ErrorIs(t, View{Kind: "summary"}.Check(), ErrBadView)
	require.ErrorIs(t, View{MaxMessages: -1}.Check(), ErrBadView)
}

func TestMerge(t *testing.T) {
	got := Merge([]AgentConversation{
		{Agent: "a", Messages: msgs(`{"role":"user","content":"a1","timestamp":10}`, `{"role":"user","content":"a2"}`, `{"role":"user","content":"a3","timestamp":30}`)},
		{Agent: "b", Messages: msgs(`{"role":"user","content":"b1","timestamp":5}`, `{"role":"user","content":"b2","timestamp":10}`, `{"role":"user","content":"b3","timestamp":25}`)},
	}, false)
	var order []string
	for _, m := range got {
		order = append(order, string(m[len(`{"role":"user","content":"`):len(`{"role":"user","content":"`)+2]))
	}
	// a2 has no timestamp: it stays right after a1 (10); at 10 agent a comes first.
	require.Equal(t, []string{"b1", "a1", "a2", "b2", "b3", "a3"}, order)
	require.Contains(t, string(got[0]), `"agentId":"b"`)
}

func TestValueSpans_OpaqueDataAndHugeText(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA+/9=", 2000)           // 56 KB of base64
	text := strings.Repeat(`line of a tool output\n\"quoted\"\t`, 1500)   // 54 KB of text
	huge := strings.Repeat(`a long log line\n`, (TextValueMinBytes/17)+1) // over 1 MiB of text
	raw := []byte(`{"role":"toolResult","content":[{"type":"image","data":"` + b64 + `"},` +
		`{"type":"image","data":"data:image/png;base64,` + b64 + `"},{"type":"text","text":"` + text + `"},` +
		`{"type":"text","text":"` + huge + `"}]}`)
	var got []string
	for _, sp := range valueSpans(raw) {
		got = append(got, string(raw[sp[0]:sp[0]+12]))
	}
	require.Equal(t, []string{`"iVBORw0KGgo`, `"data:image/`, `"a long log `}, got, "the 54 KB of text stays in its segment")
}

func TestRecordIn_FindsAVersionInAnArchive(t *testing.T) {
	var recs []wire.Version
	for n := uint64(3); n <= 40; n++ {
		recs = append(recs, wire.Version{Version: n, Writer: fmt.Sprint("w", n), Hash: "sha256:x"})
	}
	raw, err := json.Marshal(recs)
	require.NoError(t, err)
	for _, n := range []uint64{3, 4, 21, 39, 40} {
		v, ok, err := recordIn(raw, n)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, recs[n-3], v)
	}
	for _, n := range []uint64{1, 2, 41} {
		_, ok, err := recordIn(raw, n)
		require.NoError(t, err)
		require.False(t, ok, "version %d", n)
	}
	_, _, err = recordIn([]byte(`[{"version":"x"}]`), 1)
	require.Error(t, err)
	_, _, err = recordIn([]byte(`{}`), 1)
	require.Error(t, err)
	_, ok, err := recordIn([]byte(`[]`), 1)
	require.NoError(t, err)
	require.False(t, ok)
}
