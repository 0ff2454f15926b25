// Package pieces moves a body larger than one message. It owns the one rule for how large a
// piece may be, cuts a body into pieces, and joins pieces back in order with every check a
// receiver needs against a broken or hostile sender: continuity, repeats, gaps, overruns, a
// limit on the bytes, a memory budget, the final length and hash.
//
// It is the mechanism behind the three places where checkpointd moves large bytes: a save's
// chunks (numbered by index, Cp-Chunk), a read's replies (numbered by offset, Cp-Offset) and the
// engine's part entries (numbered by their place in the log); docs/protocol.md §12 and
// docs/format.md §8 describe it. It knows nothing of NATS: its callers read a piece's number from
// their own header, or from where the piece is stored.
package pieces

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// What each kind of message keeps of the server's max_payload (headers included) for its
// headers; the rest is for a piece (Size).
const (
	// ChunkRoom is a save's chunk: Cp-Chunk and a Nats-Msg-Id of a few hundred bytes, far
	// under it; 16 KiB is what every client since checkpointd 0.1 keeps, so pieces of every
	// client are cut alike.
	ChunkRoom = 16 << 10
	// ReplyRoom is a read's reply: Cp-Total, Cp-Offset, Cp-Encoding, Cp-Hash, Cp-Raw-Total and
	// the micro service's own headers. The first reply's Cp-Version record comes off the piece
	// on top of it (Size(limit, ReplyRoom+len(record))).
	ReplyRoom = 8 << 10
	// EntryRoom is a log entry: Nats-Expected-Last-Subject-Sequence and Cp-Index, ~90 bytes.
	EntryRoom = 1 << 10
	// MinMaxPayload is the smallest max_payload checkpointd runs on: it leaves pieces of at
	// least 16 KiB beside the largest room (and room for an encryption envelope).
	MinMaxPayload = 2 * ChunkRoom
)

// Size returns the most bytes of a body one message may carry: limit (the server's max_payload,
// headers included) less the room its headers need, or 0 when nothing is left (Split and Cut
// refuse that with ErrNoRoom).
func Size(limit, room int64) int64 { return max(limit-room, 0) }

// Split cuts body into the pieces a receiver joins by index: piece i holds body[i*size:], at
// most size bytes, every piece full but the last. An empty body is no piece. The pieces share
// body's memory.
func Split(body []byte, size int64) ([][]byte, error) {
	var out [][]byte
	for off := int64(0); off < int64(len(body)); off += size {
		p, err := Cut(body, off, size)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Cut returns the piece of body that starts at offset: at most size bytes (what a reader that
// numbers pieces by offset is sent). An offset of len(body) gives an empty piece: the end.
func Cut(body []byte, offset, size int64) ([]byte, error) {
	if size <= 0 {
		return nil, &Error{Piece: -1, At: offset, By: ByOffset, Err: ErrNoRoom,
			Detail: "the message limit leaves no room beside the headers; raise the server's max_payload"}
	}
	if offset < 0 || offset > int64(len(body)) {
		return nil, &Error{Piece: -1, At: offset, By: ByOffset, Err: ErrOutside, Detail: fmt.Sprintf("the body has %d bytes", len(body))}
	}
	return body[offset:min(offset+size, int64(len(body)))], nil
}

// ParseNumber reads the number a piece carries in a header (its index or offset): a decimal
// integer from 0, as every sender writes it. name is the header, for the error.
func ParseNumber(name, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, &Error{Piece: -1, At: -1, Err: ErrNumber, Detail: fmt.Sprintf("header %s: %q", name, s)}
	}
	return n, nil
}

// Hash is how the sender names a whole body: "sha256:" and the lower-case hex SHA-256 of it
// (wire.Hash, the protocol's hash of a conversation, is the same).
func Hash(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Check is the final check of a body joined and decoded: its length is the one announced (want
// < 0: none was) and its hash (got, computed by the caller, who may hash while decoding) the
// one announced.
func Check(length, want int64, got, wantHash string) error {
	if want >= 0 && length != want {
		return &Error{Piece: -1, At: -1, Err: ErrLength, Detail: fmt.Sprintf("%d bytes, %d announced", length, want)}
	}
	if got != wantHash {
		return &Error{Piece: -1, At: -1, Err: ErrHash, Detail: fmt.Sprintf("the bytes hash to %s, %s announced", got, wantHash)}
	}
	return nil
}

// The reasons a piece, or a body, is refused; an *Error carries one and says which piece.
var (
	ErrNoRoom   = errors.New("no room for a piece")
	ErrOutside  = errors.New("offset outside the body")
	ErrNumber   = errors.New("not a piece number")
	ErrGap      = errors.New("pieces missing before it")
	ErrRepeat   = errors.New("repeats bytes already received")
	ErrOverrun  = errors.New("runs past the announced end")
	ErrEmpty    = errors.New("empty piece before the end: the sender stalled")
	ErrTooLarge = errors.New("more bytes than the limit")
	ErrMissing  = errors.New("missing: the pieces ended before the announced end")
	ErrChanged  = errors.New("pieces of different bodies")
	ErrLength   = errors.New("body of the wrong length")
	ErrHash     = errors.New("body does not match its hash")
)

// Error is a refused piece (or body): which one, the number it carried, and why (Err, one of
// the errors above, for errors.Is).
type Error struct {
	Piece  int64     // the piece's place among those taken, from 0: the one expected next; -1: none
	At     int64     // the index or offset it carried; -1: none
	By     Numbering // what At is
	Err    error
	Detail string
}

func (e *Error) Error() string {
	s := "piece"
	if errors.Is(e.Err, ErrLength) || errors.Is(e.Err, ErrHash) {
		s = "body"
	}
	if e.Piece >= 0 {
		s += " " + strconv.FormatInt(e.Piece, 10)
	}
	if e.At >= 0 {
		s += " (" + e.By.String() + " " + strconv.FormatInt(e.At, 10) + ")"
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }
