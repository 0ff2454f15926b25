package logstore

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkSessionsAtScale: does one subject per session hold at 100k sessions, and how are a
// namespace's sessions listed? (docs/format.md §8.15b)
//
//	go test -run '^$' -bench SessionsAtScale -benchtime 1x ./internal/logstore/
//	CP_BENCH_SESSIONS=1000,10000,100000 go test -run '^$' -bench SessionsAtScale -benchtime 1x -timeout 30m ./internal/logstore/
//
// Two embedded servers run in this process: a reference store that keeps 1,000 sessions, and a
// store grown to each scale in CP_BENCH_SESSIONS (default 1000,10000). Each store holds the
// listed namespace "a" (the scale's sessions, one ~1 KB save entry each on cp.log.a.s<i>.main)
// and three other namespaces of 1,000 sessions each. Every session's creation also writes one
// entry to an index subject cp.idx.<ns> (its token), for listing option (c). Operations on the
// two stores are interleaved, so their ratio is what to read on a busy machine.
func BenchmarkSessionsAtScale(b *testing.B) {
	scales := []int{1000, 10000}
	if env := os.Getenv("CP_BENCH_SESSIONS"); env != "" {
		scales = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			must(b, err)
			scales = append(scales, n)
		}
	}
	entry := scaleEntry(b)
	fmt.Printf("\nSessions at scale (%s; entry %d B; server in this process, GOMAXPROCS %d)\n", uptime(), len(entry), runtime.GOMAXPROCS(0))

	ref := newScaleStore(b, entry)
	ref.grow(b, 1000)
	big := newScaleStore(b, entry)

	for _, n := range scales {
		g := big.grow(b, n)
		w := table("Growth, restart and disk of the grown store (heap: runtime.MemStats.HeapAlloc after GC, whole process)")
		fmt.Fprintln(w, "sessions in ns a\tcreated/s\theap Δ per added subject\tVmRSS\tdu\tindex.db\trestart until STREAM.INFO answers\tthe same without index.db\theap Δ per subject after restart")
		fmt.Fprintf(w, "%d\t%.0f\t%.0f B\t%.1f MB\t%.1f MB\t%.1f kB\t%s\t%s\t%.0f B\n", n, g.rate, g.heapPerSubject,
			float64(vmRSS(b))/1e6, float64(du(b, big.dir))/1e6, float64(g.indexDB)/1e3,
			ms(g.restart), ms(g.recover), g.heapAfterRestart)
		must(b, w.Flush())

		w2 := table(fmt.Sprintf("Point operations, p50 of 200 interleaved: the store at %d against the store at 1,000", n))
		fmt.Fprintln(w2, "operation\tat 1,000\tat "+strconv.Itoa(n)+"\tratio")
		for _, op := range interleavedOps(b, ref, big) {
			fmt.Fprintf(w2, "%s\t%s\t%s\t%.2f×\n", op.name, ms(op.ref), ms(op.big), float64(op.big)/float64(op.ref))
		}
		must(b, w2.Flush())

		w3 := table(fmt.Sprintf("Listing namespace a (%d sessions) and its heads, p50 of 5 interleaved", n))
		fmt.Fprintln(w3, "how\tpage\tat 1,000\tat "+strconv.Itoa(n)+"\tratio\theads got (big)\tnote")
		for _, l := range interleavedLists(b, ref, big) {
			fmt.Fprintf(w3, "%s\t%s\t%s\t%s\t%.2f×\t%d\t%s\n", l.how, l.page, ms(l.ref), ms(l.big),
				float64(l.big)/float64(l.ref), l.got, l.note)
		}
		must(b, w3.Flush())
	}
}

