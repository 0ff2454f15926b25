package transfer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
)

// BenchmarkNamespaceKeys measures what --namespace-keys costs a save and an uncached restore of
// the corpus: the same operations with and without sealing, side by side in one run.
func BenchmarkNamespaceKeys(b *testing.B) {
	keys := namespaceKeys(b, map[string]any{"*": newNamespaceKey(b)})
	for _, name := range benchConversations {
		conv := readCorpus(b, name)
		for _, mode := range []struct {
			name string
			keys *sealing.Keys
		}{{"plain", nil}, {"sealed", keys}} {
			start := func(b *testing.B) *testenv.Env {
				// No read cache: every restore reads, opens and decodes its segments.
				return testenv.Start(b, func(c *transfer.Config) { c.NamespaceKeys, c.CacheBytes = mode.keys, 1 })
			}
			b.Run("save/"+name+"/"+mode.name, func(b *testing.B) {
				env := start(b)
				ctx := context.Background()
				b.SetBytes(int64(len(conv)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := env.Client.Save(ctx, checkpoint.Key{Session: fmt.Sprint("bench-", i)}, conv); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("restore/"+name+"/"+mode.name, func(b *testing.B) {
				env := start(b)
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
}
