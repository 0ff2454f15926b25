package testenv

// The format-2 fixture (testdata/format2): a data directory written by checkpointd's five-bucket
// engine (docs/format.md §2–§6), and a manifest of everything it holds as clients see it. The
// engine that replaces format 2 must upgrade that directory (docs/format.md §8.17) and then serve
// exactly the manifest: CompareFormat2 is that check, and it takes only a client, so it runs
// unchanged against whichever engine serves the directory.

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Format2ManifestFormat is the version of manifest.json's own layout.
const Format2ManifestFormat = 1

// Format2Manifest is what a format-2 data directory holds, as the public client reports it.
type Format2Manifest struct {
	Format    int           `json:"format"` // Format2ManifestFormat
	WrittenBy Format2Writer `json:"writtenBy"`
	// Complete: the sessions listed are every session of the store, each with every version it
	// keeps. False for a directory left by a kill: it lists the saves acknowledged before the kill,
	// and a session may also hold later versions (saves queued before the kill, settled after it).
	Complete bool             `json:"complete"`
	Sessions []Format2Session `json:"sessions"`
	// Deleted sessions existed in the store and were deleted before it was captured: never served.
	Deleted []checkpoint.Key `json:"deleted,omitempty"`
	// QueuedSaves counts the saves a killed daemon left in CP_INGEST (not settled, or settled and
	// not yet removed from the stream): a daemon started on the store settles them first.
	// Information only.
	QueuedSaves int `json:"queuedSaves,omitempty"`
	// Storage says how format 2 stored each session (by key token), to show which layouts the
	// fixture covers. Information only: CompareFormat2 ignores it (a new engine has no layouts).
	Storage map[string]Format2Layout `json:"storage,omitempty"`
}

// Format2Writer says which code wrote the directory.
type Format2Writer struct {
	Commit     string    `json:"commit"` // git commit of checkpointd ("+dirty": with uncommitted changes)
	Daemon     string    `json:"daemon"` // the daemon's version string
	Records    int       `json:"recordFormat"`
	NATSServer string    `json:"natsServer"`
	Go         string    `json:"go"`
	At         time.Time `json:"at"`
	Command    string    `json:"command"` // what regenerates it
}

// Format2Session is one session: its lease, moved state and kept versions.
type Format2Session struct {
	Key checkpoint.Key `json:"key"`
	// Lease is the session's lease as LeaseStatus reports it (nil: never leased, epoch 0).
	Lease *checkpoint.LeaseInfo `json:"lease,omitempty"`
	Moved *wire.Moved           `json:"moved,omitempty"` // set once sealed (migrated away)
	// FirstVersion is the oldest version kept and Head the newest (0 and 0: a session leased
	// before its first save, which has no version and is not listed).
	FirstVersion uint64           `json:"firstVersion"`
	Head         uint64           `json:"head"`
	Versions     []Format2Version `json:"versions"`
}

// Format2Version is one kept version: its record (as History and `checkpointctl history --json`
// report it) and the SHA-256 of its conversation's bytes as Restore returns them.
type Format2Version struct {
	Record checkpoint.Version `json:"record"`
	SHA256 string             `json:"sha256"` // hex
}

// Format2Layout summarises a format-2 head (docs/format.md §3, "The head").
type Format2Layout struct {
	Version  uint64   `json:"version"`
	Gen      uint64   `json:"gen"`
	Extents  int      `json:"extents"`           // in the head's layout
	OldGens  []uint64 `json:"oldGens,omitempty"` // generations kept in cp_layouts
	Archives int      `json:"archives"`          // record archives
	Values   int      `json:"values"`            // value references in the head's layout
}

