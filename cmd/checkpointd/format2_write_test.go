package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// format2WriteEnv turns TestFormat2Fixture_Write on.
const format2WriteEnv = "CP_WRITE_FORMAT2_FIXTURE"

// format2WriteCommand regenerates the fixture (from the repository's root).
const format2WriteCommand = format2WriteEnv + "=1 go test -count=1 -run TestFormat2Fixture_Write ./cmd/checkpointd/"

// TestFormat2Fixture_Write regenerates testdata/format2: it runs checkpointd on a fresh data
// directory, writes through the public client everything format 2 stores (see writeFormat2Store),
// lets the housekeeping merge and archive some sessions, stops it cleanly, and writes the directory
// and its manifest; then the same for a directory left by a SIGKILL during a burst of saves. It
// ends by checking what it wrote as TestFormat2Fixture_Serves does.
func TestFormat2Fixture_Write(t *testing.T) {
	if os.Getenv(format2WriteEnv) == "" {
		t.Skipf("regenerates testdata/format2; run with %s=1", format2WriteEnv)
	}
	// The daemon now writes the log engine, not format 2: what this would write is no format-2
	// fixture. Regenerate it from a commit before the switch (testdata/format2/README.md names it).
	t.Fatalf("%s: this daemon writes the log engine (CP_LOG), not format 2; regenerate the fixture at the commit that wrote it (testdata/format2/README.md)", format2WriteEnv)
	require.NoError(t, os.MkdirAll(format2Fixture, 0o755))
	writer := fixtureWriter(t)

	m := writeFormat2Store(t, writer, filepath.Join(format2Fixture, "store.tar.gz"))
	writeJSON(t, filepath.Join(format2Fixture, "manifest.json"), m)
	began := time.Now()
	crash := writeFormat2Crash(t, writer, filepath.Join(format2Fixture, "crash.tar.gz"))
	t.Logf("crash variant written in %v", time.Since(began))
	writeJSON(t, filepath.Join(format2Fixture, "crash-manifest.json"), crash)
	writeFormat2Readme(t, m, crash)

	for _, v := range format2Variants {
		began := time.Now()
		checkFormat2Fixture(t, filepath.Join(format2Fixture, v.store), filepath.Join(format2Fixture, v.manifest))
		t.Logf("%s: %s, checked in %v", v.store, fileSize(t, filepath.Join(format2Fixture, v.store)), time.Since(began))
	}
}

// fixtureWriter says which code is writing the fixture.
func fixtureWriter(t *testing.T) testenv.Format2Writer {
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	require.NoError(t, err, "git rev-parse HEAD")
	w := testenv.Format2Writer{Commit: strings.TrimSpace(string(commit)), Daemon: transfer.DefaultConfig().Version,
		Records: wire.VersionFormat, NATSServer: server.VERSION, Go: runtime.Version(), At: time.Now().UTC().Truncate(time.Second),
		Command: format2WriteCommand}
	if status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(status) > 0 {
		w.Commit += "+dirty"
	}
	return w
}

