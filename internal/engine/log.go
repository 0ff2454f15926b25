// Package engine is checkpointd's next storage domain (docs/format.md §8): every session is an
// append-only log of entries, a save is one entry appended with a compare-and-swap on the log's
// last sequence, and everything the engine knows of a session (versions, leases, forks, packs) is
// read back from its entries. It knows nothing of NATS: storage is the Log interface below,
// implemented over one JetStream stream in internal/logstore and in memory in engine/memlog, and
// both pass the conformance suite in engine/logtest.
//
// The package is being built beside internal/snapshot (format 2, five KV buckets) and replaces it
// once the daemon runs on it (issue 12); it then takes the name snapshot.
package engine

import (
	"context"
	"errors"
	"fmt"
)

// Key names one session's log: a namespace (tenant), a session and an agent. The engine treats
// the three as opaque strings; a Log encodes them as it needs (docs/protocol.md §2).
type Key struct {
	Namespace string
	Session   string
	Agent     string
}

func (k Key) String() string { return fmt.Sprintf("%s/%s/%s", k.Namespace, k.Session, k.Agent) }

// Entry is one entry of a log: its bytes, and its sequence. Sequences grow across every log of a
// store (a JetStream stream sequence), never repeat, and are never 0, so that an entry of one log
// can name an entry of another (a fork names what it shares of its source).
type Entry struct {
	Seq  uint64
	Data []byte
}

// Errors a Log reports; callers tell them apart with errors.Is.
var (
	// ErrNotFound: no such entry, log or value.
	ErrNotFound = errors.New("not found")
	// ErrConflict: an Append's expected last sequence is not the log's last sequence (another
	// writer appended first, or the caller's view of the log is stale).
	ErrConflict = errors.New("the log moved on (compare-and-swap lost)")
	// ErrTooLarge: an entry or value larger than the Log's MaxEntry.
	ErrTooLarge = errors.New("entry too large for the store")
	// ErrUnavailable: the store could not answer for now (a replicated stream with no leader, during
	// an election); nothing was written. Callers may try again.
	ErrUnavailable = errors.New("store temporarily unavailable")
)