// CaptureFormat2 reads keys' sessions through c: lease, moved state and every kept version,
// each restored and hashed. A key with neither versions nor a lease is an error: capture only
// what exists.
func CaptureFormat2(ctx context.Context, c *checkpoint.Client, keys []checkpoint.Key) ([]Format2Session, error) {
	listed, err := listedSessions(ctx, ClientServed(c))
	if err != nil {
		return nil, err
	}
	out := make([]Format2Session, 0, len(keys))
	for _, k := range keys {
		s, err := captureSession(ctx, ClientServed(c), k.WithDefaults(), listed)
		if err != nil {
			return nil, err
		}
		if len(s.Versions) == 0 && s.Lease == nil {
			return nil, fmt.Errorf("session %s: no version and no lease: nothing to capture", k)
		}
		out = append(out, s)
	}
	return out, nil
}

// listedSessions is every session List reports, in every namespace, by key.
func listedSessions(ctx context.Context, c Served) (map[checkpoint.Key]checkpoint.Session, error) {
	all, err := c.ListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing every namespace: %w", err)
	}
	m := make(map[checkpoint.Key]checkpoint.Session, len(all))
	for _, s := range all {
		m[s.Key] = s
	}
	return m, nil
}

// captureSession reads one session, restoring every version it keeps.
func captureSession(ctx context.Context, c Served, k checkpoint.Key, listed map[checkpoint.Key]checkpoint.Session) (Format2Session, error) {
	s := Format2Session{Key: k, Versions: []Format2Version{}}
	lease, err := c.LeaseStatus(ctx, k)
	if err != nil {
		return s, fmt.Errorf("session %s: lease status: %w", k, err)
	}
	if lease.Epoch != 0 {
		s.Lease = &lease
	}
	if h, ok := listed[k]; ok {
		s.Moved = h.Moved
	}
	history, err := c.History(ctx, k)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return s, fmt.Errorf("session %s: history: %w", k, err)
	}
	for _, rec := range history {
		conv, err := c.Restore(ctx, k, rec.Version) // checks the bytes against rec's hash and size
		if err != nil {
			return s, fmt.Errorf("session %s: restoring version %d: %w", k, rec.Version, err)
		}
		sum := sha256.Sum256(conv)
		s.Versions = append(s.Versions, Format2Version{Record: rec, SHA256: hex.EncodeToString(sum[:])})
	}
	if n := len(s.Versions); n > 0 {
		s.FirstVersion, s.Head = s.Versions[0].Record.Version, s.Versions[n-1].Record.Version
	}
	return s, nil
}

// CompareFormat2 checks that the daemon c talks to serves exactly m: every session with its lease,
// moved state, first and last version, and every version's record and conversation (restored,
// hashed); no other session listed (when m.Complete); no deleted session served. It returns every
// difference found, joined, or nil.
func CompareFormat2(ctx context.Context, c *checkpoint.Client, m Format2Manifest) error {
	return compareFormat2(ctx, ClientServed(c), m, nil)
}

// compareFormat2 is CompareFormat2 on what s serves; norm, when set, is applied to both records
// of a version before they are compared (CompareFormat2Upgraded).
func compareFormat2(ctx context.Context, c Served, m Format2Manifest, norm func(checkpoint.Version) checkpoint.Version) error {
	if m.Format != Format2ManifestFormat {
		return fmt.Errorf("manifest format %d, this code reads %d", m.Format, Format2ManifestFormat)
	}
	listed, err := listedSessions(ctx, c)
	if err != nil {
		return err
	}
	var diffs []error
	want := map[checkpoint.Key]bool{}
	for _, ws := range m.Sessions {
		want[ws.Key] = true
		diffs = append(diffs, compareSession(ctx, c, ws, listed, m.Complete, norm)...)
	}
	if m.Complete {
		for k := range listed {
			if !want[k] {
				diffs = append(diffs, fmt.Errorf("session %s is listed but not in the manifest", k))
			}
		}
	}
	for _, k := range m.Deleted {
		if _, ok := listed[k]; ok {
			diffs = append(diffs, fmt.Errorf("deleted session %s is listed", k))
		}
		if _, err := c.Get(ctx, k, 0); !errors.Is(err, checkpoint.ErrNotFound) {
			diffs = append(diffs, fmt.Errorf("deleted session %s: get: want not_found, got %v", k, err))
		}
	}
	return errors.Join(diffs...)
}