// writeFormat2Store writes the fixture's main store to archive and returns its manifest.
//
// Phase one writes most sessions and waits until the daemon's housekeeping merged and archived
// them (idle merge after 2 s) and retention pruned the "retained" namespace (keep 3, every second).
// Phase two writes a few more saves and stops the daemon at once, so that some layouts are left as
// saves made them: many extents, busy merges, records not archived yet. A second, plain daemon
// then captures the manifest (reads change nothing stored) and the heads' layouts.
func writeFormat2Store(t *testing.T, writer testenv.Format2Writer, archive string) testenv.Format2Manifest {
	dir := filepath.Join(t.TempDir(), "data")
	d := startInProcess(t, dir, "--namespace-retention", "retained:keep=3", "--retention-interval", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := &scenario{t: t, ctx: ctx, url: d.url, c: d.client(t, checkpoint.WithWriter("fixture-writer/1"))}
	began := time.Now()
	w.phaseOne()
	t.Logf("phase one written in %v", time.Since(began))
	w.settle()
	w.phaseTwo()
	d.stop(t)
	t.Logf("phase two written and stopped after %v", time.Since(began))

	d = startInProcess(t, dir)
	c := d.client(t)
	sessions, err := testenv.CaptureFormat2(ctx, c, w.keys)
	require.NoError(t, err)
	storage := readLayouts(t, d.url)
	d.stop(t)
	t.Logf("captured after %v", time.Since(began))
	requireCoverage(t, storage)

	require.NoError(t, testenv.WriteTarGz(archive, dir, lockFileName))
	return testenv.Format2Manifest{Format: testenv.Format2ManifestFormat, WrittenBy: writer, Complete: true,
		Sessions: sessions, Deleted: w.deleted, Storage: storage}
}

// scenario writes the sessions of the fixture through the public client.
type scenario struct {
	t       *testing.T
	ctx     context.Context
	url     string
	c       *checkpoint.Client
	keys    []checkpoint.Key // every session that exists at the end, in the order first written
	deleted []checkpoint.Key
	clock   int64 // message timestamps: deterministic, so conversations hash the same on every run
}

// Namespaces and ids. Hostile ids have every character a NATS subject gives a meaning to.
const (
	nsTeam      = "team"
	nsOps       = "ops"
	nsOther     = "other"
	nsRetained  = "retained"
	nsHostile   = "tenant.β *>"
	hostileSess = "a.b c*>/ü 😀\t\"quoted\""
)

// key registers a session key of the fixture.
func (w *scenario) key(ns, session, agent string) checkpoint.Key {
	k := checkpoint.Key{Namespace: ns, Session: session, Agent: agent}.WithDefaults()
	for _, have := range w.keys {
		if have == k {
			return k
		}
	}
	w.keys = append(w.keys, k)
	return k
}

// msg is a native message with the next timestamp.
func (w *scenario) msg(role, text string) json.RawMessage {
	w.clock += 1000
	ts := 1767225600000 + w.clock // 2026-01-01
	var m map[string]any
	switch role {
	case "assistant":
		m = map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": text}},
			"stopReason": "stop", "model": "claude-sonnet-4-5", "provider": "anthropic",
			"usage": map[string]any{"input": 100, "output": len(text), "cache_read": 0, "cache_write": 0, "total_tokens": 100 + len(text)}}
	case "compaction":
		m = map[string]any{"role": "extension", "kind": "compaction", "data": map[string]any{"summary": text}}
	default:
		m = map[string]any{"role": role, "content": []any{map[string]any{"type": "text", "text": text}}}
	}
	m["timestamp"] = ts
	b, err := json.Marshal(m)
	require.NoError(w.t, err)
	return b
}

// turn is one exchange: a user message and the assistant's answer.
func (w *scenario) turn(i int, topic string) []json.RawMessage {
	return []json.RawMessage{w.msg("user", fmt.Sprintf("%s, question %d", topic, i)), w.msg("assistant", fmt.Sprintf("%s, answer %d", topic, i))}
}

// save stores the whole array through the shared client (which sends only what grew since its
// last save of the session, as agents do).
func (w *scenario) save(k checkpoint.Key, msgs []json.RawMessage, opts ...checkpoint.SaveOption) checkpoint.Version {
	w.t.Helper()
	v, err := w.c.Save(w.ctx, k, joinMessages(msgs), opts...)
	require.NoError(w.t, err, "saving %s", k)
	return v
}

// saveWhole stores the whole array through a new client, so that the daemon receives all of it and
// finds what is new itself.
func (w *scenario) saveWhole(k checkpoint.Key, msgs []json.RawMessage, opts ...checkpoint.SaveOption) checkpoint.Version {
	w.t.Helper()
	c, err := checkpoint.Connect(w.url, nil, checkpoint.WithWriter("fixture-whole/2"))
	require.NoError(w.t, err)
	defer c.Close()
	v, err := c.Save(w.ctx, k, joinMessages(msgs), opts...)
	require.NoError(w.t, err, "saving %s whole", k)
	return v
}

// append stores msgs as appended to version base.
func (w *scenario) append(k checkpoint.Key, base uint64, msgs ...json.RawMessage) checkpoint.Version {
	w.t.Helper()
	v, err := w.c.Append(w.ctx, k, base, joinMessages(msgs))
	require.NoError(w.t, err, "appending to %s", k)
	require.Equal(w.t, base+1, v.Version)
	return v
}

