package logstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
)

// The figures of docs/format.md §8.15–§8.15b, measured on engine.Engine over logstore.Log (the
// engine knows nothing of NATS, so its benchmarks on the real store live here). Each benchmark runs
// once and prints its tables:
//
//	go test -run '^$' -bench . -benchtime 1x ./internal/logstore/
//
// The workload is the real corpus saved after every assistant turn, each save an append of what
// grew (485 saves). CP_BENCH_PACE (a Go duration, default 0) paces the saves of the disk benchmark
// as an agent would; CP_BENCH_DISK runs only its policies whose name contains it.

// BenchmarkSaveLatency: each save of the corpus, interleaved: a raw sync publish of the save's
// JSON (the bytes the client sends), and the engine's Save of the same bytes (validation, the
// engine's CPU, one compare-and-swap append), with FastSaves and without (the default). Packs run
// after the save, untimed, as the daemon runs them after answering.
func BenchmarkSaveLatency(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc)
	must(b, err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
	must(b, err)
	l := openLog(b, nc)
	fast, slow := engine.New(l, engine.Config{FastSaves: true}), engine.New(l, engine.Config{})
	kf := engine.Key{Namespace: "bench", Session: "fast", Agent: "main"}
	ks := engine.Key{Namespace: "bench", Session: "slow", Agent: "main"}
	var t timings
	var entryBytes, dataBytes, jsonBytes int64
	for i := range c.cuts {
		body := c.save(i)
		t.time("raw: sync publish of the save's JSON", func() {
			_, err := js.Publish(ctx, "raw.s", body)
			must(b, err)
		})
		var saved engine.Saved
		t.time("engine Save, FastSaves: validate, CPU, CAS append", func() {
			saved, err = fast.Save(ctx, c.request(kf, i))
			must(b, err)
		})
		last, err := l.Last(ctx, kf) // the entry just written, before a pack replaces it
		must(b, err)
		entryBytes, dataBytes, jsonBytes = entryBytes+int64(len(last.Data)), dataBytes+saved.Record.StoredBytes, jsonBytes+int64(len(body))
		if saved.PackDue {
			_, err = fast.Pack(ctx, kf, false)
			must(b, err)
		}
		t.time("engine Save (zstd default level, the default)", func() {
			saved, err = slow.Save(ctx, c.request(ks, i))
			must(b, err)
		})
		if saved.PackDue {
			_, err = slow.Pack(ctx, ks, false)
			must(b, err)
		}
	}
	t.print(b, fmt.Sprintf("Save latency, %d saves of the corpus", len(c.cuts)), "raw: sync publish of the save's JSON")
	n := int64(len(c.cuts))
	fmt.Printf("per save (FastSaves), on average: entry %d B (meta and record %d B, zstd stream %d B); the save's JSON %d B\n",
		entryBytes/n, (entryBytes-dataBytes)/n, dataBytes/n, jsonBytes/n)
}