// compareSession compares one session of the manifest with what is served. complete: the session
// must hold exactly the manifest's versions; else it may hold later ones too (each restored and
// checked against its own record).
func compareSession(ctx context.Context, c Served, want Format2Session, listed map[checkpoint.Key]checkpoint.Session, complete bool,
	norm func(checkpoint.Version) checkpoint.Version) []error {
	got, err := captureSession(ctx, c, want.Key, listed)
	if err != nil {
		return []error{err}
	}
	var diffs []error
	differ := func(what string, w, g any) {
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(g)
		if string(wj) != string(gj) {
			diffs = append(diffs, fmt.Errorf("session %s: %s: manifest %s, served %s", want.Key, what, wj, gj))
		}
	}
	_, isListed := listed[want.Key]
	differ("listed", len(want.Versions) > 0, isListed)
	differ("first version", want.FirstVersion, got.FirstVersion)
	if complete {
		differ("lease", want.Lease, got.Lease)
		differ("moved", want.Moved, got.Moved)
		differ("head", want.Head, got.Head)
		differ("versions", versionNumbers(want.Versions), versionNumbers(got.Versions))
	} else if got.Head < want.Head {
		diffs = append(diffs, fmt.Errorf("session %s: head %d, below the acknowledged version %d", want.Key, got.Head, want.Head))
	}
	for i, v := range got.Versions { // history has no gaps: retention only removes a prefix
		if v.Record.Version != got.FirstVersion+uint64(i) {
			diffs = append(diffs, fmt.Errorf("session %s: versions %v are not consecutive", want.Key, versionNumbers(got.Versions)))
			break
		}
	}
	served := map[uint64]Format2Version{}
	for _, v := range got.Versions {
		served[v.Record.Version] = v
	}
	for _, w := range want.Versions {
		g, ok := served[w.Record.Version]
		if !ok {
			diffs = append(diffs, fmt.Errorf("session %s: version %d is not served", want.Key, w.Record.Version))
			continue
		}
		wr, gr := w.Record, g.Record
		if norm != nil {
			wr, gr = norm(wr), norm(gr)
		}
		differ(fmt.Sprintf("version %d record", w.Record.Version), wr, gr)
		differ(fmt.Sprintf("version %d conversation sha256", w.Record.Version), w.SHA256, g.SHA256)
	}
	return diffs
}

func versionNumbers(vs []Format2Version) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = v.Record.Version
	}
	return out
}

// ReadFormat2Manifest reads a manifest.json.
func ReadFormat2Manifest(path string) (Format2Manifest, error) {
	var m Format2Manifest
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// fixtureEpoch is the modification time every entry of a fixture archive gets, so that the archive
// of a directory depends only on its files' names, modes and bytes.
var fixtureEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// WriteTarGz writes the regular files and directories under dir to path as a gzipped tar, in name
// order, with fixed times and owners; files whose base name is in skip are left out.
func WriteTarGz(path, dir string, skip ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error { // WalkDir goes in lexical order
		if err != nil || p == dir || slices.Contains(skip, d.Name()) {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: fixtureEpoch, Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return fmt.Errorf("%s: neither a file nor a directory", p)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

// ExtractTarGz unpacks the gzipped tar at path into dir: directories and regular files only, every
// name inside dir, at most maxBytes in all.
func ExtractTarGz(path, dir string, maxBytes int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		name := filepath.FromSlash(strings.TrimSuffix(hdr.Name, "/"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%s: entry %q is outside the directory", path, hdr.Name)
		}
		dst := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o750); err != nil {
				return err
			}
		case tar.TypeReg:
			if maxBytes -= hdr.Size; maxBytes < 0 {
				return fmt.Errorf("%s: more bytes than the limit", path)
			}
			if err := extractFile(dst, tr, hdr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q is neither a file nor a directory", path, hdr.Name)
		}
	}
}

func extractFile(dst string, r io.Reader, hdr *tar.Header) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode).Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, r, hdr.Size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