// chatAppends is phase one's long session: appends, whole-array saves, a rewrite and a compaction
// marker. Phase two appends to it again after it was archived.
var chatAppends = checkpoint.Key{Namespace: nsTeam, Session: "chat-appends", Agent: "main"}

func (w *scenario) phaseOne() {
	w.writeChat()
	w.writeCorpus()
	w.writeValues()
	w.writeDialects()
	w.writeLeases()
	w.writeImports()
	w.writeRetained()
	w.writeDeleted()
	w.writeHostile()
}

// writeChat: many versions of one conversation, saved every way a client can; 18 in phase one, so
// that the idle housekeeping archives their records (it waits for 16).
func (w *scenario) writeChat() {
	k := w.key(chatAppends.Namespace, chatAppends.Session, chatAppends.Agent)
	conv := w.turn(1, "chat")
	v := w.save(k, conv, checkpoint.WithReason("turn"))
	for i := 2; i <= 12; i++ { // appends: the body holds only the new messages
		msgs := w.turn(i, "chat")
		conv = append(conv, msgs...)
		v = w.append(k, v.Version, msgs...)
	}
	for i := 13; i <= 14; i++ { // whole arrays, from a client that never saved the session
		conv = append(conv, w.turn(i, "chat")...)
		v = w.saveWhole(k, conv)
	}
	// A rewrite: message 3 dropped and the last one changed (a new generation).
	rewritten := append(append([]json.RawMessage{}, conv[:2]...), conv[3:len(conv)-1]...)
	rewritten = append(rewritten, w.msg("assistant", "chat, answer 14, edited"))
	v = w.saveWhole(k, rewritten, checkpoint.WithReason("manual"))
	require.Equal(w.t, uint64(15), v.Version)
	conv = append(rewritten, w.turn(15, "chat")...)
	v = w.save(k, conv)
	conv = append(conv, w.msg("compaction", "The user asked fifteen questions about chat; all were answered."))
	v = w.save(k, conv)
	conv = append(conv, w.turn(16, "chat after compaction")...)
	w.save(k, conv, checkpoint.ExpectVersion(v.Version))
}

// fixtureTranscript is the real transcript of the fixture (19.5 KB; testdata/corpus/SOURCES.md),
// each message compacted.
func fixtureTranscript(t *testing.T) []json.RawMessage {
	data, err := os.ReadFile("../../testdata/corpus/openhands_gui_todo_app.json")
	require.NoError(t, err)
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(data, &msgs))
	for i, m := range msgs {
		var c bytes.Buffer
		require.NoError(t, json.Compact(&c, m))
		msgs[i] = c.Bytes()
	}
	return msgs
}

// writeCorpus: a real transcript, saved as an agent would, a few messages per turn.
func (w *scenario) writeCorpus() {
	msgs := fixtureTranscript(w.t)
	k := w.key(nsTeam, "openhands-todo-app", "")
	for end := 3; ; end += 3 {
		w.save(k, msgs[:min(end, len(msgs))])
		if end >= len(msgs) {
			return
		}
	}
}

// writeValues: a 40 KiB image in two sessions of one namespace (stored once there), in a fork of
// one of them, and in a session of another namespace (stored again there).
func (w *scenario) writeValues() {
	rng := rand.New(rand.NewPCG(2, 0)) // fixed: the same image every run
	raw := make([]byte, 30<<10)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	image := func(caption string) json.RawMessage {
		b, err := json.Marshal(map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": caption},
			map[string]any{"type": "image", "data": base64.StdEncoding.EncodeToString(raw), "mimeType": "image/png"}}})
		require.NoError(w.t, err)
		return b
	}
	a := w.key(nsTeam, "screenshot-a", "")
	convA := append(w.turn(1, "before the screenshot"), image("what is on this screen?"), w.msg("assistant", "a login form"))
	v := w.save(a, convA)
	convA = append(convA, w.turn(2, "after the screenshot")...)
	w.save(a, convA)

	b := w.key(nsTeam, "screenshot-b", "")
	w.save(b, []json.RawMessage{image("the same screen, seen by another session")})

	fork := w.key(nsTeam, "screenshot-a-fork", "")
	f, err := w.c.Fork(w.ctx, a, v.Version, fork)
	require.NoError(w.t, err)
	w.append(fork, f.Version, w.msg("user", "in the fork: try another password"))

	other := w.key(nsOther, "screenshot-elsewhere", "")
	w.save(other, []json.RawMessage{image("another tenant, the same bytes")})
}

