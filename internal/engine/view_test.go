package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// dialectMessages parses a fixture of testdata/dialects and returns its canonical messages.
func dialectMessages(t *testing.T, dialect string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../testdata/dialects", dialect+".json"))
	require.NoError(t, err)
	return parsed(t, dialect, data)
}

func parsed(t *testing.T, dialect string, data []byte) [][]byte {
	t.Helper()
	c, err := codec.ParseLimited(data, codec.Limits{Dialect: dialect})
	require.NoError(t, err)
	msgs := make([][]byte, len(c.Messages))
	for i, m := range c.Messages {
		msgs[i] = m
	}
	return msgs
}

// Views cut every dialect by its own rules: the instructions at the start stay in front, the
// request view starts at the dialect's compaction marker, and maxMessages never starts with a
// message holding only tool results (openai-chat's tool, openai-responses' function_call_output,
// swift-agent's and anthropic's user messages of tool results).
func TestView_ApplyKnowsEveryDialect(t *testing.T) {
	for _, tc := range []struct {
		dialect string
		msgs    [][]byte // nil: the fixture
		view    View
		want    []int // indexes into the messages
	}{
		{dialect: "openai-chat", view: View{MaxMessages: 2}, want: []int{0, 1, 6}},
		{dialect: "openai-chat", view: View{MaxMessages: 4}, want: []int{0, 1, 3, 4, 5, 6}},
		{dialect: "openai-chat", view: View{Kind: ViewRequest}, want: []int{0, 1, 2, 3, 4, 5, 6}},
		{dialect: "openai-responses", view: View{MaxMessages: 2}, want: []int{0, 5}},
		{dialect: "swift-agent", view: View{MaxMessages: 2}, want: []int{3}},
		{dialect: "antigravity", view: View{Kind: ViewRequest}, want: []int{0, 3, 4, 5}},
		{dialect: "antigravity", view: View{Kind: ViewRequest, MaxMessages: 2}, want: []int{0, 4, 5}},
		{dialect: "anthropic", view: View{MaxMessages: 2}, msgs: parsed(t, "anthropic", []byte(`[
			{"role":"user","content":"weather?"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"w","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"22C"}]},
			{"role":"assistant","content":"22C"}]`)), want: []int{3}},
		{dialect: "openai-responses", view: View{Kind: ViewRequest}, msgs: parsed(t, "openai-responses", []byte(`[
			{"role":"developer","content":"be brief"},
			{"role":"user","content":"a"},
			{"type":"compaction","encrypted_content":"gAAAA"},
			{"type":"compaction_trigger"},
			{"role":"user","content":"b"}]`)), want: []int{0, 2, 3, 4}},
		{dialect: "native", view: View{Kind: ViewRequest}, msgs: parsed(t, "", []byte(`[
			{"role":"user","content":"a"},
			{"role":"extension","kind":"compaction","data":{}},
			{"role":"user","content":"b"}]`)), want: []int{1, 2}},
	} {
		msgs := tc.msgs
		if msgs == nil {
			msgs = dialectMessages(t, tc.dialect)
		}
		var want [][]byte
		for _, i := range tc.want {
			want = append(want, msgs[i])
		}
		tc.view.Dialect = tc.dialect
		require.Equal(t, string(Encode(want)), string(Encode(tc.view.Apply(msgs))), "%s %+v", tc.dialect, tc.view)
	}
}

// Classify tells the classes apart in each dialect's fixture.
func TestClassify_Fixtures(t *testing.T) {
	classes := func(dialect string) []codec.Class {
		var out []codec.Class
		for _, m := range dialectMessages(t, dialect) {
			out = append(out, codec.Classify(dialect, m))
		}
		return out
	}
	const o, s, r, c = codec.ClassOther, codec.ClassSystem, codec.ClassToolResult, codec.ClassCompaction
	require.Equal(t, []codec.Class{s, s, o, o, r, r, o}, classes("openai-chat"))
	require.Equal(t, []codec.Class{s, o, o, r, o, o}, classes("anthropic"))
	require.Equal(t, []codec.Class{s, o, o, c, o, o}, classes("antigravity"))
	require.Equal(t, []codec.Class{o, o, r, o}, classes("swift-agent"))
	require.Equal(t, []codec.Class{s, o, o, o, r, o}, classes("openai-responses"))
	require.Equal(t, codec.ClassOther, codec.Classify("openai-chat", []byte(`{"role":`)), "not JSON: no class, no panic")
	require.Equal(t, codec.ClassOther, codec.Classify("no-such-dialect", []byte(`{"role":"system"}`)))
}
