package transfer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// BenchmarkHandover measures handing a session from one process to another: the owner's Pause
// (final save, release) and the next owner's Resume (acquire, restore the head), as two clients
// on their own connections. The session alternates between them.
func BenchmarkHandover(b *testing.B) {
	for _, name := range benchConversations {
		conv := arrayOf(corpusMessages(b, name))
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			ctx := context.Background()
			key := checkpoint.Key{Session: "handover"}
			clients := [2]*checkpoint.Client{benchClient(b, env, "a"), benchClient(b, env, "b")}
			_, _, lease, err := clients[0].Resume(ctx, key)
			require.NoError(b, err)
			_, err = lease.Save(ctx, conv)
			require.NoError(b, err)
			conv := conv
			b.SetBytes(int64(len(conv)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				conv = turn(conv, "turn", i)
				if _, err := lease.Pause(ctx, conv); err != nil {
					b.Fatal(err)
				}
				var got []byte
				if got, _, lease, err = clients[(i+1)%2].Resume(ctx, key); err != nil {
					b.Fatal(err)
				}
				if len(got) != len(conv) {
					b.Fatalf("resumed %d bytes, paused %d", len(got), len(conv))
				}
			}
		})
	}
}

func benchClient(b *testing.B, env *testenv.Env, name string) *checkpoint.Client {
	c, err := checkpoint.New(env.Conn(), checkpoint.WithWriter(name))
	require.NoError(b, err)
	return c
}

// BenchmarkMigrate moves every corpus transcript, each saved as a session of 10 versions, from one
// local deployment to another: all versions, or only the heads. MB/s counts the conversation bytes
// of the versions copied (each version whole, as restored); sessions/s the sessions moved. Each
// iteration fills a new source (untimed): run it with -benchtime 1x.
func BenchmarkMigrate(b *testing.B) {
	for _, headOnly := range []bool{false, true} {
		b.Run(fmt.Sprintf("headOnly=%v", headOnly), func(b *testing.B) {
			ctx := context.Background()
			var bytes int64
			var sessions, versions int
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				src, dst := testenv.Start(b), testenv.Start(b)
				var keys []checkpoint.Key
				for _, f := range corpusFiles(b) {
					msgs := corpusMessages(b, filepath.Base(f))
					key := checkpoint.Key{Session: filepath.Base(f)}
					step := max(len(msgs)/10, 1)
					for n := step; n <= len(msgs); n += step {
						_, err := src.Client.Save(ctx, key, arrayOf(msgs[:n]))
						require.NoError(b, err)
					}
					keys = append(keys, key)
				}
				b.StartTimer()
				start := time.Now()
				for _, k := range keys {
					p, err := src.Client.Migrate(ctx, dst.Client, k, checkpoint.MigrateOptions{HeadOnly: headOnly, MovedTo: dst.URL()})
					if err != nil {
						b.Fatal(err)
					}
					bytes += p.Bytes
					versions += p.Versions
					sessions++
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(bytes)/1e6/elapsed.Seconds(), "MB/s")
			b.ReportMetric(float64(sessions)/elapsed.Seconds(), "sessions/s")
			b.ReportMetric(float64(versions)/elapsed.Seconds(), "versions/s")
		})
	}
}

// BenchmarkCluster_LeaderFailover reports how long after the node leading CP_INGEST is killed the
// first save started after the kill succeeds, with agents saving continuously (see leaderLoss).
// Each iteration starts its own 3-node cluster: run it with -benchtime 1x -count N.
func BenchmarkCluster_LeaderFailover(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		_, _, recovery := leaderLoss(b)
		total += recovery
	}
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms-to-first-save")
}