// writeDialects: conversations in the OpenAI chat and Anthropic shapes, stored as sent.
func (w *scenario) writeDialects() {
	for _, d := range []struct{ name, file string }{{"openai-chat", "openai-chat.json"}, {"anthropic", "anthropic.json"}} {
		data, err := os.ReadFile(filepath.Join("../../testdata/dialects", d.file))
		require.NoError(w.t, err)
		var msgs []json.RawMessage
		require.NoError(w.t, json.Unmarshal(data, &msgs))
		k := w.key(nsTeam, "dialect-"+d.name, "")
		w.save(k, msgs[:3], checkpoint.WithDialect(d.name))
		w.save(k, msgs, checkpoint.WithDialect(d.name))
	}
}

// writeLeases: a lease held (24 h, not renewed), one released by a pause, one taken over by
// force, and one acquired on a session that has no version yet.
func (w *scenario) writeLeases() {
	held := w.key(nsOps, "leased-held", "")
	l, err := w.c.Acquire(w.ctx, held, checkpoint.WithOwner("agent-host-a/101"), checkpoint.WithTTL(24*time.Hour), checkpoint.WithoutRenewal())
	require.NoError(w.t, err)
	conv := w.turn(1, "leased")
	_, err = l.Save(w.ctx, joinMessages(conv))
	require.NoError(w.t, err)
	conv = append(conv, w.turn(2, "leased")...)
	_, err = l.Save(w.ctx, joinMessages(conv))
	require.NoError(w.t, err)

	paused := w.key(nsOps, "leased-paused", "")
	l, err = w.c.Acquire(w.ctx, paused, checkpoint.WithOwner("agent-host-b/202"), checkpoint.WithoutRenewal())
	require.NoError(w.t, err)
	_, err = l.Pause(w.ctx, joinMessages(w.turn(1, "paused")))
	require.NoError(w.t, err)

	taken := w.key(nsOps, "leased-taken-over", "")
	l, err = w.c.Acquire(w.ctx, taken, checkpoint.WithOwner("hung-host/303"), checkpoint.WithTTL(time.Hour), checkpoint.WithoutRenewal())
	require.NoError(w.t, err)
	conv = w.turn(1, "taken over")
	_, err = l.Save(w.ctx, joinMessages(conv))
	require.NoError(w.t, err)
	l2, err := w.c.Acquire(w.ctx, taken, checkpoint.WithOwner("operator/404"), checkpoint.WithForce(), checkpoint.WithoutRenewal())
	require.NoError(w.t, err)
	require.Equal(w.t, uint64(2), l2.Epoch())
	conv = append(conv, w.turn(2, "taken over")...)
	_, err = l2.Save(w.ctx, joinMessages(conv))
	require.NoError(w.t, err)
	_, err = l.Save(w.ctx, joinMessages(append(conv, w.msg("user", "late write"))))
	require.ErrorIs(w.t, err, checkpoint.ErrFenced, "the first owner is fenced off")

	empty := w.key(nsOps, "leased-before-first-save", "")
	_, err = w.c.Acquire(w.ctx, empty, checkpoint.WithOwner("agent-host-c/505"), checkpoint.WithTTL(24*time.Hour), checkpoint.WithoutRenewal())
	require.NoError(w.t, err)
}

