package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
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

// streamBytes is what JetStream stores for the buckets of a deployment, message overhead included.
func streamBytes(b *testing.B, env *testenv.Env) map[string]uint64 {
	js, err := jetstream.New(env.NC)
	require.NoError(b, err)
	out := map[string]uint64{}
	for _, bucket := range []string{wire.BucketHeads, wire.BucketVersion, wire.BucketLayouts, wire.BucketSegment} {
		s, err := js.Stream(context.Background(), "KV_"+bucket)
		require.NoError(b, err)
		info, err := s.Info(context.Background())
		require.NoError(b, err)
		out[bucket] = info.State.Bytes
	}
	return out
}

// BenchmarkStorage_CheckpointEveryTurn saves pi_before_compaction.json after every assistant turn
// (484 versions) with the whole-array client and reports what storage holds, against the zstd size
// of the final conversation alone and what storing every version whole would cost. Run it with
// -benchtime 1x: one iteration is the whole session.
func BenchmarkStorage_CheckpointEveryTurn(b *testing.B) {
	msgs := corpusMessages(b, "pi_before_compaction.json")
	ends := turnEnds(b, msgs)
	final := codec.CompressZstd(arrayOf(msgs))
	for i := 0; i < b.N; i++ {
		env := testenv.Start(b, func(c *transfer.Config) { c.CompactIdle = 300 * time.Millisecond })
		ctx := context.Background()
		key := checkpoint.Key{Session: "every-turn"}
		var wholeCopies int64
		start := time.Now()
		for _, n := range ends {
			conv := arrayOf(msgs[:n])
			if _, err := env.Client.Save(ctx, key, conv); err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				wholeCopies += int64(len(codec.CompressZstd(conv)))
			}
		}
		elapsed := time.Since(start)
		written := streamBytes(b, env)
		waitCompacted(b, env, key, 1)
		waitArchived(b, env, key)
		settled := streamBytes(b, env)
		total := func(m map[string]uint64) float64 {
			t := uint64(0)
			for _, v := range m {
				t += v
			}
			return float64(t)
		}
		b.ReportMetric(float64(len(ends)), "versions")
		b.ReportMetric(float64(len(final)), "final_zstd_B")
		b.ReportMetric(total(written), "stored_after_writing_B")
		b.ReportMetric(total(settled), "stored_after_merging_B")
		b.ReportMetric(float64(settled[wire.BucketSegment]), "segments_B")
		b.ReportMetric(float64(settled[wire.BucketVersion]), "version_records_B")
		b.ReportMetric(float64(settled[wire.BucketHeads]), "head_B")
		b.ReportMetric(total(settled)/float64(len(final)), "x_final_zstd")
		b.ReportMetric(float64(wholeCopies), "whole_copies_zstd_B")
		b.ReportMetric(float64(elapsed.Microseconds())/float64(len(ends)), "us/save")
	}
}
