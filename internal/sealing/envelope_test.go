package sealing_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/sealing"
)

// A piece sealed by format 2's code before it moved here (internal/transfer/namespacekeys.go at
// 29cd2f3) with the key 00 01 … 1f, stored under cp_segments key "team.s1.main.9f1c.0". The
// envelope did not change: it still opens, to the same bytes.
const format2Piece = "43504b4501f2f7448da63543f0d7b9100185cbd4cfe1a27a322ff1b94ca8adc6195812178fe95ed19abf59ae98395e09a8a434db910e34f92ae1084ce3705555bb9e57f2c684e7ed9060c6b6529457cad564e353a1c4896e04e9dc8a5258c4b3a358"

func TestOpen_Format2EnvelopeUnchanged(t *testing.T) {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(i)
	}
	ks := keysOf(t, map[string]any{"team": base64.StdEncoding.EncodeToString(k)})
	stored, err := hex.DecodeString(format2Piece)
	require.NoError(t, err)
	require.True(t, sealing.IsEnvelope(stored))
	plain, err := ks.Open("team", []byte("team.s1.main.9f1c.0"), "stored piece team.s1.main.9f1c.0", stored)
	require.NoError(t, err)
	require.Equal(t, "CPKT a format-2 piece sealed by transfer/namespacekeys.go", string(plain))

	sealed, ok := ks.Seal("team", []byte("team.s1.main.9f1c.0"), plain)
	require.True(t, ok)
	require.Equal(t, len(stored), len(sealed))
	require.Equal(t, stored[:13], sealed[:13], "same magic, version and key id")
	require.NotEqual(t, stored[13:25], sealed[13:25], "a fresh nonce")
	require.Equal(t, len(plain)+sealing.EnvelopeOverhead, len(sealed))
	require.Equal(t, 41, sealing.EnvelopeOverhead)

	_, err = ks.Open("team", []byte("team.s1.main.9f1c.1"), "stored piece team.s1.main.9f1c.1", stored)
	require.ErrorContains(t, err, "does not decrypt", "bound to its place")
}

// Whatever is wrong with an envelope, Open returns a *SealError that is an engine.ErrCorrupt,
// names the namespace, the place and (once readable) the key id, and never holds the bytes.
func TestOpen_TypedErrorsNeverTheBytes(t *testing.T) {
	k1 := newKey()
	ks := keysOf(t, map[string]any{"*": k1})
	plain := []byte("secret conversation bytes")
	place := []byte("here")
	sealed, ok := ks.Seal("n", place, plain)
	require.True(t, ok)
	require.False(t, bytes.Contains(sealed, plain))
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	version2 := bytes.Clone(sealed)
	version2[4] = 2
	other := keysOf(t, map[string]any{"*": newKey()})
	for _, tc := range []struct {
		name   string
		keys   *sealing.Keys
		stored []byte
		place  string
		want   string
		keyID  bool
	}{
		{"a flipped bit", ks, flipped, "here", "does not decrypt", true},
		{"another place", ks, sealed, "there", "does not decrypt", true},
		{"another key", other, sealed, "here", "which this checkpointd does not hold", true},
		{"no keys", nil, sealed, "here", "which this checkpointd does not hold", true},
		{"an unknown version", ks, version2, "here", "envelope version 2 is unknown", false},
		{"a truncated envelope", ks, sealed[:30], "here", "shorter than its envelope", false},
		{"only the magic", ks, []byte("CPKE"), "here", "shorter than its envelope", false},
	} {
		got, err := tc.keys.Open("n", []byte(tc.place), "the thing", tc.stored)
		require.Nil(t, got, tc.name)
		require.ErrorIs(t, err, engine.ErrCorrupt, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		require.ErrorContains(t, err, `namespace "n": the thing: `, tc.name)
		var se *sealing.SealError
		require.True(t, errors.As(err, &se), tc.name)
		require.Equal(t, "n", se.Namespace)
		if tc.keyID {
			require.Equal(t, hex.EncodeToString(sealed[5:13]), se.KeyID, tc.name)
			require.Contains(t, err.Error(), se.KeyID, tc.name)
		}
		require.NotContains(t, err.Error(), string(plain), tc.name)
	}
}

// BenchmarkSealPiece is the cost of sealing and opening 1 MiB (the largest piece format 2 cuts a
// segment into, and the size of a log entry at JetStream's default max_payload), apart from NATS:
// what --namespace-keys adds per stored byte.
func BenchmarkSealPiece(b *testing.B) {
	ks := keysOf(b, map[string]any{"*": newKey()})
	piece := make([]byte, 1<<20)
	_, _ = rand.Read(piece)
	place := []byte("team.s.main.id.0")
	b.Run("seal", func(b *testing.B) {
		b.SetBytes(int64(len(piece)))
		for i := 0; i < b.N; i++ {
			_, _ = ks.Seal("team", place, piece)
		}
	})
	sealed, _ := ks.Seal("team", place, piece)
	b.Run("open", func(b *testing.B) {
		b.SetBytes(int64(len(piece)))
		for i := 0; i < b.N; i++ {
			if _, err := ks.Open("team", place, "piece", sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