// writeImports: sessions written by another deployment and brought here by a bundle (checkpointctl
// export/import) and by migrate (the head only: the first version here is 3); and a session
// migrated away from here (sealed).
func (w *scenario) writeImports() {
	elsewhere := testenv.Start(w.t)
	src := elsewhere.Client
	imported := w.key(nsOps, "imported", "")
	var conv []json.RawMessage
	for i := 1; i <= 3; i++ {
		conv = append(conv, w.turn(i, "imported")...)
		_, err := src.Save(w.ctx, imported, joinMessages(conv))
		require.NoError(w.t, err)
	}
	bundle := filepath.Join(w.t.TempDir(), "elsewhere.bundle")
	f, err := os.Create(bundle)
	require.NoError(w.t, err)
	_, err = src.Export(w.ctx, f, []checkpoint.Key{imported}, checkpoint.ExportOptions{Source: "nats://elsewhere.example:4222"})
	require.NoError(w.t, err)
	require.NoError(w.t, f.Close())
	_, n, err := w.c.ImportBundle(w.ctx, bundle, checkpoint.ImportOptions{})
	require.NoError(w.t, err)
	require.Equal(w.t, 3, n)
	w.append(imported, 3, w.msg("user", "continued here after the import"))

	migrated := w.key(nsOps, "migrated-head-only", "")
	conv = nil
	for i := 1; i <= 3; i++ {
		conv = append(conv, w.turn(i, "migrated")...)
		_, err := src.Save(w.ctx, migrated, joinMessages(conv))
		require.NoError(w.t, err)
	}
	_, err = src.Migrate(w.ctx, w.c, migrated, checkpoint.MigrateOptions{HeadOnly: true, MovedTo: w.url})
	require.NoError(w.t, err)

	sealed := w.key(nsOps, "moved-away", "")
	conv = w.turn(1, "moved")
	w.save(sealed, conv)
	v := w.save(sealed, append(conv, w.turn(2, "moved")...))
	_, err = w.c.Seal(w.ctx, sealed, v.Version, "nats://new-home.example:4222")
	require.NoError(w.t, err)
}

// writeRetained: eight versions in the namespace whose retention keeps the newest three.
func (w *scenario) writeRetained() {
	k := w.key(nsRetained, "pruned-by-retention", "")
	var conv []json.RawMessage
	for i := 1; i <= 8; i++ {
		conv = append(conv, w.turn(i, "retained")...)
		w.save(k, conv)
	}
}

// writeDeleted: a deleted session, and one deleted then started again under the same key.
func (w *scenario) writeDeleted() {
	gone := checkpoint.Key{Namespace: nsTeam, Session: "deleted", Agent: "main"}
	w.save(gone, w.turn(1, "deleted"))
	w.save(gone, append(w.turn(1, "deleted"), w.turn(2, "deleted")...))
	_, err := w.c.Delete(w.ctx, gone, nil)
	require.NoError(w.t, err)
	w.deleted = append(w.deleted, gone)

	again := w.key(nsTeam, "deleted-then-recreated", "")
	w.save(again, w.turn(1, "first life"))
	_, err = w.c.Delete(w.ctx, again, nil)
	require.NoError(w.t, err)
	v := w.save(again, w.turn(1, "second life"))
	require.Equal(w.t, uint64(1), v.Version)
}

// writeHostile: ids made of what subjects give a meaning to, unicode, the longest id, and one
// session with two agents.
func (w *scenario) writeHostile() {
	for _, k := range []checkpoint.Key{
		w.key(nsHostile, hostileSess, "agent.1 >"),
		w.key(nsHostile, hostileSess, "*"),
		w.key(nsTeam, strings.Repeat("é", wire.MaxIDBytes/2), ""),
		w.key(nsTeam, "a.b", ""),
		w.key(nsTeam, "a", "b"),
		w.key(nsTeam, "=2E", ""), // an encoded dot, spelt out
	} {
		conv := w.turn(1, "hostile id "+k.Agent)
		w.save(k, conv)
		w.save(k, append(conv, w.turn(2, "hostile id")...))
	}
}

// settle waits until the housekeeping has merged and archived phase one's sessions (idle for 2 s)
// and retention has pruned the retained namespace.
func (w *scenario) settle() {
	k := checkpoint.Key{Namespace: nsRetained, Session: "pruned-by-retention", Agent: "main"}
	require.Eventually(w.t, func() bool {
		h, err := w.c.History(w.ctx, k)
		return err == nil && len(h) == 3 && h[0].Version == 6
	}, 30*time.Second, 100*time.Millisecond, "retention never pruned %s", k)
	time.Sleep(4 * time.Second) // twice the idle time after the last save: every session merged
}

