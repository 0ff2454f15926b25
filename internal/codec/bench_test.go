package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// benchFiles are the corpus files the save benchmarks of issue 12 use: 19 KB, 599 KB and 2.3 MB.
var benchFiles = []string{"openhands_gui_todo_app.json", "claude_code_spotter_258c7280.json", "pi_before_compaction.json"}

// compactFixture returns the compact form of a corpus file: what an SDK (json.Marshal,
// JSON.stringify) sends on a first save.
func compactFixture(b *testing.B, name string) []byte {
	b.Helper()
	in, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
	require.NoError(b, err)
	var out bytes.Buffer
	require.NoError(b, json.Compact(&out, in))
	return out.Bytes()
}

// BenchmarkParseCorpus measures ParseLimited on the compact corpus files, each beside the floors
// under it on the same bytes: json.Valid (what encoding/json can do at best), utf8.Valid, and
// validCompact (the syntax scan alone, without the dialect's checks). The validator before its
// rewrite (a frozen copy with a differential test and fuzzer against the new one, both clean) is
// in the history at commit b12c8a9, internal/codec/internal/oldcodec.
func BenchmarkParseCorpus(b *testing.B) {
	for _, name := range benchFiles {
		in := compactFixture(b, name)
		spaced, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
		require.NoError(b, err)
		run := func(sub string, fn func() bool) {
			b.Run(name+"/"+sub, func(b *testing.B) {
				b.SetBytes(int64(len(in))) // the compact size, also for the spaced file: MB/s compare
				b.ReportAllocs()
				for b.Loop() {
					if !fn() {
						b.Fatal("refused")
					}
				}
			})
		}
		run("ParseLimited", func() bool {
			_, err := ParseLimited(in, Limits{MaxBytes: 64 << 20})
			return err == nil
		})
		run("ParseLimited-spaced", func() bool { // the file as it is, with white space to remove
			_, err := ParseLimited(spaced, Limits{MaxBytes: 64 << 20})
			return err == nil
		})
		// What a save's engine asks for: the parse and the strings it stores as values (32 KiB or
		// more), read again after the parse as it was, or noted by the parse's scan as it is.
		run("ParseLimited+LargeStrings-2-passes", func() bool {
			c, err := ParseLimited(in, Limits{MaxBytes: 64 << 20})
			_ = LargeStrings(c.Span(0, len(c.Messages)), 32<<10)
			return err == nil
		})
		run("ParseLimited+LargeStrings-noted", func() bool {
			c, err := ParseLimited(in, Limits{MaxBytes: 64 << 20, LargeStrings: 32 << 10})
			_ = c.LargeStrings(0, len(c.Messages), 32<<10)
			return err == nil
		})
		run("scan", func() bool { return validCompact(in) })
		run("json.Valid", func() bool { return json.Valid(in) })
		run("utf8.Valid", func() bool { return utf8.Valid(in) })
	}
}

// TestParseLimited_ConcurrentParsesShareNothing: parses running at once (the daemon's request
// goroutines) each get their own tape and member buffer from the pool: every result is the one a
// parse alone gives. Run with -race to see the pool keep them apart.
func TestParseLimited_ConcurrentParsesShareNothing(t *testing.T) {
	var payloads [][]byte
	for _, name := range []string{"openhands_gui_todo_app.json", "swe_agent_marshmallow_fc.json", "gemini_cli_codemie_session.json"} {
		in, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
		require.NoError(t, err)
		var c bytes.Buffer
		require.NoError(t, json.Compact(&c, in))
		payloads = append(payloads, in, c.Bytes())
	}
	want := make([]string, len(payloads))
	for i, p := range payloads {
		c, err := Parse(p)
		require.NoError(t, err)
		want[i] = fmt.Sprintf("%+v %q", c.Stats(), c.Encode())
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 4 {
		wg.Go(func() {
			for k := range 20 {
				i := (g + k) % len(payloads)
				c, err := Parse(payloads[i])
				if err != nil {
					errs <- err.Error()
					return
				}
				if got := fmt.Sprintf("%+v %q", c.Stats(), c.Encode()); got != want[i] {
					errs <- fmt.Sprintf("payload %d parsed differently beside other parses", i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkParsePairs measures ParseLimited as a grouped save's engine calls it (docs/format.md
// §8.15t): the 2.3 MB conversation's messages two at a time, compact, each pair an append
// (Continues) with the large strings noted, as issue 12's "50 agents" row sends them.
func BenchmarkParsePairs(b *testing.B) {
	c, err := Parse(compactFixture(b, "pi_before_compaction.json"))
	require.NoError(b, err)
	var pairs [][]byte
	total := 0
	for i := 0; i+2 <= len(c.Messages); i += 2 {
		pairs = append(pairs, append(append([]byte{'['}, c.Span(i, i+2)...), ']'))
		total += len(pairs[len(pairs)-1])
	}
	lim := Limits{MaxBytes: 64 << 20, Continues: true, LargeStrings: 32 << 10}
	b.SetBytes(int64(total / len(pairs)))
	b.ReportAllocs()
	runtime.LockOSThread() // the thread's CPU time is the parses' (steadier than the clock on a shared machine)
	defer runtime.UnlockOSThread()
	start := threadCPU(b)
	n := 0
	for b.Loop() {
		if _, err := ParseLimited(pairs[n%len(pairs)], lim); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(threadCPU(b)-start)/float64(n), "cpu-ns/op")
}

// threadCPU is the CPU time the calling thread has used, in nanoseconds (user and system).
func threadCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1
