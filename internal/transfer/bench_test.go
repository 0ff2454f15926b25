package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// benchConversations are corpus files of three sizes.
var benchConversations = []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"}

func readCorpus(b *testing.B, name string) []byte {
	data, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
	require.NoError(b, err)
	return data
}

// appendTurn returns conv with one more user message, so every save is new content (identical
// content would be de-duplicated and cost nothing to store).
func appendTurn(conv []byte, i int) []byte {
	conv = bytes.TrimRight(conv, " \n\r\t")
	out := append([]byte(nil), conv[:len(conv)-1]...)
	return append(out, fmt.Sprintf(`,{"role":"user","content":"turn %d","timestamp":%d}]`, i, 1700000000000+i)...)
}

// BenchmarkSave measures a whole save as an agent sees it: publish, durable ack, validation,
// versioning, compression, storage, result.
func BenchmarkSave(b *testing.B) {
	for _, name := range benchConversations {
		conv := readCorpus(b, name)
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			ctx := context.Background()
			key := checkpoint.Key{Session: "bench"}
			inputs := make([][]byte, b.N)
			for i := range inputs {
				inputs[i] = appendTurn(conv, i)
			}
			b.SetBytes(int64(len(conv)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := env.Client.Save(ctx, key, inputs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRestore measures restoring the head: get, read in pieces, decompress, verify the hash.
func BenchmarkRestore(b *testing.B) {
	for _, name := range benchConversations {
		conv := readCorpus(b, name)
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			ctx := context.Background()
			key := checkpoint.Key{Session: "bench"}
			_, err := env.Client.Save(ctx, key, conv)
			require.NoError(b, err)
			b.SetBytes(int64(len(conv)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := env.Client.Restore(ctx, key, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