// BenchmarkRestore: the head (2.3 MB) and a middle version of the corpus, through Read (CRC-32C
// checked; and with Verify, SHA-256 too) and ReadZstd (what the daemon sends, compressed), against
// one direct get of the same conversation stored whole as one zstd frame, decoded (Read's
// baseline) or not (ReadZstd's). The corpus is saved once per packing policy, each in a session of
// its own. Then a fork of version 475: the bytes it wrote.
func BenchmarkRestore(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc)
	must(b, err)
	raws, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"},
		Storage: jetstream.FileStorage, AllowDirect: true})
	must(b, err)
	l := openLog(b, nc)
	headIdx, midIdx := len(c.cuts)-1, len(c.cuts)/2
	head, mid := c.version(headIdx), c.version(midIdx)
	for name, conv := range map[string][]byte{"head": head, "mid": mid} {
		_, err := js.Publish(ctx, "raw.whole."+name, codec.CompressZstd(conv))
		must(b, err)
	}
	get := func(name string) []byte {
		m, err := raws.GetLastMsgForSubject(ctx, "raw.whole."+name) // a direct get: the stream allows them
		must(b, err)
		return m.Data
	}
	decode := func(z []byte) []byte {
		out, err := codec.DecompressZstd(z, 64<<20)
		must(b, err)
		return out
	}
	type policy struct {
		name string
		cfg  engine.Config
		e    *engine.Engine
		k    engine.Key
	}
	policies := []*policy{
		{name: "default: packs of 256 KiB / 256", cfg: engine.Config{}},
		{name: "packs of 128 KiB / 128", cfg: engine.Config{PackBytes: 128 << 10, PackEntries: 128}},
		{name: "packs of 64 KiB / 64", cfg: engine.Config{PackBytes: 64 << 10, PackEntries: 64}},
		{name: "open packs of 64 KiB / 64", cfg: engine.Config{PackBytes: 64 << 10, PackEntries: 64, PackOpen: true}},
		{name: "no packs", cfg: engine.Config{NoPack: true}},
	}
	for i, p := range policies {
		p.e, p.k = engine.New(l, p.cfg), engine.Key{Namespace: "bench", Session: "restore" + strconv.Itoa(i), Agent: "main"}
		c.saveAll(b, p.e, p.k)
	}
	lat := map[string][]time.Duration{}
	timed := func(name string, want []byte, f func() []byte) {
		t0 := time.Now()
		got := f()
		lat[name] = append(lat[name], time.Since(t0))
		if want != nil && string(got) != string(want) {
			b.Fatalf("%s: wrong conversation", name)
		}
	}
	for range 30 {
		for _, v := range []struct {
			name string
			conv []byte
		}{{"head", head}, {"mid", mid}} {
			timed("raw get "+v.name, nil, func() []byte { return get(v.name) })
			timed("raw get+decode "+v.name, v.conv, func() []byte { return decode(get(v.name)) })
		}
		for _, p := range policies {
			for _, v := range []struct {
				name string
				n    uint64
				conv []byte
			}{{"head", 0, head}, {"mid", uint64(midIdx + 1), mid}} {
				timed(p.name+" Read "+v.name, v.conv, func() []byte {
					got, _, err := p.e.Read(ctx, p.k, v.n, engine.ReadOptions{})
					must(b, err)
					return got
				})
				timed(p.name+" Verify "+v.name, v.conv, func() []byte {
					got, _, err := p.e.Read(ctx, p.k, v.n, engine.ReadOptions{Verify: true})
					must(b, err)
					return got
				})
				timed(p.name+" ReadZstd "+v.name, nil, func() []byte {
					got, _, err := p.e.ReadZstd(ctx, p.k, v.n)
					must(b, err)
					return got
				})
			}
		}
	}
	// Each ReadZstd decodes to the version (checked once, untimed).
	for _, p := range policies {
		z, _, err := p.e.ReadZstd(ctx, p.k, 0)
		must(b, err)
		if string(decode(z)) != string(head) {
			b.Fatalf("%s: ReadZstd of the head does not decode to it", p.name)
		}
	}
	for _, v := range []struct{ name, what string }{{"head", fmt.Sprintf("the %d B head", len(head))},
		{"mid", fmt.Sprintf("version %d (%d B)", midIdx+1, len(mid))}} {
		getP, decP := p50(lat["raw get "+v.name]), p50(lat["raw get+decode "+v.name])
		w := table(fmt.Sprintf("Restore of %s, p50 of 30 rounds interleaved (%s); raw: one direct get of it stored whole as one zstd frame: %s, + decode: %s",
			v.what, uptime(), ms(getP), ms(decP)))
		fmt.Fprintln(w, "policy\tentries\tRead (CRC-32C)\t/ get+decode\tRead, Verify (SHA-256)\t/ get+decode\tReadZstd\t/ get\t/ get+decode")
		for _, p := range policies {
			r, vf, z := p50(lat[p.name+" Read "+v.name]), p50(lat[p.name+" Verify "+v.name]), p50(lat[p.name+" ReadZstd "+v.name])
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.name, enginetest.Entries(b, l, p.k), ms(r), ratio(r, decP),
				ms(vf), ratio(vf, decP), ms(z), ratio(z, getP), ratio(z, decP))
		}
		must(b, w.Flush())
	}
	benchFork(b, c, js, policies[0].e, policies[0].k)
}

