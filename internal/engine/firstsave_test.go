package engine_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
)

// A save that creates its session (Expected 0) on an engine that has not cached the session
// appends with the compare-and-swap on an empty log and does not read the head first: one read
// less on the first save of every session.
func TestFirstSaveReadsNoHead(t *testing.T) {
	counting := &countingLog{Log: memlog.New(1 << 20)}
	e := engine.New(counting, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "new", Agent: "a"}
	saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "first", Expected: u64(0), Payload: conversation(4), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(1), saved.Record.Version)
	require.Zero(t, counting.reads, "the first save of a new session read the log")

	// The cache it left is the log's: the next save needs no read either, and both read back.
	saved, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "second", Base: u64(1), Payload: array(4, 6), Now: now})
	require.NoError(t, err)
	require.Equal(t, uint64(2), saved.Record.Version)
	require.Zero(t, counting.reads)
	got, _, err := e.Read(ctx, k, 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conversation(6)), string(got))
}

// A save that expects to create its session, sent to an engine that has not cached it, answers
// as it would with the head read first (the compare-and-swap on an empty log fails when the log is
// not empty, and the save is decided again from the head): for a session that exists, one that
// was deleted (its log ends with the deletion), one leased by another owner, one a fork made, and
// a save delivered again. The answer, the log's entries and the next save are the same both ways.
func TestFirstSaveOnSessionsThatExist(t *testing.T) {
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	src := engine.Key{Namespace: "n", Session: "src", Agent: "a"}
	first := engine.SaveRequest{Key: k, SaveID: "one", Expected: u64(0), Payload: conversation(2), Now: now}
	cases := map[string]func(t *testing.T, e *engine.Engine){
		"new": func(t *testing.T, e *engine.Engine) {},
		"exists": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
		},
		"deleted": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
			_, err := e.Delete(ctx, k, nil)
			require.NoError(t, err)
		},
		"deleted and saved again": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, k, 0, 6)
			_, err := e.Delete(ctx, k, nil)
			require.NoError(t, err)
			_, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "again", Expected: u64(0), Payload: conversation(2), Now: now})
			require.NoError(t, err)
		},
		"leased": func(t *testing.T, e *engine.Engine) {
			_, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: k, Owner: "other", TTL: time.Hour, Now: now})
			require.NoError(t, err)
		},
		"forked": func(t *testing.T, e *engine.Engine) {
			saveTurns(t, e, src, 0, 4)
			_, err := e.Fork(ctx, engine.ForkRequest{From: src, To: k, SaveID: "fork", Now: now})
			require.NoError(t, err)
		},
		"delivered again": func(t *testing.T, e *engine.Engine) {
			_, err := e.Save(ctx, first)
			require.NoError(t, err)
		},
	}
	// outcome is what a cold engine answers to first, then to a save after whatever head it found,
	// and the log's entries then. warm: the engine loads the session (the head read first) before.
	outcome := func(t *testing.T, prepare func(*testing.T, *engine.Engine), warm bool) []string {
		log := memlog.New(1 << 20)
		prepare(t, engine.New(log, engine.Config{}))
		e := engine.New(log, engine.Config{})
		if warm {
			// A save the head refuses loads the session and writes nothing.
			_, err := e.Save(ctx, engine.SaveRequest{Key: k, Expected: u64(99), Payload: conversation(2), Now: now})
			require.Error(t, err)
		}
		var out []string
		saved, err := e.Save(ctx, first)
		out = append(out, fmt.Sprintf("first: %+v, %v", saved, err))
		head, herr := e.Head(ctx, k)
		var next uint64
		if herr == nil {
			next = head.Version
		}
		saved, err = e.Save(ctx, engine.SaveRequest{Key: k, SaveID: "next", Expected: u64(next), Payload: conversation(int(2*next) + 2), Now: now})
		out = append(out, fmt.Sprintf("next: %+v, %v", saved, err))
		require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool {
			out = append(out, fmt.Sprintf("entry %d: %x", en.Seq, en.Data))
			return true
		}))
		keys, _, err := log.Sessions(ctx, k.Namespace, 0, 100)
		require.NoError(t, err)
		return append(out, fmt.Sprintf("sessions: %v", keys))
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, outcome(t, prepare, true), outcome(t, prepare, false))
		})
	}
}

