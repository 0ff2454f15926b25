package logstore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The benchmarks below print the figures of docs/format.md §8, each run once:
//
//	go test -run '^$' -bench . -benchtime 1x ./internal/logstore/
//
// The workload is the real corpus (testdata/corpus/pi_before_compaction.json, 1,003 messages)
// saved after every assistant turn: 485 saves, each adding what grew. CP_BENCH_PACE (a Go
// duration, default 0) paces the saves of the disk benchmark as an agent would; CP_BENCH_DISK
// runs only its policies whose name contains it.

// corpus is the conversation and its saves: save i adds messages cuts[i-1]..cuts[i]-1.
type corpus struct {
	conv *codec.Conversation
	cuts []int
}

func loadCorpus(b *testing.B) corpus {
	b.Helper()
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		b.Fatal(err)
	}
	c, err := codec.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	var cuts []int
	for i, m := range c.Messages {
		if codec.MessageRole(m) == "assistant" {
			cuts = append(cuts, i+1)
		}
	}
	if cuts[len(cuts)-1] != len(c.Messages) {
		cuts = append(cuts, len(c.Messages))
	}
	return corpus{conv: c, cuts: cuts}
}

// save returns the messages save i adds, and the JSON array a client would send for them.
func (c corpus) save(i int) ([][]byte, []byte) {
	from := 0
	if i > 0 {
		from = c.cuts[i-1]
	}
	span := c.conv.Span(from, c.cuts[i])
	return asBytes(c.conv.Messages[from:c.cuts[i]]), append(append([]byte{'['}, span...), ']')
}

func asBytes(msgs []json.RawMessage) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

// version is the conversation after save i (version i+1).
func (c corpus) version(i int) []byte {
	return append(append([]byte{'['}, c.conv.Span(0, c.cuts[i])...), ']')
}

// benchServer is an embedded nats-server as the daemon runs it, in a directory on disk.
type benchServer struct {
	dir string
	s   *server.Server
}

func startBenchServer(b *testing.B, dir string) *benchServer {
	b.Helper()
	s, err := startEmbedded(dir)
	if err != nil {
		b.Fatal(err)
	}
	bs := &benchServer{dir: dir, s: s}
	b.Cleanup(bs.stop)
	return bs
}

func (bs *benchServer) stop() {
	if bs.s != nil {
		bs.s.Shutdown()
		bs.s.WaitForShutdown()
		bs.s = nil
	}
}