// phaseTwo writes saves the daemon stops before merging: a session of many quick appends (merged
// only while busy), appends to an archived session, and a value in a layout of several extents.
func (w *scenario) phaseTwo() {
	busy := w.key(nsTeam, "busy-appends", "")
	v := w.save(busy, w.turn(1, "busy"))
	for i := 2; i <= 20; i++ {
		v = w.append(busy, v.Version, w.turn(i, "busy")...)
	}
	h, err := w.c.Get(w.ctx, chatAppends, 0)
	require.NoError(w.t, err)
	for i := 0; i < 3; i++ {
		h = w.append(chatAppends, h.Version, w.turn(20+i, "chat, archived before")...)
	}
	a := checkpoint.Key{Namespace: nsTeam, Session: "screenshot-a", Agent: "main"}
	h, err = w.c.Get(w.ctx, a, 0)
	require.NoError(w.t, err)
	w.append(a, h.Version, w.turn(3, "after the screenshot")...)
}

// readLayouts reads every format-2 head (cp_heads) and summarises its layout, by key token.
func readLayouts(t *testing.T, url string) map[string]testenv.Format2Layout {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.BucketHeads)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	out := map[string]testenv.Format2Layout{}
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		var h struct {
			Version uint64 `json:"version"`
			Layout  struct {
				Gen     uint64 `json:"gen"`
				Extents []struct {
					Segment struct {
						Values []json.RawMessage `json:"values"`
					} `json:"segment"`
				} `json:"extents"`
			} `json:"layout"`
			OldGens  []uint64          `json:"oldGens"`
			Archives []json.RawMessage `json:"archives"`
		}
		require.NoError(t, json.Unmarshal(e.Value(), &h), key)
		l := testenv.Format2Layout{Version: h.Version, Gen: h.Layout.Gen, Extents: len(h.Layout.Extents), OldGens: h.OldGens, Archives: len(h.Archives)}
		for _, x := range h.Layout.Extents {
			l.Values += len(x.Segment.Values)
		}
		out[key] = l
	}
	return out
}

// requireCoverage fails unless the store holds every kind of layout the upgrade must read.
func requireCoverage(t *testing.T, storage map[string]testenv.Format2Layout) {
	var archived, archivedAndIndexed, manyExtents, oldGens, values bool
	for _, l := range storage {
		archived = archived || l.Archives > 0
		archivedAndIndexed = archivedAndIndexed || (l.Archives > 0 && l.Extents > 1)
		manyExtents = manyExtents || l.Extents >= 4
		oldGens = oldGens || len(l.OldGens) > 0
		values = values || l.Values > 0
	}
	require.True(t, archived, "no session has archived records")
	require.True(t, archivedAndIndexed, "no session has saves after its archive")
	require.True(t, manyExtents, "no session has a layout of several extents")
	require.True(t, oldGens, "no session has an older generation")
	require.True(t, values, "no layout refers to a value")
}

// writeFormat2Crash writes the crash variant: checkpointd as a process, six writers saving as fast
// as they can (whole arrays of a real transcript, appends), SIGKILLed once 40 saves were
// acknowledged; the directory as the kill left it. Its manifest lists the acknowledged saves. A
// kill that left no save queued (published, not settled) is tried again, a few times, since the
// directory is most useful with one.
func writeFormat2Crash(t *testing.T, writer testenv.Format2Writer, archive string) testenv.Format2Manifest {
	bin := checkpointdBinary(t)
	var m testenv.Format2Manifest
	for attempt := 1; attempt <= 8; attempt++ {
		p := &daemonProc{tb: t, bin: bin, dataDir: t.TempDir(), natsAddr: freeAddrTB(t), httpAddr: freeAddrTB(t)}
		m = crashBurst(t, p, attempt)
		m.WrittenBy = writer
		require.NoError(t, testenv.WriteTarGz(archive, p.dataDir, lockFileName))
		m.QueuedSaves = queuedSaves(t, archive)
		t.Logf("crash attempt %d: %d saves queued at the kill", attempt, m.QueuedSaves)
		if m.QueuedSaves > 0 {
			break
		}
	}
	return m
}

