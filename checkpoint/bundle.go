package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// A bundle is a portable copy of sessions: a zstd-compressed tar archive of
//
//	checkpointd-bundle.json   the header: {"format":"checkpointd-bundle","version":1,...}
//	versions/000001.json      one entry per version, sessions one after another, oldest first:
//	...                       {"record":<version record>,"base":N,"messages":[...]} where messages
//	                          are those appended to version N (the session's previous entry), or
//	                          the whole conversation when base is 0
//	manifest.json             last: the size and SHA-256 of every entry, and the sessions
//
// docs/format.md describes it in full. Reading verifies everything (entry checksums, each version's
// conversation against its hash) before anything is imported.

// Bundle format identifiers.
const (
	BundleFormat  = "checkpointd-bundle"
	BundleVersion = 1
)

const (
	bundleHeaderName   = "checkpointd-bundle.json"
	bundleManifestName = "manifest.json"
	maxBundleEntry     = 1 << 31 // bytes; an entry is one version's new messages
)

// ErrBadBundle matches every refusal of a bundle file: corrupt, truncated, or of an unknown version.
var ErrBadBundle = errors.New("bad bundle")

type bundleHeader struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Source  string    `json:"source,omitempty"`
}

type bundleEntry struct {
	Record   Version         `json:"record"`
	Base     uint64          `json:"base"`
	Messages json.RawMessage `json:"messages"`
}

type bundleManifest struct {
	Format   string          `json:"format"`
	Version  int             `json:"version"`
	Entries  []manifestEntry `json:"entries"`
	Sessions []BundleSession `json:"sessions"`
}

type manifestEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // "sha256:<hex>" of the entry's bytes
}

// BundleSession is one session in a bundle: its key and the versions it holds, oldest first.
type BundleSession struct {
	Key      Key      `json:"key"`
	Versions []uint64 `json:"versions"`
	Head     string   `json:"head"` // the hash of the last version
}

// BundleSummary is what a bundle holds.
type BundleSummary struct {
	Created  time.Time
	Source   string
	Sessions []BundleSession
	Versions int
	Bytes    int64 // conversation bytes of every version, whole
}

// ExportOptions control Export.
type ExportOptions struct {
	HeadOnly bool   // only each session's head version (default: every version kept)
	Source   string // recorded in the bundle's header: where it came from
	// Progress, when set, is called after each version written.
	Progress func(key Key, version uint64, bytes int64)
	// RedactImagePaths replaces every image member naming a local file (an absolute path or a
	// file: URL) by a marker keeping only its extension, as checkpointd --image-paths redact does;
	// the bundle's records then carry the redacted conversations' hashes (redact.go).
	RedactImagePaths bool
}

// Export writes the sessions of keys, with every version they keep (or their heads), to w as a
// bundle. Each version's conversation is verified against its hash as it is read.
func (c *Client) Export(ctx context.Context, w io.Writer, keys []Key, o ExportOptions) (BundleSummary, error) {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return BundleSummary{}, err
	}
	tw := tar.NewWriter(zw)
	o.Source = PublicURL(o.Source) // a bundle travels: never with a password in it
	sum := BundleSummary{Created: time.Now().UTC(), Source: o.Source}
	man := bundleManifest{Format: BundleFormat, Version: BundleVersion}
	put := func(name string, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: sum.Created, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
		man.Entries = append(man.Entries, manifestEntry{Name: name, Size: int64(len(data)), SHA256: wire.Hash(data)})
		return nil
	}
	header, _ := json.Marshal(bundleHeader{Format: BundleFormat, Version: BundleVersion, Created: sum.Created, Source: o.Source})
	if err := put(bundleHeaderName, header); err != nil {
		return sum, err
	}
	for _, key := range keys {
		hist, err := c.History(ctx, key)
		if err != nil {
			return sum, fmt.Errorf("session %s: %w", key, err)
		}
		if o.HeadOnly {
			hist = hist[len(hist)-1:]
		}
		bs := BundleSession{Key: hist[0].Key}
		var prev []byte
		var prevVersion uint64
		for _, v := range hist {
			conv, _, err := c.Restore(ctx, key, v.Version)
			if err != nil {
				return sum, fmt.Errorf("session %s: version %d: %w", key, v.Version, err)
			}
			if o.RedactImagePaths {
				if conv, v, err = redactImagePaths(conv, v); err != nil {
					return sum, err
				}
			}
			base, msgs := uint64(0), conv
			if tail, ok := appended(prev, conv); ok {
				base, msgs = prevVersion, tail
			}
			data, err := encodeEntry(v, base, msgs)
			if err != nil {
				return sum, err
			}
			if err := put(fmt.Sprintf("versions/%06d.json", len(man.Entries)), data); err != nil {
				return sum, err
			}
			bs.Versions = append(bs.Versions, v.Version)
			bs.Head = v.Hash
			sum.Versions++
			sum.Bytes += int64(len(conv))
			prev, prevVersion = conv, v.Version
			if o.Progress != nil {
				o.Progress(v.Key, v.Version, int64(len(conv)))
			}
		}
		man.Sessions = append(man.Sessions, bs)
	}
	sum.Sessions = man.Sessions
	data, _ := json.Marshal(man)
	if err := put(bundleManifestName, data); err != nil {
		return sum, err
	}
	if err := tw.Close(); err != nil {
		return sum, err
	}
	return sum, zw.Close()
}

