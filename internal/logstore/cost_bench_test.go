package logstore

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Where a save's time goes (docs/format.md §8.15a). Each benchmark runs every variant once per
// save of the corpus, interleaved, and prints p50 / p99 as ratios to a raw sync publish of the
// save's JSON:
//
//	go test -run '^$' -bench 'PublishCost|RequestPath|IngestFloor' -benchtime 1x ./internal/logstore/

// timings collects the latencies of named variants, in the order they were first seen.
type timings struct {
	order []string
	lat   map[string][]time.Duration
}

func (t *timings) time(name string, f func()) {
	if t.lat == nil {
		t.lat = map[string][]time.Duration{}
	}
	if _, ok := t.lat[name]; !ok {
		t.order = append(t.order, name)
	}
	t0 := time.Now()
	f()
	t.lat[name] = append(t.lat[name], time.Since(t0))
}

// print writes the table; the first variant is the raw publish every ratio is taken to.
func (t *timings) print(b *testing.B, title string) {
	raw, raw99 := percentiles(t.lat[t.order[0]])
	w := table(fmt.Sprintf("%s, %d rounds interleaved (uptime: %s)", title, len(t.lat[t.order[0]]), uptime()))
	fmt.Fprintln(w, "what\tp50\tp99\tp50 / raw\tp99 / raw")
	for _, name := range t.order {
		p50, p99 := percentiles(t.lat[name])
		fmt.Fprintf(w, "%s\t%s\t%s\t%.2f×\t%.2f×\n", name, ms(p50), ms(p99), float64(p50)/float64(raw), float64(p99)/float64(raw99))
	}
	must(b, w.Flush())
}

// passes is CP_BENCH_PASSES (more rounds, for a CPU profile), or n.
func passes(n int) int {
	if p, err := strconv.Atoi(os.Getenv("CP_BENCH_PASSES")); err == nil && p > 0 {
		return p
	}
	return n
}

// saveCompute is the engine's CPU work for one save, without the publish (save.go saveOnce):
// join, CRC-32C, SHA-256 extended from the previous state, zstd, the entry, the record.
type saveCompute struct {
	enc  *encoder
	head Head
	fast *encoder // if set, the same bytes are also compressed at zstd.SpeedFastest (timed apart)
	// bytes of zstd output: at the default level and at SpeedFastest
	zstdBytes, fastBytes int
}

// newFastEncoder is newEncoder at zstd.SpeedFastest.
func newFastEncoder(window int) *encoder {
	e := &encoder{}
	e.z, _ = zstd.NewWriter(&e.buf, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(window), zstd.WithEncoderCRC(false))
	return e
}

func (c *saveCompute) entry(b *testing.B, msgs [][]byte, parts *timings) []byte {
	raw := joinMessages(msgs, c.head.Messages > 0)
	var err error
	var data []byte
	piece := &Piece{Messages: len(msgs), RawBytes: int64(len(raw))}
	parts.time("  of which CRC-32C", func() { piece.CRC = crc32.Checksum(raw, castagnoli) })
	parts.time("  of which SHA-256 (state in, state out)", func() { c.head.State, _, err = extendHash(c.head.State, raw) })
	must(b, err)
	if piece.Frame = c.enc == nil; piece.Frame {
		c.enc, err = newEncoder(1 << 20)
		must(b, err)
	}
	parts.time("  of which zstd (stream encoder, flush)", func() { data, err = c.enc.add(raw) })
	must(b, err)
	c.zstdBytes += len(data)
	if c.fast != nil {
		parts.time("  (zstd at SpeedFastest instead, same bytes)", func() {
			fast, err := c.fast.add(raw)
			must(b, err)
			c.fastBytes += len(fast)
		})
	}
	c.head.Version++
	c.head.Messages += len(msgs)
	c.head.RawBytes += int64(len(raw))
	meta := Meta{Head: c.head, SaveID: strconv.FormatUint(c.head.Version, 10), Time: nowMillis(), Piece: piece}
	var body []byte
	parts.time("  of which entry + record", func() {
		body, err = encodeEntry(KindSave, meta, data)
		_, _ = recordOf(meta)
	})
	must(b, err)
	return body
}

