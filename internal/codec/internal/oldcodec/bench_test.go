package oldcodec

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/stretchr/testify/require"
)

// BenchmarkParseCorpus_OldAndNew measures codec.ParseLimited before and after session 18's
// rewrite on the corpus files of issue 12's saves (19 KB, 599 KB, 2.3 MB): compact (what json.Marshal
// and JSON.stringify send) and as the files are, with white space (what Python's json.dumps sends).
// MB/s are of the compact size in both.
func BenchmarkParseCorpus_OldAndNew(b *testing.B) {
	for _, name := range []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"} {
		spaced, err := os.ReadFile(filepath.Join("../../../../testdata/corpus", name))
		require.NoError(b, err)
		var compact bytes.Buffer
		require.NoError(b, json.Compact(&compact, spaced))
		for _, in := range []struct {
			form    string
			payload []byte
		}{{"compact", compact.Bytes()}, {"spaced", spaced}} {
			run := func(which string, parse func() error) {
				b.Run(name+"/"+in.form+"/"+which, func(b *testing.B) {
					b.SetBytes(int64(compact.Len()))
					b.ReportAllocs()
					for b.Loop() {
						if err := parse(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			run("old", func() error { _, err := ParseLimited(in.payload, Limits{MaxBytes: 64 << 20}); return err })
			run("new", func() error { _, err := codec.ParseLimited(in.payload, codec.Limits{MaxBytes: 64 << 20}); return err })
		}
	}
}