// benchFork: a fork of version len-10 of the corpus; the bytes it wrote to the stream.
func benchFork(b *testing.B, c corpus, js jetstream.JetStream, e *engine.Engine, from engine.Key) {
	streamBytes := func() uint64 {
		st, err := js.Stream(ctx, "CP_LOG")
		must(b, err)
		info, err := st.Info(ctx)
		must(b, err)
		return info.State.Bytes
	}
	before := streamBytes()
	to := engine.Key{Namespace: "bench", Session: "fork", Agent: "main"}
	v := len(c.cuts) - 10
	_, err := e.Fork(ctx, engine.ForkRequest{From: from, Version: uint64(v), To: to, SaveID: "fork", Now: time.Now()})
	must(b, err)
	written := streamBytes() - before
	got, _, err := e.Read(ctx, to, 0, engine.ReadOptions{Verify: true})
	must(b, err)
	if string(got) != string(c.version(v-1)) {
		b.Fatal("fork: wrong conversation")
	}
	fmt.Printf("\nFork of version %d (%d B): %d B written to the stream (%s)\n", v, len(got), written, uptime())
}

// BenchmarkDiskAndWrites: the corpus saved turn by turn into a fresh store, packed when due; then
// the server is stopped, the bytes the process wrote read from /proc/self/io, the server restarted
// and its directory measured with du. Against zstd of the final conversation. One run per policy
// the engine's Config offers (and the window, which decides how well the stream compresses), and
// a store without the engine: each save's JSON compressed alone, published.
func BenchmarkDiskAndWrites(b *testing.B) {
	c := loadCorpus(b)
	final := len(codec.CompressZstd(c.version(len(c.cuts) - 1)))
	pace, _ := time.ParseDuration(os.Getenv("CP_BENCH_PACE"))
	w := table(fmt.Sprintf("Disk and bytes written, %d saves paced %v; zstd(final) = %d B (%s)", len(c.cuts), pace, final, uptime()))
	fmt.Fprintln(w, "policy\twrite_bytes\tcancelled\tnet written / zstd\tdu / zstd\tdu\tdu CP_LOG\tstream bytes\tmessages left")
	for _, run := range []struct {
		name string
		cfg  engine.Config
	}{
		{"packs of 256 KiB / 256 entries, FastSaves", engine.Config{FastSaves: true}},
		{"default: packs of 256 KiB / 256, zstd default level", engine.Config{}},
		{"open packs of 256 KiB / 256", engine.Config{PackOpen: true}},
		{"packs of 128 KiB / 128", engine.Config{PackBytes: 128 << 10, PackEntries: 128}},
		{"packs of 64 KiB / 64", engine.Config{PackBytes: 64 << 10, PackEntries: 64}},
		{"open packs of 64 KiB / 64", engine.Config{PackBytes: 64 << 10, PackEntries: 64, PackOpen: true}},
		{"no packs", engine.Config{NoPack: true}},
		{"no packs, zstd default level", engine.Config{NoPack: true}},
		{"no packs, window 256 KiB", engine.Config{NoPack: true, Window: 256 << 10}},
		{"no packs, window 4 MiB", engine.Config{NoPack: true, Window: 4 << 20}},
		{"raw: zstd of each save alone, sync publish", engine.Config{}},
	} {
		if only := os.Getenv("CP_BENCH_DISK"); only != "" && !strings.Contains(run.name, only) {
			continue
		}
		r := diskRun(b, c, run.cfg, strings.HasPrefix(run.name, "raw"), pace)
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f×\t%.2f×\t%d\t%d\t%d\t%d\n", run.name, r.written, r.cancelled,
			float64(r.written-r.cancelled)/float64(final), float64(r.du)/float64(final), r.du, r.duLog, r.bytes, r.msgs)
	}
	must(b, w.Flush())
}

type diskResult struct {
	written, cancelled, du, duLog int64
	bytes, msgs                   uint64
}