func benchConnect(b *testing.B, url string) *nats.Conn {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func addStream(b *testing.B, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	b.Helper()
	st, err := js.CreateOrUpdateStream(context.Background(), cfg)
	must(b, err)
	return st
}

// percentiles returns p50 and p99 of ds.
func percentiles(ds []time.Duration) (time.Duration, time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

func table(title string) *tabwriter.Writer {
	fmt.Printf("\n%s\n", title)
	return tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
}

// BenchmarkSaveLatency: each save of the corpus, interleaved: a raw sync publish of the new
// messages; the engine's save (one compare-and-swap publish); and the whole pipeline an agent
// sees, through a work-queue ingest stream to a daemon (push and pull consumer) that validates,
// saves, publishes the result and acks.
func BenchmarkSaveLatency(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	client, daemon := benchConnect(b, srv.s.ClientURL()), benchConnect(b, srv.s.ClientURL())
	ctx := context.Background()
	js, err := jetstream.New(client)
	must(b, err)
	addStream(b, js, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage, AllowDirect: true})
	for _, name := range []string{"ING_PUSH", "ING_PULL"} {
		addStream(b, js, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
			Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy})
	}
	st := open(b, client, Config{})
	dst := open(b, daemon, Config{})
	startPushDaemon(b, daemon, dst)
	startPullDaemon(b, daemon, dst)
	startRequestDaemon(b, daemon, dst)

	keys := map[string]wire.Key{}
	for _, v := range []string{"engine", "push", "pull", "request"} {
		keys[v] = wire.Key{Namespace: "bench", Session: v, Agent: "main"}
	}
	lat := map[string][]time.Duration{}
	var entryBytes, dataBytes, pieceBytes int
	for i := range c.cuts {
		msgs, body := c.save(i)
		t0 := time.Now()
		_, err := js.Publish(ctx, "raw.s", body)
		must(b, err)
		lat["raw"] = append(lat["raw"], time.Since(t0))

		t0 = time.Now()
		_, err = st.Save(ctx, SaveRequest{Key: keys["engine"], SaveID: "e" + strconv.Itoa(i), Messages: msgs})
		must(b, err)
		lat["engine"] = append(lat["engine"], time.Since(t0))
		sess, err := st.session(ctx, keys["engine"])
		must(b, err)
		entryBytes, dataBytes = entryBytes+sess.size[0], dataBytes+sess.size[1]
		pieceBytes += len(body)
		_, err = st.Pack(ctx, keys["engine"], false) // after the answer, as the daemon would
		must(b, err)

		for _, v := range []string{"push", "pull"} {
			lat[v] = append(lat[v], pipelineSave(b, client, js, "ing_"+v+"."+keys[v].Token(), strconv.Itoa(i), body, i > 0))
		}
		lat["request"] = append(lat["request"], requestSave(b, client, "req."+keys["request"].Token(), strconv.Itoa(i), body, i > 0))
	}
	p50raw, p99raw := percentiles(lat["raw"])
	w := table(fmt.Sprintf("Save latency, %d saves of the corpus, interleaved (uptime: %s)", len(c.cuts), uptime()))
	fmt.Fprintln(w, "what\tp50\tp99\tp50 / raw\tp99 / raw")
	for _, v := range []struct{ key, what string }{{"raw", "raw sync publish of the new messages"},
		{"engine", "engine save: one CAS publish of the entry"},
		{"push", "pipeline, push consumer: ingest PubAck + validate + save + result"},
		{"pull", "pipeline, pull consumer (Consume): same"},
		{"request", "request to the daemon (no ingest stream): validate + save + reply"}} {
		p50, p99 := percentiles(lat[v.key])
		fmt.Fprintf(w, "%s\t%s\t%s\t%.2f×\t%.2f×\n", v.what, ms(p50), ms(p99), float64(p50)/float64(p50raw), float64(p99)/float64(p99raw))
	}
	must(b, w.Flush())
	fmt.Printf("per save, on average: entry %d B (meta %d B, zstd stream %d B); the new messages' JSON %d B\n",
		entryBytes/len(c.cuts), (entryBytes-dataBytes)/len(c.cuts), dataBytes/len(c.cuts), pieceBytes/len(c.cuts))

	benchRestore(b, c, client, js)
	benchFork(b, c, st, keys["engine"])
}

func streamBytes(b *testing.B, st *Store) uint64 {
	info, err := st.stream.Info(context.Background())
	must(b, err)
	return info.State.Bytes
}

// pipelineSave is one save as an agent makes it: publish to the ingest stream (waiting for the
// PubAck), then wait for the daemon's result.
func pipelineSave(b *testing.B, nc *nats.Conn, js jetstream.JetStream, subject, id string, body []byte, continues bool) time.Duration {
	res, err := nc.SubscribeSync("res." + subject + "." + id)
	must(b, err)
	defer func() { _ = res.Unsubscribe() }()
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set("Cp-Save-Id", id)
	if continues {
		m.Header.Set("Cp-Continues", "1")
	}
	t0 := time.Now()
	_, err = js.PublishMsg(context.Background(), m)
	must(b, err)
	r, err := res.NextMsg(10 * time.Second)
	must(b, err)
	if len(r.Data) > 0 && r.Data[0] == '!' {
		b.Fatalf("daemon: %s", r.Data[1:])
	}
	return time.Since(t0)
}

// handleIngest is the daemon's work on one ingested save: validate with internal/codec, save,
// publish the result (core NATS), ack, then pack if due.
func handleIngest(st *Store, nc *nats.Conn, subject string, hdr nats.Header, data []byte, ack func() error,
	reply ...func([]byte) error) {
	result := "res." + subject + "." + hdr.Get("Cp-Save-Id")
	answer := func(b []byte) error { return nc.Publish(result, b) }
	if len(reply) > 0 {
		answer = reply[0]
	}
	key, err := wire.ParseToken(strings.SplitN(subject, ".", 2)[1])
	var conv *codec.Conversation
	if err == nil {
		conv, err = codec.ParseLimited(data, codec.Limits{MaxBytes: 64 << 20, Continues: hdr.Get("Cp-Continues") != ""})
	}
	var rec Record
	if err == nil {
		rec, err = st.Save(context.Background(), SaveRequest{Key: key, SaveID: hdr.Get("Cp-Save-Id"), Messages: asBytes(conv.Messages)})
	}
	if err != nil {
		_ = answer([]byte("!" + err.Error()))
	} else {
		_ = answer([]byte(strconv.FormatUint(rec.Version, 10)))
	}
	_ = ack()
	if err == nil {
		_, _ = st.Pack(context.Background(), key, false)
	}
}

