package engine

import (
	"errors"
	"testing"

	"github.com/checkpointd/checkpointd/internal/pieces"
)

// joinParts joins an entry's parts and its own data in log order; a part that holds nothing was
// never written by writeParts (pieces are never empty), so it is a corrupt log, said as such.
func TestJoinParts(t *testing.T) {
	got, err := joinParts([]ent{{data: []byte("ab")}, {data: []byte("cd")}}, []byte("e"))
	if err != nil || string(got) != "abcde" {
		t.Fatalf("joinParts = %q, %v; want abcde", got, err)
	}
	_, err = joinParts([]ent{{data: []byte("ab")}, {data: nil}}, []byte("e"))
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, pieces.ErrEmpty) {
		t.Fatalf("an empty part: %v; want ErrCorrupt and pieces.ErrEmpty", err)
	}
}