// scaleEntry is a real save entry of ~1 KB (one message of varied text), as a session's first
// save writes it: published as is to every session of the benchmark.
func scaleEntry(b *testing.B) []byte {
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	st := open(b, nc, Config{})
	var text strings.Builder
	for i := 0; text.Len() < 1400; i++ {
		fmt.Fprintf(&text, "%d %x ", i*7919, i*104729)
	}
	msg := fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q}]}`, text.String())
	k := wire.Key{Namespace: "x", Session: "s", Agent: "main"}
	_, err := st.Save(context.Background(), SaveRequest{Key: k, SaveID: "1", Messages: [][]byte{[]byte(msg)}})
	must(b, err)
	body, _, err := st.getLast(context.Background(), LogSubject(k))
	must(b, err)
	srv.stop()
	return body
}

// scaleStore is one embedded server with the log stream (cp.log.> and the index cp.idx.>).
type scaleStore struct {
	srv      *benchServer
	dir      string
	nc       *nats.Conn
	js       jetstream.JetStream
	entry    []byte
	sessions int               // in namespace a
	seqs     map[string]uint64 // last sequence of the sessions the point operations write to
}

const scaleStream = "CP_LOG"

func newScaleStore(b *testing.B, entry []byte) *scaleStore {
	s := &scaleStore{dir: b.TempDir(), entry: entry, seqs: map[string]uint64{}}
	s.start(b)
	cfg := StreamConfig(Config{})
	cfg.Subjects = append(cfg.Subjects, "cp.idx.>")
	addStream(b, s.js, cfg)
	for _, ns := range []string{"b", "c", "d"} {
		s.create(b, ns, 0, 1000)
	}
	return s
}

func (s *scaleStore) start(b *testing.B) {
	s.srv = startBenchServer(b, s.dir)
	s.nc = benchConnect(b, s.srv.s.ClientURL())
	js, err := jetstream.New(s.nc, jetstream.WithPublishAsyncMaxPending(4096))
	must(b, err)
	s.js = js
}

func sessionSubject(ns string, i int) string { return fmt.Sprintf("cp.log.%s.s%d.main", ns, i) }

// create writes sessions from..to-1 of ns: each its index entry, then its first save as a
// compare-and-swap on an empty subject, all as async publishes.
func (s *scaleStore) create(b *testing.B, ns string, from, to int) {
	var acks []jetstream.PubAckFuture
	check := func() {
		<-s.js.PublishAsyncComplete()
		for _, a := range acks {
			select {
			case ack := <-a.Ok():
				if subj := a.Msg().Subject; strings.HasPrefix(subj, "cp.log.a.s") && len(s.seqs) < 200 {
					s.seqs[subj] = ack.Sequence
				}
			case err := <-a.Err():
				b.Fatalf("creating %s: %v", a.Msg().Subject, err)
			}
		}
		acks = acks[:0]
	}
	for i := from; i < to; i++ {
		a, err := s.js.PublishAsync("cp.idx."+ns, []byte("s"+strconv.Itoa(i)))
		must(b, err)
		acks = append(acks, a)
		a, err = s.js.PublishAsync(sessionSubject(ns, i), s.entry, jetstream.WithExpectLastSequencePerSubject(0))
		must(b, err)
		acks = append(acks, a)
		if len(acks) >= 8192 {
			check()
		}
	}
	check()
}

type growth struct {
	rate             float64 // sessions created per second
	heapPerSubject   float64
	restart          time.Duration
	indexDB          int64         // bytes of index.db after the clean shutdown
	recover          time.Duration // the same without index.db (as after a crash, at worst)
	heapAfterRestart float64       // heap Δ per subject of namespace a, the server stopped and started again
}

// grow creates namespace a's sessions up to n, then restarts the server.
func (s *scaleStore) grow(b *testing.B, n int) growth {
	before := heapAlloc()
	t0 := time.Now()
	s.create(b, "a", s.sessions, n)
	added := n - s.sessions
	g := growth{rate: float64(added) / time.Since(t0).Seconds()}
	g.heapPerSubject = float64(int64(heapAlloc())-int64(before)) / float64(added)
	s.sessions = n

	// Restart: the server stopped (it writes index.db), started on the same directory.
	s.nc.Close()
	s.srv.stop()
	withoutServer := heapAlloc()
	t0 = time.Now()
	s.start(b)
	s.waitStream(b)
	g.restart = time.Since(t0)
	g.indexDB = indexDBSize(s.dir)
	g.heapAfterRestart = float64(int64(heapAlloc())-int64(withoutServer)) / float64(n+3000)

	// The worst case after a crash: no index.db, the state rebuilt from the blocks.
	s.nc.Close()
	s.srv.stop()
	must(b, filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "index.db" {
			return os.Remove(path)
		}
		return err
	}))
	t0 = time.Now()
	s.start(b)
	s.waitStream(b)
	g.recover = time.Since(t0)
	return g
}

// waitStream waits until the stream answers STREAM.INFO.
func (s *scaleStore) waitStream(b *testing.B) {
	for {
		if _, err := s.js.Stream(context.Background(), scaleStream); err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// vmRSS is the process's resident set (/proc/self/status), in bytes.
func vmRSS(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// indexDBSize is the size of the stream's index.db (the stream state written at shutdown).
func indexDBSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "index.db" {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

type opFigure struct {
	name     string
	ref, big time.Duration
}

// interleavedOps times a last_by_subj direct get and a compare-and-swap publish on both stores,
// one after the other, 200 times.
func interleavedOps(b *testing.B, ref, big *scaleStore) []opFigure {
	var get, cas [2][]time.Duration
	subjects := slices.Sorted(func(yield func(string) bool) {
		for subj := range ref.seqs {
			if _, ok := big.seqs[subj]; ok && !yield(subj) {
				return
			}
		}
	})
	for i := 0; i < 200; i++ {
		subj := subjects[i%len(subjects)]
		for j, s := range []*scaleStore{ref, big} {
			t0 := time.Now()
			m, err := s.nc.Request("$JS.API.DIRECT.GET."+scaleStream, []byte(`{"last_by_subj":`+strconv.Quote(subj)+`}`), 5*time.Second)
			must(b, err)
			get[j] = append(get[j], time.Since(t0))
			if _, _, err := directReply(m, subj); err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			ack, err := s.js.Publish(context.Background(), subj, s.entry, jetstream.WithExpectLastSequencePerSubject(s.seqs[subj]))
			must(b, err)
			cas[j] = append(cas[j], time.Since(t0))
			s.seqs[subj] = ack.Sequence
		}
	}
	p := func(ds []time.Duration) time.Duration { d, _ := percentiles(ds); return d }
	return []opFigure{
		{"direct get last_by_subj", p(get[0]), p(get[1])},
		{"CAS publish (~1 KB)", p(cas[0]), p(cas[1])},
	}
}

type listFigure struct {
	how, page string
	ref, big  time.Duration
	got       int
	note      string
}

// A lister returns up to page heads of namespace a (page 0: all), and a note.
type lister func(b *testing.B, s *scaleStore, page int) (int, string)

func interleavedLists(b *testing.B, ref, big *scaleStore) []listFigure {
	ways := []struct {
		how string
		l   lister
	}{
		{"(a) multi_last cp.log.a.>", listMultiLast},
		{"(b) STREAM.INFO subjects_filter, then multi_last of the page", listStreamInfo},
		{"(c) index subject cp.idx.a (batched direct get), then multi_last", listIndex},
	}
	var out []listFigure
	for _, way := range ways {
		for _, page := range []int{100, 1000, 0} {
			f := listFigure{how: way.how, page: strconv.Itoa(page)}
			if page == 0 {
				f.page = "all"
			}
			var ds [2][]time.Duration
			for range 5 {
				for j, s := range []*scaleStore{ref, big} {
					t0 := time.Now()
					got, note := way.l(b, s, page)
					ds[j] = append(ds[j], time.Since(t0))
					if j == 1 {
						f.got, f.note = got, note
					}
				}
			}
			f.ref, _ = percentiles(ds[0])
			f.big, _ = percentiles(ds[1])
			out = append(out, f)
		}
	}
	return out
}

// multiLast sends one multi_last direct get and returns the heads (checked to decode) and the
// final status: "" after an EOB, else the status and its description (413: more than 1,024).
func multiLast(b *testing.B, s *scaleStore, req map[string]any) (int, string) {
	body, err := json.Marshal(req)
	must(b, err)
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	must(b, err)
	defer func() { _ = sub.Unsubscribe() }()
	must(b, s.nc.PublishRequest("$JS.API.DIRECT.GET."+scaleStream, inbox, body))
	n := 0
	for {
		m, err := sub.NextMsg(30 * time.Second)
		must(b, err)
		if st := m.Header.Get("Status"); st != "" {
			if st == "204" {
				return n, ""
			}
			return n, st + " " + m.Header.Get("Description")
		}
		if _, _, _, err := decodeEntry(m.Data); err != nil {
			b.Fatalf("head %s: %v", m.Header.Get("Nats-Subject"), err)
		}
		n++
	}
}

// listMultiLast: (a) one multi_last over the namespace's wildcard.
func listMultiLast(b *testing.B, s *scaleStore, page int) (int, string) {
	req := map[string]any{"multi_last": []string{"cp.log.a.>"}}
	if page > 0 {
		req["batch"] = page
	}
	return multiLast(b, s, req)
}

// multiLastOf gets the heads of the given subjects, ≤ 1,024 a request.
func multiLastOf(b *testing.B, s *scaleStore, subjects []string) (int, string) {
	got := 0
	for len(subjects) > 0 {
		chunk := subjects[:min(len(subjects), 1024)]
		subjects = subjects[len(chunk):]
		n, note := multiLast(b, s, map[string]any{"multi_last": chunk})
		if note != "" {
			return got + n, note
		}
		got += n
	}
	return got, ""
}

// listStreamInfo: (b) the subject names from STREAM.INFO (pages of up to 100,000, sorted by
// the server when paging), the first page's heads by multi_last.
func listStreamInfo(b *testing.B, s *scaleStore, page int) (int, string) {
	var names []string
	var respBytes int
	for offset := 0; ; {
		m, err := s.nc.Request("$JS.API.STREAM.INFO."+scaleStream,
			[]byte(`{"subjects_filter":"cp.log.a.>","offset":`+strconv.Itoa(offset)+`}`), 30*time.Second)
		must(b, err)
		respBytes += len(m.Data)
		var resp struct {
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
			Total, Limit int
		}
		must(b, json.Unmarshal(m.Data, &resp))
		for subj := range resp.State.Subjects {
			names = append(names, subj)
		}
		offset += len(resp.State.Subjects)
		if len(resp.State.Subjects) == 0 || offset >= resp.Total || page > 0 && offset >= page {
			break
		}
	}
	slices.Sort(names)
	if page > 0 && len(names) > page {
		names = names[:page]
	}
	n, note := multiLastOf(b, s, names)
	return n, strings.TrimSpace(note + fmt.Sprintf(" STREAM.INFO replies %.0f kB", float64(respBytes)/1e3))
}

// listIndex: (c) the index subject cp.idx.a read from its first entry in batches (each entry a
// session token), the heads of each batch by multi_last.
func listIndex(b *testing.B, s *scaleStore, page int) (int, string) {
	got := 0
	for from := uint64(1); ; {
		want := 1000
		if page > 0 {
			want = min(page-got, 1000)
		}
		tokens, next, more := readIndex(b, s, from, want)
		subjects := make([]string, len(tokens))
		for i, t := range tokens {
			subjects[i] = "cp.log.a." + t + ".main"
		}
		n, note := multiLastOf(b, s, subjects)
		got += n
		if note != "" {
			return got, note
		}
		if !more || page > 0 && got >= page {
			return got, ""
		}
		from = next
	}
}

// readIndex reads up to batch entries of cp.idx.a from sequence from: their tokens, the
// sequence to go on from, and whether there are more.
func readIndex(b *testing.B, s *scaleStore, from uint64, batch int) ([]string, uint64, bool) {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	must(b, err)
	defer func() { _ = sub.Unsubscribe() }()
	must(b, s.nc.PublishRequest("$JS.API.DIRECT.GET."+scaleStream, inbox,
		[]byte(`{"seq":`+strconv.FormatUint(from, 10)+`,"next_by_subj":"cp.idx.a","batch":`+strconv.Itoa(batch)+`}`)))
	var tokens []string
	next := from
	for {
		m, err := sub.NextMsg(30 * time.Second)
		must(b, err)
		switch m.Header.Get("Status") {
		case "204":
			return tokens, next, m.Header.Get("Nats-Num-Pending") != "0"
		case "404":
			return tokens, next, false
		case "":
		default:
			b.Fatalf("index: status %s", m.Header.Get("Status"))
		}
		_, seq, err := directReply(m, "index")
		must(b, err)
		tokens, next = append(tokens, string(m.Data)), seq+1
	}
}

// BenchmarkHistoryPage: the 100 newest records of a session of 10 and of 10,000 versions, read
// by walking back the chain of packs that entries already carry (every entry's Head.Pack is the
// last pack before it, a pack's is the pack before it), against History, which reads every entry
// from the first (docs/format.md §8.15b).
//
//	go test -run '^$' -bench HistoryPage -benchtime 1x ./internal/logstore/
func BenchmarkHistoryPage(b *testing.B) {
	srv := startBenchServer(b, b.TempDir())
	nc := benchConnect(b, srv.s.ClientURL())
	st := open(b, nc, Config{})
	ctx := context.Background()
	keys := map[int]wire.Key{}
	for _, n := range []int{10, 10000} {
		k := wire.Key{Namespace: "bench", Session: "hist" + strconv.Itoa(n), Agent: "main"}
		for i := 0; i < n; i++ {
			_, err := st.Save(ctx, SaveRequest{Key: k, SaveID: strconv.Itoa(i), Messages: [][]byte{message(i)}})
			must(b, err)
			_, err = st.Pack(ctx, k, false)
			must(b, err)
		}
		keys[n] = k
	}
	var page, all [2][]time.Duration
	for range 20 {
		for j, n := range []int{10, 10000} {
			t0 := time.Now()
			recs := historyNewest(b, st, keys[n], 100)
			page[j] = append(page[j], time.Since(t0))
			if want := min(n, 100); len(recs) < want || recs[len(recs)-1].Version != uint64(n) || recs[len(recs)-want].Version != uint64(n-want+1) {
				b.Fatalf("the newest page of %d versions has %d records, last %d", n, len(recs), recs[len(recs)-1].Version)
			}
			t0 = time.Now()
			full, err := st.History(ctx, keys[n])
			must(b, err)
			all[j] = append(all[j], time.Since(t0))
			if len(full) != n {
				b.Fatalf("history has %d versions, want %d", len(full), n)
			}
		}
	}
	w := table(fmt.Sprintf("History of one session, p50 of 20 interleaved (%s)", uptime()))
	fmt.Fprintln(w, "read\t10 versions\t10,000 versions\tratio")
	p := func(ds []time.Duration) time.Duration { d, _ := percentiles(ds); return d }
	fmt.Fprintf(w, "newest 100 records, walking the pack chain\t%s\t%s\t%.2f×\n", ms(p(page[0])), ms(p(page[1])), float64(p(page[1]))/float64(p(page[0])))
	fmt.Fprintf(w, "History (all records, batch read from the first entry)\t%s\t%s\t%.2f×\n", ms(p(all[0])), ms(p(all[1])), float64(p(all[1]))/float64(p(all[0])))
	must(b, w.Flush())
}

// historyNewest returns at least the n newest records of k (all if it has fewer), oldest first:
// the head's entry names the last pack P; one batched read from P to the head gives P's records
// and the tail's; each further pack is one direct get by sequence, named by the pack after it.
func historyNewest(b *testing.B, st *Store, k wire.Key, n int) []Record {
	ctx := context.Background()
	subject := LogSubject(k)
	body, last, err := st.getLast(ctx, subject)
	must(b, err)
	head, err := decodeAt(subject, last, body)
	must(b, err)
	from := max(head.meta.Head.Pack, 1)
	entries, err := st.readLogFrom(ctx, subject, from, last, 0, nil)
	must(b, err)
	recs := records(b, live(entries))
	for prev := entries[0]; len(recs) < n && prev.kind == KindPack && prev.meta.Head.Pack != 0; {
		seq := prev.meta.Head.Pack
		body, _, err := st.directGet(ctx, `{"seq":`+strconv.FormatUint(seq, 10)+`}`)
		must(b, err)
		prev, err = decodeAt(subject, seq, body)
		must(b, err)
		recs = append(records(b, []entry{prev}), recs...)
	}
	return recs
}

// records lists the versions of save, fork and pack entries, oldest first.
func records(b *testing.B, entries []entry) []Record {
	var out []Record
	for _, e := range entries {
		switch e.kind {
		case KindPack:
			for _, p := range e.meta.Packed {
				out = append(out, p.Record)
			}
		case KindSave, KindFork:
			rec, err := recordOf(e.meta)
			must(b, err)
			out = append(out, rec)
		}
	}
	return out
}
