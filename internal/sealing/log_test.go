package sealing_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/engine/logtest"
	"github.com/checkpointd/checkpointd/internal/engine/memlog"
	"github.com/checkpointd/checkpointd/internal/sealing"
)

var ctx = context.Background()

// The decorator is an engine.Log like any other: the conformance suite passes through it over
// memlog, with every namespace sealed ("*") and with only some ("n", one of the suite's own, and
// "=" among its hostile ids), the others stored plain beside them.
func TestLog_ConformanceMemlog(t *testing.T) {
	for name, keys := range map[string]*sealing.Keys{
		"all sealed":  keysOf(t, map[string]any{"*": newKey()}),
		"some sealed": keysOf(t, map[string]any{"n": newKey(), "=": newKey()}),
	} {
		t.Run(name, func(t *testing.T) {
			newLog := func(t *testing.T) engine.Log {
				return sealing.NewLog(memlog.New(1<<20+sealing.EnvelopeOverhead), keys)
			}
			logtest.Run(t, newLog)
			logtest.RunDataReader(t, newLog) // a restore's tail reads without sequences go through the seal
		})
	}
}

// stored returns every entry and value of namespace ns as the inner log holds them, by place.
func stored(t *testing.T, inner engine.Log, ns string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	var cursor uint64
	for {
		keys, next, err := inner.Sessions(ctx, ns, cursor, 100)
		require.NoError(t, err)
		for _, k := range keys {
			require.NoError(t, inner.Range(ctx, k, 0, 0, func(e engine.Entry) bool {
				out[fmt.Sprintf("entry %d of %s", e.Seq, k)] = e.Data
				return true
			}))
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	require.NoError(t, inner.Values(ctx, ns, func(id string) bool {
		v, err := inner.Value(ctx, ns, id)
		require.NoError(t, err)
		out["value "+id] = v
		return true
	}))
	return out
}

// writeMarked writes entries and values holding marker to namespace ns of l, and returns them.
func writeMarked(t *testing.T, l engine.Log, ns, marker string) (entries, values map[string][]byte) {
	t.Helper()
	entries, values = map[string][]byte{}, map[string][]byte{}
	for _, s := range []string{"s1", "s2"} {
		k := engine.Key{Namespace: ns, Session: s, Agent: "main"}
		var after uint64
		for i := range 3 {
			data := []byte(fmt.Sprintf("CPL2 entry %d of %s: %s", i, s, marker))
			seq, err := l.Append(ctx, k, data, after)
			require.NoError(t, err)
			entries[fmt.Sprintf("entry %d of %s", seq, k)] = data
			after = seq
		}
	}
	for i := range 2 {
		id := fmt.Sprintf("%064x", i)
		v := []byte(fmt.Sprintf("value %d: %s", i, marker))
		require.NoError(t, l.PutValue(ctx, ns, id, v))
		values["value "+id] = v
	}
	return entries, values
}

// What a namespace with a key stores on the inner log is envelopes only, none holding the
// plaintext; a namespace without one is stored as it is (so the search finds what it looks for).
// Both read back as written.
func TestLog_InnerHoldsOnlyEnvelopes(t *testing.T) {
	inner := memlog.New(1 << 20)
	l := sealing.NewLog(inner, keysOf(t, map[string]any{"alice": newKey()}))
	for _, ns := range []string{"alice", "bob"} {
		marker := "marker-of-" + ns
		entries, values := writeMarked(t, l, ns, marker)
		raw := stored(t, inner, ns)
		require.Len(t, raw, len(entries)+len(values))
		for place, data := range raw {
			if ns == "alice" {
				require.True(t, sealing.IsEnvelope(data), "%s is not sealed", place)
				require.NotContains(t, string(data), marker, place)
				want := entries[place]
				if want == nil {
					want = values[place]
				}
				require.Len(t, data, len(want)+sealing.EnvelopeOverhead, place)
			} else {
				require.Contains(t, string(data), marker, "%s of a namespace without a key is plain", place)
			}
		}
		for place, want := range entries {
			var seq uint64
			var k string
			_, err := fmt.Sscanf(place, "entry %d of %s", &seq, &k)
			require.NoError(t, err)
			e, err := l.Get(ctx, engine.Key{Namespace: ns, Session: strings.Split(k, "/")[1], Agent: "main"}, seq)
			require.NoError(t, err)
			require.Equal(t, string(want), string(e.Data))
		}
		for place, want := range values {
			v, err := l.Value(ctx, ns, strings.TrimPrefix(place, "value "))
			require.NoError(t, err)
			require.Equal(t, string(want), string(v))
		}
	}
}

// requireSealError checks that err is a SealError for namespace ns that is an engine.ErrCorrupt,
// says want and names what, and does not hold secret.
func requireSealError(t *testing.T, err error, ns, what, want, secret string) {
	t.Helper()
	require.ErrorIs(t, err, engine.ErrCorrupt)
	var se *sealing.SealError
	require.True(t, errors.As(err, &se), "%v is not a SealError", err)
	require.Equal(t, ns, se.Namespace)
	require.ErrorContains(t, err, fmt.Sprintf("namespace %q: ", ns))
	require.ErrorContains(t, err, what)
	require.ErrorContains(t, err, want)
	require.NotContains(t, err.Error(), secret)
}

// Read with a wrong key, no key, or no keys at all: every read (Last, Get, Range, Value) fails
// with a SealError naming the namespace and the entry (or value) and the key id it needs, never
// with bytes; Range calls fn with nothing it cannot open.
func TestLog_WrongOrMissingKeyIsCorruptNeverBytes(t *testing.T) {
	inner := memlog.New(1 << 20)
	k1 := newKey()
	writer := sealing.NewLog(inner, keysOf(t, map[string]any{"*": k1}))
	k := engine.Key{Namespace: "team", Session: "s", Agent: "main"}
	secret := "the secret plan"
	seq, err := writer.Append(ctx, k, []byte(secret), 0)
	require.NoError(t, err)
	id := strings.Repeat("ab", 32)
	require.NoError(t, writer.PutValue(ctx, "team", id, []byte(secret)))
	e, err := inner.Get(ctx, k, seq)
	require.NoError(t, err)
	keyID := hex.EncodeToString(e.Data[5:13])

	// k1 held under another namespace's name opens: keys are found by the id in the envelope, and
	// what they sealed is bound to its place, not to the member of the file that lists them.
	_, err = sealing.NewLog(inner, keysOf(t, map[string]any{"other": k1, "team": newKey()})).Last(ctx, k)
	require.NoError(t, err)

	for name, keys := range map[string]*sealing.Keys{
		"wrong key":       keysOf(t, map[string]any{"*": newKey()}),
		"no key for team": keysOf(t, map[string]any{"other": newKey()}),
		"no keys":         nil,
	} {
		t.Log(name)
		reader := sealing.NewLog(inner, keys)
		entryWhat := fmt.Sprintf("log entry %d of session %q agent %q", seq, "s", "main")
		want := "encrypted with key " + keyID + ", which this checkpointd does not hold"
		_, err := reader.Last(ctx, k)
		requireSealError(t, err, "team", entryWhat, want, secret)
		_, err = reader.Get(ctx, k, seq)
		requireSealError(t, err, "team", entryWhat, want, secret)
		lasts, err := reader.Lasts(ctx, []engine.Key{{Namespace: "team", Session: "none", Agent: "main"}, k})
		require.Nil(t, lasts)
		requireSealError(t, err, "team", entryWhat, want, secret)
		calls := 0
		err = reader.Range(ctx, k, 0, 0, func(engine.Entry) bool { calls++; return true })
		requireSealError(t, err, "team", entryWhat, want, secret)
		require.Zero(t, calls, name)
		v, err := reader.Value(ctx, "team", id)
		require.Nil(t, v)
		requireSealError(t, err, "team", fmt.Sprintf("value %q", id), want, secret)
	}
}

// Sealed bytes are bound to their place: an entry copied (by whoever can write the store) into
// another session, agent or namespace's log, or made a value, and a value copied to another id or
// namespace or made an entry, fail to open, also where the same key seals both places ("*").
func TestLog_MovedBytesDoNotOpen(t *testing.T) {
	inner := memlog.New(1 << 20)
	l := sealing.NewLog(inner, keysOf(t, map[string]any{"*": newKey()}))
	src := engine.Key{Namespace: "team", Session: "a", Agent: "main"}
	seq, err := l.Append(ctx, src, []byte("entry of a"), 0)
	require.NoError(t, err)
	id := strings.Repeat("ab", 32)
	require.NoError(t, l.PutValue(ctx, "team", id, []byte("value ab")))
	entry, err := inner.Get(ctx, src, seq)
	require.NoError(t, err)
	value, err := inner.Value(ctx, "team", id)
	require.NoError(t, err)

	for _, dst := range []engine.Key{
		{Namespace: "team", Session: "b", Agent: "main"},
		{Namespace: "team", Session: "a", Agent: "other"},
		{Namespace: "other", Session: "a", Agent: "main"},
		{Namespace: "team", Session: "a\x01", Agent: "main"}, // ids are length-prefixed:
		{Namespace: "team", Session: "", Agent: "amain"},     // no two keys share a place
		{Namespace: "teama", Session: "", Agent: "main"},
	} {
		for _, data := range [][]byte{entry.Data, value} {
			last, _ := inner.Last(ctx, dst)
			seq, err := inner.Append(ctx, dst, data, last.Seq)
			require.NoError(t, err)
			_, err = l.Get(ctx, dst, seq)
			requireSealError(t, err, dst.Namespace, fmt.Sprintf("log entry %d of session %q agent %q", seq, dst.Session, dst.Agent), "does not decrypt", "entry of a")
		}
	}
	for _, dst := range [][2]string{{"team", strings.Repeat("cd", 32)}, {"other", id}} {
		for _, data := range [][]byte{entry.Data, value} {
			require.NoError(t, inner.DeleteValue(ctx, dst[0], dst[1]))
			require.NoError(t, inner.PutValue(ctx, dst[0], dst[1], data))
			_, err := l.Value(ctx, dst[0], dst[1])
			requireSealError(t, err, dst[0], fmt.Sprintf("value %q", dst[1]), "does not decrypt", "value ab")
		}
	}
	// The value made an entry of its own log's namespace, and the entry a value.
	last, _ := inner.Last(ctx, src)
	seq, err = inner.Append(ctx, src, value, last.Seq)
	require.NoError(t, err)
	_, err = l.Last(ctx, src)
	requireSealError(t, err, "team", "log entry", "does not decrypt", "value ab")
	require.NoError(t, inner.DeleteValue(ctx, "team", id))
	require.NoError(t, inner.PutValue(ctx, "team", id, entry.Data))
	_, err = l.Value(ctx, "team", id)
	requireSealError(t, err, "team", "value", "does not decrypt", "entry of a")
	// An altered byte.
	flipped := bytes.Clone(entry.Data)
	flipped[len(flipped)/2] ^= 1
	seq, err = inner.Append(ctx, src, flipped, seq)
	require.NoError(t, err)
	_, err = l.Get(ctx, src, seq)
	requireSealError(t, err, "team", "log entry", "does not decrypt", "entry of a")
	// The original still opens where it was written.
	e, err := l.Get(ctx, src, entry.Seq)
	require.NoError(t, err)
	require.Equal(t, "entry of a", string(e.Data))
}

// keyIDOf returns the key id of an envelope.
func keyIDOf(t *testing.T, stored []byte) string {
	t.Helper()
	require.True(t, sealing.IsEnvelope(stored))
	return hex.EncodeToString(stored[5:13])
}

// Keys rotate (SIGHUP: SetKeys): the new first key seals from then on, the old one still opens
// what it sealed; a file that leaves the old key out is applied, its id reported as dropped, and
// what it sealed no longer opens (corrupt), while the new key's entries do. Turning sealing on
// or off is refused and the running keys stay.
func TestLog_Rotation(t *testing.T) {
	inner := memlog.New(1 << 20)
	k1, k2 := newKey(), newKey()
	l := sealing.NewLog(inner, keysOf(t, map[string]any{"*": k1}))
	k := engine.Key{Namespace: "team", Session: "s", Agent: "main"}
	seq1, err := l.Append(ctx, k, []byte("under k1"), 0)
	require.NoError(t, err)
	e1, err := inner.Get(ctx, k, seq1)
	require.NoError(t, err)
	id1 := keyIDOf(t, e1.Data)

	dropped, err := l.SetKeys(keysOf(t, map[string]any{"team": []string{k2, k1}}))
	require.NoError(t, err)
	require.Empty(t, dropped)
	seq2, err := l.Append(ctx, k, []byte("under k2"), seq1)
	require.NoError(t, err)
	e2, err := inner.Get(ctx, k, seq2)
	require.NoError(t, err)
	id2 := keyIDOf(t, e2.Data)
	require.NotEqual(t, id1, id2, "the new first key seals")
	for seq, want := range map[uint64]string{seq1: "under k1", seq2: "under k2"} {
		e, err := l.Get(ctx, k, seq)
		require.NoError(t, err, "both keys open")
		require.Equal(t, want, string(e.Data))
	}

	_, err = l.SetKeys(nil)
	require.ErrorContains(t, err, "restart checkpointd to turn encryption off")
	_, err = l.Get(ctx, k, seq1)
	require.NoError(t, err, "a refused reload leaves the running keys")

	dropped, err = l.SetKeys(keysOf(t, map[string]any{"team": k2}))
	require.NoError(t, err)
	require.Equal(t, []string{id1}, dropped)
	_, err = l.Get(ctx, k, seq1)
	requireSealError(t, err, "team", fmt.Sprintf("log entry %d", seq1), "which this checkpointd does not hold", "under k1")
	e, err := l.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "under k2", string(e.Data))
	seq3, err := l.Append(ctx, k, []byte("after the drop"), seq2)
	require.NoError(t, err)
	e, err = l.Get(ctx, k, seq3)
	require.NoError(t, err)
	require.Equal(t, "after the drop", string(e.Data))
	require.Equal(t, 1, l.Keys().Count())

	plain := sealing.NewLog(memlog.New(1<<20), nil)
	_, err = plain.SetKeys(keysOf(t, map[string]any{"*": k1}))
	require.ErrorContains(t, err, "restart checkpointd to turn encryption on")
	require.Nil(t, plain.Keys())
}

// Data written plain (before the namespace had a key) reads as it is once it has one, as format 2
// reads its plain segments; a namespace without a key refuses plain data that would read back as
// an envelope, and a namespace with one seals such data like any other.
func TestLog_PlainDataOfAKeyedNamespace(t *testing.T) {
	inner := memlog.New(1 << 20)
	k := engine.Key{Namespace: "team", Session: "s", Agent: "main"}
	before := sealing.NewLog(inner, keysOf(t, map[string]any{"other": newKey()}))
	seq, err := before.Append(ctx, k, []byte("CPL2 written before the key"), 0)
	require.NoError(t, err)
	require.NoError(t, before.PutValue(ctx, "team", "v", []byte("plain value")))

	_, err = before.Append(ctx, k, []byte("CPKE looks sealed"), seq)
	require.ErrorIs(t, err, sealing.ErrLooksSealed)
	require.ErrorContains(t, err, `namespace "team": log entry after `)
	require.ErrorIs(t, before.PutValue(ctx, "team", "w", []byte("CPKE")), sealing.ErrLooksSealed)
	last, err := inner.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, seq, last.Seq, "a refused entry writes nothing")

	after := sealing.NewLog(inner, keysOf(t, map[string]any{"team": newKey()}))
	e, err := after.Last(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "CPL2 written before the key", string(e.Data))
	v, err := after.Value(ctx, "team", "v")
	require.NoError(t, err)
	require.Equal(t, "plain value", string(v))
	seq, err = after.Append(ctx, k, []byte("CPKE looks sealed"), seq)
	require.NoError(t, err, "sealed, it is an envelope holding the bytes")
	e, err = after.Get(ctx, k, seq)
	require.NoError(t, err)
	require.Equal(t, "CPKE looks sealed", string(e.Data))
}

