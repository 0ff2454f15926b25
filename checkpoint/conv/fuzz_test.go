package conv

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
)

// FuzzDecode: whatever a client sends, in any dialect, Decode either refuses it with codec's typed
// error or maps it; a mapped conversation encodes back to its dialect byte for byte, and to
// every other dialect either validly or with a CarryError; nothing panics.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/dialects/*.json")
	dialects := codec.Dialects()
	for _, file := range files {
		b, _ := os.ReadFile(file)
		d := strings.TrimSuffix(filepath.Base(file), ".json")
		for i, name := range dialects {
			if name == d || (d == "native-serde" && name == "native") {
				f.Add(uint8(i), b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, in []byte) {
		dialect := dialects[int(which)%len(dialects)]
		c, err := Decode(dialect, in)
		if err != nil {
			var ve *codec.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		canon, err := codec.ParseLimited(in, codec.Limits{Dialect: dialect})
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Encode(dialect)
		if err != nil || !bytes.Equal(out, canon.Encode()) {
			t.Fatalf("round trip: %v\n got %s\nwant %s", err, out, canon.Encode())
		}
		for _, to := range dialects { // every view: valid, or a CarryError
			if _, err := c.Encode(to); err != nil {
				var ce *CarryError
				if !errors.As(err, &ce) {
					t.Fatalf("to %s: untyped error %v", to, err)
				}
			}
		}
	})
}
