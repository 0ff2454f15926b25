package logstore_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/logstore"
)

// BenchmarkSessionsAtScale: does one subject per session hold at 100k sessions, and what does
// listing a namespace cost? (docs/format.md §8.15b)
//
//	go test -run '^$' -bench SessionsAtScale -benchtime 1x ./internal/logstore/
//	CP_BENCH_SESSIONS=1000,10000,100000 go test -run '^$' -bench SessionsAtScale -benchtime 1x -timeout 30m ./internal/logstore/
//
// Two embedded servers run in this process: a reference store that keeps 1,000 sessions, and a
// store grown to each scale in CP_BENCH_SESSIONS (default 1000,10000). Each store holds namespace
// "a" (the scale's sessions, one real ~1 KB save entry each, created by logstore.Log.Append: the
// index entry, then the log's first entry) and three other namespaces of 1,000 sessions. The
// operations on the two stores are interleaved, so their ratio is what to read on a busy machine:
// Log.Last and a compare-and-swap Log.Append on existing sessions; listing namespace a with
// Log.Sessions (keys only) and engine.Sessions (keys, then the page's heads: one Log.Lasts).
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
	ref := newScaleStore(b, nil)
	entry := ref.realEntry(b)
	ref.entry = entry
	ref.populate(b)
	ref.grow(b, 1000)
	big := newScaleStore(b, entry)
	big.populate(b)
	fmt.Printf("\nSessions at scale (%s; entry %d B; servers in this process, GOMAXPROCS %d)\n", uptime(), len(entry), runtime.GOMAXPROCS(0))

	for _, n := range scales {
		g := big.grow(b, n)
		w := table("Growth, restart and disk of the grown store (heap: runtime.MemStats.HeapAlloc after GC, whole process)")
		fmt.Fprintln(w, "sessions in ns a\tcreated/s\theap Δ per added subject\tVmRSS\tdu\tindex.db\trestart until STREAM.INFO answers\tthe same without index.db\theap Δ per subject after restart")
		fmt.Fprintf(w, "%d\t%.0f\t%.0f B\t%.1f MB\t%.1f MB\t%.1f kB\t%s\t%s\t%.0f B\n", n, g.rate, g.heapPerSubject,
			float64(vmRSS(b))/1e6, float64(du(b, big.dir))/1e6, float64(g.indexDB)/1e3,
			ms(g.restart), ms(g.recover), g.heapAfterRestart)
		must(b, w.Flush())

		w2 := table(fmt.Sprintf("Point operations, p50 of 200 interleaved: the store at %d against the store at 1,000 (%s)", n, uptime()))
		fmt.Fprintln(w2, "operation\tat 1,000\tat "+strconv.Itoa(n)+"\tratio")
		for _, op := range interleavedOps(b, ref, big) {
			fmt.Fprintf(w2, "%s\t%s\t%s\t%s\n", op.what, ms(op.ref), ms(op.big), ratio(op.big, op.ref))
		}
		must(b, w2.Flush())

		w3 := table(fmt.Sprintf("Listing namespace a (%d sessions), p50 of 5 interleaved (%s)", n, uptime()))
		fmt.Fprintln(w3, "how\tpage\tat 1,000\tat "+strconv.Itoa(n)+"\tratio\tgot (big)")
		for _, f := range interleavedLists(b, ref, big) {
			fmt.Fprintf(w3, "%s\t%s\t%s\t%s\t%s\t%d\n", f.how, f.page, ms(f.ref), ms(f.big), ratio(f.big, f.ref), f.got)
		}
		must(b, w3.Flush())
	}
}

// scaleStore is one embedded server with the log stream, through logstore.Log and an engine.
type scaleStore struct {
	srv      *benchServer
	dir      string
	nc       *nats.Conn
	log      *logstore.Log
	e        *engine.Engine
	entry    []byte
	sessions int                   // in namespace a
	seqs     map[engine.Key]uint64 // last sequence of the sessions the point operations write to
}

func newScaleStore(b *testing.B, entry []byte) *scaleStore {
	s := &scaleStore{dir: b.TempDir(), entry: entry, seqs: map[engine.Key]uint64{}}
	s.start(b)
	return s
}

func (s *scaleStore) start(b *testing.B) {
	s.srv = startBenchServer(b, s.dir)
	s.nc = benchConnect(b, s.srv.s.ClientURL())
	s.log = openLog(b, s.nc)
	s.e = engine.New(s.log, engine.Config{})
}

// populate creates the three other namespaces.
func (s *scaleStore) populate(b *testing.B) {
	for _, ns := range []string{"b", "c", "d"} {
		s.create(b, ns, 0, 1000)
	}
}

// realEntry is the entry a session's first save writes (one message of ~1.4 KB of varied text),
// taken from the log: every session of the benchmark gets a copy (an entry does not name its key).
func (s *scaleStore) realEntry(b *testing.B) []byte {
	var text strings.Builder
	for i := 0; text.Len() < 1400; i++ {
		fmt.Fprintf(&text, "%d %x ", i*7919, i*104729)
	}
	k := engine.Key{Namespace: "x", Session: "s", Agent: "main"}
	_, err := s.e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "1", Now: time.Now(),
		Payload: []byte(fmt.Sprintf(`[{"role":"user","content":[{"type":"text","text":%q}]}]`, text.String()))})
	must(b, err)
	last, err := s.log.Last(ctx, k)
	must(b, err)
	return last.Data
}