// encodeEntry writes a version entry by hand: json.Marshal would re-escape the messages (<, >, &),
// and they must stay the bytes their hash was taken of.
func encodeEntry(rec Version, base uint64, msgs []byte) ([]byte, error) {
	r, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(r)+len(msgs)+64)
	out = append(append(append(out, `{"record":`...), r...), `,"base":`...)
	out = strconv.AppendUint(out, base, 10)
	out = append(append(append(out, `,"messages":`...), msgs...), '}')
	return out, nil
}

// appended returns the messages conv adds to prev, as a JSON array, when conv extends prev; both
// are canonical, so extending is a byte prefix.
func appended(prev, conv []byte) ([]byte, bool) {
	n := len(prev) - 1 // prev without "]"
	if len(prev) < 3 || len(conv) <= n+1 || conv[n] != ',' || !bytes.Equal(conv[:n], prev[:n]) {
		return nil, false
	}
	return append([]byte("["), conv[n+1:]...), true
}

// ReadBundle reads a bundle from r and verifies it: its header's format and version, every entry
// against the manifest, and every version's conversation against the hash its record holds. each,
// when not nil, is called with every version as it is read, in order; a bundle is only known good
// once ReadBundle returns nil, so to import nothing partially, verify first (each nil) and read
// again to import. Refusals match ErrBadBundle and say what was wrong and where.
func ReadBundle(r io.Reader, each func(rec Version, conv []byte) error) (BundleSummary, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return BundleSummary{}, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadBundle, fmt.Sprintf(format, args...))
	}
	var (
		sum     BundleSummary
		seen    []manifestEntry
		derived []BundleSession // the sessions, as the entries hold them
		man     *bundleManifest
		prev    []byte // the conversation of the entry before (the last version of derived's last session)
	)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, bad("entry %d: %v (truncated or corrupt)", i, err)
		}
		if man != nil {
			return sum, bad("entry %q after the manifest", hdr.Name)
		}
		if hdr.Size < 0 || hdr.Size > maxBundleEntry {
			return sum, bad("entry %q: size %d", hdr.Name, hdr.Size)
		}
		// The size is the file's word: read what is there, growing as it comes, so a few bytes
		// declaring 2 GiB cost a few bytes.
		data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err == nil && int64(len(data)) < hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return sum, bad("entry %q: %v (truncated or corrupt)", hdr.Name, err)
		}
		switch {
		case i == 0:
			var h bundleHeader
			if hdr.Name != bundleHeaderName || json.Unmarshal(data, &h) != nil || h.Format != BundleFormat {
				return sum, bad("not a checkpointd bundle: the first entry is %q, not %s", hdr.Name, bundleHeaderName)
			}
			if h.Version != BundleVersion {
				return sum, bad("bundle version %d (this checkpointctl reads version %d)", h.Version, BundleVersion)
			}
			sum.Created, sum.Source = h.Created, h.Source
		case hdr.Name == bundleManifestName:
			man = &bundleManifest{}
			if err := json.Unmarshal(data, man); err != nil {
				return sum, bad("manifest: %v", err)
			}
			continue // not listed in itself
		default:
			var e bundleEntry
			if err := json.Unmarshal(data, &e); err != nil {
				return sum, bad("entry %q: %v", hdr.Name, err)
			}
			key := e.Record.Key
			conv := []byte(e.Messages)
			if e.Base != 0 {
				n := len(derived)
				if n == 0 || derived[n-1].Key != key || derived[n-1].Versions[len(derived[n-1].Versions)-1] != e.Base {
					return sum, bad("entry %q: version %d of %s extends version %d, which is not the entry before it", hdr.Name, e.Record.Version, key, e.Base)
				}
				if len(conv) < 2 || conv[0] != '[' {
					return sum, bad("entry %q: messages are not a JSON array", hdr.Name)
				}
				if len(conv) == 2 {
					conv = prev
				} else {
					conv = append(append(bytes.Clone(prev[:len(prev)-1]), ','), conv[1:]...)
				}
			}
			if got := wire.Hash(conv); got != e.Record.Hash {
				return sum, bad("entry %q: version %d of %s hashes to %s, its record says %s", hdr.Name, e.Record.Version, key, got, e.Record.Hash)
			}
			prev = conv // a session's entries are consecutive: only the last conversation is kept
			if n := len(derived); n == 0 || derived[n-1].Key != key {
				derived = append(derived, BundleSession{Key: key})
			}
			d := &derived[len(derived)-1]
			d.Versions, d.Head = append(d.Versions, e.Record.Version), e.Record.Hash
			sum.Versions++
			sum.Bytes += int64(len(conv))
			if each != nil {
				if err := each(e.Record, conv); err != nil {
					return sum, err
				}
			}
		}
		seen = append(seen, manifestEntry{Name: hdr.Name, Size: hdr.Size, SHA256: wire.Hash(data)})
	}
	if man == nil {
		return sum, bad("no manifest: the bundle is truncated")
	}
	if man.Format != BundleFormat || man.Version != BundleVersion {
		return sum, bad("manifest of format %q version %d", man.Format, man.Version)
	}
	if len(man.Entries) != len(seen) {
		return sum, bad("the manifest lists %d entries, the bundle holds %d", len(man.Entries), len(seen))
	}
	for i, want := range man.Entries {
		if seen[i] != want {
			return sum, bad("entry %q: size %d and %s, the manifest says %q: size %d and %s", seen[i].Name, seen[i].Size, seen[i].SHA256, want.Name, want.Size, want.SHA256)
		}
	}
	// The sessions are what the entries hold; the manifest must say the same.
	if !slices.EqualFunc(derived, man.Sessions, func(a, b BundleSession) bool {
		return a.Key == b.Key && a.Head == b.Head && slices.Equal(a.Versions, b.Versions)
	}) {
		return sum, bad("the manifest's sessions do not match the entries")
	}
	sum.Sessions = derived
	return sum, nil
}

