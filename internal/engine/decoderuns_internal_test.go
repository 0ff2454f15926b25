package engine

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
)

// decodeRuns sizes its buffer from the pieces' raw sizes before decoding (a pack's decoding
// copied its buffer at every block otherwise), but a raw size is a stored claim: a corrupt piece
// claiming 200 MiB for a few bytes must be refused without the 200 MiB being allocated.
func TestDecodeRuns_BufferBoundedByTheBytesRead(t *testing.T) {
	enc, err := newEncoder(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Repeat([]byte(`{"role":"user","content":"hello"},`), 100)
	data, err := enc.add(plain)
	if err != nil {
		t.Fatal(err)
	}
	data = append([]byte(nil), data...)

	got, err := decodeRuns([]byte("prefix:"), []*pieceInfo{{RawBytes: int64(len(plain)), Frame: true}}, [][]byte{data})
	if err != nil || string(got) != "prefix:"+string(plain) {
		t.Fatalf("decodeRuns = %d bytes, %v; want the prefix and the %d bytes", len(got), err, len(plain))
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = decodeRuns(nil, []*pieceInfo{{RawBytes: 200 << 20, Frame: true}}, [][]byte{data})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a piece claiming 200 MiB: %v; want ErrCorrupt", err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
		t.Fatalf("a piece claiming 200 MiB for %d stored bytes allocated %d bytes", len(data), grown)
	}
}
