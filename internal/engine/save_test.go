package engine_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
)

func save(e *engine.Engine, req engine.SaveRequest) (engine.Saved, error) {
	if req.Now.IsZero() {
		req.Now = now
	}
	return e.Save(ctx, req)
}

func TestSave_ExpectedVersion(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "a", Expected: u64(0), Payload: conversation(2)})
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.Record.Version)

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Expected: u64(0), Payload: conversation(4)})
	var ce *engine.ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, engine.ErrVersionConflict)
	require.Equal(t, uint64(1), ce.Head, "the conflict names the head's version")
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Expected: u64(7), Payload: conversation(4)})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, uint64(7), ce.Expected)

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "c", Expected: u64(1), Base: u64(2), Payload: array(2, 4)})
	require.ErrorIs(t, err, engine.ErrBadRequest, "expected and base disagree")
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "c", Base: u64(0), Payload: array(2, 4)})
	require.ErrorIs(t, err, engine.ErrVersionConflict, "an append must name the head")
	s, err = save(e, engine.SaveRequest{Key: k, SaveID: "c", Base: u64(1), Payload: array(2, 4)})
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.Record.Version)
	require.Equal(t, uint64(1), s.Record.Parent)
}

// A save id already saved answers the committed version and writes nothing: at the head, among
// the saves since the last pack, in the last pack, after a restart, and (expected version stale)
// further back.
func TestSave_Idempotent(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{PackEntries: 8})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 2*20) // versions 1..20: two packs (1-8, 9-16), 17-20 after them
	n := entries(t, log, k)
	head, err := e.Head(ctx, k)
	require.NoError(t, err)
	for _, cold := range []bool{false, true} {
		for _, v := range []int{20, 18, 17, 16, 9} {
			if cold {
				e.Forget()
			}
			// The whole array of version v (which an append made): the same conversation.
			s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprintf("save-%d", 2*(v-1)), Payload: conversation(2 * v)})
			require.NoError(t, err, "version %d", v)
			require.True(t, s.Duplicate, "version %d", v)
			require.Equal(t, uint64(v), s.Record.Version)
			require.Equal(t, fmt.Sprintf("save-%d", 2*(v-1)), s.Record.SaveID)
		}
	}
	// Version 3 is in an older pack: a retry that says which version it extended still finds it.
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "save-4", Base: u64(2), Payload: array(4, 6)})
	require.NoError(t, err)
	require.True(t, s.Duplicate)
	require.Equal(t, uint64(3), s.Record.Version)
	require.Equal(t, n, entries(t, log, k), "duplicates write nothing")
	after, err := e.Head(ctx, k)
	require.NoError(t, err)
	require.Equal(t, head, after)
	// Without the expected version, a save id that old is a new save (as format 2's 32 recent ids).
	s, err = save(e, engine.SaveRequest{Key: k, SaveID: "save-4", Payload: conversation(42)})
	require.NoError(t, err)
	require.False(t, s.Duplicate)
}

// A whole array that extends the head is stored as an append of what is new, whether its bytes
// are canonical (recognised by hashing the head's prefix) or not (compared message by message).
// Otherwise it is a rewrite keeping the common prefix; older versions read as they were.
func TestSave_WholeArray(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{NoPack: true})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	first, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(40)})
	require.NoError(t, err)
	grown, err := save(e, engine.SaveRequest{Key: k, SaveID: "2", Payload: conversation(42)})
	require.NoError(t, err)
	require.Less(t, grown.Record.StoredBytes*4, first.Record.StoredBytes, "only the two new messages are stored")
	spaced := strings.Replace(string(conversation(44)), `,{"role"`, `, {"role"`, 1)
	third, err := save(e, engine.SaveRequest{Key: k, SaveID: "3", Payload: []byte(spaced)})
	require.NoError(t, err)
	require.Less(t, third.Record.StoredBytes*4, first.Record.StoredBytes, "not canonical, still an append")
	require.Equal(t, 44, third.Record.Counts.Messages)

	// A rewrite: the first 10 messages, then two others.
	other := `{"role":"user","content":"edited"}`
	rw := string(conversation(10)[:len(conversation(10))-1]) + "," + other + "," + string(message(99)) + "]"
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "4", Payload: []byte(rw)})
	require.NoError(t, err)
	require.Equal(t, uint64(4), s.Record.Version)
	require.Equal(t, 12, s.Record.Counts.Messages)
	require.Equal(t, 6, s.Record.Counts.User)
	require.Less(t, s.Record.StoredBytes*4, first.Record.StoredBytes, "the kept prefix is not stored again")
	// Everything but messages: a rewrite keeping nothing.
	s, err = save(e, engine.SaveRequest{Key: k, SaveID: "5", Payload: []byte(`[]`)})
	require.NoError(t, err)
	require.Equal(t, 0, s.Record.Counts.Messages)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "6", Payload: conversation(3)})
	require.NoError(t, err)

	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
		}
		for v, want := range map[uint64]string{1: string(conversation(40)), 2: string(conversation(42)), 3: string(conversation(44)),
			4: rw, 5: "[]", 6: string(conversation(3))} {
			got, rec, err := e.Read(ctx, k, v, engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v)
			require.Equal(t, want, string(got), "version %d", v)
			require.Equal(t, int64(len(want)), rec.RawBytes)
		}
	}
	require.Equal(t, 6, entries(t, log, k))
	// Appends go on from the rewritten head, and a pack keeps every version as it was.
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "7", Base: u64(6), Payload: array(3, 5)})
	require.NoError(t, err)
	got, _, err := e.Read(ctx, k, 4, engine.ReadOptions{Verify: true})
	require.NoError(t, err)
	require.Equal(t, rw, string(got))
}