func diskRun(b *testing.B, c corpus, cfg engine.Config, raw bool, pace time.Duration) diskResult {
	dir := b.TempDir()
	srv := startBenchServer(b, dir)
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc)
	must(b, err)
	l := openLog(b, nc)
	e := engine.New(l, cfg)
	k := engine.Key{Namespace: "bench", Session: "disk", Agent: "main"}
	w0, c0 := procIO(b)
	for i := range c.cuts {
		if raw {
			body := c.save(i)
			_, err = js.Publish(ctx, "cp.log.raw", codec.CompressZstd(body[1:len(body)-1]))
			must(b, err)
		} else {
			saveAndPack(b, e, c.request(k, i))
		}
		time.Sleep(pace)
	}
	st, err := js.Stream(ctx, "CP_LOG")
	must(b, err)
	info, err := st.Info(ctx)
	must(b, err)
	nc.Close()
	srv.stop()
	w1, c1 := procIO(b)
	srv = startBenchServer(b, dir) // restarted: what is on disk is what stays
	defer srv.stop()
	return diskResult{written: w1 - w0, cancelled: c1 - c0, du: du(b, dir),
		duLog: du(b, filepath.Join(dir, "jetstream", "$G", "streams", "CP_LOG")), bytes: info.State.Bytes, msgs: info.State.Msgs}
}

// BenchmarkFindVersion: a session of 10,000 versions (one small message per save, packed by the
// default policy) against one of 10, interleaved: Read of version 1 and of the middle version,
// Version (the record alone) of the middle one, the newest HistoryPage of 100, the page a client
// paging from the head reaches at the middle (with the cursor it was given), and History (every
// record), in random order.
//
//	go test -run '^$' -bench FindVersion -benchtime 1x ./internal/logstore/
func BenchmarkFindVersion(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	l := openLog(b, nc)
	e := engine.New(l, engine.Config{})
	sizes := []int{10, 10000}
	keys := sessionsOfVersions(b, e, "find", sizes)
	// The cursor a client holds when it has paged from the head down to the middle version:
	// taken once, by following the cursors (HistoryPage's cursor is the engine's to fill).
	below := map[int]engine.HistoryCursor{}
	for _, n := range sizes {
		var cur engine.HistoryCursor
		for seen := 0; seen < n/2; {
			recs, next, err := e.HistoryPage(ctx, keys[n], cur, min(100, n/2-seen))
			must(b, err)
			seen, cur = seen+len(recs), next
		}
		below[n] = cur
	}
	type op struct {
		what string
		fn   func(n int, k engine.Key)
	}
	ops := []op{
		{"Read of version 1", func(n int, k engine.Key) {
			got, _, err := e.Read(ctx, k, 1, engine.ReadOptions{})
			must(b, err)
			if string(got) != string(enginetest.Conversation(1)) {
				b.Fatal("wrong version 1")
			}
		}},
		{"Read of version n/2", func(n int, k engine.Key) {
			_, rec, err := e.Read(ctx, k, uint64(n/2), engine.ReadOptions{})
			must(b, err)
			if rec.Version != uint64(n/2) {
				b.Fatal("wrong version")
			}
		}},
		{"Version n/2 (the record alone)", func(n int, k engine.Key) {
			rec, err := e.Version(ctx, k, uint64(n/2))
			must(b, err)
			if rec.Version != uint64(n/2) {
				b.Fatal("wrong version")
			}
		}},
		{"HistoryPage: the newest 100", func(n int, k engine.Key) {
			recs, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, 100)
			must(b, err)
			if want := min(n, 100); len(recs) != want || recs[0].Version != uint64(n) {
				b.Fatalf("the newest page of %d versions has %d records", n, len(recs))
			}
		}},
		{"HistoryPage: the 100 below version n/2+1 (the cursor paging reached)", func(n int, k engine.Key) {
			recs, _, err := e.HistoryPage(ctx, k, below[n], 100)
			must(b, err)
			if len(recs) == 0 || recs[0].Version != uint64(n-n/2) {
				b.Fatalf("the page after %d of %d versions starts at %v", n/2, n, recs)
			}
		}},
		{"History (every record)", func(n int, k engine.Key) {
			recs, err := e.History(ctx, k)
			must(b, err)
			if len(recs) != n {
				b.Fatalf("history has %d versions, want %d", len(recs), n)
			}
		}},
	}
	lat := make([][2][]time.Duration, len(ops))
	for range 20 {
		for _, x := range rand.Perm(2 * len(ops)) { // in random order: none always follows the same one (GC)
			i, j := x/2, x%2
			t0 := time.Now()
			ops[i].fn(sizes[j], keys[sizes[j]])
			lat[i][j] = append(lat[i][j], time.Since(t0))
		}
	}
	w := table(fmt.Sprintf("Finding a version and paging history, p50 of 20 interleaved (%s); entries left: %d and %d",
		uptime(), enginetest.Entries(b, l, keys[10]), enginetest.Entries(b, l, keys[10000])))
	fmt.Fprintln(w, "read\t10 versions\t10,000 versions\tratio")
	for i, o := range ops {
		a, z := p50(lat[i][0]), p50(lat[i][1])
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", o.what, ms(a), ms(z), ratio(z, a))
	}
	must(b, w.Flush())
}

