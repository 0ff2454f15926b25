package transfer

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
)

// BenchmarkSealPiece is the cost of sealing and opening one stored piece of 1 MiB (the largest a
// segment is cut into), apart from NATS: what --namespace-keys adds per stored byte.
func BenchmarkSealPiece(b *testing.B) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	nk, err := ParseNamespaceKeys([]byte(`{"*":"` + base64.StdEncoding.EncodeToString(key) + `"}`))
	if err != nil {
		b.Fatal(err)
	}
	piece := make([]byte, 1<<20)
	_, _ = rand.Read(piece)
	k := nk.sealing("team")
	b.Run("seal", func(b *testing.B) {
		b.SetBytes(int64(len(piece)))
		for i := 0; i < b.N; i++ {
			_ = k.seal("team.s.main.id.0", piece)
		}
	})
	sealed := k.seal("team.s.main.id.0", piece)
	b.Run("open", func(b *testing.B) {
		b.SetBytes(int64(len(piece)))
		for i := 0; i < b.N; i++ {
			if _, err := nk.open("team", "team.s.main.id.0", sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