// crashBurst runs the writers against p and kills it; it returns what was acknowledged.
func crashBurst(t *testing.T, p *daemonProc, attempt int) testenv.Format2Manifest {
	p.start()
	small := fixtureTranscript(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		acked = map[checkpoint.Key][]testenv.Format2Version{}
		count atomic.Int64
		wg    sync.WaitGroup
	)
	killed := make(chan struct{})
	var keys []checkpoint.Key
	for i := range 6 {
		kind := [...]string{"whole", "append"}[i%2]
		keys = append(keys, checkpoint.Key{Namespace: "crash", Session: fmt.Sprintf("%s-%d", kind, i/2+1), Agent: "main"})
	}
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := checkpoint.Connect(p.url(), []nats.Option{nats.MaxReconnects(0)})
			if err != nil {
				return
			}
			defer c.Close()
			var conv []json.RawMessage
			for n := 1; ; n++ {
				var next []json.RawMessage
				if i%2 == 0 { // a growing transcript, sent whole (the client sends what grew)
					next = small[len(conv)%len(small) : len(conv)%len(small)+1]
				} else {
					next = []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"role":"user","content":"append %d of writer %d"}`, n, i))}
				}
				conv = append(conv, next...)
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a save the kill caught fails soon
				v, err := c.Save(sctx, k, joinMessages(conv))
				cancel()
				if err != nil {
					return // the kill: what this save did is unknown, and nothing after it is written
				}
				mu.Lock()
				acked[k] = append(acked[k], testenv.Format2Version{Record: v, SHA256: sha256Hex(joinMessages(conv))})
				mu.Unlock()
				if count.Add(1) == 40 {
					close(killed)
				}
			}
		}()
	}
	select {
	case <-killed:
	case <-ctx.Done():
		t.Fatalf("40 saves were never acknowledged\n%s", p.logTail())
	}
	time.Sleep(time.Duration(attempt*100) * time.Microsecond) // a different moment of the saves in flight each attempt
	p.kill()
	wg.Wait()
	t.Logf("killed after %d acknowledged saves", count.Load())

	m := testenv.Format2Manifest{Format: testenv.Format2ManifestFormat}
	for _, k := range keys {
		vs := acked[k]
		require.NotEmpty(t, vs, "writer of %s", k)
		m.Sessions = append(m.Sessions, testenv.Format2Session{Key: k, FirstVersion: vs[0].Record.Version,
			Head: vs[len(vs)-1].Record.Version, Versions: vs})
	}
	return m
}

// queuedSaves counts the saves a store holds in CP_INGEST (published, not settled), read by a bare
// NATS server on a copy of it: no daemon, so nothing settles them meanwhile.
func queuedSaves(t *testing.T, archive string) int {
	dir := t.TempDir()
	require.NoError(t, testenv.ExtractTarGz(archive, dir, maxFixtureBytes))
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: freeAddrTB(t)})
	require.NoError(t, err)
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, wire.StreamIngest)
	require.NoError(t, err)
	return int(st.CachedInfo().State.Msgs)
}

func sha256Hex(b []byte) string { return strings.TrimPrefix(wire.Hash(b), "sha256:") }

// writeFormat2Readme writes testdata/format2/README.md.
func writeFormat2Readme(t *testing.T, m, crash testenv.Format2Manifest) {
	versions := func(m testenv.Format2Manifest) (n int) {
		for _, s := range m.Sessions {
			n += len(s.Versions)
		}
		return n
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, strings.ReplaceAll(format2Readme, "^", "`"), m.WrittenBy.Commit, m.WrittenBy.At.Format(time.RFC3339), m.WrittenBy.NATSServer, m.WrittenBy.Go,
		format2WriteCommand, len(m.Sessions), versions(m), len(m.Deleted), len(crash.Sessions), versions(crash), crash.QueuedSaves)
	require.NoError(t, os.WriteFile(filepath.Join(format2Fixture, "README.md"), b.Bytes(), 0o644))
}