// A version held by the session's last entry alone (its only save since it began or was deleted)
// is read with that one entry, which the read of the head brings: one read, not two. Where other
// entries are needed (a second save, a fork's source, a save in parts, a lease entry before it),
// they are read, and every read gives the version.
func TestReadOfASessionSavedOnce(t *testing.T) {
	counting := &countingLog{Log: memlog.New(4 << 10)}
	e := engine.New(counting, engine.Config{})
	save := func(k engine.Key, expected uint64, conv []byte) {
		t.Helper()
		_, err := e.Save(ctx, engine.SaveRequest{Key: k, Expected: u64(expected), Payload: conv, Now: now})
		require.NoError(t, err)
	}
	reads := func(k engine.Key, v uint64, want []byte) int {
		t.Helper()
		counting.reads = 0
		got, _, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		n := counting.reads
		z, _, err := e.ReadZstd(ctx, k, v)
		require.NoError(t, err)
		dec, err := zstd.NewReader(nil)
		require.NoError(t, err)
		defer dec.Close()
		got, err = dec.DecodeAll(z, nil)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "ReadZstd")
		return n
	}
	once := engine.Key{Namespace: "n", Session: "once", Agent: "a"}
	save(once, 0, conversation(6))
	require.Equal(t, 1, reads(once, 0, conversation(6)))

	twice := engine.Key{Namespace: "n", Session: "twice", Agent: "a"}
	save(twice, 0, conversation(2))
	save(twice, 1, conversation(6))
	require.Equal(t, 2, reads(twice, 0, conversation(6)))
	require.Equal(t, 2, reads(twice, 1, conversation(2)))

	again := engine.Key{Namespace: "n", Session: "deleted", Agent: "a"}
	save(again, 0, conversation(8))
	_, err := e.Delete(ctx, again, nil)
	require.NoError(t, err)
	save(again, 0, conversation(4))
	require.Equal(t, 1, reads(again, 0, conversation(4)), "the entries before the deletion are not the session's")

	leased := engine.Key{Namespace: "n", Session: "leased", Agent: "a"}
	l, _, err := e.Acquire(ctx, engine.LeaseRequest{Key: leased, Owner: "me", TTL: time.Hour, Now: now})
	require.NoError(t, err)
	_, err = e.Save(ctx, engine.SaveRequest{Key: leased, Expected: u64(0), Epoch: l.Lease.Epoch, Payload: conversation(4), Now: now})
	require.NoError(t, err)
	reads(leased, 0, conversation(4))

	fork := engine.Key{Namespace: "n", Session: "fork", Agent: "a"}
	_, err = e.Fork(ctx, engine.ForkRequest{From: twice, Version: 1, To: fork, SaveID: "fork", Now: now})
	require.NoError(t, err)
	reads(fork, 0, conversation(2))
	save(fork, 1, conversation(4))
	reads(fork, 0, conversation(4))
	reads(fork, 1, conversation(2))

	// Incompressible text larger than an entry: the save is stored in parts before its entry.
	big := engine.Key{Namespace: "n", Session: "big", Agent: "a"}
	noise := make([]byte, 12<<10)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = 'a' + byte(rnd.IntN(26))
	}
	conv := []byte(`[{"role":"user","content":"` + string(noise) + `"}]`)
	save(big, 0, conv)
	var entries int
	require.NoError(t, counting.Log.Range(ctx, big, 0, 0, func(engine.Entry) bool { entries++; return true }))
	require.Greater(t, entries, 1, "stored in parts")
	reads(big, 0, conv)

	// After a pack, a save's entry is the only one since the pack, but not the session's only one.
	_, err = e.Pack(ctx, twice, true)
	require.NoError(t, err)
	save(twice, 2, conversation(8))
	reads(twice, 0, conversation(8))
	reads(twice, 2, conversation(6))
}

// Daemons racing to create one session, none of which has it cached: one creation wins, the
// others are conflicts with the winner's version as the head (distinct save ids) or duplicates of
// it (the same save id, a request delivered to several daemons).
func TestFirstSaveRace(t *testing.T) {
	for _, sameID := range []bool{false, true} {
		t.Run(fmt.Sprintf("same save id %v", sameID), func(t *testing.T) {
			log := memlog.New(1 << 20)
			k := engine.Key{Namespace: "n", Session: "raced", Agent: "a"}
			const daemons = 8
			type outcome struct {
				saved engine.Saved
				err   error
			}
			out := make(chan outcome, daemons)
			for i := range daemons {
				e := engine.New(log, engine.Config{})
				go func() {
					id := fmt.Sprintf("save-%d", i)
					if sameID {
						id = "save"
					}
					saved, err := e.Save(ctx, engine.SaveRequest{Key: k, SaveID: id, Expected: u64(0), Payload: conversation(2 + i%2*2), Now: now})
					out <- outcome{saved, err}
				}()
			}
			created, others := 0, 0
			for range daemons {
				o := <-out
				switch {
				case o.err == nil && !o.saved.Duplicate:
					created++
					require.Equal(t, uint64(1), o.saved.Record.Version)
				case sameID && o.err == nil:
					others++
					require.Equal(t, uint64(1), o.saved.Record.Version)
				case sameID && errors.Is(o.err, engine.ErrSaveIDReused):
					// The save id with the other conversation than the winner's: refused, naming
					// the winner's version, never answered as if it were stored.
					others++
					var reused *engine.SaveIDReusedError
					require.ErrorAs(t, o.err, &reused)
					require.Equal(t, uint64(1), reused.Version)
				default:
					others++
					var conflict *engine.ConflictError
					require.ErrorAs(t, o.err, &conflict)
					require.Equal(t, uint64(1), conflict.Head)
				}
			}
			require.Equal(t, 1, created)
			require.Equal(t, daemons-1, others)
			keys, _, err := log.Sessions(ctx, "n", 0, 100)
			require.NoError(t, err)
			require.Equal(t, []engine.Key{k}, keys)
		})
	}
}

