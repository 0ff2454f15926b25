package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func msgs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
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