// requestSave is one save sent as a core NATS request to the daemon, whose CAS publish is the
// durability point; the reply carries the version.
func requestSave(b *testing.B, nc *nats.Conn, subject, id string, body []byte, continues bool) time.Duration {
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set("Cp-Save-Id", id)
	if continues {
		m.Header.Set("Cp-Continues", "1")
	}
	t0 := time.Now()
	r, err := nc.RequestMsg(m, 10*time.Second)
	must(b, err)
	if len(r.Data) > 0 && r.Data[0] == '!' {
		b.Fatalf("daemon: %s", r.Data[1:])
	}
	return time.Since(t0)
}

func startRequestDaemon(b *testing.B, nc *nats.Conn, st *Store) {
	sub, err := nc.QueueSubscribe("req.>", "daemon", func(m *nats.Msg) {
		handleIngest(st, nc, m.Subject, m.Header, m.Data, func() error { return nil }, m.Respond)
	})
	must(b, err)
	b.Cleanup(func() { _ = sub.Unsubscribe() })
}

func startPushDaemon(b *testing.B, nc *nats.Conn, st *Store) {
	js, err := nc.JetStream()
	must(b, err)
	sub, err := js.Subscribe("ing_push.>", func(m *nats.Msg) {
		handleIngest(st, nc, m.Subject, m.Header, m.Data, func() error { return m.Ack() })
	}, nats.BindStream("ING_PUSH"), nats.ManualAck(), nats.AckExplicit())
	must(b, err)
	b.Cleanup(func() { _ = sub.Unsubscribe() })
}

func startPullDaemon(b *testing.B, nc *nats.Conn, st *Store) {
	js, err := jetstream.New(nc)
	must(b, err)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "ING_PULL", jetstream.ConsumerConfig{
		Durable: "daemon", AckPolicy: jetstream.AckExplicitPolicy})
	must(b, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		handleIngest(st, nc, m.Subject(), m.Headers(), m.Data(), m.Ack)
	})
	must(b, err)
	b.Cleanup(cc.Stop)
}