// MaxEntry leaves room for the envelope, in every namespace: an entry or value of MaxEntry bytes
// is stored (sealed, exactly the inner log's largest), one byte more is ErrTooLarge and writes
// nothing.
func TestLog_MaxEntryLeavesRoomForTheEnvelope(t *testing.T) {
	inner := memlog.New(4096)
	l := sealing.NewLog(inner, keysOf(t, map[string]any{"sealed": newKey()}))
	require.Equal(t, 4096-sealing.EnvelopeOverhead, l.MaxEntry())
	for _, ns := range []string{"sealed", "plain"} {
		k := engine.Key{Namespace: ns, Session: "s", Agent: "main"}
		_, err := l.Append(ctx, k, make([]byte, l.MaxEntry()+1), 0)
		require.ErrorIs(t, err, engine.ErrTooLarge, ns)
		require.ErrorIs(t, l.PutValue(ctx, ns, "v", make([]byte, l.MaxEntry()+1)), engine.ErrTooLarge, ns)
		_, err = inner.Last(ctx, k)
		require.ErrorIs(t, err, engine.ErrNotFound, "nothing written")
		seq, err := l.Append(ctx, k, bytes.Repeat([]byte("x"), l.MaxEntry()), 0)
		require.NoError(t, err, ns)
		require.NoError(t, l.PutValue(ctx, ns, "v", bytes.Repeat([]byte("y"), l.MaxEntry())))
		e, err := inner.Get(ctx, k, seq)
		require.NoError(t, err)
		if ns == "sealed" {
			require.Len(t, e.Data, inner.MaxEntry())
		}
	}
}
