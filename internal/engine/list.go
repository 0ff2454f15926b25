package engine

import (
	"context"
	"fmt"
)

// SessionHead is a session as a listing shows it: its head version's record (Version 0: leased
// before any version, or deleted while leased), its lease and its seal.
type SessionHead struct {
	Key    Key
	Record Record
	Lease  *Lease
	Moved  *Moved
}

// Sessions returns the sessions of namespace ns from cursor (0: the first) in the order they were
// created, up to limit of them, with their heads (the page's last entries, read at once: Log.Lasts),
// and the cursor of the next page (0: no more). Sessions deleted without a lease to keep, and names
// whose log is empty (a creation that crashed half-way), are left out: a page may hold fewer than
// limit.
func (e *Engine) Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]SessionHead, uint64, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("%w: a page of %d sessions", ErrBadRequest, limit)
	}
	keys, next, err := e.log.Sessions(ctx, ns, cursor, limit)
	if err != nil {
		return nil, 0, err
	}
	lasts, err := e.log.Lasts(ctx, keys)
	if err != nil {
		return nil, 0, err
	}
	if len(lasts) != len(keys) { // a Log that breaks its contract: never index past its answer
		return nil, 0, fmt.Errorf("the store returned %d last entries for %d sessions of %q", len(lasts), len(keys), ns)
	}
	out := make([]SessionHead, 0, len(keys))
	for i, k := range keys {
		if lasts[i].Seq == 0 { // an empty log
			continue
		}
		sh, ok, err := sessionHead(k, lasts[i])
		if err != nil {
			return nil, 0, err
		}
		if ok {
			out = append(out, sh)
		}
	}
	return out, next, nil
}

// sessionHead is what a listing shows of k, whose last entry is en; not ok for a session deleted
// without a lease to keep.
func sessionHead(k Key, en Entry) (SessionHead, bool, error) {
	m, _, err := decodeEntry(en.Data)
	if err != nil {
		return SessionHead{}, false, fmt.Errorf("session %s entry %d: %w", k, en.Seq, err)
	}
	h := m.Head
	if h.Version == 0 && h.Lease == nil {
		return SessionHead{}, false, nil
	}
	sh := SessionHead{Key: k, Lease: h.Lease, Moved: h.Moved}
	if sh.Record, err = recordOf(k, h); err != nil {
		return SessionHead{}, false, err
	}
	if h.Version == 0 {
		sh.Record = Record{Key: k}
	}
	return sh, true, nil
}

// Namespaces returns every namespace that has had a session, sorted.
func (e *Engine) Namespaces(ctx context.Context) ([]string, error) { return e.log.Namespaces(ctx) }
