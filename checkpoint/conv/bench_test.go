package conv

import (
	"os"
	"testing"
)

// BenchmarkDecodeEncodeNative: the typed round trip of the largest native transcript of the corpus.
func BenchmarkDecodeEncodeNative(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_large_session.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := Decode("native", in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Encode("native"); err != nil {
			b.Fatal(err)
		}
	}
}
