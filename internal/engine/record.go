package engine

import (
	"time"
)

// Record is what the engine keeps of one version: every field of the protocol's version record
// (docs/protocol.md §6) but the format number and the storage generation, which the edge adds.
type Record struct {
	Key     Key
	Version uint64
	Parent  uint64 // the head before it (0: none); an import keeps the number it found
	// Hash is "sha256:<hex>" of the conversation's canonical bytes ("[" messages "]").
	Hash        string
	SaveID      string
	Writer      string
	Reason      string
	Created     time.Time
	RawBytes    int64 // the conversation's canonical size, brackets included
	StoredBytes int64 // compressed bytes its save wrote (its new messages)
	Counts      Counts
	ForkOf      *ForkRef // on a version saved as a fork of another session
	Origin      *Origin  // on a version copied in by migrate or import
	Dialect     string   // "" is native
}

// Counts counts a conversation's messages by role, and its tool calls.
type Counts struct {
	Messages, User, Assistant, ToolResult, Extension, ToolCalls, System int
}

// ForkRef names the version a fork started from.
type ForkRef struct {
	Key     Key
	Version uint64
}

// Origin says where a copied version came from: Via "migrate" or "import".
type Origin struct {
	Via    string
	Source string
	At     time.Time
}

// Lease is who may write a session (lease.go). Epoch grows by one with every acquisition; Owner
// is empty once released.
type Lease struct {
	Epoch    uint64
	Owner    string
	Acquired time.Time
	Expires  time.Time
}

// Held reports whether the lease has an owner that has not let it expire at now.
func (l Lease) Held(now time.Time) bool { return l.Owner != "" && now.Before(l.Expires) }

// Moved marks a session sealed because it was migrated elsewhere: it refuses writes.
type Moved struct {
	To string
	At time.Time
}

// Reasons a version records (the protocol's).
const (
	ReasonTurn    = "turn"
	ReasonMigrate = "migrate"
	ReasonImport  = "import"
	ReasonFork    = "fork"
)

// MaxVersion is the largest version number (and lease epoch) the engine assigns or accepts: 2^53-1,
// the largest integer every JSON client reads exactly.
const MaxVersion uint64 = 1<<53 - 1
