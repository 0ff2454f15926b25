package checkpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkDecodeResult compares decodeResult (the plain shape read without encoding/json) with
// encoding/json on a single save's result as the daemon writes it.
func BenchmarkDecodeResult(b *testing.B) {
	key := wire.Key{Namespace: "default", Session: "first-openhands_gui_todo_app.json-17", Agent: "main"}
	data, err := json.Marshal(wire.SaveResult{SaveID: "0f1e2d3c4b5a6978", Key: key, OK: true, Received: "sha256:0d5b0f2a1c7f7b0f",
		Version: &wire.Version{Format: wire.VersionFormat, Key: key, Version: 1, Hash: "sha256:0d5b0f2a1c7f7b0f", SaveID: "0f1e2d3c4b5a6978",
			Reason: "save", Created: time.Date(2026, 11, 24, 8, 0, 0, 123456789, time.UTC), RawBytes: 19488, StoredBytes: 4500,
			Counts: wire.Counts{Messages: 40, User: 10, Assistant: 20, ToolResult: 9, Extension: 1, ToolCalls: 12}, Gen: 3}})
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := wire.PlainSaveResult(data); !ok {
		b.Fatalf("%s: not plain", data)
	}
	b.Run("decodeResult", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeResult(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var res wire.SaveResult
			if err := json.Unmarshal(data, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
}
