package engine

import "context"

// Creator is what a Log may offer beside Log (optional; the engine reaches it through Create): a
// log's creation begun before its first entry is ready. A store that writes something before a
// log's first entry (logstore: the key's place in Sessions, a round trip of its own) starts that
// write at once, so that it travels while the save is validated and compressed, instead of after.
type Creator interface {
	// Create begins the creation of key's log and returns at once. The caller ends it with
	// exactly one call of the Creation's Append or Abandon.
	Create(ctx context.Context, key Key) Creation
}

// Creation is a log's creation under way (Create).
type Creation interface {
	// Append is Log.Append(ctx, key, data, 0) for the key the creation was begun for, with what the
	// store writes first already under way: the same outcomes (ErrConflict when the log is not
	// empty, nothing written; ...), and the same listing (Sessions lists the key once the entry is
	// stored; a creation refused takes its listing back, as Append does).
	Append(ctx context.Context, data []byte) (uint64, error)
	// Abandon ends a creation that appends nothing (its save was refused): what Create wrote is
	// taken back, so that Sessions does not list the key for it. An error says it could not be: the
	// key may then stay listed with an empty log, as after a crash between a creation's writes
	// (which the Log contract allows, and Sessions' callers skip).
	Abandon(ctx context.Context) error
}

// Create begins the creation of key's log on l: through l's own Create when l is a Creator, else
// as a plain Append once the entry is ready. A Log that wraps another (a decorator: sealing, bounds
// on each request) offers Creator through this, so that wrapping a log never costs a first save
// the head start of its listing.
func Create(ctx context.Context, l Log, key Key) Creation {
	if c, ok := l.(Creator); ok {
		return c.Create(ctx, key)
	}
	return appendCreation{l: l, key: key}
}

// appendCreation is the creation of a Log that is no Creator: nothing happens before Append.
type appendCreation struct {
	l   Log
	key Key
}

func (c appendCreation) Append(ctx context.Context, data []byte) (uint64, error) {
	return c.l.Append(ctx, c.key, data, 0)
}

func (c appendCreation) Abandon(context.Context) error { return nil }