// BenchmarkLogRange: is a batched read without headers ("no_hdr": true, nats-server ≥ 2.11) worth
// a read method of its own? The corpus's session read whole, as the engine reads it (485 entries
// without packs, or the default policy's packs), interleaved in random order, CP_BENCH_ROUNDS
// rounds (default 300): Log.Range (headers: each entry's sequence); the same batched direct get by
// hand, with headers and with no_hdr; and the engine's Read of the head, to weigh the saving.
//
//	go test -run '^$' -bench LogRange -benchtime 1x ./internal/logstore/
func BenchmarkLogRange(b *testing.B) {
	c := loadCorpus(b)
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	l := openLog(b, nc)
	rounds := 300
	if s, err := strconv.Atoi(os.Getenv("CP_BENCH_ROUNDS")); err == nil && s > 0 {
		rounds = s
	}
	sessions := []struct {
		name string
		cfg  engine.Config
	}{{"485 saves, no packs", engine.Config{NoPack: true}}, {"the default packs", engine.Config{}}}
	for i, s := range sessions {
		k := engine.Key{Namespace: "bench", Session: "range" + strconv.Itoa(i), Agent: "main"}
		e := engine.New(l, s.cfg)
		c.saveAll(b, e, k)
		var n, size int
		must(b, l.Range(ctx, k, 0, 0, func(en engine.Entry) bool { n++; size += len(en.Data); return true }))
		subject := "cp.log.bench.range" + strconv.Itoa(i) + ".main"
		byHand := func(noHdr bool) func() {
			return func() {
				if got := batchByHand(b, nc, subject, noHdr); got != size {
					b.Fatalf("read %d bytes, not %d", got, size)
				}
			}
		}
		variants := []struct {
			what string
			fn   func()
		}{
			{"Log.Range (headers)", func() { must(b, l.Range(ctx, k, 0, 0, func(engine.Entry) bool { return true })) }},
			{"batch by hand, headers", byHand(false)},
			{"batch by hand, no_hdr", byHand(true)},
			{"engine Read of the head (read + decode, CRC-32C)", func() {
				_, _, err := e.Read(ctx, k, 0, engine.ReadOptions{})
				must(b, err)
			}},
		}
		lat := make([][]time.Duration, len(variants))
		for range rounds {
			for _, j := range rand.Perm(len(variants)) { // no variant always follows the same one (GC)
				t0 := time.Now()
				variants[j].fn()
				lat[j] = append(lat[j], time.Since(t0))
			}
		}
		w := table(fmt.Sprintf("Reading a session of %s: %d entries, %d bytes (%s, %d rounds, interleaved)", s.name, n, size, uptime(), rounds))
		fmt.Fprintln(w, "what\tp50\tp99\tp50 / no_hdr")
		base := p50(lat[2])
		for j, v := range variants {
			a, z := percentiles(lat[j])
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.what, ms(a), ms(z), ratio(a, base))
		}
		must(b, w.Flush())
	}
}

