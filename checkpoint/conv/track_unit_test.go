package conv

import (
	"encoding/json"
	"reflect"
	"testing"
)

// What each tracker counts, on a small conversation: turns start at user messages (not at tool
// results), tool errors count by the called tool's name, tokens and cost add up per turn and in
// all, a compaction starts the request view, whose context is the last response's reported tokens
// plus an estimate of what follows it; a count that is not a whole number is named, not guessed.
func TestTrack_Semantics(t *testing.T) {
	in := `[
	{"role":"user","content":"list files","timestamp":1},
	{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{"cmd":"ls"}}],"stopReason":"toolUse",
	 "usage":{"input":100,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":110,"cost":{"total":0.5}}},
	{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"denied"}],"isError":true},
	{"role":"assistant","content":[{"type":"text","text":"It failed."}],"stopReason":"stop",
	 "usage":{"input":120,"output":5,"totalTokens":125,"cost":{"total":0.25}}},
	{"role":"extension","kind":"compaction","data":{"summary":"12345678"}},
	{"role":"user","content":"again"},
	{"role":"assistant","content":[{"type":"text","text":"ok"}],"model":"m2","stopReason":"stop","usage":{"input":1e400,"output":2,"totalTokens":40}},
	{"role":"user","content":"12345678"}
	]`
	c, err := Decode("native", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := Track(c, 1000)
	left := int64(1000 - 42)
	want := Trackers{
		Messages:   8,
		TurnStarts: []int{0, 5, 7},
		Turns: []Turn{
			{Start: 0, Usage: Tokens{Input: 220, Output: 15, Total: 235}, Cost: 0.75, Cumulative: Tokens{Input: 220, Output: 15, Total: 235}, CumulativeCost: 0.75},
			{Start: 5, Usage: Tokens{Output: 2, Total: 40}, Cumulative: Tokens{Input: 220, Output: 17, Total: 275}, CumulativeCost: 0.75},
			{Start: 7, Cumulative: Tokens{Input: 220, Output: 17, Total: 275}, CumulativeCost: 0.75}, // no response yet
		},
		Tools:        map[string]*ToolStats{"bash": {Calls: 1, Errors: 1, ErrorAt: []int{2}}},
		Usage:        Tokens{Input: 220, Output: 17, Total: 275},
		Cost:         0.75,
		Compactions:  []int{4},
		LastResponse: &Response{Index: 6, Model: "m2", StopReason: "stop", Text: "ok", Usage: Tokens{Output: 2, Total: 40}},
		Context:      Context{Start: 4, Tokens: 42, Reported: 40, Estimated: 2, Window: 1000, Left: &left},
		Unread:       []string{"message 6: usage.input 1e400"},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("got  %s\nwant %s", g, w)
	}
	// Nested results (anthropic) pair with their calls the same way.
	a, err := Decode("anthropic", []byte(`[{"role":"user","content":"go"},
	{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{}},{"type":"tool_use","id":"t2","name":"read","input":{}}]},
	{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x","is_error":true},{"type":"tool_result","tool_use_id":"t2","content":"y"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	at := Track(a, 0)
	if s := at.Tools["read"]; s == nil || s.Calls != 2 || s.Errors != 1 || !reflect.DeepEqual(at.TurnStarts, []int{0}) || at.Context.Left != nil {
		t.Fatalf("anthropic: %+v %+v", at.Tools["read"], at)
	}
}

// After a compaction and before any response, the request view's context is the estimate of the
// marker and what follows it: nothing of the responses before it.
func TestTrack_ContextAfterCompaction(t *testing.T) {
	c, err := Decode("native", []byte(`[{"role":"user","content":"hi"},`+
		`{"role":"assistant","content":[{"type":"text","text":"hello"}],"usage":{"input":5000,"output":10,"totalTokens":5010}},`+
		`{"role":"extension","kind":"compaction","data":{"summary":"greeted"}},{"role":"user","content":"12345678"}]`))
	if err != nil {
		t.Fatal(err)
	}
	got := Track(c, 0).Context
	// The marker's data {"summary":"greeted"} is 21 bytes: 6 tokens; "12345678": 2.
	if want := (Context{Start: 2, Tokens: 8, Estimated: 8}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