// ImportOptions control ImportBundle.
type ImportOptions struct {
	DryRun bool // verify the bundle and check it against the sessions here; import nothing
	// Progress, when set, is called after each version imported.
	Progress func(key Key, version uint64, bytes int64)
}

// ImportBundle imports the bundle file at path. It verifies the whole bundle first and checks each
// of its sessions against the one here (a session here must be the same history, possibly shorter
// or longer); only then does it import, so a corrupt or truncated bundle, or one that contradicts
// what is stored, imports nothing. Versions already here are skipped: importing twice is harmless.
// It returns the bundle's summary and how many versions it imported (with DryRun: would import).
func (c *Client) ImportBundle(ctx context.Context, path string, o ImportOptions) (BundleSummary, int, error) {
	read := func(each func(Version, []byte) error) (BundleSummary, error) {
		f, err := os.Open(path)
		if err != nil {
			return BundleSummary{}, err
		}
		defer f.Close()
		return ReadBundle(f, each)
	}
	records := map[Key]map[uint64]string{} // hashes by version, for the checks
	sum, err := read(func(rec Version, _ []byte) error {
		if records[rec.Key] == nil {
			records[rec.Key] = map[uint64]string{}
		}
		records[rec.Key][rec.Version] = rec.Hash
		return nil
	})
	if err != nil {
		return sum, 0, fmt.Errorf("%s: %w", path, err)
	}
	have := map[Key]uint64{}
	for _, s := range sum.Sessions {
		head, err := c.Get(ctx, s.Key, 0)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return sum, 0, err
		}
		last := s.Versions[len(s.Versions)-1]
		n := min(head.Version, last)
		mine, err := c.Get(ctx, s.Key, n)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return sum, 0, err
		}
		if theirs, ok := records[s.Key][n]; err != nil || !ok || mine.Hash != theirs {
			return sum, 0, &Error{Code: wire.CodeConflict, Head: head.Version, Index: -1, Offset: -1,
				Message: fmt.Sprintf("session %s: version %d here is not version %d of the bundle: they are different sessions; nothing was imported", s.Key, n, n)}
		}
		if last > head.Version {
			if err := notMoved(ctx, c, s.Key); err != nil {
				return sum, 0, err
			}
		}
		have[s.Key] = head.Version
	}
	if o.DryRun {
		n := 0
		for key, versions := range records {
			for v := range versions {
				if v > have[key] {
					n++
				}
			}
		}
		return sum, n, nil
	}
	imported := 0
	source := filepath.Base(path)
	_, err = read(func(rec Version, conv []byte) error {
		if rec.Version <= have[rec.Key] {
			return nil
		}
		if _, err := c.Import(ctx, rec.Key, rec, conv, wire.ReasonImport, source); err != nil {
			return fmt.Errorf("importing version %d of %s: %w", rec.Version, rec.Key, err)
		}
		imported++
		if o.Progress != nil {
			o.Progress(rec.Key, rec.Version, int64(len(conv)))
		}
		return nil
	})
	return sum, imported, err
}

// notMoved refuses a session sealed as moved: its versions live elsewhere now.
func notMoved(ctx context.Context, c *Client, key Key) error {
	key = key.WithDefaults()
	agents, err := c.list(ctx, wire.APISubject(key.Namespace, wire.OpList), key.Session)
	if err != nil {
		return err
	}
	for _, a := range agents {
		if a.Key == key && a.Moved != nil {
			return &Error{Code: wire.CodeMoved, MovedTo: a.Moved.To, Index: -1, Offset: -1,
				Message: fmt.Sprintf("session %s moved to %s: import the bundle there; nothing was imported", key, a.Moved.To)}
		}
	}
	return nil
}
