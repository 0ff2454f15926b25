package logstore_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/enginetest"
	"github.com/checkpointd/checkpointd/internal/logstore"
)

// What the benchmarks share: the corpus, an embedded server in a directory of its own, and the
// figures (percentiles, du, bytes written, load). The benchmarks measure the real parts —
// engine.Engine over logstore.Log on an embedded nats-server in this process — against the raw
// JetStream operation on the same bytes, interleaved, so that their ratio holds on a busy machine.

// corpus is the real conversation (testdata/corpus/pi_before_compaction.json, 1,003 messages,
// 2.3 MB) and its saves, one after every assistant turn: save i adds messages cuts[i-1]..cuts[i]-1.
type corpus struct {
	conv *codec.Conversation
	cuts []int
}

func loadCorpus(b *testing.B) corpus {
	b.Helper()
	raw, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	must(b, err)
	c, err := codec.Parse(raw)
	must(b, err)
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

// save returns the JSON array of the messages save i adds: what a client sends as an append.
func (c corpus) save(i int) []byte {
	from := 0
	if i > 0 {
		from = c.cuts[i-1]
	}
	return append(append([]byte{'['}, c.conv.Span(from, c.cuts[i])...), ']')
}

// version is the conversation after save i (version i+1).
func (c corpus) version(i int) []byte {
	return append(append([]byte{'['}, c.conv.Span(0, c.cuts[i])...), ']')
}

// request is save i of the corpus as an append to version i.
func (c corpus) request(k engine.Key, i int) engine.SaveRequest {
	return engine.SaveRequest{Key: k, SaveID: "turn-" + strconv.Itoa(i), Base: enginetest.U64(uint64(i)), Payload: c.save(i), Now: time.Now()}
}

// saveAll saves the whole corpus into k, packing when due, as the daemon does after answering.
func (c corpus) saveAll(b *testing.B, e *engine.Engine, k engine.Key) {
	for i := range c.cuts {
		saveAndPack(b, e, c.request(k, i))
	}
}

// saveAndPack saves, then packs if the save says so.
func saveAndPack(b *testing.B, e *engine.Engine, req engine.SaveRequest) engine.Saved {
	saved, err := e.Save(ctx, req)
	must(b, err)
	if saved.PackDue {
		_, err = e.Pack(ctx, req.Key, false)
		must(b, err)
	}
	return saved
}

// benchServer is an embedded nats-server as the daemon runs it, in a directory on disk.
type benchServer struct {
	dir string
	s   *server.Server
}

func startBenchServer(b *testing.B, dir string) *benchServer {
	b.Helper()
	s, err := logstore.StartEmbedded(dir)
	must(b, err)
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
	must(b, err)
	b.Cleanup(nc.Close)
	return nc
}

func openLog(b *testing.B, nc *nats.Conn) *logstore.Log {
	b.Helper()
	l, err := logstore.OpenLog(ctx, nc, logstore.LogConfig{})
	must(b, err)
	return l
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// percentiles returns p50 and p99 of ds.
func percentiles(ds []time.Duration) (time.Duration, time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

func p50(ds []time.Duration) time.Duration { p, _ := percentiles(ds); return p }

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }

func table(title string) *tabwriter.Writer {
	fmt.Printf("\n%s\n", title)
	return tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
}

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

// print writes p50, p99 and their ratios to those of the variant named base.
func (t *timings) print(b *testing.B, title, base string) {
	raw50, raw99 := percentiles(t.lat[base])
	w := table(fmt.Sprintf("%s, %d rounds interleaved (%s)", title, len(t.lat[base]), uptime()))
	fmt.Fprintln(w, "what\tp50\tp99\tp50 / raw\tp99 / raw")
	for _, name := range t.order {
		a, z := percentiles(t.lat[name])
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", name, ms(a), ms(z), ratio(a, raw50), ratio(z, raw99))
	}
	must(b, w.Flush())
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
		return "load ?"
	}
	f := strings.Fields(string(b))
	return "load " + strings.Join(f[:3], " ")
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
