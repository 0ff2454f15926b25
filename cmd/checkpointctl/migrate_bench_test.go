package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// BenchmarkMigrateAll is `checkpointctl migrate -A` between two local deployments, with one and
// with four sessions in flight: the eight corpus transcripts, each a session of 10 growing
// versions. Each iteration fills a new source (untimed): run it with -benchtime 1x.
func BenchmarkMigrateAll(b *testing.B) {
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(b, err)
	for _, parallel := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			ctx := context.Background()
			var total checkpoint.MigrateProgress
			var elapsed time.Duration
			sessions := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				src, dst := testenv.Start(b), testenv.Start(b)
				var keys []checkpoint.Key
				for _, f := range files {
					data, err := os.ReadFile(f)
					require.NoError(b, err)
					var msgs []json.RawMessage
					require.NoError(b, json.Unmarshal(data, &msgs))
					key := checkpoint.Key{Session: filepath.Base(f)}
					step := max(len(msgs)/10, 1)
					for n := step; n <= len(msgs); n += step {
						body, _ := json.Marshal(msgs[:n])
						_, err := src.Client.Save(ctx, key, body)
						require.NoError(b, err)
					}
					keys = append(keys, key)
				}
				b.StartTimer()
				start := time.Now()
				p, moved, err := migrateAll(ctx, src.Client, dst.Client, keys, checkpoint.MigrateOptions{MovedTo: dst.URL()}, parallel, &progress{})
				elapsed += time.Since(start)
				require.NoError(b, err)
				total.Bytes += p.Bytes
				total.Versions += p.Versions
				sessions += moved
			}
			b.ReportMetric(float64(total.Bytes)/1e6/elapsed.Seconds(), "MB/s")
			b.ReportMetric(float64(sessions)/elapsed.Seconds(), "sessions/s")
			b.ReportMetric(float64(total.Versions)/elapsed.Seconds(), "versions/s")
		})
	}
}