// Log is what the engine needs from storage: per session, an ordered list of byte strings with a
// compare-and-swap on the last one; per namespace, the list of its sessions and a set of values
// written once. Every method is safe for concurrent use, also by several processes (daemons)
// sharing one store, and every write is durable when it returns.
//
// Every read sees every Append and PutValue that returned before it began. What Delete, Purge and
// DeleteValue remove, on the other hand, may still be read by Range and listed by Sessions for a
// moment after they returned, on a replicated store (a replica that has not applied the delete
// yet); Last, Lasts, Get and Value reflect it at once (so a listing that checks the heads of a
// Sessions page with Lasts, as Engine.Sessions does, never shows a purged log).
type Log interface {
	// MaxEntry is the largest Data an Append or PutValue accepts; larger ones get ErrTooLarge.
	MaxEntry() int

	// Last returns key's last entry, or ErrNotFound if its log is empty. It sees every Append that
	// returned before it was called (read-your-writes, also on a replicated store).
	Last(ctx context.Context, key Key) (Entry, error)
	// Lasts returns the last entry of each key's log, in the order of keys, in as few requests as
	// the store allows (a page of a listing: docs/format.md §8.6). A key whose log is empty gets
	// an Entry with Seq 0 (and no Data); a key given twice gets its entry twice. The keys may
	// belong to any namespaces and be any number (a store splits them into requests as it needs);
	// an invalid key fails the whole call. Like Last, it sees every Append and every Purge that
	// returned before it was called (also on a replicated store). The entries are held at once: a
	// caller bounds len(keys) (up to len(keys) × MaxEntry bytes).
	Lasts(ctx context.Context, keys []Key) ([]Entry, error)
	// Moved reports whether key's log has an entry after sequence seq: what a caller that saw the
	// log's last entry at seq asks instead of Last to learn whether it still is (a small answer
	// when it is, however large that entry). Like Last, it sees every Append that returned before
	// it was called (also on a replicated store). It cannot see a Purge: a purged log that nothing
	// was appended to since answers false, so a caller that trusts what it saw at seq must forget
	// it when it purges (Engine.Forget), and a log's last entry is otherwise never removed (Delete
	// refuses it).
	Moved(ctx context.Context, key Key, seq uint64) (bool, error)
	// Append adds data as key's next entry if the log's last entry is still at sequence after
	// (0: the log must be empty), and returns the new entry's sequence; otherwise ErrConflict and
	// nothing is written. The first Append of a log also enters key in its namespace's list
	// (Sessions).
	Append(ctx context.Context, key Key, data []byte, after uint64) (uint64, error)
	// Get returns the entry of key's log at sequence seq, or ErrNotFound (none, deleted, or an
	// entry of another log).
	Get(ctx context.Context, key Key, seq uint64) (Entry, error)
	// Range calls fn with key's entries whose sequence is in [from, upTo] (upTo 0: to the end) in
	// order, until fn returns false. Entries deleted meanwhile may be missing; a caller that must
	// see every entry up to a known one checks that it came. Entries deleted just before may still
	// come (a replica behind the leader answering; a Delete is not read-your-writes): readers skip
	// what a pack has taken.
	Range(ctx context.Context, key Key, from, upTo uint64, fn func(Entry) bool) error
	// Delete removes the entries of key's log at the given sequences (ones already gone are
	// skipped). The log's last entry is never deleted: Delete refuses it with an error.
	Delete(ctx context.Context, key Key, seqs ...uint64) error
	// Purge removes key's whole log and its place in Sessions.
	Purge(ctx context.Context, key Key) error

	// Sessions returns up to limit keys of namespace ns, in the order their logs were created,
	// starting at cursor (0: the first), and the cursor of the next page (0: no more). A key may be
	// listed whose log is empty (a crash between the two writes of a creation, a purge under
	// way, a Purge of an empty log, which may leave the listing of what could be a creation
	// under way, or, on a replicated store, a Purge that returned a moment ago): callers check
	// with Last or Lasts. A key may also be listed twice, in two pages (a creation
	// that failed without knowing whether its entry was stored, tried again), never twice in one
	// page: callers that gather several pages drop the keys they already have.
	Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]Key, uint64, error)
	// Namespaces returns every namespace that has a session or a value, sorted (so that a sweep
	// of values visits a namespace whose sessions were all purged). A namespace that has neither
	// any more may still be listed (a store may keep its index): callers find it empty.
	Namespaces(ctx context.Context) ([]string, error)

	// PutValue stores blob as value id of namespace ns if it has none yet (values are named by
	// their content: a second writer of the same id stores nothing and gets nil).
	PutValue(ctx context.Context, ns, id string, blob []byte) error
	// Value returns value id of namespace ns, or ErrNotFound.
	Value(ctx context.Context, ns, id string) ([]byte, error)
	// Values calls fn with the id of every value of namespace ns, until fn returns false.
	Values(ctx context.Context, ns string, fn func(id string) bool) error
	// DeleteValue removes value id of namespace ns (none: nil).
	DeleteValue(ctx context.Context, ns, id string) error
}

// DataReader is what a Log may offer beside Log (optional; the engine checks with a type
// assertion): the data of a log's entries without their sequences, which costs JetStream about
// half as much per entry as Range (a batched direct get without headers, docs/format.md §8.6).
// A restore reads the entries after a session's last pack this way when it knows how many there
// are, and checks that the last one it read is the log's last entry; otherwise it uses Range.
type DataReader interface {
	// ReadData calls fn with the data of key's entries after sequence after, in order, until it
	// has passed n of them or fn returns false. Fewer than n if the log has fewer after after.
	ReadData(ctx context.Context, key Key, after uint64, n int, fn func(data []byte) bool) error
}
