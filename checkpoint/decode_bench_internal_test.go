package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkDecode measures what a restore costs on the client once the body has arrived, on corpus
// files of three sizes compressed as a save compresses them, three ways interleaved in one loop (the
// machine is shared: a ratio taken in one run is what can be compared):
//   - decode: the SDK's (bounded stream decoding, the SHA-256 of the output hashed beside it);
//   - serial: the same decoding with the hash after it;
//   - floor: a plain decoder's DecodeAll and no hash (checkpointbench's "direct get + zstd decode").
//
// It reports the p50 of each and decode's ratio to the other two.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"} {
		conv, err := os.ReadFile(filepath.Join("../testdata/corpus", name))
		if err != nil {
			b.Fatal(err)
		}
		body := codec.CompressZstd(conv)
		reply := readReply{total: int64(len(body)), raw: int64(len(conv)), encoding: wire.EncodingZstd, hash: wire.Hash(conv)}
		plain, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			b.Fatal(err)
		}
		defer plain.Close()
		ways := []struct {
			name string
			run  func() ([]byte, string, error)
		}{
			{"decode", func() ([]byte, string, error) { return decode(body, reply, Version{}) }},
			{"serial", func() ([]byte, string, error) {
				raw, err := codec.DecompressExact(body, reply.raw, nil)
				return raw, wire.Hash(raw), err
			}},
			{"floor", func() ([]byte, string, error) {
				raw, err := plain.DecodeAll(body, nil)
				return raw, reply.hash, err
			}},
		}
		b.Run(name, func(b *testing.B) {
			took := make([][]time.Duration, len(ways))
			b.SetBytes(int64(len(conv)))
			for b.Loop() {
				for i, w := range ways {
					start := time.Now()
					raw, hash, err := w.run()
					took[i] = append(took[i], time.Since(start))
					if err != nil || len(raw) != len(conv) || hash != reply.hash {
						b.Fatalf("%s: %v: %d bytes of hash %s, want %d of %s", w.name, err, len(raw), hash, len(conv), reply.hash)
					}
				}
			}
			p := make([]float64, len(ways))
			for i, w := range ways {
				p[i] = float64(median(took[i]))
				b.ReportMetric(p[i]/1e3, w.name+"-p50-µs")
			}
			b.ReportMetric(p[0]/p[1], "decode/serial")
			b.ReportMetric(p[0]/p[2], "decode/floor")
		})
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
