package conv

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// canonical is what the daemon stores for b: its compact form.
func canonical(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func roundTrip(t *testing.T, dialect string, in []byte) *Conversation {
	t.Helper()
	c, err := Decode(dialect, in)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	out, err := c.Encode(dialect)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if want := canonical(t, in); !bytes.Equal(out, want) {
		t.Fatalf("round trip differs at byte %d:\n got %.200s\nwant %.200s", firstDiff(out, want), out[firstDiff(out, want):], want[firstDiff(out, want):])
	}
	return c
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Every dialect fixture decodes into the model and encodes back to its dialect byte for byte.
func TestRoundTripDialectFixtures(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/dialects/*.json")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		dialect := strings.TrimSuffix(filepath.Base(f), ".json")
		if dialect == "native-serde" {
			dialect = "native"
		}
		t.Run(dialect, func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, dialect, in)
		})
	}
}

// Every native transcript of the corpus round-trips byte for byte through the typed model, with
// the messages decoded as native (not only kept as raw bytes).
func TestRoundTripCorpus(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/corpus/*.json")
	if len(files) == 0 {
		t.Fatal("no corpus")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c := roundTrip(t, "native", in)
			for i, m := range c.Messages {
				if m.Role == "" {
					t.Fatalf("message %d: no role decoded", i)
				}
			}
		})
	}
}
