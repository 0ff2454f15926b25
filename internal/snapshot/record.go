package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Format 2's own records: the key, version record, lease and moved mark its heads, version index
// and layouts hold (docs/format.md §2–§6). They are spelled here, not borrowed from the protocol
// package (internal/wire), because format 2 is frozen: the bytes already on disk were written
// with these fields and JSON names, and a later change to the protocol must not change how a
// store of format 2 is read. They mirror the protocol's records of format 2's time field for field;
// internal/upgrade turns them into the log engine's.

// VersionFormat is the value of Version.Format that format 2 wrote.
const VersionFormat = 2

// MaxVersion is the largest version number (and lease epoch) format 2 assigned: 2^53-1.
const MaxVersion uint64 = 1<<53 - 1

// The reasons a version record gives that format 2 itself sets.
const (
	ReasonTurn    = "turn"
	ReasonMigrate = "migrate"
)

// The defaults Key.String leaves out.
const (
	DefaultNamespace = "default"
	DefaultAgent     = "main"
)

// Key names one agent's conversation: a namespace, a session and an agent.
type Key struct {
	Namespace string `json:"namespace"`
	Session   string `json:"session"`
	Agent     string `json:"agent"`
}

// String is the human form used in errors: namespace/session/agent with the defaults elided.
func (k Key) String() string {
	s := k.Session
	if k.Namespace != DefaultNamespace {
		s = k.Namespace + "/" + s
	}
	if k.Agent != DefaultAgent {
		s += " (agent " + k.Agent + ")"
	}
	return s
}

// Version is one immutable version's record, as format 2 stored it in a head and in its index.
type Version struct {
	Format      int       `json:"format"`
	Key         Key       `json:"key"`
	Version     uint64    `json:"version"`
	Parent      uint64    `json:"parent"` // 0 for the first version
	Hash        string    `json:"hash"`   // "sha256:<hex>" of the conversation's canonical bytes
	SaveID      string    `json:"saveId"`
	Writer      string    `json:"writer,omitempty"`
	Reason      string    `json:"reason"`
	Created     time.Time `json:"created"`
	RawBytes    int64     `json:"rawBytes"`    // canonical JSON size
	StoredBytes int64     `json:"storedBytes"` // compressed bytes this save added to storage
	Counts      Counts    `json:"counts"`
	Gen         uint64    `json:"gen"`              // the generation whose layout holds its messages
	ForkOf      *ForkRef  `json:"forkOf,omitempty"` // on the first version of a fork
	Origin      *Origin   `json:"origin,omitempty"` // on a version copied in by migrate or import
	Dialect     string    `json:"dialect,omitempty"`
}

// Counts are a version's messages by kind.
type Counts struct {
	Messages   int `json:"messages"`
	User       int `json:"user"`
	Assistant  int `json:"assistant"`
	ToolResult int `json:"toolResult"`
	Extension  int `json:"extension"`
	ToolCalls  int `json:"toolCalls"`
	System     int `json:"system,omitempty"`
}

// ForkRef is where a fork came from: a version of another session.
type ForkRef struct {
	Key     Key    `json:"key"`
	Version uint64 `json:"version"`
}

// Origin records that a version was copied from another deployment or a bundle file.
type Origin struct {
	Via    string    `json:"via"`
	Source string    `json:"source,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// Lease is who may write a session (lease.go).
type Lease struct {
	Key      Key       `json:"key"`
	Epoch    uint64    `json:"epoch"`
	Owner    string    `json:"owner,omitempty"`
	Acquired time.Time `json:"acquired,omitzero"`
	Expires  time.Time `json:"expires,omitzero"`
	Head     uint64    `json:"head"`
}

// Held reports whether someone holds the lease at now: it has an owner and has not expired.
func (l Lease) Held(now time.Time) bool { return l.Owner != "" && now.Before(l.Expires) }

// Moved marks a session migrated away: it refuses writes.
type Moved struct {
	To string    `json:"to"`
	At time.Time `json:"at,omitzero"`
}

// Hash names content as format 2's records do: "sha256:" and the lower-case hex SHA-256 of data.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
