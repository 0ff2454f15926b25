package checkpoint

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// FuzzBundleImport fuzzes ReadBundle, the reading and verification of a bundle file before an
// import. Whatever the bytes: no panic; a refusal matches ErrBadBundle; every version handed on
// hashes to its record; and what it allocates is bounded by the bytes it actually got (the file's
// and their decompression's), never by a size the file merely declares.
//
//	go test -run '^$' -fuzz FuzzBundleImport -fuzztime 3m ./checkpoint/
func FuzzBundleImport(f *testing.F) {
	good := seedBundles(f)
	for _, b := range good {
		f.Add(b)
		f.Add(b[:len(b)/2])                                              // truncated
		f.Add(append(bytes.Clone(b[:len(b)-8]), 0, 1, 2, 3, 4, 5, 6, 7)) // a bad checksum
	}
	f.Add([]byte{})
	f.Add([]byte("not a bundle"))
	f.Add(zstdOf(f, tarOf(f, tarEntry{name: bundleHeaderName, data: []byte(`{"format":"checkpointd-bundle","version":2}`)})))
	// A header that declares an entry of 2 GiB, followed by a few bytes.
	f.Add(zstdOf(f, tarOf(f, tarEntry{name: bundleHeaderName, size: maxBundleEntry, data: []byte(`{}`)})))

	f.Fuzz(func(t *testing.T, data []byte) {
		received := int64(len(data)) + decompressedSize(data)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadBundle(bytes.NewReader(data), func(rec Version, conv []byte) error {
			if wire.Hash(conv) != rec.Hash {
				t.Fatalf("version %d of %s handed on with hash %s, its record says %s", rec.Version, rec.Key, wire.Hash(conv), rec.Hash)
			}
			return nil
		})
		runtime.ReadMemStats(&after)
		if err != nil && !errors.Is(err, ErrBadBundle) {
			t.Fatalf("untyped refusal: %v", err)
		}
		// The zstd decoder's own buffers (a frame may declare a window of up to the 64 MiB
		// ReadBundle allows, and a 10-byte one does), plus a few copies of what was received.
		if allocated, limit := int64(after.TotalAlloc-before.TotalAlloc), 160<<20+8*received; allocated > limit {
			t.Fatalf("allocated %d bytes reading a bundle of %d bytes (%d decompressed): more than %d", allocated, len(data), received-int64(len(data)), limit)
		}
	})
}

// TestReadBundle_DeclaredSizeIsNotAllocated: an entry's size in its tar header is the file's word;
// a few bytes declaring 2 GiB are refused as truncated without allocating 2 GiB.
func TestReadBundle_DeclaredSizeIsNotAllocated(t *testing.T) {
	data := zstdOf(t, tarOf(t, tarEntry{name: bundleHeaderName, size: maxBundleEntry, data: []byte(`{}`)}))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadBundle(bytes.NewReader(data), nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadBundle) {
		t.Fatalf("want ErrBadBundle, got %v", err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<20 {
		t.Fatalf("a %d-byte bundle made ReadBundle allocate %d bytes", len(data), allocated)
	}
}

// decompressedSize is how many bytes data decompresses to (up to 256 MiB; 0 if it is not zstd).
func decompressedSize(data []byte) int64 {
	zr, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return 0
	}
	defer zr.Close()
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, 256<<20))
	return n
}

// seedBundles builds real bundles from the corpus: one session of three versions (whole, then
// appended), and two sessions.
func seedBundles(tb testing.TB) [][]byte {
	files, err := filepath.Glob("../testdata/corpus/*.json")
	if err != nil || len(files) == 0 {
		tb.Fatalf("corpus: %v", err)
	}
	var sessions [][]byte // conversations, per session: the messages of one transcript
	for _, name := range []string{"openhands_gui_todo_app.json", "swe_agent_marshmallow_fc.json"} {
		data, err := os.ReadFile(filepath.Join("../testdata/corpus", name))
		if err != nil {
			tb.Fatal(err)
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(data, &msgs); err != nil {
			tb.Fatal(err)
		}
		compact, _ := json.Marshal(msgs[:min(9, len(msgs))])
		sessions = append(sessions, compact)
	}
	one := buildBundle(tb, sessions[:1])
	two := buildBundle(tb, sessions)
	return [][]byte{one, two}
}

// buildBundle writes a bundle as Export does: each session's conversation in three versions, a
// third, two thirds and all of its messages, the later ones as appends.
func buildBundle(tb testing.TB, convs [][]byte) []byte {
	var entries []tarEntry
	header, _ := json.Marshal(bundleHeader{Format: BundleFormat, Version: BundleVersion, Created: time.Unix(1700000000, 0).UTC(), Source: "fuzz"})
	entries = append(entries, tarEntry{name: bundleHeaderName, data: header})
	man := bundleManifest{Format: BundleFormat, Version: BundleVersion}
	for s, conv := range convs {
		var msgs []json.RawMessage
		if err := json.Unmarshal(conv, &msgs); err != nil {
			tb.Fatal(err)
		}
		key := Key{Namespace: wire.DefaultNamespace, Session: fmt.Sprintf("fuzz-%d", s), Agent: wire.DefaultAgent}
		bs := BundleSession{Key: key}
		var prev []byte
		for v := 1; v <= 3; v++ {
			whole, _ := json.Marshal(msgs[:len(msgs)*v/3])
			rec := Version{Format: wire.VersionFormat, Key: key, Version: uint64(v), Parent: uint64(v - 1), Hash: wire.Hash(whole),
				SaveID: fmt.Sprintf("s%d", v), Reason: wire.ReasonTurn, Created: time.Unix(1700000000+int64(v), 0).UTC(), RawBytes: int64(len(whole))}
			base, body := uint64(0), whole
			if tail, ok := appended(prev, whole); ok {
				base, body = uint64(v-1), tail
			}
			data, err := encodeEntry(rec, base, body)
			if err != nil {
				tb.Fatal(err)
			}
			entries = append(entries, tarEntry{name: fmt.Sprintf("versions/%06d.json", len(entries)), data: data})
			bs.Versions, bs.Head, prev = append(bs.Versions, uint64(v)), rec.Hash, whole
		}
		man.Sessions = append(man.Sessions, bs)
	}
	for _, e := range entries {
		man.Entries = append(man.Entries, manifestEntry{Name: e.name, Size: int64(len(e.data)), SHA256: wire.Hash(e.data)})
	}
	data, _ := json.Marshal(man)
	entries = append(entries, tarEntry{name: bundleManifestName, data: data})
	b := zstdOf(tb, tarOf(tb, entries...))
	if _, err := ReadBundle(bytes.NewReader(b), nil); err != nil {
		tb.Fatalf("the seed bundle is not good: %v", err)
	}
	return b
}

// tarEntry is one file of a tar archive; size, when set, is declared instead of len(data).
type tarEntry struct {
	name string
	size int64
	data []byte
}

func tarOf(tb testing.TB, entries ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		size := int64(len(e.data))
		if e.size != 0 {
			size = e.size
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			tb.Fatal(err)
		}
		_, _ = tw.Write(e.data)
		if e.size != 0 {
			// A lying header: the archive ends here, short of what it declared.
			tw.Flush()
			return buf.Bytes()
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func zstdOf(tb testing.TB, data []byte) []byte {
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(data, nil)
}
