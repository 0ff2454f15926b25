package kvstore

import (
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/snapshot"
)

// pieceSealError is a SealError of format 2's Store: also a snapshot.ErrCorrupt, which is what the
// format-2 edge answers code "corrupt" for (a sealing.SealError alone matches engine.ErrCorrupt).
type pieceSealError struct{ *sealing.SealError }

func (e pieceSealError) Unwrap() []error { return []error{e.SealError, snapshot.ErrCorrupt} }

// sealPiece is what the Store writes for a piece of a segment of namespace ns under kvKey: its
// envelope, bound to kvKey (a piece moved to another key, segment or namespace fails to open), or
// the piece itself when ns has no key.
func (s *Store) sealPiece(ns, kvKey string, piece []byte) []byte {
	stored, _ := s.keys.Load().Seal(ns, []byte(kvKey), piece)
	return stored
}

// openPiece returns piece i of a segment from what is stored under kvKey. Piece 0 decides whether
// the segment is sealed (*sealed), since only piece 0 starts with a known magic; the pieces after it
// follow it. A plain segment (written before encryption was turned on) reads as it is.
func (s *Store) openPiece(ns, kvKey string, i int, stored []byte, sealed *bool) ([]byte, error) {
	if i == 0 {
		*sealed = sealing.IsEnvelope(stored)
	}
	if !*sealed {
		return stored, nil
	}
	plain, err := s.keys.Load().Open(ns, []byte(kvKey), "stored piece "+kvKey, stored)
	if se, ok := err.(*sealing.SealError); ok {
		return nil, pieceSealError{se}
	}
	return plain, err
}

// SetKeys replaces the namespace keys (checkpointd re-reads --namespace-keys on SIGHUP): pieces
// written from then on are sealed with the new file's first keys, and what is stored opens with any
// key it holds. It returns the ids of the keys the new file no longer holds: whatever they sealed
// no longer opens. Encryption cannot be turned on or off while running (the pieces' size leaves room
// for the envelope only when it was on at start): that is an error, and the running keys stay.
func (s *Store) SetKeys(nk *sealing.Keys) (dropped []string, err error) {
	dropped, err = sealing.CheckReload(s.keys.Load(), nk)
	if err != nil {
		return nil, err
	}
	s.keys.Store(nk)
	return dropped, nil
}
