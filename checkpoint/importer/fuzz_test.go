package importer

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/checkpointd/checkpointd/checkpoint/conv"
)

// FuzzImport: whatever file is given, in any format, Import refuses it with a typed error or
// writes a valid native conversation that Export turns back into records; nothing panics.
func FuzzImport(f *testing.F) {
	for i, name := range []string{"pi_before_compaction.jsonl", "claude_code_spotter_258c7280.jsonl", "codex_rollout_codemie.jsonl"} {
		b, _ := os.ReadFile("../../testdata/import/" + name)
		f.Add(uint8(i), bytes.Join(bytes.SplitN(b, []byte("\n"), 6)[:5], []byte("\n")))
	}
	f.Add(uint8(3), []byte(`{"sessionId":"s","messages":[{"type":"user","content":"hi","timestamp":"2025-01-01T00:00:00Z"},{"type":"gemini","content":"","toolCalls":[{"id":"a","name":"n","args":{},"status":"error"}]}]}`))
	f.Add(uint8(4), []byte(`[{"id":1,"source":"user","action":"message","args":{"content":"hi"}},{"id":2,"observation":"error","content":"x"}]`))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		format := Formats[int(which)%len(Formats)]
		r, err := Import(format, data, Options{})
		if err != nil {
			if !errors.Is(err, ErrBadFile) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if _, err := conv.Decode("native", r.Conversation); err != nil {
			t.Fatalf("not native: %v", err)
		}
		if got, _, err := Export(r.Conversation); err != nil || got != format {
			t.Fatalf("export: %s %v", got, err)
		}
	})
}