// format2Readme is testdata/format2/README.md; ^ stands for a backquote.
const format2Readme = `# testdata/format2: a data directory written by format 2

What checkpointd's five-bucket engine (format 2: ^cp_heads^, ^cp_versions^, ^cp_layouts^,
^cp_segments^, ^cp_values^; docs/format.md §2–§6) really wrote, kept so that the engine replacing it
(docs/format.md §8) is tested on it: the upgrade of docs/format.md §8.17 must turn this directory
into the new format and then serve exactly what the manifest lists.

Written by commit %s on %s (nats-server %s, %s); ^manifest.json^ (^writtenBy^) says the same.
Regenerate, from the repository's root, with the format-2 code still in place:

    %s

## Files

- ^store.tar.gz^: the data directory (^--data-dir^) of a checkpointd stopped cleanly (SIGTERM's
  path), without its lock file. %d sessions with %d versions in all; deleted sessions: %d.
  - ^team/chat-appends^: 21 versions: a first save, appends (^Cp-Base-Version^), whole arrays from a
    client that never saved the session, a rewrite that drops message 3 and edits the last one (a
    second generation), a compaction marker (extension ^compaction^), an expected-version save;
    merged and its records archived while idle, then three appends the daemon never merged (an
    archive and indexed records, several extents).
  - ^team/openhands-todo-app^: a real transcript (^testdata/corpus/openhands_gui_todo_app.json^,
    19.5 KB; OpenHands, MIT licence: see ^testdata/corpus/SOURCES.md^) saved three messages at a
    time.
  - ^team/screenshot-a^, ^team/screenshot-b^, ^team/screenshot-a-fork^ (a fork of version 1 of
    ^screenshot-a^, then an append) and ^other/screenshot-elsewhere^: the same 40 KiB image, a
    value stored once in namespace ^team^ and once in ^other^; ^screenshot-a^ last appended to
    after its merge (a value in a layout of several extents).
  - ^team/dialect-openai-chat^, ^team/dialect-anthropic^: non-native dialects
    (^testdata/dialects/^), two versions each.
  - ^ops/leased-held^ (held until 24 h after it was written, never renewed), ^ops/leased-paused^
    (released by a pause), ^ops/leased-taken-over^ (epoch 2, forced; the first owner's late save
    was fenced off), ^ops/leased-before-first-save^ (a lease and no version: not listed).
  - ^ops/imported^ (three versions imported from a bundle, origin kept, then a local append),
    ^ops/migrated-head-only^ (migrated head only: its first version is 3), ^ops/moved-away^
    (sealed: moved to ^nats://new-home.example:4222^).
  - ^retained/pruned-by-retention^: eight versions, of which the daemon's retention round
    (^--namespace-retention retained:keep=3^) kept 6–8.
  - ^team/deleted^ (deleted: must never be served) and ^team/deleted-then-recreated^ (deleted,
    then saved again under the same key: version 1 of its second life).
  - Hostile ids: namespace ^tenant.β *>^ with session ^a.b c*>/ü 😀^ + tab + quotes and agents
    ^agent.1 >^ and ^*^; a session id of 256 bytes (^é^ × 128); sessions ^a.b^, ^a^ with agent ^b^,
    and ^=2E^ (an encoded dot spelt out).
  - ^team/busy-appends^: 20 quick appends just before the stop: merged only while busy.
- ^manifest.json^: for every session (key), its lease as ^LeaseStatus^ reports it, its moved state,
  first and last version, and every kept version's record (as ^checkpointctl history --json^ and
  the SDK's ^History^ report it) with the SHA-256 of the conversation's bytes as restored; the
  deleted sessions; and, for information only, how format 2 laid each session out (^storage^:
  extents, older generations, archives, values), which shows what the fixture covers.
- ^crash.tar.gz^ and ^crash-manifest.json^: the data directory of a checkpointd process SIGKILLed
  while six writers saved as fast as they could (three saving the growing array of the transcript
  above, three appending), just after 40 saves had been acknowledged: %d sessions, %d
  acknowledged versions. Saves still in ^CP_INGEST^ when it died: %d (^queuedSaves^: published,
  and either not settled yet or settled without the stream having recorded their acknowledgement;
  a daemon started on the directory settles them, as later versions or as the repeats they are). The manifest is partial
  (^complete: false^): it lists the acknowledged saves; a session may hold later versions than
  those, never fewer or other ones.

## How it is used

^TestFormat2Fixture_Serves^ (cmd/checkpointd) unpacks each archive into a temporary directory,
runs checkpointd on it (^run^, as the command line does) and calls
^testenv.CompareFormat2(ctx, client, manifest)^ (internal/testenv/format2.go): it lists every
namespace, restores and hashes every version, and compares sessions, versions, records, hashes,
leases and moved state with the manifest, returning every difference. The comparison takes only a
^*checkpoint.Client^, so the upgrade test is the same call on the directory after the new engine
upgraded it (docs/format.md §8.17). A record field that the upgrade changes on purpose must be
argued in docs/format.md and the comparison changed for it explicitly; nothing else may differ.
`