// benchRestore: the head and an old version, through the engine (the last entry, then the
// entries in one batched direct get, zstd decode, SHA-256 check or not), against one direct get
// and zstd decode of the same conversation stored whole. The corpus is saved once more for each
// packing policy, each in a session of its own.
func benchRestore(b *testing.B, c corpus, nc *nats.Conn, js jetstream.JetStream) {
	ctx := context.Background()
	old := len(c.cuts) / 2
	for i, raw := range map[int][]byte{len(c.cuts) - 1: c.version(len(c.cuts) - 1), old: c.version(old)} {
		_, err := js.Publish(ctx, "raw.whole."+strconv.Itoa(i), codec.CompressZstd(raw))
		must(b, err)
	}
	raws, err := js.Stream(ctx, "RAW")
	must(b, err)
	baseline := func(i int) []byte {
		m, err := raws.GetLastMsgForSubject(ctx, "raw.whole."+strconv.Itoa(i))
		must(b, err)
		out, err := codec.DecompressZstd(m.Data, 64<<20)
		must(b, err)
		return out
	}
	type policy struct {
		name   string
		cfg    Config
		k      wire.Key
		st, nv *Store // nv: without the SHA-256 check
	}
	policies := []*policy{{name: "no packs", cfg: Config{NoPack: true}},
		{name: "packs 64 KiB/64", cfg: Config{}}, {name: "open packs 64 KiB/64", cfg: Config{PackOpen: true}},
		{name: "packs 128 KiB/128", cfg: Config{PackBytes: 128 << 10, PackEntries: 128}},
		{name: "packs 256 KiB/256", cfg: Config{PackBytes: 256 << 10, PackEntries: 256}}}
	for i, p := range policies {
		p.k = wire.Key{Namespace: "bench", Session: "restore" + strconv.Itoa(i), Agent: "main"}
		p.st = open(b, nc, p.cfg)
		cfg := p.cfg
		cfg.NoVerify = true
		p.nv = open(b, nc, cfg)
		for j := range c.cuts {
			msgs, _ := c.save(j)
			_, err := p.st.Save(ctx, SaveRequest{Key: p.k, SaveID: strconv.Itoa(j), Messages: msgs})
			must(b, err)
			_, err = p.st.Pack(ctx, p.k, false)
			must(b, err)
		}
	}
	lat := map[string][]time.Duration{}
	timed := func(name string, f func() []byte, want []byte) {
		t0 := time.Now()
		got := f()
		lat[name] = append(lat[name], time.Since(t0))
		if string(got) != string(want) {
			b.Fatalf("%s: wrong conversation", name)
		}
	}
	restore := func(st *Store, k wire.Key, v uint64) func() []byte {
		return func() []byte {
			got, _, err := st.Restore(ctx, k, v)
			must(b, err)
			return got
		}
	}
	head, oldConv := c.version(len(c.cuts)-1), c.version(old)
	for range 30 {
		timed("raw head", func() []byte { return baseline(len(c.cuts) - 1) }, head)
		timed("raw old", func() []byte { return baseline(old) }, oldConv)
		for _, p := range policies {
			timed(p.name+" head", restore(p.st, p.k, 0), head)
			timed(p.name+" head nv", restore(p.nv, p.k, 0), head)
			timed(p.name+" old", restore(p.st, p.k, uint64(old+1)), oldConv)
			timed(p.name+" old nv", restore(p.nv, p.k, uint64(old+1)), oldConv)
		}
	}
	info, err := js.Stream(ctx, "CP_LOG")
	must(b, err)
	si, err := info.Info(ctx, jetstream.WithSubjectFilter("cp.log.bench.>"))
	must(b, err)
	rawHead, _ := percentiles(lat["raw head"])
	rawOld, _ := percentiles(lat["raw old"])
	w := table(fmt.Sprintf("Restore of the %d B head and of version %d, 30 rounds interleaved, batched direct get: %v;\n"+
		"raw: one direct get + zstd decode of the conversation stored whole: head %s, old %s",
		len(head), old+1, policies[0].st.batch, ms(rawHead), ms(rawOld)))
	fmt.Fprintln(w, "policy\tentries\thead p50\t/ raw\tno SHA-256\t/ raw\told p50\t/ raw\tno SHA-256\t/ raw")
	for _, p := range policies {
		ratio := func(what string, raw time.Duration) string {
			d, _ := percentiles(lat[p.name+" "+what])
			return fmt.Sprintf("%s\t%.2f×", ms(d), float64(d)/float64(raw))
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", p.name, si.State.Subjects[LogSubject(p.k)],
			ratio("head", rawHead), ratio("head nv", rawHead), ratio("old", rawOld), ratio("old nv", rawOld))
	}
	must(b, w.Flush())
}