func TestSave_Import(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	created := time.Date(2025, 5, 6, 7, 8, 9, 10, time.UTC)
	imp := func(v uint64, n int) *engine.Import {
		return &engine.Import{Version: v, Created: created, Hash: hashOf(conversation(n)), Origin: engine.Origin{Via: engine.ReasonImport, Source: "bundle"}}
	}
	s, err := save(e, engine.SaveRequest{Key: k, SaveID: "i5", Import: imp(5, 2), Payload: conversation(2)})
	require.NoError(t, err)
	require.Equal(t, uint64(5), s.Record.Version)
	require.Equal(t, created, s.Record.Created)
	require.Equal(t, "bundle", s.Record.Origin.Source)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "i6", Import: imp(6, 4), Payload: conversation(4)})
	require.NoError(t, err)
	_, _, err = e.Read(ctx, k, 4, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrNotFound, "versions before the first imported one were never here")

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "i8", Import: imp(8, 6), Payload: conversation(6)})
	require.ErrorIs(t, err, engine.ErrVersionConflict, "an import continues at the next version")
	s, err = save(e, engine.SaveRequest{Key: k, SaveID: "again", Import: imp(5, 2), Payload: conversation(2)})
	require.NoError(t, err)
	require.True(t, s.Duplicate)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "other", Import: imp(5, 3), Payload: conversation(3)})
	require.ErrorIs(t, err, engine.ErrVersionConflict, "version 5 here is another conversation")
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "i7", Import: imp(7, 5), Payload: conversation(6)})
	require.ErrorIs(t, err, engine.ErrHashMismatch)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "i0", Import: imp(0, 5), Payload: conversation(6)})
	require.ErrorIs(t, err, engine.ErrBadRequest)
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, 2)
	require.Equal(t, uint64(5), h[1].Parent, "an import's parent is the head it found")
}

func TestSave_Rules(t *testing.T) {
	e, _ := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(2)})
	require.NoError(t, err)

	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "d", Payload: []byte(`[{"role":"user","content":"x"}]`),
		Limits: codec.Limits{Dialect: "anthropic"}})
	require.ErrorIs(t, err, engine.ErrDialectMismatch)
	require.ErrorIs(t, err, engine.ErrBadRequest)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "d", Payload: conversation(3), Limits: codec.Limits{Dialect: codec.DialectNative}})
	require.NoError(t, err, "native is the empty dialect")
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "x", Payload: conversation(3), Limits: codec.Limits{Dialect: "klingon"}})
	require.Error(t, err)

	// Growth: an append that takes the conversation past the limit.
	limit := codec.Limits{MaxBytes: int64(len(conversation(4)))}
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "g", Base: u64(2), Payload: array(3, 5), Limits: limit})
	var ve *codec.ValidationError
	require.ErrorAs(t, err, &ve)
	require.ErrorIs(t, err, codec.ErrTooLarge)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "g", Base: u64(2), Payload: array(3, 4), Limits: limit})
	require.NoError(t, err)

	// A bad message in an append is named by its index in the whole conversation.
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Base: u64(3), Payload: []byte(`[{"role":"user","content":"x"},{"nope":1}]`)})
	require.ErrorAs(t, err, &ve)
	require.Equal(t, 5, ve.Index)
	_, err = save(e, engine.SaveRequest{Key: k, SaveID: "b", Payload: []byte(`{"not":"an array"}`)})
	require.ErrorAs(t, err, &ve)
}