// BenchmarkPublishCost separates what a save's publish costs: the same ~1 KB entry published
// with and without Nats-Expected-Last-Subject-Sequence, with Nats-Expected-Last-Sequence, with
// Nats-Msg-Id, by hand (nc.RequestMsg) instead of jetstream.Publish, asynchronously, into a
// stream of 20,000 subjects; and the engine's CPU work alone.
func BenchmarkPublishCost(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	ctx := context.Background()
	js, err := jetstream.New(nc)
	must(b, err)
	addStream(b, js, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
	addStream(b, js, jetstream.StreamConfig{Name: "MANY", Subjects: []string{"many.>"}, Storage: jetstream.FileStorage})
	for i := range 20000 {
		_, err := js.PublishAsync("many."+strconv.Itoa(i), []byte("x"))
		must(b, err)
	}
	<-js.PublishAsyncComplete()
	st := open(b, nc, Config{NoPack: true})
	fst := open(b, nc, Config{NoPack: true, FastSaves: true})
	k, kf := wire.Key{Namespace: "bench", Session: "cost", Agent: "main"}, wire.Key{Namespace: "bench", Session: "fast", Agent: "main"}

	var t timings
	var comp, comp2, comp3 saveCompute
	last := map[string]uint64{"many.777": 777 + 1}
	pub := func(subject string, body []byte, opts ...jetstream.PublishOpt) {
		ack, err := js.Publish(ctx, subject, body, opts...)
		must(b, err)
		last[subject], last[""] = ack.Sequence, ack.Sequence
	}
	byHand := func(subject string, body []byte, hdr string) {
		m := nats.NewMsg(subject)
		m.Data = body
		if hdr != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last[subject], 10))
		}
		r, err := nc.RequestMsg(m, 5*time.Second)
		must(b, err)
		var ack struct {
			Seq   uint64          `json:"seq"`
			Error json.RawMessage `json:"error"`
		}
		must(b, json.Unmarshal(r.Data, &ack))
		if ack.Error != nil {
			b.Fatalf("%s: %s", subject, ack.Error)
		}
		last[subject] = ack.Seq
	}
	for pass := range passes(2) {
		comp, comp2, comp3 = saveCompute{}, saveCompute{}, saveCompute{fast: newFastEncoder(1 << 20)} // a new frame, as after a restart
		for i := range c.cuts {
			msgs, body := c.save(i)
			t.time("raw: jetstream.Publish of the new messages' JSON (4.7 KB)", func() { pub("raw.s", body) })
			var entry []byte
			t.time("engine CPU only: join, CRC, SHA-256, zstd, entry, record", func() { entry = comp.entry(b, msgs, &t) })
			t.time("entry (1 KB), no header, stream RAW", func() { pub("raw.e", entry) })
			t.time("entry, no header, stream CP_LOG", func() { pub("cp.log.p.plain", entry) })
			t.time("entry + Expected-Last-Subject-Sequence", func() {
				pub("cp.log.p.cas", entry, jetstream.WithExpectLastSequencePerSubject(last["cp.log.p.cas"]))
			})
			t.time("entry + Expected-Last-Sequence (stream-wide)", func() {
				pub("cp.log.p.seq", entry, jetstream.WithExpectLastSequence(last[""]))
			})
			t.time("entry + Nats-Msg-Id", func() {
				pub("cp.log.p.id", entry, jetstream.WithMsgID(fmt.Sprintf("%d-%d", pass, i)))
			})
			t.time("entry by hand (nc.RequestMsg), no header", func() { byHand("cp.log.p.hand0", entry, "") })
			t.time("entry by hand (nc.RequestMsg) + Expected-Last-Subject-Sequence", func() { byHand("cp.log.p.hand", entry, "cas") })
			t.time("entry async (PublishAsync, wait for the ack) + Expected-Last-Subject-Sequence", func() {
				f, err := js.PublishAsync("cp.log.p.async", entry, jetstream.WithExpectLastSequencePerSubject(last["cp.log.p.async"]))
				must(b, err)
				select {
				case ack := <-f.Ok():
					last["cp.log.p.async"] = ack.Sequence
				case err := <-f.Err():
					b.Fatal(err)
				}
			})
			t.time("entry + Expected-Last-Subject-Sequence, stream of 20,000 subjects", func() {
				pub("many.777", entry, jetstream.WithExpectLastSequencePerSubject(last["many.777"]))
			})
			var scratch timings
			t.time("engine CPU + CAS publish, by the benchmark", func() {
				pub("cp.log.p.both", comp2.entry(b, msgs, &scratch), jetstream.WithExpectLastSequencePerSubject(last["cp.log.p.both"]))
			})
			next := comp3.entry(b, msgs, &t) // the publish below follows CPU work, as in a save
			t.time("entry + Expected-Last-Subject-Sequence, right after the engine's CPU work", func() {
				pub("cp.log.p.after", next, jetstream.WithExpectLastSequencePerSubject(last["cp.log.p.after"]))
			})
			t.time("engine Save (CPU + CAS publish)", func() {
				_, err := st.Save(ctx, SaveRequest{Key: k, SaveID: fmt.Sprintf("%d-%d", pass, i), Messages: msgs})
				must(b, err)
			})
			t.time("engine Save, FastSaves", func() {
				_, err := fst.Save(ctx, SaveRequest{Key: kf, SaveID: fmt.Sprintf("%d-%d", pass, i), Messages: msgs})
				must(b, err)
			})
		}
	}
	t.print(b, "What a save's publish costs")
	fmt.Printf("zstd stream of the last pass: %d B at the default level, %d B at SpeedFastest (%.2f×)\n",
		comp3.zstdBytes, comp3.fastBytes, float64(comp3.fastBytes)/float64(comp3.zstdBytes))
}