// benchFork: a fork of an old version writes one entry; the fork reads back as the source's
// version.
func benchFork(b *testing.B, c corpus, st *Store, k wire.Key) {
	ctx := context.Background()
	before := streamBytes(b, st)
	dst := wire.Key{Namespace: "bench", Session: "fork", Agent: "main"}
	v := len(c.cuts) - 10
	_, err := st.Fork(ctx, k, uint64(v), dst, "fork-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	must(b, err)
	written := streamBytes(b, st) - before
	got, _, err := st.Restore(ctx, dst, 0)
	must(b, err)
	if string(got) != string(c.version(v-1)) {
		b.Fatal("fork: wrong conversation")
	}
	fmt.Printf("\nFork of version %d (%d B): %d B written to the stream (one entry)\n", v, len(got), written)
}

// BenchmarkDiskAndWrites: the corpus saved turn by turn into a fresh store; then the server is
// stopped, the bytes the process wrote read from /proc/self/io, the server restarted and its
// directory measured with du. Against zstd of the final conversation.
func BenchmarkDiskAndWrites(b *testing.B) {
	c := loadCorpus(b)
	final := len(codec.CompressZstd(c.version(len(c.cuts) - 1)))
	pace, _ := time.ParseDuration(os.Getenv("CP_BENCH_PACE"))
	w := table(fmt.Sprintf("Disk and bytes written, %d saves paced %v; zstd(final) = %d B (uptime: %s)", len(c.cuts), pace, final, uptime()))
	fmt.Fprintln(w, "engine\twrite_bytes\tcancelled\tnet written / zstd\tdu store / zstd\tdu CP_LOG\tdu skeleton\tentries left")
	for _, run := range []struct {
		name   string
		cfg    Config
		ingest bool
	}{
		{"engine, packs of 64 KiB or 64 entries (default)", Config{}, false},
		{"engine, open packs of 64 KiB or 64 entries", Config{PackOpen: true}, false},
		{"engine, packs of 128 KiB or 128 entries", Config{PackBytes: 128 << 10, PackEntries: 128}, false},
		{"engine, packs of 256 KiB or 256 entries", Config{PackBytes: 256 << 10, PackEntries: 256}, false},
		{"engine, no packs", Config{NoPack: true}, false},
		{"engine, packs, each save through a work-queue ingest stream", Config{}, true},
		{"raw: zstd of each save alone, sync publish", Config{}, false},
	} {
		if only := os.Getenv("CP_BENCH_DISK"); only != "" && !strings.Contains(run.name, only) {
			continue
		}
		r := diskRun(b, c, run.cfg, run.ingest, run.name[:3] == "raw", pace)
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f×\t%.2f×\t%d\t%d\t%d\n", run.name, r.written, r.cancelled,
			float64(r.written-r.cancelled)/float64(final), float64(r.du)/float64(final), r.duLog, r.du-r.duLog, r.msgs)
	}
	must(b, w.Flush())
}

type diskResult struct {
	written, cancelled, du, duLog int64
	msgs                          uint64
}

func diskRun(b *testing.B, c corpus, cfg Config, ingest, raw bool, pace time.Duration) diskResult {
	ctx := context.Background()
	dir := b.TempDir()
	srv := startBenchServer(b, dir)
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc)
	must(b, err)
	st := open(b, nc, cfg)
	k := wire.Key{Namespace: "bench", Session: "disk", Agent: "main"}
	var cons jetstream.Consumer
	if ingest {
		addStream(b, js, jetstream.StreamConfig{Name: "ING", Subjects: []string{"ing.>"}, Storage: jetstream.FileStorage,
			Retention: jetstream.WorkQueuePolicy})
		cons, err = js.CreateOrUpdateConsumer(ctx, "ING", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
		must(b, err)
	}
	w0, c0 := procIO(b)
	for i := range c.cuts {
		msgs, body := c.save(i)
		switch {
		case raw:
			_, err = js.Publish(ctx, "cp.log.raw", codec.CompressZstd(body))
		case ingest:
			if _, err = js.Publish(ctx, "ing."+k.Token(), body); err == nil {
				var batch jetstream.MessageBatch
				if batch, err = cons.Fetch(1); err == nil {
					for m := range batch.Messages() {
						_, err = st.Save(ctx, SaveRequest{Key: k, SaveID: strconv.Itoa(i), Messages: msgs})
						must(b, m.Ack())
					}
				}
			}
		default:
			_, err = st.Save(ctx, SaveRequest{Key: k, SaveID: strconv.Itoa(i), Messages: msgs})
		}
		must(b, err)
		if !raw {
			_, err = st.Pack(ctx, k, false)
			must(b, err)
		}
		time.Sleep(pace)
	}
	info, err := st.stream.Info(ctx)
	must(b, err)
	nc.Close()
	srv.stop()
	w1, c1 := procIO(b)
	srv = startBenchServer(b, dir) // restarted: what is on disk is what stays
	defer srv.stop()
	return diskResult{written: w1 - w0, cancelled: c1 - c0, du: du(b, dir), duLog: du(b, filepath.Join(dir, "jetstream", "$G", "streams", "CP_LOG")),
		msgs: info.State.Msgs}
}