func sessionKey(ns string, i int) engine.Key {
	return engine.Key{Namespace: ns, Session: "s" + strconv.Itoa(i), Agent: "main"}
}

// create writes sessions from..to-1 of ns with Log.Append (its index entry, then the log's first
// entry), from 32 goroutines.
func (s *scaleStore) create(b *testing.B, ns string, from, to int) {
	const workers = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + w; i < to; i += workers {
				k := sessionKey(ns, i)
				seq, err := s.log.Append(ctx, k, s.entry, 0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("creating %s: %w", k, err)
				}
				if ns == "a" && i < 200 {
					s.seqs[k] = seq
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	must(b, firstErr)
}

type growth struct {
	rate             float64 // sessions created per second
	heapPerSubject   float64
	restart          time.Duration
	indexDB          int64         // bytes of index.db after the clean shutdown
	recover          time.Duration // the same without index.db (as after a crash, at worst)
	heapAfterRestart float64       // heap Δ per subject, the server stopped and started again
}

// grow creates namespace a's sessions up to n, then restarts the server, cleanly and then
// without its index.db.
func (s *scaleStore) grow(b *testing.B, n int) growth {
	before := heapAlloc()
	t0 := time.Now()
	s.create(b, "a", s.sessions, n)
	added := n - s.sessions
	g := growth{rate: float64(added) / time.Since(t0).Seconds()}
	g.heapPerSubject = float64(int64(heapAlloc())-int64(before)) / float64(added)
	s.sessions = n

	s.nc.Close()
	s.srv.stop()
	withoutServer := heapAlloc()
	t0 = time.Now()
	s.start(b) // OpenLog answers once the stream is there (STREAM.INFO, then CreateOrUpdate)
	g.restart = time.Since(t0)
	g.indexDB = indexDBSize(s.dir)
	g.heapAfterRestart = float64(int64(heapAlloc())-int64(withoutServer)) / float64(n+3000)

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
	g.recover = time.Since(t0)
	return g
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
	what     string
	ref, big time.Duration
}

// interleavedOps times Log.Last and a compare-and-swap Log.Append of the ~1 KB entry on both
// stores, one after the other, 200 times.
func interleavedOps(b *testing.B, ref, big *scaleStore) []opFigure {
	var last, cas [2][]time.Duration
	for i := range 200 {
		k := sessionKey("a", i%200)
		for j, s := range []*scaleStore{ref, big} {
			t0 := time.Now()
			en, err := s.log.Last(ctx, k)
			last[j] = append(last[j], time.Since(t0))
			must(b, err)
			if en.Seq != s.seqs[k] {
				b.Fatalf("%s: last entry %d, want %d", k, en.Seq, s.seqs[k])
			}
			t0 = time.Now()
			seq, err := s.log.Append(ctx, k, s.entry, s.seqs[k])
			cas[j] = append(cas[j], time.Since(t0))
			must(b, err)
			s.seqs[k] = seq
		}
	}
	return []opFigure{
		{"Log.Last (direct get last_by_subj)", p50(last[0]), p50(last[1])},
		{"Log.Append, compare-and-swap (~1 KB)", p50(cas[0]), p50(cas[1])},
	}
}

type listFigure struct {
	how, page string
	ref, big  time.Duration
	got       int
}

// interleavedLists lists namespace a on both stores: a first page of keys (Log.Sessions), a
// first page of heads (engine.Sessions), and every head, page after page.
func interleavedLists(b *testing.B, ref, big *scaleStore) []listFigure {
	keys := func(s *scaleStore, page int) int {
		ks, _, err := s.log.Sessions(ctx, "a", 0, page)
		must(b, err)
		return len(ks)
	}
	heads := func(s *scaleStore, page int) int {
		if page > 0 {
			hs, _, err := s.e.Sessions(ctx, "a", 0, page)
			must(b, err)
			return len(hs)
		}
		n := 0
		for cursor := uint64(0); ; {
			hs, next, err := s.e.Sessions(ctx, "a", cursor, 1000)
			must(b, err)
			n += len(hs)
			if next == 0 {
				return n
			}
			cursor = next
		}
	}
	ways := []struct {
		how   string
		pages []int
		fn    func(*scaleStore, int) int
	}{
		{"Log.Sessions: keys", []int{100, 1000}, keys},
		{"engine.Sessions: keys, then Log.Lasts of the page", []int{100, 1000, 0}, heads},
	}
	var out []listFigure
	for _, way := range ways {
		for _, page := range way.pages {
			f := listFigure{how: way.how, page: strconv.Itoa(page)}
			if page == 0 {
				f.page = "all (pages of 1,000)"
			}
			var ds [2][]time.Duration
			for range 5 {
				for j, s := range []*scaleStore{ref, big} {
					t0 := time.Now()
					got := way.fn(s, page)
					ds[j] = append(ds[j], time.Since(t0))
					if j == 1 {
						f.got = got
					}
				}
			}
			f.ref, f.big = p50(ds[0]), p50(ds[1])
			out = append(out, f)
		}
	}
	return out
}