// BenchmarkRequestPath: a save as a core NATS request to a daemon on its own connection, taken
// apart: the two hops alone (the daemon echoes), the hops and internal/codec validation, and the
// whole save; with the daemon on nc.QueueSubscribe as today and on a plain nc.Subscribe.
func BenchmarkRequestPath(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	client, daemon := benchConnect(b, srv.s.ClientURL()), benchConnect(b, srv.s.ClientURL())
	ctx := context.Background()
	js, err := jetstream.New(client)
	must(b, err)
	addStream(b, js, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
	dst := open(b, daemon, Config{})
	startRequestDaemon(b, daemon, dst) // req.>: validate, save, respond, then pack (bench_test.go)
	handle := func(subject string, f func(m *nats.Msg)) {
		sub, err := daemon.Subscribe(subject, f)
		must(b, err)
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	handle("echo", func(m *nats.Msg) { _ = m.Respond([]byte("1")) })
	handle("validate", func(m *nats.Msg) {
		_, err := codec.ParseLimited(m.Data, codec.Limits{MaxBytes: 64 << 20, Continues: m.Header.Get("Cp-Continues") != ""})
		must(b, err)
		_ = m.Respond([]byte("1"))
	})
	handle("lean.>", func(m *nats.Msg) {
		handleIngest(dst, daemon, m.Subject, m.Header, m.Data, func() error { return nil }, m.Respond)
	})
	lean := leanDaemon{b: b, nc: daemon}
	handle("fast.seq.>", func(m *nats.Msg) { lean.save(m, false) })
	handle("fast.par.>", func(m *nats.Msg) { lean.save(m, true) })
	// The daemon runs the embedded server: its connection can be in-process (no loopback TCP).
	inproc, err := nats.Connect("", nats.InProcessServer(srv.s))
	must(b, err)
	b.Cleanup(inproc.Close)
	leanIP, engIP, fastIP := leanDaemon{b: b, nc: inproc}, open(b, inproc, Config{}), open(b, inproc, Config{FastSaves: true})
	for subject, f := range map[string]nats.MsgHandler{
		"ip.echo":  func(m *nats.Msg) { _ = m.Respond([]byte("1")) },
		"ip.seq.>": func(m *nats.Msg) { leanIP.save(m, false) },
		"ipeng.>": func(m *nats.Msg) {
			handleIngest(engIP, inproc, m.Subject, m.Header, m.Data, func() error { return nil }, m.Respond)
		},
		"ipfast.>": func(m *nats.Msg) {
			handleIngest(fastIP, inproc, m.Subject, m.Header, m.Data, func() error { return nil }, m.Respond)
		},
	} {
		sub, err := inproc.Subscribe(subject, f)
		must(b, err)
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	var t timings
	for pass := range passes(2) {
		for i := range c.cuts {
			_, body := c.save(i)
			id := fmt.Sprintf("%d-%d", pass, i)
			t.time("raw: jetstream.Publish of the new messages' JSON", func() {
				_, err := js.Publish(ctx, "raw.s", body)
				must(b, err)
			})
			t.time("request, daemon echoes (two hops, no work)", func() { requestSave(b, client, "echo", id, body, i > 0) })
			t.time("request, daemon validates (internal/codec) and replies", func() { requestSave(b, client, "validate", id, body, i > 0) })
			t.time("request, daemon validates + saves (QueueSubscribe)", func() {
				requestSave(b, client, "req.bench.q"+strconv.Itoa(pass)+".main", id, body, i > 0)
			})
			t.time("request, daemon validates + saves (plain Subscribe)", func() {
				requestSave(b, client, "lean.bench.s"+strconv.Itoa(pass)+".main", id, body, i > 0)
			})
			t.time("request, lean daemon: validate, then CPU + CAS publish, Respond", func() {
				requestSave(b, client, "fast.seq.p"+strconv.Itoa(pass), id, body, i > 0)
			})
			t.time("request, lean daemon: validate ‖ CPU (2 goroutines), CAS publish, Respond", func() {
				requestSave(b, client, "fast.par.p"+strconv.Itoa(pass), id, body, i > 0)
			})
			t.time("request, daemon on an in-process connection echoes", func() { requestSave(b, client, "ip.echo", id, body, i > 0) })
			t.time("request, daemon on an in-process connection validates + saves (engine)", func() {
				requestSave(b, client, "ipeng.bench.e"+strconv.Itoa(pass)+".main", id, body, i > 0)
			})
			t.time("request, daemon on an in-process connection validates + saves (engine, FastSaves)", func() {
				requestSave(b, client, "ipfast.bench.f"+strconv.Itoa(pass)+".main", id, body, i > 0)
			})
			t.time("request, lean daemon on an in-process connection", func() {
				requestSave(b, client, "ip.seq.p"+strconv.Itoa(pass), id, body, i > 0)
			})
		}
	}
	t.print(b, "A save as a request to the daemon")
}

// BenchmarkIngestFloor: a save through an ingest stream (publish, PubAck, delivery, validate,
// save, result), by the ingest stream's storage and the consumer's ack policy. Memory storage
// is not acceptable for durability; it is measured to know the floor.
func BenchmarkIngestFloor(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	client, daemon := benchConnect(b, srv.s.ClientURL()), benchConnect(b, srv.s.ClientURL())
	ctx := context.Background()
	js, err := jetstream.New(client)
	must(b, err)
	addStream(b, js, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
	dst := open(b, daemon, Config{})
	djs, err := daemon.JetStream()
	must(b, err)
	inproc, err := nats.Connect("", nats.InProcessServer(srv.s)) // as cmd/checkpointd connects
	must(b, err)
	b.Cleanup(inproc.Close)
	ijs, err := inproc.JetStream()
	must(b, err)
	ist := open(b, inproc, Config{})
	type ingest struct {
		name    string
		storage jetstream.StorageType
		wq      bool // work queue with explicit acks; else limits and AckNone
		inproc  bool // the daemon's connection is in-process
	}
	variants := []ingest{{"file_wq", jetstream.FileStorage, true, false}, {"file_none", jetstream.FileStorage, false, false},
		{"mem_wq", jetstream.MemoryStorage, true, false}, {"mem_none", jetstream.MemoryStorage, false, false},
		{"file_wq_inproc", jetstream.FileStorage, true, true}, {"mem_none_inproc", jetstream.MemoryStorage, false, true}}
	for _, v := range variants {
		djs, dst, daemon := djs, dst, daemon
		if v.inproc {
			djs, dst, daemon = ijs, ist, inproc
		}
		cfg := jetstream.StreamConfig{Name: v.name, Subjects: []string{v.name + ".>"}, Storage: v.storage}
		opts := []nats.SubOpt{nats.BindStream(v.name), nats.AckNone()}
		if v.wq {
			cfg.Retention = jetstream.WorkQueuePolicy
			opts = []nats.SubOpt{nats.BindStream(v.name), nats.ManualAck(), nats.AckExplicit()}
		}
		addStream(b, js, cfg)
		sub, err := djs.Subscribe(v.name+".>", func(m *nats.Msg) {
			handleIngest(dst, daemon, m.Subject, m.Header, m.Data, func() error {
				if v.wq {
					return m.Ack()
				}
				return nil
			})
		}, opts...)
		must(b, err)
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	var t timings
	for pass := range passes(2) {
		for i := range c.cuts {
			_, body := c.save(i)
			t.time("raw: jetstream.Publish of the new messages' JSON", func() {
				_, err := js.Publish(ctx, "raw.s", body)
				must(b, err)
			})
			for _, v := range variants {
				k := wire.Key{Namespace: "bench", Session: v.name + strconv.Itoa(pass), Agent: "main"}
				t.time("ingest "+v.name+" (push consumer): PubAck + validate + save + result", func() {
					pipelineSave(b, client, js, v.name+"."+k.Token(), strconv.Itoa(i), body, i > 0)
				})
			}
		}
	}
	t.print(b, "A save through an ingest stream")
}

// leanDaemon is the least a daemon can do for a save request, without the engine's Store: validate
// (internal/codec), the engine's CPU work (saveCompute), one CAS publish, msg.Respond. With
// parallel, the compression starts on the payload's bytes while the validation runs: for a compact
// payload (what JSON.stringify sends) the messages joined are the payload without its brackets.
type leanDaemon struct {
	b     *testing.B
	nc    *nats.Conn
	js    jetstream.JetStream
	comps map[string]*saveCompute
	last  map[string]uint64
}

func (d *leanDaemon) save(m *nats.Msg, parallel bool) {
	if d.js == nil {
		d.js, _ = jetstream.New(d.nc)
		d.comps, d.last = map[string]*saveCompute{}, map[string]uint64{}
	}
	comp := d.comps[m.Subject]
	if comp == nil {
		comp = &saveCompute{}
		d.comps[m.Subject] = comp
	}
	lim := codec.Limits{MaxBytes: 64 << 20, Continues: m.Header.Get("Cp-Continues") != ""}
	var entry []byte
	var scratch timings
	if parallel {
		done := make(chan struct{})
		go func() {
			defer close(done)
			entry = comp.entry(d.b, [][]byte{m.Data[1 : len(m.Data)-1]}, &scratch)
		}()
		conv, err := codec.ParseLimited(m.Data, lim)
		<-done
		must(d.b, err)
		if len(conv.Messages) == 0 || &conv.Messages[0][0] != &m.Data[1] {
			d.b.Fatal("the payload was not compact: the speculative compression would be thrown away")
		}
	} else {
		conv, err := codec.ParseLimited(m.Data, lim)
		must(d.b, err)
		entry = comp.entry(d.b, asBytes(conv.Messages), &scratch)
	}
	subject := "cp.log.lean." + strings.ReplaceAll(m.Subject, ".", "_")
	ack, err := d.js.Publish(context.Background(), subject, entry, jetstream.WithExpectLastSequencePerSubject(d.last[subject]))
	must(d.b, err)
	d.last[subject] = ack.Sequence
	must(d.b, m.Respond([]byte(strconv.FormatUint(ack.Sequence, 10))))
}
