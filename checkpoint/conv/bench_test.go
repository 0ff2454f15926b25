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

// BenchmarkViewAnthropic: a 2.3 MB pi session's request-ready anthropic view (decode, shape,
// write, validate), and BenchmarkTrack its trackers, beside the typed native round trip above.
func BenchmarkViewAnthropic(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := As(in, "native", "anthropic", ViewOptions{OmitExtensions: true, CompactionAsUser: true, OmitMembers: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTrack(b *testing.B) {
	in, err := os.ReadFile("../../testdata/corpus/pi_before_compaction.json")
	if err != nil {
		b.Fatal(err)
	}
	c, err := Decode("native", in)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Track(c, 200000)
	}
}