// Parts: a save (and a pack) larger than an entry is several entries of one version, the last one
// the commit; parts a failed save left behind are skipped by readers and deleted by the next pack.
func TestSave_Parts(t *testing.T) {
	e, log := newEngine(t, 4096, engine.Config{PackEntries: 4})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	big := func(i int) []byte {
		b := make([]byte, 9000)
		_, _ = rand.Read(b)
		return []byte(fmt.Sprintf(`{"role":"user","content":"%d %s"}`, i, base64.StdEncoding.EncodeToString(b)))
	}
	conv := [][]byte{}
	arr := func() []byte { return []byte("[" + string(joinAll(conv)) + "]") }
	var want []string
	for i := range 6 {
		conv = append(conv, big(i))
		s, err := save(e, engine.SaveRequest{Key: k, SaveID: fmt.Sprint(i), Payload: arr()})
		require.NoError(t, err)
		want = append(want, string(arr()))
		if i == 2 {
			// A save whose commit fails after its parts were written (a crash): nothing changes.
			flaky := &failingLog{Log: log, fail: 3}
			other := engine.New(flaky, engine.Config{})
			_, err := other.Save(ctx, engine.SaveRequest{Key: k, SaveID: "lost", Payload: []byte("[" + string(joinAll(append(conv, big(99)))) + "]"), Now: now})
			require.ErrorIs(t, err, errInjected)
		}
		if s.PackDue {
			_, err = e.Pack(ctx, k, false)
			require.NoError(t, err)
		}
	}
	for _, cold := range []bool{false, true} {
		if cold {
			e.Forget()
		}
		for v, w := range want {
			got, _, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
			require.NoError(t, err, "version %d", v+1)
			require.Equal(t, w, string(got))
		}
	}
	_, err := e.Pack(ctx, k, true)
	require.NoError(t, err)
	n := entries(t, log, k)
	for v, w := range want {
		got, _, err := e.Read(ctx, k, uint64(v+1), engine.ReadOptions{Verify: true})
		require.NoError(t, err, "version %d", v+1)
		require.Equal(t, w, string(got))
	}
	h, err := e.History(ctx, k)
	require.NoError(t, err)
	require.Len(t, h, 6)
	require.Greater(t, n, 6, "the packs are in parts too: more entries than versions")
}

func joinAll(ms [][]byte) []byte {
	var out []byte
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return out
}

var errInjected = errors.New("injected failure")

// failingLog fails its fail-th Append (counting from 1), as a crash between two writes would.
type failingLog struct {
	engine.Log
	fail, n int
}

func (f *failingLog) Append(c ctxT, k engine.Key, data []byte, after uint64) (uint64, error) {
	f.n++
	if f.n == f.fail {
		return 0, errInjected
	}
	return f.Log.Append(c, k, data, after)
}

// A log that lost entries (a part, a save in the middle) is reported corrupt, not retried forever.
func TestRead_LostEntries(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{NoPack: true})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	saveTurns(t, e, k, 0, 20)
	var seqs []uint64
	require.NoError(t, log.Range(ctx, k, 0, 0, func(en engine.Entry) bool { seqs = append(seqs, en.Seq); return true }))
	require.NoError(t, log.Delete(ctx, k, seqs[3]))
	_, _, err := e.Read(ctx, k, 0, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrCorrupt)
	_, _, err = e.Read(ctx, k, 3, engine.ReadOptions{Verify: true})
	require.NoError(t, err, "versions before the loss read")
}

// Stored sizes are claims: an entry whose head claims a huge conversation is refused as corrupt,
// not allocated (nor a panic).
func TestRead_CorruptSizes(t *testing.T) {
	e, log := newEngine(t, 1<<20, engine.Config{})
	k := engine.Key{Namespace: "n", Session: "s", Agent: "a"}
	_, err := save(e, engine.SaveRequest{Key: k, SaveID: "1", Payload: conversation(4)})
	require.NoError(t, err)
	last, err := log.Last(ctx, k)
	require.NoError(t, err)
	b := last.Data
	at := 6
	for range 2 { // version, messages
		_, n := binary.Uvarint(b[at:])
		at += n
	}
	_, n := binary.Uvarint(b[at:])
	forged := append(binary.AppendUvarint(append([]byte(nil), b[:at]...), 1<<60), b[at+n:]...)
	require.NoError(t, log.Purge(ctx, k))
	_, err = log.Append(ctx, k, forged, 0)
	require.NoError(t, err)
	e.Forget()
	_, _, err = e.Read(ctx, k, 0, engine.ReadOptions{})
	require.ErrorIs(t, err, engine.ErrCorrupt)
}
