package transfer_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// benchConversations are corpus files of three sizes.
var benchConversations = []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"}

func readCorpus(b *testing.B, name string) []byte {
	data, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
	require.NoError(b, err)
	return data
}

// BenchmarkSave measures the first save of a whole conversation as an agent sees it: zstd on the
// client, JetStream publish and ack, validation, versioning, compression, storage, the result back.
// Each iteration is a new session, so nothing is shared with an earlier save.
func BenchmarkSave(b *testing.B) {
	for _, name := range benchConversations {
		conv := readCorpus(b, name)
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			ctx := context.Background()
			b.SetBytes(int64(len(conv)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := env.Client.Save(ctx, checkpoint.Key{Session: fmt.Sprint("bench-", i)}, conv); err != nil {
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

// streamBytes is what JetStream stores for the sessions of a deployment (the stream CP_LOG),
// message overhead included.
func streamBytes(b *testing.B, env *testenv.Env) map[string]uint64 {
	js, err := jetstream.New(env.NC)
	require.NoError(b, err)
	s, err := js.Stream(context.Background(), edge.LogStream)
	require.NoError(b, err)
	info, err := s.Info(context.Background())
	require.NoError(b, err)
	return map[string]uint64{edge.LogStream: info.State.Bytes}
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
		env := testenv.Start(b)
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
		packNow(b, env, key)
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
		b.ReportMetric(total(settled), "stored_after_packing_B")
		b.ReportMetric(total(settled)/float64(len(final)), "x_final_zstd")
		b.ReportMetric(float64(wholeCopies), "whole_copies_zstd_B")
		b.ReportMetric(float64(elapsed.Microseconds())/float64(len(ends)), "us/save")
	}
}

// BenchmarkRestore_ManyVersions restores the last ten turn versions of pi_before_compaction.json
// (~2.2 MB each) from a session checkpointed after every turn (484 versions) against ten sessions
// holding the same conversations as their only version: restore cost must not grow with the number
// of versions. The read cache holds one conversation and the benchmark rotates through ten, so
// every restore reads storage. "unpacked" is the session with no pack (every save an entry of its
// own), "packed" after its entries were packed.
func BenchmarkRestore_ManyVersions(b *testing.B) {
	msgs := corpusMessages(b, "pi_before_compaction.json")
	ends := turnEnds(b, msgs)
	lastTen := ends[len(ends)-10:]
	for _, c := range []struct {
		name string
		many bool
		pack bool
	}{
		{"1-version", false, false},
		{"484-versions-unpacked", true, false},
		{"484-versions-packed", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			// A 1 MiB cache: too small for a conversation or a segment, which are assembled and
			// decoded for every restore, but an archive of records stays.
			env := testenv.Start(b, func(cfg *transfer.Config) { cfg.CacheBytes = 1 << 20; packByHand(cfg) })
			ctx := context.Background()
			type target struct {
				key     checkpoint.Key
				version uint64
			}
			var targets []target
			if c.many {
				key := checkpoint.Key{Session: "many"}
				for _, n := range ends {
					v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
					require.NoError(b, err)
					if n >= lastTen[0] {
						targets = append(targets, target{key, v.Version})
					}
				}
				if c.pack {
					packNow(b, env, key)
				}
			} else {
				for i, n := range lastTen {
					key := checkpoint.Key{Session: fmt.Sprintf("one-%d", i)}
					v, err := env.Client.Save(ctx, key, arrayOf(msgs[:n]))
					require.NoError(b, err)
					targets = append(targets, target{key, v.Version})
				}
			}
			b.SetBytes(int64(len(arrayOf(msgs[:lastTen[0]]))))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := targets[i%len(targets)]
				if _, _, err := env.Client.Restore(ctx, t.key, t.version); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSave_TwoMessagesOnto saves 2 appended messages onto a 30 KB and a 3 MB conversation,
// with the append client (only the new messages travel) and the whole-array client (the whole
// array travels; the daemon recognises the prefix it has). "whole-raw" publishes the canonical
// array uncompressed, as a client in another language that only knows its array would.
func BenchmarkSave_TwoMessagesOnto(b *testing.B) {
	msgs := append(corpusMessages(b, "pi_before_compaction.json"), corpusMessages(b, "pi_large_session.json")...)
	sizeAt := func(target int) int {
		n, total := 0, 0
		for n < len(msgs) && total < target {
			total += len(msgs[n]) + 1
			n++
		}
		return n
	}
	for _, base := range []struct {
		name string
		n    int
	}{{"30KB", sizeAt(30_000)}, {"3MB", sizeAt(3_000_000)}} {
		for _, client := range []string{"append", "whole-sdk", "whole-raw"} {
			b.Run(base.name+"/"+client, func(b *testing.B) {
				env := testenv.Start(b)
				ctx := context.Background()
				key := checkpoint.Key{Session: "s"}
				conv := append([]json.RawMessage(nil), msgs[:base.n]...)
				v, err := env.Client.Save(ctx, key, arrayOf(conv))
				require.NoError(b, err)
				baseBytes := len(arrayOf(conv))
				raw := rawPublisher(b, env)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					two := []json.RawMessage{
						json.RawMessage(fmt.Sprintf(`{"role":"user","content":"question %d","timestamp":%d}`, i, 1700000000000+i)),
						json.RawMessage(fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"answer %d"}],"stopReason":"stop","model":"m","provider":"p","usage":{"input":1,"output":1,"totalTokens":2},"timestamp":%d}`, i, 1700000000001+i)),
					}
					conv = append(conv, two...)
					// Building the array is the application's own work, not the save's.
					b.StopTimer()
					body := arrayOf(conv)
					if client == "append" {
						body = arrayOf(two)
					}
					b.StartTimer()
					switch client {
					case "append":
						v, err = env.Client.Append(ctx, key, v.Version, body)
					case "whole-sdk":
						v, err = env.Client.Save(ctx, key, body)
					case "whole-raw":
						err = raw(ctx, key, body, i)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(baseBytes), "base_B")
			})
		}
	}
}

// rawPublisher saves the way a minimal client in another language would (docs/protocol.md §4):
// subscribe to the result, JetStream-publish the canonical array uncompressed (in chunks past
// max_payload), wait for the result.
func rawPublisher(b *testing.B, env *testenv.Env) func(context.Context, checkpoint.Key, []byte, int) error {
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	limit := int(nc.MaxPayload()) - 16*1024
	return func(ctx context.Context, key checkpoint.Key, body []byte, i int) error {
		k := key.WithDefaults()
		id := fmt.Sprintf("raw-%d", i)
		sub, err := nc.SubscribeSync(wire.ResultSubject(k.Namespace, id))
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		m := nats.NewMsg(wire.IngestSubject(k))
		m.Header.Set(wire.HdrSaveID, id)
		if len(body) > limit {
			n := 0
			for off := 0; off < len(body); off += limit {
				c := nats.NewMsg(wire.ChunkSubject(k.Namespace, id))
				c.Header.Set(wire.HdrChunk, strconv.Itoa(n))
				c.Data = body[off:min(off+limit, len(body))]
				if _, err := js.PublishMsg(ctx, c); err != nil {
					return err
				}
				n++
			}
			m.Header.Set(wire.HdrChunks, strconv.Itoa(n))
		} else {
			m.Data = body
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return err
		}
		res, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return err
		}
		var sr wire.SaveResult
		if err := json.Unmarshal(res.Data, &sr); err != nil || sr.Error != nil {
			return fmt.Errorf("save refused: %v %+v", err, sr.Error)
		}
		return nil
	}
}

// BenchmarkStorage_SharedImages saves ten sessions of one namespace that show the same eight
// screenshots (150 KiB each, base64 inline) around their own conversation and two screenshots of
// their own, every session after every turn, and reports what storage holds against the same
// sessions each in its own namespace (where nothing is shared). Run it with -benchtime 1x.
func BenchmarkStorage_SharedImages(b *testing.B) {
	msgs := corpusMessages(b, "openhands_gui_todo_app.json")
	shot := func() []byte {
		img := make([]byte, 150<<10)
		_, _ = rand.Read(img)
		return img
	}
	var shared [8][]byte
	for i := range shared {
		shared[i] = shot()
	}
	const sessions = 10
	conversation := func(s int) []json.RawMessage {
		var conv []json.RawMessage
		for i, m := range msgs {
			conv = append(conv, m)
			if i%2 == 1 && i/2 < len(shared) {
				conv = append(conv, json.RawMessage(imageMessage(fmt.Sprint("shared", i), shared[i/2])))
			}
		}
		for j := 0; j < 2; j++ {
			conv = append(conv, json.RawMessage(imageMessage(fmt.Sprint("own", s, j), shot())))
		}
		return conv
	}
	convs := make([][]json.RawMessage, sessions)
	for s := range convs {
		convs[s] = conversation(s)
	}
	for i := 0; i < b.N; i++ {
		stored := map[bool]float64{}
		for _, oneNamespace := range []bool{true, false} {
			env := testenv.Start(b)
			ctx := context.Background()
			var keys []checkpoint.Key
			for s, conv := range convs {
				key := checkpoint.Key{Namespace: "team", Session: fmt.Sprint("s", s)}
				if !oneNamespace {
					key.Namespace = fmt.Sprint("team-", s)
				}
				keys = append(keys, key)
				for _, n := range turnEnds(b, conv) {
					if _, err := env.Client.Save(ctx, key, arrayOf(conv[:n])); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := env.Client.Save(ctx, key, arrayOf(conv)); err != nil {
					b.Fatal(err)
				}
			}
			for _, key := range keys {
				packNow(b, env, key)
			}
			for bucket, v := range streamBytes(b, env) {
				stored[oneNamespace] += float64(v)
				if oneNamespace {
					b.ReportMetric(float64(v), bucket+"_B")
				}
			}
		}
		raw, images := 0, map[string]bool{}
		for _, conv := range convs {
			raw += len(arrayOf(conv))
			for _, m := range conv {
				if strings.Contains(string(m), `"type":"image"`) {
					images[string(m[len(m)-200:])] = true
				}
			}
		}
		b.ReportMetric(float64(len(images)), "distinct_images")
		b.ReportMetric(float64(raw), "final_conversations_B")
		b.ReportMetric(stored[true], "stored_one_namespace_B")
		b.ReportMetric(stored[false], "stored_own_namespaces_B")
		b.ReportMetric(stored[false]/stored[true], "x_saved")
	}
}

// BenchmarkRestore_LargeAtOnce restores conversations larger than the read cache, each in many
// pieces, by one reader and by four readers at once (each its own session): a read's pieces must
// cost one assembly, however many other large reads interleave with them.
func BenchmarkRestore_LargeAtOnce(b *testing.B) {
	msgs := corpusMessages(b, "pi_before_compaction.json")
	conv := func(r int) []byte { // each session its own conversation: nothing shared in the cache
		return arrayOf(append(msgs[:len(msgs):len(msgs)], json.RawMessage(fmt.Sprintf(`{"role":"user","content":"reader %d"}`, r))))
	}
	for _, readers := range []int{1, 4} {
		b.Run(fmt.Sprintf("%d-readers", readers), func(b *testing.B) {
			// 2.3 MB conversations, a 1 MiB cache and 256 KiB replies: 9 pieces a restore.
			env := testenv.StartWithMaxPayload(b, 256<<10, func(cfg *transfer.Config) { cfg.CacheBytes = 1 << 20 })
			ctx := context.Background()
			for r := range readers {
				_, err := env.Client.Save(ctx, checkpoint.Key{Session: fmt.Sprint("s", r)}, conv(r))
				require.NoError(b, err)
			}
			size := len(conv(0))
			b.SetBytes(int64(size))
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := r; i < b.N; i += readers {
						got, _, err := env.Client.Restore(ctx, checkpoint.Key{Session: fmt.Sprint("s", r)}, 0)
						if err != nil || len(got) != size {
							b.Errorf("restore: %v (%d bytes)", err, len(got))
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkRestore_VsDirectGet restores the head of three corpus conversations (19 KB, 598 KB,
// 2.3 MB) through the SDK (get, then read in pieces, decode, verify) and, interleaved with it on
// the same server and the same client connection, does what the parts alone do with the same
// conversation: one direct get of zstd(conversation) from a plain stream, then a zstd decode. It
// reports the p50 of each and their ratio (restore-p50 / floor-p50, the figure the target of
// issue 12 is about: ≤ 1.5), the ratio to the floor plus the SHA-256 of the conversation (which a
// restore must check, docs/protocol.md §5, and the floor does not), and the bytes the read moved
// over NATS. get-p50 is the p50 of the restore's first request alone (the version record).
func BenchmarkRestore_VsDirectGet(b *testing.B) {
	for _, name := range benchConversations {
		conv := readCorpus(b, name)
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			ctx := context.Background()
			key := checkpoint.Key{Session: "bench"}
			_, err := env.Client.Save(ctx, key, conv)
			require.NoError(b, err)
			canonical, _, err := env.Client.Restore(ctx, key, 0)
			require.NoError(b, err)
			floor := directGetFloor(b, env, canonical)
			moved := readBytesMoved(b, env, func() {
				_, _, err := env.Client.Restore(ctx, key, 0)
				require.NoError(b, err)
			})
			restore := make([]time.Duration, 0, b.N)
			raw := make([]time.Duration, 0, b.N)
			hashed := make([]time.Duration, 0, b.N)
			gets := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(canonical)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, _, err := env.Client.Restore(ctx, key, 0); err != nil {
					b.Fatal(err)
				}
				restore = append(restore, time.Since(start))
				start = time.Now()
				got := floor()
				raw = append(raw, time.Since(start))
				_ = wire.Hash(got)
				hashed = append(hashed, time.Since(start))
				start = time.Now()
				if _, err := env.Client.Get(ctx, key, 0); err != nil {
					b.Fatal(err)
				}
				gets = append(gets, time.Since(start))
			}
			b.StopTimer()
			r, f := p50(restore), p50(raw)
			b.ReportMetric(float64(r.Microseconds())/1000, "restore-p50-ms")
			b.ReportMetric(float64(f.Microseconds())/1000, "floor-p50-ms")
			b.ReportMetric(float64(r)/float64(f), "ratio")
			b.ReportMetric(float64(r)/float64(p50(hashed)), "ratio-to-floor+sha256")
			b.ReportMetric(float64(p50(gets).Microseconds())/1000, "get-p50-ms") // the first of a restore's two requests
			b.ReportMetric(float64(moved), "read-bytes")
		})
	}
}

// directGetFloor stores zstd(canonical) (default level, as the SDK compresses a save) in a plain
// stream of its own on env's server, and returns what reading it back costs at the least: a direct
// get by subject over the test client's connection, then a zstd decode straight into a buffer of the
// right size (a plain decoder's DecodeAll, faster than the SDK's bounded stream decoding), checked.
func directGetFloor(b *testing.B, env *testenv.Env, canonical []byte) func() []byte {
	ctx := context.Background()
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_FLOOR", Subjects: []string{"bench.floor.>"}, AllowDirect: true})
	require.NoError(b, err)
	_, err = js.Publish(ctx, "bench.floor.conv", codec.CompressZstd(canonical))
	require.NoError(b, err)
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	require.NoError(b, err)
	b.Cleanup(dec.Close)
	return func() []byte {
		m, err := s.GetLastMsgForSubject(ctx, "bench.floor.conv")
		if err != nil {
			b.Fatal(err)
		}
		got, err := dec.DecodeAll(m.Data, make([]byte, 0, len(canonical)))
		if err != nil || len(got) != len(canonical) {
			b.Fatalf("floor: %v (%d bytes)", err, len(got))
		}
		return got
	}
}

// readBytesMoved counts the bytes of the read replies (bodies) delivered to the client while f runs.
func readBytesMoved(b *testing.B, env *testenv.Env, f func()) int64 {
	nc := env.Conn()
	var mu sync.Mutex
	var n int64
	sub, err := nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if m.Header.Get(wire.HdrTotal) != "" {
			mu.Lock()
			n += int64(len(m.Data))
			mu.Unlock()
		}
	})
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	f()
	require.NoError(b, nc.Flush())
	time.Sleep(20 * time.Millisecond) // let the last reply reach this subscriber too
	require.NoError(b, sub.Unsubscribe())
	mu.Lock()
	defer mu.Unlock()
	return n
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkRestore_FirstRead is BenchmarkRestore_VsDirectGet for the restore an agent resuming a
// session makes: of a head no read has asked for before (each iteration saves a session of its
// own, the conversation with one message of its own at the end, untimed), so nothing of it is in the
// daemon's read cache, against the same floor. A session saved once is held by its last entry
// alone: the daemon reads that entry once, for the head's record and its body (docs/format.md
// §8.15d).
func BenchmarkRestore_FirstRead(b *testing.B) {
	for _, name := range benchConversations {
		b.Run(name, func(b *testing.B) {
			msgs := corpusMessages(b, name)
			env := testenv.Start(b)
			ctx := context.Background()
			floor := directGetFloor(b, env, arrayOf(msgs))
			restore := make([]time.Duration, 0, b.N)
			raw := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				key := checkpoint.Key{Session: fmt.Sprintf("first-%d", i)}
				own := json.RawMessage(fmt.Sprintf(`{"role":"user","content":%q}`, key.Session))
				if _, err := env.Client.Save(ctx, key, arrayOf(append(slices.Clone(msgs), own))); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if _, _, err := env.Client.Restore(ctx, key, 0); err != nil {
					b.Fatal(err)
				}
				restore = append(restore, time.Since(start))
				start = time.Now()
				floor()
				raw = append(raw, time.Since(start))
			}
			b.StopTimer()
			r, f := p50(restore), p50(raw)
			b.ReportMetric(float64(r.Microseconds())/1000, "restore-p50-ms")
			b.ReportMetric(float64(f.Microseconds())/1000, "floor-p50-ms")
			b.ReportMetric(float64(r)/float64(f), "ratio")
		})
	}
}
