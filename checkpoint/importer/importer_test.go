package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/checkpoint/conv"
)

// The real session file of each runtime (testdata/import, SOURCES.md there), the messages its
// import must give, and how many of them are user, assistant and tool result messages: each
// figure follows from the file (see the comments), so a record lost or mapped twice shows.
var files = []struct {
	format, file string
	row          int
	messages     int
	roles        map[string]int
}{
	// 1003 entries, one message each: 55 user, 484 assistant, 448 toolResult messages; the session
	// header, 5 model and 5 thinking level changes, 3 bashExecution messages and 2 compactions kept.
	{"pi", "pi_before_compaction.jsonl", 0, 1003, map[string]int{"user": 55, "assistant": 484, "toolResult": 448, "extension": 16}},
	// 1863 lines: 192 user records (6 prompts, 186 tool results), 299 assistant lines streaming 171
	// runs of one response id (no user record between), 1372 other records (progress, snapshots,
	// queue operations, system records) kept: 6 + 186 + 171 + 1372 = 1735.
	{"claude-code", "claude_code_spotter_258c7280.jsonl", 0, 1735, map[string]int{"user": 6, "assistant": 171, "toolResult": 186, "extension": 1372}},
	// 386 lines, one message each: 249 response items (16 user and assistant messages, 25
	// reasoning items and 99 function calls as assistant messages, 99 outputs; the developer
	// message is a system_prompt; custom and hosted tool calls kept), 137 other records kept.
	{"codex", "codex_rollout_codemie.jsonl", 0, 386, map[string]int{"user": 3, "assistant": 137, "toolResult": 99, "extension": 147}},
	// The session header, then 14 messages (3 user, 11 gemini) and a toolResult after the gemini
	// message for each of its 10 tool calls: 1 + 14 + 10 = 25.
	{"gemini-cli", "gemini_cli_codemie_session.json", 0, 25, map[string]int{"user": 3, "assistant": 11, "toolResult": 10, "extension": 1}},
	// 18 events: a user message, 4 tool calls and an agent message, 4 observations answering the
	// calls, 8 state changes and null observations kept.
	{"openhands", "openhands_gui_todo_app.json", 0, 18, map[string]int{"user": 1, "assistant": 5, "toolResult": 4, "extension": 8}},
	// Row 2 of an evaluation output: its header (instance, metadata, metrics, ...) and 103 events:
	// the system prompt, the task and an error the agent was told of (user), 49 tool calls and their
	// 49 observations, 2 recall events kept.
	{"openhands", "openhands_multi_swe_bench.jsonl", 2, 104, map[string]int{"user": 2, "assistant": 49, "toolResult": 49, "extension": 4}},
}

// Each real file imports into a valid native conversation with the expected messages, and Export
// gives every record of the file back, every member and value as it came (the round trip).
func TestImport_RealFiles(t *testing.T) {
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			data, err := os.ReadFile("../../testdata/import/" + f.file)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Import(f.format, data, Options{Row: f.row})
			if err != nil {
				t.Fatal(err)
			}
			c, err := conv.Decode("native", r.Conversation)
			if err != nil {
				t.Fatal(err)
			}
			roles := map[string]int{}
			for _, m := range c.Messages {
				roles[string(m.Role)]++
			}
			if len(c.Messages) != f.messages || r.Messages != f.messages || !reflect.DeepEqual(roles, f.roles) {
				t.Fatalf("%d messages by role %v, want %d: %v", len(c.Messages), roles, f.messages, f.roles)
			}
			format, back, err := Export(r.Conversation)
			if err != nil || format != f.format {
				t.Fatalf("export: %s, %v", format, err)
			}
			want := data
			if f.row > 0 {
				want = bytes.Split(bytes.TrimSpace(data), []byte("\n"))[f.row]
			}
			requireSameRecords(t, want, back)
		})
	}
}

// requireSameRecords compares two files record by record (a JSON Lines line, or the whole JSON
// document) as JSON values: numbers as written, every member.
func requireSameRecords(t *testing.T, want, got []byte) {
	t.Helper()
	w, g := records(t, want), records(t, got)
	if len(w) != len(g) {
		t.Fatalf("%d records back, want %d", len(g), len(w))
	}
	for i := range w {
		if !reflect.DeepEqual(w[i], g[i]) {
			wb, _ := json.Marshal(w[i])
			gb, _ := json.Marshal(g[i])
			t.Fatalf("record %d differs:\n got %.400s\nwant %.400s", i, gb, wb)
		}
	}
}

func records(t *testing.T, b []byte) []any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out []any
	for {
		var v any
		if err := d.Decode(&v); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatal(err)
		}
		out = append(out, v)
	}
}

// What a file of another shape, an unknown format or a row out of range gets: a typed error.
func TestImport_Refuses(t *testing.T) {
	cases := []struct {
		format, data string
		want         error
	}{
		{"claude", `{}`, ErrUnknownFormat},
		{"pi", `not json`, ErrBadFile},
		{"pi", ``, ErrBadFile},
		{"gemini-cli", `[1,2]`, ErrBadFile},
		{"openhands", `{"history":[]}` + "\n", nil},
		{"openhands", `{"history":[]}` + "\n", ErrBadFile}, // row 1 of 1
	}
	for i, tc := range cases {
		_, err := Import(tc.format, []byte(tc.data), Options{Row: i - 4})
		if tc.want == nil {
			if err != nil {
				t.Errorf("%d: %v", i, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s %q: got %v, want %v", i, tc.format, tc.data, err, tc.want)
		}
	}
	if _, _, err := Export([]byte(`[{"role":"user","content":"typed by hand"}]`)); !errors.Is(err, ErrBadFile) ||
		!strings.Contains(err.Error(), "message 0") {
		t.Fatalf("export of a conversation not imported: %v", err)
	}
}

// Codex keeps usage in token_count events and the model in turn_context: the assistant messages
// get them (the last one before each event its last_token_usage), so the trackers of an imported
// rollout count its tokens. The rollout's events total 6,064,954 tokens; 124,815 of them are of
// responses kept as extensions (custom and hosted tool calls), which the events keep.
func TestImport_CodexUsageAndModel(t *testing.T) {
	data, err := os.ReadFile("../../testdata/import/codex_rollout_codemie.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Import("codex", data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conv.Decode("native", r.Conversation)
	if err != nil {
		t.Fatal(err)
	}
	tr := conv.Track(c, 0)
	if tr.Usage.Total != 6064954-124815 || tr.LastResponse == nil || tr.LastResponse.Model != "gpt-5.5" {
		t.Fatalf("usage %+v, last response %+v", tr.Usage, tr.LastResponse)
	}
}
