package ingest

import (
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkSingleSaveReply compares the two ways of writing a single save's reply (answer): the
// same bytes (TestAppendResult_WritesWhatEncodingJSONWrites).
func BenchmarkSingleSaveReply(b *testing.B) {
	res := sampleResult("0f1e2d3c4b5a6978", 12, time.Date(2026, 11, 24, 8, 0, 0, 123456789, time.UTC))
	b.Run("appendResult", func(b *testing.B) {
		for b.Loop() {
			_ = appendResult(make([]byte, 0, 1024), res)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(res); err != nil {
				b.Fatal(err)
			}
		}
	})
}