// procIO reads write_bytes and cancelled_write_bytes of this process (the embedded server runs
// in it): bytes it dirtied in the page cache, and those it deleted before they were written back.
func procIO(b *testing.B) (written, cancelled int64) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch name {
		case "write_bytes":
			written = n
		case "cancelled_write_bytes":
			cancelled = n
		}
	}
	return written, cancelled
}

// du is what `du -s --block-size=1` reports: allocated blocks, not apparent sizes.
func du(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	return n
}

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return "load " + strings.Join(f[:3], " ")
}

// BenchmarkFindVersion: reading version 1, a middle version and the history of a session of
// 10,000 versions (tiny messages, one per save), against a session of 10.
func BenchmarkFindVersion(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	st := open(b, nc, Config{})
	ctx := context.Background()
	w := table(fmt.Sprintf("Finding a version: the subject read from its first entry, batched direct get: %v", st.batch))
	fmt.Fprintln(w, "versions\tp50 restore of version 1\tp50 restore of version n/2\tp50 history (all records)")
	for _, n := range []int{10, 10000} {
		k := wire.Key{Namespace: "bench", Session: "find" + strconv.Itoa(n), Agent: "main"}
		for i := 0; i < n; i++ {
			_, err := st.Save(ctx, SaveRequest{Key: k, SaveID: strconv.Itoa(i), Messages: [][]byte{message(i)}})
			must(b, err)
			_, err = st.Pack(ctx, k, false)
			must(b, err)
		}
		var first, middle, history []time.Duration
		for range 20 {
			t0 := time.Now()
			got, _, err := st.Restore(ctx, k, 1)
			must(b, err)
			first = append(first, time.Since(t0))
			if string(got) != string(conversation(1)) {
				b.Fatal("wrong version 1")
			}
			t0 = time.Now()
			_, _, err = st.Restore(ctx, k, uint64(n/2))
			must(b, err)
			middle = append(middle, time.Since(t0))
			t0 = time.Now()
			recs, err := st.History(ctx, k)
			must(b, err)
			history = append(history, time.Since(t0))
			if len(recs) != n {
				b.Fatalf("history has %d versions, want %d", len(recs), n)
			}
		}
		p1, _ := percentiles(first)
		pm, _ := percentiles(middle)
		ph, _ := percentiles(history)
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", n, ms(p1), ms(pm), ms(ph))
	}
	must(b, w.Flush())
}

// BenchmarkStreamCompression: the corpus's 485 saves compressed each alone, and as one zstd stream
// per session cut at every save (§8.4), by window; and the time to decode the stream against the
// same conversation compressed at once.
func BenchmarkStreamCompression(b *testing.B) {
	c := loadCorpus(b)
	final := c.version(len(c.cuts) - 1)
	whole := codec.CompressZstd(final)
	alone := 0
	for i := range c.cuts {
		_, body := c.save(i)
		alone += len(codec.CompressZstd(body[1 : len(body)-1]))
	}
	w := table(fmt.Sprintf("Compression of %d saves; zstd(final) = %d B", len(c.cuts), len(whole)))
	fmt.Fprintln(w, "how\tbytes\t/ zstd(final)\tp50 decode of all")
	fmt.Fprintf(w, "each save compressed alone\t%d\t%.2f×\t\n", alone, float64(alone)/float64(len(whole)))
	decode := func(data []byte) time.Duration {
		var ds []time.Duration
		for range 20 {
			t0 := time.Now()
			if _, err := decoder.DecodeAll(data, make([]byte, 0, len(final))); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		p, _ := percentiles(ds)
		return p
	}
	for _, window := range []int{256 << 10, 1 << 20, 4 << 20} {
		enc, err := newEncoder(window)
		must(b, err)
		var stream []byte
		for i := range c.cuts {
			msgs, _ := c.save(i)
			data, err := enc.add(joinMessages(msgs, i > 0))
			must(b, err)
			stream = append(stream, data...)
		}
		stream = append(stream, frameEnd...)
		fmt.Fprintf(w, "one stream, cut at every save, %d KiB window\t%d\t%.3f×\t%s\n", window>>10, len(stream),
			float64(len(stream))/float64(len(whole)), ms(decode(stream)))
	}
	fmt.Fprintf(w, "the final conversation compressed at once\t%d\t1×\t%s\n", len(whole), ms(decode(whole)))
	must(b, w.Flush())
}