// batchByHand reads subject whole with batched direct gets (as Log.Range does, without its
// checks), with or without headers, and returns the bytes read.
func batchByHand(b *testing.B, nc *nats.Conn, subject string, noHdr bool) int {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	must(b, err)
	defer func() { _ = sub.Unsubscribe() }()
	req := fmt.Sprintf(`{"seq":1,"next_by_subj":%q,"batch":1024,"max_bytes":8388608,"no_hdr":%v}`, subject, noHdr)
	must(b, nc.PublishRequest("$JS.API.DIRECT.GET.CP_LOG", inbox, []byte(req)))
	n := 0
	for {
		m, err := sub.NextMsg(10 * time.Second)
		must(b, err)
		switch m.Header.Get("Status") {
		case "":
			n += len(m.Data)
		case "204", "404":
			return n
		default:
			b.Fatalf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
}

// BenchmarkHistoryNewest: the newest 10 records of a session of 1,000 versions (232 entries since
// the last pack) and of 10,239 (255: the longest tail of the default packs) against one of 10,
// interleaved in random order, p50 of CP_BENCH_ROUNDS rounds (default 200): HistoryPage of 10
// (issue 12's target: ≤ 2× the 10 versions'), Version of the head − 5, and HistoryPage of 100
// (by back pointer too since checkpointd 0.5: about 152 entries read, not the tail's 232 and 255).
// Also what a walk is made of: a Get
// of one entry, and a Range of the 10-version session's entries.
//
//	go test -run '^$' -bench HistoryNewest -benchtime 1x ./internal/logstore/
func BenchmarkHistoryNewest(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	l := openLog(b, benchConnect(b, srv.s.ClientURL()))
	e := engine.New(l, engine.Config{})
	sizes := []int{10, 1000, 10239}
	keys := sessionsOfVersions(b, e, "newest", sizes)
	page := func(limit int) func(n int, k engine.Key) {
		return func(n int, k engine.Key) {
			recs, _, err := e.HistoryPage(ctx, k, engine.HistoryCursor{}, limit)
			must(b, err)
			if len(recs) != min(n, limit) || recs[0].Version != uint64(n) {
				b.Fatalf("the newest %d of %d versions: %d records", limit, n, len(recs))
			}
		}
	}
	ops := []struct {
		what string
		fn   func(n int, k engine.Key)
	}{
		{"HistoryPage: the newest 10", page(10)},
		{"Version head − 5 (the record alone)", func(n int, k engine.Key) {
			rec, err := e.Version(ctx, k, uint64(n-5))
			must(b, err)
			if rec.Version != uint64(n-5) {
				b.Fatal("wrong version")
			}
		}},
		{"HistoryPage: the newest 100", page(100)},
		{"Log.Get of the last entry", func(n int, k engine.Key) {
			last, err := l.Last(ctx, k)
			must(b, err)
			_, err = l.Get(ctx, k, last.Seq)
			must(b, err)
		}},
	}
	rounds := 200
	if s := os.Getenv("CP_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	lat := make([][][]time.Duration, len(ops))
	for i := range lat {
		lat[i] = make([][]time.Duration, len(sizes))
	}
	for range rounds {
		for _, x := range rand.Perm(len(sizes) * len(ops)) { // in random order: none always follows the same one (GC)
			i, j := x/len(sizes), x%len(sizes)
			t0 := time.Now()
			ops[i].fn(sizes[j], keys[sizes[j]])
			lat[i][j] = append(lat[i][j], time.Since(t0))
		}
	}
	w := table(fmt.Sprintf("The newest records, p50 of %d interleaved (%s); entries left: %d, %d and %d",
		rounds, uptime(), enginetest.Entries(b, l, keys[10]), enginetest.Entries(b, l, keys[1000]), enginetest.Entries(b, l, keys[10239])))
	fmt.Fprintln(w, "read\t10 versions\t1,000 versions\t10,239 versions\tratios")
	for i, o := range ops {
		a, m, z := p50(lat[i][0]), p50(lat[i][1]), p50(lat[i][2])
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s, %s\n", o.what, ms(a), ms(m), ms(z), ratio(m, a), ratio(z, a))
	}
	must(b, w.Flush())
}

// sessionsOfVersions saves a session of n versions for each n of sizes (one small message per
// save, packed by e's policy), named prefix + n, and empties e's cache.
func sessionsOfVersions(b *testing.B, e *engine.Engine, prefix string, sizes []int) map[int]engine.Key {
	keys := map[int]engine.Key{}
	for _, n := range sizes {
		k := engine.Key{Namespace: "bench", Session: prefix + strconv.Itoa(n), Agent: "main"}
		for i := 0; i < n; i++ {
			saveAndPack(b, e, engine.SaveRequest{Key: k, SaveID: strconv.Itoa(i), Base: enginetest.U64(uint64(i)), Payload: enginetest.Array(i, i+1), Now: time.Now()})
		}
		keys[n] = k
	}
	e.Forget()
	return keys
}

// BenchmarkFirstSave: the daemon benchmark's first saves and restores of a one-save session
// (checkpointbench's rows "first save" and "restore head"), on the engine alone: the three corpus
// files saved whole into a new session (Expected 0, as a client creating it), against zstd of the
// same bytes + one sync publish; then Read and ReadZstd of such a session's head against one
// direct get of the same zstd frame, decoded or not. Interleaved, CP_BENCH_ROUNDS rounds (40);
// CP_BENCH_FILE runs only the files whose name contains it.
func BenchmarkFirstSave(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	js, err := jetstream.New(nc)
	must(b, err)
	raws, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"},
		Storage: jetstream.FileStorage, AllowDirect: true})
	must(b, err)
	l := openLog(b, nc)
	rounds := 40
	if n, err := strconv.Atoi(os.Getenv("CP_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	for _, file := range []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"} {
		if only := os.Getenv("CP_BENCH_FILE"); only != "" && !strings.Contains(file, only) {
			continue
		}
		body, err := os.ReadFile(filepath.Join("../../testdata/corpus", file))
		must(b, err)
		c, err := codec.Parse(body)
		must(b, err)
		conv := append(append([]byte{'['}, c.Span(0, len(c.Messages))...), ']') // canonical, as stored
		e, fast := engine.New(l, engine.Config{}), engine.New(l, engine.Config{FastSaves: true})
		restored := engine.Key{Namespace: "bench", Session: "restore-" + file, Agent: "main"}
		_, err = e.Save(ctx, engine.SaveRequest{Key: restored, Expected: enginetest.U64(0), Payload: conv, Now: time.Now()})
		must(b, err)
		_, err = js.Publish(ctx, "raw.whole."+strconv.Itoa(len(conv)), codec.CompressZstd(conv))
		must(b, err)
		var t, r timings
		for i := range rounds {
			t.time("raw: zstd + sync publish", func() {
				_, err := js.Publish(ctx, "raw.first", codec.CompressZstd(conv))
				must(b, err)
			})
			t.time("engine Save, new session (default)", func() {
				k := engine.Key{Namespace: "bench", Session: fmt.Sprintf("first-%s-%d", file, i), Agent: "main"}
				_, err := e.Save(ctx, engine.SaveRequest{Key: k, Expected: enginetest.U64(0), Payload: conv, Now: time.Now()})
				must(b, err)
			})
			t.time("engine Save, new session, FastSaves", func() {
				k := engine.Key{Namespace: "bench", Session: fmt.Sprintf("fast-%s-%d", file, i), Agent: "main"}
				_, err := fast.Save(ctx, engine.SaveRequest{Key: k, Expected: enginetest.U64(0), Payload: conv, Now: time.Now()})
				must(b, err)
			})
			r.time("raw: direct get", func() {
				m, err := raws.GetLastMsgForSubject(ctx, "raw.whole."+strconv.Itoa(len(conv)))
				must(b, err)
				_ = m.Data
			})
			r.time("raw: direct get + zstd decode", func() {
				m, err := raws.GetLastMsgForSubject(ctx, "raw.whole."+strconv.Itoa(len(conv)))
				must(b, err)
				out, err := codec.DecompressZstd(m.Data, 64<<20)
				must(b, err)
				if len(out) != len(conv) {
					b.Fatal("raw: wrong size")
				}
			})
			r.time("engine Read of the head", func() {
				got, _, err := e.Read(ctx, restored, 0, engine.ReadOptions{})
				must(b, err)
				if len(got) != len(conv) {
					b.Fatal("Read: wrong size")
				}
			})
			r.time("engine ReadZstd of the head", func() {
				_, _, err := e.ReadZstd(ctx, restored, 0)
				must(b, err)
			})
		}
		t.print(b, fmt.Sprintf("First save of %s (%d B)", file, len(conv)), "raw: zstd + sync publish")
		r.print(b, fmt.Sprintf("Restore of a one-save session, %s (%d B)", file, len(conv)), "raw: direct get + zstd decode")
	}
}
