// Package memlog is an in-memory engine.Log: a map of slices and one sequence counter. It keeps
// nothing across restarts; it exists so that the engine's rules are tested without a server, and it
// passes the same conformance suite (engine/logtest) as the JetStream log.
package memlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// Log is an engine.Log in memory. The zero value is not usable: call New.
type Log struct {
	maxEntry int

	mu       sync.Mutex
	seq      uint64                        // the last sequence given out, over every log
	logs     map[engine.Key][]engine.Entry // entries in order
	sessions map[string][]sessionEntry     // by namespace, in creation order
	values   map[string]map[string][]byte  // namespace → id → blob
}

type sessionEntry struct {
	seq uint64
	key engine.Key
}

var _ engine.Log = (*Log)(nil)

// New returns an empty log whose entries may be up to maxEntry bytes.
func New(maxEntry int) *Log {
	return &Log{maxEntry: maxEntry, logs: map[engine.Key][]engine.Entry{},
		sessions: map[string][]sessionEntry{}, values: map[string]map[string][]byte{}}
}

func (l *Log) MaxEntry() int { return l.maxEntry }

func (l *Log) Last(ctx context.Context, key engine.Key) (engine.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.logs[key]
	if len(es) == 0 {
		return engine.Entry{}, fmt.Errorf("log %s: %w", key, engine.ErrNotFound)
	}
	return clone(es[len(es)-1]), nil
}

// Lasts reads every key's last entry under one lock: a snapshot of the store.
func (l *Log) Lasts(ctx context.Context, keys []engine.Key) ([]engine.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]engine.Entry, len(keys))
	for i, k := range keys {
		if es := l.logs[k]; len(es) > 0 {
			out[i] = clone(es[len(es)-1])
		}
	}
	return out, nil
}

func (l *Log) Moved(ctx context.Context, key engine.Key, seq uint64) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.logs[key]
	return len(es) > 0 && es[len(es)-1].Seq > seq, nil
}

func (l *Log) Append(ctx context.Context, key engine.Key, data []byte, after uint64) (uint64, error) {
	if len(data) > l.maxEntry {
		return 0, fmt.Errorf("log %s: %d bytes: %w (max %d)", key, len(data), engine.ErrTooLarge, l.maxEntry)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.logs[key]
	var last uint64
	if len(es) > 0 {
		last = es[len(es)-1].Seq
	}
	if last != after {
		return 0, fmt.Errorf("log %s: last entry %d, expected %d: %w", key, last, after, engine.ErrConflict)
	}
	if len(es) == 0 {
		l.seq++
		l.sessions[key.Namespace] = append(l.sessions[key.Namespace], sessionEntry{l.seq, key})
	}
	l.seq++
	l.logs[key] = append(es, engine.Entry{Seq: l.seq, Data: slices.Clone(data)})
	return l.seq, nil
}

func (l *Log) Get(ctx context.Context, key engine.Key, seq uint64) (engine.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.logs[key]
	i, ok := slices.BinarySearchFunc(es, seq, func(e engine.Entry, s uint64) int { return cmp.Compare(e.Seq, s) })
	if !ok {
		return engine.Entry{}, fmt.Errorf("log %s entry %d: %w", key, seq, engine.ErrNotFound)
	}
	return clone(es[i]), nil
}

func (l *Log) Range(ctx context.Context, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	l.mu.Lock()
	es := slices.Clone(l.logs[key])
	l.mu.Unlock()
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.Seq < from || (upTo != 0 && e.Seq > upTo) {
			continue
		}
		if !fn(clone(e)) {
			return nil
		}
	}
	return nil
}

func (l *Log) Delete(ctx context.Context, key engine.Key, seqs ...uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.logs[key]
	if len(es) > 0 && slices.Contains(seqs, es[len(es)-1].Seq) {
		return fmt.Errorf("log %s: entry %d is the last one and is never deleted", key, es[len(es)-1].Seq)
	}
	l.logs[key] = slices.DeleteFunc(es, func(e engine.Entry) bool { return slices.Contains(seqs, e.Seq) })
	return nil
}

func (l *Log) Purge(ctx context.Context, key engine.Key) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.logs, key)
	l.sessions[key.Namespace] = slices.DeleteFunc(l.sessions[key.Namespace], func(s sessionEntry) bool { return s.key == key })
	return nil
}

func (l *Log) Sessions(ctx context.Context, ns string, cursor uint64, limit int) ([]engine.Key, uint64, error) {
	if limit <= 0 {
		return nil, 0, errors.New("memlog: Sessions needs a positive limit")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []engine.Key
	for _, s := range l.sessions[ns] {
		if s.seq < cursor {
			continue
		}
		if len(keys) == limit {
			return keys, s.seq, nil
		}
		keys = append(keys, s.key)
	}
	return keys, 0, nil
}

func (l *Log) Namespaces(ctx context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for ns, ss := range l.sessions {
		if len(ss) > 0 {
			out = append(out, ns)
		}
	}
	for ns, vs := range l.values { // a namespace whose sessions were purged may hold values
		if len(vs) > 0 && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (l *Log) PutValue(ctx context.Context, ns, id string, blob []byte) error {
	if len(blob) > l.maxEntry {
		return fmt.Errorf("value %s/%s: %d bytes: %w (max %d)", ns, id, len(blob), engine.ErrTooLarge, l.maxEntry)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.values[ns] == nil {
		l.values[ns] = map[string][]byte{}
	}
	if _, ok := l.values[ns][id]; !ok {
		l.values[ns][id] = slices.Clone(blob)
	}
	return nil
}

func (l *Log) Value(ctx context.Context, ns, id string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.values[ns][id]
	if !ok {
		return nil, fmt.Errorf("value %s/%s: %w", ns, id, engine.ErrNotFound)
	}
	return slices.Clone(b), nil
}

func (l *Log) Values(ctx context.Context, ns string, fn func(id string) bool) error {
	l.mu.Lock()
	ids := make([]string, 0, len(l.values[ns]))
	for id := range l.values[ns] {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id) {
			return nil
		}
	}
	return nil
}

func (l *Log) DeleteValue(ctx context.Context, ns, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.values[ns], id)
	return nil
}

func clone(e engine.Entry) engine.Entry { return engine.Entry{Seq: e.Seq, Data: slices.Clone(e.Data)} }

var _ engine.DataReader = (*Log)(nil)

// ReadData implements engine.DataReader.
func (l *Log) ReadData(ctx context.Context, key engine.Key, after uint64, n int, fn func(data []byte) bool) error {
	if n <= 0 {
		return nil
	}
	return l.Range(ctx, key, after+1, 0, func(e engine.Entry) bool {
		n--
		return fn(e.Data) && n > 0
	})
}
