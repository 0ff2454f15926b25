package engine

import (
	"context"
	"errors"
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
// created, up to limit of them, with their heads (one read of each log's last entry), and the
// cursor of the next page (0: no more). Sessions deleted without a lease to keep, and names
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
	out := make([]SessionHead, 0, len(keys))
	for _, k := range keys {
		last, err := e.last(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		h := last.meta.Head
		if h.Version == 0 && h.Lease == nil {
			continue
		}
		sh := SessionHead{Key: k, Lease: h.Lease, Moved: h.Moved}
		if sh.Record, err = recordOf(k, h); err != nil {
			return nil, 0, err
		}
		if h.Version == 0 {
			sh.Record = Record{Key: k}
		}
		out = append(out, sh)
	}
	return out, next, nil
}

// Namespaces returns every namespace that has had a session, sorted.
func (e *Engine) Namespaces(ctx context.Context) ([]string, error) { return e.log.Namespaces(ctx) }