// creationLog records how a log's first entries are written: through a creation (engine.Creator,
// which it offers by passing engine.Create on to the log it wraps) or by a plain Append after 0.
type creationLog struct {
	engine.Log
	events []string
}

func (c *creationLog) Create(cx ctxT, k engine.Key) engine.Creation {
	c.events = append(c.events, "create "+k.Session)
	return recordedCreation{log: c, key: k, inner: engine.Create(cx, c.Log, k)}
}

func (c *creationLog) Append(cx ctxT, k engine.Key, data []byte, after uint64) (uint64, error) {
	if after == 0 {
		c.events = append(c.events, "append after 0 "+k.Session)
	}
	return c.Log.Append(cx, k, data, after)
}

type recordedCreation struct {
	log   *creationLog
	key   engine.Key
	inner engine.Creation
}

func (r recordedCreation) Append(cx ctxT, data []byte) (uint64, error) {
	seq, err := r.inner.Append(cx, data)
	r.log.events = append(r.log.events, fmt.Sprintf("created %s: %v", r.key.Session, err))
	return seq, err
}

func (r recordedCreation) Abandon(cx ctxT) error {
	r.log.events = append(r.log.events, "abandon "+r.key.Session)
	return r.inner.Abandon(cx)
}

// A save that creates its session (Expected 0, not cached) begins the log's creation before it
// validates and compresses the conversation (engine.Creator: on JetStream the namespace's index
// entry travels meanwhile, docs/format.md §8.15j), and appends its first entry through it, its
// first part too when it is written in parts. A refused first save abandons the creation: nothing
// is listed. A save of a session the engine has cached, or one that does not expect to create it,
// begins none.
func TestFirstSaveBeginsItsCreation(t *testing.T) {
	log := &creationLog{Log: memlog.New(4 << 10)}
	e := engine.New(log, engine.Config{})
	key := func(s string) engine.Key { return engine.Key{Namespace: "n", Session: s, Agent: "a"} }
	saves := 0
	save := func(s string, expected *uint64, payload []byte) error {
		log.events = nil
		saves++
		_, err := e.Save(ctx, engine.SaveRequest{Key: key(s), SaveID: fmt.Sprint("save-", saves), Expected: expected, Payload: payload, Now: now})
		return err
	}

	require.NoError(t, save("new", u64(0), conversation(4)))
	require.Equal(t, []string{"create new", "created new: <nil>"}, log.events)

	for i, bad := range [][]byte{[]byte(`[{"role":"user","content":`), []byte(`{"role":"user"}`), []byte(`[{"role":"robot","content":"hi"}]`)} {
		s := fmt.Sprint("refused", i)
		err := save(s, u64(0), bad)
		var ve *codec.ValidationError
		require.ErrorAs(t, err, &ve, "%s", bad)
		require.Equal(t, []string{"create " + s, "abandon " + s}, log.events, "%s", bad)
	}
	keys, _, err := log.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []engine.Key{key("new")}, keys, "a refused first save lists nothing")

	// Incompressible text larger than an entry: its first part is the log's first entry.
	conv := []byte(`[{"role":"user","content":"` + randomText(12<<10, 1) + `"}]`)
	require.NoError(t, save("big", u64(0), conv))
	require.Equal(t, []string{"create big", "created big: <nil>"}, log.events)
	require.Greater(t, entries(t, log.Log.(*memlog.Log), key("big")), 1, "stored in parts")
	got, _, err := e.Read(ctx, key("big"), 0, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))

	// Another engine, cold, creating a session that exists: its creation loses the
	// compare-and-swap, and the save is decided again from the head (a conflict).
	other := engine.New(log, engine.Config{})
	log.events = nil
	_, err = other.Save(ctx, engine.SaveRequest{Key: key("new"), SaveID: "y", Expected: u64(0), Payload: conversation(2), Now: now})
	var conflict *engine.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, "create new", log.events[0])
	require.Contains(t, log.events[1], "created new: ")
	require.Len(t, log.events, 2)

	require.NoError(t, save("new", u64(1), array(4, 6)), "cached: nothing to create")
	require.Empty(t, log.events)
	require.NoError(t, save("plain", nil, conversation(2)), "not expected to create it: the head is read")
	require.Equal(t, []string{"append after 0 plain"}, log.events)
}

// A large first save is compressed while it is validated (compressAhead), on the guess that its
// piece is the payload's messages as sent. Where the guess is wrong the piece is compressed again
// from what the plan made of the payload, and what is stored reads back as that conversation: white
// space past the bytes the guess looks at (the canonical form is a copy), a value stored apart (an
// inline image), an image path the daemon redacts; a payload refused at its end stores nothing and
// leaves no encoder state behind for the next save.
func TestFirstSaveCompressedAhead(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	// Strings of hex under ValueMinBytes each (hex is base64: longer ones would be values).
	text := func(seed uint64) string { return randomText(20<<10, seed) }
	turns := func(sep string, seed uint64) []byte {
		var b strings.Builder
		b.WriteString("[")
		for i := range uint64(4) {
			if i > 0 {
				b.WriteString("," + sep)
			}
			b.WriteString(`{"role":"user","content":"` + text(seed+2*i) + `"},` + sep + `{"role":` + sep + `"assistant","content":[{"type":"text","text":"` + text(seed+2*i+1) + `"}]}`)
		}
		return []byte(b.String() + "]")
	}
	compactConv, spaced := turns("", 1), turns(" ", 11)
	image := strings.Repeat("QUJD", 12<<10) // base64: a value of 48 KiB
	withImage := []byte(`[{"role":"user","content":[{"type":"text","text":"` + text(21) + `"},{"type":"image","data":"` + image + `","mimeType":"image/png"}]},` +
		string(turns("", 22)[1:]))
	withPath := []byte(`[{"role":"user","content":[{"type":"text","text":"` + text(31) + `"},{"type":"image","mimeType":"image/png","url":"file:///home/someone/shot.png"}]},` +
		string(turns("", 32)[1:]))
	bad := append(slices.Clone(compactConv[:len(compactConv)-1]), `,{"role":"robot","content":"x"}]`...)

	save := func(s string, payload []byte, lim codec.Limits) (engine.Saved, error) {
		return e.Save(ctx, engine.SaveRequest{Key: engine.Key{Namespace: "n", Session: s, Agent: "a"}, SaveID: s,
			Expected: u64(0), Payload: payload, Limits: lim, Now: now})
	}
	reads := func(s string, want []byte) {
		t.Helper()
		got, _, err := e.Read(ctx, engine.Key{Namespace: "n", Session: s, Agent: "a"}, 0, engine.ReadOptions{Verify: true})
		require.NoError(t, err, s)
		require.Equal(t, string(want), string(got), s)
	}
	compact := func(b []byte) []byte {
		var out bytes.Buffer
		require.NoError(t, json.Compact(&out, b))
		return out.Bytes()
	}

	_, err := save("refused", bad, codec.Limits{})
	var ve *codec.ValidationError
	require.ErrorAs(t, err, &ve)
	_, err = e.Head(ctx, engine.Key{Namespace: "n", Session: "refused", Agent: "a"})
	require.ErrorIs(t, err, engine.ErrNotFound, "a refused save stores nothing")

	for name, c := range map[string]struct {
		payload, want []byte
		lim           codec.Limits
	}{
		"compact":    {compactConv, compactConv, codec.Limits{}},
		"spaced":     {spaced, compact(spaced), codec.Limits{}},
		"image":      {withImage, withImage, codec.Limits{}},
		"image path": {withPath, nil, codec.Limits{ImagePaths: codec.ImagePathsRedact}},
	} {
		saved, err := save(name, c.payload, c.lim)
		require.NoError(t, err, name)
		if c.want == nil { // redacted: not the payload
			got, _, err := e.Read(ctx, engine.Key{Namespace: "n", Session: name, Agent: "a"}, 0, engine.ReadOptions{Verify: true})
			require.NoError(t, err, name)
			require.NotContains(t, string(got), "/home/someone", name)
			continue
		}
		require.Equal(t, hashOf(c.want), saved.Record.Hash, name)
		reads(name, c.want)
	}
	keys, _, err := log.Sessions(ctx, "n", 0, 10)
	require.NoError(t, err)
	require.Len(t, keys, 4, "the refused save is not listed: %v", keys)
}
